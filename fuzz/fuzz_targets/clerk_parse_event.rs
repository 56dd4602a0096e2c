//! Clerk's event extraction: the id from the `svix-id` header, the rest
//! from the (verified) body.
#![no_main]

use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use webhook_inbox::providers::Provider;
use webhook_inbox::providers::clerk::Clerk;

fuzz_target!(|input: (Vec<u8>, &[u8])| {
    let (id, body) = input;
    let mut headers = HeaderMap::new();
    if let Ok(id) = HeaderValue::from_bytes(&id) {
        headers.insert("svix-id", id);
    }
    let _ = Clerk::new(&[], 300).expect("no secrets").parse_event(&headers, body);
});
