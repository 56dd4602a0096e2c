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
    /// Transactions (deliveries) completed.
    pub transactions: f64,
}

/// The event-id and payload expressions of a script: a body like loadgen's
/// for `event_type`, with a random event id spliced in wherever the body
/// names it. The concatenation keeps the payload a per-execution value, so
/// PostgreSQL parses the jsonb on every insert as it does for the service's
/// bound parameter.
fn id_and_payload(event_type: &str, payload_bytes: usize) -> (String, String) {
    let body = events::paddle_body("EVENTID", event_type, payload_bytes);
    let id = "('pgb_' || :client_id::text || '_' || :n::text)".to_string();
    let parts: Vec<String> = body.split("EVENTID").map(|part| format!("'{part}'")).collect();
    let payload = format!("({})::jsonb", parts.join(&format!(" || {id} || ")));
    (id, payload)
}

/// The record statement, as in `archive::record` (src/inbox/archive.rs).
fn record_statement(event_type: &str, payload_bytes: usize) -> String {
    let (id, payload) = id_and_payload(event_type, payload_bytes);
    format!(
        "WITH dedup AS (
    INSERT INTO processed_webhook_events (provider, event_id, event_type)
    VALUES ('paddle', {id}, '{event_type}')
    ON CONFLICT ON CONSTRAINT uq_processed_webhook_events_provider_event_id DO NOTHING
    RETURNING id
)
INSERT INTO webhook_events
    (provider, event_id, event_type, payload, signature, secret_index,
     notification_id, request_id, occurred_at, reprocess_of, processing_status, processed_at)
SELECT 'paddle', {id}, '{event_type}', {payload},
       'ts=1712917129;h1=5e2c3a6ea1fbb3e7d4b5ebc0a3a54af3d5c0c5e9a4ef0c7a9c1b1f8e2d3c4b5a', 0,
       'ntf_' || {id}, 'c3b5a1d2-0f4e-4e7a-9b1c-2d3e4f5a6b7c', '2024-04-12T10:18:49.621022Z', NULL,
       CASE WHEN EXISTS (SELECT FROM dedup) THEN 'PROCESSED' ELSE 'SKIPPED' END,
       now()
RETURNING id, processing_status = 'PROCESSED';
"
    )
}

/// The service's own statement for a delivery whose type has no side
/// effects (`archive::record` in src/inbox/archive.rs): one autocommitted
/// statement. Keep it identical to the service's.
pub fn same_sql_script(payload_bytes: usize) -> String {
    format!(
        "\\set n random(1, 9000000000000000000)\n{}",
        record_statement("transaction.updated", payload_bytes)
    )
}

/// The service's statements for a first `subscription.created` (src/inbox
/// and src/handlers/billing): BEGIN and the savepoint, the record
/// statement, the subscription upsert with its ordering guard, the credit
/// grant, the savepoint's release (which fails if a handler left the
/// transaction aborted), COMMIT. (The service sends BEGIN and SAVEPOINT in one round trip,
/// and RELEASE and COMMIT in another; pgbench cannot, in prepared mode; and `chr(58)` stands for a colon that
/// pgbench would take for a variable.) Keep it identical to the service's.
pub fn handler_sql_script(payload_bytes: usize) -> String {
    let (id, _) = id_and_payload("subscription.created", payload_bytes);
    let sub = format!("('sub_' || {id})");
    format!(
        "\\set n random(1, 9000000000000000000)
BEGIN;
SAVEPOINT before_dedup;
{record}INSERT INTO subscriptions AS s
    (id, customer_id, user_id, status, items, current_period_starts_at, current_period_ends_at,
     scheduled_change, canceled_at, created_at, last_event_at, last_event_id)
VALUES ({sub}, 'ctm_01hv6y1jedq4p1n0yqn5ba3ky4', 'user_' || {id}, 'active',
        '[{{\"price_id\": \"pri_bench\", \"quantity\": 1}}, {{\"price_id\": \"pri_bench\", \"quantity\": 1}}]',
        '2024-04-12T10:18:47.635628Z', '2024-05-12T10:18:47.635628Z', NULL, NULL, COALESCE(NULL, now()),
        '2024-04-12T10:18:49.621022Z', {id})
ON CONFLICT (id) DO UPDATE
SET customer_id = EXCLUDED.customer_id,
    user_id = COALESCE(EXCLUDED.user_id, s.user_id),
    status = CASE WHEN s.status = 'canceled' THEN s.status ELSE EXCLUDED.status END,
    canceled_at = CASE WHEN s.status = 'canceled' THEN s.canceled_at ELSE EXCLUDED.canceled_at END,
    items = EXCLUDED.items,
    current_period_starts_at = EXCLUDED.current_period_starts_at,
    current_period_ends_at = EXCLUDED.current_period_ends_at,
    scheduled_change = EXCLUDED.scheduled_change,
    updated_at = now(),
    last_event_at = EXCLUDED.last_event_at,
    last_event_id = EXCLUDED.last_event_id
WHERE s.last_event_at < EXCLUDED.last_event_at
RETURNING status, user_id;
INSERT INTO credit_grants (cause, event_id, subscription_id, user_id, amount, period_starts_at)
SELECT 'subscription:' || {sub} || chr(58) || 'initial', {id}, {sub},
       COALESCE('user_' || {id}, (SELECT user_id FROM subscriptions WHERE id = {sub})), 20,
       '2024-04-12T10:18:47.635628Z'
ON CONFLICT DO NOTHING;
RELEASE SAVEPOINT before_dedup;
COMMIT;
",
        record = record_statement("subscription.created", payload_bytes)
    )
}

/// What the design's steps look like issued one by one: BEGIN, archive row
/// PENDING, SAVEPOINT, dedup insert, mark PROCESSED, COMMIT.
pub fn naive_script(payload_bytes: usize) -> String {
    let (id, payload) = id_and_payload("transaction.updated", payload_bytes);
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
    Ok(Ceiling {
        tps: number_after("tps = ")?,
        latency_avg_ms: number_after("latency average = ")?,
        transactions: number_after("number of transactions actually processed: ")?,
    })
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
