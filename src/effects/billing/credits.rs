//! The credit ledger: one row per grant, a user's balance is the sum of
//! their rows.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tracing::instrument;

/// One grant of credits, and what caused it.
#[derive(Debug)]
pub struct Grant<'a> {
    /// Why the credits are granted (`subscription:<id>:initial`,
    /// `transaction:<id>`): unique in the ledger.
    pub cause: String,
    /// The event that carried the cause.
    pub event_id: &'a str,
    /// The subscription the credits belong to.
    pub subscription_id: &'a str,
    /// The user, when the event names one; else the subscription's user.
    pub user_id: Option<&'a str>,
    /// Credits granted, positive.
    pub amount: i64,
    /// The billing period granted, when known: each is granted once.
    pub period_starts_at: Option<DateTime<Utc>>,
}

/// Appends `grant` to the ledger unless a grant for the same cause, or for
/// the same billing period of the subscription, is already there. Returns
/// whether it was appended.
///
/// Why `ON CONFLICT DO NOTHING`: the dedup table already makes each event
/// apply once; the ledger's own unique keys are the second line of defence
/// (another event carrying the same cause, an operator's replay), and a
/// refused duplicate is the expected outcome, not an error.
#[instrument(level = "debug", skip_all)]
pub async fn grant(conn: &mut PgConnection, grant: &Grant<'_>) -> sqlx::Result<bool> {
    if grant.amount <= 0 {
        return Ok(false);
    }
    let appended = sqlx::query(
        "INSERT INTO credit_grants (cause, event_id, subscription_id, user_id, amount, period_starts_at)
         SELECT $1, $2, $3, COALESCE($4, (SELECT user_id FROM subscriptions WHERE id = $3)), $5, $6
         ON CONFLICT DO NOTHING",
    )
    .bind(&grant.cause)
    .bind(grant.event_id)
    .bind(grant.subscription_id)
    .bind(grant.user_id)
    .bind(grant.amount)
    .bind(grant.period_starts_at)
    .execute(conn)
    .await?
    .rows_affected()
        == 1;
    if !appended {
        tracing::info!(cause = %grant.cause, "credits for this cause or period already granted; not granted again");
    }
    Ok(appended)
}
