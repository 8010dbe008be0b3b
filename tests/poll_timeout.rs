//! Long-poll timeout: a poll with nothing to deliver is held for
//! `poll_timeout_secs`, then answered with exactly one `reconnect` frame
//! whose cursor the client polls again with.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use pushgate::protocol::Transport;
use serde_json::json;
use support::Gateway;
use support::browser::{cursor_of, data_of, get, poll_frames, poll_path, spawn_get};

const WAIT: Duration = Duration::from_secs(10);
/// Room for a loaded 2-core machine on top of one wheel tick.
const SLACK: Duration = Duration::from_millis(1500);

fn config() -> pushgate::config::Config {
    let mut c = support::config();
    c.session.poll_timeout_secs = 1;
    c.session.session_ttl_secs = 3;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_timeout_answers_exactly_one_reconnect_frame_after_the_timeout() {
    let config = config();
    let timeout = config.session.poll_timeout();
    let tick = config.timer.tick();
    let gw = Gateway::start(config).await;
    let last = gw.push(&json!({"to": "*", "data": "before"})).await.json();

    let began = tokio::time::Instant::now();
    let resp = get(gw.addr, &poll_path("alice", None), &[]).await;
    let took = began.elapsed();

    assert!(
        took >= timeout,
        "answered after {took:?}, before {timeout:?}"
    );
    assert!(
        took <= timeout + tick + SLACK,
        "answered after {took:?}, long past {timeout:?}"
    );
    let frames = poll_frames(&resp);
    assert_eq!(frames.len(), 1, "{frames:?}");
    let frame = frames[0].as_object().expect("a frame is an object");
    let keys: BTreeSet<&str> = frame.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        BTreeSet::from(["type", "reason", "retry_ms", "cursor"])
    );
    assert_eq!(frame["type"], "reconnect");
    assert_eq!(frame["reason"], "poll_timeout");
    assert!(frame["retry_ms"].is_u64(), "{frame:?}");
    // Nothing was published since: the cursor stands where the last push did.
    assert_eq!(frame["cursor"], last["cursor"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_again_with_the_timeout_cursor_returns_what_was_published_meanwhile() {
    let gw = Gateway::start(config()).await;
    let frames = poll_frames(&get(gw.addr, &poll_path("bob", None), &[]).await);
    assert_eq!(frames[0]["reason"], "poll_timeout", "{frames:?}");
    let cursor = cursor_of(&frames[0]);
    gw.push(&json!({"to": ["bob"], "data": "while away"})).await;
    let next = poll_frames(&get(gw.addr, &poll_path("bob", Some(&cursor)), &[]).await);
    assert_eq!(next[0]["type"], "recover", "{next:?}");
    assert_eq!(next[0]["complete"], true);
    assert_eq!(data_of(&next[1..]), [json!("while away")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_parked_poll_of_one_user_times_out_on_its_own_deadline() {
    let config = config();
    let timeout = config.session.poll_timeout();
    let gw = Gateway::start(config).await;
    let began = tokio::time::Instant::now();
    let first = spawn_get(gw.addr, poll_path("carol", None), vec![]);
    support::browser::wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    // The client's own pacing, not a wait for the gateway: the second poll
    // comes 500 ms after the first is parked, so the two deadlines differ.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second_began = tokio::time::Instant::now();
    let second = spawn_get(gw.addr, poll_path("carol", None), vec![]);
    support::browser::wait_for_connections(&gw, Transport::Poll, 2, WAIT).await;

    let frames = poll_frames(&first.await.unwrap());
    assert_eq!(frames[0]["reason"], "poll_timeout", "{frames:?}");
    let first_took = began.elapsed();
    let frames = poll_frames(&second.await.unwrap());
    assert_eq!(frames[0]["reason"], "poll_timeout", "{frames:?}");
    let second_took = second_began.elapsed();
    assert!(first_took >= timeout, "{first_took:?}");
    assert!(
        second_took >= timeout,
        "second answered after {second_took:?}"
    );
    assert!(first_took <= timeout + SLACK, "{first_took:?}");
    assert!(second_took <= timeout + SLACK, "{second_took:?}");
}
