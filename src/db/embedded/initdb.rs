//! Creating the cluster on first use.

use std::process::{Command, Stdio};
use std::time::Instant;

use super::binaries::Binaries;
use super::error::io_error;
use super::layout::{self, Layout};
use super::server_user::ServerUser;
use super::{EmbeddedError, EmbeddedOptions};

/// Runs initdb into a work directory and renames it into place, so an initdb
/// killed half way leaves no half-made cluster that would look initialized.
/// The caller holds the owner lock, so a leftover work directory is garbage.
pub(super) fn initdb(
    binaries: &Binaries,
    layout: &Layout,
    user: &ServerUser,
    options: &EmbeddedOptions,
) -> Result<(), EmbeddedError> {
    let started = Instant::now();
    layout::create_empty_server_dir(&layout.initdb_work, user)?;

    let mut command = Command::new(&binaries.initdb);
    command
        .arg("-D")
        .arg(&layout.initdb_work)
        // Trust is safe only because the server listens on nothing but a
        // socket in a 0700 directory: whoever can reach it can read PGDATA anyway.
        .args(["--auth=trust", "-U", "postgres", "-E", "UTF8", "--locale=C"])
        .arg("--no-instructions")
        .current_dir(&layout.root)
        .stdin(Stdio::null());
    if !options.durable {
        command.arg("--no-sync");
    }
    user.apply(&mut command);
    let output = command.output().map_err(io_error("run", &binaries.initdb))?;
    if !output.status.success() {
        return Err(EmbeddedError::Initdb {
            dir: layout.pgdata.clone(),
            status: output.status,
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        });
    }

    std::fs::rename(&layout.initdb_work, &layout.pgdata)
        .map_err(io_error("move initialized cluster to", &layout.pgdata))?;
    tracing::info!(
        dir = %layout.root.display(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "initialized a new embedded PostgreSQL cluster"
    );
    Ok(())
}
