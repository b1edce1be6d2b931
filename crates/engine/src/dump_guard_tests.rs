use super::*;

/// The first refusal of `dump` read line by line, if any.
fn first_refusal(protocol: Protocol, dump: &str) -> Option<UnsafeDump> {
    let mut guard = DumpGuard::new(protocol);
    dump.split_inclusive('\n')
        .find_map(|line| guard.check(line.as_bytes()).err())
}

fn refused_line(dump: &str) -> Option<u64> {
    first_refusal(Protocol::Postgres, dump).map(|e| e.line)
}

/// The shape of a `pg_dumpall` of PostgreSQL 15.18 (its `\restrict` lines included): every line
/// of it must pass.
const PG_DUMPALL: &str = "--
-- PostgreSQL database cluster dump
--

\\restrict 8bTqPZ4cR2hN0aKx

SET default_transaction_read_only = off;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
CREATE ROLE app;
ALTER ROLE app WITH LOGIN PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a:b';

\\unrestrict 8bTqPZ4cR2hN0aKx

\\connect template1

\\restrict Q1w2E3r4T5y6U7i8
SET statement_timeout = 0;
SELECT pg_catalog.set_config('search_path', '', false);
\\unrestrict Q1w2E3r4T5y6U7i8
\\connect -reuse-previous=on \"dbname='it\\'s \"\"odd\"\"'\"
CREATE DATABASE shop WITH TEMPLATE = template0 ENCODING = 'UTF8';
\\connect shop
CREATE FUNCTION public.touch() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
BEGIN
  -- a body with quotes ' and backslashes \\! and \\o |sh
  RAISE NOTICE E'\\\\';
  RETURN NEW;
END $_$;
CREATE TABLE public.t (
    id integer NOT NULL,
    note text DEFAULT 'C:\\temp'::text,
    \"we\"\"ird\\\" text
);
COMMENT ON TABLE public.t IS 'rows /* not a comment */ -- nor this';
/* a block /* nested */ with \\! inside */
COPY public.t (id, note) FROM stdin;
1\t\\N
2\t\\\\! not a command: data
\\!also data
\\.
SELECT $$ $$ , a$b$c FROM (SELECT 1 AS \"a$b$c\") s;
";

#[test]
fn a_pg_dumpall_passes_line_by_line() {
    assert_eq!(first_refusal(Protocol::Postgres, PG_DUMPALL), None);
    // Lines end with \r\n as well.
    assert_eq!(
        first_refusal(Protocol::Postgres, &PG_DUMPALL.replace('\n', "\r\n")),
        None
    );
}

#[test]
fn psql_shell_escapes_are_refused_wherever_they_stand() {
    for (dump, line) in [
        ("SELECT 1;\n\\! touch /tmp/pwned\n", 2),
        ("SELECT 1; \\! touch /tmp/pwned\n", 1),
        ("  \\! touch /tmp/pwned\n", 1),
        ("\\o |sh\n", 1),
        ("\\copy t from program 'sh -c id'\n", 1),
        ("\\g |sh\n", 1),
        ("\\set x `id`\n", 1),
        ("\\connect `touch /tmp/pwned`\n", 1),
        ("\\connect shop \\! touch /tmp/pwned\n", 1),
        ("\\connect 'a\\'b' \\! id\n", 1),
        ("\\restrict k\n\\unrestrict k\n\\!id\n", 3),
        // After the data of a COPY ends, psql reads commands again.
        ("COPY t (a) FROM stdin;\n1\n\\.\n\\! id\n", 4),
        // A string that psql reads as ended one way and open the other.
        ("SELECT 'a\\'; \\! id; --';\n", 1),
        // Refused at the change of standard_conforming_strings already.
        (
            "SET standard_conforming_strings = off;\nSELECT 'x\\' \\! id '\n",
            1,
        ),
        // `1$a$` opens a dollar quote in psql; `$1$a$` too.
        ("SELECT 1$a$ ' $a$ \\! id '\n", 1),
        ("SELECT $1$a$ ' $a$ \\! id '\n", 1),
        // A quote or comment that has ended.
        ("SELECT 'x' /* c */ \"i\" $q$ ' $q$; \\! id\n", 1),
        ("SELECT '\nmulti\n' ;\n\\! id\n", 4),
        ("/* one\n/* two */\n*/ \\! id\n", 3),
    ] {
        let refusal = first_refusal(Protocol::Postgres, dump);
        assert_eq!(
            refusal.as_ref().map(|e| e.line),
            Some(line),
            "{dump:?}: {refusal:?}"
        );
    }
}

#[test]
fn what_changes_psqls_reading_is_refused() {
    for (dump, line) in [
        // A carriage return ends a line comment for psql.
        ("-- x\r\\! id\n", 1),
        // psql drops a line's rest from a NUL byte on, joining it to the next.
        ("\0'\n\\! id\n'\n", 1),
        ("COPY t (a) FROM stdin;\na\0b\n\\.\n", 2),
        // Client encodings that hide the byte after a lead byte; any other way of naming them.
        ("SET client_encoding = 'SJIS';\n", 1),
        (
            "SELECT 1;\nSELECT set_config('client_encoding', 'BIG5', false);\n",
            2,
        ),
        ("SET NAMES 'GBK';\n", 1),
        (
            "ALTER DATABASE shop SET standard_conforming_strings TO off;\n",
            1,
        ),
        ("SET standard_conforming_strings = off;\n", 1),
        // psql variables: their values are read as input (`\connect` sets DBNAME).
        ("SELECT :DBNAME;\n", 1),
        ("SELECT :'x';\n", 1),
        // \connect only as pg_dumpall writes it: no other connection keys, no host.
        (
            "\\connect -reuse-previous=on \"host=evil.example dbname=x\"\n",
            1,
        ),
        ("\\connect -reuse-previous=on \"dbname='x' host=evil\"\n", 1),
        ("\\connect \"shop\" other\n", 1),
        ("\\restrict `id`\n", 1),
    ] {
        let refusal = first_refusal(Protocol::Postgres, dump);
        assert_eq!(
            refusal.as_ref().map(|e| e.line),
            Some(line),
            "{dump:?}: {refusal:?}"
        );
    }
    // What pg_dump writes of them passes, and casts, slices, a byte order mark too.
    for dump in [
        "\u{feff}\\restrict abc123\nSET client_encoding = 'UTF8';\nSET standard_conforming_strings = on;\n",
        "SELECT x::text, a[1:2] FROM t;\n",
        // With standard_conforming_strings on, a backslash in '…' is a character.
        "CREATE VIEW v AS SELECT replace(p, '\\', '/') FROM t WHERE p LIKE '%\\_%' ESCAPE '\\';\n",
        // pg_dumpall's quoted names, encodings that hide nothing, undefined lower-case names.
        "\\connect \"Shop\"\n",
        "ALTER ROLE app SET client_encoding TO 'utf8';\n",
        "CREATE VIEW v AS SELECT current_setting('client_encoding'::text) AS e, (t.a)[1:t.n] FROM t;\n",
        "SELECT current_setting('standard_conforming_strings');\n",
        "COPY public.\"Odd \"\"Name\"\"\" (id, \"Col\", note) FROM stdin;\n1\t2\t3\n\\.\n",
    ] {
        assert_eq!(first_refusal(Protocol::Postgres, dump), None, "{dump:?}");
    }
}

#[test]
fn what_a_second_review_found_is_refused() {
    for (dump, line) in [
        // COPY spelled otherwise than pg_dump writes it (psql reads data after any COPY the
        // server accepts).
        ("copy t from stdin;\n'\n\\.\n\\! id\n", 1),
        ("COPY t FROM STDIN;\n", 1),
        (" COPY t FROM stdin;\n", 1),
        ("COPY t FROM stdin ;\n", 1),
        ("COPY t\nFROM stdin;\n", 1),
        ("SELECT 1; COPY t FROM stdin;\n", 1),
        (
            "COPY t FROM '/dev/null' WHERE stdin IS DISTINCT FROM stdin;\n\\! id\n",
            1,
        ),
        // `$begin` is `$` and `begin` to psql.
        (
            "CREATE FUNCTION f() RETURNS int LANGUAGE sql $begin RETURN 1;\n",
            1,
        ),
        // String prefixes: E'' (escapes), U& (Unicode escapes spelling anything).
        ("SELECT x.E'a\\' ' \\! id\n", 1),
        (
            "SET U&\"standard\\005fconforming\\005fstrings\" TO off;\n",
            1,
        ),
        // A carriage return inside a line.
        ("SELECT E'a'\r'\\' ' \\! id\n", 1),
        ("SELECT 1;\r\\! id\n", 1),
        // Other spellings of the hiding encodings; SET NAMES over two lines.
        ("SET client_encoding = 'MSKANJI';\n", 1),
        ("SET client_encoding = 'Big_5';\n", 1),
        ("SET client_encoding\n= 'G_B_K';\n", 2),
        ("SET\nNAMES 'SJIS';\n", 2),
        ("ALTER DATABASE shop SET NAMES 'SJIS';\n", 1),
        ("SET standard_conforming_strings\nTO off;\n", 2),
    ] {
        let refusal = first_refusal(Protocol::Postgres, dump);
        assert_eq!(
            refusal.as_ref().map(|e| e.line),
            Some(line),
            "{dump:?}: {refusal:?}"
        );
    }
    // `1.end` and `B''` prefixes: not identifiers to psql, so they neither close nor hide a
    // routine's BEGIN block; the COPY after it is no COPY.
    assert_eq!(
        refused_line(
            "CREATE FUNCTION f() BEGIN ATOMIC SELECT 1.end;\nCOPY t FROM stdin;\n\\! id\n"
        ),
        Some(3)
    );
    assert_eq!(
        refused_line(
            "CREATE B'' FUNCTION f() RETURNS int LANGUAGE sql BEGIN;\nCOPY t FROM stdin;\n\\! id\n"
        ),
        Some(3)
    );
}

#[test]
fn copy_data_is_skipped_only_after_a_whole_copy_statement() {
    // A `;` inside parentheses, or inside BEGIN … END of CREATE FUNCTION, ends no statement
    // for psql: the COPY after it is no COPY and what follows are commands.
    assert_eq!(refused_line("COPY t (a FROM stdin;\n\\! id\n"), Some(1));
    assert_eq!(
        refused_line("SELECT (;\nCOPY t FROM stdin;\n\\! id\n"),
        Some(3)
    );
    assert_eq!(
        refused_line("CREATE FUNCTION f() BEGIN;\nCOPY t FROM stdin;\n\\! id\n"),
        Some(3)
    );
    assert_eq!(
        refused_line(
            "CREATE OR REPLACE PROCEDURE p() BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; END;\nCOPY t FROM stdin;\n\\N\n\\.\n"
        ),
        None
    );
    // psql does not read data after a COPY that is part of a longer statement (here `stdin`
    // is a table after an alias `COPY`), so those lines are commands.
    assert_eq!(
        refused_line("SELECT 1 AS\nCOPY FROM stdin;\n\\! id\n\\.\n"),
        Some(3)
    );
    // A COPY in a block comment or a string is not one.
    assert_eq!(
        refused_line("/*\nCOPY t FROM stdin;\n*/\n\\! id\n"),
        Some(4)
    );
    assert_eq!(
        refused_line("SELECT '\nCOPY t FROM stdin;\n';\n\\! id\n"),
        Some(4)
    );
    // Two statements on the line: not pg_dump's COPY line, refused as it stands.
    assert_eq!(
        refused_line("SELECT 1; COPY t FROM stdin;\n\\N\n\\.\n"),
        Some(1)
    );
    // `\.` ends the data only alone on its line.
    assert_eq!(
        refused_line("COPY t FROM stdin;\n\\. \n\\.x\n\\.\n\\! id\n"),
        Some(5)
    );
    // A line comment before the COPY does not begin its statement.
    assert_eq!(
        refused_line("-- data\nCOPY t FROM stdin;\n\\N\n\\.\n"),
        None
    );
}

#[test]
fn mysql_client_commands_are_refused_at_the_start_of_a_line() {
    let dump = "-- MariaDB dump\n/*M!999999\\- enable the sandbox mode */\nINSERT INTO `t` VALUES ('system x','\\\\! y');\nDELIMITER ;;\nCREATE PROCEDURE p() SELECT 1 ;;\nDELIMITER ;\n";
    assert_eq!(first_refusal(Protocol::Mysql, dump), None);
    for (extra, line) in [
        ("system touch /tmp/pwned\n", 7),
        ("  SYSTEM touch /tmp/pwned\n", 7),
        ("\\! touch /tmp/pwned\n", 7),
        ("system;\n", 7),
    ] {
        let refusal = first_refusal(Protocol::Mysql, &format!("{dump}{extra}"));
        assert_eq!(refusal.as_ref().map(|e| e.line), Some(line), "{extra:?}");
    }
    assert_eq!(first_refusal(Protocol::Mysql, "systemd_units INT;\n"), None);
}

#[test]
fn a_refusal_names_the_line_and_the_command() {
    let refusal = first_refusal(Protocol::Postgres, "SELECT 1;\n\\! touch /tmp/pwned\n").unwrap();
    assert_eq!(
        refusal.to_string(),
        "line 2 of the dump holds the psql meta-command `\\!`; a restore never runs client \
         commands, nothing was applied"
    );
}
