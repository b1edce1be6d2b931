//! Replication positions and the election: whom to promote among the reachable members.
//!
//! The positions themselves (PostgreSQL LSNs and timelines, MySQL GTID sets, MariaDB GTID
//! positions), how they parse and how two of them compare, are the engine crate's
//! ([`database_operator_engine::position`]), re-exported here so that the core and its users
//! name them in one place. The election is a decision, and stays in the core: [`elect`] uses
//! [`Position::compare`] to choose whom to promote and to say, in words an SRE can read in
//! status, why every other candidate lost.
//!
//! Everything here is pure: text in, values out; nothing is read from a server.

pub use database_operator_engine::position::{
    Fork, GTID_MAX, GtidSet, GtidSource, GtidTag, Lsn, MariadbGtid, MariadbGtidPos, ParseError,
    PgPosition, Position, Relation, ServerUuid, TimelineHistory, TimelineId, TimelineSwitch,
};

mod election;

pub use election::{Candidate, Election, Verdict, elect};

#[cfg(test)]
mod tests;
