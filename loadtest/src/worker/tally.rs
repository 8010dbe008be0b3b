//! A worker's accounting: which connection got which message when, and
//! what went wrong. Pure state, updated by the connection tasks.

use std::collections::HashMap;

use crate::channels::{self, ChannelPlan, Dest};
use crate::hist::{self, Hist};
use crate::worker::protocol::{Outcome, SeqStat};

/// Distinct error messages kept.
const MAX_ERRORS: usize = 5;

/// When a silent connection opened, µs since the epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opened {
    /// Its handshake request was about to be sent.
    pub request_us: u64,
    /// Its upgrade answer was read.
    pub open_us: u64,
}

/// Counts for one worker's connections.
#[derive(Debug)]
pub(crate) struct Tally {
    expect: u64,
    /// Arrivals per (connection, seq), saturating: `conn * (expect+1) + seq`.
    counts: Vec<u8>,
    /// Distinct expected messages per connection.
    distinct: Vec<u32>,
    /// Connections that got a `recover` with `complete: false`.
    told_gap: Vec<bool>,
    /// Highest seq seen per connection.
    highest: Vec<u64>,
    /// With channels: what each connection expects, counted per
    /// (connection, stream).
    streams: Option<Streams>,
    /// Connections opened (first attempts only).
    pub opened: u64,
    /// First attempts that failed.
    pub failed: u64,
    /// Silent connections that ended (or any connection that gave up).
    pub ended: u64,
    /// Messages the opened connections expect, summed.
    opened_expect: u64,
    /// Handshake times, µs.
    pub handshake: Hist,
    latency: Hist,
    close_lateness: Hist,
    end_lateness: Hist,
    out: Outcome,
}

/// The counts of a run with channels: each connection expects the
/// broadcasts and the pushes to its channels (from `expect_from` on), one
/// frame per (push, channel).
#[derive(Debug)]
struct Streams {
    plan: ChannelPlan,
    expect_from: u64,
    /// Channels per local connection, sorted.
    channels: Vec<Vec<u64>>,
    /// Frames each local connection expects.
    expect_of: Vec<u32>,
    /// Frames expected per seq over the local connections.
    per_seq: Vec<u32>,
    /// Arrivals per (connection, seq, stream), saturating.
    seen: HashMap<(u32, u32, u32), u8>,
    /// Highest seq per (connection, stream).
    highest: HashMap<(u32, u32), u32>,
}

impl Streams {
    fn new(plan: ChannelPlan, first_conn: u64, conns: usize, expect_from: u64) -> Self {
        let channels: Vec<Vec<u64>> = (0..conns as u64)
            .map(|i| plan.channels_of(first_conn + i))
            .collect();
        let (broadcasts, per_channel) = plan.counts_from(expect_from);
        let expect_of = channels
            .iter()
            .map(|cs| broadcasts as u32 + cs.iter().map(|&j| per_channel[j as usize]).sum::<u32>())
            .collect();
        let mut members = vec![0u32; plan.count as usize];
        for cs in &channels {
            for &j in cs {
                members[j as usize] += 1;
            }
        }
        let last = plan.last_seq();
        let mut per_seq = vec![0u32; last as usize + 1];
        for seq in expect_from.max(1)..=last {
            per_seq[seq as usize] = match plan.dest(seq) {
                Some(Dest::Broadcast) => conns as u32,
                Some(dest) => plan
                    .dest_channels(dest)
                    .iter()
                    .map(|&j| members[j as usize])
                    .sum(),
                None => 0,
            };
        }
        Self {
            plan,
            expect_from,
            channels,
            expect_of,
            per_seq,
            seen: HashMap::new(),
            highest: HashMap::new(),
        }
    }

    /// The stream of a frame through `channel` to connection `conn` for
    /// push `seq`, if that connection should have got it.
    fn stream(&self, conn: usize, seq: u64, channel: Option<&str>) -> Option<u32> {
        if seq == 0 {
            // The warm-up broadcast.
            return channel.is_none().then_some(channels::BROADCAST);
        }
        if seq < self.expect_from {
            return None;
        }
        match (self.plan.dest(seq)?, channel) {
            (Dest::Broadcast, None) => Some(channels::BROADCAST),
            (dest @ Dest::Channels { .. }, Some(name)) => {
                let j = self.plan.parse(name)?;
                let ok = self.plan.dest_channels(dest).contains(&j)
                    && self.channels[conn].binary_search(&j).is_ok();
                ok.then_some(j as u32)
            }
            _ => None,
        }
    }
}

impl Tally {
    /// Counts for `conns` connections expecting messages `1..=expect`.
    #[cfg(test)]
    pub(crate) fn new(conns: usize, expect: u64) -> Self {
        Self::with_channels(conns, expect, None, 0, 0)
    }

    /// Counts for `conns` connections (global numbers from `first_conn`):
    /// without channels, each expects messages `1..=expect`; with them,
    /// what the plan sends to its streams from `expect_from` on.
    pub(crate) fn with_channels(
        conns: usize,
        expect: u64,
        plan: Option<ChannelPlan>,
        first_conn: u64,
        expect_from: u64,
    ) -> Self {
        let streams = plan.map(|p| Streams::new(p, first_conn, conns, expect_from));
        let per = (expect + 1) as usize;
        Self {
            expect,
            counts: if streams.is_some() {
                Vec::new()
            } else {
                vec![0; conns * per]
            },
            distinct: vec![0; conns],
            told_gap: vec![false; conns],
            highest: vec![0; conns],
            streams,
            opened: 0,
            failed: 0,
            ended: 0,
            opened_expect: 0,
            handshake: hist::new_hist(),
            latency: hist::new_hist(),
            close_lateness: hist::new_hist(),
            end_lateness: hist::new_hist(),
            out: Outcome {
                per_seq: vec![SeqStat::default(); per],
                ..Outcome::default()
            },
        }
    }

    /// Connections that got every expected message.
    pub(crate) fn complete(&self) -> u64 {
        self.out.complete
    }

    /// Messages connection `conn` expects.
    fn expect_of(&self, conn: usize) -> u64 {
        match &self.streams {
            Some(s) => u64::from(s.expect_of[conn]),
            None => self.expect,
        }
    }

    /// Whether connection `conn` has every expected message.
    pub(crate) fn is_complete(&self, conn: usize) -> bool {
        u64::from(self.distinct[conn]) >= self.expect_of(conn)
    }

    /// First arrivals of message `seq` to wait for, `opened` connections
    /// being open: each of them without channels; with channels, the
    /// frames the plan sends there (over every local connection).
    pub(crate) fn expecting(&self, seq: u64, opened: u64) -> u64 {
        match &self.streams {
            Some(s) if seq > 0 => s.per_seq.get(seq as usize).map_or(0, |&n| u64::from(n)),
            _ => opened,
        }
    }

    /// Connections that have message `seq`.
    pub(crate) fn got(&self, seq: u64) -> u64 {
        self.out.per_seq.get(seq as usize).map_or(0, |s| s.got)
    }

    /// A first connection attempt of connection `conn` succeeded after
    /// `handshake_us`.
    pub(crate) fn opened(&mut self, conn: usize, handshake_us: u64) {
        self.opened += 1;
        hist::record(&mut self.handshake, handshake_us);
        if self.streams.is_some() && self.expect_of(conn) == 0 {
            // Nothing to wait for: complete from the start.
            self.out.complete += 1;
        }
        self.opened_expect += self.expect_of(conn);
    }

    /// A first connection attempt failed.
    pub(crate) fn failed(&mut self, error: &str) {
        self.failed += 1;
        self.error(error);
    }

    /// Keeps `error` if it is new and there is room.
    pub(crate) fn error(&mut self, error: &str) {
        if self.out.errors.len() < MAX_ERRORS && !self.out.errors.iter().any(|e| e == error) {
            self.out.errors.push(error.to_owned());
        }
    }

    /// A reconnect succeeded (`true`) or failed.
    pub(crate) fn reconnected(&mut self, ok: bool) {
        if ok {
            self.out.reconnects += 1;
        } else {
            self.out.reconnect_failures += 1;
        }
    }

    /// A reconnect was refused with `503`.
    pub(crate) fn refused_503(&mut self) {
        self.out.reconnects_refused_503 += 1;
    }

    /// The server dropped a connection without a close frame.
    pub(crate) fn dropped(&mut self) {
        self.out.dropped += 1;
    }

    /// A `close` frame (or close code) `reason` arrived.
    pub(crate) fn closed(&mut self, reason: &str) {
        *self.out.closes.entry(reason.to_owned()).or_default() += 1;
    }

    /// A `recover` frame arrived on connection `conn`.
    pub(crate) fn recovered(&mut self, conn: usize, complete: bool) {
        if complete {
            self.out.recover_complete += 1;
        } else {
            self.out.recover_incomplete += 1;
            self.told_gap[conn] = true;
        }
    }

    /// Message `seq` (pushed at `ts_us`) reached connection `conn` at
    /// `now_us`, through `channel` if it names one.
    pub(crate) fn message(
        &mut self,
        conn: usize,
        seq: Option<u64>,
        channel: Option<&str>,
        ts_us: Option<u64>,
        now_us: u64,
    ) {
        let Some(seq) = seq.filter(|&s| s <= self.expect) else {
            self.out.unexpected += 1;
            return;
        };
        if let Some(streams) = &mut self.streams {
            let Some(stream) = streams.stream(conn, seq, channel) else {
                self.out.unexpected += 1;
                return;
            };
            let seen = streams
                .seen
                .entry((conn as u32, seq as u32, stream))
                .or_default();
            let before = *seen;
            *seen = before.saturating_add(1);
            if before > 0 {
                self.out.duplicates += 1;
                return;
            }
            let highest = streams.highest.entry((conn as u32, stream)).or_default();
            if (seq as u32) < *highest {
                self.out.out_of_order += 1;
            }
            *highest = (*highest).max(seq as u32);
        } else {
            let slot = conn * (self.expect as usize + 1) + seq as usize;
            let before = self.counts[slot];
            self.counts[slot] = before.saturating_add(1);
            if before > 0 {
                self.out.duplicates += 1;
                return;
            }
            if seq < self.highest[conn] {
                self.out.out_of_order += 1;
            }
            self.highest[conn] = self.highest[conn].max(seq);
        }
        let stat = &mut self.out.per_seq[seq as usize];
        stat.got += 1;
        stat.first_us = if stat.first_us == 0 {
            now_us
        } else {
            stat.first_us.min(now_us)
        };
        stat.last_us = stat.last_us.max(now_us);
        if seq == 0 {
            return;
        }
        if let Some(ts) = ts_us {
            hist::record(&mut self.latency, now_us.saturating_sub(ts));
        }
        self.out.delivered += 1;
        self.distinct[conn] += 1;
        if u64::from(self.distinct[conn]) == self.expect_of(conn) {
            self.out.complete += 1;
        }
    }

    /// A silent connection opened at `opened`, saw its close frame at
    /// `close_us` (if any) and its end at `end_us`.
    ///
    /// The server's idle clock starts somewhere between the request and
    /// the upgrade answer. Lateness is measured from the answer plus the
    /// idle timeout (a close inside the handshake's uncertainty counts as
    /// 0 late); a close is early only if it came before the request plus
    /// the idle timeout, which no correct server can do.
    pub(crate) fn silent_ended(
        &mut self,
        opened: Opened,
        idle_ms: u64,
        close_us: Option<u64>,
        end_us: u64,
    ) {
        self.ended += 1;
        let deadline = opened.open_us + idle_ms * 1000;
        let earliest = opened.request_us + idle_ms * 1000;
        if let Some(close) = close_us {
            if close >= earliest {
                hist::record(&mut self.close_lateness, close.saturating_sub(deadline));
            } else {
                self.out.early += 1;
                let early_ms = (earliest - close) as f64 / 1000.0;
                self.out.early_max_ms = self.out.early_max_ms.max(early_ms);
            }
        }
        hist::record(&mut self.end_lateness, end_us.saturating_sub(deadline));
    }

    /// The outcome as of now.
    pub(crate) fn outcome(&self, silent: bool) -> Outcome {
        let mut out = self.out.clone();
        out.opened = self.opened;
        out.latency = hist::to_pairs(&self.latency);
        out.close_lateness = hist::to_pairs(&self.close_lateness);
        out.end_lateness = hist::to_pairs(&self.end_lateness);
        if silent {
            out.not_closed = self.opened.saturating_sub(self.ended);
        } else {
            // Lost: expected messages missing on connections that opened;
            // those on a connection the gateway told `complete: false`
            // are a gap it reported, counted apart.
            let missing = self.opened_expect.saturating_sub(out.delivered);
            out.lost_reported = (0..self.distinct.len())
                .filter(|&conn| self.told_gap[conn])
                .map(|conn| {
                    self.expect_of(conn)
                        .saturating_sub(u64::from(self.distinct[conn]))
                })
                .sum::<u64>()
                .min(missing);
            out.lost = missing - out.lost_reported;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_losses_and_completion_are_counted() {
        let mut t = Tally::new(2, 3);
        t.opened(0, 10);
        t.opened(1, 10);
        for seq in [0, 1, 2, 3, 2] {
            t.message(0, Some(seq), None, Some(100), 200);
        }
        t.message(1, Some(2), None, Some(100), 300);
        t.message(1, Some(1), None, None, 300);
        t.message(1, Some(9), None, None, 300);
        let out = t.outcome(false);
        assert_eq!(out.delivered, 5);
        assert_eq!(out.duplicates, 1);
        assert_eq!(out.lost, 1);
        assert_eq!(out.out_of_order, 1);
        assert_eq!(out.unexpected, 1);
        assert_eq!(out.complete, 1);
        assert!(t.is_complete(0) && !t.is_complete(1));
        assert_eq!(t.got(2), 2);
        assert_eq!(out.per_seq[2].last_us, 300);
    }

    #[test]
    fn a_gap_the_gateway_reported_is_not_a_silent_loss() {
        let mut t = Tally::new(3, 4);
        for conn in 0..3 {
            t.opened(conn, 10);
        }
        // Connection 0 was told `complete: false` and misses 2 and 3;
        // connection 1 was told all is there and misses 4; connection 2
        // has everything.
        t.recovered(0, false);
        t.recovered(1, true);
        for seq in [1, 4] {
            t.message(0, Some(seq), None, None, 100);
        }
        for seq in 1..=3 {
            t.message(1, Some(seq), None, None, 100);
        }
        for seq in 1..=4 {
            t.message(2, Some(seq), None, None, 100);
        }
        let out = t.outcome(false);
        assert_eq!(out.lost_reported, 2);
        assert_eq!(out.lost, 1);
        assert_eq!((out.recover_complete, out.recover_incomplete), (1, 1));
    }

    #[test]
    fn channel_frames_are_counted_per_connection_and_stream() {
        use crate::channels::{Layout, Phase};
        // Connections 0 and 1 in channels {0,1} and {2,3} of 4; pushes 1
        // and 2 are broadcasts, then one push each to channels (0,1), (2,3).
        let plan = ChannelPlan {
            prefix: "c.".into(),
            exact: false,
            count: 4,
            per_conn: 2,
            layout: Layout::Ring,
            members: 2,
            phases: vec![
                Phase {
                    first_seq: 1,
                    count: 2,
                    broadcast_every: 1,
                    width: 1,
                },
                Phase {
                    first_seq: 3,
                    count: 2,
                    broadcast_every: 0,
                    width: 2,
                },
            ],
        };
        let mut t = Tally::with_channels(2, 4, Some(plan), 0, 0);
        t.opened(0, 1);
        t.opened(1, 1);
        assert_eq!(
            t.expecting(3, 2),
            2,
            "both frames of push 3 go to connection 0"
        );
        for (seq, ch) in [(1, None), (2, None), (3, Some("c.0")), (3, Some("c.1"))] {
            t.message(0, Some(seq), ch, Some(1), 2);
        }
        t.message(0, Some(3), Some("c.1"), Some(1), 2);
        assert!(t.is_complete(0));
        t.message(1, Some(1), None, Some(1), 2);
        t.message(1, Some(3), Some("c.0"), Some(1), 2);
        t.message(1, Some(4), Some("c.2"), Some(1), 2);
        t.message(1, Some(2), Some("c.2"), Some(1), 2);
        let out = t.outcome(false);
        assert_eq!(out.delivered, 6);
        assert_eq!(out.duplicates, 1);
        assert_eq!(
            out.unexpected, 2,
            "push 3 is not for connection 1, push 2 is no channel's"
        );
        assert_eq!(out.lost, 2, "push 2, and push 4 through c.3");
        assert_eq!(out.complete, 1);
    }

    #[test]
    fn silent_lateness_is_measured_from_the_idle_deadline() {
        let mut t = Tally::new(3, 0);
        t.opened(0, 1);
        t.opened(1, 1);
        t.opened(2, 1);
        let opened = Opened {
            request_us: 990_000,
            open_us: 1_000_000,
        };
        t.silent_ended(opened, 1000, Some(2_050_000), 2_100_000);
        t.silent_ended(opened, 1000, Some(1_890_000), 1_950_000);
        t.silent_ended(opened, 1000, Some(1_995_000), 2_100_000);
        let out = t.outcome(true);
        assert_eq!(out.early, 1);
        assert_eq!(out.early_max_ms, 100.0);
        assert_eq!(out.not_closed, 0);
        let mut h = hist::new_hist();
        hist::add_pairs(&mut h, &out.close_lateness);
        assert_eq!(h.len(), 2, "one late, one inside the handshake window");
        assert!((h.max() as i64 - 50_000).abs() < 100);
        assert_eq!(h.min(), 1);
    }
}
