//! Acknowledged means durable whatever the server's defaults: the service's
//! sessions commit with `synchronous_commit = on` even on a database whose
//! default is `off`.

use secrecy::SecretString;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use webhook_inbox::config::DatabaseConfig;
use webhook_inbox::db::Database;

use crate::support::TestDatabase;

async fn synchronous_commit(conn: &mut PgConnection) -> String {
    sqlx::query_scalar("SHOW synchronous_commit").fetch_one(conn).await.unwrap()
}

#[tokio::test]
async fn the_service_commits_synchronously_on_a_database_whose_default_is_off() {
    let db = TestDatabase::create().await;
    let off = format!(r#"ALTER DATABASE "{}" SET synchronous_commit = off"#, db.name());
    sqlx::query(AssertSqlSafe(off)).execute(db.pool()).await.unwrap();
    // A session that sets nothing gets the database's default: the test can fail.
    let mut plain = PgConnection::connect_with(&db.connect_options()).await.unwrap();
    assert_eq!(synchronous_commit(&mut plain).await, "off");
    plain.close().await.unwrap();

    let config = DatabaseConfig {
        database_url: Some(SecretString::from(db.url())),
        data_dir: "unused".into(),
        db_max_connections: 3,
        db_acquire_timeout_ms: 3000,
        lock_timeout_ms: 3000,
        statement_timeout_ms: 30_000,
        db_keepalive_idle_secs: 10,
        db_keepalive_interval_secs: 5,
        db_keepalive_count: 3,
    };
    let service = Database::connect(&config).await.unwrap();
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(service.pool.acquire().await.unwrap());
    }
    for session in &mut sessions {
        assert_eq!(synchronous_commit(session).await, "on");
    }
    drop(sessions);
    service.close().await;
}
