//! The SQL every queue table shares, as fragments each queue's statements
//! are built from at compile time (`concat!`), so the lease protocol is
//! written once.
//!
//! A queue table has these columns: `id`, `status` (`pending`, `sent`,
//! `dead`), `attempts`, `last_error`, `next_attempt_at`, `locked_until` (the
//! lease), `claim_token` (which claim holds the row) and `sent_at`.
//!
//! Why a lease rather than a lock held while sending: the claim commits at
//! once, no transaction stays open across a send, and a row whose sender
//! died is claimable again when `locked_until` passes. Why a claim token: a
//! sender whose lease expired (and whose row another claim took) must not
//! overwrite what the later claim records.

/// Rows of the table aliased `$alias` a claim at `$1` may take: pending, due,
/// and not leased (or leased by a claim whose lease has passed). Claims
/// select them `FOR UPDATE ... SKIP LOCKED`: concurrent claims (other
/// replicas) skip the rows another claim is taking instead of waiting, and
/// check them again on the row as updated, should that claim have committed
/// in between.
macro_rules! queue_due {
    ($alias:literal) => {
        concat!(
            $alias,
            ".status = 'pending' AND ",
            $alias,
            ".next_attempt_at <= $1 AND (",
            $alias,
            ".locked_until IS NULL OR ",
            $alias,
            ".locked_until <= $1)"
        )
    };
}

/// The `SET` list of a claim: leased until `$2` under a fresh claim token,
/// one more attempt counted.
macro_rules! queue_lease {
    ($alias:literal) => {
        concat!("locked_until = $2, claim_token = gen_random_uuid(), attempts = ", $alias, ".attempts + 1")
    };
}

/// Records the outcomes of sends in one statement: `$1` the ids (of SQL
/// type `$id_type`), `$2` their claim tokens, `$3` the new statuses, `$4`
/// the errors (NULL once sent), `$5` the retry times (NULL unless pending
/// again). Only rows still held by their claim change, and only pending
/// ones (not a row given up meanwhile), so it is safe to repeat; it sets the
/// same values each time. `RETURNING` may follow.
macro_rules! queue_record {
    ($table:literal, $id_type:literal) => {
        concat!(
            "UPDATE ",
            $table,
            " AS q
             SET status = r.status,
                 sent_at = CASE WHEN r.status = 'sent' THEN now() ELSE q.sent_at END,
                 last_error = r.error,
                 next_attempt_at = coalesce(r.retry_at, q.next_attempt_at),
                 locked_until = NULL
             FROM unnest($1::",
            $id_type,
            "[], $2::uuid[], $3::text[], $4::text[], $5::timestamptz[])
                  AS r(id, claim_token, status, error, retry_at)
             WHERE q.id = r.id AND q.claim_token = r.claim_token AND q.status = 'pending'"
        )
    };
}

/// Gives back claimed rows that were not sent (claimed ahead, then the
/// engine stopped or they waited too long), in one statement: `$1` the ids
/// (of SQL type `$id_type`), `$2` their claim tokens. They are due again at
/// once, their claim's attempt is not counted, and no claim holds them. Only
/// rows still held by their claim change, so it is safe to repeat.
macro_rules! queue_release {
    ($table:literal, $id_type:literal) => {
        concat!(
            "UPDATE ",
            $table,
            " AS q
             SET locked_until = NULL, claim_token = NULL, attempts = q.attempts - 1
             FROM unnest($1::",
            $id_type,
            "[], $2::uuid[]) AS r(id, claim_token)
             WHERE q.id = r.id AND q.claim_token = r.claim_token AND q.status = 'pending'"
        )
    };
}

pub(crate) use {queue_due, queue_lease, queue_record, queue_release};

use crate::db::statement::PgQuery;

use super::{ClaimedRow, Done, SendResult, Verdict};

/// Binds `$1` to `$5` of [`queue_record!`] for `done`: the rows' ids, claim
/// tokens, new statuses, errors and retry times.
pub fn bind_record<'q, J: ClaimedRow, A: SendResult>(
    query: PgQuery<'q>,
    done: &'q [Done<J, A>],
) -> PgQuery<'q> {
    query
        .bind(done.iter().map(|d| d.row.id()).collect::<Vec<_>>())
        .bind(done.iter().map(|d| d.row.claim_token()).collect::<Vec<_>>())
        .bind(done.iter().map(|d| d.verdict.status().as_str()).collect::<Vec<_>>())
        .bind(done.iter().map(Done::error).collect::<Vec<_>>())
        .bind(
            done.iter()
                .map(|d| match d.verdict {
                    Verdict::Retry(at) => Some(at),
                    _ => None,
                })
                .collect::<Vec<_>>(),
        )
}

/// Binds `$1` and `$2` of [`queue_release!`] for `rows`: their ids and claim
/// tokens.
pub fn bind_release<'q, J: ClaimedRow>(query: PgQuery<'q>, rows: &[J]) -> PgQuery<'q> {
    query
        .bind(rows.iter().map(ClaimedRow::id).collect::<Vec<_>>())
        .bind(rows.iter().map(ClaimedRow::claim_token).collect::<Vec<_>>())
}
