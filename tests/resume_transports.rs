//! Resuming with a cursor over each transport (WebSocket, long-poll, SSE):
//! a `recover` frame with `complete: true`, then exactly the missed
//! messages of the client's two streams in sequence order, then live ones
//! with no duplicate. SSE also resumes from the `Last-Event-ID` header.

mod support;

use std::time::Duration;

use pushgate::protocol::Transport;
use serde_json::{Value, json};
use support::Gateway;
use support::browser::{
    Live, RESUMABLE, Sse, SseItem, cursor_of, data_of, poll_frames, poll_path, resume, spawn_get,
    sse_path, wait_for_connections,
};

const WAIT: Duration = Duration::from_secs(10);

fn config() -> pushgate::config::Config {
    let mut c = support::config();
    c.session.poll_timeout_secs = 2;
    c.session.session_ttl_secs = 3;
    c
}

async fn push(gw: &Gateway, body: Value) -> Value {
    let resp = gw.push(&body).await;
    assert_eq!(resp.status, 202, "{resp:?}");
    resp.json()
}

/// The sequence number of a cursor (`<epoch>-<seq>`).
fn seq(cursor: &Value) -> u64 {
    let cursor = cursor.as_str().expect("a cursor is a string");
    let (epoch, seq) = cursor.split_once('-').expect("epoch-seq");
    assert_eq!(epoch.len(), 16, "{cursor}");
    seq.parse().expect("decimal seq")
}

/// Publishes the next live message for `user` and returns the frames the
/// client gets for it (for a poll: a new poll with `cursor`), checking
/// nothing else follows.
async fn live_frames(
    gw: &Gateway,
    transport: Transport,
    user: &str,
    client: Option<Live>,
    cursor: &str,
) -> Vec<Value> {
    let body = json!({"to": [user], "data": "live"});
    match (transport, client) {
        (Transport::Poll, _) => {
            let poll = spawn_get(gw.addr, poll_path(user, Some(cursor)), vec![]);
            wait_for_connections(gw, Transport::Poll, 1, WAIT).await;
            push(gw, body).await;
            poll_frames(&poll.await.expect("poll task"))
        }
        (_, Some(mut client)) => {
            push(gw, body).await;
            let frame = client.next_json(WAIT).await;
            client.assert_quiet(gw, json!([user]), WAIT).await;
            vec![frame]
        }
        (_, None) => unreachable!("ws and sse stay open"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_over_each_transport_returns_the_missed_messages_after_recover_then_live_ones() {
    let gw = Gateway::start(config()).await;
    for transport in RESUMABLE {
        let user = format!("user-{}", transport.as_str());
        let start = cursor_of(&push(&gw, json!({"to": "*", "data": "seen"})).await);
        for n in 1..=3 {
            let to = if n == 2 { json!([user]) } else { json!("*") };
            push(&gw, json!({"to": to, "data": n})).await;
        }
        let (frames, client) = resume(&gw, transport, &user, &start, 4, WAIT).await;
        assert_eq!(frames.len(), 4, "{transport:?}: {frames:?}");
        assert_eq!(frames[0]["type"], "recover", "{transport:?}");
        assert_eq!(frames[0]["complete"], true, "{transport:?}");
        assert!(frames[0]["cursor"].is_string(), "{transport:?}");
        assert!(frames[1..].iter().all(|f| f["type"] == "message"));
        assert_eq!(
            data_of(&frames[1..]),
            [json!(1), json!(2), json!(3)],
            "{transport:?}"
        );
        let last = cursor_of(&frames[3]);
        let live = live_frames(&gw, transport, &user, client, &last).await;
        assert_eq!(data_of(&live), [json!("live")], "{transport:?}: {live:?}");
        assert!(seq(&live[0]["cursor"]) > seq(&frames[3]["cursor"]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_interleaves_personal_and_broadcast_messages_in_sequence_order() {
    let gw = Gateway::start(config()).await;
    for transport in RESUMABLE {
        let user = format!("mixed-{}", transport.as_str());
        let start = cursor_of(&push(&gw, json!({"to": "*", "data": "seen"})).await);
        let script = [
            (json!("*"), "b1"),
            (json!([user]), "p2"),
            (json!(["someone-else"]), "x3"),
            (json!([user]), "p4"),
            (json!("*"), "b5"),
            (json!(["someone-else", user]), "p6"),
            (json!("*"), "b7"),
        ];
        for (to, data) in &script {
            push(&gw, json!({"to": to, "data": data})).await;
        }
        let (frames, _client) = resume(&gw, transport, &user, &start, 7, WAIT).await;
        assert_eq!(frames[0]["type"], "recover", "{transport:?}: {frames:?}");
        assert_eq!(frames[0]["complete"], true);
        let messages = &frames[1..];
        assert_eq!(
            data_of(messages),
            ["b1", "p2", "p4", "b5", "p6", "b7"].map(|s| json!(s)),
            "{transport:?}"
        );
        let streams: Vec<&str> = messages
            .iter()
            .map(|f| f["stream"].as_str().unwrap())
            .collect();
        assert_eq!(
            streams,
            [
                "broadcast",
                "user",
                "user",
                "broadcast",
                "user",
                "broadcast"
            ]
        );
        let seqs: Vec<u64> = messages.iter().map(|f| seq(&f["cursor"])).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_with_nothing_missed_sends_recover_complete_and_then_only_live_messages() {
    let gw = Gateway::start(config()).await;
    for transport in [Transport::Ws, Transport::Sse] {
        let user = format!("calm-{}", transport.as_str());
        let start = cursor_of(&push(&gw, json!({"to": "*", "data": "seen"})).await);
        let (frames, client) = resume(&gw, transport, &user, &start, 1, WAIT).await;
        assert_eq!(frames[0]["type"], "recover", "{transport:?}");
        assert_eq!(frames[0]["complete"], true);
        let live = live_frames(&gw, transport, &user, client, &start).await;
        assert_eq!(data_of(&live), [json!("live")], "{transport:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_resumes_from_the_last_event_id_header() {
    let gw = Gateway::start(config()).await;
    let mut first = Sse::open(gw.addr, &sse_path("erin", None), &[]).await;
    wait_for_connections(&gw, Transport::Sse, 1, WAIT).await;
    push(&gw, json!({"to": ["erin"], "data": "seen"})).await;
    let SseItem::Event {
        id: Some(last_id), ..
    } = first.next_event(WAIT).await
    else {
        panic!("the message event has an id")
    };
    drop(first);
    wait_for_connections(&gw, Transport::Sse, 0, WAIT).await;

    push(&gw, json!({"to": "*", "data": "missed 1"})).await;
    push(&gw, json!({"to": ["erin"], "data": "missed 2"})).await;
    let mut again = Sse::open(
        gw.addr,
        &sse_path("erin", None),
        &[("last-event-id", &last_id)],
    )
    .await;
    assert_eq!(again.status, 200);
    let recover = again.next_event(WAIT).await;
    let SseItem::Event { event, .. } = &recover else {
        unreachable!()
    };
    assert_eq!(event, "recover");
    assert_eq!(recover.json()["complete"], true);
    let mut got = Vec::new();
    for _ in 0..2 {
        let event = again.next_event(WAIT).await;
        let SseItem::Event {
            event: name, id, ..
        } = &event
        else {
            unreachable!()
        };
        assert_eq!(name, "message");
        let frame = event.json();
        assert_eq!(id.as_deref(), frame["cursor"].as_str());
        got.push(frame["data"].clone());
    }
    assert_eq!(got, [json!("missed 1"), json!("missed 2")]);
    let mut live = Live::Sse(Box::new(again));
    live.assert_quiet(&gw, json!(["erin"]), WAIT).await;
}

/// What `user` should receive of the seam test's script, in order.
fn seam_expected(user: &str, total: u64) -> Vec<Value> {
    (0..total)
        .filter(|i| match i % 4 {
            0 | 1 => true,
            2 => user == "seam-ws",
            _ => false,
        })
        .map(|i| json!(i))
        .collect()
}

/// Every message data after `start` that `transport` delivers to `user`,
/// up to the final `"end"` broadcast; recover frames must say complete.
async fn consume(gw: &Gateway, transport: Transport, user: &str, start: String) -> Vec<Value> {
    let mut got = Vec::new();
    match transport {
        Transport::Poll => {
            let mut cursor = start;
            // Each poll answers at once while messages wait; a whole
            // minute is far beyond any run.
            let limit = 6 * WAIT;
            let deadline = tokio::time::Instant::now() + limit;
            loop {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{user}: no end message within {limit:?}, got {got:?}"
                );
                let path = poll_path(user, Some(&cursor));
                let frames = poll_frames(&support::browser::get(gw.addr, &path, &[]).await);
                for frame in &frames {
                    match frame["type"].as_str() {
                        Some("message") if frame["data"] == "end" => return got,
                        Some("message") => got.push(frame["data"].clone()),
                        Some("recover") => assert_eq!(frame["complete"], true, "{frame}"),
                        _ => {}
                    }
                }
                cursor = cursor_of(frames.last().expect("a poll answer is never empty"));
            }
        }
        _ => {
            let (first, client) = resume(gw, transport, user, &start, 1, WAIT).await;
            assert_eq!(first[0]["type"], "recover", "{transport:?}");
            assert_eq!(first[0]["complete"], true, "{transport:?}");
            let mut client = client.expect("open");
            loop {
                let frame = client.next_json(WAIT).await;
                if frame["data"] == "end" {
                    client.assert_quiet(gw, json!([user]), WAIT).await;
                    return got;
                }
                got.push(frame["data"].clone());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_while_messages_are_published_leaves_no_gap_and_no_duplicate() {
    const TOTAL: u64 = 120;
    let gw = Gateway::start(config()).await;
    let start = cursor_of(&push(&gw, json!({"to": "*", "data": "start"})).await);
    let published = std::sync::atomic::AtomicU64::new(0);
    let publisher = async {
        for i in 0..TOTAL {
            let to = match i % 4 {
                0 => json!("*"),
                1 => json!(["seam-ws", "seam-poll", "seam-sse"]),
                2 => json!(["seam-ws"]),
                _ => json!(["someone-else"]),
            };
            push(&gw, json!({"to": to, "data": i})).await;
            published.store(i + 1, std::sync::atomic::Ordering::Relaxed);
        }
        push(&gw, json!({"to": "*", "data": "end"})).await;
    };
    let consumers = futures_util::future::join_all(RESUMABLE.map(|transport| {
        let (gw, start, published) = (&gw, start.clone(), &published);
        async move {
            // Join mid-stream, so the resume meets live publishing.
            let deadline = tokio::time::Instant::now() + WAIT;
            while published.load(std::sync::atomic::Ordering::Relaxed) < TOTAL / 4 {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{transport:?}: a quarter of the pushes not published within {WAIT:?}"
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let user = format!("seam-{}", transport.as_str());
            (transport, consume(gw, transport, &user, start).await)
        }
    }));
    let ((), results) = tokio::join!(publisher, consumers);
    for (transport, got) in results {
        let user = format!("seam-{}", transport.as_str());
        assert_eq!(got, seam_expected(&user, TOTAL), "{transport:?}");
    }
}
