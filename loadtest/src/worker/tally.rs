//! A worker's accounting: which connection got which message when, and
//! what went wrong. Pure state, updated by the connection tasks.

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
    /// Highest seq seen per connection.
    highest: Vec<u64>,
    /// Connections opened (first attempts only).
    pub opened: u64,
    /// First attempts that failed.
    pub failed: u64,
    /// Silent connections that ended (or any connection that gave up).
    pub ended: u64,
    /// Handshake times, µs.
    pub handshake: Hist,
    latency: Hist,
    close_lateness: Hist,
    end_lateness: Hist,
    out: Outcome,
}

impl Tally {
    /// Counts for `conns` connections expecting messages `1..=expect`.
    pub(crate) fn new(conns: usize, expect: u64) -> Self {
        let per = (expect + 1) as usize;
        Self {
            expect,
            counts: vec![0; conns * per],
            distinct: vec![0; conns],
            highest: vec![0; conns],
            opened: 0,
            failed: 0,
            ended: 0,
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

    /// Whether connection `conn` has every expected message.
    pub(crate) fn is_complete(&self, conn: usize) -> bool {
        u64::from(self.distinct[conn]) >= self.expect
    }

    /// Connections that have message `seq`.
    pub(crate) fn got(&self, seq: u64) -> u64 {
        self.out.per_seq.get(seq as usize).map_or(0, |s| s.got)
    }

    /// A first connection attempt succeeded after `handshake_us`.
    pub(crate) fn opened(&mut self, handshake_us: u64) {
        self.opened += 1;
        hist::record(&mut self.handshake, handshake_us);
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

    /// A `recover` frame arrived.
    pub(crate) fn recovered(&mut self, complete: bool) {
        if complete {
            self.out.recover_complete += 1;
        } else {
            self.out.recover_incomplete += 1;
        }
    }

    /// Message `seq` (pushed at `ts_us`) reached connection `conn` at
    /// `now_us`.
    pub(crate) fn message(
        &mut self,
        conn: usize,
        seq: Option<u64>,
        ts_us: Option<u64>,
        now_us: u64,
    ) {
        let Some(seq) = seq.filter(|&s| s <= self.expect) else {
            self.out.unexpected += 1;
            return;
        };
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
        if u64::from(self.distinct[conn]) == self.expect {
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
            // Lost: expected messages missing on connections that opened.
            let opened_expect = self.opened * self.expect;
            out.lost = opened_expect.saturating_sub(out.delivered);
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
        t.opened(10);
        t.opened(10);
        for seq in [0, 1, 2, 3, 2] {
            t.message(0, Some(seq), Some(100), 200);
        }
        t.message(1, Some(2), Some(100), 300);
        t.message(1, Some(1), None, 300);
        t.message(1, Some(9), None, 300);
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
    fn silent_lateness_is_measured_from_the_idle_deadline() {
        let mut t = Tally::new(3, 0);
        t.opened(1);
        t.opened(1);
        t.opened(1);
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
