//! The query of a listing (`GET /admin/events`, `GET /admin/jobs`): its
//! filters, then the page.

use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
use serde::Deserialize;

use crate::http::UnknownFields;
use crate::http::error::ApiError;
use crate::operations::filter::parsed;
use crate::operations::page::Cursor;

/// A listing's query: the filters `F`, `limit` and `cursor`; any other
/// field is refused.
#[derive(Deserialize)]
pub struct ListQuery<F> {
    #[serde(flatten)]
    filter: F,
    #[serde(default, deserialize_with = "parsed")]
    limit: Option<u32>,
    #[serde(default, deserialize_with = "parsed")]
    cursor: Option<Cursor>,
    #[serde(flatten)]
    unknown: UnknownFields,
}

/// A listing's request, read: what to match, how many rows, from where.
pub struct Listing<F> {
    /// The conditions the rows must meet.
    pub filter: F,
    /// Rows on the page, within `[1, most]`.
    pub limit: u32,
    /// Where the page starts; none for the newest rows.
    pub cursor: Option<Cursor>,
}

impl<F> Listing<F> {
    /// Reads `query`, with `page` rows unless `limit` says otherwise and
    /// `most` at most; 400 for a malformed value or an unknown field.
    pub fn read(
        query: Result<Query<ListQuery<F>>, QueryRejection>,
        page: u32,
        most: u32,
    ) -> Result<Self, ApiError> {
        let Query(ListQuery { filter, limit, cursor, unknown }) =
            query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
        unknown.refuse()?;
        Ok(Listing { filter, limit: limit.unwrap_or(page).clamp(1, most), cursor })
    }
}
