//! The key a destination with `ordering = "key"` delivers one event at a
//! time by, in the order recorded: per provider, a JSON pointer (RFC 6901)
//! into the event's body, declared as `ordering_key`:
//!
//! ```toml
//! ordering = "key"
//! ordering_key = { paddle = "/data/customer_id", clerk = "/data/id" }
//! ```
//!
//! Defaults, for a provider the table does not name: the customer, where
//! the billing races are (a Paddle `subscription.created` and the first
//! `transaction.completed` of that subscription arrive within
//! milliseconds; Stripe's `customer.subscription.created` and
//! `invoice.paid` race the same way):
//!
//! | provider | default key |
//! |---|---|
//! | Paddle | `/data/customer_id` |
//! | Stripe | `/data/object/customer` |
//! | any other | none: its events are delivered unordered |
//!
//! A pointer reaches into `data`, the part of every provider's event the
//! inbox keeps (it must start with `/data/`). An event whose pointer finds
//! no string or integer, or one that is not a plain identifier, is
//! delivered unordered, never held up.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::event::MAX_IDENTIFIER_LEN;

/// Where the key is when the declaration does not say (see the module's doc).
const DEFAULTS: [(&str, &str); 2] = [("paddle", "/data/customer_id"), ("stripe", "/data/object/customer")];

/// The part of the event body a pointer must start with.
const DATA: &str = "/data";

/// The longest pointer accepted: far beyond any provider's nesting.
const MAX_POINTER_LEN: usize = 256;

/// A destination's pointers, per provider, defaults included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderingKey {
    /// Provider → pointer within `data` (what follows `/data`).
    pointers: BTreeMap<String, String>,
    /// The providers the declaration names, in its order.
    declared: Vec<String>,
}

/// Why a declared pointer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPointer {
    /// Not into `data`.
    #[error("{0:?} is not a JSON pointer into the event's data, like \"/data/customer_id\"")]
    NotIntoData(String),
    /// A `~` not followed by `0` or `1` (RFC 6901's only escapes).
    #[error("{0:?} has a `~` that is not `~0` or `~1` (RFC 6901)")]
    BadEscape(String),
    /// Too long.
    #[error("a pointer is at most {MAX_POINTER_LEN} bytes")]
    TooLong,
}

impl OrderingKey {
    /// The defaults, overridden or extended by `declared` (provider → pointer).
    pub fn new<'a>(
        declared: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<OrderingKey, (String, InvalidPointer)> {
        let mut pointers: BTreeMap<String, String> = DEFAULTS
            .iter()
            .map(|(provider, pointer)| (provider.to_string(), pointer[DATA.len()..].into()))
            .collect();
        let mut names = Vec::new();
        for (provider, pointer) in declared {
            let within = within_data(pointer).map_err(|invalid| (provider.to_string(), invalid))?;
            pointers.insert(provider.to_string(), within.to_string());
            names.push(provider.to_string());
        }
        Ok(OrderingKey { pointers, declared: names })
    }

    /// The providers the declaration names (not the defaults'): each must
    /// be configured.
    pub fn declared_providers(&self) -> impl Iterator<Item = &str> {
        self.declared.iter().map(String::as_str)
    }

    /// `<provider>:<value>` for an event of `provider` whose `data` is `data`, or `None`.
    pub fn key(&self, provider: &str, data: &Value) -> Option<String> {
        let value = data.pointer(self.pointers.get(provider)?)?;
        match value {
            Value::String(text) => plain_key(provider, text),
            Value::Number(number) if number.is_i64() || number.is_u64() => {
                plain_key(provider, &number.to_string())
            }
            _ => None,
        }
    }
}

/// `<provider>:<id>` when `id` is a plain identifier: stored as text and
/// shown to operators, so not empty, not too long, no control character.
pub fn plain_key(provider: &str, id: &str) -> Option<String> {
    let plain = !id.is_empty() && id.len() <= MAX_IDENTIFIER_LEN && !id.chars().any(char::is_control);
    plain.then(|| format!("{provider}:{id}"))
}

/// What follows `/data` in `pointer`, once checked.
fn within_data(pointer: &str) -> Result<&str, InvalidPointer> {
    if pointer.len() > MAX_POINTER_LEN {
        return Err(InvalidPointer::TooLong);
    }
    let within = pointer
        .strip_prefix(DATA)
        .filter(|within| within.starts_with('/'))
        .ok_or_else(|| InvalidPointer::NotIntoData(pointer.to_string()))?;
    let mut rest = within;
    while let Some(at) = rest.find('~') {
        rest = &rest[at + 1..];
        if !(rest.starts_with('0') || rest.starts_with('1')) {
            return Err(InvalidPointer::BadEscape(pointer.to_string()));
        }
    }
    Ok(within)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ordering: &OrderingKey, provider: &str, data: &str) -> Option<String> {
        ordering.key(provider, &serde_json::from_str(data).unwrap())
    }

    #[test]
    fn the_defaults_order_billing_events_by_customer() {
        let defaults = OrderingKey::new([]).unwrap();
        let paddle = r#"{"id":"txn_1","customer_id":"ctm_1","subscription_id":"sub_1"}"#;
        assert_eq!(key(&defaults, "paddle", paddle).as_deref(), Some("paddle:ctm_1"));
        let stripe = r#"{"object":{"id":"in_1","customer":"cus_1"}}"#;
        assert_eq!(key(&defaults, "stripe", stripe).as_deref(), Some("stripe:cus_1"));
        assert_eq!(key(&defaults, "clerk", r#"{"id":"user_1"}"#), None, "no default for Clerk");
        assert_eq!(defaults.declared_providers().count(), 0);
    }

    #[test]
    fn declared_pointers_override_and_extend_the_defaults() {
        let declared = OrderingKey::new([
            ("paddle", "/data/subscription_id"),
            ("clerk", "/data/id"),
            ("acme", "/data/a~1b/0"),
        ])
        .unwrap();
        assert_eq!(
            key(&declared, "paddle", r#"{"customer_id":"ctm_1","subscription_id":"sub_1"}"#).as_deref(),
            Some("paddle:sub_1")
        );
        assert_eq!(key(&declared, "clerk", r#"{"id":"user_1"}"#).as_deref(), Some("clerk:user_1"));
        assert_eq!(key(&declared, "acme", r#"{"a/b":[7]}"#).as_deref(), Some("acme:7"), "escapes, indices");
        assert_eq!(
            key(&declared, "stripe", r#"{"object":{"customer":"cus_1"}}"#).as_deref(),
            Some("stripe:cus_1")
        );
        assert_eq!(declared.declared_providers().collect::<Vec<_>>(), ["paddle", "clerk", "acme"]);
    }

    #[test]
    fn events_without_a_plain_key_have_none() {
        let defaults = OrderingKey::new([]).unwrap();
        for data in [
            r#"{"id":"txn_1"}"#,
            r#"{"customer_id":null}"#,
            r#"{"customer_id":""}"#,
            r#"{"customer_id":1.5}"#,
            r#"{"customer_id":{"id":"ctm_1"}}"#,
            r#"{"customer_id":"a\u0000b"}"#,
            "[1]",
        ] {
            assert_eq!(key(&defaults, "paddle", data), None, "{data}");
        }
        let long = format!(r#"{{"customer_id":"{}"}}"#, "x".repeat(256));
        assert_eq!(key(&defaults, "paddle", &long), None);
    }

    #[test]
    fn malformed_pointers_are_refused() {
        for (pointer, expected) in [
            ("/customer_id", InvalidPointer::NotIntoData("/customer_id".into())),
            ("data.customer_id", InvalidPointer::NotIntoData("data.customer_id".into())),
            ("/data", InvalidPointer::NotIntoData("/data".into())),
            ("/datax/id", InvalidPointer::NotIntoData("/datax/id".into())),
            ("/data/a~2b", InvalidPointer::BadEscape("/data/a~2b".into())),
            ("/data/a~", InvalidPointer::BadEscape("/data/a~".into())),
        ] {
            assert_eq!(
                OrderingKey::new([("paddle", pointer)]),
                Err(("paddle".into(), expected)),
                "{pointer}"
            );
        }
        let long = format!("/data/{}", "x".repeat(MAX_POINTER_LEN));
        assert_eq!(
            OrderingKey::new([("paddle", long.as_str())]),
            Err(("paddle".into(), InvalidPointer::TooLong))
        );
    }
}
