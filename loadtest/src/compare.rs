//! `compare`: one scenario against several gateways (pushgate and Nchan),
//! alternating, each run against a fresh server, and the medians side by
//! side with their ratio; `compare-summary` puts several comparisons into
//! one table and one chart.
//!
//! A gateway is started by `<peers-dir>/<name>/start.sh`, which prints
//! `key value` lines (`prefix`, `port`, `pid`, optionally `api_key`), and
//! stopped by `<peers-dir>/<name>/stop.sh <prefix>`. Each run is this
//! binary again (`loadtest <scenario> …`) with the gateway's URL
//! templates, writing its JSON and Markdown beside the comparison.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chart::{self, BarGroup};
use crate::cli::{CompareArgs, CompareScenario, Peer, SummaryArgs};

/// Longest a start or stop script may take.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a running child is checked.
const CHILD_POLL: Duration = Duration::from_millis(100);
/// Most bytes of a server log kept beside the results (its tail: Nchan
/// logs a line per channel when thousands of clients leave at once).
const LOG_TAIL_BYTES: u64 = 4 * 1024;

/// One figure of a comparison, as read from each run's JSON.
#[derive(Debug, Clone, Copy)]
struct Figure {
    /// Path in the run's `results`: `key` or `key.field`.
    key: &'static str,
    /// For people.
    label: &'static str,
    /// Unit.
    unit: &'static str,
    /// Drawn in the chart (counts are not).
    chart: bool,
}

const fn fig(key: &'static str, label: &'static str, unit: &'static str) -> Figure {
    Figure {
        key,
        label,
        unit,
        chart: true,
    }
}

const fn count(key: &'static str, label: &'static str) -> Figure {
    Figure {
        key,
        label,
        unit: "",
        chart: false,
    }
}

const IDLE_FIGURES: &[Figure] = &[
    fig("rss_per_conn_kib", "server RSS per connection", "KiB"),
    fig("pss_per_conn_kib", "server PSS per connection", "KiB"),
    fig("server_rss_before_mib", "server RSS before", "MiB"),
    fig("server_rss_held_mib", "server RSS holding all", "MiB"),
    fig("server_pss_held_mib", "server PSS holding all", "MiB"),
    fig("cpu_per_open_us", "server CPU per connection opened", "µs"),
    fig(
        "idle_cpu_percent",
        "server CPU while holding",
        "% of a core",
    ),
    fig("open_secs", "time to open all", "s"),
    fig("handshake.p99_ms", "handshake p99", "ms"),
    count("connections_opened", "connections opened"),
    count("connections_failed", "connections failed"),
];

const DELIVERY_FIGURES: &[Figure] = &[
    fig(
        "time_to_last.p50_ms",
        "time to last recipient, median message",
        "ms",
    ),
    fig(
        "time_to_last.max_ms",
        "time to last recipient, worst message",
        "ms",
    ),
    fig(
        "time_to_first.p50_ms",
        "time to first recipient, median message",
        "ms",
    ),
    fig("latency.p50_ms", "delivery latency p50", "ms"),
    fig("latency.p99_ms", "delivery latency p99", "ms"),
    fig("cpu_per_delivery_us", "server CPU per delivery", "µs"),
    fig(
        "client_cpu_per_delivery_us",
        "load client CPU per delivery",
        "µs",
    ),
    fig("push_rtt.p50_ms", "push round trip p50", "ms"),
    fig("open_secs", "time to open all", "s"),
    count("connections_opened", "connections opened"),
    count("delivered", "deliveries"),
    count("lost", "lost"),
    count("duplicates", "duplicated"),
];

const POLL_FIGURES: &[Figure] = &[
    fig(
        "time_to_last.max_ms",
        "time until the last poll answers (worst message)",
        "ms",
    ),
    fig(
        "time_to_last.p50_ms",
        "time to last recipient, median message",
        "ms",
    ),
    fig("latency.p50_ms", "delivery latency p50", "ms"),
    fig("latency.p99_ms", "delivery latency p99", "ms"),
    fig("cpu_per_delivery_us", "server CPU per answered poll", "µs"),
    fig(
        "client_cpu_per_delivery_us",
        "load client CPU per delivery",
        "µs",
    ),
    fig("open_secs", "time to open all", "s"),
    count("connections_opened", "connections opened"),
    count("delivered", "deliveries"),
    count("lost", "lost"),
    count("duplicates", "duplicated"),
];

fn figures_of(scenario: CompareScenario) -> &'static [Figure] {
    match scenario {
        CompareScenario::Idle => IDLE_FIGURES,
        CompareScenario::Fanout | CompareScenario::SseFanout | CompareScenario::Mixed => {
            DELIVERY_FIGURES
        }
        CompareScenario::PollFanout => POLL_FIGURES,
    }
}

/// A started gateway, as its start script described it.
#[derive(Debug)]
struct Server {
    prefix: String,
    port: u16,
    pid: u32,
    api_key: Option<String>,
}

/// One run of the scenario against one gateway.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Run {
    /// The gateway.
    pub peer: String,
    /// Round, from 1.
    pub round: u32,
    /// Whether it exited with status 0 and wrote its JSON.
    pub ok: bool,
    /// Exit status or error.
    pub status: String,
    /// `/proc/loadavg` (1, 5, 15 min) before the run.
    pub load_before: Vec<f64>,
    /// The same after the run.
    pub load_after: Vec<f64>,
    /// Its JSON, relative to the comparison's directory.
    pub json: String,
    /// The command, shell-quoted.
    pub command: String,
    /// The compared figures it produced.
    pub figures: BTreeMap<String, f64>,
}

/// One compared figure.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Row {
    /// Key in the runs' results.
    pub key: String,
    /// For people.
    pub label: String,
    /// Unit.
    pub unit: String,
    /// Drawn in the chart.
    pub chart: bool,
    /// Per gateway: the value of each successful run, in round order.
    pub values: BTreeMap<String, Vec<f64>>,
    /// Per gateway: their median.
    pub median: BTreeMap<String, f64>,
    /// First gateway's median over the second's.
    pub ratio: Option<f64>,
}

/// A whole comparison (what `compare` writes as JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Comparison {
    /// Its name.
    pub label: String,
    /// The scenario subcommand.
    pub scenario: String,
    /// The scenario's arguments.
    pub args: Vec<String>,
    /// Gateways in round order.
    pub peers: Vec<String>,
    /// Rounds.
    pub rounds: u32,
    /// UTC start, `date -u` style.
    pub started: String,
    /// Every run.
    pub runs: Vec<Run>,
    /// The figures.
    pub rows: Vec<Row>,
}

/// Runs `compare`.
pub(crate) fn run(args: &CompareArgs) -> anyhow::Result<()> {
    let label = args
        .label
        .clone()
        .unwrap_or_else(|| args.scenario.as_str().to_owned());
    let out = args.out.clone().unwrap_or_else(default_out);
    std::fs::create_dir_all(out.join("runs"))
        .with_context(|| format!("cannot create {}", out.display()))?;
    let exe = std::env::current_exe().context("cannot find the loadtest binary")?;
    let peers: Vec<String> = args.peers.iter().map(|p| p.as_str().to_owned()).collect();
    let mut comparison = Comparison {
        label: label.clone(),
        scenario: args.scenario.as_str().to_owned(),
        args: args.args.clone(),
        peers: peers.clone(),
        rounds: args.rounds,
        started: utc_now(),
        runs: Vec::new(),
        rows: Vec::new(),
    };
    if peers.len() > 2 {
        bail!(
            "compare takes one or two gateways (--peers a,b), not {}",
            peers.len()
        );
    }
    let figures = figures_of(args.scenario);
    for round in 1..=args.rounds {
        for &peer in &args.peers {
            let run = run_once(args, &out, &exe, &label, peer, round, figures);
            match &run {
                Ok(r) => eprintln!(
                    "compare: {label} round {round} {}: {} (load {:?} → {:?})",
                    r.peer, r.status, r.load_before, r.load_after
                ),
                Err(err) => eprintln!("compare: {label} round {round} {}: {err:#}", peer.as_str()),
            }
            comparison.runs.push(run.unwrap_or_else(|err| Run {
                peer: peer.as_str().to_owned(),
                round,
                ok: false,
                status: format!("{err:#}"),
                load_before: loadavg(),
                load_after: loadavg(),
                json: String::new(),
                command: String::new(),
                figures: BTreeMap::new(),
            }));
            std::thread::sleep(Duration::from_secs(args.pause_secs));
        }
    }
    comparison.rows = rows(figures, &peers, &comparison.runs);
    let markdown = to_markdown(&comparison);
    println!("{markdown}");
    let stem = out.join(format!("compare-{}", file_safe(&label)));
    write(
        &stem.with_extension("json"),
        &(serde_json::to_string_pretty(&comparison)? + "\n"),
    )?;
    write(&stem.with_extension("md"), &markdown)?;
    chart::bars(
        &stem.with_extension("svg"),
        &format!("{label}: {}", peers.join(" vs ")),
        &bar_groups(&comparison, false),
    )?;
    let failed = comparison.runs.iter().filter(|r| !r.ok).count();
    if failed > 0 {
        bail!("{failed} of {} runs failed", comparison.runs.len());
    }
    Ok(())
}

/// Runs `compare-summary`: several comparisons' JSON into one table and
/// one chart.
pub(crate) fn summary(args: &SummaryArgs) -> anyhow::Result<()> {
    let mut all = Vec::new();
    for path in &args.files {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let c: Comparison = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a comparison", path.display()))?;
        all.push(c);
    }
    let mut markdown = String::new();
    let mut groups = Vec::new();
    for c in &all {
        markdown.push_str(&to_markdown(c));
        markdown.push('\n');
        groups.extend(bar_groups(c, true));
    }
    print!("{markdown}");
    if let Some(path) = &args.markdown {
        write(path, &markdown)?;
    }
    if let Some(path) = &args.svg {
        let peers = all
            .first()
            .map(|c| c.peers.join(" vs "))
            .unwrap_or_default();
        chart::bars(path, &format!("loadtest compare: {peers}"), &groups)?;
    }
    Ok(())
}

/// Starts `peer`, runs the scenario against it, stops it.
fn run_once(
    args: &CompareArgs,
    out: &Path,
    exe: &Path,
    label: &str,
    peer: Peer,
    round: u32,
    figures: &[Figure],
) -> anyhow::Result<Run> {
    let name = format!("{}.r{round}.{}", file_safe(label), peer.as_str());
    let server = start(
        args,
        peer,
        &out.join("runs").join(format!("{name}.start.tmp")),
    )?;
    eprintln!(
        "compare: {name}: {} pid {} on 127.0.0.1:{} (prefix {}; its stop.sh stops it)",
        peer.as_str(),
        server.pid,
        server.port,
        server.prefix
    );
    let outcome = (|| {
        std::thread::sleep(Duration::from_secs(args.settle_secs));
        let json_rel = format!("runs/{name}.json");
        let json = out.join(&json_rel);
        let mut argv: Vec<String> = vec![args.scenario.as_str().to_owned()];
        argv.extend(args.args.iter().cloned());
        argv.extend(target_args(peer, &server));
        argv.extend([
            "--json".to_owned(),
            json.display().to_string(),
            "--markdown".to_owned(),
            out.join(format!("runs/{name}.md")).display().to_string(),
        ]);
        let command = std::iter::once(exe.display().to_string())
            .chain(argv.iter().cloned())
            .map(|a| shell_quote(&a))
            .collect::<Vec<_>>()
            .join(" ");
        append(&out.join("commands.txt"), &format!("{command}\n"))?;
        let load_before = loadavg();
        // Its stdout is the Markdown it also writes to --markdown.
        let child = Command::new(exe)
            .args(&argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start the run")?;
        let bound = Duration::from_secs(args.run_timeout_secs);
        let status = wait_bounded(child, bound)?;
        let load_after = loadavg();
        let results = std::fs::read_to_string(&json)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok());
        let figures = results
            .as_ref()
            .map(|v| read_figures(v, figures))
            .unwrap_or_default();
        Ok(Run {
            peer: peer.as_str().to_owned(),
            round,
            ok: status.as_deref() == Ok("exit status: 0") && results.is_some(),
            status: status.unwrap_or_else(|e| e),
            load_before,
            load_after,
            json: json_rel,
            command,
            figures,
        })
    })();
    stop(
        args,
        peer,
        &server,
        &out.join(format!("runs/{name}.server.log")),
    );
    outcome
}

/// The scenario's target options for `peer` at `server`.
fn target_args(peer: Peer, server: &Server) -> Vec<String> {
    let base = format!("127.0.0.1:{}", server.port);
    let pairs: Vec<(&str, String)> = match peer {
        Peer::Pushgate => vec![
            ("--ws-url", format!("ws://{base}/ws?uid={{user}}")),
            ("--sse-url", format!("http://{base}/sse?uid={{user}}")),
            ("--poll-url", format!("http://{base}/poll?uid={{user}}")),
            ("--push-url", format!("http://{base}/push")),
            ("--metrics-url", format!("http://{base}/metrics")),
            ("--api-key", server.api_key.clone().unwrap_or_default()),
        ],
        Peer::Nchan => vec![
            ("--ws-url", format!("ws://{base}/sub?uid={{user}}")),
            ("--sse-url", format!("http://{base}/sub?uid={{user}}")),
            ("--poll-url", format!("http://{base}/poll?uid={{user}}")),
            ("--push-url", format!("http://{base}/pub")),
            ("--push-body", "{data}".to_owned()),
            ("--metrics-url", format!("http://{base}/status")),
            ("--ready-metric", "subscribers:".to_owned()),
            ("--api-key", String::new()),
        ],
        Peer::NchanBroadcast => vec![
            (
                "--ws-url",
                format!("ws://{base}/sub/broadcast?uid={{user}}"),
            ),
            (
                "--sse-url",
                format!("http://{base}/sub/broadcast?uid={{user}}"),
            ),
            (
                "--poll-url",
                format!("http://{base}/sub/broadcast?uid={{user}}"),
            ),
            ("--push-url", format!("http://{base}/pub")),
            ("--push-body", "{data}".to_owned()),
            ("--metrics-url", format!("http://{base}/status")),
            ("--ready-metric", "subscribers:".to_owned()),
            ("--api-key", String::new()),
        ],
    };
    let mut out: Vec<String> = pairs
        .into_iter()
        .flat_map(|(k, v)| [k.to_owned(), v])
        .collect();
    out.extend(["--pid".to_owned(), server.pid.to_string()]);
    out
}

/// Runs `<peers-dir>/<peer>/start.sh` and reads what it printed (also
/// kept in `record`).
fn start(args: &CompareArgs, peer: Peer, record: &Path) -> anyhow::Result<Server> {
    let script = args.peers_dir.join(peer.dir()).join("start.sh");
    // A file, not a pipe: the server the script leaves running must not
    // hold our read end open.
    let out = std::fs::File::create(record)?;
    let child = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot run {}", script.display()))?;
    let status = wait_bounded(child, SCRIPT_TIMEOUT)?;
    let text = std::fs::read_to_string(record)?;
    let _ = std::fs::remove_file(record);
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .map(str::trim)
            .map(str::to_owned)
    };
    if status.as_deref() != Ok("exit status: 0") {
        bail!(
            "{} failed ({}): {text}",
            script.display(),
            status.unwrap_or_else(|e| e)
        );
    }
    let server = Server {
        prefix: get("prefix").context("start script printed no prefix")?,
        port: get("port")
            .and_then(|p| p.parse().ok())
            .context("start script printed no port")?,
        pid: get("pid")
            .and_then(|p| p.parse().ok())
            .context("start script printed no pid")?,
        api_key: get("api_key"),
    };
    Ok(server)
}

/// Stops `server` with `<peers-dir>/<peer>/stop.sh`, keeps the tail of its
/// log as `log`, and removes its prefix (when under /tmp).
fn stop(args: &CompareArgs, peer: Peer, server: &Server, log: &Path) {
    let script = args.peers_dir.join(peer.dir()).join("stop.sh");
    let stopped = Command::new("bash")
        .arg(&script)
        .arg(&server.prefix)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| e.to_string())
        .and_then(|child| wait_bounded(child, SCRIPT_TIMEOUT).map_err(|e| e.to_string()));
    if !matches!(
        stopped.as_ref().map(|s| s.as_deref()),
        Ok(Ok("exit status: 0"))
    ) {
        eprintln!(
            "compare: warning: {} {} answered {stopped:?}",
            script.display(),
            server.prefix
        );
    }
    let prefix = Path::new(&server.prefix);
    for name in ["error.log", "pushgate.log"] {
        let path = prefix.join(name);
        if path.exists() {
            let _ = copy_tail(&path, log, LOG_TAIL_BYTES);
        }
    }
    // The stop script leaves the prefix; it is ours to remove once the
    // server is gone.
    if server.prefix.starts_with("/tmp/") && !Path::new(&format!("/proc/{}", server.pid)).exists() {
        let _ = std::fs::remove_dir_all(prefix);
    }
}

/// Waits for `child` at most `bound`, killing it past that. `Ok(status)`
/// as text (`exit status: 0`), `Err` if it had to be killed.
fn wait_bounded(
    mut child: std::process::Child,
    bound: Duration,
) -> anyhow::Result<Result<String, String>> {
    let until = Instant::now() + bound;
    while Instant::now() < until {
        if let Some(status) = child.try_wait()? {
            return Ok(Ok(status.to_string()));
        }
        std::thread::sleep(CHILD_POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(Err(format!("killed after {} s", bound.as_secs())))
}

/// The figures of one run's JSON.
fn read_figures(json: &Value, figures: &[Figure]) -> BTreeMap<String, f64> {
    let results = &json["results"];
    figures
        .iter()
        .filter_map(|f| {
            let value = f
                .key
                .split('.')
                .try_fold(results, |v, part| v.get(part))?
                .as_f64()?;
            Some((f.key.to_owned(), value))
        })
        .collect()
}

/// Medians and ratios per figure, over the successful runs.
fn rows(figures: &[Figure], peers: &[String], runs: &[Run]) -> Vec<Row> {
    figures
        .iter()
        .map(|f| {
            let mut values = BTreeMap::new();
            let mut medians = BTreeMap::new();
            for peer in peers {
                let v: Vec<f64> = runs
                    .iter()
                    .filter(|r| r.ok && &r.peer == peer)
                    .filter_map(|r| r.figures.get(f.key).copied())
                    .collect();
                if let Some(m) = median(&v) {
                    medians.insert(peer.clone(), m);
                }
                values.insert(peer.clone(), v);
            }
            let ratio = match (
                peers.first().and_then(|p| medians.get(p)),
                peers.get(1).and_then(|p| medians.get(p)),
            ) {
                (Some(a), Some(b)) if *b != 0.0 => Some(crate::hist::round2(a / b)),
                _ => None,
            };
            Row {
                key: f.key.to_owned(),
                label: f.label.to_owned(),
                unit: f.unit.to_owned(),
                chart: f.chart,
                values,
                median: medians,
                ratio,
            }
        })
        .collect()
}

/// The median (mean of the middle two for an even count).
fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let m = if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    Some(crate::hist::round2(m))
}

/// A comparison as Markdown: what ran, then one row per figure.
fn to_markdown(c: &Comparison) -> String {
    let mut out = format!("### compare {}: {}\n\n", c.label, c.peers.join(" vs "));
    let loads: Vec<f64> = c
        .runs
        .iter()
        .flat_map(|r| [r.load_before.first(), r.load_after.first()])
        .flatten()
        .copied()
        .collect();
    let (lo, hi) = loads.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &l| {
        (lo.min(l), hi.max(l))
    });
    let ok = c.runs.iter().filter(|r| r.ok).count();
    let _ = writeln!(
        out,
        "`loadtest {} {}`; {} rounds ({} in turn), each run against a fresh server; \
         {ok} of {} runs succeeded; started {}; load average (1 min) at run starts and ends {}–{}.\n",
        c.scenario,
        c.args.join(" "),
        c.rounds,
        c.peers.join(", "),
        c.runs.len(),
        c.started,
        if loads.is_empty() { 0.0 } else { lo },
        hi,
    );
    let a = c.peers.first().map_or("a", String::as_str);
    let b = c.peers.get(1).map_or("b", String::as_str);
    let _ = writeln!(
        out,
        "| figure | unit | {a} (median) | {b} (median) | {a} / {b} | {a} runs | {b} runs |"
    );
    out.push_str("| --- | --- | ---: | ---: | ---: | --- | --- |\n");
    let show = |v: Option<&f64>| v.map_or("–".to_owned(), |v| format!("{v}"));
    let list = |v: Option<&Vec<f64>>| {
        v.map(|v| {
            v.iter()
                .map(|x| format!("{x}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
    };
    for r in &c.rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.label,
            r.unit,
            show(r.median.get(a)),
            show(r.median.get(b)),
            r.ratio.map_or("–".to_owned(), |x| format!("{x}")),
            list(r.values.get(a)),
            list(r.values.get(b)),
        );
    }
    let failed: Vec<String> = c
        .runs
        .iter()
        .filter(|r| !r.ok)
        .map(|r| format!("round {} {}: {}", r.round, r.peer, r.status))
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "\nFailed runs: {}.", failed.join("; "));
    }
    out
}

/// The chart's bars of a comparison (figures marked for it).
fn bar_groups(c: &Comparison, prefixed: bool) -> Vec<BarGroup> {
    c.rows
        .iter()
        .filter(|r| r.chart && !r.median.is_empty())
        .map(|r| BarGroup {
            label: match (prefixed, r.unit.is_empty()) {
                (true, _) => format!("{}: {} ({})", c.label, r.label, r.unit),
                (false, false) => format!("{} ({})", r.label, r.unit),
                (false, true) => r.label.clone(),
            },
            values: c
                .peers
                .iter()
                .map(|p| (p.clone(), r.median.get(p).copied()))
                .collect(),
        })
        .collect()
}

/// `/proc/loadavg`'s three averages.
fn loadavg() -> Vec<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| {
            t.split_whitespace()
                .take(3)
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Now in UTC, `YYYY-MM-DDTHH:MM:SSZ` (from `date`, as the scripts do).
fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

fn append(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// Copies the last `max` bytes of `from` to `to`.
fn copy_tail(from: &Path, to: &Path, max: u64) -> std::io::Result<()> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut f = std::fs::File::open(from)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max)))?;
    let mut buf = Vec::new();
    f.take(max).read_to_end(&mut buf)?;
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if len > max {
        // Start at a whole line, and say what was left out.
        let cut = text.find('\n').map_or(0, |i| i + 1);
        text = format!("[first {} bytes left out]\n{}", len - max, &text[cut..]);
    }
    std::fs::write(to, text)
}

/// `label` with anything but letters, digits, `-`, `_` and `.` as `-`.
fn file_safe(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// `arg` quoted for a POSIX shell when it needs it.
fn shell_quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
    {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Where `compare` writes when not told: `loadtest/results/compare-<UTC>`.
pub(crate) fn default_out() -> PathBuf {
    let stamp = utc_now().replace(['-', ':'], "");
    PathBuf::from(format!("loadtest/results/compare-{stamp}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        let run = |peer: &str, v: f64| Run {
            peer: peer.into(),
            round: 1,
            ok: true,
            status: String::new(),
            load_before: vec![1.0],
            load_after: vec![2.0],
            json: String::new(),
            command: String::new(),
            figures: [("rss_per_conn_kib".to_owned(), v)].into_iter().collect(),
        };
        let runs = vec![
            run("pushgate", 3.0),
            run("nchan", 10.0),
            run("pushgate", 3.4),
            run("nchan", 12.0),
        ];
        let peers = vec!["pushgate".to_owned(), "nchan".to_owned()];
        let rows = rows(&IDLE_FIGURES[..1], &peers, &runs);
        assert_eq!(rows[0].median["pushgate"], 3.2);
        assert_eq!(rows[0].ratio, Some(0.29));
        let c = Comparison {
            label: "idle-10k".into(),
            scenario: "idle".into(),
            args: vec!["-n".into(), "10000".into()],
            peers,
            rounds: 2,
            started: String::new(),
            runs,
            rows,
        };
        let md = to_markdown(&c);
        assert!(
            md.contains("| server RSS per connection | KiB | 3.2 | 11 | 0.29 | 3, 3.4 | 10, 12 |")
        );
        assert!(md.contains("load average (1 min) at run starts and ends 1–2"));
    }

    #[test]
    fn figures_are_read_by_path() {
        let json = serde_json::json!({"results": {
            "time_to_last": {"p50_ms": 12.5, "max_ms": 30.0},
            "cpu_per_delivery_us": 11,
        }});
        let got = read_figures(&json, DELIVERY_FIGURES);
        assert_eq!(got["time_to_last.p50_ms"], 12.5);
        assert_eq!(got["cpu_per_delivery_us"], 11.0);
        assert!(!got.contains_key("lost"));
    }

    #[test]
    fn quoting_and_names() {
        assert_eq!(shell_quote("-n"), "-n");
        assert_eq!(shell_quote("{data}"), "'{data}'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(file_safe("idle 10k/ws"), "idle-10k-ws");
    }
}
