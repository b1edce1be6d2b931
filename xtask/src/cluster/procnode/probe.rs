//! Running one probe (exec in the container, TCP connect, HTTP GET) with its
//! timeout. Only loopback addresses are ever dialled.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub enum Action {
    Exec {
        nsenter: PathBuf,
        pid: u32,
        uid: i64,
        gid: i64,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    },
    Tcp {
        addr: SocketAddr,
    },
    Http {
        addr: SocketAddr,
        host: String,
        path: String,
    },
}

/// Runs the probe; true on success. Never blocks longer than about
/// `timeout`.
pub fn run(action: &Action, timeout: Duration) -> bool {
    match action {
        Action::Exec {
            nsenter,
            pid,
            uid,
            gid,
            argv,
            env,
        } => {
            let mut cmd = Command::new(nsenter);
            cmd.arg(format!("--target={pid}"))
                .args(["--mount", "--uts", "--root", "--wd"])
                .arg(format!("--setuid={uid}"))
                .arg(format!("--setgid={gid}"))
                .arg("--")
                .args(argv)
                .env_clear()
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0);
            let Ok(mut child) = cmd.spawn() else {
                return false;
            };
            let deadline = Instant::now() + timeout;
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => return status.success(),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        if let Some(p) = rustix::process::Pid::from_raw(child.id() as i32) {
                            let _ = rustix::process::kill_process_group(
                                p,
                                rustix::process::Signal::KILL,
                            );
                        }
                        let _ = child.wait();
                        return false;
                    }
                }
            }
        }
        Action::Tcp { addr } => loopback(addr) && TcpStream::connect_timeout(addr, timeout).is_ok(),
        Action::Http { addr, host, path } => {
            loopback(addr)
                && http_status(addr, host, path, timeout).is_some_and(|c| (200..400).contains(&c))
        }
    }
}

use std::os::unix::process::CommandExt as _;

fn loopback(addr: &SocketAddr) -> bool {
    match addr.ip() {
        IpAddr::V4(ip) => ip.is_loopback(),
        IpAddr::V6(ip) => ip.is_loopback(),
    }
}

fn http_status(addr: &SocketAddr, host: &str, path: &str, timeout: Duration) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kube-probe/process-node\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).ok()?;
    let text = String::from_utf8_lossy(&head[..n]);
    text.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    #[test]
    fn tcp_and_http_probes_on_loopback() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
                .unwrap();
        });
        let http = Action::Http {
            addr,
            host: "127.0.0.1".into(),
            path: "/readyz".into(),
        };
        assert!(!run(&http, Duration::from_secs(2)));
        server.join().unwrap();
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(run(&Action::Tcp { addr }, Duration::from_secs(1)));
        drop(listener);
        assert!(!run(&Action::Tcp { addr }, Duration::from_secs(1)));
        // Never anything but loopback.
        let outside = Action::Tcp {
            addr: SocketAddr::from((Ipv4Addr::new(10, 96, 0, 1), 443)),
        };
        assert!(!run(&outside, Duration::from_millis(100)));
    }
}
