//! `kubectl-dbc`: the kubectl plugin of database-operator (`kubectl dbc ...`).
//!
//! | command | does | writes |
//! | --- | --- | --- |
//! | `status [name]` | one screen per cluster: members, primary, backups, conditions, events | no |
//! | `plan <name>` / `plan -f <file>` | what the operator would change, object by object, and which pods would restart | no |
//! | `switchover <name> [--to <pod>]` | asks for a switchover, follows `status.failover` to the outcome | the switchover annotation |
//! | `backup <name>` | asks for a backup now, follows its Job to `status.lastBackup` | the backup-now annotation |

mod backup;
mod cli;
mod plan;
mod reseed;
mod status;
mod switchover;
mod term;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Args, Command, Output};
use crate::term::Style;

fn main() -> ExitCode {
    let args = Args::parse();
    let Some(runtime) = database_operator_common::async_runtime::build(false) else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let style = if std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
        Style { colour: true }
    } else {
        Style::PLAIN
    };
    match &args.command {
        Command::Status { name, output } => {
            let (client, namespace) = args.connection.client().await?;
            let scope = if args.connection.all_namespaces && name.is_none() {
                None
            } else {
                Some(namespace.as_str())
            };
            let fetched = status::fetch(&client, scope, name.as_deref()).await?;
            let reports: Vec<status::StatusReport> = fetched.iter().map(status::report).collect();
            match output {
                Output::Text if reports.is_empty() => {
                    let place = scope.map_or_else(
                        || "any namespace".to_owned(),
                        |ns| format!("namespace {ns}"),
                    );
                    println!("No DatabaseClusters in {place}.");
                }
                Output::Text => print!(
                    "{}",
                    status::render_all(&reports, jiff::Timestamp::now(), style)
                ),
                Output::Json => println!("{}", serde_json::to_string_pretty(&reports)?),
                Output::Yaml => print!("{}", serde_saphyr::to_string(&reports)?),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Plan {
            name,
            file,
            output,
            local,
            config,
        } => {
            let (client, namespace) = args.connection.client().await?;
            let desired = match (name, file) {
                (Some(_), Some(_)) => anyhow::bail!("give a cluster name or -f <file>, not both"),
                (None, None) => anyhow::bail!(
                    "nothing to plan: `kubectl dbc plan <name>` plans the live cluster, \
                     `kubectl dbc plan -f <file>` a manifest before you apply it"
                ),
                (Some(name), None) => plan::Desired::Live(name.clone()),
                (None, Some(path)) => {
                    let (text, source) = if path == "-" {
                        let mut text = String::new();
                        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
                        (text, "-".to_owned())
                    } else {
                        let text = std::fs::read_to_string(path)
                            .map_err(|e| anyhow::anyhow!("reading {path}: {e}"))?;
                        (text, path.clone())
                    };
                    plan::Desired::File { text, source }
                }
            };
            config.install_versions()?;
            let reports = plan::fetch_and_plan(
                &client,
                &namespace,
                desired,
                &config.operator_config(),
                !local,
            )
            .await?;
            match output {
                Output::Text => print!("{}", plan::render_all(&reports, style)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&reports)?),
                Output::Yaml => print!("{}", serde_saphyr::to_string(&reports)?),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Switchover { name, to, timeout } => {
            let (client, namespace) = args.connection.client().await?;
            let timing = switchover::Timing {
                timeout: *timeout,
                poll: std::time::Duration::from_secs(1),
            };
            let (outcome, details) = switchover::run(
                &client,
                &namespace,
                name,
                to.as_deref(),
                timing,
                &mut std::io::stdout(),
            )
            .await?;
            Ok(finish(switchover::summary(name, &outcome), &details))
        }
        Command::Reseed {
            name,
            pod,
            discard_diverged,
            timeout,
        } => {
            let (client, namespace) = args.connection.client().await?;
            let timing = switchover::Timing {
                timeout: *timeout,
                poll: std::time::Duration::from_secs(1),
            };
            let (summary, details) = reseed::run(
                &client,
                &namespace,
                name,
                pod,
                *discard_diverged,
                timing,
                &mut std::io::stdout(),
            )
            .await?;
            Ok(finish(summary, &details))
        }
        Command::Backup { name, timeout } => {
            let (client, namespace) = args.connection.client().await?;
            let timing = backup::Timing {
                timeout: *timeout,
                poll: std::time::Duration::from_secs(1),
            };
            let value = backup::request_value(jiff::Timestamp::now());
            let (outcome, details) = backup::run(
                &client,
                &namespace,
                name,
                &value,
                timing,
                &mut std::io::stdout(),
            )
            .await?;
            Ok(finish(
                backup::summary(name, &namespace, &outcome),
                &details,
            ))
        }
    }
}

/// Ends a command that waited: its summary on stdout when it succeeded, else on stderr as an
/// error with the details that explain it.
fn finish((message, ok): (String, bool), details: &[String]) -> ExitCode {
    if ok {
        println!("{message}");
        ExitCode::SUCCESS
    } else {
        eprintln!("error: {message}");
        for line in details {
            eprintln!("  {line}");
        }
        ExitCode::FAILURE
    }
}
