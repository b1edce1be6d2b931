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
//! timeline after the fork). The core's election (`database_operator_core::position::elect`)
//! uses it to choose whom to promote and to say, in words an SRE can read in status, why every
//! other candidate lost.
//!
//! Everything here is pure: text in, values out; nothing is read from a server.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use database_operator_api::Engine;

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

mod compare;
mod gtid;
mod lsn;
mod mariadb;

pub use compare::{Position, Relation};
pub use gtid::{GTID_MAX, GtidSet, GtidSource, GtidTag, ServerUuid};
pub use lsn::{Fork, Lsn, PgPosition, TimelineHistory, TimelineId, TimelineSwitch};
pub use mariadb::{MariadbGtid, MariadbGtidPos};

#[cfg(test)]
mod tests;
