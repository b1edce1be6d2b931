//! # database-operator-common
//!
//! The small library the programs of database-operator share beyond the api and the core: the
//! operator binary (`database-operator`) and the kubectl plugin (`kubectl-dbc`) both render
//! objects from the same flags, read manifests offline, fingerprint passwords and run on a
//! command's async runtime. It links no database driver, no S3 client and no HTTP server, so
//! that the plugin does not either (`crates/kubectl-dbc/tests/dependencies.rs` checks it).
//!
//! | module | what |
//! | --- | --- |
//! | [`flags`] | [`flags::RenderFlags`] (images, the versions file) and durations such as `30s` |
//! | [`offline`] | `render`, `validate`, `crd` without a cluster; reading DatabaseClusters from YAML |
//! | [`fingerprint`] | a password's fingerprint, as the status shows it |
//! | [`async_runtime`] | the async runtime a command runs on |
//! | [`provided_cert`] | the checks on a certificate a user provides (`spec.tls.certificateSecret`) |

#![warn(missing_docs)]

pub mod async_runtime;
pub mod fingerprint;
pub mod flags;
pub mod offline;
pub mod provided_cert;
