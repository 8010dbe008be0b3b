//! A cursor far ahead of the sequence (a number of 1e14 or more, which
//! Lua's number formatting turned into `1e+14` and XRANGE refused) resumes
//! on the Redis broker as on the memory broker: `recover` complete, with
//! the current position, and nothing replayed.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Gateway, next_json, redis};

const WAIT: Duration = Duration::from_secs(10);

/// The first frame a WebSocket resuming from `cursor` gets.
async fn resume_frame(gw: &Gateway, user: &str, cursor: &str) -> Value {
    let query = format!("token={}&cursor={cursor}", support::token(user, 3600));
    let (mut ws, _) = tokio_tungstenite::connect_async(gw.ws_url(&query))
        .await
        .expect("ws connects");
    next_json(&mut ws, WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_far_ahead_of_the_sequence_resumes_alike_on_both_brokers() {
    if !redis::available() {
        return;
    }
    let prefix = redis::prefix("far-cursor");
    let on_redis = Gateway::start(redis::config(redis::REDIS_URL, &prefix)).await;
    let on_memory = Gateway::default().await;
    for gw in [&on_redis, &on_memory] {
        let pushed = gw.push(&json!({"to": "*", "data": "one"})).await;
        assert_eq!(pushed.status, 202, "{:?}", pushed.body);
        let position = pushed.json()["cursor"].as_str().expect("cursor").to_owned();
        let epoch = position.split('-').next().expect("epoch");
        for seq in [
            "100000000000000",      // 1e14: Lua printed it as 1e+14
            "9007199254740993",     // 2^53 + 1: not exact as a Lua number
            "18446744073709551615", // u64::MAX
        ] {
            let frame = resume_frame(gw, "fay", &format!("{epoch}-{seq}")).await;
            assert_eq!(frame["type"], "recover", "{frame}");
            assert_eq!(frame["complete"], true, "cursor {seq}: {frame}");
            assert_eq!(frame["cursor"], position.as_str(), "{frame}");
        }
    }
}
