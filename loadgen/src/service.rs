//! The service under test, as a child process.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The Paddle secret every measurement's service verifies with.
pub const PADDLE_SECRET: &str = "pdl_ntfset_bench_secret";
/// The Clerk secret of the measurements that send Clerk events.
pub const CLERK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Which service binary a measurement starts.
#[derive(Debug, Args)]
pub struct Binary {
    /// The service binary (build it with `cargo build --release`).
    #[arg(long = "service", default_value = "target/release/webhook-inbox")]
    pub path: PathBuf,
}

/// The libpq conninfo of the embedded PostgreSQL a service started in
/// `data_dir` (its `DATA_DIR`): a unix socket in `socket/` there (see
/// `src/db/embedded/layout.rs`).
pub fn embedded_conninfo(data_dir: &Path) -> String {
    format!("host={} port=5432 user=postgres dbname=postgres", data_dir.join("socket").display())
}

/// A running `webhook-inbox serve`.
pub struct Service {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Service {
    /// Starts `binary serve` with `env` on a free loopback port and waits
    /// until `/readyz` answers 200 (the database is up and migrated).
    pub async fn start(binary: &Path, env: &[(&str, String)], log: &Path) -> anyhow::Result<Self> {
        let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let log = std::fs::File::create(log)?;
        let child = Command::new(binary)
            .arg("serve")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("LISTEN_ADDR", addr.to_string())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let mut service = Service { child, addr };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !service.ready().await {
            if let Some(status) = service.child.try_wait()? {
                anyhow::bail!("the service exited during startup ({status})");
            }
            anyhow::ensure!(Instant::now() < deadline, "the service did not become ready in 60 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(service)
    }

    async fn ready(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(self.addr).await else { return false };
        let request = b"GET /readyz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
        let mut answer = Vec::new();
        stream.write_all(request).await.is_ok()
            && stream.read_to_end(&mut answer).await.is_ok()
            && answer.starts_with(b"HTTP/1.1 200")
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The most memory the process has held (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// SIGTERM, then wait for the drain and exit.
    pub fn stop(mut self) -> anyhow::Result<()> {
        Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status()?;
        self.child.wait()?;
        Ok(())
    }
}
