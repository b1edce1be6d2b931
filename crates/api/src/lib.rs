//! # database-operator-api
//!
//! The `DatabaseCluster` custom resource (`database.example.com/v1alpha1`) as Rust types: the
//! spec a platform team writes, the status the operator reports, and the validation rules both
//! the admission webhook and the command line apply. It has no IO and no async runtime, so other
//! operators and tools can depend on it to create, read or check database clusters.
//!
//! ```
//! use database_operator_api::{
//!     DatabaseCluster, DatabaseClusterSpec, Engine, SecretKeySelector, StorageSpec,
//!     validate::validate_create,
//! };
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
//! assert!(validate_create(&cluster).is_ok());
//!
//! // Unsupported versions are refused with the field and the rule.
//! cluster.spec.version = "17.0".into();
//! let err = validate_create(&cluster).unwrap_err();
//! assert!(err.to_string().contains("spec.version: unsupported version for postgresql"));
//! ```
//!
//! Where each rule is enforced (schema, CEL in the CRD, or [`validate`]) is listed in the user
//! documentation, `docs/api.md`.

#![warn(missing_docs)]

mod backup;
pub mod conditions;
pub mod crd;
pub mod failover;
pub mod members;
mod network;
pub mod password;
pub mod rules;
pub mod schedule;
pub mod scheduling;
mod tls;
mod types;
pub mod upgrade;
pub mod validate;
pub mod versions;

pub use backup::{
    ArchiveSpec, BackupCredentialsRef, BackupDeletionPolicy, BackupMethod, BackupSpec,
    BackupVerifySpec, BootstrapSpec, FromBackupSpec, LastBackup, LastVerifiedBackup, RestoredFrom,
    SignatureCheck,
};
pub use failover::{
    FailoverSpec, FailoverStatus, NodeLossPolicy, RESEED_ANNOTATION, ReplicationMode,
    ReplicationSpec, Reseed, ReseedTrigger, SWITCHOVER_ANNOTATION,
};
pub use members::MemberStatus;
pub use network::NetworkPolicySpec;
pub use password::{PasswordRotationSpec, PasswordStatus};
pub use tls::{DEFAULT_SERVER_CERTIFICATE_LIFETIME_SECONDS, TlsSpec};
pub use types::{
    DatabaseCluster, DatabaseClusterSpec, DatabaseClusterStatus, Engine, Phase, SchedulingSpec,
    SecretKeySelector, StorageSpec,
};
pub use upgrade::{RollPhase, UpgradeSpec, UpgradeStatus};
pub use validate::{ValidationErrors, Warning, validate_create, validate_running, validate_update};

/// API group of the custom resource.
pub const GROUP: &str = "database.example.com";
/// API version of the custom resource.
pub const VERSION: &str = "v1alpha1";
/// Kind of the custom resource.
pub const KIND: &str = "DatabaseCluster";
/// `apiVersion` of the custom resource: `<GROUP>/<VERSION>`.
pub const API_VERSION: &str = "database.example.com/v1alpha1";
/// Finalizer the operator puts on every cluster to run cleanup before deletion.
pub const FINALIZER: &str = "database.example.com/finalizer";
/// Field manager the operator uses for server-side apply.
pub const FIELD_MANAGER: &str = "database-operator";
