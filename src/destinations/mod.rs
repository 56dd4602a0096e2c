//! Forwarding recorded events to the team's own application.
//!
//! Destinations are declared in a file (`declaration`): where to POST, the
//! signing secret, which events (`patterns`). When an event is recorded for
//! the first time, one job per destination that wants it is inserted in the
//! same transaction as its dedup row (`jobs`), so a duplicate never makes a
//! second one and a rolled-back effect takes its jobs with it. Each
//! destination is then a queue of the engine (`queue`): its jobs are sent,
//! signed the Standard Webhooks way (`signer`), as one HTTP request each
//! (`sender`), retried on the destination's schedule, in order per entity
//! where asked (per entity, `entity`, or by a declared key, `ordering_key`), within a rate limit and behind a circuit breaker
//! kept in the database, so every replica and the CLI agree. Every statement
//! over forwarding's tables is in `store`.

pub mod declaration;
pub mod entity;
pub mod jobs;
pub mod ordering_key;
pub mod patterns;
pub mod queue;
pub mod sender;
pub mod signer;
pub mod store;

pub use declaration::{Circuit, Declaration, DeclarationError, Destination, Ordering};
pub use queue::{DestinationQueue, SendCounts};

use std::collections::HashMap;
use std::sync::Arc;

use crate::queue::{Engine, Wake};

/// What the service forwards with: the declaration, the HTTP client, and
/// a handle on each destination's running queue. Cheap to clone; the
/// default forwards nothing.
#[derive(Clone)]
pub struct Forwarding {
    /// The declared destinations.
    pub declaration: Arc<Declaration>,
    /// The client every request goes out with.
    pub client: reqwest::Client,
    wakes: Arc<HashMap<String, Wake>>,
}

impl Default for Forwarding {
    fn default() -> Self {
        Forwarding { declaration: Arc::default(), client: crate::client::build(), wakes: Arc::default() }
    }
}

impl Forwarding {
    /// Runs a queue per destination of `declaration` on `engine`, sending
    /// with `client` and counting in what `metrics` gives for its name.
    pub fn start(
        declaration: Declaration,
        client: reqwest::Client,
        engine: &mut Engine,
        metrics: impl Fn(&str) -> Arc<dyn SendCounts>,
    ) -> Self {
        let wakes = declaration
            .iter()
            .map(|destination| {
                let queue = DestinationQueue::new(
                    destination.clone(),
                    client.clone(),
                    Some(metrics(&destination.name)),
                );
                (destination.name.clone(), engine.spawn(queue))
            })
            .collect();
        Forwarding { declaration: Arc::new(declaration), client, wakes: Arc::new(wakes) }
    }

    /// The destinations of `declaration`, with no queue running here (the
    /// CLI's reprocess writes jobs that `serve` sends).
    pub fn declared(declaration: Declaration) -> Self {
        Forwarding { declaration: Arc::new(declaration), ..Forwarding::default() }
    }

    /// Tells `destination`'s queue that it has new jobs (this process just
    /// committed them), so it claims them now rather than at its next poll.
    pub fn wake(&self, destination: &str) {
        if let Some(wake) = self.wakes.get(destination) {
            wake.wake();
        }
    }
}

impl crate::inbox::Destinations for Forwarding {
    fn forwards(&self, provider: &str, event: &crate::event::Event) -> Vec<crate::inbox::Forward> {
        self.declaration.forwards(provider, event)
    }

    fn committed(&self, forwards: &[crate::inbox::Forward]) {
        for forward in forwards {
            self.wake(&forward.destination);
        }
    }
}
