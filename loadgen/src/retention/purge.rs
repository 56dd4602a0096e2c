//! What retention costs: the oldest day's rows removed from both archives,
//! by dropping its partition and by deleting them in batches as
//! [`BASELINE`]'s `purge` did, each from a `CHECKPOINT`: time, WAL, and the
//! sizes after.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use super::archive::{Sizes, count, sizes};
use super::{BASELINE, SPREAD_SECS, Server};
use crate::pgbench::psql;

/// One timed step, from a CHECKPOINT.
pub(super) struct Step {
    pub(super) command: String,
    pub(super) rows_removed: u64,
    pub(super) secs: f64,
    pub(super) wal: i64,
    pub(super) after: Sizes,
    pub(super) rows_left: i64,
}

/// The oldest day's removal both ways, and the VACUUM the delete leaves to do.
pub(super) struct Purges {
    pub(super) drop: Step,
    pub(super) delete: Step,
    pub(super) vacuum: Step,
}

/// Removes the rows of `first_day`, the oldest, from both databases: the
/// service's `purge` drops its partition, the baseline's deletes them in
/// batches, then `VACUUM`; checks that both removed the same rows.
pub(super) fn measure(
    server: &Server,
    service: &Path,
    baseline: &Path,
    first_day: &str,
) -> anyhow::Result<Purges> {
    let (partitioned, unpartitioned) = (server.conninfo("partitioned"), server.conninfo("unpartitioned"));
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
    let (output, secs, wal) = timed(&partitioned, || cli(service, &server.url("partitioned"), &drop_args))?;
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
        timed(&unpartitioned, || cli(baseline, &server.url("unpartitioned"), &delete_args))?;
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
    Ok(Purges { drop, delete, vacuum })
}

/// Runs `step` from a CHECKPOINT (so that every measurement starts with
/// the same pages clean and writes a full page image on each page's first
/// change, as after any checkpoint); its output, wall time and the WAL the
/// cluster wrote meanwhile.
pub(super) fn timed(
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
pub(super) fn cli(binary: &Path, url: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> anyhow::Result<String> {
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
pub(super) fn number_before(text: &str, marker: &str) -> anyhow::Result<u64> {
    let (before, _) = text.split_once(marker).ok_or_else(|| anyhow::anyhow!("no {marker:?} in {text:?}"))?;
    let number = before.split_whitespace().last().unwrap_or_default().trim_start_matches('(');
    number.parse().map_err(|_| anyhow::anyhow!("no number before {marker:?} in {text:?}"))
}

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
}
