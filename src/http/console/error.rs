//! What a console page answers when it cannot show what was asked: the
//! status code of the admin API's answer to the same failure, as a page.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::templates;
use crate::http::ApiError;
use crate::operations::ReprocessError;
use crate::operations::backfill::BackfillError;
use crate::operations::destinations::DestinationError;
use crate::operations::jobs::ReplayError;

/// A console request that failed; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// A filter, form or path that does not parse: 400.
    #[error("{0}")]
    BadRequest(String),
    /// A POST without the session's CSRF token: 403.
    #[error("this form has expired or did not come from the console: reload the page and try again")]
    Forbidden,
    /// No such page or archive row: 404.
    #[error("not found")]
    NotFound,
    /// Anything the admin API would answer with an error: its status, its reason.
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl From<minijinja::Error> for ConsoleError {
    /// A template that failed to render: logged, answered 500.
    fn from(error: minijinja::Error) -> Self {
        tracing::error!(%error, "console template failed");
        ConsoleError::Api(ApiError::Internal)
    }
}

impl From<sqlx::Error> for ConsoleError {
    fn from(error: sqlx::Error) -> Self {
        ConsoleError::Api(error.into())
    }
}

impl From<ReprocessError> for ConsoleError {
    fn from(error: ReprocessError) -> Self {
        ConsoleError::Api(error.into())
    }
}

impl From<DestinationError> for ConsoleError {
    fn from(error: DestinationError) -> Self {
        ConsoleError::Api(error.into())
    }
}

impl From<ReplayError> for ConsoleError {
    fn from(error: ReplayError) -> Self {
        ConsoleError::Api(error.into())
    }
}

impl From<BackfillError> for ConsoleError {
    fn from(error: BackfillError) -> Self {
        ConsoleError::Api(error.into())
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, reason) = match self {
            ConsoleError::BadRequest(reason) => (StatusCode::BAD_REQUEST, reason),
            ConsoleError::Forbidden => (StatusCode::FORBIDDEN, ConsoleError::Forbidden.to_string()),
            ConsoleError::NotFound => (StatusCode::NOT_FOUND, "not found".into()),
            ConsoleError::Api(error) => {
                let status = error.status_code();
                let reason = match status {
                    StatusCode::SERVICE_UNAVAILABLE => {
                        "the database is unavailable or busy; try again".into()
                    }
                    _ if status.is_client_error() => error.to_string(),
                    _ => "internal error".into(),
                };
                // Building the JSON answer logs an internal cause, once;
                // the page, like that answer, does not show it.
                drop(error.into_response());
                (status, reason)
            }
        };
        (status, templates::error_page(status, &reason)).into_response()
    }
}
