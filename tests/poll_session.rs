//! The long-poll session between polls: one user object and one timer
//! entry reused by every poll within `session_ttl_secs`, evicted (and its
//! entry freed) after it.
//!
//! Metrics are one recorder per process and the gauges are set by each
//! scrape, so the tests of this file take turns.

mod support;

use std::time::Duration;

use pushgate::protocol::{Transport, UserId};
use serde_json::json;
use support::Gateway;
use support::browser::{cursor_of, poll_frames, poll_path, spawn_get, wait_for_connections};
use support::ws::metric;
use tokio::sync::Mutex;

const WAIT: Duration = Duration::from_secs(10);

static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn config() -> pushgate::config::Config {
    let mut c = support::config();
    c.session.poll_timeout_secs = 1;
    c.session.session_ttl_secs = 2;
    c
}

async fn gauge(gw: &Gateway, series: &str) -> f64 {
    metric(&gw.metrics().await, series).unwrap_or_else(|| panic!("no series {series}"))
}

/// One poll of `user`, parked and then answered by a personal push;
/// returns the cursor to poll with next.
async fn one_poll(gw: &Gateway, user: &str, cursor: Option<&str>, n: u64) -> String {
    let poll = spawn_get(gw.addr, poll_path(user, cursor), vec![]);
    wait_for_connections(gw, Transport::Poll, 1, WAIT).await;
    let resp = gw.push(&json!({"to": [user], "data": n})).await;
    assert_eq!(resp.status, 202, "{resp:?}");
    let frames = poll_frames(&poll.await.expect("poll task"));
    let last = frames.last().expect("a frame");
    assert_eq!(last["data"], n, "{frames:?}");
    wait_for_connections(gw, Transport::Poll, 0, WAIT).await;
    cursor_of(last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_polls_in_a_row_reuse_one_session_and_one_timer_entry() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let gw = Gateway::start(config()).await;
    let uid = UserId::parse("alice").unwrap();
    let mut cursor = one_poll(&gw, "alice", None, 0).await;
    let user = gw.state.user(&uid).expect("a session keeps alice");
    let entry = user.poll_session_entry;
    assert!(entry.is_some(), "the session has a timer entry");
    let entries = gw.state.inspect().timer_entries;
    assert_eq!(gauge(&gw, "pushgate_sessions").await, 1.0);
    assert_eq!(gauge(&gw, "pushgate_timer_entries").await, entries as f64);

    for n in 1..10 {
        cursor = one_poll(&gw, "alice", Some(&cursor), n).await;
        let now = gw.state.user(&uid).expect("still alive");
        assert_eq!(user.handle, now.handle, "poll {n}: the same user object");
        assert_eq!(now.poll_session_entry, entry, "poll {n}: the same entry");
        assert_eq!(gauge(&gw, "pushgate_sessions").await, 1.0, "poll {n}");
        assert_eq!(
            gauge(&gw, "pushgate_timer_entries").await,
            entries as f64,
            "poll {n}: no entry added"
        );
    }
    // A poll that times out moves the same entry too.
    let frames =
        poll_frames(&support::browser::get(gw.addr, &poll_path("alice", Some(&cursor)), &[]).await);
    assert_eq!(frames[0]["reason"], "poll_timeout", "{frames:?}");
    let after = gw.state.user(&uid).expect("still alive");
    assert_eq!(
        (after.handle, after.poll_session_entry),
        (user.handle, entry)
    );
    assert_eq!(gw.state.inspect().timer_entries, entries);
    assert_eq!(gw.state.inspect().users, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpolled_session_is_evicted_after_session_ttl() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let config = config();
    let ttl = config.session.session_ttl();
    let gw = Gateway::start(config).await;
    let evicted = r#"pushgate_evictions_total{reason="session_ttl"}"#;
    let before_evictions = gauge(&gw, evicted).await;
    let baseline = gw.state.inspect().timer_entries;

    let cursor = one_poll(&gw, "bob", None, 1).await;
    let polled_at = tokio::time::Instant::now();
    assert_eq!(gauge(&gw, "pushgate_sessions").await, 1.0);
    assert_eq!(
        gw.state.inspect().timer_entries,
        baseline + 1,
        "the session's entry"
    );
    let resp = gw.push(&json!({"to": ["bob"], "data": "while away"})).await;
    assert_eq!(resp.status, 202);

    assert_eq!(gw.state.inspect().users, 1);

    support::ws::eventually(ttl + Duration::from_secs(5), "session evicted", || async {
        gw.state.inspect().users == 0
    })
    .await;
    // Not before its ttl (the poll's end on the server came a little
    // before `polled_at`: 200 ms of slack on the early side only; the
    // exact instant is `deadlines::decide::session`'s, tested there).
    let lived = polled_at.elapsed();
    assert!(
        lived + Duration::from_millis(200) >= ttl,
        "evicted {lived:?} after its last poll, ttl {ttl:?}"
    );
    assert!(gw.state.user(&UserId::parse("bob").unwrap()).is_none());
    assert_eq!(gauge(&gw, "pushgate_sessions").await, 0.0);
    assert_eq!(
        gauge(&gw, "pushgate_timer_entries").await,
        baseline as f64,
        "the session's entry was freed"
    );
    assert_eq!(
        gauge(&gw, evicted).await,
        before_evictions + 1.0,
        "one session_ttl eviction counted"
    );

    // What was published meanwhile is still recoverable through the cursor.
    let path = poll_path("bob", Some(&cursor));
    let frames = poll_frames(&support::browser::get(gw.addr, &path, &[]).await);
    assert_eq!(frames[0]["type"], "recover", "{frames:?}");
    assert_eq!(frames[0]["complete"], true);
    assert_eq!(frames[1]["data"], "while away");
    assert_eq!(frames.len(), 2);

    // A later poll starts a new session, and it goes the same way.
    one_poll(&gw, "bob", None, 2).await;
    assert_eq!(gw.state.inspect().users, 1);
}
