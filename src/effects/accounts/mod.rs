//! Clerk: the `users` projection.

pub mod users;

use crate::inbox::RoutingTable;
use crate::providers::clerk;
use users::{UserCreated, UserDeleted, UserUpdated};

/// Clerk's events with effects here: a user's life.
pub fn register(routing: RoutingTable) -> RoutingTable {
    routing.on(clerk::NAME, "user.created", UserCreated).on(clerk::NAME, "user.updated", UserUpdated).on(
        clerk::NAME,
        "user.deleted",
        UserDeleted,
    )
}
