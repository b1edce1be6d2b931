//! A PostgreSQL restore in psql's restricted mode: psql itself refuses every meta-command but
//! the one that ends the mode, whatever the dump holds, so no reading of the dump that differs
//! from psql's own ([`crate::dump_guard`]) can get a command run.
//!
//! psql has `\restrict KEY` / `\unrestrict KEY` since 13.22, 14.19, 15.14, 16.10, 17.6 and
//! 18.0. A restore with such a psql chooses a random key the dump cannot know, starts restricted
//! and stays so, except around each `\connect` line of `pg_dumpall` that the guard read as one
//! (unrestricted for that line only); the dump's own `\restrict` and `\unrestrict` lines are left
//! out (their key is written in the dump, so anyone who wrote the dump knows it). If psql's
//! reading and the guard's differ at such a line, psql reads the inserted lines as text and
//! stays restricted. With an older psql, the guard's reading alone protects the restore.

use crate::dump_guard::Meta;

/// The psql versions with restricted mode: (major, first minor).
const RESTRICT_SINCE: [(u32, u32); 5] = [(13, 22), (14, 19), (15, 14), (16, 10), (17, 6)];

/// Whether the psql whose `psql --version` printed `version` has `\restrict`.
///
/// ```
/// use database_operator_engine::psql_restrict::has_restrict;
/// assert!(has_restrict("psql (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"));
/// assert!(!has_restrict("psql (PostgreSQL) 15.13"));
/// assert!(has_restrict("psql (PostgreSQL) 18.1"));
/// ```
pub fn has_restrict(version: &str) -> bool {
    let Some(number) = version
        .split_once("(PostgreSQL) ")
        .map(|(_, rest)| rest.split_whitespace().next().unwrap_or_default())
    else {
        return false;
    };
    let digits = |s: &str| -> Option<u32> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().ok()
    };
    let mut parts = number.splitn(2, '.');
    let Some(major) = parts.next().and_then(digits) else {
        return false;
    };
    let minor = parts.next().and_then(digits).unwrap_or(0);
    if major >= 18 {
        return true;
    }
    RESTRICT_SINCE
        .iter()
        .any(|&(m, first)| m == major && minor >= first)
}

/// The lines a restricted restore sends psql, for a random `key` of letters and digits.
#[derive(Clone)]
pub struct Restricted {
    key: String,
}

impl std::fmt::Debug for Restricted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Restricted(..)")
    }
}

impl Restricted {
    /// Restricted mode with `key` (letters and digits only; `None` otherwise).
    pub fn new(key: String) -> Option<Restricted> {
        (!key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric()))
            .then_some(Restricted { key })
    }

    /// What psql reads before the dump.
    pub fn start(&self) -> Vec<u8> {
        format!("\\restrict {}\n", self.key).into_bytes()
    }

    /// What psql reads for one line of the dump that the guard let through, `meta` being what
    /// the guard read it as.
    pub fn line(&self, line: &[u8], meta: Option<Meta>) -> Vec<u8> {
        match meta {
            None => line.to_vec(),
            Some(Meta::Restrict | Meta::Unrestrict) => Vec::new(),
            Some(Meta::Connect) => {
                let mut out = format!("\\unrestrict {}\n", self.key).into_bytes();
                out.extend_from_slice(line);
                if !line.ends_with(b"\n") {
                    out.push(b'\n');
                }
                out.extend_from_slice(&self.start());
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_with_restricted_mode() {
        for (version, has) in [
            ("psql (PostgreSQL) 13.21", false),
            ("psql (PostgreSQL) 13.22", true),
            ("psql (PostgreSQL) 14.19", true),
            ("psql (PostgreSQL) 15.13 (Debian 15.13-0+deb12u1)", false),
            ("psql (PostgreSQL) 15.14", true),
            ("psql (PostgreSQL) 16.2", false),
            ("psql (PostgreSQL) 16.10", true),
            ("psql (PostgreSQL) 17.6", true),
            ("psql (PostgreSQL) 18beta1", true),
            ("psql (PostgreSQL) 9.6.24", false),
            ("mysql  Ver 9.7.0", false),
        ] {
            assert_eq!(has_restrict(version), has, "{version}");
        }
    }

    #[test]
    fn psql_stays_restricted_except_for_the_connect_lines() {
        let r = Restricted::new("K3y".into()).unwrap();
        assert_eq!(r.start(), b"\\restrict K3y\n");
        assert_eq!(r.line(b"SELECT 1;\n", None), b"SELECT 1;\n");
        assert_eq!(r.line(b"\\restrict dumpkey\n", Some(Meta::Restrict)), b"");
        assert_eq!(
            r.line(b"\\unrestrict dumpkey\n", Some(Meta::Unrestrict)),
            b""
        );
        assert_eq!(
            r.line(b"\\connect shop\n", Some(Meta::Connect)),
            b"\\unrestrict K3y\n\\connect shop\n\\restrict K3y\n"
        );
        assert_eq!(
            r.line(b"\\connect shop", Some(Meta::Connect)),
            b"\\unrestrict K3y\n\\connect shop\n\\restrict K3y\n"
        );
        assert!(Restricted::new("no spaces".into()).is_none());
        assert!(Restricted::new(String::new()).is_none());
    }
}
