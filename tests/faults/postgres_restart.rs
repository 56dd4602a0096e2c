//! PostgreSQL restarts while deliveries flow: nothing is acknowledged while
//! it is down, the service recovers by itself, and every event the provider
//! redelivers is applied exactly once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::PgPoolOptions;

use crate::support::provider::Attempt;
use crate::support::watch::until;
use crate::support::*;

/// How long PostgreSQL stays down.
const DOWN: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_postgresql_is_down_every_answer_is_503_and_after_it_returns_each_event_is_applied_once() {
    let mut cluster = Cluster::start().await;
    let mut service = Service::start(&cluster.url(), &[("DB_ACQUIRE_TIMEOUT_MS", "500")]).await;
    let addr = service.addr;
    let events = Event::mixed("pgdown", 160);
    let provider = Arc::new(Provider::default());
    // The provider delivers every event until it gets a 2xx, 4 at a time.
    let (load, attempts) = provider.load(addr, &events, 4, Duration::from_millis(25));

    // PostgreSQL goes away a third of the way in, for a while.
    until("a third of the events delivered", async || attempts.lock().unwrap().len() >= events.len() / 3)
        .await;
    cluster.stop().await;
    let down_from = Instant::now();
    tokio::time::sleep(DOWN).await;
    let down_until = Instant::now();
    cluster.restart().await;
    load.await.unwrap();

    // Requests made and answered entirely while it was down: never a 2xx,
    // always 503 with Retry-After.
    let attempts = attempts.lock().unwrap().clone();
    let while_down: Vec<&Attempt> =
        attempts.iter().filter(|a| a.started >= down_from && a.finished <= down_until).collect();
    assert!(while_down.len() >= 10, "only {} requests while down", while_down.len());
    for attempt in &while_down {
        let answer = attempt.answer.as_ref().expect("answered while PostgreSQL was down");
        assert_eq!(answer.status, 503, "{answer:?}");
        assert_eq!(answer.header("retry-after"), Some("5"));
    }
    assert!(service.is_running(), "recovered without a restart");

    let pool = PgPoolOptions::new().connect_with(cluster.connect_options()).await.unwrap();
    let ledger = Ledger::count(&pool, &events).await;
    let mut refusals = std::collections::BTreeMap::<String, usize>::new();
    for attempt in attempts.iter().filter(|a| !a.succeeded()) {
        let status = attempt.answer.as_ref().map_or("no answer".into(), |a| a.status.to_string());
        *refusals.entry(status).or_default() += 1;
    }
    Report {
        fault: "PostgreSQL restart",
        events: events.len(),
        deliveries: provider.sent(),
        ledger: Some(&ledger),
        notes: format!(
            "fast shutdown of PostgreSQL a third of the way in, down {DOWN:?}: {} requests made while it was down, \
             all 503 + Retry-After, no 2xx; all non-2xx answers: {refusals:?}; the same service process \
             recovered by itself",
            while_down.len(),
        ),
    }
    .print();
    ledger.assert_exactly_once();
}
