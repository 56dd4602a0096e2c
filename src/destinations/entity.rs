//! The entity an event is about, which destinations with `ordering =
//! "entity"` deliver one event at a time, in the order recorded:
//!
//! | provider | entity |
//! |---|---|
//! | Paddle | `data.id`: the subscription, transaction, customer (...) the notification is about |
//! | Clerk | the user: `data.id` of `user.*` events, `data.user_id` of the others (sessions, ...) |
//! | Stripe | `data.object.id`: the object the event is about |
//! | GitHub, Standard Webhooks senders | none: their events are delivered unordered |
//!
//! An event without one (or with an id that is not a plain identifier) is
//! delivered unordered too, never held up.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::ordering_key::plain_key;

/// `<provider>:<entity id>` for the event of `event_type` whose `data` is
/// `data`, or `None`.
pub fn entity(provider: &str, event_type: &str, data: Option<&RawValue>) -> Option<String> {
    let data: Data<'_> = serde_json::from_str(data?.get()).ok()?;
    let id = match provider {
        "paddle" => data.id,
        "clerk" if event_type.starts_with("user.") => data.id,
        "clerk" => data.user_id,
        "stripe" => serde_json::from_str::<Data<'_>>(data.object?.get()).ok()?.id,
        _ => None,
    }?;
    plain_key(provider, &id)
}

#[derive(Deserialize)]
struct Data<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    user_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(provider: &str, event_type: &str, data: &str) -> Option<String> {
        entity(provider, event_type, Some(&RawValue::from_string(data.into()).unwrap()))
    }

    #[test]
    fn each_provider_names_its_entity() {
        assert_eq!(
            of("paddle", "subscription.updated", r#"{"id":"sub_1","x":[1]}"#).as_deref(),
            Some("paddle:sub_1")
        );
        assert_eq!(of("paddle", "transaction.paid", r#"{"id":"txn_1"}"#).as_deref(), Some("paddle:txn_1"));
        assert_eq!(of("clerk", "user.updated", r#"{"id":"user_1"}"#).as_deref(), Some("clerk:user_1"));
        assert_eq!(
            of("clerk", "session.created", r#"{"id":"sess_1","user_id":"user_1"}"#).as_deref(),
            Some("clerk:user_1")
        );
        assert_eq!(
            of("stripe", "invoice.paid", r#"{"object":{"id":"in_1"}}"#).as_deref(),
            Some("stripe:in_1")
        );
        assert_eq!(of("github", "push", r#"{"id":"x"}"#), None);
        assert_eq!(of("acme", "contact.created", r#"{"id":"c_1"}"#), None);
    }

    #[test]
    fn events_without_a_plain_entity_id_have_none() {
        assert_eq!(entity("paddle", "subscription.updated", None), None);
        assert_eq!(of("paddle", "subscription.updated", r#"{"name":"x"}"#), None);
        assert_eq!(of("paddle", "subscription.updated", r#"{"id":7}"#), None);
        assert_eq!(of("paddle", "subscription.updated", r#"{"id":""}"#), None);
        assert_eq!(of("paddle", "subscription.updated", r#"{"id":"a\u0000b"}"#), None);
        assert_eq!(of("paddle", "subscription.updated", &format!(r#"{{"id":"{}"}}"#, "x".repeat(256))), None);
        assert_eq!(of("paddle", "subscription.updated", "[1]"), None);
        assert_eq!(of("clerk", "session.created", r#"{"id":"sess_1"}"#), None);
    }
}
