//! Slow clients (slowloris): a client that trickles its headers or its body,
//! or sends nothing, is cut off at REQUEST_READ_TIMEOUT_SECS; none of them
//! ever makes the service run a statement or open a database connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Barrier;

use crate::support::provider::attempt;
use crate::support::service::database_url;
use crate::support::socket::{self, request_bytes};
use crate::support::watch::{quiet_service_sessions, service_sessions};
use crate::support::*;

/// How a slow client behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slow {
    /// Connects and sends nothing.
    Silent,
    /// Sends the request line, then one header byte every 100 ms.
    Headers,
    /// Sends complete, correctly signed headers, then one body byte every 100 ms.
    Body,
    /// Completes one request (`GET /healthz`) on a keep-alive connection, then stays idle.
    IdleKeepAlive,
}

/// What the service did to a slow client.
#[derive(Debug)]
struct CutOff {
    slow: Slow,
    /// Time from connecting until the service closed the connection.
    after: Duration,
    /// When it closed it.
    at: Instant,
    /// The status of the last answer on the connection, if any.
    status: Option<u16>,
}

/// Runs one slow client until the service cuts it off; waits at `ready`
/// once it has sent what it sends at once.
async fn slow_client(
    addr: std::net::SocketAddr,
    slow: Slow,
    delivery: Delivery,
    ready: Arc<Barrier>,
) -> CutOff {
    let started = Instant::now();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let bytes = request_bytes(&delivery);
    let trickle = tokio::spawn(async move {
        let (now, then): (Vec<u8>, Vec<u8>) = match slow {
            Slow::Silent => (vec![], vec![]),
            Slow::Headers => (b"POST /billing/webhook HTTP/1.1\r\n".to_vec(), b"x-slow: ".repeat(40)),
            Slow::Body => {
                let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                (bytes[..head_end].to_vec(), bytes[head_end..].to_vec())
            }
            Slow::IdleKeepAlive => (b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n".to_vec(), vec![]),
        };
        writer.write_all(&now).await?;
        ready.wait().await;
        for byte in then {
            tokio::time::sleep(Duration::from_millis(100)).await;
            writer.write_all(&[byte]).await?;
        }
        // Then hold the connection open, sending nothing more.
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok::<_, std::io::Error>(writer)
    });
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), reader.read_to_end(&mut received)).await;
    trickle.abort();
    assert!(read.is_ok(), "{slow:?}: the connection is still open after 15 s");
    let status = (!received.is_empty()).then(|| socket::parse(&received).status);
    CutOff { slow, after: started.elapsed(), at: Instant::now(), status }
}

/// Twenty slow clients, five of each kind, started together; returns them
/// once each has sent what it sends at once.
async fn slow_clients(service: &Service, delivery: &Delivery) -> Vec<tokio::task::JoinHandle<CutOff>> {
    let kinds = [Slow::Silent, Slow::Headers, Slow::Body, Slow::IdleKeepAlive];
    let ready = Arc::new(Barrier::new(SLOW_CLIENTS + 1));
    let clients = (0..SLOW_CLIENTS)
        .map(|n| {
            tokio::spawn(slow_client(service.addr, kinds[n % kinds.len()], delivery.clone(), ready.clone()))
        })
        .collect();
    ready.wait().await;
    clients
}

/// `REQUEST_READ_TIMEOUT_SECS`.
const READ_TIMEOUT: Duration = Duration::from_secs(1);
/// The smallest pool the service accepts (`DB_MAX_CONNECTIONS`).
const POOL: &str = "6";
/// Slow clients connected at once, of every kind.
const SLOW_CLIENTS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_at_the_read_timeout_without_reaching_the_database() {
    let db = TestDatabase::create().await;
    let service = Service::start(
        &database_url(&db.connect_options()),
        &[
            ("REQUEST_READ_TIMEOUT_SECS", &READ_TIMEOUT.as_secs().to_string()),
            ("DB_MAX_CONNECTIONS", POOL),
            ("DB_ACQUIRE_TIMEOUT_MS", "300"),
        ],
    )
    .await;
    let before = quiet_service_sessions(db.pool()).await;

    // Slow clients at once, as many of each kind.
    let event = Event::mixed("slow", 2);
    let clients = slow_clients(&service, &event[0].delivery).await;
    let mut slowest = Duration::ZERO;
    for client in clients {
        let cut = client.await.unwrap();
        let expected = match cut.slow {
            Slow::Silent | Slow::Headers => None,
            Slow::Body => Some(408),
            Slow::IdleKeepAlive => Some(200),
        };
        assert_eq!(cut.status, expected, "{cut:?}");
        assert!(cut.after >= READ_TIMEOUT && cut.after < READ_TIMEOUT * 5 / 2, "{cut:?}");
        slowest = slowest.max(cut.after);
    }
    // None of them made the service run a statement or open a connection,
    // not even the one whose headers were signed and complete.
    assert_eq!(service_sessions(db.pool()).await, before);

    // A delivery that does reach the database shows in the same view.
    let answer = attempt(service.addr, &event[0].delivery).await.answer.unwrap();
    assert_eq!(answer.status, 200);
    assert_ne!(service_sessions(db.pool()).await, before);

    // Nor do they hold a pooled connection: with the smallest pool, and the
    // slow clients connected, a delivery is served at once.
    let clients = slow_clients(&service, &event[1].delivery).await;
    let served = attempt(service.addr, &event[1].delivery).await;
    assert_eq!(served.answer.as_ref().map(|a| a.status), Some(200), "{served:?}");
    for client in clients {
        assert!(client.await.unwrap().at > served.finished, "served while every slow client was connected");
    }

    Report {
        fault: "slow clients (slowloris)",
        events: event.len(),
        // Each slow client twice, and the two deliveries served.
        deliveries: 2 * SLOW_CLIENTS + 2,
        ledger: None,
        notes: format!(
            "REQUEST_READ_TIMEOUT_SECS={}; {SLOW_CLIENTS} concurrent clients (silent, trickling headers, \
             trickling a signed body, idle keep-alive): all disconnected after the timeout (slowest {} ms), the \
             body trickler answered 408; pg_stat_activity showed no statement and no new session for any of \
             them; with the smallest pool (DB_MAX_CONNECTIONS={POOL}) and {SLOW_CLIENTS} slow clients connected, \
             a delivery was served at once",
            READ_TIMEOUT.as_secs(),
            slowest.as_millis()
        ),
    }
    .print();
}
