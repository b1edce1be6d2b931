//! PostgreSQL: write-ahead-log positions ([`Lsn`]), timelines and their history.

use super::*;

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
    /// use database_operator_engine::position::{Lsn, TimelineHistory, TimelineId};
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
    pub(super) fn known_history(&self) -> Option<&[TimelineSwitch]> {
        match &self.history {
            Some(h) => Some(&h.switches),
            None if self.timeline.0 <= 1 => Some(&[]),
            None => None,
        }
    }

    /// The timeline the WAL byte at `at` belongs to on this server's line of history.
    pub(super) fn timeline_at(
        history: &[TimelineSwitch],
        current: TimelineId,
        at: Lsn,
    ) -> TimelineId {
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
