//! A node killed with SIGKILL during a steady stream of pushes: its clients
//! reconnect to another node with their cursors and lose nothing.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::{Gateway, next_json, redis};

const WAIT: Duration = Duration::from_secs(15);

/// The victim node's process, killed and reaped however the test ends.
struct Node(std::process::Child);

impl Node {
    /// SIGKILL, no drain.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_a_killed_node_resume_elsewhere_and_lose_nothing() {
    if !redis::available() {
        return;
    }
    let prefix = redis::prefix("kill");
    let survivor = Gateway::start(redis::config(redis::REDIS_URL, &prefix)).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    // No config file (a temporary working directory): defaults plus env.
    let mut victim = Node(
        Command::new(env!("CARGO_BIN_EXE_pushgate"))
            .current_dir(std::env::temp_dir())
            .env("PUSHGATE_SERVER_LISTEN", format!("127.0.0.1:{port}"))
            .env("PUSHGATE_AUTH_SECRET", support::SECRET)
            .env("PUSHGATE_AUTH_API_KEY", support::API_KEY)
            .env("PUSHGATE_BROKER_KIND", "redis")
            .env("PUSHGATE_BROKER_KEY_PREFIX", &prefix)
            .env("PUSHGATE_LIMITS_PUSH_RATE_PER_SEC", "0")
            .env("PUSHGATE_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("node starts"),
    );
    let url = |query: &str| format!("ws://127.0.0.1:{port}/ws?{query}");
    let mut ws = None;
    for _ in 0..100 {
        match tokio_tungstenite::connect_async(url(&format!(
            "token={}",
            support::token("hank", 60)
        )))
        .await
        {
            Ok((conn, _)) => {
                ws = Some(conn);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let mut ws = ws.expect("the victim node accepts connections");

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
            victim.kill();
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
