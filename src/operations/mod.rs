//! What operators do with the archive (find, inspect, reprocess and purge
//! deliveries) and with forwarding (destinations and their jobs). The CLI
//! (`src/cli/`), the admin API (`src/http/admin/`) and the console
//! (`src/http/console/`) are three front ends to these same functions.

pub mod age;
pub mod audit;
pub mod backfill;
pub mod bulk;
pub mod destinations;
pub mod display;
pub mod filter;
pub mod jobs;
pub mod maintenance;
pub mod overview;
pub mod page;
pub mod payload_match;
pub mod purge;
pub mod query;
pub mod reprocess;
pub mod side_effects;

pub use age::{Age, Since};
pub use filter::{EventFilter, Status};
pub use payload_match::PayloadMatch;
pub use purge::{Purged, RetentionPolicy};
pub use query::{ArchivedDelivery, ArchivedDeliveryDetail};
pub use reprocess::{ReprocessError, Reprocessed, Summary};
