//! The queue engine's statements are planned for its table as it is, not
//! as it was when the engine's connection first ran them: a destination's
//! jobs can go from none to a backlog of tens of thousands (a backfill, a
//! receiver down for hours) within one connection's life, and the plans
//! PostgreSQL cached while the table was nearly empty scan every pending
//! job to update the few a step claims or records (seen: 40,013 rows read
//! to send 3 when the engine began its transactions with a plain `BEGIN`).

use chrono::Utc;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::support::forwarding::*;
use crate::support::receiver::Receiver;

/// Jobs in the backlog: far more than a claim reads.
const BACKLOG: i64 = 20_000;

/// Rows of `destination_jobs` read so far, by sequential scans and through
/// indexes, with this connection's own counts flushed first (PostgreSQL
/// flushes a backend's statistics when it goes idle, at most once a second
/// unless told to). Only `pool`'s connection reads the table meanwhile.
async fn rows_read(pool: &PgPool) -> i64 {
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_stat_force_next_flush()").execute(&mut *conn).await.unwrap();
    sqlx::query_scalar(
        "SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables
         WHERE relname = 'destination_jobs'",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_step_reads_the_rows_it_claims_not_a_backlog_that_grew_after_its_statements_were_first_run() {
    let receiver = Receiver::start(SECRET).await;
    let app = forwarding_app(destination(&receiver.url(), "")).await;
    // Autovacuum's ANALYZE would replan the statements by itself, at a time
    // nobody chooses.
    sqlx::query("ALTER TABLE destination_jobs SET (autovacuum_enabled = false)")
        .execute(app.pool())
        .await
        .unwrap();
    // The engine's one connection, kept across its runs, as `serve` keeps
    // it: its statements are prepared once and their plans cached.
    let engine_pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with((*app.pool().connect_options()).clone())
        .await
        .unwrap();
    let queue = queue(&app, "app");

    // While the table is small, each statement runs more often than
    // PostgreSQL needs to settle on a plan it keeps (five runs).
    for n in 1..=8 {
        deliver(&app, &format!("evt_early_{n}"), "ctm_early", n).await;
        assert_eq!(send_due(&engine_pool, &queue, Utc::now()).await.sent, 1);
    }

    // Then a backlog waiting for its retry (a receiver that was down), and
    // a few live events.
    sqlx::query(
        "INSERT INTO destination_jobs
             (destination, provider, event_id, event_type, body, attempts, next_attempt_at)
         SELECT 'app', 'paddle', 'evt_retrying_' || n, 'subscription.created', '\\x7b7d', 1,
                now() + interval '1 hour'
         FROM generate_series(1, $1) AS n",
    )
    .bind(BACKLOG)
    .execute(app.pool())
    .await
    .unwrap();
    for n in 1..=3 {
        deliver(&app, &format!("evt_due_{n}"), "ctm_due", n).await;
    }

    let before = rows_read(&engine_pool).await;
    assert_eq!(send_due(&engine_pool, &queue, Utc::now()).await.sent, 3);
    let read = rows_read(&engine_pool).await - before;
    assert!(read < BACKLOG, "the engine's steps read {read} rows of a {BACKLOG}-job backlog to send 3");
}
