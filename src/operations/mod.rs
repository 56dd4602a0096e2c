//! What operators do with the archive: find, inspect, reprocess and purge
//! deliveries. The CLI (`src/cli/`) and the admin API (`src/http/admin/`)
//! are two front ends to these same functions.

pub mod age;
pub mod filter;
pub mod purge;
pub mod query;
pub mod reprocess;
pub mod retention;

pub use age::{Age, Since};
pub use filter::{EventFilter, Status};
pub use purge::{Purged, RetentionPolicy};
pub use query::{ArchivedDelivery, ArchivedDeliveryDetail};
pub use reprocess::{ReprocessError, Reprocessed, Summary};
