//! Deliveries of events without side effects that wait at the same moment
//! are recorded together, in one statement; each still gets its own answer.

use std::borrow::Cow;

use axum::http::StatusCode;
use serde_json::json;
use webhook_inbox::event::Event;
use webhook_inbox::inbox::{Delivery, InboxError, Outcome, deliver_together};

use crate::support::*;

/// A delivery of event `id` with a raw `payload`.
fn delivery<'a>(id: &'a str, payload: &'a str) -> Delivery<'a> {
    Delivery {
        provider: "paddle",
        event: Event {
            id: Cow::Borrowed(id),
            event_type: Cow::Borrowed("transaction.updated"),
            occurred_at: None,
            notification_id: None,
            data: None,
        },
        payload,
        signature: "ts=1;h1=00",
        secret_index: Some(0),
        request_id: None,
        reprocess_of: None,
    }
}

#[tokio::test]
async fn a_batch_answers_each_delivery_even_when_one_payload_is_refused_or_repeats_an_event() {
    let app = TestApp::spawn().await;
    let mut conn = app.pool().acquire().await.unwrap();
    let good = r#"{"event_id": "x"}"#;
    let unstorable = r#"{"name": "nul\u0000"}"#;
    let deliveries = [
        delivery("evt_a", good),
        delivery("evt_b", unstorable),
        delivery("evt_c", good),
        delivery("evt_a", good),
    ];

    let results = deliver_together(&mut conn, &deliveries.iter().collect::<Vec<_>>()).await;

    assert!(matches!(results[0], Ok(Outcome::Processed { .. })), "{results:?}");
    assert!(matches!(results[1], Err(InboxError::UnstorablePayload)), "{results:?}");
    assert!(matches!(results[2], Ok(Outcome::Processed { .. })), "{results:?}");
    assert!(matches!(results[3], Ok(Outcome::Duplicate { .. })), "{results:?}");
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 2);
    assert_eq!(app.archive_statuses().await.iter().filter(|s| *s == "PROCESSED").count(), 2);
    assert_eq!(app.archive_statuses().await.iter().filter(|s| *s == "SKIPPED").count(), 1);
}

#[tokio::test]
async fn a_batch_of_new_and_known_events_records_each_with_its_own_outcome() {
    let app = TestApp::spawn().await;
    let mut conn = app.pool().acquire().await.unwrap();
    let payload = r#"{"event_id": "x"}"#;
    let known = [delivery("evt_1", payload), delivery("evt_2", payload)];
    let first = deliver_together(&mut conn, &known.iter().collect::<Vec<_>>()).await;
    assert!(first.iter().all(|r| matches!(r, Ok(Outcome::Processed { .. }))), "{first:?}");

    let mixed = [delivery("evt_2", payload), delivery("evt_3", payload), delivery("evt_1", payload)];
    let second = deliver_together(&mut conn, &mixed.iter().collect::<Vec<_>>()).await;

    assert!(matches!(second[0], Ok(Outcome::Duplicate { .. })), "{second:?}");
    assert!(matches!(second[1], Ok(Outcome::Processed { .. })), "{second:?}");
    assert!(matches!(second[2], Ok(Outcome::Duplicate { .. })), "{second:?}");
    // Each answer names its own archive row.
    let ids: Vec<i64> = second
        .iter()
        .map(|r| match r {
            Ok(Outcome::Processed { archive_id } | Outcome::Duplicate { archive_id }) => *archive_id,
            other => panic!("{other:?}"),
        })
        .collect();
    let events: Vec<String> =
        sqlx::query_scalar("SELECT event_id FROM webhook_events WHERE id = ANY($1) ORDER BY id")
            .bind(&ids)
            .fetch_all(app.pool())
            .await
            .unwrap();
    let mut expected: Vec<(i64, &str)> = ids.iter().copied().zip(["evt_2", "evt_3", "evt_1"]).collect();
    expected.sort();
    assert_eq!(events, expected.iter().map(|(_, e)| e.to_string()).collect::<Vec<_>>());
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_deliveries_without_side_effects_at_once_are_each_answered_and_recorded_once() {
    let app = TestApp::spawn().await;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(60));
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let (router, barrier) = (app.router.clone(), barrier.clone());
            // 20 events, each delivered 3 times.
            let body = json!({ "event_id": format!("evt_{}", i % 20), "event_type": "customer.updated", "data": {} });
            tokio::spawn(async move {
                barrier.wait().await;
                crate::support::app::send(&router, &paddle(&body)).await
            })
        })
        .collect();
    let mut processed = 0;
    for task in tasks {
        let answer = task.await.unwrap();
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
        processed += usize::from(answer.body["status"] == "processed");
    }
    assert_eq!(processed, 20);
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 20);
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events WHERE processing_status = 'SKIPPED'").await,
        40
    );
}

#[tokio::test]
async fn a_batched_delivery_is_archived_with_the_same_columns_as_one_recorded_alone() {
    let app = TestApp::spawn().await;
    let mut conn = app.pool().acquire().await.unwrap();
    let payload = r#"{"event_id": "x", "data": {"a": 1}}"#;
    let filled = |id: &'static str| Delivery {
        event: Event {
            occurred_at: Some("2024-04-12T10:18:49Z".parse().unwrap()),
            notification_id: Some(Cow::Borrowed("ntf_1")),
            ..delivery(id, payload).event
        },
        request_id: Some("req-1"),
        reprocess_of: Some(42),
        secret_index: Some(1),
        ..delivery(id, payload)
    };
    let alone = filled("evt_alone");
    webhook_inbox::inbox::deliver(&mut conn, &webhook_inbox::handlers::Handlers::default(), &alone)
        .await
        .unwrap();
    let (first, second) = (filled("evt_batched"), delivery("evt_other", payload));
    deliver_together(&mut conn, &[&first, &second]).await;

    // Every column but those that differ by nature.
    let row = |event_id: &'static str| {
        sqlx::query_scalar::<_, serde_json::Value>(
            "SELECT to_jsonb(w) - 'id' - 'event_id' - 'created_at' - 'processed_at'
             FROM webhook_events w WHERE event_id = $1",
        )
        .bind(event_id)
        .fetch_one(app.pool())
    };
    assert_eq!(row("evt_alone").await.unwrap(), row("evt_batched").await.unwrap());
}
