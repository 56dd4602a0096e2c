//! The soak's section of RELIABILITY.md: how it ran, then the start, end and
//! maximum of each sampled series, then what the traffic and the work
//! beside it came to.

use std::fmt::Write as _;
use std::time::Duration;

use super::SoakArgs;
use super::chart::number;
use super::samples::{SERIES, Sample};
use super::traffic::Window;

/// Where the section goes.
pub const MARKERS: (&str, &str) = ("<!-- soak:start -->", "<!-- soak:end -->");

/// Everything a run measured.
pub struct Run<'a> {
    pub date: String,
    pub commit: String,
    pub ran: Duration,
    pub args: &'a SoakArgs,
    pub load_before: String,
    pub load_after: String,
    pub samples: &'a [Sample],
    /// Every answer of the run.
    pub totals: Window,
    /// Distinct events sent.
    pub events: usize,
    /// Of them, those with a dedup row.
    pub applied: u64,
    /// How long the destination took to send every job after the traffic stopped.
    pub drained: Option<Duration>,
    pub forwarded_ok: u64,
    pub forwarded_failed: u64,
    pub reconciliations: u64,
    pub console_polls: u64,
    pub console_failures: u64,
    pub purges: u64,
    pub purge_failures: u64,
    pub peak_rss_mib: Option<f64>,
}

impl Run<'_> {
    /// The markdown.
    pub fn render(&mut self) -> String {
        let args = self.args;
        let chart = chart_link(&args.output, &args.chart);
        let minutes = self.ran.as_secs_f64() / 60.0;
        let requests: u64 = self.totals.statuses.values().sum();
        let answers: Vec<String> =
            self.totals.statuses.iter().map(|(status, count)| format!("{count} × {status}")).collect();
        let note =
            if args.machine_note.is_empty() { String::new() } else { format!(" {}", args.machine_note) };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Run of {} at commit {}, by `scripts/soak`: {minutes:.1} minutes of traffic (release build, the \
             service's embedded PostgreSQL), on {} cores; 1-minute load average {} at the start, {} at the \
             end.{note}",
            self.date,
            self.commit,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            self.load_before,
            self.load_after,
        );
        let _ = writeln!(
            out,
            "\n{} requests a second over {} connections: new Paddle events, half `subscription.created` (an \
             effect) and half without one, and one request in ten a second copy of an event of the second \
             before; one destination wanting every event, whose receiver answers 500 to one request in a \
             hundred; the console read every {} s, reconciliation every {} s, `webhook-inbox purge` every {} s. \
             Sampled every {} s ({} samples; chart: [{}]({})).\n",
            args.rate,
            args.connections,
            args.console_every,
            args.reconcile_every,
            args.purge_every,
            args.interval,
            self.samples.len(),
            args.chart.file_name().map_or(String::new(), |f| f.to_string_lossy().into_owned()),
            chart,
        );
        let _ = writeln!(out, "| sampled | start | end | max |");
        let _ = writeln!(out, "|---|---|---|---|");
        for (name, unit, value) in SERIES {
            let unit = if unit.is_empty() { String::new() } else { format!(" ({unit})") };
            let (first, last) =
                (self.samples.first().map_or(0.0, value), self.samples.last().map_or(0.0, value));
            let max = self.samples.iter().map(value).fold(0.0, f64::max);
            let _ =
                writeln!(out, "| {name}{unit} | {} | {} | {} |", number(first), number(last), number(max));
        }
        let drained = self.drained.map_or("not within 600 s".into(), |d| format!("{:.1} s", d.as_secs_f64()));
        let peak = self.peak_rss_mib.map_or("unknown".into(), |mib| format!("{mib:.1} MiB"));
        let _ = writeln!(
            out,
            "\n| over the run | result |\n|---|---|\n\
             | requests answered | {requests}: {} |\n\
             | p99 latency over the whole run | {:.1} ms |\n\
             | distinct events sent, applied once | {}, {} |\n\
             | answered as duplicates | {} |\n\
             | forwards answered by the receiver | {} × 200, {} × 500 |\n\
             | every job sent after the traffic stopped | in {drained} |\n\
             | reconciliations (reads of the event API) | {} |\n\
             | console polls (3 pages each), failed | {}, {} |\n\
             | purges, failed | {}, {} |\n\
             | peak RSS of the process (VmHWM) | {peak} |",
            answers.join(", "),
            self.totals.p99_ms(),
            self.events,
            self.applied,
            self.totals.idempotent,
            self.forwarded_ok,
            self.forwarded_failed,
            self.reconciliations,
            self.console_polls,
            self.console_failures,
            self.purges,
            self.purge_failures,
        );
        out
    }
}

/// The chart's path relative to the markdown file's folder.
fn chart_link(markdown: &std::path::Path, chart: &std::path::Path) -> String {
    let base = markdown.parent().unwrap_or(std::path::Path::new(""));
    chart.strip_prefix(base).unwrap_or(chart).display().to_string()
}
