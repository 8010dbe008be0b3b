//! Redis for the cluster tests: the real server at 127.0.0.1:6379, a key
//! prefix of the test's own, and private servers a test may stop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pushgate::config::{BrokerKind, Config};

/// The shared Redis every machine of this project runs.
pub(crate) const REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Whether Redis answers; without it the cluster tests skip, except under
/// CI (where a missing Redis is a failure, not a skip).
pub(crate) fn available() -> bool {
    let up = TcpStream::connect_timeout(
        &"127.0.0.1:6379".parse().expect("addr"),
        Duration::from_secs(1),
    )
    .is_ok();
    if !up {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI has a Redis at 127.0.0.1:6379, and it does not answer"
        );
        eprintln!("SKIPPED: no Redis answers at 127.0.0.1:6379");
    }
    up
}

/// A key prefix no other test uses.
pub(crate) fn prefix(test: &str) -> String {
    format!("pgtest:{test}:{:08x}", rand::random::<u32>())
}

/// A test config on the Redis broker at `url` under `prefix`.
pub(crate) fn config(url: &str, prefix: &str) -> Config {
    let mut c = super::config();
    c.broker.kind = BrokerKind::Redis;
    c.broker.url = url.to_owned();
    c.broker.key_prefix = prefix.to_owned();
    c.broker.timeout_ms = 1000;
    c
}

/// A private redis-server on a free port, for tests that stop it.
pub(crate) struct PrivateRedis {
    /// Its port.
    pub port: u16,
    password: Option<String>,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts one on a free port and waits until it answers.
    pub(crate) fn start() -> Self {
        Self::start_with(None)
    }

    /// Starts one that requires `password` (`requirepass`).
    pub(crate) fn start_with_password(password: &str) -> Self {
        Self::start_with(Some(password.to_owned()))
    }

    /// Picks a free port and starts a server there; a port another
    /// process took between the pick and the server's bind is given up
    /// for another, so the server the test talks to is always its own.
    fn start_with(password: Option<String>) -> Self {
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .expect("free port")
                .local_addr()
                .expect("addr")
                .port();
            let mut redis = Self {
                port,
                password: password.clone(),
                child: None,
            };
            if redis.try_start() {
                return redis;
            }
        }
        panic!("no private redis started on any of 5 free ports");
    }

    /// Its URL, with the password if it has one.
    pub(crate) fn url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// Starts it again on the same port (after `stop`).
    pub(crate) fn restart(&mut self) {
        assert!(
            self.try_start(),
            "private redis did not start again on port {}",
            self.port
        );
    }

    /// Starts redis-server on `self.port` and waits (5 s at most) until
    /// the server answering there is this child; false if it exited (the
    /// port was taken) or never answered.
    fn try_start(&mut self) -> bool {
        let mut args = vec![
            "--port".to_owned(),
            self.port.to_string(),
            "--bind".to_owned(),
            "127.0.0.1".to_owned(),
            "--save".to_owned(),
            String::new(),
            "--appendonly".to_owned(),
            "no".to_owned(),
        ];
        if let Some(password) = &self.password {
            args.extend(["--requirepass".to_owned(), password.clone()]);
        }
        let mut child = Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if child.try_wait().expect("try_wait").is_some() {
                return false;
            }
            if self.answering_pid() == Some(child.id()) {
                self.child = Some(child);
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// The `process_id` of the Redis answering on `self.port`, if one does.
    fn answering_pid(&self) -> Option<u32> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .ok()?;
        let mut request = String::new();
        if let Some(password) = &self.password {
            request.push_str(&format!("AUTH {password}\r\n"));
        }
        request.push_str("INFO server\r\n");
        stream.write_all(request.as_bytes()).ok()?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).ok()?;
            if n == 0 {
                return None;
            }
            answer.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&answer);
            if let Some((_, rest)) = text.split_once("process_id:")
                && let Some((pid, _)) = rest.split_once("\r\n")
            {
                return pid.parse().ok();
            }
        }
    }

    /// Kills it (losing every key, as a Redis without persistence does).
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}
