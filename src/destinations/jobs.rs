//! Jobs: one row per event and destination in `destination_jobs`, a queue
//! table of the engine (`crate::queue::sql`), written by the statement that
//! records the event for the first time (`inbox::archive`), for the
//! destinations that want it (here).

use bytes::Bytes;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::declaration::{Declaration, Ordering};
use super::entity::entity;
use crate::event::Event;
use crate::inbox::Forward;

impl Declaration {
    /// The jobs of `event` from `provider`: one per destination that wants
    /// it. Empty without destinations, at the cost of a check of an empty
    /// list.
    pub fn forwards(&self, provider: &str, event: &Event) -> Vec<Forward> {
        let mut entity_of_event = None;
        let mut data_of_event = None;
        self.iter()
            .filter(|destination| destination.wants(provider, &event.event_type))
            .map(|destination| Forward {
                destination: destination.name.clone(),
                // Read from the payload only when a destination asks for it.
                ordering_key: match destination.ordering {
                    Ordering::None => None,
                    Ordering::Entity => entity_of_event
                        .get_or_insert_with(|| entity(provider, &event.event_type, event.data.as_deref()))
                        .clone(),
                    Ordering::Key => {
                        let data = data_of_event.get_or_insert_with(|| {
                            event.data.as_deref().and_then(|data| serde_json::from_str(data.get()).ok())
                        });
                        let pointers = destination.ordering_key.as_ref();
                        data.as_ref().zip(pointers).and_then(|(data, pointers)| pointers.key(provider, data))
                    }
                },
            })
            .collect()
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
}
