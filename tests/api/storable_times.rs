//! Event times at the edge of what PostgreSQL's `timestamptz` holds: the
//! earliest it can store is accepted and stored as that instant; one
//! second (or millisecond) earlier is refused at parse time, with 400 and
//! nothing stored (the table in `hostile_input.rs`).

use serde_json::json;
use webhook_inbox::event::EARLIEST_STORABLE_TIME;

use crate::support::*;

#[tokio::test]
async fn the_earliest_time_postgresql_stores_is_accepted_as_that_instant() {
    let app = TestApp::spawn().await;
    let mut stripe_event = stripe_event("evt_earliest", "invoice.paid");
    stripe_event["created"] = json!(EARLIEST_STORABLE_TIME);
    let mut clerk_event = user_created("user_earliest");
    clerk_event["timestamp"] = json!(EARLIEST_STORABLE_TIME * 1000);

    for delivery in [stripe(&stripe_event), clerk("msg_earliest", &clerk_event)] {
        let answer = app.send(&delivery).await;
        assert!(answer.status.is_success(), "{:?}", answer.body);
    }
    let at_the_edge = app
        .count("SELECT count(*) FROM webhook_events WHERE occurred_at = '4714-11-24 00:00:00+00 BC'")
        .await;
    assert_eq!(at_the_edge, 2);
}
