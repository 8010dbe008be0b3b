//! Channels in the scenarios: the plan from the command line, the pushes
//! of a plan, the gateway's channel gauges, and `channel-fanout` (channel
//! pushes against broadcasts, in one run on one gateway).

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::counts::{report_counts, report_pushes};
use super::{Finished, Opened, cpu_between, launch, plan, progress, report_opened, sample, scrape};
use crate::channels::{ChannelPlan, Dest, Phase};
use crate::cli::{ChannelFanoutArgs, ChannelOpts, ChannelPushOpts, Common};
use crate::fleet::{Fleet, Group};
use crate::hist::{self, Hist};
use crate::pusher::{Job, Pusher, Record};
use crate::report::Report;
use crate::target::Target;
use crate::worker::protocol::{Kind, Outcome};

/// The plan of `opts` for a run of `connections` whose pushes are
/// `phases` (`None` without --channels).
pub(super) fn plan_of(
    opts: &ChannelOpts,
    connections: u64,
    phases: Vec<Phase>,
) -> Option<ChannelPlan> {
    (opts.channels > 0).then(|| ChannelPlan {
        prefix: opts.channel_prefix.clone(),
        exact: false,
        count: opts.channels,
        per_conn: opts.channels_per_conn.max(1),
        layout: opts.channel_layout,
        members: opts.channel_members.unwrap_or(connections).min(connections),
        phases,
    })
}

/// One phase of `messages` pushes from `seq` 1, spread as `push` says.
pub(super) fn one_phase(messages: u64, push: &ChannelPushOpts) -> Vec<Phase> {
    vec![Phase {
        first_seq: 1,
        count: messages,
        broadcast_every: push.broadcast_every,
        width: push.channels_per_push.max(1),
    }]
}

/// The pushes of `plan`'s schedule with `seq` in `seqs`.
pub(super) fn jobs(plan: &ChannelPlan, seqs: std::ops::RangeInclusive<u64>) -> Vec<Job> {
    seqs.filter_map(|seq| {
        Some(match plan.dest(seq)? {
            Dest::Broadcast => Job::broadcast(seq),
            dest => Job {
                seq,
                to: None,
                channels: Some(
                    plan.dest_channels(dest)
                        .into_iter()
                        .map(|j| plan.name(j))
                        .collect(),
                ),
            },
        })
    })
    .collect()
}

/// The layout's figures as report rows: channels, subscriptions.
pub(super) fn report_layout(report: &mut Report, plan: &ChannelPlan, connections: u64) {
    let subscriptions: u64 = (0..connections)
        .map(|g| plan.channels_of(g).len() as u64)
        .sum();
    report.metric("channels", "channels", plan.count, "");
    report.metric(
        "subscriptions",
        "channel subscriptions (connection, channel)",
        subscriptions,
        "",
    );
    report.detail("channel_layout", json!(plan));
}

/// The gateway's channel gauges now, summed over `urls` (empty when one
/// cannot be read).
pub(super) async fn read_gauges(urls: &[String]) -> Vec<(&'static str, f64)> {
    let mut out = Vec::new();
    if urls.is_empty() {
        return out;
    }
    for name in ["pushgate_channels", "pushgate_subscriptions"] {
        let mut sum = Some(0.0);
        for url in urls {
            let value = match scrape::page(url).await {
                Some(page) => scrape::series(&page, name),
                None => None,
            };
            sum = sum.zip(value).map(|(a, b)| a + b);
        }
        if let Some(v) = sum {
            out.push((name, v));
        }
    }
    out
}

/// Gauges read by [`read_gauges`] as report rows.
pub(super) fn report_gauges(report: &mut Report, gauges: &[(&'static str, f64)]) {
    for (name, value) in gauges {
        report.metric(
            &format!("gauge_{}", name.trim_start_matches("pushgate_")),
            &format!("server {name} (all connected)"),
            *value,
            "",
        );
    }
}

/// `channel-fanout`.
pub(super) async fn fanout(args: &ChannelFanoutArgs) -> anyhow::Result<Finished> {
    let c = &args.common;
    anyhow::ensure!(
        args.members >= 1 && args.members <= args.connections,
        "--members must be 1..=-n"
    );
    let m = args.messages.max(1);
    let channel = ChannelPlan {
        prefix: args.channel.clone(),
        exact: true,
        count: 1,
        per_conn: 1,
        layout: crate::channels::Layout::Ring,
        members: args.members,
        phases: vec![
            Phase {
                first_seq: 1,
                count: m,
                broadcast_every: 1,
                width: 1,
            },
            Phase {
                first_seq: m + 1,
                count: m,
                broadcast_every: 0,
                width: 1,
            },
        ],
    };
    let members = [Group {
        kind: Kind::Ws,
        count: args.members,
        urls: c.ws_url.clone(),
    }];
    let plan_a = crate::fleet::Plan {
        channels: Some(channel.clone()),
        ..plan(c, 2 * m, None, 0)
    };
    let (mut fleet_a, opened_a) = launch(c, &members, &plan_a).await?;
    let result = phases(args, &channel, &mut fleet_a, opened_a).await;
    fleet_a.exit().await;
    result
}

/// One phase's server and client CPU, and when it ran.
struct PhaseRun {
    records: Vec<Record>,
    push_secs: f64,
    cpu_us: Option<u64>,
    client_cpu_us: u64,
}

async fn phases(
    args: &ChannelFanoutArgs,
    channel: &ChannelPlan,
    fleet_a: &mut Fleet,
    opened_a: Opened,
) -> anyhow::Result<Finished> {
    let c = &args.common;
    let m = args.messages.max(1);
    let pusher = pusher_of(c, &args.push)?;
    let settle = Duration::from_secs(args.push.settle_secs);
    let gauges_a = gauges_now(c).await;

    // Phase A: broadcasts, only the members connected.
    let a = run_phase(
        &pusher,
        jobs(channel, 1..=m),
        args.rate,
        c,
        &mut [&mut *fleet_a],
        m,
        settle,
    )
    .await?;

    // The others open, in no channel.
    let others = args.connections - args.members;
    let mut fleet_b = None;
    let mut opened_b = None;
    if others > 0 {
        let plan_b = crate::fleet::Plan {
            channels: Some(channel.clone()),
            expect_from: m + 1,
            first_conn: args.members,
            ..plan(c, 2 * m, None, 0)
        };
        let group = [Group {
            kind: Kind::Ws,
            count: others,
            urls: c.ws_url.clone(),
        }];
        let (fleet, opened) = launch(c, &group, &plan_b).await?;
        fleet_b = Some(fleet);
        opened_b = Some(opened);
        tokio::time::sleep(Duration::from_secs(args.pause_secs)).await;
    }
    let gauges_b = gauges_now(c).await;

    // Phase B: pushes to the channel, everybody connected.
    let b = {
        let mut fleets: Vec<&mut Fleet> = vec![&mut *fleet_a];
        if let Some(f) = fleet_b.as_mut() {
            fleets.push(f);
        }
        run_phase(
            &pusher,
            jobs(channel, m + 1..=2 * m),
            args.rate,
            c,
            &mut fleets,
            2 * m,
            settle,
        )
        .await
    };
    let mut outcomes = Vec::new();
    let collected = match &b {
        Ok(_) => fleet_a.collect(settle).await,
        Err(_) => Ok(Vec::new()),
    };
    let collected_b = match (&b, fleet_b.as_mut()) {
        (Ok(_), Some(f)) => f.collect(settle).await,
        _ => Ok(Vec::new()),
    };
    if let Some(f) = fleet_b {
        f.exit().await;
    }
    let b = b?;
    outcomes.extend(collected?);
    let outcomes_b = collected_b?;
    let leaked: u64 = outcomes_b
        .iter()
        .map(|(_, o)| o.unexpected + o.delivered)
        .sum();
    outcomes.extend(outcomes_b);

    let mut problems = Vec::new();
    let mut report = Report::new(
        "channel-fanout",
        json!({
            "connections": args.connections, "members": args.members, "channel": args.channel,
            "messages_per_phase": m, "rate": args.rate, "url": c.ws_url,
        }),
    );
    let opened = merge_opened(opened_a, opened_b);
    report_opened(&mut report, &opened, args.connections, &mut problems);
    let mut records = a.records.clone();
    records.extend(b.records.iter().copied());
    report_pushes(
        &mut report,
        &records,
        a.push_secs + b.push_secs,
        None,
        &mut problems,
    );
    let expected = channel.expected(0..args.connections, 1) - others * m;
    report_counts(&mut report, &outcomes, expected, &mut problems);
    report.metric(
        "others_frames",
        "frames reaching connections outside the channel (must be 0)",
        leaked,
        "",
    );
    if leaked > 0 {
        problems.push(format!(
            "{leaked} frames reached connections outside the channel"
        ));
    }
    for (key, label, gauges) in [("a", "A", gauges_a), ("b", "B", gauges_b)] {
        if let Some((conns, subs)) = gauges {
            report.metric(
                &format!("gauge_connections_{key}"),
                &format!("phase {label}: server pushgate_connections"),
                conns,
                "",
            );
            report.metric(
                &format!("gauge_subscriptions_{key}"),
                &format!("phase {label}: server pushgate_subscriptions"),
                subs,
                "",
            );
        }
    }
    let mut per_delivery = Vec::new();
    for (key, label, run, seqs) in [
        ("a", "A (broadcast)", &a, 1..=m),
        ("b", "B (channel)", &b, m + 1..=2 * m),
    ] {
        let delivered: u64 = seqs
            .clone()
            .map(|s| {
                outcomes
                    .iter()
                    .filter_map(|(_, o)| o.per_seq.get(s as usize))
                    .map(|st| st.got)
                    .sum::<u64>()
            })
            .sum();
        let (to_first, to_last) = spread_range(&outcomes, &run.records, seqs);
        report.metric(
            &format!("delivered_{key}"),
            &format!("phase {label}: deliveries"),
            delivered,
            "",
        );
        report.histogram(
            &format!("time_to_last_{key}"),
            &format!("phase {label}: time to last recipient, per message"),
            &to_last,
        );
        report.histogram_row(
            &format!("time_to_first_{key}"),
            &format!("phase {label}: time to first recipient, per message"),
            &to_first,
        );
        if let Some(cpu) = run.cpu_us {
            let per = hist::round2(cpu as f64 / delivered.max(1) as f64);
            per_delivery.push(per);
            report.metric(
                &format!("server_cpu_ms_{key}"),
                &format!("phase {label}: server CPU"),
                hist::round2(cpu as f64 / 1000.0),
                "ms",
            );
            report.metric(
                &format!("cpu_per_delivery_us_{key}"),
                &format!("phase {label}: server CPU per delivery"),
                per,
                "µs",
            );
        }
        report.metric(
            &format!("client_cpu_per_delivery_us_{key}"),
            &format!("phase {label}: load client CPU per delivery"),
            hist::round2(run.client_cpu_us as f64 / delivered.max(1) as f64),
            "µs",
        );
    }
    if let [a_us, b_us] = per_delivery[..]
        && a_us > 0.0
    {
        report.metric(
            "cpu_per_delivery_ratio",
            "server CPU per delivery, B / A",
            hist::round2(b_us / a_us),
            "",
        );
    }
    Ok(Finished { report, problems })
}

/// The push side of a scenario.
pub(super) fn pusher_of(c: &Common, push: &crate::cli::PushOpts) -> anyhow::Result<Pusher> {
    Ok(Pusher {
        targets: c
            .push_url
            .iter()
            .map(|u| Target::parse(u))
            .collect::<anyhow::Result<_>>()?,
        api_key: c.api_key.clone(),
        body: c.push_body.clone(),
        conns: push.push_conns,
        payload_bytes: push.payload_bytes,
        max_idle_reuse: crate::pusher::MAX_IDLE_REUSE,
    })
}

/// Pushes `jobs` at `rate`, waits until every connection of `fleets` that
/// should have `last` has it, and reads the server's and the client's CPU
/// over that.
async fn run_phase(
    pusher: &Pusher,
    jobs: Vec<Job>,
    rate: f64,
    c: &Common,
    fleets: &mut [&mut Fleet],
    last: u64,
    settle: Duration,
) -> anyhow::Result<PhaseRun> {
    let before = sample(&c.pid);
    let client_before: u64 = fleets.iter().map(|f| f.cpu_us()).sum();
    let bar = progress(jobs.len() as u64, "pushing");
    let started = Instant::now();
    let records = pusher.run(jobs, rate, &bar).await?;
    let push_secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    for fleet in fleets.iter_mut() {
        fleet.wait_seq(last, settle).await?;
    }
    let after = sample(&c.pid);
    let client_after: u64 = fleets.iter().map(|f| f.cpu_us()).sum();
    Ok(PhaseRun {
        records,
        push_secs,
        cpu_us: cpu_between(before, after),
        client_cpu_us: client_after.saturating_sub(client_before),
    })
}

/// `pushgate_connections` (all transports) and `pushgate_subscriptions`
/// now, summed over the nodes (`None` without --metrics-url).
async fn gauges_now(c: &Common) -> Option<(f64, f64)> {
    if c.metrics_url.is_empty() {
        return None;
    }
    let mut conns = 0.0;
    let mut subs = 0.0;
    for url in &c.metrics_url {
        let page = scrape::page(url).await?;
        for l in page
            .lines()
            .filter(|l| l.starts_with("pushgate_connections{"))
        {
            conns += l
                .rsplit_once(' ')
                .and_then(|(_, v)| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
        subs += scrape::series(&page, "pushgate_subscriptions").unwrap_or(0.0);
    }
    Some((conns, subs))
}

/// Both openings as one.
fn merge_opened(a: Opened, b: Option<Opened>) -> Opened {
    let Some(b) = b else { return a };
    let mut handshake = a.handshake;
    let _ = handshake.add(&b.handshake);
    let mut errors = a.errors;
    errors.extend(
        b.errors
            .into_iter()
            .filter(|e| !errors.contains(e))
            .collect::<Vec<_>>(),
    );
    Opened {
        opened: a.opened + b.opened,
        failed: a.failed + b.failed,
        elapsed: a.elapsed + b.elapsed,
        handshake,
        listen_overflows: a
            .listen_overflows
            .zip(b.listen_overflows)
            .map(|(x, y)| x + y),
        errors,
    }
}

/// Per message with `seq` in `seqs`: push to first and to last recipient.
fn spread_range(
    outcomes: &[(Kind, Outcome)],
    records: &[Record],
    seqs: std::ops::RangeInclusive<u64>,
) -> (Hist, Hist) {
    let mut to_first = hist::new_hist();
    let mut to_last = hist::new_hist();
    for seq in seqs {
        let Some(sent) = records
            .iter()
            .filter(|r| r.seq == seq)
            .map(|r| r.sent_us)
            .min()
        else {
            continue;
        };
        let stats = outcomes
            .iter()
            .filter_map(|(_, o)| o.per_seq.get(seq as usize))
            .filter(|s| s.got > 0);
        let first = stats.clone().map(|s| s.first_us).min();
        let last = stats.map(|s| s.last_us).max();
        if let (Some(first), Some(last)) = (first, last) {
            hist::record(&mut to_first, first.saturating_sub(sent));
            hist::record(&mut to_last, last.saturating_sub(sent));
        }
    }
    (to_first, to_last)
}
