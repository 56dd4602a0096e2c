//! Forwarding under faults: a declaration file for the real binary, events
//! about a few entities, and what the receiver saw, checked against what
//! forwarding promises: every event at least once; a second arrival only for
//! a job that was in flight at a crash; the events of one entity, to a
//! destination with `ordering = "entity"`, in the order they were recorded
//! and never two at once.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use tempfile::TempDir;

use super::provider::{Event, Provider};
use super::receiver::{Arrival, Receiver};
use super::signing::paddle;
use super::watch::until;

/// The destinations' signing secret, which the receiver verifies with.
pub const SECRET: &str = "whsec_9hBNmFv3dVdZbK2sUmbJmS7k3dkqQDhW";

/// Where destination `ordered` (`ordering = "entity"`) posts.
pub const ORDERED: &str = "/ordered";
/// Where destination `unordered` posts.
pub const UNORDERED: &str = "/unordered";

/// Where destination `steady` posts, when declared.
pub const STEADY: &str = "/steady";

/// Failed attempts in a row that open a destination's circuit.
pub const CIRCUIT_FAILURES: u32 = 10;

/// The paths of both destinations, each wanting every Paddle event.
pub const PATHS: [&str; 2] = [ORDERED, UNORDERED];

/// A declaration file (`CONFIG_FILE`) for the service, removed on drop.
pub struct DeclarationFile {
    dir: TempDir,
}

impl DeclarationFile {
    /// Declares `ordered` and `unordered` on `receiver`, each with `timeout`,
    /// a retry schedule of short delays long enough to outlast any fault of
    /// a test, and a circuit breaker that probes again after a second.
    pub fn write(receiver: &Receiver, timeout: &str) -> DeclarationFile {
        DeclarationFile::write_with(receiver, timeout, None)
    }

    /// [`DeclarationFile::write`], and a third destination, `steady`
    /// (unordered, the same settings), on `steady` at [`STEADY`].
    pub fn write_beside(receiver: &Receiver, timeout: &str, steady: &Receiver) -> DeclarationFile {
        DeclarationFile::write_with(receiver, timeout, Some(steady))
    }

    fn write_with(receiver: &Receiver, timeout: &str, steady: Option<&Receiver>) -> DeclarationFile {
        let dir = tempfile::tempdir().unwrap();
        let destination = |name: &str, url: String, ordering: &str| {
            format!(
                "[[destinations]]\nname = \"{name}\"\nurl = \"{url}\"\nsecret = \"{SECRET}\"\n\
                 events = [\"paddle:*\"]\ntimeout = \"{timeout}\"\nordering = \"{ordering}\"\n\
                 retry_schedule = [{}]\ncircuit_breaker = {{ failures = {CIRCUIT_FAILURES}, cooldown = \"1s\" }}\n",
                vec!["\"100ms\""; 100].join(", "),
            )
        };
        let mut destinations = vec![
            destination("ordered", receiver.url_of(ORDERED), "entity"),
            destination("unordered", receiver.url_of(UNORDERED), "none"),
        ];
        if let Some(steady) = steady {
            destinations.push(destination("steady", steady.url_of(STEADY), "none"));
        }
        let toml = destinations.join("\n");
        std::fs::write(dir.path().join("destinations.toml"), toml).unwrap();
        DeclarationFile { dir }
    }

    /// The environment that makes a service read it, and look for due jobs
    /// often (an expired lease is claimed within 100 ms).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CONFIG_FILE", self.dir.path().join("destinations.toml").display().to_string()),
            ("QUEUE_POLL_INTERVAL_MS", "100".to_string()),
        ]
    }
}

/// `env` as [`super::Service::start`] takes it.
pub fn env_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(name, value)| (*name, value.as_str())).collect()
}

/// Events `from..=to` of each of `entities` entities (a Paddle
/// `customer.updated`, without side effects, `data.seq` its number), in the
/// order they are to be recorded: all the first ones, then the second...
pub fn events_about(run: &str, entities: usize, from: u64, to: u64) -> Vec<Event> {
    (from..=to)
        .flat_map(|seq| {
            (0..entities).map(move |entity| {
                let id = format!("evt_{run}_{entity}_{seq:03}");
                let body = json!({
                    "event_id": id,
                    "event_type": "customer.updated",
                    "occurred_at": "2024-04-12T10:18:49.621022Z",
                    "data": { "id": format!("ctm_{run}_{entity}"), "seq": seq }
                });
                Event { id, delivery: paddle(&body), grants: false }
            })
        })
        .collect()
}

/// Records `events` in their order: each is sent (to the next of `addrs`)
/// until it is answered 2xx before the next is sent.
pub async fn record_in_order(provider: &Provider, addrs: &[SocketAddr], events: &[Event]) {
    for (n, event) in events.iter().enumerate() {
        provider.until_2xx(&addrs[n % addrs.len()..], &event.delivery, Duration::from_millis(20)).await;
    }
}

/// Polls until `count` jobs exist and all are sent.
pub async fn until_all_sent(pool: &PgPool, count: i64) {
    until(&format!("{count} jobs sent"), async || {
        let (jobs, sent): (i64, i64) =
            sqlx::query_as("SELECT count(*), count(*) FILTER (WHERE status = 'sent') FROM destination_jobs")
                .fetch_one(pool)
                .await
                .unwrap();
        jobs == count && sent == count
    })
    .await;
}

/// The `(path, event id)` of the jobs not sent, among those of `arrived`.
pub async fn unsent(pool: &PgPool, arrived: &BTreeSet<(String, String)>) -> BTreeSet<(String, String)> {
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT destination, event_id FROM destination_jobs WHERE status <> 'sent'")
            .fetch_all(pool)
            .await
            .unwrap();
    rows.into_iter()
        .map(|(destination, event)| (format!("/{destination}"), event))
        .filter(|job| arrived.contains(job))
        .collect()
}

/// What the receiver saw, by destination (path) and event.
#[derive(Debug)]
pub struct Seen {
    /// Arrivals of each `(path, event id)`.
    pub arrivals: BTreeMap<(String, String), usize>,
}

impl Seen {
    /// Checks every arrival so far against `events`, and panics on a broken
    /// promise: an arrival the independent verifier refused; an event that
    /// did not reach each destination; an event whose arrivals carry
    /// different `webhook-id`s; an entity whose events reached `/ordered`
    /// out of the order they were recorded in, or two at a time.
    pub fn check(receiver: &Receiver, events: &[Event]) -> Seen {
        let all = receiver.arrivals();
        let mut arrivals: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut ids: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for arrival in &all {
            assert_eq!(arrival.verified, Ok(()), "{arrival:?}");
            let job = (arrival.path.clone(), arrival.header("webhook-inbox-event-id").to_string());
            *arrivals.entry(job.clone()).or_default() += 1;
            ids.entry(job).or_default().insert(arrival.header("webhook-id").to_string());
        }
        for path in PATHS {
            for event in events {
                let job = (path.to_string(), event.id.clone());
                assert!(arrivals.contains_key(&job), "{job:?} never arrived");
                assert_eq!(ids[&job].len(), 1, "{job:?} arrived with several webhook-ids: {:?}", ids[&job]);
            }
        }
        assert_eq!(
            arrivals.keys().map(|(_, id)| id).collect::<BTreeSet<_>>(),
            events.iter().map(|e| &e.id).collect::<BTreeSet<_>>(),
            "only the events sent arrive"
        );
        let mut entities: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for arrival in all.iter().filter(|a| a.path == ORDERED) {
            let (entity, seq) = about(arrival);
            entities.entry(entity).or_default().push(seq);
        }
        for (entity, seqs) in &entities {
            assert!(seqs.is_sorted(), "{entity} arrived out of order: {seqs:?}");
        }
        assert_eq!(receiver.most_at_once_per_entity_at(ORDERED), 1, "two events of one entity at once");
        Seen { arrivals }
    }

    /// The jobs that arrived more than once.
    pub fn repeated(&self) -> BTreeSet<(String, String)> {
        self.arrivals.iter().filter(|(_, n)| **n > 1).map(|(job, _)| job.clone()).collect()
    }

    /// Arrivals beyond each job's first.
    pub fn second_arrivals(&self) -> usize {
        self.arrivals.values().map(|n| n - 1).sum()
    }
}

/// The `(path, event id)` of every arrival so far.
pub fn arrived(receiver: &Receiver) -> BTreeSet<(String, String)> {
    receiver
        .arrivals()
        .iter()
        .map(|a| (a.path.clone(), a.header("webhook-inbox-event-id").to_string()))
        .collect()
}

/// The entity and number of the event an arrival carries.
fn about(arrival: &Arrival) -> (String, u64) {
    let json = arrival.json();
    (json["data"]["id"].as_str().unwrap().to_string(), json["data"]["seq"].as_u64().unwrap())
}
