//! What reconciliation needs of a provider's event API: pages of events,
//! each event the same JSON object its webhook carries.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;

use super::client::ProviderApiError;

/// Which way a log's pages run, which decides when the mark may move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Oldest first (Paddle): everything before a page's end has been read
    /// once the page is done, so the mark moves after each page.
    OldestFirst,
    /// Newest first (Stripe): the older events come last, so the mark moves
    /// only when the run reaches the start.
    NewestFirst,
}

/// Where a run starts reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The provider's cursor to read after (an event id), for logs that page by id.
    pub after: Option<String>,
    /// The oldest event time the run wants; for a log read by id without a
    /// cursor, events before it are read and left alone.
    pub since: DateTime<Utc>,
}

/// One page of a provider's events.
#[derive(Debug)]
pub struct Page {
    /// The events, each as the provider's API wrote it.
    pub events: Vec<Box<RawValue>>,
    /// The API's id for the request, recorded in place of a signature.
    pub request_id: Option<String>,
    /// What reads the next page, if there is one.
    pub next: Option<String>,
}

/// A provider's event log, read page by page.
pub trait EventLog: Send + Sync {
    /// The provider's name (the `provider` column).
    fn provider(&self) -> &'static str;

    /// Which way its pages run.
    fn order(&self) -> Order;

    /// The first page from `start`, or the page `next` names.
    fn read(
        &self,
        start: &Start,
        next: Option<&str>,
    ) -> impl Future<Output = Result<Page, ProviderApiError>> + Send;
}
