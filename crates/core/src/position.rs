//! Replication positions and how they compare: the arithmetic behind failover.
//!
//! Each engine says "how far a server has got" differently:
//! - PostgreSQL: a write-ahead-log position ([`Lsn`], printed `16/B374D848`) on a timeline
//!   ([`TimelineId`]); a promotion starts a new timeline, whose history file records the LSN
//!   where it left its parent ([`TimelineHistory`]). Together: [`PgPosition`].
//! - MySQL: the set of transactions a server has applied ([`GtidSet`], printed
//!   `3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9`), including MySQL 8.4's tagged GTIDs
//!   (`uuid:tag:1-5`).
//! - MariaDB: the last transaction seen per replication domain ([`MariadbGtidPos`], printed
//!   `0-1-42,1-2-7`).
//!
//! [`Position::compare`] answers, for two servers of one cluster, whether one has everything the
//! other has ([`Relation::Ahead`], [`Relation::Behind`], [`Relation::Equal`]) or each has
//! something the other lacks ([`Relation::Diverged`]: errant transactions, or writes on an old
//! timeline after the fork). [`elect`] uses it to choose whom to promote and to say, in words an
//! SRE can read in status, why every other candidate lost.
//!
//! Everything here is pure: text in, values out; nothing is read from a server.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Why a position could not be parsed. The message names the offending part of the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {input:?}: {reason}")]
pub struct ParseError {
    /// What was being parsed (`LSN`, `GTID set`, ...).
    pub what: &'static str,
    /// The offending text (a position is not a secret).
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

fn err(what: &'static str, input: &str, reason: impl Into<String>) -> ParseError {
    ParseError {
        what,
        input: input.to_owned(),
        reason: reason.into(),
    }
}

// ------------------------------------------------------------------------------------------
// Comparison result
// ------------------------------------------------------------------------------------------

/// How a position `a` relates to a position `b` (read: "`a` is ... `b`").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Relation {
    /// Both hold exactly the same transactions.
    Equal,
    /// `a` holds everything `b` holds, and more: `b` can catch up by following `a`.
    Ahead,
    /// `b` holds everything `a` holds, and more: `a` can catch up by following `b`.
    Behind,
    /// Each holds something the other lacks: errant transactions (MySQL, MariaDB) or writes on
    /// a timeline after another server forked from it (PostgreSQL). Neither can follow the
    /// other without losing or rewinding data.
    Diverged,
    /// The positions cannot be compared: different engines, or PostgreSQL positions on
    /// different timelines whose history is not known. Treat as unsafe (never promote on it).
    Unknown,
}

impl Relation {
    /// The relation seen from the other side (`compare(b, a)` for `compare(a, b)`).
    pub const fn reverse(self) -> Relation {
        match self {
            Relation::Ahead => Relation::Behind,
            Relation::Behind => Relation::Ahead,
            other => other,
        }
    }

    /// Lower-case word for messages (`equal`, `ahead`, `behind`, `diverged`, `unknown`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Relation::Equal => "equal",
            Relation::Ahead => "ahead",
            Relation::Behind => "behind",
            Relation::Diverged => "diverged",
            Relation::Unknown => "unknown",
        }
    }

    /// Combines "`a` has something `b` lacks" and "`b` has something `a` lacks".
    const fn from_extras(a_has_more: bool, b_has_more: bool) -> Relation {
        match (a_has_more, b_has_more) {
            (false, false) => Relation::Equal,
            (true, false) => Relation::Ahead,
            (false, true) => Relation::Behind,
            (true, true) => Relation::Diverged,
        }
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// ------------------------------------------------------------------------------------------
// PostgreSQL
// ------------------------------------------------------------------------------------------

/// A PostgreSQL write-ahead-log position (`pg_lsn`), a byte offset in the WAL stream.
///
/// Text form as PostgreSQL prints it: two upper-case hexadecimal halves without padding,
/// `16/B374D848` (`0x16 << 32 | 0xB374D848`). Parsing accepts either case.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// Bytes from `self` up to `other` (zero when `other` is not past `self`).
    pub const fn bytes_until(self, other: Lsn) -> u64 {
        other.0.saturating_sub(self.0)
    }
}

impl FromStr for Lsn {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let (hi, lo) = text.split_once('/').ok_or_else(|| {
            err(
                "LSN",
                s,
                "expected two hexadecimal halves, as in 16/B374D848",
            )
        })?;
        let half = |h: &str| -> Result<u64, ParseError> {
            if h.is_empty() || h.len() > 8 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err("LSN", s, "each half is 1 to 8 hexadecimal digits"));
            }
            u64::from_str_radix(h, 16).map_err(|e| err("LSN", s, e.to_string()))
        };
        Ok(Lsn(half(hi)? << 32 | half(lo)?))
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// A PostgreSQL timeline id. A fresh cluster starts on timeline 1; every promotion starts a new
/// timeline with a higher id than any before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimelineId(pub u32);

impl fmt::Display for TimelineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One line of a timeline history file: timeline `parent` ended at `switch_lsn`, where its child
/// began. WAL before `switch_lsn` is shared by parent and child; WAL from it on is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimelineSwitch {
    /// The ancestor timeline.
    pub parent: TimelineId,
    /// The LSN where the ancestor ended and the next timeline of this history began.
    pub switch_lsn: Lsn,
}

/// The ancestry of a timeline, oldest first, as in PostgreSQL's `0000000N.history` file
/// (`pg_read_file('pg_wal/00000002.history')` or the replication command `TIMELINE_HISTORY`).
/// Timeline 1 has an empty history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TimelineHistory {
    /// Ancestors, oldest first; timelines strictly increase and switch LSNs never decrease.
    pub switches: Vec<TimelineSwitch>,
}

impl TimelineHistory {
    /// Parses a history file: one `parentTLI<TAB>switchpoint<TAB>reason` line per ancestor;
    /// blank lines and `#` comments are skipped.
    ///
    /// ```
    /// use database_operator_core::position::{Lsn, TimelineHistory, TimelineId};
    /// let h = TimelineHistory::parse("1\t0/3000060\tno recovery target specified\n").unwrap();
    /// assert_eq!(h.switches[0].parent, TimelineId(1));
    /// assert_eq!(h.switches[0].switch_lsn, "0/3000060".parse::<Lsn>().unwrap());
    /// ```
    pub fn parse(text: &str) -> Result<TimelineHistory, ParseError> {
        let mut switches: Vec<TimelineSwitch> = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(tli), Some(lsn)) = (fields.next(), fields.next()) else {
                return Err(err(
                    "timeline history",
                    line,
                    "expected `timeline<TAB>switch LSN<TAB>reason`",
                ));
            };
            let parent = tli
                .parse::<u32>()
                .map_err(|e| err("timeline history", line, e.to_string()))?;
            let switch_lsn: Lsn = lsn.parse()?;
            if let Some(last) = switches.last()
                && (parent <= last.parent.0 || switch_lsn < last.switch_lsn)
            {
                return Err(err(
                    "timeline history",
                    line,
                    "timelines must increase and switch points must not go back",
                ));
            }
            switches.push(TimelineSwitch {
                parent: TimelineId(parent),
                switch_lsn,
            });
        }
        Ok(TimelineHistory { switches })
    }
}

/// Where a PostgreSQL server is: a WAL position on a timeline, with the timeline's history when
/// it is known.
///
/// For failover compare what a standby has *received* (`pg_last_wal_receive_lsn()`): received
/// WAL is replayed after promotion. For a primary use `pg_current_wal_lsn()`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PgPosition {
    /// The timeline the server is on.
    pub timeline: TimelineId,
    /// The end of the WAL the server has (everything before this LSN).
    pub lsn: Lsn,
    /// The history of `timeline`; `None` when not known. Timeline 1 needs none.
    pub history: Option<TimelineHistory>,
}

impl PgPosition {
    /// A position on `timeline` whose history is not known (known to be empty on timeline 1).
    pub fn new(timeline: u32, lsn: Lsn) -> PgPosition {
        PgPosition {
            timeline: TimelineId(timeline),
            lsn,
            history: None,
        }
    }

    /// The history of this position's timeline, when known (always for timeline 1).
    fn known_history(&self) -> Option<&[TimelineSwitch]> {
        match &self.history {
            Some(h) => Some(&h.switches),
            None if self.timeline.0 <= 1 => Some(&[]),
            None => None,
        }
    }

    /// The timeline the WAL byte at `at` belongs to on this server's line of history.
    fn timeline_at(history: &[TimelineSwitch], current: TimelineId, at: Lsn) -> TimelineId {
        history
            .iter()
            .find(|s| at < s.switch_lsn)
            .map_or(current, |s| s.parent)
    }

    /// Where the histories of `self` and `other` part: the first LSN whose WAL belongs to
    /// different timelines on the two servers.
    pub fn fork_point(&self, other: &PgPosition) -> Fork {
        if self.timeline == other.timeline {
            return Fork::SameLine;
        }
        let (Some(ha), Some(hb)) = (self.known_history(), other.known_history()) else {
            return Fork::UnknownHistory;
        };
        // Timelines change only at switch points, so the first difference is at LSN 0 or at
        // one of them.
        let mut boundaries: Vec<Lsn> = std::iter::once(Lsn(0))
            .chain(ha.iter().chain(hb).map(|s| s.switch_lsn))
            .collect();
        boundaries.sort_unstable();
        boundaries
            .into_iter()
            .find(|&at| {
                Self::timeline_at(ha, self.timeline, at)
                    != Self::timeline_at(hb, other.timeline, at)
            })
            .map_or(Fork::SameLine, Fork::At)
    }

    /// How `self` relates to `other`: by LSN on one line of history, [`Relation::Diverged`]
    /// when both have WAL past the point where their timelines part, [`Relation::Unknown`] when
    /// the timelines differ and a history needed to tell is missing.
    pub fn compare(&self, other: &PgPosition) -> Relation {
        match self.fork_point(other) {
            Fork::UnknownHistory => Relation::Unknown,
            Fork::At(fork) if fork < self.lsn && fork < other.lsn => Relation::Diverged,
            Fork::SameLine | Fork::At(_) => match self.lsn.cmp(&other.lsn) {
                std::cmp::Ordering::Equal => Relation::Equal,
                std::cmp::Ordering::Greater => Relation::Ahead,
                std::cmp::Ordering::Less => Relation::Behind,
            },
        }
    }
}

/// Where two PostgreSQL histories part ([`PgPosition::fork_point`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fork {
    /// One line of history: the WAL both have is the same.
    SameLine,
    /// WAL from this LSN on belongs to different timelines on the two servers.
    At(Lsn),
    /// The timelines differ and a history needed to tell where they part is not known.
    UnknownHistory,
}

impl fmt::Display for PgPosition {
    /// `timeline 2, LSN 0/3000060`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "timeline {}, LSN {}", self.timeline, self.lsn)
    }
}

// ------------------------------------------------------------------------------------------
// MySQL GTID sets
// ------------------------------------------------------------------------------------------

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
/// use database_operator_core::position::GtidSet;
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

// ------------------------------------------------------------------------------------------
// MariaDB GTID positions
// ------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------
// Any engine
// ------------------------------------------------------------------------------------------

/// A replication position of any engine.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// PostgreSQL: timeline and LSN.
    Postgresql(PgPosition),
    /// MySQL: executed GTID set.
    Mysql(GtidSet),
    /// MariaDB: GTID position per domain.
    Mariadb(MariadbGtidPos),
}

impl Position {
    /// How `self` relates to `other`; [`Relation::Unknown`] across engines.
    pub fn compare(&self, other: &Position) -> Relation {
        match (self, other) {
            (Position::Postgresql(a), Position::Postgresql(b)) => a.compare(b),
            (Position::Mysql(a), Position::Mysql(b)) => a.compare(b),
            (Position::Mariadb(a), Position::Mariadb(b)) => a.compare(b),
            _ => Relation::Unknown,
        }
    }

    /// What `self` lacks of `other`, in words (`3 transactions (uuid:6-8)`,
    /// `4096 bytes of WAL`, `domain 0 at 0-1-40 < 0-1-42`); empty when it lacks nothing that
    /// can be counted.
    pub fn shortfall(&self, other: &Position) -> String {
        match (self, other) {
            (Position::Postgresql(a), Position::Postgresql(b)) => {
                format!("{} bytes of WAL", a.lsn.bytes_until(b.lsn))
            }
            (Position::Mysql(a), Position::Mysql(b)) => {
                let missing = b.subtract(a);
                format!(
                    "{} transaction{} ({})",
                    missing.count(),
                    if missing.count() == 1 { "" } else { "s" },
                    abbreviate(&missing.to_string())
                )
            }
            (Position::Mariadb(a), Position::Mariadb(b)) => b
                .iter()
                .filter_map(|g| {
                    let mine = a.get(g.domain);
                    let seq = mine.map_or(0, |m| m.seq);
                    (seq < g.seq).then(|| match mine {
                        Some(m) => format!("domain {} at {m} < {g}", g.domain),
                        None => format!("domain {} missing (< {g})", g.domain),
                    })
                })
                .collect::<Vec<_>>()
                .join(", "),
            _ => String::new(),
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Postgresql(p) => write!(f, "{p}"),
            Position::Mysql(g) => write!(f, "{}", abbreviate(&g.to_string())),
            Position::Mariadb(g) => write!(f, "{g}"),
        }
    }
}

/// Cuts long text for a status message (GTID sets can be long).
fn abbreviate(s: &str) -> String {
    const MAX: usize = 120;
    if s.len() <= MAX {
        s.to_owned()
    } else {
        let cut = (0..=MAX)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        format!("{}...", &s[..cut])
    }
}

// ------------------------------------------------------------------------------------------
// Election
// ------------------------------------------------------------------------------------------

/// A member that could be promoted, with its position (`None` when it could not be probed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The member's name (the pod name).
    pub name: String,
    /// Its replication position, when known.
    pub position: Option<Position>,
}

/// Why a candidate was not chosen, or that it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// This candidate is the one to promote.
    Chosen,
    /// Its position could not be read.
    PositionUnknown,
    /// It has transactions the old primary never had (errant transactions / a forked
    /// timeline): promoting it would publish them, so it is left out (quarantine).
    DivergedFromOldPrimary,
    /// Another candidate has transactions it lacks.
    Behind {
        /// The candidate that is ahead of it.
        of: String,
        /// What it lacks, in words.
        missing: String,
    },
    /// Exactly as far as the chosen one, which came first in preference order.
    EqualButLaterInOrder {
        /// The chosen candidate.
        chosen: String,
    },
    /// Candidates that cannot be ordered: each has something another lacks, or their positions
    /// cannot be compared. No one is promoted while this holds.
    Conflict {
        /// The candidate it conflicts with.
        with: String,
        /// How they relate ([`Relation::Diverged`] or [`Relation::Unknown`]).
        relation: Relation,
    },
}

impl Verdict {
    /// A short sentence for status and events.
    pub fn reason(&self) -> String {
        match self {
            Verdict::Chosen => "most advanced position".to_owned(),
            Verdict::PositionUnknown => "replication position unknown (not reachable?)".to_owned(),
            Verdict::DivergedFromOldPrimary => {
                "diverged from the old primary (errant transactions); quarantined".to_owned()
            }
            Verdict::Behind { of, missing } if missing.is_empty() => format!("behind {of}"),
            Verdict::Behind { of, missing } => format!("behind {of}: lacks {missing}"),
            Verdict::EqualButLaterInOrder { chosen } => {
                format!("as far as {chosen}, which comes first")
            }
            Verdict::Conflict { with, relation } => {
                format!("{relation} from {with}: cannot tell which is more advanced")
            }
        }
    }
}

/// The result of [`elect`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Election {
    /// The candidate to promote, when one is safe.
    pub chosen: Option<String>,
    /// Every candidate with its verdict, in the order given.
    pub verdicts: Vec<(String, Verdict)>,
}

/// Chooses whom to promote: the candidate that no other candidate is ahead of.
///
/// - A candidate without a position is out ([`Verdict::PositionUnknown`]).
/// - With `old_primary` (its last known position), a candidate diverged from it is out
///   ([`Verdict::DivergedFromOldPrimary`]). A candidate behind that position stays in: the old
///   position may be newer than any survivor has. Whether losing that much is acceptable is the
///   caller's decision (compare with [`Position::shortfall`]). A candidate *ahead* of that
///   position also stays in: the old primary may have written more after it was last seen, and
///   a MySQL GTID set alone cannot tell those transactions from errant ones of another server
///   (the caller can, by checking the extra transactions' server UUIDs with
///   [`GtidSet::subtract`]).
/// - Of the rest, the chosen one is [`Relation::Equal`] or [`Relation::Ahead`] of every other;
///   ties go to the earliest in `candidates` (put them in preference order). When the most
///   advanced candidates diverge from each other or cannot be compared, no one is chosen
///   ([`Verdict::Conflict`]).
///
/// The chosen candidate is never behind another candidate that is still in (property-tested).
pub fn elect(old_primary: Option<&Position>, candidates: &[Candidate]) -> Election {
    let mut verdicts: Vec<Option<Verdict>> = candidates
        .iter()
        .map(|c| match (&c.position, old_primary) {
            (None, _) => Some(Verdict::PositionUnknown),
            (Some(p), Some(old)) if p.compare(old) == Relation::Diverged => {
                Some(Verdict::DivergedFromOldPrimary)
            }
            _ => None,
        })
        .collect();
    let eligible: Vec<usize> = (0..candidates.len())
        .filter(|&i| verdicts[i].is_none())
        .collect();
    let pos = |i: usize| {
        candidates[i]
            .position
            .as_ref()
            .expect("eligible has a position")
    };
    let name = |i: usize| candidates[i].name.clone();

    // A candidate is maximal when it is equal to or ahead of every other eligible candidate.
    let maximal = |i: usize| {
        eligible
            .iter()
            .all(|&j| i == j || matches!(pos(i).compare(pos(j)), Relation::Equal | Relation::Ahead))
    };
    let chosen = eligible.iter().copied().find(|&i| maximal(i));

    for &i in &eligible {
        verdicts[i] = Some(match chosen {
            Some(c) if c == i => Verdict::Chosen,
            Some(c) => match pos(i).compare(pos(c)) {
                Relation::Equal => Verdict::EqualButLaterInOrder { chosen: name(c) },
                _ => Verdict::Behind {
                    of: name(c),
                    missing: pos(i).shortfall(pos(c)),
                },
            },
            None => {
                // Explain with the first candidate that is ahead of it, else the first it
                // conflicts with.
                let ahead = eligible
                    .iter()
                    .copied()
                    .find(|&j| pos(i).compare(pos(j)) == Relation::Behind);
                match ahead {
                    Some(j) => Verdict::Behind {
                        of: name(j),
                        missing: pos(i).shortfall(pos(j)),
                    },
                    None => {
                        let (j, relation) = eligible
                            .iter()
                            .copied()
                            .filter(|&j| j != i)
                            .map(|j| (j, pos(i).compare(pos(j))))
                            .find(|(_, r)| matches!(r, Relation::Diverged | Relation::Unknown))
                            .expect("a non-maximal candidate is behind or in conflict");
                        Verdict::Conflict {
                            with: name(j),
                            relation,
                        }
                    }
                }
            }
        });
    }
    Election {
        chosen: chosen.map(name),
        verdicts: candidates
            .iter()
            .zip(verdicts)
            .map(|(c, v)| (c.name.clone(), v.expect("every candidate has a verdict")))
            .collect(),
    }
}

#[cfg(test)]
mod tests;
