//! The operator under test: built in release mode, run as a process out of cluster, its
//! metrics scraped over HTTP on 127.0.0.1.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustix::process::{Pid, Signal, kill_process};
use serde::{Deserialize, Serialize};

/// The operator's user name in the benchmark's kubeconfig (client certificate CN).
pub const USER: &str = crate::cluster::OPERATOR_USER;

/// Which operator a run measures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Subject {
    /// This project's operator (`database-operator run`).
    #[default]
    DatabaseOperator,
    /// `xtask/seed-design`: the tutorial's design built with controller-runtime, for the
    /// side-by-side comparison.
    SeedDesign,
}

impl Subject {
    /// The run id's infix (none for our operator, so older run files keep their names).
    pub fn id_infix(self) -> &'static str {
        match self {
            Subject::DatabaseOperator => "",
            Subject::SeedDesign => "seed-design-",
        }
    }
}

/// How the operator is started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorSettings {
    /// Which operator ran (runs before the comparison existed ran ours).
    #[serde(default)]
    pub subject: Subject,
    /// `--concurrency`.
    pub concurrency: u16,
    /// `--resync`, seconds.
    pub resync_seconds: u64,
    /// Every argument passed.
    pub args: Vec<String>,
    /// What limits the client: kube-rs has no client-side rate limiter (unlike client-go's
    /// QPS/burst); requests are bounded by `--concurrency` and the watches.
    pub client: String,
}

/// Where the operator serves its admission webhook: `addr` on 127.0.0.1, with `tls.crt` and
/// `tls.key` in `cert_dir` (issued by the benchmark's cluster CA).
#[derive(Debug, Clone)]
pub struct WebhookServing {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// The serving certificate's directory.
    pub cert_dir: PathBuf,
}

/// How a run starts its operator (the same for the first process and the restarted one).
#[derive(Debug, Clone)]
pub struct Launch {
    /// Which operator.
    pub subject: Subject,
    /// Its release binary.
    pub bin: PathBuf,
    /// `--concurrency`.
    pub concurrency: u16,
    /// `--resync`, seconds.
    pub resync_seconds: u64,
    /// Where our operator serves its webhook (`None`: `--webhook=false`; the seed design has
    /// none).
    pub webhook: Option<WebhookServing>,
    /// More flags for `run`.
    pub extra: Vec<String>,
}

/// `cargo build --release -p database-operator-runtime --bin database-operator`.
pub fn build(workspace_root: &Path) -> Result<PathBuf> {
    // Without Cargo's variables for this task: inheriting them recompiles ring and everything
    // above it against a plain `cargo build`.
    let status = crate::cargo::command()
        .current_dir(workspace_root)
        .args([
            "build",
            "--release",
            "-p",
            "database-operator-runtime",
            "--bin",
            "database-operator",
        ])
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("building the operator failed ({status})");
    }
    let bin = super::criterion::target_dir(workspace_root).join("release/database-operator");
    if !bin.exists() {
        bail!("{} is missing after the build", bin.display());
    }
    Ok(bin)
}

/// `go build` of `xtask/seed-design` into the target directory (the Go build cache makes a
/// rebuild quick); its modules come from the Go module proxy on first use.
pub fn build_seed_design(workspace_root: &Path) -> Result<PathBuf> {
    let bin = super::criterion::target_dir(workspace_root).join("seed-design/seed-design");
    let status = Command::new("go")
        .current_dir(workspace_root.join("xtask/seed-design"))
        .args(["build", "-mod=readonly", "-trimpath", "-o"])
        .arg(&bin)
        .arg(".")
        .status()
        .context("running go build (is Go installed?)")?;
    if !status.success() {
        bail!("building xtask/seed-design failed ({status})");
    }
    Ok(bin)
}

/// A running operator process.
pub struct Operator {
    child: Option<Child>,
    log: PathBuf,
    metrics: SocketAddr,
    /// How it was started.
    pub settings: OperatorSettings,
}

impl Operator {
    /// Starts the operator `launch` describes against `kubeconfig`, logging (JSON) to `log`,
    /// and waits for its metrics endpoint and `/readyz` (caches synced).
    pub fn start(launch: &Launch, kubeconfig: &Path, log: &Path) -> Result<Operator> {
        let Launch {
            subject,
            bin,
            concurrency,
            resync_seconds,
            webhook,
            extra,
        } = launch;
        let (subject, concurrency, resync_seconds) = (*subject, *concurrency, *resync_seconds);
        let webhook_args = match webhook {
            Some(w) => vec![
                "--webhook=true".to_string(),
                format!("--webhook-addr={}", w.addr),
                format!("--webhook-cert-dir={}", w.cert_dir.display()),
            ],
            None => vec!["--webhook=false".to_string()],
        };
        let mut args: Vec<String> = match subject {
            Subject::DatabaseOperator => [
                "run".into(),
                format!("--kubeconfig={}", kubeconfig.display()),
                "--leader-elect=false".into(),
            ]
            .into_iter()
            .chain(webhook_args)
            .chain([
                // No cluster DNS here: members (on fake nodes, nothing listening) are dialled at
                // their loopback pod IPs, never through a resolver.
                "--member-address=pod-ip".into(),
                "--metrics-addr=127.0.0.1:0".into(),
                "--health-addr=127.0.0.1:0".into(),
                format!("--concurrency={concurrency}"),
                format!("--resync={resync_seconds}s"),
                "--log-format=json".into(),
            ])
            .collect(),
            Subject::SeedDesign => vec![
                format!("--kubeconfig={}", kubeconfig.display()),
                "--admin-addr=127.0.0.1:0".into(),
                format!("--concurrency={concurrency}"),
                format!("--resync={resync_seconds}s"),
            ],
        };
        args.extend(extra.iter().cloned());
        if let Some(dir) = log.parent() {
            fs::create_dir_all(dir)?;
        }
        let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(bin)
            .args(&args)
            // Steady reconciles (no writes) log at debug; the report times them too.
            .env(
                "RUST_LOG",
                "info,database_operator_runtime::controller::handler=debug",
            )
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut op = Operator {
            child: Some(child),
            log: log.to_path_buf(),
            metrics: SocketAddr::from(([127, 0, 0, 1], 0)),
            settings: OperatorSettings {
                subject,
                concurrency,
                resync_seconds,
                args,
                client: match subject {
                    Subject::DatabaseOperator => {
                        "kube-rs 5 client: no client-side QPS/burst limiter (client-go's \
                         default is 5/10); HTTP/1.1 over rustls with a connection pool (each \
                         watch holds one connection); requests bounded by --concurrency \
                         reconciles in flight"
                    }
                    Subject::SeedDesign => {
                        "controller-runtime 0.25 / client-go 0.37: no client-side rate limiter \
                         (QPS -1, as ctrl.GetConfigOrDie sets it); --concurrency workers \
                         (MaxConcurrentReconciles)"
                    }
                }
                .into(),
            },
        };
        let started = Instant::now();
        let (metrics, health) = loop {
            if let Some(addrs) = admin_addrs(&fs::read_to_string(log).unwrap_or_default()) {
                break addrs;
            }
            op.check_alive()?;
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the operator did not log its metrics address within 60 s; see {}",
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        op.metrics = metrics;
        loop {
            if matches!(http_get(health, "/readyz"), Ok((200, _))) {
                break;
            }
            op.check_alive()?;
            if started.elapsed() > Duration::from_secs(120) {
                bail!(
                    "the operator was not ready within 120 s; see {}",
                    log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(op)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Fails when the process has exited, with the end of its log.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_wait()?
        {
            bail!(
                "the operator exited ({status}); last lines of {}:\n{}",
                self.log.display(),
                tail(&self.log, 20)
            );
        }
        Ok(())
    }

    /// The operator's Prometheus exposition.
    pub fn scrape(&self) -> Result<OperatorMetrics> {
        let (code, body) = http_get(self.metrics, "/metrics")?;
        if code != 200 {
            bail!("GET {}/metrics answered {code}", self.metrics);
        }
        Ok(OperatorMetrics::parse(&body))
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
            let _ = kill_process(pid, Signal::TERM);
        }
        let started = Instant::now();
        while started.elapsed() < grace {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(25));
    }
}

/// The metrics and health addresses from the operator's JSON log.
fn admin_addrs(log: &str) -> Option<(SocketAddr, SocketAddr)> {
    let mut metrics = None;
    let mut health = None;
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let field = |k: &str| {
            v.get(k)
                .or_else(|| v.pointer(&format!("/fields/{k}")))
                .and_then(|x| x.as_str())
                .map(str::to_string)
        };
        if !field("message").is_some_and(|m| m.starts_with("admin server listening")) {
            continue;
        }
        let (Some(addr), Some(endpoints)) = (field("addr"), field("endpoints")) else {
            continue;
        };
        let Ok(addr) = addr.parse::<SocketAddr>() else {
            continue;
        };
        if endpoints.contains("/metrics") {
            metrics = Some(addr);
        }
        if endpoints.contains("/readyz") {
            health = Some(addr);
        }
    }
    metrics.zip(health)
}

/// A plain HTTP/1.0 GET to a loopback address; returns status and body.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    if !addr.ip().is_loopback() {
        bail!("refusing to connect to {addr}: only loopback addresses are used");
    }
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP status from {addr}{path}"))?;
    Ok((code, body.to_string()))
}

/// One `reconciled` line of the operator's JSON log.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedReconcile {
    /// When it was logged.
    pub at: jiff::Timestamp,
    /// `elapsed_ms`.
    pub elapsed_ms: f64,
    /// `writes`.
    pub writes: u64,
}

/// Every successful reconcile in the operator's JSON log.
pub fn logged_reconciles(log: &str) -> Vec<LoggedReconcile> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|v| v.get("message").and_then(|m| m.as_str()) == Some("reconciled"))
        .filter_map(|v| {
            Some(LoggedReconcile {
                at: v.get("timestamp")?.as_str()?.parse().ok()?,
                elapsed_ms: v.get("elapsed_ms")?.as_f64()?,
                writes: v.get("writes").and_then(|w| w.as_u64()).unwrap_or(0),
            })
        })
        .collect()
}

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The operator's own counters (for cross-checking the audit log).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OperatorMetrics {
    /// `database_operator_api_writes_total` by `kind verb`.
    pub api_writes: BTreeMap<String, f64>,
    /// `controller_runtime_reconcile_total` by result.
    pub reconciles: BTreeMap<String, f64>,
}

impl OperatorMetrics {
    /// Reads the series the benchmark reports from a text exposition.
    pub fn parse(text: &str) -> OperatorMetrics {
        let mut out = OperatorMetrics::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, parse_labels(rest.trim_end_matches('}'))),
                None => (series, BTreeMap::new()),
            };
            let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
            match name {
                "database_operator_api_writes_total" => {
                    *out.api_writes
                        .entry(format!("{} {}", label("kind"), label("verb")))
                        .or_default() += value;
                }
                "controller_runtime_reconcile_total" => {
                    *out.reconciles.entry(label("result")).or_default() += value;
                }
                _ => {}
            }
        }
        out
    }

    /// Sum of every write counter.
    pub fn writes_total(&self) -> f64 {
        self.api_writes.values().sum()
    }

    /// Sum of every reconcile counter.
    pub fn reconciles_total(&self) -> f64 {
        self.reconciles.values().sum()
    }

    /// `self - before`, per series.
    pub fn since(&self, before: &OperatorMetrics) -> OperatorMetrics {
        let diff = |now: &BTreeMap<String, f64>, then: &BTreeMap<String, f64>| {
            now.iter()
                .map(|(k, v)| (k.clone(), v - then.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v != 0.0)
                .collect()
        };
        OperatorMetrics {
            api_writes: diff(&self.api_writes, &before.api_writes),
            reconciles: diff(&self.reconciles, &before.reconciles),
        }
    }
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for pair in text.split("\",") {
        if let Some((k, v)) = pair.split_once("=\"") {
            out.insert(k.trim().to_string(), v.trim_end_matches('"').to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_admin_addresses_in_a_json_log() {
        let log = r#"{"timestamp":"x","level":"INFO","message":"starting database-operator"}
{"timestamp":"x","level":"INFO","message":"admin server listening (HTTP)","addr":"127.0.0.1:40001","endpoints":"/metrics"}
not json
{"timestamp":"x","level":"INFO","message":"admin server listening (HTTP)","addr":"127.0.0.1:40002","endpoints":"/healthz /readyz"}"#;
        let (m, h) = admin_addrs(log).unwrap();
        assert_eq!(m.port(), 40001);
        assert_eq!(h.port(), 40002);
        assert!(admin_addrs(log.lines().next().unwrap()).is_none());
    }

    #[test]
    fn runs_recorded_before_the_comparison_ran_our_operator() {
        let old = r#"{"concurrency":5,"resync_seconds":30,"args":["run"],"client":"kube-rs"}"#;
        let settings: OperatorSettings = serde_json::from_str(old).unwrap();
        assert_eq!(settings.subject, Subject::DatabaseOperator);
        let seed = OperatorSettings {
            subject: Subject::SeedDesign,
            ..settings
        };
        let text = serde_json::to_string(&seed).unwrap();
        assert!(text.contains(r#""subject":"seed-design""#), "{text}");
        assert_eq!(
            serde_json::from_str::<OperatorSettings>(&text).unwrap(),
            seed
        );
        assert_eq!(Subject::DatabaseOperator.id_infix(), "");
        assert_eq!(Subject::SeedDesign.id_infix(), "seed-design-");
    }

    #[test]
    fn parses_the_reported_series() {
        let text = "# TYPE database_operator_api_writes counter
database_operator_api_writes_total{kind=\"StatefulSet\",verb=\"apply\"} 2
database_operator_api_writes_total{kind=\"DatabaseCluster\",verb=\"patch_status\"} 3
controller_runtime_reconcile_total{controller=\"databasecluster\",result=\"success\"} 10
controller_runtime_reconcile_total{controller=\"databasecluster\",result=\"error\"} 1
# EOF
";
        let m = OperatorMetrics::parse(text);
        assert_eq!(m.api_writes["StatefulSet apply"], 2.0);
        assert_eq!(m.writes_total(), 5.0);
        assert_eq!(m.reconciles["success"], 10.0);
        assert_eq!(m.reconciles_total(), 11.0);
        let later = OperatorMetrics::parse(&text.replace("} 10", "} 25"));
        let d = later.since(&m);
        assert_eq!(d.reconciles.get("success"), Some(&15.0));
        assert!(d.api_writes.is_empty());
    }

    #[test]
    fn reads_reconcile_lines_from_the_log() {
        let log = r#"{"timestamp":"2026-01-01T00:00:01.5Z","level":"INFO","message":"reconciled","writes":3,"elapsed_ms":120,"span":{"name":"reconcile"}}
{"timestamp":"2026-01-01T00:00:02Z","level":"INFO","message":"starting database-operator"}
{"timestamp":"2026-01-01T00:00:03Z","level":"INFO","message":"reconciled","writes":0,"requeue_after_secs":30,"elapsed_ms":1}"#;
        let got = logged_reconciles(log);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].elapsed_ms, got[0].writes), (120.0, 3));
        assert_eq!((got[1].elapsed_ms, got[1].writes), (1.0, 0));
        assert_eq!(got[1].at.to_string(), "2026-01-01T00:00:03Z");
    }

    #[test]
    fn refuses_non_loopback_addresses() {
        let err = http_get("192.0.2.1:80".parse().unwrap(), "/").unwrap_err();
        assert!(err.to_string().contains("loopback"));
    }
}
