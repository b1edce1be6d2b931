//! Network partitions of process nodes (`cargo xtask cluster node partition <node>`).
//!
//! Every pod IP is a loopback address and every process shares the machine's network stack, so
//! an address alone cannot tell whose packet it is: a pod dials from 127.0.0.1 like every other
//! process. What tells them apart is the cgroup: the agent starts each container of a node in
//! the cgroup v2 directory of that node ([`NodeCgroups`]), and a partition is an nftables table
//! on the output hook (all loopback traffic passes it) that
//!
//! 1. lets the node's own processes reach the node's own pod IPs (a member agent and its
//!    server), marking those connections so that their replies pass too;
//! 2. drops every other packet to the node's pod IPs (the operator, the other members, the
//!    e2e writer, existing connections included);
//! 3. drops every other packet from the node's processes (to the API server, to the other
//!    members, the replies on connections opened before the cut).
//!
//! The node's kubelet side is cut with it: the agent stops renewing the node's Lease and
//! posting its status, and stops syncing its pods (their processes keep running, unsupervised,
//! as behind a real partition; a deletion is seen only when the partition heals). Nothing
//! leaves the machine: the rules only drop.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};

/// Where nftables looks up the paths of `socket cgroupv2` (relative to this directory).
const NFT_CGROUP_BASE: &str = "/sys/fs/cgroup";

/// The connection mark of traffic inside a partitioned node.
const INSIDE_MARK: &str = "0x64626f70";

/// `<state>/partitioned-nodes/<node>`: the node is cut off from the network
/// ([`set_node_partitioned`]).
pub fn partitioned_marker(state_dir: &Path, node: &str) -> PathBuf {
    state_dir.join("partitioned-nodes").join(node)
}

/// The agent's answer: the nodes whose partition is in effect, one per line, or `error: ...`.
fn applied_file(state_dir: &Path) -> PathBuf {
    state_dir.join("partitioned-nodes.applied")
}

/// The nodes asked to be partitioned now.
pub fn partitioned_nodes(state_dir: &Path) -> std::collections::BTreeSet<String> {
    super::marked_nodes(&state_dir.join("partitioned-nodes"))
}

/// Cuts `node` off (`on`) or heals it, and waits until the agent says the rules are in effect
/// (or gone). Refuses a name that is no process node of the cluster.
pub fn set_node_partitioned(
    state_dir: &Path,
    nodes: &[String],
    node: &str,
    on: bool,
) -> Result<()> {
    ensure!(
        nodes.iter().any(|n| n == node),
        "{node} is not a process node of this cluster (they are {})",
        nodes.join(", ")
    );
    let marker = partitioned_marker(state_dir, node);
    if on {
        NodeCgroups::discover(state_dir)
            .context("a partition needs a writable cgroup v2 hierarchy")?;
        if let Some(dir) = marker.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        fs::write(&marker, super::now_rfc3339())
            .with_context(|| format!("writing {}", marker.display()))?;
    } else {
        match fs::remove_file(&marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("removing {}", marker.display()));
            }
            _ => {}
        }
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = fs::read_to_string(applied_file(state_dir)).unwrap_or_default();
        if let Some(error) = text.strip_prefix("error: ") {
            bail!(
                "the process-node agent could not apply the partition: {}",
                error.trim()
            );
        }
        if text.lines().any(|l| l == node) == on {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the process-node agent did not {} {node} within 15 s (it applies partitions on its \
             next pass; is it running?)",
            if on { "partition" } else { "heal" }
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The cgroup v2 directories the agent starts each node's containers in:
/// `<mount>/dbop-<hash of the state directory>/<node>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCgroups {
    /// The cluster's directory in the mounted hierarchy.
    dir: PathBuf,
    /// The same directory as nftables names it (relative to `/sys/fs/cgroup`).
    nft_dir: String,
    /// The level of a node's directory in the hierarchy (`socket cgroupv2 level`).
    node_level: usize,
}

impl NodeCgroups {
    /// The cluster's cgroup directories, created if missing; `None` when this machine has no
    /// writable cgroup v2 hierarchy under `/sys/fs/cgroup` (containers then start without one
    /// and a partition is refused).
    pub fn discover(state_dir: &Path) -> Option<Self> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
        let (mount, root) = cgroup2_mount(&mountinfo)?;
        let relative = mount.strip_prefix(NFT_CGROUP_BASE).ok()?;
        let state_dir = fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
        let name = format!("dbop-{:08x}", fnv(state_dir.to_string_lossy().as_bytes()));
        let dir = mount.join(&name);
        fs::create_dir_all(&dir).ok()?;
        let nft_dir = relative.join(&name).to_string_lossy().into_owned();
        let root_depth = Path::new(&root).components().count().saturating_sub(1);
        Some(Self {
            dir,
            nft_dir,
            node_level: root_depth + 2,
        })
    }

    /// `cgroup.procs` of `node`'s directory, created if missing: a process that writes its pid
    /// there (`echo $$ >`) and its children are the node's.
    pub fn procs_file(&self, node: &str) -> Result<PathBuf> {
        let dir = self.dir.join(node);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir.join("cgroup.procs"))
    }

    /// Removes the node directories that no process is left in, then the cluster's.
    pub fn remove_empty(&self) {
        if let Ok(entries) = fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                if e.path().is_dir() {
                    let _ = fs::remove_dir(e.path());
                }
            }
        }
        let _ = fs::remove_dir(&self.dir);
    }

    /// The nftables table of this cluster's partitions.
    fn table(&self) -> String {
        self.nft_dir
            .rsplit('/')
            .next()
            .unwrap_or("dbop")
            .replace('-', "_")
    }

    /// The whole table for the partitioned nodes and their pods' addresses (empty: no table).
    pub fn ruleset(&self, cut: &BTreeMap<String, Vec<Ipv4Addr>>) -> String {
        let table = self.table();
        let mut out = format!("table inet {table}\ndelete table inet {table}\n");
        if cut.is_empty() {
            return out;
        }
        out += &format!(
            "table inet {table} {{\n  chain out {{\n    type filter hook output priority 0; policy accept;\n    ct mark {INSIDE_MARK} accept\n"
        );
        for (node, ips) in cut {
            let cgroup = format!(
                "socket cgroupv2 level {} \"{}/{node}\"",
                self.node_level, self.nft_dir
            );
            if !ips.is_empty() {
                let set = ips
                    .iter()
                    .map(Ipv4Addr::to_string)
                    .collect::<Vec<_>>()
                    .join(", ");
                out += &format!(
                    "    {cgroup} ip daddr {{ {set} }} ct mark set {INSIDE_MARK} accept\n    ip daddr {{ {set} }} drop\n"
                );
            }
            out += &format!("    {cgroup} drop\n");
        }
        out += "  }\n}\n";
        out
    }

    /// Replaces the table with [`Self::ruleset`] and records the partitioned nodes for
    /// [`set_node_partitioned`] (or the error).
    pub fn apply(&self, state_dir: &Path, cut: &BTreeMap<String, Vec<Ipv4Addr>>) -> Result<()> {
        let result = nft(&self.ruleset(cut));
        let text = match &result {
            Ok(()) => cut.keys().map(|n| format!("{n}\n")).collect::<String>(),
            Err(e) => format!("error: {e:#}\n"),
        };
        fs::write(applied_file(state_dir), text)?;
        result
    }
}

/// Runs `nft -f -` with `rules`.
fn nft(rules: &str) -> Result<()> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running nft (Debian package nftables)")?;
    child
        .stdin
        .take()
        .context("nft stdin")?
        .write_all(rules.as_bytes())?;
    let out = child.wait_with_output()?;
    ensure!(
        out.status.success(),
        "nft -f: {}\n{rules}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// The mount point and root of the first cgroup2 file system in `/proc/self/mountinfo`.
fn cgroup2_mount(mountinfo: &str) -> Option<(PathBuf, String)> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        if fstype != "cgroup2" {
            return None;
        }
        let fields: Vec<&str> = left.split_whitespace().collect();
        Some((PathBuf::from(fields.get(4)?), (*fields.get(3)?).to_owned()))
    })
}

/// FNV-1a, 32 bits: a short stable name for a state directory.
fn fnv(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
35 24 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs tmpfs ro,mode=755
36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
37 35 0:32 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
";

    #[test]
    fn the_cgroup2_mount_is_found_among_v1_hierarchies() {
        assert_eq!(
            cgroup2_mount(MOUNTINFO),
            Some((PathBuf::from("/sys/fs/cgroup/unified"), "/".to_owned()))
        );
        assert_eq!(
            cgroup2_mount("35 24 0:30 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n"),
            None
        );
    }

    fn cgroups() -> NodeCgroups {
        NodeCgroups {
            dir: PathBuf::from("/sys/fs/cgroup/unified/dbop-0000abcd"),
            nft_dir: "unified/dbop-0000abcd".to_owned(),
            node_level: 2,
        }
    }

    #[test]
    fn a_partition_keeps_the_node_inside_and_drops_both_ways_across() {
        let mut cut = BTreeMap::new();
        cut.insert(
            "proc-1".to_owned(),
            vec![Ipv4Addr::new(127, 10, 0, 4), Ipv4Addr::new(127, 10, 0, 9)],
        );
        let rules = cgroups().ruleset(&cut);
        let lines: Vec<&str> = rules.lines().map(str::trim).collect();
        let at = |needle: &str| {
            lines
                .iter()
                .position(|l| *l == needle)
                .unwrap_or_else(|| panic!("no line {needle:?} in\n{rules}"))
        };
        let inside = at(
            "socket cgroupv2 level 2 \"unified/dbop-0000abcd/proc-1\" ip daddr { 127.10.0.4, 127.10.0.9 } ct mark set 0x64626f70 accept",
        );
        let to_node = at("ip daddr { 127.10.0.4, 127.10.0.9 } drop");
        let from_node = at("socket cgroupv2 level 2 \"unified/dbop-0000abcd/proc-1\" drop");
        let replies = at("ct mark 0x64626f70 accept");
        assert!(
            replies < inside && inside < to_node && to_node < from_node,
            "{rules}"
        );
        assert!(rules.starts_with("table inet dbop_0000abcd\ndelete table inet dbop_0000abcd\n"));
    }

    #[test]
    fn healing_the_last_node_removes_the_table() {
        let rules = cgroups().ruleset(&BTreeMap::new());
        assert_eq!(
            rules,
            "table inet dbop_0000abcd\ndelete table inet dbop_0000abcd\n"
        );
        assert!(!rules.contains("drop"));
    }

    #[test]
    fn state_directories_get_different_names() {
        assert_ne!(
            fnv(b"/work/a/target/e2e-cluster"),
            fnv(b"/work/b/target/e2e-cluster")
        );
        assert_eq!(fnv(b""), 0x811c_9dc5);
    }
}
