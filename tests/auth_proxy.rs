//! The connect proxy (`[auth] connect_proxy_url`) against a real gateway:
//! a client with no token is put to a small HTTP server in this process
//! (the "site"), which answers as each test tells it. Every wait has a
//! deadline.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use pushgate::config::Config;
use pushgate::protocol::Transport;
use serde_json::{Value, json};
use support::browser::{Sse, get, poll_frames, spawn_get, wait_for_connections};
use support::ws::{metric, raw_handshake, upgrade_request};
use support::{Gateway, config, next_json, read_until_close, token};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

const WAIT: Duration = Duration::from_secs(10);
const COOKIE: &str = "sid=s3cr3t; theme=dark";
const ORIGIN: &str = "https://app.example";
const AGENT: &str = "pushgate-test/1";

/// `fut`'s output, or a panic naming `what` once [`WAIT`] has passed.
async fn within<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(WAIT, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {WAIT:?}"))
}

/// What the site answers.
#[derive(Debug, Clone)]
enum Answer {
    /// This status and body.
    With(u16, String),
    /// Nothing until released, then this status and body.
    Held(u16, String),
}

/// The site: a hyper server that records every body it is posted and
/// answers with `answer`.
struct Site {
    addr: SocketAddr,
    answer: Arc<Mutex<Answer>>,
    seen: mpsc::UnboundedReceiver<Value>,
    release: watch::Sender<bool>,
    max_in_flight: Arc<AtomicUsize>,
}

impl Site {
    async fn start(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let answer = Arc::new(Mutex::new(answer));
        let (seen_tx, seen) = mpsc::unbounded_channel();
        let (release, released) = watch::channel(false);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let max_in_flight = Arc::new(AtomicUsize::new(0));
        let (a, max) = (Arc::clone(&answer), Arc::clone(&max_in_flight));
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (a, seen_tx, released) = (Arc::clone(&a), seen_tx.clone(), released.clone());
                let (in_flight, max) = (Arc::clone(&in_flight), Arc::clone(&max));
                let service = service_fn(move |req: Request<Incoming>| {
                    let (a, seen_tx, mut released) =
                        (Arc::clone(&a), seen_tx.clone(), released.clone());
                    let (in_flight, max) = (Arc::clone(&in_flight), Arc::clone(&max));
                    async move {
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(now, Ordering::SeqCst);
                        let ok = req.method() == hyper::Method::POST
                            && req
                                .headers()
                                .get("content-type")
                                .and_then(|v| v.to_str().ok())
                                == Some("application/json");
                        let basic = req
                            .headers()
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        let body = req.into_body().collect().await.map(|b| b.to_bytes());
                        let mut body: Value = body
                            .ok()
                            .and_then(|b| serde_json::from_slice(&b).ok())
                            .unwrap_or(Value::Null);
                        // The site's own credentials, from the URL's userinfo.
                        if let (Some(basic), Some(fields)) = (basic, body.as_object_mut()) {
                            fields.insert("__authorization".into(), basic.into());
                        }
                        let _ = seen_tx.send(if ok { body } else { json!("not a JSON POST") });
                        let answer = a.lock().clone();
                        let (status, text) = match answer {
                            Answer::With(status, text) => (status, text),
                            Answer::Held(status, text) => {
                                let _ = released.wait_for(|r| *r).await;
                                (status, text)
                            }
                        };
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        let mut resp = Response::new(Full::new(Bytes::from(text)));
                        *resp.status_mut() = StatusCode::from_u16(status).expect("status");
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service),
                );
            }
        });
        Self {
            addr,
            answer,
            seen,
            release,
            max_in_flight,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/pushgate/auth", self.addr)
    }

    fn answer(&self, answer: Answer) {
        *self.answer.lock() = answer;
    }

    /// The next body the site was posted, within [`WAIT`].
    async fn next_seen(&mut self) -> Value {
        tokio::time::timeout(WAIT, self.seen.recv())
            .await
            .expect("the site was asked in time")
            .expect("site running")
    }

    /// Whether the site was asked anything since the last look.
    fn asked(&mut self) -> bool {
        self.seen.try_recv().is_ok()
    }
}

fn allow(user: &str) -> Answer {
    Answer::With(200, json!({"user": user, "channels": ["vip"]}).to_string())
}

fn proxied(site_url: String) -> Config {
    let mut c = config();
    c.auth.connect_proxy_url = Some(site_url);
    c
}

/// The headers a browser with a session sends.
fn browser_headers() -> [(&'static str, &'static str); 3] {
    [
        ("cookie", COOKIE),
        ("origin", ORIGIN),
        ("user-agent", AGENT),
    ]
}

/// The status each transport answers a client with no token: a WebSocket
/// handshake, a poll and an event stream, all with a bad cursor so that
/// an admitted client is answered at once (101 on the WebSocket, whose
/// cursor is checked before the upgrade too: 400).
async fn statuses(gw: &Gateway) -> Vec<(u16, String, Option<String>)> {
    let headers = browser_headers();
    let ws = raw_handshake(
        gw.addr,
        &upgrade_request("GET", "/ws?cursor=x", &headers, &[]),
    )
    .await;
    let mut out = vec![(
        ws.status,
        ws.error_code(),
        ws.header("retry-after").map(str::to_owned),
    )];
    for path in ["/poll?cursor=x", "/sse?cursor=x"] {
        let resp = within("get", get(gw.addr, path, &headers)).await;
        out.push((
            resp.status.as_u16(),
            resp.error_code(),
            resp.headers
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        ));
    }
    out
}

/// Checks the body the site was posted for one client.
fn assert_request(seen: &Value, transport: &str, path: &str, query: &str) {
    assert_eq!(seen["transport"], transport, "{seen}");
    assert_eq!(seen["path"], path, "{seen}");
    assert_eq!(seen["query"], query, "{seen}");
    assert_eq!(
        seen["headers"],
        json!({"cookie": COOKIE, "origin": ORIGIN, "user-agent": AGENT}),
        "only the four headers, lower-case: {seen}"
    );
    let remote = seen["remote_addr"].as_str().unwrap_or_default();
    assert!(remote.starts_with("127.0.0.1:"), "{seen}");
    let keys: Vec<&String> = seen.as_object().expect("object").keys().collect();
    assert_eq!(keys.len(), 5, "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cookie_client_is_admitted_with_its_user_and_channels_on_every_transport() {
    let mut site = Site::start(allow("alice")).await;
    let gw = Gateway::start(proxied(site.url())).await;
    let headers = browser_headers();

    // WebSocket: the user's pushes and the site's channel reach it.
    let mut ws = within("ws", gw.try_connect("channels=vip", &headers))
        .await
        .expect("admitted by the site");
    assert_request(&site.next_seen().await, "ws", "/ws", "channels=vip");
    let resp = within(
        "push",
        gw.push(&json!({"to": ["alice"], "data": "to alice"})),
    )
    .await;
    assert_eq!(resp.status, 202);
    let frame = next_json(&mut ws, WAIT).await;
    assert_eq!(
        (&frame["stream"], &frame["data"]),
        (&json!("user"), &json!("to alice"))
    );
    let resp = within(
        "push",
        gw.push(&json!({"to": {"channels": ["vip"]}, "data": "to vip"})),
    )
    .await;
    assert_eq!(resp.status, 202);
    let frame = next_json(&mut ws, WAIT).await;
    assert_eq!(
        (&frame["channel"], &frame["data"]),
        (&json!("vip"), &json!("to vip"))
    );

    // SSE.
    let mut sse = Sse::open(gw.addr, "/sse", &headers).await;
    assert_eq!(sse.status, 200);
    assert_request(&site.next_seen().await, "sse", "/sse", "");
    wait_for_connections(&gw, Transport::Sse, 1, WAIT).await;
    let resp = within(
        "push",
        gw.push(&json!({"to": ["alice"], "data": "over sse"})),
    )
    .await;
    assert_eq!(resp.status, 202);
    assert_eq!(sse.next_json(WAIT).await["data"], "over sse");

    // Long-poll: parked, then answered with the push.
    let poll = spawn_get(
        gw.addr,
        "/poll?channels=vip".into(),
        headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
    );
    assert_request(&site.next_seen().await, "poll", "/poll", "channels=vip");
    wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    let resp = within(
        "push",
        gw.push(&json!({"to": ["alice"], "data": "over poll"})),
    )
    .await;
    assert_eq!(resp.status, 202);
    let answer = tokio::time::timeout(WAIT, poll)
        .await
        .expect("poll answered in time")
        .expect("poll task");
    let frames = poll_frames(&answer);
    assert_eq!(frames[0]["data"], "over poll", "{frames:?}");
    assert_eq!(gw.state.inspect().users, 1, "every connection is alice's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sites_expires_at_closes_the_connection_4004_as_a_token_would() {
    let now = pushgate::gateway::Gateway::unix_now();
    let answer = json!({"user": "eve", "expires_at": now + 2});
    let mut site = Site::start(Answer::With(200, answer.to_string())).await;
    let gw = Gateway::start(proxied(site.url())).await;
    let mut ws = within("ws", gw.try_connect("", &browser_headers()))
        .await
        .expect("admitted by the site");
    assert_eq!(site.next_seen().await["transport"], "ws");
    let (code, frames) = read_until_close(&mut ws, WAIT).await;
    assert_eq!(code, Some(4004), "{frames:?}");
    assert_eq!(
        frames.last(),
        Some(&json!({"type": "close", "reason": "token_expired"}))
    );
    assert!(pushgate::gateway::Gateway::unix_now() >= now + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sites_401_and_403_reach_the_client_as_the_contract_says() {
    let mut site = Site::start(Answer::With(401, "no session".into())).await;
    let gw = Gateway::start(proxied(site.url())).await;
    for (status, code, _) in statuses(&gw).await {
        assert_eq!((status, code.as_str()), (401, "unauthorized"));
    }
    site.answer(Answer::With(403, "banned".into()));
    for (status, code, _) in statuses(&gw).await {
        assert_eq!((status, code.as_str()), (403, "forbidden"));
    }
    let _ = site.next_seen().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_site_is_503_unavailable_with_retry_after() {
    let site = Site::start(Answer::With(500, "oops".into())).await;
    let mut c = proxied(site.url());
    c.limits.connection_retry_spread_secs = 7;
    let gw = Gateway::start(c).await;
    let failures = [
        Answer::With(500, "oops".into()),
        Answer::With(302, String::new()),
        Answer::With(200, "not json".into()),
        Answer::With(200, json!({"user": "not a user id!"}).to_string()),
        Answer::With(200, json!({"user": "a", "channels": "vip"}).to_string()),
    ];
    for answer in failures {
        site.answer(answer.clone());
        for (status, code, retry) in statuses(&gw).await {
            assert_eq!((status, code.as_str()), (503, "unavailable"), "{answer:?}");
            let retry: u64 = retry.expect("retry-after").parse().expect("seconds");
            assert!((1..=7).contains(&retry), "{retry}");
        }
    }
    // Nobody listening at all.
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/auth", closed.local_addr().expect("addr"));
    drop(closed);
    let gw = Gateway::start(proxied(url)).await;
    for (status, code, _) in statuses(&gw).await {
        assert_eq!((status, code.as_str()), (503, "unavailable"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_slower_than_the_timeout_is_503() {
    let mut site = Site::start(Answer::Held(200, json!({"user": "slow"}).to_string())).await;
    let mut c = proxied(site.url());
    c.auth.connect_proxy_timeout_ms = 200;
    let gw = Gateway::start(c).await;
    let answer = tokio::time::timeout(WAIT, get(gw.addr, "/poll", &browser_headers()))
        .await
        .expect("answered within the deadline");
    assert_eq!(
        (answer.status.as_u16(), answer.error_code().as_str()),
        (503, "unavailable")
    );
    let _ = site.next_seen().await;
    let text = within("metrics", gw.metrics()).await;
    assert!(
        metric(
            &text,
            "pushgate_auth_proxy_requests_total{result=\"timeout\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    let _ = site.release.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_concurrency_without_a_queue_a_client_gets_503_at_once_and_the_site_never_sees_more()
 {
    let mut site = Site::start(Answer::Held(200, json!({"user": "first"}).to_string())).await;
    let mut c = proxied(site.url());
    c.auth.connect_proxy_concurrency = 1;
    c.auth.connect_proxy_queue_ms = 0;
    c.auth.connect_proxy_timeout_ms = 30_000;
    c.limits.connection_retry_spread_secs = 5;
    let gw = Gateway::start(c).await;

    let first = spawn_get(gw.addr, "/poll?cursor=x".into(), Vec::new());
    let _ = site.next_seen().await;
    // The site holds the first: the second is refused without asking it.
    for _ in 0..3 {
        let second = tokio::time::timeout(WAIT, get(gw.addr, "/poll", &[]))
            .await
            .expect("refused at once");
        assert_eq!(
            (second.status.as_u16(), second.error_code().as_str()),
            (503, "unavailable")
        );
        let retry: u64 = second.headers["retry-after"]
            .to_str()
            .expect("text")
            .parse()
            .expect("seconds");
        assert!((1..=5).contains(&retry), "{retry}");
    }
    assert!(!site.asked(), "a saturated request never reaches the site");
    let text = within("metrics", gw.metrics()).await;
    assert!(
        metric(
            &text,
            "pushgate_auth_proxy_requests_total{result=\"saturated\"}"
        )
        .is_some_and(|n| n >= 3.0),
        "{text}"
    );
    assert!(
        metric(&text, "pushgate_auth_proxy_in_flight").is_some_and(|n| n >= 1.0),
        "{text}"
    );

    // Released: the first is admitted (its bad cursor answers 400), and
    // the permit is free again.
    let _ = site.release.send(true);
    let first = tokio::time::timeout(WAIT, first)
        .await
        .expect("first answered")
        .expect("task");
    assert_eq!(first.status, 400, "admitted, then its cursor refused");
    let again = within("get", get(gw.addr, "/poll?cursor=x", &[])).await;
    assert_eq!(again.status, 400, "the permit came back");
    assert_eq!(site.max_in_flight.load(Ordering::SeqCst), 1);
    let text = within("metrics", gw.metrics()).await;
    assert!(
        metric(&text, "pushgate_auth_proxy_duration_seconds_count").is_some_and(|n| n >= 2.0),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_concurrency_a_client_waits_for_a_slot_and_the_site_never_sees_more() {
    let mut site = Site::start(Answer::Held(200, json!({"user": "first"}).to_string())).await;
    let mut c = proxied(site.url());
    c.auth.connect_proxy_concurrency = 1;
    c.auth.connect_proxy_timeout_ms = 30_000;
    c.auth.connect_proxy_queue_ms = 30_000;
    let gw = Gateway::start(c).await;

    let first = spawn_get(gw.addr, "/poll?cursor=x".into(), Vec::new());
    let _ = site.next_seen().await;
    // The site holds the first: the second waits without asking it.
    let second = spawn_get(gw.addr, "/poll?cursor=y".into(), Vec::new());
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = within("metrics", gw.metrics()).await;
        if metric(&text, "pushgate_auth_proxy_waiting") == Some(1.0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second never waited: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!site.asked(), "a queued request has not reached the site");
    assert!(!second.is_finished(), "the second waits for the slot");
    // Released: both are admitted (their bad cursors answer 400), one at
    // a time.
    let _ = site.release.send(true);
    for request in [first, second] {
        let answer = tokio::time::timeout(WAIT, request)
            .await
            .expect("answered")
            .expect("task");
        assert_eq!(answer.status, 400, "admitted, then its cursor refused");
    }
    assert_eq!(site.max_in_flight.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_waited_the_whole_queue_time_gets_503() {
    let mut site = Site::start(Answer::Held(200, json!({"user": "first"}).to_string())).await;
    let mut c = proxied(site.url());
    c.auth.connect_proxy_concurrency = 1;
    c.auth.connect_proxy_timeout_ms = 30_000;
    c.auth.connect_proxy_queue_ms = 300;
    let gw = Gateway::start(c).await;

    let _first = spawn_get(gw.addr, "/poll?cursor=x".into(), Vec::new());
    let _ = site.next_seen().await;
    let started = std::time::Instant::now();
    let second = within("second", get(gw.addr, "/poll", &[])).await;
    assert_eq!(
        (second.status.as_u16(), second.error_code().as_str()),
        (503, "unavailable")
    );
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "refused only after the wait: {:?}",
        started.elapsed()
    );
    assert!(second.headers.contains_key("retry-after"));
    assert!(!site.asked(), "a saturated request never reaches the site");
    let _ = site.release.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_or_an_anonymous_uid_never_asks_the_site() {
    let mut site = Site::start(allow("alice")).await;
    let mut c = proxied(site.url());
    c.auth.anonymous = true;
    let gw = Gateway::start(c).await;
    let good = format!("/poll?cursor=x&token={}", token("bob", 600));
    assert_eq!(
        within("get", get(gw.addr, &good, &browser_headers()))
            .await
            .status,
        400
    );
    let bad = within(
        "get",
        get(gw.addr, "/poll?token=not.a.token", &browser_headers()),
    )
    .await;
    assert_eq!(
        (bad.status.as_u16(), bad.error_code().as_str()),
        (401, "unauthorized"),
        "a bad token is refused, not put to the site"
    );
    let anon = within(
        "get",
        get(gw.addr, "/poll?cursor=x&uid=carol", &browser_headers()),
    )
    .await;
    assert_eq!(anon.status, 400, "anonymous as before");
    assert!(!site.asked(), "the site was asked");
    // No token and no uid: the site decides.
    assert_eq!(
        within("get", get(gw.addr, "/poll?cursor=x", &[]))
            .await
            .status,
        400
    );
    assert_eq!(site.next_seen().await["transport"], "poll");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_url_reaches_the_site_as_basic_auth() {
    let mut site = Site::start(allow("alice")).await;
    let url = site.url().replacen("http://", "http://app:p%40ss@", 1);
    let gw = Gateway::start(proxied(url)).await;
    let resp = within("get", get(gw.addr, "/poll?cursor=x", &[])).await;
    assert_eq!(resp.status, 400, "admitted, then its cursor refused");
    // base64("app:p@ss")
    assert_eq!(
        site.next_seen().await["__authorization"],
        "Basic YXBwOnBAc3M="
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_proxy_a_client_without_a_token_is_401_as_before() {
    let gw = Gateway::default().await;
    let resp = within("get", get(gw.addr, "/poll", &browser_headers())).await;
    assert_eq!(
        (resp.status.as_u16(), resp.error_code().as_str()),
        (401, "unauthorized")
    );
}

#[test]
fn bad_connect_proxy_keys_stop_the_start_with_their_names() {
    let mut c = config();
    c.auth.connect_proxy_url = Some("ftp://app:hunter2@site.example/".into());
    c.auth.connect_proxy_timeout_ms = 0;
    c.auth.connect_proxy_concurrency = 0;
    let problems = c.validate().expect_err("invalid").problems().to_vec();
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(
        problems[0].starts_with("auth.connect_proxy_url: "),
        "{problems:?}"
    );
    assert!(!problems[0].contains("hunter2"), "{problems:?}");
    assert!(
        problems[1].starts_with("auth.connect_proxy_timeout_ms: "),
        "{problems:?}"
    );
    assert!(
        problems[2].starts_with("auth.connect_proxy_concurrency: "),
        "{problems:?}"
    );
}
