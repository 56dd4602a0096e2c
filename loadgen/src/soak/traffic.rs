//! The soak's steady mix of deliveries: each second, new events (half with
//! an effect, `subscription.created`, half without) and, for a tenth of the
//! requests, a second copy of an event sent the second before, as a
//! provider's retry would be. Requests leave at an even pace over a fixed
//! set of keep-alive connections; every answer's status and latency lands
//! in the current window, which the sampler takes every interval.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::client::Connection;
use crate::events::{self, Provider, SignedRequest};
use crate::service::PADDLE_SECRET;

/// One request of the mix: a batch and its index in it.
type Job = (Arc<Vec<SignedRequest>>, usize);

/// The answers since the window was last taken.
#[derive(Default)]
pub struct Window {
    pub latencies_ms: Vec<f64>,
    /// Answers by status (0: no answer).
    pub statuses: BTreeMap<u16, u64>,
    /// Answers that said the event was a duplicate.
    pub idempotent: u64,
}

impl Window {
    /// The 99th percentile latency, in milliseconds (0 without answers).
    pub fn p99_ms(&mut self) -> f64 {
        if self.latencies_ms.is_empty() {
            return 0.0;
        }
        self.latencies_ms.sort_by(f64::total_cmp);
        let rank = ((self.latencies_ms.len() as f64 * 0.99).ceil() as usize).max(1);
        self.latencies_ms[rank - 1]
    }
}

/// The mix's shape.
pub struct Mix {
    pub addr: SocketAddr,
    /// Requests per second, duplicates included.
    pub rate: usize,
    pub connections: usize,
    pub payload_bytes: usize,
}

/// Sends the mix until `seconds` have passed (a slow service gets fewer
/// requests, not a longer run); answers go to `window`.
/// Returns the number of distinct events sent.
pub async fn run(mix: Mix, seconds: u64, window: Arc<Mutex<Window>>) -> anyhow::Result<usize> {
    let (jobs, queue) = mpsc::channel::<Job>(mix.rate.max(1));
    let queue = Arc::new(tokio::sync::Mutex::new(queue));
    let mut senders = Vec::new();
    for _ in 0..mix.connections {
        let mut connection = Connection::open(mix.addr).await?;
        let (queue, window) = (queue.clone(), window.clone());
        senders.push(tokio::spawn(async move {
            loop {
                let next = queue.lock().await.recv().await;
                let Some((batch, index)) = next else { break };
                let sample = connection.send(&batch, index).await;
                let mut window = window.lock().unwrap();
                window.latencies_ms.push(sample.latency.as_secs_f64() * 1000.0);
                *window.statuses.entry(sample.status).or_default() += 1;
                window.idempotent += u64::from(sample.idempotent);
            }
        }));
    }

    let duplicates = mix.rate / 10;
    let fresh = mix.rate - duplicates;
    let spacing = Duration::from_secs_f64(1.0 / mix.rate as f64);
    let mut events = 0;
    let mut previous: Option<Arc<Vec<SignedRequest>>> = None;
    let mut tick = tokio::time::interval(spacing);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut second = 0u64;
    while tokio::time::Instant::now() < deadline {
        second += 1;
        // Signed now: a batch is sent within the second, its copies the next.
        let run_id = format!("soak{:x}s{second}", events::unix_nanos());
        let effects = events::build(
            Provider::Paddle,
            Some("subscription.created"),
            PADDLE_SECRET,
            &format!("{run_id}e"),
            fresh / 2,
            mix.payload_bytes,
        )?;
        let plain = events::build(
            Provider::Paddle,
            None,
            PADDLE_SECRET,
            &format!("{run_id}n"),
            fresh - fresh / 2,
            mix.payload_bytes,
        )?;
        // Alternating, so that every part of the second has both kinds.
        let mut effects = effects.into_iter();
        let mut batch = Vec::with_capacity(fresh);
        for next in plain {
            batch.extend(effects.next());
            batch.push(next);
        }
        let batch = Arc::new(batch);
        // Every tenth request repeats an event of the second before, spread
        // over the batch (effects and not alike).
        let mut order: Vec<Job> = (0..batch.len()).map(|i| (batch.clone(), i)).collect();
        if let Some(previous) = &previous {
            let stride = (previous.len() / duplicates.max(1)).max(1);
            for n in 0..duplicates.min(previous.len()) {
                order.insert((n * 10).min(order.len()), (previous.clone(), n * stride));
            }
        }
        for job in order {
            if tick.tick().await >= deadline {
                break;
            }
            events += usize::from(Arc::ptr_eq(&job.0, &batch));
            jobs.send(job).await?;
        }
        previous = Some(batch);
    }
    drop(jobs);
    for sender in senders {
        sender.await?;
    }
    Ok(events)
}
