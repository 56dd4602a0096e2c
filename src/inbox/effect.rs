//! An effect: what an event of one type changes in the domain, described
//! as SQL rather than run, so the inbox can write it in the same statement
//! as the delivery's dedup row (DESIGN.md "One delivery, step by step").
//!
//! An effect has two halves. In Rust, [`Effect::input`] reads the event
//! and decides everything that needs no database (ids, amounts, a price
//! missing from the configuration): one row of values. In SQL,
//! [`Effect::writes`] names the columns of that row and the data-modifying
//! CTEs that write it, over `applied`: the input rows of the deliveries
//! whose dedup row the same statement inserted. A duplicate has no row in
//! `applied`, so it writes nothing; several deliveries are several rows.

use std::borrow::Cow;

use chrono::{DateTime, Utc};

use crate::db::statement::PgQuery;
use crate::event::Event;

/// The side effects of one kind of event, as SQL over the deliveries
/// recorded first. The domain (the `effects` module) implements it; the
/// inbox writes it in the delivery's statement, or, after an error, in a
/// transaction of its own with a savepoint.
pub trait Effect: Send + Sync + 'static {
    /// What the effect writes. Called once, when the effect is registered.
    fn writes(&self) -> Writes;

    /// The event's row of the effect's input: a value per column of
    /// [`Effect::writes`], in order. An error (the event lacks what the
    /// effect needs) archives the delivery FAILED, unless it is a duplicate.
    fn input<'e>(&self, event: &'e Event) -> Result<Vec<Value<'e>>, EffectError>;
}

/// An effect's SQL: its input columns, the CTEs that write, and what to
/// log about a delivery.
#[derive(Debug, Default)]
pub struct Writes {
    /// The columns of `applied` (besides `n`, the delivery's number), in
    /// the order [`Effect::input`] gives their values.
    pub input: Vec<(&'static str, SqlType)>,
    /// Data-modifying CTEs, `name AS (...)`, reading `applied`. Every CTE of
    /// a statement sees the tables as they were when it began: one that
    /// needs another's writes reads its `RETURNING`, never the table.
    pub ctes: Vec<String>,
    /// Queries of `(n, note)`: a line to log about delivery `n` (a stale
    /// event, a grant refused as a repeat), never a payload.
    pub notes: Vec<String>,
}

impl Writes {
    /// Both effects' writes, `self`'s first: their input columns must
    /// differ, and so must their CTEs' names.
    pub fn and(mut self, other: Writes) -> Writes {
        self.input.extend(other.input);
        self.ctes.extend(other.ctes);
        self.notes.extend(other.notes);
        self
    }

    /// The query of every note, `(n, note)`.
    pub(super) fn notes(&self) -> String {
        match self.notes.is_empty() {
            true => "SELECT NULL::int8 AS n, NULL::text AS note WHERE false".into(),
            false => self.notes.join("\n             UNION ALL "),
        }
    }

    /// `applied`'s select list: `n` and each column, cast to its stored type.
    pub(super) fn applied_columns(&self, from: &str) -> String {
        std::iter::once(format!("{from}.n"))
            .chain(self.input.iter().map(|(name, sql_type)| match sql_type.cast() {
                Some(cast) => format!("{from}.{name}::{cast} AS {name}"),
                None => format!("{from}.{name}"),
            }))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `unnest` of one array parameter per column, `$effect_<name>`, and the
    /// names of its columns.
    pub(super) fn unnest(&self) -> (String, String) {
        let arrays = (self.input.iter())
            .map(|(name, sql_type)| format!("${}::{}[]", parameter(name), sql_type.bound()))
            .collect::<Vec<_>>()
            .join(", ");
        let names = self.input.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ");
        (format!("unnest({arrays})"), names)
    }

    /// One row of one parameter per column, `$effect_<name>`, with `n` 1:
    /// [`Writes::unnest`] for a delivery alone, which costs the server no
    /// function scan over arrays and no join to find its row.
    pub(super) fn values(&self) -> String {
        let values = (self.input.iter())
            .map(|(name, sql_type)| format!("${}::{}", parameter(name), sql_type.bound()))
            .collect::<Vec<_>>()
            .join(", ");
        format!("(VALUES ({values}, 1::int8))")
    }

    /// The parameters [`Writes::unnest`] and [`Writes::values`] name, in
    /// binding order.
    pub(super) fn parameters(&self) -> Vec<String> {
        self.input.iter().map(|(name, _)| parameter(name)).collect()
    }

    /// Binds the input rows, one array per column, in column order. Each row
    /// was checked against the columns ([`Writes::check`]).
    pub(super) fn bind<'q>(&self, mut query: PgQuery<'q>, rows: &[&'q [Value<'q>]]) -> PgQuery<'q> {
        for (i, (_, sql_type)) in self.input.iter().enumerate() {
            let column = rows.iter().map(|row| &row[i]);
            query = match sql_type {
                SqlType::Text | SqlType::Jsonb => query.bind(column.map(Value::text).collect::<Vec<_>>()),
                SqlType::Int8 => query.bind(column.map(Value::int8).collect::<Vec<_>>()),
                SqlType::Timestamptz => query.bind(column.map(Value::time).collect::<Vec<_>>()),
            };
        }
        query
    }

    /// Binds one input row, a value per column, for [`Writes::values`].
    pub(super) fn bind_one<'q>(&self, mut query: PgQuery<'q>, row: &'q [Value<'q>]) -> PgQuery<'q> {
        for (value, (_, sql_type)) in row.iter().zip(&self.input) {
            query = match sql_type {
                SqlType::Text | SqlType::Jsonb => query.bind(value.text()),
                SqlType::Int8 => query.bind(value.int8()),
                SqlType::Timestamptz => query.bind(value.time()),
            };
        }
        query
    }

    /// Whether `row` has a value of the right kind for every column: an
    /// effect that disagrees with its own columns is a bug, failed like one.
    pub(super) fn check(&self, row: &[Value<'_>]) -> Result<(), EffectError> {
        let fits = row.len() == self.input.len()
            && row.iter().zip(&self.input).all(|(value, (_, sql_type))| value.fits(*sql_type));
        match fits {
            true => Ok(()),
            false => Err(EffectError::Panicked("the effect's input does not match its columns".into())),
        }
    }
}

fn parameter(column: &str) -> String {
    format!("effect_{column}")
}

/// The type of an input column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlType {
    /// `text`.
    Text,
    /// `jsonb`, bound as text (PostgreSQL parses it).
    Jsonb,
    /// `int8`.
    Int8,
    /// `timestamptz`.
    Timestamptz,
}

impl SqlType {
    /// The type of the bound array's elements.
    fn bound(self) -> &'static str {
        match self {
            SqlType::Text | SqlType::Jsonb => "text",
            SqlType::Int8 => "int8",
            SqlType::Timestamptz => "timestamptz",
        }
    }

    /// The stored type, when it is not the bound one.
    fn cast(self) -> Option<&'static str> {
        (self == SqlType::Jsonb).then_some("jsonb")
    }
}

/// One value of an effect's input row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'e> {
    /// For a [`SqlType::Text`] or [`SqlType::Jsonb`] column.
    Text(Option<Cow<'e, str>>),
    /// For a [`SqlType::Int8`] column.
    Int8(Option<i64>),
    /// For a [`SqlType::Timestamptz`] column.
    Timestamptz(Option<DateTime<Utc>>),
}

impl Value<'_> {
    fn fits(&self, sql_type: SqlType) -> bool {
        matches!(
            (self, sql_type),
            (Value::Text(_), SqlType::Text | SqlType::Jsonb)
                | (Value::Int8(_), SqlType::Int8)
                | (Value::Timestamptz(_), SqlType::Timestamptz)
        )
    }

    fn text(&self) -> Option<&str> {
        match self {
            Value::Text(text) => text.as_deref(),
            _ => None,
        }
    }

    fn int8(&self) -> Option<i64> {
        match self {
            Value::Int8(number) => *number,
            _ => None,
        }
    }

    fn time(&self) -> Option<DateTime<Utc>> {
        match self {
            Value::Timestamptz(time) => *time,
            _ => None,
        }
    }
}

impl<'e> From<&'e str> for Value<'e> {
    fn from(text: &'e str) -> Self {
        Value::Text(Some(Cow::Borrowed(text)))
    }
}

impl<'e> From<Option<&'e str>> for Value<'e> {
    fn from(text: Option<&'e str>) -> Self {
        Value::Text(text.map(Cow::Borrowed))
    }
}

impl<'e> From<Cow<'e, str>> for Value<'e> {
    fn from(text: Cow<'e, str>) -> Self {
        Value::Text(Some(text))
    }
}

impl<'e> From<Option<Cow<'e, str>>> for Value<'e> {
    fn from(text: Option<Cow<'e, str>>) -> Self {
        Value::Text(text)
    }
}

impl From<String> for Value<'_> {
    fn from(text: String) -> Self {
        Value::Text(Some(Cow::Owned(text)))
    }
}

impl From<Option<String>> for Value<'_> {
    fn from(text: Option<String>) -> Self {
        Value::Text(text.map(Cow::Owned))
    }
}

impl From<i64> for Value<'_> {
    fn from(number: i64) -> Self {
        Value::Int8(Some(number))
    }
}

impl From<DateTime<Utc>> for Value<'_> {
    fn from(time: DateTime<Utc>) -> Self {
        Value::Timestamptz(Some(time))
    }
}

impl From<Option<DateTime<Utc>>> for Value<'_> {
    fn from(time: Option<DateTime<Utc>>) -> Self {
        Value::Timestamptz(time)
    }
}

/// Why an effect could not be applied: unless the database was only busy
/// or gone, the delivery is archived FAILED and answered 500, so the
/// provider retries it later.
#[derive(Debug, thiserror::Error)]
pub enum EffectError {
    /// The event lacks something the effect needs, or the configuration
    /// does not say how to apply it.
    #[error("{0}")]
    Invalid(String),
    /// The effect's statement failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The effect panicked; the process keeps serving. The text, stored in
    /// the FAILED row's `error_message`, keeps the word of the first
    /// releases ("handler"), which operators' queries may match.
    #[error("handler panicked: {0}")]
    Panicked(String),
}
