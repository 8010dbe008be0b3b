//! Server-sent events: `GET /sse?token=…`.
//!
//! `text/event-stream`; each frame is an event whose `event:` is the frame
//! type, `data:` the JSON frame and `id:` its cursor, so the browser's
//! automatic `Last-Event-ID` resumes. Comment pings come from the
//! connection's timer entry. The response body is the connection's one
//! task: hyper polls it, and dropping it (the client left) releases the
//! connection.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::{StreamExt, stream};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame as BodyFrame;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response};
use tracing::debug;

use super::client;
use super::cors;
use crate::api::Body;
use crate::bus::{Open, Opened};
use crate::gateway::Gateway;
use crate::session::{Conn, Outgoing, Transport};
use crate::transport::frame::{Frame, sse_comment};

/// Milliseconds a browser waits before reconnecting a dropped stream (the
/// stream's `retry:` field).
pub const SSE_RETRY_MS: u32 = 1000;

/// Answers `GET /sse` with an open event stream, or a JSON error.
pub async fn stream<B>(gw: &Arc<Gateway>, req: Request<B>) -> Response<Body> {
    let origin = cors::origin_of(req.headers()).map(str::to_owned);
    let mut resp = match open(gw, &req).await {
        Ok(conn) => events(Arc::clone(gw), conn),
        Err(err) => err.into_response(),
    };
    cors::decorate(&gw.origins, origin.as_deref(), resp.headers_mut());
    resp
}

async fn open<B>(gw: &Arc<Gateway>, req: &Request<B>) -> Result<Arc<Conn>, client::ClientError> {
    let client = client::admit(gw, req, Transport::Sse)?;
    let opened = gw
        .bus
        .open(Open {
            user: client.user,
            transport: Transport::Sse,
            expires_at: client.expires_at,
            cursor: client.cursor,
            now_ms: gw.now_ms(),
        })
        .await
        .map_err(|_| client::ClientError::AtCapacity)?;
    let Opened::Attached(attached) = opened else {
        unreachable!("only long-polls are answered at once");
    };
    gw.arm_connection(&attached.conn);
    debug!(user_id = %attached.conn.user, conn_id = attached.conn.id, transport = "sse", "connection opened");
    Ok(attached.conn)
}

/// The stream's state: the connection, released when the body is dropped.
struct Events {
    gw: Arc<Gateway>,
    conn: Arc<Conn>,
    batch: VecDeque<Outgoing>,
    ended: bool,
}

impl Drop for Events {
    fn drop(&mut self) {
        self.gw.release(&self.conn);
        debug!(
            conn_id = self.conn.id,
            transport = "sse",
            "connection closed"
        );
    }
}

fn events(gw: Arc<Gateway>, conn: Arc<Conn>) -> Response<Body> {
    let first = Bytes::from(format!("retry: {SSE_RETRY_MS}\n\n"));
    let state = Events {
        gw,
        conn,
        batch: VecDeque::new(),
        ended: false,
    };
    let body = stream::once(async move { Ok(BodyFrame::data(first)) })
        .chain(stream::unfold(state, next_chunk));
    let mut resp = Response::new(StreamBody::new(body).boxed_unsync());
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
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
    state.conn.touch(state.gw.now_ms());
    loop {
        tokio::select! {
            biased;
            () = state.conn.killed() => return None,
            () = state.conn.outbound.ready() => {}
        }
        state.conn.outbound.take(&mut state.batch);
        let mut chunk = BytesMut::new();
        while let Some(item) = state.batch.pop_front() {
            match item {
                Outgoing::Frame(frame) => chunk.extend_from_slice(&frame.sse()),
                Outgoing::Ping => chunk.extend_from_slice(&sse_comment("ping")),
                // Only a WebSocket's direct socket leaves raw bytes.
                Outgoing::Raw(bytes) => chunk.extend_from_slice(&bytes),
                Outgoing::Close(reason) => {
                    chunk.extend_from_slice(&Frame::close(reason).sse());
                    state.ended = true;
                    break;
                }
                Outgoing::Reconnect(frame) => {
                    chunk.extend_from_slice(&frame.sse());
                    state.ended = true;
                    break;
                }
            }
        }
        if !chunk.is_empty() {
            return Some((Ok(BodyFrame::data(chunk.freeze())), state));
        }
    }
}
