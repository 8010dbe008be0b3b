//! The coordinator's side of the workers: start them (this binary again,
//! as `loadtest worker`), hand each its share of the connections, and
//! gather their events. Workers are children with `kill_on_drop`, and each
//! also exits by itself when its stdin closes or its lifetime ends.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use indicatif::ProgressBar;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::target;
use crate::worker::protocol::{self, Churn, Connected, Event, Kind, Outcome, Spec};

/// Most connections one worker may hold (a process may open 20,000 files).
pub(crate) const MAX_PER_WORKER: u64 = 19_000;
/// How long a worker gets to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(10);

/// One kind of client and how many.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    /// Their transport.
    pub kind: Kind,
    /// How many.
    pub count: u64,
    /// URL templates, one per node (connection k goes to node k mod
    /// their number).
    pub urls: Vec<String>,
}

/// What every worker of a run shares.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Connections per worker.
    pub per_worker: u64,
    /// Source addresses (0: as many as the total needs).
    pub sources: u8,
    /// Handshakes in flight over all workers.
    pub connect_concurrency: usize,
    /// First connection attempts per second over all workers (0: no pacing).
    pub connect_rate: f64,
    /// Messages each connection expects.
    pub expect: u64,
    /// Churn settings.
    pub churn: Option<Churn>,
    /// Whether a connection whose node goes away moves to the next node.
    pub failover: bool,
    /// Every connection starts on the first node (see `Spec::one_home`).
    pub one_home: bool,
    /// Reconnect as `pushgate.js` does (see `Spec::paced`).
    pub paced: bool,
    /// The server's idle timeout, ms (silent clients).
    pub idle_timeout_ms: u64,
    /// User id prefix.
    pub user_prefix: String,
    /// Cursor query parameter.
    pub cursor_param: String,
    /// Worker lifetime, s.
    pub lifetime_secs: u64,
    /// Seed.
    pub seed: u64,
    /// Channels: layout and schedule (see `Spec::channels`).
    pub channels: Option<crate::channels::ChannelPlan>,
    /// Pushes below this `seq` are not expected (see `Spec::expect_from`).
    pub expect_from: u64,
    /// Global number (and user number) of the first connection: a second
    /// fleet of a run goes on where the first ended.
    pub first_conn: u64,
}

/// The running workers.
#[derive(Debug)]
pub(crate) struct Fleet {
    workers: Vec<(Kind, Child, ChildStdin)>,
    events: mpsc::UnboundedReceiver<(usize, Option<Event>)>,
}

impl Fleet {
    /// Starts the workers for `groups`: users are numbered from 0 across
    /// groups, so every connection is its own user.
    pub(crate) async fn spawn(groups: &[Group], plan: &Plan) -> anyhow::Result<Self> {
        let total: u64 = groups.iter().map(|g| g.count).sum();
        let per_worker = plan.per_worker.clamp(1, MAX_PER_WORKER);
        let sources = if plan.sources == 0 {
            target::sources_for(total)
        } else {
            plan.sources
        };
        let exe = std::env::current_exe().context("cannot find the loadtest binary")?;
        let (tx, events) = mpsc::unbounded_channel();
        let mut workers = Vec::new();
        let mut next_user = plan.first_conn;
        for group in groups {
            let mut left = group.count;
            while left > 0 {
                let count = left.min(per_worker);
                let spec = Spec {
                    worker: workers.len(),
                    kind: group.kind,
                    urls: group.urls.clone(),
                    user_prefix: plan.user_prefix.clone(),
                    first_user: next_user,
                    count: count as usize,
                    first_conn: next_user,
                    sources,
                    connect_concurrency: (plan.connect_concurrency as u64 * count)
                        .div_ceil(total.max(1))
                        .max(1) as usize,
                    connect_rate: plan.connect_rate * count as f64 / total.max(1) as f64,
                    expect: plan.expect,
                    churn: plan.churn,
                    failover: plan.failover,
                    one_home: plan.one_home,
                    paced: plan.paced,
                    idle_timeout_ms: plan.idle_timeout_ms,
                    cursor_param: plan.cursor_param.clone(),
                    lifetime_secs: plan.lifetime_secs,
                    seed: plan.seed.wrapping_add(workers.len() as u64),
                    channels: plan.channels.clone(),
                    expect_from: plan.expect_from,
                };
                let mut child = Command::new(&exe)
                    .arg("worker")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .kill_on_drop(true)
                    .spawn()
                    .context("cannot start a worker")?;
                let mut stdin = child.stdin.take().context("worker stdin")?;
                let stdout = child.stdout.take().context("worker stdout")?;
                let line = serde_json::to_string(&spec)? + "\n";
                stdin.write_all(line.as_bytes()).await?;
                let index = workers.len();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut lines = BufReader::new(stdout).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        if let Ok(event) = serde_json::from_str::<Event>(&line) {
                            let _ = tx.send((index, Some(event)));
                        }
                    }
                    let _ = tx.send((index, None));
                });
                workers.push((group.kind, child, stdin));
                next_user += count;
                left -= count;
            }
        }
        Ok(Self { workers, events })
    }

    /// Workers running.
    pub(crate) fn len(&self) -> usize {
        self.workers.len()
    }

    /// The workers' CPU time so far (user + system), µs.
    pub(crate) fn cpu_us(&self) -> u64 {
        self.workers
            .iter()
            .filter_map(|(_, child, _)| child.id())
            .filter_map(|pid| crate::procstat::sample(pid).ok())
            .map(|s| s.cpu_us)
            .sum()
    }

    /// The transport of worker `index`.
    pub(crate) fn kind(&self, index: usize) -> Kind {
        self.workers[index].0
    }

    async fn next_event(&mut self, until: Instant) -> anyhow::Result<(usize, Event)> {
        match tokio::time::timeout_at(until, self.events.recv()).await {
            Ok(Some((index, Some(event)))) => Ok((index, event)),
            Ok(Some((index, None))) => bail!("worker {index} exited early"),
            Ok(None) => bail!("every worker is gone"),
            Err(_) => bail!("timed out waiting for workers"),
        }
    }

    async fn broadcast(&mut self, command: &protocol::Command) -> anyhow::Result<()> {
        let line = serde_json::to_string(command)? + "\n";
        for (_, _, stdin) in &mut self.workers {
            stdin.write_all(line.as_bytes()).await?;
        }
        Ok(())
    }

    /// Waits until every worker has finished connecting; reports in worker
    /// order. `bar` shows connections opened.
    pub(crate) async fn connected(
        &mut self,
        bar: &ProgressBar,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Connected>> {
        let until = Instant::now() + timeout;
        let mut progress = vec![0; self.len()];
        let mut done: Vec<Option<Connected>> = vec![None; self.len()];
        while done.iter().any(Option::is_none) {
            match self.next_event(until).await? {
                (i, Event::Progress { opened, failed }) => progress[i] = opened + failed,
                (i, Event::Connected(c)) => {
                    progress[i] = c.opened + c.failed;
                    done[i] = Some(c);
                }
                _ => {}
            }
            bar.set_position(progress.iter().sum());
        }
        Ok(done.into_iter().flatten().collect())
    }

    /// Waits until every connection has message `seq`; returns how many do.
    pub(crate) async fn wait_seq(&mut self, seq: u64, timeout: Duration) -> anyhow::Result<u64> {
        let timeout_ms = timeout.as_millis() as u64;
        self.broadcast(&protocol::Command::WaitSeq { seq, timeout_ms })
            .await?;
        let until = Instant::now() + timeout + Duration::from_secs(10);
        let mut answered = 0;
        let mut got = 0;
        while answered < self.len() {
            if let (_, Event::SeqDone { got: g, .. }) = self.next_event(until).await? {
                answered += 1;
                got += g;
            }
        }
        Ok(got)
    }

    /// Stops churn, waits for every connection to be complete (or
    /// `timeout`), and returns each worker's outcome with its transport.
    pub(crate) async fn collect(
        &mut self,
        timeout: Duration,
    ) -> anyhow::Result<Vec<(Kind, Outcome)>> {
        let timeout_ms = timeout.as_millis() as u64;
        self.broadcast(&protocol::Command::Collect { timeout_ms })
            .await?;
        let until = Instant::now() + timeout + Duration::from_secs(10);
        let mut outcomes: Vec<Option<Outcome>> = vec![None; self.len()];
        while outcomes.iter().any(Option::is_none) {
            if let (i, Event::Outcome(outcome)) = self.next_event(until).await? {
                outcomes[i] = Some(*outcome);
            }
        }
        Ok(outcomes
            .into_iter()
            .enumerate()
            .filter_map(|(i, o)| o.map(|o| (self.kind(i), o)))
            .collect())
    }

    /// Tells every worker to exit and waits (killing any that hang).
    pub(crate) async fn exit(mut self) {
        let _ = self.broadcast(&protocol::Command::Exit).await;
        for (_, child, stdin) in &mut self.workers {
            let _ = stdin.shutdown().await;
            if tokio::time::timeout(EXIT_GRACE, child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }
}
