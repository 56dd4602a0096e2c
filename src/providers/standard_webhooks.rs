//! The Standard Webhooks signature scheme, which Svix (and so Clerk) uses:
//! headers `webhook-id`, `webhook-timestamp`, `webhook-signature` (or their
//! `svix-` twins), HMAC-SHA256 keyed with the base64-decoded part of a
//! `whsec_...` secret over `<id>.<timestamp>.<raw body>`, and a
//! space-separated list of `v1,<base64>` signatures of which any may match.

use axum::http::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use secrecy::SecretString;

use super::signature::{self, KeyEncoding, SignatureError, SigningKeys, TAG_LEN};
use super::{InvalidSecret, Verified, header_str};

/// The three headers of one naming family.
struct HeaderNames {
    id: &'static str,
    timestamp: &'static str,
    signature: &'static str,
}

const SVIX: HeaderNames =
    HeaderNames { id: "svix-id", timestamp: "svix-timestamp", signature: "svix-signature" };
const STANDARD_WEBHOOKS: HeaderNames =
    HeaderNames { id: "webhook-id", timestamp: "webhook-timestamp", signature: "webhook-signature" };

/// Verifies requests signed the Standard Webhooks way.
#[derive(Debug)]
pub struct StandardWebhooksVerifier {
    keys: SigningKeys,
    tolerance_secs: u64,
}

/// A verified request: which secret matched, and the message id it signed.
pub struct VerifiedMessage<'h> {
    /// What the archive records about the signature.
    pub verified: Verified<'h>,
    /// The `svix-id`/`webhook-id`: covered by the signature, so a stable event id.
    pub message_id: &'h str,
}

impl StandardWebhooksVerifier {
    /// Decodes `whsec_<base64>` secrets (the prefix is optional, as in Svix's libraries).
    pub fn new(secrets: &[SecretString], tolerance_secs: u64) -> Result<Self, InvalidSecret> {
        let keys = SigningKeys::decode(secrets, KeyEncoding::Whsec)?;
        Ok(StandardWebhooksVerifier { keys, tolerance_secs })
    }

    /// Checks the signature headers against the raw body at time `now` (unix seconds).
    pub fn verify<'h>(
        &self,
        headers: &'h HeaderMap,
        body: &[u8],
        now: i64,
    ) -> Result<VerifiedMessage<'h>, SignatureError> {
        // One family per request: Svix sends svix-*, other senders webhook-*.
        let names = if headers.contains_key(SVIX.id) { &SVIX } else { &STANDARD_WEBHOOKS };
        let message_id = header_str(headers, names.id)?;
        let ts = header_str(headers, names.timestamp)?;
        let header = header_str(headers, names.signature)?;
        let timestamp =
            signature::parse_unix_seconds(ts).ok_or(SignatureError::MalformedHeader(names.timestamp))?;
        let candidates = parse_signatures(header).ok_or(SignatureError::MalformedHeader(names.signature))?;
        signature::check_timestamp(timestamp, now, self.tolerance_secs)?;
        let message = [message_id.as_bytes(), b".", ts.as_bytes(), b".", body];
        let secret_index =
            self.keys.position_of_match(&message, &candidates).ok_or(SignatureError::NoMatchingSignature)?;
        Ok(VerifiedMessage { verified: Verified { secret_index, signature: header }, message_id })
    }
}

/// The message id of a request [`StandardWebhooksVerifier::verify`] accepted
/// (`svix-id`, else `webhook-id`): signed, so a stable event id.
pub fn message_id(headers: &HeaderMap) -> Option<&str> {
    [SVIX.id, STANDARD_WEBHOOKS.id].iter().find_map(|name| headers.get(*name)?.to_str().ok())
}

/// The `v1` signatures of a `v1,<base64> v1,<base64>` list. Entries of other
/// versions, or that do not decode to a tag, match nothing; a header with no
/// `<version>,<signature>` entry at all is malformed (`None`).
fn parse_signatures(header: &str) -> Option<Vec<[u8; TAG_LEN]>> {
    let mut entries = 0usize;
    let mut tags = Vec::new();
    for entry in header.split_ascii_whitespace() {
        let Some((version, encoded)) = entry.split_once(',') else { continue };
        entries += 1;
        let mut tag = [0u8; TAG_LEN];
        if version == "v1" && STANDARD.decode_slice(encoded, &mut tag) == Ok(TAG_LEN) {
            tags.push(tag);
        }
    }
    (entries > 0).then_some(tags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn verifier(secrets: &[&str]) -> StandardWebhooksVerifier {
        let secrets: Vec<SecretString> = secrets.iter().map(|s| SecretString::from(*s)).collect();
        StandardWebhooksVerifier::new(&secrets, 300).unwrap()
    }

    fn headers(names: &HeaderNames, id: &str, ts: &str, signature: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(names.id, HeaderValue::from_str(id).unwrap());
        headers.insert(names.timestamp, HeaderValue::from_str(ts).unwrap());
        headers.insert(names.signature, HeaderValue::from_str(signature).unwrap());
        headers
    }

    #[test]
    fn the_published_vectors_verify_under_both_header_names() {
        let vectors = crate::providers::signature::published_vectors("svix");
        assert!(vectors.len() >= 4);
        for vector in vectors {
            let secret = vector["secret"].as_str().unwrap();
            let (id, body, sig) = (
                vector["id"].as_str().unwrap(),
                vector["body"].as_str().unwrap(),
                vector["signature"].as_str().unwrap(),
            );
            let ts = vector["timestamp"].as_i64().unwrap();
            let ts_text = ts.to_string();
            for names in [&SVIX, &STANDARD_WEBHOOKS] {
                let signed = headers(names, id, &ts_text, sig);
                let verified = verifier(&[secret]).verify(&signed, body.as_bytes(), ts).unwrap();
                assert_eq!((verified.verified.secret_index, verified.message_id), (0, id));

                for i in 0..body.len() {
                    let mut tampered = body.as_bytes().to_vec();
                    tampered[i] ^= 0x01;
                    assert!(verifier(&[secret]).verify(&signed, &tampered, ts).is_err());
                }
                let mut other_id = id.to_string();
                other_id.push('x');
                let changed = [
                    headers(names, &other_id, &ts_text, sig),
                    headers(names, id, &(ts + 1).to_string(), sig),
                ];
                for request in changed {
                    assert_eq!(
                        verifier(&[secret]).verify(&request, body.as_bytes(), ts).err(),
                        Some(SignatureError::NoMatchingSignature)
                    );
                }
            }
            // A different key (same length, one byte changed) fails.
            let mut key = STANDARD.decode(secret.trim_start_matches("whsec_")).unwrap();
            key[0] ^= 0x01;
            let wrong = format!("whsec_{}", STANDARD.encode(key));
            assert_eq!(
                verifier(&[&wrong]).verify(&headers(&SVIX, id, &ts_text, sig), body.as_bytes(), ts).err(),
                Some(SignatureError::NoMatchingSignature)
            );
        }
    }

    #[test]
    fn secrets_are_decoded_with_or_without_prefix_and_bad_ones_are_named_by_position() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let both = [SecretString::from(secret), SecretString::from(&secret[6..])];
        assert!(StandardWebhooksVerifier::new(&both, 300).is_ok());
        let bad = [SecretString::from(secret), SecretString::from("whsec_not base64!")];
        let error = StandardWebhooksVerifier::new(&bad, 300).unwrap_err();
        assert_eq!(error.to_string(), "secret #2 is not base64 after its whsec_ prefix");
    }

    #[test]
    fn missing_and_malformed_headers_are_named() {
        let v = verifier(&["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]);
        let err = |h: &HeaderMap| v.verify(h, b"{}", 1000).err().unwrap();
        assert_eq!(err(&HeaderMap::new()), SignatureError::MissingHeader("webhook-id"));
        let mut partial = HeaderMap::new();
        partial.insert("svix-id", HeaderValue::from_static("msg_1"));
        assert_eq!(err(&partial), SignatureError::MissingHeader("svix-timestamp"));
        assert_eq!(
            err(&headers(&SVIX, "msg_1", "12x", "v1,AAAA")),
            SignatureError::MalformedHeader("svix-timestamp")
        );
        assert_eq!(
            err(&headers(&SVIX, "msg_1", "1000", "nocomma")),
            SignatureError::MalformedHeader("svix-signature")
        );
        assert_eq!(
            err(&headers(&SVIX, "msg_1", "1000", "v2,AAAA v1,%%%")),
            SignatureError::NoMatchingSignature
        );
        assert_eq!(err(&headers(&SVIX, "msg_1", "1", "v1,AAAA")), SignatureError::TimestampTooOld);
        assert_eq!(err(&headers(&SVIX, "msg_1", "9999", "v1,AAAA")), SignatureError::TimestampInFuture);
    }
}
