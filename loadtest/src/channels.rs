//! Channels (PROTOCOL.md, "v1.1: channels"): which connection is in which
//! channel (the layout) and where each push goes (the schedule). The
//! coordinator and every worker compute both from the same [`ChannelPlan`],
//! so a worker knows, for every frame, whether its connection should have
//! got it, and the coordinator knows how many deliveries to expect.
//!
//! Channels are named `<prefix><j>`, `j` in `0..count` (or `<prefix>`
//! alone for the one channel of an `exact` plan). Connection `g` is the
//! run's global connection number (user `<user-prefix><g>`).

use serde::{Deserialize, Serialize};

/// The stream number of broadcast frames (no `channel` field).
pub(crate) const BROADCAST: u32 = u32::MAX;

/// How connections are spread over the channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Layout {
    /// Connection g is in channels (g * K + i) mod C, i in 0..K: every
    /// connection in K channels, each channel shared by about N * K / C.
    Ring,
    /// Channel j has one subscriber, connection j mod N: every channel has
    /// exactly one subscriber, connections are in C / N channels (rounded
    /// down or up); K is ignored.
    Stripe,
}

/// One stretch of the schedule: pushes `first_seq .. first_seq + count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Phase {
    /// The first push's `seq`.
    pub first_seq: u64,
    /// Pushes.
    pub count: u64,
    /// Push k of the phase (from 0) is a broadcast when k is a multiple of
    /// this (0: never; 1: every push).
    pub broadcast_every: u64,
    /// Every other push goes to this many channels: (k * width + w) mod C,
    /// w in 0..width.
    pub width: u64,
}

/// Where one push goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dest {
    /// To everybody.
    Broadcast,
    /// To channels (first + w) mod C, w in 0..width.
    Channels {
        /// The first channel.
        first: u64,
        /// How many.
        width: u64,
    },
}

/// The layout and the schedule of a run with channels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChannelPlan {
    /// Channel names start with this.
    pub prefix: String,
    /// One channel, named `prefix` itself.
    pub exact: bool,
    /// Channels (C).
    pub count: u64,
    /// Channels per connection (K; ring layout).
    pub per_conn: u64,
    /// How connections are spread.
    pub layout: Layout,
    /// Connections `0..members` are in channels, the others in none (N
    /// of the layout).
    pub members: u64,
    /// The schedule, in `seq` order.
    pub phases: Vec<Phase>,
}

impl ChannelPlan {
    /// The name of channel `j`.
    pub(crate) fn name(&self, j: u64) -> String {
        if self.exact {
            self.prefix.clone()
        } else {
            format!("{}{j}", self.prefix)
        }
    }

    /// The number of channel `name` (`None`: not one of the plan's).
    pub(crate) fn parse(&self, name: &str) -> Option<u64> {
        if self.exact {
            return (name == self.prefix).then_some(0);
        }
        let j: u64 = name.strip_prefix(&self.prefix)?.parse().ok()?;
        (j < self.count).then_some(j)
    }

    /// The channels of connection `g`, sorted, without repeats.
    pub(crate) fn channels_of(&self, g: u64) -> Vec<u64> {
        if g >= self.members || self.count == 0 {
            return Vec::new();
        }
        let mut out: Vec<u64> = match self.layout {
            Layout::Ring => (0..self.per_conn.min(self.count))
                .map(|i| (g * self.per_conn + i) % self.count)
                .collect(),
            Layout::Stripe => (g..self.count).step_by(self.members as usize).collect(),
        };
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The `channels` query value of connection `g` (`None`: no channel).
    pub(crate) fn query_of(&self, g: u64) -> Option<String> {
        let names: Vec<String> = self
            .channels_of(g)
            .into_iter()
            .map(|j| self.name(j))
            .collect();
        (!names.is_empty()).then(|| names.join(","))
    }

    /// The highest `seq` of the schedule (0: none).
    pub(crate) fn last_seq(&self) -> u64 {
        self.phases
            .iter()
            .map(|p| p.first_seq + p.count)
            .max()
            .unwrap_or(1)
            - 1
    }

    /// Where push `seq` goes (`None`: not in the schedule).
    pub(crate) fn dest(&self, seq: u64) -> Option<Dest> {
        let phase = self
            .phases
            .iter()
            .find(|p| seq >= p.first_seq && seq < p.first_seq + p.count)?;
        let k = seq - phase.first_seq;
        if phase.broadcast_every > 0 && k.is_multiple_of(phase.broadcast_every) {
            return Some(Dest::Broadcast);
        }
        let width = phase.width.clamp(1, self.count.max(1));
        Some(Dest::Channels {
            first: (k * width) % self.count.max(1),
            width,
        })
    }

    /// The channels of `dest` (empty for a broadcast).
    pub(crate) fn dest_channels(&self, dest: Dest) -> Vec<u64> {
        match dest {
            Dest::Broadcast => Vec::new(),
            Dest::Channels { first, width } => (0..width)
                .map(|w| (first + w) % self.count.max(1))
                .collect(),
        }
    }

    /// Broadcasts with `seq >= from`, and per channel the pushes to it
    /// with `seq >= from`.
    pub(crate) fn counts_from(&self, from: u64) -> (u64, Vec<u32>) {
        let mut broadcasts = 0;
        let mut per_channel = vec![0u32; self.count as usize];
        for seq in from.max(1)..=self.last_seq() {
            match self.dest(seq) {
                Some(Dest::Broadcast) => broadcasts += 1,
                Some(dest) => {
                    for j in self.dest_channels(dest) {
                        per_channel[j as usize] += 1;
                    }
                }
                None => {}
            }
        }
        (broadcasts, per_channel)
    }

    /// Frames connections `conns` should get of the pushes with
    /// `seq >= from` (one per broadcast, one per push and channel the
    /// connection is in).
    pub(crate) fn expected(&self, conns: std::ops::Range<u64>, from: u64) -> u64 {
        let (broadcasts, per_channel) = self.counts_from(from);
        conns
            .map(|g| {
                broadcasts
                    + self
                        .channels_of(g)
                        .iter()
                        .map(|&j| u64::from(per_channel[j as usize]))
                        .sum::<u64>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(layout: Layout, count: u64, per_conn: u64, members: u64) -> ChannelPlan {
        ChannelPlan {
            prefix: "c.".into(),
            exact: false,
            count,
            per_conn,
            layout,
            members,
            phases: Vec::new(),
        }
    }

    #[test]
    fn ring_and_stripe_layouts() {
        let ring = plan(Layout::Ring, 1000, 10, 19_000);
        assert_eq!(ring.channels_of(0), (0..10).collect::<Vec<_>>());
        assert_eq!(ring.channels_of(101), (10..20).collect::<Vec<_>>());
        assert_eq!(ring.channels_of(19_000), Vec::<u64>::new());
        assert_eq!(
            ring.query_of(1).as_deref(),
            Some("c.10,c.11,c.12,c.13,c.14,c.15,c.16,c.17,c.18,c.19")
        );
        let stripe = plan(Layout::Stripe, 100_000, 0, 19_000);
        assert_eq!(
            stripe.channels_of(0),
            vec![0, 19_000, 38_000, 57_000, 76_000, 95_000]
        );
        assert_eq!(stripe.channels_of(5_000).len(), 5);
        let total: usize = (0..19_000).map(|g| stripe.channels_of(g).len()).sum();
        assert_eq!(total, 100_000, "every channel exactly one subscriber");
        assert_eq!(stripe.parse("c.99999"), Some(99_999));
        assert_eq!(stripe.parse("c.100000"), None);
        assert_eq!(stripe.parse("d.1"), None);
    }

    #[test]
    fn schedules_mix_broadcasts_and_channel_pushes() {
        let mut p = plan(Layout::Ring, 10, 5, 4);
        p.phases = vec![
            Phase {
                first_seq: 1,
                count: 3,
                broadcast_every: 1,
                width: 1,
            },
            Phase {
                first_seq: 4,
                count: 8,
                broadcast_every: 4,
                width: 2,
            },
        ];
        assert_eq!(p.last_seq(), 11);
        assert_eq!(p.dest(2), Some(Dest::Broadcast));
        assert_eq!(p.dest(4), Some(Dest::Broadcast));
        assert_eq!(p.dest(5), Some(Dest::Channels { first: 2, width: 2 }));
        assert_eq!(p.dest(12), None);
        assert_eq!(
            p.dest_channels(Dest::Channels { first: 9, width: 2 }),
            vec![9, 0]
        );
        let (b, per) = p.counts_from(1);
        assert_eq!(b, 5);
        assert_eq!(per.iter().sum::<u32>(), 12);
        // Connection 0 is in channels 0..5, connection 1 in 5..10.
        let seq_to_5 = p.dest(6).unwrap();
        assert_eq!(p.dest_channels(seq_to_5), vec![4, 5]);
        assert_eq!(
            p.expected(0..1, 4),
            2 + u64::from(per[0..5].iter().sum::<u32>())
        );
        let exact = ChannelPlan {
            exact: true,
            prefix: "c.hot".into(),
            count: 1,
            ..p
        };
        assert_eq!(exact.name(0), "c.hot");
        assert_eq!(exact.parse("c.hot"), Some(0));
        assert_eq!(exact.parse("c.hot0"), None);
    }
}
