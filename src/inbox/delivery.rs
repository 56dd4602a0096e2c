//! One delivery, owned, from the HTTP handler (or an operator's reprocess)
//! to the database.

use crate::event::{Event, Payload};

/// A verified delivery, everything the archive records of it and everything
/// an effect reads. Built once, moved to a delivery worker, never reshaped.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The provider's name, the first half of the dedup key.
    pub provider: String,
    /// The event inside the delivery.
    pub event: Event,
    /// The body as the provider sent it (archived as `jsonb`).
    pub payload: Payload,
    /// Where the delivery came from, and what vouches for it.
    pub source: Source,
    /// The request id the delivery arrived with (or the operator's command
    /// ran under), to join logs and archive.
    pub request_id: Option<String>,
}

/// Where a delivery came from.
///
/// Why an enum: each source vouches for its payload differently, and the
/// archive records which. A new source (events read back from a provider's
/// API, say) is a new variant here and in the archive's columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A provider's request, verified on arrival.
    Webhook {
        /// The signature header as received.
        signature: String,
        /// Which configured secret verified it (0-based).
        secret_index: usize,
    },
    /// An operator ran an archived delivery again, unverified now because it
    /// was verified on arrival; its stored signature is kept.
    Reprocess {
        /// The archive row reprocessed.
        of: i64,
        /// That row's signature.
        signature: String,
        /// That row's secret index.
        secret_index: Option<usize>,
    },
}

impl Source {
    /// The signature header recorded with the delivery.
    pub fn signature(&self) -> &str {
        match self {
            Source::Webhook { signature, .. } | Source::Reprocess { signature, .. } => signature,
        }
    }

    /// Which configured secret verified the delivery, when known.
    pub fn secret_index(&self) -> Option<usize> {
        match self {
            Source::Webhook { secret_index, .. } => Some(*secret_index),
            Source::Reprocess { secret_index, .. } => *secret_index,
        }
    }

    /// The archive row an operator reprocessed, for a reprocess.
    pub fn reprocess_of(&self) -> Option<i64> {
        match self {
            Source::Webhook { .. } => None,
            Source::Reprocess { of, .. } => Some(*of),
        }
    }
}
