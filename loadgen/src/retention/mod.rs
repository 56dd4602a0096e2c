//! `loadgen retention`: what retention costs on a ten-million-row archive,
//! dropping a day's partition against deleting the same rows in batches as
//! the service did before the archive was partitioned, and the plans of the
//! hot reads on the partitioned archive.
//!
//! Starts the service on its embedded PostgreSQL (with
//! `ARCHIVE_RETENTION_DAYS=0`, so its own upkeep never purges) and makes
//! two databases on that server: `partitioned`, migrated by the service's
//! `migrate`, and `unpartitioned`, the schema as it was at [`BASELINE`]
//! (the migration files up to [`BASELINE_LAST_MIGRATION`], each applied by
//! psql in one transaction). Both get the same archive rows, a day at a
//! time, then `VACUUM ANALYZE`. From a `CHECKPOINT` each, the real CLI
//! drops the oldest day in `partitioned` (`purge`), and the baseline's CLI
//! deletes the same rows in `unpartitioned` (its `purge`, 1000 rows per
//! transaction), followed by the `VACUUM` that autovacuum would have to
//! do. Writes the section between `<!-- retention:start -->` and
//! `<!-- retention:end -->` in bench/RESULTS.md (unless `--no-write`).

mod archive;
mod hot_reads;
mod purge;
mod report;

use std::path::PathBuf;

use clap::Args;

use crate::bench::{command_output, commit};
use crate::pgbench::psql;
use crate::results::write_between;
use crate::service::{Binary, PADDLE_SECRET, Service};
use archive::{apply_baseline_migrations, fill, partition_names};
use hot_reads::explain_hot_reads;
use purge::{Purges, cli};
pub(crate) use report::MARKERS;
use report::{Facts, render};

/// The last commit before the archive was partitioned: its `purge` deleted
/// old rows in batches of 1000, one transaction each.
pub const BASELINE: &str = "1f9a0c4";

/// The last migration of [`BASELINE`]: the unpartitioned schema.
const BASELINE_LAST_MIGRATION: u64 = 20261201180000;

/// Each day's rows are spread over its first 23 hours. The baseline's
/// purge compares with `now()` at every batch, so its cutoff moves on
/// while it runs; set at 23:00 of the oldest day, it can move for an hour
/// and still delete exactly that day's rows.
const SPREAD_SECS: u64 = 23 * 3600;

/// A rare event type: one row in a thousand.
const RARE_TYPE: &str = "customer.updated";

/// How the measurement runs.
#[derive(Debug, Args)]
pub struct RetentionArgs {
    #[command(flatten)]
    service: Binary,
    /// webhook-inbox built at the baseline commit (1f9a0c4), whose purge deletes in batches (bench/retention.sh builds it).
    #[arg(long)]
    baseline: PathBuf,
    /// Archive rows in each database.
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// UTC days the rows are spread over, ending yesterday, the same number on each.
    #[arg(long, default_value_t = 10)]
    days: u64,
    /// The migration files (those up to 20261201180000 make the unpartitioned schema).
    #[arg(long, default_value = "migrations")]
    migrations: PathBuf,
    /// Directory for the service and its cluster (default: a new one in the temp dir); removed at the end.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Markdown file whose retention section is replaced.
    #[arg(long, default_value = "bench/RESULTS.md")]
    output: PathBuf,
    /// Print the section and change no file.
    #[arg(long)]
    no_write: bool,
}

/// Stops the service (and with it its PostgreSQL) and removes the work
/// directory, the databases in it, however the run ends.
struct Cleanup {
    work: PathBuf,
    service: Option<Service>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(service) = self.service.take()
            && let Err(error) = service.stop()
        {
            eprintln!("stopping the service: {error}");
        }
        if let Err(error) = std::fs::remove_dir_all(&self.work) {
            eprintln!("removing {}: {error}", self.work.display());
        }
    }
}

/// The embedded server, reached through its socket.
struct Server {
    socket: PathBuf,
}

impl Server {
    fn conninfo(&self, database: &str) -> String {
        format!("host={} port=5432 user=postgres dbname={database}", self.socket.display())
    }

    /// What the CLIs take as `DATABASE_URL`.
    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@localhost:5432/{database}?host={}", self.socket.display())
    }
}

/// Runs the measurement and writes (or prints) its section.
pub async fn run(args: RetentionArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.days >= 2, "--days must be at least 2 (one is dropped, the others stay)");
    anyhow::ensure!(
        args.rows >= args.days * 1000 && args.rows.is_multiple_of(args.days),
        "--rows must be a multiple of --days, at least 1000 a day"
    );
    anyhow::ensure!(args.baseline.exists(), "no baseline binary at {}", args.baseline.display());
    // What is measured is what was built now, whatever changes during the run.
    let (commit, date) = (commit(), command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]));
    let work = args
        .work_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("wib-retention-{}", std::process::id())));
    std::fs::create_dir_all(&work)?;
    let mut cleanup = Cleanup { work: work.clone(), service: None };
    let data_dir = work.join("pg");
    let env = [
        ("PADDLE_WEBHOOK_SECRET", PADDLE_SECRET.to_string()),
        ("DATA_DIR", data_dir.display().to_string()),
        ("ARCHIVE_RETENTION_DAYS", "0".to_string()),
    ];
    eprintln!("starting the service ...");
    let service = Service::start(&args.service.path, &env, &work.join("service.log")).await?;
    // For bench/retention.sh, which stops it if this process is killed.
    std::fs::write(work.join("service.pid"), service.pid().to_string())?;
    cleanup.service = Some(service);
    let server = Server { socket: data_dir.join("socket") };
    let admin = server.conninfo("postgres");
    let version = psql(&admin, "SHOW server_version")?;
    let settings = psql(
        &admin,
        "SELECT string_agg(format('`%s` %s', name, current_setting(name)), ', ' ORDER BY name)
         FROM unnest(ARRAY['full_page_writes', 'max_wal_size', 'shared_buffers', 'wal_compression']) name",
    )?;
    let (partitioned, unpartitioned) = (server.conninfo("partitioned"), server.conninfo("unpartitioned"));

    eprintln!("making the databases ...");
    psql(&admin, "CREATE DATABASE partitioned")?;
    psql(&admin, "CREATE DATABASE unpartitioned")?;
    cli(&args.service.path, &server.url("partitioned"), &["migrate"])?;
    let applied = apply_baseline_migrations(&unpartitioned, &args.migrations)?;
    let kind = |conninfo: &str| {
        psql(conninfo, "SELECT relkind FROM pg_class WHERE oid = 'webhook_events'::regclass")
    };
    anyhow::ensure!(kind(&partitioned)? == "p", "webhook_events is not partitioned in `partitioned`");
    anyhow::ensure!(kind(&unpartitioned)? == "r", "webhook_events is not a plain table in `unpartitioned`");

    // The days, fixed once: both databases get the same rows even if
    // midnight passes during the run.
    let today = psql(&admin, "SELECT (now() AT TIME ZONE 'UTC')::date")?;
    let days: Vec<String> = psql(
        &admin,
        &format!(
            "SELECT string_agg(d::date::text, ' ' ORDER BY d)
             FROM generate_series('{today}'::date - {}, '{today}'::date - 1, interval '1 day') d",
            args.days
        ),
    )?
    .split_whitespace()
    .map(String::from)
    .collect();
    let (first_day, last_day) = (days[0].clone(), days[days.len() - 1].clone());
    psql(
        &partitioned,
        &format!("SELECT create_day_partitions('webhook_events_daily', '{first_day}', '{last_day}')"),
    )?;
    let per_day = args.rows / args.days;
    let filled_partitioned = fill(&partitioned, "partitioned", &days, per_day)?;
    let filled_unpartitioned = fill(&unpartitioned, "unpartitioned", &days, per_day)?;
    anyhow::ensure!(
        (filled_partitioned.rows, filled_partitioned.failed, filled_partitioned.skipped)
            == (filled_unpartitioned.rows, filled_unpartitioned.failed, filled_unpartitioned.skipped),
        "the two databases got different rows"
    );
    let payload = psql(
        &partitioned,
        "SELECT round(avg(pg_column_size(payload))) FROM webhook_events TABLESAMPLE SYSTEM (1) REPEATABLE (1)",
    )?;
    let leaves = partition_names(&partitioned)?;

    eprintln!("explaining the hot reads ...");
    let explained = explain_hot_reads(&partitioned, args.rows, per_day, &leaves)?;

    let Purges { drop, delete, vacuum } =
        purge::measure(&server, &args.service.path, &args.baseline, &first_day)?;

    if let Some(service) = cleanup.service.take() {
        service.stop()?;
    }
    let facts = Facts {
        date,
        commit,
        version,
        settings,
        rows: args.rows,
        per_day,
        days,
        payload,
        applied,
        leaves: leaves.len(),
        partitioned: filled_partitioned,
        unpartitioned: filled_unpartitioned,
    };
    let markdown = render(&facts, &drop, &delete, &vacuum, &explained)?;
    if !args.no_write {
        write_between(&args.output, MARKERS, &markdown)?;
    }
    println!("{markdown}");
    Ok(())
}
