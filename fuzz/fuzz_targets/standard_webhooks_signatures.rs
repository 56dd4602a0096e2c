//! The Standard Webhooks (Svix) headers: the id, the timestamp and the
//! space-separated `v1,<base64>` signature list, under either naming.
#![no_main]

use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use secrecy::SecretString;
use webhook_inbox::providers::standard_webhooks::StandardWebhooksVerifier;

fuzz_target!(|input: (bool, Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>, i64)| {
    let (svix, id, ts, signatures, body, now) = input;
    let names = if svix {
        ["svix-id", "svix-timestamp", "svix-signature"]
    } else {
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
    };
    let mut headers = HeaderMap::new();
    for (name, value) in names.into_iter().zip([id, ts, signatures]) {
        let Ok(value) = HeaderValue::from_bytes(&value) else { return };
        headers.insert(name, value);
    }
    let secrets = [SecretString::from("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")];
    let verifier = StandardWebhooksVerifier::new(&secrets, 300).expect("valid secret");
    let _ = verifier.verify(&headers, &body, now);
});
