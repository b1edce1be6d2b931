//! Memory the runtime keeps per cluster between reconciles (known matches, password outcomes,
//! failures, writes awaited), behind one small map type.

use std::collections::HashMap;
use std::sync::Mutex;

/// A value per cluster (namespace, name), shared by the reconciles of one controller. A
/// poisoned lock (a panic while it was held) is taken over: the values are hints and records,
/// never half-written (each change is one map operation).
#[derive(Debug)]
pub struct PerCluster<V> {
    map: Mutex<HashMap<(String, String), V>>,
}

impl<V> Default for PerCluster<V> {
    fn default() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<V> PerCluster<V> {
    /// Changes the value of `namespace/name` in place (`None`: there is none, or it is removed
    /// when `f` leaves `None`), and returns what `f` returns.
    pub fn update<R>(&self, namespace: &str, name: &str, f: impl FnOnce(&mut Option<V>) -> R) -> R {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_owned(), name.to_owned());
        let mut value = map.remove(&key);
        let out = f(&mut value);
        if let Some(value) = value {
            map.insert(key, value);
        }
        out
    }

    /// A copy of the value of `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<V>
    where
        V: Clone,
    {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// Sets the value of `namespace/name`.
    pub fn set(&self, namespace: &str, name: &str, value: V) {
        self.update(namespace, name, |v| *v = Some(value));
    }

    /// Forgets `namespace/name` (a deleted cluster, or nothing left to remember).
    pub fn forget(&self, namespace: &str, name: &str) {
        self.update(namespace, name, |v| *v = None);
    }

    /// Clusters with a value.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no cluster has a value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_kept_per_cluster_and_removed_when_left_empty() {
        let m: PerCluster<u32> = PerCluster::default();
        m.set("shop", "orders", 1);
        m.set("web", "orders", 2);
        assert_eq!(m.get("shop", "orders"), Some(1));
        assert_eq!(m.len(), 2);
        let seen = m.update("shop", "orders", |v| {
            let seen = *v;
            *v = None;
            seen
        });
        assert_eq!(seen, Some(1));
        assert_eq!(m.get("shop", "orders"), None);
        m.forget("web", "orders");
        assert!(m.is_empty());
    }
}
