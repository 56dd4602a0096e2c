//! A real Prometheus (Debian's `prometheus`) on loopback: a free port, a
//! temporary folder for its configuration and TSDB, scraping one target
//! with a bearer token every [`SCRAPE_EVERY`] and evaluating rule files
//! every second; queried over its HTTP API. Killed when dropped, also when
//! a test panics.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How often the target is scraped. Short, so that tests wait little; not
/// shorter, so that a scrape slowed by a busy machine does not time out
/// (which would mark the target down).
pub const SCRAPE_EVERY: Duration = Duration::from_secs(2);

/// Longest Prometheus may take to be ready.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running Prometheus.
pub struct Prometheus {
    child: Child,
    base: String,
    http: reqwest::Client,
    folder: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus scraping `target`'s `/metrics` as the job
    /// `webhook-inbox`, with `Authorization: Bearer <token>`, and evaluating
    /// the rules in `rules`; waits until it is ready.
    pub async fn start(target: SocketAddr, token: &str, rules: &Path) -> Prometheus {
        let folder = tempfile::tempdir().expect("a folder for prometheus");
        let token_file = folder.path().join("token");
        std::fs::write(&token_file, token).unwrap();
        let config = folder.path().join("prometheus.yml");
        let interval = format!("{}s", SCRAPE_EVERY.as_secs());
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: webhook-inbox\n    authorization:\n      credentials_file: {token}\n    \
                 static_configs:\n      - targets: ['{target}']\n",
                rules = rules.display(),
                token = token_file.display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(folder.path().join("prometheus.log")).unwrap();
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", folder.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .current_dir(folder.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus (Debian package prometheus; .ci/run installs it)");
        let mut prometheus = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: webhook_inbox::client::build(),
            folder,
        };
        prometheus.until_ready().await;
        prometheus
    }

    async fn until_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ready = self.http.get(format!("{}/-/ready", self.base)).send().await;
            if ready.is_ok_and(|answer| answer.status().is_success()) {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("prometheus exited with {status}:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready within {START_TIMEOUT:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What Prometheus logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.folder.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/<path>?<params>`: the answer's `data`, or its error.
    pub async fn api(&self, path: &str, params: &[(&str, &str)]) -> Result<Value, String> {
        let url = reqwest::Url::parse_with_params(&format!("{}/api/v1/{path}", self.base), params).unwrap();
        let answer = self.http.get(url).send().await.unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let body: Value = serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap();
        match body["status"].as_str() {
            Some("success") => Ok(body["data"].clone()),
            _ => Err(format!("{}: {}", body["errorType"], body["error"])),
        }
    }

    /// The instant vector (or scalar) `expr` evaluates to now.
    pub async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api("query", &[("query", expr)]).await?;
        match data["resultType"].as_str() {
            Some("vector") => Ok(data["result"].as_array().unwrap().clone()),
            _ => Ok(vec![data["result"].clone()]),
        }
    }

    /// The rule groups, as `/api/v1/rules` lists them.
    pub async fn rule_groups(&self) -> Vec<Value> {
        self.api("rules", &[]).await.unwrap()["groups"].as_array().unwrap().clone()
    }
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
