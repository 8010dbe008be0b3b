//! The flaw that `shared/seeds/003` found in a FIFO of reusable timeouts,
//! reproduced next to the wheel doing the same job.
//!
//! Two users hold comet connections with a 9-tick timeout. Alice polls
//! again twice before hers expires, so her reused object's deadline moves
//! in place at the head of the queue. Bob's timeout sits behind it.

#[path = "../benches/support/seed_fifo.rs"]
mod seed_fifo;

use pushgate::wheel::Wheel;
use seed_fifo::SeedFifo;

const TIMEOUT: u64 = 9;
const ALICE: u64 = 0;
const BOB: u64 = 1;

/// (tick, user) events: first contact at 0 and 1, Alice comes back at 8 and 16.
const CONTACTS: &[(u64, u64)] = &[(0, ALICE), (1, BOB), (8, ALICE), (16, ALICE)];

/// The tick each user's timeout fired, driving `step` once per tick.
fn fire_ticks(
    mut contact: impl FnMut(u64, u64),
    mut step: impl FnMut(u64) -> Vec<u64>,
) -> [u64; 2] {
    let mut fired = [u64::MAX; 2];
    for tick in 0..=40 {
        for &(_, user) in CONTACTS.iter().filter(|(at, _)| *at == tick) {
            contact(tick, user);
        }
        for user in step(tick) {
            fired[user as usize] = fired[user as usize].min(tick);
        }
    }
    fired
}

#[test]
fn fifo_queue_delivers_a_moved_neighbours_timeout_far_too_late() {
    let fifo = std::cell::RefCell::new(SeedFifo::with_capacity(2));
    let fired = fire_ticks(
        |tick, user| {
            let mut fifo = fifo.borrow_mut();
            if tick == 0 || tick == 1 {
                assert_eq!(u64::from(fifo.insert(tick + TIMEOUT)), user);
            } else {
                fifo.reset(user as u32, tick + TIMEOUT);
            }
        },
        |tick| {
            let mut out = Vec::new();
            fifo.borrow_mut().poll_expired(tick, &mut out);
            out.into_iter().map(u64::from).collect()
        },
    );
    // Bob was due at 10 but waited behind Alice's moved deadline (25).
    assert_eq!(fired, [25, 25]);
    assert!(fired[BOB as usize] - (1 + TIMEOUT) >= 15);
}

#[test]
fn wheel_delivers_every_timeout_on_its_tick() {
    let wheel = std::cell::RefCell::new(Wheel::new(16));
    let keys = std::cell::RefCell::new(Vec::new());
    let fired = fire_ticks(
        |tick, user| {
            let mut wheel = wheel.borrow_mut();
            let mut keys = keys.borrow_mut();
            match keys.get(user as usize) {
                Some(&key) => {
                    wheel.reset(key, tick + TIMEOUT).expect("live entry");
                }
                None => keys.push(wheel.insert(tick + TIMEOUT, user)),
            }
        },
        |tick| {
            let mut out = Vec::new();
            while wheel
                .borrow_mut()
                .poll_expired(tick, 64, &mut out)
                .is_pending()
            {}
            out.into_iter().map(|e| e.value).collect()
        },
    );
    assert_eq!(fired, [16 + TIMEOUT, 1 + TIMEOUT]);
    assert_eq!(
        wheel.borrow().len(),
        2,
        "both objects reused, none reallocated"
    );
}
