//! The statements that write the archive and the dedup table, and the one
//! place that says which value of a delivery goes in which archive column.

mod effects;

use std::sync::LazyLock;

use sqlx::postgres::PgHasArrayType;
use sqlx::{Encode, PgConnection, PgExecutor, Postgres, Row, Type};
use tracing::instrument;

use super::{Delivery, Forward, Forwards};
use crate::db::statement::{PgQuery, numbered};

pub(super) use effects::{Applied, EffectStatements, apply_many, apply_one, write_effect};

/// A delivery's archive columns, in order: name, SQL type of the bound
/// value, and the value. Adding a column to the archive is its migration and
/// a line here; the three statements below and their bindings follow.
fn columns<'d, C: Columns<'d>>(columns: C) -> C {
    columns
        .column("provider", "text", |d| d.provider.as_str())
        .column("event_id", "text", |d| d.event.id.as_str())
        .column("event_type", "text", |d| d.event.event_type.as_str())
        // Bound as text and cast: PostgreSQL parses (and checks) the jsonb.
        .column("payload", "text", |d| d.payload.as_str())
        .column("signature", "text", |d| d.source.signature())
        .column("secret_index", "int2", |d| d.source.secret_index().map(|i| i as i16))
        .column("notification_id", "text", |d| d.event.notification_id.as_deref())
        .column("request_id", "text", |d| d.request_id.as_deref())
        .column("occurred_at", "timestamptz", |d| d.event.occurred_at)
        .column("reprocess_of", "int8", |d| d.source.reprocess_of())
        .column("source", "text", |d| d.source.name())
}

/// Archive columns whose stored type is not the bound value's.
const CAST: [(&str, &str); 1] = [("payload", "jsonb")];

/// What [`columns`] feeds: a statement's text, or its bound values.
trait Columns<'d>: Sized {
    fn column<T>(self, name: &'static str, sql_type: &'static str, value: fn(&'d Delivery) -> T) -> Self
    where
        T: Encode<'d, Postgres> + Type<Postgres> + PgHasArrayType + 'd;
}

/// Collects the column names and types, to write the statements.
#[derive(Default)]
struct Names(Vec<(&'static str, &'static str)>);

impl<'d> Columns<'d> for Names {
    fn column<T>(mut self, name: &'static str, sql_type: &'static str, _: fn(&'d Delivery) -> T) -> Self
    where
        T: Encode<'d, Postgres> + Type<Postgres> + PgHasArrayType + 'd,
    {
        self.0.push((name, sql_type));
        self
    }
}

/// Binds one delivery's values, as `$1`, `$2`, ... in column order.
struct One<'d, 'q>(PgQuery<'q>, &'d Delivery);

impl<'d> Columns<'d> for One<'d, '_> {
    fn column<T>(self, _: &'static str, _: &'static str, value: fn(&'d Delivery) -> T) -> Self
    where
        T: Encode<'d, Postgres> + Type<Postgres> + PgHasArrayType + 'd,
    {
        One(self.0.bind(value(self.1)), self.1)
    }
}

/// Binds several deliveries' values, one array per column, for `unnest`.
struct Many<'d, 'q>(PgQuery<'q>, &'d [&'d Delivery]);

impl<'d> Columns<'d> for Many<'d, '_> {
    fn column<T>(self, _: &'static str, _: &'static str, value: fn(&'d Delivery) -> T) -> Self
    where
        T: Encode<'d, Postgres> + Type<Postgres> + PgHasArrayType + 'd,
    {
        let values: Vec<T> = self.1.iter().map(|d| value(d)).collect();
        Many(self.0.bind(values), self.1)
    }
}

/// The statements, written once from [`columns`], with named parameters:
/// each column's value is `$<column>`, bound in column order; what follows
/// the columns is named by [`JOBS_OF_ONE`], [`JOBS_OF_MANY`] and [`ERROR`].
struct Statements {
    record: String,
    record_many: String,
    record_failure: String,
    /// [`Statements::record`] that also writes the delivery's jobs.
    record_forwarding: String,
    /// [`Statements::record_many`] that also writes the deliveries' jobs.
    record_many_forwarding: String,
    /// Archive rows `SKIPPED`, in input order, for deliveries known to be
    /// duplicates: no dedup row, no jobs.
    record_skipped: String,
}

/// The parameters after the columns' that write one delivery's jobs
/// ([`bind_jobs_of_one`]).
const JOBS_OF_ONE: [&str; 4] = ["destinations", "ordering_keys", "body", "traceparent"];

/// The parameters after the columns' that write several deliveries' jobs
/// ([`bind_jobs_of_many`]).
const JOBS_OF_MANY: [&str; 5] =
    ["delivery_numbers", "destinations", "ordering_keys", "bodies", "traceparents"];

/// The parameter after the columns' of a failure: its error.
const ERROR: [&str; 1] = ["error"];

/// The jobs of a delivery recorded for the first time: one row per
/// destination, in the same statement as the dedup row, and only if the
/// dedup row was inserted (`first`, an SQL condition, or a join on the
/// inserted dedup rows in `from`), so a duplicate never makes one. `from`
/// names the rows to insert (`f.destination`, `f.ordering_key`), `body` the
/// raw body and trace context, and `event` the event's provider, id, type and time.
/// The one statement over forwarding's tables outside their owner,
/// `destinations::store`, which says why.
fn jobs(from: &str, body: &str, event: &str, first: &str) -> String {
    format!(
        "jobs AS (
             INSERT INTO destination_jobs
                 (destination, ordering_key, body, traceparent, provider, event_id, event_type, occurred_at)
             SELECT f.destination, f.ordering_key, {body}, {event}
             FROM {from}
             WHERE {first}
             ON CONFLICT ON CONSTRAINT uq_destination_jobs_event DO NOTHING
         )"
    )
}

/// The pieces of text every statement is written from, from [`columns`].
struct Parts {
    /// The archive's column names, comma separated.
    names: String,
    /// `$payload::jsonb, ...`: one delivery's values.
    values: String,
    /// `$provider::text[], ...`: the arrays of several deliveries' values.
    arrays: String,
    /// `i.provider, i.payload::jsonb, ...`: the columns of the rows unnest
    /// makes of the arrays, as stored.
    input: String,
    /// The archive's parameter names, in binding order.
    parameters: Vec<&'static str>,
}

impl Parts {
    /// The parameters of a statement: the columns', then `own`.
    fn parameters<'a>(&'a self, own: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        self.parameters.iter().copied().chain(own).collect()
    }

    /// The jobs CTE of one delivery, whose values are parameters.
    fn jobs_of_one(&self) -> String {
        jobs(
            "unnest($destinations::text[], $ordering_keys::text[]) AS f(destination, ordering_key),
                  (SELECT $body::bytea AS body, $traceparent::text AS traceparent) AS b",
            "b.body, b.traceparent",
            "$provider, $event_id, $event_type, $occurred_at",
            "EXISTS (SELECT FROM dedup)",
        )
    }

    /// Records one delivery whose values are parameters: its dedup row
    /// (`dedup`, the inserted row's id or none), `ctes` (each starting with
    /// a comma), then its archive row, returning its id, whether it was the
    /// event's first, and `returning` (starting with a comma).
    fn record_one(&self, ctes: &str, returning: &str) -> String {
        let Parts { names, values, .. } = self;
        format!(
            "WITH dedup AS (
                 INSERT INTO processed_webhook_events (provider, event_id, event_type)
                 VALUES ($provider, $event_id, $event_type)
                 ON CONFLICT ON CONSTRAINT uq_processed_webhook_events_provider_event_id DO NOTHING
                 RETURNING id
             ){ctes}
             INSERT INTO webhook_events ({names}, processing_status, processed_at)
             SELECT {values},
                    CASE WHEN EXISTS (SELECT FROM dedup) THEN 'PROCESSED' ELSE 'SKIPPED' END,
                    now()
             RETURNING id, processing_status = 'PROCESSED'{returning}"
        )
    }

    /// The jobs of a batch's deliveries recorded first ([`JOBS_OF_MANY`]).
    fn jobs_of_many(&self) -> String {
        jobs(
            "unnest($delivery_numbers::int8[], $destinations::text[], $ordering_keys::text[], $bodies::bytea[],
                    $traceparents::text[])
                      AS f(n, destination, ordering_key, body, traceparent)
                  JOIN input i ON i.n = f.n
                  JOIN dedup d ON d.provider = i.provider AND d.event_id = i.event_id",
            "f.body, f.traceparent",
            "i.provider, i.event_id, i.event_type, i.occurred_at",
            "true",
        )
    }

    /// Several deliveries recorded by one statement: `input`, the rows of
    /// the arrays (numbered `n` if `ordinality` says so); `dedup`, the dedup
    /// rows inserted; then `ctes` (each `,\n name AS (...)`, reading those);
    /// then `main`, which writes the archive rows ([`Parts::archive_many`]).
    fn record_many(&self, ordinality: &str, ctes: &str, main: &str) -> String {
        let Parts { arrays, .. } = self;
        format!(
            "WITH input AS (
                 SELECT * FROM unnest({arrays}) {ordinality}
             ),
             dedup AS (
                 INSERT INTO processed_webhook_events (provider, event_id, event_type)
                 SELECT provider, event_id, event_type FROM input ORDER BY provider, event_id
                 ON CONFLICT ON CONSTRAINT uq_processed_webhook_events_provider_event_id DO NOTHING
                 RETURNING provider, event_id
             ){ctes}
             {main}"
        )
    }

    /// The archive rows of `input`, each with its final status: PROCESSED if
    /// `dedup` has its event, else SKIPPED.
    fn archive_many(&self) -> String {
        let Parts { names, input, .. } = self;
        format!(
            "INSERT INTO webhook_events ({names}, processing_status, processed_at)
             SELECT {input},
                    CASE WHEN d.event_id IS NULL THEN 'SKIPPED' ELSE 'PROCESSED' END,
                    now()
             FROM input i LEFT JOIN dedup d ON d.provider = i.provider AND d.event_id = i.event_id
             RETURNING id, provider, event_id, processing_status = 'PROCESSED' AS first"
        )
    }
}

static PARTS: LazyLock<Parts> = LazyLock::new(|| {
    let Names(columns) = columns(Names::default());
    let cast = |name: &str| CAST.iter().find(|(cast, _)| *cast == name).map(|(_, to)| format!("::{to}"));
    let list = |column: &dyn Fn(&str, &str) -> String| {
        columns.iter().map(|(name, sql_type)| column(name, sql_type)).collect::<Vec<_>>().join(", ")
    };
    Parts {
        names: list(&|name, _| name.to_string()),
        values: list(&|name, _| format!("${name}{}", cast(name).unwrap_or_default())),
        arrays: list(&|name, sql_type| format!("${name}::{sql_type}[]")),
        input: list(&|name, _| format!("i.{name}{}", cast(name).unwrap_or_default())),
        parameters: columns.iter().map(|(name, _)| *name).collect(),
    }
});

static STATEMENTS: LazyLock<Statements> = LazyLock::new(|| {
    let parts = &*PARTS;
    let Parts { names, values, .. } = parts;
    Statements {
        record: numbered(&parts.record_one("", ""), &parts.parameters([])),
        record_many: numbered(
            &parts.record_many(&format!("AS t({names})"), "", &parts.archive_many()),
            &parts.parameters([]),
        ),
        record_failure: numbered(
            &format!(
                "INSERT INTO webhook_events ({names}, processing_status, error_message)
                 VALUES ({values}, 'FAILED', $error)
                 RETURNING id"
            ),
            &parts.parameters(ERROR),
        ),
        record_forwarding: numbered(
            &parts.record_one(&format!(",\n             {}", parts.jobs_of_one()), ""),
            &parts.parameters(JOBS_OF_ONE),
        ),
        record_many_forwarding: numbered(
            &parts.record_many(
                &format!("WITH ORDINALITY AS t({names}, n)"),
                &format!(",\n             {}", parts.jobs_of_many()),
                &parts.archive_many(),
            ),
            &parts.parameters(JOBS_OF_MANY),
        ),
        record_skipped: numbered(
            &format!(
                "WITH input AS (
                     SELECT * FROM unnest({arrays}) WITH ORDINALITY AS t({names}, n)
                 )
                 INSERT INTO webhook_events ({names}, processing_status, processed_at)
                 SELECT {input}, 'SKIPPED', now() FROM input i ORDER BY i.n
                 RETURNING id",
                arrays = parts.arrays,
                input = parts.input,
            ),
            &parts.parameters([]),
        ),
    }
});

/// Binds [`JOBS_OF_ONE`] after `delivery`'s columns: the destinations that
/// want its event, each one's ordering key, the raw body and the trace context.
fn bind_jobs_of_one<'q>(query: PgQuery<'q>, delivery: &'q Delivery, jobs: &'q [Forward]) -> PgQuery<'q> {
    query
        .bind(jobs.iter().map(|job| job.destination.as_str()).collect::<Vec<_>>())
        .bind(jobs.iter().map(|job| job.ordering_key.as_deref()).collect::<Vec<_>>())
        // The raw body, byte for byte: the jsonb the archive keeps is normalised.
        .bind(delivery.payload.as_str().as_bytes())
        .bind(delivery.traceparent.as_deref())
}

/// Binds [`JOBS_OF_MANY`] after the deliveries' columns: for each job, the
/// (1-based) number of its delivery, its destination, its ordering key,
/// and its delivery's raw body and trace context.
fn bind_jobs_of_many<'q>(query: PgQuery<'q>, jobs: &[(i64, &'q Delivery, &'q Forward)]) -> PgQuery<'q> {
    query
        .bind(jobs.iter().map(|(n, _, _)| *n).collect::<Vec<_>>())
        .bind(jobs.iter().map(|(_, _, job)| job.destination.as_str()).collect::<Vec<_>>())
        .bind(jobs.iter().map(|(_, _, job)| job.ordering_key.as_deref()).collect::<Vec<_>>())
        .bind(jobs.iter().map(|(_, delivery, _)| delivery.payload.as_str().as_bytes()).collect::<Vec<_>>())
        .bind(jobs.iter().map(|(_, delivery, _)| delivery.traceparent.as_deref()).collect::<Vec<_>>())
}

/// Inserts the dedup row and the archive row in one statement, and says
/// whether this delivery is the event's first (`true`) or a duplicate; with
/// the event's first, the jobs of `forwards`.
///
/// Why one statement: `ON CONFLICT DO NOTHING` on the unique constraint is
/// the arbiter. A concurrent delivery of the same event waits here on the
/// first one's uncommitted row (bounded by `lock_timeout`), then either sees
/// it committed (duplicate) or rolled back (and inserts its own). The archive
/// row gets its final status in the same statement, and the jobs go in only
/// with the dedup row; since all commit with the transaction, no reader ever
/// sees them before the outcome is known. Without jobs, the statement is
/// the one it always was: forwarding costs nothing unless a destination
/// wants the event.
///
/// Its span is `debug`, as the effects' are (`effects`): it runs inside the
/// request's span, on every delivery.
#[instrument(level = "debug", skip_all)]
pub async fn record<'e>(
    executor: impl PgExecutor<'e>,
    delivery: &Delivery,
    forwards: &Forwards,
) -> sqlx::Result<(i64, bool)> {
    let jobs = forwards.jobs();
    let statement = match jobs.is_empty() {
        true => &STATEMENTS.record,
        false => &STATEMENTS.record_forwarding,
    };
    let One(mut query, _) = columns(One(sqlx::query(statement.as_str()), delivery));
    if !jobs.is_empty() {
        query = bind_jobs_of_one(query, delivery, jobs);
    }
    let row = query.fetch_one(executor).await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

/// Records several deliveries as [`record`] does each, in one statement:
/// one round trip and one commit for all of them. Says, in input order,
/// whether each was its event's first. No two deliveries may share a
/// `(provider, event_id)`.
///
/// Why the dedup rows go in key order: two batches holding some of the same
/// events then always take their row locks in the same order, so they wait
/// for each other but never deadlock.
#[instrument(skip_all, fields(deliveries = deliveries.len()))]
pub async fn record_many(
    conn: &mut PgConnection,
    deliveries: &[&Delivery],
    forwards: &[&Forwards],
) -> sqlx::Result<Vec<(i64, bool)>> {
    let jobs = numbered_jobs(deliveries, forwards);
    let statement = match jobs.is_empty() {
        true => &STATEMENTS.record_many,
        false => &STATEMENTS.record_many_forwarding,
    };
    let Many(mut query, _) = columns(Many(sqlx::query(statement.as_str()), deliveries));
    if !jobs.is_empty() {
        query = bind_jobs_of_many(query, &jobs);
    }
    let rows = query.fetch_all(conn).await?;
    // RETURNING has no order: match the rows back by their (unique) key.
    deliveries
        .iter()
        .map(|d| {
            for row in &rows {
                if row.try_get::<&str, _>(1)? == d.provider && row.try_get::<&str, _>(2)? == d.event.id {
                    return Ok((row.try_get(0)?, row.try_get(3)?));
                }
            }
            Err(sqlx::Error::Protocol("a batched delivery was not recorded".into()))
        })
        .collect()
}

/// Archives `deliveries` as `SKIPPED`, in one statement, and returns
/// their archive ids in input order. Only for deliveries known to be
/// duplicates: their event's dedup row is committed (and dedup rows are
/// never removed), so nothing else of them is written. Unlike
/// [`record_many`], several may share an event: in a replay storm most of
/// a batch is copies of a few events.
///
/// Why the ids come back in input order: the rows are inserted in that
/// order (`ORDER BY n`), and each takes the next id of the archive's
/// sequence as it is inserted, so sorting the ids restores it.
#[instrument(skip_all, fields(deliveries = deliveries.len()))]
pub async fn record_skipped(conn: &mut PgConnection, deliveries: &[&Delivery]) -> sqlx::Result<Vec<i64>> {
    let Many(query, _) = columns(Many(sqlx::query(STATEMENTS.record_skipped.as_str()), deliveries));
    let mut ids: Vec<i64> =
        query.fetch_all(conn).await?.iter().map(|row| row.try_get(0)).collect::<Result<_, _>>()?;
    if ids.len() != deliveries.len() {
        return Err(sqlx::Error::Protocol("a skipped delivery was not archived".into()));
    }
    ids.sort_unstable();
    Ok(ids)
}

/// Each job of `deliveries` with the (1-based) position of its delivery.
fn numbered_jobs<'d>(
    deliveries: &[&'d Delivery],
    forwards: &[&'d Forwards],
) -> Vec<(i64, &'d Delivery, &'d Forward)> {
    (1..)
        .zip(deliveries.iter().zip(forwards))
        .flat_map(|(n, (delivery, forwards))| forwards.jobs().iter().map(move |job| (n, *delivery, job)))
        .collect()
}

/// Archives a delivery whose effect failed, with the error, after the
/// savepoint rollback removed its dedup row and writes.
#[instrument(skip_all)]
pub async fn record_failure<'e>(
    executor: impl PgExecutor<'e>,
    delivery: &Delivery,
    error: &str,
) -> sqlx::Result<i64> {
    let query = sqlx::query(STATEMENTS.record_failure.as_str());
    let One(query, _) = columns(One(query, delivery));
    query.bind(error).fetch_one(executor).await?.try_get(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::statement::parameters;

    #[test]
    fn every_statement_names_every_column_once_and_binds_each_parameter() {
        let Names(columns) = columns(Names::default());
        let n = columns.len();
        // The statements and how many values they take: the columns', then
        // the error's or the jobs'.
        for (statement, bound) in [
            (&STATEMENTS.record, n),
            (&STATEMENTS.record_many, n),
            (&STATEMENTS.record_failure, n + ERROR.len()),
            (&STATEMENTS.record_forwarding, n + JOBS_OF_ONE.len()),
            (&STATEMENTS.record_many_forwarding, n + JOBS_OF_MANY.len()),
            (&STATEMENTS.record_skipped, n),
        ] {
            for (name, _) in &columns {
                assert!(statement.contains(&format!("{name}, ")), "{name} in {statement}");
            }
            assert_eq!(parameters(statement), bound, "{statement}");
        }
        assert!(STATEMENTS.record.contains("$4::jsonb"), "{}", STATEMENTS.record);
        assert!(STATEMENTS.record_many.contains("i.payload::jsonb"), "{}", STATEMENTS.record_many);
    }
}
