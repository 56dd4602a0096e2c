//! PostgreSQL on another host: a server of its own running inside a
//! [`Namespace`], listening on the namespace's address only, so that every
//! connection to it crosses the veth link that the test can cut.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Stdio};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgSslMode};
use tempfile::TempDir;
use webhook_inbox::db::embedded::{EmbeddedOptions, EmbeddedPostgres};

use super::netns::Namespace;
use super::watch::until;

/// The server, stopped (immediate shutdown) and its files removed on drop.
pub struct RemotePostgres {
    postmaster: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    // Declared last: the directory goes after the server is stopped.
    _dir: TempDir,
}

impl RemotePostgres {
    /// A new cluster (initdb'd the way the embedded server is, so its files
    /// belong to the account PostgreSQL runs as), trusting connections from
    /// the link, started inside `namespace` as that account.
    pub async fn start(namespace: &Namespace) -> RemotePostgres {
        let dir = tempfile::tempdir().expect("temporary directory");
        let root = dir.path().join("cluster");
        let options = EmbeddedOptions { durable: false, stop_with_parent: true };
        let init_root = root.clone();
        tokio::task::spawn_blocking(move || EmbeddedPostgres::start(&init_root, &options)?.stop())
            .await
            .unwrap()
            .expect("initdb a cluster");
        let pgdata = root.join("pgdata");
        let hba = pgdata.join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba).unwrap();
        rules.push_str(&format!("host all all {}/30 trust\n", namespace.host_addr));
        std::fs::write(&hba, rules).unwrap();
        let owner = std::fs::metadata(&pgdata).unwrap();

        let log = std::fs::File::create(dir.path().join("postgres.log")).unwrap();
        let postmaster = namespace
            .command("setpriv")
            .args([
                "--reuid",
                &owner.uid().to_string(),
                "--regid",
                &owner.gid().to_string(),
                "--clear-groups",
            ])
            .arg(format!("{}/postgres", bindir()))
            .arg("-D")
            .arg(&pgdata)
            .args(["-p", "5432", "-c", &format!("listen_addresses={}", namespace.addr)])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", root.join("socket").display()))
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start postgres in the namespace");
        let addr = SocketAddr::from((namespace.addr, 5432));
        let server = RemotePostgres { postmaster, addr, _dir: dir };
        until("PostgreSQL to accept connections in the namespace", async || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                && sqlx::PgPool::connect_with(server.connect_options()).await.is_ok()
        })
        .await;
        server
    }

    /// Options to connect to its `postgres` database, over the link.
    pub fn connect_options(&self) -> PgConnectOptions {
        PgConnectOptions::new_without_pgpass()
            .host(&self.addr.ip().to_string())
            .port(self.addr.port())
            .username("postgres")
            .database("postgres")
            .ssl_mode(PgSslMode::Disable)
    }

    /// The `DATABASE_URL` of its `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@{}/postgres?sslmode=disable", self.addr)
    }
}

impl Drop for RemotePostgres {
    fn drop(&mut self) {
        // SIGQUIT: an immediate shutdown, every backend at once.
        let pid = nix::unistd::Pid::from_raw(self.postmaster.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGQUIT);
        let _ = self.postmaster.wait();
    }
}

/// Where PostgreSQL's programs are installed.
fn bindir() -> String {
    let output = std::process::Command::new("pg_config").arg("--bindir").output().expect("pg_config");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}
