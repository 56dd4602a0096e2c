//! A receiver that stops answering: every attempt times out and is recorded
//! as such, and once it answers again every
//! event is delivered, one 2xx per job, each entity in order and one at a
//! time (an attempt given up on is over for the receiver too: its
//! connection is closed).

use std::collections::BTreeMap;

use crate::support::forwarding::*;
use crate::support::receiver::{Answer, Receiver};
use crate::support::service::database_url;
use crate::support::watch::until;
use crate::support::*;

/// Entities; each destination has a job per event.
const ENTITIES: usize = 4;

/// Timed-out attempts the test waits for before the receiver recovers.
const TIMEOUTS: i64 = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_hangs_gets_timeouts_then_every_event_once_it_answers_each_entity_in_order() {
    let db = TestDatabase::create().await;
    let receiver = Receiver::start(SECRET).await;
    receiver.answer_otherwise(Answer::Hang);
    let declaration = DeclarationFile::write(&receiver, "300ms");
    let env = declaration.env();
    let service = Service::start(&database_url(&db.connect_options()), &env_refs(&env)).await;
    let provider = Provider::default();

    let events = events_about("hang", ENTITIES, 1, 3);
    record_in_order(&provider, &[service.addr], &events).await;
    let timeouts = async || -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM destination_attempts WHERE error LIKE 'no answer within%'")
            .fetch_one(db.pool())
            .await
            .unwrap()
    };
    until("attempts timed out", async || timeouts().await >= TIMEOUTS).await;

    // The receiver recovers.
    receiver.answer_otherwise(Answer::Status(200));
    receiver.release();
    until_all_sent(db.pool(), (2 * events.len()) as i64).await;

    let seen = Seen::check(&receiver, &events);
    // Each attempt's log line names its job, destination, event and attempt.
    let attempts: Vec<serde_json::Value> = (service.logs().iter())
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|entry| {
            ["event forwarded", "forward failed, will retry"]
                .contains(&entry["message"].as_str().unwrap_or(""))
        })
        .collect();
    assert!(attempts.len() as i64 >= 2 * events.len() as i64 + TIMEOUTS, "{attempts:?}");
    for entry in &attempts {
        let span = &entry["span"];
        assert!(
            span["job_id"].is_i64() && span["attempt"].is_i64() && span["destination"].is_string(),
            "{entry}"
        );
        assert!(events.iter().any(|event| span["event_id"] == event.id.as_str()), "{entry}");
    }
    // Answered at once (not held) at most once per job; and the service
    // recorded exactly one success per job.
    let mut answered: BTreeMap<(String, String), usize> = BTreeMap::new();
    for arrival in receiver.arrivals().iter().filter(|a| !a.held) {
        *answered
            .entry((arrival.path.clone(), arrival.header("webhook-inbox-event-id").into()))
            .or_default() += 1;
    }
    assert!(answered.values().all(|n| *n == 1), "{answered:?}");
    let successes: Vec<i64> = sqlx::query_scalar(
        "SELECT count(a.*) FILTER (WHERE a.status_code BETWEEN 200 AND 299) FROM destination_jobs j
         LEFT JOIN destination_attempts a ON a.job_id = j.id GROUP BY j.id",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert!(successes.iter().all(|n| *n == 1), "one recorded success per job: {successes:?}");
    let timed_out = timeouts().await;
    Report {
        fault: "receiver hangs, then answers",
        events: events.len(),
        deliveries: receiver.arrivals().len(),
        ledger: None,
        notes: format!(
            "requests: forwards that reached the receiver; {ENTITIES} entities, 2 destinations (one ordered by entity), timeout 300 ms: {timed_out} attempts timed \
             out (recorded as such) before the receiver answered again; then every event reached both \
             destinations, one recorded 2xx per job, {} repeated arrivals (the timed-out attempts), each entity in \
             order and one at a time",
            seen.second_arrivals(),
        ),
    }
    .print();
}
