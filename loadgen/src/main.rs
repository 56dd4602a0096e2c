//! loadgen: the benchmark of webhook-inbox.
//!
//! `loadgen load` sends correctly signed deliveries at a fixed concurrency:
//! unique events, or replay storms in which every event's copies are fired at
//! the same moment on separate connections. `loadgen bench` runs the whole
//! benchmark: the PostgreSQL ceiling (pgbench running the service's own SQL)
//! and the service, side by side on one server, and writes the table;
//! `loadgen forwarding` measures forwarding to a receiver on loopback;
//! `loadgen backfill` the live events' lag while a destination is backfilled;
//! `loadgen retention` measures retention on a ten-million-row archive;
//! `loadgen soak` runs an hour of steady traffic and samples the process.
//!
//! Requests are built and signed before the clock starts, so the measured
//! time is the service's, not the generator's HMAC work.

mod answers;
mod backfill;
mod bench;
mod client;
mod console;
mod cpu;
mod events;
mod forwarding;
mod otlp_sink;
mod pgbench;
mod report;
mod results;
mod retention;
mod service;
mod soak;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser};

use events::Provider;
use report::Report;

#[derive(Debug, Parser)]
enum Cli {
    /// One load run against a running service.
    Load(LoadArgs),
    /// The whole benchmark: starts the service, runs ceiling and service, writes the results.
    Bench(bench::BenchArgs),
    /// The console's pages on a million-row archive: starts the service, fills the archive, times each page.
    Console(console::ConsoleArgs),
    /// Forwarding to a receiver on loopback: rate, intake with a destination, lag, memory with pending jobs.
    Forwarding(forwarding::ForwardingArgs),
    /// Live events' lag while a destination added later is backfilled: records the events, declares the destination, backfills it, sends live events meanwhile.
    Backfill(backfill::BackfillArgs),
    /// Retention on a ten-million-row archive: dropping a day's partition against deleting the same rows in batches, and the hot reads' plans.
    Retention(retention::RetentionArgs),
    /// An hour of steady traffic, sampled every ten seconds: writes RELIABILITY.md's soak section and its chart.
    Soak(soak::SoakArgs),
}

/// What one load run sends.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// Address of the service.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Which provider's deliveries to send.
    #[arg(long, value_enum, default_value = "paddle")]
    provider: Provider,
    /// Event type to send (default: one without side effects).
    #[arg(long)]
    event_type: Option<String>,
    /// Number of distinct events.
    #[arg(long, default_value_t = 10_000)]
    events: usize,
    /// Copies of each event, fired at the same moment on separate connections (1 = unique events).
    #[arg(long, default_value_t = 1)]
    copies: usize,
    /// Open connections, each sending one request at a time.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Approximate size of each JSON body in bytes.
    #[arg(long, default_value_t = 2500)]
    payload_bytes: usize,
    /// Secret to sign with (Paddle secret key, or Clerk `whsec_...`).
    #[arg(long, env = "LOADGEN_SECRET")]
    secret: String,
    /// Prefix of the event ids, so that runs on one database do not collide.
    #[arg(long)]
    run_id: Option<String>,
    /// Events sent per second, evenly spaced whatever the answers take (unset: as fast as the connections go).
    #[arg(long)]
    rate: Option<f64>,
    /// Write one line per answer to this file (tab-separated: event id, sent and answered at in Unix
    /// milliseconds, status (0: no answer), Retry-After present, idempotent, the body's `error`).
    #[arg(long)]
    log: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

impl LoadArgs {
    /// Unique Paddle events of `payload_bytes` without side effects, signed
    /// with the measurements' secret, as fast as `clients` connections go:
    /// what the benchmarks send unless they say otherwise.
    pub fn paddle(addr: SocketAddr, events: usize, clients: usize, payload_bytes: usize) -> LoadArgs {
        LoadArgs {
            addr,
            provider: Provider::Paddle,
            event_type: None,
            events,
            copies: 1,
            concurrency: clients,
            payload_bytes,
            secret: service::PADDLE_SECRET.to_string(),
            run_id: None,
            rate: None,
            log: None,
            json: false,
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    match Cli::parse() {
        Cli::Load(args) => {
            let report = load(&args).await?;
            println!("{}", if args.json { report.json() } else { report.text() });
        }
        Cli::Bench(args) => bench::run(args).await?,
        Cli::Console(args) => console::run(args).await?,
        Cli::Forwarding(args) => forwarding::run(args).await?,
        Cli::Backfill(args) => backfill::run(args).await?,
        Cli::Retention(args) => retention::run(args).await?,
        Cli::Soak(args) => soak::run(args).await?,
    }
    Ok(())
}

/// Builds, signs, connects, then sends and measures, and writes the answers to `--log`.
pub async fn load(args: &LoadArgs) -> anyhow::Result<Report> {
    let prepared = prepare(args).await?;
    let requests = prepared.requests.clone();
    let (report, samples) = prepared.send_keeping_samples().await?;
    if let Some(path) = &args.log {
        answers::write(path, &requests, &samples)?;
    }
    Ok(report)
}

/// A load run ready to go: its requests built and signed, its connections open.
pub struct Prepared {
    connections: Vec<client::Connection>,
    requests: Arc<Vec<events::SignedRequest>>,
    copies: usize,
    spacing: Option<Duration>,
}

/// Builds and signs the requests and opens the connections, before any clock starts.
pub async fn prepare(args: &LoadArgs) -> anyhow::Result<Prepared> {
    anyhow::ensure!(args.copies >= 1 && args.concurrency >= args.copies, "need concurrency >= copies >= 1");
    let spacing = match args.rate {
        Some(rate) if rate.is_finite() && rate > 0.0 => Some(Duration::from_secs_f64(1.0 / rate)),
        Some(_) => anyhow::bail!("--rate must be a positive number of events per second"),
        None => None,
    };
    let run_id = args.run_id.clone().unwrap_or_else(|| format!("{:x}", events::unix_nanos()));
    let requests = events::build(
        args.provider,
        args.event_type.as_deref(),
        &args.secret,
        &run_id,
        args.events,
        args.payload_bytes,
    )?;
    let groups = args.concurrency / args.copies;
    let mut connections = Vec::with_capacity(groups * args.copies);
    for _ in 0..groups * args.copies {
        connections.push(client::Connection::open(args.addr).await?);
    }
    Ok(Prepared { connections, requests: Arc::new(requests), copies: args.copies, spacing })
}

impl Prepared {
    /// Sends every request and measures.
    pub async fn send(self) -> anyhow::Result<Report> {
        Ok(self.send_keeping_samples().await?.0)
    }

    /// Sends every request, measures, and keeps every answer.
    async fn send_keeping_samples(self) -> anyhow::Result<(Report, Vec<client::Sample>)> {
        let started = Instant::now();
        let samples = client::run(self.connections, self.requests, self.copies, self.spacing).await?;
        Ok((Report::new(&samples, started.elapsed()), samples))
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Each file a measurement writes by default holds the markers it writes
    /// between, so that a section moved without its writer fails here, not
    /// at the end of a long run.
    #[test]
    fn every_default_output_holds_its_markers() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let cli = Cli::command();
        for (subcommand, arg, markers) in [
            ("bench", "output", &[results::RESULTS, results::HISTORY][..]),
            ("bench", "summary", &[results::SUMMARY]),
            ("forwarding", "output", &[forwarding::SECTION]),
            ("forwarding", "summary", &[forwarding::SUMMARY]),
            ("backfill", "output", &[backfill::SECTION]),
            ("backfill", "summary", &[backfill::SUMMARY]),
            ("console", "output", &[console::MARKERS]),
            ("retention", "output", &[retention::MARKERS]),
            ("soak", "output", &[soak::MARKERS]),
        ] {
            let sub = cli.find_subcommand(subcommand).unwrap();
            let arg = sub.get_arguments().find(|a| a.get_id() == arg).unwrap();
            let path = arg.get_default_values()[0].to_string_lossy().into_owned();
            let text = std::fs::read_to_string(root.join(&path)).unwrap();
            for (start, end) in markers {
                let at = text.find(start).unwrap_or_else(|| panic!("{path} lacks {start}"));
                assert!(text[at..].contains(end), "{path} lacks {end} after {start}");
            }
        }
    }
}
