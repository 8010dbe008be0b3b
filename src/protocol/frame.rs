//! Frames sent to clients, encoded once.
//!
//! Every transport carries the same JSON frames (PROTOCOL.md, "Frames"). A
//! frame is serialized exactly once into [`Bytes`]; a broadcast to 100,000
//! connections clones a reference count into each outbound queue and never
//! re-encodes. The SSE form of a frame ([`Frame::sse`]) is likewise built at
//! most once per frame, and a long-poll answer ([`json_array`]) only copies
//! already-encoded frames side by side.
//!
//! The builders write compact JSON straight into a [`BytesMut`] sized up
//! front; every string goes through serde_json, so quotes, backslashes,
//! control characters and non-ASCII text are escaped correctly. A message's
//! `data` is copied verbatim, exactly as the backend pushed it.
//!
//! Extensions to the protocol: `{"type":"error","code":"…","message":"…"}`
//! ([`error`]) answers a client frame the gateway could not use, and
//! `{"type":"pong"}` ([`pong`]) answers a client's `{"type":"ping"}`.

use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::value::RawValue;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use super::ws_codec;
use crate::http::wire;

/// Bytes a frame needs besides its variable strings, rounded up generously
/// so the common frame is written without growing its buffer.
const FRAME_OVERHEAD_BYTES: usize = 96;

/// The kind of stream a message belongs to: everyone's, one user's, or a
/// channel's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum StreamKind {
    /// The broadcast stream every connection receives (`"broadcast"`).
    Broadcast,
    /// The personal stream of the connection's user (`"user"`).
    User,
    /// A channel's stream (`"channel"`, with the frame's `"channel"` key).
    Channel,
}

impl StreamKind {
    /// The wire name: `"broadcast"`, `"user"` or `"channel"`.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Broadcast => "broadcast",
            Self::User => "user",
            Self::Channel => "channel",
        }
    }
}

/// The stream of one message, with the channel's name for a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream<'a> {
    /// The broadcast stream.
    Broadcast,
    /// The recipients' personal streams.
    User,
    /// One channel.
    Channel(&'a str),
}

impl Stream<'_> {
    /// The kind, without the name.
    pub(crate) const fn kind(self) -> StreamKind {
        match self {
            Self::Broadcast => StreamKind::Broadcast,
            Self::User => StreamKind::User,
            Self::Channel(_) => StreamKind::Channel,
        }
    }
}

/// Why the gateway ends a connection (the `close` frame's `reason`).
///
/// A closed set with fixed WebSocket close codes; clients switch on it to
/// decide whether to come back. PROTOCOL.md: do not resume automatically
/// unless the reason says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CloseReason {
    /// No activity for `[session] idle_timeout_secs` (close code 4001).
    ///
    /// Reconnect: yes, with backoff; the bundled JS client does, since the
    /// link was most likely half-open rather than unwanted.
    Idle,
    /// The user went over `[session] max_connections_per_user` and this was
    /// the oldest connection (close code 4002).
    ///
    /// Reconnect: no. Coming back would evict another connection of the
    /// same user and the two would fight forever.
    Replaced,
    /// The connection's outbound queue passed `[limits] outbound_queue`
    /// (close code 4003).
    ///
    /// Reconnect: yes, with backoff and the last cursor; the bundled JS
    /// client does, and history fills the gap where it still can.
    Slow,
    /// The client's token expired (close code 4004).
    ///
    /// Reconnect: not with the same token. Get a new token first, then
    /// connect with the last cursor.
    TokenExpired,
    /// The gateway is draining or shutting down (close code 1001, going
    /// away).
    ///
    /// Reconnect: yes, automatically, with jitter and the last cursor; the
    /// only reason PROTOCOL.md says resumes on its own.
    // In the contract and the browser client; no code path sends it yet.
    #[allow(dead_code)]
    Shutdown,
}

impl CloseReason {
    /// The wire name used in the `close` frame.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Replaced => "replaced",
            Self::Slow => "slow",
            Self::TokenExpired => "token_expired",
            Self::Shutdown => "shutdown",
        }
    }

    /// The WebSocket close code sent after the `close` frame.
    pub(crate) const fn ws_close_code(self) -> u16 {
        match self {
            Self::Idle => 4001,
            Self::Replaced => 4002,
            Self::Slow => 4003,
            Self::TokenExpired => 4004,
            Self::Shutdown => 1001,
        }
    }
}

/// Why the gateway asks a client to come back (the `reconnect` frame's
/// `reason`). The client reconnects after `retry_ms` with the given cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ReconnectReason {
    /// A long-poll was held for `[session] poll_timeout_secs` with nothing
    /// to deliver; poll again at once.
    PollTimeout,
    /// The gateway is draining before shutdown; connect again (likely to
    /// another node).
    Draining,
    /// The connection reached its maximum lifetime.
    // In the contract and the browser client; no code path sends it yet.
    #[allow(dead_code)]
    Lifetime,
}

impl ReconnectReason {
    /// The wire name used in the `reconnect` frame.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::PollTimeout => "poll_timeout",
            Self::Draining => "draining",
            Self::Lifetime => "lifetime",
        }
    }
}

/// The `type` of a frame; also the SSE `event:` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FrameKind {
    /// One pushed message.
    Message,
    /// Whether a resume got every missed message.
    Recover,
    /// Come back later with a cursor.
    Reconnect,
    /// The gateway ends the connection.
    Close,
    /// Answer to a client frame the gateway could not use (an extension).
    Error,
    /// Answer to a client's `{"type":"ping"}` (an extension).
    Pong,
    /// Answer to a `subscribe` client frame: the channel's live messages
    /// follow.
    Subscribed,
    /// Answer to an `unsubscribe` client frame: none of the channel's
    /// messages follow.
    Unsubscribed,
    /// Answer to a `refresh` client frame: the connection's new expiry.
    Refreshed,
}

impl FrameKind {
    /// The wire name: the frame's `type` field.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Message => "message",
            Self::Recover => "recover",
            Self::Reconnect => "reconnect",
            Self::Close => "close",
            Self::Error => "error",
            Self::Pong => "pong",
            Self::Subscribed => "subscribed",
            Self::Unsubscribed => "unsubscribed",
            Self::Refreshed => "refreshed",
        }
    }
}

/// `{"type":"message","id":…,"cursor":…,"stream":…,"data":<data verbatim>}`,
/// with `"channel":<name>` after `stream` for a channel's message.
pub(crate) fn message(id: &str, cursor: &str, stream: Stream<'_>, data: &RawValue) -> Bytes {
    let data = data.get();
    let mut w = JsonWriter::with_capacity(id.len() + cursor.len() + data.len());
    w.raw(r#"{"type":"message","id":"#).string(id);
    w.raw(r#","cursor":"#).string(cursor);
    put_stream_and_data(&mut w, stream, data);
    w.finish()
}

/// `,"stream":"…"[,"channel":"…"],"data":<data>}`: a message frame's end.
fn put_stream_and_data(w: &mut JsonWriter, stream: Stream<'_>, data: &str) {
    w.raw(r#","stream":""#).raw(stream.kind().as_str());
    w.raw("\"");
    if let Stream::Channel(name) = stream {
        w.raw(r#","channel":"#).string(name);
    }
    w.raw(r#","data":"#).raw(data).raw("}");
}

/// A `message` frame split around its cursor, for a broker that numbers
/// the message: `head + cursor + tail` is exactly [`message`]'s output.
/// Cursors are `[0-9a-f-]`, which need no JSON escaping.
pub(crate) fn message_parts(id: &str, stream: Stream<'_>, data: &RawValue) -> (Bytes, Bytes) {
    let data = data.get();
    let mut head = JsonWriter::with_capacity(id.len());
    head.raw(r#"{"type":"message","id":"#).string(id);
    head.raw(r#","cursor":""#);
    let mut tail = JsonWriter::with_capacity(data.len());
    tail.raw("\"");
    put_stream_and_data(&mut tail, stream, data);
    (head.finish(), tail.finish())
}

/// `{"type":"recover","complete":true|false,"cursor":…}`
pub(crate) fn recover(complete: bool, cursor: &str) -> Bytes {
    let mut w = JsonWriter::with_capacity(cursor.len());
    w.raw(r#"{"type":"recover","complete":"#)
        .raw(if complete { "true" } else { "false" });
    w.raw(r#","cursor":"#).string(cursor).raw("}");
    w.finish()
}

/// `{"type":"reconnect","reason":…,"retry_ms":N,"cursor":…}`; `retry_ms` is
/// how long the client waits before coming back, `0` meaning at once.
pub(crate) fn reconnect(reason: ReconnectReason, retry_ms: u64, cursor: &str) -> Bytes {
    let mut w = JsonWriter::with_capacity(cursor.len());
    w.raw(r#"{"type":"reconnect","reason":""#)
        .raw(reason.as_str());
    w.raw(r#"","retry_ms":"#).value(&retry_ms);
    w.raw(r#","cursor":"#).string(cursor).raw("}");
    w.finish()
}

/// `{"type":"close","reason":…}`
pub(crate) fn close(reason: CloseReason) -> Bytes {
    let mut w = JsonWriter::with_capacity(0);
    w.raw(r#"{"type":"close","reason":""#)
        .raw(reason.as_str())
        .raw(r#""}"#);
    w.finish()
}

/// `{"type":"error","code":…,"message":…}`: the answer to a client frame
/// the gateway could not use (an extension to PROTOCOL.md). `code` is a
/// stable machine-readable string, `message` a human one.
pub(crate) fn error(code: &str, message: &str) -> Bytes {
    let mut w = JsonWriter::with_capacity(code.len() + message.len());
    w.raw(r#"{"type":"error","code":"#).string(code);
    w.raw(r#","message":"#).string(message).raw("}");
    w.finish()
}

/// `{"type":"subscribed","channel":…}` or `{"type":"unsubscribed",…}`:
/// the answer to a `subscribe` or `unsubscribe` client frame.
pub(crate) fn membership(kind: FrameKind, channel: &str) -> Bytes {
    let mut w = JsonWriter::with_capacity(channel.len());
    w.raw(r#"{"type":""#).raw(kind.as_str());
    w.raw(r#"","channel":"#).string(channel).raw("}");
    w.finish()
}

/// `{"type":"error","code":…,"channel":…,"message":…}`: a `subscribe`
/// the gateway refused; nothing changed.
pub(crate) fn channel_error(code: &str, channel: &str, message: &str) -> Bytes {
    let mut w = JsonWriter::with_capacity(code.len() + channel.len() + message.len());
    w.raw(r#"{"type":"error","code":"#).string(code);
    w.raw(r#","channel":"#).string(channel);
    w.raw(r#","message":"#).string(message).raw("}");
    w.finish()
}

/// `{"type":"refreshed","expires_at":N}`: the answer to a `refresh`
/// client frame (an extension to PROTOCOL.md).
pub(crate) fn refreshed(expires_at: u64) -> Bytes {
    let mut w = JsonWriter::with_capacity(0);
    w.raw(r#"{"type":"refreshed","expires_at":"#)
        .value(&expires_at)
        .raw("}");
    w.finish()
}

/// `{"type":"pong"}`: the answer to a client's `{"type":"ping"}` (an
/// extension to PROTOCOL.md).
pub(crate) fn pong() -> Bytes {
    Bytes::from_static(br#"{"type":"pong"}"#)
}

/// One SSE event: `event: <kind>\nid: <id>\ndata: <json>\n\n`.
///
/// `json` is normally one line (compact JSON), but a backend's `data` is
/// copied verbatim and may hold line breaks between tokens. Each line then
/// gets its own `data:` field; the browser joins them with `\n`, which is
/// still JSON whitespace, so the event's data parses to the same value.
/// Line breaks inside JSON strings are always escaped, so this never
/// changes a string.
///
/// An `id` (or `kind`) that SSE cannot carry (one containing CR or LF, or
/// NUL for `id`) is left out rather than allowed to break the stream;
/// gateway cursors never contain them.
pub(crate) fn sse_event(kind: &str, json: &[u8], id: Option<&str>) -> Bytes {
    let id_len = id.map_or(0, str::len);
    let mut buf = BytesMut::with_capacity(kind.len() + id_len + json.len() + 32);
    if is_sse_field_value(kind) {
        put_sse_field(&mut buf, "event", kind.as_bytes());
    }
    if let Some(id) = id.filter(|id| is_sse_field_value(id) && !id.contains('\0')) {
        put_sse_field(&mut buf, "id", id.as_bytes());
    }
    put_sse_lines(&mut buf, "data", json);
    buf.put_u8(b'\n');
    buf.freeze()
}

/// An SSE comment (`: <text>\n\n`), ignored by browsers; keeps proxies from
/// timing out an idle stream. `sse_comment("ping")` is `: ping\n\n`.
pub(crate) fn sse_comment(text: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(text.len() + 4);
    put_sse_lines(&mut buf, "", text.as_bytes());
    buf.put_u8(b'\n');
    buf.freeze()
}

/// A long-poll answer: the encoded frames as one JSON array, `[f1,f2,…]`
/// (`[]` for none).
pub(crate) fn json_array<I>(frames: I) -> Bytes
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    let frames = frames.into_iter();
    let mut buf = BytesMut::with_capacity(2 + frames.size_hint().0 * FRAME_OVERHEAD_BYTES);
    put_json_array(&mut buf, frames);
    buf.freeze()
}

/// Appends `frames` to `buf` as one JSON array, as [`json_array`] builds
/// it (for an answer written with its head into one buffer).
pub(crate) fn put_json_array<I>(buf: &mut BytesMut, frames: I)
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    buf.put_u8(b'[');
    for (i, frame) in frames.into_iter().enumerate() {
        if i > 0 {
            buf.put_u8(b',');
        }
        buf.put_slice(frame.as_ref());
    }
    buf.put_u8(b']');
}

/// An encoded frame with what the transports need beside its bytes: its
/// kind (the SSE event name) and its cursor (the SSE event id).
///
/// Cloning is one reference-count increment. The WebSocket and SSE
/// encodings are built on first use and shared by every clone, so a
/// broadcast is framed once per transport, not once per recipient. Two
/// frames are equal when their JSON bytes are.
#[derive(Debug, Clone)]
pub(crate) struct Frame(Arc<FrameInner>);

#[derive(Debug)]
struct FrameInner {
    kind: FrameKind,
    /// The shard whose sequence `seq` belongs to (0 on a broker of one).
    shard: u16,
    /// The message's sequence number (0 for other frames).
    seq: u64,
    /// The JSON, checked as UTF-8 once so every WebSocket send is a clone.
    json: Utf8Bytes,
    cursor: Option<Box<str>>,
    ws: OnceLock<Bytes>,
    sse: OnceLock<Bytes>,
    sse_chunk: OnceLock<Bytes>,
    /// The same message with a connection's cursor suffix, for the last
    /// few suffixes asked for (see [`Frame::with_cursor_suffix`]).
    variants: Mutex<Vec<(Arc<str>, Frame)>>,
}

/// Suffixed copies a message frame keeps for reuse: connections in the
/// same channels share one; past this many different suffixes, copies are
/// made per connection and not kept.
const MAX_VARIANTS: usize = 4;

impl Frame {
    fn new(kind: FrameKind, json: Bytes, cursor: Option<&str>) -> Self {
        let json = Utf8Bytes::try_from(json)
            .expect("frames are written from &str and RawValue, so they are UTF-8");
        Self::from_parts(kind, 0, json, cursor)
    }

    fn from_parts(kind: FrameKind, seq: u64, json: Utf8Bytes, cursor: Option<&str>) -> Self {
        Self(Arc::new(FrameInner {
            kind,
            shard: 0,
            seq,
            json,
            cursor: cursor.map(Box::from),
            ws: OnceLock::new(),
            sse: OnceLock::new(),
            sse_chunk: OnceLock::new(),
            variants: Mutex::new(Vec::new()),
        }))
    }

    /// This message as a connection whose cursor ends in `suffix` (its
    /// channels' coverage) receives it: the frame's cursor, in the JSON and
    /// as the SSE id, is the connection's, not the message's. An empty
    /// suffix (a connection in no channel) and frames that are not
    /// messages are the frame itself. Connections with the same suffix
    /// share one copy, encoded once per transport like any frame.
    pub(crate) fn with_cursor_suffix(&self, suffix: &Arc<str>) -> Self {
        if suffix.is_empty() || self.0.kind != FrameKind::Message {
            return self.clone();
        }
        let mut variants = self.0.variants.lock();
        if let Some((_, frame)) = variants.iter().find(|(s, _)| s == suffix) {
            return frame.clone();
        }
        let Some(frame) = self.suffixed(suffix) else {
            return self.clone();
        };
        if variants.len() < MAX_VARIANTS {
            variants.push((Arc::clone(suffix), frame.clone()));
        }
        frame
    }

    /// Drops the suffixed copies (once the fan-out is done with the
    /// message: history keeps only the message itself).
    pub(crate) fn forget_copies(&self) {
        self.0.variants.lock().clear();
    }

    fn suffixed(&self, suffix: &str) -> Option<Self> {
        let cursor = self.0.cursor.as_deref()?;
        self.with_cursor(&format!("{cursor}{suffix}"))
    }

    /// This message with `cursor` in place of its own (a copy; see
    /// `bus::resume` for when a message is sent with a later cursor).
    /// `None` for a frame that is not a message.
    pub(crate) fn with_cursor(&self, new: &str) -> Option<Self> {
        if self.0.kind != FrameKind::Message {
            return None;
        }
        let cursor = self.0.cursor.as_deref()?;
        let mut frame =
            Self::message_with_cursor_in(self.0.seq, self.0.json.as_bytes(), cursor, new)?;
        if let Some(inner) = Arc::get_mut(&mut frame.0) {
            inner.shard = self.0.shard;
        }
        Some(frame)
    }

    /// The `message` frame of `json` (a message whose cursor field holds
    /// `old`) with `new` in that field, built in one go. `None` if the
    /// field is not there or the bytes are not UTF-8.
    fn message_with_cursor_in(seq: u64, json: &[u8], old: &str, new: &str) -> Option<Self> {
        let at = cursor_value(json, old)?;
        let mut out = BytesMut::with_capacity(json.len() - old.len() + new.len());
        out.put_slice(&json[..at]);
        // Cursors are `[0-9a-f.~-]`: nothing to escape.
        out.put_slice(new.as_bytes());
        out.put_slice(&json[at + old.len()..]);
        let json = Utf8Bytes::try_from(out.freeze()).ok()?;
        Some(Self::from_parts(FrameKind::Message, seq, json, Some(new)))
    }

    /// The `message` frame of message number `seq`; see [`message`].
    pub(crate) fn message(
        seq: u64,
        id: &str,
        cursor: &str,
        stream: Stream<'_>,
        data: &RawValue,
    ) -> Self {
        let json = message(id, cursor, stream, data);
        let mut frame = Self::new(FrameKind::Message, json, Some(cursor));
        if let Some(inner) = Arc::get_mut(&mut frame.0) {
            inner.seq = seq;
        }
        frame
    }

    /// A `message` frame from JSON another node encoded (over the Redis
    /// bus); `None` if the bytes are not UTF-8.
    pub(crate) fn message_from_json(seq: u64, cursor: &str, json: Bytes) -> Option<Self> {
        let json = Utf8Bytes::try_from(json).ok()?;
        Some(Self::from_parts(
            FrameKind::Message,
            seq,
            json,
            Some(cursor),
        ))
    }

    /// A `message` frame from JSON encoded by another node, numbered `seq`
    /// in shard `shard` of a sharded broker; `None` if the bytes are not
    /// UTF-8.
    pub(crate) fn shard_message(shard: u16, seq: u64, cursor: &str, json: Bytes) -> Option<Self> {
        let mut frame = Self::message_from_json(seq, cursor, json)?;
        if let Some(inner) = Arc::get_mut(&mut frame.0) {
            inner.shard = shard;
        }
        Some(frame)
    }

    /// A `message` frame from JSON another node encoded with cursor
    /// `theirs`, numbered `seq` in shard `shard` of a sharded broker,
    /// carrying `cursor` (this node's position) instead: what
    /// [`Self::shard_message`] then [`Self::with_cursor`] give, built once
    /// (a node does this for every message it takes from the broker).
    /// `None` if the bytes are not UTF-8 or hold no cursor `theirs`.
    pub(crate) fn shard_message_with_cursor(
        shard: u16,
        seq: u64,
        theirs: &str,
        json: &[u8],
        cursor: &str,
    ) -> Option<Self> {
        let mut frame = Self::message_with_cursor_in(seq, json, theirs, cursor)?;
        if let Some(inner) = Arc::get_mut(&mut frame.0) {
            inner.shard = shard;
        }
        Some(frame)
    }

    /// The message's sequence number; 0 for frames that are not messages.
    pub(crate) fn seq(&self) -> u64 {
        self.0.seq
    }

    /// The shard `seq` belongs to (0 on a broker of one shard).
    pub(crate) fn shard(&self) -> u16 {
        self.0.shard
    }

    /// A `recover` frame; see [`recover`].
    pub(crate) fn recover(complete: bool, cursor: &str) -> Self {
        Self::new(FrameKind::Recover, recover(complete, cursor), Some(cursor))
    }

    /// A `reconnect` frame; see [`reconnect`].
    pub(crate) fn reconnect(reason: ReconnectReason, retry_ms: u64, cursor: &str) -> Self {
        let json = reconnect(reason, retry_ms, cursor);
        Self::new(FrameKind::Reconnect, json, Some(cursor))
    }

    /// A `close` frame; see [`close`].
    pub(crate) fn close(reason: CloseReason) -> Self {
        Self::new(FrameKind::Close, close(reason), None)
    }

    /// An `error` frame; see [`error`].
    pub(crate) fn error(code: &str, message: &str) -> Self {
        Self::new(FrameKind::Error, error(code, message), None)
    }

    /// A `subscribed` frame for `channel`; see [`membership`].
    pub(crate) fn subscribed(channel: &str) -> Self {
        let kind = FrameKind::Subscribed;
        Self::new(kind, membership(kind, channel), None)
    }

    /// An `unsubscribed` frame for `channel`; see [`membership`].
    pub(crate) fn unsubscribed(channel: &str) -> Self {
        let kind = FrameKind::Unsubscribed;
        Self::new(kind, membership(kind, channel), None)
    }

    /// An `error` frame about `channel`; see [`channel_error`].
    pub(crate) fn channel_error(code: &str, channel: &str, message: &str) -> Self {
        Self::new(
            FrameKind::Error,
            channel_error(code, channel, message),
            None,
        )
    }

    /// A `refreshed` frame; see [`refreshed`].
    pub(crate) fn refreshed(expires_at: u64) -> Self {
        Self::new(FrameKind::Refreshed, refreshed(expires_at), None)
    }

    /// A `pong` frame; see [`pong`].
    pub(crate) fn pong() -> Self {
        Self::new(FrameKind::Pong, pong(), None)
    }

    /// The frame's `type`.
    #[cfg(test)]
    pub(crate) fn kind(&self) -> FrameKind {
        self.0.kind
    }

    /// The compact JSON frame, for long-poll arrays and SSE.
    pub(crate) fn json(&self) -> &Bytes {
        self.0.json.as_ref()
    }

    /// The frame as a WebSocket text frame (header and JSON), built on the
    /// first call and shared afterwards: every recipient's socket is
    /// written from the same bytes.
    pub(crate) fn ws(&self) -> &Bytes {
        self.0.ws.get_or_init(|| ws_codec::text_frame(self.json()))
    }

    /// The cursor the frame carries (`message`, `recover`, `reconnect`).
    pub(crate) fn cursor(&self) -> Option<&str> {
        self.0.cursor.as_deref()
    }

    /// The frame as one SSE event (`event:` its type, `id:` its cursor if
    /// any), built on the first call and shared afterwards.
    pub(crate) fn sse(&self) -> Bytes {
        let inner = &*self.0;
        inner
            .sse
            .get_or_init(|| sse_event(inner.kind.as_str(), self.json(), self.cursor()))
            .clone()
    }
}

impl Frame {
    /// The SSE event as one chunk of a chunked body: what the fan-out
    /// writes to an event stream's socket. Built once, shared.
    pub(crate) fn sse_chunk(&self) -> &Bytes {
        self.0.sse_chunk.get_or_init(|| wire::chunk(&self.sse()))
    }
}

impl PartialEq for Frame {
    fn eq(&self, other: &Self) -> bool {
        self.0.json == other.0.json
    }
}

impl Eq for Frame {}

/// Writes compact JSON into one buffer sized from the variable parts.
struct JsonWriter(BytesMut);

impl JsonWriter {
    /// `variable_bytes`: the summed length of the strings to be written.
    fn with_capacity(variable_bytes: usize) -> Self {
        // Escaping can grow a string; an eighth extra covers typical text.
        let estimate = FRAME_OVERHEAD_BYTES + variable_bytes + variable_bytes / 8;
        Self(BytesMut::with_capacity(estimate))
    }

    /// Appends already-valid JSON (or a fixed fragment) as is.
    fn raw(&mut self, fragment: &str) -> &mut Self {
        self.0.put_slice(fragment.as_bytes());
        self
    }

    /// Appends `s` as a quoted, escaped JSON string.
    fn string(&mut self, s: &str) -> &mut Self {
        self.value(s)
    }

    /// Appends any value serde_json can write without failing (strings,
    /// integers).
    fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> &mut Self {
        serde_json::to_writer(BufMut::writer(&mut self.0), value)
            .expect("serde_json cannot fail writing a string or integer into memory");
        self
    }

    fn finish(self) -> Bytes {
        self.0.freeze()
    }
}

/// Whether `value` can be an SSE field value (no line break in it).
fn is_sse_field_value(value: &str) -> bool {
    !value.contains(['\r', '\n'])
}

/// Appends `name: value\n`; an empty name makes a comment line.
fn put_sse_field(buf: &mut BytesMut, name: &str, value: &[u8]) {
    buf.put_slice(name.as_bytes());
    buf.put_slice(b": ");
    buf.put_slice(value);
    buf.put_u8(b'\n');
}

/// Appends one `name: line` field per non-empty line of `text` (split at
/// CR, LF or CRLF, as SSE splits), and at least one field.
fn put_sse_lines(buf: &mut BytesMut, name: &str, text: &[u8]) {
    let mut lines = text
        .split(|&b| b == b'\r' || b == b'\n')
        .filter(|line| !line.is_empty())
        .peekable();
    if lines.peek().is_none() {
        put_sse_field(buf, name, b"");
    }
    for line in lines {
        put_sse_field(buf, name, line);
    }
}

/// Where the value of the field `"cursor":"<cursor>"` starts in a
/// message's JSON, found without building the pattern: the first key
/// `"cursor"` whose value is exactly `cursor`. Inside a JSON string every
/// quote is escaped, so a `"cursor":"` other than the frame's own field
/// can only be a key of the message's data, which comes after it; callers
/// pass the cursor the frame was encoded with, so the frame's own field is
/// the one found.
fn cursor_value(json: &[u8], cursor: &str) -> Option<usize> {
    const KEY: &[u8] = b"\"cursor\":\"";
    let mut from = 0;
    while let Some(found) = json[from..].windows(KEY.len()).position(|w| w == KEY) {
        let start = from + found + KEY.len();
        let value = json.get(start..start + cursor.len())?;
        if value == cursor.as_bytes() && json.get(start + cursor.len()) == Some(&b'"') {
            return Some(start);
        }
        from = start;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_owned()).expect("test data is valid JSON")
    }

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).expect("frame is valid JSON")
    }

    /// A minimal SSE parser after the HTML spec: (event, id, data) per event.
    fn parse_sse(stream: &[u8]) -> Vec<(String, Option<String>, String)> {
        let text = std::str::from_utf8(stream).expect("SSE is UTF-8");
        let mut events = Vec::new();
        let (mut event, mut id, mut data) = (String::new(), None, Vec::new());
        for line in text.split('\n') {
            if line.is_empty() {
                if !data.is_empty() {
                    events.push((std::mem::take(&mut event), id.take(), data.join("\n")));
                }
                data.clear();
                continue;
            }
            let (name, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match name {
                "event" => event = value.to_owned(),
                "id" => id = Some(value.to_owned()),
                "data" => data.push(value.to_owned()),
                _ => {}
            }
        }
        events
    }

    #[test]
    fn every_builder_encodes_the_documented_frame() {
        let data = raw(r#"{"n":1,"s":"x"}"#);
        let cases: Vec<(Bytes, Value)> = vec![
            (
                message("m1", "c1", Stream::Broadcast, &data),
                json!({"type":"message","id":"m1","cursor":"c1","stream":"broadcast","data":{"n":1,"s":"x"}}),
            ),
            (
                message("m2", "c2", Stream::User, &raw("null")),
                json!({"type":"message","id":"m2","cursor":"c2","stream":"user","data":null}),
            ),
            (
                message("m3", "", Stream::User, &raw("[1,\"two\",3.5]")),
                json!({"type":"message","id":"m3","cursor":"","stream":"user","data":[1,"two",3.5]}),
            ),
            (
                recover(true, "c9"),
                json!({"type":"recover","complete":true,"cursor":"c9"}),
            ),
            (
                recover(false, "c0"),
                json!({"type":"recover","complete":false,"cursor":"c0"}),
            ),
            (
                reconnect(ReconnectReason::PollTimeout, 0, "c1"),
                json!({"type":"reconnect","reason":"poll_timeout","retry_ms":0,"cursor":"c1"}),
            ),
            (
                reconnect(ReconnectReason::Draining, 2500, "c2"),
                json!({"type":"reconnect","reason":"draining","retry_ms":2500,"cursor":"c2"}),
            ),
            (
                reconnect(ReconnectReason::Lifetime, u64::MAX, "c3"),
                json!({"type":"reconnect","reason":"lifetime","retry_ms":u64::MAX,"cursor":"c3"}),
            ),
            (
                close(CloseReason::Idle),
                json!({"type":"close","reason":"idle"}),
            ),
            (
                close(CloseReason::Replaced),
                json!({"type":"close","reason":"replaced"}),
            ),
            (
                close(CloseReason::Slow),
                json!({"type":"close","reason":"slow"}),
            ),
            (
                close(CloseReason::TokenExpired),
                json!({"type":"close","reason":"token_expired"}),
            ),
            (
                close(CloseReason::Shutdown),
                json!({"type":"close","reason":"shutdown"}),
            ),
            (
                error("bad_frame", "expected {\"type\":\"ping\"}"),
                json!({"type":"error","code":"bad_frame","message":"expected {\"type\":\"ping\"}"}),
            ),
            (
                membership(FrameKind::Subscribed, "city:berlin"),
                json!({"type":"subscribed","channel":"city:berlin"}),
            ),
            (
                membership(FrameKind::Unsubscribed, "vip"),
                json!({"type":"unsubscribed","channel":"vip"}),
            ),
            (
                channel_error("channel_refused", "vip", "not public"),
                json!({"type":"error","code":"channel_refused","channel":"vip","message":"not public"}),
            ),
            (
                refreshed(1_700_000_000),
                json!({"type":"refreshed","expires_at":1_700_000_000_u64}),
            ),
            (
                refreshed(u64::MAX),
                json!({"type":"refreshed","expires_at":u64::MAX}),
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(parse(&bytes), want, "{bytes:?}");
            assert!(!bytes.contains(&b'\n'), "compact: {bytes:?}");
        }
    }

    #[test]
    fn a_frame_far_longer_than_its_fixed_part_is_written_whole() {
        let long = "\u{e9}\"x\n".repeat(300);
        let bytes = channel_error("channel_refused", &long, &long);
        assert_eq!(
            parse(&bytes),
            json!({"type":"error","code":"channel_refused","channel":long,"message":long})
        );
    }

    #[test]
    fn message_bytes_are_exact_and_keep_data_verbatim() {
        let data = raw("{ \"a\" : [1, 2],\n  \"b\": 1.50 }");
        let got = message("id", "cur", Stream::Broadcast, &data);
        let want = "{\"type\":\"message\",\"id\":\"id\",\"cursor\":\"cur\",\
                    \"stream\":\"broadcast\",\"data\":{ \"a\" : [1, 2],\n  \"b\": 1.50 }}";
        assert_eq!(got, want.as_bytes());
    }

    #[test]
    fn strings_in_frames_are_json_escaped() {
        let tricky = [
            "plain",
            "quote\"inside",
            "back\\slash",
            "new\nline\r\ttab",
            "nul\0bell\u{7}esc\u{1b}del\u{7f}",
            "\u{2028}line separator",
            "ünïcödé 漢字 🎉",
            "</script><!--",
        ];
        for s in tricky {
            let frames = [
                message(s, s, Stream::User, &raw("1")),
                recover(true, s),
                reconnect(ReconnectReason::Draining, 1, s),
                error(s, s),
            ];
            for bytes in frames {
                let value = parse(&bytes);
                for field in ["id", "cursor", "code", "message"] {
                    if let Some(got) = value.get(field) {
                        assert_eq!(got, s, "{field} in {bytes:?}");
                    }
                }
                assert!(
                    bytes.iter().all(|&b| b >= 0x20),
                    "raw control byte in {bytes:?}"
                );
            }
        }
        let exact = message("a\"b", "c\\d", Stream::User, &raw("0"));
        let want = r#"{"type":"message","id":"a\"b","cursor":"c\\d","stream":"user","data":0}"#;
        assert_eq!(exact, want.as_bytes());
    }

    #[test]
    fn close_reasons_have_fixed_names_and_codes() {
        let cases = [
            (CloseReason::Idle, "idle", 4001),
            (CloseReason::Replaced, "replaced", 4002),
            (CloseReason::Slow, "slow", 4003),
            (CloseReason::TokenExpired, "token_expired", 4004),
            (CloseReason::Shutdown, "shutdown", 1001),
        ];
        for (reason, name, code) in cases {
            assert_eq!(reason.as_str(), name);
            assert_eq!(reason.ws_close_code(), code, "{name}");
        }
    }

    #[test]
    fn sse_event_has_event_id_and_one_data_line() {
        let got = sse_event("message", br#"{"type":"message"}"#, Some("c-1"));
        let want = "event: message\nid: c-1\ndata: {\"type\":\"message\"}\n\n";
        assert_eq!(got, want.as_bytes());
        let got = sse_event("close", br#"{"type":"close"}"#, None);
        assert_eq!(
            got,
            "event: close\ndata: {\"type\":\"close\"}\n\n".as_bytes()
        );
    }

    #[test]
    fn sse_event_splits_multiline_data_into_fields_that_rejoin_to_the_same_json() {
        let data = raw("{\n  \"a\": [1,\r\n 2],\r  \"b\": \"x\\ny\"\n}");
        let frame = message("m", "c", Stream::User, &data);
        let sse = sse_event("message", &frame, Some("c"));
        let events = parse_sse(&sse);
        assert_eq!(events.len(), 1, "{sse:?}");
        let (event, id, data) = &events[0];
        assert_eq!(event, "message");
        assert_eq!(id.as_deref(), Some("c"));
        assert_eq!(parse(data.as_bytes()), parse(&frame));
        assert!(!sse.contains(&b'\r'), "{sse:?}");
    }

    #[test]
    fn sse_event_drops_an_id_or_event_it_cannot_carry() {
        for id in ["a\nb", "a\rb", "a\0b"] {
            let sse = sse_event("message", b"{}", Some(id));
            assert_eq!(sse, "event: message\ndata: {}\n\n".as_bytes(), "{id:?}");
        }
        let sse = sse_event("mess\nage", b"{}", None);
        assert_eq!(sse, "data: {}\n\n".as_bytes());
    }

    #[test]
    fn sse_comments_are_ignored_lines() {
        assert_eq!(sse_comment("ping"), ": ping\n\n".as_bytes());
        assert_eq!(sse_comment("a\nb"), ": a\n: b\n\n".as_bytes());
        assert!(parse_sse(&sse_comment("ping")).is_empty());
    }

    #[test]
    fn json_array_joins_frames() {
        let frames = [
            close(CloseReason::Idle),
            recover(true, "c"),
            error("x", "y"),
        ];
        let cases: [(&[Bytes], Value); 3] = [
            (&[], json!([])),
            (&frames[..1], json!([{"type":"close","reason":"idle"}])),
            (
                &frames,
                json!([
                    {"type":"close","reason":"idle"},
                    {"type":"recover","complete":true,"cursor":"c"},
                    {"type":"error","code":"x","message":"y"},
                ]),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse(&json_array(input)), want);
            assert_eq!(parse(&json_array(input.iter().map(|b| &b[..]))), want);
        }
        assert_eq!(json_array(Vec::<Bytes>::new()), "[]".as_bytes());
    }

    #[test]
    fn frame_keeps_kind_and_cursor_and_builds_each_encoding_once() {
        let frame = Frame::message(7, "m", "c7", Stream::Broadcast, &raw("{}"));
        assert_eq!(frame.kind(), FrameKind::Message);
        assert_eq!(frame.cursor(), Some("c7"));
        assert_eq!(
            frame.json(),
            &message("m", "c7", Stream::Broadcast, &raw("{}"))
        );
        let clone = frame.clone();
        let (a, b) = (frame.sse(), clone.sse());
        assert_eq!(a, sse_event("message", frame.json(), Some("c7")));
        assert_eq!(a.as_ptr(), b.as_ptr(), "clones share one SSE encoding");
        assert_eq!(
            frame.ws().as_ptr(),
            clone.ws().as_ptr(),
            "clones share one WebSocket encoding"
        );
        assert_eq!(frame, clone);
        assert_ne!(frame, Frame::pong(), "frames of other bytes differ");
        let chunk = frame.sse_chunk();
        let mut want = format!("{:x}\r\n", a.len()).into_bytes();
        want.extend_from_slice(&a);
        want.extend_from_slice(b"\r\n");
        assert_eq!(
            chunk.as_ref(),
            want.as_slice(),
            "the SSE event as one chunk"
        );
        assert_eq!(
            chunk.as_ptr(),
            clone.sse_chunk().as_ptr(),
            "clones share one chunk"
        );

        let cases = [
            (Frame::recover(false, "c"), FrameKind::Recover, Some("c")),
            (
                Frame::reconnect(ReconnectReason::PollTimeout, 0, "d"),
                FrameKind::Reconnect,
                Some("d"),
            ),
            (Frame::close(CloseReason::Slow), FrameKind::Close, None),
            (Frame::error("e", "f"), FrameKind::Error, None),
            (Frame::pong(), FrameKind::Pong, None),
        ];
        for (frame, kind, cursor) in cases {
            assert_eq!(frame.kind(), kind);
            assert_eq!(frame.cursor(), cursor);
            assert_eq!(parse(frame.json())["type"], kind.as_str());
            assert!(
                frame.ws().ends_with(frame.json()),
                "the JSON is the payload"
            );
            assert_eq!(frame.ws()[0], 0x81, "one final text frame");
            let events = parse_sse(&frame.sse());
            assert_eq!(events[0].0, kind.as_str());
            assert_eq!(events[0].1.as_deref(), cursor);
        }
    }
}

#[cfg(test)]
mod parts_tests {
    use super::*;

    #[test]
    fn a_frame_from_another_nodes_json_keeps_its_number_shard_and_cursor() {
        let json = |cursor: &str| {
            Bytes::from(format!(
                r#"{{"type":"message","id":"m","cursor":"{cursor}","stream":"broadcast","data":1}}"#
            ))
        };
        let frame = Frame::message_from_json(7, "c7", json("c7")).expect("UTF-8");
        assert_eq!(
            (frame.seq(), frame.shard(), frame.cursor()),
            (7, 0, Some("c7"))
        );
        assert_eq!(frame.json(), &json("c7"));
        let sharded = Frame::shard_message(3, 9, "c9", json("c9")).expect("UTF-8");
        assert_eq!(
            (sharded.seq(), sharded.shard(), sharded.cursor()),
            (9, 3, Some("c9"))
        );
        assert_eq!(sharded.json(), &json("c9"));
        let moved = sharded.with_cursor("c10").expect("a message");
        assert_eq!((moved.seq(), moved.shard()), (9, 3), "a copy keeps both");
        assert_eq!(moved.json(), &json("c10"));
        let not_utf8 = || Bytes::from_static(b"{\xff}");
        assert!(Frame::message_from_json(1, "c", not_utf8()).is_none());
        assert!(Frame::shard_message(1, 1, "c", not_utf8()).is_none());
        // Built in one go: the same as taking it, then moving its cursor.
        let direct =
            Frame::shard_message_with_cursor(3, 9, "c9", &json("c9"), "c10").expect("a message");
        assert_eq!(
            (direct.seq(), direct.shard(), direct.cursor()),
            (9, 3, Some("c10"))
        );
        assert_eq!(direct.json(), moved.json());
        assert!(
            Frame::shard_message_with_cursor(1, 1, "c", b"{\"cursor\":\"c\xff\"}", "d").is_none()
        );
        assert!(
            Frame::shard_message_with_cursor(1, 1, "other", &json("c9"), "d").is_none(),
            "their cursor is not in the JSON"
        );
    }

    #[test]
    fn only_the_frames_own_cursor_field_is_replaced() {
        // The data may hold a "cursor" key, even with the same value; it
        // comes after the frame's own field and is left alone. A prefix of
        // the cursor in an earlier field is not the field.
        let json = br#"{"type":"message","id":"m","cursor":"c1","stream":"broadcast","data":{"cursor":"c1"}}"#;
        let frame = Frame::shard_message_with_cursor(0, 1, "c1", json, "c2").expect("a message");
        assert_eq!(
            std::str::from_utf8(frame.json()),
            Ok(
                r#"{"type":"message","id":"m","cursor":"c2","stream":"broadcast","data":{"cursor":"c1"}}"#
            )
        );
        let json = br#"{"type":"message","id":"m","cursor":"c12","data":{"cursor":"c1"}}"#;
        let frame = Frame::shard_message_with_cursor(0, 1, "c1", json, "c2").expect("a message");
        assert_eq!(
            std::str::from_utf8(frame.json()),
            Ok(r#"{"type":"message","id":"m","cursor":"c12","data":{"cursor":"c2"}}"#),
            "the first field whose whole value is the cursor"
        );
        assert_eq!(cursor_value(br#"{"cursor":"c"#, "c1"), None, "cut short");
    }

    #[test]
    fn at_most_max_variants_suffixed_copies_are_kept() {
        let data = RawValue::from_string("1".into()).expect("json");
        let frame = Frame::message(5, "m", "0000000000000001-5", Stream::Broadcast, &data);
        let suffixes: Vec<Arc<str>> = (0..=MAX_VARIANTS)
            .map(|n| Arc::from(format!("~{n:08x}")))
            .collect();
        let (kept, past) = suffixes.split_at(MAX_VARIANTS);
        for suffix in kept {
            let first = frame.with_cursor_suffix(suffix);
            let again = frame.with_cursor_suffix(suffix);
            assert!(Arc::ptr_eq(&first.0, &again.0), "{suffix} kept");
        }
        let first = frame.with_cursor_suffix(&past[0]);
        let again = frame.with_cursor_suffix(&past[0]);
        assert_eq!(first, again, "the same bytes");
        assert!(
            !Arc::ptr_eq(&first.0, &again.0),
            "past {MAX_VARIANTS} suffixes each copy is made anew"
        );
    }

    #[test]
    fn a_suffixed_copy_carries_the_connections_cursor_and_is_shared() {
        let data = RawValue::from_string(r#"{"cursor":"x"}"#.into()).expect("json");
        let id = r#"a"cursor":"0000000000000001-5""#;
        let cursor = "0000000000000001-5";
        let frame = Frame::message(5, id, cursor, Stream::Channel("vip"), &data);
        let suffix: Arc<str> = Arc::from("~0badcafe");
        let copy = frame.with_cursor_suffix(&suffix);
        let json: serde_json::Value = serde_json::from_slice(copy.json()).expect("json");
        assert_eq!(json["cursor"], "0000000000000001-5~0badcafe");
        assert_eq!(json["id"], id, "the id is untouched");
        assert_eq!(json["data"], serde_json::json!({"cursor": "x"}));
        assert_eq!(json["channel"], "vip");
        assert_eq!(copy.seq(), 5);
        assert_eq!(copy.cursor(), Some("0000000000000001-5~0badcafe"));
        let again = frame.with_cursor_suffix(&Arc::from("~0badcafe"));
        assert!(Arc::ptr_eq(&copy.0, &again.0), "one copy per suffix");
        frame.forget_copies();
        let fresh = frame.with_cursor_suffix(&suffix);
        assert!(
            !Arc::ptr_eq(&copy.0, &fresh.0),
            "forgotten copies are made anew"
        );
        assert_eq!(fresh.json(), copy.json());
        let empty: Arc<str> = Arc::from("");
        assert!(Arc::ptr_eq(&frame.with_cursor_suffix(&empty).0, &frame.0));
        let pong = Frame::pong();
        assert!(Arc::ptr_eq(&pong.with_cursor_suffix(&suffix).0, &pong.0));
        let later = frame
            .with_cursor("0000000000000001-9~0badcafe")
            .expect("a message");
        let json: serde_json::Value = serde_json::from_slice(later.json()).expect("json");
        assert_eq!(json["cursor"], "0000000000000001-9~0badcafe");
        assert_eq!((json["id"].as_str(), later.seq()), (Some(id), 5));
        assert!(pong.with_cursor("x").is_none());
    }

    #[test]
    fn message_parts_around_a_cursor_are_exactly_the_message() {
        let data = RawValue::from_string(r#"{"a": ["x\"y", 1]}"#.into()).expect("json");
        for stream in [
            Stream::Broadcast,
            Stream::User,
            Stream::Channel("city:\"x\""),
        ] {
            let (head, tail) = message_parts("id-\"1\"", stream, &data);
            let cursor = "00000000000000ff-42";
            let joined = [&head[..], cursor.as_bytes(), &tail[..]].concat();
            assert_eq!(joined, message("id-\"1\"", cursor, stream, &data));
        }
    }
}
