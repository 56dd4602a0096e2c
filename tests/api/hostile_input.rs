//! Hostile input over a real socket, one table: each request is answered
//! with its documented status and body, stores nothing, and, unless its
//! signature was verified, never makes the service run a single statement.
//!
//! A row is one [`Case`], made by [`refused`] (answered before the signature
//! is verified), [`unreadable`] (signed, then refused as an event: it may
//! reach PostgreSQL, which judges what it can store) or [`http_layer`]
//! (answered by hyper, without a body, before the service sees it).
//! `scripts/reliability` prints the table into RELIABILITY.md.

use serde_json::{Value, json};

use crate::support::socket::{request_bytes, send_raw};
use crate::support::watch::service_sessions;
use crate::support::*;

/// hyper's limit on the number of header lines, which the service keeps.
const MAX_HEADERS: usize = 100;
/// hyper's read buffer, which a request head must fit in: a head up to this
/// size is always read; one at least twice as long is always refused (in
/// between, it depends on how the bytes arrive).
const MAX_HEAD_BYTES: usize = 8192 + 4096 * 100;

/// A body every provider verifies and then refuses, because it repeats a key
/// (which is checked before any provider reads its fields). A row that
/// sends it shows the request got past the HTTP layer and was verified on
/// the bytes the service read.
const REPEATED_KEY: &[u8] = br#"{"event_id":"evt_1","id":"evt_1","type":"x","event_type":"x","type":"y"}"#;

/// A signed Paddle delivery of exactly these bytes.
fn paddle_raw(body: &[u8]) -> Delivery {
    let mut delivery = paddle(&json!({}));
    delivery.body = body.to_vec();
    delivery.header("paddle-signature", &paddle_signature(PADDLE_SECRETS[0], now(), body))
}

/// A signed Clerk delivery of exactly these bytes, with message id `id`.
fn clerk_raw(id: &str, body: &[u8]) -> Delivery {
    let mut delivery = clerk(id, &json!({}));
    delivery.body = body.to_vec();
    delivery.header("svix-signature", &svix_signature(CLERK_SECRETS[0], id, now(), body))
}

/// A signed delivery of exactly these bytes to the Standard Webhooks sender, with message id `id`.
fn standard_raw(id: &str, body: &[u8]) -> Delivery {
    let mut delivery = standard(STANDARD_SENDER, id, &json!({}));
    delivery.body = body.to_vec();
    delivery.header("webhook-signature", &svix_signature(STANDARD_SECRETS[0], id, now(), body))
}

/// A signed Stripe delivery of exactly these bytes.
fn stripe_raw(body: &[u8]) -> Delivery {
    let mut delivery = stripe(&json!({}));
    delivery.body = body.to_vec();
    delivery.header("stripe-signature", &stripe_signature(STRIPE_SECRETS[0], now(), body))
}

/// A signed GitHub `issues` delivery of exactly these bytes.
fn github_raw(body: &[u8]) -> Delivery {
    let mut delivery = github("72d3162e-cc78-11e3-81ab-4c9367dc0958", "issues", &json!({}));
    delivery.body = body.to_vec();
    delivery.header("x-hub-signature-256", &github_signature(GITHUB_SECRETS[0], body))
}

/// `event` as a body whose `data` also holds a number beyond the range of
/// PostgreSQL's `numeric` (which `serde_json::Value` cannot hold either).
fn with_huge_number(event: &Value) -> Vec<u8> {
    let body = serde_json::to_string(event).unwrap();
    assert!(body.contains(r#""data":{"#), "{body}");
    body.replacen(r#""data":{"#, r#""data":{"n":1e999999999,"#, 1).into_bytes()
}

/// An event body of `len` bytes exactly.
fn event_of_len(len: usize) -> Vec<u8> {
    let head = r#"{"event_id":"evt_big","event_type":"customer.updated","pad":""#;
    let mut body = head.as_bytes().to_vec();
    body.resize(len - 2, b'x');
    body.extend_from_slice(b"\"}");
    body
}

/// A request's head (request line and header lines, without the blank
/// line) and its body.
fn split(request: &[u8]) -> (&[u8], &[u8]) {
    let end = request.windows(4).position(|w| w == b"\r\n\r\n").expect("a request head");
    (&request[..end], &request[end + 4..])
}

/// `delivery` as a request with `extra` (raw header lines, `\r\n` between
/// them) added at the end of its head.
fn with_header_lines(delivery: &Delivery, extra: &[u8]) -> Vec<u8> {
    let request = request_bytes(delivery);
    let (head, body) = split(&request);
    [head, b"\r\n", extra, b"\r\n\r\n", body].concat()
}

/// `delivery` with filler headers up to `count` header lines in all.
fn with_header_count(delivery: &Delivery, count: usize) -> Vec<u8> {
    let request = request_bytes(delivery);
    let present = split(&request).0.split(|&b| b == b'\n').count() - 1;
    let filler: Vec<String> = (present..count).map(|i| format!("x-filler-{i}: v")).collect();
    let request = with_header_lines(delivery, filler.join("\r\n").as_bytes());
    assert_eq!(split(&request).0.split(|&b| b == b'\n').count() - 1, count);
    request
}

/// `delivery` with one filler header sized so that its head, blank line
/// included, is `len` bytes.
fn with_head_of_len(delivery: &Delivery, len: usize) -> Vec<u8> {
    let request = request_bytes(delivery);
    let fixed = split(&request).0.len() + "\r\nx-filler: ".len() + "\r\n\r\n".len();
    let request = with_header_lines(delivery, format!("x-filler: {}", "a".repeat(len - fixed)).as_bytes());
    assert_eq!(split(&request).0.len() + 4, len);
    request
}

/// `delivery` with its body sent chunked, and with a `content-length` of
/// `content_length` beside `transfer-encoding` when given.
fn chunked(delivery: &Delivery, content_length: Option<usize>) -> Vec<u8> {
    let request = request_bytes(delivery);
    let (head, body) = split(&request);
    let head = String::from_utf8(head.to_vec()).unwrap();
    let framing = match content_length {
        Some(len) => format!("content-length: {len}\r\ntransfer-encoding: chunked"),
        None => "transfer-encoding: chunked".into(),
    };
    let head = head.replace(&format!("content-length: {}", body.len()), &framing);
    [head.as_bytes(), b"\r\n\r\n", format!("{:x}\r\n", body.len()).as_bytes(), body, b"\r\n0\r\n\r\n"]
        .concat()
}

/// One row: what is sent, what must come back.
struct Case {
    name: String,
    request: Vec<u8>,
    status: u16,
    /// The JSON body; `None` for answers of the HTTP layer, which have none.
    body: Option<Value>,
    /// Whether the service may reach the database for it: only once the
    /// signature is verified (and PostgreSQL may then refuse the payload).
    /// For every other request it must not run a single statement.
    verified: bool,
}

/// Answered before the signature is verified, with `{"error": reason}`.
fn refused(name: &str, request: Vec<u8>, status: u16, reason: &str) -> Case {
    Case { name: name.into(), request, status, body: Some(json!({ "error": reason })), verified: false }
}

/// Verified, then refused as an event: 400 with `{"error": reason}`.
fn unreadable(name: &str, request: Vec<u8>, reason: &str) -> Case {
    Case { name: name.into(), request, status: 400, body: Some(json!({ "error": reason })), verified: true }
}

/// Answered by hyper before the service sees the request: `status`, no body.
fn http_layer(name: &str, request: Vec<u8>, status: u16) -> Case {
    Case { name: name.into(), request, status, body: None, verified: false }
}

const REPEATS_A_KEY: &str = "body repeats a key in a JSON object";
const NOT_JSON: &str = "body is not valid JSON";

fn cases() -> Vec<Case> {
    let good = subscription_created("evt_ok", "sub_ok");
    let signed = paddle(&good);
    let ts = now();
    let next_year = ts + 86_400 * 365;
    let zeros = "0".repeat(64);
    let paddle_sig = |ts: &str| format!("ts={ts};h1={zeros}");
    let deep = format!(
        r#"{{"event_id":"evt_deep","event_type":"customer.updated","data":{}{}}}"#,
        "[".repeat(30_000),
        "]".repeat(30_000)
    );
    let many_h1 = format!("{};h1={}", paddle_sig(&ts.to_string()), vec!["ab".repeat(32); 2000].join(";h1="));
    let many_v1 = vec![format!("v1,{}", "A".repeat(44)); 2000].join(" ");
    let many_stripe_v1 = format!("t={ts},{}", vec![format!("v1={zeros}"); 2000].join(","));
    let clerk_event = clerk("msg_1", &user_created("u"));
    let acme = standard(STANDARD_SENDER, "msg_1", &standard_event("invoice.paid"));
    let stripe_delivery = stripe(&stripe_event("evt_1", "invoice.paid"));
    let github_event = github("72d3162e-cc78-11e3-81ab-4c9367dc0958", "issues", &issue_opened());
    let over_limit = event_of_len(64 * 1024 + 1);
    let paddle_body = |id: &str, event_type: &str| {
        serde_json::to_vec(&json!({ "event_id": id, "event_type": event_type })).unwrap()
    };

    vec![
        // Not provably from the provider: 401, before anything else.
        refused(
            "unsigned event",
            request_bytes(&signed.clone().without("paddle-signature")),
            401,
            "missing Paddle-Signature header",
        ),
        refused(
            "empty body, unsigned",
            request_bytes(&paddle_raw(b"").without("paddle-signature")),
            401,
            "missing Paddle-Signature header",
        ),
        refused(
            "timestamp not a number",
            request_bytes(&signed.clone().header("paddle-signature", &paddle_sig("soon"))),
            401,
            "malformed Paddle-Signature header",
        ),
        refused(
            "timestamp negative",
            request_bytes(&signed.clone().header("paddle-signature", &paddle_sig("-1700000000"))),
            401,
            "malformed Paddle-Signature header",
        ),
        refused(
            "timestamp past i64",
            request_bytes(&signed.clone().header("paddle-signature", &paddle_sig("99999999999999999999"))),
            401,
            "malformed Paddle-Signature header",
        ),
        refused(
            "timestamp far future (year 2286)",
            request_bytes(&paddle_signed(&good, PADDLE_SECRETS[0], 9_999_999_999)),
            401,
            "timestamp in the future",
        ),
        refused(
            "2000 h1 entries in Paddle-Signature, none matching",
            request_bytes(&signed.clone().header("paddle-signature", &many_h1)),
            401,
            "no matching signature",
        ),
        // Bytes 0x80 to 0xFF are legal in a header value (obs-text): hyper
        // passes them on, and the verifier refuses a header that is not
        // visible ASCII.
        refused(
            "non-ASCII bytes in the signature header (UTF-8 é)",
            with_header_lines(
                &signed.clone().without("paddle-signature"),
                "paddle-signature: ts=1;h1=é".as_bytes(),
            ),
            401,
            "malformed Paddle-Signature header",
        ),
        refused(
            "non-ASCII bytes in the signature header (a lone 0xFF)",
            with_header_lines(&signed.clone().without("paddle-signature"), b"paddle-signature: ts=1;h1=\xff"),
            401,
            "malformed Paddle-Signature header",
        ),
        refused(
            "Clerk timestamp not a number",
            request_bytes(&clerk_event.clone().header("svix-timestamp", "12e3")),
            401,
            "malformed svix-timestamp header",
        ),
        refused(
            "Clerk timestamp negative",
            request_bytes(&clerk_event.clone().header("svix-timestamp", "-5")),
            401,
            "malformed svix-timestamp header",
        ),
        refused(
            "Clerk timestamp far future",
            request_bytes(&clerk_signed("msg_1", &user_created("u"), CLERK_SECRETS[0], next_year)),
            401,
            "timestamp in the future",
        ),
        refused(
            "2000 v1 entries in svix-signature, none matching",
            request_bytes(&clerk_event.clone().header("svix-signature", &many_v1)),
            401,
            "no matching signature",
        ),
        refused(
            "Standard Webhooks: unsigned",
            request_bytes(&acme.clone().without("webhook-signature")),
            401,
            "missing webhook-signature header",
        ),
        refused(
            "Standard Webhooks: timestamp not a number",
            request_bytes(&acme.clone().header("webhook-timestamp", "soon")),
            401,
            "malformed webhook-timestamp header",
        ),
        refused(
            "Standard Webhooks: timestamp far future",
            request_bytes(&standard_signed(
                STANDARD_SENDER,
                "msg_1",
                &standard_event("invoice.paid"),
                STANDARD_SECRETS[0],
                next_year,
            )),
            401,
            "timestamp in the future",
        ),
        refused(
            "Standard Webhooks: 2000 v1 entries, none matching",
            request_bytes(&acme.clone().header("webhook-signature", &many_v1)),
            401,
            "no matching signature",
        ),
        refused(
            "Stripe: unsigned",
            request_bytes(&stripe_delivery.clone().without("stripe-signature")),
            401,
            "missing Stripe-Signature header",
        ),
        refused(
            "Stripe: timestamp not a number",
            request_bytes(&stripe_delivery.clone().header("stripe-signature", &format!("t=soon,v1={zeros}"))),
            401,
            "malformed Stripe-Signature header",
        ),
        refused(
            "Stripe: timestamp far future",
            request_bytes(&stripe_signed(
                &stripe_event("evt_1", "invoice.paid"),
                STRIPE_SECRETS[0],
                next_year,
            )),
            401,
            "timestamp in the future",
        ),
        refused(
            "Stripe: 2000 v1 entries, none matching",
            request_bytes(&stripe_delivery.clone().header("stripe-signature", &many_stripe_v1)),
            401,
            "no matching signature",
        ),
        refused(
            "GitHub: unsigned",
            request_bytes(&github_event.clone().without("x-hub-signature-256")),
            401,
            "missing X-Hub-Signature-256 header",
        ),
        refused(
            "GitHub: signature without its sha256= prefix",
            request_bytes(&github_event.clone().header("x-hub-signature-256", &zeros)),
            401,
            "malformed X-Hub-Signature-256 header",
        ),
        refused(
            "GitHub: signed with another secret",
            request_bytes(&github_signed(
                "72d3162e-cc78-11e3-81ab-4c9367dc0958",
                "issues",
                &issue_opened(),
                "not the configured secret, 32 bytes",
            )),
            401,
            "no matching signature",
        ),
        refused(
            "unknown provider path",
            request_bytes(&Delivery { path: "/webhooks/nobody".into(), ..signed.clone() }),
            404,
            "not found",
        ),
        refused(
            "wrong method (GET)",
            b"GET /billing/webhook HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".to_vec(),
            405,
            "method not allowed",
        ),
        refused(
            "wrong method (PUT)",
            [b"PUT".as_slice(), &request_bytes(&signed)[4..]].concat(),
            405,
            "method not allowed",
        ),
        // The HTTP layer's limits, at their edges: the rows just inside them
        // carry a signed body the service refuses, so the answer shows the
        // service read the request.
        http_layer("a head of 1 MiB", with_head_of_len(&signed, 1 << 20), 431),
        unreadable(
            &format!("a head of {MAX_HEAD_BYTES} bytes (the most always read)"),
            with_head_of_len(&paddle_raw(REPEATED_KEY), MAX_HEAD_BYTES),
            REPEATS_A_KEY,
        ),
        http_layer(
            &format!("{} header lines", MAX_HEADERS + 1),
            with_header_count(&signed, MAX_HEADERS + 1),
            431,
        ),
        unreadable(
            &format!("{MAX_HEADERS} header lines (the most read)"),
            with_header_count(&paddle_raw(REPEATED_KEY), MAX_HEADERS),
            REPEATS_A_KEY,
        ),
        // Both Content-Length and Transfer-Encoding: hyper drops the length
        // and reads the body chunked. A signed body sent chunked with a
        // wrong length is read whole (verified, then refused for its
        // repeated key); a body that is not chunked cannot be read.
        unreadable(
            "Content-Length (10) and Transfer-Encoding: chunked, a chunked body",
            chunked(&paddle_raw(REPEATED_KEY), Some(10)),
            REPEATS_A_KEY,
        ),
        refused(
            "Content-Length and Transfer-Encoding: chunked, a body that is not chunked",
            with_header_lines(&signed, b"transfer-encoding: chunked"),
            400,
            "could not read the request body",
        ),
        // Too big: refused while reading, before the signature is even checked.
        refused(
            "1 byte over MAX_BODY_BYTES",
            request_bytes(&paddle_raw(&over_limit)),
            413,
            "body larger than 65536 bytes",
        ),
        refused(
            "1 byte over MAX_BODY_BYTES, chunked (no length)",
            chunked(&paddle_raw(&over_limit), None),
            413,
            "body larger than 65536 bytes",
        ),
        // Signed, but not one event with one meaning: 400.
        unreadable("empty body", request_bytes(&paddle_raw(b"")), NOT_JSON),
        unreadable(
            "invalid UTF-8",
            request_bytes(&paddle_raw(b"{\"event_id\":\"evt_\xff\",\"event_type\":\"x\"}")),
            NOT_JSON,
        ),
        unreadable(
            "invalid UTF-8 (Clerk)",
            request_bytes(&clerk_raw("msg_1", b"{\"type\":\"user.\xc3\x28\"}")),
            NOT_JSON,
        ),
        unreadable(
            "invalid UTF-8 (Stripe)",
            request_bytes(&stripe_raw(b"{\"id\":\"evt_\xc3\x28\",\"type\":\"x\"}")),
            NOT_JSON,
        ),
        unreadable(
            "byte order mark",
            request_bytes(&paddle_raw(b"\xef\xbb\xbf{\"event_id\":\"evt_1\",\"event_type\":\"x\"}")),
            NOT_JSON,
        ),
        unreadable(
            "trailing bytes after the object",
            request_bytes(&paddle_raw(br#"{"event_id":"evt_1","event_type":"x"} {}"#)),
            NOT_JSON,
        ),
        unreadable(
            "duplicate top-level key",
            request_bytes(&paddle_raw(br#"{"event_id":"evt_1","event_type":"x","event_id":"evt_2"}"#)),
            REPEATS_A_KEY,
        ),
        unreadable(
            "duplicate key deep in data",
            request_bytes(&paddle_raw(
                br#"{"event_id":"evt_1","event_type":"x","data":{"a":[{"id":1,"id":2}]}}"#,
            )),
            REPEATS_A_KEY,
        ),
        unreadable(
            "duplicate key after unescaping",
            request_bytes(&paddle_raw(
                br#"{"event_id":"evt_1","event_type":"x","data":{"id":1,"\u0069d":2}}"#,
            )),
            REPEATS_A_KEY,
        ),
        unreadable(
            "duplicate key (Clerk)",
            request_bytes(&clerk_raw("msg_1", br#"{"type":"user.created","type":"user.deleted"}"#)),
            REPEATS_A_KEY,
        ),
        unreadable(
            "duplicate key (Standard Webhooks)",
            request_bytes(&standard_raw("msg_1", REPEATED_KEY)),
            REPEATS_A_KEY,
        ),
        unreadable("duplicate key (Stripe)", request_bytes(&stripe_raw(REPEATED_KEY)), REPEATS_A_KEY),
        unreadable("duplicate key (GitHub)", request_bytes(&github_raw(REPEATED_KEY)), REPEATS_A_KEY),
        unreadable(
            "event_id of 256 bytes",
            request_bytes(&paddle_raw(&paddle_body(&"e".repeat(256), "x"))),
            "event_id is longer than 255 bytes",
        ),
        // Control characters in an event id or type: refused, not stored.
        unreadable(
            "control character in event_id",
            request_bytes(&paddle_raw(&paddle_body("evt_\u{7}", "x"))),
            "missing or invalid event_id",
        ),
        unreadable(
            "control character in event_type",
            request_bytes(&paddle_raw(&paddle_body("evt_1", "customer.updated\n"))),
            "missing or invalid event_type",
        ),
        unreadable(
            "control character in Stripe's id",
            request_bytes(&stripe_raw(br#"{"id":"evt_\u001b1","type":"invoice.paid"}"#)),
            "missing or invalid id",
        ),
        unreadable(
            "tab in svix-id (Clerk)",
            request_bytes(&clerk_raw("msg\t1", &serde_json::to_vec(&user_created("u")).unwrap())),
            "missing or invalid svix-id",
        ),
        unreadable(
            "tab in webhook-id (Standard Webhooks)",
            request_bytes(&standard_raw("msg\t1", &serde_json::to_vec(&standard_event("x")).unwrap())),
            "missing or invalid webhook-id",
        ),
        unreadable(
            "tab in X-GitHub-Delivery",
            request_bytes(
                &github_raw(&serde_json::to_vec(&issue_opened()).unwrap())
                    .header("x-github-delivery", "a\tb"),
            ),
            "missing or invalid X-GitHub-Delivery",
        ),
        unreadable(
            "GitHub: no X-GitHub-Event header",
            request_bytes(
                &github_raw(&serde_json::to_vec(&issue_opened()).unwrap()).without("x-github-event"),
            ),
            "missing or invalid X-GitHub-Event",
        ),
        // GitHub's type is the header plus the body's action: each is
        // named when it is the one at fault.
        unreadable(
            "GitHub: action of 256 bytes",
            request_bytes(&github_raw(format!(r#"{{"action":"{}"}}"#, "a".repeat(256)).as_bytes())),
            "action is longer than 255 bytes",
        ),
        unreadable(
            "GitHub: control character in action",
            request_bytes(&github_raw(br#"{"action":"opened\u001b"}"#)),
            "missing or invalid action",
        ),
        unreadable(
            "GitHub: X-GitHub-Event and action over 255 bytes together",
            request_bytes(
                &github_raw(format!(r#"{{"action":"{}"}}"#, "a".repeat(100)).as_bytes())
                    .header("x-github-event", &"e".repeat(200)),
            ),
            "X-GitHub-Event.action is longer than 255 bytes",
        ),
        unreadable(
            "deeply nested JSON (30 000 levels)",
            request_bytes(&paddle_raw(deep.as_bytes())),
            "payload cannot be stored as JSON",
        ),
        unreadable(
            "\\u0000 in a string",
            request_bytes(&paddle_raw(br#"{"event_id":"evt_1","event_type":"x","data":"a\u0000"}"#)),
            "payload cannot be stored as JSON",
        ),
        unreadable(
            "lone surrogate escape",
            request_bytes(&paddle_raw(br#"{"event_id":"evt_1","event_type":"x","data":"\ud800"}"#)),
            "payload cannot be stored as JSON",
        ),
        // Values the parse lets through but PostgreSQL cannot store: 400,
        // never 500 (which the provider would retry for days).
        unreadable(
            "number beyond PostgreSQL's numeric range",
            request_bytes(&paddle_raw(br#"{"event_id":"evt_1","event_type":"x","data":{"n":1e999999999}}"#)),
            "payload cannot be stored as JSON",
        ),
        unreadable(
            "number beyond PostgreSQL's numeric range (event with side effects)",
            request_bytes(&paddle_raw(&with_huge_number(&good))),
            "payload cannot be stored as JSON",
        ),
        unreadable(
            "NUL in notification_id (Paddle)",
            request_bytes(&paddle_raw(
                br#"{"event_id":"evt_1","event_type":"x","notification_id":"ntf_\u0000"}"#,
            )),
            "missing or invalid notification_id",
        ),
        unreadable(
            "Stripe created before 4714 BC (PostgreSQL's earliest time)",
            request_bytes(&stripe_raw(br#"{"id":"evt_1","type":"invoice.paid","created":-210866803201}"#)),
            "invalid created",
        ),
        unreadable(
            "Clerk timestamp before 4714 BC (PostgreSQL's earliest time)",
            request_bytes(&clerk_raw(
                "msg_1",
                br#"{"type":"user.created","timestamp":-210866803200001,"data":{"id":"user_1"}}"#,
            )),
            "invalid timestamp",
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
        match &case.body {
            Some(body) => assert_eq!(&answer.body, body, "{}", case.name),
            None => assert_eq!(
                (answer.header("content-length"), &answer.body),
                (Some("0"), &Value::Null),
                "{}: {answer:?}",
                case.name
            ),
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
