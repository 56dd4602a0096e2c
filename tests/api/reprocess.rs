//! `webhook-inbox events reprocess`: stored deliveries run again through the
//! live delivery's transaction, each attempt archived as a new row.

use serde_json::json;

use crate::support::*;

const CREDITS: [&str; 2] = ["--paddle-price-credits", PRICE_CREDITS];

/// `(id, status, reprocess_of, request_id)` of every archive row, in order.
async fn history(app: &TestApp) -> Vec<(i64, String, Option<i64>, Option<String>)> {
    sqlx::query_as("SELECT id, processing_status, reprocess_of, request_id FROM webhook_events ORDER BY id")
        .fetch_all(app.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_failed_event_reprocessed_after_the_fix_is_applied_once_and_recorded_as_a_new_row() {
    let app = TestApp::spawn().await;
    app.refuse_inserts_into("credit_grants").await;
    app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;
    let failed = app.archive_ids().await[0];
    app.allow_inserts_into("credit_grants").await;

    let out =
        cli(&app.db, &[&["events", "reprocess", &failed.to_string()][..], &CREDITS].concat()).await.ok();

    let rows = history(&app).await;
    let new = rows[1].0;
    assert_eq!(out, format!("#{failed} paddle evt_01 -> #{new} PROCESSED\n"));
    assert_eq!((rows[1].1.as_str(), rows[1].2), ("PROCESSED", Some(failed)));
    assert!(rows[1].3.is_some(), "the reprocess row carries the command's request id");
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 1);
    let amount: i64 =
        sqlx::query_scalar("SELECT amount FROM credit_grants").fetch_one(app.pool()).await.unwrap();
    assert_eq!(amount, 200, "the handler ran with the configured credits");

    // Reprocessing it again (or the provider's retry) changes nothing.
    let again =
        cli(&app.db, &[&["events", "reprocess", "--json", &failed.to_string()][..], &CREDITS].concat())
            .await
            .json_lines();
    assert_eq!(again[0]["status"], json!("SKIPPED"));
    assert_eq!(
        app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await.body["idempotent"],
        json!(true)
    );
    assert_eq!(app.archive_statuses().await, ["FAILED", "PROCESSED", "SKIPPED", "SKIPPED"]);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
}

#[tokio::test]
async fn a_clerk_event_whose_id_came_in_a_header_is_reprocessed_under_that_id() {
    let app = TestApp::spawn().await;
    app.refuse_inserts_into("users").await;
    app.send(&clerk("msg_01", &user_created("user_01"))).await;
    app.allow_inserts_into("users").await;
    let failed = app.archive_ids().await[0];

    let result = &cli(&app.db, &["events", "reprocess", "--json", &failed.to_string()]).await.json_lines()[0];

    assert_eq!(result["status"], json!("PROCESSED"));
    assert_eq!(result["event_id"], json!("msg_01"));
    let applied: String =
        sqlx::query_scalar("SELECT event_id FROM processed_webhook_events WHERE provider = 'clerk'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(applied, "msg_01");
    assert_eq!(app.count("SELECT count(*) FROM users WHERE email = 'ada@example.com'").await, 1);
}

#[tokio::test]
async fn an_event_that_fails_again_is_archived_failed_again_and_the_command_fails() {
    let app = TestApp::spawn().await;
    let mut broken = subscription_created("evt_01", "sub_01");
    broken["data"].as_object_mut().unwrap().remove("id");
    app.send(&paddle(&broken)).await;
    let failed = app.archive_ids().await[0];

    let run = cli(&app.db, &["events", "reprocess", &failed.to_string()]).await;

    assert_eq!(run.error.as_deref(), Some("1 event(s) failed again: see their error_message"));
    assert!(run.stdout.ends_with("FAILED: subscription.created without data.id\n"), "{}", run.stdout);
    assert_eq!(app.archive_statuses().await, ["FAILED", "FAILED"]);
    assert_eq!(history(&app).await[1].2, Some(failed));
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 0);
}

#[tokio::test]
async fn a_bulk_reprocess_takes_each_unapplied_event_once_reports_progress_and_can_be_rerun() {
    let app = TestApp::spawn().await;
    app.refuse_inserts_into("credit_grants").await;
    for event in ["evt_01", "evt_02", "evt_03"] {
        app.send(&paddle(&subscription_created(event, event))).await;
    }
    // The provider retried evt_01: two FAILED rows, one event.
    app.send(&paddle(&subscription_created("evt_01", "evt_01"))).await;
    app.allow_inserts_into("credit_grants").await;
    // evt_03 is applied meanwhile by another retry: nothing left to do for it.
    app.send(&paddle(&subscription_created("evt_03", "evt_03"))).await;
    let before = app.archive_ids().await;

    let dry = cli(&app.db, &["events", "reprocess", "--status", "FAILED", "--dry-run"]).await.ok();
    assert!(dry.ends_with("2 event(s) would be reprocessed (dry run: nothing written)\n"), "{dry}");
    assert!(dry.contains("evt_01") && dry.contains("evt_02") && !dry.contains("evt_03"), "{dry}");
    assert_eq!(app.archive_ids().await, before, "a dry run writes nothing");

    let out = cli(
        &app.db,
        &[&["events", "reprocess", "--status", "FAILED", "--since", "1h"][..], &CREDITS].concat(),
    )
    .await
    .ok();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "2 event(s) to reprocess");
    // Oldest first, each event by its latest FAILED row.
    assert!(lines[1].starts_with(&format!("[1/2] #{} paddle evt_02 -> #", before[1])), "{out}");
    assert!(lines[2].starts_with(&format!("[2/2] #{} paddle evt_01 -> #", before[3])), "{out}");
    assert!(lines[1].ends_with("PROCESSED") && lines[2].ends_with("PROCESSED"), "{out}");
    assert_eq!(lines[3], "done: 2 processed, 0 skipped (already applied), 0 failed");
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 3);

    let rerun = cli(&app.db, &["events", "reprocess", "--status", "FAILED", "--json"]).await.json_lines();
    assert_eq!(rerun, [json!({ "summary": { "processed": 0, "skipped": 0, "failed": 0 } })]);
}

#[tokio::test]
async fn a_bulk_reprocess_is_bounded_by_limit_and_prints_json_lines() {
    let app = TestApp::spawn().await;
    app.refuse_inserts_into("credit_grants").await;
    for event in ["evt_01", "evt_02"] {
        app.send(&paddle(&subscription_created(event, event))).await;
    }
    app.allow_inserts_into("credit_grants").await;

    let lines = cli(
        &app.db,
        &[&["events", "reprocess", "--provider", "paddle", "--limit", "1", "--json"][..], &CREDITS].concat(),
    )
    .await
    .json_lines();

    assert_eq!(lines.len(), 2);
    assert_eq!((&lines[0]["event_id"], &lines[0]["status"]), (&json!("evt_01"), &json!("PROCESSED")));
    assert_eq!(lines[1], json!({ "summary": { "processed": 1, "skipped": 0, "failed": 0 } }));
}

#[tokio::test]
async fn a_single_dry_run_says_what_would_happen_and_writes_nothing() {
    let app = TestApp::spawn().await;
    app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;
    let id = app.archive_ids().await[0];

    let out = cli(&app.db, &["events", "reprocess", "--dry-run", &id.to_string()]).await.ok();

    assert_eq!(
        out,
        format!(
            "would reprocess #{id} (paddle evt_01 subscription.created): already applied: would be recorded SKIPPED, changing nothing\n"
        )
    );
    assert_eq!(app.archive_ids().await, [id]);
}

#[tokio::test]
async fn reprocess_needs_an_id_or_filters_but_not_both() {
    let app = TestApp::spawn().await;
    let none = cli(&app.db, &["events", "reprocess"]).await;
    assert!(none.error.unwrap().starts_with("give an archive id, or filters for a bulk run"));
    let both = cli(&app.db, &["events", "reprocess", "1", "--status", "FAILED"]).await;
    assert_eq!(both.error.as_deref(), Some("give an archive id or filters, not both"));
    let unknown = cli(&app.db, &["events", "reprocess", "42"]).await;
    assert_eq!(unknown.error.as_deref(), Some("archived event 42 not found"));
}

#[tokio::test]
async fn every_provider_s_stored_deliveries_read_back_under_their_own_id_and_type() {
    let app = TestApp::spawn().await;
    app.send(&github("d-1", "issues", &issue_opened())).await;
    app.send(&standard(STANDARD_SENDER, "msg_acme", &standard_event("invoice.paid"))).await;
    app.send(&stripe(&stripe_event("evt_stripe", "invoice.paid"))).await;
    app.send(&clerk("msg_clerk", &json!({ "type": "session.created", "data": {} }))).await;
    let applied = "SELECT provider, event_id, event_type FROM processed_webhook_events ORDER BY provider";
    let events: Vec<(String, String, String)> = sqlx::query_as(applied).fetch_all(app.pool()).await.unwrap();
    assert_eq!(events.len(), 4);
    // As if none had been applied: each is reprocessed, and must be recorded
    // under the id and type it arrived with.
    sqlx::query("DELETE FROM processed_webhook_events").execute(app.pool()).await.unwrap();

    let results =
        cli(&app.db, &["events", "reprocess", "--status", "PROCESSED", "--json"]).await.json_lines();

    assert_eq!(results.last().unwrap(), &json!({ "summary": { "processed": 4, "skipped": 0, "failed": 0 } }));
    let reread: Vec<(String, String, String)> = sqlx::query_as(applied).fetch_all(app.pool()).await.unwrap();
    assert_eq!(reread, events);
    assert!(events.contains(&("github".into(), "d-1".into(), "issues.opened".into())), "{events:?}");
}
