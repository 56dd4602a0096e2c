//! What can go wrong around the transaction. (A handler's own failure is
//! archived as FAILED instead, unless the database was only busy or gone.)

/// A delivery that was not recorded, or whose outcome is not known: never
/// answered 2xx, so the provider retries it.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The database cannot be reached, refuses connections, or the
    /// connection broke (the outcome of what was in flight is unknown): 503.
    #[error("database unavailable")]
    Unavailable(#[source] sqlx::Error),
    /// A concurrent delivery of the same event held the dedup row past
    /// `lock_timeout`: 503, and the provider retries.
    #[error("a concurrent delivery of the same event is still in progress")]
    Busy,
    /// The database was busy with concurrent work (a lock held past
    /// `lock_timeout` by a delivery of a related event, a deadlock, a
    /// statement past `statement_timeout`): 503, and the provider retries.
    #[error("the database was busy with concurrent deliveries; retry later")]
    Contended(#[source] sqlx::Error),
    /// PostgreSQL refuses the payload as `jsonb` (e.g. a `\u0000` escape, or
    /// nesting deeper than it allows): 400.
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
pub(crate) enum Failure {
    /// The connection is gone or in an unknown state.
    Unavailable,
    /// `lock_timeout` expired.
    LockTimeout,
    /// Concurrency the database resolved by giving up: retry later.
    Contention,
    /// The payload cannot be stored as `jsonb`.
    Unstorable,
    /// Anything else.
    Other,
}

impl Failure {
    /// Classifies `error`.
    pub(crate) fn of(error: &sqlx::Error) -> Failure {
        let code = match error {
            sqlx::Error::Database(db) => db.code(),
            // Protocol: the connection's state is unknown (e.g. a statement's
            // answer that made no sense); treat it as lost.
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => return Failure::Unavailable,
            _ => None,
        };
        match code.as_deref() {
            // lock_not_available
            Some("55P03") => Failure::LockTimeout,
            // deadlock_detected, serialization_failure, query_canceled
            // (statement_timeout, or an operator's cancel)
            Some("40P01" | "40001" | "57014") => Failure::Contention,
            // untranslatable_character, invalid_text_representation, statement_too_complex
            Some("22P05" | "22P02" | "54001") => Failure::Unstorable,
            // Connection exceptions; admin/crash shutdown; cannot connect now;
            // too many connections; read-only (a standby after failover).
            Some(c) if c.starts_with("08") => Failure::Unavailable,
            Some("57P01" | "57P02" | "57P03" | "53300" | "25006") => Failure::Unavailable,
            _ => Failure::Other,
        }
    }
}

impl InboxError {
    /// `Unavailable`, for each delivery one broken connection failed
    /// (sqlx errors do not clone).
    pub(crate) fn connection_lost(error: &sqlx::Error) -> Self {
        InboxError::Unavailable(sqlx::Error::Protocol(error.to_string()))
    }
}

impl From<sqlx::Error> for InboxError {
    fn from(error: sqlx::Error) -> Self {
        match Failure::of(&error) {
            Failure::Unavailable => InboxError::Unavailable(error),
            Failure::LockTimeout => InboxError::Busy,
            Failure::Contention => InboxError::Contended(error),
            Failure::Unstorable => InboxError::UnstorablePayload,
            Failure::Other => InboxError::Database(error),
        }
    }
}
