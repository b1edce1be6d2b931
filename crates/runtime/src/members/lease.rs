//! The primary Lease of `spec.failover.nodeLoss: SelfFence` clusters, as the prober reads it
//! (a GET each round, never the watch cache: a conclusion that it expired needs a read made
//! after the expiry) and remembers it: [`LeaseRead`] in, [`database_operator_core::LeaseSighting`]
//! out, with the times on the operator's clock that the core's safety rule needs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use database_operator_core::LeaseSighting;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;

/// One read of a cluster's primary Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseRead {
    /// The Lease exists.
    Found {
        /// `spec.holderIdentity`.
        holder: Option<String>,
        /// `spec.renewTime` (the agent's clock).
        renew_time: Option<Timestamp>,
        /// `spec.leaseDurationSeconds`.
        duration: Duration,
    },
    /// There is no such Lease (not created yet, or deleted): the next pass creates it.
    Missing,
}

impl LeaseRead {
    /// What `lease` says.
    pub fn of(lease: &Lease) -> LeaseRead {
        let spec = lease.spec.clone().unwrap_or_default();
        LeaseRead::Found {
            holder: spec.holder_identity,
            renew_time: spec.renew_time.map(|t| t.0),
            duration: Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
            ),
        }
    }
}

/// The latest sighting of each cluster's primary Lease.
#[derive(Debug, Default)]
pub struct LeaseCache {
    by_cluster: Mutex<HashMap<(String, String), LeaseSighting>>,
}

impl LeaseCache {
    /// The sighting of `namespace/name`'s Lease, when there is one.
    pub fn get(&self, namespace: &str, name: &str) -> Option<LeaseSighting> {
        self.lock()
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Records a read of `namespace/name`'s Lease sent at `at`; whether a pass should look
    /// again: the Lease appeared or went, its holder changed, or it expired or came back.
    pub fn record(&self, namespace: &str, name: &str, read: LeaseRead, at: Timestamp) -> bool {
        let key = (namespace.to_owned(), name.to_owned());
        let mut map = self.lock();
        let before = map.get(&key).cloned();
        let after = next_sighting(before.as_ref(), read, at);
        let changed = match (&before, &after) {
            (None, None) => false,
            (Some(b), Some(a)) => b.holder != a.holder || b.expired() != a.expired(),
            _ => true,
        };
        match after {
            Some(a) => map.insert(key, a),
            None => map.remove(&key),
        };
        changed
    }

    /// Forgets every cluster `keep` says no to.
    pub fn retain(&self, mut keep: impl FnMut(&str, &str) -> bool) {
        self.lock().retain(|(ns, name), _| keep(ns, name));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), LeaseSighting>> {
        self.by_cluster.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sighting after `read` at `at`: the same renewal (holder and `renewTime`) keeps the
/// moment it was first seen; a new one is seen now, and counts as observed happening only when
/// an earlier read had another value.
fn next_sighting(
    before: Option<&LeaseSighting>,
    read: LeaseRead,
    at: Timestamp,
) -> Option<LeaseSighting> {
    let LeaseRead::Found {
        holder,
        renew_time,
        duration,
    } = read
    else {
        return None;
    };
    let sighting = match before {
        Some(b) if b.holder == holder && b.renew_time == renew_time => LeaseSighting {
            checked_at: at.max(b.checked_at),
            duration,
            ..b.clone()
        },
        Some(b) => LeaseSighting {
            observed_renewal: b.holder == holder && renew_time.is_some(),
            holder,
            renew_time,
            renewal_seen_at: at,
            checked_at: at,
            duration,
        },
        None => LeaseSighting {
            holder,
            renew_time,
            renewal_seen_at: at,
            observed_renewal: false,
            checked_at: at,
            duration,
        },
    };
    Some(sighting)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn found(holder: &str, renewed: i64) -> LeaseRead {
        LeaseRead::Found {
            holder: Some(holder.into()),
            renew_time: Some(at(renewed)),
            duration: Duration::from_secs(6),
        }
    }

    #[test]
    fn a_first_read_is_not_an_observed_renewal_a_changed_one_is() {
        let cache = LeaseCache::default();
        assert!(cache.record("ns", "db", found("db-0", -100), at(0)));
        let s = cache.get("ns", "db").unwrap();
        assert!(!s.observed_renewal);
        assert_eq!(s.renewal_seen_at, at(0));
        // Unchanged: only the check moves.
        assert!(!cache.record("ns", "db", found("db-0", -100), at(2)));
        let s = cache.get("ns", "db").unwrap();
        assert_eq!((s.renewal_seen_at, s.checked_at), (at(0), at(2)));
        // Renewed: seen happening now.
        assert!(!cache.record("ns", "db", found("db-0", 3), at(4)));
        let s = cache.get("ns", "db").unwrap();
        assert!(s.observed_renewal);
        assert_eq!(s.renewal_seen_at, at(4));
    }

    #[test]
    fn expiry_holder_changes_and_a_missing_lease_ask_for_a_pass() {
        let cache = LeaseCache::default();
        cache.record("ns", "db", found("db-0", 0), at(0));
        cache.record("ns", "db", found("db-0", 1), at(1));
        assert!(!cache.record("ns", "db", found("db-0", 1), at(8)));
        // 6 s + 2 s margin after the renewal seen at 1.
        assert!(cache.record("ns", "db", found("db-0", 1), at(9)));
        assert!(cache.get("ns", "db").unwrap().expired());
        // A new holder is a new lease, not a renewal of the old one's.
        assert!(cache.record("ns", "db", found("db-1", 9), at(10)));
        let s = cache.get("ns", "db").unwrap();
        assert!(!s.observed_renewal && !s.expired());
        assert!(cache.record("ns", "db", LeaseRead::Missing, at(11)));
        assert_eq!(cache.get("ns", "db"), None);
        assert!(!cache.record("ns", "db", LeaseRead::Missing, at(12)));
    }

    #[test]
    fn an_older_read_never_moves_the_check_back() {
        let cache = LeaseCache::default();
        cache.record("ns", "db", found("db-0", 0), at(0));
        cache.record("ns", "db", found("db-0", 1), at(10));
        cache.record("ns", "db", found("db-0", 1), at(5));
        assert_eq!(cache.get("ns", "db").unwrap().checked_at, at(10));
    }
}
