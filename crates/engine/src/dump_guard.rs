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
//! data as a meta-command, wherever it stands in a line. The guard follows psql's lexer (quoted
//! strings, quoted identifiers, dollar quotes, nested block comments, line comments, `COPY`
//! data up to `\.`) and allows a meta-command only when it starts a line and is `\connect`
//! (`\c`), `\restrict` or `\unrestrict`, with arguments free of backquotes (psql runs a
//! backquoted argument as a shell command) and of backslashes outside double quotes (each would
//! start another meta-command). Where psql's reading depends on something the dump itself could
//! change, the guard refuses instead of guessing: a `\'` inside `'…'` (whether it ends the string
//! depends on `standard_conforming_strings` and on an `E` prefix), a `$` right after a number or
//! parameter (a dollar quote or not, depending on psql's version). `COPY` data is skipped only
//! after a line that is a whole `COPY … FROM stdin;` statement starting a statement, as
//! `pg_dump` writes it; psql with `ON_ERROR_STOP` stops at a `COPY` the server refuses.
//!
//! MySQL and MariaDB: the clients run with `--binary-mode`, which turns their commands off for
//! piped input, and MariaDB's with `--sandbox` as well ([`crate::EngineDef`]'s client arguments);
//! the guard refuses a line that starts with `system` or `\!` so that such a dump fails with a
//! message naming the line instead of a client error.
//!
//! What no client-side check can stop is SQL the server itself runs with the superuser's
//! rights (`COPY … PROGRAM`, `ALTER SYSTEM`): the backup's manifest names the dump's SHA-256
//! and the restore refuses a dump that does not match it; a dump that never came from a backup
//! Job is refused by that check only when its manifest was not replaced with it.

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
    /// Inside `'…'` (with any prefix: `E`, `U&`, `B`, `X`, `N`).
    Quoted,
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
    /// A statement has begun (something other than whitespace and comments since the last `;`
    /// outside quotes).
    in_statement: bool,
    line: u64,
}

/// The meta-commands `pg_dumpall` writes.
const ALLOWED_META: [&[u8]; 4] = [b"connect", b"c", b"restrict", b"unrestrict"];

fn ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

fn dollar_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
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
        if self.state == State::CopyData {
            // psql ends the data at a line that is exactly `\.` (copy.c, handleCopyIn).
            if line == b"\\.\n" || line == b"\\.\r\n" {
                self.state = State::Normal;
            }
            return Ok(());
        }
        let begins_statement = self.state == State::Normal && !self.in_statement;
        let mut statement_ends = 0u32;
        // The run of identifier bytes (letters, digits, `_`, `$`, bytes of UTF-8 sequences) that
        // ends right before `i`, as (its length, its first byte).
        let mut word = (0usize, 0u8);
        let mut i = 0;
        while i < line.len() {
            let b = line[i];
            let next = line.get(i + 1).copied();
            match &self.state {
                State::Normal => {
                    let previous_word = word;
                    word = (0, 0);
                    match b {
                        b'\\' => return self.meta_command(line, i),
                        b'-' if next == Some(b'-') => break,
                        b'/' if next == Some(b'*') => {
                            // A comment before a statement does not change what it is.
                            self.state = State::Comment(1);
                            i += 1;
                        }
                        b'\'' => {
                            self.state = State::Quoted;
                            self.in_statement = true;
                        }
                        b'"' => {
                            self.state = State::Identifier;
                            self.in_statement = true;
                        }
                        b'$' if previous_word.0 > 0 => {
                            if !dollar_start(previous_word.1) {
                                return Err(self.refuse(
                                    "holds a `$` right after a number or parameter, which psql \
                                     versions read differently",
                                ));
                            }
                            // `$` continues an identifier (`a$b`).
                            word = (previous_word.0 + 1, previous_word.1);
                        }
                        b'$' => {
                            self.in_statement = true;
                            if let Some(end) = dollar_delimiter(&line[i..]) {
                                self.state = State::Dollar(line[i..i + end].to_vec());
                                i += end;
                                continue;
                            }
                            word = (1, b'$');
                        }
                        b';' => {
                            self.in_statement = false;
                            statement_ends += 1;
                        }
                        b if b.is_ascii_whitespace() => {}
                        b => {
                            self.in_statement = true;
                            if ident_byte(b) {
                                let first = if previous_word.0 == 0 {
                                    b
                                } else {
                                    previous_word.1
                                };
                                word = (previous_word.0 + 1, first);
                            }
                        }
                    }
                }
                State::Quoted => match (b, next) {
                    (b'\'', Some(b'\'')) => i += 1,
                    (b'\'', _) => self.state = State::Normal,
                    (b'\\', Some(b'\\')) => i += 1,
                    (b'\\', Some(b'\'')) => {
                        return Err(self.refuse(
                            "holds `\\'` inside a '…' string, which psql reads as the string's end \
                             or not depending on standard_conforming_strings",
                        ));
                    }
                    _ => {}
                },
                State::Identifier => match (b, next) {
                    (b'"', Some(b'"')) => i += 1,
                    (b'"', _) => self.state = State::Normal,
                    _ => {}
                },
                State::Dollar(delimiter) => {
                    if line[i..].starts_with(delimiter) {
                        i += delimiter.len();
                        self.state = State::Normal;
                        continue;
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
                State::CopyData => unreachable!("COPY data is read line by line above"),
            }
            i += 1;
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
        self.check_arguments(&text[name_end..], &shown)
    }

    /// A meta-command's arguments: psql runs a backquoted one as a shell command, and a
    /// backslash outside quotes starts another meta-command.
    fn check_arguments(&self, arguments: &[u8], shown: &str) -> Result<(), UnsafeDump> {
        if arguments.contains(&b'`') {
            return Err(self.refuse(format!(
                "runs a shell command in a backquoted argument of `{shown}`"
            )));
        }
        // Outside quotes, inside '…' (where a backslash escapes the next byte), inside "…".
        let mut quote = None;
        let mut bytes = arguments.iter();
        while let Some(&b) = bytes.next() {
            match (quote, b) {
                (None, b'\\') => {
                    return Err(self.refuse(format!("holds a second meta-command after `{shown}`")));
                }
                (None, b'\'' | b'"') => quote = Some(b),
                (Some(b'\''), b'\\') => {
                    bytes.next();
                }
                (Some(q), b) if b == q => quote = None,
                _ => {}
            }
        }
        Ok(())
    }
}

/// The length of the dollar-quote delimiter `$tag$` (or `$$`) at the start of `rest`, if any.
fn dollar_delimiter(rest: &[u8]) -> Option<usize> {
    let tag = &rest[1..];
    match tag.first() {
        Some(b'$') => Some(2),
        Some(&b) if dollar_start(b) => {
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
