//! Where the files of one embedded cluster live, and which account owns each.
//!
//! ```text
//! root/                the directory the operator chose (DATA_DIR): ours, 0700,
//!                      or 0711 when the server runs as another account, which
//!                      must pass through it
//!   owner.lock         ours: flock held by the process that owns the server
//!   users.lock         ours: flock shared by every process using the server
//!   postgres.log       ours: the server's stderr, appended
//!   pgdata/            the server account's: the cluster (PGDATA), made by initdb
//!   pgdata.initdb/     the server account's: initdb's work dir, renamed to pgdata/ once complete
//!   socket/            the server account's: its unix socket (unless the path is too long)
//! ```
//!
//! The locks sit beside PGDATA, not in it, so they can be taken before initdb
//! (which wants an empty directory) and survive a re-initialization.
//!
//! Why this split matters when we are root and the server is not: every
//! file we open is in a directory only we can write (`root`, whose parents
//! no other account may write either), opened without following a symlink
//! and checked to be our own, so nothing the server account does (or code
//! that runs as it: any database superuser's `COPY ... TO PROGRAM`) can turn
//! our opens, modes or owners onto another file. The directories we hand to
//! it are changed through the handle we opened, never again by path.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::unistd::geteuid;
use sha2::{Digest, Sha256};

use super::EmbeddedError;
use super::error::io_error;
use super::server_user::ServerUser;

/// The port in the socket's name; there is no TCP listener.
pub(super) const PORT: u16 = 5432;

/// `sun_path` holds 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// What a cluster directory may hold: ours, and what earlier versions left
/// (the socket and its lock sat in `root` itself). Anything else means the
/// directory is not a cluster's, and is refused rather than taken over.
const CLUSTER_ENTRIES: [&str; 8] = [
    "owner.lock",
    "users.lock",
    "postgres.log",
    "pgdata",
    "pgdata.initdb",
    "socket",
    ".s.PGSQL.5432",
    ".s.PGSQL.5432.lock",
];

/// The paths of one cluster.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    pub root: PathBuf,
    pub pgdata: PathBuf,
    pub initdb_work: PathBuf,
    pub log: PathBuf,
    pub owner_lock: PathBuf,
    pub users_lock: PathBuf,
    pub socket_dir: PathBuf,
}

impl Layout {
    /// Makes `dir` ours (created if absent) and the socket directory the
    /// server account's, after refusing a `dir` that another account could
    /// have prepared or could still change: a symlink, a directory owned
    /// by another account or below one another account may write, or one
    /// that holds files that are not a cluster's (`DATA_DIR=.`).
    pub fn prepare(dir: &Path, user: &ServerUser) -> Result<Self, EmbeddedError> {
        let root = absolute(dir)?;
        let unsafe_dir = |reason: String| EmbeddedError::UnsafeDataDir { dir: root.clone(), reason };
        check_parents(&root).map_err(unsafe_dir)?;
        let created = create_dir(&root)?;
        let handle = open_dir(&root).map_err(|reason| unsafe_dir(reason.to_string()))?;
        let meta = handle.metadata().map_err(io_error("inspect", &root))?;
        if meta.uid() == user.uid().as_raw() && user.is_other_account() {
            let path = root.display();
            return Err(unsafe_dir(format!(
                "it is owned by {}, the server account (an earlier version running as root handed it \
                 over; give it back: `chown root: {path} {path}/*.lock {path}/postgres.log && chmod 0711 {path}`)",
                owner(meta.uid())
            )));
        }
        if meta.uid() != geteuid().as_raw() {
            return Err(unsafe_dir(format!(
                "it is owned by {}, not by this process's user",
                owner(meta.uid())
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(unsafe_dir("it is writable by other accounts".into()));
        }
        if !created {
            check_cluster_entries(&root).map_err(unsafe_dir)?;
        }
        // Changed only once it is known to be ours (and through the handle).
        let mode = if user.is_other_account() { 0o711 } else { 0o700 };
        handle
            .set_permissions(PermissionsExt::from_mode(mode))
            .map_err(io_error("set permissions of", &root))?;
        user.check_reachable(&root)?;

        let socket_dir = if socket_path(&root.join("socket")).len() <= MAX_SOCKET_PATH {
            root.join("socket")
        } else {
            fallback_socket_dir(&root)
        };
        hand_over_dir(&socket_dir, user)?;

        Ok(Self {
            pgdata: root.join("pgdata"),
            initdb_work: root.join("pgdata.initdb"),
            log: root.join("postgres.log"),
            owner_lock: root.join("owner.lock"),
            users_lock: root.join("users.lock"),
            socket_dir,
            root,
        })
    }

    /// Whether initdb has completed here.
    pub fn is_initialized(&self) -> bool {
        self.pgdata.join("PG_VERSION").is_file()
    }

    /// Opens (creating it) a lock file of ours.
    pub fn open_lock(&self, path: &Path) -> Result<File, EmbeddedError> {
        open_own_file(path, OpenOptions::new().create(true).truncate(false).write(true))
    }

    /// Opens (creating it) the server log for appending.
    pub fn open_log(&self) -> Result<File, EmbeddedError> {
        open_own_file(&self.log, OpenOptions::new().create(true).append(true))
    }
}

/// `dir` as an absolute path whose parents are free of symlinks (the server
/// runs with another working directory, and the socket fallback is named
/// after it); `dir`'s own last component is kept as given, so that a
/// symlink there is seen and refused rather than followed.
fn absolute(dir: &Path) -> Result<PathBuf, EmbeddedError> {
    match (dir.parent(), dir.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
            std::fs::create_dir_all(parent).map_err(io_error("create directory", parent))?;
            Ok(parent.canonicalize().map_err(io_error("resolve", parent))?.join(name))
        }
        // `.`, `..`, `/`: nothing of ours to create; resolved as a whole.
        _ => dir.canonicalize().map_err(io_error("resolve", dir)),
    }
}

/// Refuses a directory that another account could replace: each parent
/// must be owned by root or by us, and not writable by group or others
/// unless sticky (as /tmp is: there only an entry's owner may replace it).
fn check_parents(dir: &Path) -> Result<(), String> {
    let euid = geteuid().as_raw();
    for parent in dir.ancestors().skip(1) {
        let meta =
            std::fs::metadata(parent).map_err(|e| format!("cannot inspect {}: {e}", parent.display()))?;
        if meta.uid() != 0 && meta.uid() != euid {
            return Err(format!("its parent {} is owned by {}", parent.display(), owner(meta.uid())));
        }
        if meta.mode() & 0o022 != 0 && meta.mode() & 0o1000 == 0 {
            return Err(format!("its parent {} is writable by other accounts", parent.display()));
        }
    }
    Ok(())
}

/// Creates `dir` (0700); whether it was created now.
fn create_dir(dir: &Path) -> Result<bool, EmbeddedError> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(io_error("create directory", dir)(err)),
    }
}

/// Opens the directory `dir` itself, refusing a symlink.
fn open_dir(dir: &Path) -> Result<File, &'static str> {
    let opened =
        OpenOptions::new().read(true).custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW).bits()).open(dir);
    // The error says why: with O_DIRECTORY, a symlink is ENOTDIR, like a file.
    opened.map_err(|_| match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() => "it is a symbolic link",
        Ok(meta) if !meta.is_dir() => "it is not a directory",
        _ => "it cannot be opened",
    })
}

/// Refuses a directory that holds anything but a cluster's files.
fn check_cluster_entries(dir: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot list it: {e}"))?;
    for entry in entries {
        let name = entry.map_err(|e| format!("cannot list it: {e}"))?.file_name();
        if !CLUSTER_ENTRIES.iter().any(|known| name == *known) {
            return Err(format!(
                "it holds {name:?}, which is not the embedded cluster's: choose an empty or new directory"
            ));
        }
    }
    Ok(())
}

/// Opens a file of ours in `root` with `options`, created 0600: never
/// through a symlink, and only if it is a plain file of ours with one name
/// (a hard link elsewhere would make our writes land in that file too).
fn open_own_file(path: &Path, options: &mut OpenOptions) -> Result<File, EmbeddedError> {
    let unsafe_file =
        |reason: &str| EmbeddedError::UnsafeFile { path: path.to_path_buf(), reason: reason.into() };
    let file =
        options.mode(0o600).custom_flags(OFlag::O_NOFOLLOW.bits()).open(path).map_err(|err| {
            match err.raw_os_error() {
                Some(code) if code == nix::libc::ELOOP => unsafe_file("it is a symbolic link"),
                _ => io_error("open", path)(err),
            }
        })?;
    let meta = file.metadata().map_err(io_error("inspect", path))?;
    if !meta.is_file() {
        return Err(unsafe_file("it is not a regular file"));
    }
    if meta.uid() != geteuid().as_raw() {
        return Err(unsafe_file(&format!("it is owned by {}", owner(meta.uid()))));
    }
    if meta.nlink() != 1 {
        return Err(unsafe_file("it has other hard links"));
    }
    Ok(file)
}

/// Makes `dir` (created if absent) a directory of the server account's,
/// mode 0700, through a handle opened without following a symlink. An
/// existing one must already be ours or the server account's: anything
/// else may be a trap laid by whoever made it.
pub(super) fn hand_over_dir(dir: &Path, user: &ServerUser) -> Result<(), EmbeddedError> {
    let unsafe_dir = |reason: String| EmbeddedError::UnsafeServerDir { path: dir.to_path_buf(), reason };
    create_dir(dir)?;
    let handle = open_dir(dir).map_err(|reason| unsafe_dir(reason.to_string()))?;
    let meta = handle.metadata().map_err(io_error("inspect", dir))?;
    if meta.uid() != geteuid().as_raw() && meta.uid() != user.uid().as_raw() {
        return Err(unsafe_dir(format!("it is owned by {}", owner(meta.uid()))));
    }
    user.hand_over(&handle, dir)?;
    handle.set_permissions(PermissionsExt::from_mode(0o700)).map_err(io_error("set permissions of", dir))
}

/// Replaces whatever `dir` is (a leftover of an interrupted initdb) by an
/// empty directory of the server account's. `dir` is in `root`, where only
/// we create or rename entries, so nothing can take its place in between.
pub(super) fn create_empty_server_dir(dir: &Path, user: &ServerUser) -> Result<(), EmbeddedError> {
    match std::fs::symlink_metadata(dir) {
        // Never follows a symlink: one is removed, not what it points to.
        Ok(meta) if meta.is_dir() => {
            std::fs::remove_dir_all(dir).map_err(io_error("remove leftover directory", dir))?
        }
        Ok(_) => std::fs::remove_file(dir).map_err(io_error("remove leftover", dir))?,
        Err(err) if err.kind() == ErrorKind::NotFound => {}
        Err(err) => return Err(io_error("inspect", dir)(err)),
    }
    hand_over_dir(dir, user)
}

fn socket_path(dir: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    dir.join(format!(".s.PGSQL.{PORT}")).as_os_str().as_bytes().to_vec()
}

/// A short, stable socket directory for a cluster whose own path is too long
/// for a unix socket: `/tmp/webhook-inbox-<hash of the cluster path>`. The
/// literal `/tmp` (not `$TMPDIR`, which may be long) keeps it short, and the
/// hash makes every process using the same cluster find the same socket.
/// Anyone may create that name first: [`hand_over_dir`] accepts only a real
/// directory of ours or the server account's, and the sticky bit of /tmp
/// stops others from replacing it afterwards.
pub(super) fn fallback_socket_dir(root: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let digest = Sha256::digest(root.as_os_str().as_bytes());
    PathBuf::from(format!("/tmp/webhook-inbox-{}", hex::encode(&digest[..8])))
}

/// An account by name when it has one, for messages.
fn owner(uid: u32) -> String {
    match nix::unistd::User::from_uid(uid.into()) {
        Ok(Some(user)) => format!("`{}`", user.name),
        _ => format!("uid {uid}"),
    }
}
