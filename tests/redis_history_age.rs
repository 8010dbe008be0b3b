//! History ages out inside Redis: a message older than `[history]
//! ttl_secs` is dropped when the next push runs its publish script, and a
//! client resuming from before it is told `complete: false` and is not
//! given it. On one Redis and on a Redis Cluster (both publish scripts
//! share their ageing, `bus/redis/history.lua`).

mod support;

use std::time::Duration;

use pushgate::config::Config;
use serde_json::json;
use support::cluster::LocalCluster;
use support::{Gateway, next_json, redis};

const WAIT: Duration = Duration::from_secs(10);

/// Pushes a broadcast and returns its cursor.
async fn push(gw: &Gateway, data: &str) -> String {
    let resp = gw.push(&json!({"to": "*", "data": data})).await;
    assert_eq!(resp.status, 202, "{:?}", resp.body);
    resp.json()["cursor"].as_str().expect("cursor").to_owned()
}

/// Two broadcasts a second apart from the next: the first's cursor, then
/// the second aged past a one-second history ttl by the time a third is
/// pushed; a WebSocket resuming from the first cursor gets `recover`
/// incomplete, then only the third.
async fn the_aged_message_is_gone(mut config: Config) {
    config.history.ttl_secs = 1;
    let gw = Gateway::start(config).await;
    let start = push(&gw, "seen").await;
    push(&gw, "aged out").await;
    // Past the ttl on Redis's clock (the script reads TIME), with room.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    push(&gw, "fresh").await;

    let query = format!("token={}&cursor={start}", support::token("ada", 3600));
    let (mut ws, _) = tokio_tungstenite::connect_async(gw.ws_url(&query))
        .await
        .expect("ws connects");
    let recover = next_json(&mut ws, WAIT).await;
    assert_eq!(recover["type"], "recover", "{recover}");
    assert_eq!(recover["complete"], false, "{recover}");
    let next = next_json(&mut ws, WAIT).await;
    assert_eq!(next["data"], "fresh", "{next}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aged_message_is_dropped_and_told_on_one_redis() {
    if !redis::available() {
        return;
    }
    let prefix = redis::prefix("history-age");
    the_aged_message_is_gone(redis::config(redis::REDIS_URL, &prefix)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aged_message_is_dropped_and_told_on_a_cluster() {
    let Some(cluster) = LocalCluster::start("history-age") else {
        return;
    };
    let prefix = redis::prefix("history-age");
    the_aged_message_is_gone(cluster.config(&prefix)).await;
}
