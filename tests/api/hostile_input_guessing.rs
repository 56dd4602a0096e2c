//! Online guessing of the operator tokens is slowed per client address:
//! after 5 wrong tokens the address is refused (429 with `Retry-After`),
//! the right token too, while another address is not; `X-Forwarded-For`
//! from an untrusted peer changes nothing; each refusal is counted.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::console::{ADMIN_TOKEN, sign_in};
use crate::support::socket::send_raw;
use crate::support::*;

fn get(path: &str, token: &str, forwarded_for: &str) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\nx-forwarded-for: {forwarded_for}\r\n\
         connection: close\r\n\r\n"
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_admin_tokens_from_one_address_get_it_refused_for_a_while_even_with_the_right_token() {
    let app =
        TestApp::spawn_with(TestConfig { admin_token: Some(ADMIN_TOKEN), ..TestConfig::default() }).await;
    let listening = app.listen().await;
    let addr = listening.addr;
    // Six wrong guesses, each claiming another client: the header of an
    // untrusted peer is ignored, so all count against 127.0.0.1.
    for n in 1..=6 {
        let wrong =
            send_raw(addr, &get("/admin/events", "wrong-token-0123456789", &format!("198.51.100.{n}")))
                .await
                .unwrap();
        assert_eq!(
            (wrong.status, &wrong.body),
            (401, &json!({ "error": "invalid bearer token" })),
            "guess {n}"
        );
    }
    let refused = send_raw(addr, &get("/admin/events", ADMIN_TOKEN, "198.51.100.7")).await.unwrap();
    assert_eq!(
        (refused.status, &refused.body),
        (429, &json!({ "error": "too many wrong tokens from this address: retry after 1 s" }))
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    println!(
        "HOSTILE\t6 wrong admin tokens from one address (each naming another X-Forwarded-For), then the right one\t{}\t{}",
        refused.status,
        refused.body["error"].as_str().unwrap()
    );

    // Another address (the in-process router: no socket) is not slowed.
    assert_eq!(app.get("/admin/events", Some(ADMIN_TOKEN)).await.status, StatusCode::OK);
    let metrics = app.metrics().await;
    for (refusal, count) in [("wrong", 6), ("throttled", 1)] {
        let line = format!(
            "webhook_operator_token_refusals_total{{surface=\"admin\",refusal=\"{refusal}\"}} {count}"
        );
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
}

#[tokio::test]
async fn wrong_console_sign_ins_get_the_address_refused_with_a_page_saying_when_to_retry() {
    let app =
        TestApp::spawn_with(TestConfig { admin_token: Some(ADMIN_TOKEN), ..TestConfig::default() }).await;
    for n in 1..=6 {
        assert_eq!(
            sign_in(&app, "wrong-token-0123456789").await.status,
            StatusCode::UNAUTHORIZED,
            "guess {n}"
        );
    }
    let refused = sign_in(&app, ADMIN_TOKEN).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers.get("retry-after").unwrap(), "1");
    assert!(
        refused.body.contains("Too many wrong tokens from this address: try again in 1 s."),
        "{}",
        refused.body
    );
    println!(
        "HOSTILE\t6 wrong console sign-ins from one address, then the right token\t429\t\
         the form again: Too many wrong tokens from this address: try again in 1 s."
    );
}
