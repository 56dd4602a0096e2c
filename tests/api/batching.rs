//! Deliveries of events without side effects that wait at the same moment
//! are recorded together, in one statement; each still gets its own answer.

use axum::http::StatusCode;
use serde_json::json;
use sqlx::PgConnection;
use webhook_inbox::event::Event;
use webhook_inbox::inbox::{
    Delivery, InboxError, Recorded, Routed, RoutingTable, Source, ToRecord, record, record_together,
};

use crate::support::watch::{Gate, until, waiting_on};
use crate::support::*;

/// A delivery of event `id` with a raw `payload`.
pub fn delivery(id: &str, payload: &str) -> Delivery {
    Delivery {
        provider: "paddle".into(),
        event: Event::new(id.into(), "transaction.updated".into()),
        payload: payload.to_string().try_into().unwrap(),
        source: Source::Webhook { signature: "ts=1;h1=00".into(), secret_index: 0 },
        request_id: None,
        traceparent: None,
    }
}

/// `delivery` on the recording lane (its type has no side effects).
pub fn to_record(delivery: Delivery) -> ToRecord {
    match RoutingTable::default().route(delivery) {
        Routed::Record(delivery) => delivery,
        Routed::Apply(_) => unreachable!("no effects"),
    }
}

/// Records `deliveries` together, as one of `app`'s recorders does.
async fn together(
    app: &TestApp,
    conn: &mut PgConnection,
    deliveries: &[ToRecord],
) -> Vec<Result<Recorded, InboxError>> {
    let fallbacks = app.state.metrics.batch_fallbacks();
    record_together(conn, &deliveries.iter().collect::<Vec<_>>(), &fallbacks).await
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
    ]
    .map(|mut delivery| {
        delivery.request_id = Some(format!("req-{}", delivery.event.id));
        to_record(delivery)
    });

    let logs = Logs::default();
    let results = {
        let _logging = tracing::subscriber::set_default(logs.subscriber());
        together(&app, &mut conn, &deliveries).await
    };

    assert!(matches!(results[0], Ok(Recorded::Processed { .. })), "{results:?}");
    assert!(matches!(results[1], Err(InboxError::UnstorablePayload)), "{results:?}");
    assert!(matches!(results[2], Ok(Recorded::Processed { .. })), "{results:?}");
    assert!(matches!(results[3], Ok(Recorded::Duplicate { .. })), "{results:?}");
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 2);
    assert_eq!(app.archive_statuses().await.iter().filter(|s| *s == "PROCESSED").count(), 2);
    assert_eq!(app.archive_statuses().await.iter().filter(|s| *s == "SKIPPED").count(), 1);
    // The batch failed on the refused payload; the fallback is counted, and
    // logged with its cause and the batch's request ids.
    assert!(app.metrics().await.contains("webhook_batch_fallbacks_total 1"), "{}", app.metrics().await);
    let logs = logs.text();
    let fallback = logs
        .lines()
        .find(|line| line.contains("recording a batch failed"))
        .unwrap_or_else(|| panic!("{logs}"));
    assert!(fallback.contains("WARN") && fallback.contains("error="), "{fallback}");
    for request_id in ["req-evt_a", "req-evt_b", "req-evt_c"] {
        assert!(fallback.contains(request_id), "{request_id} missing: {fallback}");
    }
}

/// Log lines written while a test holds [`Logs::subscriber`] as its thread's default.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// A subscriber that writes every line at info and above, as text, here.
    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        let logs = self.clone();
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || logs.clone())
            .finish()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn a_batch_of_new_and_known_events_records_each_with_its_own_outcome() {
    let app = TestApp::spawn().await;
    let mut conn = app.pool().acquire().await.unwrap();
    let payload = r#"{"event_id": "x"}"#;
    let known = [delivery("evt_1", payload), delivery("evt_2", payload)].map(to_record);
    let first = together(&app, &mut conn, &known).await;
    assert!(first.iter().all(|r| matches!(r, Ok(Recorded::Processed { .. }))), "{first:?}");

    let mixed =
        [delivery("evt_2", payload), delivery("evt_3", payload), delivery("evt_1", payload)].map(to_record);
    let second = together(&app, &mut conn, &mixed).await;

    assert!(matches!(second[0], Ok(Recorded::Duplicate { .. })), "{second:?}");
    assert!(matches!(second[1], Ok(Recorded::Processed { .. })), "{second:?}");
    assert!(matches!(second[2], Ok(Recorded::Duplicate { .. })), "{second:?}");
    // Each answer names its own archive row.
    let ids: Vec<i64> = second
        .iter()
        .map(|r| match r {
            Ok(Recorded::Processed { archive_id } | Recorded::Duplicate { archive_id }) => *archive_id,
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
async fn many_deliveries_without_side_effects_at_once_are_each_answered_and_recorded_together() {
    let app = TestApp::spawn().await;
    // A recorder is held at a gate inside its first statement while the
    // other deliveries arrive, so those wait for a recorder together.
    let gate = Gate::shut(app.pool(), "processed_webhook_events", 1).await;
    let started = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let (router, started) = (app.router.clone(), started.clone());
            // 20 events, each delivered 3 times.
            let body = json!({ "event_id": format!("evt_{}", i % 20), "event_type": "customer.updated", "data": {} });
            tokio::spawn(async move {
                started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                crate::support::app::send(&router, &paddle(&body)).await
            })
        })
        .collect();
    until("every delivery sent and a recorder held at the gate", async || {
        started.load(std::sync::atomic::Ordering::SeqCst) == 60
            && waiting_on(app.pool(), "advisory").await >= 1
    })
    .await;
    gate.open().await;

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
    // Recorded together: the 60 archive rows were written by fewer
    // transactions (xmin is the id of the transaction that wrote a row).
    let transactions = app.count("SELECT count(DISTINCT xmin::text) FROM webhook_events").await;
    assert!(transactions < 60, "{transactions} transactions for 60 deliveries");
}

#[tokio::test]
async fn a_batched_delivery_is_archived_with_the_same_columns_as_one_recorded_alone() {
    let app = TestApp::spawn().await;
    let mut conn = app.pool().acquire().await.unwrap();
    let payload = r#"{"event_id": "x", "data": {"a": 1}}"#;
    let filled = |id: &'static str| {
        to_record(Delivery {
            event: Event {
                occurred_at: Some("2024-04-12T10:18:49Z".parse().unwrap()),
                notification_id: Some("ntf_1".into()),
                ..delivery(id, payload).event
            },
            request_id: Some("req-1".into()),
            source: Source::Reprocess { of: 42, signature: Some("ts=1;h1=00".into()), secret_index: Some(1) },
            ..delivery(id, payload)
        })
    };
    record(&mut conn, &filled("evt_alone")).await.unwrap();
    together(&app, &mut conn, &[filled("evt_batched"), to_record(delivery("evt_other", payload))]).await;

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
