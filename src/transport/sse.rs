//! Server-sent events: `GET /sse?token=…`.
//!
//! `text/event-stream`; each frame is an event whose `event:` is the frame
//! type, `data:` the JSON frame and `id:` its cursor, so the browser's
//! automatic `Last-Event-ID` resumes. Comment pings come from the
//! connection's timer entry.
//!
//! On plain TCP the front door serves the stream on the raw socket
//! ([`serve_raw`]): its task writes a chunk per batch of events, and holds
//! no buffer between them. Over TLS (or on a connection hyper already
//! serves) the response body is the connection's one task: hyper polls it,
//! and dropping it (the client left) releases the connection.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::{StreamExt, stream};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame as BodyFrame;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response};
use tokio::net::TcpStream;
use tracing::debug;

use super::cors;
use super::open;
use super::pipelined::Pipelined;
use crate::gateway::{self, Gateway, Held};
use crate::http::Body;
use crate::http::head::Head;
use crate::http::view::RequestView;
use crate::http::wire::{self, Length};
use crate::protocol::Transport;
use crate::protocol::frame::{Frame, sse_comment};
use crate::registry::{Conn, DirectWrite, Outgoing};

/// Milliseconds a browser waits before reconnecting a dropped stream (the
/// stream's `retry:` field).
pub(crate) const SSE_RETRY_MS: u32 = 1000;

/// Answers `GET /sse` with an open event stream, or a JSON error.
pub(crate) async fn stream<B>(gw: &Arc<Gateway>, req: Request<B>) -> Response<Body> {
    let origin = cors::origin_of(req.headers()).map(str::to_owned);
    let mut resp = match open(gw, &req).await {
        Ok(held) => events(held),
        Err(err) => err.into_response(),
    };
    cors::decorate(&gw.origins, origin.as_deref(), resp.headers_mut());
    resp
}

/// Serves one `GET /sse` on the raw socket (the front door's): a JSON
/// error, or the stream until it ends. Returns whether the connection
/// stays open for the next request (after an error answer, or a stream
/// that ended with its `close` or `reconnect` event, with whatever the
/// client sent meanwhile kept).
pub(crate) async fn serve_raw(
    gw: &Arc<Gateway>,
    tcp: &Arc<TcpStream>,
    head: Box<Head>,
    pipelined: &mut Pipelined,
) -> bool {
    let keep_alive = head.keep_alive;
    let origin = cors::origin_of(head.fields()).map(str::to_owned);
    let opened = open(gw, &*head).await;
    drop(head);
    let mut resp = match opened {
        Ok(held) => {
            let first = stream_start(gw, origin.as_deref(), keep_alive);
            drop(origin);
            let ended = write_events(gw, tcp, held.conn(), first, pipelined).await;
            let conn_id = held.conn().id;
            // Releases the connection and forgets its direct socket (as a
            // panic unwinding through here would).
            drop(held);
            debug!(conn_id, transport = "sse", "connection closed");
            return ended && keep_alive && !pipelined.is_overflowed();
        }
        Err(err) => err.into_response(),
    };
    cors::decorate(&gw.origins, origin.as_deref(), resp.headers_mut());
    let bytes = wire::encode(resp, keep_alive).await;
    wire::write_all(tcp, &bytes).await.is_ok() && keep_alive
}

/// The first bytes of a stream on the raw socket: its head and the retry
/// field. Built here, out of [`serve_raw`], so the stream's future keeps no
/// room for the response's parts while it is open (they were 224 bytes of
/// every open stream's task: README, Performance).
fn stream_start(gw: &Gateway, origin: Option<&str>, keep_alive: bool) -> BytesMut {
    let mut resp = Response::new(());
    stream_headers(resp.headers_mut());
    cors::decorate(&gw.origins, origin, resp.headers_mut());
    let (parts, ()) = resp.into_parts();
    let mut first = wire::response_head(&parts, Length::Chunked, keep_alive);
    wire::put_chunk(&mut first, &retry_field());
    first
}

/// The stream on the raw socket: `first` (the head and the retry field),
/// then events. Once the head is out, the fan-out writes each event to
/// the socket itself while the task is idle; the task writes what was
/// queued meanwhile, a chunk per batch. Returns true once an end event
/// and the last chunk are written; false if the client left or the
/// connection was killed first.
async fn write_events(
    gw: &Gateway,
    tcp: &Arc<TcpStream>,
    conn: &Conn,
    first: BytesMut,
    pipelined: &mut Pipelined,
) -> bool {
    let mut out = first;
    let mut direct = Some(Arc::new(SseSocket(Arc::clone(tcp))));
    loop {
        // Every write is raced against `kill`, so a client that stops
        // reading cannot hold its task past the close grace.
        tokio::select! {
            biased;
            () = conn.killed() => return false,
            written = wire::write_all(tcp, &out) => if written.is_err() {
                return false;
            },
        }
        // The client took the last chunk: its sign of life (an SSE client
        // sends nothing once its request is in; the connection's timer
        // counts a ping the fan-out wrote directly the same way).
        conn.touch(gw.now_ms());
        gateway::fault_point(conn);
        if let Some(socket) = direct.take() {
            conn.outbound.set_direct(socket);
        }
        conn.outbound.done_writing();
        // Nothing is held between writes: a stream waits with no buffer.
        out = BytesMut::new();
        let mut batch = VecDeque::new();
        let mut events = BytesMut::new();
        loop {
            tokio::select! {
                biased;
                () = conn.killed() => return false,
                () = pipelined.closed(tcp) => return false,
                () = conn.outbound.ready() => {}
            }
            conn.outbound.take(&mut batch);
            let ended = encode_chunks(&mut batch, &mut events, &mut out);
            batch.clear();
            if ended {
                out.extend_from_slice(wire::LAST_CHUNK);
                return tokio::select! {
                    biased;
                    () = conn.killed() => false,
                    written = wire::write_all(tcp, &out) => written.is_ok(),
                };
            }
            if !out.is_empty() {
                break;
            }
        }
    }
}

/// Appends what `batch` holds to `out` as chunks: events are gathered
/// into one chunk (in `events`, left empty), and the rest of a chunk the
/// fan-out wrote in part goes out as it is, in order. Returns whether it
/// met an end (`close` or `reconnect`).
fn encode_chunks(
    batch: &mut VecDeque<Outgoing>,
    events: &mut BytesMut,
    out: &mut BytesMut,
) -> bool {
    let mut ended = false;
    while let Some(item) = batch.pop_front() {
        if let Outgoing::Raw(bytes) = item {
            wire::put_chunk(out, events);
            events.clear();
            out.extend_from_slice(&bytes);
        } else if encode_event(item, events) {
            ended = true;
            break;
        }
    }
    wire::put_chunk(out, events);
    events.clear();
    ended
}

/// An SSE comment ping as one chunk.
static PING_CHUNK: &[u8] = b"8\r\n: ping\n\n\r\n";

/// An event stream's plain-TCP socket, shared by its task and the
/// fan-out: each frame goes out as one chunk.
#[derive(Debug)]
struct SseSocket(Arc<TcpStream>);

impl DirectWrite for SseSocket {
    fn try_frame(&self, frame: &Frame) -> io::Result<Option<Bytes>> {
        wire::try_send(&self.0, frame.sse_chunk())
    }

    fn try_ping(&self) -> io::Result<Option<Bytes>> {
        wire::try_send(&self.0, &Bytes::from_static(PING_CHUNK))
    }
}

async fn open(gw: &Arc<Gateway>, req: &impl RequestView) -> Result<Held, open::ClientError> {
    let client = open::admit(gw, req, Transport::Sse).await?;
    let attached = open::join_live(gw, client, Transport::Sse).await?;
    Ok(Held::new(Arc::clone(gw), attached.conn))
}

/// The stream's state: the connection, released when the body is dropped
/// (with `held`).
struct Events {
    held: Held,
    batch: VecDeque<Outgoing>,
    ended: bool,
}

impl Drop for Events {
    fn drop(&mut self) {
        debug!(
            conn_id = self.held.conn().id,
            transport = "sse",
            "connection closed"
        );
    }
}

fn events(held: Held) -> Response<Body> {
    let first = retry_field();
    let state = Events {
        held,
        batch: VecDeque::new(),
        ended: false,
    };
    let body = stream::once(async move { Ok(BodyFrame::data(first)) })
        .chain(stream::unfold(state, next_chunk));
    let mut resp = Response::new(StreamBody::new(body).boxed_unsync());
    stream_headers(resp.headers_mut());
    resp
}

/// The headers of an event stream.
fn stream_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
}

/// The first bytes of every stream: how long the browser waits to
/// reconnect.
fn retry_field() -> Bytes {
    Bytes::from(format!("retry: {SSE_RETRY_MS}\n\n"))
}

/// Appends the events of everything in `batch` to `out`, up to and
/// including an end (`close` or `reconnect`); returns whether it met one.
fn encode_events(batch: &mut VecDeque<Outgoing>, out: &mut BytesMut) -> bool {
    while let Some(item) = batch.pop_front() {
        if encode_event(item, out) {
            return true;
        }
    }
    false
}

/// Appends `item` as an event to `out`; true if it ends the stream.
fn encode_event(item: Outgoing, out: &mut BytesMut) -> bool {
    match item {
        Outgoing::Frame(frame) => out.extend_from_slice(&frame.sse()),
        Outgoing::Ping => out.extend_from_slice(&sse_comment("ping")),
        // Only a direct socket leaves raw bytes (already framed for it).
        Outgoing::Raw(bytes) => out.extend_from_slice(&bytes),
        Outgoing::Close(reason) => {
            out.extend_from_slice(&Frame::close(reason).sse());
            return true;
        }
        Outgoing::Reconnect(frame) => {
            out.extend_from_slice(&frame.sse());
            return true;
        }
    }
    false
}

/// The next chunk of events: everything queued, encoded; `None` ends the
/// stream after a `close` or `reconnect` frame, or when killed.
async fn next_chunk(mut state: Events) -> Option<(Result<BodyFrame<Bytes>, Infallible>, Events)> {
    if state.ended {
        return None;
    }
    // hyper asks for the next chunk only once the last one was taken by the
    // connection: that is the client's sign of life. Without it the
    // connection's entry would see an SSE client idle forever after
    // `idle_timeout` and re-arm (and ping) on every tick.
    let conn = state.held.conn();
    conn.touch(state.held.gateway().now_ms());
    gateway::fault_point(conn);
    loop {
        tokio::select! {
            biased;
            () = conn.killed() => return None,
            () = conn.outbound.ready() => {}
        }
        conn.outbound.take(&mut state.batch);
        let mut chunk = BytesMut::new();
        state.ended = encode_events(&mut state.batch, &mut chunk);
        state.batch.clear();
        if !chunk.is_empty() {
            return Some((Ok(BodyFrame::data(chunk.freeze())), state));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_of_a_chunk_written_in_part_is_not_chunked_again() {
        let first = Frame::error("a", "first");
        let second = Frame::error("b", "second");
        let whole = first.sse_chunk().clone();
        let mut batch = VecDeque::from([
            Outgoing::Raw(whole.slice(4..)),
            Outgoing::Frame(second.clone()),
            Outgoing::Ping,
        ]);
        let (mut events, mut out) = (BytesMut::new(), BytesMut::new());
        assert!(!encode_chunks(&mut batch, &mut events, &mut out));
        let both = [&second.sse()[..], &sse_comment("ping")[..]].concat();
        let want = [&whole[4..], &wire::chunk(&both)[..]].concat();
        assert_eq!(&out[..], &want[..]);
        assert!(events.is_empty());
    }

    #[test]
    fn the_ping_chunk_is_one_chunk_of_a_comment() {
        assert_eq!(PING_CHUNK, &wire::chunk(&sse_comment("ping"))[..]);
    }
}
