//! Finding the PostgreSQL server binaries on this machine.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::EmbeddedError;

/// The server programs we run.
#[derive(Debug, Clone)]
pub(super) struct Binaries {
    pub initdb: PathBuf,
    pub postgres: PathBuf,
}

/// The inputs of the search, separate from the environment so tests can vary them.
#[derive(Debug, Default)]
pub(super) struct Search {
    /// `PG_BINDIR`: when set, the only place looked in.
    pub pg_bindir: Option<PathBuf>,
    /// What `pg_config --bindir` printed, if it ran.
    pub pg_config_bindir: Option<PathBuf>,
    /// `PATH`.
    pub path: Option<OsString>,
    /// Holds one `<version>/bin` per installed version (Debian: /usr/lib/postgresql).
    pub versioned_root: PathBuf,
}

impl Search {
    /// The search this machine's environment describes.
    pub fn from_env() -> Self {
        let pg_bindir = std::env::var_os("PG_BINDIR").filter(|dir| !dir.is_empty()).map(PathBuf::from);
        // Only ask pg_config when it can matter.
        let pg_config_bindir = if pg_bindir.is_none() { pg_config_bindir() } else { None };
        Self {
            pg_bindir,
            pg_config_bindir,
            path: std::env::var_os("PATH"),
            versioned_root: PathBuf::from("/usr/lib/postgresql"),
        }
    }
}

/// Finds a directory with both `initdb` and `postgres`: `PG_BINDIR` if set (and
/// then nowhere else, as an explicit choice must not be silently overridden),
/// else `pg_config --bindir`, else `PATH`, else the highest version under
/// `versioned_root`.
pub(super) fn find(search: &Search) -> Result<Binaries, EmbeddedError> {
    if let Some(dir) = &search.pg_bindir {
        return in_dir(dir).map_err(|missing| EmbeddedError::BinDirIncomplete { dir: dir.clone(), missing });
    }
    let mut searched = Vec::new();

    match &search.pg_config_bindir {
        Some(dir) => {
            if let Ok(found) = in_dir(dir) {
                return Ok(found);
            }
            searched.push(format!("pg_config --bindir ({})", dir.display()));
        }
        None => searched.push("pg_config --bindir (no pg_config)".to_owned()),
    }

    if let Some(path) = &search.path {
        // initdb finds `postgres` beside itself, so both must share a directory.
        if let Some(found) = std::env::split_paths(path).find_map(|dir| in_dir(&dir).ok()) {
            return Ok(found);
        }
    }
    searched.push("PATH".to_owned());

    for dir in versioned_bin_dirs(&search.versioned_root) {
        if let Ok(found) = in_dir(&dir) {
            return Ok(found);
        }
    }
    searched.push(format!("{}/<version>/bin", search.versioned_root.display()));

    Err(EmbeddedError::BinariesNotFound { searched: searched.join(", ") })
}

/// The binaries in `dir`, or the name of the first one missing.
fn in_dir(dir: &Path) -> Result<Binaries, &'static str> {
    let initdb = dir.join("initdb");
    let postgres = dir.join("postgres");
    if !is_executable(&initdb) {
        return Err("initdb");
    }
    if !is_executable(&postgres) {
        return Err("postgres");
    }
    Ok(Binaries { initdb, postgres })
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// `<root>/<version>/bin` for every installed version, highest first.
fn versioned_bin_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut versions: Vec<(Vec<u32>, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = name.split('.').map(str::parse).collect::<Result<Vec<u32>, _>>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    versions.into_iter().map(|(_, dir)| dir).collect()
}

fn pg_config_bindir() -> Option<PathBuf> {
    let output = Command::new("pg_config").arg("--bindir").output().ok()?;
    if !output.status.success() {
        return None;
    }
    let dir = String::from_utf8(output.stdout).ok()?;
    let dir = dir.trim();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}
