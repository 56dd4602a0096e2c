//! A queue's runner that panics is started again: its later rows are still
//! sent, and the panic is reported to the queue (for its metric).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tokio::sync::mpsc;
use uuid::Uuid;
use webhook_inbox::queue::{ClaimedRow, Done, Engine, Queue, Schedule, SendFailure, SendResult};

use crate::support::TestDatabase;

struct Row(i64);

impl ClaimedRow for Row {
    type Id = i64;

    fn id(&self) -> i64 {
        self.0
    }

    fn claim_token(&self) -> Uuid {
        Uuid::nil()
    }

    fn attempt(&self) -> u32 {
        1
    }
}

struct Sent;

impl SendResult for Sent {
    fn failure(&self) -> Option<SendFailure<'_>> {
        None
    }
}

/// Hands out rows 1, 2, 3 ... one per claim; its first record panics, as a
/// bug would; every later one reports its row.
struct PanicsOnce {
    next: AtomicUsize,
    records: AtomicUsize,
    restarts: Arc<AtomicUsize>,
    recorded: mpsc::UnboundedSender<i64>,
    schedule: Schedule,
}

impl Queue for PanicsOnce {
    type Row = Row;
    type Attempt = Sent;

    fn name(&self) -> &str {
        "panics-once"
    }

    fn capacity(&self) -> usize {
        1
    }

    fn lease(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    async fn claim(
        &self,
        _: &mut PgConnection,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
        _: usize,
    ) -> sqlx::Result<Vec<Row>> {
        let next = self.next.fetch_add(1, Ordering::SeqCst) as i64 + 1;
        Ok(if next <= 3 { vec![Row(next)] } else { vec![] })
    }

    async fn send(&self, _: &Row) -> Sent {
        Sent
    }

    async fn record(&self, _: &mut PgConnection, done: &[Done<Row, Sent>]) -> sqlx::Result<()> {
        if self.records.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("a bug in a record");
        }
        for done in done {
            self.recorded.send(done.row.0).unwrap();
        }
        Ok(())
    }

    async fn release(&self, _: &mut PgConnection, _: &[Row]) -> sqlx::Result<()> {
        Ok(())
    }

    fn span(&self, _: &Row) -> tracing::Span {
        tracing::Span::none()
    }

    fn report(&self, _: &Done<Row, Sent>) {}

    fn restarted(&self) {
        self.restarts.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_panics_is_restarted_and_sends_the_rows_after() {
    let db = TestDatabase::create().await;
    let (recorded, mut records) = mpsc::unbounded_channel();
    let restarts = Arc::new(AtomicUsize::new(0));
    let mut engine = Engine::new(db.pool().clone(), Duration::from_millis(20));
    engine.spawn(PanicsOnce {
        next: AtomicUsize::new(0),
        records: AtomicUsize::new(0),
        restarts: restarts.clone(),
        recorded,
        schedule: Schedule::new(vec![], 0.0).unwrap(),
    });
    // Row 1's record panicked; rows 2 and 3 are claimed by the restarted runner.
    let mut after = Vec::new();
    for _ in 0..2 {
        let row = tokio::time::timeout(Duration::from_secs(10), records.recv()).await;
        after.push(row.expect("no row recorded after the panic: the runner stayed dead").unwrap());
    }
    assert_eq!(after, [2, 3]);
    assert_eq!(restarts.load(Ordering::SeqCst), 1);
    assert!(engine.stop(tokio::time::Instant::now() + Duration::from_secs(5)).await);
}
