//! The server on a real socket: serving, a bound on open connections, and
//! a shutdown that refuses new connections but answers the deliveries
//! already in flight.

use std::time::Duration;

use serde_json::json;
use sqlx::{Connection, PgConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use webhook_inbox::http::ConnectionLimits;

use crate::support::socket::post;
use crate::support::watch::{LONGEST_WAIT, until};
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_over_a_real_socket_are_answered_and_shutdown_drains_in_flight_ones() {
    let test = TestApp::spawn().await;
    let listening = test.listen().await;
    let addr = listening.addr;

    let (status, body) = post(addr, &paddle(&subscription_created("evt_01", "sub_01"))).await;
    assert_eq!((status, body), (200, json!({ "event_id": "evt_01", "status": "processed" })));

    // A second event's first attempt is held in the database (as a slow one would be) ...
    let mut holder = PgConnection::connect_with(&test.db.connect_options()).await.unwrap();
    sqlx::raw_sql("BEGIN; INSERT INTO processed_webhook_events (provider, event_id, event_type) VALUES ('paddle', 'evt_02', 'x')")
        .execute(&mut holder)
        .await
        .unwrap();
    let second = paddle(&subscription_created("evt_02", "sub_02"));
    let in_flight = tokio::spawn(async move { post(addr, &second).await });
    crate::availability::until_a_delivery_waits_on_the_lock(&test).await;

    // ... when shutdown begins: new connections are refused from then on ...
    let server = listening.stop();
    until("new connections refused", async || TcpStream::connect(addr).await.is_err()).await;
    // ... and the delivery in flight still completes and is answered.
    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();
    let (status, body) = in_flight.await.unwrap();
    assert_eq!((status, body), (200, json!({ "event_id": "evt_02", "status": "processed" })));
    assert!(server.await.unwrap(), "drained within the grace period");
    assert_eq!(test.count("SELECT count(*) FROM credit_grants").await, 2);
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_answered_408_at_the_read_timeout() {
    let test = TestApp::spawn().await;
    let listening = test.listen().await;
    let request = crate::support::socket::request_bytes(&paddle(&subscription_created("evt_01", "sub_01")));

    // The head and part of the body, then nothing: the service stops
    // waiting at the body read timeout and says why.
    let mut stream = TcpStream::connect(listening.addr).await.unwrap();
    stream.write_all(&request[..request.len() - 10]).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(LONGEST_WAIT, stream.read_to_end(&mut response)).await.unwrap().unwrap();

    let answer = crate::support::socket::parse(&response);
    assert_eq!((answer.status, answer.body), (408, json!({ "error": "timed out reading the request body" })));
    assert_eq!(test.rows_everywhere().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_over_max_connections_waits_while_every_place_has_a_request_in_progress() {
    let test = TestApp::spawn().await;
    let limits = ConnectionLimits { max_connections: 2, header_read_timeout: Duration::from_secs(600) };
    let listening = test.listen_with(limits).await;
    let addr = listening.addr;
    // Two connections each send a delivery held in the database (its dedup
    // row is locked by another transaction): a request is in progress on
    // each, so neither may be shed.
    let mut holder = PgConnection::connect_with(&test.db.connect_options()).await.unwrap();
    sqlx::raw_sql("BEGIN; INSERT INTO processed_webhook_events (provider, event_id, event_type) VALUES ('paddle', 'evt_held', 'x')")
        .execute(&mut holder)
        .await
        .unwrap();
    // One at a time: two sent at once could be taken by one worker, in one
    // batch, and only one of them would wait on the lock.
    let mut held = Vec::new();
    for expected in 1..=2 {
        let delivery = paddle(&subscription_created("evt_held", "sub_held"));
        held.push(tokio::spawn(async move { post(addr, &delivery).await }));
        until("the held deliveries wait on the lock", async || {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
            )
            .fetch_one(test.pool())
            .await
            .unwrap();
            waiting == expected
        })
        .await;
    }

    // A third client sends a whole delivery: it is not served while both
    // places hold a request. (With the limit this cannot happen however
    // long the wait; the wait only bounds how long a server without one has
    // to answer it.)
    let delivery = paddle(&subscription_created("evt_01", "sub_01"));
    let mut third = tokio::spawn(async move { post(addr, &delivery).await });
    let early = tokio::time::timeout(Duration::from_secs(1), &mut third).await;
    assert!(early.is_err(), "served over the limit: {early:?}");
    assert_eq!(test.count("SELECT count(*) FROM webhook_events WHERE event_id = 'evt_01'").await, 0);

    // The held ones are answered and close: the waiting connection is
    // accepted and served.
    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();
    for held in held {
        assert_eq!(held.await.unwrap().0, 200);
    }
    let (status, body) = tokio::time::timeout(LONGEST_WAIT, third).await.unwrap().unwrap();
    assert_eq!((status, body), (200, json!({ "event_id": "evt_01", "status": "processed" })));
}
