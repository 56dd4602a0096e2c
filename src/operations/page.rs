//! Pages of the archive, newest first, with an opaque cursor to the next
//! page: what the admin API's and the console's event lists show.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::DateTime;
use serde::{Serialize, Serializer};
use sqlx::PgPool;

use super::filter::EventFilter;
use super::query::{self, ArchivedDelivery, Received};
use crate::event::EARLIEST_STORABLE_TIME;

/// Where the next page starts: the last row's place in its listing's
/// order. Clients pass back the text they were given; what it holds is
/// ours to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor<P = i64> {
    after: P,
}

/// A row's place in a listing's order, newest first, as a cursor writes it.
pub trait Position: Sized + Copy {
    /// The text a cursor holds.
    fn write(&self) -> String;
    /// The position in `text`, if it is one [`write`](Position::write) wrote.
    fn read(text: &str) -> Option<Self>;
}

/// A job's place: jobs are listed by id.
impl Position for i64 {
    fn write(&self) -> String {
        format!("before:{self}")
    }

    fn read(text: &str) -> Option<Self> {
        text.strip_prefix("before:")?.parse().ok()
    }
}

/// An archive row's place, as [`query::list`] orders the archive.
impl Position for Received {
    fn write(&self) -> String {
        format!("before:{}:{}", self.created_at.timestamp_micros(), self.id)
    }

    fn read(text: &str) -> Option<Self> {
        let (micros, id) = text.strip_prefix("before:")?.split_once(':')?;
        let created_at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
        // A time PostgreSQL cannot hold was never written by us.
        (created_at.timestamp() >= EARLIEST_STORABLE_TIME).then_some(())?;
        Some(Received { created_at, id: id.parse().ok()? })
    }
}

impl<P: Position> fmt::Display for Cursor<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&URL_SAFE_NO_PAD.encode(self.after.write()))
    }
}

impl<P: Position> Cursor<P> {
    /// The cursor of the page that follows the row at `position`.
    pub fn after(position: P) -> Self {
        Cursor { after: position }
    }

    /// The next page's rows come after this, in the listing's order.
    pub fn position(self) -> P {
        self.after
    }
}

/// A cursor that was not one of ours.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid cursor")]
pub struct InvalidCursor;

impl<P: Position> FromStr for Cursor<P> {
    type Err = InvalidCursor;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        URL_SAFE_NO_PAD
            .decode(text)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|text| P::read(&text))
            .map(Cursor::after)
            .ok_or(InvalidCursor)
    }
}

impl<P: Position> Serialize for Cursor<P> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// One page of rows and, when more rows match, the cursor of the next.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    /// The rows, newest first.
    pub events: Vec<ArchivedDelivery>,
    /// `None`: this is the last page.
    pub next_cursor: Option<Cursor<Received>>,
}

/// At most `limit` rows matching `filter`, newest first, from `cursor` on.
pub async fn page(
    pool: &PgPool,
    filter: &EventFilter,
    limit: u32,
    cursor: Option<Cursor<Received>>,
) -> sqlx::Result<Page> {
    // One row more than the page tells whether there is a next page.
    let mut events = query::list(pool, filter, limit + 1, cursor.map(Cursor::position)).await?;
    let next_cursor = match events.len() > limit as usize {
        true => {
            events.truncate(limit as usize);
            events.last().map(|last| Cursor::after(Received { created_at: last.created_at, id: last.id }))
        }
        false => None,
    };
    Ok(Page { events, next_cursor })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_wrote_and_nothing_else() {
        let job = Cursor::after(1234_i64);
        assert_eq!(job.to_string().parse(), Ok(job));
        let row = Cursor::after(Received {
            created_at: DateTime::from_timestamp_micros(1_764_633_600_123_456).unwrap(),
            id: 42,
        });
        assert_eq!(row.to_string().parse(), Ok(row));
        for bad in ["", "1234", "YmVmb3JlOg", "!!"] {
            assert_eq!(bad.parse::<Cursor>(), Err(InvalidCursor), "{bad}");
            assert_eq!(bad.parse::<Cursor<Received>>(), Err(InvalidCursor), "{bad}");
        }
        // A time PostgreSQL cannot hold (before 4714 BC) is no cursor of ours.
        let ancient = URL_SAFE_NO_PAD.encode("before:-8000000000000000000:1");
        assert_eq!(ancient.parse::<Cursor<Received>>(), Err(InvalidCursor));
        // Each listing takes its own kind only.
        assert_eq!(job.to_string().parse::<Cursor<Received>>(), Err(InvalidCursor));
        assert_eq!(row.to_string().parse::<Cursor>(), Err(InvalidCursor));
    }
}
