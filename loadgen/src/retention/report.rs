//! The section of bench/RESULTS.md: the runs' facts, the purge table and
//! the hot reads' table, with three plans in full.

use std::fmt::Write as _;

use super::archive::{Filled, Sizes};
use super::hot_reads::Explained;
use super::purge::Step;
use super::{BASELINE, BASELINE_LAST_MIGRATION};

/// What the header line says.
pub(super) struct Facts {
    pub(super) date: String,
    pub(super) commit: String,
    pub(super) version: String,
    /// The server's settings that the WAL and the sizes depend on.
    pub(super) settings: String,
    pub(super) rows: u64,
    pub(super) per_day: u64,
    pub(super) days: Vec<String>,
    pub(super) payload: String,
    pub(super) applied: usize,
    pub(super) leaves: usize,
    pub(super) partitioned: Filled,
    pub(super) unpartitioned: Filled,
}

/// Bytes, in binary units.
pub(super) fn size(bytes: i64) -> String {
    let b = bytes as f64;
    match bytes.abs() {
        n if n >= 1 << 30 => format!("{:.2} GiB", b / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", b / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", b / 1024.0),
        _ => format!("{bytes} B"),
    }
}

pub(super) fn seconds(secs: f64) -> String {
    if secs < 10.0 { format!("{secs:.2} s") } else { format!("{secs:.0} s") }
}

/// A partition's short name: `p20261130`, `failed`.
pub(super) fn short_partition(name: &str) -> &str {
    name.strip_prefix("webhook_events_daily_")
        .or_else(|| name.strip_prefix("webhook_events_"))
        .unwrap_or(name)
}

pub(super) fn render(
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

pub(crate) const MARKERS: (&str, &str) = ("<!-- retention:start -->", "<!-- retention:end -->");
