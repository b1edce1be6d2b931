use super::*;

#[test]
fn every_engine_has_a_definition_that_names_it() {
    for engine in Engine::ALL {
        assert_eq!(of(engine).engine(), engine);
    }
}

#[test]
fn two_protocols_for_three_engines() {
    let protocols: Vec<Protocol> = Engine::ALL.iter().map(|e| of(*e).protocol()).collect();
    assert_eq!(
        protocols,
        [Protocol::Mysql, Protocol::Postgres, Protocol::Mysql],
        "in the order of Engine::ALL"
    );
}

#[test]
fn the_facts_the_rendered_objects_and_the_backups_rely_on() {
    let table: Vec<String> = Engine::ALL
        .iter()
        .map(|e| {
            let d = of(*e);
            format!(
                "{e}: {} {} {} {} {} {} {} {} {} {}",
                d.image_repository(),
                d.container_name(),
                d.port(),
                d.data_mount_path(),
                d.data_dir(),
                d.password_env(),
                d.socket_dir(),
                d.os_user_id(),
                d.dump_tool(),
                d.client_tool(),
            )
        })
        .collect();
    assert_eq!(
        table,
        [
            "mysql: mysql mysql 3306 /var/lib/mysql /var/lib/mysql/data MYSQL_ROOT_PASSWORD \
             /var/run/mysqld 999 mysqldump mysql",
            "postgresql: postgres postgresql 5432 /var/lib/postgresql/data \
             /var/lib/postgresql/data/pgdata POSTGRES_PASSWORD /var/run/postgresql 999 \
             pg_dumpall psql",
            "mariadb: mariadb mariadb 3306 /var/lib/mysql /var/lib/mysql/data \
             MARIADB_ROOT_PASSWORD /var/run/mysqld 999 mariadb-dump mariadb",
        ]
    );
}

#[test]
fn the_os_user_and_the_server_program() {
    let table: Vec<String> = Engine::ALL
        .iter()
        .map(|e| {
            let d = of(*e);
            let (command, _) = d.server_command("/etc/c", "/run/r");
            assert_eq!(command, [d.server_program()], "{e}");
            format!("{e}: {} {}", d.os_user(), d.server_program())
        })
        .collect();
    assert_eq!(
        table,
        [
            "mysql: mysql mysqld",
            "postgresql: postgres postgres",
            "mariadb: mysql mariadbd"
        ]
    );
}

#[test]
fn superusers_and_their_accounts() {
    for engine in Engine::ALL {
        let d = of(engine);
        assert!(
            d.superuser_accounts()
                .iter()
                .all(|a| a.user == d.superuser()),
            "{engine}: every superuser account is the superuser's"
        );
        // Only PostgreSQL has no host part; only MariaDB's root@localhost keeps unix_socket.
        assert_eq!(
            d.superuser_accounts().iter().all(|a| a.host.is_none()),
            d.protocol() == Protocol::Postgres,
            "{engine}"
        );
    }
    assert_eq!(of(Engine::Postgresql).superuser(), "postgres");
    assert_eq!(of(Engine::Mysql).superuser(), "root");
    let socket: Vec<bool> = Engine::ALL
        .iter()
        .flat_map(|e| {
            of(*e)
                .superuser_accounts()
                .iter()
                .map(|a| a.keep_unix_socket)
        })
        .collect();
    assert_eq!(socket, [false, false, false, true, false]);
    let dual: Vec<bool> = Engine::ALL
        .iter()
        .map(|e| of(*e).has_dual_passwords())
        .collect();
    assert_eq!(dual, [true, false, false]);
}

#[test]
fn each_engine_has_its_own_init_script_on_the_shared_prelude() {
    let prelude = include_str!("scripts/member-common.sh");
    let mysql_common = include_str!("scripts/mysql-common.sh");
    let scripts: Vec<&str> = Engine::ALL.iter().map(|e| of(*e).init_script()).collect();
    for (engine, script) in Engine::ALL.iter().zip(&scripts) {
        assert!(script.starts_with(prelude), "{engine}");
        assert_eq!(
            script.contains(mysql_common),
            of(*engine).protocol() == Protocol::Mysql,
            "{engine}"
        );
    }
    assert_eq!(scripts[0], scripts::MYSQL_INIT);
    assert_eq!(scripts[1], scripts::POSTGRESQL_INIT);
    assert_eq!(scripts[2], scripts::MARIADB_INIT);
}

#[test]
fn how_each_engine_rejoins_and_replicates() {
    // (rewinds diverged members, follows by restart, switches semi-sync), in Engine::ALL order.
    let policies: Vec<(bool, bool, bool)> = Engine::ALL
        .iter()
        .map(|e| {
            let d = of(*e);
            (
                d.rewinds_diverged_members(),
                d.follows_by_restart(),
                d.switches_semi_sync(),
            )
        })
        .collect();
    assert_eq!(
        policies,
        [
            (false, false, true),
            (true, true, false),
            (false, false, true)
        ]
    );
}

#[test]
fn configuration_files_per_engine() {
    let inputs = config::ConfigInputs {
        namespace: "shop",
        name: "orders",
        replicas: 3,
        memory_bytes: 1 << 30,
        storage_bytes: 1 << 30,
        sync_replication: true,
        primary_host: "orders.shop.svc",
        config_dir: "/etc/database-operator",
        run_dir: "/run/database-operator",
        archive: None,
        tls_dir: None,
        allow_plaintext: false,
    };
    let files: Vec<Vec<&str>> = Engine::ALL
        .iter()
        .map(|e| {
            of(*e)
                .config_files(&inputs)
                .iter()
                .map(|(k, _)| *k)
                .collect()
        })
        .collect();
    assert_eq!(
        files,
        [
            vec!["my.cnf"],
            vec!["postgresql.conf", "pg_hba.conf"],
            vec!["my.cnf"]
        ]
    );
    let postgresql = &of(Engine::Postgresql).config_files(&inputs)[0].1;
    assert!(
        postgresql.contains("shared_buffers = 256MB\n"),
        "{postgresql}"
    );
    assert!(
        postgresql.contains("\"orders-0\", \"orders-1\""),
        "{postgresql}"
    );
    assert!(
        postgresql.contains("wal_keep_size = 128MB\nmax_slot_wal_keep_size = 256MB\n"),
        "{postgresql}"
    );
    let mariadb = &of(Engine::Mariadb).config_files(&inputs)[0].1;
    assert!(
        mariadb.contains("innodb_buffer_pool_size = 512M\n"),
        "{mariadb}"
    );
    assert!(
        mariadb.contains("rpl_semi_sync_slave_enabled = ON"),
        "{mariadb}"
    );
    assert!(!postgresql.contains("archive_"), "{postgresql}");
    let archiving = config::ConfigInputs {
        archive: Some(config::Archive {
            program: "/operator/database-operator",
            timeout_seconds: 45,
        }),
        ..inputs
    };
    let postgresql = &of(Engine::Postgresql).config_files(&archiving)[0].1;
    assert!(
        postgresql.contains(
            "archive_mode = on\narchive_command = '/operator/database-operator backup wal-push %p %f'\narchive_timeout = 45s\n"
        ),
        "{postgresql}"
    );
    assert!(!postgresql.contains("ssl"), "{postgresql}");
    let with_tls = config::ConfigInputs {
        tls_dir: Some("/etc/database-operator/tls"),
        ..inputs
    };
    let files = of(Engine::Postgresql).config_files(&with_tls);
    let postgresql = &files[0].1;
    assert!(
        postgresql.contains("include_if_exists = '/run/database-operator/tls.conf'\n"),
        "{postgresql}"
    );
    assert_eq!(files[2].0, "tls.conf");
    assert!(
        files[2]
            .1
            .contains("ssl = on\nssl_cert_file = '/etc/database-operator/tls/tls.crt'\n"),
        "{}",
        files[2].1
    );
    // Only a server with TLS reads the rules that refuse plain connections.
    assert!(
        files[2]
            .1
            .contains("hba_file = '/etc/database-operator/pg_hba_tls.conf'\n"),
        "{}",
        files[2].1
    );
    assert_eq!(files[3].0, "pg_hba_tls.conf");
    let hba = &files[3].1;
    assert!(
        hba.ends_with("hostssl    all          all                all      scram-sha-256\nhostnossl  all          all                all      reject\n"),
        "{hba}"
    );
    assert!(hba.contains("hostnossl  replication  all "), "{hba}");
    assert!(
        !hba.lines()
            .any(|l| l.starts_with("host ") && l.contains("scram")),
        "{hba}"
    );
    let allowing = config::ConfigInputs {
        allow_plaintext: true,
        ..with_tls
    };
    let files = of(Engine::Postgresql).config_files(&allowing);
    let hba = &files[3].1;
    assert!(
        hba.contains("hostnossl  all          postgres           all      reject\n")
            && hba.contains("hostnossl  all          database_operator  all      reject\n")
            && hba.ends_with("host       all          all                all      scram-sha-256\n"),
        "{hba}"
    );

    for engine in [Engine::Mysql, Engine::Mariadb] {
        let cnf = &of(engine).config_files(&with_tls)[0].1;
        assert!(
            cnf.contains("ssl_ca = /etc/database-operator/tls/ca.crt\nssl_cert = /etc/database-operator/tls/tls.crt\nssl_key = /etc/database-operator/tls/tls.key\n"),
            "{cnf}"
        );
        assert!(cnf.contains("\nrequire_secure_transport = ON\n"), "{cnf}");
        let allowing = &of(engine).config_files(&allowing)[0].1;
        assert!(
            allowing.contains("ssl_cert = ") && !allowing.contains("require_secure_transport"),
            "{allowing}"
        );
        let plain = &of(engine).config_files(&inputs)[0].1;
        assert!(
            !plain.contains("ssl_") && !plain.contains("require_secure"),
            "{plain}"
        );
    }
    let unsync = config::ConfigInputs {
        sync_replication: false,
        ..inputs
    };
    let mysql = &of(Engine::Mysql).config_files(&unsync)[0].1;
    assert!(
        mysql.contains("gtid_mode = ON") && !mysql.contains("semi_sync"),
        "{mysql}"
    );
}

#[test]
fn the_pod_runs_each_engine_s_own_server_and_probe() {
    let programs: Vec<(String, String)> = Engine::ALL
        .iter()
        .map(|e| {
            let d = of(*e);
            (
                d.server_command("/etc/c", "/run/r").0.join(" "),
                d.probe_command()[0].clone(),
            )
        })
        .collect();
    assert_eq!(
        programs,
        [
            ("mysqld".to_owned(), "mysqladmin".to_owned()),
            ("postgres".to_owned(), "pg_isready".to_owned()),
            ("mariadbd".to_owned(), "mariadb-admin".to_owned()),
        ]
    );
    let (_, args) = of(Engine::Mariadb).server_command("/etc/c", "/run/r");
    assert_eq!(args[0], "--defaults-file=/run/r/my.cnf");
    let (_, args) = of(Engine::Postgresql).server_command("/etc/c", "/run/r");
    assert_eq!(args[1], "config_file=/etc/c/postgresql.conf");
    assert_eq!(
        of(Engine::Mysql).init_env("h.svc"),
        [("HEADLESS_DOMAIN", "h.svc".to_owned())]
    );
    assert_eq!(of(Engine::Mysql).server_env(), []);
    assert_eq!(
        of(Engine::Postgresql).server_env(),
        [("PGDATA", "/var/lib/postgresql/data/pgdata".to_owned())]
    );
}

#[test]
fn wal_retention_is_bounded_by_the_volume() {
    const GIB: i128 = 1 << 30;
    assert_eq!(config::wal_retention_mib(GIB), (128, 256));
    assert_eq!(config::wal_retention_mib(10 * GIB), (1024, 2560));
    assert_eq!(config::wal_retention_mib(100 * GIB), (1024, 25600));
    // A tiny volume still keeps four segments each.
    assert_eq!(config::wal_retention_mib(100 << 20), (64, 64));
}

/// The init scripts grant the operator's account exactly the engine's list (no `ALL`, no
/// `GRANT OPTION`); PostgreSQL's stays a superuser.
#[test]
fn init_scripts_grant_the_operator_its_privileges_only() {
    for engine in [Engine::Mysql, Engine::Mariadb] {
        let def = of(engine);
        let privileges = def.operator_privileges().expect("a list");
        let script = def.init_script();
        let grant = format!("GRANT {privileges} ON *.* TO $admin_user@'%';");
        assert!(
            script.contains(&grant),
            "{engine:?}: no `{grant}` in init.sh"
        );
        let admin_grants: Vec<&str> = script
            .lines()
            .filter(|l| l.starts_with("GRANT") && l.contains("$admin_user"))
            .collect();
        assert_eq!(admin_grants, [grant.as_str()], "{engine:?}");
        for never in [
            "ALL", "INSERT", "UPDATE", "DELETE", "DROP", "FILE", "SHUTDOWN", "SUPER,",
        ] {
            assert!(
                !privileges
                    .split(", ")
                    .any(|p| p == never.trim_end_matches(',')),
                "{engine:?}: {never}"
            );
        }
    }
    assert_eq!(of(Engine::Postgresql).operator_privileges(), None);
}
