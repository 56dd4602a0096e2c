//! A lock on work that one process at a time should do (reconciling a
//! provider, the archive's maintenance), whichever replica or command runs
//! it: a session advisory lock on a connection of its own.

use sqlx::{PgConnection, PgPool};

/// Held until [`release`](SessionLock::release)d, or until its connection
/// ends: a process killed while holding it releases it with its connection.
pub struct SessionLock {
    conn: PgConnection,
    scope: &'static str,
    name: String,
}

impl SessionLock {
    /// Takes the lock named `scope` and `name` if nobody holds it (`None`
    /// if somebody does), on a connection detached from `pool`, so that the
    /// pool never hands out a connection that holds it.
    pub async fn try_take(
        pool: &PgPool,
        scope: &'static str,
        name: &str,
    ) -> sqlx::Result<Option<SessionLock>> {
        let mut conn = pool.acquire().await?.detach();
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1), hashtext($2))")
            .bind(scope)
            .bind(name)
            .fetch_one(&mut conn)
            .await?;
        if !taken {
            close(conn).await;
            return Ok(None);
        }
        Ok(Some(SessionLock { conn, scope, name: name.to_string() }))
    }

    /// The connection that holds the lock, for work that must be done on it.
    pub fn connection(&mut self) -> &mut PgConnection {
        &mut self.conn
    }

    /// Releases the lock and closes its connection.
    ///
    /// Why unlock before closing: a closed connection's lock is released
    /// only once its server process has exited, after `close` returns, and
    /// the next taker would find it still held.
    pub async fn release(mut self) {
        let unlocked = sqlx::query("SELECT pg_advisory_unlock(hashtext($1), hashtext($2))")
            .bind(self.scope)
            .bind(&self.name)
            .execute(&mut self.conn)
            .await;
        if let Err(error) = unlocked {
            tracing::warn!(%error, scope = self.scope, name = %self.name, "unlocking; the lock goes with its connection");
        }
        close(self.conn).await;
    }
}

async fn close(conn: PgConnection) {
    use sqlx::Connection;
    if let Err(error) = conn.close().await {
        tracing::warn!(%error, "closing a lock's connection");
    }
}
