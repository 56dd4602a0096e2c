//! `loadgen soak`: the service under an hour of steady traffic, sampled
//! every ten seconds, to show whether anything grows that should not.
//!
//! The service runs on its embedded PostgreSQL with one destination (a
//! receiver on loopback that fails one request in a hundred), the console
//! signed in and polled, reconciliation against a local Paddle event API
//! on a short interval, and `webhook-inbox purge` run beside it every
//! minute (the service's own upkeep runs hourly). The traffic is
//! [`traffic`]'s mix. Every interval it samples [`samples::SERIES`]; at the
//! end it drains the destination, checks that every event arrived, and
//! writes the start, end and maximum of each series into RELIABILITY.md
//! between `<!-- soak:start -->` and `<!-- soak:end -->`, and the chart
//! beside it.

mod chart;
mod peers;
mod samples;
mod section;
mod traffic;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;

use crate::console::{ADMIN_TOKEN, get, load_average, sign_in};
use crate::pgbench::psql;
use crate::service::{Binary, PADDLE_SECRET, Service, embedded_conninfo};
use samples::Sample;
pub(crate) use section::MARKERS;
use traffic::{Mix, Window};

const DESTINATION_SECRET: &str = "whsec_9hBNmFv3dVdZbK2sUmbJmS7k3dkqQDhW";

/// How the soak runs.
#[derive(Debug, Args)]
pub struct SoakArgs {
    #[command(flatten)]
    service: Binary,
    /// Minutes of traffic.
    #[arg(long, default_value_t = 60)]
    minutes: u64,
    /// Requests per second, duplicates included.
    #[arg(long, default_value_t = 50)]
    rate: usize,
    /// Client connections.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10)]
    interval: u64,
    /// Seconds between the console's polls (overview, events, an event).
    #[arg(long, default_value_t = 5)]
    console_every: u64,
    /// Seconds between reconciliations.
    #[arg(long, default_value_t = 30)]
    reconcile_every: u64,
    /// Seconds between runs of `webhook-inbox purge`.
    #[arg(long, default_value_t = 60)]
    purge_every: u64,
    /// Approximate JSON body size.
    #[arg(long, default_value_t = 2500)]
    payload_bytes: usize,
    /// Markdown file whose soak section is replaced.
    #[arg(long, default_value = "RELIABILITY.md")]
    output: PathBuf,
    /// The chart's file (the section links it relative to the markdown file).
    #[arg(long, default_value = "docs/soak.svg")]
    chart: PathBuf,
    /// What else ran on the machine, said in the section.
    #[arg(long, default_value = "")]
    machine_note: String,
    /// Print the section and change no file.
    #[arg(long)]
    no_write: bool,
}

/// What the background work did besides the traffic.
#[derive(Default)]
struct Beside {
    console_polls: std::sync::atomic::AtomicU64,
    console_failures: std::sync::atomic::AtomicU64,
    purges: std::sync::atomic::AtomicU64,
    purge_failures: std::sync::atomic::AtomicU64,
}

pub async fn run(args: SoakArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.rate >= 10 && args.interval >= 1, "--rate at least 10, --interval at least 1");
    let work = std::env::temp_dir().join(format!("wib-soak-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let (receiver, received) = peers::flaky_receiver().await?;
    let (paddle_api, reconciled) = peers::paddle_api().await?;
    let declaration = work.join("destinations.toml");
    std::fs::write(
        &declaration,
        format!(
            "[[destinations]]\nname = \"app\"\nurl = \"http://{receiver}/webhooks/inbox\"\n\
             secret = \"{DESTINATION_SECRET}\"\nevents = [\"paddle:*\"]\n"
        ),
    )?;
    let data_dir = work.join("pg");
    let conninfo = embedded_conninfo(&data_dir);
    let env = [
        ("PADDLE_WEBHOOK_SECRET", PADDLE_SECRET.to_string()),
        ("PADDLE_PRICE_CREDITS", "pri_bench=10".to_string()),
        ("DATA_DIR", data_dir.display().to_string()),
        ("CONFIG_FILE", declaration.display().to_string()),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_string()),
        ("PADDLE_API_KEY", "pdl_soak_api_key".to_string()),
        ("PADDLE_API_URL", format!("http://{paddle_api}")),
        ("RECONCILE_INTERVAL_SECS", args.reconcile_every.to_string()),
        ("ARCHIVE_RETENTION_DAYS", "1".to_string()),
    ];
    let service = Service::start(&args.service.path, &env, &work.join("service.log")).await?;
    let (commit, date) =
        (crate::bench::commit(), crate::bench::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]));
    let load_before = load_average();

    let window = Arc::new(Mutex::new(Window::default()));
    let beside = Arc::new(Beside::default());
    let seconds = args.minutes * 60;
    let mix = Mix {
        addr: service.addr,
        rate: args.rate,
        connections: args.connections,
        payload_bytes: args.payload_bytes,
    };
    let traffic = tokio::spawn(traffic::run(mix, seconds, window.clone()));
    let console = tokio::spawn(poll_console(service.addr, args.console_every, beside.clone()));
    let purge_url = format!("postgres:///postgres?host={}&user=postgres", data_dir.join("socket").display());
    let purge = tokio::spawn(purge_now_and_then(
        args.service.path.clone(),
        purge_url,
        args.purge_every,
        beside.clone(),
    ));

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut totals = Window::default();
    let mut next = tokio::time::Instant::now();
    while !traffic.is_finished() {
        next += Duration::from_secs(args.interval);
        tokio::time::sleep_until(next).await;
        let mut taken = std::mem::take(&mut *window.lock().unwrap());
        let (db_connections, pending_jobs) = samples::database(&conninfo)?;
        let sample = Sample {
            at_secs: started.elapsed().as_secs_f64(),
            rss_mib: samples::rss_mib(service.pid())?,
            fds: samples::fds(service.pid())?,
            db_connections,
            pending_jobs,
            p99_ms: taken.p99_ms(),
            answered: taken.latencies_ms.len() as f64,
        };
        eprintln!(
            "{:>5.0} s  rss {:.1} MiB  fds {}  db {}  pending {}  p99 {:.1} ms  answered {}",
            sample.at_secs,
            sample.rss_mib,
            sample.fds,
            sample.db_connections,
            sample.pending_jobs,
            sample.p99_ms,
            sample.answered
        );
        samples.push(sample);
        totals.latencies_ms.append(&mut taken.latencies_ms);
        for (status, count) in taken.statuses {
            *totals.statuses.entry(status).or_default() += count;
        }
        totals.idempotent += taken.idempotent;
    }
    let events = traffic.await??;
    console.abort();
    purge.abort();
    let ran = started.elapsed();

    // Every event's job is sent once the receiver's failures are retried.
    let drain_started = Instant::now();
    let drained = loop {
        let pending: u64 =
            psql(&conninfo, "SELECT count(*) FROM destination_jobs WHERE status <> 'sent'")?.parse()?;
        if pending == 0 {
            break Some(drain_started.elapsed());
        }
        if drain_started.elapsed() > Duration::from_secs(600) {
            break None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let applied: u64 = psql(
        &conninfo,
        "SELECT count(*) FROM processed_webhook_events WHERE provider = 'paddle' AND event_id LIKE 'evt_soak%'",
    )?
    .parse()?;
    let peak_rss_mib = service.peak_rss_kib().map(|kib| kib as f64 / 1024.0);
    service.stop()?;
    std::fs::remove_dir_all(&work).ok();

    let mut run = section::Run {
        date,
        commit,
        ran,
        args: &args,
        load_before,
        load_after: load_average(),
        samples: &samples,
        totals,
        events,
        applied,
        drained,
        forwarded_ok: received.ok.load(Ordering::Relaxed),
        forwarded_failed: received.failed.load(Ordering::Relaxed),
        reconciliations: reconciled.total(),
        console_polls: beside.console_polls.load(Ordering::Relaxed),
        console_failures: beside.console_failures.load(Ordering::Relaxed),
        purges: beside.purges.load(Ordering::Relaxed),
        purge_failures: beside.purge_failures.load(Ordering::Relaxed),
        peak_rss_mib,
    };
    let markdown = run.render();
    println!("{markdown}");
    if !args.no_write {
        let title =
            format!("webhook-inbox soak, {} at commit {}: every {} s", run.date, run.commit, args.interval);
        std::fs::write(&args.chart, chart::svg(&title, &samples))?;
        crate::results::write_between(&args.output, MARKERS, &markdown)?;
        eprintln!("wrote {} and {}", args.output.display(), args.chart.display());
    }
    Ok(())
}

/// Signs in, then reads the overview, the events list and the newest
/// event's page every `every` seconds, as someone watching the console.
async fn poll_console(addr: std::net::SocketAddr, every: u64, beside: Arc<Beside>) {
    let mut tick = tokio::time::interval(Duration::from_secs(every));
    let mut session = None;
    loop {
        tick.tick().await;
        let polled = async {
            if session.is_none() {
                session = Some(sign_in(addr).await?);
            }
            let session = session.as_deref().unwrap_or_default();
            get(addr, "/console", session).await?;
            let events = get(addr, "/console/events", session).await?;
            if let Some(id) =
                events.split("href=\"/console/events/").nth(1).and_then(|rest| rest.split('"').next())
            {
                get(addr, &format!("/console/events/{id}"), session).await?;
            }
            anyhow::Ok(())
        }
        .await;
        let counter = if polled.is_ok() { &beside.console_polls } else { &beside.console_failures };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs `webhook-inbox purge --older-than 1m` every `every` seconds.
async fn purge_now_and_then(binary: PathBuf, database_url: String, every: u64, beside: Arc<Beside>) {
    let mut tick = tokio::time::interval(Duration::from_secs(every));
    loop {
        tick.tick().await;
        let (binary, url) = (binary.clone(), database_url.clone());
        let status = tokio::task::spawn_blocking(move || {
            Command::new(binary)
                .args(["purge", "--older-than", "1m"])
                .env("DATABASE_URL", url)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
        })
        .await;
        let ok = matches!(status, Ok(Ok(status)) if status.success());
        let counter = if ok { &beside.purges } else { &beside.purge_failures };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
