//! A whole lifecycle, every event delivered ten times, all at once and
//! interleaved across two instances: the same final state as one orderly
//! delivery, one grant per cause, one email per cause.

use std::collections::HashSet;

use axum::Router;
use axum::http::StatusCode;
use chrono::Utc;
use futures_util::future::join_all;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::app::processed_at_once;
use crate::support::events::*;
use crate::support::outbox::worker;
use crate::support::*;

/// A user signs up, subscribes, renews, changes address, and cancels.
fn lifecycle() -> Vec<Delivery> {
    vec![
        clerk("msg_created", &user("created", "user_42", "ada@example.com", 1_711_929_600_000)),
        clerk("msg_updated", &user("updated", "user_42", "ada@lovelace.example", 1_712_000_000_000)),
        paddle(&subscription("evt_created", "created", "active", "2024-04-01T00:00:00Z")),
        paddle(&subscription("evt_past_due", "past_due", "past_due", "2024-04-15T00:00:00Z")),
        paddle(&subscription("evt_active", "activated", "active", "2024-04-16T00:00:00Z")),
        paddle(&transaction_completed("evt_renewal", "txn_02", "subscription_recurring", SECOND_PERIOD)),
        paddle(&subscription("evt_updated", "updated", "canceled", "2024-05-10T00:00:00Z")),
        paddle(&subscription("evt_canceled", "canceled", "canceled", "2024-05-10T00:00:00Z")),
    ]
}

/// What the lifecycle leaves, whatever the order it arrived in.
async fn final_state(app: &TestApp) -> Value {
    let subscription: (String, bool, String) =
        sqlx::query_as("SELECT status, canceled_at IS NOT NULL, last_event_at::text FROM subscriptions")
            .fetch_one(app.pool())
            .await
            .unwrap();
    let user: (Option<String>, bool) = sqlx::query_as("SELECT email, deleted_at IS NOT NULL FROM users")
        .fetch_one(app.pool())
        .await
        .unwrap();
    let grants: Vec<(String, i64)> = sqlx::query_as("SELECT cause, amount FROM credit_grants ORDER BY cause")
        .fetch_all(app.pool())
        .await
        .unwrap();
    let outbox: Vec<String> =
        sqlx::query_scalar("SELECT cause FROM outbox ORDER BY cause").fetch_all(app.pool()).await.unwrap();
    json!({ "subscription": subscription, "user": user, "grants": grants, "outbox": outbox })
}

fn expected_state() -> Value {
    json!({
        "subscription": ["canceled", true, "2024-05-10 00:00:00+00"],
        "user": ["ada@lovelace.example", false],
        "grants": [["subscription:sub_01:initial", 200], ["transaction:txn_02", 500]],
        "outbox": ["subscription:sub_01:canceled", "user:user_42:welcome"],
    })
}

#[tokio::test]
async fn the_lifecycle_delivered_once_in_order_leaves_the_expected_state() {
    let app = TestApp::spawn().await;
    for delivery in lifecycle() {
        assert_eq!(app.send(&delivery).await.status, StatusCode::OK);
    }
    assert_eq!(final_state(&app).await, expected_state());
}

/// Delivers every event of `events` ten times, all released at once and
/// alternating between `routers`: copy c sends the events rotated by c and
/// reversed on odd copies, so every event races its own duplicates and every
/// other event. Checks each event was processed exactly once.
async fn deliver_ten_times_interleaved(app: &TestApp, routers: [&Router; 2], events: &[Delivery]) {
    let mut deliveries = Vec::new();
    for copy in 0..10 {
        let mut order = events.to_vec();
        order.rotate_left(copy % events.len());
        if copy % 2 == 1 {
            order.reverse();
        }
        deliveries.extend(order);
    }
    let sends =
        deliveries.into_iter().enumerate().map(|(i, delivery)| (routers[i % 2].clone(), delivery)).collect();
    let processed = processed_at_once(sends).await;
    assert_eq!(processed, events.len());
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, events.len() as i64);
}

/// Two workers (one per instance) deliver the outbox concurrently; returns how many they sent.
async fn deliver_outbox(pools: [&PgPool; 2], smtp: &SmtpServer) -> usize {
    let workers = pools.map(|pool| worker(pool, smtp));
    let rounds = join_all(workers.iter().map(|w| w.run_until_idle(Utc::now()))).await;
    rounds.into_iter().map(|round| round.unwrap().sent).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_event_delivered_ten_times_at_once_and_interleaved_leaves_the_same_state_and_sends_each_email_once()
 {
    let app = TestApp::spawn().await;
    let (replica_state, replica) = app.replica().await;
    let smtp = SmtpServer::start().await;

    deliver_ten_times_interleaved(&app, [&app.router, &replica], &lifecycle()).await;

    assert_eq!(final_state(&app).await, expected_state());
    assert_eq!(deliver_outbox([&app.state.pool, &replica_state.pool], &smtp).await, 2);
    let messages = smtp.messages();
    let subjects: HashSet<_> = messages.iter().filter_map(|m| m.header("Subject")).collect();
    assert_eq!(subjects, HashSet::from(["Welcome, Ada", "Your subscription has been canceled"]));
    assert!(messages.iter().all(|m| m.to == ["<ada@lovelace.example>"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_user_created_updated_and_deleted_ten_times_over_at_once_ends_deleted_scrubbed_and_unmailed() {
    let app = TestApp::spawn().await;
    let (replica_state, replica) = app.replica().await;
    let smtp = SmtpServer::start().await;
    let events = [
        clerk("msg_created", &user("created", "user_42", "ada@example.com", 1_000)),
        clerk("msg_updated", &user("updated", "user_42", "ada@lovelace.example", 2_000)),
        clerk("msg_deleted", &user_deleted("user_42", 3_000)),
        clerk("msg_late", &user("updated", "user_42", "ada@example.com", 2_500)),
    ];

    deliver_ten_times_interleaved(&app, [&app.router, &replica], &events).await;

    let user: (Option<String>, Option<String>, Option<String>, bool) =
        sqlx::query_as("SELECT email, first_name, last_name, deleted_at IS NOT NULL FROM users")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(user, (None, None, None, true));
    // The welcome was never enqueued (deletion first), or given up by the
    // deletion, or enqueued by a `user.created` that raced the deletion
    // (its statement did not see it) and given up by the outbox, which
    // finds no address to send to (`users::WELCOME` says why).
    assert_eq!(deliver_outbox([&app.state.pool, &replica_state.pool], &smtp).await, 0);
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE status <> 'dead'").await, 0);
    assert!(smtp.messages().is_empty());
}
