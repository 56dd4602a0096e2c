//! Three replicas share the jobs of one database; one is killed with
//! forwards in flight. Every event reaches each destination, the only second
//! arrivals are jobs in flight at the crash, and no entity's events overlap
//! or swap, whichever replicas send them.

use serde_json::Value;

use crate::support::forwarding::*;
use crate::support::receiver::{Answer, Receiver};
use crate::support::service::database_url;
use crate::support::*;

/// Entities; each destination has a job per event.
const ENTITIES: usize = 4;

/// How many forwards `service` logged as delivered.
fn forwarded(service: &Service) -> usize {
    service
        .logs()
        .iter()
        .filter(|line| serde_json::from_str::<Value>(line).is_ok_and(|e| e["message"] == "event forwarded"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_the_jobs_and_one_killed_mid_flight_costs_only_its_forwards_in_flight() {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    let receiver = Receiver::start(SECRET).await;
    // A timeout longer than the test holds requests, however loaded the
    // machine: a held request stays in flight rather than timing out and
    // going again (its lease, the timeout and 15 s, is what the test waits
    // out after the crash).
    let declaration = DeclarationFile::write(&receiver, "10s");
    let env = declaration.env();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(Service::start(&url, &env_refs(&env)).await);
    }
    let addrs: Vec<_> = replicas.iter().map(|r| r.addr).collect();
    let provider = Provider::default();

    // Events recorded by the three in turn, forwarded.
    let before = events_about("replicas", ENTITIES, 1, 3);
    record_in_order(&provider, &addrs, &before).await;
    until_all_sent(db.pool(), (2 * before.len()) as i64).await;

    // Then the receiver holds every request: each entity's next event for
    // `ordered`, all of them for `unordered`, claimed by whichever replica.
    receiver.answer_otherwise(Answer::Hang);
    let during = events_about("replicas", ENTITIES, 4, 5);
    record_in_order(&provider, &addrs, &during).await;
    let in_flight = ENTITIES + during.len();
    receiver.until_held(in_flight).await;

    let killed = 1;
    replicas[killed].kill();
    receiver.answer_otherwise(Answer::Status(200));
    receiver.release();
    let survivors: Vec<_> = addrs.iter().enumerate().filter(|(n, _)| *n != killed).map(|(_, a)| *a).collect();
    let after = events_about("replicas", ENTITIES, 6, 7);
    record_in_order(&provider, &survivors, &after).await;
    let events: Vec<Event> = before.iter().chain(&during).chain(&after).cloned().collect();
    until_all_sent(db.pool(), (2 * events.len()) as i64).await;

    let seen = Seen::check(&receiver, &events);
    let in_flight_jobs: std::collections::BTreeSet<_> =
        during.iter().flat_map(|e| PATHS.map(|path| (path.to_string(), e.id.clone()))).collect();
    assert!(seen.repeated().is_subset(&in_flight_jobs), "{:?}", seen.repeated());
    assert!(seen.second_arrivals() <= in_flight, "{} second arrivals", seen.second_arrivals());
    let shares: Vec<usize> = replicas.iter().map(forwarded).collect();
    assert!(shares.iter().all(|n| *n > 0), "every replica forwarded some: {shares:?}");
    Report {
        fault: "replicas forwarding, one killed mid-flight",
        events: events.len(),
        deliveries: receiver.arrivals().len(),
        ledger: None,
        notes: format!(
            "requests: forwards that reached the receiver; 3 replicas on one database, {ENTITIES} entities, 2 destinations (one ordered by entity); forwards \
             delivered by replica: {shares:?}; replica {} SIGKILLed with {in_flight} jobs in flight at the receiver \
             (all replicas'); {} second arrivals, all of jobs in flight at the crash; each entity in order and one \
             at a time",
            killed + 1,
            seen.second_arrivals(),
        ),
    }
    .print();
}
