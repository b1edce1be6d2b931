//! The application accounts of a MySQL or MariaDB server, as SQL a restore replays.
//!
//! A logical backup of these engines leaves out the `mysql` system schema (a restore that
//! replayed it would replace the target's own accounts, the operator's included), so without
//! this a restore loses every account and grant the application made. The backup reads each
//! account the way the server prints it (`SHOW CREATE USER`, with the password hash, and `SHOW
//! GRANTS`) and appends them to the dump after [`ACCOUNTS_MARKER`]: first every account
//! (`CREATE USER IF NOT EXISTS`, MariaDB roles `CREATE ROLE IF NOT EXISTS`), then every grant,
//! so grants of roles find them. The server's own accounts ([`SYSTEM_USERS`]) and the accounts
//! the target cluster manages are never copied, and a restore skips any line of the section
//! that names a managed account. PostgreSQL's `pg_dumpall` already holds its roles.

use database_operator_api::Engine;

use super::{Statement, Value};

/// The line that starts the accounts section of a dump.
pub const ACCOUNTS_MARKER: &str = "-- database-operator: application accounts";

/// Accounts the server creates for itself: never copied.
pub const SYSTEM_USERS: &[&str] = &[
    "mysql.sys",
    "mysql.session",
    "mysql.infoschema",
    "mariadb.sys",
    "PUBLIC",
    "",
];

/// One account as the server printed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadAccount {
    /// The user (or role) name.
    pub user: String,
    /// The host part (empty for a MariaDB role).
    pub host: String,
    /// A MariaDB role.
    pub role: bool,
    /// `SHOW CREATE USER`'s statement (empty for a MariaDB role).
    pub create: String,
    /// `SHOW GRANTS`' statements.
    pub grants: Vec<String>,
}

/// What the session reading the accounts sets first: MySQL prints password hashes in hex
/// (`print_identified_with_as_hex`), as a text dump can carry them; none for MariaDB (its hashes
/// are text) and PostgreSQL.
pub fn session_setup(dialect: Engine) -> Vec<Statement> {
    match dialect {
        Engine::Mysql => vec![Statement::plain(
            dialect,
            "SET SESSION print_identified_with_as_hex = ON",
        )],
        Engine::Mariadb | Engine::Postgresql => Vec::new(),
    }
}

/// The query listing the accounts: rows of user, host and whether it is a role (`Y`/`N`);
/// `None` for PostgreSQL.
pub fn list(dialect: Engine) -> Option<Statement> {
    let sql = match dialect {
        Engine::Mysql => "SELECT user, host, 'N' FROM mysql.user ORDER BY user, host",
        Engine::Mariadb => "SELECT user, host, is_role FROM mysql.user ORDER BY user, host",
        Engine::Postgresql => return None,
    };
    Some(Statement::plain(dialect, sql))
}

/// `SHOW CREATE USER` for `user`@`host` (the values quoted in when sent).
pub fn show_create(dialect: Engine, user: &str, host: &str) -> Statement {
    Statement::inline(
        dialect,
        "SHOW CREATE USER ?@?",
        vec![Value::Text(user.to_owned()), Value::Text(host.to_owned())],
    )
}

/// `SHOW GRANTS FOR` `user`@`host`, or the MariaDB role `user`.
pub fn show_grants(dialect: Engine, user: &str, host: &str, role: bool) -> Statement {
    if role {
        Statement::inline(
            dialect,
            "SHOW GRANTS FOR ?",
            vec![Value::Text(user.to_owned())],
        )
    } else {
        Statement::inline(
            dialect,
            "SHOW GRANTS FOR ?@?",
            vec![Value::Text(user.to_owned()), Value::Text(host.to_owned())],
        )
    }
}

/// Whether `user`@`host` still exists: one row holding its count (an account dropped between
/// the list and its `SHOW` is skipped, not a failed backup).
pub fn exists(dialect: Engine, user: &str, host: &str) -> Statement {
    Statement::bound(
        dialect,
        "SELECT COUNT(*) FROM mysql.user WHERE user = ? AND host = ?",
        vec![Value::Text(user.to_owned()), Value::Text(host.to_owned())],
    )
}

/// Whether the account of `user` is copied: not the server's own, not one of `managed`.
pub fn copied(user: &str, managed: &[String]) -> bool {
    !SYSTEM_USERS.contains(&user) && !managed.iter().any(|m| m == user)
}

/// The accounts section of a dump: [`ACCOUNTS_MARKER`], each account created if missing, then
/// each grant, then MySQL's default roles, one statement per line. Each statement the server
/// printed must be exactly one statement (no `;`, comment or unclosed quote outside quoted
/// text: a comment or a name of the account cannot end it and start another); an account with
/// one that is not, or with a line break, is left out and named in the returned list.
///
/// Grants carry no password (MariaDB prints `IDENTIFIED BY PASSWORD` in `GRANT USAGE`: replayed
/// on an account that exists already it would replace its password); the `CREATE USER` does.
pub fn section(accounts: &[ReadAccount]) -> (String, Vec<String>) {
    let mut creates = Vec::new();
    let mut grants = Vec::new();
    let mut defaults = Vec::new();
    let mut left_out = Vec::new();
    for account in accounts {
        match account_lines(account) {
            Some((create, grant_lines, default)) => {
                creates.push(create);
                grants.extend(grant_lines);
                defaults.extend(default);
            }
            None => left_out.push(format!("{}@{}", account.user, account.host)),
        }
    }
    let mut text = String::from("\n");
    text.push_str(ACCOUNTS_MARKER);
    text.push('\n');
    for line in creates.iter().chain(&grants).chain(&defaults) {
        text.push_str(line);
        text.push('\n');
    }
    (text, left_out)
}

/// The create statement, the grants and the default roles of `account`, each one statement
/// ending in `;`; `None` when one is not a single statement on one line.
fn account_lines(account: &ReadAccount) -> Option<(String, Vec<String>, Option<String>)> {
    let user = account.user.replace('`', "``");
    let host = account.host.replace('`', "``");
    let (create, default) = if account.role {
        (format!("CREATE ROLE IF NOT EXISTS `{user}`"), None)
    } else {
        let create = one_statement(&account.create)?;
        // MySQL names the default roles in `CREATE USER`, where they must exist already: set
        // them once every account and grant is back.
        let (create, roles) = cut_clause(create, " DEFAULT ROLE ", &[" REQUIRE "])?;
        let create = match create.strip_prefix("CREATE USER ") {
            Some(rest) if !rest.starts_with("IF NOT EXISTS") => {
                format!("CREATE USER IF NOT EXISTS {rest}")
            }
            _ => create,
        };
        let default = roles.map(|r| format!("SET DEFAULT ROLE {r} TO `{user}`@`{host}`"));
        (create, default)
    };
    let mut grants = Vec::new();
    for grant in &account.grants {
        let grant = one_statement(grant)?;
        let (grant, _password) = cut_clause(grant, " IDENTIFIED ", &[" WITH "])?;
        grants.push(grant);
    }
    let finish = |s: String| -> Option<String> {
        one_statement(&s)?;
        Some(format!("{s};"))
    };
    Some((
        finish(create)?,
        grants.into_iter().map(finish).collect::<Option<Vec<_>>>()?,
        match default {
            Some(d) => Some(finish(d)?),
            None => None,
        },
    ))
}

/// `sql` without a final `;`, when it is one statement on one line: every quote closed, and no
/// `;`, `#`, `-- ` or `/*` outside quoted text.
fn one_statement(sql: &str) -> Option<String> {
    let sql = sql.trim_end().trim_end_matches(';').trim_end();
    if sql.contains(['\n', '\r']) {
        return None;
    }
    outside_quotes(sql)?;
    Some(sql.to_owned())
}

/// For each byte of `sql`, whether it is outside quoted text (`'...'`, `"..."`, `` `...` ``,
/// with backslash escapes and doubled quotes); `None` when a quote is left open or a statement
/// end or a comment starts outside quotes.
fn outside_quotes(sql: &str) -> Option<Vec<bool>> {
    let bytes = sql.as_bytes();
    let mut outside = vec![true; bytes.len()];
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) => {
                outside[i] = false;
                if b == b'\\' && q != b'`' && i + 1 < bytes.len() {
                    outside[i + 1] = false;
                    i += 1;
                } else if b == q {
                    if bytes.get(i + 1) == Some(&q) {
                        outside[i + 1] = false;
                        i += 1;
                    } else {
                        quote = None;
                    }
                }
            }
            None => match b {
                b'\'' | b'"' | b'`' => {
                    outside[i] = false;
                    quote = Some(b);
                }
                b';' | b'#' => return None,
                b'-' if bytes.get(i + 1) == Some(&b'-') => return None,
                b'/' if bytes.get(i + 1) == Some(&b'*') => return None,
                _ => {}
            },
        }
        i += 1;
    }
    quote.is_none().then_some(outside)
}

/// `sql` without the clause that starts with `start` outside quoted text and ends before the
/// first of `ends` outside quoted text after it (or at the end), and the clause's text after
/// `start`; `sql` and `None` when it has no such clause. `None` when `sql` is not one statement.
fn cut_clause(sql: String, start: &str, ends: &[&str]) -> Option<(String, Option<String>)> {
    let outside = outside_quotes(&sql)?;
    let find = |pattern: &str, from: usize| {
        (from..sql.len()).find(|&i| {
            sql.as_bytes()[i..].starts_with(pattern.as_bytes())
                && outside[i..i + pattern.len()].iter().all(|o| *o)
        })
    };
    let Some(at) = find(start, 0) else {
        return Some((sql, None));
    };
    let from = at + start.len();
    let end = ends
        .iter()
        .filter_map(|e| find(e, from))
        .min()
        .unwrap_or(sql.len());
    Some((
        format!("{}{}", &sql[..at], &sql[end..]),
        Some(sql[from..end].to_owned()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn managed() -> Vec<String> {
        ["root", "database_operator", "replicator"]
            .map(str::to_owned)
            .to_vec()
    }

    #[test]
    fn the_servers_and_the_operators_accounts_are_not_copied() {
        for user in ["root", "database_operator", "mysql.sys", "mariadb.sys", ""] {
            assert!(!copied(user, &managed()), "{user}");
        }
        assert!(copied("shop_app", &managed()));
    }

    #[test]
    fn accounts_first_then_grants_one_statement_per_line() {
        let accounts = [
            ReadAccount {
                user: "reader".into(),
                host: String::new(),
                role: true,
                create: String::new(),
                grants: vec!["GRANT SELECT ON `shop`.* TO `reader`".into()],
            },
            ReadAccount {
                user: "shop_app".into(),
                host: "%".into(),
                role: false,
                create: "CREATE USER `shop_app`@`%` IDENTIFIED BY PASSWORD '*AB12'".into(),
                grants: vec![
                    "GRANT USAGE ON *.* TO `shop_app`@`%` IDENTIFIED BY PASSWORD '*AB12'".into(),
                    "GRANT `reader` TO `shop_app`@`%`".into(),
                ],
            },
            ReadAccount {
                user: "evil\n\\! touch /tmp/x".into(),
                host: "%".into(),
                role: false,
                create: "CREATE USER `evil\n\\! touch /tmp/x`@`%`".into(),
                grants: Vec::new(),
            },
        ];
        let (text, left_out) = section(&accounts);
        assert_eq!(
            text,
            "\n-- database-operator: application accounts\n\
             CREATE ROLE IF NOT EXISTS `reader`;\n\
             CREATE USER IF NOT EXISTS `shop_app`@`%` IDENTIFIED BY PASSWORD '*AB12';\n\
             GRANT SELECT ON `shop`.* TO `reader`;\n\
             GRANT USAGE ON *.* TO `shop_app`@`%`;\n\
             GRANT `reader` TO `shop_app`@`%`;\n"
        );
        assert_eq!(left_out, ["evil\n\\! touch /tmp/x@%"]);
    }

    #[test]
    fn mysql_default_roles_are_set_after_every_account_and_grant() {
        let accounts = [
            ReadAccount {
                user: "app".into(),
                host: "%".into(),
                role: false,
                create: "CREATE USER `app`@`%` IDENTIFIED WITH 'caching_sha2_password' AS 0x24 DEFAULT ROLE `reader`@`%` REQUIRE NONE PASSWORD EXPIRE DEFAULT ACCOUNT UNLOCK".into(),
                grants: vec!["GRANT `reader`@`%` TO `app`@`%`".into()],
            },
            ReadAccount {
                user: "reader".into(),
                host: "%".into(),
                role: false,
                create: "CREATE USER `reader`@`%` IDENTIFIED WITH 'caching_sha2_password' REQUIRE NONE PASSWORD EXPIRE DEFAULT ACCOUNT LOCK".into(),
                grants: vec!["GRANT SELECT ON `shop`.* TO `reader`@`%`".into()],
            },
        ];
        let (text, _) = section(&accounts);
        let lines: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(
            lines,
            [
                "CREATE USER IF NOT EXISTS `app`@`%` IDENTIFIED WITH 'caching_sha2_password' AS 0x24 REQUIRE NONE PASSWORD EXPIRE DEFAULT ACCOUNT UNLOCK;",
                "CREATE USER IF NOT EXISTS `reader`@`%` IDENTIFIED WITH 'caching_sha2_password' REQUIRE NONE PASSWORD EXPIRE DEFAULT ACCOUNT LOCK;",
                "GRANT `reader`@`%` TO `app`@`%`;",
                "GRANT SELECT ON `shop`.* TO `reader`@`%`;",
                "SET DEFAULT ROLE `reader`@`%` TO `app`@`%`;",
            ]
        );
    }

    #[test]
    fn text_in_quotes_never_ends_a_statement_and_text_outside_them_never_starts_one() {
        let account = |create: &str, grants: &[&str]| ReadAccount {
            user: "app".into(),
            host: "%".into(),
            role: false,
            create: create.into(),
            grants: grants.iter().map(|g| (*g).to_owned()).collect(),
        };
        // A comment that reads like a clause and holds statements stays a string.
        let sneaky = "CREATE USER `app`@`%` IDENTIFIED WITH 'caching_sha2_password' AS 0x24 REQUIRE NONE PASSWORD EXPIRE DEFAULT ACCOUNT UNLOCK ATTRIBUTE '{\\\"comment\\\": \\\" DEFAULT ROLE NONE TO app; GRANT ALL ON *.* TO app; -- REQUIRE x\\\"}'";
        let (text, left_out) = section(&[account(sneaky, &["GRANT USAGE ON *.* TO `app`@`%`"])]);
        assert!(left_out.is_empty(), "{left_out:?}");
        let lines: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("CREATE USER IF NOT EXISTS `app`@`%`")
                && lines[0].ends_with("}';"),
            "{}",
            lines[0]
        );
        assert!(!text.contains("SET DEFAULT ROLE"), "{text}");
        // A statement end, a comment or an open quote outside quoted text: the account is left
        // out, nothing of it written.
        for create in [
            "CREATE USER `app`@`%`; GRANT ALL ON *.* TO `app`@`%`",
            "CREATE USER `app`@`%` -- x",
            "CREATE USER `app`@`%` # x",
            "CREATE USER `app`@`%` /* x */",
            "CREATE USER `app`@`%` ATTRIBUTE 'open",
        ] {
            let (text, left_out) = section(&[account(create, &[])]);
            assert_eq!(left_out, ["app@%"], "{create}");
            assert_eq!(text.lines().count(), 2, "{create}: {text}");
        }
        let (_, left_out) = section(&[account(
            "CREATE USER `app`@`%`",
            &["GRANT SELECT ON *.* TO `app`@`%`; DROP USER `root`@`%`"],
        )]);
        assert_eq!(left_out, ["app@%"]);
        // Quotes doubled or escaped inside a name or a string are text.
        let (text, left_out) = section(&[account(
            "CREATE USER `a``b`@`%` ATTRIBUTE 'it''s; \\' -- fine'",
            &[],
        )]);
        assert!(
            left_out.is_empty() && text.contains("ATTRIBUTE 'it''s; \\' -- fine';"),
            "{text}"
        );
    }

    #[test]
    fn grants_carry_no_password() {
        let (text, _) = section(&[ReadAccount {
            user: "app".into(),
            host: "%".into(),
            role: false,
            create: "CREATE USER `app`@`%` IDENTIFIED BY PASSWORD '*AB'".into(),
            grants: vec!["GRANT ALL PRIVILEGES ON `shop`.* TO `app`@`%` IDENTIFIED BY PASSWORD '*AB' WITH GRANT OPTION".into()],
        }]);
        assert!(
            text.contains("GRANT ALL PRIVILEGES ON `shop`.* TO `app`@`%` WITH GRANT OPTION;"),
            "{text}"
        );
        assert!(text.contains("CREATE USER IF NOT EXISTS `app`@`%` IDENTIFIED BY PASSWORD '*AB';"));
    }

    #[test]
    fn reading_statements_quote_their_names() {
        assert_eq!(
            show_create(Engine::Mysql, "a'b", "%").inline_sql(),
            "SHOW CREATE USER 'a''b'@'%'"
        );
        assert_eq!(
            show_grants(Engine::Mariadb, "reader", "", true).inline_sql(),
            "SHOW GRANTS FOR 'reader'"
        );
        assert!(list(Engine::Postgresql).is_none());
        assert_eq!(session_setup(Engine::Mysql).len(), 1);
    }
}
