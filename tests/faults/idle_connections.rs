//! The database goes away and comes back while the service is idle (a
//! restart, fast or immediate, or every session ended by an operator), so
//! each delivery worker holds a connection the server has ended. The next
//! deliveries are all answered 2xx at their first attempt: a delivery whose
//! first statement finds its connection broken runs again on a fresh one,
//! and a connection that sat idle long is checked before it is used.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use webhook_inbox::inbox::RECORDERS;

use crate::support::provider::{self, Attempt, in_parallel};
use crate::support::watch::{
    Gate, install_gate, service_sessions, until, until_no_service_session, waiting_at_gate,
};
use crate::support::*;

/// The service's default pool (16) less its reserved connections (3): the
/// workers, each of which holds a connection once it has run a delivery.
const WORKERS: i64 = 13;

/// What the service logs when it runs deliveries again on a fresh connection.
const RETRIED: &str = "connection found broken: running again on a fresh one";

/// The advisory key of the warm-up gate.
const GATE: i64 = 17;

/// How the database goes away.
#[derive(Debug, Clone, Copy)]
enum Outage {
    /// `pg_ctl stop -m fast`: sessions are told and ended, then a checkpoint.
    FastRestart,
    /// `pg_ctl stop -m immediate`: every server process quits at once, as in a crash.
    ImmediateRestart,
    /// `pg_terminate_backend` on every session of the service.
    TerminatedSessions,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_fast_restart_while_idle_every_delivery_is_answered_2xx_at_its_first_attempt() {
    idle_outage(Outage::FastRestart, "PostgreSQL restart (fast) while idle").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_immediate_restart_while_idle_every_delivery_is_answered_2xx_at_its_first_attempt() {
    idle_outage(Outage::ImmediateRestart, "PostgreSQL restart (immediate) while idle").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_every_session_is_terminated_while_idle_every_delivery_is_answered_2xx_at_its_first_attempt() {
    idle_outage(Outage::TerminatedSessions, "pg_terminate_backend on every session while idle").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_idle_past_the_bound_is_checked_before_use_and_no_delivery_runs_on_it() {
    let mut cluster = Cluster::start().await;
    let service = Service::start(&cluster.url(), &[]).await;
    let pool = connect(&cluster).await;
    install_gate(&pool, "webhook_events", GATE).await;
    let events = Event::mixed("idle", 40);
    every_worker_holds_a_connection(&service, &pool, "idle_warm").await;
    let before = retried(&service);

    end(Outage::TerminatedSessions, &mut cluster, &pool).await;
    // Longer than the bound after which a worker checks its connection
    // (IDLE_CHECK_AFTER, 5 s): the check, not a failed delivery, finds
    // each connection ended.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let attempts = first_attempts(&service, &events).await;
    let refused: Vec<_> = attempts.iter().filter(|attempt| !attempt.succeeded()).collect();
    assert!(refused.is_empty(), "not 2xx at the first attempt: {refused:?}");
    assert_eq!(retried(&service), before, "a delivery ran on a connection the check should have replaced");
    Ledger::count(&pool, &events).await.assert_exactly_once();
}

impl Outage {
    /// For the report.
    fn describe(self) -> &'static str {
        match self {
            Outage::FastRestart => "a fast restart of PostgreSQL",
            Outage::ImmediateRestart => "an immediate restart of PostgreSQL (SIGQUIT, then crash recovery)",
            Outage::TerminatedSessions => "pg_terminate_backend on each of its sessions",
        }
    }
}

async fn idle_outage(outage: Outage, fault: &str) {
    let mut cluster = Cluster::start().await;
    let mut service = Service::start(&cluster.url(), &[]).await;
    let pool = connect(&cluster).await;
    install_gate(&pool, "webhook_events", GATE).await;
    let events = Event::mixed("outage", 40);
    every_worker_holds_a_connection(&service, &pool, "warm").await;

    end(outage, &mut cluster, &pool).await;
    // At once: well within the bound after which an idle connection is
    // checked, so each worker's first delivery meets its ended session.
    let attempts = first_attempts(&service, &events).await;
    let refused: Vec<_> = attempts.iter().filter(|attempt| !attempt.succeeded()).collect();
    assert!(service.is_running(), "recovered without a restart");
    let ledger = Ledger::count(&pool, &events).await;
    Report {
        fault,
        events: events.len(),
        deliveries: attempts.len(),
        ledger: Some(&ledger),
        notes: format!(
            "{WORKERS} workers each holding a connection, then {} with no request in flight; then \
             {} deliveries, 8 at a time, each sent once: {} answered 2xx at the first attempt; {} ran \
             again on a fresh connection after their first statement found theirs ended",
            outage.describe(),
            attempts.len(),
            attempts.len() - refused.len(),
            retried(&service),
        ),
    }
    .print();
    assert!(refused.is_empty(), "not 2xx at the first attempt: {refused:?}");
    ledger.assert_exactly_once();
}

/// A pool of the test's own on the cluster.
async fn connect(cluster: &Cluster) -> PgPool {
    PgPoolOptions::new().max_connections(2).connect_with(cluster.connect_options()).await.unwrap()
}

/// Makes every worker take a connection: deliveries of both lanes held at a
/// gate, sent one at a time, each once the one before waits there. Each
/// lane runs one worker at a time, and the next one only once the running
/// one has stalled (as at the gate), so each delivery is taken by a worker
/// of its own; then all are let through.
async fn every_worker_holds_a_connection(service: &Service, pool: &PgPool, run: &str) {
    let gate = Gate::close(pool, GATE).await;
    let events = Event::mixed(run, 2 * WORKERS as usize);
    let recorded = events.iter().filter(|event| !event.grants).take(RECORDERS as usize);
    let applied = events.iter().filter(|event| event.grants).take(WORKERS as usize - RECORDERS as usize);
    let mut sent = Vec::new();
    for (at_gate, event) in recorded.chain(applied).enumerate() {
        let (addr, delivery) = (service.addr, event.delivery.clone());
        sent.push(tokio::spawn(async move {
            let attempt = provider::attempt(addr, &delivery).await;
            assert!(attempt.succeeded(), "warm-up delivery: {:?}", attempt.answer);
        }));
        let expected = at_gate as i64 + 1;
        until("the delivery at the gate", async || waiting_at_gate(pool, GATE).await >= expected).await;
    }
    gate.open().await;
    for sent in sent {
        sent.await.unwrap();
    }
    assert!(service_sessions(pool).await.len() as i64 >= WORKERS);
}

/// Ends the service's sessions while it is idle, and returns once the
/// database takes connections again.
async fn end(outage: Outage, cluster: &mut Cluster, pool: &PgPool) {
    match outage {
        Outage::FastRestart => {
            cluster.stop().await;
            cluster.restart().await;
        }
        Outage::ImmediateRestart => {
            cluster.stop_immediately().await;
            cluster.restart().await;
        }
        Outage::TerminatedSessions => {
            sqlx::query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'webhook-inbox'",
            )
            .execute(pool)
            .await
            .unwrap();
            until_no_service_session(pool).await;
        }
    }
    until("the database to take connections", async || sqlx::query("SELECT 1").execute(pool).await.is_ok())
        .await;
}

/// Sends each event once, 8 at a time; the attempts in event order.
async fn first_attempts(service: &Service, events: &[Event]) -> Vec<Attempt> {
    let addr = service.addr;
    let attempts = Arc::new(std::sync::Mutex::new(vec![None; events.len()]));
    in_parallel(events.to_vec(), 8, {
        let attempts = attempts.clone();
        move |n, event: Event| {
            let attempts = attempts.clone();
            async move {
                let attempt = provider::attempt(addr, &event.delivery).await;
                attempts.lock().unwrap()[n] = Some(attempt);
            }
        }
    })
    .await;
    let attempts = attempts.lock().unwrap().clone();
    attempts.into_iter().map(|attempt| attempt.expect("sent")).collect()
}

/// How many deliveries the service ran again on a fresh connection so far.
fn retried(service: &Service) -> u64 {
    service
        .logs()
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|entry| entry["message"] == RETRIED)
        .map(|entry| entry["deliveries"].as_u64().unwrap_or(1))
        .sum()
}
