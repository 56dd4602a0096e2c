//! The scheme Paddle, Stripe and GitHub share: one header holding hex
//! HMAC-SHA256 signatures, keyed with the secrets' UTF-8 bytes. Paddle and
//! Stripe put a timestamp beside them (`ts=<unix>;h1=<hex>`,
//! `t=<unix>,v1=<hex>`) and sign it, a separator and the raw body; GitHub
//! signs the raw body alone (`sha256=<hex>`), so a captured request of
//! GitHub's verifies for ever and the dedup table is its only replay
//! protection.

use axum::http::HeaderMap;
use secrecy::SecretString;

use super::signature::{self, InvalidSecret, KeyEncoding, SignatureError, SigningKeys, TAG_LEN};
use super::{Provider, Verified, header_str};

/// How a provider lays out the header and the signed message.
#[derive(Debug)]
pub struct Format {
    /// The provider's name (the `provider` column).
    pub provider: &'static str,
    /// The header's name, for the reasons given on rejection.
    pub header: &'static str,
    /// What the header holds beside the signatures, and what they sign.
    pub signed: Signed,
}

/// What a provider's HMACs sign, and how the header lays them out.
#[derive(Debug)]
pub enum Signed {
    /// A timestamp and the body: `key=value` entries (Paddle, Stripe).
    Timestamped(Timestamped),
    /// The body alone: the header is `prefix` then the hex signature (GitHub).
    Body {
        /// What comes before the signature, e.g. `sha256=`.
        prefix: &'static str,
    },
}

/// The entries of a timestamped header, and the signed message's separator.
#[derive(Debug)]
pub struct Timestamped {
    /// Between `key=value` entries.
    pub separator: char,
    /// The key of the (single) timestamp entry.
    pub timestamp_key: &'static str,
    /// The key of the signature entries; there may be several (rotation).
    pub signature_key: &'static str,
    /// Between the timestamp and the body in the signed message.
    pub message_separator: &'static str,
}

/// Verifies requests signed in `format`: the [`Provider`] of every provider
/// that signs this way, named by its format.
#[derive(Debug)]
pub struct HmacHeaderVerifier {
    format: &'static Format,
    keys: SigningKeys,
    tolerance_secs: u64,
}

impl HmacHeaderVerifier {
    /// The secrets are used as text: their UTF-8 bytes are the HMAC keys.
    pub fn new(
        format: &'static Format,
        secrets: &[SecretString],
        tolerance_secs: u64,
    ) -> Result<Self, InvalidSecret> {
        let keys = SigningKeys::decode(secrets, KeyEncoding::Text)?;
        Ok(HmacHeaderVerifier { format, keys, tolerance_secs })
    }
}

impl Provider for HmacHeaderVerifier {
    fn name(&self) -> &str {
        self.format.provider
    }

    /// Checks the header against the raw body at time `now` (unix seconds),
    /// when the format signs a timestamp.
    fn verify<'h>(
        &self,
        headers: &'h HeaderMap,
        body: &[u8],
        now: i64,
    ) -> Result<Verified<'h>, SignatureError> {
        let header = header_str(headers, self.format.header)?;
        let matched = match &self.format.signed {
            Signed::Timestamped(layout) => {
                let parsed = SignatureHeader::parse(header, self.format.header, layout)?;
                signature::check_timestamp(parsed.timestamp, now, self.tolerance_secs)?;
                // The timestamp exactly as sent (not a re-rendering), the separator, the raw body.
                let message = [parsed.ts.as_bytes(), layout.message_separator.as_bytes(), body];
                self.keys.position_of_match(&message, &parsed.tags)
            }
            Signed::Body { prefix } => {
                let tag = header
                    .strip_prefix(prefix)
                    .and_then(signature::hex_tag)
                    .ok_or(SignatureError::MalformedHeader(self.format.header))?;
                self.keys.position_of_match(&[body], &[tag])
            }
        };
        matched
            .map(|secret_index| Verified { secret_index, signature: header })
            .ok_or(SignatureError::NoMatchingSignature)
    }
}

/// A parsed signature header.
#[derive(Debug, PartialEq)]
struct SignatureHeader<'h> {
    ts: &'h str,
    timestamp: i64,
    /// Every signature that decodes as a SHA-256 tag; any may match.
    tags: Vec<[u8; TAG_LEN]>,
}

impl<'h> SignatureHeader<'h> {
    /// Parses `header` (named `name`) laid out as `format` says. Unknown
    /// keys are ignored (both Paddle and Stripe add keys over time, e.g.
    /// Stripe's `v0`), and a signature that is not 64 hex digits is one that
    /// matches nothing; no timestamp, two of them, or no signature entry at
    /// all is malformed.
    fn parse(header: &'h str, name: &'static str, format: &Timestamped) -> Result<Self, SignatureError> {
        let malformed = SignatureError::MalformedHeader(name);
        let mut ts = None;
        let mut tags = Vec::new();
        let mut signature_entries = 0usize;
        for part in header.split(format.separator) {
            let (key, value) = part.split_once('=').ok_or(malformed)?;
            match key.trim() {
                key if key == format.timestamp_key && ts.is_none() => ts = Some(value.trim()),
                key if key == format.timestamp_key => return Err(malformed),
                key if key == format.signature_key => {
                    signature_entries += 1;
                    tags.extend(signature::hex_tag(value.trim()));
                }
                _ => {}
            }
        }
        let ts = ts.ok_or(malformed)?;
        let timestamp = signature::parse_unix_seconds(ts).ok_or(malformed)?;
        if signature_entries == 0 {
            return Err(malformed);
        }
        Ok(SignatureHeader { ts, timestamp, tags })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORMAT: Timestamped =
        Timestamped { separator: ',', timestamp_key: "t", signature_key: "v1", message_separator: "." };

    #[test]
    fn headers_follow_their_format() {
        let tag = "ab".repeat(TAG_LEN);
        let header = format!("t=12, v0=zz,v1=nothex,v1={tag}");
        let parsed = SignatureHeader::parse(&header, "X-Sig", &FORMAT).unwrap();
        assert_eq!((parsed.ts, parsed.timestamp, parsed.tags), ("12", 12, vec![[0xab; TAG_LEN]]));
        for bad in ["", "t=1", "v1=00", "t=x,v1=00", "t=1,t=1,v1=00", "t=1;v1=00", "t=1,v1"] {
            assert_eq!(
                SignatureHeader::parse(bad, "X-Sig", &FORMAT),
                Err(SignatureError::MalformedHeader("X-Sig")),
                "{bad:?}"
            );
        }
    }
}
