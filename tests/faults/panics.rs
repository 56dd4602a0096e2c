//! An effect that panics: its delivery is answered 500 and archived FAILED,
//! nothing of it is written, and the process keeps serving.
//!
//! The service has no effect that panics, so this one runs the app
//! in-process (still over a real socket), with an effect that panics for
//! some events: `inbox::Effect` is the seam the inbox takes effects through.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use tokio::net::TcpListener;
use tokio::sync::Barrier;
use webhook_inbox::effects::billing::PriceCredits;
use webhook_inbox::effects::billing::subscriptions::SubscriptionCreated;
use webhook_inbox::event::Event as InboxEvent;
use webhook_inbox::http::{AppState, ConnectionLimits, Limits, app, serve};
use webhook_inbox::inbox::{Effect, EffectError, Value, Writes};
use webhook_inbox::providers::Registry;
use webhook_inbox::providers::paddle;

use crate::support::provider::attempt;
use crate::support::*;

/// The service's `subscription.created`, except that events whose id starts
/// with `evt_panic` panic while the effect reads them, as a bug would.
struct PanicsSometimes(SubscriptionCreated);

impl Effect for PanicsSometimes {
    fn writes(&self) -> Writes {
        self.0.writes()
    }

    fn input<'e>(&self, event: &'e InboxEvent) -> Result<Vec<Value<'e>>, EffectError> {
        if event.id.starts_with("evt_panic") {
            let items: Vec<u32> = Vec::new();
            let _ = items[3]; // index out of bounds
        }
        self.0.input(event)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_effect_answers_500_is_archived_failed_and_the_process_keeps_serving() {
    let db = TestDatabase::create().await;
    let options = webhook_inbox::db::session_options(db.connect_options(), Default::default());
    let pool = PgPoolOptions::new().max_connections(8).connect_with(options).await.unwrap();
    let providers = Registry::default()
        .with(paddle::SPEC.verifier(&[SecretString::from(PADDLE_SECRETS[0])], 300).unwrap());
    let credits: PriceCredits = "pri_basic=100,pri_unlisted=0".parse().unwrap();
    let effects = webhook_inbox::effects::all(credits.clone()).on(
        "paddle",
        "subscription.created",
        PanicsSometimes(SubscriptionCreated(Arc::new(credits))),
    );
    let limits = Limits { max_body_bytes: 65536, body_read_timeout: Duration::from_secs(5) };
    let state = AppState::new(pool, providers, effects, limits);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        app(state.clone()),
        state.workers.clone(),
        ConnectionLimits { max_connections: 64, header_read_timeout: Duration::from_secs(5) },
        async { stopped.await.unwrap_or(()) },
        Duration::from_secs(10),
    ));

    // Ten panicking deliveries and ten good ones, all at once.
    let panicking: Vec<_> = (0..10).map(|n| format!("evt_panic_{n}")).collect();
    let good = Event::mixed("calm", 20).into_iter().step_by(2).collect::<Vec<_>>();
    let deliveries: Vec<(String, Delivery)> = panicking
        .iter()
        .map(|id| (id.clone(), paddle(&subscription_created(id, &format!("sub_{id}")))))
        .chain(good.iter().map(|e| (e.id.clone(), e.delivery.clone())))
        .collect();
    let barrier = Arc::new(Barrier::new(deliveries.len()));
    let requests: Vec<_> = deliveries
        .into_iter()
        .map(|(id, delivery)| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                (id, attempt(addr, &delivery).await.answer.expect("answered"))
            })
        })
        .collect();
    for request in requests {
        let (id, answer) = request.await.unwrap();
        if id.starts_with("evt_panic") {
            assert_eq!(answer.status, 500);
            assert_eq!(
                answer.body,
                json!({ "error": "event handler failed; the delivery is archived as FAILED", "event_id": id })
            );
        } else {
            assert_eq!((answer.status, answer.body), (200, json!({ "event_id": id, "status": "processed" })));
        }
    }

    // Archived FAILED with the panic's message; the write before the panic
    // is rolled back with the dedup row.
    let failed: Vec<(String, String)> = sqlx::query_as(
        "SELECT event_id, error_message FROM webhook_events WHERE processing_status = 'FAILED' ORDER BY event_id",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert_eq!(failed.len(), panicking.len());
    for ((event_id, error), id) in failed.iter().zip(&panicking) {
        assert_eq!(event_id, id);
        assert!(error.starts_with("handler panicked: index out of bounds"), "{error}");
    }
    let partial: i64 = sqlx::query_scalar("SELECT count(*) FROM subscriptions WHERE id LIKE 'sub_partial_%'")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(partial, 0);
    let panicked_dedup: i64 =
        sqlx::query_scalar("SELECT count(*) FROM processed_webhook_events WHERE event_id LIKE 'evt_panic%'")
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(panicked_dedup, 0);

    // Still serving: a new event is applied, and the provider's retry of a
    // panicking one fails the same way (FAILED again, nothing applied).
    let later = Event::mixed("later", 1).remove(0);
    assert_eq!(attempt(addr, &later.delivery).await.answer.unwrap().status, 200);
    let retry = paddle(&subscription_created(&panicking[0], "sub_x"));
    assert_eq!(attempt(addr, &retry).await.answer.unwrap().status, 500);

    let ledger = Ledger::count(db.pool(), &[good.clone(), vec![later]].concat()).await;
    // The events: the panicking ones, the good ones and `later`; the
    // requests: one for each, and the retry.
    let events = panicking.len() + good.len() + 1;
    Report {
        fault: "panicking handler",
        events,
        deliveries: events + 1,
        ledger: Some(&ledger),
        notes: format!(
            "{} deliveries whose handler writes then panics, fired with {} good ones: the {} answered 500, \
             archived FAILED (\"handler panicked: ...\"), their writes rolled back; the {} good events \
             applied once; the process kept serving",
            panicking.len(),
            good.len(),
            failed.len(),
            ledger.applied_once
        ),
    }
    .print();
    ledger.assert_exactly_once();

    stop.send(()).unwrap();
    assert!(server.await.unwrap());
}
