//! What the operator has seen of a cluster's primary lease (`spec.failover.nodeLoss:
//! SelfFence`): the evidence that a lost primary has made itself read-only.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

/// The Lease `<name>-primary` as the runtime last read it, with the times on the operator's
/// own clock that the safety rule needs.
///
/// The member agent in the primary's pod renews the Lease every quarter of its duration and
/// makes its server read-only once it has not renewed for half of it (and again every round
/// after that). So once the operator has seen no new renewal for the whole duration plus
/// [`LeaseSighting::MARGIN`], measured on its own clock from the moment it first saw the last
/// renewal (never from the time written in the Lease, which is the agent's clock), the old
/// primary has refused writes for at least a quarter of the duration, or its agent and with it
/// the pod's API access are gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSighting {
    /// `spec.holderIdentity`: the pod whose agent renews it.
    pub holder: Option<String>,
    /// `spec.renewTime` as written by the holder's agent (its clock); `None`: never renewed.
    /// Compared for change only, never with the operator's clock.
    pub renew_time: Option<Timestamp>,
    /// When the runtime first read the current `renewTime` (operator clock).
    pub renewal_seen_at: Timestamp,
    /// Whether this process saw `renewTime` change to its current value (an earlier read had
    /// another one): only then is [`LeaseSighting::renewal_seen_at`] close to the renewal
    /// itself, rather than to this process's first look at a Lease renewed who knows when.
    pub observed_renewal: bool,
    /// When the runtime last read the Lease successfully (operator clock): a conclusion about
    /// expiry needs a read after the expiry, not a stale copy.
    pub checked_at: Timestamp,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
}

impl LeaseSighting {
    /// Added to the duration before a lease counts as expired: the agent's fence itself takes
    /// time, and two clocks may run at slightly different rates.
    pub const MARGIN: Duration = Duration::from_secs(2);

    /// How long before the primary's server first failed its probe the last renewal may have
    /// been seen, beyond one duration, for the lease to speak for that failure: beyond it the
    /// agent had stopped renewing earlier (not running, or no API access) and is not known to
    /// have fenced anything.
    pub const RECENT: Duration = Duration::from_secs(5);

    /// Whether the lease proves that `holder`'s server no longer accepts writes: `holder`
    /// holds it, this process saw its agent renew it ([`LeaseSighting::observed_renewal`])
    /// until shortly before `down_since` (when the server first failed its probe; `None`: it
    /// has not), and the runtime has read the Lease at least [`LeaseSighting::duration`] +
    /// [`LeaseSighting::MARGIN`] after it first saw that renewal, still unchanged.
    pub fn fenced(&self, holder: &str, down_since: Option<Timestamp>) -> bool {
        if self.holder.as_deref() != Some(holder)
            || self.renew_time.is_none()
            || !self.observed_renewal
        {
            return false;
        }
        let Some(down_since) = down_since else {
            return false;
        };
        let recent = self
            .renewal_seen_at
            .checked_add(self.duration + Self::RECENT)
            .is_ok_and(|t| t >= down_since);
        recent && self.expired()
    }

    /// Whether the last renewal is older than the duration plus the margin, by the runtime's
    /// last read.
    pub fn expired(&self) -> bool {
        self.unrenewed_for() >= self.duration + Self::MARGIN
    }

    /// How long, by the runtime's last read, the lease has gone without a renewal it saw.
    pub fn unrenewed_for(&self) -> Duration {
        let secs = self
            .checked_at
            .duration_since(self.renewal_seen_at)
            .as_secs_f64()
            .max(0.0);
        Duration::from_secs_f64(secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn sighting(seen: i64, checked: i64) -> LeaseSighting {
        LeaseSighting {
            holder: Some("db-0".into()),
            renew_time: Some(at(seen)),
            renewal_seen_at: at(seen),
            observed_renewal: true,
            checked_at: at(checked),
            duration: Duration::from_secs(10),
        }
    }

    #[test]
    fn a_lease_is_fenced_only_after_its_duration_and_margin() {
        let down = Some(at(1));
        assert!(!sighting(0, 11).fenced("db-0", down));
        assert!(sighting(0, 12).fenced("db-0", down));
        assert!(!sighting(0, 12).fenced("db-1", down), "another holder");
        assert!(!sighting(0, 12).fenced("db-0", None), "the server answers");
    }

    #[test]
    fn a_lease_that_stopped_long_before_the_server_failed_proves_nothing() {
        // Last renewal seen at 0, server first failed at 16 (> 10 + 5): the agent was not
        // renewing when the server went away.
        assert!(!sighting(0, 40).fenced("db-0", Some(at(16))));
        assert!(sighting(0, 40).fenced("db-0", Some(at(15))));
    }

    #[test]
    fn a_never_renewed_lease_proves_nothing() {
        let mut s = sighting(0, 100);
        s.renew_time = None;
        assert!(!s.fenced("db-0", Some(at(1))));
    }

    #[test]
    fn a_renewal_this_process_did_not_see_happen_proves_nothing() {
        // First read after an operator restart: the renewal may be hours old.
        let mut s = sighting(0, 100);
        s.observed_renewal = false;
        assert!(s.expired());
        assert!(!s.fenced("db-0", Some(at(1))));
    }

    #[test]
    fn expiry_is_measured_from_the_sighting_not_the_written_time() {
        // The agent's clock says 0, the operator first saw it at 30: counts from 30.
        let mut s = sighting(30, 41);
        s.renew_time = Some(at(0));
        assert!(!s.expired());
        s.checked_at = at(42);
        assert!(s.expired());
        assert_eq!(s.unrenewed_for(), Duration::from_secs(12));
    }
}
