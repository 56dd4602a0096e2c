//! Which archived deliveries an operator means: the one set of filters that
//! `events list`, `events reprocess` and the admin API share, and the SQL
//! they become.

use std::fmt;
use std::str::FromStr;

use clap::Args;
use serde::{Deserialize, Deserializer};
use sqlx::{Postgres, QueryBuilder};

use super::age::Since;
use super::payload_match::PayloadMatch;
use crate::names::one_of;
use crate::providers;

/// A `processing_status` (DESIGN.md "Two tables, one job each").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Recorded, outcome not yet known (never committed by this service).
    Pending,
    /// The first delivery of its event: applied.
    Processed,
    /// A later delivery of an applied event: nothing done.
    Skipped,
    /// The effect failed: nothing applied.
    Failed,
}

impl Status {
    /// Every status, in the order the help lists them.
    pub const ALL: [Status; 4] = [Status::Processed, Status::Skipped, Status::Failed, Status::Pending];

    /// The value stored in the column.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Processed => "PROCESSED",
            Status::Skipped => "SKIPPED",
            Status::Failed => "FAILED",
        }
    }
}

impl FromStr for Status {
    type Err = String;

    /// Case-insensitive: `failed` and `FAILED` alike.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        one_of(text, &Status::ALL, |status| status.as_str())
    }
}

/// Conditions on archive rows; every one given must hold. Command-line
/// flags for the CLI, query parameters or JSON fields for the admin API.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[command(next_help_heading = "Filters")]
pub struct EventFilter {
    /// Only rows with this processing status: PROCESSED, SKIPPED, FAILED.
    #[arg(long)]
    #[serde(default, deserialize_with = "parsed")]
    pub status: Option<Status>,

    /// Only deliveries from this provider.
    #[arg(long, help = provider_help())]
    #[serde(default, deserialize_with = "parsed")]
    pub provider: Option<FilterValue>,

    /// Only events of this type (e.g. subscription.created).
    #[arg(long = "type", value_name = "TYPE")]
    #[serde(default, rename = "type", deserialize_with = "parsed")]
    pub event_type: Option<FilterValue>,

    /// Only rows archived since then: a duration back from now (30m, 2h, 1d) or an RFC 3339 time.
    #[arg(long)]
    #[serde(default, deserialize_with = "parsed")]
    pub since: Option<Since>,

    /// Only rows archived before then: a duration back from now (30m, 2h, 1d) or an RFC 3339 time.
    #[arg(long)]
    #[serde(default, deserialize_with = "parsed")]
    pub until: Option<Since>,

    /// Only deliveries of this event id.
    #[arg(long)]
    #[serde(default, deserialize_with = "parsed")]
    pub event_id: Option<FilterValue>,

    /// Only events whose payload has VALUE at PATH (keys separated by dots), e.g. data.customer_id=ctm_01; repeat for several, all must hold.
    #[arg(long = "where", value_name = "PATH=VALUE")]
    #[serde(default, rename = "where", deserialize_with = "each_parsed")]
    pub payload: Vec<PayloadMatch>,
}

/// A provider, event type, event id or destination name an operator
/// names: in a filter, a request body or a path, every one checked alike.
///
/// Why control characters are refused: the stored identifiers have none
/// (the providers' parsers and the destinations' declaration refuse them),
/// so such a value matches nothing, and a NUL, which PostgreSQL text cannot
/// hold, would fail the query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterValue(String);

impl FilterValue {
    /// The value.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for FilterValue {
    type Err = &'static str;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.chars().any(char::is_control) {
            return Err("a filter value must not contain control characters");
        }
        Ok(FilterValue(text.to_string()))
    }
}

impl fmt::Display for FilterValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for FilterValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?.parse().map_err(serde::de::Error::custom)
    }
}

/// `--provider`'s help, naming every built-in provider.
fn provider_help() -> String {
    let names: Vec<&str> = providers::BUILT_IN.iter().map(|spec| spec.name).collect();
    format!("Only deliveries from this provider: {}, or a Standard Webhooks sender's name", names.join(", "))
}

impl EventFilter {
    /// Whether no condition is set (it then matches every row).
    pub fn is_empty(&self) -> bool {
        self.status.is_none()
            && self.provider.is_none()
            && self.event_type.is_none()
            && self.since.is_none()
            && self.until.is_none()
            && self.event_id.is_none()
            && self.payload.is_empty()
    }

    /// Appends ` AND <condition>` for each condition set, values bound as
    /// parameters. Columns are qualified with `table` (a trusted alias).
    pub(super) fn push_conditions(&self, sql: &mut QueryBuilder<Postgres>, table: &str) {
        if let Some(status) = self.status {
            // A closed set of literals, written into the SQL so that a
            // FAILED filter can use the partial index on FAILED rows (a
            // bound parameter would hide that from a generic plan).
            sql.push(format_args!(" AND {table}.processing_status = '{}'", status.as_str()));
        }
        if let Some(FilterValue(provider)) = &self.provider {
            sql.push(format_args!(" AND {table}.provider = ")).push_bind(provider.clone());
        }
        if let Some(FilterValue(event_type)) = &self.event_type {
            sql.push(format_args!(" AND {table}.event_type = ")).push_bind(event_type.clone());
        }
        if let Some(Since(since)) = self.since {
            sql.push(format_args!(" AND {table}.created_at >= ")).push_bind(since);
        }
        if let Some(Since(until)) = self.until {
            sql.push(format_args!(" AND {table}.created_at < ")).push_bind(until);
        }
        if let Some(FilterValue(event_id)) = &self.event_id {
            sql.push(format_args!(" AND {table}.event_id = ")).push_bind(event_id.clone());
        }
        for condition in &self.payload {
            // No index serves this (any path may be asked): a time range
            // bounds the days read, and without one every day is scanned.
            sql.push(format_args!(" AND {table}.payload #>> ")).push_bind(condition.path().to_vec());
            sql.push(" = ").push_bind(condition.value().to_string());
        }
    }
}

/// Deserializes a list of values from their text forms: a list (JSON, or
/// a repeated query parameter) or a single text (one query parameter).
pub fn each_parsed<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    let texts = match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(text) => vec![text],
        OneOrMany::Many(texts) => texts,
    };
    texts.iter().map(|text| text.parse().map_err(serde::de::Error::custom)).collect()
}

/// Deserializes an optional value from its text form with `FromStr`, so a
/// query string and JSON accept the same spellings as the command line.
pub fn parsed<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    match Option::<String>::deserialize(deserializer)? {
        Some(text) => text.parse().map(Some).map_err(serde::de::Error::custom),
        None => Ok(None),
    }
}
