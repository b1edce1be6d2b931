//! Setting a user's password, and discarding the old one after a rotation.

use super::*;

/// The session setting that carries a PostgreSQL password verifier into [`set_password`]'s
/// `DO` block (custom settings need a dotted name).
pub const PG_VERIFIER_SETTING: &str = "database_operator.password_verifier";

/// Sets an account's password.
///
/// - PostgreSQL: `secret` must be a SCRAM-SHA-256 verifier computed by the caller (the driver
///   does it with `postgres-protocol`), never the clear text. It is bound as a parameter into a
///   session setting, and a `DO` block issues `ALTER ROLE` on the server, so neither the client's
///   debug log of statements nor the server's `log_statement = ddl` sees it.
/// - MySQL: with `retain_old`, the old password keeps working (`RETAIN CURRENT PASSWORD`)
///   until [`discard_old_password`], so clients can move over without an outage.
/// - MariaDB: replaced at once (MariaDB has no dual passwords; `retain_old` is ignored). An
///   account with [`Account::unix_socket`] keeps its socket login:
///   `IDENTIFIED VIA mysql_native_password USING PASSWORD(...) OR unix_socket`.
pub fn set_password(
    dialect: Engine,
    account: &Account,
    secret: &Secret,
    retain_old: bool,
) -> Result<Vec<Statement>, StatementError> {
    let who = account.render(dialect)?;
    let value = vec![Value::Secret(secret.clone())];
    Ok(vec![match dialect {
        Engine::Postgresql => {
            // ALTER ROLE takes no parameter for the password. The verifier goes in as a bound
            // parameter into a session setting and a DO block builds the statement on the
            // server: the text the client sends (and the server logs) holds no verifier.
            let role = check_user(&account.user)?;
            return Ok(vec![
                Statement::bound(
                    dialect,
                    format!("SELECT set_config('{PG_VERIFIER_SETTING}', $1, false)"),
                    value,
                ),
                Statement::plain(
                    dialect,
                    format!(
                        "DO $do$BEGIN EXECUTE format('ALTER ROLE %I PASSWORD %L', '{role}', \
                         current_setting('{PG_VERIFIER_SETTING}')); END$do$"
                    ),
                ),
                Statement::plain(
                    dialect,
                    format!("SELECT set_config('{PG_VERIFIER_SETTING}', '', false)"),
                ),
            ]);
        }
        Engine::Mysql => Statement::inline(
            dialect,
            if retain_old {
                format!("ALTER USER {who} IDENTIFIED BY ? RETAIN CURRENT PASSWORD")
            } else {
                format!("ALTER USER {who} IDENTIFIED BY ?")
            },
            value,
        ),
        Engine::Mariadb if account.unix_socket => Statement::inline(
            dialect,
            format!(
                "ALTER USER {who} IDENTIFIED VIA mysql_native_password USING PASSWORD(?) \
                 OR unix_socket"
            ),
            value,
        ),
        Engine::Mariadb => {
            Statement::inline(dialect, format!("ALTER USER {who} IDENTIFIED BY ?"), value)
        }
    }])
}

/// MySQL: forgets the password retained by [`set_password`]. Nothing for the others (they keep
/// one password).
pub fn discard_old_password(
    dialect: Engine,
    account: &Account,
) -> Result<Vec<Statement>, StatementError> {
    let who = account.render(dialect)?;
    Ok(match dialect {
        Engine::Mysql => vec![Statement::plain(
            dialect,
            format!("ALTER USER {who} DISCARD OLD PASSWORD"),
        )],
        Engine::Postgresql | Engine::Mariadb => Vec::new(),
    })
}
