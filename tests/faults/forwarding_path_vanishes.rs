//! The path to a destination vanishes silently mid-forwarding: the receiver
//! of two destinations (one ordered by entity) runs in its own network
//! namespace, and every packet to and from it is dropped while jobs are
//! being sent; a third destination on loopback is not cut. Each attempt
//! to the cut ones ends at the destination's timeout and is recorded as
//! such, their circuits open as configured, the third keeps receiving, and
//! after the heal every job is delivered: at least once, with one
//! `webhook-id`, each entity in order and one at a time.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::forwarding::*;
use crate::support::netns::Namespace;
use crate::support::receiver::Receiver;
use crate::support::service::database_url;
use crate::support::watch::until;
use crate::support::*;

/// Entities; each destination has a job per event.
const ENTITIES: usize = 4;
/// The destinations' timeout.
const TIMEOUT_MS: f64 = 300.0;
/// How long past its timeout an attempt may take to be given up on.
const SLACK_MS: f64 = 500.0;
/// How long the cut lasts once both circuits are open: the half-open probes fail too.
const OPEN_FOR: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_whose_path_vanishes_times_out_opens_its_circuit_and_gets_every_event_after_the_heal() {
    let db = TestDatabase::create().await;
    let namespace = Namespace::create();
    let receiver = Receiver::start_with(namespace.listen(0), SECRET);
    let steady = Receiver::start(SECRET).await;
    let declaration = DeclarationFile::write_beside(&receiver, &format!("{TIMEOUT_MS}ms"), &steady);
    let env = declaration.env();
    let service = Service::start(&database_url(&db.connect_options()), &env_refs(&env)).await;
    let provider = Provider::default();
    let addrs = [service.addr];

    // Forwarding flows; then the path is cut while the next events' jobs
    // are being sent, and more events come during the cut.
    let before = events_about("pathcut", ENTITIES, 1, 2);
    record_in_order(&provider, &addrs, &before).await;
    until_all_sent(db.pool(), 3 * before.len() as i64).await;
    let during = events_about("pathcut", ENTITIES, 3, 6);
    let (first, rest) = during.split_at(ENTITIES);
    record_in_order(&provider, &addrs, first).await;
    namespace.cut();
    record_in_order(&provider, &addrs, rest).await;
    let all: Vec<Event> = before.iter().chain(&during).cloned().collect();

    // The destination on loopback keeps receiving.
    let every_id: BTreeSet<String> = all.iter().map(|e| e.id.clone()).collect();
    until("every event at the destination that was not cut", async || steady_ids(&steady) == every_id).await;
    // Both cut destinations' circuits open, and stay open while the cut lasts.
    until("both circuits open", async || {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM destinations WHERE name IN ('ordered', 'unordered') AND circuit_open_until IS NOT NULL",
        )
        .fetch_one(db.pool())
        .await
        .unwrap()
            == 2
    })
    .await;
    tokio::time::sleep(OPEN_FOR).await;
    let unsent_at_heal: i64 =
        sqlx::query_scalar("SELECT count(*) FROM destination_jobs WHERE status <> 'sent'")
            .fetch_one(db.pool())
            .await
            .unwrap();
    namespace.heal();
    until_all_sent(db.pool(), 3 * all.len() as i64).await;

    let seen = Seen::check(&receiver, &all);
    assert_eq!(steady.arrivals().len(), all.len(), "the destination that was not cut got each event once");
    // Every failed attempt was to a cut destination, and ended at the
    // timeout, recorded as a timeout.
    let failures: Vec<(String, Option<i16>, Option<String>, f64)> = sqlx::query_as(
        "SELECT destination, status_code, error, duration_ms FROM destination_attempts WHERE error IS NOT NULL",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    for (destination, status, error, duration_ms) in &failures {
        assert!(destination != "steady", "{destination} {status:?} {error:?}");
        assert_eq!(*status, None, "{destination} {error:?}");
        assert_eq!(error.as_deref(), Some("no answer within 300ms"), "{destination}");
        assert!(
            (TIMEOUT_MS..TIMEOUT_MS + SLACK_MS).contains(duration_ms),
            "{destination}: an attempt took {duration_ms} ms"
        );
    }
    let per_destination = |name: &str| failures.iter().filter(|f| f.0 == name).count();
    let (ordered, unordered) = (per_destination("ordered"), per_destination("unordered"));
    assert!(
        ordered >= CIRCUIT_FAILURES as usize && unordered >= CIRCUIT_FAILURES as usize,
        "{ordered} and {unordered} timeouts before the circuits opened"
    );
    Report {
        fault: "path to a destination vanishes",
        events: all.len(),
        deliveries: receiver.arrivals().len() + steady.arrivals().len(),
        ledger: None,
        notes: format!(
            "requests: forwards that arrived; receiver of 2 destinations (one ordered by entity) in a network \
             namespace, every packet dropped mid-forwarding; {ordered} + {unordered} attempts ended at the \
             {TIMEOUT_MS} ms timeout (recorded \"no answer within 300ms\"), both circuits opened ({CIRCUIT_FAILURES} \
             failures, 1 s cooldown), the third destination on loopback got all {} events during the cut; {unsent_at_heal} \
             jobs waiting at the heal, then every job delivered, {} repeated arrivals, one webhook-id each, each \
             entity in order and one at a time",
            all.len(),
            seen.second_arrivals(),
        ),
    }
    .print();
}

/// The event ids that reached `steady`.
fn steady_ids(steady: &Receiver) -> BTreeSet<String> {
    steady.arrivals().iter().map(|a| a.header("webhook-inbox-event-id").to_string()).collect()
}
