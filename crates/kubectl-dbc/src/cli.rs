//! The command line: kubectl's connection flags, the subcommands and their options.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use database_operator_api::DatabaseCluster;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// `kubectl dbc`: status and plans of DatabaseClusters (database-operator).
#[derive(Debug, clap::Parser)]
#[command(name = "kubectl-dbc", bin_name = "kubectl dbc", version)]
pub struct Args {
    /// How to reach the cluster.
    #[command(flatten)]
    pub connection: Connection,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The flags kubectl users expect.
#[derive(Debug, clap::Args)]
pub struct Connection {
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace (default: the context's, else `default`).
    #[arg(short = 'n', long, global = true, value_name = "NS")]
    pub namespace: Option<String>,
    /// Every namespace (`status` without a name).
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
}

impl Connection {
    /// A client and the namespace to work in.
    pub async fn client(&self) -> anyhow::Result<(Client, String)> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            cluster: None,
            user: None,
        };
        let config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
                Config::from_custom_kubeconfig(kubeconfig, &options).await
            }
            None => Config::from_kubeconfig(&options).await,
        }
        .context(
            "loading the kubeconfig (set --kubeconfig or $KUBECONFIG, or check the context \
             with `kubectl config get-contexts`)",
        )?;
        let namespace = self
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).context("building the API client")?;
        Ok((client, namespace))
    }
}

/// Reads the DatabaseCluster `namespace/name`; when it does not exist the error says how to list
/// the clusters there and, in `hint`, what else the user can do.
pub async fn get_cluster(
    api: &Api<DatabaseCluster>,
    namespace: &str,
    name: &str,
    hint: &str,
) -> anyhow::Result<DatabaseCluster> {
    api.get_opt(name)
        .await
        .with_context(|| format!("reading DatabaseCluster {namespace}/{name}"))?
        .with_context(|| {
            format!(
                "DatabaseCluster {namespace}/{name} not found: `kubectl get dbc -n {namespace}` \
                 lists the clusters there{hint}"
            )
        })
}

/// Progress lines of a command that waits, each prefixed with the seconds since it started.
pub struct Progress {
    started: Instant,
    last: String,
}

impl Progress {
    /// Starts the clock.
    pub fn start() -> Self {
        Self {
            started: Instant::now(),
            last: String::new(),
        }
    }

    /// Writes `line` with the time since the start (a failed write to the terminal is not an
    /// error of the command).
    pub fn say(&self, out: &mut dyn Write, line: &str) {
        let _ = writeln!(
            out,
            "[{:5.1}s] {line}",
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Says where a wait stands, only when that differs from the last time.
    pub fn update(&mut self, out: &mut dyn Write, line: String) {
        if line != self.last {
            self.say(out, &line);
            self.last = line;
        }
    }

    /// The last line [`Progress::update`] said (empty before the first).
    pub fn last(&self) -> &str {
        &self.last
    }

    /// When the clock started.
    pub fn started(&self) -> Instant {
        self.started
    }
}

/// Output format of `status` and `plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// One screen per cluster (colour on a terminal).
    Text,
    /// JSON, for scripts.
    Json,
    /// YAML, for scripts.
    Yaml,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// One screen per cluster: members, primary, backups, conditions, the last events.
    Status {
        /// The cluster; every cluster in the namespace (or with -A, everywhere) without one.
        name: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// What the operator would change (read-only): per object create/update/unchanged with the
    /// fields that differ, and which pods would restart and why.
    Plan {
        /// Plan the live cluster of this name as it is.
        name: Option<String>,
        /// Plan the DatabaseCluster(s) of this manifest (`-` for stdin) against the live objects.
        #[arg(short = 'f', long, value_name = "FILE")]
        file: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Compare locally only (the fields the operator sets), without the server-side
        /// dry-run apply that gives the exact result.
        #[arg(long)]
        local: bool,
        /// The operator's settings that shape rendered objects.
        #[command(flatten)]
        config: OperatorSettings,
    },
    /// Move the primary to another member and wait until the operator reports the outcome.
    Switchover {
        /// The cluster.
        name: String,
        /// The member to promote (`<name>-<ordinal>`); default: the most advanced replica.
        #[arg(long, value_name = "POD")]
        to: Option<String>,
        /// Stop waiting after this long (e.g. 90s, 5m); the request stays and the operator
        /// carries on.
        #[arg(long, default_value = "5m", value_parser = database_operator_common::flags::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Discard a member's data and copy it from the primary again (a replica that cannot catch
    /// up, or a quarantined member), then wait until the copy streams.
    Reseed {
        /// The cluster.
        name: String,
        /// The member to seed again (`<name>-<ordinal>`, never the primary).
        pod: String,
        /// The member is quarantined and the transactions only it holds may be discarded.
        #[arg(long)]
        discard_diverged: bool,
        /// Stop waiting after this long (e.g. 90s, 30m); the reseed carries on.
        #[arg(long, default_value = "30m", value_parser = database_operator_common::flags::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Take a backup now and wait until the operator reports it (or the Job fails).
    Backup {
        /// The cluster.
        name: String,
        /// Stop waiting after this long (e.g. 90s, 30m); the backup carries on.
        #[arg(long, default_value = "15m", value_parser = database_operator_common::flags::parse_duration)]
        timeout: std::time::Duration,
    },
}

/// The operator's flags that shape what it renders (the operator's own flag group); give the
/// values the operator runs with (its Deployment's arguments) when they differ from the defaults.
pub type OperatorSettings = database_operator_common::flags::RenderFlags;

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory as _, Parser as _};

    #[test]
    fn the_command_line_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn kubectl_flags_work_before_and_after_the_subcommand() {
        let args = Args::parse_from([
            "kubectl-dbc",
            "-n",
            "shop",
            "status",
            "orders",
            "--context",
            "prod",
            "-o",
            "json",
        ]);
        assert_eq!(args.connection.namespace.as_deref(), Some("shop"));
        assert_eq!(args.connection.context.as_deref(), Some("prod"));
        match args.command {
            Command::Status { name, output } => {
                assert_eq!(name.as_deref(), Some("orders"));
                assert_eq!(output, Output::Json);
            }
            other => panic!("parsed as {other:?}"),
        }
    }
}
