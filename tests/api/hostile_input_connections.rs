//! Connections that hold the server's places without sending a request
//! (a row of RELIABILITY.md's hostile-input table): at its limit the
//! server sheds the ones waiting longest for a request head.

use std::time::Duration;

use tokio::net::TcpStream;
use webhook_inbox::http::ConnectionLimits;

use crate::support::socket::post;
use crate::support::*;

/// Issue 25: idle sockets cannot hold the connection limit. With 300
/// connections that sent nothing (128 accepted, the rest in the listen
/// backlog), deliveries on new connections are answered at once: the
/// server closes the connections waiting longest for a request head to
/// admit them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_at_the_limit_are_shed_so_that_new_deliveries_are_served() {
    let test = TestApp::spawn().await;
    let limits = ConnectionLimits { max_connections: 128, header_read_timeout: Duration::from_secs(10) };
    let listening = test.listen_with(limits).await;
    let addr = listening.addr;
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    let deliveries = (1..=5).map(|n| {
        let delivery = paddle(&subscription_created(&format!("evt_{n}"), &format!("sub_{n}")));
        tokio::spawn(async move { tokio::time::timeout(Duration::from_secs(2), post(addr, &delivery)).await })
    });
    for (n, answer) in futures_util::future::join_all(deliveries).await.into_iter().enumerate() {
        let (status, _) =
            answer.unwrap().unwrap_or_else(|_| panic!("delivery {} not answered within 2 s", n + 1));
        assert_eq!(status, 200, "delivery {}", n + 1);
    }
    println!(
        "HOSTILE\t300 connections that send nothing (MAX_CONNECTIONS=128), then 5 deliveries on new connections\t200\t\
         each answered within 2 s: the connections waiting longest for a request head were closed to admit them"
    );
    drop(idle);
}
