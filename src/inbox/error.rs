//! What can go wrong around the transaction (not inside a handler: those
//! failures are archived as FAILED).

/// A delivery that could not be recorded; nothing was committed.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The database cannot be reached or refuses connections: answer 503.
    #[error("database unavailable")]
    Unavailable(#[source] sqlx::Error),
    /// A concurrent delivery of the same event held the dedup row past
    /// `lock_timeout`: answer 503 and let the provider retry.
    #[error("a concurrent delivery of the same event is still in progress")]
    Busy,
    /// PostgreSQL refuses the payload as `jsonb` (e.g. a `\u0000` escape, or
    /// nesting deeper than it allows): answer 400.
    #[error("payload cannot be stored as JSON")]
    UnstorablePayload,
    /// More deliveries are waiting for a database connection than the
    /// queue holds, or the service is shutting down: answer 503.
    #[error("too many deliveries in progress")]
    Overloaded,
    /// Anything else: a bug or an operator problem; answer 500.
    #[error("database error")]
    Database(#[source] sqlx::Error),
}

impl InboxError {
    /// `Unavailable`, for each delivery one broken connection failed
    /// (sqlx errors do not clone).
    pub(crate) fn connection_lost(error: &sqlx::Error) -> Self {
        InboxError::Unavailable(sqlx::Error::Protocol(error.to_string()))
    }
}

impl From<sqlx::Error> for InboxError {
    /// Classifies by SQLSTATE, never by message text.
    fn from(error: sqlx::Error) -> Self {
        let code = match &error {
            sqlx::Error::Database(db) => db.code().map(|code| code.into_owned()),
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => return InboxError::Unavailable(error),
            _ => None,
        };
        match code.as_deref() {
            // lock_not_available: lock_timeout expired.
            Some("55P03") => InboxError::Busy,
            // untranslatable_character, invalid_text_representation, statement_too_complex.
            Some("22P05" | "22P02" | "54001") => InboxError::UnstorablePayload,
            // Connection exceptions; admin/crash shutdown; cannot connect now;
            // too many connections; read-only (a standby after failover).
            Some(c) if c.starts_with("08") => InboxError::Unavailable(error),
            Some("57P01" | "57P02" | "57P03" | "53300" | "25006") => InboxError::Unavailable(error),
            _ => InboxError::Database(error),
        }
    }
}
