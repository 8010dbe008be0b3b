//! Helpers for the long-poll, SSE and resume tests: plain HTTP requests
//! that can run in spawned tasks, an SSE client that parses the event
//! stream as a browser does, and a resume over any transport.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pushgate::protocol::Transport;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use super::{Gateway, Response, Ws, next_json, token};

/// `/poll?token=…[&cursor=…]` for `user` with a fresh token.
pub(crate) fn poll_path(user: &str, cursor: Option<&str>) -> String {
    let mut path = format!("/poll?token={}", token(user, 3600));
    if let Some(cursor) = cursor {
        path.push_str(&format!("&cursor={cursor}"));
    }
    path
}

/// `/sse?token=…[&cursor=…]` for `user` with a fresh token.
pub(crate) fn sse_path(user: &str, cursor: Option<&str>) -> String {
    poll_path(user, cursor).replacen("/poll", "/sse", 1)
}

/// `GET http://<addr><path>` with `headers`, read whole (no gateway
/// handle needed, so it runs in spawned tasks).
pub(crate) async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    request(addr, Method::GET, path, headers).await
}

/// Any bodiless request to `addr`, read whole.
pub(crate) async fn request(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req.body(Full::new(Bytes::new())).expect("request");
    let client = Client::builder(TokioExecutor::new()).build_http();
    let resp = client.request(req).await.expect("http request");
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Response {
        status,
        headers,
        body,
    }
}

/// Starts a poll in its own task: `GET <path>` answered whole.
pub(crate) fn spawn_get(
    addr: SocketAddr,
    path: String,
    headers: Vec<(String, String)>,
) -> tokio::task::JoinHandle<Response> {
    tokio::spawn(async move {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        get(addr, &path, &headers).await
    })
}

/// Waits (20 ms steps, up to `limit`) until `gw` has `n` open
/// connections of `transport`.
pub(crate) async fn wait_for_connections(
    gw: &Gateway,
    transport: Transport,
    n: usize,
    limit: Duration,
) {
    let what = format!("{n} {transport:?} connections open");
    super::ws::until_ok(limit, &what, || {
        let open = gw.state.inspect().of(transport);
        std::future::ready(if open == n {
            Ok(())
        } else {
            Err(format!("{open} open"))
        })
    })
    .await;
}

/// The frames of a poll answer, after checking it is `200`,
/// `application/json` and a JSON array.
pub(crate) fn poll_frames(resp: &Response) -> Vec<Value> {
    assert_eq!(resp.status, StatusCode::OK, "{resp:?}");
    let content_type = resp
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(
        content_type.starts_with("application/json"),
        "content-type {content_type:?}"
    );
    match resp.json() {
        Value::Array(frames) => frames,
        other => panic!("a poll answer is a JSON array, got {other}"),
    }
}

/// One item of an event stream, as a browser's parser sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SseItem {
    /// An event: its `event:` name, `id:` (if any) and `data:` lines joined.
    Event {
        /// The `event:` field ("message" if absent).
        event: String,
        /// The `id:` field.
        id: Option<String>,
        /// The data lines joined with `\n`.
        data: String,
    },
    /// A comment line (`: text`), without the colon and the space.
    Comment(String),
    /// A `retry:` field on its own.
    Retry(u64),
}

impl SseItem {
    /// The event's data as JSON (panics for comments).
    pub(crate) fn json(&self) -> Value {
        match self {
            Self::Event { data, .. } => serde_json::from_str(data)
                .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {data:?}")),
            other => panic!("not an event: {other:?}"),
        }
    }
}

/// An open `GET /sse` stream.
pub(crate) struct Sse {
    /// The response status.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
    body: Incoming,
    buf: BytesMut,
    ended: bool,
}

impl Sse {
    /// Opens `GET <path>` with `headers` (within 10 s). The stream is not
    /// read yet; a non-`200` answer's body is left for [`Sse::rest`].
    pub(crate) async fn open(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Self {
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(format!("http://{addr}{path}"));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req.body(Empty::<Bytes>::new()).expect("request");
        let client = Client::builder(TokioExecutor::new()).build_http();
        let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
            .await
            .expect("SSE answered in time")
            .expect("http request");
        let (parts, body) = resp.into_parts();
        Self {
            status: parts.status,
            headers: parts.headers,
            body,
            buf: BytesMut::new(),
            ended: false,
        }
    }

    /// A header's value as text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The rest of the body (for an error answer), within 10 s.
    pub(crate) async fn rest(self) -> Bytes {
        tokio::time::timeout(Duration::from_secs(10), self.body.collect())
            .await
            .expect("body in time")
            .expect("body")
            .to_bytes()
    }

    /// The next item within `limit`; `None` once the stream ended.
    /// Panics if nothing comes in time.
    pub(crate) async fn next_item(&mut self, limit: Duration) -> Option<SseItem> {
        tokio::time::timeout(limit, self.read_item())
            .await
            .unwrap_or_else(|_| panic!("no SSE item within {limit:?}"))
    }

    /// The next item within `limit`, or `None` if none came in time
    /// (`Some(None)`: the stream ended).
    pub(crate) async fn try_next_item(&mut self, limit: Duration) -> Option<Option<SseItem>> {
        tokio::time::timeout(limit, self.read_item()).await.ok()
    }

    /// The next event (skipping comments and `retry:`) within `limit`.
    pub(crate) async fn next_event(&mut self, limit: Duration) -> SseItem {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_item(left).await {
                Some(item @ SseItem::Event { .. }) => return item,
                Some(_) => continue,
                None => panic!("the stream ended before an event"),
            }
        }
    }

    /// The next event's data as JSON (skipping comments), within `limit`.
    pub(crate) async fn next_json(&mut self, limit: Duration) -> Value {
        self.next_event(limit).await.json()
    }

    async fn read_item(&mut self) -> Option<SseItem> {
        loop {
            if let Some(item) = self.parse_block() {
                return Some(item);
            }
            if self.ended {
                return None;
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) | None => self.ended = true,
            }
        }
    }

    /// Takes one blank-line-terminated block off the buffer, if whole.
    fn parse_block(&mut self) -> Option<SseItem> {
        loop {
            let end = self.buf.windows(2).position(|w| w == b"\n\n")?;
            let block = self.buf.split_to(end + 2);
            let text = std::str::from_utf8(&block[..end]).expect("SSE is UTF-8");
            if let Some(item) = parse_block(text) {
                return Some(item);
            }
        }
    }
}

/// One SSE block (lines of `name: value`) as an item.
fn parse_block(text: &str) -> Option<SseItem> {
    let (mut event, mut id, mut data, mut retry, mut comment) =
        (None, None, Vec::new(), None, None);
    for line in text.split('\n') {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match name {
            "" => comment = Some(value.to_owned()),
            "event" => event = Some(value.to_owned()),
            "id" => id = Some(value.to_owned()),
            "data" => data.push(value.to_owned()),
            "retry" => retry = value.parse().ok(),
            _ => {}
        }
    }
    if !data.is_empty() {
        return Some(SseItem::Event {
            event: event.unwrap_or_else(|| "message".into()),
            id,
            data: data.join("\n"),
        });
    }
    match (retry, comment) {
        (Some(ms), _) => Some(SseItem::Retry(ms)),
        (None, Some(text)) => Some(SseItem::Comment(text)),
        (None, None) => None,
    }
}

/// A WebSocket or SSE client still open after its resume.
pub(crate) enum Live {
    /// A WebSocket.
    Ws(Box<Ws>),
    /// An SSE stream.
    Sse(Box<Sse>),
}

/// The transports a browser client can resume over.
pub(crate) const RESUMABLE: [Transport; 3] = [Transport::Ws, Transport::Poll, Transport::Sse];

/// Resumes `user` from `cursor` over `transport` and returns the frames
/// of the first answer: for a poll, the answer's array (given at once or
/// after up to `limit`); for WebSocket and SSE, the first `n` frames,
/// then the open client for more.
pub(crate) async fn resume(
    gw: &Gateway,
    transport: Transport,
    user: &str,
    cursor: &str,
    n: usize,
    limit: Duration,
) -> (Vec<Value>, Option<Live>) {
    match transport {
        Transport::Poll => {
            let resp =
                tokio::time::timeout(limit, get(gw.addr, &poll_path(user, Some(cursor)), &[]))
                    .await
                    .expect("poll answered in time");
            (poll_frames(&resp), None)
        }
        Transport::Ws => {
            let query = format!("token={}&cursor={cursor}", token(user, 3600));
            let mut ws = gw.try_connect(&query, &[]).await.expect("ws connects");
            let mut frames = Vec::new();
            for _ in 0..n {
                frames.push(next_json(&mut ws, limit).await);
            }
            (frames, Some(Live::Ws(Box::new(ws))))
        }
        Transport::Sse => {
            let mut sse = Sse::open(gw.addr, &sse_path(user, Some(cursor)), &[]).await;
            assert_eq!(sse.status, StatusCode::OK);
            let mut frames = Vec::new();
            for _ in 0..n {
                frames.push(sse.next_json(limit).await);
            }
            (frames, Some(Live::Sse(Box::new(sse))))
        }
    }
}

impl Live {
    /// The next frame within `limit`.
    pub(crate) async fn next_json(&mut self, limit: Duration) -> Value {
        match self {
            Self::Ws(ws) => next_json(ws, limit).await,
            Self::Sse(sse) => sse.next_json(limit).await,
        }
    }

    /// Asserts that nothing more reaches this client: pushes a marker
    /// `to` the client (see [`push_marker`]) and reads, within `limit`,
    /// up to it (see [`Live::assert_quiet_until`]).
    pub(crate) async fn assert_quiet(&mut self, gw: &Gateway, to: Value, limit: Duration) {
        let marker = push_marker(gw, to).await;
        self.assert_quiet_until(&marker, limit).await;
    }

    /// Reads up to the message whose data is `marker`, within `limit`,
    /// and panics if any other frame comes first. Heartbeats are not
    /// frames: WebSocket pings and pongs, SSE comments and `retry:`.
    ///
    /// The marker, pushed after what must not arrive, proves that nothing
    /// did without a fixed quiet window (which both takes its time and
    /// misses a frame later than itself): what was wrongly delivered
    /// would be queued before it, provided the two are ordered: one
    /// connection's queue is, and the memory broker and a single Redis
    /// deliver every stream in publish order (one sequence). On a Redis
    /// Cluster only one stream is ordered: push the marker on the stream
    /// of what must not arrive.
    pub(crate) async fn assert_quiet_until(&mut self, marker: &Value, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let frame = match self {
                Self::Ws(ws) => {
                    let next =
                        tokio::time::timeout_at(deadline, futures_util::StreamExt::next(&mut **ws))
                            .await
                            .unwrap_or_else(|_| panic!("marker {marker} not within {limit:?}"));
                    match next {
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                        Some(Ok(Message::Text(text))) => {
                            serde_json::from_str::<Value>(&text).expect("JSON frame")
                        }
                        other => panic!("expected marker {marker}, got {other:?}"),
                    }
                }
                Self::Sse(sse) => {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    match sse.try_next_item(left).await {
                        None => panic!("marker {marker} not within {limit:?}"),
                        Some(Some(SseItem::Comment(_) | SseItem::Retry(_))) => continue,
                        Some(Some(event)) => event.json(),
                        Some(None) => panic!("the stream ended before marker {marker}"),
                    }
                }
            };
            assert!(
                frame["type"] == "message" && &frame["data"] == marker,
                "expected nothing before marker {marker}, got {frame}"
            );
            return;
        }
    }
}

/// Pushes a marker message `to` whom (`"*"`, `["<user>"]`,
/// `{"channels": [...]}`) and returns its data, `"marker-<n>"`, unique in
/// the test binary: see [`Live::assert_quiet_until`].
pub(crate) async fn push_marker(gw: &Gateway, to: Value) -> Value {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let data = Value::from(format!("marker-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
    let resp = gw.push(&serde_json::json!({"to": to, "data": data})).await;
    assert_eq!(resp.status, StatusCode::ACCEPTED, "marker push: {resp:?}");
    data
}

/// Data values of message frames, in order.
pub(crate) fn data_of(frames: &[Value]) -> Vec<Value> {
    frames.iter().map(|f| f["data"].clone()).collect()
}

/// The cursor of a push answer or frame.
pub(crate) fn cursor_of(value: &Value) -> String {
    value["cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("no cursor in {value}"))
        .to_owned()
}
