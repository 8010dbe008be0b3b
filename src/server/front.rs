//! The front door of a plain-TCP connection: it reads each request head
//! itself, serves `GET /poll`, `GET /sse`, the `GET /ws` handshake and
//! `POST /push` on the raw socket, and hands the connection (with every
//! byte it read) to hyper at the first other request, for good.
//!
//! Why: hyper 1.x holds an 8 KiB read buffer and an 8 KiB write buffer for
//! a connection's whole life, so a parked poll or an open event stream
//! would cost 16 KiB to wait. Served here, a waiting poll holds its task
//! and its connection object and nothing else, and its answer is one
//! write. A WebSocket opened here skips hyper's second parse of the head,
//! its buffers and the upgrade hand-off: its `101` is written here, and it
//! is served on a task of its own (sized for it alone), which holds the
//! connection's permit until it ends. A push read here skips hyper's
//! dispatch (its request and body objects, its buffers): 37.4k → 32.4k
//! instructions a push under callgrind (and about 28.5k since an accepted
//! answer is written as bytes, `wire::answer_json`), and its broadcast's
//! first recipient sooner (README, Performance).
//!
//! What the front door serves it serves as hyper would (see
//! `http::head` for which requests, `http::wire` for the bytes):
//! keep-alive, pipelined requests, `[server] header_timeout_secs` for each
//! head (a connection silent that long is closed without an answer, as
//! hyper does), and the graceful stop (a connection waiting for its next
//! request closes).
//!
//! While an answer waits, the socket is read (`transport::pipelined`): a
//! client that leaves is noticed at once, and what it sends meanwhile is
//! kept up to a small bound for the next request. A connection that ends
//! after an answer ends with a lingering close (`crate::linger`), so a
//! client with bytes still unread by the gateway reads its answer rather
//! than a reset.

use std::io;
use std::mem;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use hyper::Method;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::http1::{self, Phase};
use super::router::Route;
use crate::api::push;
use crate::gateway::Gateway;
use crate::http::ApiError;
use crate::http::head::{self, Head, Parsed};
use crate::http::wire;
use crate::http::{MAX_HEADERS, MAX_REQUEST_HEAD_BYTES};
use crate::linger;
use crate::peers::PeerStream;
use crate::transport::pipelined::Pipelined;
use crate::transport::{longpoll, sse, websocket};

/// Bytes asked of the socket per read of a request head.
const READ_CHUNK_BYTES: usize = 1024;

/// The endpoints the front door serves on the raw socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Native {
    /// `GET /poll`
    Poll,
    /// `GET /sse`
    Sse,
    /// `GET /ws`
    Ws,
    /// `POST /push`
    Push,
}

impl Native {
    /// What the front door serves for `method` at `path`: the server's
    /// one route table decides.
    fn at(method: &Method, path: &str) -> Option<Self> {
        match (Route::of(path, false, false), method) {
            (Route::Poll, &Method::GET) => Some(Self::Poll),
            (Route::Sse, &Method::GET) => Some(Self::Sse),
            (Route::WebSocket, &Method::GET) => Some(Self::Ws),
            (Route::Push, &Method::POST) => Some(Self::Push),
            _ => None,
        }
    }

    /// Whether the front door serves this head, or leaves it to hyper: a
    /// poll, a stream or a push that asks for an upgrade, a handshake
    /// that asks to close the connection (hyper's `101` would then say
    /// `connection: close` too), and a push whose body is over
    /// `max_push_bytes` (hyper refuses it, 413, without reading it) are
    /// hyper's.
    fn takes(self, head: &Head, max_push_bytes: usize) -> bool {
        match self {
            Self::Poll | Self::Sse => !head.upgrade,
            Self::Ws => head.keep_alive,
            Self::Push => !head.upgrade && head.body_len <= max_push_bytes,
        }
    }
}

/// What the connection sent next.
enum Next {
    /// A request the front door serves.
    Native(Box<Head>, Native),
    /// A request (or bytes) for hyper.
    Other,
    /// Nothing: closed, silent past the header timeout, or the server is
    /// stopping.
    Closed,
}

/// Serves a plain-TCP connection until it closes.
///
/// A plain function that returns its future, as [`requests`] is: an
/// `async fn` keeps its arguments in its future twice (as it received
/// them, and moved into its body), and this future is what a parked poll
/// or an open event stream holds (README, Performance).
pub(crate) fn serve(
    gw: Arc<Gateway>,
    stream: PeerStream<TcpStream>,
    peer: SocketAddr,
    stop: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let (tcp, permit, unread) = stream.into_parts();
    // Shared with the fan-out while a poll or a stream lets it write.
    let tcp = Arc::new(tcp);
    let mut buf = BytesMut::from(&unread[..]);
    drop(unread);
    async move {
        // Taken apart in a statement of its own: held in a local, or
        // matched with hyper's serving inside the match, the value would
        // keep its room while hyper serves.
        let tcp = match requests(&gw, tcp, &mut buf, &peer, &stop).await {
            Then::WebSocket(ws) => {
                // On a task of its own, with the permit until it ends:
                // sized for the WebSocket alone. (Served on this task
                // instead, it held 0.17 KiB more per idle WebSocket and
                // saved no CPU measurably: README, Performance.)
                tokio::spawn(ws.serve(permit));
                return;
            }
            Then::Hyper(tcp) => tcp,
            Then::Closed => return,
        };
        let stream = PeerStream::new(tcp, permit).with_unread(buf.freeze());
        // Boxed: hyper's connection state would more than double this
        // task's, which a parked poll holds (and hyper allocates its
        // buffers anyway).
        Box::pin(http1::serve(gw, stream, peer, Phase::Serving(stop))).await;
    }
}

/// What a connection goes on to after the requests the front door served.
enum Then {
    /// A WebSocket, its `101` written.
    WebSocket(websocket::RawWebSocket),
    /// hyper, for good, with what was read and not yet served left in the
    /// buffer.
    Hyper(TcpStream),
    /// Nothing: the connection is closed.
    Closed,
}

/// Serves the requests the front door takes, one after another, until
/// the connection is closed, upgraded, or sends one for hyper. `buf`
/// holds what was read and not yet served, before and after.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments twice in the future a parked poll holds"
)]
fn requests<'a>(
    gw: &'a Arc<Gateway>,
    tcp: Arc<TcpStream>,
    buf: &'a mut BytesMut,
    peer: &'a SocketAddr,
    stop: &'a watch::Receiver<bool>,
) -> impl Future<Output = Then> + Send + 'a {
    async move {
        loop {
            let (mut head, native) = match next_head(gw, &tcp, buf, stop).await {
                Next::Native(head, native) => (head, native),
                Next::Other => break,
                Next::Closed => return Then::Closed,
            };
            head.remote_addr = Some(*peer);
            let next = match native {
                Native::Ws => {
                    // What followed the head is the WebSocket's first
                    // bytes (or, after a refusal, the next request), kept
                    // whole as hyper keeps it.
                    let after = buf.split_off(head.len);
                    drop(mem::take(buf));
                    match websocket::upgrade_raw(gw, &tcp, head, after).await {
                        websocket::RawUpgrade::Refused(next) => Some(next),
                        websocket::RawUpgrade::Closed => return Then::Closed,
                        websocket::RawUpgrade::Open(ws) => return Then::WebSocket(ws),
                    }
                }
                Native::Push => {
                    // Boxed: reading a body and writing an answer would
                    // grow the future every parked poll holds.
                    let open = Box::pin(answer_push(gw, &tcp, head, buf)).await;
                    open.then(|| mem::take(buf))
                }
                Native::Poll | Native::Sse => {
                    // The head's buffer goes; what followed it is copied
                    // out, bounded.
                    let mut pipelined =
                        Pipelined::after_head(buf.get(head.len..).unwrap_or_default());
                    drop(mem::take(buf));
                    let open = if native == Native::Poll {
                        longpoll::answer_raw(gw, &tcp, head, &mut pipelined).await
                    } else {
                        sse::serve_raw(gw, &tcp, head, &mut pipelined).await
                    };
                    pipelined.into_next().filter(|_| open)
                }
            };
            match next {
                Some(next) => *buf = next,
                None => {
                    // Every direct socket was forgotten when its poll or
                    // stream ended.
                    if let Ok(tcp) = Arc::try_unwrap(tcp) {
                        linger::close(tcp).await;
                    }
                    return Then::Closed;
                }
            }
        }
        // Every direct socket was forgotten when its poll or stream ended.
        match Arc::try_unwrap(tcp) {
            Ok(tcp) => Then::Hyper(tcp),
            Err(_) => Then::Closed,
        }
    }
}

/// Reads until `buf` holds a whole request head (or enough to know it is
/// hyper's), within the header timeout.
async fn next_head(
    gw: &Gateway,
    tcp: &TcpStream,
    buf: &mut BytesMut,
    stop: &watch::Receiver<bool>,
) -> Next {
    let deadline = crate::clamp::from_now(gw.config.server.header_timeout());
    let mut stop = stop.clone();
    loop {
        if !buf.is_empty() {
            match head::parse(buf, MAX_HEADERS, Native::at) {
                Parsed::Partial if buf.len() < MAX_REQUEST_HEAD_BYTES => {}
                // Too long for a head: hyper answers it (431).
                Parsed::Partial | Parsed::Other => return Next::Other,
                Parsed::Native(head, native)
                    if head.len <= MAX_REQUEST_HEAD_BYTES
                        && native.takes(&head, gw.config.limits.max_push_bytes) =>
                {
                    return Next::Native(head, native);
                }
                Parsed::Native(..) => return Next::Other,
            }
        }
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return Next::Closed,
            () = tokio::time::sleep_until(deadline) => return Next::Closed,
            read = read_more(tcp, buf, READ_CHUNK_BYTES) => match read {
                Ok(0) | Err(_) => return Next::Closed,
                Ok(_) => {}
            },
        }
    }
}

/// Answers the `POST /push` whose head starts `buf`, as hyper's path
/// does: what its head decides first (a refused push skips a body that
/// is already here, or the connection closes), then the rest of its body
/// read (within `[server] body_timeout_secs`, or `408` and the close),
/// parsed and published. `buf` then holds what followed the body. Whether
/// the connection goes on to another request.
async fn answer_push(
    gw: &Arc<Gateway>,
    tcp: &TcpStream,
    head: Box<Head>,
    buf: &mut BytesMut,
) -> bool {
    let end = head.len + head.body_len;
    if let Err(refused) = push::admit(gw, &*head) {
        // What has arrived of the body, without waiting for the rest.
        while buf.len() < end {
            match wire::try_read_buf(tcp, buf, end - buf.len()) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
        let skipped = buf.len() >= end;
        if skipped {
            buf.advance(end);
        }
        return wire::answer(tcp, push::refuse(refused), head.keep_alive && skipped).await;
    }
    let timeout = gw.config.server.body_timeout();
    let deadline = crate::clamp::from_now(timeout);
    while buf.len() < end {
        let refused = tokio::select! {
            () = tokio::time::sleep_until(deadline) => ApiError::RequestTimeout {
                secs: timeout.as_secs(),
            },
            read = read_more(tcp, buf, end - buf.len()) => match read {
                Ok(0) => ApiError::BadJson(
                    "could not read the body: the connection ended before it did".into(),
                ),
                Ok(_) => continue,
                Err(_) => return false,
            },
        };
        // The rest of the body is not coming, or not to be waited for.
        wire::answer(tcp, push::refuse(refused), false).await;
        return false;
    }
    let body = buf.split_to(end).split_off(head.len);
    let published = push::publish(gw, &body).await;
    drop(body);
    match published {
        Ok(accepted) => {
            wire::answer_json(tcp, accepted.status, &accepted.body, head.keep_alive).await
        }
        Err(refused) => wire::answer(tcp, push::refuse(refused), head.keep_alive).await,
    }
}

/// Reads what has arrived into `buf`, at most `chunk` bytes: the count, 0
/// at the end of the stream.
async fn read_more(tcp: &TcpStream, buf: &mut BytesMut, chunk: usize) -> io::Result<usize> {
    loop {
        tcp.readable().await?;
        match wire::try_read_buf(tcp, buf, chunk) {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            read => return read,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::peers::PeerLimits;

    /// Bytes of the front door's future that keep its task cell in
    /// jemalloc's 1,280-byte size class: tokio's task cell is the future
    /// and 104 bytes of its own (header, scheduler, task id, stage tag,
    /// trailer), aligned to 128. Every parked poll and open event stream
    /// holds one; at 2,200 bytes (moved-out requests and response parts,
    /// and `async fn` arguments kept twice) the cell was 2,304 bytes and
    /// took jemalloc's 2,560-byte class.
    const FRONT_FUTURE_BUDGET: usize = 1_280 - 104;

    #[tokio::test]
    async fn the_front_doors_future_fits_its_size_class() {
        let mut config = Config::default();
        config.auth.secret = "size-test-secret-0123456789abcdef".into();
        let gw = Gateway::new(config).expect("gateway");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let permit = PeerLimits::new(&gw.config.limits)
            .admit(addr.ip())
            .expect("permit");
        let (_stop_tx, stop) = watch::channel(false);
        let size = std::mem::size_of_val(&serve(
            Arc::clone(&gw),
            PeerStream::new(tcp, permit),
            addr,
            stop,
        ));
        println!("front door future: {size} bytes");
        assert!(
            size <= FRONT_FUTURE_BUDGET,
            "the front door's future is {size} bytes, over {FRONT_FUTURE_BUDGET}: \
             a parked poll would hold a larger task cell"
        );
    }
}
