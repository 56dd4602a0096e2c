//! `ordering = "entity"`: the events of one entity arrive one at a time, in
//! the order they were recorded, while other entities' events pass a
//! blocked one; without it, nothing is held back. `ordering = "key"`: the
//! same, by the key the destination declares (by default, a Paddle
//! subscription and its transactions by their customer).

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use webhook_inbox::queue::Tally;

use crate::support::app::TestApp;
use crate::support::events::subscription;
use crate::support::forwarding::*;
use crate::support::receiver::{Answer, Receiver};

/// What a Paddle customer's events are, in the order Paddle sends them:
/// the subscription (with its side effect), then its first transaction's.
const BILLING: [&str; 5] = [
    "subscription.created",
    "transaction.created",
    "transaction.ready",
    "transaction.billed",
    "transaction.paid",
];

/// Delivers event `seq` (from 0) of [`BILLING`] for `customer`: each about
/// another entity (`data.id`), all of one customer (`data.customer_id`).
async fn deliver_billing(app: &TestApp, customer: &str, seq: usize) {
    let event_type = BILLING[seq];
    let mut event =
        subscription(&format!("evt_{customer}_{seq}"), "created", "active", "2024-04-01T00:00:00Z");
    event["event_type"] = event_type.into();
    event["data"]["id"] = format!("{}_{customer}_{seq}", &event_type[..3]).into();
    event["data"]["customer_id"] = customer.into();
    event["data"]["custom_data"]["user_id"] = format!("user_{customer}").into();
    event["data"]["seq"] = seq.into();
    let answer = app.send(&paddle_raw(&event.to_string())).await;
    assert_eq!(answer.status, 200, "{event_type} of {customer}: {answer:?}");
}

/// The event types each customer received and accepted (2xx), in arrival order.
fn accepted_per_customer(receiver: &Receiver) -> HashMap<String, Vec<String>> {
    let mut accepted: HashMap<String, Vec<String>> = HashMap::new();
    for arrival in receiver.arrivals().iter().filter(|a| a.answered == 200) {
        assert_eq!(arrival.verified, Ok(()));
        let json = arrival.json();
        accepted
            .entry(json["data"]["customer_id"].as_str().unwrap().into())
            .or_default()
            .push(json["event_type"].as_str().unwrap().into());
    }
    accepted
}

/// The `(entity, seq)` of each arrival, in arrival order.
fn arrived(receiver: &Receiver) -> Vec<(String, u64)> {
    receiver
        .arrivals()
        .iter()
        .map(|a| {
            let json = a.json();
            (json["data"]["id"].as_str().unwrap().to_string(), json["data"]["seq"].as_u64().unwrap())
        })
        .collect()
}

/// Three events each of keys A and B are pending, A's first: the first
/// send fails A's head (500), so a pass sends B's head and A's is retrying
/// (4 claimed: A's head and B's three); a second pass at once
/// finds nothing due, A being held; a pass after A's retry time sends A's
/// three.
async fn first_fails_then_its_key_catches_up(app: &TestApp, receiver: &Receiver) {
    let queue = queue(app, "app");
    receiver.answer_next([Answer::Status(500)]);
    let now = Utc::now();
    assert_eq!(send_due(app.pool(), &queue, now).await, Tally { claimed: 4, sent: 3, retrying: 1, dead: 0 });
    assert_eq!(send_due(app.pool(), &queue, now).await, Tally::default());
    let later = now + chrono::Duration::seconds(73);
    assert_eq!(send_due(app.pool(), &queue, later).await, Tally { claimed: 3, sent: 3, ..Tally::default() });
}

#[tokio::test]
async fn a_failing_event_holds_back_only_its_own_entity() {
    let receiver = Receiver::start(SECRET).await;
    let app = forwarding_app(destination(
        &receiver.url(),
        "ordering = \"entity\"\nretry_schedule = [\"1m\", \"1m\"]",
    ))
    .await;
    for seq in 1..=3 {
        for entity in ["ctm_A", "ctm_B"] {
            deliver(&app, &format!("evt_{entity}_{seq}"), entity, seq).await;
        }
    }
    // One event per entity at a time: A1 (fails) and B1; then A1 waits for
    // its retry, and A2, A3 behind it, while B2 and B3 go on; then A1's
    // retry, A2 and A3.
    first_fails_then_its_key_catches_up(&app, &receiver).await;

    let order = arrived(&receiver);
    let entity = |name: &str| order.iter().filter(|(e, _)| e == name).map(|(_, s)| *s).collect::<Vec<_>>();
    assert_eq!(entity("ctm_A"), [1, 1, 2, 3], "A1 failed, then A1, A2, A3");
    assert_eq!(entity("ctm_B"), [1, 2, 3]);
    let b3 = order.iter().position(|a| *a == ("ctm_B".into(), 3)).unwrap();
    let a2 = order.iter().position(|a| *a == ("ctm_A".into(), 2)).unwrap();
    assert!(b3 < a2, "B's events passed the blocked A: {order:?}");
}

#[tokio::test]
async fn an_event_is_held_while_another_of_its_entity_is_in_flight_even_a_later_one() {
    let receiver = Receiver::start(SECRET).await;
    let app = forwarding_app(destination(&receiver.url(), "ordering = \"entity\"")).await;
    for seq in 1..=2 {
        deliver(&app, &format!("evt_{seq}"), "ctm_A", seq).await;
    }
    // The second event was claimed by another replica before the first
    // one's transaction committed (ids are taken at insert, commits may
    // come in any order): it is in flight.
    sqlx::query(
        "UPDATE destination_jobs SET locked_until = now() + interval '1 minute', claim_token = gen_random_uuid(),
                                     attempts = 1
         WHERE event_id = 'evt_2'",
    )
    .execute(app.pool())
    .await
    .unwrap();
    let queue = queue(&app, "app");

    assert_eq!(
        send_due(app.pool(), &queue, Utc::now()).await,
        Tally::default(),
        "never two of one entity at once"
    );
    // Once that attempt is over (sent), the first one goes.
    sqlx::query("UPDATE destination_jobs SET status = 'sent', locked_until = NULL WHERE event_id = 'evt_2'")
        .execute(app.pool())
        .await
        .unwrap();
    assert_eq!(send_due(app.pool(), &queue, Utc::now()).await.sent, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_deliver_each_entity_in_order_and_never_two_of_one_entity_at_once() {
    let receiver = Receiver::start(SECRET).await;
    // Each request takes a while, so that overlaps would be seen.
    receiver.hold_each(Duration::from_millis(20));
    let app = forwarding_app(destination(
        &receiver.url(),
        "ordering = \"entity\"\nconcurrency = 20\nretry_schedule = [\"10ms\", \"10ms\", \"10ms\"]",
    ))
    .await;
    // Some first attempts fail, so retries interleave with the rest.
    receiver.answer_next([
        Answer::Status(500),
        Answer::Status(200),
        Answer::Status(503),
        Answer::Status(500),
    ]);
    let (entities, per_entity) = (8, 6);
    for seq in 1..=per_entity {
        for entity in 0..entities {
            deliver(&app, &format!("evt_{entity}_{seq}"), &format!("ctm_{entity}"), seq).await;
        }
    }
    let declaration = &app.state.forwarding.declaration;
    let (replica, _) = app.replica().await;
    let (first, _a) = run(app.pool(), declaration).await;
    let (second, _b) = run(&replica.pool, declaration).await;
    let settled = until_settled(app.pool()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    assert!(first.stop(deadline).await && second.stop(deadline).await);

    assert!(settled.iter().all(|(status, _)| status == "sent"), "{settled:?}");
    assert_eq!(receiver.most_at_once_per_entity(), 1, "two events of one entity were handled at once");
    // Accepted arrivals (2xx) per entity, in order, each once.
    let mut accepted: HashMap<String, Vec<u64>> = HashMap::new();
    for arrival in receiver.arrivals().iter().filter(|a| a.answered == 200) {
        let json = arrival.json();
        accepted
            .entry(json["data"]["id"].as_str().unwrap().into())
            .or_default()
            .push(json["data"]["seq"].as_u64().unwrap());
    }
    assert_eq!(accepted.len(), entities);
    for (entity, seqs) in accepted {
        assert_eq!(seqs, (1..=per_entity as u64).collect::<Vec<_>>(), "{entity}");
    }
}

#[tokio::test]
async fn by_customer_a_failing_subscription_holds_back_its_transactions_not_another_customers() {
    let receiver = Receiver::start(SECRET).await;
    // One request at a time, so that the first one (A's subscription) is the one that fails.
    let app = forwarding_app(destination(
        &receiver.url(),
        "ordering = \"key\"\nconcurrency = 1\nretry_schedule = [\"1m\", \"1m\"]",
    ))
    .await;
    for seq in 0..3 {
        for customer in ["ctm_A", "ctm_B"] {
            deliver_billing(&app, customer, seq).await;
        }
    }
    // A's subscription fails, and its transactions (other entities, one
    // customer) wait behind it, while B's go.
    first_fails_then_its_key_catches_up(&app, &receiver).await;

    let first_three = BILLING[..3].to_vec();
    let accepted = accepted_per_customer(&receiver);
    assert_eq!(accepted["ctm_A"], first_three);
    assert_eq!(accepted["ctm_B"], first_three);
    let arrivals = receiver.arrivals();
    let customers: Vec<_> =
        arrivals.iter().map(|a| a.json()["data"]["customer_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(
        customers,
        ["ctm_A", "ctm_B", "ctm_B", "ctm_B", "ctm_A", "ctm_A", "ctm_A"],
        "B passed the blocked A"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn by_customer_two_replicas_deliver_each_customers_events_in_order_and_never_two_at_once() {
    let receiver = Receiver::start(SECRET).await;
    receiver.hold_each(Duration::from_millis(20));
    receiver.entity_at("/data/customer_id");
    let app = forwarding_app(destination(
        &receiver.url(),
        "ordering = \"key\"\nordering_key = { paddle = \"/data/customer_id\" }\nconcurrency = 20\n\
         retry_schedule = [\"10ms\", \"10ms\", \"10ms\"]",
    ))
    .await;
    receiver.answer_next([Answer::Status(500), Answer::Status(200), Answer::Status(503)]);
    let customers = 6;
    for seq in 0..BILLING.len() {
        for customer in 0..customers {
            deliver_billing(&app, &format!("ctm_{customer}"), seq).await;
        }
    }
    let declaration = &app.state.forwarding.declaration;
    let (replica, _) = app.replica().await;
    let (first, _a) = run(app.pool(), declaration).await;
    let (second, _b) = run(&replica.pool, declaration).await;
    let settled = until_settled(app.pool()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    assert!(first.stop(deadline).await && second.stop(deadline).await);

    assert!(settled.iter().all(|(status, _)| status == "sent"), "{settled:?}");
    assert_eq!(receiver.most_at_once_per_entity(), 1, "two events of one customer were handled at once");
    let accepted = accepted_per_customer(&receiver);
    assert_eq!(accepted.len(), customers);
    for (customer, event_types) in accepted {
        assert_eq!(event_types, BILLING, "{customer}");
    }
}
