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
    /// ran under, or the provider's API answered with), to join logs and archive.
    pub request_id: Option<String>,
    /// The W3C `traceparent` of the span the delivery was received (or
    /// reprocessed, or read back) in, when traces are exported: stored with
    /// its forwarding jobs, whose attempts join that trace.
    pub traceparent: Option<String>,
}

/// Where a delivery came from.
///
/// Why an enum: each source vouches for its payload differently, and the
/// archive records which (its `source` column names the variant).
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
        /// That row's signature (none for an event read from an API).
        signature: Option<String>,
        /// That row's secret index.
        secret_index: Option<usize>,
    },
    /// An event read back from the provider's event API (reconciliation):
    /// vouched for by the authenticated API call, so no signature; the
    /// delivery's `request_id` is the API's.
    Api,
}

impl Source {
    /// The archive's `source` value: `webhook`, `reprocess` or `api`.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Webhook { .. } => "webhook",
            Source::Reprocess { .. } => "reprocess",
            Source::Api => "api",
        }
    }

    /// The signature header recorded with the delivery, if it had one.
    pub fn signature(&self) -> Option<&str> {
        match self {
            Source::Webhook { signature, .. } => Some(signature),
            Source::Reprocess { signature, .. } => signature.as_deref(),
            Source::Api => None,
        }
    }

    /// Which configured secret verified the delivery, when known.
    pub fn secret_index(&self) -> Option<usize> {
        match self {
            Source::Webhook { secret_index, .. } => Some(*secret_index),
            Source::Reprocess { secret_index, .. } => *secret_index,
            Source::Api => None,
        }
    }

    /// The archive row an operator reprocessed, for a reprocess.
    pub fn reprocess_of(&self) -> Option<i64> {
        match self {
            Source::Webhook { .. } | Source::Api => None,
            Source::Reprocess { of, .. } => Some(*of),
        }
    }
}
