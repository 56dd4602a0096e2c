//! Reconciliation: the providers' own event logs read back, so an outage
//! longer than a provider's retry window loses nothing (README "Missed
//! events", DESIGN.md "Reconciliation").
//!
//! A provider's [`EventLog`] (`paddle`, `stripe`) reads pages of events
//! through an [`ApiClient`] (timeouts, retries, `Retry-After`, the key never
//! shown). [`reconcile`] reads from the provider's stored mark and puts each
//! event the dedup table lacks through the inbox like a webhook, with
//! [`inbox::Source::Api`](crate::inbox::Source::Api): same provider, same
//! event id, so the dedup table makes it exactly once against any webhook
//! of the same event. GitHub keeps no event log: its [`GitHubHook`] lists
//! the hook's delivery attempts and `redeliver` asks GitHub to send again
//! each one the dedup table lacks, to arrive as a webhook. [`state`] keeps the mark, the last run, and the lock
//! that keeps one run per provider at a time; [`periodic`] runs it inside
//! `serve`, every replica taking turns. A provider without a log to
//! read gets its [`gap`]: how long since its last verified delivery.

mod client;
mod configure;
mod gap;
mod github;
mod log;
mod paddle;
mod pages;
pub mod periodic;
mod redeliver;
mod run;
pub mod state;
mod stripe;

pub use client::{ApiClient, MAX_PAGE_BYTES, ProviderApiError, UnexpectedAnswer};
pub use configure::{Log, LogError, PROVIDERS};
pub use gap::{Gap, gap};
pub use github::{AttemptsPage, DeliveryAttempt, GitHubHook, HookScope};
pub use log::{EventLog, Order, Page, Start};
pub use paddle::PaddleLog;
pub use pages::MAX_PAGES;
pub use run::{
    FIRST_RUN_LOOKBACK, FailedEvent, OVERLAP, Options, Reader, ReconcileError, Summary, reconcile,
};
pub use stripe::StripeLog;

use sqlx::PgPool;

use crate::inbox::RoutingTable;

impl Log {
    /// The provider whose log it is.
    pub fn provider(&self) -> &'static str {
        match self {
            Log::Paddle(log) => log.provider(),
            Log::Stripe(log) => log.provider(),
            Log::GitHub(hook) => hook.provider(),
        }
    }

    /// Runs [`reconcile`] on this log.
    pub async fn reconcile(
        &self,
        pool: &PgPool,
        routing: &RoutingTable,
        options: &Options,
    ) -> Result<Summary, ReconcileError> {
        match self {
            Log::Paddle(log) => reconcile(pool, routing, log, options).await,
            Log::Stripe(log) => reconcile(pool, routing, log, options).await,
            Log::GitHub(hook) => reconcile(pool, routing, hook, options).await,
        }
    }
}
