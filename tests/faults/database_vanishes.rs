//! The database host vanishes silently under load: PostgreSQL runs in its
//! own network namespace, reached over a veth pair, and a third of the way
//! into the load every packet between them is dropped (no FIN, no RST) for
//! longer than the keepalive bound, then let through again. No request
//! waits longer than the bound docs/database.md gives, every answer is a
//! 2xx for a durable commit or a 503 with Retry-After, `/readyz` says so,
//! and the same process recovers by itself: every event the provider
//! redelivers is applied exactly once.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::PgPoolOptions;

use crate::support::netns::Namespace;
use crate::support::provider::assert_2xx_or_503_with_retry_after;
use crate::support::remote_postgres::RemotePostgres;
use crate::support::socket;
use crate::support::watch::until;
use crate::support::*;

/// The keepalive settings the service is given: short, so the test is.
const IDLE_SECS: u64 = 2;
const INTERVAL_SECS: u64 = 1;
const COUNT: u64 = 3;
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(1000);
/// docs/database.md's bound for a silent host: the keepalive bound (idle +
/// interval × count), plus twice the acquire timeout.
const DOCUMENTED_BOUND: Duration = Duration::from_secs(IDLE_SECS + INTERVAL_SECS * COUNT)
    .saturating_add(ACQUIRE_TIMEOUT)
    .saturating_add(ACQUIRE_TIMEOUT);
/// How long the packets are dropped: past the keepalive bound.
const CUT: Duration = Duration::from_secs(IDLE_SECS + INTERVAL_SECS * COUNT + 3);
/// How soon after the heal the service must answer 2xx and be ready again.
const RECOVERY: Duration = Duration::from_secs(3);
/// What scheduling on a loaded machine may add to a bound.
const SLACK: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_host_that_vanishes_silently_costs_503s_within_the_bound_and_nothing_acknowledged() {
    let namespace = Namespace::create();
    let postgres = RemotePostgres::start(&namespace).await;
    let service = Service::start(
        &postgres.url(),
        &[
            ("DB_KEEPALIVE_IDLE_SECS", &IDLE_SECS.to_string()),
            ("DB_KEEPALIVE_INTERVAL_SECS", &INTERVAL_SECS.to_string()),
            ("DB_KEEPALIVE_COUNT", &COUNT.to_string()),
            ("DB_ACQUIRE_TIMEOUT_MS", &ACQUIRE_TIMEOUT.as_millis().to_string()),
            // Transactions the vanished connections left open end soon after the heal.
            ("STATEMENT_TIMEOUT_MS", "2000"),
        ],
    )
    .await;
    let addr = service.addr;
    let events = Event::mixed("vanish", 240);
    let provider = Arc::new(Provider::default());
    let readiness = Readiness::watch(addr);

    // The provider delivers every event until it gets a 2xx, 4 at a time.
    let (load, attempts) = provider.load(addr, &events, 4, Duration::from_millis(100));

    until("a third of the events delivered", async || attempts.lock().unwrap().len() >= events.len() / 3)
        .await;
    namespace.cut();
    let cut_at = Instant::now();
    tokio::time::sleep(CUT).await;
    namespace.heal();
    let healed_at = Instant::now();
    load.await.unwrap();
    // Readiness is watched past the recovery bound, whenever the load ended.
    tokio::time::sleep_until((healed_at + RECOVERY + Duration::from_secs(1)).into()).await;
    let readiness = readiness.stop().await;

    let attempts = attempts.lock().unwrap().clone();
    // Every request was answered: 2xx, or 503 with Retry-After.
    assert_2xx_or_503_with_retry_after(&attempts);
    // None waited longer than the documented bound.
    let slowest = attempts.iter().map(|a| a.finished - a.started).max().unwrap();
    assert!(
        slowest <= DOCUMENTED_BOUND + SLACK,
        "a request waited {slowest:?}, the bound is {DOCUMENTED_BOUND:?}"
    );
    // Nothing succeeded while the host was gone.
    let refused = attempts.iter().filter(|a| a.started >= cut_at && a.finished <= healed_at).count();
    assert!(refused >= 4, "only {refused} requests made and answered during the cut");
    assert!(
        attempts.iter().all(|a| !(a.succeeded() && a.started >= cut_at && a.finished <= healed_at)),
        "a 2xx while the host was gone"
    );
    // Recovered by itself, soon after the heal.
    let first_2xx =
        attempts.iter().filter(|a| a.succeeded() && a.finished > healed_at).map(|a| a.finished).min();
    let recovered_in = first_2xx.expect("a 2xx after the heal") - healed_at;
    assert!(recovered_in <= RECOVERY, "the first 2xx came {recovered_in:?} after the heal");
    // /readyz: ready before, not ready within its timeout of the cut, ready
    // again within the recovery bound of the heal and from then on.
    assert!(readiness.all_answered(), "/readyz left a request unanswered");
    let unready_after = readiness.first(|ok| !ok, cut_at).expect("/readyz said 503 during the cut") - cut_at;
    assert!(unready_after <= Duration::from_secs(2) + SLACK, "/readyz noticed after {unready_after:?}");
    let ready_again = readiness.first(|ok| ok, healed_at).expect("/readyz ready after the heal") - healed_at;
    assert!(ready_again <= RECOVERY, "/readyz ready {ready_again:?} after the heal");
    assert!(
        readiness.all_after(healed_at + RECOVERY),
        "/readyz unready after recovering: {:?}",
        readiness
            .0
            .iter()
            .map(|(at, status)| (at.duration_since(cut_at).as_millis(), *status))
            .collect::<Vec<_>>()
    );

    let pool = PgPoolOptions::new().connect_with(postgres.connect_options()).await.unwrap();
    let ledger = Ledger::count(&pool, &events).await;
    let statuses = attempts.iter().fold(std::collections::BTreeMap::<u16, usize>::new(), |mut counts, a| {
        *counts.entry(a.answer.as_ref().unwrap().status).or_default() += 1;
        counts
    });
    Report {
        fault: "database host vanishes silently",
        events: events.len(),
        deliveries: provider.sent(),
        ledger: Some(&ledger),
        notes: format!(
            "PostgreSQL in a network namespace over a veth pair; every packet dropped for {CUT:?} a third of the \
             way in (keepalive {IDLE_SECS} s + {INTERVAL_SECS} s × {COUNT}, acquire timeout {ACQUIRE_TIMEOUT:?}: \
             bound {DOCUMENTED_BOUND:?}); slowest request {:.2} s; answers {statuses:?}, all 503s with \
             Retry-After; /readyz 503 {:.2} s after the cut, 200 {:.2} s after the heal; first 2xx {:.2} s after \
             the heal, same process",
            slowest.as_secs_f64(),
            unready_after.as_secs_f64(),
            ready_again.as_secs_f64(),
            recovered_in.as_secs_f64(),
        ),
    }
    .print();
    // The measured bound, which `scripts/reliability` writes into docs/database.md.
    println!(
        "VANISHED\tkeepalive {IDLE_SECS} s + {INTERVAL_SECS} s × {COUNT} and DB_ACQUIRE_TIMEOUT_MS={}\t{}\t{:.1}\t{:.1}",
        ACQUIRE_TIMEOUT.as_millis(),
        DOCUMENTED_BOUND.as_secs_f64(),
        slowest.as_secs_f64(),
        recovered_in.as_secs_f64()
    );
    ledger.assert_exactly_once();
    drop(service);
}

/// `/readyz`, asked every 100 ms (each answer awaited) until stopped.
struct Readiness {
    answers: Arc<Mutex<Vec<Answer>>>,
    poller: tokio::task::JoinHandle<()>,
}

impl Readiness {
    fn watch(addr: SocketAddr) -> Readiness {
        let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
        let seen = answers.clone();
        let poller = tokio::spawn(async move {
            loop {
                let answer = socket::send_raw(
                    addr,
                    b"GET /readyz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
                )
                .await;
                seen.lock().unwrap().push((Instant::now(), answer.ok().map(|answer| answer.status)));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Readiness { answers, poller }
    }

    /// Stops asking; the answers so far.
    async fn stop(self) -> Answers {
        self.poller.abort();
        let _ = self.poller.await;
        Answers(self.answers.lock().unwrap().clone())
    }
}

/// When `/readyz` answered, and with what (`None`: no answer).
type Answer = (Instant, Option<u16>);

/// Every answer of `/readyz`.
struct Answers(Vec<Answer>);

impl Answers {
    /// Whether every request got an answer.
    fn all_answered(&self) -> bool {
        self.0.iter().all(|(_, status)| status.is_some())
    }

    /// When the first answer after `from` that `matches` came.
    fn first(&self, matches: impl Fn(bool) -> bool, from: Instant) -> Option<Instant> {
        self.0.iter().find(|(at, status)| *at >= from && matches(*status == Some(200))).map(|(at, _)| *at)
    }

    /// Whether every answer after `from` was 200 (and there was one).
    fn all_after(&self, from: Instant) -> bool {
        let after: Vec<_> = self.0.iter().filter(|(at, _)| *at >= from).collect();
        !after.is_empty() && after.iter().all(|(_, status)| *status == Some(200))
    }
}
