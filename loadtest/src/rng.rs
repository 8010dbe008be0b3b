//! A tiny deterministic generator for reconnect delays (xorshift64*): no
//! cryptography needed, and runs are repeatable for a given seed.

/// A xorshift64* generator.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (0 is replaced by a fixed constant).
    pub(crate) fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `lo..=hi` (`lo` when `hi <= lo`).
    pub(crate) fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn between_stays_in_range() {
        let mut rng = Rng::new(7);
        for _ in 0..1000 {
            let v = rng.between(200, 300);
            assert!((200..=300).contains(&v));
        }
        assert_eq!(rng.between(5, 5), 5);
        assert_eq!(rng.between(9, 1), 9);
    }
}
