//! Clerk: the `users` projection.

pub mod users;

use crate::inbox::RoutingTable;
use crate::providers::clerk::Clerk;
use users::{UserCreated, UserDeleted, UserUpdated};

/// Clerk's events with effects here: a user's life.
pub fn register(routing: RoutingTable) -> RoutingTable {
    routing.on(Clerk::NAME, "user.created", UserCreated).on(Clerk::NAME, "user.updated", UserUpdated).on(
        Clerk::NAME,
        "user.deleted",
        UserDeleted,
    )
}
