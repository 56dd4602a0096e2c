//! `destinations backfill`: a destination added after events were recorded
//! gets each applied event it missed once, oldest first, after live jobs;
//! a second run, and a dry run, write nothing.

use std::collections::HashMap;

use chrono::Utc;
use serde_json::json;
use webhook_inbox::queue::Tally;

use crate::support::app::send;
use crate::support::forwarding::*;
use crate::support::receiver::Receiver;
use crate::support::*;

const TOKEN: &str = "admin-token-0123456789";

/// An app whose destination `app` (sending to `receiver`, with `extra`
/// settings, declared in the file it returns for the CLI) missed `before`
/// events (`evt_old_<n>`): a replica deployed before it was declared
/// recorded them.
async fn added_later(receiver: &Receiver, before: usize, extra: &str) -> (TestApp, tempfile::NamedTempFile) {
    let toml = destination(&receiver.url(), extra);
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), &toml).unwrap();
    let app = TestApp::spawn_with(TestConfig {
        destinations: Some(toml),
        send_forwards: false,
        admin_token: Some(TOKEN),
        ..TestConfig::default()
    })
    .await;
    let (_, older) = app.replica().await;
    for n in 1..=before {
        let delivery = paddle_raw(&body(&format!("evt_old_{n}"), &format!("ctm_{n}"), n));
        assert_eq!(send(&older, &delivery).await.status, 200);
    }
    (app, config)
}

/// Records event `evt_new_<n>` with the destination declared: a live job.
async fn deliver_live(app: &TestApp, n: usize) {
    assert_eq!(deliver(app, &format!("evt_new_{n}"), "ctm_live", n).await.status, 200);
}

/// The event ids that arrived, in arrival order, each verified.
fn arrived(receiver: &Receiver) -> Vec<String> {
    receiver
        .arrivals()
        .iter()
        .map(|arrival| {
            assert_eq!(arrival.verified, Ok(()));
            arrival.header("webhook-inbox-event-id").to_string()
        })
        .collect()
}

#[tokio::test]
async fn a_backfill_sends_each_missed_event_once_and_a_dry_run_or_a_second_run_writes_nothing() {
    let receiver = Receiver::start(SECRET).await;
    let (app, config) = added_later(&receiver, 4, "").await;
    let path = config.path().to_str().unwrap();
    for n in 1..=2 {
        deliver_live(&app, n).await;
    }
    let backfill = |more: &'static [&'static str]| {
        let mut args = vec!["--config", path, "destinations", "backfill", "app", "--since", "1h"];
        args.extend_from_slice(more);
        let db = &app.db;
        async move { cli(db, &args).await }
    };

    let dry = backfill(&["--dry-run"]).await.ok();
    assert!(dry.contains("app: 4 jobs would be enqueued (dry run: nothing written)"), "{dry}");
    assert_eq!(app.count("SELECT count(*) FROM destination_jobs").await, 2, "a dry run writes nothing");
    let done = backfill(&[]).await.ok();
    assert!(done.contains("app: 4 jobs enqueued"), "{done}");
    let again = backfill(&[]).await.ok();
    assert!(again.contains("app: 0 jobs enqueued"), "{again}");
    assert_eq!(app.count("SELECT count(*) FROM destination_jobs").await, 6);

    let listed = cli(&app.db, &["jobs", "list", "--json"]).await.json_lines();
    let origins: HashMap<String, bool> = listed
        .iter()
        .map(|job| (job["event_id"].as_str().unwrap().to_string(), job["backfill"].as_bool().unwrap()))
        .collect();
    assert_eq!(origins.values().filter(|backfill| **backfill).count(), 4);
    assert!(
        origins.iter().all(|(event, backfill)| *backfill == event.starts_with("evt_old_")),
        "{origins:?}"
    );
    assert!(cli(&app.db, &["jobs", "list"]).await.ok().contains("backfill"));

    let queue = queue(&app, "app");
    assert_eq!(
        send_due(app.pool(), &queue, Utc::now()).await,
        Tally { claimed: 6, sent: 6, ..Tally::default() }
    );
    let mut events = arrived(&receiver);
    events.sort();
    assert_eq!(
        events,
        ["evt_new_1", "evt_new_2", "evt_old_1", "evt_old_2", "evt_old_3", "evt_old_4"],
        "each once"
    );
    assert!(backfill(&[]).await.ok().contains("app: 0 jobs enqueued"), "nothing twice once sent");
}

#[tokio::test]
async fn live_events_recorded_during_a_large_backfill_are_sent_before_it_and_it_in_recorded_order() {
    let receiver = Receiver::start(SECRET).await;
    let before = 300;
    // One request at a time: the order of arrivals is the order of claims.
    let (app, config) = added_later(&receiver, before, "concurrency = 1").await;
    let path = config.path().to_str().unwrap();
    let done =
        cli(&app.db, &["--config", path, "destinations", "backfill", "app", "--since", "1d"]).await.ok();
    assert!(done.contains(&format!("app: {before} jobs enqueued")), "{done}");
    for n in 1..=5 {
        deliver_live(&app, n).await;
    }

    let queue = queue(&app, "app");
    let sent = send_due(app.pool(), &queue, Utc::now()).await;
    assert_eq!(sent.sent, before + 5);
    let events = arrived(&receiver);
    let live: Vec<String> = (1..=5).map(|n| format!("evt_new_{n}")).collect();
    let old: Vec<String> = (1..=before).map(|n| format!("evt_old_{n}")).collect();
    assert_eq!(events[..5], live, "the live events go first, though enqueued after the backfill");
    assert_eq!(events[5..], old, "then the backfill, oldest first");
}

#[tokio::test]
async fn a_backfill_of_an_unknown_destination_or_an_empty_range_is_refused() {
    let receiver = Receiver::start(SECRET).await;
    let (app, config) = added_later(&receiver, 1, "").await;
    let path = config.path().to_str().unwrap();
    let unknown =
        cli(&app.db, &["--config", path, "destinations", "backfill", "nope", "--since", "1d"]).await;
    assert!(unknown.error.unwrap().contains("destination \"nope\" is not declared"));
    let empty = cli(
        &app.db,
        &["--config", path, "destinations", "backfill", "app", "--since", "1d", "--until", "2d"],
    )
    .await;
    assert!(empty.error.unwrap().contains("until must be after since"));
    assert_eq!(app.count("SELECT count(*) FROM destination_jobs").await, 0);
}

#[tokio::test]
async fn the_admin_api_backfills_counts_and_refuses_bad_input_with_a_reason() {
    let receiver = Receiver::start(SECRET).await;
    let (app, _config) = added_later(&receiver, 2, "").await;
    let path = "/admin/destinations/app/backfill";
    let post = |path: &'static str, body: serde_json::Value| {
        let app = &app;
        async move { app.post_json(path, Some(TOKEN), &body).await }
    };

    let dry = post(path, json!({ "since": "1d", "dry_run": true })).await;
    assert_eq!(
        (dry.status.as_u16(), dry.body.clone()),
        (200, json!({ "destination": "app", "enqueued": 2, "dry_run": true }))
    );
    for (body, reason) in [
        (json!({ "since": "soon" }), "not a duration"),
        (json!({}), "since is required"),
        (json!({ "since": "1d", "until": "2d" }), "until must be after since"),
        (json!({ "since": "1d", "limit": 5 }), "unknown field"),
    ] {
        let refused = post(path, body.clone()).await;
        assert_eq!(refused.status.as_u16(), 400, "{body}");
        assert!(refused.body["error"].as_str().unwrap().contains(reason), "{body}: {:?}", refused.body);
    }
    let unknown = post("/admin/destinations/nope/backfill", json!({ "since": "1d" })).await;
    assert_eq!(unknown.status.as_u16(), 404);
    assert_eq!(app.post_json(path, None, &json!({ "since": "1d" })).await.status.as_u16(), 401);
    assert_eq!(app.count("SELECT count(*) FROM destination_jobs").await, 0, "nothing written so far");

    let done = post(path, json!({ "since": "1d" })).await;
    assert_eq!(done.body, json!({ "destination": "app", "enqueued": 2, "dry_run": false }));
    assert_eq!(app.count("SELECT count(*) FROM destination_jobs WHERE backfill").await, 2);
}
