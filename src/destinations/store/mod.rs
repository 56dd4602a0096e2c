//! The one owner of forwarding's tables: every statement over
//! `destinations` (a destination's runtime state), `destination_jobs` and
//! `destination_attempts` is here, named, and the rest of the service
//! (the queue, operations, monitoring, purge, backfill) calls these.
//!
//! - `state`: the `destinations` rows: declared, paused, resumed; the one
//!   expression of a destination's state, and its backlog.
//! - `sending`: the queue's claim, record and give-back of jobs.
//! - `jobs`: what operators do with jobs and attempts: list, show, replay,
//!   the test event's job, backfill's insert, purge's batches.
//!
//! One statement writes jobs elsewhere, on purpose: a live event's jobs are
//! inserted by the inbox's record statement (`inbox::archive`, its `jobs`
//! CTE), because they must be written by the same statement as the event's
//! dedup row, joined to the rows it inserted, so that a duplicate never
//! makes one and a rolled-back effect takes them with it.
//!
//! Status values come from [`crate::queue::Status`]; the lease protocol's
//! fragments from [`crate::queue::sql`].

pub mod jobs;
pub mod sending;
pub mod state;
