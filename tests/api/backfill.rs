//! `destinations backfill`: a destination added after events were recorded
//! gets each applied event it missed once, oldest first, after live jobs;
//! a second run, and a dry run, write nothing; the same from the console,
//! in a real browser.

use std::collections::HashMap;

use chrono::Utc;
use serde_json::json;
use webhook_inbox::operations::backfill::{BackfillRange, backfill};
use webhook_inbox::queue::Tally;

use crate::support::app::send;
use crate::support::browser::Browser;
use crate::support::forwarding::*;
use crate::support::receiver::{Answer, Receiver};
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
async fn a_live_event_starts_before_the_backfilled_jobs_already_claimed_ahead() {
    let receiver = Receiver::start(SECRET).await;
    let before = 10;
    // One request at a time; the engine claims up to 4 more ahead.
    let (app, config) = added_later(&receiver, before, "concurrency = 1").await;
    let path = config.path().to_str().unwrap();
    cli(&app.db, &["--config", path, "destinations", "backfill", "app", "--since", "1d"]).await.ok();
    receiver.answer_next([Answer::Hang]);
    let queue = queue(&app, "app");
    let pool = app.pool().clone();
    // Late enough that the live job, recorded below, is due too.
    let sending =
        tokio::spawn(async move { send_due(&pool, &queue, Utc::now() + chrono::Duration::minutes(1)).await });
    // evt_old_1 hangs in flight; evt_old_2 .. 5 wait, claimed ahead.
    receiver.until_held(1).await;
    deliver_live(&app, 1).await;
    receiver.let_through(1);

    assert_eq!(sending.await.unwrap().sent, before + 1);
    let events = arrived(&receiver);
    // evt_old_2 starts in the slot evt_old_1 freed, before the step that
    // records evt_old_1 claims the live job; the live job then goes first.
    assert_eq!(events[..3], ["evt_old_1", "evt_old_2", "evt_new_1"], "{events:?}");
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

/// Sets the backfill form's `since` and `until` fields to `since` and
/// `until`, its dry run box to `dry_run`, and submits it; waits for `then`.
async fn submit_backfill(browser: &Browser, since: &str, until: &str, dry_run: bool, then: &str) {
    for (field, value) in [("since", since), ("until", until)] {
        let input = browser.wait_for(&format!("#backfill input[name={field}]")).await;
        input.clear().await.unwrap();
        input.send_keys(value).await.unwrap();
    }
    let ticked = browser.evaluate("return document.querySelector('#backfill [name=dry_run]').checked").await;
    if ticked != dry_run {
        browser.wait_for("#backfill [name=dry_run]").await.click().await.unwrap();
    }
    browser.click("#run-backfill", then).await;
}

#[tokio::test]
async fn the_console_backfills_a_destination_counting_first_and_refuses_bad_input() {
    let receiver = Receiver::start(SECRET).await;
    let (app, _config) = added_later(&receiver, 3, "").await;
    deliver_live(&app, 1).await;
    let server = app.listen().await;
    let base = format!("http://{}", server.addr);
    let browser = Browser::start().await;
    browser.sign_in(&base, TOKEN).await;
    let jobs = || app.count("SELECT count(*) FROM destination_jobs WHERE backfill");

    // From the overview to the form; a dry run counts and writes nothing.
    browser.click("#backfill-app", "#backfill").await;
    assert_eq!(browser.path().await, "/console/destinations/app/backfill");
    submit_backfill(&browser, "1h", "", true, "#backfill-count").await;
    assert_eq!(browser.text("#backfill-count").await, "3");
    assert!(browser.text("#backfill-summary").await.starts_with("Dry run, nothing written"));
    assert_eq!(jobs().await, 0);

    // Bad input: the console's error page with the reason, as text; nothing written.
    let hostile = "\"><img src=x onerror=alert('since')>";
    for (since, until, reason) in [
        (hostile, "", "since: \"\\\"><img src=x onerror=alert('since')>\" is not a duration"),
        ("", "", "since is required"),
        ("1h", "2h", "until must be after since"),
    ] {
        browser.open(&format!("{base}/console/destinations/app/backfill"), "#backfill").await;
        submit_backfill(&browser, since, until, false, "#reason").await;
        assert_eq!(browser.client.title().await.unwrap(), "400 · webhook-inbox", "{since} {until}");
        assert!(browser.text("#reason").await.starts_with(reason), "{}", browser.text("#reason").await);
        browser.assert_no_dialog().await;
        assert_eq!(browser.evaluate("return document.querySelectorAll('img').length").await, 0);
    }
    // A form without the session's CSRF token is refused.
    browser.open(&format!("{base}/console/destinations/app/backfill"), "#backfill").await;
    browser.evaluate("document.querySelector('#backfill [name=csrf]').remove(); return null").await;
    submit_backfill(&browser, "1h", "", false, "#reason").await;
    assert_eq!(browser.client.title().await.unwrap(), "403 · webhook-inbox");
    assert_eq!(jobs().await, 0);
    browser.open(&format!("{base}/console/destinations/nope/backfill"), "#reason").await;
    assert_eq!(browser.client.title().await.unwrap(), "404 · webhook-inbox");

    // The run: the count, the jobs marked as a backfill's, an audit row on the overview.
    browser.open(&format!("{base}/console/destinations/app/backfill"), "#backfill").await;
    submit_backfill(&browser, "1h", "", false, "#backfill-count").await;
    assert_eq!(browser.text("#backfill-count").await, "3");
    assert!(browser.text("#backfill-summary").await.starts_with("Done"));
    let listed = cli(&app.db, &["jobs", "list", "--json"]).await.json_lines();
    let mut backfilled: Vec<&str> = listed
        .iter()
        .filter(|job| job["backfill"].as_bool().unwrap())
        .map(|job| job["event_id"].as_str().unwrap())
        .collect();
    backfilled.sort();
    assert_eq!(backfilled, ["evt_old_1", "evt_old_2", "evt_old_3"]);
    submit_backfill(&browser, "1h", "", false, "#backfill-count").await;
    assert_eq!(browser.text("#backfill-count").await, "0", "nothing twice");
    browser.open(&format!("{base}/console"), "#destination-actions").await;
    let actions = browser.text("#destination-actions tbody").await;
    assert!(actions.contains("backfill app") && actions.contains("3 jobs enqueued"), "{actions}");
    assert_eq!(app.count("SELECT count(*) FROM console_audit WHERE action = 'backfill'").await, 2);
    drop(browser);
    server.stop().await.unwrap();
}

/// Rows of the archive's partitions read so far by `pool`'s one connection
/// (sequential and through indexes), its statistics flushed first.
async fn archive_rows_read(pool: &sqlx::PgPool) -> i64 {
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_stat_force_next_flush()").execute(&mut *conn).await.unwrap();
    sqlx::query_scalar(
        "SELECT sum(s.seq_tup_read + coalesce(s.idx_tup_fetch, 0))::int8
         FROM pg_partition_tree('webhook_events') AS t JOIN pg_stat_user_tables AS s ON s.relid = t.relid",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_backfill_reads_each_archived_event_about_once_even_from_a_partition_never_analyzed() {
    let receiver = Receiver::start(SECRET).await;
    let events = 5000;
    let (app, _config) = added_later(&receiver, 0, "").await;
    // Autovacuum would analyze the day's partition at a time nobody chooses.
    let leaves: Vec<String> = sqlx::query_scalar(
        "SELECT relid::regclass::text FROM pg_partition_tree('webhook_events') WHERE isleaf",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    for leaf in leaves {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("ALTER TABLE {leaf} SET (autovacuum_enabled = false)")))
            .execute(app.pool())
            .await
            .unwrap();
    }
    // One connection, whose statistics the test flushes when it reads them.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with((*app.pool().connect_options()).clone())
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO webhook_events
             (provider, event_id, event_type, payload, signature, processing_status, created_at, processed_at)
         SELECT 'paddle', 'evt_old_' || n, 'subscription.created', '{\"data\": {}}', 'ts=1;h1=00', 'PROCESSED',
                now() - interval '1 hour' + n * interval '1 ms', now()
         FROM generate_series(1, $1) AS n",
    )
    .bind(events)
    .execute(&pool)
    .await
    .unwrap();

    let before = archive_rows_read(&pool).await;
    let range = BackfillRange { since: "1d".parse().unwrap(), until: None };
    let done = backfill(&pool, &app.state.forwarding.declaration, "app", range, false).await.unwrap();
    assert_eq!(done.enqueued, events as u64);
    let read = archive_rows_read(&pool).await - before;
    // Five pages of 1,000: read in order, about 5,000 rows (and ANALYZE's
    // sample of the partition); each page sorting the rest of the range
    // would read 15,000.
    assert!(read < 2 * events, "{read} archive rows read to backfill {events}");
}
