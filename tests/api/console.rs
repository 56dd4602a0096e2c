//! The console over HTTP, in-process: who gets in, what a request without
//! its CSRF token changes (nothing), the headers every page carries, and
//! the size of pages. What a browser does with the pages is in
//! `console_browser.rs`.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use webhook_inbox::http::ConsoleSettings;

use crate::support::app::status_of;
use crate::support::console::{ADMIN_TOKEN, Operator, request, sign_in};
use crate::support::*;

async fn console_app() -> TestApp {
    TestApp::spawn_with(TestConfig { admin_token: Some(ADMIN_TOKEN), ..TestConfig::default() }).await
}

/// A FAILED Paddle delivery (the ledger refused it), its archive id.
async fn failed_event(app: &TestApp, event_id: &str) -> i64 {
    app.refuse_inserts_into("credit_grants").await;
    app.send(&paddle(&subscription_created(event_id, &format!("sub_{event_id}")))).await;
    app.allow_inserts_into("credit_grants").await;
    *app.archive_ids().await.last().unwrap()
}

#[tokio::test]
async fn without_an_admin_token_the_console_does_not_exist() {
    let app = TestApp::spawn().await;
    for path in ["/console", "/console/sign-in", "/console/events", "/console/console.css"] {
        assert_eq!(request(&app, "GET", path, None, None).await.status, StatusCode::NOT_FOUND, "{path}");
    }
    let post = request(&app, "POST", "/console/sign-in", None, Some("token=x&csrf=y")).await;
    assert_eq!(post.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn without_a_session_every_page_redirects_to_sign_in_and_comes_back() {
    let app = console_app().await;
    let id = failed_event(&app, "evt_01").await;
    for path in
        ["/console".to_string(), "/console/events?status=FAILED".into(), format!("/console/events/{id}")]
    {
        let page = request(&app, "GET", &path, None, None).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{path}");
        let next = serde_urlencoded::to_string([("next", &path)]).unwrap();
        assert_eq!(page.location(), format!("/console/sign-in?{next}"));
    }
    let forged = request(&app, "GET", "/console", Some("console_session=not-a-session"), None).await;
    assert_eq!(forged.status, StatusCode::SEE_OTHER);
    let post = request(&app, "POST", &format!("/console/events/{id}/reprocess"), None, Some("csrf=x")).await;
    assert_eq!(post.status, StatusCode::SEE_OTHER);
    assert_eq!(app.archive_ids().await.len(), 1, "nothing was reprocessed");
}

#[tokio::test]
async fn sign_in_needs_the_admin_token_and_sets_a_strict_http_only_cookie() {
    let app = console_app().await;
    let wrong = sign_in(&app, "not-the-admin-token").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(wrong.set_cookie("console_session").is_none());
    assert!(wrong.body.contains("That is not the admin token."));

    let right = sign_in(&app, ADMIN_TOKEN).await;
    assert_eq!((right.status, right.location()), (StatusCode::SEE_OTHER, "/console"));
    let cookie = right.set_cookie("console_session").unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age=28800"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "Secure only when configured: {cookie}");
    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT token_digest FROM console_sessions").fetch_one(app.pool()).await.unwrap();
    let secret = cookie.split(';').next().unwrap().trim_start_matches("console_session=");
    assert!(!stored.is_empty() && !secret.is_empty());
    assert_ne!(stored, secret.as_bytes(), "only the digest is stored");
}

#[tokio::test]
async fn behind_tls_the_session_cookie_is_secure_and_lasts_as_configured() {
    let mut app = console_app().await;
    let settings = ConsoleSettings { secure_cookie: true, session_ttl: Duration::from_secs(600) };
    app.router = webhook_inbox::http::app(app.state.clone().with_console(settings));
    let cookie = sign_in(&app, ADMIN_TOKEN).await.set_cookie("console_session").unwrap();
    assert!(cookie.ends_with("; Secure") && cookie.contains("Max-Age=600"), "{cookie}");
    let lasts: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM expires_at - created_at)::float8 FROM console_sessions",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert!((599.0..=601.0).contains(&lasts), "{lasts}");
}

#[tokio::test]
async fn the_sign_in_form_is_refused_without_its_csrf_cookie() {
    let app = console_app().await;
    let body = format!("token={ADMIN_TOKEN}&csrf=guessed");
    let answer = request(&app, "POST", "/console/sign-in", Some("console_sign_in=other"), Some(&body)).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(app.count("SELECT count(*) FROM console_sessions").await, 0);
}

#[tokio::test]
async fn a_state_changing_request_without_the_sessions_csrf_token_is_refused_and_changes_nothing() {
    let app = console_app().await;
    let id = failed_event(&app, "evt_01").await;
    let operator = Operator::sign_in(&app).await;
    let reprocess = format!("/console/events/{id}/reprocess");
    for form in ["", "csrf=", "csrf=0123456789abcdef0123456789abcdef", "token=x"] {
        let answer = operator.post(&app, &reprocess, form).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{form:?}");
        let bulk = operator.post(&app, "/console/reprocess", &format!("{form}&status=FAILED")).await;
        assert_eq!(bulk.status, StatusCode::FORBIDDEN, "{form:?}");
    }
    let sign_out = operator.post(&app, "/console/sign-out", "").await;
    assert_eq!(sign_out.status, StatusCode::FORBIDDEN);
    assert_eq!(app.archive_statuses().await, ["FAILED"], "nothing was reprocessed");
    assert_eq!(app.count("SELECT count(*) FROM console_audit").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM console_sessions").await, 1, "still signed in");

    // With the token, the same request goes through.
    let answer = operator.post(&app, &reprocess, &format!("csrf={}", operator.csrf)).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert_eq!(app.archive_statuses().await, ["FAILED", "PROCESSED"]);
}

#[tokio::test]
async fn sign_out_and_expiry_end_the_session_on_the_server() {
    let app = console_app().await;
    let config = TestConfig { admin_token: Some(ADMIN_TOKEN), ..TestConfig::default() };
    let (_, replica) = app.replica_with(config).await;
    let first = Operator::sign_in(&app).await;
    let on_replica = status_of(&replica, "/console", &first.cookie).await;
    assert_eq!(on_replica, StatusCode::OK, "a replica shares the session");

    let out = first.post(&app, "/console/sign-out", &format!("csrf={}", first.csrf)).await;
    assert_eq!((out.status, out.location()), (StatusCode::SEE_OTHER, "/console/sign-in"));
    assert!(out.set_cookie("console_session").unwrap().contains("Max-Age=0"));
    // The old cookie, replayed, no longer opens anything, here or on the replica.
    assert_eq!(first.get(&app, "/console").await.status, StatusCode::SEE_OTHER);
    assert_eq!(status_of(&replica, "/console", &first.cookie).await, StatusCode::SEE_OTHER);

    let second = Operator::sign_in(&app).await;
    assert_eq!(second.get(&app, "/console").await.status, StatusCode::OK);
    sqlx::query("UPDATE console_sessions SET expires_at = now() - interval '1 second'")
        .execute(app.pool())
        .await
        .unwrap();
    assert_eq!(second.get(&app, "/console").await.status, StatusCode::SEE_OTHER, "expired");
}

#[tokio::test]
async fn every_console_answer_forbids_scripts_framing_and_caching() {
    let app = console_app().await;
    let operator = Operator::sign_in(&app).await;
    for page in
        [request(&app, "GET", "/console/sign-in", None, None).await, operator.get(&app, "/console").await]
    {
        let header = |name: &str| page.headers.get(name).map(|v| v.to_str().unwrap().to_string());
        let csp = header("content-security-policy").unwrap();
        assert!(csp.contains("default-src 'none'") && !csp.contains("script-src"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"));
        assert_eq!(header("x-frame-options").as_deref(), Some("DENY"));
        assert_eq!(header("cache-control").as_deref(), Some("no-store"));
        assert!(!page.body.contains("<script"), "no script of ours either");
    }
}

#[tokio::test]
async fn a_filter_that_does_not_parse_is_a_400_page_that_says_why() {
    let app = console_app().await;
    let operator = Operator::sign_in(&app).await;
    for (query, reason) in [
        ("status=BROKEN", "BROKEN"),
        ("since=yesterday", "yesterday"),
        ("cursor=zz", "cursor"),
        // The admin API's rules, by the same code: unknown fields and control characters are refused.
        ("stauts=FAILED", "unknown field &quot;stauts&quot;"),
        ("type=a%00b", "control characters"),
        ("event_id=%1b%5b2J", "control characters"),
    ] {
        let page = operator.get(&app, &format!("/console/events?{query}")).await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{query}");
        assert!(page.body.contains(reason), "{query}: {}", page.body);
    }
    assert_eq!(operator.get(&app, "/console/events/999999").await.status, StatusCode::NOT_FOUND);
    assert_eq!(operator.get(&app, "/console/events/abc").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn pages_stay_under_100_kb_whatever_the_payload_and_the_whole_payload_is_a_link_away() {
    let config =
        TestConfig { admin_token: Some(ADMIN_TOKEN), max_body_bytes: 1024 * 1024, ..TestConfig::default() };
    let app = TestApp::spawn_with(config).await;
    let mut big = subscription_created("evt_big", "sub_big");
    big["data"]["custom_data"]["notes"] = json!("x".repeat(60_000));
    big["data"]["custom_data"]["more"] = json!(vec!["<b>y</b>"; 2_000]);
    assert!(app.send(&paddle(&big)).await.status.is_success());
    for i in 0..60 {
        app.send(&paddle(&subscription_created(&format!("evt_{i:02}"), &format!("sub_{i:02}")))).await;
    }
    let id = app.archive_ids().await[0];
    let operator = Operator::sign_in(&app).await;
    for path in ["/console".to_string(), "/console/events".into(), format!("/console/events/{id}")] {
        let page = operator.get(&app, &path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert!(page.body.len() < 100 * 1024, "{path}: {} bytes", page.body.len());
    }
    let whole = operator.get(&app, &format!("/console/events/{id}/payload.json")).await;
    let payload: serde_json::Value = serde_json::from_str(&whole.body).unwrap();
    assert!(payload == big, "the whole payload, as stored");
}
