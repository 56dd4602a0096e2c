//! `loadgen console`: the console's pages on an archive of a million rows.
//!
//! Starts the service with `ADMIN_TOKEN` and two destinations (paused, so
//! nothing is sent) on its embedded PostgreSQL, fills the archive in SQL (a
//! retention period of traffic: rows spread over 90 days, three providers,
//! a few FAILED) and the destinations' jobs and attempts, signs in as a
//! browser would, then times each page from request to last byte over
//! loopback, one request at a time, and writes the table into
//! bench/RESULTS.md between `<!-- console:start -->` and
//! `<!-- console:end -->`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::pgbench::psql;
use crate::results::write_between;
use crate::service::{Binary, CLERK_SECRET, PADDLE_SECRET, Service};

pub(crate) const ADMIN_TOKEN: &str = "console-bench-admin-token-0123456789";

/// Two destinations, at a loopback port nobody listens on; paused before
/// any job exists, so the service never sends.
const DESTINATIONS: &str = r#"
[[destinations]]
name = "billing-app"
url = "http://127.0.0.1:9/webhooks/inbox"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
events = ["paddle:*", "clerk:*", "stripe:*"]

[[destinations]]
name = "analytics"
url = "http://127.0.0.1:9/events"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
events = ["paddle:*", "clerk:*", "stripe:*"]
"#;

/// How the measurement runs.
#[derive(Debug, Args)]
pub struct ConsoleArgs {
    #[command(flatten)]
    service: Binary,
    /// Archive rows.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Days the rows are spread over (a retention period).
    #[arg(long, default_value_t = 90)]
    days: u64,
    /// Timed requests per page (after 5 untimed ones).
    #[arg(long, default_value_t = 50)]
    samples: usize,
    /// Markdown file whose console section is replaced.
    #[arg(long, default_value = "bench/RESULTS.md")]
    output: PathBuf,
}

/// A page's timings.
struct Measured {
    page: String,
    path: String,
    bytes: usize,
    ms: Vec<f64>,
}

pub async fn run(args: ConsoleArgs) -> anyhow::Result<()> {
    let work = std::env::temp_dir().join(format!("wib-console-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let data_dir = work.join("pg");
    let conninfo = crate::service::embedded_conninfo(&data_dir);
    let config = work.join("destinations.toml");
    std::fs::write(&config, DESTINATIONS)?;
    let env = [
        ("PADDLE_WEBHOOK_SECRET", PADDLE_SECRET.to_string()),
        ("CLERK_WEBHOOK_SECRET", CLERK_SECRET.to_string()),
        ("STRIPE_WEBHOOK_SECRET", "whsec_stripe_bench_secret_0123456789abcdef".to_string()),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_string()),
        ("DATA_DIR", data_dir.display().to_string()),
        ("ARCHIVE_RETENTION_DAYS", "0".to_string()),
        ("CONFIG_FILE", config.display().to_string()),
    ];
    eprintln!("starting the service ...");
    let service = Service::start(&args.service.path, &env, &work.join("service.log")).await?;
    let version = psql(&conninfo, "SHOW server_version")?;
    eprintln!("filling the archive with {} rows over {} days ...", args.rows, args.days);
    let started = Instant::now();
    psql(&conninfo, "UPDATE destinations SET paused_at = now()")?;
    fill(&conninfo, args.rows, args.days)?;
    let fill_secs = started.elapsed().as_secs_f64();
    let facts = psql(
        &conninfo,
        "SELECT (SELECT count(*) FROM webhook_events) || ' ' ||
                (SELECT count(*) FROM webhook_events WHERE created_at > now() - interval '1 day') || ' ' ||
                (SELECT count(*) FROM webhook_events WHERE processing_status = 'FAILED') || ' ' ||
                -- A partitioned table's own size is 0: its partitions hold the rows.
                (SELECT pg_size_pretty(sum(pg_total_relation_size(relid))) FROM pg_partition_tree('webhook_events')) || ' ' ||
                (SELECT count(*) FROM destination_jobs) || ' ' ||
                (SELECT count(*) FROM destination_jobs WHERE status = 'dead') || ' ' ||
                (SELECT count(*) FROM destination_attempts)",
    )?;
    let failed_id = psql(&conninfo, "SELECT max(id) FROM webhook_events WHERE processing_status = 'FAILED'")?;
    let event_id = psql(&conninfo, "SELECT event_id FROM webhook_events WHERE id = 500000")?;
    let forwarded_id = psql(
        &conninfo,
        "SELECT max(w.id) FROM webhook_events w JOIN destination_jobs j USING (provider, event_id)
         WHERE j.status = 'dead'",
    )?;

    let session = sign_in(service.addr).await?;
    let first_page = get(service.addr, "/console/events", &session).await?;
    let cursor = first_page
        .split("rel=\"next\" href=\"/console/events?")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .ok_or_else(|| anyhow::anyhow!("no next page link on the events list"))?
        .replace("&amp;", "&");
    let pages = [
        ("overview", "/console".to_string()),
        ("events, no filter", "/console/events".into()),
        ("events, second page", format!("/console/events?{cursor}")),
        ("events, status FAILED", "/console/events?status=FAILED".into()),
        ("events, a rare type", "/console/events?type=customer.updated".into()),
        ("events, provider stripe, since 7d", "/console/events?provider=stripe&since=7d".into()),
        ("events, one event id", format!("/console/events?event_id={event_id}")),
        ("events, until 30d", "/console/events?until=30d".into()),
        ("events, since 7d until 6d", "/console/events?since=7d&until=6d".into()),
        // A customer's ~50 events, spread over every day: the payload search.
        (
            "events, where data.customer_id, since 1d",
            "/console/events?where=data.customer_id%3Dctm_4242&since=1d".into(),
        ),
        (
            "events, where data.customer_id, every day",
            "/console/events?where=data.customer_id%3Dctm_4242".into(),
        ),
        ("one event (FAILED)", format!("/console/events/{failed_id}")),
        ("one event with 2 dead forwarding jobs", format!("/console/events/{forwarded_id}")),
        ("replay dead jobs dry run, billing-app", "/console/destinations/billing-app/replay-dead".into()),
        (
            "bulk reprocess dry run, paddle FAILED 1d",
            "/console/reprocess?provider=paddle&status=FAILED&since=1d".into(),
        ),
    ];
    let load_before = load_average();
    let mut measured = Vec::new();
    for (page, path) in pages {
        eprintln!("timing {page} ...");
        let mut ms = Vec::with_capacity(args.samples);
        let mut bytes = 0;
        for i in 0..args.samples + 5 {
            let started = Instant::now();
            let body = get(service.addr, &path, &session).await?;
            let elapsed = started.elapsed();
            bytes = body.len();
            if i >= 5 {
                ms.push(elapsed.as_secs_f64() * 1000.0);
            }
        }
        ms.sort_by(f64::total_cmp);
        measured.push(Measured { page: page.into(), path, bytes, ms });
    }
    let load = format!("{load_before} before, {} after", load_average());
    service.stop()?;
    let markdown = render(&args, &measured, &facts, &version, fill_secs, &load)?;
    write_section(&args.output, &markdown)?;
    println!("{markdown}");
    std::fs::remove_dir_all(&work).ok();
    Ok(())
}

/// A million rows in a few statements: the day partitions they need,
/// event types, providers and outcomes in fixed proportions, times spread
/// evenly over `days`, a dedup row for every applied event, and half the
/// FAILED events applied later.
fn fill(conninfo: &str, rows: u64, days: u64) -> anyhow::Result<()> {
    psql(
        conninfo,
        &format!(
            "SELECT create_day_partitions(t, (now() AT TIME ZONE 'UTC')::date - {days} - 1, (now() AT TIME ZONE 'UTC')::date + 1)
             FROM unnest(ARRAY['webhook_events_daily', 'destination_attempts']::regclass[]) t;
             INSERT INTO webhook_events (provider, event_id, event_type, payload, signature, processing_status,
                                         error_message, secret_index, created_at, processed_at)
             SELECT provider, 'evt_' || g, event_type,
                    jsonb_build_object('event_id', 'evt_' || g, 'event_type', event_type,
                                       'data', jsonb_build_object('id', 'sub_' || (g % 50000), 'customer_id', 'ctm_' || (g % 20000),
                                                          'note', repeat('x', 300))),
                    'ts=1;h1=' || md5(g::text), status,
                    CASE WHEN status = 'FAILED' THEN 'handler failed: missing data.customer_id' END, 0,
                    now() - make_interval(secs => ({rows} - g) * {days} * 86400.0 / {rows}),
                    CASE WHEN status <> 'FAILED' THEN now() END
             FROM generate_series(1, {rows}) g,
                  LATERAL (SELECT (ARRAY['paddle', 'paddle', 'paddle', 'paddle', 'clerk', 'clerk', 'clerk', 'clerk', 'stripe', 'stripe'])[g % 10 + 1] AS provider,
                                  (ARRAY['subscription.created', 'subscription.updated', 'transaction.completed', 'transaction.updated',
                                         'user.created', 'user.updated', 'invoice.paid', 'subscription.canceled', 'transaction.paid'])[g % 9 + 1] AS event_type,
                                  CASE WHEN g % 200 = 3 THEN 'FAILED' WHEN g % 5 = 1 THEN 'SKIPPED' ELSE 'PROCESSED' END AS status) p;
             UPDATE webhook_events SET event_type = 'customer.updated' WHERE id % 10000 = 17;
             INSERT INTO processed_webhook_events (provider, event_id, event_type, processed_at)
             SELECT provider, event_id, event_type, created_at FROM webhook_events
             WHERE processing_status = 'PROCESSED' OR (processing_status = 'FAILED' AND (id / 200) % 2 = 0)
             ON CONFLICT DO NOTHING;"
        ),
    )?;
    // Every tenth applied event forwarded to both destinations: sent, one
    // in a thousand dead after three attempts, the last hour's pending.
    psql(
        conninfo,
        "INSERT INTO destination_jobs (destination, provider, event_id, event_type, occurred_at, body, status,
                                       attempts, last_error, next_attempt_at, created_at, sent_at)
         SELECT d.name, w.provider, w.event_id, w.event_type, w.created_at, convert_to(w.payload::text, 'UTF8'),
                s.status, CASE s.status WHEN 'dead' THEN 3 WHEN 'sent' THEN 1 ELSE 0 END,
                CASE WHEN s.status = 'dead' THEN 'HTTP 500 Internal Server Error' END,
                w.created_at, w.created_at, CASE WHEN s.status = 'sent' THEN w.created_at END
         FROM webhook_events w
         CROSS JOIN (VALUES ('billing-app'), ('analytics')) d(name)
         CROSS JOIN LATERAL (SELECT CASE WHEN w.id % 1000 = 10 THEN 'dead'
                                         WHEN w.created_at > now() - interval '1 hour' THEN 'pending'
                                         ELSE 'sent' END AS status) s
         WHERE w.id % 10 = 0 AND w.processing_status = 'PROCESSED';
         INSERT INTO destination_attempts (attempted_at, job_id, attempt, destination, duration_ms, status_code,
                                           error, response_body)
         SELECT j.created_at + make_interval(mins => n), j.id, n, j.destination, 10.0 + n,
                CASE WHEN j.status = 'sent' THEN 200 ELSE 500 END,
                CASE WHEN j.status = 'dead' THEN 'HTTP 500 Internal Server Error' END,
                CASE WHEN j.status = 'sent' THEN '{\"ok\":true}' ELSE repeat('<p>upstream unavailable</p>', 38) END
         FROM destination_jobs j, generate_series(1, j.attempts) n;",
    )?;
    // VACUUM cannot run in the multi-statement transactions above.
    for table in ["webhook_events", "processed_webhook_events", "destination_jobs", "destination_attempts"] {
        psql(conninfo, &format!("VACUUM ANALYZE {table}"))?;
    }
    Ok(())
}

/// Signs in as the form does; the session cookie (`console_session=...`).
pub(crate) async fn sign_in(addr: SocketAddr) -> anyhow::Result<String> {
    let (head, body) = request(addr, "GET /console/sign-in", "", None).await?;
    let sign_in_cookie = cookie(&head, "console_sign_in")?;
    let csrf = body
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .ok_or_else(|| anyhow::anyhow!("no csrf field on the sign-in form"))?;
    let form = format!("token={ADMIN_TOKEN}&csrf={csrf}&next=%2Fconsole");
    let (head, _) = request(addr, "POST /console/sign-in", &sign_in_cookie, Some(&form)).await?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 303"), "sign-in failed: {head}");
    cookie(&head, "console_session")
}

fn cookie(head: &str, name: &str) -> anyhow::Result<String> {
    head.lines()
        .filter_map(|line| line.split_once(": "))
        .filter(|(key, _)| key.eq_ignore_ascii_case("set-cookie"))
        .filter_map(|(_, value)| value.split(';').next())
        .find(|pair| pair.starts_with(&format!("{name}=")))
        .map(String::from)
        .ok_or_else(|| anyhow::anyhow!("no {name} cookie in {head}"))
}

/// `GET path` in the session: the body of a 200.
pub(crate) async fn get(addr: SocketAddr, path: &str, session: &str) -> anyhow::Result<String> {
    let (head, body) = request(addr, &format!("GET {path}"), session, None).await?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "{path}: {}", head.lines().next().unwrap_or(""));
    Ok(body)
}

/// One request on a fresh connection, read to its close.
async fn request(
    addr: SocketAddr,
    line: &str,
    cookie: &str,
    form: Option<&str>,
) -> anyhow::Result<(String, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    let mut request = format!("{line} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
    if !cookie.is_empty() {
        write!(request, "cookie: {cookie}\r\n")?;
    }
    match form {
        Some(form) => write!(
            request,
            "content-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\r\n{form}",
            form.len()
        )?,
        None => request.push_str("\r\n"),
    }
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut answer)).await??;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    Ok((head.to_string(), body.to_string()))
}

/// The machine's 1-minute load average: other work slows every page.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "unknown".into())
}

fn render(
    args: &ConsoleArgs,
    pages: &[Measured],
    facts: &str,
    version: &str,
    fill_secs: f64,
    load: &str,
) -> anyhow::Result<String> {
    let facts: Vec<&str> = facts.split_whitespace().collect();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut md = String::new();
    writeln!(
        md,
        "Measured {date} on {cores} cores, PostgreSQL {version}, service at commit {commit}: an archive of {} rows \
         ({} {}, filled in {fill_secs:.0} s) spread over {} days, {} of them in the last 24 hours, {} FAILED; \
         two destinations (paused) with {} forwarding jobs, {} of them dead, and {} attempts. \
         Each page requested {} times after 5 untimed requests, one at a time over loopback, on a new connection; \
         the time is from the request to the answer's last byte (database reads, rendering, transfer). \
         Load average of the machine (1 min): {load}.\n",
        facts.first().unwrap_or(&"?"),
        facts.get(3).unwrap_or(&"?"),
        facts.get(4).unwrap_or(&""),
        args.days,
        facts.get(1).unwrap_or(&"?"),
        facts.get(2).unwrap_or(&"?"),
        facts.get(5).unwrap_or(&"?"),
        facts.get(6).unwrap_or(&"?"),
        facts.get(7).unwrap_or(&"?"),
        args.samples,
    )?;
    writeln!(md, "| page | request | size (KB) | median (ms) | p95 (ms) | max (ms) | under 50 ms (p95) |")?;
    writeln!(md, "|---|---|---|---|---|---|---|")?;
    for page in pages {
        let quantile = |q: f64| page.ms[((page.ms.len() as f64 - 1.0) * q).round() as usize];
        writeln!(
            md,
            "| {} | `{}` | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            page.page,
            page.path,
            page.bytes as f64 / 1024.0,
            quantile(0.5),
            quantile(0.95),
            page.ms.last().copied().unwrap_or(0.0),
            if quantile(0.95) < 50.0 { "yes" } else { "**no**" },
        )?;
    }
    Ok(md)
}

pub(crate) const MARKERS: (&str, &str) = ("<!-- console:start -->", "<!-- console:end -->");

/// Replaces the text between the console markers in `path`.
fn write_section(path: &std::path::Path, markdown: &str) -> anyhow::Result<()> {
    write_between(path, MARKERS, markdown)
}
