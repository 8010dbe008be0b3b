//! The backend side: `POST /push` at a given rate over a few keep-alive
//! connections, round-robin over one or more gateway nodes. Each payload
//! carries its number and the wall-clock time it was written
//! (`{"seq":N,"ts":µs}`), so receivers measure latency.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use indicatif::ProgressBar;
use serde::Serialize;
use tokio::time::Instant;

use crate::frames::now_us;
use crate::hist::{self, Hist};
use crate::http::{self, HttpConn};
use crate::target::{self, Target};

/// Longest one push may take (request written to answer read).
const PUSH_TIMEOUT: Duration = Duration::from_secs(30);
/// The default [`Pusher::max_idle_reuse`]: a keep-alive connection idle
/// longer than this is replaced by a new one before the next push.
/// Servers close idle keep-alive connections (pushgate after its 10 s
/// header timeout, this repository's nginx after 120 s), and a push
/// written into a connection the server is closing fails without an
/// answer. Half the shortest of those: a backend pushing a few times a
/// second over a few connections keeps them, as a real one does (at 1 s,
/// `--push-conns 4` at 2 pushes a second opened a new connection for
/// every push, so every first-recipient time had a TCP connect, an accept
/// and a connection task's start in it).
pub(crate) const MAX_IDLE_REUSE: Duration = Duration::from_secs(5);

/// Where and how to push.
#[derive(Debug, Clone)]
pub(crate) struct Pusher {
    /// `POST` targets, one per node: job j goes to `targets[j mod len]`.
    pub targets: Vec<Target>,
    /// Bearer key (empty: no `Authorization` header).
    pub api_key: String,
    /// Body template: `{to}` becomes `"*"` or a JSON array of user ids,
    /// `{data}` the payload object.
    pub body: String,
    /// Pushing tasks in parallel, each with one keep-alive connection per
    /// node.
    pub conns: usize,
    /// Bytes of padding in each payload.
    pub payload_bytes: usize,
    /// A connection idle longer than this is replaced before the next push
    /// ([`MAX_IDLE_REUSE`]).
    pub max_idle_reuse: Duration,
}

/// One push to make.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// The payload's `seq`.
    pub seq: u64,
    /// Recipients: `None` for a broadcast.
    pub to: Option<Vec<String>>,
    /// Channels (`"to": {"channels": [...]}`); when given, `to` is unused.
    pub channels: Option<Vec<String>>,
}

impl Job {
    /// A broadcast numbered `seq`.
    pub(crate) fn broadcast(seq: u64) -> Self {
        Self {
            seq,
            to: None,
            channels: None,
        }
    }
}

/// One push made.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Record {
    /// The payload's `seq`.
    pub seq: u64,
    /// When its request was written, µs since the epoch.
    pub sent_us: u64,
    /// The answer's status (0: no answer).
    pub status: u16,
    /// Request written to answer read, µs.
    pub rtt_us: u64,
}

impl Pusher {
    /// Makes `jobs`, starting one every `1/rate` s (`rate` 0: as fast as
    /// the connections go). Returns one record per job, in `seq` order.
    pub(crate) async fn run(
        &self,
        jobs: Vec<Job>,
        rate: f64,
        bar: &ProgressBar,
    ) -> anyhow::Result<Vec<Record>> {
        anyhow::ensure!(!self.targets.is_empty(), "no push URL");
        let mut addrs = Vec::with_capacity(self.targets.len());
        for target in &self.targets {
            addrs.push(target.resolve().await?);
        }
        let addrs = Arc::new(addrs);
        let queue = Arc::new(Mutex::new(
            jobs.into_iter().enumerate().collect::<VecDeque<_>>(),
        ));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..self.conns.max(1) {
            let queue = Arc::clone(&queue);
            let addrs = Arc::clone(&addrs);
            let pusher = self.clone();
            let bar = bar.clone();
            tasks.push(tokio::spawn(async move {
                pusher.drain(&addrs, queue, started, rate, bar).await
            }));
        }
        let mut records = Vec::new();
        for task in tasks {
            records.extend(task.await.context("pusher task")??);
        }
        records.sort_by_key(|r| r.seq);
        Ok(records)
    }

    /// One task's loop: take the next job, wait for its slot (job `index`
    /// starts at `index / rate` s), push it to node `index mod nodes` over
    /// that node's keep-alive connection.
    async fn drain(
        &self,
        addrs: &[std::net::SocketAddr],
        queue: Arc<Mutex<VecDeque<(usize, Job)>>>,
        started: Instant,
        rate: f64,
        bar: ProgressBar,
    ) -> anyhow::Result<Vec<Record>> {
        let mut conns: Vec<Option<(HttpConn, Instant)>> = addrs.iter().map(|_| None).collect();
        let mut records = Vec::new();
        loop {
            let next = queue
                .lock()
                .map_err(|_| anyhow::anyhow!("push queue poisoned"))?
                .pop_front();
            let Some((index, job)) = next else { break };
            if rate > 0.0 {
                let due = started + Duration::from_secs_f64(index as f64 / rate);
                tokio::time::sleep_until(due).await;
            }
            let node = index % addrs.len();
            let target = &self.targets[node];
            let conn = &mut conns[node];
            if conn
                .as_ref()
                .is_some_and(|(_, used)| used.elapsed() > self.max_idle_reuse)
            {
                *conn = None;
            }
            if conn.is_none() {
                *conn = target::connect(addrs[node], None)
                    .await
                    .ok()
                    .map(|c| (HttpConn::new(c), Instant::now()));
            }
            let record = match conn {
                Some((c, used)) => {
                    match tokio::time::timeout(PUSH_TIMEOUT, self.push(target, c, &job)).await {
                        Ok(Ok((record, keep_alive))) => {
                            *used = Instant::now();
                            if !keep_alive {
                                *conn = None;
                            }
                            record
                        }
                        _ => {
                            *conn = None;
                            Record {
                                seq: job.seq,
                                sent_us: now_us(),
                                status: 0,
                                rtt_us: 0,
                            }
                        }
                    }
                }
                None => Record {
                    seq: job.seq,
                    sent_us: now_us(),
                    status: 0,
                    rtt_us: 0,
                },
            };
            records.push(record);
            bar.inc(1);
        }
        Ok(records)
    }

    /// Makes one push to `target`; also says whether the connection stays
    /// open.
    async fn push(
        &self,
        target: &Target,
        conn: &mut HttpConn,
        job: &Job,
    ) -> anyhow::Result<(Record, bool)> {
        let sent_us = now_us();
        let body = self.body_for(job, sent_us);
        let auth = format!("Bearer {}", self.api_key);
        let mut headers = vec![("Content-Type", "application/json")];
        if !self.api_key.is_empty() {
            headers.push(("Authorization", auth.as_str()));
        }
        let request = http::request(
            "POST",
            &target.path,
            &target.host_header(),
            &headers,
            body.as_bytes(),
        );
        conn.send(&request).await?;
        let head = conn.read_head().await?;
        conn.read_body(&head).await?;
        let record = Record {
            seq: job.seq,
            sent_us,
            status: head.status,
            rtt_us: now_us().saturating_sub(sent_us),
        };
        Ok((record, !head.is_closing()))
    }

    /// The request body of `job`, pushed at `ts_us`.
    pub(crate) fn body_for(&self, job: &Job, ts_us: u64) -> String {
        let pad = "x".repeat(self.payload_bytes);
        let data = format!(r#"{{"seq":{},"ts":{ts_us},"pad":"{pad}"}}"#, job.seq);
        let to = match (&job.channels, &job.to) {
            (Some(channels), _) => serde_json::json!({ "channels": channels }).to_string(),
            (None, None) => "\"*\"".to_owned(),
            (None, Some(users)) => serde_json::to_string(users).unwrap_or_else(|_| "[]".into()),
        };
        self.body.replace("{to}", &to).replace("{data}", &data)
    }
}

/// Push round trips (µs) and how many were accepted (2xx).
pub(crate) fn summarize(records: &[Record]) -> (Hist, u64) {
    let mut rtt = hist::new_hist();
    let mut accepted = 0;
    for r in records {
        if (200..300).contains(&r.status) {
            accepted += 1;
            hist::record(&mut rtt, r.rtt_us);
        }
    }
    (rtt, accepted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_fill_in_recipients_and_payload() {
        let pusher = Pusher {
            targets: vec![Target::parse("http://127.0.0.1:1/push").unwrap()],
            api_key: String::new(),
            body: r#"{"to":{to},"data":{data}}"#.into(),
            conns: 1,
            payload_bytes: 3,
            max_idle_reuse: MAX_IDLE_REUSE,
        };
        let broadcast = pusher.body_for(&Job::broadcast(7), 42);
        assert_eq!(
            broadcast,
            r#"{"to":"*","data":{"seq":7,"ts":42,"pad":"xxx"}}"#
        );
        let personal = pusher.body_for(
            &Job {
                seq: 1,
                to: Some(vec!["a".into(), "b".into()]),
                channels: None,
            },
            5,
        );
        assert!(personal.starts_with(r#"{"to":["a","b"],"#));
        let channel = pusher.body_for(
            &Job {
                seq: 2,
                to: None,
                channels: Some(vec!["c.1".into(), "c.2".into()]),
            },
            5,
        );
        assert!(
            channel.starts_with(r#"{"to":{"channels":["c.1","c.2"]},"#),
            "{channel}"
        );
    }

    /// Reads one request from `conn` and returns its body (`None` when the
    /// connection ends first).
    async fn read_request(conn: &mut HttpConn) -> Option<String> {
        let end = loop {
            if let Some(end) = http::find(conn.buffered(), b"\r\n\r\n") {
                break end;
            }
            if conn.fill().await.ok()? == 0 {
                return None;
            }
        };
        let head = String::from_utf8(conn.buffered().drain(..end + 4).collect()).ok()?;
        let len: usize = head.lines().find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")?
                .trim()
                .parse()
                .ok()
        })?;
        while conn.buffered().len() < len {
            if conn.fill().await.ok()? == 0 {
                return None;
            }
        }
        String::from_utf8(conn.buffered().drain(..len).collect()).ok()
    }

    /// A server on 127.0.0.1:0 that answers every request with 202 and
    /// counts the bodies it got, by the `seq` in them. With `one_shot`, it
    /// closes each connection after its first answer without saying so (as
    /// a server closing an idle keep-alive connection does).
    async fn counting_server(one_shot: bool) -> (Target, Arc<Mutex<Vec<u64>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = Arc::clone(&log);
                tokio::spawn(async move {
                    let mut conn = HttpConn::new(stream);
                    while let Some(body) = read_request(&mut conn).await {
                        let seq = body.split("\"seq\":").nth(1).unwrap();
                        let seq = seq.split(',').next().unwrap().parse().unwrap();
                        log.lock().unwrap().push(seq);
                        let answer = b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n";
                        if conn.send(answer).await.is_err() || one_shot {
                            break;
                        }
                    }
                });
            }
        });
        let target = Target::parse(&format!("http://127.0.0.1:{port}/push")).unwrap();
        (target, seen)
    }

    #[tokio::test]
    async fn pushes_go_round_robin_over_the_nodes() {
        let (a, seen_a) = counting_server(false).await;
        let (b, seen_b) = counting_server(false).await;
        let pusher = Pusher {
            targets: vec![a, b],
            api_key: "k".into(),
            body: r#"{"to":{to},"data":{data}}"#.into(),
            conns: 3,
            payload_bytes: 0,
            max_idle_reuse: MAX_IDLE_REUSE,
        };
        let jobs = (1..=10).map(Job::broadcast).collect();
        let records = pusher.run(jobs, 0.0, &ProgressBar::hidden()).await.unwrap();
        assert!(records.iter().all(|r| r.status == 202), "{records:?}");
        let mut a = seen_a.lock().unwrap().clone();
        let mut b = seen_b.lock().unwrap().clone();
        a.sort_unstable();
        b.sort_unstable();
        // Job j (from 0) goes to node j mod 2: seq 1, 3, 5, ... to the first.
        assert_eq!(a, vec![1, 3, 5, 7, 9]);
        assert_eq!(b, vec![2, 4, 6, 8, 10]);
    }

    #[tokio::test]
    async fn an_idle_connection_is_replaced_before_the_next_push() {
        let (target, seen) = counting_server(true).await;
        let mut pusher = Pusher {
            targets: vec![target],
            api_key: String::new(),
            body: r#"{"to":{to},"data":{data}}"#.into(),
            conns: 1,
            payload_bytes: 0,
            // Every connection counts as idle too long: each push opens
            // its own, and the server's silent close costs nothing.
            max_idle_reuse: Duration::ZERO,
        };
        let jobs: Vec<Job> = (1..=3).map(Job::broadcast).collect();
        let records = pusher.run(jobs.clone(), 0.0, &ProgressBar::hidden()).await;
        assert!(records.unwrap().iter().all(|r| r.status == 202));
        assert_eq!(seen.lock().unwrap().len(), 3);
        // Reusing the closed connection instead loses the push written into
        // it (the next one opens a new connection): what the limit is for.
        pusher.max_idle_reuse = Duration::from_secs(3600);
        let records = pusher.run(jobs, 0.0, &ProgressBar::hidden()).await.unwrap();
        let statuses: Vec<u16> = records.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [202, 0, 202]);
    }
}
