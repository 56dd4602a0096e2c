//! The credit ledger: one row per grant, a user's balance is the sum of
//! their rows.

use std::borrow::Cow;

use chrono::{DateTime, Utc};

use crate::inbox::{SqlType, Value, Writes};

/// One grant of credits, and what caused it.
#[derive(Debug)]
pub struct Grant<'e> {
    /// Why the credits are granted (`subscription:<id>:initial`,
    /// `transaction:<id>`): unique in the ledger.
    pub cause: String,
    /// The event that carried the cause.
    pub event_id: &'e str,
    /// The subscription the credits belong to.
    pub subscription_id: Cow<'e, str>,
    /// The user, when the event names one; else the subscription's user.
    pub user_id: Option<Cow<'e, str>>,
    /// Credits granted; none unless positive.
    pub amount: i64,
    /// The billing period granted, when known: each is granted once.
    pub period_starts_at: Option<DateTime<Utc>>,
}

/// Appends each grant of `applied` to the ledger, unless a grant for the
/// same cause, or for the same billing period of the subscription, is
/// already there.
///
/// Why `ON CONFLICT DO NOTHING`: the dedup table already makes each event
/// apply once; the ledger's own unique keys are the second line of defence
/// (another event carrying the same cause, an operator's replay), and a
/// refused duplicate is the expected outcome, not an error.
///
/// The user falls back to the subscription's, read from the table as the
/// statement found it: the same statement's projection never gives a
/// subscription another user unless the event names one, and then the
/// grant names it too.
const GRANTED: &str = "granted AS (
                 INSERT INTO credit_grants (cause, event_id, subscription_id, user_id, amount, period_starts_at)
                 SELECT a.grant_cause, a.grant_event_id, a.grant_subscription_id,
                        COALESCE(a.grant_user_id,
                                 (SELECT s.user_id FROM subscriptions s WHERE s.id = a.grant_subscription_id)),
                        a.grant_amount, a.grant_period_starts_at
                 FROM applied a
                 WHERE a.grant_amount > 0
                 ORDER BY a.grant_cause
                 ON CONFLICT DO NOTHING
                 RETURNING cause
             )";

/// A grant the ledger refused: said, not failed.
const REFUSED: &str =
    "SELECT a.n, 'credits for ' || a.grant_cause || ' or its period already granted; not granted again'
             FROM applied a
             WHERE a.grant_amount > 0 AND a.grant_cause NOT IN (SELECT cause FROM granted)";

impl<'e> Grant<'e> {
    /// The ledger's part of an effect: its input columns, `grant_*`.
    pub fn writes() -> Writes {
        Writes {
            input: vec![
                ("grant_cause", SqlType::Text),
                ("grant_event_id", SqlType::Text),
                ("grant_subscription_id", SqlType::Text),
                ("grant_user_id", SqlType::Text),
                ("grant_amount", SqlType::Int8),
                ("grant_period_starts_at", SqlType::Timestamptz),
            ],
            ctes: vec![GRANTED.into()],
            notes: vec![REFUSED.into()],
        }
    }

    /// The grant's values, in the order of [`Grant::writes`].
    pub fn input(self) -> Vec<Value<'e>> {
        vec![
            self.cause.into(),
            self.event_id.into(),
            self.subscription_id.into(),
            self.user_id.into(),
            self.amount.into(),
            self.period_starts_at.into(),
        ]
    }

    /// The values of no grant, for an event that grants nothing.
    pub fn none() -> Vec<Value<'e>> {
        vec![
            Value::Text(None),
            Value::Text(None),
            Value::Text(None),
            Value::Text(None),
            0i64.into(),
            Value::Timestamptz(None),
        ]
    }
}
