//! PostgreSQL.

use std::path::Path;

use database_operator_api::Engine;

use crate::config::{self, ConfigInputs};
use crate::scratch::{self, Command, ScratchServer, ScratchStop};
use crate::statements::Secret;
use crate::tools::{ToolArgs, ToolTarget};
use crate::{EngineDef, Protocol, SuperuserAccount};

/// PostgreSQL, as the official `postgres` image runs it.
#[derive(Debug)]
pub(crate) struct Postgresql;

/// The one PostgreSQL definition.
pub(crate) static POSTGRESQL: Postgresql = Postgresql;

const SUPERUSER: &str = "postgres";

const SUPERUSER_ACCOUNTS: &[SuperuserAccount] = &[SuperuserAccount {
    user: SUPERUSER,
    host: None,
    keep_unix_socket: false,
}];

impl EngineDef for Postgresql {
    fn engine(&self) -> Engine {
        Engine::Postgresql
    }

    fn protocol(&self) -> Protocol {
        Protocol::Postgres
    }

    fn port(&self) -> u16 {
        5432
    }

    fn image_repository(&self) -> &'static str {
        "postgres"
    }

    fn container_name(&self) -> &'static str {
        "postgresql"
    }

    fn data_mount_path(&self) -> &'static str {
        "/var/lib/postgresql/data"
    }

    fn data_dir(&self) -> &'static str {
        "/var/lib/postgresql/data/pgdata"
    }

    fn password_env(&self) -> &'static str {
        "POSTGRES_PASSWORD"
    }

    fn socket_dir(&self) -> &'static str {
        "/var/run/postgresql"
    }

    fn os_user_id(&self) -> i64 {
        // The Debian-based official image's `postgres`.
        999
    }

    fn os_user(&self) -> &'static str {
        "postgres"
    }

    fn server_program(&self) -> &'static str {
        "postgres"
    }

    fn superuser(&self) -> &'static str {
        SUPERUSER
    }

    fn superuser_accounts(&self) -> &'static [SuperuserAccount] {
        SUPERUSER_ACCOUNTS
    }

    fn has_dual_passwords(&self) -> bool {
        false
    }

    fn operator_privileges(&self) -> Option<&'static str> {
        None
    }

    fn dump_tool(&self) -> &'static str {
        "pg_dumpall"
    }

    fn client_tool(&self) -> &'static str {
        "psql"
    }

    fn dump_args(&self, target: ToolTarget<'_>, password_file: &str) -> ToolArgs {
        connected(target, password_file, &["--clean", "--if-exists"])
    }

    fn base_backup(
        &self,
        target: ToolTarget<'_>,
        password_file: &str,
    ) -> Option<(&'static str, ToolArgs)> {
        Some((
            "pg_basebackup",
            connected(
                target,
                password_file,
                &[
                    "--pgdata=-",
                    "--format=tar",
                    "--wal-method=none",
                    "--checkpoint=fast",
                    "--label=database-operator",
                ],
            ),
        ))
    }

    fn tls_args(&self, ca_file: &str) -> ToolArgs {
        ToolArgs {
            args: Vec::new(),
            env: vec![
                ("PGSSLMODE".to_owned(), "verify-full".to_owned()),
                ("PGSSLROOTCERT".to_owned(), ca_file.to_owned()),
            ],
        }
    }

    fn client_args(
        &self,
        target: ToolTarget<'_>,
        password_file: Option<&str>,
        query: Option<&str>,
    ) -> ToolArgs {
        let mut args = vec![
            format!("--host={}", target.host),
            format!("--port={}", target.port),
            format!("--username={}", target.user),
            "--dbname=postgres".to_owned(),
            "--no-password".to_owned(),
            "--no-psqlrc".to_owned(),
            "--set=ON_ERROR_STOP=1".to_owned(),
        ];
        match query {
            Some(q) => args.extend([
                "--tuples-only".to_owned(),
                "--no-align".to_owned(),
                format!("--command={q}"),
            ]),
            None => args.push("--quiet".to_owned()),
        }
        let env = password_file
            .map(|file| ("PGPASSFILE".to_owned(), file.to_owned()))
            .into_iter()
            .collect();
        ToolArgs { args, env }
    }

    fn password_file(&self, target: ToolTarget<'_>, password: &Secret) -> Secret {
        // host:port:database:user:password, with ':' and '\' escaped.
        let escape = |s: &str| s.replace('\\', "\\\\").replace(':', "\\:");
        Secret::new(format!(
            "{}:{}:*:{}:{}\n",
            escape(target.host),
            target.port,
            escape(target.user),
            escape(password.expose())
        ))
    }

    fn version_query(&self) -> &'static str {
        "SHOW server_version"
    }

    fn rewinds_diverged_members(&self) -> bool {
        true
    }

    fn follows_by_restart(&self) -> bool {
        true
    }

    fn shares_cluster_identity(&self) -> bool {
        true
    }

    fn switchover_stops_old_primary(&self) -> bool {
        true
    }

    fn switches_semi_sync(&self) -> bool {
        false
    }

    fn config_files(&self, inputs: &ConfigInputs<'_>) -> Vec<(&'static str, String)> {
        let mut files = vec![
            (
                config::POSTGRESQL_CONF,
                config::postgresql_conf(self, inputs),
            ),
            (config::PG_HBA_CONF, config::PG_HBA.to_owned()),
        ];
        if inputs.tls_dir.is_some() {
            files.push((config::PG_TLS_CONF, config::postgresql_tls(inputs)));
            files.push((
                config::PG_HBA_TLS_CONF,
                config::pg_hba_tls(inputs.allow_plaintext),
            ));
        }
        files
    }

    fn server_command(&self, config_dir: &str, _run_dir: &str) -> (Vec<String>, Vec<String>) {
        (
            vec![self.server_program().to_owned()],
            vec![
                "-c".to_owned(),
                ["config_file=", config_dir, "/postgresql.conf"].concat(),
                "-c".to_owned(),
                "listen_addresses=$(POD_IP)".to_owned(),
                "-c".to_owned(),
                // Names the member in `ps` and, as the walreceiver's application_name, in the
                // primary's pg_stat_replication.
                "cluster_name=$(POD_NAME)".to_owned(),
            ],
        )
    }

    fn probe_command(&self) -> Vec<String> {
        // `pg_isready` does not log in.
        vec![
            "pg_isready".to_owned(),
            ["--host=", self.socket_dir()].concat(),
            format!("--port={}", self.port()),
            "--username=postgres".to_owned(),
            "--timeout=4".to_owned(),
        ]
    }

    fn init_env(&self, _headless_domain: &str) -> Vec<(&'static str, String)> {
        vec![("PGDATA", self.data_dir().to_owned())]
    }

    fn server_env(&self) -> Vec<(&'static str, String)> {
        vec![("PGDATA", self.data_dir().to_owned())]
    }

    fn init_script(&self) -> &'static str {
        crate::scripts::POSTGRESQL_INIT
    }

    fn scratch_server(&self, dir: &Path, tools: Option<&Path>) -> ScratchServer {
        let data = scratch::data_dir(dir).display().to_string();
        let socket = dir.display().to_string();
        // The roles a cluster manages itself are left out of a restore; objects owned by or
        // granted to them need them to exist.
        let roles = [crate::REPLICATION_ACCOUNT, crate::OPERATOR_ACCOUNT]
            .map(|r| format!("CREATE ROLE \"{r}\";"))
            .join(" ");
        ScratchServer {
            init: Command {
                program: scratch::program(tools, "initdb"),
                args: vec![
                    format!("--pgdata={data}"),
                    format!("--username={SUPERUSER}"),
                    "--auth=trust".to_owned(),
                    "--encoding=UTF8".to_owned(),
                    "--locale=C".to_owned(),
                    "--no-sync".to_owned(),
                ],
            },
            server: Command {
                program: scratch::program(tools, "postgres"),
                args: vec![
                    "-D".to_owned(),
                    data.clone(),
                    "-c".to_owned(),
                    "listen_addresses=".to_owned(),
                    "-c".to_owned(),
                    format!("unix_socket_directories={socket}"),
                    "-c".to_owned(),
                    "fsync=off".to_owned(),
                ],
            },
            socket,
            setup: Some(roles),
            stop: ScratchStop::Program(Command {
                program: scratch::program(tools, "pg_ctl"),
                args: ["stop", "-m", "fast", "-D"]
                    .map(str::to_owned)
                    .into_iter()
                    .chain([data])
                    .collect(),
            }),
        }
    }

    fn probe_reading(&self) -> Option<crate::statements::ProbeReading> {
        None
    }
}

/// The arguments of a PostgreSQL tool connected to `target` without asking for a password (it
/// is in `password_file`, the tool's `PGPASSFILE`), then `rest`.
fn connected(target: ToolTarget<'_>, password_file: &str, rest: &[&str]) -> ToolArgs {
    let mut args = vec![
        format!("--host={}", target.host),
        format!("--port={}", target.port),
        format!("--username={}", target.user),
        "--no-password".to_owned(),
    ];
    args.extend(rest.iter().map(|a| (*a).to_owned()));
    ToolArgs {
        args,
        env: vec![("PGPASSFILE".to_owned(), password_file.to_owned())],
    }
}
