//! The real `webhook-inbox serve` as a child process: started on a free
//! loopback port, its JSON logs captured line by line, killed or terminated
//! like an orchestrator would.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use super::signing::{CLERK_SECRETS, PADDLE_SECRETS};

/// Longest a service may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running service process. Killed (SIGKILL) when dropped, if still running.
pub struct Service {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    logs: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Service {
    /// Starts `webhook-inbox serve` on `database_url` with the test secrets,
    /// JSON logs, and `env` on top (which may override any of them), and
    /// waits until it listens.
    pub async fn start(database_url: &str, env: &[(&str, &str)]) -> Service {
        let mut command = Command::new(env!("CARGO_BIN_EXE_webhook-inbox"));
        command
            .arg("serve")
            // Nothing from the test's environment, nor a developer's .env file.
            .env_clear()
            .current_dir(std::env::temp_dir())
            .env("DATABASE_URL", database_url)
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env("LOG_FORMAT", "json")
            .env("RUST_LOG", "info,sqlx=warn")
            .env("PADDLE_WEBHOOK_SECRET", PADDLE_SECRETS.join(","))
            .env("CLERK_WEBHOOK_SECRET", CLERK_SECRETS.join(","))
            .env("PADDLE_PRICE_CREDITS", "pri_basic=100,pri_pro=500,pri_unlisted=0")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("start webhook-inbox");

        let logs = Arc::new(Mutex::new(Vec::new()));
        let (listening, addr) = mpsc::channel();
        let stderr = child.stderr.take().expect("piped stderr");
        let lines = logs.clone();
        let echo = std::env::var_os("TEST_LOG").is_some();
        // Drains stderr for the whole life of the process (a full pipe would
        // block it) and reports the address of the "listening" line.
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("[service] {line}");
                }
                if let Ok(entry) = serde_json::from_str::<Value>(&line)
                    && entry["message"] == "listening"
                    && let Some(addr) = entry["addr"].as_str().and_then(|a| a.parse::<SocketAddr>().ok())
                {
                    let _ = listening.send(addr);
                }
                lines.lock().unwrap().push(line);
            }
        });

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(addr) = addr.try_recv() {
                return Service { child, addr, logs, reader: Some(reader) };
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "webhook-inbox exited with {status} before listening:\n{}",
                    logs.lock().unwrap().join("\n")
                );
            }
            assert!(Instant::now() < deadline, "webhook-inbox did not listen within {START_TIMEOUT:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The process id.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// SIGKILL, as a crash or an OOM kill would, and reap the process.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// SIGTERM, as an orchestrator stopping it for a deploy would.
    pub fn terminate(&self) {
        kill(self.pid(), Signal::SIGTERM).expect("SIGTERM");
    }

    /// Waits up to `timeout` for the process to exit.
    pub async fn exited_within(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Every log line so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// Polls until a log line's message is `message`.
    pub async fn until_logged(&self, message: &str) {
        for _ in 0..1000 {
            let logged = self.logs.lock().unwrap().iter().any(|line| {
                serde_json::from_str::<Value>(line).is_ok_and(|entry| entry["message"] == message)
            });
            if logged {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{message:?} was never logged:\n{}", self.logs().join("\n"));
    }

    /// Every log line of a process that has exited, up to its last.
    pub fn final_logs(&mut self) -> Vec<String> {
        assert!(!self.is_running(), "the service still runs");
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the log reader panicked");
        }
        self.logs()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The `DATABASE_URL` that connects to what `options` connect to.
pub fn database_url(options: &sqlx::postgres::PgConnectOptions) -> String {
    sqlx::ConnectOptions::to_url_lossy(options).to_string()
}
