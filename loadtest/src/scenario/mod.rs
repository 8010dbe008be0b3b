//! The scenarios: each builds its groups of clients, drives the workers and
//! the pusher, and turns what was counted into a [`Report`] plus the list
//! of counts that are off (for `--check`).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::time::Instant;

use crate::cli::{Common, Scenario};
use crate::fleet::{Fleet, Group, Plan};
use crate::hist::{self, Hist};
use crate::procstat::{self, Sample};
use crate::report::Report;
use crate::worker::protocol::Churn;

mod channels;
mod counts;
mod delivery;
mod evict;
mod idle;
mod scrape;
mod storm;

/// A finished scenario: the report and the counts that are off.
#[derive(Debug)]
pub(crate) struct Finished {
    /// What was measured.
    pub report: Report,
    /// Counts that should have been zero (or complete) and were not.
    pub problems: Vec<String>,
}

/// Runs `scenario`; `common` is its shared options.
pub(crate) async fn run(scenario: Scenario) -> anyhow::Result<(Finished, Common)> {
    let common = match &scenario {
        Scenario::Idle(a) => a.common.clone(),
        Scenario::Fanout(a) | Scenario::SseFanout(a) => a.common.clone(),
        Scenario::PollFanout(a) => a.common.clone(),
        Scenario::Personal(a) => a.common.clone(),
        Scenario::Churn(a) => a.common.clone(),
        Scenario::Evict(a) => a.common.clone(),
        Scenario::Mixed(a) => a.common.clone(),
        Scenario::Failover(a) => a.common.clone(),
        Scenario::Storm(a) => a.common.clone(),
        Scenario::ChannelFanout(a) => a.common.clone(),
        Scenario::Worker | Scenario::Compare(_) | Scenario::CompareSummary(_) => {
            anyhow::bail!("not a scenario")
        }
    };
    let bound = Duration::from_secs(common.timeout_secs);
    let run = async {
        match scenario {
            Scenario::Idle(a) => idle::run(&a).await,
            Scenario::Fanout(a) => delivery::fanout(&a, false).await,
            Scenario::SseFanout(a) => delivery::fanout(&a, true).await,
            Scenario::PollFanout(a) => delivery::poll_fanout(&a).await,
            Scenario::Personal(a) => delivery::personal(&a).await,
            Scenario::Churn(a) => delivery::churn(&a).await,
            Scenario::Evict(a) => evict::run(&a).await,
            Scenario::Mixed(a) => delivery::mixed(&a).await,
            Scenario::Failover(a) => delivery::failover(&a).await,
            Scenario::Storm(a) => delivery::storm(&a).await,
            Scenario::ChannelFanout(a) => channels::fanout(&a).await,
            Scenario::Worker | Scenario::Compare(_) | Scenario::CompareSummary(_) => {
                unreachable!("handled above")
            }
        }
    };
    let finished = tokio::time::timeout(bound, run)
        .await
        .map_err(|_| anyhow::anyhow!("run exceeded --timeout-secs {}", common.timeout_secs))??;
    Ok((finished, common))
}

/// The workers' plan from the shared options (no failover: see
/// [`Plan::failover`]).
pub(crate) fn plan(
    common: &Common,
    expect: u64,
    churn: Option<Churn>,
    idle_timeout_ms: u64,
) -> Plan {
    Plan {
        failover: false,
        one_home: false,
        paced: false,
        per_worker: common.per_worker,
        sources: common.sources,
        connect_concurrency: common.connect_concurrency,
        connect_rate: common.connect_rate,
        expect,
        churn,
        idle_timeout_ms,
        user_prefix: common.user_prefix.clone(),
        cursor_param: common.cursor_param.clone(),
        // Workers outlive the coordinator's own bound a little, and die
        // with it anyway (stdin closes).
        lifetime_secs: common.timeout_secs + 30,
        seed: common.seed,
        channels: None,
        expect_from: 0,
        first_conn: 0,
    }
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub(crate) fn progress(len: u64, message: &'static str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(message);
    bar
}

/// Reads the server's /proc numbers if `--pid` was given: each process
/// and its children (an nginx master and its workers), all summed (the
/// nodes of a cluster). `None` if any of them cannot be read: a sum over
/// fewer processes than the run started with would be wrong.
pub(crate) fn sample(pids: &[u32]) -> Option<Sample> {
    if pids.is_empty() {
        return None;
    }
    match procstat::sample_pids(pids) {
        Ok(s) => Some(s),
        Err(err) => {
            eprintln!("loadtest: warning: {err:#}");
            None
        }
    }
}

/// How opening the connections went, over all workers.
#[derive(Debug)]
pub(crate) struct Opened {
    /// Connections open.
    pub opened: u64,
    /// Attempts that failed.
    pub failed: u64,
    /// From starting the workers to the last answer.
    pub elapsed: Duration,
    /// Handshake times, µs.
    pub handshake: Hist,
    /// Listen queue overflows on the machine meanwhile (any socket).
    pub listen_overflows: Option<u64>,
    /// First errors seen.
    pub errors: Vec<String>,
}

/// Taken just before the workers start: when, and the system's listen
/// queue overflow count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opening {
    started: Instant,
    overflows: Option<u64>,
}

impl Opening {
    /// Now.
    pub(crate) fn start() -> Self {
        Self {
            started: Instant::now(),
            overflows: procstat::listen_overflows(),
        }
    }
}

/// Starts the workers for `groups` and opens every connection within
/// `[common] timeout_secs`; if opening fails, the workers are stopped.
pub(crate) async fn launch(
    common: &Common,
    groups: &[Group],
    plan: &Plan,
) -> anyhow::Result<(Fleet, Opened)> {
    let total = groups.iter().map(|g| g.count).sum();
    let opening = Opening::start();
    let mut fleet = Fleet::spawn(groups, plan).await?;
    let bound = Duration::from_secs(common.timeout_secs);
    match open(&mut fleet, total, opening, bound).await {
        Ok(opened) => Ok((fleet, opened)),
        Err(err) => {
            fleet.exit().await;
            Err(err)
        }
    }
}

/// Waits for every worker of `fleet` to finish connecting.
pub(crate) async fn open(
    fleet: &mut Fleet,
    total: u64,
    opening: Opening,
    bound: Duration,
) -> anyhow::Result<Opened> {
    let bar = progress(total, "connecting");
    let connected = fleet.connected(&bar, bound).await;
    bar.finish_and_clear();
    let connected = connected?;
    let mut handshake = hist::new_hist();
    let mut errors: Vec<String> = Vec::new();
    for c in &connected {
        hist::add_pairs(&mut handshake, &c.handshake);
        for e in &c.errors {
            if errors.len() < 5 && !errors.contains(e) {
                errors.push(e.clone());
            }
        }
    }
    Ok(Opened {
        opened: connected.iter().map(|c| c.opened).sum(),
        failed: connected.iter().map(|c| c.failed).sum(),
        elapsed: opening.started.elapsed(),
        listen_overflows: procstat::listen_overflows()
            .zip(opening.overflows)
            .map(|(after, before)| after.saturating_sub(before)),
        handshake,
        errors,
    })
}

/// The connection rows every scenario shares.
pub(crate) fn report_opened(
    report: &mut Report,
    opened: &Opened,
    requested: u64,
    problems: &mut Vec<String>,
) {
    report.metric(
        "connections_requested",
        "connections requested",
        requested,
        "",
    );
    report.metric(
        "connections_opened",
        "connections opened",
        opened.opened,
        "",
    );
    report.metric(
        "connections_failed",
        "connections failed",
        opened.failed,
        "",
    );
    let secs = opened.elapsed.as_secs_f64();
    report.metric("open_secs", "time to open all", hist::round2(secs), "s");
    if secs > 0.0 {
        report.metric(
            "opens_per_sec",
            "opens per second",
            (opened.opened as f64 / secs).round(),
            "1/s",
        );
    }
    report.histogram_row("handshake", "handshake", &opened.handshake);
    if let Some(overflows) = opened.listen_overflows {
        report.metric(
            "listen_overflows",
            "listen queue overflows meanwhile (machine-wide)",
            overflows,
            "",
        );
    }
    report.detail("connect_errors", opened.errors.clone());
    if opened.failed > 0 || opened.opened < requested {
        problems.push(format!(
            "{} of {requested} connections failed (first errors: {:?})",
            requested - opened.opened.min(requested),
            opened.errors
        ));
    }
}

/// Server CPU between two readings, µs.
pub(crate) fn cpu_between(a: Option<Sample>, b: Option<Sample>) -> Option<u64> {
    Some(b?.cpu_us_since(&a?))
}

/// KiB to MiB, two decimals.
pub(crate) fn mib(kib: u64) -> f64 {
    hist::round2(kib as f64 / 1024.0)
}
