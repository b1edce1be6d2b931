//! Starting and stopping component processes, and small loopback probes.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::process::{Pid, Signal, kill_process_group, test_kill_process};

/// `n` distinct free ports (held open together so they cannot repeat).
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<std::io::Result<_>>()
        .context("binding 127.0.0.1:0 to find free ports")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// Starts `binary` with `args`, stdout and stderr appended to `log`, in its
/// own process group so a Ctrl-C in the terminal that ran `up` does not reach
/// it and `down` can signal the group.
///
/// `env` adds environment variables (secrets go there, never in argv or `state.json`).
pub fn spawn(
    binary: &Path,
    args: &[String],
    env: &[(String, String)],
    log: &Path,
) -> Result<Child> {
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    Command::new(binary)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))
}

/// True when `pid` is alive, not a zombie, and runs `binary`. Guards against
/// signalling an unrelated process that reused a recorded pid.
pub fn is_running(pid: u32, binary: &Path) -> bool {
    let Some(p) = Pid::from_raw(pid as i32) else {
        return false;
    };
    if test_kill_process(p).is_err() {
        return false;
    }
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesised command name.
    if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r.trim_start())
        && (rest.starts_with('Z') || rest.starts_with('X'))
    {
        return false;
    }
    match fs::read_link(format!("/proc/{pid}/exe")) {
        Ok(exe) => {
            let exe = exe.to_string_lossy();
            let exe = exe.trim_end_matches(" (deleted)");
            Path::new(exe) == binary
                || fs::canonicalize(binary)
                    .map(|b| b == Path::new(exe))
                    .unwrap_or(false)
        }
        Err(_) => false,
    }
}

/// Sends SIGTERM to the process group `pid` (each component leads its own),
/// waits up to `grace`, then SIGKILL. Only signals when `is_running` confirms
/// the pid still runs `binary`. Returns true when something was stopped.
pub fn stop(pid: u32, binary: &Path, grace: Duration, child: Option<&mut Child>) -> bool {
    if !is_running(pid, binary) {
        if let Some(child) = child {
            let _ = child.try_wait();
        }
        return false;
    }
    let Some(p) = Pid::from_raw(pid as i32) else {
        return false;
    };
    let _ = kill_process_group(p, Signal::TERM);
    let mut child = child;
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Some(c) = child.as_deref_mut() {
            let _ = c.try_wait();
        }
        if !is_running(pid, binary) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = kill_process_group(p, Signal::KILL);
    if let Some(c) = child {
        let _ = c.wait();
    } else {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && is_running(pid, binary) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    true
}

/// The last `lines` lines of a log file, for error messages.
pub fn tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// A plain-HTTP GET on 127.0.0.1 (etcd's client port); returns status code
/// and body.
pub fn http_get_loopback(port: u16, path: &str, timeout: Duration) -> Result<(u16, String)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// True when something accepts TCP connections on 127.0.0.1:`port`.
pub fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        Duration::from_millis(500),
    )
    .is_ok()
}
