//! Running, watching and stopping the `postgres` server process.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::binaries::Binaries;
use super::error::io_error;
use super::layout::{Layout, PORT};
use super::server_user::ServerUser;
use super::{EmbeddedError, EmbeddedOptions, STOP_TIMEOUT};

/// How often a wait re-checks; short, as starting takes well under a second.
pub(super) const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A postmaster this process owns.
#[derive(Debug)]
pub(super) enum Postmaster {
    /// Started by us: we must reap it.
    Child(Child),
    /// Started by an owner that died; its parent now is init, which reaps it.
    Adopted(Pid),
}

impl Postmaster {
    fn pid(&self) -> Pid {
        match self {
            Self::Child(child) => Pid::from_raw(child.id() as i32),
            Self::Adopted(pid) => *pid,
        }
    }

    /// Fast shutdown (SIGINT: sessions are ended, a checkpoint is written) and
    /// wait until the process is gone, or until `deadline`; the server then
    /// finishes shutting down on its own. An adopted server whose pid is no
    /// longer a process of `user` is gone (its pid may be another's now).
    pub fn stop(
        mut self,
        layout: &Layout,
        user: &ServerUser,
        deadline: Instant,
    ) -> Result<(), EmbeddedError> {
        let pid = self.pid();
        if matches!(self, Self::Adopted(_)) && !user.runs(pid) {
            return Ok(());
        }
        match kill(pid, Signal::SIGINT) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(errno) => return Err(io_error("signal PostgreSQL in", &layout.root)(errno.into())),
        }
        let started = Instant::now();
        loop {
            let gone = match &mut self {
                Self::Child(child) => {
                    child.try_wait().map_err(io_error("wait for PostgreSQL in", &layout.root))?.is_some()
                }
                Self::Adopted(pid) => !is_alive(*pid),
            };
            if gone {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(EmbeddedError::StopTimeout {
                    pid: pid.as_raw(),
                    waited: started.elapsed(),
                    log: layout.log.clone(),
                });
            }
            std::thread::sleep(POLL_INTERVAL.min(deadline.saturating_duration_since(Instant::now())));
        }
    }
}

/// Starts `postgres` as a direct child and waits until it accepts connections.
pub(super) fn spawn(
    binaries: &Binaries,
    layout: &Layout,
    user: &ServerUser,
    options: &EmbeddedOptions,
    deadline: Instant,
) -> Result<Postmaster, EmbeddedError> {
    // A file, not a pipe: the server must outlive us, and a pipe would break
    // (SIGPIPE) the moment we exit. Ours, opened by us: the server only
    // writes to it through the descriptor it inherits.
    let log = layout.open_log()?;
    let log_for_stdout = log.try_clone().map_err(io_error("open", &layout.log))?;

    let mut command = Command::new(&binaries.postgres);
    command
        .arg("-D")
        .arg(&layout.pgdata)
        .arg("-p")
        .arg(PORT.to_string())
        // No TCP at all: trust authentication must only be reachable through
        // the socket in a 0700 directory.
        .args(["-c", "listen_addresses="])
        .arg("-c")
        .arg(format!("unix_socket_directories=\"{}\"", layout.socket_dir.display()))
        .args(["-c", "unix_socket_permissions=0700"])
        // No DETAIL, HINT, QUERY or CONTEXT lines in the log: a rejected
        // payload's CONTEXT quotes it ("JSON data, line 1: ...").
        .args(["-c", "log_error_verbosity=terse"])
        .current_dir(&layout.root)
        .stdin(Stdio::null())
        .stdout(log_for_stdout)
        .stderr(log)
        // Own process group: a Ctrl-C in the terminal must reach only the
        // service, which drains its requests before it stops the server.
        .process_group(0);
    if !options.durable {
        // Tests only: a crash may lose the cluster, which a test never reuses.
        // The service default stays durable, with synchronous_commit on.
        command.args(["-c", "fsync=off", "-c", "full_page_writes=off"]);
    }
    user.apply(&mut command);

    let mut child = if options.stop_with_parent {
        let parent = std::process::id();
        // SAFETY: the closure runs between fork and exec and only makes
        // async-signal-safe system calls (prctl, getppid); it allocates nothing.
        unsafe {
            command.pre_exec(move || {
                // Set after std switched the uid: a credential change clears it.
                nix::sys::prctl::set_pdeathsig(Signal::SIGINT)?;
                // The parent may have died before the line above.
                if nix::unistd::getppid().as_raw() as u32 != parent {
                    return Err(Errno::ESRCH.into());
                }
                Ok(())
            });
        }
        spawn_from_immortal_thread(command)
    } else {
        command.spawn()
    }
    .map_err(io_error("start", &binaries.postgres))?;

    let expected = child.id() as i32;
    let ready = poll_until(deadline, || {
        if let Some(status) = child.try_wait().map_err(io_error("wait for PostgreSQL in", &layout.root))? {
            return Err(EmbeddedError::StartFailed {
                status,
                log: layout.log.clone(),
                tail: log_tail(&layout.log),
            });
        }
        Ok(read_pid_file(&layout.pgdata)
            .filter(|pid_file| pid_file.pid.as_raw() == expected && pid_file.ready))
    });
    match ready {
        Ok(Some(_)) => Ok(Postmaster::Child(child)),
        Ok(None) => {
            // Leave no half-started server behind us.
            let _ = Postmaster::Child(child).stop(layout, user, Instant::now() + STOP_TIMEOUT);
            Err(not_ready(layout))
        }
        Err(err) => Err(err),
    }
}

/// Spawns `command` from a thread that never exits.
///
/// Why: `PR_SET_PDEATHSIG` fires when the *thread* that forked the child
/// exits, not the process. A test harness starts the shared server from
/// whichever test thread comes first, and test threads end with their test.
fn spawn_from_immortal_thread(command: Command) -> std::io::Result<Child> {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (sender, requests) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("embedded-postgres-spawner".to_owned())
            // The loop never ends: the sender lives in a static.
            .spawn(move || {
                for (mut command, reply) in requests {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("could not start the embedded-postgres spawner thread");
        sender
    });
    let (reply, response) = mpsc::channel();
    spawner
        .send((command, reply))
        .map_err(|_| std::io::Error::other("the embedded-postgres spawner thread is gone"))?;
    response.recv().map_err(|_| std::io::Error::other("the embedded-postgres spawner thread is gone"))?
}

/// What `postmaster.pid` says.
#[derive(Debug, Clone, Copy)]
pub(super) struct PidFile {
    pub pid: Pid,
    /// The status line (PostgreSQL 10+) says `ready`.
    pub ready: bool,
}

/// Reads `postmaster.pid`: line 1 is the pid, line 8 the status. `None` when
/// absent or still being written. The file is the server account's: never
/// read through a symlink, nor more of it than a pid file holds.
pub(super) fn read_pid_file(pgdata: &Path) -> Option<PidFile> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .open(pgdata.join("postmaster.pid"));
    let mut text = String::new();
    file.ok()?.take(4096).read_to_string(&mut text).ok()?;
    let mut lines = text.lines();
    let pid = lines.next()?.trim().parse::<i32>().ok().filter(|pid| *pid > 0)?;
    let ready = lines.nth(6).is_some_and(|status| status.trim() == "ready");
    Some(PidFile { pid: Pid::from_raw(pid), ready })
}

/// The server `postmaster.pid` names, when it runs; `None` when there is no
/// file or its process is gone. A live pid that is not a process of the
/// server account is refused: the account can write that file, and must not
/// be able to choose a process for us to adopt and signal.
pub(super) fn running_server(layout: &Layout, user: &ServerUser) -> Result<Option<PidFile>, EmbeddedError> {
    match read_pid_file(&layout.pgdata) {
        Some(pid_file) if is_alive(pid_file.pid) => match user.runs(pid_file.pid) {
            true => Ok(Some(pid_file)),
            false => Err(EmbeddedError::ForeignPostmaster {
                pid: pid_file.pid.as_raw(),
                pid_file: layout.pgdata.join("postmaster.pid"),
            }),
        },
        _ => Ok(None),
    }
}

/// Whether `pid` runs (a zombie does not: it is dead, only not yet reaped).
pub(super) fn is_alive(pid: Pid) -> bool {
    match kill(pid, None) {
        Ok(()) | Err(Errno::EPERM) => {}
        Err(_) => return false,
    }
    // /proc/<pid>/stat: "pid (comm) state ..."; comm may contain spaces.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').is_none_or(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// Calls `check` every [`POLL_INTERVAL`] until it yields a value, fails, or
/// `deadline` passes (then `Ok(None)`).
pub(super) fn poll_until<T>(
    deadline: Instant,
    mut check: impl FnMut() -> Result<Option<T>, EmbeddedError>,
) -> Result<Option<T>, EmbeddedError> {
    loop {
        if let Some(value) = check()? {
            return Ok(Some(value));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The error for a server that did not accept connections in time.
pub(super) fn not_ready(layout: &Layout) -> EmbeddedError {
    EmbeddedError::NotReady {
        dir: layout.root.clone(),
        waited: super::START_TIMEOUT,
        log: layout.log.clone(),
        tail: log_tail(&layout.log),
    }
}

/// The last lines of the server log, for an error message.
pub(super) fn log_tail(log: &Path) -> String {
    const TAIL_BYTES: u64 = 4096;
    const TAIL_LINES: usize = 20;
    let opened = OpenOptions::new().read(true).custom_flags(OFlag::O_NOFOLLOW.bits()).open(log);
    let Ok(mut file) = opened else {
        return "(no log)".to_owned();
    };
    let len = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}
