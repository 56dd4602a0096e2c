//! Outbox workers pointed at the test SMTP server.

use std::time::Duration;

use sqlx::PgPool;
use webhook_inbox::outbox::{Mailer, Retry, Templates, Worker};

use super::smtp::SmtpServer;

/// The sender every test worker uses.
pub const FROM: &str = "Acme <noreply@acme.example>";

/// Three attempts, one minute apart at first, at most ten minutes apart.
pub const RETRY: Retry =
    Retry { max_attempts: 3, base: Duration::from_secs(60), cap: Duration::from_secs(600) };

/// A worker on `pool` (an app instance's own pool, for replicas) sending to `smtp`.
pub fn worker(pool: &PgPool, smtp: &SmtpServer) -> Worker {
    let mailer = Mailer::new(&smtp.url().into(), FROM, Templates::default(), Duration::from_secs(5)).unwrap();
    Worker::new(pool.clone(), mailer, RETRY, Duration::from_millis(20))
}
