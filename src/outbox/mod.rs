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

/// A CTE, `name AS (...)`, for an effect's statement: enqueues an email of
/// `kind` for each row of `rows` (a query of `cause, user_id,
/// subscription_id, event_id`), unless an email for the same cause is
/// already there (sent or not).
pub fn enqueue(name: &str, kind: EmailKind, rows: &str) -> String {
    format!(
        "{name} AS (
                 INSERT INTO outbox (cause, kind, user_id, subscription_id, event_id)
                 SELECT r.cause, '{kind}', r.user_id, r.subscription_id, r.event_id FROM ({rows}) AS r
                 ON CONFLICT ON CONSTRAINT uq_outbox_cause DO NOTHING
             )",
        kind = kind.as_str()
    )
}

/// A CTE, `name AS (...)`, for an effect's statement: marks the unsent
/// emails of the users `users` (a query of user ids) dead, with `reason`
/// (a deleted user is not written to). An email already being sent may
/// still go out.
pub fn give_up_for_users(name: &str, users: &str, reason: &'static str) -> String {
    format!(
        "{name} AS (
                 UPDATE outbox SET status = 'dead', last_error = '{reason}', locked_until = NULL
                 WHERE user_id IN ({users}) AND status = 'pending'
             )"
    )
}
