//! What every integration test shares: a fresh database, an app on it, and
//! signed requests.

pub mod app;
pub mod browser;
pub mod cli;
pub mod console;
pub mod database;
pub mod events;
pub mod forwarding;
pub mod outbox;
pub mod prometheus;
pub mod provider_api;
pub mod signing;
// Shared with the fault suite (`tests/faults`), each using what the other does not.
#[allow(dead_code)]
pub mod receiver;
#[allow(dead_code)]
pub mod smtp;
#[allow(dead_code)]
pub mod socket;
#[allow(dead_code)]
#[path = "../../faults/support/watch.rs"]
pub mod watch;

pub use app::{PRICE_CREDITS, TestApp, TestConfig, make_days_back};
pub use cli::{binary, cli};
pub use database::TestDatabase;
pub use signing::*;
pub use smtp::SmtpServer;
