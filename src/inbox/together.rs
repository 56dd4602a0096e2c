//! What recording several deliveries in one statement shares by lane:
//! which deliveries may go together, and running the rest one at a time
//! once a batch has failed, so each gets the answer it would have had alone.

use std::collections::HashSet;
use std::future::Future;

use sqlx::PgConnection;

use super::{Delivery, InboxError, Recorded, archive};

/// A delivery that can be run alone on a connection.
pub(super) trait Alone: Sync {
    /// The delivery.
    fn delivery(&self) -> &Delivery;

    /// Runs it alone on `conn`, as its lane does.
    fn alone<'a>(
        &'a self,
        conn: &'a mut PgConnection,
    ) -> impl Future<Output = Result<Recorded, InboxError>> + Send + 'a;
}

/// The answers of a batch so far, by position.
pub(super) type Answers = Vec<Option<Result<Recorded, InboxError>>>;

/// The positions of the deliveries that may be written by one statement:
/// the first of each event. Later deliveries of an event in the same batch
/// are archived as duplicates once it committed ([`one_at_a_time`]), or
/// run alone after it if it did not.
pub(super) fn first_of_each_event<T: Alone>(deliveries: &[&T]) -> Vec<usize> {
    let mut keys = HashSet::new();
    (0..deliveries.len())
        .filter(|&i| {
            let delivery = deliveries[i].delivery();
            keys.insert((delivery.provider.as_str(), delivery.event.id.as_str()))
        })
        .collect()
}

/// Archives as `SKIPPED`, with one statement, the deliveries not yet
/// answered whose event an earlier one of the batch has committed
/// (answered processed or idempotent): they are duplicates whatever else
/// happens, since a dedup row is never removed. Why: a replay storm's
/// batch is mostly copies of a few events, which would otherwise each run
/// alone. Those it could not archive (any error but a lost connection)
/// are left unanswered, to run alone.
async fn skip_known_duplicates<T: Alone>(
    conn: &mut PgConnection,
    deliveries: &[&T],
    answers: &mut Answers,
) -> Result<(), InboxError> {
    let key = |i: usize| {
        let delivery = deliveries[i].delivery();
        (delivery.provider.as_str(), delivery.event.id.as_str())
    };
    let committed: HashSet<_> = (0..deliveries.len())
        .filter(|&i| matches!(answers[i], Some(Ok(Recorded::Processed { .. } | Recorded::Duplicate { .. }))))
        .map(key)
        .collect();
    let known: Vec<usize> =
        (0..deliveries.len()).filter(|&i| answers[i].is_none() && committed.contains(&key(i))).collect();
    if known.is_empty() {
        return Ok(());
    }
    let members: Vec<&Delivery> = known.iter().map(|&i| deliveries[i].delivery()).collect();
    match archive::record_skipped(conn, &members).await.map_err(InboxError::at_first_statement) {
        Ok(ids) => {
            for (&i, archive_id) in known.iter().zip(ids) {
                answers[i] = Some(Ok(Recorded::Duplicate { archive_id }));
            }
            Ok(())
        }
        Err(lost) if lost.lost_connection() => Err(lost.mid_delivery()),
        Err(_) => Ok(()),
    }
}

/// Runs the deliveries not yet answered one at a time, on `conn`, but
/// archives those an earlier one has shown to be duplicates together
/// ([`skip_known_duplicates`]). `sent` says whether a statement already
/// went out on `conn`: a connection lost after that is not stale, and the
/// deliveries left are not run again.
pub(super) async fn one_at_a_time<T: Alone>(
    conn: &mut PgConnection,
    deliveries: &[&T],
    mut answers: Answers,
    mut sent: bool,
) -> Vec<Result<Recorded, InboxError>> {
    // Whether a delivery was answered since duplicates were last looked for.
    let mut answered = sent;
    for (i, delivery) in deliveries.iter().enumerate() {
        if answers[i].is_some() {
            continue;
        }
        if std::mem::take(&mut answered)
            && let Err(lost) = skip_known_duplicates(conn, deliveries, &mut answers).await
        {
            return answer_rest(answers, &lost);
        }
        if answers[i].is_none() {
            answered = true;
            match delivery.alone(&mut *conn).await {
                Err(lost) if lost.lost_connection() && sent => {
                    return answer_rest(answers, &lost.mid_delivery());
                }
                Err(lost) if lost.lost_connection() => return answer_rest(answers, &lost),
                result => answers[i] = Some(result),
            }
            sent = true;
        }
    }
    answers.into_iter().map(|answer| answer.expect("every delivery was answered")).collect()
}

/// Completes the answers once the connection is lost (`error`): the
/// deliveries not yet answered are not known to have committed, so none of
/// them gets a 2xx.
pub(super) fn answer_rest(answers: Answers, error: &InboxError) -> Vec<Result<Recorded, InboxError>> {
    answers
        .into_iter()
        .map(|answer| answer.unwrap_or_else(|| Err(InboxError::connection_lost(error))))
        .collect()
}

/// Logs that a batch failed and is run one delivery at a time, and counts it.
pub(super) fn fell_back(cause: &InboxError, deliveries: &[&Delivery], fallbacks: &metrics::Counter) {
    let request_ids: Vec<&str> =
        deliveries.iter().filter_map(|delivery| delivery.request_id.as_deref()).collect();
    tracing::warn!(
        error = %cause,
        deliveries = deliveries.len(),
        ?request_ids,
        "recording a batch failed: running its deliveries one at a time"
    );
    fallbacks.increment(1);
}
