//! The database versions the operator supports, per engine, kept in one place.
//!
//! Everything that needs to know whether a version is supported (validation, the webhook, the
//! CLI, documentation tests) reads [`supported_versions`]. Adding a version is a one-line change
//! here plus whatever the renderer needs for it.

use std::cmp::Ordering;
use std::fmt;

use crate::Engine;

/// MySQL versions the operator can run: 8.0 and 8.4 LTS.
pub const MYSQL_VERSIONS: &[&str] = &["8.0.36", "8.0.37", "8.4.0"];

/// PostgreSQL versions the operator can run: 15 and 16.
pub const POSTGRESQL_VERSIONS: &[&str] = &["15.6", "16.2", "16.3"];

/// The versions supported for `engine`, oldest first.
///
/// ```
/// use database_operator_api::{Engine, versions::supported_versions};
/// assert!(supported_versions(Engine::Postgresql).contains(&"16.3"));
/// ```
pub fn supported_versions(engine: Engine) -> &'static [&'static str] {
    match engine {
        Engine::Mysql => MYSQL_VERSIONS,
        Engine::Postgresql => POSTGRESQL_VERSIONS,
    }
}

/// Whether `version` is one the operator supports for `engine`.
pub fn is_supported(engine: Engine, version: &str) -> bool {
    supported_versions(engine).contains(&version)
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

    /// The engine's notion of a major release: `16` for PostgreSQL 16.3, `8.0` for MySQL 8.0.36.
    ///
    /// PostgreSQL data directories are only readable by the same major release (a major upgrade
    /// needs `pg_upgrade` or a dump and restore); MySQL 8.0 → 8.4 is an in-place upgrade.
    pub fn major_release(&self, engine: Engine) -> String {
        match engine {
            Engine::Postgresql => self.major.to_string(),
            Engine::Mysql => format!("{}.{}", self.major, self.minor),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_version_parses_and_lists_are_sorted() {
        for engine in [Engine::Mysql, Engine::Postgresql] {
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
    fn ordering_is_numeric() {
        let v = |s| Version::parse(s).unwrap();
        assert!(v("8.0.9") < v("8.0.36"));
        assert!(v("8.0.37") < v("8.4.0"));
        assert!(v("15.6") < v("16.2"));
        assert_eq!(v("16.3").major_release(Engine::Postgresql), "16");
        assert_eq!(v("8.4.0").major_release(Engine::Mysql), "8.4");
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
