//! Long-poll delivery: a parked poll is answered by a push (broadcast or
//! personal), a poll with messages after its cursor returns them at once,
//! a poll without a cursor sees only what comes after it, tabs of one user
//! each get every message, and the token may come as a Bearer header.

mod support;

use std::time::Duration;

use pushgate::protocol::Transport;
use serde_json::{Value, json};
use support::browser::{
    cursor_of, data_of, get, poll_frames, poll_path, spawn_get, wait_for_connections,
};
use support::{Gateway, token};

const WAIT: Duration = Duration::from_secs(10);

/// Short poll hold and session life, so a test never waits long.
fn config() -> pushgate::config::Config {
    let mut c = support::config();
    c.session.poll_timeout_secs = 2;
    c.session.session_ttl_secs = 3;
    c
}

async fn accepted(gw: &Gateway, body: Value) -> Value {
    let resp = gw.push(&body).await;
    assert_eq!(resp.status, 202, "{resp:?}");
    resp.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_poll_is_answered_by_a_broadcast_with_exactly_that_message() {
    let gw = Gateway::start(config()).await;
    let poll = spawn_get(gw.addr, poll_path("alice", None), vec![]);
    wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    let push = accepted(&gw, json!({"to": "*", "id": "b-1", "data": {"n": 1}})).await;
    let frames = poll_frames(&poll.await.unwrap());
    assert_eq!(
        frames,
        [json!({
            "type": "message", "id": "b-1", "cursor": push["cursor"],
            "stream": "broadcast", "data": {"n": 1}
        })]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_poll_is_answered_by_a_personal_push_and_not_by_another_users() {
    let gw = Gateway::start(config()).await;
    let poll = spawn_get(gw.addr, poll_path("alice", None), vec![]);
    wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    accepted(&gw, json!({"to": ["bob"], "data": "for bob"})).await;
    accepted(
        &gw,
        json!({"to": ["alice", "carol"], "id": "p-2", "data": "hi"}),
    )
    .await;
    let frames = poll_frames(&poll.await.unwrap());
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["type"], "message");
    assert_eq!(frames[0]["id"], "p-2");
    assert_eq!(frames[0]["stream"], "user");
    assert_eq!(frames[0]["data"], "hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_with_messages_after_its_cursor_returns_at_once_after_a_recover_frame() {
    let gw = Gateway::start(config()).await;
    let start = cursor_of(&accepted(&gw, json!({"to": "*", "data": 0})).await);
    let mut cursors = Vec::new();
    for (n, to) in [(1, json!("*")), (2, json!(["dave"])), (3, json!("*"))] {
        let push = accepted(&gw, json!({"to": to, "data": n})).await;
        if let Some(c) = push.get("cursor") {
            cursors.push(c.clone());
        }
    }
    accepted(&gw, json!({"to": ["erin"], "data": "not dave's"})).await;
    let began = tokio::time::Instant::now();
    let resp = get(gw.addr, &poll_path("dave", Some(&start)), &[]).await;
    // Far below the 2 s hold: it was not parked.
    assert!(
        began.elapsed() < Duration::from_millis(1500),
        "answered at once"
    );
    let frames = poll_frames(&resp);
    assert_eq!(frames.len(), 4, "{frames:?}");
    assert_eq!(frames[0]["type"], "recover");
    assert_eq!(frames[0]["complete"], true);
    assert!(frames[1..].iter().all(|f| f["type"] == "message"));
    assert_eq!(data_of(&frames[1..]), [json!(1), json!(2), json!(3)]);
    assert_eq!(frames[1]["cursor"], cursors[0]);
    assert_eq!(frames[3]["cursor"], cursors[1]);
    assert_eq!(frames[2]["stream"], "user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_without_a_cursor_gets_only_messages_published_after_it() {
    let gw = Gateway::start(config()).await;
    accepted(&gw, json!({"to": "*", "data": "old broadcast"})).await;
    accepted(&gw, json!({"to": ["frank"], "data": "old personal"})).await;
    let poll = spawn_get(gw.addr, poll_path("frank", None), vec![]);
    wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    accepted(&gw, json!({"to": ["frank"], "data": "new"})).await;
    let frames = poll_frames(&poll.await.unwrap());
    assert_eq!(data_of(&frames), [json!("new")], "{frames:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_accepts_the_token_in_an_authorization_bearer_header() {
    let gw = Gateway::start(config()).await;
    let bearer = format!("Bearer {}", token("gina", 3600));
    let poll = spawn_get(
        gw.addr,
        "/poll".into(),
        vec![("authorization".into(), bearer)],
    );
    wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    accepted(&gw, json!({"to": ["gina"], "data": "via header"})).await;
    let frames = poll_frames(&poll.await.unwrap());
    assert_eq!(data_of(&frames), [json!("via header")]);

    let wrong = get(gw.addr, "/poll", &[("authorization", "Bearer not-a-token")]).await;
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let none = get(gw.addr, "/poll", &[]).await;
    assert_eq!(none.status, 401, "{none:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_polls_of_one_user_each_get_every_message() {
    let gw = Gateway::start(config()).await;
    let tabs: Vec<_> = (0..3)
        .map(|_| spawn_get(gw.addr, poll_path("hank", None), vec![]))
        .collect();
    wait_for_connections(&gw, Transport::Poll, 3, WAIT).await;
    accepted(&gw, json!({"to": "*", "data": "all"})).await;
    accepted(&gw, json!({"to": ["hank"], "data": "mine"})).await;
    for tab in tabs {
        let mut frames = poll_frames(&tab.await.unwrap());
        // The second push may reach a tab after its answer left: then the
        // next poll (with the answer's last cursor) returns it at once.
        if frames.len() == 1 {
            let cursor = cursor_of(&frames[0]);
            let more = poll_frames(&get(gw.addr, &poll_path("hank", Some(&cursor)), &[]).await);
            assert_eq!(more[0]["type"], "recover", "{more:?}");
            frames.extend(more.into_iter().skip(1));
        }
        assert_eq!(
            data_of(&frames),
            [json!("all"), json!("mine")],
            "{frames:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_published_between_polls_is_returned_by_the_next_poll() {
    let gw = Gateway::start(config()).await;
    let poll = spawn_get(gw.addr, poll_path("ivan", None), vec![]);
    wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    accepted(&gw, json!({"to": ["ivan"], "data": 1})).await;
    let first = poll_frames(&poll.await.unwrap());
    let cursor = cursor_of(&first[0]);
    // Nobody is parked now; the next two wait in history.
    accepted(&gw, json!({"to": ["ivan"], "data": 2})).await;
    accepted(&gw, json!({"to": "*", "data": 3})).await;
    let next = poll_frames(&get(gw.addr, &poll_path("ivan", Some(&cursor)), &[]).await);
    assert_eq!(next[0]["type"], "recover");
    assert_eq!(next[0]["complete"], true);
    assert_eq!(data_of(&next[1..]), [json!(2), json!(3)]);
    // And with the last cursor the poll parks again: nothing is repeated.
    let last = cursor_of(&next[2]);
    let poll = spawn_get(gw.addr, poll_path("ivan", Some(&last)), vec![]);
    wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    accepted(&gw, json!({"to": ["ivan"], "data": 4})).await;
    assert_eq!(data_of(&poll_frames(&poll.await.unwrap())), [json!(4)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_poll_whose_client_went_away_is_released_before_its_timeout() {
    let mut c = config();
    c.session.poll_timeout_secs = 20;
    c.session.session_ttl_secs = 30;
    let gw = Gateway::start(c).await;
    let poll = spawn_get(gw.addr, poll_path("jane", None), vec![]);
    wait_for_connections(&gw, Transport::Poll, 1, WAIT).await;
    poll.abort();
    // Dropping the client closes its socket; the gateway notices.
    wait_for_connections(&gw, Transport::Poll, 0, WAIT).await;
    // The session lives on for the next poll.
    let uid = pushgate::protocol::UserId::parse("jane").unwrap();
    assert!(
        gw.state
            .user(&uid)
            .is_some_and(|u| u.poll_session_entry.is_some())
    );
}
