//! The database versions the operator supports, per engine, kept as data: a [`Catalog`].
//!
//! Everything that needs to know whether a version is supported (validation, the webhook, the
//! CLI, the planner, documentation tests) reads [`support`] or [`supported_versions`], which
//! answer from the catalog in effect ([`catalog`]): the built-in one ([`Catalog::builtin`],
//! the lists below), or the one a process installed at start ([`install`]) from a versions
//! file (`database-operator run --versions-file`, `kubectl dbc --versions-file`), which extends
//! or restricts the built-in catalog without a new release ([`Catalog::from_yaml`]). A process
//! installs at most one catalog, before it validates anything, so every answer within a
//! process is the same. Adding a version to the built-in catalog is a one-line change here plus
//! whatever the renderer needs for it.
//!
//! Two lists per engine:
//!
//! - **supported**: what a new cluster may use and what an existing one may move to.
//! - **retired**: versions the operator used to offer and that left the catalog (end of life, or
//!   an old minor replaced by a current one). A cluster already running a retired version keeps
//!   being reconciled (its pods, Services, backups, failover); the webhook accepts an update that
//!   leaves the version as it is, with a warning, and accepts a version change only toward a
//!   supported version. A new cluster on a retired version is refused with the reason.
//!
//! Where the versions come from (checked when the catalog was last brought current):
//!
//! | engine | versions | source |
//! | --- | --- | --- |
//! | mysql | 8.4.0, 8.4.7 (8.4 LTS), 9.7.4 (9.7 LTS) | MySQL release notes; 9.7.4 is Debian sid's `mysql-server-core` |
//! | mariadb | 10.11.18, 10.11.19 (10.11 LTS) | Debian bookworm `mariadb-server` (10.11.18 in the release, 10.11.19 in bookworm-security) |
//! | mariadb | 11.8.3 (11.8 LTS) | Debian trixie `mariadb-server` |
//! | postgresql | 15.18, 15.20 | Debian bookworm `postgresql-15` (15.18 in the release this machine's image was made from, 15.20 what bookworm-security serves now and what the local postgres image is built from) |
//! | postgresql | 16.2, 16.4 | the server binaries of PyPI `pgserver` and npm `embedded-postgres` |
//! | postgresql | 16.14, 17.10, 18.4 | the newest minors of those majors published as npm `embedded-postgres` builds |
//!
//! MySQL 8.0 reached end of life in April 2026: 8.0.36 and 8.0.37 are retired. PostgreSQL 15.6
//! and 16.3 are retired in favour of newer minors of the same majors (a minor update is an
//! in-place restart).

use std::cmp::Ordering;
use std::fmt;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::Engine;

/// MySQL versions a cluster may use: 8.4 LTS and 9.7 LTS.
pub const MYSQL_VERSIONS: &[&str] = &["8.4.0", "8.4.7", "9.7.4"];

/// MariaDB versions a cluster may use: 10.11 LTS and 11.8 LTS.
pub const MARIADB_VERSIONS: &[&str] = &["10.11.18", "10.11.19", "11.8.3"];

/// PostgreSQL versions a cluster may use: 15, 16, 17 and 18.
pub const POSTGRESQL_VERSIONS: &[&str] =
    &["15.18", "15.20", "16.2", "16.4", "16.14", "17.10", "18.4"];

/// A version that left the catalog, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retired {
    /// The engine it belongs to.
    pub engine: Engine,
    /// The version as written in `spec.version`.
    pub version: &'static str,
    /// Why it left the catalog, a sentence fragment (`MySQL 8.0 reached end of life in April 2026`).
    pub reason: &'static str,
}

/// Versions the operator used to support. Clusters already running one keep being reconciled
/// and may move to a supported version; new clusters may not use them.
pub const RETIRED: &[Retired] = &[
    Retired {
        engine: Engine::Mysql,
        version: "8.0.36",
        reason: "MySQL 8.0 reached end of life in April 2026",
    },
    Retired {
        engine: Engine::Mysql,
        version: "8.0.37",
        reason: "MySQL 8.0 reached end of life in April 2026",
    },
    Retired {
        engine: Engine::Postgresql,
        version: "15.6",
        reason: "replaced by PostgreSQL 15.18, a newer minor release of the same major",
    },
    Retired {
        engine: Engine::Postgresql,
        version: "16.3",
        reason: "replaced by newer PostgreSQL 16 minor releases (16.4, 16.14)",
    },
];

/// One version in a [`Catalog`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogEntry {
    /// The engine.
    pub engine: Engine,
    /// The version as written in `spec.version` (`MAJOR.MINOR[.PATCH]`).
    pub version: String,
    /// Why it left the catalog, when it did: existing clusters keep running it, new clusters
    /// and version changes may not use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired: Option<String>,
    /// The database image of this version, when it is not the operator's usual
    /// `<image registry>/<engine image>:<version>` (a rebuilt or mirrored image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// The versions the operator knows, per engine: supported ones and retired ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Catalog {
    entries: Vec<CatalogEntry>,
}

/// How a versions file changes the built-in catalog.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CatalogMode {
    /// Add the file's versions to the built-in catalog; an entry for a version already in it
    /// replaces that entry (so `retired:` restricts a built-in version).
    #[default]
    Extend,
    /// The file's versions are the whole catalog.
    Replace,
}

/// A versions file, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogFile {
    /// `extend` (default) or `replace`.
    #[serde(default)]
    pub mode: CatalogMode,
    /// The versions.
    #[serde(default)]
    pub versions: Vec<CatalogEntry>,
}

/// A versions file that cannot be used, naming the line or the entry and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("versions file: {0}")]
pub struct CatalogError(pub String);

impl Catalog {
    /// The catalog built into this release (the lists above).
    pub fn builtin() -> Catalog {
        let supported = [
            (Engine::Mysql, MYSQL_VERSIONS),
            (Engine::Mariadb, MARIADB_VERSIONS),
            (Engine::Postgresql, POSTGRESQL_VERSIONS),
        ]
        .into_iter()
        .flat_map(|(engine, versions)| {
            versions.iter().map(move |v| CatalogEntry {
                engine,
                version: (*v).to_owned(),
                retired: None,
                image: None,
            })
        });
        let retired = RETIRED.iter().map(|r| CatalogEntry {
            engine: r.engine,
            version: r.version.to_owned(),
            retired: Some(r.reason.to_owned()),
            image: None,
        });
        Catalog {
            entries: supported.chain(retired).collect(),
        }
    }

    /// Reads a versions file and applies it to the built-in catalog. The file:
    ///
    /// ```yaml
    /// mode: extend          # or replace: the file is the whole catalog
    /// versions:
    ///   - engine: postgresql
    ///     version: "16.9"   # a new supported version
    ///   - engine: mysql
    ///     version: "8.4.0"
    ///     retired: "known crash on our hardware"   # restricts a built-in version
    ///   - engine: mysql
    ///     version: "9.7.4"
    ///     image: registry.local/db/mysql:9.7.4-debian   # an image other than the usual one
    /// ```
    ///
    /// Errors name the line (for YAML and type errors) or the entry and field (for a version
    /// that does not parse, a duplicate).
    ///
    /// ```
    /// use database_operator_api::{Engine, versions::{Catalog, Support}};
    /// let c = Catalog::from_yaml("versions:\n- {engine: postgresql, version: \"16.9\"}\n").unwrap();
    /// assert_eq!(c.support(Engine::Postgresql, "16.9"), Support::Supported);
    /// assert_eq!(c.support(Engine::Postgresql, "16.4"), Support::Supported);
    /// let err = Catalog::from_yaml("versions:\n- {engine: oracle, version: \"1.0\"}\n").unwrap_err();
    /// assert!(err.to_string().contains("line 2"), "{err}");
    /// ```
    pub fn from_yaml(text: &str) -> Result<Catalog, CatalogError> {
        let file: CatalogFile =
            serde_saphyr::from_str(text).map_err(|e| CatalogError(e.to_string()))?;
        let base = match file.mode {
            CatalogMode::Extend => Catalog::builtin(),
            CatalogMode::Replace => Catalog::default(),
        };
        base.with(&file.versions)
    }

    /// This catalog with `entries` added (an entry for a version already present replaces it).
    pub fn with(mut self, entries: &[CatalogEntry]) -> Result<Catalog, CatalogError> {
        for (i, entry) in entries.iter().enumerate() {
            if Version::parse(&entry.version).is_none() {
                return Err(CatalogError(format!(
                    "versions[{i}].version: {:?} is not MAJOR.MINOR[.PATCH]",
                    entry.version
                )));
            }
            if entries[..i]
                .iter()
                .any(|e| e.engine == entry.engine && e.version == entry.version)
            {
                return Err(CatalogError(format!(
                    "versions[{i}]: {} {} is listed twice",
                    entry.engine, entry.version
                )));
            }
            if entry
                .image
                .as_deref()
                .is_some_and(|i| i.is_empty() || i.contains(char::is_whitespace))
            {
                return Err(CatalogError(format!(
                    "versions[{i}].image: {:?} is not an image reference",
                    entry.image.as_deref().unwrap_or_default()
                )));
            }
            if entry
                .retired
                .as_deref()
                .is_some_and(|r| r.trim().is_empty())
            {
                return Err(CatalogError(format!(
                    "versions[{i}].retired: give the reason the version left the catalog"
                )));
            }
            self.entries
                .retain(|e| !(e.engine == entry.engine && e.version == entry.version));
            self.entries.push(entry.clone());
        }
        Ok(self)
    }

    /// Where `version` of `engine` stands in this catalog.
    pub fn support(&self, engine: Engine, version: &str) -> Support<'_> {
        match self
            .entries
            .iter()
            .find(|e| e.engine == engine && e.version == version)
        {
            Some(CatalogEntry {
                retired: Some(reason),
                ..
            }) => Support::Retired(reason),
            Some(_) => Support::Supported,
            None => Support::Unknown,
        }
    }

    /// The supported versions of `engine`, oldest first.
    pub fn supported_versions(&self, engine: Engine) -> Vec<&str> {
        let mut versions: Vec<(Version, &str)> = self
            .entries
            .iter()
            .filter(|e| e.engine == engine && e.retired.is_none())
            .filter_map(|e| Some((Version::parse(&e.version)?, e.version.as_str())))
            .collect();
        versions.sort();
        versions.into_iter().map(|(_, v)| v).collect()
    }

    /// The image this catalog gives `version` of `engine`, when it names one.
    pub fn image(&self, engine: Engine, version: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|e| e.engine == engine && e.version == version)
            .and_then(|e| e.image.as_deref())
    }

    /// Every entry, in the order they were added.
    pub fn entries(&self) -> &[CatalogEntry] {
        &self.entries
    }
}

static INSTALLED: OnceLock<Catalog> = OnceLock::new();

/// Makes `catalog` the catalog of this process (the operator and the CLI call it once, at
/// start, with the versions file they were given). Fails, returning it, when a catalog was
/// already installed or read: a process answers with one catalog.
pub fn install(catalog: Catalog) -> Result<(), Catalog> {
    INSTALLED.set(catalog)
}

/// The catalog in effect: the installed one, else the built-in one.
pub fn catalog() -> &'static Catalog {
    INSTALLED.get_or_init(Catalog::builtin)
}

/// The versions supported for `engine` in the catalog in effect, oldest first.
///
/// ```
/// use database_operator_api::{Engine, versions::supported_versions};
/// assert!(supported_versions(Engine::Postgresql).contains(&"16.4"));
/// assert!(supported_versions(Engine::Mariadb).contains(&"10.11.19"));
/// ```
pub fn supported_versions(engine: Engine) -> Vec<&'static str> {
    catalog().supported_versions(engine)
}

/// Whether `version` is one the catalog in effect supports for `engine` (new clusters
/// included).
pub fn is_supported(engine: Engine, version: &str) -> bool {
    support(engine, version) == Support::Supported
}

/// Where a version stands in the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support<'a> {
    /// In the catalog: any cluster may use it.
    Supported,
    /// Left the catalog, for this reason: existing clusters keep running it, new clusters may
    /// not use it.
    Retired(&'a str),
    /// Never in the catalog.
    Unknown,
}

/// Where `version` of `engine` stands in the catalog in effect.
///
/// ```
/// use database_operator_api::{Engine, versions::{support, Support}};
/// assert_eq!(support(Engine::Mysql, "9.7.4"), Support::Supported);
/// assert!(matches!(support(Engine::Mysql, "8.0.36"), Support::Retired(_)));
/// assert_eq!(support(Engine::Mysql, "5.7.44"), Support::Unknown);
/// ```
pub fn support(engine: Engine, version: &str) -> Support<'static> {
    catalog().support(engine, version)
}

/// A parsed `MAJOR.MINOR[.PATCH]` version, as written in `spec.version`.
///
/// Ordering is numeric per component (`8.0.9 < 8.0.36`); a missing patch counts as 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Version {
    /// First component (8 in `8.0.36`, 16 in `16.3`).
    pub major: u32,
    /// Second component.
    pub minor: u32,
    /// Third component, when written.
    pub patch: Option<u32>,
}

impl Version {
    /// Parses `MAJOR.MINOR` or `MAJOR.MINOR.PATCH` (digits only). Returns `None` otherwise.
    ///
    /// ```
    /// use database_operator_api::versions::Version;
    /// assert_eq!(Version::parse("16.3").map(|v| v.major), Some(16));
    /// assert!(Version::parse("latest").is_none());
    /// assert!(Version::parse("8.0.36.1").is_none());
    /// ```
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split('.');
        let num = |p: Option<&str>| -> Option<u32> {
            let p = p?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 9 {
                return None;
            }
            p.parse().ok()
        };
        let major = num(parts.next())?;
        let minor = num(parts.next())?;
        let patch = match parts.next() {
            None => None,
            Some(p) => Some(num(Some(p))?),
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            major,
            minor,
            patch,
        })
    }

    /// The engine's notion of a major release: `16` for PostgreSQL 16.3, `8.4` for MySQL 8.4.7,
    /// `10.11` for MariaDB 10.11.19.
    ///
    /// PostgreSQL data directories are only readable by the same major release (a major upgrade
    /// needs `pg_upgrade` or a dump and restore); MySQL 8.4 → 9.7 and MariaDB 10.11 → 11.8 are
    /// in-place upgrades.
    pub fn major_release(&self, engine: Engine) -> String {
        match self.release(engine) {
            (major, None) => major.to_string(),
            (major, Some(minor)) => format!("{major}.{minor}"),
        }
    }

    /// The engine's major release as numbers, ordered as the releases are: `(16, None)` for
    /// PostgreSQL 16.3, `(8, Some(4))` for MySQL 8.4.7 (see [`Version::major_release`]).
    pub fn release(&self, engine: Engine) -> (u32, Option<u32>) {
        match engine {
            Engine::Postgresql => (self.major, None),
            Engine::Mysql | Engine::Mariadb => (self.major, Some(self.minor)),
        }
    }

    fn key(&self) -> (u32, u32, u32) {
        (self.major, self.minor, self.patch.unwrap_or(0))
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patch {
            Some(p) => write!(f, "{}.{}.{}", self.major, self.minor, p),
            None => write!(f, "{}.{}", self.major, self.minor),
        }
    }
}

/// MySQL long-term support series, oldest first. 8.0 counts as one: 8.0 to 8.4 is MySQL's
/// supported path out of it.
pub const MYSQL_LTS_SERIES: &[(u32, u32)] = &[(8, 0), (8, 4), (9, 7)];

/// MariaDB long-term releases, oldest first.
pub const MARIADB_LTS_SERIES: &[(u32, u32)] = &[(10, 5), (10, 6), (10, 11), (11, 4), (11, 8)];

/// Why an in-place upgrade from `from` to `to` (a higher version of `engine`) is not supported,
/// or `None` when it is. The engines' rules:
///
/// - **PostgreSQL**: within a major version only (a data directory cannot be opened by another
///   major version; that needs `pg_upgrade` or a dump and restore).
/// - **MySQL**: within a series, or to a later series up to the next LTS series (8.0 to 8.4,
///   8.4 to 9.7, an innovation release to the next LTS); skipping an LTS series (8.0 to 9.7) is
///   not supported.
/// - **MariaDB**: from a long-term release to any later release; from a short-term release
///   only up to the next long-term release.
///
/// ```
/// use database_operator_api::{Engine, versions::{Version, upgrade_refusal}};
/// let v = |s| Version::parse(s).unwrap();
/// assert!(upgrade_refusal(Engine::Mysql, v("8.4.7"), v("9.7.4")).is_none());
/// assert!(upgrade_refusal(Engine::Mysql, v("8.0.36"), v("9.7.4")).unwrap().contains("8.4"));
/// assert!(upgrade_refusal(Engine::Mariadb, v("10.11.19"), v("11.8.3")).is_none());
/// assert!(upgrade_refusal(Engine::Postgresql, v("15.18"), v("16.4")).is_some());
/// ```
pub fn upgrade_refusal(engine: Engine, from: Version, to: Version) -> Option<String> {
    let (a, b) = ((from.major, from.minor), (to.major, to.minor));
    match engine {
        Engine::Postgresql => (from.major != to.major).then(|| {
            format!(
                "PostgreSQL major version change from {} to {} is not supported in place: a data directory of one major version cannot be opened by another (it needs pg_upgrade or a dump and restore); create a new cluster at {to} and migrate the data",
                from.major, to.major
            )
        }),
        Engine::Mysql => {
            if a == b {
                return None;
            }
            match MYSQL_LTS_SERIES.iter().find(|s| **s > a) {
                Some(next) if b <= *next => None,
                Some(next) => Some(format!(
                    "MySQL upgrades in place only up to the next LTS series: from {}.{} upgrade to {}.{} first, then to {to} (skipping an LTS series is not supported)",
                    a.0, a.1, next.0, next.1
                )),
                None => Some(format!(
                    "no supported in-place upgrade path from MySQL {from} to {to} is known to the operator"
                )),
            }
        }
        Engine::Mariadb => {
            if a == b || MARIADB_LTS_SERIES.contains(&a) {
                return None;
            }
            match MARIADB_LTS_SERIES.iter().find(|s| **s > a) {
                Some(next) if b <= *next => None,
                Some(next) => Some(format!(
                    "MariaDB {}.{} is a short-term release: upgrade to the long-term release {}.{} first, then to {to}",
                    a.0, a.1, next.0, next.1
                )),
                None => Some(format!(
                    "no supported in-place upgrade path from MariaDB {from} to {to} is known to the operator"
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_version_parses_and_lists_are_sorted() {
        for engine in Engine::ALL {
            let parsed: Vec<Version> = supported_versions(engine)
                .iter()
                .map(|v| Version::parse(v).unwrap_or_else(|| panic!("{v} must parse")))
                .collect();
            assert!(
                parsed.windows(2).all(|w| w[0] < w[1]),
                "{engine}: {parsed:?}"
            );
        }
    }

    #[test]
    fn retired_versions_parse_and_are_not_supported() {
        for r in RETIRED {
            assert!(Version::parse(r.version).is_some(), "{}", r.version);
            assert!(
                !is_supported(r.engine, r.version),
                "{} {}",
                r.engine,
                r.version
            );
            assert!(!r.reason.is_empty());
        }
        assert!(
            matches!(support(Engine::Mysql, "8.0.36"), Support::Retired(r) if r.contains("end of life"))
        );
        assert_eq!(support(Engine::Mariadb, "8.0.36"), Support::Unknown);
    }

    #[test]
    fn ordering_is_numeric() {
        let v = |s| Version::parse(s).unwrap();
        assert!(v("8.0.9") < v("8.0.36"));
        assert!(v("8.0.37") < v("8.4.0"));
        assert!(v("15.6") < v("16.2"));
        assert_eq!(v("16.3").major_release(Engine::Postgresql), "16");
        assert_eq!(v("8.4.0").major_release(Engine::Mysql), "8.4");
    }

    #[test]
    fn upgrade_paths_follow_the_engines_rules() {
        let v = |s| Version::parse(s).unwrap();
        let ok = |e, a, b| upgrade_refusal(e, v(a), v(b)).is_none();
        assert!(ok(Engine::Mysql, "8.4.0", "8.4.7"));
        assert!(ok(Engine::Mysql, "8.0.37", "8.4.7"));
        assert!(ok(Engine::Mysql, "8.4.7", "9.7.4"));
        assert!(
            ok(Engine::Mysql, "8.4.7", "9.1.0"),
            "LTS to an innovation release"
        );
        assert!(
            ok(Engine::Mysql, "9.1.0", "9.7.4"),
            "innovation to the next LTS"
        );
        assert!(!ok(Engine::Mysql, "8.0.37", "9.7.4"), "skips 8.4 LTS");
        assert!(!ok(Engine::Mysql, "9.7.4", "10.1.0"), "no known path");
        assert!(ok(Engine::Mariadb, "10.11.18", "10.11.19"));
        assert!(ok(Engine::Mariadb, "10.11.19", "11.8.3"));
        assert!(ok(Engine::Mariadb, "10.6.20", "11.8.3"));
        assert!(
            ok(Engine::Mariadb, "11.1.2", "11.4.5"),
            "short-term to the next LTS"
        );
        assert!(
            !ok(Engine::Mariadb, "11.1.2", "11.8.3"),
            "short-term past the next LTS"
        );
        assert!(ok(Engine::Postgresql, "16.2", "16.14"));
        assert!(!ok(Engine::Postgresql, "16.14", "17.10"));
    }

    #[test]
    fn a_versions_file_extends_or_restricts_the_builtin_catalog() {
        let c = Catalog::from_yaml(
            "versions:\n  - engine: postgresql\n    version: \"16.9\"\n  - engine: mysql\n    version: \"8.4.0\"\n    retired: known crash\n",
        )
        .unwrap();
        assert_eq!(c.support(Engine::Postgresql, "16.9"), Support::Supported);
        assert_eq!(
            c.support(Engine::Mysql, "8.4.0"),
            Support::Retired("known crash")
        );
        assert_eq!(c.support(Engine::Mysql, "8.4.7"), Support::Supported);
        let pg = c.supported_versions(Engine::Postgresql);
        assert_eq!(
            pg.iter().position(|v| *v == "16.9"),
            pg.iter().position(|v| *v == "16.4").map(|i| i + 1)
        );

        let with_image = Catalog::from_yaml(
            "versions:\n  - {engine: mysql, version: \"9.7.4\", image: \"registry.local/mysql:9.7.4-debian\"}\n",
        )
        .unwrap();
        assert_eq!(
            with_image.image(Engine::Mysql, "9.7.4"),
            Some("registry.local/mysql:9.7.4-debian")
        );
        assert_eq!(with_image.image(Engine::Mysql, "8.4.7"), None);
        assert!(
            Catalog::from_yaml(
                "versions:\n  - {engine: mysql, version: \"9.7.4\", image: \"a b\"}\n"
            )
            .is_err()
        );

        let only = Catalog::from_yaml(
            "mode: replace\nversions:\n  - {engine: mariadb, version: \"11.8.3\"}\n",
        )
        .unwrap();
        assert_eq!(only.supported_versions(Engine::Mariadb), ["11.8.3"]);
        assert!(only.supported_versions(Engine::Mysql).is_empty());
        assert_eq!(only.support(Engine::Mysql, "8.0.36"), Support::Unknown);
    }

    #[test]
    fn versions_file_errors_name_the_line_or_the_field() {
        let err = |text: &str| Catalog::from_yaml(text).unwrap_err().to_string();
        let e = err("versions:\n  - engine: postgresql\n    version: \"16.9\"\n    imag: x\n");
        assert!(e.contains("line 4") && e.contains("imag"), "{e}");
        let e = err("versions:\n  - engine: postgres\n    version: \"16.9\"\n");
        assert!(e.contains("line 2") && e.contains("postgres"), "{e}");
        let e = err(
            "versions:\n  - {engine: mysql, version: \"8.4\"}\n  - {engine: mysql, version: latest}\n",
        );
        assert_eq!(
            e,
            "versions file: versions[1].version: \"latest\" is not MAJOR.MINOR[.PATCH]"
        );
        let e = err(
            "versions:\n  - {engine: mysql, version: \"8.4.9\"}\n  - {engine: mysql, version: \"8.4.9\"}\n",
        );
        assert!(
            e.contains("versions[1]: mysql 8.4.9 is listed twice"),
            "{e}"
        );
        let e = err("mode: merge\n");
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn the_builtin_catalog_is_the_lists() {
        let c = Catalog::builtin();
        for engine in Engine::ALL {
            let want: Vec<&str> = match engine {
                Engine::Mysql => MYSQL_VERSIONS.to_vec(),
                Engine::Mariadb => MARIADB_VERSIONS.to_vec(),
                Engine::Postgresql => POSTGRESQL_VERSIONS.to_vec(),
            };
            assert_eq!(c.supported_versions(engine), want);
        }
        assert_eq!(
            c.entries().len(),
            MYSQL_VERSIONS.len()
                + MARIADB_VERSIONS.len()
                + POSTGRESQL_VERSIONS.len()
                + RETIRED.len()
        );
    }

    #[test]
    fn rejects_malformed() {
        for s in [
            "", "8", "8.", ".1", "8.0.36.1", "latest", "8.0.x", "v8.0.36", "8..0", "-1.0",
        ] {
            assert!(Version::parse(s).is_none(), "{s:?} should not parse");
        }
    }
}
