//! The timeout queue from `shared/seeds/003`, kept as a baseline: one FIFO
//! of reusable connection objects, checked only at its head.
//!
//! A user who comes back within the interval reuses its object, so its
//! deadline moves in place while its queue position stays. The queue is
//! then out of order, and every deadline behind a moved head waits for it.

use std::collections::VecDeque;

/// The seed's FIFO of timeouts, with reusable objects.
#[derive(Debug, Default)]
pub(crate) struct SeedFifo {
    deadlines: Vec<u64>,
    queued: Vec<bool>,
    queue: VecDeque<u32>,
}

impl SeedFifo {
    /// An empty queue with room for `capacity` objects.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            deadlines: Vec::with_capacity(capacity),
            queued: Vec::with_capacity(capacity),
            queue: VecDeque::with_capacity(capacity),
        }
    }

    /// A new object due at `deadline`, appended at the tail.
    pub(crate) fn insert(&mut self, deadline: u64) -> u32 {
        let id = self.deadlines.len() as u32;
        self.deadlines.push(deadline);
        self.queued.push(true);
        self.queue.push_back(id);
        id
    }

    /// Reuses an object with a new deadline: moved in place if it is still
    /// queued (the seed's flaw), appended if it had expired.
    pub(crate) fn reset(&mut self, id: u32, deadline: u64) {
        self.deadlines[id as usize] = deadline;
        if !self.queued[id as usize] {
            self.queued[id as usize] = true;
            self.queue.push_back(id);
        }
    }

    /// Pops expired objects from the head while the head is due.
    pub(crate) fn poll_expired(&mut self, now: u64, out: &mut Vec<u32>) {
        while let Some(&head) = self.queue.front() {
            if self.deadlines[head as usize] > now {
                break;
            }
            self.queue.pop_front();
            self.queued[head as usize] = false;
            out.push(head);
        }
    }
}
