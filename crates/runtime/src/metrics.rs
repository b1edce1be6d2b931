//! Prometheus metrics (OpenMetrics text on `/metrics`).
//!
//! Besides the operator's own series, the `controller_runtime_*` names that kubebuilder
//! operators expose are kept (with `controller="databasecluster"`), so existing dashboards and
//! alerts work unchanged. Every series is documented in `docs/operations.md`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::error::ErrorCategory;

/// The `controller` label of the `controller_runtime_*` series.
pub const CONTROLLER: &str = "databasecluster";

/// Content type of the `/metrics` response.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceResult {
    namespace: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespacePhase {
    namespace: String,
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceName {
    namespace: String,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceNamePod {
    namespace: String,
    name: String,
    pod: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerResult {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CategoryLabel {
    category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

/// What one probe of a member gave, for `database_operator_member_probes_total{outcome}`.
pub const PROBE_OUTCOMES: [&str; 4] = ["reachable", "unreachable", "failed", "not_dialled"];

fn probe_histogram() -> Histogram {
    // 1 ms .. ~8 s: a probe is a connection and two queries, bounded at 5 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 14))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    kind: String,
    verb: String,
}

/// (namespace, phase) -> number of clusters.
type ClusterCounts = BTreeMap<(String, String), i64>;
/// (namespace, name) -> Unix seconds of the last completed backup.
pub type LastBackups = BTreeMap<(String, String), i64>;

/// Replication delay in seconds per (namespace, cluster, pod), as the replicas' servers report
/// it ([`Metrics::set_replication_lags`]).
pub type ReplicationLags = BTreeMap<(String, String, String), i64>;

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn reconcile_histogram() -> Histogram {
    // 1 ms .. ~33 s: a reconcile reads caches and makes a handful of API calls.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// How one reconcile ended, for the `result` labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Carried out; the next look is scheduled.
    Success,
    /// Failed; retried with backoff.
    Error,
    /// A conflict; retried at once.
    Conflict,
}

impl Outcome {
    /// `database_cluster_reconcile_duration_seconds{result}`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Error => "error",
            Outcome::Conflict => "conflict",
        }
    }

    /// `controller_runtime_reconcile_total{result}` in controller-runtime's words.
    const fn controller_runtime(&self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Error => "error",
            Outcome::Conflict => "requeue",
        }
    }
}

/// Every metric of the operator, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconcile_duration: HistogramFamily<NamespaceResult>,
    clusters: Family<NamespacePhase, Gauge>,
    cr_reconcile_total: Family<ControllerResult, Counter>,
    cr_reconcile_errors: Family<ControllerLabel, Counter>,
    cr_reconcile_time: HistogramFamily<ControllerLabel>,
    cr_max_concurrent: Family<ControllerLabel, Gauge>,
    cr_active_workers: Family<ControllerLabel, Gauge>,
    errors: Family<CategoryLabel, Counter>,
    api_writes: Family<WriteLabels, Counter>,
    probes: Family<OutcomeLabel, Counter>,
    probe_duration: HistogramFamily<OutcomeLabel>,
    leader: Gauge,
    deferred: Counter,
    cluster_counts: Mutex<BTreeMap<String, ClusterCounts>>,
    last_backup: Family<NamespaceName, Gauge>,
    last_backups: Mutex<BTreeMap<String, LastBackups>>,
    replication_lag: Family<NamespaceNamePod, Gauge>,
    replication_lags: Mutex<BTreeMap<String, ReplicationLags>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn controller() -> ControllerLabel {
    ControllerLabel {
        controller: CONTROLLER.to_owned(),
    }
}

impl Metrics {
    /// Registers every metric; series with fixed labels start at zero so dashboards see them.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconcile_duration: HistogramFamily<NamespaceResult> =
            Family::new_with_constructor(reconcile_histogram);
        let clusters = Family::<NamespacePhase, Gauge>::default();
        let cr_reconcile_total = Family::<ControllerResult, Counter>::default();
        let cr_reconcile_errors = Family::<ControllerLabel, Counter>::default();
        let cr_reconcile_time: HistogramFamily<ControllerLabel> =
            Family::new_with_constructor(reconcile_histogram);
        let cr_max_concurrent = Family::<ControllerLabel, Gauge>::default();
        let cr_active_workers = Family::<ControllerLabel, Gauge>::default();
        let errors = Family::<CategoryLabel, Counter>::default();
        let api_writes = Family::<WriteLabels, Counter>::default();
        let probes = Family::<OutcomeLabel, Counter>::default();
        let probe_duration: HistogramFamily<OutcomeLabel> =
            Family::new_with_constructor(probe_histogram);
        let leader = Gauge::default();
        let deferred = Counter::default();
        let replication_lag = Family::<NamespaceNamePod, Gauge>::default();
        registry.register(
            "database_cluster_replication_lag_seconds",
            "Replication delay of a replica as its server reports it at the operator's last probe (seconds behind its primary)",
            replication_lag.clone(),
        );
        let last_backup = Family::<NamespaceName, Gauge>::default();
        registry.register(
            "database_cluster_last_backup_timestamp_seconds",
            "Completion time (Unix seconds) of the last backup of a DatabaseCluster (status.lastBackup)",
            last_backup.clone(),
        );

        registry.register(
            "database_cluster_reconcile_duration_seconds",
            "Time one DatabaseCluster reconcile took, by namespace and result",
            reconcile_duration.clone(),
        );
        registry.register(
            "database_clusters_total",
            "DatabaseClusters known to this operator, by namespace and phase",
            clusters.clone(),
        );
        // prometheus-client appends `_total` to counters.
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            cr_reconcile_total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            cr_reconcile_errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            cr_reconcile_time.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            cr_max_concurrent.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            cr_active_workers.clone(),
        );
        registry.register(
            "database_operator_reconcile_errors",
            "Reconcile errors by category (the reason of the Warning event each produces)",
            errors.clone(),
        );
        registry.register(
            "database_operator_api_writes",
            "Writes this operator made to the API server, by object kind and verb",
            api_writes.clone(),
        );
        registry.register(
            "database_operator_member_probes",
            "Probes of members' database servers, by outcome (reachable, unreachable, failed, not_dialled)",
            probes.clone(),
        );
        registry.register(
            "database_operator_member_probe_duration_seconds",
            "Time one probe of a member's database server took, by outcome",
            probe_duration.clone(),
        );
        registry.register(
            "database_operator_reconciles_deferred",
            "Reconciles put off until the watches showed this operator's previous writes (they would have planned them again)",
            deferred.clone(),
        );
        registry.register(
            "database_operator_leader",
            "1 while this replica holds the leader Lease, else 0",
            leader.clone(),
        );

        for result in ["success", "error", "requeue"] {
            drop(cr_reconcile_total.get_or_create(&ControllerResult {
                controller: CONTROLLER.to_owned(),
                result: result.to_owned(),
            }));
        }
        drop(cr_reconcile_errors.get_or_create(&controller()));
        drop(cr_active_workers.get_or_create(&controller()));
        drop(cr_max_concurrent.get_or_create(&controller()));
        for category in ErrorCategory::ALL {
            drop(errors.get_or_create(&CategoryLabel {
                category: category.as_str().to_owned(),
            }));
        }

        for outcome in PROBE_OUTCOMES {
            drop(probes.get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            }));
        }

        Self {
            registry,
            reconcile_duration,
            clusters,
            cr_reconcile_total,
            cr_reconcile_errors,
            cr_reconcile_time,
            cr_max_concurrent,
            cr_active_workers,
            errors,
            api_writes,
            probes,
            probe_duration,
            leader,
            deferred,
            cluster_counts: Mutex::new(BTreeMap::new()),
            last_backup,
            last_backups: Mutex::new(BTreeMap::new()),
            replication_lag,
            replication_lags: Mutex::new(BTreeMap::new()),
        }
    }

    /// Counts one reconcile put off until the watches show the operator's last writes.
    pub fn deferred(&self) {
        self.deferred.inc();
    }

    /// Records the configured concurrency.
    pub fn set_max_concurrent_reconciles(&self, n: u16) {
        self.cr_max_concurrent
            .get_or_create(&controller())
            .set(i64::from(n));
    }

    /// Marks one worker busy until the returned guard is dropped.
    pub fn worker(&self) -> ActiveWorker {
        let gauge = self.cr_active_workers.get_or_create_owned(&controller());
        gauge.inc();
        ActiveWorker { gauge }
    }

    /// Records the end of one reconcile.
    pub fn reconciled(&self, namespace: &str, outcome: Outcome, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        self.reconcile_duration
            .get_or_create(&NamespaceResult {
                namespace: namespace.to_owned(),
                result: outcome.as_str().to_owned(),
            })
            .observe(secs);
        self.cr_reconcile_time
            .get_or_create(&controller())
            .observe(secs);
        self.cr_reconcile_total
            .get_or_create(&ControllerResult {
                controller: CONTROLLER.to_owned(),
                result: outcome.controller_runtime().to_owned(),
            })
            .inc();
        if outcome == Outcome::Error {
            self.cr_reconcile_errors.get_or_create(&controller()).inc();
        }
    }

    /// Counts one error of `category`.
    pub fn error(&self, category: ErrorCategory) {
        self.errors
            .get_or_create(&CategoryLabel {
                category: category.as_str().to_owned(),
            })
            .inc();
    }

    /// Counts one probe of a member with its outcome ([`PROBE_OUTCOMES`]) and duration.
    pub fn probed(&self, outcome: &str, elapsed: Duration) {
        let label = OutcomeLabel {
            outcome: outcome.to_owned(),
        };
        self.probes.get_or_create(&label).inc();
        self.probe_duration
            .get_or_create(&label)
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one write to the API server.
    pub fn api_write(&self, kind: &str, verb: &str) {
        self.api_writes
            .get_or_create(&WriteLabels {
                kind: kind.to_owned(),
                verb: verb.to_owned(),
            })
            .inc();
    }

    /// Total writes counted so far (all kinds and verbs).
    pub fn api_writes_total(&self) -> u64 {
        let mut text = String::new();
        // Summing through the encoder keeps this independent of the family's internals.
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            return 0;
        }
        text.lines()
            .filter(|l| l.starts_with("database_operator_api_writes_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Sets the leader gauge.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Replaces the `database_clusters_total` series of one watch scope with `counts`
    /// ((namespace, phase) -> n); the series of other scopes stay.
    pub fn set_clusters(&self, scope: &str, counts: &BTreeMap<(String, String), i64>) {
        let mut all = self
            .cluster_counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        all.insert(scope.to_owned(), counts.clone());
        self.clusters.clear();
        for ((namespace, phase), n) in all.values().flatten() {
            self.clusters
                .get_or_create(&NamespacePhase {
                    namespace: namespace.clone(),
                    phase: phase.clone(),
                })
                .set(*n);
        }
    }

    /// Replaces the `database_cluster_last_backup_timestamp_seconds` series of one watch scope
    /// with `times`; the series of other scopes stay.
    pub fn set_last_backups(&self, scope: &str, times: &LastBackups) {
        let mut all = self
            .last_backups
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        all.insert(scope.to_owned(), times.clone());
        self.last_backup.clear();
        for ((namespace, name), seconds) in all.values().flatten() {
            self.last_backup
                .get_or_create(&NamespaceName {
                    namespace: namespace.clone(),
                    name: name.clone(),
                })
                .set(*seconds);
        }
    }

    /// Sets `database_cluster_replication_lag_seconds` for the replicas one scope's prober
    /// found in its last round; replicas and clusters no longer probed lose their series.
    pub fn set_replication_lags(&self, scope: &str, lags: &ReplicationLags) {
        let mut all = self
            .replication_lags
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        all.insert(scope.to_owned(), lags.clone());
        self.replication_lag.clear();
        for ((namespace, name, pod), seconds) in all.values().flatten() {
            self.replication_lag
                .get_or_create(&NamespaceNamePod {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    pod: pod.clone(),
                })
                .set(*seconds);
        }
    }

    /// Drops every `database_clusters_total` series (this replica stopped leading).
    pub fn clear_clusters(&self) {
        let mut all = self
            .cluster_counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        all.clear();
        self.clusters.clear();
        self.last_backups
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
        self.last_backup.clear();
        self.replication_lags
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
        self.replication_lag.clear();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// A busy worker; dropping it frees the slot in `controller_runtime_active_workers`.
#[derive(Debug)]
pub struct ActiveWorker {
    gauge: Gauge,
}

impl Drop for ActiveWorker {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_carries_every_documented_series() {
        let m = Metrics::new();
        m.set_max_concurrent_reconciles(5);
        m.set_leader(true);
        {
            let _w = m.worker();
            m.reconciled("shop", Outcome::Success, Duration::from_millis(3));
        }
        m.reconciled("shop", Outcome::Error, Duration::from_millis(3));
        m.error(ErrorCategory::Kube);
        m.api_write("StatefulSet", "apply");
        m.api_write("StatefulSet", "apply");
        m.probed("unreachable", Duration::from_millis(1500));
        m.set_clusters(
            "*",
            &BTreeMap::from([(("shop".to_owned(), "Running".to_owned()), 2)]),
        );
        let text = m.encode().unwrap();
        for needle in [
            "database_cluster_reconcile_duration_seconds_bucket{",
            "namespace=\"shop\"",
            "result=\"success\"",
            "database_clusters_total{namespace=\"shop\",phase=\"Running\"} 2",
            "controller_runtime_reconcile_total{controller=\"databasecluster\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"databasecluster\",result=\"error\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"databasecluster\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"databasecluster\"} 2",
            "controller_runtime_max_concurrent_reconciles{controller=\"databasecluster\"} 5",
            "controller_runtime_active_workers{controller=\"databasecluster\"} 0",
            "database_operator_reconcile_errors_total{category=\"Kube\"} 1",
            "database_operator_reconcile_errors_total{category=\"Conflict\"} 0",
            "database_operator_api_writes_total{kind=\"StatefulSet\",verb=\"apply\"} 2",
            "database_operator_leader 1",
            "database_operator_member_probes_total{outcome=\"unreachable\"} 1",
            "database_operator_member_probes_total{outcome=\"reachable\"} 0",
            "database_operator_member_probe_duration_seconds_count{outcome=\"unreachable\"} 1",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
        assert_eq!(m.api_writes_total(), 2);
    }

    #[test]
    fn cluster_gauge_is_replaced_not_accumulated() {
        let m = Metrics::new();
        m.set_clusters(
            "a",
            &BTreeMap::from([(("a".to_owned(), "Pending".to_owned()), 1)]),
        );
        m.set_clusters(
            "b",
            &BTreeMap::from([(("b".to_owned(), "Running".to_owned()), 3)]),
        );
        m.set_clusters(
            "a",
            &BTreeMap::from([(("a".to_owned(), "Running".to_owned()), 1)]),
        );
        let text = m.encode().unwrap();
        assert!(text.contains("database_clusters_total{namespace=\"a\",phase=\"Running\"} 1"));
        assert!(
            text.contains("database_clusters_total{namespace=\"b\",phase=\"Running\"} 3"),
            "other scopes stay"
        );
        assert!(!text.contains("phase=\"Pending\""), "{text}");
        m.clear_clusters();
        assert!(!m.encode().unwrap().contains("database_clusters_total{"));
    }

    #[test]
    fn last_backup_gauge_follows_the_statuses() {
        let m = Metrics::new();
        let key = |ns: &str, name: &str| (ns.to_owned(), name.to_owned());
        m.set_last_backups(
            "a",
            &BTreeMap::from([(key("shop", "orders"), 1_772_330_400)]),
        );
        m.set_last_backups("b", &BTreeMap::from([(key("web", "users"), 1_772_330_500)]));
        m.set_replication_lags(
            "a",
            &BTreeMap::from([(("shop".into(), "orders".into(), "orders-1".into()), 7)]),
        );
        assert!(
            m.encode().unwrap().contains(
                "database_cluster_replication_lag_seconds{namespace=\"shop\",name=\"orders\",pod=\"orders-1\"} 7"
            )
        );
        m.set_replication_lags("a", &BTreeMap::new());
        assert!(
            !m.encode()
                .unwrap()
                .contains("database_cluster_replication_lag_seconds{")
        );
        let text = m.encode().unwrap();
        assert!(
            text.contains("database_cluster_last_backup_timestamp_seconds{namespace=\"shop\",name=\"orders\"} 1772330400"),
            "{text}"
        );
        // A cluster gone from a scope loses its series; the other scope's stays.
        m.set_last_backups("a", &BTreeMap::new());
        let text = m.encode().unwrap();
        assert!(!text.contains("name=\"orders\""), "{text}");
        assert!(text.contains("name=\"users\""), "{text}");
        m.clear_clusters();
        assert!(
            !m.encode()
                .unwrap()
                .contains("database_cluster_last_backup_timestamp_seconds{")
        );
    }

    #[test]
    fn active_workers_follow_guards() {
        let m = Metrics::new();
        let a = m.worker();
        let _b = m.worker();
        assert!(
            m.encode()
                .unwrap()
                .contains("controller_runtime_active_workers{controller=\"databasecluster\"} 2")
        );
        drop(a);
        assert!(
            m.encode()
                .unwrap()
                .contains("controller_runtime_active_workers{controller=\"databasecluster\"} 1")
        );
    }
}
