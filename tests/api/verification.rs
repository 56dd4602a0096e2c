//! Requests that are not provably from the provider get 401 and write
//! nothing anywhere; rotation accepts any configured secret.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::*;

/// Seconds beyond the 300 s window, with a margin: the clock may tick
/// between signing and verifying (the exact boundary is unit-tested).
const OUTSIDE_WINDOW: i64 = 330;

async fn assert_rejected(app: &TestApp, delivery: &Delivery, reason: &str) {
    let answer = app.send(delivery).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{reason}: {:?}", answer.body);
    assert_eq!(answer.body, json!({ "error": reason }));
}

#[tokio::test]
async fn unverifiable_paddle_deliveries_are_refused_and_store_nothing() {
    let app = TestApp::spawn().await;
    let body = subscription_created("evt_01", "sub_01");
    let signed = paddle(&body);
    let mut tampered = signed.clone();
    tampered.body[10] ^= 0x01;
    let header = "paddle-signature";

    let cases = [
        (tampered, "no matching signature"),
        (paddle_signed(&body, "pdl_wrong_secret", now()), "no matching signature"),
        (signed.clone().without(header), "missing Paddle-Signature header"),
        (signed.clone().header(header, "h1=abc"), "malformed Paddle-Signature header"),
        (signed.clone().header(header, "ts=yesterday;h1=abc"), "malformed Paddle-Signature header"),
        (paddle_signed(&body, PADDLE_SECRETS[0], now() - OUTSIDE_WINDOW), "timestamp too old"),
        (paddle_signed(&body, PADDLE_SECRETS[0], now() + OUTSIDE_WINDOW), "timestamp in the future"),
    ];
    for (delivery, reason) in &cases {
        assert_rejected(&app, delivery, reason).await;
    }
    assert_eq!(app.rows_everywhere().await, 0);
}

#[tokio::test]
async fn unverifiable_clerk_deliveries_are_refused_and_store_nothing() {
    let app = TestApp::spawn().await;
    let body = user_created("user_01");
    let signed = clerk("msg_01", &body);
    let mut tampered = signed.clone();
    tampered.body[5] ^= 0x01;

    let cases = [
        (tampered, "no matching signature"),
        (signed.clone().header("svix-id", "msg_02"), "no matching signature"),
        (clerk_signed("msg_01", &body, "whsec_AAAAAAAAAAAAAAAAAAAAAAAA", now()), "no matching signature"),
        (signed.clone().without("svix-signature"), "missing svix-signature header"),
        (signed.clone().header("svix-signature", "garbage"), "malformed svix-signature header"),
        (signed.clone().header("svix-timestamp", "-1"), "malformed svix-timestamp header"),
        (clerk_signed("msg_01", &body, CLERK_SECRETS[0], now() - OUTSIDE_WINDOW), "timestamp too old"),
        (clerk_signed("msg_01", &body, CLERK_SECRETS[0], now() + OUTSIDE_WINDOW), "timestamp in the future"),
    ];
    for (delivery, reason) in &cases {
        assert_rejected(&app, delivery, reason).await;
    }
    assert_eq!(app.rows_everywhere().await, 0);
}

#[tokio::test]
async fn either_of_two_configured_secrets_verifies_and_its_position_is_archived() {
    let app = TestApp::spawn().await;
    for (i, secret) in PADDLE_SECRETS.iter().enumerate() {
        let body = json!({ "event_id": format!("evt_{i}"), "event_type": "customer.created", "data": {} });
        assert_eq!(app.send(&paddle_signed(&body, secret, now())).await.status, StatusCode::OK);
    }
    for (i, secret) in CLERK_SECRETS.iter().enumerate() {
        let body = json!({ "type": "session.created", "data": {} });
        assert_eq!(
            app.send(&clerk_signed(&format!("msg_{i}"), &body, secret, now())).await.status,
            StatusCode::OK
        );
    }
    let indexes: Vec<(String, i16)> =
        sqlx::query_as("SELECT provider, secret_index FROM webhook_events ORDER BY provider, secret_index")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(
        indexes,
        [("clerk".into(), 0), ("clerk".into(), 1), ("paddle".into(), 0), ("paddle".into(), 1)]
    );
}

#[tokio::test]
async fn one_valid_signature_among_several_is_enough() {
    let app = TestApp::spawn().await;
    let body = subscription_created("evt_01", "sub_01");
    let signed = paddle(&body);
    let ts = now();
    let valid = paddle_signature(PADDLE_SECRETS[0], ts, &signed.body);
    let several = format!("ts={ts};h1=deadbeef;h1={};h1=00", valid.split("h1=").nth(1).unwrap());
    assert_eq!(app.send(&signed.header("paddle-signature", &several)).await.status, StatusCode::OK);

    let user = user_created("user_01");
    let signed = clerk("msg_01", &user);
    let valid = signed.headers.iter().find(|(n, _)| n == "svix-signature").unwrap().1.clone();
    let decoy = svix_signature("whsec_AAAAAAAAAAAAAAAAAAAAAAAA", "msg_01", now(), &signed.body);
    let several = format!("v1a,abc {decoy} {valid}");
    assert_eq!(app.send(&signed.header("svix-signature", &several)).await.status, StatusCode::OK);
}

#[tokio::test]
async fn unverifiable_stripe_deliveries_are_refused_and_store_nothing() {
    let app = TestApp::spawn().await;
    let body = stripe_event("evt_01", "invoice.paid");
    let signed = stripe(&body);
    let mut tampered = signed.clone();
    tampered.body[10] ^= 0x01;
    let header = "stripe-signature";
    let only_v0 = format!("t={},v0={}", now(), "0".repeat(64));

    let cases = [
        (tampered, "no matching signature"),
        (stripe_signed(&body, "whsec_wrong_secret", now()), "no matching signature"),
        // The key is the whole secret as text, `whsec_` prefix included.
        (stripe_signed(&body, &STRIPE_SECRETS[0]["whsec_".len()..], now()), "no matching signature"),
        (signed.clone().header(header, &only_v0), "malformed Stripe-Signature header"),
        (signed.clone().without(header), "missing Stripe-Signature header"),
        (signed.clone().header(header, "v1=abc"), "malformed Stripe-Signature header"),
        (signed.clone().header(header, "t=yesterday,v1=abc"), "malformed Stripe-Signature header"),
        (stripe_signed(&body, STRIPE_SECRETS[0], now() - OUTSIDE_WINDOW), "timestamp too old"),
        (stripe_signed(&body, STRIPE_SECRETS[0], now() + OUTSIDE_WINDOW), "timestamp in the future"),
    ];
    for (delivery, reason) in &cases {
        assert_rejected(&app, delivery, reason).await;
    }
    assert_eq!(app.rows_everywhere().await, 0);
}

#[tokio::test]
async fn unverifiable_github_deliveries_are_refused_and_store_nothing() {
    let app = TestApp::spawn().await;
    let body = issue_opened();
    let signed = github("72d3162e-cc78-11e3-81ab-4c9367dc0958", "issues", &body);
    let mut tampered = signed.clone();
    tampered.body[10] ^= 0x01;
    let header = "x-hub-signature-256";
    let sha1 = format!("sha1={}", &github_signature(GITHUB_SECRETS[0], &signed.body)[7..47]);

    let cases = [
        (tampered, "no matching signature"),
        (
            github_signed("72d3162e-cc78-11e3-81ab-4c9367dc0958", "issues", &body, "wrong"),
            "no matching signature",
        ),
        (signed.clone().without(header), "missing X-Hub-Signature-256 header"),
        (signed.clone().header(header, &sha1), "malformed X-Hub-Signature-256 header"),
        (signed.clone().header(header, "sha256=abc"), "malformed X-Hub-Signature-256 header"),
    ];
    for (delivery, reason) in &cases {
        assert_rejected(&app, delivery, reason).await;
    }
    assert_eq!(app.rows_everywhere().await, 0);
}

#[tokio::test]
async fn unverifiable_standard_webhooks_deliveries_are_refused_and_store_nothing() {
    let app = TestApp::spawn().await;
    let body = standard_event("contact.created");
    let signed = standard(STANDARD_SENDER, "msg_01", &body);
    let mut tampered = signed.clone();
    tampered.body[5] ^= 0x01;

    let cases = [
        (tampered, "no matching signature"),
        (signed.clone().header("webhook-id", "msg_02"), "no matching signature"),
        // Another sender's secret (Clerk's) does not verify for this one.
        (standard_signed(STANDARD_SENDER, "msg_01", &body, CLERK_SECRETS[0], now()), "no matching signature"),
        (signed.clone().without("webhook-signature"), "missing webhook-signature header"),
        (signed.clone().without("webhook-id"), "missing webhook-id header"),
        (signed.clone().header("webhook-signature", "garbage"), "malformed webhook-signature header"),
        (signed.clone().header("webhook-timestamp", "soon"), "malformed webhook-timestamp header"),
        (
            standard_signed(STANDARD_SENDER, "msg_01", &body, STANDARD_SECRETS[0], now() - OUTSIDE_WINDOW),
            "timestamp too old",
        ),
        (
            standard_signed(STANDARD_SENDER, "msg_01", &body, STANDARD_SECRETS[0], now() + OUTSIDE_WINDOW),
            "timestamp in the future",
        ),
    ];
    for (delivery, reason) in &cases {
        assert_rejected(&app, delivery, reason).await;
    }
    assert_eq!(app.rows_everywhere().await, 0);
}
