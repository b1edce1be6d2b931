//! Building a recipe's root: in a temporary directory renamed into place when complete, keyed
//! by the recipe; a Debian root by mmdebstrap with its service user adjusted, the operator's
//! from the binary and the libraries it links.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

use anyhow::{Context, Result, anyhow, bail};
use sha2::{Digest, Sha256};

use super::sources::debian_sources;
use super::{Built, Recipe, Source};

/// Bumped whenever the way roots are built changes for every recipe.
const BUILD_RECIPE: &str = "images-1";

/// The cache key of a recipe: its definition, the build recipe, and for the operator image the
/// binary's size and modification time.
pub(super) fn recipe_key(recipe: &Recipe, operator_binary: Option<&Path>) -> Result<String> {
    let mut hasher = Sha256::new();
    hasher.update(BUILD_RECIPE.as_bytes());
    hasher.update(format!("{recipe:?}").as_bytes());
    if recipe.source == Source::Operator {
        let binary = operator_binary.ok_or_else(|| anyhow!("no operator binary configured"))?;
        let meta = fs::metadata(binary)
            .with_context(|| format!("the operator binary {} is missing", binary.display()))?;
        let modified = meta
            .modified()?
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        hasher.update(format!(
            "{} {} {}",
            binary.display(),
            meta.len(),
            modified.as_nanos()
        ));
    }
    Ok(format!("{:x}", hasher.finalize()))
}

pub(super) fn recipe_dir(cache_dir: &Path, recipe: &Recipe, key: &str) -> PathBuf {
    cache_dir.join(format!("{}-{}", recipe.name, &key[..16]))
}

pub(super) fn find_built(cache_dir: &Path, recipe: &Recipe, key: &str) -> Option<(PathBuf, Built)> {
    let dir = recipe_dir(cache_dir, recipe, key);
    let built: Built = serde_json::from_slice(&fs::read(dir.join("image.json")).ok()?).ok()?;
    (built.key == key).then(|| (dir.join("rootfs"), built))
}

pub(super) fn build_or_find(
    cache_dir: &Path,
    recipe: &'static Recipe,
    operator_binary: Option<&Path>,
) -> Result<(PathBuf, Built)> {
    let key = recipe_key(recipe, operator_binary)?;
    if let Some(found) = find_built(cache_dir, recipe, &key) {
        return Ok(found);
    }
    let dir = recipe_dir(cache_dir, recipe, &key);
    fs::create_dir_all(cache_dir).with_context(|| format!("creating {}", cache_dir.display()))?;
    let tmp = cache_dir.join(format!(
        ".{}-{}.tmp-{}",
        recipe.name,
        &key[..16],
        std::process::id()
    ));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
    }
    fs::create_dir_all(&tmp)?;
    let root = tmp.join("rootfs");
    let result = match recipe.source {
        Source::Debian { .. } => build_debian(recipe, &root),
        Source::Operator => build_operator(operator_binary, &root),
    };
    let version = match result {
        Ok(version) => version,
        Err(err) => {
            let _ = fs::remove_dir_all(&tmp);
            return Err(err);
        }
    };
    let built = Built {
        recipe: recipe.name.to_owned(),
        version,
        built_at_unix: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        key: key.clone(),
    };
    fs::write(tmp.join("image.json"), serde_json::to_vec_pretty(&built)?)?;
    match fs::rename(&tmp, &dir) {
        Ok(()) => {}
        // Another process finished the same root first: use it, drop ours.
        Err(_) if find_built(cache_dir, recipe, &key).is_some() => {
            let _ = fs::remove_dir_all(&tmp);
        }
        Err(err) => {
            let _ = fs::remove_dir_all(&tmp);
            return Err(err).with_context(|| format!("moving the new root to {}", dir.display()));
        }
    }
    Ok((dir.join("rootfs"), built))
}

/// `mmdebstrap` the root, adjust it as the official image does, read the server's version.
fn build_debian(recipe: &Recipe, root: &Path) -> Result<String> {
    let Source::Debian {
        suite,
        packages,
        user,
        runtime_dirs,
        remove,
        server,
    } = recipe.source
    else {
        bail!("{} is not a Debian recipe", recipe.name);
    };
    let uid = super::recipes::engine_of(recipe)
        .ok_or_else(|| anyhow!("{} serves no engine", recipe.name))?
        .os_user_id();
    ensure_mmdebstrap()?;
    let mirrors = debian_sources(suite)?;
    let mut cmd = Command::new("mmdebstrap");
    cmd.arg("--variant=apt")
        .arg("--quiet")
        .arg(format!("--include={}", packages.join(",")))
        .arg("--aptopt=Acquire::Check-Valid-Until \"false\"")
        .arg("--dpkgopt=path-exclude=/usr/share/doc/*")
        .arg("--dpkgopt=path-exclude=/usr/share/man/*")
        .arg("--dpkgopt=path-exclude=/usr/share/locale/*")
        .arg(suite)
        .arg(root);
    for line in &mirrors {
        cmd.arg(line);
    }
    run(&mut cmd).with_context(|| format!("mmdebstrap of {suite} with {}", packages.join(",")))?;

    // The service user: the uid/gid of the official image (999), whether or not the packages
    // created it (mysql-server-core does not).
    let script = format!(
        r#"set -eu
user={user}
uid={uid}
if getent passwd "$user" >/dev/null; then
    old_uid=$(id -u "$user"); old_gid=$(id -g "$user")
    groupmod -g "$uid" "$user" 2>/dev/null || groupmod -g "$uid" "$(id -gn "$user")"
    usermod -u "$uid" -g "$uid" "$user"
    find / -xdev \( -uid "$old_uid" -o -gid "$old_gid" \) -exec chown -h "$uid:$uid" {{}} +
else
    groupadd -g "$uid" "$user"
    useradd -r -u "$uid" -g "$uid" -d /nonexistent -s /usr/sbin/nologin "$user"
fi
for p in {remove}; do rm -rf "$p"; done
for d in {dirs}; do mkdir -p "$d"; chown "$uid:$uid" "$d"; chmod 0775 "$d"; done
touch /etc/hosts /etc/resolv.conf
"#,
        remove = remove.join(" "),
        dirs = runtime_dirs.join(" "),
    );
    run(Command::new("chroot")
        .arg(root)
        .args(["/bin/sh", "-c", &script]))
    .context("adjusting the service user and runtime directories")?;

    let out = Command::new("chroot")
        .arg(root)
        .arg(server)
        .arg("--version")
        .output()
        .with_context(|| format!("running {server} --version in the new root"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    parse_server_version(&text)
        .ok_or_else(|| anyhow!("cannot read a version from `{server} --version`: {text:?}"))
}

/// The version in a server's `--version` line: `postgres (PostgreSQL) 15.18 (Debian …)` → 15.18,
/// `mariadbd  Ver 10.11.14-MariaDB-0+deb12u2 for …` → 10.11.14, `mysqld  Ver 9.7.4-1 for …` → 9.7.4.
pub fn parse_server_version(text: &str) -> Option<String> {
    text.split_whitespace().find_map(|word| {
        let candidate: String = word
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let candidate = candidate.trim_end_matches('.');
        let parts: Vec<&str> = candidate.split('.').collect();
        (parts.len() >= 2 && parts.iter().all(|p| !p.is_empty())).then(|| candidate.to_owned())
    })
}

/// A distroless-like root: the operator binary at `/usr/local/bin/database-operator`, the shared
/// libraries it links (from `ldd`), `/etc/passwd` with `nonroot` (65532), `/tmp`.
fn build_operator(binary: Option<&Path>, root: &Path) -> Result<String> {
    let binary = binary.ok_or_else(|| anyhow!("no operator binary configured"))?;
    let bin_dir = root.join("usr/local/bin");
    fs::create_dir_all(&bin_dir)?;
    fs::copy(binary, bin_dir.join("database-operator"))
        .with_context(|| format!("copying {}", binary.display()))?;
    let ldd = Command::new("ldd")
        .arg(binary)
        .output()
        .context("running ldd on the operator binary")?;
    for lib in ldd_paths(&String::from_utf8_lossy(&ldd.stdout)) {
        let target = root.join(lib.strip_prefix("/").unwrap_or(&lib));
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::copy(&lib, &target).with_context(|| format!("copying {}", lib.display()))?;
    }
    // The loader is found through /lib64 on x86_64 Debian; keep the merged-usr links the host has.
    for link in ["lib64", "lib"] {
        let host = Path::new("/").join(link);
        if let Ok(dest) = fs::read_link(&host)
            && !root.join(link).exists()
        {
            std::os::unix::fs::symlink(dest, root.join(link))?;
        }
    }
    let etc = root.join("etc");
    fs::create_dir_all(&etc)?;
    fs::write(
        etc.join("passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )?;
    fs::write(etc.join("group"), "root:x:0:\nnonroot:x:65532:\n")?;
    fs::write(etc.join("hosts"), "")?;
    fs::write(etc.join("resolv.conf"), "")?;
    for dir in ["tmp", "proc", "dev", "home/nonroot"] {
        fs::create_dir_all(root.join(dir))?;
    }
    Ok(env!("CARGO_PKG_VERSION").to_owned())
}

/// The absolute library paths in `ldd` output (`libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6
/// (0x…)` and the loader's own `/lib64/ld-linux-x86-64.so.2 (0x…)`).
fn ldd_paths(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Installs mmdebstrap with apt when it is missing.
fn ensure_mmdebstrap() -> Result<()> {
    if crate::cluster::apt::have_command("mmdebstrap") {
        return Ok(());
    }
    crate::cluster::apt::apt_install(&["mmdebstrap"])
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        bail!(
            "{:?} exited with {}: {}",
            cmd.get_program(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_versions_are_read_from_version_lines() {
        let cases = [
            (
                "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n",
                "15.18",
            ),
            (
                "/usr/sbin/mariadbd  Ver 10.11.14-MariaDB-0+deb12u2 for debian-linux-gnu on x86_64",
                "10.11.14",
            ),
            (
                "/usr/sbin/mysqld  Ver 9.7.4-1 for Linux on x86_64 ((Debian))",
                "9.7.4",
            ),
        ];
        for (text, version) in cases {
            assert_eq!(
                parse_server_version(text).as_deref(),
                Some(version),
                "{text}"
            );
        }
        assert_eq!(parse_server_version("no version here 7"), None);
    }

    #[test]
    fn ldd_output_lists_absolute_library_paths() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x1)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n\t/lib64/ld-linux-x86-64.so.2 (0x3)\n";
        assert_eq!(
            ldd_paths(text),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
    }
}
