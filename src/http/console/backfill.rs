//! A destination's backfill from the console: a form (since, until, dry
//! run) whose submission runs `operations::backfill`, the code behind
//! `destinations backfill` and the admin API's, and shows how many jobs it
//! enqueued (or, in a dry run, would). A run that writes gets an audit row.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Html;
use minijinja::context;
use serde::Deserialize;
use serde_json::json;

use super::error::ConsoleError;
use super::session::Session;
use super::templates::render;
use crate::http::{ApiError, AppState};
use crate::operations::Since;
use crate::operations::audit;
use crate::operations::backfill::{self, BackfillRange};

/// The form as typed: an empty field is one not given; the dry run box is
/// sent only when ticked.
#[derive(Default, Deserialize)]
struct BackfillForm {
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    dry_run: Option<String>,
}

impl BackfillForm {
    /// The range it names; a 400 with the parser's reason otherwise.
    fn range(&self) -> Result<BackfillRange, ConsoleError> {
        let time = |field: &str, text: &str| {
            text.parse::<Since>().map_err(|e| ConsoleError::BadRequest(format!("{field}: {e}")))
        };
        let since = match self.since.trim() {
            "" => return Err(ConsoleError::BadRequest("since is required, e.g. 30d".into())),
            since => time("since", since)?,
        };
        let until = match self.until.trim() {
            "" => None,
            until => Some(time("until", until)?),
        };
        Ok(BackfillRange { since, until })
    }
}

/// `GET /console/destinations/{name}/backfill`: the form, a dry run ticked.
pub async fn form(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    if state.forwarding.declaration.get(&name).is_none() {
        return Err(ApiError::DestinationNotFound(name).into());
    }
    let form = BackfillForm { since: "30d".into(), dry_run: Some("on".into()), ..BackfillForm::default() };
    page(&session, &name, &form, None)
}

/// `POST /console/destinations/{name}/backfill`: runs it (or its dry run)
/// and shows the count under the form as it was submitted.
pub async fn run(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
    form: Bytes,
) -> Result<Html<String>, ConsoleError> {
    let form: BackfillForm =
        serde_urlencoded::from_bytes(&form).map_err(|_| ConsoleError::BadRequest("invalid form".into()))?;
    let dry_run = form.dry_run.is_some();
    let done =
        backfill::backfill(&state.pool, &state.forwarding.declaration, &name, form.range()?, dry_run).await?;
    if !dry_run {
        state.forwarding.wake(&name);
        let outcome =
            json!({ "enqueued": done.enqueued, "since": form.since.trim(), "until": form.until.trim() });
        audit::record_destination(&state.pool, &session.actor(), "backfill", &name, outcome).await?;
    }
    page(&session, &name, &form, Some(done.enqueued))
}

/// The page: the form with `form`'s values, and `enqueued` once it ran.
fn page(
    session: &Session,
    name: &str,
    form: &BackfillForm,
    enqueued: Option<u64>,
) -> Result<Html<String>, ConsoleError> {
    Ok(render(
        "backfill.html",
        context! {
            csrf => &session.csrf_token, nav => "overview", destination => name,
            since => &form.since, until => &form.until, dry_run => form.dry_run.is_some(), enqueued,
        },
    )?)
}
