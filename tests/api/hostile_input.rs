//! Hostile input over a real socket, one table: each request is answered
//! with its documented status and reason, stores nothing, and, unless its
//! signature was verified, never makes the service run a single statement.

use serde_json::{Value, json};

use crate::support::socket::{request_bytes, send_raw};
use crate::support::watch::service_sessions;
use crate::support::*;

/// A signed Paddle delivery of exactly these bytes.
fn paddle_raw(body: &[u8]) -> Delivery {
    let mut delivery = paddle(&json!({}));
    delivery.body = body.to_vec();
    delivery.header("paddle-signature", &paddle_signature(PADDLE_SECRETS[0], now(), body))
}

/// A signed Clerk delivery of exactly these bytes.
fn clerk_raw(body: &[u8]) -> Delivery {
    let mut delivery = clerk("msg_hostile", &json!({}));
    delivery.body = body.to_vec();
    let signature = svix_signature(CLERK_SECRETS[0], "msg_hostile", now(), body);
    delivery.header("svix-signature", &signature)
}

/// An event body of `len` bytes exactly.
fn event_of_len(len: usize) -> Vec<u8> {
    let head = r#"{"event_id":"evt_big","event_type":"customer.updated","pad":""#;
    let mut body = head.as_bytes().to_vec();
    body.resize(len - 2, b'x');
    body.extend_from_slice(b"\"}");
    body
}

/// The request line and headers of `delivery`, with `extra` header lines added.
fn with_header_lines(delivery: &Delivery, extra: &str) -> Vec<u8> {
    let bytes = request_bytes(delivery);
    let text = String::from_utf8(bytes).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    format!("{head}\r\n{extra}\r\n{body}").into_bytes()
}

fn error(reason: &str) -> Option<Value> {
    Some(json!({ "error": reason }))
}

/// One row: what is sent, what must come back.
struct Case {
    name: &'static str,
    request: Vec<u8>,
    status: u16,
    /// The JSON body; `None` for answers of the HTTP layer, which have none.
    body: Option<Value>,
    /// Whether the service may reach the database for it: only once the
    /// signature is verified (and PostgreSQL may then refuse the payload).
    /// For every other request it must not run a single statement.
    verified: bool,
}

fn cases() -> Vec<Case> {
    let good = subscription_created("evt_ok", "sub_ok");
    let signed = paddle(&good);
    let ts = now();
    let sig_with = |ts: &str| format!("ts={ts};h1={}", "0".repeat(64));
    let deep = format!(
        r#"{{"event_id":"evt_deep","event_type":"customer.updated","data":{}{}}}"#,
        "[".repeat(30_000),
        "]".repeat(30_000)
    );
    let unsigned = |name, request, status, reason: &str| Case {
        name,
        request,
        status,
        body: error(reason),
        verified: false,
    };
    let bad_body = |name, body: &[u8], reason: &str| Case {
        name,
        request: request_bytes(&paddle_raw(body)),
        status: 400,
        body: error(reason),
        verified: true,
    };
    let mut many_h1 = sig_with(&ts.to_string());
    many_h1.push_str(&format!(";h1={}", "ab".repeat(32)).repeat(2000));
    let many_v1 = vec![format!("v1,{}", "A".repeat(44)); 2000].join(" ");
    let chunked_over = {
        let body = event_of_len(64 * 1024 + 1);
        let delivery = paddle_raw(&body);
        let text = String::from_utf8(request_bytes(&delivery)).unwrap();
        let (head, _) = text.split_once("\r\n\r\n").unwrap();
        let head = head.replace(&format!("content-length: {}", body.len()), "transfer-encoding: chunked");
        let mut request = format!("{head}\r\n\r\n{:x}\r\n", body.len()).into_bytes();
        request.extend_from_slice(&body);
        request.extend_from_slice(b"\r\n0\r\n\r\n");
        request
    };

    vec![
        // Not provably from the provider: 401, before anything else.
        unsigned(
            "unsigned event",
            request_bytes(&signed.clone().without("paddle-signature")),
            401,
            "missing Paddle-Signature header",
        ),
        unsigned(
            "empty body, unsigned",
            request_bytes(&paddle_raw(b"").without("paddle-signature")),
            401,
            "missing Paddle-Signature header",
        ),
        unsigned(
            "timestamp not a number",
            request_bytes(&signed.clone().header("paddle-signature", &sig_with("soon"))),
            401,
            "malformed Paddle-Signature header",
        ),
        unsigned(
            "timestamp negative",
            request_bytes(&signed.clone().header("paddle-signature", &sig_with("-1700000000"))),
            401,
            "malformed Paddle-Signature header",
        ),
        unsigned(
            "timestamp past i64",
            request_bytes(&signed.clone().header("paddle-signature", &sig_with("99999999999999999999"))),
            401,
            "malformed Paddle-Signature header",
        ),
        unsigned(
            "timestamp far future (year 2286)",
            request_bytes(&paddle_signed(&good, PADDLE_SECRETS[0], 9_999_999_999)),
            401,
            "timestamp in the future",
        ),
        unsigned(
            "Clerk timestamp not a number",
            request_bytes(&clerk("msg_1", &user_created("u")).header("svix-timestamp", "12e3")),
            401,
            "malformed svix-timestamp header",
        ),
        unsigned(
            "Clerk timestamp negative",
            request_bytes(&clerk("msg_1", &user_created("u")).header("svix-timestamp", "-5")),
            401,
            "malformed svix-timestamp header",
        ),
        unsigned(
            "Clerk timestamp far future",
            request_bytes(&clerk_signed("msg_1", &user_created("u"), CLERK_SECRETS[0], ts + 86_400 * 365)),
            401,
            "timestamp in the future",
        ),
        unsigned(
            "2000 h1 entries in Paddle-Signature, none matching",
            request_bytes(&signed.clone().header("paddle-signature", &many_h1)),
            401,
            "no matching signature",
        ),
        unsigned(
            "2000 v1 entries in svix-signature, none matching",
            request_bytes(&clerk("msg_1", &user_created("u")).header("svix-signature", &many_v1)),
            401,
            "no matching signature",
        ),
        unsigned(
            "unknown provider path",
            request_bytes(&Delivery { path: "/webhooks/nobody".into(), ..signed.clone() }),
            404,
            "not found",
        ),
        unsigned(
            "wrong method (GET)",
            b"GET /billing/webhook HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".to_vec(),
            405,
            "method not allowed",
        ),
        unsigned(
            "wrong method (PUT)",
            [b"PUT".as_slice(), &request_bytes(&signed)[4..]].concat(),
            405,
            "method not allowed",
        ),
        // Refused by the HTTP layer (hyper) before the service sees them.
        Case {
            name: "huge header (1 MiB)",
            request: with_header_lines(&signed, &format!("x-huge: {}", "a".repeat(1 << 20))),
            status: 431,
            body: None,
            verified: false,
        },
        Case {
            name: "200 headers",
            request: with_header_lines(
                &signed,
                &(0..200).map(|i| format!("x-h{i}: v")).collect::<Vec<_>>().join("\r\n"),
            ),
            status: 431,
            body: None,
            verified: false,
        },
        Case {
            name: "non-ASCII bytes in the signature header",
            request: with_header_lines(
                &signed.clone().without("paddle-signature"),
                "paddle-signature: ts=1;h1=\u{e9}",
            ),
            status: 400,
            body: None,
            verified: false,
        },
        Case {
            name: "both content-length and transfer-encoding",
            request: with_header_lines(&signed, "transfer-encoding: chunked"),
            status: 400,
            body: None,
            verified: false,
        },
        // Too big: refused while reading, before the signature is even checked.
        unsigned(
            "1 byte over MAX_BODY_BYTES",
            request_bytes(&paddle_raw(&event_of_len(64 * 1024 + 1))),
            413,
            "body larger than 65536 bytes",
        ),
        unsigned(
            "1 byte over MAX_BODY_BYTES, chunked (no length)",
            chunked_over,
            413,
            "body larger than 65536 bytes",
        ),
        // Signed, but not one event with one meaning: 400.
        bad_body("empty body", b"", "body is not valid JSON"),
        bad_body(
            "invalid UTF-8",
            b"{\"event_id\":\"evt_\xff\",\"event_type\":\"x\"}",
            "body is not valid JSON",
        ),
        Case {
            request: request_bytes(&clerk_raw(b"{\"type\":\"user.\xc3\x28\"}")),
            ..bad_body("invalid UTF-8 (Clerk)", b"", "body is not valid JSON")
        },
        bad_body(
            "byte order mark",
            b"\xef\xbb\xbf{\"event_id\":\"evt_1\",\"event_type\":\"x\"}",
            "body is not valid JSON",
        ),
        bad_body(
            "trailing bytes after the object",
            br#"{"event_id":"evt_1","event_type":"x"} {}"#,
            "body is not valid JSON",
        ),
        bad_body(
            "duplicate top-level key",
            br#"{"event_id":"evt_1","event_type":"x","event_id":"evt_2"}"#,
            "body repeats a key in a JSON object",
        ),
        bad_body(
            "duplicate key deep in data",
            br#"{"event_id":"evt_1","event_type":"x","data":{"a":[{"id":1,"id":2}]}}"#,
            "body repeats a key in a JSON object",
        ),
        bad_body(
            "duplicate key after unescaping",
            br#"{"event_id":"evt_1","event_type":"x","data":{"id":1,"\u0069d":2}}"#,
            "body repeats a key in a JSON object",
        ),
        Case {
            request: request_bytes(&clerk_raw(br#"{"type":"user.created","type":"user.deleted"}"#)),
            ..bad_body("duplicate key (Clerk)", b"", "body repeats a key in a JSON object")
        },
        bad_body(
            "event_id of 256 bytes",
            format!(r#"{{"event_id":"{}","event_type":"x"}}"#, "e".repeat(256)).as_bytes(),
            "event_id is longer than 255 bytes",
        ),
        bad_body("deeply nested JSON (30 000 levels)", deep.as_bytes(), "payload cannot be stored as JSON"),
        bad_body(
            "\\u0000 in a string",
            br#"{"event_id":"evt_1","event_type":"x","data":"a\u0000"}"#,
            "payload cannot be stored as JSON",
        ),
        bad_body(
            "lone surrogate escape",
            br#"{"event_id":"evt_1","event_type":"x","data":"\ud800"}"#,
            "payload cannot be stored as JSON",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_their_documented_answer_store_nothing_and_unsigned_ones_never_reach_the_database()
 {
    let app = TestApp::spawn().await;
    let listening = app.listen().await;
    let mut cases = cases();
    // Unverified ones first: they must leave the service's sessions exactly as they were.
    cases.sort_by_key(|case| case.verified);

    let mut statement_free = 0;
    for case in &cases {
        let before = service_sessions(app.pool()).await;
        let answer =
            send_raw(listening.addr, &case.request).await.unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(answer.status, case.status, "{}: {answer:?}", case.name);
        if let Some(body) = &case.body {
            assert_eq!(&answer.body, body, "{}", case.name);
        }
        assert_eq!(app.rows_everywhere().await, 0, "{}: stored something", case.name);
        if !case.verified {
            assert_eq!(service_sessions(app.pool()).await, before, "{}: reached the database", case.name);
            statement_free += 1;
        }
        println!(
            "HOSTILE\t{}\t{}\t{}",
            case.name,
            case.status,
            answer.body["error"].as_str().unwrap_or("(no body)")
        );
    }

    // The same view does see a request that reaches the database.
    let before = service_sessions(app.pool()).await;
    let answer = send_raw(listening.addr, &request_bytes(&paddle(&subscription_created("evt_ok", "sub_ok"))))
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    assert_ne!(service_sessions(app.pool()).await, before);
    println!(
        "HOSTILE\t{} requests, {statement_free} of them refused before verification: no statement run for any of those, nothing stored for any",
        cases.len()
    );
}

#[tokio::test]
async fn the_content_type_is_ignored_because_it_is_not_signed() {
    let app = TestApp::spawn().await;
    let event = |n: &str| paddle(&json!({ "event_id": n, "event_type": "customer.updated" }));
    for (id, delivery) in [
        ("evt_1", event("evt_1").header("content-type", "text/plain")),
        ("evt_2", event("evt_2").without("content-type")),
        ("evt_3", event("evt_3").header("content-type", "application/json; charset=utf-8")),
    ] {
        assert_eq!(app.send(&delivery).await.body, json!({ "event_id": id, "status": "processed" }));
    }
}
