//! When the database cannot answer in time, the answer is 503 with
//! Retry-After (never 2xx), and nothing is half-done.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};
use webhook_inbox::http::{AppState, Limits, app};
use webhook_inbox::inbox::RoutingTable;
use webhook_inbox::providers::Registry;
use webhook_inbox::providers::paddle;

use crate::support::app::{Answer, send};
use crate::support::events::subscription;
use crate::support::watch::{Gate, until};
use crate::support::*;

/// Opens a transaction that holds `event_id`'s dedup row uncommitted, as a
/// first delivery still in progress would.
pub async fn hold_dedup_row(app: &TestApp, event_id: &str) -> PgConnection {
    let mut holder = PgConnection::connect_with(&app.db.connect_options()).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query(
        "INSERT INTO processed_webhook_events (provider, event_id, event_type) VALUES ('paddle', $1, 'x')",
    )
    .bind(event_id)
    .execute(&mut holder)
    .await
    .unwrap();
    holder
}

/// Waits until some session is blocked on a lock: the condition, not a guess at its timing.
pub async fn until_a_delivery_waits_on_the_lock(app: &TestApp) {
    for _ in 0..500 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
        )
        .fetch_one(app.pool())
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no delivery ever waited on the dedup row");
}

#[tokio::test]
async fn a_duplicate_waiting_past_lock_timeout_answers_503_and_the_retry_succeeds() {
    let app =
        TestApp::spawn_with(TestConfig { lock_timeout: Duration::from_millis(200), ..TestConfig::default() })
            .await;
    let mut holder = hold_dedup_row(&app, "evt_01").await;
    let delivery = paddle(&subscription_created("evt_01", "sub_01"));

    let answer = app.send(&delivery).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        answer.body,
        json!({ "error": "a concurrent delivery of the same event is still in progress" })
    );
    assert_eq!(answer.headers["retry-after"], "5");

    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();
    assert_eq!(app.rows_everywhere().await, 0);
    assert_eq!(app.send(&delivery).await.body, json!({ "event_id": "evt_01", "status": "processed" }));
}

/// A delivery of `evt_01` waits on a first attempt still in progress, which
/// then ends with `end` (ROLLBACK or COMMIT); returns the app and the answer.
async fn behind_a_first_attempt_that_ends_with(end: &'static str) -> (TestApp, Answer) {
    let app = TestApp::spawn().await;
    let mut holder = hold_dedup_row(&app, "evt_01").await;
    let router = app.router.clone();
    let waiting =
        tokio::spawn(async move { send(&router, &paddle(&subscription_created("evt_01", "sub_01"))).await });

    until_a_delivery_waits_on_the_lock(&app).await;
    sqlx::raw_sql(end).execute(&mut holder).await.unwrap();
    let answer = waiting.await.unwrap();
    (app, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_waits_for_the_first_attempt_and_applies_the_event_if_it_rolled_back() {
    let (app, answer) = behind_a_first_attempt_that_ends_with("ROLLBACK").await;
    assert_eq!(answer.body, json!({ "event_id": "evt_01", "status": "processed" }));
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_waits_for_the_first_attempt_and_skips_if_it_committed() {
    let (app, answer) = behind_a_first_attempt_that_ends_with("COMMIT").await;
    assert_eq!(answer.body, json!({ "event_id": "evt_01", "idempotent": true }));
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 0);
    assert_eq!(app.archive_statuses().await, ["SKIPPED"]);
}

#[tokio::test]
async fn an_unreachable_database_answers_503_and_readiness_says_so() {
    // Nothing listens on port 1: every connection attempt is refused.
    let options = "postgres://postgres@127.0.0.1:1/none".parse().unwrap();
    let pool = PgPoolOptions::new().acquire_timeout(Duration::from_millis(300)).connect_lazy_with(options);
    let providers =
        Registry::default().with(paddle::SPEC.verifier(&[PADDLE_SECRETS[0].into()], 300).unwrap());
    let limits = Limits { max_body_bytes: 65536, body_read_timeout: Duration::from_secs(5) };
    let router = app(AppState::new(pool, providers, RoutingTable::default(), limits));

    let answer = send(&router, &paddle(&subscription_created("evt_01", "sub_01"))).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.body, json!({ "error": "database unavailable" }));
    assert!(answer.headers.contains_key("retry-after"));

    let request = axum::http::Request::get("/readyz").body(axum::body::Body::empty()).unwrap();
    let response = tower::ServiceExt::oneshot(router, request).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn health_and_readiness_answer_when_the_database_does() {
    let app = TestApp::spawn().await;
    for (path, expected) in
        [("/healthz", json!({ "status": "ok" })), ("/readyz", json!({ "status": "ready" }))]
    {
        let request = axum::http::Request::get(path).body(axum::body::Body::empty()).unwrap();
        let response = tower::ServiceExt::oneshot(app.router.clone(), request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&body).unwrap(), expected);
    }
}

#[tokio::test]
async fn an_effect_that_waits_past_lock_timeout_answers_503_and_archives_no_failure() {
    let app =
        TestApp::spawn_with(TestConfig { lock_timeout: Duration::from_millis(200), ..TestConfig::default() })
            .await;
    let created = subscription("evt_01", "created", "active", "2024-04-01T00:00:00Z");
    assert_eq!(app.send(&paddle(&created)).await.status, StatusCode::OK);
    // Another transaction holds the subscription's row, as a delivery of a
    // related event in progress would.
    let mut holder = PgConnection::connect_with(&app.db.connect_options()).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT * FROM subscriptions WHERE id = 'sub_01' FOR UPDATE")
        .execute(&mut holder)
        .await
        .unwrap();
    let updated = paddle(&subscription("evt_02", "updated", "past_due", "2024-04-02T00:00:00Z"));

    let answer = app.send(&updated).await;

    // Busy, not broken: no FAILED row for an operator to chase, and a retry.
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", answer.body);
    assert!(answer.headers.contains_key("retry-after"));
    assert_eq!(app.archive_statuses().await, ["PROCESSED"]);
    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();
    assert_eq!(app.send(&updated).await.body, json!({ "event_id": "evt_02", "status": "processed" }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_no_worker_takes_in_time_answers_503_at_once_and_is_never_run() {
    // The smallest pool: one worker for deliveries with side effects.
    let app = TestApp::spawn_with(TestConfig {
        pool_size: 6,
        acquire_timeout: Duration::from_millis(300),
        ..TestConfig::default()
    })
    .await;
    let mut holder = hold_dedup_row(&app, "evt_01").await;
    let router = app.router.clone();
    let busy =
        tokio::spawn(async move { send(&router, &paddle(&subscription_created("evt_01", "sub_01"))).await });
    until_a_delivery_waits_on_the_lock(&app).await;

    // Bounded by the wait, not by the busy worker (held until the test lets go).
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        app.send(&paddle(&subscription_created("evt_02", "sub_02"))),
    )
    .await
    .expect("answered while the only worker was busy");

    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", answer.body);
    assert_eq!(answer.body, json!({ "error": "too many deliveries in progress" }));
    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();
    assert_eq!(busy.await.unwrap().status, StatusCode::OK);
    // The given-up delivery was never run, even once the worker was free.
    assert_eq!(app.count("SELECT count(*) FROM webhook_events WHERE event_id = 'evt_02'").await, 0);
}

#[tokio::test]
async fn workers_whose_connections_were_cut_run_the_delivery_again_on_a_fresh_one_and_answer_200() {
    let app = TestApp::spawn().await;
    let event = |i: usize| {
        paddle(&json!({ "event_id": format!("evt_{i}"), "event_type": "customer.updated", "data": {} }))
    };
    for i in 0..4 {
        assert_eq!(app.send(&event(i)).await.status, StatusCode::OK);
    }
    // The database ends every session of the app's workers (as a restart would).
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .execute(app.pool())
    .await
    .unwrap();

    // Each of the two recorders holding a cut connection finds it broken at
    // the delivery's statement and runs the delivery again on a fresh one:
    // every delivery is answered 200 and recorded once.
    let mut statuses = Vec::new();
    for i in 4..10 {
        statuses.push(app.send(&event(i)).await.status);
    }
    assert!(statuses.iter().all(|s| *s == StatusCode::OK), "{statuses:?}");
    assert_eq!(
        app.count("SELECT count(*) FROM processed_webhook_events WHERE event_id NOT IN ('evt_0','evt_1','evt_2','evt_3')").await,
        6
    );
}

/// The answer to a delivery the database was too busy for: 503, so the
/// provider retries, and nothing archived (busy, not broken).
fn assert_busy(answer: &Answer) {
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", answer.body);
    assert_eq!(
        answer.body,
        json!({ "error": "the database was busy with concurrent deliveries; retry later" })
    );
    assert_eq!(answer.headers["retry-after"], "5");
}

#[tokio::test]
async fn an_effect_statement_past_statement_timeout_answers_503_busy_and_archives_no_failure() {
    let app = TestApp::spawn_with(TestConfig {
        statement_timeout: Duration::from_millis(300),
        ..TestConfig::default()
    })
    .await;
    // The grant's insert runs far past the bound, as one stuck behind a slow disk would.
    sqlx::raw_sql(
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(60); RETURN NEW; END $$;
         CREATE TRIGGER slow BEFORE INSERT ON credit_grants FOR EACH ROW EXECUTE FUNCTION slow();",
    )
    .execute(app.pool())
    .await
    .unwrap();
    let delivery = paddle(&subscription_created("evt_01", "sub_01"));

    assert_busy(&app.send(&delivery).await);
    assert_eq!(app.rows_everywhere().await, 0);

    sqlx::raw_sql("DROP TRIGGER slow ON credit_grants").execute(app.pool()).await.unwrap();
    assert_eq!(app.send(&delivery).await.body, json!({ "event_id": "evt_01", "status": "processed" }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_chosen_as_a_deadlock_victim_answers_503_busy_and_archives_no_failure() {
    let app = TestApp::spawn().await;
    // The effect's grant takes advisory locks 1, then 3, then 2; the test
    // holds 2 and 3, and, once the effect holds 1, asks for 1 itself: a
    // cycle. The test's session waits an hour before looking for deadlocks,
    // so the delivery's, after its default second, finds it and gives up.
    sqlx::raw_sql(
        "CREATE FUNCTION cross_locks() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             PERFORM set_config('lock_timeout', '0', true);
             PERFORM pg_advisory_xact_lock(1);
             PERFORM pg_advisory_xact_lock(3);
             PERFORM pg_advisory_xact_lock(2);
             RETURN NEW;
         END $$;
         CREATE TRIGGER cross_locks BEFORE INSERT ON credit_grants FOR EACH ROW EXECUTE FUNCTION cross_locks();",
    )
    .execute(app.pool())
    .await
    .unwrap();
    let mut holder = PgConnection::connect_with(&app.db.connect_options()).await.unwrap();
    sqlx::raw_sql("SET deadlock_timeout = '1h'; SELECT pg_advisory_lock(2)")
        .execute(&mut holder)
        .await
        .unwrap();
    let mut step = PgConnection::connect_with(&app.db.connect_options()).await.unwrap();
    sqlx::raw_sql("SELECT pg_advisory_lock(3)").execute(&mut step).await.unwrap();

    let router = app.router.clone();
    let delivery = paddle(&subscription_created("evt_01", "sub_01"));
    let sent = delivery.clone();
    let answer = tokio::spawn(async move { send(&router, &sent).await });
    until_a_delivery_waits_on_the_lock(&app).await;
    // The holder asks for lock 1, which the delivery holds, and waits.
    let closing = tokio::spawn(async move {
        sqlx::raw_sql("SELECT pg_advisory_lock(1)").execute(&mut holder).await.unwrap();
        holder
    });
    until("the test's session waits for lock 1", async || {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 1 AND NOT granted",
        )
        .fetch_one(app.pool())
        .await
        .unwrap();
        waiting == 1
    })
    .await;
    sqlx::raw_sql("SELECT pg_advisory_unlock(3)").execute(&mut step).await.unwrap();

    assert_busy(&answer.await.unwrap());
    assert_eq!(app.rows_everywhere().await, 0);
    closing.await.unwrap().close().await.unwrap();
    sqlx::raw_sql("DROP TRIGGER cross_locks ON credit_grants").execute(app.pool()).await.unwrap();
    assert_eq!(app.send(&delivery).await.body, json!({ "event_id": "evt_01", "status": "processed" }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_the_database_stops_answering_is_answered_503_at_the_deadline_and_the_retry_settles_it() {
    // A statement_timeout past the delivery's own deadline (a minute), and
    // the delivery's grant waits at a gate: to the service the database
    // simply stops answering. Only the deadline ends the wait.
    let app = TestApp::spawn_with(TestConfig {
        statement_timeout: Duration::from_secs(120),
        ..TestConfig::default()
    })
    .await;
    let gate = Gate::shut(app.pool(), "credit_grants", 1).await;
    let delivery = paddle(&subscription_created("evt_01", "sub_01"));

    let answer = app.send(&delivery).await;

    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", answer.body);
    assert_eq!(answer.body, json!({ "error": "the delivery did not finish in time" }));
    assert_eq!(answer.headers["retry-after"], "5");
    // Whether it committed is unknown to the service; the provider's retry
    // settles it, applied once either way.
    gate.open().await;
    let retried = app.send(&delivery).await;
    assert_eq!(retried.status, StatusCode::OK, "{:?}", retried.body);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
}
