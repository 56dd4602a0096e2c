//! Real `initdb` and `postgres` processes in temporary directories.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
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
    assert!(pg.server.is_some());
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
    assert!(owner.server.is_some());
    assert!(attached.server.is_none());
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
    assert!(second.server.is_some());
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

/// The server account, when we are root (the attacks below need two accounts).
fn server_account() -> Option<nix::unistd::User> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    nix::unistd::User::from_name("postgres").unwrap()
}

/// Runs `program args` as `account`, as code that runs as the server
/// account would (any database superuser's `COPY ... TO PROGRAM`).
fn run_as(account: &nix::unistd::User, program: &str, args: &[&str]) -> std::process::ExitStatus {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(program)
        .args(args)
        .uid(account.uid.as_raw())
        .gid(account.gid.as_raw())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run a command as the server account")
}

/// A file only root may read or write, and what it holds.
fn root_only_file(dir: &Path) -> (std::path::PathBuf, &'static str) {
    let path = dir.join("root-only");
    std::fs::write(&path, "root's own lines\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (path, "root's own lines\n")
}

#[tokio::test]
async fn the_server_account_cannot_plant_anything_where_root_opens_files() {
    let Some(postgres) = server_account() else { return };
    let tmp = reachable_tempdir();
    let dir = tmp.path().join("cluster");
    let (target, content) = root_only_file(tmp.path());
    EmbeddedPostgres::start(&dir, &test_options()).expect("start").stop().expect("stop");

    // Every name root opens, creates or renames in the cluster directory:
    // the server account can neither replace one nor add one.
    let target_arg = target.to_str().unwrap();
    for name in ["postgres.log", "owner.lock", "users.lock", "pgdata.initdb", "pgdata", "socket", "new"] {
        let planted = dir.join(name);
        let planted = planted.to_str().unwrap();
        assert!(!run_as(&postgres, "ln", &["-sfT", target_arg, planted]).success(), "planted {name}");
        assert!(
            !run_as(&postgres, "mv", &["-f", planted, &format!("{planted}.moved")]).success(),
            "moved {name}"
        );
    }

    // The cluster still starts, writes its log, and the file is untouched.
    let pg = EmbeddedPostgres::start(&dir, &test_options()).expect("restart");
    pg.stop().expect("stop");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), content);
    assert!(std::fs::read_to_string(dir.join("postgres.log")).unwrap().contains("database system is ready"));
}

#[test]
fn a_symlink_or_a_hard_link_in_place_of_a_file_root_opens_is_refused_not_followed() {
    if server_account().is_none() {
        return;
    }
    for (name, link) in [("postgres.log", "symlink"), ("owner.lock", "symlink"), ("users.lock", "hard link")]
    {
        let tmp = reachable_tempdir();
        let dir = tmp.path().join("cluster");
        std::fs::create_dir(&dir).unwrap();
        let (target, content) = root_only_file(tmp.path());
        match link {
            "symlink" => std::os::unix::fs::symlink(&target, dir.join(name)).unwrap(),
            _ => std::fs::hard_link(&target, dir.join(name)).unwrap(),
        }

        let err = EmbeddedPostgres::start(&dir, &test_options()).expect_err("followed a link");
        assert!(matches!(err, EmbeddedError::UnsafeFile { .. }), "{name}: {err}");
        assert!(err.to_string().contains(name), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), content, "{name}");
    }
}

#[test]
fn a_socket_dir_fallback_made_first_by_another_account_is_refused_and_left_alone() {
    let Some(postgres) = server_account() else { return };
    let nobody = nix::unistd::User::from_name("nobody").unwrap().expect("a nobody account");
    for (planter, plant) in [(&postgres, "symlink"), (&nobody, "directory")] {
        let tmp = reachable_tempdir();
        let dir = tmp.path().join("a-directory-name-long-enough".repeat(4));
        let fallback = super::layout::fallback_socket_dir(&dir);
        let _cleanup = RemoveOnDrop(fallback.clone());
        // Root's own directory, which the server account must never get.
        let victim = tmp.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o700)).unwrap();
        let status = match plant {
            "symlink" => run_as(planter, "ln", &["-s", victim.to_str().unwrap(), fallback.to_str().unwrap()]),
            _ => run_as(planter, "mkdir", &["-m", "0777", fallback.to_str().unwrap()]),
        };
        assert!(status.success(), "the fallback name in /tmp is anyone's to take first");

        let err = EmbeddedPostgres::start(&dir, &test_options()).expect_err("used a planted socket dir");
        assert!(matches!(err, EmbeddedError::UnsafeServerDir { .. }), "{plant}: {err}");
        let meta = std::fs::metadata(&victim).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o700), "{plant}: the victim changed hands");
    }
}

/// Removes what was planted in /tmp, also when the test fails.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0).or_else(|_| std::fs::remove_dir(&self.0));
    }
}

#[test]
fn a_forged_postmaster_pid_naming_another_accounts_process_is_neither_adopted_nor_signalled() {
    let Some(postgres) = server_account() else { return };
    let tmp = reachable_tempdir();
    let dir = tmp.path().join("cluster");
    EmbeddedPostgres::start(&dir, &test_options()).expect("start").stop().expect("stop");
    // A root process, and a pid file the server account writes naming it, "ready".
    let mut victim = std::process::Command::new("sleep").arg("600").spawn().unwrap();
    let forged = format!("{}\n{}\n0\n5432\n\n\n0 0\nready   \n", victim.id(), dir.display());
    let pid_file = dir.join("pgdata/postmaster.pid");
    let write = format!("printf '{}' > {}", forged.replace('\n', "\\n"), pid_file.display());
    assert!(run_as(&postgres, "sh", &["-c", &write]).success());

    let started = EmbeddedPostgres::start(&dir, &test_options()).map(EmbeddedPostgres::stop);
    let untouched = victim.try_wait().unwrap().is_none();
    let _ = victim.kill();
    victim.wait().unwrap();
    let err = started.expect_err("adopted a forged pid");
    assert!(matches!(err, EmbeddedError::ForeignPostmaster { .. }), "{err}");
    assert!(untouched, "the named process was signalled");
}

#[tokio::test]
async fn the_server_log_quotes_nothing_of_a_payload_postgresql_refused() {
    let tmp = reachable_tempdir();
    let dir = tmp.path().join("cluster");
    let pg = EmbeddedPostgres::start(&dir, &test_options()).expect("start");
    let mut conn = PgConnection::connect_with(&pg.connect_options()).await.expect("connect");
    // Refused with a CONTEXT line quoting the JSON ("JSON data, line 1: ...").
    let refused = sqlx::query("SELECT $1::jsonb")
        .bind(r#"{"canary": "payload-canary-7f3a", "bad": "\u0000"}"#)
        .execute(&mut conn)
        .await;
    assert!(refused.is_err());
    conn.close().await.expect("close");
    pg.stop().expect("stop");

    let log = std::fs::read_to_string(dir.join("postgres.log")).unwrap();
    assert!(log.contains("unsupported Unicode escape sequence"), "the refusal is logged:\n{log}");
    assert!(!log.contains("payload-canary-7f3a") && !log.contains("CONTEXT"), "{log}");
}
