//! PostgreSQL crashes under load, `fsync` on as in production: an
//! immediate shutdown (what `pg_ctl stop -m immediate` sends, SIGQUIT) and
//! a SIGKILL of the postmaster, each with deliveries in flight. Every
//! answer is a 2xx for a durable commit or a 503 with Retry-After; after
//! crash recovery the same service process serves again by itself, and
//! every event is applied exactly once: nothing acknowledged lost in the
//! crash, nothing doubled by the provider's retries.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::PgPoolOptions;

use crate::support::provider::assert_2xx_or_503_with_retry_after;
use crate::support::watch::until;
use crate::support::*;

/// How soon after PostgreSQL accepts connections again the service must answer 2xx.
const RECOVERY: Duration = Duration::from_secs(3);

/// How PostgreSQL dies.
#[derive(Debug, Clone, Copy)]
enum Crash {
    /// SIGQUIT to the postmaster: every server process exits at once.
    Immediate,
    /// SIGKILL to the postmaster; its backends exit when they notice.
    KilledPostmaster,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_shut_down_immediately_under_load_loses_nothing_acknowledged_and_doubles_nothing() {
    crash_under_load(Crash::Immediate, "pgcrash_quit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_whose_postmaster_is_killed_under_load_loses_nothing_acknowledged_and_doubles_nothing() {
    crash_under_load(Crash::KilledPostmaster, "pgcrash_kill").await;
}

async fn crash_under_load(crash: Crash, run: &str) {
    let mut cluster = Cluster::start_durable().await;
    let mut service = Service::start(&cluster.url(), &[("DB_ACQUIRE_TIMEOUT_MS", "500")]).await;
    let addr = service.addr;
    let events = Event::mixed(run, 240);
    let provider = Arc::new(Provider::default());
    // The provider delivers every event until it gets a 2xx, 6 at a time.
    let (load, attempts) = provider.load(addr, &events, 6, Duration::from_millis(50));

    until("a third of the events delivered", async || attempts.lock().unwrap().len() >= events.len() / 3)
        .await;
    let crashed_at = Instant::now();
    match crash {
        Crash::Immediate => cluster.stop_immediately().await,
        Crash::KilledPostmaster => cluster.kill_postmaster().await,
    }
    cluster.restart().await;
    let back_at = Instant::now();
    load.await.unwrap();

    let attempts = attempts.lock().unwrap().clone();
    assert_2xx_or_503_with_retry_after(&attempts);
    let in_flight = attempts.iter().filter(|a| a.started < crashed_at && a.finished > crashed_at).count();
    let first_2xx =
        attempts.iter().filter(|a| a.succeeded() && a.started > back_at).map(|a| a.finished).min();
    let recovered_in = first_2xx.expect("a 2xx after the restart") - back_at;
    assert!(recovered_in <= RECOVERY, "the first 2xx came {recovered_in:?} after PostgreSQL was back");
    assert!(service.is_running(), "recovered without a restart");

    let pool = PgPoolOptions::new().connect_with(cluster.connect_options()).await.unwrap();
    let ledger = Ledger::count(&pool, &events).await;
    let statuses = attempts.iter().fold(BTreeMap::<u16, usize>::new(), |mut counts, a| {
        *counts.entry(a.answer.as_ref().unwrap().status).or_default() += 1;
        counts
    });
    let (fault, how) = match crash {
        Crash::Immediate => {
            ("PostgreSQL crash: immediate shutdown", "SIGQUIT to the postmaster (pg_ctl stop -m immediate)")
        }
        Crash::KilledPostmaster => ("PostgreSQL crash: postmaster SIGKILLed", "SIGKILL to the postmaster"),
    };
    Report {
        fault,
        events: events.len(),
        deliveries: provider.sent(),
        ledger: Some(&ledger),
        notes: format!(
            "fsync on; {how} a third of the way in, {in_flight} requests in flight, crash recovery on restart \
             ({:.1} s down); answers {statuses:?}, every non-2xx a 503 with Retry-After; first 2xx {:.2} s after \
             PostgreSQL was back, the same service process",
            (back_at - crashed_at).as_secs_f64(),
            recovered_in.as_secs_f64(),
        ),
    }
    .print();
    ledger.assert_exactly_once();
}
