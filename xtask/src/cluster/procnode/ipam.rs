//! Pod IPs for process pods: one loopback address each from 127.10.0.0/16.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// The range process pods take their addresses from.
pub const POD_RANGE: &str = "127.10.0.0/16";

/// Lowest-free allocation in 127.10.0.1 ..= 127.10.255.254; a released
/// address is handed out again.
#[derive(Debug, Default, Clone)]
pub struct IpAllocator {
    used: BTreeSet<u16>,
    /// Every host number below this one is taken.
    lowest_maybe_free: u16,
}

impl IpAllocator {
    /// Takes `ip` (e.g. recovered from a pod's status); false when it is
    /// outside the range or already taken.
    pub fn claim(&mut self, ip: Ipv4Addr) -> bool {
        match host_part(ip) {
            Some(h) => self.used.insert(h),
            None => false,
        }
    }

    /// The lowest free address, or `None` when all 65,534 are taken.
    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        let mut want = self.lowest_maybe_free.max(1);
        while self.used.contains(&want) {
            want = want.checked_add(1)?;
        }
        if want == u16::MAX {
            return None;
        }
        self.used.insert(want);
        self.lowest_maybe_free = want + 1;
        Some(to_ip(want))
    }

    pub fn release(&mut self, ip: Ipv4Addr) {
        if let Some(h) = host_part(ip)
            && self.used.remove(&h)
        {
            self.lowest_maybe_free = self.lowest_maybe_free.min(h);
        }
    }
}

fn host_part(ip: Ipv4Addr) -> Option<u16> {
    let [a, b, c, d] = ip.octets();
    let h = u16::from_be_bytes([c, d]);
    (a == 127 && b == 10 && h != 0 && h != u16::MAX).then_some(h)
}

fn to_ip(h: u16) -> Ipv4Addr {
    let [c, d] = h.to_be_bytes();
    Ipv4Addr::new(127, 10, c, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_lowest_free_and_reuses_released() {
        let mut a = IpAllocator::default();
        let first = a.allocate().unwrap();
        let second = a.allocate().unwrap();
        assert_eq!(first, Ipv4Addr::new(127, 10, 0, 1));
        assert_eq!(second, Ipv4Addr::new(127, 10, 0, 2));
        a.release(first);
        assert_eq!(a.allocate(), Some(first));
        assert_eq!(a.allocate(), Some(Ipv4Addr::new(127, 10, 0, 3)));
    }

    #[test]
    fn claims_only_inside_the_range_and_once() {
        let mut a = IpAllocator::default();
        assert!(a.claim(Ipv4Addr::new(127, 10, 1, 0)));
        assert!(!a.claim(Ipv4Addr::new(127, 10, 1, 0)));
        assert!(!a.claim(Ipv4Addr::new(127, 11, 0, 1)));
        assert!(!a.claim(Ipv4Addr::new(10, 10, 0, 1)));
        assert!(!a.claim(Ipv4Addr::new(127, 10, 0, 0)));
        // 127.10.1.0 is host 256; allocation skips it after 255.
        for _ in 0..255 {
            a.allocate().unwrap();
        }
        assert_eq!(a.allocate(), Some(Ipv4Addr::new(127, 10, 1, 1)));
    }

    #[test]
    fn runs_out() {
        let mut a = IpAllocator::default();
        for _ in 0..65_534 {
            assert!(a.allocate().is_some());
        }
        assert_eq!(a.allocate(), None);
        a.release(Ipv4Addr::new(127, 10, 128, 7));
        assert_eq!(a.allocate(), Some(Ipv4Addr::new(127, 10, 128, 7)));
        assert_eq!(a.allocate(), None);
    }
}
