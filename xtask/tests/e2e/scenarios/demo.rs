//! `cargo xtask demo --exit-after-ready`: the README's command, run as a user would, on its own
//! cluster (`target/e2e-demo`).

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use xtask::cluster::{LocalCluster, down_state_dir, workspace_root};

use crate::harness::Ctx;

const BUDGET: Duration = Duration::from_secs(240);

pub async fn runs_until_running_and_tears_down(ctx: &Ctx) -> Result<()> {
    let state_dir = workspace_root().join("target").join("e2e-demo");
    down_state_dir(&state_dir, true)?;
    fs::create_dir_all(&state_dir)?;
    let output_path = state_dir.join("demo-output.txt");
    ctx.watch_log(output_path.clone());
    ctx.watch_log(state_dir.join("logs").join("operator.log"));
    let output = fs::File::create(&output_path)?;
    let started = Instant::now();
    // The environment of a plain shell: what `cargo test` sets for this process is not passed
    // on (see `cargo_command`).
    let mut child = crate::env::scrub_cargo_env(Command::new(env!("CARGO_BIN_EXE_xtask")))
        .args([
            "demo",
            "--exit-after-ready",
            "--timeout",
            "120",
            "--state-dir",
        ])
        .arg(&state_dir)
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output)
        .spawn()
        .context("starting xtask demo")?;
    ctx.step(format!(
        "running xtask demo --exit-after-ready (output in {})",
        output_path.display()
    ));
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > BUDGET {
            let _ = child.kill();
            let _ = child.wait();
            down_state_dir(&state_dir, true)?;
            bail!("the demo did not finish within {}s", BUDGET.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let text = fs::read_to_string(&output_path)?;
    ctx.note(format!(
        "demo from start to teardown: {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    ensure!(status.success(), "the demo failed ({status})");

    // `kubectl get databaseclusters` with the seed's columns and the cluster Running.
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .position(|l| {
            l.split_whitespace().collect::<Vec<_>>()
                == ["NAME", "ENGINE", "REPLICAS", "READY", "PHASE", "AGE"]
        })
        .context(
            "no `kubectl get databaseclusters` table with NAME ENGINE REPLICAS READY PHASE AGE",
        )?;
    let row: Vec<&str> = lines
        .get(header + 1)
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    ensure!(
        row.get(..5) == Some(&["local-postgresql", "postgresql", "3", "3", "Running"][..]),
        "the databaseclusters row is {row:?}"
    );
    for owned in [
        "statefulset.apps/local-postgresql",
        "service/local-postgresql ",
        "service/local-postgresql-replicas",
        "service/local-postgresql-headless",
        "configmap/local-postgresql-config",
        "poddisruptionbudget.policy/local-postgresql",
        "pod/local-postgresql-0",
        "pod/local-postgresql-2",
        "persistentvolumeclaim/data-local-postgresql-0",
    ] {
        ensure!(text.contains(owned), "the demo did not list {owned}");
    }
    ensure!(
        lines.iter().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.get(..3) == Some(&["Ready", "True", "AllReplicasReady"][..])
        }),
        "no Ready=True AllReplicasReady condition row"
    );
    // The last thing shown: psql's answer from the primary, not in recovery, two replicas
    // streaming from it.
    let answer = lines
        .iter()
        .position(|l| {
            // psql's header row (the echoed command line names the columns too).
            l.contains('|') && l.contains("primary_ip") && l.contains("streaming_replicas")
        })
        .context("no psql answer with primary_ip and streaming_replicas")?;
    let cells: Vec<&str> = lines
        .get(answer + 2)
        .map(|l| l.split('|').map(str::trim).collect())
        .unwrap_or_default();
    ensure!(
        cells.len() == 4
            && cells[0].starts_with("127.10.")
            && cells[1] == "f"
            && cells[2] == "2"
            && cells[3].starts_with("PostgreSQL 15."),
        "psql's answer row is {cells:?}"
    );
    for phrase in [
        "real PostgreSQL server",
        "building the operator",
        "started the operator",
        "local-postgresql is Running",
        "operator stopped",
        "local cluster down",
    ] {
        ensure!(text.contains(phrase), "the demo output lacks {phrase:?}");
    }
    let pid: u32 = text
        .lines()
        .find_map(|l| {
            l.split("started the operator (pid ")
                .nth(1)?
                .split(')')
                .next()?
                .parse()
                .ok()
        })
        .context("the demo did not say the operator's pid")?;
    ensure!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z")),
        "the operator (pid {pid}) still runs after the demo"
    );
    ensure!(
        LocalCluster::attach(&state_dir)?.is_none(),
        "the demo's cluster still runs"
    );
    ensure!(
        !state_dir.join("state.json").exists(),
        "the demo left its cluster state behind"
    );
    ctx.step("the demo printed the cluster, stopped the operator and tore the cluster down");
    Ok(())
}
