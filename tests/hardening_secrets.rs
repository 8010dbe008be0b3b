//! No secret in logs or metrics: a gateway with a known `[auth] secret` and
//! `api_key` is driven through auth failures and successes on every
//! endpoint (including credentials that contain the secrets, as a careless
//! client would send them) while every log line at TRACE, `log` records
//! from dependencies included, is captured into a buffer; then neither the
//! secret, nor the API key, nor any client token may appear in the
//! captured logs or in `/metrics`.
//!
//! The same holds for the binary as an operator runs it: a DEBUG run of
//! `pushgate` with JSON logs, on a Redis that requires a password, driven
//! through the same kinds of traffic, start-up and shutdown included, and
//! one start with a wrong Redis password that fails: neither stdout nor
//! stderr shows the secret, the API key, a token or the Redis password,
//! and neither does `pushgate check-config`.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use hyper::Method;
use pushgate::protocol::UserId;
use serde_json::json;
use support::Gateway;
use support::browser::{Sse, get};
use support::process::Process;
use support::redis::PrivateRedis;
use support::ws::{alg_none_token, opcode, raw_handshake, upgrade_request};

/// The secrets under test: not user ids, unlike anything else the gateway
/// prints, and long enough for validation.
const SECRET: &str = "hardening-secret/Zq7+never~logged";
const API_KEY: &str = "hardening-api-key/Xw3+never~logged";

/// The Redis password of the binary's run: URL-safe, so it appears in the
/// URL as written.
const REDIS_PASSWORD: &str = "hardening-redis-password-Kp5-never-logged";

/// Headers, path and the status a push must get.
type PushAttempt<'a> = (Vec<(&'a str, String)>, &'a str, u16);

/// Every byte the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

fn mint(secret: &str, user: &str, exp: u64) -> String {
    let user = UserId::parse(user).expect("user id");
    pushgate::auth::token::mint(secret.as_bytes(), &user, exp)
}

/// Panics naming the first of `needles` found in `haystack`.
fn assert_absent(place: &str, haystack: &str, needles: &[(&str, &str)]) {
    for (name, needle) in needles {
        assert!(
            !haystack.contains(needle),
            "{name} appears in {place}: …{}…",
            context(haystack, needle)
        );
    }
}

fn context<'a>(haystack: &'a str, needle: &str) -> &'a str {
    let at = haystack.find(needle).unwrap_or(0);
    let start = haystack[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = haystack[at..].find('\n').map_or(haystack.len(), |i| at + i);
    &haystack[start..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_appears_in_logs_or_metrics() {
    let logs = Captured::default();
    let writer = logs.clone();
    // Everything at TRACE but the test's own WebSocket client handshake,
    // which runs in this process and prints the request it sends (token
    // included): that line is the client's, not the gateway's.
    tracing_subscriber::fmt()
        .with_env_filter("trace,tungstenite::handshake::client=off")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .try_init()
        .expect("the only subscriber in this test binary");

    let mut config = support::config();
    config.auth.secret = SECRET.into();
    config.auth.api_key = API_KEY.into();
    config.demo.enabled = true;
    config.session.ping_interval_secs = 1;
    config.session.idle_timeout_secs = 3;
    let gw = Gateway::start(config.clone()).await;
    let now = pushgate::gateway::Gateway::unix_now();
    let good = mint(SECRET, "alice", now + 3600);
    let forged = mint("not-the-secret-0123456789", "alice", now + 3600);
    let expired = mint(SECRET, "alice", now - 10);
    let none = alg_none_token("alice");

    // Pushes: right key, wrong keys, keys that contain the real one.
    let body = json!({"to": "*", "data": "hello"}).to_string();
    let bearer = format!("Bearer {API_KEY}");
    let pushes: [PushAttempt<'_>; 6] = [
        (vec![("authorization", bearer.clone())], "/push", 202),
        (vec![("authorization", format!("{bearer}x"))], "/push", 401),
        (
            vec![("authorization", format!("Basic {API_KEY}"))],
            "/push",
            401,
        ),
        (vec![("authorization", API_KEY.to_owned())], "/push", 401),
        (
            vec![("authorization", format!("Bearer {SECRET}"))],
            "/push",
            401,
        ),
        (vec![], &format!("/push?api_key={API_KEY}"), 401),
    ];
    for (headers, path, status) in &pushes {
        let mut headers: Vec<(&str, &str)> =
            headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        headers.push(("content-type", "application/json"));
        let resp = gw.request(Method::POST, path, &headers, body.clone()).await;
        assert_eq!(resp.status.as_u16(), *status, "{path} {headers:?}");
    }
    let users = gw
        .request(
            Method::GET,
            "/users/alice",
            &[("authorization", &bearer)],
            Bytes::new(),
        )
        .await;
    assert_eq!(users.status, 200);
    let users = gw
        .request(
            Method::GET,
            "/users/alice",
            &[("authorization", &format!("{bearer}!"))],
            Bytes::new(),
        )
        .await;
    assert_eq!(users.status, 401);

    // Clients: a good token on each transport, then refused ones.
    // A raw client: it answers no ping, so the idle eviction comes on its
    // own while the test reads.
    let target = format!("/ws?token={good}");
    let answer = raw_handshake(gw.addr, &upgrade_request("GET", &target, &[], &[])).await;
    assert_eq!(answer.status, 101, "{answer:?}");
    let mut ws = answer.ws;
    let pushed = gw
        .request(
            Method::POST,
            "/push",
            &[
                ("authorization", &bearer),
                ("content-type", "application/json"),
            ],
            body.clone(),
        )
        .await;
    assert_eq!(pushed.status, 202);
    let frame = ws.next_frame(Duration::from_secs(5)).await;
    assert!(
        frame.as_ref().is_some_and(|f| f.opcode == opcode::TEXT),
        "ws got the push: {frame:?}"
    );
    let poll = get(
        gw.addr,
        "/poll?cursor=0000000000000000-0",
        &[("authorization", &format!("Bearer {good}"))],
    )
    .await;
    assert_eq!(poll.status, 200);
    let sse = Sse::open(gw.addr, &format!("/sse?token={good}"), &[]).await;
    assert_eq!(sse.status, 200);
    drop(sse);
    for bad in [
        &forged,
        &expired,
        &none,
        &SECRET.to_owned(),
        &API_KEY.to_owned(),
    ] {
        let target = format!("/ws?token={}", urlencode(bad));
        let answer = raw_handshake(gw.addr, &upgrade_request("GET", &target, &[], &[])).await;
        assert_eq!(answer.status, 401, "ws {bad}");
        let poll = get(
            gw.addr,
            "/poll",
            &[("authorization", &format!("Bearer {bad}"))],
        )
        .await;
        assert_eq!(poll.status, 401, "poll {bad}");
        let sse = get(gw.addr, &format!("/sse?token={}", urlencode(bad)), &[]).await;
        assert_eq!(sse.status, 401, "sse {bad}");
    }
    // Demo mode mints a token with the secret.
    let demo = gw
        .request(
            Method::POST,
            "/demo/token",
            &[("content-type", "application/json")],
            json!({"user": "bob"}).to_string(),
        )
        .await;
    assert_eq!(demo.status, 200, "{demo:?}");
    let demo_token = demo.json()["token"].as_str().expect("token").to_owned();
    // The WebSocket idles out (no pong goes back), so the expiry and close
    // paths log too.
    let frames = ws.frames_until_close(Duration::from_secs(10)).await;
    let close = frames.last().filter(|f| f.opcode == opcode::CLOSE);
    assert_eq!(close.and_then(|f| f.close_code()), Some(4001), "{frames:?}");

    let metrics = gw.metrics().await;
    gw.stop(Duration::from_secs(10)).await;
    let logs = logs.text();
    assert!(
        logs.contains("push refused") && logs.contains("connection opened"),
        "the capture saw the gateway's debug lines:\n{logs}"
    );
    let secrets = [
        ("auth.secret", SECRET),
        ("auth.api_key", API_KEY),
        ("a client token", good.as_str()),
        ("a forged token", forged.as_str()),
        ("a demo token", demo_token.as_str()),
    ];
    assert_absent("the logs", &logs, &secrets);
    assert_absent("/metrics", &metrics, &secrets);
    assert_absent("Debug of the config", &format!("{config:?}"), &secrets[..2]);
    assert_absent(
        "check-config output",
        &config.to_masked_toml(),
        &secrets[..2],
    );
    println!(
        "secrets: {} bytes of TRACE logs and {} bytes of metrics checked, no secret found",
        logs.len(),
        metrics.len()
    );
}

/// Percent-encodes the characters of the test secrets that a query
/// string would otherwise misread (`+`, `/`, `~` stay readable to
/// `form_urlencoded` only when encoded).
fn urlencode(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs `pushgate` with `env` plus the test's secrets and JSON logs at
/// `PUSHGATE_LOG` = `level`.
fn binary(name: &str, args: &[&str], redis_url: &str, level: &str) -> Process {
    Process::start(
        name,
        args,
        &[
            ("PUSHGATE_AUTH_SECRET", SECRET),
            ("PUSHGATE_AUTH_API_KEY", API_KEY),
            ("PUSHGATE_BROKER_KIND", "redis"),
            ("PUSHGATE_BROKER_URL", redis_url),
            (
                "PUSHGATE_BROKER_KEY_PREFIX",
                &support::redis::prefix("secrets"),
            ),
            ("PUSHGATE_BROKER_START_WAIT_SECS", "2"),
            ("PUSHGATE_SERVER_DRAIN_TIMEOUT_SECS", "1"),
            ("PUSHGATE_LOG_FORMAT", "json"),
            ("PUSHGATE_LOG", level),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_appears_in_a_debug_run_of_the_binary() {
    if !support::redis::available() {
        return;
    }
    let redis = PrivateRedis::start_with_password(REDIS_PASSWORD);
    let url = redis.url();
    assert!(url.contains(REDIS_PASSWORD));
    let args = ["--config", "config.toml"];
    let mut gw = binary("secrets-debug", &args, &url, "debug");
    gw.wait_healthy().await;
    let api = Gateway::attach(gw.addr);
    let now = pushgate::gateway::Gateway::unix_now();
    let good = mint(SECRET, "alice", now + 3600);
    let forged = mint("not-the-secret-0123456789", "alice", now + 3600);
    let bearer = format!("Bearer {API_KEY}");
    let json_type = ("content-type", "application/json");

    // A client with a good token on each transport; pushes and a presence
    // query with the right key and with keys in the wrong places.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws?token={good}", gw.addr))
        .await
        .expect("ws connects");
    let body = json!({"to": "*", "data": "hello"}).to_string();
    let pushes = [
        (bearer.clone(), "/push".to_owned(), 202),
        (format!("{bearer}x"), "/push".to_owned(), 401),
        (API_KEY.to_owned(), "/push".to_owned(), 401),
        (String::new(), format!("/push?api_key={API_KEY}"), 401),
    ];
    for (auth, path, status) in &pushes {
        let mut headers = vec![json_type];
        if !auth.is_empty() {
            headers.push(("authorization", auth));
        }
        let resp = api
            .request(Method::POST, path, &headers, body.clone())
            .await;
        assert_eq!(resp.status.as_u16(), *status, "{path} {auth}");
    }
    let frame = tokio::time::timeout(Duration::from_secs(5), ws.next()).await;
    assert!(
        matches!(frame, Ok(Some(Ok(_)))),
        "ws got the push: {frame:?}"
    );
    let users = api
        .request(
            Method::GET,
            "/users/alice",
            &[("authorization", &bearer)],
            "",
        )
        .await;
    assert_eq!(users.status, 200, "presence through Redis");
    let poll = get(
        gw.addr,
        "/poll?cursor=0000000000000000-0",
        &[("authorization", &format!("Bearer {good}"))],
    )
    .await;
    assert_eq!(poll.status, 200);
    let sse = Sse::open(gw.addr, &format!("/sse?token={good}"), &[]).await;
    assert_eq!(sse.status, 200);
    drop(sse);
    for bad in [&forged, &SECRET.to_owned(), &API_KEY.to_owned()] {
        let target = format!("/ws?token={}", urlencode(bad));
        let answer = raw_handshake(gw.addr, &upgrade_request("GET", &target, &[], &[])).await;
        assert_eq!(answer.status, 401, "ws {bad}");
        let poll = get(
            gw.addr,
            "/poll",
            &[("authorization", &format!("Bearer {bad}"))],
        )
        .await;
        assert_eq!(poll.status, 401, "poll {bad}");
    }
    let demo = api
        .request(
            Method::POST,
            "/demo/token",
            &[json_type],
            json!({"user": "bob"}).to_string(),
        )
        .await;
    assert_eq!(demo.status, 200, "{demo:?}");
    let demo_token = demo.json()["token"].as_str().expect("token").to_owned();
    let metrics = api.metrics().await;
    drop(ws);
    let status = gw.stop(Duration::from_secs(10)).await;
    assert!(status.success(), "{status}:\n{}", gw.stderr());

    // A start with the wrong Redis password fails, and says so without
    // either password.
    let wrong_url = url.replace(REDIS_PASSWORD, "wrong-redis-password-Jq8-never-logged");
    let mut refused = binary("secrets-wrong-redis", &args, &wrong_url, "debug");
    let failed = refused.wait_exit(Duration::from_secs(30)).await;
    assert!(!failed.success(), "a wrong Redis password stops start-up");
    // check-config prints the effective configuration, secrets masked.
    let mut check = binary("secrets-check-config", &["check-config"], &url, "debug");
    let checked = check.wait_exit(Duration::from_secs(30)).await;
    assert!(checked.success(), "{checked}:\n{}", check.stderr());
    assert!(
        check.stdout().contains("redis://:***@127.0.0.1"),
        "{}",
        check.stdout()
    );

    let logs = gw.stdout();
    for line in logs.lines() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    }
    assert!(
        logs.contains("push refused") && logs.contains("connection opened"),
        "the run logged at DEBUG:\n{logs}"
    );
    let refused_out = format!("{}{}", refused.stdout(), refused.stderr());
    assert!(
        refused_out.contains("WRONGPASS") || refused_out.contains("redis"),
        "{refused_out}"
    );
    let secrets = [
        ("auth.secret", SECRET),
        ("auth.api_key", API_KEY),
        ("a client token", good.as_str()),
        ("a forged token", forged.as_str()),
        ("a demo token", demo_token.as_str()),
        ("the Redis password", REDIS_PASSWORD),
        (
            "the wrong Redis password",
            "wrong-redis-password-Jq8-never-logged",
        ),
    ];
    assert_absent("the binary's stdout", &logs, &secrets);
    assert_absent("the binary's stderr", &gw.stderr(), &secrets);
    assert_absent("a failed start's output", &refused_out, &secrets);
    assert_absent("check-config", &check.stdout(), &secrets);
    assert_absent("/metrics", &metrics, &secrets);
    println!(
        "secrets: {} bytes of DEBUG JSON logs from the binary, a failed start and check-config checked, no secret found",
        logs.len()
    );
}
