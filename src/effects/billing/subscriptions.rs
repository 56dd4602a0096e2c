//! `subscription.*`: the `subscriptions` projection, the initial credits,
//! and the downgrade notice.

use std::borrow::Cow;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgConnection;
use sqlx::types::Json;
use tracing::instrument;

use super::credits::{self, Grant};
use super::{CustomData, Item, Period, PriceCredits, user_id};
use crate::effects::{data, log_stale, ordered_at};
use crate::event::Event;
use crate::inbox::{Effect, EffectError};
use crate::outbox::{self, Email, EmailKind};

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
    scheduled_change: Option<Value>,
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
    #[instrument(name = "subscription_created", level = "debug", skip_all)]
    async fn apply(&self, conn: &mut PgConnection, event: &Event) -> Result<(), EffectError> {
        let subscription: Subscription = data(event)?;
        let id = subscription.id(event)?;
        let amount = self.0.for_items(&subscription.items)?;
        project(conn, event, &subscription).await?;
        let grant = Grant {
            cause: format!("subscription:{id}:initial"),
            event_id: &event.id,
            subscription_id: id,
            user_id: user_id(&subscription.custom_data),
            amount,
            period_starts_at: subscription.current_billing_period.as_ref().map(|p| p.starts_at),
        };
        credits::grant(conn, &grant).await?;
        Ok(())
    }
}

/// Every other `subscription.*` event ([`CHANGES`]): the projection only.
pub struct SubscriptionChanged;

impl Effect for SubscriptionChanged {
    #[instrument(name = "subscription_changed", level = "debug", skip_all)]
    async fn apply(&self, conn: &mut PgConnection, event: &Event) -> Result<(), EffectError> {
        let subscription: Subscription = data(event)?;
        project(conn, event, &subscription).await
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
async fn project(
    conn: &mut PgConnection,
    event: &Event,
    subscription: &Subscription<'_>,
) -> Result<(), EffectError> {
    let id = subscription.id(event)?;
    let at = ordered_at(event, subscription.updated_at);
    let items: Vec<ItemRow<'_>> = subscription
        .items
        .iter()
        .map(|item| ItemRow { price_id: &item.price.id, quantity: item.quantity })
        .collect();
    let period = subscription.current_billing_period.as_ref();
    let applied: Option<(String, Option<String>)> = sqlx::query_as(
        "INSERT INTO subscriptions AS s
             (id, customer_id, user_id, status, items, current_period_starts_at, current_period_ends_at,
              scheduled_change, canceled_at, created_at, last_event_at, last_event_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, COALESCE($10, now()), $11, $12)
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
         -- The ordering guard, in the statement: a concurrent writer of the
         -- same row makes this one wait and then re-check against the row it
         -- committed, so an older event never overwrites a newer one.
         WHERE s.last_event_at < EXCLUDED.last_event_at
         RETURNING status, user_id",
    )
    .bind(id)
    .bind(subscription.customer_id.as_ref())
    .bind(user_id(&subscription.custom_data))
    .bind(subscription.status.as_ref())
    .bind(Json(items))
    .bind(period.map(|p| p.starts_at))
    .bind(period.map(|p| p.ends_at))
    .bind(subscription.scheduled_change.as_ref().filter(|v| !v.is_null()).map(Json))
    .bind(subscription.canceled_at)
    .bind(subscription.created_at)
    .bind(at)
    .bind(event.id.as_str())
    .fetch_optional(&mut *conn)
    .await?;

    match applied {
        None => log_stale(event, "subscription", id),
        // The downgrade happens once per subscription, whichever event
        // (`subscription.canceled`, or an `updated` with status canceled)
        // gets there first: the cause is the subscription, not the event.
        Some((status, user_id)) if status == "canceled" => {
            let notice = Email {
                cause: format!("subscription:{id}:canceled"),
                kind: EmailKind::Downgrade,
                user_id: user_id.as_deref(),
                subscription_id: Some(id),
                event_id: &event.id,
            };
            outbox::enqueue(conn, &notice).await?;
        }
        Some(_) => {}
    }
    Ok(())
}
