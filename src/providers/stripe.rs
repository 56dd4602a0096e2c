//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, HMAC-SHA256
//! keyed with the `whsec_...` secret's UTF-8 bytes as they are (Stripe does
//! not base64-decode them, unlike Svix) over `<t>.<raw body>`. The event id,
//! type and creation time are in the body (`id`, `type`, `created`).

use std::borrow::Cow;

use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::hmac_header::{self, Signed, Timestamped};
use super::{EventLayout, ProviderSpec, Signature, TopLevel};
use crate::event::{self, EventError};

/// The provider name stored with each Stripe event.
pub const NAME: &str = "stripe";

const SIGNATURE_HEADER: &str = "Stripe-Signature";

/// Stripe at `/webhooks/stripe`; secrets from `STRIPE_WEBHOOK_SECRET`. Stripe
/// keys the HMAC with the whole secret as text, `whsec_` prefix included;
/// it adds `v0` (a test-mode scheme) and may add others: only `v1` is checked.
pub const SPEC: ProviderSpec = ProviderSpec {
    name: NAME,
    aliases: &[],
    secret_help: "Stripe endpoint signing secrets `whsec_...` (Workbench > Webhooks > your endpoint), \
                  comma-separated (several while rolling a secret).",
    signature: Signature::HmacHeader(&hmac_header::Format {
        provider: NAME,
        header: SIGNATURE_HEADER,
        signed: Signed::Timestamped(Timestamped {
            separator: ',',
            timestamp_key: "t",
            signature_key: "v1",
            message_separator: ".",
        }),
    }),
    format: &StripeFormat,
};

/// Stripe's layout: event objects with `id`, `type`, `created` (unix
/// seconds) and `data` at the top of the body.
#[derive(Debug)]
pub struct StripeFormat;

impl EventLayout for StripeFormat {
    type Envelope<'a> = Envelope<'a>;
}

/// The top level of a Stripe event object.
#[derive(Deserialize)]
pub struct Envelope<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "type")]
    event_type: Option<Cow<'a, str>>,
    created: Option<i64>,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

impl<'a> TopLevel<'a> for Envelope<'a> {
    const FORMAT: &'static str = "Stripe";

    fn id_and_type<'s>(&'s mut self, _: &'s HeaderMap) -> [(Option<Cow<'s, str>>, &'static str); 2] {
        [(self.id.take(), "id"), (self.event_type.take(), "type")]
    }

    /// `created`, in unix seconds.
    fn occurred_at(&self) -> Result<Option<DateTime<Utc>>, EventError> {
        self.created.map(|secs| event::time_from_unix_seconds(secs, "created")).transpose()
    }

    fn data(&self) -> Option<&RawValue> {
        self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{EventFormat, Provider, SignatureError};
    use crate::providers::{
        assert_only_the_signed_body_verifies, payload, signature, test_headers, test_verifier,
    };
    use std::sync::Arc;

    fn stripe(secrets: &[&str]) -> Arc<dyn Provider> {
        test_verifier(&SPEC, secrets)
    }

    fn headers(signature: &str) -> HeaderMap {
        test_headers(&[(SIGNATURE_HEADER, signature)])
    }

    fn sign(secret: &str, t: i64, body: &[u8]) -> String {
        let tag = signature::hmac_sha256(secret.as_bytes(), &[t.to_string().as_bytes(), b".", body]);
        format!("t={t},v1={}", hex::encode(tag))
    }

    #[test]
    fn the_published_vectors_verify() {
        let vectors = crate::providers::signature::published_vectors("stripe");
        assert!(!vectors.is_empty());
        for vector in vectors {
            let (secret, header, body) = (
                vector["secret"].as_str().unwrap(),
                vector["header"].as_str().unwrap(),
                vector["body"].as_str().unwrap(),
            );
            let t = vector["t"].as_i64().unwrap();
            // It verifies; changing any one byte of the body, the timestamp or the secret fails.
            assert_only_the_signed_body_verifies(&SPEC, secret, &headers(header), body, t);
            let other_t = header.replacen(&format!("t={t}"), &format!("t={}", t + 1), 1);
            assert_eq!(
                stripe(&[secret]).verify(&headers(&other_t), body.as_bytes(), t).unwrap_err(),
                SignatureError::NoMatchingSignature
            );
        }
    }

    #[test]
    fn the_key_is_the_whole_secret_as_text_neither_stripped_nor_decoded() {
        use base64::Engine as _;
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = b"{}";
        let decoded = base64::engine::general_purpose::STANDARD.decode(&secret[6..]).unwrap();
        let signed_with = |key: &[u8]| {
            let header = format!("t=1000,v1={}", hex::encode(signature::hmac_sha256(key, &[b"1000.", body])));
            stripe(&[secret]).verify(&headers(&header), body, 1000).map(|v| v.secret_index)
        };
        assert_eq!(signed_with(secret.as_bytes()), Ok(0));
        assert_eq!(signed_with(&secret.as_bytes()[6..]), Err(SignatureError::NoMatchingSignature));
        assert_eq!(signed_with(&decoded), Err(SignatureError::NoMatchingSignature));
    }

    #[test]
    fn any_configured_secret_and_any_v1_entry_verify_and_the_window_applies() {
        let body = br#"{"id":"evt_1"}"#;
        let valid = sign("whsec_new_0123456789", 1000, body);
        let rolled = format!("t=1000,v1={},{},v0=abc", "0".repeat(64), valid.split_once(',').unwrap().1);
        let rolled_headers = headers(&rolled);
        let verified = stripe(&["whsec_old_0123456789", "whsec_new_0123456789"])
            .verify(&rolled_headers, body, 1000)
            .unwrap();
        assert_eq!((verified.secret_index, verified.signature), (1, rolled.as_str()));

        let verifier = stripe(&["whsec_new_0123456789"]);
        assert_eq!(
            verifier.verify(&headers(&valid), body, 1301).unwrap_err(),
            SignatureError::TimestampTooOld
        );
        assert_eq!(
            verifier.verify(&headers(&sign("whsec_new_0123456789", 1301, body)), body, 1000).unwrap_err(),
            SignatureError::TimestampInFuture
        );
    }

    #[test]
    fn malformed_headers_are_told_apart_from_wrong_signatures() {
        let verifier = stripe(&["whsec_0123456789abcdef"]);
        let malformed = SignatureError::MalformedHeader(SIGNATURE_HEADER);
        assert_eq!(
            verifier.verify(&HeaderMap::new(), b"", 0).unwrap_err(),
            SignatureError::MissingHeader(SIGNATURE_HEADER)
        );
        for bad in ["", "t=1", "v1=00", "t=1;v1=00", "t=abc,v1=00", "t=1,t=1,v1=00", "t=1,v0=00"] {
            assert_eq!(verifier.verify(&headers(bad), b"", 1).unwrap_err(), malformed, "{bad:?}");
        }
        assert_eq!(
            verifier.verify(&headers("t=1,v1=nothex"), b"", 1).unwrap_err(),
            SignatureError::NoMatchingSignature
        );
    }

    #[test]
    fn the_event_is_read_from_the_body() {
        let body = br#"{"id":"evt_1","object":"event","type":"invoice.paid","created":1700000000,"data":{"object":{"id":"in_1"}}}"#;
        let event = StripeFormat.read_request(&HeaderMap::new(), &payload(body)).unwrap();
        assert_eq!((event.id.as_str(), event.event_type.as_str()), ("evt_1", "invoice.paid"));
        assert_eq!(event.occurred_at.unwrap().timestamp(), 1700000000);
        assert_eq!(event.data.unwrap().get(), r#"{"object":{"id":"in_1"}}"#);

        let parse = |body: &[u8]| StripeFormat.read_request(&HeaderMap::new(), &payload(body)).unwrap_err();
        assert_eq!(parse(b"not json"), EventError::NotJson);
        assert_eq!(parse(br#"{"type":"x"}"#), EventError::Missing("id"));
        assert_eq!(parse(br#"{"id":"evt_1"}"#), EventError::Missing("type"));
        assert_eq!(
            parse(br#"{"id":"evt_1","type":"x","created":"today"}"#),
            EventError::NotAnEvent("Stripe")
        );
        assert_eq!(
            parse(br#"{"id":"evt_1","type":"x","created":9223372036854775807}"#),
            EventError::InvalidTimestamp("created")
        );
    }
}
