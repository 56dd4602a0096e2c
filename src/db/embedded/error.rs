//! What can go wrong while managing the embedded cluster, phrased so an
//! operator knows what to do next.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the embedded PostgreSQL could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// No directory holding both `initdb` and `postgres` was found.
    #[error(
        "PostgreSQL server binaries not found (need `initdb` and `postgres`; looked in: {searched}); \
         install the PostgreSQL server package (Debian/Ubuntu: `apt-get install postgresql`), \
         set PG_BINDIR to the directory that holds them, or set DATABASE_URL to use an existing server"
    )]
    BinariesNotFound {
        /// Every place that was looked in, for the operator.
        searched: String,
    },

    /// `PG_BINDIR` is set, but a binary is missing there.
    #[error(
        "PG_BINDIR={} has no executable `{missing}`; point PG_BINDIR at the bin directory of a \
         PostgreSQL server installation (e.g. /usr/lib/postgresql/15/bin), unset it to search the \
         usual places, or set DATABASE_URL to use an existing server",
        dir.display()
    )]
    BinDirIncomplete {
        /// The value of `PG_BINDIR`.
        dir: PathBuf,
        /// The first binary not found there.
        missing: &'static str,
    },

    /// This process runs as root, PostgreSQL refuses to, and the account to run it as does not exist.
    #[error(
        "running as root, which PostgreSQL refuses, and the account `{name}` to run it as does not \
         exist; create a dedicated one (`useradd --system --user-group --no-create-home --shell \
         /usr/sbin/nologin {name}`), name another with EMBEDDED_PG_USER, run as a non-root user, or \
         set DATABASE_URL to use an existing server"
    )]
    NoServerUser {
        /// The account looked for.
        name: String,
    },

    /// The account to run the server as is root or shared with everything unprivileged.
    #[error(
        "refusing to run the embedded PostgreSQL as `{name}`: the cluster's files would belong to an \
         account other programs share; set EMBEDDED_PG_USER to a dedicated account"
    )]
    SharedServerUser {
        /// The account refused.
        name: String,
    },

    /// The data directory could have been prepared, or could still be changed, by another account.
    #[error(
        "refusing DATA_DIR {}: {reason}. Choose a directory that does not exist yet (it is created), \
         or one of this user's that holds an embedded cluster",
        dir.display()
    )]
    UnsafeDataDir {
        /// The data directory.
        dir: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A file of ours in the data directory is not what we would have made.
    #[error("refusing to open {}: {reason}; remove it (it is recreated)", path.display())]
    UnsafeFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// The unprivileged server user cannot reach the data directory.
    #[error(
        "the embedded PostgreSQL runs as user `{user}`, which cannot enter {} (on the way to {}); \
         choose a data directory that user can reach (--data-dir), or set DATABASE_URL to use an \
         existing server",
        blocked.display(),
        dir.display()
    )]
    DirNotReachable {
        /// The data directory asked for.
        dir: PathBuf,
        /// The account the server runs as.
        user: String,
        /// The first ancestor that user may not search.
        blocked: PathBuf,
    },

    /// A directory to hand to the server account exists but could be someone else's.
    #[error(
        "refusing to hand {} to the PostgreSQL server: {reason}; remove it (for \
         /tmp/webhook-inbox-*, the socket directory of a long DATA_DIR path, a shorter path avoids it)",
        path.display()
    )]
    UnsafeServerDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// `postmaster.pid` names a live process that is not the server account's.
    #[error(
        "{} names pid {pid}, a live process that is not the PostgreSQL server's: not adopted, not \
         signalled; if no embedded server runs, remove that file",
        pid_file.display()
    )]
    ForeignPostmaster {
        /// The pid the file names.
        pid: i32,
        /// The file.
        pid_file: PathBuf,
    },

    /// A filesystem or process operation failed.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        /// What was being done, as a verb phrase ("create directory").
        action: &'static str,
        /// The file or program concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// `initdb` failed.
    #[error("initdb failed ({status}) for {}:\n{output}", dir.display())]
    Initdb {
        /// The directory being initialized.
        dir: PathBuf,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed.
        output: String,
    },

    /// The server exited before it accepted connections.
    #[error("PostgreSQL exited during startup ({status}); last lines of {}:\n{tail}", log.display())]
    StartFailed {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The server log.
        log: PathBuf,
        /// The end of the server log.
        tail: String,
    },

    /// The server did not accept connections in time.
    #[error(
        "PostgreSQL in {} did not accept connections within {waited:?} (if no server runs there, \
         a stale postmaster.pid naming a live unrelated process can cause this); last lines of {}:\n{tail}",
        dir.display(),
        log.display()
    )]
    NotReady {
        /// The cluster directory.
        dir: PathBuf,
        /// How long we waited.
        waited: Duration,
        /// The server log.
        log: PathBuf,
        /// The end of the server log.
        tail: String,
    },

    /// The server did not shut down in time.
    #[error("PostgreSQL (pid {pid}) did not shut down within {waited:?}; see {}", log.display())]
    StopTimeout {
        /// The postmaster's pid.
        pid: i32,
        /// How long we waited.
        waited: Duration,
        /// The server log.
        log: PathBuf,
    },
}

/// Builds a `map_err` adapter for an I/O error on `path`.
pub(super) fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> EmbeddedError {
    let path = path.to_path_buf();
    move |source| EmbeddedError::Io { action, path, source }
}
