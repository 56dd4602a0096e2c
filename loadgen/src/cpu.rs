//! CPU time of the benchmark's parties, read from `/proc` around each run:
//! the service process, PostgreSQL (the postmaster and all its processes),
//! the load generator itself, and its reaped children (pgbench), plus the
//! whole machine, so that other processes' share of the run is a number too.
//!
//! Every counter is cumulative and includes processes that ended: a process's
//! own time plus the time of the children it reaped (the postmaster reaps its
//! backends, the load generator reaps pgbench). So the difference of two
//! samples is the CPU spent in between, whichever backends came and went.

use std::path::Path;

/// Cumulative CPU seconds at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    service: f64,
    postgres: Option<f64>,
    own: f64,
    reaped: f64,
    machine_busy: f64,
    machine_total: f64,
}

/// CPU seconds spent between two samples.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// The service process (all its threads).
    pub service: f64,
    /// The postmaster and every process it started; `None` when the server is not local.
    pub postgres: Option<f64>,
    /// The load generator's own process.
    pub load_generator: f64,
    /// Children the load generator waited for in between (pgbench).
    pub reaped_children: f64,
    /// Busy time of processes other than these, over the machine's capacity in that time (0 to 1).
    pub others_share: f64,
}

/// Reads the counters of the parties it was given.
pub struct Meter {
    service: u32,
    postmaster: Option<u32>,
    ticks_per_second: f64,
}

impl Meter {
    /// Meters the service process `service` and, when known, the postmaster `postmaster`.
    pub fn new(service: u32, postmaster: Option<u32>) -> Self {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Meter { service, postmaster, ticks_per_second: if ticks > 0 { ticks as f64 } else { 100.0 } }
    }

    /// The counters now.
    pub fn sample(&self) -> anyhow::Result<Sample> {
        let seconds = |ticks: u64| ticks as f64 / self.ticks_per_second;
        let service = ProcessTicks::read(self.service)
            .ok_or_else(|| anyhow::anyhow!("the service (pid {}) is gone", self.service))?;
        let own = ProcessTicks::read(std::process::id()).expect("/proc/self/stat is readable");
        let (machine_busy, machine_total) = machine_ticks()?;
        Ok(Sample {
            service: seconds(service.own),
            postgres: self.postmaster.map(|pid| seconds(tree_ticks(pid))),
            own: seconds(own.own),
            reaped: seconds(own.reaped),
            machine_busy: seconds(machine_busy),
            machine_total: seconds(machine_total),
        })
    }
}

impl Sample {
    /// What was spent from `before` to this sample.
    pub fn since(&self, before: &Sample) -> Usage {
        let service = self.service - before.service;
        let postgres = self.postgres.zip(before.postgres).map(|(after, before)| after - before);
        let load_generator = self.own - before.own;
        let reaped_children = self.reaped - before.reaped;
        let ours = service + postgres.unwrap_or(0.0) + load_generator + reaped_children;
        let capacity = self.machine_total - before.machine_total;
        let others = (self.machine_busy - before.machine_busy - ours).max(0.0);
        Usage {
            service,
            postgres,
            load_generator,
            reaped_children,
            others_share: if capacity > 0.0 { others / capacity } else { 0.0 },
        }
    }
}

/// One process's counters from `/proc/<pid>/stat`, in clock ticks.
struct ProcessTicks {
    parent: u32,
    /// utime + stime: its own threads.
    own: u64,
    /// cutime + cstime: the children it waited for.
    reaped: u64,
}

impl ProcessTicks {
    fn read(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name is in parentheses and may hold spaces: count fields after it.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // Fields 4 (ppid) and 14 to 17 (utime, stime, cutime, cstime) of proc(5),
        // counted here from field 3 (state).
        let number = |field: usize| fields.get(field - 3)?.parse::<u64>().ok();
        Some(ProcessTicks {
            parent: number(4)? as u32,
            own: number(14)? + number(15)?,
            reaped: number(16)? + number(17)?,
        })
    }
}

/// The postmaster's ticks and those of every process it started, reaped ones included.
fn tree_ticks(postmaster: u32) -> u64 {
    let Some(root) = ProcessTicks::read(postmaster) else { return 0 };
    let children: u64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(ProcessTicks::read)
        .filter(|process| process.parent == postmaster)
        .map(|process| process.own + process.reaped)
        .sum();
    root.own + root.reaped + children
}

/// The machine's busy and total ticks over all cores, from `/proc/stat`.
fn machine_ticks() -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat
        .lines()
        .next()
        .filter(|line| line.starts_with("cpu "))
        .ok_or_else(|| anyhow::anyhow!("/proc/stat has no cpu line"))?;
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let ticks: Vec<u64> = line.split_whitespace().skip(1).take(8).filter_map(|n| n.parse().ok()).collect();
    anyhow::ensure!(ticks.len() == 8, "/proc/stat's cpu line is not as expected: {line}");
    let total: u64 = ticks.iter().sum();
    Ok((total - ticks[3] - ticks[4], total))
}

/// The postmaster of a local server, from `postmaster.pid` in its data
/// directory; `None` when the server is elsewhere or the file is not readable.
pub fn postmaster_pid(data_directory: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(data_directory.join("postmaster.pid")).ok()?;
    let pid: u32 = text.lines().next()?.trim().parse().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}
