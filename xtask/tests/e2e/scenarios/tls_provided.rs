//! A certificate the user provides (`spec.tls.certificateSecret`), on a running cluster under a
//! writer: one that does not cover the cluster's names is refused with the names it misses and
//! never reaches the servers; a good one from another authority (made here with `openssl`, an
//! RSA key in PKCS#1 as cert-manager writes by default) is copied and served by every member
//! without a restart, `<name>-ca` publishes that authority (first, the operator's beside it); a renewal in the Secret (an EC key in
//! SEC1) is served in turn; without the field the operator's own authority comes back.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use database_operator_api::DatabaseCluster;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::env::Env;
use crate::harness::{Ctx, lock};
use crate::scenarios::databases::{Engine, pod_ip};
use crate::scenarios::failover::Load;
use crate::scenarios::tls::{RENEWAL_TIMEOUT, RENEWAL_WRITE_GAP, served_certificate};
use crate::util::{Check, api, condition, wait_for};

/// The user's Secret, beside the cluster.
fn user_secret(name: &str) -> String {
    format!("{name}-corp-cert")
}

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running openssl")?;
    ensure!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A corporate authority of the test's own (RSA), in `dir`: `ca.crt`, `ca.key`.
fn corporate_ca(dir: &Path) -> Result<()> {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "30",
            "-subj",
            "/CN=Corp Test Root",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    )
}

/// A server certificate `<stem>.crt` signed by the corporate authority for `names`, with a new
/// key `<stem>.key`: RSA in PKCS#1 (`rsa`) or P-256 in SEC1.
fn server_certificate(dir: &Path, stem: &str, names: &[String], rsa: bool) -> Result<PathBuf> {
    let key = format!("{stem}.key");
    if rsa {
        openssl(dir, &["genrsa", "-traditional", "-out", &key, "2048"])?;
    } else {
        openssl(
            dir,
            &[
                "ecparam",
                "-name",
                "prime256v1",
                "-genkey",
                "-noout",
                "-out",
                &key,
            ],
        )?;
    }
    let csr = format!("{stem}.csr");
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            &key,
            "-subj",
            &format!("/CN={}", names[0]),
            "-out",
            &csr,
        ],
    )?;
    let sans: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
    let ext = dir.join(format!("{stem}.ext"));
    fs::write(
        &ext,
        format!(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName={}\n",
            sans.join(",")
        ),
    )?;
    let crt = format!("{stem}.crt");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "10",
            "-out",
            &crt,
            "-extfile",
            &ext.display().to_string(),
        ],
    )?;
    Ok(dir.join(stem))
}

/// The names cert-manager would be asked for: the Services in every form and a wildcard for the
/// members.
fn cluster_names(ns: &str, name: &str) -> Vec<String> {
    let mut names = Vec::new();
    for service in [
        name.to_owned(),
        format!("{name}-replicas"),
        format!("{name}-headless"),
    ] {
        for suffix in [
            String::new(),
            format!(".{ns}"),
            format!(".{ns}.svc"),
            format!(".{ns}.svc.cluster.local"),
        ] {
            names.push(format!("{service}{suffix}"));
        }
    }
    names.push(format!("*.{name}-headless.{ns}.svc"));
    names.push(format!("*.{name}-headless.{ns}.svc.cluster.local"));
    names
}

/// Writes `<stem>.crt`, `<stem>.key` and the authority into the user's Secret (created or
/// replaced), as cert-manager does on issue and renewal.
async fn put_user_secret(env: &Env, ns: &str, name: &str, stem: &Path, dir: &Path) -> Result<()> {
    let read = |path: PathBuf| fs::read(&path).with_context(|| format!("{}", path.display()));
    let data = [
        ("tls.crt", read(stem.with_extension("crt"))?),
        ("tls.key", read(stem.with_extension("key"))?),
        ("ca.crt", read(dir.join("ca.crt"))?),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v)))
    .collect();
    let secrets: Api<Secret> = api(env, ns);
    let mut secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(user_secret(name)),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(data),
        ..Secret::default()
    };
    match secrets.get_opt(&user_secret(name)).await? {
        Some(existing) => {
            secret.metadata.resource_version = existing.resource_version();
            secrets
                .replace(&user_secret(name), &PostParams::default(), &secret)
                .await?;
        }
        None => {
            secrets.create(&PostParams::default(), &secret).await?;
        }
    }
    Ok(())
}

/// The first certificate of a PEM file, without spaces (as [`served_certificate`] reads one).
fn first_certificate(path: &Path) -> Result<String> {
    let text = fs::read_to_string(path)?;
    let end = text
        .find("-----END CERTIFICATE-----")
        .context("no certificate")?;
    Ok(text[..end].split_whitespace().collect())
}

/// Waits until every member serves `certificate`.
async fn every_member_serves(engine: Engine, members: &[Pod], certificate: &str) -> Result<()> {
    wait_for(
        "every member serving the certificate",
        RENEWAL_TIMEOUT,
        async || {
            let mut behind = Vec::new();
            for pod in members {
                if served_certificate(engine, &pod_ip(pod)?)? != certificate {
                    behind.push(pod.name_any());
                }
            }
            Ok(if behind.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(format!("another certificate: {behind:?}"))
            })
        },
    )
    .await
}

/// The steps of the module's description on the running cluster `ns/name` with `members`, under
/// `load`. The cluster ends on the operator's own authority again.
pub(crate) async fn provided_certificate_steps(
    ctx: &Ctx,
    env: &Env,
    engine: Engine,
    ns: &str,
    name: &str,
    members: &[Pod],
    load: &Load,
) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("e2e-corp-ca-{ns}-{name}"));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    corporate_ca(&dir)?;
    let clusters: Api<DatabaseCluster> = api(env, ns);
    let operators = served_certificate(engine, &pod_ip(&members[0])?)?;

    // 1. A certificate without the read-only Service's names: refused, never served.
    let mut partial = cluster_names(ns, name);
    partial.retain(|n| !n.starts_with(&format!("{name}-replicas")));
    let stem = server_certificate(&dir, "partial", &partial, true)?;
    put_user_secret(env, ns, name, &stem, &dir).await?;
    let patch = serde_json::json!({"spec": {"tls": {"certificateSecret": user_secret(name)}}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let why = wait_for(
        "Degraded TLSCertificateUnusable",
        Duration::from_secs(30),
        async || {
            let dbc = clusters.get(name).await?;
            Ok(match condition(&dbc, "Degraded") {
                Some(c) if c.status == "True" && c.reason == "TLSCertificateUnusable" => {
                    Check::Done(c.message.clone())
                }
                other => Check::Pending(format!("{:?}", other.map(|c| (&c.status, &c.reason)))),
            })
        },
    )
    .await?;
    ensure!(
        why.contains(&format!("does not cover {name}-replicas"))
            && why.contains("the servers keep the certificate they have"),
        "the condition does not name the missing names: {why}"
    );
    ctx.note(format!(
        "{engine:?}: a provided certificate without {name}-replicas: {why}"
    ));
    for pod in members {
        ensure!(
            served_certificate(engine, &pod_ip(pod)?)? == operators,
            "{} serves another certificate after an unusable one was provided",
            pod.name_any()
        );
    }

    // 2. A good one (RSA, PKCS#1): copied, served by every member, the authority published.
    let stem = server_certificate(&dir, "issued", &cluster_names(ns, name), true)?;
    let started = Instant::now();
    put_user_secret(env, ns, name, &stem, &dir).await?;
    let issued = first_certificate(&stem.with_extension("crt"))?;
    every_member_serves(engine, members, &issued).await?;
    let took = started.elapsed();
    let gap = lock(&load.writes).gap_after(started);
    ctx.note(format!(
        "{engine:?}: the provided certificate (RSA, PKCS#1 key) served by every member {:.1}s after the Secret was written, write gap {:.2}s",
        took.as_secs_f64(),
        gap.as_secs_f64()
    ));
    ensure!(
        gap <= RENEWAL_WRITE_GAP,
        "write gap {:.2}s while the provided certificate was loaded",
        gap.as_secs_f64()
    );
    let published = crate::scenarios::databases::published_ca(env, ns, name).await?;
    ensure!(
        String::from_utf8_lossy(&published)
            .split_whitespace()
            .collect::<String>()
            .starts_with(
                &fs::read_to_string(dir.join("ca.crt"))?
                    .split_whitespace()
                    .collect::<String>()
            ),
        "{ns}/{name}-ca does not publish the corporate authority first (the operator's stays beside it)"
    );
    crate::scenarios::databases::members_serve_the_clusters_certificate(
        ctx, env, engine, ns, name, members,
    )
    .await?;
    wait_for("Degraded False", Duration::from_secs(30), async || {
        let dbc = clusters.get(name).await?;
        Ok(match condition(&dbc, "Degraded") {
            Some(c) if c.status == "False" => Check::Done(()),
            other => Check::Pending(format!("{:?}", other.map(|c| (&c.reason, &c.message)))),
        })
    })
    .await?;

    // 3. Renewed in the Secret (a P-256 key in SEC1): served without a restart.
    let stem = server_certificate(&dir, "renewed", &cluster_names(ns, name), false)?;
    let started = Instant::now();
    put_user_secret(env, ns, name, &stem, &dir).await?;
    every_member_serves(
        engine,
        members,
        &first_certificate(&stem.with_extension("crt"))?,
    )
    .await?;
    let gap = lock(&load.writes).gap_after(started);
    ctx.note(format!(
        "{engine:?}: the renewed provided certificate (P-256, SEC1 key) served by every member {:.1}s after the Secret changed, write gap {:.2}s",
        started.elapsed().as_secs_f64(),
        gap.as_secs_f64()
    ));
    ensure!(
        gap <= RENEWAL_WRITE_GAP,
        "write gap {:.2}s while the renewal was loaded",
        gap.as_secs_f64()
    );

    // 4. Without the field: the operator's own authority again.
    let renewed = first_certificate(&stem.with_extension("crt"))?;
    let patch = serde_json::json!({"spec": {"tls": {"certificateSecret": null}}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_for(
        "every member serving the operator's certificate",
        RENEWAL_TIMEOUT,
        async || {
            let mut still = Vec::new();
            for pod in members {
                if served_certificate(engine, &pod_ip(pod)?)? == renewed {
                    still.push(pod.name_any());
                }
            }
            Ok(if still.is_empty() {
                Check::Done(())
            } else {
                Check::Pending(format!("the provided one: {still:?}"))
            })
        },
    )
    .await?;
    crate::scenarios::databases::members_serve_the_clusters_certificate(
        ctx, env, engine, ns, name, members,
    )
    .await?;
    let secrets: Api<Secret> = api(env, ns);
    if secrets.get_opt(&user_secret(name)).await?.is_none() {
        bail!("the user's Secret was deleted");
    }
    let _ = fs::remove_dir_all(&dir);
    Ok(())
}
