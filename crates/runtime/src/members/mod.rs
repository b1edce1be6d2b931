//! Reaching the members' database servers: the operator's credentials (the `<name>-operator`
//! Secret), the address of each member, a [`DatabaseIo`] per member, and the facts cache the
//! prober fills and a reconcile reads.
//!
//! | file | does | IO |
//! | --- | --- | --- |
//! | `mod.rs` | [`Members`] (a driver per member, generic so tests use mocks), [`KubeMembers`], [`AnyDatabaseIo`] | one Secret GET when its resourceVersion moved |
//! | `credentials.rs` | [`Credentials`] from the operator Secret, cached by resourceVersion, never logged | the GET |
//! | `lease.rs` | the primary Lease of `nodeLoss: SelfFence` clusters as read each round, [`LeaseCache`] | no (the GET is [`Members::primary_lease`]) |
//! | `facts.rs` | runtime facts to core [`database_operator_core::MemberFacts`], the source host to a member, [`FactsCache`] and what counts as a material change | no |
//!
//! The core decides; this module only dials. A member is dialled at
//! [`member_host`]: the headless Service's per-pod name, or the pod IP with
//! `--member-address=pod-ip` (the local control plane).

mod credentials;
mod facts;
mod lease;
mod trust;

use std::sync::Arc;
use std::time::Duration;

use database_operator_api::DatabaseCluster;
use database_operator_core::render::statefulset::RUN_MOUNT_PATH;
use database_operator_engine::Protocol;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

pub use credentials::{Credentials, CredentialsCache, Remembered};
use database_operator_core::backup::signature::SigningKey;
pub use facts::{FactsCache, FactsChange, PodAddress, core_facts, source_member};
pub use lease::{LeaseCache, LeaseRead};
pub use trust::TrustCache;

use crate::database::mysql::MysqlConfig;
use crate::database::postgres::PostgresConfig;
use crate::database::{
    Account, DatabaseIo, DbError, MemberAddress, MemberFacts, MysqlIo, NoAddress, PostgresIo,
    Secret, SourceTls, Timeouts, member_host,
};
use crate::secrets::{KubeSecrets, SecretSource};
use crate::stores::Stores;

/// Why a member could not be dialled.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// The operator Secret does not exist (yet): the operator has no account on the servers.
    #[error(
        "Secret {namespace}/{name} does not exist: the operator has no credentials for the members"
    )]
    NoCredentials {
        /// Namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
    /// The operator Secret lacks a key.
    #[error("Secret {namespace}/{name} has no key {key}")]
    KeyMissing {
        /// Namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The missing key.
        key: &'static str,
    },
    /// The Secret could not be read.
    #[error(transparent)]
    Secret(Box<crate::Error>),
    /// The member has no address yet.
    #[error(transparent)]
    NoAddress(#[from] NoAddress),
    /// The password Secret's value cannot be a password
    /// ([`database_operator_core::PasswordProblem`]).
    #[error("Secret {namespace}/{name} key {key}: the value {} and cannot be a password", problem.describe())]
    Unusable {
        /// Namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The key.
        key: String,
        /// What is wrong with the value.
        problem: database_operator_core::PasswordProblem,
    },
    /// The cluster's published authority (`<name>-ca`) is missing or unusable while the member
    /// serves TLS: the operator does not dial it without checking its certificate.
    #[error("Secret {namespace}/{name}: {problem}; the member's certificate cannot be checked")]
    NoTrust {
        /// Namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// The member's pod is not in the cache.
    #[error("pod {namespace}/{pod} is not known")]
    NoPod {
        /// Namespace.
        namespace: String,
        /// The pod.
        pod: String,
    },
}

impl MemberError {
    /// A short label for logs and metrics.
    pub const fn kind(&self) -> &'static str {
        match self {
            MemberError::NoCredentials { .. } => "no_credentials",
            MemberError::KeyMissing { .. } => "key_missing",
            MemberError::Secret(_) => "secret_unreadable",
            MemberError::Unusable { .. } => "secret_unusable",
            MemberError::NoAddress(_) | MemberError::NoPod { .. } => "no_address",
            MemberError::NoTrust { .. } => "no_trust",
        }
    }
}

/// The members' servers of a cluster, one driver per member. Used through generics (never
/// `dyn`), so futures keep their auto traits; tests implement it over mocks.
#[allow(async_fn_in_trait)]
pub trait Members: Send + Sync {
    /// The driver of one member.
    type Io: DatabaseIo;
    /// A driver for the member `pod` of `cluster`, for `purpose` (a probe is dialled with a
    /// shorter timeout than a command).
    async fn dial(
        &self,
        cluster: &DatabaseCluster,
        pod: &str,
        purpose: Purpose,
    ) -> Result<Self::Io, MemberError>;
    /// The host another member replicates from to follow `pod` (what `follow` is given).
    fn host(&self, cluster: &DatabaseCluster, pod: &str) -> Result<String, MemberError>;
    /// The superuser password `spec.passwordSecretRef` holds now, with its fingerprint (as
    /// [`crate::secrets::fingerprint`] computes it), read when a password command is carried out;
    /// `None` when the Secret or its key is gone. Never logged.
    async fn superuser_password(
        &self,
        cluster: &DatabaseCluster,
    ) -> Result<Option<(String, Secret)>, MemberError>;
    /// The primary Lease of `cluster` (`nodeLoss: SelfFence`), read from the API server, not a
    /// cache. `Ok(None)`: this source reads no Leases (then no failover counts on one).
    async fn primary_lease(&self, cluster: &DatabaseCluster) -> Result<Option<LeaseRead>, String> {
        let _ = cluster;
        Ok(None)
    }
    /// Until when this replica certainly leads, confirmed now from the operator's leader Lease
    /// on the API server (not a cache; [`crate::leader::term_end`]). Database steps run only
    /// before it. `Ok(None)`: no leader election (a single replica), nothing to confirm.
    /// `Err`: not confirmed (another holder, expired, or the Lease could not be read).
    async fn leadership_term(&self) -> Result<Option<std::time::Instant>, String> {
        Ok(None)
    }
    /// The operator Secret of `cluster` as this process last read it, kept after the Secret is
    /// gone (what [`database_operator_core::credentials::SecretChange::Restore`] writes back).
    /// `None`: never read, or this source keeps nothing.
    fn remembered_credentials(&self, cluster: &DatabaseCluster) -> Option<Arc<Remembered>> {
        let _ = cluster;
        None
    }
    /// The cluster's password fingerprint key: the operator Secret's `backup-signing-key` (read
    /// or remembered; [`database_operator_common::fingerprint::keyed_fingerprint`]). `None`:
    /// no such Secret or key yet (the fingerprint is then unkeyed), or this source keeps none.
    async fn fingerprint_key(&self, cluster: &DatabaseCluster) -> Option<SigningKey> {
        let _ = cluster;
        None
    }
    /// Forgets what is remembered of the clusters `keep` says no to (deleted ones).
    fn forget_credentials(&self, keep: &mut dyn FnMut(&str, &str) -> bool) {
        let _ = keep;
    }
    /// Whether the pod `pod` mounts the cluster's server certificate (its server serves TLS, and
    /// it has the authority to check its source with). `false` where this source knows no pods.
    fn serves_tls(&self, cluster: &DatabaseCluster, pod: &str) -> bool {
        let _ = (cluster, pod);
        false
    }
    /// Whether the pods of both `pod` and `source` mount the cluster's server certificate
    /// ([`Members::serves_tls`]).
    fn both_serve_tls(&self, cluster: &DatabaseCluster, pod: &str, source: &str) -> bool {
        self.serves_tls(cluster, pod) && self.serves_tls(cluster, source)
    }
}

/// Why a member is dialled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A periodic probe: a short connect timeout, so a hung server counts as unreachable fast.
    Probe,
    /// A database command (fence, promote, follow).
    Command,
}

/// One member's driver, whatever its engine.
#[derive(Clone, Debug)]
pub enum AnyDatabaseIo {
    /// PostgreSQL.
    Postgres(PostgresIo),
    /// MySQL or MariaDB.
    Mysql(MysqlIo),
}

impl DatabaseIo for AnyDatabaseIo {
    async fn probe(&self) -> Result<MemberFacts, DbError> {
        match self {
            AnyDatabaseIo::Postgres(io) => io.probe().await,
            AnyDatabaseIo::Mysql(io) => io.probe().await,
        }
    }

    async fn fence(&self) -> Result<(), DbError> {
        match self {
            AnyDatabaseIo::Postgres(io) => io.fence().await,
            AnyDatabaseIo::Mysql(io) => io.fence().await,
        }
    }

    async fn quarantine(&self) -> Result<(), DbError> {
        match self {
            AnyDatabaseIo::Postgres(io) => io.quarantine().await,
            AnyDatabaseIo::Mysql(io) => io.quarantine().await,
        }
    }

    async fn promote(&self) -> Result<(), DbError> {
        match self {
            AnyDatabaseIo::Postgres(io) => io.promote().await,
            AnyDatabaseIo::Mysql(io) => io.promote().await,
        }
    }

    async fn follow(&self, source_host: &str, port: u16, tls: &SourceTls) -> Result<(), DbError> {
        match self {
            AnyDatabaseIo::Postgres(io) => io.follow(source_host, port, tls).await,
            AnyDatabaseIo::Mysql(io) => io.follow(source_host, port, tls).await,
        }
    }

    async fn set_password(
        &self,
        account: &Account,
        password: &Secret,
        retain_old: bool,
    ) -> Result<(), DbError> {
        match self {
            AnyDatabaseIo::Postgres(io) => io.set_password(account, password, retain_old).await,
            AnyDatabaseIo::Mysql(io) => io.set_password(account, password, retain_old).await,
        }
    }

    async fn discard_old_password(&self, account: &Account) -> Result<(), DbError> {
        match self {
            AnyDatabaseIo::Postgres(io) => io.discard_old_password(account).await,
            AnyDatabaseIo::Mysql(io) => io.discard_old_password(account).await,
        }
    }

    async fn set_semi_sync(&self, enabled: bool) -> Result<(), DbError> {
        match self {
            AnyDatabaseIo::Postgres(io) => io.set_semi_sync(enabled).await,
            AnyDatabaseIo::Mysql(io) => io.set_semi_sync(enabled).await,
        }
    }

    async fn keep_member_slots(&self, slots: &[String]) -> Result<(), DbError> {
        match self {
            AnyDatabaseIo::Postgres(io) => io.keep_member_slots(slots).await,
            AnyDatabaseIo::Mysql(io) => io.keep_member_slots(slots).await,
        }
    }

    async fn reload_tls(&self) -> Result<(), DbError> {
        match self {
            AnyDatabaseIo::Postgres(io) => io.reload_tls().await,
            AnyDatabaseIo::Mysql(io) => io.reload_tls().await,
        }
    }
}

/// Timeouts of a probe: a hung (SIGSTOPped) server accepts the TCP connection but never
/// answers the handshake, so the connect timeout is what makes it count as unreachable.
pub const PROBE_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_millis(1500),
    statement: Duration::from_secs(3),
    promote: Duration::from_secs(3),
};

/// Timeouts of a database command.
pub const COMMAND_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(2),
    statement: Duration::from_secs(10),
    promote: Duration::from_secs(30),
};

/// [`Members`] over the watch caches (pod IPs), the operator Secret and the real drivers.
pub struct KubeMembers<S = KubeSecrets> {
    stores: Stores,
    secrets: S,
    credentials: CredentialsCache,
    trust: TrustCache,
    mode: MemberAddress,
    leases: Option<kube::Client>,
    leadership: Option<(kube::Client, crate::leader::LeaseSettings)>,
}

impl<S: SecretSource> KubeMembers<S> {
    /// Members found through `stores`, credentials read from `secrets`, dialled as `mode` says.
    pub fn new(stores: Stores, secrets: S, mode: MemberAddress) -> Self {
        KubeMembers {
            stores,
            secrets,
            credentials: CredentialsCache::default(),
            trust: TrustCache::default(),
            mode,
            leases: None,
            leadership: None,
        }
    }

    /// Confirms this replica's leadership from the Lease `settings` names before database
    /// steps ([`Members::leadership_term`]).
    pub fn with_leadership(
        mut self,
        client: kube::Client,
        settings: crate::leader::LeaseSettings,
    ) -> Self {
        self.leadership = Some((client, settings));
        self
    }

    /// Reads primary Leases through `client` ([`Members::primary_lease`]).
    pub fn with_leases(mut self, client: kube::Client) -> Self {
        self.leases = Some(client);
        self
    }

    /// The credentials of `cluster`, from its operator Secret.
    pub async fn credentials(
        &self,
        cluster: &DatabaseCluster,
    ) -> Result<std::sync::Arc<Credentials>, MemberError> {
        let namespace = cluster.namespace().unwrap_or_default();
        let name = database_operator_core::credentials::operator_secret_name(&cluster.name_any());
        let watched = self
            .stores
            .secrets
            .get(&ObjectRef::new(&name).within(&namespace));
        self.credentials
            .get(
                &self.secrets,
                &namespace,
                &name,
                watched
                    .as_ref()
                    .and_then(|m| m.metadata.resource_version.as_deref()),
            )
            .await
    }
}

impl<S: SecretSource> Members for KubeMembers<S> {
    type Io = AnyDatabaseIo;

    async fn dial(
        &self,
        cluster: &DatabaseCluster,
        pod: &str,
        purpose: Purpose,
    ) -> Result<AnyDatabaseIo, MemberError> {
        let host = self.host(cluster, pod)?;
        let credentials = self.credentials(cluster).await?;
        let tls = self.trust_for(cluster, pod).await?;
        let engine = cluster.spec.engine;
        let port = database_operator_engine::of(engine).port();
        let timeouts = match purpose {
            Purpose::Probe => PROBE_TIMEOUTS,
            Purpose::Command => COMMAND_TIMEOUTS,
        };
        Ok(match database_operator_engine::of(engine).protocol() {
            Protocol::Postgres => AnyDatabaseIo::Postgres(PostgresIo::new(PostgresConfig {
                engine,
                host,
                port,
                user: credentials.admin_user.clone(),
                password: credentials.admin_password.clone(),
                dbname: "postgres".to_owned(),
                timeouts,
                replication_user: credentials.replication_user.clone(),
                // Written by init.sh on every start; primary_conninfo names it.
                replication_passfile: Some(format!("{RUN_MOUNT_PATH}/pgpass")),
                application_name: Some(pod.to_owned()),
                tls: tls.clone(),
            })),
            Protocol::Mysql => AnyDatabaseIo::Mysql(MysqlIo::new(MysqlConfig {
                engine,
                host,
                port,
                user: credentials.admin_user.clone(),
                password: credentials.admin_password.clone(),
                timeouts,
                replication_user: credentials.replication_user.clone(),
                replication_password: credentials.replication_password.clone(),
                tls,
            })),
        })
    }

    fn host(&self, cluster: &DatabaseCluster, pod: &str) -> Result<String, MemberError> {
        let namespace = cluster.namespace().unwrap_or_default();
        let ip = match self.mode {
            MemberAddress::Dns => None,
            MemberAddress::PodIp => {
                let cached = self
                    .stores
                    .pods
                    .get(&ObjectRef::new(pod).within(&namespace))
                    .ok_or_else(|| MemberError::NoPod {
                        namespace: namespace.clone(),
                        pod: pod.to_owned(),
                    })?;
                cached.pod_ip().map(str::to_owned)
            }
        };
        Ok(member_host(
            self.mode,
            pod,
            &cluster.name_any(),
            &namespace,
            ip.as_deref(),
        )?)
    }

    async fn superuser_password(
        &self,
        cluster: &DatabaseCluster,
    ) -> Result<Option<(String, Secret)>, MemberError> {
        let namespace = cluster.namespace().unwrap_or_default();
        let selector = &cluster.spec.password_secret_ref;
        let Some(secret) = self
            .secrets
            .get(&namespace, &selector.name)
            .await
            .map_err(|e| MemberError::Secret(Box::new(e)))?
        else {
            return Ok(None);
        };
        let Some(value) = secret.data.as_ref().and_then(|d| d.get(&selector.key)) else {
            return Ok(None);
        };
        // As the plan fingerprinted it: keyed once the cluster has its key.
        let key = self.fingerprint_key(cluster).await;
        let (fingerprint, _) =
            crate::secrets::fingerprints(key.as_ref(), &secret.uid().unwrap_or_default(), &value.0);
        // The plan never asks for a password it refused; this keeps a value that changed to an
        // unusable one since from reaching a server (lossy text would differ from the
        // fingerprint).
        if let Some(problem) = database_operator_core::PasswordProblem::of(&value.0) {
            return Err(MemberError::Unusable {
                namespace,
                name: selector.name.clone(),
                key: selector.key.clone(),
                problem,
            });
        }
        let text = String::from_utf8_lossy(&value.0).into_owned();
        Ok(Some((fingerprint, Secret::new(text))))
    }

    fn serves_tls(&self, cluster: &DatabaseCluster, pod: &str) -> bool {
        let namespace = cluster.namespace().unwrap_or_default();
        let secret = database_operator_core::tls::server_secret_name(&cluster.name_any());
        self.stores
            .pods
            .get(&ObjectRef::new(pod).within(&namespace))
            .is_some_and(|cached| cached.tls_secret() == Some(secret.as_str()))
    }

    fn remembered_credentials(&self, cluster: &DatabaseCluster) -> Option<Arc<Remembered>> {
        let namespace = cluster.namespace().unwrap_or_default();
        let name = database_operator_core::credentials::operator_secret_name(&cluster.name_any());
        self.credentials.remembered(&namespace, &name)
    }

    async fn fingerprint_key(&self, cluster: &DatabaseCluster) -> Option<SigningKey> {
        // Read through the credentials' cache (again only when the Secret's resourceVersion
        // moved); what it read is remembered, also after the Secret is gone.
        if let Err(error) = self.credentials(cluster).await {
            tracing::debug!(cluster = %cluster.name_any(), %error, "no operator Secret to key the password fingerprint with: unkeyed");
        }
        let remembered = self.remembered_credentials(cluster)?;
        let value = remembered
            .data
            .get(database_operator_core::credentials::SIGNING_KEY_KEY)?;
        SigningKey::new(&value.0).ok()
    }

    fn forget_credentials(&self, keep: &mut dyn FnMut(&str, &str) -> bool) {
        let suffix = database_operator_core::credentials::OPERATOR_SECRET_SUFFIX;
        self.credentials.retain(|ns, secret| {
            secret
                .strip_suffix(suffix)
                .is_some_and(|cluster| keep(ns, cluster))
        });
    }

    async fn leadership_term(&self) -> Result<Option<std::time::Instant>, String> {
        match &self.leadership {
            None => Ok(None),
            Some((client, settings)) => crate::leader::confirm_term(client, settings)
                .await
                .map(Some),
        }
    }

    async fn primary_lease(&self, cluster: &DatabaseCluster) -> Result<Option<LeaseRead>, String> {
        let Some(client) = &self.leases else {
            return Ok(None);
        };
        let namespace = cluster.namespace().unwrap_or_default();
        let name = [
            cluster.name_any().as_str(),
            database_operator_core::PRIMARY_LEASE_SUFFIX,
        ]
        .concat();
        let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(client.clone(), &namespace);
        match api.get_opt(&name).await {
            Ok(Some(lease)) => Ok(Some(LeaseRead::of(&lease))),
            Ok(None) => Ok(Some(LeaseRead::Missing)),
            Err(e) => Err(e.to_string()),
        }
    }
}
