//! What a restore refuses to hand to an engine's SQL client: the client's own commands, which
//! run programs or touch files in the restoring pod (psql's `\!`, `\o |…`, `\copy … program`,
//! backquoted arguments; the MySQL client's `system` and `\!`).
//!
//! A dump is SQL for the server plus, for PostgreSQL, the few psql meta-commands `pg_dumpall`
//! writes itself. [`DumpGuard`] reads a dump line by line as the client would and refuses the
//! first line that asks the client for anything else, so that a dump altered in the bucket
//! cannot reach a shell through the client. The restore runs it over the whole dump before the
//! client starts, so a refused dump applies nothing.
//!
//! PostgreSQL: psql treats every backslash outside quotes, comments and `COPY … FROM stdin`
//! data as a meta-command, wherever it stands in a line. The guard follows psql's lexer
//! (psqlscan.l): quoted strings (`E'…'` with backslash escapes, the others without, as with
//! `standard_conforming_strings` on, which `pg_dump` sets), quoted identifiers, dollar quotes,
//! nested block comments, line comments (which a carriage return ends too), parentheses and the
//! `BEGIN … END` of `CREATE FUNCTION|PROCEDURE` (inside which `;` ends no statement), `COPY`
//! data up to a line `\.`. It allows a meta-command only when it starts a line and is
//! `\connect` (`\c`) as `pg_dumpall` writes it (a plain name, or `-reuse-previous=on
//! "dbname='…'"` with no other connection key, so the password goes to no other host),
//! `\restrict` or `\unrestrict` with an alphanumeric key. Where psql would read the rest of
//! the dump differently from the guard, the guard refuses instead of guessing: a NUL byte (psql
//! joins the line to the next), a psql variable (`:name`, whose value psql reads as input), a
//! line naming `standard_conforming_strings` or `client_encoding` other than `pg_dump`'s own `SET`
//! (a client encoding such as SJIS makes psql skip the byte after each lead byte), `SET NAMES`, a
//! `$` right after a number or parameter. `COPY` data is skipped only after a line that is a
//! whole `COPY … FROM stdin;` statement starting a statement, as `pg_dump` writes it; psql with
//! `ON_ERROR_STOP` stops at a `COPY` the server refuses.
//!
//! What it cannot see: SQL that changes those settings without naming them (a name put
//! together at run time inside a function). Such a dump would have to pass the backup's
//! signature check first, which only a restore told to skip that check does not ask for.
//!
//! MySQL and MariaDB: the clients run with `--binary-mode`, which turns their commands off for
//! piped input, and MariaDB's with `--sandbox` as well ([`crate::EngineDef`]'s client arguments);
//! the guard refuses a line that starts with `system` or `\!` so that such a dump fails with a
//! message naming the line instead of a client error.
//!
//! What no client-side check can stop is SQL the server itself runs with the superuser's
//! rights (`COPY … PROGRAM`, `ALTER SYSTEM`): the backup's signed manifest names the dump's
//! SHA-256, so a dump that is not the backup Job's own is refused before it is read at all.

use crate::Protocol;

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

/// Reads a dump line by line as the engine's client would ([module documentation](self)).
#[derive(Debug)]
pub enum DumpGuard {
    /// psql.
    Psql(PsqlGuard),
    /// The MySQL and MariaDB clients.
    Mysql {
        /// Lines read.
        line: u64,
    },
}

impl DumpGuard {
    /// A guard for the client of an engine speaking `protocol`.
    pub fn new(protocol: Protocol) -> DumpGuard {
        match protocol {
            Protocol::Postgres => DumpGuard::Psql(PsqlGuard::default()),
            Protocol::Mysql => DumpGuard::Mysql { line: 0 },
        }
    }

    /// Reads the next line (its newline included, absent only at the end of the dump).
    pub fn check(&mut self, line: &[u8]) -> Result<(), UnsafeDump> {
        match self {
            DumpGuard::Psql(guard) => guard.check(line),
            DumpGuard::Mysql { line: n } => {
                *n += 1;
                let start = line.trim_ascii_start();
                let word = start
                    .split(|b| b.is_ascii_whitespace() || *b == b';')
                    .next()
                    .unwrap_or_default();
                if start.starts_with(b"\\!") || word.eq_ignore_ascii_case(b"system") {
                    return Err(UnsafeDump {
                        line: *n,
                        what: "holds the client command `system` (`\\!`)".to_owned(),
                    });
                }
                Ok(())
            }
        }
    }
}

/// Where psql's lexer stands between two bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum State {
    /// Outside quotes and comments.
    #[default]
    Normal,
    /// Inside `'…'`; `escapes` for `E'…'`, where a backslash escapes the next byte.
    Quoted { escapes: bool },
    /// Inside `"…"`.
    Identifier,
    /// Inside a dollar-quoted string; the delimiter, both dollars included.
    Dollar(Vec<u8>),
    /// Inside `/* … */`, this deep.
    Comment(u32),
    /// The data of `COPY … FROM stdin`, up to a line `\.`.
    CopyData,
}

/// psql's side of [`DumpGuard`].
#[derive(Debug, Default)]
pub struct PsqlGuard {
    state: State,
    /// A statement has begun (something other than white space and comments since the last
    /// statement end).
    in_statement: bool,
    /// psql's `paren_depth`: a `;` inside parentheses ends no statement.
    paren_depth: u32,
    /// psql's `begin_depth`: inside `BEGIN … END` of a `CREATE [OR REPLACE] FUNCTION|PROCEDURE`
    /// (a `BEGIN ATOMIC` body), a `;` ends no statement.
    begin_depth: u32,
    /// The first letters of the statement's first identifiers, as psql keeps them to recognise
    /// `CREATE [OR REPLACE] FUNCTION|PROCEDURE`.
    identifiers: [u8; 4],
    identifier_count: usize,
    line: u64,
}

/// The meta-commands `pg_dumpall` writes.
const ALLOWED_META: [&[u8]; 4] = [b"connect", b"c", b"restrict", b"unrestrict"];

/// Settings that change how psql splits its input, which a dump may set only as `pg_dump` does:
/// `standard_conforming_strings` decides whether a backslash escapes a quote, and a client
/// encoding such as SJIS or BIG5 makes psql skip the byte after each lead byte.
const LEXER_SETTINGS: [&[u8]; 2] = [b"standard_conforming_strings", b"client_encoding"];

/// The client encodings (client-only; no database has them, so `pg_dump` never writes them) in
/// which psql reads a byte after a lead byte as part of the character, whatever it is.
const HIDING_ENCODINGS: [&str; 11] = [
    "SJIS",
    "SHIFT_JIS",
    "BIG5",
    "GBK",
    "UHC",
    "GB18030",
    "JOHAB",
    "WIN932",
    "WIN936",
    "WIN949",
    "WIN950",
];

fn ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

fn ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

/// Bytes after which psql surely starts a new token (so an `E` after one opens `E'…'`).
fn ends_token(b: u8) -> bool {
    b.is_ascii_whitespace() || b"(),;=<>+-*/%|[]".contains(&b)
}

impl PsqlGuard {
    fn refuse(&self, what: impl Into<String>) -> UnsafeDump {
        UnsafeDump {
            line: self.line,
            what: what.into(),
        }
    }

    /// Reads the next line.
    pub fn check(&mut self, line: &[u8]) -> Result<(), UnsafeDump> {
        self.line += 1;
        if line.contains(&0) {
            // psql drops the rest of a line from a NUL byte on, joining it to the next.
            return Err(self.refuse("holds a NUL byte, which psql reads as the end of the line"));
        }
        // psql skips a byte order mark at the start of its input.
        let line = match line.strip_prefix(b"\xef\xbb\xbf") {
            Some(rest) if self.line == 1 => rest,
            _ => line,
        };
        if self.state == State::CopyData {
            // psql ends the data at a line that is exactly `\.` (copy.c, handleCopyIn).
            if line == b"\\.\n" || line == b"\\.\r\n" {
                self.state = State::Normal;
            }
            return Ok(());
        }
        self.check_lexer_settings(line)?;
        let begins_statement = self.state == State::Normal && !self.in_statement;
        let mut statement_ends = 0u32;
        // The run of identifier bytes (letters, digits, `_`, `$`, bytes of UTF-8 sequences)
        // that ends right before `i`: where it started, 0 long when there is none.
        let mut word_start = 0usize;
        let mut word_len = 0usize;
        let mut i = 0;
        while i < line.len() {
            let b = line[i];
            let next = line.get(i + 1).copied();
            match &self.state {
                State::Normal => {
                    let (start, len) = (word_start, word_len);
                    if ident_byte(b) || (b == b'$' && len > 0) {
                        if len > 0 && b == b'$' && !ident_start(line[start]) {
                            return Err(self.refuse(
                                "holds a `$` right after a number or parameter, which psql \
                                 versions read differently",
                            ));
                        }
                        // `$` continues an identifier (`a$b`).
                        (word_start, word_len) = if len == 0 { (i, 1) } else { (start, len + 1) };
                        self.in_statement = true;
                        i += 1;
                        continue;
                    }
                    word_len = 0;
                    if len > 0 && ident_start(line[start]) {
                        self.identifier(&line[start..start + len]);
                    }
                    match b {
                        b'\\' => return self.meta_command(line, i),
                        b'-' if next == Some(b'-') => {
                            // To the end of the line; psql also ends it at a carriage return.
                            match line[i..].iter().position(|&c| c == b'\r' || c == b'\n') {
                                Some(end) if line[i + end] == b'\r' => {
                                    i += end + 1;
                                    continue;
                                }
                                _ => break,
                            }
                        }
                        b'/' if next == Some(b'*') => {
                            // A comment before a statement does not change what it is.
                            self.state = State::Comment(1);
                            i += 1;
                        }
                        b'\'' => {
                            // `E'…'` takes backslash escapes: only where the `E` surely starts
                            // a token (reading a plain string as one could hide a command).
                            let escapes = len == 1
                                && matches!(line[start], b'E' | b'e')
                                && (start == 0 || ends_token(line[start - 1]));
                            self.state = State::Quoted { escapes };
                            self.in_statement = true;
                        }
                        b'"' => {
                            self.state = State::Identifier;
                            self.in_statement = true;
                        }
                        b'$' => {
                            self.in_statement = true;
                            if let Some(end) = dollar_delimiter(&line[i..]) {
                                self.state = State::Dollar(line[i..i + end].to_vec());
                                i += end;
                                continue;
                            }
                            (word_start, word_len) = (i, 1);
                        }
                        b':' if next == Some(b':') => {
                            // A cast: both colons.
                            self.in_statement = true;
                            i += 1;
                        }
                        b':' if next.is_some_and(|n| ident_start(n) || b"'\"{".contains(&n)) => {
                            return Err(self.refuse(
                                "holds a psql variable (`:name`), whose value psql reads as input",
                            ));
                        }
                        b'(' => {
                            self.paren_depth += 1;
                            self.in_statement = true;
                        }
                        b')' => {
                            self.paren_depth = self.paren_depth.saturating_sub(1);
                            self.in_statement = true;
                        }
                        b';' if self.paren_depth == 0 && self.begin_depth == 0 => {
                            self.in_statement = false;
                            self.identifier_count = 0;
                            statement_ends += 1;
                        }
                        b if b.is_ascii_whitespace() => {}
                        _ => self.in_statement = true,
                    }
                }
                _ => {
                    i = self.inside(line, i);
                    continue;
                }
            }
            i += 1;
        }
        if word_len > 0 && ident_start(line[word_start]) {
            self.identifier(&line[word_start..word_start + word_len]);
        }
        if begins_statement
            && statement_ends == 1
            && self.state == State::Normal
            && !self.in_statement
            && is_copy_from_stdin(line)
        {
            self.state = State::CopyData;
        }
        Ok(())
    }

    /// One step inside a quote or a comment from `i`: where the next step starts.
    fn inside(&mut self, line: &[u8], mut i: usize) -> usize {
        let b = line[i];
        let next = line.get(i + 1).copied();
        match &self.state {
            State::Quoted { escapes } => match (b, next) {
                (b'\'', Some(b'\'')) => i += 1,
                (b'\'', _) => self.state = State::Normal,
                (b'\\', _) if *escapes => i += 1,
                _ => {}
            },
            State::Identifier => match (b, next) {
                (b'"', Some(b'"')) => i += 1,
                (b'"', _) => self.state = State::Normal,
                _ => {}
            },
            State::Dollar(delimiter) => {
                if line[i..].starts_with(delimiter) {
                    let end = i + delimiter.len();
                    self.state = State::Normal;
                    return end;
                }
            }
            State::Comment(depth) => {
                let depth = *depth;
                match (b, next) {
                    (b'/', Some(b'*')) => {
                        self.state = State::Comment(depth + 1);
                        i += 1;
                    }
                    (b'*', Some(b'/')) => {
                        self.state = if depth == 1 {
                            State::Normal
                        } else {
                            State::Comment(depth - 1)
                        };
                        i += 1;
                    }
                    _ => {}
                }
            }
            State::Normal | State::CopyData => {}
        }
        i + 1
    }

    /// psql's bookkeeping of an identifier (or keyword) outside quotes: inside `CREATE [OR
    /// REPLACE] FUNCTION|PROCEDURE`, `BEGIN` and `CASE` open a block that `END` closes
    /// (psqlscan.l).
    fn identifier(&mut self, word: &[u8]) {
        if self.identifier_count == 0 {
            self.identifiers = [0; 4];
        }
        let lower = word.to_ascii_lowercase();
        if matches!(
            lower.as_slice(),
            b"create" | b"function" | b"procedure" | b"or" | b"replace"
        ) && self.identifier_count < self.identifiers.len()
        {
            self.identifiers[self.identifier_count] = lower[0];
        }
        self.identifier_count += 1;
        let ids = self.identifiers;
        let in_routine = ids[0] == b'c'
            && (ids[1] == b'f'
                || ids[1] == b'p'
                || (ids[1] == b'o' && ids[2] == b'r' && (ids[3] == b'f' || ids[3] == b'p')));
        if in_routine && self.paren_depth == 0 {
            match lower.as_slice() {
                b"begin" => self.begin_depth += 1,
                b"case" if self.begin_depth > 0 => self.begin_depth += 1,
                b"end" if self.begin_depth > 0 => self.begin_depth -= 1,
                _ => {}
            }
        }
    }

    /// A line that names a setting of psql's lexer ([`LEXER_SETTINGS`]) anywhere (a statement,
    /// a string, a comment) is refused unless it is `pg_dump`'s own `SET` of it to a value that
    /// keeps psql reading as the guard does.
    fn check_lexer_settings(&self, line: &[u8]) -> Result<(), UnsafeDump> {
        let lower = line.to_ascii_lowercase();
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches(['\r', '\n']);
        for setting in LEXER_SETTINGS {
            if !lower.windows(setting.len()).any(|w| w == setting) {
                continue;
            }
            let name = String::from_utf8_lossy(setting);
            let value = text
                .strip_prefix(&format!("SET {name} = "))
                .and_then(|v| v.strip_suffix(';'))
                .map(|v| v.trim_matches('\''));
            let allowed = match (setting, value) {
                (b"standard_conforming_strings", Some(v)) => v == "on",
                (_, Some(v)) => {
                    !v.is_empty()
                        && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                        && !HIDING_ENCODINGS.iter().any(|e| e.eq_ignore_ascii_case(v))
                }
                _ => false,
            };
            if !allowed {
                return Err(self.refuse(format!(
                    "changes {name}, which decides how psql splits the rest of the dump"
                )));
            }
        }
        if lower.split(|b| !ident_byte(*b)).any(|w| w == b"names")
            && lower.trim_ascii_start().starts_with(b"set")
        {
            return Err(self.refuse(
                "changes the client encoding (SET NAMES), which decides how psql splits the rest \
                 of the dump",
            ));
        }
        Ok(())
    }

    /// A backslash outside quotes at `at`: allowed only as a whole line's `pg_dumpall`
    /// meta-command.
    fn meta_command(&self, line: &[u8], at: usize) -> Result<(), UnsafeDump> {
        let text = line.trim_ascii_end();
        let name_end = text[at + 1..]
            .iter()
            .position(|b| b.is_ascii_whitespace())
            .map_or(text.len(), |p| at + 1 + p);
        let name = &text[at + 1..name_end];
        let shown = String::from_utf8_lossy(&text[at..name_end]).into_owned();
        if !text[..at].iter().all(u8::is_ascii_whitespace) {
            return Err(self.refuse(format!(
                "holds the psql meta-command `{shown}` after other text"
            )));
        }
        if !ALLOWED_META.contains(&name) {
            return Err(self.refuse(format!("holds the psql meta-command `{shown}`")));
        }
        let arguments = text[name_end..].trim_ascii();
        let allowed = match name {
            b"restrict" | b"unrestrict" => {
                !arguments.is_empty() && arguments.iter().all(u8::is_ascii_alphanumeric)
            }
            _ => connect_arguments(arguments),
        };
        if allowed {
            Ok(())
        } else {
            Err(self.refuse(format!(
                "holds `{shown}` with arguments pg_dumpall never writes ({})",
                String::from_utf8_lossy(arguments)
            )))
        }
    }
}

/// The arguments of `\connect` as `pg_dumpall` writes them: a plain database name
/// (`\connect shop`), or `-reuse-previous=on "dbname='…'"` with the name alone in the connection
/// string (no host, no other key: the restore's password must go nowhere else).
fn connect_arguments(arguments: &[u8]) -> bool {
    if !arguments.is_empty()
        && arguments
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
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
fn dollar_delimiter(rest: &[u8]) -> Option<usize> {
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

/// Whether `line` is one whole `COPY … FROM stdin;` statement as `pg_dump` writes it.
fn is_copy_from_stdin(line: &[u8]) -> bool {
    let text = line.strip_suffix(b"\n").unwrap_or(line);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    text.starts_with(b"COPY ") && text.ends_with(b" FROM stdin;")
}

#[cfg(test)]
#[path = "dump_guard_tests.rs"]
mod tests;
