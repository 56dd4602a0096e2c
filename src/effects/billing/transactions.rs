//! `transaction.completed`: the credits of a renewal.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;

use super::credits::Grant;
use super::{CustomData, Item, Period, PriceCredits};
use crate::effects::data;
use crate::event::Event;
use crate::inbox::{Effect, EffectError, Value, Writes};

/// The origin Paddle gives the transactions it creates to renew a subscription.
const RENEWAL: &str = "subscription_recurring";

/// The part of a Paddle transaction entity the effect reads.
#[derive(Debug, Deserialize)]
struct Transaction<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    origin: Option<Cow<'a, str>>,
    #[serde(borrow)]
    subscription_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    custom_data: Option<CustomData<'a>>,
    #[serde(default, borrow)]
    items: Vec<Item<'a>>,
    billing_period: Option<Period>,
}

/// `transaction.completed`: a completed renewal grants its items' credits,
/// once per transaction (cause `transaction:<id>`) and once per billing
/// period. Every other origin grants nothing: the checkout that starts a
/// subscription is granted by `subscription.created`, and upgrades are not
/// credited here.
pub struct TransactionCompleted(pub Arc<PriceCredits>);

impl Effect for TransactionCompleted {
    fn writes(&self) -> Writes {
        Grant::writes()
    }

    fn input<'e>(&self, event: &'e Event) -> Result<Vec<Value<'e>>, EffectError> {
        let transaction: Transaction = data(event)?;
        if transaction.origin.as_deref() != Some(RENEWAL) {
            return Ok(Grant::none());
        }
        let amount = self.0.for_items(&transaction.items)?;
        let subscription_id = transaction.subscription_id.ok_or_else(|| {
            EffectError::Invalid("transaction.completed of a renewal without data.subscription_id".into())
        })?;
        let grant = Grant {
            cause: format!("transaction:{}", transaction.id),
            event_id: &event.id,
            subscription_id,
            user_id: transaction.custom_data.and_then(|custom| custom.user_id),
            amount,
            period_starts_at: transaction.billing_period.as_ref().map(|p| p.starts_at),
        };
        Ok(grant.input())
    }
}
