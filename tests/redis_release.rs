//! A stopped gateway lets go of Redis: its bus's tasks end with it, and
//! with them its subscription (counted by Redis, `PUBSUB NUMSUB`).

mod support;

use std::time::Duration;

use support::{Gateway, redis};

/// Subscribers Redis counts on `channel`.
async fn subscribers(url: &str, channel: &str) -> u64 {
    let client = ::redis::Client::open(url).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let (_, count): (String, u64) = ::redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut conn)
        .await
        .expect("pubsub numsub");
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_gateway_leaves_its_redis_subscription() {
    if !redis::available() {
        return;
    }
    let prefix = redis::prefix("release");
    let channel = format!("{prefix}:bus");
    let a = Gateway::start(redis::config(redis::REDIS_URL, &prefix)).await;
    let b = Gateway::start(redis::config(redis::REDIS_URL, &prefix)).await;
    assert_eq!(subscribers(redis::REDIS_URL, &channel).await, 2);
    a.stop(Duration::from_secs(10)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = subscribers(redis::REDIS_URL, &channel).await;
        if left == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{left} subscribers on {channel} 10 s after one of two gateways stopped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.stop(Duration::from_secs(10)).await;
}
