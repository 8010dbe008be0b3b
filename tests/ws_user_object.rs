//! One user object per user: created at the first connection, reused by
//! every later one while any is open, freed with the last (and its timer
//! entries with each connection).

mod support;

use std::time::Duration;

use pushgate::protocol::UserId;
use serde_json::json;
use support::ws::eventually;
use support::{Gateway, next_json};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_user_object_is_reused_across_reconnections_and_freed_with_the_last() {
    let gw = Gateway::default().await;
    let state = &gw.state;
    let alice = UserId::parse("alice").expect("valid");
    assert!(state.user(&alice).is_none());

    let mut first = gw.connect("alice").await;
    // Entries the gateway keeps for itself (armed before it accepts).
    let own_timers = gw.state.inspect().timer_entries - 1;
    let object = state.user(&alice).expect("created at first contact");
    assert_eq!(state.inspect().users, 1);

    let mut second = gw.connect("alice").await;
    assert_eq!(state.inspect().users, 1);
    first.close(None).await.expect("close sent");
    eventually(WAIT, "first connection gone", || async {
        state.inspect().connections == 1
    })
    .await;
    assert_eq!(state.inspect().users, 1);
    let mut third = gw.connect("alice").await;
    assert_eq!(state.inspect().users, 1);
    let now = state.user(&alice).expect("still alive");
    assert_eq!(object.handle, now.handle, "the same object, not a new one");
    assert_eq!(now.connections, 2);

    // Both live connections of the object get the user's messages.
    gw.push(&json!({"to": ["alice"], "data": "both"})).await;
    assert_eq!(next_json(&mut second, WAIT).await["data"], "both");
    assert_eq!(next_json(&mut third, WAIT).await["data"], "both");

    second.close(None).await.expect("close sent");
    drop(third);
    eventually(
        WAIT,
        "alice's object freed with her last connection",
        || async { state.inspect().users == 0 && state.user(&alice).is_none() },
    )
    .await;
    assert_eq!(state.inspect().connections, 0);
    assert_eq!(
        gw.state.inspect().timer_entries,
        own_timers,
        "no timer entry left behind"
    );

    // Coming back later makes a fresh object.
    let _again = gw.connect("alice").await;
    let fresh = state.user(&alice).expect("created again");
    assert_ne!(object.handle, fresh.handle, "a new object");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_has_one_object_however_many_connections() {
    let gw = Gateway::default().await;
    let mut clients = Vec::new();
    for user in ["a", "b", "a", "c", "b", "a"] {
        clients.push(gw.connect(user).await);
    }
    assert_eq!(gw.state.inspect().users, 3);
    assert_eq!(gw.state.inspect().connections, 6);
    let a = UserId::parse("a").expect("valid");
    assert_eq!(gw.state.user(&a).expect("a").connections, 3);
}
