//! Paddle Billing events: the `subscriptions` projection and the
//! `credit_grants` ledger.

use std::collections::HashMap;
use std::str::FromStr;

use serde::Deserialize;
use sqlx::PgConnection;
use tracing::instrument;

use super::{HandlerError, data};
use crate::event::Event;

/// Credits per unit of each Paddle price id, from `PADDLE_PRICE_CREDITS`
/// (`"pri_a=100,pri_b=500"`). Prices not listed grant nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriceCredits(HashMap<String, i64>);

impl PriceCredits {
    /// Credits for `quantity` units of `price_id`, `None` on overflow.
    fn for_item(&self, price_id: &str, quantity: i64) -> Option<i64> {
        self.0.get(price_id).copied().unwrap_or(0).checked_mul(quantity)
    }
}

impl FromStr for PriceCredits {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                let (price, credits) = entry
                    .split_once('=')
                    .ok_or_else(|| format!("expected price_id=credits, got {entry:?}"))?;
                let credits: i64 = credits
                    .trim()
                    .parse()
                    .ok()
                    .filter(|c| *c >= 0)
                    .ok_or_else(|| format!("credits for {price:?} must be a non-negative integer"))?;
                Ok((price.trim().to_string(), credits))
            })
            .collect::<Result<_, _>>()
            .map(PriceCredits)
    }
}

/// The part of a Paddle subscription entity the handlers use.
#[derive(Debug, Deserialize)]
struct Subscription {
    id: Option<String>,
    status: String,
    customer_id: String,
    custom_data: Option<CustomData>,
    #[serde(default)]
    items: Vec<Item>,
}

#[derive(Debug, Deserialize)]
struct CustomData {
    user_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Item {
    price: Price,
    quantity: i64,
}

#[derive(Debug, Deserialize)]
struct Price {
    id: String,
}

/// `subscription.created`: upserts the subscription and grants the credits
/// of its items once (the dedup row guarantees "once" per event).
#[instrument(skip_all)]
pub async fn subscription_created(
    conn: &mut PgConnection,
    event: &Event<'_>,
    price_credits: &PriceCredits,
) -> Result<(), HandlerError> {
    let subscription: Subscription = data(event)?;
    let id = subscription
        .id
        .as_deref()
        .ok_or_else(|| HandlerError::Invalid("subscription.created without data.id".into()))?;
    let user_id = subscription.custom_data.as_ref().and_then(|c| c.user_id.as_deref());
    let amount = subscription
        .items
        .iter()
        .try_fold(0i64, |sum, item| price_credits.for_item(&item.price.id, item.quantity)?.checked_add(sum));
    let amount = amount.ok_or_else(|| HandlerError::Invalid("credit amount overflows".into()))?;

    sqlx::query(
        "INSERT INTO subscriptions (id, customer_id, user_id, status)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (id) DO UPDATE
         SET customer_id = EXCLUDED.customer_id,
             user_id = COALESCE(EXCLUDED.user_id, subscriptions.user_id),
             status = EXCLUDED.status,
             updated_at = now()",
    )
    .bind(id)
    .bind(&subscription.customer_id)
    .bind(user_id)
    .bind(&subscription.status)
    .execute(&mut *conn)
    .await?;

    if amount > 0 {
        sqlx::query(
            "INSERT INTO credit_grants (event_id, subscription_id, user_id, amount)
             VALUES ($1, $2, $3, $4)",
        )
        .bind(event.id.as_ref())
        .bind(id)
        .bind(user_id)
        .bind(amount)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_credits_parse_from_a_list() {
        let credits: PriceCredits = " pri_a=100, pri_b = 500 ,".parse().unwrap();
        assert_eq!(credits.for_item("pri_a", 3), Some(300));
        assert_eq!(credits.for_item("pri_b", 1), Some(500));
        assert_eq!(credits.for_item("pri_unknown", 9), Some(0));
        assert_eq!(credits.for_item("pri_a", i64::MAX), None);
        assert_eq!("".parse::<PriceCredits>(), Ok(PriceCredits::default()));
        assert!("pri_a".parse::<PriceCredits>().is_err());
        assert!("pri_a=-1".parse::<PriceCredits>().is_err());
        assert!("pri_a=lots".parse::<PriceCredits>().is_err());
    }
}
