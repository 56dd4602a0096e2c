//! The account the server runs as.
//!
//! PostgreSQL refuses to run as root, and a service is often started as root
//! (containers). Then `initdb` and `postgres` run as a dedicated account:
//! `postgres` (which the PostgreSQL server packages create), or the one
//! `EMBEDDED_PG_USER` names. Never a shared one such as `nobody`: whatever
//! else runs as that account could read and change the cluster.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use nix::unistd::{Gid, Pid, Uid, User, geteuid};

use super::EmbeddedError;
use super::error::io_error;

/// The variable naming the account the server runs as when we are root.
pub(super) const USER_VARIABLE: &str = "EMBEDDED_PG_USER";

/// The account used when [`USER_VARIABLE`] is unset.
const DEFAULT_USER: &str = "postgres";

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
    /// Ourselves, unless we are root: then the dedicated account.
    pub fn resolve() -> Result<Self, EmbeddedError> {
        let euid = geteuid();
        if !euid.is_root() {
            let name = User::from_uid(euid).ok().flatten().map_or_else(|| euid.to_string(), |user| user.name);
            return Ok(Self { uid: euid, gid: nix::unistd::getegid(), name, switch: false });
        }
        let name = std::env::var(USER_VARIABLE).ok().filter(|name| !name.is_empty());
        let name = name.as_deref().unwrap_or(DEFAULT_USER);
        let user = User::from_name(name)
            .ok()
            .flatten()
            .ok_or_else(|| EmbeddedError::NoServerUser { name: name.to_string() })?;
        // `nobody` (and its kin, 65534) is shared by whatever runs unprivileged.
        if user.uid.is_root() || user.name == "nobody" || user.uid.as_raw() == 65534 {
            return Err(EmbeddedError::SharedServerUser { name: user.name });
        }
        Ok(Self { uid: user.uid, gid: user.gid, name: user.name, switch: true })
    }

    /// The account's uid.
    pub fn uid(&self) -> Uid {
        self.uid
    }

    /// Whether the server runs as another account than ours.
    pub fn is_other_account(&self) -> bool {
        self.switch
    }

    /// Makes `command` run as this account. Setting the uid as root also makes
    /// std drop every supplementary group (root's groups must not leak into
    /// the server); only the account's primary group is kept.
    pub fn apply(&self, command: &mut Command) {
        if self.switch {
            command.uid(self.uid.as_raw()).gid(self.gid.as_raw());
        }
    }

    /// Hands the directory open as `handle` (at `path`, for messages) to
    /// this account: changed through the handle, so it is the directory we
    /// opened that changes hands, whatever the path names by then.
    pub fn hand_over(&self, handle: &File, path: &Path) -> Result<(), EmbeddedError> {
        if self.switch {
            std::os::unix::fs::fchown(handle, Some(self.uid.as_raw()), Some(self.gid.as_raw()))
                .map_err(io_error("change owner of", path))?;
        }
        Ok(())
    }

    /// Whether process `pid` runs as this account (the owner of
    /// `/proc/<pid>`: its effective uid). A pid read from a file the account can write is trusted
    /// only as far as this: signalling it then does nothing the account
    /// could not do itself.
    pub fn runs(&self, pid: Pid) -> bool {
        std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|meta| meta.uid() == self.uid.as_raw())
    }

    /// Fails clearly if this account cannot search every ancestor of `dir`
    /// (e.g. `dir` below a 0700 home of root); PostgreSQL would otherwise fail
    /// with a bare "Permission denied" in its log. Mode bits only, no ACLs.
    pub fn check_reachable(&self, dir: &Path) -> Result<(), EmbeddedError> {
        if !self.switch {
            return Ok(());
        }
        for ancestor in dir.ancestors() {
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
