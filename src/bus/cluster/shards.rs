//! Where each stream lives on a Redis Cluster (pure: names and numbers).
//!
//! The message sequence is split into a fixed number of *shards*. Each
//! stream (the broadcast stream, each user's, each channel's) belongs to
//! one shard, chosen by a stable hash of its name; every key and sharded
//! pub/sub channel of a shard carries the shard's hash tag, so one shard
//! lives on one hash slot and a publish is one script on one master. A
//! cursor holds one position per shard.
//!
//! The tags are chosen so the shards' slots are spread evenly over the
//! 16,384 slots: shard `i` of `n` gets a slot at the start of the `i`-th
//! `n`th of the range. A cluster whose masters hold equal contiguous ranges (what
//! `redis-cli --cluster create` makes) then holds an equal share of the
//! shards on each master, give or take one.
//!
//! Keys of shard `i` (tag `T`, `{T}` the hash tag), under `[broker]
//! key_prefix` `P`:
//!
//! | key | what |
//! |-----|------|
//! | `{T}:seq`, `{T}:epoch` | the shard's sequence and history epoch |
//! | `{T}:aged`, `{T}:times` | its age watermark and recent publish times |
//! | `{T}:h:b`, `{T}:h:u:<user>`, `{T}:h:c:<channel>` | history streams |
//! | `{T}:bus:b`, `{T}:bus:u:<user>`, `{T}:bus:c:<channel>` | sharded pub/sub channel of each stream |
//! | `{T}:sync:<node>` | a node's barrier channel in the shard (see `cluster::resume`) |
//! | `{T}:id:<push id>` | idempotency keys |
//!
//! with `T` = `P:s<i>:<n>`, `n` the first number that puts the tag's slot
//! in the shard's share of the range.

/// Hash slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16_384;

/// The hash slot of `key`, as Redis Cluster computes it: CRC16 (XMODEM) of
/// the key, or of its hash tag (the part between the first `{` and the next
/// `}`, if not empty), modulo 16,384.
pub(crate) fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = bytes
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS
}

/// A stream, by what it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum StreamName<'a> {
    /// The broadcast stream: every connection.
    Broadcast,
    /// One user's personal stream.
    User(&'a str),
    /// One channel's stream.
    Channel(&'a str),
}

impl<'a> StreamName<'a> {
    /// The stream's name inside its shard, `b`, `u:<user>` or
    /// `c:<channel>`, as its kind and its own name (a publish names every
    /// user's keys: no string is built for this part of them).
    fn local(&self) -> (&'static str, &'a str) {
        match *self {
            Self::Broadcast => ("b", ""),
            Self::User(user) => ("u:", user),
            Self::Channel(channel) => ("c:", channel),
        }
    }
}

/// The shard layout of one deployment: which shard each stream is in, and
/// the names of every key and channel.
#[derive(Debug, Clone)]
pub(crate) struct Shards {
    /// `{tag}` of each shard, braces included.
    tags: Vec<String>,
}

impl Shards {
    /// The layout of `count` shards (at least 1) under `prefix`: the same
    /// on every node with the same configuration.
    pub(crate) fn new(prefix: &str, count: usize) -> Self {
        let count = count.max(1);
        let tags = (0..count)
            .map(|shard| {
                // The first eighth of the shard's share: masters of equal
                // contiguous ranges then hold shards in turn (8 shards on
                // 3 masters: 3, 3 and 2), wherever a share straddles two.
                let low = (shard * usize::from(SLOTS) / count) as u16;
                let next = ((shard + 1) * usize::from(SLOTS) / count) as u16;
                let high = low + ((next - low) / 8).max(1);
                // About 8 x `count` tries on average (at most 64 shards:
                // a hit 1 try in 512); a million without one means the hash is
                // broken, not unlucky.
                let n = (0..1_000_000)
                    .find(|n| (low..high).contains(&slot_of(&format!("{prefix}:s{shard}:{n}"))))
                    .unwrap_or_else(|| {
                        panic!("no tag for shard {shard} of {count} in slots {low}..{high}")
                    });
                format!("{{{prefix}:s{shard}:{n}}}")
            })
            .collect();
        Self { tags }
    }

    /// How many shards.
    pub(crate) fn count(&self) -> usize {
        self.tags.len()
    }

    /// The shard `stream` is in. The broadcast stream is in shard 0; users'
    /// and channels' are spread by a 64-bit FNV-1a of their name (stable
    /// across builds and machines: every node must agree).
    pub(crate) fn of(&self, stream: StreamName<'_>) -> usize {
        match stream {
            StreamName::Broadcast => 0,
            _ => {
                let (kind, name) = stream.local();
                let hash = kind
                    .bytes()
                    .chain(name.bytes())
                    .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
                    });
                (hash % self.tags.len() as u64) as usize
            }
        }
    }

    /// Shard `shard`'s hash tag, braces included: a key that starts with
    /// it is on the shard's slot.
    pub(crate) fn tag(&self, shard: usize) -> &str {
        &self.tags[shard]
    }

    fn key(&self, shard: usize, name: &str) -> String {
        [self.tags[shard].as_str(), ":", name].concat()
    }

    /// `{tag}:<what><stream's local name>`, built in one allocation.
    fn stream_key(&self, stream: StreamName<'_>, what: &str) -> String {
        let (kind, name) = stream.local();
        [self.tags[self.of(stream)].as_str(), ":", what, kind, name].concat()
    }

    /// The shard's sequence.
    pub(crate) fn seq(&self, shard: usize) -> String {
        self.key(shard, "seq")
    }

    /// The shard's history epoch.
    pub(crate) fn epoch(&self, shard: usize) -> String {
        self.key(shard, "epoch")
    }

    /// The shard's age watermark.
    pub(crate) fn aged(&self, shard: usize) -> String {
        self.key(shard, "aged")
    }

    /// Which master wrote the shard last, and where a failover that may
    /// have lost writes made its sequence start again (`publish.lua`).
    pub(crate) fn writer(&self, shard: usize) -> String {
        self.key(shard, "writer")
    }

    /// The shard's recent publish times.
    pub(crate) fn times(&self, shard: usize) -> String {
        self.key(shard, "times")
    }

    /// Where the keys of `shard`'s publish script runs start (a run's key
    /// keeps its answers for a script sent again).
    pub(crate) fn batches(&self, shard: usize) -> String {
        self.key(shard, "batch:")
    }

    /// An idempotency key of a push to streams of `shard`.
    pub(crate) fn push_id(&self, shard: usize, id: &str) -> String {
        [self.tags[shard].as_str(), ":id:", id].concat()
    }

    /// A stream's history.
    pub(crate) fn history(&self, stream: StreamName<'_>) -> String {
        self.stream_key(stream, "h:")
    }

    /// A stream's sharded pub/sub channel.
    pub(crate) fn bus(&self, stream: StreamName<'_>) -> String {
        self.stream_key(stream, "bus:")
    }

    /// Node `node`'s barrier channel in `shard`.
    pub(crate) fn sync(&self, shard: usize, node: &str) -> String {
        [self.tags[shard].as_str(), ":sync:", node].concat()
    }

    /// Which shard a channel name of this layout belongs to (its tag).
    pub(crate) fn shard_of_channel(&self, channel: &str) -> Option<usize> {
        self.tags
            .iter()
            .position(|tag| channel.starts_with(tag.as_str()))
    }

    /// The stream a sharded pub/sub channel carries, if it is a stream's.
    pub(crate) fn stream_of_channel<'a>(&self, channel: &'a str) -> Option<StreamName<'a>> {
        let shard = self.shard_of_channel(channel)?;
        let rest = channel[self.tags[shard].len()..].strip_prefix(":bus:")?;
        let stream = if rest == "b" {
            StreamName::Broadcast
        } else if let Some(user) = rest.strip_prefix("u:") {
            StreamName::User(user)
        } else {
            StreamName::Channel(rest.strip_prefix("c:")?)
        };
        (self.of(stream) == shard).then_some(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_the_ones_redis_computes() {
        // Values from `redis-cli cluster keyslot` (Redis 7.0).
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("bar"), 5061);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        // An empty tag is no tag: the whole key is hashed (CRC16-XMODEM
        // of the whole key, mod 16,384, as Redis computes it).
        assert_eq!(slot_of("foo{}{bar}"), 8363);
        assert_eq!(slot_of("foo{{bar}}zap"), slot_of("{bar"));
        assert_eq!(slot_of("foo{bar}{zap}"), slot_of("bar"));
        assert_eq!(slot_of("{}"), 15257);
    }

    #[test]
    fn each_shard_gets_a_slot_in_its_share_of_the_range() {
        for count in [1_usize, 2, 3, 8, 16, 64] {
            let shards = Shards::new("pushgate", count);
            assert_eq!(shards.count(), count);
            for shard in 0..count {
                let slot = usize::from(slot_of(&shards.seq(shard)));
                assert!(
                    slot * count / usize::from(SLOTS) == shard,
                    "{count} shards: shard {shard} on slot {slot}"
                );
            }
        }
    }

    #[test]
    fn every_key_of_a_stream_is_on_its_shards_slot() {
        let shards = Shards::new("P", 8);
        for stream in [
            StreamName::Broadcast,
            StreamName::User("alice"),
            StreamName::Channel("vip"),
        ] {
            let shard = shards.of(stream);
            let slot = slot_of(&shards.seq(shard));
            for key in [
                shards.history(stream),
                shards.bus(stream),
                shards.epoch(shard),
                shards.aged(shard),
                shards.times(shard),
                shards.push_id(shard, "id-1"),
                shards.sync(shard, "node"),
                format!("{}00000000000000ab", shards.batches(shard)),
            ] {
                assert_eq!(slot_of(&key), slot, "{key}");
            }
        }
    }

    /// How many of `count` shards each of 3 masters of equal ranges holds.
    fn per_master_of_three(count: usize) -> [usize; 3] {
        let shards = Shards::new("pushgate", count);
        let mut per_master = [0; 3];
        for shard in 0..count {
            let slot = slot_of(&shards.seq(shard));
            // `redis-cli --cluster create` with 3 masters: 0-5460, 5461-10922, 10923-16383.
            per_master[usize::from(slot >= 5461) + usize::from(slot >= 10923)] += 1;
        }
        per_master.sort_unstable();
        per_master
    }

    #[test]
    fn three_masters_of_equal_ranges_hold_three_three_and_two_of_eight_shards() {
        assert_eq!(per_master_of_three(8), [2, 3, 3]);
    }

    #[test]
    fn three_masters_of_equal_ranges_hold_two_each_of_the_default_six() {
        assert_eq!(crate::config::BrokerConfig::default().shards, 6);
        assert_eq!(per_master_of_three(6), [2, 2, 2]);
    }

    #[test]
    fn a_user_and_a_channel_can_land_on_different_shards() {
        let shards = Shards::new("P", 8);
        let user = shards.of(StreamName::User("alice"));
        let other = (0..100)
            .map(|n| format!("room{n}"))
            .find(|c| shards.of(StreamName::Channel(c)) != user);
        assert!(other.is_some());
        assert_eq!(shards.of(StreamName::Broadcast), 0);
    }

    #[test]
    fn channels_name_their_stream_back() {
        let shards = Shards::new("P", 8);
        for stream in [
            StreamName::Broadcast,
            StreamName::User("alice"),
            StreamName::Channel("product.42"),
            StreamName::Channel("u:looks-like-a-user"),
        ] {
            assert_eq!(shards.stream_of_channel(&shards.bus(stream)), Some(stream));
        }
        assert_eq!(shards.stream_of_channel(&shards.sync(3, "n")), None);
        assert_eq!(shards.stream_of_channel("P:bus:b"), None);
        // A user name whose hash is not this shard: not one of ours.
        let wrong = format!(
            "{}:bus:u:alice",
            shards.tags[(shards.of(StreamName::User("alice")) + 1) % 8]
        );
        assert_eq!(shards.stream_of_channel(&wrong), None);
    }

    #[test]
    fn a_shards_tag_heads_its_keys_and_names_its_slot() {
        // Presence keeps its keys under each shard's tag: they must land
        // on the shard's own slot, as its streams' keys do.
        let shards = Shards::new("pushgate", 6);
        for shard in 0..shards.count() {
            let tag = shards.tag(shard);
            assert!(
                tag.starts_with("{pushgate:s") && tag.ends_with('}'),
                "{tag}"
            );
            assert!(shards.seq(shard).starts_with(tag), "{tag}");
            assert_eq!(
                slot_of(&format!("{tag}:presence:n1")),
                slot_of(&shards.seq(shard))
            );
        }
        assert_ne!(shards.tag(0), shards.tag(1));
    }

    #[test]
    fn names_and_shards_do_not_change_between_builds() {
        // Every node of a deployment, whatever its version, must put a
        // stream on the same shard under the same names.
        let shards = Shards::new("pushgate", 6);
        let probe = [
            StreamName::Broadcast,
            StreamName::User("alice"),
            StreamName::User("bob"),
            StreamName::Channel("news"),
            StreamName::Channel("city:berlin"),
        ];
        let seen: Vec<(usize, String, String)> = probe
            .iter()
            .map(|s| (shards.of(*s), shards.history(*s), shards.bus(*s)))
            .collect();
        let pinned = [
            (0, "{pushgate:s0:60}:h:b", "{pushgate:s0:60}:bus:b"),
            (
                2,
                "{pushgate:s2:8}:h:u:alice",
                "{pushgate:s2:8}:bus:u:alice",
            ),
            (1, "{pushgate:s1:27}:h:u:bob", "{pushgate:s1:27}:bus:u:bob"),
            (3, "{pushgate:s3:0}:h:c:news", "{pushgate:s3:0}:bus:c:news"),
            (
                3,
                "{pushgate:s3:0}:h:c:city:berlin",
                "{pushgate:s3:0}:bus:c:city:berlin",
            ),
        ];
        let pinned: Vec<(usize, String, String)> = pinned
            .iter()
            .map(|(shard, history, bus)| (*shard, history.to_string(), bus.to_string()))
            .collect();
        assert_eq!(seen, pinned);
    }

    #[test]
    fn streams_spread_over_every_shard() {
        // 8,000 users and 8,000 channels over 8 shards: 1,000 expected in
        // each (the same names every run: a spread test without chance).
        let shards = Shards::new("P", 8);
        let (mut users, mut channels) = ([0usize; 8], [0usize; 8]);
        for n in 0..8_000 {
            let name = format!("name-{n}");
            users[shards.of(StreamName::User(&name))] += 1;
            channels[shards.of(StreamName::Channel(&name))] += 1;
        }
        for seen in [users, channels] {
            assert!(seen.iter().all(|n| (900..1100).contains(n)), "{seen:?}");
        }
    }
}
