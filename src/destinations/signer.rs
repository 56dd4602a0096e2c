//! Standard Webhooks signing of forwarded events: what lets the team's
//! application verify, with any official Standard Webhooks library, that a
//! request came from this service and was not altered or replayed.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use secrecy::{ExposeSecret, SecretSlice};
use sha2::{Digest, Sha256};

use crate::providers::signature::hmac_sha256;

/// The `webhook-id` of an event's forwards to `destination`: the same for
/// every attempt, replay and replica (it is derived, not stored), and
/// different for each destination, so a receiver can use it to drop the
/// copy it already has.
pub fn message_id(destination: &str, provider: &str, event_id: &str) -> String {
    let digest = Sha256::new()
        .chain_update(destination)
        .chain_update([0])
        .chain_update(provider)
        .chain_update([0])
        .chain_update(event_id)
        .finalize();
    format!("msg_{}", hex::encode(&digest[..16]))
}

/// The `webhook-signature` header: `v1,<base64>` for each key, space
/// separated (during a rotation the receiver may hold either secret), each
/// an HMAC-SHA256 of `<id>.<timestamp>.<body>`.
pub fn signature_header(keys: &[SecretSlice<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    let timestamp = timestamp.to_string();
    keys.iter()
        .map(|key| {
            let tag =
                hmac_sha256(key.expose_secret(), &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body]);
            format!("v1,{}", STANDARD.encode(tag))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_id_is_stable_and_distinct_per_destination_and_event() {
        let id = message_id("app", "paddle", "evt_01");
        assert_eq!(id, message_id("app", "paddle", "evt_01"));
        assert!(id.starts_with("msg_") && id.len() == 36, "{id}");
        assert_ne!(id, message_id("audit", "paddle", "evt_01"));
        assert_ne!(id, message_id("app", "clerk", "evt_01"));
        assert_ne!(message_id("a", "bc", "d"), message_id("ab", "c", "d"), "fields are separated");
    }

    #[test]
    fn the_signature_matches_the_published_standard_webhooks_vectors() {
        // Signing is checked here against the published vectors, and in the
        // integration tests by the `standardwebhooks` crate's verifier.
        for vector in crate::providers::signature::published_vectors("svix") {
            let secret = secrecy::SecretString::from(vector["secret"].as_str().unwrap());
            let key = crate::providers::KeyEncoding::Whsec.key(&secret).unwrap();
            let header = signature_header(
                &[key],
                vector["id"].as_str().unwrap(),
                vector["timestamp"].as_i64().unwrap(),
                vector["body"].as_str().unwrap().as_bytes(),
            );
            // A vector may list other (wrong) signatures beside the right one.
            assert!(vector["signature"].as_str().unwrap().split(' ').any(|s| s == header), "{header}");
        }
    }
}
