//! Clients that vanish: the provider's connection is reset, or its load
//! balancer gives up, while the delivery's transaction is running. The work
//! commits or rolls back as a whole all the same, and the retry is idempotent.

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::provider::attempt;
use crate::support::service::database_url;
use crate::support::socket::request_bytes;
use crate::support::watch::{Gate, quiet_service_sessions, service_sessions, until, until_waiting_on};
use crate::support::*;

/// How a client leaves without reading the answer.
#[derive(Debug, Clone, Copy)]
enum Leave {
    /// Closes its socket (FIN), like a load balancer timing out.
    Close,
    /// Resets the connection (RST), like a NAT box forgetting it.
    Reset,
}

impl Leave {
    async fn leave(self, mut stream: TcpStream) {
        match self {
            Leave::Close => stream.shutdown().await.unwrap(),
            // A zero linger makes close send RST instead of FIN.
            Leave::Reset => stream.set_zero_linger().unwrap(),
        }
    }
}

async fn archive_rows(db: &TestDatabase) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM webhook_events").fetch_one(db.pool()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_whose_client_vanished_still_commit_or_roll_back_whole_and_the_retry_is_idempotent() {
    let db = TestDatabase::create().await;
    let service = Service::start(&database_url(&db.connect_options()), &[("LOCK_TIMEOUT_MS", "30000")]).await;
    let events = Event::mixed("gone", 8).into_iter().step_by(2).collect::<Vec<_>>();
    // The last two events' effects fail after their first write, at the
    // ledger, once the gate opens (the refusal trigger runs after the gate's).
    let refused: Vec<&str> = events[2..].iter().map(|e| e.id.as_str()).collect();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN IF NEW.event_id IN ('{}') THEN RAISE EXCEPTION 'ledger refused'; END IF; RETURN NEW; END $$;
         CREATE TRIGGER zz_refuse BEFORE INSERT ON credit_grants FOR EACH ROW EXECUTE FUNCTION refuse();",
        refused.join("','")
    )))
    .execute(db.pool())
    .await
    .unwrap();

    // Every delivery's transaction is inside its effect when its client leaves.
    let gate = Gate::shut(db.pool(), "credit_grants", 3).await;
    let leaves = [Leave::Close, Leave::Reset, Leave::Close, Leave::Reset];
    for (n, (event, leave)) in events.iter().zip(leaves).enumerate() {
        let mut stream = TcpStream::connect(service.addr).await.unwrap();
        stream.write_all(&request_bytes(&event.delivery)).await.unwrap();
        until_waiting_on(db.pool(), "advisory", n as i64 + 1).await;
        leave.leave(stream).await;
    }
    gate.open().await;
    until("every delivery archived", async || archive_rows(&db).await >= events.len() as i64).await;

    // Committed whole: the two accepted events are applied; the two refused
    // ones left a FAILED row and nothing else (their subscription upserts,
    // written before the refusal, are rolled back with their dedup rows).
    let applied = Ledger::count(db.pool(), &events[..2]).await;
    applied.assert_exactly_once();
    let failed: Vec<String> = sqlx::query_scalar(
        "SELECT event_id FROM webhook_events WHERE processing_status = 'FAILED' ORDER BY event_id",
    )
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert_eq!(failed, refused);
    assert!(Ledger::committed(db.pool(), &events[2..]).await.is_empty());
    let subscriptions: i64 =
        sqlx::query_scalar("SELECT count(*) FROM subscriptions").fetch_one(db.pool()).await.unwrap();
    assert_eq!(subscriptions, 2);

    // The provider retries: the applied events are duplicates; the refused
    // ones, once the cause is fixed, are applied now, once.
    sqlx::raw_sql("DROP TRIGGER zz_refuse ON credit_grants").execute(db.pool()).await.unwrap();
    for (n, event) in events.iter().enumerate() {
        let answer = attempt(service.addr, &event.delivery).await.answer.unwrap();
        let expected = if n < 2 {
            json!({ "event_id": event.id, "idempotent": true })
        } else {
            json!({ "event_id": event.id, "status": "processed" })
        };
        assert_eq!((answer.status, answer.body), (200, expected));
    }
    let ledger = Ledger::count(db.pool(), &events).await;
    Report {
        fault: "client disconnect mid-delivery",
        events: events.len(),
        deliveries: 2 * events.len(),
        ledger: Some(&ledger),
        notes: format!(
            "{} clients left ({} FIN, {} RST) while their transaction was in its handler: {} committed whole, \
             {} handlers failed and rolled back whole (FAILED row only); every retry answered correctly",
            leaves.len(),
            leaves.iter().filter(|leave| matches!(leave, Leave::Close)).count(),
            leaves.iter().filter(|leave| matches!(leave, Leave::Reset)).count(),
            applied.applied_once,
            failed.len(),
        ),
    }
    .print();
    ledger.assert_exactly_once();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_vanishes_mid_body_leaves_nothing_and_never_reaches_the_database() {
    let db = TestDatabase::create().await;
    let service = Service::start(&database_url(&db.connect_options()), &[]).await;
    let event = Event::mixed("half", 1).remove(0);
    let before = quiet_service_sessions(db.pool()).await;

    let bytes = request_bytes(&event.delivery);
    for leave in [Leave::Close, Leave::Reset] {
        let mut stream = TcpStream::connect(service.addr).await.unwrap();
        stream.write_all(&bytes[..bytes.len() - 10]).await.unwrap();
        leave.leave(stream).await;
    }
    // Once the service has finished with both, it had run no statement for
    // them, nor opened a connection.
    until("both requests finished", async || {
        let finished = r#""message":"finished processing request""#;
        service.logs().iter().filter(|line| line.contains(finished)).count() >= 2
    })
    .await;
    assert_eq!(service_sessions(db.pool()).await, before);
    assert_eq!(archive_rows(&db).await, 0);

    // It still serves; and a delivery that does reach the database shows.
    let answer = attempt(service.addr, &event.delivery).await.answer.unwrap();
    assert_eq!(answer.status, 200);
    assert_ne!(service_sessions(db.pool()).await, before);
    assert_eq!(archive_rows(&db).await, 1);
}
