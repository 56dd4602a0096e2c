//! The disk fills under load: PostgreSQL's data directory (WAL included)
//! is on a small tmpfs, and a third of the way into the load a file takes
//! every byte left. While it is full, deliveries are answered 503 with
//! Retry-After (never 500, never a 2xx that is not durable) and no event is
//! archived FAILED for the disk's fault; once the file is deleted the same
//! service process serves again by itself, and every event the provider
//! redelivers is applied exactly once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::PgPoolOptions;

use crate::support::provider::{Attempt, assert_2xx_or_503_with_retry_after, in_parallel};
use crate::support::tmpfs::Tmpfs;
use crate::support::watch::until;
use crate::support::*;

/// The disk: the cluster takes about 60 MB of it.
const DISK_MB: u64 = 160;
/// How long the disk stays full, at least.
const FULL: Duration = Duration::from_secs(3);
/// Deliveries refused while the disk is full before the space is freed.
const REFUSALS: usize = 8;
/// How soon after the space is freed the service must answer 2xx.
const RECOVERY: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_costs_503s_writes_no_failed_rows_and_the_service_recovers_once_space_is_freed() {
    let disk = Tmpfs::mount(DISK_MB);
    let cluster = Cluster::start_in(disk.path()).await;
    let service = Service::start(&cluster.url(), &[("DB_ACQUIRE_TIMEOUT_MS", "500")]).await;
    let addr = service.addr;
    let events = Event::mixed("diskfull", 240);
    let provider = Arc::new(Provider::default());
    let attempts: Arc<Mutex<Vec<Attempt>>> = Arc::default();

    // The provider delivers every event until it gets a 2xx, 4 at a time;
    // each attempt is noted as it ends, so the test sees the refusals live.
    let load = tokio::spawn(in_parallel(events.clone(), 4, {
        let (provider, attempts) = (provider.clone(), attempts.clone());
        move |_, event: Event| {
            let (provider, attempts) = (provider.clone(), attempts.clone());
            async move {
                loop {
                    let attempt = provider.attempt(addr, &event.delivery).await;
                    let done = attempt.succeeded();
                    attempts.lock().unwrap().push(attempt);
                    if done {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }));

    until("a third of the events delivered", async || attempts.lock().unwrap().len() >= events.len() / 3)
        .await;
    let path = disk.path().to_path_buf();
    let filled = tokio::task::spawn_blocking(move || Tmpfs::fill_at(&path)).await.unwrap();
    let full_at = Instant::now();
    // Full until deliveries are refused for it (and at least FULL).
    tokio::time::sleep(FULL).await;
    until("deliveries refused while the disk is full", async || {
        let refused =
            attempts.lock().unwrap().iter().filter(|a| a.started >= full_at && !a.succeeded()).count();
        refused >= REFUSALS
    })
    .await;
    disk.free();
    let freed_at = Instant::now();
    load.await.unwrap();

    let attempts = attempts.lock().unwrap().clone();
    assert_2xx_or_503_with_retry_after(&attempts);
    let while_full = attempts.iter().filter(|a| a.started >= full_at && a.finished <= freed_at).count();
    let first_2xx =
        attempts.iter().filter(|a| a.succeeded() && a.finished > freed_at).map(|a| a.finished).min();
    let recovered_in = first_2xx.expect("a 2xx after the space was freed") - freed_at;
    assert!(recovered_in <= RECOVERY, "the first 2xx came {recovered_in:?} after the space was freed");

    let pool = PgPoolOptions::new().connect_with(cluster.connect_options()).await.unwrap();
    let failed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM webhook_events WHERE processing_status = 'FAILED'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(failed, 0, "events archived FAILED for the disk's fault");
    let ledger = Ledger::count(&pool, &events).await;
    let statuses = attempts.iter().fold(BTreeMap::<u16, usize>::new(), |mut counts, a| {
        *counts.entry(a.answer.as_ref().unwrap().status).or_default() += 1;
        counts
    });
    Report {
        fault: "disk full",
        events: events.len(),
        deliveries: provider.sent(),
        ledger: Some(&ledger),
        notes: format!(
            "PostgreSQL's data directory on a {DISK_MB} MB tmpfs, the last {} MB of it taken by a file a third of \
             the way in, for {:.1} s; {while_full} requests made while full; answers {statuses:?}, every non-2xx \
             a 503 with Retry-After; no FAILED row; first 2xx {:.2} s after the file was deleted, the same \
             process",
            filled / 1_000_000,
            (freed_at - full_at).as_secs_f64(),
            recovered_in.as_secs_f64(),
        ),
    }
    .print();
    ledger.assert_exactly_once();
}
