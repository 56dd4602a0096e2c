//! The alert rules and the Grafana dashboard against a real Prometheus
//! (`support::prometheus`) scraping the service on a real socket with its
//! `METRICS_TOKEN`: healthy, no alert is active; a destination whose
//! circuit opens makes its alert pending, and a FAILED event makes its
//! alert pending too, while every other rule stays inactive. Then every metric
//! the rules select, and every expression and variable of the dashboard,
//! finds series in what Prometheus scraped: a misspelled metric or label
//! value would evaluate to nothing, silently.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::alert_rules::rules_dir;
use crate::reconcile::reconciling_paddle;
use crate::support::forwarding::{SECRET, deliver, destination};
use crate::support::prometheus::{Prometheus, SCRAPE_EVERY};
use crate::support::provider_api::FakeApi;
use crate::support::receiver::{Answer, Receiver};
use crate::support::*;

const METRICS_TOKEN: &str = "metrics-token-0123456789";

/// Longest a state may take to show as alerts: the database gauges are read
/// at most every 10 s, scraped every 2 s, evaluated every second; and an
/// open circuit must have been open half of what Prometheus saw of it.
const ALERTS_WITHIN: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_fires_only_the_matching_alerts_and_finds_every_series_of_the_dashboard() {
    // A destination whose receiver fails: the first failure opens its
    // circuit for an hour, and its job is retried in an hour (not dead).
    let receiver = Receiver::start(SECRET).await;
    receiver.answer_otherwise(Answer::Status(500));
    let declared = "retry_schedule = [\"1h\"]\ncircuit_breaker = { failures = 1, cooldown = \"1h\" }";
    let app = TestApp::spawn_with(TestConfig {
        metrics_token: Some(METRICS_TOKEN),
        destinations: Some(destination(&receiver.url(), declared)),
        ..TestConfig::default()
    })
    .await;
    // The archive's days ahead, which `serve` makes before it listens (the
    // tests' template database was migrated days ago, maybe).
    webhook_inbox::db::partitions::create_ahead(app.pool()).await.unwrap();
    // Paddle reconciled hourly, as `serve` does with an API key.
    let api = FakeApi::paddle(Vec::new()).await;
    let stop = CancellationToken::new();
    let reconciling = reconciling_paddle(&app, &api, Duration::from_secs(3600), &stop).await;
    let server = app.listen().await;
    let prometheus = Prometheus::start(server.addr, METRICS_TOKEN, &rules_dir().join("alerts.yml")).await;

    until_scraped(&prometheus).await;
    until_alerts(&prometheus, &[]).await;

    // The circuit first: its alert waits until the circuit was open for
    // more than half of what Prometheus saw, the sooner the better.
    assert_eq!(deliver(&app, "evt_forwarded", "ctm_1", 1).await.status, 200);
    receiver.until_arrivals(1).await;
    until_alerts(&prometheus, &["WebhookInboxDestinationCircuitOpen"]).await;

    app.refuse_inserts_into("credit_grants").await;
    let failed = app.send(&paddle(&subscription_created("evt_failed", "sub_failed"))).await;
    assert_eq!(failed.status, 500, "{:?}", failed.body);
    until_alerts(&prometheus, &["WebhookInboxDestinationCircuitOpen", "WebhookInboxFailedEventsUnapplied"])
        .await;

    let alerts = prometheus.api("alerts", &[]).await.unwrap();
    let circuit = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|alert| alert["labels"]["alertname"] == "WebhookInboxDestinationCircuitOpen");
    let circuit = circuit.unwrap_or_else(|| panic!("{alerts}"));
    assert_eq!(
        (&circuit["labels"]["destination"], &circuit["annotations"]["summary"]),
        (&json!("app"), &json!("The circuit of destination app is open"))
    );

    for group in prometheus.rule_groups().await {
        for rule in group["rules"].as_array().unwrap() {
            for selector in metric_selectors(rule["query"].as_str().unwrap()) {
                assert_has_series(&prometheus, &selector, &format!("the rule {}", rule["name"])).await;
            }
        }
    }
    check_dashboard(&prometheus).await;

    stop.cancel();
    reconciling.await.unwrap();
}

/// Waits until Prometheus has scraped the service, token and all.
async fn until_scraped(prometheus: &Prometheus) {
    let deadline = Instant::now() + ALERTS_WITHIN;
    loop {
        let up = prometheus.query("up{job=\"webhook-inbox\"}").await.unwrap();
        if up.first().is_some_and(|sample| sample["value"][1] == "1") {
            return;
        }
        let targets = prometheus.api("targets", &[]).await.unwrap();
        assert!(Instant::now() < deadline, "the service was never scraped: {targets}\n{}", prometheus.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the rules say after each group's latest evaluation.
struct Rules {
    /// The alerts pending or firing.
    active: BTreeSet<String>,
    /// When the group evaluated least recently was evaluated, and the one most recently.
    earliest: DateTime<Utc>,
    latest: DateTime<Utc>,
}

async fn rules(prometheus: &Prometheus) -> Rules {
    let mut active = BTreeSet::new();
    let mut evaluations = Vec::new();
    for group in prometheus.rule_groups().await {
        evaluations
            .push(DateTime::parse_from_rfc3339(group["lastEvaluation"].as_str().unwrap()).unwrap().to_utc());
        for rule in group["rules"].as_array().unwrap() {
            assert_eq!(rule["health"], "ok", "{rule}");
            if rule["state"] != "inactive" {
                active.insert(rule["name"].as_str().unwrap().to_string());
            }
        }
    }
    Rules { active, earliest: *evaluations.iter().min().unwrap(), latest: *evaluations.iter().max().unwrap() }
}

/// Waits until exactly `expected` are pending or firing, and still are
/// after every group has been evaluated once more: the alerts of the state
/// at hand, and no other.
async fn until_alerts(prometheus: &Prometheus, expected: &[&str]) {
    let expected: BTreeSet<String> = expected.iter().map(|name| name.to_string()).collect();
    let deadline = Instant::now() + ALERTS_WITHIN;
    // The latest evaluation when they were first seen so.
    let mut seen_after = None;
    loop {
        let now = rules(prometheus).await;
        match seen_after {
            _ if now.active != expected => seen_after = None,
            Some(seen) if now.earliest > seen => return,
            Some(_) => {}
            None => seen_after = Some(now.latest),
        }
        assert!(
            Instant::now() < deadline,
            "waited {ALERTS_WITHIN:?} for the alerts {expected:?}; active: {:?}\n{}",
            now.active,
            prometheus.api("rules", &[]).await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every selector of a `webhook_*` metric in `expr` (`name` or
/// `name{matchers}`): what must match series for `expr` to mean anything.
fn metric_selectors(expr: &str) -> Vec<String> {
    let mut selectors = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("webhook_") {
        let starts_a_name = !rest[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        let name_len =
            rest[at..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len() - at);
        let mut end = at + name_len;
        if rest[end..].starts_with('{') {
            end += rest[end..].find('}').expect("a closing brace") + 1;
        }
        if starts_a_name {
            selectors.push(rest[at..end].to_string());
        }
        rest = &rest[end..];
    }
    selectors
}

async fn assert_has_series(prometheus: &Prometheus, selector: &str, used_by: &str) {
    let found = prometheus.query(selector).await.unwrap_or_else(|e| panic!("{selector} ({used_by}): {e}"));
    assert!(!found.is_empty(), "{selector}, which {used_by} reads, matches no series the service exports");
}

/// The dashboard as it opens (every variable on "All"): each variable
/// lists values, and each panel's expressions evaluate without error to
/// series.
async fn check_dashboard(prometheus: &Prometheus) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/webhook-inbox.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let mut all_values = Vec::new();
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let name = variable["name"].as_str().unwrap();
        let query = variable["query"]["query"].as_str().unwrap();
        let (metric, label) = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .and_then(|q| q.split_once(", "))
            .unwrap_or_else(|| panic!("${name}: {query} is not label_values(metric, label)"));
        let values = prometheus.api(&format!("label/{label}/values"), &[("match[]", metric)]).await.unwrap();
        assert!(!values.as_array().unwrap().is_empty(), "${name} ({query}) lists nothing");
        all_values.push((format!("${name}"), variable["allValue"].as_str().unwrap().to_string()));
    }
    // Grafana's $__rate_interval: at least four scrape intervals.
    let rate_interval = format!("{}s", 4 * SCRAPE_EVERY.as_secs());

    let mut checked = 0;
    for panel in dashboard["panels"].as_array().unwrap().iter().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().unwrap();
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {title:?} queries nothing");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}: the dashboard's data source");
            let mut expr = target["expr"].as_str().unwrap().replace("$__rate_interval", &rate_interval);
            for (variable, all) in &all_values {
                expr = expr.replace(variable.as_str(), all);
            }
            assert!(!expr.contains('$'), "{title}: a variable this test does not know in {expr}");
            let found = prometheus.query(&expr).await.unwrap_or_else(|e| panic!("{title}: {expr}: {e}"));
            assert!(!found.is_empty(), "{title}: {expr} finds nothing");
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} expressions");
}
