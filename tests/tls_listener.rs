//! `[server] tls_cert` / `tls_key`: the main listener speaks TLS, so
//! `https://` and `wss://` work without a proxy. A self-signed certificate
//! for `localhost` is generated per test with rcgen.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use pushgate::config::Config;
use serde_json::json;
use support::{API_KEY, Gateway, config, raw_http, raw_status, token};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto::ring};
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(10);

/// A certificate and key on disk, and a client that trusts them.
struct Tls {
    dir: PathBuf,
    connector: TlsConnector,
}

impl Tls {
    fn new(name: &str) -> Self {
        let cert =
            rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("certificate");
        let dir = std::env::temp_dir().join(format!(
            "pushgate-tls-listener-{name}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("cert.pem"), cert.cert.pem()).expect("cert");
        std::fs::write(dir.join("key.pem"), cert.signing_key.serialize_pem()).expect("key");
        let mut roots = RootCertStore::empty();
        roots.add(cert.cert.der().clone()).expect("trust the cert");
        let mut client = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self {
            dir,
            connector: TlsConnector::from(Arc::new(client)),
        }
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    fn config(&self) -> Config {
        let mut config = config();
        config.server.tls_cert = Some(self.path("cert.pem"));
        config.server.tls_key = Some(self.path("key.pem"));
        config
    }

    async fn connect(&self, addr: SocketAddr) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(addr).await.expect("tcp connect");
        let name = ServerName::try_from("localhost").expect("server name");
        tokio::time::timeout(WAIT, self.connector.connect(name, tcp))
            .await
            .expect("handshake in time")
            .expect("tls handshake")
    }

    /// Sends `request` (with `Connection: close`) over TLS and returns the
    /// whole answer.
    async fn https(&self, addr: SocketAddr, request: &str) -> String {
        let mut stream = self.connect(addr).await;
        stream.write_all(request.as_bytes()).await.expect("write");
        read_all(&mut stream).await
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Everything until the peer closes (an abrupt close keeps what came).
async fn read_all(stream: &mut (impl AsyncRead + Unpin)) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(WAIT, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "closed in time");
    String::from_utf8_lossy(&answer).into_owned()
}

fn healthz(addr: SocketAddr) -> String {
    format!(
        "GET /healthz HTTP/1.1\r\nHost: localhost:{}\r\nConnection: close\r\n\r\n",
        addr.port()
    )
}

#[tokio::test]
async fn https_serves_healthz_with_alpn_http_1_1() {
    let tls = Tls::new("healthz");
    let gw = Gateway::start(tls.config()).await;
    let mut stream = tls.connect(gw.addr).await;
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    stream
        .write_all(healthz(gw.addr).as_bytes())
        .await
        .expect("write");
    let answer = read_all(&mut stream).await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    assert!(answer.ends_with(r#"{"status":"ok"}"#), "{answer}");
}

#[tokio::test]
async fn a_wss_client_receives_a_broadcast_pushed_over_https() {
    let tls = Tls::new("wss");
    let gw = Gateway::start(tls.config()).await;
    let stream = tls.connect(gw.addr).await;
    let url = format!(
        "wss://localhost:{}/ws?token={}",
        gw.addr.port(),
        token("alice", 3600)
    );
    let (mut ws, resp) = tokio_tungstenite::client_async(url, stream)
        .await
        .expect("wss handshake");
    assert_eq!(resp.status(), 101);
    support::ws::eventually(WAIT, "the wss connection registered", || async {
        gw.state.inspect().connections == 1
    })
    .await;

    let body = json!({"to": "*", "data": {"hello": "tls"}}).to_string();
    let push = format!(
        "POST /push HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {API_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = tls.https(gw.addr, &push).await;
    assert_eq!(raw_status(&answer), 202, "{answer}");

    let frame = loop {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time")
            .expect("open")
            .expect("no ws error");
        if let Message::Text(text) = msg {
            break serde_json::from_str::<serde_json::Value>(&text).expect("JSON frame");
        }
    };
    assert_eq!(frame["type"], "message");
    assert_eq!(frame["stream"], "broadcast");
    assert_eq!(frame["data"], json!({"hello": "tls"}));
}

/// The head of the answer to `request` on `stream`: the status line and
/// header lines as sent, but `date` (it moves by the second).
async fn answer_head(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    request: &str,
) -> Vec<String> {
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, stream.read(&mut byte))
            .await
            .expect("an answer in time")
            .expect("read");
        assert_eq!(
            n,
            1,
            "closed inside the head: {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    String::from_utf8(head)
        .expect("ASCII head")
        .split("\r\n")
        .filter(|line| !line.is_empty() && !line.to_ascii_lowercase().starts_with("date:"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_websocket_handshake_is_answered_alike_over_tls_and_plain_tcp() {
    use support::ws::upgrade_request;
    let tls = Tls::new("ws-heads");
    let secure = Gateway::start(tls.config()).await;
    let plain = Gateway::start(config()).await;
    let good = format!("/ws?token={}", token("alice", 3600));
    let requests = [
        upgrade_request("GET", &good, &[], &[]),
        upgrade_request("GET", &good, &[("Sec-WebSocket-Version", "8")], &[]),
        upgrade_request("GET", "/ws?token=nope", &[], &[]),
    ];
    for request in requests {
        // hyper answers over TLS, the front door on plain TCP.
        let mut over_tls = tls.connect(secure.addr).await;
        let mut over_tcp = TcpStream::connect(plain.addr).await.expect("tcp connect");
        let by_hyper = answer_head(&mut over_tls, &request).await;
        let by_front_door = answer_head(&mut over_tcp, &request).await;
        assert_eq!(by_front_door, by_hyper, "{request}");
    }
}

#[tokio::test]
async fn plain_http_to_the_tls_port_is_refused_and_the_gateway_keeps_serving() {
    let tls = Tls::new("plain");
    let gw = Gateway::start(tls.config()).await;

    let answer = raw_http(gw.addr, healthz(gw.addr).as_bytes()).await;
    assert_eq!(raw_status(&answer), 400, "{answer}");
    assert!(answer.contains("\"code\":\"bad_request\""), "{answer}");
    assert!(answer.contains("speaks TLS"), "{answer}");

    // A broken handshake is dropped too.
    let mut junk = TcpStream::connect(gw.addr).await.expect("connect");
    junk.write_all(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5])
        .await
        .expect("write");
    let dropped = read_all(&mut junk).await;
    assert!(
        !dropped.contains("HTTP/"),
        "a broken handshake gets no HTTP answer: {dropped:?}"
    );

    let answer = tls.https(gw.addr, &healthz(gw.addr)).await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    let metrics = tls
        .https(
            gw.addr,
            "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        )
        .await;
    let refused = support::ws::metric(
        &metrics,
        r#"pushgate_connections_refused_total{reason="tls"}"#,
    );
    assert!(refused.is_some_and(|n| n >= 2.0), "{refused:?}");
}

#[tokio::test]
async fn a_connection_over_the_per_ip_limit_on_tls_is_closed_at_once() {
    let tls = Tls::new("limit");
    let mut config = tls.config();
    config.limits.max_connections_per_ip = 1;
    let gw = Gateway::start(config).await;
    let _held = tls.connect(gw.addr).await;

    let mut refused = TcpStream::connect(gw.addr).await.expect("tcp connect");
    let answer = read_all(&mut refused).await;
    assert_eq!(answer, "", "closed without a handshake or an answer");
}

#[tokio::test]
async fn unusable_certificate_files_stop_start_up_naming_the_key() {
    let tls = Tls::new("bad");
    let mut missing = tls.config();
    missing.server.tls_cert = Some(tls.path("nope.pem"));
    let err = pushgate::Server::bind(missing)
        .await
        .expect_err("missing cert");
    let text = err.to_string();
    assert!(text.starts_with("server.tls_cert: cannot read"), "{text}");
    assert!(text.contains("nope.pem"), "{text}");

    let mut swapped = tls.config();
    swapped.server.tls_key = Some(tls.path("cert.pem"));
    let err = pushgate::Server::bind(swapped).await.expect_err("no key");
    assert!(
        err.to_string()
            .starts_with("server.tls_key: no private key"),
        "{err}"
    );

    let mut half = tls.config();
    half.server.tls_key = None;
    let err = half.validate().expect_err("cert without key");
    assert!(
        err.to_string().starts_with("server.tls_key: must be set"),
        "{err}"
    );
}
