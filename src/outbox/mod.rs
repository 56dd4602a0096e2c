//! The outbox: effects that leave the database (emails).
//!
//! An effect enqueues a row in the delivery's transaction, so an email
//! exists if and only if its event is processed, and a unique cause makes it
//! one email per cause however many events carry that cause. [`Emails`], a
//! queue of the engine (`crate::queue`), sends the rows over SMTP afterwards,
//! outside any delivery.

mod mailer;
mod queue;
mod templates;
mod worker;

use sqlx::PgConnection;
use tracing::instrument;

pub use mailer::{Mailer, MailerError};
pub use templates::{Rendered, Templates, Values};
pub use worker::Emails;

/// What an email is for; each kind has its template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmailKind {
    /// Sent once per user, on `user.created`.
    Welcome,
    /// Sent once per subscription, when it is canceled.
    Downgrade,
}

impl EmailKind {
    /// The value of `outbox.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            EmailKind::Welcome => "welcome",
            EmailKind::Downgrade => "downgrade",
        }
    }

    fn from_db(kind: &str) -> Option<Self> {
        match kind {
            "welcome" => Some(EmailKind::Welcome),
            "downgrade" => Some(EmailKind::Downgrade),
            _ => None,
        }
    }
}

/// An email to enqueue. The address is not part of it: the worker reads it
/// from `users` when sending, so the outbox stores no personal data.
#[derive(Debug)]
pub struct Email<'a> {
    /// Why the email exists (`user:<id>:welcome`); unique in the outbox.
    pub cause: String,
    /// Which template.
    pub kind: EmailKind,
    /// The recipient.
    pub user_id: Option<&'a str>,
    /// The subscription the email is about, if any.
    pub subscription_id: Option<&'a str>,
    /// The event that caused it.
    pub event_id: &'a str,
}

/// Enqueues `email` on the delivery's transaction, unless an email for the
/// same cause is already there (sent or not). Returns whether it was enqueued.
#[instrument(skip_all)]
pub async fn enqueue(conn: &mut PgConnection, email: &Email<'_>) -> sqlx::Result<bool> {
    let enqueued = sqlx::query(
        "INSERT INTO outbox (cause, kind, user_id, subscription_id, event_id)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT ON CONSTRAINT uq_outbox_cause DO NOTHING",
    )
    .bind(&email.cause)
    .bind(email.kind.as_str())
    .bind(email.user_id)
    .bind(email.subscription_id)
    .bind(email.event_id)
    .execute(conn)
    .await?;
    Ok(enqueued.rows_affected() == 1)
}

/// Marks the user's unsent emails dead with `reason` (a deleted user is not
/// written to). An email already being sent may still go out.
#[instrument(skip_all)]
pub async fn give_up_for_user(conn: &mut PgConnection, user_id: &str, reason: &str) -> sqlx::Result<u64> {
    let given_up = sqlx::query(
        "UPDATE outbox SET status = 'dead', last_error = $2, locked_until = NULL
         WHERE user_id = $1 AND status = 'pending'",
    )
    .bind(user_id)
    .bind(reason)
    .execute(conn)
    .await?;
    Ok(given_up.rows_affected())
}
