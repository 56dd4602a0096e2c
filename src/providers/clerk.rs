//! Clerk, which delivers through Svix: Standard Webhooks signatures; the
//! event id is the signed `svix-id` header, the type is the body's `type`,
//! and `timestamp` is milliseconds since the epoch.

use std::borrow::Cow;

use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::signature::SignatureError;
use super::standard_webhooks::{self, StandardWebhooksVerifier};
use super::{InvalidSecret, Provider, ProviderSpec, Verified};
use crate::event::{self, Event, EventError};

/// Clerk at `/webhooks/clerk` and `/account/webhook`; secrets from `CLERK_WEBHOOK_SECRET`.
pub const SPEC: ProviderSpec = ProviderSpec {
    name: Clerk::NAME,
    aliases: &["/account/webhook"],
    secret_help: "Clerk signing secrets `whsec_...` (Webhooks > your endpoint > Signing Secret), \
                  comma-separated (several during a rotation).",
    build: |secrets, tolerance_secs| Ok(std::sync::Arc::new(Clerk::new(secrets, tolerance_secs)?)),
};

/// Verifies and reads Clerk webhooks.
#[derive(Debug)]
pub struct Clerk {
    verifier: StandardWebhooksVerifier,
}

impl Clerk {
    /// The provider name stored with each Clerk event.
    pub const NAME: &'static str = "clerk";

    /// Takes Clerk's `whsec_...` signing secrets.
    pub fn new(secrets: &[SecretString], tolerance_secs: u64) -> Result<Self, InvalidSecret> {
        Ok(Clerk { verifier: StandardWebhooksVerifier::new(secrets, tolerance_secs)? })
    }
}

impl Provider for Clerk {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn verify<'h>(
        &self,
        headers: &'h HeaderMap,
        body: &[u8],
        now: i64,
    ) -> Result<Verified<'h>, SignatureError> {
        self.verifier.verify(headers, body, now).map(|message| message.verified)
    }

    fn parse_event<'a>(&self, headers: &'a HeaderMap, body: &'a [u8]) -> Result<Event<'a>, EventError> {
        let envelope: Envelope<'a> =
            serde_json::from_slice(body).map_err(|e| EventError::from_json(&e, "Clerk"))?;
        let id = standard_webhooks::message_id(headers).map(Cow::Borrowed);
        let occurred_at = match envelope.timestamp {
            Some(millis) => Some(
                DateTime::<Utc>::from_timestamp_millis(millis)
                    .ok_or(EventError::InvalidTimestamp("timestamp"))?,
            ),
            None => None,
        };
        Ok(Event {
            id: event::required(id, "svix-id")?,
            event_type: event::required(envelope.event_type, "type")?,
            occurred_at,
            notification_id: None,
            data: envelope.data,
        })
    }

    /// The event id is the message id header.
    fn stored_headers(&self, event_id: &str, _event_type: &str) -> HeaderMap {
        standard_webhooks::stored_headers(event_id)
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_event_id_comes_from_the_signed_header_and_the_type_from_the_body() {
        let clerk = Clerk::new(&[], 300).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("svix-id", HeaderValue::from_static("msg_1"));
        let body =
            br#"{"type":"user.created","timestamp":1654012591835,"object":"event","data":{"id":"user_1"}}"#;
        let event = clerk.parse_event(&headers, body).unwrap();
        assert_eq!((event.id.as_ref(), event.event_type.as_ref()), ("msg_1", "user.created"));
        assert_eq!(event.occurred_at.unwrap().timestamp_millis(), 1654012591835);
        assert_eq!(event.data.unwrap().get(), r#"{"id":"user_1"}"#);

        assert_eq!(clerk.parse_event(&headers, br#"{"data":{}}"#).unwrap_err(), EventError::Missing("type"));
        assert_eq!(clerk.parse_event(&HeaderMap::new(), body).unwrap_err(), EventError::Missing("svix-id"));
    }
}
