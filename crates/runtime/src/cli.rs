//! The `database-operator` command line: parses the arguments and dispatches to the
//! subcommand (`run` is [`crate::operator`], the composition root, which owns its flags).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use k8s_openapi::jiff::Timestamp;

use crate::memory;
use crate::offline;
use crate::operator::{self, RunArgs};
use crate::telemetry::{self, LogFormat};

/// Runs MySQL and PostgreSQL clusters on Kubernetes from one `DatabaseCluster` resource.
///
/// Without a subcommand it runs the operator (`run`).
#[derive(Debug, Parser)]
#[command(
    name = "database-operator",
    version,
    args_conflicts_with_subcommands = true,
    propagate_version = true
)]
pub struct Cli {
    /// What to do (default: run).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Operator flags, when no subcommand is given.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands.
// Parsed once per process: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: watch DatabaseClusters and keep their objects as the spec says.
    Run(RunArgs),
    /// Print, as multi-document YAML, every object the operator would create for the clusters in
    /// FILE and the status they would start with (no cluster needed).
    Render(RenderArgs),
    /// Check the DatabaseClusters in FILE with the admission webhook's rules; exit 1 on errors.
    Validate(ValidateArgs),
    /// Print the CustomResourceDefinition YAML.
    Crd,
    /// Backups: take one (`run`), list them, delete a cluster's prefix.
    #[command(subcommand)]
    Backup(crate::backup::BackupCommand),
    /// Copy this binary to DEST (mode 0755): what the backup Job's init container does, so the
    /// backup container runs it inside the engine's image (the operator image has no shell).
    CopyBinary(CopyBinaryArgs),
    /// The sidecar of `spec.failover.nodeLoss: SelfFence` members: renews the primary Lease
    /// while its pod holds it, and makes the local server read-only when it cannot. Reads its
    /// settings from the environment the StatefulSet sets.
    MemberAgent,
}

/// Flags of `copy-binary`.
#[derive(Debug, Args)]
pub struct CopyBinaryArgs {
    /// Where to write the copy (its directory must exist).
    #[arg(value_name = "DEST")]
    pub dest: PathBuf,
}

/// Flags of `render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// File with one or more DatabaseClusters (other documents are skipped); `-` for stdin.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,

    /// The time to render at, RFC 3339 (default: now); fixes the next backup time.
    #[arg(long, value_name = "TIME")]
    pub now: Option<Timestamp>,

    /// The flags that shape what is rendered, as `run` takes them.
    #[command(flatten)]
    pub render: crate::operator::RenderFlags,
}

/// Flags of `validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// File with one or more DatabaseClusters; `-` for stdin.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: PathBuf,

    /// The stored version, to check FILE as an update of it (immutability, no shrink, ...).
    #[arg(long, value_name = "FILE")]
    pub old: Option<PathBuf>,
}

fn read_input(path: &PathBuf) -> Result<(String, String), String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| format!("reading stdin: {e}"))?;
        return Ok((text, "-".to_owned()));
    }
    let name = path.display().to_string();
    std::fs::read_to_string(path)
        .map(|t| (t, name.clone()))
        .map_err(|e| format!("reading {name}: {e}"))
}

/// The text and name of `path`, or `None` after writing the error to `err`.
fn read_or_report(path: &PathBuf, err: &mut dyn std::io::Write) -> Option<(String, String)> {
    match read_input(path) {
        Ok(v) => Some(v),
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            None
        }
    }
}

/// `render`: writes the YAML to `out`, warnings and errors to `err`; returns the exit code.
pub fn render_command(
    args: &RenderArgs,
    now: Timestamp,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> u8 {
    let Some((text, name)) = read_or_report(&args.file, err) else {
        return 1;
    };
    if let Err(e) = args.render.install_versions() {
        let _ = writeln!(err, "error: {e}");
        return 1;
    }
    let config = args.render.operator_config();
    match offline::render(&text, &name, args.now.unwrap_or(now), &config) {
        Ok(rendered) => {
            for w in &rendered.warnings {
                let _ = writeln!(err, "warning: {w}");
            }
            if out.write_all(rendered.yaml.as_bytes()).is_err() {
                return 1;
            }
            0
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            1
        }
    }
}

/// `validate`: valid clusters on `out`, warnings and errors on `err`; 1 when any error.
pub fn validate_command(
    args: &ValidateArgs,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> u8 {
    let Some((text, name)) = read_or_report(&args.file, err) else {
        return 1;
    };
    let old = match &args.old {
        Some(path) => match read_input(path) {
            Ok(v) => Some(v),
            Err(e) => {
                let _ = writeln!(err, "error: {e}");
                return 1;
            }
        },
        None => None,
    };
    let result = offline::validate(
        &text,
        &name,
        old.as_ref().map(|(t, n)| (t.as_str(), n.as_str())),
    );
    match result {
        Ok(v) => {
            for line in &v.valid {
                let _ = writeln!(out, "{line}");
            }
            for w in &v.warnings {
                let _ = writeln!(err, "warning: {w}");
            }
            for e in &v.errors {
                let _ = writeln!(err, "error: {e}");
            }
            u8::from(!v.errors.is_empty())
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            1
        }
    }
}

/// The binary's entry point.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Run(cli.run));
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    match command {
        Command::Render(args) => {
            telemetry::init(LogFormat::Text, "warn");
            // The CLI edge reads the clock; the core never does.
            ExitCode::from(render_command(&args, Timestamp::now(), &mut out, &mut err))
        }
        Command::Validate(args) => {
            telemetry::init(LogFormat::Text, "warn");
            ExitCode::from(validate_command(&args, &mut out, &mut err))
        }
        // Long-running commands log from threads of their own: the locks must go first (a
        // blocking task of `backup restore` logging while this thread held stderr hung).
        Command::Backup(command) => {
            drop(out);
            drop(err);
            crate::backup::main(command)
        }
        Command::MemberAgent => {
            drop(out);
            drop(err);
            crate::member_agent::main()
        }
        Command::CopyBinary(args) => match crate::backup::copy_binary(&args.dest) {
            Ok(bytes) => {
                let _ = writeln!(out, "copied {bytes} bytes to {}", args.dest.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                let _ = writeln!(
                    err,
                    "error: copying this binary to {}: {e}",
                    args.dest.display()
                );
                ExitCode::FAILURE
            }
        },
        Command::Crd => {
            if out.write_all(offline::crd().as_bytes()).is_err() {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Command::Run(args) => {
            drop(out);
            drop(err);
            telemetry::init(args.log_format, "info");
            match memory::disable_transparent_huge_pages() {
                Ok(true) => tracing::debug!("transparent huge pages disabled for this process"),
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    error = %e,
                    "could not disable transparent huge pages; the resident set may be larger"
                ),
            }
            crate::async_runtime::run_command(true, "operator stopped", operator::run(args))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::time::Duration;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_flags_default_and_parse() {
        let cli = Cli::try_parse_from(["database-operator"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.run.concurrency, 5);
        assert_eq!(cli.run.resync, Duration::from_secs(30));
        assert_eq!(cli.run.metrics_addr, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(cli.run.health_addr, "0.0.0.0:8081".parse().unwrap());
        assert_eq!(cli.run.leader_elect, None);
        assert_eq!(cli.run.webhook_addr, "0.0.0.0:9443".parse().unwrap());

        let cli = Cli::try_parse_from([
            "database-operator",
            "run",
            "--kubeconfig",
            "target/local-cluster/kubeconfig",
            "--leader-elect=true",
            "--webhook=false",
            "--metrics-addr",
            "127.0.0.1:0",
            "--health-addr",
            "127.0.0.1:0",
            "-n",
            "a",
            "--namespace",
            "b",
            "--log-format",
            "json",
        ])
        .unwrap();
        let Some(Command::Run(run)) = cli.command else {
            panic!("run expected")
        };
        assert_eq!(run.leader_elect, Some(true));
        assert_eq!(run.webhook, Some(false));
        assert_eq!(run.namespaces, ["a", "b"]);
        assert_eq!(run.metrics_addr.port(), 0);
        assert_eq!(run.log_format, LogFormat::Json);

        let bare = Cli::try_parse_from(["database-operator", "--leader-elect"]).unwrap();
        assert_eq!(bare.run.leader_elect, Some(true));
        assert!(Cli::try_parse_from(["database-operator", "--concurrency", "0"]).is_err());
    }
}
