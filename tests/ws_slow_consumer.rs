//! A WebSocket client that stops reading while large pushes flow is closed
//! as a slow consumer (4003) once its outbound queue passes
//! `[limits] outbound_queue`; everyone else still gets every message.
//!
//! One test per file: `pushgate_evictions_total` is process-wide, so the
//! eviction it counts here is the only one.

mod support;

use std::time::Duration;

use futures_util::StreamExt;
use pushgate::protocol::UserId;
use serde_json::json;
use support::ws::metric;
use support::{Gateway, config, read_until_close};
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(20);
/// Big enough that a few dozen fill the kernel's socket buffers.
const PAYLOAD_BYTES: usize = 256 * 1024;
/// Far more than the socket buffers can absorb.
const MAX_PUSHES: usize = 400;
/// Pushed after the eviction, to show the others are unaffected.
const AFTER: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_consumer_is_closed_with_4003_after_every_earlier_frame_and_others_get_everything() {
    let mut c = config();
    c.limits.outbound_queue = 4;
    c.limits.max_push_bytes = 2 * PAYLOAD_BYTES;
    let gw = Gateway::start(c).await;
    let slow_before = metric(
        &gw.metrics().await,
        r#"pushgate_evictions_total{reason="slow"}"#,
    )
    .unwrap_or(0.0);

    let mut slow = gw.connect("slowpoke").await;
    let fast = gw.connect("speedy").await;
    // The fast reader reports each message number; the pusher waits for it
    // so the fast client never has more than one frame queued.
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut fast = fast;
        while let Some(msg) = fast.next().await {
            match msg.expect("fast client reads cleanly") {
                Message::Text(text) => {
                    let frame: serde_json::Value = serde_json::from_str(&text).expect("JSON");
                    assert_eq!(frame["type"], "message", "fast client: {}", &text[..80]);
                    if seen_tx
                        .send(frame["data"]["n"].as_u64().expect("n"))
                        .is_err()
                    {
                        return fast;
                    }
                }
                Message::Ping(_) | Message::Pong(_) => {}
                other => panic!("fast client got {other:?}"),
            }
        }
        panic!("fast client was disconnected");
    });

    let slow_id = UserId::parse("slowpoke").expect("valid");
    let pad = "x".repeat(PAYLOAD_BYTES - 100);
    let mut pushed = 0;
    let mut evicted_at = None;
    while pushed < MAX_PUSHES && evicted_at.is_none_or(|at| pushed < at + AFTER) {
        let resp = gw
            .push(&json!({"to": "*", "data": {"n": pushed, "pad": pad}}))
            .await;
        assert_eq!(resp.status, 202, "push {pushed}: {:?}", resp.body);
        let got = tokio::time::timeout(WAIT, seen_rx.recv())
            .await
            .expect("fast client keeps up")
            .expect("reader alive");
        assert_eq!(got, pushed as u64, "fast client gets messages in order");
        pushed += 1;
        let closing = gw
            .state
            .user(&slow_id)
            .is_none_or(|u| u.closing == u.connections);
        if closing && evicted_at.is_none() {
            evicted_at = Some(pushed);
        }
    }
    let evicted_at = evicted_at.expect("slow consumer evicted before the push limit");
    drop(seen_rx);

    // Now read: every frame queued before the overflow, in order, then
    // the close frame and 4003.
    let (code, frames) = read_until_close(&mut slow, WAIT).await;
    assert_eq!(code, Some(4003));
    let (close, messages) = frames.split_last().expect("a close frame");
    assert_eq!(close, &json!({"type": "close", "reason": "slow"}));
    let numbers: Vec<u64> = messages
        .iter()
        .map(|m| {
            assert_eq!(m["type"], "message");
            m["data"]["n"].as_u64().expect("n")
        })
        .collect();
    assert!(!numbers.is_empty(), "some frames were already on their way");
    assert!(
        numbers.len() < evicted_at,
        "{} < {evicted_at}",
        numbers.len()
    );
    let want: Vec<u64> = (0..numbers.len() as u64).collect();
    assert_eq!(numbers, want, "a contiguous prefix, nothing skipped");

    let slow_after = metric(
        &gw.metrics().await,
        r#"pushgate_evictions_total{reason="slow"}"#,
    )
    .expect("eviction series present");
    assert_eq!(slow_after - slow_before, 1.0);
    // Answer the close; the slow connection is then released.
    while tokio::time::timeout(WAIT, slow.next())
        .await
        .expect("server ends the connection")
        .is_some()
    {}
    support::ws::eventually(WAIT, "only the fast client left", || async {
        gw.state.inspect().connections == 1
    })
    .await;
    reader.abort();
}
