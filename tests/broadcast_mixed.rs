//! One broadcast reaches every client of every transport exactly once:
//! 300 WebSockets, 150 parked long-polls and 40 SSE streams.

mod support;

use std::time::Duration;

use futures_util::future::join_all;
use pushgate::protocol::Transport;
use serde_json::json;
use support::Gateway;
use support::browser::{Live, Sse, poll_frames, poll_path, push_marker, spawn_get, sse_path};

const WAIT: Duration = Duration::from_secs(20);
const WS: usize = 300;
const POLLS: usize = 150;
const SSE: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_reaches_websockets_polls_and_sse_streams_exactly_once_each() {
    let mut c = support::config();
    // Long enough that no poll times out before the push on a slow machine.
    c.session.poll_timeout_secs = 30;
    c.session.session_ttl_secs = 60;
    let gw = Gateway::start(c).await;

    let sockets = join_all((0..WS).map(|i| {
        let gw = &gw;
        async move { gw.connect(&format!("ws{i}")).await }
    }))
    .await;
    let streams = join_all((0..SSE).map(|i| {
        let addr = gw.addr;
        async move {
            let sse = Sse::open(addr, &sse_path(&format!("sse{i}"), None), &[]).await;
            assert_eq!(sse.status, 200);
            sse
        }
    }))
    .await;
    let polls: Vec<_> = (0..POLLS)
        .map(|i| spawn_get(gw.addr, poll_path(&format!("poll{i}"), None), vec![]))
        .collect();
    support::ws::eventually(WAIT, "every client attached", || async {
        let r = gw.state.inspect();
        r.of(Transport::Ws) == WS && r.of(Transport::Poll) == POLLS && r.of(Transport::Sse) == SSE
    })
    .await;

    let resp = gw
        .push(&json!({"to": "*", "id": "everyone", "data": {"n": 1}}))
        .await;
    assert_eq!(resp.status, 202, "{resp:?}");
    let cursor = resp.json()["cursor"].clone();
    let want = json!({
        "type": "message", "id": "everyone", "cursor": cursor,
        "stream": "broadcast", "data": {"n": 1}
    });

    let answers = join_all(polls).await;
    for (i, answer) in answers.into_iter().enumerate() {
        let frames = poll_frames(&answer.expect("poll task"));
        assert_eq!(frames, std::slice::from_ref(&want), "poll{i}");
    }
    // Exactly once: a second copy would be queued before a marker
    // broadcast after it (the memory broker delivers in publish order).
    let marker = push_marker(&gw, json!("*")).await;
    let clients = sockets
        .into_iter()
        .map(|ws| Live::Ws(Box::new(ws)))
        .chain(streams.into_iter().map(|sse| Live::Sse(Box::new(sse))));
    let received = join_all(clients.map(|mut client| {
        let (want, marker) = (&want, &marker);
        async move {
            let frame = client.next_json(WAIT).await;
            assert_eq!(&frame, want);
            client.assert_quiet_until(marker, WAIT).await;
        }
    }))
    .await;
    assert_eq!(received.len(), WS + SSE);
    let delivered = support::ws::metric(
        &gw.metrics().await,
        r#"pushgate_messages_delivered_total{transport="poll"}"#,
    )
    .expect("delivered series");
    assert!(delivered >= POLLS as f64, "{delivered}");
}
