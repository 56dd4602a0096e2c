//! Finding events by what their payload says (`--where PATH=VALUE`, the
//! admin API's and the console's `where`): support's question names a
//! customer or a subscription, not an event id. The console's page is in
//! `console_browser.rs`.

use axum::http::StatusCode;
use clap::Parser;
use serde_json::{Value, json};
use webhook_inbox::cli::Cli;

use crate::support::*;

const TOKEN: &str = "admin-token-0123456789";

/// A Paddle `subscription.created` of `customer` with `status`.
fn subscription_of(event_id: &str, customer: &str, status: &str) -> Value {
    let mut event = subscription_created(event_id, &format!("sub_{event_id}"));
    event["data"]["customer_id"] = json!(customer);
    event["data"]["status"] = json!(status);
    event
}

/// Archive ids, in order: two events of customer ctm_A (active, then
/// paused), one of ctm_B, a Clerk user whose id merely contains "ctm_A".
async fn customers_events(app: &TestApp) -> Vec<i64> {
    app.send(&paddle(&subscription_of("evt_a1", "ctm_A", "active"))).await;
    app.send(&paddle(&subscription_of("evt_a2", "ctm_A", "paused"))).await;
    app.send(&paddle(&subscription_of("evt_b1", "ctm_B", "active"))).await;
    app.send(&clerk("msg_01", &user_created("user_ctm_A"))).await;
    app.archive_ids().await
}

fn ids(rows: &[Value]) -> Vec<i64> {
    rows.iter().map(|row| row["id"].as_i64().unwrap()).collect()
}

#[tokio::test]
async fn the_cli_lists_the_events_whose_payload_has_every_value_asked() {
    let app = TestApp::spawn().await;
    let id = customers_events(&app).await;
    let list = |conditions: &'static [&'static str]| {
        let db = &app.db;
        async move { ids(&cli(db, &[&["events", "list", "--json"], conditions].concat()).await.json_lines()) }
    };

    assert_eq!(list(&["--where", "data.customer_id=ctm_A"]).await, [id[1], id[0]]);
    assert_eq!(list(&["--where", "data.customer_id=ctm_A", "--where", "data.status=paused"]).await, [id[1]]);
    assert_eq!(list(&["--where", "data.customer_id=ctm_A", "--status", "skipped"]).await, Vec::<i64>::new());
    assert_eq!(list(&["--where", "data.id=user_ctm_A", "--provider", "clerk"]).await, [id[3]]);
    // A number or an array's element, as JSON writes them.
    assert_eq!(list(&["--where", "data.items.0.quantity=2"]).await, [id[2], id[1], id[0]]);
    assert_eq!(
        list(&["--where", "data.items.1.price.id=pri_unlisted", "--where", "data.customer_id=ctm_B"]).await,
        [id[2]]
    );
    // A key no event has, a prefix of a value, an object: nothing.
    assert_eq!(list(&["--where", "data.nothing=ctm_A"]).await, Vec::<i64>::new());
    assert_eq!(list(&["--where", "data.customer_id=ctm_"]).await, Vec::<i64>::new());
    assert_eq!(list(&["--where", "data.items=2"]).await, Vec::<i64>::new());

    for (malformed, says) in [
        ("data.customer_id", "PATH=VALUE"),
        ("data..id=ctm_A", "none empty"),
        ("data.id=ctm\u{1b}A", "control characters"),
    ] {
        let refused =
            Cli::try_parse_from(["webhook-inbox", "events", "list", "--where", malformed]).unwrap_err();
        assert!(refused.to_string().contains(says), "{malformed}: {refused}");
    }
}

#[tokio::test]
async fn the_admin_api_takes_where_once_or_repeated_and_answers_400_to_a_malformed_one() {
    let app = TestApp::spawn_with(TestConfig { admin_token: Some(TOKEN), ..TestConfig::default() }).await;
    let id = customers_events(&app).await;
    let listed = |query: &'static str| {
        let app = &app;
        async move {
            let answer = app.get(&format!("/admin/events?{query}"), Some(TOKEN)).await;
            assert_eq!(answer.status, StatusCode::OK, "{query}: {:?}", answer.body);
            ids(answer.body["events"].as_array().unwrap())
        }
    };

    assert_eq!(listed("where=data.customer_id%3Dctm_A").await, [id[1], id[0]]);
    assert_eq!(listed("where=data.customer_id=ctm_A&since=1h").await, [id[1], id[0]]);
    assert_eq!(listed("where=data.customer_id=ctm_A&where=data.status=paused").await, [id[1]]);
    assert_eq!(listed("where=data.customer_id=ctm_A&limit=1").await, [id[1]]);

    for malformed in ["where=data.customer_id", "where=.id%3Dx", "where=data.id%3Dx%00", "wher=data.id%3Dx"] {
        let answer = app.get(&format!("/admin/events?{malformed}"), Some(TOKEN)).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{malformed}: {:?}", answer.body);
        assert!(answer.body["error"].is_string(), "{malformed}: {:?}", answer.body);
    }
}

#[tokio::test]
async fn a_bulk_reprocess_takes_where_as_a_list_or_one_text() {
    let app = TestApp::spawn_with(TestConfig { admin_token: Some(TOKEN), ..TestConfig::default() }).await;
    app.refuse_inserts_into("credit_grants").await;
    customers_events(&app).await;
    let path = "/admin/events/reprocess";

    let planned = |body: Value| {
        let app = &app;
        async move {
            let answer = app.post_json(path, Some(TOKEN), &body).await;
            assert_eq!(answer.status, StatusCode::OK, "{body}: {:?}", answer.body);
            let events = answer.body["events"].as_array().unwrap().iter();
            events.map(|event| event["event_id"].as_str().unwrap().to_string()).collect::<Vec<_>>()
        }
    };
    let ctm_a = planned(json!({ "where": ["data.customer_id=ctm_A"], "dry_run": true })).await;
    assert_eq!(ctm_a, ["evt_a1", "evt_a2"]);
    let paused = planned(json!({ "where": "data.status=paused", "dry_run": true })).await;
    assert_eq!(paused, ["evt_a2"]);

    let malformed = app.post_json(path, Some(TOKEN), &json!({ "where": ["data"], "dry_run": true })).await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST, "{:?}", malformed.body);
    let done = app.post_json(path, Some(TOKEN), &json!({ "where": "data.customer_id=ctm_B" })).await;
    assert_eq!(done.body["summary"], json!({ "processed": 0, "skipped": 0, "failed": 1 }), "{:?}", done.body);
}
