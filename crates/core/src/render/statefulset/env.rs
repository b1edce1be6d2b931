//! The environment of the member containers: downward-API fields, literals and passwords by
//! `secretKeyRef` (never a literal).

use super::*;

/// The environment that tells `init.sh` which backup a new primary restores
/// (`spec.bootstrap.fromBackup`): the source cluster, the backup, the bucket and its keys (by
/// `secretKeyRef`), and where the operator binary is.
pub fn restore_env(cluster: &RenderContext<'_>, from: &FromBackupSpec) -> Vec<EnvVar> {
    let mut env = vec![
        literal_env("RESTORE_BINARY", cron_job::copied_binary()),
        literal_env(
            "RESTORE_FROM_NAMESPACE",
            from.namespace
                .clone()
                .unwrap_or_else(|| cluster.namespace.to_owned()),
        ),
        literal_env("RESTORE_FROM_CLUSTER", from.cluster.clone()),
        literal_env("RESTORE_BACKUP", from.backup.clone()),
        literal_env("RESTORE_S3_BUCKET", from.s3_bucket.clone()),
    ];
    if let Some(endpoint) = &from.endpoint {
        env.push(literal_env("RESTORE_S3_ENDPOINT", endpoint.clone()));
    }
    if let Some(region) = &from.region {
        env.push(literal_env("RESTORE_AWS_REGION", region.clone()));
    }
    // Where the recovery from the archive stops (read by `backup choose` and `backup unpack`).
    if let Some(time) = &from.target_time {
        env.push(literal_env("RESTORE_TARGET_TIME", time.clone()));
    }
    if let Some(lsn) = &from.target_lsn {
        env.push(literal_env("RESTORE_TARGET_LSN", lsn.clone()));
    }
    if let Some(credentials) = &from.credentials_secret_ref {
        for (name, key) in [
            ("AWS_ACCESS_KEY_ID", &credentials.access_key_id_key),
            ("AWS_SECRET_ACCESS_KEY", &credentials.secret_access_key_key),
        ] {
            env.push(secret_env(name, &credentials.name, key));
        }
    }
    let source_namespace = from.namespace.as_deref().unwrap_or(cluster.namespace);
    match &from.signing_key_secret_ref {
        Some(selector) => env.push(secret_env(
            cron_job::SIGNING_KEY_ENV,
            &selector.name,
            &selector.key,
        )),
        // The source's own key, when its operator Secret can be read from here (optional: a
        // missing one makes the restore say there is no key, rather than the pod not start).
        None if source_namespace == cluster.namespace => env.push(cron_job::signing_key(
            &crate::credentials::operator_secret_name(&from.cluster),
        )),
        None => {}
    }
    if from.signature_check == SignatureCheck::Skip {
        env.push(literal_env(
            cron_job::SKIP_SIGNATURE_CHECK_ENV,
            "true".to_owned(),
        ));
    }
    env
}

pub(super) fn field_ref(path: &str) -> ObjectFieldSelector {
    ObjectFieldSelector {
        api_version: Some("v1".to_owned()),
        field_path: path.to_owned(),
    }
}

pub(super) fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(field_ref(path)),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

pub(super) fn literal_env(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value),
        ..EnvVar::default()
    }
}

/// The replication password, by reference to its key in the operator Secret `<name>-operator`.
pub fn replication_password_env(cluster: &RenderContext<'_>) -> EnvVar {
    operator_secret_env(
        cluster,
        "REPLICATION_PASSWORD",
        credentials::REPLICATION_PASSWORD_KEY,
    )
}

/// The operator's admin password, by reference to its key in the operator Secret
/// `<name>-operator`: the init scripts create the account with it.
pub fn admin_password_env(cluster: &RenderContext<'_>) -> EnvVar {
    operator_secret_env(cluster, "ADMIN_PASSWORD", credentials::ADMIN_PASSWORD_KEY)
}

fn operator_secret_env(cluster: &RenderContext<'_>, name: &str, key: &str) -> EnvVar {
    secret_env(name, &credentials::operator_secret_name(cluster.name), key)
}

/// The variable `name` from `key` of the Secret `secret` (which must hold it).
fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// The password, by reference to the Secret key of `spec.passwordSecretRef`.
pub fn password_env(cluster: &RenderContext<'_>, name: &str) -> EnvVar {
    let selector = &cluster.spec.password_secret_ref;
    secret_env(name, &selector.name, &selector.key)
}
