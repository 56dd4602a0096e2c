//! Three service processes on one database, each event fired at all three at
//! the same moment, one replica killed in the middle: exactly once.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Barrier;

use crate::support::provider::in_parallel;
use crate::support::service::database_url;
use crate::support::watch::until;
use crate::support::*;

/// Events in flight at once, each to every replica.
const AT_A_TIME: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_fired_the_same_events_at_once_with_one_killed_apply_each_event_once() {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(Service::start(&url, &[]).await);
    }
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let events = Event::mixed("replicas", 120);
    let provider = Arc::new(Provider::default());
    let done = Arc::new(AtomicUsize::new(0));
    let answers: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();

    // Each event goes to the three replicas at once (a barrier releases the
    // three requests together); three events at a time.
    let load = tokio::spawn(in_parallel(events.clone(), AT_A_TIME, {
        let (provider, done, answers, addrs) =
            (provider.clone(), done.clone(), answers.clone(), addrs.clone());
        move |_, event: Event| {
            let (provider, done, answers, addrs) =
                (provider.clone(), done.clone(), answers.clone(), addrs.clone());
            async move {
                let barrier = Arc::new(Barrier::new(addrs.len()));
                let requests: Vec<_> = addrs
                    .iter()
                    .map(|&addr| {
                        let (provider, barrier, delivery) =
                            (provider.clone(), barrier.clone(), event.delivery.clone());
                        tokio::spawn(async move {
                            barrier.wait().await;
                            provider.attempt(addr, &delivery).await
                        })
                    })
                    .collect();
                for request in requests {
                    let attempt = request.await.unwrap();
                    let kind = match &attempt.answer {
                        None => "no answer".to_string(),
                        Some(a) if a.body["status"] == "processed" => "200 processed".into(),
                        Some(a) if a.body["idempotent"] == true => "200 idempotent".into(),
                        Some(a) => a.status.to_string(),
                    };
                    *answers.lock().unwrap().entry(kind).or_default() += 1;
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
        }
    }));

    until("half the events sent", async || done.load(Ordering::SeqCst) >= events.len() / 2).await;
    let killed = 1;
    replicas[killed].kill();
    load.await.unwrap();

    // The provider redelivers every event until a 2xx, to the survivors.
    let survivors: Vec<_> = addrs.iter().enumerate().filter(|(n, _)| *n != killed).map(|(_, a)| *a).collect();
    provider.redeliver_all(&survivors, &events, 4).await;

    let ledger = Ledger::count(db.pool(), &events).await;
    let answers = answers.lock().unwrap().clone();
    Report {
        fault: "replicas, same events at once, one killed",
        events: events.len(),
        deliveries: provider.sent(),
        ledger: Some(&ledger),
        notes: format!(
            "each event sent to the {} replicas at the same moment, {AT_A_TIME} events at a time; replica {} \
             SIGKILLed half way; answers: {answers:?}; then every event redelivered to the survivors until 2xx",
            addrs.len(),
            killed + 1
        ),
    }
    .print();
    ledger.assert_exactly_once();
    assert!(answers["200 processed"] <= events.len());
}
