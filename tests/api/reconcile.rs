//! Reconciliation against fake Paddle and Stripe event APIs on loopback
//! (`support::provider_api`): missing events recovered exactly once through
//! the inbox (429s waited out for their Retry-After, 500s retried, events
//! listed twice read once), delivered ones left alone, a failed effect
//! archived FAILED and recovered by a later run, a webhook of the same
//! event inside the inbox at the same moment giving one effect, one run
//! per provider at a time, dry runs and refused keys (401, 403) writing
//! nothing, the last finished run kept on the gauges while a run reads,
//! and a name that is no provider refused.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use webhook_inbox::client;
use webhook_inbox::config::ApiConfig;
use webhook_inbox::reconcile::{Log, periodic};

use crate::support::console::{ADMIN_TOKEN, Operator};
use crate::support::events::*;
use crate::support::provider_api::{API_KEY, FakeApi, Fault};
use crate::support::watch::{Gate, install_gate, until, waiting_at_gate};
use crate::support::*;

/// A Paddle event as its API lists it: the webhook's body without the
/// per-attempt notification id.
fn listed(mut event: Value) -> Value {
    event.as_object_mut().unwrap().remove("notification_id");
    event
}

/// A Paddle event without side effects.
fn customer_created(event_id: &str, occurred_at: &str) -> Value {
    json!({ "event_id": event_id, "event_type": "customer.created", "occurred_at": occurred_at,
            "data": { "id": "ctm_01", "email": "a@example.com" } })
}

/// A renewal of `sub_01` for `user_42`, granting 500 credits, its own
/// transaction and period.
fn renewal(event_id: &str, txn_id: &str, period_starts_at: &str) -> Value {
    let mut event = transaction_completed(event_id, txn_id, "subscription_recurring", period_starts_at);
    event["data"]["custom_data"] = json!({ "user_id": "user_42" });
    listed(event)
}

/// `webhook-inbox reconcile <provider> --json <args>` against `api` with the right key.
async fn reconcile(app: &TestApp, provider: &str, api: &FakeApi, args: &[&str]) -> cli::CliRun {
    let url = api.url();
    let mut argv = vec!["reconcile", provider, "--json", "--paddle-price-credits", PRICE_CREDITS];
    let (url_flag, key_flag) = match provider {
        "stripe" => ("--stripe-api-url", "--stripe-api-key"),
        _ => ("--paddle-api-url", "--paddle-api-key"),
    };
    argv.extend([url_flag, url.as_str()]);
    if !args.contains(&key_flag) {
        argv.extend([key_flag, API_KEY]);
    }
    argv.extend(args);
    cli(&app.db, &argv).await
}

fn summary(run: cli::CliRun) -> Value {
    run.json_lines().pop().expect("a summary line")
}

/// The counts of a summary, in a fixed order.
fn counts(summary: &Value) -> [u64; 6] {
    ["pages", "seen", "repeated", "already_recorded", "recovered", "failed"]
        .map(|name| summary[name].as_u64().unwrap_or_else(|| panic!("{name} in {summary}")))
}

async fn balance(app: &TestApp) -> i64 {
    app.count("SELECT COALESCE(sum(amount), 0)::bigint FROM credit_grants WHERE user_id = 'user_42'").await
}

/// `(event_id, source, status, signature, request_id)` of every archive row, in order.
async fn archive(app: &TestApp) -> Vec<(String, String, String, Option<String>, Option<String>)> {
    sqlx::query_as(
        "SELECT event_id, source, processing_status, signature, request_id FROM webhook_events ORDER BY id",
    )
    .fetch_all(app.pool())
    .await
    .unwrap()
}

const LONG_AGO: &str = "2024-01-01T00:00:00Z";

#[tokio::test]
async fn paddle_events_the_inbox_missed_are_recovered_once_through_a_429_a_500_and_a_repeated_event() {
    let app = TestApp::spawn().await;
    let created = subscription("evt_01", "created", "active", FIRST_PERIOD);
    assert_eq!(app.send(&paddle(&created)).await.status, StatusCode::OK);
    let api = FakeApi::paddle(vec![
        listed(created),
        renewal("evt_02", "txn_02", SECOND_PERIOD),
        customer_created("evt_03", "2024-05-02T00:00:00Z"),
        customer_created("evt_04", "2024-05-03T00:00:00Z"),
    ])
    .await;
    // Two a page, each page starting with the previous one's last event;
    // the second request is rate limited, its retry fails once.
    api.page_cap(2).repeat_across_pages().fault(2, Fault::RateLimited(1)).fault(3, Fault::ServerError);

    let first = summary(reconcile(&app, "paddle", &api, &["--since", LONG_AGO]).await);

    // Pages [01 02] [02 03] [03 04]: 4 events, 2 listed twice, evt_01 delivered before.
    assert_eq!(counts(&first), [3, 4, 2, 1, 3, 0], "{first}");
    assert_eq!(balance(&app).await, 200 + 500, "each grant once");
    let requests = api.received();
    assert_eq!(requests.len(), 5, "1 page, 429, 500, the same page again, 1 page");
    assert!(requests.iter().all(|r| r.authorized));
    assert_eq!(requests[1].query, requests[2].query, "the 429 is retried as it was");
    assert_eq!(requests[2].query, requests[3].query, "the 500 is retried as it was");
    // Retry-After (1 s) is longer than the first backoff (0.5 s): it was waited out.
    assert!(api.wait_after(2) >= Duration::from_secs(1), "{:?} after the 429", api.wait_after(2));
    assert!(api.wait_after(3) >= Duration::from_millis(500), "{:?} after the 500", api.wait_after(3));
    assert_eq!(requests[0].query.get("order_by").map(String::as_str), Some("id[ASC]"));
    assert_eq!(requests[0].query.get("per_page").map(String::as_str), Some("200"));
    let rows = archive(&app).await;
    assert_eq!(rows.len(), 4);
    assert_eq!((rows[0].0.as_str(), rows[0].1.as_str()), ("evt_01", "webhook"));
    assert!(rows[0].3.is_some(), "the webhook's signature");
    for (row, (event_id, request_id)) in rows[1..].iter().zip([
        ("evt_02", "req_paddle_1"),
        ("evt_03", "req_paddle_4"),
        ("evt_04", "req_paddle_5"),
    ]) {
        let expected = (event_id.into(), "api".into(), "PROCESSED".into(), None, Some(request_id.into()));
        assert_eq!(row, &expected);
    }

    // Run again from the stored mark: everything is known, nothing written.
    let before = app.rows_everywhere().await;
    let again = summary(reconcile(&app, "paddle", &api, &[]).await);
    assert_eq!(again["recovered"], 0, "{again}");
    assert_eq!(again["after"], "evt_03", "the newest event 10 minutes older than the newest: {again}");
    assert_eq!(app.rows_everywhere().await, before);

    // The provider's own late retry of a recovered event is a duplicate.
    let late = app
        .send(&paddle(&transaction_completed("evt_02", "txn_02", "subscription_recurring", SECOND_PERIOD)))
        .await;
    assert_eq!((late.status, &late.body["idempotent"]), (StatusCode::OK, &json!(true)), "{:?}", late.body);
    assert_eq!(balance(&app).await, 700);
}

#[tokio::test]
async fn an_event_whose_effect_fails_is_archived_failed_from_the_api_and_a_later_run_recovers_it_once() {
    let app = TestApp::spawn().await;
    let api = FakeApi::paddle(vec![
        customer_created("evt_01", "2024-05-02T00:00:00Z"),
        renewal("evt_02", "txn_02", SECOND_PERIOD),
    ])
    .await;
    app.refuse_inserts_into("credit_grants").await;

    let failing = reconcile(&app, "paddle", &api, &["--since", LONG_AGO]).await;

    let error = failing.error.expect("the command fails when an event failed");
    assert!(error.contains("1 event(s) failed"), "{error}");
    let first: Value = serde_json::from_str(failing.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(counts(&first), [1, 2, 0, 0, 1, 1], "evt_01 recovered, evt_02 failed: {first}");
    let failure = &first["failures"][0];
    assert_eq!(failure["event_id"], "evt_02", "{first}");
    assert!(failure["error"].as_str().unwrap().contains("credit_grants closed for maintenance"), "{first}");
    let rows = archive(&app).await;
    let failed_row = ("evt_02".into(), "api".into(), "FAILED".into(), None, Some("req_paddle_1".into()));
    assert_eq!(rows[1], failed_row, "{rows:?}");
    let failed_id = app.archive_ids().await[1];
    assert_eq!(failure["archive_id"], failed_id);
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events WHERE event_id = 'evt_02'").await, 0);
    assert_eq!(app.count("SELECT recovered_total FROM reconciliation_state").await, 1, "evt_01 only");
    assert_eq!(balance(&app).await, 0);

    // Fixed: a later run over the same stretch recovers it, once.
    app.allow_inserts_into("credit_grants").await;
    let later = summary(reconcile(&app, "paddle", &api, &["--since", LONG_AGO]).await);
    assert_eq!(counts(&later), [1, 2, 0, 1, 1, 0], "{later}");
    let again = summary(reconcile(&app, "paddle", &api, &["--since", LONG_AGO]).await);
    assert_eq!(counts(&again), [1, 2, 0, 2, 0, 0], "{again}");
    assert_eq!(balance(&app).await, 500);
    assert_eq!(app.count("SELECT recovered_total FROM reconciliation_state").await, 2);

    // Reprocessing the FAILED row now applies nothing: a `reprocess` row, SKIPPED.
    let reprocess =
        ["events", "reprocess", "--json", &failed_id.to_string(), "--paddle-price-credits", PRICE_CREDITS];
    assert_eq!(cli(&app.db, &reprocess).await.json_lines()[0]["status"], "SKIPPED");
    let rows = archive(&app).await;
    assert_eq!(
        rows[2..]
            .iter()
            .map(|(id, source, status, ..)| (id.as_str(), source.as_str(), status.as_str()))
            .collect::<Vec<_>>(),
        [("evt_02", "api", "PROCESSED"), ("evt_02", "reprocess", "SKIPPED")],
        "{rows:?}"
    );
    assert_eq!(rows[2].4.as_deref(), Some("req_paddle_2"), "the later run's request id");
    assert_eq!(balance(&app).await, 500);
}

#[tokio::test]
async fn a_dry_run_counts_the_missing_events_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let created = subscription("evt_01", "created", "active", FIRST_PERIOD);
    app.send(&paddle(&created)).await;
    let api = FakeApi::paddle(vec![listed(created), renewal("evt_02", "txn_02", SECOND_PERIOD)]).await;
    let before = app.rows_everywhere().await;

    let run = summary(reconcile(&app, "paddle", &api, &["--since", LONG_AGO, "--dry-run"]).await);

    assert_eq!((run["missing"].as_u64(), run["recovered"].as_u64()), (Some(1), Some(0)), "{run}");
    assert_eq!(app.rows_everywhere().await, before);
    assert_eq!(app.count("SELECT count(*) FROM reconciliation_state").await, 0, "no mark, no run");
}

#[tokio::test]
async fn a_key_refused_401_or_403_or_missing_fails_naming_the_setting_and_writes_no_event() {
    let app = TestApp::spawn().await;
    let paddle_api = FakeApi::paddle(vec![renewal("evt_02", "txn_02", SECOND_PERIOD)]).await;
    let stripe_api = FakeApi::stripe(vec![stripe_event("evt_s1", "invoice.paid")]).await;

    for (provider, api, key_flag, setting) in [
        ("paddle", &paddle_api, "--paddle-api-key", "PADDLE_API_KEY"),
        ("stripe", &stripe_api, "--stripe-api-key", "STRIPE_API_KEY"),
    ] {
        let refused = reconcile(&app, provider, api, &[key_flag, "wrong_key_do_not_print"]).await;
        let error = refused.error.expect("a refused key fails");
        assert!(error.contains(setting) && error.contains("401"), "{error}");
        assert!(
            !error.contains("wrong_key_do_not_print") && !refused.stdout.contains("wrong_key"),
            "{error}"
        );
        let unset = reconcile(&app, provider, api, &[key_flag, ""]).await;
        assert!(unset.error.unwrap().contains(&format!("{setting} is not set")));
        // The right key, not allowed to read events.
        api.fault(2, Fault::Forbidden);
        let forbidden = reconcile(&app, provider, api, &[]).await;
        let error = forbidden.error.expect("a forbidden key fails");
        assert!(error.contains(setting) && error.contains("403"), "{error}");
        assert!(!error.contains(API_KEY) && !forbidden.stdout.contains(API_KEY), "{error}");
        // Not retried: a refused key does not get better.
        assert_eq!(api.received().len(), 2);
    }
    assert_eq!(app.rows_everywhere().await, 0);
    let runs: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT provider, last_result, last_error FROM reconciliation_state ORDER BY provider",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(runs.len(), 2, "the failed runs are recorded for the admin API: {runs:?}");
    assert!(runs.iter().all(|(_, result, error)| result.as_deref() == Some("failed")
        && error.as_deref().is_some_and(|e| e.contains("403") && e.contains("_API_KEY"))));
}

/// The advisory lock key of the gate the concurrency tests hold every
/// dedup insert at (`support::watch::install_gate`).
pub(crate) const DEDUP_GATE: i64 = 1414;

/// Rounds of a concurrency test: each side reaches the gate first in half
/// of them.
pub(crate) const ROUNDS: usize = 20;

/// Waits until `n` deliveries wait at the dedup gate, inside their
/// transactions.
pub(crate) async fn at_dedup_gate(pool: &sqlx::PgPool, n: i64) {
    until(&format!("{n} deliveries at the dedup gate"), async || {
        waiting_at_gate(pool, DEDUP_GATE).await == n
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_and_a_reconciliation_of_the_same_event_at_once_apply_it_once() {
    let app = Arc::new(TestApp::spawn().await);
    let api = FakeApi::paddle(vec![]).await;
    // Every dedup insert waits while the test holds the gate: each round
    // the webhook and the run are both inside `inbox::deliver` at once (the
    // run's dedup lookup found nothing, the webhook had not committed), and
    // the unique constraint lets one of them through.
    install_gate(app.pool(), "processed_webhook_events", DEDUP_GATE).await;
    let mut winners = [0, 0];
    for round in 1..=ROUNDS {
        let (event_id, txn) = (format!("evt_r{round:02}"), format!("txn_r{round:02}"));
        let period = format!("2025-01-{round:02}T00:00:00Z");
        let mut webhook = transaction_completed(&event_id, &txn, "subscription_recurring", &period);
        webhook["data"]["custom_data"] = json!({ "user_id": "user_42" });
        api.push([renewal(&event_id, &txn, &period)]);
        let gate = Gate::close(app.pool(), DEDUP_GATE).await;
        // Which one waits first alternates, so that each gets to be let through first.
        let webhook_first = round % 2 == 0;
        let (go, go_ahead) = tokio::sync::oneshot::channel();
        let delivered = tokio::spawn({
            let app = app.clone();
            async move {
                go_ahead.await.unwrap();
                app.send(&paddle(&webhook)).await
            }
        });
        // The command line's future is not Send: it runs on this task, the
        // webhook on another worker thread.
        let (run, ()) = tokio::join!(
            async {
                if webhook_first {
                    at_dedup_gate(app.pool(), 1).await;
                }
                summary(reconcile(&app, "paddle", &api, &["--since", LONG_AGO]).await)
            },
            async {
                if !webhook_first {
                    at_dedup_gate(app.pool(), 1).await;
                }
                go.send(()).unwrap();
                at_dedup_gate(app.pool(), 2).await;
                gate.open().await;
            }
        );
        let answer = delivered.await.unwrap();
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
        let webhook_won = answer.body["status"] == "processed";
        assert_eq!(run["recovered"], u64::from(!webhook_won), "round {round}: {run}");
        let earlier_rounds = round as u64 - 1;
        assert_eq!(run["already_recorded"], earlier_rounds + u64::from(webhook_won), "round {round}: {run}");
        winners[usize::from(webhook_won)] += 1;
        let grants: i64 = sqlx::query_scalar("SELECT count(*) FROM credit_grants WHERE cause = $1")
            .bind(format!("transaction:{txn}"))
            .fetch_one(app.pool())
            .await
            .unwrap();
        assert_eq!(grants, 1, "round {round}");
    }
    assert_eq!(balance(&app).await, ROUNDS as i64 * 500);
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, ROUNDS as i64);
    eprintln!("reconciliation first {} times, the webhook first {} times", winners[0], winners[1]);
    assert!(winners.iter().all(|&won| won > 0), "each side won some rounds: {winners:?}");
}

#[tokio::test]
async fn a_second_run_of_the_same_provider_is_refused_while_the_first_reads() {
    let app = TestApp::spawn().await;
    let api = FakeApi::paddle(vec![renewal("evt_02", "txn_02", SECOND_PERIOD)]).await;
    api.close();
    let arrived = api.arrived.notified();
    tokio::pin!(arrived);
    arrived.as_mut().enable();
    let first = reconcile(&app, "paddle", &api, &["--since", LONG_AGO]);
    let meanwhile = async {
        // The first run holds the lock and waits on its first page.
        arrived.await;
        let second = reconcile(&app, "paddle", &api, &["--since", LONG_AGO]).await;
        let error = second.error.expect("refused");
        assert!(error.contains("another process is reconciling paddle"), "{error}");
        assert_eq!(api.received().len(), 1, "the second run read nothing");
        // Another provider is not held up by it.
        let stripe = FakeApi::stripe(vec![]).await;
        assert_eq!(summary(reconcile(&app, "stripe", &stripe, &[]).await)["pages"], 1);
        api.open();
    };
    let (first, ()) = tokio::join!(first, meanwhile);
    assert_eq!(summary(first)["recovered"], 1);
    assert_eq!(balance(&app).await, 500);
}

#[tokio::test]
async fn stripe_events_are_recovered_once_newest_first_through_faults_and_the_next_run_starts_where_the_last_began()
 {
    let app = TestApp::spawn().await;
    let event = |id: &str, created: i64| {
        let mut event = stripe_event(id, "invoice.paid");
        event["created"] = created.into();
        event
    };
    assert_eq!(app.send(&stripe(&event("evt_s2", 1_700_000_200))).await.status, StatusCode::OK);
    let api = FakeApi::stripe(vec![
        event("evt_s1", 1_700_000_100),
        event("evt_s2", 1_700_000_200),
        event("evt_s3", 1_700_000_300),
        event("evt_old", 1_600_000_000),
    ])
    .await;
    // Two a page, each page starting at the previous one's last event; the
    // second request is rate limited, its retry fails once.
    api.page_cap(2).repeat_across_pages().fault(2, Fault::RateLimited(1)).fault(3, Fault::ServerError);

    let first_began = chrono::Utc::now().timestamp();
    let first = summary(reconcile(&app, "stripe", &api, &["--since", "2023-11-01T00:00:00Z"]).await);
    let first_ended = chrono::Utc::now().timestamp();

    // Pages [s3 s2] [s2 s1]: 3 events, s2 listed twice and delivered before.
    assert_eq!(counts(&first), [2, 3, 1, 1, 2, 0], "{first}");
    let requests = api.received();
    assert_eq!(requests.len(), 4, "1 page, 429, 500, the same page again");
    assert!(requests.iter().all(|r| r.authorized));
    assert_eq!(requests[0].query.get("created[gte]").map(String::as_str), Some("1698796800"));
    assert_eq!(requests[1].query.get("starting_after").map(String::as_str), Some("evt_s2"));
    assert_eq!(requests[1].query, requests[2].query, "the 429 is retried as it was");
    assert_eq!(requests[2].query, requests[3].query, "the 500 is retried as it was");
    // Retry-After (1 s) is longer than the first backoff (0.5 s): it was waited out.
    assert!(api.wait_after(2) >= Duration::from_secs(1), "{:?} after the 429", api.wait_after(2));
    let rows = archive(&app).await;
    assert_eq!(rows.len(), 3);
    assert_eq!(
        rows[1],
        ("evt_s3".into(), "api".into(), "PROCESSED".into(), None, Some("req_stripe_1".into()))
    );
    assert_eq!(
        rows[2],
        ("evt_s1".into(), "api".into(), "PROCESSED".into(), None, Some("req_stripe_4".into()))
    );

    // The next run reads from when the first one started, less 10 minutes:
    // every event created before it started had been listed.
    let again = summary(reconcile(&app, "stripe", &api, &[]).await);
    assert_eq!(again["recovered"], 0, "{again}");
    let gte: i64 = api.received().pop().unwrap().query["created[gte]"].parse().unwrap();
    assert!((first_began - 600 - 1..=first_ended - 600).contains(&gte), "{gte}");
}

#[tokio::test]
async fn a_provider_without_an_event_api_gets_the_time_since_its_last_verified_delivery() {
    let app = TestApp::spawn().await;
    let api = FakeApi::paddle(vec![]).await;
    let none = summary(reconcile(&app, "clerk", &api, &[]).await);
    assert_eq!(none["last_verified_delivery_at"], Value::Null, "{none}");
    assert_eq!(app.send(&clerk("msg_1", &user_created("user_1"))).await.status, StatusCode::OK);
    let gap = summary(reconcile(&app, "clerk", &api, &[]).await);
    assert!(gap["gap_secs"].as_i64().is_some_and(|secs| (0..60).contains(&secs)), "{gap}");
    assert_eq!(app.rows_everywhere().await, 4, "archive, dedup, the user and its welcome email; no more");
}

#[tokio::test]
async fn a_name_that_is_no_provider_fails_listing_the_valid_ones_and_a_standard_webhooks_sender_gets_its_gap()
{
    let app = TestApp::spawn().await;
    let api = FakeApi::paddle(vec![]).await;
    let senders = format!("{STANDARD_SENDER}={}", STANDARD_SECRETS[0]);
    let configured = ["--standard-webhooks", senders.as_str()];

    let typo = reconcile(&app, "paddel", &api, &configured).await;
    let error = typo.error.expect("a name that is no provider fails");
    assert!(
        error.starts_with("paddel is not a provider: reconcile one of paddle, clerk, stripe, github, acme "),
        "{error}"
    );
    assert!(!error.contains(STANDARD_SECRETS[0]), "{error}");
    assert_eq!(typo.stdout, "", "no gap report");
    // A sender is known by STANDARD_WEBHOOKS, as `serve` knows it.
    let unconfigured =
        reconcile(&app, STANDARD_SENDER, &api, &[]).await.error.expect("not configured: no provider");
    assert!(unconfigured.contains("reconcile one of paddle, clerk, stripe, github ("), "{unconfigured}");
    assert_eq!(app.rows_everywhere().await + app.count("SELECT count(*) FROM reconciliation_state").await, 0);

    let none = summary(reconcile(&app, STANDARD_SENDER, &api, &configured).await);
    assert_eq!(
        (&none["provider"], &none["last_verified_delivery_at"]),
        (&json!("acme"), &Value::Null),
        "{none}"
    );
    let delivered = app.send(&standard(STANDARD_SENDER, "msg_1", &standard_event("invoice.paid"))).await;
    assert_eq!(delivered.status, StatusCode::OK, "{:?}", delivered.body);
    let gap = summary(reconcile(&app, STANDARD_SENDER, &api, &configured).await);
    assert!(gap["gap_secs"].as_i64().is_some_and(|secs| (0..60).contains(&secs)), "{gap}");
    assert!(api.received().is_empty(), "no API is read for a gap");
}

/// The admin API's (and the console's) token in these tests.
const ADMIN: &str = ADMIN_TOKEN;

/// The text of the console overview's row `id`, its tags left out.
fn row(page: &str, id: &str) -> String {
    let start = page.find(&format!("<tr id=\"{id}\">")).unwrap_or_else(|| panic!("{id} in {page}"));
    let row = &page[start..start + page[start..].find("</tr>").unwrap()];
    let mut text = String::new();
    row.split('<').for_each(|part| text.push_str(part.split_once('>').map_or(part, |(_, t)| t)));
    text
}

#[tokio::test]
async fn the_admin_api_the_console_and_the_metrics_show_each_providers_last_run() {
    let app = TestApp::spawn_with(TestConfig { admin_token: Some(ADMIN), ..TestConfig::default() }).await;
    let api = FakeApi::paddle(vec![renewal("evt_02", "txn_02", SECOND_PERIOD)]).await;
    let stripe_api = FakeApi::stripe(vec![]).await;
    reconcile(&app, "paddle", &api, &["--since", LONG_AGO]).await.ok();
    let refused = reconcile(&app, "stripe", &stripe_api, &["--stripe-api-key", "sk_wrong"]).await;
    assert!(refused.error.is_some());

    let answer = app.get("/admin/reconciliation", Some(ADMIN)).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    let runs = answer.body["reconciliation"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let (paddle_run, stripe_run) = (&runs[0], &runs[1]);
    assert_eq!((&paddle_run["provider"], &paddle_run["result"]), (&json!("paddle"), &json!("ok")));
    assert_eq!(paddle_run["summary"]["recovered"], 1);
    assert!(paddle_run["finished_at"].is_string());
    assert_eq!((&stripe_run["provider"], &stripe_run["result"]), (&json!("stripe"), &json!("failed")));
    assert!(stripe_run["error"].as_str().unwrap().contains("STRIPE_API_KEY"));
    assert_eq!(app.get("/admin/reconciliation", None).await.status, StatusCode::UNAUTHORIZED);

    let metrics = app.metrics().await;
    for line in [
        r#"webhook_reconcile_recovered_events_total{provider="paddle"} 1"#,
        r#"webhook_reconcile_last_run_success{provider="paddle"} 1"#,
        r#"webhook_reconcile_last_run_success{provider="stripe"} 0"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
    assert!(metrics.contains(r#"webhook_reconcile_last_run_timestamp_seconds{provider="paddle"}"#));

    // The console's overview, from the same read.
    let page = Operator::sign_in(&app).await.get(&app, "/console").await.body;
    let paddle_row = row(&page, "reconciliation-paddle");
    assert!(paddle_row.contains("ok") && paddle_row.contains("1 recovered"), "{paddle_row}");
    let stripe_row = row(&page, "reconciliation-stripe");
    assert!(stripe_row.contains("failed") && stripe_row.contains("STRIPE_API_KEY"), "{stripe_row}");
    // A recovered event is no delivery: the provider has not reached the service.
    let last_delivery = row(&page, "provider-paddle");
    assert!(last_delivery.trim_end().ends_with("never"), "{last_delivery}");
}

/// A time of the admin API's answer.
fn time(value: &Value) -> chrono::DateTime<chrono::Utc> {
    serde_json::from_value(value.clone()).unwrap_or_else(|_| panic!("a time: {value}"))
}

/// The value of `metric{provider="paddle"}` in `metrics`, if it is there.
fn paddle_gauge(metrics: &str, metric: &str) -> Option<f64> {
    let prefix = format!(r#"{metric}{{provider="paddle"}} "#);
    metrics.lines().find_map(|line| line.strip_prefix(&prefix)).map(|value| value.parse().unwrap())
}

#[tokio::test]
async fn while_a_run_reads_the_gauges_keep_the_last_finished_one_and_the_admin_api_shows_it_running() {
    let app = TestApp::spawn_with(TestConfig { admin_token: Some(ADMIN), ..TestConfig::default() }).await;
    let api = FakeApi::paddle(vec![renewal("evt_02", "txn_02", SECOND_PERIOD)]).await;
    reconcile(&app, "paddle", &api, &["--since", LONG_AGO]).await.ok();
    let last_run =
        async || app.get("/admin/reconciliation", Some(ADMIN)).await.body["reconciliation"][0].clone();
    let first = last_run().await;
    let first_end = time(&first["finished_at"]);
    api.close();
    let arrived = api.arrived.notified();
    tokio::pin!(arrived);
    arrived.as_mut().enable();

    let second = reconcile(&app, "paddle", &api, &["--since", LONG_AGO]);
    let meanwhile = async {
        // The second run waits on its first page. This process's first
        // scrape: the gauges come from the row alone.
        arrived.await;
        let metrics = app.metrics().await;
        let last_run_at = paddle_gauge(&metrics, "webhook_reconcile_last_run_timestamp_seconds");
        assert_eq!(last_run_at, Some(first_end.timestamp() as f64), "{metrics}");
        assert_eq!(paddle_gauge(&metrics, "webhook_reconcile_last_run_success"), Some(1.0), "{metrics}");
        let running = last_run().await;
        assert!(time(&running["started_at"]) > first_end, "{running}");
        assert_eq!([&running["finished_at"], &running["result"], &running["summary"]], [&Value::Null; 3]);
        let page = Operator::sign_in(&app).await.get(&app, "/console").await.body;
        let paddle_row = row(&page, "reconciliation-paddle");
        assert!(paddle_row.contains("running, or stopped before its end"), "{paddle_row}");
        api.open();
    };
    let (second, ()) = tokio::join!(second, meanwhile);
    assert_eq!(summary(second)["already_recorded"], 1);

    let ended = last_run().await;
    assert_eq!(
        (&ended["result"], &ended["summary"]["already_recorded"]),
        (&json!("ok"), &json!(1)),
        "{ended}"
    );
    assert!(time(&ended["finished_at"]) >= time(&ended["started_at"]), "{ended}");
    let metrics = app.metrics().await;
    let last_run_at = paddle_gauge(&metrics, "webhook_reconcile_last_run_timestamp_seconds").unwrap();
    assert!(last_run_at >= first_end.timestamp() as f64, "{metrics}");
}

/// The APIs `serve` reads with Paddle's key set, Paddle's being `api`.
fn paddle_config(api: &FakeApi) -> ApiConfig {
    ApiConfig {
        paddle_api_key: Some(API_KEY.into()),
        paddle_api_url: api.url().parse().unwrap(),
        stripe_api_key: None,
        stripe_api_url: "http://127.0.0.1:9".parse().unwrap(),
        github_api_token: None,
        github_api_url: "http://127.0.0.1:9".parse().unwrap(),
        github_hook_repo: None,
        github_hook_org: None,
        github_hook_id: None,
    }
}

/// The count of `outcome` runs of paddle this app's process made.
async fn runs(state: &webhook_inbox::http::AppState, outcome: &str) -> u64 {
    let line = format!(r#"webhook_reconcile_runs_total{{provider="paddle",outcome="{outcome}"}} "#);
    let metrics = state.metrics.render(&state.pool).await;
    metrics.lines().find_map(|l| l.strip_prefix(&line)).map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_reconciling_periodically_never_read_the_same_provider_at_once() {
    let app = TestApp::spawn().await;
    let (replica, _) = app.replica().await;
    // Recent: a first run reads the last 7 days.
    let mut recent = renewal("evt_02", "txn_02", SECOND_PERIOD);
    recent["occurred_at"] = chrono::Utc::now().to_rfc3339().into();
    let api = FakeApi::paddle(vec![recent]).await;
    api.close();
    let config = paddle_config(&api);
    let stop = CancellationToken::new();
    let replicas = [&app.state, &replica];
    let loops: Vec<_> = replicas
        .iter()
        .map(|state| {
            let log = Log::configure(&config, "paddle", client::build()).unwrap();
            periodic::spawn(
                state.pool.clone(),
                state.routing.clone(),
                log,
                Duration::from_millis(20),
                state.metrics.clone(),
                stop.clone(),
            )
        })
        .collect();

    // One replica's run reads its first page and is held there; meanwhile
    // every turn of either replica finds the provider busy.
    until("both replicas' turns to find paddle busy", async || {
        runs(&app.state, "busy").await + runs(&replica, "busy").await >= 5
    })
    .await;
    assert_eq!(api.received().len(), 1, "one replica reads; the other never starts");
    api.open();
    until("four runs to complete", async || runs(&app.state, "ok").await + runs(&replica, "ok").await >= 4)
        .await;
    stop.cancel();
    for running in loops {
        running.await.unwrap();
    }

    assert_eq!(api.max_in_flight(), 1, "never two reads of paddle at once");
    assert_eq!(balance(&app).await, 500, "applied once");
    assert_eq!(app.count("SELECT count(*) FROM webhook_events").await, 1);
}

/// Paddle reconciled by `app`'s process every `every` against `api`, as
/// `serve` does with an API key, until `stop`; once its first run (at
/// startup) has ended.
pub async fn reconciling_paddle(
    app: &TestApp,
    api: &FakeApi,
    every: Duration,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let log = Log::configure(&paddle_config(api), "paddle", client::build()).unwrap();
    let state = &app.state;
    let running = periodic::spawn(
        state.pool.clone(),
        state.routing.clone(),
        log,
        every,
        state.metrics.clone(),
        stop.clone(),
    );
    until("the run at startup to end", async || runs(state, "ok").await == 1).await;
    running
}

#[tokio::test]
async fn a_provider_reconciled_periodically_shows_its_interval_so_that_an_overdue_run_can_be_told() {
    let app = TestApp::spawn().await;
    let api = FakeApi::paddle(Vec::new()).await;
    let stop = CancellationToken::new();
    let running = reconciling_paddle(&app, &api, Duration::from_secs(3600), &stop).await;

    let metrics = app.metrics().await;
    assert_eq!(paddle_gauge(&metrics, "webhook_reconcile_interval_seconds"), Some(3600.0), "{metrics}");
    assert!(!metrics.contains(r#"webhook_reconcile_interval_seconds{provider="stripe"}"#), "{metrics}");
    stop.cancel();
    running.await.unwrap();
}
