//! Pages of the archive, newest first, with an opaque cursor to the next
//! page: what the admin API's and the console's event lists show.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Serialize, Serializer};
use sqlx::PgPool;

use super::filter::EventFilter;
use super::query::{self, ArchivedDelivery};

/// Where the next page starts. Clients pass back the text they were given;
/// what it holds (the last row's id) is ours to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    before: i64,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&URL_SAFE_NO_PAD.encode(format!("before:{}", self.before)))
    }
}

impl Cursor {
    /// The cursor of the page that follows the row `id` (ids descending).
    pub fn after(id: i64) -> Cursor {
        Cursor { before: id }
    }

    /// The next page's rows have ids below this.
    pub fn before(self) -> i64 {
        self.before
    }
}

/// A cursor that was not one of ours.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid cursor")]
pub struct InvalidCursor;

impl FromStr for Cursor {
    type Err = InvalidCursor;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        URL_SAFE_NO_PAD
            .decode(text)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|text| text.strip_prefix("before:")?.parse().ok())
            .map(|before| Cursor { before })
            .ok_or(InvalidCursor)
    }
}

impl Serialize for Cursor {
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
    pub next_cursor: Option<Cursor>,
}

/// At most `limit` rows matching `filter`, newest first, from `cursor` on.
pub async fn page(
    pool: &PgPool,
    filter: &EventFilter,
    limit: u32,
    cursor: Option<Cursor>,
) -> sqlx::Result<Page> {
    // One row more than the page tells whether there is a next page.
    let mut events = query::list(pool, filter, limit + 1, cursor.map(|c| c.before)).await?;
    let next_cursor = match events.len() > limit as usize {
        true => {
            events.truncate(limit as usize);
            events.last().map(|last| Cursor { before: last.id })
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
        let cursor = Cursor { before: 1234 };
        assert_eq!(cursor.to_string().parse(), Ok(cursor));
        for bad in ["", "1234", "YmVmb3JlOg", "!!"] {
            assert_eq!(bad.parse::<Cursor>(), Err(InvalidCursor), "{bad}");
        }
    }
}
