//! The connection table: every live connection by number, in shards that
//! the fan-out lanes walk one at a time.
//!
//! A broadcast used to snapshot its lane's share of the whole map (an
//! `Arc` clone per connection, 2.2–2.5 ms for 10,000) before its first
//! write. Here a connection's shard is fixed by its number
//! (`id % SHARDS`) and each shard belongs to one lane, so a lane walks
//! only its own shards: it copies one shard's connections out (about
//! `n / SHARDS`, microseconds), lets go of the shard's lock, writes to
//! them, and moves on. The first write follows the publish within
//! microseconds, and no socket is written under a shard's lock (an attach
//! or detach waits at most for one shard's copy).
//!
//! | what | value |
//! |---|---|
//! | shards | [`SHARDS`] (128) |
//! | a connection's shard | `id % SHARDS`, for its life |
//! | a shard's lane, of `count` | `shard % count` |

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::conn::{Conn, ConnId};

/// Shards in a table. A power of two so `id % SHARDS` is a mask; 128
/// keeps a shard to about 80 connections at 10,000 and 150 at 19,000,
/// so copying one out costs a few microseconds.
pub(crate) const SHARDS: usize = 128;

/// The shard connection `id` lives in, for its life.
pub(crate) fn shard_of(id: ConnId) -> usize {
    (id % SHARDS as u64) as usize
}

/// One shard, on its own cache line so two lanes' locks do not share one.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Shard(RwLock<HashMap<ConnId, Arc<Conn>>>);

/// Every live connection of this process, by number.
#[derive(Debug)]
pub(crate) struct ConnTable {
    shards: Box<[Shard]>,
}

impl Default for ConnTable {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
        }
    }
}

impl ConnTable {
    fn shard(&self, id: ConnId) -> &RwLock<HashMap<ConnId, Arc<Conn>>> {
        &self.shards[shard_of(id)].0
    }

    /// Adds `conn` under its number.
    pub(crate) fn insert(&self, conn: Arc<Conn>) {
        self.shard(conn.id).write().insert(conn.id, conn);
    }

    /// Removes connection `id`; `None` if it was not here.
    pub(crate) fn remove(&self, id: ConnId) -> Option<Arc<Conn>> {
        self.shard(id).write().remove(&id)
    }

    /// Connection `id`, if it is here.
    pub(crate) fn get(&self, id: ConnId) -> Option<Arc<Conn>> {
        self.shard(id).read().get(&id).cloned()
    }

    /// Whether connection `id` is here.
    pub(crate) fn contains(&self, id: ConnId) -> bool {
        self.shard(id).read().contains_key(&id)
    }

    /// Every connection here (drain, shutdown).
    pub(crate) fn all(&self) -> Vec<Arc<Conn>> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            all.extend(shard.0.read().values().cloned());
        }
        all
    }

    /// Calls `each` for every connection in the shards `owns` picks,
    /// shard by shard: a shard's connections are copied out under its
    /// read lock, and `each` runs after the lock is let go.
    pub(crate) fn walk(&self, owns: impl Fn(usize) -> bool, mut each: impl FnMut(&Arc<Conn>)) {
        let mut batch: Vec<Arc<Conn>> = Vec::new();
        for (index, shard) in self.shards.iter().enumerate() {
            if !owns(index) {
                continue;
            }
            batch.extend(shard.0.read().values().cloned());
            for conn in batch.drain(..) {
                each(&conn);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Transport, UserId};

    fn conn(id: ConnId) -> Arc<Conn> {
        let user = UserId::parse("u").expect("valid");
        Arc::new(Conn::new(id, user, Transport::Ws, 8, None, 0))
    }

    #[test]
    fn a_connection_is_found_until_it_is_removed() {
        let table = ConnTable::default();
        table.insert(conn(7));
        assert!(table.contains(7));
        assert_eq!(table.get(7).map(|c| c.id), Some(7));
        assert_eq!(table.remove(7).map(|c| c.id), Some(7));
        assert!(table.get(7).is_none());
        assert!(table.remove(7).is_none());
    }

    #[test]
    fn walking_the_owned_shards_meets_each_of_their_connections_once() {
        let table = ConnTable::default();
        for id in 1..=1000 {
            table.insert(conn(id));
        }
        let mut met = Vec::new();
        table.walk(|shard| shard % 2 == 1, |c| met.push(c.id));
        met.sort_unstable();
        let odd: Vec<ConnId> = (1..=1000).filter(|id| shard_of(*id) % 2 == 1).collect();
        assert_eq!(met, odd);
        assert_eq!(table.all().len(), 1000);
    }

    #[test]
    fn a_walk_may_remove_what_it_meets_without_deadlock() {
        let table = ConnTable::default();
        for id in 1..=300 {
            table.insert(conn(id));
        }
        table.walk(
            |_| true,
            |c| {
                table.remove(c.id);
            },
        );
        assert!(table.all().is_empty());
    }
}
