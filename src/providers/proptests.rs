//! Property tests of every built-in verifier and parser, and a Standard
//! Webhooks sender's, on generated input: signing then verifying passes,
//! any single-byte change fails, and nothing panics on arbitrary headers or
//! bodies. (Coverage-guided fuzzing of the same
//! entry points: `fuzz/`.)

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use proptest::prelude::*;
use secrecy::SecretString;
use serde_json::{Map, Value};

use std::sync::Arc;

use super::signature::{SignatureError, hmac_sha256};
use super::standard_sender::StandardWebhooksSender;
use super::{BUILT_IN, Provider, Verified, clerk, github, paddle, standard_sender, stripe};
use crate::event::json::check_unique_keys;
use crate::event::{EventError, Payload};

const TOLERANCE: u64 = 300;

fn paddle(secret: &str) -> Arc<dyn Provider> {
    paddle::SPEC.verifier(&[SecretString::from(secret)], TOLERANCE).unwrap()
}

fn paddle_headers(secret: &str, ts: &str, body: &[u8]) -> HeaderMap {
    let tag = hmac_sha256(secret.as_bytes(), &[ts.as_bytes(), b":", body]);
    headers(&[("paddle-signature", &format!("ts={ts};h1={}", hex::encode(tag)))])
}

fn clerk(key: &[u8]) -> Arc<dyn Provider> {
    let secret = SecretString::from(format!("whsec_{}", STANDARD.encode(key)));
    clerk::SPEC.verifier(&[secret], TOLERANCE).unwrap()
}

fn clerk_headers(key: &[u8], id: &str, ts: &str, body: &[u8]) -> HeaderMap {
    let tag = hmac_sha256(key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body]);
    let signature = format!("v1,{}", STANDARD.encode(tag));
    headers(&[("svix-id", id), ("svix-timestamp", ts), ("svix-signature", &signature)])
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(name, value)| (HeaderName::from_static(name), HeaderValue::from_str(value).unwrap()))
        .collect()
}

/// A header map from arbitrary text, or `None` if HTTP could not carry it.
fn arbitrary_headers(pairs: &[(&'static str, String)]) -> Option<HeaderMap> {
    pairs
        .iter()
        .map(|(name, value)| Some((HeaderName::from_static(name), HeaderValue::from_str(value).ok()?)))
        .collect()
}

fn verified(result: Result<Verified<'_>, SignatureError>) -> Option<usize> {
    result.ok().map(|v| v.secret_index)
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn a_paddle_signature_verifies_and_any_changed_byte_fails(
        secret in "[ -~]{16,48}",
        body in prop::collection::vec(any::<u8>(), 1..512),
        ts in 1i64..4_000_000_000,
        index in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        drift in 1i64..=TOLERANCE as i64,
    ) {
        let verifier = paddle(&secret);
        let signed = paddle_headers(&secret, &ts.to_string(), &body);
        prop_assert_eq!(verified(verifier.verify(&signed, &body, ts)), Some(0));

        let mut tampered = body.clone();
        tampered[index.index(body.len())] ^= flip;
        prop_assert_eq!(verifier.verify(&signed, &tampered, ts).err(), Some(SignatureError::NoMatchingSignature));

        // The same signature under another timestamp inside the window.
        let header = signed["paddle-signature"].to_str().unwrap();
        let moved = header.replacen(&format!("ts={ts}"), &format!("ts={}", ts + drift), 1);
        let moved = headers(&[("paddle-signature", &moved)]);
        prop_assert_eq!(verifier.verify(&moved, &body, ts).err(), Some(SignatureError::NoMatchingSignature));
    }

    #[test]
    fn a_standard_webhooks_signature_verifies_and_any_changed_byte_fails(
        key in prop::collection::vec(any::<u8>(), 24..64),
        id in "msg_[A-Za-z0-9]{1,32}",
        body in prop::collection::vec(any::<u8>(), 1..512),
        ts in 1i64..4_000_000_000,
        index in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        drift in 1i64..=TOLERANCE as i64,
    ) {
        let verifier = clerk(&key);
        let signed = clerk_headers(&key, &id, &ts.to_string(), &body);
        prop_assert_eq!(verified(verifier.verify(&signed, &body, ts)), Some(0));

        let mut tampered = body.clone();
        tampered[index.index(body.len())] ^= flip;
        prop_assert_eq!(verifier.verify(&signed, &tampered, ts).err(), Some(SignatureError::NoMatchingSignature));

        let signature = signed["svix-signature"].to_str().unwrap();
        let other_id = format!("{id}x");
        let later = (ts + drift).to_string();
        for (id, ts) in [(other_id.as_str(), ts.to_string()), (id.as_str(), later)] {
            let changed = headers(&[("svix-id", id), ("svix-timestamp", &ts), ("svix-signature", signature)]);
            prop_assert_eq!(verifier.verify(&changed, &body, ts.parse().unwrap()).err(), Some(SignatureError::NoMatchingSignature));
        }
    }

    #[test]
    fn verifiers_never_panic_on_arbitrary_headers(
        paddle_header in ".{0,300}",
        id in ".{0,40}",
        ts in ".{0,24}",
        signatures in ".{0,300}",
        body in prop::collection::vec(any::<u8>(), 0..64),
        now in any::<i64>(),
    ) {
        if let Some(headers) = arbitrary_headers(&[("paddle-signature", paddle_header)]) {
            let _ = paddle("pdl_ntfset_0123456789").verify(&headers, &body, now);
        }
        let names = [("svix-id", id), ("svix-timestamp", ts), ("svix-signature", signatures)];
        if let Some(headers) = arbitrary_headers(&names) {
            let _ = clerk(b"0123456789abcdef0123456789").verify(&headers, &body, now);
        }
    }

    #[test]
    fn event_parsers_never_panic_on_arbitrary_bodies(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        json in json_value(),
    ) {
        let svix_id = headers(&[("svix-id", "msg_1")]);
        let json = serde_json::to_vec(&json).unwrap();
        for body in [bytes, json] {
            if let Ok(payload) = Payload::from_body(body.into()) {
                for format in BUILT_IN.iter().map(|spec| spec.format).chain([&standard_sender::StandardFormat as _]) {
                    let _ = format.read_request(&svix_id, &payload);
                    let _ = format.read_stored("evt_1", "x", &payload);
                }
            }
        }
    }

    #[test]
    fn serialized_json_has_unique_keys_until_one_is_repeated(
        object in prop::collection::btree_map("[a-z\\\\\"é]{0,6}", json_value(), 1..6),
        nested in json_value(),
    ) {
        let text = serde_json::to_string(&Value::Object(object.clone().into_iter().collect::<Map<_, _>>())).unwrap();
        prop_assert_eq!(check_unique_keys(&text), Ok(()));
        prop_assert_eq!(check_unique_keys(&serde_json::to_string(&nested).unwrap()), Ok(()));

        // The same key again (written with every character escaped, as
        // PostgreSQL would still read it), at the end of the object.
        let key = object.keys().next().unwrap();
        let escaped: String = key.encode_utf16().map(|unit| format!("\\u{unit:04x}")).collect();
        let repeated = format!("{},\"{escaped}\":0}}", &text[..text.len() - 1]);
        prop_assert_eq!(check_unique_keys(&repeated), Err(EventError::DuplicateKey));
    }
}

/// HMAC-SHA256 from the `hmac` crate itself, not through the verifiers'
/// helper, so that signing and verifying do not share code.
fn independent_hmac(key: &[u8], message: &[u8]) -> Vec<u8> {
    use hmac::{Hmac, KeyInit, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

fn stripe(secret: &str) -> Arc<dyn Provider> {
    stripe::SPEC.verifier(&[SecretString::from(secret)], TOLERANCE).unwrap()
}

fn github(secret: &str) -> Arc<dyn Provider> {
    github::SPEC.verifier(&[SecretString::from(secret)], TOLERANCE).unwrap()
}

fn sender(key: &[u8]) -> StandardWebhooksSender {
    let secret = SecretString::from(format!("whsec_{}", STANDARD.encode(key)));
    StandardWebhooksSender::new("acme", &[secret], TOLERANCE).unwrap()
}

/// The `webhook-*` headers a Standard Webhooks sender sends.
fn sender_headers(key: &[u8], id: &str, ts: &str, body: &[u8]) -> HeaderMap {
    let tag = independent_hmac(key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body].concat());
    let signature = format!("v1,{}", STANDARD.encode(tag));
    headers(&[("webhook-id", id), ("webhook-timestamp", ts), ("webhook-signature", &signature)])
}

proptest! {
    #[test]
    fn a_stripe_signature_verifies_and_any_changed_byte_fails(
        secret in "whsec_[A-Za-z0-9]{16,40}",
        body in prop::collection::vec(any::<u8>(), 1..512),
        t in 1i64..4_000_000_000,
        index in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        drift in 1i64..=TOLERANCE as i64,
    ) {
        let verifier = stripe(&secret);
        let tag = independent_hmac(secret.as_bytes(), &[t.to_string().as_bytes(), b".", &body].concat());
        let header = format!("t={t},v1={}", hex::encode(tag));
        let signed = headers(&[("stripe-signature", &header)]);
        prop_assert_eq!(verified(verifier.verify(&signed, &body, t)), Some(0));

        let mut tampered = body.clone();
        tampered[index.index(body.len())] ^= flip;
        prop_assert_eq!(verifier.verify(&signed, &tampered, t).err(), Some(SignatureError::NoMatchingSignature));

        let moved = headers(&[("stripe-signature", &header.replacen(&format!("t={t}"), &format!("t={}", t + drift), 1))]);
        prop_assert_eq!(verifier.verify(&moved, &body, t).err(), Some(SignatureError::NoMatchingSignature));
    }

    #[test]
    fn a_github_signature_verifies_and_any_changed_byte_fails(
        secret in "[ -~]{16,48}",
        body in prop::collection::vec(any::<u8>(), 1..512),
        index in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        now in any::<i64>(),
    ) {
        let verifier = github(&secret);
        let header = format!("sha256={}", hex::encode(independent_hmac(secret.as_bytes(), &body)));
        let signed = headers(&[("x-hub-signature-256", &header)]);
        prop_assert_eq!(verified(verifier.verify(&signed, &body, now)), Some(0));

        let mut tampered = body.clone();
        tampered[index.index(body.len())] ^= flip;
        prop_assert_eq!(verifier.verify(&signed, &tampered, now).err(), Some(SignatureError::NoMatchingSignature));
    }

    #[test]
    fn a_standard_webhooks_sender_signature_verifies_and_any_changed_byte_fails(
        key in prop::collection::vec(any::<u8>(), 24..64),
        id in "msg_[A-Za-z0-9]{1,32}",
        body in prop::collection::vec(any::<u8>(), 1..512),
        ts in 1i64..4_000_000_000,
        index in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        drift in 1i64..=TOLERANCE as i64,
    ) {
        let verifier = sender(&key);
        let signed = sender_headers(&key, &id, &ts.to_string(), &body);
        prop_assert_eq!(verified(verifier.verify(&signed, &body, ts)), Some(0));

        let mut tampered = body.clone();
        tampered[index.index(body.len())] ^= flip;
        prop_assert_eq!(verifier.verify(&signed, &tampered, ts).err(), Some(SignatureError::NoMatchingSignature));

        let signature = signed["webhook-signature"].to_str().unwrap();
        let other_id = format!("{id}x");
        let later = (ts + drift).to_string();
        for (id, ts) in [(other_id.as_str(), ts.to_string()), (id.as_str(), later)] {
            let changed = headers(&[("webhook-id", id), ("webhook-timestamp", &ts), ("webhook-signature", signature)]);
            prop_assert_eq!(verifier.verify(&changed, &body, ts.parse().unwrap()).err(), Some(SignatureError::NoMatchingSignature));
        }
    }

    #[test]
    fn stripe_github_and_sender_verifiers_never_panic_on_arbitrary_headers(
        stripe_header in ".{0,300}",
        github_header in ".{0,300}",
        id in ".{0,40}",
        ts in ".{0,24}",
        signatures in ".{0,300}",
        body in prop::collection::vec(any::<u8>(), 0..64),
        now in any::<i64>(),
    ) {
        if let Some(headers) = arbitrary_headers(&[("stripe-signature", stripe_header)]) {
            let _ = stripe("whsec_0123456789abcdef").verify(&headers, &body, now);
        }
        if let Some(headers) = arbitrary_headers(&[("x-hub-signature-256", github_header)]) {
            let _ = github("github-secret-0123456789").verify(&headers, &body, now);
        }
        let names = [("webhook-id", id), ("webhook-timestamp", ts), ("webhook-signature", signatures)];
        if let Some(headers) = arbitrary_headers(&names) {
            let _ = sender(b"0123456789abcdef0123456789").verify(&headers, &body, now);
        }
    }
}
