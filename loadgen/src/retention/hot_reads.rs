//! The hot reads on the partitioned archive: `EXPLAIN (ANALYZE, BUFFERS)`
//! of each statement the code sends, which partitions it scanned and
//! whether every scan went by an index.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

use super::RARE_TYPE;
use super::report::size;
use crate::pgbench::psql;

/// One hot read's EXPLAIN ANALYZE, summed up.
pub(super) struct Explained {
    pub(super) read: &'static str,
    pub(super) mirrors: &'static str,
    pub(super) short: &'static str,
    pub(super) ms: f64,
    pub(super) rows: i64,
    pub(super) hit: i64,
    pub(super) read_blocks: i64,
    pub(super) scanned: BTreeSet<String>,
    /// Scans other than by index of tables with rows.
    pub(super) not_by_index: Vec<String>,
    /// Scans other than by index of empty tables.
    pub(super) empty: Vec<String>,
    pub(super) text: Option<String>,
}

/// A hot read: a statement as the code sends it (its parameters bound, as
/// sqlx binds them, through PREPARE and EXECUTE).
pub(super) struct HotRead {
    pub(super) read: &'static str,
    /// The Rust function whose SQL this is.
    pub(super) mirrors: &'static str,
    pub(super) short: &'static str,
    /// `PREPARE q(...) AS ...;`, or empty for a statement without parameters.
    pub(super) prepare: String,
    /// What EXPLAIN runs.
    pub(super) statement: String,
    /// Whether its whole plan goes into the section.
    pub(super) details: bool,
}

/// The listing's columns (`SUMMARY_COLUMNS` in src/operations/query.rs).
pub(super) const SUMMARY_COLUMNS: &str = "id, provider, event_id, event_type, processing_status, error_message, \
                               occurred_at, created_at, processed_at, reprocess_of";

/// `query::list` (src/operations/query.rs) with the conditions
/// `EventFilter::push_conditions` (src/operations/filter.rs) appends, as
/// `page::page` calls it: a page of 50 and one more row.
pub(super) fn list(conditions: &str, types: &str) -> String {
    format!(
        "PREPARE q({types}) AS SELECT {SUMMARY_COLUMNS} FROM webhook_events w WHERE true{conditions} \
         ORDER BY w.created_at DESC, w.id DESC LIMIT ${};",
        types.split(',').filter(|t| !t.trim().is_empty()).count()
    )
}

pub(super) fn hot_reads(cursor_at: &str, cursor_id: &str, event_id: &str) -> Vec<HotRead> {
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
pub(super) fn explain_hot_reads(
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
pub(super) fn quiet_psql(conninfo: &str, sql: &str) -> anyhow::Result<String> {
    let output = Command::new("psql")
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .arg(conninfo)
        .output()?;
    anyhow::ensure!(output.status.success(), "psql failed: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Visits `plan` and every node under it.
pub(super) fn walk(plan: &Value, visit: &mut impl FnMut(&Value)) {
    visit(plan);
    for child in plan["Plans"].as_array().into_iter().flatten() {
        walk(child, visit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_numbers_the_limit_after_the_other_parameters() {
        assert!(list(" AND w.event_id = $1", "text, bigint").contains("LIMIT $2;"));
        assert!(list("", "bigint").contains("WHERE true ORDER BY"));
    }
}
