//! The history of every stream: the broadcast ring, and one ring per user
//! and per channel with recent messages (streams without any cost
//! nothing).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

use super::ring::Ring;
use crate::protocol::{Channel, UserId};

/// A stream other than broadcast: one user's, or one channel's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StreamKey {
    /// A user's personal stream.
    User(UserId),
    /// A channel's stream.
    Channel(Channel),
}

/// What a reader gets back for a cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery<T> {
    /// Whether every message of the reader's streams after the cursor is here.
    pub complete: bool,
    /// Those still held, in sequence order across the streams.
    pub items: Vec<(u64, T)>,
}

/// An append would give history more than `max_streams` streams; nothing
/// was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("history holds the most streams it may ({0}); retry once some age out")]
pub struct TooManyStreams(pub usize);

/// Bounded per-stream history, trimmed by count and by age.
///
/// Sequence numbers grow with time and every stream has the same age
/// limit, so once age has dropped message `n` of any stream, every message
/// numbered up to `n` in every stream is gone too. That watermark answers
/// for streams whose ring was dropped empty.
///
/// Sweeping by age visits only what has aged: every append to a keyed
/// stream is logged with its time, oldest first, and a sweep pops the log
/// up to the cutoff, trimming just those streams. It never walks streams
/// with nothing to drop.
#[derive(Debug)]
pub struct History<T> {
    broadcast: Ring<T>,
    streams: HashMap<StreamKey, Ring<T>>,
    appends: VecDeque<(u64, StreamKey)>,
    size: usize,
    ttl_ms: u64,
    max_streams: usize,
    expired_through: u64,
}

impl<T: Clone> History<T> {
    /// Keeps up to `size` messages per stream for `ttl_ms`, in at most
    /// `max_streams` keyed streams at once.
    pub fn new(size: usize, ttl_ms: u64, max_streams: usize) -> Self {
        Self {
            broadcast: Ring::new(size),
            streams: HashMap::new(),
            appends: VecDeque::new(),
            size,
            ttl_ms,
            max_streams,
            expired_through: 0,
        }
    }

    /// Records a broadcast message.
    pub fn append_broadcast(&mut self, seq: u64, now_ms: u64, item: T) {
        self.broadcast.push(seq, now_ms, item);
    }

    /// Whether `keys` can all be appended to without passing the cap.
    pub fn check_room<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a StreamKey>,
    ) -> Result<(), TooManyStreams> {
        if self.size == 0 {
            return Ok(());
        }
        let new = keys
            .into_iter()
            .filter(|k| !self.streams.contains_key(k))
            .count();
        if new > 0 && self.streams.len() + new > self.max_streams {
            return Err(TooManyStreams(self.max_streams));
        }
        Ok(())
    }

    /// Records a message in one keyed stream. Check [`History::check_room`]
    /// first: this does not refuse.
    pub fn append(&mut self, key: StreamKey, seq: u64, now_ms: u64, item: T) {
        if self.size == 0 {
            return;
        }
        let size = self.size;
        self.appends.push_back((now_ms, key.clone()));
        self.streams
            .entry(key)
            .or_insert_with(|| Ring::new(size))
            .push(seq, now_ms, item);
    }

    /// Everything after `seq` in the broadcast stream and `streams`,
    /// merged in sequence order.
    pub fn read<'a>(
        &self,
        streams: impl IntoIterator<Item = &'a StreamKey>,
        seq: u64,
    ) -> Recovery<T> {
        let mut complete = self.broadcast.covers(seq);
        let mut items: Vec<(u64, T)> = self
            .broadcast
            .after(seq)
            .map(|(s, item)| (s, item.clone()))
            .collect();
        for key in streams {
            match self.streams.get(key) {
                Some(ring) => {
                    complete &= ring.covers(seq);
                    items.extend(ring.after(seq).map(|(s, item)| (s, item.clone())));
                }
                None => complete &= seq >= self.expired_through,
            }
        }
        items.sort_unstable_by_key(|(s, _)| *s);
        Recovery { complete, items }
    }

    /// Drops messages older than the age limit, and rings left empty.
    /// Visits only streams that received a message before the cutoff.
    pub fn expire(&mut self, now_ms: u64) {
        let cutoff = now_ms.saturating_sub(self.ttl_ms);
        let mut newest = self.broadcast.expire(cutoff);
        while self.appends.front().is_some_and(|(at, _)| *at < cutoff) {
            let Some((_, key)) = self.appends.pop_front() else {
                break;
            };
            if let Entry::Occupied(mut ring) = self.streams.entry(key) {
                newest = newest.max(ring.get_mut().expire(cutoff));
                if ring.get().is_empty() {
                    ring.remove();
                }
            }
        }
        if let Some(seq) = newest {
            self.expired_through = self.expired_through.max(seq);
        }
    }

    /// Messages held across all streams (a personal message counts once
    /// per recipient).
    pub fn len(&self) -> usize {
        self.broadcast.len() + self.streams.values().map(Ring::len).sum::<usize>()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keyed streams (users, channels) with a ring.
    pub fn streams_with_history(&self) -> usize {
        self.streams.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn user(s: &str) -> StreamKey {
        StreamKey::User(UserId::parse(s).expect("valid"))
    }

    fn channel(s: &str) -> StreamKey {
        StreamKey::Channel(Channel::parse(s).expect("valid"))
    }

    #[test]
    fn a_reader_gets_all_of_its_streams_merged_in_order() {
        let mut h = History::new(10, 1_000, 100);
        let (alice, bob, vip) = (user("alice"), user("bob"), channel("vip"));
        h.append_broadcast(1, 0, "b1");
        h.append(alice.clone(), 2, 0, "a2");
        h.append(bob.clone(), 3, 0, "x3");
        h.append_broadcast(4, 0, "b4");
        h.append(alice.clone(), 5, 0, "ab5");
        h.append(bob.clone(), 5, 0, "ab5");
        h.append(vip.clone(), 6, 0, "v6");
        let got = h.read([&alice], 1);
        assert!(got.complete);
        assert_eq!(got.items, [(2, "a2"), (4, "b4"), (5, "ab5")]);
        assert_eq!(
            h.read([&bob, &vip], 0).items,
            [(1, "b1"), (3, "x3"), (4, "b4"), (5, "ab5"), (6, "v6")]
        );
        assert_eq!(h.read([&user("carol")], 3).items, [(4, "b4")]);
        assert_eq!(h.read([&vip], 4).items, [(6, "v6")]);
    }

    #[test]
    fn a_cursor_older_than_what_is_held_is_not_complete() {
        let mut h = History::new(2, 1_000, 100);
        for seq in 1..=3 {
            h.append_broadcast(seq, 0, seq);
        }
        assert!(!h.read([&user("a")], 0).complete);
        assert!(h.read([&user("a")], 1).complete);
        let news = channel("news");
        for seq in 4..=6 {
            h.append(news.clone(), seq, 0, seq);
        }
        assert!(!h.read([&news], 3).complete, "4 was pushed out of the ring");
        assert!(h.read([&news], 4).complete);
    }

    #[test]
    fn a_sweep_keeps_every_message_younger_than_the_ttl() {
        let mut h = History::new(10, 100, 100);
        let (alice, bob) = (user("alice"), user("bob"));
        h.append(alice.clone(), 1, 0, 1);
        h.append(alice.clone(), 2, 60, 2);
        h.append(bob.clone(), 3, 60, 3);
        h.expire(120);
        assert!(!h.is_empty());
        assert_eq!(h.streams_with_history(), 2, "live rings survive the sweep");
        assert_eq!(h.read([&alice], 1).items, [(2, 2)]);
        assert!(h.read([&alice], 1).complete);
        assert_eq!(h.read([&bob], 0).items, [(3, 3)]);
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn streams_without_recent_messages_cost_nothing_and_age_is_remembered() {
        let mut h = History::new(10, 100, 100);
        let alice = user("alice");
        h.append(alice.clone(), 1, 0, 1);
        h.append_broadcast(2, 50, 2);
        assert_eq!(h.streams_with_history(), 1);
        h.expire(120);
        assert_eq!(h.streams_with_history(), 0, "alice's ring dropped empty");
        assert!(!h.read([&alice], 0).complete, "message 1 was lost to age");
        assert!(h.read([&alice], 1).complete);
        assert_eq!(h.read([&alice], 1).items, [(2, 2)]);
        h.expire(200);
        assert!(h.is_empty());
        assert!(!h.read([&user("bob")], 1).complete);
    }

    #[test]
    fn past_the_stream_cap_a_new_stream_is_refused_and_an_old_one_is_not() {
        let mut h = History::new(10, 100, 2);
        let (a, b, c) = (channel("a"), channel("b"), channel("c"));
        assert_eq!(h.check_room([&a, &b]), Ok(()));
        h.append(a.clone(), 1, 0, 1);
        h.append(b.clone(), 2, 0, 2);
        assert_eq!(h.check_room([&c]), Err(TooManyStreams(2)));
        assert_eq!(h.check_room([&a, &c]), Err(TooManyStreams(2)));
        assert_eq!(h.check_room([&a, &b]), Ok(()));
        h.expire(150);
        assert_eq!(h.check_room([&c]), Ok(()), "aged-out streams make room");
        assert_eq!(History::<u8>::new(0, 100, 0).check_room([&c]), Ok(()));
    }

    #[test]
    fn streams_already_held_are_never_refused_even_past_the_cap() {
        // `append` does not refuse: a caller that skipped `check_room`
        // can leave more streams than the cap.
        let mut h = History::new(10, 100, 1);
        let (a, b) = (channel("a"), channel("b"));
        h.append(a.clone(), 1, 0, 1);
        h.append(b.clone(), 2, 0, 2);
        assert_eq!(h.check_room([&a, &b]), Ok(()));
        assert_eq!(h.check_room([&channel("c")]), Err(TooManyStreams(1)));
    }

    proptest! {
        /// Against a plain model: after any appends and sweeps, a read of
        /// any stream returns exactly the messages younger than the ttl
        /// and among the stream's newest `size`, and the sweep leaves no
        /// empty ring behind.
        #[test]
        fn sweeps_match_a_model(
            ops in prop::collection::vec((0..4usize, 0..3u64, any::<bool>()), 1..60),
        ) {
            let (size, ttl) = (3usize, 10u64);
            let keys = [channel("a"), channel("b"), user("c"), user("d")];
            let mut h = History::new(size, ttl, 100);
            let mut model: Vec<Vec<(u64, u64)>> = vec![Vec::new(); keys.len()];
            let (mut now, mut seq) = (0u64, 0u64);
            for (stream, step, sweep) in ops {
                now += step;
                seq += 1;
                h.append(keys[stream].clone(), seq, now, seq);
                model[stream].push((seq, now));
                if sweep {
                    h.expire(now);
                    let cutoff = now.saturating_sub(ttl);
                    for items in &mut model {
                        items.retain(|(_, at)| *at >= cutoff);
                    }
                }
            }
            for (key, items) in keys.iter().zip(&model) {
                let kept: Vec<u64> = items.iter().rev().take(size).rev().map(|(s, _)| *s).collect();
                let got: Vec<u64> = h.read([key], 0).items.into_iter().map(|(s, _)| s).collect();
                prop_assert_eq!(got, kept);
            }
            prop_assert!(h.streams.values().all(|r| !r.is_empty()));
        }
    }
}
