//! SIGTERM while the outbox worker is busy: it claims nothing new once the
//! signal arrives, a send stuck in a hanging SMTP server does not keep the
//! process past its grace period, and the email cut off still goes out.

use std::time::{Duration, Instant};

use crate::support::provider::{attempt, spawn_attempt};
use crate::support::service::database_url;
use crate::support::watch::{Gate, until, until_waiting_on, waiting_on};
use crate::support::*;

/// What a process may take past its grace period to exit.
const MARGIN: Duration = Duration::from_millis(500);

/// The outbox worker on `smtp`, looking for emails every 10 ms (set by the
/// setting's old name, which stays an alias of QUEUE_POLL_INTERVAL_MS), and
/// the shutdown grace period. SMTP_TIMEOUT_SECS keeps its default, 30 s: one
/// stuck send outlasts the grace period.
fn env<'a>(smtp_url: &'a str, grace_secs: &'a str) -> [(&'a str, &'a str); 4] {
    [
        ("SMTP_URL", smtp_url),
        ("SMTP_FROM", "Acme <noreply@acme.example>"),
        ("OUTBOX_POLL_INTERVAL_MS", "10"),
        ("SHUTDOWN_GRACE_SECS", grace_secs),
    ]
}

/// The outbox's only row: status, attempts, and whether it is leased now.
async fn the_email(db: &TestDatabase) -> (String, i32, bool) {
    sqlx::query_as("SELECT status, attempts, coalesce(locked_until > now(), false) FROM outbox")
        .fetch_one(db.pool())
        .await
        .unwrap()
}

/// Polls until the outbox's only row is marked sent.
async fn until_sent(db: &TestDatabase) -> (String, i32, bool) {
    until("the email marked sent", async || the_email(db).await.0 == "sent").await;
    the_email(db).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_send_to_a_hanging_smtp_server_exits_within_the_grace_period_and_the_email_goes_out_later()
 {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    let smtp = SmtpServer::start().await;
    let smtp_url = smtp.url();
    let grace = Duration::from_secs(2);
    let grace_secs = grace.as_secs().to_string();
    let env = env(&smtp_url, &grace_secs);
    smtp.stall(true);
    let mut service = Service::start(&url, &env).await;
    let created = attempt(service.addr, &clerk("msg_stalled", &user_created("user_stalled"))).await;
    assert_eq!(created.answer.unwrap().status, 200);
    smtp.until_stalled(1).await;

    let terminated = Instant::now();
    service.terminate();
    let status = service.exited_within(Duration::from_secs(10)).await.expect("exits within 10 s");
    let exited_after = terminated.elapsed();
    assert!(exited_after < grace + MARGIN, "exited {exited_after:?} after SIGTERM, grace {grace:?}");
    assert!(!status.success(), "a send was abandoned, yet the exit status is {status}");
    let logs = service.final_logs();
    assert!(
        logs.iter().any(|line| line.contains("shutdown grace period expired with work in flight")),
        "{logs:#?}"
    );

    // Not lost, not sent: still claimed, under a lease that outlives the process.
    assert_eq!(the_email(&db).await, ("pending".into(), 1, true));
    assert!(smtp.messages().is_empty());

    // Once the lease has run out (twice SMTP_TIMEOUT_SECS plus 10 s; moved
    // to now here rather than waited for), the next process sends it.
    sqlx::query("UPDATE outbox SET locked_until = now()").execute(db.pool()).await.unwrap();
    smtp.stall(false);
    let mut restarted = Service::start(&url, &env).await;
    let messages = smtp.until_received(1).await;
    assert_eq!(until_sent(&db).await, ("sent".into(), 2, false));
    assert_eq!(messages.len(), 1);
    restarted.terminate();
    let clean = restarted.exited_within(Duration::from_secs(10)).await.expect("exits");
    assert!(clean.success(), "{clean}");

    Report {
        fault: "SIGTERM with an email send stuck in a hanging SMTP server",
        events: 1,
        deliveries: 1,
        ledger: None,
        notes: format!(
            "SHUTDOWN_GRACE_SECS={grace_secs}, SMTP_TIMEOUT_SECS at its default, the SMTP server never greets: exited {}ms after \
             SIGTERM, exit code {}; the claim stayed leased, and once it expired the next process sent the \
             email once",
            exited_after.as_millis(),
            status.code().map_or("none (signal)".into(), |code| code.to_string())
        ),
    }
    .print();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_sigterm_the_outbox_worker_claims_nothing_new_while_the_deliveries_in_flight_drain() {
    let db = TestDatabase::create().await;
    let url = database_url(&db.connect_options());
    let smtp = SmtpServer::start().await;
    let smtp_url = smtp.url();
    let env = env(&smtp_url, "60");
    let mut service = Service::start(&url, &env).await;

    // A user.created held in its effect: its email is enqueued when the
    // gate opens, after the signal.
    let gate = Gate::shut(db.pool(), "users", 3).await;
    let held = spawn_attempt(service.addr, &clerk("msg_held", &user_created("user_held")));
    until_waiting_on(db.pool(), "advisory", 1).await;

    service.terminate();
    // The worker stops at the signal, not once the drain is over.
    service.until_logged("outbox worker stopped").await;
    assert_eq!(waiting_on(db.pool(), "advisory").await, 1, "the delivery is still in flight");
    gate.open().await;
    let answer = held.await.unwrap().answer.expect("the held delivery is answered");
    assert_eq!(answer.status, 200);
    let status = service.exited_within(Duration::from_secs(10)).await.expect("exits once drained");
    assert!(status.success(), "{status}");

    // Left for the next process: unclaimed, unsent.
    assert_eq!(the_email(&db).await, ("pending".into(), 0, false));
    assert!(smtp.messages().is_empty());
    let _restarted = Service::start(&url, &env).await;
    smtp.until_received(1).await;
    assert_eq!(until_sent(&db).await, ("sent".into(), 1, false));
}
