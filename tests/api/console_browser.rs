//! The console in a real browser (headless Chromium over WebDriver, see
//! `support/browser.rs`) against the app on a real socket: what an operator
//! sees and does, and what a hostile payload cannot do.
//!
//! With `CONSOLE_SCREENSHOTS=<folder>` set, the overview and event pages are
//! saved there as PNGs (`scripts/screenshots` writes docs/console.md's, `docs/`).

use serde_json::{Value, json};

use crate::support::browser::Browser;
use crate::support::console::ADMIN_TOKEN;
use crate::support::forwarding;
use crate::support::*;

async fn console_app() -> TestApp {
    TestApp::spawn_with(TestConfig { admin_token: Some(ADMIN_TOKEN), ..TestConfig::default() }).await
}

/// Keeps `png` as `<name>.png` in `CONSOLE_SCREENSHOTS`, when set.
fn keep_screenshot(name: &str, png: &[u8]) {
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    if let Some(folder) = std::env::var_os("CONSOLE_SCREENSHOTS") {
        std::fs::write(std::path::Path::new(&folder).join(format!("{name}.png")), png).unwrap();
    }
}

/// A day of traffic for the overview: deliveries of three providers, some
/// retried, spread over the last 24 hours.
async fn a_days_traffic(app: &TestApp) {
    for i in 0..40 {
        let event = subscription_created(&format!("evt_day_{i:02}"), &format!("sub_day_{i:02}"));
        app.send(&paddle(&event)).await;
        if i % 3 == 0 {
            app.send(&paddle(&event)).await;
        }
        app.send(&clerk(&format!("msg_day_{i:02}"), &user_created(&format!("user_day_{i:02}")))).await;
        if i % 4 == 0 {
            app.send(&stripe(&stripe_event(&format!("evt_stripe_{i:02}"), "invoice.paid"))).await;
        }
    }
    // Spread over the day: row n is n × 17 minutes old (mod 24 h).
    sqlx::query(
        "UPDATE webhook_events SET created_at = now() - make_interval(mins => ((id * 17) % 1430 + 5)::int)",
    )
    .execute(app.pool())
    .await
    .unwrap();
}

#[tokio::test]
async fn an_operator_finds_a_failed_event_fixes_the_cause_and_reprocesses_it_to_one_effect() {
    // A destination wanting Paddle's and Clerk's events, which nothing sends
    // to here: the overview shows its backlog.
    let app = TestApp::spawn_with(TestConfig {
        admin_token: Some(ADMIN_TOKEN),
        destinations: Some(forwarding::destination("http://127.0.0.1:9/webhooks/inbox", "")),
        send_forwards: false,
        ..TestConfig::default()
    })
    .await;
    a_days_traffic(&app).await;
    app.refuse_inserts_into("credit_grants").await;
    app.send(&paddle(&subscription_created("evt_broken", "sub_broken"))).await;
    let server = app.listen().await;
    let base = format!("http://{}", server.addr);
    let browser = Browser::start().await;

    browser.sign_in(&base, ADMIN_TOKEN).await;
    assert_eq!(browser.text("#unapplied-failed .number").await, "1");
    assert!(browser.text("#provider-paddle").await.contains("ago"), "the time since paddle's last delivery");
    assert_eq!(browser.client.find_all(fantoccini::Locator::Css("#chart svg path")).await.unwrap().len(), 3);
    let jobs = app.count("SELECT count(*) FROM destination_jobs WHERE status = 'pending'").await;
    assert_eq!(browser.text("#destination-app td.pending").await, jobs.to_string());
    keep_screenshot("console-overview", &browser.screenshot().await);

    // The FAILED event is listed with its error.
    browser.click("#unapplied-failed", "#events tbody tr").await;
    assert_eq!(browser.path().await, "/console/events?status=FAILED");
    let rows = browser.client.find_all(fantoccini::Locator::Css("#events tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 1);
    let row = rows[0].text().await.unwrap();
    assert!(row.contains("FAILED") && row.contains("evt_broken"), "{row}");
    assert!(row.contains("credit_grants closed for maintenance"), "the error, on the row: {row}");

    // Open it: the error, the payload, no effect yet.
    browser.click("#events tbody tr a", "#status").await;
    assert_eq!(browser.text("#status").await, "FAILED");
    assert!(browser.text("#error").await.contains("credit_grants closed for maintenance"));
    assert!(browser.text("#payload pre").await.contains("\"event_id\": \"evt_broken\""), "pretty-printed");
    assert_eq!(browser.text("#applied").await, "no");

    // The cause is fixed; reprocess: the new row is PROCESSED with one grant.
    app.allow_inserts_into("credit_grants").await;
    browser.click("#reprocess", "#grants").await;
    assert_eq!(browser.text("#status").await, "PROCESSED");
    assert!(browser.text("#applied").await.starts_with("yes"));
    let grants = browser.client.find_all(fantoccini::Locator::Css("#grants .grant")).await.unwrap();
    assert_eq!(grants.len(), 1);
    assert!(grants[0].text().await.unwrap().contains("subscription:sub_broken:initial: 200 credits"));
    let attempts = browser.text("#attempts").await;
    assert!(attempts.contains("FAILED") && attempts.contains("PROCESSED"), "{attempts}");
    let audit = browser.text("#audit").await;
    assert!(audit.contains("console session") && audit.contains("reprocess"), "{audit}");
    let job = browser.text("#forwarding .job h3").await;
    assert!(job.starts_with("→ app: pending"), "applied now, so forwarded: {job}");
    keep_screenshot("console-event", &browser.screenshot().await);

    let grants: i64 =
        app.count("SELECT count(*) FROM credit_grants WHERE cause = 'subscription:sub_broken:initial'").await;
    assert_eq!(grants, 1, "one effect");
    assert_eq!(app.count("SELECT count(*) FROM console_audit WHERE event_id = 'evt_broken'").await, 1);
    drop(browser);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_bulk_reprocess_shows_the_dry_run_count_then_reprocesses_on_confirmation() {
    let app = console_app().await;
    app.refuse_inserts_into("credit_grants").await;
    for i in 0..3 {
        let event = subscription_created(&format!("evt_{i}"), &format!("sub_{i}"));
        app.send(&paddle(&event)).await;
        app.send(&paddle(&event)).await; // a retry: two FAILED rows, one event
    }
    app.allow_inserts_into("credit_grants").await;
    // A fourth failed, then its retry was applied: nothing to do for it.
    app.refuse_inserts_into("credit_grants").await;
    app.send(&paddle(&subscription_created("evt_retried", "sub_retried"))).await;
    app.allow_inserts_into("credit_grants").await;
    app.send(&paddle(&subscription_created("evt_retried", "sub_retried"))).await;
    let rows_before = app.archive_ids().await.len();
    let server = app.listen().await;
    let base = format!("http://{}", server.addr);
    let browser = Browser::start().await;
    browser.sign_in(&base, ADMIN_TOKEN).await;

    browser.open(&format!("{base}/console/events?provider=paddle&status=FAILED"), "#bulk").await;
    browser.click("#bulk", "#dry-run-count").await;
    assert_eq!(browser.text("#dry-run-count").await, "3");
    assert_eq!(app.archive_ids().await.len(), rows_before, "a dry run writes nothing");

    browser.click("#confirm", "#bulk-summary").await;
    assert_eq!(
        browser.text("#bulk-summary").await,
        "Done: 3 processed, 0 skipped (already applied), 0 failed again."
    );
    assert_eq!(app.count("SELECT count(*) FROM credit_grants").await, 4, "one grant per event");
    assert_eq!(app.count("SELECT count(*) FROM console_audit WHERE action = 'bulk reprocess'").await, 3);
    drop(browser);
    server.stop().await.unwrap();
}

/// Values that would run script, or inject markup, if a page printed them raw.
const HOSTILE: [&str; 4] = [
    "<script>document.title='pwned';alert('script')</script>",
    "\"><img src=x onerror=alert('img')>",
    "javascript:alert('link')",
    "'><svg onload=alert('svg')>",
];

#[tokio::test]
async fn a_hostile_payload_renders_as_text_runs_no_script_and_opens_no_dialog() {
    let app = console_app().await;
    let hostile_type = HOSTILE[1];
    let mut event = standard_event(hostile_type);
    event["data"] =
        json!({ "name": HOSTILE[0], "url": HOSTILE[2], "note": HOSTILE[3], HOSTILE[1]: HOSTILE[0] });
    let answer = app.send(&standard(STANDARD_SENDER, "msg_<script>alert('id')</script>", &event)).await;
    assert!(answer.status.is_success(), "{answer:?}");
    let id = app.archive_ids().await[0];
    let server = app.listen().await;
    let base = format!("http://{}", server.addr);
    let browser = Browser::start().await;
    browser.sign_in(&base, ADMIN_TOKEN).await;

    let type_filter = serde_urlencoded::to_string([("type", hostile_type)]).unwrap();
    for (path, shows) in [
        (format!("/console/events/{id}"), "#payload pre"),
        ("/console/events".to_string(), "#events tbody tr"),
        (format!("/console/events?{type_filter}"), "#events tbody tr"),
    ] {
        browser.open(&format!("{base}{path}"), shows).await;
        browser.assert_no_dialog().await;
        assert_ne!(browser.client.title().await.unwrap(), "pwned", "{path}");
        let injected = browser
            .evaluate(
                "return document.querySelectorAll('script, img, iframe, object, embed, main svg').length",
            )
            .await;
        assert_eq!(injected, Value::from(0), "{path}: no element came from the payload");
        let links = browser
            .evaluate("return [...document.querySelectorAll('a')].filter(a => !a.getAttribute('href').startsWith('/console')).length")
            .await;
        assert_eq!(links, Value::from(0), "{path}: every link stays in the console");
        let text = browser.text("main").await;
        assert!(text.contains(hostile_type), "{path}: shown as text");
    }
    browser.open(&format!("{base}/console/events/{id}"), "#payload pre").await;
    let payload = browser.text("#payload pre").await;
    for value in HOSTILE {
        assert!(payload.contains(value), "{value} shown as text in {payload}");
    }
    assert!(browser.text("#event-id").await.contains("<script>alert('id')</script>"));
    drop(browser);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn without_a_session_the_browser_is_sent_to_sign_in_and_back_to_the_page_it_asked_for() {
    let app = console_app().await;
    let server = app.listen().await;
    let base = format!("http://{}", server.addr);
    let browser = Browser::start().await;

    for path in ["/console", "/console/events?status=FAILED", "/console/reprocess?status=FAILED"] {
        browser.open(&format!("{base}{path}"), "#token").await;
        assert!(browser.path().await.starts_with("/console/sign-in?next="), "{path}");
    }
    // Signing in returns to the page asked for last.
    browser.fill("#token", ADMIN_TOKEN).await;
    browser.click("#sign-in", "#dry-run-count").await;
    assert_eq!(browser.path().await, "/console/reprocess?status=FAILED");
    assert!(browser.cookie("console_session").await.is_some());

    // Sign out: the session ends, the next page asks to sign in again.
    browser.click(".sign-out button", "#token").await;
    browser.open(&format!("{base}/console/events"), "#token").await;
    assert_eq!(app.count("SELECT count(*) FROM console_sessions").await, 0);

    // A wrong token is refused.
    browser.fill("#token", "not-the-admin-token").await;
    browser.click("#sign-in", "#sign-in-error").await;
    assert!(browser.cookie("console_session").await.is_none());
    drop(browser);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_form_stripped_of_its_csrf_token_is_refused_in_the_browser() {
    let app = console_app().await;
    app.refuse_inserts_into("credit_grants").await;
    app.send(&paddle(&subscription_created("evt_01", "sub_01"))).await;
    app.allow_inserts_into("credit_grants").await;
    let id = app.archive_ids().await[0];
    let server = app.listen().await;
    let base = format!("http://{}", server.addr);
    let browser = Browser::start().await;
    browser.sign_in(&base, ADMIN_TOKEN).await;

    browser.open(&format!("{base}/console/events/{id}"), "#reprocess").await;
    browser.evaluate("document.querySelector('form.action input[name=csrf]').remove(); return null").await;
    browser.click("#reprocess", "#reason").await;
    assert_eq!(browser.client.title().await.unwrap(), "403 · webhook-inbox");
    assert_eq!(app.archive_statuses().await, ["FAILED"], "nothing was reprocessed");

    browser.open(&format!("{base}/console/events/{id}"), "#reprocess").await;
    browser
        .evaluate("document.querySelector('form.action input[name=csrf]').value = 'forged'; return null")
        .await;
    browser.click("#reprocess", "#reason").await;
    assert_eq!(app.archive_statuses().await, ["FAILED"], "nothing was reprocessed");
    drop(browser);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn without_an_admin_token_the_browser_finds_no_console() {
    let app = TestApp::spawn().await;
    let server = app.listen().await;
    let browser = Browser::start().await;
    browser.open(&format!("http://{}/console", server.addr), "body").await;
    assert!(browser.text("body").await.contains("not found"));
    browser.open(&format!("http://{}/console/sign-in", server.addr), "body").await;
    assert!(browser.text("body").await.contains("not found"));
    assert!(browser.client.find(fantoccini::Locator::Css("#token")).await.is_err());
    drop(browser);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn an_operator_finds_a_customers_events_by_a_payload_value_typed_into_the_filter() {
    let app = console_app().await;
    for (event_id, customer) in [("evt_a1", "ctm_A"), ("evt_b1", "ctm_B"), ("evt_a2", "ctm_A")] {
        let mut event = subscription_created(event_id, &format!("sub_{event_id}"));
        event["data"]["customer_id"] = json!(customer);
        app.send(&paddle(&event)).await;
    }
    let server = app.listen().await;
    let base = format!("http://{}", server.addr);
    let browser = Browser::start().await;
    browser.sign_in(&base, ADMIN_TOKEN).await;

    browser.open(&format!("{base}/console/events"), "#events tbody tr").await;
    browser.fill("#where", "data.customer_id=ctm_A").await;
    // The link that clears the filters shows only on a filtered page.
    browser.click("#apply-filters", "#filters a[href='/console/events']").await;
    let rows = browser.client.find_all(fantoccini::Locator::Css("#events tbody tr")).await.unwrap();
    let mut shown = Vec::new();
    for row in rows {
        shown.push(row.text().await.unwrap());
    }
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(shown[0].contains("evt_a2") && shown[1].contains("evt_a1"), "newest first: {shown:?}");
    // The condition stays in the form, and a second one narrows it.
    let kept = browser.evaluate("return document.querySelector('input[name=where]').value").await;
    assert_eq!(kept, Value::from("data.customer_id=ctm_A"));
    browser.fill("#where", "data.id=sub_evt_a1").await;
    browser.click("#apply-filters", "#events").await;
    let conditions = "return document.querySelectorAll('input[name=where]').length";
    let next_page = async {
        // Two conditions kept, and the empty input for a third.
        while browser.evaluate(conditions).await != 3 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), next_page).await.expect("the narrowed page");
    let narrowed = browser.client.find_all(fantoccini::Locator::Css("#events tbody tr")).await.unwrap();
    assert_eq!(narrowed.len(), 1);
    assert!(narrowed[0].text().await.unwrap().contains("evt_a1"));

    // A malformed condition is refused with its reason; a hostile value
    // matches nothing and is shown as text.
    browser.open(&format!("{base}/console/events?where=data..id%3Dx"), "main").await;
    assert!(browser.text("main").await.contains("none empty"), "{}", browser.text("main").await);
    let hostile = serde_urlencoded::to_string([("where", format!("data.id={}", HOSTILE[1]))]).unwrap();
    browser.open(&format!("{base}/console/events?{hostile}"), "#filters").await;
    browser.assert_no_dialog().await;
    let injected = browser.evaluate("return document.querySelectorAll('main img, main script').length").await;
    assert_eq!(injected, Value::from(0));
    let shown = browser.evaluate("return document.querySelector('input[name=where]').value").await;
    assert_eq!(shown, Value::from(format!("data.id={}", HOSTILE[1])));
    drop(browser);
    server.stop().await.unwrap();
}
