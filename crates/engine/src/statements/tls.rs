//! TLS: the server reads its certificate files again without a restart.

use database_operator_api::Engine;

use super::Statement;

/// Has the server read its certificate, key and authority files again, for the connections
/// that follow (open sessions keep theirs): PostgreSQL reloads its configuration, which
/// includes the TLS files (`pg_reload_conf()`); MySQL `ALTER INSTANCE RELOAD TLS`; MariaDB
/// `FLUSH SSL`. A file that cannot be read leaves the server on its current certificate
/// (MySQL and MariaDB fail the statement; PostgreSQL logs it and keeps the old context).
pub fn reload_tls(dialect: Engine) -> Vec<Statement> {
    vec![Statement::plain(
        dialect,
        match dialect {
            Engine::Postgresql => "SELECT pg_reload_conf()",
            Engine::Mysql => "ALTER INSTANCE RELOAD TLS",
            Engine::Mariadb => "FLUSH SSL",
        },
    )]
}
