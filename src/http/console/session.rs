//! Signing in to the console: the admin token, once, for a session cookie.
//!
//! Sessions live in PostgreSQL (`console_sessions`), so that sign-out and
//! expiry end them on every replica. The cookie holds a random secret; the
//! table holds its SHA-256 digest and the session's CSRF token, which every
//! form carries and [`require`] checks on every POST before its handler runs.
//! The cookie is `HttpOnly` (no script reads it), `SameSite=Strict` (no other
//! site's page sends it) and, when configured, `Secure`.

use axum::Form;
use axum::body::{Body, Bytes};
use axum::extract::{OriginalUri, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::time::Instant;
use uuid::Uuid;

use super::error::ConsoleError;
use super::templates;
use crate::http::AppState;
use crate::http::auth::note_refusal;
use crate::http::error::retry_after_secs;
use crate::http::guessing::Refusal;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "console_session";
/// The sign-in form's own CSRF cookie (there is no session yet to hold one).
const SIGN_IN_COOKIE: &str = "console_sign_in";
/// Largest form body the CSRF check reads.
const MAX_FORM_BYTES: usize = 64 * 1024;

/// A signed-in operator's session, for the handlers behind [`require`].
#[derive(Debug, Clone)]
pub struct Session {
    /// Names the session in the audit (not the cookie's secret).
    pub id: Uuid,
    /// The token every form of this session carries.
    pub csrf_token: String,
}

impl Session {
    /// Who acted, as the audit records it.
    pub fn actor(&self) -> String {
        format!("console session {}", self.id)
    }
}

/// A random secret: two v4 UUIDs, 244 bits from the operating system's generator.
fn random_secret() -> String {
    format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}

fn digest(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// The value of cookie `name` in the request, if sent.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Whether two secrets are equal, in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Lets a request through only with a live session: a page without one is
/// redirected to the sign-in form (which comes back to it); a POST must
/// also carry the session's CSRF token in its form (`csrf`), else 403.
pub async fn require(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let secret = cookie(request.headers(), SESSION_COOKIE).map(str::to_owned);
    let found = match secret {
        Some(secret) => match find(&state, &secret).await {
            Ok(found) => found,
            Err(error) => return error.into_response(),
        },
        None => None,
    };
    let Some(session) = found else {
        return to_sign_in(&request);
    };
    let mut request = match request.method() == Method::POST {
        true => match csrf_checked(request, &session).await {
            Ok(request) => request,
            Err(error) => return error.into_response(),
        },
        false => request,
    };
    request.extensions_mut().insert(session);
    next.run(request).await
}

/// The session whose cookie secret is `secret`, if it has not expired or been ended.
async fn find(state: &AppState, secret: &str) -> Result<Option<Session>, ConsoleError> {
    let row: Option<(Uuid, String)> = sqlx::query_as(
        "SELECT id, csrf_token FROM console_sessions WHERE token_digest = $1 AND expires_at > now()",
    )
    .bind(digest(secret))
    .fetch_optional(&state.pool)
    .await?;
    Ok(row.map(|(id, csrf_token)| Session { id, csrf_token }))
}

/// The form field every state-changing request carries.
#[derive(Deserialize)]
struct CsrfField {
    csrf: Option<String>,
}

/// Reads the form body, checks its `csrf` field against the session's, and
/// gives the request back with the body for the handler.
async fn csrf_checked(request: Request, session: &Session) -> Result<Request, ConsoleError> {
    let (parts, body) = request.into_parts();
    let bytes: Bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| ConsoleError::BadRequest("the form is too large".into()))?;
    let field: CsrfField = serde_urlencoded::from_bytes(&bytes).unwrap_or(CsrfField { csrf: None });
    match field.csrf {
        Some(csrf) if same(&csrf, &session.csrf_token) => Ok(Request::from_parts(parts, Body::from(bytes))),
        _ => Err(ConsoleError::Forbidden),
    }
}

/// 303 to the sign-in form, which returns to this page once signed in.
fn to_sign_in(request: &Request) -> Response {
    let original = request.extensions().get::<OriginalUri>().map_or_else(
        || "/console".to_string(),
        |uri| uri.0.path_and_query().map_or("/console".into(), |p| p.to_string()),
    );
    // A form posted without a session returns to the page, not to the POST.
    let next = match request.method() == Method::GET {
        true => original,
        false => "/console".into(),
    };
    let query = serde_urlencoded::to_string([("next", next)]).unwrap_or_default();
    Redirect::to(&format!("/console/sign-in?{query}")).into_response()
}

/// Where the sign-in form returns to.
#[derive(Deserialize)]
pub struct ReturnTo {
    next: Option<String>,
}

/// A `next` that stays in the console; anything else goes to the overview.
fn next_page(next: Option<&str>) -> &str {
    next.filter(|next| {
        (next == &"/console" || next.starts_with("/console/") || next.starts_with("/console?"))
            && !next.contains("//")
            && !next.contains('\\')
            && next.bytes().all(|b| b.is_ascii_graphic())
    })
    .unwrap_or("/console")
}

/// `GET /console/sign-in`: the form, with a fresh CSRF cookie of its own.
pub async fn sign_in_form(State(state): State<AppState>, Query(next): Query<ReturnTo>) -> Response {
    let csrf = random_secret();
    let page = templates::sign_in(&csrf, next_page(next.next.as_deref()), None);
    with_cookie(page.into_response(), &state, SIGN_IN_COOKIE, &csrf, 3600, "/console/sign-in")
}

/// The sign-in form's fields.
#[derive(Deserialize)]
pub struct SignIn {
    token: String,
    csrf: String,
    next: Option<String>,
}

/// `POST /console/sign-in`: with the admin token, a new session and its
/// cookie, then back to the page asked for; otherwise 401 and the form again.
pub async fn sign_in(
    State(state): State<AppState>,
    request: Parts,
    form: Result<Form<SignIn>, axum::extract::rejection::FormRejection>,
) -> Result<Response, ConsoleError> {
    let headers = &request.headers;
    let Form(form) = form.map_err(|e| ConsoleError::BadRequest(e.body_text()))?;
    let expected = cookie(headers, SIGN_IN_COOKIE).ok_or(ConsoleError::Forbidden)?;
    if !same(&form.csrf, expected) {
        return Err(ConsoleError::Forbidden);
    }
    let admin_token = state.admin_token.as_ref().ok_or(ConsoleError::NotFound)?;
    let next = next_page(form.next.as_deref()).to_string();
    let client = state.guessing.client(headers, &request.extensions);
    if let Err(refusal) = state.guessing.check(client, Instant::now(), || admin_token.matches(&form.token)) {
        note_refusal(&state, "console", client, refusal);
        let (status, message, wait) = match refusal {
            Refusal::Wrong => (StatusCode::UNAUTHORIZED, "That is not the admin token.".to_string(), None),
            Refusal::Throttled(wait) => {
                let secs = retry_after_secs(wait);
                let message = format!("Too many wrong tokens from this address: try again in {secs} s.");
                (StatusCode::TOO_MANY_REQUESTS, message, Some(secs))
            }
        };
        let mut page = (status, templates::sign_in(&form.csrf, &next, Some(&message))).into_response();
        if let Some(secs) = wait {
            page.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        return Ok(page);
    }
    let secret = random_secret();
    let ttl = state.console.session_ttl;
    // Expired sessions go as new ones come: the table stays as small as the live ones.
    sqlx::query("DELETE FROM console_sessions WHERE expires_at <= now()").execute(&state.pool).await?;
    let id: Uuid = sqlx::query_scalar(
        "INSERT INTO console_sessions (token_digest, csrf_token, expires_at)
         VALUES ($1, $2, now() + make_interval(secs => $3)) RETURNING id",
    )
    .bind(digest(&secret))
    .bind(random_secret())
    .bind(ttl.as_secs_f64())
    .fetch_one(&state.pool)
    .await?;
    tracing::info!(session = %id, "console sign-in");
    let response = Redirect::to(&next).into_response();
    let response = with_cookie(response, &state, SIGN_IN_COOKIE, "", 0, "/console/sign-in");
    Ok(with_cookie(response, &state, SESSION_COOKIE, &secret, ttl.as_secs(), "/console"))
}

/// `POST /console/sign-out`: ends the session everywhere and clears its cookie.
pub async fn sign_out(
    State(state): State<AppState>,
    axum::Extension(session): axum::Extension<Session>,
) -> Result<Response, ConsoleError> {
    sqlx::query("DELETE FROM console_sessions WHERE id = $1").bind(session.id).execute(&state.pool).await?;
    tracing::info!(session = %session.id, "console sign-out");
    let response = Redirect::to("/console/sign-in").into_response();
    Ok(with_cookie(response, &state, SESSION_COOKIE, "", 0, "/console"))
}

/// Adds `Set-Cookie` for `name=value` (max age 0: deleted).
fn with_cookie(
    mut response: Response,
    state: &AppState,
    name: &str,
    value: &str,
    max_age_secs: u64,
    path: &str,
) -> Response {
    let secure = if state.console.secure_cookie { "; Secure" } else { "" };
    let cookie =
        format!("{name}={value}; Path={path}; Max-Age={max_age_secs}; HttpOnly; SameSite=Strict{secure}");
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_console_pages_are_returned_to_after_sign_in() {
        for kept in ["/console", "/console/events?status=FAILED", "/console/events/7"] {
            assert_eq!(next_page(Some(kept)), kept);
        }
        for refused in [
            "https://evil.example/",
            "//evil.example",
            "/console//evil",
            "/consoleX",
            "/console/\\x",
            "/admin",
        ] {
            assert_eq!(next_page(Some(refused)), "/console", "{refused}");
        }
        assert_eq!(next_page(None), "/console");
    }

    #[test]
    fn cookies_are_found_by_exact_name() {
        let mut headers = HeaderMap::new();
        headers
            .insert(header::COOKIE, HeaderValue::from_static("a=1; console_session_x=2; console_session=3"));
        assert_eq!(cookie(&headers, SESSION_COOKIE), Some("3"));
        assert_eq!(cookie(&headers, "b"), None);
    }
}
