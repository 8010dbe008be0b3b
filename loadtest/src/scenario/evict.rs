//! `evict`: N clients that never answer; when does the gateway close each
//! after its idle timeout?

use std::time::Duration;

use serde_json::json;

use super::{Finished, cpu_between, launch, mib, plan, report_opened, sample};
use crate::cli::EvictArgs;
use crate::fleet::Group;
use crate::hist;
use crate::report::Report;
use crate::worker::protocol::Kind;

/// Runs the eviction scenario.
pub(super) async fn run(args: &EvictArgs) -> anyhow::Result<Finished> {
    let common = &args.common;
    let n = args.connections;
    let idle_ms = args.idle_timeout_secs * 1000;
    let mut problems = Vec::new();
    let mut report = Report::new(
        "evict",
        json!({
            "connections": n,
            "idle_timeout_secs": args.idle_timeout_secs,
            "ws_url": common.ws_url,
        }),
    );
    let before = sample(&common.pid);
    let groups = [Group {
        kind: Kind::Silent,
        count: n,
        urls: common.ws_url.clone(),
    }];
    let (mut fleet, opened) = launch(common, &groups, &plan(common, 0, None, idle_ms)).await?;
    let all_open = sample(&common.pid);
    let wait = Duration::from_millis(idle_ms) + Duration::from_secs(args.margin_secs);
    let outcomes = fleet.collect(wait).await;
    let after = sample(&common.pid);
    fleet.exit().await;
    let outcomes = outcomes?;

    report_opened(&mut report, &opened, n, &mut problems);
    let mut close_late = hist::new_hist();
    let mut end_late = hist::new_hist();
    let (mut early, mut early_max, mut not_closed) = (0, 0.0f64, 0);
    let mut closes = std::collections::BTreeMap::<String, u64>::new();
    for (_, o) in &outcomes {
        hist::add_pairs(&mut close_late, &o.close_lateness);
        hist::add_pairs(&mut end_late, &o.end_lateness);
        early += o.early;
        early_max = early_max.max(o.early_max_ms);
        not_closed += o.not_closed;
        for (k, v) in &o.closes {
            *closes.entry(k.clone()).or_default() += v;
        }
    }
    let idle_frames = closes.get("idle").copied().unwrap_or(0);
    let code_4001 = closes.get("ws:4001").copied().unwrap_or(0);
    report.metric(
        "closed_idle_frame",
        "close frames with reason idle",
        idle_frames,
        "",
    );
    report.metric(
        "closed_4001",
        "WebSocket closes with code 4001",
        code_4001,
        "",
    );
    report.metric(
        "not_closed",
        "clients still open at the end",
        not_closed,
        "",
    );
    report.metric(
        "closed_early",
        "clients closed before their deadline",
        early,
        "",
    );
    report.histogram(
        "close_lateness",
        "close frame after idle deadline",
        &close_late,
    );
    report.histogram_row("end_lateness", "TCP end after idle deadline", &end_late);
    report.detail("closes", serde_json::to_value(&closes)?);
    if early > 0 {
        report.metric(
            "closed_early_max_ms",
            "earliest close before deadline",
            early_max,
            "ms",
        );
    }
    if let (Some(b), Some(o), Some(a)) = (before, all_open, after) {
        report.metric(
            "server_rss_before_mib",
            "server RSS before",
            mib(b.rss_kib),
            "MiB",
        );
        report.metric(
            "server_rss_open_mib",
            "server RSS with all open",
            mib(o.rss_kib),
            "MiB",
        );
        report.metric(
            "server_rss_after_mib",
            "server RSS after eviction",
            mib(a.rss_kib),
            "MiB",
        );
        let cpu = cpu_between(Some(o), Some(a)).unwrap_or(0);
        report.metric(
            "cpu_per_eviction_us",
            "server CPU per evicted client (pings included)",
            hist::round2(cpu as f64 / idle_frames.max(1) as f64),
            "µs",
        );
    }
    if idle_frames < opened.opened || code_4001 < opened.opened {
        problems.push(format!(
            "{} clients open, {idle_frames} idle close frames, {code_4001} closes with 4001",
            opened.opened
        ));
    }
    if not_closed > 0 || early > 0 {
        problems.push(format!(
            "{not_closed} clients never closed, {early} closed early"
        ));
    }
    Ok(Finished { report, problems })
}
