//! Everything one reconcile needs, and the `Observed` it gathers from the caches (plus one GET
//! of a password Secret whose resourceVersion moved). The members' facts come from the
//! prober's cache ([`FactsCache`]), never from a probe made by the reconcile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use database_operator_api::DatabaseCluster;
use database_operator_core::credentials::OperatorSecretState;
use database_operator_core::{KindVisitor, Observed, OperatorConfig, OwnedResource};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::lane::WriteLane;
use super::scope::Scope;
use super::synced::Synced;
use crate::cache::CachedPod;
use crate::echo::{Echoes, Target};
use crate::error::{Backoff, Error};
use crate::io::KubeIo;
use crate::members::{FactsCache, KubeMembers, Members};
use crate::metrics::Metrics;
use crate::reconcile::{Failures, KnownMatches, PasswordOutcomes};
use crate::secrets::{Fingerprints, KubeSecrets, SecretSource};
use crate::stores::{
    Stores, backup_jobs_of, cleanup_job_of, operator_secret_of, owned_objects, pods_of, volumes_of,
};

/// How the prober runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSettings {
    /// Time between two probe rounds.
    pub interval: Duration,
    /// Members probed at once.
    pub concurrency: usize,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        ProbeSettings {
            interval: Duration::from_secs(2),
            concurrency: 16,
        }
    }
}

/// Everything one reconcile needs.
pub struct Context<I = KubeIo, S = KubeSecrets, M = KubeMembers> {
    /// Cluster writes.
    pub io: I,
    /// The members' database servers (probes and database steps).
    pub members: M,
    /// The prober's latest facts per cluster.
    pub facts: FactsCache,
    /// The last database step failure reported per cluster (an event once per distinct one).
    pub database_failures: Failures,
    /// The last password step's outcome per cluster.
    pub password_outcomes: PasswordOutcomes,
    /// How the prober runs.
    pub probe: ProbeSettings,
    /// Where Secrets are read from when a fingerprint is stale.
    pub secret_source: S,
    /// Fingerprint cache.
    pub fingerprints: Fingerprints,
    /// The checks on the certificates users provide (`spec.tls.certificateSecret`).
    pub provided_certs: crate::provided_cert::Checked,
    /// The caches.
    pub stores: Stores,
    /// Failures per cluster, for backoff and once-only reporting.
    pub failures: Failures,
    /// Comparisons of owned objects the last reconciles found unchanged.
    pub known_matches: KnownMatches,
    /// Writes of the last reconciles the watches have not shown yet.
    pub echoes: Echoes,
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
    /// Places for the reconciles that write objects ([`super::lane`]).
    pub lane: WriteLane,
}

/// Builds the Observed for `cluster` from the caches (and the fingerprint cache).
pub async fn gather<I, S: SecretSource, M: Members>(
    ctx: &Context<I, S, M>,
    cluster: &DatabaseCluster,
) -> Result<Observed, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let secret_ref = &cluster.spec.password_secret_ref;
    let watched = ctx
        .stores
        .secrets
        .get(&ObjectRef::new(&secret_ref.name).within(&namespace));
    let fingerprint_key = ctx.members.fingerprint_key(cluster).await;
    let (secret, secret_unkeyed_fingerprint) = ctx
        .fingerprints
        .state(
            &ctx.secret_source,
            &namespace,
            &secret_ref.name,
            &secret_ref.key,
            watched
                .as_ref()
                .and_then(|m| m.metadata.resource_version.as_deref()),
            fingerprint_key.as_ref(),
        )
        .await?;
    let name = cluster.name_any();
    let uids: Vec<(String, String)> = ctx
        .stores
        .pod_index
        .pods_of(&namespace, &name)
        .iter()
        .filter_map(|pod| {
            let cached: std::sync::Arc<CachedPod> = ctx
                .stores
                .pods
                .get(&ObjectRef::new(pod).within(&namespace))?;
            Some((pod.clone(), cached.uid().unwrap_or_default()))
        })
        .collect();
    let member_facts = ctx.facts.get(
        &namespace,
        &name,
        uids.iter().map(|(p, u)| (p.as_str(), u.as_str())),
    );
    let operator_secret = match operator_secret_of(&ctx.stores, cluster) {
        OperatorSecretState::Missing if ctx.members.remembered_credentials(cluster).is_some() => {
            OperatorSecretState::MissingRemembered
        }
        state => state,
    };
    let mut tls = crate::stores::tls_of(&ctx.stores, cluster);
    if let Some(provided) =
        database_operator_api::TlsSpec::provided_secret(cluster.spec.tls.as_ref())
    {
        let watched = ctx
            .stores
            .secrets
            .get(&ObjectRef::new(provided).within(&namespace));
        tls.provided = Some(
            crate::provided_cert::observe(
                &ctx.provided_certs,
                &ctx.secret_source,
                &namespace,
                provided,
                watched
                    .as_ref()
                    .and_then(|m| m.metadata.resource_version.as_deref()),
                tls.server
                    .as_ref()
                    .and_then(|s| s.source_version.as_deref()),
                std::time::SystemTime::now(),
            )
            .await?,
        );
    }
    Ok(Observed {
        cluster: cluster.clone(),
        owned: owned_objects(&ctx.stores, cluster),
        pods: pods_of(&ctx.stores, cluster),
        secret,
        secret_unkeyed_fingerprint,
        now: Timestamp::now(),
        config: ctx.config.clone(),
        known_matches: ctx.known_matches.get(&namespace, &name),
        cleanup_job: cleanup_job_of(&ctx.stores, cluster),
        backup_jobs: backup_jobs_of(&ctx.stores, cluster),
        member_facts,
        operator_secret,
        password_outcome: ctx.password_outcomes.get(&namespace, &cluster.name_any()),
        primary_lease: ctx.facts.lease(&namespace, &cluster.name_any()),
        volumes: volumes_of(&ctx.stores, cluster),
        tls,
    })
}

/// The version of `target` (an object of `cluster`, which is itself at `cluster`'s version)
/// in the caches: `None` when the cache does not hold it.
pub fn cached_version(
    stores: &Stores,
    cluster: &DatabaseCluster,
    target: &Target,
) -> Option<String> {
    let namespace = cluster.namespace().unwrap_or_default();
    match target {
        Target::Cluster => cluster.metadata.resource_version.clone(),
        Target::Owned(key) => {
            struct Lookup<'a>(&'a Stores, &'a str, &'a str);
            impl KindVisitor for Lookup<'_> {
                type Output = Option<String>;
                fn visit<K: OwnedResource>(self) -> Option<String> {
                    let store = self.0.owned.get::<K>()?;
                    let entry = store.get(&ObjectRef::new(self.2).within(self.1))?;
                    entry.meta().resource_version.clone()
                }
            }
            key.kind.visit(Lookup(stores, &namespace, &key.name))
        }
        Target::Pod(name) => stores
            .pods
            .get(&ObjectRef::new(name).within(&namespace))?
            .meta()
            .resource_version
            .clone(),
        Target::Secret(name) => stores
            .secrets
            .get(&ObjectRef::new(name).within(&namespace))?
            .metadata
            .resource_version
            .clone(),
        Target::Job(name) => stores
            .jobs
            .get(&ObjectRef::new(name).within(&namespace))?
            .metadata
            .resource_version
            .clone(),
        Target::Claim(name) => stores
            .claims
            .get(&ObjectRef::new(name).within(&namespace))?
            .meta()
            .resource_version
            .clone(),
    }
}

/// The versions, in the caches, of everything a reconcile of `cluster` may write: taken just
/// before it gathers its [`Observed`], so a write's "before" is what the plan was made from.
pub fn versions_before(
    stores: &Stores,
    cluster: &DatabaseCluster,
) -> HashMap<Target, Option<String>> {
    let namespace = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let mut targets: Vec<Target> = vec![Target::Cluster];
    targets.extend(
        database_operator_core::owned_object_keys(&name)
            .into_iter()
            .map(Target::Owned),
    );
    targets.extend(
        stores
            .pod_index
            .pods_of(&namespace, &name)
            .iter()
            .map(|p| Target::Pod(p.clone())),
    );
    targets.push(Target::Secret(
        database_operator_core::credentials::operator_secret_name(&name),
    ));
    targets.push(Target::Job(
        database_operator_core::render::cleanup_job::name(&name),
    ));
    targets.extend(
        (0..cluster.spec.replicas)
            .map(|o| Target::Claim(database_operator_core::storage::claim_name(&name, o))),
    );
    targets
        .into_iter()
        .map(|t| {
            let v = cached_version(stores, cluster, &t);
            (t, v)
        })
        .collect()
}
