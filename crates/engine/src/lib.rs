//! # database-operator-engine
//!
//! Everything that differs between the engines database-operator runs (PostgreSQL, MySQL,
//! MariaDB), in one place. The rest of the operator does not match on [`Engine`]: it asks
//! [`of`] for the engine's [`EngineDef`] and reads the answer. `xtask/tests/structure.rs`
//! enforces it outside this crate, with an allow-list of the files not migrated yet that may
//! only shrink. Inside it, [`of`] is where an engine becomes its definition; the statement
//! builders and [`position::Position::parse`] still match on the engine themselves.
//!
//! ```
//! use database_operator_api::Engine;
//! use database_operator_engine::{self as engine, Protocol};
//!
//! let mariadb = engine::of(Engine::Mariadb);
//! assert_eq!(mariadb.port(), 3306);
//! assert_eq!(mariadb.protocol(), Protocol::Mysql);
//! assert_eq!(mariadb.superuser(), "root");
//! assert_eq!(engine::of(Engine::Postgresql).dump_tool(), "pg_dumpall");
//! ```
//!
//! Like the core, this crate is pure: no IO, no clock, no async runtime. Engine functions take
//! plain values (never a render context), so the core, the controller and the in-pod programs
//! can all ask them.
//!
//! ## Modules
//! - [`config`]: the server configuration files (`my.cnf`, `postgresql.conf`, `pg_hba.conf`),
//!   rendered from plain values.
//! - [`position`]: replication positions (PostgreSQL LSNs and timelines, MySQL GTID sets,
//!   MariaDB GTID positions), how they parse and how two of them compare.
//! - [`scratch`]: the restore drill's scratch server: the programs that initialize, start and
//!   stop an empty instance in a directory of its own.
//! - [`scripts`]: the init script of each engine, which prepares a member (rendered into the
//!   ConfigMap by the core).
//! - [`tools`]: the dump and client tools' arguments and password files, and the filter a
//!   restore reads a dump through.
//! - [`statements`]: the SQL the operator sends to a member, per engine, as pure builders
//!   (snapshot-tested); secrets are always bound values, never part of the text.
//!
//! One implementation of [`EngineDef`] per engine lives in a private module: `postgresql`,
//! and `mysql_family` for MySQL and MariaDB, which share a wire protocol, a file layout and
//! most of their tools.

#![deny(missing_docs)]

use std::fmt;
use std::path::Path;

use database_operator_api::Engine;

use config::ConfigInputs;
use statements::Secret;
use tools::{ToolArgs, ToolTarget};

pub mod config;
pub mod dump_guard;
mod mysql_family;
pub mod position;
mod postgresql;
mod psql_lexer;
pub mod psql_restrict;
mod psql_syntax;
pub mod scratch;
pub mod scripts;
pub mod statements;
pub mod tools;

/// The engine definition of `engine`: the one place that matches on [`Engine`].
pub fn of(engine: Engine) -> &'static dyn EngineDef {
    match engine {
        Engine::Postgresql => &postgresql::POSTGRESQL,
        Engine::Mysql => &mysql_family::MYSQL,
        Engine::Mariadb => &mysql_family::MARIADB,
    }
}

/// The wire protocol a client speaks to an engine: two protocols for three engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// The PostgreSQL frontend/backend protocol.
    Postgres,
    /// The MySQL client/server protocol (MySQL and MariaDB).
    Mysql,
}

/// An account the init scripts give the superuser password to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SuperuserAccount {
    /// User (role) name: `postgres`, `root`.
    pub user: &'static str,
    /// MySQL/MariaDB host part (`localhost`, `%`); `None` for PostgreSQL.
    pub host: Option<&'static str>,
    /// The account also logs in through `unix_socket` (MariaDB's `root@localhost`), which
    /// setting its password must keep.
    pub keep_unix_socket: bool,
}

/// The account the operator administers members as, in every engine (created by the init
/// scripts; its password lives in the operator-owned Secret).
pub const OPERATOR_ACCOUNT: &str = "database_operator";

/// The account replicas replicate as, in every engine.
pub const REPLICATION_ACCOUNT: &str = "replicator";

/// What the operator knows about one engine. Reached through [`of`].
pub trait EngineDef: fmt::Debug + Send + Sync {
    /// The engine this definition describes.
    fn engine(&self) -> Engine;

    /// The wire protocol its clients speak.
    fn protocol(&self) -> Protocol;

    /// The client port the server listens on.
    fn port(&self) -> u16;

    /// Repository of the official image under the registry (`postgres`, `mysql`, `mariadb`).
    fn image_repository(&self) -> &'static str;

    /// Name of the database container and of its port.
    fn container_name(&self) -> &'static str;

    /// Where the data volume is mounted.
    fn data_mount_path(&self) -> &'static str;

    /// The data directory inside the volume (a subdirectory, so that `lost+found` at the root
    /// of a fresh filesystem never confuses the engine's "is the directory empty" check).
    fn data_dir(&self) -> &'static str;

    /// Environment variable the init script reads the superuser password from (the official
    /// image's name for it).
    fn password_env(&self) -> &'static str;

    /// Directory of the server's unix socket (the engine's standard path), where probes and
    /// local administration connect.
    fn socket_dir(&self) -> &'static str;

    /// User and group id the official image runs the server as (the OS user `postgres` or
    /// `mysql`).
    fn os_user_id(&self) -> i64;

    /// The name of that OS user (`postgres`, `mysql`), who owns the server's runtime
    /// directories in the image.
    fn os_user(&self) -> &'static str;

    /// The server program, as [`server_command`](EngineDef::server_command) starts it
    /// (`postgres`, `mysqld`, `mariadbd`).
    fn server_program(&self) -> &'static str;

    /// The superuser: the account backups dump as and restores apply as (`postgres`, `root`).
    fn superuser(&self) -> &'static str;

    /// The accounts that get the superuser password, as the init scripts create them, in the
    /// order a password change sets them.
    fn superuser_accounts(&self) -> &'static [SuperuserAccount];

    /// Whether the server keeps the old password working after a change (MySQL's dual
    /// passwords).
    fn has_dual_passwords(&self) -> bool;

    /// The privileges of the operator's account ([`OPERATOR_ACCOUNT`]) on every database, as the
    /// init scripts grant them, when the engine can limit it to what the operator uses; `None`
    /// when it must be a superuser (PostgreSQL: only a superuser may change a superuser's
    /// password, `ALTER SYSTEM` and `pg_promote`).
    fn operator_privileges(&self) -> Option<&'static str>;

    /// The tool that dumps the whole server as SQL (`pg_dumpall`, `mysqldump`,
    /// `mariadb-dump`).
    fn dump_tool(&self) -> &'static str;

    /// The SQL client that applies a dump and runs queries (`psql`, `mysql`, `mariadb`).
    fn client_tool(&self) -> &'static str;

    /// The arguments of the [dump tool](EngineDef::dump_tool) that dump the whole server
    /// `target` as SQL on stdout, the password read from `password_file`.
    ///
    /// - PostgreSQL: `pg_dumpall` (roles, then each database in its own consistent snapshot),
    ///   with `DROP ... IF EXISTS` so that the dump restores into a fresh or a used server.
    /// - MySQL / MariaDB: every database in one consistent snapshot (`--single-transaction`,
    ///   InnoDB) with routines, events and triggers; MariaDB records its GTID position in the
    ///   dump.
    fn dump_args(&self, target: ToolTarget<'_>, password_file: &str) -> ToolArgs;

    /// The tool and arguments of a physical base backup of `target` as a tar stream on stdout,
    /// the password read from `password_file`; `None` for an engine whose physical backups the
    /// operator does not take.
    ///
    /// PostgreSQL: `pg_basebackup` over the replication protocol (`target.user` is the
    /// replication account), the data directory as one tar on stdout (a cluster with extra
    /// tablespaces cannot be written so, and fails), without WAL (`--wal-method=none`: the
    /// archive holds it, and the server ends the backup only once the WAL the copy needs is
    /// archived), after a fast checkpoint, with the backup manifest inside the tar (its WAL
    /// range is what the backup's manifest records).
    fn base_backup(
        &self,
        target: ToolTarget<'_>,
        password_file: &str,
    ) -> Option<(&'static str, ToolArgs)>;

    /// The arguments of the [client](EngineDef::client_tool) connected to `target`, applying
    /// SQL from stdin (`query: None`, stopping at the first error) or running `query` and
    /// printing its rows unaligned; the password, if any, read from `password_file`.
    fn client_args(
        &self,
        target: ToolTarget<'_>,
        password_file: Option<&str>,
        query: Option<&str>,
    ) -> ToolArgs;

    /// What the [dump tool](EngineDef::dump_tool) and the [client](EngineDef::client_tool)
    /// add to connect over TLS and check the server's certificate against the authorities in
    /// `ca_file` for the host name they dial: PostgreSQL `PGSSLMODE=verify-full` and
    /// `PGSSLROOTCERT`; MySQL `--ssl-mode=VERIFY_IDENTITY --ssl-ca`; MariaDB `--ssl --ssl-ca
    /// --ssl-verify-server-cert`.
    fn tls_args(&self, ca_file: &str) -> ToolArgs;

    /// The content of the password file the tools read for `target`: PostgreSQL's
    /// `PGPASSFILE` line, MySQL's and MariaDB's option file.
    fn password_file(&self, target: ToolTarget<'_>, password: &Secret) -> Secret;

    /// A query whose one row is the server's version.
    fn version_query(&self) -> &'static str;

    /// Whether a member that diverged from the primary (or wrote past the point where the
    /// primary's history forked) is rewound to follow it: PostgreSQL's `pg_rewind`, run by the
    /// init script when the member restarts as a standby. When not, such a member is
    /// quarantined (MySQL and MariaDB: errant transactions are never thrown away implicitly).
    fn rewinds_diverged_members(&self) -> bool;

    /// Whether a running primary is made to follow a new source by restarting it as a replica
    /// (PostgreSQL: a primary cannot become a standby at run time) rather than by pointing the
    /// running server at the source (MySQL, MariaDB).
    fn follows_by_restart(&self) -> bool;

    /// Whether every member of a cluster reports the same server identity (the probe's
    /// `server_id`): PostgreSQL's `system_identifier`, which `initdb` creates and every base
    /// copy keeps, so a member reporting another is another database. MySQL's `server_uuid`
    /// and MariaDB's `server_id` differ from member to member.
    fn shares_cluster_identity(&self) -> bool;

    /// Whether a switchover stops the old primary's server before promoting its target,
    /// because the read-only fence ([`statements::fence`]) is one a client can override:
    /// PostgreSQL (`BEGIN READ WRITE`). MySQL's `super_read_only` refuses every account;
    /// MariaDB's `read_only` is left to accounts with `READ ONLY ADMIN` (the operator's own;
    /// `root@'%'` has it revoked at initialization).
    fn switchover_stops_old_primary(&self) -> bool;

    /// Whether the operator switches semi-synchronous replication on the members for
    /// `spec.replication.mode: sync` (MySQL, MariaDB); PostgreSQL's synchronous standbys are
    /// set in its configuration instead.
    fn switches_semi_sync(&self) -> bool;

    /// The server's configuration files for a cluster, as (ConfigMap key, content): `my.cnf`
    /// for the MySQL family, `postgresql.conf` and `pg_hba.conf` for PostgreSQL.
    fn config_files(&self, inputs: &ConfigInputs<'_>) -> Vec<(&'static str, String)>;

    /// The server's command line in the pod: the program (no image entrypoint) and its
    /// arguments, listening on the pod IP only (`$(POD_IP)`, expanded by the kubelet), reading
    /// its configuration from `config_dir` (the ConfigMap) or `run_dir` (what the init script
    /// wrote there).
    fn server_command(&self, config_dir: &str, run_dir: &str) -> (Vec<String>, Vec<String>);

    /// The readiness and liveness probe command: over the member's own unix socket, never TCP
    /// to 127.0.0.1 (on a node where pods share the host's loopback, that address is nobody's
    /// or another pod's), and without a password.
    fn probe_command(&self) -> Vec<String>;

    /// Environment variables the init container needs besides the shared ones:
    /// PostgreSQL's `PGDATA`; for the MySQL family the members' DNS suffix `headless_domain`
    /// (`HEADLESS_DOMAIN`, its `report_host`).
    fn init_env(&self, headless_domain: &str) -> Vec<(&'static str, String)>;

    /// Environment variables of the database container besides the pod's name and IP:
    /// PostgreSQL's `PGDATA`.
    fn server_env(&self) -> Vec<(&'static str, String)>;

    /// The script that prepares a member before the server starts (the ConfigMap's `init.sh`;
    /// see [`scripts`]).
    fn init_script(&self) -> &'static str;

    /// The restore drill's scratch server in `dir` (see [`scratch`]): the programs that
    /// initialize and run an empty instance on a Unix socket only, taken from `tools` when
    /// given (else from `PATH`), what to run before a restore and how to stop it.
    fn scratch_server(&self, dir: &Path, tools: Option<&Path>) -> scratch::ScratchServer;

    /// How the probe's rows read, for the MySQL protocol's driver (MySQL and MariaDB name and
    /// order their variables and positions differently); `None` for PostgreSQL, whose one
    /// probe row names its columns.
    fn probe_reading(&self) -> Option<statements::ProbeReading>;
}

#[cfg(test)]
mod tests;
