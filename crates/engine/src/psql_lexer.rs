//! psql's side of [`crate::dump_guard`]: how psql 15 splits its input (psqlscan.l), as far as
//! the guard needs it to know where a meta-command would run.

use crate::psql_syntax::{
    Meta, UnsafeDump, connect_arguments, dollar_delimiter, ident_byte, ident_start,
    is_copy_from_stdin,
};

/// Where psql's lexer stands between two bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum State {
    /// Outside quotes and comments.
    #[default]
    Normal,
    /// Inside `'…'` (`E'…'`, where a backslash escapes a quote, is refused).
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

/// psql's side of [`crate::dump_guard::DumpGuard`].
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
    /// The meta-command the last line checked was, when it was one.
    last_meta: Option<Meta>,
    /// The statement under way named `standard_conforming_strings` / `client_encoding`: its
    /// lines are checked for what would change it ([`PsqlGuard::check_lexer_settings`]).
    watch_strings: bool,
    watch_encoding: bool,
    /// The statement's previous identifier was `set` (`SET NAMES` is refused).
    after_set: bool,
    /// A statement of this line began with `copy` (only `pg_dump`'s form is accepted).
    copy_seen_on_line: bool,
}

/// The meta-commands `pg_dumpall` writes.
const ALLOWED_META: [&[u8]; 4] = [b"connect", b"c", b"restrict", b"unrestrict"];

/// Settings that change how psql splits its input, which a dump may set only as `pg_dump` does:
/// `standard_conforming_strings` decides whether a backslash escapes a quote, and a client
/// encoding such as SJIS or BIG5 makes psql skip the byte after each lead byte.
const LEXER_SETTINGS: [&[u8]; 2] = [b"standard_conforming_strings", b"client_encoding"];

/// The client encodings (client-only; no database has them, so `pg_dump` never writes them) in
/// which psql reads a byte after a lead byte as part of the character, whatever it is: their
/// names and aliases lower-cased with everything but letters and digits left out, as the server
/// compares them.
const HIDING_ENCODINGS: [&str; 20] = [
    "sjis",
    "shiftjis",
    "mskanji",
    "big5",
    "gbk",
    "uhc",
    "gb18030",
    "johab",
    "win932",
    "win936",
    "win949",
    "win950",
    "windows932",
    "windows936",
    "windows949",
    "windows950",
    "cp932",
    "cp936",
    "cp949",
    "cp950",
];

/// How a boolean setting is turned off (PostgreSQL takes these prefixes of `off`, `false`, `no`).
const FALSE_WORDS: [&[u8]; 10] = [
    b"off", b"of", b"false", b"fals", b"fal", b"fa", b"f", b"no", b"n", b"0",
];

impl PsqlGuard {
    /// The meta-command the last line checked was, when it was one.
    pub fn last_meta(&self) -> Option<Meta> {
        self.last_meta
    }

    fn refuse(&self, what: impl Into<String>) -> UnsafeDump {
        UnsafeDump {
            line: self.line,
            what: what.into(),
        }
    }

    /// Reads the next line.
    pub fn check(&mut self, line: &[u8]) -> Result<(), UnsafeDump> {
        self.line += 1;
        self.last_meta = None;
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
        // psql treats a carriage return inside a line as a line end in places (line comments,
        // the space between two parts of one string): `pg_dump` writes none there.
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        if self.state == State::Normal && body.contains(&b'\r') {
            return Err(self.refuse("holds a carriage return inside a line"));
        }
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
                    if len > 0 {
                        self.word(line, start, len)?;
                    }
                    match b {
                        b'\\' => return self.meta_command(line, i),
                        // To the end of the line (a carriage return inside a line, which psql
                        // would end it at, is refused above).
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
                        b'$' => {
                            self.in_statement = true;
                            if let Some(end) = dollar_delimiter(&line[i..]) {
                                self.state = State::Dollar(line[i..i + end].to_vec());
                                i += end;
                                continue;
                            }
                            if next.is_some_and(ident_start) {
                                return Err(self.refuse(
                                    "holds a `$` before a word that is no dollar quote, which \
                                     psql reads as `$` and the word",
                                ));
                            }
                            (word_start, word_len) = (i, 1);
                        }
                        b':' if next == Some(b':') => {
                            // A cast: both colons.
                            self.in_statement = true;
                            i += 1;
                        }
                        // psql's own variables are upper case (DBNAME, USER, ...); an undefined
                        // name stays as it is (`a[1:n]`).
                        b':' if next
                            .is_some_and(|n| n.is_ascii_uppercase() || b"'\"{".contains(&n)) =>
                        {
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
                            self.end_statement();
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
        if word_len > 0 {
            self.word(line, word_start, word_len)?;
        }
        let copy_line = begins_statement
            && statement_ends == 1
            && self.state == State::Normal
            && !self.in_statement
            && is_copy_from_stdin(line);
        self.finish_line(line, copy_line)
    }

    /// After a line: into `COPY` data after `pg_dump`'s COPY line (any other COPY is refused),
    /// and the settings a statement still under way named are watched on its next lines.
    fn finish_line(&mut self, line: &[u8], copy_line: bool) -> Result<(), UnsafeDump> {
        if copy_line {
            self.state = State::CopyData;
        } else if self.copy_seen_on_line {
            return Err(self.refuse(
                "holds a COPY statement that is not a whole `COPY table (columns) FROM stdin;` \
                 line as pg_dump writes it",
            ));
        }
        self.copy_seen_on_line = false;
        if self.in_statement {
            let lower = line.to_ascii_lowercase();
            let mentions = |name: &[u8]| lower.windows(name.len()).any(|w| w == name);
            self.watch_strings |= mentions(LEXER_SETTINGS[0]);
            self.watch_encoding |= mentions(LEXER_SETTINGS[1]);
        }
        Ok(())
    }

    /// One step inside a quote or a comment from `i`: where the next step starts.
    fn inside(&mut self, line: &[u8], mut i: usize) -> usize {
        let b = line[i];
        let next = line.get(i + 1).copied();
        match &self.state {
            State::Quoted => match (b, next) {
                (b'\'', Some(b'\'')) => i += 1,
                (b'\'', _) => self.state = State::Normal,
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

    /// The run of identifier bytes `line[start..start + len]` that just ended.
    fn word(&mut self, line: &[u8], start: usize, len: usize) -> Result<(), UnsafeDump> {
        let word = &line[start..start + len];
        let next = line.get(start + len).copied();
        if !ident_start(word[0]) {
            return Ok(());
        }
        // String prefixes: `E'…'` reads backslashes as escapes or not depending on where psql
        // thinks a token starts, `U&'…'` and `U&"…"` spell anything in escapes; `pg_dump` writes
        // neither with standard_conforming_strings on. `B'…'`, `X'…'`, `N'…'` are no identifiers.
        if len == 1 {
            match (word[0].to_ascii_lowercase(), next) {
                (b'e', Some(b'\'')) => {
                    return Err(self
                        .refuse("holds an E'…' string, whose backslashes psql reads as escapes"));
                }
                (b'u', Some(b'&')) => {
                    return Err(self.refuse("holds a U&'…' or U&\"…\" (Unicode escapes)"));
                }
                (b'b' | b'x' | b'n', Some(b'\'')) => return Ok(()),
                _ => {}
            }
        }
        // A word glued to a number (`1.end`, `1end`) is part of the number to psql.
        let before = start.checked_sub(1).map(|i| line[i]);
        let before_dot = start.checked_sub(2).map(|i| line[i]);
        if before.is_some_and(|b| b.is_ascii_digit())
            || (before == Some(b'.') && before_dot.is_some_and(|b| b.is_ascii_digit()))
        {
            return Ok(());
        }
        self.identifier(word)
    }

    /// The end of a statement (a `;` outside parentheses and routine bodies).
    fn end_statement(&mut self) {
        self.in_statement = false;
        self.identifier_count = 0;
        self.watch_strings = false;
        self.watch_encoding = false;
        self.after_set = false;
    }

    /// psql's bookkeeping of an identifier (or keyword) outside quotes: inside `CREATE [OR
    /// REPLACE] FUNCTION|PROCEDURE`, `BEGIN` and `CASE` open a block that `END` closes
    /// (psqlscan.l). Also where the guard refuses by keyword: `SET NAMES`, and notes a `COPY`.
    fn identifier(&mut self, word: &[u8]) -> Result<(), UnsafeDump> {
        if self.identifier_count == 0 {
            self.identifiers = [0; 4];
        }
        let lower = word.to_ascii_lowercase();
        if self.identifier_count == 0 && lower == b"copy" {
            self.copy_seen_on_line = true;
        }
        if self.after_set && lower == b"names" {
            return Err(self.refuse(
                "sets the client encoding (SET NAMES), which changes how psql splits the rest \
                 of the dump",
            ));
        }
        self.after_set = lower == b"set";
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
        Ok(())
    }

    /// A statement that names a setting of psql's lexer ([`LEXER_SETTINGS`], in a statement,
    /// a string or a comment) is watched to its end: a line of it that turns
    /// `standard_conforming_strings` off or names a client encoding that hides bytes from psql
    /// ([`HIDING_ENCODINGS`], however spelled) is refused.
    fn check_lexer_settings(&self, line: &[u8]) -> Result<(), UnsafeDump> {
        let lower = line.to_ascii_lowercase();
        let words: Vec<&[u8]> = lower
            .split(|b| !b.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        let squeezed: Vec<u8> = lower
            .iter()
            .copied()
            .filter(u8::is_ascii_alphanumeric)
            .collect();
        let mentions = |name: &[u8]| lower.windows(name.len()).any(|w| w == name);
        if (self.watch_strings || mentions(LEXER_SETTINGS[0]))
            && words.iter().any(|w| FALSE_WORDS.contains(w))
        {
            return Err(self.refuse(
                "turns standard_conforming_strings off, which changes how psql splits the rest \
                 of the dump",
            ));
        }
        if (self.watch_encoding || mentions(LEXER_SETTINGS[1]))
            && HIDING_ENCODINGS
                .iter()
                .any(|e| squeezed.windows(e.len()).any(|w| w == e.as_bytes()))
        {
            return Err(self.refuse(
                "sets a client encoding in which psql reads a byte after a lead byte as part of \
                 the character, which changes how psql splits the rest of the dump",
            ));
        }
        Ok(())
    }

    /// A backslash outside quotes at `at`: allowed only as a whole line's `pg_dumpall`
    /// meta-command.
    fn meta_command(&mut self, line: &[u8], at: usize) -> Result<(), UnsafeDump> {
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
        let key = || !arguments.is_empty() && arguments.iter().all(u8::is_ascii_alphanumeric);
        let meta = match name {
            b"restrict" => key().then_some(Meta::Restrict),
            b"unrestrict" => key().then_some(Meta::Unrestrict),
            _ => connect_arguments(arguments).then_some(Meta::Connect),
        };
        if let Some(meta) = meta {
            self.last_meta = Some(meta);
            Ok(())
        } else {
            Err(self.refuse(format!(
                "holds `{shown}` with arguments pg_dumpall never writes ({})",
                String::from_utf8_lossy(arguments)
            )))
        }
    }
}
