//! `POST` a webhook: read the body, verify, read the event, then hand the
//! delivery to its lane's workers and answer with what they committed.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Serialize;
use tracing::{Instrument, Span};

use super::error::ApiError;
use super::{AppState, request_id};
use crate::event::Payload;
use crate::inbox::{Delivery, Recorded, Source};
use crate::providers;
use crate::telemetry;

/// `POST /webhooks/{name}`: receives one delivery for the provider called `name`.
pub async fn receive_named(
    state: State<AppState>,
    name: Result<Path<String>, PathRejection>,
    request: Request,
) -> Result<Json<Answer>, ApiError> {
    let Ok(Path(name)) = name else { return Err(ApiError::NotFound) };
    receive(state, &name, request).await
}

/// Receives one delivery for the provider called `provider_name`.
pub async fn receive(
    State(state): State<AppState>,
    provider_name: &str,
    request: Request,
) -> Result<Json<Answer>, ApiError> {
    let started = Instant::now();
    // Counted under names that exist only: a path anyone can type must not
    // create metric series.
    let metrics = (state.providers.get(provider_name).is_some() || providers::is_built_in(provider_name))
        .then(|| state.metrics.provider(provider_name));
    // The request's span, looked up once: its fields are filled in as they become known.
    let span = Span::current();
    let result = receive_inner(state, &span, provider_name, request).await;
    let outcome = match &result {
        Ok((Recorded::Processed { .. }, _)) => "processed",
        Ok((Recorded::Duplicate { .. }, _)) => "duplicate",
        Ok((Recorded::Failed { .. }, _)) => "failed",
        Err(error) => error.outcome(),
    };
    span.record("outcome", outcome);
    if let Some(metrics) = metrics {
        metrics.answered(outcome, started.elapsed());
    }
    match result? {
        (Recorded::Processed { .. }, event_id) => {
            Ok(Json(Answer::Processed { event_id, status: "processed" }))
        }
        (Recorded::Duplicate { .. }, event_id) => Ok(Json(Answer::Duplicate { event_id, idempotent: true })),
        (Recorded::Failed { archive_id, .. }, event_id) => {
            // The error text may quote the payload: it is in the archive row, not here.
            // The message keeps the wire reason's word, "handler", which alerts may match.
            tracing::warn!(archive_id, "event handler failed");
            Err(ApiError::EffectFailed { event_id })
        }
    }
}

/// The 200 answer's body: `{"event_id", "status": "processed"}` or
/// `{"event_id", "idempotent": true}`. A type rather than a `json!` map,
/// since every delivery writes one.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Answer {
    /// The event's first delivery: its effects are committed.
    Processed {
        /// The provider's event id.
        event_id: String,
        /// Always `processed`.
        status: &'static str,
    },
    /// A delivery of an event already processed.
    Duplicate {
        /// The provider's event id.
        event_id: String,
        /// Always `true`.
        idempotent: bool,
    },
}

async fn receive_inner(
    state: AppState,
    span: &Span,
    provider_name: &str,
    request: Request,
) -> Result<(Recorded, String), ApiError> {
    let provider = match state.providers.get(provider_name) {
        Some(provider) => provider.clone(),
        None if providers::is_built_in(provider_name) => {
            span.record("provider", provider_name);
            return Err(ApiError::ProviderDisabled(provider_name.to_string()));
        }
        None => return Err(ApiError::NotFound),
    };
    span.record("provider", provider.name());
    let (parts, body) = request.into_parts();
    let body = read_body(&parts.headers, body, &state).await?;
    let metrics = state.metrics.provider(provider.name());

    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    // Nothing touches the database before this check passes: an unsigned
    // request must not be able to write anything.
    let verified = tracing::info_span!("verify").in_scope(|| {
        provider.verify(&parts.headers, &body, now).inspect_err(|reason| {
            tracing::warn!(provider = provider.name(), %reason, "rejected unverified delivery");
            metrics.rejected(reason);
        })
    })?;
    metrics.verified();
    let payload = Payload::from_body(body)?;
    let event = providers::format_of(provider.name()).read_request(&parts.headers, &payload)?;
    span.record("event_id", event.id.as_str());
    let (event_id, occurred_at) = (event.id.clone(), event.occurred_at);
    let delivery = Delivery {
        provider: provider.name().to_owned(),
        event,
        payload,
        source: Source::Webhook {
            signature: verified.signature.to_owned(),
            secret_index: verified.secret_index,
        },
        request_id: request_id(&parts.headers).map(str::to_owned),
        traceparent: telemetry::context::traceparent(span),
    };

    // The rest runs on a delivery worker, to its end even if this request
    // is dropped (the client disconnected): the transaction commits or rolls
    // back as a whole.
    let outcome = state
        .workers
        .deliver(state.routing.route(delivery))
        .instrument(tracing::info_span!("transaction"))
        .await?;
    if let Recorded::Processed { .. } = outcome {
        metrics.processed(occurred_at);
    }
    Ok((outcome, event_id))
}

async fn read_body(headers: &HeaderMap, body: Body, state: &AppState) -> Result<Bytes, ApiError> {
    let limit = state.limits.max_body_bytes;
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    let collect = Limited::new(body, limit).collect();
    match tokio::time::timeout(state.limits.body_read_timeout, collect).await {
        Err(_) => Err(ApiError::BodyTimeout),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.is::<LengthLimitError>() => Err(ApiError::PayloadTooLarge(limit)),
        Ok(Err(_)) => Err(ApiError::BodyRead),
    }
}
