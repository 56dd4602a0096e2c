//! The ceiling: pgbench running, against the same server, the SQL the
//! service issues for one delivery, and the naive statement sequence it
//! replaces.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::events;

/// What pgbench reports.
pub struct Ceiling {
    /// Transactions (deliveries) per second, without connection time.
    pub tps: f64,
    /// Average latency of one script run, in milliseconds.
    pub latency_avg_ms: f64,
}

/// The event-id and payload expressions every script uses: a 2.5 KB body
/// like loadgen's, with a random event id spliced in. The concatenation
/// keeps the payload a per-execution value, so PostgreSQL parses the jsonb
/// on every insert as it does for the service's bound parameter.
fn id_and_payload(payload_bytes: usize) -> (String, String) {
    let body = events::paddle_body("EVENTID", "transaction.updated", payload_bytes);
    let (before, after) = body.split_once("EVENTID").expect("the body names its event id");
    let (middle, after) = after.split_once("EVENTID").expect("twice: event_id and notification_id");
    let id = "('pgb_' || :client_id || '_' || :n)".to_string();
    let payload = format!("('{before}' || {id} || '{middle}' || {id} || '{after}')::jsonb");
    (id, payload)
}

/// The service's own statement for a delivery whose type has no side
/// effects (`archive::record` in src/inbox/archive.rs): one autocommitted
/// statement. Keep it identical to the service's.
pub fn same_sql_script(payload_bytes: usize) -> String {
    let (id, payload) = id_and_payload(payload_bytes);
    format!(
        "\\set n random(1, 9000000000000000000)
WITH dedup AS (
    INSERT INTO processed_webhook_events (provider, event_id, event_type)
    VALUES ('paddle', {id}, 'transaction.updated')
    ON CONFLICT ON CONSTRAINT uq_processed_webhook_events_provider_event_id DO NOTHING
    RETURNING id
)
INSERT INTO webhook_events
    (provider, event_id, event_type, payload, signature, secret_index,
     notification_id, request_id, occurred_at, processing_status, processed_at)
SELECT 'paddle', {id}, 'transaction.updated', {payload},
       'ts=1712917129;h1=5e2c3a6ea1fbb3e7d4b5ebc0a3a54af3d5c0c5e9a4ef0c7a9c1b1f8e2d3c4b5a', 0,
       'ntf_' || {id}, 'c3b5a1d2-0f4e-4e7a-9b1c-2d3e4f5a6b7c', '2024-04-12T10:18:49.621022Z',
       CASE WHEN EXISTS (SELECT FROM dedup) THEN 'PROCESSED' ELSE 'SKIPPED' END,
       now()
RETURNING id, processing_status = 'PROCESSED';
"
    )
}

/// What the design's steps look like issued one by one: BEGIN, archive row
/// PENDING, SAVEPOINT, dedup insert, mark PROCESSED, COMMIT.
pub fn naive_script(payload_bytes: usize) -> String {
    let (id, payload) = id_and_payload(payload_bytes);
    format!(
        "\\set n random(1, 9000000000000000000)
BEGIN;
INSERT INTO webhook_events
    (provider, event_id, event_type, payload, signature, secret_index,
     notification_id, request_id, occurred_at)
VALUES ('paddle', {id}, 'transaction.updated', {payload},
        'ts=1712917129;h1=5e2c3a6ea1fbb3e7d4b5ebc0a3a54af3d5c0c5e9a4ef0c7a9c1b1f8e2d3c4b5a', 0,
        'ntf_' || {id}, 'c3b5a1d2-0f4e-4e7a-9b1c-2d3e4f5a6b7c', '2024-04-12T10:18:49.621022Z')
RETURNING id AS archive_id \\gset
SAVEPOINT before_dedup;
INSERT INTO processed_webhook_events (provider, event_id, event_type)
VALUES ('paddle', {id}, 'transaction.updated')
ON CONFLICT ON CONSTRAINT uq_processed_webhook_events_provider_event_id DO NOTHING
RETURNING id;
UPDATE webhook_events SET processing_status = 'PROCESSED', processed_at = now() WHERE id = :archive_id;
COMMIT;
"
    )
}

/// Writes `script` to `dir/name` and returns its path.
pub fn write_script(dir: &Path, name: &str, script: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, script)?;
    Ok(path)
}

/// Runs `script` with `clients` connections for `seconds`.
pub fn run(conninfo: &str, script: &Path, clients: usize, seconds: u64) -> anyhow::Result<Ceiling> {
    let threads = clients.min(std::thread::available_parallelism().map_or(1, |n| n.get()));
    let output = Command::new("pgbench")
        .args(["--no-vacuum", "--protocol=prepared"])
        .arg(format!("--client={clients}"))
        .arg(format!("--jobs={threads}"))
        .arg(format!("--time={seconds}"))
        .arg(format!("--file={}", script.display()))
        .arg(conninfo)
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "pgbench failed: {}{}",
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    let number_after = |prefix: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
            .ok_or_else(|| anyhow::anyhow!("pgbench printed no {prefix:?}: {stdout}"))
    };
    Ok(Ceiling { tps: number_after("tps = ")?, latency_avg_ms: number_after("latency average = ")? })
}

/// Runs one SQL command with psql and returns its unaligned output.
pub fn psql(conninfo: &str, sql: &str) -> anyhow::Result<String> {
    let output = Command::new("psql")
        .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .arg(conninfo)
        .output()?;
    anyhow::ensure!(output.status.success(), "psql failed: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}
