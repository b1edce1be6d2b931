//! # database-operator-core
//!
//! The planning core of database-operator: a pure, deterministic function from what a
//! `DatabaseCluster` and its objects look like ([`Observed`]) to what they should look like
//! ([`Plan`]). It does no IO, reads no clock, draws no random numbers and reads no environment:
//! `now` and every fact arrive as arguments, so the same input always gives byte-identical
//! output, and the whole decision logic is unit- and property-testable without a cluster.
//!
//! The runtime crate gathers an `Observed` from its watch caches, calls [`plan()`], and carries the
//! plan out (server-side apply of the objects that changed, deletes, pod actions, a status patch
//! when the status changed, events), then looks again after [`Plan::requeue_after`].
//!
//! Applying a plan and observing the result yields a plan with nothing to change (the fixpoint
//! property, tested).
//!
//! ```
//! use database_operator_api::{DatabaseCluster, DatabaseClusterSpec, Engine, Phase, SecretKeySelector, StorageSpec};
//! use database_operator_core::{plan, Change, Observed, OperatorConfig, OwnedObjects, SecretState};
//! use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
//!
//! let mut cluster = DatabaseCluster::new("orders", DatabaseClusterSpec {
//!     engine: Engine::Postgresql,
//!     version: "16.4".into(),
//!     replicas: 3,
//!     storage: StorageSpec { size: Quantity("50Gi".into()), storage_class_name: None },
//!     resources: None,
//!     scheduling: None,
//!     backup: None,
//!     password_secret_ref: SecretKeySelector { name: "orders-db".into(), key: "password".into() },
//!     failover: None,
//!     replication: None,
//!     password_rotation: None,
//!     upgrade: None,
//!     bootstrap: None,
//!     network_policy: None,
//!     tls: None,
//! });
//! cluster.metadata.namespace = Some("shop".into());
//! cluster.metadata.uid = Some("0b7e3c1a-5f7e-4c1e-9f1e-0a1b2c3d4e5f".into());
//! cluster.metadata.generation = Some(1);
//!
//! let observed = Observed {
//!     cluster,
//!     owned: OwnedObjects::default(),
//!     pods: Vec::new(),
//!     secret: SecretState::Present { fingerprint: "3f2a9c".into() },
//!     secret_unkeyed_fingerprint: None,
//!     now: "2026-03-01T12:00:00Z".parse().unwrap(),
//!     config: OperatorConfig::default(),
//!     known_matches: Default::default(),
//!     cleanup_job: None,
//!     backup_jobs: Vec::new(),
//!     member_facts: Default::default(),
//!     operator_secret: Default::default(),
//!     password_outcome: None,
//!     primary_lease: None,
//!     volumes: Vec::new(),
//!     tls: Default::default(),
//! };
//! let plan = plan(&observed);
//!
//! // Nothing exists yet: every object is to be created, the cluster is Initializing.
//! assert!(plan.objects.iter().all(|o| o.change == Change::Create));
//! let names: Vec<String> = plan.objects.iter().map(|o| format!("{:?}/{}", o.object.kind(), o.object.key().name)).collect();
//! assert_eq!(names, [
//!     "ConfigMap/orders-config",
//!     "Service/orders-headless",
//!     "Service/orders",
//!     "Service/orders-replicas",
//!     "StatefulSet/orders",
//!     "PodDisruptionBudget/orders",
//!     "NetworkPolicy/orders-access",
//! ]);
//! assert_eq!(plan.status.phase, Some(Phase::Initializing));
//! assert!(plan.status_changed);
//! ```
//!
//! ## Modules
//! - [`plan`](mod@plan): one pass, calling the decisions below in order.
//! - [`members`]: which pods are members, the versions they run, the primary, the role labels.
//! - [`failover`]: failover and switchover, advanced once per pass, progress in `status.failover`.
//! - [`render`]: one file per object kind; the engine scripts it renders are the engine
//!   crate's (`database_operator_engine::scripts`).
//! - [`diff`]: whether an observed object already matches the desired one.
//! - [`status`]: phase and conditions; [`compose`]: the whole status of a pass, in one place.
//! - [`events`]: which events a pass emits ([`EventReason`]).
//! - [`credentials`]: the operator-owned Secret of generated accounts (names, keys, changes).
//! - [`backup`]: the backups in the bucket: layout, manifest, catalog, retention.
//! - [`finalize`]: the finalizer and the backup cleanup of a deleted cluster.
//! - [`password`]: applying a changed superuser password in the running database.
//! - [`replication`]: `spec.replication.mode`, the semi-synchronous switch of MySQL/MariaDB.
//! - [`upgrade`]: the roll of a version change (partition, switchover, pause).
//! - [`probing`]: what the prober's findings mean for the reconciles.
//! - [`hash`]: the stable config hash and the fast hashing the comparison uses.
//! - The contract with the runtime, at the crate root: [`Observed`] (with [`MemberPod`], what the
//!   core reads of a pod) and [`Plan`] (with [`PodAction`], [`DatabaseCommand`],
//!   [`FinalizerChange`], [`CleanupTask`], [`EventReason`], and [`Plan::flow`]: the [`Stage`]s
//!   it is carried out in, in order); the owned kinds ([`OwnedResource`], [`OwnedKind`], [`DesiredObject`],
//!   [`OwnedObjects`]).
//!
//! The modules are layered and depend on each other one way only: the vocabulary ([`hash`],
//! [`position`], [`backup`], [`credentials`], the owned kinds), the contract ([`Observed`],
//! [`Plan`] and what they carry), the objects ([`render`], [`diff`]), the decisions (which never
//! call [`mod@plan`], and which [`render`] never calls), and [`mod@plan`] on top.

#![warn(missing_docs)]

pub mod archive_status;
pub mod backup;
pub mod backup_now;
pub mod backup_status;
pub mod backup_verify;
pub mod compose;
pub mod credentials;
pub mod diff;
pub mod events;
pub mod failover;
pub mod finalize;
pub mod hash;
pub mod member_status;
pub mod members;
mod model;
mod owned;
pub mod password;
pub mod plan;
pub mod position;
pub mod probing;
pub mod render;
pub mod replication;
pub mod settle;
pub mod status;
pub mod storage;
pub mod tls;
pub mod upgrade;

pub use model::*;
pub use owned::*;
pub use plan::plan;
