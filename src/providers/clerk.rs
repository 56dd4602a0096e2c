//! Clerk, which delivers through Svix: Standard Webhooks signatures; the
//! event id is the signed `svix-id` header, the type is the body's `type`,
//! and `timestamp` is milliseconds since the epoch.

use std::borrow::Cow;

use axum::http::HeaderMap;
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::standard_sender::StandardWebhooksSender;
use super::standard_webhooks;
use super::{EventFormat, InvalidSecret, ProviderSpec, TopLevel};
use crate::event::{self, Event, EventError, Payload};

/// Clerk at `/webhooks/clerk` and `/account/webhook`; secrets from `CLERK_WEBHOOK_SECRET`.
pub const SPEC: ProviderSpec = ProviderSpec {
    name: Clerk::NAME,
    aliases: &["/account/webhook"],
    secret_help: "Clerk signing secrets `whsec_...` (Webhooks > your endpoint > Signing Secret), \
                  comma-separated (several during a rotation).",
    build: |secrets, tolerance_secs| Ok(std::sync::Arc::new(Clerk::verifier(secrets, tolerance_secs)?)),
    format: &ClerkFormat,
};

/// Clerk: its name, and its verifier ([`ClerkFormat`] reads its events).
#[derive(Debug)]
pub struct Clerk;

impl Clerk {
    /// The provider name stored with each Clerk event.
    pub const NAME: &'static str = "clerk";

    /// The verifier of Clerk's signatures, which are Standard Webhooks ones
    /// (Svix): a Standard Webhooks sender named `clerk`, with Clerk's
    /// `whsec_...` signing secrets.
    pub fn verifier(
        secrets: &[SecretString],
        tolerance_secs: u64,
    ) -> Result<StandardWebhooksSender, InvalidSecret> {
        StandardWebhooksSender::new(Self::NAME, secrets, tolerance_secs)
    }
}

/// Reads Clerk events: the id is the signed `svix-id` header; `type`,
/// `timestamp` (milliseconds) and `data` are in the body.
#[derive(Debug)]
pub struct ClerkFormat;

impl EventFormat for ClerkFormat {
    fn read_request(&self, headers: &HeaderMap, payload: &Payload) -> Result<Event, EventError> {
        let mut envelope = Envelope::read(payload)?;
        let id = standard_webhooks::message_id(headers).map(Cow::Borrowed);
        let event =
            Event::new(event::required(id, "svix-id")?, event::required(envelope.event_type.take(), "type")?);
        envelope.complete(event)
    }

    fn read_stored(&self, event_id: &str, event_type: &str, payload: &Payload) -> Result<Event, EventError> {
        Envelope::stored(payload, event_id, event_type)
    }
}

/// The top level of a Clerk event body.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, rename = "type")]
    event_type: Option<Cow<'a, str>>,
    timestamp: Option<i64>,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

impl<'a> TopLevel<'a> for Envelope<'a> {
    const FORMAT: &'static str = "Clerk";

    /// `event` with the envelope's time and data.
    fn complete(self, event: Event) -> Result<Event, EventError> {
        let occurred_at =
            self.timestamp.map(|ms| event::time_from_unix_millis(ms, "timestamp")).transpose()?;
        Ok(Event { occurred_at, data: event::data(self.data), ..event })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::payload;
    use axum::http::HeaderValue;

    #[test]
    fn the_event_id_comes_from_the_signed_header_and_the_type_from_the_body() {
        let read = |headers: &HeaderMap, body: &[u8]| ClerkFormat.read_request(headers, &payload(body));
        let mut headers = HeaderMap::new();
        headers.insert("svix-id", HeaderValue::from_static("msg_1"));
        let body =
            br#"{"type":"user.created","timestamp":1654012591835,"object":"event","data":{"id":"user_1"}}"#;
        let event = read(&headers, body).unwrap();
        assert_eq!((event.id.as_str(), event.event_type.as_str()), ("msg_1", "user.created"));
        assert_eq!(event.occurred_at.unwrap().timestamp_millis(), 1654012591835);
        assert_eq!(event.data.unwrap().get(), r#"{"id":"user_1"}"#);

        assert_eq!(read(&headers, br#"{"data":{}}"#).unwrap_err(), EventError::Missing("type"));
        assert_eq!(read(&HeaderMap::new(), body).unwrap_err(), EventError::Missing("svix-id"));
    }
}
