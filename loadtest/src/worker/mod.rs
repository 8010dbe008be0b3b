//! A worker process: `loadtest worker`, started by the coordinator (never
//! by hand). It reads its [`Spec`] from stdin, opens its connections on one
//! thread, reports progress, answers commands, and exits on `exit`, when
//! stdin closes, or when its lifetime runs out, whichever comes first.
//!
//! Several workers spread the client's connections over processes, because
//! one process may hold at most ~20,000 open files here.

use std::cell::{Cell, RefCell};
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::Semaphore;
use tokio::task::LocalSet;
use tokio::time::{Instant, MissedTickBehavior};

use crate::hist;
use crate::target::{self, Target};

mod conn;
mod flow;
mod poll;
pub(crate) mod protocol;
mod silent;
mod sse;
pub(crate) mod tally;
mod ws;

use protocol::{Command, Connected, Event, Kind, Spec};
use tally::Tally;

/// How often the connect phase is checked for its end.
const CONNECT_CHECK_EVERY: Duration = Duration::from_millis(5);
/// Progress is reported every this many checks (250 ms).
const PROGRESS_EVERY_CHECKS: u32 = 50;
/// How often a waiting command re-checks the counts.
const CHECK_EVERY: Duration = Duration::from_millis(10);

/// What every connection task of the worker shares (one thread: `Rc`).
#[derive(Debug)]
pub(crate) struct Ctx {
    /// The worker's spec.
    pub spec: Spec,
    /// The gateway nodes: each parsed URL template and where it resolves to.
    pub nodes: Vec<Node>,
    /// The counts.
    pub tally: RefCell<Tally>,
    /// Long-poll connections whose client has everything it expected:
    /// kept open until the worker exits, so closing them does not load
    /// the server (or this client) while other polls are still answered.
    pub finished: RefCell<Vec<crate::http::HttpConn>>,
    /// Handshakes in flight.
    pub gate: Semaphore,
    /// Set by `collect`: no more churn reconnects.
    pub stopping: Cell<bool>,
    /// First connection attempts finished (either way).
    pub attempts_done: Cell<u64>,
    /// The worker's end of life.
    pub deadline: Instant,
    /// When the next first attempt may start (with `connect_rate`).
    pub next_open: Cell<Instant>,
    /// Back-off jitter (with `paced`).
    pub rng: RefCell<crate::rng::Rng>,
}

/// One gateway node of the worker's URL list.
#[derive(Debug)]
pub(crate) struct Node {
    /// The parsed URL template.
    pub target: Target,
    /// Where it resolves to.
    pub addr: SocketAddr,
}

impl Ctx {
    /// The node local connection `i` starts on.
    pub(crate) fn home(&self, i: usize) -> usize {
        if self.spec.one_home {
            return 0;
        }
        target::node_of(self.spec.first_conn + i as u64, self.nodes.len())
    }

    /// The node after `node` (where a connection goes when its node is
    /// gone, with failover); `node` itself without failover.
    pub(crate) fn next_node(&self, node: usize) -> usize {
        if self.spec.failover {
            (node + 1) % self.nodes.len()
        } else {
            node
        }
    }

    /// The user id of local connection `i`.
    pub(crate) fn user(&self, i: usize) -> String {
        target::user_id(&self.spec.user_prefix, self.spec.first_user + i as u64)
    }

    /// The source address of local connection `i`.
    pub(crate) fn source(&self, i: usize) -> Option<Ipv4Addr> {
        target::source_of(self.spec.first_conn + i as u64, self.spec.sources)
    }

    /// `path_or_url` (a request target or URL for local connection `i`)
    /// with its `channels=` appended, if it is in channels: the same on
    /// every connect and reconnect.
    pub(crate) fn with_channels(&self, i: usize, mut path_or_url: String) -> String {
        let channels = self
            .spec
            .channels
            .as_ref()
            .and_then(|plan| plan.query_of(self.spec.first_conn + i as u64));
        if let Some(channels) = channels {
            path_or_url.push(if path_or_url.contains('?') { '&' } else { '?' });
            path_or_url.push_str("channels=");
            path_or_url.push_str(&channels);
        }
        path_or_url
    }

    /// The cursor query parameter and value, if there is a cursor.
    pub(crate) fn cursor_arg<'a>(&'a self, cursor: Option<&'a str>) -> Option<(&'a str, &'a str)> {
        cursor.map(|c| (self.spec.cursor_param.as_str(), c))
    }

    /// Waits for this connection's turn to open, if opens are paced.
    pub(crate) async fn pace(&self) {
        if self.spec.connect_rate <= 0.0 {
            return;
        }
        let interval = Duration::from_secs_f64(1.0 / self.spec.connect_rate);
        let slot = self.next_open.get().max(Instant::now());
        self.next_open.set(slot + interval);
        tokio::time::sleep_until(slot).await;
    }

    /// Whether the worker's life is over.
    pub(crate) fn is_past_deadline(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// Entry point of `loadtest worker`.
pub(crate) fn main() -> anyhow::Result<()> {
    crate::raise_open_files_limit();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot build the worker runtime")?;
    LocalSet::new().block_on(&runtime, run())
}

fn emit(event: &Event) {
    let line = serde_json::to_string(event).expect("events serialize");
    let mut out = std::io::stdout().lock();
    // The coordinator gone means we are done anyway.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn run() -> anyhow::Result<()> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let first = lines.next_line().await?.context("no spec on stdin")?;
    let spec: Spec = serde_json::from_str(&first).context("bad spec")?;
    anyhow::ensure!(!spec.urls.is_empty(), "no URL template in the spec");
    let mut nodes = Vec::with_capacity(spec.urls.len());
    for url in &spec.urls {
        let target = Target::parse(url)?;
        let addr = target.resolve().await?;
        nodes.push(Node { target, addr });
    }
    let started = Instant::now();
    let ctx = Rc::new(Ctx {
        tally: RefCell::new(Tally::with_channels(
            spec.count,
            spec.expect,
            spec.channels.clone(),
            spec.first_conn,
            spec.expect_from,
        )),
        finished: RefCell::new(Vec::new()),
        gate: Semaphore::new(spec.connect_concurrency.max(1)),
        stopping: Cell::new(false),
        attempts_done: Cell::new(0),
        next_open: Cell::new(started),
        rng: RefCell::new(crate::rng::Rng::new(spec.seed ^ spec.first_conn)),
        deadline: started + Duration::from_secs(spec.lifetime_secs),
        nodes,
        spec,
    });
    for i in 0..ctx.spec.count {
        tokio::task::spawn_local(conn::run(Rc::clone(&ctx), i));
    }
    let mut progress = tokio::time::interval(CONNECT_CHECK_EVERY);
    progress.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut checks = 0u32;
    let mut connected_sent = false;
    let lifetime = tokio::time::sleep_until(ctx.deadline);
    tokio::pin!(lifetime);
    loop {
        tokio::select! {
            _ = progress.tick(), if !connected_sent => {
                let done = ctx.attempts_done.get() >= ctx.spec.count as u64;
                let tally = ctx.tally.borrow();
                if done {
                    emit(&Event::Connected(Connected {
                        opened: tally.opened,
                        failed: tally.failed,
                        elapsed_ms: started.elapsed().as_millis() as u64,
                        handshake: hist::to_pairs(&tally.handshake),
                        errors: tally.outcome(false).errors,
                    }));
                    connected_sent = true;
                } else if checks.is_multiple_of(PROGRESS_EVERY_CHECKS) {
                    emit(&Event::Progress { opened: tally.opened, failed: tally.failed });
                }
                checks = checks.wrapping_add(1);
            }
            line = lines.next_line() => {
                let Ok(Some(line)) = line else { break };
                match serde_json::from_str::<Command>(&line).context("bad command")? {
                    Command::Exit => break,
                    Command::WaitSeq { seq, timeout_ms } => {
                        let open = ctx.tally.borrow().opened;
                        wait_for(&ctx, timeout_ms, |t| t.got(seq) >= t.expecting(seq, open)).await;
                        emit(&Event::SeqDone { seq, got: ctx.tally.borrow().got(seq) });
                    }
                    Command::Collect { timeout_ms } => {
                        ctx.stopping.set(true);
                        let silent = ctx.spec.kind == Kind::Silent;
                        let open = ctx.tally.borrow().opened;
                        wait_for(&ctx, timeout_ms, |t| {
                            if silent { t.ended >= open } else { t.complete() >= open }
                        })
                        .await;
                        emit(&Event::Outcome(Box::new(ctx.tally.borrow().outcome(silent))));
                    }
                }
            }
            () = &mut lifetime => break,
        }
    }
    Ok(())
}

/// Waits until `done` holds for the tally or `timeout_ms` passes.
async fn wait_for(ctx: &Ctx, timeout_ms: u64, done: impl Fn(&Tally) -> bool) {
    let until = (Instant::now() + Duration::from_millis(timeout_ms)).min(ctx.deadline);
    while !done(&ctx.tally.borrow()) && Instant::now() < until {
        tokio::time::sleep(CHECK_EVERY).await;
    }
}
