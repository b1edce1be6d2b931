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
//! The recipes are data ([`recipes`](mod@recipes)): what a root takes from Debian is a table
//! there, what it takes from the engine it serves (repository, service user, server program,
//! directories) is read from the engine table. Building a root (`build`: mmdebstrap, the
//! service user, the server's version; the operator's distroless-like root) and finding the
//! host's Debian mirrors (`sources`) are modules of their own.
//!
//! Roots are cached under `~/.cache/database-operator/images/<recipe>-<hash>/` (the hash covers
//! the recipe, so a changed recipe builds a new root); a build goes to a temporary directory and
//! is renamed into place only when complete, so a crash never leaves a half root that counts.

mod build;
pub mod recipes;
mod sources;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use super::binaries::cache_base;
pub use build::parse_server_version;
#[cfg(test)]
use build::recipe_dir;
use build::{build_or_find, find_built, recipe_key};
pub use recipes::recipes;

/// The standard `PATH` of a Debian-based image.
const DEBIAN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How an image's root filesystem is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `mmdebstrap --variant=apt <suite>` with these packages, then the service user is given
    /// the uid/gid the engine's official image gives it and its runtime directories are
    /// created.
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
        recipes()
            .iter()
            .find(|r| r.repositories.contains(&pinned.as_str()))
            .or_else(|| {
                recipes()
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
    recipes()
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

/// The table `cargo xtask cluster images` prints: recipe, version, image, root (or why a recipe
/// could not be built). Fails when any recipe failed, after printing them all.
pub fn describe(table: &ImageTable, only: Option<&str>) -> Result<String> {
    let mut out = format!("{:<23} {:<9} {:<44} ROOT\n", "RECIPE", "VERSION", "IMAGE");
    let mut failed = Vec::new();
    for recipe in recipes() {
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
    use std::fs;

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
        let recipe = &recipes()[0];
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
        let pinned = recipes()
            .iter()
            .find(|r| r.name == "postgres-15.18-bookworm")
            .unwrap();
        let Source::Debian { packages, .. } = pinned.source else {
            panic!("a Debian recipe")
        };
        assert!(packages.contains(&"postgresql-15=15.18-0+deb12u1"));
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
