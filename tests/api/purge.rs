//! `webhook-inbox purge` and retention in the background: old archive rows
//! go, a day's partition at a time (FAILED rows, kept longer, in batches);
//! the dedup table stays, so replays stay no-ops.

use std::time::Duration;

use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;
use webhook_inbox::db::partitions::ARCHIVE;
use webhook_inbox::operations::purge::{Purged, purge};
use webhook_inbox::operations::{Age, RetentionPolicy, maintenance};

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
        "would delete 2 archive row(s): 1 processed or skipped (in 1 day partition(s)), 1 failed; \
         the dedup table is untouched\n\
         would delete 0 forwarding attempt(s), 0 sent job(s), 0 dead job(s); pending jobs are untouched\n"
    );
    assert_eq!(app.archive_ids().await, id, "a dry run deletes nothing");

    let out = cli(&app.db, &args).await.ok();
    assert_eq!(
        out,
        "deleted 2 archive row(s): 1 processed or skipped (in 1 day partition(s)), 1 failed; \
         the dedup table is untouched\n\
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

/// Inserts `rows` archive rows with `status` archived `days` ago (and,
/// unless they are FAILED, that day's partition). In one transaction:
/// a retention running in the background would otherwise drop the day's
/// new, empty partition before the rows are in.
async fn archive_rows(app: &TestApp, rows: i64, days: i32, status: &str) {
    let mut transaction = app.pool().begin().await.unwrap();
    if status != "FAILED" {
        make_days_back(&mut transaction, days).await;
    }
    sqlx::query(
        "INSERT INTO webhook_events (provider, event_id, event_type, payload, signature, processing_status, created_at)
         SELECT 'paddle', 'evt_' || n, 'x', '{}', 's', $3, now() - make_interval(days => $2)
         FROM generate_series(1, $1) AS n",
    )
    .bind(rows)
    .bind(days)
    .bind(status)
    .execute(&mut *transaction)
    .await
    .unwrap();
    transaction.commit().await.unwrap();
}

/// FAILED archive rows read so far by scans (sequential, and heap fetches
/// of index scans), once the statistics of `deleted` deletions are in: a
/// session reports its statistics at the latest when it ends.
async fn failed_rows_read_once_deleted(app: &TestApp, deleted: i64) -> i64 {
    for _ in 0..1000 {
        let (read, counted): (i64, i64) = sqlx::query_as(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0), n_tup_del
             FROM pg_stat_user_tables WHERE relname = 'webhook_events_failed'",
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

/// The archive's day partitions, oldest first.
async fn days(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'webhook_events_daily'::regclass ORDER BY 1",
    )
    .fetch_all(app.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn a_purge_drops_the_old_days_whole_and_reads_only_the_failed_rows_it_deletes() {
    let app = TestApp::spawn().await;
    // 10 processed rows and 5 FAILED past their age, 5 FAILED rows kept
    // longer, then 20 000 young rows of each.
    archive_rows(&app, 10, 100, "PROCESSED").await;
    archive_rows(&app, 5, 200, "FAILED").await;
    archive_rows(&app, 5, 100, "FAILED").await;
    archive_rows(&app, 20_000, 1, "SKIPPED").await;
    archive_rows(&app, 20_000, 1, "FAILED").await;
    sqlx::query("ANALYZE webhook_events").execute(app.pool()).await.unwrap();
    let before = days(&app).await;
    let policy = RetentionPolicy::new(Age::days(90), Some(Age::days(180))).unwrap();

    // On a session of its own, which reports its statistics as it ends.
    let pool = PgPoolOptions::new().max_connections(1).connect_with(app.db.connect_options()).await.unwrap();
    let purged = purge(&pool, &policy, &CancellationToken::new()).await.unwrap();
    pool.close().await;

    assert_eq!(purged, Purged { processed_or_skipped: 10, days: 1, failed: 5 });
    let after = days(&app).await;
    assert_eq!(after.len(), before.len() - 1, "the day of 100 days ago went: {before:?} -> {after:?}");
    let read = failed_rows_read_once_deleted(&app, 5).await;
    assert!(read < 100, "the purge read {read} FAILED rows to delete 5 of 20 010");
    assert_eq!(app.count("SELECT count(*) FROM webhook_events").await, 40_005);
    // No row of the day partitions was deleted one by one: nothing for vacuum.
    let deleted: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(n_tup_del), 0)::int8 FROM pg_stat_user_tables WHERE relname LIKE 'webhook_events_daily_p%'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(deleted, 0);
}

#[tokio::test]
async fn failed_rows_outlive_their_day_and_go_at_their_own_age() {
    let app = TestApp::spawn().await;
    // On each of 30 days, 100 to 129 days ago: a processed row and two
    // FAILED ones of one event.
    for days in 100..130 {
        archive_rows(&app, 1, days, "PROCESSED").await;
        archive_rows(&app, 2, days, "FAILED").await;
    }
    let failed_before: Vec<(i64, String)> = sqlx::query_as(
        "SELECT id, created_at::text FROM webhook_events WHERE processing_status = 'FAILED' ORDER BY id",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    // Meanwhile, deliveries whose effects fail are archived FAILED.
    let mut broken = subscription_created("evt_broken", "sub_broken");
    broken["data"].as_object_mut().unwrap().remove("id");
    let delivery = paddle(&broken);
    let sends = futures_util::future::join_all((0..10).map(|_| app.send(&delivery)));
    let stop = CancellationToken::new();
    let policy = RetentionPolicy::new(Age::days(90), Some(Age::days(120))).unwrap();
    let (answers, purged) = tokio::join!(sends, purge(app.pool(), &policy, &stop));
    let purged = purged.unwrap();

    assert!(answers.iter().all(|answer| answer.status == 500), "each delivery failed");
    assert_eq!(purged.processed_or_skipped, 30, "every old processed row went with its day");
    assert_eq!(purged.failed, 20, "the FAILED rows older than 120 days, received 120 to 129 days ago");
    let failed_after: Vec<(i64, String)> = sqlx::query_as(
        "SELECT id, created_at::text FROM webhook_events
         WHERE processing_status = 'FAILED' AND created_at < now() - interval '1 day' ORDER BY id",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    // Every FAILED row younger than 120 days is still there, as it was.
    let younger: Vec<(i64, String)> = failed_before.into_iter().take(40).collect();
    assert_eq!(failed_after, younger);
    assert_eq!(app.count("SELECT count(*) FROM webhook_events WHERE event_id = 'evt_broken'").await, 10);
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events WHERE processing_status = 'PROCESSED'").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_purges_at_once_drop_each_day_once_the_second_refused_or_finding_nothing() {
    let app = TestApp::spawn().await;
    for days in 100..105 {
        old_rows(&app, 100, days).await;
    }
    let args = ["purge", "--older-than", "90d"];

    // Two operators purge at the same moment.
    let (first, second) = tokio::join!(cli(&app.db, &args), cli(&app.db, &args));
    let mut deleted = 0;
    for run in [first, second] {
        match run.error {
            None => {
                let line = run.stdout.lines().next().unwrap().to_string();
                deleted += line.split(' ').nth(1).unwrap().parse::<u64>().unwrap();
            }
            Some(error) => assert_eq!(
                error,
                "another process is purging the archive right now (serve's hourly upkeep): try again shortly"
            ),
        }
    }

    assert_eq!(deleted, 500, "each old row deleted once");
    assert_eq!(app.count("SELECT count(*) FROM webhook_events").await, 0);
}

#[tokio::test]
async fn a_drop_cut_short_is_finished_by_the_next_purge() {
    let app = TestApp::spawn().await;
    old_rows(&app, 3, 100).await;
    old_rows(&app, 4, 101).await;
    let policy = RetentionPolicy::new(Age::days(90), None).unwrap();
    let [oldest, older] =
        <[_; 2]>::try_from(ARCHIVE.ended_before(app.pool(), 90.0 * 86_400.0).await.unwrap()).unwrap();
    // A concurrent detach of the one interrupted after its first step (by
    // a statement timeout while it waits for a reader), the other detached
    // but not dropped: what a process killed mid-purge leaves.
    let mut reader = app.pool().begin().await.unwrap();
    sqlx::query("SELECT count(*) FROM webhook_events").execute(&mut *reader).await.unwrap();
    let mut conn = app.pool().acquire().await.unwrap();
    sqlx::query("SET statement_timeout = '300ms'").execute(&mut *conn).await.unwrap();
    let detach = format!("ALTER TABLE webhook_events_daily DETACH PARTITION {} CONCURRENTLY", oldest.name);
    let cut_short = sqlx::raw_sql(sqlx::AssertSqlSafe(detach)).execute(&mut *conn).await;
    assert!(cut_short.is_err(), "the detach waits for the reader");
    sqlx::query("RESET statement_timeout").execute(&mut *conn).await.unwrap();
    reader.commit().await.unwrap();
    let detach = format!("ALTER TABLE webhook_events_daily DETACH PARTITION {}", older.name);
    sqlx::raw_sql(sqlx::AssertSqlSafe(detach)).execute(&mut *conn).await.unwrap();
    drop(conn);
    let left = ARCHIVE.ended_before(app.pool(), 90.0 * 86_400.0).await.unwrap();
    assert!(left[0].attached && left[0].detach_pending && !left[1].attached, "{left:?}");

    let purged = purge(app.pool(), &policy, &CancellationToken::new()).await.unwrap();

    assert_eq!((purged.days, purged.processed_or_skipped), (2, 7));
    assert_eq!(ARCHIVE.ended_before(app.pool(), 90.0 * 86_400.0).await.unwrap(), []);
    assert_eq!(app.count("SELECT count(*) FROM webhook_events").await, 0);
}

#[tokio::test]
async fn retention_purges_in_the_background_until_stopped() {
    let app = TestApp::spawn().await;
    old_rows(&app, 5, 100).await;
    let policy = RetentionPolicy::new(Age::days(90), Some(Age::days(180))).unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(maintenance::run(
        app.pool().clone(),
        Some(policy),
        Duration::from_millis(20),
        stop.clone(),
    ));

    until_the_archive_is_empty(&app).await;
    // Rows that age later are purged by a later run. Of another day: the
    // first day's partition may still be on its way out (a detach under
    // way), and rows of its day would then find no partition.
    old_rows(&app, 3, 101).await;
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
