//! Clerk, which delivers through Svix: Standard Webhooks signatures; the
//! event id is the signed `svix-id` header, the type is the body's `type`,
//! and `timestamp` is milliseconds since the epoch.

use std::borrow::Cow;

use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{EventLayout, ProviderSpec, Signature, TopLevel, standard_webhooks};
use crate::event::{self, EventError};

/// The provider name stored with each Clerk event.
pub const NAME: &str = "clerk";

/// Clerk at `/webhooks/clerk` and `/account/webhook`; secrets from
/// `CLERK_WEBHOOK_SECRET`: Clerk's signatures are Standard Webhooks ones
/// (Svix), with Clerk's `whsec_...` signing secrets.
pub const SPEC: ProviderSpec = ProviderSpec {
    name: NAME,
    aliases: &["/account/webhook"],
    secret_help: "Clerk signing secrets `whsec_...` (Webhooks > your endpoint > Signing Secret), \
                  comma-separated (several during a rotation).",
    signature: Signature::StandardWebhooks,
    format: &ClerkFormat,
};

/// Clerk's layout: the id is the signed `svix-id` header; `type`,
/// `timestamp` (milliseconds) and `data` are in the body.
#[derive(Debug)]
pub struct ClerkFormat;

impl EventLayout for ClerkFormat {
    type Envelope<'a> = Envelope<'a>;
}

/// The top level of a Clerk event body.
#[derive(Deserialize)]
pub struct Envelope<'a> {
    #[serde(borrow, rename = "type")]
    event_type: Option<Cow<'a, str>>,
    timestamp: Option<i64>,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

impl<'a> TopLevel<'a> for Envelope<'a> {
    const FORMAT: &'static str = "Clerk";

    /// The id is the signed `svix-id` header, the type in the body.
    fn id_and_type<'s>(&'s mut self, headers: &'s HeaderMap) -> [(Option<Cow<'s, str>>, &'static str); 2] {
        let id = standard_webhooks::message_id(headers).map(Cow::Borrowed);
        [(id, "svix-id"), (self.event_type.take(), "type")]
    }

    /// `timestamp`, in unix milliseconds.
    fn occurred_at(&self) -> Result<Option<DateTime<Utc>>, EventError> {
        self.timestamp.map(|ms| event::time_from_unix_millis(ms, "timestamp")).transpose()
    }

    fn data(&self) -> Option<&RawValue> {
        self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{EventFormat, payload};
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
