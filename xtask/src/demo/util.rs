//! The demo's plumbing: stopping a child, a free port, a plain HTTP GET, the tail of a log,
//! and Ctrl-C caught so that the demo can tear down what it started.

use super::*;

/// SIGTERM, then SIGKILL after `grace`; describes how it ended.
pub(super) fn stop_child(child: &mut Child, grace: Duration) -> String {
    if let Ok(Some(status)) = child.try_wait() {
        return format!("had exited: {status}");
    }
    if let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
        let _ = kill_process(pid, Signal::TERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return format!("exited: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    match child.wait() {
        Ok(status) => format!("killed after {}s: {status}", grace.as_secs()),
        Err(e) => format!("killed after {}s: {e}", grace.as_secs()),
    }
}

/// A free TCP port on 127.0.0.1 (released before it is returned; the operator binds it next).
pub(super) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// A plain-HTTP GET on 127.0.0.1:`port`; status code and body.
pub(super) fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let timeout = Duration::from_secs(2);
    let mut stream =
        TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// The last `n` lines of a file.
pub(super) fn tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// SIGINT/SIGTERM caught on a background thread. The first sets a flag the demo checks between
/// steps and in its wait loops; a second one exits at once.
pub(super) struct Interrupt {
    flag: Arc<AtomicBool>,
}

impl Interrupt {
    pub(super) fn install() -> Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the signal handler")?;
        // Registered here, synchronously: from now on Ctrl-C no longer kills the process.
        let (mut int, mut term) = {
            let _guard = runtime.enter();
            (
                signal(SignalKind::interrupt()).context("catching SIGINT")?,
                signal(SignalKind::terminate()).context("catching SIGTERM")?,
            )
        };
        let flag = Arc::new(AtomicBool::new(false));
        let set = flag.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                runtime.block_on(async {
                    let mut count = 0;
                    loop {
                        tokio::select! {
                            _ = int.recv() => {}
                            _ = term.recv() => {}
                        }
                        count += 1;
                        set.store(true, Ordering::SeqCst);
                        if count > 1 {
                            eprintln!(
                                "\nsecond interrupt: exiting without cleanup; `cargo xtask cluster down` stops the cluster"
                            );
                            std::process::exit(130);
                        }
                        eprintln!("\ninterrupted: cleaning up (press Ctrl-C again to exit at once)");
                    }
                });
            })
            .context("starting the signal thread")?;
        Ok(Self { flag })
    }

    pub(super) fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    pub(super) fn check(&self) -> Result<()> {
        if self.is_set() {
            bail!("interrupted");
        }
        Ok(())
    }
}
