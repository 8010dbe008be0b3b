//! The wheel's edge cases, and a model check against a `BTreeMap` reference.

use std::collections::BTreeMap;
use std::task::Poll;

use proptest::prelude::*;

use super::{EntryKey, Expired, StaleKey, Wheel};

/// Polls until ready, returning the deadlines that fired, in order. A
/// wheel that stays pending past a generous bound fails the test instead
/// of hanging it.
fn drain(wheel: &mut Wheel<u64>, target: u64, budget: usize) -> Vec<Expired<u64>> {
    const MAX_CALLS: usize = 10_000;
    let mut out = Vec::new();
    for _ in 0..MAX_CALLS {
        if wheel.poll_expired(target, budget, &mut out).is_ready() {
            return out;
        }
    }
    panic!("poll_expired still pending after {MAX_CALLS} calls (target {target})");
}

fn values(fired: &[Expired<u64>]) -> Vec<u64> {
    fired.iter().map(|e| e.value).collect()
}

#[test]
fn entry_fires_on_its_deadline_tick_and_not_before() {
    let mut wheel = Wheel::new(16);
    wheel.insert(5, 1);
    assert!(drain(&mut wheel, 4, 100).is_empty());
    assert_eq!(values(&drain(&mut wheel, 5, 100)), [1]);
    assert_eq!(wheel.armed(), 0);
    assert_eq!(wheel.len(), 1, "a fired entry stays allocated for reuse");
}

#[test]
fn one_tick_lazy_extension_does_not_fire_early() {
    let mut wheel = Wheel::new(16);
    let key = wheel.insert(10, 1);
    wheel.reset(key, 11).unwrap();
    assert!(drain(&mut wheel, 10, 100).is_empty());
    assert_eq!(values(&drain(&mut wheel, 11, 100)), [1]);
}

#[test]
fn extension_by_many_turns_waits_for_its_turn() {
    let mut wheel = Wheel::new(8);
    let key = wheel.insert(3, 1);
    wheel.reset(key, 3 + 8 * 5).unwrap();
    for target in 1..43 {
        assert!(
            drain(&mut wheel, target, 100).is_empty(),
            "fired at {target}"
        );
    }
    assert_eq!(values(&drain(&mut wheel, 43, 100)), [1]);
}

#[test]
fn reset_to_past_deadline_mid_slot_fires_next_tick_not_a_turn_later() {
    let mut wheel = Wheel::new(32);
    let filler: Vec<_> = (0..4).map(|i| wheel.insert(6, 100 + i)).collect();
    let key = wheel.insert(20, 1);
    // Stop in the middle of tick 6's bucket.
    let mut out = Vec::new();
    assert_eq!(wheel.poll_expired(6, 2, &mut out), Poll::Pending);
    assert_eq!(out.len(), 2);
    // Move our entry to a deadline already past.
    wheel.reset(key, 2).unwrap();
    assert_eq!(wheel.poll_expired(6, 100, &mut out), Poll::Ready(()));
    assert_eq!(out.len(), 5);
    assert!(values(&out).contains(&1));
    assert_eq!(filler.len(), 4);
    // The same after a completed tick: the next tick fires it.
    let key = wheel.insert(30, 2);
    wheel.reset(key, 0).unwrap();
    assert_eq!(values(&drain(&mut wheel, 7, 100)), [2]);
}

#[test]
fn cancelling_the_entry_under_the_cursor_between_budgeted_polls() {
    let mut wheel = Wheel::new(8);
    let keys: Vec<_> = (0..6).map(|i| wheel.insert(4, i)).collect();
    let mut out = Vec::new();
    assert_eq!(wheel.poll_expired(4, 3, &mut out), Poll::Pending);
    let fired: Vec<u64> = values(&out);
    // Cancel one that has not fired yet, and remove another.
    let pending: Vec<_> = keys
        .iter()
        .copied()
        .filter(|k| !fired.contains(wheel.get(*k).unwrap()))
        .collect();
    wheel.cancel(pending[0]).unwrap();
    let removed = wheel.remove(pending[1]).unwrap();
    out.clear();
    assert_eq!(wheel.poll_expired(4, 100, &mut out), Poll::Ready(()));
    assert_eq!(out.len(), 1);
    assert_ne!(out[0].value, removed);
    assert_eq!(wheel.armed(), 0);
    assert_eq!(wheel.len(), 5);
}

#[test]
fn stale_key_never_touches_the_reused_entry() {
    let mut wheel = Wheel::new(8);
    let old = wheel.insert(5, 1);
    assert_eq!(wheel.remove(old), Some(1));
    let new = wheel.insert(9, 2);
    assert_ne!(old, new);
    assert_eq!(wheel.reset(old, 1), Err(StaleKey));
    assert_eq!(wheel.cancel(old), Err(StaleKey));
    assert_eq!(wheel.remove(old), None);
    assert_eq!(wheel.get(old), None);
    assert_eq!(wheel.deadline(new), Some(9));
    assert_eq!(values(&drain(&mut wheel, 9, 100)), [2]);
}

#[test]
fn sequence_number_lets_an_owner_ignore_a_raced_expiry() {
    let mut wheel = Wheel::new(8);
    let key = wheel.insert(2, 7);
    let fired = drain(&mut wheel, 2, 100);
    // The owner resets before acting on the expiry it was handed.
    let newer = wheel.reset(key, 10).unwrap();
    assert_ne!(fired[0].seq, newer);
    assert_eq!(wheel.seq(key), Some(newer));
}

#[test]
fn gap_longer_than_a_turn_visits_each_bucket_once() {
    let mut wheel = Wheel::new(8);
    for d in [3, 9, 17, 40, 1000, 1001] {
        wheel.insert(d, d);
    }
    let mut out = Vec::new();
    // 8 entries of budget is enough for 6 entries plus no revisits.
    assert_eq!(wheel.poll_expired(1000, 6, &mut out), Poll::Ready(()));
    let mut fired = values(&out);
    fired.sort_unstable();
    assert_eq!(fired, [3, 9, 17, 40, 1000]);
    assert_eq!(values(&drain(&mut wheel, 1001, 100)), [1001]);
}

#[test]
fn budget_of_one_drains_a_crowd_one_entry_per_call() {
    let mut wheel = Wheel::new(8);
    for i in 0..100 {
        wheel.insert(3, i);
    }
    let mut out = Vec::new();
    let mut calls = 0;
    while wheel.poll_expired(3, 1, &mut out).is_pending() {
        calls += 1;
        assert!(out.len() <= calls);
        assert!(calls <= 1_000, "still pending after {calls} calls");
    }
    assert_eq!(out.len(), 100);
}

#[test]
fn the_accessors_follow_inserts_fires_cancels_and_removes() {
    let mut wheel = Wheel::with_capacity(16, 4);
    assert_eq!(wheel.slots(), 16);
    assert!(wheel.is_empty());
    assert_eq!((wheel.len(), wheel.armed(), wheel.elapsed()), (0, 0, 0));
    let a = wheel.insert(3, 1);
    let b = wheel.insert(20, 2);
    assert!(!wheel.is_empty());
    assert_eq!((wheel.len(), wheel.armed()), (2, 2));
    assert_eq!(
        (wheel.deadline(a), wheel.seq(a), wheel.get(b)),
        (Some(3), Some(0), Some(&2))
    );
    assert_eq!(values(&drain(&mut wheel, 5, 100)), [1]);
    assert_eq!(wheel.elapsed(), 5);
    assert_eq!(wheel.deadline(a), None, "a fired entry is idle");
    assert_eq!(wheel.poll_expired(2, 100, &mut Vec::new()), Poll::Ready(()));
    assert_eq!(wheel.elapsed(), 5, "a target behind is the tick reached");
    assert_eq!(wheel.cancel(b), Ok(1));
    assert_eq!((wheel.armed(), wheel.deadline(b)), (0, None));
    assert_eq!(
        wheel.cancel(b),
        Ok(2),
        "cancelling an idle entry moves its seq"
    );
    assert_eq!(wheel.remove(a), Some(1));
    assert_eq!(wheel.remove(b), Some(2));
    assert!(wheel.is_empty());
    let c = wheel.insert(9, 3);
    assert_eq!(
        (wheel.seq(c), wheel.len(), wheel.seq(a)),
        (Some(0), 1, None)
    );
}

#[test]
fn removing_an_armed_entry_disarms_it() {
    let mut wheel = Wheel::new(8);
    let keys: Vec<_> = (0..3).map(|i| wheel.insert(4, i)).collect();
    assert_eq!(wheel.remove(keys[1]), Some(1));
    assert_eq!((wheel.len(), wheel.armed()), (2, 2));
    assert_eq!(values(&drain(&mut wheel, 4, 100)), [2, 0]);
}

#[test]
#[should_panic(expected = "power of two")]
fn slots_that_are_not_a_power_of_two_are_refused() {
    let _ = Wheel::<u64>::new(12);
}

/// What a test does to the wheel and to the reference model alike.
#[derive(Debug, Clone)]
enum Op {
    Insert(i64),
    Reset(usize, Shift),
    Cancel(usize),
    Remove(usize),
    /// Advance the target by `delta` and poll `calls` times with `budget`.
    Poll {
        delta: u64,
        budget: usize,
        calls: u8,
    },
    /// Advance by `delta` and poll until ready.
    Finish(u64),
}

/// How a reset moves a deadline.
#[derive(Debug, Clone, Copy)]
enum Shift {
    /// Relative to the entry's current deadline (by a tick, or by turns).
    FromDeadline(i64),
    /// Relative to now (negative: already past).
    FromNow(i64),
}

/// The reference's view of one entry.
#[derive(Debug, Clone)]
struct Modelled {
    key: EntryKey,
    deadline: u64,
    /// The target from which it must have fired, while armed.
    due: Option<u64>,
    seq: u32,
    removed: bool,
}

const SLOTS: u64 = 8;

fn op() -> impl Strategy<Value = Op> {
    let turns = SLOTS as i64;
    let shift = prop_oneof![
        prop_oneof![
            Just(1i64),
            Just(-1),
            (-3..=3i64).prop_map(move |k| k * turns)
        ]
        .prop_map(Shift::FromDeadline),
        (-3..4 * turns).prop_map(Shift::FromNow),
    ];
    prop_oneof![
        4 => (-3..4 * turns).prop_map(Op::Insert),
        4 => (any::<usize>(), shift).prop_map(|(i, s)| Op::Reset(i, s)),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => any::<usize>().prop_map(Op::Remove),
        3 => (prop_oneof![0..3u64, 0..3 * SLOTS], 1..6usize, 1..4u8)
            .prop_map(|(delta, budget, calls)| Op::Poll { delta, budget, calls }),
        1 => (0..3 * SLOTS).prop_map(Op::Finish),
    ]
}

/// The wheel and a `BTreeMap` reference side by side.
struct Check {
    wheel: Wheel<u64>,
    model: BTreeMap<u64, Modelled>,
    target: u64,
    /// The target of the last poll that returned ready.
    completed: u64,
    next_value: u64,
}

impl Check {
    fn pick(&self, i: usize, removed: bool) -> Option<u64> {
        let ids: Vec<u64> = self
            .model
            .iter()
            .filter(|(_, m)| m.removed == removed)
            .map(|(id, _)| *id)
            .collect();
        (!ids.is_empty()).then(|| ids[i % ids.len()])
    }

    fn arm(&mut self, id: u64, deadline: u64, seq: u32) {
        let completed = self.completed;
        let m = self.model.get_mut(&id).expect("modelled");
        m.deadline = deadline;
        m.due = Some(deadline.max(completed + 1));
        m.seq = seq;
    }

    fn apply(&mut self, op: Op) -> Result<(), TestCaseError> {
        let at = |base: u64, d: i64| base.saturating_add_signed(d);
        match op {
            Op::Insert(d) => {
                let deadline = at(self.target, d);
                let id = self.next_value;
                self.next_value += 1;
                let key = self.wheel.insert(deadline, id);
                let m = Modelled {
                    key,
                    deadline,
                    due: None,
                    seq: 0,
                    removed: false,
                };
                self.model.insert(id, m);
                self.arm(id, deadline, 0);
            }
            Op::Reset(i, shift) => {
                let stale = if i % 4 == 0 {
                    self.pick(i / 4, true)
                } else {
                    None
                };
                if let Some(id) = stale {
                    let key = self.model[&id].key;
                    prop_assert_eq!(self.wheel.reset(key, self.target), Err(StaleKey));
                    prop_assert_eq!(self.wheel.cancel(key), Err(StaleKey));
                } else if let Some(id) = self.pick(i, false) {
                    let m = &self.model[&id];
                    let deadline = match shift {
                        Shift::FromDeadline(d) => at(m.deadline, d),
                        Shift::FromNow(d) => at(self.target, d),
                    };
                    let seq = self.wheel.reset(m.key, deadline).expect("live key");
                    prop_assert_eq!(seq, m.seq.wrapping_add(1));
                    self.arm(id, deadline, seq);
                }
            }
            Op::Cancel(i) => {
                if let Some(id) = self.pick(i, false) {
                    let m = self.model.get_mut(&id).expect("picked");
                    m.seq = self.wheel.cancel(m.key).expect("live key");
                    m.due = None;
                }
            }
            Op::Remove(i) => {
                if let Some(id) = self.pick(i, false) {
                    let m = self.model.get_mut(&id).expect("picked");
                    prop_assert_eq!(self.wheel.remove(m.key), Some(id));
                    prop_assert_eq!(self.wheel.remove(m.key), None);
                    m.removed = true;
                    m.due = None;
                }
            }
            Op::Poll {
                delta,
                budget,
                calls,
            } => {
                self.target += delta;
                for _ in 0..calls {
                    let mut out = Vec::new();
                    let poll = self.wheel.poll_expired(self.target, budget, &mut out);
                    prop_assert!(out.len() <= budget);
                    self.fired(&out)?;
                    if poll.is_ready() {
                        self.ready()?;
                        break;
                    }
                }
            }
            Op::Finish(delta) => {
                self.target += delta;
                let out = drain(&mut self.wheel, self.target, 3);
                self.fired(&out)?;
                self.ready()?;
            }
        }
        let armed = self.model.values().filter(|m| m.due.is_some()).count();
        let live = self.model.values().filter(|m| !m.removed).count();
        prop_assert_eq!(self.wheel.armed(), armed);
        prop_assert_eq!(self.wheel.len(), live);
        Ok(())
    }

    /// Every fired entry was armed, due by the target, with the current seq.
    fn fired(&mut self, out: &[Expired<u64>]) -> Result<(), TestCaseError> {
        for e in out {
            let m = self
                .model
                .get_mut(&e.value)
                .expect("fired a modelled entry");
            prop_assert!(m.due.is_some(), "fired twice or while idle: {:?}", e);
            prop_assert!(
                m.deadline <= self.target,
                "fired early: {:?} at {}",
                e,
                self.target
            );
            prop_assert_eq!((e.deadline, e.seq, e.key), (m.deadline, m.seq, m.key));
            m.due = None;
        }
        Ok(())
    }

    /// After a ready poll, nothing due by the target is still armed.
    fn ready(&mut self) -> Result<(), TestCaseError> {
        self.completed = self.target;
        for (id, m) in &self.model {
            if let Some(due) = m.due {
                prop_assert!(
                    due > self.target,
                    "entry {} due {} missed at {}",
                    id,
                    due,
                    self.target
                );
            }
        }
        Ok(())
    }
}

/// 10,000 cases, or `PROPTEST_CASES` when set (the mutation run lowers
/// it: a mutant that only the long run would notice is worth a table test).
fn model_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(10_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(model_cases()))]

    #[test]
    fn wheel_matches_the_reference_model(ops in prop::collection::vec(op(), 1..80)) {
        let mut check = Check {
            wheel: Wheel::new(SLOTS as usize),
            model: BTreeMap::new(),
            target: 0,
            completed: 0,
            next_value: 0,
        };
        for op in ops {
            check.apply(op)?;
        }
    }
}
