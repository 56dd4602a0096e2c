//! `--log`: one line per answer, for a script to load into SQL and hold
//! against what the database says (`scripts/ha-failover` does).

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::Sample;
use crate::events::SignedRequest;

/// Writes `samples` to `path`, in the order they were sent: event id, sent
/// and answered at (Unix milliseconds), status, `t`/`f` for a `Retry-After`
/// header, `t`/`f` for an idempotent answer, the answer's `error` (`\N`
/// without one); tab-separated (PostgreSQL's `COPY` text format).
pub fn write(path: &Path, requests: &[SignedRequest], samples: &[Sample]) -> anyhow::Result<()> {
    let mut samples: Vec<&Sample> = samples.iter().collect();
    samples.sort_by_key(|sample| sample.sent_at);
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    let flag = |yes: bool| if yes { 't' } else { 'f' };
    for sample in samples {
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            requests[sample.request].event_id,
            unix_ms(sample.sent_at),
            unix_ms(sample.sent_at + sample.latency),
            sample.status,
            flag(sample.retry_after),
            flag(sample.idempotent),
            sample.error.as_deref().map_or_else(|| "\\N".to_string(), copy_text),
        )?;
    }
    out.flush()?;
    Ok(())
}

/// `text` as a field of `COPY`'s text format.
fn copy_text(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n").replace('\r', "\\r")
}

fn unix_ms(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_millis()
}
