//! The server on a real socket: serving, and a shutdown that refuses new
//! connections but answers the deliveries already in flight.

use serde_json::json;
use sqlx::{Connection, PgConnection};
use tokio::net::TcpStream;

use crate::support::socket::post;
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
    while TcpStream::connect(addr).await.is_ok() {
        tokio::task::yield_now().await;
    }
    // ... and the delivery in flight still completes and is answered.
    sqlx::raw_sql("ROLLBACK").execute(&mut holder).await.unwrap();
    let (status, body) = in_flight.await.unwrap();
    assert_eq!((status, body), (200, json!({ "event_id": "evt_02", "status": "processed" })));
    assert!(server.await.unwrap(), "drained within the grace period");
    assert_eq!(test.count("SELECT count(*) FROM credit_grants").await, 2);
}
