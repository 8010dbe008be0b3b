//! The `pushgate` binary as an operator runs it, for tests of what only
//! the process does: its logs on stdout, its errors on stderr, signals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The repository root, the binary's working directory.
pub(crate) const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A running `pushgate serve`, killed if a test fails midway.
pub(crate) struct Process {
    child: Child,
    /// The main listener, known once [`Process::wait_healthy`] returned.
    pub addr: SocketAddr,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Process {
    /// Starts `pushgate <args>` in the repository root on a free loopback
    /// port given by `PUSHGATE_SERVER_LISTEN`, with no `PUSHGATE_*` or
    /// `RUST_LOG` variables of the test's own environment, plus `env`.
    /// Stdout and stderr go to separate files.
    pub(crate) fn start(name: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_in(ROOT.as_ref(), name, args, env)
    }

    /// `start`, in working directory `dir` (where `./config.toml` is
    /// looked for).
    pub(crate) fn start_in(
        dir: &std::path::Path,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = |stream: &str| {
            std::env::temp_dir().join(format!(
                "pushgate-{name}-{}-{n}.{stream}",
                std::process::id(),
            ))
        };
        let (stdout, stderr) = (file("stdout"), file("stderr"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pushgate"));
        cmd.args(args).current_dir(dir);
        for (var, _) in std::env::vars_os() {
            let var_name = var.to_string_lossy();
            if var_name.starts_with("PUSHGATE_") || var_name == "RUST_LOG" {
                cmd.env_remove(var);
            }
        }
        // Port 0: the kernel picks a free port for the gateway's own
        // listener, and the `listening` log line tells which (a port taken
        // and released here first could be taken by another test meanwhile).
        cmd.env("PUSHGATE_SERVER_LISTEN", "127.0.0.1:0")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        let child = cmd.spawn().expect("pushgate starts");
        Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            stdout,
            stderr,
        }
    }

    /// The address in the `listening` log line (text or JSON), once written.
    fn listening_addr(&self) -> Option<SocketAddr> {
        const TEXT: &str = "addr=";
        const JSON: &str = "\"addr\":\"";
        let stdout = self.stdout();
        let line = stdout.lines().find(|l| l.contains("listening"))?;
        let start = line
            .find(TEXT)
            .map(|i| i + TEXT.len())
            .or_else(|| line.find(JSON).map(|i| i + JSON.len()))?;
        let rest = &line[start..];
        let end = rest.find([' ', '"', ',']).unwrap_or(rest.len());
        rest[..end].parse().ok()
    }

    /// Everything written to stdout so far.
    pub(crate) fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Everything written to stderr so far.
    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    fn output(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout(), self.stderr())
    }

    /// Waits until `/healthz` answers 200.
    pub(crate) async fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("pushgate exited early ({status}):\n{}", self.output());
            }
            if self.addr.port() == 0
                && let Some(addr) = self.listening_addr()
            {
                self.addr = addr;
            }
            if self.addr.port() != 0 && tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                let answer = super::raw_http(
                    self.addr,
                    b"GET /healthz HTTP/1.1\r\nHost: pushgate\r\nConnection: close\r\n\r\n",
                )
                .await;
                if answer.starts_with("HTTP/1.1 200") {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "never healthy:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends `signal` (`TERM`, `INT`) with kill(1).
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits up to `limit` for the process to exit.
    pub(crate) async fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                started.elapsed() < limit,
                "still running after {limit:?}:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, then the exit status within `limit`.
    pub(crate) async fn stop(&mut self, limit: Duration) -> ExitStatus {
        self.signal("TERM");
        self.wait_exit(limit).await
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.stdout);
        let _ = std::fs::remove_file(&self.stderr);
    }
}
