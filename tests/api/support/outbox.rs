//! Outbox workers pointed at the test SMTP server.

use std::time::Duration;

use sqlx::PgPool;
use webhook_inbox::outbox::{Mailer, Retry, Templates, Worker};

use super::app::TestApp;
use super::events::user;
use super::signing::clerk;
use super::smtp::SmtpServer;

/// The sender every test worker uses.
pub const FROM: &str = "Acme <noreply@acme.example>";

/// Three attempts, one minute apart at first, at most ten minutes apart.
pub const RETRY: Retry =
    Retry { max_attempts: 3, base: Duration::from_secs(60), cap: Duration::from_secs(600) };

/// A worker on `pool` (an app instance's own pool, for replicas) sending to `smtp`.
pub fn worker(pool: &PgPool, smtp: &SmtpServer) -> Worker {
    let mailer = Mailer::new(&smtp.url().into(), FROM, Templates::default(), Duration::from_secs(5)).unwrap();
    Worker::new(pool.clone(), mailer, RETRY, Duration::from_millis(20))
}

/// Creates `user_id` (address `<user_id>@example.com`) with a Clerk
/// `user.created`, which enqueues its welcome email.
pub async fn create_user(app: &TestApp, user_id: &str) {
    let email = format!("{user_id}@example.com");
    let answer = app.send(&clerk(&format!("msg_{user_id}"), &user("created", user_id, &email, 1_000))).await;
    assert_eq!(answer.body["status"], "processed");
}

/// status, attempts, last_error of every outbox row, by cause.
pub async fn outbox_rows(app: &TestApp) -> Vec<(String, i32, Option<String>)> {
    sqlx::query_as("SELECT status, attempts, last_error FROM outbox ORDER BY cause")
        .fetch_all(app.pool())
        .await
        .unwrap()
}
