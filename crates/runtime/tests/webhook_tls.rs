//! The admission webhook over real TLS on 127.0.0.1: a CA and serving certificate made with
//! rcgen, an HTTPS client that trusts only that CA, and certificate rotation without a restart.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use database_operator_runtime::webhook::{WebhookConfig, WebhookError, WebhookServer};
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;

/// A CA and a serving certificate for `localhost` signed by it.
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl Pki {
    fn new(ca_name: &str) -> Self {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, ca_name);
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);

        let key = KeyPair::generate().expect("serving key");
        let mut params = CertificateParams::new(vec![
            "localhost".to_owned(),
            "database-operator-webhook.database-operator-system.svc".to_owned(),
        ])
        .expect("serving params");
        params
            .distinguished_name
            .push(DnType::CommonName, "database-operator-webhook");
        let cert = params
            .signed_by(&key, &issuer)
            .expect("serving certificate");
        Self {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    fn write(&self, dir: &Path) {
        // Key first, then certificate, each replaced by rename: a reader may see the new key with
        // the old certificate for a moment, which the server must survive.
        write_atomically(&dir.join("tls.key"), &self.key_pem);
        write_atomically(&dir.join("tls.crt"), &self.cert_pem);
    }
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// An `admission.k8s.io/v1` review of a valid MySQL cluster.
fn review(uid: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "database.example.com", "version": "v1alpha1", "kind": "DatabaseCluster"},
            "resource": {"group": "database.example.com", "version": "v1alpha1", "resource": "databaseclusters"},
            "name": "my-mysql", "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin"},
            "object": {
                "apiVersion": "database.example.com/v1alpha1", "kind": "DatabaseCluster",
                "metadata": {"name": "my-mysql", "namespace": "default"},
                "spec": {"version": "8.4.0", "replicas": 12, "storage": {"size": "20Gi"},
                         "passwordSecretRef": {"name": "mysql-root-password", "key": "password"}}
            },
            "oldObject": null,
            "dryRun": false
        }
    }))
    .expect("review serialises")
}

/// POSTs `body` to `https://localhost:<port><path>` trusting only `ca_pem`.
async fn post(
    addr: SocketAddr,
    ca_pem: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, Value), String> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = TlsConnector::from(Arc::new(config));
    let exchange = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
        let tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP handshake: {e}"))?;
        tokio::spawn(connection);
        let request = Request::post(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request: {e}"))?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        Ok((status, value))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| "timed out".to_owned())?
}

/// Retries until a client trusting `ca_pem` gets an answer (the server picked up the rotation),
/// for at most 10 seconds.
async fn wait_until_served(addr: SocketAddr, ca_pem: &str) -> (u16, Value) {
    let mut last = String::new();
    for _ in 0..200 {
        match post(addr, ca_pem, "/validate", review("after-rotation")).await {
            Ok(answer) => return answer,
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the rotated certificate was not served within 10 s; last error: {last}");
}

struct Running {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), WebhookError>>,
}

async fn start(cert_dir: &Path) -> Running {
    let config = WebhookConfig {
        addr: "127.0.0.1:0".parse().expect("address"),
        cert_dir: cert_dir.to_owned(),
        reload_interval: Duration::from_millis(50),
        ..WebhookConfig::default()
    };
    let server = WebhookServer::bind(config)
        .await
        .expect("the server starts");
    let addr = server.local_addr();
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    Running { addr, stop, task }
}

impl Running {
    async fn shutdown(self) {
        let _ = self.stop.send(());
        let result = tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("the server stops within its grace period")
            .expect("the server task does not panic");
        result.expect("the server stops cleanly");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_round_trip_then_rotation_without_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = Pki::new("first CA");
    first.write(dir.path());
    let server = start(dir.path()).await;

    // A real admission answer over HTTPS, trusting only the first CA.
    let (status, answer) = post(server.addr, &first.ca_pem, "/validate", review("uid-1"))
        .await
        .expect("HTTPS works");
    assert_eq!(status, 200);
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], "uid-1");
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(
        answer["response"]["status"]["message"],
        "1 validation error: spec.replicas: greater than 9 (value: 12)"
    );

    let (status, answer) = post(server.addr, &first.ca_pem, "/mutate", review("uid-2"))
        .await
        .expect("HTTPS works");
    assert_eq!(
        (status, answer["response"]["allowed"].clone()),
        (200, json!(true))
    );
    assert_eq!(answer["response"]["patchType"], "JSONPatch");

    // A client trusting another CA is refused by its own verification.
    let second = Pki::new("second CA");
    let err = post(server.addr, &second.ca_pem, "/validate", review("uid-3"))
        .await
        .expect_err("untrusted");
    assert!(
        err.contains("UnknownIssuer") || err.contains("invalid peer certificate"),
        "{err}"
    );

    // Rotate: a serving certificate from a new CA. The same server answers with it.
    second.write(dir.path());
    let (status, answer) = wait_until_served(server.addr, &second.ca_pem).await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["uid"], "after-rotation");
    let err = post(server.addr, &first.ca_pem, "/validate", review("uid-4"))
        .await
        .expect_err("old CA no longer served");
    assert!(
        err.contains("UnknownIssuer") || err.contains("invalid peer certificate"),
        "{err}"
    );

    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_rotation_keeps_the_previous_certificate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = Pki::new("first CA");
    first.write(dir.path());
    let server = start(dir.path()).await;
    post(server.addr, &first.ca_pem, "/validate", review("a"))
        .await
        .expect("served");

    // A key that does not belong to the certificate, then a certificate file that is not PEM:
    // neither replaces the certificate in service.
    let other = Pki::new("other CA");
    write_atomically(&dir.path().join("tls.key"), &other.key_pem);
    tokio::time::sleep(Duration::from_millis(300)).await;
    post(server.addr, &first.ca_pem, "/validate", review("b"))
        .await
        .expect("still the first certificate");
    write_atomically(&dir.path().join("tls.crt"), "not a certificate");
    tokio::time::sleep(Duration::from_millis(300)).await;
    post(server.addr, &first.ca_pem, "/validate", review("c"))
        .await
        .expect("still the first certificate");
    std::fs::remove_file(dir.path().join("tls.crt")).expect("remove");
    tokio::time::sleep(Duration::from_millis(300)).await;
    post(server.addr, &first.ca_pem, "/validate", review("d"))
        .await
        .expect("still the first certificate");

    // A good pair is picked up after the bad ones.
    let good = Pki::new("good CA");
    good.write(dir.path());
    let (status, _) = wait_until_served(server.addr, &good.ca_pem).await;
    assert_eq!(status, 200);

    server.shutdown().await;
}

/// Kubernetes mounts a Secret as `tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>`, and
/// rotates by swapping the `..data` symlink atomically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_through_a_secret_volume_symlink_swap() {
    use std::os::unix::fs::symlink;

    let dir = tempfile::tempdir().expect("temp dir");
    let first = Pki::new("first CA");
    let v1 = dir.path().join("..2026_01_01");
    std::fs::create_dir(&v1).expect("mkdir");
    std::fs::write(v1.join("tls.crt"), &first.cert_pem).expect("write");
    std::fs::write(v1.join("tls.key"), &first.key_pem).expect("write");
    symlink("..2026_01_01", dir.path().join("..data")).expect("symlink");
    symlink("..data/tls.crt", dir.path().join("tls.crt")).expect("symlink");
    symlink("..data/tls.key", dir.path().join("tls.key")).expect("symlink");
    let server = start(dir.path()).await;
    post(server.addr, &first.ca_pem, "/validate", review("a"))
        .await
        .expect("served");

    let second = Pki::new("second CA");
    let v2 = dir.path().join("..2026_02_01");
    std::fs::create_dir(&v2).expect("mkdir");
    std::fs::write(v2.join("tls.crt"), &second.cert_pem).expect("write");
    std::fs::write(v2.join("tls.key"), &second.key_pem).expect("write");
    symlink("..2026_02_01", dir.path().join("..data_tmp")).expect("symlink");
    std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).expect("swap");
    std::fs::remove_dir_all(&v1).expect("old version removed");

    let (status, answer) = wait_until_served(server.addr, &second.ca_pem).await;
    assert_eq!(
        (status, answer["response"]["uid"].clone()),
        (200, json!("after-rotation"))
    );
    server.shutdown().await;
}

#[tokio::test]
async fn start_fails_clearly_without_a_usable_certificate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = WebhookConfig {
        addr: "127.0.0.1:0".parse().expect("address"),
        cert_dir: dir.path().to_owned(),
        ..WebhookConfig::default()
    };

    let err = WebhookServer::bind(config.clone())
        .await
        .err()
        .expect("no files");
    assert!(
        matches!(err, WebhookError::ReadCertificate { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("tls.crt"), "{err}");

    let pki = Pki::new("CA");
    std::fs::write(dir.path().join("tls.crt"), &pki.cert_pem).expect("write");
    std::fs::write(dir.path().join("tls.key"), Pki::new("other").key_pem).expect("write");
    let err = WebhookServer::bind(config.clone())
        .await
        .err()
        .expect("mismatched pair");
    assert!(
        matches!(err, WebhookError::InvalidCertificate { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("tls.key") && err.to_string().contains("does not match"),
        "{err}"
    );

    std::fs::write(dir.path().join("tls.crt"), "-----BEGIN GARBAGE-----\n").expect("write");
    let err = WebhookServer::bind(config.clone())
        .await
        .err()
        .expect("no certificate");
    assert!(err.to_string().contains("tls.crt"), "{err}");

    std::fs::write(dir.path().join("tls.crt"), &pki.cert_pem).expect("write");
    std::fs::write(dir.path().join("tls.key"), "no key here").expect("write");
    let err = WebhookServer::bind(config.clone())
        .await
        .err()
        .expect("no key");
    assert!(
        err.to_string().contains("tls.key") && err.to_string().contains("private key"),
        "{err}"
    );

    // With a good pair it starts; a second server on the same port is refused with the address.
    std::fs::write(dir.path().join("tls.key"), &pki.key_pem).expect("write");
    let first = WebhookServer::bind(config.clone()).await.expect("starts");
    let taken = WebhookConfig {
        addr: first.local_addr(),
        ..config
    };
    let err = WebhookServer::bind(taken).await.err().expect("port taken");
    assert!(matches!(err, WebhookError::Bind { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&first.local_addr().to_string()),
        "{err}"
    );
}

/// Plain HTTP to the HTTPS port gets nowhere, and the server keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_is_not_served() {
    use std::io::{Read as _, Write as _};

    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new("CA");
    pki.write(dir.path());
    let server = start(dir.path()).await;

    let addr = server.addr;
    let answer = tokio::task::spawn_blocking(move || {
        let mut tcp = std::net::TcpStream::connect(addr).expect("connect");
        tcp.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        tcp.write_all(b"POST /validate HTTP/1.1\r\nhost: localhost\r\ncontent-length: 2\r\n\r\n{}")
            .expect("write");
        let mut buf = Vec::new();
        // The server closes the connection (EOF) or resets it; either way no answer comes.
        let _ = tcp.read_to_end(&mut buf);
        buf
    })
    .await
    .expect("the client thread does not panic");
    assert!(!String::from_utf8_lossy(&answer).contains("AdmissionReview"));

    post(server.addr, &pki.ca_pem, "/validate", review("after"))
        .await
        .expect("still serving");
    server.shutdown().await;
}
