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

/// Whether the account of `user` is copied: not the server's own, not one of `managed`.
pub fn copied(user: &str, managed: &[String]) -> bool {
    !SYSTEM_USERS.contains(&user) && !managed.iter().any(|m| m == user)
}

/// The accounts section of a dump: [`ACCOUNTS_MARKER`], each account created if missing, then
/// each grant, one statement per line. An account whose statements span lines (a name with a
/// line break) is left out and named in the returned list.
pub fn section(accounts: &[ReadAccount]) -> (String, Vec<String>) {
    let mut creates = Vec::new();
    let mut grants = Vec::new();
    let mut defaults = Vec::new();
    let mut left_out = Vec::new();
    for account in accounts {
        let one_line = |s: &str| !s.contains(['\n', '\r']);
        if !one_line(&account.create) || !account.grants.iter().all(|g| one_line(g)) {
            left_out.push(format!("{}@{}", account.user, account.host));
            continue;
        }
        if account.role {
            creates.push(format!(
                "CREATE ROLE IF NOT EXISTS `{}`;",
                account.user.replace('`', "``")
            ));
        } else {
            let create = account.create.trim_end().trim_end_matches(';');
            // MySQL names the default roles in `CREATE USER`, where they must exist already:
            // set them once every account and grant is back.
            let (create, roles) = split_default_roles(create);
            if let Some(roles) = roles {
                defaults.push(format!(
                    "SET DEFAULT ROLE {roles} TO `{}`@`{}`;",
                    account.user.replace('`', "``"),
                    account.host.replace('`', "``")
                ));
            }
            let create = match create.strip_prefix("CREATE USER ") {
                Some(rest) if !rest.starts_with("IF NOT EXISTS") => {
                    format!("CREATE USER IF NOT EXISTS {rest};")
                }
                _ => format!("{create};"),
            };
            creates.push(create);
        }
        grants.extend(
            account
                .grants
                .iter()
                .map(|g| format!("{};", g.trim_end().trim_end_matches(';'))),
        );
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

/// `create` without its `DEFAULT ROLE ...` clause (up to the `REQUIRE` that MySQL prints
/// after it), and the roles of that clause.
fn split_default_roles(create: &str) -> (String, Option<String>) {
    const CLAUSE: &str = " DEFAULT ROLE ";
    let Some(at) = create.find(CLAUSE) else {
        return (create.to_owned(), None);
    };
    let rest = &create[at + CLAUSE.len()..];
    let end = rest.find(" REQUIRE ").unwrap_or(rest.len());
    (
        format!("{}{}", &create[..at], &rest[end..]),
        Some(rest[..end].to_owned()),
    )
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
             GRANT USAGE ON *.* TO `shop_app`@`%` IDENTIFIED BY PASSWORD '*AB12';\n\
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
