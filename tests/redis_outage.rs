//! Redis lost while running: readiness and pushes answer 503, existing
//! connections stay, the nodes recover without a restart, and clients are
//! told they may have missed messages. Redis stalled past the timeout: a
//! push refused 503 is never published. Uses private Redis servers the
//! tests stop or pause.

mod support;

use std::time::Duration;

use hyper::Method;
use serde_json::json;
use support::{Gateway, next_json, redis};

const WAIT: Duration = Duration::from_secs(15);

async fn status(gw: &Gateway, path: &str) -> u16 {
    Gateway::attach(gw.addr)
        .request(Method::GET, path, &[], "")
        .await
        .status
        .as_u16()
}

/// Waits until `path` answers `want`.
async fn eventually(gw: &Gateway, path: &str, want: u16) {
    let what = format!("{path} answers {want}");
    support::ws::until_eq(WAIT, &what, &want, || status(gw, path)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_survive_a_redis_restart_and_tell_clients_of_possible_gaps() {
    let mut server = redis::PrivateRedis::start();
    let prefix = redis::prefix("outage");
    let a = Gateway::start(redis::config(&server.url(), &prefix)).await;
    let b = Gateway::start(redis::config(&server.url(), &prefix)).await;
    let mut ws = b.connect("gina").await;
    assert_eq!(
        a.push(&json!({"to": "*", "data": "before"})).await.status,
        202
    );
    assert_eq!(next_json(&mut ws, WAIT).await["data"], "before");
    eventually(&a, "/readyz", 200).await;

    server.stop();
    eventually(&a, "/readyz", 503).await;
    eventually(&b, "/readyz", 503).await;
    let refused = a.push(&json!({"to": "*", "data": "lost?"})).await;
    assert_eq!(refused.status, 503, "{:?}", refused.body);
    assert_eq!(refused.error_code(), "unavailable");
    assert_eq!(
        status(&a, "/healthz").await,
        200,
        "the process still serves"
    );

    server.restart();
    eventually(&a, "/readyz", 200).await;
    eventually(&b, "/readyz", 200).await;
    // Redis lost its keys: a new epoch. The open connection was kept and is
    // told that it may have missed messages, with a cursor to go on from.
    let told = next_json(&mut ws, WAIT).await;
    assert_eq!(
        (told["type"].as_str(), told["complete"].as_bool()),
        (Some("recover"), Some(false)),
        "{told}"
    );
    let mut delivered = None;
    for _ in 0..50 {
        let resp = a.push(&json!({"to": "*", "data": "after"})).await;
        if resp.status == 202 {
            delivered = Some(next_json(&mut ws, WAIT).await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        delivered.expect("a push was accepted after recovery")["data"],
        "after"
    );
}

/// A Redis that stalls (a slow command, a fork) past the broker timeout:
/// a push whose script waits there past the timeout refuses to publish
/// when it runs, so the caller gets 503 and nothing is published (503
/// says nothing was), though Redis comes back before the gateway gives
/// up on the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_refused_while_redis_stalls_is_never_published() {
    let server = redis::PrivateRedis::start();
    let mut config = redis::config(&server.url(), &redis::prefix("stall"));
    config.broker.timeout_ms = 3000;
    let gw = Gateway::start(config).await;
    let mut alice = gw.connect("alice").await;
    // A slow command holds Redis 3 s. The push goes 0.5 s in: its script
    // may start until 2.5 s (two thirds of the timeout), the gateway waits
    // for the answer until 3.5 s (the timeout), and the script runs at 3 s.
    let port = server.port.to_string();
    let slow = std::thread::spawn(move || {
        let busy = "local t = redis.call('TIME') local s = t[1] * 1e6 + t[2] \
                    repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - s > 3e6";
        std::process::Command::new("redis-cli")
            .args(["-p", &port, "eval", busy, "0"])
            .output()
            .expect("redis-cli runs")
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resp = gw.push(&json!({"to": ["alice"], "data": 1})).await;
    assert_eq!(resp.status, 503, "{:?}", resp.body);
    let slow = tokio::task::spawn_blocking(move || slow.join().expect("joined"))
        .await
        .expect("joined");
    assert!(slow.status.success(), "{slow:?}");
    let resp = gw.push(&json!({"to": ["alice"], "data": 2})).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    let frame = next_json(&mut alice, WAIT).await;
    assert_eq!(frame["data"], 2, "the refused push published: {frame}");
}
