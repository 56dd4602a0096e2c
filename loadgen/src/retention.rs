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

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use serde_json::Value;

use crate::bench::{command_output, commit};
use crate::pgbench::psql;
use crate::results::replace_between;
use crate::service::{Binary, PADDLE_SECRET, Service};

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

/// Bytes of the archive: its table (or its partitions), summed.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    /// Heap, TOAST and maps (`pg_table_size`).
    table: i64,
    /// Every index (`pg_indexes_size`).
    indexes: i64,
    /// Both (`pg_total_relation_size`).
    total: i64,
}

/// One database after its fill.
struct Filled {
    insert_secs: f64,
    vacuum_secs: f64,
    rows: i64,
    failed: i64,
    skipped: i64,
    sizes: Sizes,
}

/// One timed step, from a CHECKPOINT.
struct Step {
    command: String,
    rows_removed: u64,
    secs: f64,
    wal: i64,
    after: Sizes,
    rows_left: i64,
}

/// One hot read's EXPLAIN ANALYZE, summed up.
struct Explained {
    read: &'static str,
    mirrors: &'static str,
    short: &'static str,
    ms: f64,
    rows: i64,
    hit: i64,
    read_blocks: i64,
    scanned: BTreeSet<String>,
    /// Scans other than by index of tables with rows.
    not_by_index: Vec<String>,
    /// Scans other than by index of empty tables.
    empty: Vec<String>,
    text: Option<String>,
}

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

    // The oldest day's rows that retention removes: all but FAILED ones.
    let doomed_sql = format!(
        "SELECT count(*) FROM webhook_events WHERE processing_status <> 'FAILED'
           AND created_at >= '{first_day}'::timestamp AT TIME ZONE 'UTC'
           AND created_at < ('{first_day}'::date + 1)::timestamp AT TIME ZONE 'UTC'"
    );
    let doomed: u64 = psql(&partitioned, &doomed_sql)?.parse()?;
    anyhow::ensure!(doomed == psql(&unpartitioned, &doomed_sql)?.parse::<u64>()?, "the oldest days differ");

    eprintln!("dropping the oldest day's partition ...");
    // Whole days: a day goes once it ended that long ago, so exactly the oldest one.
    let age_days: u64 =
        psql(&partitioned, &format!("SELECT (now() AT TIME ZONE 'UTC')::date - '{first_day}'::date - 1"))?
            .parse()?;
    let drop_args =
        ["purge".to_string(), format!("--older-than={age_days}d"), "--failed-older-than=0".into()];
    let (output, secs, wal) =
        timed(&partitioned, || cli(&args.service.path, &server.url("partitioned"), &drop_args))?;
    let removed = number_before(&output, "processed or skipped")?;
    let dropped_days = number_before(&output, "day partition(s)")?;
    anyhow::ensure!(dropped_days == 1, "purge dropped {dropped_days} days, not one: {output}");
    anyhow::ensure!(
        removed == doomed,
        "purge removed {removed} rows, not the {doomed} of the oldest day: {output}"
    );
    let drop = Step {
        command: format!("webhook-inbox {}", drop_args.join(" ")),
        rows_removed: removed,
        secs,
        wal,
        after: sizes(&partitioned)?,
        rows_left: count(&partitioned)?,
    };

    eprintln!("deleting the same rows in batches with the baseline's purge ...");
    // Seconds back to 23:00 of the oldest day, when its last row is past:
    // the cutoff starts there and moves on with the clock.
    let age_secs: u64 = psql(
        &unpartitioned,
        &format!(
            "SELECT floor(extract(epoch FROM now() - ('{first_day}'::timestamp + interval '{SPREAD_SECS} seconds') AT TIME ZONE 'UTC'))::bigint"
        ),
    )?
    .parse()?;
    let delete_args =
        ["purge".to_string(), format!("--older-than={age_secs}s"), "--failed-older-than=0".into()];
    let (output, secs, wal) =
        timed(&unpartitioned, || cli(&args.baseline, &server.url("unpartitioned"), &delete_args))?;
    let removed = number_before(&output, "processed or skipped")?;
    anyhow::ensure!(
        removed == doomed,
        "the baseline removed {removed} rows, not the {doomed} of the oldest day: {output}"
    );
    let delete = Step {
        command: format!("webhook-inbox ({BASELINE}) {}", delete_args.join(" ")),
        rows_removed: removed,
        secs,
        wal,
        after: sizes(&unpartitioned)?,
        rows_left: count(&unpartitioned)?,
    };
    anyhow::ensure!(
        drop.rows_left == delete.rows_left,
        "different rows left: {} and {}",
        drop.rows_left,
        delete.rows_left
    );

    eprintln!("vacuuming after the delete ...");
    let (_, secs, wal) = timed(&unpartitioned, || psql(&unpartitioned, "VACUUM webhook_events"))?;
    let vacuum = Step {
        command: "VACUUM webhook_events".into(),
        rows_removed: 0,
        secs,
        wal,
        after: sizes(&unpartitioned)?,
        rows_left: count(&unpartitioned)?,
    };

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
        let updated =
            replace_between(&std::fs::read_to_string(&args.output)?, MARKERS, &markdown, &args.output)?;
        std::fs::write(&args.output, updated)?;
    }
    println!("{markdown}");
    Ok(())
}

/// Applies the migration files whose version is at most
/// [`BASELINE_LAST_MIGRATION`], in order, each in one transaction; returns
/// how many.
fn apply_baseline_migrations(conninfo: &str, dir: &Path) -> anyhow::Result<usize> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut files: Vec<(u64, PathBuf)> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?;
            let version = name.split('_').next()?.parse().ok()?;
            Some((version, path))
        })
        .filter(|(version, _)| *version <= BASELINE_LAST_MIGRATION)
        .collect();
    files.sort();
    anyhow::ensure!(
        files.last().is_some_and(|(version, _)| *version == BASELINE_LAST_MIGRATION),
        "{} lacks migration {BASELINE_LAST_MIGRATION}",
        dir.display()
    );
    for (_, file) in &files {
        let output = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-1", "-f"])
            .arg(file)
            .arg(conninfo)
            .output()?;
        anyhow::ensure!(
            output.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(files.len())
}

/// Fills the archive of one database, a day at a time (one INSERT ...
/// SELECT per day, so no giant transaction), then `VACUUM ANALYZE`. The
/// rows are a function of their number alone, so both databases get the
/// same ones: three providers, ten event types (one of them rare), 10 %
/// SKIPPED, 0.5 % FAILED, the rest PROCESSED, and a payload like a
/// provider's.
fn fill(conninfo: &str, name: &str, days: &[String], per_day: u64) -> anyhow::Result<Filled> {
    let started = Instant::now();
    for (index, day) in days.iter().enumerate() {
        eprintln!("filling {name}: {day} ...");
        let first = index as u64 * per_day + 1;
        let last = first + per_day - 1;
        psql(
            conninfo,
            &format!(
                "INSERT INTO webhook_events (provider, event_id, event_type, payload, signature, secret_index,
                                             notification_id, request_id, occurred_at, processing_status,
                                             error_message, created_at, processed_at, source)
                 SELECT p.provider, 'evt_' || g, p.event_type,
                        jsonb_build_object(
                            'event_id', 'evt_' || g, 'event_type', p.event_type, 'occurred_at', t.at,
                            'data', jsonb_build_object(
                                'id', 'sub_' || (g % 50000), 'status', 'active',
                                'customer_id', 'ctm_' || (g % 20000), 'currency_code', 'EUR',
                                'billing_cycle', jsonb_build_object('interval', 'month', 'frequency', 1),
                                'items', jsonb_build_array(jsonb_build_object(
                                    'price_id', 'pri_' || (g % 7), 'quantity', 1 + g % 3, 'status', 'active')),
                                'custom_data', jsonb_build_object('ref', md5(g::text)))),
                        'ts=' || extract(epoch FROM t.at)::bigint || ';h1=' || md5(g::text) || md5((-g)::text), 0,
                        'ntf_' || g, md5('r' || g)::uuid::text, t.at - interval '2 seconds', p.status,
                        CASE WHEN p.status = 'FAILED' THEN 'handler failed: missing data.customer_id' END,
                        t.at, CASE WHEN p.status <> 'FAILED' THEN t.at END, 'webhook'
                 FROM generate_series({first}, {last}) g,
                      LATERAL (SELECT '{day}'::timestamp AT TIME ZONE 'UTC'
                                      + make_interval(secs => (g - {first}) * {SPREAD_SECS}.0 / {per_day}) AS at) t,
                      LATERAL (SELECT (ARRAY['paddle', 'paddle', 'paddle', 'paddle', 'clerk', 'clerk', 'clerk',
                                             'clerk', 'stripe', 'stripe'])[g % 10 + 1] AS provider,
                                      CASE WHEN g % 1000 = 7 THEN '{RARE_TYPE}'
                                           ELSE (ARRAY['subscription.created', 'subscription.updated',
                                                       'transaction.completed', 'transaction.updated',
                                                       'user.created', 'user.updated', 'invoice.paid',
                                                       'subscription.canceled', 'transaction.paid'])[g % 9 + 1]
                                      END AS event_type,
                                      CASE WHEN g % 200 = 3 THEN 'FAILED' WHEN g % 10 = 1 THEN 'SKIPPED'
                                           ELSE 'PROCESSED' END AS status) p"
            ),
        )?;
    }
    let insert_secs = started.elapsed().as_secs_f64();
    // The tables holding rows: the plain table, or the partitions that got
    // some. The empty ones (today's, the days ahead) stay as the service
    // leaves them, never analyzed, as autovacuum skips them: analyzed,
    // they would be known empty and read by Seq Scan, which no partition
    // with rows ever is.
    let tables = psql(
        conninfo,
        "SELECT coalesce(string_agg(relid::regclass::text, ', '), 'webhook_events')
         FROM pg_partition_tree('webhook_events') WHERE isleaf AND pg_relation_size(relid) > 0",
    )?;
    eprintln!("VACUUM ANALYZE {name} ({tables}) ...");
    let started = Instant::now();
    psql(conninfo, &format!("VACUUM ANALYZE {tables}"))?;
    let vacuum_secs = started.elapsed().as_secs_f64();
    let counts = psql(
        conninfo,
        "SELECT count(*) || ' ' || count(*) FILTER (WHERE processing_status = 'FAILED') || ' ' ||
                count(*) FILTER (WHERE processing_status = 'SKIPPED')
         FROM webhook_events",
    )?;
    let counts: Vec<i64> = counts.split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
    anyhow::ensure!(counts.len() == 3, "unexpected counts: {counts:?}");
    Ok(Filled {
        insert_secs,
        vacuum_secs,
        rows: counts[0],
        failed: counts[1],
        skipped: counts[2],
        sizes: sizes(conninfo)?,
    })
}

/// The archive's sizes: the table, or the partitioned table and every
/// partition under it (the parent itself holds nothing).
fn sizes(conninfo: &str) -> anyhow::Result<Sizes> {
    let text = psql(
        conninfo,
        "SELECT sum(pg_table_size(relid)) || ' ' || sum(pg_indexes_size(relid)) || ' ' ||
                sum(pg_total_relation_size(relid))
         FROM (SELECT relid FROM pg_partition_tree('webhook_events')
               UNION SELECT 'webhook_events'::regclass) tree",
    )?;
    let numbers: Vec<i64> = text.split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
    anyhow::ensure!(numbers.len() == 3, "unexpected sizes: {text}");
    Ok(Sizes { table: numbers[0], indexes: numbers[1], total: numbers[2] })
}

fn count(conninfo: &str) -> anyhow::Result<i64> {
    Ok(psql(conninfo, "SELECT count(*) FROM webhook_events")?.parse()?)
}

/// The archive's leaf partitions: the FAILED one and each day's.
fn partition_names(conninfo: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(psql(conninfo, "SELECT relid::regclass::text FROM pg_partition_tree('webhook_events') WHERE isleaf")?
        .lines()
        .map(String::from)
        .collect())
}

/// Runs `step` from a CHECKPOINT (so that every measurement starts with
/// the same pages clean and writes a full page image on each page's first
/// change, as after any checkpoint); its output, wall time and the WAL the
/// cluster wrote meanwhile.
fn timed(
    conninfo: &str,
    step: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<(String, f64, i64)> {
    psql(conninfo, "CHECKPOINT")?;
    let before = psql(conninfo, "SELECT pg_current_wal_lsn()")?;
    let started = Instant::now();
    let output = step()?;
    let secs = started.elapsed().as_secs_f64();
    let wal = psql(conninfo, &format!("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{before}')::bigint"))?;
    Ok((output, secs, wal.parse()?))
}

/// Runs a webhook-inbox command on `url`; its standard output.
fn cli(binary: &Path, url: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> anyhow::Result<String> {
    let output = Command::new(binary).args(args).env("DATABASE_URL", url).output()?;
    anyhow::ensure!(
        output.status.success(),
        "{} failed: {}{}",
        binary.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The number just before `marker` in `text`: `12 processed or skipped`,
/// `(in 1 day partition(s))`.
fn number_before(text: &str, marker: &str) -> anyhow::Result<u64> {
    let (before, _) = text.split_once(marker).ok_or_else(|| anyhow::anyhow!("no {marker:?} in {text:?}"))?;
    let number = before.split_whitespace().last().unwrap_or_default().trim_start_matches('(');
    number.parse().map_err(|_| anyhow::anyhow!("no number before {marker:?} in {text:?}"))
}

/// A hot read: a statement as the code sends it (its parameters bound, as
/// sqlx binds them, through PREPARE and EXECUTE).
struct HotRead {
    read: &'static str,
    /// The Rust function whose SQL this is.
    mirrors: &'static str,
    short: &'static str,
    /// `PREPARE q(...) AS ...;`, or empty for a statement without parameters.
    prepare: String,
    /// What EXPLAIN runs.
    statement: String,
    /// Whether its whole plan goes into the section.
    details: bool,
}

/// The listing's columns (`SUMMARY_COLUMNS` in src/operations/query.rs).
const SUMMARY_COLUMNS: &str = "id, provider, event_id, event_type, processing_status, error_message, \
                               occurred_at, created_at, processed_at, reprocess_of";

/// `query::list` (src/operations/query.rs) with the conditions
/// `EventFilter::push_conditions` (src/operations/filter.rs) appends, as
/// `page::page` calls it: a page of 50 and one more row.
fn list(conditions: &str, types: &str) -> String {
    format!(
        "PREPARE q({types}) AS SELECT {SUMMARY_COLUMNS} FROM webhook_events w WHERE true{conditions} \
         ORDER BY w.created_at DESC, w.id DESC LIMIT ${};",
        types.split(',').filter(|t| !t.trim().is_empty()).count()
    )
}

fn hot_reads(cursor_at: &str, cursor_id: &str, event_id: &str) -> Vec<HotRead> {
    let read = |read, mirrors, short, prepare: String, statement: String, details| HotRead {
        read,
        mirrors,
        short,
        prepare,
        statement,
        details,
    };
    vec![
        read(
            "newest page, no filter",
            "`query::list`",
            "`ORDER BY w.created_at DESC, w.id DESC LIMIT 51`",
            list("", "bigint"),
            "EXECUTE q(51)".into(),
            false,
        ),
        read(
            "newest page of the last hour",
            "`query::list`, `EventFilter::push_conditions`",
            "`WHERE w.created_at >= $1` (now − 1 h), newest first, 51",
            list(" AND w.created_at >= $1", "timestamptz, bigint"),
            "EXECUTE q(now() - interval '1 hour', 51)".into(),
            true,
        ),
        read(
            "next page after a cursor in the middle",
            "`query::list`",
            "`WHERE w.created_at <= $1 AND (w.created_at, w.id) < ($2, $3)`, newest first, 51",
            list(" AND w.created_at <= $1 AND (w.created_at, w.id) < ($2, $3)", "timestamptz, timestamptz, bigint, bigint"),
            format!("EXECUTE q('{cursor_at}', '{cursor_at}', {cursor_id}, 51)"),
            true,
        ),
        read(
            "FAILED rows of the last day",
            "`query::list`, `EventFilter::push_conditions`",
            "`WHERE w.processing_status = 'FAILED' AND w.created_at >= $1` (now − 1 d), newest first, 51",
            list(" AND w.processing_status = 'FAILED' AND w.created_at >= $1", "timestamptz, bigint"),
            "EXECUTE q(now() - interval '1 day', 51)".into(),
            true,
        ),
        read(
            "one event type (a rare one, 0.1 %) since 7 days",
            "`query::list`, `EventFilter::push_conditions`",
            "`WHERE w.event_type = $1 AND w.created_at >= $2` (now − 7 d), newest first, 51",
            list(" AND w.event_type = $1 AND w.created_at >= $2", "text, timestamptz, bigint"),
            format!("EXECUTE q('{RARE_TYPE}', now() - interval '7 days', 51)"),
            false,
        ),
        read(
            "an event's deliveries by event id",
            "`query::list`, `EventFilter::push_conditions`",
            "`WHERE w.event_id = $1`, newest first, 51",
            list(" AND w.event_id = $1", "text, bigint"),
            format!("EXECUTE q('{event_id}', 51)"),
            false,
        ),
        read(
            "one row by id",
            "`query::detail`",
            "`... LEFT JOIN processed_webhook_events p ... WHERE w.id = $1`",
            // query::detail (src/operations/query.rs).
            "PREPARE q(bigint) AS SELECT w.id, w.provider, w.event_id, w.event_type, w.processing_status, w.error_message,
                    w.occurred_at, w.created_at, w.processed_at, w.reprocess_of,
                    w.payload, w.source, w.signature, w.secret_index, w.notification_id, w.request_id,
                    p.processed_at AS event_applied_at
             FROM webhook_events w
             LEFT JOIN processed_webhook_events p ON p.provider = w.provider AND p.event_id = w.event_id
             WHERE w.id = $1;"
                .into(),
            format!("EXECUTE q({cursor_id})"),
            false,
        ),
        read(
            "overview: per-minute counts of the last 24 hours",
            "`overview::day`",
            "`WHERE provider = ANY($1) AND created_at >= $2 AND created_at <= $3 GROUP BY 1, 2, 3`",
            // overview::day (src/operations/overview.rs), for the three providers.
            "PREPARE q(text[], timestamptz, timestamptz) AS
             SELECT provider, processing_status, date_trunc('minute', created_at), count(*)
             FROM webhook_events
             WHERE provider = ANY($1) AND created_at >= $2 AND created_at <= $3
             GROUP BY 1, 2, 3;"
                .into(),
            "EXECUTE q(ARRAY['paddle', 'clerk', 'stripe'], date_trunc('minute', now()) - interval '1439 minutes', now())"
                .into(),
            false,
        ),
        read(
            "metrics: FAILED rows of the last 24 hours",
            "`monitoring::database::query`",
            "`count(*) ... WHERE processing_status = 'FAILED' AND created_at > now() - interval '1 day'`",
            String::new(),
            // The first column of monitoring::database::query (src/monitoring/database.rs).
            "SELECT count(*) FROM webhook_events
             WHERE processing_status = 'FAILED' AND created_at > now() - interval '1 day'"
                .into(),
            false,
        ),
    ]
}

/// EXPLAIN (ANALYZE, BUFFERS) of every hot read, each run once before so
/// that the numbers are a warm cache's, as for a page an operator reloads.
fn explain_hot_reads(
    conninfo: &str,
    rows: u64,
    per_day: u64,
    leaves: &BTreeSet<String>,
) -> anyhow::Result<Vec<Explained>> {
    // The middle of the archive, and of a day.
    let middle = rows / 2 + per_day / 2;
    let event_id = format!("evt_{middle}");
    let cursor = psql(
        conninfo,
        &format!("SELECT created_at || '|' || id FROM webhook_events WHERE event_id = '{event_id}'"),
    )?;
    let (cursor_at, cursor_id) =
        cursor.split_once('|').ok_or_else(|| anyhow::anyhow!("no row {event_id}: {cursor:?}"))?;
    let options = "ANALYZE, BUFFERS, COSTS OFF, TIMING OFF";
    let mut explained = Vec::new();
    for read in hot_reads(cursor_at, cursor_id, &event_id) {
        let run = |format: &str| {
            quiet_psql(conninfo, &format!("{}EXPLAIN ({options}{format}) {}", read.prepare, read.statement))
        };
        run(", FORMAT JSON")?;
        let json: Value = serde_json::from_str(&run(", FORMAT JSON")?)?;
        let top = &json[0];
        let plan = &top["Plan"];
        let mut scanned = BTreeSet::new();
        let mut other_scans = Vec::new();
        walk(plan, &mut |node| {
            let Some(relation) = node["Relation Name"].as_str() else { return };
            let loops = node["Actual Loops"].as_i64().unwrap_or(0);
            if leaves.contains(relation) && loops > 0 {
                scanned.insert(relation.to_string());
            }
            let kind = node["Node Type"].as_str().unwrap_or("?");
            if !matches!(kind, "Index Scan" | "Index Only Scan" | "Bitmap Heap Scan") {
                other_scans.push((kind.to_string(), relation.to_string(), loops));
            }
        });
        let mut not_by_index = Vec::new();
        let mut empty = Vec::new();
        for (kind, relation, loops) in other_scans {
            let bytes: i64 = psql(conninfo, &format!("SELECT pg_relation_size('{relation}')"))?.parse()?;
            let executed = if loops > 0 { "" } else { ", never executed" };
            match bytes {
                0 => empty.push(format!("{kind} on {relation}{executed}")),
                _ => not_by_index.push(format!("{kind} on {relation} ({}{executed})", size(bytes))),
            }
        }
        let text = match read.details {
            true => Some(run("")?),
            false => None,
        };
        explained.push(Explained {
            read: read.read,
            mirrors: read.mirrors,
            short: read.short,
            ms: top["Execution Time"].as_f64().unwrap_or(f64::NAN),
            rows: plan["Actual Rows"].as_i64().unwrap_or(0),
            hit: plan["Shared Hit Blocks"].as_i64().unwrap_or(0),
            read_blocks: plan["Shared Read Blocks"].as_i64().unwrap_or(0),
            scanned,
            not_by_index,
            empty,
            text,
        });
    }
    Ok(explained)
}

/// `psql -c` without the command tags (psql 15 prints every statement's
/// result, the PREPARE's too): only the EXPLAIN's rows.
fn quiet_psql(conninfo: &str, sql: &str) -> anyhow::Result<String> {
    let output = Command::new("psql")
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .arg(conninfo)
        .output()?;
    anyhow::ensure!(output.status.success(), "psql failed: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Visits `plan` and every node under it.
fn walk(plan: &Value, visit: &mut impl FnMut(&Value)) {
    visit(plan);
    for child in plan["Plans"].as_array().into_iter().flatten() {
        walk(child, visit);
    }
}

/// What the header line says.
struct Facts {
    date: String,
    commit: String,
    version: String,
    /// The server's settings that the WAL and the sizes depend on.
    settings: String,
    rows: u64,
    per_day: u64,
    days: Vec<String>,
    payload: String,
    applied: usize,
    leaves: usize,
    partitioned: Filled,
    unpartitioned: Filled,
}

/// Bytes, in binary units.
fn size(bytes: i64) -> String {
    let b = bytes as f64;
    match bytes.abs() {
        n if n >= 1 << 30 => format!("{:.2} GiB", b / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", b / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", b / 1024.0),
        _ => format!("{bytes} B"),
    }
}

fn seconds(secs: f64) -> String {
    if secs < 10.0 { format!("{secs:.2} s") } else { format!("{secs:.0} s") }
}

/// A partition's short name: `p20261130`, `failed`.
fn short_partition(name: &str) -> &str {
    name.strip_prefix("webhook_events_daily_")
        .or_else(|| name.strip_prefix("webhook_events_"))
        .unwrap_or(name)
}

fn render(
    facts: &Facts,
    drop: &Step,
    delete: &Step,
    vacuum: &Step,
    explained: &[Explained],
) -> anyhow::Result<String> {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let (p, u) = (&facts.partitioned, &facts.unpartitioned);
    let mut md = String::new();
    writeln!(
        md,
        "Measured {} on {cores} cores, PostgreSQL {} (the service's embedded server, its default settings: \
         {}), service at commit {}, the batch delete by the service at \
         {BASELINE}. Two databases on that server: `partitioned` (migrated by `webhook-inbox migrate`) and \
         `unpartitioned` (the {} migrations up to {BASELINE_LAST_MIGRATION}, the schema at {BASELINE}). Each got the \
         same {} archive rows, {} on each UTC day from {} to {} (each day's over its first 23 hours), {} of them \
         SKIPPED, {} FAILED, the rest PROCESSED; jsonb payloads of {} B on average; one `INSERT ... SELECT` per day, \
         then `VACUUM ANALYZE` of the tables holding rows (the empty partitions, today's and the days ahead, left \
         never analyzed, as the service leaves them): filled in {} + {} (partitioned) and {} + {} (unpartitioned).\n",
        facts.date,
        facts.version,
        facts.settings,
        facts.commit,
        facts.applied,
        facts.rows,
        facts.per_day,
        facts.days.first().map_or("?", String::as_str),
        facts.days.last().map_or("?", String::as_str),
        p.skipped,
        p.failed,
        facts.payload,
        seconds(p.insert_secs),
        seconds(p.vacuum_secs),
        seconds(u.insert_secs),
        seconds(u.vacuum_secs),
    )?;
    writeln!(
        md,
        "Each step below starts from a `CHECKPOINT`, so that both start with every page clean and write a full \
         page image at each page's first change, as after any checkpoint; the WAL is the cluster's \
         (`pg_wal_lsn_diff` of `pg_current_wal_lsn()` before and after; nothing else wrote meanwhile but the idle \
         service), the time the command's wall time, from its start to its exit. Sizes are summed over the \
         table and all its partitions: table is `pg_table_size` (heap, TOAST, maps), indexes `pg_indexes_size`, \
         total `pg_total_relation_size`. FAILED rows are kept (`--failed-older-than=0`) on both sides.\n"
    )?;
    writeln!(md, "| measurement | drop a day's partition | delete the same rows in batches (as before) |")?;
    writeln!(md, "|---|---|---|")?;
    writeln!(md, "| command | `{}` | `{}` |", drop.command, delete.command)?;
    let before = |s: &Sizes| format!("{} / {} / {}", size(s.table), size(s.indexes), size(s.total));
    writeln!(md, "| before: table / indexes / total | {} | {} |", before(&p.sizes), before(&u.sizes))?;
    writeln!(md, "| rows removed | {} | {} |", drop.rows_removed, delete.rows_removed)?;
    writeln!(md, "| time | **{}** | **{}** |", seconds(drop.secs), seconds(delete.secs))?;
    writeln!(md, "| WAL written | **{}** | **{}** |", size(drop.wal), size(delete.wal))?;
    writeln!(md, "| table size after | {} | {} |", size(drop.after.table), size(delete.after.table))?;
    writeln!(md, "| indexes size after | {} | {} |", size(drop.after.indexes), size(delete.after.indexes))?;
    writeln!(md, "| total after | {} | {} |", size(drop.after.total), size(delete.after.total))?;
    writeln!(md, "| rows left | {} | {} |", drop.rows_left, delete.rows_left)?;
    writeln!(
        md,
        "| then `VACUUM webhook_events` (what autovacuum must do after the delete), from a `CHECKPOINT`: time, WAL | \
         not needed | {}, {} |",
        seconds(vacuum.secs),
        size(vacuum.wal)
    )?;
    writeln!(
        md,
        "| total after that VACUUM: table / indexes / total | {} | {} |",
        before(&drop.after),
        before(&vacuum.after)
    )?;
    writeln!(
        md,
        "\nThe delete and its VACUUM together: {} and {} of WAL, against {} and {} for the drop. VACUUM makes \
         the deleted rows' space free for reuse by later rows but gives none of it back: the unpartitioned \
         archive's files total {} after it, {} before the delete, while the partitioned one's shrank by the day \
         ({} to {}).\n",
        seconds(delete.secs + vacuum.secs),
        size(delete.wal + vacuum.wal),
        seconds(drop.secs),
        size(drop.wal),
        size(vacuum.after.total),
        size(u.sizes.total),
        size(p.sizes.total),
        size(drop.after.total),
    )?;

    writeln!(
        md,
        "The hot reads on the partitioned archive of {} rows (before the drop; {} partitions: `webhook_events_failed` \
         and a day each from {} to 7 days ahead, today's and later ones empty): `EXPLAIN (ANALYZE, BUFFERS, COSTS \
         OFF, TIMING OFF)` of the statement the code sends, its parameters bound through `PREPARE`/`EXECUTE` as \
         sqlx binds them, each run once before (a warm cache). Partitions scanned: those a scan node ran on. \
         The dedup table, which one row's read joins, is empty here: the bench writes no dedup rows.\n",
        p.rows,
        facts.leaves,
        facts.days.first().map_or("?", String::as_str),
    )?;
    writeln!(
        md,
        "| read | mirrors | statement | rows | execution (ms) | shared buffers hit + read | partitions scanned | every scan by index |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|")?;
    for e in explained {
        let names: Vec<&str> = e.scanned.iter().map(|name| short_partition(name)).collect();
        let which = match names.len() {
            0 => String::new(),
            n if n <= 3 => format!(" ({})", names.join(", ")),
            _ => String::new(),
        };
        let by_index = match (e.not_by_index.is_empty(), e.empty.is_empty()) {
            (true, true) => "yes".to_string(),
            (true, false) => format!("yes, but of empty tables: {}", e.empty.join("; ")),
            (false, _) => format!(
                "**no**: {}",
                e.not_by_index.iter().chain(&e.empty).cloned().collect::<Vec<_>>().join("; ")
            ),
        };
        writeln!(
            md,
            "| {} | {} | {} | {} | {:.2} | {} + {} | {} of {}{which} | {by_index} |",
            e.read,
            e.mirrors,
            e.short.replace('|', "\\|"),
            e.rows,
            e.ms,
            e.hit,
            e.read_blocks,
            e.scanned.len(),
            facts.leaves,
        )?;
    }
    writeln!(md, "\n<details><summary>Plans of three of them (a third run of each)</summary>\n")?;
    for e in explained {
        if let Some(text) = &e.text {
            writeln!(md, "{}:\n\n```\n{}\n```\n", e.read, text.trim_end())?;
        }
    }
    writeln!(md, "</details>")?;
    Ok(md)
}

const MARKERS: (&str, &str) = ("<!-- retention:start -->", "<!-- retention:end -->");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_counts_the_purges_print() {
        let new = "deleted 995000 archive row(s): 995000 processed or skipped (in 1 day partition(s)), 0 failed; \
                   the dedup table is untouched\n";
        assert_eq!(number_before(new, "processed or skipped").unwrap(), 995000);
        assert_eq!(number_before(new, "day partition(s)").unwrap(), 1);
        let old =
            "deleted 12 archive row(s): 12 processed or skipped, 0 failed; the dedup table is untouched\n";
        assert_eq!(number_before(old, "processed or skipped").unwrap(), 12);
        assert!(number_before(old, "day partition(s)").is_err());
    }

    #[test]
    fn list_numbers_the_limit_after_the_other_parameters() {
        assert!(list(" AND w.event_id = $1", "text, bigint").contains("LIMIT $2;"));
        assert!(list("", "bigint").contains("WHERE true ORDER BY"));
    }
}
