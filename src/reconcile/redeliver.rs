//! GitHub's reconciliation: GitHub keeps no event log, only the hook's
//! delivery attempts, and redelivers one when asked. A run reads the
//! attempts newest first back to its start, and asks once for each guid the
//! dedup table lacks; the redelivery then arrives as a signed webhook
//! through the normal route, where the dedup table makes it exactly once
//! against any other attempt at the same delivery.

use std::collections::HashSet;
use std::time::Instant;

use chrono::Utc;
use sqlx::PgConnection;

use super::client::ProviderApiError;
use super::github::GitHubHook;
use super::log::{Order, Start};
use super::pages::Pages;
use super::run::{self, FailedEvent, OVERLAP, Options, Reader, ReconcileError, Summary};
use super::state::{self, Mark, Tracker};
use crate::event;
use crate::inbox::RoutingTable;

impl Reader for GitHubHook {
    fn provider_name(&self) -> &'static str {
        self.provider()
    }

    /// Why the attempts are read back to `start.since` and no cursor is
    /// kept: GitHub lists them newest first, and its cursors are not
    /// documented as lasting; the mark is when the last complete run began
    /// (less the overlap), as for Stripe's newest-first log.
    async fn read_from(
        &self,
        conn: &mut PgConnection,
        _effects: &RoutingTable,
        options: &Options,
        from: Mark,
        start: Start,
    ) -> Result<Summary, ReconcileError> {
        let began = Instant::now();
        let began_at = Utc::now();
        let provider = self.provider();
        let mut summary = Summary::new(provider, options, &start);
        // Every attempt at a delivery has its guid: one request per guid.
        let mut read_guids = HashSet::new();
        let mut pages = Pages::default();
        let mut next: Option<String> = None;
        loop {
            let mut page = self.attempts(next.as_deref()).await?;
            summary.pages += 1;
            // A guid the inbox could not hold as an event id (a NUL, too
            // long) is no delivery a webhook could record: left alone, as
            // an unreadable event is.
            page.attempts.retain(|attempt| {
                match event::required(Some(attempt.guid.as_str().into()), "guid") {
                    Ok(_) => true,
                    Err(error) => {
                        summary.left_unreadable(None, format!("delivery {}: {error}", attempt.id));
                        false
                    }
                }
            });
            let guids: Vec<&str> = page.attempts.iter().map(|attempt| attempt.guid.as_str()).collect();
            let recorded = run::recorded(conn, provider, &guids).await?;
            let mut reached_start = false;
            for attempt in &page.attempts {
                if attempt.delivered_at < start.since {
                    summary.before_since += 1;
                    reached_start = true;
                    continue;
                }
                if !read_guids.insert(attempt.guid.clone()) {
                    summary.repeated += 1;
                    continue;
                }
                summary.seen += 1;
                if recorded.contains(&attempt.guid) {
                    summary.already_recorded += 1;
                    continue;
                }
                if options.dry_run {
                    summary.missing += 1;
                    continue;
                }
                match self.redeliver(attempt.id).await {
                    Ok(()) => summary.redelivery_requested += 1,
                    // This delivery only (gone, say): the others may still be asked for.
                    Err(error @ ProviderApiError::Refused { .. }) => {
                        summary.failed += 1;
                        let (event_id, error) = (attempt.guid.clone(), error.to_string());
                        summary.failures.push(FailedEvent { event_id, archive_id: None, error });
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            // The progress line, after each page.
            summary.log("reconciling");
            match page.next {
                Some(page_next) if !reached_start => next = Some(pages.next(provider, page_next)?),
                _ => break,
            }
        }
        if !options.dry_run {
            let mark = Tracker::new(Order::NewestFirst, OVERLAP, from).complete(began_at);
            state::store_mark(conn, provider, &mark).await?;
        }
        summary.took_ms = began.elapsed().as_millis() as u64;
        Ok(summary)
    }
}
