//! The driver on tokio's paused clock: never early, at most one tick late,
//! large jumps in one step, and bounded batches.

use std::sync::Arc;
use std::time::Duration;

use pushgate::wheel::{Fired, Timer, drive};
use tokio::sync::mpsc;
use tokio::time::{Instant, advance};

const TICK: Duration = Duration::from_millis(100);

/// Starts a driver whose sink forwards each expiry with the instant it fired.
fn start(
    timer: &Arc<Timer<u64>>,
    budget: usize,
) -> mpsc::UnboundedReceiver<(Fired<u64>, Instant, usize)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let sink = move |batch: &[Fired<u64>]| {
        let now = Instant::now();
        for fired in batch {
            let _ = tx.send((*fired, now, batch.len()));
        }
    };
    tokio::spawn(drive(
        Arc::clone(timer),
        sink,
        budget,
        std::future::pending(),
    ));
    rx
}

/// The next expiry the sink passed on, within an hour of the paused
/// clock: a driver that stopped firing fails the test instead of
/// advancing the clock for ever.
async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(Duration::from_secs(3600), rx.recv())
        .await
        .expect("an expiry within an hour")
        .expect("driver alive")
}

#[tokio::test(start_paused = true)]
async fn expiry_is_never_early_and_at_most_one_tick_late() {
    let timer = Arc::new(Timer::new(TICK, 64, 4));
    let mut fired = start(&timer, 64);
    let start = Instant::now();
    let offsets_ms = [1, 99, 100, 101, 250, 1_037, 6_399, 6_400, 9_999];
    for (i, ms) in offsets_ms.iter().enumerate() {
        timer.insert(i as u32 % 4, start + Duration::from_millis(*ms), i as u64);
    }
    for _ in offsets_ms {
        let (fired, at, _) = next(&mut fired).await;
        let deadline = start + Duration::from_millis(offsets_ms[fired.value as usize]);
        assert!(at >= deadline, "entry {} fired early", fired.value);
        assert!(
            at - deadline <= TICK,
            "entry {} late by {:?}",
            fired.value,
            at - deadline
        );
        assert!(fired.lateness <= TICK);
    }
}

#[tokio::test(start_paused = true)]
async fn ten_minute_jump_fires_everything_due_in_one_step() {
    let timer = Arc::new(Timer::new(TICK, 512, 8));
    let mut fired = start(&timer, 1024);
    let start = Instant::now();
    for i in 0..2_000u64 {
        // 0..20 minutes, one every 0.6 s: the first 1,000 are due by 10 min.
        let deadline = start + Duration::from_millis(600 * (i + 1));
        timer.insert((i % 8) as u32, deadline, i);
    }
    tokio::task::yield_now().await;
    advance(Duration::from_secs(600)).await;
    let mut seen = vec![false; 2_000];
    for _ in 0..1_000 {
        let (fired, at, _) = next(&mut fired).await;
        assert!(at >= start + Duration::from_millis(600 * (fired.value + 1)));
        assert!(!seen[fired.value as usize], "fired twice");
        seen[fired.value as usize] = true;
    }
    assert!(seen[..1_000].iter().all(|s| *s));
    tokio::task::yield_now().await;
    assert!(
        fired.try_recv().is_err(),
        "something due after 10 min fired"
    );
}

#[tokio::test(start_paused = true)]
async fn budget_of_one_drains_ten_thousand_due_entries() {
    let timer = Arc::new(Timer::new(TICK, 64, 1));
    let mut fired = start(&timer, 1);
    let deadline = Instant::now() + Duration::from_secs(1);
    for i in 0..10_000u64 {
        timer.insert(0, deadline, i);
    }
    let mut count = 0;
    while count < 10_000 {
        let (_, at, batch) = next(&mut fired).await;
        assert_eq!(batch, 1);
        assert!(at >= deadline);
        count += 1;
    }
    assert_eq!(timer.len(), 10_000, "fired entries stay allocated");
}

#[tokio::test(start_paused = true)]
async fn an_entry_re_armed_from_the_sink_fires_again_without_reallocating() {
    let timer = Arc::new(Timer::new(TICK, 64, 1));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let rearm = Arc::clone(&timer);
    let sink = move |batch: &[Fired<u64>]| {
        for fired in batch {
            let seq = rearm
                .reset(fired.key, Instant::now() + Duration::from_secs(1))
                .expect("live entry");
            let _ = tx.send((fired.key, seq));
        }
    };
    tokio::spawn(drive(Arc::clone(&timer), sink, 16, std::future::pending()));
    let key = timer.insert(0, Instant::now() + Duration::from_secs(1), 7);
    for round in 1..=5u32 {
        let (fired_key, seq) = next(&mut rx).await;
        assert_eq!(fired_key, key);
        assert_eq!(seq, round);
    }
    assert_eq!(timer.len(), 1);
}
