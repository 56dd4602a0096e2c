//! Real concurrency: many deliveries of one event released at the same
//! moment, in one instance and across two instances on one database.

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use crate::support::app::send;
use crate::support::*;

/// Sends `delivery` once per router in `routers`, all released together by a
/// barrier, and returns the answers' bodies.
async fn fire_at_once(routers: Vec<Router>, delivery: &Delivery) -> Vec<Value> {
    let barrier = Arc::new(Barrier::new(routers.len()));
    let tasks: Vec<_> = routers
        .into_iter()
        .map(|router| {
            let (barrier, delivery) = (barrier.clone(), delivery.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let answer = send(&router, &delivery).await;
                assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
                answer.body
            })
        })
        .collect();
    let mut bodies = Vec::new();
    for task in tasks {
        bodies.push(task.await.unwrap());
    }
    bodies
}

fn processed_and_idempotent(bodies: &[Value]) -> (usize, usize) {
    let processed = bodies.iter().filter(|b| b["status"] == "processed").count();
    let idempotent = bodies.iter().filter(|b| b["idempotent"] == true).count();
    (processed, idempotent)
}

async fn assert_applied_once(app: &TestApp) {
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events WHERE processing_status = 'PROCESSED'").await,
        1
    );
    assert_eq!(app.count("SELECT count(*) FROM webhook_events WHERE processing_status = 'SKIPPED'").await, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_deliveries_of_one_event_fired_at_once_apply_it_once() {
    let app = TestApp::spawn().await;
    let delivery = paddle(&subscription_created("evt_01", "sub_01"));

    let bodies = fire_at_once(vec![app.router.clone(); 10], &delivery).await;

    assert_eq!(processed_and_idempotent(&bodies), (1, 9));
    assert_applied_once(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_one_database_apply_an_event_once() {
    let app = TestApp::spawn().await;
    let (_replica_state, replica) = app.replica().await;
    let delivery = paddle(&subscription_created("evt_01", "sub_01"));

    let routers = (0..10).map(|i| if i % 2 == 0 { app.router.clone() } else { replica.clone() }).collect();
    let bodies = fire_at_once(routers, &delivery).await;

    assert_eq!(processed_and_idempotent(&bodies), (1, 9));
    assert_applied_once(&app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_concurrent_clerk_user_created_deliveries_insert_one_user() {
    let app = TestApp::spawn().await;
    let delivery = clerk("msg_01", &user_created("user_01"));

    let bodies = fire_at_once(vec![app.router.clone(); 10], &delivery).await;

    assert_eq!(processed_and_idempotent(&bodies), (1, 9));
    assert_eq!(app.count("SELECT count(*) FROM users").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_deliveries_of_different_events_are_all_applied() {
    let app = TestApp::spawn().await;
    let barrier = Arc::new(Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (router, barrier) = (app.router.clone(), barrier.clone());
            tokio::spawn(async move {
                let body =
                    json!({ "event_id": format!("evt_{i}"), "event_type": "customer.created", "data": {} });
                barrier.wait().await;
                send(&router, &paddle(&body)).await.status
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_concurrent_deliveries_of_one_event_without_side_effects_record_it_once_per_provider() {
    let app = TestApp::spawn().await;
    let deliveries = [
        ("stripe", stripe(&stripe_event("evt_01", "invoice.paid"))),
        ("github", github("72d3162e-cc78-11e3-81ab-4c9367dc0958", "issues", &issue_opened())),
        (STANDARD_SENDER, standard(STANDARD_SENDER, "msg_01", &standard_event("contact.created"))),
    ];
    for (provider, delivery) in &deliveries {
        let bodies = fire_at_once(vec![app.router.clone(); 10], delivery).await;
        assert_eq!(processed_and_idempotent(&bodies), (1, 9), "{provider}");
    }

    let dedup_rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT provider, count(*) FROM processed_webhook_events GROUP BY provider ORDER BY provider",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    let mut one_each: Vec<(String, i64)> =
        deliveries.iter().map(|(provider, _)| (provider.to_string(), 1)).collect();
    one_each.sort();
    assert_eq!(dedup_rows, one_each);
    let skipped = app.count("SELECT count(*) FROM webhook_events WHERE processing_status = 'SKIPPED'").await;
    assert_eq!(skipped, 9 * deliveries.len() as i64);
}
