//! `[limits] max_connections_per_ip` and `connection_rate_per_ip`: a client
//! address past either gets `503 ip_limit` on a new connection, open
//! WebSockets and SSE streams keep counting until they close, and refusals
//! are counted in `pushgate_connections_refused_total{reason}`.
//!
//! Every client here is 127.0.0.1. The metrics are read from a separate
//! metrics listener, which has no per-address limits.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use pushgate::config::Config;
use pushgate::peers::{IP_LIMIT_RETRY_AFTER_SECS, PeerLimits};
use pushgate::server::admission::REFUSALS_IN_FLIGHT;
use support::ws::{eventually, metric};
use support::{config, raw_http, raw_status, token};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(10);
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: pushgate\r\nConnection: close\r\n\r\n";

/// A gateway with a metrics listener and a handle on its per-address counts.
struct Running {
    addr: SocketAddr,
    metrics_addr: SocketAddr,
    peers: Arc<PeerLimits>,
    _stop: oneshot::Sender<()>,
}

/// The refusal counters are process-wide (one metrics recorder per test
/// binary): a test that refuses connections for a reason holds that
/// reason's lock, so a test reading the counter sees only its own refusals.
static IP_LIMIT_SERIES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn start(max_per_ip: usize, rate_per_ip: u32) -> Running {
    let mut config: Config = config();
    config.limits.max_connections_per_ip = max_per_ip;
    config.limits.connection_rate_per_ip = rate_per_ip;
    start_with(config).await
}

/// Starts `config` with a metrics listener added.
async fn start_with(mut config: Config) -> Running {
    config.metrics.listen = Some("127.0.0.1:0".into());
    config.validate().expect("valid");
    let server = pushgate::Server::bind(config).await.expect("bind");
    let addr = server.local_addr();
    let metrics_addr = server.metrics_addr().expect("metrics listener");
    let peers = Arc::clone(server.admission().peers());
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Running {
        addr,
        metrics_addr,
        peers,
        _stop: stop,
    }
}

impl Running {
    async fn refused_total(&self, reason: &str) -> f64 {
        let request = b"GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n";
        let text = raw_http(self.metrics_addr, request).await;
        let series = format!("pushgate_connections_refused_total{{reason=\"{reason}\"}}");
        metric(&text, &series).unwrap_or_else(|| panic!("no {series} in:\n{text}"))
    }

    async fn open_is(&self, n: usize) {
        let peers = Arc::clone(&self.peers);
        eventually(WAIT, &format!("{n} connections counted"), move || {
            let open = peers.open_from(LOOPBACK);
            async move { open == n }
        })
        .await;
    }
}

/// The JSON body of a raw HTTP answer.
fn body_json(answer: &str) -> serde_json::Value {
    let (_, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {answer:?}"))
}

fn header<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    answer.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// Opens an SSE stream for `user` and waits for its response head.
async fn open_sse(addr: SocketAddr, user: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "GET /sse?token={} HTTP/1.1\r\nHost: pushgate\r\n\r\n",
        token(user, 3600)
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = [0u8; 12];
    tokio::time::timeout(WAIT, stream.read_exact(&mut head))
        .await
        .expect("sse answered in time")
        .expect("read");
    assert_eq!(&head, b"HTTP/1.1 200", "sse stream opened");
    stream
}

#[tokio::test]
async fn a_connection_past_the_per_ip_limit_gets_503_ip_limit() {
    let _series = IP_LIMIT_SERIES.lock().await;
    let gw = start(2, 0).await;
    let before = gw.refused_total("ip_limit").await;
    let held = [
        TcpStream::connect(gw.addr).await.expect("first"),
        TcpStream::connect(gw.addr).await.expect("second"),
    ];
    gw.open_is(2).await;

    let answer = raw_http(gw.addr, HEALTHZ).await;
    assert_eq!(raw_status(&answer), 503, "{answer}");
    assert_eq!(body_json(&answer)["error"]["code"], "ip_limit", "{answer}");
    let retry = IP_LIMIT_RETRY_AFTER_SECS.to_string();
    assert_eq!(header(&answer, "retry-after"), Some(retry.as_str()));
    assert_eq!(header(&answer, "content-type"), Some("application/json"));
    assert_eq!(gw.refused_total("ip_limit").await, before + 1.0);

    drop(held);
    gw.open_is(0).await;
    assert_eq!(raw_status(&raw_http(gw.addr, HEALTHZ).await), 200);
    gw.open_is(0).await;
}

#[tokio::test]
async fn websockets_and_sse_streams_count_until_they_close() {
    let _series = IP_LIMIT_SERIES.lock().await;
    let gw = start(2, 0).await;
    let ws = support::Gateway::attach(gw.addr).connect("alice").await;
    let sse = open_sse(gw.addr, "bob").await;
    gw.open_is(2).await;
    let answer = raw_http(gw.addr, HEALTHZ).await;
    assert_eq!(raw_status(&answer), 503, "{answer}");
    assert_eq!(body_json(&answer)["error"]["code"], "ip_limit", "{answer}");

    let handle = support::Gateway::attach(gw.addr);
    let query = format!("token={}", token("carol", 60));
    match handle.try_connect(&query, &[]).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 503);
            let body = resp.body().as_deref().unwrap_or_default();
            let json: serde_json::Value = serde_json::from_slice(body)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(body)));
            assert_eq!(json["error"]["code"], "ip_limit", "{json}");
        }
        other => panic!("expected a 503 handshake answer, got {other:?}"),
    }

    drop(ws);
    gw.open_is(1).await;
    assert_eq!(raw_status(&raw_http(gw.addr, HEALTHZ).await), 200);
    drop(sse);
    gw.open_is(0).await;
}

#[tokio::test]
async fn connections_faster_than_the_per_ip_rate_get_503_ip_limit() {
    let gw = start(0, 2).await;
    let before = gw.refused_total("ip_rate").await;
    for n in 0..2 {
        let answer = raw_http(gw.addr, HEALTHZ).await;
        assert_eq!(raw_status(&answer), 200, "connection {n} of the burst");
    }
    let answer = raw_http(gw.addr, HEALTHZ).await;
    assert_eq!(raw_status(&answer), 503, "{answer}");
    let error = &body_json(&answer)["error"];
    assert_eq!(error["code"], "ip_limit");
    let message = error["message"].as_str().expect("message");
    assert!(message.contains("too fast"), "{message}");
    assert_eq!(header(&answer, "retry-after"), Some("1"));
    assert_eq!(gw.refused_total("ip_rate").await, before + 1.0);

    // One connection's worth of rate comes back every half second.
    let addr = gw.addr;
    eventually(
        WAIT,
        "the rate admits a connection again",
        move || async move { raw_status(&raw_http(addr, HEALTHZ).await) == 200 },
    )
    .await;
}

#[tokio::test]
async fn a_flood_of_refused_connections_is_closed_without_an_answer() {
    let _series = IP_LIMIT_SERIES.lock().await;
    let mut config = config();
    config.limits.max_connections_per_ip = 1;
    config.limits.connection_rate_per_ip = 0;
    config.server.header_timeout_secs = 5;
    let gw = start_with(config).await;
    let before = gw.refused_total("ip_limit").await;
    let _held = TcpStream::connect(gw.addr).await.expect("held");
    gw.open_is(1).await;
    // Refused and silent: each holds an answering slot until it sends a
    // request or the refusal's header timeout passes.
    let mut silent = Vec::new();
    for _ in 0..REFUSALS_IN_FLIGHT {
        silent.push(TcpStream::connect(gw.addr).await.expect("connect"));
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    while gw.refused_total("ip_limit").await < before + REFUSALS_IN_FLIGHT as f64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the silent connections were not all refused within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let answer = raw_http(gw.addr, HEALTHZ).await;
    assert_eq!(answer, "", "closed at once, nothing answered");

    // Once the silent ones are gone, refusals are answered again.
    drop(silent);
    let addr = gw.addr;
    eventually(WAIT, "refusals answered again", move || async move {
        let answer = raw_http(addr, HEALTHZ).await;
        answer.starts_with("HTTP/1.1 503") && answer.contains(r#""code":"ip_limit""#)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_defaults_300_websockets_open_at_once_from_one_address() {
    // Everything as shipped but the listen address and the keys: an office
    // or a carrier's NAT puts hundreds of users behind one address, and a
    // gateway restart sends them all back at once.
    let mut config = config();
    config.limits = pushgate::config::LimitsConfig::default();
    let gw = support::Gateway::start(config).await;
    let opened = futures_util::future::join_all((0..300).map(|n| {
        let handle = support::Gateway::attach(gw.addr);
        async move {
            let query = format!("token={}", token(&format!("nat-{n}"), 3600));
            handle.try_connect(&query, &[]).await
        }
    }))
    .await;
    let refused: Vec<String> = opened
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert!(
        refused.is_empty(),
        "{} of 300 refused: {:?}",
        refused.len(),
        &refused[..refused.len().min(3)]
    );
    let state = std::sync::Arc::clone(&gw.state);
    eventually(WAIT, "300 connections held", move || {
        let held = state.inspect().connections;
        async move { held == 300 }
    })
    .await;
}
