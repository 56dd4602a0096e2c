//! A small disk that really fills: a size-limited tmpfs mounted on a
//! temporary directory, unmounted when the guard drops (also when the test
//! fails). Needs root and `mount`.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use tempfile::TempDir;

/// A mounted tmpfs of a fixed size.
pub struct Tmpfs {
    dir: TempDir,
}

/// What [`Tmpfs::fill_at`] writes.
const FILLER: &str = "filler";

impl Tmpfs {
    /// Mounts a tmpfs of `megabytes` (mode 0755: only root writes its top).
    pub fn mount(megabytes: u64) -> Tmpfs {
        let dir = tempfile::tempdir().expect("temporary directory");
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m,mode=0755"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount");
        assert!(
            output.status.success(),
            "mount failed (the disk fault test needs root): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Tmpfs { dir }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file of zeros into the tmpfs mounted at `path` until it is
    /// full (ENOSPC); returns how many bytes it took.
    pub fn fill_at(path: &Path) -> u64 {
        let mut file = std::fs::File::create(path.join(FILLER)).expect("the filler file");
        let chunk = vec![0u8; 64 * 1024];
        let mut written = 0;
        loop {
            match file.write(&chunk) {
                Ok(0) => return written,
                Ok(n) => written += n as u64,
                Err(error) if error.raw_os_error() == Some(nix::libc::ENOSPC) => return written,
                Err(error) => panic!("filling the disk: {error}"),
            }
        }
    }

    /// Deletes what [`Tmpfs::fill_at`] wrote.
    pub fn free(&self) {
        std::fs::remove_file(self.dir.path().join(FILLER)).expect("remove the filler file");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: whatever still has a file open there (a server that did
        // not stop) does not keep the mount.
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}
