//! Per-table row counts and checksums read from a logical dump stream.
//!
//! The backup feeds the bytes of its dump (`pg_dumpall --clean --if-exists` in plain SQL format,
//! or `mariadb-dump`/`mysqldump --all-databases` with extended inserts) into a [`DumpStats`]
//! while uploading it; a restore drill dumps the restored server with the same tool and
//! [`compare`]s the two [`TableSet`]s.
//!
//! A table's [`TableStats`] are a function of its rows only, not of their order: the row count
//! and the wrapping sum (modulo 2^128) of [`hash_parts`] over each row's bytes, as 32 lowercase
//! hex digits. A table whose data section is present but holds no rows has 0 rows and the
//! all-zero checksum.
//!
//! - PostgreSQL: a table is a `COPY <table> (<columns>) FROM stdin;` line, its rows are the
//!   lines up to `\.`, each as written. Its key is `<database>.<table as written>`, the
//!   database being the one named by the latest `\connect` (the empty string before any).
//!   A function body with a line that looks like a `COPY … FROM stdin;` would be taken for
//!   data; `pg_dump` never writes one outside a data section itself.
//! - MySQL and MariaDB: the database is the latest ``USE `db`;``, a table is a
//!   ``CREATE TABLE `t` `` line (0 rows) plus its ``INSERT INTO `t` VALUES (…),(…);`` lines
//!   (also `INSERT IGNORE INTO`, `REPLACE INTO`, and with a column list); a row's bytes are
//!   the text between the outer parentheses of its tuple. The key is `<database>.<table>`.
//!   The system schemas `mysql`, `sys`, `performance_schema` and `information_schema` are
//!   skipped, and so is everything between `DELIMITER ;;` and `DELIMITER ;` (triggers,
//!   routines and events, whose bodies may hold `INSERT` lines).
//!
//! Names that are not UTF-8 are converted lossily; nothing panics on any input. Pure: no IO.
//! Memory: one line of the dump is buffered (an extended insert may be megabytes).

use std::collections::BTreeMap;
use std::fmt;

use database_operator_api::Engine;
use database_operator_engine::Protocol;
use serde::{Deserialize, Serialize};

use crate::hash::hash_parts;

/// One table's data in a dump.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableStats {
    /// Number of data rows.
    pub rows: u64,
    /// Order-independent checksum of the rows: the wrapping sum of each row's
    /// [`hash_parts`], as 32 lowercase hex digits.
    pub checksum: String,
}

/// Every table with data rows or a data section, by name (`<database>.<table>`).
pub type TableSet = BTreeMap<String, TableStats>;

/// Schemas of a MySQL or MariaDB server that are never counted.
const SYSTEM_SCHEMAS: [&[u8]; 4] = [
    b"mysql",
    b"sys",
    b"performance_schema",
    b"information_schema",
];

/// Running count and checksum of one table.
#[derive(Clone, Copy, Debug, Default)]
struct Acc {
    rows: u64,
    sum: u128,
}

impl Acc {
    fn add(&mut self, row: &[u8]) {
        self.rows = self.rows.saturating_add(1);
        self.sum = self.sum.wrapping_add(hash_parts([row]));
    }

    fn merge(&mut self, other: Acc) {
        self.rows = self.rows.saturating_add(other.rows);
        self.sum = self.sum.wrapping_add(other.sum);
    }
}

/// Reads per-table row counts and checksums from a dump fed to it in chunks.
pub struct DumpStats {
    /// The dump's format: `pg_dumpall`'s or `mysqldump`'s (and `mariadb-dump`'s).
    protocol: Protocol,
    /// The current line, when it spans chunks.
    line: Vec<u8>,
    tables: BTreeMap<String, Acc>,
    /// The current database as written (`\connect`, `USE`).
    db: Vec<u8>,
    /// PostgreSQL: the table whose `COPY` data is being read.
    copy: Option<(String, Acc)>,
    /// MySQL/MariaDB: the current database is a system schema.
    skip_db: bool,
    /// MySQL/MariaDB: inside a `DELIMITER ;;` block.
    routines: bool,
    /// MySQL/MariaDB: the table of an `INSERT` whose tuples go on on the next line (MariaDB's
    /// dump writes one tuple a line).
    insert: Option<String>,
}

impl DumpStats {
    /// An empty reader for a dump of `engine`.
    pub fn new(engine: Engine) -> Self {
        DumpStats {
            protocol: database_operator_engine::of(engine).protocol(),
            line: Vec::new(),
            tables: BTreeMap::new(),
            db: Vec::new(),
            copy: None,
            skip_db: false,
            routines: false,
            insert: None,
        }
    }

    /// Feeds the next bytes of the dump (arbitrary chunk boundaries; lines may span chunks).
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while let Some(at) = bytes.iter().position(|&b| b == b'\n') {
            let (head, rest) = bytes.split_at(at);
            if self.line.is_empty() {
                self.process(head);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                self.process(&line);
                line.clear();
                self.line = line;
            }
            bytes = &rest[1..];
        }
        self.line.extend_from_slice(bytes);
    }

    /// The tables seen (a last line without a newline is taken too; a `COPY` cut short counts
    /// the rows read).
    pub fn finish(mut self) -> TableSet {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process(&line);
        }
        self.end_copy();
        self.tables
            .into_iter()
            .map(|(table, acc)| {
                let stats = TableStats {
                    rows: acc.rows,
                    checksum: format!("{:032x}", acc.sum),
                };
                (table, stats)
            })
            .collect()
    }

    fn process(&mut self, line: &[u8]) {
        match self.protocol {
            Protocol::Postgres => self.postgres_line(line),
            Protocol::Mysql => self.mysql_line(line),
        }
    }

    fn key(&self, table: &[u8]) -> String {
        format!(
            "{}.{}",
            String::from_utf8_lossy(&self.db),
            String::from_utf8_lossy(table)
        )
    }

    fn end_copy(&mut self) {
        if let Some((key, acc)) = self.copy.take() {
            self.tables.entry(key).or_default().merge(acc);
        }
    }

    fn postgres_line(&mut self, line: &[u8]) {
        if let Some((_, acc)) = &mut self.copy {
            if line == b"\\." {
                self.end_copy();
            } else {
                acc.add(line);
            }
            return;
        }
        let line = trim_cr(line);
        if let Some(rest) = line
            .strip_prefix(b"\\connect ")
            .or_else(|| line.strip_prefix(b"\\c "))
        {
            if let Some(db) = connect_db(rest) {
                self.db = db;
            }
        } else if let Some(table) = line.strip_prefix(b"COPY ").and_then(copy_table) {
            let key = self.key(table);
            self.copy = Some((key, Acc::default()));
        }
    }

    fn mysql_line(&mut self, line: &[u8]) {
        let line = trim_cr(line);
        if let Some(key) = self.insert.take() {
            let acc = self.tables.entry(key.clone()).or_default();
            if !tuples(line, |row| acc.add(row)) {
                self.insert = Some(key);
            }
            return;
        }
        if let Some(rest) = line.strip_prefix(b"DELIMITER ") {
            self.routines = trim(rest) != b";";
            return;
        }
        if self.routines {
            return;
        }
        if let Some(rest) = line.strip_prefix(b"USE ") {
            if let Some((db, _)) = backtick(rest) {
                self.skip_db = SYSTEM_SCHEMAS.contains(&db.as_slice());
                self.db = db;
            }
            return;
        }
        if self.skip_db {
            return;
        }
        if let Some(rest) = line.strip_prefix(b"CREATE TABLE ") {
            let rest = rest.strip_prefix(b"IF NOT EXISTS ").unwrap_or(rest);
            if let Some((table, _)) = backtick(rest) {
                let key = self.key(&table);
                self.tables.entry(key).or_default();
            }
            return;
        }
        let insert = [
            &b"INSERT INTO "[..],
            b"INSERT IGNORE INTO ",
            b"REPLACE INTO ",
        ]
        .iter()
        .find_map(|prefix| line.strip_prefix(*prefix));
        if let Some((table, after)) = insert.and_then(backtick) {
            let key = self.key(&table);
            let acc = self.tables.entry(key.clone()).or_default();
            if !insert_rows(after, |row| acc.add(row)) {
                self.insert = Some(key);
            }
        }
    }
}

/// `line` without a trailing carriage return.
fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// `bytes` without leading and trailing ASCII whitespace.
fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

/// The database a psql `\connect` argument list names: a plain or double-quoted name, or
/// `-reuse-previous=on "dbname='…'"` (a connection string), as `pg_dumpall` writes them.
fn connect_db(args: &[u8]) -> Option<Vec<u8>> {
    let args = trim(args);
    let (reuse, args) = match args.strip_prefix(b"-reuse-previous=on") {
        Some(rest) => (true, rest.trim_ascii_start()),
        None => (false, args),
    };
    let (word, _) = psql_word(args)?;
    if reuse || word.contains(&b'=') {
        conninfo_dbname(&word)
    } else {
        Some(word)
    }
}

/// The first argument of a psql meta-command: double-quoted (`""` is a quote) or up to
/// whitespace; with the rest.
fn psql_word(args: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    if let Some(quoted) = args.strip_prefix(b"\"") {
        let mut word = Vec::new();
        let mut i = 0;
        loop {
            match (quoted.get(i), quoted.get(i + 1)) {
                (None, _) => return None,
                (Some(b'"'), Some(b'"')) => {
                    word.push(b'"');
                    i += 2;
                }
                (Some(b'"'), _) => return Some((word, &quoted[i + 1..])),
                (Some(&c), _) => {
                    word.push(c);
                    i += 1;
                }
            }
        }
    }
    let end = args
        .iter()
        .position(u8::is_ascii_whitespace)
        .unwrap_or(args.len());
    (end > 0).then(|| (args[..end].to_vec(), &args[end..]))
}

/// The `dbname` of a libpq connection string (`key=value` pairs; a value single-quoted with
/// backslash escapes, or up to whitespace).
fn conninfo_dbname(conninfo: &[u8]) -> Option<Vec<u8>> {
    let mut rest = conninfo;
    loop {
        rest = rest.trim_ascii_start();
        if rest.is_empty() {
            return None;
        }
        let eq = rest.iter().position(|&b| b == b'=')?;
        let key = trim(&rest[..eq]);
        rest = rest[eq + 1..].trim_ascii_start();
        let mut value = Vec::new();
        if let Some(quoted) = rest.strip_prefix(b"'") {
            let mut i = 0;
            loop {
                match quoted.get(i) {
                    None => return None,
                    Some(b'\\') => {
                        value.push(*quoted.get(i + 1)?);
                        i += 2;
                    }
                    Some(b'\'') => break,
                    Some(&c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
            rest = &quoted[i + 1..];
        } else {
            let end = rest
                .iter()
                .position(u8::is_ascii_whitespace)
                .unwrap_or(rest.len());
            value.extend_from_slice(&rest[..end]);
            rest = &rest[end..];
        }
        if key == b"dbname" {
            return Some(value);
        }
    }
}

/// The table of a `COPY <table> (<columns>) FROM stdin;` line (after `COPY `), as written:
/// dot-separated parts, each plain or double-quoted.
fn copy_table(rest: &[u8]) -> Option<&[u8]> {
    let mut i = 0;
    loop {
        if rest.get(i) == Some(&b'"') {
            i += 1;
            loop {
                match (rest.get(i)?, rest.get(i + 1)) {
                    (b'"', Some(b'"')) => i += 2,
                    (b'"', _) => break,
                    _ => i += 1,
                }
            }
            i += 1;
        } else {
            let start = i;
            while rest
                .get(i)
                .is_some_and(|c| !c.is_ascii_whitespace() && !b".(\"".contains(c))
            {
                i += 1;
            }
            if i == start {
                return None;
            }
        }
        if rest.get(i) == Some(&b'.') {
            i += 1;
        } else {
            break;
        }
    }
    let tail = trim(&rest[i..]);
    (tail.ends_with(b"FROM stdin;") && (tail.starts_with(b"(") || tail.starts_with(b"FROM")))
        .then_some(&rest[..i])
}

/// A backtick-quoted MySQL identifier at the start of `text` (a doubled backtick is one),
/// with the rest.
fn backtick(text: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let quoted = text.strip_prefix(b"`")?;
    let mut name = Vec::new();
    let mut i = 0;
    loop {
        match (quoted.get(i)?, quoted.get(i + 1)) {
            (b'`', Some(b'`')) => {
                name.push(b'`');
                i += 2;
            }
            (b'`', _) => return Some((name, &quoted[i + 1..])),
            (&c, _) => {
                name.push(c);
                i += 1;
            }
        }
    }
}

/// Calls `row` with each tuple's text (between its outer parentheses) of an `INSERT` after
/// its table name: an optional column list, `VALUES`, then `(…),(…);`. Quoted strings (with
/// backslash escapes and doubled quotes) may hold any character. A tuple cut short is not
/// a row. False when the statement goes on on the next line (the line ends after `VALUES` or
/// after a tuple's `,`).
fn insert_rows(after: &[u8], row: impl FnMut(&[u8])) -> bool {
    let mut s = after.trim_ascii_start();
    if s.first() == Some(&b'(') {
        let mut in_name = false;
        let Some(end) = s.iter().position(|&c| {
            if c == b'`' {
                in_name = !in_name;
            }
            c == b')' && !in_name
        }) else {
            return true;
        };
        s = s[end + 1..].trim_ascii_start();
    }
    match s.strip_prefix(b"VALUES") {
        Some(rest) => tuples(rest, row),
        None => true,
    }
}

/// Calls `row` with each tuple of `(…),(…)` in `s`; false when `s` ends where another tuple
/// must follow (empty, or after a `,`), true when the statement ended (`;`) or `s` is not a
/// tuple list.
fn tuples(mut s: &[u8], mut row: impl FnMut(&[u8])) -> bool {
    loop {
        s = s.trim_ascii_start();
        if s.is_empty() {
            return false;
        }
        let Some(body) = s.strip_prefix(b"(") else {
            return true;
        };
        let Some(end) = tuple_end(body) else {
            return true;
        };
        row(&body[..end]);
        s = body[end + 1..].trim_ascii_start();
        match s.strip_prefix(b",") {
            Some(next) => s = next,
            None => return true,
        }
    }
}

/// The index of the `)` that closes a tuple whose text starts `body`, if it is complete.
fn tuple_end(body: &[u8]) -> Option<usize> {
    let mut depth = 1usize;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while let Some(&c) = body.get(i) {
        match quote {
            Some(_) if c == b'\\' => i += 1,
            Some(q) if c == q => {
                if body.get(i + 1) == Some(&q) {
                    i += 1;
                } else {
                    quote = None;
                }
            }
            Some(_) => {}
            None => match c {
                b'\'' | b'"' => quote = Some(c),
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            },
        }
        i += 1;
    }
    None
}

/// How a restored server's tables differ from the manifest's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableMismatch {
    /// In the backup, not on the restored server.
    Missing {
        /// The table (`<database>.<table>`).
        table: String,
        /// Its stats in the backup.
        expected: TableStats,
    },
    /// On the restored server, not in the backup.
    Unexpected {
        /// The table (`<database>.<table>`).
        table: String,
        /// Its stats on the restored server.
        actual: TableStats,
    },
    /// A different number of rows.
    Rows {
        /// The table (`<database>.<table>`).
        table: String,
        /// Rows in the backup.
        expected: u64,
        /// Rows restored.
        actual: u64,
    },
    /// The same number of rows with different contents.
    Checksum {
        /// The table (`<database>.<table>`).
        table: String,
        /// Rows in the backup and restored.
        rows: u64,
    },
}

impl TableMismatch {
    /// The table the mismatch is about.
    pub fn table(&self) -> &str {
        match self {
            TableMismatch::Missing { table, .. }
            | TableMismatch::Unexpected { table, .. }
            | TableMismatch::Rows { table, .. }
            | TableMismatch::Checksum { table, .. } => table,
        }
    }
}

impl fmt::Display for TableMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableMismatch::Missing { table, expected } => write!(
                f,
                "table {table}: {} rows in the backup, missing after the restore",
                expected.rows
            ),
            TableMismatch::Unexpected { table, actual } => write!(
                f,
                "table {table}: not in the backup, {} rows after the restore",
                actual.rows
            ),
            TableMismatch::Rows {
                table,
                expected,
                actual,
            } => write!(
                f,
                "table {table}: {expected} rows in the backup, {actual} restored"
            ),
            TableMismatch::Checksum { table, rows } => write!(
                f,
                "table {table}: {rows} rows in the backup and restored, but their contents differ \
                 (checksum mismatch)"
            ),
        }
    }
}

/// How `actual` (a restored server's tables) differs from `expected` (the backup's), sorted by
/// table name; empty when they match.
pub fn compare(expected: &TableSet, actual: &TableSet) -> Vec<TableMismatch> {
    let mut out = Vec::new();
    for (table, e) in expected {
        let table = table.clone();
        match actual.get(&table) {
            None => out.push(TableMismatch::Missing {
                table,
                expected: e.clone(),
            }),
            Some(a) if a.rows != e.rows => out.push(TableMismatch::Rows {
                table,
                expected: e.rows,
                actual: a.rows,
            }),
            Some(a) if a.checksum != e.checksum => out.push(TableMismatch::Checksum {
                table,
                rows: e.rows,
            }),
            Some(_) => {}
        }
    }
    for (table, a) in actual {
        if !expected.contains_key(table) {
            out.push(TableMismatch::Unexpected {
                table: table.clone(),
                actual: a.clone(),
            });
        }
    }
    out.sort_by(|a, b| a.table().cmp(b.table()));
    out
}

#[cfg(test)]
mod tests;
