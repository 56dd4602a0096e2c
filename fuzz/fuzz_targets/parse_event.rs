//! Every built-in provider's event extraction, and a Standard Webhooks
//! sender's, from a (verified) body and the headers some providers read the
//! id or type from; and the repeated-key check that runs before it.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use webhook_inbox::providers::json::check_unique_keys;
use webhook_inbox::providers::{BUILT_IN, reader};

/// The headers a provider may read an event's id or type from.
const HEADERS: [&str; 4] = ["svix-id", "webhook-id", "x-github-delivery", "x-github-event"];

fuzz_target!(|input: ([Vec<u8>; 4], &[u8])| {
    let (values, body) = input;
    let mut headers = HeaderMap::new();
    for (name, value) in HEADERS.into_iter().zip(values) {
        if let Ok(value) = HeaderValue::from_bytes(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    if let Ok(text) = std::str::from_utf8(body) {
        let _ = check_unique_keys(text);
    }
    let names = BUILT_IN.iter().map(|spec| spec.name).chain(["some-standard-sender"]);
    for provider in names.filter_map(reader) {
        let _ = provider.parse_event(&headers, body);
    }
});
