//! How two positions compare: [`Relation`], and [`Position`], a position of any engine.

use super::*;

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
    pub(super) const fn from_extras(a_has_more: bool, b_has_more: bool) -> Relation {
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
    /// The position of an `engine` server as its probe reads it: `text` is the received LSN
    /// (PostgreSQL, on `timeline`, 1 when not known, with the timeline's `history` file when
    /// known), the executed GTID set (MySQL) or the GTID position (MariaDB).
    pub fn parse(
        engine: Engine,
        text: &str,
        timeline: Option<u32>,
        history: Option<&str>,
    ) -> Result<Position, ParseError> {
        Ok(match engine {
            Engine::Postgresql => Position::Postgresql(PgPosition {
                history: history.map(TimelineHistory::parse).transpose()?,
                ..PgPosition::new(timeline.unwrap_or(1), text.parse::<Lsn>()?)
            }),
            Engine::Mysql => Position::Mysql(text.parse::<GtidSet>()?),
            Engine::Mariadb => Position::Mariadb(text.parse::<MariadbGtidPos>()?),
        })
    }

    /// How `self` relates to `other`; [`Relation::Unknown`] across engines.
    pub fn compare(&self, other: &Position) -> Relation {
        match (self, other) {
            (Position::Postgresql(a), Position::Postgresql(b)) => a.compare(b),
            (Position::Mysql(a), Position::Mysql(b)) => a.compare(b),
            (Position::Mariadb(a), Position::Mariadb(b)) => a.compare(b),
            _ => Relation::Unknown,
        }
    }

    /// Whether a replica at `self` needs changes from before `retained`, the oldest position its
    /// source still has them from (PostgreSQL: the start of the source's oldest WAL segment,
    /// on any timeline): it can no longer catch up by streaming. `false` when it cannot be
    /// told (other engines: their replicas report it themselves).
    pub fn needs_before(&self, retained: &Position) -> bool {
        match (self, retained) {
            (Position::Postgresql(mine), Position::Postgresql(oldest)) => mine.lsn < oldest.lsn,
            _ => false,
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
