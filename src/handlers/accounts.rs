//! Clerk events: the `users` projection.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::PgConnection;
use tracing::instrument;

use super::{HandlerError, data};
use crate::event::Event;

/// The part of a Clerk user object the handlers use.
#[derive(Debug, Deserialize)]
struct User {
    id: String,
    first_name: Option<String>,
    last_name: Option<String>,
    primary_email_address_id: Option<String>,
    #[serde(default)]
    email_addresses: Vec<EmailAddress>,
    /// Milliseconds since the epoch.
    created_at: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct EmailAddress {
    id: String,
    email_address: String,
}

impl User {
    fn primary_email(&self) -> Option<&str> {
        let primary = self.primary_email_address_id.as_deref()?;
        self.email_addresses.iter().find(|e| e.id == primary).map(|e| e.email_address.as_str())
    }
}

/// `user.created`: inserts the user (or refreshes it if it already exists).
#[instrument(skip_all)]
pub async fn user_created(conn: &mut PgConnection, event: &Event<'_>) -> Result<(), HandlerError> {
    let user: User = data(event)?;
    let created_at = user
        .created_at
        .and_then(DateTime::<Utc>::from_timestamp_millis)
        .or(event.occurred_at)
        .unwrap_or_else(Utc::now);
    sqlx::query(
        "INSERT INTO users (id, email, first_name, last_name, created_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (id) DO UPDATE
         SET email = EXCLUDED.email,
             first_name = EXCLUDED.first_name,
             last_name = EXCLUDED.last_name",
    )
    .bind(&user.id)
    .bind(user.primary_email())
    .bind(&user.first_name)
    .bind(&user.last_name)
    .bind(created_at)
    .execute(conn)
    .await?;
    Ok(())
}
