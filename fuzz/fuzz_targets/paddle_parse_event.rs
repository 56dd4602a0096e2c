//! Paddle's event extraction from a (verified) body, and the repeated-key
//! check that runs before it.
#![no_main]

use http::HeaderMap;
use libfuzzer_sys::fuzz_target;
use webhook_inbox::providers::Provider;
use webhook_inbox::providers::json::check_unique_keys;
use webhook_inbox::providers::paddle::Paddle;

fuzz_target!(|body: &[u8]| {
    if let Ok(text) = std::str::from_utf8(body) {
        let _ = check_unique_keys(text);
    }
    let _ = Paddle::new(&[], 300).parse_event(&HeaderMap::new(), body);
});
