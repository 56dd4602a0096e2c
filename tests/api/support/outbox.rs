//! The outbox's queue pointed at the test SMTP server.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use webhook_inbox::outbox::{Emails, Mailer, Templates};
use webhook_inbox::queue::{Engine, Schedule, Tally};

use super::app::TestApp;
use super::events::user;
use super::signing::clerk;
use super::smtp::SmtpServer;

/// The sender every test worker uses.
pub const FROM: &str = "Acme <noreply@acme.example>";

/// Three attempts, one minute apart at first, at most ten minutes apart.
pub fn schedule() -> Schedule {
    Schedule::doubling(3, Duration::from_secs(60), Duration::from_secs(600))
}

/// The outbox's queue on one pool (an app instance's own, for replicas),
/// run by the engine at chosen times until idle, or in the background.
pub struct Worker {
    pool: PgPool,
    engine: Engine,
    emails: Arc<Emails>,
    smtp: String,
}

impl Worker {
    /// The engine's loop at `now`, until no email is in flight or due.
    pub async fn run_until_idle(&self, now: DateTime<Utc>) -> sqlx::Result<Tally> {
        self.engine.run_until_idle(&self.emails, now).await
    }

    /// The engine running this queue in the background, looking every 20 ms.
    pub fn spawn(self) -> Engine {
        let mut engine = Engine::new(self.pool.clone(), Duration::from_millis(20));
        engine.spawn(emails(&self.smtp));
        engine
    }
}

fn emails(smtp_url: &str) -> Emails {
    let mailer = Mailer::new(&smtp_url.into(), FROM, Templates::default(), Duration::from_secs(5)).unwrap();
    Emails::new(mailer, schedule())
}

/// A worker on `pool` sending to `smtp`.
pub fn worker(pool: &PgPool, smtp: &SmtpServer) -> Worker {
    Worker {
        pool: pool.clone(),
        engine: Engine::new(pool.clone(), Duration::from_millis(20)),
        emails: Arc::new(emails(&smtp.url())),
        smtp: smtp.url(),
    }
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
