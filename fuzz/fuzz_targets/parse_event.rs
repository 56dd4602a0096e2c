//! Every built-in provider's event format, and the Standard Webhooks one,
//! reading a (verified) body with the headers some providers read the id or
//! type from, and reading it back as an archived delivery; and the payload
//! check (UTF-8, no repeated key) that runs before them.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use webhook_inbox::event::Payload;
use webhook_inbox::providers::{BUILT_IN, format_of};

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
    let Ok(payload) = Payload::from_body(body.to_vec().into()) else { return };
    let names = BUILT_IN.iter().map(|spec| spec.name).chain(["some-standard-sender"]);
    for format in names.map(format_of) {
        let _ = format.read_request(&headers, &payload);
        let _ = format.read_stored("evt_1", "some.type", &payload);
    }
});
