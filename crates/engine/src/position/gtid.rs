//! MySQL GTID sets, including MySQL 8.4's tagged GTIDs.

use super::*;

/// A server UUID (`server_uuid`), the source part of a MySQL GTID. Printed lower-case with
/// dashes, as MySQL prints it; parsed in either case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerUuid(pub u128);

impl FromStr for ServerUuid {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let groups: Vec<&str> = s.split('-').collect();
        let shape_ok = groups.len() == 5
            && groups
                .iter()
                .zip([8, 4, 4, 4, 12])
                .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
        if !shape_ok {
            return Err(err(
                "server UUID",
                s,
                "expected 8-4-4-4-12 hexadecimal digits",
            ));
        }
        u128::from_str_radix(&groups.concat(), 16)
            .map(ServerUuid)
            .map_err(|e| err("server UUID", s, e.to_string()))
    }
}

impl fmt::Display for ServerUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = format!("{:032x}", self.0);
        write!(
            f,
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }
}

/// A MySQL 8.4+ GTID tag (`uuid:tag:1-5`): 1 to 32 characters, a letter or `_` then letters,
/// digits or `_`; case-insensitive, kept lower-case as MySQL prints it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GtidTag(String);

impl GtidTag {
    /// The tag, lower-case.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for GtidTag {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = (1..=32).contains(&s.len())
            && s.bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(err(
                "GTID tag",
                s,
                "1 to 32 characters: a letter or _ first, then letters, digits or _",
            ));
        }
        Ok(GtidTag(s.to_ascii_lowercase()))
    }
}

/// The source of a run of MySQL transactions: a server UUID and, on MySQL 8.4+, a tag.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GtidSource {
    /// The originating server.
    pub uuid: ServerUuid,
    /// The tag (`None`: untagged, the only kind before MySQL 8.4).
    pub tag: Option<GtidTag>,
}

/// A set of MySQL transactions (`gtid_executed`, `gtid_purged`, `Retrieved_Gtid_Set`).
///
/// Text form as MySQL prints it: sources sorted, each `uuid[:tag]:a-b:c:...` with merged
/// intervals, separated by `,` (MySQL adds a newline after each comma; parsing ignores all
/// whitespace). Tagged GTIDs (MySQL 8.4+) are supported: `uuid:1-5:tag:1-3` holds five untagged
/// and three tagged transactions of one server. The empty set prints as the empty string.
///
/// ```
/// use database_operator_engine::position::GtidSet;
/// let executed: GtidSet = "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5:7-9,\n\
///                          4f8a3c1e-0000-11e1-9e33-c80aa9429562:1-3".parse().unwrap();
/// let replica: GtidSet = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-9".parse().unwrap();
/// assert_eq!(executed.count(), 11);
/// assert_eq!(replica.subtract(&executed).to_string(), "3e11fa47-71ca-11e1-9e33-c80aa9429562:6");
/// assert!(!replica.is_subset(&executed));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GtidSet {
    /// Per source, closed intervals `[first, last]`: sorted, disjoint, not adjacent, non-empty.
    sources: BTreeMap<GtidSource, Vec<(u64, u64)>>,
}

/// The largest transaction number MySQL allows (`2^63 - 1`).
pub const GTID_MAX: u64 = i64::MAX as u64;

impl GtidSet {
    /// The empty set.
    pub fn new() -> GtidSet {
        GtidSet::default()
    }

    /// Whether the set holds no transaction.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// Adds transactions `first..=last` of `source` (ignored when `first > last`; numbers are
    /// clamped to `1..=GTID_MAX`).
    pub fn insert(&mut self, source: GtidSource, first: u64, last: u64) {
        let (first, last) = (first.max(1), last.min(GTID_MAX));
        if first > last {
            return;
        }
        let merged = union_intervals(
            self.sources.get(&source).map_or(&[][..], Vec::as_slice),
            &[(first, last)],
        );
        self.sources.insert(source, merged);
    }

    /// The sources and their intervals (closed, sorted, merged).
    pub fn iter(&self) -> impl Iterator<Item = (&GtidSource, &[(u64, u64)])> {
        self.sources.iter().map(|(k, v)| (k, v.as_slice()))
    }

    /// How many transactions the set holds.
    pub fn count(&self) -> u128 {
        self.sources
            .values()
            .flatten()
            .map(|&(a, b)| u128::from(b - a) + 1)
            .sum()
    }

    /// Every transaction in `self` or `other`.
    pub fn union(&self, other: &GtidSet) -> GtidSet {
        let mut out = self.clone();
        for (src, ivs) in &other.sources {
            let merged = union_intervals(out.sources.get(src).map_or(&[][..], Vec::as_slice), ivs);
            out.sources.insert(src.clone(), merged);
        }
        out
    }

    /// The transactions of `self` that are not in `other` (errant transactions, when `other` is
    /// the primary's set and `self` a replica's).
    pub fn subtract(&self, other: &GtidSet) -> GtidSet {
        let mut out = GtidSet::new();
        for (src, ivs) in &self.sources {
            let rest = match other.sources.get(src) {
                Some(theirs) => subtract_intervals(ivs, theirs),
                None => ivs.clone(),
            };
            if !rest.is_empty() {
                out.sources.insert(src.clone(), rest);
            }
        }
        out
    }

    /// The transactions in both `self` and `other`.
    pub fn intersection(&self, other: &GtidSet) -> GtidSet {
        self.subtract(&self.subtract(other))
    }

    /// Whether every transaction of `self` is in `other`.
    pub fn is_subset(&self, other: &GtidSet) -> bool {
        self.sources.iter().all(|(src, ivs)| {
            let theirs = other.sources.get(src).map_or(&[][..], Vec::as_slice);
            ivs.iter()
                .all(|&(a, b)| theirs.iter().any(|&(c, d)| c <= a && b <= d))
        })
    }

    /// How `self` relates to `other` by inclusion.
    pub fn compare(&self, other: &GtidSet) -> Relation {
        Relation::from_extras(!self.is_subset(other), !other.is_subset(self))
    }
}

/// Union of two sorted, merged interval lists.
fn union_intervals(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len());
    for (first, last) in all {
        match out.last_mut() {
            Some(prev) if first <= prev.1.saturating_add(1) => prev.1 = prev.1.max(last),
            _ => out.push((first, last)),
        }
    }
    out
}

/// `a` minus `b`, both sorted and merged.
fn subtract_intervals(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(mut first, last) in a {
        for &(c, d) in b {
            if d < first || c > last {
                continue;
            }
            if c > first {
                out.push((first, c - 1));
            }
            if d >= last {
                first = last + 1; // nothing left of this interval
                break;
            }
            first = d + 1;
        }
        if first <= last {
            out.push((first, last));
        }
    }
    out
}

impl FromStr for GtidSet {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let mut set = GtidSet::new();
        if text.is_empty() {
            return Ok(set);
        }
        for part in text.split(',') {
            let mut fields = part.split(':');
            let uuid: ServerUuid = fields
                .next()
                .unwrap_or_default()
                .parse()
                .map_err(|e: ParseError| err("GTID set", s, e.to_string()))?;
            let mut tag: Option<GtidTag> = None;
            let mut any = false;
            // A tag must be followed by at least one interval of its own.
            let mut tag_waiting = false;
            for field in fields {
                if field.starts_with(|c: char| c.is_ascii_digit()) {
                    let (first, last) = parse_interval(field)
                        .ok_or_else(|| err("GTID set", s, format!("bad interval {field:?}")))?;
                    set.insert(
                        GtidSource {
                            uuid,
                            tag: tag.clone(),
                        },
                        first,
                        last,
                    );
                    any = true;
                    tag_waiting = false;
                } else {
                    if tag_waiting {
                        return Err(err("GTID set", s, "a tag without intervals"));
                    }
                    tag_waiting = true;
                    tag = Some(
                        field
                            .parse()
                            .map_err(|e: ParseError| err("GTID set", s, e.to_string()))?,
                    );
                }
            }
            if tag_waiting {
                return Err(err("GTID set", s, "a tag without intervals"));
            }
            if !any {
                return Err(err(
                    "GTID set",
                    s,
                    format!("{uuid} has no transaction interval"),
                ));
            }
        }
        Ok(set)
    }
}

/// `n` or `n-m` with `1 <= n <= m <= GTID_MAX`.
fn parse_interval(field: &str) -> Option<(u64, u64)> {
    let num = |t: &str| -> Option<u64> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        t.parse::<u64>().ok().filter(|n| (1..=GTID_MAX).contains(n))
    };
    let (first, last) = match field.split_once('-') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => (num(field)?, num(field)?),
    };
    (first <= last).then_some((first, last))
}

impl fmt::Display for GtidSet {
    /// The canonical form on one line (sources joined by `,` without the newline MySQL adds).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last_uuid: Option<ServerUuid> = None;
        for (src, ivs) in &self.sources {
            if last_uuid == Some(src.uuid) {
                // Same server, next tag: continues the same `uuid:...` element.
            } else {
                if last_uuid.is_some() {
                    f.write_str(",")?;
                }
                write!(f, "{}", src.uuid)?;
                last_uuid = Some(src.uuid);
            }
            if let Some(tag) = &src.tag {
                write!(f, ":{}", tag.as_str())?;
            }
            for &(a, b) in ivs {
                if a == b {
                    write!(f, ":{a}")?;
                } else {
                    write!(f, ":{a}-{b}")?;
                }
            }
        }
        Ok(())
    }
}
