//! What can go wrong around the transaction. (An effect's own failure is
//! archived as FAILED instead, unless the database was only busy or gone.)

use std::sync::Arc;

use sqlx::postgres::{PgDatabaseError, PgSeverity};

/// A delivery that was not recorded, or whose outcome is not known: never
/// answered 2xx, so the provider retries it.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The database cannot be reached, refuses connections, or the
    /// connection broke (the outcome of what was in flight is unknown): 503.
    #[error("database unavailable")]
    Unavailable(#[source] Arc<sqlx::Error>),
    /// The delivery's first statement found its connection already broken
    /// (a session the server ended while the worker held it idle: a restart,
    /// a failover, `pg_terminate_backend`). Its worker runs it once more on a
    /// fresh connection; answered like `Unavailable` if it gets this far.
    #[error("database unavailable")]
    StaleConnection(#[source] Arc<sqlx::Error>),
    /// A concurrent delivery of the same event held the dedup row past
    /// `lock_timeout`: 503, and the provider retries.
    #[error("a concurrent delivery of the same event is still in progress")]
    Busy,
    /// The database was busy with concurrent work (a lock held past
    /// `lock_timeout` by a delivery of a related event, a deadlock, a
    /// statement past `statement_timeout`): 503, and the provider retries.
    #[error("the database was busy with concurrent deliveries; retry later")]
    Contended(#[source] sqlx::Error),
    /// PostgreSQL cannot store the payload or a value read from it (a
    /// `\u0000` escape, nesting deeper than it allows, a number beyond
    /// `numeric`'s range): 400.
    #[error("payload cannot be stored as JSON")]
    UnstorablePayload,
    /// No delivery worker was free within the wait bound, the queue is
    /// full, or the service is shutting down: 503.
    #[error("too many deliveries in progress")]
    Overloaded,
    /// The delivery did not finish within its deadline (a database that
    /// stopped answering); whether it committed is unknown: 503.
    #[error("the delivery did not finish in time")]
    TimedOut,
    /// Anything else: a bug or an operator problem; 500.
    #[error("database error")]
    Database(#[source] sqlx::Error),
}

/// What kind of failure a database error is, decided by SQLSTATE (never
/// by message text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// The connection is gone or in an unknown state.
    Unavailable,
    /// `lock_timeout` expired.
    LockTimeout,
    /// Concurrency the database resolved by giving up: retry later.
    Contention,
    /// The payload, or a value read from it, cannot be stored.
    Unstorable,
    /// Anything else.
    Other,
}

impl ErrorClass {
    /// Classifies `error`.
    pub(crate) fn of(error: &sqlx::Error) -> ErrorClass {
        let code = match error {
            // A FATAL or PANIC error ends the session, whatever its code.
            sqlx::Error::Database(db) if ends_session(db.as_ref()) => return ErrorClass::Unavailable,
            sqlx::Error::Database(db) => db.code(),
            // Protocol: the connection's state is unknown (e.g. a statement's
            // answer that made no sense); treat it as lost.
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => return ErrorClass::Unavailable,
            _ => None,
        };
        match code.as_deref() {
            // lock_not_available
            Some("55P03") => ErrorClass::LockTimeout,
            // deadlock_detected, serialization_failure, query_canceled
            // (statement_timeout, or an operator's cancel)
            Some("40P01" | "40001" | "57014") => ErrorClass::Contention,
            // untranslatable_character, invalid_text_representation,
            // statement_too_complex; and what only a value the parse let
            // through can cause (a backstop): numeric_value_out_of_range,
            // character_not_in_repertoire (a NUL in text),
            // datetime_field_overflow.
            Some("22P05" | "22P02" | "54001" | "22003" | "22021" | "22008") => ErrorClass::Unstorable,
            // Connection exceptions; admin/crash shutdown; cannot connect now;
            // database dropped; idle session timeout; too many connections;
            // idle-in-transaction and transaction timeouts (the session is
            // ended: sqlx may see them as an ERROR that arrived before the
            // FATAL); read-only (a standby after failover); disk full (the
            // server cannot write, whatever the event: not a FAILED row).
            Some(c) if c.starts_with("08") => ErrorClass::Unavailable,
            Some(
                "57P01" | "57P02" | "57P03" | "57P04" | "57P05" | "53300" | "25P03" | "25P04" | "25006"
                | "53100",
            ) => ErrorClass::Unavailable,
            _ => ErrorClass::Other,
        }
    }
}

/// Whether PostgreSQL ended the session with this error (severity FATAL or PANIC).
fn ends_session(error: &(dyn sqlx::error::DatabaseError + 'static)) -> bool {
    error
        .try_downcast_ref::<PgDatabaseError>()
        .is_some_and(|error| matches!(error.severity(), PgSeverity::Fatal | PgSeverity::Panic))
}

impl InboxError {
    /// `Unavailable`, or `StaleConnection` if `error` was, for each delivery
    /// one broken connection failed: each carries the same cause, so every
    /// delivery's log line says what broke the connection (not merely that
    /// the database was unavailable, which its message already says).
    pub(crate) fn connection_lost(error: &InboxError) -> Self {
        match error {
            InboxError::StaleConnection(cause) => InboxError::StaleConnection(cause.clone()),
            InboxError::Unavailable(cause) => InboxError::Unavailable(cause.clone()),
            // Only a lost connection is shared; anything else is kept as text.
            other => InboxError::Unavailable(Arc::new(sqlx::Error::Protocol(other.to_string()))),
        }
    }

    /// The error of a delivery's first statement: a lost connection there
    /// is a stale one, which nothing of the delivery got past.
    pub(crate) fn at_first_statement(error: sqlx::Error) -> Self {
        match InboxError::from(error) {
            InboxError::Unavailable(error) => InboxError::StaleConnection(error),
            other => other,
        }
    }

    /// A lost connection after the delivery's first statement: `Unavailable`,
    /// never stale.
    pub(crate) fn mid_delivery(self) -> Self {
        match self {
            InboxError::StaleConnection(error) => InboxError::Unavailable(error),
            other => other,
        }
    }

    /// Whether the connection the error came from must not be used again.
    pub(crate) fn lost_connection(&self) -> bool {
        matches!(self, InboxError::Unavailable(_) | InboxError::StaleConnection(_))
    }
}

impl From<sqlx::Error> for InboxError {
    fn from(error: sqlx::Error) -> Self {
        match ErrorClass::of(&error) {
            ErrorClass::Unavailable => InboxError::Unavailable(Arc::new(error)),
            ErrorClass::LockTimeout => InboxError::Busy,
            ErrorClass::Contention => InboxError::Contended(error),
            ErrorClass::Unstorable => InboxError::UnstorablePayload,
            ErrorClass::Other => InboxError::Database(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    /// Each delivery a lost connection fails carries what broke it: its log
    /// line is "database unavailable" with that cause, not with the message
    /// again.
    #[test]
    fn a_connection_lost_for_several_deliveries_keeps_its_cause() {
        for lost in [
            InboxError::from(sqlx::Error::PoolTimedOut),
            InboxError::at_first_statement(sqlx::Error::PoolTimedOut),
        ] {
            let shared = InboxError::connection_lost(&lost);
            assert_eq!(shared.to_string(), "database unavailable");
            let cause = shared.source().expect("a cause").to_string();
            assert_eq!(cause, sqlx::Error::PoolTimedOut.to_string());
            assert_eq!(
                matches!(shared, InboxError::StaleConnection(_)),
                matches!(lost, InboxError::StaleConnection(_))
            );
        }
    }
}
