//! Draining with parked polls and open SSE streams: every poll is answered
//! with `reconnect` (reason `draining`), every SSE stream gets the
//! `reconnect` event and ends, new polls are refused, and `run` returns.

mod support;

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pushgate::protocol::Transport;
use serde_json::json;
use support::Gateway;
use support::browser::{Sse, SseItem, poll_frames, poll_path, spawn_get, sse_path};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_answers_parked_polls_and_ends_sse_streams_with_reconnect() {
    let mut c = support::config();
    // Far longer than the test: only the drain can answer these polls.
    c.session.poll_timeout_secs = 30;
    c.session.session_ttl_secs = 60;
    c.server.drain_timeout_secs = 5;
    let mut gw = Gateway::start(c).await;
    let position = gw.push(&json!({"to": "*", "data": "before"})).await.json()["cursor"].clone();

    let polls: Vec<_> = ["alice", "bob", "bob", "carol"]
        .iter()
        .map(|user| spawn_get(gw.addr, poll_path(user, None), vec![]))
        .collect();
    let mut streams = Vec::new();
    for user in ["dave", "erin"] {
        streams.push(Sse::open(gw.addr, &sse_path(user, None), &[]).await);
    }
    support::ws::eventually(WAIT, "polls parked and streams open", || async {
        let r = gw.state.inspect();
        r.of(Transport::Poll) == 4 && r.of(Transport::Sse) == 2
    })
    .await;

    let began = tokio::time::Instant::now();
    let run = gw.begin_stop();

    for poll in join_all(polls).await {
        let frames = poll_frames(&poll.expect("poll task"));
        assert_eq!(frames.len(), 1, "{frames:?}");
        assert_eq!(frames[0]["type"], "reconnect");
        assert_eq!(frames[0]["reason"], "draining");
        assert!(frames[0]["retry_ms"].is_u64(), "{frames:?}");
        assert_eq!(frames[0]["cursor"], position, "nothing published since");
    }
    for mut sse in streams {
        let event = sse.next_event(WAIT).await;
        let SseItem::Event {
            event: name, id, ..
        } = &event
        else {
            unreachable!()
        };
        assert_eq!(name, "reconnect");
        let frame = event.json();
        assert_eq!(frame["reason"], "draining");
        assert_eq!(id.as_deref(), frame["cursor"].as_str());
        // Then the stream ends (only comments could come before its end).
        loop {
            match sse.next_item(WAIT).await {
                None => break,
                Some(SseItem::Comment(_)) => continue,
                Some(other) => panic!("after reconnect: {other:?}"),
            }
        }
    }
    // Answered by the drain, not by a poll timeout or the drain timeout.
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );

    // A poll arriving while draining is refused, not parked (or finds the
    // listener already closed, if the drain has finished).
    let late = format!("http://{}{}", gw.addr, poll_path("late", None));
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let late = tokio::time::timeout(WAIT, client.get(late.parse().unwrap()))
        .await
        .expect("answered or refused in time");
    if let Ok(resp) = late {
        assert_eq!(resp.status(), 503, "{resp:?}");
    }
    tokio::time::timeout(WAIT, run)
        .await
        .expect("run returned in time")
        .expect("no panic");
    assert_eq!(gw.state.inspect().connections, 0);
}
