//! kill -9 under load: the service dies mid-transaction, mid-answer and
//! mid-read, and nothing acknowledged is lost, nothing is applied twice.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::support::provider::{in_parallel, shuffle};
use crate::support::service::database_url;
use crate::support::*;

/// What the clients of the load saw.
#[derive(Default)]
struct LoadRun {
    provider: Provider,
    /// Requests answered 2xx.
    answered: AtomicUsize,
    /// Events answered 2xx at least once.
    acked: Mutex<HashSet<usize>>,
    killed_at: OnceLock<Instant>,
    /// Requests in flight when the process died, which got no answer.
    cut_off: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_killed_under_load_loses_nothing_acknowledged_and_applies_each_event_once() {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    let mut service = Service::start(&url, &[]).await;
    let addr = service.addr;
    let events = Arc::new(Event::mixed("kill", 240));

    // Every event twice (the provider's replay), shuffled: some replays race
    // their first delivery, some come long after it.
    let mut load: Vec<usize> = (0..events.len()).chain(0..events.len()).collect();
    shuffle(&mut load, 0x5eed_0001);
    let requests = load.len();
    let run = Arc::new(LoadRun::default());
    let load = tokio::spawn({
        let (run, events) = (run.clone(), events.clone());
        in_parallel(load, 8, move |_, event| {
            let (run, events) = (run.clone(), events.clone());
            async move {
                let attempt = run.provider.attempt(addr, &events[event].delivery).await;
                if attempt.succeeded() {
                    run.acked.lock().unwrap().insert(event);
                    run.answered.fetch_add(1, Ordering::SeqCst);
                } else if run.killed_at.get().is_none_or(|killed| attempt.started < *killed) {
                    // In flight when the process died.
                    run.cut_off.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    });

    // SIGKILL once half the requests are answered, with the rest in flight.
    while run.answered.load(Ordering::SeqCst) < requests / 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    run.killed_at.set(Instant::now()).unwrap();
    service.kill();
    load.await.unwrap();
    watch::until_no_service_session(db.pool()).await;

    // Acknowledged means durable: every event answered 2xx before the kill
    // has its dedup row, its PROCESSED row and its effect.
    let acked: HashSet<usize> = run.acked.lock().unwrap().clone();
    let acked_events: Vec<Event> = acked.iter().map(|&i| events[i].clone()).collect();
    Ledger::count(db.pool(), &acked_events).await.assert_exactly_once();
    let committed: HashSet<String> = Ledger::committed(db.pool(), events.iter()).await.into_iter().collect();

    // Restarted, the provider redelivers every event until it gets a 2xx:
    // the ones committed before the kill (acknowledged or not) are answered
    // as duplicates, the others are applied now.
    let restarted = Service::start(&url, &[]).await;
    let redelivered = Arc::new(Mutex::new(Vec::new()));
    in_parallel(events.to_vec(), 8, {
        let (run, redelivered) = (run.clone(), redelivered.clone());
        move |_, event: Event| {
            let (run, redelivered) = (run.clone(), redelivered.clone());
            async move {
                let attempts = run
                    .provider
                    .until_2xx(&[restarted.addr], &event.delivery, Duration::from_millis(20))
                    .await;
                let answer = attempts.last().unwrap().answer.clone().unwrap();
                redelivered.lock().unwrap().push((event.id, answer.body["idempotent"] == true));
            }
        }
    })
    .await;
    for (id, idempotent) in redelivered.lock().unwrap().iter() {
        assert_eq!(
            *idempotent,
            committed.contains(id),
            "{id}: answered idempotent iff committed before the kill"
        );
    }

    let ledger = Ledger::count(db.pool(), &events).await;
    Report {
        fault: "kill -9 under load",
        events: events.len(),
        deliveries: run.provider.sent(),
        ledger: Some(&ledger),
        notes: format!(
            "{requests} requests (every event twice) by 8 clients, SIGKILL after {} answers; {} were in flight and got no answer, the rest were refused; \
             acknowledged before the kill: {} events, all durable; committed but unacknowledged: {}; \
             then every event redelivered until 2xx",
            requests / 2,
            run.cut_off.load(Ordering::SeqCst),
            acked.len(),
            committed.len() - acked.len(),
        ),
    }
    .print();
    ledger.assert_exactly_once();
}
