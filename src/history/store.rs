//! The history of every stream: the broadcast ring and one ring per user
//! with recent messages (users without any cost nothing).

use std::collections::HashMap;

use super::ring::Ring;
use crate::protocol::UserId;

/// What a reader gets back for a cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery<T> {
    /// Whether every message of the reader's streams after the cursor is here.
    pub complete: bool,
    /// Those still held, in sequence order across both streams.
    pub items: Vec<(u64, T)>,
}

/// Bounded per-stream history, trimmed by count and by age.
///
/// Sequence numbers grow with time and every stream has the same age
/// limit, so once age has dropped message `n` of any stream, every message
/// numbered up to `n` in every stream is gone too. That watermark answers
/// for users whose ring was dropped empty.
#[derive(Debug)]
pub struct History<T> {
    broadcast: Ring<T>,
    users: HashMap<UserId, Ring<T>>,
    size: usize,
    ttl_ms: u64,
    expired_through: u64,
}

impl<T: Clone> History<T> {
    /// Keeps up to `size` messages per stream for `ttl_ms`.
    pub fn new(size: usize, ttl_ms: u64) -> Self {
        Self {
            broadcast: Ring::new(size),
            users: HashMap::new(),
            size,
            ttl_ms,
            expired_through: 0,
        }
    }

    /// Records a broadcast message.
    pub fn append_broadcast(&mut self, seq: u64, now_ms: u64, item: T) {
        self.broadcast.push(seq, now_ms, item);
    }

    /// Records a personal message in each recipient's stream.
    pub fn append_personal(&mut self, seq: u64, now_ms: u64, users: &[UserId], item: &T) {
        if self.size == 0 {
            return;
        }
        for user in users {
            self.users
                .entry(user.clone())
                .or_insert_with(|| Ring::new(self.size))
                .push(seq, now_ms, item.clone());
        }
    }

    /// Everything after `seq` in the broadcast stream and `user`'s stream.
    pub fn read(&self, user: &UserId, seq: u64) -> Recovery<T> {
        let own = self.users.get(user);
        let complete = self.broadcast.covers(seq)
            && own.map_or(seq >= self.expired_through, |ring| ring.covers(seq));
        let mut items: Vec<(u64, T)> = self
            .broadcast
            .after(seq)
            .map(|(s, item)| (s, item.clone()))
            .collect();
        if let Some(ring) = own {
            items.extend(ring.after(seq).map(|(s, item)| (s, item.clone())));
            items.sort_unstable_by_key(|(s, _)| *s);
        }
        Recovery { complete, items }
    }

    /// Drops messages older than the age limit, and user rings left empty.
    pub fn expire(&mut self, now_ms: u64) {
        let cutoff = now_ms.saturating_sub(self.ttl_ms);
        let mut newest = self.broadcast.expire(cutoff);
        self.users.retain(|_, ring| {
            newest = newest.max(ring.expire(cutoff));
            !ring.is_empty()
        });
        if let Some(seq) = newest {
            self.expired_through = self.expired_through.max(seq);
        }
    }

    /// Messages held across all streams (a personal message counts once
    /// per recipient).
    pub fn len(&self) -> usize {
        self.broadcast.len() + self.users.values().map(Ring::len).sum::<usize>()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Users with a ring.
    pub fn users_with_history(&self) -> usize {
        self.users.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(s: &str) -> UserId {
        UserId::parse(s).expect("valid")
    }

    #[test]
    fn a_reader_gets_both_of_its_streams_merged_in_order() {
        let mut h = History::new(10, 1_000);
        let (alice, bob) = (uid("alice"), uid("bob"));
        h.append_broadcast(1, 0, "b1");
        h.append_personal(2, 0, std::slice::from_ref(&alice), &"a2");
        h.append_personal(3, 0, std::slice::from_ref(&bob), &"x3");
        h.append_broadcast(4, 0, "b4");
        h.append_personal(5, 0, &[alice.clone(), bob.clone()], &"ab5");
        let got = h.read(&alice, 1);
        assert!(got.complete);
        assert_eq!(got.items, [(2, "a2"), (4, "b4"), (5, "ab5")]);
        assert_eq!(
            h.read(&bob, 0).items,
            [(1, "b1"), (3, "x3"), (4, "b4"), (5, "ab5")]
        );
        assert_eq!(h.read(&uid("carol"), 3).items, [(4, "b4")]);
    }

    #[test]
    fn a_cursor_older_than_what_is_held_is_not_complete() {
        let mut h = History::new(2, 1_000);
        for seq in 1..=3 {
            h.append_broadcast(seq, 0, seq);
        }
        assert!(!h.read(&uid("a"), 0).complete);
        assert!(h.read(&uid("a"), 1).complete);
    }

    #[test]
    fn a_sweep_keeps_every_personal_message_younger_than_the_ttl() {
        let mut h = History::new(10, 100);
        let (alice, bob) = (uid("alice"), uid("bob"));
        h.append_personal(1, 0, std::slice::from_ref(&alice), &1);
        h.append_personal(2, 60, std::slice::from_ref(&alice), &2);
        h.append_personal(3, 60, std::slice::from_ref(&bob), &3);
        h.expire(120);
        assert_eq!(h.users_with_history(), 2, "live rings survive the sweep");
        assert_eq!(h.read(&alice, 1).items, [(2, 2)]);
        assert!(h.read(&alice, 1).complete);
        assert_eq!(h.read(&bob, 0).items, [(3, 3)]);
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn users_without_recent_messages_cost_nothing_and_age_is_remembered() {
        let mut h = History::new(10, 100);
        let alice = uid("alice");
        h.append_personal(1, 0, std::slice::from_ref(&alice), &1);
        h.append_broadcast(2, 50, 2);
        assert_eq!(h.users_with_history(), 1);
        h.expire(120);
        assert_eq!(h.users_with_history(), 0, "alice's ring dropped empty");
        assert!(!h.read(&alice, 0).complete, "message 1 was lost to age");
        assert!(h.read(&alice, 1).complete);
        assert_eq!(h.read(&alice, 1).items, [(2, 2)]);
        h.expire(200);
        assert!(h.is_empty());
        assert!(!h.read(&uid("bob"), 1).complete);
    }
}
