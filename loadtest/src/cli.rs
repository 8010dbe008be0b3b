//! The command line: one subcommand per scenario, each documented in
//! `--help`, all sharing the target and output options.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The `api_key` of the repository's development `config.toml`.
pub(crate) const DEV_API_KEY: &str = "dev-only-api-key-replace-in-production-4b8d1e6a";

const ABOUT: &str = "Load client for pushgate (and other push gateways, by URL template)";

const LONG_ABOUT: &str = "\
Load client for pushgate (and other push gateways, by URL template).

Each subcommand is one scenario. It starts worker processes (this binary
again, `loadtest worker`, at most 19,000 connections each) that open the
client connections, pushes through the backend URL, reads the server's own
memory and CPU from /proc/<pid> when --pid is given, prints a Markdown
table, and writes JSON (--json) and an SVG percentile chart (--svg).

Every connection is its own user: <user-prefix>0, <user-prefix>1, ...
Pushed payloads are {\"seq\":N,\"ts\":<µs since epoch>,\"pad\":\"...\"}, so
latency is measured across processes from the push to the frame read.

A URL template may name {token} rather than ?uid={user} (ws://H/ws?token={token}): each
user's token then comes from the file LOADTEST_TOKEN_FILE names, one
\"<user id> <token>\" per line (loadtest/token-cost.sh mints them).

Otherwise the gateway must accept ?uid= without a token ([auth] anonymous = true) and
should not rate-limit pushes (PUSHGATE_LIMITS_PUSH_RATE_PER_SEC=0) nor
connections per client address (every client here is 127.0.0.x). See
loadtest/run-smoke.sh and loadtest/measure.sh for a complete setup.
Past 25,000 connections, clients bind to 127.0.0.1..127.0.0.K in turn
(loopback targets only). Every run is bounded by --timeout-secs.

Several gateway nodes (pushgate with [broker] kind = \"redis\"): give
--ws-url, --sse-url, --poll-url, --push-url, --pid and --metrics-url as
comma-separated lists, one entry per node. Connection k goes to node
k mod nodes, push j to push URL j mod their number, server memory and
CPU are summed over the pids. `failover` kills one node mid-run and
checks that its clients resume on the others. loadtest/cluster.sh runs
a cluster on one Redis end to end.";

/// The command line.
#[derive(Debug, Parser)]
#[command(name = "loadtest", version, about = ABOUT, long_about = LONG_ABOUT)]
pub(crate) struct Cli {
    /// The scenario.
    #[command(subcommand)]
    pub scenario: Scenario,
}

/// The scenarios.
#[derive(Debug, Subcommand)]
pub(crate) enum Scenario {
    /// N idle WebSockets held open: server memory (Rss, Pss) and CPU per
    /// connection, time to open them all.
    ///
    /// Reads /proc/<pid>/smaps_rollup and /proc/<pid>/stat before the
    /// connections, once all are open, after --hold-secs of holding them,
    /// and --release-secs after they are closed. Give --pid.
    Idle(IdleArgs),
    /// N WebSocket subscribers, M broadcasts at R per second (with
    /// --channels: pushes to channels, or both): per-recipient latency,
    /// time until the last recipient has each message, losses, duplicates,
    /// server CPU per delivery.
    Fanout(FanoutArgs),
    /// As `fanout`, over server-sent events (--sse-url).
    SseFanout(FanoutArgs),
    /// N parked long-polls (--poll-url), then M broadcasts (default one):
    /// time until the last poll answers.
    ///
    /// Polls are given --park-secs to reach the server (or, with
    /// --metrics-url, until pushgate_connections{transport="poll"} shows
    /// them all). A poll answered with a reconnect frame polls again with
    /// its cursor, as a browser would. A poll's connect ends before the
    /// server accepts it, so pace opening with --connect-rate (for example
    /// 5000) to keep the server's accept queue from overflowing.
    PollFanout(PollFanoutArgs),
    /// N WebSocket users, M rounds of personal pushes ("to": [up to
    /// --batch ids]) so that every user gets M messages of its own.
    Personal(PersonalArgs),
    /// N WebSocket clients that reconnect with their last cursor every
    /// --reconnect-min-ms..--reconnect-max-ms (half with a clean close,
    /// half by dropping the socket) while M broadcasts flow at R per
    /// second (with --channels: in channels too, resumed with the same
    /// channels; pushes to them): counts lost and duplicated messages, per
    /// (connection, stream) (both must be 0).
    ///
    /// A warm-up broadcast (seq 0) first gives every client a cursor.
    Churn(ChurnArgs),
    /// N WebSocket clients that never send a byte after the handshake (no
    /// pong, no close reply): when does each get its `close` frame after
    /// the idle timeout? Lateness histogram, close codes, connection ends.
    ///
    /// --idle-timeout-secs must match the server's
    /// [session] idle_timeout_secs.
    Evict(EvictArgs),
    /// WebSocket, SSE and long-poll subscribers at once, M broadcasts at R
    /// per second: latency and losses per transport.
    Mixed(MixedArgs),
    /// Subscribers spread over several gateway nodes while broadcasts flow
    /// at R per second; --kill-pid is sent SIGKILL --kill-after-secs after
    /// the first push. Counts lost and duplicated messages (both must be 0).
    ///
    /// Give every node's URL template, comma-separated (--ws-url,
    /// --sse-url, --poll-url): connection k starts on node k mod nodes.
    /// A connection whose node goes away (the socket ends, or a reconnect
    /// is refused) reconnects with its last cursor to the next node in the
    /// list, with the same back-off as `churn`. A warm-up broadcast (seq 0)
    /// first gives every client a cursor. Push only to nodes that stay up
    /// (--push-url), and give only their pids (--pid): a push to the killed
    /// node would be refused, and its CPU cannot be read after the kill.
    Failover(FailoverArgs),
    /// A reconnect storm: N WebSocket clients, all on node A, get a cursor;
    /// broadcasts flow at R per second; --node-pid (node A) is sent SIGTERM
    /// (a drain) or, with --kill, SIGKILL, --storm-after-secs after the
    /// first push; every client comes back with its cursor on node B.
    /// Reports reconnects per second seen by node B (its
    /// pushgate_connections gauge, read every 100 ms), 503s, the time
    /// until all are back, lost and duplicated messages (both must be 0)
    /// and B's timer lateness p99 during the storm.
    ///
    /// Give --ws-url A,B (two templates: every client starts on A),
    /// --push-url and --metrics-url of node B only. Clients reconnect as
    /// pushgate.js does: a reconnect frame is followed after its retry_ms
    /// plus up to half again, a draining one moves the client to node B
    /// (as a load balancer would); a dropped connection waits a
    /// full-jitter back-off (0 to 500 ms * 2^attempt, at most 30 s).
    /// Targets (issue 16), checked with --check: drained, no second at B
    /// above 1.5x N / --spread-secs; killed, all back within 30 s; both,
    /// 0 lost, 0 duplicated, B's timer lateness p99 within --tick-ms +
    /// 50 ms. loadtest/storm.sh starts the two nodes on Redis and runs it.
    Storm(StormArgs),
    /// One scenario against pushgate and Nchan in turn (--rounds rounds,
    /// each run against a fresh server): the medians side by side with
    /// their ratio, as Markdown, JSON and an SVG bar chart.
    ///
    /// Each gateway is started by <peers-dir>/<name>/start.sh (which prints
    /// `prefix DIR`, `port N`, `pid N` and optionally `api_key KEY`) and
    /// stopped by <peers-dir>/<name>/stop.sh DIR. The scenario's own
    /// options follow `--`; the target options (URL templates, push body,
    /// --pid, --metrics-url, --ready-metric) are filled in per gateway:
    ///
    ///   pushgate: ws://H/ws?uid={user}, /sse, /poll, POST /push
    ///   {"to":…,"data":…} with the start script's key, /metrics
    ///
    ///   nchan: ws://H/sub?uid={user} (the user's channel and "broadcast"),
    ///   /sub for SSE, /poll, POST /pub with the bare payload,
    ///   /status ("subscribers:" before pushing)
    ///
    ///   nchan-broadcast: as nchan, subscribers on /sub/broadcast
    ///
    /// Example: loadtest compare fanout --rounds 3 -- -n 10000 -m 20 -r 2
    Compare(CompareArgs),
    /// Several `compare` JSON files into one Markdown table and one chart.
    CompareSummary(SummaryArgs),
    /// Channel fan-out against broadcast, in one run on one gateway:
    /// phase A, --members WebSockets (all in channel --channel) get M
    /// broadcasts at R/s; then -n minus --members more WebSockets open in no
    /// channel, and phase B pushes M messages to the channel at R/s (the
    /// same members receive, -n are connected). Server CPU per delivery and
    /// time to last recipient for each phase, and their ratio; the
    /// connections outside the channel must get nothing.
    ///
    /// Other channel runs: --channels on `idle` (memory), `fanout` (pushes
    /// to channels, for example 100,000 channels of one subscriber each)
    /// and `churn` (reconnects with the cursor and the same channels).
    /// The gateway must make the channels public to anonymous clients
    /// ([channels] public = ["*"]).
    ChannelFanout(ChannelFanoutArgs),
    /// A worker process (started by the scenarios; reads its spec on stdin).
    #[command(hide = true)]
    Worker,
}

/// The scenarios `compare` can run against both gateways.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CompareScenario {
    /// `idle`.
    Idle,
    /// `fanout`.
    Fanout,
    /// `sse-fanout`.
    SseFanout,
    /// `poll-fanout`.
    PollFanout,
    /// `mixed`.
    Mixed,
}

impl CompareScenario {
    /// The subcommand's name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Fanout => "fanout",
            Self::SseFanout => "sse-fanout",
            Self::PollFanout => "poll-fanout",
            Self::Mixed => "mixed",
        }
    }
}

/// The gateways `compare` knows how to address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Peer {
    /// pushgate (loadtest/peers/pushgate).
    Pushgate,
    /// nginx with Nchan (loadtest/peers/nchan), each client on its user's
    /// channel and "broadcast" (multiplexed), as a pushgate connection is.
    Nchan,
    /// The same Nchan, each client on "broadcast" alone (/sub/broadcast):
    /// Nchan's cheapest subscriber, no personal channel.
    NchanBroadcast,
}

impl Peer {
    /// Its name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pushgate => "pushgate",
            Self::Nchan => "nchan",
            Self::NchanBroadcast => "nchan-broadcast",
        }
    }

    /// Its directory under --peers-dir (start.sh, stop.sh).
    pub(crate) fn dir(self) -> &'static str {
        match self {
            Self::Pushgate => "pushgate",
            Self::Nchan | Self::NchanBroadcast => "nchan",
        }
    }
}

/// `compare`.
#[derive(Debug, Clone, Args)]
pub(crate) struct CompareArgs {
    /// The scenario.
    #[arg(value_enum)]
    pub scenario: CompareScenario,
    /// Rounds; each runs every gateway once, in --peers order.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// The gateways, in the order each round runs them (the ratio is the
    /// first over the second).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "pushgate,nchan"
    )]
    pub peers: Vec<Peer>,
    /// Directory for the comparison and its runs (default
    /// loadtest/results/compare-<UTC time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The comparison's name in file names, tables and charts (default:
    /// the scenario).
    #[arg(long)]
    pub label: Option<String>,
    /// Directory holding <gateway>/start.sh and <gateway>/stop.sh.
    #[arg(long, default_value = "loadtest/peers")]
    pub peers_dir: PathBuf,
    /// Seconds between a server's start and its run (a clean baseline).
    #[arg(long, default_value_t = 1)]
    pub settle_secs: u64,
    /// Seconds between runs.
    #[arg(long, default_value_t = 3)]
    pub pause_secs: u64,
    /// Longest one run may take before it is killed, s.
    #[arg(long, default_value_t = 900)]
    pub run_timeout_secs: u64,
    /// The scenario's own options, after `--` (for example -n 10000).
    #[arg(last = true)]
    pub args: Vec<String>,
}

/// `compare-summary`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SummaryArgs {
    /// `compare-*.json` files written by `compare`.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Write the Markdown here too.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Write one bar chart of every comparison here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

/// Targets, workers and outputs, shared by every scenario.
///
/// Several gateway nodes: `--ws-url`, `--sse-url`, `--poll-url`,
/// `--push-url`, `--pid` and `--metrics-url` each take a comma-separated
/// list (or the option repeated). Connection k (numbered from 0 over every
/// transport of the run) goes to node k mod (number of templates), push j
/// to push URL j mod (number of push URLs), and the server's memory and CPU
/// are summed over every pid.
#[derive(Debug, Clone, Args)]
pub(crate) struct Common {
    /// WebSocket URL templates; {user} becomes the user id. Several,
    /// comma-separated: connection k goes to template k mod their number.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ws://127.0.0.1:8080/ws?uid={user}"
    )]
    pub ws_url: Vec<String>,
    /// Server-sent events URL templates (as --ws-url).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "http://127.0.0.1:8080/sse?uid={user}"
    )]
    pub sse_url: Vec<String>,
    /// Long-poll URL templates (as --ws-url).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "http://127.0.0.1:8080/poll?uid={user}"
    )]
    pub poll_url: Vec<String>,
    /// Where pushes are POSTed. Several, comma-separated: push j goes to
    /// URL j mod their number.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "http://127.0.0.1:8080/push"
    )]
    pub push_url: Vec<String>,
    /// Bearer key for --push-url (empty: no Authorization header).
    #[arg(long, env = "LOADTEST_API_KEY", default_value = DEV_API_KEY, hide_default_value = true)]
    pub api_key: String,
    /// Push body template: {to} becomes "*" or a JSON array of user ids,
    /// {data} the payload object.
    #[arg(long, default_value = r#"{"to":{to},"data":{data}}"#)]
    pub push_body: String,
    /// The server's process ids, comma-separated, for memory and CPU from
    /// /proc (each with its children, all summed: one figure for a cluster
    /// of nodes).
    #[arg(long, value_delimiter = ',')]
    pub pid: Vec<u32>,
    /// The broker's process ids (Redis: `INFO server`'s process_id),
    /// comma-separated: each one's CPU is read from /proc over exactly the
    /// window the server's is (the first push to the last delivery), not
    /// over the connects. Reported one figure per pid, never summed.
    #[arg(long, value_delimiter = ',')]
    pub broker_pid: Vec<u32>,
    /// A shell command (`sh -c`) run just before the broker's CPU is first
    /// read, before the first push: for example one that resets the
    /// broker's counters (`redis-cli CONFIG RESETSTAT`). Its failure fails
    /// the run.
    #[arg(long)]
    pub broker_exec_before: Option<String>,
    /// A shell command run just after the broker's CPU is last read, after
    /// the last delivery: for example one that saves `INFO commandstats`.
    #[arg(long)]
    pub broker_exec_after: Option<String>,
    /// The server's Prometheus endpoints (pushgate: http://HOST:PORT/metrics),
    /// comma-separated; a gauge read for waiting is summed over them.
    #[arg(long, value_delimiter = ',')]
    pub metrics_url: Vec<String>,
    /// A line prefix on --metrics-url whose value counts the server's
    /// subscribers (Nchan's nchan_stub_status: "subscribers:"). When given,
    /// every delivery scenario waits (at most 60 s) until it reaches the
    /// number of clients before the first push. Without it, poll-fanout
    /// waits for pushgate's pushgate_connections{transport="poll"}.
    #[arg(long)]
    pub ready_metric: Option<String>,
    /// User ids are this prefix and a number.
    #[arg(long, default_value = "u")]
    pub user_prefix: String,
    /// Query parameter carrying the cursor on reconnect.
    #[arg(long, default_value = "cursor")]
    pub cursor_param: String,
    /// Connections per worker process (1..=19000).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=19_000))]
    pub per_worker: u64,
    /// Loopback source addresses 127.0.0.1..=K (0: one per 25,000 connections).
    #[arg(long, default_value_t = 0)]
    pub sources: u8,
    /// Handshakes in flight at once, over all workers. Keep it under the
    /// server's listen backlog (128 for a tokio listener; nginx 511), or
    /// dropped handshakes come back after a 1 s SYN retry.
    #[arg(long, default_value_t = 100)]
    pub connect_concurrency: usize,
    /// New connections per second over all workers (0: as fast as
    /// --connect-concurrency allows). Long-polls need it: their connect
    /// ends before the server accepts, so concurrency alone does not stop
    /// them from overflowing the server's accept queue.
    #[arg(long, default_value_t = 0.0)]
    pub connect_rate: f64,
    /// Hard bound on the whole run, s.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// Write the JSON result here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the Markdown table here too.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Write an SVG percentile chart here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Exit with status 2 if a count is off (failed connections, lost,
    /// duplicated or unexpected messages, refused pushes; for evict,
    /// clients not closed or closed early). Timings are never checked.
    #[arg(long)]
    pub check: bool,
    /// Seed for reconnect delays.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Push settings shared by the delivery scenarios.
#[derive(Debug, Clone, Args)]
pub(crate) struct PushOpts {
    /// Padding bytes added to each payload.
    #[arg(long, default_value_t = 0)]
    pub payload_bytes: usize,
    /// Keep-alive connections pushing in parallel.
    #[arg(long, default_value_t = 4)]
    pub push_conns: usize,
    /// Longest wait for deliveries after the last push, s.
    #[arg(long, default_value_t = 30)]
    pub settle_secs: u64,
}

/// Which channels the connections join (PROTOCOL.md, "v1.1: channels").
///
/// Channels are named <channel-prefix>0 .. <channel-prefix>(C-1); each
/// connection sends its list as `channels=` on every connect and
/// reconnect. The gateway must make them public to anonymous clients
/// ([channels] public = ["*"] or ["c.*"]).
#[derive(Debug, Clone, Args)]
pub(crate) struct ChannelOpts {
    /// Channels in the run (C; 0: no channels, the run is as without
    /// this option).
    #[arg(long, default_value_t = 0)]
    pub channels: u64,
    /// Channels each connection is in (K, ring layout; at most the
    /// gateway's [limits] max_channels_per_connection, default 64).
    #[arg(long, default_value_t = 1)]
    pub channels_per_conn: u64,
    /// ring: connection g is in channels (g*K + i) mod C, i < K; stripe:
    /// channel j has exactly one subscriber, connection j mod N (so each
    /// connection is in about C/N channels; K is ignored).
    #[arg(long, value_enum, default_value = "ring")]
    pub channel_layout: crate::channels::Layout,
    /// Only the first N connections are in channels (default: all).
    #[arg(long)]
    pub channel_members: Option<u64>,
    /// Channel names start with this.
    #[arg(long, default_value = "c.")]
    pub channel_prefix: String,
}

/// Where the pushes of a run with --channels go.
#[derive(Debug, Clone, Args)]
pub(crate) struct ChannelPushOpts {
    /// With --channels: push k (from 0) is a broadcast when k is a
    /// multiple of this (0: no broadcasts; 1: only broadcasts); every
    /// other push goes to --channels-per-push channels, round-robin over
    /// all C: push k to channels (k*W + w) mod C, w < W. Frames are
    /// counted per (connection, channel): lost, duplicated, or sent where
    /// they should not go (unexpected).
    #[arg(long, default_value_t = 0)]
    pub broadcast_every: u64,
    /// With --channels: channels per push (W; at most the gateway's
    /// [limits] max_push_channels, default 100).
    #[arg(long, default_value_t = 1)]
    pub channels_per_push: u64,
}

/// `idle`.
#[derive(Debug, Clone, Args)]
pub(crate) struct IdleArgs {
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
    /// Channels the connections are in.
    #[command(flatten)]
    pub channels: ChannelOpts,
    /// Connections.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub connections: u64,
    /// Seconds to hold them open after the last one opened (covers a ping
    /// round if longer than the server's ping interval).
    #[arg(long, default_value_t = 5)]
    pub hold_secs: u64,
    /// Seconds after closing them before the last memory reading.
    #[arg(long, default_value_t = 3)]
    pub release_secs: u64,
}

/// `fanout` and `sse-fanout`.
#[derive(Debug, Clone, Args)]
pub(crate) struct FanoutArgs {
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
    /// Subscribers.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub connections: u64,
    /// Broadcasts.
    #[arg(short = 'm', long, default_value_t = 10)]
    pub messages: u64,
    /// Broadcasts per second (0: back to back).
    #[arg(short = 'r', long, default_value_t = 10.0)]
    pub rate: f64,
    /// Push settings.
    #[command(flatten)]
    pub push: PushOpts,
    /// Channels the connections are in.
    #[command(flatten)]
    pub channels: ChannelOpts,
    /// Where pushes go, with --channels.
    #[command(flatten)]
    pub channel_push: ChannelPushOpts,
}

/// `channel-fanout`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ChannelFanoutArgs {
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
    /// WebSockets connected in phase B (members and the others).
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub connections: u64,
    /// WebSockets in the channel: the only ones connected in phase A.
    #[arg(long, default_value_t = 500)]
    pub members: u64,
    /// The channel.
    #[arg(long, default_value = "c.hot")]
    pub channel: String,
    /// Messages per phase.
    #[arg(short = 'm', long, default_value_t = 10)]
    pub messages: u64,
    /// Messages per second in each phase (0: back to back).
    #[arg(short = 'r', long, default_value_t = 10.0)]
    pub rate: f64,
    /// Seconds between the others' connecting and phase B (let the
    /// opening's CPU settle).
    #[arg(long, default_value_t = 2)]
    pub pause_secs: u64,
    /// Push settings.
    #[command(flatten)]
    pub push: PushOpts,
}

/// `poll-fanout`.
#[derive(Debug, Clone, Args)]
pub(crate) struct PollFanoutArgs {
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
    /// Parked long-polls.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub connections: u64,
    /// Broadcasts.
    #[arg(short = 'm', long, default_value_t = 1)]
    pub messages: u64,
    /// Broadcasts per second (0: back to back).
    #[arg(short = 'r', long, default_value_t = 1.0)]
    pub rate: f64,
    /// Seconds for the polls to park before the first push (without
    /// --metrics-url).
    #[arg(long, default_value_t = 2)]
    pub park_secs: u64,
    /// Push settings.
    #[command(flatten)]
    pub push: PushOpts,
}

/// `personal`.
#[derive(Debug, Clone, Args)]
pub(crate) struct PersonalArgs {
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
    /// Users (one WebSocket each).
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub connections: u64,
    /// Rounds: messages each user gets.
    #[arg(short = 'm', long, default_value_t = 5)]
    pub messages: u64,
    /// User ids per push (the server's [limits] max_push_users at most).
    #[arg(long, default_value_t = 100)]
    pub batch: u64,
    /// Pushes per second (0: back to back).
    #[arg(short = 'r', long, default_value_t = 0.0)]
    pub rate: f64,
    /// Push settings.
    #[command(flatten)]
    pub push: PushOpts,
}

/// `churn`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ChurnArgs {
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
    /// Clients.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub connections: u64,
    /// Broadcasts.
    #[arg(short = 'm', long, default_value_t = 100)]
    pub messages: u64,
    /// Broadcasts per second (keep it so that history covers a reconnect).
    #[arg(short = 'r', long, default_value_t = 20.0)]
    pub rate: f64,
    /// Shortest connection life before reconnecting, ms.
    #[arg(long, default_value_t = 200)]
    pub reconnect_min_ms: u64,
    /// Longest, ms.
    #[arg(long, default_value_t = 1500)]
    pub reconnect_max_ms: u64,
    /// Push settings.
    #[command(flatten)]
    pub push: PushOpts,
    /// Channels the clients are in (and reconnect with).
    #[command(flatten)]
    pub channels: ChannelOpts,
    /// Where pushes go, with --channels.
    #[command(flatten)]
    pub channel_push: ChannelPushOpts,
}

/// `evict`.
#[derive(Debug, Clone, Args)]
pub(crate) struct EvictArgs {
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
    /// Silent clients.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub connections: u64,
    /// The server's [session] idle_timeout_secs.
    #[arg(long)]
    pub idle_timeout_secs: u64,
    /// Extra seconds to wait past the last idle deadline.
    #[arg(long, default_value_t = 30)]
    pub margin_secs: u64,
}

/// `mixed`.
#[derive(Debug, Clone, Args)]
pub(crate) struct MixedArgs {
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
    /// WebSocket subscribers.
    #[arg(long, default_value_t = 1000)]
    pub ws: u64,
    /// SSE subscribers.
    #[arg(long, default_value_t = 500)]
    pub sse: u64,
    /// Long-poll subscribers.
    #[arg(long, default_value_t = 500)]
    pub poll: u64,
    /// Broadcasts.
    #[arg(short = 'm', long, default_value_t = 10)]
    pub messages: u64,
    /// Broadcasts per second.
    #[arg(short = 'r', long, default_value_t = 5.0)]
    pub rate: f64,
    /// Push settings.
    #[command(flatten)]
    pub push: PushOpts,
}

/// `storm`.
#[derive(Debug, Clone, Args)]
pub(crate) struct StormArgs {
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
    /// WebSocket clients (all on node A).
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub connections: u64,
    /// Broadcasts after the warm-up (enough to last through the storm).
    #[arg(short = 'm', long, default_value_t = 300)]
    pub messages: u64,
    /// Broadcasts per second.
    #[arg(short = 'r', long, default_value_t = 10.0)]
    pub rate: f64,
    /// Node A's process id: signalled to start the storm.
    #[arg(long)]
    pub node_pid: u32,
    /// SIGKILL node A instead of SIGTERM (no drain, no spread possible).
    #[arg(long)]
    pub kill: bool,
    /// Seconds after the first push when node A is signalled.
    #[arg(long, default_value_t = 3.0)]
    pub storm_after_secs: f64,
    /// Node A's [server] drain_spread_secs (the window the drained target
    /// averages over).
    #[arg(long, default_value_t = 5.0)]
    pub spread_secs: f64,
    /// Node B's [timer] tick_ms (the lateness target is one tick + 50 ms).
    #[arg(long, default_value_t = 100)]
    pub tick_ms: u64,
    /// Write the chart of reconnects per second at node B here (SVG).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Push settings.
    #[command(flatten)]
    pub push: PushOpts,
}

/// `failover`.
#[derive(Debug, Clone, Args)]
pub(crate) struct FailoverArgs {
    /// Shared options.
    #[command(flatten)]
    pub common: Common,
    /// WebSocket subscribers.
    #[arg(long, default_value_t = 1000)]
    pub ws: u64,
    /// SSE subscribers.
    #[arg(long, default_value_t = 0)]
    pub sse: u64,
    /// Long-poll subscribers.
    #[arg(long, default_value_t = 0)]
    pub poll: u64,
    /// Broadcasts after the warm-up.
    #[arg(short = 'm', long, default_value_t = 200)]
    pub messages: u64,
    /// Broadcasts per second (keep it so that history covers a reconnect).
    #[arg(short = 'r', long, default_value_t = 20.0)]
    pub rate: f64,
    /// The process to kill with SIGKILL during the pushes (a gateway node
    /// this run's clients use). Without it nothing is killed: a control
    /// run.
    #[arg(long)]
    pub kill_pid: Option<u32>,
    /// Seconds after the first push when --kill-pid is killed.
    #[arg(long, default_value_t = 3.0)]
    pub kill_after_secs: f64,
    /// Push settings.
    #[command(flatten)]
    pub push: PushOpts,
}
