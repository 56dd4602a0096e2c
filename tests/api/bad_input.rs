//! Bad input gets a documented status and a short JSON reason, and changes nothing.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::*;

/// A Paddle delivery of raw `body` bytes, correctly signed.
fn paddle_raw(body: &[u8]) -> Delivery {
    let mut delivery = paddle(&json!({}));
    delivery.body = body.to_vec();
    delivery.header("paddle-signature", &paddle_signature(PADDLE_SECRETS[0], now(), body))
}

#[tokio::test]
async fn signed_bodies_that_are_not_events_are_answered_400_and_store_nothing() {
    let app = TestApp::spawn().await;
    let cases: [(&[u8], &str); 8] = [
        (b"", "body is not valid JSON"),
        (b"not json", "body is not valid JSON"),
        (b"{\"event_id\": \"evt_1\", \xff}", "body is not valid JSON"),
        (b"[1, 2]", "body is not a Paddle event object"),
        (br#"{"event_type": "customer.created"}"#, "missing or invalid event_id"),
        (br#"{"event_id": 42, "event_type": "customer.created"}"#, "body is not a Paddle event object"),
        (br#"{"event_id": "evt_1"}"#, "missing or invalid event_type"),
        (
            br#"{"event_id": "evt_1", "event_type": "customer.created", "occurred_at": "soon"}"#,
            "invalid occurred_at",
        ),
    ];
    for (body, reason) in cases {
        let answer = app.send(&paddle_raw(body)).await;
        assert_eq!((answer.status, answer.body), (StatusCode::BAD_REQUEST, json!({ "error": reason })));
    }
    assert_eq!(app.rows_everywhere().await, 0);
}

#[tokio::test]
async fn json_that_postgresql_cannot_store_is_answered_400() {
    let app = TestApp::spawn().await;
    let body = br#"{"event_id": "evt_1", "event_type": "customer.created", "data": {"name": "nul\u0000"}}"#;
    let answer = app.send(&paddle_raw(body)).await;
    assert_eq!(
        (answer.status, answer.body),
        (StatusCode::BAD_REQUEST, json!({ "error": "payload cannot be stored as JSON" }))
    );
    assert_eq!(app.rows_everywhere().await, 0);
}

#[tokio::test]
async fn a_body_over_the_limit_is_answered_413_whether_or_not_its_length_is_declared() {
    let app = TestApp::spawn_with(TestConfig { max_body_bytes: 1024, ..TestConfig::default() }).await;
    let padding = "x".repeat(1024);
    let body = json!({ "event_id": "evt_1", "event_type": "customer.created", "data": { "pad": padding } });
    let delivery = paddle(&body);
    let expected = json!({ "error": "body larger than 1024 bytes" });

    let declared = delivery.clone().header("content-length", &delivery.body.len().to_string());
    for delivery in [declared, delivery] {
        let answer = app.send(&delivery).await;
        assert_eq!((answer.status, &answer.body), (StatusCode::PAYLOAD_TOO_LARGE, &expected));
    }
    // Exactly at the limit is fine.
    let at_limit =
        paddle_raw(format!("{:<1024}", r#"{"event_id":"evt_1","event_type":"customer.created"}"#).as_bytes());
    assert_eq!(at_limit.body.len(), 1024);
    assert_eq!(app.send(&at_limit).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_provider_without_a_secret_answers_503_so_the_provider_retries() {
    let app = TestApp::spawn_with(TestConfig::default().without("clerk")).await;
    let answer = app.send(&clerk("msg_01", &user_created("user_01"))).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.body, json!({ "error": "provider clerk is not configured" }));
    assert!(answer.headers.contains_key("retry-after"));
    assert_eq!(app.rows_everywhere().await, 0);
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_get_json_answers() {
    let app = TestApp::spawn().await;
    let mut unknown = paddle(&subscription_created("evt_01", "sub_01"));
    unknown.path = "/webhooks/nobody".into();
    let answer = app.send(&unknown).await;
    assert_eq!((answer.status, answer.body), (StatusCode::NOT_FOUND, json!({ "error": "not found" })));

    let request = axum::http::Request::get("/billing/webhook").body(axum::body::Body::empty()).unwrap();
    let answer = app.request(request).await;
    assert_eq!(
        (answer.status, answer.body),
        (StatusCode::METHOD_NOT_ALLOWED, json!({ "error": "method not allowed" }))
    );
}
