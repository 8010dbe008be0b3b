//! A global allocator that counts, so the bench can report bytes per entry
//! and allocations in steady state.
//!
//! Implementing `GlobalAlloc` is the one `unsafe` thing the bench does; the
//! lint is allowed for this module only. Every method forwards to
//! [`System`] with the caller's own arguments and only adds bookkeeping on
//! two relaxed atomics (the bench is single-threaded, so the counts are
//! exact).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes currently allocated (requested sizes, not the allocator's rounding).
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Calls that obtained memory: `alloc`, `alloc_zeroed` and `realloc`.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// [`System`], counting live bytes and allocation calls.
pub(crate) struct CountingAlloc;

/// Bytes currently allocated by the whole process.
pub(crate) fn live_bytes() -> usize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Allocation calls (including reallocations) since the process started.
pub(crate) fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

fn record_alloc(bytes: usize) {
    LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed);
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
}

// SAFETY: every method calls the matching `System` method with exactly the
// arguments it was given, so `System` upholds the `GlobalAlloc` contract;
// the counters never touch the memory.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: our caller upholds `alloc`'s contract for `layout`.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            record_alloc(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            record_alloc(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: our caller passes a block this allocator (that is,
        // `System`) handed out, with the layout it was allocated with.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, plus our caller's guarantee on `new_size`.
        let new_ptr = unsafe { System.realloc(ptr, layout, new_size) };
        if !new_ptr.is_null() {
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
            record_alloc(new_size);
        }
        new_ptr
    }
}
