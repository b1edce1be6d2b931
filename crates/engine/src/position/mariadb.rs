//! MariaDB GTID positions: the last transaction per replication domain.

use super::*;

/// One MariaDB GTID: `domain-server-sequence`, e.g. `0-1-42`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MariadbGtid {
    /// Replication domain (`gtid_domain_id`).
    pub domain: u32,
    /// The server that wrote the transaction (`server_id`).
    pub server: u32,
    /// Sequence number within the domain.
    pub seq: u64,
}

impl fmt::Display for MariadbGtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

/// A MariaDB replication position (`gtid_current_pos`, `gtid_slave_pos`, `gtid_binlog_pos`):
/// the last transaction per replication domain, printed `0-1-42,1-2-7` (sorted by domain).
///
/// MariaDB orders transactions within a domain by sequence number only, so comparison is per
/// domain by sequence number. The same sequence number from two different servers means two
/// different transactions: that is [`Relation::Diverged`]. Divergence further back in a domain
/// cannot be seen from positions alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MariadbGtidPos {
    domains: BTreeMap<u32, MariadbGtid>,
}

impl MariadbGtidPos {
    /// The GTIDs, one per domain, sorted by domain.
    pub fn iter(&self) -> impl Iterator<Item = &MariadbGtid> {
        self.domains.values()
    }

    /// The GTID of `domain`, when the position has one.
    pub fn get(&self, domain: u32) -> Option<&MariadbGtid> {
        self.domains.get(&domain)
    }

    /// Sets the last GTID of its domain.
    pub fn set(&mut self, gtid: MariadbGtid) {
        self.domains.insert(gtid.domain, gtid);
    }

    /// How `self` relates to `other`, domain by domain (a missing domain is sequence 0).
    pub fn compare(&self, other: &MariadbGtidPos) -> Relation {
        let (mut a_more, mut b_more) = (false, false);
        for domain in self.domains.keys().chain(other.domains.keys()) {
            match (self.domains.get(domain), other.domains.get(domain)) {
                (Some(a), Some(b)) if a.seq == b.seq && a.server != b.server => {
                    return Relation::Diverged;
                }
                (a, b) => {
                    let (sa, sb) = (a.map_or(0, |g| g.seq), b.map_or(0, |g| g.seq));
                    a_more |= sa > sb;
                    b_more |= sb > sa;
                }
            }
        }
        Relation::from_extras(a_more, b_more)
    }
}

impl FromStr for MariadbGtidPos {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let mut pos = MariadbGtidPos::default();
        if text.is_empty() {
            return Ok(pos);
        }
        for part in text.split(',') {
            let nums: Vec<&str> = part.split('-').collect();
            let [d, srv, seq] = nums.as_slice() else {
                return Err(err(
                    "MariaDB GTID position",
                    s,
                    format!("{part:?} is not domain-server-sequence"),
                ));
            };
            let bad = |e: std::num::ParseIntError| err("MariaDB GTID position", s, e.to_string());
            let gtid = MariadbGtid {
                domain: d.parse().map_err(bad)?,
                server: srv.parse().map_err(bad)?,
                seq: seq.parse().map_err(bad)?,
            };
            if pos.domains.insert(gtid.domain, gtid).is_some() {
                return Err(err(
                    "MariaDB GTID position",
                    s,
                    format!("domain {} appears twice", gtid.domain),
                ));
            }
        }
        Ok(pos)
    }
}

impl fmt::Display for MariadbGtidPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.domains.values().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}
