//! The admin API: the CLI's `events` commands over HTTP behind a bearer
//! token, and nothing at all without one.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::*;

const TOKEN: &str = "admin-token-0123456789";

async fn admin_app() -> TestApp {
    TestApp::spawn_with(TestConfig { admin_token: Some(TOKEN), ..TestConfig::default() }).await
}

#[tokio::test]
async fn without_an_admin_token_configured_the_whole_admin_tree_is_not_found() {
    let app = TestApp::spawn().await;
    for path in ["/admin", "/admin/events", "/admin/events/1", "/admin/anything/else"] {
        let answer = app.get(path, Some(TOKEN)).await;
        assert_eq!(
            (answer.status, answer.body),
            (StatusCode::NOT_FOUND, json!({ "error": "not found" })),
            "{path}"
        );
    }
    let answer = app.post_json("/admin/events/reprocess", None, &json!({ "status": "FAILED" })).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_admin_api_answers_401_without_the_right_bearer_token() {
    let app = admin_app().await;
    app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;

    let missing = app.get("/admin/events", None).await;
    assert_eq!(
        (missing.status, &missing.body),
        (StatusCode::UNAUTHORIZED, &json!({ "error": "missing bearer token" }))
    );
    assert_eq!(missing.headers["www-authenticate"], "Bearer");
    let wrong = app.get("/admin/events", Some("admin-token-0123456788")).await;
    assert_eq!(
        (wrong.status, wrong.body),
        (StatusCode::UNAUTHORIZED, json!({ "error": "invalid bearer token" }))
    );
    let reprocess = app.post_json("/admin/events/1/reprocess", Some("nope"), &json!({})).await;
    assert_eq!(reprocess.status, StatusCode::UNAUTHORIZED);
    assert_eq!(app.archive_statuses().await, ["PROCESSED"], "nothing reprocessed");

    let right = app.get("/admin/events", Some(TOKEN)).await;
    assert_eq!(right.status, StatusCode::OK);
    assert_eq!(right.body["events"][0]["event_id"], json!("evt_01"));
}

#[tokio::test]
async fn listing_filters_like_the_cli_and_pages_with_an_opaque_cursor() {
    let app = admin_app().await;
    for n in 1..=5 {
        app.send(&paddle(
            &json!({ "event_id": format!("evt_{n}"), "event_type": "customer.created", "data": {} }),
        ))
        .await;
    }
    app.send(&clerk("msg_01", &user_created("user_01"))).await;
    let ids = app.archive_ids().await;

    let mut pages = Vec::new();
    let mut path = "/admin/events?provider=paddle&limit=2".to_string();
    loop {
        let answer = app.get(&path, Some(TOKEN)).await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
        let page: Vec<i64> =
            answer.body["events"].as_array().unwrap().iter().map(|e| e["id"].as_i64().unwrap()).collect();
        pages.push(page);
        match &answer.body["next_cursor"] {
            Value::String(cursor) => path = format!("/admin/events?provider=paddle&limit=2&cursor={cursor}"),
            Value::Null => break,
            other => panic!("next_cursor {other}"),
        }
    }
    assert_eq!(pages, [vec![ids[4], ids[3]], vec![ids[2], ids[1]], vec![ids[0]]]);

    let clerk = app.get("/admin/events?type=user.created&since=1h&status=processed", Some(TOKEN)).await;
    assert_eq!(clerk.body["events"].as_array().unwrap().len(), 1);
    assert_eq!(clerk.body["next_cursor"], Value::Null);

    for bad in ["status=BROKEN", "since=yesterday", "limit=many", "cursor=not-a-cursor"] {
        let answer = app.get(&format!("/admin/events?{bad}"), Some(TOKEN)).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(answer.body["error"].is_string(), "{bad}: {:?}", answer.body);
    }
}

#[tokio::test]
async fn show_answers_the_row_and_the_other_deliveries_or_404() {
    let app = admin_app().await;
    app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;
    app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;
    let ids = app.archive_ids().await;

    let shown = app.get(&format!("/admin/events/{}", ids[1]), Some(TOKEN)).await;
    assert_eq!(shown.status, StatusCode::OK);
    assert_eq!(shown.body["event"]["processing_status"], json!("SKIPPED"));
    assert_eq!(shown.body["event"]["payload"], subscription_created("evt_01", "sub_01"));
    assert_eq!(shown.body["other_deliveries"][0]["id"], json!(ids[0]));

    let missing = app.get("/admin/events/999", Some(TOKEN)).await;
    assert_eq!(
        (missing.status, missing.body),
        (StatusCode::NOT_FOUND, json!({ "error": "archived event 999 not found" }))
    );
    let bad = app.get("/admin/events/abc", Some(TOKEN)).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn reprocessing_over_http_applies_a_fixed_event_once() {
    let app = admin_app().await;
    app.refuse_inserts_into("credit_grants").await;
    app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;
    app.allow_inserts_into("credit_grants").await;
    let failed = app.archive_ids().await[0];
    let path = format!("/admin/events/{failed}/reprocess");

    let first = app.post_json(&path, Some(TOKEN), &json!({})).await;
    let second = app.post_json(&path, Some(TOKEN), &json!({})).await;

    assert_eq!(first.status, StatusCode::OK);
    let new = app.archive_ids().await[1];
    assert_eq!(
        first.body,
        json!({ "reprocess_of": failed, "archive_id": new, "provider": "paddle", "event_id": "evt_01",
                "status": "PROCESSED", "error": null })
    );
    assert_eq!(second.body["status"], json!("SKIPPED"));
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
    let missing = app.post_json("/admin/events/999/reprocess", Some(TOKEN), &json!({})).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_bulk_reprocess_over_http_has_a_dry_run_a_limit_and_needs_a_filter() {
    let app = admin_app().await;
    app.refuse_inserts_into("credit_grants").await;
    for event in ["evt_01", "evt_02", "evt_03"] {
        app.send(&paddle(&subscription_created(event, event))).await;
    }
    app.allow_inserts_into("credit_grants").await;
    let path = "/admin/events/reprocess";

    let dry = app.post_json(path, Some(TOKEN), &json!({ "status": "FAILED", "dry_run": true })).await;
    assert_eq!(dry.status, StatusCode::OK);
    assert_eq!((dry.body["dry_run"].clone(), dry.body["more"].clone()), (json!(true), json!(false)));
    assert_eq!(dry.body["events"].as_array().unwrap().len(), 3);
    assert_eq!(app.archive_statuses().await.len(), 3, "a dry run writes nothing");

    let first =
        app.post_json(path, Some(TOKEN), &json!({ "status": "FAILED", "since": "1h", "limit": 2 })).await;
    assert_eq!(first.body["summary"], json!({ "processed": 2, "skipped": 0, "failed": 0 }));
    assert_eq!(first.body["more"], json!(true));
    let rest = app.post_json(path, Some(TOKEN), &json!({ "status": "FAILED", "limit": 2 })).await;
    assert_eq!(rest.body["summary"], json!({ "processed": 1, "skipped": 0, "failed": 0 }));
    assert_eq!(rest.body["results"][0]["event_id"], json!("evt_03"));
    assert_eq!(rest.body["more"], json!(false));
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 3);

    let unfiltered = app.post_json(path, Some(TOKEN), &json!({ "dry_run": true })).await;
    assert_eq!(unfiltered.status, StatusCode::BAD_REQUEST);
    let malformed = app.post_json(path, Some(TOKEN), &json!({ "status": "NOPE" })).await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
}
