//! A broadcast costs one PUBLISH however many users and nodes receive it
//! (counted by Redis itself, on a private Redis no other test touches).

mod support;

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;
use support::{Gateway, next_json, redis};

async fn publish_calls(url: &str) -> u64 {
    let client = ::redis::Client::open(url).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let stats: String = ::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("info");
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_publish:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_to_300_users_on_3_nodes_costs_one_publish() {
    let server = redis::PrivateRedis::start();
    let prefix = redis::prefix("cost");
    let nodes = [
        Gateway::start(redis::config(&server.url(), &prefix)).await,
        Gateway::start(redis::config(&server.url(), &prefix)).await,
        Gateway::start(redis::config(&server.url(), &prefix)).await,
    ];
    let clients = join_all((0..300).map(|i| nodes[i % 3].connect_owned(format!("u{i}")))).await;
    let before = publish_calls(&server.url()).await;
    assert_eq!(
        nodes[0]
            .push(&json!({"to": "*", "data": "sale"}))
            .await
            .status,
        202
    );
    let received = join_all(clients.into_iter().map(|mut ws| async move {
        next_json(&mut ws, Duration::from_secs(10)).await["data"] == "sale"
    }))
    .await;
    assert!(received.iter().all(|r| *r), "every client received it");
    assert_eq!(publish_calls(&server.url()).await - before, 1);
}
