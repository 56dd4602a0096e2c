//! The pieces every signature scheme shares: HMAC-SHA256 over the raw body,
//! constant-time comparison against any of several secrets, and the
//! timestamp window.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
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

/// Shortest signing key accepted, in bytes once decoded.
///
/// Why a floor: an HMAC keyed with nothing (`acme=`, `whsec_`) or with a
/// few bytes is a key anyone can guess, so a blank or truncated value in a
/// deploy template would accept forgeries. 16 bytes (128 bits) is below
/// every secret a provider issues (Svix: 24 bytes, Paddle and Stripe: 32
/// characters and more) and beyond guessing.
pub const MIN_KEY_LEN: usize = 16;

/// Why a configured secret cannot be a signing key. Never shows the secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A `whsec_` secret whose rest is not base64.
    #[error("is not base64 after its whsec_ prefix")]
    NotBase64,
    /// Fewer than [`MIN_KEY_LEN`] bytes once decoded (empty included).
    #[error("is shorter than 16 bytes once decoded")]
    TooShort,
}

/// A configured secret that cannot be a signing key, named by position.
#[derive(Debug, thiserror::Error)]
#[error("secret #{position} {problem}")]
pub struct InvalidSecret {
    /// 1-based position among the configured secrets; the secret itself is never shown.
    pub position: usize,
    /// What is wrong with it.
    pub problem: KeyError,
}

/// How a scheme turns a configured secret into HMAC key bytes. Every key
/// any provider, sender or destination signs or verifies with is made
/// here, so the [`MIN_KEY_LEN`] floor holds for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyEncoding {
    /// The secret's UTF-8 bytes as configured (Paddle, Stripe, GitHub): no
    /// decoding, a `whsec_` prefix included.
    Text,
    /// `whsec_<base64>` (Standard Webhooks, Svix): the base64-decoded rest;
    /// the prefix is optional, as in Svix's libraries.
    Whsec,
}

impl KeyEncoding {
    /// The key bytes of `secret`, refused when shorter than [`MIN_KEY_LEN`].
    pub fn key(self, secret: &SecretString) -> Result<SecretSlice<u8>, KeyError> {
        let text = secret.expose_secret();
        let bytes = match self {
            KeyEncoding::Text => text.as_bytes().to_vec(),
            KeyEncoding::Whsec => {
                let encoded = text.strip_prefix("whsec_").unwrap_or(text);
                STANDARD.decode(encoded).map_err(|_| KeyError::NotBase64)?
            }
        };
        if bytes.len() < MIN_KEY_LEN {
            return Err(KeyError::TooShort);
        }
        Ok(SecretSlice::from(bytes))
    }
}

/// Length of an HMAC-SHA256 tag.
pub const TAG_LEN: usize = 32;

/// A provider's signing keys, in configuration order (rotation: any may verify).
pub struct SigningKeys(Vec<SecretSlice<u8>>);

impl SigningKeys {
    /// The keys of `secrets` decoded as `encoding` says; the first that
    /// cannot be a key is refused by its position.
    pub fn decode(secrets: &[SecretString], encoding: KeyEncoding) -> Result<Self, InvalidSecret> {
        secrets
            .iter()
            .enumerate()
            .map(|(index, secret)| {
                encoding.key(secret).map_err(|problem| InvalidSecret { position: index + 1, problem })
            })
            .collect::<Result<_, _>>()
            .map(SigningKeys)
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
        let secrets: Vec<SecretString> = secrets.iter().map(|s| SecretString::from(*s)).collect();
        SigningKeys::decode(&secrets, KeyEncoding::Text).unwrap()
    }

    #[test]
    fn the_matching_key_is_found_by_position() {
        let tag = hmac_sha256(b"the second key, long enough", &[b"msg"]);
        let keys = keys(&["the first key, long enough", "the second key, long enough"]);
        assert_eq!(keys.position_of_match(&[b"msg"], &[[0; TAG_LEN], tag]), Some(1));
        assert_eq!(keys.position_of_match(&[b"other"], &[tag]), None);
    }

    #[test]
    fn keys_under_16_bytes_once_decoded_are_refused_by_position_in_either_encoding() {
        let decode = |secrets: &[&str], encoding| {
            let secrets: Vec<SecretString> = secrets.iter().map(|s| SecretString::from(*s)).collect();
            SigningKeys::decode(&secrets, encoding).map(|keys| keys.0.len()).map_err(|e| e.to_string())
        };
        // 16 bytes of text, or base64 of 16 bytes: the floor itself is accepted.
        let text = "0123456789abcdef";
        let whsec = "whsec_MDEyMzQ1Njc4OWFiY2RlZg==";
        assert_eq!(decode(&[text], KeyEncoding::Text), Ok(1));
        assert_eq!(decode(&[whsec], KeyEncoding::Whsec), Ok(1));
        for (short, encoding) in [
            ("", KeyEncoding::Text),
            ("x", KeyEncoding::Text),
            ("0123456789abcde", KeyEncoding::Text),
            ("", KeyEncoding::Whsec),
            ("whsec_", KeyEncoding::Whsec),
            // 15 bytes once decoded, though 26 characters as written.
            ("whsec_MDEyMzQ1Njc4OWFiY2Rl", KeyEncoding::Whsec),
        ] {
            let good = if encoding == KeyEncoding::Text { text } else { whsec };
            assert_eq!(
                decode(&[good, short], encoding),
                Err("secret #2 is shorter than 16 bytes once decoded".into()),
                "{short:?}"
            );
        }
        assert_eq!(
            decode(&["whsec_not base64!"], KeyEncoding::Whsec),
            Err("secret #1 is not base64 after its whsec_ prefix".into())
        );
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
        assert_eq!(format!("{:?}", keys(&["hunter2hunter2hunter2"])), "SigningKeys([REDACTED; 1])");
    }
}
