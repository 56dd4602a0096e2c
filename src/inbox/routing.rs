//! Which events have side effects, decided once per delivery: the answer
//! picks the delivery's lane, and each lane's type says which it is.

use std::collections::HashMap;
use std::sync::Arc;

use super::Delivery;
use super::archive::EffectStatements;
use super::effect::{Effect, EffectError, Value, Writes};
use super::forwards::{Destinations, Forwards};

/// An effect as the routing table holds it: with its writes, and the
/// statements built from them once, when it is registered.
pub(super) struct Registered {
    effect: Box<dyn Effect>,
    writes: Writes,
    statements: EffectStatements,
}

impl Registered {
    fn new(effect: impl Effect) -> Self {
        let writes = effect.writes();
        let statements = EffectStatements::of(&writes);
        Registered { effect: Box::new(effect), writes, statements }
    }

    /// Its SQL.
    pub(super) fn writes(&self) -> &Writes {
        &self.writes
    }

    /// The statements that write it.
    pub(super) fn statements(&self) -> &EffectStatements {
        &self.statements
    }
}

/// The routing table: which event types have which effect (by provider;
/// events of any other type are only recorded), and the destinations that
/// events are forwarded to, whatever their lane.
#[derive(Clone, Default)]
pub struct RoutingTable {
    effects: HashMap<String, HashMap<String, Arc<Registered>>>,
    destinations: Option<Arc<dyn Destinations>>,
}

impl RoutingTable {
    /// Gives events of `event_type` from `provider` the effect `effect`.
    pub fn on(self, provider: &str, event_type: &str, effect: impl Effect) -> Self {
        self.on_each(provider, &[event_type], effect)
    }

    /// Gives events of each of `event_types` from `provider` the same `effect`.
    pub fn on_each(mut self, provider: &str, event_types: &[&str], effect: impl Effect) -> Self {
        let effect = Arc::new(Registered::new(effect));
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
    effect: Arc<Registered>,
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

    /// Its event's effect.
    pub(super) fn effect(&self) -> &Registered {
        &self.effect
    }

    /// Whether `other`'s event has the same effect, so that the two can be
    /// written by one statement.
    pub(super) fn same_effect(&self, other: &ToApply) -> bool {
        Arc::ptr_eq(&self.effect, &other.effect)
    }

    /// The effect's input row for its event, checked against its columns.
    /// A panic in the effect's code is caught and returned as its error.
    pub(super) fn input(&self) -> Result<Vec<Value<'_>>, EffectError> {
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.effect.effect.input(&self.delivery.event)
        }));
        let row = read.unwrap_or_else(|panic| Err(EffectError::Panicked(panic_message(&*panic))))?;
        self.effect.writes.check(&row)?;
        Ok(row)
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

impl std::fmt::Debug for ToApply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToApply")
            .field("delivery", &self.delivery)
            .field("forwards", &self.forwards)
            .finish_non_exhaustive()
    }
}
