//! Recording how each send of a round went: on the round's own connection,
//! and again after a failure, until shortly before the claims' lease ends.
//!
//! Why: an email the SMTP server accepted but whose row is not marked sent
//! goes out again once its lease expires. A mark that takes a fresh pool
//! connection fails merely because the database is busy (the delivery
//! workers hold all but a few connections, and the acquire times out), so
//! the round keeps the connection it claimed with; and a mark that fails
//! anyway (the connection broke, a lock wait timed out) is tried again,
//! which is safe: it matches only the row's current claim (`claim_token`)
//! and sets the same values each time. Past the lease, another worker may
//! have claimed the row and a mark would match nothing: the email is sent
//! again, with the same Message-ID.

use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use tokio::time::Instant;

use super::queue::{self, Claimed, Outcome};

/// How long before the lease ends the marks give up: the other workers
/// (other replicas) read the lease on their own clocks.
const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// The first pause after a failed mark; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two attempts at a mark.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// A round's connection, kept for its marks.
pub(super) struct Marks {
    pool: PgPool,
    conn: Option<PoolConnection<Postgres>>,
    until: Instant,
}

impl Marks {
    /// Marks on `conn` (replaced from `pool` if it breaks) for claims whose
    /// lease ends at `lease_ends`.
    pub fn new(pool: PgPool, conn: PoolConnection<Postgres>, lease_ends: Instant) -> Marks {
        Marks { pool, conn: Some(conn), until: lease_ends - LEASE_MARGIN }
    }

    /// Records `outcome` for `row`, trying again after each failure until it
    /// is recorded or the lease is about to end; then the last error.
    pub async fn record(&mut self, row: &Claimed, outcome: &Outcome<'_>) -> sqlx::Result<()> {
        let mut pause = FIRST_PAUSE;
        loop {
            let error = match tokio::time::timeout_at(self.until, self.attempt(row, outcome)).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(error)) => error,
                Err(_) => {
                    // Cut mid-statement: the connection's state is unknown.
                    self.discard();
                    return Err(sqlx::Error::Io(std::io::ErrorKind::TimedOut.into()));
                }
            };
            if !matches!(error, sqlx::Error::Database(_)) {
                // Not a statement's error: the connection may be gone.
                self.discard();
            }
            if Instant::now() + pause >= self.until {
                return Err(error);
            }
            tracing::debug!(outbox_id = %row.id, %error, "could not record the outcome of an email; trying again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    async fn attempt(&mut self, row: &Claimed, outcome: &Outcome<'_>) -> sqlx::Result<()> {
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => self.pool.acquire().await?,
        };
        queue::record(self.conn.insert(conn), row, outcome).await
    }

    /// Closes the connection instead of returning it to the pool.
    fn discard(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            conn.close_on_drop();
        }
    }
}
