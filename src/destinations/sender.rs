//! One attempt: the HTTP request a destination receives, and what its
//! answer (or its silence) means.
//!
//! The body is the provider's raw request body, byte for byte. The headers:
//!
//! | header | value |
//! |---|---|
//! | `webhook-id` | stable for the event and the destination (see `signer::message_id`) |
//! | `webhook-timestamp` | this attempt's time, unix seconds |
//! | `webhook-signature` | `v1,<base64>` per signing secret, space separated |
//! | `webhook-inbox-provider` | `paddle`, `clerk`, ... |
//! | `webhook-inbox-event-type` | the provider's event type |
//! | `webhook-inbox-event-id` | the provider's event id |
//! | `webhook-inbox-attempt` | 1 for the first attempt |
//! | `webhook-inbox-occurred-at` | the provider's timestamp of the event, RFC 3339 (absent when it sent none) |
//! | `traceparent` | the attempt's span, in the delivery's trace (only when traces are exported) |

use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};

use super::declaration::Destination;
use super::signer::{message_id, signature_header};
use crate::queue::SendFailure;
use crate::telemetry;

/// How much of a response body an attempt keeps.
pub const KEPT_BODY_BYTES: usize = 1024;

/// The event one forwarding request carries, and which attempt it is.
#[derive(Debug, Clone)]
pub struct ForwardedEvent<'a> {
    /// The provider that sent it to us.
    pub provider: &'a str,
    /// The provider's event type.
    pub event_type: &'a str,
    /// The provider's event id.
    pub event_id: &'a str,
    /// When the provider says it happened.
    pub occurred_at: Option<DateTime<Utc>>,
    /// The raw body as the provider sent it.
    pub body: Bytes,
    /// Which attempt this is, 1 for the first (replays count on).
    pub attempt: u32,
}

/// What one attempt did, as `destination_attempts` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The answer's status; `None` when there was no answer.
    pub status: Option<u16>,
    /// Why it failed, in one line; `None` for a 2xx.
    pub error: Option<String>,
    /// The first [`KEPT_BODY_BYTES`] of the answer's body, as text.
    pub body: String,
    /// What the receiver asked for with `Retry-After` on a 429 or 503.
    pub retry_after: Option<Duration>,
}

impl Attempt {
    /// Whether the receiver answered 410 Gone: by the Standard Webhooks
    /// spec, it wants no more requests, and the destination is disabled.
    pub fn gone(&self) -> bool {
        self.status == Some(StatusCode::GONE.as_u16())
    }

    /// What kind of outcome it was, for metrics: `sent`, `http_error`,
    /// `gone`, `timeout`, `network`.
    pub fn kind(&self) -> &'static str {
        match (self.status, &self.error) {
            (_, None) => "sent",
            (Some(410), _) => "gone",
            (Some(_), _) => "http_error",
            (None, Some(error)) if error.starts_with(NO_ANSWER) => "timeout",
            (None, Some(_)) => "network",
        }
    }
}

impl crate::queue::SendResult for Attempt {
    fn failure(&self) -> Option<SendFailure<'_>> {
        let error = self.error.as_deref()?;
        Some(SendFailure { error, retry_after: self.retry_after })
    }
}

/// The start of the error of an attempt that timed out.
const NO_ANSWER: &str = "no answer within";

/// POSTs `event` to `destination`, signed at `now`, with `client`.
pub async fn send(
    client: &reqwest::Client,
    destination: &Destination,
    event: &ForwardedEvent<'_>,
    now: DateTime<Utc>,
) -> Attempt {
    let id = message_id(&destination.name, event.provider, event.event_id);
    let timestamp = now.timestamp();
    let mut headers = HeaderMap::new();
    let mut add = |name: &'static str, value: &str| {
        // Every value is an identifier or a number; one that is not a valid
        // header value (a provider's odd event id) is left out, not fatal.
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    add("webhook-id", &id);
    add("webhook-timestamp", &timestamp.to_string());
    add("webhook-signature", &signature_header(destination.keys(), &id, timestamp, &event.body));
    add("webhook-inbox-provider", event.provider);
    add("webhook-inbox-event-type", event.event_type);
    add("webhook-inbox-event-id", event.event_id);
    add("webhook-inbox-attempt", &event.attempt.to_string());
    if let Some(occurred_at) = event.occurred_at {
        add("webhook-inbox-occurred-at", &occurred_at.to_rfc3339_opts(SecondsFormat::Millis, true));
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    telemetry::context::send_with(&tracing::Span::current(), &mut headers);
    let request = client.post(destination.url.clone()).headers(headers).body(event.body.clone());
    // One bound for the whole exchange, the first KiB of the body included.
    match tokio::time::timeout(destination.timeout, exchange(request)).await {
        Ok(attempt) => attempt,
        Err(_) => Attempt {
            status: None,
            error: Some(format!("{NO_ANSWER} {}", humantime::format_duration(destination.timeout))),
            body: String::new(),
            retry_after: None,
        },
    }
}

async fn exchange(request: reqwest::RequestBuilder) -> Attempt {
    let mut response = match request.send().await {
        Ok(response) => response,
        Err(error) => {
            return Attempt {
                status: None,
                error: Some(describe(error)),
                body: String::new(),
                retry_after: None,
            };
        }
    };
    let status = response.status();
    let retry_after = match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| retry_after(value.to_str().ok()?, Utc::now())),
        _ => None,
    };
    let mut body = Vec::new();
    while body.len() < KEPT_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            // A body cut short says nothing more about the attempt than its status.
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(KEPT_BODY_BYTES);
    let error = (!status.is_success()).then(|| match status {
        StatusCode::GONE => "HTTP 410 Gone: the receiver asks for no more requests".to_string(),
        status => format!("HTTP {status}"),
    });
    Attempt { status: Some(status.as_u16()), error, body: text(&body), retry_after }
}

/// The response body as text PostgreSQL can store: invalid UTF-8 replaced,
/// NULs dropped.
fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).replace('\0', "")
}

/// A transport error in one line, its causes included, without the URL
/// (whose query or userinfo may carry a credential; see
/// [`Destination::shown_url`]).
fn describe(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A `Retry-After` value: seconds, or an HTTP date (counted from `now`).
fn retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = DateTime::parse_from_rfc2822(value).ok()?.with_timezone(&Utc);
    Some((at - now).to_std().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = DateTime::parse_from_rfc3339("2015-10-21T07:28:00Z").unwrap().with_timezone(&Utc);
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:30:00 GMT", now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(Duration::ZERO), "past: at once");
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-5", now), None);
    }

    #[test]
    fn kept_bodies_are_storable_text() {
        assert_eq!(text(b"ok\0\xff!"), "ok\u{fffd}!");
    }
}
