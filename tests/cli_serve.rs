//! `pushgate --config config.toml` as an operator runs it: it serves on the
//! address from the environment and exits 0 on SIGTERM or SIGINT, within
//! the drain timeout.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use pushgate::auth::token;
use pushgate::config::{Config, SHIPPED_DEV_SECRET};
use pushgate::protocol::UserId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A running `pushgate` process, killed if a test fails midway.
struct Process {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Process {
    /// Starts `pushgate <args>` in the repository root on a free loopback
    /// port given by `PUSHGATE_SERVER_LISTEN`, plus `env`.
    fn start(name: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        // A port the kernel just handed out and released: free for now.
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let log = std::env::temp_dir().join(format!(
            "pushgate-cli-serve-{}-{name}.log",
            std::process::id()
        ));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pushgate"));
        cmd.args(args).current_dir(ROOT);
        for (var, _) in std::env::vars_os() {
            if var.to_string_lossy().starts_with("PUSHGATE_") {
                cmd.env_remove(var);
            }
        }
        cmd.env("PUSHGATE_SERVER_LISTEN", addr.to_string())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = cmd.spawn().expect("pushgate starts");
        Self { child, addr, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `/healthz` answers 200.
    async fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("pushgate exited early ({status}):\n{}", self.log());
            }
            if let Ok(answer) = get(self.addr, "/healthz").await {
                assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
                return;
            }
            assert!(Instant::now() < deadline, "never healthy:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends `signal` (`TERM`, `INT`) with kill(1).
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits up to `limit` for the process to exit.
    async fn wait_exit(&mut self, limit: Duration) -> (ExitStatus, Duration) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return (status, started.elapsed());
            }
            assert!(
                started.elapsed() < limit,
                "still running after {limit:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// `GET path` on a new connection; the whole answer.
async fn get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: pushgate\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
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
    let (status, _) = gw.wait_exit(limit).await;
    assert_eq!(status.code(), Some(0), "{status}:\n{}", gw.log());
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
    let (status, took) = gw.wait_exit(drain + Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{status}:\n{}", gw.log());
    assert!(took < drain + Duration::from_secs(5));
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
    let addr = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let child = run_piped(
        &["--config", "config.toml"],
        &[
            ("PUSHGATE_SERVER_LISTEN", &addr.to_string()),
            ("PUSHGATE_SERVER_DRAIN_TIMEOUT_SECS", "1"),
            ("PUSHGATE_SERVER_DRAIN_SPREAD_SECS", "0"),
        ],
    );
    let pid = child.id().to_string();
    let started = Instant::now();
    while get(addr, "/healthz").await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(30), "never healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("listening"),
        "the logs are on stdout:\n{stdout}"
    );
    assert!(
        !out.stdout.contains(&0x1b),
        "ESC in piped logs:\n{stdout:?}"
    );
    assert!(!out.stderr.contains(&0x1b), "ESC on stderr");
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
