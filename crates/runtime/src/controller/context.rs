//! Everything one reconcile needs, and the `Observed` it gathers from the caches (plus one GET
//! of a password Secret whose resourceVersion moved).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use database_operator_api::DatabaseCluster;
use database_operator_core::{Observed, OperatorConfig};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::scope::Scope;
use super::stores::{
    Stores, backup_jobs_of, cleanup_job_of, operator_secret_of, owned_objects, pods_of,
};
use super::synced::Synced;
use crate::error::{Backoff, Error};
use crate::io::KubeIo;
use crate::metrics::Metrics;
use crate::reconcile::{Failures, KnownMatches};
use crate::secrets::{Fingerprints, KubeSecrets, SecretSource};

/// Everything one reconcile needs.
pub struct Context<I = KubeIo, S = KubeSecrets> {
    /// Cluster writes.
    pub io: I,
    /// Where Secrets are read from when a fingerprint is stale.
    pub secret_source: S,
    /// Fingerprint cache.
    pub fingerprints: Fingerprints,
    /// The caches.
    pub stores: Stores,
    /// Failures per cluster, for backoff and once-only reporting.
    pub failures: Failures,
    /// Comparisons of owned objects the last reconciles found unchanged.
    pub known_matches: KnownMatches,
    /// When the cluster gauge was last recounted.
    pub gauge_refreshed: Mutex<Option<Instant>>,
    /// Retry delays.
    pub backoff: Backoff,
    /// Installation settings passed to the core.
    pub config: OperatorConfig,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The scope, for the cluster gauge.
    pub scope: Scope,
    /// Unreadable objects already reported, by (namespace, name) -> resourceVersion.
    pub invalid_reported: Mutex<HashMap<(String, String), String>>,
    /// Whether every watch has its first complete list; reconciles wait for it.
    pub synced: Synced,
}

/// Builds the Observed for `cluster` from the caches (and the fingerprint cache).
pub async fn gather<I, S: SecretSource>(
    ctx: &Context<I, S>,
    cluster: &DatabaseCluster,
) -> Result<Observed, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let secret_ref = &cluster.spec.password_secret_ref;
    let watched = ctx
        .stores
        .secrets
        .get(&ObjectRef::new(&secret_ref.name).within(&namespace));
    let secret = ctx
        .fingerprints
        .state(
            &ctx.secret_source,
            &namespace,
            &secret_ref.name,
            &secret_ref.key,
            watched
                .as_ref()
                .and_then(|m| m.metadata.resource_version.as_deref()),
        )
        .await?;
    let operator_secret = operator_secret_of(&ctx.stores, cluster);
    Ok(Observed {
        cluster: cluster.clone(),
        owned: owned_objects(&ctx.stores, cluster),
        pods: pods_of(&ctx.stores, cluster),
        secret,
        now: Timestamp::now(),
        config: ctx.config.clone(),
        known_matches: ctx.known_matches.get(&namespace, &cluster.name_any()),
        cleanup_job: cleanup_job_of(&ctx.stores, cluster),
        backup_jobs: backup_jobs_of(&ctx.stores, cluster),
        // The prober is not wired yet: no facts, so failover never starts.
        member_facts: Default::default(),
        operator_secret,
        password_outcome: None,
    })
}
