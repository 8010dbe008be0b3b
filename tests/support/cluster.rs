//! A Redis Cluster of the test's own: 3 masters and 3 replicas on free
//! loopback ports in a temporary directory (`tests/cluster/redis-cluster.sh`),
//! stopped by their pids when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use pushgate::config::Config;

/// A running local cluster.
pub(crate) struct LocalCluster {
    /// Every node's port, masters first.
    pub ports: Vec<u16>,
    dir: PathBuf,
}

impl LocalCluster {
    /// Starts one, or `None` (a skip) when redis-server is missing outside
    /// CI; under CI a missing redis-server fails the test.
    pub(crate) fn start(test: &str) -> Option<Self> {
        let found = Command::new("redis-server")
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success());
        if !found {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI installs redis-server, and it is missing"
            );
            eprintln!("SKIPPED: no redis-server for a local Redis Cluster");
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "pushgate-cluster-{test}-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let out = script("start", &dir).output().expect("bash runs");
        let mut cluster = Self {
            ports: Vec::new(),
            dir,
        };
        assert!(
            out.status.success(),
            "the local cluster did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.ports = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(|p| p.parse().expect("a port"))
            .collect();
        Some(cluster)
    }

    /// A seed URL.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.ports[0])
    }

    /// Every node as a seed URL.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// `redis-cli -c -p <a node> <args>`: the answer's text, from the first
    /// node that answers (a test may have killed some).
    pub(crate) fn cli(&self, args: &[&str]) -> String {
        for port in &self.ports {
            let out = Command::new("redis-cli")
                .args(["-c", "-p", &port.to_string()])
                .args(args)
                .output()
                .expect("redis-cli runs");
            let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if out.status.success() && !text.is_empty() && !text.starts_with("Could not connect") {
                return text;
            }
        }
        panic!("no cluster node answers {args:?}");
    }

    /// `redis-cli -p <port> <args>` on one node.
    pub(crate) fn cli_at(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The port of the master that holds `slot`.
    pub(crate) fn master_of(&self, slot: u16) -> u16 {
        self.try_master_of(slot).unwrap_or_else(|| {
            panic!(
                "no master holds slot {slot}:\n{}",
                self.cli(&["cluster", "nodes"])
            )
        })
    }

    /// The port of the master that holds `slot` in the view of the first
    /// node that answers, or None while it knows none (during a failover
    /// that node may hear of the promotion after clients already use it).
    pub(crate) fn try_master_of(&self, slot: u16) -> Option<u16> {
        let nodes = self.cli(&["cluster", "nodes"]);
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") {
                continue;
            }
            let port: u16 = fields[1]
                .split([':', '@'])
                .nth(1)
                .and_then(|p| p.parse().ok())
                .expect("a port");
            for range in &fields[8..] {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                if let (Ok(low), Ok(high)) = (low.parse::<u16>(), high.parse::<u16>())
                    && (low..=high).contains(&slot)
                {
                    return Some(port);
                }
            }
        }
        None
    }

    /// Kills the node on `port` with SIGKILL (by its pid file).
    pub(crate) fn kill(&self, port: u16) {
        self.signal(port, "KILL");
    }

    /// Starts the node on `port` again after a kill, on its own
    /// `nodes.conf` (so as the same cluster node), with no data.
    pub(crate) fn restart(&self, port: u16) {
        let out = script("restart", &self.dir)
            .arg(port.to_string())
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "node {port} did not restart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Sends signal `name` (`STOP`, `CONT`, `KILL`, ...) to the node on
    /// `port`.
    pub(crate) fn signal(&self, port: u16, name: &str) {
        let pid = std::fs::read_to_string(self.dir.join(port.to_string()).join("redis.pid"))
            .expect("pid file");
        let status = Command::new("kill")
            .args([&format!("-{name}"), pid.trim()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} {pid}");
    }

    /// The port of a replica of the master on `master`.
    pub(crate) fn replica_of(&self, master: u16) -> u16 {
        let nodes = self.cli(&["cluster", "nodes"]);
        let port_of = |line: &str| -> Option<u16> {
            line.split_whitespace()
                .nth(1)?
                .split([':', '@'])
                .nth(1)?
                .parse()
                .ok()
        };
        let id = nodes
            .lines()
            .find(|line| port_of(line) == Some(master))
            .and_then(|line| line.split_whitespace().next())
            .expect("the master is listed");
        nodes
            .lines()
            .filter(|line| line.contains("slave") && !line.contains("fail"))
            .find(|line| line.split_whitespace().nth(3) == Some(id))
            .and_then(port_of)
            .unwrap_or_else(|| panic!("no replica of {master}:\n{nodes}"))
    }

    /// The node ids of the masters, with their ports.
    pub(crate) fn masters(&self) -> Vec<(String, u16)> {
        self.cli(&["cluster", "nodes"])
            .lines()
            .filter(|line| line.contains("master") && !line.contains("fail"))
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let port = fields.get(1)?.split([':', '@']).nth(1)?.parse().ok()?;
                Some((fields.first()?.to_string(), port))
            })
            .collect()
    }

    /// Calls so far of each of `commands` (`INFO commandstats` names:
    /// `spublish`, `evalsha`), summed over them and over the masters.
    pub(crate) fn calls(&self, commands: &[&str]) -> u64 {
        self.masters()
            .iter()
            .map(|(_, port)| {
                let stats = self.cli_at(*port, &["info", "commandstats"]);
                stats
                    .lines()
                    .filter_map(|line| {
                        let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
                        commands.contains(&name).then_some(())?;
                        rest.split(',').next()?.trim().parse::<u64>().ok()
                    })
                    .sum::<u64>()
            })
            .sum()
    }

    /// `CLUSTER KEYSLOT key`.
    pub(crate) fn keyslot(&self, key: &str) -> u16 {
        self.cli(&["cluster", "keyslot", key])
            .parse()
            .expect("a slot")
    }

    /// Nodes subscribed to sharded channel `channel` (`PUBSUB SHARDNUMSUB`
    /// on the master of its slot).
    pub(crate) fn shard_subscribers(&self, channel: &str) -> usize {
        let master = self.master_of(self.keyslot(channel));
        let answer = self.cli_at(master, &["pubsub", "shardnumsub", channel]);
        answer
            .lines()
            .nth(1)
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// A test config on this cluster under `prefix`.
    pub(crate) fn config(&self, prefix: &str) -> Config {
        let mut c = super::redis::config(&self.url(), prefix);
        c.broker.cluster = true;
        c.broker.urls = self.urls();
        c
    }

    /// The key and channel names of `prefix`'s streams for the shards a
    /// node started with [`Self::config`] uses.
    pub(crate) fn layout(&self, prefix: &str) -> pushgate::ClusterLayout {
        pushgate::ClusterLayout::new(prefix, self.config(prefix).broker.shards)
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = script("stop", &self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `tests/cluster/redis-cluster.sh <command> <dir>`, to run.
fn script(command: &str, dir: &Path) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/cluster/redis-cluster.sh"
    ))
    .arg(command)
    .arg(dir);
    cmd
}
