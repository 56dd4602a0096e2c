//! The partitioned archive (migration 20261202000100): an unpartitioned
//! archive converted in place while deliveries go on, and the operators'
//! reads confined to the days they ask for. In-process router; the
//! PostgreSQL is real.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;
use webhook_inbox::db::{MIGRATOR, conversion};
use webhook_inbox::operations::filter::Status;
use webhook_inbox::operations::page::{self, Cursor};
use webhook_inbox::operations::query::Received;
use webhook_inbox::operations::{EventFilter, Since};

use crate::support::*;

/// The last migration before the archive was partitioned.
const UNPARTITIONED: i64 = 20261201180000;

/// Old archive rows to convert: `CONVERSION_ROWS`, or 20 000
/// (`scripts/convert-archive` runs it with a million).
fn conversion_rows() -> i64 {
    std::env::var("CONVERSION_ROWS").ok().and_then(|rows| rows.parse().ok()).unwrap_or(20_000)
}

/// Fills the unpartitioned archive: `rows` deliveries over the last 30
/// days (one in ten FAILED, one in three of the rest SKIPPED), each
/// applied event with its dedup row, and a forwarding attempt per ten rows.
async fn fill_unpartitioned(pool: &PgPool, rows: i64) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO webhook_events
             (provider, event_id, event_type, payload, signature, processing_status, error_message,
              created_at, processed_at)
         SELECT 'paddle', 'evt_old_' || n, 'transaction.updated',
                jsonb_build_object('event_id', 'evt_old_' || n, 'event_type', 'transaction.updated',
                                   'data', jsonb_build_object('id', 'txn_' || n, 'note', repeat('x', 400))),
                'ts=1;h1=00',
                CASE WHEN n % 10 = 0 THEN 'FAILED' WHEN n % 3 = 0 THEN 'SKIPPED' ELSE 'PROCESSED' END,
                CASE WHEN n % 10 = 0 THEN 'broken' END,
                now() - make_interval(secs => (30 * 86400)::float8 * n / {rows}),
                now() - make_interval(secs => (30 * 86400)::float8 * n / {rows})
         FROM generate_series(1, {rows}) AS n;
         INSERT INTO processed_webhook_events (provider, event_id, event_type)
         SELECT 'paddle', 'evt_old_' || n, 'transaction.updated' FROM generate_series(1, {rows}) AS n
         WHERE n % 10 <> 0;
         INSERT INTO destination_attempts
             (attempted_at, job_id, attempt, destination, duration_ms, status_code, response_body)
         SELECT now() - make_interval(secs => (30 * 86400)::float8 * n / {rows}), n, 1, 'app', 1.5, 200, 'ok'
         FROM generate_series(1, {rows} / 10) AS n;
         ANALYZE webhook_events; ANALYZE destination_attempts;"
    )))
    .execute(pool)
    .await
    .unwrap();
}

/// What must survive the conversion unchanged: every archive row up to
/// id `last` (payload included) and every attempt, as one digest each,
/// with the counts.
async fn fingerprint(pool: &PgPool, last: i64) -> (i64, String, i64, String) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM webhook_events WHERE id <= $1),
                (SELECT md5(string_agg(concat_ws('|', id, event_id, processing_status, error_message, created_at,
                                                 processed_at, signature, source, payload::text), ',' ORDER BY id))
                 FROM webhook_events WHERE id <= $1),
                (SELECT count(*) FROM destination_attempts),
                (SELECT md5(string_agg(concat_ws('|', job_id, attempt, attempted_at, status_code), ','
                                       ORDER BY job_id, attempt))
                 FROM destination_attempts)",
    )
    .bind(last)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Deliveries sent while `stop` is unset, from `clients` at once: new
/// `subscription.created` events, and every fourth a replay of an old
/// event. Each answer's event, status and latency.
async fn deliveries(app: &TestApp, clients: usize, stop: &AtomicBool) -> Vec<(String, StatusCode, Duration)> {
    let client = |c: usize| async move {
        let mut answers = Vec::new();
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let (event, delivery) = match n % 4 {
                0 => {
                    let event = format!("evt_old_{}", c * 1000 + n);
                    let body = json!({ "event_id": event, "event_type": "transaction.updated",
                                       "occurred_at": "2026-11-01T00:00:00Z", "data": { "id": "txn" } });
                    (event, paddle(&body))
                }
                _ => {
                    let event = format!("evt_live_{c}_{n}");
                    let delivery = paddle(&subscription_created(&event, &format!("sub_live_{c}_{n}")));
                    (event, delivery)
                }
            };
            let started = Instant::now();
            let answer = app.send(&delivery).await;
            answers.push((event, answer.status, started.elapsed()));
        }
        answers
    };
    futures_util::future::join_all((0..clients).map(client)).await.into_iter().flatten().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpartitioned_archive_is_converted_in_place_while_deliveries_go_on() {
    let rows = conversion_rows();
    let db = TestDatabase::create_unmigrated().await;
    MIGRATOR.run_to(UNPARTITIONED, db.pool()).await.unwrap();
    let filled = Instant::now();
    fill_unpartitioned(db.pool(), rows).await;
    let filled = filled.elapsed();
    let before = fingerprint(db.pool(), rows).await;
    assert_eq!((before.0, before.2), (rows, rows / 10));
    // The app serves on the old schema, as the replicas of the previous
    // version do while the new one migrates.
    let app = TestApp::spawn_on(db, TestConfig::default()).await;
    let stop = AtomicBool::new(false);

    let (answers, (swap, convert, moved)) = tokio::join!(deliveries(&app, 4, &stop), async {
        until_answered(&app, 20).await;
        let started = Instant::now();
        MIGRATOR.run(app.pool()).await.unwrap();
        let swap = started.elapsed();
        let started = Instant::now();
        let moved = conversion::convert(app.pool(), &CancellationToken::new()).await.unwrap();
        let convert = started.elapsed();
        until_answered(&app, 40).await;
        stop.store(true, Ordering::Relaxed);
        (swap, convert, moved)
    });

    // Every delivery was answered, the new ones processed once each, the
    // replays of old events idempotent.
    let refused: Vec<_> = answers.iter().filter(|(_, status, _)| *status != StatusCode::OK).collect();
    assert_eq!(refused, Vec::<&(String, StatusCode, Duration)>::new(), "every delivery answered 200");
    let live: BTreeSet<&str> =
        answers.iter().map(|(event, _, _)| event.as_str()).filter(|e| e.starts_with("evt_live_")).collect();
    assert_eq!(
        app.count("SELECT count(*) FROM credit_grants").await,
        live.len() as i64,
        "one grant per event"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_events WHERE event_id LIKE 'evt_live_%'").await,
        live.len() as i64
    );
    // Every old row and attempt moved (with the deliveries archived before
    // the swap), unchanged, ids included: one row per answer besides them.
    // The old tables are gone.
    assert!(moved.archive_rows >= rows as u64, "{moved:?}");
    assert_eq!(moved.attempts, (rows / 10) as u64);
    assert_eq!(fingerprint(app.pool(), rows).await, before);
    assert_eq!(app.count("SELECT count(*) FROM webhook_events").await, rows + answers.len() as i64);
    assert_eq!(app.count("SELECT count(*) - count(DISTINCT id) FROM webhook_events").await, 0);
    assert_eq!(
        app.count(
            "SELECT count(*) FROM pg_class WHERE relname IN
                 ('webhook_events_unpartitioned', 'destination_attempts_unpartitioned')"
        )
        .await,
        0
    );
    assert!(!conversion::pending(app.pool()).await.unwrap());
    let slowest = answers.iter().map(|(_, _, latency)| *latency).max().unwrap_or_default();
    println!(
        "CONVERSION\t{rows}\t{}\t{:.1}\t{}\t{:.3}\t{:.1}\t{:.0}\t{}\t{}",
        rows / 10,
        filled.as_secs_f64(),
        answers.len(),
        swap.as_secs_f64(),
        convert.as_secs_f64(),
        (rows + rows / 10) as f64 / convert.as_secs_f64(),
        slowest.as_millis(),
        live.len()
    );
}

/// Waits until `count` deliveries of live events are archived.
async fn until_answered(app: &TestApp, count: i64) {
    let started =
        app.count("SELECT count(*) FROM processed_webhook_events WHERE event_id LIKE 'evt_live_%'").await;
    for _ in 0..6000 {
        let now =
            app.count("SELECT count(*) FROM processed_webhook_events WHERE event_id LIKE 'evt_live_%'").await;
        if now >= started + count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("deliveries stalled");
}

/// Scans of every table of the archive, as PostgreSQL counts them:
/// (sequential, index) by table name.
async fn scans(pool: &PgPool) -> BTreeMap<String, (i64, i64)> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, coalesce(seq_scan, 0), coalesce(idx_scan, 0) FROM pg_stat_user_tables
         WHERE relname LIKE 'webhook_events_%'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter().map(|(name, seq, idx)| (name, (seq, idx))).collect()
}

/// The archive's tables `read` scans, through one session of its own
/// (which reports its statistics when it ends), and whether each scan was
/// by index: waits for the statistics to show `expected`'s scans.
async fn tables_read<F, Fut>(app: &TestApp, expected: &str, read: F) -> BTreeMap<String, (i64, i64)>
where
    F: FnOnce(PgPool) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let before = scans(app.pool()).await;
    let pool = PgPoolOptions::new().max_connections(1).connect_with(app.db.connect_options()).await.unwrap();
    read(pool.clone()).await;
    pool.close().await;
    for _ in 0..1000 {
        let after = scans(app.pool()).await;
        if after.get(expected) != before.get(expected) {
            return after
                .into_iter()
                .filter_map(|(name, (seq, idx))| {
                    let (seq_before, idx_before) = before.get(&name).copied().unwrap_or_default();
                    (seq > seq_before || idx > idx_before)
                        .then_some((name, (seq - seq_before, idx - idx_before)))
                })
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the statistics never showed a scan of {expected}");
}

#[tokio::test]
async fn operators_reads_touch_only_the_days_they_show_and_read_them_by_index() {
    let app = TestApp::spawn().await;
    let today: DateTime<Utc> =
        sqlx::query_scalar("SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    // 5000 rows on each of the three days before today and on today so
    // far, 1000 FAILED rows among them.
    for days in 1..=3 {
        make_days_back(&mut app.pool().acquire().await.unwrap(), days).await;
    }
    sqlx::query(
        "INSERT INTO webhook_events (provider, event_id, event_type, payload, signature, processing_status, created_at)
         SELECT 'paddle', 'evt_' || d || '_' || n, CASE WHEN n % 100 = 0 THEN 'rare.type' ELSE 'common.type' END,
                '{}', 's', CASE WHEN n % 20 = 0 THEN 'FAILED' ELSE 'PROCESSED' END,
                CASE WHEN d = 0 THEN $1 + (now() - $1) * n / 5001
                     ELSE $1 - make_interval(days => d) + make_interval(secs => 86400.0 * n / 5001) END
         FROM generate_series(0, 3) AS d, generate_series(1, 5000) AS n",
    )
    .bind(today)
    .execute(app.pool())
    .await
    .unwrap();
    sqlx::query("ANALYZE webhook_events").execute(app.pool()).await.unwrap();
    let day =
        |days: i64| format!("webhook_events_daily_p{}", (today - TimeDelta::days(days)).format("%Y%m%d"));
    let since = |at: DateTime<Utc>| EventFilter { since: Some(Since(at)), ..EventFilter::default() };

    // The newest page of today.
    let read = tables_read(&app, &day(0), move |pool: PgPool| async move {
        page::page(&pool, &since(today), 50, None).await.unwrap();
    })
    .await;
    for older in [day(1), day(2), day(3)] {
        assert!(!read.contains_key(&older), "{older} read: {read:?}");
    }
    assert!(read.contains_key("webhook_events_failed"), "{read:?}");
    assert!(read.values().all(|(seq, _)| *seq == 0), "by index: {read:?}");

    // A later page, from a row two days back: the days after it are not read.
    let cursor = Cursor::after(Received { created_at: today - TimeDelta::hours(36), id: i64::MAX });
    let read = tables_read(&app, &day(2), move |pool: PgPool| async move {
        page::page(&pool, &EventFilter::default(), 50, Some(cursor)).await.unwrap();
    })
    .await;
    for newer in [day(0), day(1)] {
        assert!(!read.contains_key(&newer), "{newer} read: {read:?}");
    }
    assert!(read.values().all(|(seq, _)| *seq == 0), "by index: {read:?}");

    // FAILED rows: their own partition only.
    let read = tables_read(&app, "webhook_events_failed", move |pool: PgPool| async move {
        let failed = EventFilter { status: Some(Status::Failed), ..EventFilter::default() };
        page::page(&pool, &failed, 50, None).await.unwrap();
    })
    .await;
    assert_eq!(names(&read), ["webhook_events_failed"].into(), "{read:?}");

    // A rare type over the last two days.
    let read = tables_read(&app, &day(1), move |pool: PgPool| async move {
        let filter: EventFilter =
            serde_json::from_value(json!({ "type": "rare.type", "since": "2d" })).unwrap();
        page::page(&pool, &filter, 50, None).await.unwrap();
    })
    .await;
    assert!(!read.contains_key(&day(3)), "{read:?}");
    assert!(read.values().all(|(seq, _)| *seq == 0), "by index: {read:?}");
}

fn names(read: &BTreeMap<String, (i64, i64)>) -> BTreeSet<&str> {
    read.keys().map(String::as_str).collect()
}

#[tokio::test]
async fn serve_makes_the_days_ahead_and_metrics_say_how_many() {
    let app = TestApp::spawn().await;
    // A database left alone for weeks: no partition from yesterday on.
    sqlx::raw_sql(
        "DO $$ DECLARE p text; BEGIN
             FOR p IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                      WHERE i.inhparent IN ('webhook_events_daily'::regclass, 'destination_attempts'::regclass)
             LOOP EXECUTE format('DROP TABLE %I', p); END LOOP;
         END $$",
    )
    .execute(app.pool())
    .await
    .unwrap();
    assert!(app.metrics().await.contains("webhook_archive_partition_days_ahead -1\n"));
    let refused = app.send(&paddle(&subscription_created("evt_1", "sub_1"))).await;
    assert_eq!(refused.status, StatusCode::INTERNAL_SERVER_ERROR, "no day to put the row in");

    // What `serve` does before it listens, and its upkeep every hour.
    let made = webhook_inbox::db::partitions::create_ahead(app.pool()).await.unwrap();

    assert_eq!(made, 2 * 9, "yesterday, today and 7 days ahead, of both tables");
    assert_eq!(app.send(&paddle(&subscription_created("evt_1", "sub_1"))).await.status, StatusCode::OK);
    let fresh = TestApp::spawn_on(app.db, TestConfig::default()).await;
    assert!(fresh.metrics().await.contains("webhook_archive_partition_days_ahead 7\n"));
    assert_eq!(
        webhook_inbox::db::partitions::create_ahead(fresh.pool()).await.unwrap(),
        0,
        "once made, kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_making_the_days_ahead_at_once_make_each_once() {
    let app = TestApp::spawn().await;
    let pool = app.pool().clone();
    let made = futures_util::future::join_all((0..6).map(|_| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let replica =
                PgPoolOptions::new().max_connections(1).connect_with((*pool.connect_options()).clone());
            webhook_inbox::db::partitions::create_ahead(&replica.await.unwrap()).await.unwrap()
        })
    }))
    .await;
    let made: i32 = made.into_iter().map(Result::unwrap).sum();
    // The migration made yesterday to tomorrow; the rest, 6 days of each table, once.
    assert_eq!(made, 2 * 6);
}
