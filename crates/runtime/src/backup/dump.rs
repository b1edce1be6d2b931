//! The dump tool of each engine and its arguments (pure), and the password file it reads.
//!
//! The password never appears in argv or in the environment of the dump: PostgreSQL reads it
//! from a `PGPASSFILE`, MySQL and MariaDB from a `--defaults-extra-file`; both are written
//! with mode 0600 into a private directory and removed when the dump ends.

use std::path::{Path, PathBuf};

use database_operator_api::Engine;
use database_operator_engine::tools::{ToolArgs, ToolTarget};

use crate::database::statements::Secret;

/// Where and as whom the dump connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpTarget {
    /// The engine.
    pub engine: Engine,
    /// Host to dump from (a Service name, a pod address).
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The user (`postgres`, `root`).
    pub user: String,
    /// The authorities to check the server's certificate with, over TLS, for `host` (the
    /// cluster's `<name>-ca`, mounted in the backup Job); `None`: the engine's default.
    pub tls_ca: Option<PathBuf>,
}

impl DumpTarget {
    /// The default port of `engine`.
    pub fn default_port(engine: Engine) -> u16 {
        database_operator_engine::of(engine).port()
    }

    /// The superuser the operator dumps as.
    pub fn default_user(engine: Engine) -> &'static str {
        database_operator_engine::of(engine).superuser()
    }

    /// Where the tool connects, for the engine crate.
    pub fn tool_target(&self) -> ToolTarget<'_> {
        ToolTarget {
            host: &self.host,
            port: self.port,
            user: &self.user,
        }
    }
}

/// A dump to run: program, arguments and extra environment (no secret in any of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpCommand {
    /// The program (a path when a tool directory was given).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

/// The name of `engine`'s dump tool.
pub fn tool(engine: Engine) -> &'static str {
    database_operator_engine::of(engine).dump_tool()
}

/// The dump of the whole server `target`, as SQL on stdout. `tools` is the directory of the
/// tool (`None`: found on `PATH`); `password_file` the file [`PasswordFile`] wrote. The
/// arguments are the engine's ([`EngineDef::dump_args`](database_operator_engine::EngineDef::dump_args)).
pub fn dump_command(
    target: &DumpTarget,
    tools: Option<&Path>,
    password_file: &Path,
) -> DumpCommand {
    let name = tool(target.engine);
    let program = match tools {
        Some(dir) => dir.join(name),
        None => PathBuf::from(name),
    };
    let engine = database_operator_engine::of(target.engine);
    let ToolArgs { mut args, mut env } =
        engine.dump_args(target.tool_target(), &password_file.display().to_string());
    if let Some(ca) = &target.tls_ca {
        let tls = engine.tls_args(&ca.display().to_string());
        // Options before the dump's own (a MySQL option file comes first: `--defaults-extra-file`).
        let at = usize::from(args.first().is_some_and(|a| a.starts_with("--defaults")));
        args.splice(at..at, tls.args);
        env.extend(tls.env);
    }
    DumpCommand { program, args, env }
}

/// The content of the password file for `target`
/// ([`EngineDef::password_file`](database_operator_engine::EngineDef::password_file)).
pub fn password_file_content(target: &DumpTarget, password: &Secret) -> Secret {
    database_operator_engine::of(target.engine).password_file(target.tool_target(), password)
}

/// A private directory holding the password file; removed on drop.
#[derive(Debug)]
pub struct PasswordFile {
    dir: PathBuf,
    path: PathBuf,
}

impl PasswordFile {
    /// Writes `content` to a new 0600 file in a new 0700 directory under `parent`.
    pub fn write(parent: &Path, content: &Secret) -> std::io::Result<PasswordFile> {
        use std::io::Write as _;
        use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
        let unique = format!(
            "database-operator-backup-{}-{}",
            std::process::id(),
            jiff::Timestamp::now().as_nanosecond()
        );
        let dir = parent.join(unique);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let path = dir.join("password");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(content.expose().as_bytes())?;
        Ok(PasswordFile { dir, path })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PasswordFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(engine: Engine) -> DumpTarget {
        DumpTarget {
            engine,
            host: "orders-replicas".to_owned(),
            port: DumpTarget::default_port(engine),
            user: DumpTarget::default_user(engine).to_owned(),
            tls_ca: None,
        }
    }

    #[test]
    fn dump_commands() {
        for engine in Engine::ALL {
            let cmd = dump_command(
                &target(engine),
                Some(Path::new("/dbtools")),
                Path::new("/tmp/x/password"),
            );
            insta::assert_debug_snapshot!(format!("dump_{engine}"), cmd);
        }
        let cmd = dump_command(&target(Engine::Mysql), None, Path::new("/p"));
        assert_eq!(cmd.program, PathBuf::from("mysqldump"));
    }

    #[test]
    fn with_the_clusters_authority_the_dump_checks_the_server() {
        let ca = Path::new("/etc/database-operator-ca/ca.crt");
        let checked = |engine| {
            let target = DumpTarget {
                tls_ca: Some(ca.to_owned()),
                ..target(engine)
            };
            dump_command(&target, None, Path::new("/p"))
        };
        let pg = checked(Engine::Postgresql);
        assert!(
            pg.env
                .contains(&("PGSSLMODE".to_owned(), "verify-full".to_owned()))
        );
        assert!(pg.env.contains(&(
            "PGSSLROOTCERT".to_owned(),
            "/etc/database-operator-ca/ca.crt".to_owned()
        )));
        let mysql = checked(Engine::Mysql);
        assert_eq!(
            mysql.args[..3],
            [
                "--defaults-extra-file=/p",
                "--ssl-mode=VERIFY_IDENTITY",
                "--ssl-ca=/etc/database-operator-ca/ca.crt"
            ],
            "the option file first, as the client requires"
        );
        let mariadb = checked(Engine::Mariadb);
        for arg in [
            "--ssl",
            "--ssl-verify-server-cert",
            "--ssl-ca=/etc/database-operator-ca/ca.crt",
        ] {
            assert!(
                mariadb.args.iter().any(|a| a == arg),
                "{arg}: {:?}",
                mariadb.args
            );
        }
        // Without it, nothing about TLS.
        let plain = dump_command(&target(Engine::Mariadb), None, Path::new("/p"));
        assert!(
            plain.args.iter().all(|a| !a.starts_with("--ssl")),
            "{:?}",
            plain.args
        );
    }

    #[test]
    fn the_password_is_never_in_argv_or_env() {
        let secret = Secret::new("s3cr:et\"\\");
        for engine in Engine::ALL {
            let cmd = dump_command(&target(engine), None, Path::new("/tmp/p"));
            let all: Vec<&String> = cmd
                .args
                .iter()
                .chain(cmd.env.iter().flat_map(|(k, v)| [k, v]))
                .collect();
            assert!(all.iter().all(|a| !a.contains("s3cr")), "{engine}");
            let content = password_file_content(&target(engine), &secret);
            assert!(content.expose().contains("s3cr"));
        }
    }

    #[test]
    fn password_files_escape() {
        let secret = Secret::new("a:b\\c\"d");
        assert_eq!(
            password_file_content(&target(Engine::Postgresql), &secret).expose(),
            "orders-replicas:5432:*:postgres:a\\:b\\\\c\"d\n"
        );
        assert_eq!(
            password_file_content(&target(Engine::Mariadb), &secret).expose(),
            "[client]\npassword=\"a:b\\\\c\\\"d\"\n"
        );
    }

    #[test]
    fn password_file_is_private_and_removed() {
        use std::os::unix::fs::PermissionsExt as _;
        let parent = std::env::temp_dir();
        let file = PasswordFile::write(&parent, &Secret::new("pw")).unwrap();
        let path = file.path().to_owned();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "pw");
        drop(file);
        assert!(!path.exists());
    }
}
