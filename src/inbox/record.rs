//! The recording lane's work: deliveries of events without side effects,
//! each one statement (archive row and dedup row), alone or together.

use std::collections::HashSet;

use sqlx::PgConnection;

use super::{InboxError, Recorded, ToRecord, archive};

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
/// in one statement with one commit. A second delivery of an event in the
/// same call is then recorded on its own. So is every delivery of a batch
/// that fails for any reason but a lost connection (a payload PostgreSQL
/// refuses, a lock wait past its bound), so that each gets its own answer;
/// such a fallback is logged with its cause and counted in `fallbacks`.
pub async fn record_together(
    conn: &mut PgConnection,
    deliveries: &[&ToRecord],
    fallbacks: &metrics::Counter,
) -> Vec<Result<Recorded, InboxError>> {
    let mut results: Vec<Option<Result<Recorded, InboxError>>> = deliveries.iter().map(|_| None).collect();
    let mut keys = HashSet::new();
    let batch: Vec<usize> = (0..deliveries.len())
        .filter(|&i| {
            let delivery = deliveries[i].delivery();
            keys.insert((delivery.provider.as_str(), delivery.event.id.as_str()))
        })
        .collect();
    if batch.len() > 1 {
        let members: Vec<_> = batch.iter().map(|&i| deliveries[i].delivery()).collect();
        let forwards: Vec<_> = batch.iter().map(|&i| deliveries[i].forwards()).collect();
        match archive::record_many(conn, &members, &forwards).await.map_err(InboxError::at_first_statement) {
            Ok(recorded) => {
                for (&i, (archive_id, first)) in batch.iter().zip(recorded) {
                    if first {
                        deliveries[i].forwards().committed();
                    }
                    results[i] = Some(Ok(Recorded::of(archive_id, first)));
                }
            }
            Err(lost) if lost.lost_connection() => return answer_rest(results, &lost),
            Err(cause) => {
                let request_ids: Vec<&str> =
                    members.iter().filter_map(|delivery| delivery.request_id.as_deref()).collect();
                tracing::warn!(
                    error = %cause,
                    deliveries = members.len(),
                    ?request_ids,
                    "recording a batch failed: recording its deliveries one at a time"
                );
                fallbacks.increment(1);
            }
        }
    }
    // Whether a statement already went out on `conn`: a connection lost
    // after that is not stale, and the deliveries left are not run again.
    let mut sent = batch.len() > 1;
    for (i, delivery) in deliveries.iter().enumerate() {
        if results[i].is_none() {
            match record(&mut *conn, delivery).await {
                Err(lost) if lost.lost_connection() && sent => {
                    return answer_rest(results, &lost.mid_delivery());
                }
                Err(lost) if lost.lost_connection() => return answer_rest(results, &lost),
                result => results[i] = Some(result),
            }
            sent = true;
        }
    }
    results.into_iter().map(|result| result.expect("every delivery was answered")).collect()
}

/// Completes the answers once the connection is lost (`error`): the
/// deliveries not yet answered are not known to have committed, so none of
/// them gets a 2xx.
fn answer_rest(
    results: Vec<Option<Result<Recorded, InboxError>>>,
    error: &InboxError,
) -> Vec<Result<Recorded, InboxError>> {
    results
        .into_iter()
        .map(|result| result.unwrap_or_else(|| Err(InboxError::connection_lost(error))))
        .collect()
}
