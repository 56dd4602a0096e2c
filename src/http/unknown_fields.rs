//! The fields of an operator's request that no parameter has: refused by
//! the admin API and the console alike.

use std::collections::BTreeMap;

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::Deserialize;
use serde::de::IgnoredAny;

use super::error::ApiError;

/// The fields of a request that no parameter has, collected by
/// `#[serde(flatten)]` after the known ones took theirs.
///
/// Why refused rather than ignored: a misspelt filter (`stauts`) would
/// otherwise drop a condition, and list or reprocess more than was meant.
#[derive(Deserialize)]
#[serde(transparent)]
pub struct UnknownFields(BTreeMap<String, IgnoredAny>);

impl UnknownFields {
    /// 400 naming the first unknown field, if any.
    pub fn refuse(&self) -> Result<(), ApiError> {
        match self.0.keys().next() {
            Some(name) => Err(ApiError::BadRequest(format!("unknown field {name:?}"))),
            None => Ok(()),
        }
    }
}

/// A route that takes no query parameter: any is refused, as an unknown
/// field of a listing is (`?dry_run=true` on a route without one must not
/// run it for real).
pub struct NoQuery;

impl<S: Send + Sync> FromRequestParts<S> for NoQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let Query(unknown) = Query::<UnknownFields>::try_from_uri(&parts.uri)
            .map_err(|rejection| ApiError::BadRequest(rejection.body_text()))?;
        unknown.refuse()?;
        Ok(NoQuery)
    }
}
