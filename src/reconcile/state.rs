//! What reconciliation keeps between runs, a row per provider in
//! `reconciliation_state`: where the next run starts (the mark) and what
//! the last run did; and the lock that lets one run per provider at a time.

use std::collections::VecDeque;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor};

use super::log::Order;

/// Where the last run got to: the next one starts there, less the overlap.
#[derive(Debug, Clone, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct Mark {
    /// The provider's cursor (an event id) for logs read by id.
    pub cursor: Option<String>,
    /// The time of the event the mark stands at.
    pub mark_at: Option<DateTime<Utc>>,
}

/// Follows a run's events to the mark it may store.
///
/// Why an overlap: an event log is not strictly append-only in time (an
/// event may be listed a little after later ones), so the mark stands
/// `overlap` behind the newest event read, and the next run reads that
/// stretch again; the dedup table leaves what it already has alone.
#[derive(Debug)]
pub struct Tracker {
    order: Order,
    overlap: TimeDelta,
    newest: Option<DateTime<Utc>>,
    /// Events read within `overlap` of the newest, oldest first (oldest-first logs).
    window: VecDeque<(DateTime<Utc>, String)>,
    mark: Mark,
}

impl Tracker {
    /// A tracker for a run that started at `mark`.
    pub fn new(order: Order, overlap: TimeDelta, mark: Mark) -> Self {
        Tracker { order, overlap, newest: None, window: VecDeque::new(), mark }
    }

    /// Notes an event read.
    pub fn saw(&mut self, id: &str, at: DateTime<Utc>) {
        let newest = self.newest.map_or(at, |newest| newest.max(at));
        self.newest = Some(newest);
        if self.order == Order::OldestFirst {
            self.window.push_back((at, id.to_string()));
            while self.window.front().is_some_and(|(at, _)| *at <= newest - self.overlap) {
                let (at, id) = self.window.pop_front().expect("a front");
                self.mark = Mark { cursor: Some(id), mark_at: Some(at) };
            }
        }
    }

    /// The mark to store while an oldest-first log is being read: the
    /// newest event read at least `overlap` before the newest (the start's
    /// mark until there is one).
    pub fn mark(&self) -> Mark {
        self.mark.clone()
    }

    /// The mark to store once the run has read the log to its end, having
    /// started at `started`. A newest-first log has then listed every event
    /// created before `started`: the next run reads from there (less the
    /// overlap). So has an oldest-first log without a cursor yet; one with
    /// a cursor keeps it.
    ///
    /// Why the run's start and not its newest event: a log that had nothing
    /// new would otherwise keep its mark where it was, and the overlap
    /// would move each run's start further back.
    pub fn complete(&self, started: DateTime<Utc>) -> Mark {
        match (self.order, &self.mark.cursor) {
            (Order::OldestFirst, Some(_)) => self.mark.clone(),
            _ => Mark { cursor: None, mark_at: Some(started) },
        }
    }
}

/// The stored mark of `provider`, if a run stored one.
pub async fn mark<'e>(executor: impl PgExecutor<'e>, provider: &str) -> sqlx::Result<Option<Mark>> {
    sqlx::query_as(
        "SELECT cursor, mark_at FROM reconciliation_state
         WHERE provider = $1 AND (cursor IS NOT NULL OR mark_at IS NOT NULL)",
    )
    .bind(provider)
    .fetch_optional(executor)
    .await
}

/// Stores `mark` as where `provider`'s next run starts.
pub async fn store_mark(conn: &mut PgConnection, provider: &str, mark: &Mark) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO reconciliation_state (provider, cursor, mark_at) VALUES ($1, $2, $3)
         ON CONFLICT (provider) DO UPDATE SET cursor = $2, mark_at = $3",
    )
    .bind(provider)
    .bind(&mark.cursor)
    .bind(mark.mark_at)
    .execute(conn)
    .await
    .map(drop)
}

/// Adds `recovered` events to `provider`'s count (after each page).
pub async fn add_recovered(conn: &mut PgConnection, provider: &str, recovered: usize) -> sqlx::Result<()> {
    sqlx::query("UPDATE reconciliation_state SET recovered_total = recovered_total + $2 WHERE provider = $1")
        .bind(provider)
        .bind(recovered as i64)
        .execute(conn)
        .await
        .map(drop)
}

/// Records that a run of `provider` started now. The last finished run's
/// end, result and summary stay until this one finishes: the gauges go on
/// showing when the provider was last reconciled, and how it went, while a
/// run reads, and after one was killed.
pub async fn started(conn: &mut PgConnection, provider: &str) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO reconciliation_state (provider, last_started_at) VALUES ($1, now())
         ON CONFLICT (provider) DO UPDATE SET last_started_at = now()",
    )
    .bind(provider)
    .execute(conn)
    .await
    .map(drop)
}

/// Records how `provider`'s run ended: its summary, or its error.
pub async fn finished(
    conn: &mut PgConnection,
    provider: &str,
    outcome: Result<&impl Serialize, &str>,
) -> sqlx::Result<()> {
    let (result, error, summary) = match outcome {
        Ok(summary) => ("ok", None, serde_json::to_value(summary).ok()),
        Err(error) => ("failed", Some(error), None),
    };
    sqlx::query(
        "UPDATE reconciliation_state
         SET last_finished_at = now(), last_result = $2, last_error = $3, last_summary = $4
         WHERE provider = $1",
    )
    .bind(provider)
    .bind(result)
    .bind(error)
    .bind(summary)
    .execute(conn)
    .await
    .map(drop)
}

/// What the last run of a provider did, as the admin API shows it: the run
/// that started last, which may not have ended (the row still holds the
/// run before it, for the gauges, but it is not this run's).
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct LastRun {
    /// The provider.
    pub provider: String,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended (`None`: running, or killed).
    pub finished_at: Option<DateTime<Utc>>,
    /// `ok` or `failed` (`None`: not finished).
    pub result: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// Its counts, for a run that ended well.
    pub summary: Option<serde_json::Value>,
    /// The provider's cursor the next run starts after.
    pub cursor: Option<String>,
    /// The time the next run starts from, less the overlap.
    pub mark_at: Option<DateTime<Utc>>,
}

/// The last run of every provider reconciled, by name: the end, result
/// and summary only of a run that ended after it started.
pub async fn last_runs<'e>(executor: impl PgExecutor<'e>) -> sqlx::Result<Vec<LastRun>> {
    sqlx::query_as(
        "SELECT provider, last_started_at AS started_at, ended.*, cursor, mark_at
         FROM reconciliation_state
         LEFT JOIN LATERAL (
             SELECT last_finished_at AS finished_at, last_result AS result, last_error AS error,
                    last_summary AS summary
             WHERE last_finished_at >= last_started_at
         ) ended ON true
         ORDER BY provider",
    )
    .fetch_all(executor)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minutes: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap() + TimeDelta::minutes(minutes)
    }

    #[test]
    fn an_oldest_first_mark_stands_the_overlap_behind_the_newest_event() {
        let start = Mark { cursor: Some("evt_0".into()), mark_at: Some(at(0)) };
        let mut tracker = Tracker::new(Order::OldestFirst, TimeDelta::minutes(10), start.clone());
        tracker.saw("evt_1", at(1));
        tracker.saw("evt_2", at(5));
        assert_eq!(tracker.mark(), start, "nothing is 10 minutes behind the newest yet");
        tracker.saw("evt_3", at(12));
        assert_eq!(tracker.mark(), Mark { cursor: Some("evt_1".into()), mark_at: Some(at(1)) });
        // A late event listed after newer ones: the cursor follows the
        // log's order, so it passes it once the log is read past overlap.
        tracker.saw("evt_late", at(3));
        tracker.saw("evt_4", at(30));
        assert_eq!(tracker.mark(), Mark { cursor: Some("evt_late".into()), mark_at: Some(at(3)) });
    }

    #[test]
    fn a_complete_run_marks_its_start_unless_an_oldest_first_log_has_a_cursor() {
        let start = Mark { cursor: None, mark_at: Some(at(10)) };
        let mut newest_first = Tracker::new(Order::NewestFirst, TimeDelta::minutes(10), start.clone());
        newest_first.saw("evt_b", at(40));
        assert_eq!(newest_first.complete(at(60)), Mark { cursor: None, mark_at: Some(at(60)) });
        let mut oldest_first = Tracker::new(Order::OldestFirst, TimeDelta::minutes(10), start);
        oldest_first.saw("evt_a", at(5));
        assert_eq!(oldest_first.complete(at(60)), Mark { cursor: None, mark_at: Some(at(60)) });
        oldest_first.saw("evt_b", at(30));
        let cursor = Mark { cursor: Some("evt_a".into()), mark_at: Some(at(5)) };
        assert_eq!((oldest_first.mark(), oldest_first.complete(at(60))), (cursor.clone(), cursor));
    }
}
