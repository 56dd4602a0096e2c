//! Where the files of one embedded cluster live.
//!
//! Everything sits under the directory the operator chose (`root`, mode 0700):
//!
//! ```text
//! root/
//!   pgdata/            the cluster (PGDATA), created by initdb
//!   pgdata.initdb/     initdb's work dir, renamed to pgdata/ only once complete
//!   postgres.log       the server's stderr, appended
//!   owner.lock         flock: held by the process that owns the server
//!   users.lock         flock: shared by every process using the server
//!   .s.PGSQL.5432      the server's unix socket (unless the path is too long)
//! ```
//!
//! The locks sit beside PGDATA, not in it, so they can be taken before initdb
//! (which wants an empty directory) and survive a re-initialization.

use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::EmbeddedError;
use super::error::io_error;
use super::server_user::ServerUser;

/// The port in the socket's name; there is no TCP listener.
pub(super) const PORT: u16 = 5432;

/// `sun_path` holds 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

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
    /// Creates `dir` (0700, owned by the server user) and the socket directory,
    /// and checks the server user can reach them.
    pub fn prepare(dir: &Path, user: &ServerUser) -> Result<Self, EmbeddedError> {
        create_private_dir(dir)?;
        // Absolute and free of symlinks: the server runs with another working
        // directory, and the socket fallback is named after this path.
        let root = dir.canonicalize().map_err(io_error("resolve", dir))?;
        user.chown(&root)?;
        user.check_reachable(&root)?;

        let socket_dir = if socket_path(&root).len() <= MAX_SOCKET_PATH {
            root.clone()
        } else {
            let fallback = fallback_socket_dir(&root);
            prepare_fallback_socket_dir(&fallback, user)?;
            fallback
        };

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
}

fn socket_path(dir: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    dir.join(format!(".s.PGSQL.{PORT}")).as_os_str().as_bytes().to_vec()
}

/// A short, stable socket directory for a cluster whose own path is too long
/// for a unix socket: `/tmp/webhook-inbox-<hash of the cluster path>`. The
/// literal `/tmp` (not `$TMPDIR`, which may be long) keeps it short, and the
/// hash makes every process using the same cluster find the same socket.
fn fallback_socket_dir(root: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let digest = Sha256::digest(root.as_os_str().as_bytes());
    PathBuf::from(format!("/tmp/webhook-inbox-{}", hex::encode(&digest[..8])))
}

/// The fallback name is predictable in a world-writable directory, so anyone
/// could create it first: accept it only if it is a real directory (not a
/// symlink) owned by the server user or by root, then make it the server
/// user's with mode 0700. The sticky bit of /tmp stops others from replacing
/// it afterwards.
fn prepare_fallback_socket_dir(dir: &Path, user: &ServerUser) -> Result<(), EmbeddedError> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(io_error("create directory", dir)(err));
        }
        _ => {}
    }
    // Inspect before changing anything: chown and chmod follow symlinks.
    let meta = std::fs::symlink_metadata(dir).map_err(io_error("inspect", dir))?;
    let unsafe_dir = |reason: String| EmbeddedError::UnsafeSocketDir { path: dir.to_path_buf(), reason };
    if !meta.file_type().is_dir() {
        return Err(unsafe_dir("it is not a directory".to_owned()));
    }
    if meta.uid() != user.uid().as_raw() && meta.uid() != 0 {
        return Err(unsafe_dir(format!("it is owned by uid {}", meta.uid())));
    }
    user.chown(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io_error("set permissions of", dir))
}

/// `mkdir -p` with the last component (and only it) made 0700.
fn create_private_dir(dir: &Path) -> Result<(), EmbeddedError> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_error("create directory", parent))?;
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io_error("set permissions of", dir))
        }
        Err(err) => Err(io_error("create directory", dir)(err)),
    }
}

/// Creates `dir` (0700, owned by the server user), replacing a leftover.
pub(super) fn create_empty_private_dir(dir: &Path, user: &ServerUser) -> Result<(), EmbeddedError> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io_error("remove leftover directory", dir))?;
    }
    create_private_dir(dir)?;
    user.chown(dir)
}
