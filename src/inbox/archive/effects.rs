//! An effect's statements: the deliveries' dedup and archive rows and the
//! effect's writes in one statement, batched or not; or the effect alone,
//! in the transaction a failed statement falls back to.

use std::sync::Arc;

use sqlx::{AssertSqlSafe, PgConnection, Row};
use tracing::instrument;

use super::{
    JOBS_OF_MANY, JOBS_OF_ONE, Many, One, PARTS, bind_jobs_of_many, bind_jobs_of_one, columns, numbered_jobs,
};
use crate::db::statement::numbered;
use crate::inbox::effect::{Value, Writes};
use crate::inbox::{Delivery, Forwards};

/// The statements that write an effect ([`Writes`]): with the deliveries'
/// dedup and archive rows, without or with their jobs; or alone, in a
/// transaction that recorded the delivery already. Built once per effect.
///
/// Each is an `Arc<str>`, handed to each query without a copy: sqlx takes
/// only `'static` text or text asserted to be SQL, which these are, written
/// by the effect's code, never from input.
pub(in crate::inbox) struct EffectStatements {
    /// A delivery alone, its values as parameters; with its jobs.
    one: Arc<str>,
    one_forwarding: Arc<str>,
    /// Several deliveries, their values as arrays; with their jobs.
    applying: Arc<str>,
    applying_forwarding: Arc<str>,
    alone: Arc<str>,
}

impl EffectStatements {
    /// The statements of `writes`.
    pub(in crate::inbox) fn of(writes: &Writes) -> Self {
        let parts = &*PARTS;
        let (unnest, effect_names) = writes.unnest();
        let ctes = writes.ctes.join(",\n             ");
        let notes = writes.notes();
        // `applied`: the effect's input rows (`from`), each numbered as its
        // delivery; with `only_first`, only those whose dedup row this
        // statement inserted.
        let applied = |from: &str, only_first: &str| {
            format!(
                "applied AS (
                 SELECT {columns}
                 FROM {from}{only_first}
             ),
             {ctes},
             notes (n, note) AS ({notes})",
                columns = writes.applied_columns("e"),
            )
        };
        let one = format!("{} AS e({effect_names}, n)", writes.values());
        let recorded_one = applied(&one, "\n                 WHERE EXISTS (SELECT FROM dedup)");
        let recorded = applied(
            &format!("{unnest} WITH ORDINALITY AS e({effect_names}, n)"),
            "
                 JOIN input i ON i.n = e.n
                 JOIN dedup d ON d.provider = i.provider AND d.event_id = i.event_id",
        );
        let notes_of_one = ", ARRAY(SELECT note FROM notes)";
        let main = format!(
            "archived AS (
             {archive}
             )
             SELECT i.n, a.id, a.first, ARRAY(SELECT note FROM notes WHERE notes.n = i.n) AS notes
             FROM archived a JOIN input i ON i.provider = a.provider AND i.event_id = a.event_id",
            archive = parts.archive_many(),
        );
        let ordinality = format!("WITH ORDINALITY AS t({}, n)", parts.names);
        let effect_parameters = writes.parameters();
        let effect_parameters = effect_parameters.iter().map(String::as_str);
        EffectStatements {
            one: numbered(
                &parts.record_one(&format!(",\n             {recorded_one}"), notes_of_one),
                &parts.parameters(effect_parameters.clone()),
            )
            .into(),
            one_forwarding: numbered(
                &parts.record_one(
                    &format!(",\n             {},\n             {recorded_one}", parts.jobs_of_one()),
                    notes_of_one,
                ),
                &parts.parameters(JOBS_OF_ONE.into_iter().chain(effect_parameters.clone())),
            )
            .into(),
            applying: numbered(
                &parts.record_many(&ordinality, &format!(",\n             {recorded},"), &main),
                &parts.parameters(effect_parameters.clone()),
            )
            .into(),
            applying_forwarding: numbered(
                &parts.record_many(
                    &ordinality,
                    &format!(",\n             {},\n             {recorded},", parts.jobs_of_many()),
                    &main,
                ),
                &parts.parameters(JOBS_OF_MANY.into_iter().chain(effect_parameters.clone())),
            )
            .into(),
            alone: numbered(
                &format!("WITH {}\n             SELECT ARRAY(SELECT note FROM notes)", applied(&one, "")),
                &effect_parameters.collect::<Vec<_>>(),
            )
            .into(),
        }
    }
}

/// What became of a delivery recorded with its effect: its archive row,
/// whether it was its event's first (and its effect written), and the
/// effect's notes about it.
#[derive(Debug)]
pub(in crate::inbox) struct Applied {
    pub archive_id: i64,
    pub first: bool,
    pub notes: Vec<String>,
}

/// Records one delivery as [`super::record`] does and, if it is its
/// event's first, writes its effect (`row`, its input), in one statement:
/// [`apply_many`] for a delivery alone, whose values are parameters rather
/// than arrays, so the server runs no `unnest` and no join to find it.
#[instrument(level = "debug", skip_all)]
pub(in crate::inbox) async fn apply_one(
    conn: &mut PgConnection,
    delivery: &Delivery,
    forwards: &Forwards,
    writes: &Writes,
    statements: &EffectStatements,
    row: &[Value<'_>],
) -> sqlx::Result<Applied> {
    let jobs = forwards.jobs();
    let statement = match jobs.is_empty() {
        true => &statements.one,
        false => &statements.one_forwarding,
    };
    let One(mut query, _) = columns(One(sqlx::query(AssertSqlSafe(statement.clone())), delivery));
    if !jobs.is_empty() {
        query = bind_jobs_of_one(query, delivery, jobs);
    }
    let answer = writes.bind_one(query, row).fetch_one(conn).await?;
    Ok(Applied { archive_id: answer.try_get(0)?, first: answer.try_get(1)?, notes: answer.try_get(2)? })
}

/// Records deliveries whose events share one effect, as [`record_many`]
/// does, and writes the effect of each recorded first (`rows`, its input),
/// all in one statement: one round trip and, autocommitted, one commit.
/// Answers in input order. No two deliveries may share a
/// `(provider, event_id)`.
///
/// Why this is safe as one statement: the effect's CTEs read `applied`,
/// which joins the dedup rows this statement inserted, so a duplicate
/// writes nothing; any error (an effect's constraint, a raised exception,
/// a value PostgreSQL cannot store) rolls all of it back, and the caller
/// then runs each delivery in a transaction of its own, where the error
/// finds its delivery.
#[instrument(level = "debug", skip_all, fields(deliveries = deliveries.len()))]
pub(in crate::inbox) async fn apply_many(
    conn: &mut PgConnection,
    deliveries: &[&Delivery],
    forwards: &[&Forwards],
    writes: &Writes,
    statements: &EffectStatements,
    rows: &[&[Value<'_>]],
) -> sqlx::Result<Vec<Applied>> {
    let jobs = numbered_jobs(deliveries, forwards);
    let statement = match jobs.is_empty() {
        true => &statements.applying,
        false => &statements.applying_forwarding,
    };
    let Many(mut query, _) = columns(Many(sqlx::query(AssertSqlSafe(statement.clone())), deliveries));
    if !jobs.is_empty() {
        query = bind_jobs_of_many(query, &jobs);
    }
    let answers = writes.bind(query, rows).fetch_all(conn).await?;
    let mut applied: Vec<Option<Applied>> = deliveries.iter().map(|_| None).collect();
    for answer in answers {
        let n: i64 = answer.try_get(0)?;
        let at = usize::try_from(n - 1).ok().filter(|&at| at < applied.len());
        let at = at.ok_or_else(|| sqlx::Error::Protocol("an answer for no delivery".into()))?;
        applied[at] = Some(Applied {
            archive_id: answer.try_get(1)?,
            first: answer.try_get(2)?,
            notes: answer.try_get(3)?,
        });
    }
    applied
        .into_iter()
        .map(|applied| {
            applied.ok_or_else(|| sqlx::Error::Protocol("a batched delivery was not recorded".into()))
        })
        .collect()
}

/// Writes an effect alone (`row`, its input), inside the transaction that
/// recorded its delivery first; returns its notes.
#[instrument(level = "debug", skip_all)]
pub(in crate::inbox) async fn write_effect(
    conn: &mut PgConnection,
    writes: &Writes,
    statements: &EffectStatements,
    row: &[Value<'_>],
) -> sqlx::Result<Vec<String>> {
    let query = writes.bind_one(sqlx::query(AssertSqlSafe(statements.alone.clone())), row);
    query.fetch_one(conn).await?.try_get(0)
}
