//! The fields of an operator's request that no parameter has: refused by
//! the admin API and the console alike.

use std::collections::BTreeMap;

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
