//! A running gateway folds its histograms' samples into their buckets
//! on its own, so a node nobody scrapes does not grow by every sample it
//! records (each timer expiry, each message through the fan-out).
//!
//! Alone in its process: it reads the process's resident memory.

mod support;

use std::time::Duration;

use support::Gateway;

/// Samples recorded per batch: about 16 MiB while the recorder holds
/// them (measured with metrics-exporter-prometheus 0.18).
const SAMPLES: usize = 1_000_000;

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

fn record_batch() {
    let histogram = metrics::histogram!("pushgate_test_upkeep_seconds");
    for _ in 0..SAMPLES {
        histogram.record(0.001);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histogram_samples_are_folded_without_a_scrape() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let gw = Gateway::default().await;
    let start = resident_bytes();
    record_batch();
    let held = resident_bytes().saturating_sub(start);
    // The gateway's upkeep runs every 5 s: after one, the first batch's
    // samples are folded and their memory serves the next batches.
    let mut grown = 0;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(6)).await;
        let before = resident_bytes();
        record_batch();
        grown += resident_bytes().saturating_sub(before);
    }
    assert!(
        held > 8 << 20,
        "a batch should take memory while held ({held} bytes): the test measures nothing"
    );
    assert!(
        grown < held,
        "three more batches grew the process by {grown} bytes; one held {held}"
    );
    gw.stop(Duration::from_secs(10)).await;
}
