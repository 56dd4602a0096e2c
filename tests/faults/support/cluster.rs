//! A private PostgreSQL for the faults that stop and start the server itself,
//! which must not be the one every other test shares.

use nix::sys::signal::Signal;
use sqlx::postgres::PgConnectOptions;
use tempfile::TempDir;
use webhook_inbox::db::embedded::{EmbeddedOptions, EmbeddedPostgres};

/// A throwaway cluster in a temporary directory, removed on drop.
pub struct Cluster {
    server: Option<EmbeddedPostgres>,
    options: PgConnectOptions,
    embedded: EmbeddedOptions,
    // Declared last: the directory goes after the server is stopped.
    dir: TempDir,
}

impl Cluster {
    /// initdb and start (a second or two), with `fsync` off like every test cluster.
    pub async fn start() -> Cluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        Cluster::start_with(EmbeddedOptions { durable: false, stop_with_parent: true }, dir).await
    }

    /// initdb and start with `fsync` and full-page writes on, as the
    /// service's own cluster runs: for the faults that crash PostgreSQL.
    pub async fn start_durable() -> Cluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        Cluster::start_with(EmbeddedOptions { durable: true, stop_with_parent: true }, dir).await
    }

    /// initdb and start (`fsync` off) in a new directory inside `parent`:
    /// on a disk of the test's choosing.
    pub async fn start_in(parent: &std::path::Path) -> Cluster {
        let dir = tempfile::tempdir_in(parent).expect("temporary directory");
        Cluster::start_with(EmbeddedOptions { durable: false, stop_with_parent: true }, dir).await
    }

    async fn start_with(embedded: EmbeddedOptions, dir: TempDir) -> Cluster {
        let (root, options) = (dir.path().join("cluster"), embedded.clone());
        let server = tokio::task::spawn_blocking(move || EmbeddedPostgres::start(&root, &options))
            .await
            .unwrap()
            .expect("start a private PostgreSQL");
        let options = server.connect_options();
        Cluster { server: Some(server), options, embedded, dir }
    }

    /// The `DATABASE_URL` of its `postgres` database.
    pub fn url(&self) -> String {
        super::service::database_url(&self.options)
    }

    /// A `DATABASE_URL` of its `postgres` database reached over TCP: a
    /// proxy on a loopback port forwards each connection to the server's
    /// unix socket, as long as the test's runtime runs.
    pub async fn url_over_tcp(&self) -> String {
        let socket = self.options.get_socket().expect("a unix socket").join(".s.PGSQL.5432");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let socket = socket.clone();
                tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::UnixStream::connect(&socket).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        format!("postgres://postgres@{addr}/postgres?sslmode=disable")
    }

    /// Options to connect to its `postgres` database.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.options.clone()
    }

    /// Stops the server (fast shutdown: sessions are ended) and waits until it is gone.
    pub async fn stop(&mut self) {
        let server = self.server.take().expect("the server runs");
        tokio::task::spawn_blocking(move || server.stop()).await.unwrap().expect("stop PostgreSQL");
    }

    /// Stops the server in immediate mode, as `pg_ctl stop -m immediate`
    /// does (SIGQUIT to the postmaster: every server process exits at once,
    /// without a checkpoint, as after a crash; the next start recovers from
    /// the WAL) and waits until it is gone.
    pub async fn stop_immediately(&mut self) {
        self.signal_postmaster(Signal::SIGQUIT).await;
    }

    /// SIGKILL to the postmaster, as the OOM killer would: it dies at once,
    /// its backends notice and exit on their own, and the next start
    /// recovers from the WAL. Waits until the postmaster is gone.
    pub async fn kill_postmaster(&mut self) {
        self.signal_postmaster(Signal::SIGKILL).await;
    }

    async fn signal_postmaster(&mut self, signal: Signal) {
        let pid_file = self.dir.path().join("cluster/pgdata/postmaster.pid");
        let pid = std::fs::read_to_string(&pid_file).expect("postmaster.pid");
        let pid: i32 = pid.lines().next().and_then(|line| line.trim().parse().ok()).expect("a pid");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).expect("signal the postmaster");
        // Waits for (and reaps) the exiting server; the SIGINT it also sends is ignored.
        self.stop().await;
    }

    /// Starts the stopped server again on the same data and socket. After
    /// a SIGKILL the start is refused while orphaned backends still hold
    /// the shared memory, so it is tried until they are gone.
    pub async fn restart(&mut self) {
        assert!(self.server.is_none(), "the server already runs");
        let mut refused = None;
        for _ in 0..100 {
            let (root, options) = (self.dir.path().join("cluster"), self.embedded.clone());
            match tokio::task::spawn_blocking(move || EmbeddedPostgres::start(&root, &options)).await.unwrap()
            {
                Ok(server) => {
                    self.server = Some(server);
                    return;
                }
                Err(error) => refused = Some(error),
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("PostgreSQL did not restart: {refused:?}");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            let _ = server.stop();
        }
    }
}
