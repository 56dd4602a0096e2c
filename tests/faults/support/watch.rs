//! What PostgreSQL itself says about the service's sessions: the proof that
//! a request did (or did not) reach the database, and that a delivery is
//! where a test needs it to be.

use std::time::{Duration, Instant};

use sqlx::PgPool;

/// The longest a test waits for a condition: only a hang takes this long,
/// however loaded the machine.
pub const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// Polls `condition` every 10 ms until it holds; panics, naming `what`, if
/// it still does not after [`LONGEST_WAIT`]: a regression fails instead of
/// hanging.
pub async fn until(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + LONGEST_WAIT;
    while !condition().await {
        assert!(Instant::now() < deadline, "waited {LONGEST_WAIT:?} for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

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
    let mut quiet = Vec::new();
    until("the service to go quiet", async || {
        let first = service_sessions(pool).await;
        if !first.iter().all(|session| session.state.as_deref() == Some("idle")) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        quiet = service_sessions(pool).await;
        quiet == first
    })
    .await;
    quiet
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
    until(&format!("{count} sessions waiting on a {kind} lock"), async || {
        waiting_on(pool, kind).await >= count
    })
    .await;
}

/// Polls until the service has no session left on this database (e.g. after
/// it was killed: PostgreSQL ends a session when it sees its socket closed,
/// rolling back whatever it had not committed).
pub async fn until_no_service_session(pool: &PgPool) {
    until("the service's sessions to end", async || service_sessions(pool).await.is_empty()).await;
}

/// A gate the test holds shut: a trigger on `table` makes every insert wait
/// for advisory lock `key`, which the test holds on its own connection, so a
/// delivery's transaction stays inside its effect until the test opens it.
/// The insert waits before its row is written (so a trigger that refuses the
/// row runs once the gate opens).
pub async fn install_gate(pool: &PgPool, table: &str, key: i64) {
    install(pool, table, "BEFORE", &key.to_string()).await;
}

/// A gate that stops only rows that are really inserted (an insert that
/// conflicts and does nothing passes), at the end of their statement, with
/// its row written: the statement holds a new row when it waits. `key` is
/// an SQL expression over `NEW`, so that one table can have several gates.
pub async fn install_gate_after_insert(pool: &PgPool, table: &str, key: &str) {
    install(pool, table, "AFTER", key).await;
}

/// The trigger lifts its own transaction's `lock_timeout`: the delivery
/// held at the gate must wait as long as the test says, while every other
/// transaction keeps the service's bound. It takes the lock shared, so an
/// open gate lets every insert through at once; the test's exclusive hold
/// shuts it.
async fn install(pool: &PgPool, table: &str, when: &str, key: &str) {
    let sql = format!(
        "CREATE FUNCTION gate_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             PERFORM set_config('lock_timeout', '0', true);
             PERFORM pg_advisory_xact_lock_shared({key});
             RETURN NEW;
         END $$;
         CREATE TRIGGER gate_{table} {when} INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION gate_{table}();"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(pool).await.unwrap();
}

/// How many of the service's sessions wait at the gate of `key`.
pub async fn waiting_at_gate(pool: &PgPool, key: i64) -> i64 {
    // A bigint advisory key is split into classid (high half) and objid (low half).
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE a.application_name = 'webhook-inbox' AND a.datname = current_database()
           AND l.locktype = 'advisory' AND NOT l.granted
           AND l.classid::int8 = $1 >> 32 AND l.objid::int8 = $1 & 4294967295",
    )
    .bind(key)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A test's hold on an advisory lock that a gate makes inserts wait for.
pub struct Gate {
    conn: sqlx::PgConnection,
    key: i64,
}

impl Gate {
    /// Installs the gate on `table` and shuts it: from now on an insert into
    /// `table` waits, inside its transaction, until [`Gate::open`].
    pub async fn shut(pool: &PgPool, table: &str, key: i64) -> Gate {
        install_gate(pool, table, key).await;
        Gate::close(pool, key).await
    }

    /// Shuts the gate of `key`, installed earlier: returns once the
    /// transactions that passed it have ended; every later insert waits.
    pub async fn close(pool: &PgPool, key: i64) -> Gate {
        use sqlx::Connection;
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
