//! What the API server refuses: through the CRD's schema and CEL rules alone (no webhook
//! registered), and through the operator's validating webhook registered by URL on 127.0.0.1.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use database_operator_api::{DatabaseCluster, FINALIZER};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, PostParams};

use crate::env::{Env, free_port};
use crate::harness::Ctx;
use crate::util::{
    AuditCursor, Check, Spec, api, create_cluster, describe_audit, kubectl, secret_manifest,
    wait_for, wait_running,
};

/// `kubectl apply` of `manifest` must fail with every one of `expect` in its message.
fn rejected(env: &Env, case: &str, manifest: &str, expect: &[&str]) -> Result<String> {
    let out = kubectl(env, &["apply", "-f", "-"], Some(manifest))?;
    ensure!(
        !out.ok,
        "{case}: the API server accepted it ({})",
        out.stdout.trim()
    );
    for e in expect {
        ensure!(
            out.stderr.contains(e),
            "{case}: the error does not mention {e:?}: {}",
            out.stderr.trim()
        );
    }
    Ok(out.stderr.trim().to_string())
}

/// (Scenario 2) With no webhook registered, the schema and the CEL rules of the CRD refuse: replicas 0
/// and 10, an unknown engine, a six-field cron schedule, an engine change, a storage shrink.
pub async fn api_server_rejects_bad_objects(ctx: &Ctx) -> Result<()> {
    let env = ctx.env().await?;
    let webhooks = Api::<ValidatingWebhookConfiguration>::all(env.client.clone())
        .list(&ListParams::default())
        .await?;
    ensure!(
        webhooks.items.iter().all(|w| w
            .webhooks
            .iter()
            .flatten()
            .all(|h| !h.name.contains("database.example.com"))),
        "a DatabaseCluster webhook is registered; this scenario is about the API server alone"
    );
    let ns = ctx.namespace("schema").await?;
    env.cluster
        .apply(&secret_manifest(&ns, "schema-password", "pw"))?;
    let valid = Spec::mysql("checked", 3, "schema-password").manifest(&ns);
    let cases: [(&str, String, &[&str]); 4] = [
        (
            "replicas 0",
            valid.replace("replicas: 3", "replicas: 0"),
            &["spec.replicas", "greater than or equal to 1"],
        ),
        (
            "replicas 10",
            valid.replace("replicas: 3", "replicas: 10"),
            &["spec.replicas", "less than or equal to 9"],
        ),
        (
            "unknown engine",
            valid.replace("engine: mysql", "engine: oracle"),
            &["spec.engine", "Unsupported value", "oracle"],
        ),
        (
            "six-field cron",
            valid.replace("schedule: \"0 2 * * *\"", "schedule: \"0 2 * * * *\""),
            &["spec.backup.schedule", "should match"],
        ),
    ];
    for (case, manifest, expect) in &cases {
        ensure!(
            manifest != &valid,
            "{case}: the test manifest did not change"
        );
        let message = rejected(&env, case, manifest, expect)?;
        ctx.step(format!("{case}: {message}"));
    }
    let dbcs = api::<DatabaseCluster>(&env, &ns);
    ensure!(
        dbcs.get_opt("checked").await?.is_none(),
        "a rejected object was stored"
    );

    env.cluster.apply(&valid)?;
    ctx.step("created a valid cluster to update");
    let updates: [(&str, String, &[&str]); 2] = [
        (
            "engine change",
            valid
                .replace("engine: mysql", "engine: postgresql")
                .replace("version: \"8.4.0\"", "version: \"16.4\""),
            &["spec.engine is immutable"],
        ),
        (
            "storage shrink",
            valid.replace("size: 10Gi", "size: 5Gi"),
            &["spec.storage.size may not shrink"],
        ),
    ];
    for (case, manifest, expect) in &updates {
        ensure!(
            manifest != &valid,
            "{case}: the test manifest did not change"
        );
        let message = rejected(&env, case, manifest, expect)?;
        ctx.step(format!("{case}: {message}"));
    }
    let stored = dbcs.get("checked").await?;
    ensure!(
        stored.spec.engine.to_string() == "mysql" && stored.spec.storage.size.0 == "10Gi",
        "a rejected update was stored: engine {}, size {}",
        stored.spec.engine,
        stored.spec.storage.size.0
    );
    ctx.note("schema/CEL refused replicas 0 and 10, engine oracle, cron \"0 2 * * * *\", engine change, storage shrink");
    Ok(())
}

/// Deletes the webhook registration when dropped, so a failure cannot block later writes.
struct Registration<'a> {
    env: &'a Env,
    name: &'static str,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        for kind in [
            "validatingwebhookconfiguration",
            "mutatingwebhookconfiguration",
        ] {
            let _ =
                self.env
                    .cluster
                    .kubectl_output(&["delete", kind, self.name, "--ignore-not-found"]);
        }
    }
}

/// (Scenario 11) The validating and mutating webhooks, served by the operator on 127.0.0.1 with a
/// certificate from the cluster CA and registered by URL: a cluster with an unsupported version
/// (which the schema accepts) is denied with the webhook's message; a valid one is stored with
/// the finalizer the mutating webhook adds (the operator makes no finalizer patch); a scale-down
/// is admitted with its warning. The operator's scheduling guard refuses a priority class
/// outside `--allowed-priority-classes` and a toleration of the control plane's taint.
pub async fn webhook_by_url_denies_unsupported_version(ctx: &Ctx) -> Result<()> {
    let env = ctx.without_shared_operator().await?;
    let ns = ctx.namespace("webhook").await?;
    let cert_dir = env.state_dir.join("webhook-certs");
    env.cluster.write_webhook_cert(&cert_dir)?;
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let operator = ctx
        .start_operator(
            "webhook",
            &[
                "--leader-elect=false",
                "--webhook=true",
                "--webhook-addr",
                &addr,
                "--webhook-cert-dir",
                &cert_dir.to_string_lossy(),
                "--allowed-priority-classes=databases",
            ],
        )
        .await?;
    let name = "database-operator-e2e";
    let registration = Registration { env: &env, name };
    // The validating webhook and the mutating one (which adds the finalizer on create), by
    // URL, for this namespace only.
    let registrations =
        xtask::cluster::webhook_registrations(name, &addr, &env.cluster.ca_pem()?, &ns);
    env.cluster.apply(&registrations)?;
    ctx.step(format!(
        "registered the webhooks at https://{addr}/validate and /mutate for namespace {ns}"
    ));
    env.cluster
        .apply(&secret_manifest(&ns, "legacy-password", "pw"))?;
    let mut legacy = Spec::mysql("legacy", 3, "legacy-password");
    legacy.version = "5.7.44";
    let manifest = legacy.manifest(&ns);
    let denied = "admission webhook \"vdatabasecluster.database.example.com\" denied the request";
    let unsupported = "spec.version: unsupported version for mysql";
    // The schema accepts 5.7.44 (it only checks the shape), so a refusal naming the supported
    // versions comes from the webhook. The API server picks up a new registration within
    // moments; probe with a dry run.
    wait_for(
        "the API server to call the webhook",
        Duration::from_secs(30),
        async || {
            let out = kubectl(
                &env,
                &["apply", "--dry-run=server", "-f", "-"],
                Some(&manifest),
            )?;
            Ok(if !out.ok && out.stderr.contains(unsupported) {
                Check::Done(())
            } else {
                Check::Pending(format!(
                    "dry run: ok={} {} {}",
                    out.ok,
                    out.stdout.trim(),
                    out.stderr.trim()
                ))
            })
        },
    )
    .await?;
    // What a user sees: kubectl prints the causes of the webhook's Invalid status.
    let shown = rejected(
        &env,
        "unsupported version",
        &manifest,
        &[unsupported, "supported versions are", "5.7.44"],
    )?;
    ctx.step(format!("kubectl: {shown}"));
    // What the API answers: the webhook's denial, as the API server words it.
    let object = serde_saphyr::from_multiple::<DatabaseCluster>(&manifest)?
        .into_iter()
        .next()
        .context("the manifest holds no DatabaseCluster")?;
    let dbcs = api::<DatabaseCluster>(&env, &ns);
    let answer = match dbcs.create(&PostParams::default(), &object).await {
        Ok(_) => bail!("the API server stored cluster legacy with version 5.7.44"),
        Err(kube::Error::Api(status)) => status,
        Err(e) => return Err(e).context("creating cluster legacy"),
    };
    ensure!(
        answer.code == 422
            && answer.message.contains(denied)
            && answer.message.contains(unsupported),
        "the API's answer is not the webhook's denial: {answer:?}"
    );
    ctx.step(format!("API: {} {}", answer.code, answer.message));
    ensure!(
        dbcs.get_opt("legacy").await?.is_none(),
        "the denied cluster was stored"
    );
    ensure!(
        operator
            .log_text()
            .lines()
            .any(|l| l.contains("denied DatabaseCluster")
                && l.contains("name=legacy")
                && l.contains("dry_run=false")),
        "the operator's log does not show the webhook denying legacy"
    );
    let message = answer.message.clone();

    // The scheduling guard: this operator allows only the priority class `databases`, and the
    // control plane's taint is refused by the default rule.
    let placed = Spec::mysql("placed", 3, "legacy-password").manifest(&ns)
        + "  scheduling:\n    priorityClassName: system-node-critical\n    tolerations:\n      - key: node-role.kubernetes.io/control-plane\n        operator: Exists\n        effect: NoSchedule\n";
    let shown = rejected(
        &env,
        "scheduling guard",
        &placed,
        &[
            "spec.scheduling.priorityClassName: priority class not allowed by the operator's --allowed-priority-classes (allowed: databases)",
            "spec.scheduling.tolerations[0].key: tolerating the control plane's taint",
        ],
    )?;
    ctx.step(format!("kubectl (scheduling guard): {shown}"));

    // A valid cluster passes, stored with the finalizer the mutating webhook added: the
    // operator makes no finalizer patch. Scaling it down is admitted with the webhook's warning.
    let cursor = AuditCursor::now(&env)?;
    create_cluster(
        &env,
        &ns,
        &Spec::mysql("modern", 3, "modern-password"),
        "pw",
    )?;
    let modern = wait_running(ctx, &env, &ns, "modern", 3, Duration::from_secs(90)).await?;
    ensure!(
        modern.finalizers().iter().any(|f| f == FINALIZER),
        "modern has no finalizer {FINALIZER}: {:?}",
        modern.finalizers()
    );
    let finalizer_patches: Vec<String> = cursor
        .operator_writes()?
        .iter()
        .filter(|e| {
            e.resource == "databaseclusters" && e.name == "modern" && e.subresource.is_empty()
        })
        .map(describe_audit)
        .collect();
    ensure!(
        finalizer_patches.is_empty(),
        "the webhook added the finalizer on create, yet the operator patched the cluster: {finalizer_patches:?}"
    );
    let out = kubectl(
        &env,
        &[
            "patch",
            "databasecluster",
            "modern",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            "{\"spec\":{\"replicas\":2}}",
        ],
        None,
    )?;
    ensure!(out.ok, "scaling down was refused: {}", out.stderr.trim());
    let warning = out
        .stderr
        .lines()
        .find(|l| l.starts_with("Warning: spec.replicas: scaling down from 3 to 2"))
        .with_context(|| {
            format!(
                "kubectl showed no scale-down warning: {}",
                out.stderr.trim()
            )
        })?
        .to_string();
    ctx.step(&warning);
    wait_running(ctx, &env, &ns, "modern", 2, Duration::from_secs(90)).await?;
    drop(registration);
    ctx.note(format!("webhook by URL: {message} | {warning}"));
    Ok(())
}
