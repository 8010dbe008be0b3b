//! What a WebSocket client sends: `{"type":"ping"}` gets `{"type":"pong"}`,
//! anything else an error frame, and nothing a client sends breaks its own
//! connection's deliveries or anyone else's. Any client frame counts as
//! activity.

mod support;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use pushgate::config::Config;
use serde_json::{Value, json};
use support::ws::{eventually, opcode};
use support::{Gateway, Ws, config, next_json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const WAIT: Duration = Duration::from_secs(10);

/// Pushes a broadcast and reads `ws` up to it; every frame before it must
/// be one of `allowed` types.
async fn still_delivers(gw: &Gateway, ws: &mut Ws, data: &str, allowed: &[&str]) {
    assert_eq!(gw.push(&json!({"to": "*", "data": data})).await.status, 202);
    loop {
        let frame = next_json(ws, WAIT).await;
        if frame["type"] == "message" {
            assert_eq!(frame["data"], data);
            return;
        }
        assert!(
            allowed.contains(&frame["type"].as_str().unwrap_or("")),
            "unexpected frame before the message: {frame}"
        );
    }
}

fn assert_error_frame(frame: &Value) {
    assert_eq!(frame["type"], "error", "{frame}");
    assert!(frame["code"].is_string(), "{frame}");
    assert!(frame["message"].is_string(), "{frame}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_frame_is_answered_with_pong_frame() {
    let gw = Gateway::default().await;
    let mut ws = gw.connect("alice").await;
    for _ in 0..3 {
        ws.send(Message::text(r#"{"type":"ping"}"#))
            .await
            .expect("sent");
        assert_eq!(next_json(&mut ws, WAIT).await, json!({"type": "pong"}));
    }
    still_delivers(&gw, &mut ws, "after pings", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_text_frames_get_an_error_frame_and_the_connection_stays_open() {
    let gw = Gateway::default().await;
    let mut ws = gw.connect("alice").await;
    let mut bob = gw.connect("bob").await;
    for text in [
        "hello",
        "",
        "{}",
        "[]",
        "null",
        r#"{"type":"pong"}"#,
        r#"{"type":"subscribe","channel":"x"}"#,
        r#"{"type":"ping""#,
        r#"{"type":["ping"]}"#,
        "\u{0}\u{1}\u{7f}",
    ] {
        ws.send(Message::text(text)).await.expect("sent");
        assert_error_frame(&next_json(&mut ws, WAIT).await);
    }
    still_delivers(&gw, &mut ws, "still open", &[]).await;
    assert_eq!(next_json(&mut bob, WAIT).await["data"], "still open");
    ws.send(Message::text(r#"{"type":"ping"}"#))
        .await
        .expect("sent");
    assert_eq!(next_json(&mut ws, WAIT).await["type"], "pong");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_frames_get_an_error_frame_and_the_connection_stays_open() {
    let gw = Gateway::default().await;
    let mut ws = gw.connect("alice").await;
    for payload in [vec![], vec![0u8, 1, 2, 255], br#"{"type":"ping"}"#.to_vec()] {
        ws.send(Message::binary(payload)).await.expect("sent");
        assert_error_frame(&next_json(&mut ws, WAIT).await);
    }
    still_delivers(&gw, &mut ws, "after binary", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_ping_is_answered_with_a_pong_carrying_its_payload() {
    let gw = Gateway::default().await;
    let mut raw = gw.connect_raw("alice").await;
    raw.send(opcode::PING, b"are you there").await;
    let frame = raw.next_frame(WAIT).await.expect("an answer");
    assert_eq!(frame.opcode, opcode::PONG, "{frame:?}");
    assert_eq!(frame.payload, b"are you there");
    // An unsolicited pong needs no answer and breaks nothing.
    raw.send(opcode::PONG, b"").await;
    raw.send(opcode::TEXT, br#"{"type":"ping"}"#).await;
    let frame = raw.next_frame(WAIT).await.expect("an answer");
    assert_eq!(frame.json(), json!({"type": "pong"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_close_is_answered_with_a_close_and_the_connection_released() {
    let gw = Gateway::default().await;
    let mut raw = gw.connect_raw("alice").await;
    let mut payload = 1000u16.to_be_bytes().to_vec();
    payload.extend_from_slice(b"bye");
    raw.send(opcode::CLOSE, &payload).await;
    let frames = raw.frames_until_close(WAIT).await;
    let last = frames.last().expect("the server answers the close");
    assert_eq!(last.opcode, opcode::CLOSE, "{frames:?}");
    assert_eq!(last.close_code(), Some(1000), "{frames:?}");
    assert_eq!(raw.next_frame(WAIT).await, None, "then TCP closes");
    eventually(WAIT, "connection released", || async {
        gw.state.inspect().connections == 0
    })
    .await;

    // The same through tungstenite: close() completes the handshake.
    let mut ws = gw.connect("bob").await;
    ws.close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "done".into(),
    }))
    .await
    .expect("close sent");
    let answer = tokio::time::timeout(WAIT, ws.next())
        .await
        .expect("answered in time");
    assert!(
        matches!(answer, Some(Ok(Message::Close(_)))),
        "close answered with a close: {answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_client_bytes_end_only_that_connection() {
    let gw = Gateway::default().await;
    let mut bystander = gw.connect("bystander").await;
    let cases: [(&str, Vec<u8>); 4] = [
        (
            "invalid UTF-8 text",
            support::ws::client_frame(opcode::TEXT, &[0xff, 0xfe, b'a']),
        ),
        ("unmasked frame", vec![0x81, 0x02, b'h', b'i']),
        (
            "reserved opcode",
            support::ws::client_frame(0x3, b"what is this"),
        ),
        ("plain garbage", b"GET / HTTP/1.1\r\n\r\n".to_vec()),
    ];
    for (name, bytes) in cases {
        let mut raw = gw.connect_raw("vandal").await;
        raw.send_raw(&bytes).await;
        // The server ends that connection (with a close frame or not).
        let frames = raw.frames_until_close(WAIT).await;
        assert!(
            frames
                .iter()
                .all(|f| f.opcode == opcode::CLOSE || f.opcode == opcode::PING),
            "{name}: {frames:?}"
        );
        eventually(WAIT, name, || async { gw.state.inspect().connections == 1 }).await;
        still_delivers(&gw, &mut bystander, name, &[]).await;
    }
}

/// Pings every second, idle after two.
fn short_timeouts() -> Config {
    let mut c = config();
    c.session.ping_interval_secs = 1;
    c.session.idle_timeout_secs = 2;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_client_frame_counts_as_activity_past_idle_timeout() {
    let gw = Gateway::start(short_timeouts()).await;
    let kinds = [
        ("text ping", Message::text(r#"{"type":"ping"}"#)),
        ("other text", Message::text("hello")),
        ("ws ping", Message::Ping(b"p".to_vec().into())),
        ("ws pong", Message::Pong(b"p".to_vec().into())),
    ];
    let mut clients = Vec::new();
    for (name, _) in &kinds {
        clients.push(gw.connect(&name.replace(' ', "_")).await);
    }
    // None of them reads for 4 s (twice idle_timeout); each only writes,
    // every 500 ms. The sleep is the clients' pacing, not a wait for the
    // gateway: whether each connection lived is shown by its marker below,
    // read under a deadline, with a `close` failing the test.
    for _ in 0..8 {
        for (ws, (_, msg)) in clients.iter_mut().zip(&kinds) {
            ws.send(msg.clone()).await.expect("sent");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(gw.state.inspect().connections, kinds.len());
    for (ws, (name, _)) in clients.iter_mut().zip(&kinds) {
        assert_eq!(gw.push(&json!({"to": "*", "data": name})).await.status, 202);
        // Pongs and error frames answer what was sent; no `close`.
        loop {
            let frame = next_json(ws, WAIT).await;
            match frame["type"].as_str() {
                Some("pong" | "error") => continue,
                Some("message") if frame["data"] == *name => break,
                Some("message") => continue,
                _ => panic!("{name}: unexpected {frame}"),
            }
        }
    }
}
