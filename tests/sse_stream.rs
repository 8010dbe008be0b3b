//! Server-sent events: an uncached, unbuffered `text/event-stream` whose
//! events are named for the frame type and carry the cursor as `id:`, with
//! comment pings every `ping_interval_secs`.

mod support;

use std::time::Duration;

use pushgate::protocol::Transport;
use serde_json::json;
use support::Gateway;
use support::browser::{Sse, SseItem, sse_path, wait_for_connections};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_response_is_an_uncached_unbuffered_event_stream() {
    let gw = Gateway::default().await;
    let sse = Sse::open(gw.addr, &sse_path("alice", None), &[]).await;
    assert_eq!(sse.status, 200);
    let content_type = sse.header("content-type").unwrap_or("");
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type:?}"
    );
    assert_eq!(sse.header("cache-control"), Some("no-cache"));
    assert_eq!(sse.header("x-accel-buffering"), Some("no"));
    wait_for_connections(&gw, Transport::Sse, 1, WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_events_are_named_for_the_frame_type_and_carry_the_cursor_as_id() {
    let gw = Gateway::default().await;
    let mut sse = Sse::open(gw.addr, &sse_path("bob", None), &[]).await;
    wait_for_connections(&gw, Transport::Sse, 1, WAIT).await;
    let broadcast = gw
        .push(&json!({"to": "*", "id": "b1", "data": {"k": "v"}}))
        .await
        .json();
    gw.push(&json!({"to": ["bob"], "id": "p2", "data": [1, 2]}))
        .await;
    for (id, stream, data) in [
        ("b1", "broadcast", json!({"k": "v"})),
        ("p2", "user", json!([1, 2])),
    ] {
        let event = sse.next_event(WAIT).await;
        let SseItem::Event {
            event: name,
            id: event_id,
            ..
        } = &event
        else {
            unreachable!()
        };
        let frame = event.json();
        assert_eq!(name, "message", "{event:?}");
        assert_eq!(frame["type"], "message");
        assert_eq!(frame["id"], id);
        assert_eq!(frame["stream"], stream);
        assert_eq!(frame["data"], data);
        assert_eq!(event_id.as_deref(), frame["cursor"].as_str(), "{event:?}");
        if id == "b1" {
            assert_eq!(frame["cursor"], broadcast["cursor"]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_sends_comment_pings_every_ping_interval_even_past_the_idle_timeout() {
    let mut c = support::config();
    c.session.ping_interval_secs = 1;
    c.session.idle_timeout_secs = 2;
    let gw = Gateway::start(c).await;
    let mut sse = Sse::open(gw.addr, &sse_path("carol", None), &[]).await;
    let began = tokio::time::Instant::now();
    // Read until the fourth ping rather than for a fixed window: at one a
    // second it comes about 4 s in, twice the idle timeout.
    let deadline = began + WAIT;
    let mut pings = 0;
    while pings < 4 {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match sse.next_item(left).await {
            Some(SseItem::Comment(text)) => {
                assert_eq!(text, "ping");
                pings += 1;
            }
            Some(SseItem::Retry(_)) => {}
            other => panic!("after {pings} pings: unexpected {other:?}"),
        }
    }
    // Never early: a ping per wheel tick would bring four in well under a
    // second.
    let took = began.elapsed();
    assert!(
        took >= Duration::from_secs(3),
        "4 pings {took:?} after opening, ping_interval 1 s"
    );
    // The stream outlived the idle timeout (an SSE client cannot send
    // anything): it is still counted, and a push is its next event.
    assert_eq!(gw.state.inspect().of(Transport::Sse), 1);
    gw.push(&json!({"to": ["carol"], "data": "still here"}))
        .await;
    assert_eq!(sse.next_json(WAIT).await["data"], "still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_with_no_cursor_gets_only_messages_published_after_it_opened() {
    let gw = Gateway::default().await;
    gw.push(&json!({"to": "*", "data": "old"})).await;
    let mut sse = Sse::open(gw.addr, &sse_path("dave", None), &[]).await;
    wait_for_connections(&gw, Transport::Sse, 1, WAIT).await;
    gw.push(&json!({"to": ["dave"], "data": "new"})).await;
    let frame = sse.next_json(WAIT).await;
    assert_eq!(frame["type"], "message");
    assert_eq!(frame["data"], "new");
}
