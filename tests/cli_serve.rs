//! `pushgate --config config.toml` as an operator runs it: it serves on the
//! address from the environment and exits 0 on SIGTERM or SIGINT, within
//! the drain timeout.

mod support;

use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use pushgate::auth::token;
use pushgate::config::{Config, SHIPPED_DEV_SECRET};
use pushgate::protocol::UserId;
use support::process::{Process, ROOT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

/// How long the process may take to answer at all.
const WAIT: Duration = Duration::from_secs(30);

/// `GET path` on a new connection; the whole answer, or an error if it
/// does not come within [`WAIT`].
async fn get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: pushgate\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok(String::from_utf8_lossy(&answer).into_owned())
    };
    tokio::time::timeout(WAIT, exchange)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

fn shipped_drain_timeout() -> Duration {
    let text = std::fs::read_to_string(format!("{ROOT}/config.toml")).expect("config.toml");
    let config = Config::from_toml_str(&text).expect("parses");
    config.server.drain_timeout()
}

#[tokio::test]
async fn serve_answers_healthz_and_exits_0_on_sigterm_within_drain_timeout() {
    let mut gw = Process::start("sigterm", &["--config", "config.toml"], &[]);
    gw.wait_healthy().await;
    let ready = get(gw.addr, "/readyz").await.expect("readyz answers");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    gw.signal("TERM");
    let limit = shipped_drain_timeout() + Duration::from_secs(5);
    let status = gw.wait_exit(limit).await;
    assert_eq!(status.code(), Some(0), "{status}:\n{}", gw.stdout());
}

#[tokio::test]
async fn serve_subcommand_drains_a_connected_client_and_exits_0_on_sigint() {
    let drain = Duration::from_secs(2);
    let mut gw = Process::start(
        "sigint",
        &["serve", "--config", "config.toml"],
        &[
            ("PUSHGATE_SERVER_DRAIN_TIMEOUT_SECS", "2"),
            ("PUSHGATE_SERVER_DRAIN_SPREAD_SECS", "0"),
        ],
    );
    gw.wait_healthy().await;
    let user = UserId::parse("alice").expect("valid");
    let exp = pushgate::gateway::Gateway::unix_now() + 600;
    let jwt = token::mint(SHIPPED_DEV_SECRET.as_bytes(), &user, exp);
    let url = format!("ws://{}/ws?token={jwt}", gw.addr);
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("ws connects");
    gw.signal("INT");
    let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("a frame in time")
        .expect("open")
        .expect("no error");
    let Message::Text(text) = frame else {
        panic!("expected the reconnect frame, got {frame:?}");
    };
    let frame: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(frame["type"], "reconnect", "{frame}");
    assert_eq!(frame["reason"], "draining", "{frame}");
    // The client stays silent (it does not answer the close), so the
    // process waits out the drain timeout and then exits 0.
    let status = gw.wait_exit(drain + Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{status}:\n{}", gw.stdout());
    drop(ws);
}

/// Starts `pushgate <args>` in the repository root with stdout and stderr
/// piped, with exactly these `PUSHGATE_*` variables.
fn run_piped(args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pushgate"));
    cmd.args(args).current_dir(ROOT);
    for (var, _) in std::env::vars_os() {
        let name = var.to_string_lossy();
        if name.starts_with("PUSHGATE_") || name == "RUST_LOG" || name == "NO_COLOR" {
            cmd.env_remove(var);
        }
    }
    cmd.envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("pushgate starts")
}

#[tokio::test]
async fn logs_written_to_a_pipe_carry_no_terminal_colour_codes() {
    let mut child = run_piped(
        &["--config", "config.toml"],
        &[
            ("PUSHGATE_SERVER_LISTEN", "127.0.0.1:0"),
            ("PUSHGATE_SERVER_DRAIN_TIMEOUT_SECS", "1"),
            ("PUSHGATE_SERVER_DRAIN_SPREAD_SECS", "0"),
        ],
    );
    let pid = child.id().to_string();
    // Read stdout as it comes: the `listening` line names the port the
    // kernel gave the gateway's own listener.
    let stdout = child.stdout.take().expect("piped stdout");
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut lines = std::io::BufReader::new(stdout);
        let mut line = Vec::new();
        while lines.read_until(b'\n', &mut line).expect("read stdout") > 0 {
            if let Some(addr) = listening_addr(&String::from_utf8_lossy(&line)) {
                let _ = addr_tx.send(addr);
            }
            all.append(&mut line);
        }
        all
    });
    let addr = tokio::task::spawn_blocking(move || addr_rx.recv_timeout(WAIT))
        .await
        .expect("join")
        .expect("a listening line within 30 s");
    let started = Instant::now();
    while get(addr, "/healthz").await.is_err() {
        assert!(started.elapsed() < WAIT, "never healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let out = tokio::time::timeout(
        WAIT,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("exits in time")
    .expect("join")
    .expect("output");
    let stdout = reader.join().expect("stdout read");
    let text = String::from_utf8_lossy(&stdout);
    assert!(
        text.contains("listening"),
        "the logs are on stdout:\n{text}"
    );
    assert!(!stdout.contains(&0x1b), "ESC in piped logs:\n{text:?}");
    assert!(!out.stderr.contains(&0x1b), "ESC on stderr");
}

/// The address of a text `listening` log line (`… listening addr=IP:PORT …`).
fn listening_addr(line: &str) -> Option<SocketAddr> {
    if !line.contains("listening") {
        return None;
    }
    let tail = &line[line.find("addr=")? + "addr=".len()..];
    let end = tail
        .find(|c: char| c.is_whitespace() || c == ',')
        .unwrap_or(tail.len());
    tail[..end].parse().ok()
}

#[tokio::test]
async fn a_broker_that_cannot_be_reached_is_reported_without_its_password() {
    const PASSWORD: &str = "hunter2-redis-password";
    // Port 1 on loopback: nothing listens, the connection is refused.
    let url = format!("redis://pushgate:{PASSWORD}@127.0.0.1:1/0");
    let child = run_piped(
        &["--config", "config.toml"],
        &[
            ("PUSHGATE_SERVER_LISTEN", "127.0.0.1:0"),
            ("PUSHGATE_BROKER_KIND", "redis"),
            ("PUSHGATE_BROKER_URL", &url),
            ("PUSHGATE_BROKER_TIMEOUT_MS", "500"),
        ],
    );
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("exits in time")
    .expect("join")
    .expect("output");
    assert!(!out.status.success(), "{out:?}");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("broker"), "{all}");
    assert!(!all.contains(PASSWORD), "{all}");
}

#[tokio::test]
async fn a_jwk_set_provider_that_is_down_shows_in_the_process_metrics() {
    // The set is fetched before the rest of the gateway registers its
    // metrics: the failed fetch at start must still be counted.
    let mut gw = Process::start(
        "jwks-down",
        &["--config", "config.toml"],
        // Port 1 on loopback: nothing listens, the connection is refused.
        &[("PUSHGATE_AUTH_JWKS_URL", "http://127.0.0.1:1/jwks.json")],
    );
    gw.wait_healthy().await;
    let metrics = get(gw.addr, "/metrics").await.expect("metrics answer");
    let value = |series: &str| {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse::<f64>().ok())
    };
    assert!(
        value("pushgate_auth_jwks_fetches_total{result=\"error\"}").is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    assert_eq!(
        value("pushgate_auth_jwks_fetches_total{result=\"ok\"}"),
        Some(0.0),
        "{metrics}"
    );
    gw.signal("TERM");
    let _ = gw
        .wait_exit(shipped_drain_timeout() + Duration::from_secs(5))
        .await;
}

/// The names of process `pid`'s threads (`/proc/<pid>/task/*/comm`).
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the process's threads")
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect()
}

#[tokio::test]
async fn cores_sizes_the_runtime_workers_and_the_fan_out_threads() {
    let count =
        |names: &[String], prefix: &str| names.iter().filter(|n| n.starts_with(prefix)).count();
    for cores in [1, 3] {
        let mut gw = Process::start(
            "cores",
            &["--config", "config.toml"],
            &[("PUSHGATE_SERVER_CORES", &cores.to_string())],
        );
        gw.wait_healthy().await;
        let names = thread_names(gw.pid());
        // tokio names its workers "tokio-rt-worker"; its blocking threads
        // have the same name, but nothing up to a health check starts one.
        assert_eq!(count(&names, "tokio-rt-worker"), cores, "{names:?}");
        assert_eq!(count(&names, "pushgate-fanout"), cores, "{names:?}");
        gw.signal("TERM");
        let status = gw
            .wait_exit(shipped_drain_timeout() + Duration::from_secs(5))
            .await;
        assert_eq!(status.code(), Some(0), "{status}");
    }
}
