//! What governs when forwards go out: the end of the retry schedule (dead),
//! replays, pause and resume, the circuit breaker and the rate limit.

use std::time::Duration;

use chrono::Utc;
use webhook_inbox::client;
use webhook_inbox::destinations::DestinationQueue;
use webhook_inbox::destinations::store::state;
use webhook_inbox::operations::jobs::{self, ReplayError};
use webhook_inbox::queue::{Engine, Tally};

use crate::support::forwarding::*;
use crate::support::receiver::{Answer, Receiver};

#[tokio::test]
async fn past_the_schedule_a_job_is_dead_and_a_replay_sends_it_once_more_with_the_same_webhook_id() {
    let receiver = Receiver::start(SECRET).await;
    let app = forwarding_app(destination(&receiver.url(), "retry_schedule = [\"1m\", \"1m\"]")).await;
    deliver(&app, "evt_1", "ctm_A", 1).await;
    let queue = queue(&app, "app");
    receiver.answer_otherwise(Answer::Status(500));
    let now = Utc::now();
    let at = |secs| now + chrono::Duration::seconds(secs);

    assert_eq!(send_due(app.pool(), &queue, at(0)).await.retrying, 1);
    assert_eq!(send_due(app.pool(), &queue, at(73)).await.retrying, 1);
    assert_eq!(
        send_due(app.pool(), &queue, at(146)).await.dead,
        1,
        "three attempts: the first and two retries"
    );
    assert_eq!(send_due(app.pool(), &queue, at(86_400)).await, Tally::default(), "dead is never tried again");
    assert_eq!(jobs(app.pool()).await, [("dead".to_string(), 3)]);

    receiver.answer_otherwise(Answer::Status(204));
    let id: i64 = sqlx::query_scalar("SELECT id FROM destination_jobs").fetch_one(app.pool()).await.unwrap();
    jobs::replay(app.pool(), id).await.unwrap();
    assert!(
        matches!(jobs::replay(app.pool(), id).await, Err(ReplayError::Pending(_))),
        "a pending job is not replayed"
    );
    // A replayed job is due at once (on the database's clock, a moment ago).
    assert_eq!(send_due(app.pool(), &queue, Utc::now() + chrono::Duration::seconds(1)).await.sent, 1);
    jobs::replay(app.pool(), id).await.unwrap();
    assert_eq!(send_due(app.pool(), &queue, Utc::now() + chrono::Duration::seconds(1)).await.sent, 1);

    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 5, "three failures, then once per replay");
    assert!(arrivals.iter().all(|a| a.header("webhook-id") == arrivals[0].header("webhook-id")));
    assert_eq!(arrivals[4].header("webhook-inbox-attempt"), "5", "attempt numbers count on across replays");
    assert_eq!(
        app.count("SELECT count(*) FROM destination_jobs").await,
        1,
        "a replay never makes a second job"
    );
    assert_eq!(app.count("SELECT count(*) FROM destination_attempts").await, 5, "every attempt recorded");
}

#[tokio::test]
async fn dead_jobs_of_a_time_range_are_listed_by_a_dry_run_then_replayed() {
    let receiver = Receiver::start(SECRET).await;
    let app = forwarding_app(destination(&receiver.url(), "retry_schedule = []")).await;
    for n in 1..=3 {
        deliver(&app, &format!("evt_{n}"), "ctm_A", n).await;
    }
    receiver.answer_otherwise(Answer::Status(500));
    let queue = queue(&app, "app");
    assert_eq!(send_due(app.pool(), &queue, Utc::now()).await.dead, 3);
    // The first one failed long ago, outside the range.
    sqlx::query(
        "UPDATE destination_jobs SET created_at = now() - interval '3 days' WHERE event_id = 'evt_1'",
    )
    .execute(app.pool())
    .await
    .unwrap();
    let since = Some("1d".parse().unwrap());

    let listed =
        jobs::replay_dead(app.pool(), &"app".parse().unwrap(), since, None, 100, true).await.unwrap();
    assert_eq!(listed.iter().map(|j| j.event_id.as_str()).collect::<Vec<_>>(), ["evt_2", "evt_3"]);
    assert_eq!(
        app.count("SELECT count(*) FROM destination_jobs WHERE status = 'dead'").await,
        3,
        "a dry run changes nothing"
    );

    let replayed =
        jobs::replay_dead(app.pool(), &"app".parse().unwrap(), since, None, 100, false).await.unwrap();
    assert_eq!(replayed.len(), 2);
    receiver.answer_otherwise(Answer::Status(200));
    assert_eq!(send_due(app.pool(), &queue, Utc::now() + chrono::Duration::seconds(1)).await.sent, 2);
    assert_eq!(
        jobs::replay_dead(app.pool(), &"app".parse().unwrap(), since, None, 100, false).await.unwrap().len(),
        0
    );
}

#[tokio::test]
async fn a_paused_destination_keeps_its_jobs_and_drains_them_in_order_once_resumed() {
    let receiver = Receiver::start(SECRET).await;
    let app = forwarding_app(destination(&receiver.url(), "concurrency = 1")).await;
    state::pause(app.pool(), "app").await.unwrap();
    for n in 1..=4 {
        deliver(&app, &format!("evt_{n}"), &format!("ctm_{n}"), n).await;
    }
    let queue = queue(&app, "app");
    let now = Utc::now();

    assert_eq!(send_due(app.pool(), &queue, now + chrono::Duration::days(1)).await, Tally::default());
    assert!(receiver.arrivals().is_empty());

    state::resume(app.pool(), "app").await.unwrap();
    assert_eq!(send_due(app.pool(), &queue, now).await, Tally { claimed: 4, sent: 4, ..Tally::default() });
    let order: Vec<String> =
        receiver.arrivals().iter().map(|a| a.header("webhook-inbox-event-id").into()).collect();
    assert_eq!(order, ["evt_1", "evt_2", "evt_3", "evt_4"]);
}

#[tokio::test]
async fn the_circuit_opens_after_consecutive_failures_wastes_no_attempt_while_open_and_closes_after_a_probe()
{
    let receiver = Receiver::start(SECRET).await;
    let app = forwarding_app(destination(
        &receiver.url(),
        "concurrency = 1\nretry_schedule = [\"1s\", \"1s\", \"1s\", \"1s\", \"1s\"]\ncircuit_breaker = { failures = 3, cooldown = \"10m\" }",
    ))
    .await;
    for n in 1..=5 {
        deliver(&app, &format!("evt_{n}"), &format!("ctm_{n}"), n).await;
    }
    let queue = queue(&app, "app");
    receiver.answer_otherwise(Answer::Status(503));
    let now = Utc::now();
    let at = |secs| now + chrono::Duration::seconds(secs);

    // One at a time (concurrency 1): three fail, and the open circuit lets no fourth be claimed.
    assert_eq!(
        send_due(app.pool(), &queue, at(0)).await,
        Tally { claimed: 3, retrying: 3, ..Tally::default() }
    );
    let state: (i32, bool) = sqlx::query_as(
        "SELECT consecutive_failures, circuit_open_until > now() + interval '9 minutes' FROM destinations",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!(state, (3, true), "three failures in a row open it for the cool-down");
    // Open: nothing is claimed, however due, so no attempt is spent.
    assert_eq!(send_due(app.pool(), &queue, at(300)).await, Tally::default());
    assert_eq!(receiver.arrivals().len(), 3);

    // Past the cool-down, one probe; it fails: open again.
    let probe = send_due(app.pool(), &queue, at(601)).await;
    assert_eq!(probe, Tally { claimed: 1, retrying: 1, ..Tally::default() });
    assert_eq!(send_due(app.pool(), &queue, at(602)).await, Tally::default());
    // The next probe succeeds: closed, and the rest flows.
    receiver.answer_otherwise(Answer::Status(200));
    assert_eq!(
        send_due(app.pool(), &queue, at(1300)).await,
        Tally { claimed: 5, sent: 5, ..Tally::default() }
    );
    assert_eq!(receiver.arrivals().len(), 3 + 1 + 5, "no attempt was made while the circuit was open");
    let closed: (i32, Option<chrono::DateTime<Utc>>) =
        sqlx::query_as("SELECT consecutive_failures, circuit_open_until FROM destinations")
            .fetch_one(app.pool())
            .await
            .unwrap();
    assert_eq!(closed, (0, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_rate_limit_holds_across_two_replicas_in_every_window() {
    let receiver = Receiver::start(SECRET).await;
    let (rate, burst) = (20.0, 20.0);
    let app = forwarding_app(destination(&receiver.url(), "rate_limit = 20\nconcurrency = 50")).await;
    for n in 0..80 {
        deliver(&app, &format!("evt_{n}"), &format!("ctm_{n}"), n).await;
    }
    // Two replicas, each with its own engine and pool, one bucket.
    let declaration = &app.state.forwarding.declaration;
    let (replica, _) = app.replica().await;
    let (first, _a) = run(app.pool(), declaration).await;
    let (second, _b) = run(&replica.pool, declaration).await;
    until_settled(app.pool()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    assert!(first.stop(deadline).await && second.stop(deadline).await);

    // The claims' times (the attempts' attempted_at), whatever the machine's
    // load: at most `burst + rate × t` in any window of t seconds.
    let times: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM attempted_at)::float8 FROM destination_attempts ORDER BY attempted_at",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();
    assert_eq!(times.len(), 80);
    for (i, start) in times.iter().enumerate() {
        for (j, end) in times.iter().enumerate().skip(i) {
            let in_window = (j - i + 1) as f64;
            assert!(
                in_window <= burst + rate * (end - start) + 1e-6,
                "{in_window} attempts in {} s",
                end - start
            );
        }
    }
    assert_eq!(receiver.arrivals().len(), 80);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_claimed_ahead_go_back_unsent_when_the_engine_stops_and_are_sent_once_after() {
    let receiver = Receiver::start(SECRET).await;
    let app = forwarding_app(destination(&receiver.url(), "concurrency = 1")).await;
    for n in 1..=5 {
        deliver(&app, &format!("evt_{n}"), &format!("ctm_{n}"), n).await;
    }
    receiver.answer_otherwise(Answer::Hang);
    let declaration = &app.state.forwarding.declaration;
    let mut engine = Engine::new(app.pool().clone(), Duration::from_millis(20));
    engine.spawn(DestinationQueue::new(declaration.get("app").unwrap().clone(), client::build(), None));

    // One in flight, held by the receiver; the other four claimed ahead, waiting.
    receiver.until_held(1).await;
    let leased = "SELECT count(*) FROM destination_jobs WHERE locked_until IS NOT NULL";
    for _ in 0..1000 {
        if app.count(leased).await == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(app.count(leased).await, 5, "the four behind the one in flight are claimed ahead");

    // Stopped, the held send is abandoned past the deadline; the waiting four go back.
    assert!(!engine.stop(tokio::time::Instant::now() + Duration::from_secs(2)).await);
    assert_eq!(receiver.arrivals().len(), 1, "no job claimed ahead was sent");
    assert_eq!(
        app.count("SELECT count(*) FROM destination_jobs WHERE locked_until IS NULL AND claim_token IS NULL AND attempts = 0")
            .await,
        4,
        "given back: due, unclaimed, their attempt not counted"
    );

    // The abandoned one goes again once its lease ends, the others once.
    receiver.answer_otherwise(Answer::Status(200));
    receiver.release();
    let tally = send_due(app.pool(), &queue(&app, "app"), Utc::now() + chrono::Duration::hours(1)).await;
    assert_eq!(tally, Tally { claimed: 5, sent: 5, ..Tally::default() });
    let mut first_attempts: Vec<String> =
        receiver.arrivals().iter().map(|a| a.header("webhook-inbox-attempt").to_string()).collect();
    first_attempts.sort();
    assert_eq!(first_attempts, ["1", "1", "1", "1", "1", "2"], "one attempt each, the abandoned one two");
}
