use super::*;
use proptest::prelude::*;

/// What `pg_dumpall --clean --if-exists` (PostgreSQL 17) writes, shortened.
const PG_DUMP: &str = r#"--
-- PostgreSQL database cluster dump
--

\restrict Zq3hQk2sA7
SET default_transaction_read_only = off;

SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;

--
-- Drop databases (except postgres and template1)
--

DROP DATABASE IF EXISTS shop;
DROP DATABASE IF EXISTS "my-db";

--
-- Roles
--

DROP ROLE IF EXISTS app;
CREATE ROLE app;
ALTER ROLE app WITH NOSUPERUSER INHERIT NOCREATEROLE NOCREATEDB LOGIN NOREPLICATION NOBYPASSRLS PASSWORD 'SCRAM-SHA-256$4096:abc';

\unrestrict Zq3hQk2sA7

--
-- Databases
--

--
-- Database "template1" dump
--

\connect template1

\restrict Zq3hQk2sA8
--
-- PostgreSQL database dump
--

-- Dumped from database version 17.2 (Debian 17.2-1.pgdg120+1)
-- Dumped by pg_dump version 17.2 (Debian 17.2-1.pgdg120+1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- PostgreSQL database dump complete
--

\unrestrict Zq3hQk2sA8

--
-- Database "postgres" dump
--

\connect postgres

SET statement_timeout = 0;
SELECT pg_catalog.set_config('search_path', '', false);

--
-- Name: notes; Type: TABLE; Schema: public; Owner: postgres
--

DROP TABLE IF EXISTS public.notes;
CREATE TABLE public.notes (
    id integer NOT NULL,
    body text
);


ALTER TABLE public.notes OWNER TO postgres;

--
-- Data for Name: notes; Type: TABLE DATA; Schema: public; Owner: postgres
--

COPY public.notes (id, body) FROM stdin;
1	hello\tworld
2	\N
3	line one\nline two
\.


--
-- Database "shop" dump
--

--
-- Name: shop; Type: DATABASE; Schema: -; Owner: postgres
--

CREATE DATABASE shop WITH TEMPLATE = template0 ENCODING = 'UTF8' LOCALE_PROVIDER = libc LOCALE = 'en_US.utf8';


ALTER DATABASE shop OWNER TO postgres;

\connect shop

SET statement_timeout = 0;

CREATE FUNCTION public.touch() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  NEW.updated := now();
  RETURN NEW;
END
$$;

CREATE TABLE public.orders (
    id bigint NOT NULL,
    customer text NOT NULL,
    total numeric(10,2),
    note text
);

--
-- Data for Name: orders; Type: TABLE DATA; Schema: public; Owner: app
--

COPY public.orders (id, customer, total, note) FROM stdin;
1	alice	10.50	\N
2	bob	7.00	gift\\wrap
3	carol	0.99	café
\.


--
-- Data for Name: Order Items; Type: TABLE DATA; Schema: public; Owner: app
--

COPY public."Order Items" (order_id, sku) FROM stdin;
1	A-1
1	B-2
\.


--
-- Data for Name: empty; Type: TABLE DATA; Schema: public; Owner: app
--

COPY public.empty (id) FROM stdin;
\.


SELECT pg_catalog.setval('public.orders_id_seq', 3, true);

--
-- PostgreSQL database dump complete
--

--
-- Database "my-db" dump
--

\connect -reuse-previous=on "dbname='my-db'"

COPY "Sales"."Q1 (old)" (id) FROM stdin;
7
\.

--
-- PostgreSQL database cluster dump complete
--

"#;

/// What `mariadb-dump --single-transaction --all-databases --routines --events --triggers`
/// writes, shortened.
const MYSQL_DUMP: &str = r#"/*M!999999\- enable the sandbox mode */ 
-- MariaDB dump 10.19-11.4.4-MariaDB, for debian-linux-gnu (x86_64)
--
-- Host: localhost    Database: 
-- ------------------------------------------------------
-- Server version	11.4.4-MariaDB-ubu2404

/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
/*!40101 SET @OLD_CHARACTER_SET_RESULTS=@@CHARACTER_SET_RESULTS */;
/*!40101 SET @OLD_COLLATION_CONNECTION=@@COLLATION_CONNECTION */;
/*!40101 SET NAMES utf8mb4 */;
/*!40103 SET @OLD_TIME_ZONE=@@TIME_ZONE */;
/*!40103 SET TIME_ZONE='+00:00' */;
/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */;
/*!40014 SET @OLD_FOREIGN_KEY_CHECKS=@@FOREIGN_KEY_CHECKS, FOREIGN_KEY_CHECKS=0 */;
/*!40101 SET @OLD_SQL_MODE=@@SQL_MODE, SQL_MODE='NO_AUTO_VALUE_ON_ZERO' */;
/*!40111 SET @OLD_SQL_NOTES=@@SQL_NOTES, SQL_NOTES=0 */;

--
-- Current Database: `mysql`
--

CREATE DATABASE /*!32312 IF NOT EXISTS*/ `mysql` /*!40100 DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_ai_ci */;

USE `mysql`;

--
-- Table structure for table `db`
--

DROP TABLE IF EXISTS `db`;
/*!40101 SET @saved_cs_client     = @@character_set_client */;
/*!40101 SET character_set_client = utf8mb4 */;
CREATE TABLE `db` (
  `Host` char(255) NOT NULL DEFAULT '',
  PRIMARY KEY (`Host`)
) ENGINE=Aria DEFAULT CHARSET=utf8mb3 COLLATE=utf8mb3_bin PAGE_CHECKSUM=1 TRANSACTIONAL=1;
/*!40101 SET character_set_client = @saved_cs_client */;

LOCK TABLES `db` WRITE;
/*!40000 ALTER TABLE `db` DISABLE KEYS */;
INSERT INTO `db` VALUES ('%');
/*!40000 ALTER TABLE `db` ENABLE KEYS */;
UNLOCK TABLES;

--
-- Current Database: `shop`
--

CREATE DATABASE /*!32312 IF NOT EXISTS*/ `shop` /*!40100 DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci */;

USE `shop`;

--
-- Table structure for table `orders`
--

DROP TABLE IF EXISTS `orders`;
/*!40101 SET @saved_cs_client     = @@character_set_client */;
/*!40101 SET character_set_client = utf8mb4 */;
CREATE TABLE `orders` (
  `id` int(11) NOT NULL AUTO_INCREMENT,
  `customer` varchar(64) NOT NULL,
  `note` text DEFAULT NULL,
  `data` varbinary(16) DEFAULT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB AUTO_INCREMENT=5 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;
/*!40101 SET character_set_client = @saved_cs_client */;

--
-- Dumping data for table `orders`
--

LOCK TABLES `orders` WRITE;
/*!40000 ALTER TABLE `orders` DISABLE KEYS */;
INSERT INTO `orders` VALUES (1,'alice','it\'s fine',NULL),(2,'bob','a \"quote\", (paren) and \\\\ back',0xDEADBEEF),(3,'o''brien','line\nbreak);',_binary 'x\0y');
INSERT INTO `orders` VALUES (4,'dave','',NULL);
/*!40000 ALTER TABLE `orders` ENABLE KEYS */;
UNLOCK TABLES;

--
-- Table structure for table `empty`
--

DROP TABLE IF EXISTS `empty`;
/*!40101 SET @saved_cs_client     = @@character_set_client */;
/*!40101 SET character_set_client = utf8mb4 */;
CREATE TABLE `empty` (
  `id` int(11) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;
/*!40101 SET character_set_client = @saved_cs_client */;

LOCK TABLES `empty` WRITE;
/*!40000 ALTER TABLE `empty` DISABLE KEYS */;
/*!40000 ALTER TABLE `empty` ENABLE KEYS */;
UNLOCK TABLES;

DROP TABLE IF EXISTS `we``ird`;
CREATE TABLE `we``ird` (
  `x` double DEFAULT NULL,
  `g` int(11) GENERATED ALWAYS AS (`x` + 1) VIRTUAL,
  `s` varchar(8) DEFAULT NULL
) ENGINE=InnoDB;

LOCK TABLES `we``ird` WRITE;
INSERT INTO `we``ird` (`x`, `s`) VALUES (-1.5e10,'x'),(NULL,'(\\\')');
UNLOCK TABLES;

--
-- Temporary table structure for view `recent`
--

DROP TABLE IF EXISTS `recent`;
/*!50001 DROP VIEW IF EXISTS `recent`*/;
SET @saved_cs_client     = @@character_set_client;
SET character_set_client = utf8mb4;
/*!50001 CREATE VIEW `recent` AS SELECT
 1 AS `id` */;
SET character_set_client = @saved_cs_client;

/*!50003 SET @saved_cs_client      = @@character_set_client */ ;
/*!50003 SET sql_mode              = 'STRICT_TRANS_TABLES' */ ;
DELIMITER ;;
/*!50003 CREATE*/ /*!50017 DEFINER=`root`@`localhost`*/ /*!50003 TRIGGER `orders_audit` AFTER INSERT ON `orders` FOR EACH ROW
INSERT INTO `audit` VALUES (NEW.id) */;;
DELIMITER ;
/*!50003 SET sql_mode              = @saved_sql_mode */ ;

--
-- Current Database: `sys`
--

USE `sys`;
CREATE TABLE `sys_config` (
  `variable` varchar(128) NOT NULL
);
INSERT INTO `sys_config` VALUES ('statement_truncate_len');

/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */;
/*!40101 SET SQL_MODE=@OLD_SQL_MODE */;

-- Dump completed on 2026-03-01  2:00:01
"#;

fn read(engine: Engine, dump: &[u8]) -> TableSet {
    let mut stats = DumpStats::new(engine);
    stats.feed(dump);
    stats.finish()
}

fn read_chunks(engine: Engine, dump: &[u8], cuts: &[usize]) -> TableSet {
    let mut stats = DumpStats::new(engine);
    let mut from = 0;
    for &cut in cuts {
        let cut = cut.clamp(from, dump.len());
        stats.feed(&dump[from..cut]);
        from = cut;
    }
    stats.feed(&dump[from..]);
    stats.finish()
}

fn stats_of(rows: &[&str]) -> TableStats {
    let sum = rows.iter().fold(0u128, |sum, row| {
        sum.wrapping_add(hash_parts([row.as_bytes()]))
    });
    TableStats {
        rows: rows.len() as u64,
        checksum: format!("{sum:032x}"),
    }
}

fn zero() -> TableStats {
    TableStats {
        rows: 0,
        checksum: "0".repeat(32),
    }
}

#[test]
fn postgres_dump_tables_by_database() {
    let tables = read(Engine::Postgresql, PG_DUMP.as_bytes());
    let expected: TableSet = [
        (
            "postgres.public.notes",
            stats_of(&["1\thello\\tworld", "2\t\\N", "3\tline one\\nline two"]),
        ),
        (
            "shop.public.orders",
            stats_of(&[
                "1\talice\t10.50\t\\N",
                "2\tbob\t7.00\tgift\\\\wrap",
                "3\tcarol\t0.99\tcafé",
            ]),
        ),
        (
            "shop.public.\"Order Items\"",
            stats_of(&["1\tA-1", "1\tB-2"]),
        ),
        ("shop.public.empty", zero()),
        ("my-db.\"Sales\".\"Q1 (old)\"", stats_of(&["7"])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(tables, expected);
}

#[test]
fn postgres_connect_forms() {
    let db = |args: &str| connect_db(args.as_bytes()).map(|d| String::from_utf8(d).unwrap());
    assert_eq!(db("shop"), Some("shop".into()));
    assert_eq!(db("\"Shop\""), Some("Shop".into()));
    assert_eq!(db("\"we\"\"ird\"  "), Some("we\"ird".into()));
    assert_eq!(
        db("-reuse-previous=on \"dbname='my db'\""),
        Some("my db".into())
    );
    assert_eq!(
        db(r#"-reuse-previous=on "dbname='it\'s \\ ""x""'""#),
        Some(r#"it's \ "x""#.into())
    );
    assert_eq!(
        db("-reuse-previous=on \"dbname=plain\""),
        Some("plain".into())
    );
    assert_eq!(db(""), None);
    assert_eq!(db("\"unterminated"), None);
    assert_eq!(db("-reuse-previous=on \"dbname='open\""), None);
}

#[test]
fn postgres_before_any_connect_is_the_empty_database() {
    let dump = "COPY public.t (a) FROM stdin;\n1\n\\.\n";
    let tables = read(Engine::Postgresql, dump.as_bytes());
    assert_eq!(tables.keys().collect::<Vec<_>>(), [".public.t"]);
}

#[test]
fn postgres_copy_line_forms() {
    let table =
        |rest: &str| copy_table(rest.as_bytes()).map(|t| String::from_utf8_lossy(t).into_owned());
    assert_eq!(
        table("public.t (a, b) FROM stdin;"),
        Some("public.t".into())
    );
    assert_eq!(
        table("public.nocols  FROM stdin;"),
        Some("public.nocols".into())
    );
    assert_eq!(
        table("\"a.b\".\"c \"\"(d)\" (x) FROM stdin;"),
        Some("\"a.b\".\"c \"\"(d)\"".into())
    );
    assert_eq!(table("public.t (a) TO stdout;"), None);
    assert_eq!(table("(SELECT 1) TO stdout;"), None);
    assert_eq!(table("\"open FROM stdin;"), None);
}

fn mysql_expected() -> TableSet {
    [
        (
            "shop.orders",
            stats_of(&[
                r"1,'alice','it\'s fine',NULL",
                r#"2,'bob','a \"quote\", (paren) and \\\\ back',0xDEADBEEF"#,
                r"3,'o''brien','line\nbreak);',_binary 'x\0y'",
                r"4,'dave','',NULL",
            ]),
        ),
        ("shop.empty", zero()),
        ("shop.we`ird", stats_of(&["-1.5e10,'x'", r"NULL,'(\\\')'"])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[test]
fn mysql_dump_tables_by_database() {
    for engine in [Engine::Mariadb, Engine::Mysql] {
        assert_eq!(read(engine, MYSQL_DUMP.as_bytes()), mysql_expected());
    }
}

#[test]
fn mysql_system_schemas_and_routines_are_skipped() {
    let tables = read(Engine::Mariadb, MYSQL_DUMP.as_bytes());
    assert!(
        tables
            .keys()
            .all(|k| !k.starts_with("mysql.") && !k.starts_with("sys."))
    );
    assert!(!tables.contains_key("shop.audit"), "trigger body counted");
    assert!(!tables.contains_key("shop.recent"), "view counted");
    let dump = "USE `performance_schema`;\nCREATE TABLE `t` (\n);\nUSE `information_schema`;\n\
                INSERT INTO `t` VALUES (1);\nUSE `app`;\nINSERT INTO `t` VALUES (1);\n";
    let tables = read(Engine::Mysql, dump.as_bytes());
    assert_eq!(tables.keys().collect::<Vec<_>>(), ["app.t"]);
}

#[test]
fn mysql_tuples_split() {
    let rows = |text: &str| {
        let mut out = Vec::new();
        insert_rows(text.as_bytes(), |r| {
            out.push(String::from_utf8_lossy(r).into_owned())
        });
        out
    };
    assert_eq!(rows(" VALUES (1),(2), (3);"), ["1", "2", "3"]);
    assert_eq!(
        rows(r" VALUES ('a)b','c\'d'),('e''f',_binary '\\'),(0x00ff,NULL);"),
        [r"'a)b','c\'d'", r"'e''f',_binary '\\'", "0x00ff,NULL"]
    );
    assert_eq!(rows(" (`a`, `b)`) VALUES (1,2);"), ["1,2"]);
    assert_eq!(
        rows(" VALUES ('',''),('''','\\\\');"),
        ["'',''", "'''','\\\\'"]
    );
    assert_eq!(
        rows(" VALUES (1),(2,'cut"),
        ["1"],
        "a tuple cut short is no row"
    );
    assert!(rows(" SELECT 1;").is_empty());
    assert!(rows(" (`a`").is_empty());
}

#[test]
fn insert_variants_count() {
    let dump = "USE `a`;\nINSERT IGNORE INTO `t` VALUES (1);\nREPLACE INTO `t` VALUES (2);\n\
                INSERT INTO `t` VALUES (3),(4);\n";
    let tables = read(Engine::Mysql, dump.as_bytes());
    assert_eq!(tables["a.t"], stats_of(&["1", "2", "3", "4"]));
}

#[test]
fn every_chunk_boundary_gives_the_same_tables() {
    for (engine, dump) in [
        (Engine::Postgresql, PG_DUMP.as_bytes()),
        (Engine::Mariadb, MYSQL_DUMP.as_bytes()),
    ] {
        let whole = read(engine, dump);
        assert!(!whole.is_empty());
        for cut in 0..=dump.len() {
            assert_eq!(read_chunks(engine, dump, &[cut]), whole, "cut at {cut}");
        }
        let cuts: Vec<usize> = (0..dump.len()).collect();
        assert_eq!(read_chunks(engine, dump, &cuts), whole, "byte by byte");
    }
}

#[test]
fn row_order_does_not_change_the_checksum() {
    let pg = |rows: &[&str]| {
        let dump = format!(
            "\\connect app\nCOPY public.t (a, b) FROM stdin;\n{}\n\\.\n",
            rows.join("\n")
        );
        read(Engine::Postgresql, dump.as_bytes())
    };
    let a = pg(&["1\tx", "2\ty", "3\t\\N"]);
    assert_eq!(a, pg(&["3\t\\N", "1\tx", "2\ty"]));
    assert_eq!(a, pg(&["2\ty", "3\t\\N", "1\tx"]));

    let my = |lines: &[&str]| {
        let dump = format!(
            "USE `app`;\nCREATE TABLE `t` (\n) ENGINE=InnoDB;\n{}\n",
            lines.join("\n")
        );
        read(Engine::Mariadb, dump.as_bytes())
    };
    let a = my(&["INSERT INTO `t` VALUES (1,'x'),(2,'y'),(3,NULL);"]);
    assert_eq!(a, my(&["INSERT INTO `t` VALUES (3,NULL),(1,'x'),(2,'y');"]));
    assert_eq!(
        a,
        my(&[
            "INSERT INTO `t` VALUES (2,'y');",
            "INSERT INTO `t` VALUES (3,NULL),(1,'x');"
        ])
    );
}

#[test]
fn a_changed_value_changes_the_checksum_and_a_removed_row_the_count() {
    let base = read(Engine::Postgresql, PG_DUMP.as_bytes());
    let changed = read(
        Engine::Postgresql,
        PG_DUMP.replace("2\tbob\t7.00", "2\tbob\t7.01").as_bytes(),
    );
    let removed = read(
        Engine::Postgresql,
        PG_DUMP.replace("1\tB-2\n", "").as_bytes(),
    );
    let key = "shop.public.orders";
    assert_eq!(changed[key].rows, base[key].rows);
    assert_ne!(changed[key].checksum, base[key].checksum);
    assert_eq!(
        compare(&base, &changed),
        [TableMismatch::Checksum {
            table: key.into(),
            rows: 3
        }]
    );
    let items = "shop.public.\"Order Items\"";
    assert_eq!(removed[items].rows, 1);
    assert_eq!(
        compare(&base, &removed),
        [TableMismatch::Rows {
            table: items.into(),
            expected: 2,
            actual: 1
        }]
    );

    let base = read(Engine::Mariadb, MYSQL_DUMP.as_bytes());
    let changed = read(
        Engine::Mariadb,
        MYSQL_DUMP
            .replace("'it\\'s fine'", "'it\\'s fine!'")
            .as_bytes(),
    );
    let removed = read(
        Engine::Mariadb,
        MYSQL_DUMP.replace(r",(NULL,'(\\\')')", "").as_bytes(),
    );
    assert_eq!(changed["shop.orders"].rows, 4);
    assert_ne!(
        changed["shop.orders"].checksum,
        base["shop.orders"].checksum
    );
    assert_eq!(removed["shop.we`ird"].rows, 1);
}

#[test]
fn compare_reports_each_kind_of_mismatch() {
    let set = |entries: &[(&str, TableStats)]| -> TableSet {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    };
    let expected = set(&[
        ("app.gone", stats_of(&["1"])),
        ("app.fewer", stats_of(&["1", "2"])),
        ("app.changed", stats_of(&["1"])),
        ("app.same", stats_of(&["1"])),
        ("app.empty", zero()),
    ]);
    let actual = set(&[
        ("app.fewer", stats_of(&["1"])),
        ("app.changed", stats_of(&["2"])),
        ("app.same", stats_of(&["1"])),
        ("app.empty", zero()),
        ("app.extra", zero()),
    ]);
    assert!(compare(&expected, &expected).is_empty());
    let mismatches = compare(&expected, &actual);
    assert_eq!(
        mismatches,
        [
            TableMismatch::Checksum {
                table: "app.changed".into(),
                rows: 1
            },
            TableMismatch::Unexpected {
                table: "app.extra".into(),
                actual: zero()
            },
            TableMismatch::Rows {
                table: "app.fewer".into(),
                expected: 2,
                actual: 1
            },
            TableMismatch::Missing {
                table: "app.gone".into(),
                expected: stats_of(&["1"])
            },
        ]
    );
    let messages: Vec<String> = mismatches.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "table app.changed: 1 rows in the backup and restored, but their contents differ \
             (checksum mismatch)",
            "table app.extra: not in the backup, 0 rows after the restore",
            "table app.fewer: 2 rows in the backup, 1 restored",
            "table app.gone: 1 rows in the backup, missing after the restore",
        ]
    );
    for m in &mismatches {
        assert!(m.to_string().contains(m.table()));
    }
    // A table missing on the restored side even when empty in the backup.
    let only_empty = set(&[("app.empty", zero())]);
    assert_eq!(
        compare(&only_empty, &TableSet::new()),
        [TableMismatch::Missing {
            table: "app.empty".into(),
            expected: zero()
        }]
    );
}

#[test]
fn truncated_streams_take_the_last_line() {
    let pg = read(
        Engine::Postgresql,
        b"\\connect a\nCOPY public.t (x) FROM stdin;\n1\n2",
    );
    assert_eq!(pg["a.public.t"], stats_of(&["1", "2"]));
    let my = read(
        Engine::Mysql,
        b"USE `a`;\nINSERT INTO `t` VALUES (1),(2),(3",
    );
    assert_eq!(my["a.t"], stats_of(&["1", "2"]));
    // An empty line in COPY data is a row (one empty text column); the end of the stream
    // after a newline is not.
    let pg = read(Engine::Postgresql, b"COPY t (x) FROM stdin;\n\n");
    assert_eq!(pg[".t"], stats_of(&[""]));
}

#[test]
fn invalid_utf8_names_and_rows() {
    let pg = read(
        Engine::Postgresql,
        b"\\connect caf\xe9\nCOPY public.\xff (x) FROM stdin;\n\xfe\xff\n\\.\n",
    );
    assert_eq!(pg.len(), 1);
    let (key, stats) = pg.iter().next().unwrap();
    assert_eq!(key, "caf\u{fffd}.public.\u{fffd}");
    assert_eq!(stats.rows, 1);
    let my = read(
        Engine::Mariadb,
        b"USE `\xc3`;\nINSERT INTO `t` VALUES ('\xff\\\\'),(1);\n",
    );
    assert_eq!(my["\u{fffd}.t"].rows, 2);
}

#[test]
fn stats_serialize_as_camel_case_json() {
    let json = serde_json::to_string(&stats_of(&[])).unwrap();
    assert_eq!(
        json,
        format!(r#"{{"rows":0,"checksum":"{}"}}"#, "0".repeat(32))
    );
    let back: TableStats = serde_json::from_str(&json).unwrap();
    assert_eq!(back, zero());
}

/// Pieces of both dialects, so that random streams reach every branch of the parsers.
fn token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"\n".to_vec()),
        Just(b"COPY public.t (a) FROM stdin;\n".to_vec()),
        Just(b"COPY \"x".to_vec()),
        Just(b"\\.\n".to_vec()),
        Just(b"\\connect ".to_vec()),
        Just(b"-reuse-previous=on \"dbname='".to_vec()),
        Just(b"USE `".to_vec()),
        Just(b"CREATE TABLE `".to_vec()),
        Just(b"INSERT INTO `t` ".to_vec()),
        Just(b"VALUES (".to_vec()),
        Just(b"DELIMITER ;;\n".to_vec()),
        Just(b"DELIMITER ;\n".to_vec()),
        Just(b"`".to_vec()),
        Just(b"'".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"\\".to_vec()),
        Just(b"(".to_vec()),
        Just(b")".to_vec()),
        Just(b",".to_vec()),
        Just(b";".to_vec()),
        prop::collection::vec(any::<u8>(), 0..8),
    ]
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(token(), 0..64).prop_map(|tokens| tokens.concat())
}

proptest! {
    #[test]
    fn any_bytes_any_chunks_no_panic_same_result(
        dump in stream(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(dump.len() + 1)).collect();
        cuts.sort_unstable();
        for engine in [Engine::Postgresql, Engine::Mariadb] {
            let whole = read(engine, &dump);
            prop_assert_eq!(read_chunks(engine, &dump, &cuts), whole);
        }
    }

    #[test]
    fn real_dumps_any_chunks(
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..16),
    ) {
        for (engine, dump) in [
            (Engine::Postgresql, PG_DUMP.as_bytes()),
            (Engine::Mysql, MYSQL_DUMP.as_bytes()),
        ] {
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(dump.len() + 1)).collect();
            cuts.sort_unstable();
            prop_assert_eq!(read_chunks(engine, dump, &cuts), read(engine, dump));
        }
    }
}

/// MariaDB 10.11's `mariadb-dump` writes `INSERT INTO `t` VALUES` on its own line and one tuple
/// a line (as in a real dump of the e2e cluster); the same rows as one extended insert line
/// give the same table.
#[test]
fn mariadb_one_tuple_a_line_counts_like_one_line() {
    let split = "USE `app`;\n\
LOCK TABLES `backed_up` WRITE;\n\
/*!40000 ALTER TABLE `backed_up` DISABLE KEYS */;\n\
INSERT INTO `backed_up` VALUES\n\
(1,'in the first backup'),\n\
(2,'row 2, with (parens); and a semicolon'),\n\
(3,'row 3');\n\
/*!40000 ALTER TABLE `backed_up` ENABLE KEYS */;\n\
UNLOCK TABLES;\n\
INSERT INTO `other` VALUES (1);\n";
    let joined = "USE `app`;\n\
INSERT INTO `backed_up` VALUES (1,'in the first backup'),(2,'row 2, with (parens); and a semicolon'),(3,'row 3');\n\
INSERT INTO `other` VALUES (1);\n";
    let a = read(Engine::Mariadb, split.as_bytes());
    assert_eq!(a["app.backed_up"].rows, 3);
    assert_eq!(a["app.other"].rows, 1, "the statement after the split one");
    assert_eq!(a, read(Engine::Mariadb, joined.as_bytes()));
    // Every chunk boundary.
    for cut in 0..split.len() {
        let mut stats = DumpStats::new(Engine::Mariadb);
        stats.feed(&split.as_bytes()[..cut]);
        stats.feed(&split.as_bytes()[cut..]);
        assert_eq!(stats.finish(), a, "cut at {cut}");
    }
}
