//! What the prober found, as the core reads it, and the cache a reconcile reads it from.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use database_operator_api::Engine;
use database_operator_core as core;
use k8s_openapi::jiff::Timestamp;

use crate::database::{MemberFacts, ServerRole};

/// One member pod as the source host of a replica is matched against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAddress {
    /// The pod's name.
    pub name: String,
    /// Its IP, when it has one.
    pub ip: Option<String>,
    /// Whether it carries the primary role label (the read-write Service selects it).
    pub primary_label: bool,
}

/// The member a replica's configured source host names: a pod IP, a pod name or its
/// headless-Service name, or the read-write Service's name (which resolves to the pod labelled
/// primary, when exactly one is). `None` when it names nothing of the cluster.
pub fn source_member(
    host: &str,
    cluster: &str,
    namespace: &str,
    pods: &[PodAddress],
) -> Option<String> {
    let host = host.trim_end_matches('.');
    if let Some(pod) = pods.iter().find(|p| p.ip.as_deref() == Some(host)) {
        return Some(pod.name.clone());
    }
    let headless = format!("{cluster}-headless");
    let first = host.split('.').next().unwrap_or_default();
    let rest: Vec<&str> = host.split('.').skip(1).collect();
    if let Some(pod) = pods.iter().find(|p| p.name == first)
        && (rest.is_empty() || rest.first() == Some(&headless.as_str()))
    {
        return Some(pod.name.clone());
    }
    let service = [
        cluster.to_owned(),
        format!("{cluster}.{namespace}"),
        format!("{cluster}.{namespace}.svc"),
        format!("{cluster}.{namespace}.svc.cluster.local"),
    ];
    if service.iter().any(|s| s == host) {
        let mut primaries = pods.iter().filter(|p| p.primary_label);
        if let (Some(only), None) = (primaries.next(), primaries.next()) {
            return Some(only.name.clone());
        }
    }
    None
}

/// The core's facts of one probe at `now`; `source` is the member the replica follows
/// ([`source_member`]). A position that does not parse is left out (and logged at debug): no
/// position is never a reason to promote.
pub fn core_facts(
    facts: &MemberFacts,
    engine: Engine,
    source: Option<String>,
    now: Timestamp,
) -> core::MemberFacts {
    if !facts.reachable {
        return core::MemberFacts::unreachable(now);
    }
    let position = match facts.position(engine) {
        Ok(p) => p,
        Err(error) => {
            tracing::debug!(%error, "member position not understood");
            None
        }
    };
    core::MemberFacts {
        probed_at: now,
        reachable: true,
        role: facts.role.map(|r| match r {
            ServerRole::Primary => core::ServerRole::Primary,
            ServerRole::Replica => core::ServerRole::Replica,
        }),
        read_only: facts.read_only,
        position,
        lag_seconds: facts.lag_seconds,
        lag_bytes: facts.lag_bytes,
        source,
        replicating: facts.replicating,
        replication_error: facts.replication_error.clone(),
        server_id: facts.server_id.clone(),
        version: facts.version.clone(),
        semi_sync_source: facts.semi_sync_source,
        member_slots: facts.member_slots.clone(),
        retained_from: facts.retained_from.as_deref().and_then(|lsn| {
            core::position::Position::parse(engine, lsn, facts.timeline, None).ok()
        }),
        source_lacks_history: facts.source_lacks_history,
        archiver: facts.archiver.as_deref().cloned(),
        source_tls_checked: facts.source_tls_checked,
        tls_not_after: facts
            .tls_not_after
            .and_then(|s| Timestamp::from_second(s).ok()),
        down_since: None,
        answered_before: true,
    }
}

/// A material change of one member's facts ([`FactsCache::replace`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FactsChange {
    /// The member's pod.
    pub pod: String,
    /// What changed, for the log; empty when the member was probed for the first time (a new
    /// operator or pod) or left the probe round.
    pub what: Vec<String>,
}

/// One member's latest facts and the pod (uid) they were probed on.
#[derive(Clone, Debug)]
struct Entry {
    uid: String,
    facts: core::MemberFacts,
}

/// The latest facts of every probed member, by cluster: written by the prober, read by
/// `gather()`. Facts belong to one pod incarnation (its uid): a recreated pod has none until
/// it is probed, so a decision never reads the old server's answers as the new one's.
#[derive(Debug, Default)]
pub struct FactsCache {
    by_cluster: Mutex<HashMap<(String, String), BTreeMap<String, Entry>>>,
    leases: super::LeaseCache,
}

impl FactsCache {
    /// The facts of `namespace/name`'s members whose pods are `pods` (name, uid).
    pub fn get<'a>(
        &self,
        namespace: &str,
        name: &str,
        pods: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> BTreeMap<String, core::MemberFacts> {
        let map = self.lock();
        let Some(members) = map.get(&(namespace.to_owned(), name.to_owned())) else {
            return BTreeMap::new();
        };
        pods.into_iter()
            .filter_map(|(pod, uid)| {
                members
                    .get(pod)
                    .filter(|e| e.uid == uid)
                    .map(|e| (pod.to_owned(), e.facts.clone()))
            })
            .collect()
    }

    /// Replaces the facts of `namespace/name` with one probe round (pod -> (uid, facts)); the
    /// members whose facts changed materially ([`core::probing::material_change`], a member appearing or
    /// going), empty when nothing did.
    pub fn replace(
        &self,
        namespace: &str,
        name: &str,
        round: BTreeMap<String, (String, core::MemberFacts)>,
    ) -> Vec<FactsChange> {
        let mut map = self.lock();
        let key = (namespace.to_owned(), name.to_owned());
        let old = map.remove(&key).unwrap_or_default();
        let mut changes: Vec<FactsChange> = round
            .iter()
            .filter_map(|(pod, (uid, facts))| {
                let before = old.get(pod).filter(|e| &e.uid == uid).map(|e| &e.facts);
                core::probing::material_change(before, facts).then(|| FactsChange {
                    pod: pod.clone(),
                    what: core::probing::material_changes(before, facts),
                })
            })
            .collect();
        changes.extend(
            old.keys()
                .filter(|pod| !round.contains_key(*pod))
                .map(|pod| FactsChange {
                    pod: pod.clone(),
                    what: Vec::new(),
                }),
        );
        let entries: BTreeMap<String, Entry> = round
            .into_iter()
            .map(|(pod, (uid, mut facts))| {
                // A failed probe continues the run of failed probes before it (same pod
                // incarnation): the run starts at the first of them.
                if !facts.reachable
                    && let Some(before) = old.get(&pod).filter(|e| e.uid == uid)
                {
                    if !before.facts.reachable {
                        facts.down_since = before.facts.down_since.or(Some(before.facts.probed_at));
                    }
                    facts.answered_before = before.facts.reachable || before.facts.answered_before;
                }
                if facts.reachable {
                    facts.answered_before = true;
                }
                (pod, Entry { uid, facts })
            })
            .collect();
        if !entries.is_empty() {
            map.insert(key, entries);
        }
        changes
    }

    /// Forgets every cluster `keep` says no to (deleted clusters, lost credentials).
    pub fn retain(&self, mut keep: impl FnMut(&str, &str) -> bool) {
        self.lock().retain(|(ns, name), _| keep(ns, name));
        self.leases.retain(keep);
    }

    /// The latest sighting of `namespace/name`'s primary Lease (`nodeLoss: SelfFence`).
    pub fn lease(&self, namespace: &str, name: &str) -> Option<core::LeaseSighting> {
        self.leases.get(namespace, name)
    }

    /// Records a read of `namespace/name`'s primary Lease sent at `at`
    /// ([`super::LeaseCache::record`]); whether a pass should look again.
    pub fn record_lease(
        &self,
        namespace: &str,
        name: &str,
        read: super::LeaseRead,
        at: Timestamp,
    ) -> bool {
        self.leases.record(namespace, name, read, at)
    }

    /// Clusters with facts.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no cluster has facts.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(String, String), BTreeMap<String, Entry>>> {
        self.by_cluster.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-12-01T08:00:00Z".parse().unwrap()
    }

    fn pods() -> Vec<PodAddress> {
        vec![
            PodAddress {
                name: "orders-0".into(),
                ip: Some("127.10.0.5".into()),
                primary_label: false,
            },
            PodAddress {
                name: "orders-1".into(),
                ip: Some("127.10.0.6".into()),
                primary_label: true,
            },
        ]
    }

    #[test]
    fn a_source_host_names_a_member() {
        let p = pods();
        let find = |h: &str| source_member(h, "orders", "shop", &p);
        assert_eq!(find("127.10.0.5").as_deref(), Some("orders-0"));
        assert_eq!(
            find("orders-0.orders-headless.shop.svc").as_deref(),
            Some("orders-0")
        );
        assert_eq!(
            find("orders-0.orders-headless.shop.svc.cluster.local.").as_deref(),
            Some("orders-0")
        );
        assert_eq!(find("orders-0").as_deref(), Some("orders-0"));
        // The read-write Service resolves to the labelled primary.
        assert_eq!(find("orders.shop.svc").as_deref(), Some("orders-1"));
        assert_eq!(find("orders").as_deref(), Some("orders-1"));
        assert_eq!(find("orders-0.elsewhere.shop.svc"), None);
        assert_eq!(find("127.10.0.9"), None);
        assert_eq!(find("payments.shop.svc"), None);
        let mut two = pods();
        two[0].primary_label = true;
        assert_eq!(
            source_member("orders.shop.svc", "orders", "shop", &two),
            None
        );
    }

    #[test]
    fn runtime_facts_become_core_facts() {
        let facts = MemberFacts {
            reachable: true,
            role: Some(ServerRole::Replica),
            read_only: Some(true),
            received_position: Some("0-1-42".into()),
            replicating: Some(true),
            lag_seconds: Some(3),
            ..MemberFacts::default()
        };
        let c = core_facts(&facts, Engine::Mariadb, Some("orders-1".into()), now());
        assert_eq!(c.role, Some(core::ServerRole::Replica));
        assert_eq!(c.source.as_deref(), Some("orders-1"));
        assert_eq!(c.probed_at, now());
        assert!(matches!(
            c.position,
            Some(core::position::Position::Mariadb(_))
        ));
        let bad = MemberFacts {
            received_position: Some("garbage".into()),
            ..facts.clone()
        };
        assert_eq!(
            core_facts(&bad, Engine::Mariadb, None, now()).position,
            None
        );
        let down = core_facts(&MemberFacts::unreachable(), Engine::Mysql, None, now());
        assert_eq!(down, core::MemberFacts::unreachable(now()));
    }

    #[test]
    fn only_material_changes_count_and_facts_belong_to_a_pod_incarnation() {
        let cache = FactsCache::default();
        let up = |pos: &str| {
            core_facts(
                &MemberFacts {
                    reachable: true,
                    role: Some(ServerRole::Primary),
                    read_only: Some(false),
                    received_position: Some(pos.into()),
                    ..MemberFacts::default()
                },
                Engine::Mariadb,
                None,
                now(),
            )
        };
        let round = |uid: &str, f: core::MemberFacts| {
            BTreeMap::from([("orders-0".to_owned(), (uid.to_owned(), f))])
        };
        assert!(
            !cache
                .replace("shop", "orders", round("u1", up("0-1-1")))
                .is_empty()
        );
        // Only the position moved: not material.
        assert!(
            cache
                .replace("shop", "orders", round("u1", up("0-1-2")))
                .is_empty()
        );
        assert_eq!(
            cache.replace(
                "shop",
                "orders",
                round("u1", core::MemberFacts::unreachable(now()))
            ),
            [FactsChange {
                pod: "orders-0".into(),
                what: vec!["stopped answering".into()],
            }]
        );
        assert_eq!(cache.get("shop", "orders", [("orders-0", "u1")]).len(), 1);
        // A run of failed probes starts at its first one; an answer ends it.
        let later = now() + std::time::Duration::from_secs(3);
        cache.replace(
            "shop",
            "orders",
            round("u1", core::MemberFacts::unreachable(later)),
        );
        let down = cache.get("shop", "orders", [("orders-0", "u1")]);
        assert_eq!(down["orders-0"].down_since, Some(now()));
        assert_eq!(down["orders-0"].probed_at, later);
        // It answered before this run: a server that stopped answering.
        assert!(down["orders-0"].answered_before);
        cache.replace("shop", "orders", round("u1", up("0-1-3")));
        cache.replace(
            "shop",
            "orders",
            round("u1", core::MemberFacts::unreachable(later)),
        );
        let again = cache.get("shop", "orders", [("orders-0", "u1")]);
        assert_eq!(again["orders-0"].down_since, Some(later));
        // A recreated pod (new uid) has no facts until probed, and has answered nothing.
        assert!(cache.get("shop", "orders", [("orders-0", "u2")]).is_empty());
        cache.replace(
            "shop",
            "orders",
            round("u2", core::MemberFacts::unreachable(later)),
        );
        let new_pod = cache.get("shop", "orders", [("orders-0", "u2")]);
        assert!(!new_pod["orders-0"].answered_before);
        assert!(
            !cache
                .replace("shop", "orders", round("u2", up("0-1-2")))
                .is_empty()
        );
        cache.retain(|_, name| name != "orders");
        assert!(cache.is_empty());
    }
}
