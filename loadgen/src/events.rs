//! Signed deliveries, built the way Paddle and Clerk build them.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use clap::ValueEnum;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The provider whose deliveries are sent.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Provider {
    /// `POST /billing/webhook`, `Paddle-Signature`.
    Paddle,
    /// `POST /account/webhook`, Svix headers.
    Clerk,
}

/// One signed request, ready to send.
pub struct SignedRequest {
    /// The event's id, as the service will read it.
    pub event_id: String,
    pub path: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
}

pub fn unix_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// `count` distinct events of about `payload_bytes` each, signed now.
pub fn build(
    provider: Provider,
    event_type: Option<&str>,
    secret: &str,
    run_id: &str,
    count: usize,
    payload_bytes: usize,
) -> anyhow::Result<Vec<SignedRequest>> {
    let ts = (unix_nanos() / 1_000_000_000).to_string();
    let clerk_key = match provider {
        Provider::Clerk => STANDARD.decode(secret.trim_start_matches("whsec_"))?,
        Provider::Paddle => Vec::new(),
    };
    Ok((0..count)
        .map(|i| {
            let event_id = format!("evt_{run_id}_{i:08}");
            match provider {
                Provider::Paddle => {
                    let event_type = event_type.unwrap_or("transaction.updated");
                    let body = paddle_body(&event_id, event_type, payload_bytes);
                    let tag = hmac(secret.as_bytes(), &[ts.as_bytes(), b":", body.as_bytes()]);
                    SignedRequest {
                        event_id,
                        path: "/billing/webhook",
                        headers: vec![("paddle-signature", format!("ts={ts};h1={}", hex::encode(tag)))],
                        body: Bytes::from(body),
                    }
                }
                Provider::Clerk => {
                    let event_type = event_type.unwrap_or("session.created");
                    let body = clerk_body(event_type, payload_bytes);
                    let tag =
                        hmac(&clerk_key, &[event_id.as_bytes(), b".", ts.as_bytes(), b".", body.as_bytes()]);
                    SignedRequest {
                        path: "/account/webhook",
                        headers: vec![
                            ("svix-id", event_id.clone()),
                            ("svix-timestamp", ts.clone()),
                            ("svix-signature", format!("v1,{}", STANDARD.encode(tag))),
                        ],
                        event_id,
                        body: Bytes::from(body),
                    }
                }
            }
        })
        .collect())
}

/// A Paddle notification shaped like a real one, padded with items to about
/// `size` bytes. `subscription.created` gets a subscription entity of its own
/// (id `sub_<event id>`, items priced `pri_bench`), so that each event has a
/// distinct effect; any other type gets a transaction entity.
pub fn paddle_body(event_id: &str, event_type: &str, size: usize) -> String {
    let (entity, item_price) = if event_type == "subscription.created" {
        (
            format!(
                r#""id":"sub_{event_id}","status":"active","customer_id":"ctm_01hv6y1jedq4p1n0yqn5ba3ky4","custom_data":{{"user_id":"user_{event_id}"}},"current_billing_period":{{"starts_at":"2024-04-12T10:18:47.635628Z","ends_at":"2024-05-12T10:18:47.635628Z"}}"#
            ),
            "pri_bench",
        )
    } else {
        (
            r#""id":"txn_01hv8m0mnx3sj85e7gxc6kga03","status":"completed","customer_id":"ctm_01hv6y1jedq4p1n0yqn5ba3ky4","origin":"web","subscription_id":"sub_01hv8x29kz0t586xy6zn1a62ny","currency_code":"USD","collection_mode":"automatic","billed_at":"2024-04-12T10:18:48.294633Z","custom_data":{"user_id":"user_2b6SGHGbCpmPQ5vBGJwhvsb1Ikp"}"#.to_string(),
            "pri_01gsz8x8sawmvhz1pv30nge1ke",
        )
    };
    let mut items = Vec::new();
    loop {
        let body = format!(
            r#"{{"event_id":"{event_id}","event_type":"{event_type}","occurred_at":"2024-04-12T10:18:49.621022Z","notification_id":"ntf_{event_id}","data":{{{entity},"items":[{}]}}}}"#,
            items.join(",")
        );
        if body.len() >= size {
            return body;
        }
        items.push(format!(
            r#"{{"price":{{"id":"{item_price}","product_id":"pro_01gsz4t5hdjse780zja8vvr7jg","description":"Monthly plan {}","unit_price":{{"amount":"3000","currency_code":"USD"}}}},"quantity":1,"status":"active"}}"#,
            items.len()
        ));
    }
}

/// A Clerk event padded to about `size` bytes.
fn clerk_body(event_type: &str, size: usize) -> String {
    let padding = "x".repeat(size.saturating_sub(260));
    format!(
        r#"{{"type":"{event_type}","object":"event","timestamp":1654012591835,"instance_id":"ins_123","data":{{"id":"sess_2b6SGHGbCpmPQ5vBGJwhvsb1Ikp","status":"active","user_id":"user_2b6SGHGbCpmPQ5vBGJwhvsb1Ikp","client_id":"client_2b6","last_active_at":1654012591514,"note":"{padding}"}}}}"#
    )
}
