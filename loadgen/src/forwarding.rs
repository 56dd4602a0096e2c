//! `loadgen forwarding`: forwarding events to the team's app, measured
//! against a receiver on loopback that answers 200 at once.
//!
//! Four measurements, each on the service's embedded PostgreSQL:
//! - **forwarding rate**: jobs enqueued while the destination is paused,
//!   then resumed; deliveries per second at the receiver, from the first
//!   arrival to the last;
//! - **drain ÷ intake**: of the same run, the queue's drain rate (jobs over
//!   the time from `resume` to the last arrival) over the rate at which
//!   intake accepted those events;
//! - **intake with a destination**: unique events at a fixed client count,
//!   without destinations and then with one destination that wants every
//!   event (its sends running meanwhile), as a ratio;
//! - **lag**: events sent at a steady rate; for each, from its job's
//!   `created_at` (the recording transaction) to its arrival at the
//!   receiver, p50 and p99;
//! - **peak RSS with pending jobs**: a fresh process, the destination
//!   paused while that many events are recorded, then resumed and drained;
//!   the process's high-water mark.
//!
//! The results go to bench/RESULTS.md between `<!-- forwarding:start -->`
//! and `<!-- forwarding:end -->`, and the summary in docs/performance.md between
//! `<!-- forwarding:summary:start -->` and `<!-- forwarding:summary:end -->`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::client::Connection;
use crate::events::{self, Provider};
use crate::pgbench::psql;
use crate::results::{Spread, Written};
use crate::service::{Binary, PADDLE_SECRET, Service};
use crate::{LoadArgs, prepare};

pub(crate) const DESTINATION_SECRET: &str = "whsec_9hBNmFv3dVdZbK2sUmbJmS7k3dkqQDhW";

/// Writes `work/destinations.toml`, declaring one destination `bench` that
/// wants every Paddle event, sent to `receiver` at `concurrency`; returns
/// its path.
pub(crate) fn declare_destination(
    work: &Path,
    receiver: SocketAddr,
    concurrency: usize,
) -> anyhow::Result<PathBuf> {
    let declaration = work.join("destinations.toml");
    std::fs::write(
        &declaration,
        format!(
            "[[destinations]]\nname = \"bench\"\nurl = \"http://{receiver}/webhooks/inbox\"\n\
             secret = \"{DESTINATION_SECRET}\"\nevents = [\"paddle:*\"]\nconcurrency = {concurrency}\n"
        ),
    )?;
    Ok(declaration)
}

/// Arrivals per second from the first of `times` to the last, and the last.
pub(crate) fn arrival_rate(times: &[SystemTime]) -> (f64, SystemTime) {
    let (first, last) = (times.iter().min().unwrap(), times.iter().max().unwrap());
    let span = last.duration_since(*first).unwrap_or_default().as_secs_f64();
    ((times.len() - 1) as f64 / span, *last)
}

/// How the measurement runs.
#[derive(Debug, Args)]
pub struct ForwardingArgs {
    #[command(flatten)]
    service: Binary,
    /// Jobs of the forwarding-rate run (enqueued while paused, then drained).
    #[arg(long, default_value_t = 20_000)]
    jobs: usize,
    /// Events of each intake run, with and without the destination.
    #[arg(long, default_value_t = 20_000)]
    intake_events: usize,
    /// Clients of the intake runs.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Events per second of the lag run (below the forwarding rate: steady load).
    #[arg(long, default_value_t = 200)]
    lag_rate: u32,
    /// Seconds the lag run lasts.
    #[arg(long, default_value_t = 30)]
    lag_seconds: u64,
    /// Pending jobs of the memory run.
    #[arg(long, default_value_t = 100_000)]
    pending: usize,
    /// The destination's `concurrency` (requests in flight).
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// How many times the rate and intake rows are measured.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Approximate JSON body size.
    #[arg(long, default_value_t = 2500)]
    payload_bytes: usize,
    #[command(flatten)]
    written: Written,
}

/// What the receiver saw: each event's arrival, wall clock.
#[derive(Default)]
pub(crate) struct Arrivals(Mutex<Vec<(String, SystemTime)>>);

impl Arrivals {
    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// How many of the events that arrived `which` picks, by id.
    pub(crate) fn count(&self, which: impl Fn(&str) -> bool) -> usize {
        self.0.lock().unwrap().iter().filter(|(id, _)| which(id)).count()
    }

    pub(crate) fn take(&self) -> Vec<(String, SystemTime)> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// The team's app: answers every request 200 at once, noting its
/// `webhook-inbox-event-id` and when it came.
pub(crate) async fn receiver() -> anyhow::Result<(SocketAddr, Arc<Arrivals>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let arrivals = Arc::new(Arrivals::default());
    let seen = arrivals.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let id = request
                            .headers()
                            .get("webhook-inbox-event-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string();
                        // Read the whole body, as an app would before answering.
                        let _ = request.into_body().collect().await;
                        seen.0.lock().unwrap().push((id, SystemTime::now()));
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((addr, arrivals))
}

/// The service, with or without the destination, on the benchmark's database.
struct Setting<'a> {
    args: &'a ForwardingArgs,
    work: &'a Path,
    conninfo: String,
    declaration: PathBuf,
}

impl Setting<'_> {
    async fn start(&self, with_destination: bool) -> anyhow::Result<Service> {
        let mut env = vec![
            ("PADDLE_WEBHOOK_SECRET", PADDLE_SECRET.to_string()),
            ("DATA_DIR", self.work.join("pg").display().to_string()),
            // Resumes are seen within 50 ms.
            ("QUEUE_POLL_INTERVAL_MS", "50".to_string()),
        ];
        if with_destination {
            env.push(("CONFIG_FILE", self.declaration.display().to_string()));
        }
        Service::start(&self.args.service.path, &env, &self.work.join("service.log")).await
    }

    fn sql(&self, sql: &str) -> anyhow::Result<String> {
        psql(&self.conninfo, sql)
    }

    fn reset(&self) -> anyhow::Result<()> {
        self.sql(
            "TRUNCATE webhook_events, processed_webhook_events, destination_jobs, destination_attempts;
             UPDATE destinations SET paused_at = NULL; CHECKPOINT;",
        )?;
        Ok(())
    }

    fn pause(&self, paused: bool) -> anyhow::Result<()> {
        let at = if paused { "now()" } else { "NULL" };
        self.sql(&format!("UPDATE destinations SET paused_at = {at} WHERE name = 'bench'"))?;
        Ok(())
    }

    /// Unique events at `clients` clients, as fast as the service answers;
    /// requests per second.
    async fn intake(&self, service: &Service, events: usize, clients: usize) -> anyhow::Result<f64> {
        let load = LoadArgs::paddle(service.addr, events, clients, self.args.payload_bytes);
        let report = prepare(&load).await?.send().await?;
        anyhow::ensure!(report.with_status(200) == report.requests(), "non-200 answers: {}", report.text());
        Ok(report.rps())
    }
}

/// Polls until `count` arrived, for at most `limit`.
pub(crate) async fn until_arrived(arrivals: &Arrivals, count: usize, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while arrivals.len() < count {
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} of {count} forwards arrived within {limit:?}",
            arrivals.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// One run of each row.
#[derive(Default)]
struct Runs {
    rate: Vec<f64>,
    /// Drain rate ÷ intake rate of the same events.
    drain: Vec<f64>,
    without: Vec<f64>,
    with: Vec<f64>,
}

pub async fn run(args: ForwardingArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    let work = std::env::temp_dir().join(format!("wib-forwarding-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let (receiver_addr, arrivals) = receiver().await?;
    let declaration = declare_destination(&work, receiver_addr, args.concurrency)?;
    let conninfo = crate::service::embedded_conninfo(&work.join("pg"));
    let setting = Setting { args: &args, work: &work, conninfo, declaration };
    let (commit, date) =
        (crate::bench::commit(), crate::bench::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]));
    let drain_limit = Duration::from_secs(600);

    let mut runs = Runs::default();
    for pass in 1..=args.runs {
        eprintln!("run {pass} of {}: intake without destinations ...", args.runs);
        let service = setting.start(false).await?;
        setting.reset()?;
        runs.without.push(setting.intake(&service, args.intake_events, args.clients).await?);
        service.stop()?;

        let service = setting.start(true).await?;
        eprintln!("run {pass} of {}: intake with one destination wanting every event ...", args.runs);
        setting.reset()?;
        arrivals.take();
        runs.with.push(setting.intake(&service, args.intake_events, args.clients).await?);
        until_arrived(&arrivals, args.intake_events, drain_limit).await?;

        eprintln!("run {pass} of {}: forwarding {} jobs enqueued while paused ...", args.runs, args.jobs);
        setting.reset()?;
        setting.pause(true)?;
        let accepted = setting.intake(&service, args.jobs, args.clients).await?;
        arrivals.take();
        let resumed = SystemTime::now();
        setting.pause(false)?;
        until_arrived(&arrivals, args.jobs, drain_limit).await?;
        let times: Vec<SystemTime> = arrivals.take().into_iter().map(|(_, at)| at).collect();
        let (rate, last) = arrival_rate(&times);
        runs.rate.push(rate);
        let drained = args.jobs as f64 / last.duration_since(resumed).unwrap_or_default().as_secs_f64();
        runs.drain.push(drained / accepted);
        service.stop()?;
    }

    eprintln!("lag at {} events/s for {} s ...", args.lag_rate, args.lag_seconds);
    let service = setting.start(true).await?;
    setting.reset()?;
    arrivals.take();
    let lag_events = args.lag_rate as usize * args.lag_seconds as usize;
    paced(service.addr, lag_events, args.lag_rate, args.payload_bytes).await?;
    until_arrived(&arrivals, lag_events, drain_limit).await?;
    let lags = lags(&setting.conninfo, &arrivals.take())?;
    service.stop()?;

    eprintln!("peak RSS with {} pending jobs ...", args.pending);
    let service = setting.start(true).await?;
    setting.reset()?;
    setting.pause(true)?;
    setting.intake(&service, args.pending, args.clients).await?;
    let pending: usize =
        setting.sql("SELECT count(*) FROM destination_jobs WHERE status = 'pending'")?.parse()?;
    anyhow::ensure!(pending == args.pending, "{pending} jobs pending, not {}", args.pending);
    arrivals.take();
    setting.pause(false)?;
    until_arrived(&arrivals, args.pending, drain_limit).await?;
    let peak_rss_kib = service.peak_rss_kib();
    service.stop()?;
    std::fs::remove_dir_all(&work).ok();

    let measured = Measured { commit, date, runs, lags, peak_rss_kib };
    let section = measured.render(&args);
    println!("{section}");
    args.written.write([SECTION, SUMMARY], &section, &measured.summary(&args))?;
    Ok(())
}

pub(crate) const SECTION: (&str, &str) = ("<!-- forwarding:start -->", "<!-- forwarding:end -->");
pub(crate) const SUMMARY: (&str, &str) =
    ("<!-- forwarding:summary:start -->", "<!-- forwarding:summary:end -->");

/// Sends `count` unique events at `rate` per second, each at its own time
/// (from as many connections as being late needs), whatever the answers take.
async fn paced(addr: SocketAddr, count: usize, rate: u32, payload_bytes: usize) -> anyhow::Result<()> {
    let run_id = format!("lag{:x}", events::unix_nanos());
    let requests =
        Arc::new(events::build(Provider::Paddle, None, PADDLE_SECRET, &run_id, count, payload_bytes)?);
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    // Enough connections that one slow answer does not delay the next send.
    let lanes = 8;
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for lane in 0..lanes {
        let mut connection = Connection::open(addr).await?;
        let requests = requests.clone();
        tasks.push(tokio::spawn(async move {
            let mut failed = 0;
            for index in (lane..requests.len()).step_by(lanes) {
                tokio::time::sleep_until(start + interval * index as u32).await;
                failed += usize::from(connection.send(&requests, index).await.status != 200);
            }
            failed
        }));
    }
    let mut failed = 0;
    for task in tasks {
        failed += task.await?;
    }
    anyhow::ensure!(failed == 0, "{failed} paced requests were not answered 200");
    Ok(())
}

/// Each arrival's lag, in ms, sorted: from its job's `created_at` to when it came.
pub(crate) fn lags(conninfo: &str, arrivals: &[(String, SystemTime)]) -> anyhow::Result<Vec<f64>> {
    let created: HashMap<String, f64> =
        psql(conninfo, "SELECT event_id || ' ' || extract(epoch FROM created_at) FROM destination_jobs")?
            .lines()
            .filter_map(|line| {
                let (id, at) = line.split_once(' ')?;
                Some((id.to_string(), at.parse().ok()?))
            })
            .collect();
    let mut lags: Vec<f64> = arrivals
        .iter()
        .filter_map(|(id, at)| {
            let arrived = at.duration_since(UNIX_EPOCH).ok()?.as_secs_f64();
            Some((arrived - created.get(id)?) * 1000.0)
        })
        .collect();
    anyhow::ensure!(lags.len() == arrivals.len(), "arrivals without a job");
    lags.sort_by(f64::total_cmp);
    Ok(lags)
}

pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Everything one benchmark measured.
struct Measured {
    commit: String,
    date: String,
    runs: Runs,
    lags: Vec<f64>,
    peak_rss_kib: Option<u64>,
}

impl Measured {
    fn spreads(&self) -> (Spread, Spread, Spread, Spread, Spread) {
        let runs = &self.runs;
        let ratios = runs.with.iter().zip(&runs.without).map(|(with, without)| with / without).collect();
        (
            Spread::of(runs.rate.clone()).expect("a run"),
            Spread::of(runs.drain.clone()).expect("a run"),
            Spread::of(runs.without.clone()).expect("a run"),
            Spread::of(runs.with.clone()).expect("a run"),
            Spread::of(ratios).expect("a run"),
        )
    }

    fn rss(&self) -> String {
        self.peak_rss_kib
            .map_or_else(|| "not available".into(), |kib| format!("{:.1} MiB", kib as f64 / 1024.0))
    }

    /// The section of bench/RESULTS.md.
    fn render(&self, args: &ForwardingArgs) -> String {
        let (rate, drain, without, with, ratio) = self.spreads();
        let mut md = String::new();
        let _ = writeln!(
            md,
            "Measured {} on {} cores at commit {}, the service's embedded PostgreSQL, a receiver on loopback \
             answering 200 at once, one destination (`concurrency = {}`), ~{} B JSON bodies; the rate and intake \
             rows measured {} time(s): the median, then the lowest and highest run.\n",
            self.date,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            self.commit,
            args.concurrency,
            args.payload_bytes,
            args.runs,
        );
        let _ = writeln!(md, "| measurement | result |\n|---|---|");
        let _ = writeln!(
            md,
            "| forwarding rate: {} jobs enqueued while paused, then resumed (first to last arrival) | {} deliveries/s |",
            args.jobs,
            rate.show(0)
        );
        let _ = writeln!(
            md,
            "| drain ÷ intake: those jobs over the time from resume to the last arrival, over intake's rate of the same events (target ≥ 1.0) | **{}**: {} |",
            drain.show(2),
            if drain.median >= 1.0 { "met" } else { "**not met**" }
        );
        let _ = writeln!(
            md,
            "| intake, {} unique events at {} clients, no destination | {} req/s |",
            args.intake_events,
            args.clients,
            without.show(0)
        );
        let _ = writeln!(
            md,
            "| intake, the same with one destination wanting every event (its sends running) | {} req/s |",
            with.show(0)
        );
        let _ = writeln!(
            md,
            "| intake with ÷ without a destination (target ≥ 0.8) | **{}**: {} |",
            ratio.show(2),
            if ratio.median >= 0.8 { "met" } else { "**not met**" }
        );
        let _ = writeln!(
            md,
            "| lag, job recorded → arrived at the receiver, {} events/s for {} s: p50 / p99 / max | {:.1} / {:.1} / {:.1} ms |",
            args.lag_rate,
            args.lag_seconds,
            quantile(&self.lags, 0.5),
            quantile(&self.lags, 0.99),
            self.lags.last().copied().unwrap_or_default(),
        );
        let _ = writeln!(
            md,
            "| peak RSS of a fresh service with {} jobs pending (enqueued while paused, then drained) | {} |",
            args.pending,
            self.rss()
        );
        md
    }

    /// The summary's line, for docs/performance.md.
    fn summary(&self, args: &ForwardingArgs) -> String {
        let (rate, drain, _, _, ratio) = self.spreads();
        format!(
            "Forwarding (run of {} at commit {}; `bench/forwarding.sh`): {} deliveries/s to a receiver on loopback \
             that answers at once, draining at {} × the rate intake accepted the same events; intake with one destination wanting every event at {} × the intake without; \
             lag from recorded to delivered p50 {:.1} ms, p99 {:.1} ms at {} events/s; peak RSS {} with {} jobs \
             pending.\n",
            self.date,
            self.commit,
            rate.show(0),
            drain.show(2),
            ratio.show(2),
            quantile(&self.lags, 0.5),
            quantile(&self.lags, 0.99),
            args.lag_rate,
            self.rss(),
            args.pending,
        )
    }
}
