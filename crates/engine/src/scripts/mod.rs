//! The shell scripts that prepare a member, one per engine, rendered into the ConfigMap
//! `<name>-config` by the core.
//!
//! The scripts are constant per engine: everything that varies between clusters and members
//! reaches them through environment variables set in the pod templates, so a script never needs
//! quoting of user input and a spec change never rewrites a script. They are POSIX `sh` (the
//! official images' `/bin/sh` is dash or bash) and pass `shellcheck` (tested, as rendered, in
//! the core's `tests/scripts.rs`).
//!
//! An init script is one self-contained file, put together here: the prelude every engine
//! shares (`member-common.sh`: log, ordinal, role label, the temporary server's clean-up, the
//! wait for the primary), for MySQL and MariaDB their shared part (`mysql-common.sh`), then the
//! engine's own part. [`EngineDef::init_script`](crate::EngineDef::init_script) says which is
//! an engine's.

/// Prepares a MySQL member: per-member settings, initialization of a new primary, and clone +
/// replication for a new replica.
pub const MYSQL_INIT: &str = concat!(
    include_str!("member-common.sh"),
    include_str!("mysql-common.sh"),
    include_str!("mysql-init.sh")
);
/// Prepares a MariaDB member: per-member settings, initialization of a new primary, and a
/// consistent copy + GTID replication for a new replica.
pub const MARIADB_INIT: &str = concat!(
    include_str!("member-common.sh"),
    include_str!("mysql-common.sh"),
    include_str!("mariadb-init.sh")
);
/// Prepares a PostgreSQL member: `initdb` for a new primary, `pg_basebackup` for a new replica,
/// and a standby for a former primary.
pub const POSTGRESQL_INIT: &str = concat!(
    include_str!("member-common.sh"),
    include_str!("postgresql-init.sh")
);
