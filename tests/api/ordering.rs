//! Events delivered out of order: projections only move forward by the
//! provider's timestamp, an older event changes nothing (and is still
//! archived PROCESSED), and canceled and deleted are final.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::events::*;
use crate::support::*;

const T1: &str = "2024-04-01T00:00:00Z";
const T2: &str = "2024-04-10T00:00:00Z";
const T3: &str = "2024-04-20T00:00:00Z";

/// The subscription row: status, items, canceled_at set, last_event_id.
async fn subscription_row(app: &TestApp) -> (String, Value, bool, String) {
    sqlx::query_as("SELECT status, items, canceled_at IS NOT NULL, last_event_id FROM subscriptions")
        .fetch_one(app.pool())
        .await
        .unwrap()
}

/// The user row: email, first name, deleted.
async fn user_row(app: &TestApp) -> (Option<String>, Option<String>, bool) {
    sqlx::query_as("SELECT email, first_name, deleted_at IS NOT NULL FROM users")
        .fetch_one(app.pool())
        .await
        .unwrap()
}

async fn send_all(app: &TestApp, deliveries: &[Delivery]) {
    for delivery in deliveries {
        let answer = app.send(delivery).await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
        assert_eq!(answer.body["status"], "processed");
    }
    assert!(app.archive_statuses().await.iter().all(|status| status == "PROCESSED"));
}

#[tokio::test]
async fn an_update_before_its_created_creates_the_row_and_the_late_created_only_grants_its_credits() {
    let app = TestApp::spawn().await;
    let updated = with_items(subscription("evt_upd", "updated", "active", T2), "pri_pro", 1);
    let created = subscription("evt_new", "created", "trialing", T1);

    send_all(&app, &[paddle(&updated), paddle(&created)]).await;

    // The newer state stands; the late created granted the credits it carries.
    let (status, items, _, last_event) = subscription_row(&app).await;
    assert_eq!((status.as_str(), last_event.as_str()), ("active", "evt_upd"));
    assert_eq!(items, json!([{ "price_id": "pri_pro", "quantity": 1 }]));
    let grants: Vec<(String, i64, Option<String>)> =
        sqlx::query_as("SELECT cause, amount, user_id FROM credit_grants")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(grants, [("subscription:sub_01:initial".into(), 200, Some("user_42".into()))]);
}

#[tokio::test]
async fn a_late_older_update_does_not_resurrect_a_canceled_subscription() {
    let app = TestApp::spawn().await;
    send_all(
        &app,
        &[
            paddle(&subscription("evt_1", "created", "active", T1)),
            paddle(&subscription("evt_3", "canceled", "canceled", T3)),
            paddle(&subscription("evt_2", "updated", "active", T2)),
        ],
    )
    .await;

    let (status, _, canceled_at_set, last_event) = subscription_row(&app).await;
    assert_eq!((status.as_str(), canceled_at_set, last_event.as_str()), ("canceled", true, "evt_3"));
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE kind = 'downgrade'").await, 1);
}

#[tokio::test]
async fn canceled_is_final_and_its_downgrade_notice_is_enqueued_once_whichever_event_brings_it() {
    let app = TestApp::spawn().await;
    let later = "2024-04-25T00:00:00Z";
    send_all(
        &app,
        &[
            paddle(&subscription("evt_1", "created", "active", T1)),
            // Paddle sends an update with status canceled next to the canceled event.
            paddle(&subscription("evt_2", "updated", "canceled", T2)),
            paddle(&subscription("evt_3", "canceled", "canceled", T2)),
            // Even a newer event does not move it out of canceled.
            paddle(&with_items(subscription("evt_4", "updated", "active", later), "pri_pro", 3)),
        ],
    )
    .await;

    let (status, items, canceled_at_set, last_event) = subscription_row(&app).await;
    assert_eq!((status.as_str(), canceled_at_set, last_event.as_str()), ("canceled", true, "evt_4"));
    assert_eq!(items, json!([{ "price_id": "pri_pro", "quantity": 3 }]));
    let outbox: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT cause, event_id, user_id FROM outbox").fetch_all(app.pool()).await.unwrap();
    assert_eq!(outbox, [("subscription:sub_01:canceled".into(), "evt_2".into(), Some("user_42".into()))]);
}

#[tokio::test]
async fn the_projection_keeps_what_paddle_says_about_the_subscription() {
    let app = TestApp::spawn().await;
    let mut paused = subscription("evt_1", "paused", "paused", T2);
    paused["data"]["scheduled_change"] =
        json!({ "action": "resume", "effective_at": "2024-06-01T00:00:00Z", "resume_at": null });
    send_all(&app, &[paddle(&paused)]).await;

    let row: (String, String, Option<String>, Value, String, String, Value) = sqlx::query_as(
        "SELECT status, customer_id, user_id, items, current_period_starts_at::text, current_period_ends_at::text,
                scheduled_change
         FROM subscriptions",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(row.0, "paused");
    assert_eq!((row.1.as_str(), row.2.as_deref()), ("ctm_01", Some("user_42")));
    assert_eq!(row.3, json!([{ "price_id": "pri_basic", "quantity": 2 }]));
    assert_eq!((row.4.as_str(), row.5.as_str()), ("2024-04-01 00:00:00+00", "2024-05-01 00:00:00+00"));
    assert_eq!(row.6["action"], "resume");
    // Only subscription.created grants.
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 0);
}

#[tokio::test]
async fn a_user_update_before_its_created_keeps_the_newer_address_and_the_welcome_is_enqueued_once() {
    let app = TestApp::spawn().await;
    send_all(
        &app,
        &[
            clerk("msg_2", &user("updated", "user_01", "new@example.com", 2_000)),
            clerk("msg_1", &user("created", "user_01", "old@example.com", 1_000)),
            clerk("msg_1b", &user("created", "user_01", "old@example.com", 1_000)),
        ],
    )
    .await;

    assert_eq!(user_row(&app).await, (Some("new@example.com".into()), Some("Ada".into()), false));
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE cause = 'user:user_01:welcome'").await, 1);
}

#[tokio::test]
async fn a_late_update_does_not_bring_back_the_personal_fields_of_a_deleted_user() {
    let app = TestApp::spawn().await;
    send_all(
        &app,
        &[
            clerk("msg_1", &user("created", "user_01", "ada@example.com", 1_000)),
            clerk("msg_3", &user_deleted("user_01", 3_000)),
            clerk("msg_2", &user("updated", "user_01", "ada@example.com", 2_000)),
            // Even one stamped after the deletion.
            clerk("msg_4", &user("updated", "user_01", "ada@example.com", 4_000)),
        ],
    )
    .await;

    assert_eq!(user_row(&app).await, (None, None, true));
    let (status, error): (String, Option<String>) =
        sqlx::query_as("SELECT status, last_error FROM outbox").fetch_one(app.pool()).await.unwrap();
    assert_eq!((status.as_str(), error.as_deref()), ("dead", Some("user deleted")));
}

#[tokio::test]
async fn a_user_deleted_before_its_late_created_arrives_gets_no_row_data_and_no_welcome() {
    let app = TestApp::spawn().await;
    send_all(
        &app,
        &[
            clerk("msg_2", &user_deleted("user_01", 2_000)),
            clerk("msg_1", &user("created", "user_01", "ada@example.com", 1_000)),
        ],
    )
    .await;

    assert_eq!(user_row(&app).await, (None, None, true));
    assert_eq!(app.count("SELECT count(*) FROM outbox").await, 0);
}

/// `event` with neither the envelope's time nor the entity's `updated_at`.
fn untimed(mut event: Value) -> Value {
    event.as_object_mut().unwrap().remove("occurred_at");
    event["data"].as_object_mut().unwrap().remove("updated_at");
    event
}

/// The subscription's `last_event_at`.
async fn last_event_at(app: &TestApp) -> chrono::DateTime<chrono::Utc> {
    sqlx::query_scalar("SELECT last_event_at FROM subscriptions").fetch_one(app.pool()).await.unwrap()
}

#[tokio::test]
async fn an_event_without_any_timestamp_is_applied_ordered_by_when_it_was_received() {
    let app = TestApp::spawn().await;
    let before: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT now()").fetch_one(app.pool()).await.unwrap();

    let answer = app.send(&paddle(&untimed(subscription("evt_1", "updated", "active", T1)))).await;

    assert_eq!(answer.body, json!({ "event_id": "evt_1", "status": "processed" }));
    let archived: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT created_at FROM webhook_events").fetch_one(app.pool()).await.unwrap();
    let at = last_event_at(&app).await;
    assert!(before <= at && at <= archived, "{before} <= {at} <= {archived}");
}

#[tokio::test]
async fn an_untimed_event_that_failed_is_reprocessed_ordered_by_its_first_arrival() {
    let app = TestApp::spawn().await;
    send_all(&app, &[paddle(&subscription("evt_1", "created", "active", T1))]).await;
    // It failed for another reason (before this fix, for having no time).
    app.refuse_inserts_into("subscriptions").await;
    let answer = app.send(&paddle(&untimed(subscription("evt_2", "updated", "past_due", T1)))).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    app.allow_inserts_into("subscriptions").await;
    let failed = app.archive_ids().await[1];
    sqlx::query("UPDATE webhook_events SET created_at = '2024-04-05T00:00:00Z' WHERE id = $1")
        .bind(failed)
        .execute(app.pool())
        .await
        .unwrap();

    let out = cli(&app.db, &["events", "reprocess", &failed.to_string()]).await.ok();

    assert!(out.ends_with("PROCESSED\n"), "{out}");
    assert_eq!(subscription_row(&app).await.0, "past_due");
    assert_eq!(
        last_event_at(&app).await,
        "2024-04-05T00:00:00Z".parse::<chrono::DateTime<chrono::Utc>>().unwrap()
    );
    // Events that happened later still move it forward.
    let answer = app.send(&paddle(&subscription("evt_3", "updated", "active", T2))).await;
    assert_eq!(answer.body["status"], "processed");
    assert_eq!(subscription_row(&app).await.0, "active");
}
