//! The fan-out thread: delivers numbered messages to this process's
//! connections, one message after another, off the async runtime.
//!
//! Delivering a broadcast costs one `send` per recipient (an idle
//! WebSocket's frame is written straight to its socket, see
//! `session::outbound`): some 10 µs each, so 0.1 to 0.2 s for 10,000 to
//! 19,000 connections. Inside an async task that would hold a runtime
//! worker as long; under a bus's publish lock it would hold back every
//! connect. So a bus numbers and records a message under its lock, hands
//! it here before letting go of the lock (so messages arrive in sequence
//! order), and this one thread delivers them in that order. A connection
//! that resumed from history past a message skips it by its floor
//! (`Outbound::discard_through`), so nothing is delivered twice.

use std::sync::Arc;
use std::sync::mpsc;

use tracing::error;

use crate::api::push::PushTarget;
use crate::session::Registry;
use crate::transport::frame::Frame;

/// What to run once a message reached every connection it should.
pub type Then = Box<dyn FnOnce() + Send>;

enum Job {
    Deliver {
        frame: Frame,
        target: PushTarget,
        then: Option<Then>,
    },
    Run(Then),
}

/// Hands messages to the fan-out thread. Dropping it lets the thread
/// finish what it holds and exit.
#[derive(Debug)]
pub struct Fanout {
    jobs: mpsc::Sender<Job>,
}

impl Fanout {
    /// Starts the thread delivering to `registry`'s connections.
    pub fn start(registry: Arc<Registry>) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("pushgate-fanout".into())
            .spawn(move || {
                for job in queue {
                    match job {
                        Job::Deliver {
                            frame,
                            target,
                            then,
                        } => {
                            match &target {
                                PushTarget::Broadcast => registry.broadcast(&frame),
                                PushTarget::Users(users) => registry.send_to(users, &frame),
                            };
                            if let Some(then) = then {
                                then();
                            }
                        }
                        Job::Run(then) => then(),
                    }
                }
            })?;
        Ok(Self { jobs })
    }

    /// Queues `frame` for `target`, after every message handed over
    /// before it; `then` runs once it is delivered.
    pub fn deliver(&self, frame: Frame, target: PushTarget, then: Option<Then>) {
        self.send(Job::Deliver {
            frame,
            target,
            then,
        });
    }

    /// Runs `then` on the fan-out thread once every message handed over
    /// before it is delivered.
    pub fn after(&self, then: Then) {
        self.send(Job::Run(then));
    }

    fn send(&self, job: Job) {
        if self.jobs.send(job).is_err() {
            // Only if the thread died, which it does not by design: say so
            // loudly rather than lose messages quietly.
            error!("the fan-out thread is gone; a message was not delivered");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::metrics::Counters;
    use crate::session::registry::Limits;
    use crate::session::{Outgoing, Transport, UserId};

    fn registry() -> Arc<Registry> {
        let limits = Limits {
            max_connections: 100,
            max_connections_per_user: 100,
            outbound_queue: 100,
        };
        Arc::new(Registry::new(limits, Counters::register()))
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
            crate::transport::frame::StreamKind::Broadcast,
            &data,
        )
    }

    fn seqs(conn: &crate::session::Conn) -> Vec<u64> {
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

    #[test]
    fn messages_arrive_in_order_and_each_then_runs_after_its_delivery() {
        let registry = registry();
        let alice = registry
            .attach(user("alice"), Transport::Ws, None, 0)
            .expect("room")
            .conn;
        let bob = registry
            .attach(user("bob"), Transport::Ws, None, 0)
            .expect("room")
            .conn;
        let fanout = Fanout::start(Arc::clone(&registry)).expect("thread");
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
        let order: Vec<u64> = (0..50).map(|_| finished.recv().expect("ran")).collect();
        assert_eq!(order, (1..=50).collect::<Vec<_>>());
        assert_eq!(seqs(&alice), (1..=50).collect::<Vec<_>>());
        assert_eq!(seqs(&bob), (2..=50).step_by(2).collect::<Vec<_>>());
    }

    #[test]
    fn a_connection_skips_what_its_floor_covers() {
        let registry = registry();
        let conn = registry
            .attach(user("carol"), Transport::Ws, None, 0)
            .expect("room")
            .conn;
        conn.outbound.discard_through(3);
        let fanout = Fanout::start(Arc::clone(&registry)).expect("thread");
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
