//! How the runtime carries out a [`DatabaseCommand::Follow`](crate::DatabaseCommand::Follow):
//! by repointing the running server, or by restarting its pod as a replica.

use database_operator_api::Engine;

/// How a member is made to follow a primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowBy {
    /// Delete the member's pod (its volume stays): it restarts without the primary label, so
    /// its init script starts it as a replica (PostgreSQL: after `pg_rewind`, when it wrote past
    /// the fork).
    Restart,
    /// Point the running server at the source. `restart_if_refused`: a server that refuses
    /// because it cannot follow while running (a PostgreSQL primary) is restarted instead,
    /// as with [`FollowBy::Restart`].
    Repoint {
        /// Restart the member when its server says it cannot follow (not supported).
        restart_if_refused: bool,
    },
}

/// How a member of an `engine` cluster follows its new source; `rewind`: it wrote past the
/// point where the source's history left it ([`crate::DatabaseCommand::Follow`]).
pub fn follow_by(engine: Engine, rewind: bool) -> FollowBy {
    let engine = database_operator_engine::of(engine);
    if rewind && engine.rewinds_diverged_members() {
        FollowBy::Restart
    } else {
        FollowBy::Repoint {
            restart_if_refused: engine.follows_by_restart(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diverged_postgresql_member_restarts_to_be_rewound() {
        assert_eq!(follow_by(Engine::Postgresql, true), FollowBy::Restart);
        assert_eq!(
            follow_by(Engine::Postgresql, false),
            FollowBy::Repoint {
                restart_if_refused: true
            }
        );
    }

    #[test]
    fn mysql_family_members_are_always_repointed() {
        for engine in [Engine::Mysql, Engine::Mariadb] {
            for rewind in [false, true] {
                assert_eq!(
                    follow_by(engine, rewind),
                    FollowBy::Repoint {
                        restart_if_refused: false
                    }
                );
            }
        }
    }
}
