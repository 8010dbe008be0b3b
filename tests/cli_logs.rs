//! `[log] format = "json"` as a log shipper reads it: every line the
//! binary writes to stdout during a DEBUG run with real traffic is one
//! JSON object with `ts`, `level`, `target` and `msg`, and the lines about
//! a connection carry its `conn_id`, `user_id`, `transport` and `reason`.

mod support;

use std::time::Duration;

use hyper::Method;
use pushgate::config::{SHIPPED_DEV_API_KEY, SHIPPED_DEV_SECRET};
use pushgate::protocol::UserId;
use serde_json::{Map, Value, json};
use support::process::Process;
use support::{Gateway, Ws, next_json, read_until_close};

const WAIT: Duration = Duration::from_secs(10);

async fn connect(gw: &Process, user: &str) -> Ws {
    let user = UserId::parse(user).expect("user id");
    let exp = pushgate::gateway::Gateway::unix_now() + 600;
    let jwt = pushgate::auth::token::mint(SHIPPED_DEV_SECRET.as_bytes(), &user, exp);
    let url = format!("ws://{}/ws?token={jwt}", gw.addr);
    tokio_tungstenite::connect_async(url)
        .await
        .expect("ws connects")
        .0
}

/// Each stdout line as a JSON object; panics naming a line that is not.
fn objects(stdout: &str) -> Vec<Map<String, Value>> {
    stdout
        .lines()
        .map(|line| match serde_json::from_str(line) {
            Ok(Value::Object(map)) => map,
            other => panic!("not a JSON object on one line: {line:?} ({other:?})"),
        })
        .collect()
}

/// The first line whose `msg` is `msg` and that has every `(key, value)`.
fn find<'a>(
    lines: &'a [Map<String, Value>],
    msg: &str,
    with: &[(&str, Value)],
) -> &'a Map<String, Value> {
    lines
        .iter()
        .find(|line| line["msg"] == msg && with.iter().all(|(k, v)| line.get(*k) == Some(v)))
        .unwrap_or_else(|| panic!("no line {msg:?} with {with:?} in {lines:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line_with_stable_fields() {
    let mut gw = Process::start(
        "json-logs",
        &["--config", "config.toml"],
        &[
            ("PUSHGATE_LOG_FORMAT", "json"),
            ("PUSHGATE_LOG_LEVEL", "debug"),
            ("PUSHGATE_SESSION_MAX_CONNECTIONS_PER_USER", "1"),
        ],
    );
    gw.wait_healthy().await;
    // alice connects twice: the second replaces the first (reason
    // "replaced"), then a push reaches the second.
    let mut first = connect(&gw, "alice").await;
    let mut second = connect(&gw, "alice").await;
    let (code, _) = read_until_close(&mut first, WAIT).await;
    assert!(code.is_some(), "the first connection was closed");
    let pushed = Gateway::attach(gw.addr)
        .request(
            Method::POST,
            "/push",
            &[
                ("authorization", &format!("Bearer {SHIPPED_DEV_API_KEY}")),
                ("content-type", "application/json"),
            ],
            json!({"to": ["alice"], "data": "hi"}).to_string(),
        )
        .await;
    assert_eq!(pushed.status, 202);
    assert_eq!(next_json(&mut second, WAIT).await["data"], "hi");
    drop((first, second));
    let status = gw.stop(WAIT).await;
    assert!(status.success(), "{status}");

    let stdout = gw.stdout();
    assert!(!stdout.contains('\u{1b}'), "no terminal escapes:\n{stdout}");
    let lines = objects(&stdout);
    for line in &lines {
        let ts = line["ts"].as_str().expect("ts is a string");
        assert!(
            ts.len() >= 20 && ts.as_bytes()[10] == b'T' && ts.ends_with('Z'),
            "ts is RFC 3339 UTC: {ts}"
        );
        let level = line["level"].as_str().expect("level is a string");
        assert!(
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level),
            "{level}"
        );
        assert!(
            line["target"].as_str().is_some_and(|t| !t.is_empty()),
            "{line:?}"
        );
        assert!(line["msg"].is_string(), "{line:?}");
    }
    for line in stdout.lines() {
        let at: Vec<_> = ["{\"ts\":", ",\"level\":", ",\"target\":", ",\"msg\":"]
            .iter()
            .map(|key| line.find(key))
            .collect();
        assert!(
            at[0] == Some(0) && at.windows(2).all(|w| w[0] < w[1]),
            "ts, level, target, msg come first, in order: {line}"
        );
    }
    assert!(
        lines.iter().any(|l| l["level"] == "DEBUG"),
        "[log] level applied"
    );

    let listening = find(&lines, "listening", &[]);
    assert_eq!(listening["addr"], gw.addr.to_string());
    assert!(
        listening["version"]
            .as_str()
            .is_some_and(|v| v.contains("commit"))
    );
    let ws = ("transport", json!("ws"));
    let alice = ("user_id", json!("alice"));
    let opened = find(&lines, "connection opened", &[ws.clone(), alice.clone()]);
    let first_id = opened["conn_id"].clone();
    assert!(first_id.is_u64(), "conn_id is a number: {opened:?}");
    find(
        &lines,
        "closing connection",
        &[("conn_id", first_id.clone()), ("reason", json!("replaced"))],
    );
    find(
        &lines,
        "connection closed",
        &[ws, alice, ("conn_id", first_id)],
    );
    find(&lines, "SIGTERM: draining", &[]);
}

#[tokio::test]
async fn text_logs_are_the_default() {
    let mut gw = Process::start(
        "text-logs",
        &["--config", "config.toml"],
        &[("PUSHGATE_LOG", "info")],
    );
    gw.wait_healthy().await;
    let status = gw.stop(WAIT).await;
    assert!(status.success(), "{status}");
    let stdout = gw.stdout();
    let listening = stdout
        .lines()
        .find(|l| l.contains("listening"))
        .unwrap_or_else(|| panic!("no listening line:\n{stdout}"));
    assert!(listening.contains("INFO"), "{listening}");
    assert!(
        serde_json::from_str::<Value>(listening).is_err(),
        "{listening}"
    );
}
