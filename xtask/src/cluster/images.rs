//! Images on process nodes: what an image reference in a pod spec runs as, on this machine.
//!
//! No container engine exists here and no registry can be reached, so a process node never
//! pulls an image. Instead every image reference that our pods use maps to a *recipe*: a root
//! filesystem built from Debian packages with `mmdebstrap` (the same packages the official
//! images are built from), adjusted the way the official image's Dockerfile adjusts it (the
//! service user gets uid/gid 999, its socket directory exists), plus the image configuration a
//! container needs (`PATH`, entrypoint, command). The operator's own image maps to the
//! `database-operator` binary built from this checkout, in a distroless-like root holding that
//! binary and the shared libraries it links.
//!
//! Nothing pretends: an image resolves only when the server binary inside the built root reports
//! exactly the version the tag asks for (or a tag that is a prefix of it, like `15` for `15.18`,
//! as floating tags work on a registry). Any other reference is [`Resolution::Unavailable`] with
//! a reason naming the image and what this machine does have, and its pod stays waiting.
//!
//! Roots are cached under `~/.cache/database-operator/images/<recipe>-<hash>/` (the hash covers
//! the recipe, so a changed recipe builds a new root); a build goes to a temporary directory and
//! is renamed into place only when complete, so a crash never leaves a half root that counts.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::binaries::cache_base;

/// The standard `PATH` of a Debian-based image.
const DEBIAN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The uid and gid the official database images give their service user.
pub const SERVICE_UID: u32 = 999;

/// Bumped whenever the way roots are built changes for every recipe.
const BUILD_RECIPE: &str = "images-1";

/// How an image's root filesystem is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `mmdebstrap --variant=apt <suite>` with these packages, then the service user is given
    /// uid/gid [`SERVICE_UID`] and its runtime directories are created.
    Debian {
        /// Debian suite codename (`bookworm`, `trixie`, `sid`).
        suite: &'static str,
        /// Packages installed on top of the `apt` variant.
        packages: &'static [&'static str],
        /// The service user (`postgres`, `mysql`), created when the packages do not create it.
        user: &'static str,
        /// Directories the server needs at runtime, owned by the service user (the official
        /// images create them in their Dockerfile).
        runtime_dirs: &'static [&'static str],
        /// Paths the packages' maintainer scripts fill that a fresh container must not see (a
        /// default cluster or data directory created at install time).
        remove: &'static [&'static str],
        /// The server binary whose `--version` tells the real version.
        server: &'static str,
    },
    /// The `database-operator` binary built from this checkout and the libraries it links.
    Operator,
}

/// One image family this machine can run.
#[derive(Debug, Clone, Copy)]
pub struct Recipe {
    /// Short name, used for the cache directory and `cargo xtask cluster images --only`.
    pub name: &'static str,
    /// Image repositories served, without tag (`docker.io/library/postgres` also matches
    /// `postgres` and `library/postgres`).
    pub repositories: &'static [&'static str],
    /// Where the root comes from.
    pub source: Source,
    /// Extra image environment besides `PATH` (`PATH` is `path_prefix` + the Debian default).
    pub path_prefix: &'static str,
    /// `ENTRYPOINT` of the image.
    pub entrypoint: &'static [&'static str],
    /// `CMD` of the image.
    pub cmd: &'static [&'static str],
    /// Whether the tag must match the server's version (the operator image takes any tag).
    pub versioned: bool,
}

/// Every image family a process node can run. The order is the order of
/// `cargo xtask cluster images` and of the table in docs/development.md.
pub const RECIPES: &[Recipe] = &[
    Recipe {
        name: "postgres-bookworm",
        repositories: &["docker.io/library/postgres"],
        source: Source::Debian {
            suite: "bookworm",
            packages: &["postgresql-15", "ca-certificates"],
            user: "postgres",
            runtime_dirs: &["/run/postgresql", "/var/lib/postgresql"],
            remove: &["/var/lib/postgresql/15", "/etc/postgresql/15/main"],
            server: "/usr/lib/postgresql/15/bin/postgres",
        },
        path_prefix: "/usr/lib/postgresql/15/bin:",
        entrypoint: &[],
        cmd: &["postgres"],
        versioned: true,
    },
    // An older minor of the same major, for rolling-upgrade tests (15.18 → 15.20): the
    // release's packages, pinned (bookworm main has 15.18, bookworm-security 15.20). Served only
    // for the tag 15.18 itself; every other postgres tag is the root above.
    Recipe {
        name: "postgres-15.18-bookworm",
        repositories: &["docker.io/library/postgres:15.18"],
        source: Source::Debian {
            suite: "bookworm",
            packages: &[
                "postgresql-15=15.18-0+deb12u1",
                "postgresql-client-15=15.18-0+deb12u1",
                "libpq5=15.18-0+deb12u1",
                "ca-certificates",
            ],
            user: "postgres",
            runtime_dirs: &["/run/postgresql", "/var/lib/postgresql"],
            remove: &["/var/lib/postgresql/15", "/etc/postgresql/15/main"],
            server: "/usr/lib/postgresql/15/bin/postgres",
        },
        path_prefix: "/usr/lib/postgresql/15/bin:",
        entrypoint: &[],
        cmd: &["postgres"],
        versioned: true,
    },
    Recipe {
        name: "mariadb-bookworm",
        repositories: &["docker.io/library/mariadb"],
        source: Source::Debian {
            suite: "bookworm",
            packages: &[
                "mariadb-server",
                "mariadb-client",
                "mariadb-backup",
                "ca-certificates",
            ],
            user: "mysql",
            runtime_dirs: &["/run/mysqld", "/var/lib/mysql"],
            remove: &["/var/lib/mysql"],
            server: "/usr/sbin/mariadbd",
        },
        path_prefix: "",
        entrypoint: &[],
        cmd: &["mariadbd"],
        versioned: true,
    },
    Recipe {
        name: "mysql-sid",
        repositories: &["docker.io/library/mysql"],
        source: Source::Debian {
            suite: "sid",
            packages: &[
                "mysql-server-core",
                "mysql-client",
                "passwd",
                "ca-certificates",
            ],
            user: "mysql",
            runtime_dirs: &["/run/mysqld", "/var/lib/mysql", "/var/lib/mysql-files"],
            remove: &["/var/lib/mysql"],
            server: "/usr/sbin/mysqld",
        },
        path_prefix: "",
        entrypoint: &[],
        cmd: &["mysqld"],
        versioned: true,
    },
    Recipe {
        name: "database-operator",
        repositories: &["ghcr.io/example/database-operator"],
        source: Source::Operator,
        path_prefix: "",
        entrypoint: &["/usr/local/bin/database-operator"],
        cmd: &["run"],
        versioned: false,
    },
];

impl Recipe {
    /// Whether the root holds a database server from Debian's packages (not the operator's
    /// image, which is made from this checkout's binary when a pod needs it).
    pub fn is_database(&self) -> bool {
        matches!(self.source, Source::Debian { .. })
    }
}

/// A built root filesystem and the image configuration a container of it needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRootfs {
    /// The image reference as the pod spec wrote it.
    pub image: String,
    /// The recipe that built it.
    pub recipe: String,
    /// The root directory (the overlay's lower layer; never written).
    pub root: PathBuf,
    /// Image environment (`PATH`, ...), before the container's own env.
    pub env: Vec<(String, String)>,
    /// `ENTRYPOINT`.
    pub entrypoint: Vec<String>,
    /// `CMD`.
    pub cmd: Vec<String>,
    /// The version the server binary reports (the operator's crate version for its image).
    pub version: String,
    /// Stands in for the image digest in `containerStatuses[].imageID`.
    pub image_id: String,
}

/// What [`ImageTable::resolve`] says of an image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Built and matching: run it.
    Ready(ImageRootfs),
    /// Known, being built in the background (minutes the first time): ask again later.
    Preparing,
    /// No local binaries for this reference; the reason names the image and what exists.
    Unavailable {
        /// For the container's waiting message and the pod's Warning event.
        reason: String,
    },
}

/// A recipe's root, as recorded in `image.json` beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Built {
    recipe: String,
    version: String,
    built_at_unix: u64,
    key: String,
}

#[derive(Debug, Clone)]
enum BuildState {
    Building,
    Built(Built, PathBuf),
    Failed(String),
}

/// Resolves image references to roots, building roots in the background on first use.
///
/// Cheap to clone; every clone shares the build state.
#[derive(Debug, Clone)]
pub struct ImageTable {
    cache_dir: PathBuf,
    operator_binary: Option<PathBuf>,
    state: Arc<Mutex<BTreeMap<&'static str, BuildState>>>,
}

impl ImageTable {
    /// A table caching roots under `cache_dir` (see [`default_cache_dir`]); the operator's image
    /// runs `operator_binary` (none: the operator image is unavailable).
    pub fn new(cache_dir: PathBuf, operator_binary: Option<PathBuf>) -> Self {
        Self {
            cache_dir,
            operator_binary,
            state: Arc::default(),
        }
    }

    /// Which recipe serves `image`, and the tag it asks for: a recipe naming the repository
    /// with exactly this tag (`docker.io/library/postgres:15.18`, a pinned older minor), else
    /// the one naming the repository.
    pub fn recipe_for(image: &str) -> Option<(&'static Recipe, String)> {
        let (repository, tag) = split_reference(image)?;
        let pinned = format!("{repository}:{tag}");
        RECIPES
            .iter()
            .find(|r| r.repositories.contains(&pinned.as_str()))
            .or_else(|| {
                RECIPES
                    .iter()
                    .find(|r| r.repositories.contains(&repository.as_str()))
            })
            .map(|r| (r, tag))
    }

    /// Resolves `image` without blocking: a known recipe that is not built yet starts building
    /// on a background thread and answers [`Resolution::Preparing`].
    pub fn resolve(&self, image: &str) -> Resolution {
        let Some((recipe, tag)) = Self::recipe_for(image) else {
            return Resolution::Unavailable {
                reason: format!(
                    "image {image} has no local binaries on process nodes (known: {})",
                    known_repositories()
                ),
            };
        };
        let state = self.state_of(recipe);
        match state {
            BuildState::Building => Resolution::Preparing,
            BuildState::Failed(err) => Resolution::Unavailable {
                reason: format!(
                    "image {image}: building its local root ({}) failed: {err}",
                    recipe.name
                ),
            },
            BuildState::Built(built, root) => {
                if recipe.versioned && !tag_matches(&tag, &built.version) {
                    return Resolution::Unavailable {
                        reason: format!(
                            "image {image} asks for version {tag}, but the local {} root \
                             provides {} (process nodes never run another version than the \
                             tag says)",
                            recipe.name, built.version
                        ),
                    };
                }
                Resolution::Ready(rootfs(image, recipe, &built, root))
            }
        }
    }

    /// Builds (or finds) the root of `recipe`, blocking; for `cargo xtask cluster images` and to
    /// warm the cache before tests.
    pub fn ensure(&self, recipe: &'static Recipe) -> Result<(PathBuf, String)> {
        let (root, built) =
            build_or_find(&self.cache_dir, recipe, self.operator_binary.as_deref())?;
        let version = built.version.clone();
        self.lock()
            .insert(recipe.name, BuildState::Built(built, root.clone()));
        Ok((root, version))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, BuildState>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn state_of(&self, recipe: &'static Recipe) -> BuildState {
        // The operator root follows the binary: look again whenever it changed.
        if let Some(state) = self.lock().get(recipe.name).cloned() {
            let stale = matches!(&state, BuildState::Built(b, _)
                if recipe.source == Source::Operator
                    && Some(b.key.as_str()) != self.current_key(recipe).as_deref());
            if !stale {
                return state;
            }
        }
        if let Some(key) = self.current_key(recipe)
            && let Some((root, built)) = find_built(&self.cache_dir, recipe, &key)
        {
            let state = BuildState::Built(built, root);
            self.lock().insert(recipe.name, state.clone());
            return state;
        }
        self.lock().insert(recipe.name, BuildState::Building);
        let this = self.clone();
        std::thread::spawn(move || {
            let state =
                match build_or_find(&this.cache_dir, recipe, this.operator_binary.as_deref()) {
                    Ok((root, built)) => BuildState::Built(built, root),
                    Err(err) => BuildState::Failed(format!("{err:#}")),
                };
            this.lock().insert(recipe.name, state);
        });
        BuildState::Building
    }

    fn current_key(&self, recipe: &Recipe) -> Option<String> {
        recipe_key(recipe, self.operator_binary.as_deref()).ok()
    }
}

/// `~/.cache/database-operator/images` (beside the control-plane binaries).
pub fn default_cache_dir() -> Result<PathBuf> {
    let control_plane = cache_base()?;
    Ok(control_plane
        .parent()
        .map(|base| base.join("images"))
        .unwrap_or_else(|| control_plane.join("images")))
}

/// `repository` and `tag` of a reference; `postgres:15` → (`docker.io/library/postgres`, `15`).
/// A reference without a tag means `latest`; digests (`@sha256:`) are not served.
fn split_reference(image: &str) -> Option<(String, String)> {
    if image.contains('@') {
        return None;
    }
    let (name, tag) = match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag.to_owned()),
        _ => (image, "latest".to_owned()),
    };
    let parts: Vec<&str> = name.split('/').collect();
    let has_registry = parts.len() > 1 && (parts[0].contains('.') || parts[0].contains(':'));
    let repository = match (has_registry, parts.len()) {
        (false, 1) => format!("docker.io/library/{name}"),
        (false, _) => format!("docker.io/{name}"),
        (true, _) => name.to_owned(),
    };
    Some((repository, tag))
}

/// Whether a tag asks for `version`: equal, or a prefix ending at a component boundary.
fn tag_matches(tag: &str, version: &str) -> bool {
    tag == version
        || version
            .strip_prefix(tag)
            .is_some_and(|rest| rest.starts_with('.'))
}

fn known_repositories() -> String {
    RECIPES
        .iter()
        .flat_map(|r| r.repositories.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

fn rootfs(image: &str, recipe: &Recipe, built: &Built, root: PathBuf) -> ImageRootfs {
    let strings = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    ImageRootfs {
        image: image.to_owned(),
        recipe: recipe.name.to_owned(),
        root,
        env: vec![(
            "PATH".to_owned(),
            format!("{}{DEBIAN_PATH}", recipe.path_prefix),
        )],
        entrypoint: strings(recipe.entrypoint),
        cmd: strings(recipe.cmd),
        version: built.version.clone(),
        image_id: format!("local://{}@{}", recipe.name, &built.key[..16]),
    }
}

/// The cache key of a recipe: its definition, the build recipe, and for the operator image the
/// binary's size and modification time.
fn recipe_key(recipe: &Recipe, operator_binary: Option<&Path>) -> Result<String> {
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

fn recipe_dir(cache_dir: &Path, recipe: &Recipe, key: &str) -> PathBuf {
    cache_dir.join(format!("{}-{}", recipe.name, &key[..16]))
}

fn find_built(cache_dir: &Path, recipe: &Recipe, key: &str) -> Option<(PathBuf, Built)> {
    let dir = recipe_dir(cache_dir, recipe, key);
    let built: Built = serde_json::from_slice(&fs::read(dir.join("image.json")).ok()?).ok()?;
    (built.key == key).then(|| (dir.join("rootfs"), built))
}

fn build_or_find(
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

    // The service user: uid/gid 999 as in the official image, whether or not the packages
    // created it (mysql-server-core does not).
    let script = format!(
        r#"set -eu
user={user}
uid={SERVICE_UID}
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

/// The `deb` lines for `suite`, from the mirrors this machine's apt is configured with: the
/// Debian archive (`suite`, `suite-updates`) and the security archive (`suite-security`); `sid`
/// has neither updates nor security.
fn debian_sources(suite: &str) -> Result<Vec<String>> {
    let (archive, security) = configured_mirrors()?;
    let mut lines = vec![format!("deb {archive} {suite} main")];
    if suite != "sid" && suite != "unstable" {
        lines.push(format!("deb {archive} {suite}-updates main"));
        if let Some(security) = security {
            lines.push(format!("deb {security} {suite}-security main"));
        }
    }
    Ok(lines)
}

/// The archive and security mirror URIs of the host's apt sources (deb822 `.sources` files and
/// one-line `sources.list`).
fn configured_mirrors() -> Result<(String, Option<String>)> {
    let mut texts = Vec::new();
    if let Ok(text) = fs::read_to_string("/etc/apt/sources.list") {
        texts.push(text);
    }
    if let Ok(dir) = fs::read_dir("/etc/apt/sources.list.d") {
        for entry in dir.flatten() {
            let path = entry.path();
            let ext = path.extension().and_then(|e| e.to_str());
            if matches!(ext, Some("sources" | "list"))
                && let Ok(text) = fs::read_to_string(&path)
            {
                texts.push(text);
            }
        }
    }
    let mut archive = None;
    let mut security = None;
    for (uri, suites) in texts.iter().flat_map(|t| parse_sources(t)) {
        if suites.iter().any(|s| s.ends_with("-security")) {
            security.get_or_insert(uri);
        } else if !suites.is_empty() {
            archive.get_or_insert(uri);
        }
    }
    let archive = archive.ok_or_else(|| {
        anyhow!("no Debian archive in /etc/apt/sources.list(.d): cannot build image roots")
    })?;
    Ok((archive, security))
}

/// `(uri, suites)` pairs of a sources file in either format.
fn parse_sources(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    // One-line format: `deb [opts] uri suite comp...`.
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("deb ") {
            let mut words = rest.split_whitespace().filter(|w| !w.starts_with('['));
            if let (Some(uri), Some(suite)) = (words.next(), words.next()) {
                out.push((uri.to_owned(), vec![suite.to_owned()]));
            }
        }
    }
    // deb822: stanzas separated by blank lines.
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                l.strip_prefix(name)
                    .and_then(|r| r.strip_prefix(':'))
                    .map(|v| v.trim().to_owned())
            })
        };
        let types = field("Types").unwrap_or_default();
        if !types.split_whitespace().any(|t| t == "deb") {
            continue;
        }
        if let (Some(uris), Some(suites)) = (field("URIs"), field("Suites")) {
            let suites: Vec<String> = suites.split_whitespace().map(str::to_owned).collect();
            for uri in uris.split_whitespace() {
                out.push((uri.to_owned(), suites.clone()));
            }
        }
    }
    out
}

/// Installs mmdebstrap with apt when it is missing.
fn ensure_mmdebstrap() -> Result<()> {
    if super::apt::have_command("mmdebstrap") {
        return Ok(());
    }
    super::apt::apt_install(&["mmdebstrap"])
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

/// The table `cargo xtask cluster images` prints: recipe, version, image, root (or why a recipe
/// could not be built). Fails when any recipe failed, after printing them all.
pub fn describe(table: &ImageTable, only: Option<&str>) -> Result<String> {
    let mut out = format!("{:<23} {:<9} {:<44} ROOT\n", "RECIPE", "VERSION", "IMAGE");
    let mut failed = Vec::new();
    for recipe in RECIPES {
        if only.is_some_and(|o| o != recipe.name) {
            continue;
        }
        match table.ensure(recipe) {
            Ok((root, version)) => {
                // A pinned recipe names its tag already (`postgres:15.18`).
                let repository = recipe.repositories[0];
                let image = match repository.rsplit_once(':') {
                    Some((_, tag)) if !tag.contains('/') => repository.to_owned(),
                    _ => format!("{repository}:{version}"),
                };
                out.push_str(&format!(
                    "{:<23} {:<9} {:<44} {}\n",
                    recipe.name,
                    version,
                    image,
                    root.display()
                ))
            }
            Err(err) => {
                out.push_str(&format!("{:<23} unavailable: {err:#}\n", recipe.name));
                failed.push(recipe.name);
            }
        }
    }
    if !failed.is_empty() {
        eprint!("{out}");
        bail!("could not build the roots of {}", failed.join(", "));
    }
    Ok(out)
}

/// The operator binary process nodes run for the operator's image: `database-operator` in
/// `$CARGO_TARGET_DIR/debug` (or `<workspace>/target/debug`).
pub fn default_operator_binary(workspace_root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root.join("target"))
        .join("debug/database-operator")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_normalised_like_a_registry_does() {
        let cases = [
            ("postgres:15.18", "docker.io/library/postgres", "15.18"),
            (
                "docker.io/library/postgres:15",
                "docker.io/library/postgres",
                "15",
            ),
            (
                "library/mariadb:10.11.14",
                "docker.io/library/mariadb",
                "10.11.14",
            ),
            ("mysql", "docker.io/library/mysql", "latest"),
            (
                "ghcr.io/example/database-operator:0.1.0",
                "ghcr.io/example/database-operator",
                "0.1.0",
            ),
            ("localhost:5000/x/y:1", "localhost:5000/x/y", "1"),
        ];
        for (image, repo, tag) in cases {
            assert_eq!(
                split_reference(image),
                Some((repo.to_owned(), tag.to_owned())),
                "{image}"
            );
        }
        assert_eq!(split_reference("postgres@sha256:abc"), None);
    }

    #[test]
    fn a_tag_matches_its_version_or_a_component_prefix_only() {
        assert!(tag_matches("15.18", "15.18"));
        assert!(tag_matches("15", "15.18"));
        assert!(!tag_matches("15.1", "15.18"));
        assert!(!tag_matches("16.3", "15.18"));
        assert!(!tag_matches("latest", "15.18"));
    }

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
    fn unknown_images_are_unavailable_with_a_reason_naming_them() {
        let table = ImageTable::new(PathBuf::from("/nonexistent"), None);
        match table.resolve("quay.io/someone/redis:7") {
            Resolution::Unavailable { reason } => {
                assert!(reason.contains("quay.io/someone/redis:7"), "{reason}");
                assert!(reason.contains("docker.io/library/postgres"), "{reason}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    #[test]
    fn a_built_root_of_another_version_is_not_served() {
        let dir = tempdir();
        let recipe = &RECIPES[0];
        let key = recipe_key(recipe, None).unwrap();
        let root_dir = recipe_dir(&dir, recipe, &key);
        fs::create_dir_all(root_dir.join("rootfs")).unwrap();
        let built = Built {
            recipe: recipe.name.to_owned(),
            version: "15.20".to_owned(),
            built_at_unix: 0,
            key,
        };
        fs::write(
            root_dir.join("image.json"),
            serde_json::to_vec(&built).unwrap(),
        )
        .unwrap();
        let table = ImageTable::new(dir.clone(), None);
        match table.resolve("postgres:15.20") {
            Resolution::Ready(r) => {
                assert_eq!(r.version, "15.20");
                assert_eq!(r.cmd, vec!["postgres".to_owned()]);
                assert!(r.env[0].1.starts_with("/usr/lib/postgresql/15/bin:"));
            }
            other => panic!("expected Ready, got {other:?}"),
        }
        match table.resolve("docker.io/library/postgres:16.3") {
            Resolution::Unavailable { reason } => assert!(reason.contains("15.20"), "{reason}"),
            other => panic!("expected Unavailable, got {other:?}"),
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_pinned_minor_has_its_own_root_and_every_other_tag_the_default_one() {
        let name = |image: &str| ImageTable::recipe_for(image).map(|(r, _)| r.name);
        assert_eq!(name("postgres:15.18"), Some("postgres-15.18-bookworm"));
        assert_eq!(
            name("docker.io/library/postgres:15.18"),
            Some("postgres-15.18-bookworm")
        );
        assert_eq!(name("postgres:15.20"), Some("postgres-bookworm"));
        assert_eq!(name("postgres:15"), Some("postgres-bookworm"));
        assert_eq!(name("postgres:15.1"), Some("postgres-bookworm"));
        // The pinned root's packages are exactly its version.
        let pinned = RECIPES
            .iter()
            .find(|r| r.name == "postgres-15.18-bookworm")
            .unwrap();
        let Source::Debian { packages, .. } = pinned.source else {
            panic!("a Debian recipe")
        };
        assert!(packages.contains(&"postgresql-15=15.18-0+deb12u1"));
    }

    #[test]
    fn sources_in_both_formats_give_archive_and_security_uris() {
        let deb822 = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n";
        let parsed = parse_sources(deb822);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].0, "http://mirror.example/debian-security");
        let one_line = "deb [arch=amd64] http://m.example/debian bookworm main\n";
        assert_eq!(
            parse_sources(one_line),
            vec![(
                "http://m.example/debian".to_owned(),
                vec!["bookworm".to_owned()]
            )]
        );
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

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "xtask-images-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }
}
