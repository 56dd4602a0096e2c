//! Integration tests, in one binary: each test gets its own fresh, migrated
//! database (`support::TestDatabase`) on a real PostgreSQL, the embedded one
//! unless `DATABASE_URL` is set, and drives the app over real HTTP.

mod support;

mod admin_api;
mod alert_rules;
mod availability;
mod backfill;
mod bad_input;
mod batching;
mod cli;
mod concurrency;
mod console;
mod console_browser;
mod console_forwarding;
mod credits;
mod database_harness;
mod delivery;
mod durability;
mod effect_failure;
mod events_cli;
mod forwarding;
mod forwarding_control;
mod forwarding_intake;
mod forwarding_operations;
mod forwarding_ordering;
mod group_commit;
mod hostile_input;
mod hostile_input_admin;
mod hostile_input_connections;
mod hostile_input_guessing;
mod hostile_input_reconcile;
mod metrics;
mod migrate;
mod ordering;
mod outbox;
mod outbox_marks;
mod partitions;
mod payload_search;
mod prometheus;
mod providers;
mod purge;
mod queue_plans;
mod queue_supervision;
mod reconcile;
mod reconcile_github;
mod reprocess;
mod sequences;
mod server;
mod startup;
mod storable_times;
mod verification;
mod worker_connections;
