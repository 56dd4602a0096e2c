//! The outbox as a queue of the engine (`crate::queue`): claim due emails,
//! send them over SMTP, record the outcome; retried with exponential backoff
//! and given up after a bounded number of attempts.
//!
//! Delivery is at least once, not exactly once: a process that dies (or is
//! stopped, or cannot reach the database until its lease is nearly over)
//! after the SMTP server accepted an email but before the row is marked
//! sent leaves a claim whose lease expires, and the email is sent again,
//! with the same Message-ID, so the copy is recognisable downstream.

use std::time::Duration;

use sqlx::PgConnection;

use super::mailer::{Mailer, OutgoingEmail};
use super::queue::{self, ClaimedEmail, Sent};
use super::{EmailKind, Values};
use crate::queue::{Done, Queue, Schedule, Verdict};

/// Emails sent at once, and claimed per claim.
const BATCH_SIZE: usize = 10;

/// The outbox's queue: emails over one SMTP server.
#[derive(Debug)]
pub struct Emails {
    mailer: Mailer,
    schedule: Schedule,
}

impl Emails {
    /// Sends over `mailer`, retrying failures on `schedule`.
    pub fn new(mailer: Mailer, schedule: Schedule) -> Emails {
        Emails { mailer, schedule }
    }
}

impl Queue for Emails {
    type Row = ClaimedEmail;
    type Attempt = Sent;

    fn name(&self) -> &str {
        "outbox"
    }

    fn capacity(&self) -> usize {
        BATCH_SIZE
    }

    /// Long enough for a send, bounded by the SMTP timeout, and its record.
    fn lease(&self) -> Duration {
        self.mailer.timeout() * 2 + Duration::from_secs(10)
    }

    fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    async fn claim(
        &self,
        conn: &mut PgConnection,
        now: chrono::DateTime<chrono::Utc>,
        lease_until: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> sqlx::Result<Vec<ClaimedEmail>> {
        queue::claim(conn, now, lease_until, limit).await
    }

    async fn send(&self, row: &ClaimedEmail) -> Sent {
        Sent(self.send_email(row).await)
    }

    async fn record(&self, conn: &mut PgConnection, done: &[Done<ClaimedEmail, Sent>]) -> sqlx::Result<()> {
        queue::record(conn, done).await
    }

    async fn release(&self, conn: &mut PgConnection, rows: &[ClaimedEmail]) -> sqlx::Result<()> {
        queue::release(conn, rows).await
    }

    fn span(&self, row: &ClaimedEmail) -> tracing::Span {
        tracing::info_span!("email", outbox_id = %row.id, kind = row.kind, attempts = row.attempts)
    }

    fn report(&self, done: &Done<ClaimedEmail, Sent>) {
        match done.verdict {
            Verdict::Sent => tracing::info!("email sent"),
            // The error may quote the address: it goes to the row, not the log.
            Verdict::Retry(retry_at) => {
                tracing::warn!(%retry_at, "email not sent, will retry; the error is in outbox.last_error")
            }
            Verdict::Dead => tracing::error!("email not sent and no attempt left: the outbox row is dead"),
        }
    }
}

impl Emails {
    async fn send_email(&self, row: &ClaimedEmail) -> Result<(), String> {
        let kind =
            EmailKind::from_db(&row.kind).ok_or_else(|| format!("unknown email kind {:?}", row.kind))?;
        let to = row.email.as_deref().filter(|email| !email.is_empty()).ok_or_else(|| {
            format!(
                "no address for user {:?}: unknown, deleted, or without a primary email",
                row.user_id.as_deref().unwrap_or("")
            )
        })?;
        let name = row.first_name.as_deref().filter(|name| !name.is_empty()).unwrap_or(to);
        let values = Values {
            name,
            first_name: row.first_name.as_deref().unwrap_or(""),
            last_name: row.last_name.as_deref().unwrap_or(""),
            email: to,
            subscription_id: row.subscription_id.as_deref().unwrap_or(""),
        };
        self.mailer.send(&OutgoingEmail { id: row.id, kind, to, values }).await
    }
}
