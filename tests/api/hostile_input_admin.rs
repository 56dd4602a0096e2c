//! Hostile operator input to the admin API over a real socket, one table
//! (rows of RELIABILITY.md's hostile-input table): each request is answered
//! 400 with a short reason, and changes nothing: no event is reprocessed.

use serde_json::{Value, json};

use crate::support::socket::send_raw;
use crate::support::*;

const TOKEN: &str = "admin-token-0123456789";

/// One row: what is sent, and the reason it is refused with (always 400).
struct Case {
    name: &'static str,
    request: Vec<u8>,
    reason: &'static str,
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\nconnection: close\r\n\r\n")
        .into_bytes()
}

fn post(path: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const UNSTORABLE: &str = "a value in the request cannot be stored by PostgreSQL (a NUL character?)";

const CONTROL_IN_QUERY: &str =
    "Failed to deserialize query string: a filter value must not contain control characters";

fn cases() -> Vec<Case> {
    let case = |name, request, reason| Case { name, request, reason };
    let bulk = "/admin/events/reprocess";
    vec![
        case(
            "admin filter with a NUL (event_id=%00)",
            get("/admin/events?event_id=evt_%00"),
            CONTROL_IN_QUERY,
        ),
        case(
            "admin filter with a terminal escape (type=ESC[2J)",
            get("/admin/events?type=%1b%5b2J"),
            CONTROL_IN_QUERY,
        ),
        case(
            "admin filter with a newline (provider)",
            get("/admin/events?provider=paddle%0a"),
            CONTROL_IN_QUERY,
        ),
        case("admin jobs filter with a NUL (event_id=%00)", get("/admin/jobs?event_id=evt_%00"), UNSTORABLE),
        case(
            "admin jobs filter with a NUL (destination=%00)",
            get("/admin/jobs?destination=app%00"),
            UNSTORABLE,
        ),
        case(
            "admin bulk replay with a NUL in the destination",
            post("/admin/jobs/replay", r#"{"destination": "app\u0000", "dry_run": true}"#),
            UNSTORABLE,
        ),
        case(
            "admin pause of a destination named with a NUL",
            post("/admin/destinations/app%00/pause", ""),
            UNSTORABLE,
        ),
        case(
            "admin list with a misspelt filter (stauts=FAILED)",
            get("/admin/events?stauts=FAILED"),
            "unknown field \"stauts\"",
        ),
        case(
            "admin bulk reprocess with a misspelt filter (provder)",
            post(bulk, r#"{"status": "FAILED", "provder": "clerk"}"#),
            "unknown field \"provder\"",
        ),
        case(
            "admin bulk reprocess with a NUL in a filter",
            post(bulk, r#"{"status": "FAILED", "event_id": "evt_01\u0000"}"#),
            "Failed to deserialize the JSON body into the target type: a filter value must not contain control \
             characters at line 1 column 48",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_admin_requests_are_refused_with_400_and_change_nothing() {
    let app = TestApp::spawn_with(TestConfig { admin_token: Some(TOKEN), ..TestConfig::default() }).await;
    // Two FAILED events a bulk reprocess would apply.
    app.refuse_inserts_into("credit_grants").await;
    for event in ["evt_01", "evt_02"] {
        app.send(&paddle(&subscription_created(event, event))).await;
    }
    app.allow_inserts_into("credit_grants").await;
    let listening = app.listen().await;
    let archive = app.archive_statuses().await;

    let cases = cases();
    for case in &cases {
        let answer =
            send_raw(listening.addr, &case.request).await.unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!((answer.status, &answer.body), (400, &json!({ "error": case.reason })), "{}", case.name);
        assert_eq!(app.archive_statuses().await, archive, "{}: changed the archive", case.name);
        assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 0, "{}", case.name);
        println!(
            "HOSTILE\t{}\t{}\t{}",
            case.name,
            answer.status,
            answer.body["error"].as_str().unwrap_or("")
        );
    }

    println!(
        "HOSTILE\t{} admin API requests with a valid token: each 400, nothing reprocessed, the archive unchanged",
        cases.len()
    );

    // The same requests, spelt right, do work: the refusals above are not
    // a broken route.
    let fixed = send_raw(
        listening.addr,
        &post("/admin/events/reprocess", r#"{"status": "FAILED", "provider": "paddle"}"#),
    )
    .await
    .unwrap();
    assert_eq!((fixed.status, &fixed.body["summary"]["processed"]), (200, &Value::from(2)));
}
