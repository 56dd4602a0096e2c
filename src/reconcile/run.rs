//! One reconciliation run: read a provider's log from the mark, and put
//! every event the dedup table lacks through the inbox, as a webhook would.

use std::collections::HashSet;
use std::time::Instant;

use axum::http::HeaderMap;
use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};
use tracing::instrument;

use super::client::ProviderApiError;
use super::log::{EventLog, Order, Page, Start};
use super::pages::{EndlessPages, Pages};
use super::state::{self, Mark, Tracker};
use crate::db::SessionLock;
use crate::event::{self, Event, Payload};
use crate::inbox::{self, Delivery, InboxError, Recorded, RoutingTable, Source};
use crate::providers;
use crate::telemetry;

/// How far behind the newest event read the mark stands (see [`Tracker`]).
pub const OVERLAP: TimeDelta = TimeDelta::minutes(10);

/// How far back a provider's first run reads, without `--since`: past the
/// longest retry window (Paddle's and Stripe's, 3 days), with a margin.
pub const FIRST_RUN_LOOKBACK: TimeDelta = TimeDelta::days(7);

/// What a run is asked to do.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Read from this time instead of the stored mark.
    pub since: Option<DateTime<Utc>>,
    /// Read and compare, write nothing (no event, no mark, no run).
    pub dry_run: bool,
}

/// Why a run stopped. The events it applied before stay applied, and the
/// mark stays where the last complete page left it.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Another process is reconciling the provider.
    #[error("another process is reconciling {0} right now")]
    AlreadyRunning(&'static str),
    /// The provider's API could not be read.
    #[error(transparent)]
    Api(#[from] ProviderApiError),
    /// The database failed.
    #[error(transparent)]
    Inbox(#[from] InboxError),
    /// The provider's API kept naming next pages ([`Pages`]).
    #[error(transparent)]
    EndlessPages(#[from] EndlessPages),
}

impl From<sqlx::Error> for ReconcileError {
    fn from(error: sqlx::Error) -> Self {
        ReconcileError::Inbox(error.into())
    }
}

/// What a run did. In a dry run, `missing` counts the events a run would
/// recover, and nothing else was written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// The provider.
    pub provider: String,
    /// Whether it was a dry run.
    pub dry_run: bool,
    /// Where it started: the cursor it read after, if any.
    pub after: Option<String>,
    /// Where it started: the oldest event time it wanted.
    pub since: DateTime<Utc>,
    /// Pages read.
    pub pages: usize,
    /// Distinct events read.
    pub seen: usize,
    /// Events listed again on a later page (read once).
    pub repeated: usize,
    /// Events older than `since`, left alone (a log read from its start).
    pub before_since: usize,
    /// Events the inbox already had (including one a webhook recorded
    /// while the run was delivering it).
    pub already_recorded: usize,
    /// Dry run: events the inbox lacks.
    pub missing: usize,
    /// Events recovered: recorded, and their effects applied, now.
    pub recovered: usize,
    /// GitHub: deliveries GitHub was asked to send again (they arrive as
    /// webhooks, through the normal route).
    pub redelivery_requested: usize,
    /// Events whose effect failed: archived FAILED, as a webhook's would be;
    /// GitHub: redeliveries GitHub refused to make.
    pub failed: usize,
    /// Events the provider's format cannot read, or PostgreSQL cannot
    /// store (not archived), as a webhook of them is answered 400; the run
    /// goes on with the others, and the command fails at its end.
    pub unreadable: usize,
    /// The unreadable events whose id is known, with why (never their content).
    pub unreadable_events: Vec<FailedEvent>,
    /// The FAILED events, with their errors.
    pub failures: Vec<FailedEvent>,
    /// Milliseconds the run took.
    pub took_ms: u64,
}

impl Summary {
    /// A run's summary before it read anything.
    pub(super) fn new(provider: &str, options: &Options, start: &Start) -> Self {
        Summary {
            provider: provider.to_string(),
            dry_run: options.dry_run,
            after: start.after.clone(),
            since: start.since,
            ..Summary::default()
        }
    }

    /// Logs the counts, under `message` (never an event's content).
    pub fn log(&self, message: &str) {
        tracing::info!(
            provider = %self.provider,
            pages = self.pages,
            seen = self.seen,
            already_recorded = self.already_recorded,
            recovered = self.recovered,
            redelivery_requested = self.redelivery_requested,
            missing = self.missing,
            failed = self.failed,
            unreadable = self.unreadable,
            took_ms = self.took_ms,
            "{message}"
        );
    }
}

impl Summary {
    /// Counts an event the run could not read or store, `reason` never
    /// quoting its content, and logs it.
    pub(super) fn left_unreadable(&mut self, event_id: Option<&str>, reason: String) {
        tracing::warn!(event_id, reason, "an event of the provider's API is unreadable: left alone");
        self.unreadable += 1;
        if let Some(event_id) = event_id {
            let event_id = event_id.to_string();
            self.unreadable_events.push(FailedEvent { event_id, archive_id: None, error: reason });
        }
    }
}

/// An event the run archived FAILED, or whose redelivery GitHub refused;
/// or one it could not read or store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedEvent {
    /// The provider's event id.
    pub event_id: String,
    /// Its FAILED archive row (none for a refused redelivery).
    pub archive_id: Option<i64>,
    /// The effect's error, or GitHub's refusal.
    pub error: String,
}

/// What a run reads under its provider's lock: an [`EventLog`], or
/// GitHub's deliveries ([`GitHubHook`](super::GitHubHook)).
pub trait Reader: Sync {
    /// The provider's name (the `provider` column, the lock's key).
    fn provider_name(&self) -> &'static str;

    /// Reads from `start` (the stored mark, or `--since`, was `from`) to the
    /// end, storing the mark as it goes unless it is a dry run.
    fn read_from(
        &self,
        conn: &mut PgConnection,
        routing: &RoutingTable,
        options: &Options,
        from: Mark,
        start: Start,
    ) -> impl Future<Output = Result<Summary, ReconcileError>> + Send;
}

impl<L: EventLog> Reader for L {
    fn provider_name(&self) -> &'static str {
        self.provider()
    }

    async fn read_from(
        &self,
        conn: &mut PgConnection,
        routing: &RoutingTable,
        options: &Options,
        from: Mark,
        start: Start,
    ) -> Result<Summary, ReconcileError> {
        read(conn, routing, self, options, from, start).await
    }
}

/// Reads `reader` from `provider`'s mark (or `options.since`) to its end, and
/// delivers each event the dedup table lacks through [`inbox::deliver`]
/// with [`Source::Api`]: the same provider and event id as its webhook, so
/// a webhook of the same event, now or later, is a duplicate of it (and it
/// of the webhook). Holds the provider's lock throughout; a second run
/// meanwhile is refused.
#[instrument(skip_all, fields(provider = reader.provider_name(), dry_run = options.dry_run))]
pub async fn reconcile(
    pool: &PgPool,
    routing: &RoutingTable,
    reader: &impl Reader,
    options: &Options,
) -> Result<Summary, ReconcileError> {
    let provider = reader.provider_name();
    let Some(mut lock) = SessionLock::try_take(pool, "webhook-inbox reconcile", provider).await? else {
        return Err(ReconcileError::AlreadyRunning(provider));
    };
    let result = locked(lock.connection(), routing, reader, options).await;
    lock.release().await;
    result
}

/// The run, under the provider's lock.
async fn locked(
    conn: &mut PgConnection,
    routing: &RoutingTable,
    reader: &impl Reader,
    options: &Options,
) -> Result<Summary, ReconcileError> {
    let provider = reader.provider_name();
    let (from, start) = start(conn, provider, options).await?;
    if options.dry_run {
        return reader.read_from(conn, routing, options, from, start).await;
    }
    state::started(conn, provider).await?;
    let result = reader.read_from(conn, routing, options, from, start).await;
    let outcome = result.as_ref().map_err(ToString::to_string);
    state::finished(conn, provider, outcome.as_ref().map_err(String::as_str)).await?;
    result
}

/// The mark a run starts from, and where it reads.
async fn start(conn: &mut PgConnection, provider: &str, options: &Options) -> sqlx::Result<(Mark, Start)> {
    if let Some(since) = options.since {
        return Ok((Mark { cursor: None, mark_at: Some(since) }, Start { after: None, since }));
    }
    let mark = state::mark(&mut *conn, provider).await?.unwrap_or_default();
    let since = match mark.mark_at {
        Some(at) => at - OVERLAP,
        None => Utc::now() - FIRST_RUN_LOOKBACK,
    };
    Ok((mark.clone(), Start { after: mark.cursor.clone(), since }))
}

async fn read(
    conn: &mut PgConnection,
    routing: &RoutingTable,
    log: &impl EventLog,
    options: &Options,
    from: Mark,
    start: Start,
) -> Result<Summary, ReconcileError> {
    let began = Instant::now();
    let began_at = Utc::now();
    let provider = log.provider();
    let mut summary = Summary::new(provider, options, &start);
    let mut tracker = Tracker::new(log.order(), OVERLAP, from);
    let mut read_ids = HashSet::new();
    let mut pages = Pages::default();
    let mut next: Option<String> = None;
    loop {
        let page = log.read(&start, next.as_deref()).await?;
        summary.pages += 1;
        let recovered_before = summary.recovered;
        deliver_page(
            conn,
            routing,
            provider,
            &page,
            &start,
            options,
            &mut read_ids,
            &mut tracker,
            &mut summary,
        )
        .await?;
        // The progress line, after each page.
        summary.log("reconciling");
        if summary.recovered > recovered_before {
            state::add_recovered(conn, provider, summary.recovered - recovered_before).await?;
        }
        match page.next {
            Some(page_next) => {
                // Oldest first, every event up to this page's end has been read.
                if !options.dry_run && log.order() == Order::OldestFirst {
                    state::store_mark(conn, provider, &tracker.mark()).await?;
                }
                next = Some(pages.next(provider, page_next)?);
            }
            None => {
                if !options.dry_run {
                    state::store_mark(conn, provider, &tracker.complete(began_at)).await?;
                }
                break;
            }
        }
    }
    summary.took_ms = began.elapsed().as_millis() as u64;
    Ok(summary)
}

/// Which of `ids` the dedup table has for `provider`.
pub(super) async fn recorded(
    conn: &mut PgConnection,
    provider: &str,
    ids: &[&str],
) -> sqlx::Result<HashSet<String>> {
    let recorded: Vec<String> = sqlx::query_scalar(
        "SELECT event_id FROM processed_webhook_events WHERE provider = $1 AND event_id = ANY($2)",
    )
    .bind(provider)
    .bind(ids)
    .fetch_all(conn)
    .await?;
    Ok(recorded.into_iter().collect())
}

/// Delivers the events of one page the dedup table lacks, in the page's order.
#[allow(clippy::too_many_arguments)]
async fn deliver_page(
    conn: &mut PgConnection,
    routing: &RoutingTable,
    provider: &'static str,
    page: &Page,
    start: &Start,
    options: &Options,
    read_ids: &mut HashSet<String>,
    tracker: &mut Tracker,
    summary: &mut Summary,
) -> Result<(), ReconcileError> {
    let format = providers::format_of(provider);
    let mut events: Vec<(Payload, Event)> = Vec::with_capacity(page.events.len());
    for raw in &page.events {
        let read = Payload::try_from(raw.get().to_string())
            .and_then(|payload| Ok((format.read_request(&HeaderMap::new(), &payload)?, payload)));
        match read {
            Ok((event, payload)) => events.push((payload, event)),
            // The error names a field, never the payload.
            Err(error) => summary.left_unreadable(None, error.to_string()),
        }
    }
    let ids: Vec<&str> = events.iter().map(|(_, event)| event.id.as_str()).collect();
    let recorded = recorded(conn, provider, &ids).await?;
    // Without a cursor, a log read by id starts at its oldest event.
    let before = start.after.is_none().then_some(start.since);
    for (payload, event) in events {
        if !read_ids.insert(event.id.clone()) {
            summary.repeated += 1;
            continue;
        }
        summary.seen += 1;
        let at = event.occurred_at.unwrap_or(event.received_at);
        if before.is_some_and(|since| at < since) {
            summary.before_since += 1;
            continue;
        }
        tracker.saw(&event.id, at);
        if recorded.contains(&event.id) {
            summary.already_recorded += 1;
            continue;
        }
        if options.dry_run {
            summary.missing += 1;
            continue;
        }
        let event_id = event.id.clone();
        let delivery = Delivery {
            provider: provider.to_string(),
            event,
            payload,
            source: Source::Api,
            request_id: page.request_id.as_deref().and_then(event::kept_request_id).map(str::to_owned),
            traceparent: telemetry::context::traceparent(&tracing::Span::current()),
        };
        match inbox::deliver(conn, &routing.route(delivery)).await {
            Ok(Recorded::Processed { .. }) => summary.recovered += 1,
            Ok(Recorded::Duplicate { .. }) => summary.already_recorded += 1,
            Ok(Recorded::Failed { archive_id, error }) => {
                summary.failed += 1;
                summary.failures.push(FailedEvent { event_id, archive_id: Some(archive_id), error });
            }
            // Why go on: the same event would stop every later run at the
            // same place, and the events after it would never be recovered.
            Err(error @ InboxError::UnstorablePayload) => {
                summary.left_unreadable(Some(&event_id), error.to_string())
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}
