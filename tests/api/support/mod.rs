//! What every integration test shares: a fresh database, an app on it, and
//! signed requests.

pub mod app;
pub mod database;
pub mod events;
pub mod outbox;
pub mod signing;
pub mod smtp;
pub mod socket;

pub use app::{TestApp, TestConfig};
pub use database::TestDatabase;
pub use signing::*;
pub use smtp::SmtpServer;
