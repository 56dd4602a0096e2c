//! webhook-inbox: verified, archived, exactly-once webhook intake.
//!
//! Read top to bottom, the modules follow one delivery through the service.

/// The subcommands.
pub mod cli;
/// Flags and environment variables.
pub mod config;
/// Migrations, the pool, and the embedded PostgreSQL.
pub mod db;
/// The provider-neutral event.
pub mod event;
/// The side effects of each event type.
pub mod handlers;
/// The HTTP routes and the server.
pub mod http;
/// The one-transaction-per-delivery core: archive, dedup, handler.
pub mod inbox;
/// Prometheus metrics.
pub mod monitoring;
/// What operators do with the archive: list, show, reprocess, purge.
pub mod operations;
/// Effects that leave the database: emails enqueued by handlers, sent by a worker.
pub mod outbox;
/// Signature verification and event extraction, one module per provider.
pub mod providers;
/// Log output.
pub mod telemetry;
