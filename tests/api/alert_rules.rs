//! The alert rules (`deploy/prometheus/alerts.yml`) as promtool checks them,
//! and their unit tests (`alerts.test.yml`) run by promtool, here so that
//! `cargo test` runs them wherever the service's tests run; then what
//! promtool does not check: that every alert tells what to do (a summary, a
//! description, a severity, a section of `docs/runbook.md` that exists) and
//! waits a `for:` duration, and that its unit tests see it fire when that
//! duration ends and not one evaluation before, and see series that must
//! not fire it. (That every metric the rules name is one the service
//! exports is proven against a real Prometheus: `prometheus.rs`.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;

/// `deploy/prometheus`, where the rules and their unit tests are.
pub fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus")
}

/// Runs `promtool` with `args` in the rules' folder; panics with its output unless it succeeds.
fn promtool(args: &[&str]) {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(rules_dir())
        .output()
        .expect("promtool (Debian package prometheus; .ci/run installs it)");
    let said =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "promtool {}:\n{said}", args.join(" "));
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    promtool(&["check", "rules", "alerts.yml"]);
    promtool(&["test", "rules", "alerts.test.yml"]);
}

#[derive(Deserialize)]
struct RuleFile {
    groups: Vec<Group>,
}

#[derive(Deserialize)]
struct Group {
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
struct Rule {
    alert: String,
    #[serde(rename = "for")]
    wait: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct TestFile {
    evaluation_interval: String,
    tests: Vec<TestCase>,
}

#[derive(Deserialize)]
struct TestCase {
    alert_rule_test: Vec<Expectation>,
}

#[derive(Deserialize)]
struct Expectation {
    eval_time: String,
    alertname: String,
    exp_alerts: Vec<yaml_serde::Value>,
}

fn read<T: for<'de> Deserialize<'de>>(name: &str) -> T {
    let text = std::fs::read_to_string(rules_dir().join(name)).unwrap();
    yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn duration(text: &str) -> Duration {
    humantime::parse_duration(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// The sections of the runbook, as the anchors GitHub gives their headings.
fn runbook_sections() -> BTreeSet<String> {
    let runbook =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/runbook.md")).unwrap();
    runbook
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .map(|heading| heading.to_lowercase())
        .collect()
}

#[test]
fn every_alert_says_what_to_do_and_its_unit_tests_see_it_fire_when_its_for_ends_and_stay_silent() {
    let alerts: Vec<Rule> = read::<RuleFile>("alerts.yml").groups.into_iter().flat_map(|g| g.rules).collect();
    let tests: TestFile = read("alerts.test.yml");
    let step = duration(&tests.evaluation_interval);
    let sections = runbook_sections();

    for alert in &alerts {
        let name = &alert.alert;
        let waits = alert.wait.as_deref().map(duration).unwrap_or_default();
        assert!(waits >= step, "{name}: a for: duration of at least one evaluation");
        let severity = alert.labels.get("severity").map(String::as_str);
        assert!(matches!(severity, Some("critical" | "warning")), "{name}: severity {severity:?}");
        for annotation in ["summary", "description"] {
            assert!(
                alert.annotations.get(annotation).is_some_and(|a| !a.is_empty()),
                "{name}: no {annotation}"
            );
        }
        let section = name.to_lowercase();
        assert_eq!(
            alert.annotations.get("runbook_url").map(String::as_str),
            Some(format!("docs/runbook.md#{section}").as_str()),
            "{name}: its runbook section"
        );
        assert!(sections.contains(&section), "docs/runbook.md has no section {name}");

        // In one test, the alert fires at some time and did not one
        // evaluation earlier: the end of its for: duration.
        let at_the_boundary = tests.tests.iter().any(|case| {
            let of_it = || case.alert_rule_test.iter().filter(|e| &e.alertname == name);
            of_it().any(|fired| {
                !fired.exp_alerts.is_empty()
                    && of_it().any(|before| {
                        before.exp_alerts.is_empty()
                            && duration(&before.eval_time) + step == duration(&fired.eval_time)
                    })
            })
        });
        assert!(at_the_boundary, "{name}: no test fires it one evaluation after it did not");
        // And a test in which it must not fire at all.
        let silent = tests.tests.iter().any(|case| {
            let of_it: Vec<_> = case.alert_rule_test.iter().filter(|e| &e.alertname == name).collect();
            !of_it.is_empty() && of_it.iter().all(|e| e.exp_alerts.is_empty())
        });
        assert!(silent, "{name}: no test of series that must not fire it");
    }

    let names: BTreeSet<String> = alerts.iter().map(|alert| alert.alert.to_lowercase()).collect();
    assert_eq!(names.len(), alerts.len(), "alert names are unique");
    assert_eq!(sections, names, "docs/runbook.md has one section per alert, and no other");
}
