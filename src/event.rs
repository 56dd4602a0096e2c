//! What every provider's delivery boils down to once it is verified and parsed.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;

/// Longest event id or event type accepted. Both go into a btree index, and
/// every provider we know sends ids of a few dozen bytes.
pub const MAX_IDENTIFIER_LEN: usize = 255;

/// The provider-neutral view of one delivered event, borrowed from the request.
#[derive(Debug)]
pub struct Event<'a> {
    /// The provider's stable id for the event; the dedup key with the provider name.
    pub id: Cow<'a, str>,
    /// The provider's event type, e.g. `subscription.created`.
    pub event_type: Cow<'a, str>,
    /// When the provider says the event happened; orders state changes.
    pub occurred_at: Option<DateTime<Utc>>,
    /// Paddle's per-attempt notification id (a dashboard replay gets a new one).
    pub notification_id: Option<Cow<'a, str>>,
    /// The event's `data` object, parsed lazily by the handler that needs it.
    pub data: Option<&'a RawValue>,
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

/// Checks a required identifier (event id or type): present, non-empty,
/// bounded, and free of control characters (a NUL, which JSON can escape,
/// is not storable as PostgreSQL text).
pub fn required<'a>(value: Option<Cow<'a, str>>, field: &'static str) -> Result<Cow<'a, str>, EventError> {
    match value {
        Some(value) if value.len() > MAX_IDENTIFIER_LEN => Err(EventError::TooLong(field)),
        Some(value) if !value.is_empty() && !value.chars().any(char::is_control) => Ok(value),
        _ => Err(EventError::Missing(field)),
    }
}

/// An [`Event`] that owns its data, so it can be handed to a delivery
/// worker while the request that carried it goes its way.
#[derive(Debug)]
pub struct OwnedEvent {
    id: String,
    event_type: String,
    occurred_at: Option<DateTime<Utc>>,
    notification_id: Option<String>,
    data: Option<Box<RawValue>>,
}

impl OwnedEvent {
    /// The event's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// When the provider says the event happened.
    pub fn occurred_at(&self) -> Option<DateTime<Utc>> {
        self.occurred_at
    }

    /// The event's type.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The event, borrowed from here.
    pub fn as_event(&self) -> Event<'_> {
        Event {
            id: Cow::Borrowed(&self.id),
            event_type: Cow::Borrowed(&self.event_type),
            occurred_at: self.occurred_at,
            notification_id: self.notification_id.as_deref().map(Cow::Borrowed),
            data: self.data.as_deref(),
        }
    }
}

impl From<Event<'_>> for OwnedEvent {
    fn from(event: Event<'_>) -> Self {
        OwnedEvent {
            id: event.id.into_owned(),
            event_type: event.event_type.into_owned(),
            occurred_at: event.occurred_at,
            notification_id: event.notification_id.map(Cow::into_owned),
            data: event.data.map(ToOwned::to_owned),
        }
    }
}
