//! `idle`: hold N WebSockets and read what they cost the server.

use std::time::Duration;

use serde_json::json;

use super::{Finished, cpu_between, launch, mib, plan, report_opened, sample};
use crate::cli::IdleArgs;
use crate::fleet::Group;
use crate::hist;
use crate::report::Report;
use crate::worker::protocol::Kind;

/// Runs the idle scenario.
pub(super) async fn run(args: &IdleArgs) -> anyhow::Result<Finished> {
    let common = &args.common;
    let n = args.connections;
    let mut problems = Vec::new();
    let mut report = Report::new(
        "idle",
        json!({
            "connections": n,
            "hold_secs": args.hold_secs,
            "channels": args.channels.channels,
            "channels_per_conn": args.channels.channels_per_conn,
            "ws_url": common.ws_url,
            "pid": common.pid,
        }),
    );
    let before = sample(&common.pid);
    let groups = [Group {
        kind: Kind::Ws,
        count: n,
        urls: common.ws_url.clone(),
    }];
    let channels = super::channels::plan_of(&args.channels, n, Vec::new());
    let plan = crate::fleet::Plan {
        channels: channels.clone(),
        ..plan(common, 0, None, 0)
    };
    let (fleet, opened) = launch(common, &groups, &plan).await?;
    let all_open = sample(&common.pid);
    if let Some(channels) = &channels {
        super::channels::report_layout(&mut report, channels, n);
        let gauges = super::channels::read_gauges(&common.metrics_url).await;
        super::channels::report_gauges(&mut report, &gauges);
    }
    tokio::time::sleep(Duration::from_secs(args.hold_secs)).await;
    let held = sample(&common.pid);
    fleet.exit().await;
    tokio::time::sleep(Duration::from_secs(args.release_secs)).await;
    let released = sample(&common.pid);

    report_opened(&mut report, &opened, n, &mut problems);
    report.chart("handshake", &opened.handshake);
    report.detail("workers", n.div_ceil(common.per_worker));
    if let (Some(b), Some(h)) = (before, held) {
        let per = |after: u64, before: u64| {
            hist::round2((after as f64 - before as f64) / opened.opened.max(1) as f64)
        };
        report.metric(
            "server_rss_before_mib",
            "server RSS before",
            mib(b.rss_kib),
            "MiB",
        );
        report.metric(
            "server_rss_held_mib",
            "server RSS holding all",
            mib(h.rss_kib),
            "MiB",
        );
        report.metric(
            "server_pss_held_mib",
            "server PSS holding all",
            mib(h.pss_kib),
            "MiB",
        );
        report.metric(
            "rss_per_conn_kib",
            "server RSS per connection",
            per(h.rss_kib, b.rss_kib),
            "KiB",
        );
        report.metric(
            "pss_per_conn_kib",
            "server PSS per connection",
            per(h.pss_kib, b.pss_kib),
            "KiB",
        );
        report.detail("server_threads", h.threads);
        report.detail("server_processes", h.processes);
    }
    if let (Some(b), Some(a)) = (before, all_open)
        && let Some(cpu) = cpu_between(Some(b), Some(a))
    {
        report.metric(
            "cpu_per_open_us",
            "server CPU per connection opened",
            hist::round2(cpu as f64 / opened.opened.max(1) as f64),
            "µs",
        );
    }
    if let (Some(a), Some(h)) = (all_open, held) {
        let cpu = cpu_between(Some(a), Some(h)).unwrap_or(0) as f64;
        let secs = h.at.duration_since(a.at).as_secs_f64().max(0.001);
        report.metric(
            "idle_cpu_percent",
            "server CPU while holding",
            hist::round2(cpu / secs / 10_000.0),
            "% of a core",
        );
        report.metric(
            "idle_cpu_per_conn_us_per_sec",
            "server CPU per held connection",
            hist::round2(cpu / secs / opened.opened.max(1) as f64),
            "µs/s",
        );
    }
    if let Some(r) = released {
        report.metric(
            "server_rss_released_mib",
            "server RSS after closing",
            mib(r.rss_kib),
            "MiB",
        );
    }
    Ok(Finished { report, problems })
}
