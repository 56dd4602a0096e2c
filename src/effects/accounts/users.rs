//! `user.*`: the `users` projection, the welcome email, and deletion.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::effects::{data, ordered_at};
use crate::event::Event;
use crate::inbox::{Effect, EffectError, SqlType, Value, Writes};
use crate::outbox::{self, EmailKind};

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
    fn writes(&self) -> Writes {
        let mut writes = projection();
        writes.ctes.push(outbox::enqueue("welcome", EmailKind::Welcome, WELCOME));
        writes
    }

    fn input<'e>(&self, event: &'e Event) -> Result<Vec<Value<'e>>, EffectError> {
        projected(event, data(event)?)
    }
}

/// `user.updated`: the projection only.
pub struct UserUpdated;

impl Effect for UserUpdated {
    fn writes(&self) -> Writes {
        projection()
    }

    fn input<'e>(&self, event: &'e Event) -> Result<Vec<Value<'e>>, EffectError> {
        projected(event, data(event)?)
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

/// The soft delete.
const DELETED: &str = "deleted_users AS (
                 INSERT INTO users AS u (id, deleted_at, last_event_at, last_event_id)
                 SELECT a.user_id, a.deleted_at, a.deleted_at, a.event_id
                 FROM applied a
                 ORDER BY a.user_id
                 ON CONFLICT (id) DO UPDATE
                 SET email = NULL,
                     first_name = NULL,
                     last_name = NULL,
                     deleted_at = EXCLUDED.deleted_at,
                     last_event_at = GREATEST(u.last_event_at, EXCLUDED.last_event_at),
                     last_event_id = EXCLUDED.last_event_id
                 WHERE u.deleted_at IS NULL
                 RETURNING id
             )";

/// A user deleted already: said, not failed.
const DELETED_ALREADY: &str =
    "SELECT a.n, 'stale event: user ' || a.user_id || ' is already deleted; nothing changed'
             FROM applied a
             WHERE a.user_id NOT IN (SELECT id FROM deleted_users)";

impl Effect for UserDeleted {
    fn writes(&self) -> Writes {
        Writes {
            input: vec![
                ("user_id", SqlType::Text),
                ("deleted_at", SqlType::Timestamptz),
                ("event_id", SqlType::Text),
            ],
            ctes: vec![
                DELETED.into(),
                outbox::give_up_for_users("given_up", "SELECT user_id FROM applied", "user deleted"),
            ],
            notes: vec![DELETED_ALREADY.into()],
        }
    }

    fn input<'e>(&self, event: &'e Event) -> Result<Vec<Value<'e>>, EffectError> {
        let user: DeletedUser = data(event)?;
        Ok(vec![user.id.into(), ordered_at(event, None).into(), event.id.as_str().into()])
    }
}

/// Writes the user if the event is newer than what wrote the row last and
/// the user is not deleted: the ordering guard, in the statement (see
/// subscriptions); and a deleted user stays deleted.
const PROJECTED: &str = "projected_users AS (
                 INSERT INTO users AS u (id, email, first_name, last_name, created_at, last_event_at, last_event_id)
                 SELECT a.user_id, a.email, a.first_name, a.last_name, a.created_at, a.ordered_at, a.event_id
                 FROM applied a
                 ORDER BY a.user_id
                 ON CONFLICT (id) DO UPDATE
                 SET email = EXCLUDED.email,
                     first_name = EXCLUDED.first_name,
                     last_name = EXCLUDED.last_name,
                     created_at = COALESCE(u.created_at, EXCLUDED.created_at),
                     last_event_at = EXCLUDED.last_event_at,
                     last_event_id = EXCLUDED.last_event_id
                 WHERE u.deleted_at IS NULL AND u.last_event_at < EXCLUDED.last_event_at
                 RETURNING id
             )";

/// An event older than the projection, or about a deleted user: said, not failed.
const STALE: &str =
    "SELECT a.n, 'stale event: user ' || a.user_id || ' is already newer or deleted; nothing changed'
             FROM applied a
             WHERE a.user_id NOT IN (SELECT id FROM projected_users)";

/// The welcome, unless the user is deleted. Read from the table as the
/// statement found it: a deletion committed meanwhile may leave a welcome
/// row, which the outbox never sends, since it reads the address when it
/// sends and a deleted user has none.
const WELCOME: &str = "SELECT 'user:' || a.user_id || ':welcome' AS cause, a.user_id,
                        NULL::text AS subscription_id, a.event_id
                 FROM applied a
                 WHERE NOT EXISTS (SELECT FROM users u WHERE u.id = a.user_id AND u.deleted_at IS NOT NULL)";

/// The projection's part of an effect: its input columns and writes.
fn projection() -> Writes {
    Writes {
        input: vec![
            ("user_id", SqlType::Text),
            ("email", SqlType::Text),
            ("first_name", SqlType::Text),
            ("last_name", SqlType::Text),
            ("created_at", SqlType::Timestamptz),
            ("ordered_at", SqlType::Timestamptz),
            ("event_id", SqlType::Text),
        ],
        ctes: vec![PROJECTED.into()],
        notes: vec![STALE.into()],
    }
}

/// The projection's values for `user`, in the order of [`projection`].
fn projected<'e>(event: &'e Event, user: User) -> Result<Vec<Value<'e>>, EffectError> {
    let at = ordered_at(event, from_millis(user.updated_at));
    let email = user.primary_email().map(str::to_owned);
    Ok(vec![
        user.id.into(),
        email.into(),
        user.first_name.into(),
        user.last_name.into(),
        from_millis(user.created_at).unwrap_or(at).into(),
        at.into(),
        event.id.as_str().into(),
    ])
}
