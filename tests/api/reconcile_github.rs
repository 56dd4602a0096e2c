//! GitHub's reconciliation against a fake GitHub (`support::provider_api`)
//! that lists a hook's delivery attempts (Link pagination, a 429 with
//! `Retry-After` and 500s on the way) and answers a redelivery request by
//! POSTing the signed delivery to the service's real socket: the missing
//! deliveries are asked for once each and recorded once, the recorded ones
//! are not asked for, a redelivery racing the original gives one dedup row,
//! a dry run asks for nothing, a bad token names its setting.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use chrono::{TimeDelta, Utc};
use serde_json::{Value, json};

use crate::reconcile::{DEDUP_GATE, ROUNDS, at_dedup_gate};
use crate::support::provider_api::{API_KEY, FakeApi, Fault};
use crate::support::watch::{Gate, install_gate};
use crate::support::*;

/// `webhook-inbox reconcile github --json` against `api`'s hook 42 of
/// `octo/inbox` (unless `args` name an organization) with the right token.
async fn reconcile(app: &TestApp, api: &FakeApi, args: &[&str]) -> cli::CliRun {
    let url = api.url();
    let mut argv =
        vec!["reconcile", "github", "--json", "--github-api-url", url.as_str(), "--github-hook-id", "42"];
    if !args.contains(&"--github-hook-org") {
        argv.extend(["--github-hook-repo", "octo/inbox"]);
    }
    if !args.contains(&"--github-api-token") {
        argv.extend(["--github-api-token", API_KEY]);
    }
    argv.extend(args);
    cli(&app.db, &argv).await
}

fn summary(run: cli::CliRun) -> Value {
    let error = run.error.clone();
    run.json_lines().pop().unwrap_or_else(|| panic!("a summary line: {error:?}"))
}

/// The counts of a summary, in a fixed order.
fn counts(summary: &Value) -> [u64; 8] {
    [
        "pages",
        "seen",
        "repeated",
        "before_since",
        "already_recorded",
        "redelivery_requested",
        "missing",
        "failed",
    ]
    .map(|name| summary[name].as_u64().unwrap_or_else(|| panic!("{name} in {summary}")))
}

/// An `issues.opened` event's body.
fn issue(number: u64) -> Value {
    json!({ "action": "opened", "issue": { "number": number, "title": "a bug" }, "repository": { "id": 1 } })
}

/// A delivery attempt as GitHub lists it, `minutes_ago` old.
fn attempt(id: u64, guid: &str, minutes_ago: i64, redelivery: bool, status_code: u16) -> Value {
    json!({
        "id": id, "guid": guid, "delivered_at": (Utc::now() - TimeDelta::minutes(minutes_ago)).to_rfc3339(),
        "redelivery": redelivery, "duration": 0.27,
        "status": if status_code == 200 { "OK" } else { "Invalid HTTP Response: 503" },
        "status_code": status_code, "event": "issues", "action": "opened",
        "installation_id": null, "repository_id": 1
    })
}

/// `(event_id, source, status, has a signature)` of every GitHub archive row, in order.
async fn archive(app: &TestApp) -> Vec<(String, String, String, bool)> {
    sqlx::query_as(
        "SELECT event_id, source, processing_status, signature IS NOT NULL FROM webhook_events
         WHERE provider = 'github' ORDER BY id",
    )
    .fetch_all(app.pool())
    .await
    .unwrap()
}

/// The fake's webhooks: `guid` is issue `n`.
fn webhooks(guids: &[(&str, u64)]) -> Vec<(String, String, Value)> {
    guids.iter().map(|(guid, n)| (guid.to_string(), "issues".to_string(), issue(*n))).collect()
}

#[tokio::test]
async fn missing_deliveries_are_redelivered_once_each_through_a_429_and_500s_and_recorded_once() {
    let app = TestApp::spawn().await;
    let server = app.listen().await;
    assert_eq!(app.send(&github("g1", "issues", &issue(1))).await.status, StatusCode::OK);
    // Newest first: [6 5] [4 3] [2 1]. g2 failed twice (GitHub's own
    // redelivery too), g1 was recorded, g0 is older than a first run reads.
    let api = FakeApi::github(vec![
        attempt(1, "g0", 8 * 24 * 60, false, 503),
        attempt(2, "g1", 50, false, 200),
        attempt(3, "g2", 40, false, 503),
        attempt(4, "g3", 30, false, 503),
        attempt(5, "g4", 20, false, 503),
        attempt(6, "g2", 10, true, 503),
    ])
    .await;
    api.redeliver_to(&format!("http://{}", server.addr), webhooks(&[("g2", 2), ("g3", 3), ("g4", 4)]));
    // The first redelivery request is rate limited, then fails once; the second page fails once.
    api.page_cap(2).fault(2, Fault::RateLimited(1)).fault(3, Fault::ServerError).fault(6, Fault::ServerError);

    // GitHub sends a redelivery after its 202: here, after the run.
    api.hold_redeliveries();

    let first = summary(reconcile(&app, &api, &[]).await);

    assert_eq!(counts(&first), [3, 4, 1, 1, 1, 3, 0, 0], "{first}");
    assert_eq!(api.redelivered(), ["g2", "g4", "g3"], "each missing guid asked for once, g1 never");
    assert_eq!(archive(&app).await.len(), 1, "nothing arrived yet");
    api.send_held().await;
    let requests = api.received();
    assert_eq!(requests.len(), 9, "{requests:?}");
    assert!(requests.iter().all(|r| r.authorized));
    assert_eq!(requests[0].query.get("per_page").map(String::as_str), Some("100"));
    assert!(requests[1..4].iter().all(|r| r.path == "/repos/octo/inbox/hooks/42/deliveries/6/attempts"));
    // Retry-After (1 s) is longer than the first backoff (0.5 s): it was waited out.
    assert!(api.wait_after(2) >= Duration::from_secs(1), "{:?} after the 429", api.wait_after(2));
    assert_eq!(requests[5].query, requests[6].query, "the 500 is retried as it was");
    assert_eq!(requests[6].query.get("cursor").map(String::as_str), Some("v1_5"), "the Link's next page");
    let recorded = |guid: &str, n| (guid.to_string(), "webhook".to_string(), "PROCESSED".to_string(), n);
    assert_eq!(
        archive(&app).await,
        [recorded("g1", true), recorded("g2", true), recorded("g4", true), recorded("g3", true)],
        "each redelivery arrived signed, through the webhook route, once"
    );

    // From the stored mark: the redeliveries are listed now, all recorded.
    let before = app.rows_everywhere().await;
    let again = summary(reconcile(&app, &api, &[]).await);
    assert_eq!(
        (again["redelivery_requested"].as_u64(), again["already_recorded"].as_u64()),
        (Some(0), Some(3))
    );
    assert_eq!(api.redelivered().len(), 3, "nothing asked again");
    assert_eq!(app.rows_everywhere().await, before);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_dry_run_of_an_organizations_hook_counts_the_missing_and_asks_for_nothing() {
    let app = TestApp::spawn().await;
    app.send(&github("g1", "issues", &issue(1))).await;
    let api = FakeApi::github(vec![attempt(1, "g1", 30, false, 200), attempt(2, "g2", 20, false, 503)]).await;
    let before = app.rows_everywhere().await;

    let run = summary(reconcile(&app, &api, &["--github-hook-org", "octo", "--dry-run"]).await);

    assert_eq!(counts(&run), [1, 2, 0, 0, 1, 0, 1, 0], "{run}");
    assert!(api.received().iter().all(|r| r.path == "/orgs/octo/hooks/42/deliveries"));
    assert!(api.redelivered().is_empty());
    assert_eq!(app.rows_everywhere().await, before);
    assert_eq!(app.count("SELECT count(*) FROM reconciliation_state").await, 0, "no mark, no run");
}

#[tokio::test]
async fn a_refused_or_missing_token_or_hook_fails_naming_the_setting_and_asks_for_nothing() {
    let app = TestApp::spawn().await;
    let api = FakeApi::github(vec![attempt(1, "g1", 30, false, 503)]).await;

    let refused = reconcile(&app, &api, &["--github-api-token", "ghp_wrong_do_not_print"]).await;
    let error = refused.error.expect("a refused token fails");
    assert!(error.contains("GITHUB_API_TOKEN") && error.contains("401"), "{error}");
    assert!(!error.contains("ghp_wrong") && !refused.stdout.contains("ghp_wrong"), "{error}");
    assert_eq!(api.received().len(), 1, "not retried: a refused token does not get better");

    for (args, setting) in [
        (&["--github-api-token", ""][..], "GITHUB_API_TOKEN is not set"),
        (&["--github-hook-repo", "octo/inbox", "--github-hook-org", "octo"][..], "GITHUB_HOOK_REPO"),
        (&["--github-hook-org", "../octo"][..], "GITHUB_HOOK_ORG"),
    ] {
        let error = reconcile(&app, &api, args).await.error.expect("fails");
        assert!(error.contains(setting), "{args:?}: {error}");
    }
    assert_eq!(api.received().len(), 1, "nothing read without a whole configuration");
    assert!(api.redelivered().is_empty());
    assert_eq!(app.count("SELECT count(*) FROM webhook_events").await, 0);
    let error: Option<String> =
        sqlx::query_scalar("SELECT last_error FROM reconciliation_state WHERE provider = 'github'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert!(error.is_some_and(|e| e.contains("GITHUB_API_TOKEN")), "the failed run is recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_original_delivery_and_its_redelivery_at_once_are_recorded_once() {
    let app = Arc::new(TestApp::spawn().await);
    let server = app.listen().await;
    let api = FakeApi::github(vec![]).await;
    // Every dedup insert waits while the test holds the gate: each round
    // the late original and the redelivery the run asked for (the fake
    // POSTs it to the service's socket before answering the run's request)
    // are both inside their transactions at once, and the unique
    // constraint lets one of them through.
    install_gate(app.pool(), "processed_webhook_events", DEDUP_GATE).await;
    let mut original_first = 0;
    for round in 1..=ROUNDS as u64 {
        let guid = format!("g-round-{round}");
        api.push([attempt(round * 100, &guid, 1, false, 503)]);
        api.redeliver_to(&format!("http://{}", server.addr), webhooks(&[(guid.as_str(), round)]));
        let gate = Gate::close(app.pool(), DEDUP_GATE).await;
        // Which one waits first alternates, so that each gets to be let through first.
        let original_waits_first = round % 2 == 0;
        let (go, go_ahead) = tokio::sync::oneshot::channel();
        let original = tokio::spawn({
            let (app, guid) = (app.clone(), guid.clone());
            async move {
                go_ahead.await.unwrap();
                app.send(&github(&guid, "issues", &issue(round))).await
            }
        });
        // The original is late, not lost: the run asks for it again.
        let (run, ()) = tokio::join!(
            async {
                if original_waits_first {
                    at_dedup_gate(app.pool(), 1).await;
                }
                summary(reconcile(&app, &api, &["--since", "1h"]).await)
            },
            async {
                if !original_waits_first {
                    at_dedup_gate(app.pool(), 1).await;
                }
                go.send(()).unwrap();
                at_dedup_gate(app.pool(), 2).await;
                gate.open().await;
            }
        );
        assert_eq!(run["redelivery_requested"], 1, "round {round}: {run}");
        let original = original.await.unwrap();
        assert_eq!(original.status, StatusCode::OK, "{:?}", original.body);
        original_first += usize::from(original.body["status"] == "processed");
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT processing_status FROM webhook_events WHERE event_id = $1 ORDER BY id",
        )
        .bind(&guid)
        .fetch_all(app.pool())
        .await
        .unwrap();
        let mut sorted = rows.clone();
        sorted.sort();
        assert_eq!(sorted, ["PROCESSED", "SKIPPED"], "round {round}: both arrived, one applied: {rows:?}");
        let deduped: i64 =
            sqlx::query_scalar("SELECT count(*) FROM processed_webhook_events WHERE event_id = $1")
                .bind(&guid)
                .fetch_one(app.pool())
                .await
                .unwrap();
        assert_eq!(deduped, 1, "round {round}");
    }
    assert_eq!(
        app.count("SELECT count(*) FROM processed_webhook_events WHERE provider = 'github'").await,
        ROUNDS as i64
    );
    let redelivery_first = ROUNDS - original_first;
    eprintln!("the original first {original_first} times, the redelivery first {redelivery_first} times");
    assert!(original_first > 0 && redelivery_first > 0, "each side won some rounds");
    server.stop().await.unwrap();
}
