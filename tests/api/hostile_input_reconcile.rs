//! A hostile or broken provider API, for reconciliation (rows of
//! RELIABILITY.md's hostile-input table): a page that never ends, pages
//! that loop, and events or request ids PostgreSQL cannot store. Each run
//! ends with a clear error; none exhausts memory or pages for ever, and
//! one unstorable event does not keep the others from being recovered.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};
use webhook_inbox::reconcile::MAX_PAGE_BYTES;

use crate::support::provider_api::API_KEY;
use crate::support::*;

/// A Paddle API at the returned URL answering `GET /events` with
/// `answer(n)` for request `n` (1-based); the count of requests.
async fn paddle_api(
    answer: impl Fn(usize, &str) -> Response + Clone + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let (counted, base) = (requests.clone(), url.clone());
    let app = Router::new().route(
        "/events",
        get(move || {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            let answer = answer.clone();
            let base = base.clone();
            async move { answer(n, &base) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, requests)
}

/// `webhook-inbox reconcile paddle --json` against `url`, from long ago;
/// a run still going after a minute fails the test (a bound, not a timing).
async fn reconcile(app: &TestApp, url: &str) -> cli::CliRun {
    let args = [
        "reconcile",
        "paddle",
        "--json",
        "--paddle-price-credits",
        PRICE_CREDITS,
        "--paddle-api-url",
        url,
        "--paddle-api-key",
        API_KEY,
        "--since",
        "2024-01-01T00:00:00Z",
    ];
    let run = tokio::time::timeout(std::time::Duration::from_secs(60), cli(&app.db, &args)).await;
    run.expect("the run still goes after a minute")
}

/// A Paddle page of `events` (raw JSON text each), with `request_id` and
/// the next page's URL.
fn page(events: &[String], request_id: &str, next: Option<String>) -> Response {
    let events = events.join(",");
    let meta =
        json!({ "request_id": request_id, "pagination": { "next": next, "has_more": next.is_some() } });
    Response::new(Body::from(format!(r#"{{"data":[{events}],"meta":{meta}}}"#)))
}

/// A Paddle event without side effects, with `extra` (raw JSON) in its data.
fn event(id: &str, extra: &str) -> String {
    format!(
        r#"{{"event_id":"{id}","event_type":"customer.created","occurred_at":"2024-05-01T00:00:00Z","data":{{"id":"ctm_01"{extra}}}}}"#
    )
}

fn row(name: &str, outcome: &str, answer: &str) {
    println!("HOSTILE\t{name}\t{outcome}\t{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_that_never_ends_stops_the_run_at_the_page_limit() {
    let app = TestApp::spawn().await;
    static CHUNK: [u8; 65536] = [b' '; 65536];
    let (url, _) = paddle_api(|_, _| {
        let endless =
            futures_util::stream::repeat_with(|| Ok::<_, std::io::Error>(Bytes::from_static(&CHUNK)));
        Response::new(Body::from_stream(endless))
    })
    .await;
    let run = reconcile(&app, &url).await;
    let error = run.error.expect("the run fails");
    assert_eq!(
        error,
        format!("the paddle API answered a page larger than {MAX_PAGE_BYTES} bytes: reading stopped there")
    );
    assert_eq!(app.rows_everywhere().await, 0);
    row("reconciliation: an endless page (chunked, never ending)", "run fails", &error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_that_name_themselves_again_end_the_run() {
    let app = TestApp::spawn().await;
    let (url, requests) =
        paddle_api(|_, base| page(&[], "req_1", Some(format!("{base}/events?after=evt_1")))).await;
    let run = reconcile(&app, &url).await;
    let error = run.error.expect("the run fails");
    assert_eq!(error, "the paddle API pages without end: it named a page it had named before");
    assert_eq!(requests.load(Ordering::SeqCst), 2, "the first page, and the one it named, once");
    row("reconciliation: every page names the same next page", "run fails", &error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_postgresql_cannot_store_are_counted_and_the_others_recovered() {
    let app = TestApp::spawn().await;
    let (url, _) = paddle_api(|n, base| match n {
        1 => page(
            &[event("evt_a", ""), event("evt_b", r#","note":"a\u0000b""#)],
            "req\u{0}1",
            Some(format!("{base}/events?after=evt_b")),
        ),
        _ => page(&[event("evt_c", r#","n":1e999999999"#), event("evt_d", "")], &"r".repeat(2_000_000), None),
    })
    .await;
    let run = reconcile(&app, &url).await;
    let error = run.error.clone().expect("the run fails at its end");
    assert_eq!(
        error,
        "2 event(s) unreadable, left alone: see the UNREADABLE lines and the log (--json: `unreadable_events`)"
    );
    let summary: Value = serde_json::from_str(run.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        (summary["recovered"].as_u64(), summary["unreadable"].as_u64()),
        (Some(2), Some(2)),
        "{summary}"
    );
    let named: Vec<(&str, &str)> = summary["unreadable_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["event_id"].as_str().unwrap(), e["error"].as_str().unwrap()))
        .collect();
    assert_eq!(
        named,
        [("evt_b", "payload cannot be stored as JSON"), ("evt_c", "payload cannot be stored as JSON")]
    );
    // The request ids PostgreSQL cannot store (a NUL), or too long to keep, are dropped.
    let archive: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT event_id, request_id FROM webhook_events ORDER BY id")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(archive, [("evt_a".into(), None), ("evt_d".into(), None)]);
    row(
        "reconciliation: a NUL in an event's string, a number beyond numeric, a NUL and 2,000,000 characters in request ids",
        "run fails at its end",
        &format!("{error}; the 2 others recovered"),
    );
}
