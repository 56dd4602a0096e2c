//! One step of a queue's loop: in one transaction on the engine's kept
//! connection, give back the rows that must not go, record every send that
//! ended since the last step, and claim the next rows.
//!
//! Why one transaction: each statement of its own would be a round trip and
//! a commit, and the destinations' record and claim each lock the
//! destination's row; per freed slot that doubled the work of draining a
//! queue. Together a step pays one round trip pair however many sends ended.
//! If the step fails, nothing of it happened: the caller records the ended
//! sends again alone (their lease still holds them), and the rows to give
//! back stay leased until their lease ends.

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::connection::{KeptConnection, LEASE_MARGIN};
use super::{Done, Queue};

/// What one step does.
pub struct Step<'a, Q: Queue> {
    /// Claimed rows not sent, to give back.
    pub release: &'a [Q::Row],
    /// Sends that ended, to record.
    pub done: &'a [Done<Q::Row, Q::Attempt>],
    /// The claim, if there is room for rows and some may be due.
    pub claim: Option<Claim>,
}

/// A claim of up to `limit` rows due at `now`, leased until `lease_until`.
#[derive(Debug, Clone, Copy)]
pub struct Claim {
    /// The engine's clock.
    pub now: DateTime<Utc>,
    /// The lease's end, on the database's terms.
    pub lease_until: DateTime<Utc>,
    /// Most rows to claim.
    pub limit: usize,
}

impl<Q: Queue> Step<'_, Q> {
    /// Runs the step on `kept`: the rows claimed (none without a claim).
    /// With sends to record it gives up shortly before their leases end
    /// (`lease_ends`), as [`KeptConnection::record`] does.
    pub async fn run(
        &self,
        kept: &mut KeptConnection,
        queue: &Q,
        lease_ends: Option<Instant>,
    ) -> sqlx::Result<Vec<Q::Row>> {
        let step = async {
            let mut tx = kept.begin().await?;
            if !self.release.is_empty() {
                queue.release(&mut tx, self.release).await?;
            }
            if !self.done.is_empty() {
                queue.record(&mut tx, self.done).await?;
            }
            let claimed = match self.claim {
                Some(Claim { now, lease_until, limit }) => {
                    queue.claim(&mut tx, now, lease_until, limit).await?
                }
                None => Vec::new(),
            };
            tx.commit().await?;
            Ok(claimed)
        };
        let result = match lease_ends {
            None => step.await,
            Some(lease_ends) => match tokio::time::timeout_at(lease_ends - LEASE_MARGIN, step).await {
                Ok(result) => result,
                Err(_) => {
                    // Cut mid-statement: the connection's state is unknown.
                    kept.discard();
                    return Err(sqlx::Error::Io(std::io::ErrorKind::TimedOut.into()));
                }
            },
        };
        if let Err(error) = &result {
            kept.failed(error);
        }
        result
    }
}
