//! Cursors: where a client stands in the message sequence.
//!
//! Every message, broadcast or personal, takes the next number of one
//! gateway-wide sequence when it is published, and every recipient gets the
//! same frame carrying the same cursor. A client's cursor therefore covers
//! both of its streams at once: on resume it receives every message of the
//! broadcast stream and of its own stream numbered after the cursor.
//!
//! The epoch names the history the numbers belong to; it changes when that
//! history is lost (an in-memory gateway restarting), so an old cursor is
//! recognised as not covered rather than misread.
//!
//! Wire form (opaque to clients): `<epoch, 16 hex digits>-<seq, decimal>`.
//!
//! A connection's cursor ([`ConnCursor`]) adds what its channels need:
//!
//! ```text
//! cursor   = position *("." position) ["~" coverage]
//! position = epoch "-" seq            ; one per shard of the broker, in shard order
//! coverage = *(8 HEXDIG)              ; one per channel covered, sorted, no repeats
//! ```
//!
//! Today every broker has one shard, so one position; a sharded broker
//! (streams spread over several Redis nodes, each with its own sequence)
//! writes one position per shard, and resume reads each shard from its own
//! position. The coverage names the channels the connection was in when
//! the cursor was written (32-bit FNV-1a of each name): a channel it names
//! resumes from the position, any other (joined since) starts live. A
//! connection in no channel writes no coverage, so its cursor is exactly a
//! v1 cursor. Size: 17 to 37 bytes per position, plus 1 + 8 per channel
//! (64 channels, the default limit: at most 550 bytes).

use std::fmt;
use std::str::FromStr;

/// A position in the message sequence of one history epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cursor {
    /// The history this position belongs to.
    pub epoch: u64,
    /// The number of the last message seen (0: none).
    pub seq: u64,
}

/// A string pushgate could not have issued as a cursor (`400 bad_cursor`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cursor is not one pushgate issued")]
pub struct BadCursor;

/// The longest cursor string accepted.
const MAX_CURSOR_LEN: usize = 16 + 1 + 20;

impl Cursor {
    /// A cursor at `seq` in `epoch`.
    pub fn new(epoch: u64, seq: u64) -> Self {
        Self { epoch, seq }
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}-{}", self.epoch, self.seq)
    }
}

impl FromStr for Cursor {
    type Err = BadCursor;

    fn from_str(raw: &str) -> Result<Self, BadCursor> {
        if raw.len() > MAX_CURSOR_LEN {
            return Err(BadCursor);
        }
        let (epoch, seq) = raw.split_once('-').ok_or(BadCursor)?;
        let digits = |s: &str, hex: bool| {
            !s.is_empty()
                && s.bytes().all(|b| {
                    if hex {
                        matches!(b, b'0'..=b'9' | b'a'..=b'f')
                    } else {
                        b.is_ascii_digit()
                    }
                })
        };
        // Exactly as `Display` writes it: lowercase hex, no leading zero.
        let padded = seq.len() > 1 && seq.starts_with('0');
        if epoch.len() != 16 || !digits(epoch, true) || !digits(seq, false) || padded {
            return Err(BadCursor);
        }
        Ok(Self {
            epoch: u64::from_str_radix(epoch, 16).map_err(|_| BadCursor)?,
            seq: seq.parse().map_err(|_| BadCursor)?,
        })
    }
}

/// The most positions a cursor may carry (shards of a broker).
pub const MAX_POSITIONS: usize = 64;

/// Where a node or a connection stands in every shard of the broker: one
/// [`Cursor`] per shard, in shard order (the positions part of a
/// connection's cursor). A broker of one shard has one, written exactly as
/// a v1 cursor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Position(Vec<Cursor>);

impl Position {
    /// One position per shard (at least one).
    pub fn new(shards: Vec<Cursor>) -> Self {
        debug_assert!(!shards.is_empty());
        Self(shards)
    }

    /// The position of a broker with one shard.
    pub fn single(cursor: Cursor) -> Self {
        Self(vec![cursor])
    }

    /// The positions, one per shard.
    pub fn shards(&self) -> &[Cursor] {
        &self.0
    }

    /// The first shard's position (the only one on a broker of one shard).
    pub fn first(&self) -> Cursor {
        self.0.first().copied().unwrap_or(Cursor::new(0, 0))
    }

    /// Moves shard `shard` to `to`: forward within its epoch, or to `to`
    /// whole when the epoch changed (that shard's history was lost and
    /// started again). Returns whether anything changed.
    pub fn advance(&mut self, shard: usize, to: Cursor) -> bool {
        let Some(at) = self.0.get_mut(shard) else {
            return false;
        };
        if at.epoch != to.epoch || at.seq < to.seq {
            *at = to;
            return true;
        }
        false
    }

    /// On a broker of one shard, the position raised to `seq` (what a
    /// connection was given may be past what the node recorded); a
    /// position of several shards is returned as it is (every frame a node
    /// gives carries the node's position, never more).
    pub fn at_least(mut self, seq: u64) -> Self {
        if let [only] = &mut self.0[..] {
            only.seq = only.seq.max(seq);
        }
        self
    }

    /// Sets shard `shard` to `to`, even backwards (its history lost
    /// writes: numbers past `to` will be given again).
    pub fn reset(&mut self, shard: usize, to: Cursor) {
        if let Some(at) = self.0.get_mut(shard) {
            *at = to;
        }
    }

    /// Raises every shard to at least `other`'s position in the same epoch
    /// (shards in another epoch keep their own).
    pub fn raise_to(&mut self, other: &Position) {
        for (at, to) in self.0.iter_mut().zip(&other.0) {
            if at.epoch == to.epoch && at.seq < to.seq {
                at.seq = to.seq;
            }
        }
    }

    /// Whether every shard is at or past `other`'s position in the same
    /// epoch.
    pub fn covers(&self, other: &Position) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|(at, to)| at.epoch == to.epoch && at.seq >= to.seq)
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, position) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{position}")?;
        }
        Ok(())
    }
}

/// A node's [`Position`] with its text kept beside it: a sharded node
/// writes its position into every message it hands over, and a message
/// moves one shard, so only that shard's part is formatted again (not
/// every shard's), and the text is rebuilt in place from the parts with
/// no allocation once every part has reached its widest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodePosition {
    position: Position,
    /// Each shard's cursor as text, in shard order.
    parts: Vec<String>,
    /// The parts joined by `.`: the position's `Display`.
    text: String,
}

impl NodePosition {
    /// Keeps `position` and its text.
    pub(crate) fn new(position: Position) -> Self {
        let parts: Vec<String> = position
            .0
            .iter()
            .map(|at| {
                let mut part = String::with_capacity(MAX_CURSOR_LEN);
                write_cursor(&mut part, *at);
                part
            })
            .collect();
        let mut node = Self {
            text: String::with_capacity(parts.len() * (MAX_CURSOR_LEN + 1)),
            position,
            parts,
        };
        node.join();
        node
    }

    /// The position.
    pub(crate) fn position(&self) -> &Position {
        &self.position
    }

    /// The position's text, as its `Display` writes it.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// [`Position::advance`], with the text following.
    pub(crate) fn advance(&mut self, shard: usize, to: Cursor) -> bool {
        let moved = self.position.advance(shard, to);
        if moved {
            self.rewrite(shard);
        }
        moved
    }

    /// [`Position::reset`], with the text following.
    pub(crate) fn reset(&mut self, shard: usize, to: Cursor) {
        self.position.reset(shard, to);
        self.rewrite(shard);
    }

    /// Formats shard `shard`'s part again and rejoins the text.
    fn rewrite(&mut self, shard: usize) {
        let (Some(at), Some(part)) = (self.position.0.get(shard), self.parts.get_mut(shard)) else {
            return;
        };
        part.clear();
        write_cursor(part, *at);
        self.join();
    }

    fn join(&mut self) {
        self.text.clear();
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                self.text.push('.');
            }
            self.text.push_str(part);
        }
    }
}

/// Writes `at` as its `Display` does.
fn write_cursor(out: &mut String, at: Cursor) {
    use fmt::Write as _;
    let _ = write!(out, "{at}");
}

/// The most channels a cursor's coverage may name.
pub const MAX_COVERED: usize = 10_000;

/// The channels a connection's cursor covers, as sorted 32-bit FNV-1a
/// hashes of their names: compact, and the same on every node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Coverage(Vec<u32>);

impl Coverage {
    /// The coverage of a connection in `names`.
    pub fn of<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut hashes: Vec<u32> = names.into_iter().map(fnv1a).collect();
        hashes.sort_unstable();
        hashes.dedup();
        Self(hashes)
    }

    /// Whether a cursor with this coverage covers channel `name`.
    pub fn covers(&self, name: &str) -> bool {
        self.0.binary_search(&fnv1a(name)).is_ok()
    }

    /// Whether it names no channel.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// What follows the position in a cursor: `~` and 8 hex digits per
    /// channel, or nothing for none.
    pub fn suffix(&self) -> String {
        if self.0.is_empty() {
            return String::new();
        }
        let mut out = String::with_capacity(1 + 8 * self.0.len());
        out.push('~');
        for hash in &self.0 {
            out.push_str(&format!("{hash:08x}"));
        }
        out
    }
}

/// 32-bit FNV-1a: stable across builds and machines (cursors travel
/// between nodes and outlive processes), unlike std's hasher.
fn fnv1a(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// A cursor as a client hands it back: its positions and the channels it
/// covers (see the module's grammar).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnCursor {
    /// One position per shard (one today).
    pub positions: Vec<Cursor>,
    /// The channels it covers.
    pub coverage: Coverage,
}

impl ConnCursor {
    /// Its positions, if it has one per shard of a broker with `shards`
    /// shards; `None` if it was written for another layout.
    pub fn position(&self, shards: usize) -> Option<Position> {
        (self.positions.len() == shards).then(|| Position(self.positions.clone()))
    }

    /// Where a client with this cursor resumes on a broker with `shards`
    /// shards. A cursor written for another layout (one Redis before a
    /// move to a cluster, another `[broker] shards`) was issued from other
    /// sequences: each shard gets a position in an epoch of none of them
    /// (the cursor's first epoch, bit-inverted; epochs are random 64-bit
    /// numbers), so it resumes as a gap (`recover` with `complete: false`),
    /// as a cursor of another epoch does: well-formed, never an error.
    pub fn resume_position(&self, shards: usize) -> Position {
        self.position(shards).unwrap_or_else(|| {
            let first = self.positions.first().map_or(0, |c| c.epoch);
            let foreign = Cursor::new(!first, 0);
            Position(vec![foreign; shards])
        })
    }

    /// The position, if the cursor has exactly one (a broker of one
    /// shard); a cursor written by a broker with another number of shards
    /// has `None`, and resumes as a gap.
    pub fn single(&self) -> Option<Cursor> {
        match self.positions[..] {
            [one] => Some(one),
            _ => None,
        }
    }
}

impl fmt::Display for ConnCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, position) in self.positions.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{position}")?;
        }
        f.write_str(&self.coverage.suffix())
    }
}

impl FromStr for ConnCursor {
    type Err = BadCursor;

    fn from_str(raw: &str) -> Result<Self, BadCursor> {
        let (positions, coverage) = match raw.split_once('~') {
            Some((positions, coverage)) => (positions, Some(coverage)),
            None => (raw, None),
        };
        let positions: Vec<Cursor> = positions
            .split('.')
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        if positions.len() > MAX_POSITIONS {
            return Err(BadCursor);
        }
        let coverage = match coverage {
            None => Coverage::default(),
            Some(hex) => {
                let bytes = hex.as_bytes();
                if bytes.is_empty()
                    || bytes.len() % 8 != 0
                    || bytes.len() / 8 > MAX_COVERED
                    || !bytes.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                {
                    return Err(BadCursor);
                }
                let hashes: Vec<u32> = bytes
                    .chunks(8)
                    .map(|chunk| {
                        let digits = std::str::from_utf8(chunk).map_err(|_| BadCursor)?;
                        u32::from_str_radix(digits, 16).map_err(|_| BadCursor)
                    })
                    .collect::<Result<_, _>>()?;
                // Only a sorted list without repeats was ever written.
                if !hashes.windows(2).all(|w| w[0] < w[1]) {
                    return Err(BadCursor);
                }
                Coverage(hashes)
            }
        };
        Ok(Self {
            positions,
            coverage,
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_cursor_of_another_layout_resumes_in_an_epoch_of_none_of_its_sequences() {
        let one: ConnCursor = "00000000000000ab-7".parse().unwrap();
        assert_eq!(
            one.resume_position(1),
            Position::single(Cursor::new(0xab, 7)),
            "the same layout resumes where it was"
        );
        let eight = one.resume_position(8);
        assert_eq!(eight.shards().len(), 8);
        assert!(
            eight
                .shards()
                .iter()
                .all(|c| c.epoch == !0xab && c.seq == 0),
            "{eight}"
        );
        let three: ConnCursor = "00000000000000ab-7.00000000000000cd-2.00000000000000ef-9"
            .parse()
            .unwrap();
        assert_eq!(
            three.resume_position(3).to_string(),
            "00000000000000ab-7.00000000000000cd-2.00000000000000ef-9"
        );
        assert_eq!(
            three.resume_position(1),
            Position::single(Cursor::new(!0xab, 0))
        );
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_connection_cursor_carries_positions_and_coverage() {
        let plain: ConnCursor = "deadbeef01234567-42".parse().expect("v1 cursor");
        assert_eq!(plain.single(), Some(Cursor::new(0xdead_beef_0123_4567, 42)));
        assert!(plain.coverage.is_empty());
        assert_eq!(plain.to_string(), "deadbeef01234567-42");
        let coverage = Coverage::of(["vip", "news", "vip"]);
        assert!(coverage.covers("vip") && coverage.covers("news"));
        assert!(!coverage.is_empty());
        assert!(!coverage.covers("city:berlin"));
        let cursor = ConnCursor {
            positions: vec![Cursor::new(1, 2), Cursor::new(3, 4)],
            coverage: coverage.clone(),
        };
        let text = cursor.to_string();
        assert_eq!(text.len(), 2 * 18 + 1 + 1 + 16, "{text}");
        assert_eq!(text.parse::<ConnCursor>(), Ok(cursor.clone()));
        assert_eq!(cursor.single(), None, "two shards");
        assert_eq!(Coverage::default().suffix(), "");
        assert_eq!(fnv1a(""), 0x811c_9dc5);
        assert_eq!(fnv1a("a"), 0xe40c_292c);
        for bad in [
            "",
            "~",
            "0000000000000001-2~",
            "0000000000000001-2~abc",
            "0000000000000001-2~0000000g",
            "0000000000000001-2~000000000000000A",
            "0000000000000001-2~0000000200000001",
            "0000000000000001-2~0000000100000001",
            "0000000000000001-2.",
            ".0000000000000001-2",
            "0000000000000001-2..0000000000000001-2",
            "0000000000000001-2~00000001~00000002",
        ] {
            assert_eq!(bad.parse::<ConnCursor>(), Err(BadCursor), "{bad:?}");
        }
    }

    #[test]
    fn cursors_parse_only_in_the_form_pushgate_issues() {
        let good = Cursor::new(0xdead_beef_0123_4567, 42);
        assert_eq!(good.to_string(), "deadbeef01234567-42");
        assert_eq!("deadbeef01234567-42".parse(), Ok(good));
        assert_eq!("0000000000000000-0".parse(), Ok(Cursor::new(0, 0)));
        assert_eq!(Cursor::new(0, 0).to_string(), "0000000000000000-0");
        for bad in [
            "",
            "-",
            "42",
            "deadbeef01234567",
            "deadbeef01234567-",
            "deadbeef0123456-42",
            "deadbeef012345678-42",
            "deadbeef0123456g-42",
            "deadbeef01234567-4x",
            "deadbeef01234567--42",
            "deadbeef01234567-+42",
            "deadbeef01234567-18446744073709551616",
            "deadbeef01234567-42-1",
            " deadbeef01234567-42",
            "DEADBEEF01234567-42",
            "deadbeef01234567-042",
            "deadbeef01234567-00",
        ] {
            assert_eq!(bad.parse::<Cursor>(), Err(BadCursor), "{bad:?}");
        }
    }

    #[test]
    fn the_longest_cursor_parses_and_one_byte_more_does_not() {
        let longest = format!("{:016x}-{}", u64::MAX, u64::MAX);
        assert_eq!(longest.len(), MAX_CURSOR_LEN);
        assert_eq!(longest.parse(), Ok(Cursor::new(u64::MAX, u64::MAX)));
        assert_eq!(format!("{longest}0").parse::<Cursor>(), Err(BadCursor));
    }

    #[test]
    fn a_coverage_of_the_most_channels_parses_and_one_more_does_not() {
        let hashes = |n: u32| (0..n).map(|h| format!("{h:08x}")).collect::<String>();
        let most = format!("0000000000000001-1~{}", hashes(MAX_COVERED as u32));
        let parsed: ConnCursor = most.parse().expect("MAX_COVERED channels");
        assert_eq!(parsed.coverage.0.len(), MAX_COVERED);
        let more = format!("0000000000000001-1~{}", hashes(MAX_COVERED as u32 + 1));
        assert_eq!(more.parse::<ConnCursor>(), Err(BadCursor));
    }

    fn position(shards: &[(u64, u64)]) -> Position {
        Position::new(shards.iter().map(|(e, s)| Cursor::new(*e, *s)).collect())
    }

    #[test]
    fn a_node_positions_text_follows_every_move() {
        let mut at = NodePosition::new(position(&[(1, 5), (2, 7), (3, 0)]));
        assert_eq!(
            at.text(),
            "0000000000000001-5.0000000000000002-7.0000000000000003-0"
        );
        assert!(at.advance(1, Cursor::new(2, 8)));
        assert_eq!(
            at.text(),
            "0000000000000001-5.0000000000000002-8.0000000000000003-0"
        );
        assert!(!at.advance(0, Cursor::new(1, 4)), "not backwards");
        assert_eq!(at.text(), at.position().to_string());
        at.reset(2, Cursor::new(9, 100));
        assert_eq!(
            at.text(),
            "0000000000000001-5.0000000000000002-8.0000000000000009-100"
        );
        assert!(!at.advance(7, Cursor::new(1, 1)), "no such shard");
        at.reset(7, Cursor::new(1, 1));
        assert_eq!(at.text(), at.position().to_string());
    }

    #[test]
    fn a_node_positions_text_is_never_grown() {
        let mut at = NodePosition::new(position(&[(0, 0); 6]));
        let capacity = at.text.capacity();
        assert_eq!(capacity, 6 * (MAX_CURSOR_LEN + 1));
        for shard in 0..6 {
            at.advance(shard, Cursor::new(u64::MAX, u64::MAX));
        }
        assert_eq!(at.text().len(), 6 * (MAX_CURSOR_LEN + 1) - 1);
        assert_eq!(at.text.capacity(), capacity, "{}", at.text());
    }

    #[test]
    fn a_shard_advances_forward_in_its_epoch_or_to_a_new_epoch_whole() {
        let mut at = position(&[(1, 5), (2, 7)]);
        assert!(!at.advance(0, Cursor::new(1, 4)), "never backwards");
        assert!(!at.advance(0, Cursor::new(1, 5)), "not to where it is");
        assert_eq!(at, position(&[(1, 5), (2, 7)]));
        assert!(at.advance(0, Cursor::new(1, 6)));
        assert_eq!(at.shards(), [Cursor::new(1, 6), Cursor::new(2, 7)]);
        assert!(at.advance(1, Cursor::new(3, 1)), "a new epoch, even lower");
        assert_eq!(at.shards(), [Cursor::new(1, 6), Cursor::new(3, 1)]);
        assert!(!at.advance(2, Cursor::new(1, 9)), "no such shard");
        assert_eq!(at.first(), Cursor::new(1, 6));
    }

    #[test]
    fn reset_moves_a_shard_even_backwards() {
        let mut at = position(&[(1, 5), (2, 7)]);
        at.reset(1, Cursor::new(2, 3));
        assert_eq!(at, position(&[(1, 5), (2, 3)]));
        at.reset(2, Cursor::new(9, 9));
        assert_eq!(at, position(&[(1, 5), (2, 3)]), "no such shard");
    }

    #[test]
    fn raise_to_lifts_shards_of_the_same_epoch_only() {
        let mut at = position(&[(1, 5), (2, 7), (3, 9)]);
        at.raise_to(&position(&[(1, 8), (2, 6), (4, 20)]));
        assert_eq!(at, position(&[(1, 8), (2, 7), (3, 9)]));
    }

    #[test]
    fn covers_needs_every_shard_at_or_past_in_the_same_epoch() {
        let at = position(&[(1, 5), (2, 7)]);
        assert!(at.covers(&position(&[(1, 5), (2, 7)])));
        assert!(at.covers(&position(&[(1, 4), (2, 0)])));
        assert!(!at.covers(&position(&[(1, 6), (2, 7)])));
        assert!(!at.covers(&position(&[(1, 5), (2, 8)])));
        assert!(!at.covers(&position(&[(9, 0), (2, 7)])), "another epoch");
        assert!(!at.covers(&position(&[(1, 5)])), "another layout");
        assert!(!position(&[(1, 5)]).covers(&at));
    }

    #[test]
    fn at_least_raises_a_single_shard_and_leaves_several_alone() {
        let one = Position::single(Cursor::new(1, 5));
        assert_eq!(one.clone().at_least(9), Position::single(Cursor::new(1, 9)));
        assert_eq!(one.clone().at_least(2), one);
        let two = position(&[(1, 5), (2, 7)]);
        assert_eq!(two.clone().at_least(9), two);
        assert_eq!(two.to_string(), "0000000000000001-5.0000000000000002-7");
    }

    #[test]
    fn a_cursor_gives_its_position_only_for_its_own_layout() {
        let cursor: ConnCursor = "0000000000000001-5.0000000000000002-7"
            .parse()
            .expect("two shards");
        assert_eq!(cursor.position(2), Some(position(&[(1, 5), (2, 7)])));
        assert_eq!(cursor.position(1), None);
        assert_eq!(cursor.position(3), None);
        let many = vec!["0000000000000001-1"; MAX_POSITIONS].join(".");
        assert_eq!(
            many.parse::<ConnCursor>().map(|c| c.positions.len()),
            Ok(MAX_POSITIONS)
        );
        assert_eq!(
            format!("{many}.{}", "0000000000000001-1").parse::<ConnCursor>(),
            Err(BadCursor)
        );
    }

    proptest! {
        /// Whatever moves a node's position, its text is the position's
        /// `Display`.
        #[test]
        fn a_node_positions_text_is_its_positions_display(
            start in proptest::collection::vec((0u64..3, any::<u64>()), 1..8),
            moves in proptest::collection::vec((any::<bool>(), 0usize..9, 0u64..3, any::<u64>()), 0..40),
        ) {
            let mut at = NodePosition::new(position(&start));
            for (reset, shard, epoch, seq) in moves {
                let to = Cursor::new(epoch, seq);
                let mut model = at.position().clone();
                if reset {
                    at.reset(shard, to);
                    model.reset(shard, to);
                } else {
                    prop_assert_eq!(at.advance(shard, to), model.advance(shard, to));
                }
                prop_assert_eq!(at.position(), &model);
                prop_assert_eq!(at.text(), model.to_string());
            }
        }

        #[test]
        fn every_cursor_round_trips(epoch in any::<u64>(), seq in any::<u64>()) {
            let cursor = Cursor::new(epoch, seq);
            prop_assert_eq!(cursor.to_string().parse::<Cursor>(), Ok(cursor));
        }

        #[test]
        fn arbitrary_strings_never_panic(raw in ".{0,64}") {
            let _ = raw.parse::<Cursor>();
            let _ = raw.parse::<ConnCursor>();
        }

        /// Strings close to cursors (most pass the length and shape checks
        /// and reach the digits, the positions and the coverage): whatever
        /// parses is exactly what `Display` writes back, so no two strings
        /// name the same cursor.
        #[test]
        fn near_cursors_parse_only_in_the_form_they_are_written(
            raw in "[0-9a-fA]{15,17}-(0|[1-9][0-9]{0,19}|0[0-9]|2[0-9]{19})\
                    (\\.[0-9a-f]{16}-[0-9]{1,2}){0,2}(~([0-9a-f]{8}){0,3}[0-9a-g]{0,2})?",
        ) {
            if let Ok(cursor) = raw.parse::<ConnCursor>() {
                prop_assert_eq!(cursor.to_string(), raw.clone());
            }
            if let Ok(cursor) = raw.parse::<Cursor>() {
                prop_assert_eq!(cursor.to_string(), raw);
            }
        }

        /// Every cursor a connection can write parses back to itself, and
        /// what it covers is exactly its channels (no false "covered" for
        /// names outside the set, barring a 32-bit collision).
        #[test]
        fn every_connection_cursor_round_trips(
            positions in prop::collection::vec((any::<u64>(), any::<u64>()), 1..4),
            names in prop::collection::vec("[a-z0-9.:_@-]{1,12}", 0..8),
            other in "[A-Z]{1,8}",
        ) {
            let cursor = ConnCursor {
                positions: positions.iter().map(|(e, s)| Cursor::new(*e, *s)).collect(),
                coverage: Coverage::of(names.iter().map(String::as_str)),
            };
            let text = cursor.to_string();
            prop_assert_eq!(text.parse::<ConnCursor>(), Ok(cursor.clone()));
            for name in &names {
                prop_assert!(cursor.coverage.covers(name));
            }
            prop_assert!(!cursor.coverage.covers(&other) || fnv_collides(&other, &names));
        }
    }

    fn fnv_collides(name: &str, names: &[String]) -> bool {
        names.iter().any(|n| fnv1a(n) == fnv1a(name))
    }
}
