//! A slow first attempt: duplicates that arrive meanwhile wait behind its
//! dedup row only up to LOCK_TIMEOUT_MS, then answer 503 with Retry-After;
//! none of them ever applies the event a second time.

use serde_json::json;

use crate::support::provider::{attempt, spawn_attempt};
use crate::support::service::database_url;
use crate::support::watch::{Gate, until_waiting_on};
use crate::support::*;

const LOCK_TIMEOUT_MS: &str = "300";
/// Duplicates sent while the first attempt is held.
const DUPLICATES: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_waiting_behind_a_slow_first_attempt_answer_503_past_the_lock_timeout_and_apply_nothing() {
    let db = TestDatabase::create().await;
    let service =
        Service::start(&database_url(&db.connect_options()), &[("LOCK_TIMEOUT_MS", LOCK_TIMEOUT_MS)]).await;
    let event = Event::mixed("slow", 1).remove(0);

    // The first attempt stays in its effect until the gate opens.
    let gate = Gate::shut(db.pool(), "credit_grants", 4).await;
    let first = spawn_attempt(service.addr, &event.delivery);
    until_waiting_on(db.pool(), "advisory", 1).await;

    let duplicates: Vec<_> = (0..DUPLICATES).map(|_| spawn_attempt(service.addr, &event.delivery)).collect();
    let mut waited = Vec::new();
    for duplicate in duplicates {
        let duplicate = duplicate.await.unwrap();
        let answer = duplicate.answer.as_ref().unwrap();
        assert_eq!(answer.status, 503, "{answer:?}");
        assert_eq!(answer.header("retry-after"), Some("5"));
        assert_eq!(
            answer.body,
            json!({ "error": "a concurrent delivery of the same event is still in progress" })
        );
        waited.push((duplicate.finished - duplicate.started).as_millis());
    }
    assert!(!first.is_finished(), "the duplicates were answered while the first attempt was still running");

    gate.open().await;
    let first = first.await.unwrap().answer.unwrap();
    assert_eq!((first.status, first.body), (200, json!({ "event_id": event.id, "status": "processed" })));
    // The provider retries the duplicates later: each is told it is one.
    for _ in 0..DUPLICATES {
        let retry = attempt(service.addr, &event.delivery).await.answer.unwrap();
        assert_eq!((retry.status, retry.body), (200, json!({ "event_id": event.id, "idempotent": true })));
    }

    let ledger = Ledger::count(db.pool(), std::slice::from_ref(&event)).await;
    Report {
        fault: "slow handler, duplicates waiting past LOCK_TIMEOUT_MS",
        events: ledger.events,
        // The first attempt, the duplicates and their retries.
        deliveries: 1 + 2 * DUPLICATES,
        ledger: Some(&ledger),
        notes: format!(
            "first attempt held in its handler; {DUPLICATES} concurrent duplicates answered 503 + Retry-After \
             after {waited:?} ms (LOCK_TIMEOUT_MS={LOCK_TIMEOUT_MS}) while it ran; it then committed (200), and \
             the {DUPLICATES} retries answered idempotent"
        ),
    }
    .print();
    ledger.assert_exactly_once();
    assert_eq!(ledger.skipped, DUPLICATES as i64);
}
