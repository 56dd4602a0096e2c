//! `loadgen backfill`: how late live events arrive while a destination
//! added later is backfilled, measured against a receiver on loopback that
//! answers 200 at once, on the service's embedded PostgreSQL.
//!
//! The service first runs without destinations and records `--events`
//! events, sent through it as any delivery is (so the archive rows are the
//! service's own). Then it restarts with one destination declared, and
//! `webhook-inbox destinations backfill` enqueues a job for each of them.
//! From the moment the backfill starts until its last job has arrived,
//! live events are sent at a steady `--live-rate`; for each, the lag from
//! its job's `created_at` (the recording transaction) to its arrival, p50,
//! p99 and max; and the backfill's drain rate at the receiver, from its
//! first arrival to its last.
//!
//! The row goes to bench/RESULTS.md between `<!-- backfill:start -->` and
//! `<!-- backfill:end -->`, the summary to docs/performance.md between
//! `<!-- backfill:summary:start -->` and `<!-- backfill:summary:end -->`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use futures_util::future::try_join_all;

use crate::client::Connection;
use crate::events::{self, Provider};
use crate::forwarding::{
    Arrivals, arrival_rate, declare_destination, lags, quantile, receiver, until_arrived,
};
use crate::results::Written;
use crate::service::{Binary, PADDLE_SECRET, Service};
use crate::{LoadArgs, prepare};

/// How the measurement runs.
#[derive(Debug, Args)]
pub struct BackfillArgs {
    #[command(flatten)]
    service: Binary,
    /// Events recorded before the destination is declared: the backfill.
    #[arg(long, default_value_t = 100_000)]
    events: usize,
    /// Live events per second while the backfill drains (steady, modest load).
    #[arg(long, default_value_t = 50)]
    live_rate: usize,
    /// The destination's `concurrency` (requests in flight).
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Clients recording the events to backfill.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Approximate JSON body size.
    #[arg(long, default_value_t = 2500)]
    payload_bytes: usize,
    #[command(flatten)]
    written: Written,
}

pub(crate) const SECTION: (&str, &str) = ("<!-- backfill:start -->", "<!-- backfill:end -->");
pub(crate) const SUMMARY: (&str, &str) = ("<!-- backfill:summary:start -->", "<!-- backfill:summary:end -->");

/// The prefix of the live events' ids (the backfilled ones' is a hex number).
const LIVE: &str = "evt_live";

/// Longest the backfill may take to drain.
const DRAIN_LIMIT: Duration = Duration::from_secs(1200);

pub async fn run(args: BackfillArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.events >= 2 && args.live_rate >= 1, "need --events >= 2 and --live-rate >= 1");
    let work = std::env::temp_dir().join(format!("wib-backfill-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let (receiver_addr, arrivals) = receiver().await?;
    let declaration = declare_destination(&work, receiver_addr, args.concurrency)?;
    let data_dir = work.join("pg");
    let mut env = vec![
        ("PADDLE_WEBHOOK_SECRET", PADDLE_SECRET.to_string()),
        ("DATA_DIR", data_dir.display().to_string()),
        ("QUEUE_POLL_INTERVAL_MS", "50".to_string()),
    ];
    let (commit, date) =
        (crate::bench::commit(), crate::bench::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]));

    eprintln!("recording {} events with no destination declared ...", args.events);
    let service = Service::start(&args.service.path, &env, &work.join("service.log")).await?;
    let load = LoadArgs::paddle(service.addr, args.events, args.clients, args.payload_bytes);
    let report = prepare(&load).await?.send().await?;
    anyhow::ensure!(report.with_status(200) == report.requests(), "non-200 answers: {}", report.text());
    service.stop()?;

    eprintln!(
        "backfilling them to a destination declared now, {} live events/s meanwhile ...",
        args.live_rate
    );
    env.push(("CONFIG_FILE", declaration.display().to_string()));
    let service = Service::start(&args.service.path, &env, &work.join("service.log")).await?;
    let backfill = tokio::process::Command::new(&args.service.path)
        .args(["destinations", "backfill", "bench", "--since", "1d"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stderr(std::process::Stdio::null())
        .output();
    let started = Instant::now();
    let backfilled = |arrivals: &Arrivals| arrivals.count(|id| !id.starts_with(LIVE));
    let (output, live) = tokio::join!(
        async {
            let output = backfill.await;
            (output, started.elapsed())
        },
        paced_until(service.addr, args.live_rate, args.payload_bytes, || {
            backfilled(&arrivals) >= args.events || started.elapsed() > DRAIN_LIMIT
        })
    );
    let (output, enqueue_time) = (output.0?, output.1);
    let printed = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success() && printed.contains(&format!("bench: {} jobs enqueued", args.events)),
        "destinations backfill: {printed}"
    );
    let live = live?;
    anyhow::ensure!(backfilled(&arrivals) >= args.events, "the backfill did not drain in {DRAIN_LIMIT:?}");
    until_arrived(&arrivals, args.events + live, DRAIN_LIMIT).await?;
    let (live_arrivals, old): (Vec<_>, Vec<_>) =
        arrivals.take().into_iter().partition(|(id, _)| id.starts_with(LIVE));
    let lags = lags(&crate::service::embedded_conninfo(&data_dir), &live_arrivals)?;
    service.stop()?;
    std::fs::remove_dir_all(&work).ok();
    let times: Vec<SystemTime> = old.iter().map(|(_, at)| *at).collect();
    let (drain_rate, _) = arrival_rate(&times);

    let measured = Measured { commit, date, lags, drain_rate, enqueue_time };
    let section = measured.render(&args);
    println!("{section}");
    args.written.write([SECTION, SUMMARY], &section, &measured.summary(&args))?;
    Ok(())
}

/// Sends unique live events at `rate` per second, each at its own time,
/// until `done()`; returns how many. Each lane's connection stays busy (a
/// connection left idle would be closed by the service's header timeout),
/// and each event is signed as it leaves, so that no signature outlives
/// the service's tolerance however long the backfill takes.
async fn paced_until(
    addr: SocketAddr,
    rate: usize,
    payload_bytes: usize,
    done: impl Fn() -> bool,
) -> anyhow::Result<usize> {
    // Enough connections that one slow answer does not delay the next send.
    const LANES: usize = 8;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let nonce = events::unix_nanos();
    let start = tokio::time::Instant::now();
    let done = &done;
    let lane = |lane: usize| async move {
        let mut connection = Connection::open(addr).await?;
        let mut sent = 0;
        for index in (lane..).step_by(LANES) {
            tokio::time::sleep_until(start + interval * index as u32).await;
            if done() {
                break;
            }
            let run_id = format!("live{nonce:x}{index:08}");
            let request = events::build(Provider::Paddle, None, PADDLE_SECRET, &run_id, 1, payload_bytes)?;
            let status = connection.send(&request, 0).await.status;
            anyhow::ensure!(status == 200, "live event {index} was answered {status}");
            sent += 1;
        }
        anyhow::Ok(sent)
    };
    Ok(try_join_all((0..LANES).map(lane)).await?.into_iter().sum())
}

/// What one run measured.
struct Measured {
    commit: String,
    date: String,
    /// The live events' lags, ms, sorted.
    lags: Vec<f64>,
    /// Backfilled deliveries per second at the receiver.
    drain_rate: f64,
    /// How long `destinations backfill` took to enqueue every job.
    enqueue_time: Duration,
}

impl Measured {
    /// p50 / p99 / max of the live events' lags.
    fn lag(&self) -> String {
        format!(
            "{:.1} / {:.1} / {:.1} ms",
            quantile(&self.lags, 0.5),
            quantile(&self.lags, 0.99),
            self.lags.last().copied().unwrap_or_default()
        )
    }

    /// The section of bench/RESULTS.md.
    fn render(&self, args: &BackfillArgs) -> String {
        let mut md = String::new();
        let _ = writeln!(
            md,
            "Measured {} on {} cores at commit {}, the service's embedded PostgreSQL, a receiver on loopback \
             answering 200 at once, one destination (`concurrency = {}`) declared after {} events were recorded, \
             ~{} B JSON bodies; one run.\n",
            self.date,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            self.commit,
            args.concurrency,
            args.events,
            args.payload_bytes,
        );
        let _ = writeln!(md, "| measurement | result |\n|---|---|");
        let _ = writeln!(
            md,
            "| live events at {}/s ({} in all) while a backfill of {} events drains: lag, job recorded → \
             arrived, p50 / p99 / max; the backfill: enqueued in, drained at | {}; {:.1} s, {:.0} deliveries/s |",
            args.live_rate,
            self.lags.len(),
            args.events,
            self.lag(),
            self.enqueue_time.as_secs_f64(),
            self.drain_rate,
        );
        md
    }

    /// The summary's line, for docs/performance.md.
    fn summary(&self, args: &BackfillArgs) -> String {
        format!(
            "Backfill (run of {} at commit {}; `bench/forwarding.sh`): while a backfill of {} events drains at \
             {:.0} deliveries/s, live events at {}/s arrive {} (p50 / p99 / max) after they are recorded.\n",
            self.date,
            self.commit,
            args.events,
            self.drain_rate,
            args.live_rate,
            self.lag(),
        )
    }
}
