//! PostgreSQL.

use database_operator_api::Engine;

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

    fn superuser(&self) -> &'static str {
        SUPERUSER
    }

    fn superuser_accounts(&self) -> &'static [SuperuserAccount] {
        SUPERUSER_ACCOUNTS
    }

    fn has_dual_passwords(&self) -> bool {
        false
    }

    fn dump_tool(&self) -> &'static str {
        "pg_dumpall"
    }

    fn client_tool(&self) -> &'static str {
        "psql"
    }
}
