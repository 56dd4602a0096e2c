//! Clerk: the `users` projection.

pub mod users;
