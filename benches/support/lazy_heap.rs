//! The textbook alternative to a timing wheel: a binary min-heap of
//! deadlines with lazy deletion, kept as a baseline.
//!
//! A heap cannot move an element it cannot find, so a reset pushes a new
//! `(deadline, id, version)` and bumps the entry's version; the old element
//! stays in the heap, stale, until it reaches the top and is skipped. A
//! reset is one O(log n) push, and the heap holds one element per reset
//! still to come due, not one per entry.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::task::Poll;

/// A min-heap of `(deadline, id, version)` with lazy deletion.
///
/// Entries are dense ids `0, 1, 2, ...` in insertion order; the caller keeps
/// its payload in its own table indexed by id, so the heap stores none.
#[derive(Debug, Default)]
pub(crate) struct LazyHeap {
    /// Every armed deadline plus the stale ones not yet popped.
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    /// The current version of each entry; a heap element with any other
    /// version is stale.
    versions: Vec<u32>,
}

impl LazyHeap {
    /// An empty heap with room for `capacity` entries (and as many elements)
    /// before it grows.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            heap: BinaryHeap::with_capacity(capacity),
            versions: Vec::with_capacity(capacity),
        }
    }

    /// Adds an entry due at `deadline` (ticks) and returns its id.
    pub(crate) fn insert(&mut self, deadline: u64) -> u32 {
        let id = u32::try_from(self.versions.len()).expect("more than 2^32 heap entries");
        self.versions.push(0);
        self.heap.push(Reverse((deadline, id, 0)));
        id
    }

    /// Moves entry `id` to `deadline` (re-arming it if it had fired): bumps
    /// its version, which makes any element already in the heap stale, and
    /// pushes the new deadline.
    pub(crate) fn reset(&mut self, id: u32, deadline: u64) {
        let version = &mut self.versions[id as usize];
        *version = version.wrapping_add(1);
        self.heap.push(Reverse((deadline, id, *version)));
    }

    /// Pops every element due by `now`, pushing the ids of current ones onto
    /// `out` and dropping stale ones.
    ///
    /// Examines at most `budget` elements (stale ones count: they cost a pop
    /// too), then returns `Poll::Pending`; call again to go on. Returns
    /// `Poll::Ready` once nothing due by `now` is left.
    pub(crate) fn poll_expired(&mut self, now: u64, budget: usize, out: &mut Vec<u32>) -> Poll<()> {
        let mut spent = 0;
        while let Some(&Reverse((deadline, id, version))) = self.heap.peek() {
            if deadline > now {
                break;
            }
            if spent == budget {
                return Poll::Pending;
            }
            spent += 1;
            self.heap.pop();
            if self.versions[id as usize] == version {
                out.push(id);
            }
        }
        Poll::Ready(())
    }
}
