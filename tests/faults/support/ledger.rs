//! Counting, with SQL, what became of every event a test sent: applied once,
//! lost, or doubled. And the one line per fault that RELIABILITY.md is built from.

use sqlx::PgPool;

use super::provider::Event;

/// What the database holds about a set of events.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ledger {
    pub events: usize,
    /// Events with their dedup row, one PROCESSED archive row and their effect.
    pub applied_once: usize,
    /// Events missing their dedup row, their PROCESSED row or their effect.
    pub lost: usize,
    /// Events with more than one PROCESSED row or more than one effect.
    pub doubled: usize,
    /// Archive rows still PENDING (none may ever be stored).
    pub pending: i64,
    /// Archive rows of duplicates (SKIPPED).
    pub skipped: i64,
}

impl Ledger {
    /// Counts, for each of `events` (Paddle events), its dedup rows,
    /// PROCESSED archive rows and credit grants.
    pub async fn count(pool: &PgPool, events: &[Event]) -> Ledger {
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT e.event_id,
                    (SELECT count(*) FROM processed_webhook_events p
                      WHERE p.provider = 'paddle' AND p.event_id = e.event_id),
                    (SELECT count(*) FROM webhook_events w
                      WHERE w.provider = 'paddle' AND w.event_id = e.event_id AND w.processing_status = 'PROCESSED'),
                    (SELECT count(*) FROM credit_grants g WHERE g.event_id = e.event_id)
             FROM unnest($1::text[]) AS e(event_id)",
        )
        .bind(&ids)
        .fetch_all(pool)
        .await
        .unwrap();
        let mut ledger = Ledger { events: events.len(), ..Ledger::default() };
        for (event, (id, dedup, processed, grants)) in events.iter().zip(rows) {
            assert_eq!(event.id, id);
            let expected_grants = i64::from(event.grants);
            if processed > 1 || grants > expected_grants {
                ledger.doubled += 1;
            } else if dedup == 1 && processed == 1 && grants == expected_grants {
                ledger.applied_once += 1;
            } else {
                ledger.lost += 1;
            }
        }
        let (pending, skipped): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE processing_status = 'PENDING'),
                    count(*) FILTER (WHERE processing_status = 'SKIPPED')
             FROM webhook_events",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        ledger.pending = pending;
        ledger.skipped = skipped;
        ledger
    }

    /// Of `events`, those whose dedup row is committed.
    pub async fn committed<'e>(pool: &PgPool, events: impl IntoIterator<Item = &'e Event>) -> Vec<String> {
        let ids: Vec<&str> = events.into_iter().map(|e| e.id.as_str()).collect();
        sqlx::query_scalar(
            "SELECT event_id FROM processed_webhook_events WHERE provider = 'paddle' AND event_id = ANY($1)",
        )
        .bind(&ids)
        .fetch_all(pool)
        .await
        .unwrap()
    }

    /// Panics unless every event was applied exactly once and no row is PENDING.
    pub fn assert_exactly_once(&self) {
        assert_eq!(
            (self.applied_once, self.lost, self.doubled, self.pending),
            (self.events, 0, 0, 0),
            "{self:?}"
        );
    }
}

/// One fault's result, printed as a tab-separated line that
/// `scripts/reliability` gathers into the table of RELIABILITY.md.
#[derive(Debug)]
pub struct Report<'a> {
    pub fault: &'a str,
    pub events: usize,
    /// HTTP requests sent, retries included.
    pub deliveries: usize,
    pub ledger: Option<&'a Ledger>,
    /// What else the test observed.
    pub notes: String,
}

impl Report<'_> {
    /// Prints the line (shown with `--nocapture`).
    pub fn print(&self) {
        let (lost, doubled) =
            self.ledger.map_or(("-".into(), "-".into()), |l| (l.lost.to_string(), l.doubled.to_string()));
        println!(
            "RELIABILITY\t{}\t{}\t{}\t{lost}\t{doubled}\t{}",
            self.fault, self.events, self.deliveries, self.notes
        );
    }
}
