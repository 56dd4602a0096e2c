//! A delivery worker keeps its connection from one delivery to the next: a
//! failed delivery must leave it clean (its transaction rolled back), and a
//! session PostgreSQL ends is a lost connection (503, a fresh connection),
//! never a 500.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use webhook_inbox::inbox::InboxError;

use crate::availability::{hold_dedup_row, until_a_delivery_waits_on_the_lock};
use crate::support::app::send;
use crate::support::*;

/// The state of session `pid` in `pg_stat_activity`, `None` once it has ended.
async fn session_state(app: &TestApp, pid: i32) -> Option<String> {
    sqlx::query_scalar("SELECT state FROM pg_stat_activity WHERE pid = $1")
        .bind(pid)
        .fetch_optional(app.pool())
        .await
        .unwrap()
        .flatten()
}

/// The exact sequence of issue 11: one delivery worker (a pool of 6), a
/// short statement timeout (so `idle_in_transaction_session_timeout`, twice
/// it, is short), and a delivery that fails inside its transaction (503: a
/// concurrent first attempt held the dedup row past `lock_timeout`). The
/// worker then idles past that timeout. Its session must not have been left
/// in the failed transaction for PostgreSQL to end; the next deliveries
/// answer 200, not 500 then 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_delivery_leaves_its_workers_connection_clean_and_the_next_ones_succeed() {
    let app = TestApp::spawn_with(TestConfig {
        pool_size: 6,
        statement_timeout: Duration::from_millis(200),
        lock_timeout: Duration::from_millis(100),
        ..TestConfig::default()
    })
    .await;
    let mut holder = hold_dedup_row(&app, "evt_held").await;
    let router = app.router.clone();
    let waiting =
        tokio::spawn(
            async move { send(&router, &paddle(&subscription_created("evt_held", "sub_held"))).await },
        );
    until_a_delivery_waits_on_the_lock(&app).await;
    let worker: i32 = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    let answer = waiting.await.unwrap();
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", answer.body);
    // Answered only after the rollback: the session is idle, outside any transaction.
    assert_eq!(session_state(&app, worker).await.as_deref(), Some("idle"));
    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();

    // Not ordering anything: three times idle_in_transaction_session_timeout
    // (400 ms), for PostgreSQL to end a session left in a transaction.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(session_state(&app, worker).await.as_deref(), Some("idle"), "the worker's session was ended");
    for n in 1..=3 {
        let id = format!("evt_after_{n}");
        let answer = app.send(&paddle(&subscription_created(&id, &format!("sub_after_{n}")))).await;
        assert_eq!(answer.body, json!({ "event_id": id, "status": "processed" }), "delivery {n} after");
    }
}

/// What a database error with `sqlstate` becomes, from a real PostgreSQL.
async fn classified(app: &TestApp, sqlstate: &str) -> InboxError {
    let raise = format!("DO $$ BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '{sqlstate}'; END $$");
    InboxError::from(sqlx::raw_sql(sqlx::AssertSqlSafe(raise)).execute(app.pool()).await.unwrap_err())
}

#[tokio::test]
async fn errors_that_end_the_session_are_a_lost_connection_and_values_postgresql_cannot_store_are_unstorable()
{
    let app = TestApp::spawn().await;
    // idle_in_transaction_session_timeout, transaction_timeout,
    // idle_session_timeout, database dropped, admin shutdown, connection failure.
    for sqlstate in ["25P03", "25P04", "57P05", "57P04", "57P01", "08006"] {
        let error = classified(&app, sqlstate).await;
        assert!(matches!(error, InboxError::Unavailable(_)), "{sqlstate}: {error:?}");
    }
    // numeric_value_out_of_range, character_not_in_repertoire, datetime_field_overflow.
    for sqlstate in ["22003", "22021", "22008"] {
        let error = classified(&app, sqlstate).await;
        assert!(matches!(error, InboxError::UnstorablePayload), "{sqlstate}: {error:?}");
    }
}
