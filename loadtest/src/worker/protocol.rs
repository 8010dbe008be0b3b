//! What the coordinator and its worker processes say to each other: one
//! JSON object per line, the spec and commands on the worker's stdin,
//! events on its stdout.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How a worker's connections talk to the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// WebSocket clients that read, answer pings and count messages.
    Ws,
    /// Server-sent-event streams.
    Sse,
    /// Long-polls that poll again with their cursor after every answer.
    Poll,
    /// WebSocket clients that never send a byte after the handshake (no
    /// pong, no close reply): they wait to be evicted.
    Silent,
}

impl Kind {
    /// The name used in reports.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Ws => "ws",
            Self::Sse => "sse",
            Self::Poll => "poll",
            Self::Silent => "ws-silent",
        }
    }
}

/// Reconnect behaviour for the churn scenario.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Churn {
    /// Shortest time a connection lives before it reconnects, ms.
    pub min_ms: u64,
    /// Longest, ms.
    pub max_ms: u64,
}

/// Everything a worker needs, sent as its first stdin line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Spec {
    /// The worker's number (for messages).
    pub worker: usize,
    /// The transport of all its connections.
    pub kind: Kind,
    /// URL templates with `{user}`, one per gateway node.
    pub urls: Vec<String>,
    /// User ids are `<user_prefix><n>`.
    pub user_prefix: String,
    /// User number of its first connection.
    pub first_user: u64,
    /// Connections it holds.
    pub count: usize,
    /// Global number of its first connection (picks the source address).
    pub first_conn: u64,
    /// Loopback source addresses in use (1: let the kernel choose).
    pub sources: u8,
    /// Handshakes in flight at once.
    pub connect_concurrency: usize,
    /// First connection attempts started per second (0: no pacing).
    pub connect_rate: f64,
    /// Messages each connection should get, numbered `1..=expect`
    /// (`seq` 0 is a warm-up that hands every client a cursor).
    pub expect: u64,
    /// Reconnect with the cursor every so often (churn scenario).
    pub churn: Option<Churn>,
    /// A connection whose node goes away (its socket ends, or a reconnect
    /// is refused) reconnects with its cursor to the next node of `urls`.
    pub failover: bool,
    /// Every connection starts on the first node of `urls` (the storm
    /// scenario), instead of connection k on node k mod nodes.
    #[serde(default)]
    pub one_home: bool,
    /// Reconnect as `pushgate.js` does: after a `reconnect` frame wait its
    /// `retry_ms` plus up to half again (at most 5 s more), and move to
    /// the next node after a `draining` one (as a load balancer would);
    /// after a drop or a refused reconnect wait a full-jitter exponential
    /// back-off (0 to 500 ms * 2^(failures - 1), at most 30 s). Without it
    /// a `reconnect` frame is followed at once and a failure waits
    /// 50 ms * failures.
    #[serde(default)]
    pub paced: bool,
    /// The gateway's idle timeout, ms (silent clients measure against it).
    pub idle_timeout_ms: u64,
    /// Query parameter that carries a cursor on reconnect.
    pub cursor_param: String,
    /// The worker exits by itself after this many seconds.
    pub lifetime_secs: u64,
    /// Channels: which connection is in which (sent as `channels=` on
    /// every connect and reconnect) and where each push goes; with it,
    /// `expect` is the highest `seq` and each connection expects only
    /// the frames of its streams, counted per (connection, stream).
    #[serde(default)]
    pub channels: Option<crate::channels::ChannelPlan>,
    /// Pushes below this `seq` are not expected (they were made before
    /// these connections opened).
    #[serde(default)]
    pub expect_from: u64,
    /// Seed for reconnect delays.
    pub seed: u64,
}

/// A command on a worker's stdin.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub(crate) enum Command {
    /// Say when every open connection has message `seq` (or time is up).
    WaitSeq {
        /// The message number.
        seq: u64,
        /// How long to wait, ms.
        timeout_ms: u64,
    },
    /// Stop churning, wait until every connection has all its messages
    /// (silent ones: has been closed) or time is up, and report.
    Collect {
        /// How long to wait, ms.
        timeout_ms: u64,
    },
    /// Close everything and exit.
    Exit,
}

/// A line on a worker's stdout.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub(crate) enum Event {
    /// Connecting is under way.
    Progress {
        /// Connections open so far.
        opened: u64,
        /// Attempts that failed so far.
        failed: u64,
    },
    /// Every connection attempt has finished.
    Connected(Connected),
    /// The answer to [`Command::WaitSeq`].
    SeqDone {
        /// The message number.
        seq: u64,
        /// Connections that have it.
        got: u64,
    },
    /// The answer to [`Command::Collect`].
    Outcome(Box<Outcome>),
}

/// How connecting went.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Connected {
    /// Connections open.
    pub opened: u64,
    /// Attempts that failed.
    pub failed: u64,
    /// From the first attempt to the last answer, ms.
    pub elapsed_ms: u64,
    /// Handshake times (µs) as histogram buckets.
    pub handshake: Vec<(u64, u64)>,
    /// The first few distinct errors.
    pub errors: Vec<String>,
}

/// Arrivals of one message number at this worker.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct SeqStat {
    /// Connections that got it (first arrivals).
    pub got: u64,
    /// Earliest arrival, µs since the epoch (0: none).
    pub first_us: u64,
    /// Latest first arrival, µs since the epoch.
    pub last_us: u64,
}

/// What a worker counted.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Outcome {
    /// Connections opened.
    pub opened: u64,
    /// Connections that got every expected message.
    pub complete: u64,
    /// First arrivals of expected messages.
    pub delivered: u64,
    /// Expected messages never received, over opened connections, that
    /// the gateway never said may be missing (a silent loss).
    pub lost: u64,
    /// Expected messages never received on connections that got a
    /// `recover` with `complete: false` (a gap the gateway reported).
    #[serde(default)]
    pub lost_reported: u64,
    /// Arrivals of a message a connection already had.
    pub duplicates: u64,
    /// Messages that arrived after a higher-numbered one.
    pub out_of_order: u64,
    /// Messages with no or an unknown number.
    pub unexpected: u64,
    /// `recover` frames with `complete: true`.
    pub recover_complete: u64,
    /// `recover` frames with `complete: false` (history did not cover).
    pub recover_incomplete: u64,
    /// Reconnects made (churn, `reconnect` frames, drops).
    pub reconnects: u64,
    /// Reconnect attempts that failed.
    pub reconnect_failures: u64,
    /// Of those, refused with `503` (draining, a connection limit).
    #[serde(default)]
    pub reconnects_refused_503: u64,
    /// Connections the server dropped without a close frame.
    pub dropped: u64,
    /// `close` frames by reason, and (silent clients) WebSocket close codes.
    pub closes: BTreeMap<String, u64>,
    /// Per message number (index = seq).
    pub per_seq: Vec<SeqStat>,
    /// Delivery latency, push written to frame read, µs buckets.
    pub latency: Vec<(u64, u64)>,
    /// Silent clients: close frame arrival after the idle deadline, µs.
    pub close_lateness: Vec<(u64, u64)>,
    /// Silent clients: connection end (FIN) after the idle deadline, µs.
    pub end_lateness: Vec<(u64, u64)>,
    /// Silent clients closed before their idle deadline.
    pub early: u64,
    /// The earliest of those, ms before the deadline.
    pub early_max_ms: f64,
    /// Silent clients still open when collecting stopped.
    pub not_closed: u64,
    /// The first few distinct errors.
    pub errors: Vec<String>,
}
