//! The outbox's statements: the claim, which reads the recipient from
//! `users` with the row, and the record, which is the engine's.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tracing::instrument;
use uuid::Uuid;

use crate::queue::sql::{bind_record, bind_release, queue_due, queue_lease, queue_record, queue_release};
use crate::queue::{ClaimedRow, Done, SendResult};

/// An outbox row the email queue claimed, with what the email needs from `users`.
#[derive(Debug, sqlx::FromRow)]
pub struct ClaimedEmail {
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

impl ClaimedRow for ClaimedEmail {
    type Id = Uuid;

    fn id(&self) -> Uuid {
        self.id
    }

    fn claim_token(&self) -> Uuid {
        self.claim_token
    }

    fn attempt(&self) -> u32 {
        u32::try_from(self.attempts).unwrap_or(u32::MAX)
    }
}

/// Claims up to `limit` pending rows due at `now`, leasing them until
/// `lease_until` and counting the attempt.
#[instrument(skip_all)]
pub async fn claim(
    conn: &mut PgConnection,
    now: DateTime<Utc>,
    lease_until: DateTime<Utc>,
    limit: usize,
) -> sqlx::Result<Vec<ClaimedEmail>> {
    sqlx::query_as(concat!(
        // MATERIALIZED: the claim runs exactly once. Inlined as a join, the
        // planner may rescan it (a nested loop), and each rescan locks and
        // returns other rows, past the LIMIT.
        "WITH c AS MATERIALIZED (
             SELECT due.id, u.email, u.first_name, u.last_name
             FROM outbox AS due
             LEFT JOIN users AS u ON u.id = due.user_id AND u.deleted_at IS NULL
             WHERE ",
        queue_due!("due"),
        "
             ORDER BY due.next_attempt_at
             LIMIT $3
             FOR UPDATE OF due SKIP LOCKED
         )
         UPDATE outbox AS o SET ",
        queue_lease!("o"),
        " FROM c WHERE o.id = c.id AND ",
        queue_due!("o"),
        "
         RETURNING o.id, o.claim_token, o.kind, o.user_id, o.subscription_id, o.attempts,
                   c.email, c.first_name, c.last_name"
    ))
    .bind(now)
    .bind(lease_until)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .fetch_all(conn)
    .await
}

/// What one send did: the error is a one-line description for `last_error`.
#[derive(Debug)]
pub struct Sent(pub Result<(), String>);

impl SendResult for Sent {
    fn failure(&self) -> Option<crate::queue::SendFailure<'_>> {
        let error = self.0.as_ref().err()?;
        Some(crate::queue::SendFailure { error, retry_after: None })
    }
}

/// Records the outcomes of `done`, for the rows their claims still hold.
#[instrument(skip_all)]
pub async fn record(conn: &mut PgConnection, done: &[Done<ClaimedEmail, Sent>]) -> sqlx::Result<()> {
    bind_record(sqlx::query(queue_record!("outbox", "uuid")), done).execute(conn).await?;
    Ok(())
}

/// Gives back `rows`, claimed but not sent (see [`queue_release!`]).
pub async fn release(conn: &mut PgConnection, rows: &[ClaimedEmail]) -> sqlx::Result<()> {
    bind_release(sqlx::query(queue_release!("outbox", "uuid")), rows).execute(conn).await?;
    Ok(())
}
