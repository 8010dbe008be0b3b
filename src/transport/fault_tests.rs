//! A connection task that panics releases everything its connection held
//! (registry slot, connections gauge, timer entry), on every transport.
//! Test builds make the task of `gateway::PANIC_USER` panic once it serves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::auth::token::mint;
use crate::config::Config;
use crate::gateway::{Gateway, PANIC_USER};
use crate::protocol::{Transport, UserId};

const SECRET: &str = "fault-test-secret-0123456789";
const WAIT: Duration = Duration::from_secs(10);

fn config() -> Config {
    let mut c = Config::default();
    c.server.listen = "127.0.0.1:0".into();
    c.auth.secret = SECRET.into();
    c.auth.api_key = "fault-test-api-key-0123456789".into();
    c.limits.max_connections_per_ip = 0;
    c.limits.connection_rate_per_ip = 0;
    c
}

async fn start() -> (SocketAddr, Arc<Gateway>) {
    let server = crate::Server::bind(config()).await.expect("bind");
    let addr = server.local_addr();
    let gw = Arc::clone(server.gateway());
    tokio::spawn(server.run(std::future::pending()));
    // Running once it armed its own entry (the history sweep).
    let deadline = tokio::time::Instant::now() + WAIT;
    while gw.timer.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (addr, gw)
}

fn token() -> String {
    let user = UserId::parse(PANIC_USER).expect("valid user id");
    mint(SECRET.as_bytes(), &user, Gateway::unix_now() + 600)
}

/// Sends `request` and reads until the server closes (or `WAIT`).
async fn exchange(addr: SocketAddr, request: String) -> String {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(WAIT, tcp.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// `pushgate_connections{transport=…}` as `/metrics` renders it now.
async fn gauge(addr: SocketAddr, transport: Transport) -> String {
    let answer = exchange(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".into(),
    )
    .await;
    let series = format!(
        "pushgate_connections{{transport=\"{}\"}} ",
        transport.as_str()
    );
    answer
        .lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .unwrap_or_else(|| panic!("{series} in {answer}"))
        .to_owned()
}

/// Waits until nothing of any connection is left.
async fn released(addr: SocketAddr, gw: &Gateway, own_timers: usize, transport: Transport) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while gw.registry.connections() != 0
        || gw.registry.connections_of(transport) != 0
        || gw.timer.len() != own_timers
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{transport:?}: {} connections, {} timer entries (own: {own_timers}) left",
            gw.registry.connections(),
            gw.timer.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(gauge(addr, transport).await, "0", "{transport:?} gauge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_task_that_panics_releases_its_slot_gauge_and_timer_entry() {
    let (addr, gw) = start().await;
    let own_timers = gw.timer.len();
    let token = token();

    // WebSocket: upgraded (so attached and armed), then its task panics.
    let request = format!(
        "GET /ws?token={token} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    let answer = exchange(addr, request).await;
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    released(addr, &gw, own_timers, Transport::Ws).await;

    // SSE on the front door's raw socket: the head and the retry field
    // are out, then its task panics.
    let answer = exchange(
        addr,
        format!("GET /sse?token={token} HTTP/1.1\r\nHost: x\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("retry:"), "{answer}");
    released(addr, &gw, own_timers, Transport::Sse).await;

    // Long-poll: parked, then its task panics; no answer ever comes. The
    // session entry it made lives on for session_ttl_secs, as after any
    // poll, so only the poll's own slot is checked here.
    let answer = exchange(
        addr,
        format!("GET /poll?token={token} HTTP/1.1\r\nHost: x\r\n\r\n"),
    )
    .await;
    assert_eq!(answer, "", "the panicking poll answers nothing");
    released(addr, &gw, own_timers + 1, Transport::Poll).await;
}
