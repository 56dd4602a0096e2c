//! kill -9 under load: the service dies with deliveries provably inside
//! their statements (one of them applying a batch), others mid-answer and
//! mid-read, and nothing acknowledged is lost, nothing is applied twice;
//! what committed without being acknowledged is answered as a duplicate
//! when the provider retries.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::support::provider::{attempt, in_parallel, shuffle, spawn_attempt};
use crate::support::service::database_url;
use crate::support::watch::{
    Gate, install_gate_after_insert, until, until_no_service_session, waiting_at_gate,
};
use crate::support::*;

/// The gate of first deliveries of events with side effects, held at the
/// end of the statement that records them and writes their effects (all
/// written, nothing committed).
const IN_TRANSACTION: i64 = 1;
/// The gate of first deliveries of events without side effects, held inside
/// their one autocommitted statement.
const IN_STATEMENT: i64 = 2;
/// The gate of a batch of deliveries with side effects.
const IN_BATCH: i64 = 3;

/// What the clients of the load saw.
#[derive(Default)]
struct LoadRun {
    provider: Provider,
    /// Requests answered 2xx.
    answered: AtomicUsize,
    /// Events answered 2xx at least once.
    acked: Mutex<HashSet<String>>,
    killed_at: OnceLock<Instant>,
    /// Requests in flight when the process died, which got no answer.
    cut_off: AtomicUsize,
    /// Requests made after it died, which got no answer either.
    after_kill: AtomicUsize,
}

impl LoadRun {
    /// Sends `event` once and notes what came of it.
    async fn send(&self, addr: std::net::SocketAddr, event: &Event) {
        let attempt = self.provider.attempt(addr, &event.delivery).await;
        if attempt.succeeded() {
            self.acked.lock().unwrap().insert(event.id.clone());
            self.answered.fetch_add(1, Ordering::SeqCst);
        } else if self.killed_at.get().is_none_or(|killed| attempt.started < *killed) {
            self.cut_off.fetch_add(1, Ordering::SeqCst);
        } else {
            self.after_kill.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_killed_under_load_loses_nothing_acknowledged_and_applies_each_event_once() {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    let mut service = Service::start(&url, &[]).await;
    let addr = service.addr;
    // 240 events for the load, and one of each kind sent once the gates are shut.
    let mut events = Event::mixed("kill", 242);
    let late = events.split_off(240);
    let events = Arc::new(events);
    install_gate_after_insert(
        db.pool(),
        "processed_webhook_events",
        &format!(
            "CASE NEW.event_type WHEN 'subscription.created' THEN {IN_TRANSACTION} ELSE {IN_STATEMENT} END"
        ),
    )
    .await;

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
            async move { run.send(addr, &events[event]).await }
        })
    });

    // Half way through, both gates shut: the first deliveries then in flight
    // stop at them, inside their transactions. The late events make sure
    // each kind is held, whichever the load's clients were sending.
    until("half the load answered", async || run.answered.load(Ordering::SeqCst) >= requests / 2).await;
    let gates = [Gate::close(db.pool(), IN_TRANSACTION).await, Gate::close(db.pool(), IN_STATEMENT).await];
    let late_attempts: Vec<_> = late.iter().map(|event| spawn_attempt(addr, &event.delivery)).collect();
    until("a first delivery of each kind held at its gate", async || {
        waiting_at_gate(db.pool(), IN_TRANSACTION).await >= 1
            && waiting_at_gate(db.pool(), IN_STATEMENT).await >= 1
    })
    .await;
    let held_in_transaction = waiting_at_gate(db.pool(), IN_TRANSACTION).await;
    let held_in_statement = waiting_at_gate(db.pool(), IN_STATEMENT).await;

    run.killed_at.set(Instant::now()).unwrap();
    service.kill();
    // The sessions outlive the process while they wait: let them finish.
    // Every delivery is one autocommitted statement, which commits once it
    // passes the gate though its client is gone.
    for gate in gates {
        gate.open().await;
    }
    load.await.unwrap();
    for attempt in late_attempts {
        assert!(attempt.await.unwrap().answer.is_none(), "a late delivery was answered by a dead process");
    }
    until_no_service_session(db.pool()).await;

    // Acknowledged means durable: every event answered 2xx before the kill
    // has its dedup row, its PROCESSED row and its effect.
    let all: Vec<Event> = events.iter().chain(&late).cloned().collect();
    let acked: HashSet<String> = run.acked.lock().unwrap().clone();
    let acked_events: Vec<Event> = all.iter().filter(|e| acked.contains(&e.id)).cloned().collect();
    Ledger::count(db.pool(), &acked_events).await.assert_exactly_once();
    // Committed but never acknowledged: at least every statement held at
    // its gate when the process died (each had inserted a new dedup row).
    let held_in_statement = held_in_statement + held_in_transaction;
    let committed: HashSet<String> = Ledger::committed(db.pool(), all.iter()).await.into_iter().collect();
    let unacknowledged = committed.difference(&acked).count();
    assert!(
        unacknowledged as i64 >= held_in_statement,
        "{held_in_statement} statements were held at the kill, {unacknowledged} events committed unacknowledged"
    );
    // Nothing committed is half there.
    Ledger::count(db.pool(), &all.iter().filter(|e| committed.contains(&e.id)).cloned().collect::<Vec<_>>())
        .await
        .assert_exactly_once();

    // Restarted, the provider redelivers every event until it gets a 2xx:
    // the ones committed before the kill (acknowledged or not) are answered
    // as duplicates, the others are applied now.
    let restarted = Service::start(&url, &[]).await;
    let redelivered = Arc::new(Mutex::new(Vec::new()));
    in_parallel(all.clone(), 8, {
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

    let ledger = Ledger::count(db.pool(), &all).await;
    Report {
        fault: "kill -9 under load",
        events: all.len(),
        deliveries: run.provider.sent() + late.len(),
        ledger: Some(&ledger),
        notes: format!(
            "{requests} requests (every event twice) by 8 clients; once {} were answered, first deliveries were held \
             at a gate: SIGKILL came with {held_in_transaction} with effects and \
             {} without held inside their autocommitted statements; {} requests in flight got no answer, {} made \
             after the kill got none either; acknowledged before the kill: {} events, all durable; committed but \
             unacknowledged: {unacknowledged}; then every event redelivered until 2xx, answered idempotent exactly \
             for the committed ones",
            requests / 2,
            held_in_statement - held_in_transaction,
            run.cut_off.load(Ordering::SeqCst) + late.len(),
            run.after_kill.load(Ordering::SeqCst),
            acked.len(),
        ),
    }
    .print();
    ledger.assert_exactly_once();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_killed_with_a_batch_in_flight_loses_nothing_and_applies_each_event_once() {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    // The smallest pool: one worker for deliveries with side effects, so
    // those that come while it is busy wait for it, and it takes them together.
    let mut service = Service::start(&url, &[("DB_MAX_CONNECTIONS", "6")]).await;
    let addr = service.addr;
    // Even: subscription.created (effects); odd: without effects.
    let events = Event::mixed("batch", 20);
    let with_effects: Vec<Event> = events.iter().step_by(2).cloned().collect();
    let (first, batched) = with_effects.split_first().unwrap();
    let sentinel = &events[1];
    install_gate_after_insert(
        db.pool(),
        "processed_webhook_events",
        &format!(
            "CASE WHEN NEW.event_type <> 'subscription.created' THEN 0 WHEN NEW.event_id = '{}' THEN \
             {IN_TRANSACTION} ELSE {IN_BATCH} END",
            first.id
        ),
    )
    .await;
    let first_gate = Gate::close(db.pool(), IN_TRANSACTION).await;
    let batch_gate = Gate::close(db.pool(), IN_BATCH).await;

    // The worker is held by the first delivery; the others queue behind it.
    let first_attempt = spawn_attempt(addr, &first.delivery);
    until("the first delivery held at its gate", async || {
        waiting_at_gate(db.pool(), IN_TRANSACTION).await == 1
    })
    .await;
    let attempts: Vec<_> = batched.iter().map(|event| spawn_attempt(addr, &event.delivery)).collect();
    // A delivery sent after them, on the other lane, answered: theirs were
    // read (and queued) meanwhile, each in far less time than its commit.
    assert!(attempt(addr, &sentinel.delivery).await.succeeded());
    first_gate.open().await;
    until("a batch held at its gate", async || waiting_at_gate(db.pool(), IN_BATCH).await >= 1).await;

    service.kill();
    batch_gate.open().await;
    let mut acked = HashSet::new();
    for (event, attempt) in with_effects.iter().zip([first_attempt].into_iter().chain(attempts)) {
        if attempt.await.unwrap().succeeded() {
            acked.insert(event.id.clone());
        }
    }
    until_no_service_session(db.pool()).await;

    let acked_events: Vec<Event> = with_effects.iter().filter(|e| acked.contains(&e.id)).cloned().collect();
    Ledger::count(db.pool(), &acked_events).await.assert_exactly_once();
    // The batch's statement committed whole once it passed the gate, though
    // its client was gone: its deliveries, in one transaction, with their effects.
    let ids: Vec<&str> = batched.iter().map(|event| event.id.as_str()).collect();
    let largest_batch: i64 = sqlx::query_scalar(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM processed_webhook_events
                             WHERE event_id = ANY($1) GROUP BY xmin::text) AS batches",
    )
    .bind(&ids)
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert!(largest_batch >= 2, "no batch was in flight: {largest_batch}");
    let committed: HashSet<String> =
        Ledger::committed(db.pool(), with_effects.iter()).await.into_iter().collect();
    Ledger::count(
        db.pool(),
        &with_effects.iter().filter(|e| committed.contains(&e.id)).cloned().collect::<Vec<_>>(),
    )
    .await
    .assert_exactly_once();

    // Restarted, the provider redelivers each until it gets a 2xx: answered
    // idempotent exactly for those committed before.
    let restarted = Service::start(&url, &[]).await;
    let provider = Provider::default();
    for event in &with_effects {
        let attempts =
            provider.until_2xx(&[restarted.addr], &event.delivery, Duration::from_millis(20)).await;
        let answer = attempts.last().unwrap().answer.clone().unwrap();
        assert_eq!(answer.body["idempotent"] == true, committed.contains(&event.id), "{}", event.id);
    }
    let ledger = Ledger::count(db.pool(), &with_effects).await;
    Report {
        fault: "kill -9 with a batch in flight",
        events: with_effects.len(),
        deliveries: with_effects.len() + provider.sent(),
        ledger: Some(&ledger),
        notes: format!(
            "one worker for effects held by a first delivery while {} more queued; SIGKILL with a statement \
             applying {largest_batch} of them held at a gate, which then committed without its client; \
             acknowledged before the kill: {} events, all durable; every event redelivered until 2xx, answered \
             idempotent exactly for the committed ones",
            batched.len(),
            acked.len(),
        ),
    }
    .print();
    ledger.assert_exactly_once();
}
