//! Every answer other than success: a status code and `{"error": "<reason>"}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::event::EventError;
use crate::inbox::InboxError;
use crate::operations::ReprocessError;
use crate::operations::backfill::BackfillError;
use crate::operations::destinations::DestinationError;
use crate::operations::jobs::ReplayError;
use crate::providers::SignatureError;

/// Seconds a provider is asked to wait before retrying a 503.
const RETRY_AFTER_SECS: &str = "5";

/// What the HTTP layer can answer besides success.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The signature check failed: 401, nothing stored.
    #[error(transparent)]
    Unauthorized(#[from] SignatureError),
    /// Signed, but not an event we can read: 400, nothing stored.
    #[error(transparent)]
    InvalidEvent(#[from] EventError),
    /// The body exceeds the configured limit: 413.
    #[error("body larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// The body did not arrive within the read timeout: 408.
    #[error("timed out reading the request body")]
    BodyTimeout,
    /// The body could not be read (the client went away mid-body): 400.
    #[error("could not read the request body")]
    BodyRead,
    /// The provider has no secret configured: 503, so it retries once it is.
    #[error("provider {0} is not configured")]
    ProviderDisabled(String),
    /// The event's effect failed; archived FAILED: 500, so the provider retries.
    /// The reason still says "handler", the word of the first releases:
    /// kept as it is, since providers' dashboards and alerts may match it.
    #[error("event handler failed; the delivery is archived as FAILED")]
    EffectFailed {
        /// The event whose effect failed.
        event_id: String,
    },
    /// The transaction could not run; nothing was committed.
    #[error(transparent)]
    Inbox(#[from] InboxError),
    /// An operator endpoint without the right bearer token: 401.
    #[error("{0}")]
    BadToken(&'static str),
    /// Too many wrong operator tokens from the client's address: 429 with
    /// `Retry-After` (see `guessing`).
    #[error("too many wrong tokens from this address: retry after {} s", retry_after_secs(*.0))]
    TooManyGuesses(std::time::Duration),
    /// An operator request with an invalid parameter or body: 400.
    #[error("{0}")]
    BadRequest(String),
    /// No archive row has this id: 404.
    #[error("archived event {0} not found")]
    EventNotFound(i64),
    /// No forwarding job has this id: 404.
    #[error("job {0} not found")]
    JobNotFound(i64),
    /// No destination has this name: 404.
    #[error("destination {0:?} not found")]
    DestinationNotFound(String),
    /// The request conflicts with the resource's state (a replay of a
    /// pending job): 409.
    #[error("{0}")]
    Conflict(String),
    /// An archived row that cannot be reprocessed as stored: 422.
    #[error("{0}")]
    Unprocessable(String),
    /// The route is unknown: 404.
    #[error("not found")]
    NotFound,
    /// The route exists but not with this method: 405.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// A bug (e.g. a panic outside an effect): 500.
    #[error("internal error")]
    Internal,
}

impl ApiError {
    /// The HTTP status of each answer.
    pub fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized(_) | ApiError::BadToken(_) => StatusCode::UNAUTHORIZED,
            ApiError::InvalidEvent(_) | ApiError::BodyRead | ApiError::BadRequest(_) => {
                StatusCode::BAD_REQUEST
            }
            ApiError::EventNotFound(_) | ApiError::JobNotFound(_) | ApiError::DestinationNotFound(_) => {
                StatusCode::NOT_FOUND
            }
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooManyGuesses(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::ProviderDisabled(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Inbox(
                InboxError::Unavailable(_)
                | InboxError::StaleConnection(_)
                | InboxError::Busy
                | InboxError::Contended(_)
                | InboxError::Overloaded
                | InboxError::TimedOut,
            ) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Inbox(InboxError::UnstorablePayload) => StatusCode::BAD_REQUEST,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::EffectFailed { .. } | ApiError::Inbox(InboxError::Database(_)) | ApiError::Internal => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// The word recorded as the request span's `outcome`.
    pub fn outcome(&self) -> &'static str {
        match self {
            ApiError::Unauthorized(_) | ApiError::BadToken(_) | ApiError::TooManyGuesses(_) => "rejected",
            ApiError::EffectFailed { .. } => "failed",
            ApiError::Inbox(InboxError::Busy | InboxError::Contended(_)) => "busy",
            ApiError::Inbox(
                InboxError::Unavailable(_)
                | InboxError::StaleConnection(_)
                | InboxError::Overloaded
                | InboxError::TimedOut,
            )
            | ApiError::ProviderDisabled(_) => "unavailable",
            ApiError::Inbox(InboxError::Database(_)) | ApiError::Internal => "error",
            _ => "invalid",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Internal causes are logged once, inside the request span, never sent.
        match &self {
            ApiError::Inbox(InboxError::Database(source)) => {
                tracing::error!(error = %source, "database error")
            }
            ApiError::Inbox(InboxError::Unavailable(source) | InboxError::StaleConnection(source)) => {
                tracing::warn!(error = %source, "{self}")
            }
            ApiError::Inbox(InboxError::Contended(source)) => {
                tracing::warn!(error = %source, "{self}")
            }
            _ => {}
        }
        let status = self.status_code();
        let body = match &self {
            ApiError::EffectFailed { event_id } => {
                json!({ "error": self.to_string(), "event_id": event_id })
            }
            _ => json!({ "error": self.to_string() }),
        };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
        }
        if let ApiError::BadToken(_) = self {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let ApiError::TooManyGuesses(wait) = self {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(wait)));
        }
        response
    }
}

/// Whole seconds to wait, rounded up (a `Retry-After` of 0 would say "now").
pub fn retry_after_secs(wait: std::time::Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

/// The 400 reason of an operator request holding a value PostgreSQL cannot store.
const UNSTORABLE_VALUE: &str = "a value in the request cannot be stored by PostgreSQL";

impl From<sqlx::Error> for ApiError {
    /// A failed query of an operator endpoint, classified like a delivery's;
    /// but a value PostgreSQL refuses to store (a NUL in a job filter or a
    /// destination's name) is the request's, not a payload's: 400 saying so.
    fn from(error: sqlx::Error) -> Self {
        match InboxError::from(error) {
            InboxError::UnstorablePayload => ApiError::BadRequest(UNSTORABLE_VALUE.into()),
            error => ApiError::Inbox(error),
        }
    }
}

impl From<ReprocessError> for ApiError {
    fn from(error: ReprocessError) -> Self {
        match error {
            ReprocessError::NotFound(id) => ApiError::EventNotFound(id),
            ReprocessError::Inbox(error) => ApiError::Inbox(error),
            unprocessable @ ReprocessError::Unreadable(_) => {
                ApiError::Unprocessable(unprocessable.to_string())
            }
        }
    }
}

impl From<ReplayError> for ApiError {
    fn from(error: ReplayError) -> Self {
        match error {
            ReplayError::NotFound(id) => ApiError::JobNotFound(id),
            pending @ ReplayError::Pending(_) => ApiError::Conflict(pending.to_string()),
            ReplayError::Database(error) => error.into(),
        }
    }
}

impl From<BackfillError> for ApiError {
    fn from(error: BackfillError) -> Self {
        match error {
            BackfillError::NotFound(name) => ApiError::DestinationNotFound(name),
            BackfillError::EmptyRange => ApiError::BadRequest(error.to_string()),
            BackfillError::Database(error) => error.into(),
        }
    }
}

impl From<DestinationError> for ApiError {
    fn from(error: DestinationError) -> Self {
        match error {
            DestinationError::NotFound(name) => ApiError::DestinationNotFound(name),
            DestinationError::Database(error) => error.into(),
        }
    }
}
