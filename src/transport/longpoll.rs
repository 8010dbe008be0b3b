//! Long-poll (comet): `GET /poll?token=…[&cursor=…]`.
//!
//! The answer is always `200` with a JSON array of frames: at once if
//! messages after the cursor exist; otherwise the request is parked until
//! a message arrives or `poll_timeout_secs` passes (then a `reconnect`
//! frame with the cursor to poll again with). Between polls the user's
//! object and its one timer entry live on for `session_ttl_secs`; a poll
//! within that time reuses both (see `Deadlines::park_poll`).

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response};
use tokio::net::TcpStream;

use super::cors;
use super::open::{self, Client, ClientError, Joined};
use super::pipelined::{Input, Pipelined};
use crate::gateway::{self, Gateway};
use crate::http::head::Head;
use crate::http::view::RequestView;
use crate::http::wire::{self, Length};
use crate::http::{Body, full};
use crate::protocol::Transport;
use crate::protocol::frame::{Frame, ReconnectReason, json_array, put_json_array};
use crate::registry::{Attached, Conn, DirectWrite, Outgoing, User};

/// Answers `GET /poll`.
///
/// The request is dropped once admitted: a parked poll keeps only what
/// its answer needs (the `Origin`, for CORS).
pub(crate) async fn poll<B>(gw: &Arc<Gateway>, req: Request<B>) -> Response<Body> {
    let origin = cors::origin_of(req.headers()).map(str::to_owned);
    let admitted = open::admit(gw, &req, Transport::Poll).await;
    drop(req);
    let answered = answer(gw, admitted, None).await;
    let mut resp = match answered {
        Ok(Answer::Frames(frames)) => {
            let mut resp = Response::new(full(json_array(frames.iter().map(|f| f.json()))));
            let headers = resp.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            resp
        }
        // Only a poll on the front door's socket is answered on it.
        Ok(Answer::Written(_)) => ClientError::Internal.into_response(),
        Err(err) => err.into_response(),
    };
    cors::decorate(&gw.origins, origin.as_deref(), resp.headers_mut());
    resp
}

/// What a poll is answered with.
enum Answer {
    /// These frames, written by the poll's task.
    Frames(Vec<Frame>),
    /// Its first message, written whole by the fan-out as the answer
    /// ([`PollSocket`]), but for these bytes the socket did not take.
    Written(Option<Bytes>),
}

/// A poll's `200` answer for the raw socket: the bytes [`poll`]'s
/// response encodes to (same status line, headers in the same order, the
/// JSON array), written straight into one buffer with no `Response`,
/// header map or boxed body in between. `allowed` is the origin CORS
/// echoes back (`cors::allow_origin`).
fn answer_bytes(allowed: Option<&str>, frames: &[Frame], keep_alive: bool) -> Bytes {
    let body_len =
        2 + frames.iter().map(|f| f.json().len()).sum::<usize>() + frames.len().saturating_sub(1);
    let mut buf = BytesMut::with_capacity(ANSWER_HEAD_BYTES + body_len);
    buf.put_slice(b"HTTP/1.1 200 OK\r\n");
    wire::put_header(&mut buf, b"content-type", b"application/json");
    wire::put_header(&mut buf, b"cache-control", b"no-store");
    cors::put_headers(allowed, &mut buf);
    wire::end_head(&mut buf, Length::Fixed(body_len), keep_alive);
    put_json_array(&mut buf, frames.iter().map(|f| f.json()));
    buf.freeze()
}

/// Room for an answer's head: status line, five headers and the framing
/// ones come to under 300 bytes with a long origin.
const ANSWER_HEAD_BYTES: usize = 320;

/// A parked poll's socket, for the fan-out: it takes the first message
/// as the poll's whole answer (`registry::outbound`), so the poll's task
/// is not woken to write it. The task releases the poll when it next
/// wakes for its own reasons: the client's next request on the
/// connection or its leaving, the user's next poll on any connection
/// (`Registry::attach` ends the user's answered polls), or the poll's
/// deadline. A client polls again at once, so that is one wake-up per
/// answered poll instead of two (measured: 15 against 12 µs of server
/// CPU per answered poll, 17 against 10 in another run; README
/// "Performance").
#[derive(Debug)]
struct PollSocket {
    tcp: Arc<TcpStream>,
    /// The origin CORS echoes back.
    allowed: Option<Box<str>>,
    /// The client sent something while the poll waited (a pipelined
    /// request): its task is the one to answer then, as it has to read
    /// on. Set before the task looks at whether the poll was answered, and
    /// read by the fan-out under the queue's lock before it writes, so
    /// one of the two always sees the other.
    input: AtomicBool,
}

impl DirectWrite for PollSocket {
    fn try_frame(&self, frame: &Frame) -> io::Result<Option<Bytes>> {
        if self.input.load(Ordering::SeqCst) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        // Only a poll that keeps its connection has this socket.
        let bytes = answer_bytes(self.allowed.as_deref(), std::slice::from_ref(frame), true);
        wire::try_send(&self.tcp, &bytes)
    }

    /// A poll is not pinged: its answer is its only write.
    fn try_ping(&self) -> io::Result<Option<Bytes>> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn answers_once(&self) -> bool {
        true
    }
}

/// Serves one `GET /poll` on the raw socket (the front door's): parks it
/// while the client stays, then writes the answer, or lets the fan-out
/// write it (a poll that keeps its connection). Returns whether the
/// connection stays open for the next request: not if the client asked to
/// close, left, or sent more behind the poll than could be kept (the
/// answer then says `connection: close`).
pub(crate) async fn answer_raw(
    gw: &Arc<Gateway>,
    tcp: &Arc<TcpStream>,
    head: Box<Head>,
    pipelined: &mut Pipelined,
) -> bool {
    let origin = cors::origin_of(head.fields()).map(str::to_owned);
    // Only an answer that keeps the connection: after one that closes it
    // the task must wake to close it.
    let socket = head.keep_alive.then(|| {
        let allowed = cors::allow_origin(&gw.origins, origin.as_deref());
        Arc::new(PollSocket {
            tcp: Arc::clone(tcp),
            allowed: allowed.map(Box::from),
            // Bytes behind the head are a pipelined request already.
            input: AtomicBool::new(!pipelined.is_empty()),
        })
    });
    let keep_asked = head.keep_alive;
    // In a block of its own, so the parked poll's state and the answer's
    // writing below share their room in this future.
    let answered = {
        let parked_socket = socket.clone();
        // The head stays boxed and goes once admitted: moved out of its
        // box, the request (224 bytes) kept its room in this future, which
        // a parked poll holds, long after it was dropped (README,
        // Performance).
        let waiting = async move {
            let admitted = open::admit(gw, &*head, Transport::Poll).await;
            drop(head);
            answer(gw, admitted, parked_socket).await
        };
        tokio::pin!(waiting);
        loop {
            tokio::select! {
                // An answer ready at once goes out even if the client has
                // already shut its side (`nc -N`), as hyper answers a
                // request it can answer before it looks for the end of the
                // stream. First also so that after input the answer is
                // looked at again.
                biased;
                resp = &mut waiting => break resp,
                input = pipelined.next_input(tcp) => match input {
                    // Dropping the parked poll detaches it.
                    Input::Ended => return false,
                    Input::Arrived => {
                        if let Some(socket) = &socket {
                            socket.input.store(true, Ordering::SeqCst);
                        }
                    }
                },
            }
        }
    };
    drop(socket);
    let keep_alive = keep_asked && !pipelined.is_overflowed();
    let bytes = match answered {
        Ok(Answer::Frames(frames)) => answer_bytes(
            cors::allow_origin(&gw.origins, origin.as_deref()),
            &frames,
            keep_alive,
        ),
        // The answer said whether the connection stays open as the request
        // asked; if more than could be kept arrived since, it closes after.
        Ok(Answer::Written(None)) => return keep_alive,
        Ok(Answer::Written(Some(rest))) => rest,
        Err(err) => {
            let mut resp = err.into_response();
            cors::decorate(&gw.origins, origin.as_deref(), resp.headers_mut());
            wire::encode(resp, keep_alive).await
        }
    };
    wire::write_all(tcp, &bytes).await.is_ok() && keep_alive
}

/// What an admitted poll is answered with (the request is gone by then:
/// a parked poll keeps only what its answer needs). With `socket`, the
/// fan-out may write the answer itself.
async fn answer(
    gw: &Arc<Gateway>,
    admitted: Result<Client, ClientError>,
    socket: Option<Arc<PollSocket>>,
) -> Result<Answer, ClientError> {
    // Taken apart step by step: the temporaries of a `?` in the match's
    // scrutinee would keep their room while the poll is parked.
    let client = admitted?;
    let joined = open::join(gw, client, Transport::Poll).await?;
    match joined {
        Joined::Ready(frames) => Ok(Answer::Frames(frames)),
        Joined::Live(attached) => Ok(Parked::new(gw, attached, socket).wait().await),
    }
}

/// A parked poll. Dropping it (the client went away, the answer is ready,
/// or its task panicked) detaches the poll and moves the session entry to
/// its expiry.
struct Parked<'a> {
    gw: &'a Gateway,
    conn: Arc<Conn>,
    user: Arc<User>,
}

impl<'a> Parked<'a> {
    /// Takes a poll [`open::join`] parked; with `socket`, the fan-out may
    /// answer it.
    fn new(gw: &'a Gateway, attached: Attached, socket: Option<Arc<PollSocket>>) -> Self {
        // Parked by `join` with nothing that can fail or wait in between:
        // from here on, dropping it detaches.
        if let Some(socket) = socket {
            attached.conn.outbound.set_direct(socket);
        }
        Self {
            gw,
            conn: attached.conn,
            user: attached.user,
        }
    }

    /// Waits for a message, the end of the connection or the timeout, and
    /// returns what to answer with.
    async fn wait(self) -> Answer {
        let conn = &self.conn;
        gateway::fault_point(conn);
        let mut batch = VecDeque::new();
        loop {
            tokio::select! {
                biased;
                () = conn.killed() => break,
                () = conn.outbound.ready() => {
                    conn.outbound.take(&mut batch);
                    if batch.iter().any(is_answer) || conn.outbound.is_answered() {
                        break;
                    }
                    batch.clear();
                }
                () = conn.outbound.answered() => break,
            }
        }
        // From here on only this task answers.
        if conn.outbound.clear_direct() {
            // The fan-out wrote the answer; what the socket did not take
            // is the one thing queued.
            self.gw.detach(conn);
            conn.outbound.take(&mut batch);
            let rest = batch.into_iter().find_map(|item| match item {
                Outgoing::Raw(rest) => Some(rest),
                _ => None,
            });
            return Answer::Written(rest);
        }
        if batch.iter().any(is_answer) {
            // Answered with messages: their last cursor is where the client
            // goes on from, so no lock on publishing is needed. A message
            // queued after the last take is in history past that cursor.
            self.gw.detach(conn);
            conn.outbound.take(&mut batch);
            return Answer::Frames(batch.into_iter().filter_map(to_frame).collect());
        }
        // Timed out: detached under the publish lock, so nothing more is
        // queued after this and `position` covers everything that was.
        let position = self.gw.release(conn);
        conn.outbound.take(&mut batch);
        let mut frames: Vec<Frame> = batch.into_iter().filter_map(to_frame).collect();
        if frames.is_empty() {
            // The connection's cursor: with channels, it covers them too.
            let cursor = format!("{position}{}", conn.cursor_suffix());
            frames.push(Frame::reconnect(ReconnectReason::PollTimeout, 0, &cursor));
        }
        Answer::Frames(frames)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        // The socket goes with the poll: the front door closes it or
        // reads the next request from it.
        self.conn.outbound.clear_direct();
        // Already detached when answered; this covers a client that left.
        self.gw.detach(&self.conn);
        self.gw.deadlines.poll_done(&self.user);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::origin::OriginPolicy;
    use crate::protocol::frame::CloseReason;

    /// `bytes` with its `date` line taken out (the two encodings may
    /// straddle a second).
    fn without_date(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes)
            .split("\r\n")
            .filter(|line| !line.starts_with("date: "))
            .collect::<Vec<_>>()
            .join("\r\n")
    }

    /// What the answer encodes to through a `Response`, as [`poll`]
    /// builds it.
    async fn through_response(
        policy: &OriginPolicy,
        origin: Option<&str>,
        frames: &[Frame],
        keep_alive: bool,
    ) -> Bytes {
        let mut resp = Response::new(full(json_array(frames.iter().map(|f| f.json()))));
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        cors::decorate(policy, origin, resp.headers_mut());
        wire::encode(resp, keep_alive).await
    }

    #[tokio::test]
    async fn the_direct_answer_is_the_bytes_the_response_encodes_to() {
        let allow = OriginPolicy::new(&["https://a.example".to_owned()]).expect("valid");
        let frames = [
            Frame::close(CloseReason::Idle),
            Frame::close(CloseReason::Slow),
        ];
        let cases: [(Option<&str>, &[Frame], bool); 5] = [
            (None, &frames, true),
            (None, &frames[..1], false),
            (None, &[], true),
            (Some("https://a.example"), &frames, true),
            (Some("https://b.example"), &frames, false),
        ];
        for (origin, frames, keep_alive) in cases {
            let direct = answer_bytes(cors::allow_origin(&allow, origin), frames, keep_alive);
            let hyper = through_response(&allow, origin, frames, keep_alive).await;
            assert_eq!(
                without_date(&direct),
                without_date(&hyper),
                "origin {origin:?}, {} frames, keep-alive {keep_alive}",
                frames.len()
            );
        }
    }
}
