//! The pieces every signature scheme shares: HMAC-SHA256 over the raw body,
//! constant-time comparison against any of several secrets, and the
//! timestamp window.

use hmac::{Hmac, KeyInit, Mac};
use secrecy::{ExposeSecret, SecretSlice, SecretString};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Why a request was not accepted as signed by the provider: answered 401.
///
/// The messages are short reasons a provider's dashboard can show; none
/// of them contains the expected signature or anything derived from a secret.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    /// A required header is absent.
    #[error("missing {0} header")]
    MissingHeader(&'static str),
    /// A header is present but does not follow the provider's format.
    #[error("malformed {0} header")]
    MalformedHeader(&'static str),
    /// The signed timestamp is older than the tolerance.
    #[error("timestamp too old")]
    TimestampTooOld,
    /// The signed timestamp is further in the future than the tolerance.
    #[error("timestamp in the future")]
    TimestampInFuture,
    /// No signature in the header matches any configured secret.
    #[error("no matching signature")]
    NoMatchingSignature,
}

/// A configured secret that is not `whsec_<base64>` (or plain base64), for
/// the schemes that decode their secrets.
#[derive(Debug, thiserror::Error)]
#[error("secret #{position} is not base64 after its whsec_ prefix")]
pub struct InvalidSecret {
    /// 1-based position in the configured list; the secret itself is never shown.
    pub position: usize,
}

/// Length of an HMAC-SHA256 tag.
pub const TAG_LEN: usize = 32;

/// A provider's signing keys, in configuration order (rotation: any may verify).
pub struct SigningKeys(Vec<SecretSlice<u8>>);

impl SigningKeys {
    /// Wraps keys already decoded from their configured form.
    pub fn new(keys: Vec<SecretSlice<u8>>) -> Self {
        SigningKeys(keys)
    }

    /// Keys that are the secrets' UTF-8 bytes as configured, as Paddle,
    /// Stripe and GitHub use them (no decoding, a `whsec_` prefix included).
    pub fn utf8(secrets: &[SecretString]) -> Self {
        SigningKeys(
            secrets
                .iter()
                .map(|secret| SecretSlice::from(secret.expose_secret().as_bytes().to_vec()))
                .collect(),
        )
    }

    /// True when no key is configured (the provider is then disabled).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Position of the first key whose HMAC-SHA256 over the concatenated
    /// `message` parts equals one of `candidates`.
    ///
    /// Why constant time: comparing with `==` would stop at the first wrong
    /// byte and let an attacker learn the expected tag byte by byte.
    pub fn position_of_match(&self, message: &[&[u8]], candidates: &[[u8; TAG_LEN]]) -> Option<usize> {
        self.0.iter().position(|key| {
            let expected = hmac_sha256(key.expose_secret(), message);
            candidates
                .iter()
                .fold(subtle::Choice::from(0), |found, candidate| found | expected.ct_eq(candidate))
                .into()
        })
    }
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKeys([REDACTED; {}])", self.0.len())
    }
}

/// HMAC-SHA256 of the concatenation of `parts` under `key`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; TAG_LEN] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Rejects a signed timestamp (unix seconds) more than `tolerance` seconds
/// before or after `now`.
///
/// Why both directions: an old timestamp is a captured request replayed
/// later; a future one would stay replayable for as long as it is ahead.
pub fn check_timestamp(timestamp: i64, now: i64, tolerance: u64) -> Result<(), SignatureError> {
    let drift = i128::from(now) - i128::from(timestamp);
    if drift > i128::from(tolerance) {
        Err(SignatureError::TimestampTooOld)
    } else if -drift > i128::from(tolerance) {
        Err(SignatureError::TimestampInFuture)
    } else {
        Ok(())
    }
}

/// Parses a unix-seconds timestamp as providers write it: ASCII digits only.
pub fn parse_unix_seconds(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 18 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A 64-hex-digit HMAC-SHA256 tag, decoded; anything else is `None`.
pub fn hex_tag(text: &str) -> Option<[u8; TAG_LEN]> {
    let mut tag = [0u8; TAG_LEN];
    hex::decode_to_slice(text, &mut tag).ok().map(|()| tag)
}

/// The providers' published test vectors for `provider`
/// (tests/fixtures/signature-vectors.json).
#[cfg(test)]
pub(crate) fn published_vectors(provider: &str) -> Vec<serde_json::Value> {
    let all: serde_json::Value =
        serde_json::from_str(include_str!("../../tests/fixtures/signature-vectors.json")).unwrap();
    all[provider].as_array().cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(secrets: &[&str]) -> SigningKeys {
        SigningKeys::new(secrets.iter().map(|s| SecretSlice::from(s.as_bytes().to_vec())).collect())
    }

    #[test]
    fn the_matching_key_is_found_by_position() {
        let tag = hmac_sha256(b"second", &[b"msg"]);
        let keys = keys(&["first", "second"]);
        assert_eq!(keys.position_of_match(&[b"msg"], &[[0; TAG_LEN], tag]), Some(1));
        assert_eq!(keys.position_of_match(&[b"other"], &[tag]), None);
    }

    #[test]
    fn the_message_parts_are_concatenated() {
        assert_eq!(hmac_sha256(b"k", &[b"ab", b"c"]), hmac_sha256(b"k", &[b"abc"]));
    }

    #[test]
    fn timestamps_inside_the_window_pass_in_both_directions() {
        assert_eq!(check_timestamp(1000, 1300, 300), Ok(()));
        assert_eq!(check_timestamp(1300, 1000, 300), Ok(()));
        assert_eq!(check_timestamp(999, 1300, 300), Err(SignatureError::TimestampTooOld));
        assert_eq!(check_timestamp(1301, 1000, 300), Err(SignatureError::TimestampInFuture));
        assert_eq!(check_timestamp(i64::MAX, i64::MIN, 300), Err(SignatureError::TimestampInFuture));
    }

    #[test]
    fn only_plain_digits_are_timestamps() {
        assert_eq!(parse_unix_seconds("1696195954"), Some(1696195954));
        for bad in ["", "-5", "+5", " 5", "5e3", "12a", "9999999999999999999999"] {
            assert_eq!(parse_unix_seconds(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn hex_tags_are_exactly_64_hex_digits() {
        assert_eq!(hex_tag(&"0F".repeat(TAG_LEN)), Some([0x0f; TAG_LEN]));
        for bad in ["", "00", &"0".repeat(66), &"g".repeat(64)] {
            assert_eq!(hex_tag(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn debug_never_shows_a_key() {
        assert_eq!(format!("{:?}", keys(&["hunter2"])), "SigningKeys([REDACTED; 1])");
    }
}
