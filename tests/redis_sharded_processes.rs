//! Three `pushgate` processes on a Redis Cluster, as an operator runs them:
//! each node takes from the broker only the messages of the streams its
//! connections are in (`pushgate_bus_messages_received_total`, per
//! process: in one test process the nodes would share one recorder), and a
//! broadcast is one `SPUBLISH` whatever the number of nodes.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use support::browser::get;
use support::cluster::LocalCluster;
use support::process::Process;
use support::{next_json, raw_http, raw_status};

const WAIT: Duration = Duration::from_secs(10);
const API_KEY: &str = "sharded-processes-api-key-0123456789";

/// A node on `cluster` under `prefix`, anonymous clients allowed.
async fn node(cluster: &LocalCluster, prefix: &str, name: &str) -> Process {
    let url = cluster.url();
    let mut node = Process::start(
        name,
        &["--config", "config.toml"],
        &[
            ("PUSHGATE_BROKER_KIND", "redis"),
            ("PUSHGATE_BROKER_CLUSTER", "true"),
            ("PUSHGATE_BROKER_URL", &url),
            ("PUSHGATE_BROKER_KEY_PREFIX", prefix),
            ("PUSHGATE_AUTH_ANONYMOUS", "true"),
            ("PUSHGATE_AUTH_API_KEY", API_KEY),
        ],
    );
    node.wait_healthy().await;
    node
}

/// The node's `pushgate_bus_messages_received_total`.
async fn received(addr: SocketAddr) -> u64 {
    let answer = get(addr, "/metrics", &[]).await;
    let text = String::from_utf8_lossy(&answer.body).into_owned();
    text.lines()
        .find_map(|line| line.strip_prefix("pushgate_bus_messages_received_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no bus counter in /metrics:\n{text}"))
}

/// Waits until every node's counter is what `want` says, or fails.
async fn received_becomes(nodes: &[&Process], want: [u64; 3]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut got = [0; 3];
        for (i, node) in nodes.iter().enumerate() {
            got[i] = received(node.addr).await;
        }
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline && got.iter().zip(want).all(|(g, w)| *g <= w),
            "bus messages received per node: {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn push(addr: SocketAddr, body: serde_json::Value) {
    let body = body.to_string();
    let request = format!(
        "POST /push HTTP/1.1\r\nHost: pushgate\r\nAuthorization: Bearer {API_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = raw_http(addr, request.as_bytes()).await;
    assert_eq!(raw_status(&answer), 202, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_takes_only_its_users_messages_and_a_broadcast_is_one_spublish() {
    let Some(cluster) = LocalCluster::start("processes") else {
        return;
    };
    let prefix = support::redis::prefix("processes");
    let a = node(&cluster, &prefix, "sharded-a").await;
    let b = node(&cluster, &prefix, "sharded-b").await;
    let c = node(&cluster, &prefix, "sharded-c").await;
    let nodes = [&a, &b, &c];
    received_becomes(&nodes, [0, 0, 0]).await;

    let url = format!("ws://{}/ws?uid=alice", a.addr);
    let (mut alice, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("ws connects");
    // A personal push through node b reaches alice on node a; only a took
    // it from the broker.
    push(b.addr, json!({"to": ["alice"], "data": "hi"})).await;
    assert_eq!(next_json(&mut alice, WAIT).await["data"], "hi");
    received_becomes(&nodes, [1, 0, 0]).await;

    // A broadcast: one SPUBLISH, taken by every node once.
    let before = cluster.calls(&["spublish"]);
    push(c.addr, json!({"to": "*", "data": "all"})).await;
    assert_eq!(next_json(&mut alice, WAIT).await["data"], "all");
    assert_eq!(cluster.calls(&["spublish"]) - before, 1, "one SPUBLISH");
    received_becomes(&nodes, [2, 1, 1]).await;
}
