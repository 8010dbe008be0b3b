//! One stream's recent messages: a bounded ring of `(seq, time, item)`.

use std::collections::VecDeque;

/// The recent items of one stream, oldest first, bounded by count and age.
///
/// `trimmed_through` remembers the newest sequence number ever dropped, so
/// the ring can say whether it still holds everything after a cursor.
#[derive(Debug, Clone)]
pub struct Ring<T> {
    items: VecDeque<(u64, u64, T)>,
    capacity: usize,
    trimmed_through: u64,
}

impl<T: Clone> Ring<T> {
    /// An empty ring keeping at most `capacity` items (0 keeps none).
    pub fn new(capacity: usize) -> Self {
        Self {
            items: VecDeque::new(),
            capacity,
            trimmed_through: 0,
        }
    }

    /// Appends item `seq` (increasing) published at `at_ms`, dropping the
    /// oldest past capacity.
    pub fn push(&mut self, seq: u64, at_ms: u64, item: T) {
        debug_assert!(self.items.back().is_none_or(|(last, _, _)| *last < seq));
        if self.capacity == 0 {
            self.trimmed_through = seq;
            return;
        }
        if self.items.len() == self.capacity {
            self.drop_oldest();
        }
        self.items.push_back((seq, at_ms, item));
    }

    /// Drops items published before `cutoff_ms`; returns the newest
    /// sequence number dropped, if any.
    pub fn expire(&mut self, cutoff_ms: u64) -> Option<u64> {
        let mut dropped = None;
        // At most one turn per item held: a bound, not only a condition.
        for _ in 0..self.items.len() {
            match self.items.front() {
                Some((seq, at, _)) if *at < cutoff_ms => dropped = Some(*seq),
                _ => break,
            }
            self.drop_oldest();
        }
        dropped
    }

    fn drop_oldest(&mut self) {
        if let Some((seq, _, _)) = self.items.pop_front() {
            self.trimmed_through = seq;
        }
    }

    /// Whether every item after `seq` is still here.
    pub fn covers(&self, seq: u64) -> bool {
        self.trimmed_through <= seq
    }

    /// The newest sequence number dropped (0: none yet).
    pub fn trimmed_through(&self) -> u64 {
        self.trimmed_through
    }

    /// Items after `seq`, oldest first.
    pub fn after(&self, seq: u64) -> impl Iterator<Item = (u64, &T)> + '_ {
        let start = self.items.partition_point(|(s, _, _)| *s <= seq);
        self.items.range(start..).map(|(s, _, item)| (*s, item))
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no item is held.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ring_keeps_the_newest_and_knows_what_it_dropped() {
        let mut ring = Ring::new(3);
        for seq in [2, 5, 7, 9] {
            ring.push(seq, seq * 10, seq);
        }
        assert_eq!(ring.after(0).map(|(s, _)| s).collect::<Vec<_>>(), [5, 7, 9]);
        assert!(!ring.covers(1), "2 was dropped");
        assert!(ring.covers(2));
        assert_eq!(ring.trimmed_through(), 2);
        assert_eq!((ring.len(), ring.is_empty()), (3, false));
        assert_eq!(ring.after(5).map(|(s, _)| s).collect::<Vec<_>>(), [7, 9]);
        assert_eq!(ring.after(6).count(), 2);
        assert_eq!(ring.after(9).count(), 0);
        assert_eq!(ring.expire(71), Some(7), "the newest dropped");
        assert_eq!(ring.expire(71), None, "nothing more to drop");
        assert_eq!(ring.trimmed_through(), 7);
        assert_eq!(ring.after(0).map(|(s, _)| s).collect::<Vec<_>>(), [9]);
        assert!(!ring.covers(6) && ring.covers(7));
    }

    #[test]
    fn zero_capacity_keeps_nothing_and_covers_nothing_older() {
        let mut ring = Ring::new(0);
        ring.push(4, 0, ());
        assert!(ring.is_empty());
        assert!(!ring.covers(3));
        assert!(ring.covers(4));
    }

    proptest! {
        /// Against a plain list: `after` returns exactly the kept items
        /// past the cursor, and `covers` is true exactly when nothing past
        /// the cursor was dropped.
        #[test]
        fn ring_matches_a_list_model(
            capacity in 0..6usize,
            gaps in prop::collection::vec(1..4u64, 0..30),
            cutoff in 0..100u64,
            cursor in 0..100u64,
        ) {
            let mut ring = Ring::new(capacity);
            let mut all = Vec::new();
            let mut seq = 0;
            for gap in gaps {
                seq += gap;
                ring.push(seq, seq, seq);
                all.push(seq);
            }
            ring.expire(cutoff);
            let kept: Vec<u64> = all.iter().copied().rev().take(capacity).rev()
                .filter(|s| *s >= cutoff).collect();
            let after: Vec<u64> = ring.after(cursor).map(|(s, _)| s).collect();
            let want: Vec<u64> = kept.iter().copied().filter(|s| *s > cursor).collect();
            prop_assert_eq!(&after, &want);
            let lost = all.iter().any(|s| *s > cursor && !kept.contains(s));
            prop_assert_eq!(ring.covers(cursor), !lost);
        }
    }
}
