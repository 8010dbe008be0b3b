//! Redis lost while running: readiness and pushes answer 503, existing
//! connections stay, the nodes recover without a restart, and clients are
//! told they may have missed messages. Uses a private Redis the test stops.

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
