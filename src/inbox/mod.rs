//! The inbox, the core: one verified [`Delivery`], recorded once in the
//! archive and the dedup table, and its event's effects committed if and
//! only if its dedup row is (DESIGN.md "One delivery, step by step").
//!
//! [`RoutingTable::route`] decides once whether the event has side effects; the
//! answer is a type. A [`ToRecord`] goes to the recording lane ([`record`],
//! [`record_together`]: one statement, batched, applies nothing); a
//! [`ToApply`] to the applying lane ([`apply`], [`apply_together`]: one
//! statement writes the records and the [`Effect`], batched; a transaction
//! with a savepoint after an error). [`Workers`] run both lanes on
//! connections they keep.

mod apply;
mod archive;
mod delivery;
mod effect;
mod error;
mod forwards;
mod record;
mod routing;
mod together;
mod workers;

use sqlx::PgConnection;

pub use apply::{apply, apply_together};
pub use delivery::{Delivery, Source};
pub use effect::{Effect, EffectError, SqlType, Value, Writes};
pub use error::InboxError;
pub use forwards::{Destinations, Forward, Forwards};
pub use record::{record, record_together};
pub use routing::{Routed, RoutingTable, ToApply, ToRecord};
pub use workers::{MIN_POOL_SIZE, RECORDERS, RESERVED_CONNECTIONS, Workers};

/// What became of a delivery once recorded: processed, a duplicate, or
/// failed. Every variant has been committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// First delivery of the event: its side effects are committed.
    Processed {
        /// The archive row of this delivery.
        archive_id: i64,
    },
    /// The event was already processed: archived SKIPPED, nothing applied.
    Duplicate {
        /// The archive row of this delivery.
        archive_id: i64,
    },
    /// The effect failed: nothing applied, archived FAILED with the error,
    /// no dedup row, so the next delivery of the event tries again.
    Failed {
        /// The archive row of this delivery.
        archive_id: i64,
        /// What went wrong, as stored in `error_message`.
        error: String,
    },
}

impl Recorded {
    /// A recording's result: processed if it was the event's first.
    fn of(archive_id: i64, first: bool) -> Recorded {
        match first {
            true => Recorded::Processed { archive_id },
            false => Recorded::Duplicate { archive_id },
        }
    }
}

/// Runs one delivery on `conn`, in its lane's way, outside the workers
/// (reprocessing, reconciliation). Returns `Ok` only after COMMIT has
/// returned. Not cancel safe, as [`apply`] is not: dropped half way, it
/// leaves `conn` inside its transaction, to be closed by its holder.
pub async fn deliver(conn: &mut PgConnection, delivery: &Routed) -> Result<Recorded, InboxError> {
    match delivery {
        Routed::Record(delivery) => record(conn, delivery).await,
        Routed::Apply(delivery) => apply(conn, delivery).await,
    }
}
