//! Providers without domain effects ride the same two tables as Paddle and
//! Clerk: verified, archived, deduplicated and processed, with no side
//! effect. Every provider answers on `/webhooks/{name}`, Paddle and Clerk
//! also on their first routes, with one dedup between the two.

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde_json::json;

use crate::support::*;

/// One archive row, as an operator would query it.
type ArchiveRow = (String, String, String, Option<DateTime<Utc>>, Option<i16>, String);

async fn archive(app: &TestApp) -> Vec<ArchiveRow> {
    sqlx::query_as(
        "SELECT provider, event_id, event_type, occurred_at, secret_index, processing_status
         FROM webhook_events ORDER BY id",
    )
    .fetch_all(app.pool())
    .await
    .unwrap()
}

fn row(
    provider: &str,
    event_id: &str,
    event_type: &str,
    occurred_at: Option<&str>,
    status: &str,
) -> ArchiveRow {
    let occurred_at = occurred_at.map(|t| t.parse().unwrap());
    (provider.into(), event_id.into(), event_type.into(), occurred_at, Some(1), status.into())
}

#[tokio::test]
async fn events_of_providers_without_effects_are_archived_deduplicated_and_processed() {
    let app = TestApp::spawn().await;
    let delivery_id = "72d3162e-cc78-11e3-81ab-4c9367dc0958";
    // Each signed with the second configured secret: its position is archived.
    let deliveries = [
        (stripe_signed(&stripe_event("evt_01", "invoice.paid"), STRIPE_SECRETS[1], now()), "evt_01"),
        (github_signed(delivery_id, "issues", &issue_opened(), GITHUB_SECRETS[1]), delivery_id),
        (
            github_signed(
                "d-ping",
                "ping",
                &json!({ "zen": "Design for failure.", "hook_id": 1 }),
                GITHUB_SECRETS[1],
            ),
            "d-ping",
        ),
        (
            standard_signed(
                STANDARD_SENDER,
                "msg_01",
                &standard_event("contact.created"),
                STANDARD_SECRETS[1],
                now(),
            ),
            "msg_01",
        ),
    ];
    for (delivery, event_id) in &deliveries {
        let first = app.send(delivery).await;
        assert_eq!(first.body, json!({ "event_id": event_id, "status": "processed" }), "{}", delivery.path);
        let again = app.send(delivery).await;
        assert_eq!(again.body, json!({ "event_id": event_id, "idempotent": true }), "{}", delivery.path);
    }

    let created = Some("2023-11-14T22:13:20Z");
    let timestamp = Some("2022-11-03T20:26:10.344522Z");
    assert_eq!(
        archive(&app).await,
        [
            row("stripe", "evt_01", "invoice.paid", created, "PROCESSED"),
            row("stripe", "evt_01", "invoice.paid", created, "SKIPPED"),
            row("github", delivery_id, "issues.opened", None, "PROCESSED"),
            row("github", delivery_id, "issues.opened", None, "SKIPPED"),
            row("github", "d-ping", "ping", None, "PROCESSED"),
            row("github", "d-ping", "ping", None, "SKIPPED"),
            row("acme", "msg_01", "contact.created", timestamp, "PROCESSED"),
            row("acme", "msg_01", "contact.created", timestamp, "SKIPPED"),
        ]
    );
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 4);
}

#[tokio::test]
async fn paddle_and_clerk_answer_on_their_webhooks_routes_and_share_dedup_with_the_first_routes() {
    let app = TestApp::spawn().await;
    let subscription = paddle(&subscription_created("evt_01", "sub_01"));
    let user = clerk("msg_01", &user_created("user_01"));
    for (legacy, generic) in [(subscription, "/webhooks/paddle"), (user, "/webhooks/clerk")] {
        let first = app.send(&legacy.clone().at(generic)).await;
        assert_eq!(first.body["status"], "processed", "{generic}: {:?}", first.body);
        assert_eq!(app.send(&legacy).await.body["idempotent"], true, "{}", legacy.path);
    }
    // The effects ran once, whichever route the event came in on.
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM users").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 2);
}

#[tokio::test]
async fn each_standard_webhooks_sender_has_its_own_events() {
    let app = TestApp::spawn_with(TestConfig {
        standard_webhooks: format!("acme={},globex={}", STANDARD_SECRETS[0], STANDARD_SECRETS[1]),
        ..TestConfig::default()
    })
    .await;
    let body = standard_event("contact.created");
    // The same message id from two senders is two events.
    let acme = standard("acme", "msg_01", &body);
    let globex = standard_signed("globex", "msg_01", &body, STANDARD_SECRETS[1], now());
    assert_eq!(app.send(&acme).await.body["status"], "processed");
    assert_eq!(app.send(&globex).await.body["status"], "processed");
    // A sender's secret is its own.
    let answer = app.send(&globex.clone().at("/webhooks/acme")).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);

    let providers: Vec<String> =
        sqlx::query_scalar("SELECT provider FROM processed_webhook_events ORDER BY provider")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(providers, ["acme", "globex"]);
}

#[tokio::test]
async fn providers_without_a_secret_answer_503_and_unconfigured_names_404() {
    let config =
        TestConfig { secrets: Default::default(), standard_webhooks: String::new(), ..TestConfig::default() };
    let app = TestApp::spawn_with(config).await;
    let deliveries = [
        ("paddle", paddle(&subscription_created("evt_01", "sub_01"))),
        ("paddle", paddle(&subscription_created("evt_01", "sub_01")).at("/webhooks/paddle")),
        ("clerk", clerk("msg_01", &user_created("user_01"))),
        ("clerk", clerk("msg_01", &user_created("user_01")).at("/webhooks/clerk")),
        ("stripe", stripe(&stripe_event("evt_01", "invoice.paid"))),
        ("github", github("d-1", "issues", &issue_opened())),
    ];
    for (provider, delivery) in &deliveries {
        let answer = app.send(delivery).await;
        assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{}", delivery.path);
        assert_eq!(answer.body, json!({ "error": format!("provider {provider} is not configured") }));
        assert!(answer.headers.contains_key("retry-after"));
    }

    // A Standard Webhooks name nobody configured is not a route at all.
    for path in ["/webhooks/acme", "/webhooks/", "/webhooks/%FF"] {
        let answer = app.send(&standard(STANDARD_SENDER, "msg_01", &standard_event("x")).at(path)).await;
        assert_eq!(
            (answer.status, answer.body),
            (StatusCode::NOT_FOUND, json!({ "error": "not found" })),
            "{path}"
        );
    }
    assert_eq!(app.rows_everywhere().await, 0);
}
