//! [`DatabaseCommand`]: what the runtime is asked to do on a member's server.

use super::PasswordAccount;

/// A command to a member's database: an intent the runtime carries out through its database
/// driver, never SQL. Every command is idempotent (fencing a fenced member succeeds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseCommand {
    /// Make the member refuse writes (read-only). Best effort on PostgreSQL.
    Fence {
        /// Pod name.
        pod: String,
    },
    /// Undo a fence: a switchover that was aborted gives the primary its writes back.
    Unfence {
        /// Pod name.
        pod: String,
    },
    /// Delete the member's pod (the StatefulSet recreates it; it starts read-only, as a
    /// replica, because it no longer carries the primary label). Fences a server that does
    /// not answer. Its volume is kept.
    StopPod {
        /// Pod name.
        pod: String,
    },
    /// A switchover's hard fence, on an engine whose read-only fence a client can override
    /// (PostgreSQL): end the member's client sessions again (the [`DatabaseCommand::Fence`]
    /// statements, best effort), then delete its pod with
    /// [`crate::failover::SWITCHOVER_STOP_GRACE`], so that its server shuts down cleanly (a
    /// clean PostgreSQL shutdown sends every change to the standbys streaming from it before
    /// it ends) and nothing can be written on it before the promotion. The StatefulSet
    /// recreates the pod; it starts as a replica (it carries no primary label). Its volume is
    /// kept.
    StopServer {
        /// Pod name.
        pod: String,
    },
    /// Promote the member to primary (accept writes).
    Promote {
        /// Pod name.
        pod: String,
    },
    /// Point the member at `source` as a replica. `rewind`: PostgreSQL only, the member wrote
    /// past the point where `source`'s history left it: `pg_rewind` it first.
    Follow {
        /// Pod name.
        pod: String,
        /// The primary to follow (pod name).
        source: String,
        /// Rewind before following (PostgreSQL).
        rewind: bool,
    },
    /// The member diverged and cannot rejoin: stop its replication and keep it out of service
    /// (its data stays; reseeding it is for the spec to ask).
    Quarantine {
        /// Pod name.
        pod: String,
    },
    /// PostgreSQL: make the primary's member replication slots exactly `slots`
    /// (`member_<ordinal>` of every other member the cluster keeps): create the missing ones,
    /// drop unused ones that are not wanted or that lost their WAL (bounded by
    /// `max_slot_wal_keep_size`). Planned only when the primary's probe lists its slots and they
    /// differ. Idempotent.
    KeepMemberSlots {
        /// The primary's pod name.
        pod: String,
        /// The slots it should keep, sorted.
        slots: Vec<String>,
    },
    /// Have the member's server read its certificate files again, without a restart
    /// (PostgreSQL `pg_reload_conf()`, MySQL `ALTER INSTANCE RELOAD TLS`, MariaDB `FLUSH SSL`):
    /// planned while it serves another certificate than the cluster's current one
    /// ([`crate::tls::reloads`]). Idempotent.
    ReloadTls {
        /// Pod name.
        pod: String,
    },
    /// Point the replica `pod` at `source` again, now over TLS that checks the source's
    /// certificate against the cluster's authority for the source's DNS name (PostgreSQL
    /// `primary_conninfo` with `sslmode=verify-full` and a reload, MySQL/MariaDB the channel
    /// with the CA and `..._SSL_VERIFY_SERVER_CERT = 1`): planned while a replica that streams
    /// from a source serving TLS does not check it ([`crate::tls::secure_replication`]).
    /// Idempotent.
    SecureReplication {
        /// The replica's pod name.
        pod: String,
        /// The pod it replicates from.
        source: String,
    },
    /// MySQL/MariaDB: switch the semi-synchronous source side of the member on or off
    /// (`spec.replication.mode: sync`, see [`crate::replication`]). Idempotent.
    SetSemiSync {
        /// Pod name.
        pod: String,
        /// On (the primary, once a replica replicates from it) or off (every other member,
        /// and every member in `async` mode).
        enabled: bool,
    },
    /// Set the superuser password of every account in `accounts` on the primary `pod` to the
    /// current value of the cluster's password Secret (`spec.passwordSecretRef`); replication
    /// carries it to the replicas. Planned only while `pod` answers as a writable primary and no
    /// failover or switchover is in progress.
    ///
    /// Contract for the runtime:
    /// - **Verify first**: read the Secret and compute its fingerprint; carry the command out only
    ///   when it equals `fingerprint`. Otherwise skip it (log at info, record no outcome): the
    ///   Secret moved on and the next pass plans the newer value. The password is read at that
    ///   moment and dropped after the statements; never logged, evented or put in status.
    /// - **Statements**: PostgreSQL `ALTER ROLE postgres PASSWORD <SCRAM verifier>`; MySQL
    ///   `ALTER USER 'root'@'<host>' IDENTIFIED BY ... RETAIN CURRENT PASSWORD` when
    ///   `retain_old` (the old password keeps working until [`DatabaseCommand::DiscardOldPassword`]);
    ///   MariaDB `ALTER USER` (no dual passwords), keeping `unix_socket` where
    ///   [`PasswordAccount::keep_unix_socket`] says so. Every account, in order.
    /// - **Report**: a [`PasswordOutcome`] (`Set`, this `fingerprint`, when, error or not) in
    ///   the next [`Observed::password_outcome`]. Success means every account was altered.
    /// - Idempotent: setting the same password again is harmless (on MySQL it makes the new
    ///   password the retained one too, which only ends the old one's grace early).
    SetPassword {
        /// The primary's pod name.
        pod: String,
        /// The accounts to change, in order.
        accounts: Vec<PasswordAccount>,
        /// Fingerprint of the Secret value to apply (never the value).
        fingerprint: String,
        /// MySQL: keep the current password working (`RETAIN CURRENT PASSWORD`).
        retain_old: bool,
    },
    /// MySQL: discard the password retained by [`DatabaseCommand::SetPassword`] (`ALTER USER ...
    /// DISCARD OLD PASSWORD` for every account), once `spec.passwordRotation.graceSeconds`
    /// have passed. No Secret is read. Reported as a [`PasswordOutcome`] (`DiscardOld`, this
    /// `fingerprint`). Idempotent.
    DiscardOldPassword {
        /// The primary's pod name.
        pod: String,
        /// The accounts, in order.
        accounts: Vec<PasswordAccount>,
        /// Fingerprint of the password now in effect (whose predecessor is discarded).
        fingerprint: String,
    },
}

impl DatabaseCommand {
    /// The command's name in logs, events and metrics: `fence`, `unfence`, `stop_pod`,
    /// `stop_server`, `promote`, `follow`, `quarantine`, `set_password`, `discard_old_password`,
    /// `set_semi_sync`, `keep_member_slots`, `reload_tls`, `secure_replication`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Fence { .. } => "fence",
            Self::Unfence { .. } => "unfence",
            Self::StopPod { .. } => "stop_pod",
            Self::StopServer { .. } => "stop_server",
            Self::Promote { .. } => "promote",
            Self::Follow { .. } => "follow",
            Self::Quarantine { .. } => "quarantine",
            Self::SetPassword { .. } => "set_password",
            Self::DiscardOldPassword { .. } => "discard_old_password",
            Self::SetSemiSync { .. } => "set_semi_sync",
            Self::KeepMemberSlots { .. } => "keep_member_slots",
            Self::ReloadTls { .. } => "reload_tls",
            Self::SecureReplication { .. } => "secure_replication",
        }
    }

    /// Whether the command changes a password: the runtime reports its outcome to the core
    /// ([`PasswordOutcome`]) instead of failing the commands after it.
    pub fn is_password(&self) -> bool {
        matches!(
            self,
            Self::SetPassword { .. } | Self::DiscardOldPassword { .. }
        )
    }
}
