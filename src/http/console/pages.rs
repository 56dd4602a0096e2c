//! The console's pages: the overview, the events list, one event.

use axum::Extension;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use minijinja::{HtmlEscape, Value, context};
use serde::{Deserialize, Serialize};

use super::chart;
use super::error::ConsoleError;
use super::session::Session;
use super::templates::{render, serde};
use crate::http::{AppState, UnknownFields};
use crate::operations::page::{self, Cursor};
use crate::operations::query::Received;
use crate::operations::{EventFilter, audit, destinations, display, jobs, overview, query, side_effects};
use crate::reconcile;

/// Rows per page of the events list.
const PAGE: u32 = 50;
/// A forwarding job's latest attempts shown on its event's page (replays
/// count on, so a job's attempts have no bound).
const ATTEMPTS_SHOWN: usize = 10;
/// Operators' latest actions on destinations shown on the overview.
const DESTINATION_ACTIONS: u32 = 10;
/// Most payload shown on an event's page, counted as escaped HTML; the
/// whole of it is a link away. Keeps every page under 100 KB whatever the
/// provider sent.
const PAYLOAD_SHOWN: usize = 48 * 1024;

/// The filters of a list, as its URL holds them: the pairs (to build links
/// with) and what they mean. Empty fields (a form's untouched inputs) are
/// left out.
pub struct Filters {
    /// `name=value` pairs, in the order given, without `cursor` and `csrf`.
    pub pairs: Vec<(String, String)>,
    /// What they select.
    pub filter: EventFilter,
}

/// A filter, and the fields it does not have (refused, as the admin API does).
#[derive(Deserialize)]
struct FilterQuery {
    #[serde(flatten)]
    filter: EventFilter,
    #[serde(flatten)]
    unknown: UnknownFields,
}

impl Filters {
    /// Reads `query` (`status=FAILED&provider=paddle...`): the same fields,
    /// parsed by the same code, as the admin API's and the CLI's filters.
    pub fn parse(query: &str) -> Result<(Filters, Option<String>), ConsoleError> {
        let bad = |e: &dyn std::fmt::Display| ConsoleError::BadRequest(format!("invalid filter: {e}"));
        let mut pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).map_err(|e| bad(&e))?;
        pairs.retain(|(_, value)| !value.is_empty());
        let cursor = pairs.iter().find(|(name, _)| name == "cursor").map(|(_, value)| value.clone());
        pairs.retain(|(name, _)| name != "cursor" && name != "csrf");
        // serde_html_form, not serde_urlencoded: `where` may repeat.
        let FilterQuery { filter, unknown } = serde_urlencoded::to_string(&pairs)
            .map_err(|e| bad(&e))
            .and_then(|query| serde_html_form::from_str(&query).map_err(|e| bad(&e)))?;
        unknown.refuse()?;
        Ok((Filters { pairs, filter }, cursor))
    }

    /// The query string of these filters plus `extra`.
    pub fn query(&self, extra: &[(&str, &str)]) -> String {
        let pairs = self.pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())).chain(extra.iter().copied());
        serde_urlencoded::to_string(pairs.collect::<Vec<_>>()).unwrap_or_default()
    }

    /// The value of field `name`, for the form to show.
    pub fn value(&self, name: &str) -> &str {
        self.pairs.iter().find(|(n, _)| n == name).map_or("", |(_, v)| v.as_str())
    }

    /// The form's fields and their current values.
    fn form(&self) -> Value {
        let field = |name| self.value(name);
        let conditions: Vec<String> =
            self.pairs.iter().filter(|(name, _)| name == "where").map(|(_, value)| value.clone()).collect();
        context! {
            status => field("status"), provider => field("provider"), type => field("type"),
            since => field("since"), until => field("until"), event_id => field("event_id"),
            where => conditions,
        }
    }
}

/// The enabled providers' names, sorted: the overview's rows, the list's choices.
fn provider_names(state: &AppState) -> Vec<String> {
    state.providers.names().into_iter().map(String::from).collect()
}

/// A provider's overview line: the archive's counts and this process's rejections.
#[derive(Serialize)]
struct ProviderLine {
    #[serde(flatten)]
    activity: overview::ProviderActivity,
    rejected_since_start: u64,
}

/// `GET /console`: the overview.
pub async fn overview(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
) -> Result<Html<String>, ConsoleError> {
    let overview = overview::overview(&state.pool, &provider_names(&state)).await?;
    let providers: Vec<ProviderLine> = overview
        .providers
        .iter()
        .map(|activity| ProviderLine {
            rejected_since_start: state.metrics.provider(&activity.provider).rejected_since_start(),
            activity: activity.clone(),
        })
        .collect();
    let destinations = destinations::list(&state.pool, &state.forwarding.declaration).await?;
    // The same read as `GET /admin/reconciliation`.
    let reconciliation = reconcile::state::last_runs(&state.pool).await?;
    let destination_actions = match destinations.is_empty() {
        true => Vec::new(),
        false => audit::of_destinations(&state.pool, DESTINATION_ACTIONS).await?,
    };
    let strips: Vec<Value> = chart::strips(&overview.per_minute)
        .into_iter()
        .map(|strip| {
            // Numbers and fixed words only (chart.rs): safe to embed as markup.
            let svg = Value::from_safe_string(strip.svg);
            context! { label => strip.label, class => strip.class, peak => strip.peak, total => strip.total, svg }
        })
        .collect();
    Ok(render(
        "overview.html",
        context! {
            csrf => session.csrf_token, nav => "overview", overview => serde(&overview),
            providers => serde(&providers), strips, destinations => serde(&destinations),
            destination_actions => serde(&destination_actions), reconciliation => serde(&reconciliation),
        },
    )?)
}

/// `GET /console/events?status=&provider=&type=&since=&until=&event_id=&cursor=`.
pub async fn events(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    RawQuery(query): RawQuery,
) -> Result<Html<String>, ConsoleError> {
    let (filters, cursor) = Filters::parse(query.as_deref().unwrap_or(""))?;
    let cursor = cursor
        .map(|cursor| cursor.parse::<Cursor<Received>>())
        .transpose()
        .map_err(|e| ConsoleError::BadRequest(e.to_string()))?;
    let page = page::page(&state.pool, &filters.filter, PAGE, cursor).await?;
    let next = page.next_cursor.map(|cursor| filters.query(&[("cursor", &cursor.to_string())]));
    // Only unapplied FAILED events are reprocessed in bulk: offered unless
    // the filter asks for another status.
    let bulk = matches!(filters.filter.status, None | Some(crate::operations::Status::Failed))
        .then(|| filters.query(&[]));
    Ok(render(
        "events.html",
        context! {
            csrf => session.csrf_token, nav => "events", events => serde(&page.events), next,
            filtered => !filters.pairs.is_empty(), bulk, form => filters.form(),
            providers => provider_names(&state),
        },
    )?)
}

/// `GET /console/events/{id}`: every delivery of the row's event, its
/// payload, what it changed, its forwarding jobs, and what operators did
/// to it.
pub async fn event(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Html<String>, ConsoleError> {
    let id = archive_id(id)?;
    let shown = query::show(&state.pool, id).await?.ok_or(ConsoleError::NotFound)?;
    let row = &shown.event.summary;
    let mut attempts = shown.other_deliveries.clone();
    attempts.push(row.clone());
    attempts.sort_by_key(|attempt| attempt.id);
    let effects = side_effects::of_event(&state.pool, &row.event_id).await?;
    let forwarding = jobs::of_event(&state.pool, &row.provider, &row.event_id).await?;
    let actions = audit::of_event(&state.pool, &row.provider, &row.event_id).await?;
    let pretty = serde_json::to_string_pretty(&shown.event.payload).unwrap_or_default();
    let visible = display::visible_json(&pretty);
    let shown_part = escaped_prefix(&visible, PAYLOAD_SHOWN);
    let truncated = shown_part.len() < visible.len();
    // Escaped here rather than by the template, which would also write its
    // line breaks as escapes (templates.rs): the same escaping, once.
    let payload = Value::from_safe_string(HtmlEscape(shown_part).to_string());
    let effects_empty = effects.is_empty();
    Ok(render(
        "event.html",
        context! {
            csrf => session.csrf_token, nav => "events", event => serde(&shown.event),
            attempts => serde(&attempts), payload, truncated, payload_bytes => pretty.len(),
            effects => serde(&effects), effects_empty, actions => serde(&actions),
            jobs => serde(&forwarding), attempts_shown => ATTEMPTS_SHOWN,
        },
    )?)
}

/// `GET /console/events/{id}/payload.json`: the stored payload, whole.
pub async fn payload(
    State(state): State<AppState>,
    id: Result<Path<i64>, PathRejection>,
) -> Result<Response, ConsoleError> {
    let id = archive_id(id)?;
    let shown = query::show(&state.pool, id).await?.ok_or(ConsoleError::NotFound)?;
    let pretty = serde_json::to_string_pretty(&shown.event.payload).unwrap_or_default();
    Ok(([(header::CONTENT_TYPE, "application/json")], pretty).into_response())
}

/// The longest start of `text` whose HTML-escaped form fits in `budget`
/// bytes (an escaped character takes at most 6: `&#x27;`).
fn escaped_prefix(text: &str, budget: usize) -> &str {
    let mut used = 0;
    for (at, c) in text.char_indices() {
        used += match c {
            '&' | '<' | '>' | '"' | '\'' | '/' => 6,
            _ => c.len_utf8(),
        };
        if used > budget {
            return &text[..at];
        }
    }
    text
}

/// The archive id of the path.
pub fn archive_id(id: Result<Path<i64>, PathRejection>) -> Result<i64, ConsoleError> {
    id.map(|Path(id)| id).map_err(|_| ConsoleError::NotFound)
}
