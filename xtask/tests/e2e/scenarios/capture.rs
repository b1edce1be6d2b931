//! A packet capture of the database ports for the rest of the suite (secure by default: "a packet
//! capture on the loopback interface during a full scenario finds none of the passwords and no
//! SQL text").
//!
//! `capture::begins` starts `tcpdump` on the loopback interface for TCP port 5432 or 3306 (the
//! kernel filters: the API server's traffic is never copied), writing pcap to its stdout, which
//! a thread reads as it comes into [`xtask::wire_scan::Scanner`]: every segment's payload is
//! searched for SQL text and for every password the cluster holds (the values under keys
//! containing `password` of every Secret, learnt from a watch as they are written: superusers',
//! the operator's and replication accounts', rotated ones). Every scenario after it (writes,
//! failovers, switchovers, backups, restores, rotation, upgrades) runs under the capture; the
//! check at the end of the suite fails on any finding, on a capture the kernel dropped segments
//! of, and on a capture that saw nothing.
//!
//! A server a scenario reaches in plain text on purpose, outside any DatabaseCluster (the bare
//! PostgreSQL pod of `process_nodes`), is exempt while the scenario says so ([`exempt`]).

use std::io::{BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use xtask::wire_scan::{PORTS, SQL, Scanner};

use crate::harness::{Ctx, lock};

/// Runs tcpdump (`$@`) until the shell's stdin closes, then stops it with SIGTERM (it flushes and
/// prints its counts); the shell exits with tcpdump (also when it fails at once): a suite that ends without the check, or dies, never
/// leaves tcpdump running with its kernel buffer.
const WATCHDOG: &str = "exec 3<&0; tcpdump \"$@\" & pid=$!; \
{ read -r _ <&3 || true; kill -TERM \"$pid\" 2>/dev/null; } >/dev/null 2>&1 & wait \"$pid\"";

/// How much of each segment is captured: segments on the loopback interface carry up to 64 KiB;
/// text sent in clear shows within the first 32 KiB of any segment it fills (a plain dump or
/// batch is SQL throughout, a password travels in a short statement or handshake), and half the
/// bytes of the bulk transfers (clones, dumps, WAL) keep the capture complete under their bursts.
const SNAPLEN: u32 = 32 * 1024;

/// A TCP segment that carries data: the IP length minus the IP and TCP headers is not zero.
const WITH_DATA: &str = "(ip[2:2] - ((ip[0] & 0xf) << 2) - ((tcp[12] & 0xf0) >> 2)) != 0";

/// The capture running for the suite, if `capture::begins` started one.
static CAPTURE: OnceLock<Mutex<Option<Capture>>> = OnceLock::new();

fn slot() -> &'static Mutex<Option<Capture>> {
    CAPTURE.get_or_init(|| Mutex::new(None))
}

/// The running capture: tcpdump, its reader, and the Secret watch.
struct Capture {
    /// `sh` running tcpdump until its stdin closes ([`WATCHDOG`]).
    tcpdump: Child,
    /// Its stdin: dropped (closed) to stop tcpdump, also when the suite dies.
    stop: Option<std::process::ChildStdin>,
    reader: std::thread::JoinHandle<Result<()>>,
    scanner: Arc<Scanner>,
    watch: tokio::task::JoinHandle<()>,
    started: SystemTime,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Exempts the server at `ip` from the search until the returned guard is dropped (from a second
/// before to a second after): a scenario that reaches a server outside any DatabaseCluster in
/// plain text on purpose. A no-op without a capture.
pub fn exempt(ip: &str) -> ExemptionGuard {
    let (Ok(addr), Some(scanner)) = (
        ip.parse::<std::net::Ipv4Addr>(),
        lock(slot()).as_ref().map(|c| c.scanner.clone()),
    ) else {
        return ExemptionGuard(None);
    };
    let index = scanner.exempt(addr, unix_now() - 1.0);
    ExemptionGuard(Some((scanner, index)))
}

/// Ends an exemption of [`exempt`] when dropped.
pub struct ExemptionGuard(Option<(Arc<Scanner>, usize)>);

impl Drop for ExemptionGuard {
    fn drop(&mut self) {
        if let Some((scanner, index)) = self.0.take() {
            scanner.end_exemption(index, unix_now() + 1.0);
        }
    }
}

/// `capture::begins`: starts tcpdump on the loopback interface and the watch of the cluster's
/// Secrets, for [`nothing_in_clear_on_the_database_ports`] to check at the end of the suite.
pub async fn begins(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    let filter = PORTS
        .iter()
        .map(|p| format!("port {p}"))
        .collect::<Vec<_>>()
        .join(" or ");
    // Segments with data only (no bare acknowledgements), their first SNAPLEN bytes, a 1 GiB
    // kernel buffer for the bursts of a clone or a backup at loopback speed, and tcpdump's own
    // buffering (not -U): what counts is that no segment is dropped, not how soon it is read.
    let mut tcpdump = Command::new("sh")
        .args(["-c", WATCHDOG, "sh"])
        .args(["-i", "lo", "-n", "-B", "1048576", "-w", "-"])
        .args(["-s", &SNAPLEN.to_string()])
        .arg(format!("tcp and ({filter}) and {WITH_DATA}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting tcpdump (.ci/run installs it: Debian package tcpdump)")?;
    let stdout = tcpdump.stdout.take().context("tcpdump's stdout")?;
    let stop = tcpdump.stdin.take();
    let scanner = Arc::new(Scanner::new()?);
    let reader = {
        let scanner = scanner.clone();
        std::thread::spawn(move || scanner.read_pcap(BufReader::with_capacity(1 << 20, stdout)))
    };
    let watch = {
        let scanner = scanner.clone();
        let secrets: Api<Secret> = Api::all(env.client.clone());
        tokio::spawn(async move {
            let mut stream = watcher(secrets, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(secret) = stream.next().await {
                let Ok(secret) = secret else { continue };
                learn(&scanner, &secret);
            }
        })
    };
    // A capture that never starts must not pass silently.
    tokio::time::sleep(Duration::from_secs(1)).await;
    if let Some(status) = tcpdump.try_wait()? {
        let mut said = String::new();
        if let Some(mut err) = tcpdump.stderr.take() {
            let _ = err.read_to_string(&mut said);
        }
        watch.abort();
        bail!("tcpdump exited at once ({status}): {}", said.trim());
    }
    *lock(slot()) = Some(Capture {
        tcpdump,
        stop,
        reader,
        scanner,
        watch,
        started: SystemTime::now(),
    });
    ctx.note(format!(
        "tcpdump on lo, tcp and ({filter}), segments with data, their first {} KiB: searched for {} SQL phrases and the cluster's passwords until the end of the suite",
        SNAPLEN / 1024,
        SQL.len()
    ));
    Ok(())
}

/// The password values of `secret` (keys containing `password`) become needles.
fn learn(scanner: &Scanner, secret: &Secret) {
    let Some(data) = secret.data.as_ref() else {
        return;
    };
    let name = format!(
        "{}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    );
    for (key, value) in data {
        if key.to_ascii_lowercase().contains("password")
            && let Err(e) = scanner.learn(&format!("{name} {key}"), &value.0)
        {
            eprintln!("capture: learning {name} {key}: {e:#}");
        }
    }
}

/// `capture::nothing_in_clear_on_the_database_ports`: stops the capture and fails on any SQL
/// text or password seen in clear, on segments the kernel dropped, and on an empty capture.
pub async fn nothing_in_clear_on_the_database_ports(ctx: &Ctx) -> Result<()> {
    let Capture {
        mut tcpdump,
        stop,
        reader,
        scanner,
        watch,
        started,
    } = lock(slot())
        .take()
        .context("no capture running: capture::begins did not run or failed")?;
    // Its stdin closed: tcpdump gets SIGTERM, flushes, prints its counts and exits; the reader
    // then reads to the end.
    drop(stop);
    let (status, said, read) = tokio::task::spawn_blocking(move || {
        let status = tcpdump.wait();
        let mut said = String::new();
        if let Some(mut err) = tcpdump.stderr.take() {
            let _ = err.read_to_string(&mut said);
        }
        let read = reader
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the reader thread panicked")));
        (status, said, read)
    })
    .await?;
    watch.abort();
    let status = status.context("waiting for tcpdump")?;
    let count = |what: &str| {
        said.lines()
            .find_map(|l| l.strip_suffix(what))
            .and_then(|n| n.trim().parse::<u64>().ok())
    };
    let dropped = count(" packets dropped by kernel");
    let received = count(" packets received by filter");
    let passwords = scanner.passwords();
    let found = scanner.take_findings();
    let seconds = SystemTime::now()
        .duration_since(started)
        .unwrap_or_default()
        .as_secs_f64();
    ctx.note(format!(
        "{seconds:.0} s captured: {} connection directions on the database ports, {} segments with data, {:.1} MiB of payload searched for {} SQL phrases and {passwords} passwords; {} segments of exempt servers; {} received by the filter, {} dropped by the kernel",
        found.connections.len(),
        found.segments,
        found.payload_bytes as f64 / f64::from(1u32 << 20),
        SQL.len(),
        found.exempt_segments,
        received.map_or_else(|| "?".to_owned(), |n| n.to_string()),
        dropped.map_or_else(|| "? (tcpdump did not say)".to_owned(), |n| n.to_string()),
    ));
    read.with_context(|| format!("reading the capture (tcpdump {status}: {})", said.trim()))?;
    ensure!(
        found.hits.is_empty(),
        "{} findings in clear on the database ports, the first: {}",
        found.hits.len(),
        found
            .hits
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ")
    );
    ensure!(
        passwords > 0,
        "no password learnt from the cluster's Secrets: nothing to search for"
    );
    ensure!(
        found.segments > found.exempt_segments,
        "no segment captured on the database ports: nothing was checked"
    );
    ensure!(
        dropped == Some(0),
        "tcpdump dropped segments or did not say ({}): the capture is incomplete",
        said.trim()
    );
    Ok(())
}

/// Stops a capture that no check took (the suite ended without
/// [`nothing_in_clear_on_the_database_ports`], or it failed before): tcpdump exits.
pub fn stop_if_running() {
    if let Some(mut capture) = lock(slot()).take() {
        drop(capture.stop.take());
        capture.watch.abort();
        let _ = capture.tcpdump.wait();
    }
}
