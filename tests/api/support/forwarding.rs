//! Forwarding in the tests: an app whose configuration declares
//! destinations (test receivers), events delivered to it as a provider
//! would, and each destination's queue run by the engine at chosen times
//! until idle, or in the background as in `serve`.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use webhook_inbox::destinations::store::state;
use webhook_inbox::destinations::{Declaration, DestinationQueue, Forwarding};
use webhook_inbox::monitoring::Metrics;
use webhook_inbox::queue::{Engine, Tally};

use super::app::{Answer, TestApp, TestConfig};
use super::signing::{Delivery, PADDLE_SECRETS, now, paddle_signature};

/// The destination's signing secret (24 random bytes, as Svix issues them).
pub const SECRET: &str = "whsec_9hBNmFv3dVdZbK2sUmbJmS7k3dkqQDhW";

/// An older secret still declared during a rotation.
pub const OLD_SECRET: &str = "whsec_YTEyYjM0YzU2ZDc4ZTkwZjEyMzQ1Njc4";

/// The declaration of one destination, `app`, wanting every Paddle and
/// Clerk event, at `url`, signed with [`SECRET`], with `extra` TOML lines.
pub fn destination(url: &str, extra: &str) -> String {
    format!(
        "[[destinations]]\nname = \"app\"\nurl = \"{url}\"\nsecret = \"{SECRET}\"\nevents = [\"paddle:*\", \"clerk:*\"]\n{extra}\n"
    )
}

/// An app whose deliveries write jobs for the destinations `toml` declares,
/// which nothing sends until a test runs their queues ([`send_due`]).
pub async fn forwarding_app(toml: String) -> TestApp {
    TestApp::spawn_with(TestConfig {
        destinations: Some(toml),
        send_forwards: false,
        ..TestConfig::default()
    })
    .await
}

/// An app that also sends its jobs in the background, as `serve` does.
pub async fn sending_app(toml: String) -> TestApp {
    TestApp::spawn_with(TestConfig { destinations: Some(toml), ..TestConfig::default() }).await
}

/// A Paddle `customer.updated` body (no side effects) about entity `entity`,
/// number `seq` of its events, written with spacing and escapes that
/// `jsonb` would normalise away.
pub fn body(event_id: &str, entity: &str, seq: usize) -> String {
    format!(
        "{{\"event_id\": \"{event_id}\",  \"event_type\":\"customer.updated\", \"occurred_at\": \"2024-04-01T10:00:00Z\",\n \"data\": {{\"id\":\"{entity}\", \"seq\": {seq}, \"note\": \"caf\\u00e9\"}} }}"
    )
}

/// A signed Paddle delivery of exactly `body`.
pub fn paddle_raw(body: &str) -> Delivery {
    Delivery {
        path: "/billing/webhook".into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("paddle-signature".into(), paddle_signature(PADDLE_SECRETS[0], now(), body.as_bytes())),
        ],
        body: body.as_bytes().to_vec(),
    }
}

/// Delivers event `event_id` (number `seq` of `entity`) to `app`, as Paddle would.
pub async fn deliver(app: &TestApp, event_id: &str, entity: &str, seq: usize) -> Answer {
    app.send(&paddle_raw(&body(event_id, entity, seq))).await
}

/// Destination `name`'s queue, for [`send_due`].
pub fn queue(app: &TestApp, name: &str) -> Arc<DestinationQueue> {
    let declaration = &app.state.forwarding.declaration;
    Arc::new(DestinationQueue::new(
        declaration.get(name).unwrap().clone(),
        webhook_inbox::client::build(),
        None,
    ))
}

/// The engine's loop for `queue` at `now`, until no job is in flight or due.
pub async fn send_due(pool: &PgPool, queue: &Arc<DestinationQueue>, now: DateTime<Utc>) -> Tally {
    let engine = Engine::new(pool.clone(), Duration::from_millis(20));
    engine.run_until_idle(queue, now).await.unwrap()
}

/// Another replica's engine on `pool` sending to every destination of
/// `declaration`, looking for due jobs every 20 ms.
pub async fn run(pool: &PgPool, declaration: &Declaration) -> (Engine, Forwarding) {
    state::declare(pool, declaration).await.unwrap();
    let mut engine = Engine::new(pool.clone(), Duration::from_millis(20));
    let metrics = Metrics::new(&[]);
    let forwarding =
        Forwarding::start(declaration.clone(), webhook_inbox::client::build(), &mut engine, |name| {
            metrics.destination(name)
        });
    (engine, forwarding)
}

/// (status, attempts) of every job, by id.
pub async fn jobs(pool: &PgPool) -> Vec<(String, i32)> {
    sqlx::query_as("SELECT status, attempts FROM destination_jobs ORDER BY id").fetch_all(pool).await.unwrap()
}

/// Polls until every job is sent or dead (a generous bound only stops a hang).
pub async fn until_settled(pool: &PgPool) -> Vec<(String, i32)> {
    for _ in 0..3000 {
        let jobs = jobs(pool).await;
        if jobs.iter().all(|(status, _)| status != "pending") {
            return jobs;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("jobs still pending after a minute: {:?}", jobs(pool).await);
}
