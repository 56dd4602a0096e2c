//! `GET /metrics`: counters and histograms move as deliveries happen; the
//! database gauges show what an operator should look at.

use std::time::{Duration, Instant};

use axum::http::StatusCode;

use crate::support::*;

/// The value of the sample of `name` carrying every label of `labels`
/// (`provider="paddle"` and the like). Panics when there is no such sample:
/// a missing series is not a zero.
fn sample(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .find(|(series, _)| {
            let (metric, series_labels) = series.split_once('{').unwrap_or((series, ""));
            metric == name && labels.iter().all(|label| series_labels.contains(label))
        })
        .map(|(_, value)| value.parse().unwrap())
        .unwrap_or_else(|| panic!("no sample of {name} with {labels:?} in:\n{metrics}"))
}

fn deliveries(metrics: &str, provider: &str, outcome: &str) -> f64 {
    let (provider, outcome) = (format!("provider=\"{provider}\""), format!("outcome=\"{outcome}\""));
    sample(metrics, "webhook_deliveries_total", &[&provider, &outcome])
}

#[tokio::test]
async fn delivery_counters_move_by_provider_and_outcome() {
    let app = TestApp::spawn().await;
    let before = app.metrics().await;
    assert_eq!(deliveries(&before, "paddle", "processed"), 0.0);
    assert!(
        before.contains("webhook_deliveries_total{provider=\"paddle\",outcome=\"processed\"} 0"),
        "{before}"
    );

    let created = |n: &str| subscription_created(&format!("evt_{n}"), &format!("sub_{n}"));
    let mut paddle_requests = vec![
        paddle(&created("01")),
        paddle(&created("01")),
        paddle_signed(&created("03"), "pdl_wrong_secret_0123456789", now()),
        paddle_signed(&created("03"), PADDLE_SECRETS[0], now() - 3600),
        paddle_signed(&created("03"), PADDLE_SECRETS[0], now() + 3600),
        paddle(&created("03")).without("paddle-signature"),
        paddle(&created("03")).header("paddle-signature", "h1=no-timestamp"),
        paddle(&serde_json::json!({ "no": "event id" })),
    ];
    let mut broken = created("02");
    broken["data"].as_object_mut().unwrap().remove("id");
    paddle_requests.push(paddle(&broken));
    for delivery in &paddle_requests {
        app.send(delivery).await;
    }
    app.send(&clerk("msg_01", &user_created("user_01"))).await;
    let mut unknown = paddle(&created("04"));
    unknown.path = "/webhooks/nobody".into();
    assert_eq!(app.send(&unknown).await.status, StatusCode::NOT_FOUND);

    let after = app.metrics().await;
    assert!(!after.contains("nobody"), "a name nobody configured creates no series");
    assert_eq!(deliveries(&after, "paddle", "processed"), 1.0);
    assert_eq!(deliveries(&after, "paddle", "duplicate"), 1.0);
    assert_eq!(deliveries(&after, "paddle", "failed"), 1.0);
    assert_eq!(deliveries(&after, "paddle", "rejected"), 5.0);
    assert_eq!(deliveries(&after, "paddle", "invalid"), 1.0);
    assert_eq!(deliveries(&after, "clerk", "processed"), 1.0);
    let rejections = |reason: &str| {
        sample(&after, "webhook_rejections_total", &["provider=\"paddle\"", &format!("reason=\"{reason}\"")])
    };
    for reason in [
        "no_matching_signature",
        "timestamp_too_old",
        "timestamp_in_future",
        "missing_header",
        "malformed_header",
    ] {
        assert_eq!(rejections(reason), 1.0, "{reason}");
    }
    let answered = paddle_requests.len() as f64;
    assert_eq!(sample(&after, "webhook_delivery_duration_seconds_count", &["provider=\"paddle\""]), answered);
    assert_eq!(
        sample(&after, "webhook_delivery_duration_seconds_bucket", &["provider=\"paddle\"", "le=\"+Inf\""]),
        answered
    );
    // The lag is measured for processed events only; these happened in 2022-2024.
    assert_eq!(sample(&after, "webhook_provider_lag_seconds_count", &["provider=\"paddle\""]), 1.0);
    assert_eq!(
        sample(&after, "webhook_provider_lag_seconds_bucket", &["provider=\"paddle\"", "le=\"259200\""]),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_unavailable_and_error_answers_are_counted_as_such() {
    let app = TestApp::spawn_with(TestConfig {
        lock_timeout: Duration::from_millis(200),
        ..TestConfig::default().without("clerk")
    })
    .await;
    // busy: a first attempt of the same event holds its dedup row.
    let holder = crate::availability::hold_dedup_row(&app, "evt_01").await;
    assert_eq!(app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await.status, 503);
    drop(holder);
    // unavailable: the provider has no secret.
    assert_eq!(app.send(&clerk("msg_01", &user_created("user_01"))).await.status, 503);
    // error: the archive itself refuses the row, which is no fault of the event.
    app.refuse_inserts_into("webhook_events").await;
    let answer = app
        .send(&paddle(&serde_json::json!({ "event_id": "evt_02", "event_type": "customer.updated" })))
        .await;
    assert_eq!(
        (answer.status.as_u16(), answer.body),
        (500, serde_json::json!({ "error": "database error" }))
    );

    let metrics = app.metrics().await;
    assert_eq!(deliveries(&metrics, "paddle", "busy"), 1.0, "{metrics}");
    assert_eq!(deliveries(&metrics, "clerk", "unavailable"), 1.0, "{metrics}");
    assert_eq!(deliveries(&metrics, "paddle", "error"), 1.0, "{metrics}");
}

#[tokio::test]
async fn every_enabled_provider_has_a_silence_gauge_from_startup() {
    let app = TestApp::spawn().await;
    let started = Instant::now();
    // The gauge counts in wall-clock time: let some pass, so that a gauge
    // stuck at 0 cannot pass for one that counts.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let sent = Instant::now();
    app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;

    let before_scrape = started.elapsed().as_secs_f64();
    let metrics = app.metrics().await;
    let since_sent = sent.elapsed().as_secs_f64();

    let silence = |provider: &str| {
        sample(
            &metrics,
            "webhook_seconds_since_last_verified_delivery",
            &[&format!("provider=\"{provider}\"")],
        )
    };
    // Clerk sent nothing: silent since startup, before `started`.
    assert!(silence("clerk") >= before_scrape - 0.001, "{}\n{metrics}", silence("clerk"));
    // Paddle was verified since: counted from then, not from startup.
    assert!(silence("paddle") <= since_sent + 0.001, "{}\n{metrics}", silence("paddle"));
}

#[tokio::test]
async fn database_gauges_show_recent_failures_the_oldest_unapplied_one_and_the_pool() {
    let app = TestApp::spawn().await;
    let mut broken = subscription_created("evt_01", "sub_01");
    broken["data"].as_object_mut().unwrap().remove("id");
    app.send(&paddle(&broken)).await;
    app.send(&paddle(&broken)).await;
    app.refuse_inserts_into("credit_grants").await;
    app.send(&paddle(&subscription_created("evt_02", "sub_02"))).await;
    app.allow_inserts_into("credit_grants").await;
    app.send(&paddle(&subscription_created("evt_02", "sub_02"))).await;
    let ids = app.archive_ids().await;
    // evt_02 failed 3 hours ago and has been applied since; evt_01 failed
    // 2 hours ago and 2 days ago, and is still unapplied.
    sqlx::query("UPDATE webhook_events SET created_at = now() - interval '3 hours' WHERE id = $1")
        .bind(ids[2])
        .execute(app.pool())
        .await
        .unwrap();
    sqlx::query("UPDATE webhook_events SET created_at = now() - interval '2 hours' WHERE id = $1")
        .bind(ids[1])
        .execute(app.pool())
        .await
        .unwrap();
    app.age_rows(&ids[..1], 2).await;
    // Two welcome emails waiting, one of which is given up.
    app.send(&clerk("msg_01", &user_created("user_01"))).await;
    app.send(&clerk("msg_02", &user_created("user_02"))).await;
    sqlx::query("UPDATE outbox SET status = 'dead' WHERE user_id = 'user_02'")
        .execute(app.pool())
        .await
        .unwrap();

    let metrics = app.metrics().await;

    assert_eq!(sample(&metrics, "webhook_failed_deliveries_24h", &[]), 2.0, "{metrics}");
    let oldest = sample(&metrics, "webhook_oldest_unapplied_failure_age_seconds", &[]);
    assert!((2.0 * 86400.0..2.0 * 86400.0 + 600.0).contains(&oldest), "{oldest}");
    assert_eq!(sample(&metrics, "webhook_outbox_emails", &["state=\"pending\""]), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, "webhook_outbox_emails", &["state=\"dead\""]), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, "webhook_metrics_database_query_ok", &[]), 1.0);
    assert_eq!(sample(&metrics, "webhook_db_pool_max_connections", &[]), 8.0);
    // Delivery workers keep the connections they took: in use, not idle.
    let in_use = sample(&metrics, "webhook_db_pool_connections", &["state=\"in_use\""]);
    let idle = sample(&metrics, "webhook_db_pool_connections", &["state=\"idle\""]);
    assert!(in_use >= 1.0 && in_use + idle <= 8.0, "{metrics}");
    assert!(metrics.contains("# HELP webhook_deliveries_total "), "{metrics}");
}

#[tokio::test]
async fn a_metrics_token_keeps_metrics_private() {
    let app = TestApp::spawn_with(TestConfig {
        metrics_token: Some("metrics-token-0123456789"),
        ..TestConfig::default()
    })
    .await;
    let open = app.get("/metrics", None).await;
    assert_eq!(open.status, StatusCode::UNAUTHORIZED);
    let with_token = app.get("/metrics", Some("metrics-token-0123456789")).await;
    assert_eq!(with_token.status, StatusCode::OK);
}
