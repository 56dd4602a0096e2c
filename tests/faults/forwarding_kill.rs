//! kill -9 while forwards are in flight: some held at the receiver (no
//! answer yet), some answered 2xx whose mark is held in PostgreSQL. After a
//! restart every event reaches each destination; the only second arrivals
//! are jobs in flight at the crash, and the events of one entity still
//! arrive in order, one at a time.

use sqlx::PgPool;

use crate::support::forwarding::*;
use crate::support::receiver::{Answer, Receiver};
use crate::support::service::database_url;
use crate::support::watch::{Gate, until, until_no_service_session, waiting_at_gate};
use crate::support::*;

/// The gate of the record that marks jobs sent (it writes the attempts):
/// shut, a mark waits inside its statement, uncommitted.
const MARK: i64 = 12;

/// Entities; each destination has a job per event.
const ENTITIES: usize = 4;

/// Ends the dead service's sessions, as PostgreSQL would once it noticed:
/// what they had not committed (a held mark) is rolled back.
pub async fn end_service_sessions(pool: &PgPool) {
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = 'webhook-inbox' AND datname = current_database()",
    )
    .execute(pool)
    .await
    .unwrap();
    until_no_service_session(pool).await;
}

/// How many of `destination`'s pending jobs a claim holds.
async fn leased(pool: &PgPool, destination: &str) -> usize {
    let leased: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM destination_jobs
         WHERE destination = $1 AND status = 'pending' AND locked_until > now()",
    )
    .bind(destination)
    .fetch_one(pool)
    .await
    .unwrap();
    leased as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_killed_with_forwards_in_flight_sends_again_only_those_and_keeps_each_entity_in_order() {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    let receiver = Receiver::start(SECRET).await;
    // A timeout longer than the test holds requests, however loaded the
    // machine: a held request stays in flight rather than timing out and
    // going again (its lease, the timeout and 15 s, is what the test waits
    // out after the crash).
    let declaration = DeclarationFile::write(&receiver, "10s");
    let env = declaration.env();
    let mut service = Service::start(&url, &env_refs(&env)).await;
    let provider = Provider::default();

    // Forwarding flows: three events per entity, delivered.
    let before = events_about("kill", ENTITIES, 1, 3);
    record_in_order(&provider, &[service.addr], &before).await;
    until_all_sent(db.pool(), (2 * before.len()) as i64).await;

    // From now on the receiver holds every request, and marks wait in
    // PostgreSQL. Three more events per entity: `ordered` sends each
    // entity's next one, `unordered` as many as its concurrency allows.
    let mark = Gate::shut(db.pool(), "destination_attempts", MARK).await;
    receiver.answer_otherwise(Answer::Hang);
    let during = events_about("kill", ENTITIES, 4, 6);
    record_in_order(&provider, &[service.addr], &during).await;
    let expected_held = ENTITIES + 10;
    receiver.until_held(expected_held).await;
    // `unordered`'s other jobs are claimed ahead, waiting in the service
    // for a free slot.
    until("unordered's jobs all claimed", async || leased(db.pool(), "unordered").await == during.len())
        .await;
    // One is answered 2xx, and its mark waits at the gate (the engine steps
    // one queue at a time, on one connection: nothing else is claimed or
    // marked meanwhile). If it was `unordered`'s, a job waiting ahead takes
    // its slot before the step that marks it; `ordered` has none waiting
    // (the entity's next job is claimed only by that step).
    receiver.let_through(1);
    until("a mark held at its gate", async || waiting_at_gate(db.pool(), MARK).await >= 1).await;
    let started_ahead = usize::from(receiver.let_through_paths() == [UNORDERED]);
    let held = expected_held - 1 + started_ahead;
    until("the held requests after the answer", async || receiver.held() == held).await;
    let in_flight = arrived(&receiver).len() - 2 * before.len();
    assert_eq!(in_flight, expected_held + started_ahead, "every job in flight arrived once");

    service.kill();
    end_service_sessions(db.pool()).await;
    mark.open().await;
    let unmarked = unsent(db.pool(), &arrived(&receiver)).await;
    assert_eq!(unmarked.len(), in_flight, "no job in flight was marked sent: {unmarked:?}");
    receiver.answer_otherwise(Answer::Status(200));
    receiver.release();

    // Restarted, with two more events per entity: the jobs in flight at the
    // crash go again once their leases end, and each entity's later events
    // only after them.
    let restarted = Service::start(&url, &env_refs(&env)).await;
    let after = events_about("kill", ENTITIES, 7, 8);
    record_in_order(&provider, &[restarted.addr], &after).await;
    let events: Vec<Event> = before.iter().chain(&during).chain(&after).cloned().collect();
    until_all_sent(db.pool(), (2 * events.len()) as i64).await;

    let seen = Seen::check(&receiver, &events);
    let repeated = seen.repeated();
    assert!(repeated.is_subset(&unmarked), "a job not in flight at the crash arrived twice: {repeated:?}");
    assert!(seen.second_arrivals() <= in_flight, "{} second arrivals", seen.second_arrivals());
    assert_eq!(seen.second_arrivals(), repeated.len(), "no job arrived a third time");
    Report {
        fault: "kill -9 with forwards in flight",
        events: events.len(),
        deliveries: receiver.arrivals().len(),
        ledger: None,
        notes: format!(
            "requests: forwards that reached the receiver; {ENTITIES} entities, 2 destinations (one ordered by entity); SIGKILL with {in_flight} jobs in flight \
             ({} held at the receiver, 1 answered 2xx with its mark held in PostgreSQL; unordered's other jobs claimed ahead); after a restart every \
             event reached both destinations, {} second arrivals, all of jobs in flight at the crash, with the same \
             webhook-id; each entity in order and one at a time",
            in_flight - 1,
            seen.second_arrivals(),
        ),
    }
    .print();
}
