//! Pod volumes as directories under the pod's directory (emptyDir,
//! configMap, secret, downwardAPI, projected) or under `<state>/volumes/`
//! (persistentVolumeClaim: one directory per PersistentVolume, removed with
//! the PV).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, PersistentVolumeClaim, Pod, ProjectedVolumeSource,
    Secret, ServiceAccount, ServiceAccountTokenProjection, Volume,
};
use kube::Client;
use kube::api::{Api, PostParams};

/// A volume problem that keeps containers from starting (kubelet's
/// `FailedMount`).
pub type MountError = String;

/// Service-account tokens fetched for a pod, refreshed at 80% of their life.
#[derive(Debug, Default)]
pub struct Tokens {
    fetched: BTreeMap<String, (Instant, Duration, String)>,
}

/// Writes `bytes` to `path` unless it already holds them (through a
/// temporary file and a rename, so a reader never sees half a file).
pub fn write_if_changed(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<bool> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(mode));
        return Ok(false);
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!("..{name}.tmp"));
    fs::write(&tmp, bytes)?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
    fs::rename(&tmp, path)?;
    Ok(true)
}

/// The text kubelet writes for `metadata.labels` / `metadata.annotations`:
/// `key="value"` lines, sorted.
pub fn format_map(map: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (k, v) in map {
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        out.push_str(&format!("{k}=\"{v}\"\n"));
    }
    out
}

/// A pod field for env `fieldRef` and downward API files.
pub fn field_value(pod: &Pod, path: &str, pod_ip: &str, host_ip: &str) -> Option<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let empty = BTreeMap::new();
    let key_of = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_string)
    };
    match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "metadata.labels" => Some(format_map(meta.labels.as_ref().unwrap_or(&empty))),
        "metadata.annotations" => Some(format_map(meta.annotations.as_ref().unwrap_or(&empty))),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "status.podIP" | "status.podIPs" => Some(pod_ip.to_string()),
        "status.hostIP" | "status.hostIPs" => Some(host_ip.to_string()),
        _ => {
            if let Some(k) = key_of("metadata.labels['") {
                Some(
                    meta.labels
                        .as_ref()
                        .and_then(|l| l.get(&k))
                        .cloned()
                        .unwrap_or_default(),
                )
            } else {
                key_of("metadata.annotations['").map(|k| {
                    meta.annotations
                        .as_ref()
                        .and_then(|l| l.get(&k))
                        .cloned()
                        .unwrap_or_default()
                })
            }
        }
    }
}

/// Everything a pod's volumes need from the API and the agent.
pub struct VolumeCtx<'a> {
    pub client: &'a Client,
    pub pod: &'a Pod,
    pub pod_dir: &'a Path,
    pub pv_root: &'a Path,
    pub pod_ip: &'a str,
    pub host_ip: &'a str,
    /// Also fetch ConfigMaps, Secrets and tokens (not only the downward API).
    pub full: bool,
}

fn ns(pod: &Pod) -> String {
    pod.metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into())
}

/// Creates or refreshes every volume; returns volume name -> host directory.
pub async fn sync(
    cx: &VolumeCtx<'_>,
    tokens: &mut Tokens,
    known: &mut BTreeMap<String, PathBuf>,
) -> Result<(), MountError> {
    let volumes: Vec<Volume> = cx
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    let namespace = ns(cx.pod);
    let fs_group = cx
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group);
    let on_root_mismatch = cx
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group_change_policy.as_deref())
        == Some("OnRootMismatch");
    let set_fs_group = |dir: &Path, fs_group: Option<i64>, writable: bool| {
        set_fs_group(dir, fs_group, writable, on_root_mismatch)
    };
    for vol in &volumes {
        let dir = cx.pod_dir.join("volumes").join(&vol.name);
        let first = !known.contains_key(&vol.name);
        if !first && !cx.full && vol.downward_api.is_none() && vol.projected.is_none() {
            continue;
        }
        if let Some(_e) = &vol.empty_dir {
            if first {
                mkdir(&dir, 0o777)?;
                set_fs_group(&dir, fs_group, true)?;
            }
        } else if let Some(pvc) = &vol.persistent_volume_claim {
            if first {
                let pv_dir = bound_volume_dir(cx, &namespace, &pvc.claim_name).await?;
                mkdir(&pv_dir, 0o777)?;
                set_fs_group(&pv_dir, fs_group, true)?;
                known.insert(vol.name.clone(), pv_dir);
                continue;
            }
            continue;
        } else if let Some(cm) = &vol.config_map {
            if cx.full || first {
                mkdir(&dir, 0o755)?;
                let files = config_map_files(
                    cx.client,
                    &namespace,
                    &cm.name,
                    cm.items.as_deref(),
                    cm.optional.unwrap_or(false),
                )
                .await?;
                write_files(&dir, files, cm.default_mode.unwrap_or(0o644))?;
                // Every write, as the kubelet's: a refreshed file is a new file.
                group_read_only_volume(&dir, fs_group)?;
            }
        } else if let Some(sec) = &vol.secret {
            if cx.full || first {
                mkdir(&dir, 0o755)?;
                let name = sec.secret_name.clone().unwrap_or_default();
                let files = secret_files(
                    cx.client,
                    &namespace,
                    &name,
                    sec.items.as_deref(),
                    sec.optional.unwrap_or(false),
                )
                .await?;
                write_files(&dir, files, sec.default_mode.unwrap_or(0o644))?;
                // Every write, as the kubelet's: a renewed certificate is a new file, which the
                // server (the fsGroup) must still be able to read.
                group_read_only_volume(&dir, fs_group)?;
            }
        } else if let Some(d) = &vol.downward_api {
            mkdir(&dir, 0o755)?;
            let files = downward_files(cx, d.items.as_deref().unwrap_or_default());
            write_files(&dir, files, d.default_mode.unwrap_or(0o644))?;
        } else if let Some(p) = &vol.projected {
            mkdir(&dir, 0o755)?;
            let files =
                projected_files(cx, &namespace, &vol.name, p, cx.full || first, tokens).await?;
            write_files(&dir, files, p.default_mode.unwrap_or(0o644))?;
            group_read_only_volume(&dir, fs_group)?;
        } else if let Some(h) = &vol.host_path {
            known.insert(vol.name.clone(), PathBuf::from(&h.path));
            continue;
        } else {
            return Err(format!(
                "volume {} has a type process nodes do not support",
                vol.name
            ));
        }
        known.insert(vol.name.clone(), dir);
    }
    Ok(())
}

/// The PersistentVolume directory (under the agent's PV root) of the claim `claim` is bound to.
async fn bound_volume_dir(
    cx: &VolumeCtx<'_>,
    namespace: &str,
    claim: &str,
) -> Result<PathBuf, MountError> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(cx.client.clone(), namespace);
    let found = api
        .get_opt(claim)
        .await
        .map_err(|e| format!("reading PersistentVolumeClaim {claim}: {e}"))?
        .ok_or_else(|| format!("persistentvolumeclaim \"{claim}\" not found"))?;
    let pv = found
        .spec
        .and_then(|s| s.volume_name)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("persistentvolumeclaim \"{claim}\" is not bound"))?;
    Ok(cx.pv_root.join(&pv))
}

/// The files of projected volume `volume`: its downward API items always, its ConfigMaps,
/// Secrets and service account tokens when `refresh` (a first or full sync).
async fn projected_files(
    cx: &VolumeCtx<'_>,
    namespace: &str,
    volume: &str,
    p: &ProjectedVolumeSource,
    refresh: bool,
    tokens: &mut Tokens,
) -> Result<Files, MountError> {
    let mut files = Vec::new();
    for src in p.sources.as_deref().unwrap_or_default() {
        if let Some(d) = &src.downward_api {
            files.extend(downward_files(cx, d.items.as_deref().unwrap_or_default()));
        }
        if !refresh {
            continue;
        }
        if let Some(cm) = &src.config_map {
            files.extend(
                config_map_files(
                    cx.client,
                    namespace,
                    &cm.name,
                    cm.items.as_deref(),
                    cm.optional.unwrap_or(false),
                )
                .await?,
            );
        }
        if let Some(sec) = &src.secret {
            files.extend(
                secret_files(
                    cx.client,
                    namespace,
                    &sec.name,
                    sec.items.as_deref(),
                    sec.optional.unwrap_or(false),
                )
                .await?,
            );
        }
        if let Some(t) = &src.service_account_token {
            let token = service_account_token(cx, namespace, volume, t, tokens).await?;
            files.push((t.path.clone(), token.into_bytes(), None));
        }
    }
    Ok(files)
}

/// A service account token for a projected volume's `t`: the one fetched before while it has
/// more than a fifth of its lifetime left, else a new one from the TokenRequest API.
async fn service_account_token(
    cx: &VolumeCtx<'_>,
    namespace: &str,
    volume: &str,
    t: &ServiceAccountTokenProjection,
    tokens: &mut Tokens,
) -> Result<String, MountError> {
    let key = format!("{volume}/{}", t.path);
    let lifetime = Duration::from_secs(t.expiration_seconds.unwrap_or(3607).max(600) as u64);
    let fresh = tokens
        .fetched
        .get(&key)
        .filter(|(at, life, _)| at.elapsed() < life.mul_f64(0.8));
    Ok(match fresh {
        Some((_, _, tok)) => tok.clone(),
        None => {
            let tok = request_token(cx, namespace, t.audience.clone(), lifetime).await?;
            tokens
                .fetched
                .insert(key, (Instant::now(), lifetime, tok.clone()));
            tok
        }
    })
}

type Files = Vec<(String, Vec<u8>, Option<i32>)>;

fn mkdir(dir: &Path, mode: u32) -> Result<(), MountError> {
    if !dir.exists() {
        fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// `fsGroup`: the volume's files belong to the group, and (for writable
/// volumes) the group may read and write them, as kubelet does. With
/// `fsGroupChangePolicy: OnRootMismatch` nothing is changed when the volume's
/// root already has the group and its permissions (kubelet's rule): a volume
/// that already holds data keeps the modes its files were given (PostgreSQL
/// refuses a data directory the group may write).
fn set_fs_group(
    dir: &Path,
    fs_group: Option<i64>,
    writable: bool,
    on_root_mismatch: bool,
) -> Result<(), MountError> {
    let Some(gid) = fs_group else {
        return Ok(());
    };
    if on_root_mismatch && root_matches(dir, gid, writable) {
        return Ok(());
    }
    let run = |cmd: &mut Command| -> Result<(), MountError> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{cmd:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    run(Command::new("chgrp")
        .arg("-R")
        .arg(gid.to_string())
        .arg(dir))?;
    if writable {
        run(Command::new("chmod").args(["-R", "g+rwX"]).arg(dir))?;
        run(Command::new("find")
            .arg(dir)
            .args(["-type", "d", "-exec", "chmod", "g+s", "{}", "+"]))?;
    }
    Ok(())
}

/// The fsGroup on every file of a ConfigMap, Secret or projected volume, after each write: the
/// kubelet sets their ownership without regard to `fsGroupChangePolicy` (which is for the
/// volumes whose contents it does not write).
fn group_read_only_volume(dir: &Path, fs_group: Option<i64>) -> Result<(), MountError> {
    set_fs_group(dir, fs_group, false, false)
}

/// Whether `dir` already belongs to group `gid` with the setgid bit and, when
/// writable, group read/write/search.
fn root_matches(dir: &Path, gid: i64, writable: bool) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return false;
    };
    let want = if writable { 0o2070 } else { 0o2000 };
    i64::from(meta.gid()) == gid && meta.mode() & want == want
}

fn pick(
    all: BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    what: &str,
) -> Result<Files, MountError> {
    match items {
        None => Ok(all.into_iter().map(|(k, v)| (k, v, None)).collect()),
        Some(items) => items
            .iter()
            .map(|it| {
                all.get(&it.key)
                    .map(|v| (it.path.clone(), v.clone(), it.mode))
                    .ok_or_else(|| format!("{what} has no key {}", it.key))
            })
            .collect(),
    }
}

async fn config_map_files(
    client: &Client,
    namespace: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    optional: bool,
) -> Result<Files, MountError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let Some(cm) = api
        .get_opt(name)
        .await
        .map_err(|e| format!("reading configmap {name}: {e}"))?
    else {
        return if optional {
            Ok(Vec::new())
        } else {
            Err(format!("configmap \"{name}\" not found"))
        };
    };
    let mut all: BTreeMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    all.extend(
        cm.binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    pick(all, items, &format!("configmap {name}"))
}

async fn secret_files(
    client: &Client,
    namespace: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    optional: bool,
) -> Result<Files, MountError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let Some(sec) = api
        .get_opt(name)
        .await
        .map_err(|e| format!("reading secret {name}: {e}"))?
    else {
        return if optional {
            Ok(Vec::new())
        } else {
            Err(format!("secret \"{name}\" not found"))
        };
    };
    let mut all: BTreeMap<String, Vec<u8>> = sec
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    all.extend(
        sec.string_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes())),
    );
    pick(all, items, &format!("secret {name}"))
}

fn downward_files(cx: &VolumeCtx<'_>, items: &[DownwardAPIVolumeFile]) -> Files {
    items
        .iter()
        .filter_map(|it| {
            let f = it.field_ref.as_ref()?;
            let v = field_value(cx.pod, &f.field_path, cx.pod_ip, cx.host_ip)?;
            Some((it.path.clone(), v.into_bytes(), it.mode))
        })
        .collect()
}

fn write_files(dir: &Path, files: Files, default_mode: i32) -> Result<(), MountError> {
    for (rel, bytes, mode) in files {
        if rel.split('/').any(|c| c == "..") || rel.starts_with('/') {
            return Err(format!("volume file path {rel} leaves its volume"));
        }
        let mode = mode.unwrap_or(default_mode) as u32 & 0o7777;
        write_if_changed(&dir.join(&rel), &bytes, mode)
            .map_err(|e| format!("writing {}: {e}", dir.join(&rel).display()))?;
    }
    Ok(())
}

async fn request_token(
    cx: &VolumeCtx<'_>,
    namespace: &str,
    audience: Option<String>,
    lifetime: Duration,
) -> Result<String, MountError> {
    let spec = cx.pod.spec.as_ref();
    let sa = spec
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let api: Api<ServiceAccount> = Api::namespaced(cx.client.clone(), namespace);
    let req = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audience.into_iter().filter(|a| !a.is_empty()).collect()),
            expiration_seconds: Some(lifetime.as_secs() as i64),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: cx.pod.metadata.name.clone(),
                uid: cx.pod.metadata.uid.clone(),
            }),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let out = api
        .create_token_request(&sa, &PostParams::default(), &req)
        .await
        .map_err(|e| format!("requesting a token for serviceaccount {namespace}/{sa}: {e}"))?;
    out.status.and_then(|s| s.token).ok_or_else(|| {
        format!("the token request for serviceaccount {namespace}/{sa} has no status")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn labels_file_and_fields() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("db-0".into()),
                namespace: Some("ns".into()),
                labels: Some(
                    [
                        ("role".to_string(), "primary".to_string()),
                        ("app".to_string(), "a\"b".to_string()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        assert_eq!(
            field_value(&pod, "metadata.labels", "", "").unwrap(),
            "app=\"a\\\"b\"\nrole=\"primary\"\n"
        );
        assert_eq!(
            field_value(&pod, "metadata.labels['role']", "", "").unwrap(),
            "primary"
        );
        assert_eq!(
            field_value(&pod, "status.podIP", "127.10.0.4", "").unwrap(),
            "127.10.0.4"
        );
        assert_eq!(
            field_value(&pod, "metadata.namespace", "", "").unwrap(),
            "ns"
        );
        assert_eq!(field_value(&pod, "spec.bogus", "", ""), None);
    }

    #[test]
    fn writes_only_changes_and_keeps_the_mode() {
        let dir = std::env::temp_dir().join(format!("procnode-vol-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let file = dir.join("sub/labels");
        assert!(write_if_changed(&file, b"a=\"1\"\n", 0o640).unwrap());
        assert!(!write_if_changed(&file, b"a=\"1\"\n", 0o640).unwrap());
        assert!(write_if_changed(&file, b"a=\"2\"\n", 0o640).unwrap());
        assert_eq!(fs::read(&file).unwrap(), b"a=\"2\"\n");
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert!(write_files(&dir, vec![("../x".into(), vec![], None)], 0o644).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
