//! Deliveries with effects that wait together are applied together: one
//! statement and one commit for all of them, each still answered as it
//! would have been alone.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use webhook_inbox::inbox::{
    Delivery, InboxError, Recorded, Routed, RoutingTable, Source, ToApply, apply_together,
};
use webhook_inbox::providers;

use crate::availability::{hold_dedup_row, until_a_delivery_waits_on_the_lock};
use crate::batching::{delivery, to_record};
use crate::support::events::subscription;
use crate::support::*;

/// The service's effects, as every test app has them.
fn routing() -> RoutingTable {
    webhook_inbox::effects::all(PRICE_CREDITS.parse().unwrap())
}

/// Paddle's `body`, read as a live delivery would be, on the applying lane.
fn to_apply(routing: &RoutingTable, body: &Value) -> ToApply {
    let payload = body.to_string().try_into().unwrap();
    let event = providers::format_of("paddle").read_request(&Default::default(), &payload).unwrap();
    let delivery = Delivery {
        provider: "paddle".into(),
        event,
        payload,
        source: Source::Webhook { signature: "ts=1;h1=00".into(), secret_index: 0 },
        request_id: None,
        traceparent: None,
    };
    match routing.route(delivery) {
        Routed::Apply(delivery) => delivery,
        Routed::Record(_) => unreachable!("an event with effects"),
    }
}

/// Applies `deliveries` together on `conn`, as one of `app`'s workers does.
async fn together(
    app: &TestApp,
    conn: &mut PgConnection,
    deliveries: &[ToApply],
) -> Vec<Result<Recorded, InboxError>> {
    let fallbacks = app.state.metrics.batch_fallbacks();
    apply_together(conn, &deliveries.iter().collect::<Vec<_>>(), &fallbacks).await
}

/// What each answer says, in order: processed, duplicate, or failed.
fn outcomes(answers: &[Result<Recorded, InboxError>]) -> Vec<&'static str> {
    answers
        .iter()
        .map(|answer| match answer {
            Ok(Recorded::Processed { .. }) => "processed",
            Ok(Recorded::Duplicate { .. }) => "duplicate",
            Ok(Recorded::Failed { .. }) => "failed",
            Err(_) => "error",
        })
        .collect()
}

/// How many transactions committed the dedup rows of `events`.
async fn transactions_of(app: &TestApp, events: &[&str]) -> i64 {
    let events: Vec<String> = events.iter().map(|event| event.to_string()).collect();
    sqlx::query_scalar(
        "SELECT count(DISTINCT xmin::text) FROM processed_webhook_events WHERE event_id = ANY($1)",
    )
    .bind(events)
    .fetch_one(app.pool())
    .await
    .unwrap()
}

async fn connection(app: &TestApp) -> PgConnection {
    PgConnection::connect_with(&app.db.connect_options()).await.unwrap()
}

#[tokio::test]
async fn a_batch_commits_in_one_transaction_and_one_whose_effect_cannot_read_its_event_fails_alone() {
    let app = TestApp::spawn().await;
    let routing = routing();
    let mut unlisted = subscription_created("evt_bad", "sub_bad");
    unlisted["data"]["items"][0]["price"]["id"] = json!("pri_nobody_listed");
    let deliveries: Vec<ToApply> = (1..=4)
        .map(|i| subscription_created(&format!("evt_{i}"), &format!("sub_{i}")))
        .chain([unlisted])
        .map(|body| to_apply(&routing, &body))
        .collect();

    let answers = together(&app, &mut connection(&app).await, &deliveries).await;

    assert_eq!(outcomes(&answers), ["processed", "processed", "processed", "processed", "failed"]);
    assert_eq!(transactions_of(&app, &["evt_1", "evt_2", "evt_3", "evt_4"]).await, 1);
    assert_eq!(app.count("SELECT count(*) FROM subscriptions").await, 4);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 4);
    let error: String =
        sqlx::query_scalar("SELECT error_message FROM webhook_events WHERE processing_status = 'FAILED'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert!(error.contains("pri_nobody_listed"), "{error}");
}

#[tokio::test]
async fn a_batch_whose_statement_fails_answers_each_delivery_as_alone_and_the_others_commit() {
    let app = TestApp::spawn().await;
    // One subscription's grant fails in the database, after its projection
    // was written by the same statement.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_sub_bad() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN
                 IF NEW.subscription_id = 'sub_bad' THEN RAISE EXCEPTION 'ledger refuses sub_bad'; END IF;
                 RETURN NEW;
             END $$;
         CREATE TRIGGER refuse_sub_bad BEFORE INSERT ON credit_grants
             FOR EACH ROW EXECUTE FUNCTION refuse_sub_bad();",
    )
    .execute(app.pool())
    .await
    .unwrap();
    let routing = routing();
    let deliveries: Vec<ToApply> = [("evt_1", "sub_1"), ("evt_bad", "sub_bad"), ("evt_2", "sub_2")]
        .iter()
        .map(|(event, subscription)| to_apply(&routing, &subscription_created(event, subscription)))
        .collect();

    let answers = together(&app, &mut connection(&app).await, &deliveries).await;

    assert_eq!(outcomes(&answers), ["processed", "failed", "processed"]);
    assert!(app.metrics().await.contains("webhook_batch_fallbacks_total 1"), "{}", app.metrics().await);
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT id FROM subscriptions ORDER BY id").fetch_all(app.pool()).await.unwrap();
    assert_eq!(ids, ["sub_1", "sub_2"]);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 2);
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 2);
    let error: String =
        sqlx::query_scalar("SELECT error_message FROM webhook_events WHERE processing_status = 'FAILED'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert!(error.contains("ledger refuses sub_bad"), "{error}");
}

#[tokio::test]
async fn two_copies_of_one_event_in_a_batch_apply_it_once_and_the_second_is_skipped() {
    let app = TestApp::spawn().await;
    let routing = routing();
    let deliveries: Vec<ToApply> = ["evt_1", "evt_2", "evt_1", "evt_3"]
        .iter()
        .map(|event| to_apply(&routing, &subscription_created(event, &format!("sub_of_{event}"))))
        .collect();

    let answers = together(&app, &mut connection(&app).await, &deliveries).await;

    assert_eq!(outcomes(&answers), ["processed", "processed", "duplicate", "processed"]);
    assert_eq!(transactions_of(&app, &["evt_1", "evt_2", "evt_3"]).await, 1);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 3);
    assert_eq!(
        app.count(
            "SELECT count(*) FROM webhook_events WHERE processing_status = 'SKIPPED' AND event_id = 'evt_1'"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn a_storm_of_copies_in_a_batch_is_two_statements_the_first_copies_then_every_later_one() {
    let app = TestApp::spawn().await;
    let routing = routing();
    let events = ["evt_1", "evt_2", "evt_1", "evt_2", "evt_1", "evt_2", "evt_1"];
    let deliveries: Vec<ToApply> = events
        .iter()
        .map(|event| to_apply(&routing, &subscription_created(event, &format!("sub_of_{event}"))))
        .collect();

    let answers = together(&app, &mut connection(&app).await, &deliveries).await;

    assert_eq!(
        outcomes(&answers),
        ["processed", "processed", "duplicate", "duplicate", "duplicate", "duplicate", "duplicate"]
    );
    // The first copies, then the five later ones together: not one statement per copy.
    let statements = app.count("SELECT count(DISTINCT xmin::text) FROM webhook_events").await;
    assert_eq!(statements, 2);
    assert_eq!(app.count("SELECT count(*) FROM webhook_events WHERE processing_status = 'SKIPPED'").await, 5);
    // Each answer names its own archive row.
    let ids: Vec<i64> = answers
        .iter()
        .map(|answer| match answer {
            Ok(Recorded::Processed { archive_id } | Recorded::Duplicate { archive_id }) => *archive_id,
            other => panic!("{other:?}"),
        })
        .collect();
    for (id, delivery) in ids.iter().zip(&deliveries) {
        let event: String = sqlx::query_scalar("SELECT event_id FROM webhook_events WHERE id = $1")
            .bind(id)
            .fetch_one(app.pool())
            .await
            .unwrap();
        assert_eq!(event, delivery.delivery().event.id);
    }
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_batches_contending_on_the_same_events_and_subscription_answer_each_delivery_as_alone() {
    let app = TestApp::spawn().await;
    let routing = routing();
    // The same eight events in both batches, in opposite orders, and each
    // batch with an update of one shared subscription, the second newer.
    let created: Vec<Value> =
        (1..=8).map(|i| subscription_created(&format!("evt_{i}"), &format!("sub_{i}"))).collect();
    let shared = |event: &str, status: &str, at: &str| {
        let mut update = subscription(event, "updated", status, at);
        update["data"]["id"] = json!("sub_1");
        update
    };
    let first: Vec<ToApply> = created
        .iter()
        .cloned()
        .chain([shared("evt_older", "past_due", "2030-01-01T00:00:00Z")])
        .map(|body| to_apply(&routing, &body))
        .collect();
    let second: Vec<ToApply> = created
        .iter()
        .rev()
        .cloned()
        .chain([shared("evt_newer", "paused", "2030-01-02T00:00:00Z")])
        .map(|body| to_apply(&routing, &body))
        .collect();
    let (mut one, mut two) = (connection(&app).await, connection(&app).await);

    let (a, b) = tokio::join!(together(&app, &mut one, &first), together(&app, &mut two, &second));

    // Each event applied once, by whichever batch got there first; every
    // other delivery of it a duplicate; nobody answered 5xx.
    let (a, b) = (outcomes(&a), outcomes(&b));
    for i in 0..8 {
        let pair = [a[i], b[7 - i]];
        assert!(pair.contains(&"processed") && pair.contains(&"duplicate"), "evt_{}: {pair:?}", i + 1);
    }
    assert_eq!((a[8], b[8]), ("processed", "processed"));
    // Applied in batches (one transaction each), not one at a time.
    let events: Vec<String> = (1..=8).map(|i| format!("evt_{i}")).collect();
    assert!(transactions_of(&app, &events.iter().map(String::as_str).collect::<Vec<_>>()).await <= 2);
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 10);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 8);
    assert_eq!(app.count("SELECT count(*) FROM webhook_events WHERE processing_status = 'SKIPPED'").await, 8);
    // Whichever order the two committed in, the newer update wins.
    let status: String = sqlx::query_scalar("SELECT status FROM subscriptions WHERE id = 'sub_1'")
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(status, "paused");
}

/// Polls `delivery` once: far enough to be queued for a worker (its first
/// step, `try_send`, never waits). Says whether it is still unanswered.
async fn queue(delivery: &mut (impl Future + Unpin)) -> bool {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *delivery).poll(cx).is_pending())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_waiting_for_the_only_busy_worker_are_applied_together_once_it_is_free() {
    // The smallest pool: one worker for deliveries with side effects.
    let app = TestApp::spawn_with(TestConfig { pool_size: 6, ..TestConfig::default() }).await;
    let routing = routing();
    let apply = |event: &str| {
        Routed::Apply(to_apply(&routing, &subscription_created(event, &format!("sub_of_{event}"))))
    };
    let mut holder = hold_dedup_row(&app, "evt_first").await;
    let workers = app.state.workers.clone();
    let first = apply("evt_first");
    let first = tokio::spawn(async move { workers.deliver(first).await });
    until_a_delivery_waits_on_the_lock(&app).await;

    let events = ["evt_1", "evt_2", "evt_3", "evt_4", "evt_5"];
    let mut waiting: Vec<_> =
        events.iter().map(|event| Box::pin(app.state.workers.deliver(apply(event)))).collect();
    for delivery in &mut waiting {
        assert!(queue(delivery).await, "answered while the only worker was busy");
    }
    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();

    assert!(matches!(first.await.unwrap(), Ok(Recorded::Processed { .. })));
    let answers = futures_util::future::join_all(waiting).await;
    assert_eq!(outcomes(&answers), ["processed"; 5]);
    assert_eq!(transactions_of(&app, &events).await, 1);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 6);
}

/// In either lane: a delivery of `evt_first`, made by `routed`, waits on
/// a lock its event's dedup row holds, past the workers' `STALLED_AFTER`; five other
/// deliveries that arrive behind it must be answered meanwhile, and it once
/// the lock is let go. Returns each one's outcome, the first's last.
async fn behind_a_lock_wait(routed: impl Fn(&str) -> Routed) -> Vec<&'static str> {
    // The default pool: more workers in each lane than run at once.
    let app =
        TestApp::spawn_with(TestConfig { lock_timeout: Duration::from_secs(60), ..TestConfig::default() })
            .await;
    let mut holder = hold_dedup_row(&app, "evt_first").await;
    let workers = app.state.workers.clone();
    let first = routed("evt_first");
    let mut first = tokio::spawn(async move { workers.deliver(first).await });
    until_a_delivery_waits_on_the_lock(&app).await;

    let events = ["evt_1", "evt_2", "evt_3", "evt_4", "evt_5"];
    let behind = events.iter().map(|event| app.state.workers.deliver(routed(event)));
    let mut answers = tokio::time::timeout(Duration::from_secs(10), futures_util::future::join_all(behind))
        .await
        .expect("the deliveries behind a lock wait were answered before it ended");
    assert!(queue(&mut first).await, "the first delivery still waits on the lock");

    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();
    answers.push(first.await.unwrap());
    outcomes(&answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_with_effects_waiting_on_a_lock_does_not_hold_up_the_deliveries_behind_it() {
    let routing = routing();
    let outcomes = behind_a_lock_wait(|event| {
        Routed::Apply(to_apply(&routing, &subscription_created(event, &format!("sub_of_{event}"))))
    })
    .await;
    assert_eq!(outcomes, ["processed"; 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_without_effects_waiting_on_a_lock_does_not_hold_up_the_deliveries_behind_it() {
    let outcomes = behind_a_lock_wait(|event| Routed::Record(to_record(delivery(event, "{}")))).await;
    assert_eq!(outcomes, ["processed"; 6]);
}
