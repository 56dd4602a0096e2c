//! The two archives compared: the partitioned one as `migrate` makes it and
//! the unpartitioned one of [`BASELINE`](super::BASELINE), the same rows in
//! each, and what they weigh.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context as _;

use super::{BASELINE_LAST_MIGRATION, RARE_TYPE, SPREAD_SECS};
use crate::pgbench::psql;

/// Bytes of the archive: its table (or its partitions), summed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sizes {
    /// Heap, TOAST and maps (`pg_table_size`).
    pub(super) table: i64,
    /// Every index (`pg_indexes_size`).
    pub(super) indexes: i64,
    /// Both (`pg_total_relation_size`).
    pub(super) total: i64,
}

/// One database after its fill.
pub(super) struct Filled {
    pub(super) insert_secs: f64,
    pub(super) vacuum_secs: f64,
    pub(super) rows: i64,
    pub(super) failed: i64,
    pub(super) skipped: i64,
    pub(super) sizes: Sizes,
}

/// Applies the migration files whose version is at most
/// [`BASELINE_LAST_MIGRATION`], in order, each in one transaction; returns
/// how many.
pub(super) fn apply_baseline_migrations(conninfo: &str, dir: &Path) -> anyhow::Result<usize> {
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
pub(super) fn fill(conninfo: &str, name: &str, days: &[String], per_day: u64) -> anyhow::Result<Filled> {
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
pub(super) fn sizes(conninfo: &str) -> anyhow::Result<Sizes> {
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

pub(super) fn count(conninfo: &str) -> anyhow::Result<i64> {
    Ok(psql(conninfo, "SELECT count(*) FROM webhook_events")?.parse()?)
}

/// The archive's leaf partitions: the FAILED one and each day's.
pub(super) fn partition_names(conninfo: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(psql(conninfo, "SELECT relid::regclass::text FROM pg_partition_tree('webhook_events') WHERE isleaf")?
        .lines()
        .map(String::from)
        .collect())
}
