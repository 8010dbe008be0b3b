//! The hashed timing wheel: a pure data structure over integer ticks.

use std::task::Poll;

use super::entry::{Entry, MAX_BUCKETS, MAX_ENTRIES, NIL, Place};

/// Names one entry of one [`Wheel`]; rejected once the entry is removed and
/// its slot reused, because the generation no longer matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EntryKey {
    index: u32,
    generation: u32,
}

/// The key named an entry that has since been removed (and maybe reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale timer key: its entry was removed")]
pub struct StaleKey;

/// One entry that came due, as handed out by [`Wheel::poll_expired`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired<T> {
    /// The entry; it stays allocated (idle) so its owner can re-arm it.
    pub key: EntryKey,
    /// The entry's sequence number when it fired: an owner that has reset
    /// or cancelled it since holds a newer one and ignores this expiry.
    pub seq: u32,
    /// The deadline tick it fired for.
    pub deadline: u64,
    /// The owner's payload.
    pub value: T,
}

/// A hashed timing wheel whose entries are reused: an owner inserts once,
/// then resets, cancels and re-arms the same entry for its whole life.
///
/// Time is plain ticks supplied by the caller; the wheel never reads a
/// clock. Geometry, with the shipped defaults (`tick_ms = 100`, `slots = 4096`):
///
/// | quantity      | value                          | default    |
/// |---------------|--------------------------------|------------|
/// | tick          | caller's unit                  | 100 ms     |
/// | slots         | power of two                   | 4096       |
/// | one turn      | `slots` ticks                  | 409.6 s    |
/// | bucket of `d` | `d & (slots - 1)`              |            |
/// | resolution    | fires at the first poll whose target is `>= d`: never early, one tick late at most | |
///
/// Deadlines are absolute ticks. An entry due more than a turn ahead waits
/// in its bucket and is compared, not counted down, each time the bucket
/// comes round. Moving a deadline later only stores it (the entry is
/// re-filed once when its old bucket comes round); moving it earlier
/// relinks it. Both are O(1) and allocate nothing.
///
/// Invariant: every armed entry with deadline `d` is filed in the bucket of
/// some tick `f <= d` that is still to be visited (`f > elapsed`), or is on
/// the visit list of the tick being visited.
#[derive(Debug)]
pub struct Wheel<T> {
    entries: Vec<Entry<T>>,
    free_head: u32,
    /// `slots` bucket heads, then the visit list's head.
    heads: Box<[u32]>,
    mask: u64,
    /// Every tick up to and including this one has been visited.
    elapsed: u64,
    /// The tick whose bucket was moved onto the visit list and is not done.
    visiting: Option<u64>,
    live: usize,
    armed: usize,
}

impl<T: Copy> Wheel<T> {
    /// A wheel of `slots` buckets (a power of two, at least 1) at tick 0.
    ///
    /// # Panics
    /// If `slots` is not a power of two or exceeds 2^30; configuration
    /// validation rejects such values before a wheel is built.
    pub fn new(slots: usize) -> Self {
        Self::with_capacity(slots, 0)
    }

    /// A wheel with room for `capacity` entries before the slab grows.
    ///
    /// # Panics
    /// As [`Wheel::new`].
    pub fn with_capacity(slots: usize, capacity: usize) -> Self {
        assert!(
            slots.is_power_of_two() && slots <= (1 << 30) && slots < MAX_BUCKETS,
            "wheel slots must be a power of two up to 2^30, got {slots}"
        );
        Self {
            entries: Vec::with_capacity(capacity),
            free_head: NIL,
            heads: vec![NIL; slots + 1].into_boxed_slice(),
            mask: slots as u64 - 1,
            elapsed: 0,
            visiting: None,
            live: 0,
            armed: 0,
        }
    }

    /// The number of buckets.
    pub fn slots(&self) -> usize {
        self.heads.len() - 1
    }

    /// The last tick fully visited by [`Wheel::poll_expired`].
    pub fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Entries allocated (armed or idle).
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether no entry is allocated.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Entries currently armed.
    pub fn armed(&self) -> usize {
        self.armed
    }

    /// Allocates an entry armed for `deadline` (absolute ticks). Its
    /// sequence number starts at 0. A deadline already past fires on the
    /// next tick. Allocates only while the slab grows.
    ///
    /// # Panics
    /// Past 2^31 live entries.
    pub fn insert(&mut self, deadline: u64, value: T) -> EntryKey {
        let index = if self.free_head != NIL {
            let index = self.free_head;
            let entry = &mut self.entries[index as usize];
            self.free_head = entry.next;
            entry.deadline = deadline;
            entry.value = value;
            entry.seq = 0;
            entry.set_idle();
            index
        } else {
            assert!(
                self.entries.len() < MAX_ENTRIES,
                "timer wheel is full: {} entries",
                self.entries.len()
            );
            self.entries.push(Entry::new(deadline, value));
            (self.entries.len() - 1) as u32
        };
        self.live += 1;
        self.arm(index);
        EntryKey {
            index,
            generation: self.entries[index as usize].generation,
        }
    }

    /// Moves the entry's deadline (re-arming it if it had fired or was
    /// cancelled) and returns its new sequence number. O(1), no allocation.
    pub fn reset(&mut self, key: EntryKey, deadline: u64) -> Result<u32, StaleKey> {
        let index = self.check(key)?;
        let entry = &mut self.entries[index as usize];
        let was_armed = entry.is_armed();
        let later = deadline >= entry.deadline;
        entry.deadline = deadline;
        entry.seq = entry.seq.wrapping_add(1);
        let seq = entry.seq;
        if !was_armed {
            self.arm(index);
        } else if !later {
            // Filed for a later tick than the new deadline: relink.
            self.unlink(index);
            self.arm(index);
        }
        Ok(seq)
    }

    /// Disarms the entry but keeps it for its owner to re-arm; returns its
    /// new sequence number.
    pub fn cancel(&mut self, key: EntryKey) -> Result<u32, StaleKey> {
        let index = self.check(key)?;
        if self.entries[index as usize].is_armed() {
            self.unlink(index);
            self.entries[index as usize].set_idle();
        }
        let entry = &mut self.entries[index as usize];
        entry.seq = entry.seq.wrapping_add(1);
        Ok(entry.seq)
    }

    /// Frees the entry for reuse and returns its payload; `None` for a
    /// stale key.
    pub fn remove(&mut self, key: EntryKey) -> Option<T> {
        let index = self.check(key).ok()?;
        if self.entries[index as usize].is_armed() {
            self.unlink(index);
        }
        let free_head = self.free_head;
        let entry = &mut self.entries[index as usize];
        entry.generation = entry.generation.wrapping_add(1);
        entry.set_free(free_head);
        self.free_head = index;
        self.live -= 1;
        Some(entry.value)
    }

    /// The payload of a live entry.
    pub fn get(&self, key: EntryKey) -> Option<&T> {
        let index = self.check(key).ok()?;
        Some(&self.entries[index as usize].value)
    }

    /// The deadline of an armed entry; `None` when idle or stale.
    pub fn deadline(&self, key: EntryKey) -> Option<u64> {
        let entry = &self.entries[self.check(key).ok()? as usize];
        entry.is_armed().then_some(entry.deadline)
    }

    /// The current sequence number of a live entry.
    pub fn seq(&self, key: EntryKey) -> Option<u32> {
        Some(self.entries[self.check(key).ok()? as usize].seq)
    }

    /// Visits ticks up to `target`, pushing every entry due by `target`
    /// onto `out` (give it capacity for `budget` to avoid allocating).
    ///
    /// Examines at most `budget` entries, then returns `Poll::Pending`;
    /// the next call resumes exactly where this one stopped. Returns
    /// `Poll::Ready` once every tick up to `target` is visited. A gap longer
    /// than a turn visits each bucket once. Fired entries stay allocated,
    /// idle, for their owners to reset. A `target` below the tick already
    /// reached is treated as that tick.
    pub fn poll_expired(
        &mut self,
        target: u64,
        budget: usize,
        out: &mut Vec<Expired<T>>,
    ) -> Poll<()> {
        let visit_list = self.visit_list();
        let mut left = budget;
        // One call begins at most `slots` ticks (a longer gap is skipped
        // to its last turn); more means the visit stopped advancing: a bug,
        // caught in tests (and mutation runs) rather than looping forever.
        let mut begun = 0;
        loop {
            let tick = match self.visiting {
                Some(tick) => tick,
                None if self.elapsed >= target => return Poll::Ready(()),
                None => {
                    begun += 1;
                    debug_assert!(
                        begun <= self.slots(),
                        "wheel stuck: {begun} ticks begun in one poll, elapsed {}, target {target}",
                        self.elapsed
                    );
                    self.begin_visit(target)
                }
            };
            let target = target.max(tick);
            while self.heads[visit_list] != NIL {
                if left == 0 {
                    return Poll::Pending;
                }
                left -= 1;
                let index = self.heads[visit_list];
                self.unlink(index);
                let entry = &mut self.entries[index as usize];
                if entry.deadline <= target {
                    entry.set_idle();
                    out.push(Expired {
                        key: EntryKey {
                            index,
                            generation: entry.generation,
                        },
                        seq: entry.seq,
                        deadline: entry.deadline,
                        value: entry.value,
                    });
                } else {
                    self.arm(index);
                }
            }
            self.visiting = None;
            self.elapsed = tick;
        }
    }

    /// Starts visiting the next tick: its bucket becomes the visit list.
    /// After a gap of more than a turn, skips to the last turn before
    /// `target`, which still covers every bucket once.
    fn begin_visit(&mut self, target: u64) -> u64 {
        let slots = self.slots() as u64;
        if target - self.elapsed > slots {
            self.elapsed = target - slots;
        }
        let tick = self.elapsed + 1;
        let bucket = (tick & self.mask) as usize;
        let visit_list = self.visit_list();
        let first = std::mem::replace(&mut self.heads[bucket], NIL);
        self.heads[visit_list] = first;
        if first != NIL {
            self.entries[first as usize].set_first_in(visit_list as u32);
        }
        self.visiting = Some(tick);
        tick
    }

    /// Files an idle entry: in the bucket of its deadline, or of the next
    /// tick if that is past, or on the visit list if it is due by the tick
    /// being visited.
    fn arm(&mut self, index: u32) {
        let deadline = self.entries[index as usize].deadline;
        let bucket = match self.visiting {
            Some(tick) if deadline <= tick => self.visit_list(),
            _ => (deadline.max(self.elapsed + 1) & self.mask) as usize,
        };
        let old_first = self.heads[bucket];
        if old_first != NIL {
            self.entries[old_first as usize].set_after(index);
        }
        let entry = &mut self.entries[index as usize];
        entry.set_first_in(bucket as u32);
        entry.next = old_first;
        self.heads[bucket] = index;
        self.armed += 1;
    }

    /// Takes an armed entry out of its bucket, leaving its own links stale.
    fn unlink(&mut self, index: u32) {
        let entry = &self.entries[index as usize];
        let next = entry.next;
        match entry.place() {
            Place::First { bucket } => {
                self.heads[bucket as usize] = next;
                if next != NIL {
                    self.entries[next as usize].set_first_in(bucket);
                }
            }
            Place::After { entry: prev } => {
                self.entries[prev as usize].next = next;
                if next != NIL {
                    self.entries[next as usize].set_after(prev);
                }
            }
            place => unreachable!("unlink of entry {index}, which is {place:?}"),
        }
        self.armed -= 1;
    }

    fn visit_list(&self) -> usize {
        self.heads.len() - 1
    }

    fn check(&self, key: EntryKey) -> Result<u32, StaleKey> {
        match self.entries.get(key.index as usize) {
            Some(entry) if entry.generation == key.generation && entry.place() != Place::Free => {
                Ok(key.index)
            }
            _ => Err(StaleKey),
        }
    }
}
