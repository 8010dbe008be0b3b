//! Long-poll (comet): `GET /poll?token=…[&cursor=…]`.
//!
//! The answer is always `200` with a JSON array of frames: at once if
//! messages after the cursor exist; otherwise the request is parked until
//! a message arrives or `poll_timeout_secs` passes (then a `reconnect`
//! frame with the cursor to poll again with). Between polls the user's
//! object and its one timer entry live on for `session_ttl_secs`; a poll
//! within that time reuses both (see `Gateway::park_poll`).

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response};
use tokio::net::TcpStream;

use super::client::{self, Client, ClientError};
use super::{cors, wire};
use crate::api::{Body, full};
use crate::bus::{Open, Opened};
use crate::gateway::Gateway;
use crate::server::head::Head;
use crate::session::{Attached, Conn, DirectWrite, Outgoing, Transport, User};
use crate::transport::frame::{Frame, ReconnectReason, json_array};

/// Answers `GET /poll`.
///
/// The request is dropped once admitted: a parked poll keeps only what
/// its answer needs (the `Origin`, for CORS).
pub async fn poll<B>(gw: &Arc<Gateway>, req: Request<B>) -> Response<Body> {
    let origin = cors::origin_of(req.headers()).map(str::to_owned);
    let admitted = client::admit(gw, &req, Transport::Poll);
    drop(req);
    let frames = match admitted {
        Ok(client) => match answer(gw, client, None).await {
            Ok(Ended::Frames(frames)) => Ok(frames),
            // Only a poll with a direct socket is answered on it.
            Ok(Ended::Written(_)) => Ok(Vec::new()),
            Err(err) => Err(err),
        },
        Err(err) => Err(err),
    };
    respond(gw, origin.as_deref(), frames)
}

/// Serves one `GET /poll` on the raw socket (the front door's): parks it
/// while the client stays, and lets the fan-out write the answer to the
/// socket itself (or writes it, when it is a timeout, a resume or an
/// error). Returns whether the connection stays open for the next request.
pub async fn answer_raw(
    gw: &Arc<Gateway>,
    tcp: &Arc<TcpStream>,
    head: Head,
    pipelined: &mut BytesMut,
) -> bool {
    let keep_alive = head.keep_alive;
    let origin = cors::origin_of(head.request.headers()).map(str::to_owned);
    let admitted = client::admit(gw, &head.request, Transport::Poll);
    drop(head);
    let direct = || -> Arc<dyn DirectWrite> {
        Arc::new(PollSocket {
            tcp: Arc::clone(tcp),
            head: answer_head(gw, origin.as_deref(), keep_alive),
        })
    };
    let ended = match admitted {
        Ok(client) => tokio::select! {
            ended = answer(gw, client, Some(&direct)) => ended,
            // Dropping the parked poll detaches it.
            () = wire::closed(tcp, pipelined) => return false,
        },
        Err(err) => Err(err),
    };
    let rest = match ended {
        Ok(Ended::Written(rest)) => rest,
        Ok(Ended::Frames(frames)) => {
            let resp = respond(gw, origin.as_deref(), Ok(frames));
            vec![wire::encode(resp, keep_alive).await]
        }
        Err(err) => {
            let resp = respond(gw, origin.as_deref(), Err(err));
            vec![wire::encode(resp, keep_alive).await]
        }
    };
    for bytes in rest {
        if wire::write_all(tcp, &bytes).await.is_err() {
            return false;
        }
    }
    keep_alive
}

/// The answer to a poll: `200` with the frames as a JSON array, or the
/// refusal; CORS headers for `origin`.
fn respond(
    gw: &Gateway,
    origin: Option<&str>,
    frames: Result<Vec<Frame>, ClientError>,
) -> Response<Body> {
    let mut resp = match frames {
        Ok(frames) => {
            let mut resp = Response::new(full(json_array(frames.iter().map(|f| f.json()))));
            answer_headers(resp.headers_mut());
            resp
        }
        Err(err) => err.into_response(),
    };
    cors::decorate(&gw.origins, origin, resp.headers_mut());
    resp
}

/// The headers of a `200` answer (before CORS).
fn answer_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// The head of a `200` answer up to its length, for a parked poll whose
/// answer the fan-out writes: the same headers [`respond`] gives.
fn answer_head(gw: &Gateway, origin: Option<&str>, keep_alive: bool) -> Bytes {
    let mut resp = Response::new(());
    answer_headers(resp.headers_mut());
    cors::decorate(&gw.origins, origin, resp.headers_mut());
    let (parts, ()) = resp.into_parts();
    wire::head_start(&parts, keep_alive).freeze()
}

/// A parked poll's plain-TCP socket while the fan-out may answer it: one
/// frame, as a whole HTTP answer (the poll's own head, its length and
/// date, `[frame]`), in one vectored write.
#[derive(Debug)]
struct PollSocket {
    tcp: Arc<TcpStream>,
    /// The answer's head up to its length (`wire::head_start`).
    head: Bytes,
}

/// Room for `content-length` and `date` with their values and the blank
/// line.
const HEAD_END_BYTES: usize = 96;

impl DirectWrite for PollSocket {
    fn try_frame(&self, frame: &Frame) -> io::Result<Option<Bytes>> {
        let body = frame.poll_body();
        let mut end = [0u8; HEAD_END_BYTES];
        let mut cursor = &mut end[..];
        wire::put_head_end(&mut cursor, body.len());
        let end_len = HEAD_END_BYTES - cursor.len();
        let end = &end[..end_len];
        let parts = [&self.head[..], end, &body[..]];
        let slices = parts.map(IoSlice::new);
        let n = self.tcp.try_write_vectored(&slices)?;
        let total = self.head.len() + end.len() + body.len();
        if n == 0 && total > 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if n == total {
            return Ok(None);
        }
        // The socket took part of it (it had room for a request's answer,
        // so this is rare): the task writes the rest.
        let mut rest = BytesMut::with_capacity(total - n);
        let mut skip = n;
        for part in parts {
            let from = skip.min(part.len());
            rest.extend_from_slice(&part[from..]);
            skip -= from;
        }
        Ok(Some(rest.freeze()))
    }

    fn try_ping(&self) -> io::Result<Option<Bytes>> {
        // A long-poll has no ping on the wire.
        Err(io::ErrorKind::Unsupported.into())
    }

    fn answers_once(&self) -> bool {
        true
    }
}

/// How a parked poll ended.
enum Ended {
    /// To be answered with these frames.
    Frames(Vec<Frame>),
    /// Answered on the socket by the fan-out; these bytes of the answer
    /// are left for the task to write (usually none).
    Written(Vec<Bytes>),
}

async fn answer(
    gw: &Arc<Gateway>,
    client: Client,
    direct: Option<&(dyn Fn() -> Arc<dyn DirectWrite> + Sync)>,
) -> Result<Ended, ClientError> {
    let opened = gw
        .bus
        .open(Open {
            user: client.user.clone(),
            transport: Transport::Poll,
            expires_at: client.expires_at,
            cursor: client.cursor,
            now_ms: gw.now_ms(),
        })
        .await
        .map_err(|_| ClientError::AtCapacity)?;
    match opened {
        Opened::Ready(frames) => {
            if let Some(user) = gw.registry.user(&client.user) {
                gw.poll_done(&user);
            }
            Ok(Ended::Frames(frames))
        }
        Opened::Attached(attached) => {
            let parked = Parked::new(gw, attached);
            if let Some(direct) = direct {
                parked.conn.outbound.set_direct(direct());
            }
            Ok(parked.wait().await)
        }
    }
}

/// A parked poll. Dropping it (the client went away, or the answer is
/// ready) detaches the poll and moves the session entry to its expiry.
struct Parked<'a> {
    gw: &'a Gateway,
    conn: Arc<Conn>,
    user: Arc<User>,
}

impl<'a> Parked<'a> {
    fn new(gw: &'a Gateway, attached: Attached) -> Self {
        let deadline_ms = gw.now_ms() + gw.config.session.poll_timeout().as_millis() as u64;
        gw.park_poll(&attached.user, &attached.conn, deadline_ms);
        Self {
            gw,
            conn: attached.conn,
            user: attached.user,
        }
    }

    /// Waits for a message, the end of the connection or the timeout, and
    /// says what to answer with.
    async fn wait(self) -> Ended {
        let conn = &self.conn;
        let mut batch = VecDeque::new();
        loop {
            tokio::select! {
                biased;
                () = conn.killed() => break,
                () = conn.outbound.ready() => {
                    conn.outbound.take(&mut batch);
                    if conn.outbound.is_answered() || batch.iter().any(is_answer) {
                        break;
                    }
                    batch.clear();
                    conn.outbound.done_writing();
                }
            }
        }
        // From here on no producer writes to the socket: the task answers,
        // unless a producer already did.
        if conn.outbound.clear_direct() {
            // Answered on the socket: its cursor is where the client goes
            // on from, so no lock on publishing is needed.
            self.gw.detach(conn);
            conn.outbound.take(&mut batch);
            let rest = batch.drain(..).filter_map(raw_bytes).collect();
            return Ended::Written(rest);
        }
        if batch.iter().any(is_answer) {
            // Answered with messages: their last cursor is where the client
            // goes on from, so no lock on publishing is needed. A message
            // queued after the last take is in history past that cursor.
            self.gw.detach(conn);
            conn.outbound.take(&mut batch);
            return Ended::Frames(batch.into_iter().filter_map(to_frame).collect());
        }
        // Timed out: detached under the publish lock, so nothing more is
        // queued after this and `position` covers everything that was.
        let position = self.gw.release(conn);
        conn.outbound.take(&mut batch);
        let mut frames: Vec<Frame> = batch.into_iter().filter_map(to_frame).collect();
        if frames.is_empty() {
            frames.push(Frame::reconnect(
                ReconnectReason::PollTimeout,
                0,
                &position.to_string(),
            ));
        }
        Ended::Frames(frames)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        // Already detached when answered; this covers a client that left.
        self.conn.outbound.clear_direct();
        self.gw.detach(&self.conn);
        self.gw.poll_done(&self.user);
    }
}

/// The bytes of an answer the fan-out wrote in part.
fn raw_bytes(item: Outgoing) -> Option<Bytes> {
    match item {
        Outgoing::Raw(bytes) => Some(bytes),
        _ => None,
    }
}

/// Whether `item` is something to answer the poll with (pings are not).
fn is_answer(item: &Outgoing) -> bool {
    !matches!(item, Outgoing::Ping | Outgoing::Raw(_))
}

fn to_frame(item: Outgoing) -> Option<Frame> {
    match item {
        Outgoing::Frame(frame) | Outgoing::Reconnect(frame) => Some(frame),
        Outgoing::Close(reason) => Some(Frame::close(reason)),
        // Raw bytes only come from a WebSocket's direct socket.
        Outgoing::Ping | Outgoing::Raw(_) => None,
    }
}
