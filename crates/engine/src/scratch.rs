//! The restore drill's scratch server (`backup verify`): how each engine initializes an empty
//! instance in a directory of its own, starts it on a Unix socket only (no TCP port), prepares
//! it for a restore and stops it. Pure: the runtime runs the programs
//! ([`EngineDef::scratch_server`](crate::EngineDef::scratch_server) answers what to run).
//!
//! The layout inside the drill's directory `dir`: the data directory `dir/data`; the
//! MySQL family's socket `dir/server.sock`, pid file `dir/server.pid` and error log
//! `dir/server.log` (PostgreSQL's socket is in `dir` itself).

use std::path::{Path, PathBuf};

/// A program and its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The program: a name looked up on `PATH`, or a path under the tools directory.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

/// How a scratch server is stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScratchStop {
    /// Send this statement over the socket (the MySQL family's `SHUTDOWN`).
    Statement(&'static str),
    /// Run this program, once the server answers a query (PostgreSQL's `pg_ctl stop`).
    Program(Command),
}

/// What to run for a scratch server in a directory (see the [module](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScratchServer {
    /// Initializes an empty instance (run to its end before the server starts).
    pub init: Command,
    /// The server itself, listening on [`ScratchServer::socket`] only.
    pub server: Command,
    /// Where the tools connect: PostgreSQL's socket directory, the MySQL family's socket file.
    pub socket: String,
    /// Statements to run once the server accepts connections, before the restore: on
    /// PostgreSQL the roles a cluster manages itself, which a restore leaves out but objects
    /// owned by or granted to them need.
    pub setup: Option<String>,
    /// How to stop it.
    pub stop: ScratchStop,
}

/// `name` under `tools`, or `name` alone (looked up on `PATH`).
pub(crate) fn program(tools: Option<&Path>, name: &str) -> PathBuf {
    match tools {
        Some(t) => t.join(name),
        None => PathBuf::from(name),
    }
}

/// The data directory of a scratch server in `dir`.
pub(crate) fn data_dir(dir: &Path) -> PathBuf {
    dir.join("data")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use database_operator_api::Engine;

    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| (*a).to_owned()).collect()
    }

    fn command(program: &str, args: &[&str]) -> Command {
        Command {
            program: PathBuf::from(program),
            args: strings(args),
        }
    }

    /// The commands as `backup verify` ran them before they moved into this crate.
    #[test]
    fn postgresql_initdb_then_postgres_on_a_socket_directory() {
        let s = crate::of(Engine::Postgresql).scratch_server(Path::new("/s/server"), None);
        assert_eq!(
            s,
            ScratchServer {
                init: command(
                    "initdb",
                    &[
                        "--pgdata=/s/server/data",
                        "--username=postgres",
                        "--auth=trust",
                        "--encoding=UTF8",
                        "--locale=C",
                        "--no-sync",
                    ]
                ),
                server: command(
                    "postgres",
                    &[
                        "-D",
                        "/s/server/data",
                        "-c",
                        "listen_addresses=",
                        "-c",
                        "unix_socket_directories=/s/server",
                        "-c",
                        "fsync=off",
                    ]
                ),
                socket: "/s/server".to_owned(),
                setup: Some(
                    "CREATE ROLE \"replicator\"; CREATE ROLE \"database_operator\";".to_owned()
                ),
                stop: ScratchStop::Program(command(
                    "pg_ctl",
                    &["stop", "-m", "fast", "-D", "/s/server/data"]
                )),
            }
        );
    }

    fn mysql_server(binary: &str) -> Command {
        command(
            binary,
            &[
                "--no-defaults",
                "--datadir=/s/server/data",
                "--socket=/s/server/server.sock",
                "--pid-file=/s/server/server.pid",
                "--tmpdir=/s/server",
                "--skip-networking",
                "--skip-log-bin",
                "--log-error=/s/server/server.log",
            ],
        )
    }

    #[test]
    fn mariadb_install_db_then_mariadbd_on_a_socket_file() {
        let s = crate::of(Engine::Mariadb).scratch_server(Path::new("/s/server"), None);
        assert_eq!(
            s,
            ScratchServer {
                init: command(
                    "mariadb-install-db",
                    &[
                        "--no-defaults",
                        "--datadir=/s/server/data",
                        "--auth-root-authentication-method=normal",
                        "--skip-test-db",
                    ]
                ),
                server: mysql_server("mariadbd"),
                socket: "/s/server/server.sock".to_owned(),
                setup: None,
                stop: ScratchStop::Statement("SHUTDOWN"),
            }
        );
    }

    #[test]
    fn mysql_initializes_with_its_server_binary() {
        let s = crate::of(Engine::Mysql).scratch_server(Path::new("/s/server"), None);
        assert_eq!(
            s,
            ScratchServer {
                init: command(
                    "mysqld",
                    &[
                        "--no-defaults",
                        "--initialize-insecure",
                        "--datadir=/s/server/data",
                    ]
                ),
                server: mysql_server("mysqld"),
                socket: "/s/server/server.sock".to_owned(),
                setup: None,
                stop: ScratchStop::Statement("SHUTDOWN"),
            }
        );
    }

    #[test]
    fn programs_come_from_the_tools_directory_when_given() {
        let tools = Path::new("/opt/pg/bin");
        let s = crate::of(Engine::Postgresql).scratch_server(Path::new("/s"), Some(tools));
        assert_eq!(s.init.program, Path::new("/opt/pg/bin/initdb"));
        assert_eq!(s.server.program, Path::new("/opt/pg/bin/postgres"));
        let ScratchStop::Program(stop) = s.stop else {
            panic!("PostgreSQL stops with pg_ctl");
        };
        assert_eq!(stop.program, Path::new("/opt/pg/bin/pg_ctl"));
        for engine in [Engine::Mysql, Engine::Mariadb] {
            let s = crate::of(engine).scratch_server(Path::new("/s"), Some(Path::new("/t")));
            assert!(s.init.program.starts_with("/t"), "{engine}");
            assert!(s.server.program.starts_with("/t"), "{engine}");
        }
    }
}
