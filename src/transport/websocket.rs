//! WebSocket: `GET /ws?token=…[&cursor=…]`.
//!
//! The handshake is checked (version, key, origin, token, capacity) before
//! anything is upgraded, the same way on both paths to it: on plain TCP the
//! front door answers it on the raw socket and serves the WebSocket on a
//! task of its own ([`upgrade_raw`]); over TLS (or on a connection hyper
//! already serves) hyper upgrades it ([`upgrade`]). Then one task per
//! connection reads the client's frames and writes what its outbound queue
//! holds. On plain TCP the fan-out writes a frame to the socket itself
//! whenever nothing is queued (see `registry::outbound`), so a broadcast
//! wakes no task; frames are framed once per message (`Frame::ws`) and
//! parsed with tungstenite's state machine fed from memory (`ws_codec`).
//! There is no separate writer task and no per-connection tokio timer
//! (pings and idle eviction come from the wheel, see `deadlines`).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::upgrade::Upgraded;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tracing::{debug, trace, warn};

use super::open::{self, ClientError};
use crate::gateway::{self, Gateway, Held};
use crate::http::Body;
use crate::http::error::ApiError;
use crate::http::head::Head;
use crate::http::view::{Fields, RequestView};
use crate::http::wire::{self, Length};
use crate::peers::{PeerPermit, PeerStream};
use crate::protocol::client_frame::ClientFrame;
use crate::protocol::frame::Frame;
use crate::protocol::ws_codec::{self, Inbound};
use crate::protocol::{Channel, Transport};
use crate::registry::{Conn, DirectWrite, Outgoing, Pushed};

/// Why a request is not a WebSocket handshake we accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HandshakeError {
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
pub(crate) fn check_handshake(fields: &impl Fields) -> Result<String, HandshakeError> {
    if !fields.has_token(&header::UPGRADE, "websocket")
        || !fields.has_token(&header::CONNECTION, "upgrade")
    {
        return Err(HandshakeError::NotUpgrade);
    }
    if fields.first(&header::SEC_WEBSOCKET_VERSION) != Some(b"13") {
        return Err(HandshakeError::Version);
    }
    let key = fields
        .first(&header::SEC_WEBSOCKET_KEY)
        .ok_or(HandshakeError::Key)?;
    // A key is 16 bytes in base64 (24 characters): decoded on the stack.
    let mut raw = [0u8; 18];
    use base64::Engine as _;
    match base64::engine::general_purpose::STANDARD.decode_slice(key, &mut raw) {
        Ok(16) => Ok(tokio_tungstenite::tungstenite::handshake::derive_accept_key(key)),
        _ => Err(HandshakeError::Key),
    }
}

/// A handshake that passed every check: the connection is admitted and
/// held, and the `101` carries `accept`.
struct Admitted {
    /// `Sec-WebSocket-Accept`.
    accept: String,
    /// The connection; dropping it releases the connection, however the
    /// upgrade ends (the upgrade failing, the task panicking).
    held: Held,
}

/// Checks a `GET /ws` handshake and admits its client, the same on every
/// path: the connection held, or the JSON error answer that refuses it
/// (`426` with `Sec-WebSocket-Version` for a version other than 13).
async fn handshake(gw: &Arc<Gateway>, req: &impl RequestView) -> Result<Admitted, Response<Body>> {
    let accept = check_handshake(req.fields()).map_err(refusal)?;
    let client = open::admit(gw, req, Transport::Ws)
        .await
        .map_err(ClientError::into_response)?;
    // What a `subscribe` frame may ask for beyond public channels.
    let claim = client.claim.clone();
    let attached = open::join_live(gw, client, Transport::Ws)
        .await
        .map_err(ClientError::into_response)?;
    attached.conn.set_claim(claim);
    Ok(Admitted {
        accept,
        held: Held::new(Arc::clone(gw), attached.conn),
    })
}

/// The WebSocket's socket on a connection hyper upgraded, what was read
/// past the handshake, and on plain TCP the connection's permit (held
/// until the WebSocket ends).
fn socket_of(upgraded: Upgraded, conn: &Conn) -> (Socket, Bytes, Option<PeerPermit>) {
    match upgraded.downcast::<TokioIo<PeerStream<TcpStream>>>() {
        Ok(parts) => {
            // Plain TCP: the fan-out may write to the socket itself.
            let (tcp, permit, unread) = parts.io.into_inner().into_parts();
            // What hyper read past the handshake comes before what the
            // front door read and hyper had not asked for yet.
            let prefetched = if unread.is_empty() {
                parts.read_buf
            } else {
                [parts.read_buf, unread].concat().into()
            };
            let tcp = Arc::new(WsSocket(Arc::new(tcp)));
            conn.outbound
                .set_direct(Arc::clone(&tcp) as Arc<dyn DirectWrite>);
            (Socket::Tcp(tcp), prefetched, Some(permit))
        }
        Err(upgraded) => {
            // TLS (or anything else): only the task writes.
            let (read, write) = tokio::io::split(TokioIo::new(upgraded));
            (Socket::Stream(read, write), Bytes::new(), None)
        }
    }
}

/// The answer to a handshake that is not one we accept.
fn refusal(err: HandshakeError) -> Response<Body> {
    let version = err == HandshakeError::Version;
    let mut resp = ApiError::BadRequest(err.to_string()).into_body_response();
    if version {
        *resp.status_mut() = StatusCode::UPGRADE_REQUIRED;
        resp.headers_mut().insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
    }
    resp
}

/// Answers `GET /ws` on a connection hyper serves (TLS, or plain TCP that
/// hyper took over): refuses with a JSON error, or switches protocols and
/// spawns the connection's task.
pub(crate) async fn upgrade(gw: &Arc<Gateway>, mut req: Request<Incoming>) -> Response<Body> {
    let Admitted { accept, held } = match handshake(gw, &req).await {
        Ok(admitted) => admitted,
        Err(refused) => return refused,
    };
    let conn = Arc::clone(held.conn());
    let on_upgrade = hyper::upgrade::on(&mut req);
    let gw = Arc::clone(gw);
    tokio::spawn(async move {
        // The socket is taken apart out of this future (`socket_of`), so
        // hyper's upgrade parts keep no room in it while the WebSocket is
        // open.
        let opened = match on_upgrade.await {
            Ok(upgraded) => Some(socket_of(upgraded, &conn)),
            Err(err) => {
                debug!(conn_id = conn.id, error = %err, "upgrade failed");
                None
            }
        };
        if let Some((socket, prefetched, permit)) = opened {
            serve(&gw, &conn, socket, prefetched).await;
            drop(permit);
        }
        drop(held);
        debug!(user_id = %conn.user, conn_id = conn.id, transport = "ws", "connection closed");
    });
    let mut resp = Response::new(crate::http::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = resp.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    resp
}

/// How a handshake on the raw socket ended.
pub(crate) enum RawUpgrade {
    /// Refused, and the connection goes on: what followed the head, for
    /// its next request.
    Refused(BytesMut),
    /// Over: refused with `Connection: close`, or an answer that could
    /// not be written.
    Closed,
    /// Switched: the WebSocket, to be served.
    Open(RawWebSocket),
}

/// A WebSocket upgraded on the raw socket, its `101` written.
pub(crate) struct RawWebSocket {
    /// The connection, released when this is dropped.
    held: Held,
    /// The socket, already the fan-out's to write to.
    socket: Arc<WsSocket>,
    /// What the client sent behind its handshake.
    prefetched: Bytes,
}

impl RawWebSocket {
    /// Serves the WebSocket until it ends, then releases it, and then the
    /// connection's permit.
    ///
    /// A plain function that returns the task's future: as an `async fn`
    /// wrapped in the task's own block, the WebSocket and the permit had
    /// two places each in the future every open WebSocket holds, and its
    /// task cell a larger size class (README, Performance).
    pub(crate) fn serve(self, permit: PeerPermit) -> impl Future<Output = ()> + Send + 'static {
        let Self {
            held,
            socket,
            prefetched,
        } = self;
        async move {
            let conn = held.conn();
            serve(held.gateway(), conn, Socket::Tcp(socket), prefetched).await;
            debug!(user_id = %conn.user, conn_id = conn.id, transport = "ws", "connection closed");
            // Releases the connection and forgets its direct socket.
            drop(held);
            drop(permit);
        }
    }
}

/// Answers `GET /ws` on the raw socket (the front door's): the checks and
/// answers of [`upgrade`], with `after` (what the client sent behind the
/// head) kept for what comes next.
pub(crate) async fn upgrade_raw(
    gw: &Arc<Gateway>,
    tcp: &Arc<TcpStream>,
    head: Box<Head>,
    after: BytesMut,
) -> RawUpgrade {
    let keep_alive = head.keep_alive;
    let admitted = handshake(gw, &*head).await;
    drop(head);
    let Admitted { accept, held } = match admitted {
        Ok(admitted) => admitted,
        Err(refused) => return refuse_raw(tcp, refused, keep_alive, after).await,
    };
    let conn = held.conn();
    let switched = switching_protocols(&accept);
    drop(accept);
    let written = tokio::select! {
        biased;
        () = conn.killed() => false,
        written = wire::write_all(tcp, &switched) => written.is_ok(),
    };
    if !written {
        return RawUpgrade::Closed;
    }
    // Once the `101` is out, the fan-out may write to the socket itself.
    let socket = Arc::new(WsSocket(Arc::clone(tcp)));
    conn.outbound
        .set_direct(Arc::clone(&socket) as Arc<dyn DirectWrite>);
    RawUpgrade::Open(RawWebSocket {
        held,
        socket,
        prefetched: after.freeze(),
    })
}

/// Writes a handshake's refusal on the raw socket: what comes next on the
/// connection, if it stays open.
async fn refuse_raw(
    tcp: &TcpStream,
    refused: Response<Body>,
    keep_alive: bool,
    after: BytesMut,
) -> RawUpgrade {
    let bytes = wire::encode(refused, keep_alive).await;
    let written = wire::write_all(tcp, &bytes).await.is_ok();
    if written && keep_alive {
        RawUpgrade::Refused(after)
    } else {
        RawUpgrade::Closed
    }
}

/// The `101` answer, as hyper writes [`upgrade`]'s: the three headers in
/// that order, then `date`.
fn switching_protocols(accept: &str) -> BytesMut {
    let mut buf = BytesMut::with_capacity(SWITCHING_PROTOCOLS_BYTES);
    buf.put_slice(b"HTTP/1.1 101 Switching Protocols\r\n");
    wire::put_header(&mut buf, b"upgrade", b"websocket");
    wire::put_header(&mut buf, b"connection", b"Upgrade");
    wire::put_header(&mut buf, b"sec-websocket-accept", accept.as_bytes());
    wire::end_head(&mut buf, Length::None, true);
    buf
}

/// Room for the `101`: about 160 bytes.
const SWITCHING_PROTOCOLS_BYTES: usize = 192;

/// A WebSocket ping as shared bytes.
static PING: Bytes = Bytes::from_static(ws_codec::PING);

/// A WebSocket's plain-TCP socket, shared by its task and the fan-out
/// (and, on the front door, its connection's task).
#[derive(Debug)]
struct WsSocket(Arc<TcpStream>);

impl DirectWrite for WsSocket {
    fn try_frame(&self, frame: &Frame) -> io::Result<Option<Bytes>> {
        wire::try_send(&self.0, frame.ws())
    }

    fn try_ping(&self) -> io::Result<Option<Bytes>> {
        wire::try_send(&self.0, &PING)
    }

    fn try_raw(&self, bytes: &Bytes) -> io::Result<Option<Bytes>> {
        wire::try_send(&self.0, bytes)
    }
}

/// Bytes read from the client per read call: client frames are small
/// (pings), and the buffer lives on the stack only while a read completes,
/// never in an idle connection.
const READ_CHUNK_BYTES: usize = 512;

/// The upgraded socket.
enum Socket {
    /// Plain TCP, shared with the fan-out through the outbound queue.
    Tcp(Arc<WsSocket>),
    /// Any other stream (TLS), which only the task touches.
    Stream(ReadHalf<TokioIo<Upgraded>>, WriteHalf<TokioIo<Upgraded>>),
}

impl Socket {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self {
            Self::Tcp(tcp) => loop {
                ready!(tcp.0.poll_read_ready(cx))?;
                match wire::try_read(&tcp.0, buf.initialize_unfilled()) {
                    Ok(n) => {
                        buf.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                    Err(err) => return Poll::Ready(Err(err)),
                }
            },
            Self::Stream(read, _) => Pin::new(read).poll_read(cx, buf),
        }
    }

    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Self::Tcp(tcp) => wire::write_all(&tcp.0, bytes).await,
            Self::Stream(_, write) => {
                write.write_all(bytes).await?;
                write.flush().await
            }
        }
    }
}

/// How the connection's loop ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// We sent a close: wait for the client's.
    Closing,
    /// The peer went away, broke the protocol, or we were killed.
    Gone,
}

/// Why reading stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The client went away (end of stream, reset).
    Gone,
    /// The client sent its close: answer it, then go.
    ClientClosed,
    /// The client broke the protocol: close with this code and reason.
    Violation(CloseCode, &'static str),
}

/// The connection's one task: read what arrives, and write what was queued
/// while the fan-out could not write directly.
///
/// Invariant: every write is raced against `kill`, so a peer that stops
/// reading cannot hold its task (and its memory) past the close grace.
///
/// `prefetched` is what hyper (or the front door) read past the
/// handshake. It is a view into a whole read buffer (kilobytes), so it is
/// dropped as soon as it is parsed, not kept for the connection's life.
async fn serve(gw: &Gateway, conn: &Arc<Conn>, mut socket: Socket, prefetched: Bytes) {
    gateway::fault_point(conn);
    let mut inbound = Inbound::new(gw.websocket_config());
    let mut deferred = Deferred::default();
    let mut batch = VecDeque::new();
    let mut stop = on_bytes(gw, conn, &mut inbound, &mut deferred, &prefetched).err();
    drop(prefetched);
    let end = loop {
        if let Some(stop) = stop.take() {
            last_words(conn, &mut socket, &mut inbound, stop).await;
            break End::Gone;
        }
        if deferred.waiting.is_some() {
            // Nothing more is read until the held messages are handled.
            tokio::select! {
                biased;
                () = conn.killed() => break End::Gone,
                released = release_deferred(gw, conn, &mut inbound, &mut deferred) => stop = released.err(),
            }
            continue;
        }
        tokio::select! {
            biased;
            () = conn.killed() => break End::Gone,
            () = conn.outbound.ready() => {
                conn.outbound.take(&mut batch);
                let written = tokio::select! {
                    biased;
                    () = conn.killed() => Err(End::Gone),
                    written = write_batch(conn, &mut socket, &mut inbound, &mut batch) => written,
                };
                if let Err(end) = written {
                    break end;
                }
                conn.outbound.done_writing();
            }
            read = read_some(gw, conn, &mut socket, &mut inbound, &mut deferred) => stop = read.err(),
        }
    };
    if end == End::Closing {
        // Read until the client answers our close (or the grace runs out).
        loop {
            tokio::select! {
                biased;
                () = conn.killed() => break,
                read = read_some(gw, conn, &mut socket, &mut inbound, &mut deferred) => if read.is_err() { break },
            }
        }
    }
    // The socket closes when the task lets go of it, whoever else still
    // holds the connection.
    conn.outbound.clear_direct();
}

/// Reads what the client sent and handles every complete message in it.
async fn read_some(
    gw: &Gateway,
    conn: &Arc<Conn>,
    socket: &mut Socket,
    inbound: &mut Inbound,
    deferred: &mut Deferred,
) -> Result<(), Stop> {
    std::future::poll_fn(|cx| {
        let mut chunk = [0u8; READ_CHUNK_BYTES];
        let mut buf = ReadBuf::new(&mut chunk);
        match ready!(socket.poll_read(cx, &mut buf)) {
            Ok(()) if buf.filled().is_empty() => Poll::Ready(Err(Stop::Gone)),
            Ok(()) => Poll::Ready(on_bytes(gw, conn, inbound, deferred, buf.filled())),
            Err(err) => {
                trace!(conn_id = conn.id, error = %err, "read failed");
                Poll::Ready(Err(Stop::Gone))
            }
        }
    })
    .await
}

/// Handles the complete messages in `bytes` (keeping a partial one for
/// later) and queues what the protocol answered by itself.
fn on_bytes(
    gw: &Gateway,
    conn: &Arc<Conn>,
    inbound: &mut Inbound,
    deferred: &mut Deferred,
    bytes: &[u8],
) -> Result<(), Stop> {
    let mut input = bytes;
    let result = loop {
        match inbound.next_message(&mut input) {
            Ok(Some(message)) if deferred.waiting.is_some() => deferred.messages.push_back(message),
            Ok(Some(message)) => {
                // A pong owed for a ping read before this message goes out
                // before its answer (RFC 6455 section 5.5.3: as soon as
                // practical). A close's reply carries them itself.
                if !message.is_close()
                    && let Some(replies) = inbound.take_replies()
                {
                    conn.outbound.push_raw(replies);
                }
                match on_message(gw, conn, message) {
                    Ok(Next::Done) => {}
                    Ok(Next::Wait(channel)) => deferred.waiting = Some(channel),
                    Err(stop) => break Err(stop),
                }
            }
            Ok(None) => break Ok(()),
            Err(WsError::Capacity(err)) => {
                debug!(conn_id = conn.id, error = %err, "client frame too big");
                break Err(Stop::Violation(CloseCode::Size, "message too big"));
            }
            // RFC 6455 section 7.1.7: a connection failed for bad data
            // should be told why with a close frame before it goes.
            Err(err) => match violation_close_code(&err) {
                Some(code) => {
                    debug!(conn_id = conn.id, error = %err, "client broke the protocol");
                    break Err(Stop::Violation(code, "protocol error"));
                }
                None => {
                    trace!(conn_id = conn.id, error = %err, "read failed");
                    break Err(Stop::Gone);
                }
            },
        }
    };
    // A protocol error after a held `subscribe` ends the connection once
    // what came before it was handled.
    let result = match result {
        Err(stop) if deferred.waiting.is_some() => {
            deferred.stop = Some(stop);
            Ok(())
        }
        result => result,
    };
    if result.is_ok()
        && let Some(replies) = inbound.take_replies()
    {
        conn.outbound.push_raw(replies);
    }
    result
}

/// What handling a client message left to do.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Answered (or nothing to answer).
    Done,
    /// A `subscribe` to a channel the bus does not hear yet: join once it
    /// does, and hold what the client sent after it until then.
    Wait(Channel),
}

/// Client messages held behind a `subscribe` that waits for the bus to
/// hear its channel (a Redis Cluster node subscribes first), so the
/// client's messages are still answered in order and `subscribed` comes
/// only when the channel's messages will follow.
#[derive(Debug, Default)]
struct Deferred {
    /// The channel the held `subscribe` waits for.
    waiting: Option<Channel>,
    /// What the client sent after it.
    messages: VecDeque<Message>,
    /// How reading stopped after them, if it did.
    stop: Option<Stop>,
}

/// Longest wait for the bus to hear a channel a `subscribe` asked for;
/// past it the connection joins anyway (the bus then tells it it may have
/// missed messages).
const LISTEN_LIMIT: Duration = Duration::from_secs(5);

/// Joins the channel a held `subscribe` waits for once the bus hears it
/// (or [`LISTEN_LIMIT`] passed), then handles what the client sent after
/// it, in order, until another `subscribe` has to wait or none is left.
async fn release_deferred(
    gw: &Gateway,
    conn: &Arc<Conn>,
    inbound: &mut Inbound,
    deferred: &mut Deferred,
) -> Result<(), Stop> {
    while let Some(channel) = deferred.waiting.take() {
        if tokio::time::timeout(LISTEN_LIMIT, gw.bus.listen(&channel)).await != Ok(true) {
            debug!(conn_id = conn.id, channel = %channel, "joining a channel the bus may not hear yet");
        }
        if let Err(refused) = open::join_channel(gw, conn, &channel) {
            answer(conn, &refused);
        }
        while deferred.waiting.is_none()
            && let Some(message) = deferred.messages.pop_front()
        {
            if !message.is_close()
                && let Some(replies) = inbound.take_replies()
            {
                conn.outbound.push_raw(replies);
            }
            if let Next::Wait(channel) = on_message(gw, conn, message)? {
                deferred.waiting = Some(channel);
            }
        }
    }
    deferred.stop.take().map_or(Ok(()), Err)
}

/// Answers one client message.
fn on_message(gw: &Gateway, conn: &Arc<Conn>, message: Message) -> Result<Next, Stop> {
    conn.touch(gw.now_ms());
    let reply = match message {
        Message::Text(text) => match ClientFrame::parse(&text) {
            ClientFrame::Ping => Frame::pong(),
            ClientFrame::Subscribe(name) => match open::subscribe_check(gw, conn, &name) {
                Ok(channel) if !gw.bus.hears(&channel) => return Ok(Next::Wait(channel)),
                // `subscribed` is queued by the registry, in order with the
                // channel's messages.
                Ok(channel) => match open::join_channel(gw, conn, &channel) {
                    Ok(()) => return Ok(Next::Done),
                    Err(refused) => refused,
                },
                Err(refused) => refused,
            },
            ClientFrame::Unsubscribe(name) => match open::unsubscribe(gw, conn, &name) {
                Ok(()) => return Ok(Next::Done),
                Err(refused) => refused,
            },
            ClientFrame::Refresh(token) => open::refresh(gw, conn, &token),
            ClientFrame::MissingToken => {
                Frame::error("bad_token", "refresh needs a \"token\" string")
            }
            ClientFrame::MissingChannel => Frame::error(
                "bad_channel",
                "subscribe and unsubscribe need a \"channel\" string",
            ),
            ClientFrame::Unknown => Frame::error(
                "unsupported",
                "client frames are {\"type\":\"ping\"}, subscribe, unsubscribe and refresh",
            ),
        },
        Message::Binary(_) => Frame::error("unsupported", "binary frames are not supported"),
        Message::Close(_) => return Err(Stop::ClientClosed),
        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => return Ok(Next::Done),
    };
    answer(conn, &reply);
    Ok(Next::Done)
}

/// Queues an answer to the client. Answers go through the queue, so they
/// stay behind queued frames and count against the same limit.
fn answer(conn: &Conn, reply: &Frame) {
    if conn.outbound.push_frame(reply) == Pushed::Overflowed {
        warn!(
            conn_id = conn.id,
            "client flooded frames faster than it read answers"
        );
    }
}

/// Ends the connection on the client's account: answers its close, or
/// fails the connection with a protocol error's close code (RFC 6455
/// §7.1.7: no need to wait for the client's answer). What was queued is
/// dropped, but for the rest of a frame the fan-out wrote in part, which
/// goes first so the close is not read inside it.
async fn last_words(conn: &Conn, socket: &mut Socket, inbound: &mut Inbound, stop: Stop) {
    let cut = conn.outbound.abandon();
    let words = match stop {
        Stop::Gone => return,
        Stop::ClientClosed => {
            // RFC 6455 §5.5.1: the endpoint answers a Close with a Close.
            inbound.flush();
            inbound.take_replies()
        }
        Stop::Violation(code, reason) => inbound.close_frame(code, reason),
    };
    let words = match (cut, words) {
        (Some(cut), Some(words)) => Some(Bytes::from([&cut[..], &words[..]].concat())),
        (cut, words) => words.or(cut),
    };
    if let Some(words) = words {
        tokio::select! {
            biased;
            () = conn.killed() => {}
            _ = socket.write_all(&words) => {}
        }
    }
}

/// Writes one batch in one write; `Err` when the connection is over (an
/// end was written, or the socket failed).
async fn write_batch(
    conn: &Conn,
    socket: &mut Socket,
    inbound: &mut Inbound,
    batch: &mut VecDeque<Outgoing>,
) -> Result<(), End> {
    let mut out = BytesMut::new();
    let mut ending = None;
    while let Some(item) = batch.pop_front() {
        let (last, close) = match item {
            Outgoing::Frame(frame) => (frame.ws().clone(), None),
            Outgoing::Ping => (PING.clone(), None),
            Outgoing::Raw(bytes) => (bytes, None),
            Outgoing::Close(reason) => {
                debug!(
                    conn_id = conn.id,
                    reason = reason.as_str(),
                    "closing connection"
                );
                let code = CloseCode::from(reason.ws_close_code());
                (
                    Frame::close(reason).ws().clone(),
                    Some((code, reason.as_str())),
                )
            }
            Outgoing::Reconnect(frame) => {
                (frame.ws().clone(), Some((CloseCode::Away, "reconnect")))
            }
        };
        out.extend_from_slice(&last);
        if let Some((code, reason)) = close {
            if let Some(close) = inbound.close_frame(code, reason) {
                out.extend_from_slice(&close);
            }
            ending = Some(End::Closing);
            batch.clear();
            break;
        }
    }
    if let Err(err) = socket.write_all(&out).await {
        trace!(conn_id = conn.id, error = %err, "write failed");
        return Err(End::Gone);
    }
    ending.map_or(Ok(()), Err)
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

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderMap;

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
}
