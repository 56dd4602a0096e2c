//! Jobs: one row per event and destination in `destination_jobs`, a queue
//! table of the engine (`crate::queue::sql`), written by the statement that
//! records the event for the first time (`inbox::archive`), for the
//! destinations that want it (here).

use bytes::Bytes;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::declaration::{Declaration, Destination, Ordering};
use super::entity::entity;
use crate::event::Event;
use crate::inbox::Forward;

impl Declaration {
    /// The jobs of `event` from `provider`: one per destination that wants
    /// it. Empty without destinations, at the cost of a check of an empty
    /// list.
    pub fn forwards(&self, provider: &str, event: &Event) -> Vec<Forward> {
        let mut keys = OrderingKeys::new(provider, event);
        self.iter()
            .filter(|destination| destination.wants(provider, &event.event_type))
            .map(|destination| Forward {
                destination: destination.name.clone(),
                ordering_key: keys.of(destination),
            })
            .collect()
    }
}

/// The ordering keys of one event, for each destination that asks: what a
/// live job and a backfilled one are written with. The payload is read
/// only when a destination orders, and once for all of them.
pub struct OrderingKeys<'a> {
    provider: &'a str,
    event: &'a Event,
    entity: Option<Option<String>>,
    data: Option<Option<serde_json::Value>>,
}

impl<'a> OrderingKeys<'a> {
    /// The keys of `event` from `provider`, none read yet.
    pub fn new(provider: &'a str, event: &'a Event) -> OrderingKeys<'a> {
        OrderingKeys { provider, event, entity: None, data: None }
    }

    /// The key of this event's job for `destination`; `None`: unordered.
    pub fn of(&mut self, destination: &Destination) -> Option<String> {
        let (provider, event) = (self.provider, self.event);
        match destination.ordering {
            Ordering::None => None,
            Ordering::Entity => self
                .entity
                .get_or_insert_with(|| entity(provider, &event.event_type, event.data.as_deref()))
                .clone(),
            Ordering::Key => {
                let data = self.data.get_or_insert_with(|| {
                    event.data.as_deref().and_then(|data| serde_json::from_str(data.get()).ok())
                });
                let pointers = destination.ordering_key.as_ref();
                data.as_ref().zip(pointers).and_then(|(data, pointers)| pointers.key(provider, data))
            }
        }
    }
}

/// A forwarding job its destination's queue claimed, with what its request needs.
#[derive(Debug, sqlx::FromRow)]
pub struct ClaimedJob {
    /// The job.
    pub id: i64,
    /// Proves the claim is still ours when recording.
    pub claim_token: Uuid,
    /// Attempts ever made, this one included: the attempt's number.
    pub attempts: i32,
    /// Attempts made before the last replay: the schedule counts from here.
    pub schedule_from: i32,
    /// The event's provider.
    pub provider: String,
    /// The event's id.
    pub event_id: String,
    /// The event's type.
    pub event_type: String,
    /// When the provider says it happened.
    pub occurred_at: Option<DateTime<Utc>>,
    /// The raw body.
    #[sqlx(try_from = "Vec<u8>")]
    pub body: Bytes,
    /// The trace context of the delivery the job was made from, if traced.
    pub traceparent: Option<String>,
    /// Made by a backfill: claimed after live jobs, and started after them.
    pub backfill: bool,
}

impl crate::queue::ClaimedRow for ClaimedJob {
    type Id = i64;

    fn id(&self) -> i64 {
        self.id
    }

    fn claim_token(&self) -> Uuid {
        self.claim_token
    }

    fn attempt(&self) -> u32 {
        u32::try_from(self.attempts - self.schedule_from).unwrap_or(1)
    }

    fn yields(&self) -> bool {
        self.backfill
    }
}
