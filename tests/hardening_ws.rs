//! The bad-input catalogue over WebSocket: frames a hostile or broken
//! client writes after a good handshake, each with the close code (or
//! answer) it must get. After every case the connection is released (the
//! gateway holds only the bystander) and the gateway still serves a normal
//! client (`Probe::still_serves`).

mod hardening_support;
mod support;

use hardening_support::{Probe, WAIT, hardened_config};
use serde_json::json;
use support::browser::push_marker;
use support::ws::{client_close, eventually, frame, opcode};
use tokio::io::AsyncWriteExt;

/// `max_client_frame_bytes` in the hardening config.
const MAX_FRAME: usize = 4096;

/// A well-formed masked frame with FIN set.
fn whole(op: u8, payload: &[u8]) -> Vec<u8> {
    frame(true, 0, op, true, payload)
}

/// A frame header claiming `len` payload bytes (64-bit form), then a few.
fn length_header(len: u64) -> Vec<u8> {
    let mut out = vec![0x80 | opcode::TEXT, 0x80 | 127];
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&[1, 2, 3, 4, b'a', b'b', b'c']);
    out
}

/// A message that never ends: a text frame without FIN, then continuation
/// frames without FIN, 20 KB in all (five times the limit).
fn fragmented_forever() -> Vec<u8> {
    let piece = vec![b'a'; 1000];
    let mut out = frame(false, 0, opcode::TEXT, true, &piece);
    for _ in 0..19 {
        out.extend(frame(false, 0, opcode::CONTINUATION, true, &piece));
    }
    out
}

/// How the gateway must answer a case.
#[derive(Debug, Clone, Copy)]
enum WsExpect {
    /// A close frame with one of these codes, then the TCP close.
    Close(&'static [u16]),
    /// This many `error` frames, and the connection stays open.
    ErrorFrames(usize),
    /// Anything but a crash: pongs, or a close; the gateway stays healthy.
    AnsweredOrClosed,
}

fn cases() -> Vec<(&'static str, Vec<u8>, WsExpect)> {
    use WsExpect::{AnsweredOrClosed, Close, ErrorFrames};
    // RFC 6455 section 7.1.7: a broken frame is answered with 1002 (and
    // bad UTF-8 with 1007) before the TCP close. The gateway used to drop
    // the TCP connection without a word: fixed in src/transport/websocket.rs.
    const PROTOCOL: WsExpect = Close(&[1002]);
    let ping_flood: Vec<u8> = (0..5000u32)
        .flat_map(|i| whole(opcode::PING, &i.to_be_bytes()))
        .collect();
    let text_flood: Vec<u8> = (0..2000)
        .flat_map(|_| whole(opcode::TEXT, b"hello"))
        .collect();
    let mut split_utf8 = frame(false, 0, opcode::TEXT, true, &[b'a', 0xc3]);
    split_utf8.extend(frame(true, 0, opcode::CONTINUATION, true, &[0xa9]));
    let mut text_inside_fragment = frame(false, 0, opcode::TEXT, true, b"start");
    text_inside_fragment.extend(whole(opcode::TEXT, b"another"));
    let mut after_close = client_close(1000, b"bye");
    after_close.extend(whole(opcode::TEXT, br#"{"type":"ping"}"#));
    vec![
        (
            "unmasked text frame",
            frame(true, 0, opcode::TEXT, false, b"hi"),
            PROTOCOL,
        ),
        (
            "message fragmented forever past the limit",
            fragmented_forever(),
            Close(&[1009]),
        ),
        (
            "single frame over the limit",
            whole(opcode::TEXT, &vec![b'a'; MAX_FRAME + 1]),
            Close(&[1009]),
        ),
        (
            "length header of 2^63",
            length_header(1 << 63),
            Close(&[1009]),
        ),
        (
            "length header of 2^64 - 1",
            length_header(u64::MAX),
            Close(&[1009]),
        ),
        (
            "16-bit length header of 65535, 10 bytes sent",
            {
                let mut f = vec![0x80 | opcode::TEXT, 0x80 | 126, 0xff, 0xff, 1, 2, 3, 4];
                f.extend_from_slice(b"0123456789");
                f
            },
            Close(&[1009]),
        ),
        (
            "binary frame where text is expected",
            whole(opcode::BINARY, &[0, 1, 2, 255]),
            ErrorFrames(1),
        ),
        (
            "binary frame at the limit",
            whole(opcode::BINARY, &vec![7; MAX_FRAME]),
            ErrorFrames(1),
        ),
        ("empty text frame", whole(opcode::TEXT, b""), ErrorFrames(1)),
        (
            "UTF-8 character split across fragments",
            split_utf8,
            ErrorFrames(1),
        ),
        (
            "invalid UTF-8 text",
            whole(opcode::TEXT, &[b'a', 0xff, 0xfe]),
            Close(&[1007]),
        ),
        (
            "close code 999 on the wire",
            client_close(999, b""),
            Close(&[1002]),
        ),
        (
            "close code 1005 on the wire",
            client_close(1005, b""),
            Close(&[1002]),
        ),
        (
            "close code 1006 on the wire",
            client_close(1006, b""),
            Close(&[1002]),
        ),
        (
            "close code 1015 on the wire",
            client_close(1015, b""),
            Close(&[1002]),
        ),
        (
            "close code 2999 (reserved)",
            client_close(2999, b""),
            Close(&[1002]),
        ),
        ("close code 5000", client_close(5000, b""), Close(&[1002])),
        (
            "close payload of one byte",
            whole(opcode::CLOSE, &[3]),
            PROTOCOL,
        ),
        (
            "close reason not UTF-8",
            client_close(1000, &[0xff, 0xfe]),
            Close(&[1007]),
        ),
        (
            "close code 3000 (registered)",
            client_close(3000, b"done"),
            Close(&[3000]),
        ),
        ("text after a close", after_close, Close(&[1000])),
        (
            "ping payload of 126 bytes",
            whole(opcode::PING, &[0; 126]),
            PROTOCOL,
        ),
        (
            "ping without FIN",
            frame(false, 0, opcode::PING, true, b"p"),
            PROTOCOL,
        ),
        (
            "RSV1 set without an extension",
            frame(true, 0x40, opcode::TEXT, true, b"hi"),
            PROTOCOL,
        ),
        ("reserved data opcode 0x3", whole(0x3, b"x"), PROTOCOL),
        ("reserved control opcode 0xB", whole(0xB, b"x"), PROTOCOL),
        (
            "continuation with no message started",
            whole(opcode::CONTINUATION, b"x"),
            PROTOCOL,
        ),
        (
            "new text frame inside a fragmented message",
            text_inside_fragment,
            PROTOCOL,
        ),
        (
            "HTTP request after the upgrade",
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            PROTOCOL,
        ),
        ("5000 pings in one write", ping_flood, AnsweredOrClosed),
        (
            "2000 text frames without reading",
            text_flood,
            AnsweredOrClosed,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_end_only_their_connection_and_the_gateway_keeps_serving() {
    let mut probe = Probe::start(hardened_config()).await;
    let cases = cases();
    for (i, (name, bytes, expect)) in cases.iter().enumerate() {
        let user = format!("vandal{i}");
        let mut raw = probe.gw.connect_raw(&user).await;
        // The server may close while this is still being written.
        let _ = raw.stream.write_all(bytes).await;
        match *expect {
            WsExpect::Close(codes) => {
                let frames = raw.frames_until_close(WAIT).await;
                let close = frames.last().filter(|f| f.opcode == opcode::CLOSE);
                let code = close.and_then(|f| f.close_code());
                assert!(
                    code.is_some_and(|c| codes.contains(&c)),
                    "{name}: closed with {code:?}, want one of {codes:?}: {frames:?}"
                );
                let others = frames.iter().filter(|f| f.opcode != opcode::CLOSE);
                assert!(
                    others
                        .clone()
                        .all(|f| f.opcode == opcode::PING || f.opcode == opcode::PONG),
                    "{name}: unexpected frames: {frames:?}"
                );
            }
            WsExpect::ErrorFrames(n) => {
                for _ in 0..n {
                    let frame = raw.next_frame(WAIT).await.expect("an answer");
                    assert_eq!(frame.opcode, opcode::TEXT, "{name}: {frame:?}");
                    assert_eq!(frame.json()["type"], "error", "{name}: {frame:?}");
                }
                // Still open: it answers a ping, then gets a broadcast.
                raw.send(opcode::TEXT, br#"{"type":"ping"}"#).await;
                let pong = raw.next_frame(WAIT).await.expect("an answer");
                assert_eq!(pong.json(), json!({"type": "pong"}), "{name}");
                raw.send(opcode::CLOSE, &1000u16.to_be_bytes()).await;
                raw.frames_until_close(WAIT).await;
            }
            WsExpect::AnsweredOrClosed => {
                let frames = raw.frames_until_close_or_marker(&probe.gw, &user).await;
                assert!(
                    frames.iter().all(|f| matches!(
                        f.opcode,
                        opcode::PONG | opcode::PING | opcode::CLOSE | opcode::TEXT
                    )),
                    "{name}: {frames:?}"
                );
            }
        }
        drop(raw);
        eventually(WAIT, name, || async {
            probe.gw.state.inspect().connections == 1
        })
        .await;
        probe.still_serves(name).await;
    }
    println!(
        "catalogue WebSocket frames: {} cases, 0 differ",
        cases.len()
    );
    assert_eq!(probe.checks(), cases.len());
}

/// Reading a flood's answers: frames until a close, EOF, or a marker
/// pushed to the client's user after the flood was written, so no fixed
/// quiet window ends the reading (the marker is not among the frames).
trait MarkerRead {
    async fn frames_until_close_or_marker(
        &mut self,
        gw: &support::Gateway,
        user: &str,
    ) -> Vec<support::ws::RawFrame>;
}

impl MarkerRead for support::ws::RawWs {
    async fn frames_until_close_or_marker(
        &mut self,
        gw: &support::Gateway,
        user: &str,
    ) -> Vec<support::ws::RawFrame> {
        let marker = push_marker(gw, json!([user])).await;
        let mut frames = Vec::new();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "neither the marker nor a close within {WAIT:?}: {} frames",
                frames.len()
            );
            let Some(frame) = self.next_frame(WAIT).await else {
                return frames;
            };
            let is_marker = frame.opcode == opcode::TEXT
                && serde_json::from_slice::<serde_json::Value>(&frame.payload)
                    .is_ok_and(|f| f["type"] == "message" && f["data"] == marker);
            if is_marker {
                return frames;
            }
            let last = frame.opcode == opcode::CLOSE;
            frames.push(frame);
            if last {
                return frames;
            }
        }
    }
}
