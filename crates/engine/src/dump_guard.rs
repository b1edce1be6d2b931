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
//! (psqlscan.l, with `standard_conforming_strings` on as `pg_dump` sets it): quoted strings,
//! quoted identifiers, dollar quotes, nested block comments, line comments, parentheses and the
//! `BEGIN … END` of `CREATE FUNCTION|PROCEDURE` (inside which `;` ends no statement), `COPY`
//! data up to a line `\.`. It allows a meta-command only when it starts a line and is
//! `\connect` (`\c`) as `pg_dumpall` writes it (a name, or `-reuse-previous=on "dbname='…'"`
//! with no other connection key, so the password goes to no other host), `\restrict` or
//! `\unrestrict` with an alphanumeric key. Where psql would read the rest of the dump
//! differently from the guard, the guard refuses instead of guessing: a NUL byte, a carriage
//! return inside a line, a psql variable (`:NAME`), `E'…'` and `U&` strings, a `$` before a
//! word that is no dollar quote, a `COPY` that is not `pg_dump`'s one-line form, `SET NAMES`,
//! and a statement that turns `standard_conforming_strings` off or names a client-only encoding
//! that hides bytes from psql. psql's own restricted mode ([`crate::psql_restrict`]) backs this
//! where the client has it.
//!
//! What it cannot see: SQL that changes those settings without naming them (a name put
//! together at run time inside a function). Such a dump would have to pass the backup's
//! signature check first, and a restricted psql refuses its commands anyway.
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

    /// The `pg_dumpall` meta-command the last line checked was, when it was one (never for
    /// MySQL and MariaDB).
    pub fn last_meta(&self) -> Option<Meta> {
        match self {
            DumpGuard::Psql(guard) => guard.last_meta(),
            DumpGuard::Mysql { .. } => None,
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

pub use crate::psql_lexer::PsqlGuard;
pub use crate::psql_syntax::{Meta, UnsafeDump};

#[cfg(test)]
#[path = "dump_guard_tests.rs"]
mod tests;
