//! A fresh, migrated PostgreSQL database per test.
//!
//! The server is `DATABASE_URL` when set, else one embedded cluster per test
//! process, started on first use in `$TMPDIR/webhook-inbox-test-<pid>` and
//! killed with the process. Migrations run once per server into a template
//! database named after their checksums; each test then gets
//! `CREATE DATABASE test_<uuid> TEMPLATE <template>`, dropped when its
//! [`TestDatabase`] drops.
//!
//! Nothing here belongs to one test's tokio runtime: the cluster is a plain
//! process, and admin connections are opened per call, so tests may use
//! current-thread and multi-thread runtimes alike.

use std::path::Path;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool};
use tokio::sync::OnceCell;
use webhook_inbox::db::MIGRATOR;
use webhook_inbox::db::embedded::{EmbeddedOptions, EmbeddedPostgres};

/// Names every template database; the rest of the name is the migrations' hash.
const TEMPLATE_PREFIX: &str = "webhook_inbox_template_";

/// Serializes template creation between test processes sharing a server.
const TEMPLATE_LOCK_KEY: i64 = 0x7765_6268_6f6f_6b31; // "webhook1"

/// A fresh, migrated database for one test; dropped (`DROP DATABASE ... WITH
/// (FORCE)`) when the value is dropped.
pub struct TestDatabase {
    name: String,
    options: PgConnectOptions,
    pool: PgPool,
}

impl TestDatabase {
    /// Creates a database from the migrated template (fast: a file copy).
    pub async fn create() -> TestDatabase {
        let name = format!("test_{}", uuid::Uuid::new_v4().simple());
        let template = template().await;
        if let Err(err) = create_database(&name, template).await {
            // Another test process with other migrations may have dropped our
            // cached template as stale; build it again, once.
            if !is_undefined_database(&err) {
                panic!("could not create test database {name}: {err}");
            }
            let template = ensure_template().await;
            create_database(&name, &template)
                .await
                .unwrap_or_else(|err| panic!("could not create test database {name}: {err}"));
        }
        Self::connect(name).await
    }

    /// Creates an empty database, with no migration applied (for `migrate`).
    pub async fn create_unmigrated() -> TestDatabase {
        let name = format!("test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = connect_admin().await;
        execute(&mut admin, format!(r#"CREATE DATABASE "{name}""#)).await;
        admin.close().await.expect("close the admin connection");
        Self::connect(name).await
    }

    async fn connect(name: String) -> TestDatabase {
        let options = server().admin.clone().database(&name);
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
            .unwrap_or_else(|err| panic!("could not connect to test database {name}: {err}"));
        TestDatabase { name, options, pool }
    }

    /// A pool on this database (up to 10 connections).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Options to connect to this database, e.g. for a second app instance.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.options.clone()
    }

    /// A `postgres://` URL of this database, for `DATABASE_URL` (the CLI).
    /// A unix-socket server is named by its directory, percent-encoded.
    pub fn url(&self) -> String {
        use sqlx::ConnectOptions;
        self.options.to_url_lossy().to_string()
    }

    /// The database's name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    /// Drop is sync and may run inside a current-thread runtime that cannot
    /// be blocked on, so the DROP runs on a short-lived thread with its own
    /// runtime, joined so the database is gone when the test ends. FORCE ends
    /// the pool's sessions (and any the test leaked).
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        let admin = server().admin.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|err| err.to_string())?;
            runtime
                .block_on(async {
                    let mut conn = PgConnection::connect_with(&admin).await?;
                    let sql = format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#);
                    sqlx::query(AssertSqlSafe(sql)).execute(&mut conn).await?;
                    conn.close().await
                })
                .map_err(|err| format!("{name}: {err}"))
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(err)) => eprintln!("warning: could not drop test database {err}"),
            Err(_) => eprintln!("warning: the thread dropping a test database panicked"),
        }
    }
}

/// The server all test databases live on.
struct Server {
    /// Superuser connection to its `postgres` database.
    admin: PgConnectOptions,
    /// Kept so the handle (and its locks) lives as long as the process;
    /// the server dies with the process (`stop_with_parent`).
    _embedded: Option<EmbeddedPostgres>,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        if let Some(url) = std::env::var("DATABASE_URL").ok().filter(|url| !url.is_empty()) {
            let admin = PgConnectOptions::from_str(&url)
                .unwrap_or_else(|err| panic!("DATABASE_URL is not a PostgreSQL URL: {err}"));
            return Server { admin, _embedded: None };
        }
        let tmp = std::env::temp_dir();
        remove_dead_clusters(&tmp);
        let dir = tmp.join(format!("webhook-inbox-test-{}", std::process::id()));
        let embedded =
            EmbeddedPostgres::start(&dir, &EmbeddedOptions { durable: false, stop_with_parent: true })
                .unwrap_or_else(|err| panic!("could not start the test PostgreSQL: {err}"));
        Server { admin: embedded.connect_options(), _embedded: Some(embedded) }
    })
}

/// Removes the clusters of earlier test processes that are gone, and whose
/// server is gone too (it may still be shutting down after its parent died).
fn remove_dead_clusters(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|name| name.strip_prefix("webhook-inbox-test-"))
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let postmaster = std::fs::read_to_string(dir.join("pgdata/postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<i32>().ok());
        if !is_running(pid) && !postmaster.is_some_and(is_running) {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// Whether a (non-zombie) process with this pid exists.
fn is_running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

/// The template's name, built (once per process) if the server lacks it.
async fn template() -> &'static str {
    static TEMPLATE: OnceCell<String> = OnceCell::const_new();
    TEMPLATE.get_or_init(ensure_template).await
}

/// `webhook_inbox_template_<hash>`: new migrations get a new template, and an
/// unchanged set reuses the one a previous run left on a `DATABASE_URL` server.
fn template_name() -> String {
    let mut hash = Sha256::new();
    for migration in MIGRATOR.iter() {
        hash.update(migration.version.to_le_bytes());
        hash.update(&*migration.checksum);
    }
    format!("{TEMPLATE_PREFIX}{}", hex::encode(&hash.finalize()[..8]))
}

/// Makes sure the migrated template exists, under an advisory lock so test
/// processes sharing a server build it once. It is marked a template only
/// once fully migrated: a half-built one (from a killed run) is rebuilt.
async fn ensure_template() -> String {
    let name = template_name();
    let mut admin = connect_admin().await;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(TEMPLATE_LOCK_KEY)
        .execute(&mut admin)
        .await
        .expect("take the template lock");

    let ready: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)")
            .bind(&name)
            .fetch_one(&mut admin)
            .await
            .expect("look for the template");
    if !ready {
        build_template(&mut admin, &name).await;
        drop_stale_templates(&mut admin, &name).await;
    }

    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(TEMPLATE_LOCK_KEY)
        .execute(&mut admin)
        .await
        .expect("release the template lock");
    admin.close().await.expect("close the admin connection");
    name
}

async fn build_template(admin: &mut PgConnection, name: &str) {
    execute(admin, format!(r#"DROP DATABASE IF EXISTS "{name}" WITH (FORCE)"#)).await;
    execute(admin, format!(r#"CREATE DATABASE "{name}""#)).await;

    let mut conn = PgConnection::connect_with(&server().admin.clone().database(name))
        .await
        .expect("connect to the template");
    MIGRATOR.run(&mut conn).await.expect("migrate the template database");
    conn.close().await.expect("close the template connection");

    // No connections allowed: PostgreSQL refuses to copy a template that
    // has any, so none must ever linger on it.
    execute(admin, format!(r#"ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true"#)).await;
}

/// Keeps the cache at one template per migration set in use: drops those of
/// older migrations. One still being copied from is left for next time.
async fn drop_stale_templates(admin: &mut PgConnection, current: &str) {
    let stale: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database WHERE starts_with(datname, $1) AND datname <> $2",
    )
    .bind(TEMPLATE_PREFIX)
    .bind(current)
    .fetch_all(&mut *admin)
    .await
    .expect("list templates");
    for name in stale {
        // Two statements: DROP DATABASE refuses to run in a (implicit) transaction.
        for sql in
            [format!(r#"ALTER DATABASE "{name}" IS_TEMPLATE false"#), format!(r#"DROP DATABASE "{name}""#)]
        {
            if let Err(err) = sqlx::query(AssertSqlSafe(sql)).execute(&mut *admin).await {
                eprintln!("note: could not drop stale template {name}: {err}");
                break;
            }
        }
    }
}

async fn create_database(name: &str, template: &str) -> Result<(), sqlx::Error> {
    let mut admin = connect_admin().await;
    sqlx::query(AssertSqlSafe(format!(r#"CREATE DATABASE "{name}" TEMPLATE "{template}""#)))
        .execute(&mut admin)
        .await?;
    admin.close().await
}

fn is_undefined_database(err: &sqlx::Error) -> bool {
    err.as_database_error().and_then(|err| err.code()).is_some_and(|code| code == "3D000")
}

async fn connect_admin() -> PgConnection {
    PgConnection::connect_with(&server().admin)
        .await
        .unwrap_or_else(|err| panic!("could not connect to the test server: {err}"))
}

async fn execute(conn: &mut PgConnection, sql: String) {
    sqlx::query(AssertSqlSafe(sql.clone())).execute(conn).await.unwrap_or_else(|err| panic!("{sql}: {err}"));
}
