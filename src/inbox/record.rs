//! The recording lane's work: deliveries of events without side effects,
//! each one statement (archive row and dedup row), alone or together.

use std::future::Future;

use sqlx::PgConnection;

use super::together::{Alone, Answers, answer_rest, fell_back, first_of_each_event, one_at_a_time};
use super::{Delivery, InboxError, Recorded, ToRecord, archive};

/// Records a delivery, and its jobs if it is its event's first. Nothing can
/// fail after the dedup insert, so one autocommitted statement is the whole
/// transaction.
///
/// A lost connection is answered as stale (the statement is all there is):
/// run again on a fresh connection, the delivery is recorded, or, if the
/// statement did commit just before the connection broke, found a
/// duplicate, as the provider's own retry would find it.
pub async fn record(conn: &mut PgConnection, delivery: &ToRecord) -> Result<Recorded, InboxError> {
    let (archive_id, first) = archive::record(conn, delivery.delivery(), delivery.forwards())
        .await
        .map_err(InboxError::at_first_statement)?;
    if first {
        delivery.forwards().committed();
    }
    Ok(Recorded::of(archive_id, first))
}

/// Records several deliveries, each as [`record`] would, in input order, but
/// in one statement with one commit. Later deliveries of an event in the
/// same call are then archived as duplicates, together. A delivery is
/// recorded on its own if its batch fails for any reason but a lost
/// connection (a payload PostgreSQL refuses, a lock wait past its bound),
/// so that each gets its own answer; such a fallback is logged with its
/// cause and counted in `fallbacks`.
pub async fn record_together(
    conn: &mut PgConnection,
    deliveries: &[&ToRecord],
    fallbacks: &metrics::Counter,
) -> Vec<Result<Recorded, InboxError>> {
    let mut answers: Answers = deliveries.iter().map(|_| None).collect();
    let batch = first_of_each_event(deliveries);
    if batch.len() > 1 {
        let members: Vec<_> = batch.iter().map(|&i| deliveries[i].delivery()).collect();
        let forwards: Vec<_> = batch.iter().map(|&i| deliveries[i].forwards()).collect();
        match archive::record_many(conn, &members, &forwards).await.map_err(InboxError::at_first_statement) {
            Ok(recorded) => {
                for (&i, (archive_id, first)) in batch.iter().zip(recorded) {
                    if first {
                        deliveries[i].forwards().committed();
                    }
                    answers[i] = Some(Ok(Recorded::of(archive_id, first)));
                }
            }
            Err(lost) if lost.lost_connection() => return answer_rest(answers, &lost),
            Err(cause) => fell_back(&cause, &members, fallbacks),
        }
    }
    one_at_a_time(conn, deliveries, answers, batch.len() > 1).await
}

impl Alone for ToRecord {
    fn delivery(&self) -> &Delivery {
        ToRecord::delivery(self)
    }

    fn alone<'a>(
        &'a self,
        conn: &'a mut PgConnection,
    ) -> impl Future<Output = Result<Recorded, InboxError>> + Send + 'a {
        record(conn, self)
    }
}
