//! Long-polls that poll again at once with their cursor, while broadcasts
//! flow as fast as the API takes them: every poller must see every message
//! exactly once, in order, on either broker.
//!
//! The seam under test: a poll attaches while a message its cursor already
//! covers is still on its way to the connections (the fan-out thread, or
//! Redis pub/sub). That late live copy must not be answered again.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use support::browser::{get, poll_frames, poll_path};
use support::{Gateway, config, redis};

const POLLERS: usize = 20;
const MESSAGES: u64 = 300;
const LIMIT: Duration = Duration::from_secs(60);

/// Polls from `cursor` until message `MESSAGES` is in; returns the payloads
/// of every message frame, in the order answered.
async fn poll_all(addr: SocketAddr, user: String, mut cursor: String) -> Vec<u64> {
    let mut got = Vec::new();
    while got.last() != Some(&MESSAGES) {
        let resp = get(addr, &poll_path(&user, Some(&cursor)), &[]).await;
        for frame in poll_frames(&resp) {
            match frame["type"].as_str() {
                Some("message") => got.push(frame["data"].as_u64().expect("number")),
                Some("recover") => {
                    assert_eq!(frame["complete"], true, "{user}: history holds it all")
                }
                Some("reconnect") => {}
                other => panic!("{user}: unexpected frame {other:?}"),
            }
            if let Some(next) = frame["cursor"].as_str() {
                cursor = next.to_owned();
            }
        }
    }
    got
}

async fn every_poller_gets_every_message_once(gw: Gateway) {
    // A starting cursor every poller shares.
    let start = gw.push(&json!({"to": "*", "data": 0})).await;
    assert_eq!(start.status, 202);
    let cursor = start.json()["cursor"].as_str().expect("cursor").to_owned();
    let pollers: Vec<_> = (0..POLLERS)
        .map(|i| tokio::spawn(poll_all(gw.addr, format!("poller{i}"), cursor.clone())))
        .collect();
    for n in 1..=MESSAGES {
        let resp = gw.push(&json!({"to": "*", "data": n})).await;
        assert_eq!(resp.status, 202, "{:?}", resp.body);
    }
    let want: Vec<u64> = (1..=MESSAGES).collect();
    for (i, poller) in pollers.into_iter().enumerate() {
        let got = tokio::time::timeout(LIMIT, poller)
            .await
            .expect("every message arrives")
            .expect("poller");
        let dups = got.len() as i64 - want.len() as i64;
        assert_eq!(got, want, "poller{i}: {dups} more than sent");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_broker_polls_see_each_message_once() {
    every_poller_gets_every_message_once(Gateway::start(config()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_broker_polls_see_each_message_once() {
    if !redis::available() {
        return;
    }
    let prefix = redis::prefix("poll-once");
    let gw = Gateway::start(redis::config(redis::REDIS_URL, &prefix)).await;
    every_poller_gets_every_message_once(gw).await;
}
