//! Event bodies for lifecycle tests, with the timestamps that order them.

use serde_json::{Value, json};

/// The billing period `subscription.created` starts with.
pub const FIRST_PERIOD: &str = "2024-04-01T00:00:00Z";
/// The period of the first renewal.
pub const SECOND_PERIOD: &str = "2024-05-01T00:00:00Z";

/// A Paddle `subscription.<event_type>` for `sub_01` of `user_42`, with
/// status `status`, occurred at `occurred_at`, on 2 × `pri_basic` (200
/// credits) in the first period.
pub fn subscription(event_id: &str, event_type: &str, status: &str, occurred_at: &str) -> Value {
    json!({
        "event_id": event_id,
        "event_type": format!("subscription.{event_type}"),
        "occurred_at": occurred_at,
        "notification_id": format!("ntf_{event_id}"),
        "data": {
            "id": "sub_01",
            "status": status,
            "customer_id": "ctm_01",
            "custom_data": { "user_id": "user_42" },
            "items": [{ "price": { "id": "pri_basic" }, "quantity": 2, "status": "active" }],
            "current_billing_period": { "starts_at": FIRST_PERIOD, "ends_at": SECOND_PERIOD },
            "scheduled_change": null,
            "canceled_at": (status == "canceled").then_some(occurred_at),
            "created_at": "2024-04-01T00:00:00Z",
            "updated_at": occurred_at
        }
    })
}

/// Sets `data.items` to `quantity` × `price`.
pub fn with_items(mut event: Value, price: &str, quantity: i64) -> Value {
    event["data"]["items"] = json!([{ "price": { "id": price }, "quantity": quantity }]);
    event
}

/// A Paddle `transaction.completed` of `sub_01` with origin `origin`, for
/// the period starting at `period_starts_at`, on 1 × `pri_pro` (500 credits).
pub fn transaction_completed(event_id: &str, txn_id: &str, origin: &str, period_starts_at: &str) -> Value {
    json!({
        "event_id": event_id,
        "event_type": "transaction.completed",
        "occurred_at": "2024-05-01T00:00:05Z",
        "notification_id": format!("ntf_{event_id}"),
        "data": {
            "id": txn_id,
            "status": "completed",
            "origin": origin,
            "subscription_id": "sub_01",
            "customer_id": "ctm_01",
            "custom_data": null,
            "items": [{ "price": { "id": "pri_pro" }, "quantity": 1 }],
            "billing_period": { "starts_at": period_starts_at, "ends_at": "2024-06-01T00:00:00Z" }
        }
    })
}

/// A Clerk `user.<event_type>` for `user_id` with address `email`, at
/// `timestamp` (milliseconds).
pub fn user(event_type: &str, user_id: &str, email: &str, timestamp: i64) -> Value {
    json!({
        "type": format!("user.{event_type}"),
        "object": "event",
        "timestamp": timestamp,
        "data": {
            "id": user_id,
            "first_name": "Ada",
            "last_name": "Lovelace",
            "primary_email_address_id": "idn_1",
            "email_addresses": [{ "id": "idn_1", "email_address": email }],
            "created_at": 1654012591514i64,
            "updated_at": timestamp
        }
    })
}

/// A Clerk `user.deleted` for `user_id` at `timestamp` (milliseconds).
pub fn user_deleted(user_id: &str, timestamp: i64) -> Value {
    json!({
        "type": "user.deleted",
        "object": "event",
        "timestamp": timestamp,
        "data": { "id": user_id, "object": "user", "deleted": true }
    })
}
