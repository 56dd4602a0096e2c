//! `transaction.completed`: the credits of a renewal.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;
use sqlx::PgConnection;
use tracing::instrument;

use super::credits::{self, Grant};
use super::{CustomData, Item, Period, PriceCredits, user_id};
use crate::effects::data;
use crate::event::Event;
use crate::inbox::{Effect, EffectError};

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
    #[instrument(name = "transaction_completed", level = "debug", skip_all)]
    async fn apply(&self, conn: &mut PgConnection, event: &Event) -> Result<(), EffectError> {
        let transaction: Transaction = data(event)?;
        if transaction.origin.as_deref() != Some(RENEWAL) {
            return Ok(());
        }
        let subscription_id = transaction.subscription_id.as_deref().ok_or_else(|| {
            EffectError::Invalid("transaction.completed of a renewal without data.subscription_id".into())
        })?;
        let grant = Grant {
            cause: format!("transaction:{}", transaction.id),
            event_id: &event.id,
            subscription_id,
            user_id: user_id(&transaction.custom_data),
            amount: self.0.for_items(&transaction.items)?,
            period_starts_at: transaction.billing_period.as_ref().map(|p| p.starts_at),
        };
        credits::grant(conn, &grant).await?;
        Ok(())
    }
}
