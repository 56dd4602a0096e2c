//! Forwarding in the console, in a real browser (headless Chromium over
//! WebDriver, see `support/browser.rs`) against the app on a real socket:
//! each destination's health on the overview, pausing, resuming and
//! replaying from there, an event's jobs and their attempts on its page,
//! each action in the audit; and what a hostile receiver's answer cannot do
//! to those pages.

use axum::http::StatusCode;
use chrono::Utc;
use fantoccini::Locator;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::support::app::Listening;
use crate::support::browser::Browser;
use crate::support::console::ADMIN_TOKEN;
use crate::support::forwarding::*;
use crate::support::*;

/// What a receiver under an attacker's control might answer: markup that
/// would run script if a page printed it raw.
const HOSTILE_BODY: &str = "<script>document.title='pwned';alert('body')</script>\
     \"><img src=x onerror=alert('img')><a href=\"javascript:alert('link')\">click</a>\
     '><svg onload=alert('svg')>";

/// A receiver on loopback that answers every request `status` with `body`.
struct Answering {
    url: String,
    task: JoinHandle<()>,
}

impl Answering {
    async fn start(status: StatusCode, body: &'static str) -> Answering {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhooks/inbox", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(move || async move { (status, body) });
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Answering { url, task }
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The console app with destination `app` at `url`, wanting Paddle's and
/// the Standard Webhooks sender's events, giving a job up after one failed
/// attempt; nothing is sent until a test drives a round.
async fn console_forwarding_to(url: &str) -> TestApp {
    let toml = format!(
        "[[destinations]]\nname = \"app\"\nurl = \"{url}\"\nsecret = \"{SECRET}\"\n\
         events = [\"paddle:*\", \"{STANDARD_SENDER}:*\"]\nretry_schedule = []\n"
    );
    TestApp::spawn_with(TestConfig {
        admin_token: Some(ADMIN_TOKEN),
        destinations: Some(toml),
        send_forwards: false,
        ..TestConfig::default()
    })
    .await
}

/// `app` on a real socket, and a browser signed in to its console (at the
/// base URL returned).
async fn signed_in(app: &TestApp) -> (Listening, Browser, String) {
    let server = app.listen().await;
    let base = format!("http://{}", server.addr);
    let browser = Browser::start().await;
    browser.sign_in(&base, ADMIN_TOKEN).await;
    (server, browser, base)
}

/// Destination `app`'s queue run now until idle: every due job attempted once.
async fn attempt_due_jobs(app: &TestApp) {
    send_due(app.pool(), &queue(app, "app"), Utc::now()).await;
}

/// Asserts that the page shows no dialog, no element and no link that came
/// from a stored value: what a hostile value would add if printed raw.
async fn assert_nothing_injected(browser: &Browser, page: &str) {
    browser.assert_no_dialog().await;
    assert_ne!(browser.client.title().await.unwrap(), "pwned", "{page}");
    let injected = browser
        .evaluate("return document.querySelectorAll('script, img, iframe, object, embed, main svg:not(.strip)').length")
        .await;
    // (The overview's chart strips are the only SVG the pages draw.)
    assert_eq!(injected, Value::from(0), "{page}: no element came from a stored value");
    let links = browser
        .evaluate("return [...document.querySelectorAll('a')].filter(a => !a.getAttribute('href').startsWith('/console')).length")
        .await;
    assert_eq!(links, Value::from(0), "{page}: every link stays in the console");
}

/// The text of the overview's row of destination `app`, by column class.
async fn cell(browser: &Browser, class: &str) -> String {
    browser.text(&format!("#destination-app td.{class}")).await
}

#[tokio::test]
async fn the_overview_shows_each_destinations_health_and_pauses_resumes_and_replays_its_dead_jobs() {
    let receiver = Answering::start(StatusCode::INTERNAL_SERVER_ERROR, "down for maintenance").await;
    let app = console_forwarding_to(&receiver.url).await;
    deliver(&app, "evt_1", "ctm_1", 1).await;
    deliver(&app, "evt_2", "ctm_2", 1).await;
    attempt_due_jobs(&app).await;
    deliver(&app, "evt_3", "ctm_3", 1).await;
    assert_eq!(
        jobs(app.pool()).await,
        [("dead".to_string(), 1), ("dead".to_string(), 1), ("pending".to_string(), 0)]
    );
    sqlx::query(
        "UPDATE destination_jobs SET created_at = now() - interval '2 hours' WHERE status = 'pending'",
    )
    .execute(app.pool())
    .await
    .unwrap();
    let (server, browser, base) = signed_in(&app).await;

    // Health: state, backlog, the oldest pending job's age, dead jobs.
    assert!(cell(&browser, "state").await.starts_with("running"));
    assert_eq!(cell(&browser, "pending").await, "1");
    assert!(cell(&browser, "oldest").await.starts_with("2 h"), "{}", cell(&browser, "oldest").await);
    assert_eq!(cell(&browser, "dead").await, "2");
    assert!(browser.text("#destination-app").await.contains(&receiver.url));
    assert_eq!(browser.text("#destination-actions tbody").await, "None.");

    // A pause whose form lost its CSRF token is refused and changes nothing.
    browser
        .evaluate(
            "document.querySelector('#pause-app').form.querySelector('[name=csrf]').remove(); return null",
        )
        .await;
    browser.click("#pause-app", "#reason").await;
    assert_eq!(browser.client.title().await.unwrap(), "403 · webhook-inbox");
    assert_eq!(app.count("SELECT count(*) FROM destinations WHERE paused_at IS NOT NULL").await, 0);

    // Pause, then resume: the state the queue reads, and an audit row each.
    browser.open(&format!("{base}/console"), "#pause-app").await;
    browser.click("#pause-app", "#resume-app").await;
    assert!(cell(&browser, "state").await.starts_with("paused"));
    assert!(browser.client.find(Locator::Css("#pause-app")).await.is_err(), "no pause for a paused one");
    assert_eq!(app.count("SELECT count(*) FROM destinations WHERE paused_at IS NOT NULL").await, 1);
    browser.click("#resume-app", "#pause-app").await;
    assert!(cell(&browser, "state").await.starts_with("running"));
    assert_eq!(app.count("SELECT count(*) FROM destinations WHERE paused_at IS NULL").await, 1);
    let actions = browser.text("#destination-actions tbody").await;
    let lines: Vec<&str> = actions.lines().collect();
    assert_eq!(lines.len(), 2, "{actions}");
    assert!(
        lines[0].contains("console session") && lines[0].contains("resume app"),
        "newest first: {actions}"
    );
    assert!(lines[1].contains("pause app") && lines[1].contains("paused"), "{actions}");
    assert_eq!(
        app.count("SELECT count(*) FROM console_audit WHERE destination = 'app' AND action IN ('pause', 'resume') AND actor LIKE 'console session %'").await,
        2
    );

    // Replay the dead jobs: a dry run that writes nothing, then the confirmation.
    browser.click("#replay-dead-app", "#dry-run-count").await;
    assert_eq!(browser.text("#dry-run-count").await, "2");
    assert!(browser.text("#jobs").await.contains("HTTP 500"), "each job's last error");
    assert_eq!(app.count("SELECT count(*) FROM destination_jobs WHERE status = 'dead'").await, 2);
    browser.click("#confirm", "#replay-summary").await;
    assert!(browser.text("#replay-summary").await.starts_with("Done: 2 jobs pending again"));
    assert_eq!(
        jobs(app.pool()).await,
        [("pending".to_string(), 1), ("pending".to_string(), 1), ("pending".to_string(), 0)]
    );
    assert_eq!(
        app.count("SELECT count(*) FROM console_audit WHERE action = 'replay dead' AND job_id IS NOT NULL AND event_id IN ('evt_1', 'evt_2')").await,
        2
    );
    browser.open(&format!("{base}/console"), "#destination-app").await;
    assert_eq!(cell(&browser, "pending").await, "3");
    assert_eq!(cell(&browser, "dead").await, "0");
    assert!(browser.client.find(Locator::Css("#replay-dead-app")).await.is_err(), "nothing dead to replay");
    assert!(browser.text("#destination-actions tbody").await.contains("replay dead job #"));
    drop(browser);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn without_destinations_the_overview_has_no_destinations_panel() {
    let app =
        TestApp::spawn_with(TestConfig { admin_token: Some(ADMIN_TOKEN), ..TestConfig::default() }).await;
    let (server, browser, _) = signed_in(&app).await;
    assert!(browser.client.find(Locator::Css("#destinations-table")).await.is_err());
    drop(browser);
    server.stop().await.unwrap();
}

/// Values that would run script, or inject markup, if a page printed them raw.
const HOSTILE_ID: &str = "msg_<script>alert('id')</script>";
const HOSTILE_TYPE: &str = "\"><img src=x onerror=alert('type')>";

#[tokio::test]
async fn an_events_jobs_and_a_hostile_receivers_answers_show_as_text_and_a_job_is_replayed_from_its_page() {
    let receiver = Answering::start(StatusCode::BAD_GATEWAY, HOSTILE_BODY).await;
    let app = console_forwarding_to(&receiver.url).await;
    let answer = app.send(&standard(STANDARD_SENDER, HOSTILE_ID, &standard_event(HOSTILE_TYPE))).await;
    assert!(answer.status.is_success(), "{answer:?}");
    // Another provider's event under the same id: its job is not this event's.
    deliver(&app, HOSTILE_ID, "ctm_1", 1).await;
    attempt_due_jobs(&app).await;
    let (id, job): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT min(id) FROM webhook_events), (SELECT min(id) FROM destination_jobs WHERE status = 'dead')",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    let (server, browser, base) = signed_in(&app).await;

    // The job, its attempt: number, time, duration, status and error, the
    // start of the body, all as text.
    browser.open(&format!("{base}/console/events/{id}"), &format!("#job-{job}")).await;
    assert_nothing_injected(&browser, "the event's page").await;
    assert_eq!(browser.client.find_all(Locator::Css("#forwarding .job")).await.unwrap().len(), 1, "one job");
    let heading = browser.text(&format!("#job-{job} h3")).await;
    assert!(heading.starts_with("→ app: dead") && heading.contains("1 attempt"), "{heading}");
    let attempts =
        browser.client.find_all(Locator::Css(&format!("#job-{job} .attempts tbody tr"))).await.unwrap();
    assert_eq!(attempts.len(), 1);
    let cells = attempts[0].find_all(Locator::Css("td")).await.unwrap();
    assert_eq!(cells[0].text().await.unwrap(), "1", "the attempt's number");
    assert!(cells[1].text().await.unwrap().starts_with(&Utc::now().format("%Y-%m-%d").to_string()));
    assert!(cells[2].text().await.unwrap().ends_with(" ms"), "its duration");
    assert_eq!(cells[3].text().await.unwrap(), "502: HTTP 502 Bad Gateway");
    let body = cells[4].text().await.unwrap();
    assert!(body.starts_with("<script>document.title='pwned';alert('body')</script>"), "as text: {body}");
    assert!(body.contains("\"><img src=x onerror=alert('img')>"), "as text: {body}");
    assert!(browser.text("#event-id").await.contains(HOSTILE_ID));

    // Replay it from its page: pending again, and the replay in the audit.
    browser.click(&format!("#replay-{job}"), &format!("#job-{job} .job-status.pending")).await;
    assert_eq!(browser.path().await, format!("/console/events/{id}"));
    let audit = browser.text("#audit").await;
    assert!(audit.contains(&format!("replay job #{job} to app")) && audit.contains("pending"), "{audit}");
    assert!(
        browser.client.find(Locator::Css(&format!("#replay-{job}"))).await.is_err(),
        "pending: not replayed"
    );
    assert_eq!(jobs(app.pool()).await, [("pending".to_string(), 1), ("dead".to_string(), 1)]);
    assert_eq!(
        app.count("SELECT count(*) FROM console_audit WHERE action = 'replay' AND destination = 'app' AND archive_id IS NULL").await,
        1
    );

    // The second attempt, answered the same, is listed after the first.
    attempt_due_jobs(&app).await;
    browser.open(&format!("{base}/console/events/{id}"), &format!("#replay-{job}")).await;
    let attempts =
        browser.client.find_all(Locator::Css(&format!("#job-{job} .attempts tbody tr"))).await.unwrap();
    assert_eq!(attempts.len(), 2);
    assert!(attempts[1].text().await.unwrap().starts_with("2 "));
    assert_nothing_injected(&browser, "the event's page").await;

    // Dead again: the dead jobs' page and the overview show its values as text.
    browser.open(&format!("{base}/console/destinations/app/replay-dead"), "#jobs").await;
    assert_nothing_injected(&browser, "the dead jobs' page").await;
    let listed = browser.text("#jobs tbody").await;
    assert!(listed.contains(HOSTILE_TYPE) && listed.contains(HOSTILE_ID), "as text: {listed}");
    browser.open(&format!("{base}/console"), "#destination-actions").await;
    assert_nothing_injected(&browser, "the overview").await;
    assert!(browser.text("#destination-actions").await.contains(&format!("replay job #{job} of app")));
    drop(browser);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn the_events_list_is_filtered_by_a_time_range_held_in_the_url() {
    let app =
        TestApp::spawn_with(TestConfig { admin_token: Some(ADMIN_TOKEN), ..TestConfig::default() }).await;
    for (n, days) in [(1, 10), (2, 5), (3, 0)] {
        app.send(&paddle(&subscription_created(&format!("evt_{n}"), &format!("sub_{n}")))).await;
        let id = *app.archive_ids().await.last().unwrap();
        app.age_rows(&[id], days).await;
    }
    let (server, browser, base) = signed_in(&app).await;

    browser.open(&format!("{base}/console/events"), "#filters").await;
    browser.fill("input[name=since]", "7d").await;
    browser.fill("input[name=until]", "1d").await;
    browser.click("#apply-filters", "#events tbody tr").await;
    assert_eq!(
        browser.path().await,
        "/console/events?status=&provider=&type=&since=7d&until=1d&event_id=&where="
    );
    let rows = browser.text("#events tbody").await;
    assert!(rows.contains("evt_2") && !rows.contains("evt_1") && !rows.contains("evt_3"), "{rows}");
    assert_eq!(
        browser.evaluate("return document.querySelector('input[name=until]').value").await,
        Value::from("1d"),
        "the form shows the range it applied"
    );

    // An RFC 3339 bound, shared as a link, and a bad one refused.
    let until = (Utc::now() - chrono::TimeDelta::days(7)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    browser.open(&format!("{base}/console/events?until={until}"), "#events tbody tr").await;
    let rows = browser.text("#events tbody").await;
    assert!(rows.contains("evt_1") && !rows.contains("evt_2"), "{rows}");
    browser.open(&format!("{base}/console/events?until=yesterday"), "#reason").await;
    assert!(browser.text("#reason").await.contains("invalid filter"));
    drop(browser);
    server.stop().await.unwrap();
}
