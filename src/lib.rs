//! webhook-inbox: verified, archived, exactly-once webhook intake.
//!
//! A delivery's path (DESIGN.md tells it step by step): `http` reads the
//! request; `providers` verify it and read its `event` out of the checked
//! payload; `inbox` routes it by whether its event has `effects`, and its
//! workers record it (and apply the effects) in one transaction on the `db`
//! connections they keep; `outbox` sends what must leave the database.
//! `operations` (behind the `cli`, the admin API and the console in `http`)
//! and `monitoring` are for the people who run it; `cli/serve.rs` builds the
//! service from `config`.

/// The subcommands; `serve` is the composition root.
pub mod cli;
/// Outbound HTTP: the one client setup for every request the service makes.
pub mod client;
/// Flags and environment variables, parsed into plain values; names no other module.
pub mod config;
/// Migrations, the pool, and the embedded PostgreSQL.
pub mod db;
/// Forwarding recorded events to the team's own application.
pub mod destinations;
/// The domain: what each event type changes, in the delivery's transaction.
pub mod effects;
/// The provider-neutral event, and the payload it is read from.
pub mod event;
/// The HTTP routes and the server, the admin API and the operator console among them.
pub mod http;
/// The core: one transaction per delivery (archive, dedup, effects), run by delivery workers.
pub mod inbox;
/// Prometheus metrics.
pub mod monitoring;
/// Closed sets of names (statuses, modes) read from text.
pub mod names;
/// What operators do with the archive: list, show, reprocess, purge, and the console's overview.
pub mod operations;
/// Effects that leave the database: emails enqueued by effects, sent by a worker.
pub mod outbox;
/// Signature verification and event formats, one module per provider.
pub mod providers;
/// The queue engine every effect that leaves the database is sent by: claims, leases, retries.
pub mod queue;
/// Reading the providers' event APIs back, so an outage loses no event.
pub mod reconcile;
/// Log output.
pub mod telemetry;

#[cfg(test)]
mod layers;
