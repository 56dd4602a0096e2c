//! Clerk: the `users` projection.

pub mod users;

use crate::inbox::Effects;
use crate::providers::clerk::Clerk;
use users::{UserCreated, UserDeleted, UserUpdated};

/// Clerk's events with effects here: a user's life.
pub fn register(effects: Effects) -> Effects {
    effects.on(Clerk::NAME, "user.created", UserCreated).on(Clerk::NAME, "user.updated", UserUpdated).on(
        Clerk::NAME,
        "user.deleted",
        UserDeleted,
    )
}
