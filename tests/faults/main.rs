//! Fault tests: the real `webhook-inbox` binary as child processes, a real
//! PostgreSQL, real sockets on loopback, and real faults (SIGKILL, SIGTERM,
//! clients that vanish, PostgreSQL going away, concurrent replicas).
//! Afterwards SQL counts what was applied: every event exactly once; and
//! a receiver on loopback counts what was forwarded: every event at least
//! once, a second time only if it was in flight at a crash.
//!
//! Each test prints one `RELIABILITY` line (see `--nocapture`), from which
//! `scripts/reliability` prints the table of RELIABILITY.md.

mod support;

mod database_vanishes;
mod disconnect;
mod disk_full;
mod forwarding_hang;
mod forwarding_kill;
mod forwarding_path_vanishes;
mod forwarding_postgres_restart;
mod forwarding_replicas;
mod idle_connections;
mod keepalive;
mod kill;
mod logs;
mod outbox_shutdown;
mod panic_log;
mod panics;
mod postgres_crash;
mod postgres_restart;
mod reconcile;
mod replicas;
mod session_timeouts;
mod shutdown;
mod slow_clients;
mod slow_effect;
mod traces;
