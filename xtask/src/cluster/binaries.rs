//! Building and caching the control-plane binaries from the Go wrapper modules
//! in `xtask/go/`.
//!
//! Three wrapper modules (`kubernetes`, `etcd`, `kwok`) pin the upstream
//! releases. Their `go.mod`/`go.sum` plus the build flags below form the cache
//! key, so a version bump in a `go.mod` builds into a fresh cache directory and
//! an unchanged checkout never rebuilds.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use super::progress::Progress;

/// Bumped whenever the way binaries are built changes (flags, layout).
const BUILD_RECIPE: &str = "recipe-1 CGO_ENABLED=0 -trimpath -tags=selinux,notest -ldflags=-s,-w";

/// Go packages built from the `kubernetes` wrapper module.
const KUBERNETES_COMMANDS: &[&str] = &[
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
];

/// Stage files shipped in the kwok module that the local cluster uses, relative
/// to the module root. Volume stages are adapted copies kept in
/// `xtask/go/kwok/stages/` (see `docs/development.md`).
pub const KWOK_UPSTREAM_STAGES: &[&str] = &[
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
];

/// Versions of the upstream components, read from the wrapper `go.mod` files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// `k8s.io/kubernetes`, e.g. `v1.37.2`.
    pub kubernetes: String,
    /// `go.etcd.io/etcd/server/v3`, e.g. `v3.7.3`.
    pub etcd: String,
    /// `sigs.k8s.io/kwok`, e.g. `v0.8.0`.
    pub kwok: String,
}

/// The cached control-plane binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `<cache>/database-operator/control-plane/<k8s-version>-<hash>/`.
    pub root: PathBuf,
    pub versions: Versions,
}

impl Binaries {
    pub fn bin_dir(&self) -> PathBuf {
        self.root.join("bin")
    }
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bin_dir().join(name)
    }
    pub fn etcd(&self) -> PathBuf {
        self.bin("etcd")
    }
    pub fn kube_apiserver(&self) -> PathBuf {
        self.bin("kube-apiserver")
    }
    pub fn kube_controller_manager(&self) -> PathBuf {
        self.bin("kube-controller-manager")
    }
    pub fn kube_scheduler(&self) -> PathBuf {
        self.bin("kube-scheduler")
    }
    pub fn kubectl(&self) -> PathBuf {
        self.bin("kubectl")
    }
    pub fn kwok(&self) -> PathBuf {
        self.bin("kwok")
    }
    /// Upstream kwok stage files copied out of the kwok module at build time.
    pub fn kwok_stages_dir(&self) -> PathBuf {
        self.root.join("kwok-stages")
    }

    fn all_present(&self) -> bool {
        let mut wanted: Vec<PathBuf> = KUBERNETES_COMMANDS.iter().map(|c| self.bin(c)).collect();
        wanted.push(self.etcd());
        wanted.push(self.kwok());
        wanted.extend(
            KWOK_UPSTREAM_STAGES
                .iter()
                .map(|s| self.kwok_stages_dir().join(stage_file_name(s))),
        );
        wanted.iter().all(|p| p.is_file())
    }
}

/// `kustomize/stage/pod/fast/pod-ready.yaml` -> `pod-ready.yaml`.
pub fn stage_file_name(rel: &str) -> &str {
    rel.rsplit('/').next().unwrap_or(rel)
}

/// The wrapper modules live in `xtask/go/` of the workspace.
pub fn go_dir(workspace_root: &Path) -> PathBuf {
    workspace_root.join("xtask").join("go")
}

/// `${XDG_CACHE_HOME:-$HOME/.cache}/database-operator/control-plane`.
pub fn cache_base() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).context(
                "neither XDG_CACHE_HOME nor HOME is set; cannot place the control-plane cache",
            )?;
            PathBuf::from(home).join(".cache")
        }
    };
    Ok(base.join("database-operator").join("control-plane"))
}

/// Reads the versions from the wrapper modules and computes the cache
/// directory. Builds nothing.
pub fn locate(workspace_root: &Path) -> Result<Binaries> {
    let go = go_dir(workspace_root);
    let versions = Versions {
        kubernetes: required_version(&go.join("kubernetes/go.mod"), "k8s.io/kubernetes")?,
        etcd: required_version(&go.join("etcd/go.mod"), "go.etcd.io/etcd/server/v3")?,
        kwok: required_version(&go.join("kwok/go.mod"), "sigs.k8s.io/kwok")?,
    };
    let mut hasher = Sha256::new();
    hasher.update(BUILD_RECIPE.as_bytes());
    for module in ["kubernetes", "etcd", "kwok"] {
        for file in ["go.mod", "go.sum"] {
            let path = go.join(module).join(file);
            let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            hasher.update(path_tag(module, file).as_bytes());
            hasher.update(&bytes);
        }
    }
    let digest = hasher.finalize();
    let hash: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    let root = cache_base()?.join(format!("{}-{hash}", versions.kubernetes));
    Ok(Binaries { root, versions })
}

fn path_tag(module: &str, file: &str) -> String {
    format!("\0{module}/{file}\0")
}

/// Finds `<module> vX.Y.Z` in the `require` section of a go.mod.
pub(super) fn required_version(go_mod: &Path, module: &str) -> Result<String> {
    let text =
        fs::read_to_string(go_mod).with_context(|| format!("reading {}", go_mod.display()))?;
    for line in text.lines() {
        let line = line.trim().trim_start_matches("require").trim();
        let mut parts = line.split_whitespace();
        if parts.next() == Some(module)
            && let Some(version) = parts.next()
            && version.starts_with('v')
        {
            return Ok(version.to_string());
        }
    }
    bail!("{} does not require {module}", go_mod.display())
}

/// Returns the cached binaries, building whatever is missing.
pub fn ensure(workspace_root: &Path, progress: &Progress) -> Result<Binaries> {
    let binaries = locate(workspace_root)?;
    if binaries.all_present() {
        progress.step(format!(
            "control plane binaries cached in {}",
            binaries.root.display()
        ));
        return Ok(binaries);
    }
    check_go()?;
    progress.say(format!(
        "Building the local control plane (Kubernetes {}, etcd {}, kwok {}) from Go modules.\n\
         This happens once per version and takes a while (typically 15-30 minutes on 2 cores): \
         kube-apiserver, kube-controller-manager, kube-scheduler and kubectl compile several \
         thousand Go packages, and there are no prebuilt binaries to download here. \
         The result is cached in {}.",
        binaries.versions.kubernetes,
        binaries.versions.etcd,
        binaries.versions.kwok,
        binaries.root.display()
    ));
    fs::create_dir_all(binaries.bin_dir())
        .with_context(|| format!("creating {}", binaries.bin_dir().display()))?;
    let go = go_dir(workspace_root);
    let log_dir = binaries.root.join("build-logs");
    fs::create_dir_all(&log_dir)?;

    let k8s_missing: Vec<&str> = KUBERNETES_COMMANDS
        .iter()
        .copied()
        .filter(|c| !binaries.bin(c).is_file())
        .collect();
    if !k8s_missing.is_empty() {
        let packages: Vec<String> = k8s_missing
            .iter()
            .map(|c| format!("k8s.io/kubernetes/cmd/{c}"))
            .collect();
        go_build(
            &GoBuild {
                label: &k8s_missing.join(", "),
                module_dir: &go.join("kubernetes"),
                packages: &packages,
                ldflags: &kubernetes_ldflags(&binaries.versions.kubernetes)?,
                tags: "selinux,notest",
                out_dir: &binaries.bin_dir(),
                single_output: None,
                log: &log_dir.join("kubernetes.log"),
            },
            progress,
        )?;
    }
    if !binaries.etcd().is_file() {
        go_build(
            &GoBuild {
                label: "etcd",
                module_dir: &go.join("etcd"),
                packages: &["go.etcd.io/etcd/server/v3".to_string()],
                ldflags: "-s -w",
                tags: "",
                out_dir: &binaries.bin_dir(),
                single_output: Some("etcd"),
                log: &log_dir.join("etcd.log"),
            },
            progress,
        )?;
    }
    if !binaries.kwok().is_file() {
        go_build(
            &GoBuild {
                label: "kwok",
                module_dir: &go.join("kwok"),
                packages: &["sigs.k8s.io/kwok/cmd/kwok".to_string()],
                ldflags: "-s -w",
                tags: "",
                out_dir: &binaries.bin_dir(),
                single_output: Some("kwok"),
                log: &log_dir.join("kwok.log"),
            },
            progress,
        )?;
    }
    copy_kwok_stages(&go.join("kwok"), &binaries.kwok_stages_dir())?;
    if !binaries.all_present() {
        bail!(
            "the control-plane build finished but binaries are missing in {}; see the logs in {}",
            binaries.bin_dir().display(),
            log_dir.display()
        );
    }
    progress.step(format!(
        "control plane built into {}",
        binaries.root.display()
    ));
    Ok(binaries)
}

/// `-X` flags that stamp the version like upstream's `hack/lib/version.sh`,
/// so that `kubectl version` and `/version` report the real release instead
/// of `v0.0.0-master`.
pub fn kubernetes_ldflags(git_version: &str) -> Result<String> {
    let trimmed = git_version.trim_start_matches('v');
    let mut parts = trimmed.split('.');
    let (Some(major), Some(minor)) = (parts.next(), parts.next()) else {
        bail!("cannot parse the Kubernetes version {git_version}");
    };
    let mut flags = vec!["-s".to_string(), "-w".to_string()];
    for pkg in [
        "k8s.io/component-base/version",
        "k8s.io/client-go/pkg/version",
    ] {
        flags.push(format!("-X {pkg}.gitVersion={git_version}"));
        flags.push(format!("-X {pkg}.gitMajor={major}"));
        flags.push(format!("-X {pkg}.gitMinor={minor}"));
        flags.push(format!("-X {pkg}.gitTreeState=clean"));
    }
    Ok(flags.join(" "))
}

fn check_go() -> Result<()> {
    let out = Command::new("go").arg("version").output().context(
        "running `go version`: Go (1.26 or newer) is needed to build the local control plane",
    )?;
    if !out.status.success() {
        bail!(
            "`go version` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

pub(super) struct GoBuild<'a> {
    pub(super) label: &'a str,
    pub(super) module_dir: &'a Path,
    pub(super) packages: &'a [String],
    pub(super) ldflags: &'a str,
    pub(super) tags: &'a str,
    pub(super) out_dir: &'a Path,
    /// File name for a single package; `None` lets `go build -o dir/` name them.
    pub(super) single_output: Option<&'a str>,
    pub(super) log: &'a Path,
}

/// Runs `go build` into a temporary directory next to `out_dir` and moves the
/// results in only when the build succeeded, so an interrupted build never
/// leaves a half-written binary in the cache.
pub(super) fn go_build(build: &GoBuild<'_>, progress: &Progress) -> Result<()> {
    let staging = build
        .out_dir
        .with_file_name(format!("bin.partial-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir_all(&staging)?;
    let log =
        fs::File::create(build.log).with_context(|| format!("creating {}", build.log.display()))?;
    let mut cmd = Command::new("go");
    cmd.current_dir(build.module_dir)
        .env("CGO_ENABLED", "0")
        .env("GOWORK", "off")
        .args(["build", "-p", "2", "-trimpath"]);
    if !build.tags.is_empty() {
        cmd.arg(format!("-tags={}", build.tags));
    }
    cmd.arg(format!("-ldflags={}", build.ldflags))
        .arg("-o")
        .arg(match build.single_output {
            Some(name) => staging.join(name),
            None => PathBuf::from(format!("{}/", staging.display())),
        })
        .args(build.packages)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    progress.step(format!(
        "go build {} (log: {})",
        build.label,
        build.log.display()
    ));
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting `go build` for {}", build.label))?;
    let mut last_note = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if last_note.elapsed() >= Duration::from_secs(60) {
            progress.step(format!(
                "still building {} ({}s so far)",
                build.label,
                started.elapsed().as_secs()
            ));
            last_note = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    if !status.success() {
        let _ = fs::remove_dir_all(&staging);
        bail!(
            "go build of {} failed ({status}); last lines of {}:\n{}",
            build.label,
            build.log.display(),
            super::process::tail(build.log, 30)
        );
    }
    for entry in fs::read_dir(&staging)? {
        let entry = entry?;
        let dest = build.out_dir.join(entry.file_name());
        fs::rename(entry.path(), &dest)
            .with_context(|| format!("moving {} into the cache", dest.display()))?;
    }
    let _ = fs::remove_dir_all(&staging);
    progress.step(format!(
        "built {} in {}s",
        build.label,
        started.elapsed().as_secs()
    ));
    Ok(())
}

/// Copies the upstream kwok stage files out of the module cache so the
/// cluster does not depend on the Go module cache at run time.
fn copy_kwok_stages(kwok_module: &Path, dest: &Path) -> Result<()> {
    let out = Command::new("go")
        .current_dir(kwok_module)
        .env("GOWORK", "off")
        .args(["list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"])
        .stderr(Stdio::inherit())
        .output()
        .context("running `go list -m sigs.k8s.io/kwok` to find kwok's stage files")?;
    if !out.status.success() {
        bail!(
            "`go list -m sigs.k8s.io/kwok` failed in {}",
            kwok_module.display()
        );
    }
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    fs::create_dir_all(dest)?;
    for rel in KWOK_UPSTREAM_STAGES {
        let src = dir.join(rel);
        let to = dest.join(stage_file_name(rel));
        fs::copy(&src, &to)
            .with_context(|| format!("copying kwok stage {} to {}", src.display(), to.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldflags_stamp_both_version_packages() {
        let flags = kubernetes_ldflags("v1.37.2").unwrap();
        assert!(flags.contains("-X k8s.io/component-base/version.gitVersion=v1.37.2"));
        assert!(flags.contains("-X k8s.io/client-go/pkg/version.gitMajor=1"));
        assert!(flags.contains("-X k8s.io/client-go/pkg/version.gitMinor=37"));
    }

    #[test]
    fn versions_come_from_the_wrapper_modules() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let binaries = locate(root).unwrap();
        assert!(binaries.versions.kubernetes.starts_with("v1.37."));
        assert!(binaries.versions.etcd.starts_with("v3."));
        assert!(binaries.versions.kwok.starts_with("v0.8."));
        let name = binaries
            .root
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        assert!(name.starts_with(&binaries.versions.kubernetes));
    }
}
