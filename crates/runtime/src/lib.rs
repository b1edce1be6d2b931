//! # database-operator-runtime
//!
//! The part of database-operator that talks to a cluster: it watches `DatabaseCluster`s and
//! the objects they own, gathers an [`database_operator_core::Observed`] from its caches, asks
//! [`database_operator_core::plan()`] what to do, and carries the plan out. It also serves the
//! admission webhook, metrics and health endpoints, and the `database-operator` command line.
//!
//! | module | does | touches the cluster |
//! | --- | --- | --- |
//! | [`backup`] | `backup run`, `list`, `delete-prefix`: dumps to S3, retention | the database and the bucket |
//! | [`cli`], [`offline`] | flags; `render`, `validate`, `crd` (offline and the flags that shape rendering live in `database-operator-common`, shared with the kubectl plugin) | no |
//! | [`operator`] | the composition root of `run`: its flags, the client, the servers | yes |
//! | [`controller`] | watches, caches, the reconcile loop | reads (watches) |
//! | [`cache`] | the compact form of cached objects; the pod cache holds what the core reads | no |
//! | [`reconcile`] | turns a plan into [`io::ClusterIo`] calls, in order; error reporting | through the trait |
//! | [`io`] | [`io::ClusterIo`] (primitive calls only) and its kube implementation | writes |
//! | [`echo`] | the writes the watches have not shown yet; a reconcile waits for them | no |
//! | [`database`] | [`database::DatabaseIo`]: one member's server (probe, fence, promote, follow) | the database |
//! | [`members`] | the operator's credentials, member addresses, a driver per member, the facts cache | one Secret GET per change |
//! | [`secrets`] | Secret -> clusters index, password fingerprints | one GET per Secret change |
//! | [`credentials`] | the generated values of the operator Secret `<name>-operator` | no |
//! | [`index`] | reverse indexes over the caches (cluster -> pods, Secret -> clusters) | no |
//! | [`leader`], [`shutdown`] | leader election, graceful stop | the Lease |
//! | [`member_agent`] | `database-operator member-agent`, the sidecar of `nodeLoss: SelfFence` members: renews the primary Lease, fences its own server when it cannot | the primary Lease, the local server |
//! | [`metrics`], [`admin`], [`metrics_auth`] | Prometheus metrics (over HTTPS for readers the API server authorizes, with `--metrics-secure`), `/healthz`, `/readyz` | TokenReview and SubjectAccessReview per reader, once a minute |
//! | [`memory`] | transparent huge pages off for the process; mimalloc's settings (the process starts itself again with them) | no |
//! | [`webhook`] | the admission webhook | no |
//! | [`rbac`] | the API calls the code makes, checked against deploy/rbac | no |

#![warn(missing_docs)]

pub mod admin;
pub use database_operator_common::async_runtime;
pub mod backup;
pub mod cache;
pub mod certs;
pub mod cli;
pub mod controller;
pub mod credentials;
pub mod database;
pub mod echo;
pub mod error;
pub mod failpoint;
mod https;
pub mod index;
pub mod io;
pub mod leader;
pub mod member_agent;
pub mod members;
pub mod memory;
pub mod metrics;
pub mod metrics_auth;
pub use database_operator_common::offline;
pub mod operator;
pub mod per_cluster;
pub mod provided_cert;
pub mod rbac;
pub mod reconcile;
pub mod secrets;
pub mod shutdown;
pub mod stores;
pub mod telemetry;
pub mod tls_issuer;
pub mod webhook;

pub use error::{Error, ErrorCategory};
