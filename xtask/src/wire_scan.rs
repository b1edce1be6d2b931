//! The scanner of `cargo xtask e2e`'s packet capture (`tests/e2e/capture.rs`): reads the pcap
//! stream `tcpdump` writes of the database ports and searches each TCP segment's payload,
//! joined to the last bytes of the same direction of its connection (a needle split across two
//! segments is found), for:
//!
//! - SQL text, ASCII case-insensitive ([`SQL`]): over TLS, a 7-byte or longer match in the
//!   ciphertext has a chance of about 2^-50 per byte;
//! - passwords ([`Scanner::learn`]): the last [`RESCAN_BYTES`] of payload are searched again
//!   for a password learnt after they were captured.
//!
//! A server reached in plain text on purpose is exempt for a time ([`Scanner::exempt`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Read;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use aho_corasick::AhoCorasick;
use anyhow::{Context, Result, bail, ensure};

/// The database ports scanned.
pub const PORTS: [u16; 2] = [5432, 3306];
/// SQL text that must never cross the loopback in clear (searched ASCII case-insensitive).
pub const SQL: [&str; 12] = [
    "select ",
    "insert into",
    "create table",
    "create user",
    "alter user",
    "identified by",
    "change master",
    "change replication source",
    "set global",
    "alter system",
    "start transaction",
    "drop table",
];
/// Payload kept to search again when a password is learnt late.
pub const RESCAN_BYTES: usize = 32 << 20;
/// Bytes of each connection direction's previous segment joined to the next one.
const CARRY: usize = 256;
/// The shortest password searched for (shorter values would match by chance).
pub const MIN_PASSWORD: usize = 8;

/// A TCP connection direction: source, port, destination, port.
type Flow = ([u8; 4], u16, [u8; 4], u16);

/// What the scanner found and counted.
#[derive(Debug, Default)]
pub struct Findings {
    /// Segments with data.
    pub segments: u64,
    /// Their payload bytes.
    pub payload_bytes: u64,
    /// The connection directions seen.
    pub connections: HashSet<Flow>,
    /// Segments of exempt servers (not searched).
    pub exempt_segments: u64,
    /// Each hit: what matched (never the password itself), the connection, when.
    pub hits: Vec<String>,
}

/// A server address exempt from the search between two instants (Unix seconds).
#[derive(Clone, Debug)]
struct Exemption {
    ip: [u8; 4],
    from: f64,
    until: f64,
}

#[derive(Default)]
struct State {
    /// Passwords by value, each with where it came from.
    passwords: HashMap<Vec<u8>, String>,
    matcher: Option<AhoCorasick>,
    order: Vec<Vec<u8>>,
    /// Recent payload, with its connection and time, for late passwords.
    recent: VecDeque<(Flow, f64, Vec<u8>)>,
    recent_bytes: usize,
    exemptions: Vec<Exemption>,
    findings: Findings,
}

/// The scanner, shared by the thread that reads tcpdump and whoever learns passwords.
pub struct Scanner {
    sql: AhoCorasick,
    state: Mutex<State>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Scanner {
    /// A scanner that knows no password yet.
    pub fn new() -> Result<Self> {
        Ok(Self {
            sql: AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .build(SQL)
                .context("building the SQL matcher")?,
            state: Mutex::new(State::default()),
        })
    }

    /// Adds `value` (from `source`, e.g. `namespace/secret key`) to the passwords searched for,
    /// unless it is shorter than [`MIN_PASSWORD`]; searches the recent payload for it.
    pub fn learn(&self, source: &str, value: &[u8]) -> Result<()> {
        if value.len() < MIN_PASSWORD {
            return Ok(());
        }
        let mut state = lock(&self.state);
        if state.passwords.contains_key(value) {
            return Ok(());
        }
        state.passwords.insert(value.to_vec(), source.to_owned());
        state.order = state.passwords.keys().cloned().collect();
        state.matcher =
            Some(AhoCorasick::new(&state.order).context("building the password matcher")?);
        let one = AhoCorasick::new([value]).context("building a matcher of the new password")?;
        let late: Vec<String> = state
            .recent
            .iter()
            .filter(|(_, _, bytes)| one.is_match(bytes))
            .map(|((src, sport, dst, dport), at, _)| {
                format!(
                    "the password of {source} in {}:{sport} -> {}:{dport} at {at:.3} (found when learnt)",
                    Ipv4Addr::from(*src),
                    Ipv4Addr::from(*dst)
                )
            })
            .collect();
        state.findings.hits.extend(late);
        Ok(())
    }

    /// How many passwords are searched for.
    pub fn passwords(&self) -> usize {
        lock(&self.state).passwords.len()
    }

    /// Exempts the server `ip` from `from` on (Unix seconds); returns the exemption's index
    /// for [`Scanner::end_exemption`].
    pub fn exempt(&self, ip: Ipv4Addr, from: f64) -> usize {
        let mut state = lock(&self.state);
        state.exemptions.push(Exemption {
            ip: ip.octets(),
            from,
            until: f64::INFINITY,
        });
        state.exemptions.len() - 1
    }

    /// Ends exemption `index` at `until` (Unix seconds).
    pub fn end_exemption(&self, index: usize, until: f64) {
        if let Some(e) = lock(&self.state).exemptions.get_mut(index) {
            e.until = until;
        }
    }

    /// What was found, taken (the scanner starts counting again).
    pub fn take_findings(&self) -> Findings {
        std::mem::take(&mut lock(&self.state).findings)
    }

    /// Reads pcap (classic format, Ethernet frames: the loopback interface) to its end,
    /// scanning every TCP segment with data.
    pub fn read_pcap(&self, mut input: impl Read) -> Result<()> {
        let mut header = [0u8; 24];
        input
            .read_exact(&mut header)
            .context("the pcap header from tcpdump")?;
        let magic = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let (little, nanos) = match magic {
            0xa1b2_c3d4 => (true, false),
            0xa1b2_3c4d => (true, true),
            0xd4c3_b2a1 => (false, false),
            0x4d3c_b2a1 => (false, true),
            other => bail!("not a pcap stream (magic {other:#x})"),
        };
        let word = |b: &[u8]| {
            let b = [b[0], b[1], b[2], b[3]];
            if little {
                u32::from_le_bytes(b)
            } else {
                u32::from_be_bytes(b)
            }
        };
        let link = word(&header[20..24]);
        ensure!(
            link == 1,
            "link type {link}: the loopback interface gives Ethernet (1)"
        );
        let mut carry: HashMap<Flow, Vec<u8>> = HashMap::new();
        let mut record = [0u8; 16];
        let mut frame = Vec::new();
        loop {
            match input.read_exact(&mut record) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e).context("a pcap record header"),
            }
            let seconds = f64::from(word(&record[0..4]));
            let fraction = f64::from(word(&record[4..8])) / if nanos { 1e9 } else { 1e6 };
            let length = word(&record[8..12]) as usize;
            frame.resize(length, 0);
            input.read_exact(&mut frame).context("a pcap record")?;
            if let Some((flow, payload)) = tcp_payload(&frame) {
                self.scan(flow, payload, seconds + fraction, &mut carry);
            }
        }
    }

    fn scan(&self, flow: Flow, payload: &[u8], at: f64, carry: &mut HashMap<Flow, Vec<u8>>) {
        let (src, sport, dst, dport) = flow;
        let server = if PORTS.contains(&dport) { dst } else { src };
        let connection = || {
            format!(
                "{}:{sport} -> {}:{dport}",
                Ipv4Addr::from(src),
                Ipv4Addr::from(dst)
            )
        };
        let previous = carry.entry(flow).or_default();
        let mut joined = std::mem::take(previous);
        // A match that ends in the carried bytes was reported with the segment before.
        let carried = joined.len();
        joined.extend_from_slice(payload);
        let keep = joined.len().saturating_sub(CARRY);
        *previous = joined[keep..].to_vec();

        let mut state = lock(&self.state);
        state.findings.segments += 1;
        state.findings.payload_bytes += payload.len() as u64;
        state.findings.connections.insert(flow);
        let exempt = state
            .exemptions
            .iter()
            .any(|e| e.ip == server && e.from <= at && at <= e.until);
        if exempt {
            state.findings.exempt_segments += 1;
            return;
        }
        let mut found: Vec<String> = self
            .sql
            .find_iter(&joined)
            .filter(|m| m.end() > carried)
            .map(|m| format!("SQL text {:?}", SQL[m.pattern().as_usize()]))
            .collect();
        if let Some(matcher) = &state.matcher {
            found.extend(
                matcher
                    .find_iter(&joined)
                    .filter(|m| m.end() > carried)
                    .map(|m| {
                        let value = &state.order[m.pattern().as_usize()];
                        format!("the password of {}", state.passwords[value])
                    }),
            );
        }
        for what in found {
            state
                .findings
                .hits
                .push(format!("{what} in {} at {at:.3}", connection()));
        }
        state.recent_bytes += joined.len();
        state.recent.push_back((flow, at, joined));
        while state.recent_bytes > RESCAN_BYTES {
            match state.recent.pop_front() {
                Some((_, _, bytes)) => state.recent_bytes -= bytes.len(),
                None => break,
            }
        }
    }
}

/// The IPv4 TCP segment of an Ethernet frame, if it is one and carries data.
fn tcp_payload(frame: &[u8]) -> Option<(Flow, &[u8])> {
    let ip = frame.get(14..)?;
    if frame.get(12..14)? != [0x08, 0x00] || ip.first()? >> 4 != 4 || *ip.get(9)? != 6 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let tcp = ip.get(ihl..total.min(ip.len()))?;
    let offset = usize::from(tcp.get(12)? >> 4) * 4;
    let payload = tcp.get(offset..)?;
    if payload.is_empty() || tcp.len() < 4 {
        return None;
    }
    let src = [ip[12], ip[13], ip[14], ip[15]];
    let dst = [ip[16], ip[17], ip[18], ip[19]];
    let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
    let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
    Some(((src, sport, dst, dport), payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame of one IPv4 TCP segment from 127.0.0.1:`sport` to
    /// 127.10.0.5:`dport` (or back when `back`) carrying `payload`.
    fn frame(sport: u16, dport: u16, back: bool, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend([0x08, 0x00]);
        let total = u16::try_from(40 + payload.len()).unwrap();
        let (a, b) = ([127, 0, 0, 1], [127, 10, 0, 5]);
        let (src, dst) = if back { (b, a) } else { (a, b) };
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 6, 0, 0];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip.extend(src);
        ip.extend(dst);
        f.extend(ip);
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[12] = 5 << 4;
        f.extend(tcp);
        f.extend(payload);
        f
    }

    /// A pcap stream of `frames`, the i-th at second 1000 + i.
    fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend(0xa1b2_c3d4u32.to_le_bytes());
        out.extend([2, 0, 4, 0]);
        out.extend([0u8; 8]);
        out.extend(262_144u32.to_le_bytes());
        out.extend(1u32.to_le_bytes());
        for (i, f) in frames.iter().enumerate() {
            let len = u32::try_from(f.len()).unwrap();
            out.extend((1_000 + u32::try_from(i).unwrap()).to_le_bytes());
            out.extend(0u32.to_le_bytes());
            out.extend(len.to_le_bytes());
            out.extend(len.to_le_bytes());
            out.extend(f);
        }
        out
    }

    #[test]
    fn sql_and_passwords_in_clear_are_found_even_across_segments() {
        let scanner = Scanner::new().unwrap();
        scanner
            .learn("ns/secret password", b"hunter2-secret")
            .unwrap();
        scanner.learn("ns/short password", b"short").unwrap();
        assert_eq!(scanner.passwords(), 1, "a short value is never a needle");
        let stream = pcap(&[
            frame(40000, 5432, false, b"Q\0\0\0\x20INSERT IN"),
            frame(40000, 5432, false, b"TO t VALUES (1)\0"),
            frame(3306, 40001, true, b"..hunter2-secret.."),
            // A TLS record: nothing to find.
            frame(
                40002,
                3306,
                false,
                &[0x17, 0x03, 0x03, 0x00, 0x10, 0xde, 0xad],
            ),
            frame(40003, 3306, false, b"short and harmless"),
        ]);
        scanner.read_pcap(&stream[..]).unwrap();
        let found = scanner.take_findings();
        assert_eq!(found.segments, 5);
        assert_eq!(found.connections.len(), 4);
        assert_eq!(found.hits.len(), 2, "{:?}", found.hits);
        assert!(
            found.hits[0]
                .starts_with("SQL text \"insert into\" in 127.0.0.1:40000 -> 127.10.0.5:5432"),
            "{:?}",
            found.hits
        );
        assert!(
            found.hits[1].starts_with("the password of ns/secret password in 127.10.0.5:3306"),
            "{:?}",
            found.hits
        );
        assert!(
            !found.hits.iter().any(|h| h.contains("hunter2")),
            "never the password itself"
        );
    }

    #[test]
    fn a_password_learnt_late_is_found_in_what_was_captured_before() {
        let scanner = Scanner::new().unwrap();
        let stream = pcap(&[frame(40000, 3306, false, b"xx late-password-1 yy")]);
        scanner.read_pcap(&stream[..]).unwrap();
        scanner.learn("n/s password", b"late-password-1").unwrap();
        let hits = scanner.take_findings().hits;
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert!(
            hits[0].contains("n/s password") && hits[0].ends_with("(found when learnt)"),
            "{hits:?}"
        );
    }

    #[test]
    fn an_exempt_server_is_not_searched_only_while_exempt() {
        let scanner = Scanner::new().unwrap();
        let index = scanner.exempt(Ipv4Addr::new(127, 10, 0, 5), 999.0);
        scanner.end_exemption(index, 1_000.5);
        let stream = pcap(&[
            frame(40000, 5432, false, b"select 1"),
            frame(40000, 5432, false, b"select 2"),
        ]);
        scanner.read_pcap(&stream[..]).unwrap();
        let found = scanner.take_findings();
        assert_eq!(found.exempt_segments, 1);
        assert_eq!(found.hits.len(), 1, "{:?}", found.hits);
        assert!(found.hits[0].ends_with("at 1001.000"), "{:?}", found.hits);
    }

    #[test]
    fn not_pcap_is_an_error() {
        let scanner = Scanner::new().unwrap();
        let err = scanner.read_pcap(&[0u8; 24][..]).unwrap_err();
        assert!(format!("{err:#}").contains("not a pcap stream"), "{err:#}");
    }
}
