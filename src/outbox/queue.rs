//! The worker's statements: claim due rows under a lease, then record how
//! each send went. Each is one autocommitted statement, so no transaction
//! stays open across an SMTP call.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tracing::instrument;
use uuid::Uuid;

/// A claimed row, with what the email needs from `users`.
#[derive(Debug, sqlx::FromRow)]
pub struct Claimed {
    /// The row; also the email's Message-ID.
    pub id: Uuid,
    /// Proves the claim is still ours when recording the outcome.
    pub claim_token: Uuid,
    pub kind: String,
    pub user_id: Option<String>,
    pub subscription_id: Option<String>,
    /// Including this one.
    pub attempts: i32,
    /// NULL when the user is unknown, deleted, or has no address.
    pub email: Option<String>,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
}

/// Claims up to `limit` pending rows due at `now`, leasing them until
/// `lease_until` and counting the attempt.
///
/// Why `FOR UPDATE SKIP LOCKED`: concurrent workers (other replicas) skip
/// the rows another claim is taking instead of waiting for them, and a row
/// whose claim committed first is re-checked and no longer matches (its
/// lease is in the future). Why a lease instead of a lock held while
/// sending: the claim commits at once, and if the worker dies mid-send the
/// row is claimable again when `locked_until` passes.
#[instrument(skip_all)]
pub async fn claim(
    conn: &mut PgConnection,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
    limit: i64,
) -> sqlx::Result<Vec<Claimed>> {
    sqlx::query_as(
        // MATERIALIZED: the claim runs exactly once. Inlined as a join, the
        // planner may rescan it (a nested loop), and each rescan locks and
        // returns other rows, past the LIMIT.
        "WITH c AS MATERIALIZED (
             SELECT due.id, u.email, u.first_name, u.last_name
             FROM outbox AS due
             LEFT JOIN users AS u ON u.id = due.user_id AND u.deleted_at IS NULL
             WHERE due.status = 'pending'
               AND due.next_attempt_at <= $1
               AND (due.locked_until IS NULL OR due.locked_until <= $1)
             ORDER BY due.next_attempt_at
             LIMIT $3
             FOR UPDATE OF due SKIP LOCKED
         )
         UPDATE outbox AS o
         SET locked_until = $2, claim_token = gen_random_uuid(), attempts = o.attempts + 1
         FROM c
         -- Checked again on the row as updated, should a concurrent claim
         -- have committed in between (belt and braces with the lock above).
         WHERE o.id = c.id AND o.status = 'pending' AND (o.locked_until IS NULL OR o.locked_until <= $1)
         RETURNING o.id, o.claim_token, o.kind, o.user_id, o.subscription_id, o.attempts,
                   c.email, c.first_name, c.last_name",
    )
    .bind(now)
    .bind(lease_until)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// How a send went.
#[derive(Debug)]
pub enum Outcome<'a> {
    /// The SMTP server accepted the email.
    Sent,
    /// It did not: pending again from `retry_at`, or dead without one.
    Failed {
        /// For `last_error`.
        error: &'a str,
        /// When to try again.
        retry_at: Option<DateTime<Utc>>,
    },
}

/// Records `outcome` for `row`, if the claim is still ours. Safe to repeat:
/// it matches only the row's current claim and sets the same values again.
pub async fn record(conn: &mut PgConnection, row: &Claimed, outcome: &Outcome<'_>) -> sqlx::Result<()> {
    match outcome {
        Outcome::Sent => mark_sent(conn, row).await,
        Outcome::Failed { error, retry_at } => mark_failed(conn, row, error, *retry_at).await,
    }
}

/// Records a successful send, if the claim is still ours.
#[instrument(skip_all)]
async fn mark_sent(conn: &mut PgConnection, row: &Claimed) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE outbox SET status = 'sent', sent_at = now(), locked_until = NULL, last_error = NULL
         WHERE id = $1 AND claim_token = $2",
    )
    .bind(row.id)
    .bind(row.claim_token)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records a failed send, if the claim is still ours: pending again from
/// `retry_at`, or dead when there is no retry left.
#[instrument(skip_all)]
async fn mark_failed(
    conn: &mut PgConnection,
    row: &Claimed,
    error: &str,
    retry_at: Option<DateTime<Utc>>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE outbox
         SET status = CASE WHEN $4::timestamptz IS NULL THEN 'dead' ELSE 'pending' END,
             next_attempt_at = COALESCE($4, next_attempt_at),
             last_error = $3,
             locked_until = NULL
         -- Not a row given up meanwhile (its user deleted): it stays dead.
         WHERE id = $1 AND claim_token = $2 AND status = 'pending'",
    )
    .bind(row.id)
    .bind(row.claim_token)
    .bind(error)
    .bind(retry_at)
    .execute(conn)
    .await?;
    Ok(())
}
