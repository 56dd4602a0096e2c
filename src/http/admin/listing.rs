//! The query of a listing (`GET /admin/events`, `GET /admin/jobs`): its
//! filters, then the page.

use axum::extract::RawQuery;
use serde::Deserialize;

use crate::http::UnknownFields;
use crate::http::error::ApiError;
use crate::operations::filter::parsed;
use crate::operations::page::{Cursor, Position};

/// A listing's query: the filters `F`, `limit` and `cursor` (to a row's
/// place `P` in the listing's order); any other field is refused.
#[derive(Deserialize)]
#[serde(bound(deserialize = "F: Deserialize<'de>, P: Position"))]
struct ListQuery<F, P = i64> {
    #[serde(flatten)]
    filter: F,
    #[serde(default, deserialize_with = "parsed")]
    limit: Option<u32>,
    #[serde(default, deserialize_with = "parsed")]
    cursor: Option<Cursor<P>>,
    #[serde(flatten)]
    unknown: UnknownFields,
}

/// A listing's request, read: what to match, how many rows, from where.
pub struct Listing<F, P = i64> {
    /// The conditions the rows must meet.
    pub filter: F,
    /// Rows on the page, within `[1, most]`.
    pub limit: u32,
    /// Where the page starts; none for the newest rows.
    pub cursor: Option<Cursor<P>>,
}

impl<F, P: Position> Listing<F, P> {
    /// Reads `query`, with `page` rows unless `limit` says otherwise and
    /// `most` at most; 400 for a malformed value or an unknown field.
    ///
    /// Read with serde_html_form rather than axum's `Query`
    /// (serde_urlencoded), which refuses a repeated parameter such as
    /// `where`.
    pub fn read(RawQuery(query): RawQuery, page: u32, most: u32) -> Result<Self, ApiError>
    where
        F: for<'de> Deserialize<'de>,
    {
        let ListQuery { filter, limit, cursor, unknown } =
            serde_html_form::from_str(query.as_deref().unwrap_or(""))
                .map_err(|e| ApiError::BadRequest(format!("Failed to deserialize query string: {e}")))?;
        unknown.refuse()?;
        Ok(Listing { filter, limit: limit.unwrap_or(page).clamp(1, most), cursor })
    }
}
