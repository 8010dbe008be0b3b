//! Timeouts: a hashed timing wheel whose entries are reused, and the task
//! that drives it.
//!
//! Every per-connection and per-session deadline in pushgate (a parked
//! poll, a session's expiry, a WebSocket's next ping, an idle eviction)
//! is one entry here. An owner inserts its entry once and then moves it
//! with [`Timer::reset`] for the rest of its life: O(1), no allocation.
//! A FIFO queue of timeouts cannot do that, because a moved deadline
//! leaves the queue out of order and expiry blocks behind its head
//! (`tests/wheel_fifo_flaw.rs` shows it).
//!
//! [`Wheel`] is the pure data structure (integer ticks, no clock); the
//! driver module is the only code that reads a clock.

mod driver;
mod entry;
mod hashed;

pub use driver::{Clock, DEFAULT_BUDGET, ExpirySink, Fired, Scratch, Timer, TimerKey, drive};
pub use hashed::{EntryKey, Expired, StaleKey, Wheel};

#[cfg(test)]
mod tests;
