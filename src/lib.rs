//! webhook-inbox: verified, archived, exactly-once webhook intake.
//!
//! A delivery's path: `http` reads the request and has `providers` verify
//! it and read its `event`; `inbox` records it and applies its `handlers`
//! in one transaction, on the workers that hold the `db` connections;
//! `outbox` sends what must leave the database. `operations`, `cli` and
//! `monitoring` are for the people who run it.

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
/// The core: one transaction per delivery (archive, dedup, handler), run by delivery workers.
pub mod inbox;
/// Prometheus metrics.
pub mod monitoring;
/// What operators do with the archive: list, show, reprocess, purge.
pub mod operations;
/// Effects that leave the database: emails enqueued by handlers, sent by a worker.
pub mod outbox;
/// Signature verification and event extraction, one module per provider.
pub mod providers;
/// The queue engine every effect that leaves the database is sent by: claims, leases, retries.
pub mod queue;
/// Log output.
pub mod telemetry;
