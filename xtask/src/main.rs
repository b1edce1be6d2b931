//! Project automation for database-operator. Run `cargo xtask --help`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

mod demo;
mod e2e;
mod prebuild;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "database-operator project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Write the CRD YAML under deploy/crds from the Rust types.
    Crdgen {
        /// Do not write; fail with a diff when the committed file is stale.
        #[arg(long)]
        check: bool,
    },
    /// Run the snapshot tests of rendered objects; fails on any unreviewed change.
    Snapshots,
    /// Lint the Helm chart (deploy/helm/database-operator) and check that it renders the same
    /// objects as the kustomizations in deploy/ (helm is built from its Go module on first use).
    HelmCheck,
    /// Run every test: the workspace's unit and snapshot tests, the CRD drift check, the Helm
    /// chart check, then the end-to-end suite on a local control plane (built from Go modules on first use).
    Test,
    /// A local control plane on 127.0.0.1: `cluster up | down | status | build`.
    #[command(disable_help_flag = true)]
    Cluster {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Local cluster + the operator from this checkout + examples/mysql.yaml, until Ctrl-C.
    Demo(demo::DemoArgs),
    /// The end-to-end suite against a fresh local cluster; extra words go to the suite
    /// (scenario filters, --list, --exact, --skip NAME).
    #[command(disable_help_flag = true)]
    E2e {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build (or find in the cache) what the tests need besides Rust: the control-plane and
    /// Helm binaries from Go modules and the database image roots, each timed. `.ci/run` runs
    /// it in the background while the Rust builds go on.
    Prebuild,
    /// Scale benchmark on the local control plane plus the core's criterion numbers; results
    /// in docs/performance (`--quick`: 50 clusters, under 5 minutes, results in target/bench).
    Bench(xtask::bench::BenchArgs),
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Crdgen { check } => crdgen(check),
        Task::Snapshots => snapshots(),
        Task::HelmCheck => helm_check(),
        Task::Test => test(),
        Task::Cluster { args } => xtask::cluster::run(args),
        Task::Demo(args) => demo::run(&args, &workspace_root()),
        Task::E2e { args } => e2e::run(&args, &workspace_root()),
        Task::Bench(args) => xtask::bench::run(&args, &workspace_root()),
        Task::Prebuild => prebuild::run(&workspace_root()),
    }
}

/// The workspace root (the parent of this crate's directory).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Where the CRD is written: deploy/crds for kustomize and the Helm chart's crds/ (Helm
/// installs CRDs from there before the templates).
fn crd_paths() -> Vec<PathBuf> {
    let root = workspace_root();
    ["deploy/crds", "deploy/helm/database-operator/crds"]
        .iter()
        .map(|dir| {
            root.join(dir)
                .join(database_operator_api::crd::CRD_FILE_NAME)
        })
        .collect()
}

fn crdgen(check: bool) -> Result<()> {
    let want = database_operator_api::crd::crd_yaml();
    let mut stale = Vec::new();
    for path in crd_paths() {
        if check {
            let have = std::fs::read_to_string(&path).unwrap_or_default();
            if have != want {
                let diff = line_diff(&have, &want);
                stale.push(format!("{}:\n{diff}", path.display()));
            } else {
                println!("{} is up to date", path.display());
            }
            continue;
        }
        std::fs::create_dir_all(path.parent().context("CRD path has a parent")?)?;
        std::fs::write(&path, &want).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if !stale.is_empty() {
        bail!(
            "the CRD is stale; run `cargo xtask crdgen` and commit the result.\n{}",
            stale.join("\n")
        );
    }
    Ok(())
}

fn helm_check() -> Result<()> {
    let progress = xtask::cluster::Progress::new(false);
    xtask::cluster::helm::check(&workspace_root(), &progress)?;
    println!("the Helm chart lints and renders the same objects as deploy/");
    Ok(())
}

/// A minimal line diff (committed `-`, generated `+`), enough to see what drifted.
fn line_diff(old: &str, new: &str) -> String {
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    let mut out = String::new();
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        if i < old.len() && j < new.len() && old[i] == new[j] {
            i += 1;
            j += 1;
            continue;
        }
        // Find the next common line to resynchronise.
        let next = (i..old.len()).find_map(|a| {
            new[j..]
                .iter()
                .position(|l| *l == old[a])
                .map(|b| (a, j + b))
        });
        let (a, b) = next.unwrap_or((old.len(), new.len()));
        for l in &old[i..a] {
            out.push_str(&format!("-{l}\n"));
        }
        for l in &new[j..b] {
            out.push_str(&format!("+{l}\n"));
        }
        i = a;
        j = b;
    }
    out
}

fn cargo(args: &[&str], env: &[(&str, &Path)]) -> Result<()> {
    let shown: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{k}={} ", v.display()))
        .collect();
    println!("==> {}cargo {}", shown.concat(), args.join(" "));
    let mut cmd = demo::cargo_command();
    cmd.current_dir(workspace_root()).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let status = cmd
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

fn test() -> Result<()> {
    // The script tests run shellcheck; the plugin's e2e scenario drives a terminal with tmux.
    ensure_tool("shellcheck", "--version", "crates/core/tests/scripts.rs")?;
    ensure_tool("tmux", "-V", "the kubectl-dbc e2e scenario")?;
    // MySQL has no package on the suites the machine's apt uses: the driver test runs mysqld
    // from the process nodes' MySQL root (built here once, cached; the e2e suite needs it too).
    let mysql_root = mysql_image_root()?;
    cargo(
        &["test", "--workspace", "--locked"],
        &[("MYSQL_IMAGE_ROOT", &mysql_root)],
    )?;
    crdgen(true)?;
    helm_check()?;
    e2e::run(&[], &workspace_root())
}

/// The root filesystem of the process nodes' MySQL image (`mysql-sid`), built when missing.
fn mysql_image_root() -> Result<PathBuf> {
    use xtask::cluster::images::{ImageTable, default_cache_dir};
    let (recipe, _) = ImageTable::recipe_for("docker.io/library/mysql:9.7")
        .context("no image recipe serves docker.io/library/mysql")?;
    let (root, version) = ImageTable::new(default_cache_dir()?, None)
        .ensure(recipe)
        .context("building the MySQL image root (crates/runtime/tests/database_io.rs runs it)")?;
    println!(
        "==> MySQL {version} for the driver tests: {}",
        root.display()
    );
    Ok(root)
}

/// A Debian package the tests need, installed with apt when missing (a fresh machine gets it as
/// `cargo xtask` provisions the control plane itself). `probe` is the flag that makes the
/// command print its version and exit 0.
fn ensure_tool(tool: &str, probe: &str, needed_by: &str) -> Result<()> {
    use xtask::cluster::apt;
    let runs = || {
        std::process::Command::new(tool)
            .arg(probe)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if runs() {
        return Ok(());
    }
    eprintln!(
        "{tool} is missing ({needed_by} needs it); installing it with apt-get install {tool}"
    );
    apt::apt_install(&[tool])
        .with_context(|| format!("installing {tool} (needed by {needed_by})"))?;
    if !runs() {
        bail!("apt-get installed {tool}, but `{tool} {probe}` still does not run");
    }
    Ok(())
}

fn snapshots() -> Result<()> {
    let status = demo::cargo_command()
        .current_dir(workspace_root())
        .env("INSTA_UPDATE", "no")
        .env("INSTA_FORCE_PASS", "0")
        .args(["test", "--workspace", "--", "snapshot"])
        .status()
        .context("running cargo test")?;
    if !status.success() {
        bail!(
            "snapshot tests failed; review with `cargo insta review` (or INSTA_UPDATE=always) and commit the .snap files"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::line_diff;

    #[test]
    fn diff_shows_changed_lines() {
        let d = line_diff("a\nb\nc\n", "a\nB\nc\nd\n");
        assert_eq!(d, "-b\n+B\n+d\n");
        assert_eq!(line_diff("x\n", "x\n"), "");
    }
}
