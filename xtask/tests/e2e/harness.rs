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

use xtask::timing::{self, ScenarioTime, SuiteTimes};

use crate::env::{self, Env, Operator};

/// A scenario's future.
pub type ScenarioFuture<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// Where a scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// One after another, in the listed order.
    Main,
    /// Beside the main lane, one after another in the listed order: scenarios on the shared
    /// cluster that read and write only their own namespaces (their audit-log and event checks
    /// filtered to their objects), never stop or restart the shared operator and assert no
    /// tight timing. While the main lane waits on servers, these use the time.
    Side,
}

/// What a main-lane scenario tolerates beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Company {
    /// Side-lane scenarios may run beside it.
    Welcome,
    /// Nothing beside it: the side lane finishes the scenario it is in and starts no other
    /// until this one is over (it powers off a node, stops the shared operator, runs its own
    /// cluster, or asserts a timing that load would blur).
    Alone,
    /// Nothing beside it, and every side-lane scenario done before it: it looks at the whole
    /// cluster (the operator's writes in every namespace, the audit log so far).
    AfterSide,
}

/// Checks once that the API server enforces the namespace label: a pod that asks for root in
/// `namespace` (a server-side dry run) must be refused by Pod Security admission, so a scenario
/// whose pods pass is a scenario whose pods pass the restricted standard.
fn pod_security_is_enforced(env: &Env, namespace: &str) -> Result<()> {
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: pod-security-probe\n  namespace: \
         {namespace}\nspec:\n  containers:\n  - name: c\n    image: pause\n    \
         securityContext: {{runAsUser: 0}}\n"
    );
    let out = crate::util::kubectl(env, &["apply", "--dry-run=server", "-f", "-"], Some(&pod))?;
    if out.ok
        || !out
            .stderr
            .contains("violates PodSecurity \"restricted:latest\"")
    {
        bail!(
            "the API server does not enforce {POD_SECURITY_ENFORCE}=restricted: a root pod was \
             answered: ok={} {} {}",
            out.ok,
            out.stdout.trim(),
            out.stderr.trim()
        );
    }
    Ok(())
}

/// The Pod Security admission label every scenario namespace carries (`restricted`).
pub const POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// One named end-to-end scenario.
pub struct Scenario {
    pub name: &'static str,
    pub run: for<'a> fn(&'a Ctx) -> ScenarioFuture<'a>,
    /// Its own time limit instead of [`SCENARIO_BUDGET`] (a measurement whose length the
    /// caller chose).
    pub budget: Option<Duration>,
    /// Its lane.
    pub lane: Lane,
    /// What a main-lane scenario tolerates beside it.
    pub company: Company,
}

impl Scenario {
    /// This scenario in the side lane.
    pub fn beside(self) -> Self {
        Self {
            lane: Lane::Side,
            ..self
        }
    }

    /// This scenario with nothing beside it ([`Company::Alone`]).
    pub fn alone(self) -> Self {
        Self {
            company: Company::Alone,
            ..self
        }
    }

    /// This scenario after every side-lane scenario ([`Company::AfterSide`]).
    pub fn after_side(self) -> Self {
        Self {
            company: Company::AfterSide,
            ..self
        }
    }
}

/// How the two lanes take turns.
#[derive(Debug, Default)]
struct Turns {
    /// The main lane runs a scenario that wants nothing beside it.
    main_alone: bool,
    /// The side lane is in a scenario.
    side_busy: bool,
    /// The side lane has run its last scenario.
    side_finished: bool,
}

/// [`Turns`] and the condition variable both lanes wait on.
struct Lanes {
    turns: Mutex<Turns>,
    changed: std::sync::Condvar,
}

impl Lanes {
    fn new(side_empty: bool) -> Self {
        Self {
            turns: Mutex::new(Turns {
                side_finished: side_empty,
                ..Turns::default()
            }),
            changed: std::sync::Condvar::new(),
        }
    }

    fn wait_while(
        &self,
        mut blocked: impl FnMut(&Turns) -> bool,
    ) -> std::sync::MutexGuard<'_, Turns> {
        let mut turns = lock(&self.turns);
        while blocked(&turns) {
            turns = self.changed.wait(turns).unwrap_or_else(|p| p.into_inner());
        }
        turns
    }

    /// The side lane, before each scenario: waits while the main lane wants to be alone.
    fn side_begins(&self) {
        self.wait_while(|t| t.main_alone).side_busy = true;
    }

    fn side_ends(&self, finished: bool) {
        let mut turns = lock(&self.turns);
        turns.side_busy = false;
        turns.side_finished = finished;
        drop(turns);
        self.changed.notify_all();
    }

    /// The main lane, before each scenario: takes the company it wants.
    fn main_begins(&self, name: &str, company: Company) {
        match company {
            Company::Welcome => {
                lock(&self.turns).main_alone = false;
                self.changed.notify_all();
            }
            Company::Alone => {
                let side_busy = {
                    let mut turns = lock(&self.turns);
                    turns.main_alone = true;
                    turns.side_busy
                };
                if side_busy {
                    eprintln!("\n=== {name} runs alone: waiting for the side lane's scenario");
                }
                drop(self.wait_while(|t| t.side_busy));
            }
            Company::AfterSide => {
                // The side lane may go on until it has finished: then nothing runs beside.
                let side_finished = {
                    let mut turns = lock(&self.turns);
                    turns.main_alone = false;
                    turns.side_finished
                };
                self.changed.notify_all();
                if !side_finished {
                    eprintln!("\n=== {name} waits for the side lane to finish");
                }
                let mut turns = self.wait_while(|t| !t.side_finished);
                turns.main_alone = true;
            }
        }
    }

    /// The main lane is done: the side lane may finish.
    fn main_finished(&self) {
        lock(&self.turns).main_alone = false;
        self.changed.notify_all();
    }
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
            lane: $crate::harness::Lane::Main,
            company: $crate::harness::Company::Welcome,
        }
    };
}

/// Longest a scenario may run before it is failed (the quiet minute alone takes over 60 s).
const SCENARIO_BUDGET: Duration = Duration::from_secs(300);

/// Shared by every scenario: the lazily started cluster (or why it could not start, so that
/// later scenarios fail at once instead of trying again).
pub struct Harness {
    env: tokio::sync::Mutex<Option<Result<Arc<Env>, String>>>,
    /// Running clusters that passed scenarios left for later ones, by key ([`Ctx::hand_over`]).
    pool: Mutex<std::collections::HashMap<&'static str, Handed>>,
}

/// A running cluster one scenario leaves for a later one: starting a cluster of real servers
/// takes 40-80 s, and consecutive scenarios that leave it intact can share it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    /// Its namespace (the scenario that made it created it).
    pub ns: String,
    /// The DatabaseCluster's name.
    pub name: String,
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
    lane: Lane,
    started: Instant,
    namespaces: Mutex<Vec<String>>,
    /// Namespaces deleted once the scenario has passed ([`Ctx::retire_on_success`]).
    retire: Mutex<Vec<String>>,
    /// What this scenario leaves for a later one once it has passed.
    handing_over: Mutex<Option<(&'static str, Handed)>>,
    logs: Mutex<Vec<PathBuf>>,
    relevant: Mutex<Vec<(String, String, String)>>,
    notes: Mutex<Vec<String>>,
}

impl Ctx {
    fn new(harness: Arc<Harness>, name: &'static str, lane: Lane) -> Self {
        Self {
            harness,
            name,
            lane,
            started: Instant::now(),
            namespaces: Mutex::new(Vec::new()),
            retire: Mutex::new(Vec::new()),
            handing_over: Mutex::new(None),
            logs: Mutex::new(Vec::new()),
            relevant: Mutex::new(Vec::new()),
            notes: Mutex::new(Vec::new()),
        }
    }

    /// A progress line, with the time since the scenario started.
    pub fn step(&self, message: impl AsRef<str>) {
        match self.lane {
            Lane::Main => eprintln!(
                "    [{:6.1}s] {}",
                self.started.elapsed().as_secs_f64(),
                message.as_ref()
            ),
            // Interleaved with the main lane's lines: each says whose it is.
            Lane::Side => eprintln!(
                "    [side {} {:6.1}s] {}",
                self.name,
                self.started.elapsed().as_secs_f64(),
                message.as_ref()
            ),
        }
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

    /// Creates namespace `e2e-<suffix>` for this scenario, enforcing the restricted Pod
    /// Security Standard; its objects are shown on failure.
    pub async fn namespace(&self, suffix: &str) -> Result<String> {
        let env = self.env().await?;
        let name = format!("e2e-{suffix}");
        // Every pod of every scenario must pass the restricted Pod Security Standard, enforced
        // by the API server's own admission (a pod that does not is refused at creation).
        env.cluster.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n    \
             {POD_SECURITY_ENFORCE}: restricted\n    {POD_SECURITY_ENFORCE}-version: latest\n"
        ))?;
        static ENFORCED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
        if ENFORCED.get().is_none() {
            pod_security_is_enforced(&env, &name)?;
            let _ = ENFORCED.set(());
        }
        lock(&self.namespaces).push(name.clone());
        Ok(name)
    }

    /// Deletes `namespace` (without waiting) once the scenario has passed: its database
    /// servers would otherwise keep running, and load the two-core machine, for every later
    /// scenario that does not need them. A failed scenario keeps it for the diagnostics.
    pub fn retire_on_success(&self, namespace: &str) {
        lock(&self.retire).push(namespace.to_owned());
    }

    /// Leaves cluster `handed` for a later scenario that asks for `key` with
    /// [`Ctx::take_over`], once this one has passed (a failed scenario keeps it for the
    /// diagnostics and hands nothing over). Its namespace is no longer retired by this
    /// scenario: the one that takes it over retires it.
    pub fn hand_over(&self, key: &'static str, handed: Handed) {
        lock(&self.retire).retain(|ns| *ns != handed.ns);
        self.step(format!(
            "leaving {}/{} running for the next scenario that needs {key}",
            handed.ns, handed.name
        ));
        *lock(&self.handing_over) = Some((key, handed));
    }

    /// The cluster a passed scenario left under `key`, if any. Its namespace becomes this
    /// scenario's (shown on failure, retired with [`Ctx::retire_on_success`]). The caller
    /// checks that it is healthy before it relies on it.
    pub fn take_over(&self, key: &'static str) -> Option<Handed> {
        let handed = lock(&self.harness.pool).remove(key)?;
        self.step(format!(
            "taking over {}/{} ({key}) from an earlier scenario",
            handed.ns, handed.name
        ));
        lock(&self.namespaces).push(handed.ns.clone());
        Some(handed)
    }

    /// Puts what this passed scenario hands over into the pool.
    fn pass_on(&self) {
        if let Some((key, handed)) = lock(&self.handing_over).take() {
            let replaced = lock(&self.harness.pool).insert(key, handed);
            if let Some(old) = replaced {
                eprintln!(
                    "    {key}: {}/{} was never taken over; it keeps running until the end",
                    old.ns, old.name
                );
            }
        }
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
        self.start_operator_with_env(name, args, &[]).await
    }

    /// [`Ctx::start_operator`] with `envs` in its environment.
    pub async fn start_operator_with_env(
        &self,
        name: &str,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<Operator> {
        let env = self.env().await?;
        let kubeconfig = env.operator_kubeconfig.clone();
        self.start_operator_through(name, args, envs, &kubeconfig)
            .await
    }

    /// [`Ctx::start_operator_with_env`] with its own kubeconfig (a fault proxy's).
    pub async fn start_operator_through(
        &self,
        name: &str,
        args: &[&str],
        envs: &[(&str, &str)],
        kubeconfig: &std::path::Path,
    ) -> Result<Operator> {
        let env = self.env().await?;
        let mut operator = Operator::spawn_through(&env, name, args, envs, kubeconfig)?;
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
        pool: Mutex::new(std::collections::HashMap::new()),
    });
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    println!(
        "\nrunning {} end-to-end scenarios (of {})",
        selected.len(),
        scenarios.len()
    );
    let (side, main): (Vec<&Scenario>, Vec<&Scenario>) =
        selected.iter().copied().partition(|s| s.lane == Lane::Side);
    let results: Mutex<Vec<ScenarioResult>> = Mutex::new(Vec::new());
    let lanes = Lanes::new(side.is_empty());
    std::thread::scope(|scope| {
        if !side.is_empty() {
            eprintln!(
                "\n=== side lane: {} scenarios beside the main lane ({})",
                side.len(),
                side.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
            );
            let (runtime, harness, results, lanes) = (&runtime, &harness, &results, &lanes);
            scope.spawn(move || {
                for (i, scenario) in side.iter().enumerate() {
                    lanes.side_begins();
                    let result = run_one(runtime, harness, scenario);
                    lock(results).push(result);
                    lanes.side_ends(i + 1 == side.len());
                }
            });
        }
        for scenario in &main {
            lanes.main_begins(scenario.name, scenario.company);
            let result = run_one(&runtime, &harness, scenario);
            lock(&results).push(result);
        }
        lanes.main_finished();
    });
    let results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    crate::scenarios::capture::stop_if_running();

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
        .filter_map(|(name, outcome, _, _, _)| match outcome {
            Outcome::Failed(m) => Some((name, m)),
            Outcome::Passed => None,
        })
        .collect();
    println!();
    println!("scenario times:");
    for (name, outcome, secs, _, lane) in &results {
        let mark = match outcome {
            Outcome::Passed => "ok",
            Outcome::Failed(_) => "FAILED",
        };
        let lane = if *lane == Lane::Side {
            "  (side lane)"
        } else {
            ""
        };
        println!("  {secs:6.1}s  {mark:6}  {name}{lane}");
    }
    if !failed.is_empty() {
        println!("\nfailures:");
        for (name, message) in &failed {
            println!("    {name}: {message}");
        }
    }
    let over_budget = record_times(&args, started_unix, started, &results);
    println!(
        "\ntest result: {}. {} passed; {} failed; finished in {:.1}s",
        if failed.is_empty() && over_budget.is_none() {
            "ok"
        } else {
            "FAILED"
        },
        results.len() - failed.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    if let Some(message) = over_budget {
        println!("\n{message}");
        return ExitCode::FAILURE;
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Writes the run's timing table (`target/e2e-times.json`), prints its slowest scenarios, and
/// holds a whole run to the suite's budget: `Some(message)` naming the slowest scenarios when
/// it went over (or when the budget setting is wrong).
fn record_times(
    args: &Args,
    started_unix: u64,
    started: Instant,
    results: &[ScenarioResult],
) -> Option<String> {
    let (budget, budget_from_env) = match timing::suite_budget_from_env() {
        Ok(budget) => budget,
        Err(e) => return Some(format!("{e:#}")),
    };
    let times = SuiteTimes {
        started_unix,
        total_seconds: started.elapsed().as_secs_f64(),
        budget_seconds: budget,
        whole_suite: args.filters.is_empty() && args.skip.is_empty(),
        budget_from_env,
        scenarios: results
            .iter()
            .map(|(name, outcome, secs, _, lane)| ScenarioTime {
                name: (*name).to_owned(),
                seconds: *secs,
                passed: matches!(outcome, Outcome::Passed),
                failure: match outcome {
                    Outcome::Failed(m) => Some(timing::short_failure(m)),
                    Outcome::Passed => None,
                },
                beside: *lane == Lane::Side,
            })
            .collect(),
    };
    println!(
        "\n{}",
        times.slowest_table(timing::SLOWEST_SHOWN).trim_end()
    );
    let path = timing::times_path(&xtask::cluster::workspace_root());
    match times.write(&path) {
        Ok(()) => println!("timing table: {}", path.display()),
        Err(e) => eprintln!("could not write the timing table: {e:#}"),
    }
    times.check_budget().err().map(|e| format!("{e:#}"))
}

/// What one scenario did: its name, outcome, seconds, notes and lane.
type ScenarioResult = (&'static str, Outcome, f64, Vec<String>, Lane);

/// Runs one scenario to its end (or its budget), prints its result line and notes; a failure
/// prints its diagnostics, a pass retires the namespaces it asked to.
fn run_one(
    runtime: &tokio::runtime::Runtime,
    harness: &Arc<Harness>,
    scenario: &Scenario,
) -> ScenarioResult {
    match scenario.lane {
        Lane::Main => eprintln!("\n=== {}", scenario.name),
        Lane::Side => eprintln!("\n=== {} (side lane)", scenario.name),
    }
    let ctx = Ctx::new(harness.clone(), scenario.name, scenario.lane);
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
            eprintln!("\n    FAILED ({}): {message}", scenario.name);
            runtime.block_on(ctx.diagnose());
        }
        Outcome::Passed => {
            runtime.block_on(ctx.retire());
            ctx.pass_on();
        }
    }
    let notes = lock(&ctx.notes).clone();
    // Operators the scenario started stop when its future is dropped (above); the shared one
    // keeps running for the next scenario.
    drop(ctx);
    let lane = match scenario.lane {
        Lane::Main => "",
        Lane::Side => " [side lane]",
    };
    // One print for the line and its notes: the other lane's lines do not split them.
    let mut out = match &outcome {
        Outcome::Passed => format!("test {} ... ok ({secs:.1}s){lane}", scenario.name),
        Outcome::Failed(_) => format!("test {} ... FAILED ({secs:.1}s){lane}", scenario.name),
    };
    for n in &notes {
        out.push_str(&format!("\n    {n}"));
    }
    println!("{out}");
    (scenario.name, outcome, secs, notes, scenario.lane)
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
