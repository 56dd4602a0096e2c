//! Paddle Billing: the `subscriptions` projection and the `credit_grants`
//! ledger.
//!
//! Credits are granted once per cause: `subscription.created` grants the
//! subscription's items (cause `subscription:<id>:initial`); a
//! `transaction.completed` whose origin is `subscription_recurring` (a
//! renewal) grants the transaction's items (cause `transaction:<id>`). The
//! checkout transaction that starts a subscription has another origin
//! (`web`, `api`) and grants nothing, and the ledger grants a subscription's
//! billing period at most once, so the first payment never doubles the
//! credits of `subscription.created`.

pub mod credits;
pub mod subscriptions;
pub mod transactions;

use std::borrow::Cow;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::config;
use crate::inbox::{EffectError, RoutingTable};
use crate::providers::paddle;
use subscriptions::{SubscriptionChanged, SubscriptionCreated};
use transactions::TransactionCompleted;

/// Paddle's events with effects here: subscriptions and renewals.
pub fn register(routing: RoutingTable, price_credits: PriceCredits) -> RoutingTable {
    let price_credits = Arc::new(price_credits);
    routing
        .on(paddle::NAME, "subscription.created", SubscriptionCreated(price_credits.clone()))
        .on_each(paddle::NAME, &subscriptions::CHANGES, SubscriptionChanged)
        .on(paddle::NAME, "transaction.completed", TransactionCompleted(price_credits))
}

/// Credits per unit of each Paddle price id, from `PADDLE_PRICE_CREDITS`
/// (`"pri_a=100,pri_b=500"`; `pri_c=0` for a price that grants nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriceCredits(HashMap<String, i64>);

impl PriceCredits {
    /// True when no price is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Credits for `quantity` units of `price_id`.
    ///
    /// Why a price that is not listed is an error, not zero: granting
    /// nothing would record the event PROCESSED, and the credits could then
    /// only be added by hand. Failing leaves it FAILED and unapplied, so the
    /// provider's retry or a reprocess applies it once the map lists it.
    fn for_item(&self, price_id: &str, quantity: i64) -> Result<i64, EffectError> {
        let per_unit = self.0.get(price_id).ok_or_else(|| {
            EffectError::Invalid(format!(
                "price {price_id} has no entry in PADDLE_PRICE_CREDITS (list it, as {price_id}=0 if it grants \
                 no credits, then reprocess)"
            ))
        })?;
        per_unit.checked_mul(quantity).ok_or_else(overflow)
    }

    /// Credits for a list of items: the sum of quantity × credits per unit.
    fn for_items(&self, items: &[Item<'_>]) -> Result<i64, EffectError> {
        items.iter().try_fold(0i64, |sum, item| {
            self.for_item(&item.price.id, item.quantity)?.checked_add(sum).ok_or_else(overflow)
        })
    }
}

fn overflow() -> EffectError {
    EffectError::Invalid("credit amount overflows".into())
}

impl From<HashMap<String, i64>> for PriceCredits {
    fn from(credits: HashMap<String, i64>) -> Self {
        PriceCredits(credits)
    }
}

impl FromStr for PriceCredits {
    type Err = String;

    /// As `PADDLE_PRICE_CREDITS` is read ([`config::price_credits`]).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        config::price_credits(text).map(PriceCredits)
    }
}

// The entities' strings borrow from the payload (`Cow`: unless escaped),
// so reading one copies none of them.

/// `custom_data`, where the checkout put our user id.
#[derive(Debug, Deserialize)]
struct CustomData<'a> {
    #[serde(borrow)]
    user_id: Option<Cow<'a, str>>,
}

/// One line of a subscription or transaction: a price and a quantity.
#[derive(Debug, Deserialize)]
struct Item<'a> {
    #[serde(borrow)]
    price: Price<'a>,
    quantity: i64,
}

#[derive(Debug, Deserialize)]
struct Price<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
}

/// A billing period (`current_billing_period`, `billing_period`).
#[derive(Debug, Deserialize)]
struct Period {
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_credits_parse_from_a_list() {
        let credits: PriceCredits = " pri_a=100, pri_b = 500 ,pri_c=0".parse().unwrap();
        assert_eq!(credits.for_item("pri_a", 3).unwrap(), 300);
        assert_eq!(credits.for_item("pri_b", 1).unwrap(), 500);
        assert_eq!(credits.for_item("pri_c", 9).unwrap(), 0);
        let unlisted = credits.for_item("pri_unknown", 9).unwrap_err().to_string();
        assert!(unlisted.contains("pri_unknown") && unlisted.contains("PADDLE_PRICE_CREDITS"), "{unlisted}");
        assert_eq!(credits.for_item("pri_a", i64::MAX).unwrap_err().to_string(), "credit amount overflows");
        assert_eq!("".parse::<PriceCredits>(), Ok(PriceCredits::default()));
        assert!("pri_a".parse::<PriceCredits>().is_err());
        assert!("pri_a=-1".parse::<PriceCredits>().is_err());
        assert!("pri_a=lots".parse::<PriceCredits>().is_err());
    }

    #[test]
    fn items_sum_and_overflow_is_refused() {
        let credits: PriceCredits = "pri_a=100,pri_b=7,pri_x=0".parse().unwrap();
        let item = |id: &'static str, quantity| Item { price: Price { id: id.into() }, quantity };
        assert_eq!(credits.for_items(&[item("pri_a", 2), item("pri_b", 1), item("pri_x", 5)]).unwrap(), 207);
        assert_eq!(credits.for_items(&[]).unwrap(), 0);
        assert!(credits.for_items(&[item("pri_a", 1), item("pri_y", 1)]).is_err());
        assert!(credits.for_items(&[item("pri_a", i64::MAX / 100), item("pri_a", i64::MAX / 100)]).is_err());
    }
}
