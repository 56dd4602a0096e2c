//! What recording several deliveries in one statement shares by lane:
//! which deliveries may go together, and running the rest one at a time
//! once a batch has failed, so each gets the answer it would have had alone.

use std::collections::HashSet;
use std::future::Future;

use sqlx::PgConnection;

use super::{Delivery, InboxError, Recorded};

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

/// The positions of the deliveries the next statement may write together:
/// of each event, its first delivery not yet answered, unless that one was
/// left to run `alone` (then its event's later copies wait for it too). So
/// no two share an event, and copies of an event are written in the order
/// they came: the first applies it, the later ones find it committed. Why
/// rounds rather than the first copies only: in a replay storm most of a
/// batch is copies of a few events, and each round writes a copy of each
/// with one statement, where running the copies alone costs one each.
pub(super) fn next_round<T: Alone>(deliveries: &[&T], answers: &Answers, alone: &[bool]) -> Vec<usize> {
    let mut keys = HashSet::new();
    (0..deliveries.len())
        .filter(|&i| answers[i].is_none())
        .filter(|&i| {
            let delivery = deliveries[i].delivery();
            keys.insert((delivery.provider.as_str(), delivery.event.id.as_str()))
        })
        .filter(|&i| !alone[i])
        .collect()
}

/// Runs the deliveries not yet answered one at a time, on `conn`. `sent`
/// says whether a statement already went out on `conn`: a connection lost
/// after that is not stale, and the deliveries left are not run again.
pub(super) async fn one_at_a_time<T: Alone>(
    conn: &mut PgConnection,
    deliveries: &[&T],
    mut answers: Answers,
    mut sent: bool,
) -> Vec<Result<Recorded, InboxError>> {
    for (i, delivery) in deliveries.iter().enumerate() {
        if answers[i].is_none() {
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
