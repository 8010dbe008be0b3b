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
//! A broadcast's shards are not dealt out in advance: the lanes claim
//! them one at a time ([`Claims`]), so a lane that gets less of the
//! CPU (it shares its core with the readers it wakes) does fewer of them,
//! and every lane works until the broadcast is done. With a fixed half
//! each, one lane finished its half at 43 ms of a 10,000-recipient
//! broadcast and left its core idle while the other needed 75 ms
//! (README, Performance).
//!
//! | what | value |
//! |---|---|
//! | shards | [`SHARDS`] (128) |
//! | a connection's shard | `id % SHARDS`, for its life |
//! | a shard's lane, of `count` | `shard % count` (a broadcast's: whichever lane claims it) |
//! | a broadcast's pieces | shard 0 in [`HEAD_PARTS`] parts, then shards 1 to 127 whole ([`Piece::of_broadcast`]) |
//!
//! A broadcast's first pieces are small so that whoever hands it over (a
//! push, a bus's receiver) can deliver one itself while the lanes wake:
//! its first recipient then waits for no thread's wake-up (a few tens of
//! microseconds on a VM), and the caller holds on for a few sends only.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// Parts shard 0 is cut into for a broadcast's first claims: about 5
/// connections each at 10,000, 9 at 19,000 (see the module's doc).
pub(crate) const HEAD_PARTS: usize = 16;

/// What a walk copies out of the table at once: the connections of shard
/// `shard` whose `(id / SHARDS) % of == part` (a whole shard: part 0 of 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    shard: usize,
    part: u64,
    of: u64,
}

impl Piece {
    /// All of shard `shard`.
    pub(crate) fn shard(shard: usize) -> Self {
        Self {
            shard,
            part: 0,
            of: 1,
        }
    }

    /// Piece `n` of a broadcast's [`Claims::broadcast`]: below
    /// [`HEAD_PARTS`] a part of shard 0, then shards 1 to `SHARDS - 1`.
    pub(crate) fn of_broadcast(n: usize) -> Self {
        if n < HEAD_PARTS {
            Self {
                shard: 0,
                part: n as u64,
                of: HEAD_PARTS as u64,
            }
        } else {
            Self::shard(n - HEAD_PARTS + 1)
        }
    }

    /// Whether connection `id` of this piece's shard is in it (a whole
    /// shard takes no division per connection).
    fn holds(self, id: ConnId) -> bool {
        self.of == 1 || (id / SHARDS as u64) % self.of == self.part
    }
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

    /// Calls `each` for every connection in `pieces` (of shards below
    /// [`SHARDS`]), piece by piece: a piece's connections are copied out
    /// under its shard's read lock, and `each` runs after the lock is let
    /// go.
    pub(crate) fn walk(
        &self,
        pieces: impl IntoIterator<Item = Piece>,
        mut each: impl FnMut(&Arc<Conn>),
    ) {
        let mut batch: Vec<Arc<Conn>> = Vec::new();
        for piece in pieces {
            let Some(shard) = self.shards.get(piece.shard) else {
                continue;
            };
            batch.extend(
                shard
                    .0
                    .read()
                    .iter()
                    .filter(|(id, _)| piece.holds(**id))
                    .map(|(_, conn)| Arc::clone(conn)),
            );
            for conn in batch.drain(..) {
                each(&conn);
            }
        }
    }
}

/// Pieces of one delivery (a broadcast's shards of this table, or a
/// channel's members in chunks), handed to whichever lane asks next: each
/// piece once, to one lane, however many lanes ask and whenever.
#[derive(Debug)]
pub(crate) struct Claims {
    next: AtomicUsize,
    count: usize,
}

impl Claims {
    /// Pieces `0..count`.
    pub(crate) fn new(count: usize) -> Self {
        Self {
            next: AtomicUsize::new(0),
            count,
        }
    }

    /// Every piece of a broadcast over the table ([`Piece::of_broadcast`]).
    pub(crate) fn broadcast() -> Self {
        Self::new(HEAD_PARTS + SHARDS - 1)
    }

    /// The next piece nobody has claimed, or `None` once all are.
    pub(crate) fn claim(&self) -> Option<usize> {
        let piece = self.next.fetch_add(1, Ordering::Relaxed);
        (piece < self.count).then_some(piece)
    }

    /// The next piece nobody has claimed if it is below `limit`, else
    /// `None` (and nothing is claimed).
    pub(crate) fn claim_below(&self, limit: usize) -> Option<usize> {
        let limit = limit.min(self.count);
        self.next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |next| {
                (next < limit).then_some(next + 1)
            })
            .ok()
    }

    /// The pieces this caller claims, one at a time as it walks them.
    pub(crate) fn walk(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::from_fn(|| self.claim())
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
        table.walk(
            (0..SHARDS).filter(|shard| shard % 2 == 1).map(Piece::shard),
            |c| met.push(c.id),
        );
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
        table.walk((0..SHARDS).map(Piece::shard), |c| {
            table.remove(c.id);
        });
        assert!(table.all().is_empty());
    }

    #[test]
    fn a_claim_past_the_last_piece_is_none() {
        let claims = Claims::new(3);
        assert_eq!(claims.walk().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(claims.claim(), None);
        assert_eq!(Claims::new(0).claim(), None);
    }

    #[test]
    fn every_shard_is_claimed_once_by_lanes_claiming_at_once() {
        let claims = Claims::new(SHARDS);
        let taken: Vec<Vec<usize>> = std::thread::scope(|scope| {
            let lanes: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| claims.walk().collect::<Vec<_>>()))
                .collect();
            lanes
                .into_iter()
                .map(|lane| lane.join().expect("lane"))
                .collect()
        });
        let mut all: Vec<usize> = taken.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..SHARDS).collect::<Vec<_>>());
        assert_eq!(claims.claim(), None, "nothing is left once all are claimed");
    }

    #[test]
    fn a_claimed_broadcast_meets_every_connection_once() {
        let table = ConnTable::default();
        // Enough for every part of shard 0 to hold several.
        for id in 1..=5000 {
            table.insert(conn(id));
        }
        let claims = Claims::broadcast();
        let mut met = Vec::new();
        // Two walkers taking turns, as two lanes might.
        let (mut first, mut second) = (claims.walk(), claims.walk());
        loop {
            let a = first.next();
            let b = second.next();
            if a.is_none() && b.is_none() {
                break;
            }
            table.walk(a.into_iter().chain(b).map(Piece::of_broadcast), |c| {
                met.push(c.id)
            });
        }
        met.sort_unstable();
        assert_eq!(met, (1..=5000).collect::<Vec<_>>());
    }

    #[test]
    fn a_broadcasts_first_pieces_are_small_parts_of_shard_zero() {
        let table = ConnTable::default();
        for id in 1..=10_000 {
            table.insert(conn(id));
        }
        let mut sizes = Vec::new();
        for n in 0..HEAD_PARTS {
            let mut met = Vec::new();
            table.walk([Piece::of_broadcast(n)], |c| met.push(c.id));
            assert!(met.iter().all(|id| shard_of(*id) == 0), "piece {n}");
            sizes.push(met.len());
        }
        // Shard 0 holds 78 of 10,000: 4 or 5 a part.
        assert!(sizes.iter().all(|n| (4..=5).contains(n)), "{sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 78);
        assert_eq!(Piece::of_broadcast(HEAD_PARTS), Piece::shard(1));
        assert_eq!(
            Piece::of_broadcast(HEAD_PARTS + SHARDS - 2),
            Piece::shard(SHARDS - 1)
        );
    }

    #[test]
    fn a_claim_below_a_limit_takes_nothing_at_or_past_it() {
        let claims = Claims::new(5);
        assert_eq!(claims.claim_below(2), Some(0));
        assert_eq!(claims.claim_below(2), Some(1));
        assert_eq!(claims.claim_below(2), None);
        assert_eq!(claims.claim(), Some(2), "the refused claim took nothing");
        assert_eq!(
            claims.claim_below(99),
            Some(3),
            "the limit is the count at most"
        );
        assert_eq!(claims.claim(), Some(4));
        assert_eq!(claims.claim_below(99), None);
    }
}
