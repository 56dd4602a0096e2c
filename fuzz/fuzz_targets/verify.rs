//! Every built-in provider's verifier, configured with a secret, on any
//! values of the signature headers any of them reads, any body, any clock.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use secrecy::SecretString;
use webhook_inbox::providers::BUILT_IN;

const HEADERS: [&str; 9] = [
    "paddle-signature",
    "stripe-signature",
    "x-hub-signature-256",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
];

fuzz_target!(|input: ([Vec<u8>; 9], &[u8], i64)| {
    let (values, body, now) = input;
    let mut headers = HeaderMap::new();
    for (name, value) in HEADERS.into_iter().zip(values) {
        if let Ok(value) = HeaderValue::from_bytes(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    // A secret every scheme accepts: base64 after whsec_ (Svix), text for the others.
    let secrets = [SecretString::from("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")];
    for spec in BUILT_IN {
        let provider = spec.verifier(&secrets, 300).expect("a valid secret");
        let _ = provider.verify(&headers, body, now);
    }
});
