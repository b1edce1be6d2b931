//! The runner: one shared local cluster for the whole suite, scenarios run one after another,
//! each reported on its own line; a failing scenario prints its operators' log tails and the
//! state of its namespaces. The cluster and every operator process are stopped at the end, on
//! a panic, and on Ctrl-C.
//!
//! Command line (after `--`): name filters (substring; several allowed), `--exact`,
//! `--skip NAME`, `--list`. libtest's `--test-threads`, `--nocapture` and `--quiet` are accepted
//! and ignored (scenarios always run one at a time, output is never captured).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::env::{self, Env, Operator};

/// A scenario's future.
pub type ScenarioFuture<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// One named end-to-end scenario.
pub struct Scenario {
    pub name: &'static str,
    pub run: for<'a> fn(&'a Ctx) -> ScenarioFuture<'a>,
    /// Its own time limit instead of [`SCENARIO_BUDGET`] (a measurement whose length the
    /// caller chose).
    pub budget: Option<Duration>,
}

/// `scenario!(module::function)`: a [`Scenario`] named `module::function`.
#[macro_export]
macro_rules! scenario {
    ($module:ident :: $function:ident) => {
        $crate::harness::Scenario {
            name: concat!(stringify!($module), "::", stringify!($function)),
            run: {
                fn run(ctx: &$crate::harness::Ctx) -> $crate::harness::ScenarioFuture<'_> {
                    Box::pin($crate::scenarios::$module::$function(ctx))
                }
                run
            },
            budget: None,
        }
    };
}

/// Longest a scenario may run before it is failed (the quiet minute alone takes over 60 s).
const SCENARIO_BUDGET: Duration = Duration::from_secs(300);

/// Shared by every scenario: the lazily started cluster (or why it could not start, so that
/// later scenarios fail at once instead of trying again).
pub struct Harness {
    env: tokio::sync::Mutex<Option<Result<Arc<Env>, String>>>,
}

impl Harness {
    async fn env(&self) -> Result<Arc<Env>> {
        let mut slot = self.env.lock().await;
        match slot.as_ref() {
            Some(Ok(env)) => return Ok(env.clone()),
            Some(Err(e)) => bail!("the shared cluster could not be started: {e}"),
            None => {}
        }
        match Env::start().await {
            Ok(env) => {
                let env = Arc::new(env);
                *slot = Some(Ok(env.clone()));
                Ok(env)
            }
            Err(e) => {
                *slot = Some(Err(format!("{e:#}")));
                Err(e.context("starting the shared cluster"))
            }
        }
    }

    /// The environment if it is running (never starts it).
    fn running_env(&self) -> Option<Arc<Env>> {
        match self.env.try_lock().ok()?.as_ref() {
            Some(Ok(env)) => Some(env.clone()),
            _ => None,
        }
    }

    fn take_env(&self) -> Option<Arc<Env>> {
        match self.env.try_lock().ok()?.take() {
            Some(Ok(env)) => Some(env),
            _ => None,
        }
    }
}

/// What a scenario gets: the shared environment, progress output, and the bookkeeping that
/// makes its failure readable.
pub struct Ctx {
    harness: Arc<Harness>,
    pub name: &'static str,
    started: Instant,
    namespaces: Mutex<Vec<String>>,
    /// Namespaces deleted once the scenario has passed ([`Ctx::retire_on_success`]).
    retire: Mutex<Vec<String>>,
    logs: Mutex<Vec<PathBuf>>,
    relevant: Mutex<Vec<(String, String, String)>>,
    notes: Mutex<Vec<String>>,
}

impl Ctx {
    fn new(harness: Arc<Harness>, name: &'static str) -> Self {
        Self {
            harness,
            name,
            started: Instant::now(),
            namespaces: Mutex::new(Vec::new()),
            retire: Mutex::new(Vec::new()),
            logs: Mutex::new(Vec::new()),
            relevant: Mutex::new(Vec::new()),
            notes: Mutex::new(Vec::new()),
        }
    }

    /// A progress line, with the time since the scenario started.
    pub fn step(&self, message: impl AsRef<str>) {
        eprintln!(
            "    [{:6.1}s] {}",
            self.started.elapsed().as_secs_f64(),
            message.as_ref()
        );
    }

    /// A measurement, shown with the result.
    pub fn note(&self, message: impl Into<String>) {
        let message = message.into();
        self.step(format!("note: {message}"));
        lock(&self.notes).push(message);
    }

    /// The shared cluster with the CRD and RBAC installed (started on first use).
    pub async fn env(&self) -> Result<Arc<Env>> {
        self.harness.env().await
    }

    /// Creates namespace `e2e-<suffix>` for this scenario; its objects are shown on failure.
    pub async fn namespace(&self, suffix: &str) -> Result<String> {
        let env = self.env().await?;
        let name = format!("e2e-{suffix}");
        env.cluster.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"
        ))?;
        lock(&self.namespaces).push(name.clone());
        Ok(name)
    }

    /// Deletes `namespace` (without waiting) once the scenario has passed: its database
    /// servers would otherwise keep running, and load the two-core machine, for every later
    /// scenario that does not need them. A failed scenario keeps it for the diagnostics.
    pub fn retire_on_success(&self, namespace: &str) {
        lock(&self.retire).push(namespace.to_owned());
    }

    /// Deletes the namespaces given to [`Ctx::retire_on_success`]; a failure is only said.
    async fn retire(&self) {
        let namespaces = lock(&self.retire).clone();
        if namespaces.is_empty() {
            return;
        }
        let Ok(env) = self.env().await else { return };
        for ns in namespaces {
            match env
                .cluster
                .kubectl_output(&["delete", "namespace", &ns, "--wait=false"])
            {
                Ok(_) => eprintln!("    retired namespace {ns} (the scenario passed)"),
                Err(e) => eprintln!("    could not delete namespace {ns}: {e:#}"),
            }
        }
    }

    /// Shows the tail of this log file if the scenario fails.
    pub fn watch_log(&self, path: PathBuf) {
        let mut logs = lock(&self.logs);
        if !logs.contains(&path) {
            logs.push(path);
        }
    }

    /// Shows `kubectl get <kind> <name> -n <namespace> -o yaml` if the scenario fails.
    pub fn relevant(&self, kind: &str, namespace: &str, name: &str) {
        lock(&self.relevant).push((kind.into(), namespace.into(), name.into()));
    }

    /// Makes sure the shared operator (no leader election, no webhook) runs; returns its log.
    pub async fn operator(&self) -> Result<PathBuf> {
        let env = self.env().await?;
        let log = env.ensure_main_operator().await?;
        self.watch_log(log.clone());
        Ok(log)
    }

    /// Stops the shared operator (scenarios that run their own).
    pub async fn without_shared_operator(&self) -> Result<Arc<Env>> {
        let env = self.env().await?;
        if let Some(log) = env.stop_main_operator() {
            self.step(format!(
                "stopped the shared operator (log {})",
                log.display()
            ));
        }
        Ok(env)
    }

    /// Starts an operator process of this scenario (stopped when dropped).
    pub async fn start_operator(&self, name: &str, args: &[&str]) -> Result<Operator> {
        let env = self.env().await?;
        let mut operator = Operator::spawn(&env, name, args)?;
        self.watch_log(operator.log.clone());
        self.step(format!(
            "started operator {name} (pid {}, log {})",
            operator.pid,
            operator.log.display()
        ));
        operator.wait_ready(Duration::from_secs(60)).await?;
        Ok(operator)
    }

    async fn diagnose(&self) {
        eprintln!("\n    --- diagnostics for {}", self.name);
        for log in lock(&self.logs).iter() {
            eprintln!("\n    --- {} (last 40 lines)", log.display());
            eprintln!("{}", env::tail(log, 40));
        }
        let Some(env) = self.harness.running_env() else {
            return;
        };
        let show = |args: &[&str]| {
            eprintln!("\n    --- kubectl {}", args.join(" "));
            match env.cluster.kubectl_output(args) {
                Ok(out) => eprintln!("{}", out.trim_end()),
                Err(e) => eprintln!("{e:#}"),
            }
        };
        for (kind, namespace, name) in lock(&self.relevant).iter() {
            show(&["get", kind, name, "-n", namespace, "-o", "yaml"]);
        }
        for namespace in lock(&self.namespaces).iter() {
            show(&["get", "databaseclusters", "-n", namespace, "-o", "yaml"]);
            show(&[
                "get",
                "statefulsets,services,configmaps,cronjobs,poddisruptionbudgets,pods,persistentvolumeclaims",
                "-n",
                namespace,
                "-o",
                "wide",
                "--show-labels",
            ]);
            show(&[
                "get",
                "events",
                "-n",
                namespace,
                "--sort-by=.metadata.creationTimestamp",
            ]);
        }
    }
}

/// Locks a std mutex, recovering from poisoning (a failed scenario may have panicked with it
/// held; the data is plain bookkeeping).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Args {
    filters: Vec<String>,
    skip: Vec<String>,
    exact: bool,
    list: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        filters: Vec::new(),
        skip: Vec::new(),
        exact: false,
        list: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--exact" => args.exact = true,
            "--list" => args.list = true,
            "--skip" => args.skip.extend(it.next()),
            "--nocapture" | "--quiet" | "-q" | "--show-output" | "--ignored"
            | "--include-ignored" => {}
            "--test-threads" | "--format" | "--color" => {
                it.next();
            }
            a if a.starts_with("--test-threads=")
                || a.starts_with("--format=")
                || a.starts_with("--color=") => {}
            a if a.starts_with("--skip=") => args.skip.push(a["--skip=".len()..].to_string()),
            a if a.starts_with('-') => eprintln!("ignoring unknown flag {a}"),
            _ => args.filters.push(arg),
        }
    }
    args
}

impl Args {
    fn selects(&self, name: &str) -> bool {
        let matches = |f: &String| {
            if self.exact {
                name == f
            } else {
                name.contains(f.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(matches))
            && !self.skip.iter().any(|s| name.contains(s.as_str()))
    }
}

enum Outcome {
    Passed,
    Failed(String),
}

/// Runs the selected scenarios; the process exit code says whether all passed.
pub fn main(scenarios: Vec<Scenario>) -> ExitCode {
    let args = parse_args();
    let selected: Vec<&Scenario> = scenarios.iter().filter(|s| args.selects(s.name)).collect();
    if args.list {
        for s in &selected {
            println!("{}: test", s.name);
        }
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    env::install_interrupt_handler();
    let harness = Arc::new(Harness {
        env: tokio::sync::Mutex::new(None),
    });
    let started = Instant::now();
    println!(
        "\nrunning {} end-to-end scenarios (of {})",
        selected.len(),
        scenarios.len()
    );
    let mut results: Vec<(&'static str, Outcome, f64, Vec<String>)> = Vec::new();
    for scenario in &selected {
        eprintln!("\n=== {}", scenario.name);
        let ctx = Ctx::new(harness.clone(), scenario.name);
        let t0 = Instant::now();
        let budget = scenario.budget.unwrap_or(SCENARIO_BUDGET);
        let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
            runtime.block_on(async { tokio::time::timeout(budget, (scenario.run)(&ctx)).await })
        }));
        let outcome = match run {
            Ok(Ok(Ok(()))) => Outcome::Passed,
            Ok(Ok(Err(e))) => Outcome::Failed(format!("{e:#}")),
            Ok(Err(_)) => Outcome::Failed(format!(
                "did not finish within its budget of {}s",
                budget.as_secs()
            )),
            Err(panic) => Outcome::Failed(format!("panicked: {}", panic_message(&*panic))),
        };
        let secs = t0.elapsed().as_secs_f64();
        match &outcome {
            Outcome::Failed(message) => {
                eprintln!("\n    FAILED: {message}");
                runtime.block_on(ctx.diagnose());
            }
            Outcome::Passed => runtime.block_on(ctx.retire()),
        }
        let notes = lock(&ctx.notes).clone();
        // Operators the scenario started stop when its future is dropped (above); the shared one
        // keeps running for the next scenario.
        drop(ctx);
        match &outcome {
            Outcome::Passed => println!("test {} ... ok ({secs:.1}s)", scenario.name),
            Outcome::Failed(_) => println!("test {} ... FAILED ({secs:.1}s)", scenario.name),
        }
        for n in &notes {
            println!("    {n}");
        }
        results.push((scenario.name, outcome, secs, notes));
    }

    if let Some(env) = harness.take_env() {
        eprintln!("\nstopping the operator and the local cluster");
        match Arc::try_unwrap(env) {
            Ok(env) => env.shutdown(),
            Err(env) => {
                // Still referenced (cannot happen once every Ctx is dropped): stop it anyway.
                env.stop_main_operator();
            }
        }
    }
    drop(runtime);

    let failed: Vec<_> = results
        .iter()
        .filter_map(|(name, outcome, _, _)| match outcome {
            Outcome::Failed(m) => Some((name, m)),
            Outcome::Passed => None,
        })
        .collect();
    println!();
    println!("scenario times:");
    for (name, outcome, secs, _) in &results {
        let mark = match outcome {
            Outcome::Passed => "ok",
            Outcome::Failed(_) => "FAILED",
        };
        println!("  {secs:6.1}s  {mark:6}  {name}");
    }
    if !failed.is_empty() {
        println!("\nfailures:");
        for (name, message) in &failed {
            println!("    {name}: {message}");
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; finished in {:.1}s",
        if failed.is_empty() { "ok" } else { "FAILED" },
        results.len() - failed.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}
