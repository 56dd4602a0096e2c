//! Slow clients (slowloris): a client that trickles its headers or its body,
//! or sends nothing, is cut off at REQUEST_READ_TIMEOUT_SECS; none of them
//! ever makes the service run a statement or open a database connection.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::provider::attempt;
use crate::support::service::database_url;
use crate::support::socket::{self, request_bytes};
use crate::support::watch::service_sessions;
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
    /// The status of the last answer on the connection, if any.
    status: Option<u16>,
}

async fn slow_client(addr: std::net::SocketAddr, slow: Slow, delivery: Delivery) -> CutOff {
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
    CutOff { slow, after: started.elapsed(), status }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_at_the_read_timeout_without_reaching_the_database() {
    let db = TestDatabase::create().await;
    let service =
        Service::start(&database_url(&db.connect_options()), &[("REQUEST_READ_TIMEOUT_SECS", "1")]).await;
    let before = service_sessions(db.pool()).await;

    // Twenty slow clients at once, five of each kind.
    let kinds = [Slow::Silent, Slow::Headers, Slow::Body, Slow::IdleKeepAlive];
    let event = Event::mixed("slow", 1).remove(0);
    let clients: Vec<_> = (0..20)
        .map(|n| tokio::spawn(slow_client(service.addr, kinds[n % kinds.len()], event.delivery.clone())))
        .collect();
    let mut slowest = Duration::ZERO;
    for client in clients {
        let cut = client.await.unwrap();
        let expected = match cut.slow {
            Slow::Silent | Slow::Headers => None,
            Slow::Body => Some(408),
            Slow::IdleKeepAlive => Some(200),
        };
        assert_eq!(cut.status, expected, "{cut:?}");
        assert!(cut.after >= Duration::from_secs(1) && cut.after < Duration::from_millis(2500), "{cut:?}");
        slowest = slowest.max(cut.after);
    }
    // None of them made the service run a statement or open a connection,
    // not even the one whose headers were signed and complete.
    assert_eq!(service_sessions(db.pool()).await, before);

    // A delivery that does reach the database shows in the same view.
    let answer = attempt(service.addr, &event.delivery).await.answer.unwrap();
    assert_eq!(answer.status, 200);
    assert_ne!(service_sessions(db.pool()).await, before);

    Report {
        fault: "slow clients (slowloris)",
        events: 1,
        deliveries: 21,
        ledger: None,
        notes: format!(
            "REQUEST_READ_TIMEOUT_SECS=1; 20 concurrent clients (silent, trickling headers, trickling a \
             signed body, idle keep-alive): all disconnected after 1.0 s (slowest {} ms), the body trickler \
             answered 408; pg_stat_activity showed no statement and no new session for any of them",
            slowest.as_millis()
        ),
    }
    .print();
}
