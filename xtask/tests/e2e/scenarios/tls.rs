//! TLS on the database port (`spec.tls`, docs/operations.md "TLS"): the server certificate is
//! renewed under a writer and the servers pick it up without a restart.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use database_operator_api::DatabaseCluster;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};

use crate::env::Env;
use crate::harness::{Ctx, Handed, lock};
use crate::scenarios::databases::{Engine, members_serve_the_clusters_certificate, pod_ip};
use crate::scenarios::failover::{
    DELAY_SECONDS, Load, follow_pods, primary_pod, rows_lost, running,
};
use crate::util::{Check, api, wait_for};

/// The longest write gap a certificate renewal may cause: none is expected (the servers reload
/// their files; nothing restarts), one second of room for a loaded machine.
pub(crate) const RENEWAL_WRITE_GAP: Duration = Duration::from_secs(1);
/// How long the members may take to serve a renewed certificate: the operator's pass, the
/// volume refresh on the node (10 s on process nodes), a reload on the next probe.
pub(crate) const RENEWAL_TIMEOUT: Duration = Duration::from_secs(90);

/// The certificate (PEM, the first one) the server at `ip` presents in its TLS handshake.
pub(crate) fn served_certificate(engine: Engine, ip: &str) -> Result<String> {
    let (port, starttls) = match engine {
        Engine::Postgresql => ("5432", "postgres"),
        Engine::Mariadb | Engine::Mysql => ("3306", "mysql"),
    };
    let out = Command::new("openssl")
        .args(["s_client", "-connect"])
        .arg(format!("{ip}:{port}"))
        .args(["-starttls", starttls])
        .stdin(std::process::Stdio::null())
        .output()
        .context("running openssl s_client")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let begin = text
        .find("-----BEGIN CERTIFICATE-----")
        .with_context(|| format!("{ip}: no certificate presented: {}", text.trim()))?;
    let end = text[begin..]
        .find("-----END CERTIFICATE-----")
        .context("an unterminated certificate")?;
    Ok(text[begin..begin + end].split_whitespace().collect())
}

/// The server certificate `<name>-tls` holds now (PEM without spaces), and its annotations.
async fn current_certificate(
    env: &Env,
    ns: &str,
    name: &str,
) -> Result<(String, BTreeMap<String, String>)> {
    let secrets: Api<Secret> = api(env, ns);
    let secret = secrets.get(&format!("{name}-tls")).await?;
    let pem = secret
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .context("no tls.crt")?;
    let text = String::from_utf8_lossy(&pem.0);
    let end = text
        .find("-----END CERTIFICATE-----")
        .context("no certificate in tls.crt")?;
    Ok((
        text[..end].split_whitespace().collect(),
        secret.annotations().clone(),
    ))
}

/// PostgreSQL: the lifetime of the server certificate shortened under a writer (so it is issued
/// again at once), then set back (issued again, the short one being near its end): each time
/// every member serves the new certificate without a restart, the write gap stays under a
/// second, clients holding `<name>-ca` still verify every member, no acknowledged row is lost.
pub async fn postgresql_certificate_renewed_under_a_writer(ctx: &Ctx) -> Result<()> {
    certificate_renewed_under_a_writer(ctx, Engine::Postgresql, "tls-pg").await
}

async fn certificate_renewed_under_a_writer(ctx: &Ctx, engine: Engine, suffix: &str) -> Result<()> {
    let (env, ns, name, password, root) = running(ctx, engine, suffix, DELAY_SECONDS).await?;
    let load = Load::start(engine, root.clone(), password.clone());
    let pods_task = follow_pods(env.clone(), ns.clone(), name.clone(), &load);
    let result = async {
        let pods: Api<Pod> = api(&env, &ns);
        let selector = format!("database.example.com/cluster={name}");
        let members = pods.list(&ListParams::default().labels(&selector)).await?.items;
        let incarnations: BTreeMap<String, (String, i32)> = members
            .iter()
            .map(|p| (p.name_any(), (p.uid().unwrap_or_default(), restarts(p))))
            .collect();
        load.first_rows(Duration::from_secs(30)).await?;
        let clusters: Api<DatabaseCluster> = api(&env, &ns);
        for (step, lifetime) in [("shortened to 300 s", serde_json::json!(300)), ("back to the default", serde_json::Value::Null)] {
            let (before, _) = current_certificate(&env, &ns, &name).await?;
            let patch = serde_json::json!({"spec": {"tls": {"serverCertificateLifetimeSeconds": lifetime}}});
            clusters.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            let requested = Instant::now();
            ctx.step(format!("spec.tls.serverCertificateLifetimeSeconds {step}"));
            let renewed = wait_for("a new certificate in the Secret", Duration::from_secs(30), async || {
                let (now, annotations) = current_certificate(&env, &ns, &name).await?;
                Ok(if now != before { Check::Done((now, annotations)) } else { Check::Pending("the same certificate".to_owned()) })
            })
            .await?;
            let (certificate, annotations) = renewed;
            let issued = requested.elapsed();
            wait_for("every member serving the new certificate", RENEWAL_TIMEOUT, async || {
                let mut behind = Vec::new();
                for pod in &members {
                    let ip = pod_ip(pod)?;
                    if served_certificate(engine, &ip)? != certificate {
                        behind.push(pod.name_any());
                    }
                }
                Ok(if behind.is_empty() { Check::Done(()) } else { Check::Pending(format!("still the old one: {behind:?}")) })
            })
            .await?;
            let took = requested.elapsed();
            let gap = lock(&load.writes).gap_after(requested);
            ctx.note(format!(
                "{engine:?} certificate lifetime {step}: issued after {:.1}s, served by every member after {:.1}s (not-after {}), write gap {:.2}s",
                issued.as_secs_f64(),
                took.as_secs_f64(),
                annotations.get("database.example.com/not-after").map_or("?", String::as_str),
                gap.as_secs_f64()
            ));
            ensure!(
                gap <= RENEWAL_WRITE_GAP,
                "write gap {:.2}s over {}s while the certificate was renewed",
                gap.as_secs_f64(),
                RENEWAL_WRITE_GAP.as_secs()
            );
        }
        crate::scenarios::tls_provided::provided_certificate_steps(ctx, &env, engine, &ns, &name, &members, &load).await?;
        // Nothing restarted: the same pods, the same restart counts.
        let now = pods.list(&ListParams::default().labels(&selector)).await?.items;
        for pod in &now {
            ensure!(
                incarnations.get(&pod.name_any()) == Some(&(pod.uid().unwrap_or_default(), restarts(pod))),
                "{} was restarted or replaced during the renewals",
                pod.name_any()
            );
        }
        members_serve_the_clusters_certificate(ctx, &env, engine, &ns, &name, &now).await?;
        let primary = primary_pod(&env, &ns, &name).await?;
        let ip = pod_ip(&primary)?;
        let (acked, lost) = rows_lost(&load, engine, &root, &ip, &password).await?;
        ensure!(lost.is_empty(), "{} acknowledged rows lost: {:?}", lost.len(), lost.iter().take(10).collect::<Vec<_>>());
        ctx.note(format!("{engine:?} certificate renewals: {acked} rows acknowledged, none lost, no member restarted"));
        ctx.hand_over(engine.example_key(), Handed { ns: ns.clone(), name: name.clone() });
        Ok::<_, anyhow::Error>(())
    }
    .await;
    load.finish_checked(pods_task, result)
}

/// The restart count of the database container of `pod`.
fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |c| c.iter().map(|c| c.restart_count).sum())
}
