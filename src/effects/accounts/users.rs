//! `user.*`: the `users` projection, the welcome email, and deletion.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::PgConnection;
use tracing::instrument;

use crate::effects::{data, log_stale, ordered_at};
use crate::event::Event;
use crate::inbox::{Effect, EffectError};
use crate::outbox::{self, Email, EmailKind};

/// The part of a Clerk user object the projection keeps.
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
    /// Milliseconds since the epoch.
    updated_at: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct EmailAddress {
    id: String,
    email_address: String,
}

/// What `user.deleted` carries: the id only.
#[derive(Debug, Deserialize)]
struct DeletedUser {
    id: String,
}

impl User {
    fn primary_email(&self) -> Option<&str> {
        let primary = self.primary_email_address_id.as_deref()?;
        self.email_addresses.iter().find(|e| e.id == primary).map(|e| e.email_address.as_str())
    }
}

fn from_millis(millis: Option<i64>) -> Option<DateTime<Utc>> {
    millis.and_then(DateTime::<Utc>::from_timestamp_millis)
}

/// `user.created`: the projection, and one welcome email per user (cause
/// `user:<id>:welcome`), unless the user is already deleted.
pub struct UserCreated;

impl Effect for UserCreated {
    #[instrument(name = "user_created", level = "debug", skip_all)]
    async fn apply(&self, conn: &mut PgConnection, event: &Event) -> Result<(), EffectError> {
        let user: User = data(event)?;
        if project(conn, event, &user).await? == Projected::Deleted {
            return Ok(());
        }
        let welcome = Email {
            cause: format!("user:{}:welcome", user.id),
            kind: EmailKind::Welcome,
            user_id: Some(&user.id),
            subscription_id: None,
            event_id: &event.id,
        };
        outbox::enqueue(conn, &welcome).await?;
        Ok(())
    }
}

/// `user.updated`: the projection only.
pub struct UserUpdated;

impl Effect for UserUpdated {
    #[instrument(name = "user_updated", level = "debug", skip_all)]
    async fn apply(&self, conn: &mut PgConnection, event: &Event) -> Result<(), EffectError> {
        let user: User = data(event)?;
        project(conn, event, &user).await?;
        Ok(())
    }
}

/// `user.deleted`: a soft delete that scrubs the personal fields, and gives
/// up the user's unsent emails.
///
/// Why it ignores the ordering guard: deletion is final and must win over
/// anything, even an event stamped later by a skewed clock. Every later
/// `user.*` event finds `deleted_at` set and changes nothing, so personal
/// data never comes back.
pub struct UserDeleted;

impl Effect for UserDeleted {
    #[instrument(name = "user_deleted", level = "debug", skip_all)]
    async fn apply(&self, conn: &mut PgConnection, event: &Event) -> Result<(), EffectError> {
        let user: DeletedUser = data(event)?;
        let at = ordered_at(event, None);
        let deleted = sqlx::query(
            "INSERT INTO users AS u (id, deleted_at, last_event_at, last_event_id)
             VALUES ($1, $2, $2, $3)
             ON CONFLICT (id) DO UPDATE
             SET email = NULL,
                 first_name = NULL,
                 last_name = NULL,
                 deleted_at = EXCLUDED.deleted_at,
                 last_event_at = GREATEST(u.last_event_at, EXCLUDED.last_event_at),
                 last_event_id = EXCLUDED.last_event_id
             WHERE u.deleted_at IS NULL",
        )
        .bind(&user.id)
        .bind(at)
        .bind(event.id.as_str())
        .execute(&mut *conn)
        .await?
        .rows_affected();
        if deleted == 0 {
            log_stale(event, "user", &user.id);
        }
        outbox::give_up_for_user(conn, &user.id, "user deleted").await?;
        Ok(())
    }
}

/// What became of the projection row.
#[derive(Debug, PartialEq, Eq)]
enum Projected {
    /// Written (inserted or moved forward).
    Written,
    /// Left alone: a newer event wrote it already.
    Stale,
    /// Left alone: the user is deleted.
    Deleted,
}

/// Writes the user if the event is newer than what wrote the row last and
/// the user is not deleted.
async fn project(conn: &mut PgConnection, event: &Event, user: &User) -> Result<Projected, EffectError> {
    let at = ordered_at(event, from_millis(user.updated_at));
    let written = sqlx::query(
        "INSERT INTO users AS u (id, email, first_name, last_name, created_at, last_event_at, last_event_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (id) DO UPDATE
         SET email = EXCLUDED.email,
             first_name = EXCLUDED.first_name,
             last_name = EXCLUDED.last_name,
             created_at = COALESCE(u.created_at, EXCLUDED.created_at),
             last_event_at = EXCLUDED.last_event_at,
             last_event_id = EXCLUDED.last_event_id
         -- The ordering guard, in the statement (see subscriptions); and a
         -- deleted user stays deleted.
         WHERE u.deleted_at IS NULL AND u.last_event_at < EXCLUDED.last_event_at",
    )
    .bind(&user.id)
    .bind(user.primary_email())
    .bind(&user.first_name)
    .bind(&user.last_name)
    .bind(from_millis(user.created_at).unwrap_or(at))
    .bind(at)
    .bind(event.id.as_str())
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if written == 1 {
        return Ok(Projected::Written);
    }
    log_stale(event, "user", &user.id);
    // The failed guard left the row locked by this transaction, so this
    // read cannot race a concurrent deletion.
    let deleted: bool = sqlx::query_scalar("SELECT deleted_at IS NOT NULL FROM users WHERE id = $1")
        .bind(&user.id)
        .fetch_one(&mut *conn)
        .await?;
    Ok(if deleted { Projected::Deleted } else { Projected::Stale })
}
