//! The repeated-key check, with serde_json as the oracle: on text serde_json
//! reads, a key is repeated exactly when the object entries as written
//! outnumber those a map keeps (a map keeps one entry per key).
#![no_main]

use std::fmt;

use libfuzzer_sys::fuzz_target;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use webhook_inbox::event::json::check_unique_keys;

/// The number of object entries in a JSON text, repeated keys included.
struct Written(usize);

impl<'de> Deserialize<'de> for Written {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Count)
    }
}

struct Count;

impl<'de> Visitor<'de> for Count {
    type Value = Written;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Written, A::Error> {
        let mut entries = 0;
        while let Some((IgnoredAny, Written(nested))) = map.next_entry()? {
            entries += 1 + nested;
        }
        Ok(Written(entries))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Written, A::Error> {
        let mut entries = 0;
        while let Some(Written(nested)) = seq.next_element()? {
            entries += nested;
        }
        Ok(Written(entries))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Written, E> {
        Ok(Written(0))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Written, E> {
        Ok(Written(0))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Written, E> {
        Ok(Written(0))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Written, E> {
        Ok(Written(0))
    }
    fn visit_str<E>(self, _: &str) -> Result<Written, E> {
        Ok(Written(0))
    }
    fn visit_unit<E>(self) -> Result<Written, E> {
        Ok(Written(0))
    }
}

/// The number of object entries a map keeps.
fn kept(value: &Value) -> usize {
    match value {
        Value::Object(map) => map.len() + map.values().map(kept).sum::<usize>(),
        Value::Array(items) => items.iter().map(kept).sum(),
        _ => 0,
    }
}

fuzz_target!(|text: &str| {
    let unique = check_unique_keys(text).is_ok();
    if let (Ok(value), Ok(Written(written))) =
        (serde_json::from_str::<Value>(text), serde_json::from_str::<Written>(text))
    {
        assert_eq!(unique, written == kept(&value), "{text:?}");
    }
});
