//! Whether each shard's subscriptions still deliver. A lost connection or
//! a slot that moved is announced (a disconnection, an SUNSUBSCRIBE), but a
//! subscription can also go without a word: a resubscription that reached
//! a master just before it was demoted, one lost in a client reconnecting
//! under load. So every [`EVERY`] the node sends itself a probe on each
//! shard's barrier channel, which lives on the same master as the shard's
//! streams; a probe not back within [`LIMIT`] means the shard's
//! subscriptions are to be renewed and the shard caught up from history.
//!
//! Pure bookkeeping of when to send and when to give up; the bus sends the
//! probes and acts on a lost shard.

use std::time::Duration;

use tokio::time::Instant;

/// How often a shard is probed.
pub(crate) const EVERY: Duration = Duration::from_secs(5);

/// How long a probe may take to come back before its shard counts as lost.
pub(crate) const LIMIT: Duration = Duration::from_secs(5);

/// What the payload of a probe on a barrier channel reads.
pub(crate) const PAYLOAD: &[u8] = b"probe";

/// What a shard needs now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// Send it a probe.
    Send,
    /// Its probe did not come back in time: renew its subscriptions.
    Lost,
}

/// One shard's probe.
#[derive(Debug, Clone, Copy)]
struct State {
    /// When the probe now out was sent.
    sent: Option<Instant>,
    /// When the next one is due (none is out).
    next: Instant,
}

/// The probes of every shard.
#[derive(Debug)]
pub(crate) struct Probes {
    shards: Vec<State>,
}

impl Probes {
    /// `shards` shards, the first probes due one period from `now`.
    pub(crate) fn new(shards: usize, now: Instant) -> Self {
        Self {
            shards: vec![
                State {
                    sent: None,
                    next: now + EVERY,
                };
                shards
            ],
        }
    }

    /// The shards that need something at `now`: a probe sent (recorded as
    /// out from `now`), or a probe out for [`LIMIT`] given up on.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<(usize, Due)> {
        let mut due = Vec::new();
        for (shard, state) in self.shards.iter_mut().enumerate() {
            match state.sent {
                Some(sent) if now.saturating_duration_since(sent) >= LIMIT => {
                    *state = State {
                        sent: None,
                        next: now + EVERY,
                    };
                    due.push((shard, Due::Lost));
                }
                Some(_) => {}
                None if now >= state.next => {
                    state.sent = Some(now);
                    due.push((shard, Due::Send));
                }
                None => {}
            }
        }
        due
    }

    /// `shard`'s probe came back at `now`: the next one a period later.
    pub(crate) fn returned(&mut self, shard: usize, now: Instant) {
        if let Some(state) = self.shards.get_mut(shard) {
            *state = State {
                sent: None,
                next: now + EVERY,
            };
        }
    }

    /// Every probe out is forgotten and the next ones are due a period
    /// from `now` (while the node recovers, probes prove nothing).
    pub(crate) fn restart(&mut self, now: Instant) {
        for state in &mut self.shards {
            *state = State {
                sent: None,
                next: now + EVERY,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_is_due_before_a_period() {
        let t0 = Instant::now();
        let mut probes = Probes::new(2, t0);
        assert!(probes.due(t0).is_empty());
        assert!(probes.due(t0 + EVERY - MS).is_empty());
        assert_eq!(probes.due(t0 + EVERY), [(0, Due::Send), (1, Due::Send)]);
    }

    #[test]
    fn a_probe_back_in_time_schedules_the_next_a_period_later() {
        let t0 = Instant::now();
        let mut probes = Probes::new(1, t0);
        let sent = t0 + EVERY;
        assert_eq!(probes.due(sent), [(0, Due::Send)]);
        assert!(probes.due(sent + MS).is_empty(), "one probe out at a time");
        probes.returned(0, sent + 10 * MS);
        assert!(
            probes.due(sent + LIMIT + MS).is_empty(),
            "no loss once back"
        );
        assert!(probes.due(sent + 10 * MS + EVERY - MS).is_empty());
        assert_eq!(probes.due(sent + 10 * MS + EVERY), [(0, Due::Send)]);
    }

    #[test]
    fn a_probe_out_for_the_limit_loses_only_its_shard_once() {
        let t0 = Instant::now();
        let mut probes = Probes::new(2, t0);
        let sent = t0 + EVERY;
        assert_eq!(probes.due(sent).len(), 2);
        probes.returned(1, sent + MS);
        assert!(probes.due(sent + LIMIT - MS).is_empty());
        assert_eq!(probes.due(sent + LIMIT), [(0, Due::Lost)]);
        assert_eq!(
            probes.due(sent + LIMIT + MS),
            [(1, Due::Send)],
            "shard 0 lost once; shard 1 probed a period after its return"
        );
        assert_eq!(
            probes.due(sent + LIMIT + EVERY),
            [(0, Due::Send)],
            "probed again a period after the loss"
        );
    }

    #[test]
    fn a_restart_forgets_probes_out() {
        let t0 = Instant::now();
        let mut probes = Probes::new(1, t0);
        let sent = t0 + EVERY;
        assert_eq!(probes.due(sent), [(0, Due::Send)]);
        probes.restart(sent + MS);
        assert!(probes.due(sent + LIMIT).is_empty());
        assert_eq!(probes.due(sent + MS + EVERY), [(0, Due::Send)]);
    }

    #[test]
    fn a_stray_shard_number_is_ignored() {
        let t0 = Instant::now();
        let mut probes = Probes::new(1, t0);
        probes.returned(7, t0);
        assert_eq!(probes.due(t0 + EVERY), [(0, Due::Send)]);
    }
}
