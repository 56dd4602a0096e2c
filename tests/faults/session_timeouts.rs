//! PostgreSQL ends sessions by its own timeouts, over TCP (where the
//! service reads the server's last word, a FATAL error, before the closed
//! socket): a worker's connection so ended is a lost connection, replaced,
//! never a 500; and a failed delivery never leaves its connection in a
//! transaction for `idle_in_transaction_session_timeout` to end.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

use crate::support::provider::{self, in_parallel};
use crate::support::watch::{until, until_no_service_session};
use crate::support::*;

/// Issue 11's sequence, on the real binary over TCP: the smallest pool (one
/// worker for deliveries with side effects), a short statement timeout (so
/// `idle_in_transaction_session_timeout`, twice it, is 400 ms), a delivery
/// that fails in its transaction (503: a first attempt holds the dedup row
/// past `lock_timeout`), then the worker idles past that timeout. Before
/// the fix the next three deliveries answered 500, 503, 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failed_delivery_and_an_idle_in_transaction_timeout_the_next_deliveries_answer_200() {
    let cluster = Cluster::start().await;
    let env = [("DB_MAX_CONNECTIONS", "6"), ("STATEMENT_TIMEOUT_MS", "200"), ("LOCK_TIMEOUT_MS", "100")];
    let service = Service::start(&cluster.url_over_tcp().await, &env).await;

    let mut holder = PgConnection::connect_with(&cluster.connect_options()).await.unwrap();
    sqlx::raw_sql(
        "BEGIN; INSERT INTO processed_webhook_events (provider, event_id, event_type) VALUES ('paddle', 'evt_held', 'x')",
    )
    .execute(&mut holder)
    .await
    .unwrap();
    let held = paddle(&subscription_created("evt_held", "sub_held"));
    let answer = provider::attempt(service.addr, &held).await.answer.expect("an answer");
    assert_eq!(answer.status, 503, "{answer:?}");
    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();

    // Not ordering anything: three times idle_in_transaction_session_timeout,
    // for PostgreSQL to end a session left in a transaction.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut statuses = Vec::new();
    for n in 0..3 {
        let id = format!("evt_after_{n}");
        let answer =
            provider::attempt(service.addr, &paddle(&subscription_created(&id, &format!("sub_{n}"))))
                .await
                .answer
                .expect("an answer");
        statuses.push(answer.status);
    }
    Report {
        fault: "failed delivery, then idle_in_transaction_session_timeout (over TCP)",
        events: 4,
        deliveries: 4,
        ledger: None,
        notes: format!(
            "DB_MAX_CONNECTIONS=6, STATEMENT_TIMEOUT_MS=200: a delivery answered {} (its dedup row held past \
             LOCK_TIMEOUT_MS=100), its worker then idle 1.2 s; the next three answered {statuses:?}",
            answer.status
        ),
    }
    .print();
    assert_eq!(statuses, [200, 200, 200]);
}

/// `idle_session_timeout` (set by a DBA, say) ends every session idle for
/// 300 ms, the service's kept connections included: each delivery after
/// that is still answered 2xx at its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_ended_by_idle_session_timeout_cost_no_delivery_its_2xx() {
    let cluster = Cluster::start().await;
    let admin = connect(&cluster).await;
    sqlx::raw_sql("ALTER DATABASE postgres SET idle_session_timeout = '300ms'")
        .execute(&admin)
        .await
        .unwrap();
    let service = Service::start(&cluster.url_over_tcp().await, &[]).await;
    let pool = connect(&cluster).await;

    // The first round gives the workers their connections; the second
    // meets them ended.
    let mut all = Vec::new();
    let answers = Arc::new(Mutex::new(BTreeMap::<u16, usize>::new()));
    for round in 0..2 {
        // Every session of the service (its workers' kept connections
        // included) ended by the timeout.
        until_no_service_session(&pool).await;
        let events = Event::mixed(&format!("idle_timeout_{round}"), 24);
        let (addr, answers) = (service.addr, answers.clone());
        in_parallel(events.clone(), 8, move |_, event: Event| {
            let answers = answers.clone();
            async move {
                let attempt = provider::attempt(addr, &event.delivery).await;
                let status = attempt.answer.map_or(0, |answer| answer.status);
                *answers.lock().unwrap().entry(status).or_default() += 1;
            }
        })
        .await;
        all.extend(events);
    }
    let ledger = Ledger::count(&pool, &all).await;
    let answers = answers.lock().unwrap().clone();
    Report {
        fault: "idle_session_timeout ends the kept connections (over TCP)",
        events: all.len(),
        deliveries: answers.values().sum(),
        ledger: Some(&ledger),
        notes: format!(
            "idle_session_timeout=300ms on the database; twice, once every session of the service had been \
             ended by it, 24 deliveries, 8 at a time, each sent once: answers by status {answers:?}"
        ),
    }
    .print();
    assert_eq!(answers.keys().collect::<Vec<_>>(), [&200], "{answers:?}");
    ledger.assert_exactly_once();
}

/// A pool of the test's own on the cluster, which tests each connection
/// before use (the timeout ends the test's idle sessions too).
async fn connect(cluster: &Cluster) -> PgPool {
    let pool = PgPoolOptions::new().max_connections(2).connect_with(cluster.connect_options()).await.unwrap();
    until("the cluster to answer", async || sqlx::query("SELECT 1").execute(&pool).await.is_ok()).await;
    pool
}
