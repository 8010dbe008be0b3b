//! Shared by the black-box tests: a real gateway on 127.0.0.1:0, real
//! clients (tokio-tungstenite, a hyper client, raw TCP).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pushgate::config::Config;
use pushgate::protocol::UserId;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The secret and API key every test gateway uses.
pub(crate) const SECRET: &str = "test-secret-0123456789abcdef";
/// The backend API key.
pub(crate) const API_KEY: &str = "test-api-key-0123456789abcdef";

/// A test WebSocket client.
pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A configuration for tests: loopback, port 0, short timeouts, no rate
/// limit, no per-address connection limits (every test client comes from
/// 127.0.0.1; `tests/limits_*.rs` set them where they test them).
pub(crate) fn config() -> Config {
    let mut c = Config::default();
    c.server.listen = "127.0.0.1:0".into();
    c.server.drain_timeout_secs = 5;
    // Told all at once: a test of the spread sets it (tests/drain_spread.rs).
    c.server.drain_spread_secs = 0;
    c.auth.secret = SECRET.into();
    c.auth.api_key = API_KEY.into();
    c.limits.push_rate_per_sec = 0;
    c.limits.max_connections_per_ip = 0;
    c.limits.connection_rate_per_ip = 0;
    c.session.ping_interval_secs = 30;
    c.session.idle_timeout_secs = 60;
    c.server.static_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/static").into();
    c
}

/// A running gateway; dropping it without `stop` aborts it.
pub(crate) struct Gateway {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its shared state, for white-box assertions.
    pub state: std::sync::Arc<pushgate::gateway::Gateway>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Gateway {
    /// Starts a gateway with `config` (validated first, as the binary does).
    pub(crate) async fn start(config: Config) -> Self {
        config.validate().expect("test config is valid");
        let server = pushgate::Server::bind(config).await.expect("bind");
        let addr = server.local_addr();
        let state = std::sync::Arc::clone(server.gateway());
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        Self {
            addr,
            state,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Starts a gateway on the test defaults.
    pub(crate) async fn default() -> Self {
        Self::start(config()).await
    }

    /// Triggers the drain and waits for `run` to return (within `limit`).
    pub(crate) async fn stop(mut self, limit: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = self.task.take().expect("running");
        tokio::time::timeout(limit, task)
            .await
            .expect("drained in time")
            .expect("no panic");
    }

    /// Starts the drain without waiting.
    pub(crate) fn begin_stop(&mut self) -> JoinHandle<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take().expect("running")
    }

    /// `ws://…/ws?<query>`
    pub(crate) fn ws_url(&self, query: &str) -> String {
        format!("ws://{}/ws?{query}", self.addr)
    }

    /// Connects a WebSocket for `user` with a fresh token.
    pub(crate) async fn connect(&self, user: &str) -> Ws {
        let url = self.ws_url(&format!("token={}", token(user, 3600)));
        let (ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("ws connects");
        ws
    }

    /// Sends a request and returns status, headers and body.
    pub(crate) async fn request(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Response {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(body.into())).expect("request");
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

    /// `POST /push` with the API key and a JSON body.
    pub(crate) async fn push(&self, body: &serde_json::Value) -> Response {
        let auth = format!("Bearer {API_KEY}");
        self.request(
            Method::POST,
            "/push",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body.to_string(),
        )
        .await
    }

    /// `GET /metrics` as text.
    pub(crate) async fn metrics(&self) -> String {
        let resp = self
            .request(Method::GET, "/metrics", &[], Bytes::new())
            .await;
        String::from_utf8(resp.body.to_vec()).expect("utf-8 metrics")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// An HTTP response, read whole.
#[derive(Debug)]
pub(crate) struct Response {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: hyper::HeaderMap,
    /// Body bytes.
    pub body: Bytes,
}

impl Response {
    /// The body as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// The `error.code` of a JSON error body.
    pub(crate) fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .expect("error.code")
            .to_owned()
    }
}

/// A token for `user` valid for `ttl_secs` from now.
pub(crate) fn token(user: &str, ttl_secs: u64) -> String {
    let user = UserId::parse(user).expect("valid user id");
    let exp = pushgate::gateway::Gateway::unix_now() + ttl_secs;
    pushgate::auth::token::mint(SECRET.as_bytes(), &user, exp)
}

/// The next text frame as JSON (skipping pings/pongs), within `limit` in
/// all: heartbeat pings do not extend the wait.
pub(crate) async fn next_json(ws: &mut Ws, limit: Duration) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("a frame in time")
            .expect("stream open")
            .expect("no ws error");
        match msg {
            Message::Text(text) => return serde_json::from_str(&text).expect("JSON frame"),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("expected a text frame, got {other:?}"),
        }
    }
}

/// Reads until the close message and returns its code and the frames
/// before it.
pub(crate) async fn read_until_close(
    ws: &mut Ws,
    limit: Duration,
) -> (Option<u16>, Vec<serde_json::Value>) {
    let mut frames = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("closed in time");
        match msg {
            Some(Ok(Message::Text(text))) => {
                frames.push(serde_json::from_str(&text).expect("JSON"))
            }
            Some(Ok(Message::Close(frame))) => return (frame.map(|f| u16::from(f.code)), frames),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return (None, frames),
        }
    }
}

// Added for the api_* tests: a gateway with a separate metrics listener,
// and raw HTTP over TCP for requests whose bytes must be exact.

impl Gateway {
    /// Starts a gateway with `config` and returns it with the address of
    /// its separate metrics listener (`None` unless `[metrics] listen`).
    pub(crate) async fn start_with_metrics_addr(config: Config) -> (Self, Option<SocketAddr>) {
        config.validate().expect("test config is valid");
        let server = pushgate::Server::bind(config).await.expect("bind");
        let (addr, metrics_addr) = (server.local_addr(), server.metrics_addr());
        let state = std::sync::Arc::clone(server.gateway());
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        let gw = Self {
            addr,
            state,
            stop: Some(stop),
            task: Some(task),
        };
        (gw, metrics_addr)
    }
}

/// Writes `request` as is on a new TCP connection to `addr` and returns
/// what the server sends until it closes (within 10 s). The request should
/// carry `Connection: close`.
pub(crate) async fn raw_http(addr: SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("tcp connect");
        stream.write_all(request).await.expect("request written");
        let mut answer = Vec::new();
        // A reset after the answer still leaves the answer readable.
        let _ = stream.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("raw HTTP answered in time")
}

/// The status code of a raw HTTP answer (its first line).
pub(crate) fn raw_status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

/// A local Redis Cluster (redis_sharded*).
pub(crate) mod cluster;
/// Helpers for the ws_* tests (raw handshakes and frames, metrics, waiting).
pub(crate) mod redis;
pub(crate) mod ws;

impl Gateway {
    /// A handle on a gateway already running at `addr` (for requests from
    /// spawned tasks); dropping it stops nothing.
    pub(crate) fn attach(addr: SocketAddr) -> Self {
        let state = pushgate::gateway::Gateway::new(config()).expect("state");
        Self {
            addr,
            state,
            stop: None,
            task: None,
        }
    }
}

/// Helpers for the poll_*, sse_*, resume_* tests (plain HTTP from spawned
/// tasks, an SSE client, a resume over any transport).
pub(crate) mod browser;

/// The `pushgate` binary as a child process (cli_logs, hardening_secrets).
pub(crate) mod process;

impl Gateway {
    /// `connect`, as a future that owns its arguments (for `join_all`).
    pub(crate) fn connect_owned(
        &self,
        user: String,
    ) -> impl std::future::Future<Output = Ws> + use<> {
        let url = self.ws_url(&format!("token={}", token(&user, 3600)));
        async move {
            tokio_tungstenite::connect_async(url)
                .await
                .expect("ws connects")
                .0
        }
    }
}

/// Asserts that `frame` is a `recover` frame saying `complete`; `context`
/// (a transport, say) leads the failure message.
#[track_caller]
pub(crate) fn assert_recover(frame: &serde_json::Value, complete: bool, context: &str) {
    assert_eq!(
        (frame["type"].as_str(), frame["complete"].as_bool()),
        (Some("recover"), Some(complete)),
        "{context}: {frame}"
    );
}
