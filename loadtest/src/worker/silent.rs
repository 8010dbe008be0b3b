//! Silent WebSocket clients for the eviction scenario: a raw handshake,
//! then not one byte sent (no pong, no close reply). They do read, to see
//! when the gateway gives up on them: the `close` frame, the WebSocket
//! Close (its code), and the end of the TCP stream.

use anyhow::{Context as _, bail};
use base64::Engine as _;
use tokio::time::Instant;

use super::Ctx;
use super::flow::{self, CONNECT_TIMEOUT};
use super::tally::Opened;
use crate::frames::{self, Inbound};
use crate::http::{self, HttpConn};
use crate::target;

/// Runs silent connection `i`.
pub(super) async fn run(ctx: &Ctx, i: usize) {
    let opened = {
        let _permit = ctx.gate.acquire().await;
        let started = (Instant::now(), frames::now_us());
        let opened = tokio::time::timeout(CONNECT_TIMEOUT, open(ctx, i)).await;
        (started, opened)
    };
    let ((started, request_us), opened) = opened;
    let mut conn = match opened {
        Ok(Ok(conn)) => conn,
        Ok(Err(err)) => return flow::first_attempt(ctx, i, Err(format!("{err:#}"))),
        Err(_) => return flow::first_attempt(ctx, i, Err("handshake timed out".into())),
    };
    let open_us = frames::now_us();
    flow::first_attempt(ctx, i, Ok(started.elapsed()));
    let mut close_us = None;
    loop {
        let frames_done = match read_frames(conn.buffered()) {
            Ok(found) => found,
            Err(err) => {
                ctx.tally.borrow_mut().error(&format!("{err:#}"));
                break;
            }
        };
        for found in frames_done {
            close_us.get_or_insert_with(frames::now_us);
            ctx.tally.borrow_mut().closed(&found);
        }
        tokio::select! {
            read = conn.fill() => if !matches!(read, Ok(n) if n > 0) { break },
            () = tokio::time::sleep_until(ctx.deadline) => return,
        }
    }
    let idle_ms = ctx.spec.idle_timeout_ms;
    let opened = Opened {
        request_us,
        open_us,
    };
    ctx.tally
        .borrow_mut()
        .silent_ended(opened, idle_ms, close_us, frames::now_us());
}

async fn open(ctx: &Ctx, i: usize) -> anyhow::Result<HttpConn> {
    let node = &ctx.nodes[ctx.home(i)];
    let stream = target::connect(node.addr, ctx.source(i))
        .await
        .context("connect")?;
    let mut conn = HttpConn::new(stream);
    let mut rng = flow::rng_for(ctx, i);
    let key_bytes: Vec<u8> = (0..2).flat_map(|_| rng.next_u64().to_le_bytes()).collect();
    let key = base64::engine::general_purpose::STANDARD.encode(key_bytes);
    let path = ctx.with_channels(i, node.target.path_for(&ctx.user(i), None));
    let request = http::request(
        "GET",
        &path,
        &node.target.host_header(),
        &[
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", &key),
            ("Sec-WebSocket-Version", "13"),
        ],
        b"",
    );
    conn.send(&request).await.context("send handshake")?;
    let head = conn.read_head().await?;
    if head.status != 101 {
        bail!("handshake answered {}", head.status);
    }
    Ok(conn)
}

/// Takes every complete frame out of `buf`; returns what ends the
/// connection: a `close` frame's reason, or `ws:<code>` for a Close.
/// Pings and messages are read and ignored.
fn read_frames(buf: &mut Vec<u8>) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some((opcode, payload, len)) = next_frame(&buf[at..])? {
        match opcode {
            0x1 => {
                if let Inbound::Close { reason } = frames::parse(payload) {
                    found.push(reason.into_owned());
                }
            }
            0x8 => {
                let code = match payload {
                    [hi, lo, ..] => u16::from_be_bytes([*hi, *lo]).to_string(),
                    _ => "none".to_owned(),
                };
                found.push(format!("ws:{code}"));
            }
            _ => {}
        }
        at += len;
    }
    buf.drain(..at);
    Ok(found)
}

/// One server frame at the start of `bytes`: opcode, payload, total length.
fn next_frame(bytes: &[u8]) -> anyhow::Result<Option<(u8, &[u8], usize)>> {
    let [b0, b1, rest @ ..] = bytes else {
        return Ok(None);
    };
    if b1 & 0x80 != 0 {
        bail!("server frame is masked");
    }
    let (len, header) = match b1 & 0x7f {
        126 if rest.len() >= 2 => (u64::from(u16::from_be_bytes([rest[0], rest[1]])), 4),
        127 if rest.len() >= 8 => {
            let mut n = [0; 8];
            n.copy_from_slice(&rest[..8]);
            (u64::from_be_bytes(n), 10)
        }
        126 | 127 => return Ok(None),
        n => (u64::from(n), 2),
    };
    let total = header + usize::try_from(len).context("frame too long")?;
    if bytes.len() < total {
        return Ok(None);
    }
    Ok(Some((b0 & 0x0f, &bytes[header..total], total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_frames_and_codes_are_found_and_pings_skipped() {
        let text = br#"{"type":"close","reason":"idle"}"#;
        let mut buf = vec![0x89, 0x00, 0x81, text.len() as u8];
        buf.extend_from_slice(text);
        buf.extend_from_slice(&[0x88, 0x06, 0x0f, 0xa1, b'i', b'd', b'l', b'e']);
        buf.extend_from_slice(&[0x81, 0x7e, 0x01]);
        assert_eq!(read_frames(&mut buf).unwrap(), vec!["idle", "ws:4001"]);
        assert_eq!(buf, [0x81, 0x7e, 0x01]);
    }

    #[test]
    fn long_lengths_wait_for_their_bytes() {
        let mut buf = vec![0x82, 0x7e, 0x01, 0x00];
        buf.extend(std::iter::repeat_n(0, 255));
        assert!(next_frame(&buf).unwrap().is_none());
        buf.push(0);
        assert_eq!(next_frame(&buf).unwrap().map(|f| f.2), Some(260));
    }
}
