//! What the per-provider and per-destination handles share: keys labelled
//! with the thing they count, and a list of handles registered once per
//! name, on first use.

use std::sync::{Arc, RwLock};

use metrics::{Key, Label, Level, Metadata};

/// What every handle is registered with.
pub(super) const METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The key of `metric` for the thing named `name` (label `label`:
/// `provider`, `destination`), with one more label if `extra`.
pub(super) fn labelled(
    label: &'static str,
    name: &str,
    metric: &'static str,
    extra: Option<(&'static str, &'static str)>,
) -> Key {
    let mut labels = vec![Label::new(label, name.to_string())];
    labels.extend(extra.map(|(k, v)| Label::from_static_parts(k, v)));
    Key::from_parts(metric, labels)
}

/// Handles with a name: a provider's, a destination's.
pub(super) trait Named {
    fn name(&self) -> &str;
}

/// The handles of each name seen so far.
pub(super) struct Registry<T>(RwLock<Vec<Arc<T>>>);

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry(RwLock::default())
    }
}

impl<T: Named> Registry<T> {
    /// The handles of `name`, made by `register` the first time.
    pub(super) fn get(&self, name: &str, register: impl FnOnce() -> T) -> Arc<T> {
        let find = |all: &[Arc<T>]| all.iter().find(|handles| handles.name() == name).cloned();
        if let Some(found) = find(&self.0.read().unwrap_or_else(|e| e.into_inner())) {
            return found;
        }
        let mut all = self.0.write().unwrap_or_else(|e| e.into_inner());
        find(&all).unwrap_or_else(|| {
            let registered = Arc::new(register());
            all.push(registered.clone());
            registered
        })
    }

    /// Runs `each` on every name's handles.
    pub(super) fn for_each(&self, each: impl FnMut(&Arc<T>)) {
        self.0.read().unwrap_or_else(|e| e.into_inner()).iter().for_each(each);
    }
}
