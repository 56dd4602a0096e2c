//! PostgreSQL restarts while forwards are in flight: the receiver answers
//! them 2xx while it is down, the marks wait until it is back, and no job is
//! sent twice; forwarding goes on by itself, each entity in order.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;

use crate::support::forwarding::*;
use crate::support::receiver::{Answer, Receiver};
use crate::support::watch::until;
use crate::support::*;

/// How long PostgreSQL stays down.
const DOWN: Duration = Duration::from_millis(1500);

/// Entities; each destination has a job per event.
const ENTITIES: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_answered_while_postgresql_restarts_are_marked_once_it_is_back_and_none_goes_twice() {
    let mut cluster = Cluster::start().await;
    let receiver = Receiver::start(SECRET).await;
    // A lease (the timeout and 15 s) long enough that the marks wait out
    // the restart however loaded the machine.
    let declaration = DeclarationFile::write(&receiver, "10s");
    let mut env = declaration.env();
    env.push(("DB_ACQUIRE_TIMEOUT_MS", "500".into()));
    let mut service = Service::start(&cluster.url(), &env_refs(&env)).await;
    let pool = PgPoolOptions::new().connect_with(cluster.connect_options()).await.unwrap();
    let provider = Provider::default();

    // Jobs in flight, held at the receiver: each entity's next event for
    // `ordered`, ten for `unordered` (its concurrency).
    receiver.answer_otherwise(Answer::Hang);
    let before = events_about("pgdown", ENTITIES, 1, 3);
    record_in_order(&provider, &[service.addr], &before).await;
    let in_flight = ENTITIES + 10;
    receiver.until_held(in_flight).await;

    // PostgreSQL goes away; then the receiver answers them all 2xx.
    pool.close().await;
    cluster.stop().await;
    receiver.answer_otherwise(Answer::Status(200));
    receiver.release();
    until("the held requests answered", async || receiver.held() == 0).await;
    tokio::time::sleep(DOWN).await;
    cluster.restart().await;

    // Back, more events are recorded and forwarded by the same process.
    let pool = PgPoolOptions::new().connect_with(cluster.connect_options()).await.unwrap();
    let after = events_about("pgdown", ENTITIES, 4, 5);
    record_in_order(&provider, &[service.addr], &after).await;
    let events: Vec<Event> = before.iter().chain(&after).cloned().collect();
    until_all_sent(&pool, (2 * events.len()) as i64).await;
    assert!(service.is_running(), "recovered without a restart");

    let seen = Seen::check(&receiver, &events);
    assert_eq!(seen.second_arrivals(), 0, "no crash, so no job goes twice: {:?}", seen.repeated());
    Report {
        fault: "PostgreSQL restart with forwards in flight",
        events: events.len(),
        deliveries: receiver.arrivals().len(),
        ledger: None,
        notes: format!(
            "requests: forwards that reached the receiver; {ENTITIES} entities, 2 destinations (one ordered by entity); fast shutdown of PostgreSQL with \
             {in_flight} jobs in flight, all answered 2xx while it was down {DOWN:?}; their marks were retried \
             until it was back: 0 second arrivals; events recorded afterwards were forwarded by the same process, \
             each entity in order and one at a time",
        ),
    }
    .print();
}
