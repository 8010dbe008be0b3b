//! The delivery scenarios (`fanout`, `sse-fanout`, `poll-fanout`,
//! `personal`, `churn`, `mixed`): subscribers open, pushes flow, every
//! arrival is counted and timed.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::counts::{merged, report_counts, report_pushes, spread};
use super::{Finished, cpu_between, launch, plan, progress, report_opened, sample};
use crate::cli::{
    ChurnArgs, Common, FanoutArgs, MixedArgs, PersonalArgs, PollFanoutArgs, PushOpts,
};
use crate::fleet::{Fleet, Group};
use crate::hist;
use crate::http::{self, HttpConn};
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
}

/// `fanout` (WebSocket) and `sse-fanout`.
pub async fn fanout(args: &FanoutArgs, sse: bool) -> anyhow::Result<Finished> {
    let c = &args.common;
    let (kind, url) = if sse {
        (Kind::Sse, &c.sse_url)
    } else {
        (Kind::Ws, &c.ws_url)
    };
    execute(Delivery {
        scenario: if sse { "sse-fanout" } else { "fanout" },
        params: json!({
            "connections": args.connections, "messages": args.messages, "rate": args.rate,
            "payload_bytes": args.push.payload_bytes, "url": url,
        }),
        common: c,
        push: &args.push,
        groups: vec![Group {
            kind,
            count: args.connections,
            url: url.clone(),
        }],
        expect: args.messages,
        churn: None,
        jobs: broadcasts(args.messages),
        rate: args.rate,
        warmup: false,
        park: None,
    })
    .await
}

/// `poll-fanout`.
pub async fn poll_fanout(args: &PollFanoutArgs) -> anyhow::Result<Finished> {
    let c = &args.common;
    execute(Delivery {
        scenario: "poll-fanout",
        params: json!({
            "connections": args.connections, "messages": args.messages, "rate": args.rate,
            "payload_bytes": args.push.payload_bytes, "url": c.poll_url,
        }),
        common: c,
        push: &args.push,
        groups: vec![Group {
            kind: Kind::Poll,
            count: args.connections,
            url: c.poll_url.clone(),
        }],
        expect: args.messages,
        churn: None,
        jobs: broadcasts(args.messages),
        rate: args.rate,
        warmup: false,
        park: Some(Duration::from_secs(args.park_secs)),
    })
    .await
}

/// `personal`.
pub async fn personal(args: &PersonalArgs) -> anyhow::Result<Finished> {
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
            });
            first = last;
        }
    }
    execute(Delivery {
        scenario: "personal",
        params: json!({
            "connections": args.connections, "rounds": args.messages, "batch": batch,
            "rate": args.rate, "pushes": jobs.len(), "url": c.ws_url,
        }),
        common: c,
        push: &args.push,
        groups: vec![Group {
            kind: Kind::Ws,
            count: args.connections,
            url: c.ws_url.clone(),
        }],
        expect: args.messages,
        churn: None,
        jobs,
        rate: args.rate,
        warmup: false,
        park: None,
    })
    .await
}

/// `churn`.
pub async fn churn(args: &ChurnArgs) -> anyhow::Result<Finished> {
    let c = &args.common;
    execute(Delivery {
        scenario: "churn",
        params: json!({
            "connections": args.connections, "messages": args.messages, "rate": args.rate,
            "reconnect_min_ms": args.reconnect_min_ms, "reconnect_max_ms": args.reconnect_max_ms,
            "url": c.ws_url,
        }),
        common: c,
        push: &args.push,
        groups: vec![Group {
            kind: Kind::Ws,
            count: args.connections,
            url: c.ws_url.clone(),
        }],
        expect: args.messages,
        churn: Some(Churn {
            min_ms: args.reconnect_min_ms,
            max_ms: args.reconnect_max_ms,
        }),
        jobs: broadcasts(args.messages),
        rate: args.rate,
        warmup: true,
        park: None,
    })
    .await
}

/// `mixed`.
pub async fn mixed(args: &MixedArgs) -> anyhow::Result<Finished> {
    let c = &args.common;
    let groups: Vec<Group> = [
        (Kind::Ws, args.ws, &c.ws_url),
        (Kind::Sse, args.sse, &c.sse_url),
        (Kind::Poll, args.poll, &c.poll_url),
    ]
    .into_iter()
    .filter(|(_, count, _)| *count > 0)
    .map(|(kind, count, url)| Group {
        kind,
        count,
        url: url.clone(),
    })
    .collect();
    execute(Delivery {
        scenario: "mixed",
        params: json!({
            "ws": args.ws, "sse": args.sse, "poll": args.poll,
            "messages": args.messages, "rate": args.rate,
        }),
        common: c,
        push: &args.push,
        groups,
        expect: args.messages,
        churn: None,
        jobs: broadcasts(args.messages),
        rate: args.rate,
        warmup: false,
        park: (args.poll > 0).then(|| Duration::from_secs(2)),
    })
    .await
}

fn broadcasts(m: u64) -> Vec<Job> {
    (1..=m).map(|seq| Job { seq, to: None }).collect()
}

/// What the pushing phase produced.
struct Pushed {
    client_cpu_us: u64,
    warm_got: Option<u64>,
    records: Vec<Record>,
    outcomes: Vec<(Kind, Outcome)>,
    cpu_us: Option<u64>,
    push_secs: f64,
}

async fn execute(d: Delivery<'_>) -> anyhow::Result<Finished> {
    let common = d.common;
    let total: u64 = d.groups.iter().map(|g| g.count).sum();
    let (mut fleet, opened) =
        launch(common, &d.groups, &plan(common, d.expect, d.churn, 0)).await?;
    let pushed = push_and_collect(&d, &mut fleet).await;
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
    let delivered = report_counts(
        &mut report,
        &pushed.outcomes,
        opened.opened * d.expect,
        &mut problems,
    );
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
        }
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
    if let (Some(url), Some(metric)) = (&common.metrics_url, &common.ready_metric) {
        let clients = d.groups.iter().map(|g| g.count).sum();
        wait_gauge(url, metric, clients, PARK_WAIT_MAX).await;
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
        target: Target::parse(&common.push_url)?,
        api_key: common.api_key.clone(),
        body: common.push_body.clone(),
        conns: d.push.push_conns,
        payload_bytes: d.push.payload_bytes,
    };
    let settle = Duration::from_secs(d.push.settle_secs);
    let warm_got = if d.warmup {
        let bar = progress(1, "warm-up");
        pusher
            .run(vec![Job { seq: 0, to: None }], 0.0, &bar)
            .await?;
        bar.finish_and_clear();
        Some(fleet.wait_seq(0, settle).await?)
    } else {
        None
    };
    let before = sample(common.pid);
    let client_before = fleet.cpu_us();
    let bar = progress(d.jobs.len() as u64, "pushing");
    let push_started = Instant::now();
    let records = pusher.run(d.jobs.clone(), d.rate, &bar).await;
    let push_secs = push_started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let records = records?;
    let outcomes = fleet.collect(settle).await?;
    let after = sample(common.pid);
    let client_cpu_us = fleet.cpu_us().saturating_sub(client_before);
    Ok(Pushed {
        client_cpu_us,
        warm_got,
        records,
        outcomes,
        cpu_us: cpu_between(before, after),
        push_secs,
    })
}

/// Waits for long-polls to park: until pushgate's gauge shows them (with
/// `--metrics-url`), else for `park`.
async fn wait_parked(common: &Common, polls: u64, park: Duration) {
    let Some(url) = &common.metrics_url else {
        tokio::time::sleep(park).await;
        return;
    };
    wait_gauge(url, PARKED_POLLS_GAUGE, polls, PARK_WAIT_MAX.max(park)).await;
}

/// Waits until series `name` on `url` reaches `count`, at most `bound`.
async fn wait_gauge(url: &str, name: &str, count: u64, bound: Duration) {
    let until = Instant::now() + bound;
    let mut last = None;
    while Instant::now() < until {
        last = gauge(url, name).await;
        if last.is_some_and(|v| v >= count as f64) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("loadtest: warning: {name} never reached {count} (last read: {last:?})");
}

/// The value of series `name` on a Prometheus text page.
async fn gauge(url: &str, name: &str) -> Option<f64> {
    let target = Target::parse(url).ok()?;
    let stream = target::connect(target.resolve().await.ok()?, None)
        .await
        .ok()?;
    let mut conn = HttpConn::new(stream);
    let req = http::request("GET", &target.path, &target.host_header(), &[], b"");
    conn.send(&req).await.ok()?;
    let head = conn.read_head().await.ok()?;
    let body = conn.read_body(&head).await.ok()?;
    let text = String::from_utf8(body).ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.trim().parse().ok())
    })
}
