//! Where an event goes beyond the database when it is recorded for the
//! first time: one job per destination that wants it, written by the same
//! statement as its dedup row, so a duplicate never makes one, and a
//! rolled-back effect takes its jobs with it. Which destinations want which
//! events is declared elsewhere (the `destinations` module implements
//! [`Destinations`]); the inbox only writes the jobs and says when they
//! are committed.

use std::sync::Arc;

use crate::event::Event;

/// One destination an event is forwarded to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    /// The destination's name.
    pub destination: String,
    /// The entity the event is about, for a destination that delivers an
    /// entity's events one at a time, in order.
    pub ordering_key: Option<String>,
}

/// The declared destinations, as the inbox sees them.
pub trait Destinations: Send + Sync + 'static {
    /// The destinations that want `event` from `provider`. Asked for every
    /// delivery: empty, and cheap, when none does.
    fn forwards(&self, provider: &str, event: &Event) -> Vec<Forward>;

    /// The jobs of `forwards` are committed: their senders may start now.
    fn committed(&self, forwards: &[Forward]);
}

/// A routed delivery's jobs, and whom to tell once they are committed.
#[derive(Clone, Default)]
pub struct Forwards {
    jobs: Vec<Forward>,
    destinations: Option<Arc<dyn Destinations>>,
}

impl Forwards {
    /// The jobs `destinations` want for `event` from `provider`.
    pub(super) fn of(
        destinations: &Option<Arc<dyn Destinations>>,
        provider: &str,
        event: &Event,
    ) -> Forwards {
        match destinations {
            Some(declared) => {
                Forwards { jobs: declared.forwards(provider, event), destinations: Some(declared.clone()) }
            }
            None => Forwards::default(),
        }
    }

    /// One per destination.
    pub fn jobs(&self) -> &[Forward] {
        &self.jobs
    }

    /// Tells the destinations that the jobs are committed.
    pub(super) fn committed(&self) {
        if let (Some(destinations), false) = (&self.destinations, self.jobs.is_empty()) {
            destinations.committed(&self.jobs);
        }
    }
}

impl std::fmt::Debug for Forwards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.jobs).finish()
    }
}
