//! `webhook-inbox events list` and `events show`: finding and inspecting
//! archived deliveries without writing SQL.

use serde_json::{Value, json};

use crate::support::*;

/// Archive ids, in order: a processed Paddle event, its duplicate, a FAILED
/// Paddle event, a Clerk user.created.
async fn four_deliveries(app: &TestApp) -> Vec<i64> {
    app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;
    app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;
    let mut broken = subscription_created("evt_02", "sub_02");
    broken["data"].as_object_mut().unwrap().remove("id");
    app.send(&paddle(&broken)).await;
    app.send(&clerk("msg_01", &user_created("user_01"))).await;
    app.archive_ids().await
}

fn ids(rows: &[Value]) -> Vec<i64> {
    rows.iter().map(|row| row["id"].as_i64().unwrap()).collect()
}

#[tokio::test]
async fn list_filters_by_status_provider_type_event_id_and_limit_newest_first() {
    let app = TestApp::spawn().await;
    let id = four_deliveries(&app).await;
    let list = |args: &'static [&'static str]| {
        let db = &app.db;
        async move { ids(&cli(db, &[&["events", "list", "--json"], args].concat()).await.json_lines()) }
    };

    assert_eq!(list(&[]).await, [id[3], id[2], id[1], id[0]]);
    assert_eq!(list(&["--status", "FAILED"]).await, [id[2]]);
    assert_eq!(list(&["--status", "skipped"]).await, [id[1]]);
    assert_eq!(list(&["--provider", "clerk"]).await, [id[3]]);
    assert_eq!(list(&["--type", "subscription.created", "--event-id", "evt_01"]).await, [id[1], id[0]]);
    assert_eq!(list(&["--provider", "paddle", "--limit", "2"]).await, [id[2], id[1]]);
    assert_eq!(list(&["--status", "FAILED", "--provider", "clerk"]).await, Vec::<i64>::new());
}

#[tokio::test]
async fn list_since_takes_a_duration_back_from_now_or_a_time() {
    let app = TestApp::spawn().await;
    let id = four_deliveries(&app).await;
    app.age_rows(&id[..2], 3).await;
    let list = |since: String| {
        let db = &app.db;
        async move { ids(&cli(db, &["events", "list", "--json", "--since", &since]).await.json_lines()) }
    };

    assert_eq!(list("1d".into()).await, [id[3], id[2]]);
    assert_eq!(list("4d".into()).await, [id[3], id[2], id[1], id[0]]);
    let two_days_ago = (chrono::Utc::now() - chrono::TimeDelta::days(2)).to_rfc3339();
    assert_eq!(list(two_days_ago).await, [id[3], id[2]]);
}

#[tokio::test]
async fn list_until_bounds_the_range_from_above_in_the_cli_and_the_admin_api() {
    let app = TestApp::spawn_with(TestConfig {
        admin_token: Some("admin-token-0123456789"),
        ..TestConfig::default()
    })
    .await;
    let id = four_deliveries(&app).await;
    app.age_rows(&id[..2], 3).await;
    app.age_rows(&id[2..3], 1).await;
    let list = |range: &'static [&'static str]| {
        let db = &app.db;
        async move { ids(&cli(db, &[&["events", "list", "--json"], range].concat()).await.json_lines()) }
    };

    assert_eq!(list(&["--until", "2d"]).await, [id[1], id[0]]);
    assert_eq!(list(&["--since", "2d", "--until", "1h"]).await, [id[2]]);
    let admin = app.get("/admin/events?since=2d&until=1h", Some("admin-token-0123456789")).await;
    assert_eq!(ids(admin.body["events"].as_array().unwrap()), [id[2]]);
    let bad = app.get("/admin/events?until=tomorrow", Some("admin-token-0123456789")).await;
    assert_eq!(bad.status, axum::http::StatusCode::BAD_REQUEST, "{:?}", bad.body);
}

#[tokio::test]
async fn list_prints_a_table_by_default_and_json_lines_with_every_summary_column() {
    let app = TestApp::spawn().await;
    let id = four_deliveries(&app).await;

    let table = cli(&app.db, &["events", "list", "--status", "FAILED"]).await.ok();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("STATUS") && lines[0].contains("ERROR"),
        "{table}"
    );
    assert!(lines[1].starts_with(&id[2].to_string()), "{table}");
    for cell in ["FAILED", "paddle", "subscription.created", "evt_02", "subscription.created without data.id"]
    {
        assert!(lines[1].contains(cell), "{cell} missing from {table}");
    }

    let rows = cli(&app.db, &["events", "list", "--json", "--event-id", "msg_01"]).await.json_lines();
    let row = rows[0].as_object().unwrap();
    let mut columns: Vec<&str> = row.keys().map(String::as_str).collect();
    columns.sort();
    assert_eq!(
        columns,
        [
            "created_at",
            "error_message",
            "event_id",
            "event_type",
            "id",
            "occurred_at",
            "processed_at",
            "processing_status",
            "provider",
            "reprocess_of"
        ]
    );
    assert_eq!(row["occurred_at"], json!("2022-05-31T15:56:31.835Z"));
}

#[tokio::test]
async fn show_prints_every_column_the_payload_and_the_other_deliveries_of_the_event() {
    let app = TestApp::spawn().await;
    let id = four_deliveries(&app).await;
    let delivery = paddle(&subscription_created("evt_01", "sub_01")).header("x-request-id", "req-third");
    app.send(&delivery).await;
    let third = *app.archive_ids().await.last().unwrap();

    let text = cli(&app.db, &["events", "show", &id[1].to_string()]).await.ok();
    for expected in [
        "processing_status SKIPPED",
        "event_id          evt_01",
        "notification_id   ntf_evt_01",
        "secret_index      0",
        "signature         ts=",
        "event applied     yes, ",
        "\"customer_id\": \"ctm_01\"",
        "Other deliveries of this event:",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from\n{text}");
    }
    let others = text.split("Other deliveries of this event:").nth(1).unwrap();
    assert!(others.contains(&format!("\n{} ", id[0])) && others.contains(&format!("\n{third} ")), "{others}");
    assert!(!others.contains(&format!("\n{} ", id[1])), "the row itself is not an other delivery: {others}");

    let shown = &cli(&app.db, &["events", "show", "--json", &third.to_string()]).await.json_lines()[0];
    assert_eq!(shown["event"]["request_id"], json!("req-third"));
    assert_eq!(shown["event"]["payload"], subscription_created("evt_01", "sub_01"));
    assert_eq!(ids(shown["other_deliveries"].as_array().unwrap()), [id[0], id[1]]);

    let failed = &cli(&app.db, &["events", "show", "--json", &id[2].to_string()]).await.json_lines()[0];
    assert_eq!(failed["event"]["event_applied_at"], Value::Null);
    assert_eq!(failed["event"]["error_message"], json!("subscription.created without data.id"));
}

#[tokio::test]
async fn show_of_an_unknown_id_fails_with_a_reason() {
    let app = TestApp::spawn().await;
    let run = cli(&app.db, &["events", "show", "999"]).await;
    assert_eq!(run.error.as_deref(), Some("archived event 999 not found"));
    assert_eq!(run.stdout, "");
}

#[tokio::test]
async fn stored_values_that_could_drive_a_terminal_or_hide_characters_are_printed_escaped() {
    let app = TestApp::spawn().await;
    // Accepted as signed (a provider's own id is never refused for it) and stored as sent.
    let (event_id, event_type) = ("evt_\u{202e}1\u{200b}", "customer\u{2066}.updated");
    let link = "\u{1b}]8;;https://evil.example\u{1b}\\click\u{1b}]8;;\u{1b}\\";
    let event = json!({ "event_id": event_id, "event_type": event_type,
                        "data": { "name": link, "c1": "\u{9b}2J", "clear": "\u{1b}[2J" } });
    assert_eq!(app.send(&paddle(&event)).await.body["status"], "processed");
    let id = app.archive_ids().await[0].to_string();

    let printed = [
        cli(&app.db, &["events", "list"]).await.ok(),
        cli(&app.db, &["events", "show", &id]).await.ok(),
        cli(&app.db, &["events", "list", "--json"]).await.ok(),
        cli(&app.db, &["events", "show", "--json", &id]).await.ok(),
        cli(&app.db, &["events", "reprocess", "--dry-run", &id]).await.ok(),
    ];
    for output in &printed {
        let hidden: Vec<char> =
            output.chars().filter(|&c| c != '\n' && (c.is_control() || !c.is_ascii())).collect();
        assert_eq!(hidden, Vec::<char>::new(), "{output}");
    }
    let [table, show, list_json, show_json, dry_run] = &printed;
    for text in [table, show, dry_run] {
        assert!(
            text.contains("evt_\\u{202e}1\\u{200b}") && text.contains("customer\\u{2066}.updated"),
            "{text}"
        );
    }
    assert!(show.contains(r#""name": "\u001b]8;;https://evil.example\u001b\\click"#), "{show}");
    assert!(show.contains(r#""c1": "\u009b2J""#), "{show}");
    // The JSON output is escaped JSON: the same values, byte for byte.
    let listed: Value = serde_json::from_str(list_json.trim()).unwrap();
    assert_eq!(
        (listed["event_id"].as_str(), listed["event_type"].as_str()),
        (Some(event_id), Some(event_type))
    );
    let shown: Value = serde_json::from_str(show_json.trim()).unwrap();
    assert_eq!(shown["event"]["payload"], event);
}
