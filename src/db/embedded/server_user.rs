//! The account the server runs as.
//!
//! PostgreSQL refuses to run as root, and a service is often started as root
//! (containers). Then `initdb` and `postgres` run as `postgres` (or `nobody`),
//! and the cluster directories are handed to that account.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use nix::unistd::{Gid, Uid, User, geteuid};

use super::EmbeddedError;
use super::error::io_error;

/// Who runs `initdb` and `postgres`.
#[derive(Debug, Clone)]
pub(super) struct ServerUser {
    uid: Uid,
    gid: Gid,
    name: String,
    /// Whether we are root and must switch to `uid`/`gid` in the children.
    switch: bool,
}

impl ServerUser {
    /// Ourselves, unless we are root: then `postgres` if it exists, else `nobody`.
    pub fn resolve() -> Result<Self, EmbeddedError> {
        let euid = geteuid();
        if !euid.is_root() {
            let name = User::from_uid(euid).ok().flatten().map_or_else(|| euid.to_string(), |user| user.name);
            return Ok(Self { uid: euid, gid: nix::unistd::getegid(), name, switch: false });
        }
        let user = ["postgres", "nobody"]
            .into_iter()
            .find_map(|name| User::from_name(name).ok().flatten())
            .ok_or(EmbeddedError::NoServerUser)?;
        Ok(Self { uid: user.uid, gid: user.gid, name: user.name, switch: true })
    }

    /// The account's uid.
    pub fn uid(&self) -> Uid {
        self.uid
    }

    /// Makes `command` run as this account. Setting the uid as root also makes
    /// std drop every supplementary group (root's groups must not leak into
    /// the server); only the account's primary group is kept.
    pub fn apply(&self, command: &mut Command) {
        if self.switch {
            command.uid(self.uid.as_raw()).gid(self.gid.as_raw());
        }
    }

    /// Hands `path` to this account (no-op when we are not root).
    pub fn chown(&self, path: &Path) -> Result<(), EmbeddedError> {
        if self.switch {
            nix::unistd::chown(path, Some(self.uid), Some(self.gid))
                .map_err(|errno| io_error("change owner of", path)(errno.into()))?;
        }
        Ok(())
    }

    /// Fails clearly if this account cannot search every ancestor of `dir`
    /// (e.g. `dir` below a 0700 home of root); PostgreSQL would otherwise fail
    /// with a bare "Permission denied" in its log. Mode bits only, no ACLs.
    pub fn check_reachable(&self, dir: &Path) -> Result<(), EmbeddedError> {
        if !self.switch {
            return Ok(());
        }
        for ancestor in dir.ancestors().skip(1) {
            let meta = std::fs::metadata(ancestor).map_err(io_error("inspect", ancestor))?;
            let bit = if meta.uid() == self.uid.as_raw() {
                0o100
            } else if meta.gid() == self.gid.as_raw() {
                0o010
            } else {
                0o001
            };
            if meta.mode() & bit == 0 {
                return Err(EmbeddedError::DirNotReachable {
                    dir: dir.to_path_buf(),
                    user: self.name.clone(),
                    blocked: ancestor.to_path_buf(),
                });
            }
        }
        Ok(())
    }
}
