//! `webhook-inbox migrate` and `serve --no-migrate`, through the real binary:
//! deploys that migrate as a step of their own.

use std::process::Command;
use std::time::Duration;

use webhook_inbox::db::MIGRATOR;

use crate::support::watch::until_waiting_on;
use crate::support::*;

#[tokio::test]
async fn migrate_applies_every_migration_and_the_binary_then_lists_events() {
    let db = TestDatabase::create_unmigrated().await;

    let migrate = binary(&db, &["migrate"]);
    let stdout = String::from_utf8(migrate.stdout).unwrap();
    assert!(migrate.status.success(), "{}", String::from_utf8_lossy(&migrate.stderr));
    assert!(stdout.starts_with("database migrated: at "), "{stdout}");
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(applied as usize, webhook_inbox::db::MIGRATOR.iter().count());

    // Twice is harmless: nothing is pending.
    assert!(binary(&db, &["migrate"]).status.success());

    sqlx::query(
        "INSERT INTO webhook_events (provider, event_id, event_type, payload, signature, processing_status)
         VALUES ('paddle', 'evt_01', 'customer.created', '{}', 's', 'FAILED')",
    )
    .execute(db.pool())
    .await
    .unwrap();
    let list = binary(&db, &["events", "list", "--json", "--status", "FAILED"]);
    let line: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(line["event_id"], "evt_01");
}

#[tokio::test]
async fn serve_no_migrate_refuses_to_start_on_an_unmigrated_database() {
    let db = TestDatabase::create_unmigrated().await;

    let serve = binary(&db, &["serve", "--no-migrate", "--listen-addr", "127.0.0.1:0"]);

    assert!(!serve.status.success());
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert!(stderr.contains("run `webhook-inbox migrate` first"), "{stderr}");
    let tables: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(tables, 0, "nothing was migrated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_index_is_built_however_long_it_takes_past_the_statement_timeout() {
    let db = TestDatabase::create_unmigrated().await;
    MIGRATOR.run_to(20261130000200, db.pool()).await.unwrap();
    // A delivery in flight on the archive: the index build waits for it,
    // as a build on a large archive would take its time.
    let mut delivery = db.pool().begin().await.unwrap();
    sqlx::query(
        "INSERT INTO webhook_events (provider, event_id, event_type, payload, signature, processing_status)
         VALUES ('paddle', 'evt_01', 'customer.created', '{}', 's', 'PROCESSED')",
    )
    .execute(&mut *delivery)
    .await
    .unwrap();

    let url = db.url();
    let migrate = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_webhook-inbox"))
            .arg("migrate")
            .env("DATABASE_URL", url)
            .env("STATEMENT_TIMEOUT_MS", "250")
            .env("LOCK_TIMEOUT_MS", "60000")
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    });
    until_waiting_on(db.pool(), "relation", 1).await;
    // Longer than the statement timeout: the duration is what is tested.
    tokio::time::sleep(Duration::from_millis(750)).await;
    delivery.commit().await.unwrap();
    let migrate = migrate.await.unwrap();

    assert!(migrate.status.success(), "{}", String::from_utf8_lossy(&migrate.stderr));
    let applied: bool =
        sqlx::query_scalar("SELECT success FROM _sqlx_migrations WHERE version = 20261130000300")
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert!(applied);
    // The index served the unpartitioned archive; its row was moved into
    // the partitioned one after the last migration.
    let moved: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_events WHERE event_id = 'evt_01'")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(moved, 1);
}
