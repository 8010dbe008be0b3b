//! On a Redis Cluster too, a resume whose history read fails is refused,
//! not told it missed messages: the master holding the user's stream is
//! paused (`CLIENT PAUSE … ALL`, every key kept) so that shard's read
//! times out; the WebSocket resume gets `503 unavailable` with a
//! `Retry-After` in `1..=[limits] connection_retry_spread_secs` and
//! nothing stays attached; once the master answers, the same cursor gets
//! `recover` `complete: true` and every missed message once, in order per
//! stream. (The single-Redis test, `tests/redis_resume_refused.rs`, covers
//! every transport; the transport half is the same code.)

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::cluster::LocalCluster;
use support::ws::{raw_handshake, upgrade_request};
use support::{Gateway, next_json, token};

const WAIT: Duration = Duration::from_secs(15);

/// `[limits] connection_retry_spread_secs` in this test.
const SPREAD_SECS: u64 = 3;

/// How long the master is paused: long enough for one refused resume
/// (it waits `[broker] timeout_ms`) on a loaded machine.
const PAUSE: Duration = Duration::from_secs(6);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_whose_shard_read_times_out_is_refused_and_gets_everything_after() {
    let Some(cluster) = LocalCluster::start("resume-refused") else {
        return;
    };
    let prefix = support::redis::prefix("sharded-resume-refused");
    let mut config = cluster.config(&prefix);
    config.broker.timeout_ms = 500;
    config.limits.connection_retry_spread_secs = SPREAD_SECS;
    let gw = Gateway::start(config).await;

    let push = |body: Value| {
        let gw = &gw;
        async move {
            let resp = gw.push(&body).await;
            assert_eq!(resp.status, 202, "{resp:?}");
            resp.json()
        }
    };
    let first = push(json!({"to": "*", "data": "before"})).await;
    let cursor = first["cursor"].as_str().expect("a cursor").to_owned();
    for data in ["a1", "b1", "a2", "b2"] {
        let to = if data.starts_with('a') {
            json!(["alice"])
        } else {
            json!("*")
        };
        push(json!({"to": to, "data": data})).await;
    }

    let layout = cluster.layout(&prefix);
    let master = cluster.master_of(cluster.keyslot(&layout.user_history("alice")));
    let paused_at = Instant::now();
    let pause = PAUSE.as_millis().to_string();
    assert_eq!(
        cluster.cli_at(master, &["client", "pause", &pause, "all"]),
        "OK"
    );
    let target = format!("/ws?token={}&cursor={cursor}", token("alice", 3600));
    let mut answer = raw_handshake(gw.addr, &upgrade_request("GET", &target, &[], &[])).await;
    assert!(
        paused_at.elapsed() < PAUSE,
        "answered after the pause ended: the test proves nothing"
    );
    if answer.status == 101 {
        let first = answer.ws.next_frame(WAIT).await;
        let first = first.map(|f| String::from_utf8_lossy(&f.payload).into_owned());
        panic!("the resume was accepted while alice's master was paused; first frame {first:?}");
    }
    assert_eq!(
        (answer.status, answer.error_code().as_str()),
        (503, "unavailable"),
        "{answer:?}"
    );
    let secs: u64 = answer
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!((1..=SPREAD_SECS).contains(&secs), "Retry-After {secs}");
    let held = gw.state.inspect();
    assert_eq!(
        (held.connections, held.users),
        (0, 0),
        "nothing stays attached: {held:?}"
    );

    // As a client does: back with the same cursor, again while refused
    // (the pause, then the cluster client finding its connection again).
    let url = gw.ws_url(&format!("token={}&cursor={cursor}", token("alice", 3600)));
    let deadline = tokio::time::Instant::now() + PAUSE + WAIT;
    let mut ws = loop {
        match tokio_tungstenite::connect_async(&url).await {
            Ok((ws, _)) => break ws,
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) if resp.status() == 503 => {
                assert!(tokio::time::Instant::now() < deadline, "still refused");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(err) => panic!("resume failed: {err}"),
        }
    };
    let recover = next_json(&mut ws, WAIT).await;
    support::assert_recover(&recover, true, "");
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(next_json(&mut ws, WAIT).await["data"].clone());
    }
    // Each once, in publish order per stream (the two may be on
    // different masters).
    let of = |prefix: char| -> Vec<Value> {
        got.iter()
            .filter(|d| d.as_str().is_some_and(|s| s.starts_with(prefix)))
            .cloned()
            .collect()
    };
    assert_eq!(of('a'), [json!("a1"), json!("a2")], "{got:?}");
    assert_eq!(of('b'), [json!("b1"), json!("b2")], "{got:?}");
    push(json!({"to": ["alice"], "data": "live"})).await;
    assert_eq!(
        next_json(&mut ws, WAIT).await["data"],
        "live",
        "nothing more before the next live message"
    );
}
