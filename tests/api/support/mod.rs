//! What every integration test shares: a fresh database, an app on it, and
//! signed requests.

pub mod app;
pub mod cli;
pub mod database;
pub mod events;
pub mod outbox;
pub mod signing;
pub mod smtp;
pub mod socket;

pub use app::{PRICE_CREDITS, TestApp, TestConfig};
pub use cli::{binary, cli};
pub use database::TestDatabase;
pub use signing::*;
pub use smtp::SmtpServer;
