//! Signed requests, built the way each provider builds them.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// The Paddle secrets a test app is configured with (two: rotation).
pub const PADDLE_SECRETS: [&str; 2] = [
    "pdl_ntfset_01hs0t3tw21j988db1pam5xg8m_GrOWLNef+vmtjJYq4mSnHNzvc8uWoJ1I",
    "pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_hKkRiCGyyRhbFwIUuqiTBgI7gnWoV0Gr",
];
/// The Clerk secrets a test app is configured with (two: rotation).
pub const CLERK_SECRETS: [&str; 2] =
    ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"];
/// The Stripe secrets a test app is configured with (two: rolling a secret).
pub const STRIPE_SECRETS: [&str; 2] = ["whsec_test_secret", "whsec_rolled_9fZqXk2Lr1"];
/// The GitHub secrets a test app is configured with (two: rotation).
pub const GITHUB_SECRETS: [&str; 2] = ["It's a Secret to Everybody", "the rotated github secret"];
/// The Standard Webhooks sender every test app has, and its secrets (two: rotation).
pub const STANDARD_SENDER: &str = "acme";
pub const STANDARD_SECRETS: [&str; 2] =
    ["whsec_plJ3nmyCDGBKInavdOK15jsl", "whsec_dGVzdC1zZW5kZXItc2Vjb25kLWtleQ=="];

/// Now, in unix seconds.
pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn hmac(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// A request: path, headers, body. Sent by `TestApp::send`.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Delivery {
    /// Replaces (or adds) a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// The same request to another path.
    pub fn at(mut self, path: &str) -> Self {
        self.path = path.to_string();
        self
    }

    /// Removes a header.
    pub fn without(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }
}

/// The `Paddle-Signature` header value for `body` signed with `secret` at `ts`.
pub fn paddle_signature(secret: &str, ts: i64, body: &[u8]) -> String {
    let message = [format!("{ts}:").as_bytes(), body].concat();
    format!("ts={ts};h1={}", hex::encode(hmac(secret.as_bytes(), &message)))
}

/// A Paddle delivery of `body`, signed now with the first configured secret.
pub fn paddle(body: &Value) -> Delivery {
    paddle_signed(body, PADDLE_SECRETS[0], now())
}

/// A Paddle delivery of `body` signed with `secret` at `ts`.
pub fn paddle_signed(body: &Value, secret: &str, ts: i64) -> Delivery {
    let body = serde_json::to_vec(body).unwrap();
    Delivery {
        path: "/billing/webhook".into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("paddle-signature".into(), paddle_signature(secret, ts, &body)),
        ],
        body,
    }
}

/// The `svix-signature` header value (`v1,<base64>`).
pub fn svix_signature(secret: &str, id: &str, ts: i64, body: &[u8]) -> String {
    let key = STANDARD.decode(secret.trim_start_matches("whsec_")).unwrap();
    let message = [format!("{id}.{ts}.").as_bytes(), body].concat();
    format!("v1,{}", STANDARD.encode(hmac(&key, &message)))
}

/// A Clerk delivery of `body` with message id `id`, signed now with the first secret.
pub fn clerk(id: &str, body: &Value) -> Delivery {
    clerk_signed(id, body, CLERK_SECRETS[0], now())
}

/// A Clerk delivery signed with `secret` at `ts`.
pub fn clerk_signed(id: &str, body: &Value, secret: &str, ts: i64) -> Delivery {
    standard_webhooks_delivery("/account/webhook", "svix", id, body, secret, ts)
}

/// A delivery of `body` to the Standard Webhooks sender `name` with message
/// id `id`, signed now with its first secret.
pub fn standard(name: &str, id: &str, body: &Value) -> Delivery {
    standard_signed(name, id, body, STANDARD_SECRETS[0], now())
}

/// A delivery to the Standard Webhooks sender `name`, signed with `secret` at `ts`.
pub fn standard_signed(name: &str, id: &str, body: &Value, secret: &str, ts: i64) -> Delivery {
    standard_webhooks_delivery(&format!("/webhooks/{name}"), "webhook", id, body, secret, ts)
}

/// A Standard Webhooks request with `<prefix>-id`, `-timestamp` and `-signature` headers.
fn standard_webhooks_delivery(
    path: &str,
    prefix: &str,
    id: &str,
    body: &Value,
    secret: &str,
    ts: i64,
) -> Delivery {
    let body = serde_json::to_vec(body).unwrap();
    Delivery {
        path: path.into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            (format!("{prefix}-id"), id.into()),
            (format!("{prefix}-timestamp"), ts.to_string()),
            (format!("{prefix}-signature"), svix_signature(secret, id, ts, &body)),
        ],
        body,
    }
}

/// The `Stripe-Signature` header value: the secret's text is the key, `<t>.<body>` the message.
pub fn stripe_signature(secret: &str, t: i64, body: &[u8]) -> String {
    let message = [format!("{t}.").as_bytes(), body].concat();
    format!("t={t},v1={}", hex::encode(hmac(secret.as_bytes(), &message)))
}

/// A Stripe delivery of `body`, signed now with the first configured secret.
pub fn stripe(body: &Value) -> Delivery {
    stripe_signed(body, STRIPE_SECRETS[0], now())
}

/// A Stripe delivery of `body` signed with `secret` at `t`.
pub fn stripe_signed(body: &Value, secret: &str, t: i64) -> Delivery {
    let body = serde_json::to_vec(body).unwrap();
    Delivery {
        path: "/webhooks/stripe".into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("stripe-signature".into(), stripe_signature(secret, t, &body)),
        ],
        body,
    }
}

/// The `X-Hub-Signature-256` header value: HMAC of the body alone.
pub fn github_signature(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hex::encode(hmac(secret.as_bytes(), body)))
}

/// A GitHub delivery `delivery_id` of a `event` event, signed with the first secret.
pub fn github(delivery_id: &str, event: &str, body: &Value) -> Delivery {
    github_signed(delivery_id, event, body, GITHUB_SECRETS[0])
}

/// A GitHub delivery signed with `secret`.
pub fn github_signed(delivery_id: &str, event: &str, body: &Value, secret: &str) -> Delivery {
    let body = serde_json::to_vec(body).unwrap();
    Delivery {
        path: "/webhooks/github".into(),
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("x-github-delivery".into(), delivery_id.into()),
            ("x-github-event".into(), event.into()),
            ("x-hub-signature-256".into(), github_signature(secret, &body)),
        ],
        body,
    }
}

/// A Stripe event object `id` of type `event_type`, created at 1700000000.
pub fn stripe_event(id: &str, event_type: &str) -> Value {
    json!({
        "id": id,
        "object": "event",
        "type": event_type,
        "created": 1700000000,
        "livemode": false,
        "data": { "object": { "id": "in_1", "object": "invoice" } }
    })
}

/// A GitHub `issues` payload with action `opened`.
pub fn issue_opened() -> Value {
    json!({
        "action": "opened",
        "issue": { "number": 1347, "title": "Found a bug" },
        "repository": { "full_name": "octocat/Hello-World" }
    })
}

/// A Standard Webhooks payload of the recommended shape.
pub fn standard_event(event_type: &str) -> Value {
    json!({
        "type": event_type,
        "timestamp": "2022-11-03T20:26:10.344522Z",
        "data": { "id": "1f81eb52-5198-4599-803e-771906343485" }
    })
}

/// A Paddle `subscription.created` for `subscription_id`, with 2 × `pri_basic`.
pub fn subscription_created(event_id: &str, subscription_id: &str) -> Value {
    json!({
        "event_id": event_id,
        "event_type": "subscription.created",
        "occurred_at": "2024-04-12T10:18:49.621022Z",
        "notification_id": format!("ntf_{event_id}"),
        "data": {
            "id": subscription_id,
            "status": "active",
            "customer_id": "ctm_01",
            "custom_data": { "user_id": "user_42" },
            "items": [
                { "price": { "id": "pri_basic" }, "quantity": 2, "status": "active" },
                { "price": { "id": "pri_unlisted" }, "quantity": 1, "status": "active" }
            ]
        }
    })
}

/// A Clerk `user.created` for `user_id`.
pub fn user_created(user_id: &str) -> Value {
    json!({
        "type": "user.created",
        "object": "event",
        "timestamp": 1654012591835i64,
        "data": {
            "id": user_id,
            "first_name": "Ada",
            "last_name": "Lovelace",
            "primary_email_address_id": "idn_1",
            "email_addresses": [
                { "id": "idn_0", "email_address": "old@example.com" },
                { "id": "idn_1", "email_address": "ada@example.com" }
            ],
            "created_at": 1654012591514i64
        }
    })
}
