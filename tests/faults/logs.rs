//! The logs of a whole run, at debug level, through deliveries, rejections,
//! failures, bad input and a shutdown, never contain a secret or a value
//! from a payload.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::support::provider::attempt;
use crate::support::service::database_url;
use crate::support::*;

/// Values that appear only in payloads: any of them in a log line is a leak.
const CANARIES: [&str; 9] = [
    "ctm_canary_customer_7f3a",
    "user_canary_9b1c",
    "canary.person.4d2e@example.com",
    "Canaryfirstname",
    "canary-quantity-5e6f",
    "canary-bad-input-1a2b",
    "canary-duplicate-3c4d",
    "canary-unstorable-8e9f",
    "canary-forged-0a1b",
];

/// A signed Paddle delivery of exactly these bytes.
fn paddle_raw(body: &str) -> Delivery {
    let mut delivery = paddle(&json!({}));
    delivery.body = body.as_bytes().to_vec();
    delivery.header("paddle-signature", &paddle_signature(PADDLE_SECRETS[0], now(), body.as_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_run_at_debug_level_logs_no_secret_and_no_payload_value() {
    let db = TestDatabase::create().await;
    // The database password is a secret too. The embedded test server trusts
    // local connections, so an invented one still connects; a DATABASE_URL
    // server brings its own.
    let configured = std::env::var("DATABASE_URL").ok().filter(|url| !url.is_empty());
    let db_password = configured
        .as_deref()
        .and_then(|url| {
            url.split_once("://")?.1.split_once('@')?.0.split_once(':').map(|(_, p)| p.to_string())
        })
        .unwrap_or_else(|| "db-password-canary-6c7d".into());
    let url = database_url(&db.connect_options().password(&db_password));
    let mut service = Service::start(&url, &[("RUST_LOG", "debug"), ("MAX_BODY_BYTES", "4096")]).await;
    let addr = service.addr;

    let mut subscription = subscription_created("evt_logs_1", "sub_logs_1");
    subscription["data"]["customer_id"] = json!(CANARIES[0]);
    subscription["data"]["custom_data"]["user_id"] = json!(CANARIES[1]);
    let mut user = user_created("user_logs_1");
    user["data"]["email_addresses"][1]["email_address"] = json!(CANARIES[2]);
    user["data"]["first_name"] = json!(CANARIES[3]);
    let mut failing = subscription_created("evt_logs_2", "sub_logs_2");
    failing["data"]["items"][0]["quantity"] = json!(CANARIES[4]);
    let mut forged = subscription.clone();
    forged["data"]["customer_id"] = json!(CANARIES[8]);

    let expected: [(Delivery, u16); 11] = [
        (paddle(&subscription), 200),
        (paddle(&subscription), 200),
        (clerk("msg_logs_1", &user), 200),
        (paddle(&failing), 500),
        (paddle_signed(&forged, "pdl_not_the_secret", now()), 401),
        (paddle(&forged).without("paddle-signature"), 401),
        (clerk_signed("msg_logs_2", &user, CLERK_SECRETS[0], now() - 3600), 401),
        (paddle_raw(&format!(r#"{{"event_id": 5, "note": "{}"}}"#, CANARIES[5])), 400),
        (
            paddle_raw(&format!(
                r#"{{"event_id": "evt_logs_3", "event_type": "x", "a": "{0}", "a": "{0}"}}"#,
                CANARIES[6]
            )),
            400,
        ),
        (
            paddle_raw(&format!(
                r#"{{"event_id": "evt_logs_4", "event_type": "x", "a": "{}\u0000"}}"#,
                CANARIES[7]
            )),
            400,
        ),
        (
            paddle_raw(&format!(
                r#"{{"event_id": "evt_logs_5", "event_type": "x", "a": "{}"}}"#,
                "x".repeat(5000)
            )),
            413,
        ),
    ];
    for (delivery, status) in &expected {
        let answer = attempt(addr, delivery).await.answer.unwrap();
        assert_eq!(answer.status, *status, "{answer:?}");
    }
    // The failing effect's error quotes the payload: it is kept in the archive, for the operator.
    let error: String =
        sqlx::query_scalar("SELECT error_message FROM webhook_events WHERE processing_status = 'FAILED'")
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert!(error.contains(CANARIES[4]), "{error}");

    service.terminate();
    assert!(service.exited_within(Duration::from_secs(10)).await.unwrap().success());
    let logs = service.final_logs();

    // The capture is real: JSON lines at debug level, covering every step.
    let entries: Vec<Value> = logs.iter().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert!(entries.iter().any(|e| e["level"] == "DEBUG"));
    for message in [
        "listening",
        "finished processing request",
        "rejected unverified delivery",
        "event handler failed",
        "SIGTERM received",
        "shutting down: listener closed, draining in-flight deliveries",
    ] {
        assert!(entries.iter().any(|e| e["message"] == message), "no {message:?} in the logs");
    }
    let clerk_keys = CLERK_SECRETS.map(|s| s.trim_start_matches("whsec_"));
    let clerk_key_bytes = clerk_keys.map(|k| hex::encode(STANDARD.decode(k).unwrap()));
    let secrets =
        PADDLE_SECRETS.iter().copied().chain(clerk_keys).chain(clerk_key_bytes.iter().map(String::as_str));
    let mut searched = 0;
    for needle in secrets.chain([db_password.as_str()]).chain(CANARIES) {
        searched += 1;
        for line in &logs {
            assert!(!line.contains(needle), "{needle:?} is in the log line {line}");
        }
    }
    let answered = |statuses: &[u16]| expected.iter().filter(|(_, status)| statuses.contains(status)).count();
    let bodies: std::collections::HashSet<&[u8]> = expected.iter().map(|(d, _)| d.body.as_slice()).collect();
    Report {
        fault: "logs of a full run (RUST_LOG=debug, JSON)",
        events: bodies.len(),
        deliveries: expected.len(),
        ledger: None,
        notes: format!(
            "{} log lines through {} deliveries, {} handler failure(s), {} rejections, {} bad inputs and SIGTERM, \
             searched for {searched} secrets and payload values: none found",
            logs.len(),
            answered(&[200]),
            answered(&[500]),
            answered(&[401]),
            answered(&[400, 413]),
        ),
    }
    .print();
}
