//! Real `initdb` and `postgres` processes in temporary directories.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use sqlx::{Connection, PgConnection};

use super::binaries::{self, Search};
use super::postmaster::{is_alive, read_pid_file};
use super::*;

/// Test options: fast, and no server outlives the test binary.
fn test_options() -> EmbeddedOptions {
    EmbeddedOptions { durable: false, stop_with_parent: true }
}

/// A temporary directory the unprivileged server user may enter, when we are root.
fn reachable_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod temp dir");
    dir
}

async fn query_one(pg: &EmbeddedPostgres, sql: &'static str) -> i64 {
    let mut conn =
        PgConnection::connect_with(&pg.connect_options()).await.expect("connect to the embedded server");
    let value: i64 = sqlx::query_scalar(sql).fetch_one(&mut conn).await.expect("query");
    conn.close().await.expect("close");
    value
}

fn server_pid(dir: &Path) -> nix::unistd::Pid {
    let pgdata = dir.canonicalize().expect("canonical dir").join("pgdata");
    read_pid_file(&pgdata).expect("postmaster.pid").pid
}

#[tokio::test]
async fn a_started_cluster_answers_queries_over_its_socket() {
    let tmp = reachable_tempdir();
    let dir = tmp.path().join("cluster");
    let pg = EmbeddedPostgres::start(&dir, &test_options()).expect("start");
    assert!(pg.owns_server());
    assert_eq!(query_one(&pg, "SELECT 1::int8").await, 1);
    assert_eq!(
        query_one(&pg, "SELECT count(*) FROM pg_settings WHERE name = 'listen_addresses' AND setting = ''")
            .await,
        1,
        "no TCP listener"
    );
    pg.stop().expect("stop");
}

#[tokio::test]
async fn data_survives_a_stop_and_a_restart() {
    let tmp = reachable_tempdir();
    let dir = tmp.path().join("cluster");
    let pg = EmbeddedPostgres::start(&dir, &test_options()).expect("start");
    let mut conn = PgConnection::connect_with(&pg.connect_options()).await.expect("connect");
    sqlx::raw_sql("CREATE TABLE kept (n int8); INSERT INTO kept VALUES (42);")
        .execute(&mut conn)
        .await
        .expect("create table");
    conn.close().await.expect("close");
    let pid = server_pid(&dir);
    pg.stop().expect("stop");
    assert!(!is_alive(pid), "the server is gone after stop");

    let pg = EmbeddedPostgres::start(&dir, &test_options()).expect("restart");
    assert_eq!(query_one(&pg, "SELECT n FROM kept").await, 42);
    pg.stop().expect("stop");
}

#[tokio::test]
async fn a_second_start_on_a_running_cluster_attaches_and_leaves_it_running() {
    let tmp = reachable_tempdir();
    let dir = tmp.path().join("cluster");
    let owner = EmbeddedPostgres::start(&dir, &test_options()).expect("start");
    let attached = EmbeddedPostgres::start(&dir, &test_options()).expect("attach");
    assert!(owner.owns_server());
    assert!(!attached.owns_server());
    assert_eq!(query_one(&attached, "SELECT 2::int8").await, 2);

    attached.stop().expect("stop the attached handle");
    assert_eq!(query_one(&owner, "SELECT 3::int8").await, 3);

    let pid = server_pid(&dir);
    owner.stop().expect("stop the owner");
    assert!(!is_alive(pid));
}

#[tokio::test]
async fn the_owner_leaves_the_server_running_while_another_process_uses_it() {
    let tmp = reachable_tempdir();
    let dir = tmp.path().join("cluster");
    let owner = EmbeddedPostgres::start(&dir, &test_options()).expect("start");
    let attached = EmbeddedPostgres::start(&dir, &test_options()).expect("attach");
    let pid = server_pid(&dir);

    owner.stop().expect("stop the owner");
    assert!(is_alive(pid), "still in use by the attached handle");
    assert_eq!(query_one(&attached, "SELECT 4::int8").await, 4);

    attached.stop().expect("the last user out");
    assert!(!is_alive(pid), "the last user out stops the server");
}

#[tokio::test]
async fn a_server_left_by_a_dead_owner_is_adopted() {
    let tmp = reachable_tempdir();
    let dir = tmp.path().join("cluster");
    let first = EmbeddedPostgres::start(&dir, &test_options()).expect("start");
    let pid = server_pid(&dir);
    // Dropping without stop releases the locks as a killed process would.
    drop(first);

    let second = EmbeddedPostgres::start(&dir, &test_options()).expect("adopt");
    assert!(second.owns_server());
    assert_eq!(server_pid(&dir), pid, "the same server, not a new one");
    assert_eq!(query_one(&second, "SELECT 5::int8").await, 5);
    second.stop().expect("stop");
    assert!(!is_alive(pid));
}

#[tokio::test]
async fn a_cluster_path_too_long_for_a_socket_uses_a_short_socket_dir() {
    let tmp = reachable_tempdir();
    let dir = tmp.path().join("a-directory-name-long-enough".repeat(4));
    let pg = EmbeddedPostgres::start(&dir, &test_options()).expect("start");
    let socket_dir = pg.connect_options().get_socket().cloned().expect("a socket");
    assert!(socket_dir.to_string_lossy().starts_with("/tmp/webhook-inbox-"), "{socket_dir:?}");
    assert_eq!(query_one(&pg, "SELECT 6::int8").await, 6);
    pg.stop().expect("stop");
    std::fs::remove_dir(&socket_dir).expect("the socket dir is empty once stopped");
}

/// As root, the server runs as another user, who cannot enter a parent
/// private to root: a clear error before anything starts. As anyone else,
/// the server runs as that same user, who can: it starts. Either way the
/// test checks what this process's user leads to.
#[tokio::test]
async fn a_parent_the_server_user_cannot_enter_is_a_clear_error_and_one_it_can_is_used() {
    let private = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod temp dir");
    let started = EmbeddedPostgres::start(&private.path().join("cluster"), &test_options());
    if nix::unistd::geteuid().is_root() {
        let err = started.expect_err("unreachable");
        assert!(matches!(err, EmbeddedError::DirNotReachable { .. }), "{err}");
        let message = err.to_string();
        assert!(message.contains("--data-dir") && message.contains("DATABASE_URL"), "{message}");
    } else {
        let pg = started.expect("the server runs as this user, who can enter its own directory");
        assert_eq!(query_one(&pg, "SELECT 7::int8").await, 7);
        pg.stop().expect("stop");
    }
}

#[test]
fn no_binaries_anywhere_is_a_clear_error() {
    let empty = tempfile::tempdir().expect("temp dir");
    let search = Search {
        pg_bindir: None,
        pg_config_bindir: None,
        path: Some(empty.path().as_os_str().to_owned()),
        versioned_root: empty.path().to_path_buf(),
    };
    let err = binaries::find(&search).expect_err("nothing to find");
    assert!(matches!(err, EmbeddedError::BinariesNotFound { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("install the PostgreSQL server package") && message.contains("DATABASE_URL"),
        "{message}"
    );
}

#[test]
fn a_pg_bindir_without_binaries_is_a_clear_error_not_a_fallback() {
    let empty = tempfile::tempdir().expect("temp dir");
    let search = Search {
        pg_bindir: Some(empty.path().to_path_buf()),
        pg_config_bindir: Some("/usr/lib/postgresql/15/bin".into()),
        path: std::env::var_os("PATH"),
        versioned_root: "/usr/lib/postgresql".into(),
    };
    let err = binaries::find(&search).expect_err("PG_BINDIR wins");
    assert!(matches!(err, EmbeddedError::BinDirIncomplete { missing: "initdb", .. }), "{err}");
    assert!(err.to_string().contains("PG_BINDIR"));
}

#[test]
fn the_highest_installed_version_is_preferred() {
    let root = tempfile::tempdir().expect("temp dir");
    for version in ["9.6", "15", "12"] {
        let bin = root.path().join(version).join("bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        for name in ["initdb", "postgres"] {
            let path = bin.join(name);
            std::fs::write(&path, "").expect("write");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }
    let search = Search { versioned_root: root.path().to_path_buf(), ..Search::default() };
    let found = binaries::find(&search).expect("found");
    assert_eq!(found.postgres, root.path().join("15/bin/postgres"));
}
