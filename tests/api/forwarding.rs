//! Forwarding to the team's application, against real receivers on loopback
//! whose signature check is the `standardwebhooks` crate's: each event
//! arrives once when the receiver answers 2xx, byte for byte, signed; a
//! failure (500, timeout, refused connection) is retried until the receiver
//! recovers, then the event arrives once more and is done.

use chrono::Utc;
use webhook_inbox::queue::Tally;

use crate::support::forwarding::*;
use crate::support::receiver::{Answer, Receiver};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_arrives_once_byte_for_byte_with_headers_an_independent_verifier_accepts() {
    // During a rotation both secrets sign; the app still holds the old one.
    let receiver = Receiver::start(OLD_SECRET).await;
    let app = sending_app(format!(
        "[[destinations]]\nname = \"app\"\nurl = \"{}\"\nsecret = [\"{SECRET}\", \"{OLD_SECRET}\"]\nevents = [\"paddle:customer.*\"]\n",
        receiver.url()
    ))
    .await;
    let sent = body("evt_1", "ctm_A", 1);

    assert_eq!(app.send(&paddle_raw(&sent)).await.body["status"], "processed");
    let arrival = receiver.until_arrivals(1).await.remove(0);
    assert_eq!(until_settled(app.pool()).await, [("sent".to_string(), 1)]);

    assert_eq!(arrival.verified, Ok(()), "the standardwebhooks crate accepts the signature");
    assert_eq!(&arrival.body[..], sent.as_bytes(), "the provider's bytes, not the archive's jsonb");
    assert_eq!(arrival.header("webhook-signature").split(' ').count(), 2, "one signature per secret");
    assert!(arrival.header("webhook-id").starts_with("msg_"));
    assert_eq!(arrival.header("webhook-inbox-provider"), "paddle");
    assert_eq!(arrival.header("webhook-inbox-event-type"), "customer.updated");
    assert_eq!(arrival.header("webhook-inbox-event-id"), "evt_1");
    assert_eq!(arrival.header("webhook-inbox-attempt"), "1");
    assert_eq!(arrival.header("webhook-inbox-occurred-at"), "2024-04-01T10:00:00.000Z");
    assert_eq!(arrival.header("content-type"), "application/json");
    let attempts: Vec<(i32, Option<i16>, Option<String>)> =
        sqlx::query_as("SELECT attempt, status_code, error FROM destination_attempts")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(attempts, [(1, Some(200), None)]);
    assert_eq!(receiver.arrivals().len(), 1, "sent once");
}

#[tokio::test]
async fn failures_are_retried_on_the_schedule_and_the_event_arrives_once_it_is_accepted() {
    let receiver = Receiver::start(SECRET).await;
    let app = forwarding_app(destination(&receiver.url(), "retry_schedule = [\"1m\", \"1m\", \"1m\"]")).await;
    deliver(&app, "evt_1", "ctm_A", 1).await;
    let queue = queue(&app, "app");
    // An answer's body is recorded up to its first KiB.
    let long_body: &'static str = "e".repeat(3 * 1024).leak();
    receiver.answer_next([Answer::Body(500, long_body), Answer::Status(502)]);
    let now = Utc::now();

    assert_eq!(
        send_due(app.pool(), &queue, now).await,
        Tally { claimed: 1, retrying: 1, ..Tally::default() }
    );
    // A minute ±20 % later: not before 48 s, surely by 73 s.
    assert_eq!(send_due(app.pool(), &queue, now + chrono::Duration::seconds(47)).await, Tally::default());
    assert_eq!(send_due(app.pool(), &queue, now + chrono::Duration::seconds(73)).await.retrying, 1);
    let round3 = send_due(app.pool(), &queue, now + chrono::Duration::seconds(146)).await;
    assert_eq!(round3, Tally { claimed: 1, sent: 1, ..Tally::default() });
    assert_eq!(send_due(app.pool(), &queue, now + chrono::Duration::days(1)).await, Tally::default());

    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.iter().map(|a| a.answered).collect::<Vec<_>>(), [500, 502, 200]);
    let ids: Vec<&str> = arrivals.iter().map(|a| a.header("webhook-id")).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "one webhook-id for every attempt: {ids:?}");
    assert_eq!(
        arrivals.iter().map(|a| a.header("webhook-inbox-attempt")).collect::<Vec<_>>(),
        ["1", "2", "3"]
    );
    assert!(arrivals.iter().all(|a| a.verified.is_ok()));
    let recorded: Vec<(i32, Option<i16>, Option<String>)> =
        sqlx::query_as("SELECT attempt, status_code, error FROM destination_attempts ORDER BY attempt")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(
        recorded,
        [
            (1, Some(500), Some("HTTP 500 Internal Server Error".into())),
            (2, Some(502), Some("HTTP 502 Bad Gateway".into())),
            (3, Some(200), None)
        ]
    );
    let kept: Vec<String> =
        sqlx::query_scalar("SELECT response_body FROM destination_attempts ORDER BY attempt")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(kept, [&long_body[..1024], "", ""], "the first KiB of each answer's body");
    assert_eq!(jobs(app.pool()).await, [("sent".to_string(), 3)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_does_not_answer_in_time_is_a_failed_attempt_and_the_retry_arrives() {
    let receiver = Receiver::start(SECRET).await;
    receiver.answer_next([Answer::Hang]);
    let app =
        sending_app(destination(&receiver.url(), "timeout = \"300ms\"\nretry_schedule = [\"10ms\"]")).await;
    deliver(&app, "evt_1", "ctm_A", 1).await;

    let arrivals = receiver.until_arrivals(2).await;
    assert_eq!(until_settled(app.pool()).await, [("sent".to_string(), 2)]);
    receiver.release();

    assert_eq!(arrivals[0].header("webhook-id"), arrivals[1].header("webhook-id"));
    let error: Option<String> =
        sqlx::query_scalar("SELECT error FROM destination_attempts WHERE attempt = 1")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(error.as_deref(), Some("no answer within 300ms"));
}

#[tokio::test]
async fn a_refused_connection_is_retried_until_the_receiver_is_up() {
    // A port nobody listens on, until the receiver starts on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let app =
        forwarding_app(destination(&format!("http://{port}/webhooks/inbox"), "retry_schedule = [\"1m\"]"))
            .await;
    deliver(&app, "evt_1", "ctm_A", 1).await;
    let queue = queue(&app, "app");
    let now = Utc::now();

    assert_eq!(send_due(app.pool(), &queue, now).await.retrying, 1);
    let error: String =
        sqlx::query_scalar("SELECT last_error FROM destination_jobs").fetch_one(app.pool()).await.unwrap();
    assert!(error.contains("Connection refused") || error.contains("connect"), "{error}");

    let receiver = Receiver::start_on(port, SECRET).await;
    assert_eq!(send_due(app.pool(), &queue, now + chrono::Duration::seconds(73)).await.sent, 1);
    assert_eq!(receiver.arrivals().len(), 1);
    assert_eq!(receiver.arrivals()[0].header("webhook-inbox-attempt"), "2");
}

#[tokio::test]
async fn retry_after_on_429_and_503_decides_when_the_next_attempt_is_due() {
    let receiver = Receiver::start(SECRET).await;
    let app = forwarding_app(destination(&receiver.url(), "retry_schedule = [\"1s\", \"1s\", \"1s\"]")).await;
    deliver(&app, "evt_1", "ctm_A", 1).await;
    let queue = queue(&app, "app");
    receiver.answer_next([
        Answer::RetryAfter(429, "120"),
        Answer::RetryAfter(503, "30"),
        Answer::RetryAfter(500, "600"),
    ]);
    let now = Utc::now();
    let due = || async {
        sqlx::query_scalar::<_, f64>(
            "SELECT extract(epoch FROM next_attempt_at)::float8 FROM destination_jobs",
        )
        .fetch_one(app.pool())
        .await
        .unwrap()
    };
    // Seconds from `now` to the next attempt. A retry counts from the end
    // of the send, which takes real time on a loaded machine, so each
    // window allows 5 s past its earliest instant.
    let waits =
        |round_at: i64| async move { due().await - now.timestamp_micros() as f64 / 1e6 - round_at as f64 };
    let within = |low: f64, wait: f64| (low..low + 5.0).contains(&wait);

    send_due(app.pool(), &queue, now).await;
    let wait = waits(0).await;
    assert!(within(120.0, wait), "429 with Retry-After: 120 s, not the schedule's 1 s; waits {wait}");
    assert_eq!(send_due(app.pool(), &queue, now + chrono::Duration::seconds(119)).await, Tally::default());

    send_due(app.pool(), &queue, now + chrono::Duration::seconds(130)).await;
    let wait = waits(130).await;
    assert!(within(30.0, wait), "503 with Retry-After: 30 s; waits {wait}");

    send_due(app.pool(), &queue, now + chrono::Duration::seconds(170)).await;
    let wait = waits(170).await;
    // The schedule's 1 s, with its 20 % jitter.
    assert!(within(0.8, wait), "a 500 keeps the schedule whatever it asks; waits {wait}");
}

#[tokio::test]
async fn a_410_disables_the_destination_and_its_jobs_wait_until_it_is_resumed() {
    let receiver = Receiver::start(SECRET).await;
    let app = forwarding_app(destination(&receiver.url(), "retry_schedule = [\"1s\"]")).await;
    for n in 1..=3 {
        deliver(&app, &format!("evt_{n}"), "ctm_A", n).await;
    }
    let queue = queue(&app, "app");
    receiver.answer_next([Answer::Status(410)]);
    let now = Utc::now();

    // The first attempt is answered 410; the other two went in the same
    // claim and arrive, but nothing is claimed after it.
    assert_eq!(send_due(app.pool(), &queue, now).await.claimed, 3);
    let disabled: Option<chrono::DateTime<Utc>> =
        sqlx::query_scalar("SELECT disabled_at FROM destinations WHERE name = 'app'")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert!(disabled.is_some());
    assert_eq!(send_due(app.pool(), &queue, now + chrono::Duration::hours(1)).await, Tally::default());
    assert_eq!(app.count("SELECT count(*) FROM destination_jobs WHERE status = 'pending'").await, 1);

    webhook_inbox::destinations::store::state::resume(app.pool(), "app").await.unwrap();
    assert_eq!(send_due(app.pool(), &queue, now + chrono::Duration::hours(1)).await.sent, 1);
    assert_eq!(app.count("SELECT count(*) FROM destination_jobs WHERE status = 'sent'").await, 3);
}
