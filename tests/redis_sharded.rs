//! Three gateway nodes on a Redis Cluster of 3 masters and 3 replicas
//! (`[broker] cluster = true`), started by the test on loopback ports:
//! streams sharded over the masters, each node subscribed only to the
//! streams its connections are in, delivery exactly once on every
//! transport, resume on another node.

mod support;

use std::time::Duration;

use futures_util::SinkExt;
use pushgate::protocol::Transport;
use serde_json::json;
use support::browser::{Sse, poll_frames, poll_path, spawn_get, sse_path, wait_for_connections};
use support::cluster::LocalCluster;
use support::{Gateway, next_json};
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(10);

async fn nodes(cluster: &LocalCluster, test: &str) -> [Gateway; 3] {
    let prefix = support::redis::prefix(test);
    [
        Gateway::start(cluster.config(&prefix)).await,
        Gateway::start(cluster.config(&prefix)).await,
        Gateway::start(cluster.config(&prefix)).await,
    ]
}

/// Waits until `check` holds, polling, or fails with `what`.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    support::ws::eventually(WAIT, what, || std::future::ready(check())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_personal_and_channel_messages_reach_every_transport_once() {
    let Some(cluster) = LocalCluster::start("deliver") else {
        return;
    };
    let [a, b, c] = nodes(&cluster, "deliver").await;
    let mut ws_b = b.connect("alice").await;
    let mut sse_c = Sse::open(c.addr, &sse_path("bob", None), &[]).await;
    wait_for_connections(&c, Transport::Sse, 1, WAIT).await;

    let resp = a.push(&json!({"to": "*", "data": "everyone"})).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    assert_eq!(next_json(&mut ws_b, WAIT).await["data"], "everyone");
    assert_eq!(sse_c.next_json(WAIT).await["data"], "everyone");

    let resp = a.push(&json!({"to": ["alice"], "data": "for alice"})).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    let frame = next_json(&mut ws_b, WAIT).await;
    assert_eq!(
        (frame["stream"].as_str(), frame["data"].as_str()),
        (Some("user"), Some("for alice"))
    );
    let resp = c.push(&json!({"to": ["bob"], "data": "for bob"})).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    assert_eq!(sse_c.next_json(WAIT).await["data"], "for bob");

    // A long-poll on the third node, parked, answered by a broadcast.
    let poll = spawn_get(a.addr, poll_path("carol", None), Vec::new());
    wait_for_connections(&a, Transport::Poll, 1, WAIT).await;
    b.push(&json!({"to": "*", "data": "second"})).await;
    let polled = poll_frames(&poll.await.expect("poll"));
    assert_eq!(polled.len(), 1, "{polled:?}");
    assert_eq!(polled[0]["data"], "second");
    // Exactly once: each client's next frame is the next message.
    assert_eq!(next_json(&mut ws_b, WAIT).await["data"], "second");
    assert_eq!(sse_c.next_json(WAIT).await["data"], "second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_subscribes_only_to_the_streams_its_connections_are_in() {
    let Some(cluster) = LocalCluster::start("interest") else {
        return;
    };
    let prefix = support::redis::prefix("interest");
    let a = Gateway::start(open_channels(&cluster, &prefix)).await;
    let b = Gateway::start(open_channels(&cluster, &prefix)).await;
    let shards = cluster.layout(&prefix);
    let alice = shards.user_channel("alice");
    let broadcast = shards.broadcast_channel();
    assert_eq!(cluster.shard_subscribers(&alice), 0);
    assert_eq!(
        cluster.shard_subscribers(&broadcast),
        2,
        "every node hears broadcasts"
    );
    let mut ws = a.connect("alice").await;
    assert_eq!(
        cluster.shard_subscribers(&alice),
        1,
        "only node a, where alice is"
    );
    let resp = b.push(&json!({"to": ["alice"], "data": "hi"})).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    assert_eq!(next_json(&mut ws, WAIT).await["data"], "hi");
    drop(ws);
    eventually("alice's connection released", || {
        a.state.inspect().connections == 0
    })
    .await;
    assert_eq!(
        cluster.shard_subscribers(&alice),
        1,
        "kept a while for a quick return"
    );

    // A `subscribe` frame to a channel new to node a: answered once a
    // hears the channel, so what is pushed next arrives, with no `recover`.
    let news = shards.channel_channel("news");
    assert_eq!(cluster.shard_subscribers(&news), 0);
    let mut bob = a.connect("bob").await;
    bob.send(Message::text(
        json!({"type": "subscribe", "channel": "news"}).to_string(),
    ))
    .await
    .expect("subscribe sent");
    assert_eq!(
        next_json(&mut bob, WAIT).await,
        json!({"type": "subscribed", "channel": "news"})
    );
    assert_eq!(
        cluster.shard_subscribers(&news),
        1,
        "node a subscribed before it answered `subscribed`"
    );
    let resp = b
        .push(&json!({"to": {"channels": ["news"]}, "data": "first"}))
        .await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    let frame = next_json(&mut bob, WAIT).await;
    assert_eq!(
        (frame["type"].as_str(), frame["data"].as_str()),
        (Some("message"), Some("first")),
        "the first frame after `subscribed` is the message: {frame}"
    );
}

/// A config on `cluster` where every channel is public.
fn open_channels(cluster: &LocalCluster, prefix: &str) -> pushgate::config::Config {
    let mut c = cluster.config(prefix);
    c.channels.public = vec!["*".into()];
    c
}

/// A channel name whose stream is on another master than `user`'s.
fn channel_elsewhere(
    cluster: &LocalCluster,
    layout: &pushgate::ClusterLayout,
    user: &str,
) -> String {
    let home = cluster.master_of(cluster.keyslot(&layout.user_history(user)));
    (0..1000)
        .map(|n| format!("room{n}"))
        .find(|name| cluster.master_of(cluster.keyslot(&layout.channel_history(name))) != home)
        .expect("shards over 3 masters: some channel is elsewhere")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_its_user_channel_and_broadcast_streams_on_another_node_once() {
    let Some(cluster) = LocalCluster::start("resume") else {
        return;
    };
    let prefix = support::redis::prefix("resume");
    let a = Gateway::start(open_channels(&cluster, &prefix)).await;
    let b = Gateway::start(open_channels(&cluster, &prefix)).await;
    let layout = cluster.layout(&prefix);
    let room = channel_elsewhere(&cluster, &layout, "alice");
    // The streams of one user and one channel on different masters.
    assert_ne!(
        cluster.master_of(cluster.keyslot(&layout.user_history("alice"))),
        cluster.master_of(cluster.keyslot(&layout.channel_history(&room)))
    );
    let url = |gw: &Gateway, cursor: Option<&str>| {
        let mut query = format!("token={}&channels={room}", support::token("alice", 3600));
        if let Some(cursor) = cursor {
            query.push_str(&format!("&cursor={cursor}"));
        }
        gw.ws_url(&query)
    };
    let (mut ws, _) = tokio_tungstenite::connect_async(url(&a, None))
        .await
        .expect("ws");
    let pushes = [
        json!({"to": "*", "data": 1}),
        json!({"to": ["alice"], "data": 2}),
        json!({"to": {"channels": [room.clone()]}, "data": 3}),
    ];
    let mut cursor = String::new();
    for (n, push) in pushes.iter().enumerate() {
        let resp = b.push(push).await;
        assert_eq!(resp.status, 202, "{:?}", resp.body);
        let frame = next_json(&mut ws, WAIT).await;
        assert_eq!(frame["data"], n + 1, "{frame}");
        cursor = frame["cursor"].as_str().expect("cursor").to_owned();
    }
    assert_eq!(
        cursor.split('~').next().map(|p| p.split('.').count()),
        Some(layout.shards()),
        "one position per shard: {cursor}"
    );
    drop(ws);
    eventually("alice gone from a", || a.state.inspect().connections == 0).await;
    // Missed while away: one of each stream, then one more of each.
    for round in 0..2 {
        for (n, push) in pushes.iter().enumerate() {
            let mut push = push.clone();
            push["data"] = json!(10 * (round + 1) + n + 1);
            let resp = a.push(&push).await;
            assert_eq!(resp.status, 202, "{:?}", resp.body);
        }
    }
    let (mut ws, _) = tokio_tungstenite::connect_async(url(&b, Some(&cursor)))
        .await
        .expect("ws resumes");
    let recover = next_json(&mut ws, WAIT).await;
    support::assert_recover(&recover, true, "");
    let mut got = Vec::new();
    for _ in 0..6 {
        got.push(
            next_json(&mut ws, WAIT).await["data"]
                .as_u64()
                .expect("number"),
        );
    }
    let mut sorted = got.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [11, 12, 13, 21, 22, 23], "each once: {got:?}");
    // In publish order per stream.
    for stream in [1, 2, 3] {
        let of: Vec<u64> = got.iter().copied().filter(|d| d % 10 == stream).collect();
        assert_eq!(of, [10 + stream, 20 + stream], "{got:?}");
    }
    let resp = a
        .push(&json!({"to": {"channels": [room.clone()]}, "data": 99}))
        .await;
    assert_eq!(resp.status, 202);
    assert_eq!(
        next_json(&mut ws, WAIT).await["data"],
        99,
        "live after the resume, once"
    );
}

/// Pushes `n + 1` to alice through `a` (and moves `n` on), then waits
/// 100 ms: `Some` of it if accepted, `None` if refused 503 (no master for
/// the slot yet); any other answer fails the test.
async fn push_next(a: &Gateway, n: &mut u64) -> Option<u64> {
    *n += 1;
    let resp = a.push(&json!({"to": ["alice"], "data": *n})).await;
    let accepted = match resp.status.as_u16() {
        202 => Some(*n),
        503 => None,
        other => panic!("push answered {other}: {:?}", resp.body),
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    accepted
}

/// Pushes to alice through `a` ([`push_next`]) until `count` pushes are
/// accepted, failing after 40 s: the accepted ones and how many were
/// refused 503 meanwhile.
async fn accept_pushes(a: &Gateway, n: &mut u64, count: usize) -> (Vec<u64>, usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let (mut accepted, mut refused) = (Vec::new(), 0);
    while accepted.len() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pushes never accepted again ({refused} refused, {accepted:?} accepted)"
        );
        match push_next(a, n).await {
            Some(n) => accepted.push(n),
            None => refused += 1,
        }
    }
    (accepted, refused)
}

/// Reads frames until one with `data` comes, returning those before it;
/// fails after 40 s in all (heartbeats alone never end the wait).
async fn frames_until(ws: &mut support::Ws, data: &serde_json::Value) -> Vec<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let mut before = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        assert!(
            !left.is_zero(),
            "{data} never came; frames meanwhile: {before:?}"
        );
        let frame = next_json(ws, left).await;
        if &frame["data"] == data {
            return before;
        }
        before.push(frame);
    }
}

/// The gateways' logs (this test binary's), shown if the test fails.
fn show_logs_if_failing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("pushgate=debug,redis=warn")
        .with_test_writer()
        .try_init();
}

/// Asserts that the messages alice gets, up to the last of `accepted`,
/// are exactly `accepted`, in order.
async fn assert_each_once_in_order(alice: &mut support::Ws, accepted: &[u64]) {
    let last = *accepted.last().expect("some push accepted");
    let mut got = Vec::new();
    for frame in frames_until(alice, &json!(last)).await {
        if frame["type"] == "message" {
            got.push(frame["data"].as_u64().expect("number"));
        }
    }
    got.push(last);
    assert_eq!(got, accepted, "each accepted push once, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_fails_over_and_its_streams_go_on_without_a_gateway_restart() {
    show_logs_if_failing();
    let Some(cluster) = LocalCluster::start("failover") else {
        return;
    };
    let prefix = support::redis::prefix("failover");
    let a = Gateway::start(cluster.config(&prefix)).await;
    let b = Gateway::start(cluster.config(&prefix)).await;
    let layout = cluster.layout(&prefix);
    let mut alice = b.connect("alice").await;
    let resp = a.push(&json!({"to": ["alice"], "data": "before"})).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    assert_eq!(next_json(&mut alice, WAIT).await["data"], "before");

    let slot = cluster.keyslot(&layout.user_history("alice"));
    let master = cluster.master_of(slot);
    cluster.kill(master);
    // 503 while no master holds the slot, then accepted again once the
    // replica is promoted: no gateway restarted.
    let (accepted, refused) = accept_pushes(&a, &mut 0, 3).await;
    assert!(
        refused > 0,
        "the push right after the kill should find no master"
    );
    eventually("a replica took over, as the cluster's nodes see it", || {
        cluster
            .try_master_of(slot)
            .is_some_and(|port| port != master)
    })
    .await;
    // Every accepted push reaches alice exactly once, in order, on the
    // connection she had through the failover.
    assert_each_once_in_order(&mut alice, &accepted).await;
    let resp = a.push(&json!({"to": ["alice"], "data": "after"})).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    // Nothing else but, at most, the catch-up's word that writes may have
    // been lost with the old master (replication is asynchronous).
    for frame in frames_until(&mut alice, &json!("after")).await {
        support::assert_recover(&frame, false, "after the failover");
    }
}

/// Two gateways on a fresh cluster, alice connected to `b` and pushed a
/// first message (`0`) through `a`, and the master and replica holding
/// her stream: where the failover tests start.
struct AliceOnB {
    cluster: LocalCluster,
    a: Gateway,
    alice: support::Ws,
    slot: u16,
    master: u16,
    replica: u16,
    /// The gateway alice is on (bind it: dropped, it stops).
    _b: Gateway,
}

impl AliceOnB {
    async fn start(test: &str) -> Option<Self> {
        let cluster = LocalCluster::start(test)?;
        let prefix = support::redis::prefix(test);
        let a = Gateway::start(cluster.config(&prefix)).await;
        let b = Gateway::start(cluster.config(&prefix)).await;
        let layout = cluster.layout(&prefix);
        let slot = cluster.keyslot(&layout.user_history("alice"));
        let mut alice = b.connect("alice").await;
        let resp = a.push(&json!({"to": ["alice"], "data": 0})).await;
        assert_eq!(resp.status, 202, "{:?}", resp.body);
        assert_eq!(next_json(&mut alice, WAIT).await["data"], 0);
        let master = cluster.master_of(slot);
        let replica = cluster.replica_of(master);
        Some(Self {
            cluster,
            a,
            alice,
            slot,
            master,
            replica,
            _b: b,
        })
    }

    /// Makes alice's master lose two pushes to her: its replica stops
    /// hearing it (stopped, its link cut), it takes the pushes (alice gets
    /// them live) and is killed, and the replica goes on, to be promoted
    /// without them. Returns the second lost push's cursor.
    async fn lose_two_pushes(&mut self) -> String {
        let (cluster, master, replica) = (&self.cluster, self.master, self.replica);
        eventually("the replica has every write so far", || {
            repl_offset(cluster, master).is_some()
                && repl_offset(cluster, replica) == repl_offset(cluster, master)
        })
        .await;
        cluster.signal(replica, "STOP");
        let cut = cluster.cli_at(master, &["client", "kill", "type", "replica"]);
        let mut lost = Vec::new();
        for n in [1, 2] {
            lost.push(self.a.push(&json!({"to": ["alice"], "data": n})).await);
        }
        cluster.kill(master);
        cluster.signal(replica, "CONT");
        assert_eq!(cut, "1", "the master's link to its replica cut");
        let mut cursor = String::new();
        for (n, resp) in lost.iter().enumerate() {
            assert_eq!(resp.status, 202, "{:?}", resp.body);
            let frame = next_json(&mut self.alice, WAIT).await;
            assert_eq!(frame["data"], n + 1, "{frame}");
            cursor = frame["cursor"].as_str().expect("cursor").to_owned();
        }
        cursor
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_under_pushes_loses_nothing_and_delivers_each_once() {
    show_logs_if_failing();
    let Some(AliceOnB {
        cluster,
        a,
        mut alice,
        slot,
        replica,
        _b,
        ..
    }) = AliceOnB::start("manual-failover").await
    else {
        return;
    };

    // An operator's failover (maintenance): the replica takes over, the
    // old master turns replica; pushes go on meanwhile.
    assert_eq!(cluster.cli_at(replica, &["cluster", "failover"]), "OK");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let mut accepted = Vec::new();
    let mut n = 0;
    while cluster.try_master_of(slot) != Some(replica) || accepted.len() < 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the failover or the pushes never completed (accepted {accepted:?})"
        );
        accepted.extend(push_next(&a, &mut n).await);
    }
    assert_each_once_in_order(&mut alice, &accepted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reshard_under_pushes_loses_nothing_and_delivers_each_once() {
    let Some(cluster) = LocalCluster::start("reshard") else {
        return;
    };
    let prefix = support::redis::prefix("reshard");
    // History holds every push, so a resume from before the reshard can
    // be whole.
    let mut config = cluster.config(&prefix);
    config.history.size = 1000;
    let a = Gateway::start(config.clone()).await;
    let b = Gateway::start(config).await;
    let layout = cluster.layout(&prefix);
    let slot = cluster.keyslot(&layout.broadcast_channel());
    let from = cluster.master_of(slot);
    let masters = cluster.masters();
    let source = masters
        .iter()
        .find(|(_, port)| *port == from)
        .expect("source")
        .0
        .clone();
    let target = masters
        .iter()
        .find(|(_, port)| *port != from)
        .expect("target")
        .clone();
    let mut ws = b.connect("alice").await;

    let pusher = tokio::spawn(async move {
        let mut accepted = Vec::new();
        for n in 0..150_u64 {
            let resp = a.push(&json!({"to": "*", "data": n})).await;
            match resp.status.as_u16() {
                202 => accepted.push(n),
                503 => {}
                other => panic!("push answered {other}: {:?}", resp.body),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (a, accepted)
    });
    // Every slot of the source master up to the broadcast stream's moves.
    let seed = format!("127.0.0.1:{}", cluster.ports[0]);
    let slots = (slot + 1).to_string();
    let (source_id, target_id) = (source.clone(), target.0.clone());
    let reshard = tokio::task::spawn_blocking(move || {
        std::process::Command::new("redis-cli")
            .args(["--cluster", "reshard", &seed, "--cluster-from", &source_id])
            .args([
                "--cluster-to",
                &target_id,
                "--cluster-slots",
                &slots,
                "--cluster-yes",
            ])
            .output()
            .expect("redis-cli runs")
    });
    let out = reshard.await.expect("reshard");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        cluster.master_of(slot),
        target.1,
        "the broadcast stream's slot moved"
    );
    let (a, mut accepted) = pusher.await.expect("pusher");
    assert!(
        accepted.len() > 100,
        "most pushes accepted: {}",
        accepted.len()
    );
    let last = json!(accepted[accepted.len() - 1]);
    let frames = frames_until(&mut ws, &last).await;
    let mut got: Vec<u64> = frames
        .iter()
        .filter(|f| f["type"] == "message")
        .map(|f| f["data"].as_u64().expect("number"))
        .collect();
    got.push(accepted[accepted.len() - 1]);
    assert_eq!(got, accepted, "each accepted push once, in order");

    // The target master took the shard by migration, not by a failover:
    // after a push it writes, a resume from the first push is whole.
    let first = frames
        .iter()
        .find(|f| f["type"] == "message")
        .and_then(|f| f["cursor"].as_str())
        .expect("the first push's cursor");
    let resp = a.push(&json!({"to": "*", "data": 150})).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    accepted.push(150);
    let query = format!("token={}&cursor={first}", support::token("alice", 3600));
    let (mut resumed, _) = tokio_tungstenite::connect_async(a.ws_url(&query))
        .await
        .expect("ws resumes");
    support::assert_recover(&next_json(&mut resumed, WAIT).await, true, "resumed");
    let mut got = Vec::new();
    for _ in &accepted[1..] {
        got.push(
            next_json(&mut resumed, WAIT).await["data"]
                .as_u64()
                .expect("number"),
        );
    }
    assert_eq!(
        got,
        accepted[1..],
        "every push after the first, from history"
    );
}

/// The replication offset a node reports (`master_repl_offset`).
fn repl_offset(cluster: &LocalCluster, port: u16) -> Option<u64> {
    cluster
        .cli_at(port, &["info", "replication"])
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("master_repl_offset:")?
                .parse()
                .ok()
        })
}

/// After pushes 1 and 2 were lost (`cursor`: the second's): three new
/// pushes through `a` reach alice, still connected, once each and in
/// order, with a `recover` saying she may have missed something; and a
/// client resuming from `cursor` on `a` is told so too and gets the three
/// from history. The new pushes would be taken for the lost ones had
/// they been numbered as those were.
async fn assert_lost_pushes_told(a: &Gateway, alice: &mut support::Ws, cursor: &str) {
    let (accepted, _) = accept_pushes(a, &mut 2, 3).await;
    let last = *accepted.last().expect("accepted");
    let frames = frames_until(alice, &json!(last)).await;
    let mut got: Vec<u64> = frames
        .iter()
        .filter(|f| f["type"] == "message")
        .map(|f| f["data"].as_u64().expect("number"))
        .collect();
    got.push(last);
    assert_eq!(got, accepted, "each new push once, in order: {frames:?}");
    // (The catch-up's `recover` follows what it delivered.)
    if !frames.iter().any(|f| f["type"] == "recover") {
        support::assert_recover(&next_json(alice, WAIT).await, false, "alice");
    } else {
        assert!(
            frames
                .iter()
                .any(|f| f["type"] == "recover" && f["complete"] == false),
            "alice is told writes may be lost: {frames:?}"
        );
    }
    let query = format!("token={}&cursor={cursor}", support::token("alice", 3600));
    let (mut resumed, _) = tokio_tungstenite::connect_async(a.ws_url(&query))
        .await
        .expect("ws resumes");
    support::assert_recover(&next_json(&mut resumed, WAIT).await, false, "resumed");
    let mut got = Vec::new();
    for _ in &accepted {
        got.push(
            next_json(&mut resumed, WAIT).await["data"]
                .as_u64()
                .expect("number"),
        );
    }
    assert_eq!(got, accepted, "the new pushes, from history");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_a_failover_lost_are_told_and_new_pushes_are_not_taken_for_them() {
    show_logs_if_failing();
    let Some(mut on_b) = AliceOnB::start("lost-writes").await else {
        return;
    };
    let cursor = on_b.lose_two_pushes().await;
    assert_lost_pushes_told(&on_b.a, &mut on_b.alice, &cursor).await;
    let (cluster, slot) = (&on_b.cluster, on_b.slot);
    eventually(
        "the replica took over, as the cluster's nodes see it",
        || cluster.try_master_of(slot) == Some(on_b.replica),
    )
    .await;
}

/// A client resuming on a node whose connection to the stream's master was
/// just lost, from the moment the replica is promoted: the history read
/// reaches the new master before the node has subscribed again there, so
/// the read's barrier reaches no subscription of the node's. It is sent
/// again once the node caught the shard up: the client gets its history,
/// complete, well before the resume's 20 s wait for a barrier runs out
/// (after which it would resume incomplete, without history: seen so,
/// three times in three, before the barrier was sent again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_while_the_node_subscribes_again_after_a_failover_gets_its_history() {
    show_logs_if_failing();
    let Some(mut on_b) = AliceOnB::start("resume-in-recovery").await else {
        return;
    };
    let (a, alice) = (&on_b.a, &mut on_b.alice);
    let (accepted, _) = accept_pushes(a, &mut 0, 3).await;
    let mut cursor = String::new();
    for (i, n) in accepted.iter().enumerate() {
        let frame = next_json(alice, WAIT).await;
        assert_eq!(frame["data"], *n, "{frame}");
        if i == 0 {
            cursor = frame["cursor"].as_str().expect("cursor").to_owned();
        }
    }
    let (cluster, master, replica) = (&on_b.cluster, on_b.master, on_b.replica);
    eventually("the replica has every write so far", || {
        repl_offset(cluster, master).is_some()
            && repl_offset(cluster, replica) == repl_offset(cluster, master)
    })
    .await;
    cluster.kill(master);
    eventually(
        "the replica took over, as the cluster's nodes see it",
        || cluster.try_master_of(on_b.slot) == Some(replica),
    )
    .await;
    // Refused (503) until the node finds the new master; tried again at
    // once, as a client would, so the first read that succeeds is as early
    // as it can be.
    let query = format!("token={}&cursor={cursor}", support::token("alice", 3600));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let mut resumed = loop {
        if let Ok((ws, _)) = tokio_tungstenite::connect_async(a.ws_url(&query)).await {
            break ws;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no resume was taken after the failover"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let limit = Duration::from_secs(12);
    support::assert_recover(&next_json(&mut resumed, limit).await, true, "resumed");
    for n in &accepted[1..] {
        assert_eq!(next_json(&mut resumed, limit).await["data"], *n);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_lost_before_a_second_failover_are_told_though_the_middle_master_never_wrote() {
    show_logs_if_failing();
    let Some(mut on_b) = AliceOnB::start("lost-twice").await else {
        return;
    };
    let cursor = on_b.lose_two_pushes().await;
    let (cluster, slot, master, replica) = (&on_b.cluster, on_b.slot, on_b.master, on_b.replica);
    // The replica is promoted; no push reaches the shard while it leads.
    eventually("the replica took over", || {
        cluster.try_master_of(slot) == Some(replica)
    })
    .await;
    // The old master comes back (empty, as the same cluster node), syncs
    // as the new master's replica and takes over again by a manual
    // failover: its replid2 is the middle master's, and the shard's last
    // writer is its own earlier life, whose two pushes are lost.
    cluster.restart(master);
    eventually("the old master is the new one's replica, in sync", || {
        let info = cluster.cli_at(master, &["info", "replication"]);
        info.contains("role:slave") && info.contains("master_link_status:up")
    })
    .await;
    assert_eq!(cluster.cli_at(master, &["cluster", "failover"]), "OK");
    eventually("the old master leads again", || {
        cluster.try_master_of(slot) == Some(master)
    })
    .await;
    assert_lost_pushes_told(&on_b.a, &mut on_b.alice, &cursor).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pushes_share_their_shards_scripts_and_each_is_delivered_once() {
    let Some(cluster) = LocalCluster::start("commit") else {
        return;
    };
    let prefix = support::redis::prefix("commit");
    let a = Gateway::start(cluster.config(&prefix)).await;
    let mut alice = a.connect("alice").await;
    let mut bob = a.connect("bob").await;
    // 120 pushes at once, alternating between two users (who may share a
    // shard or not), and 40 of them sent twice with the same id.
    let ids: Vec<usize> = (0..120).chain(0..40).collect();
    let before = cluster.calls(&["evalsha", "eval"]);
    let gw = &a;
    let answers = futures_util::future::join_all(ids.iter().map(|&i| {
        let user = if i % 2 == 0 { "alice" } else { "bob" };
        let body = json!({"to": [user], "data": i, "id": format!("push-{i}")});
        async move { (i, gw.push(&body).await) }
    }))
    .await;
    let scripts = cluster.calls(&["evalsha", "eval"]) - before;

    let mut fresh = std::collections::HashMap::<usize, usize>::new();
    for (i, resp) in &answers {
        match resp.status.as_u16() {
            202 => *fresh.entry(*i).or_default() += 1,
            200 => assert_eq!(resp.json()["duplicate"], true, "{:?}", resp.body),
            other => panic!("push {i} answered {other}: {:?}", resp.body),
        }
    }
    assert_eq!(fresh.len(), 120, "every id accepted");
    assert!(fresh.values().all(|n| *n == 1), "each id accepted once");
    assert!(
        scripts < 160,
        "160 pushes ran {scripts} scripts: none shared one"
    );
    // The node says so too: some script carried more than one push (other
    // tests of this binary add their own batches, which never make the
    // count exceed the sum).
    let metrics = a.metrics().await;
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    };
    let (batches, pushed) = (
        value("pushgate_bus_publish_batch_pushes_count "),
        value("pushgate_bus_publish_batch_pushes_sum "),
    );
    assert!(
        pushed >= 160.0 && batches < pushed,
        "{batches} batches for {pushed} pushes"
    );

    // Each user gets each of its messages once (in the order the shard
    // numbered them, which concurrent pushes leave open).
    for (ws, parity) in [(&mut alice, 0), (&mut bob, 1)] {
        let mut got = Vec::new();
        while got.len() < 60 {
            let frame = next_json(ws, WAIT).await;
            if frame["type"] == "message" {
                got.push(frame["data"].as_u64().expect("number") as usize);
            }
        }
        got.sort_unstable();
        let want: Vec<usize> = (0..120).filter(|i| i % 2 == parity).collect();
        assert_eq!(got, want);
    }
    let resp = a
        .push(&json!({"to": ["alice", "bob"], "data": "last"}))
        .await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    assert_eq!(
        next_json(&mut alice, WAIT).await["data"],
        "last",
        "nothing more"
    );
    assert_eq!(
        next_json(&mut bob, WAIT).await["data"],
        "last",
        "nothing more"
    );
}

/// `GET path` with the API key: the JSON answer.
async fn ask(gw: &Gateway, path: &str) -> serde_json::Value {
    let auth = format!("Bearer {}", support::API_KEY);
    gw.request(hyper::Method::GET, path, &[("authorization", &auth)], "")
        .await
        .json()
}

/// Polls `path` on `gw` until it answers `want`, or fails.
async fn answers(gw: &Gateway, path: &str, want: serde_json::Value) {
    let what = format!("{path} answers {want}");
    support::ws::until_eq(WAIT, &what, &want, || ask(gw, path)).await;
}

/// How many of this test's presence hashes named like `pattern` (after
/// the shard tags' `{prefix:s`) on the master at `port` count `field`.
fn hashes_counting(
    cluster: &LocalCluster,
    port: u16,
    prefix: &str,
    pattern: &str,
    field: &str,
) -> usize {
    let keys = cluster.cli_at(
        port,
        &["--scan", "--pattern", &format!("{{{prefix}:s*}}:{pattern}")],
    );
    keys.lines()
        .filter(|key| !key.is_empty())
        .filter(|key| !cluster.cli_at(port, &["hget", key, field]).is_empty())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_counts_every_node_and_is_kept_on_each_streams_master() {
    let Some(cluster) = LocalCluster::start("presence") else {
        return;
    };
    let prefix = support::redis::prefix("presence");
    let a = Gateway::start(open_channels(&cluster, &prefix)).await;
    let b = Gateway::start(open_channels(&cluster, &prefix)).await;
    let layout = cluster.layout(&prefix);
    let home = |history: &str| cluster.master_of(cluster.keyslot(history));
    let alice_home = home(&layout.user_history("alice"));
    let bob = (0..1000)
        .map(|n| format!("bob{n}"))
        .find(|user| home(&layout.user_history(user)) != alice_home)
        .expect("shards over 3 masters: some user is elsewhere");
    let bob_home = home(&layout.user_history(&bob));
    let news_home = home(&layout.channel_history("news"));

    let alice_a = a.connect("alice").await;
    let alice_b = Sse::open(
        b.addr,
        &format!("{}&channels=news", sse_path("alice", None)),
        &[],
    )
    .await;
    let bob_b = b.connect(&bob).await;
    for node in [&a, &b] {
        answers(
            node,
            "/users/alice",
            json!({"online": true, "connections": 2}),
        )
        .await;
        answers(
            node,
            &format!("/users/{bob}"),
            json!({"online": true, "connections": 1}),
        )
        .await;
        answers(
            node,
            "/channels/news",
            json!({"subscribers": 1, "users": 1}),
        )
        .await;
    }

    // Each count on its own stream's master: presence spreads as streams do.
    for (_, port) in cluster.masters() {
        let users = |user: &str| hashes_counting(&cluster, port, &prefix, "presence:*", user);
        assert_eq!(
            users("alice"),
            if port == alice_home { 2 } else { 0 },
            "alice on {port}"
        );
        assert_eq!(
            users(&bob),
            usize::from(port == bob_home),
            "{bob} on {port}"
        );
        assert_eq!(
            hashes_counting(&cluster, port, &prefix, "cp:*:news", "alice"),
            usize::from(port == news_home),
            "news on {port}"
        );
    }

    drop(alice_b);
    answers(
        &a,
        "/users/alice",
        json!({"online": true, "connections": 1}),
    )
    .await;
    answers(&a, "/channels/news", json!({"subscribers": 0, "users": 0})).await;
    drop((alice_a, bob_b));
    answers(
        &b,
        "/users/alice",
        json!({"online": false, "connections": 0}),
    )
    .await;
}

/// A master that stalls (a slow command, a fork, writes paused) past the
/// broker timeout: the push is refused 503, and since 503 says nothing
/// was published, nothing is, though its script waits there and runs
/// once the master goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_refused_while_its_master_stalls_is_never_published() {
    show_logs_if_failing();
    let Some(AliceOnB {
        cluster,
        a,
        mut alice,
        master,
        _b,
        ..
    }) = AliceOnB::start("stalled").await
    else {
        return;
    };
    // Writes held for longer than the gateway waits (the timeout, 1 s in
    // tests).
    assert_eq!(
        cluster.cli_at(master, &["client", "pause", "2500", "write"]),
        "OK"
    );
    let resp = a.push(&json!({"to": ["alice"], "data": 1})).await;
    assert_eq!(resp.status, 503, "{:?}", resp.body);
    // The script ran once the pause ended, and published nothing.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let resp = a.push(&json!({"to": ["alice"], "data": 2})).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    let frames = frames_until(&mut alice, &json!(2)).await;
    assert!(frames.is_empty(), "the refused push published: {frames:?}");
}

/// The cluster's publish script (`src/bus/cluster/publish.lua`) run by
/// hand on one shard, to alice's stream: `(reply, history length)` for a
/// run with the batch key `batch` and a deadline `deadline_ms` from now.
async fn publish_by_hand(
    conn: &mut redis::cluster_async::ClusterConnection,
    batch: &str,
    deadline_ms: i64,
) -> (redis::RedisResult<redis::Value>, usize) {
    let script = redis::Script::new(concat!(
        include_str!("../src/bus/redis/history.lua"),
        include_str!("../src/bus/cluster/publish.lua")
    ));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let reply = script
        .key("{t}:seq")
        .key("{t}:epoch")
        .key("{t}:aged")
        .key("{t}:times")
        .key("{t}:writer")
        .key(format!("{{t}}:batch:{batch}"))
        .key("{t}:id:unused")
        .key("{t}:h:u:alice")
        .arg("00000000000000aa") // epoch
        .arg(100) // history size
        .arg(60_000) // ttl ms
        .arg(1) // pushes
        .arg(now + deadline_ms)
        .arg(5_000) // the batch key's life
        .arg("H")
        .arg("0") // not idempotent
        .arg("1") // expires
        .arg(1) // messages
        .arg("T")
        .arg(1) // streams
        .arg("{t}:bus:u:alice")
        .arg("alice")
        .invoke_async::<redis::Value>(conn)
        .await;
    let len: usize = redis::cmd("XLEN")
        .arg("{t}:h:u:alice")
        .query_async(conn)
        .await
        .expect("XLEN");
    (reply, len)
}

/// The client sends a script again when its connection drops before the
/// answer (a failover, a slow master); the batch's key makes a script
/// that already ran answer the same and publish nothing again. A script
/// that starts past its deadline publishes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_script_sent_twice_publishes_once_and_a_late_one_not_at_all() {
    let Some(cluster) = LocalCluster::start("resent") else {
        return;
    };
    let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("client");
    let mut conn = client.get_async_connection().await.expect("connection");
    let (first, len) = publish_by_hand(&mut conn, "one", 10_000).await;
    let first = first.expect("published");
    assert_eq!(len, 1);
    let (again, len) = publish_by_hand(&mut conn, "one", 10_000).await;
    let again = again.expect("answered again");
    assert_eq!(len, 1, "sent again, published once");
    let answers = |v: &redis::Value| match v {
        redis::Value::Array(items) => format!("{:?}", items[1]),
        other => panic!("not {{clock, answers}}: {other:?}"),
    };
    assert_eq!(answers(&again), answers(&first), "the same answers");
    let (other, len) = publish_by_hand(&mut conn, "two", 10_000).await;
    assert!(other.is_ok());
    assert_eq!(len, 2, "another batch publishes");
    let (late, len) = publish_by_hand(&mut conn, "three", -1_000).await;
    let err = late.expect_err("refused");
    assert!(err.to_string().contains("LATE"), "{err}");
    assert_eq!(len, 2, "a late script publishes nothing");
}
