//! The applying lane's work: deliveries whose events have side effects.
//! In the common case one autocommitted statement records a delivery (or
//! several) and writes its effect; after an error, a transaction with a
//! savepoint per delivery finds whose error it was and archives it FAILED.

use std::future::Future;
use std::sync::Arc;

use sqlx::PgConnection;

use super::archive::{self, Applied};
use super::error::ErrorClass;
use super::together::{Alone, Answers, answer_rest, fell_back, first_of_each_event, one_at_a_time};
use super::{Delivery, EffectError, InboxError, Recorded, ToApply};

/// Records a delivery and applies its event's effect exactly once.
///
/// Returns `Ok` only after the commit has returned. An `Err` is never a
/// success: nothing was committed, or (the connection broke around the
/// commit) it is not known whether it was, which the provider's retry settles.
///
/// One statement (dedup row, effect, jobs, archive row) and its autocommit
/// is the whole delivery when nothing fails: one round trip. A lost
/// connection there is stale (nothing of the delivery got past a statement
/// that did not return, or, if it committed just before the break, the
/// rerun finds a duplicate); a deadlock or a statement timeout is answered
/// at once (503). Any other error (the event's, the effect's, a lock wait)
/// rolled the statement back whole, and the delivery runs again in a
/// transaction of its own ([`in_transaction`]), which tells whose error it
/// was and archives an effect's FAILED.
///
/// Not cancel safe: a future dropped half way may leave `conn` inside that
/// transaction, so its holder must then close `conn` (the delivery workers
/// close a connection whose delivery they abandoned; reconciliation's own
/// connection closes with it; reprocessing runs in a task of its own).
pub async fn apply(conn: &mut PgConnection, to_apply: &ToApply) -> Result<Recorded, InboxError> {
    if let Ok(row) = to_apply.input() {
        let effect = to_apply.effect();
        let written = archive::apply_one(
            &mut *conn,
            to_apply.delivery(),
            to_apply.forwards(),
            effect.writes(),
            effect.statements(),
            &row,
        )
        .await;
        match written {
            Ok(applied) => return Ok(answered(to_apply, applied)),
            // Gone, or busy in a way that waiting again would not change.
            Err(error)
                if matches!(ErrorClass::of(&error), ErrorClass::Unavailable | ErrorClass::Contention) =>
            {
                return Err(InboxError::at_first_statement(error));
            }
            // The event's own error, or a lock wait past `lock_timeout`
            // (on its dedup row: busy; on its effect's rows: contended):
            // told apart in the transaction below.
            Err(_) => {}
        }
    }
    in_transaction(conn, to_apply).await
}

/// Applies several deliveries, each as [`apply`] would, answered in input
/// order: the first delivery of each event whose effect's input could be
/// read, grouped by effect, one statement (and one commit) per group.
/// Later deliveries of an event are archived as duplicates, together, once
/// it committed; what cannot go with others (an input that fails) runs
/// alone afterwards; so does every delivery of a group
/// whose statement failed for any reason but a lost connection (an effect's
/// error, a lock wait, a deadlock), so that each gets the answer it would
/// have had alone; that fallback is logged and counted in `fallbacks`.
pub async fn apply_together(
    conn: &mut PgConnection,
    deliveries: &[&ToApply],
    fallbacks: &metrics::Counter,
) -> Vec<Result<Recorded, InboxError>> {
    let mut answers: Answers = deliveries.iter().map(|_| None).collect();
    let rows: Vec<_> = deliveries.iter().map(|to_apply| to_apply.input().ok()).collect();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for i in first_of_each_event(deliveries).into_iter().filter(|&i| rows[i].is_some()) {
        match groups.iter_mut().find(|group| deliveries[group[0]].same_effect(deliveries[i])) {
            Some(group) => group.push(i),
            None => groups.push(vec![i]),
        }
    }
    let mut sent = false;
    for group in groups.iter().filter(|group| group.len() > 1) {
        let members: Vec<&Delivery> = group.iter().map(|&i| deliveries[i].delivery()).collect();
        let forwards: Vec<_> = group.iter().map(|&i| deliveries[i].forwards()).collect();
        let inputs: Vec<&[_]> = group.iter().filter_map(|&i| rows[i].as_deref()).collect();
        let effect = deliveries[group[0]].effect();
        let written = archive::apply_many(
            &mut *conn,
            &members,
            &forwards,
            effect.writes(),
            effect.statements(),
            &inputs,
        )
        .await;
        match written.map_err(InboxError::at_first_statement) {
            Ok(applied) => {
                for (&i, applied) in group.iter().zip(applied) {
                    answers[i] = Some(Ok(answered(deliveries[i], applied)));
                }
            }
            Err(lost) if lost.lost_connection() && sent => return answer_rest(answers, &lost.mid_delivery()),
            Err(lost) if lost.lost_connection() => return answer_rest(answers, &lost),
            Err(cause) => fell_back(&cause, &members, fallbacks),
        }
        sent = true;
    }
    one_at_a_time(conn, deliveries, answers, sent).await
}

impl Alone for ToApply {
    fn delivery(&self) -> &Delivery {
        ToApply::delivery(self)
    }

    fn alone<'a>(
        &'a self,
        conn: &'a mut PgConnection,
    ) -> impl Future<Output = Result<Recorded, InboxError>> + Send + 'a {
        apply(conn, self)
    }
}

/// The committed outcome of a delivery written with its effect: its notes
/// logged, its jobs' senders told.
fn answered(to_apply: &ToApply, applied: Applied) -> Recorded {
    let event = &to_apply.delivery().event;
    for note in &applied.notes {
        tracing::info!(event_id = %event.id, event_type = %event.event_type, "{note}");
    }
    if applied.first {
        to_apply.forwards().committed();
    }
    Recorded::of(applied.archive_id, applied.first)
}

/// [`apply`] in a transaction begun and ended by hand, with a savepoint
/// before the dedup insert, for a delivery whose one statement failed.
/// Its first round trip sends BEGIN with the savepoint: a connection found
/// broken there is stale, and nothing of the delivery ran.
async fn in_transaction(conn: &mut PgConnection, to_apply: &ToApply) -> Result<Recorded, InboxError> {
    sqlx::raw_sql("BEGIN; SAVEPOINT before_dedup")
        .execute(&mut *conn)
        .await
        .map_err(InboxError::at_first_statement)?;
    match decide(&mut *conn, to_apply).await {
        Ok(outcome) => {
            if let Recorded::Processed { .. } = outcome {
                to_apply.forwards().committed();
            }
            Ok(outcome)
        }
        // Rolled back here: the worker keeps its connection, and a session
        // left idle in a transaction is ended by
        // `idle_in_transaction_session_timeout` under it. A rollback that
        // fails means the connection is gone (503, and the worker replaces it).
        Err(error) => match sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await {
            Err(lost) if !error.lost_connection() => Err(InboxError::Unavailable(Arc::new(lost))),
            _ => Err(error),
        },
    }
}

/// Everything of [`in_transaction`] inside its transaction, COMMIT
/// included: the committed outcome, or why the transaction must roll back.
async fn decide(conn: &mut PgConnection, to_apply: &ToApply) -> Result<Recorded, InboxError> {
    let delivery = to_apply.delivery();
    // The jobs go in with the dedup row: the savepoint's rollback drops them too.
    let (archive_id, first) = archive::record(&mut *conn, delivery, to_apply.forwards()).await?;
    if !first {
        sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
        return Ok(Recorded::Duplicate { archive_id });
    }
    let effect = to_apply.effect();
    let written = match to_apply.input() {
        Ok(row) => archive::write_effect(&mut *conn, effect.writes(), effect.statements(), &row)
            .await
            .map_err(EffectError::from),
        Err(error) => Err(error),
    };
    match written {
        Ok(notes) => {
            // A COMMIT that fails (a deferred constraint) committed nothing:
            // an error, not a FAILED row.
            sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
            Ok(answered(to_apply, Applied { archive_id, first, notes }))
        }
        // The database was busy or gone, not the event broken: no FAILED
        // row (operators read those as broken events), nothing committed
        // (the caller rolls back), 503 and a retry.
        Err(EffectError::Database(error)) if is_transient(&error) => Err(match ErrorClass::of(&error) {
            ErrorClass::Unavailable => InboxError::Unavailable(Arc::new(error)),
            _ => InboxError::Contended(error),
        }),
        // The savepoint's rollback drops the dedup row and the jobs; the
        // effect's statement wrote all or nothing.
        Err(error) => {
            sqlx::raw_sql("ROLLBACK TO SAVEPOINT before_dedup").execute(&mut *conn).await?;
            let error = error.to_string();
            let archive_id = archive::record_failure(&mut *conn, delivery, &error).await?;
            sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
            Ok(Recorded::Failed { archive_id, error })
        }
    }
}

/// Whether a database error says nothing about the event.
fn is_transient(error: &sqlx::Error) -> bool {
    matches!(
        ErrorClass::of(error),
        ErrorClass::Unavailable | ErrorClass::LockTimeout | ErrorClass::Contention
    )
}
