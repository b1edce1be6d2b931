//! `database-operator run` as a process: it binds the admin ports it is given (port 0 picks
//! one and the log says which), reports not-ready while it cannot reach the API server, and
//! stops cleanly on SIGTERM. The API server address is a closed loopback port.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.to_owned(),
    )
}

#[cfg(unix)]
#[test]
fn run_binds_reports_and_stops_on_sigterm() {
    let closed_port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: http://127.0.0.1:{closed_port}\n\
             contexts:\n- name: local\n  context:\n    cluster: local\n    user: nobody\n\
             current-context: local\nusers:\n- name: nobody\n  user:\n    token: not-a-real-token\n"
        ),
    )
    .unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_database-operator"))
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "--leader-elect=false",
            "--webhook=false",
            "--metrics-addr",
            "127.0.0.1:0",
            "--health-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let (tx, rx) = mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let mut metrics_addr = None;
    let mut health_addr = None;
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while metrics_addr.is_none() || health_addr.is_none() {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no listening lines; log so far:\n{}", seen.join("\n")));
        seen.push(line.clone());
        let Ok(json) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if json["message"] == "admin server listening (HTTP)" {
            let addr: SocketAddr = json["addr"].as_str().unwrap().parse().unwrap();
            assert_ne!(addr.port(), 0);
            match json["endpoints"].as_str().unwrap() {
                "/metrics" => metrics_addr = Some(addr),
                "/healthz /readyz" => health_addr = Some(addr),
                other => panic!("unexpected endpoints {other}"),
            }
        }
    }
    let (metrics_addr, health_addr) = (metrics_addr.unwrap(), health_addr.unwrap());

    assert_eq!(get(health_addr, "/healthz").0, 200);
    assert_eq!(
        get(health_addr, "/readyz").0,
        503,
        "the caches cannot sync without an API server"
    );
    let (status, body) = get(metrics_addr, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("database_operator_leader 1"), "{body}");
    // --concurrency 5 (the default) is the write lane; the controller runs four times as many.
    assert!(
        body.contains(
            "controller_runtime_max_concurrent_reconciles{controller=\"databasecluster\"} 20"
        ),
        "{body}"
    );

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Nothing was in flight (the caches never synced): it stops at once, not after the grace
    // period for in-flight reconciles.
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("did not stop within 10s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "exit status {exit:?}");
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(
        rest.iter().any(|l| l.contains("\"stopped\"")),
        "{}",
        rest.join("\n")
    );

    // --log-format json: every line is one JSON object with a level, a target and a message
    // (what log pipelines split on), and no terminal colour codes anywhere.
    let lines: Vec<&String> = seen.iter().chain(&rest).collect();
    assert!(lines.len() >= 4, "only {} log lines", lines.len());
    for line in lines {
        assert!(
            !line.contains('\u{1b}'),
            "a colour code in a JSON log line: {line:?}"
        );
        let json: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a log line that is not one JSON object ({e}): {line}"));
        assert!(json.is_object(), "{line}");
        for field in ["timestamp", "level", "target"] {
            assert!(json[field].is_string(), "no {field} in {line}");
        }
        assert!(
            json["message"].is_string() || json["fields"].is_object(),
            "no message in {line}"
        );
    }
}

/// Text logs into a pipe (as `kubectl logs` and log files see them) carry no colour codes.
#[test]
fn text_logs_into_a_pipe_have_no_colour_codes() {
    let out = Command::new(env!("CARGO_BIN_EXE_database-operator"))
        .args([
            "run",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--leader-elect=false",
            "--webhook=false",
            "--metrics-addr",
            "127.0.0.1:0",
            "--health-addr",
            "127.0.0.1:0",
        ])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "runs without a kubeconfig");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("starting database-operator"), "{stderr}");
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in piped logs: {stderr:?}"
    );
}
