//! One slot of the wheel's slab, and how its links are encoded.
//!
//! An entry is 24 bytes plus its payload (32 bytes with a `u64` payload).
//! To stay that small, `prev` does three jobs, read through [`Entry::place`]:
//!
//! | `prev`                | the entry is                                     |
//! |-----------------------|--------------------------------------------------|
//! | `FREE`                | on the free list (`next` is the next free entry) |
//! | `IDLE`                | allocated but not armed (fired or cancelled)     |
//! | `HEAD \| b`           | armed, first in bucket `b`                       |
//! | any index `< HEAD`    | armed, after entry `prev` in its bucket          |
//!
//! Because only the first entry of a bucket names the bucket, a whole
//! bucket can be moved to another head in O(1): rewrite the head and that
//! one entry's `prev`.

/// "No entry": the end of a list.
pub(super) const NIL: u32 = u32::MAX;
/// Set in `prev` of the first entry in a bucket; the low bits name the bucket.
const HEAD: u32 = 1 << 31;
/// `prev` of an entry on the free list.
const FREE: u32 = u32::MAX;
/// `prev` of an allocated entry that is not in any bucket.
const IDLE: u32 = u32::MAX - 1;
/// Entries are indexed below `HEAD`, so an index never looks like a head.
pub(super) const MAX_ENTRIES: usize = HEAD as usize;
/// Buckets are numbered below this, so `HEAD | bucket` never equals `IDLE` or `FREE`.
pub(super) const MAX_BUCKETS: usize = (IDLE - HEAD) as usize;

/// Where an entry stands, decoded from its `prev` link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// On the free list.
    Free,
    /// Allocated, not armed.
    Idle,
    /// Armed, first in this bucket.
    First { bucket: u32 },
    /// Armed, right after this entry.
    After { entry: u32 },
}

/// A timer entry in the slab.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry<T> {
    /// Absolute deadline in ticks. May be later than the tick of the bucket
    /// the entry is filed in (lazy reset); never earlier.
    pub deadline: u64,
    prev: u32,
    /// Next entry in the bucket, or the next free entry; `NIL` at the end.
    pub next: u32,
    /// Bumped when the entry is freed, so stale keys are rejected.
    pub generation: u32,
    /// Bumped on every insert, reset and cancel, so an owner can tell a
    /// current expiry from one that raced with its own newer reset.
    pub seq: u32,
    /// The owner's payload, handed back on expiry.
    pub value: T,
}

impl<T> Entry<T> {
    /// A fresh, idle entry.
    pub(super) fn new(deadline: u64, value: T) -> Self {
        Self {
            deadline,
            prev: IDLE,
            next: NIL,
            generation: 0,
            seq: 0,
            value,
        }
    }

    /// Decodes `prev`.
    pub(super) fn place(&self) -> Place {
        match self.prev {
            FREE => Place::Free,
            IDLE => Place::Idle,
            p if p & HEAD != 0 => Place::First { bucket: p & !HEAD },
            p => Place::After { entry: p },
        }
    }

    /// Whether the entry sits in a bucket.
    pub(super) fn is_armed(&self) -> bool {
        matches!(self.place(), Place::First { .. } | Place::After { .. })
    }

    /// Marks the entry first in `bucket`.
    pub(super) fn set_first_in(&mut self, bucket: u32) {
        self.prev = HEAD | bucket;
    }

    /// Marks the entry as following `entry`.
    pub(super) fn set_after(&mut self, entry: u32) {
        self.prev = entry;
    }

    /// Marks the entry allocated but out of every bucket.
    pub(super) fn set_idle(&mut self) {
        self.prev = IDLE;
        self.next = NIL;
    }

    /// Puts the entry on the free list in front of `next_free`.
    pub(super) fn set_free(&mut self, next_free: u32) {
        self.prev = FREE;
        self.next = next_free;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_with_u64_payload_fits_in_32_bytes() {
        assert_eq!(std::mem::size_of::<Entry<u64>>(), 32);
        assert_eq!(std::mem::size_of::<Entry<u32>>(), 32);
        assert_eq!(std::mem::size_of::<Entry<()>>(), 24);
    }

    #[test]
    fn prev_link_decodes_every_place() {
        let mut e = Entry::new(0, ());
        assert_eq!(e.place(), Place::Idle);
        e.set_first_in(7);
        assert_eq!(e.place(), Place::First { bucket: 7 });
        e.set_first_in(MAX_BUCKETS as u32 - 1);
        assert_eq!(
            e.place(),
            Place::First {
                bucket: MAX_BUCKETS as u32 - 1
            }
        );
        e.set_after(MAX_ENTRIES as u32 - 1);
        assert_eq!(
            e.place(),
            Place::After {
                entry: MAX_ENTRIES as u32 - 1
            }
        );
        e.set_free(NIL);
        assert_eq!(e.place(), Place::Free);
        assert!(!e.is_armed());
    }
}
