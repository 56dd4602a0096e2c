//! The console driven in-process: sign in as a browser would (the sign-in
//! form's CSRF cookie, then the session cookie), then pages as text.

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::app::TestApp;

/// The admin token of the console's tests.
pub const ADMIN_TOKEN: &str = "console-test-token-0123456789";

/// A page: status, headers, body.
#[derive(Debug)]
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    /// Where a redirect goes.
    pub fn location(&self) -> &str {
        self.headers.get(header::LOCATION).map_or("", |v| v.to_str().unwrap())
    }

    /// The value of the cookie this answer sets, `name=value`, if any.
    pub fn set_cookie(&self, name: &str) -> Option<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .find(|v| v.starts_with(&format!("{name}=")))
            .map(String::from)
    }

    /// The value of the first hidden input `name` on the page.
    pub fn hidden(&self, name: &str) -> String {
        let marker = format!("name=\"{name}\" value=\"");
        let start =
            self.body.find(&marker).unwrap_or_else(|| panic!("no {name} on {}", self.body)) + marker.len();
        self.body[start..].split('"').next().unwrap().to_string()
    }
}

/// A signed-in operator: the session cookie and the session's CSRF token.
pub struct Operator {
    pub cookie: String,
    pub csrf: String,
}

/// Sends a request to the app, with `cookie` (`name=value`) when given.
pub async fn request(
    app: &TestApp,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    form: Option<&str>,
) -> Page {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    let body = match form {
        Some(form) => {
            request = request.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
            Body::from(form.to_string())
        }
        None => Body::empty(),
    };
    let response = app.router.clone().oneshot(request.body(body).unwrap()).await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Page { status, headers, body: String::from_utf8_lossy(&bytes).into_owned() }
}

/// Signs in with `token` as the form would.
pub async fn sign_in(app: &TestApp, token: &str) -> Page {
    let form = request(app, "GET", "/console/sign-in", None, None).await;
    let csrf = form.hidden("csrf");
    let cookie = form.set_cookie("console_sign_in").unwrap();
    let cookie = cookie.split(';').next().unwrap();
    let body =
        serde_urlencoded::to_string([("token", token), ("csrf", &csrf), ("next", "/console")]).unwrap();
    request(app, "POST", "/console/sign-in", Some(cookie), Some(&body)).await
}

impl Operator {
    /// Signs in with the right token.
    pub async fn sign_in(app: &TestApp) -> Operator {
        let answer = sign_in(app, ADMIN_TOKEN).await;
        assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
        let cookie = answer.set_cookie("console_session").unwrap().split(';').next().unwrap().to_string();
        let overview = request(app, "GET", "/console", Some(&cookie), None).await;
        assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
        Operator { csrf: overview.hidden("csrf"), cookie }
    }

    /// `GET path` in this session.
    pub async fn get(&self, app: &TestApp, path: &str) -> Page {
        request(app, "GET", path, Some(&self.cookie), None).await
    }

    /// `POST path` in this session with `form` (the CSRF token is not added).
    pub async fn post(&self, app: &TestApp, path: &str, form: &str) -> Page {
        request(app, "POST", path, Some(&self.cookie), Some(form)).await
    }
}
