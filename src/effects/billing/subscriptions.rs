//! `subscription.*`: the `subscriptions` projection, the initial credits,
//! and the downgrade notice.

use std::borrow::Cow;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::credits::Grant;
use super::{CustomData, Item, Period, PriceCredits};
use crate::effects::{data, ordered_at};
use crate::event::Event;
use crate::inbox::{Effect, EffectError, SqlType, Value, Writes};
use crate::outbox::{self, EmailKind};

/// The part of a Paddle subscription entity the projection keeps.
#[derive(Debug, Deserialize)]
struct Subscription<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(borrow)]
    customer_id: Cow<'a, str>,
    #[serde(borrow)]
    custom_data: Option<CustomData<'a>>,
    #[serde(default, borrow)]
    items: Vec<Item<'a>>,
    current_billing_period: Option<Period>,
    scheduled_change: Option<serde_json::Value>,
    canceled_at: Option<DateTime<Utc>>,
    created_at: Option<DateTime<Utc>>,
    updated_at: Option<DateTime<Utc>>,
}

impl Subscription<'_> {
    fn id(&self, event: &Event) -> Result<&str, EffectError> {
        self.id
            .as_deref()
            .ok_or_else(|| EffectError::Invalid(format!("{} without data.id", event.event_type)))
    }
}

/// Every `subscription.*` type other than `created` that carries the
/// subscription entity.
pub const CHANGES: [&str; 7] = [
    "subscription.updated",
    "subscription.activated",
    "subscription.trialing",
    "subscription.past_due",
    "subscription.paused",
    "subscription.resumed",
    "subscription.canceled",
];

/// `subscription.created`: the projection, and the credits of the items it
/// was created with, once per subscription (cause `subscription:<id>:initial`),
/// even when a newer event already wrote the projection.
pub struct SubscriptionCreated(pub Arc<PriceCredits>);

impl Effect for SubscriptionCreated {
    fn writes(&self) -> Writes {
        projection().and(Grant::writes())
    }

    fn input<'e>(&self, event: &'e Event) -> Result<Vec<Value<'e>>, EffectError> {
        let subscription: Subscription = data(event)?;
        let cause = format!("subscription:{}:initial", subscription.id(event)?);
        let amount = self.0.for_items(&subscription.items)?;
        let grant = Grant {
            cause,
            event_id: &event.id,
            subscription_id: subscription.id.clone().unwrap_or_default(),
            user_id: subscription.custom_data.as_ref().and_then(|custom| custom.user_id.clone()),
            amount,
            period_starts_at: subscription.current_billing_period.as_ref().map(|p| p.starts_at),
        };
        let mut input = projected(event, subscription)?;
        input.extend(grant.input());
        Ok(input)
    }
}

/// Every other `subscription.*` event ([`CHANGES`]): the projection only.
pub struct SubscriptionChanged;

impl Effect for SubscriptionChanged {
    fn writes(&self) -> Writes {
        projection()
    }

    fn input<'e>(&self, event: &'e Event) -> Result<Vec<Value<'e>>, EffectError> {
        projected(event, data(event)?)
    }
}

/// One of the projection's `items`, as stored: `{"price_id", "quantity"}`.
#[derive(Serialize)]
struct ItemRow<'a> {
    price_id: &'a str,
    quantity: i64,
}

/// Writes the projection if the event is newer than what wrote it last, and
/// enqueues the downgrade notice when the subscription ends up canceled.
///
/// The ordering guard is in the statement: a concurrent writer of the same
/// row makes this one wait and then re-check against the row it committed,
/// so an older event never overwrites a newer one.
const PROJECTED: &str = "projected_subscriptions AS (
                 INSERT INTO subscriptions AS s
                     (id, customer_id, user_id, status, items, current_period_starts_at, current_period_ends_at,
                      scheduled_change, canceled_at, created_at, last_event_at, last_event_id)
                 SELECT a.subscription_id, a.customer_id, a.user_id, a.status, a.items, a.period_starts_at,
                        a.period_ends_at, a.scheduled_change, a.canceled_at, COALESCE(a.created_at, now()),
                        a.ordered_at, a.event_id
                 FROM applied a
                 ORDER BY a.subscription_id
                 ON CONFLICT (id) DO UPDATE
                 SET customer_id = EXCLUDED.customer_id,
                     user_id = COALESCE(EXCLUDED.user_id, s.user_id),
                     -- Canceled is final (Paddle cannot reactivate a canceled
                     -- subscription): no event moves the status out of it, not even
                     -- one with an equal timestamp.
                     status = CASE WHEN s.status = 'canceled' THEN s.status ELSE EXCLUDED.status END,
                     canceled_at = CASE WHEN s.status = 'canceled' THEN s.canceled_at ELSE EXCLUDED.canceled_at END,
                     items = EXCLUDED.items,
                     current_period_starts_at = EXCLUDED.current_period_starts_at,
                     current_period_ends_at = EXCLUDED.current_period_ends_at,
                     scheduled_change = EXCLUDED.scheduled_change,
                     updated_at = now(),
                     last_event_at = EXCLUDED.last_event_at,
                     last_event_id = EXCLUDED.last_event_id
                 WHERE s.last_event_at < EXCLUDED.last_event_at
                 RETURNING id, status, user_id, last_event_id
             )";

/// The downgrade happens once per subscription, whichever event
/// (`subscription.canceled`, or an `updated` with status canceled) gets
/// there first: the cause is the subscription, not the event.
const CANCELED: &str = "SELECT 'subscription:' || p.id || ':canceled' AS cause, p.user_id,
                        p.id AS subscription_id, p.last_event_id AS event_id
                 FROM projected_subscriptions p WHERE p.status = 'canceled'";

/// An event older than the projection: said, not failed.
const STALE: &str =
    "SELECT a.n, 'stale event: subscription ' || a.subscription_id || ' is already newer; nothing changed'
             FROM applied a
             WHERE a.subscription_id NOT IN (SELECT id FROM projected_subscriptions)";

/// The projection's part of an effect: its input columns and writes.
fn projection() -> Writes {
    Writes {
        input: vec![
            ("subscription_id", SqlType::Text),
            ("customer_id", SqlType::Text),
            ("user_id", SqlType::Text),
            ("status", SqlType::Text),
            ("items", SqlType::Jsonb),
            ("period_starts_at", SqlType::Timestamptz),
            ("period_ends_at", SqlType::Timestamptz),
            ("scheduled_change", SqlType::Jsonb),
            ("canceled_at", SqlType::Timestamptz),
            ("created_at", SqlType::Timestamptz),
            ("ordered_at", SqlType::Timestamptz),
            ("event_id", SqlType::Text),
        ],
        ctes: vec![PROJECTED.into(), outbox::enqueue("downgrade", EmailKind::Downgrade, CANCELED)],
        notes: vec![STALE.into()],
    }
}

/// The projection's values for `subscription`, in the order of [`projection`].
fn projected<'e>(event: &'e Event, subscription: Subscription<'e>) -> Result<Vec<Value<'e>>, EffectError> {
    subscription.id(event)?;
    let at = ordered_at(event, subscription.updated_at);
    let items: Vec<ItemRow<'_>> = subscription
        .items
        .iter()
        .map(|item| ItemRow { price_id: &item.price.id, quantity: item.quantity })
        .collect();
    let items = serde_json::to_string(&items).map_err(|e| EffectError::Invalid(e.to_string()))?;
    let period = subscription.current_billing_period.as_ref();
    let scheduled_change =
        subscription.scheduled_change.as_ref().filter(|v| !v.is_null()).map(serde_json::Value::to_string);
    Ok(vec![
        subscription.id.into(),
        subscription.customer_id.into(),
        subscription.custom_data.and_then(|custom| custom.user_id).into(),
        subscription.status.into(),
        items.into(),
        period.map(|p| p.starts_at).into(),
        period.map(|p| p.ends_at).into(),
        scheduled_change.into(),
        subscription.canceled_at.into(),
        subscription.created_at.into(),
        at.into(),
        event.id.as_str().into(),
    ])
}
