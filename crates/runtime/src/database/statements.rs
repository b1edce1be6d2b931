//! The SQL the operator sends, per dialect, as pure builders (no connection, no IO).
//!
//! Each builder returns [`Statement`]s: text with placeholders and the values to bind. Secrets
//! (passwords, PostgreSQL password verifiers) are always values, never part of the text, and a
//! [`Secret`] prints as `<redacted>` in `Debug` and `Display`, so a statement can be logged as
//! it is.
//!
//! Some statements take no placeholders where the value goes (`ALTER USER ... IDENTIFIED BY`,
//! `CHANGE REPLICATION SOURCE TO`, `ALTER ROLE ... PASSWORD`, `ALTER SYSTEM SET`): the server's
//! grammar wants a literal there. Those are [`Binding::Inline`]: the driver quotes the values
//! into the text only at the moment it sends it ([`Statement::inline_sql`]), and the result is
//! never logged. MySQL and MariaDB rewrite the password of `ALTER USER` and `CHANGE
//! REPLICATION SOURCE` out of their own logs; for PostgreSQL the driver sends a SCRAM-SHA-256
//! verifier, never the clear text, so a logged `ALTER ROLE` shows no password either.
//!
//! Names (users, hosts) are checked against a strict pattern instead of being quoted: the
//! operator chooses them, and a name that needs quoting is a bug to refuse, not to escape.

use std::fmt;

/// The SQL dialect of a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// PostgreSQL 14 or later (`primary_conninfo` reloadable, `pg_promote`,
    /// `pg_terminate_backend` that waits).
    Postgresql,
    /// MySQL 8.4 LTS or 9.x (`REPLICA`/`SOURCE` statements, GTID auto-positioning).
    Mysql,
    /// MariaDB 10.6 or later (`SLAVE`/`MASTER` statements, GTID `slave_pos`).
    Mariadb,
}

impl Dialect {
    /// Lower-case name, as in the CRD's `engine`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Dialect::Postgresql => "postgresql",
            Dialect::Mysql => "mysql",
            Dialect::Mariadb => "mariadb",
        }
    }
}

/// A secret value (a password or a password verifier). `Debug` and `Display` print
/// `<redacted>`; [`Secret::expose`] is the only way to the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the driver to send. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A value bound to a placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// Text (not secret).
    Text(String),
    /// An integer.
    Int(i64),
    /// A secret; redacted in `Debug` and `Display`.
    Secret(Secret),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Text(t) => write!(f, "{t:?}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Secret(s) => write!(f, "{s}"),
        }
    }
}

/// How a statement's values reach the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// Bound as parameters of a prepared statement (`$1` for PostgreSQL, `?` for MySQL).
    Parameters,
    /// Quoted into the text when sent, because the server's grammar takes no placeholder at
    /// that position. The placeholders mark where; see [`Statement::inline_sql`].
    Inline,
}

/// One SQL statement: text with placeholders, and the values for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// The text, with `$1`, `$2`, ... (PostgreSQL) or `?` (MySQL, MariaDB) placeholders.
    pub sql: String,
    /// The values, in placeholder order.
    pub params: Vec<Value>,
    /// How the values are sent.
    pub binding: Binding,
    dialect: Dialect,
}

impl Statement {
    fn plain(dialect: Dialect, sql: impl Into<String>) -> Statement {
        Statement {
            sql: sql.into(),
            params: Vec::new(),
            binding: Binding::Parameters,
            dialect,
        }
    }

    fn bound(dialect: Dialect, sql: impl Into<String>, params: Vec<Value>) -> Statement {
        Statement {
            params,
            ..Statement::plain(dialect, sql)
        }
    }

    fn inline(dialect: Dialect, sql: impl Into<String>, params: Vec<Value>) -> Statement {
        Statement {
            binding: Binding::Inline,
            ..Statement::bound(dialect, sql, params)
        }
    }

    /// The text with every value quoted in, for [`Binding::Inline`] statements. The result can
    /// hold a secret: send it, never log it.
    pub fn inline_sql(&self) -> String {
        let mut out = String::with_capacity(self.sql.len() + 64);
        let mut values = self.params.iter();
        let mut rest = self.sql.as_str();
        loop {
            let next = match self.dialect {
                Dialect::Postgresql => rest
                    .char_indices()
                    .filter(|&(_, c)| c == '$')
                    .map(|(i, _)| {
                        let digits = rest[i + 1..].bytes().take_while(u8::is_ascii_digit).count();
                        (i, 1 + digits)
                    })
                    .find(|&(_, len)| len > 1),
                Dialect::Mysql | Dialect::Mariadb => rest.find('?').map(|i| (i, 1)),
            };
            let Some((at, len)) = next else {
                out.push_str(rest);
                return out;
            };
            out.push_str(&rest[..at]);
            match values.next() {
                Some(Value::Int(i)) => out.push_str(&i.to_string()),
                Some(Value::Text(t)) => out.push_str(&quote_literal(self.dialect, t)),
                Some(Value::Secret(s)) => out.push_str(&quote_literal(self.dialect, s.expose())),
                None => out.push_str(&rest[at..at + len]),
            }
            rest = &rest[at + len..];
        }
    }
}

impl fmt::Display for Statement {
    /// The text and the values (secrets redacted), e.g.
    /// `ALTER USER 'app'@'%' IDENTIFIED BY ?  -- [<redacted>] inline`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sql)?;
        if !self.params.is_empty() {
            let values: Vec<String> = self.params.iter().map(Value::to_string).collect();
            write!(f, "  -- [{}]", values.join(", "))?;
            if self.binding == Binding::Inline {
                f.write_str(" quoted in when sent")?;
            }
        }
        Ok(())
    }
}

/// A string literal that is safe whatever the server's settings.
///
/// PostgreSQL: `E'...'` with `\` and `'` escaped, so `standard_conforming_strings` does not
/// matter. MySQL/MariaDB: `'...'` with `\` and `'` escaped; the driver's session runs without
/// `NO_BACKSLASH_ESCAPES` (see `mysql.rs`). NUL bytes are dropped (no server takes them in a
/// password or a host name).
pub fn quote_literal(dialect: Dialect, value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 3);
    if dialect == Dialect::Postgresql {
        out.push('E');
    }
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A name the builders refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    /// A user, role or host name outside the accepted pattern.
    #[error("{what} {value:?} is not accepted: {rule}")]
    InvalidName {
        /// `user`, `host`, ...
        what: &'static str,
        /// The value (names are not secrets).
        value: String,
        /// The pattern it had to match.
        rule: &'static str,
    },
    /// The dialect cannot do this the way it was asked.
    #[error("{0}")]
    NotSupported(String),
}

fn check_user(user: &str) -> Result<&str, StatementError> {
    let ok = (1..=32).contains(&user.len())
        && user
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    ok.then_some(user)
        .ok_or_else(|| StatementError::InvalidName {
            what: "user",
            value: user.to_owned(),
            rule: "1 to 32 of A-Z a-z 0-9 _ -, starting with a letter or _",
        })
}

fn check_host<'a>(
    host: &'a str,
    what: &'static str,
    allow_wildcard: bool,
) -> Result<&'a str, StatementError> {
    let ok = (1..=253).contains(&host.len())
        && host.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'.' | b'-' | b':' | b'_')
                || (allow_wildcard && b == b'%')
        });
    ok.then_some(host)
        .ok_or_else(|| StatementError::InvalidName {
            what,
            value: host.to_owned(),
            rule: "a host name or IP address (A-Z a-z 0-9 . - : _)",
        })
}

/// A database account: a PostgreSQL role, or a MySQL/MariaDB `'user'@'host'`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// User (role) name.
    pub user: String,
    /// MySQL/MariaDB host part (`%` for any); ignored by PostgreSQL.
    pub host: String,
}

impl Account {
    /// `'user'@'%'` (any host).
    pub fn any_host(user: impl Into<String>) -> Account {
        Account {
            user: user.into(),
            host: "%".to_owned(),
        }
    }

    fn render(&self, dialect: Dialect) -> Result<String, StatementError> {
        let user = check_user(&self.user)?;
        Ok(match dialect {
            Dialect::Postgresql => format!("\"{user}\""),
            Dialect::Mysql | Dialect::Mariadb => {
                format!(
                    "'{user}'@'{}'",
                    check_host(&self.host, "account host", true)?
                )
            }
        })
    }
}

/// Where a replica streams from, and as whom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationSource {
    /// The source's host name or IP address (from the address resolver).
    pub host: String,
    /// The source's port.
    pub port: u16,
    /// The replication user.
    pub user: String,
    /// MySQL/MariaDB: the replication user's password (PostgreSQL takes it from `passfile`).
    pub password: Option<Secret>,
    /// PostgreSQL: the libpq password file the standby reads (`passfile=` in
    /// `primary_conninfo`), so no password is written to `postgresql.auto.conf`.
    pub passfile: Option<String>,
    /// PostgreSQL: the name the standby reports (`application_name`, seen in
    /// `pg_stat_replication` and used by `synchronous_standby_names`).
    pub application_name: Option<String>,
}

/// A libpq connection-string value: `'...'` with `\` and `'` backslash-escaped.
fn conninfo_value(value: &str) -> String {
    let mut out = String::from("'");
    for c in value.chars() {
        if c == '\\' || c == '\'' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// The statements whose results make up a probe, in the order the driver reads them.
///
/// PostgreSQL: one row. `timeline` is exact on a primary (from the current WAL file name; the
/// checkpoint's timeline lags behind a promotion); a standby reports the timeline it receives.
/// MySQL and MariaDB: the server variables, then the replica status (no row on a primary).
pub fn probe(dialect: Dialect) -> Vec<Statement> {
    match dialect {
        Dialect::Postgresql => vec![Statement::plain(
            dialect,
            "SELECT pg_is_in_recovery() AS in_recovery, \
             current_setting('default_transaction_read_only') = 'on' AS read_only, \
             current_setting('server_version') AS version, \
             (SELECT system_identifier::text FROM pg_control_system()) AS system_identifier, \
             CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn()::text END AS current_lsn, \
             pg_last_wal_receive_lsn()::text AS receive_lsn, \
             pg_last_wal_replay_lsn()::text AS replay_lsn, \
             CASE WHEN pg_is_in_recovery() \
               THEN COALESCE((SELECT received_tli FROM pg_stat_wal_receiver), \
                             (SELECT timeline_id FROM pg_control_checkpoint()))::bigint \
               ELSE ('x' || lpad(substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8), 16, '0'))::bit(64)::bigint \
             END AS timeline, \
             floor(EXTRACT(EPOCH FROM (now() - pg_last_xact_replay_timestamp())))::bigint AS replay_delay_seconds, \
             pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::bigint AS replay_lag_bytes, \
             (SELECT sender_host FROM pg_stat_wal_receiver) AS source_host, \
             (SELECT sender_port FROM pg_stat_wal_receiver) AS source_port, \
             (SELECT status FROM pg_stat_wal_receiver) AS receiver_status",
        )],
        Dialect::Mysql => vec![
            Statement::plain(
                dialect,
                "SELECT @@GLOBAL.server_uuid, @@GLOBAL.server_id, @@GLOBAL.read_only, \
                 @@GLOBAL.super_read_only, @@GLOBAL.gtid_executed, @@GLOBAL.version",
            ),
            Statement::plain(dialect, "SHOW REPLICA STATUS"),
        ],
        Dialect::Mariadb => vec![
            Statement::plain(
                dialect,
                "SELECT @@GLOBAL.server_id, @@GLOBAL.read_only, @@GLOBAL.gtid_current_pos, \
                 @@GLOBAL.gtid_slave_pos, @@GLOBAL.version",
            ),
            Statement::plain(dialect, "SHOW SLAVE STATUS"),
        ],
    }
}

/// PostgreSQL: the history file of `timeline` (superuser or `pg_read_server_files`).
pub fn timeline_history(timeline: u32) -> Statement {
    Statement::bound(
        Dialect::Postgresql,
        "SELECT pg_read_file('pg_wal/' || lpad(upper(to_hex($1::int)), 8, '0') || '.history')",
        vec![Value::Int(i64::from(timeline))],
    )
}

/// Makes a member refuse writes.
///
/// - MySQL: `super_read_only` (refuses writes from every account, `SUPER` included).
/// - MariaDB: `read_only` (accounts with `READ_ONLY ADMIN` can still write: the operator's own
///   account and nothing an application uses).
/// - PostgreSQL has no read-only switch for a primary. Fencing here means: new transactions
///   default to read-only (`ALTER SYSTEM` + reload: it also survives a restart), and every
///   client session is ended (waiting up to 5 s for each to exit) so none keeps writing. A client can still ask for a read-write
///   transaction explicitly, so this is a best effort that closes the common paths; the real
///   guarantee is stopping the pod (or taking it out of the read-write Service) before the
///   promotion, which the failover does next.
pub fn fence(dialect: Dialect) -> Vec<Statement> {
    match dialect {
        Dialect::Postgresql => vec![
            Statement::plain(
                dialect,
                "ALTER SYSTEM SET default_transaction_read_only = on",
            ),
            Statement::plain(dialect, "SELECT pg_reload_conf()"),
            Statement::plain(
                dialect,
                "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity \
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
            ),
        ],
        Dialect::Mysql => vec![Statement::plain(dialect, "SET GLOBAL super_read_only = ON")],
        Dialect::Mariadb => vec![Statement::plain(dialect, "SET GLOBAL read_only = ON")],
    }
}

/// MySQL/MariaDB: stops receiving from the source but keeps applying what was received (the
/// first step of a promotion). Nothing for PostgreSQL (promotion replays what was received).
pub fn stop_receiving(dialect: Dialect) -> Vec<Statement> {
    match dialect {
        Dialect::Postgresql => Vec::new(),
        Dialect::Mysql => vec![Statement::plain(dialect, "STOP REPLICA IO_THREAD")],
        Dialect::Mariadb => vec![Statement::plain(dialect, "STOP SLAVE IO_THREAD")],
    }
}

/// MySQL/MariaDB: waits up to `timeout_seconds` until `position` (a GTID set / MariaDB
/// position) is applied. Returns one row: `0` when applied (MariaDB: `-1` on timeout, MySQL:
/// `1`). Nothing for PostgreSQL.
pub fn wait_applied(dialect: Dialect, position: &str, timeout_seconds: u32) -> Vec<Statement> {
    let params = vec![
        Value::Text(position.to_owned()),
        Value::Int(i64::from(timeout_seconds)),
    ];
    match dialect {
        Dialect::Postgresql => Vec::new(),
        Dialect::Mysql => vec![Statement::bound(
            dialect,
            "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)",
            params,
        )],
        Dialect::Mariadb => vec![Statement::bound(
            dialect,
            "SELECT MASTER_GTID_WAIT(?, ?)",
            params,
        )],
    }
}

/// Makes a replica the primary (after [`stop_receiving`] and [`wait_applied`] for MySQL and
/// MariaDB). PostgreSQL: `pg_promote` waits up to `timeout_seconds` and returns whether the
/// promotion finished; a fence left from earlier is lifted. MySQL/MariaDB: forget the source
/// entirely and accept writes.
pub fn promote(dialect: Dialect, timeout_seconds: u32) -> Vec<Statement> {
    match dialect {
        Dialect::Postgresql => vec![
            Statement::bound(
                dialect,
                "SELECT pg_promote(wait => true, wait_seconds => $1)",
                vec![Value::Int(i64::from(timeout_seconds))],
            ),
            Statement::plain(dialect, "ALTER SYSTEM RESET default_transaction_read_only"),
            Statement::plain(dialect, "SELECT pg_reload_conf()"),
        ],
        Dialect::Mysql => vec![
            Statement::plain(dialect, "STOP REPLICA"),
            Statement::plain(dialect, "RESET REPLICA ALL"),
            Statement::plain(dialect, "SET GLOBAL super_read_only = OFF"),
            Statement::plain(dialect, "SET GLOBAL read_only = OFF"),
        ],
        Dialect::Mariadb => vec![
            Statement::plain(dialect, "STOP SLAVE"),
            Statement::plain(dialect, "RESET SLAVE ALL"),
            Statement::plain(dialect, "SET GLOBAL read_only = OFF"),
        ],
    }
}

/// Points a member at a new source.
///
/// - PostgreSQL: sets `primary_conninfo` and reloads (PostgreSQL 13+ applies it without a
///   restart). Only a standby can follow; a running primary must be restarted as a standby
///   (`standby.signal`), after `pg_rewind` when it diverged. The password comes from
///   `passfile`: a password here is refused, because `ALTER SYSTEM` would store it in clear.
/// - MySQL: read-only first, then `CHANGE REPLICATION SOURCE TO ... SOURCE_AUTO_POSITION = 1`
///   (GTID auto-positioning) and `START REPLICA`. `GET_SOURCE_PUBLIC_KEY = 1` lets
///   `caching_sha2_password` work without TLS (loopback only; TLS is a later option).
/// - MariaDB: read-only first; `gtid_slave_pos` is set from `gtid_current_pos`, so a former
///   primary resumes after its own last transaction instead of from an old replica position;
///   then `CHANGE MASTER TO ... MASTER_USE_GTID = slave_pos` and `START SLAVE`.
pub fn follow(
    dialect: Dialect,
    source: &ReplicationSource,
) -> Result<Vec<Statement>, StatementError> {
    let host = check_host(&source.host, "source host", false)?;
    let user = check_user(&source.user)?;
    let port = source.port;
    let password = || -> Result<Value, StatementError> {
        source.password.clone().map(Value::Secret).ok_or_else(|| {
            StatementError::NotSupported(format!(
                "{}: following needs the replication password",
                dialect.as_str()
            ))
        })
    };
    Ok(match dialect {
        Dialect::Postgresql => {
            if source.password.is_some() {
                return Err(StatementError::NotSupported(
                    "postgresql: the replication password belongs in a passfile, not in primary_conninfo".to_owned(),
                ));
            }
            let mut conninfo = format!(
                "host={} port={port} user={}",
                conninfo_value(host),
                conninfo_value(user)
            );
            if let Some(passfile) = &source.passfile {
                conninfo.push_str(&format!(" passfile={}", conninfo_value(passfile)));
            }
            if let Some(name) = &source.application_name {
                conninfo.push_str(&format!(" application_name={}", conninfo_value(name)));
            }
            vec![
                Statement::inline(
                    dialect,
                    "ALTER SYSTEM SET primary_conninfo = $1",
                    vec![Value::Text(conninfo)],
                ),
                Statement::plain(dialect, "SELECT pg_reload_conf()"),
            ]
        }
        Dialect::Mysql => vec![
            Statement::plain(dialect, "SET GLOBAL super_read_only = ON"),
            Statement::plain(dialect, "STOP REPLICA"),
            Statement::inline(
                dialect,
                format!(
                    "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '{host}', SOURCE_PORT = {port}, \
                     SOURCE_USER = '{user}', SOURCE_PASSWORD = ?, SOURCE_AUTO_POSITION = 1, \
                     GET_SOURCE_PUBLIC_KEY = 1, SOURCE_CONNECT_RETRY = 5"
                ),
                vec![password()?],
            ),
            Statement::plain(dialect, "START REPLICA"),
        ],
        Dialect::Mariadb => vec![
            Statement::plain(dialect, "SET GLOBAL read_only = ON"),
            Statement::plain(dialect, "STOP SLAVE"),
            Statement::plain(
                dialect,
                "SET GLOBAL gtid_slave_pos = @@GLOBAL.gtid_current_pos",
            ),
            Statement::inline(
                dialect,
                format!(
                    "CHANGE MASTER TO MASTER_HOST = '{host}', MASTER_PORT = {port}, \
                     MASTER_USER = '{user}', MASTER_PASSWORD = ?, MASTER_USE_GTID = slave_pos, \
                     MASTER_CONNECT_RETRY = 5"
                ),
                vec![password()?],
            ),
            Statement::plain(dialect, "START SLAVE"),
        ],
    })
}

/// The session setting that carries a PostgreSQL password verifier into [`set_password`]'s
/// `DO` block (custom settings need a dotted name).
pub const PG_VERIFIER_SETTING: &str = "database_operator.password_verifier";

/// Sets an account's password.
///
/// - PostgreSQL: `secret` must be a SCRAM-SHA-256 verifier computed by the caller (the driver
///   does it with `postgres-protocol`), never the clear text. It is bound as a parameter into a
///   session setting, and a `DO` block issues `ALTER ROLE` on the server, so neither the client's
///   debug log of statements nor the server's `log_statement = ddl` sees it.
/// - MySQL: the old password keeps working (`RETAIN CURRENT PASSWORD`) until
///   [`discard_old_password`], so clients can move over without an outage.
/// - MariaDB: replaced at once (MariaDB has no dual passwords).
pub fn set_password(
    dialect: Dialect,
    account: &Account,
    secret: &Secret,
) -> Result<Vec<Statement>, StatementError> {
    let who = account.render(dialect)?;
    let value = vec![Value::Secret(secret.clone())];
    Ok(vec![match dialect {
        Dialect::Postgresql => {
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
        Dialect::Mysql => Statement::inline(
            dialect,
            format!("ALTER USER {who} IDENTIFIED BY ? RETAIN CURRENT PASSWORD"),
            value,
        ),
        Dialect::Mariadb => {
            Statement::inline(dialect, format!("ALTER USER {who} IDENTIFIED BY ?"), value)
        }
    }])
}

/// MySQL: forgets the password retained by [`set_password`]. Nothing for the others (they keep
/// one password).
pub fn discard_old_password(
    dialect: Dialect,
    account: &Account,
) -> Result<Vec<Statement>, StatementError> {
    let who = account.render(dialect)?;
    Ok(match dialect {
        Dialect::Mysql => vec![Statement::plain(
            dialect,
            format!("ALTER USER {who} DISCARD OLD PASSWORD"),
        )],
        Dialect::Postgresql | Dialect::Mariadb => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIALECTS: [Dialect; 3] = [Dialect::Postgresql, Dialect::Mysql, Dialect::Mariadb];

    fn show(statements: &[Statement]) -> String {
        if statements.is_empty() {
            return "(nothing)\n".to_owned();
        }
        statements.iter().map(|s| format!("{s};\n")).collect()
    }

    fn source(dialect: Dialect) -> ReplicationSource {
        ReplicationSource {
            host: "orders-0.orders-headless.shop.svc".to_owned(),
            port: if dialect == Dialect::Postgresql {
                5432
            } else {
                3306
            },
            user: "replication".to_owned(),
            password: (dialect != Dialect::Postgresql).then(|| Secret::new("s3cr'et\\pw")),
            passfile: (dialect == Dialect::Postgresql)
                .then(|| "/var/lib/postgresql/.pgpass".to_owned()),
            application_name: (dialect == Dialect::Postgresql).then(|| "orders-1".to_owned()),
        }
    }

    #[test]
    fn every_statement_per_dialect() {
        for d in DIALECTS {
            let app = Account::any_host("app");
            let pw = Secret::new(match d {
                Dialect::Postgresql => "SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy",
                _ => "n3w'pass\\word",
            });
            let text = [
                ("probe", probe(d)),
                (
                    "timeline_history(2)",
                    if d == Dialect::Postgresql {
                        vec![timeline_history(2)]
                    } else {
                        Vec::new()
                    },
                ),
                ("fence", fence(d)),
                ("stop_receiving", stop_receiving(d)),
                (
                    "wait_applied",
                    wait_applied(
                        d,
                        match d {
                            Dialect::Mysql => "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42",
                            _ => "0-1-42",
                        },
                        30,
                    ),
                ),
                ("promote", promote(d, 60)),
                ("follow", follow(d, &source(d)).unwrap()),
                ("set_password", set_password(d, &app, &pw).unwrap()),
                (
                    "discard_old_password",
                    discard_old_password(d, &app).unwrap(),
                ),
            ]
            .iter()
            .map(|(name, s)| format!("-- {name}\n{}", show(s)))
            .collect::<Vec<_>>()
            .join("\n");
            insta::assert_snapshot!(d.as_str(), text);
        }
    }

    #[test]
    fn secrets_never_show_in_debug_or_display() {
        for d in DIALECTS {
            let pw = Secret::new("hunter2-very-secret");
            let mut all = set_password(d, &Account::any_host("app"), &pw).unwrap();
            let mut src = source(d);
            if d != Dialect::Postgresql {
                src.password = Some(pw.clone());
                all.extend(follow(d, &src).unwrap());
            }
            for s in &all {
                for text in [format!("{s}"), format!("{s:?}"), format!("{:?}", s.params)] {
                    assert!(!text.contains("hunter2"), "{d:?} leaks: {text}");
                }
            }
            assert!(
                all.iter()
                    .any(|s| s.inline_sql().contains("hunter2-very-secret"))
            );
        }
    }

    #[test]
    fn inline_values_are_quoted_so_they_cannot_end_the_literal() {
        let pw = Secret::new("a'b\\c'; DROP USER root; --");
        let my = set_password(Dialect::Mysql, &Account::any_host("app"), &pw).unwrap();
        assert_eq!(
            my[0].inline_sql(),
            r"ALTER USER 'app'@'%' IDENTIFIED BY 'a''b\\c''; DROP USER root; --' RETAIN CURRENT PASSWORD"
        );
        let pg = set_password(Dialect::Postgresql, &Account::any_host("app"), &pw).unwrap();
        assert!(pg.iter().all(|s| !s.sql.contains("DROP")));
        assert_eq!(pg[0].params, [Value::Secret(pw.clone())]);
        assert_eq!(pg[0].binding, Binding::Parameters);
        let mut conninfo = source(Dialect::Postgresql);
        conninfo.application_name = Some("it's".to_owned());
        assert!(
            follow(Dialect::Postgresql, &conninfo).unwrap()[0]
                .inline_sql()
                .contains(r"application_name=''it\\''s''")
        );
        let f = follow(Dialect::Postgresql, &source(Dialect::Postgresql)).unwrap();
        assert_eq!(
            f[0].inline_sql(),
            "ALTER SYSTEM SET primary_conninfo = E'host=''orders-0.orders-headless.shop.svc'' port=5432 \
             user=''replication'' passfile=''/var/lib/postgresql/.pgpass'' application_name=''orders-1'''"
        );
    }

    #[test]
    fn names_that_would_need_quoting_are_refused() {
        for bad in ["", "a'b", "a b", "1abc", "x\"y", "root@%", &"u".repeat(33)] {
            assert!(
                matches!(
                    set_password(Dialect::Mysql, &Account::any_host(bad), &Secret::new("x")),
                    Err(StatementError::InvalidName { what: "user", .. })
                ),
                "{bad:?}"
            );
        }
        let mut src = source(Dialect::Mariadb);
        src.host = "evil' , MASTER_HOST='x".to_owned();
        assert!(matches!(
            follow(Dialect::Mariadb, &src),
            Err(StatementError::InvalidName {
                what: "source host",
                ..
            })
        ));
        let mut acct = Account::any_host("app");
        acct.host = "10.0.0.%".to_owned();
        assert!(set_password(Dialect::Mysql, &acct, &Secret::new("x")).is_ok());
        acct.host = "a'b".to_owned();
        assert!(set_password(Dialect::Mysql, &acct, &Secret::new("x")).is_err());
    }

    #[test]
    fn postgresql_follow_refuses_a_clear_text_password() {
        let mut src = source(Dialect::Postgresql);
        src.password = Some(Secret::new("x"));
        assert!(matches!(
            follow(Dialect::Postgresql, &src),
            Err(StatementError::NotSupported(_))
        ));
        let mut my = source(Dialect::Mysql);
        my.password = None;
        assert!(matches!(
            follow(Dialect::Mysql, &my),
            Err(StatementError::NotSupported(_))
        ));
    }
}
