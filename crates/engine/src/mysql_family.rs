//! MySQL and MariaDB: one wire protocol, one file layout, one superuser; they differ in their
//! image, their tools' names, how `root@localhost` logs in and whether old passwords keep
//! working.

use std::path::Path;

use database_operator_api::Engine;

use crate::config::{self, ConfigInputs};
use crate::scratch::{self, Command, ScratchServer, ScratchStop};
use crate::statements::{self, ProbeReading, Secret};
use crate::tools::{ToolArgs, ToolTarget};
use crate::{EngineDef, Protocol, SuperuserAccount};

/// A member of the MySQL family: what differs between MySQL and MariaDB, as data; what they
/// share is in the [`EngineDef`] implementation below.
#[derive(Debug)]
pub(crate) struct MysqlFamily {
    engine: Engine,
    image_repository: &'static str,
    container_name: &'static str,
    password_env: &'static str,
    superuser_accounts: &'static [SuperuserAccount],
    dual_passwords: bool,
    /// The operator account's privileges ([`EngineDef::operator_privileges`]).
    operator_privileges: &'static str,
    dump_tool: &'static str,
    /// The dump tool's option for the server's GTID position.
    dump_gtid_option: &'static str,
    client_tool: &'static str,
    /// The client's option that turns its `system` command off for a restore (MariaDB's
    /// `--sandbox` turns off every command that reaches the file system).
    client_sandbox_option: &'static str,
    init_script: &'static str,
    /// The server binary.
    server: &'static str,
    /// The administration tool whose `ping` probes the server.
    admin_tool: &'static str,
    /// The replication section of `my.cnf`.
    replication_cnf: &'static str,
    /// The semi-synchronous replication section of `my.cnf`.
    semi_sync_cnf: &'static str,
    /// The program that initializes an empty data directory for the restore drill.
    scratch_init: &'static str,
    /// Its options before and after `--datadir`.
    scratch_init_options: (&'static [&'static str], &'static [&'static str]),
    /// How its probe's rows read.
    probe_reading: ProbeReading,
    /// The tools' options for TLS that checks the server's certificate for its host name,
    /// before `--ssl-ca=<file>`.
    tls_verify_options: &'static [&'static str],
}

/// The superuser of both.
const ROOT: &str = "root";

/// MySQL: what the operator's account does, and what it needs for it. Reading: the probes and
/// the backup's dump (`SELECT` on every table, `PROCESS`, `RELOAD`, `LOCK TABLES`, `SHOW VIEW`,
/// `EVENT`, `TRIGGER`, `REPLICATION CLIENT` for `SHOW REPLICA STATUS`); fencing, promoting and
/// semi-synchronous replication (`SYSTEM_VARIABLES_ADMIN` for `read_only`,
/// `super_read_only` and `rpl_semi_sync_source_enabled`); pointing replication
/// (`REPLICATION_SLAVE_ADMIN`); reloading TLS (`CONNECTION_ADMIN`, which also lets it in when
/// `max_connections` is reached); the superuser's password (`CREATE USER`, and `SYSTEM_USER`
/// because root has it). Never `INSERT`, `UPDATE`, `DELETE`, DDL, `FILE`, `SHUTDOWN`, `SUPER`
/// or `GRANT OPTION`.
pub const MYSQL_OPERATOR_PRIVILEGES: &str = "SELECT, RELOAD, PROCESS, LOCK TABLES, SHOW VIEW, \
EVENT, TRIGGER, REPLICATION CLIENT, CREATE USER, SYSTEM_VARIABLES_ADMIN, REPLICATION_SLAVE_ADMIN, \
CONNECTION_ADMIN, SYSTEM_USER";

/// MariaDB: as [`MYSQL_OPERATOR_PRIVILEGES`], in MariaDB's names: `READ_ONLY ADMIN` (setting
/// `read_only`), `REPLICATION SLAVE ADMIN` (the channel and `gtid_slave_pos`),
/// `REPLICATION MASTER ADMIN` (`rpl_semi_sync_master_enabled`), `SLAVE MONITOR` and
/// `BINLOG MONITOR` (the replication and binary log status the probes and the dump read),
/// `RELOAD` (also `FLUSH SSL`), `CONNECTION ADMIN`.
pub const MARIADB_OPERATOR_PRIVILEGES: &str = "SELECT, RELOAD, PROCESS, LOCK TABLES, SHOW VIEW, \
EVENT, TRIGGER, CREATE USER, BINLOG MONITOR, SLAVE MONITOR, REPLICATION SLAVE ADMIN, \
REPLICATION MASTER ADMIN, READ_ONLY ADMIN, CONNECTION ADMIN";

/// MySQL 8.4 LTS and 9.x.
pub(crate) static MYSQL: MysqlFamily = MysqlFamily {
    engine: Engine::Mysql,
    image_repository: "mysql",
    container_name: "mysql",
    password_env: "MYSQL_ROOT_PASSWORD",
    superuser_accounts: &[
        SuperuserAccount {
            user: ROOT,
            host: Some("localhost"),
            keep_unix_socket: false,
        },
        SuperuserAccount {
            user: ROOT,
            host: Some("%"),
            keep_unix_socket: false,
        },
    ],
    dual_passwords: true,
    operator_privileges: MYSQL_OPERATOR_PRIVILEGES,
    dump_tool: "mysqldump",
    dump_gtid_option: "--set-gtid-purged=OFF",
    client_tool: "mysql",
    client_sandbox_option: "--system-command=OFF",
    init_script: crate::scripts::MYSQL_INIT,
    server: "mysqld",
    admin_tool: "mysqladmin",
    replication_cnf: config::MYSQL_REPLICATION,
    semi_sync_cnf: config::MYSQL_SEMI_SYNC,
    scratch_init: "mysqld",
    scratch_init_options: (&["--no-defaults", "--initialize-insecure"], &[]),
    probe_reading: statements::MYSQL_PROBE,
    tls_verify_options: &["--ssl-mode=VERIFY_IDENTITY"],
};

/// MariaDB 10.6 and later: the MySQL layout, under its own image, container and tool names;
/// `root@localhost` also logs in through `unix_socket`.
pub(crate) static MARIADB: MysqlFamily = MysqlFamily {
    engine: Engine::Mariadb,
    image_repository: "mariadb",
    container_name: "mariadb",
    password_env: "MARIADB_ROOT_PASSWORD",
    superuser_accounts: &[
        SuperuserAccount {
            user: ROOT,
            host: Some("localhost"),
            keep_unix_socket: true,
        },
        SuperuserAccount {
            user: ROOT,
            host: Some("%"),
            keep_unix_socket: false,
        },
    ],
    dual_passwords: false,
    operator_privileges: MARIADB_OPERATOR_PRIVILEGES,
    dump_tool: "mariadb-dump",
    dump_gtid_option: "--gtid",
    client_tool: "mariadb",
    client_sandbox_option: "--sandbox",
    init_script: crate::scripts::MARIADB_INIT,
    server: "mariadbd",
    admin_tool: "mariadb-admin",
    replication_cnf: config::MARIADB_REPLICATION,
    semi_sync_cnf: config::MARIADB_SEMI_SYNC,
    scratch_init: "mariadb-install-db",
    scratch_init_options: (
        &["--no-defaults"],
        &["--auth-root-authentication-method=normal", "--skip-test-db"],
    ),
    probe_reading: statements::MARIADB_PROBE,
    tls_verify_options: &["--ssl", "--ssl-verify-server-cert"],
};

impl EngineDef for MysqlFamily {
    fn engine(&self) -> Engine {
        self.engine
    }

    fn protocol(&self) -> Protocol {
        Protocol::Mysql
    }

    fn port(&self) -> u16 {
        3306
    }

    fn image_repository(&self) -> &'static str {
        self.image_repository
    }

    fn container_name(&self) -> &'static str {
        self.container_name
    }

    fn data_mount_path(&self) -> &'static str {
        "/var/lib/mysql"
    }

    fn data_dir(&self) -> &'static str {
        "/var/lib/mysql/data"
    }

    fn password_env(&self) -> &'static str {
        self.password_env
    }

    fn socket_dir(&self) -> &'static str {
        "/var/run/mysqld"
    }

    fn os_user_id(&self) -> i64 {
        // The `mysql` user of both official images.
        999
    }

    fn os_user(&self) -> &'static str {
        "mysql"
    }

    fn server_program(&self) -> &'static str {
        self.server
    }

    fn superuser(&self) -> &'static str {
        ROOT
    }

    fn superuser_accounts(&self) -> &'static [SuperuserAccount] {
        self.superuser_accounts
    }

    fn has_dual_passwords(&self) -> bool {
        self.dual_passwords
    }

    fn operator_privileges(&self) -> Option<&'static str> {
        Some(self.operator_privileges)
    }

    fn dump_tool(&self) -> &'static str {
        self.dump_tool
    }

    fn client_tool(&self) -> &'static str {
        self.client_tool
    }

    fn base_backup(&self, _: ToolTarget<'_>, _: &str) -> Option<(&'static str, ToolArgs)> {
        None
    }

    fn dump_args(&self, target: ToolTarget<'_>, password_file: &str) -> ToolArgs {
        let mut args = connection(target, Some(password_file));
        args.extend([
            "--single-transaction".to_owned(),
            "--routines".to_owned(),
            "--events".to_owned(),
            "--triggers".to_owned(),
            "--all-databases".to_owned(),
            self.dump_gtid_option.to_owned(),
        ]);
        ToolArgs {
            args,
            env: Vec::new(),
        }
    }

    fn tls_args(&self, ca_file: &str) -> ToolArgs {
        let mut args: Vec<String> = self
            .tls_verify_options
            .iter()
            .map(|o| (*o).to_owned())
            .collect();
        args.push(format!("--ssl-ca={ca_file}"));
        ToolArgs {
            args,
            env: Vec::new(),
        }
    }

    fn client_args(
        &self,
        target: ToolTarget<'_>,
        password_file: Option<&str>,
        query: Option<&str>,
    ) -> ToolArgs {
        let mut args = connection(target, password_file);
        match query {
            Some(q) => args.extend([
                "--batch".to_owned(),
                "--skip-column-names".to_owned(),
                format!("--execute={q}"),
            ]),
            // A dump: the client's own commands off for piped input (`--binary-mode`), and its
            // shell escape off as well (`dump_guard` refuses a dump that asks for it).
            None => args.extend([
                "--binary-mode".to_owned(),
                self.client_sandbox_option.to_owned(),
            ]),
        }
        ToolArgs {
            args,
            env: Vec::new(),
        }
    }

    fn password_file(&self, _target: ToolTarget<'_>, password: &Secret) -> Secret {
        // An option file value in double quotes, with '\' and '"' escaped.
        let value = password.expose().replace('\\', "\\\\").replace('"', "\\\"");
        Secret::new(format!("[client]\npassword=\"{value}\"\n"))
    }

    fn version_query(&self) -> &'static str {
        "SELECT VERSION()"
    }

    fn rewinds_diverged_members(&self) -> bool {
        false
    }

    fn follows_by_restart(&self) -> bool {
        false
    }

    fn shares_cluster_identity(&self) -> bool {
        false
    }

    fn switchover_stops_old_primary(&self) -> bool {
        false
    }

    fn switches_semi_sync(&self) -> bool {
        true
    }

    fn config_files(&self, inputs: &ConfigInputs<'_>) -> Vec<(&'static str, String)> {
        vec![(
            config::MY_CNF,
            config::my_cnf(self, inputs, self.replication_cnf, self.semi_sync_cnf),
        )]
    }

    fn server_command(&self, _config_dir: &str, run_dir: &str) -> (Vec<String>, Vec<String>) {
        (
            vec![self.server_program().to_owned()],
            vec![
                // Written by init.sh: the ConfigMap's my.cnf plus this member's settings.
                ["--defaults-file=", run_dir, "/my.cnf"].concat(),
                "--bind-address=$(POD_IP)".to_owned(),
            ],
        )
    }

    fn probe_command(&self) -> Vec<String> {
        // `ping` reports a running server even when the login is refused (on MariaDB the OS
        // user `mysql` logs in through `unix_socket`; on MySQL through `auth_socket`).
        vec![
            self.admin_tool.to_owned(),
            "--no-defaults".to_owned(),
            ["--socket=", self.socket_dir(), "/mysqld.sock"].concat(),
            "--user=mysql".to_owned(),
            "--connect-timeout=4".to_owned(),
            "--silent".to_owned(),
            "ping".to_owned(),
        ]
    }

    fn init_env(&self, headless_domain: &str) -> Vec<(&'static str, String)> {
        vec![("HEADLESS_DOMAIN", headless_domain.to_owned())]
    }

    fn server_env(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    fn init_script(&self) -> &'static str {
        self.init_script
    }

    fn scratch_server(&self, dir: &Path, tools: Option<&Path>) -> ScratchServer {
        let datadir = format!("--datadir={}", scratch::data_dir(dir).display());
        let socket = dir.join("server.sock").display().to_string();
        let (before, after) = self.scratch_init_options;
        let init_args = before
            .iter()
            .map(|o| (*o).to_owned())
            .chain([datadir.clone()])
            .chain(after.iter().map(|o| (*o).to_owned()))
            .collect();
        ScratchServer {
            init: Command {
                program: scratch::program(tools, self.scratch_init),
                args: init_args,
            },
            server: Command {
                program: scratch::program(tools, self.server),
                args: vec![
                    "--no-defaults".to_owned(),
                    datadir,
                    format!("--socket={socket}"),
                    format!("--pid-file={}", dir.join("server.pid").display()),
                    format!("--tmpdir={}", dir.display()),
                    "--skip-networking".to_owned(),
                    "--skip-log-bin".to_owned(),
                    format!("--log-error={}", dir.join("server.log").display()),
                ],
            },
            socket,
            setup: None,
            stop: ScratchStop::Statement("SHUTDOWN"),
        }
    }

    fn probe_reading(&self) -> Option<ProbeReading> {
        Some(self.probe_reading)
    }
}

/// The options both tools of the family start with: the password file (which must be the
/// first option), then the socket or TCP address, then the user.
fn connection(target: ToolTarget<'_>, password_file: Option<&str>) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(file) = password_file {
        args.push(format!("--defaults-extra-file={file}"));
    }
    if target.is_socket() {
        // A socket file (the restore drill's scratch server, local administration).
        args.extend([
            format!("--socket={}", target.host),
            "--protocol=SOCKET".to_owned(),
        ]);
    } else {
        args.extend([
            format!("--host={}", target.host),
            format!("--port={}", target.port),
            "--protocol=TCP".to_owned(),
        ]);
    }
    args.push(format!("--user={}", target.user));
    args
}
