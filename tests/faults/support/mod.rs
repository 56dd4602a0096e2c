//! What the fault tests share: the real binary as a child process, a private
//! PostgreSQL, a provider that redelivers until it gets a 2xx, and the SQL
//! that counts what was applied.

// Shared with the api suite (`tests/api/support`), which uses what this suite does not.
#[allow(dead_code)]
#[path = "../../api/support/database.rs"]
pub mod database;
#[allow(dead_code)]
#[path = "../../api/support/provider_api.rs"]
pub mod provider_api;
#[allow(dead_code)]
#[path = "../../api/support/receiver.rs"]
pub mod receiver;
#[allow(dead_code)]
#[path = "../../api/support/signing.rs"]
pub mod signing;
#[allow(dead_code)]
#[path = "../../api/support/smtp.rs"]
pub mod smtp;
#[allow(dead_code)]
#[path = "../../api/support/socket.rs"]
pub mod socket;

pub mod cluster;
pub mod forwarding;
pub mod ledger;
pub mod netns;
pub mod otlp;
pub mod provider;
pub mod remote_postgres;
pub mod service;
pub mod tmpfs;
pub mod watch;

pub use cluster::Cluster;
pub use database::TestDatabase;
pub use ledger::{Ledger, Report};
pub use provider::{Event, Provider};
pub use service::Service;
pub use signing::*;
pub use smtp::SmtpServer;
