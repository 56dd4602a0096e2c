//! Operating forwarding: the CLI's `destinations` and `jobs` commands, the
//! admin API's routes, the metrics, retention, and a declaration that
//! refuses to start.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::forwarding::*;
use crate::support::receiver::{Answer, Receiver};
use crate::support::watch::until;
use crate::support::*;

const TOKEN: &str = "admin-token-0123456789";

/// An app with the admin API, whose destination `app` sends to `receiver`
/// and gives a job up after one failed attempt.
async fn app_forwarding_to(receiver: &Receiver) -> (TestApp, String) {
    let toml = format!(
        "[[destinations]]\nname = \"app\"\nurl = \"{}\"\nsecret = \"{SECRET}\"\nevents = [\"paddle:*\"]\nretry_schedule = []\n",
        receiver.url()
    );
    let config =
        TestConfig { admin_token: Some(TOKEN), destinations: Some(toml.clone()), ..TestConfig::default() };
    (TestApp::spawn_with(config).await, toml)
}

/// Enqueues `count` events for `app` and waits until each is sent or dead.
async fn forward(app: &TestApp, count: usize) {
    for n in 1..=count {
        deliver(app, &format!("evt_{n}"), &format!("ctm_{n}"), n).await;
    }
    until_settled(app.pool()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_lists_pauses_resumes_tests_and_replays() {
    let receiver = Receiver::start(SECRET).await;
    let (app, toml) = app_forwarding_to(&receiver).await;
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), toml).unwrap();
    let path = config.path().to_str().unwrap();
    receiver.answer_next([Answer::Status(500)]);
    forward(&app, 2).await;

    let listed = cli(&app.db, &["--config", path, "destinations", "list", "--json"]).await.json_lines();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (&listed[0]["name"], &listed[0]["state"], &listed[0]["dead"], &listed[0]["pending"]),
        (&json!("app"), &json!("running"), &json!(1), &json!(0))
    );
    let table = cli(&app.db, &["--config", path, "destinations", "list"]).await.ok();
    assert!(table.starts_with("NAME") && table.contains("app") && table.contains(&receiver.url()), "{table}");

    cli(&app.db, &["--config", path, "destinations", "pause", "app"]).await.ok();
    let paused = cli(&app.db, &["--config", path, "destinations", "list", "--json"]).await.json_lines();
    assert_eq!(paused[0]["state"], "paused");
    cli(&app.db, &["--config", path, "destinations", "resume", "app"]).await.ok();
    let unknown = cli(&app.db, &["--config", path, "destinations", "pause", "nope"]).await;
    assert_eq!(unknown.error.as_deref(), Some("destination \"nope\" not found"));

    let dead = cli(&app.db, &["jobs", "list", "--destination", "app", "--status", "dead", "--json"])
        .await
        .json_lines();
    assert_eq!(dead.len(), 1);
    let id = dead[0]["id"].as_i64().unwrap();
    let shown = cli(&app.db, &["jobs", "show", &id.to_string()]).await.ok();
    assert!(shown.contains("webhook-id") && shown.contains("HTTP 500 Internal Server Error"), "{shown}");
    let dry =
        cli(&app.db, &["jobs", "replay", "--destination", "app", "--since", "1h", "--dry-run"]).await.ok();
    assert!(dry.ends_with("1 dead job(s) of app would be replayed (dry run)\n"), "{dry}");
    let replayed = cli(&app.db, &["jobs", "replay", &id.to_string()]).await.ok();
    assert_eq!(replayed, format!("job {id} replayed: pending, sent again with the same webhook-id\n"));
    until_settled(app.pool()).await;
    assert_eq!(receiver.arrivals().len(), 3);

    let tested = cli(&app.db, &["--config", path, "destinations", "test", "app"]).await.ok();
    assert!(tested.contains("status       200"), "{tested}");
    let test_event = receiver.arrivals().pop().unwrap();
    assert_eq!(
        (test_event.verified.clone(), test_event.header("webhook-inbox-event-type")),
        (Ok(()), "webhook-inbox.test")
    );
    receiver.answer_next([Answer::Status(503)]);
    let refused = cli(&app.db, &["--config", path, "destinations", "test", "app"]).await;
    assert_eq!(
        refused.error.as_deref(),
        Some("the test event was not accepted: HTTP 503 Service Unavailable")
    );
    // Each test is recorded like any attempt, as a job of its own: sent, or
    // dead (never retried).
    let jobs = cli(&app.db, &["jobs", "list", "--destination", "app", "--json"]).await.json_lines();
    let tests: Vec<_> = jobs.iter().filter(|job| job["event_type"] == "webhook-inbox.test").collect();
    assert_eq!(
        tests
            .iter()
            .map(|job| (job["status"].as_str().unwrap(), job["attempts"].as_i64()))
            .collect::<Vec<_>>(),
        [("dead", Some(1)), ("sent", Some(1))]
    );
    let shown = cli(&app.db, &["jobs", "show", &tests[0]["id"].to_string()]).await.ok();
    assert!(
        shown.contains("HTTP 503 Service Unavailable") && shown.contains("webhook-inbox.test"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_list_and_show_escape_what_providers_and_receivers_sent() {
    let receiver = Receiver::start(SECRET).await;
    let (app, _) = app_forwarding_to(&receiver).await;
    // The receiver's answer drives terminals: ESC [2J clears the screen.
    receiver.answer_next([Answer::Body(500, "\u{1b}[2Jall is well")]);
    // An event id with U+202E (right-to-left override) and U+200B (zero
    // width space), as JSON escapes: signed by the provider, stored as sent.
    deliver(&app, "evt_\\u202eA\\u200b", "ctm_1", 1).await;
    until_settled(app.pool()).await;

    let listed = cli(&app.db, &["jobs", "list"]).await.ok();
    let id: i64 = sqlx::query_scalar("SELECT id FROM destination_jobs").fetch_one(app.pool()).await.unwrap();
    let shown = cli(&app.db, &["jobs", "show", &id.to_string()]).await.ok();
    for output in [&listed, &shown] {
        assert!(output.contains("evt_\\u{202e}A\\u{200b}"), "{output}");
        assert!(!output.contains('\u{202e}') && !output.contains('\u{200b}'), "{output:?}");
    }
    assert!(shown.contains("\\u{1b}[2Jall is well") && !shown.contains('\u{1b}'), "{shown:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_shows_destinations_and_jobs_and_replays() {
    let receiver = Receiver::start(SECRET).await;
    let (app, _) = app_forwarding_to(&receiver).await;
    receiver.answer_next([Answer::Status(500)]);
    forward(&app, 3).await;

    let destinations = app.get("/admin/destinations", Some(TOKEN)).await;
    assert_eq!(destinations.status, StatusCode::OK);
    assert_eq!(destinations.body["destinations"][0]["dead"], 1);
    assert_eq!(app.get("/admin/destinations", None).await.status, StatusCode::UNAUTHORIZED);

    let page = app.get("/admin/jobs?destination=app&limit=2", Some(TOKEN)).await;
    assert_eq!(page.body["jobs"].as_array().unwrap().len(), 2);
    let cursor = page.body["next_cursor"].as_str().unwrap();
    let rest = app.get(&format!("/admin/jobs?destination=app&limit=2&cursor={cursor}"), Some(TOKEN)).await;
    assert_eq!(rest.body["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(rest.body["next_cursor"], json!(null));
    let dead = app.get("/admin/jobs?status=dead", Some(TOKEN)).await;
    let id = dead.body["jobs"][0]["id"].as_i64().unwrap();
    assert_eq!(app.get("/admin/jobs?status=lost", Some(TOKEN)).await.status, StatusCode::BAD_REQUEST);
    let typo = app.get("/admin/jobs?stauts=dead", Some(TOKEN)).await;
    assert_eq!(
        (typo.status, &typo.body["error"]),
        (StatusCode::BAD_REQUEST, &json!("unknown field \"stauts\""))
    );

    let shown = app.get(&format!("/admin/jobs/{id}"), Some(TOKEN)).await;
    assert_eq!(shown.body["attempts_made"][0]["status_code"], 500);
    assert!(shown.body["webhook_id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(app.get("/admin/jobs/999999", Some(TOKEN)).await.status, StatusCode::NOT_FOUND);

    let dry = app
        .post_json("/admin/jobs/replay", Some(TOKEN), &json!({ "destination": "app", "dry_run": true }))
        .await;
    assert_eq!(dry.body["jobs"].as_array().unwrap().len(), 1);
    let typo = app
        .post_json("/admin/jobs/replay", Some(TOKEN), &json!({ "destination": "app", "dryrun": true }))
        .await;
    assert_eq!(typo.status, StatusCode::BAD_REQUEST, "an unknown field is refused, not ignored");
    let replayed = app.post_json(&format!("/admin/jobs/{id}/replay"), Some(TOKEN), &json!({})).await;
    assert_eq!((replayed.status, &replayed.body["status"]), (StatusCode::OK, &json!("pending")));
    let again = app.post_json(&format!("/admin/jobs/{id}/replay"), Some(TOKEN), &json!({})).await;
    assert!(
        matches!(again.status, StatusCode::CONFLICT | StatusCode::OK),
        "pending (409), or already sent again"
    );
    until_settled(app.pool()).await;

    let paused = app.post_json("/admin/destinations/app/pause", Some(TOKEN), &json!({})).await;
    assert_eq!(paused.body, json!({ "destination": "app", "paused": true }));
    let listed = app.get("/admin/destinations", Some(TOKEN)).await;
    assert_eq!(listed.body["destinations"][0]["state"], "paused");
    app.post_json("/admin/destinations/app/resume", Some(TOKEN), &json!({})).await;
    assert_eq!(
        app.post_json("/admin/destinations/nope/pause", Some(TOKEN), &json!({})).await.status,
        StatusCode::NOT_FOUND
    );

    let tested = app.post_json("/admin/destinations/app/test", Some(TOKEN), &json!({})).await;
    assert_eq!((tested.status, &tested.body["status"]), (StatusCode::OK, &json!(200)));
    let job = app.get(&format!("/admin/jobs/{}", tested.body["job_id"]), Some(TOKEN)).await;
    assert_eq!(job.body["attempts_made"][0]["status_code"], 200, "the test is recorded as a job");
}

/// Apps often put a token in a destination's query string: it is never
/// shown, nor the userinfo; the scheme, host, port and path are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destinations_query_string_and_userinfo_appear_nowhere() {
    let url = "http://ops:PASSWORD789@127.0.0.1:1/closed?token=QUERYTOKEN456";
    let toml = format!(
        "[[destinations]]\nname = \"app\"\nurl = \"{url}\"\nsecret = \"{SECRET}\"\nevents = [\"paddle:*\"]\nretry_schedule = []\n"
    );
    let config =
        TestConfig { admin_token: Some(TOKEN), destinations: Some(toml.clone()), ..TestConfig::default() };
    let app = TestApp::spawn_with(config).await;
    forward(&app, 1).await;

    let errors: Vec<String> = sqlx::query_scalar("SELECT coalesce(last_error, '') FROM destination_jobs")
        .fetch_all(app.pool())
        .await
        .unwrap();
    assert!(errors[0].contains("error sending request"), "the attempt failed on the network: {errors:?}");
    let listed = app.get("/admin/destinations", Some(TOKEN)).await;
    assert_eq!(listed.body["destinations"][0]["url"], "http://127.0.0.1:1/closed");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), toml).unwrap();
    let path = file.path().to_str().unwrap();
    let shown = [
        format!("{errors:?}"),
        listed.body.to_string(),
        app.get("/admin/jobs", Some(TOKEN)).await.body.to_string(),
        cli(&app.db, &["--config", path, "destinations", "list"]).await.ok(),
        cli(&app.db, &["--config", path, "jobs", "list"]).await.ok(),
        format!("{:?}", app.state.forwarding.declaration.get("app").unwrap()),
    ];
    for text in shown {
        assert!(!text.contains("QUERYTOKEN456") && !text.contains("PASSWORD789"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_each_destinations_attempts_backlog_and_state() {
    let receiver = Receiver::start(SECRET).await;
    let (app, _) = app_forwarding_to(&receiver).await;
    receiver.answer_next([Answer::Status(500)]);
    forward(&app, 2).await;

    let metrics = app.metrics().await;
    for line in [
        "webhook_destination_attempts_total{destination=\"app\",outcome=\"sent\"} 1",
        "webhook_destination_attempts_total{destination=\"app\",outcome=\"http_error\"} 1",
        "webhook_destination_jobs{destination=\"app\",status=\"dead\"} 1",
        "webhook_destination_jobs{destination=\"app\",status=\"pending\"} 0",
        "webhook_destination_state{destination=\"app\",state=\"running\"} 1",
        "webhook_destination_attempt_duration_seconds_count{destination=\"app\"} 2",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} is not in:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_is_counted_as_gone_and_the_metrics_show_the_destination_disabled() {
    let receiver = Receiver::start(SECRET).await;
    let (app, _) = app_forwarding_to(&receiver).await;
    receiver.answer_next([Answer::Status(410)]);
    deliver(&app, "evt_1", "ctm_1", 1).await;

    // The attempt is counted when it ends, its record (the disabled state
    // the gauge reads at scrape time) commits just after: wait for that.
    let disabled = "webhook_destination_state{destination=\"app\",state=\"disabled\"} 1";
    until("the destination is disabled", async || app.metrics().await.lines().any(|line| line == disabled))
        .await;
    let metrics = app.metrics().await;
    for line in [
        "webhook_destination_attempts_total{destination=\"app\",outcome=\"gone\"} 1",
        "webhook_destination_state{destination=\"app\",state=\"running\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} is not in:\n{metrics}");
    }
}

#[tokio::test]
async fn metrics_say_how_long_a_destination_has_been_paused_and_disabled() {
    let app = forwarding_app(destination("http://127.0.0.1:9/never", "")).await;
    let gauge = |metrics: &str, state: &str| -> f64 {
        let prefix = format!("webhook_destination_stopped_seconds{{destination=\"app\",state=\"{state}\"}} ");
        let value = metrics.lines().find_map(|line| line.strip_prefix(&prefix));
        value.unwrap_or_else(|| panic!("no {prefix}in:\n{metrics}")).parse().unwrap()
    };
    let running = app.metrics().await;
    assert_eq!((gauge(&running, "paused"), gauge(&running, "disabled")), (0.0, 0.0));

    // Paused two hours ago, disabled (a 410) ten minutes ago.
    sqlx::query(
        "UPDATE destinations SET paused_at = now() - interval '2 hours', disabled_at = now() - interval '10 minutes'",
    )
    .execute(app.pool())
    .await
    .unwrap();
    // The database gauges are read at most every 10 s: a replica reads them now.
    let (replica, _) = app.replica_with(TestConfig { destinations: None, ..TestConfig::default() }).await;
    let stopped = replica.metrics.render(&replica.pool).await;
    assert!((7200.0..7260.0).contains(&gauge(&stopped, "paused")), "{stopped}");
    assert!((600.0..660.0).contains(&gauge(&stopped, "disabled")), "{stopped}");
}

#[tokio::test]
async fn retention_purges_old_attempts_and_sent_jobs_keeps_dead_ones_as_long_as_failed_rows_and_never_pending_ones()
 {
    let app = forwarding_app(destination("http://127.0.0.1:9/never", "")).await;
    for n in 1..=4 {
        deliver(&app, &format!("evt_{n}"), "ctm_A", n).await;
    }
    make_days_back(&mut app.pool().acquire().await.unwrap(), 100).await;
    sqlx::raw_sql(
        "UPDATE destination_jobs SET status = 'sent', sent_at = now() - interval '100 days' WHERE event_id = 'evt_1';
         UPDATE destination_jobs SET status = 'dead', created_at = now() - interval '100 days' WHERE event_id = 'evt_2';
         UPDATE destination_jobs SET status = 'dead', created_at = now() - interval '200 days' WHERE event_id = 'evt_3';
         UPDATE destination_jobs SET created_at = now() - interval '300 days' WHERE event_id = 'evt_4';
         INSERT INTO destination_attempts (attempted_at, job_id, attempt, destination, duration_ms, response_body)
         VALUES (now() - interval '100 days', 1, 1, 'app', 1, ''), (now(), 1, 2, 'app', 1, '');",
    )
    .execute(app.pool())
    .await
    .unwrap();

    let out = cli(&app.db, &["purge", "--older-than", "90d", "--failed-older-than", "180d"]).await.ok();
    assert!(
        out.ends_with(
            "deleted 1 forwarding attempt(s), 1 sent job(s), 1 dead job(s); pending jobs are untouched\n"
        ),
        "{out}"
    );
    let left: Vec<String> = sqlx::query_scalar("SELECT event_id FROM destination_jobs ORDER BY event_id")
        .fetch_all(app.pool())
        .await
        .unwrap();
    assert_eq!(left, ["evt_2", "evt_4"]);
    assert_eq!(app.count("SELECT count(*) FROM destination_attempts").await, 1);
}

#[tokio::test]
async fn serve_refuses_a_declaration_with_a_mistake_naming_its_line_and_field() {
    let db = TestDatabase::create().await;
    let config = tempfile::NamedTempFile::new().unwrap();
    for (toml, expected) in [
        (
            format!("[[destinations]]\nname = \"app\"\nurl = \"http://x.example\"\nsecret = \"{SECRET}\"\nevents = [\"paddle:*\"]\nrate_limit = -1\n"),
            "line 6: destination \"app\", `rate_limit`: must be a number of requests per second above 0",
        ),
        (
            "[[destinations]]\nname = \"app\"\nurl = \"http://x.example\"\nsecret = \"${APP_SECRET}\"\nevents = [\"paddle:*\"]\n".into(),
            "line 4: destination \"app\", `secret`: names ${APP_SECRET}, which is not set",
        ),
        (
            format!("[[destinations]]\nname = \"app\"\nurl = \"http://x.example\"\nsecret = \"{SECRET}\"\nevents = [\"padle:*\"]\n"),
            "the event pattern padle:* names the provider \"padle\", which is not configured here",
        ),
    ] {
        std::fs::write(config.path(), toml).unwrap();
        let output = binary(&db, &["serve", "--config", config.path().to_str().unwrap(), "--listen-addr", "127.0.0.1:0"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success());
        assert!(stderr.contains(expected), "{expected} not in:\n{stderr}");
        assert!(!stderr.contains(&SECRET[6..]), "the secret was printed");
    }
}
