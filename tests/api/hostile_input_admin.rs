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

/// The one refusal of a name with a control character, wherever it is.
const CONTROL: &str = "a filter value must not contain control characters";

const FOO: &str = "unknown field \"foo\"";

/// A cursor whose time (before 4714 BC) PostgreSQL cannot hold:
/// base64url of `before:-8000000000000000000:1`.
const ANCIENT_CURSOR: &str = "YmVmb3JlOi04MDAwMDAwMDAwMDAwMDAwMDAwOjE";

const CONTROL_IN_QUERY: &str =
    "Failed to deserialize query string: a filter value must not contain control characters";

/// The rows, `failed` the archive id of a FAILED delivery a real reprocess would apply.
fn cases(failed: i64) -> Vec<Case> {
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
        case(
            "admin jobs filter with a NUL (event_id=%00)",
            get("/admin/jobs?event_id=evt_%00"),
            CONTROL_IN_QUERY,
        ),
        case(
            "admin jobs filter with a terminal escape (event_id=evt ESC)",
            get("/admin/jobs?event_id=evt%1b"),
            CONTROL_IN_QUERY,
        ),
        case(
            "admin jobs filter with a NUL (destination=%00)",
            get("/admin/jobs?destination=app%00"),
            CONTROL_IN_QUERY,
        ),
        case(
            "admin jobs filter with a terminal escape (destination=ok ESC app)",
            get("/admin/jobs?destination=ok%1bapp"),
            CONTROL_IN_QUERY,
        ),
        case(
            "admin bulk replay with a NUL in the destination",
            post("/admin/jobs/replay", r#"{"destination": "app\u0000", "dry_run": true}"#),
            "Failed to deserialize the JSON body into the target type: destination: a filter value must not \
             contain control characters at line 1 column 27",
        ),
        case(
            "admin bulk replay with a terminal escape in the destination",
            post("/admin/jobs/replay", r#"{"destination": "a\u001bb", "dry_run": true}"#),
            "Failed to deserialize the JSON body into the target type: destination: a filter value must not \
             contain control characters at line 1 column 26",
        ),
        case(
            "admin pause of a destination named with a NUL",
            post("/admin/destinations/app%00/pause", ""),
            CONTROL,
        ),
        case(
            "admin test of a destination named with a NUL",
            post("/admin/destinations/a%00b/test", ""),
            CONTROL,
        ),
        case(
            "admin pause of a destination named with invalid UTF-8 (%ff)",
            post("/admin/destinations/%ff/pause", ""),
            "the destination name must be UTF-8 text",
        ),
        case(
            "admin events cursor before 4714 BC",
            get(&format!("/admin/events?cursor={ANCIENT_CURSOR}")),
            "Failed to deserialize query string: invalid cursor",
        ),
        case(
            "admin reprocess of one event with ?dry_run=true (the route has no dry run)",
            post(&format!("/admin/events/{failed}/reprocess?dry_run=true"), ""),
            "unknown field \"dry_run\"",
        ),
        case("admin show event with ?foo=1", get("/admin/events/1?foo=1"), FOO),
        case("admin show job with ?foo=1", get("/admin/jobs/1?foo=1"), FOO),
        case("admin replay job with ?foo=1", post("/admin/jobs/1/replay?foo=1", ""), FOO),
        case("admin destinations with ?foo=1", get("/admin/destinations?foo=1"), FOO),
        case("admin reconciliation with ?foo=1", get("/admin/reconciliation?foo=1"), FOO),
        case("admin pause with ?foo=1", post("/admin/destinations/app/pause?foo=1", ""), FOO),
        case("admin resume with ?foo=1", post("/admin/destinations/app/resume?foo=1", ""), FOO),
        case("admin destination test with ?foo=1", post("/admin/destinations/app/test?foo=1", ""), FOO),
        case(
            "admin bulk replay with ?foo=1",
            post("/admin/jobs/replay?foo=1", r#"{"destination": "app", "dry_run": true}"#),
            FOO,
        ),
        case(
            "admin bulk reprocess with ?foo=1",
            post(&format!("{bulk}?foo=1"), r#"{"status": "FAILED", "dry_run": true}"#),
            FOO,
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

    let failed = app.count("SELECT min(id) FROM webhook_events WHERE processing_status = 'FAILED'").await;
    let cases = cases(failed);
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
