//! The credit ledger: one row per grant, each with a unique cause, so a
//! second grant for the same cause is refused by the ledger itself.

use axum::http::StatusCode;

use crate::support::events::*;
use crate::support::*;

const T1: &str = "2024-04-01T00:00:00Z";

async fn grants(app: &TestApp) -> Vec<(String, String, i64, Option<String>)> {
    sqlx::query_as("SELECT cause, event_id, amount, user_id FROM credit_grants ORDER BY created_at, cause")
        .fetch_all(app.pool())
        .await
        .unwrap()
}

async fn balance(app: &TestApp, user_id: &str) -> i64 {
    sqlx::query_scalar("SELECT COALESCE(sum(amount), 0)::bigint FROM credit_grants WHERE user_id = $1")
        .bind(user_id)
        .fetch_one(app.pool())
        .await
        .unwrap()
}

async fn send_processed(app: &TestApp, delivery: &Delivery) {
    let answer = app.send(delivery).await;
    assert_eq!(
        (answer.status, &answer.body["status"]),
        (StatusCode::OK, &"processed".into()),
        "{:?}",
        answer.body
    );
}

#[tokio::test]
async fn a_renewal_grants_its_credits_once_per_transaction_even_under_another_event_id() {
    let app = TestApp::spawn().await;
    send_processed(&app, &paddle(&subscription("evt_sub", "created", "active", T1))).await;
    send_processed(
        &app,
        &paddle(&transaction_completed("evt_txn", "txn_02", "subscription_recurring", SECOND_PERIOD)),
    )
    .await;
    // The same transaction under another event id gets past the dedup
    // table; the ledger refuses it.
    send_processed(
        &app,
        &paddle(&transaction_completed("evt_txn_again", "txn_02", "subscription_recurring", SECOND_PERIOD)),
    )
    .await;

    assert_eq!(
        grants(&app).await,
        [
            ("subscription:sub_01:initial".into(), "evt_sub".into(), 200, Some("user_42".into())),
            // The transaction names no user: the subscription's is credited.
            ("transaction:txn_02".into(), "evt_txn".into(), 500, Some("user_42".into())),
        ]
    );
    assert_eq!(balance(&app, "user_42").await, 700);
}

#[tokio::test]
async fn the_first_transaction_of_a_subscription_does_not_double_the_credits_of_its_creation() {
    let app = TestApp::spawn().await;
    send_processed(&app, &paddle(&subscription("evt_sub", "created", "active", T1))).await;
    // The checkout that started the subscription: origin web, no grant.
    send_processed(&app, &paddle(&transaction_completed("evt_web", "txn_01", "web", FIRST_PERIOD))).await;
    // Were the first period's payment ever sent as a renewal, the period
    // subscription.created granted is not granted again.
    send_processed(
        &app,
        &paddle(&transaction_completed("evt_rec", "txn_01b", "subscription_recurring", FIRST_PERIOD)),
    )
    .await;

    assert_eq!(grants(&app).await.len(), 1);
    assert_eq!(balance(&app, "user_42").await, 200);
}

#[tokio::test]
async fn a_renewal_before_its_subscription_is_known_is_still_granted_once() {
    let app = TestApp::spawn().await;
    let mut renewal = transaction_completed("evt_txn", "txn_02", "subscription_recurring", SECOND_PERIOD);
    renewal["data"]["custom_data"] = serde_json::json!({ "user_id": "user_42" });
    send_processed(&app, &paddle(&renewal)).await;
    send_processed(&app, &paddle(&subscription("evt_sub", "created", "active", T1))).await;

    assert_eq!(balance(&app, "user_42").await, 700);
    assert_eq!(grants(&app).await.len(), 2);
}

#[tokio::test]
async fn a_renewal_without_a_subscription_id_fails_and_grants_nothing() {
    let app = TestApp::spawn().await;
    let mut renewal = transaction_completed("evt_txn", "txn_02", "subscription_recurring", SECOND_PERIOD);
    renewal["data"]["subscription_id"] = serde_json::Value::Null;

    assert_eq!(app.send(&paddle(&renewal)).await.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 0);
}

/// `(status, error_message)` of every archive row, in order.
async fn archive(app: &TestApp) -> Vec<(String, Option<String>)> {
    sqlx::query_as("SELECT processing_status, error_message FROM webhook_events ORDER BY id")
        .fetch_all(app.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_price_missing_from_the_map_fails_the_event_until_the_map_lists_it_then_it_is_applied_once() {
    let app = TestApp::spawn().await;
    let created = with_items(subscription("evt_sub", "created", "active", T1), "pri_new", 3);

    let answer = app.send(&paddle(&created)).await;

    // Failed closed: nothing applied, nothing recorded as processed.
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR, "{:?}", answer.body);
    let failed = archive(&app).await;
    assert_eq!(failed[0].0, "FAILED");
    let error = failed[0].1.clone().unwrap_or_default();
    assert!(error.contains("pri_new") && error.contains("PADDLE_PRICE_CREDITS"), "{error}");
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM subscriptions").await, 0);
    assert!(grants(&app).await.is_empty());

    // Reprocessed without the map (or with one that still lacks the price):
    // not applied with zero credits, failed again.
    let id = app.archive_ids().await[0].to_string();
    let run = cli(&app.db, &["events", "reprocess", &id]).await;
    assert!(run.error.is_some(), "{}", run.stdout);
    let run = cli(&app.db, &["events", "reprocess", &id, "--paddle-price-credits", PRICE_CREDITS]).await;
    assert!(run.error.is_some(), "{}", run.stdout);
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 0);

    // The operator lists the price; the reprocess applies it, once.
    let fixed = format!("{PRICE_CREDITS},pri_new=7");
    let out = cli(&app.db, &["events", "reprocess", &id, "--paddle-price-credits", &fixed]).await.ok();
    assert!(out.ends_with("PROCESSED\n"), "{out}");
    assert_eq!(
        grants(&app).await,
        [("subscription:sub_01:initial".into(), "evt_sub".into(), 21, Some("user_42".into()))]
    );
    let out = cli(&app.db, &["events", "reprocess", &id, "--paddle-price-credits", &fixed]).await.ok();
    assert!(out.ends_with("SKIPPED\n"), "{out}");
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
}

#[tokio::test]
async fn a_renewal_of_a_price_missing_from_the_map_fails_and_grants_nothing() {
    let app = TestApp::spawn().await;
    send_processed(&app, &paddle(&subscription("evt_sub", "created", "active", T1))).await;
    let renewal = with_items(
        transaction_completed("evt_txn", "txn_02", "subscription_recurring", SECOND_PERIOD),
        "pri_new",
        1,
    );

    assert_eq!(app.send(&paddle(&renewal)).await.status, StatusCode::INTERNAL_SERVER_ERROR);

    let error = archive(&app).await[1].1.clone().unwrap_or_default();
    assert!(error.contains("pri_new") && error.contains("PADDLE_PRICE_CREDITS"), "{error}");
    assert_eq!(grants(&app).await.len(), 1, "only the subscription's initial grant");
}
