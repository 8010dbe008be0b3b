//! The delivery scenarios (`fanout`, `sse-fanout`, `poll-fanout`,
//! `personal`, `churn`, `mixed`, `failover`, `storm`): subscribers open,
//! pushes flow, every arrival is counted and timed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::channels;
use super::counts::{merged, report_counts, report_pushes, spread};
use super::storm::{self, Storm};
use super::{Finished, cpu_between, launch, plan, progress, report_opened, sample, scrape};
use crate::channels::ChannelPlan;
use crate::cli::{
    ChurnArgs, Common, FailoverArgs, FanoutArgs, MixedArgs, PersonalArgs, PollFanoutArgs, PushOpts,
    StormArgs,
};
use crate::fleet::{Fleet, Group, Plan};
use crate::hist;
use crate::procstat;
use crate::pusher::{Job, Pusher, Record};
use crate::report::Report;
use crate::target::{self, Target};
use crate::worker::protocol::{Churn, Kind, Outcome};

/// The gauge that shows parked long-polls on pushgate's `/metrics`.
const PARKED_POLLS_GAUGE: &str = "pushgate_connections{transport=\"poll\"}";
/// Longest wait for that gauge.
const PARK_WAIT_MAX: Duration = Duration::from_secs(60);

/// One delivery run.
struct Delivery<'a> {
    scenario: &'static str,
    params: Value,
    common: &'a Common,
    push: &'a PushOpts,
    groups: Vec<Group>,
    expect: u64,
    churn: Option<Churn>,
    jobs: Vec<Job>,
    rate: f64,
    warmup: bool,
    park: Option<Duration>,
    failover: bool,
    /// Every client starts on the first node, and reconnects as
    /// `pushgate.js` does (the storm).
    storm: Option<Storm>,
    kill: Option<Kill>,
    /// Channels: who is in which, where each push goes (`jobs` are its
    /// schedule).
    channels: Option<ChannelPlan>,
}

impl<'a> Delivery<'a> {
    /// A run of `messages` broadcasts at `rate` to `groups`, each client
    /// expecting all of them: no churn, warm-up, parking, failover or kill
    /// (scenarios set those they need).
    fn broadcasts(
        scenario: &'static str,
        params: Value,
        common: &'a Common,
        push: &'a PushOpts,
        groups: Vec<Group>,
        messages: u64,
        rate: f64,
    ) -> Self {
        Self {
            scenario,
            params,
            common,
            push,
            groups,
            expect: messages,
            churn: None,
            jobs: broadcasts(messages),
            rate,
            warmup: false,
            park: None,
            failover: false,
            storm: None,
            kill: None,
            channels: None,
        }
    }

    /// With `plan` (if any): its pushes instead of broadcasts, and its
    /// channels on every connection.
    fn with_channels(self, plan: Option<ChannelPlan>) -> Self {
        match plan {
            Some(plan) => Self {
                jobs: channels::jobs(&plan, 1..=self.expect),
                channels: Some(plan),
                ..self
            },
            None => self,
        }
    }
}

/// A process to signal (SIGKILL, or SIGTERM for a drain) while pushing.
#[derive(Debug, Clone, Copy)]
struct Kill {
    pid: u32,
    /// `KILL` or `TERM`.
    signal: &'static str,
    /// After the first push.
    after: Duration,
}

/// `fanout` (WebSocket) and `sse-fanout`.
pub(super) async fn fanout(args: &FanoutArgs, sse: bool) -> anyhow::Result<Finished> {
    let c = &args.common;
    let (kind, url) = if sse {
        (Kind::Sse, &c.sse_url)
    } else {
        (Kind::Ws, &c.ws_url)
    };
    let plan = channels::plan_of(
        &args.channels,
        args.connections,
        channels::one_phase(args.messages, &args.channel_push),
    );
    execute(
        Delivery::broadcasts(
            if sse { "sse-fanout" } else { "fanout" },
            json!({
                "connections": args.connections, "messages": args.messages, "rate": args.rate,
                "payload_bytes": args.push.payload_bytes, "url": url,
                "channels": args.channels.channels,
                "broadcast_every": args.channel_push.broadcast_every,
                "channels_per_push": args.channel_push.channels_per_push,
            }),
            c,
            &args.push,
            only(kind, args.connections, url),
            args.messages,
            args.rate,
        )
        .with_channels(plan),
    )
    .await
}

/// `poll-fanout`.
pub(super) async fn poll_fanout(args: &PollFanoutArgs) -> anyhow::Result<Finished> {
    let c = &args.common;
    execute(Delivery {
        park: Some(Duration::from_secs(args.park_secs)),
        ..Delivery::broadcasts(
            "poll-fanout",
            json!({
                "connections": args.connections, "messages": args.messages, "rate": args.rate,
                "payload_bytes": args.push.payload_bytes, "url": c.poll_url,
            }),
            c,
            &args.push,
            only(Kind::Poll, args.connections, &c.poll_url),
            args.messages,
            args.rate,
        )
    })
    .await
}

/// `personal`.
pub(super) async fn personal(args: &PersonalArgs) -> anyhow::Result<Finished> {
    let c = &args.common;
    let batch = args.batch.max(1);
    let mut jobs = Vec::new();
    for round in 1..=args.messages {
        let mut first = 0;
        while first < args.connections {
            let last = (first + batch).min(args.connections);
            let to = (first..last)
                .map(|u| target::user_id(&c.user_prefix, u))
                .collect();
            jobs.push(Job {
                seq: round,
                to: Some(to),
                channels: None,
            });
            first = last;
        }
    }
    let params = json!({
        "connections": args.connections, "rounds": args.messages, "batch": batch,
        "rate": args.rate, "pushes": jobs.len(), "url": c.ws_url,
    });
    execute(Delivery {
        jobs,
        ..Delivery::broadcasts(
            "personal",
            params,
            c,
            &args.push,
            only(Kind::Ws, args.connections, &c.ws_url),
            args.messages,
            args.rate,
        )
    })
    .await
}

/// `churn`.
pub(super) async fn churn(args: &ChurnArgs) -> anyhow::Result<Finished> {
    let c = &args.common;
    let plan = channels::plan_of(
        &args.channels,
        args.connections,
        channels::one_phase(args.messages, &args.channel_push),
    );
    execute(Delivery {
        churn: Some(Churn {
            min_ms: args.reconnect_min_ms,
            max_ms: args.reconnect_max_ms,
        }),
        warmup: true,
        ..Delivery::broadcasts(
            "churn",
            json!({
                "connections": args.connections, "messages": args.messages, "rate": args.rate,
                "reconnect_min_ms": args.reconnect_min_ms,
                "reconnect_max_ms": args.reconnect_max_ms, "url": c.ws_url,
                "channels": args.channels.channels,
                "broadcast_every": args.channel_push.broadcast_every,
                "channels_per_push": args.channel_push.channels_per_push,
            }),
            c,
            &args.push,
            only(Kind::Ws, args.connections, &c.ws_url),
            args.messages,
            args.rate,
        )
        .with_channels(plan)
    })
    .await
}

/// `mixed`.
pub(super) async fn mixed(args: &MixedArgs) -> anyhow::Result<Finished> {
    let c = &args.common;
    let groups = transports(c, args.ws, args.sse, args.poll);
    execute(Delivery {
        park: (args.poll > 0).then(|| Duration::from_secs(2)),
        ..Delivery::broadcasts(
            "mixed",
            json!({
                "ws": args.ws, "sse": args.sse, "poll": args.poll,
                "messages": args.messages, "rate": args.rate,
            }),
            c,
            &args.push,
            groups,
            args.messages,
            args.rate,
        )
    })
    .await
}

/// `failover`.
pub(super) async fn failover(args: &FailoverArgs) -> anyhow::Result<Finished> {
    let c = &args.common;
    let groups = transports(c, args.ws, args.sse, args.poll);
    anyhow::ensure!(!groups.is_empty(), "no subscribers (--ws, --sse, --poll)");
    execute(Delivery {
        warmup: true,
        park: (args.poll > 0).then(|| Duration::from_secs(2)),
        failover: true,
        kill: args.kill_pid.map(|pid| Kill {
            pid,
            signal: "KILL",
            after: Duration::from_secs_f64(args.kill_after_secs.max(0.0)),
        }),
        ..Delivery::broadcasts(
            "failover",
            json!({
                "ws": args.ws, "sse": args.sse, "poll": args.poll,
                "messages": args.messages, "rate": args.rate,
                "nodes": c.ws_url.len().max(c.sse_url.len()).max(c.poll_url.len()),
                "push_urls": c.push_url, "kill_pid": args.kill_pid,
                "kill_after_secs": args.kill_after_secs,
            }),
            c,
            &args.push,
            groups,
            args.messages,
            args.rate,
        )
    })
    .await
}

/// `storm`.
pub(super) async fn storm(args: &StormArgs) -> anyhow::Result<Finished> {
    let c = &args.common;
    anyhow::ensure!(
        c.ws_url.len() == 2,
        "--ws-url: give node A's and node B's templates, comma-separated"
    );
    anyhow::ensure!(
        c.metrics_url.len() == 1,
        "--metrics-url: give node B's /metrics (one URL)"
    );
    execute(Delivery {
        warmup: true,
        failover: true,
        storm: Some(Storm {
            kill: args.kill,
            spread_secs: args.spread_secs,
            tick_ms: args.tick_ms,
            chart: args.chart.clone(),
        }),
        kill: Some(Kill {
            pid: args.node_pid,
            signal: if args.kill { "KILL" } else { "TERM" },
            after: Duration::from_secs_f64(args.storm_after_secs.max(0.0)),
        }),
        ..Delivery::broadcasts(
            "storm",
            json!({
                "connections": args.connections, "messages": args.messages, "rate": args.rate,
                "signal": if args.kill { "SIGKILL" } else { "SIGTERM" },
                "storm_after_secs": args.storm_after_secs, "spread_secs": args.spread_secs,
                "tick_ms": args.tick_ms, "ws_url": c.ws_url, "push_url": c.push_url,
            }),
            c,
            &args.push,
            only(Kind::Ws, args.connections, &c.ws_url),
            args.messages,
            args.rate,
        )
    })
    .await
}

/// One group per transport with clients, in the order WebSocket, SSE,
/// long-poll (user numbers run on across them).
fn transports(c: &Common, ws: u64, sse: u64, poll: u64) -> Vec<Group> {
    [
        (Kind::Ws, ws, &c.ws_url),
        (Kind::Sse, sse, &c.sse_url),
        (Kind::Poll, poll, &c.poll_url),
    ]
    .into_iter()
    .filter(|(_, count, _)| *count > 0)
    .map(|(kind, count, urls)| Group {
        kind,
        count,
        urls: urls.clone(),
    })
    .collect()
}

/// One group of `count` clients of `kind` on `urls`.
fn only(kind: Kind, count: u64, urls: &[String]) -> Vec<Group> {
    vec![Group {
        kind,
        count,
        urls: urls.to_vec(),
    }]
}

fn broadcasts(m: u64) -> Vec<Job> {
    (1..=m).map(Job::broadcast).collect()
}

/// What the pushing phase produced.
struct Pushed {
    client_cpu_us: u64,
    warm_got: Option<u64>,
    records: Vec<Record>,
    outcomes: Vec<(Kind, Outcome)>,
    cpu_us: Option<u64>,
    /// Context switches of the server's threads over the same window.
    switches: Option<u64>,
    /// Server CPU per `--pid` (a node of a cluster), µs.
    cpu_us_per_pid: Vec<Option<u64>>,
    /// CPU per `--broker-pid` over the same window, µs.
    broker_cpu_us_per_pid: Vec<Option<u64>>,
    /// The server's threads over the same window, summed by name over
    /// every `--pid`.
    threads: BTreeMap<String, procstat::ThreadTimes>,
    push_secs: f64,
    killed: Option<Killed>,
    /// The storm's readings of node B's `/metrics`.
    samples: Vec<storm::Sample>,
}

/// How the kill went.
#[derive(Debug, Clone)]
struct Killed {
    /// After the first push, s.
    at_secs: f64,
    /// `kill -KILL` succeeded.
    ok: bool,
}

async fn execute(d: Delivery<'_>) -> anyhow::Result<Finished> {
    let common = d.common;
    let total: u64 = d.groups.iter().map(|g| g.count).sum();
    let plan = Plan {
        failover: d.failover,
        one_home: d.storm.is_some(),
        paced: d.storm.is_some(),
        channels: d.channels.clone(),
        ..plan(common, d.expect, d.churn, 0)
    };
    let (mut fleet, opened) = launch(common, &d.groups, &plan).await?;
    let pushed = push_and_collect(&d, &mut fleet).await;
    let gauges = match &d.channels {
        Some(_) => channels::read_gauges(&common.metrics_url).await,
        None => Vec::new(),
    };
    fleet.exit().await;
    let pushed = pushed?;

    let mut problems = Vec::new();
    let mut report = Report::new(d.scenario, d.params.clone());
    report_opened(&mut report, &opened, total, &mut problems);
    report_pushes(
        &mut report,
        &pushed.records,
        pushed.push_secs,
        pushed.warm_got,
        &mut problems,
    );
    if let (Some(kill), Some(killed)) = (d.kill, &pushed.killed) {
        report.metric(
            "killed_pid",
            &format!("node signalled (SIG{}), pid", kill.signal),
            kill.pid,
            "",
        );
        report.metric(
            "killed_at_secs",
            "signalled after the first push",
            hist::round2(killed.at_secs),
            "s",
        );
        if !killed.ok {
            problems.push(format!("kill -{} {} failed", kill.signal, kill.pid));
        }
    } else if let Some(kill) = d.kill {
        problems.push(format!(
            "pid {} was never signalled (pushing ended first)",
            kill.pid
        ));
    }
    if let Some(channels) = &d.channels {
        channels::report_layout(&mut report, channels, total);
        channels::report_gauges(&mut report, &gauges);
    }
    let expected = match &d.channels {
        Some(channels) => channels.expected(0..total, 1),
        None => opened.opened * d.expect,
    };
    let delivered = report_counts(&mut report, &pushed.outcomes, expected, &mut problems);
    report.histogram(
        "latency",
        "delivery latency (push to frame)",
        &merged(&pushed.outcomes, None),
    );
    let (to_first, to_last) = spread(&pushed.outcomes, &pushed.records, d.expect);
    report.histogram(
        "time_to_last",
        "time to last recipient, per message",
        &to_last,
    );
    report.histogram_row(
        "time_to_first",
        "time to first recipient, per message",
        &to_first,
    );
    if let Some(storm) = &d.storm {
        storm::report(
            &mut report,
            storm,
            &pushed.samples,
            pushed.killed.as_ref().map(|k| k.at_secs),
            &pushed.outcomes,
            opened.opened,
            &mut problems,
        );
    }
    let kinds: Vec<Kind> = d.groups.iter().map(|g| g.kind).collect();
    if kinds.len() > 1 {
        for kind in kinds {
            let label = format!("{} latency", kind.as_str());
            report.histogram(
                &format!("latency_{}", kind.as_str()),
                &label,
                &merged(&pushed.outcomes, Some(kind)),
            );
            let lost: u64 = pushed
                .outcomes
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, o)| o.lost)
                .sum();
            report.metric(
                &format!("lost_{}", kind.as_str()),
                &format!("{} lost", kind.as_str()),
                lost,
                "",
            );
            let duplicates: u64 = pushed
                .outcomes
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, o)| o.duplicates)
                .sum();
            report.metric(
                &format!("duplicates_{}", kind.as_str()),
                &format!("{} duplicated", kind.as_str()),
                duplicates,
                "",
            );
        }
    }
    if pushed.cpu_us_per_pid.len() > 1 {
        let per_node: Vec<Option<f64>> = pushed
            .cpu_us_per_pid
            .iter()
            .map(|c| c.map(|us| hist::round2(us as f64 / 1000.0)))
            .collect();
        report.detail("server_cpu_ms_per_pid", json!(per_node));
    }
    if !pushed.threads.is_empty() {
        let ms = |ns: u64| hist::round2(ns as f64 / 1e6);
        let by_name: serde_json::Map<String, serde_json::Value> = pushed
            .threads
            .iter()
            .map(|(name, t)| {
                let times = json!({
                    "cpu_ms": ms(t.run_ns),
                    "system_ms": ms(t.system_us * 1000),
                    "runqueue_wait_ms": ms(t.wait_ns),
                    "slices": t.slices,
                });
                (name.clone(), times)
            })
            .collect();
        report.detail("server_threads", serde_json::Value::Object(by_name));
    }
    if !pushed.broker_cpu_us_per_pid.is_empty() {
        let per_pid: Vec<Option<f64>> = pushed
            .broker_cpu_us_per_pid
            .iter()
            .map(|c| c.map(|us| hist::round2(us as f64 / 1000.0)))
            .collect();
        report.detail("broker_cpu_ms_per_pid", json!(per_pid));
    }
    if let Some(cpu) = pushed.cpu_us {
        report.metric(
            "server_cpu_ms",
            "server CPU while pushing",
            hist::round2(cpu as f64 / 1000.0),
            "ms",
        );
        report.metric(
            "cpu_per_delivery_us",
            "server CPU per delivery",
            hist::round2(cpu as f64 / delivered.max(1) as f64),
            "µs",
        );
    }
    if let Some(switches) = pushed.switches {
        report.metric(
            "server_context_switches",
            "server context switches while pushing",
            switches,
            "",
        );
        report.metric(
            "context_switches_per_delivery",
            "server context switches per delivery",
            hist::round2(switches as f64 / delivered.max(1) as f64),
            "",
        );
    }
    report.metric(
        "client_cpu_per_delivery_us",
        "load client CPU per delivery (its workers)",
        hist::round2(pushed.client_cpu_us as f64 / delivered.max(1) as f64),
        "µs",
    );
    Ok(Finished { report, problems })
}

async fn push_and_collect(d: &Delivery<'_>, fleet: &mut Fleet) -> anyhow::Result<Pushed> {
    let common = d.common;
    if let (false, Some(metric)) = (common.metrics_url.is_empty(), &common.ready_metric) {
        let clients = d.groups.iter().map(|g| g.count).sum();
        wait_gauge(&common.metrics_url, metric, clients, PARK_WAIT_MAX).await;
    } else if let Some(park) = d.park {
        let polls = d
            .groups
            .iter()
            .filter(|g| g.kind == Kind::Poll)
            .map(|g| g.count)
            .sum();
        wait_parked(common, polls, park).await;
    }
    let pusher = Pusher {
        targets: common
            .push_url
            .iter()
            .map(|u| Target::parse(u))
            .collect::<anyhow::Result<_>>()?,
        api_key: common.api_key.clone(),
        body: common.push_body.clone(),
        conns: d.push.push_conns,
        payload_bytes: d.push.payload_bytes,
        max_idle_reuse: crate::pusher::MAX_IDLE_REUSE,
    };
    let settle = Duration::from_secs(d.push.settle_secs);
    let warm_got = if d.warmup {
        let bar = progress(1, "warm-up");
        pusher.run(vec![Job::broadcast(0)], 0.0, &bar).await?;
        bar.finish_and_clear();
        Some(fleet.wait_seq(0, settle).await?)
    } else {
        None
    };
    if let Some(command) = &common.broker_exec_before {
        broker_exec(command).await?;
    }
    let broker_before: Vec<_> = common.broker_pid.iter().map(|p| sample(&[*p])).collect();
    let before = sample(&common.pid);
    let before_each: Vec<_> = common.pid.iter().map(|p| sample(&[*p])).collect();
    let threads_before = procstat::threads_by_name(&common.pid);
    let client_before = fleet.cpu_us();
    let bar = progress(d.jobs.len() as u64, "pushing");
    let push_started = Instant::now();
    let killer = d
        .kill
        .map(|kill| tokio::spawn(kill_later(kill, push_started)));
    let (stop_sampling, sampling) = tokio::sync::oneshot::channel();
    let sampler = match (&d.storm, common.metrics_url.first()) {
        (Some(_), Some(url)) => Some(tokio::spawn(sample_metrics(
            url.clone(),
            push_started,
            sampling,
        ))),
        _ => None,
    };
    let records = pusher.run(d.jobs.clone(), d.rate, &bar).await;
    let push_secs = push_started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let killed = match killer {
        Some(task) if task.is_finished() => task.await.ok(),
        Some(task) => {
            task.abort();
            None
        }
        None => None,
    };
    let records = records?;
    let outcomes = fleet.collect(settle).await?;
    let _ = stop_sampling.send(());
    let samples = match sampler {
        Some(task) => task.await.unwrap_or_default(),
        None => Vec::new(),
    };
    let after = sample(&common.pid);
    let threads = procstat::threads_by_name(&common.pid)
        .into_iter()
        .map(|(name, now)| {
            let before = threads_before.get(&name).copied().unwrap_or_default();
            (name, now.since(before))
        })
        .collect();
    let cpu_us_per_pid = common
        .pid
        .iter()
        .zip(before_each)
        .map(|(p, b)| cpu_between(b, sample(&[*p])))
        .collect();
    let broker_cpu_us_per_pid = common
        .broker_pid
        .iter()
        .zip(broker_before)
        .map(|(p, b)| cpu_between(b, sample(&[*p])))
        .collect();
    if let Some(command) = &common.broker_exec_after {
        broker_exec(command).await?;
    }
    let client_cpu_us = fleet.cpu_us().saturating_sub(client_before);
    Ok(Pushed {
        client_cpu_us,
        warm_got,
        records,
        outcomes,
        cpu_us: cpu_between(before, after),
        switches: before
            .zip(after)
            .map(|(b, a)| a.switches.saturating_sub(b.switches)),
        cpu_us_per_pid,
        broker_cpu_us_per_pid,
        threads,
        push_secs,
        killed,
        samples,
    })
}

/// Runs `command` with `sh -c` (`--broker-exec-before`, `--broker-exec-after`).
async fn broker_exec(command: &str) -> anyhow::Result<()> {
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .status()
        .await?;
    anyhow::ensure!(status.success(), "`{command}` exited with {status}");
    Ok(())
}

/// Reads `url` (node B's `/metrics`) every [`storm::SAMPLE_EVERY`] from
/// `started` until `stop`.
async fn sample_metrics(
    url: String,
    started: Instant,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Vec<storm::Sample> {
    let mut samples = Vec::new();
    let mut every = tokio::time::interval(storm::SAMPLE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = &mut stop => return samples,
            _ = every.tick() => {
                if let Some(text) = scrape::page(&url).await {
                    samples.push(storm::Sample::parse(&text, started.elapsed().as_secs_f64()));
                }
            }
        }
    }
}

/// Sends `kill.signal` to `kill.pid` at `kill.after` past `started`.
async fn kill_later(kill: Kill, started: Instant) -> Killed {
    tokio::time::sleep_until(started + kill.after).await;
    let at_secs = started.elapsed().as_secs_f64();
    let status = tokio::process::Command::new("kill")
        .args([&format!("-{}", kill.signal), &kill.pid.to_string()])
        .status()
        .await;
    let ok = matches!(status, Ok(s) if s.success());
    eprintln!(
        "loadtest: sent SIG{} to pid {} after {at_secs:.2} s ({})",
        kill.signal,
        kill.pid,
        if ok { "ok" } else { "failed" }
    );
    Killed { at_secs, ok }
}

/// Waits for long-polls to park: until pushgate's gauge shows them (with
/// `--metrics-url`), else for `park`.
async fn wait_parked(common: &Common, polls: u64, park: Duration) {
    if common.metrics_url.is_empty() {
        tokio::time::sleep(park).await;
        return;
    }
    wait_gauge(
        &common.metrics_url,
        PARKED_POLLS_GAUGE,
        polls,
        PARK_WAIT_MAX.max(park),
    )
    .await;
}

/// Waits until series `name`, summed over `urls` (the nodes), reaches
/// `count`, at most `bound`.
async fn wait_gauge(urls: &[String], name: &str, count: u64, bound: Duration) {
    let until = Instant::now() + bound;
    let mut last = None;
    while Instant::now() < until {
        last = Some(0.0);
        for url in urls {
            last = last.zip(gauge(url, name).await).map(|(a, b)| a + b);
        }
        if last.is_some_and(|v| v >= count as f64) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("loadtest: warning: {name} never reached {count} (last read: {last:?})");
}

/// The value of series `name` on a Prometheus text page.
async fn gauge(url: &str, name: &str) -> Option<f64> {
    scrape::series(&scrape::page(url).await?, name)
}
