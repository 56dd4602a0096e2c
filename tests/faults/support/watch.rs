//! What PostgreSQL itself says about the service's sessions: the proof that
//! a request did (or did not) reach the database, and that a delivery is
//! where a test needs it to be.

use std::time::Duration;

use sqlx::PgPool;

/// One session of the service, as `pg_stat_activity` shows it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Session {
    pub pid: i32,
    pub backend_start: chrono::DateTime<chrono::Utc>,
    /// When its last statement started: changes with every statement it runs.
    pub query_start: Option<chrono::DateTime<chrono::Utc>>,
    pub state: Option<String>,
}

/// The service's sessions on this database (`application_name` is set by
/// the service's pool), read live from shared memory, not from the
/// cumulative statistics, which lag. Two equal snapshots mean the service
/// opened no connection and ran no statement in between.
pub async fn service_sessions(pool: &PgPool) -> Vec<Session> {
    sqlx::query_as(
        "SELECT pid, backend_start, query_start, state FROM pg_stat_activity
         WHERE application_name = 'webhook-inbox' AND datname = current_database()
         ORDER BY pid",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The service's sessions once it is quiet: every session idle, and the
/// view unchanged 50 ms later. A just-started service runs its startup work
/// (migrations, the first retention purge) before it is.
pub async fn quiet_service_sessions(pool: &PgPool) -> Vec<Session> {
    for _ in 0..200 {
        let first = service_sessions(pool).await;
        if first.iter().all(|session| session.state.as_deref() == Some("idle")) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if service_sessions(pool).await == first {
                return first;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the service never went quiet");
}

/// How many of the service's sessions wait on a lock of `kind`
/// (`transactionid`: a dedup row; `advisory`: a test's gate).
pub async fn waiting_on(pool: &PgPool, kind: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE application_name = 'webhook-inbox' AND datname = current_database()
           AND wait_event_type = 'Lock' AND wait_event = $1",
    )
    .bind(kind)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Polls until `count` of the service's sessions wait on a lock of `kind`.
pub async fn until_waiting_on(pool: &PgPool, kind: &str, count: i64) {
    for _ in 0..1000 {
        if waiting_on(pool, kind).await >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{count} sessions never waited on a {kind} lock");
}

/// Polls until the service has no session left on this database (e.g. after
/// it was killed: PostgreSQL ends a session when it sees its socket closed,
/// rolling back whatever it had not committed).
pub async fn until_no_service_session(pool: &PgPool) {
    for _ in 0..1000 {
        if service_sessions(pool).await.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("sessions of the service outlived it");
}

/// A gate the test holds shut: a trigger on `table` makes every insert wait
/// for advisory lock `key`, which the test holds on its own connection, so a
/// delivery's transaction stays inside its handler until the test opens it.
///
/// The trigger lifts its own transaction's `lock_timeout`: the delivery
/// held at the gate must wait as long as the test says, while every other
/// transaction keeps the service's bound.
pub async fn install_gate(pool: &PgPool, table: &str, key: i64) {
    let sql = format!(
        "CREATE FUNCTION gate_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             PERFORM set_config('lock_timeout', '0', true);
             PERFORM pg_advisory_xact_lock({key});
             RETURN NEW;
         END $$;
         CREATE TRIGGER gate_{table} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION gate_{table}();"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(pool).await.unwrap();
}

/// A test's hold on an advisory lock that [`install_gate`] makes inserts wait for.
pub struct Gate {
    conn: sqlx::PgConnection,
    key: i64,
}

impl Gate {
    /// Installs the gate on `table` and shuts it: from now on an insert into
    /// `table` waits, inside its transaction, until [`Gate::open`].
    pub async fn shut(pool: &PgPool, table: &str, key: i64) -> Gate {
        use sqlx::Connection;
        install_gate(pool, table, key).await;
        let mut conn = pool.acquire().await.unwrap().detach();
        sqlx::query("SELECT pg_advisory_lock($1)").bind(key).execute(&mut conn).await.unwrap();
        let _ = conn.ping().await;
        Gate { conn, key }
    }

    /// Lets every waiting and later insert through.
    pub async fn open(mut self) {
        use sqlx::Connection;
        sqlx::query("SELECT pg_advisory_unlock($1)").bind(self.key).execute(&mut self.conn).await.unwrap();
        self.conn.close().await.unwrap();
    }
}
