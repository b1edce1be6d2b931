//! The shell scripts rendered into the ConfigMap `<name>-config`.
//!
//! The scripts are the engine crate's ([`database_operator_engine::scripts`]: one init script
//! per engine, POSIX `sh`, constant per engine; everything that varies reaches them through
//! environment variables set in the pod templates). They are re-exported here for the tests
//! that run them (`tests/scripts.rs`: shellcheck, and behaviour with stub tools).

pub use database_operator_engine::scripts::{MARIADB_INIT, MYSQL_INIT, POSTGRESQL_INIT};

/// ConfigMap key of the init script.
pub const INIT_KEY: &str = "init.sh";
