//! After warm-up, moving, cancelling and expiring entries allocates nothing.
//!
//! A counting global allocator counts allocations made by this thread, so
//! the test harness's own threads do not disturb the count.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use pushgate::wheel::{DEFAULT_BUDGET, Wheel};

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a const-initialised thread-local Cell, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn reset_cancel_and_poll_expired_allocate_nothing_after_warm_up() {
    const N: u64 = 50_000;
    let mut wheel = Wheel::with_capacity(4096, N as usize);
    let mut out = Vec::with_capacity(DEFAULT_BUDGET);
    let keys: Vec<_> = (0..N).map(|i| wheel.insert(600 + i % 600, i)).collect();
    let mut rng = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };

    let before = allocations();
    for now in 1..=2_000u64 {
        for _ in 0..100 {
            let key = keys[(next() % N) as usize];
            match next() % 10 {
                0 => {
                    wheel.cancel(key).expect("live");
                }
                1..=4 => {
                    wheel.reset(key, now + 1 + next() % 5).expect("live");
                }
                _ => {
                    wheel.reset(key, now + 600).expect("live");
                }
            }
        }
        while wheel
            .poll_expired(now, DEFAULT_BUDGET, &mut out)
            .is_pending()
        {
            out.clear();
        }
        for fired in out.drain(..) {
            wheel.reset(fired.key, now + 600).expect("live");
        }
    }
    assert_eq!(allocations() - before, 0, "steady state allocated");
    assert!(wheel.armed() > 0);
}
