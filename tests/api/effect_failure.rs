//! A failing effect leaves nothing but a FAILED archive row, answers 500 so
//! the provider retries, and the next delivery of the event applies it.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use webhook_inbox::event::Event;
use webhook_inbox::http::{AppState, Limits, app};
use webhook_inbox::inbox::{Effect, EffectError, RoutingTable, SqlType, Value, Writes};
use webhook_inbox::providers::Registry;
use webhook_inbox::providers::paddle;

use crate::support::app::send;
use crate::support::*;

#[tokio::test]
async fn a_failing_effect_is_archived_failed_and_the_corrected_redelivery_applies_once() {
    let app = TestApp::spawn().await;
    let mut broken = subscription_created("evt_01", "sub_01");
    broken["data"].as_object_mut().unwrap().remove("id");

    let answer = app.send(&paddle(&broken)).await;

    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        answer.body,
        json!({ "error": "event handler failed; the delivery is archived as FAILED", "event_id": "evt_01" })
    );
    let (status, error): (String, Option<String>) =
        sqlx::query_as("SELECT processing_status, error_message FROM webhook_events")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!((status.as_str(), error.as_deref()), ("FAILED", Some("subscription.created without data.id")));
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM subscriptions").await, 0);

    let answer = app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;
    assert_eq!(answer.body, json!({ "event_id": "evt_01", "status": "processed" }));
    let answer = app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;
    assert_eq!(answer.body, json!({ "event_id": "evt_01", "idempotent": true }));
    assert_eq!(app.archive_statuses().await, ["FAILED", "PROCESSED", "SKIPPED"]);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
}

#[tokio::test]
async fn an_effect_failing_after_a_partial_write_leaves_no_partial_effect() {
    let app = TestApp::spawn().await;
    // Make the second statement of the effect (the grant) fail after the
    // first (the subscription upsert) succeeded.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_grants() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN RAISE EXCEPTION 'ledger closed for maintenance'; END $$;
         CREATE TRIGGER refuse_grants BEFORE INSERT ON credit_grants
             FOR EACH ROW EXECUTE FUNCTION refuse_grants();",
    )
    .execute(app.pool())
    .await
    .unwrap();
    let delivery = paddle(&subscription_created("evt_01", "sub_01"));

    assert_eq!(app.send(&delivery).await.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(app.count("SELECT count(*) FROM subscriptions").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 0);
    let error: String =
        sqlx::query_scalar("SELECT error_message FROM webhook_events WHERE processing_status = 'FAILED'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert!(error.contains("ledger closed for maintenance"), "{error}");

    // The operator fixes the cause; the provider's retry applies the event.
    sqlx::raw_sql("DROP TRIGGER refuse_grants ON credit_grants").execute(app.pool()).await.unwrap();
    assert_eq!(app.send(&delivery).await.body, json!({ "event_id": "evt_01", "status": "processed" }));
    assert_eq!(app.count("SELECT count(*) FROM subscriptions").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
}

#[tokio::test]
async fn a_commit_that_fails_after_the_effect_succeeded_commits_nothing_and_archives_no_failure() {
    let app = TestApp::spawn().await;
    // The effect's writes succeed and the commit fails (a deferred
    // trigger): the delivery's one statement fails at its autocommit, and
    // the transaction it falls back to fails at COMMIT.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
         CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON credit_grants
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit();",
    )
    .execute(app.pool())
    .await
    .unwrap();
    let delivery = paddle(&subscription_created("evt_01", "sub_01"));

    assert_eq!(app.send(&delivery).await.status, StatusCode::INTERNAL_SERVER_ERROR);
    // Not even a FAILED row: the effect did not fail, the transaction did,
    // and nothing of it was committed.
    assert_eq!(app.count("SELECT count(*) FROM webhook_events").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM subscriptions").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 0);

    // The worker's connection is still good: the retry applies the event once.
    sqlx::raw_sql("DROP TRIGGER refuse_at_commit ON credit_grants").execute(app.pool()).await.unwrap();
    assert_eq!(app.send(&delivery).await.body, json!({ "event_id": "evt_01", "status": "processed" }));
    assert_eq!(app.archive_statuses().await, ["PROCESSED"]);
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
}

/// An effect whose SQL fails when it runs (no constraint, no trigger: its
/// own expression), after a write in the same statement.
struct FailsInItsStatement;

impl Effect for FailsInItsStatement {
    fn writes(&self) -> Writes {
        Writes {
            input: vec![("subscription_id", SqlType::Text)],
            ctes: vec![
                "written AS (INSERT INTO subscriptions (id, customer_id, status)
                     SELECT a.subscription_id, 'ctm_x', 'active' FROM applied a)"
                    .into(),
                "divided AS (SELECT 1 / (count(*) - 1) AS x FROM applied)".into(),
            ],
            notes: vec!["SELECT n, 'divided ' || (SELECT x FROM divided) FROM applied".into()],
        }
    }

    fn input<'e>(&self, event: &'e Event) -> Result<Vec<Value<'e>>, EffectError> {
        Ok(vec![format!("sub_of_{}", event.id).into()])
    }
}

#[tokio::test]
async fn an_effect_whose_statement_fails_is_archived_failed_with_nothing_of_it_written() {
    let db = TestDatabase::create().await;
    let providers =
        Registry::default().with(paddle::SPEC.verifier(&[PADDLE_SECRETS[0].into()], 300).unwrap());
    let limits = Limits { max_body_bytes: 65536, body_read_timeout: Duration::from_secs(5) };
    let routing = RoutingTable::default().on("paddle", "subscription.created", FailsInItsStatement);
    let router = app(AppState::new(db.pool().clone(), providers, routing, limits));

    let answer = send(&router, &paddle(&subscription_created("evt_01", "sub_01"))).await;

    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR, "{:?}", answer.body);
    let archive: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT processing_status, error_message FROM webhook_events")
            .fetch_all(db.pool())
            .await
            .unwrap();
    assert_eq!(archive.len(), 1);
    assert_eq!(archive[0].0, "FAILED");
    assert!(archive[0].1.as_deref().unwrap_or("").contains("division by zero"), "{archive:?}");
    for table in ["processed_webhook_events", "subscriptions"] {
        let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(rows, 0, "{table}");
    }
}
