//! For providers without an event log to read (Clerk through Svix, the
//! Standard Webhooks senders): the gap reconciliation can see,
//! the time since the provider's last verified delivery.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

use crate::operations::overview;

/// How long a provider has been silent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gap {
    /// The provider.
    pub provider: String,
    /// When its last verified delivery (a webhook, not an API read or a
    /// reprocess) was archived, if the archive still has one.
    pub last_verified_delivery_at: Option<DateTime<Utc>>,
    /// Seconds since then.
    pub gap_secs: Option<i64>,
}

/// The gap of `provider`, now.
pub async fn gap<'e>(executor: impl PgExecutor<'e>, provider: &str) -> sqlx::Result<Gap> {
    let last = overview::last_verified_delivery(executor, provider).await?;
    Ok(Gap {
        provider: provider.to_string(),
        last_verified_delivery_at: last,
        gap_secs: last.map(|at| (Utc::now() - at).num_seconds()),
    })
}
