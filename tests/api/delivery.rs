//! First deliveries apply their effects; every later delivery of the same
//! event is answered idempotently and changes nothing.

use axum::http::StatusCode;
use serde_json::json;

use sqlx::Row;

use crate::support::*;

#[tokio::test]
async fn ten_sequential_deliveries_of_one_paddle_event_apply_it_once() {
    let app = TestApp::spawn().await;
    let delivery = paddle(&subscription_created("evt_01", "sub_01"));

    let mut answers = Vec::new();
    for _ in 0..10 {
        let answer = app.send(&delivery).await;
        assert_eq!(answer.status, StatusCode::OK);
        answers.push(answer.body);
    }

    assert_eq!(answers[0], json!({ "event_id": "evt_01", "status": "processed" }));
    for answer in &answers[1..] {
        assert_eq!(answer, &json!({ "event_id": "evt_01", "idempotent": true }));
    }
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
    let mut expected = vec!["PROCESSED".to_string()];
    expected.extend(std::iter::repeat_n("SKIPPED".to_string(), 9));
    assert_eq!(app.archive_statuses().await, expected);
}

#[tokio::test]
async fn subscription_created_upserts_the_subscription_and_grants_credits_for_its_items() {
    let app = TestApp::spawn().await;
    app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;

    let (customer, user, status): (String, Option<String>, String) =
        sqlx::query_as("SELECT customer_id, user_id, status FROM subscriptions WHERE id = 'sub_01'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!((customer.as_str(), user.as_deref(), status.as_str()), ("ctm_01", Some("user_42"), "active"));
    // 2 × pri_basic (100 each); pri_unlisted is listed as granting nothing.
    let grant: (String, String, Option<String>, i64) =
        sqlx::query_as("SELECT event_id, subscription_id, user_id, amount FROM credit_grants")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(grant, ("evt_01".into(), "sub_01".into(), Some("user_42".into()), 200));
}

#[tokio::test]
async fn the_archive_row_records_what_an_operator_needs_to_trace_a_delivery() {
    let app = TestApp::spawn().await;
    let body = subscription_created("evt_01", "sub_01");
    // Signed with the second configured secret.
    let delivery = paddle_signed(&body, PADDLE_SECRETS[1], now()).header("x-request-id", "req-abc");
    app.send(&delivery).await;

    let row = sqlx::query(
        "SELECT provider, event_id, event_type, signature, secret_index, notification_id, request_id,
                occurred_at = '2024-04-12T10:18:49.621022Z' AS occurred_at_kept, payload
         FROM webhook_events",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    let text = |column: &str| row.get::<Option<String>, _>(column);
    let signature = delivery.headers.iter().find(|(n, _)| n == "paddle-signature").map(|(_, v)| v.clone());
    assert_eq!(text("provider").as_deref(), Some("paddle"));
    assert_eq!(text("event_id").as_deref(), Some("evt_01"));
    assert_eq!(text("event_type").as_deref(), Some("subscription.created"));
    assert_eq!(text("signature"), signature);
    assert_eq!(row.get::<Option<i16>, _>("secret_index"), Some(1));
    assert_eq!(text("notification_id").as_deref(), Some("ntf_evt_01"));
    assert_eq!(text("request_id").as_deref(), Some("req-abc"));
    assert!(row.get::<bool, _>("occurred_at_kept"));
    assert_eq!(row.get::<serde_json::Value, _>("payload"), body);
}

#[tokio::test]
async fn a_dashboard_replay_with_a_new_notification_id_is_still_the_same_event() {
    let app = TestApp::spawn().await;
    let mut body = subscription_created("evt_01", "sub_01");
    app.send(&paddle(&body)).await;
    body["notification_id"] = json!("ntf_replayed");
    let answer = app.send(&paddle(&body)).await;

    assert_eq!(answer.body, json!({ "event_id": "evt_01", "idempotent": true }));
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events WHERE notification_id = 'ntf_replayed' AND processing_status = 'SKIPPED'").await,
        1
    );
}

#[tokio::test]
async fn clerk_user_created_inserts_the_user_with_the_primary_email() {
    let app = TestApp::spawn().await;
    let answer = app.send(&clerk("msg_01", &user_created("user_01"))).await;
    assert_eq!(answer.body, json!({ "event_id": "msg_01", "status": "processed" }));

    let user: (String, Option<String>, Option<String>, Option<String>, i64) = sqlx::query_as(
        "SELECT id, email, first_name, last_name, (extract(epoch FROM created_at) * 1000)::bigint FROM users",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(
        user,
        (
            "user_01".into(),
            Some("ada@example.com".into()),
            Some("Ada".into()),
            Some("Lovelace".into()),
            1654012591514
        )
    );
}

#[tokio::test]
async fn clerk_deliveries_under_the_standard_webhooks_header_names_are_accepted() {
    let app = TestApp::spawn().await;
    let svix = clerk("msg_01", &user_created("user_01"));
    let renamed = svix.headers.iter().fold(svix.clone(), |d, (name, value)| {
        d.without(name).header(&name.replace("svix-", "webhook-"), value)
    });
    assert_eq!(app.send(&renamed).await.status, StatusCode::OK);
    assert_eq!(app.count("SELECT count(*) FROM users").await, 1);
}

#[tokio::test]
async fn events_without_an_effect_are_archived_processed_and_deduplicated() {
    let app = TestApp::spawn().await;
    let body = json!({ "event_id": "evt_09", "event_type": "customer.created", "data": { "id": "ctm_1" } });
    let first = app.send(&paddle(&body)).await;
    let second = app.send(&paddle(&body)).await;

    assert_eq!(first.body, json!({ "event_id": "evt_09", "status": "processed" }));
    assert_eq!(second.body, json!({ "event_id": "evt_09", "idempotent": true }));
    assert_eq!(app.archive_statuses().await, ["PROCESSED", "SKIPPED"]);
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 1);
}

#[tokio::test]
async fn the_same_event_id_from_two_providers_is_two_events() {
    let app = TestApp::spawn().await;
    let paddle_event = json!({ "event_id": "same_id", "event_type": "customer.created", "data": {} });
    app.send(&paddle(&paddle_event)).await;
    let answer = app.send(&clerk("same_id", &json!({ "type": "session.created", "data": {} }))).await;

    assert_eq!(answer.body, json!({ "event_id": "same_id", "status": "processed" }));
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 2);
}
