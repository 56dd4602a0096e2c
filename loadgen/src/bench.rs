//! `loadgen bench`: the ceiling and the service, side by side on one
//! PostgreSQL server in one run, and the results as a markdown table.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use crate::events::Provider;
use crate::pgbench::{self, Ceiling};
use crate::report::Report;
use crate::service::Service;
use crate::{LoadArgs, load};

const PADDLE_SECRET: &str = "pdl_ntfset_bench_secret";
const CLERK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// How the benchmark runs.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The service binary (build it with `cargo build --release`).
    #[arg(long, default_value = "target/release/webhook-inbox")]
    service: PathBuf,
    /// PostgreSQL to run on (a libpq URL that pgbench and psql accept too). Unset: the service's embedded one.
    #[arg(long, env = "BENCH_DATABASE_URL")]
    database_url: Option<String>,
    /// Client counts to measure at.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    concurrency: Vec<usize>,
    /// Seconds each pgbench run lasts; the service's runs send about as many events as the ceiling managed in that time.
    #[arg(long, default_value_t = 8)]
    seconds: u64,
    /// Events of the replay storm.
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
    /// Markdown file whose results section is replaced.
    #[arg(long, default_value = "bench/RESULTS.md")]
    output: PathBuf,
}

/// One row of the table.
struct Row {
    workload: String,
    clients: usize,
    /// pgbench running the SQL the service issues for one such delivery.
    ceiling: Ceiling,
    /// pgbench running the naive statement sequence, where there is one.
    naive: Option<Ceiling>,
    service: Report,
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let work = std::env::temp_dir().join(format!("wib-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let data_dir = work.join("pg");
    let conninfo = match &args.database_url {
        Some(url) => url.clone(),
        None => format!("host={} port=5432 user=postgres dbname=postgres", data_dir.display()),
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
    eprintln!("starting the service ...");
    let service = Service::start(&args.service, &env, &work.join("service.log")).await?;
    let server_version = pgbench::psql(&conninfo, "SHOW server_version")?;
    let same_sql =
        pgbench::write_script(&work, "same-sql.sql", &pgbench::same_sql_script(args.payload_bytes))?;
    let naive = pgbench::write_script(&work, "naive.sql", &pgbench::naive_script(args.payload_bytes))?;
    let handler_sql =
        pgbench::write_script(&work, "handler-sql.sql", &pgbench::handler_sql_script(args.payload_bytes))?;

    let mut rows = Vec::new();
    for &clients in &args.concurrency {
        let ceiling = measure_ceiling(&conninfo, &same_sql, clients, args.seconds)?;
        let naive_ceiling = measure_ceiling(&conninfo, &naive, clients, args.seconds)?;
        let events = ((ceiling.tps * args.seconds as f64) as usize).clamp(1000, 200_000);
        reset(&conninfo)?;
        eprintln!("service: {events} unique events at {clients} clients ...");
        let report = load(&load_args(&service, &args, events, 1, clients, None)).await?;
        anyhow::ensure!(report.with_status(200) == report.requests(), "non-200 answers: {}", report.text());
        rows.push(Row {
            workload: "unique events, no side effects (transaction.updated)".into(),
            clients,
            ceiling,
            naive: Some(naive_ceiling),
            service: report,
        });
    }

    // Events with side effects: unique ones, then the storm of the same
    // type, every event's copies at the same moment; one effect each.
    let clients = args.storm_copies * 3;
    let ceiling = measure_ceiling(&conninfo, &handler_sql, clients, args.seconds)?;
    let events = ((ceiling.tps * args.seconds as f64) as usize).clamp(1000, 200_000);
    reset(&conninfo)?;
    eprintln!("service: {events} unique subscription.created at {clients} clients ...");
    let report = load(&load_args(&service, &args, events, 1, clients, Some("subscription.created"))).await?;
    anyhow::ensure!(report.with_status(200) == report.requests(), "non-200 answers: {}", report.text());
    rows.push(Row {
        workload: "unique events with side effects (subscription.created)".into(),
        clients,
        ceiling,
        naive: None,
        service: report,
    });
    let ceiling = measure_ceiling(&conninfo, &handler_sql, clients, args.seconds)?;
    reset(&conninfo)?;
    eprintln!("service: replay storm {} events × {} copies ...", args.storm_events, args.storm_copies);
    let storm = load_args(
        &service,
        &args,
        args.storm_events,
        args.storm_copies,
        clients,
        Some("subscription.created"),
    );
    let report = load(&storm).await?;
    let check = storm_check(&conninfo, args.storm_events, args.storm_copies, &report)?;
    rows.push(Row {
        workload: format!(
            "replay storm {} × {} (subscription.created)",
            args.storm_events, args.storm_copies
        ),
        clients,
        ceiling,
        naive: None,
        service: report,
    });

    let peak_rss_kib = service.peak_rss_kib();
    service.stop()?;
    let markdown = render(&args, &rows, &check, peak_rss_kib, &server_version)?;
    write_section(&args.output, &markdown)?;
    println!("{markdown}");
    std::fs::remove_dir_all(&work).ok();
    Ok(())
}

fn load_args(
    service: &Service,
    args: &BenchArgs,
    events: usize,
    copies: usize,
    clients: usize,
    event_type: Option<&str>,
) -> LoadArgs {
    LoadArgs {
        addr: service.addr,
        provider: Provider::Paddle,
        event_type: event_type.map(str::to_string),
        events,
        copies,
        concurrency: clients,
        payload_bytes: args.payload_bytes,
        secret: PADDLE_SECRET.to_string(),
        run_id: None,
        json: false,
    }
}

/// Every run starts from empty tables, checkpointed, so none pays for another's writes.
fn reset(conninfo: &str) -> anyhow::Result<()> {
    pgbench::psql(
        conninfo,
        "TRUNCATE webhook_events, processed_webhook_events, credit_grants, subscriptions; CHECKPOINT;",
    )?;
    Ok(())
}

fn measure_ceiling(
    conninfo: &str,
    script: &std::path::Path,
    clients: usize,
    seconds: u64,
) -> anyhow::Result<Ceiling> {
    reset(conninfo)?;
    eprintln!(
        "ceiling: {} at {clients} clients ...",
        script.file_name().unwrap_or_default().to_string_lossy()
    );
    pgbench::run(conninfo, script, clients, seconds)
}

/// What the database says the storm did: one dedup row, one grant and one
/// PROCESSED archive row per event, every other copy SKIPPED.
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

fn render(
    args: &BenchArgs,
    rows: &[Row],
    storm_check: &str,
    peak_rss_kib: Option<u64>,
    version: &str,
) -> anyhow::Result<String> {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut md = String::new();
    writeln!(
        md,
        "Measured {date} on {cores} cores, PostgreSQL {version}, service at commit {commit}, pool of {} connections, \
         ~{} B JSON bodies, {} s per pgbench run; service and pgbench against the same server, one after the other.\n",
        args.pool_size, args.payload_bytes, args.seconds
    )?;
    writeln!(
        md,
        "| workload | clients | ceiling: same SQL (req/s) | service (req/s) | service ÷ ceiling | ceiling: naive SQL (req/s) | service ÷ naive | service p50 / p90 / p99 / max (ms) | ceiling avg latency (ms) | service p99 ÷ ceiling avg |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|")?;
    for row in rows {
        let s = &row.service;
        let (naive, versus_naive) = match &row.naive {
            Some(naive) => (format!("{:.0}", naive.tps), format!("**{:.2}**", s.rps() / naive.tps)),
            None => ("".into(), "".into()),
        };
        writeln!(
            md,
            "| {} | {} | {:.0} | {:.0} | **{:.2}** | {naive} | {versus_naive} | {:.2} / {:.2} / {:.2} / {:.2} | {:.2} | {:.1} |",
            row.workload,
            row.clients,
            row.ceiling.tps,
            s.rps(),
            s.rps() / row.ceiling.tps,
            s.ms(0.5),
            s.ms(0.9),
            s.ms(0.99),
            s.max_ms(),
            row.ceiling.latency_avg_ms,
            s.ms(0.99) / row.ceiling.latency_avg_ms,
        )?;
    }
    writeln!(md, "\nReplay storm check (SQL after the run): {storm_check}\n")?;
    match peak_rss_kib {
        Some(kib) => {
            writeln!(md, "Peak RSS of the service over the whole run: {:.1} MiB.", kib as f64 / 1024.0)?
        }
        None => writeln!(md, "Peak RSS of the service: not available on this platform.")?,
    }
    Ok(md)
}

const START: &str = "<!-- bench:start -->";
const END: &str = "<!-- bench:end -->";

/// Replaces the text between the markers in `path` (or creates the file),
/// keeping the hand-written history around it.
fn write_section(path: &std::path::Path, markdown: &str) -> anyhow::Result<()> {
    let existing =
        std::fs::read_to_string(path).unwrap_or_else(|_| format!("# Benchmark results\n\n{START}\n{END}\n"));
    let (before, rest) =
        existing.split_once(START).ok_or_else(|| anyhow::anyhow!("{} lacks {START}", path.display()))?;
    let (_, after) = rest.split_once(END).ok_or_else(|| anyhow::anyhow!("{} lacks {END}", path.display()))?;
    std::fs::write(path, format!("{before}{START}\n{markdown}{END}{after}"))?;
    Ok(())
}
