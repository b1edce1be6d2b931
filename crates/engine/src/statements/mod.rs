//! The SQL the operator sends, per engine, as pure builders (no connection, no IO).
//!
//! Each builder takes the [`Engine`] whose dialect it speaks: PostgreSQL 14 or later
//! (`primary_conninfo` reloadable, `pg_promote`, `pg_terminate_backend` that waits), MySQL 8.4
//! LTS or 9.x (`REPLICA`/`SOURCE` statements, GTID auto-positioning), MariaDB 10.6 or later
//! (`SLAVE`/`MASTER` statements, GTID `slave_pos`). The drivers that send them (tokio-postgres,
//! mysql_async) are the runtime's.
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

use database_operator_api::Engine;

pub mod accounts;
mod passwords;
mod probe;
mod replication;
mod tls;

pub use passwords::{PG_VERIFIER_SETTING, discard_old_password, set_password};
pub(crate) use probe::{MARIADB_PROBE, MYSQL_PROBE};
pub use probe::{ProbeReading, probe, replica_status_words, session_time_limit, timeline_history};
pub use replication::{
    MEMBER_SLOT_PREFIX, fence, follow, keep_member_slots, member_slot, promote, quarantine,
    set_semi_sync, stop_receiving, wait_applied,
};
pub use tls::reload_tls;

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
    dialect: Engine,
}

impl Statement {
    fn plain(dialect: Engine, sql: impl Into<String>) -> Statement {
        Statement {
            sql: sql.into(),
            params: Vec::new(),
            binding: Binding::Parameters,
            dialect,
        }
    }

    fn bound(dialect: Engine, sql: impl Into<String>, params: Vec<Value>) -> Statement {
        Statement {
            params,
            ..Statement::plain(dialect, sql)
        }
    }

    fn inline(dialect: Engine, sql: impl Into<String>, params: Vec<Value>) -> Statement {
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
                Engine::Postgresql => rest
                    .char_indices()
                    .filter(|&(_, c)| c == '$')
                    .map(|(i, _)| {
                        let digits = rest[i + 1..].bytes().take_while(u8::is_ascii_digit).count();
                        (i, 1 + digits)
                    })
                    .find(|&(_, len)| len > 1),
                Engine::Mysql | Engine::Mariadb => rest.find('?').map(|i| (i, 1)),
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
pub fn quote_literal(dialect: Engine, value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 3);
    if dialect == Engine::Postgresql {
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

/// An absolute file path the operator chose (the authority file on a member), checked instead of
/// quoted: `/` then letters, digits, `/ . - _`.
fn check_path(path: &str) -> Result<&str, StatementError> {
    let ok = (2..=255).contains(&path.len())
        && path.starts_with('/')
        && !path.contains("..")
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'-' | b'_'));
    ok.then_some(path)
        .ok_or_else(|| StatementError::InvalidName {
            what: "authority file",
            value: path.to_owned(),
            rule: "an absolute path of A-Z a-z 0-9 / . - _ without ..",
        })
}

/// A database account: a PostgreSQL role, or a MySQL/MariaDB `'user'@'host'`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// User (role) name.
    pub user: String,
    /// MySQL/MariaDB host part (`%` for any); ignored by PostgreSQL.
    pub host: String,
    /// MariaDB: the account also logs in through `unix_socket` (the image's `root@localhost`),
    /// which setting a password must keep. Ignored by the other dialects.
    pub unix_socket: bool,
}

impl Account {
    /// `'user'@'%'` (any host).
    pub fn any_host(user: impl Into<String>) -> Account {
        Account::at(user, "%")
    }

    /// `'user'@'host'`, password login only.
    pub fn at(user: impl Into<String>, host: impl Into<String>) -> Account {
        Account {
            user: user.into(),
            host: host.into(),
            unix_socket: false,
        }
    }

    fn render(&self, dialect: Engine) -> Result<String, StatementError> {
        let user = check_user(&self.user)?;
        Ok(match dialect {
            Engine::Postgresql => format!("\"{user}\""),
            Engine::Mysql | Engine::Mariadb => {
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
    /// How the channel uses TLS.
    pub tls: SourceTls,
}

/// How a replica's connection to its source uses TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SourceTls {
    /// The source serves no TLS (or it is not known): PostgreSQL as libpq does by default (TLS
    /// when offered), MySQL keeps `SOURCE_SSL = 1` (its servers always offer TLS), MariaDB a
    /// plain channel (`MASTER_SSL = 0`).
    #[default]
    Plain,
    /// The source serves TLS (it may refuse plain connections) and the replica has no authority
    /// to check it with: encrypted, unchecked (PostgreSQL `sslmode=require`, MySQL
    /// `SOURCE_SSL = 1`, MariaDB `MASTER_SSL = 1`).
    Encrypted,
    /// TLS that checks the source's certificate against the authority in `ca_file` on the
    /// replica for the name in [`ReplicationSource::host`] (PostgreSQL `sslmode=verify-full`,
    /// MySQL `SOURCE_SSL_VERIFY_SERVER_CERT = 1`, MariaDB `MASTER_SSL_VERIFY_SERVER_CERT = 1`).
    Checked {
        /// The authorities file on the replica.
        ca_file: String,
    },
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

#[cfg(test)]
mod tests;
