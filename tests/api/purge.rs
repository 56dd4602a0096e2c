//! `webhook-inbox purge` and retention in the background: old archive rows
//! go, in batches; the dedup table stays, so replays stay no-ops.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;
use webhook_inbox::operations::purge::{BATCH_SIZE, Purged, purge};
use webhook_inbox::operations::{Age, RetentionPolicy, retention};

use crate::support::*;

/// Archive ids: processed 100 days ago, FAILED 100 days ago, FAILED 200
/// days ago, skipped just now.
async fn aged_archive(app: &TestApp) -> Vec<i64> {
    app.send(&paddle(&subscription_created("evt_old", "sub_old"))).await;
    let mut broken = subscription_created("evt_broken", "sub_broken");
    broken["data"].as_object_mut().unwrap().remove("id");
    app.send(&paddle(&broken)).await;
    app.send(&paddle(&broken)).await;
    app.send(&paddle(&subscription_created("evt_old", "sub_old"))).await;
    let id = app.archive_ids().await;
    app.age_rows(&id[..2], 100).await;
    app.age_rows(&id[2..3], 200).await;
    id
}

#[tokio::test]
async fn purge_deletes_old_rows_keeps_young_failed_ones_and_never_touches_the_dedup_table() {
    let app = TestApp::spawn().await;
    let id = aged_archive(&app).await;
    let args = ["purge", "--older-than", "90d", "--failed-older-than", "180d"];

    let dry = cli(&app.db, &[&args[..], &["--dry-run"]].concat()).await.ok();
    assert_eq!(
        dry,
        "would delete 2 archive row(s): 1 processed or skipped, 1 failed; the dedup table is untouched\n\
         would delete 0 forwarding attempt(s), 0 sent job(s), 0 dead job(s); pending jobs are untouched\n"
    );
    assert_eq!(app.archive_ids().await, id, "a dry run deletes nothing");

    let out = cli(&app.db, &args).await.ok();
    assert_eq!(
        out,
        "deleted 2 archive row(s): 1 processed or skipped, 1 failed; the dedup table is untouched\n\
         deleted 0 forwarding attempt(s), 0 sent job(s), 0 dead job(s); pending jobs are untouched\n"
    );
    assert_eq!(app.archive_ids().await, [id[1], id[3]], "the young FAILED row and the new row stay");
    assert_eq!(app.count("SELECT count(*) FROM processed_webhook_events").await, 1);

    // The provider replays the purged, processed event: still a no-op.
    let answer = app.send(&paddle(&subscription_created("evt_old", "sub_old"))).await;
    assert_eq!(answer.body, json!({ "event_id": "evt_old", "idempotent": true }));
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 1);
}

#[tokio::test]
async fn failed_rows_are_kept_forever_with_zero_and_never_shorter_than_the_others() {
    let app = TestApp::spawn().await;
    let id = aged_archive(&app).await;

    let shorter = cli(&app.db, &["purge", "--older-than", "90d", "--failed-older-than", "30d"]).await;
    assert_eq!(
        shorter.error.as_deref(),
        Some("FAILED rows must be kept at least as long as the others (30d is shorter than 90d)")
    );
    assert_eq!(app.archive_ids().await, id);

    cli(&app.db, &["purge", "--older-than", "90d", "--failed-older-than", "0"]).await.ok();
    assert_eq!(app.archive_ids().await, [id[1], id[2], id[3]]);
}

/// Inserts `rows` PROCESSED archive rows archived `days` ago.
async fn old_rows(app: &TestApp, rows: i64, days: i32) {
    archive_rows(app, rows, days, "PROCESSED").await;
}

/// Inserts `rows` archive rows with `status` archived `days` ago.
async fn archive_rows(app: &TestApp, rows: i64, days: i32, status: &str) {
    sqlx::query(
        "INSERT INTO webhook_events (provider, event_id, event_type, payload, signature, processing_status, created_at)
         SELECT 'paddle', 'evt_' || n, 'x', '{}', 's', $3, now() - make_interval(days => $2)
         FROM generate_series(1, $1) AS n",
    )
    .bind(rows)
    .bind(days)
    .bind(status)
    .execute(app.pool())
    .await
    .unwrap();
}

/// Archive rows read so far by scans (sequential, and heap fetches of
/// index scans), once the statistics of `deleted` deletions are in: a
/// session reports its statistics at the latest when it ends.
async fn archive_rows_read_once_deleted(app: &TestApp, deleted: i64) -> i64 {
    for _ in 0..1000 {
        let (read, counted): (i64, i64) = sqlx::query_as(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0), n_tup_del
             FROM pg_stat_user_tables WHERE relname = 'webhook_events'",
        )
        .fetch_one(app.pool())
        .await
        .unwrap();
        if counted >= deleted {
            return read;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the statistics never counted {deleted} deletions");
}

#[tokio::test]
async fn a_purge_reads_the_rows_it_deletes_not_the_whole_archive() {
    let app = TestApp::spawn().await;
    // Oldest first, as the archive fills: 10 processed and 5 FAILED rows
    // past their age, 5 FAILED rows kept longer, then 20 000 young rows.
    archive_rows(&app, 10, 100, "PROCESSED").await;
    archive_rows(&app, 5, 200, "FAILED").await;
    archive_rows(&app, 5, 100, "FAILED").await;
    archive_rows(&app, 20_000, 1, "SKIPPED").await;
    sqlx::query("ANALYZE webhook_events").execute(app.pool()).await.unwrap();
    let policy = RetentionPolicy::new(Age::days(90), Some(Age::days(180))).unwrap();

    // On a session of its own, which reports its statistics as it ends.
    let pool = PgPoolOptions::new().max_connections(1).connect_with(app.db.connect_options()).await.unwrap();
    let purged = purge(&pool, &policy, &CancellationToken::new()).await.unwrap();
    pool.close().await;

    assert_eq!(purged, Purged { processed_or_skipped: 10, failed: 5 });
    let read = archive_rows_read_once_deleted(&app, 15).await;
    assert!(read < 100, "the purge read {read} archive rows to delete 15 of 20 020");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_purges_in_batches_delete_each_row_once_and_leave_none() {
    let app = TestApp::spawn().await;
    let rows = 3 * BATCH_SIZE + 17;
    old_rows(&app, rows, 100).await;
    let policy = RetentionPolicy::new(Age::days(90), None).unwrap();

    // Two replicas start their purge at the same moment.
    let barrier = Arc::new(Barrier::new(2));
    let purges = (0..2).map(|_| {
        let (pool, barrier) = (app.pool().clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            purge(&pool, &policy, &CancellationToken::new()).await.unwrap()
        })
    });
    let mut deleted = 0;
    for purge in purges.collect::<Vec<_>>() {
        deleted += purge.await.unwrap().processed_or_skipped;
    }

    assert_eq!(deleted, rows as u64);
    assert_eq!(app.count("SELECT count(*) FROM webhook_events").await, 0);
}

#[tokio::test]
async fn retention_purges_in_the_background_until_stopped() {
    let app = TestApp::spawn().await;
    old_rows(&app, 5, 100).await;
    let policy = RetentionPolicy::new(Age::days(90), Some(Age::days(180))).unwrap();
    let stop = CancellationToken::new();
    let task =
        tokio::spawn(retention::run(app.pool().clone(), policy, Duration::from_millis(20), stop.clone()));

    until_the_archive_is_empty(&app).await;
    // Rows that age later are purged by a later run.
    old_rows(&app, 3, 100).await;
    until_the_archive_is_empty(&app).await;

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), task).await.expect("stops when cancelled").unwrap();
}

async fn until_the_archive_is_empty(app: &TestApp) {
    let empty = async {
        while app.count("SELECT count(*) FROM webhook_events").await > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), empty).await.expect("retention purged the old rows");
}
