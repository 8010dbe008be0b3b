//! Channels (PROTOCOL.md, "v1.1: channels") over real sockets, on every
//! transport and on both brokers: the token's claim and `channels=`
//! joined on connect, refusals before any upgrade, subscribe and
//! unsubscribe frames, a push to several channels, resume of several
//! channels exactly once (and the gap history no longer covers), presence,
//! and a race of publishers against joins, leaves and resumes.
//!
//! Each scenario is a function of the configuration, run once on the
//! memory broker and once on the real Redis at 127.0.0.1:6379.

mod support;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::SinkExt;
use pushgate::config::Config;
use pushgate::protocol::{Channel, Transport, UserId};
use serde_json::{Value, json};
use support::browser::{Live, RESUMABLE, Sse, get, poll_frames, spawn_get, wait_for_connections};
use support::ws::{eventually, raw_handshake, upgrade_request};
use support::{API_KEY, Gateway, SECRET, Ws, next_json, redis};
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(10);

fn memory() -> Config {
    let mut c = support::config();
    c.session.poll_timeout_secs = 2;
    c.channels.public = vec!["news".into(), "product.*".into()];
    c
}

/// The same on Redis under a fresh prefix, or `None` (test skipped) when
/// no Redis is reachable.
fn on_redis(test: &str) -> Option<Config> {
    if !redis::available() {
        eprintln!("skipped: no Redis at {}", redis::REDIS_URL);
        return None;
    }
    let mut c = redis::config(redis::REDIS_URL, &redis::prefix(test));
    c.session.poll_timeout_secs = 2;
    c.channels.public = vec!["news".into(), "product.*".into()];
    Some(c)
}

/// Two tests of one scenario: `$memory` on the memory broker, `$redis` on
/// the real Redis under key prefix `$prefix` (skipped without Redis).
macro_rules! on_both_brokers {
    ($memory:ident, $redis:ident, $prefix:literal, $scenario:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $memory() {
            ($scenario)(memory()).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $redis() {
            if let Some(config) = on_redis($prefix) {
                ($scenario)(config).await;
            }
        }
    };
}

/// A token for `user` whose `channels` claim is `channels`.
fn token(user: &str, channels: &[&str]) -> String {
    let user = UserId::parse(user).expect("valid user id");
    let channels: Vec<Channel> = channels
        .iter()
        .map(|c| Channel::parse(c).expect("valid channel"))
        .collect();
    let exp = pushgate::gateway::Gateway::unix_now() + 3600;
    pushgate::auth::token::mint_with_channels(SECRET.as_bytes(), &user, exp, &channels)
}

async fn push(gw: &Gateway, body: Value) -> Value {
    let resp = gw.push(&body).await;
    assert_eq!(resp.status, 202, "{resp:?}");
    resp.json()
}

/// `(channel, data)` of a channel message frame, after checking its shape.
fn channel_message(frame: &Value) -> (String, Value) {
    assert_eq!(frame["type"], "message", "{frame}");
    assert_eq!(frame["stream"], "channel", "{frame}");
    assert!(
        frame["cursor"].is_string() && frame["id"].is_string(),
        "{frame}"
    );
    let channel = frame["channel"]
        .as_str()
        .expect("a channel name")
        .to_owned();
    (channel, frame["data"].clone())
}

/// A client on any transport that reads frames one by one. A long-poll
/// client polls again with the last cursor it saw whenever it has read
/// everything, and skips `poll_timeout` reconnects, as the browser client
/// does.
enum Client {
    Ws(Box<Ws>),
    Sse(Box<Sse>),
    Poll {
        addr: SocketAddr,
        query: String,
        cursor: Option<String>,
        frames: VecDeque<Value>,
    },
}

impl Client {
    /// Opens `transport` with `query` (token, channels, cursor). A poll
    /// sends nothing until the first read.
    async fn open(gw: &Gateway, transport: Transport, query: &str) -> Self {
        match transport {
            Transport::Ws => {
                let ws = gw.try_connect(query, &[]).await.expect("ws connects");
                Self::Ws(Box::new(ws))
            }
            Transport::Sse => {
                let sse = Sse::open(gw.addr, &format!("/sse?{query}"), &[]).await;
                assert_eq!(sse.status, 200, "sse opens");
                Self::Sse(Box::new(sse))
            }
            Transport::Poll => Self::Poll {
                addr: gw.addr,
                query: query.to_owned(),
                cursor: None,
                frames: VecDeque::new(),
            },
        }
    }

    async fn next(&mut self) -> Value {
        match self {
            Self::Ws(ws) => next_json(ws, WAIT).await,
            Self::Sse(sse) => sse.next_json(WAIT).await,
            Self::Poll {
                addr,
                query,
                cursor,
                frames,
            } => {
                let deadline = tokio::time::Instant::now() + WAIT;
                loop {
                    if let Some(frame) = frames.pop_front() {
                        if let Some(at) = frame["cursor"].as_str() {
                            *cursor = Some(at.to_owned());
                        }
                        if frame["type"] == "reconnect" {
                            continue;
                        }
                        return frame;
                    }
                    let path = match cursor {
                        Some(at) => format!("/poll?{query}&cursor={at}"),
                        None => format!("/poll?{query}"),
                    };
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "no frame but poll timeouts within {WAIT:?}"
                    );
                    let answer = tokio::time::timeout(WAIT, get(*addr, &path, &[]))
                        .await
                        .expect("poll answered in time");
                    frames.extend(poll_frames(&answer));
                }
            }
        }
    }

    /// The next frame that is not a `recover`.
    async fn next_message(&mut self) -> Value {
        loop {
            let frame = self.next().await;
            if frame["type"] != "recover" {
                return frame;
            }
        }
    }

    async fn send(&mut self, frame: Value) {
        let Self::Ws(ws) = self else {
            panic!("client frames go over a WebSocket");
        };
        ws.send(Message::text(frame.to_string()))
            .await
            .expect("sent");
    }
}

/// The cursor a WebSocket opened with `query` (token and channels) is
/// given with a broadcast: where the scenarios' clients start from. It
/// covers the connection's channels, so a client resuming from it with the
/// same channels resumes them.
///
/// On a Redis broker a message accepted before this connection opened may
/// still be on its way to the node and reach it first: such frames (of an
/// earlier step's pushes) are skipped.
async fn start_cursor(gw: &Gateway, query: &str) -> String {
    let mut ws = gw.try_connect(query, &[]).await.expect("ws connects");
    // A marker of its own: on Redis a broadcast published just before
    // this connection attached (an earlier call's) may still reach it
    // live, and its cursor is not this one's.
    let marker = format!("start-{:08x}", rand::random::<u32>());
    push(gw, json!({"to": "*", "data": marker})).await;
    for _ in 0..20 {
        let frame = next_json(&mut ws, WAIT).await;
        if frame["data"] == marker.as_str() {
            return frame["cursor"].as_str().expect("a cursor").to_owned();
        }
        assert_eq!(frame["type"], "message", "{frame}");
    }
    panic!("no `{marker}` broadcast among the first 20 frames");
}

// --- joined on connect -------------------------------------------------

async fn claim_and_asked_channels_are_joined(config: Config) {
    let gw = Gateway::start(config).await;
    for transport in RESUMABLE {
        let user = format!("claim-{}", transport.as_str());
        let query = format!("token={}&channels=news,product.9", token(&user, &["vip"]));
        let start = start_cursor(&gw, &query).await;
        let query = format!("{query}&cursor={start}");
        // With a cursor, whatever is pushed from here on reaches the
        // client, live or from history (a poll only asks once it reads).
        let mut client = Client::open(&gw, transport, &query).await;
        push(&gw, json!({"to": {"channels": ["vip"]}, "data": 1})).await;
        push(&gw, json!({"to": {"channels": ["news"]}, "data": 2})).await;
        push(&gw, json!({"to": {"channels": ["elsewhere"]}, "data": 3})).await;
        push(&gw, json!({"to": {"channels": ["product.9"]}, "data": 4})).await;
        let both = push(
            &gw,
            json!({"to": {"channels": ["vip", "news", "nobody"]}, "id": format!("both-{user}"), "data": 5}),
        )
        .await;
        assert_eq!(both["channels"], 3, "{both}");
        assert_eq!(both["id"], format!("both-{user}"));
        push(&gw, json!({"to": "*", "data": "end"})).await;
        let mut got = Vec::new();
        loop {
            let frame = client.next_message().await;
            if frame["stream"] == "broadcast" {
                assert_eq!(frame["data"], "end", "{transport:?}: {frame}");
                break;
            }
            if frame["data"] == 5 {
                assert_eq!(
                    frame["id"],
                    format!("both-{user}"),
                    "one id for every channel"
                );
            }
            got.push(channel_message(&frame));
        }
        let want = [
            ("vip", json!(1)),
            ("news", json!(2)),
            ("product.9", json!(4)),
            ("vip", json!(5)),
            ("news", json!(5)),
        ];
        let want: Vec<(String, Value)> = want
            .iter()
            .map(|(c, d)| (c.to_string(), d.clone()))
            .collect();
        assert_eq!(got, want, "{transport:?}");
    }
}

on_both_brokers!(
    claim_and_asked_channels_are_joined_on_every_transport,
    claim_and_asked_channels_are_joined_on_every_transport_on_redis,
    "ch-claim",
    claim_and_asked_channels_are_joined
);

async fn a_parked_poll_answers_a_channel_message(config: Config) {
    let gw = Gateway::start(config).await;
    let path = format!("/poll?token={}&channels=news", token("parked", &[]));
    let poll = spawn_get(gw.addr, path, vec![]);
    wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    push(
        &gw,
        json!({"to": {"channels": ["product.1"]}, "data": "not for it"}),
    )
    .await;
    push(&gw, json!({"to": {"channels": ["news"]}, "data": "live"})).await;
    let frames = poll_frames(
        &tokio::time::timeout(WAIT, poll)
            .await
            .expect("answered")
            .expect("task"),
    );
    let got: Vec<(String, Value)> = frames.iter().map(channel_message).collect();
    assert_eq!(got, [("news".to_owned(), json!("live"))]);
}

on_both_brokers!(
    a_parked_poll_is_answered_with_its_channel_message,
    a_parked_poll_is_answered_with_its_channel_message_on_redis,
    "ch-parked",
    a_parked_poll_answers_a_channel_message
);

// --- refused before any upgrade ----------------------------------------

/// The status and error code of a client request on `transport`.
async fn refusal(gw: &Gateway, transport: Transport, query: &str) -> (u16, String) {
    match transport {
        Transport::Ws => {
            let answer = raw_handshake(
                gw.addr,
                &upgrade_request("GET", &format!("/ws?{query}"), &[], &[]),
            )
            .await;
            (answer.status, answer.error_code())
        }
        _ => {
            let path = format!("/{}?{query}", transport.as_str());
            let resp = get(gw.addr, &path, &[]).await;
            (resp.status.as_u16(), resp.error_code())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_that_may_not_be_joined_refuse_the_request_before_any_upgrade() {
    let mut config = memory();
    config.auth.anonymous = true;
    config.limits.max_channels_per_connection = 3;
    let gw = Gateway::start(config).await;
    let alice = token("alice", &["vip", "city:berlin"]);
    let cases: Vec<(String, u16, &str)> = vec![
        (
            format!("token={alice}&channels=secret"),
            403,
            "forbidden_channel",
        ),
        (
            format!("token={alice}&channels=news,secret"),
            403,
            "forbidden_channel",
        ),
        (format!("token={alice}&channels=a,,b"), 400, "bad_channel"),
        (format!("token={alice}&channels=news,"), 400, "bad_channel"),
        (format!("token={alice}&channels="), 400, "bad_channel"),
        (format!("token={alice}&channels=a%20b"), 400, "bad_channel"),
        (
            format!("token={alice}&channels=news,product.1"),
            400,
            "too_many_channels",
        ),
        ("uid=anon&channels=vip".to_owned(), 403, "forbidden_channel"),
    ];
    for transport in RESUMABLE {
        for (query, status, code) in &cases {
            let (got_status, got_code) = refusal(&gw, transport, query).await;
            assert_eq!(
                (got_status, got_code.as_str()),
                (*status, *code),
                "{transport:?} {query}"
            );
        }
        assert_eq!(gw.state.inspect().connections, 0, "nothing attached");
        assert_eq!(gw.state.inspect().subscriptions, 0, "nothing joined");
    }
    // Allowed: the claim's own channels asked again, public ones, anonymous
    // clients in public channels.
    for query in [
        format!("token={alice}&channels=vip,news"),
        "uid=anon&channels=news,product.7".to_owned(),
    ] {
        let ws = gw.try_connect(&query, &[]).await;
        assert!(ws.is_ok(), "{query}: {:?}", ws.err());
    }
}

// --- subscribe and unsubscribe on a WebSocket ---------------------------

async fn subscribe_and_unsubscribe_frames(config: Config) {
    let gw = Gateway::start(config).await;
    let query = format!("token={}", token("sub", &["vip"]));
    let mut ws = Client::open(&gw, Transport::Ws, &query).await;
    ws.send(json!({"type": "subscribe", "channel": "product.42"}))
        .await;
    assert_eq!(
        ws.next().await,
        json!({"type": "subscribed", "channel": "product.42"})
    );
    push(&gw, json!({"to": {"channels": ["product.42"]}, "data": 1})).await;
    assert_eq!(
        channel_message(&ws.next().await),
        ("product.42".into(), json!(1))
    );
    // Again: answered, nothing changes (one frame per message still).
    ws.send(json!({"type": "subscribe", "channel": "product.42"}))
        .await;
    assert_eq!(
        ws.next().await,
        json!({"type": "subscribed", "channel": "product.42"})
    );
    // The claim's channel is in already; another claimed one is allowed.
    ws.send(json!({"type": "subscribe", "channel": "vip"}))
        .await;
    assert_eq!(
        ws.next().await,
        json!({"type": "subscribed", "channel": "vip"})
    );
    for (channel, code) in [
        ("secret", "forbidden_channel"),
        ("a b", "bad_channel"),
        ("", "bad_channel"),
    ] {
        ws.send(json!({"type": "subscribe", "channel": channel}))
            .await;
        let error = ws.next().await;
        assert_eq!(error["type"], "error", "{error}");
        assert_eq!(error["code"], code, "{error}");
        assert_eq!(error["channel"], channel, "{error}");
        assert!(error["message"].is_string(), "{error}");
    }
    // Over the limit of 3 (vip, product.42, product.43).
    ws.send(json!({"type": "subscribe", "channel": "product.43"}))
        .await;
    assert_eq!(ws.next().await["type"], "subscribed");
    ws.send(json!({"type": "subscribe", "channel": "product.44"}))
        .await;
    let error = ws.next().await;
    assert_eq!(
        (error["type"].as_str(), error["code"].as_str()),
        (Some("error"), Some("too_many_channels")),
        "{error}"
    );
    push(
        &gw,
        json!({"to": {"channels": ["product.42", "product.44"]}, "data": 2}),
    )
    .await;
    assert_eq!(
        channel_message(&ws.next().await),
        ("product.42".into(), json!(2))
    );
    ws.send(json!({"type": "unsubscribe", "channel": "product.42"}))
        .await;
    assert_eq!(
        ws.next().await,
        json!({"type": "unsubscribed", "channel": "product.42"})
    );
    push(&gw, json!({"to": {"channels": ["product.42"]}, "data": 3})).await;
    push(&gw, json!({"to": {"channels": ["vip"]}, "data": 4})).await;
    assert_eq!(
        channel_message(&ws.next().await),
        ("vip".into(), json!(4)),
        "nothing of product.42 follows"
    );
    let Client::Ws(raw) = ws else {
        unreachable!("opened as a WebSocket")
    };
    // One sequence on both brokers: product.42's 3, pushed before, would
    // come before the marker.
    Live::Ws(raw)
        .assert_quiet(&gw, json!({"channels": ["vip"]}), WAIT)
        .await;
}

fn three_channels(mut config: Config) -> Config {
    config.limits.max_channels_per_connection = 3;
    config
}

on_both_brokers!(
    subscribe_and_unsubscribe_frames_on_a_websocket,
    subscribe_and_unsubscribe_frames_on_a_websocket_on_redis,
    "ch-sub",
    |c| subscribe_and_unsubscribe_frames(three_channels(c))
);

// --- resume --------------------------------------------------------------

async fn resume_of_several_channels(config: Config) {
    let gw = Gateway::start(config).await;
    for transport in RESUMABLE {
        let user = format!("resume-{}", transport.as_str());
        let tok = token(&user, &["vip"]);
        let start = start_cursor(&gw, &format!("token={tok}&channels=news")).await;
        // Missed while away: two channels of the client's, one not.
        let script = [
            ("vip", 1),
            ("news", 2),
            ("other", 3),
            ("vip", 4),
            ("news", 5),
        ];
        for (channel, data) in script {
            push(&gw, json!({"to": {"channels": [channel]}, "data": data})).await;
        }
        let query = format!("token={tok}&channels=news&cursor={start}");
        let mut client = Client::open(&gw, transport, &query).await;
        let recover = client.next().await;
        support::assert_recover(&recover, true, &format!("{transport:?}"));
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(channel_message(&client.next().await));
        }
        let want: Vec<(String, Value)> = [("vip", 1), ("news", 2), ("vip", 4), ("news", 5)]
            .iter()
            .map(|(c, d)| (c.to_string(), json!(d)))
            .collect();
        assert_eq!(got, want, "{transport:?}: in publish order, each once");
        drop(client);
        // A gap history no longer covers: [history] size is 3 per stream.
        for data in 10..15 {
            push(&gw, json!({"to": {"channels": ["news"]}, "data": data})).await;
        }
        let mut client = Client::open(&gw, transport, &query).await;
        let recover = client.next().await;
        support::assert_recover(&recover, false, &format!("{transport:?}"));
        let mut got = Vec::new();
        for _ in 0..5 {
            got.push(channel_message(&client.next().await).1);
        }
        // What history still holds of both channels, in order.
        assert_eq!(
            got,
            [json!(1), json!(4), json!(12), json!(13), json!(14)],
            "{transport:?}"
        );
    }
}

async fn joined_since(config: Config) {
    let gw = Gateway::start(config).await;
    for transport in RESUMABLE {
        let tok = token(&format!("since-{}", transport.as_str()), &[]);
        let start = start_cursor(&gw, &format!("token={tok}&channels=news")).await;
        push(&gw, json!({"to": {"channels": ["news"]}, "data": 1})).await;
        push(&gw, json!({"to": {"channels": ["product.5"]}, "data": 2})).await;
        let query = format!("token={tok}&channels=news,product.5&cursor={start}");
        let mut client = Client::open(&gw, transport, &query).await;
        let recover = client.next().await;
        support::assert_recover(&recover, true, &format!("{transport:?}"));
        assert_eq!(
            channel_message(&client.next_message().await),
            ("news".into(), json!(1)),
            "{transport:?}"
        );
        // product.5 was joined since the cursor: it starts live.
        push(&gw, json!({"to": {"channels": ["product.5"]}, "data": 3})).await;
        // (A poll asks again with its last cursor: its answer starts
        // with a `recover` frame.)
        let frame = client.next_message().await;
        assert_eq!(
            channel_message(&frame),
            ("product.5".into(), json!(3)),
            "{transport:?}"
        );
        // The frames' cursor now covers both channels.
        let cursor = frame["cursor"].as_str().expect("cursor").to_owned();
        drop(client);
        push(&gw, json!({"to": {"channels": ["product.5"]}, "data": 4})).await;
        let query = format!("token={tok}&channels=news,product.5&cursor={cursor}");
        let mut client = Client::open(&gw, transport, &query).await;
        let recover = client.next().await;
        assert_eq!(recover["complete"], true, "{transport:?}: {recover}");
        assert_eq!(
            channel_message(&client.next_message().await),
            ("product.5".into(), json!(4)),
            "{transport:?}"
        );
    }
}

on_both_brokers!(
    a_channel_joined_since_the_cursor_starts_live,
    a_channel_joined_since_the_cursor_starts_live_on_redis,
    "ch-since",
    joined_since
);

fn small_history(mut config: Config) -> Config {
    config.history.size = 3;
    config
}

on_both_brokers!(
    resume_of_several_channels_is_exactly_once_and_reports_a_gap,
    resume_of_several_channels_is_exactly_once_and_reports_a_gap_on_redis,
    "ch-resume",
    |c| resume_of_several_channels(small_history(c))
);

// --- presence ------------------------------------------------------------

async fn channel_presence(gw: &Gateway, path: &str) -> (u16, Value) {
    let auth = format!("Bearer {API_KEY}");
    let resp = get(gw.addr, path, &[("authorization", &auth)]).await;
    let status = resp.status.as_u16();
    (status, resp.json())
}

async fn presence_over_every_node(a: Config, b: Config) {
    let node_a = Gateway::start(a).await;
    let node_b = Gateway::start(b).await;
    let on_a = [
        node_a
            .try_connect(&format!("token={}", token("alice", &["vip"])), &[])
            .await
            .expect("ws"),
        node_a
            .try_connect(&format!("token={}", token("alice", &["vip"])), &[])
            .await
            .expect("ws"),
    ];
    let on_b = node_b
        .try_connect(
            &format!("token={}&channels=vip", token("bob", &["vip"])),
            &[],
        )
        .await
        .expect("ws");
    for node in [&node_a, &node_b] {
        eventually(WAIT, "presence of vip", || async {
            channel_presence(node, "/channels/vip").await
                == (200, json!({"subscribers": 3, "users": 2}))
        })
        .await;
        let (status, users) = channel_presence(node, "/channels/vip/users").await;
        assert_eq!(
            (status, users),
            (200, json!({"users": ["alice", "bob"], "truncated": false}))
        );
        assert_eq!(
            channel_presence(node, "/channels/empty").await,
            (200, json!({"subscribers": 0, "users": 0}))
        );
        let (status, error) = channel_presence(node, "/channels/a%20b").await;
        assert_eq!(
            (status, error["error"]["code"].as_str()),
            (400, Some("bad_channel"))
        );
        let anonymous = get(node.addr, "/channels/vip", &[]).await;
        assert_eq!(anonymous.status, 401);
    }
    drop(on_a);
    drop(on_b);
    for node in [&node_a, &node_b] {
        eventually(WAIT, "vip empty", || async {
            channel_presence(node, "/channels/vip").await
                == (200, json!({"subscribers": 0, "users": 0}))
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_counts_connections_and_users_of_a_channel() {
    // One memory node answers for itself; the second is independent.
    let gw = Gateway::start(memory()).await;
    let _alice = gw
        .try_connect(&format!("token={}", token("alice", &["vip"])), &[])
        .await
        .expect("ws");
    let _bob = gw
        .try_connect(
            &format!("token={}&channels=vip", token("bob", &["vip"])),
            &[],
        )
        .await
        .expect("ws");
    assert_eq!(
        channel_presence(&gw, "/channels/vip").await,
        (200, json!({"subscribers": 2, "users": 2}))
    );
    let metrics = gw.metrics().await;
    assert_eq!(
        support::ws::metric(&metrics, "pushgate_channels"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        support::ws::metric(&metrics, "pushgate_subscriptions"),
        Some(2.0),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_of_a_channel_spans_every_node_on_redis() {
    let Some(a) = on_redis("ch-presence") else {
        return;
    };
    let mut b = a.clone();
    b.server.listen = "127.0.0.1:0".into();
    presence_over_every_node(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_list_is_truncated_at_1000() {
    let mut config = memory();
    config.auth.anonymous = true;
    let gw = Gateway::start(config).await;
    let mut clients = Vec::new();
    for n in 0..1001 {
        let path = format!("/sse?uid=u{n:04}&channels=news");
        clients.push(Sse::open(gw.addr, &path, &[]).await);
    }
    let (status, body) = channel_presence(&gw, "/channels/news/users").await;
    assert_eq!(status, 200);
    assert_eq!(body["truncated"], true);
    let users = body["users"].as_array().expect("a list");
    assert_eq!(users.len(), 1000);
    assert_eq!(users[0], "u0000");
    let (_, counts) = channel_presence(&gw, "/channels/news").await;
    assert_eq!(counts, json!({"subscribers": 1001, "users": 1001}));
}

// --- the seam under load ----------------------------------------------------

/// Data numbers of the `race` channel's messages a WebSocket saw between
/// each `subscribed` and the `unsubscribed` that follows, one list per
/// interval.
async fn subscribe_in_rounds(gw: &Gateway, user: &str, rounds: usize) -> Vec<Vec<u64>> {
    let query = format!("token={}", token(user, &[]));
    let mut ws = Client::open(gw, Transport::Ws, &query).await;
    let mut intervals = Vec::new();
    for round in 0..rounds {
        ws.send(json!({"type": "subscribe", "channel": "product.race"}))
            .await;
        let mut seen = Vec::new();
        let frame = ws.next().await;
        assert_eq!(
            frame["type"], "subscribed",
            "nothing comes before it: {frame}"
        );
        // Stay for a few messages (fewer each round), then leave.
        let stay = 3 + round % 4;
        for _ in 0..stay {
            let frame = ws.next().await;
            seen.push(channel_message(&frame).1.as_u64().expect("a number"));
        }
        ws.send(json!({"type": "unsubscribe", "channel": "product.race"}))
            .await;
        loop {
            let frame = ws.next().await;
            if frame["type"] == "unsubscribed" {
                break;
            }
            seen.push(channel_message(&frame).1.as_u64().expect("a number"));
        }
        intervals.push(seen);
    }
    intervals
}

/// Data numbers a client saw over several connections, each resuming
/// with the last cursor it read.
async fn resume_in_rounds(gw: &Gateway, transport: Transport, rounds: usize) -> Vec<u64> {
    let tok = token(&format!("resumer-{}", transport.as_str()), &[]);
    let mut cursor: Option<String> = None;
    let mut seen = Vec::new();
    for _ in 0..rounds {
        let mut query = format!("token={tok}&channels=product.race");
        if let Some(at) = &cursor {
            query.push_str(&format!("&cursor={at}"));
        }
        let mut client = Client::open(gw, transport, &query).await;
        for _ in 0..5 {
            let frame = client.next_message().await;
            seen.push(channel_message(&frame).1.as_u64().expect("a number"));
            cursor = Some(frame["cursor"].as_str().expect("cursor").to_owned());
        }
    }
    seen
}

/// Publishers push numbered messages to one channel as fast as they are
/// answered, while WebSockets subscribe and unsubscribe in rounds and
/// clients on every transport resume with their cursor over and over.
/// Every interval sees consecutive numbers (no gap, no repeat), and every
/// resumer sees one unbroken run across its connections.
async fn race(config: Config) {
    let gw = std::sync::Arc::new(Gateway::start(config).await);
    let publishing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let publisher = {
        let (gw, publishing) = (
            std::sync::Arc::clone(&gw),
            std::sync::Arc::clone(&publishing),
        );
        tokio::spawn(async move {
            let mut n = 0u64;
            while publishing.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                push(
                    &gw,
                    json!({"to": {"channels": ["product.race"]}, "data": n}),
                )
                .await;
            }
            n
        })
    };
    let subscribers: Vec<_> = (0..3)
        .map(|i| {
            let gw = std::sync::Arc::clone(&gw);
            tokio::spawn(async move { subscribe_in_rounds(&gw, &format!("sub{i}"), 12).await })
        })
        .collect();
    let resumers: Vec<_> = RESUMABLE
        .into_iter()
        .map(|transport| {
            let gw = std::sync::Arc::clone(&gw);
            tokio::spawn(async move { resume_in_rounds(&gw, transport, 6).await })
        })
        .collect();
    let mut intervals = Vec::new();
    for task in subscribers {
        intervals.extend(task.await.expect("subscriber"));
    }
    let mut runs = Vec::new();
    for task in resumers {
        runs.push(task.await.expect("resumer"));
    }
    publishing.store(false, std::sync::atomic::Ordering::Relaxed);
    let published = publisher.await.expect("publisher");
    assert!(published > 30, "only {published} messages published");
    for seen in intervals.iter().chain(&runs) {
        assert!(!seen.is_empty());
        let want: Vec<u64> = (seen[0]..seen[0] + seen.len() as u64).collect();
        assert_eq!(seen, &want, "consecutive, each once");
    }
}

on_both_brokers!(
    publishers_racing_joins_leaves_and_resumes_deliver_each_message_once,
    publishers_racing_joins_leaves_and_resumes_deliver_each_message_once_on_redis,
    "ch-race",
    race
);
