//! Property tests: every SQL builder of `statements` given hostile names, passwords and
//! positions (quotes, backslashes, semicolons, NUL, CR/LF, comment markers, `$$`, placeholders,
//! unicode).
//!
//! Each statement is sent as the driver sends it ([`Statement::inline_sql`] quotes the values
//! in) and read back with a small tokenizer of the engine's lexical rules. A hostile value must
//! change nothing but the contents of its own literal: the tokens are those of the same
//! statement built with a harmless value, and the literal decodes back to the value (NUL
//! dropped, as [`quote_literal`] documents). Names are not quoted but checked: a hostile name
//! is refused, never let through.

use database_operator_api::Engine;
use database_operator_engine::statements::{
    Account, Binding, ReplicationSource, Secret, SourceTls, Statement, StatementError, Value,
    discard_old_password, fence, follow, keep_member_slots, probe, promote, quarantine,
    quote_literal, session_time_limit, set_password, set_semi_sync, stop_receiving,
    timeline_history, wait_applied,
};
use proptest::prelude::*;

const DIALECTS: [Engine; 3] = [Engine::Postgresql, Engine::Mysql, Engine::Mariadb];

// ------------------------------------------------------------------------------------------
// A tokenizer of what the servers read
// ------------------------------------------------------------------------------------------

/// One token of a statement as the server's lexer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    /// A string literal, decoded.
    Literal(String),
    /// A quoted identifier (`"x"`, `` `x` ``), decoded.
    Quoted(String),
    /// A dollar-quoted body (PostgreSQL `$tag$...$tag$`), with its tag.
    Dollar(String, String),
    /// A keyword, name or number.
    Word(String),
    /// Anything else, one character at a time (`;`, `=`, `(`, ...).
    Punct(char),
    /// A comment (`-- `, `#`, `/* */`): text the server ignores.
    Comment(String),
}

/// Tokenizes `sql` with `dialect`'s rules, or says why it cannot (an unterminated literal is
/// itself a failure: the value ran past its quotes).
fn tokens(dialect: Engine, sql: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let pg = dialect == Engine::Postgresql;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '-'
            && next == Some('-')
            && (pg || chars.get(i + 2).is_none_or(|c| c.is_whitespace()))
        {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p);
            out.push(Token::Comment(chars[i..end].iter().collect()));
            i = end;
        } else if c == '#' && !pg {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p);
            out.push(Token::Comment(chars[i..end].iter().collect()));
            i = end;
        } else if c == '/' && next == Some('*') {
            let end = (i + 2..chars.len().saturating_sub(1))
                .find(|&j| chars[j] == '*' && chars[j + 1] == '/')
                .ok_or("unterminated comment")?;
            out.push(Token::Comment(chars[i..end + 2].iter().collect()));
            i = end + 2;
        } else if pg && (c == 'E' || c == 'e') && next == Some('\'') {
            let (value, end) = literal(&chars, i + 1, true)?;
            out.push(Token::Literal(value));
            i = end;
        } else if c == '\'' || (!pg && c == '"') {
            let (value, end) = literal(&chars, i, !pg)?;
            out.push(Token::Literal(value));
            i = end;
        } else if (pg && c == '"') || (!pg && c == '`') {
            let (value, end) = doubled(&chars, i)?;
            out.push(Token::Quoted(value));
            i = end;
        } else if pg
            && c == '$'
            && let Some((tag, body, end)) = dollar(&chars, i)?
        {
            out.push(Token::Dollar(tag, body));
            i = end;
        } else if c.is_alphanumeric() || c == '_' || c == '$' || c == '@' {
            let end = chars[i..]
                .iter()
                .position(|&c| {
                    !(c.is_alphanumeric() || c == '_' || c == '$' || c == '@' || c == '.')
                })
                .map_or(chars.len(), |p| i + p);
            out.push(Token::Word(chars[i..end].iter().collect()));
            i = end;
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    Ok(out)
}

/// A literal opened by the quote at `chars[start]`: `''` (or `""`) is the quote itself, and
/// with `backslash` (MySQL's default mode, PostgreSQL's `E'...'`) `\` escapes the next
/// character. Returns the decoded value and the index after the closing quote.
fn literal(chars: &[char], start: usize, backslash: bool) -> Result<(String, usize), String> {
    let quote = chars[start];
    let mut value = String::new();
    let mut i = start + 1;
    loop {
        let Some(&c) = chars.get(i) else {
            return Err(format!("unterminated literal from {start}"));
        };
        if c == quote {
            if chars.get(i + 1) == Some(&quote) {
                value.push(quote);
                i += 2;
                continue;
            }
            return Ok((value, i + 1));
        }
        if backslash && c == '\\' {
            let Some(&e) = chars.get(i + 1) else {
                return Err("a backslash at the end".to_owned());
            };
            value.push(match e {
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                '0' => '\0',
                'b' => '\u{8}',
                'Z' => '\u{1a}',
                '\\' | '\'' | '"' => e,
                other => return Err(format!("escape \\{other} the quoting never writes")),
            });
            i += 2;
            continue;
        }
        value.push(c);
        i += 1;
    }
}

/// A quoted identifier opened at `chars[start]`, with the quote doubled inside.
fn doubled(chars: &[char], start: usize) -> Result<(String, usize), String> {
    literal(chars, start, false)
}

/// A PostgreSQL dollar-quoted string at `chars[start]` (`$tag$...$tag$`), if one starts there.
type DollarQuoted = Option<(String, String, usize)>;

fn dollar(chars: &[char], start: usize) -> Result<DollarQuoted, String> {
    let tag_end = chars[start + 1..]
        .iter()
        .position(|&c| !(c.is_alphanumeric() || c == '_'))
        .map(|p| start + 1 + p);
    let Some(tag_end) = tag_end.filter(|&e| chars[e] == '$') else {
        return Ok(None);
    };
    if chars.get(start + 1).is_some_and(char::is_ascii_digit) {
        return Ok(None); // `$1`: a placeholder.
    }
    let tag: String = chars[start..=tag_end].iter().collect();
    let tag_chars: Vec<char> = tag.chars().collect();
    let body_start = tag_end + 1;
    let close = (body_start..chars.len())
        .find(|&j| chars[j..].starts_with(&tag_chars))
        .ok_or_else(|| format!("unterminated {tag}"))?;
    let body = chars[body_start..close].iter().collect();
    Ok(Some((tag, body, close + tag_chars.len())))
}

// ------------------------------------------------------------------------------------------
// What a hostile value may change
// ------------------------------------------------------------------------------------------

const HARMLESS: &str = "harmless";

/// The statement as sent, tokenized: inline values quoted in by the driver's own quoting.
fn sent(dialect: Engine, statement: &Statement) -> Result<Vec<Token>, String> {
    tokens(dialect, &statement.inline_sql())
}

/// Asserts that `hostile` (the statements built with the hostile value) reads like `harmless`
/// (built with [`HARMLESS`]) with only the literals that held it changed, and that one of them
/// decodes to `expected` (the value after the builder's own encoding).
fn same_shape(
    dialect: Engine,
    hostile: &[Statement],
    harmless: &[Statement],
    expected: &str,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(hostile.len(), harmless.len());
    let mut found = false;
    for (h, ok) in hostile.iter().zip(harmless) {
        // The text with placeholders never holds a value.
        prop_assert_eq!(&h.sql, &ok.sql);
        prop_assert_eq!(h.params.len(), ok.params.len());
        let got = sent(dialect, h)
            .map_err(|e| TestCaseError::fail(format!("{e}: {}", h.inline_sql())))?;
        let want = sent(dialect, ok).map_err(TestCaseError::fail)?;
        prop_assert_eq!(got.len(), want.len(), "token count of {:?}", h.inline_sql());
        for (g, w) in got.iter().zip(&want) {
            match (g, w) {
                (Token::Literal(g), Token::Literal(_)) => found |= g == expected,
                _ => prop_assert_eq!(g, w, "in {:?}", h.inline_sql()),
            }
        }
    }
    if hostile.iter().any(|s| !s.params.is_empty()) {
        prop_assert!(found, "no literal decodes to {:?}", expected);
    }
    Ok(())
}

fn without_nul(value: &str) -> String {
    value.replace('\0', "")
}

/// The pieces hostile strings are made of.
fn hostile() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("'".to_owned()),
        Just("''".to_owned()),
        Just("\\".to_owned()),
        Just("\\'".to_owned()),
        Just("\"".to_owned()),
        Just("`".to_owned()),
        Just(";".to_owned()),
        Just("\0".to_owned()),
        Just("\r\n".to_owned()),
        Just("\n".to_owned()),
        Just("$$".to_owned()),
        Just("$do$".to_owned()),
        Just("$1".to_owned()),
        Just("?".to_owned()),
        Just("%".to_owned()),
        Just("%L".to_owned()),
        Just("-- ".to_owned()),
        Just("#".to_owned()),
        Just("/*".to_owned()),
        Just("*/".to_owned()),
        Just("E'".to_owned()),
        Just(" OR 1=1".to_owned()),
        Just("'; DROP TABLE x; --".to_owned()),
        Just("é".to_owned()),
        Just("\u{2028}".to_owned()),
        Just("\u{ff07}".to_owned()),
        Just("😀".to_owned()),
        "[a-z0-9]{1,4}",
        any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..10).prop_map(|pieces| pieces.concat())
}

/// A libpq connection-string value as `conninfo_value` writes it, decoded (libpq: `\` escapes
/// the next character inside single quotes). Returns the key/value pairs.
fn conninfo(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        let mut value = String::new();
        if chars.peek() != Some(&'\'') {
            // Unquoted (the port): up to the next space.
            value.extend(chars.by_ref().take_while(|&c| c != ' '));
            out.push((key, value));
            continue;
        }
        chars.next();
        loop {
            match chars.next() {
                None => return Err(format!("value of {key} unterminated")),
                Some('\\') => value.push(chars.next().ok_or("backslash at the end")?),
                Some('\'') => break,
                Some(c) => value.push(c),
            }
        }
        out.push((key, value));
    }
}

fn is_refused_name(result: &Result<Vec<Statement>, StatementError>) -> bool {
    matches!(result, Err(StatementError::InvalidName { .. }))
}

/// Whether a name passes the builders' pattern (what may reach the text unquoted).
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':' | b'%'))
}

// ------------------------------------------------------------------------------------------
// The properties
// ------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The quoting itself: a literal is one token whatever it holds, and reads back as the value.
    #[test]
    fn quote_literal_is_one_literal(value in hostile()) {
        for dialect in DIALECTS {
            let sql = format!("SELECT {} -- end", quote_literal(dialect, &value));
            let got = tokens(dialect, &sql).map_err(|e| TestCaseError::fail(format!("{e}: {sql}")))?;
            prop_assert_eq!(
                got,
                vec![
                    Token::Word("SELECT".into()),
                    Token::Literal(without_nul(&value)),
                    Token::Comment("-- end".into()),
                ],
                "{:?}: {}", dialect, sql
            );
        }
    }

    /// Passwords (MySQL, MariaDB: quoted in when sent; PostgreSQL: a bound verifier).
    #[test]
    fn set_password_keeps_the_secret_in_its_literal(secret in hostile(), retain in any::<bool>(), socket in any::<bool>()) {
        for dialect in DIALECTS {
            let account = Account { unix_socket: socket, ..Account::any_host("app") };
            let hostile = set_password(dialect, &account, &Secret::new(secret.clone()), retain).unwrap();
            let harmless = set_password(dialect, &account, &Secret::new(HARMLESS), retain).unwrap();
            same_shape(dialect, &hostile, &harmless, &without_nul(&secret))?;
            if dialect != Engine::Postgresql {
                prop_assert!(hostile.iter().all(|s| s.binding == Binding::Inline));
            }
        }
    }

    /// User and host names are refused unless they match the plain pattern.
    #[test]
    fn hostile_account_names_are_refused(user in hostile(), host in hostile()) {
        for dialect in DIALECTS {
            let account = Account::at(user.clone(), host.clone());
            let secret = Secret::new("pw");
            for result in [
                set_password(dialect, &account, &secret, false),
                discard_old_password(dialect, &account),
            ] {
                let accepted = plain_name(&user) && (dialect == Engine::Postgresql || plain_name(&host));
                if !accepted {
                    prop_assert!(is_refused_name(&result), "{:?} {:?}@{:?}: {:?}", dialect, user, host, result);
                }
                if let Ok(statements) = result {
                    for s in statements {
                        tokens(dialect, &s.inline_sql()).map_err(TestCaseError::fail)?;
                    }
                }
            }
            let source = ReplicationSource {
                host: host.clone(),
                port: 3306,
                user: user.clone(),
                password: (dialect != Engine::Postgresql).then(|| Secret::new("pw")),
                passfile: None,
                application_name: None,
                tls: SourceTls::Plain,
            };
            let result = follow(dialect, &source);
            if !(plain_name(&user) && plain_name(&host)) || host.contains('%') {
                prop_assert!(is_refused_name(&result), "{:?} {:?}@{:?}: {:?}", dialect, user, host, result);
            }
        }
    }

    /// MySQL, MariaDB: the replication password is one literal of `CHANGE ... SOURCE TO`.
    #[test]
    fn follow_keeps_the_password_in_its_literal(password in hostile()) {
        for dialect in [Engine::Mysql, Engine::Mariadb] {
            let source = |pw: &str| ReplicationSource {
                host: "orders-0.orders.shop.svc".to_owned(),
                port: 3306,
                user: "replication".to_owned(),
                password: Some(Secret::new(pw)),
                passfile: None,
                application_name: None,
                tls: SourceTls::Plain,
            };
            let hostile = follow(dialect, &source(&password)).unwrap();
            let harmless = follow(dialect, &source(HARMLESS)).unwrap();
            same_shape(dialect, &hostile, &harmless, &without_nul(&password))?;
        }
    }

    /// PostgreSQL: a passfile path and an application name are libpq values inside one SQL
    /// literal; each reads back whole, as its own key.
    #[test]
    fn follow_keeps_conninfo_values_apart(passfile in hostile(), name in hostile()) {
        let source = |passfile: &str, name: &str| ReplicationSource {
            host: "orders-0.orders.shop.svc".to_owned(),
            port: 5432,
            user: "replication".to_owned(),
            password: None,
            passfile: Some(passfile.to_owned()),
            application_name: Some(name.to_owned()),
            tls: SourceTls::Plain,
        };
        let dialect = Engine::Postgresql;
        let hostile = follow(dialect, &source(&passfile, &name)).unwrap();
        let harmless = follow(dialect, &source(HARMLESS, HARMLESS)).unwrap();
        let got = sent(dialect, &hostile[0]).map_err(TestCaseError::fail)?;
        let want = sent(dialect, &harmless[0]).map_err(TestCaseError::fail)?;
        prop_assert_eq!(got.len(), want.len(), "{}", hostile[0].inline_sql());
        let Some(Token::Literal(text)) = got.last() else {
            return Err(TestCaseError::fail(format!("no literal last: {got:?}")));
        };
        let pairs = conninfo(text).map_err(TestCaseError::fail)?;
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
        prop_assert_eq!(keys, vec!["host", "port", "user", "passfile", "application_name"]);
        prop_assert_eq!(&pairs[3].1, &without_nul(&passfile));
        prop_assert_eq!(&pairs[4].1, &without_nul(&name));
        prop_assert_eq!(&got[..got.len() - 1], &want[..want.len() - 1]);
    }

    /// The position waited for is a value, never text; quoted in, it stays one literal.
    #[test]
    fn wait_applied_keeps_the_position_a_value(position in hostile(), timeout in any::<u32>()) {
        for dialect in DIALECTS {
            let hostile = wait_applied(dialect, &position, timeout);
            let harmless = wait_applied(dialect, HARMLESS, timeout);
            prop_assert!(hostile.iter().all(|s| s.binding == Binding::Parameters));
            same_shape(dialect, &hostile, &harmless, &without_nul(&position))?;
        }
    }

    /// Slot names are one bound value: the statements' text is the same whatever the names,
    /// and only `member_<digits>` names are passed at all.
    #[test]
    fn member_slots_are_a_bound_value(name in hostile()) {
        let slots = vec![name.clone(), "member_1".to_owned()];
        let hostile = keep_member_slots(Engine::Postgresql, &slots);
        let harmless = keep_member_slots(Engine::Postgresql, &["member_1".to_owned()]);
        prop_assert_eq!(hostile.len(), 2);
        let digits = name
            .strip_prefix("member_")
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
        let expected = if digits { format!("{name},member_1") } else { "member_1".to_owned() };
        for (s, plain) in hostile.iter().zip(&harmless) {
            prop_assert_eq!(s.binding, Binding::Parameters);
            prop_assert_eq!(&s.sql, &plain.sql);
            prop_assert_eq!(format!("{:?}", s.params), format!("{:?}", vec![Value::Text(expected.clone())]));
            sent(Engine::Postgresql, s).map_err(TestCaseError::fail)?;
        }
        for dialect in [Engine::Mysql, Engine::Mariadb] {
            prop_assert!(keep_member_slots(dialect, &slots).is_empty());
        }
    }

    /// The builders that take no text: whatever numbers they get, their statements tokenize,
    /// and each placeholder has its value.
    #[test]
    fn numeric_builders_tokenize(timeout in any::<u32>(), timeline in any::<u32>(), on in any::<bool>(), millis in any::<u64>()) {
        for dialect in DIALECTS {
            let mut all = Vec::new();
            all.extend(probe(dialect));
            all.extend(fence(dialect));
            all.extend(quarantine(dialect));
            all.extend(set_semi_sync(dialect, on));
            all.extend(stop_receiving(dialect));
            all.extend(promote(dialect, timeout));
            if dialect == Engine::Postgresql {
                all.push(timeline_history(timeline));
            }
            for s in &all {
                let placeholders = match dialect {
                    Engine::Postgresql => (1..=9).filter(|n| s.sql.contains(&format!("${n}"))).count(),
                    _ => s.sql.matches('?').count(),
                };
                prop_assert_eq!(placeholders, s.params.len(), "{}", s.sql);
                let got = sent(dialect, s).map_err(TestCaseError::fail)?;
                prop_assert!(!got.iter().any(|t| matches!(t, Token::Comment(_))), "{}", s.sql);
            }
            let limit = session_time_limit(dialect, std::time::Duration::from_millis(millis));
            let got = tokens(dialect, &limit).map_err(TestCaseError::fail)?;
            prop_assert!(matches!(got.last(), Some(Token::Word(n)) if n.parse::<f64>().is_ok()), "{}", limit);
            prop_assert!(!got.iter().any(|t| matches!(t, Token::Comment(_))), "{}", limit);
        }
    }
}

/// The tokenizer tells a broken quoting apart (what makes the properties able to fail).
#[test]
fn the_tokenizer_sees_a_value_escape_its_literal() {
    let broken = "ALTER USER 'app'@'%' IDENTIFIED BY 'x' OR 1=1 -- '";
    let good = "ALTER USER 'app'@'%' IDENTIFIED BY 'harmless'";
    for dialect in [Engine::Mysql, Engine::Mariadb] {
        assert_ne!(
            tokens(dialect, broken).unwrap().len(),
            tokens(dialect, good).unwrap().len()
        );
    }
    assert!(tokens(Engine::Mysql, "SELECT 'x\\'").is_err());
    assert!(tokens(Engine::Postgresql, "SELECT E'x\\'").is_err());
    assert_eq!(
        tokens(Engine::Postgresql, "DO $do$BEGIN '; END$do$").unwrap(),
        vec![
            Token::Word("DO".into()),
            Token::Dollar("$do$".into(), "BEGIN '; END".into())
        ]
    );
}
