//! A panic goes through the logger: the service's logging, as `main`
//! installs it, turns a panic into one JSON error event that says where,
//! and leaves out the panic's message, which could quote a payload.
//!
//! A panic hook is global to its process, so the test runs itself again as
//! a child process that installs the logging and panics.

use std::process::Command;

use serde_json::Value;
use webhook_inbox::config::LogFormat;

/// Set in the child's environment: there, the test panics.
const CHILD: &str = "FAULTS_PANIC_LOG_CHILD";
/// A value from a payload, which the panic's message quotes.
const CANARY: &str = "canary-panic-payload-2f4a";

#[test]
fn a_panic_is_logged_as_one_json_error_event_without_its_message() {
    if std::env::var_os(CHILD).is_some() {
        webhook_inbox::telemetry::init(LogFormat::Json, None).unwrap();
        panic!("could not read the amount of {CANARY}");
    }
    let name = module_path!().split_once("::").expect("a module of the test crate").1;
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            &format!("{name}::a_panic_is_logged_as_one_json_error_event_without_its_message"),
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env_remove("RUST_LOG")
        .output()
        .expect("run the test binary");
    assert!(!output.status.success(), "the child did not panic");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains(CANARY), "the panic's message reached stderr:\n{stderr}");

    let events: Vec<Value> = stderr.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let panics: Vec<&Value> = events.iter().filter(|event| event["message"] == "panicked").collect();
    assert_eq!(panics.len(), 1, "{stderr}");
    assert_eq!(panics[0]["level"], "ERROR");
    let location = panics[0]["location"].as_str().unwrap_or_default();
    assert!(location.starts_with("tests/faults/panic_log.rs:"), "{location}");
}
