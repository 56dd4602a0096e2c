//! The server on a real socket: serving, and a shutdown that refuses new
//! connections but answers the deliveries already in flight.

use serde_json::json;
use sqlx::{Connection, PgConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
