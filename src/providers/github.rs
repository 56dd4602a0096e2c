//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 keyed with the
//! secret's UTF-8 bytes over the raw body. The event id is the
//! `X-GitHub-Delivery` header, the type is the `X-GitHub-Event` header plus
//! `.<action>` when the body has one (`issues.opened`, `push`).
//!
//! GitHub signs no timestamp and not the delivery header: a captured request
//! verifies for ever, so there is no window to check and the dedup on
//! `X-GitHub-Delivery` is the only replay protection (see the README).

use std::borrow::Cow;

use axum::http::HeaderMap;
use serde::Deserialize;

use super::hmac_header::{self, Signed};
use super::{EventFormat, ProviderSpec, Signature, envelope};
use crate::event::{self, Event, EventError, Payload};

/// The provider name stored with each GitHub event.
pub const NAME: &str = "github";

const SIGNATURE_HEADER: &str = "X-Hub-Signature-256";
const DELIVERY_HEADER: &str = "X-GitHub-Delivery";
const EVENT_HEADER: &str = "X-GitHub-Event";
/// How the type made of the event header and the body's action is named in errors.
const COMBINED_TYPE: &str = "X-GitHub-Event.action";

/// GitHub at `/webhooks/github`; secrets from `GITHUB_WEBHOOK_SECRET`, used
/// as text (their UTF-8 bytes are the HMAC keys).
pub const SPEC: ProviderSpec = ProviderSpec {
    name: NAME,
    aliases: &[],
    secret_help: "GitHub webhook secrets (Settings > Webhooks > your webhook > Secret), \
                  comma-separated (several during a rotation).",
    signature: Signature::HmacHeader(&hmac_header::Format {
        provider: NAME,
        header: SIGNATURE_HEADER,
        signed: Signed::Body { prefix: "sha256=" },
    }),
    format: &GitHubFormat,
};

/// Reads GitHub deliveries: the id and type are headers, the type extended
/// with the body's `action`; the whole body is the event (no `data`, no time).
#[derive(Debug)]
pub struct GitHubFormat;

impl EventFormat for GitHubFormat {
    fn read_request(&self, headers: &HeaderMap, payload: &Payload) -> Result<Event, EventError> {
        let envelope: Envelope<'_> = envelope(payload, "GitHub")?;
        let header = |name| headers.get(name).and_then(|value| value.to_str().ok()).map(Cow::Borrowed);
        let id = event::required(header(DELIVERY_HEADER), DELIVERY_HEADER)?;
        let event = event::required(header(EVENT_HEADER), EVENT_HEADER)?;
        // Each part is checked on its own, so that a bad action is reported
        // as the action's, not the header's; then the type they make.
        let event_type = match envelope.action.filter(|action| !action.is_empty()) {
            Some(action) => {
                let action = event::required(Some(action), "action")?;
                event::required(Some(format!("{event}.{action}").into()), COMBINED_TYPE)?
            }
            None => event,
        };
        Ok(Event::new(id, event_type))
    }

    fn read_stored(&self, event_id: &str, event_type: &str, _payload: &Payload) -> Result<Event, EventError> {
        Ok(Event::new(event_id.into(), event_type.into()))
    }
}

/// The one body field the event type needs.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    action: Option<Cow<'a, str>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{
        Provider, SignatureError, assert_only_the_signed_body_verifies, payload, signature, test_headers,
        test_verifier,
    };
    use secrecy::SecretString;
    use std::sync::Arc;

    fn github(secrets: &[&str]) -> Arc<dyn Provider> {
        test_verifier(&SPEC, secrets)
    }

    #[test]
    fn the_published_vectors_verify() {
        let vectors = crate::providers::signature::published_vectors("github");
        assert!(vectors.len() >= 2);
        for vector in vectors {
            let (secret, header, body) = (
                vector["secret"].as_str().unwrap(),
                vector["header"].as_str().unwrap(),
                vector["body"].as_str().unwrap(),
            );
            if secret.len() < signature::MIN_KEY_LEN {
                // octokit's `mysecret` is 8 bytes: too short to configure.
                let refused = SPEC.verifier(&[SecretString::from(secret)], 300).unwrap_err();
                assert_eq!(refused.problem, signature::KeyError::TooShort);
                continue;
            }
            let signed = test_headers(&[(SIGNATURE_HEADER, header)]);
            // No timestamp: any `now` verifies; changing any one byte of the body or the secret fails.
            for now in [0, i64::MAX] {
                assert_only_the_signed_body_verifies(&SPEC, secret, &signed, body, now);
            }
        }
    }

    #[test]
    fn any_configured_secret_verifies_and_its_position_is_reported() {
        let body = b"{}";
        let tag = hex::encode(signature::hmac_sha256(b"the new github secret", &[body]));
        let header = format!("sha256={tag}");
        let signed = test_headers(&[(SIGNATURE_HEADER, &header)]);
        let verified =
            github(&["the old github secret", "the new github secret"]).verify(&signed, body, 0).unwrap();
        assert_eq!((verified.secret_index, verified.signature), (1, header.as_str()));
    }

    #[test]
    fn malformed_headers_are_told_apart_from_wrong_signatures() {
        let verifier = github(&["a github secret, long enough"]);
        let verify =
            |value: &str| verifier.verify(&test_headers(&[(SIGNATURE_HEADER, value)]), b"{}", 0).unwrap_err();
        assert_eq!(
            verifier.verify(&HeaderMap::new(), b"{}", 0).unwrap_err(),
            SignatureError::MissingHeader(SIGNATURE_HEADER)
        );
        let zeros = "0".repeat(64);
        for bad in ["", "sha256=", "sha256=abc", "sha1=0000", &zeros, &format!("sha512={zeros}")] {
            assert_eq!(verify(bad), SignatureError::MalformedHeader(SIGNATURE_HEADER), "{bad:?}");
        }
        assert_eq!(verify(&format!("sha256={zeros}")), SignatureError::NoMatchingSignature);
    }

    #[test]
    fn the_event_id_is_the_delivery_header_and_the_type_adds_the_action() {
        let delivery = [(DELIVERY_HEADER, "72d3162e-cc78-11e3-81ab-4c9367dc0958"), (EVENT_HEADER, "issues")];
        let parse = |pairs: &[(&'static str, &str)], body: &'static [u8]| {
            let headers = test_headers(pairs);
            GitHubFormat.read_request(&headers, &payload(body)).map(|e| (e.id, e.event_type))
        };
        let id = delivery[0].1.to_string();
        assert_eq!(
            parse(&delivery, br#"{"action":"opened","issue":{}}"#),
            Ok((id.clone(), "issues.opened".into()))
        );
        assert_eq!(parse(&delivery, br#"{"zen":"Keep it logically awesome."}"#), Ok((id, "issues".into())));
        assert_eq!(parse(&delivery[1..], b"{}"), Err(EventError::Missing(DELIVERY_HEADER)));
        assert_eq!(parse(&delivery[..1], br#"{"action":"opened"}"#), Err(EventError::Missing(EVENT_HEADER)));
        assert_eq!(parse(&delivery, b"payload=%7B%7D"), Err(EventError::NotJson));
        assert_eq!(parse(&delivery, br#"{"action":1}"#), Err(EventError::NotAnEvent("GitHub")));
    }

    #[test]
    fn a_bad_action_is_reported_as_the_action_not_as_the_event_header() {
        let parse = |event: &str, body: String| {
            let headers = test_headers(&[(DELIVERY_HEADER, "72d3162e"), (EVENT_HEADER, event)]);
            GitHubFormat.read_request(&headers, &payload(body.as_bytes())).map(|e| e.event_type)
        };
        let action = |action: &str| format!(r#"{{"action":{}}}"#, serde_json::to_string(action).unwrap());
        assert_eq!(parse("issues", action(&"a".repeat(256))), Err(EventError::TooLong("action")));
        assert_eq!(parse("issues", action("opened\u{1b}")), Err(EventError::Missing("action")));
        // Each part fits, but not the two together.
        assert_eq!(parse(&"e".repeat(200), action(&"a".repeat(55))), Err(EventError::TooLong(COMBINED_TYPE)));
        assert_eq!(parse(&"e".repeat(200), action(&"a".repeat(54))).map(|t| t.len()), Ok(255));
        assert_eq!(parse(&"e".repeat(256), action("opened")), Err(EventError::TooLong(EVENT_HEADER)));
    }
}
