//! SIGTERM mid-delivery: the listener closes at once, the deliveries in
//! flight finish and are answered, and the drain is bounded.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::net::TcpStream;

use crate::support::provider::{attempt, spawn_attempt};
use crate::support::service::database_url;
use crate::support::watch::{Gate, until_no_service_session, until_waiting_on};
use crate::support::*;

/// Polls until connecting to `service` is refused; returns how long that took.
async fn until_refused(service: &Service) -> Duration {
    let start = Instant::now();
    while TcpStream::connect(service.addr).await.is_ok() {
        assert!(start.elapsed() < Duration::from_secs(5), "still accepting connections");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_the_deliveries_in_flight_refuses_new_connections_and_exits() {
    let db = TestDatabase::create().await;
    let mut service =
        Service::start(&database_url(&db.connect_options()), &[("LOCK_TIMEOUT_MS", "30000")]).await;
    let event = Event::mixed("term", 1).remove(0);

    // In flight: the first delivery inside its effect (held at the gate),
    // and a duplicate waiting behind its dedup row.
    let gate = Gate::shut(db.pool(), "credit_grants", 1).await;
    let first = spawn_attempt(service.addr, &event.delivery);
    until_waiting_on(db.pool(), "advisory", 1).await;
    let duplicate = spawn_attempt(service.addr, &event.delivery);
    until_waiting_on(db.pool(), "transactionid", 1).await;

    service.terminate();
    let refused_after = until_refused(&service).await;
    let released = Instant::now();
    gate.open().await;

    let first = first.await.unwrap().answer.expect("the first delivery is answered");
    let duplicate = duplicate.await.unwrap().answer.expect("the duplicate is answered");
    assert_eq!((first.status, first.body), (200, json!({ "event_id": event.id, "status": "processed" })));
    assert_eq!(
        (duplicate.status, duplicate.body),
        (200, json!({ "event_id": event.id, "idempotent": true }))
    );
    let status = service.exited_within(Duration::from_secs(10)).await.expect("exits once drained");
    let drained_in = released.elapsed();
    assert!(status.success(), "{status}");

    let ledger = Ledger::count(db.pool(), std::slice::from_ref(&event)).await;
    Report {
        fault: "SIGTERM mid-delivery",
        events: ledger.events,
        deliveries: 2,
        ledger: Some(&ledger),
        notes: format!(
            "a first delivery in its handler and a duplicate waiting behind it: both answered 200 after SIGTERM; \
             new connections refused {}ms after SIGTERM; exited {}ms after the handler was released, status 0",
            refused_after.as_millis(),
            drained_in.as_millis()
        ),
    }
    .print();
    ledger.assert_exactly_once();
    assert_eq!(ledger.skipped, 1);
}

const GRACE_SECS: &str = "1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_stuck_past_the_grace_period_is_abandoned_unanswered_and_the_retry_finds_it_once() {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    let mut service = Service::start(&url, &[("SHUTDOWN_GRACE_SECS", GRACE_SECS)]).await;
    let event = Event::mixed("grace", 1).remove(0);

    let gate = Gate::shut(db.pool(), "credit_grants", 2).await;
    let stuck = spawn_attempt(service.addr, &event.delivery);
    until_waiting_on(db.pool(), "advisory", 1).await;

    let terminated = Instant::now();
    service.terminate();
    let status = service.exited_within(Duration::from_secs(10)).await.expect("exits after the grace period");
    let exited_after = terminated.elapsed();
    assert!(
        exited_after < Duration::from_secs(3),
        "exited {exited_after:?} after SIGTERM, grace {GRACE_SECS} s"
    );
    assert!(!status.success(), "a delivery was abandoned, yet the exit status is {status}");
    let stuck = stuck.await.unwrap();
    assert!(!stuck.succeeded(), "never a 2xx for what did not commit: {:?}", stuck.answer);

    // Its one statement was sent whole before the exit: once past the gate
    // it commits, with nobody left to hear it. Never answered 2xx, it is
    // applied once, and the provider's retry is told it is a duplicate.
    gate.open().await;
    until_no_service_session(db.pool()).await;
    assert_eq!(Ledger::committed(db.pool(), [&event]).await, std::slice::from_ref(&event.id));

    let restarted = Service::start(&url, &[]).await;
    let retry = attempt(restarted.addr, &event.delivery).await.answer.unwrap();
    assert_eq!(retry.body, json!({ "event_id": event.id, "idempotent": true }));
    let ledger = Ledger::count(db.pool(), std::slice::from_ref(&event)).await;
    Report {
        fault: "SIGTERM with a delivery stuck past the grace period",
        events: ledger.events,
        deliveries: 2,
        ledger: Some(&ledger),
        notes: format!(
            "SHUTDOWN_GRACE_SECS={GRACE_SECS}, handler held indefinitely: exited {}ms after SIGTERM (exit code {}), \
             no 2xx; its statement committed once the handler was released, and the provider's retry was \
             answered as a duplicate",
            exited_after.as_millis(),
            status.code().map_or("none (signal)".into(), |code| code.to_string())
        ),
    }
    .print();
    ledger.assert_exactly_once();
}
