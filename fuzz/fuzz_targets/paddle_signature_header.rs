//! The `Paddle-Signature` header parser (`ts=...;h1=...`), reached through
//! Paddle's verifier as a request reaches it: any header bytes HTTP can
//! carry, any body, any clock.
#![no_main]

use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use secrecy::SecretString;
use webhook_inbox::providers::paddle;

fuzz_target!(|input: (Vec<u8>, Vec<u8>, i64)| {
    let (header, body, now) = input;
    let Ok(value) = HeaderValue::from_bytes(&header) else { return };
    let mut headers = HeaderMap::new();
    headers.insert("paddle-signature", value);
    let paddle =
        paddle::SPEC.verifier(&[SecretString::from("pdl_ntfset_fuzz_0123456789")], 300).expect("a valid secret");
    let _ = paddle.verify(&headers, &body, now);
});
