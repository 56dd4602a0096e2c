//! The benchmark's results as markdown: the tables of bench/RESULTS.md,
//! its history line, and the summary in docs/performance.md, each written between
//! markers so that a rerun replaces exactly what it measured.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::cpu::Usage;
use crate::pgbench::Ceiling;
use crate::report::Report;

/// What a row sends.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Unique `transaction.updated`: recorded, no side effects.
    NoEffects,
    /// Unique `subscription.created`: the handler's transaction.
    Effects,
    /// Every `subscription.created` sent `copies` times at the same moment.
    Storm { events: usize, copies: usize },
    /// [`Kind::Effects`] to a service exporting its spans over OTLP.
    TracedEffects,
}

impl Kind {
    /// The row's name in the tables.
    pub fn label(&self) -> String {
        match self {
            Kind::NoEffects => "unique events, no side effects (transaction.updated)".into(),
            Kind::Effects => "unique events with side effects (subscription.created)".into(),
            Kind::TracedEffects => "the same, tracing on (spans exported over OTLP/HTTP)".into(),
            Kind::Storm { events, copies } => {
                format!("replay storm {events} × {copies} (subscription.created)")
            }
        }
    }

    /// The event type sent (`None`: the load generator's default, one without side effects).
    pub fn event_type(&self) -> Option<&'static str> {
        match self {
            Kind::NoEffects => None,
            Kind::Effects | Kind::TracedEffects | Kind::Storm { .. } => Some("subscription.created"),
        }
    }

    fn short(&self, clients: usize) -> String {
        match self {
            Kind::NoEffects => format!("{clients}"),
            Kind::Effects => format!("effects {clients}"),
            Kind::TracedEffects => format!("traced {clients}"),
            Kind::Storm { .. } => "storm".into(),
        }
    }
}

/// One measurement of a row: the ceiling, then the service.
pub struct Run {
    /// pgbench running the SQL the service issues for one such delivery.
    pub ceiling: Ceiling,
    /// The CPU the ceiling's run took.
    pub ceiling_cpu: Usage,
    /// pgbench running the naive statement sequence, where there is one.
    pub naive: Option<Ceiling>,
    /// The service's run.
    pub service: Report,
    /// The CPU the service's run took.
    pub service_cpu: Usage,
}

/// A workload at one client count, measured `runs.len()` times.
pub struct Row {
    pub kind: Kind,
    pub clients: usize,
    pub runs: Vec<Run>,
}

/// The circumstances of the whole benchmark.
pub struct Setup {
    pub cores: usize,
    pub postgres_version: String,
    pub commit: String,
    pub date: String,
    pub pool_size: u32,
    pub payload_bytes: usize,
    pub seconds: u64,
    pub runs: usize,
    pub peak_rss_kib: Option<u64>,
    /// What SQL said after the storm (the same in every run, or the benchmark failed).
    pub storm_check: Option<String>,
}

const MICROS: f64 = 1e6;

impl Run {
    fn ratio(&self) -> f64 {
        self.service.rps() / self.ceiling.tps
    }

    fn versus_naive(&self) -> Option<f64> {
        Some(self.service.rps() / self.naive.as_ref()?.tps)
    }

    fn p99_over_ceiling(&self) -> f64 {
        self.service.ms(0.99) / self.ceiling.latency_avg_ms
    }

    fn per_delivery(&self, seconds: f64) -> f64 {
        seconds * MICROS / self.service.requests() as f64
    }

    fn per_transaction(&self, seconds: f64) -> f64 {
        seconds * MICROS / self.ceiling.transactions
    }

    fn service_us(&self) -> f64 {
        self.per_delivery(self.service_cpu.service)
    }

    fn postgres_us(&self) -> Option<f64> {
        Some(self.per_delivery(self.service_cpu.postgres?))
    }

    fn load_generator_us(&self) -> f64 {
        self.per_delivery(self.service_cpu.load_generator)
    }

    fn service_run_us(&self) -> Option<f64> {
        Some(self.service_us() + self.postgres_us()? + self.load_generator_us())
    }

    fn ceiling_postgres_us(&self) -> Option<f64> {
        Some(self.per_transaction(self.ceiling_cpu.postgres?))
    }

    fn pgbench_us(&self) -> f64 {
        self.per_transaction(self.ceiling_cpu.reaped_children)
    }

    fn ceiling_run_us(&self) -> Option<f64> {
        Some(self.ceiling_postgres_us()? + self.pgbench_us())
    }

    /// The ratio service ÷ ceiling would have if both were bound by CPU on the same cores.
    fn cpu_bound(&self) -> Option<f64> {
        Some(self.ceiling_run_us()? / self.service_run_us()?)
    }

    /// The larger share other processes took of the machine, in the ceiling's run or the service's.
    fn others(&self) -> f64 {
        self.ceiling_cpu.others_share.max(self.service_cpu.others_share) * 100.0
    }
}

/// The median of several runs, and the lowest and highest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    pub(crate) fn of(mut values: Vec<f64>) -> Option<Spread> {
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = match n {
            0 => return None,
            _ if n % 2 == 1 => values[n / 2],
            _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
        };
        Some(Spread { median, min: values[0], max: values[n - 1] })
    }

    /// Highest minus lowest, over the median.
    fn relative(&self) -> f64 {
        (self.max - self.min) / self.median
    }

    /// `median (lowest–highest)`, or the value alone for a single run.
    pub(crate) fn show(&self, decimals: usize) -> String {
        let median = format!("{:.*}", decimals, self.median);
        let (min, max) = (format!("{:.*}", decimals, self.min), format!("{:.*}", decimals, self.max));
        if min == max { median } else { format!("{median} ({min}–{max})") }
    }

    fn bold(&self, decimals: usize) -> String {
        let shown = self.show(decimals);
        match shown.split_once(' ') {
            Some((median, range)) => format!("**{median}** {range}"),
            None => format!("**{shown}**"),
        }
    }
}

impl Row {
    fn spread(&self, value: impl Fn(&Run) -> f64) -> Spread {
        Spread::of(self.runs.iter().map(value).collect()).expect("every row has a run")
    }

    /// `None` when some run lacks the value (PostgreSQL not metered, no naive sequence).
    fn spread_of(&self, value: impl Fn(&Run) -> Option<f64>) -> Option<Spread> {
        Spread::of(self.runs.iter().map(value).collect::<Option<Vec<f64>>>()?)
    }

    fn label(&self) -> String {
        self.kind.label()
    }
}

fn show(spread: Option<Spread>, decimals: usize) -> String {
    spread.map_or_else(|| "n/a".into(), |spread| spread.show(decimals))
}

/// The results section of bench/RESULTS.md.
pub fn render(setup: &Setup, rows: &[Row]) -> anyhow::Result<String> {
    let mut md = String::new();
    writeln!(
        md,
        "Measured {} on {} cores, PostgreSQL {}, service at commit {}, pool of {} connections, ~{} B JSON bodies, \
         {} s per pgbench run; every row measured {}, each time the ceiling then the service against the same \
         server. A cell with a range is the median run, then the lowest and the highest.\n",
        setup.date,
        setup.cores,
        setup.postgres_version,
        setup.commit,
        setup.pool_size,
        setup.payload_bytes,
        setup.seconds,
        times(setup.runs)
    )?;
    let noisiest = rows
        .iter()
        .map(|row| (row, row.spread(Run::ratio).relative()))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .expect("at least one row");
    let others = Spread::of(rows.iter().flat_map(|row| row.runs.iter().map(Run::others)).collect())
        .expect("at least one run");
    writeln!(
        md,
        "Noise: service ÷ ceiling varied between runs by up to {:.0} % of its median ({}, {} clients). Other \
         processes took {:.0} % of the machine's CPU in the median run, {:.0} % at most.\n",
        noisiest.1 * 100.0,
        noisiest.0.label(),
        noisiest.0.clients,
        others.median,
        others.max
    )?;

    writeln!(
        md,
        "| workload | clients | ceiling: same SQL (req/s) | service (req/s) | service ÷ ceiling | ceiling: naive SQL (req/s) | service ÷ naive | service p50 / p90 / p99 / max (ms) | ceiling avg latency (ms) | service p99 ÷ ceiling avg |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|")?;
    for row in rows {
        let naive = row.spread_of(|run| Some(run.naive.as_ref()?.tps));
        let versus_naive = row.spread_of(Run::versus_naive);
        writeln!(
            md,
            "| {} | {} | {:.0} | {:.0} | {} | {} | {} | {:.2} / {:.2} / {:.2} / {:.2} | {:.2} | {:.1} |",
            row.label(),
            row.clients,
            row.spread(|run| run.ceiling.tps).median,
            row.spread(|run| run.service.rps()).median,
            row.spread(Run::ratio).bold(2),
            naive.map_or_else(String::new, |naive| format!("{:.0}", naive.median)),
            versus_naive.map_or_else(String::new, |ratio| ratio.bold(2)),
            row.spread(|run| run.service.ms(0.5)).median,
            row.spread(|run| run.service.ms(0.9)).median,
            row.spread(|run| run.service.ms(0.99)).median,
            row.spread(|run| run.service.max_ms()).median,
            row.spread(|run| run.ceiling.latency_avg_ms).median,
            row.spread(Run::p99_over_ceiling).median,
        )?;
    }

    writeln!(
        md,
        "\nCPU per delivery, in µs: each process's CPU time over the run (clock ticks from `/proc`: the service \
         process; PostgreSQL's postmaster and every process it started; the load generator; for the ceiling, \
         pgbench's client) divided by the deliveries (pgbench: transactions) of that run. \"If CPU-bound\" is the \
         ceiling's CPU per delivery over the service run's: the service ÷ ceiling ratio that CPU alone would allow \
         when every party shares the same cores.\n"
    )?;
    writeln!(
        md,
        "| workload | clients | service | PostgreSQL | load generator | service run, all three | ceiling: PostgreSQL | ceiling: pgbench | ceiling, both | if CPU-bound | other processes (% of the machine) |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    for row in rows {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} |",
            row.label(),
            row.clients,
            row.spread(Run::service_us).show(0),
            show(row.spread_of(Run::postgres_us), 0),
            row.spread(Run::load_generator_us).show(0),
            show(row.spread_of(Run::service_run_us), 0),
            show(row.spread_of(Run::ceiling_postgres_us), 0),
            row.spread(Run::pgbench_us).show(0),
            show(row.spread_of(Run::ceiling_run_us), 0),
            show(row.spread_of(Run::cpu_bound), 2),
            row.spread(Run::others).median,
        )?;
    }

    if let Some(check) = &setup.storm_check {
        writeln!(md, "\nReplay storm check (SQL after each run): {check}")?;
    }
    match setup.peak_rss_kib {
        Some(kib) => {
            writeln!(md, "\nPeak RSS of the service over the whole benchmark: {:.1} MiB.", mib(kib))?
        }
        None => writeln!(md, "\nPeak RSS of the service: not available on this platform.")?,
    }

    writeln!(md, "\n| target | status (median run) |\n|---|---|")?;
    for (target, status) in targets(rows, setup) {
        writeln!(md, "| {target} | {status} |")?;
    }

    writeln!(md, "\n<details><summary>Every run</summary>\n")?;
    writeln!(
        md,
        "| workload | clients | run | ceiling (req/s) | service (req/s) | service ÷ ceiling | naive (req/s) | service p99 (ms) | CPU µs: service / PostgreSQL / load generator | ceiling CPU µs: PostgreSQL / pgbench | other processes (%): ceiling / service run |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    for row in rows {
        for (index, run) in row.runs.iter().enumerate() {
            let optional = |value: Option<f64>| value.map_or_else(|| "n/a".into(), |v| format!("{v:.0}"));
            writeln!(
                md,
                "| {} | {} | {} | {:.0} | {:.0} | {:.2} | {} | {:.2} | {:.0} / {} / {:.0} | {} / {:.0} | {:.0} / {:.0} |",
                row.label(),
                row.clients,
                index + 1,
                run.ceiling.tps,
                run.service.rps(),
                run.ratio(),
                run.naive.as_ref().map_or_else(String::new, |naive| format!("{:.0}", naive.tps)),
                run.service.ms(0.99),
                run.service_us(),
                optional(run.postgres_us()),
                run.load_generator_us(),
                optional(run.ceiling_postgres_us()),
                run.pgbench_us(),
                run.ceiling_cpu.others_share * 100.0,
                run.service_cpu.others_share * 100.0,
            )?;
        }
    }
    writeln!(md, "\n</details>")?;
    Ok(md)
}

/// The targets the project set, each with its status in this run.
fn targets(rows: &[Row], setup: &Setup) -> Vec<(String, String)> {
    let status = |met: bool, value: String| {
        if met { format!("met, {value}") } else { format!("**not met**, {value}") }
    };
    let mut targets = Vec::new();
    for row in rows {
        let ratio = row.spread(Run::ratio);
        match row.kind {
            Kind::NoEffects if [8, 32].contains(&row.clients) => targets.push((
                format!(
                    "unique events without side effects at {} clients ≥ 0.8 × ceiling (stretch ≥ 1.0)",
                    row.clients
                ),
                status(ratio.median >= 0.8, ratio.show(2)),
            )),
            Kind::Effects if row.clients == 8 => targets.push((
                "unique `subscription.created` at 8 clients ≥ 0.8 × its ceiling".into(),
                status(ratio.median >= 0.8, ratio.show(2)),
            )),
            _ => {}
        }
        if matches!(row.kind, Kind::NoEffects) && row.clients == 8 {
            let p99 = row.spread(Run::p99_over_ceiling);
            targets.push((
                "p99 at 8 clients ≤ 3 × the ceiling's average latency".into(),
                status(p99.median <= 3.0, p99.show(1)),
            ));
        }
    }
    let storm = rows.iter().find(|row| matches!(row.kind, Kind::Storm { .. }));
    let unique = storm.and_then(|storm| {
        rows.iter().find(|row| matches!(row.kind, Kind::Effects) && row.clients == storm.clients)
    });
    if let (Some(storm), Some(unique)) = (storm, unique) {
        let (storm_us, unique_us) = (storm.spread(Run::service_us), unique.spread(Run::service_us));
        targets.push((
            format!(
                "a replay storm costs the service no more CPU per request than unique `subscription.created` at {} clients",
                storm.clients
            ),
            status(
                storm_us.median <= unique_us.median,
                format!("{} µs against {} µs", storm_us.show(0), unique_us.show(0)),
            ),
        ));
    }
    if let Some(kib) = setup.peak_rss_kib {
        targets.push(("peak RSS ≤ 64 MiB".into(), status(mib(kib) <= 64.0, format!("{:.1} MiB", mib(kib)))));
    }
    targets
}

fn times(runs: usize) -> String {
    if runs == 1 { "once".into() } else { format!("{runs} times") }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// One line of the history table: each row's service ÷ ceiling and the service's CPU per delivery.
pub fn history_line(setup: &Setup, rows: &[Row], note: &str) -> String {
    let each = |value: &dyn Fn(&Row) -> String| {
        rows.iter()
            .map(|row| format!("{}: {}", row.kind.short(row.clients), value(row)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let others = Spread::of(rows.iter().flat_map(|row| row.runs.iter().map(Run::others)).collect())
        .map_or(0.0, |spread| spread.max);
    format!(
        "| {} | {} | {} | {} | {} | {} | {:.0} |",
        setup.date,
        setup.commit,
        note.replace('|', "/"),
        setup.runs,
        each(&|row| format!("{:.2}", row.spread(Run::ratio).median)),
        each(&|row| format!("{:.0}", row.spread(Run::service_us).median)),
        others
    )
}

const HISTORY_HEADER: &str = "| date | commit | note | runs | service ÷ ceiling (median; clients, or effects and clients) | service CPU µs per delivery (median) | other processes, most (% of the machine) |\n|---|---|---|---|---|---|---|\n";

/// The performance table of docs/performance.md.
pub fn summary(setup: &Setup, rows: &[Row]) -> anyhow::Result<String> {
    let mut md = String::new();
    writeln!(
        md,
        "Run of {} at commit {}, {} cores, PostgreSQL {}, ~{} B JSON bodies; each row measured {}: the median, \
         and the lowest and highest run in parentheses.\n",
        setup.date,
        setup.commit,
        setup.cores,
        setup.postgres_version.split_whitespace().next().unwrap_or_default(),
        setup.payload_bytes,
        times(setup.runs)
    )?;
    writeln!(
        md,
        "| workload | clients | ceiling (req/s) | service (req/s) | service ÷ ceiling | service p99 (ms) | service CPU per delivery (µs) |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|")?;
    for row in rows {
        writeln!(
            md,
            "| {} | {} | {:.0} | {:.0} | {} | {:.2} | {} |",
            row.label(),
            row.clients,
            row.spread(|run| run.ceiling.tps).median,
            row.spread(|run| run.service.rps()).median,
            row.spread(Run::ratio).show(2),
            row.spread(|run| run.service.ms(0.99)).median,
            row.spread(Run::service_us).show(0),
        )?;
    }
    if let Some(kib) = setup.peak_rss_kib {
        writeln!(md, "\nPeak RSS of the service: {:.1} MiB.", mib(kib))?;
    }
    Ok(md)
}

pub(crate) const RESULTS: (&str, &str) = ("<!-- bench:start -->", "<!-- bench:end -->");
pub(crate) const HISTORY: (&str, &str) = ("<!-- bench:history:start -->", "<!-- bench:history:end -->");
pub(crate) const SUMMARY: (&str, &str) = ("<!-- bench:summary:start -->", "<!-- bench:summary:end -->");

/// Replaces the results section of `path` (creating the file if need be)
/// and adds `history` as the last line of its history table, keeping the
/// text written by hand around both.
pub fn write(path: &Path, section: &str, history: &str) -> anyhow::Result<()> {
    let existing = std::fs::read_to_string(path).unwrap_or_else(|_| {
        format!(
            "# Benchmark results\n\n{}\n{}\n\n## History\n\n{}\n{}\n",
            RESULTS.0, RESULTS.1, HISTORY.0, HISTORY.1
        )
    });
    let text = replace_between(&existing, RESULTS, section, path)?;
    let (_, old_history, _) = split(&text, HISTORY, path)?;
    let table = if old_history.trim().is_empty() {
        HISTORY_HEADER.to_string()
    } else {
        old_history.trim_start().to_string()
    };
    let text = replace_between(&text, HISTORY, &format!("{table}{history}\n"), path)?;
    std::fs::write(path, text)?;
    Ok(())
}

/// Replaces the performance summary between its markers in `path`.
pub fn write_summary(path: &Path, summary: &str) -> anyhow::Result<()> {
    write_between(path, SUMMARY, summary)
}

/// Where a measurement writes its section and its summary.
#[derive(Debug, clap::Args)]
pub struct Written {
    /// Markdown file whose section is replaced.
    #[arg(long, default_value = "bench/RESULTS.md")]
    output: PathBuf,
    /// Markdown file whose summary is replaced.
    #[arg(long, default_value = "docs/performance.md")]
    summary: PathBuf,
    /// Print the results and change no file.
    #[arg(long)]
    no_write: bool,
}

impl Written {
    /// Replaces the text between `markers.0` in the output with `section`
    /// and between `markers.1` in the summary with `summary`, unless
    /// `--no-write`.
    pub fn write(&self, markers: [(&str, &str); 2], section: &str, summary: &str) -> anyhow::Result<()> {
        if self.no_write {
            return Ok(());
        }
        write_between(&self.output, markers[0], section)?;
        write_between(&self.summary, markers[1], summary)?;
        eprintln!("wrote {} and {}", self.output.display(), self.summary.display());
        Ok(())
    }
}

/// Replaces the text between `markers` in the file at `path` with `content`.
pub fn write_between(path: &Path, markers: (&str, &str), content: &str) -> anyhow::Result<()> {
    let text = replace_between(&std::fs::read_to_string(path)?, markers, content, path)?;
    Ok(std::fs::write(path, text)?)
}

fn split<'a>(
    text: &'a str,
    (start, end): (&str, &str),
    path: &Path,
) -> anyhow::Result<(&'a str, &'a str, &'a str)> {
    let (before, rest) =
        text.split_once(start).ok_or_else(|| anyhow::anyhow!("{} lacks {start}", path.display()))?;
    let (inside, after) =
        rest.split_once(end).ok_or_else(|| anyhow::anyhow!("{} lacks {end}", path.display()))?;
    Ok((before, inside, after))
}

/// `text` with what lies between `markers` replaced by `content` (the
/// markers kept); `path` names the file in errors.
pub fn replace_between(
    text: &str,
    markers: (&str, &str),
    content: &str,
    path: &Path,
) -> anyhow::Result<String> {
    let (before, _, after) = split(text, markers, path)?;
    Ok(format!("{before}{}\n{content}{}{after}", markers.0, markers.1))
}
