//! Forwarding in the tests: a destination declared for a test receiver, its
//! jobs enqueued as the intake does, and its queue driven round by round at
//! chosen times or run in the background by the engine.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;
use sqlx::PgPool;
use webhook_inbox::destinations::{Declaration, DestinationQueue, Forwarding, enqueue, state};
use webhook_inbox::event::Event;
use webhook_inbox::monitoring::Metrics;
use webhook_inbox::queue::{self, Engine, Round};

/// The destination's signing secret (24 random bytes, as Svix issues them).
pub const SECRET: &str = "whsec_9hBNmFv3dVdZbK2sUmbJmS7k3dkqQDhW";

/// An older secret still declared during a rotation.
pub const OLD_SECRET: &str = "whsec_YTEyYjM0YzU2ZDc4ZTkwZjEyMzQ1Njc4";

/// A declaration of one destination, `app`, sending every Paddle and Clerk
/// event to `url`, signed with [`SECRET`], with `extra` TOML lines.
pub fn declaration(url: &str, extra: &str) -> Declaration {
    declare(&format!(
        "[[destinations]]\nname = \"app\"\nurl = \"{url}\"\nsecret = \"{SECRET}\"\nevents = [\"paddle:*\", \"clerk:*\"]\n{extra}\n"
    ))
}

/// A declaration from TOML text.
pub fn declare(toml: &str) -> Declaration {
    Declaration::parse(toml, "test.toml", |_| None).unwrap()
}

/// A Paddle-style body about entity `entity`, number `seq` of its events,
/// written with spacing and escapes that `jsonb` would normalise away.
pub fn body(event_id: &str, entity: &str, seq: usize) -> String {
    format!(
        "{{\"event_id\": \"{event_id}\",  \"event_type\":\"subscription.updated\",\n \"data\": {{\"id\":\"{entity}\", \"seq\": {seq}, \"note\": \"caf\\u00e9\"}} }}"
    )
}

/// Inserts the jobs of a Paddle `subscription.updated` event whose raw
/// body is `body`, in a transaction, as the intake does; returns how many.
pub async fn enqueue_event(pool: &PgPool, declaration: &Declaration, event_id: &str, body: &str) -> u64 {
    #[derive(serde::Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        data: Option<&'a RawValue>,
    }
    let envelope: Envelope<'_> = serde_json::from_str(body).unwrap();
    let event = Event {
        id: event_id.into(),
        event_type: "subscription.updated".into(),
        occurred_at: Some("2024-04-01T10:00:00Z".parse().unwrap()),
        notification_id: None,
        data: envelope.data.map(ToOwned::to_owned),
    };
    let jobs = declaration.jobs_for("paddle", &event, body.as_bytes());
    let mut tx = pool.begin().await.unwrap();
    let inserted = enqueue(&mut tx, &jobs).await.unwrap();
    tx.commit().await.unwrap();
    inserted
}

/// Writes the declaration's state rows, as `serve` does at startup.
pub async fn declare_state(pool: &PgPool, declaration: &Declaration) {
    state::declare(pool, declaration).await.unwrap();
}

/// Destination `name`'s queue, to drive round by round.
pub fn queue(declaration: &Declaration, name: &str) -> DestinationQueue {
    DestinationQueue::new(declaration.get(name).unwrap().clone(), webhook_inbox::client::build(), None)
}

/// One round of `queue` at `now`.
pub async fn round(pool: &PgPool, queue: &DestinationQueue, now: DateTime<Utc>) -> Round {
    queue::deliver_due(pool, queue, now).await.unwrap()
}

/// The engine running every destination of `declaration` in the background,
/// looking for due jobs every 20 ms.
pub async fn run(pool: &PgPool, declaration: Declaration) -> (Engine, Forwarding) {
    declare_state(pool, &declaration).await;
    let mut engine = Engine::new(pool.clone(), Duration::from_millis(20));
    let forwarding =
        Forwarding::start(declaration, webhook_inbox::client::build(), &mut engine, &Metrics::new(&[]));
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
