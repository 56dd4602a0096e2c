//! What every provider's delivery boils down to once it is verified: its
//! payload, checked once, and the provider-neutral event read from it.

pub mod json;
mod payload;

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;

pub use payload::Payload;

/// Longest event id or event type accepted. Both go into a btree index, and
/// every provider we know sends ids of a few dozen bytes.
pub const MAX_IDENTIFIER_LEN: usize = 255;

/// The provider-neutral view of one delivered event. Owned, so that it
/// travels with its delivery from the request to a delivery worker.
#[derive(Debug, Clone)]
pub struct Event {
    /// The provider's stable id for the event; the dedup key with the provider name.
    pub id: String,
    /// The provider's event type, e.g. `subscription.created`.
    pub event_type: String,
    /// When the provider says the event happened; orders state changes.
    pub occurred_at: Option<DateTime<Utc>>,
    /// Paddle's per-attempt notification id (a dashboard replay gets a new one).
    pub notification_id: Option<String>,
    /// The event's `data` object, parsed by the effect that needs it.
    pub data: Option<Box<RawValue>>,
    /// When this service first received the event: now, for a request; for
    /// a reprocess, when its first archived delivery arrived. Orders an
    /// event that carries no time of its own.
    pub received_at: DateTime<Utc>,
}

impl Event {
    /// An event with this id and type, received now, and nothing else known yet.
    pub fn new(id: String, event_type: String) -> Self {
        Event {
            id,
            event_type,
            occurred_at: None,
            notification_id: None,
            data: None,
            received_at: Utc::now(),
        }
    }
}

/// Why a signed body could not be read as an event: answered with 400.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EventError {
    /// The body is not one well-formed JSON value.
    #[error("body is not valid JSON")]
    NotJson,
    /// The body is JSON, but not an object of the provider's event format.
    #[error("body is not a {0} event object")]
    NotAnEvent(&'static str),
    /// A required field is absent, empty or of the wrong type.
    #[error("missing or invalid {0}")]
    Missing(&'static str),
    /// An id or type longer than [`MAX_IDENTIFIER_LEN`].
    #[error("{0} is longer than 255 bytes")]
    TooLong(&'static str),
    /// A timestamp field that does not parse.
    #[error("invalid {0}")]
    InvalidTimestamp(&'static str),
    /// An object repeats a key, which readers of JSON resolve differently.
    #[error("body repeats a key in a JSON object")]
    DuplicateKey,
}

impl EventError {
    /// Classifies a serde_json error without quoting the payload back.
    pub fn from_json(error: &serde_json::Error, format: &'static str) -> Self {
        use serde_json::error::Category;
        match error.classify() {
            Category::Data => EventError::NotAnEvent(format),
            Category::Syntax | Category::Eof | Category::Io => EventError::NotJson,
        }
    }
}

/// Longest request id the archive keeps; a longer one is dropped.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// `id`, if the archive keeps it as a delivery's request id: at most
/// [`MAX_REQUEST_ID_LEN`] bytes of visible ASCII, as a webhook's
/// `x-request-id` header can be, whether it came from a header or from a
/// provider's API (`meta.request_id`), which bounds neither.
pub fn kept_request_id(id: &str) -> Option<&str> {
    (id.len() <= MAX_REQUEST_ID_LEN && id.bytes().all(|b| (b' '..=b'~').contains(&b))).then_some(id)
}

/// Checks a required identifier (event id or type): present, non-empty,
/// bounded, and free of control characters (a NUL, which JSON can escape,
/// is not storable as PostgreSQL text).
pub fn required(value: Option<Cow<'_, str>>, field: &'static str) -> Result<String, EventError> {
    match value {
        Some(value) if value.len() > MAX_IDENTIFIER_LEN => Err(EventError::TooLong(field)),
        Some(value) if !value.is_empty() && !value.chars().any(char::is_control) => Ok(value.into_owned()),
        _ => Err(EventError::Missing(field)),
    }
}

/// An event time written as RFC 3339 text in `field`.
pub fn time_from_rfc3339(text: &str, field: &'static str) -> Result<DateTime<Utc>, EventError> {
    let time = DateTime::parse_from_rfc3339(text).map_err(|_| EventError::InvalidTimestamp(field))?;
    storable(time.with_timezone(&Utc), field)
}

/// An event time written as seconds since the epoch in `field`.
pub fn time_from_unix_seconds(seconds: i64, field: &'static str) -> Result<DateTime<Utc>, EventError> {
    DateTime::from_timestamp(seconds, 0)
        .ok_or(EventError::InvalidTimestamp(field))
        .and_then(|t| storable(t, field))
}

/// An event time written as milliseconds since the epoch in `field`.
pub fn time_from_unix_millis(millis: i64, field: &'static str) -> Result<DateTime<Utc>, EventError> {
    DateTime::from_timestamp_millis(millis)
        .ok_or(EventError::InvalidTimestamp(field))
        .and_then(|t| storable(t, field))
}

/// The earliest time PostgreSQL's `timestamptz` holds, 4714-11-24 BC at
/// midnight UTC (its Julian day 0), in seconds since the epoch. Its latest,
/// in the year 294276, lies beyond any time chrono represents.
pub const EARLIEST_STORABLE_TIME: i64 = -210_866_803_200;

/// `time`, if the archive can store it. Why checked here: an event time
/// PostgreSQL cannot hold would fail the insert on every one of the
/// provider's retries.
fn storable(time: DateTime<Utc>, field: &'static str) -> Result<DateTime<Utc>, EventError> {
    match time.timestamp() >= EARLIEST_STORABLE_TIME {
        true => Ok(time),
        false => Err(EventError::InvalidTimestamp(field)),
    }
}

/// A body's `data`, owned by its event.
pub fn data(raw: Option<&RawValue>) -> Option<Box<RawValue>> {
    raw.map(ToOwned::to_owned)
}
