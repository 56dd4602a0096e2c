//! Which events have side effects, decided once per delivery: the answer
//! picks the delivery's lane, and each lane's type says which it is.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use sqlx::PgConnection;

use super::Delivery;
use super::forwards::{Destinations, Forwards};
use crate::event::Event;

/// The side effects of one kind of event: writes made on the delivery's
/// transaction, after its dedup row, so they commit if and only if the
/// event is recorded as processed. The domain (the `effects` module)
/// implements it, each effect an `async fn apply`; the inbox only runs it.
pub trait Effect: Send + Sync + 'static {
    /// Applies the effect of `event` on `conn`, inside the delivery's transaction.
    fn apply(
        &self,
        conn: &mut PgConnection,
        event: &Event,
    ) -> impl Future<Output = Result<(), EffectError>> + Send;
}

/// An [`Effect`] behind a pointer, as the routing table holds it.
trait Boxed: Send + Sync {
    fn apply_boxed<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        event: &'a Event,
    ) -> BoxFuture<'a, Result<(), EffectError>>;
}

impl<E: Effect> Boxed for E {
    fn apply_boxed<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        event: &'a Event,
    ) -> BoxFuture<'a, Result<(), EffectError>> {
        Box::pin(self.apply(conn, event))
    }
}

/// Why an effect could not be applied: unless the database was only busy
/// or gone, the delivery is archived FAILED and answered 500, so the
/// provider retries it later.
#[derive(Debug, thiserror::Error)]
pub enum EffectError {
    /// The event lacks something the effect needs, or the configuration
    /// does not say how to apply it.
    #[error("{0}")]
    Invalid(String),
    /// A statement of the effect failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The effect panicked; the process keeps serving. The text, stored in
    /// the FAILED row's `error_message`, keeps the word of the first
    /// releases ("handler"), which operators' queries may match.
    #[error("handler panicked: {0}")]
    Panicked(String),
}

/// The routing table: which event types have which effect (by provider;
/// events of any other type are only recorded), and the destinations that
/// events are forwarded to, whatever their lane.
#[derive(Clone, Default)]
pub struct RoutingTable {
    effects: HashMap<String, HashMap<String, Arc<dyn Boxed>>>,
    destinations: Option<Arc<dyn Destinations>>,
}

impl RoutingTable {
    /// Gives events of `event_type` from `provider` the effect `effect`.
    pub fn on(self, provider: &str, event_type: &str, effect: impl Effect) -> Self {
        self.on_each(provider, &[event_type], effect)
    }

    /// Gives events of each of `event_types` from `provider` the same `effect`.
    pub fn on_each(mut self, provider: &str, event_types: &[&str], effect: impl Effect) -> Self {
        let effect: Arc<dyn Boxed> = Arc::new(effect);
        let types = self.effects.entry(provider.to_string()).or_default();
        for event_type in event_types {
            types.insert(event_type.to_string(), effect.clone());
        }
        self
    }

    /// Forwards events to `destinations` (independently of their effects).
    pub fn with_destinations(mut self, destinations: Arc<dyn Destinations>) -> Self {
        self.destinations = Some(destinations);
        self
    }

    /// Decides the delivery's lane: the one place that asks whether its
    /// event has side effects; and which destinations want its event.
    pub fn route(&self, delivery: Delivery) -> Routed {
        let forwards = Forwards::of(&self.destinations, &delivery.provider, &delivery.event);
        match self.effects.get(&delivery.provider).and_then(|types| types.get(&delivery.event.event_type)) {
            Some(effect) => Routed::Apply(ToApply { effect: effect.clone(), delivery, forwards }),
            None => Routed::Record(ToRecord { delivery, forwards }),
        }
    }
}

impl std::fmt::Debug for RoutingTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let types: Vec<(&str, &str)> = self
            .effects
            .iter()
            .flat_map(|(provider, types)| types.keys().map(move |t| (provider.as_str(), t.as_str())))
            .collect();
        f.debug_tuple("RoutingTable").field(&types).finish()
    }
}

/// A delivery whose lane is decided.
#[derive(Debug)]
pub enum Routed {
    /// Its event has no side effects: it is only recorded, possibly
    /// together with others in one statement.
    Record(ToRecord),
    /// Its event has side effects: recorded and applied in a transaction.
    Apply(ToApply),
}

impl Routed {
    /// The delivery, whatever its lane.
    pub fn delivery(&self) -> &Delivery {
        match self {
            Routed::Record(ToRecord { delivery, .. }) | Routed::Apply(ToApply { delivery, .. }) => delivery,
        }
    }
}

/// A delivery whose event has no side effects. Only [`RoutingTable::route`]
/// makes one, so the recording lane, which applies nothing, cannot be
/// handed an event that has effects. Code outside the inbox cannot build
/// one by hand:
///
/// ```compile_fail,E0451
/// use webhook_inbox::inbox::{Delivery, Forwards, ToRecord};
///
/// fn smuggle(delivery: Delivery, forwards: Forwards) -> ToRecord {
///     ToRecord { delivery, forwards }
/// }
/// ```
#[derive(Debug)]
pub struct ToRecord {
    delivery: Delivery,
    forwards: Forwards,
}

impl ToRecord {
    /// The delivery.
    pub fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    /// The jobs it writes with its dedup row.
    pub fn forwards(&self) -> &Forwards {
        &self.forwards
    }
}

/// A delivery whose event has side effects, with them.
pub struct ToApply {
    delivery: Delivery,
    effect: Arc<dyn Boxed>,
    forwards: Forwards,
}

impl ToApply {
    /// The delivery.
    pub fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    /// The jobs it writes with its dedup row.
    pub fn forwards(&self) -> &Forwards {
        &self.forwards
    }

    /// Applies its event's effect on `conn`, inside the delivery's transaction.
    pub(super) fn apply_effect<'a>(
        &'a self,
        conn: &'a mut PgConnection,
    ) -> BoxFuture<'a, Result<(), EffectError>> {
        self.effect.apply_boxed(conn, &self.delivery.event)
    }
}

impl std::fmt::Debug for ToApply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToApply")
            .field("delivery", &self.delivery)
            .field("forwards", &self.forwards)
            .finish_non_exhaustive()
    }
}
