//! A private PostgreSQL cluster managed by this process: the default database
//! when `DATABASE_URL` is unset, and the test suite's throwaway server.
//!
//! Synchronous (std::process, no async runtime), so it can run in `main`
//! before the runtime exists and inside a test harness's `OnceLock`.
//!
//! Several processes may share one cluster directory (a running `serve` and a
//! CLI command; a new `serve` after the previous one was killed). Two `flock`s
//! beside the cluster sort out who does what:
//! - `owner.lock`, exclusive: its holder owns the server, starting it (or
//!   adopting one a dead owner left running) and stopping it on [`EmbeddedPostgres::stop`].
//!   A process that cannot take it attaches to the running server.
//! - `users.lock`, shared by every process using the server: the owner stops
//!   the server only if it can take this one exclusively, i.e. nobody else
//!   uses it. Otherwise the server stays up, and whoever leaves last (taking
//!   over the free owner lock) stops it. So a short CLI command that happened
//!   to start the server never pulls it from under a `serve`.
//!
//! Locks die with their process, so a SIGKILL never leaves a stale lock; the
//! server itself outlives a killed owner and is adopted by the next one.

mod binaries;
mod error;
mod initdb;
mod layout;
mod postmaster;
mod server_user;
#[cfg(test)]
mod tests;

use std::fs::{File, TryLockError};
use std::path::Path;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgSslMode};

pub use error::EmbeddedError;

use binaries::{Binaries, Search};
use error::io_error;
use layout::{Layout, PORT};
use postmaster::{Postmaster, not_ready, poll_until, running_server};
use server_user::ServerUser;

/// How long starting (initdb included) or attaching may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`EmbeddedPostgres::stop`] waits for the fast shutdown.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// How the embedded server is run.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// `true` (the service's default): fsync and full-page writes on, so an
    /// acknowledged commit survives a crash (synchronous_commit stays on
    /// either way). `false` (tests only) turns both off, and initdb skips its
    /// final sync, for speed; a crash may then corrupt the cluster.
    pub durable: bool,
    /// The server gets SIGINT (fast shutdown) when this process exits (tests),
    /// instead of outliving it so the next process can adopt it. Linux only.
    pub stop_with_parent: bool,
}

impl Default for EmbeddedOptions {
    /// Durable, and the server outlives a crashed owner.
    fn default() -> Self {
        Self { durable: true, stop_with_parent: false }
    }
}

/// A handle to a running embedded cluster, either owning its server or
/// attached to one another process owns.
///
/// Dropping the handle without [`stop`](Self::stop) leaves the server running
/// (the next process to start on the directory adopts it).
#[derive(Debug)]
pub struct EmbeddedPostgres {
    layout: Layout,
    user: ServerUser,
    owner_lock: File,
    users_lock: File,
    /// `Some` iff this handle owns the server.
    server: Option<Postmaster>,
}

impl EmbeddedPostgres {
    /// Opens the cluster in `dir` (created 0700 if absent): initdb on first
    /// use, persistent across restarts; starts the server unless it already
    /// runs; returns once it accepts connections (at most 30 s).
    pub fn start(dir: &Path, options: &EmbeddedOptions) -> Result<Self, EmbeddedError> {
        let deadline = Instant::now() + START_TIMEOUT;
        let binaries = binaries::find(&Search::from_env())?;
        let user = ServerUser::resolve()?;
        let layout = Layout::prepare(dir, &user)?;
        let owner_lock = layout.open_lock(&layout.owner_lock)?;
        let users_lock = layout.open_lock(&layout.users_lock)?;

        let owner = try_lock(&owner_lock, &layout.owner_lock)?;
        // Blocks only while an owner is stopping the server.
        users_lock.lock_shared().map_err(io_error("lock", &layout.users_lock))?;
        if !owner {
            // Wait until the owner's server serves, or the owner goes away.
            let attached = poll_until(deadline, || {
                if try_lock(&owner_lock, &layout.owner_lock)? {
                    return Ok(Some(false));
                }
                let ready = running_server(&layout, &user)?.is_some_and(|pid_file| pid_file.ready);
                Ok(ready.then_some(true))
            })?
            .ok_or_else(|| not_ready(&layout))?;
            if attached {
                tracing::info!(
                    dir = %layout.root.display(),
                    "attached to the embedded PostgreSQL another process runs"
                );
                return Ok(Self { layout, user, owner_lock, users_lock, server: None });
            }
        }

        let server = own_server(&binaries, &layout, &user, options, deadline)?;
        Ok(Self { layout, user, owner_lock, users_lock, server: Some(server) })
    }

    /// Connect options for database `postgres` as user `postgres` over the
    /// private unix socket.
    pub fn connect_options(&self) -> PgConnectOptions {
        PgConnectOptions::new_without_pgpass()
            .socket(&self.layout.socket_dir)
            .port(PORT)
            .username("postgres")
            .database("postgres")
            .ssl_mode(PgSslMode::Disable)
    }

    /// Stops the server (fast shutdown: SIGINT, then wait) if this handle owns
    /// it and no other process still uses it; otherwise only lets go of it. An
    /// attached handle whose owner has meanwhile exited is the last user, and
    /// takes ownership to stop the server.
    pub fn stop(self) -> Result<(), EmbeddedError> {
        self.stop_by(Instant::now() + STOP_TIMEOUT)
    }

    /// [`stop`](Self::stop), waiting for the server to be gone only until
    /// `deadline`: a server told to stop by then finishes on its own
    /// ([`EmbeddedError::StopTimeout`] says so).
    pub fn stop_by(self, deadline: Instant) -> Result<(), EmbeddedError> {
        // Locals drop in reverse order: users.lock is released before owner.lock.
        let Self { layout, user, owner_lock, users_lock, server } = self;
        users_lock.unlock().map_err(io_error("unlock", &layout.users_lock))?;

        let server = match server {
            Some(server) => server,
            None => {
                if !try_lock(&owner_lock, &layout.owner_lock)? {
                    return Ok(());
                }
                match running_server(&layout, &user)? {
                    Some(pid_file) => Postmaster::Adopted(pid_file.pid),
                    None => return Ok(()),
                }
            }
        };
        if !try_lock(&users_lock, &layout.users_lock)? {
            tracing::info!(
                dir = %layout.root.display(),
                "other processes still use the embedded PostgreSQL; leaving it running for them"
            );
            return Ok(());
        }
        server.stop(&layout, &user, deadline)?;
        tracing::info!(dir = %layout.root.display(), "stopped the embedded PostgreSQL");
        Ok(())
    }
}

/// As the owner: initialize if needed, then adopt the server a dead owner left
/// running, or start one.
fn own_server(
    binaries: &Binaries,
    layout: &Layout,
    user: &ServerUser,
    options: &EmbeddedOptions,
    deadline: Instant,
) -> Result<Postmaster, EmbeddedError> {
    if !layout.is_initialized() {
        initdb::initdb(binaries, layout, user, options)?;
    }
    // A live postmaster that is starting or stopping is waited for; a stale
    // postmaster.pid (process gone) is the server's own business at startup.
    let running = poll_until(deadline, || match running_server(layout, user)? {
        Some(pid_file) => Ok(pid_file.ready.then_some(Some(pid_file.pid))),
        None => Ok(Some(None)),
    })?
    .ok_or_else(|| not_ready(layout))?;

    if let Some(pid) = running {
        tracing::info!(
            dir = %layout.root.display(),
            %pid,
            "adopted the embedded PostgreSQL a previous owner left running"
        );
        return Ok(Postmaster::Adopted(pid));
    }
    let started = Instant::now();
    let server = postmaster::spawn(binaries, layout, user, options, deadline)?;
    tracing::info!(
        dir = %layout.root.display(),
        socket_dir = %layout.socket_dir.display(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "started the embedded PostgreSQL"
    );
    Ok(server)
}

/// `flock(LOCK_EX | LOCK_NB)`: `Ok(false)` when another holder has it.
fn try_lock(file: &File, path: &Path) -> Result<bool, EmbeddedError> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(err)) => Err(io_error("lock", path)(err)),
    }
}
