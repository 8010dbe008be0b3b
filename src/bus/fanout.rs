//! The fan-out threads: deliver numbered messages to this process's
//! connections, in sequence order, off the async runtime.
//!
//! Delivering a broadcast costs one `send` per recipient (an idle
//! WebSocket's frame is written straight to its socket, see
//! `registry::outbound`): some 10 µs each, so 0.1 to 0.2 s for 10,000 to
//! 19,000 connections. Inside an async task that would hold a runtime
//! worker as long; under a bus's publish lock it would hold back every
//! connect. So a bus numbers and records a message under its lock and
//! hands it here before letting go of the lock (so messages arrive in
//! sequence order). One thread per core (a *lane*) delivers each message
//! to its share of the connections (`registry::Lane`), one message after
//! another: a connection gets every message from the same thread, in
//! order, and a broadcast's sends are spread over the cores. A connection
//! that resumed from history past a message skips it by its floor
//! (`Outbound::discard_through`), so nothing is delivered twice.
//!
//! A job of one broadcast, or of one message to one channel, is *shared*:
//! its lanes claim the connection table's shards (or chunks of the
//! channel's members) one at a time (`registry::table::Claims`) rather
//! than each walking a fixed half, so a lane that gets less of the CPU
//! (on a machine shared with the readers it wakes, the lane whose core
//! they run on) does less of it, and no core idles while another lane has
//! sends left. Order is kept by a barrier: a lane starts a job
//! after a shared one, or a shared one after any, only once every lane
//! has finished the one before. Lanes finish a shared job within a shard's
//! sends of each other, so that wait is short; jobs of fixed shares still
//! run back to back.
//!
//! A small job (messages to a few users, say one personal push) finding
//! every lane idle is delivered at once by whoever hands it over: waking
//! the lanes would cost more than its few sends (each lane thread woken,
//! on every node that holds one of the users). Nothing is overtaken: the
//! lanes hold nothing then, and no job can be handed over meanwhile.
//!
//! A shared broadcast finding every lane idle is *led* by whoever hands
//! it over (a push's task on one node, a bus's receiver): before it wakes
//! the lanes, it claims the broadcast's first small pieces
//! (`registry::table::HEAD_PARTS`) until one reached someone, a few
//! sends, and yields its core once after the first (as a lane does, see
//! [`after_first`]), so the first recipient waits for no lane's wake-up.
//! It counts as one more lane of the job: the job is finished, and the
//! next shared one may start, only once it is done too. (Led after the
//! lanes were woken, the first recipient came no earlier; led without the
//! yield, some broadcasts' first recipient waited out the leader's slice,
//! several milliseconds: README, Performance.)

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use tracing::{error, warn};

use crate::bus::PushTarget;
use crate::metrics::names;
use crate::protocol::Channel;
use crate::protocol::frame::Frame;
use crate::registry::table::{Claims, HEAD_PARTS, Piece};
use crate::registry::{Conn, Lane, Registry};

/// What to run once a message reached every connection it should (on the
/// lane that finished last). Two messages' `then`s may run at once, on two
/// lanes, so what they record must only move forward (`fetch_max`).
pub(crate) type Then = Box<dyn FnOnce() + Send>;

/// One or more messages, in order, shared by every lane: each lane wakes
/// once for all of them.
struct Job {
    /// Empty for [`Fanout::after`]: nothing to deliver, only `then`.
    messages: Vec<(Frame, PushTarget)>,
    then: Mutex<Option<Then>>,
    /// Lanes that have not finished with it yet.
    pending: AtomicUsize,
    /// When it was handed over.
    handed: Instant,
    /// Whether a lane has started on it.
    started: AtomicBool,
    /// For a shared job (one broadcast or one channel's message, more
    /// than one lane): what the lanes claim as they go.
    shared: Option<Shared>,
    /// Whether every lane is done delivering it, and its signal: what a
    /// lane waits for before the job after a shared one (or a shared one
    /// after any).
    finished: Mutex<bool>,
    done: Condvar,
}

/// How the lanes split a shared job's one message.
#[derive(Debug)]
enum Shared {
    /// A broadcast: the connection table's shards.
    Broadcast(Claims),
    /// A message to one channel: its members here, copied out by the
    /// first lane to start, in chunks of [`CHANNEL_CHUNK`].
    Channel(Channel, OnceLock<(Vec<Arc<Conn>>, Claims)>),
}

/// Members of a channel a lane takes at a time of a shared channel
/// message: about one shard of the connection table at 10,000.
const CHANNEL_CHUNK: usize = 64;

/// The fewest connections a message must reach here for its lanes to
/// share it. Below that each lane's fixed share is a few sends, and
/// waiting for each other at every job (a stream of pushes to small
/// channels) would cost more than evening the lanes out buys.
const SHARE_MIN: usize = 2 * CHANNEL_CHUNK;

impl Shared {
    /// How the lanes share `messages`, if they do: only a job of one
    /// broadcast or of one message to one channel (a batch of several
    /// keeps each lane's own share: the lanes would have to wait for
    /// each other between its messages), reaching at least
    /// [`SHARE_MIN`] of `registry`'s connections.
    fn of(messages: &[(Frame, PushTarget)], lanes: usize, registry: &Registry) -> Option<Self> {
        if lanes < 2 {
            return None;
        }
        match messages {
            [(_, PushTarget::Broadcast)] if registry.connections() >= SHARE_MIN => {
                Some(Self::Broadcast(Claims::broadcast()))
            }
            [(_, PushTarget::Channels(channels))]
                if channels.len() == 1 && registry.channel_size(&channels[0]) >= SHARE_MIN =>
            {
                Some(Self::Channel(channels[0].clone(), OnceLock::new()))
            }
            _ => None,
        }
    }

    /// Delivers `frame` to the part this lane claims, as it goes.
    fn deliver(&self, registry: &Registry, frame: &Frame, after_delivery: &mut impl FnMut()) {
        match self {
            Self::Broadcast(pieces) => {
                registry.broadcast(
                    frame,
                    pieces.walk().map(Piece::of_broadcast),
                    after_delivery,
                );
            }
            Self::Channel(channel, members) => {
                let (members, chunks) = members.get_or_init(|| {
                    let members = registry.channel_members(channel);
                    let chunks = Claims::new(members.len().div_ceil(CHANNEL_CHUNK));
                    (members, chunks)
                });
                for chunk in chunks.walk() {
                    let start = chunk * CHANNEL_CHUNK;
                    let end = members.len().min(start + CHANNEL_CHUNK);
                    let part = members.get(start..end).unwrap_or_default();
                    registry.send_to_members(channel, part, frame, after_delivery);
                }
            }
        }
    }
}

impl Shared {
    /// Delivers `frame` to a broadcast's first small pieces, claimed until
    /// one reached someone or none of them is left: what whoever hands it
    /// over delivers while the lanes wake (see the module's doc). Whether
    /// anything was delivered.
    fn lead(&self, registry: &Registry, frame: &Frame) -> bool {
        let Self::Broadcast(pieces) = self else {
            return false;
        };
        let mut reached = false;
        let mut yield_once = after_first(std::thread::yield_now);
        while let Some(piece) = pieces.claim_below(HEAD_PARTS) {
            registry.broadcast(frame, [Piece::of_broadcast(piece)], &mut || {
                reached = true;
                yield_once();
            });
            if reached {
                return true;
            }
        }
        false
    }

    /// Whether whoever hands it over leads it.
    fn is_led(&self) -> bool {
        matches!(self, Self::Broadcast(_))
    }
}

impl Job {
    fn new(
        messages: Vec<(Frame, PushTarget)>,
        then: Option<Then>,
        lanes: usize,
        registry: &Registry,
    ) -> Self {
        let shared = Shared::of(&messages, lanes, registry);
        Self {
            messages,
            then: Mutex::new(then),
            pending: AtomicUsize::new(lanes),
            handed: Instant::now(),
            started: AtomicBool::new(false),
            shared,
            finished: Mutex::new(false),
            done: Condvar::new(),
        }
    }

    /// Whether its lanes claim their parts as they go.
    fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Every lane is done delivering it.
    fn finish(&self) {
        *self.finished.lock() = true;
        self.done.notify_all();
    }

    /// Waits until every lane is done delivering it.
    fn wait_finished(&self) {
        let mut finished = self.finished.lock();
        while !*finished {
            self.done.wait(&mut finished);
        }
    }

    /// One of its lanes (or its leader) is done with it; the last one
    /// finishes it: lets the next shared job start, records how long it
    /// took, runs its `then`, and only then counts it out of `busy`.
    /// `who` names the lane in logs.
    fn leave(&self, busy: &AtomicUsize, timing: &Timing, who: &str) {
        if self.pending.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        self.finish();
        // Every lane is done: the copies made for connections in channels
        // are not needed again.
        for (frame, _) in &self.messages {
            frame.forget_copies();
        }
        if !self.messages.is_empty() {
            timing.duration.record(self.handed.elapsed());
        }
        if let Some(then) = self.then.lock().take()
            && std::panic::catch_unwind(AssertUnwindSafe(then)).is_err()
        {
            error!(lane = who, "a fan-out job's follow-up panicked");
        }
        // Only now may a job be delivered at once: it goes after this
        // one's deliveries and `then`.
        busy.fetch_sub(1, Ordering::Release);
    }
}

/// How long messages wait for, and take on, the fan-out threads: what a
/// broadcast's first and last local recipients wait on this node.
#[derive(Clone)]
struct Timing {
    /// Hand-over to the first lane starting on it.
    wait: metrics::Histogram,
    /// Hand-over to the last lane finishing it.
    duration: metrics::Histogram,
}

/// Hands messages to the fan-out threads. Dropping it lets the threads
/// finish what they hold and exit.
pub(crate) struct Fanout {
    lanes: Vec<mpsc::Sender<Arc<Job>>>,
    /// Held while a job is handed over or delivered at once, so a job
    /// delivered at once runs beside no other delivery of the fan-out.
    handing: Mutex<()>,
    /// Jobs handed to the lanes that a lane has not finished (its `then`
    /// included).
    busy: Arc<AtomicUsize>,
    registry: Arc<Registry>,
    timing: Timing,
}

impl std::fmt::Debug for Fanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fanout")
            .field("lanes", &self.lanes.len())
            .field("busy", &self.busy.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The most users a job may go to and still be delivered at once by
/// whoever hands it over, when every lane is idle (see the module's
/// doc): a few sends, some 10 µs each, are cheaper there than waking
/// every lane for them, and hold the caller (a bus's receiver, a push)
/// for about 0.1 ms at most. Measured on a Redis Cluster (docs/cluster-measurements.md,
/// "Small personal messages delivered at once"): at 16 a node taking
/// bursts of about 12 users spent more CPU than with the lanes, at 8 less.
const AT_ONCE_MAX_USERS: usize = 8;

/// Whether `messages` are few enough to deliver at once: personal
/// messages to at most [`AT_ONCE_MAX_USERS`] users in all (a broadcast
/// or a channel may reach any number of connections).
fn small(messages: &[(Frame, PushTarget)]) -> bool {
    let mut users = 0;
    for (_, target) in messages {
        match target {
            PushTarget::Users(list) => users += list.len(),
            PushTarget::Broadcast | PushTarget::Channels(_) => return false,
        }
        if users > AT_ONCE_MAX_USERS {
            return false;
        }
    }
    !messages.is_empty()
}

/// Delivers a job's `messages` to `lane`'s connections, in order, calling
/// `after_delivery` after each delivery that went out or was queued; a
/// shared job's one message to the part this lane claims instead.
fn deliver_to(
    registry: &Registry,
    messages: &[(Frame, PushTarget)],
    lane: Lane,
    shared: Option<&Shared>,
    after_delivery: &mut impl FnMut(),
) {
    if let (Some(shared), [(frame, _)]) = (shared, messages) {
        shared.deliver(registry, frame, after_delivery);
        return;
    }
    for (frame, target) in messages {
        match target {
            PushTarget::Broadcast => {
                registry.broadcast(frame, lane.shards(), after_delivery);
            }
            PushTarget::Users(users) => {
                registry.send_to(users, frame, lane, after_delivery);
            }
            PushTarget::Channels(channels) => {
                for channel in channels {
                    registry.send_to_channel(channel, frame, lane, after_delivery);
                }
            }
        };
    }
}

/// What a lane does after each delivery of a job: `action` after the
/// first delivery only. The lane's action is to yield its core once
/// (`sched_yield`), so whatever its first write woke (the recipient's
/// reader on a shared machine, a connection's task, the runtime's next
/// read) runs now rather than after the lane's slice: Linux's scheduler
/// (EEVDF) lets a thread that just got a core run its whole slice, 1.4 ms
/// on 2 cores, before a thread it woke may take that core, so with both
/// cores delivering a broadcast's first recipient waited up to that long
/// (README, "The first recipient and the scheduler's slice"). Once a job:
/// yielding on through it bought no earlier first recipient and made the
/// last one later.
fn after_first(mut action: impl FnMut()) -> impl FnMut() {
    let mut done = false;
    move || {
        if !done {
            done = true;
            action();
        }
    }
}

impl Fanout {
    /// Starts `lanes` threads (`None`: one per core the process may use)
    /// delivering to `registry`'s connections, at niceness `nice` (see
    /// [`Fanout::with_lanes`]).
    pub(crate) fn start(
        registry: Arc<Registry>,
        lanes: Option<usize>,
        nice: u8,
    ) -> std::io::Result<Self> {
        let lanes =
            lanes.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        Self::with_lanes(registry, lanes, nice)
    }

    /// Starts `lanes` threads (at least 1). Each runs at niceness `nice`
    /// above the process's (`[server] fanout_nice`): a broadcast's bulk of
    /// sends yields the CPU to whatever else must run now (the runtime's
    /// accepts, reads and answers, and on a shared machine the readers of
    /// what was just sent) instead of taking its full share until done.
    pub(crate) fn with_lanes(
        registry: Arc<Registry>,
        lanes: usize,
        nice: u8,
    ) -> std::io::Result<Self> {
        let count = lanes.max(1) as u64;
        let mut senders = Vec::with_capacity(count as usize);
        let timing = Timing {
            wait: metrics::histogram!(names::FANOUT_WAIT_SECONDS),
            duration: metrics::histogram!(names::FANOUT_DURATION_SECONDS),
        };
        let busy = Arc::new(AtomicUsize::new(0));
        for index in 0..count {
            let (jobs, queue) = mpsc::channel::<Arc<Job>>();
            let registry = Arc::clone(&registry);
            let timing = timing.clone();
            let busy = Arc::clone(&busy);
            let lane = Lane { index, count };
            std::thread::Builder::new()
                .name(format!("pushgate-fanout-{index}"))
                .spawn(move || {
                    if nice > 0
                        && let Err(err) = lower_priority(nice)
                    {
                        warn!(error = %err, nice, "the fan-out thread keeps the process's priority");
                    }
                    // Named once: `leave` logs it only if a `then` panics.
                    let who = index.to_string();
                    let mut previous: Option<Arc<Job>> = None;
                    for job in queue {
                        if let Some(previous) = previous.take()
                            && (previous.is_shared() || job.is_shared())
                        {
                            // A connection of this job may be one another
                            // lane has yet to give the last job to.
                            previous.wait_finished();
                        }
                        let messages = !job.messages.is_empty();
                        if messages && !job.started.swap(true, Ordering::Relaxed) {
                            timing.wait.record(job.handed.elapsed());
                        }
                        // A panic in a delivery (a bug) must not leave the
                        // other lanes waiting for this one at the next
                        // shared job: the lane goes on to finish its part.
                        let delivered = std::panic::catch_unwind(AssertUnwindSafe(|| {
                            deliver_to(
                                &registry,
                                &job.messages,
                                lane,
                                job.shared.as_ref(),
                                &mut after_first(std::thread::yield_now),
                            );
                        }));
                        if delivered.is_err() {
                            error!(lane = index, "a fan-out delivery panicked; its message may not have reached everyone");
                        }
                        job.leave(&busy, &timing, &who);
                        previous = Some(job);
                    }
                })?;
            senders.push(jobs);
        }
        Ok(Self {
            lanes: senders,
            handing: Mutex::new(()),
            busy,
            registry,
            timing,
        })
    }

    /// Queues `frame` for `target`, after every message handed over
    /// before it; `then` runs once every lane has delivered it. A small
    /// message finding the lanes idle is delivered before this returns,
    /// and `then` runs on the caller's thread: it must not take a lock the
    /// caller holds.
    pub(crate) fn deliver(&self, frame: Frame, target: PushTarget, then: Option<Then>) {
        self.send(vec![(frame, target)], then);
    }

    /// Runs `then` once every message handed over before it is delivered.
    pub(crate) fn after(&self, then: Then) {
        self.send(Vec::new(), Some(then));
    }

    /// Gathers messages to hand over together (see [`Batch`]).
    pub(crate) fn batch(&self) -> Batch<'_> {
        Batch {
            fanout: self,
            messages: Vec::new(),
        }
    }

    fn send(&self, messages: Vec<(Frame, PushTarget)>, then: Option<Then>) {
        let handing = self.handing.lock();
        if small(&messages) && self.busy.load(Ordering::Acquire) == 0 {
            // Every lane is idle and none can be handed a job before this
            // one is delivered: delivered here, it overtakes nothing.
            let handed = Instant::now();
            deliver_to(&self.registry, &messages, Lane::ALL, None, &mut || {});
            drop(handing);
            for (frame, _) in &messages {
                frame.forget_copies();
            }
            self.timing.wait.record(0.0);
            self.timing.duration.record(handed.elapsed());
            if let Some(then) = then {
                then();
            }
            return;
        }
        let mut job = Job::new(messages, then, self.lanes.len(), &self.registry);
        // Every lane idle (and none can be handed a job meanwhile): a
        // broadcast's first pieces delivered here overtake nothing.
        let idle = self.busy.fetch_add(1, Ordering::Acquire) == 0;
        let lead = idle && job.shared.as_ref().is_some_and(Shared::is_led);
        if lead {
            *job.pending.get_mut() += 1;
        }
        let job = Arc::new(job);
        if lead {
            self.lead(&job);
        }
        for lane in &self.lanes {
            if lane.send(Arc::clone(&job)).is_err() {
                // Only if a thread died, which it does not by design: say
                // so loudly rather than lose messages quietly.
                error!("a fan-out thread is gone; a message was not delivered");
            }
        }
        drop(handing);
        if lead {
            job.leave(&self.busy, &self.timing, "leader");
        }
    }

    /// Delivers a shared broadcast's first pieces, before the lanes are
    /// woken (see the module's doc).
    fn lead(&self, job: &Job) {
        if let (Some(shared), [(frame, _)]) = (&job.shared, &job.messages[..]) {
            let led =
                std::panic::catch_unwind(AssertUnwindSafe(|| shared.lead(&self.registry, frame)));
            match led {
                Ok(true) => {
                    if !job.started.swap(true, Ordering::Relaxed) {
                        self.timing.wait.record(0.0);
                    }
                }
                Ok(false) => {}
                Err(_) => {
                    error!("a fan-out delivery panicked; its message may not have reached everyone")
                }
            }
        }
    }
}

/// Raises the calling thread's niceness by `nice` (Linux: niceness is
/// per thread, and `setpriority` on a thread id sets that thread's alone).
fn lower_priority(nice: u8) -> std::io::Result<()> {
    let tid = rustix::thread::gettid();
    let now = rustix::process::getpriority_process(Some(tid))?;
    rustix::process::setpriority_process(Some(tid), now + i32::from(nice))?;
    Ok(())
}

/// Messages handed to the fan-out as one job: each lane wakes once for
/// all of them rather than once per message (a bus that takes a burst
/// from the broker, say 30 personal messages of one push, hands them over
/// in one go). Order is kept: a batch's messages go after everything
/// handed over before it, in the order given; [`Batch::after`] hands over
/// what is gathered so far with its `then`. Dropping the batch hands over
/// the rest, so whoever needs its messages ahead of another's (a bus
/// holding its position lock) drops it before letting go.
pub(crate) struct Batch<'a> {
    fanout: &'a Fanout,
    messages: Vec<(Frame, PushTarget)>,
}

impl Batch<'_> {
    /// Adds `frame` for `target`.
    pub(crate) fn deliver(&mut self, frame: Frame, target: PushTarget) {
        self.messages.push((frame, target));
    }

    /// Hands over what is gathered; `then` runs once it (and everything
    /// before it) is delivered.
    pub(crate) fn after(&mut self, then: Then) {
        self.fanout
            .send(std::mem::take(&mut self.messages), Some(then));
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if !self.messages.is_empty() {
            self.fanout.send(std::mem::take(&mut self.messages), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::metrics::Counters;
    use crate::protocol::{Transport, UserId};
    use crate::registry::Outgoing;
    use crate::registry::users::Limits;

    /// Longest a test waits for a lane.
    const WAIT: std::time::Duration = std::time::Duration::from_secs(10);

    fn registry() -> Arc<Registry> {
        let limits = Limits {
            max_connections: 1_000,
            max_connections_per_user: 100,
            outbound_queue: 100,
            max_channels_per_connection: 64,
        };
        Arc::new(Registry::new(limits, Counters::register()))
    }

    /// A WebSocket of user `name`.
    fn attach(registry: &Registry, name: &str) -> Arc<crate::registry::Conn> {
        registry
            .attach(user(name), Transport::Ws, None, 0, Vec::new())
            .expect("room")
            .conn
    }

    fn user(name: &str) -> UserId {
        UserId::parse(name).expect("valid")
    }

    fn frame(seq: u64) -> Frame {
        let data = serde_json::value::RawValue::from_string(seq.to_string()).expect("json");
        Frame::message(
            seq,
            &format!("m{seq}"),
            &format!("c{seq}"),
            crate::protocol::frame::Stream::Broadcast,
            &data,
        )
    }

    fn seqs(conn: &crate::registry::Conn) -> Vec<u64> {
        let mut items = VecDeque::new();
        conn.outbound.take(&mut items);
        items
            .into_iter()
            .map(|item| match item {
                Outgoing::Frame(frame) => frame.seq(),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    /// The niceness of this process's threads named `name`.
    fn nice_of_threads(name: &str) -> Vec<i64> {
        std::fs::read_dir("/proc/self/task")
            .expect("/proc")
            .filter_map(|task| {
                let dir = task.ok()?.path();
                let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
                let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
                // Field 19 is the niceness; fields start after the ") ".
                let fields = stat.rsplit_once(") ")?.1;
                let nice = fields.split(' ').nth(16)?.parse().ok()?;
                (comm.trim() == name).then_some(nice)
            })
            .collect()
    }

    #[test]
    fn lanes_run_at_the_niceness_asked_for() {
        let registry = registry();
        let fanout = Fanout::with_lanes(Arc::clone(&registry), 1, 7).expect("threads");
        let (done, finished) = mpsc::channel();
        // The thread sets its niceness before taking its first job.
        fanout.after(Box::new(move || {
            let _ = done.send(());
        }));
        finished.recv_timeout(WAIT).expect("the lane ran");
        // (The kernel caps niceness at 19, say under `nice -n 19 cargo test`.)
        let base = rustix::process::getpriority_process(None).expect("getpriority");
        assert!(
            nice_of_threads("pushgate-fanout").contains(&i64::from((base + 7).min(19))),
            "{:?}",
            nice_of_threads("pushgate-fanout")
        );
    }

    #[test]
    fn each_connection_gets_messages_in_order_whichever_lane_it_is_in() {
        let registry = registry();
        let alice = attach(&registry, "alice");
        let bob = attach(&registry, "bob");
        let fanout = Fanout::with_lanes(Arc::clone(&registry), 2, 0).expect("threads");
        let (done, finished) = mpsc::channel();
        for seq in 1..=50 {
            let target = if seq % 2 == 0 {
                PushTarget::Broadcast
            } else {
                PushTarget::Users(vec![user("alice")])
            };
            let done = done.clone();
            fanout.deliver(
                frame(seq),
                target,
                Some(Box::new(move || done.send(seq).expect("test alive"))),
            );
        }
        let mut ran: Vec<u64> = (0..50).map(|_| finished.recv().expect("ran")).collect();
        // Two lanes may finish two messages at once, so the `then`s can
        // run out of order; each runs once.
        ran.sort_unstable();
        assert_eq!(ran, (1..=50).collect::<Vec<_>>());
        assert_eq!(seqs(&alice), (1..=50).collect::<Vec<_>>());
        assert_eq!(seqs(&bob), (2..=50).step_by(2).collect::<Vec<_>>());
    }

    #[test]
    fn shared_jobs_keep_every_connections_order_among_other_messages() {
        let registry = registry();
        let hot = crate::protocol::Channel::parse("hot").expect("valid");
        // 300 connections of 30 users; 200 in `hot`, several chunks.
        let conns: Vec<_> = (0..300)
            .map(|i| {
                let channels = if i % 3 == 0 {
                    Vec::new()
                } else {
                    vec![hot.clone()]
                };
                registry
                    .attach(
                        user(&format!("u{}", i % 30)),
                        Transport::Ws,
                        None,
                        0,
                        channels,
                    )
                    .expect("room")
                    .conn
            })
            .collect();
        let fanout = Fanout::with_lanes(Arc::clone(&registry), 3, 0).expect("threads");
        let (done, finished) = mpsc::channel();
        let mut expected: Vec<Vec<u64>> = vec![Vec::new(); conns.len()];
        // Under the queue limit (100): nothing is closed as slow.
        for seq in 1..=90u64 {
            // Runs of shared jobs (broadcasts, then messages to `hot`)
            // back to back, between messages to a third of the users
            // (fixed shares).
            let target = match seq % 5 {
                0 | 1 => PushTarget::Broadcast,
                2 | 3 => PushTarget::Channels(vec![hot.clone()]),
                _ => PushTarget::Users(
                    (0..30)
                        .filter(|u| (u + seq) % 3 == 0)
                        .map(|u| user(&format!("u{u}")))
                        .collect(),
                ),
            };
            for (i, list) in expected.iter_mut().enumerate() {
                let to_it = match &target {
                    PushTarget::Users(users) => users.contains(&user(&format!("u{}", i % 30))),
                    PushTarget::Channels(_) => i % 3 != 0,
                    PushTarget::Broadcast => true,
                };
                if to_it {
                    list.push(seq);
                }
            }
            fanout.deliver(frame(seq), target, None);
        }
        fanout.after(Box::new(move || done.send(()).expect("test alive")));
        finished.recv_timeout(WAIT).expect("delivered in time");
        for (conn, want) in conns.iter().zip(&expected) {
            assert_eq!(&seqs(conn), want, "connection {}", conn.id);
        }
    }

    #[test]
    fn only_a_lone_message_to_many_over_several_lanes_is_shared() {
        let registry = registry();
        let news = crate::protocol::Channel::parse("news").expect("valid");
        let sport = crate::protocol::Channel::parse("sport").expect("valid");
        let channel = |list: &[&crate::protocol::Channel]| {
            PushTarget::Channels(list.iter().map(|c| (*c).clone()).collect())
        };
        let one = |target| vec![(frame(1), target)];
        let shared = |target, lanes| Job::new(one(target), None, lanes, &registry).is_shared();
        // Too few connections yet: each lane's share is a few sends.
        assert!(!shared(PushTarget::Broadcast, 2));
        for i in 0..SHARE_MIN {
            let channels = if i % 2 == 0 {
                vec![news.clone(), sport.clone()]
            } else {
                vec![news.clone()]
            };
            registry
                .attach(user(&format!("u{i}")), Transport::Ws, None, 0, channels)
                .expect("room");
        }
        assert!(shared(PushTarget::Broadcast, 2));
        assert!(
            !shared(PushTarget::Broadcast, 1),
            "one lane has nobody to share with"
        );
        assert!(!shared(PushTarget::Users(vec![user("u1")]), 2));
        assert!(shared(channel(&[&news]), 2));
        assert!(!shared(channel(&[&sport]), 2), "half of them: too few");
        assert!(!shared(channel(&[&news, &sport]), 2));
        assert!(!Job::new(Vec::new(), None, 2, &registry).is_shared());
        let two = vec![
            (frame(1), PushTarget::Broadcast),
            (frame(2), PushTarget::Broadcast),
        ];
        assert!(
            !Job::new(two, None, 2, &registry).is_shared(),
            "a batch keeps fixed shares"
        );
    }

    #[test]
    fn a_batch_goes_out_in_order_with_its_then_after_what_it_gathered() {
        let registry = registry();
        let conn = attach(&registry, "dave");
        let fanout = Fanout::with_lanes(Arc::clone(&registry), 2, 0).expect("threads");
        let (done, finished) = mpsc::channel();
        let mut batch = fanout.batch();
        for seq in 1..=3 {
            batch.deliver(frame(seq), PushTarget::Broadcast);
        }
        let signal = done.clone();
        batch.after(Box::new(move || signal.send(()).expect("test alive")));
        finished.recv_timeout(WAIT).expect("ran in time");
        assert_eq!(
            seqs(&conn),
            [1, 2, 3],
            "then ran after the batch's messages"
        );
        for seq in 4..=5 {
            batch.deliver(frame(seq), PushTarget::Users(vec![user("dave")]));
        }
        // Dropped, the batch hands over what it still holds.
        drop(batch);
        fanout.after(Box::new(move || done.send(()).expect("test alive")));
        finished.recv_timeout(WAIT).expect("ran in time");
        assert_eq!(seqs(&conn), [4, 5]);
    }

    #[test]
    fn one_connection_users_spread_evenly_over_the_lanes() {
        let registry = registry();
        let conns: Vec<_> = (0..60)
            .map(|i| attach(&registry, &format!("u{i}")))
            .collect();
        for count in [2, 3, 4] {
            for index in 0..count {
                let lane = Lane { index, count };
                let owned = conns.iter().filter(|c| lane.owns(c.id)).count();
                assert_eq!(owned as u64, 60 / count, "lane {index} of {count}");
            }
        }
    }

    #[test]
    fn only_messages_to_a_few_users_are_small() {
        let users = |n: usize| PushTarget::Users((0..n).map(|i| user(&format!("u{i}"))).collect());
        let one = |target| vec![(frame(1), target)];
        assert!(small(&one(users(1))));
        assert!(small(&one(users(AT_ONCE_MAX_USERS))));
        assert!(!small(&one(users(AT_ONCE_MAX_USERS + 1))));
        assert!(!small(&one(PushTarget::Broadcast)));
        assert!(!small(&one(PushTarget::Channels(Vec::new()))));
        assert!(!small(&[]), "nothing to deliver is left to the lanes");
        let half = AT_ONCE_MAX_USERS / 2;
        let two = |a, b| vec![(frame(1), users(a)), (frame(2), users(b))];
        assert!(small(&two(half, AT_ONCE_MAX_USERS - half)));
        assert!(!small(&two(half, AT_ONCE_MAX_USERS - half + 1)));
        let mixed = vec![(frame(1), users(1)), (frame(2), PushTarget::Broadcast)];
        assert!(!small(&mixed));
    }

    #[test]
    fn a_small_message_finding_the_lanes_idle_is_delivered_before_deliver_returns() {
        let registry = registry();
        let alice = attach(&registry, "alice");
        let fanout = Fanout::with_lanes(Arc::clone(&registry), 2, 0).expect("threads");
        let (done, ran_on) = mpsc::channel();
        fanout.deliver(
            frame(1),
            PushTarget::Users(vec![user("alice")]),
            Some(Box::new(move || {
                done.send(std::thread::current().id()).expect("test alive");
            })),
        );
        // No wait: it is on alice's queue already, and its `then` ran here.
        assert_eq!(seqs(&alice), [1]);
        assert_eq!(
            ran_on.try_recv().expect("then ran"),
            std::thread::current().id()
        );
    }

    #[test]
    fn a_small_message_waits_behind_what_the_lanes_hold() {
        let registry = registry();
        let alice = attach(&registry, "alice");
        let fanout = Fanout::with_lanes(Arc::clone(&registry), 1, 0).expect("threads");
        // The lane is held in a `then` until the gate opens.
        let (open, gate) = mpsc::channel::<()>();
        fanout.after(Box::new(move || {
            let _ = gate.recv_timeout(WAIT);
        }));
        fanout.deliver(frame(1), PushTarget::Broadcast, None);
        let (done, finished) = mpsc::channel();
        let signal = done.clone();
        fanout.deliver(
            frame(2),
            PushTarget::Users(vec![user("alice")]),
            Some(Box::new(move || signal.send(2).expect("test alive"))),
        );
        assert_eq!(seqs(&alice), Vec::<u64>::new(), "nothing overtook the lane");
        open.send(()).expect("lane waiting");
        assert_eq!(finished.recv_timeout(WAIT).expect("delivered"), 2);
        // The lane is idle again (the last job's `then` has run, and it
        // lets go of the job right after): the next small one goes at once.
        let deadline = std::time::Instant::now() + WAIT;
        while fanout.busy.load(Ordering::Acquire) > 0 {
            assert!(std::time::Instant::now() < deadline, "the lane stayed busy");
            std::thread::yield_now();
        }
        fanout.deliver(
            frame(3),
            PushTarget::Users(vec![user("alice")]),
            Some(Box::new(move || done.send(3).expect("test alive"))),
        );
        assert_eq!(finished.try_recv().expect("delivered at once"), 3);
        assert_eq!(seqs(&alice), [1, 2, 3]);
    }

    #[test]
    fn a_broadcasts_leader_reaches_someone_in_its_first_pieces_and_the_lanes_the_rest() {
        let registry = registry();
        let conns: Vec<_> = (0..300)
            .map(|i| attach(&registry, &format!("u{i}")))
            .collect();
        let shared = Shared::Broadcast(Claims::broadcast());
        assert!(shared.lead(&registry, &frame(1)));
        let led: Vec<_> = conns.iter().filter(|c| seqs(c) == [1]).collect();
        // Shard 0 holds 2 or 3 of 300, one in a part of 16: the leader
        // claims parts until one reaches someone, and stops there.
        assert_eq!(led.len(), 1, "one part's connection");
        assert_eq!(crate::registry::table::shard_of(led[0].id), 0);
        let led = led[0].id;
        shared.deliver(&registry, &frame(1), &mut || {});
        for conn in &conns {
            let want: &[u64] = if conn.id == led { &[] } else { &[1] };
            assert_eq!(seqs(conn), want, "connection {}", conn.id);
        }
        assert!(
            !Shared::Broadcast(Claims::broadcast()).lead(
                &Registry::new(
                    Limits {
                        max_connections: 1,
                        max_connections_per_user: 1,
                        outbound_queue: 1,
                        max_channels_per_connection: 1,
                    },
                    Counters::register(),
                ),
                &frame(1)
            ),
            "nobody to reach"
        );
    }

    #[test]
    fn a_broadcast_finding_the_lanes_idle_reaches_someone_before_deliver_returns() {
        let registry = registry();
        let conns: Vec<_> = (0..SHARE_MIN * 2)
            .map(|i| attach(&registry, &format!("u{i}")))
            .collect();
        let fanout = Fanout::with_lanes(Arc::clone(&registry), 2, 0).expect("threads");
        // Both lanes held: one in the first `then`, the other at the
        // shared job's barrier behind the second job, which the held lane
        // has yet to leave. (A `then` alone holds one lane: the job is
        // finished before it runs, and the other lane would deliver.)
        // Nothing is led while they are busy, and nothing overtakes.
        let (open, gate) = mpsc::channel::<()>();
        fanout.after(Box::new(move || {
            let _ = gate.recv_timeout(WAIT);
        }));
        fanout.after(Box::new(|| {}));
        let (done, finished) = mpsc::channel();
        let signal = done.clone();
        fanout.deliver(
            frame(1),
            PushTarget::Broadcast,
            Some(Box::new(move || signal.send(1).expect("test alive"))),
        );
        assert!(
            conns.iter().all(|c| seqs(c).is_empty()),
            "a busy lane was overtaken"
        );
        open.send(()).expect("lane waiting");
        assert_eq!(finished.recv_timeout(WAIT).expect("delivered"), 1);
        let deadline = std::time::Instant::now() + WAIT;
        while fanout.busy.load(Ordering::Acquire) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the lanes stayed busy"
            );
            std::thread::yield_now();
        }
        let mut got: Vec<Vec<u64>> = conns.iter().map(|c| seqs(c)).collect();
        assert!(got.iter().all(|seqs| seqs == &[1]));
        // Idle lanes: this thread delivers the first pieces itself.
        fanout.deliver(
            frame(2),
            PushTarget::Broadcast,
            Some(Box::new(move || done.send(2).expect("test alive"))),
        );
        let early = conns.iter().filter(|c| seqs(c) == [2]).count();
        assert!(early >= 1, "nobody had it when deliver returned");
        assert_eq!(finished.recv_timeout(WAIT).expect("delivered"), 2);
        got = conns.iter().map(|c| seqs(c)).collect();
        assert_eq!(
            got.iter().filter(|seqs| seqs == &&[2]).count(),
            conns.len() - early,
            "the rest got it from the lanes, once"
        );
    }

    #[test]
    fn a_lane_acts_after_its_first_delivery_only() {
        let mut calls = 0;
        let mut after = after_first(|| calls += 1);
        after();
        after();
        after();
        drop(after);
        assert_eq!(calls, 1);
    }

    #[test]
    fn after_delivery_runs_for_each_delivery_that_went_out_or_was_queued() {
        let registry = registry();
        let alice = attach(&registry, "alice");
        let _bob = attach(&registry, "bob");
        let carol = attach(&registry, "carol");
        carol.outbound.discard_through(5);
        let news = crate::protocol::Channel::parse("news").expect("valid");
        let dave = registry
            .attach(user("dave"), Transport::Ws, None, 0, vec![news.clone()])
            .expect("room")
            .conn;
        let mut count = 0;
        deliver_to(
            &registry,
            &[
                (frame(1), PushTarget::Broadcast),
                (
                    frame(2),
                    PushTarget::Users(vec![user("alice"), user("nobody")]),
                ),
                (frame(3), PushTarget::Channels(vec![news])),
            ],
            Lane::ALL,
            None,
            &mut || count += 1,
        );
        // alice, bob and dave got 1 (carol's floor covers it), alice got
        // 2, dave 3.
        assert_eq!(count, 5);
        assert_eq!(seqs(&alice), [1, 2]);
        assert_eq!(seqs(&carol), Vec::<u64>::new());
        assert_eq!(seqs(&dave), [1, 3]);
    }

    #[test]
    fn a_connection_skips_what_its_floor_covers() {
        let registry = registry();
        let conn = attach(&registry, "carol");
        conn.outbound.discard_through(3);
        let fanout = Fanout::with_lanes(Arc::clone(&registry), 3, 0).expect("threads");
        let (done, finished) = mpsc::channel();
        for seq in 1..=5 {
            let done = done.clone();
            fanout.deliver(
                frame(seq),
                PushTarget::Broadcast,
                Some(Box::new(move || done.send(()).expect("test alive"))),
            );
        }
        for _ in 1..=5 {
            finished.recv().expect("ran");
        }
        assert_eq!(seqs(&conn), [4, 5]);
    }
}
