//! The engines' command-line tools (dump, SQL client): their arguments, their password files and
//! how a restore reads their dumps. Pure: the runtime runs the programs.
//!
//! A password never appears in arguments or environment: PostgreSQL's tools read it from a
//! `PGPASSFILE`, MySQL's and MariaDB's from a `--defaults-extra-file`
//! ([`EngineDef::password_file`](crate::EngineDef::password_file) says what to write in it).

use crate::Protocol;
use crate::dump_guard::{DumpGuard, UnsafeDump};

/// Where and as whom a tool connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolTarget<'a> {
    /// A host name or address, or an absolute path: PostgreSQL's socket directory, or the
    /// MySQL/MariaDB socket file.
    pub host: &'a str,
    /// The port.
    pub port: u16,
    /// The user.
    pub user: &'a str,
}

impl ToolTarget<'_> {
    /// Whether the host is a local socket (an absolute path).
    pub fn is_socket(&self) -> bool {
        self.host.starts_with('/')
    }
}

/// What a tool is given: arguments and extra environment variables (no secret in either).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolArgs {
    /// The arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

/// Decides line by line what of a dump a restore applies: the accounts the target cluster
/// manages keep their own passwords.
///
/// - PostgreSQL (`pg_dumpall`): the `DROP ROLE`, `CREATE ROLE` and `ALTER ROLE` statements of
///   the managed roles, in the roles part before the first `\connect`, are skipped.
/// - MySQL and MariaDB: the `mysql` system schema is skipped entirely (its account tables would
///   replace the target's accounts); the application accounts come back from the section the
///   backup appends ([`crate::statements::accounts`]), where a line naming a managed account is
///   skipped.
///
/// Every line applied passes the [`DumpGuard`]: a dump asking the client to run a program is
/// refused (the lines left out never reach the client, so the guard reads what it reads).
#[derive(Debug)]
pub struct DumpFilter {
    protocol: Protocol,
    guard: DumpGuard,
    /// Lines read.
    lines: u64,
    managed: Vec<String>,
    /// PostgreSQL: still in the roles part (before the first `\connect`).
    in_roles: bool,
    /// MySQL/MariaDB: inside the `mysql` schema's part.
    in_system_schema: bool,
    /// MySQL/MariaDB: inside the accounts section the backup appends.
    in_accounts: bool,
    /// MySQL/MariaDB: past the dump tool's `-- Dump completed` line.
    dump_completed: bool,
    /// Lines skipped.
    pub skipped: u64,
}

impl DumpFilter {
    /// A filter for a dump of `engine`'s dump tool, leaving `managed` accounts alone.
    pub fn new(engine: database_operator_api::Engine, managed: Vec<String>) -> DumpFilter {
        let protocol = crate::of(engine).protocol();
        DumpFilter {
            protocol,
            guard: DumpGuard::new(protocol),
            lines: 0,
            managed,
            in_roles: true,
            in_system_schema: false,
            in_accounts: false,
            dump_completed: false,
            skipped: 0,
        }
    }

    /// The `pg_dumpall` meta-command the last line applied was, when it was one: what a restore
    /// in psql's restricted mode ([`crate::psql_restrict`]) treats apart.
    pub fn last_meta(&self) -> Option<crate::dump_guard::Meta> {
        self.guard.last_meta()
    }

    /// Whether `line` (the next line of the dump, its newline included) is applied; an error
    /// for a line the client must never see.
    pub fn keep(&mut self, line: &[u8]) -> Result<bool, UnsafeDump> {
        self.lines += 1;
        let keep = match self.protocol {
            Protocol::Postgres => {
                if line.starts_with(b"\\connect") {
                    self.in_roles = false;
                }
                !(self.in_roles && self.is_managed_role_statement(line))
            }
            Protocol::Mysql => {
                if let Some(rest) = line.strip_prefix(b"-- Current Database: ".as_slice()) {
                    let name = rest.trim_ascii();
                    self.in_system_schema = name == b"`mysql`";
                }
                if line.starts_with(b"-- Dump completed") {
                    self.dump_completed = true;
                }
                // The section the backup appends after the dump tool's last line: a marker in
                // the dump's own text (a routine's body) is not it.
                if self.dump_completed
                    && line.trim_ascii_end()
                        == crate::statements::accounts::ACCOUNTS_MARKER.as_bytes()
                {
                    self.in_system_schema = false;
                    self.in_accounts = true;
                    self.skipped += 1;
                    return Ok(false);
                }
                let refused = self.in_accounts
                    && (!is_account_statement(line) || self.names_managed_account(line));
                !(self.in_system_schema || refused)
            }
        };
        if keep {
            // What the client reads: a line left out never reaches it.
            let lines = self.lines;
            self.guard.check(line).map_err(|refusal| UnsafeDump {
                line: lines,
                ..refusal
            })?;
        } else {
            self.skipped += 1;
        }
        Ok(keep)
    }

    /// Whether `line` names a managed account: the name, quoted any way or bare, followed by
    /// `@` (an account), or after `TO`, `FOR`, `USER`, `EXISTS` or `ROLE` (a grantee, the
    /// account created or altered).
    fn names_managed_account(&self, line: &[u8]) -> bool {
        let text = String::from_utf8_lossy(line);
        let ends_name = |rest: &str| {
            rest.chars()
                .next()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '$' || c == '.'))
        };
        self.managed.iter().any(|user| {
            let forms = [
                format!("`{user}`"),
                format!("'{user}'"),
                format!("\"{user}\""),
                user.clone(),
            ];
            forms.iter().any(|form| {
                text.match_indices(form.as_str()).any(|(at, _)| {
                    let before = text[..at].trim_end();
                    let after = &text[at + form.len()..];
                    let bare = form == user;
                    let starts_name = !bare
                        || text[..at]
                            .chars()
                            .next_back()
                            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
                    starts_name
                        && (!bare || ends_name(after))
                        && (after.trim_start().starts_with('@')
                            || ["TO", "FOR", "USER", "EXISTS", "ROLE", ","]
                                .iter()
                                .any(|k| before.to_ascii_uppercase().ends_with(k)))
                })
            })
        })
    }

    fn is_managed_role_statement(&self, line: &[u8]) -> bool {
        self.managed.iter().any(|role| {
            let quoted = format!("\"{role}\"");
            [role.as_str(), quoted.as_str()].iter().any(|r| {
                line.trim_ascii_end() == format!("DROP ROLE IF EXISTS {r};").as_bytes()
                    || line.trim_ascii_end() == format!("DROP ROLE {r};").as_bytes()
                    || line.trim_ascii_end() == format!("CREATE ROLE {r};").as_bytes()
                    || line.starts_with(format!("ALTER ROLE {r} WITH ").as_bytes())
                    || line.starts_with(format!("ALTER ROLE {r} SET ").as_bytes())
            })
        })
    }
}

/// Whether `line` is one of the statements an accounts section holds
/// ([`crate::statements::accounts::section`]).
fn is_account_statement(line: &[u8]) -> bool {
    [
        b"CREATE USER IF NOT EXISTS ".as_slice(),
        b"CREATE ROLE IF NOT EXISTS ",
        b"GRANT ",
        b"SET DEFAULT ROLE ",
    ]
    .iter()
    .any(|p| line.starts_with(p))
}

#[cfg(test)]
mod tests {
    use database_operator_api::Engine;

    use super::*;

    /// The accounts a restore into a cluster leaves alone (the runtime's `managed_accounts`).
    fn managed() -> Vec<String> {
        ["root", "postgres", "replicator", "database_operator"]
            .map(str::to_owned)
            .to_vec()
    }

    fn keep_all(engine: Engine, text: &str) -> String {
        let mut filter = DumpFilter::new(engine, managed());
        text.split_inclusive('\n')
            .filter(|l| filter.keep(l.as_bytes()).expect("a safe dump"))
            .collect()
    }

    #[test]
    fn postgresql_managed_roles_keep_their_passwords() {
        let dump = "SET default_transaction_read_only = off;\n\
DROP DATABASE IF EXISTS shop;\n\
DROP ROLE IF EXISTS app;\n\
DROP ROLE IF EXISTS database_operator;\n\
DROP ROLE IF EXISTS postgres;\n\
DROP ROLE IF EXISTS replicator;\n\
CREATE ROLE app;\n\
ALTER ROLE app WITH LOGIN PASSWORD 'SCRAM-SHA-256$x';\n\
CREATE ROLE database_operator;\n\
ALTER ROLE database_operator WITH SUPERUSER LOGIN PASSWORD 'SCRAM-SHA-256$y';\n\
CREATE ROLE postgres;\n\
ALTER ROLE postgres WITH SUPERUSER INHERIT CREATEROLE CREATEDB LOGIN REPLICATION BYPASSRLS PASSWORD 'SCRAM-SHA-256$z';\n\
\\connect template1\n\
COPY t (a) FROM stdin;\n\
CREATE ROLE postgres;\n\
\\.\n";
        let kept = keep_all(Engine::Postgresql, dump);
        assert_eq!(
            kept,
            "SET default_transaction_read_only = off;\n\
DROP DATABASE IF EXISTS shop;\n\
DROP ROLE IF EXISTS app;\n\
CREATE ROLE app;\n\
ALTER ROLE app WITH LOGIN PASSWORD 'SCRAM-SHA-256$x';\n\
\\connect template1\n\
COPY t (a) FROM stdin;\n\
CREATE ROLE postgres;\n\
\\.\n"
        );
    }

    #[test]
    fn the_guard_reads_what_the_client_reads_and_counts_every_line() {
        // The managed role's line is left out, so psql never sees its open quote: the next
        // line is a command to psql and must be refused, named by its line in the dump.
        let mut filter = DumpFilter::new(Engine::Postgresql, managed());
        let dump = "SELECT 1;\nALTER ROLE postgres WITH PASSWORD '\n\\! id\n';\n";
        let mut lines = dump.split_inclusive('\n').map(str::as_bytes);
        assert_eq!(filter.keep(lines.next().unwrap()), Ok(true));
        assert_eq!(filter.keep(lines.next().unwrap()), Ok(false));
        let refusal = filter.keep(lines.next().unwrap()).unwrap_err();
        assert_eq!(refusal.line, 3, "{refusal}");
    }

    #[test]
    fn mysql_family_leaves_the_system_schema_alone() {
        let dump = "-- MariaDB dump\n\
/*!40101 SET NAMES utf8mb4 */;\n\
-- Current Database: `e2e`\n\
CREATE DATABASE `e2e`;\n\
INSERT INTO `t` VALUES (1,'-- Current Database: `mysql`');\n\
-- Current Database: `mysql`\n\
INSERT INTO `global_priv` VALUES ('localhost','root','{}');\n\
-- Current Database: `shop`\n\
INSERT INTO `items` VALUES (1);\n";
        for engine in [Engine::Mariadb, Engine::Mysql] {
            assert_eq!(
                keep_all(engine, dump),
                "-- MariaDB dump\n\
/*!40101 SET NAMES utf8mb4 */;\n\
-- Current Database: `e2e`\n\
CREATE DATABASE `e2e`;\n\
INSERT INTO `t` VALUES (1,'-- Current Database: `mysql`');\n\
-- Current Database: `shop`\n\
INSERT INTO `items` VALUES (1);\n"
            );
        }
    }

    #[test]
    fn the_accounts_section_is_applied_without_the_managed_accounts() {
        let dump = "-- Current Database: `shop`\n\
CREATE PROCEDURE p() SELECT '\n\
-- database-operator: application accounts\n\
';\n\
-- Current Database: `mysql`\n\
INSERT INTO `global_priv` VALUES ('localhost','root','{}');\n\
-- Dump completed on 2026-12-07 19:00:00\n\
\n\
-- database-operator: application accounts\n\
CREATE USER IF NOT EXISTS `shop_app`@`%` IDENTIFIED BY PASSWORD '*AB';\n\
CREATE USER IF NOT EXISTS `root`@`%` IDENTIFIED BY PASSWORD '*CD';\n\
GRANT ALL PRIVILEGES ON *.* TO `root`@`%` WITH GRANT OPTION;\n\
GRANT `reader` TO `database_operator`@`%`;\n\
GRANT `reader` TO database_operator@'%';\n\
SET DEFAULT ROLE `reader` FOR root@localhost;\n\
SET DEFAULT ROLE `reader` TO `shop_app`@`%`, replicator@`%`;\n\
DROP USER `shop_app`@`%`;\n\
ALTER USER shop_app@'%' IDENTIFIED BY 'x';\n\
GRANT SELECT ON `root_reports`.* TO `shop_app`@`%`;\n\
GRANT SELECT ON `shop`.* TO `shop_app`@`%`;\n";
        for engine in [Engine::Mariadb, Engine::Mysql] {
            assert_eq!(
                keep_all(engine, dump),
                "-- Current Database: `shop`\n\
CREATE PROCEDURE p() SELECT '\n\
-- database-operator: application accounts\n\
';\n\
CREATE USER IF NOT EXISTS `shop_app`@`%` IDENTIFIED BY PASSWORD '*AB';\n\
GRANT SELECT ON `root_reports`.* TO `shop_app`@`%`;\n\
GRANT SELECT ON `shop`.* TO `shop_app`@`%`;\n"
            );
        }
    }
}
