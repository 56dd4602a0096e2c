//! The real binary reconciling fake Paddle and Stripe APIs: killed -9 in
//! the middle of a run while one event of a page is inside its
//! transaction, the next run starts from the mark the killed one stored
//! after its last complete page, and applies nothing twice; its logs show
//! a progress line per page, and never the API key, through retries and a
//! refused key. And `serve` with `RECONCILE_INTERVAL_SECS` recovering a
//! missed event by itself, and without it reading nothing.

use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::provider_api::{API_KEY, FakeApi, Fault};
use crate::support::service::database_url;
use crate::support::watch::{
    Gate, install_gate_after_insert, until, until_no_service_session, waiting_at_gate,
};
use crate::support::*;

/// The gate the renewal `evt_k4` (first of the second page) waits at, its
/// dedup row and archive row written, its credit grant being inserted.
const MID_PAGE: i64 = 41;

/// Renewal `n` of `sub_01`: its own transaction and period, 500 credits,
/// an hour after the previous one (so the mark moves past it).
fn renewal(n: u32) -> Value {
    json!({
        "event_id": format!("evt_k{n}"),
        "event_type": "transaction.completed",
        "occurred_at": format!("2025-03-01T{n:02}:00:00Z"),
        "data": {
            "id": format!("txn_k{n}"), "status": "completed", "origin": "subscription_recurring",
            "subscription_id": "sub_01", "customer_id": "ctm_01",
            "custom_data": { "user_id": "user_42" },
            "items": [{ "price": { "id": "pri_pro" }, "quantity": 1 }],
            "billing_period": { "starts_at": format!("2025-{n:02}-01T00:00:00Z"),
                                "ends_at": format!("2025-{:02}-01T00:00:00Z", n + 1) }
        }
    })
}

/// `webhook-inbox reconcile <provider> --json` against `api` (Paddle's or
/// Stripe's) with the right key, as a child process.
fn reconcile(provider: &str, database_url: &str, api: &FakeApi) -> Command {
    let setting = provider.to_ascii_uppercase();
    let mut command = Command::new(env!("CARGO_BIN_EXE_webhook-inbox"));
    command
        .args(["reconcile", provider, "--json"])
        .env_clear()
        .current_dir(std::env::temp_dir())
        .env("DATABASE_URL", database_url)
        .env(format!("{setting}_API_URL"), api.url())
        .env(format!("{setting}_API_KEY"), API_KEY)
        .env("PADDLE_PRICE_CREDITS", "pri_pro=500")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciliation_killed_mid_page_resumes_from_its_mark_and_applies_nothing_twice() {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    let api = FakeApi::paddle((1..=6).map(renewal).collect()).await;
    api.page_cap(2);
    install_gate_after_insert(
        db.pool(),
        "credit_grants",
        &format!("CASE NEW.event_id WHEN 'evt_k4' THEN {MID_PAGE} ELSE 0 END"),
    )
    .await;
    let gate = Gate::close(db.pool(), MID_PAGE).await;
    // A mark as an earlier run would have left it, before the whole log.
    sqlx::query(
        "INSERT INTO reconciliation_state (provider, mark_at) VALUES ('paddle', '2025-01-01T00:00:00Z')",
    )
    .execute(db.pool())
    .await
    .unwrap();

    let mut killed = reconcile("paddle", &url, &api).spawn().unwrap();
    until("evt_k4 inside its transaction", async || waiting_at_gate(db.pool(), MID_PAGE).await == 1).await;
    killed.kill().unwrap();
    killed.wait().unwrap();
    until_no_service_session(db.pool()).await;
    gate.open().await;

    // Page one ([k1 k2]) and k3 of page two committed; k4 died with its transaction.
    let applied = |pool| async move {
        sqlx::query_scalar::<_, String>("SELECT event_id FROM processed_webhook_events ORDER BY event_id")
            .fetch_all(pool)
            .await
            .unwrap()
    };
    assert_eq!(applied(db.pool()).await, ["evt_k1", "evt_k2", "evt_k3"]);
    let (cursor, finished): (Option<String>, Option<chrono::DateTime<chrono::Utc>>) =
        sqlx::query_as("SELECT cursor, last_finished_at FROM reconciliation_state WHERE provider = 'paddle'")
            .fetch_one(db.pool())
            .await
            .unwrap();
    // After page one the newest event read was k2: the mark stands at k1, an hour before it.
    assert_eq!((cursor.as_deref(), finished), (Some("evt_k1"), None), "the mark of page one; no end");
    let killed_requests = api.received().len();
    assert_eq!(killed_requests, 2);

    let resumed = reconcile("paddle", &url, &api).output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let summary: Value = serde_json::from_slice(&resumed.stdout).unwrap();

    let requests = api.received();
    assert_eq!(requests[killed_requests].query.get("after").map(String::as_str), Some("evt_k1"));
    assert_eq!(
        [&summary["seen"], &summary["already_recorded"], &summary["recovered"], &summary["failed"]],
        [&json!(5), &json!(2), &json!(3), &json!(0)],
        "k2..k6 read; k2 and k3 already applied: {summary}"
    );
    assert_eq!(applied(db.pool()).await, ["evt_k1", "evt_k2", "evt_k3", "evt_k4", "evt_k5", "evt_k6"]);
    let (grants, distinct, archived, processed): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM credit_grants), (SELECT count(DISTINCT cause) FROM credit_grants),
                (SELECT count(*) FROM webhook_events),
                (SELECT count(*) FROM webhook_events WHERE processing_status = 'PROCESSED' AND source = 'api')",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(
        (grants, distinct, archived, processed),
        (6, 6, 6, 6),
        "each event once, nothing else archived"
    );
    Report {
        fault: "reconciliation killed mid-page (SIGKILL)",
        events: 6,
        deliveries: requests.len(),
        ledger: None,
        notes: format!(
            "killed with 3 of 6 events applied and the 4th in its transaction; resumed after {}, \
             recovered 3, each grant once",
            cursor.unwrap_or_default()
        ),
    }
    .print();
}

/// The JSON log lines of `stderr` whose message is `message`.
fn logged(stderr: &str, message: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|entry| entry["message"] == message)
        .collect()
}

/// Runs `command` to its end off the runtime, which serves the fake API meanwhile.
async fn output(mut command: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_logs_a_progress_line_per_page_and_never_the_api_key_through_retries_and_refusals() {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    let paddle = FakeApi::paddle((1..=3).map(renewal).collect()).await;
    paddle.page_cap(2).fault(1, Fault::ServerError).fault(3, Fault::RateLimited(1));
    let stripe =
        FakeApi::stripe(["evt_s1", "evt_s2", "evt_s3"].map(|id| stripe_event(id, "invoice.paid")).into())
            .await;
    stripe.page_cap(2).fault(1, Fault::RateLimited(1)).fault(3, Fault::ServerError);

    for (provider, api) in [("paddle", &paddle), ("stripe", &stripe)] {
        let setting = format!("{}_API_KEY", provider.to_ascii_uppercase());
        let mut command = reconcile(provider, &url, api);
        command.args(["--since", "2023-01-01T00:00:00Z"]).env("LOG_FORMAT", "json").env("RUST_LOG", "debug");
        let run = output(command).await;
        let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
        assert!(run.status.success(), "{provider}: {stderr}");
        let summary: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(summary["recovered"], 3, "{summary}");
        // Two pages, each failed once on the way: a progress line after each.
        let progress = logged(&stderr, "reconciling");
        let pages: Vec<&Value> = progress.iter().map(|line| &line["pages"]).collect();
        assert_eq!(pages, [&json!(1), &json!(2)], "{provider}: {stderr}");
        assert!(progress.iter().all(|line| line["provider"] == provider), "{progress:?}");
        assert_eq!(logged(&stderr, "the provider's API failed: trying again").len(), 2, "{stderr}");
        assert!(!stderr.contains(API_KEY) && !stdout.contains(API_KEY), "{provider}'s key logged: {stderr}");

        let wrong = format!("{provider}_wrong_key_do_not_print");
        let mut command = reconcile(provider, &url, api);
        command.env(&setting, &wrong).env("LOG_FORMAT", "json").env("RUST_LOG", "debug");
        let refused = output(command).await;
        let (stdout, stderr) =
            (String::from_utf8_lossy(&refused.stdout), String::from_utf8_lossy(&refused.stderr));
        assert!(!refused.status.success());
        assert!(stderr.contains(&format!("check {setting}")), "{stderr}");
        assert!(!stderr.contains(&wrong) && !stdout.contains(&wrong), "{provider}'s key logged: {stderr}");
    }
}

/// Archive rows written by reconciliation, in `pool`'s database.
async fn api_rows(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM webhook_events WHERE source = 'api'")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_reconcile_interval_secs_recovers_a_missed_event_by_itself_and_without_it_reads_nothing() {
    // Recent: a first run reads the last 7 days.
    let mut missed = renewal(1);
    missed["occurred_at"] = chrono::Utc::now().to_rfc3339().into();
    // The keys alone turn nothing on.
    let quiet_db = TestDatabase::create().await;
    let quiet_api = FakeApi::paddle(vec![missed.clone()]).await;
    let quiet_url = quiet_api.url();
    let keys_only = [("PADDLE_API_KEY", API_KEY), ("PADDLE_API_URL", quiet_url.as_str())];
    let quiet = Service::start(&database_url(&quiet_db.connect_options()), &keys_only).await;
    let db = TestDatabase::create().await;
    let api = FakeApi::paddle(vec![missed]).await;
    let api_url = api.url();
    let env = [("PADDLE_API_KEY", API_KEY), ("PADDLE_API_URL", &api_url), ("RECONCILE_INTERVAL_SECS", "1")];
    let service = Service::start(&database_url(&db.connect_options()), &env).await;

    // The first turn at startup recovers it; the next, a second later, finds it recorded.
    let turns = || logged(&service.logs().join("\n"), "reconciled");
    until("two turns", async || turns().len() >= 2).await;
    let counts: Vec<[u64; 2]> = turns()[..2]
        .iter()
        .map(|turn| ["recovered", "already_recorded"].map(|count| turn[count].as_u64().unwrap()))
        .collect();
    assert_eq!(counts, [[1, 0], [0, 1]], "recovered, already recorded");
    assert_eq!(api_rows(db.pool()).await, 1);
    let grants: i64 =
        sqlx::query_scalar("SELECT count(*) FROM credit_grants").fetch_one(db.pool()).await.unwrap();
    assert_eq!(grants, 1, "applied once");

    // Started first, the other service has run as long: it read nothing.
    assert!(quiet_api.received().is_empty(), "{:?}", quiet_api.received());
    assert_eq!(api_rows(quiet_db.pool()).await, 0);
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM reconciliation_state")
        .fetch_one(quiet_db.pool())
        .await
        .unwrap();
    assert_eq!(runs, 0, "no run recorded");
    assert!(!quiet.logs().iter().any(|line| line.contains("reconciling periodically")));
    let logs = [quiet.logs(), service.logs()].concat();
    assert!(!logs.iter().any(|line| line.contains(API_KEY)), "the key logged");
}
