//! Cursors history cannot cover: a gap past `[history] size` and a cursor
//! of another epoch (a restarted gateway) both get `recover` with
//! `complete: false` and then go on live, over every transport, as does a
//! cursor of another broker layout (another number of shards). A cursor
//! pushgate could not have issued is `400 bad_cursor` on every transport.

mod support;

use std::time::Duration;

use pushgate::protocol::Transport;
use serde_json::{Value, json};
use support::Gateway;
use support::browser::{
    Live, RESUMABLE, Sse, cursor_of, data_of, get, poll_frames, poll_path, resume, spawn_get,
    sse_path, wait_for_connections,
};
use support::ws::{raw_handshake, upgrade_request};

const WAIT: Duration = Duration::from_secs(10);

fn config() -> pushgate::config::Config {
    let mut c = support::config();
    c.session.poll_timeout_secs = 2;
    c.session.session_ttl_secs = 3;
    c
}

async fn push(gw: &Gateway, body: Value) -> Value {
    let resp = gw.push(&body).await;
    assert_eq!(resp.status, 202, "{resp:?}");
    resp.json()
}

/// After a `recover` frame (the first of `frames`), a live message still
/// reaches the client.
async fn goes_on_live(
    gw: &Gateway,
    transport: Transport,
    user: &str,
    frames: &[Value],
    client: Option<Live>,
) {
    let body = json!({"to": [user], "data": "live"});
    match client {
        None => {
            // A poll: come back with the newest cursor given.
            let cursor = cursor_of(frames.last().expect("a recover frame"));
            let poll = spawn_get(gw.addr, poll_path(user, Some(&cursor)), vec![]);
            wait_for_connections(gw, Transport::Poll, 1, WAIT).await;
            push(gw, body).await;
            let live = poll_frames(&poll.await.expect("poll task"));
            assert_eq!(data_of(&live), [json!("live")], "{live:?}");
        }
        Some(mut client) => {
            push(gw, body).await;
            // Whatever history still held may come first, once each.
            let mut seen = Vec::new();
            loop {
                let frame = client.next_json(WAIT).await;
                if frame["data"] == "live" {
                    break;
                }
                assert!(!seen.contains(&frame), "{transport:?}: duplicate {frame}");
                seen.push(frame);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_older_than_history_gets_recover_incomplete_then_live_messages() {
    let mut c = config();
    c.history.size = 2;
    let gw = Gateway::start(c).await;
    for transport in RESUMABLE {
        let user = format!("late-{}", transport.as_str());
        let start = cursor_of(&push(&gw, json!({"to": "*", "data": "seen"})).await);
        for n in 1..=5 {
            push(&gw, json!({"to": "*", "data": n})).await;
        }
        let (frames, client) = resume(&gw, transport, &user, &start, 1, WAIT).await;
        assert_eq!(frames[0]["type"], "recover", "{transport:?}: {frames:?}");
        assert_eq!(frames[0]["complete"], false, "{transport:?}: {frames:?}");
        goes_on_live(&gw, transport, &user, &frames, client).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_in_the_users_own_stream_gets_recover_incomplete() {
    let mut c = config();
    c.history.size = 2;
    let gw = Gateway::start(c).await;
    let start = cursor_of(&push(&gw, json!({"to": "*", "data": "seen"})).await);
    for n in 1..=4 {
        push(&gw, json!({"to": ["gail"], "data": n})).await;
    }
    let frames = poll_frames(&get(gw.addr, &poll_path("gail", Some(&start)), &[]).await);
    assert_eq!(frames[0]["type"], "recover", "{frames:?}");
    assert_eq!(frames[0]["complete"], false, "{frames:?}");
    // Another user's cursor at the same place lost nothing.
    let frames = poll_frames(&get(gw.addr, &poll_path("hugo", Some(&start)), &[]).await);
    assert_eq!(frames[0]["type"], "reconnect", "nothing missed: {frames:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_from_a_restarted_gateway_gets_recover_incomplete_then_live_messages() {
    let first = Gateway::start(config()).await;
    let old = cursor_of(&push(&first, json!({"to": "*", "data": "before restart"})).await);
    first.stop(WAIT).await;

    let gw = Gateway::start(config()).await;
    // The new gateway has published as many messages: only the epoch differs.
    push(&gw, json!({"to": "*", "data": "after restart"})).await;
    assert_ne!(
        old.split_once('-').unwrap().0,
        cursor_of(&push(&gw, json!({"to": "*", "data": 2})).await)
            .split_once('-')
            .unwrap()
            .0,
        "a new epoch"
    );
    for transport in RESUMABLE {
        let user = format!("back-{}", transport.as_str());
        let (frames, client) = resume(&gw, transport, &user, &old, 1, WAIT).await;
        assert_eq!(frames[0]["type"], "recover", "{transport:?}: {frames:?}");
        assert_eq!(frames[0]["complete"], false, "{transport:?}: {frames:?}");
        goes_on_live(&gw, transport, &user, &frames, client).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_of_another_broker_layout_gets_recover_incomplete_then_live_messages() {
    // One position per shard of a Redis Cluster (here 3), handed to a
    // gateway of one sequence: well-formed, issued by another layout (a
    // deployment that moved between one Redis and a cluster).
    let gw = Gateway::start(config()).await;
    let now = cursor_of(&push(&gw, json!({"to": "*", "data": "here"})).await);
    let epoch = now.split_once('-').unwrap().0;
    let foreign = format!("{epoch}-1.{epoch}-1.{epoch}-1");
    for transport in RESUMABLE {
        let user = format!("moved-{}", transport.as_str());
        let (frames, client) = resume(&gw, transport, &user, &foreign, 1, WAIT).await;
        assert_eq!(frames[0]["type"], "recover", "{transport:?}: {frames:?}");
        assert_eq!(frames[0]["complete"], false, "{transport:?}: {frames:?}");
        goes_on_live(&gw, transport, &user, &frames, client).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_pushgate_could_not_have_issued_is_400_bad_cursor_on_every_transport() {
    let gw = Gateway::start(config()).await;
    let token = support::token("ivy", 3600);
    for bad in [
        "garbage",
        "12",
        "0123456789abcdef",
        "0123456789abcdeg-1",
        "-1",
    ] {
        let query = format!("token={token}&cursor={bad}");
        let poll = get(gw.addr, &format!("/poll?{query}"), &[]).await;
        assert_eq!(poll.status, 400, "poll {bad:?}: {poll:?}");
        assert_eq!(poll.error_code(), "bad_cursor");

        let sse = Sse::open(gw.addr, &format!("/sse?{query}"), &[]).await;
        assert_eq!(sse.status, 400, "sse {bad:?}");
        let body: Value = serde_json::from_slice(&sse.rest().await).expect("JSON error");
        assert_eq!(body["error"]["code"], "bad_cursor");

        let ws = raw_handshake(
            gw.addr,
            &upgrade_request("GET", &format!("/ws?{query}"), &[], &[]),
        )
        .await;
        assert_eq!(ws.status, 400, "ws {bad:?}: {ws:?}");
        assert_eq!(ws.error_code(), "bad_cursor");
    }
    // A bad Last-Event-ID is refused the same way.
    let sse = Sse::open(
        gw.addr,
        &sse_path("ivy", None),
        &[("last-event-id", "not-a-cursor")],
    )
    .await;
    assert_eq!(sse.status, 400);
    assert_eq!(gw.state.inspect().connections, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_whose_messages_aged_out_of_history_gets_recover_incomplete() {
    let mut c = config();
    c.history.ttl_secs = 1;
    let gw = Gateway::start(c).await;
    let start = cursor_of(&push(&gw, json!({"to": "*", "data": "seen"})).await);
    push(&gw, json!({"to": "*", "data": "aged out"})).await;
    // Past the age limit and a history sweep (every second): a probe's
    // resume from `start` finds the gap.
    let probe = poll_path("probe", Some(&start));
    support::ws::eventually(WAIT, "the history sweep drops the aged message", || async {
        poll_frames(&get(gw.addr, &probe, &[]).await)[0]["complete"] == false
    })
    .await;
    for transport in RESUMABLE {
        let user = format!("old-{}", transport.as_str());
        let (frames, client) = resume(&gw, transport, &user, &start, 1, WAIT).await;
        assert_eq!(frames[0]["type"], "recover", "{transport:?}: {frames:?}");
        assert_eq!(frames[0]["complete"], false, "{transport:?}: {frames:?}");
        assert!(
            !frames.iter().any(|f| f["data"] == "aged out"),
            "{transport:?}: {frames:?}"
        );
        goes_on_live(&gw, transport, &user, &frames, client).await;
    }
}
