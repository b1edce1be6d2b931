use super::*;

const DIALECTS: [Engine; 3] = [Engine::Postgresql, Engine::Mysql, Engine::Mariadb];

fn show(statements: &[Statement]) -> String {
    if statements.is_empty() {
        return "(nothing)\n".to_owned();
    }
    statements.iter().map(|s| format!("{s};\n")).collect()
}

fn source(dialect: Engine) -> ReplicationSource {
    ReplicationSource {
        host: "orders-0.orders-headless.shop.svc".to_owned(),
        port: if dialect == Engine::Postgresql {
            5432
        } else {
            3306
        },
        user: "replication".to_owned(),
        password: (dialect != Engine::Postgresql).then(|| Secret::new("s3cr'et\\pw")),
        passfile: (dialect == Engine::Postgresql).then(|| "/var/lib/postgresql/.pgpass".to_owned()),
        application_name: (dialect == Engine::Postgresql).then(|| "orders-1".to_owned()),
        tls: SourceTls::Plain,
    }
}

#[test]
fn every_statement_per_dialect() {
    for d in DIALECTS {
        let app = Account::any_host("app");
        let pw = Secret::new(match d {
            Engine::Postgresql => "SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy",
            _ => "n3w'pass\\word",
        });
        let text = [
            ("probe", probe(d)),
            (
                "timeline_history(2)",
                if d == Engine::Postgresql {
                    vec![timeline_history(2)]
                } else {
                    Vec::new()
                },
            ),
            ("fence", fence(d)),
            ("quarantine", quarantine(d)),
            ("stop_receiving", stop_receiving(d)),
            (
                "wait_applied",
                wait_applied(
                    d,
                    match d {
                        Engine::Mysql => "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42",
                        _ => "0-1-42",
                    },
                    30,
                ),
            ),
            ("promote", promote(d, 60)),
            ("follow", follow(d, &source(d)).unwrap()),
            (
                "follow(tls)",
                follow(
                    d,
                    &ReplicationSource {
                        tls: SourceTls::Checked {
                            ca_file: "/etc/database-operator-tls/ca.crt".to_owned(),
                        },
                        ..source(d)
                    },
                )
                .unwrap(),
            ),
            (
                "follow(encrypted)",
                follow(
                    d,
                    &ReplicationSource {
                        tls: SourceTls::Encrypted,
                        ..source(d)
                    },
                )
                .unwrap(),
            ),
            ("reload_tls", reload_tls(d)),
            ("set_semi_sync(on)", set_semi_sync(d, true)),
            ("set_semi_sync(off)", set_semi_sync(d, false)),
            (
                "keep_member_slots",
                keep_member_slots(d, &["member_0".to_owned(), "member_2".to_owned()]),
            ),
            ("set_password", set_password(d, &app, &pw, true).unwrap()),
            (
                "set_password(socket, no retain)",
                set_password(
                    d,
                    &Account {
                        unix_socket: true,
                        ..Account::at("root", "localhost")
                    },
                    &pw,
                    false,
                )
                .unwrap(),
            ),
            (
                "discard_old_password",
                discard_old_password(d, &app).unwrap(),
            ),
        ]
        .iter()
        .map(|(name, s)| format!("-- {name}\n{}", show(s)))
        .collect::<Vec<_>>()
        .join("\n");
        insta::assert_snapshot!(d.as_str(), text);
    }
}

#[test]
fn secrets_never_show_in_debug_or_display() {
    for d in DIALECTS {
        let pw = Secret::new("hunter2-very-secret");
        let mut all = set_password(d, &Account::any_host("app"), &pw, true).unwrap();
        let mut src = source(d);
        if d != Engine::Postgresql {
            src.password = Some(pw.clone());
            all.extend(follow(d, &src).unwrap());
        }
        for s in &all {
            for text in [format!("{s}"), format!("{s:?}"), format!("{:?}", s.params)] {
                assert!(!text.contains("hunter2"), "{d:?} leaks: {text}");
            }
        }
        assert!(
            all.iter()
                .any(|s| s.inline_sql().contains("hunter2-very-secret"))
        );
    }
}

#[test]
fn inline_values_are_quoted_so_they_cannot_end_the_literal() {
    let pw = Secret::new("a'b\\c'; DROP USER root; --");
    let my = set_password(Engine::Mysql, &Account::any_host("app"), &pw, true).unwrap();
    assert_eq!(
        my[0].inline_sql(),
        r"ALTER USER 'app'@'%' IDENTIFIED BY 'a''b\\c''; DROP USER root; --' RETAIN CURRENT PASSWORD"
    );
    let pg = set_password(Engine::Postgresql, &Account::any_host("app"), &pw, true).unwrap();
    assert!(pg.iter().all(|s| !s.sql.contains("DROP")));
    assert_eq!(pg[0].params, [Value::Secret(pw.clone())]);
    assert_eq!(pg[0].binding, Binding::Parameters);
    let mut conninfo = source(Engine::Postgresql);
    conninfo.application_name = Some("it's".to_owned());
    assert!(
        follow(Engine::Postgresql, &conninfo).unwrap()[0]
            .inline_sql()
            .contains(r"application_name=''it\\''s''")
    );
    let f = follow(Engine::Postgresql, &source(Engine::Postgresql)).unwrap();
    assert_eq!(
        f[0].inline_sql(),
        "ALTER SYSTEM SET primary_conninfo = E'host=''orders-0.orders-headless.shop.svc'' port=5432 \
         user=''replication'' passfile=''/var/lib/postgresql/.pgpass'' application_name=''orders-1'''"
    );
}

#[test]
fn names_that_would_need_quoting_are_refused() {
    for bad in ["", "a'b", "a b", "1abc", "x\"y", "root@%", &"u".repeat(33)] {
        assert!(
            matches!(
                set_password(
                    Engine::Mysql,
                    &Account::any_host(bad),
                    &Secret::new("x"),
                    true
                ),
                Err(StatementError::InvalidName { what: "user", .. })
            ),
            "{bad:?}"
        );
    }
    let mut src = source(Engine::Mariadb);
    src.host = "evil' , MASTER_HOST='x".to_owned();
    assert!(matches!(
        follow(Engine::Mariadb, &src),
        Err(StatementError::InvalidName {
            what: "source host",
            ..
        })
    ));
    let mut acct = Account::any_host("app");
    acct.host = "10.0.0.%".to_owned();
    assert!(set_password(Engine::Mysql, &acct, &Secret::new("x"), true).is_ok());
    acct.host = "a'b".to_owned();
    assert!(set_password(Engine::Mysql, &acct, &Secret::new("x"), true).is_err());
}

#[test]
fn postgresql_follow_refuses_a_clear_text_password() {
    let mut src = source(Engine::Postgresql);
    src.password = Some(Secret::new("x"));
    assert!(matches!(
        follow(Engine::Postgresql, &src),
        Err(StatementError::NotSupported(_))
    ));
    let mut my = source(Engine::Mysql);
    my.password = None;
    assert!(matches!(
        follow(Engine::Mysql, &my),
        Err(StatementError::NotSupported(_))
    ));
}

#[test]
fn session_limits_and_replica_status_words_per_engine() {
    use std::time::Duration;
    let limits: Vec<String> = DIALECTS
        .iter()
        .flat_map(|d| {
            [Duration::ZERO, Duration::from_millis(2500)].map(|l| session_time_limit(*d, l))
        })
        .collect();
    assert_eq!(
        limits,
        [
            "SET statement_timeout = 0",
            "SET statement_timeout = 2500",
            "SET SESSION max_execution_time = 0",
            "SET SESSION max_execution_time = 2500",
            "SET SESSION max_statement_time = 0",
            "SET SESSION max_statement_time = 2.5",
        ]
    );
    assert_eq!(replica_status_words(Engine::Postgresql), None);
    assert_eq!(
        replica_status_words(Engine::Mysql),
        Some(("Replica", "Source"))
    );
    assert_eq!(
        replica_status_words(Engine::Mariadb),
        Some(("Slave", "Master"))
    );
}

#[test]
fn the_probe_rows_read_by_engine() {
    let reading = |e: Engine| crate::of(e).probe_reading();
    assert_eq!(reading(Engine::Postgresql), None);
    let mysql = reading(Engine::Mysql).expect("MySQL reads its probe rows");
    let mariadb = reading(Engine::Mariadb).expect("MariaDB reads its probe rows");
    // The columns of the variables row, in the order `probe` selects them.
    assert_eq!(
        (
            mysql.server_id,
            mysql.read_only,
            mysql.position,
            mysql.version
        ),
        (0, 2, 4, 5)
    );
    assert_eq!(
        (
            mariadb.server_id,
            mariadb.read_only,
            mariadb.position,
            mariadb.version
        ),
        (0, 1, 2, 4)
    );
    assert_eq!(mysql.received_column, "Retrieved_Gtid_Set");
    assert_eq!(mariadb.received_column, "Gtid_IO_Pos");
    // MySQL prints a long GTID set over lines; MariaDB's position is taken as it is.
    assert_eq!(mysql.position("a:1-5,\nb:1-3".to_owned()), "a:1-5,b:1-3");
    assert_eq!(mariadb.position("0-1-5, 1-2-3".to_owned()), "0-1-5, 1-2-3");
}

#[test]
fn received_gtids_include_what_was_retrieved_but_not_applied() {
    let mysql = crate::of(Engine::Mysql).probe_reading().unwrap();
    let mariadb = crate::of(Engine::Mariadb).probe_reading().unwrap();
    let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    assert_eq!(
        mysql
            .received_position(&format!("{u}:1-5"), &format!("{u}:3-9"))
            .unwrap(),
        format!("{u}:1-9")
    );
    assert_eq!(mysql.received_position("garbage", ""), None);
    assert_eq!(
        mariadb.received_position("0-1-5,1-2-3", "0-1-9").unwrap(),
        "0-1-9,1-2-3"
    );
    assert_eq!(mariadb.received_position("0-1-5", "").unwrap(), "0-1-5");
    assert_eq!(
        mariadb.received_position("0-1-9", "0-1-5").unwrap(),
        "0-1-9"
    );
}

#[test]
fn an_authority_path_that_would_need_quoting_is_refused() {
    for d in Engine::ALL {
        for bad in [
            "ca.crt",
            "/etc/x'; DROP TABLE t; --",
            "/etc/../ca.crt",
            "/etc/ca crt",
        ] {
            let source = ReplicationSource {
                tls: SourceTls::Checked {
                    ca_file: bad.to_owned(),
                },
                ..source(d)
            };
            assert!(
                matches!(
                    follow(d, &source),
                    Err(StatementError::InvalidName {
                        what: "authority file",
                        ..
                    })
                ),
                "{d:?} {bad:?}"
            );
        }
        let good = ReplicationSource {
            tls: SourceTls::Checked {
                ca_file: "/etc/database-operator-tls/ca.crt".to_owned(),
            },
            ..source(d)
        };
        let sql: Vec<String> = follow(d, &good)
            .unwrap()
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(
            sql.iter()
                .any(|s| s.contains("/etc/database-operator-tls/ca.crt")),
            "{sql:?}"
        );
    }
}
