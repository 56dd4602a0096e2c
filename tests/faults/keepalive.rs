//! The real binary on a database reached over TCP sets keepalive probes on
//! its connections: each of them, idle, has its keepalive timer armed at
//! `DB_KEEPALIVE_IDLE_SECS`, as the kernel reports in `/proc/net/tcp`. (A
//! host that vanishes silently cannot be simulated on loopback without
//! dropping packets; `src/db/keepalive.rs` tests the settings themselves.)

use std::net::SocketAddr;

use crate::support::watch::{quiet_service_sessions, until};
use crate::support::*;

/// The keepalive idle time the service is given: long, so that the timer
/// the kernel reports is clearly this one.
const IDLE_SECS: u64 = 120;

/// `/proc/net/tcp`'s timer kind of an idle connection with keepalive on.
const KEEPALIVE_TIMER: &str = "02";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tcp_connection_to_the_database_has_its_keepalive_timer_armed() {
    let cluster = Cluster::start().await;
    let url = cluster.url_over_tcp().await;
    // postgres://postgres@127.0.0.1:port/postgres...
    let proxy: SocketAddr = url.split(['@', '/']).nth(3).unwrap().parse().unwrap();
    let service = Service::start(
        &url,
        &[("DB_KEEPALIVE_IDLE_SECS", &IDLE_SECS.to_string()), ("DB_KEEPALIVE_COUNT", "4")],
    )
    .await;
    let pool = sqlx::postgres::PgPoolOptions::new().connect_with(cluster.connect_options()).await.unwrap();
    let sessions = quiet_service_sessions(&pool).await;
    assert!(!sessions.is_empty());

    // Every connection of the service to the proxy, once idle: the kernel
    // has armed its keepalive timer, due within IDLE_SECS.
    let mut timers = Vec::new();
    until("the service's connections to be idle", async || {
        timers = timers_of_connections_to(proxy);
        timers.len() >= sessions.len() && timers.iter().all(|(kind, _)| kind != "01")
    })
    .await;
    for (kind, due_in) in &timers {
        assert_eq!(kind, KEEPALIVE_TIMER, "{timers:?}");
        // In clock ticks (USER_HZ, 100 a second).
        assert!(*due_in <= IDLE_SECS * 100 && *due_in > (IDLE_SECS - 30) * 100, "{timers:?}");
    }
    drop(service);
}

/// The timer (kind, and ticks until due) of every established TCP
/// connection on this host whose remote end is `peer` (IPv4), from
/// `/proc/net/tcp`.
fn timers_of_connections_to(peer: SocketAddr) -> Vec<(String, u64)> {
    let SocketAddr::V4(peer) = peer else { panic!("an IPv4 address") };
    // The address as the kernel prints it: the four bytes in memory order, then the port.
    let remote = format!("{:08X}:{:04X}", u32::from_ne_bytes(peer.ip().octets()), peer.port());
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl, local_address, rem_address, st (01: established), tx:rx queue, tr:tm->when
            (fields[2] == remote && fields[3] == "01").then(|| {
                let (kind, when) = fields[5].split_once(':').unwrap();
                (kind.to_string(), u64::from_str_radix(when, 16).unwrap())
            })
        })
        .collect()
}
