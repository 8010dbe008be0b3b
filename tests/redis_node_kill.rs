//! A node killed with SIGKILL during a steady stream of pushes: its clients
//! reconnect to another node with their cursors and lose nothing.

mod support;

use std::time::Duration;

use serde_json::json;
use support::process::Process;
use support::{Gateway, next_json, redis};

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_a_killed_node_resume_elsewhere_and_lose_nothing() {
    if !redis::available() {
        return;
    }
    let prefix = redis::prefix("kill");
    let survivor = Gateway::start(redis::config(redis::REDIS_URL, &prefix)).await;
    // No config file (a temporary working directory): defaults plus env.
    // Port 0: the `listening` line tells which port the node was given.
    let mut victim = Process::start_in(
        &std::env::temp_dir(),
        "kill-victim",
        &[],
        &[
            ("PUSHGATE_AUTH_SECRET", support::SECRET),
            ("PUSHGATE_AUTH_API_KEY", support::API_KEY),
            ("PUSHGATE_BROKER_KIND", "redis"),
            ("PUSHGATE_BROKER_KEY_PREFIX", &prefix),
            ("PUSHGATE_LIMITS_PUSH_RATE_PER_SEC", "0"),
        ],
    );
    victim.wait_healthy().await;
    let url = format!(
        "ws://{}/ws?token={}",
        victim.addr,
        support::token("hank", 60)
    );
    let ws = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url)).await;
    let (mut ws, _) = ws
        .expect("the victim answers in time")
        .expect("the victim node accepts connections");

    // A steady stream of pushes through the survivor; the victim dies midway.
    let total = 40u64;
    let mut last_cursor = None;
    for n in 0..total {
        assert_eq!(
            survivor.push(&json!({"to": "*", "data": n})).await.status,
            202
        );
        if n < 10 {
            let frame = next_json(&mut ws, WAIT).await;
            assert_eq!(frame["data"], n);
            last_cursor = Some(frame["cursor"].as_str().expect("cursor").to_owned());
        }
        if n == 10 {
            victim.signal("KILL");
            victim.wait_exit(WAIT).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cursor = last_cursor.expect("saw messages");
    let url = survivor.ws_url(&format!(
        "token={}&cursor={cursor}",
        support::token("hank", 60)
    ));
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("resumes on the survivor");
    let recover = next_json(&mut ws, WAIT).await;
    assert_eq!(recover["complete"], true, "{recover}");
    let mut got = Vec::new();
    for _ in 10..total {
        got.push(
            next_json(&mut ws, WAIT).await["data"]
                .as_u64()
                .expect("number"),
        );
    }
    assert_eq!(
        got,
        (10..total).collect::<Vec<_>>(),
        "lost or repeated messages"
    );
}
