//! Any sender that follows the Standard Webhooks spec (Svix-based providers
//! included), named by configuration (`STANDARD_WEBHOOKS=name=whsec_...`) and
//! served at `/webhooks/{name}`. The signature is the Standard Webhooks one;
//! the event id is the signed `webhook-id` (or `svix-id`) header.
//!
//! The spec only recommends a payload shape (`type`, an RFC 3339
//! `timestamp`, `data`), so both are read when present and never required:
//! a signed delivery from a sender that shapes its payload otherwise is
//! still archived and deduplicated rather than refused for ever.

use std::borrow::Cow;

use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::signature::SignatureError;
use super::standard_webhooks::{self, StandardWebhooksVerifier};
use super::{EventLayout, InvalidSecret, Provider, TopLevel, Verified};
use crate::event::EventError;

/// The event type recorded when the body has no `type` string.
pub const UNTYPED: &str = "unknown";

/// One Standard Webhooks sender.
#[derive(Debug)]
pub struct StandardWebhooksSender {
    name: String,
    verifier: StandardWebhooksVerifier,
}

impl StandardWebhooksSender {
    /// The sender called `name` (its route and `provider` value), with its `whsec_...` secrets.
    pub fn new(name: &str, secrets: &[SecretString], tolerance_secs: u64) -> Result<Self, InvalidSecret> {
        Ok(StandardWebhooksSender {
            name: name.to_string(),
            verifier: StandardWebhooksVerifier::new(secrets, tolerance_secs)?,
        })
    }
}

impl Provider for StandardWebhooksSender {
    fn name(&self) -> &str {
        &self.name
    }

    fn verify<'h>(
        &self,
        headers: &'h HeaderMap,
        body: &[u8],
        now: i64,
    ) -> Result<Verified<'h>, SignatureError> {
        self.verifier.verify(headers, body, now).map(|message| message.verified)
    }
}

/// The Standard Webhooks layout: the id is the signed `webhook-id` (or
/// `svix-id`) header; `type`, `timestamp` and `data` are read from the body
/// when they have the recommended shape.
#[derive(Debug)]
pub struct StandardFormat;

impl EventLayout for StandardFormat {
    type Envelope<'a> = Envelope<'a>;
}

/// The recommended top level; each field is kept raw, so that a field of
/// another shape is ignored rather than refused.
#[derive(Deserialize)]
pub struct Envelope<'a> {
    #[serde(borrow, rename = "type")]
    event_type: Option<&'a RawValue>,
    #[serde(borrow)]
    timestamp: Option<&'a RawValue>,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

impl<'a> TopLevel<'a> for Envelope<'a> {
    const FORMAT: &'static str = "Standard Webhooks";

    /// The id is the signed header; the type, if the body has none, [`UNTYPED`].
    fn id_and_type<'s>(&'s mut self, headers: &'s HeaderMap) -> [(Option<Cow<'s, str>>, &'static str); 2] {
        let event_type = text(self.event_type).filter(|t| !t.is_empty()).unwrap_or(Cow::Borrowed(UNTYPED));
        let id = standard_webhooks::message_id(headers).map(Cow::Borrowed);
        [(id, "webhook-id"), (Some(event_type), "type")]
    }

    /// `timestamp`, when it is RFC 3339; otherwise none.
    fn occurred_at(&self) -> Result<Option<DateTime<Utc>>, EventError> {
        let occurred_at = text(self.timestamp).and_then(|ts| DateTime::parse_from_rfc3339(&ts).ok());
        Ok(occurred_at.map(|ts| ts.with_timezone(&Utc)))
    }

    fn data(&self) -> Option<&RawValue> {
        self.data
    }
}

/// The field's text if it is a JSON string.
fn text(raw: Option<&RawValue>) -> Option<Cow<'_, str>> {
    serde_json::from_str(raw?.get()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{EventFormat, payload};
    use axum::http::HeaderValue;

    fn parse(headers: &HeaderMap, body: &str) -> Result<(String, String, Option<String>), EventError> {
        let event = StandardFormat.read_request(headers, &payload(body.as_bytes()))?;
        Ok((event.id, event.event_type, event.occurred_at.map(|t| t.to_rfc3339())))
    }

    #[test]
    fn the_event_id_is_the_signed_header_and_type_and_timestamp_come_from_the_body() {
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", HeaderValue::from_static("msg_1"));
        let body =
            r#"{"type":"contact.created","timestamp":"2022-11-03T20:26:10.344522Z","data":{"id":"c_1"}}"#;
        assert_eq!(
            parse(&headers, body).unwrap(),
            ("msg_1".into(), "contact.created".into(), Some("2022-11-03T20:26:10.344522+00:00".into()))
        );
        assert_eq!(parse(&HeaderMap::new(), body).unwrap_err(), EventError::Missing("webhook-id"));
    }

    #[test]
    fn payloads_of_another_shape_are_kept_with_an_unknown_type() {
        let mut headers = HeaderMap::new();
        headers.insert("svix-id", HeaderValue::from_static("msg_2"));
        for body in [r#"{"event_type":"ping"}"#, r#"{"type":7,"timestamp":1667507170}"#, r#"{"type":""}"#] {
            assert_eq!(parse(&headers, body).unwrap(), ("msg_2".into(), UNTYPED.into(), None), "{body}");
        }
        assert_eq!(parse(&headers, "[1]").unwrap_err(), EventError::NotAnEvent("Standard Webhooks"));
        assert_eq!(parse(&headers, "nope").unwrap_err(), EventError::NotJson);
        let long = format!(r#"{{"type":"{}"}}"#, "t".repeat(256));
        assert_eq!(parse(&headers, &long).unwrap_err(), EventError::TooLong("type"));
    }
}
