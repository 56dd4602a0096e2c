//! The test-database harness does what the other tests rely on.

use sqlx::postgres::PgPoolOptions;
use webhook_inbox::db::MIGRATOR;

use crate::support::TestDatabase;

async fn count(pool: &sqlx::PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect("count query")
}

async fn database_exists(pool: &sqlx::PgPool, name: &str) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(pool)
        .await
        .expect("look up database")
}

#[tokio::test]
async fn a_test_database_starts_empty_with_every_migration_applied() {
    let db = TestDatabase::create().await;
    let applied = count(db.pool(), "SELECT count(*) FROM _sqlx_migrations WHERE success").await;
    assert_eq!(applied, MIGRATOR.iter().count() as i64);
    assert_eq!(count(db.pool(), "SELECT count(*) FROM processed_webhook_events").await, 0);
    assert_eq!(count(db.pool(), "SELECT count(*) FROM webhook_events").await, 0);
}

#[tokio::test]
async fn test_databases_do_not_see_each_others_rows() {
    let (first, second) = tokio::join!(TestDatabase::create(), TestDatabase::create());
    assert_ne!(first.name(), second.name());
    sqlx::query("INSERT INTO users (id, created_at) VALUES ('user_1', now())")
        .execute(first.pool())
        .await
        .expect("insert");
    assert_eq!(count(first.pool(), "SELECT count(*) FROM users").await, 1);
    assert_eq!(count(second.pool(), "SELECT count(*) FROM users").await, 0);
}

#[tokio::test]
async fn a_test_database_is_gone_once_dropped() {
    let observer = TestDatabase::create().await;
    let db = TestDatabase::create().await;
    let name = db.name().to_owned();
    // A session still open at drop time must not keep the database alive.
    let _session = db.pool().acquire().await.expect("acquire");
    assert!(database_exists(observer.pool(), &name).await);
    drop(_session);
    drop(db);
    assert!(!database_exists(observer.pool(), &name).await);
}

#[tokio::test]
async fn connect_options_reach_the_same_database_from_a_second_pool() {
    let db = TestDatabase::create().await;
    let second = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(db.connect_options())
        .await
        .expect("second pool");
    sqlx::query("INSERT INTO users (id, created_at) VALUES ('user_2', now())")
        .execute(db.pool())
        .await
        .expect("insert");
    assert_eq!(count(&second, "SELECT count(*) FROM users").await, 1);
    second.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_harness_serves_a_multi_thread_runtime_under_concurrent_writes() {
    let db = TestDatabase::create().await;
    let inserts = (0..20).map(|_| {
        let pool = db.pool().clone();
        tokio::spawn(async move {
            sqlx::query(
                "INSERT INTO processed_webhook_events (provider, event_id, event_type) \
                 VALUES ('paddle', 'evt_1', 'subscription.created') \
                 ON CONFLICT (provider, event_id) DO NOTHING",
            )
            .execute(&pool)
            .await
            .expect("insert")
            .rows_affected()
        })
    });
    let inserted: u64 =
        futures_util::future::join_all(inserts).await.into_iter().map(|joined| joined.expect("task")).sum();
    assert_eq!(inserted, 1, "the unique constraint lets exactly one through");
    assert_eq!(count(db.pool(), "SELECT count(*) FROM processed_webhook_events").await, 1);
}
