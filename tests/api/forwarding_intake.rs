//! Jobs are written with the dedup row, in the same statement, on both
//! lanes: one per destination that wants the event, only for its first
//! recording; a duplicate, however concurrent, never makes one; an effect's
//! failure rolls them back, and its reprocess writes them when it succeeds.

use std::sync::Arc;

use axum::http::StatusCode;
use webhook_inbox::destinations::{Declaration, Forwarding};
use webhook_inbox::event::Event;
use webhook_inbox::inbox::{InboxError, Recorded, Routed, RoutingTable, Source, ToRecord, record_together};

use crate::support::app::processed_at_once;
use crate::support::forwarding::*;
use crate::support::*;

/// `(event_id, destination)` of every job, in order.
async fn job_keys(app: &TestApp) -> Vec<(String, String)> {
    sqlx::query_as("SELECT event_id, destination FROM destination_jobs ORDER BY event_id, destination")
        .fetch_all(app.pool())
        .await
        .unwrap()
}

/// Sends `delivery` `copies` times at once; returns how many were answered
/// `processed`.
async fn at_once(app: &TestApp, delivery: &Delivery, copies: usize) -> usize {
    processed_at_once(vec![(app.router.clone(), delivery.clone()); copies]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_concurrent_copies_of_an_event_make_one_job_whichever_lane_it_takes() {
    let app = forwarding_app(destination("http://127.0.0.1:9/unused", "")).await;
    // Without side effects (the recording lane), and with (the applying lane).
    let recorded = paddle_raw(&body("evt_plain", "ctm_A", 1));
    let applied = paddle(&subscription_created("evt_effect", "sub_01"));

    let (first, second) = tokio::join!(at_once(&app, &recorded, 10), at_once(&app, &applied, 10));

    assert_eq!((first, second), (1, 1));
    assert_eq!(
        job_keys(&app).await,
        [("evt_effect".into(), "app".into()), ("evt_plain".into(), "app".into())]
    );
    // The job carries the bytes the provider sent, not the archive's jsonb.
    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT body FROM destination_jobs WHERE event_id = 'evt_plain'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(stored, body("evt_plain", "ctm_A", 1).as_bytes());
}

#[tokio::test]
async fn a_failed_effect_writes_no_job_and_its_reprocess_writes_it_once_it_succeeds() {
    let toml = destination("http://127.0.0.1:9/unused", "");
    let app = forwarding_app(toml.clone()).await;
    app.refuse_inserts_into("credit_grants").await;
    let answer = app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(job_keys(&app).await.is_empty(), "rolled back with the dedup row");
    let failed = app.archive_ids().await[0];
    app.allow_inserts_into("credit_grants").await;

    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), toml).unwrap();
    let path = config.path().to_str().unwrap();
    let credits = ["--paddle-price-credits", PRICE_CREDITS];
    cli(&app.db, &[&["--config", path, "events", "reprocess", &failed.to_string()][..], &credits].concat())
        .await
        .ok();
    assert_eq!(job_keys(&app).await, [("evt_01".into(), "app".into())]);

    // Reprocessing again, or the provider's retry, makes no second job.
    cli(&app.db, &[&["--config", path, "events", "reprocess", &failed.to_string()][..], &credits].concat())
        .await
        .ok();
    assert_eq!(app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await.body["idempotent"], true);
    assert_eq!(job_keys(&app).await.len(), 1);
}

#[tokio::test]
async fn each_destination_that_wants_an_event_gets_one_job_and_no_other_does() {
    let destinations = |name: &str, events: &str| {
        format!(
            "[[destinations]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:9/\"\nsecret = \"{SECRET}\"\nevents = {events}\n"
        )
    };
    let app = forwarding_app(
        [
            destinations("billing", "[\"paddle:customer.*\", \"paddle:subscription.created\"]"),
            destinations("accounts", "[\"clerk:*\"]"),
            destinations("audit", "[\"paddle:*\", \"clerk:user.created\"]"),
        ]
        .concat(),
    )
    .await;

    deliver(&app, "evt_customer", "ctm_A", 1).await;
    app.send(&paddle(&subscription_created("evt_sub", "sub_01"))).await;
    app.send(&clerk("msg_user", &user_created("user_01"))).await;
    // No destination wants Stripe or GitHub events.
    app.send(&stripe(&stripe_event("evt_stripe", "invoice.paid"))).await;
    app.send(&github("gh-1", "issues", &issue_opened())).await;

    assert_eq!(
        job_keys(&app).await,
        [
            ("evt_customer".into(), "audit".into()),
            ("evt_customer".into(), "billing".into()),
            ("evt_sub".into(), "audit".into()),
            ("evt_sub".into(), "billing".into()),
            ("msg_user".into(), "accounts".into()),
            ("msg_user".into(), "audit".into()),
        ]
    );
}

/// A recording-lane delivery of event `id` from Paddle with a raw `payload`.
fn to_record(routing: &RoutingTable, id: &str, payload: &str) -> ToRecord {
    let delivery = webhook_inbox::inbox::Delivery {
        provider: "paddle".into(),
        event: Event {
            data: serde_json::from_str(r#"{"id":"ctm_1"}"#).ok(),
            ..Event::new(id.into(), "customer.updated".into())
        },
        payload: payload.to_string().try_into().unwrap(),
        source: Source::Webhook { signature: "ts=1;h1=00".into(), secret_index: 0 },
        request_id: None,
        traceparent: None,
    };
    match routing.route(delivery) {
        Routed::Record(delivery) => delivery,
        Routed::Apply(_) => unreachable!("no effects"),
    }
}

#[tokio::test]
async fn deliveries_recorded_together_write_their_jobs_in_the_same_statement_and_a_fallback_keeps_them() {
    let app = TestApp::spawn().await;
    let declaration =
        Declaration::parse(&destination("http://127.0.0.1:9/", "ordering = \"entity\""), "test.toml", |_| {
            None
        })
        .unwrap();
    let routing = RoutingTable::default().with_destinations(Arc::new(Forwarding::declared(declaration)));
    let mut conn = app.pool().acquire().await.unwrap();
    let fallbacks = app.state.metrics.batch_fallbacks();
    let good = r#"{"event_id":  "x"}"#;

    // A batch: two new events, and one repeated within it.
    let batch = [
        to_record(&routing, "evt_a", good),
        to_record(&routing, "evt_b", good),
        to_record(&routing, "evt_a", good),
    ];
    let results = record_together(&mut conn, &batch.iter().collect::<Vec<_>>(), &fallbacks).await;
    assert!(
        matches!(
            results[..],
            [Ok(Recorded::Processed { .. }), Ok(Recorded::Processed { .. }), Ok(Recorded::Duplicate { .. })]
        ),
        "{results:?}"
    );
    // A batch PostgreSQL refuses (one payload is not storable): one at a time.
    let unstorable = r#"{"name": "nul\u0000"}"#;
    let batch = [
        to_record(&routing, "evt_b", good),
        to_record(&routing, "evt_c", unstorable),
        to_record(&routing, "evt_d", good),
    ];
    let results = record_together(&mut conn, &batch.iter().collect::<Vec<_>>(), &fallbacks).await;
    assert!(matches!(results[1], Err(InboxError::UnstorablePayload)), "{results:?}");

    let jobs: Vec<(String, Option<String>, Vec<u8>)> =
        sqlx::query_as("SELECT event_id, ordering_key, body FROM destination_jobs ORDER BY event_id")
            .fetch_all(app.pool())
            .await
            .unwrap();
    let expected = |id: &str| (id.to_string(), Some("paddle:ctm_1".to_string()), good.as_bytes().to_vec());
    assert_eq!(jobs, [expected("evt_a"), expected("evt_b"), expected("evt_d")]);
}

#[tokio::test]
async fn a_replay_of_an_event_whose_sent_job_was_purged_is_not_forwarded_again() {
    let app = TestApp::spawn().await;
    let declaration =
        Declaration::parse(&destination("http://127.0.0.1:9/", ""), "test.toml", |_| None).unwrap();
    let routing = RoutingTable::default().with_destinations(Arc::new(Forwarding::declared(declaration)));
    let mut conn = app.pool().acquire().await.unwrap();
    let fallbacks = app.state.metrics.batch_fallbacks();
    let payload = r#"{"event_id": "x"}"#;
    let first = [to_record(&routing, "evt_1", payload), to_record(&routing, "evt_2", payload)];
    record_together(&mut conn, &first.iter().collect::<Vec<_>>(), &fallbacks).await;
    let alone = to_record(&routing, "evt_3", payload);
    webhook_inbox::inbox::record(&mut conn, &alone).await.unwrap();
    assert_eq!(app.count("SELECT count(*) FROM destination_jobs").await, 3);
    // Sent, and purged by retention since.
    sqlx::query("DELETE FROM destination_jobs").execute(app.pool()).await.unwrap();

    // The provider replays them, alone and together: the dedup table, not
    // the jobs table, decides.
    let replays = [to_record(&routing, "evt_1", payload), to_record(&routing, "evt_3", payload)];
    let results = record_together(&mut conn, &replays.iter().collect::<Vec<_>>(), &fallbacks).await;
    assert!(results.iter().all(|r| matches!(r, Ok(Recorded::Duplicate { .. }))), "{results:?}");
    let replay = to_record(&routing, "evt_2", payload);
    assert!(matches!(webhook_inbox::inbox::record(&mut conn, &replay).await, Ok(Recorded::Duplicate { .. })));
    assert_eq!(app.count("SELECT count(*) FROM destination_jobs").await, 0);
}
