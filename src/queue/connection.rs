//! The engine's connection: kept from one statement to the next, replaced
//! when it breaks, and used to record outcomes again after a failure, until
//! shortly before the claims' lease ends.
//!
//! Why: a row that was sent but whose record is lost goes out again once its
//! lease expires. A record that takes a fresh pool connection fails merely
//! because the database is busy (the delivery workers hold all but a few
//! connections, and the acquire times out), so the engine keeps the
//! connection it claimed with; and a record that fails anyway (the
//! connection broke, a lock wait timed out) is tried again, which is safe:
//! it matches only the rows' current claims and sets the same values each
//! time. Past the lease another claim may hold a row and the record matches
//! nothing: the row is sent again.

use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};
use tokio::time::Instant;

use super::{Done, Queue};

/// How the engine's transactions begin: with custom plans.
///
/// Why: a queue's table can go from empty to a backlog of hundreds of
/// thousands of rows (a backfill, a receiver down for hours) within one
/// connection's life. A generic plan cached while the table was small (a
/// sequential scan, a hash join) is kept until the next `ANALYZE`, and has
/// every step read the whole table: `loadgen backfill` saw the drain run at
/// a fraction of its rate, and live events wait seconds, until autovacuum
/// analyzed the table. A step serves a batch of rows, so planning its
/// statements each time costs little.
const BEGIN: &str = "BEGIN; SET LOCAL plan_cache_mode = force_custom_plan";

/// How long before the lease ends records give up: the other processes
/// (other replicas) read the lease on their own clocks.
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// The first pause after a failed record; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two attempts at a record.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// A pooled connection kept between statements.
pub struct KeptConnection {
    pool: PgPool,
    conn: Option<PoolConnection<Postgres>>,
}

impl KeptConnection {
    /// No connection yet: the first statement takes one from `pool`.
    pub fn new(pool: PgPool) -> KeptConnection {
        KeptConnection { pool, conn: None }
    }

    /// The kept connection, or a fresh one from the pool.
    pub async fn get(&mut self) -> sqlx::Result<&mut PgConnection> {
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => self.pool.acquire().await?,
        };
        Ok(&mut **self.conn.insert(conn))
    }

    /// After `error` on the connection: an error that is not a statement's
    /// may have left the connection broken, so it is closed, not kept.
    pub fn failed(&mut self, error: &sqlx::Error) {
        if !matches!(error, sqlx::Error::Database(_)) {
            self.discard();
        }
    }

    /// Opens a transaction on the connection in which the queue's
    /// statements are planned for the table as it is now ([`BEGIN`]).
    pub async fn begin(&mut self) -> sqlx::Result<Transaction<'_, Postgres>> {
        self.get().await?.begin_with(BEGIN).await
    }

    /// Records `done` for `queue`, trying again after each failure until it
    /// is recorded or `lease_ends` (less the margin) is near; then the last
    /// error.
    pub async fn record<Q: Queue>(
        &mut self,
        queue: &Q,
        done: &[Done<Q::Row, Q::Attempt>],
        lease_ends: Instant,
    ) -> sqlx::Result<()> {
        let until = lease_ends - LEASE_MARGIN;
        let mut pause = FIRST_PAUSE;
        loop {
            let attempt = async {
                let mut tx = self.begin().await?;
                queue.record(&mut tx, done).await?;
                tx.commit().await
            };
            let error = match tokio::time::timeout_at(until, attempt).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(error)) => error,
                Err(_) => {
                    // Cut mid-statement: the connection's state is unknown.
                    self.discard();
                    return Err(sqlx::Error::Io(std::io::ErrorKind::TimedOut.into()));
                }
            };
            self.failed(&error);
            if Instant::now() + pause >= until {
                return Err(error);
            }
            tracing::debug!(%error, "could not record the outcome of sends; trying again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// Closes the connection instead of returning it to the pool.
    pub fn discard(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            conn.close_on_drop();
        }
    }
}
