//! Reverse indexes over watch caches: which objects of a namespace belong to a group, kept up
//! to date from the watch events, so a lookup costs the size of the group, not of the cache.
//!
//! Two uses: Secret name -> the clusters that reference it ([`crate::secrets::SecretIndex`]),
//! and cluster name -> the pods labelled with it ([`PodIndex`]). Before the pod index, each
//! reconcile scanned the whole pod cache; with 1,000 clusters (3,000 pods) that scan was the
//! largest part of a steady reconcile (docs/performance.md).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::ResourceExt;
use kube::runtime::watcher;

use crate::cache::CachedPod;
use database_operator_core::render::labels;

/// `(namespace, name)` of an object.
type Id = (String, String);

#[derive(Debug, Default)]
struct State {
    /// `(namespace, group)` -> names of the members.
    by_group: HashMap<Id, BTreeSet<String>>,
    /// `(namespace, member)` -> its group.
    by_member: HashMap<Id, String>,
    /// Entries of a relist in progress, replacing everything when it completes.
    relisting: Option<Vec<(Id, Option<String>)>>,
}

impl State {
    fn set(&mut self, member: Id, group: Option<String>) {
        // Most events (a pod's status, a cluster's spec) leave the group as it was.
        if self.by_member.get(&member) == group.as_ref() {
            return;
        }
        if let Some(old) = self.by_member.remove(&member) {
            let key = (member.0.clone(), old);
            if let Some(set) = self.by_group.get_mut(&key) {
                set.remove(&member.1);
                if set.is_empty() {
                    self.by_group.remove(&key);
                }
            }
        }
        if let Some(group) = group {
            self.by_group
                .entry((member.0.clone(), group.clone()))
                .or_default()
                .insert(member.1.clone());
            self.by_member.insert(member, group);
        }
    }
}

/// Members -> group within a namespace, and back; fed with a watch's events through
/// [`GroupIndex::apply`]. Clones share the index.
#[derive(Clone, Debug, Default)]
pub struct GroupIndex {
    inner: Arc<RwLock<State>>,
}

impl GroupIndex {
    /// Updates the index with one watch event; `group_of` names an object's group (`None`: in
    /// none).
    ///
    /// During a relist an object listed is visible at once (a superset of the truth until the
    /// list completes: lookups check what they find against the cache); the completed list
    /// replaces the index, dropping what was deleted while the watch was down.
    pub fn apply<K: kube::Resource>(
        &self,
        event: &watcher::Event<K>,
        group_of: impl Fn(&K) -> Option<String>,
    ) {
        let id = |obj: &K| (obj.namespace().unwrap_or_default(), obj.name_any());
        let mut state = self
            .inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match event {
            watcher::Event::Apply(obj) => state.set(id(obj), group_of(obj)),
            watcher::Event::Delete(obj) => state.set(id(obj), None),
            watcher::Event::Init => state.relisting = Some(Vec::new()),
            watcher::Event::InitApply(obj) => {
                let (member, group) = (id(obj), group_of(obj));
                state.set(member.clone(), group.clone());
                if let Some(buffer) = state.relisting.as_mut() {
                    buffer.push((member, group));
                }
            }
            watcher::Event::InitDone => {
                if let Some(buffer) = state.relisting.take() {
                    let mut fresh = State::default();
                    for (member, group) in buffer {
                        fresh.set(member, group);
                    }
                    *state = fresh;
                }
            }
        }
    }

    /// Names of the members of `group` in `namespace`, sorted.
    pub fn members(&self, namespace: &str, group: &str) -> Vec<String> {
        let state = self
            .inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state
            .by_group
            .get(&(namespace.to_owned(), group.to_owned()))
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Number of non-empty groups.
    #[cfg(test)]
    pub(crate) fn groups(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .by_group
            .len()
    }
}

/// Cluster -> the names of the pods labelled with it ([`labels::CLUSTER`]), fed by the pod
/// watch.
#[derive(Clone, Debug, Default)]
pub struct PodIndex(GroupIndex);

impl PodIndex {
    /// Updates the index with one event of the pod watch.
    pub fn apply(&self, event: &watcher::Event<CachedPod>) {
        self.0
            .apply(event, |pod| pod.labels().get(labels::CLUSTER).cloned());
    }

    /// Names of the pods labelled with cluster `name` in `namespace`, sorted.
    pub fn pods_of(&self, namespace: &str, name: &str) -> Vec<String> {
        self.0.members(namespace, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(namespace: &str, name: &str, cluster: Option<&str>) -> CachedPod {
        CachedPod::new(&Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                labels: cluster.map(|c| [(labels::CLUSTER.to_owned(), c.to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        })
    }

    #[test]
    fn follows_applies_relabels_and_deletes() {
        let index = PodIndex::default();
        index.apply(&watcher::Event::Apply(pod("a", "db-1", Some("db"))));
        index.apply(&watcher::Event::Apply(pod("a", "db-0", Some("db"))));
        index.apply(&watcher::Event::Apply(pod("b", "db-0", Some("db"))));
        index.apply(&watcher::Event::Apply(pod("a", "other-0", Some("other"))));
        assert_eq!(index.pods_of("a", "db"), ["db-0", "db-1"]);
        assert_eq!(index.pods_of("b", "db"), ["db-0"]);
        assert!(index.pods_of("c", "db").is_empty());
        // A status update leaves the pod where it was.
        index.apply(&watcher::Event::Apply(pod("a", "db-0", Some("db"))));
        assert_eq!(index.pods_of("a", "db"), ["db-0", "db-1"]);

        // Relabelled to another cluster, or the label removed: leaves the old group.
        index.apply(&watcher::Event::Apply(pod("a", "db-1", Some("other"))));
        assert_eq!(index.pods_of("a", "db"), ["db-0"]);
        assert_eq!(index.pods_of("a", "other"), ["db-1", "other-0"]);
        index.apply(&watcher::Event::Apply(pod("a", "other-0", None)));
        assert_eq!(index.pods_of("a", "other"), ["db-1"]);

        index.apply(&watcher::Event::Delete(pod("a", "db-0", Some("db"))));
        assert!(index.pods_of("a", "db").is_empty());
        assert_eq!(index.0.groups(), 2, "empty groups are dropped");
    }

    #[test]
    fn a_completed_relist_replaces_the_index() {
        let index = PodIndex::default();
        index.apply(&watcher::Event::Apply(pod("a", "gone-0", Some("db"))));
        index.apply(&watcher::Event::Init);
        index.apply(&watcher::Event::InitApply(pod("a", "db-0", Some("db"))));
        assert_eq!(
            index.pods_of("a", "db"),
            ["db-0", "gone-0"],
            "old entries stay until the list is complete"
        );
        index.apply(&watcher::Event::InitDone);
        assert_eq!(index.pods_of("a", "db"), ["db-0"]);
    }
}
