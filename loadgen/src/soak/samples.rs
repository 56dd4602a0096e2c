//! What the soak samples every interval: the service process's memory and
//! descriptors from /proc, its database sessions and pending jobs from
//! PostgreSQL, and the window's p99.

use crate::pgbench::psql;

/// One sample, at `at_secs` since the start.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at_secs: f64,
    pub rss_mib: f64,
    pub fds: f64,
    pub db_connections: f64,
    pub pending_jobs: f64,
    pub p99_ms: f64,
    /// Requests answered in the window.
    pub answered: f64,
}

/// A sampled series: its name, its unit, and its value in a sample.
pub type Series = (&'static str, &'static str, fn(&Sample) -> f64);

/// The sampled series, as the section and the chart name them.
pub const SERIES: [Series; 6] = [
    ("RSS", "MiB", |s| s.rss_mib),
    ("open file descriptors", "", |s| s.fds),
    ("database connections", "", |s| s.db_connections),
    ("pending jobs", "", |s| s.pending_jobs),
    ("p99 latency", "ms", |s| s.p99_ms),
    ("requests answered per interval", "", |s| s.answered),
];

/// The service process's resident memory, in MiB.
pub fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for {pid}"))?
        .parse()?;
    Ok(kib / 1024.0)
}

/// The service process's open file descriptors.
pub fn fds(pid: u32) -> anyhow::Result<f64> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as f64)
}

/// The service's sessions and the destination jobs still pending.
pub fn database(conninfo: &str) -> anyhow::Result<(f64, f64)> {
    let line = psql(
        conninfo,
        "SELECT (SELECT count(*) FROM pg_stat_activity WHERE application_name = 'webhook-inbox') || ' ' ||
                (SELECT count(*) FROM destination_jobs WHERE status = 'pending')",
    )?;
    let (sessions, pending) =
        line.split_once(' ').ok_or_else(|| anyhow::anyhow!("unexpected answer {line:?}"))?;
    Ok((sessions.parse()?, pending.parse()?))
}
