//! A bulk reprocess in two steps, as the admin API and the console run it:
//! the plan (which events, shown as a dry run), then the run, one event at a
//! time through [`reprocess`], the function every front door uses.

use serde::Serialize;
use sqlx::PgPool;

use super::filter::EventFilter;
use super::query::{self, ArchivedDelivery};
use super::reprocess::{self, ReprocessError, Reprocessed, Summary};
use crate::inbox::RoutingTable;

/// The events a bulk reprocess would run now.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The unapplied events matching the filter, each by its latest matching
    /// row, oldest first, at most the limit.
    pub events: Vec<ArchivedDelivery>,
    /// Whether more events match than the limit: run again for the rest
    /// (those applied by this run drop out).
    pub more: bool,
}

/// Plans a reprocess of at most `limit` events matching `filter`.
pub async fn plan(pool: &PgPool, filter: &EventFilter, limit: u32) -> sqlx::Result<Plan> {
    let mut events = query::reprocessable(pool, filter, Some(limit + 1)).await?;
    let more = events.len() > limit as usize;
    events.truncate(limit as usize);
    Ok(Plan { events, more })
}

/// What a bulk run did.
#[derive(Debug, Clone, Serialize)]
pub struct Ran {
    /// One result per planned event, in order.
    pub results: Vec<Reprocessed>,
    /// Their counts.
    pub summary: Summary,
}

/// Reprocesses the planned events, one transaction each, awaiting
/// `done(result)` after each (what was reprocessed is committed, whatever
/// follows: the console records it in the audit there). Stops at the first
/// event that could not run at all; those before it stay done.
pub async fn run<Done>(
    pool: &PgPool,
    routing: &RoutingTable,
    plan: &Plan,
    request_id: Option<&str>,
    mut done: impl FnMut(Reprocessed) -> Done,
) -> Result<Ran, ReprocessError>
where
    Done: Future<Output = Result<(), ReprocessError>>,
{
    let mut ran = Ran { results: Vec::with_capacity(plan.events.len()), summary: Summary::default() };
    for event in &plan.events {
        let reprocessed = reprocess::reprocess(pool, routing, event.id, request_id).await?;
        done(reprocessed.clone()).await?;
        ran.summary.add(&reprocessed);
        ran.results.push(reprocessed);
    }
    Ok(ran)
}
