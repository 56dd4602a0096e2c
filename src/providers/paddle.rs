//! Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>...]`,
//! HMAC-SHA256 keyed with the secret's UTF-8 bytes over `<ts>:<raw body>`.
//! The event id and type are in the body (`event_id`, `event_type`).

use std::borrow::Cow;

use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::hmac_header::{self, Signed, Timestamped};
use super::{EventLayout, ProviderSpec, Signature, TopLevel};
use crate::event::{self, Event, EventError};

/// The provider name stored with each Paddle event.
pub const NAME: &str = "paddle";

const SIGNATURE_HEADER: &str = "Paddle-Signature";

/// Paddle Billing at `/webhooks/paddle` and `/billing/webhook`; secrets from
/// `PADDLE_WEBHOOK_SECRET`, used as text (their UTF-8 bytes are the HMAC keys).
pub const SPEC: ProviderSpec = ProviderSpec {
    name: NAME,
    aliases: &["/billing/webhook"],
    secret_help: "Paddle notification secret keys (Developer tools > Notifications > your destination), \
                  comma-separated (several during a rotation).",
    signature: Signature::HmacHeader(&hmac_header::Format {
        provider: NAME,
        header: SIGNATURE_HEADER,
        signed: Signed::Timestamped(Timestamped {
            separator: ';',
            timestamp_key: "ts",
            signature_key: "h1",
            message_separator: ":",
        }),
    }),
    format: &PaddleFormat,
};

/// Paddle's layout: `event_id`, `event_type`, `occurred_at`,
/// `notification_id` and `data` at the top of the body.
#[derive(Debug)]
pub struct PaddleFormat;

impl EventLayout for PaddleFormat {
    type Envelope<'a> = Envelope<'a>;
}

/// The notification body's top level, as Paddle documents it.
#[derive(Deserialize)]
pub struct Envelope<'a> {
    #[serde(borrow)]
    event_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    event_type: Option<Cow<'a, str>>,
    #[serde(borrow)]
    occurred_at: Option<Cow<'a, str>>,
    #[serde(borrow)]
    notification_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

impl<'a> TopLevel<'a> for Envelope<'a> {
    const FORMAT: &'static str = "Paddle";

    fn id_and_type<'s>(&'s mut self, _: &'s HeaderMap) -> [(Option<Cow<'s, str>>, &'static str); 2] {
        [(self.event_id.take(), "event_id"), (self.event_type.take(), "event_type")]
    }

    fn occurred_at(&self) -> Result<Option<DateTime<Utc>>, EventError> {
        self.occurred_at.as_ref().map(|t| event::time_from_rfc3339(t, "occurred_at")).transpose()
    }

    fn data(&self) -> Option<&RawValue> {
        self.data
    }

    /// The notification id, checked like an id: it is archived as text,
    /// which holds no NUL.
    fn extra(&mut self, event: Event) -> Result<Event, EventError> {
        let notification_id = self.notification_id.take();
        let notification_id =
            notification_id.map(|id| event::required(Some(id), "notification_id")).transpose()?;
        Ok(Event { notification_id, ..event })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{EventFormat, Provider, SignatureError};
    use crate::providers::{
        assert_only_the_signed_body_verifies, payload, signature, test_headers, test_verifier,
    };
    use secrecy::SecretString;
    use std::sync::Arc;

    const SECRET: &str = "pdl_ntfset_0123456789";

    fn paddle(secrets: &[&str]) -> Arc<dyn Provider> {
        test_verifier(&SPEC, secrets)
    }

    fn headers(signature: &str) -> HeaderMap {
        test_headers(&[(SIGNATURE_HEADER, signature)])
    }

    fn sign(secret: &str, ts: i64, body: &[u8]) -> String {
        let tag = signature::hmac_sha256(secret.as_bytes(), &[ts.to_string().as_bytes(), b":", body]);
        format!("ts={ts};h1={}", hex::encode(tag))
    }

    #[test]
    fn the_published_vectors_verify() {
        let vectors = crate::providers::signature::published_vectors("paddle");
        assert!(vectors.len() >= 5);
        for vector in vectors {
            let (secret, header, body) = (
                vector["secret"].as_str().unwrap(),
                vector["header"].as_str().unwrap(),
                vector["body"].as_str().unwrap(),
            );
            let ts = vector["ts"].as_i64().unwrap();
            if secret.len() < signature::MIN_KEY_LEN {
                // paddle-node-sdk's `VALID_SECRET` is 12 bytes: too short to configure.
                let refused = SPEC.verifier(&[SecretString::from(secret)], 300).unwrap_err();
                assert_eq!(refused.problem, signature::KeyError::TooShort);
                continue;
            }
            // It verifies; changing any one byte of the body, the timestamp or the secret fails.
            assert_only_the_signed_body_verifies(&SPEC, secret, &headers(header), body, ts);
            let other_ts = header.replacen(&format!("ts={ts}"), &format!("ts={}", ts + 1), 1);
            assert_eq!(
                paddle(&[secret]).verify(&headers(&other_ts), body.as_bytes(), ts).unwrap_err(),
                SignatureError::NoMatchingSignature
            );
        }
    }

    #[test]
    fn any_configured_secret_verifies_and_its_position_is_reported() {
        let body = br#"{"event_id":"evt_1"}"#;
        let header = sign("pdl_ntfset_new_0123456789", 1000, body);
        let signed = headers(&header);
        let verified = paddle(&["pdl_ntfset_old_0123456789", "pdl_ntfset_new_0123456789"])
            .verify(&signed, body, 1000)
            .unwrap();
        assert_eq!(verified.secret_index, 1);
        assert_eq!(verified.signature, header);
    }

    #[test]
    fn the_timestamp_window_applies_before_the_signature() {
        let body = b"{}";
        let verifier = paddle(&[SECRET]);
        assert_eq!(
            verifier.verify(&headers(&sign(SECRET, 1000, body)), body, 1301).unwrap_err(),
            SignatureError::TimestampTooOld
        );
        assert_eq!(
            verifier.verify(&headers(&sign(SECRET, 1301, body)), body, 1000).unwrap_err(),
            SignatureError::TimestampInFuture
        );
    }

    #[test]
    fn malformed_headers_are_told_apart_from_wrong_signatures() {
        let verifier = paddle(&[SECRET]);
        assert_eq!(
            verifier.verify(&HeaderMap::new(), b"", 0).unwrap_err(),
            SignatureError::MissingHeader(SIGNATURE_HEADER)
        );
        for bad in ["", "garbage", "ts=1", "h1=00", "ts=abc;h1=00", "ts=-1;h1=00", "ts=1;ts=1;h1=00"] {
            assert_eq!(
                verifier.verify(&headers(bad), b"", 1).unwrap_err(),
                SignatureError::MalformedHeader(SIGNATURE_HEADER),
                "{bad:?}"
            );
        }
        assert_eq!(
            verifier.verify(&headers("ts=1;h1=nothex"), b"", 1).unwrap_err(),
            SignatureError::NoMatchingSignature
        );
    }

    #[test]
    fn unknown_keys_and_spaces_in_the_header_are_ignored() {
        let body = b"{}";
        let header = format!("ts=1000; future=x; {}", sign(SECRET, 1000, body).split(';').nth(1).unwrap());
        assert!(paddle(&[SECRET]).verify(&headers(&header), body, 1000).is_ok());
    }

    #[test]
    fn the_event_is_read_from_the_body() {
        let body = br#"{"event_id":"evt_1","event_type":"subscription.created","occurred_at":"2024-03-15T10:32:38.286848Z","notification_id":"ntf_1","data":{"id":"sub_1"}}"#;
        let event = PaddleFormat.read_request(&HeaderMap::new(), &payload(body)).unwrap();
        assert_eq!(event.id, "evt_1");
        assert_eq!(event.event_type, "subscription.created");
        assert_eq!(event.notification_id.as_deref(), Some("ntf_1"));
        assert_eq!(event.occurred_at.unwrap().to_rfc3339(), "2024-03-15T10:32:38.286848+00:00");
        assert_eq!(event.data.unwrap().get(), r#"{"id":"sub_1"}"#);
    }

    #[test]
    fn bodies_without_an_event_are_refused_with_a_reason() {
        let parse = |body: &[u8]| PaddleFormat.read_request(&HeaderMap::new(), &payload(body)).unwrap_err();
        assert_eq!(parse(b"not json"), EventError::NotJson);
        assert_eq!(parse(b"[1]"), EventError::NotAnEvent("Paddle"));
        assert_eq!(parse(br#"{"event_type":"x"}"#), EventError::Missing("event_id"));
        assert_eq!(parse(br#"{"event_id":"","event_type":"x"}"#), EventError::Missing("event_id"));
        assert_eq!(parse(br#"{"event_id":"e"}"#), EventError::Missing("event_type"));
        assert_eq!(parse(br#"{"event_id":7,"event_type":"x"}"#), EventError::NotAnEvent("Paddle"));
        assert_eq!(
            parse(br#"{"event_id":"e","event_type":"x","occurred_at":"yesterday"}"#),
            EventError::InvalidTimestamp("occurred_at")
        );
        let long = format!(r#"{{"event_id":"{}","event_type":"x"}}"#, "e".repeat(256));
        assert_eq!(parse(long.as_bytes()), EventError::TooLong("event_id"));
    }
}
