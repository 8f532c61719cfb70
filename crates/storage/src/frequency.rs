//! How often keys were asked for lately: a count-min sketch of 4-bit counters (TinyLFU,
//! Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission Policy",
//! 2017). The row cache asks it whether a missed partition was asked for more often than
//! the entry it would evict ([`crate::rowcache::RowCache::admits`]).
//!
//! A key's four counters lie in one 64-byte block (eight words of sixteen counters, one
//! counter in each of four word pairs), so counting or estimating a key reads one cache
//! line. Ageing halves the counters one block at a time, a block every `sample / blocks`
//! counted accesses (`sample`: ten per key the sketch is sized for), so every counter
//! halves once per sample and no access pays for a sweep of the whole sketch (16 MB for
//! 3M keys).

/// Counters per word.
const PER_WORD: u32 = 16;
/// Words per block (one cache line).
const BLOCK_WORDS: usize = 8;
/// Every counter's high bit cleared after a right shift by one.
const HALVE_MASK: u64 = 0x7777_7777_7777_7777;
/// Accesses counted per key sized for before the counters halve.
const SAMPLE_PER_KEY: u64 = 10;

/// A count-min sketch for about `keys` distinct keys (see the module docs).
pub(crate) struct Frequencies {
    /// A power of two long, a multiple of [`BLOCK_WORDS`].
    words: Vec<u64>,
    /// Keys it was sized for.
    keys: usize,
    /// Accesses counted (those that raised some counter) since the last block halved.
    additions: u64,
    /// Counted accesses between two blocks' halvings.
    age_every: u64,
    /// The block that halves next.
    age_cursor: usize,
}

impl Frequencies {
    /// A sketch for about `keys` keys: half a word (eight counters) per key, in whole
    /// blocks.
    pub(crate) fn for_keys(keys: usize) -> Self {
        let words = Self::words_for(keys);
        let mut f = Frequencies {
            words: vec![0; words],
            keys,
            additions: 0,
            age_every: 1,
            age_cursor: 0,
        };
        f.set_pace();
        f
    }

    fn words_for(keys: usize) -> usize {
        keys.div_ceil(2).next_power_of_two().max(BLOCK_WORDS)
    }

    fn set_pace(&mut self) {
        let sample = (self.keys.max(1) as u64).saturating_mul(SAMPLE_PER_KEY);
        let blocks = (self.words.len() / BLOCK_WORDS) as u64;
        self.age_every = (sample / blocks).max(1);
    }

    /// Resizes it for about `keys` keys (more than now), keeping every key's estimate: a
    /// key's counters sit at the same places in its block whatever the size, and its
    /// block in the larger sketch is one of the copies of its block in this one.
    pub(crate) fn grow_to(&mut self, keys: usize) {
        let words = Self::words_for(keys);
        let old = self.words.len();
        if words > old {
            self.words.reserve_exact(words - old);
            for j in old..words {
                let w = self.words.get(j % old).copied().unwrap_or(0);
                self.words.push(w);
            }
        }
        self.keys = keys;
        self.age_cursor = 0;
        self.set_pace();
    }

    /// Keys it was sized for.
    pub(crate) fn keys(&self) -> usize {
        self.keys
    }

    /// The key's block's first word, and the spread bits choosing its four counters.
    #[inline]
    fn place(&self, hash: u64) -> (usize, u64) {
        let blocks = self.words.len() / BLOCK_WORDS;
        // The low bits pick the block; a second mix of the hash picks the counters, so
        // keys sharing a block rarely share all four.
        let block = (hash as usize) & (blocks - 1);
        let mut s = hash ^ (hash >> 31);
        s = s.wrapping_mul(0x94d0_49bb_1331_11eb);
        s ^= s >> 29;
        (block * BLOCK_WORDS, s)
    }

    /// Word index and bit shift of counter `j` (0..4) of a key placed at `base` with
    /// spread bits `s`: counter `j` lies in word `base + 2j` or `base + 2j + 1`.
    #[inline]
    fn counter(base: usize, s: u64, j: u32) -> (usize, u32) {
        let bits = (s >> (j * 5)) as u32;
        let word = base + 2 * j as usize + (bits & 1) as usize;
        let shift = ((bits >> 1) % PER_WORD) * 4;
        (word, shift)
    }

    /// Counts one access to the key whose (well mixed) hash is `hash`.
    #[inline]
    pub(crate) fn increment(&mut self, hash: u64) {
        let (base, s) = self.place(hash);
        let mut added = false;
        for j in 0..4 {
            let (w, shift) = Self::counter(base, s, j);
            if let Some(word) = self.words.get_mut(w)
                && (*word >> shift) & 0xf < 0xf
            {
                *word += 1 << shift;
                added = true;
            }
        }
        if added {
            self.additions += 1;
            if self.additions >= self.age_every {
                self.additions = 0;
                self.age_block();
            }
        }
    }

    /// How often the key was asked for lately (an overestimate at worst): 0 to 15.
    #[inline]
    pub(crate) fn estimate(&self, hash: u64) -> u8 {
        let (base, s) = self.place(hash);
        (0..4)
            .map(|j| {
                let (w, shift) = Self::counter(base, s, j);
                self.words
                    .get(w)
                    .map_or(0, |word| ((word >> shift) & 0xf) as u8)
            })
            .min()
            .unwrap_or(0)
    }

    /// Halves the counters of the next block (ageing: what was asked for long ago counts
    /// less).
    fn age_block(&mut self) {
        let blocks = self.words.len() / BLOCK_WORDS;
        let start = self.age_cursor * BLOCK_WORDS;
        if let Some(block) = self.words.get_mut(start..start + BLOCK_WORDS) {
            for w in block {
                *w = (*w >> 1) & HALVE_MASK;
            }
        }
        self.age_cursor = (self.age_cursor + 1) % blocks.max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(i: u64) -> u64 {
        let mut h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    }

    #[test]
    fn estimates_count_accesses_up_to_fifteen() {
        let mut f = Frequencies::for_keys(1024);
        // No ageing within this test (a block would halve every 160 additions).
        f.age_every = u64::MAX;
        for i in 0..100u64 {
            for _ in 0..(i % 20) {
                f.increment(mix(i));
            }
        }
        let mut over = 0;
        for i in 0..100u64 {
            let e = f.estimate(mix(i));
            let want = (i % 20).min(15) as u8;
            assert!(e >= want, "key {i}: estimate {e} under {want}");
            over += u32::from(e > want);
        }
        // 100 keys in a sketch for 1,024: collisions on all four counters are rare.
        assert!(over <= 2, "{over} estimates too high");
        assert_eq!(f.estimate(mix(100_000)), 0);
    }

    #[test]
    fn counters_halve_after_the_sample() {
        let mut f = Frequencies::for_keys(8);
        // Sample: 80 additions. 8 accesses to key 1 first, then one to each of 72 other
        // keys (128 counters: none saturates, so each access is an addition).
        for _ in 0..8 {
            f.increment(mix(1));
        }
        assert_eq!(f.estimate(mix(1)), 8);
        for i in 0..72u64 {
            f.increment(mix(1000 + i));
        }
        // The 80th addition halved the one block; key 1's counters held 8 to 15.
        let e = f.estimate(mix(1));
        assert!((4..=7).contains(&e), "estimate {e} after halving");
    }

    #[test]
    fn blocks_age_in_turn_once_per_sample() {
        // 1,024 keys: 64 blocks, a sample of 10,240 additions, a block every 160.
        let mut f = Frequencies::for_keys(1024);
        for _ in 0..12 {
            f.increment(mix(7));
        }
        assert_eq!(f.estimate(mix(7)), 12);
        // One addition per new key (1,024 keys share 8,192 counters: few saturate).
        let mut i = 0u64;
        while f.age_cursor < 63 {
            f.increment(mix(1_000_000 + i));
            i += 1;
        }
        assert!(
            (63 * 160 - 20..=63 * 160).contains(&(i + 12)),
            "{i} additions"
        );
        // Key 7's block halved once by now (its counters may have gained a few from others).
        let e = f.estimate(mix(7));
        assert!((6..=9).contains(&e), "estimate {e}");
    }

    #[test]
    fn growing_keeps_every_estimate() {
        let mut f = Frequencies::for_keys(1024);
        for i in 0..3000u64 {
            for _ in 0..(i % 5) {
                f.increment(mix(i));
            }
        }
        let before: Vec<u8> = (0..3000u64).map(|i| f.estimate(mix(i))).collect();
        f.grow_to(8192);
        assert_eq!(f.keys(), 8192);
        let after: Vec<u8> = (0..3000u64).map(|i| f.estimate(mix(i))).collect();
        assert_eq!(before, after);
    }
}
