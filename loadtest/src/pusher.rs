//! The backend side: `POST /push` at a given rate over a few keep-alive
//! connections. Each payload carries its number and the wall-clock time it
//! was written (`{"seq":N,"ts":µs}`), so receivers measure latency.

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

/// Where and how to push.
#[derive(Debug, Clone)]
pub struct Pusher {
    /// `POST` target.
    pub target: Target,
    /// Bearer key (empty: no `Authorization` header).
    pub api_key: String,
    /// Body template: `{to}` becomes `"*"` or a JSON array of user ids,
    /// `{data}` the payload object.
    pub body: String,
    /// Keep-alive connections used in parallel.
    pub conns: usize,
    /// Bytes of padding in each payload.
    pub payload_bytes: usize,
}

/// One push to make.
#[derive(Debug, Clone)]
pub struct Job {
    /// The payload's `seq`.
    pub seq: u64,
    /// Recipients: `None` for a broadcast.
    pub to: Option<Vec<String>>,
}

/// One push made.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Record {
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
    pub async fn run(
        &self,
        jobs: Vec<Job>,
        rate: f64,
        bar: &ProgressBar,
    ) -> anyhow::Result<Vec<Record>> {
        let addr = self.target.resolve().await?;
        let queue = Arc::new(Mutex::new(
            jobs.into_iter().enumerate().collect::<VecDeque<_>>(),
        ));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..self.conns.max(1) {
            let queue = Arc::clone(&queue);
            let pusher = self.clone();
            let bar = bar.clone();
            tasks.push(tokio::spawn(async move {
                pusher.drain(addr, queue, started, rate, bar).await
            }));
        }
        let mut records = Vec::new();
        for task in tasks {
            records.extend(task.await.context("pusher task")??);
        }
        records.sort_by_key(|r| r.seq);
        Ok(records)
    }

    /// One connection's loop: take the next job, wait for its slot (job
    /// `index` starts at `index / rate` s), push.
    async fn drain(
        &self,
        addr: std::net::SocketAddr,
        queue: Arc<Mutex<VecDeque<(usize, Job)>>>,
        started: Instant,
        rate: f64,
        bar: ProgressBar,
    ) -> anyhow::Result<Vec<Record>> {
        let mut conn: Option<HttpConn> = None;
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
            if conn.is_none() {
                conn = target::connect(addr, None).await.ok().map(HttpConn::new);
            }
            let record = match &mut conn {
                Some(c) => match tokio::time::timeout(PUSH_TIMEOUT, self.push(c, &job)).await {
                    Ok(Ok((record, keep_alive))) => {
                        if !keep_alive {
                            conn = None;
                        }
                        record
                    }
                    _ => {
                        conn = None;
                        Record {
                            seq: job.seq,
                            sent_us: now_us(),
                            status: 0,
                            rtt_us: 0,
                        }
                    }
                },
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

    /// Makes one push; also says whether the connection stays open.
    async fn push(&self, conn: &mut HttpConn, job: &Job) -> anyhow::Result<(Record, bool)> {
        let sent_us = now_us();
        let body = self.body_for(job, sent_us);
        let auth = format!("Bearer {}", self.api_key);
        let mut headers = vec![("Content-Type", "application/json")];
        if !self.api_key.is_empty() {
            headers.push(("Authorization", auth.as_str()));
        }
        let request = http::request(
            "POST",
            &self.target.path,
            &self.target.host_header(),
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
    pub fn body_for(&self, job: &Job, ts_us: u64) -> String {
        let pad = "x".repeat(self.payload_bytes);
        let data = format!(r#"{{"seq":{},"ts":{ts_us},"pad":"{pad}"}}"#, job.seq);
        let to = match &job.to {
            None => "\"*\"".to_owned(),
            Some(users) => serde_json::to_string(users).unwrap_or_else(|_| "[]".into()),
        };
        self.body.replace("{to}", &to).replace("{data}", &data)
    }
}

/// Push round trips (µs) and how many were accepted (2xx).
pub fn summarize(records: &[Record]) -> (Hist, u64) {
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
            target: Target::parse("http://127.0.0.1:1/push").unwrap(),
            api_key: String::new(),
            body: r#"{"to":{to},"data":{data}}"#.into(),
            conns: 1,
            payload_bytes: 3,
        };
        let broadcast = pusher.body_for(&Job { seq: 7, to: None }, 42);
        assert_eq!(
            broadcast,
            r#"{"to":"*","data":{"seq":7,"ts":42,"pad":"xxx"}}"#
        );
        let personal = pusher.body_for(
            &Job {
                seq: 1,
                to: Some(vec!["a".into(), "b".into()]),
            },
            5,
        );
        assert!(personal.starts_with(r#"{"to":["a","b"],"#));
    }
}
