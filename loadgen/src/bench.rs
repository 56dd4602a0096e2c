//! `loadgen bench`: the ceiling and the service, side by side on one
//! PostgreSQL server in one run, each row measured several times, with the
//! CPU every party spent; the results go to bench/RESULTS.md and docs/performance.md.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::cpu::{self, Meter, Usage};
use crate::pgbench::{self, Ceiling};
use crate::report::Report;
use crate::results::{self, Kind, Row, Run, Setup};
use crate::service::{Binary, CLERK_SECRET, PADDLE_SECRET, Service};
use crate::{LoadArgs, prepare};

/// How the benchmark runs.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    service: Binary,
    /// PostgreSQL to run on (a libpq URL that pgbench and psql accept too). Unset: the service's embedded one.
    #[arg(long, env = "BENCH_DATABASE_URL")]
    database_url: Option<String>,
    /// Client counts of the rows of unique events without side effects (empty: none).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "1,8,32")]
    concurrency: Vec<usize>,
    /// Client counts of the rows of unique `subscription.created` (empty: none).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "8,30")]
    effects_concurrency: Vec<usize>,
    /// Client counts of the rows of unique `subscription.created` to a second service that exports its spans over OTLP to a sink (empty: none): tracing's cost, beside the effects row of as many clients.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "8")]
    traced_concurrency: Vec<usize>,
    /// Seconds each pgbench run lasts; the service's runs send about as many events as the ceiling managed in that time.
    #[arg(long, default_value_t = 8)]
    seconds: u64,
    /// How many times every row is measured (ceiling, then service); the tables give the median and the spread.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Events of the replay storm (0: no storm row).
    #[arg(long, default_value_t = 2000)]
    storm_events: usize,
    /// Copies of each storm event, fired at the same moment.
    #[arg(long, default_value_t = 10)]
    storm_copies: usize,
    /// Approximate JSON body size.
    #[arg(long, default_value_t = 2500)]
    payload_bytes: usize,
    /// Pool size of the service under test.
    #[arg(long, default_value_t = 16)]
    pool_size: u32,
    /// Markdown file whose results section is replaced and whose history gets a line.
    #[arg(long, default_value = "bench/RESULTS.md")]
    output: PathBuf,
    /// Markdown file whose performance summary is replaced.
    #[arg(long, default_value = "docs/performance.md")]
    summary: PathBuf,
    /// A few words on what this run measures, for its line in the history (default: the commit's subject).
    #[arg(long)]
    note: Option<String>,
    /// The commit `--service` was built from, when it is not this checkout's (a baseline built elsewhere).
    #[arg(long)]
    commit: Option<String>,
    /// Print the results and change no file.
    #[arg(long)]
    no_write: bool,
}

/// What one row sends, and against which ceiling.
struct RowSpec {
    kind: Kind,
    clients: usize,
    ceiling: PathBuf,
    naive: Option<PathBuf>,
}

/// What every measurement needs.
struct Bench<'a> {
    args: &'a BenchArgs,
    conninfo: String,
    service: Service,
    meter: Meter,
    /// How the traced rows start their service: its environment and log.
    traced: Traced,
    postmaster: Option<u32>,
}

/// A service like the benchmark's, on its database, exporting its spans to
/// a sink ([`crate::otlp_sink`]): started for each traced run, stopped after.
struct Traced {
    env: Vec<(&'static str, String)>,
    log: PathBuf,
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    let work = std::env::temp_dir().join(format!("wib-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let data_dir = work.join("pg");
    let conninfo = match &args.database_url {
        Some(url) => url.clone(),
        None => crate::service::embedded_conninfo(&data_dir),
    };
    let mut env = vec![
        ("PADDLE_WEBHOOK_SECRET", PADDLE_SECRET.to_string()),
        ("CLERK_WEBHOOK_SECRET", CLERK_SECRET.to_string()),
        ("PADDLE_PRICE_CREDITS", "pri_bench=10".to_string()),
        ("DB_MAX_CONNECTIONS", args.pool_size.to_string()),
        ("DATA_DIR", data_dir.display().to_string()),
    ];
    if let Some(url) = &args.database_url {
        env.push(("DATABASE_URL", url.clone()));
    }
    // What is measured is what was built now, whatever changes during the run.
    let commit = args.commit.clone().unwrap_or_else(commit);
    let date = command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    eprintln!("starting the service ...");
    let service = Service::start(&args.service.path, &env, &work.join("service.log")).await?;
    let server_version = pgbench::psql(&conninfo, "SHOW server_version")?;
    // PostgreSQL's CPU is read from its processes, so only a server on this machine is metered.
    let postmaster = pgbench::psql(&conninfo, "SHOW data_directory")
        .ok()
        .and_then(|dir| cpu::postmaster_pid(Path::new(&dir)));
    if postmaster.is_none() {
        eprintln!("PostgreSQL's processes are not readable here: its CPU is not measured");
    }
    let meter = Meter::new(service.pid(), postmaster);

    let script = |name: &str, text: String| pgbench::write_script(&work, name, &text);
    let same_sql = script("same-sql.sql", pgbench::same_sql_script(args.payload_bytes))?;
    let naive = script("naive.sql", pgbench::naive_script(args.payload_bytes))?;
    let handler_sql = script("handler-sql.sql", pgbench::handler_sql_script(args.payload_bytes))?;
    let mut specs: Vec<RowSpec> = args
        .concurrency
        .iter()
        .map(|&clients| RowSpec {
            kind: Kind::NoEffects,
            clients,
            ceiling: same_sql.clone(),
            naive: Some(naive.clone()),
        })
        .collect();
    specs.extend(args.effects_concurrency.iter().map(|&clients| RowSpec {
        kind: Kind::Effects,
        clients,
        ceiling: handler_sql.clone(),
        naive: None,
    }));
    specs.extend(args.traced_concurrency.iter().map(|&clients| RowSpec {
        kind: Kind::TracedEffects,
        clients,
        ceiling: handler_sql.clone(),
        naive: None,
    }));
    if args.storm_events > 0 {
        specs.push(RowSpec {
            kind: Kind::Storm { events: args.storm_events, copies: args.storm_copies },
            clients: args.storm_copies * 3,
            ceiling: handler_sql.clone(),
            naive: None,
        });
    }
    anyhow::ensure!(!specs.is_empty(), "no rows to measure");

    let mut traced_env = env.clone();
    traced_env.retain(|(name, _)| *name != "DATABASE_URL");
    traced_env.extend([
        ("DATABASE_URL", database_url(&conninfo)),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{}", crate::otlp_sink::start().await?)),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_string()),
    ]);
    let traced = Traced { env: traced_env, log: work.join("traced-service.log") };
    let bench = Bench { args: &args, conninfo, service, meter, traced, postmaster };
    let mut rows: Vec<Row> =
        specs.iter().map(|spec| Row { kind: spec.kind, clients: spec.clients, runs: Vec::new() }).collect();
    let mut storm_check = None;
    // Every pass measures every row once, so that a slow drift of the
    // machine spreads over all rows rather than over one.
    for pass in 1..=args.runs {
        for (spec, row) in specs.iter().zip(rows.iter_mut()) {
            eprintln!("run {pass} of {}: {} at {} clients", args.runs, spec.kind.label(), spec.clients);
            let (run, check) = bench.measure(spec).await?;
            row.runs.push(run);
            storm_check = check.or(storm_check);
        }
    }

    let peak_rss_kib = bench.service.peak_rss_kib();
    bench.service.stop()?;
    let setup = Setup {
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        postgres_version: server_version,
        commit,
        date,
        pool_size: args.pool_size,
        payload_bytes: args.payload_bytes,
        seconds: args.seconds,
        runs: args.runs,
        peak_rss_kib,
        storm_check,
    };
    let section = results::render(&setup, &rows)?;
    println!("{section}");
    if !args.no_write {
        let note = args.note.clone().unwrap_or_else(|| git(&["log", "-1", "--format=%s"]));
        results::write(&args.output, &section, &results::history_line(&setup, &rows, &note))?;
        results::write_summary(&args.summary, &results::summary(&setup, &rows)?)?;
        eprintln!("wrote {} and {}", args.output.display(), args.summary.display());
    }
    std::fs::remove_dir_all(&work).ok();
    Ok(())
}

impl Bench<'_> {
    /// One run of a row: its ceiling (and naive sequence), then the service
    /// sending as many deliveries as the ceiling managed, each metered.
    async fn measure(&self, spec: &RowSpec) -> anyhow::Result<(Run, Option<String>)> {
        let ceiling = self.ceiling(&spec.ceiling, spec.clients)?;
        let naive = match &spec.naive {
            Some(script) => Some(self.ceiling(script, spec.clients)?.0),
            None => None,
        };
        let events = match spec.kind {
            Kind::Storm { events, .. } => events,
            _ => ((ceiling.0.tps * self.args.seconds as f64) as usize).clamp(1000, 200_000),
        };
        let copies = match spec.kind {
            Kind::Storm { copies, .. } => copies,
            _ => 1,
        };
        reset(&self.conninfo)?;
        let traced = match spec.kind {
            Kind::TracedEffects => {
                Some(Service::start(&self.args.service.path, &self.traced.env, &self.traced.log).await?)
            }
            _ => None,
        };
        let traced_meter;
        let (service, meter) = match &traced {
            Some(traced) => {
                traced_meter = Meter::new(traced.pid(), self.postmaster);
                (traced, &traced_meter)
            }
            None => (&self.service, &self.meter),
        };
        let load = self.load_args(service, events, copies, spec.clients, spec.kind.event_type());
        let prepared = prepare(&load).await?;
        let before = meter.sample()?;
        let report = prepared.send().await?;
        let cpu = meter.sample()?.since(&before);
        if let Some(traced) = traced {
            traced.stop()?;
        }
        let check = match spec.kind {
            Kind::Storm { events, copies } => Some(storm_check(&self.conninfo, events, copies, &report)?),
            _ => {
                anyhow::ensure!(
                    report.with_status(200) == report.requests(),
                    "non-200 answers: {}",
                    report.text()
                );
                None
            }
        };
        Ok((
            Run { ceiling: ceiling.0, ceiling_cpu: ceiling.1, naive, service: report, service_cpu: cpu },
            check,
        ))
    }

    /// pgbench running `script` from empty tables, and the CPU it took.
    fn ceiling(&self, script: &Path, clients: usize) -> anyhow::Result<(Ceiling, Usage)> {
        reset(&self.conninfo)?;
        let before = self.meter.sample()?;
        let ceiling = pgbench::run(&self.conninfo, script, clients, self.args.seconds)?;
        Ok((ceiling, self.meter.sample()?.since(&before)))
    }

    fn load_args(
        &self,
        service: &Service,
        events: usize,
        copies: usize,
        clients: usize,
        event_type: Option<&str>,
    ) -> LoadArgs {
        LoadArgs {
            event_type: event_type.map(str::to_string),
            copies,
            ..LoadArgs::paddle(service.addr, events, clients, self.args.payload_bytes)
        }
    }
}

/// The service's `DATABASE_URL` of the server `conninfo` names: itself when
/// it is a URL; else the embedded server's unix socket ([`crate::service::embedded_conninfo`]).
fn database_url(conninfo: &str) -> String {
    if conninfo.starts_with("postgres") {
        return conninfo.to_string();
    }
    let host = conninfo.split_whitespace().find_map(|part| part.strip_prefix("host=")).unwrap_or_default();
    format!("postgres://postgres@localhost:5432/postgres?host={host}")
}

/// Every run starts from empty tables, checkpointed, so none pays for another's writes.
fn reset(conninfo: &str) -> anyhow::Result<()> {
    pgbench::psql(
        conninfo,
        "TRUNCATE webhook_events, processed_webhook_events, credit_grants, subscriptions; CHECKPOINT;",
    )?;
    Ok(())
}

/// What the database says the storm did: one dedup row, one grant and one
/// PROCESSED archive row per event, every other copy SKIPPED. Fails the
/// benchmark otherwise.
fn storm_check(conninfo: &str, events: usize, copies: usize, report: &Report) -> anyhow::Result<String> {
    let counts = pgbench::psql(
        conninfo,
        "SELECT (SELECT count(*) FROM processed_webhook_events) || ' ' ||
                (SELECT count(*) FROM credit_grants) || ' ' ||
                (SELECT count(DISTINCT event_id) FROM credit_grants) || ' ' ||
                (SELECT count(*) FROM webhook_events WHERE processing_status = 'PROCESSED') || ' ' ||
                (SELECT count(*) FROM webhook_events WHERE processing_status = 'SKIPPED')",
    )?;
    let numbers: Vec<usize> = counts.split_whitespace().filter_map(|n| n.parse().ok()).collect();
    let expected = [events, events, events, events, events * (copies - 1)];
    let exact = numbers == expected && report.idempotent() == events * (copies - 1);
    anyhow::ensure!(exact, "storm check failed: got {numbers:?}, expected {expected:?}, {}", report.text());
    Ok(format!(
        "{} deliveries of {events} events: {} dedup rows, {} credit grants ({} distinct events), {} PROCESSED and {} SKIPPED archive rows, {} idempotent answers. Exactly one effect per event: yes.",
        events * copies,
        numbers[0],
        numbers[1],
        numbers[2],
        numbers[3],
        numbers[4],
        report.idempotent()
    ))
}

/// The commit measured, marked when tracked files (other than the ones the benchmark writes) differ from it.
pub(crate) fn commit() -> String {
    let head = git(&["rev-parse", "--short", "HEAD"]);
    let clean = std::process::Command::new("git")
        .args(["diff", "--quiet", "HEAD", "--", ".", ":!bench/RESULTS.md", ":!docs/performance.md"])
        .status()
        .is_ok_and(|status| status.success());
    if clean { head } else { format!("{head} with uncommitted changes") }
}

fn git(args: &[&str]) -> String {
    command_output("git", args)
}

pub(crate) fn command_output(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
