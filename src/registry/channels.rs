//! The channel index: each channel's local connections, so a channel's
//! message reaches its subscribers without walking every connection.
//!
//! Joining and leaving are O(1) (a hash map per channel). A channel exists
//! in the index while it has a connection here; the last one out removes
//! it. Each connection also keeps its own list (`Conn::channels`), which
//! is the authority at delivery time: the fan-out checks it under the
//! connection's lock while queueing, and `unsubscribe` changes it under the
//! same lock before its answer is queued, so no message of a channel
//! follows its `unsubscribed` frame.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::sync::mpsc;

use super::conn::{Conn, ConnId};
use crate::protocol::{Channel, UserId};

/// One connection of `user` joined (`+1`) or left (`-1`) a channel: what
/// a cluster-wide presence table needs to follow.
pub(crate) type MembershipChange = (Channel, UserId, i64);

/// Every channel with a connection in this process.
#[derive(Debug, Default)]
pub(crate) struct ChannelIndex {
    channels: DashMap<Channel, HashMap<ConnId, Arc<Conn>>>,
    subscriptions: AtomicUsize,
    watchers: parking_lot::RwLock<Vec<mpsc::UnboundedSender<MembershipChange>>>,
}

/// Who is in a channel on this node.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ChannelPresence {
    /// Connections in the channel.
    pub subscribers: usize,
    /// Distinct users among them, sorted.
    pub users: Vec<UserId>,
}

impl ChannelIndex {
    /// Adds `conn` to `channel`; false if it was in it already.
    pub(crate) fn join(&self, channel: &Channel, conn: &Arc<Conn>) -> bool {
        let mut members = self.channels.entry(channel.clone()).or_default();
        let fresh = members.insert(conn.id, Arc::clone(conn)).is_none();
        if fresh {
            self.subscriptions.fetch_add(1, Ordering::Relaxed);
            self.tell(channel, &conn.user, 1);
        }
        fresh
    }

    /// Sends every later join and leave to `watcher` (as well as to the
    /// watchers before it).
    pub(crate) fn watch(&self, watcher: mpsc::UnboundedSender<MembershipChange>) {
        self.watchers.write().push(watcher);
    }

    fn tell(&self, channel: &Channel, user: &UserId, delta: i64) {
        for watcher in self.watchers.read().iter() {
            let _ = watcher.send((channel.clone(), user.clone(), delta));
        }
    }

    /// Removes `conn` from `channel`; the channel goes with its last
    /// connection. False if it was not in it.
    pub(crate) fn leave(&self, channel: &Channel, conn: ConnId) -> bool {
        let Entry::Occupied(mut members) = self.channels.entry(channel.clone()) else {
            return false;
        };
        let left = members.get_mut().remove(&conn);
        if members.get().is_empty() {
            members.remove();
        }
        let Some(left) = left else {
            return false;
        };
        self.subscriptions.fetch_sub(1, Ordering::Relaxed);
        self.tell(channel, &left.user, -1);
        true
    }

    /// How many connections are in `channel` here.
    pub(crate) fn size(&self, channel: &Channel) -> usize {
        self.channels
            .get(channel)
            .map_or(0, |members| members.len())
    }

    /// The connections of `channel` that `keep` selects, cloned out so no
    /// lock is held while writing to them.
    pub(crate) fn members(
        &self,
        channel: &Channel,
        keep: impl Fn(ConnId) -> bool,
    ) -> Vec<Arc<Conn>> {
        self.channels.get(channel).map_or_else(Vec::new, |members| {
            members
                .iter()
                .filter(|(id, _)| keep(**id))
                .map(|(_, conn)| Arc::clone(conn))
                .collect()
        })
    }

    /// Connections and distinct users in `channel` here.
    pub(crate) fn presence(&self, channel: &Channel) -> ChannelPresence {
        let Some(members) = self.channels.get(channel) else {
            return ChannelPresence::default();
        };
        let mut users: Vec<UserId> = members.values().map(|c| c.user.clone()).collect();
        users.sort_unstable();
        users.dedup();
        ChannelPresence {
            subscribers: members.len(),
            users,
        }
    }

    /// Each channel with connections here, and its users with their
    /// connection counts (for cluster-wide presence snapshots).
    pub(crate) fn snapshot(&self) -> Vec<(Channel, Vec<(UserId, usize)>)> {
        self.channels
            .iter()
            .map(|entry| {
                let mut counts: HashMap<UserId, usize> = HashMap::new();
                for conn in entry.value().values() {
                    *counts.entry(conn.user.clone()).or_default() += 1;
                }
                (entry.key().clone(), counts.into_iter().collect())
            })
            .collect()
    }

    /// Channels with at least one connection here.
    pub(crate) fn len(&self) -> usize {
        self.channels.len()
    }

    /// Connection-channel pairs here.
    pub(crate) fn subscriptions(&self) -> usize {
        self.subscriptions.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Transport;

    fn conn(id: ConnId, user: &str) -> Arc<Conn> {
        let user = UserId::parse(user).expect("valid");
        Arc::new(Conn::new(id, user, Transport::Ws, 8, None, 0))
    }

    fn channel(name: &str) -> Channel {
        Channel::parse(name).expect("valid")
    }

    #[test]
    fn members_are_found_by_channel_and_the_last_one_out_removes_it() {
        let index = ChannelIndex::default();
        let (a, b, c) = (conn(1, "alice"), conn(2, "bob"), conn(3, "alice"));
        let vip = channel("vip");
        assert!(index.join(&vip, &a));
        assert!(!index.join(&vip, &a), "joining twice changes nothing");
        assert!(index.join(&vip, &b));
        assert!(index.join(&vip, &c));
        assert!(index.join(&channel("news"), &b));
        assert_eq!((index.len(), index.subscriptions()), (2, 4));
        let mut ids: Vec<ConnId> = index.members(&vip, |_| true).iter().map(|c| c.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, [1, 2, 3]);
        let odd: Vec<ConnId> = index
            .members(&vip, |id| id % 2 == 1)
            .iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(odd.len(), 2);
        let presence = index.presence(&vip);
        assert_eq!(presence.subscribers, 3);
        assert_eq!(
            presence
                .users
                .iter()
                .map(UserId::as_str)
                .collect::<Vec<_>>(),
            ["alice", "bob"]
        );
        assert!(index.leave(&vip, 1));
        assert!(!index.leave(&vip, 1));
        assert!(index.leave(&vip, 2));
        assert!(index.leave(&vip, 3));
        assert_eq!((index.len(), index.subscriptions()), (1, 1));
        assert!(index.members(&vip, |_| true).is_empty());
        assert_eq!(index.presence(&vip), ChannelPresence::default());
        assert!(!index.leave(&channel("nowhere"), 2));
    }
}
