//! Recording a send's outcome when the database is merely busy: the email
//! still goes out once. The SMTP listener holds the sends while the test
//! makes the database busy, so each step happens in a known order.

use std::time::Duration;

use chrono::Utc;
use sqlx::postgres::PgPoolOptions;
use webhook_inbox::queue::Tally;

use crate::support::outbox::{create_user, outbox_rows, worker};
use crate::support::*;

/// Every email sent and recorded once, and nothing due a day later.
async fn assert_each_sent_once(app: &TestApp, smtp: &SmtpServer, emails: usize) {
    let later =
        worker(app.pool(), smtp).run_until_idle(Utc::now() + chrono::Duration::days(1)).await.unwrap();
    assert_eq!(later, Tally::default(), "an email whose send went unrecorded is sent again");
    assert_eq!(smtp.messages().len(), emails);
    assert_eq!(outbox_rows(app).await, vec![("sent".to_string(), 1, None); emails]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_are_recorded_even_when_the_pool_has_no_connection_left_after_them() {
    let app = TestApp::spawn().await;
    let smtp = SmtpServer::start().await;
    create_user(&app, "user_01").await;
    create_user(&app, "user_02").await;
    // The worker's own small pool, as the service's is once the delivery
    // workers hold theirs.
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .acquire_timeout(Duration::from_millis(200))
        .connect_with(app.db.connect_options())
        .await
        .unwrap();

    smtp.stall(true);
    let tally = tokio::spawn({
        let worker = worker(&pool, &smtp);
        async move { worker.run_until_idle(Utc::now()).await }
    });
    smtp.until_stalled(1).await;
    // Claimed and sending: now everyone else takes every connection there is.
    let mut taken = Vec::new();
    while let Ok(conn) = pool.acquire().await {
        taken.push(conn);
    }
    smtp.stall(false);
    let tally = tally.await.unwrap().unwrap();
    drop(taken);

    assert_eq!(tally, Tally { claimed: 2, sent: 2, ..Tally::default() });
    assert_each_sent_once(&app, &smtp, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_that_fails_for_a_while_is_retried_and_the_email_is_sent_once() {
    let app = TestApp::spawn().await;
    let smtp = SmtpServer::start().await;
    create_user(&app, "user_01").await;
    // Until the test drops it, recording an outcome (which ends the claim's
    // lease) fails, and counts its failures in a sequence, which a failed
    // statement does not roll back.
    sqlx::raw_sql(
        "CREATE SEQUENCE refused_marks;
         CREATE FUNCTION refuse_marks() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             PERFORM nextval('refused_marks');
             RAISE EXCEPTION 'marks refused for now' USING ERRCODE = 'lock_not_available';
         END $$;
         CREATE TRIGGER refuse_marks BEFORE UPDATE ON outbox
             FOR EACH ROW WHEN (NEW.locked_until IS NULL) EXECUTE FUNCTION refuse_marks();",
    )
    .execute(app.pool())
    .await
    .unwrap();

    let tally = tokio::spawn({
        let worker = worker(app.pool(), &smtp);
        async move { worker.run_until_idle(Utc::now()).await }
    });
    until_refused(&app, 2).await;
    sqlx::query("DROP TRIGGER refuse_marks ON outbox").execute(app.pool()).await.unwrap();
    let tally = tally.await.unwrap().unwrap();

    assert_eq!(tally, Tally { claimed: 1, sent: 1, ..Tally::default() });
    assert_each_sent_once(&app, &smtp, 1).await;
}

/// Polls until `count` marks have been refused.
async fn until_refused(app: &TestApp, count: i64) {
    for _ in 0..1000 {
        let refused: i64 =
            sqlx::query_scalar("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM refused_marks")
                .fetch_one(app.pool())
                .await
                .unwrap();
        if refused >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{count} marks were never refused: no retry");
}
