//! What a shard's catch-up hands to the fan-out, in order, once its
//! history was read: pure, so "nothing lost, nothing twice" across a lost
//! subscription is tested with plain values.
//!
//! While a shard is paused, what arrives live waits in its pending list.
//! The catch-up reads the history of the shard's streams after the node's
//! position and sends a barrier that arrives after every message the read
//! covered. The plan: the history after the position, in sequence order;
//! then the pending list in arrival order, without the messages the
//! history already carried.
//!
//! A barrier that did not arrive means the subscriptions may not deliver
//! yet: what came after the read may have a hole (a message published
//! before they took, the next one after). So only the history is handed
//! over; what came after the read stays pending, and the shard stays
//! paused for the next catch-up, which reads from the history's end.

use bytes::Bytes;

use crate::bus::PushTarget;
use crate::history::Cursor;

/// What reached a shard being caught up, in order.
#[derive(Debug, Clone)]
pub(crate) enum Pending {
    /// A message: its position (as a cursor and as written), target, frame.
    Message(Cursor, String, PushTarget, Bytes),
    /// A barrier: its position and its token.
    Barrier(Option<Cursor>, Option<u64>),
}

/// One step of a catch-up.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Hand this message to the fan-out (position, as written, target,
    /// frame).
    HandOver(Cursor, String, PushTarget, Bytes),
    /// Pass this barrier (position, token).
    Barrier(Option<Cursor>, Option<u64>),
}

/// A catch-up's plan.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// The shard's sequence went back or its epoch changed (a failover
    /// lost writes): the node's position starts again here.
    pub(crate) reset: Option<Cursor>,
    pub(crate) steps: Vec<Step>,
    /// The barrier did not arrive: what stays pending, in arrival order,
    /// for the next catch-up (the shard stays paused). `None`: the shard
    /// is caught up.
    pub(crate) held: Option<Vec<Pending>>,
}

/// The history read: where the shard stood at the read, and the messages
/// of its streams (sequence number, target, frame), in any order.
#[derive(Debug)]
pub(crate) struct History {
    pub(crate) upto: Cursor,
    pub(crate) messages: Vec<(u64, PushTarget, Bytes)>,
}

/// The plan for a shard paused at `from`, with `history` (`None`: the read
/// failed, so only what arrived is delivered) and what arrived meanwhile,
/// `pending`, in which the catch-up's own barrier is `token`. Pending
/// messages the history carried are dropped. If that barrier is not in
/// `pending` (and the read succeeded), the rest of `pending` is held back
/// rather than handed over.
pub(crate) fn plan(
    from: Cursor,
    history: Option<History>,
    pending: Vec<Pending>,
    token: u64,
) -> Plan {
    let mut plan = Plan::default();
    let upto = history.as_ref().map(|h| h.upto);
    if let Some(History { upto, mut messages }) = history {
        let same_epoch = upto.epoch == from.epoch;
        if !same_epoch || upto.seq < from.seq {
            plan.reset = Some(upto);
        }
        messages.sort_by_key(|(seq, _, _)| *seq);
        for (seq, target, json) in messages {
            if same_epoch && seq <= from.seq {
                continue;
            }
            let at = Cursor::new(upto.epoch, seq);
            plan.steps
                .push(Step::HandOver(at, at.to_string(), target, json));
        }
    }
    let arrived = pending
        .iter()
        .any(|p| matches!(p, Pending::Barrier(_, Some(t)) if *t == token));
    let mut held = (upto.is_some() && !arrived).then(Vec::new);
    let mut past_barrier = upto.is_none();
    for item in pending {
        match item {
            Pending::Message(at, text, target, json) => {
                // Before the barrier, a message at or below the read's
                // position is in the history just planned.
                let after_read = upto.is_some_and(|u| at.epoch != u.epoch || at.seq > u.seq);
                if past_barrier || after_read {
                    match held.as_mut() {
                        Some(held) => held.push(Pending::Message(at, text, target, json)),
                        None => plan.steps.push(Step::HandOver(at, text, target, json)),
                    }
                }
            }
            Pending::Barrier(at, t) => {
                if t == Some(token) {
                    past_barrier = true;
                }
                match held.as_mut() {
                    Some(held) => held.push(Pending::Barrier(at, t)),
                    None => plan.steps.push(Step::Barrier(at, t)),
                }
            }
        }
    }
    plan.held = held;
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    const E: u64 = 0xe;
    const TOKEN: u64 = 7;

    fn msg(seq: u64) -> (u64, PushTarget, Bytes) {
        (seq, PushTarget::Broadcast, Bytes::from(format!("m{seq}")))
    }

    fn live(epoch: u64, seq: u64) -> Pending {
        let at = Cursor::new(epoch, seq);
        Pending::Message(
            at,
            at.to_string(),
            PushTarget::Broadcast,
            Bytes::from(format!("m{seq}")),
        )
    }

    fn barrier(seq: u64, token: u64) -> Pending {
        Pending::Barrier(Some(Cursor::new(E, seq)), Some(token))
    }

    /// The steps as `m<seq>` for messages and `b<token>` for barriers.
    fn steps(plan: &Plan) -> Vec<String> {
        plan.steps
            .iter()
            .map(|step| match step {
                Step::HandOver(at, text, _, json) => {
                    assert_eq!(text, &at.to_string(), "the position as written");
                    String::from_utf8_lossy(json).into_owned()
                }
                Step::Barrier(_, token) => format!("b{}", token.unwrap_or(0)),
            })
            .collect()
    }

    #[test]
    fn history_after_the_position_in_order_then_what_came_after_the_read() {
        let history = History {
            upto: Cursor::new(E, 8),
            messages: vec![msg(8), msg(4), msg(6), msg(5), msg(7)],
        };
        // Live copies of 7 and 8 came before the barrier; 9 after it.
        let pending = vec![live(E, 7), live(E, 8), barrier(8, TOKEN), live(E, 9)];
        let plan = plan(Cursor::new(E, 5), Some(history), pending, TOKEN);
        assert!(plan.reset.is_none());
        assert_eq!(steps(&plan), ["m6", "m7", "m8", "b7", "m9"]);
    }

    /// The pending items as `m<seq>` and `b<token>`.
    fn pending_names(pending: &[Pending]) -> Vec<String> {
        pending
            .iter()
            .map(|p| match p {
                Pending::Message(_, _, _, json) => String::from_utf8_lossy(json).into_owned(),
                Pending::Barrier(_, token) => format!("b{}", token.unwrap_or(0)),
            })
            .collect()
    }

    #[test]
    fn without_the_barrier_only_the_history_is_delivered_and_the_rest_held() {
        // The subscriptions were not proven: 9 and 10 came live, but one
        // between them may have been published before they took.
        let history = History {
            upto: Cursor::new(E, 8),
            messages: vec![msg(6), msg(7), msg(8)],
        };
        let pending = vec![live(E, 8), barrier(8, 3), live(E, 9), live(E, 10)];
        let plan = plan(Cursor::new(E, 5), Some(history), pending, TOKEN);
        assert_eq!(steps(&plan), ["m6", "m7", "m8"]);
        let held = plan.held.expect("the rest held for the next catch-up");
        assert_eq!(
            pending_names(&held),
            ["b3", "m9", "m10"],
            "8 was in history"
        );
    }

    #[test]
    fn with_the_barrier_nothing_is_held() {
        let history = History {
            upto: Cursor::new(E, 8),
            messages: vec![msg(8)],
        };
        let pending = vec![live(E, 9), barrier(9, TOKEN)];
        let plan = plan(Cursor::new(E, 7), Some(history), pending, TOKEN);
        assert!(plan.held.is_none());
        assert_eq!(steps(&plan), ["m8", "m9", "b7"]);
    }

    #[test]
    fn after_the_barrier_everything_pending_is_delivered() {
        // Another barrier (a resume's) passes too, in its place.
        let history = History {
            upto: Cursor::new(E, 5),
            messages: Vec::new(),
        };
        let pending = vec![barrier(5, 3), barrier(5, TOKEN), live(E, 6)];
        let plan = plan(Cursor::new(E, 5), Some(history), pending, TOKEN);
        assert_eq!(steps(&plan), ["b3", "b7", "m6"]);
    }

    #[test]
    fn a_read_at_the_position_restarts_nothing() {
        let history = History {
            upto: Cursor::new(E, 5),
            messages: vec![msg(5)],
        };
        let pending = vec![barrier(5, TOKEN), live(E, 6)];
        let plan = plan(Cursor::new(E, 5), Some(history), pending, TOKEN);
        assert_eq!(plan.reset, None, "the sequence did not go back");
        assert_eq!(steps(&plan), ["b7", "m6"]);
    }

    #[test]
    fn only_its_own_barrier_lets_through_what_the_read_covered() {
        // The sequence went back after the read (a failover): past the
        // catch-up's barrier a message at or below the read's position is
        // new, and delivered. Another barrier (a resume's) opens nothing.
        let history = History {
            upto: Cursor::new(E, 8),
            messages: vec![msg(6), msg(7), msg(8)],
        };
        let pending = vec![barrier(8, 3), live(E, 8), barrier(8, TOKEN), live(E, 4)];
        let plan = plan(Cursor::new(E, 5), Some(history), pending, TOKEN);
        assert_eq!(steps(&plan), ["m6", "m7", "m8", "b3", "b7", "m4"]);
    }

    #[test]
    fn a_sequence_gone_back_restarts_from_the_read() {
        // A failover lost 9 and 10: the new master is at 8.
        let history = History {
            upto: Cursor::new(E, 8),
            messages: vec![msg(7), msg(8)],
        };
        let pending = vec![barrier(8, TOKEN), live(E, 9)];
        let plan = plan(Cursor::new(E, 10), Some(history), pending, TOKEN);
        assert_eq!(plan.reset, Some(Cursor::new(E, 8)));
        assert_eq!(steps(&plan), ["b7", "m9"], "7 and 8 were delivered before");
    }

    #[test]
    fn a_new_epoch_delivers_its_whole_history() {
        let history = History {
            upto: Cursor::new(E + 1, 2),
            messages: vec![msg(2), msg(1)],
        };
        let plan = plan(
            Cursor::new(E, 10),
            Some(history),
            vec![live(E + 1, 3)],
            TOKEN,
        );
        assert_eq!(plan.reset, Some(Cursor::new(E + 1, 2)));
        assert_eq!(steps(&plan), ["m1", "m2"]);
        assert_eq!(pending_names(&plan.held.expect("no barrier")), ["m3"]);
    }

    #[test]
    fn a_failed_read_delivers_what_arrived() {
        let pending = vec![live(E, 6), barrier(6, 3), live(E, 7)];
        let plan = plan(Cursor::new(E, 5), None, pending, TOKEN);
        assert!(plan.reset.is_none());
        assert!(plan.held.is_none(), "nothing to wait for");
        assert_eq!(steps(&plan), ["m6", "b3", "m7"]);
    }
}
