//! The pieces of psql's input the guard recognises by their exact shape
//! ([`crate::dump_guard`]): `pg_dumpall`'s `\connect` arguments, dollar-quote delimiters, the
//! `COPY … FROM stdin;` line `pg_dump` writes, identifier bytes.

/// A line a restore refuses to hand to the client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "line {line} of the dump {what}; a restore never runs client commands, nothing was applied"
)]
pub struct UnsafeDump {
    /// The line's number, from 1.
    pub line: u64,
    /// What it asks for, as a phrase (e.g. "holds the psql meta-command `\!`").
    pub what: String,
}

/// A `pg_dumpall` meta-command line the guard let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Meta {
    /// `\connect` (`\c`).
    Connect,
    /// `\restrict KEY`.
    Restrict,
    /// `\unrestrict KEY`.
    Unrestrict,
}

/// A byte that continues an identifier (letters, digits, `_`, bytes of UTF-8 sequences).
pub(crate) fn ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// A byte that starts an identifier.
pub(crate) fn ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

/// The arguments of `\connect` as `pg_dumpall` writes them: a plain database name
/// (`\connect shop`), or `-reuse-previous=on "dbname='…'"` with the name alone in the connection
/// string (no host, no other key: the restore's password must go nowhere else).
pub(crate) fn connect_arguments(arguments: &[u8]) -> bool {
    let plain = |name: &[u8]| {
        !name.is_empty()
            && name
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.'))
    };
    // A name of letters, digits, `_` and `.`, bare or (upper case, a keyword) in double quotes.
    if plain(arguments)
        || arguments
            .strip_prefix(b"\"")
            .and_then(|a| a.strip_suffix(b"\""))
            .is_some_and(plain)
    {
        return true;
    }
    let Some(quoted) = arguments.strip_prefix(b"-reuse-previous=on ") else {
        return false;
    };
    // An identifier in double quotes (`""` for `"`), holding `dbname='value'`.
    let Some(inner) = quoted
        .strip_prefix(b"\"")
        .and_then(|q| q.strip_suffix(b"\""))
    else {
        return false;
    };
    let inner = String::from_utf8_lossy(inner);
    if inner.split("\"\"").any(|piece| piece.contains('"')) {
        return false;
    }
    let inner = inner.replace("\"\"", "\"");
    let Some(value) = inner
        .strip_prefix("dbname='")
        .and_then(|v| v.strip_suffix('\''))
    else {
        return false;
    };
    // Inside the value, `\` escapes the next character; an unescaped `'` would end it early.
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.next().is_none() => return false,
            '\'' | '\n' | '\r' => return false,
            _ => {}
        }
    }
    true
}

/// The length of the dollar-quote delimiter `$tag$` (or `$$`) at the start of `rest`, if any.
pub(crate) fn dollar_delimiter(rest: &[u8]) -> Option<usize> {
    let tag = &rest[1..];
    match tag.first() {
        Some(b'$') => Some(2),
        Some(&b) if ident_start(b) => {
            let len = tag.iter().take_while(|&&b| ident_byte(b)).count();
            (tag.get(len) == Some(&b'$')).then_some(len + 2)
        }
        _ => None,
    }
}

/// Whether `line` is one whole `COPY <table> [(<column>, …)] FROM stdin;` statement as
/// `pg_dump` writes it: each name plain (`[a-z_][a-z0-9_$]*`) or in double quotes, the table
/// qualified by its schema.
pub(crate) fn is_copy_from_stdin(line: &[u8]) -> bool {
    let text = line.strip_suffix(b"\n").unwrap_or(line);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let Some(rest) = text
        .strip_prefix(b"COPY ")
        .and_then(|t| t.strip_suffix(b" FROM stdin;"))
    else {
        return false;
    };
    let (table, columns) = match rest.iter().position(|&b| b == b' ') {
        // A space only in a quoted name or before the column list.
        Some(_) if rest.ends_with(b")") => match find_column_list(rest) {
            Some(at) => (&rest[..at], Some(&rest[at + 2..rest.len() - 1])),
            None => return false,
        },
        _ => (rest, None),
    };
    let names = |text: &[u8], separator: &[u8]| -> bool {
        let mut rest = text;
        loop {
            let Some(len) = name_len(rest) else {
                return false;
            };
            rest = &rest[len..];
            if rest.is_empty() {
                return true;
            }
            match rest.strip_prefix(separator) {
                Some(after) => rest = after,
                None => return false,
            }
        }
    };
    names(table, b".") && columns.is_none_or(|c| names(c, b", "))
}

/// Where ` (` starts the column list of `rest` (`table (a, b)`), outside quoted names.
fn find_column_list(rest: &[u8]) -> Option<usize> {
    let mut quoted = false;
    for (i, &b) in rest.iter().enumerate() {
        match b {
            b'"' => quoted = !quoted,
            b' ' if !quoted => return (rest.get(i + 1) == Some(&b'(')).then_some(i),
            _ => {}
        }
    }
    None
}

/// The length of one name at the start of `text`: plain, or in double quotes (`""` for `"`).
fn name_len(text: &[u8]) -> Option<usize> {
    if let Some(quoted) = text.strip_prefix(b"\"") {
        let mut i = 0;
        while i < quoted.len() {
            if quoted[i] == b'"' {
                if quoted.get(i + 1) == Some(&b'"') {
                    i += 2;
                    continue;
                }
                return (i > 0).then_some(i + 2);
            }
            if matches!(quoted[i], b'\n' | b'\r') {
                return None;
            }
            i += 1;
        }
        return None;
    }
    let first = *text.first()?;
    if !(first.is_ascii_lowercase() || first == b'_' || first >= 0x80) {
        return None;
    }
    Some(
        text.iter()
            .take_while(|&&b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'$' || b >= 0x80
            })
            .count(),
    )
}
