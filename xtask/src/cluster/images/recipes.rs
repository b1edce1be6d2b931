//! The image recipes as data: what each root takes from Debian (suite, packages, where the
//! packages put the server, what their maintainer scripts leave behind) in [`DEBIAN_RECIPES`],
//! and what it takes from the engine it serves, read from the engine table
//! ([`database_operator_engine::of`]): the image repository, the service user and its uid, the
//! server program, the socket and data directories. [`recipes`] joins the two into the
//! [`Recipe`]s the image table serves, and adds the operator's own image.

use std::sync::LazyLock;

use database_operator_api::Engine;
use database_operator_engine::{self as engine, EngineDef};

use super::{DEBIAN_PATH, Recipe, Source};

/// The registry path of the official images: the operator's default `imageRegistry`.
pub const DEFAULT_REGISTRY: &str = "docker.io/library";

/// What a database image's root takes from Debian; the rest comes from the engine table.
#[derive(Debug, Clone, Copy)]
pub struct DebianRecipe {
    /// Short name, used for the cache directory and `cargo xtask cluster images --only`.
    pub name: &'static str,
    /// The engine served, by its API name (`spec.engine`: `postgresql`, `mysql`, `mariadb`).
    pub engine: &'static str,
    /// The one tag this recipe serves (a pinned older minor), or `None`: every other tag of the
    /// engine's repository.
    pub pinned_tag: Option<&'static str>,
    /// Debian suite codename (`bookworm`, `trixie`, `sid`).
    pub suite: &'static str,
    /// Packages installed on top of mmdebstrap's `apt` variant.
    pub packages: &'static [&'static str],
    /// Where the packages install the server program; put first on `PATH` unless Debian's
    /// default `PATH` has it.
    pub bin_dir: &'static str,
    /// Runtime directories the server needs besides its socket and data directories (MySQL's
    /// `secure_file_priv` directory).
    pub extra_dirs: &'static [&'static str],
    /// Paths the packages' maintainer scripts fill that a fresh container must not see (a
    /// default cluster or data directory created at install time).
    pub remove: &'static [&'static str],
}

/// The database roots, in the order of `cargo xtask cluster images` and of the table in
/// docs/development.md. Every engine has one recipe without a pinned tag.
pub const DEBIAN_RECIPES: &[DebianRecipe] = &[
    DebianRecipe {
        name: "postgres-bookworm",
        engine: "postgresql",
        pinned_tag: None,
        suite: "bookworm",
        packages: &["postgresql-15", "ca-certificates"],
        bin_dir: "/usr/lib/postgresql/15/bin",
        extra_dirs: &[],
        remove: &["/var/lib/postgresql/15", "/etc/postgresql/15/main"],
    },
    // An older minor of the same major, for rolling-upgrade tests (15.18 → 15.20): the
    // release's packages, pinned (bookworm main has 15.18, bookworm-security 15.20). Served only
    // for the tag 15.18 itself; every other postgres tag is the root above.
    DebianRecipe {
        name: "postgres-15.18-bookworm",
        engine: "postgresql",
        pinned_tag: Some("15.18"),
        suite: "bookworm",
        packages: &[
            "postgresql-15=15.18-0+deb12u1",
            "postgresql-client-15=15.18-0+deb12u1",
            "libpq5=15.18-0+deb12u1",
            "ca-certificates",
        ],
        bin_dir: "/usr/lib/postgresql/15/bin",
        extra_dirs: &[],
        remove: &["/var/lib/postgresql/15", "/etc/postgresql/15/main"],
    },
    DebianRecipe {
        name: "mariadb-bookworm",
        engine: "mariadb",
        pinned_tag: None,
        suite: "bookworm",
        packages: &[
            "mariadb-server",
            "mariadb-client",
            "mariadb-backup",
            "ca-certificates",
        ],
        bin_dir: "/usr/sbin",
        extra_dirs: &[],
        remove: &["/var/lib/mysql"],
    },
    DebianRecipe {
        name: "mysql-sid",
        engine: "mysql",
        pinned_tag: None,
        suite: "sid",
        packages: &[
            "mysql-server-core",
            "mysql-client",
            "passwd",
            "ca-certificates",
        ],
        bin_dir: "/usr/sbin",
        extra_dirs: &["/var/lib/mysql-files"],
        remove: &["/var/lib/mysql"],
    },
];

/// The operator's image: the `database-operator` binary built from this checkout.
const OPERATOR: Recipe = Recipe {
    name: "database-operator",
    repositories: &["ghcr.io/example/database-operator"],
    source: Source::Operator,
    path_prefix: "",
    entrypoint: &["/usr/local/bin/database-operator"],
    cmd: &["run"],
    versioned: false,
};

/// Every image family a process node can run: the database roots of [`DEBIAN_RECIPES`] with
/// their engines' facts, then the operator's image.
pub fn recipes() -> &'static [Recipe] {
    static RECIPES: LazyLock<Vec<Recipe>> = LazyLock::new(|| {
        DEBIAN_RECIPES
            .iter()
            .map(DebianRecipe::recipe)
            .chain([OPERATOR])
            .collect()
    });
    &RECIPES
}

/// The engine a recipe's root serves, if it is a database root.
pub fn engine_of(recipe: &Recipe) -> Option<&'static dyn EngineDef> {
    DEBIAN_RECIPES
        .iter()
        .find(|d| d.name == recipe.name)
        .map(DebianRecipe::engine)
}

impl DebianRecipe {
    /// The engine table's definition of [`DebianRecipe::engine`].
    pub fn engine(&self) -> &'static dyn EngineDef {
        let engine = Engine::ALL
            .into_iter()
            .find(|e| e.as_str() == self.engine)
            .unwrap_or_else(|| panic!("recipe {}: no engine {:?}", self.name, self.engine));
        engine::of(engine)
    }

    /// The recipe the image table serves: this packaging, with the engine's facts.
    fn recipe(&self) -> Recipe {
        let def = self.engine();
        let repository = format!("{DEFAULT_REGISTRY}/{}", def.image_repository());
        let repository = match self.pinned_tag {
            Some(tag) => format!("{repository}:{tag}"),
            None => repository,
        };
        let program = def.server_program();
        let on_path = DEBIAN_PATH.split(':').any(|d| d == self.bin_dir);
        let runtime_dirs: Vec<&'static str> = [
            debian_path(def.socket_dir()),
            state_dir(def.data_mount_path()),
        ]
        .into_iter()
        .chain(self.extra_dirs.iter().copied())
        .collect();
        Recipe {
            name: self.name,
            repositories: leak(vec![leak_str(repository)]),
            source: Source::Debian {
                suite: self.suite,
                packages: self.packages,
                user: def.os_user(),
                runtime_dirs: leak(runtime_dirs),
                remove: self.remove,
                server: leak_str(format!("{}/{program}", self.bin_dir)),
            },
            path_prefix: if on_path {
                ""
            } else {
                leak_str(format!("{}:", self.bin_dir))
            },
            entrypoint: &[],
            cmd: leak(vec![program]),
            versioned: true,
        }
    }
}

/// A path as Debian has it: `/var/run` is a link to `/run`, and the directory is made there.
fn debian_path(path: &'static str) -> &'static str {
    match path.strip_prefix("/var/run/") {
        Some(rest) => leak_str(format!("/run/{rest}")),
        None => path,
    }
}

/// The service's directory under `/var/lib` that holds its data mount (the packages' home of
/// the service user): `/var/lib/postgresql` for `/var/lib/postgresql/data`, `/var/lib/mysql`
/// for itself.
fn state_dir(data_mount: &'static str) -> &'static str {
    let Some(rest) = data_mount.strip_prefix("/var/lib/") else {
        return data_mount;
    };
    match rest.split_once('/') {
        Some((service, _)) => &data_mount[.."/var/lib/".len() + service.len()],
        None => data_mount,
    }
}

// The recipes are made once per process (see `recipes`), so their strings live as long.
fn leak_str(s: String) -> &'static str {
    s.leak()
}

fn leak<T>(v: Vec<T>) -> &'static [T] {
    v.leak()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_has_a_recipe_for_all_its_tags() {
        for engine in Engine::ALL {
            let def = engine::of(engine);
            let image = format!("{}:latest", def.image_repository());
            let (recipe, _) = super::super::ImageTable::recipe_for(&image)
                .unwrap_or_else(|| panic!("no recipe serves {image}"));
            assert!(recipe.is_database(), "{image}");
            let debian = DEBIAN_RECIPES
                .iter()
                .find(|d| d.name == recipe.name)
                .unwrap();
            assert_eq!(debian.engine().engine(), engine, "{image}");
            assert_eq!(debian.pinned_tag, None, "{image}");
        }
    }

    #[test]
    fn the_recipes_agree_with_the_engine_table() {
        for recipe in recipes().iter().filter(|r| r.is_database()) {
            let def = engine_of(recipe).expect("a database recipe has an engine");
            let Source::Debian {
                user,
                runtime_dirs,
                server,
                ..
            } = recipe.source
            else {
                panic!("{}: a Debian recipe", recipe.name)
            };
            let name = recipe.name;
            let repository = format!("docker.io/library/{}", def.image_repository());
            assert!(
                recipe.repositories[0] == repository
                    || recipe.repositories[0].starts_with(&format!("{repository}:")),
                "{name}: {:?}",
                recipe.repositories
            );
            assert_eq!(user, def.os_user(), "{name}");
            assert_eq!(recipe.cmd, [def.server_program()], "{name}");
            assert!(
                server.ends_with(&format!("/{}", def.server_program())),
                "{name}: {server}"
            );
            let socket = def.socket_dir().trim_start_matches("/var");
            assert!(runtime_dirs.contains(&socket), "{name}: {runtime_dirs:?}");
            assert!(
                runtime_dirs
                    .iter()
                    .any(|d| def.data_mount_path().starts_with(d)),
                "{name}: {runtime_dirs:?} hold no {}",
                def.data_mount_path()
            );
        }
    }

    #[test]
    fn paths_are_made_where_debian_has_them() {
        assert_eq!(debian_path("/var/run/mysqld"), "/run/mysqld");
        assert_eq!(debian_path("/run/x"), "/run/x");
        assert_eq!(state_dir("/var/lib/postgresql/data"), "/var/lib/postgresql");
        assert_eq!(state_dir("/var/lib/mysql"), "/var/lib/mysql");
        assert_eq!(state_dir("/srv/data"), "/srv/data");
    }
}
