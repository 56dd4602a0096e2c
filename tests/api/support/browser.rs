//! A real headless Chromium, driven over WebDriver by fantoccini: one
//! chromedriver per test, started on a free port and shut down (with every
//! browser it started) from `Drop`, which also runs when a test panics.
//!
//! Browser tests take turns: on two cores, browsers running side by side
//! only slow each other down. Waits are for elements, bounded generously,
//! never fixed sleeps.
//!
//! Whether Chromium and chromedriver are installed is checked once per test
//! binary. Without them every browser test fails (a skip would let CI pass
//! without running them), the first with what to install, the others with a
//! line that points to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fantoccini::elements::Element;
use fantoccini::error::CmdError;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};

/// Longest wait for an element: only a hang takes this long.
const WAIT: Duration = Duration::from_secs(60);
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(20);
/// Chromium itself, past Debian's wrapper script.
const CHROMIUM: &str = "/usr/lib/chromium/chromium";

/// Debian's packages of what the browser tests run (the README's install
/// line and `.ci/run` name them too).
const PACKAGES: &str = "chromium chromium-driver";

static TURN: Mutex<()> = Mutex::const_new(());

/// What is missing of the browser, looked for once.
static MISSING: LazyLock<Option<String>> = LazyLock::new(missing);
/// Whether a test has already failed with the whole explanation.
static EXPLAINED: AtomicBool = AtomicBool::new(false);

/// What of the browser is not installed, if anything.
fn missing() -> Option<String> {
    let runs =
        |program: &str| Command::new(program).arg("--version").output().is_ok_and(|out| out.status.success());
    let mut missing = Vec::new();
    if !runs("chromedriver") {
        missing.push("chromedriver does not run (not on PATH?)");
    }
    if !std::path::Path::new(CHROMIUM).exists() && !runs("chromium") {
        missing.push("Chromium is not installed (no /usr/lib/chromium/chromium, no chromium on PATH)");
    }
    (!missing.is_empty()).then(|| missing.join(", and "))
}

/// Fails the calling test when the browser is not installed: with the
/// message alone, no backtrace (the cause is the machine, not the code).
fn require_browser() {
    let Some(missing) = &*MISSING else { return };
    if !EXPLAINED.swap(true, Ordering::SeqCst) {
        eprintln!(
            "The console's browser tests drive a headless Chromium through chromedriver, and {missing}.\n\
             Install both (Debian, Ubuntu): apt install {PACKAGES}\n\
             (.ci/run installs them when missing; every browser test fails until they are there.)"
        );
    } else {
        eprintln!(
            "No browser to test with: apt install {PACKAGES} (another browser test's failure says why)."
        );
    }
    std::panic::resume_unwind(Box::new("no browser"));
}

/// A browser session on its own chromedriver.
pub struct Browser {
    pub client: Client,
    // Dropped after the client: the driver's shutdown ends the browser.
    _driver: Driver,
    _turn: MutexGuard<'static, ()>,
}

struct Driver {
    child: Child,
    port: u16,
    _profiles: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // `/shutdown` ends every browser the driver started, then the driver;
        // a signal would leave the browsers running.
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let _ =
                stream.write_all(b"GET /shutdown HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
            let _ = stream.read_to_end(&mut Vec::new());
        }
        for _ in 0..500 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    fn start() -> Driver {
        let profiles = tempfile::tempdir().expect("a folder for browser profiles");
        let mut child = Command::new("chromedriver")
            .arg("--port=0")
            .env("TMPDIR", profiles.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver, which ran for the check");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port = loop {
            let line = lines.next().expect("chromedriver exited before it started").unwrap();
            if let Some(rest) = line.split("started successfully on port ").nth(1) {
                break rest.trim_end_matches('.').trim().parse().expect("chromedriver's port");
            }
        };
        // Keep draining its output, so that it never blocks writing.
        std::thread::spawn(move || lines.for_each(drop));
        Driver { child, port, _profiles: profiles }
    }
}

impl Browser {
    /// Starts chromedriver and a headless browser session on it.
    pub async fn start() -> Browser {
        require_browser();
        let turn = TURN.lock().await;
        let driver = Driver::start();
        let mut options = json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"],
        });
        if std::path::Path::new(CHROMIUM).exists() {
            options["binary"] = json!(CHROMIUM);
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".into(), options);
        // A dialog stays open for the test to find, rather than being dismissed.
        capabilities.insert("unhandledPromptBehavior".into(), json!("ignore"));
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await
            .expect("a browser session");
        Browser { client, _driver: driver, _turn: turn }
    }

    /// Opens `url` and waits until `css` is on the page.
    pub async fn open(&self, url: &str, css: &str) -> Element {
        self.client.goto(url).await.unwrap_or_else(|e| panic!("goto {url}: {e}"));
        self.wait_for(css).await
    }

    /// Waits until an element matches `css`.
    pub async fn wait_for(&self, css: &str) -> Element {
        match self.client.wait().at_most(WAIT).every(POLL).for_element(Locator::Css(css)).await {
            Ok(element) => element,
            Err(e) => panic!("no element {css} on {:?}: {e}", self.client.current_url().await),
        }
    }

    /// The text of the element matching `css`, once there.
    pub async fn text(&self, css: &str) -> String {
        self.wait_for(css).await.text().await.unwrap()
    }

    /// Types `value` into the input `css`.
    pub async fn fill(&self, css: &str, value: &str) {
        self.wait_for(css).await.send_keys(value).await.unwrap();
    }

    /// Clicks `css` and waits until the next page shows `then`.
    pub async fn click(&self, css: &str, then: &str) -> Element {
        self.wait_for(css).await.click().await.unwrap();
        self.wait_for(then).await
    }

    /// The current path and query.
    pub async fn path(&self) -> String {
        let url = self.client.current_url().await.unwrap();
        match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        }
    }

    /// Signs in at `base` with `token`, landing on the overview.
    pub async fn sign_in(&self, base: &str, token: &str) {
        self.open(&format!("{base}/console/sign-in"), "#token").await;
        self.fill("#token", token).await;
        self.click("#sign-in", "#unapplied-failed").await;
    }

    /// The value of cookie `name`, if the browser holds it.
    pub async fn cookie(&self, name: &str) -> Option<String> {
        let cookies = self.client.get_all_cookies().await.unwrap();
        cookies.iter().find(|c| c.name() == name).map(|c| c.value().to_string())
    }

    /// Asserts that no dialog (alert, confirm, prompt) is open.
    pub async fn assert_no_dialog(&self) {
        match self.client.get_alert_text().await {
            Err(CmdError::Standard(error)) if error.error == fantoccini::error::ErrorStatus::NoSuchAlert => {}
            other => panic!("a dialog is open (a script ran): {other:?}"),
        }
    }

    /// Runs `script` in the page (WebDriver's own injection, which a page's
    /// Content-Security-Policy does not govern) and returns its value.
    pub async fn evaluate(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap()
    }

    /// A PNG of the whole window.
    pub async fn screenshot(&self) -> Vec<u8> {
        self.client.screenshot().await.unwrap()
    }
}
