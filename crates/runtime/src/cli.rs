//! The `database-operator` command line.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use database_operator_core::OperatorConfig;
use k8s_openapi::jiff::Timestamp;

use crate::memory;
use crate::offline;
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
}

/// Flags of `run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Kubeconfig file (default: in-cluster service account, else $KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use (default: the current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// Namespace to watch; repeat for several. Default: all namespaces.
    #[arg(long = "namespace", short = 'n', value_name = "NS")]
    pub namespaces: Vec<String>,

    /// Clusters reconciled at the same time (per watched namespace).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub concurrency: u16,

    /// How often every cluster is looked at even when nothing changed (e.g. 30s, 5m).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub resync: Duration,

    /// Address of the Prometheus metrics endpoint (/metrics). Port 0 picks a free port (logged).
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub metrics_addr: SocketAddr,

    /// Address of the health endpoints (/healthz, /readyz). Port 0 picks a free port (logged).
    #[arg(long, default_value = "0.0.0.0:8081", value_name = "ADDR")]
    pub health_addr: SocketAddr,

    /// Reconcile only while holding the leader Lease [default: true in a cluster, false outside].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub leader_elect: Option<bool>,

    /// Name of the leader Lease.
    #[arg(long, default_value = "database-operator", value_name = "NAME")]
    pub lease_name: String,

    /// Namespace of the leader Lease [default: the pod's namespace, else database-operator-system].
    #[arg(long, value_name = "NS")]
    pub lease_namespace: Option<String>,

    /// How long the Lease is valid without renewal; a standby takes over at most this long after
    /// the leader dies.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// Serve the admission webhook (HTTPS) [default: true in a cluster, false outside].
    #[arg(
        long,
        env = "DATABASE_OPERATOR_WEBHOOK",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub webhook: Option<bool>,

    /// Address of the admission webhook.
    #[arg(long, default_value_t = crate::webhook::DEFAULT_ADDR, value_name = "ADDR")]
    pub webhook_addr: SocketAddr,

    /// Directory with the webhook's serving certificate (tls.crt, tls.key), reloaded on change.
    #[arg(long, default_value = crate::webhook::DEFAULT_CERT_DIR, value_name = "DIR")]
    pub webhook_cert_dir: PathBuf,

    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Registry (and path) database images are pulled from, for air-gapped clusters.
    #[arg(long, default_value = "docker.io/library", value_name = "REGISTRY")]
    pub image_registry: String,

    /// Image of the MySQL backup (and backup cleanup) jobs.
    #[arg(long, value_name = "IMAGE", default_value_t = OperatorConfig::default().mysql_backup_image)]
    pub mysql_backup_image: String,

    /// Image of the MariaDB backup (and backup cleanup) jobs.
    #[arg(long, value_name = "IMAGE", default_value_t = OperatorConfig::default().mariadb_backup_image)]
    pub mariadb_backup_image: String,

    /// Image of the PostgreSQL backup (and backup cleanup) jobs.
    #[arg(long, value_name = "IMAGE", default_value_t = OperatorConfig::default().postgresql_backup_image)]
    pub postgresql_backup_image: String,
}

impl RunArgs {
    /// The settings passed to the core.
    pub fn operator_config(&self) -> OperatorConfig {
        OperatorConfig {
            image_registry: self.image_registry.trim_end_matches('/').to_owned(),
            mysql_backup_image: self.mysql_backup_image.clone(),
            mariadb_backup_image: self.mariadb_backup_image.clone(),
            postgresql_backup_image: self.postgresql_backup_image.clone(),
            resync: self.resync,
        }
    }
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

    /// Registry (and path) database images are pulled from.
    #[arg(long, default_value = "docker.io/library", value_name = "REGISTRY")]
    pub image_registry: String,
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

/// Parses `30s`, `5m`, `1h`, `500ms` or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 30s, 5m or 1h"))?;
    let d = match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?}; use ms, s, m or h"
            ));
        }
    };
    if d.is_zero() {
        return Err(format!("{text:?}: must be more than zero"));
    }
    Ok(d)
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

/// `render`: writes the YAML to `out`, warnings and errors to `err`; returns the exit code.
pub fn render_command(
    args: &RenderArgs,
    now: Timestamp,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> u8 {
    let (text, name) = match read_input(&args.file) {
        Ok(v) => v,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return 1;
        }
    };
    let config = OperatorConfig {
        image_registry: args.image_registry.trim_end_matches('/').to_owned(),
        ..OperatorConfig::default()
    };
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
    let (text, name) = match read_input(&args.file) {
        Ok(v) => v,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            return 1;
        }
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
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: starting the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(crate::operator::run(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "operator stopped");
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("0s").unwrap_err().contains("more than zero"));
        assert!(parse_duration("3d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("soon").is_err());
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
