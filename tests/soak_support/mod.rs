//! The soak's clients and bookkeeping: what a client is, how it counts
//! what it receives, and (in `sessions`) how it talks each transport.

pub(crate) mod sessions;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use serde::Deserialize;

/// The id of the broadcast every client waits for at the end.
pub(crate) const END_ID: &str = "end";
/// How long a client that stalled reads on afterwards: long enough to
/// drain megabytes through a busy runtime and see the gateway end it.
pub(crate) const STALL_DRAIN: Duration = Duration::from_secs(6);

/// The shape of one soak.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// How long the backend publishes.
    pub publish_for: Duration,
    /// Clients, spread evenly over ws, poll and sse.
    pub clients: usize,
    /// Broadcast pushes per second.
    pub broadcasts_per_sec: u32,
    /// Personal pushes per second (each to 1 to 3 random clients).
    pub personal_per_sec: u32,
    /// Heavy personal pushes per second, each to every client that stalls:
    /// a stalled client must be sent megabytes (the socket buffers on both
    /// sides absorb about 3 MB) before its queue overflows.
    pub heavy_per_sec: u32,
    /// Share of ws and sse clients that stall now and then (stop reading
    /// long enough to be evicted as slow).
    pub slow_share: f64,
    /// How long a stalled client stops reading.
    pub stall: Duration,
    /// After its first session (which always stalls), the chance that a
    /// stalling client's next session stalls again.
    pub restall: f64,
}

/// Padding of a broadcast, in bytes.
pub(crate) const BROADCAST_PAD: usize = 400;
/// Padding of a heavy personal push, in bytes (under `max_push_bytes`).
pub(crate) const HEAVY_PAD: usize = 58_000;

/// How a client connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Ws,
    Poll,
    Sse,
}

/// How a session ends on the client's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Zero linger, then close: the kernel sends RST.
    Rst,
    /// Shut the write half, then close: FIN.
    Fin,
    /// A WebSocket close handshake, or just the end of the last poll.
    Clean,
}

/// Fault and traffic counters, shared by every client.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    pub connects: AtomicU64,
    pub connect_errors: AtomicU64,
    pub rst: AtomicU64,
    pub fin: AtomicU64,
    pub clean: AtomicU64,
    pub stalls: AtomicU64,
    pub evicted_while_stalled: AtomicU64,
    pub slow_close_frames: AtomicU64,
    pub server_closed: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn count(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// What every client task shares: where the gateway is, the cursor every
/// client starts from, whether publishing has stopped, the counters.
pub(crate) struct Shared {
    pub addr: SocketAddr,
    pub genesis: String,
    pub stopping: AtomicBool,
    pub faults: Faults,
}

/// What was accepted (202) by the gateway, by message key (see [`key_of`]).
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub broadcasts: Vec<u32>,
    pub personal: HashMap<String, Vec<u32>>,
}

/// A message's key: the publisher's counter in its id (`b12`, `p13`,
/// `h14`), 0 for the end marker. Clients keep keys, not ids, so their
/// bookkeeping stays small next to the gateway's memory.
pub(crate) fn key_of(id: &str) -> u32 {
    if id == END_ID {
        return 0;
    }
    id.get(1..)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("message id {id:?}"))
}

/// A set of message keys.
#[derive(Debug, Default, Clone)]
pub(crate) struct Keys(pub Vec<u64>);

impl Keys {
    /// Adds `key`; false if it was there already.
    pub(crate) fn insert(&mut self, key: u32) -> bool {
        let (word, bit) = (key as usize / 64, 1u64 << (key % 64));
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        let fresh = self.0[word] & bit == 0;
        self.0[word] |= bit;
        fresh
    }

    /// How many keys of `self` are not in `other`.
    pub(crate) fn missing_from(&self, other: &Keys) -> u64 {
        self.0
            .iter()
            .enumerate()
            .map(|(i, w)| (w & !other.0.get(i).copied().unwrap_or(0)).count_ones() as u64)
            .sum()
    }
}

/// What one client received, checked as it arrives.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub seen: Keys,
    pub received: u64,
    pub duplicated: u64,
    pub out_of_order: u64,
    pub last_seq: u64,
}

/// The fields of a frame the clients need; `data` is skipped.
#[derive(Deserialize)]
pub(crate) struct Wire<'a> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    #[serde(default)]
    pub id: Option<&'a str>,
    #[serde(default)]
    pub cursor: Option<&'a str>,
    #[serde(default)]
    pub complete: Option<bool>,
    #[serde(default)]
    pub reason: Option<&'a str>,
}

pub(crate) fn seq_of(cursor: &str) -> u64 {
    cursor
        .rsplit('-')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("cursor {cursor:?}"))
}

/// One client: its identity, where it stands, and what it got.
pub(crate) struct Client {
    pub user: String,
    pub token: String,
    pub transport: Transport,
    pub slow: bool,
    pub cursor: String,
    pub tally: Tally,
    pub gapped: u32,
    pub saw_end: bool,
    pub sessions: u32,
    pub rng: StdRng,
}

/// One connection's plan.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Session {
    pub length: Duration,
    pub exit: Exit,
    pub stall: Option<Duration>,
}

/// How a session ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Our deadline, or `END_ID` seen in the final session.
    Ours,
    /// The server closed (or reset) the connection.
    Server,
    /// Could not connect or handshake.
    Failed,
}

impl Client {
    /// Handles one frame's JSON; true if it was a `close` frame.
    pub(crate) fn on_frame(&mut self, text: &str, faults: &Faults) -> bool {
        let wire: Wire<'_> =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("bad frame ({e}): {text}"));
        match wire.kind {
            "message" => {
                let (id, cursor) = (wire.id.expect("id"), wire.cursor.expect("cursor"));
                let (key, seq) = (key_of(id), seq_of(cursor));
                let t = &mut self.tally;
                t.received += 1;
                t.duplicated += u64::from(!t.seen.insert(key));
                t.out_of_order += u64::from(seq <= t.last_seq);
                t.last_seq = seq;
                cursor.clone_into(&mut self.cursor);
                self.saw_end |= id == END_ID;
            }
            "recover" => self.gapped += u32::from(wire.complete == Some(false)),
            "reconnect" => {
                if let Some(cursor) = wire.cursor {
                    cursor.clone_into(&mut self.cursor);
                }
            }
            "close" => {
                if wire.reason == Some("slow") {
                    bump(&faults.slow_close_frames);
                }
                return true;
            }
            other => panic!("unexpected frame type {other}: {text}"),
        }
        false
    }

    /// A random session; a stalling client's first one always stalls.
    pub(crate) fn next_session(&mut self, plan: &Plan) -> Session {
        self.sessions += 1;
        let length = Duration::from_millis(self.rng.random_range(300..2500));
        let exit = match self.rng.random_range(0..10) {
            0..4 => Exit::Rst,
            4..8 => Exit::Fin,
            _ => Exit::Clean,
        };
        let stalls = self.slow && (self.sessions == 1 || self.rng.random_bool(plan.restall));
        let stall = stalls.then_some(plan.stall);
        Session {
            length,
            exit,
            stall,
        }
    }

    pub(crate) fn query(&self) -> String {
        format!("token={}&cursor={}", self.token, self.cursor)
    }
}
