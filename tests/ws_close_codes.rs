//! Every WebSocket close code of PROTOCOL.md, each preceded by its `close`
//! (or `reconnect`) frame: 4001 idle, 4002 replaced, 4004 token expired,
//! 1009 message too big, 1001 on drain. (4003 slow has its own file, so
//! its eviction counter is not shared with other tests.)

mod support;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use pushgate::config::Config;
use pushgate::protocol::UserId;
use serde_json::json;
use support::ws::{eventually, metric, opcode};
use support::{Gateway, config, next_json, read_until_close, token};
use tokio_tungstenite::tungstenite::Message;

/// Generous upper bound for anything that should happen "soon".
const WAIT: Duration = Duration::from_secs(10);

/// Pings every second, idle after two: fast idle tests.
fn short_timeouts() -> Config {
    let mut c = config();
    c.session.ping_interval_secs = 1;
    c.session.idle_timeout_secs = 2;
    c
}

/// The eviction counters are process-wide (one metrics recorder per test
/// binary): the tests that evict for idleness take turns, so one reading
/// the idle counter sees only its own eviction.
static IDLE_SERIES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn evictions(gw: &Gateway, reason: &str) -> f64 {
    let series = format!("pushgate_evictions_total{{reason=\"{reason}\"}}");
    metric(&gw.metrics().await, &series).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_never_reads_gets_close_idle_then_4001() {
    let _series = IDLE_SERIES.lock().await;
    let gw = Gateway::start(short_timeouts()).await;
    let before = evictions(&gw, "idle").await;
    let mut ws = gw.connect("idler").await;
    // Not polling the client: no pong goes out, so nothing counts as
    // activity. Past idle_timeout (2 s) the server gives up.
    eventually(WAIT, "the idle eviction", || async {
        evictions(&gw, "idle").await == before + 1.0
    })
    .await;
    let (code, frames) = read_until_close(&mut ws, WAIT).await;
    assert_eq!(code, Some(4001), "frames: {frames:?}");
    assert_eq!(frames, [json!({"type": "close", "reason": "idle"})]);
    eventually(WAIT, "idle connection released", || async {
        gw.state.inspect().connections == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_client_that_reads_but_never_pongs_gets_pings_then_close_idle_then_4001() {
    let _series = IDLE_SERIES.lock().await;
    let gw = Gateway::start(short_timeouts()).await;
    let mut raw = gw.connect_raw("mute").await;
    let frames = raw.frames_until_close(WAIT).await;
    let (last, before) = frames.split_last().expect("at least a close frame");
    assert_eq!(last.opcode, opcode::CLOSE, "{frames:?}");
    assert_eq!(last.close_code(), Some(4001), "{frames:?}");
    let (close, pings) = before.split_last().expect("a close text frame first");
    assert_eq!(close.opcode, opcode::TEXT, "{frames:?}");
    assert_eq!(close.json(), json!({"type": "close", "reason": "idle"}));
    assert!(
        !pings.is_empty() && pings.iter().all(|f| f.opcode == opcode::PING),
        "pings (ping_interval 1 s < idle_timeout 2 s) before the close: {frames:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_keeps_reading_sees_pings_and_outlives_idle_timeout() {
    let gw = Gateway::start(short_timeouts()).await;
    let mut ws = gw.connect("reader").await;
    // Reading makes tungstenite answer each ping with a pong. Read until
    // the fourth ping rather than for a fixed window: at one a second it
    // comes about 4 s in, twice the idle timeout.
    let began = tokio::time::Instant::now();
    let mut pings = 0;
    while pings < 4 {
        let msg = tokio::time::timeout_at(began + WAIT, ws.next())
            .await
            .unwrap_or_else(|_| panic!("{pings} pings in {WAIT:?}, ping_interval 1 s"));
        match msg {
            Some(Ok(Message::Ping(_))) => pings += 1,
            other => panic!("only pings while idle, got {other:?} after {pings} pings"),
        }
    }
    let took = began.elapsed();
    assert!(
        took >= Duration::from_secs(3),
        "4 pings {took:?} after connecting, ping_interval 1 s"
    );
    assert_eq!(
        gw.push(&json!({"to": "*", "data": "still here"}))
            .await
            .status,
        202
    );
    let frame = next_json(&mut ws, WAIT).await;
    assert_eq!(frame["data"], "still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oldest_connection_is_replaced_with_4002_when_a_user_opens_one_too_many() {
    let mut c = config();
    c.session.max_connections_per_user = 2;
    let gw = Gateway::start(c).await;
    let before = evictions(&gw, "replaced").await;
    let mut oldest = gw.connect("alice").await;
    let mut middle = gw.connect("alice").await;
    let mut bob = gw.connect("bob").await;
    let mut newest = gw.connect("alice").await;
    let (code, frames) = read_until_close(&mut oldest, WAIT).await;
    assert_eq!(code, Some(4002), "frames: {frames:?}");
    assert_eq!(frames, [json!({"type": "close", "reason": "replaced"})]);

    assert_eq!(
        gw.push(&json!({"to": ["alice"], "data": "a"})).await.status,
        202
    );
    assert_eq!(
        gw.push(&json!({"to": "*", "data": "all"})).await.status,
        202
    );
    for ws in [&mut middle, &mut newest] {
        assert_eq!(next_json(ws, WAIT).await["data"], "a");
        assert_eq!(next_json(ws, WAIT).await["data"], "all");
    }
    assert_eq!(next_json(&mut bob, WAIT).await["data"], "all");
    let alice = UserId::parse("alice").expect("valid");
    eventually(WAIT, "alice down to her 2 newest connections", || async {
        gw.state.user(&alice).is_some_and(|u| u.connections == 2)
    })
    .await;
    assert_eq!(evictions(&gw, "replaced").await - before, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_expiring_while_connected_closes_with_token_expired_then_4004() {
    let gw = Gateway::default().await;
    let url = gw.ws_url(&format!("token={}", token("brief", 2)));
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("token still valid at connect");
    // Keep reading (pongs go out), so only the token can end it.
    let (code, frames) = read_until_close(&mut ws, WAIT).await;
    assert_eq!(code, Some(4004), "frames: {frames:?}");
    assert_eq!(
        frames,
        [json!({"type": "close", "reason": "token_expired"})]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_frame_over_max_client_frame_bytes_is_closed_with_1009() {
    let mut c = config();
    c.limits.max_client_frame_bytes = 1024;
    let gw = Gateway::start(c).await;
    let mut ws = gw.connect("chatty").await;
    // Exactly the limit is allowed (answered, as any unknown text is).
    ws.send(Message::text("x".repeat(1024)))
        .await
        .expect("sent");
    assert_eq!(next_json(&mut ws, WAIT).await["type"], "error");
    ws.send(Message::text("x".repeat(1025)))
        .await
        .expect("sent");
    let (code, _) = read_until_close(&mut ws, WAIT).await;
    assert_eq!(code, Some(1009));
    eventually(WAIT, "oversized client released", || async {
        gw.state.inspect().connections == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_or_fragmented_client_message_over_the_limit_is_closed_with_1009() {
    let mut c = config();
    c.limits.max_client_frame_bytes = 1024;
    let gw = Gateway::start(c).await;

    let mut ws = gw.connect("binary").await;
    ws.send(Message::binary(vec![7u8; 4096]))
        .await
        .expect("sent");
    let (code, _) = read_until_close(&mut ws, WAIT).await;
    assert_eq!(code, Some(1009), "binary");

    // Two fragments of 600 bytes: each under the limit, the message over.
    let mut raw = gw.connect_raw("fragments").await;
    let mut first = support::ws::client_frame(opcode::TEXT, &[b'a'; 600]);
    first[0] &= 0x7f; // FIN off
    raw.send_raw(&first).await;
    raw.send_raw(&support::ws::client_frame(
        opcode::CONTINUATION,
        &[b'b'; 600],
    ))
    .await;
    let frames = raw.frames_until_close(WAIT).await;
    let last = frames.last().expect("a close frame");
    assert_eq!(
        (last.opcode, last.close_code()),
        (opcode::CLOSE, Some(1009)),
        "{frames:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_sends_reconnect_draining_with_retry_ms_and_cursor_then_1001() {
    let mut c = config();
    c.server.drain_timeout_secs = 30;
    let mut gw = Gateway::start(c).await;
    let addr = gw.addr;
    let mut ws = gw.connect("alice").await;
    assert_eq!(gw.push(&json!({"to": "*", "data": 1})).await.status, 202);
    let seen = next_json(&mut ws, WAIT).await;

    let run = gw.begin_stop();
    let (code, frames) = read_until_close(&mut ws, WAIT).await;
    assert_eq!(code, Some(1001), "frames: {frames:?}");
    assert_eq!(frames.len(), 1, "{frames:?}");
    let reconnect = &frames[0];
    assert_eq!(reconnect["type"], "reconnect");
    assert_eq!(reconnect["reason"], "draining");
    assert!(reconnect["retry_ms"].is_u64(), "{reconnect}");
    // Coming back with this cursor must resume right after what was seen.
    assert_eq!(reconnect["cursor"], seen["cursor"], "{reconnect}");

    // Draining: no new connection is accepted.
    let url = format!("ws://{addr}/ws?token={}", token("late", 60));
    assert!(tokio_tungstenite::connect_async(url).await.is_err());

    // Finish the close handshake; run() then returns long before the 30 s
    // drain timeout.
    while tokio::time::timeout(WAIT, ws.next())
        .await
        .expect("server ends the connection")
        .is_some()
    {}
    tokio::time::timeout(WAIT, run)
        .await
        .expect("run() returns once every connection left")
        .expect("no panic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_stops_within_drain_timeout_even_if_a_client_never_answers() {
    let mut c = config();
    c.server.drain_timeout_secs = 1;
    let mut gw = Gateway::start(c).await;
    let mut raw = gw.connect_raw("deaf").await;
    let run = gw.begin_stop();
    tokio::time::timeout(Duration::from_secs(1) + WAIT, run)
        .await
        .expect("run() returns within drain_timeout (plus slack)")
        .expect("no panic");
    // What was sent before the cut is still there to read.
    let frames = raw.frames_until_close(WAIT).await;
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert_eq!(frames[0].json()["reason"], "draining");
    assert_eq!(frames[1].close_code(), Some(1001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_consumer_that_reads_again_within_the_close_grace_still_gets_slow_and_4003() {
    // Short pings: the connection's timer entry fires every second, well
    // within the close grace a slow consumer has to take its close.
    let mut c = config();
    c.session.ping_interval_secs = 1;
    c.session.idle_timeout_secs = 30;
    c.limits.outbound_queue = 4;
    c.limits.max_push_bytes = 512 * 1024;
    let gw = Gateway::start(c).await;
    let mut slow = gw.connect("slowpoke").await;
    let slow_id = UserId::parse("slowpoke").expect("valid");
    let pad = "x".repeat(256 * 1024);
    let mut pushed = 0;
    while gw
        .state
        .user(&slow_id)
        .is_some_and(|u| u.closing < u.connections)
    {
        assert!(pushed < 400, "never evicted as slow");
        let resp = gw
            .push(&json!({"to": "*", "data": {"n": pushed, "pad": pad}}))
            .await;
        assert_eq!(resp.status, 202);
        pushed += 1;
    }
    // A consumer that is slow, not gone: it reads again a little later,
    // past a ping interval but well within pushgate's 5 s close grace.
    // This sleep is the slow reader's own pause, not a wait for the
    // gateway: what follows reads until the close under a deadline.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (code, frames) = read_until_close(&mut slow, WAIT).await;
    let types: Vec<_> = frames.iter().map(|f| f["type"].clone()).collect();
    assert_eq!(
        frames
            .last()
            .map(|f| (f["type"].clone(), f["reason"].clone())),
        Some((json!("close"), json!("slow"))),
        "frame types: {types:?}"
    );
    assert_eq!(code, Some(4003));
}
