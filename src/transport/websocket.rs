//! WebSocket: `GET /ws?token=…[&cursor=…]`.
//!
//! The handshake is checked (version, key, origin, token, capacity) before
//! anything is upgraded. Then one task per connection both reads the
//! client's frames and writes what its outbound queue holds; there is no
//! separate writer task and no per-connection tokio timer (pings and idle
//! eviction come from the wheel, see `session::expiry`).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};
use tracing::{debug, trace, warn};

use super::client::{self, ClientError};
use crate::api::Body;
use crate::api::error::ApiError;
use crate::bus::{Open, Opened};
use crate::gateway::Gateway;
use crate::session::{Conn, Outgoing, Transport};
use crate::transport::frame::Frame;

/// Why a request is not a WebSocket handshake we accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// Missing `Upgrade: websocket` or `Connection: upgrade`.
    #[error("not a websocket upgrade request")]
    NotUpgrade,
    /// `Sec-WebSocket-Version` is not 13.
    #[error("unsupported websocket version (only 13)")]
    Version,
    /// `Sec-WebSocket-Key` is missing or not 16 base64-encoded bytes.
    #[error("missing or malformed sec-websocket-key")]
    Key,
}

/// Checks the upgrade headers (RFC 6455 §4.2.1); returns the accept key.
pub fn check_handshake(headers: &HeaderMap) -> Result<String, HandshakeError> {
    let has_token = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    if !has_token(header::UPGRADE, "websocket") || !has_token(header::CONNECTION, "upgrade") {
        return Err(HandshakeError::NotUpgrade);
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .map(HeaderValue::as_bytes)
        != Some(b"13")
    {
        return Err(HandshakeError::Version);
    }
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or(HandshakeError::Key)?
        .as_bytes();
    use base64::Engine as _;
    match base64::engine::general_purpose::STANDARD.decode(key) {
        Ok(raw) if raw.len() == 16 => {
            Ok(tokio_tungstenite::tungstenite::handshake::derive_accept_key(key))
        }
        _ => Err(HandshakeError::Key),
    }
}

/// Answers `GET /ws`: refuses with a JSON error, or switches protocols and
/// spawns the connection's task.
pub async fn upgrade(gw: &Arc<Gateway>, mut req: Request<Incoming>) -> Response<Body> {
    let accept = match check_handshake(req.headers()) {
        Ok(accept) => accept,
        Err(HandshakeError::Version) => {
            let mut resp =
                ApiError::BadRequest(HandshakeError::Version.to_string()).into_body_response();
            *resp.status_mut() = StatusCode::UPGRADE_REQUIRED;
            resp.headers_mut().insert(
                header::SEC_WEBSOCKET_VERSION,
                HeaderValue::from_static("13"),
            );
            return resp;
        }
        Err(err) => return ApiError::BadRequest(err.to_string()).into_body_response(),
    };
    let client = match client::admit(gw, &req, Transport::Ws) {
        Ok(client) => client,
        Err(err) => return err.into_response(),
    };
    let opened = gw
        .bus
        .open(Open {
            user: client.user,
            transport: Transport::Ws,
            expires_at: client.expires_at,
            cursor: client.cursor,
            now_ms: gw.now_ms(),
        })
        .await;
    let attached = match opened {
        Ok(Opened::Attached(attached)) => attached,
        Ok(Opened::Ready(_)) => unreachable!("only long-polls are answered at once"),
        Err(_) => return ClientError::AtCapacity.into_response(),
    };
    let conn = attached.conn;
    gw.arm_connection(&conn);
    debug!(user_id = %conn.user, conn_id = conn.id, transport = "ws", "connection opened");
    let on_upgrade = hyper::upgrade::on(&mut req);
    let gw = Arc::clone(gw);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let io = TokioIo::new(upgraded);
                let ws =
                    WebSocketStream::from_raw_socket(io, Role::Server, Some(gw.websocket_config()))
                        .await;
                serve(&gw, &conn, ws).await;
            }
            Err(err) => debug!(conn_id = conn.id, error = %err, "upgrade failed"),
        }
        let _ = gw.release(&conn);
        debug!(user_id = %conn.user, conn_id = conn.id, transport = "ws", "connection closed");
    });
    let mut resp = Response::new(crate::api::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = resp.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    resp
}

/// How the connection's loop ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// We queued and sent a close: wait for the client's.
    Closing,
    /// The peer went away, broke the protocol, or we were killed.
    Gone,
}

/// The connection's one task: write what is queued, read what arrives.
///
/// Invariant: every write is raced against `kill`, so a peer that stops
/// reading cannot hold its task (and its memory) past the close grace.
pub async fn serve<S>(gw: &Gateway, conn: &Conn, mut ws: WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut batch = VecDeque::new();
    let end = loop {
        tokio::select! {
            biased;
            () = conn.killed() => break End::Gone,
            () = conn.outbound.ready() => {
                conn.outbound.take(&mut batch);
                let written = tokio::select! {
                    biased;
                    () = conn.killed() => Err(End::Gone),
                    written = write_batch(conn, &mut ws, &mut batch) => written,
                };
                if let Err(end) = written {
                    break end;
                }
            }
            read = ws.next() => {
                // Answering may write (a close reply, a 1009 close): race
                // it against `kill` too.
                let handled = tokio::select! {
                    biased;
                    () = conn.killed() => Err(End::Gone),
                    handled = on_read(gw, conn, &mut ws, read) => handled,
                };
                if let Err(end) = handled {
                    break end;
                }
            }
        }
    };
    if end == End::Closing {
        // Read until the client answers our close (or the grace runs out).
        loop {
            tokio::select! {
                biased;
                () = conn.killed() => break,
                read = ws.next() => if !matches!(read, Some(Ok(_))) { break },
            }
        }
    }
}

/// Writes one batch and flushes; `Err` when the connection is over.
async fn write_batch<S>(
    conn: &Conn,
    ws: &mut WebSocketStream<S>,
    batch: &mut VecDeque<Outgoing>,
) -> Result<(), End>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let gone = |err: WsError| {
        trace!(conn_id = conn.id, error = %err, "write failed");
        End::Gone
    };
    while let Some(item) = batch.pop_front() {
        match item {
            Outgoing::Frame(frame) => ws.feed(text(&frame)).await.map_err(gone)?,
            Outgoing::Ping => ws.feed(Message::Ping(Bytes::new())).await.map_err(gone)?,
            Outgoing::Close(reason) => {
                debug!(
                    conn_id = conn.id,
                    reason = reason.as_str(),
                    "closing connection"
                );
                ws.feed(text(&Frame::close(reason))).await.map_err(gone)?;
                let code = CloseCode::from(reason.ws_close_code());
                return close(ws, code, reason.as_str()).await;
            }
            Outgoing::Reconnect(frame) => {
                ws.feed(text(&frame)).await.map_err(gone)?;
                return close(ws, CloseCode::Away, "reconnect").await;
            }
        }
    }
    ws.flush().await.map_err(gone)
}

async fn close<S>(
    ws: &mut WebSocketStream<S>,
    code: CloseCode,
    reason: &'static str,
) -> Result<(), End>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let frame = CloseFrame {
        code,
        reason: Utf8Bytes::from_static(reason),
    };
    match ws.send(Message::Close(Some(frame))).await {
        Ok(()) => Err(End::Closing),
        Err(_) => Err(End::Gone),
    }
}

/// Handles one read; `Err` when the connection is over.
async fn on_read<S>(
    gw: &Gateway,
    conn: &Conn,
    ws: &mut WebSocketStream<S>,
    read: Option<Result<Message, WsError>>,
) -> Result<(), End>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let message = match read {
        Some(Ok(message)) => message,
        Some(Err(WsError::Capacity(err))) => {
            debug!(conn_id = conn.id, error = %err, "client frame too big");
            return close(ws, CloseCode::Size, "message too big").await;
        }
        Some(Err(err)) => {
            // RFC 6455 section 7.1.7: a connection failed for bad data
            // should be told why with a close frame before it goes.
            return match violation_close_code(&err) {
                Some(code) => {
                    debug!(conn_id = conn.id, error = %err, "client broke the protocol");
                    close(ws, code, "protocol error").await
                }
                None => {
                    trace!(conn_id = conn.id, error = %err, "read failed");
                    Err(End::Gone)
                }
            };
        }
        None => return Err(End::Gone),
    };
    conn.touch(gw.now_ms());
    let reply = match message {
        Message::Text(text) if is_client_ping(&text) => Some(Frame::pong()),
        Message::Text(_) => Some(Frame::error(
            "unsupported",
            "the only client frame is {\"type\":\"ping\"}",
        )),
        Message::Binary(_) => Some(Frame::error(
            "unsupported",
            "binary frames are not supported",
        )),
        Message::Close(_) => {
            // tungstenite queued the close reply; send it before going
            // (RFC 6455 §5.5.1: the endpoint answers with a Close).
            let _ = ws.flush().await;
            return Err(End::Gone);
        }
        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => None,
    };
    if let Some(reply) = reply {
        // Answers go through the queue, so they stay behind queued frames
        // and count against the same limit.
        if conn.outbound.push_frame(&reply) == crate::session::Pushed::Overflowed {
            warn!(
                conn_id = conn.id,
                "client flooded frames faster than it read answers"
            );
        }
    }
    Ok(())
}

/// The close code for a read error that is the client's fault: 1007 for
/// text (or a close reason) that is not UTF-8, 1002 for a broken frame.
/// `None` for errors that leave nobody to tell (a reset, I/O).
fn violation_close_code(err: &WsError) -> Option<CloseCode> {
    use tokio_tungstenite::tungstenite::error::ProtocolError as P;
    match err {
        WsError::Utf8(_) => Some(CloseCode::Invalid),
        WsError::Protocol(
            P::NonZeroReservedBits
            | P::UnmaskedFrameFromClient
            | P::FragmentedControlFrame
            | P::ControlFrameTooBig
            | P::UnknownControlFrameType(_)
            | P::UnknownDataFrameType(_)
            | P::UnexpectedContinueFrame
            | P::ExpectedFragment(_)
            | P::InvalidOpcode(_)
            | P::InvalidCloseSequence,
        ) => Some(CloseCode::Protocol),
        _ => None,
    }
}

fn is_client_ping(text: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        #[serde(borrow, rename = "type")]
        kind: &'a str,
    }
    serde_json::from_str::<Typed<'_>>(text).is_ok_and(|t| t.kind == "ping")
}

/// A frame as a WebSocket text message. Frames are UTF-8 by construction.
fn text(frame: &Frame) -> Message {
    Message::Text(frame.text())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    const GOOD: &[(&str, &str)] = &[
        ("upgrade", "websocket"),
        ("connection", "keep-alive, Upgrade"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn handshake_accepts_rfc_example_and_derives_its_accept_key() {
        assert_eq!(
            check_handshake(&headers(GOOD)),
            Ok("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".to_string())
        );
    }

    #[test]
    fn handshake_refuses_each_missing_or_bad_header() {
        let cases: &[(&str, Option<&'static str>, HandshakeError)] = &[
            ("upgrade", None, HandshakeError::NotUpgrade),
            ("upgrade", Some("h2c"), HandshakeError::NotUpgrade),
            ("connection", Some("keep-alive"), HandshakeError::NotUpgrade),
            ("sec-websocket-version", None, HandshakeError::Version),
            ("sec-websocket-version", Some("8"), HandshakeError::Version),
            ("sec-websocket-key", None, HandshakeError::Key),
            ("sec-websocket-key", Some("short"), HandshakeError::Key),
            (
                "sec-websocket-key",
                Some("dGhlIHNhbXBsZSBub25jZSEh"),
                HandshakeError::Key,
            ),
        ];
        for (name, value, want) in cases {
            let mut h = headers(GOOD);
            h.remove(*name);
            if let Some(v) = value {
                h.insert(*name, HeaderValue::from_static(v));
            }
            assert_eq!(check_handshake(&h).as_ref(), Err(want), "{name}: {value:?}");
        }
    }

    #[test]
    fn client_faults_get_1002_or_1007_and_the_rest_no_close() {
        use tokio_tungstenite::tungstenite::error::ProtocolError as P;
        let cases = [
            (WsError::Utf8("bad".into()), Some(CloseCode::Invalid)),
            (P::UnmaskedFrameFromClient.into(), Some(CloseCode::Protocol)),
            (P::NonZeroReservedBits.into(), Some(CloseCode::Protocol)),
            (P::ControlFrameTooBig.into(), Some(CloseCode::Protocol)),
            (P::InvalidCloseSequence.into(), Some(CloseCode::Protocol)),
            (P::UnknownDataFrameType(3).into(), Some(CloseCode::Protocol)),
            (P::ResetWithoutClosingHandshake.into(), None),
            (WsError::ConnectionClosed, None),
            (
                WsError::Io(std::io::ErrorKind::ConnectionReset.into()),
                None,
            ),
        ];
        for (err, want) in cases {
            assert_eq!(violation_close_code(&err), want, "{err}");
        }
    }

    #[test]
    fn only_a_ping_object_is_a_client_ping() {
        assert!(is_client_ping(r#"{"type":"ping"}"#));
        assert!(is_client_ping(r#" {"type" : "ping", "x": 1} "#));
        for other in [
            r#"{"type":"pong"}"#,
            "ping",
            "{}",
            "[]",
            r#"{"type":1}"#,
            "",
        ] {
            assert!(!is_client_ping(other), "{other}");
        }
    }
}
