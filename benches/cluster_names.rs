//! What naming a personal push's streams costs on a Redis Cluster: for each
//! user of a push, its history key and its sharded pub/sub channel (what
//! `bus::cluster` builds for the publish script), through the public
//! [`pushgate::ClusterLayout`] with the default 6 shards.
//!
//! Run with `cargo bench --bench cluster_names` (100 users a push, 20,000
//! pushes, 9 runs: a few seconds). Without `--bench` (as `cargo test
//! --benches` runs it) it does one small pass. It prints the median time
//! and the allocations per user (exact: the counting allocator, one
//! thread).

#[path = "support/counting_alloc.rs"]
#[allow(dead_code)] // its live-bytes count is the wheel bench's
mod counting_alloc;

use std::hint::black_box;
use std::time::Instant;

#[global_allocator]
static ALLOC: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// Users a push names, as in `loadtest/cluster.sh`'s personal steps.
const USERS: usize = 100;

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (pushes, runs) = if full { (20_000, 9) } else { (100, 1) };
    let layout = pushgate::ClusterLayout::new("pushgate", 6);
    let users: Vec<String> = (0..USERS).map(|n| format!("user-{n}")).collect();
    let mut per_user_ns = Vec::with_capacity(runs);
    let mut per_user_allocs = 0.0;
    for _ in 0..runs {
        let allocs_before = counting_alloc::allocations();
        let started = Instant::now();
        for _ in 0..pushes {
            for user in &users {
                black_box(layout.user_history(black_box(user)));
                black_box(layout.user_channel(black_box(user)));
            }
        }
        let named = (pushes * USERS) as f64;
        per_user_ns.push(started.elapsed().as_nanos() as f64 / named);
        per_user_allocs = (counting_alloc::allocations() - allocs_before) as f64 / named;
    }
    per_user_ns.sort_by(f64::total_cmp);
    let median = per_user_ns[per_user_ns.len() / 2];
    println!(
        "| users named | ns per user (history key + channel), median of {runs} | allocations per user |"
    );
    println!("| ---: | ---: | ---: |");
    println!(
        "| {} | {median:.0} | {per_user_allocs:.1} |",
        pushes * USERS
    );
}
