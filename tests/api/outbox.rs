//! The outbox worker against a real SMTP listener: each email once, retried
//! with backoff while SMTP is down, dead after the last attempt, shared by
//! replicas without double sending. The tests run the engine's loop at a
//! `now` they choose, until idle, instead of waiting for the clock.

use std::collections::HashSet;

use chrono::{Duration, Utc};
use uuid::Uuid;
use webhook_inbox::queue::Tally;

use crate::support::events::*;
use crate::support::outbox::{create_user, outbox_rows, worker};
use crate::support::*;

#[tokio::test]
async fn the_welcome_email_is_sent_once_with_a_message_id_derived_from_its_outbox_row() {
    let app = TestApp::spawn().await;
    let smtp = SmtpServer::start().await;
    let worker = worker(app.pool(), &smtp);
    create_user(&app, "user_01").await;

    let tally = worker.run_until_idle(Utc::now()).await.unwrap();
    assert_eq!(tally, Tally { claimed: 1, sent: 1, ..Tally::default() });
    assert_eq!(worker.run_until_idle(Utc::now() + Duration::days(1)).await.unwrap(), Tally::default());

    let messages = smtp.messages();
    assert_eq!(messages.len(), 1);
    let message = &messages[0];
    let id: Uuid = sqlx::query_scalar("SELECT id FROM outbox").fetch_one(app.pool()).await.unwrap();
    assert_eq!(message.message_id(), format!("<{id}@acme.example>"));
    assert_eq!(message.to, ["<user_01@example.com>"]);
    assert_eq!(message.from, "<noreply@acme.example>");
    assert_eq!(message.header("Subject"), Some("Welcome, Ada"));
    assert!(message.data.contains("multipart/alternative"), "{}", message.data);
    assert!(message.data.contains("text/plain") && message.data.contains("text/html"));
    assert!(message.data.contains("Your account for user_01@example.com is ready."));
    let (status, attempts, error) = outbox_rows(&app).await.remove(0);
    assert_eq!((status.as_str(), attempts, error), ("sent", 1, None));
}

#[tokio::test]
async fn a_placeholder_in_a_users_name_is_sent_as_text_not_filled_in() {
    let app = TestApp::spawn().await;
    let smtp = SmtpServer::start().await;
    let mut created = user("created", "user_01", "user_01@example.com", 1_000);
    created["data"]["first_name"] = "{{email}} <{{subscription_id}}>".into();
    assert_eq!(app.send(&clerk("msg_user_01", &created)).await.body["status"], "processed");

    assert_eq!(worker(app.pool(), &smtp).run_until_idle(Utc::now()).await.unwrap().sent, 1);
    let message = &smtp.messages()[0];
    assert_eq!(message.header("Subject"), Some("Welcome, {{email}} <{{subscription_id}}>"));
    assert!(message.data.contains("Hello {{email}} <{{subscription_id}}>,"), "{}", message.data);
    assert!(message.data.contains("Hello {{email}} &lt;{{subscription_id}}&gt;,"), "{}", message.data);
    assert!(!message.data.contains("Hello user_01@example.com"), "{}", message.data);
}

#[tokio::test]
async fn while_smtp_is_down_emails_stay_pending_with_the_error_and_once_it_is_back_each_is_sent_once() {
    let app = TestApp::spawn().await;
    let smtp = SmtpServer::start().await;
    let worker = worker(app.pool(), &smtp);
    for user_id in ["user_01", "user_02", "user_03"] {
        create_user(&app, user_id).await;
    }
    let now = Utc::now();

    smtp.refuse(true);
    let tally = worker.run_until_idle(now).await.unwrap();
    assert_eq!(tally, Tally { claimed: 3, retrying: 3, ..Tally::default() });
    for (status, attempts, error) in outbox_rows(&app).await {
        assert_eq!((status.as_str(), attempts), ("pending", 1));
        assert!(error.as_deref().unwrap_or("").contains("421"), "{error:?}");
    }
    // Backing off: nothing is due again before a minute has passed.
    assert_eq!(worker.run_until_idle(now + Duration::seconds(59)).await.unwrap(), Tally::default());

    // The delay counts from the end of the failed attempt, a moment after `now`.
    smtp.refuse(false);
    let tally = worker.run_until_idle(now + Duration::seconds(61)).await.unwrap();
    assert_eq!(tally, Tally { claimed: 3, sent: 3, ..Tally::default() });
    assert_eq!(worker.run_until_idle(now + Duration::days(1)).await.unwrap(), Tally::default());

    let recipients: Vec<_> = smtp.messages().into_iter().map(|m| m.to.concat()).collect();
    assert_eq!(recipients.len(), 3);
    assert_eq!(recipients.iter().collect::<HashSet<_>>().len(), 3);
    assert!(
        outbox_rows(&app)
            .await
            .iter()
            .all(|(status, attempts, error)| status == "sent" && *attempts == 2 && error.is_none())
    );
}

#[tokio::test]
async fn after_its_last_attempt_an_email_is_dead_and_never_tried_again() {
    let app = TestApp::spawn().await;
    let smtp = SmtpServer::start().await;
    let worker = worker(app.pool(), &smtp);
    create_user(&app, "user_01").await;
    let now = Utc::now();
    smtp.refuse(true);

    // Three attempts (the schedule's), one minute then two apart, each
    // delay counted from the end of the failed attempt, a moment after `now`.
    assert_eq!(worker.run_until_idle(now).await.unwrap().retrying, 1);
    assert_eq!(worker.run_until_idle(now + Duration::seconds(59)).await.unwrap(), Tally::default());
    assert_eq!(worker.run_until_idle(now + Duration::seconds(61)).await.unwrap().retrying, 1);
    assert_eq!(worker.run_until_idle(now + Duration::seconds(180)).await.unwrap(), Tally::default());
    assert_eq!(worker.run_until_idle(now + Duration::seconds(182)).await.unwrap().dead, 1);

    smtp.refuse(false);
    assert_eq!(worker.run_until_idle(now + Duration::days(30)).await.unwrap(), Tally::default());
    assert!(smtp.messages().is_empty());
    let (status, attempts, error) = outbox_rows(&app).await.remove(0);
    assert_eq!((status.as_str(), attempts), ("dead", 3));
    assert!(error.unwrap().contains("421"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_share_the_outbox_and_send_each_email_once() {
    let app = TestApp::spawn().await;
    let (replica, _) = app.replica().await;
    let smtp = SmtpServer::start().await;
    let users: Vec<String> = (0..25).map(|i| format!("user_{i:02}")).collect();
    for user_id in &users {
        create_user(&app, user_id).await;
    }

    // Two workers, each on its own instance's pool, at once. SMTP holds the
    // sends until each worker has claimed a full batch, so both take a share
    // whatever the scheduling.
    smtp.stall(true);
    let workers = [worker(&app.state.pool, &smtp), worker(&replica.pool, &smtp)];
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|worker| tokio::spawn(async move { worker.run_until_idle(Utc::now()).await.unwrap() }))
        .collect();
    // One claim takes one batch (10) at most: 20 held sends are both workers'.
    smtp.until_stalled(20).await;
    smtp.stall(false);
    let mut sent = 0;
    for task in tasks {
        let tally = task.await.unwrap();
        assert!(tally.claimed >= 10, "both replicas took a share: {tally:?}");
        sent += tally.sent;
    }

    assert_eq!(sent, 25);
    let messages = smtp.messages();
    assert_eq!(messages.len(), 25);
    let ids: HashSet<_> = messages.iter().map(|m| m.message_id()).collect();
    let recipients: HashSet<_> = messages.iter().map(|m| m.to.concat()).collect();
    assert_eq!((ids.len(), recipients.len()), (25, 25));
    assert_eq!(app.count("SELECT count(*) FROM outbox WHERE status = 'sent' AND attempts = 1").await, 25);
}

#[tokio::test]
async fn a_claim_left_by_a_worker_that_died_is_taken_again_once_its_lease_expires() {
    let app = TestApp::spawn().await;
    let smtp = SmtpServer::start().await;
    let worker = worker(app.pool(), &smtp);
    create_user(&app, "user_01").await;
    // What a worker that crashed mid-send leaves behind.
    sqlx::raw_sql(
        "UPDATE outbox SET locked_until = now() + interval '1 minute', claim_token = gen_random_uuid(),
                           attempts = 1",
    )
    .execute(app.pool())
    .await
    .unwrap();
    let now = Utc::now();

    assert_eq!(worker.run_until_idle(now).await.unwrap(), Tally::default());
    let tally = worker.run_until_idle(now + Duration::seconds(61)).await.unwrap();
    assert_eq!(tally, Tally { claimed: 1, sent: 1, ..Tally::default() });
    assert_eq!(outbox_rows(&app).await, [("sent".into(), 2, None)]);
}

#[tokio::test]
async fn a_canceled_subscription_sends_its_user_one_downgrade_notice() {
    let app = TestApp::spawn().await;
    let smtp = SmtpServer::start().await;
    let worker = worker(app.pool(), &smtp);
    create_user(&app, "user_42").await;
    for (event_id, event_type, status, at) in [
        ("evt_1", "created", "active", "2024-04-01T00:00:00Z"),
        ("evt_2", "canceled", "canceled", "2024-04-02T00:00:00Z"),
        ("evt_3", "updated", "canceled", "2024-04-03T00:00:00Z"),
    ] {
        app.send(&paddle(&subscription(event_id, event_type, status, at))).await;
    }

    assert_eq!(worker.run_until_idle(Utc::now()).await.unwrap().sent, 2);

    let messages = smtp.messages();
    let notice = messages.iter().find(|m| m.header("Subject") != Some("Welcome, Ada")).unwrap();
    assert_eq!(notice.header("Subject"), Some("Your subscription has been canceled"));
    assert_eq!(notice.to, ["<user_42@example.com>"]);
    assert!(notice.data.contains("Your subscription sub_01 has been canceled"));
}

#[tokio::test]
async fn an_email_whose_user_has_no_address_yet_is_retried_not_lost() {
    let app = TestApp::spawn().await;
    let smtp = SmtpServer::start().await;
    let worker = worker(app.pool(), &smtp);
    // Canceled before Clerk told us about the user.
    app.send(&paddle(&subscription("evt_1", "canceled", "canceled", "2024-04-02T00:00:00Z"))).await;
    let now = Utc::now();

    assert_eq!(worker.run_until_idle(now).await.unwrap().retrying, 1);
    let (_, _, error) = outbox_rows(&app).await.remove(0);
    assert!(error.unwrap().starts_with("no address for user \"user_42\""));

    create_user(&app, "user_42").await;
    assert_eq!(worker.run_until_idle(now + Duration::seconds(61)).await.unwrap().sent, 2);
    assert_eq!(smtp.messages().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spawned_worker_sends_what_deliveries_enqueue_and_stops_when_asked() {
    let app = TestApp::spawn().await;
    let smtp = SmtpServer::start().await;
    let running = worker(app.pool(), &smtp).spawn();

    create_user(&app, "user_01").await;
    create_user(&app, "user_02").await;
    let messages = smtp.until_received(2).await;
    assert_eq!(messages.len(), 2);
    // Asked to stop, the worker ends by itself, between sends; a worker
    // that ignored the request would be aborted at the deadline instead.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    assert!(running.stop(deadline).await, "the worker ended by itself");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_skips_the_rows_another_replica_is_claiming_instead_of_waiting_for_them() {
    let app = TestApp::spawn().await;
    let smtp = SmtpServer::start().await;
    create_user(&app, "user_01").await;
    create_user(&app, "user_02").await;
    // Another replica's claim of user_01's email, caught in the middle.
    let mut other = app.pool().begin().await.unwrap();
    sqlx::query("SELECT id FROM outbox WHERE user_id = 'user_01' FOR UPDATE")
        .execute(&mut *other)
        .await
        .unwrap();

    let tally = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        worker(&app.state.pool, &smtp).run_until_idle(Utc::now()),
    )
    .await
    .expect("the worker did not wait for the locked row")
    .unwrap();

    assert_eq!(tally, Tally { claimed: 1, sent: 1, ..Tally::default() });
    assert_eq!(smtp.messages()[0].to, ["<user_02@example.com>"]);
    other.rollback().await.unwrap();
}
