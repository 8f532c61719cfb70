//! Bloom filter over partition tokens (Filter.db). Versioned, self-contained format:
//! `magic "AMPHBLOM" | version u32 | num_bits u64 | k u32 | bits (u64 LE words) | crc32c`.
//!
//! Version 2 (written since 2026-11-28) is a *blocked* filter: the token picks one
//! 512-bit block (a cache line), and all `k` bits of the key are set in it. Version 1, a
//! standard filter with `k` positions over the whole bit array, is still read.
//!
//! Why blocked: a standard filter's `k` random bit updates per key over a multi-megabyte
//! array were ~10% of a major compaction's CPU (7 cache misses per key), and a lookup took
//! up to `k` misses. Here the block is chosen by the token's top bits, so an SSTable's keys,
//! which arrive in token order, fill the blocks front to back (no miss at all while
//! building), and a lookup is one cache line. A blocked filter has a somewhat higher
//! false-positive rate for the same size (the keys per block vary), so it is given
//! [`BLOCKED_EXTRA_BITS`] more bits, which keeps it below the table's
//! `bloom_filter_fp_chance`.

use std::path::Path;

use crate::error::{Result, StorageError};

const MAGIC: &[u8; 8] = b"AMPHBLOM";
/// Bits of a version 2 block: one 64-byte cache line.
const BLOCK_BITS: u64 = 512;
const BLOCK_WORDS: usize = 8;
/// Size factor of a blocked filter over the standard formula's `-n ln p / ln2²` bits at
/// `p >= 1%`; below 1%, [`blocked_extra_bits`] adds more, since blocks fill unevenly and that
/// costs relatively more at low `p`. Measured (100k keys, 1M absent probes): with 10% more
/// bits, 8.1% false positives at p = 10%, 0.76% at 1%, but 0.11% at 0.1%, where 25% more
/// gives ~0.06%.
const BLOCKED_EXTRA_BITS: f64 = 1.1;
/// The largest `k` either version builds or accepts.
const MAX_K: u32 = 20;

/// Tokens [`Bloom::build`] adds between two passes of the shard's gate (`crate::grant`):
/// a few tens of µs of cache misses.
const BUILD_STEP: usize = 2048;

/// One 512-bit block, aligned so that it is exactly one cache line.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct Block([u64; BLOCK_WORDS]);

#[derive(Debug, Clone)]
enum Bits {
    /// Disabled (`bloom_filter_fp_chance` >= 1, or no keys): always "may contain".
    None,
    /// Version 1: `k` positions by double hashing over all `num_bits`.
    Standard { num_bits: u64, words: Vec<u64> },
    /// Version 2: `k` positions inside the token's block.
    Blocked { blocks: Vec<Block> },
}

#[derive(Debug, Clone)]
pub struct Bloom {
    k: u32,
    bits: Bits,
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Version 1: the `k` bit positions of `token` in a filter of `num_bits` (> 0) bits.
fn standard_positions(token: i64, k: u32, num_bits: u64) -> impl Iterator<Item = u64> {
    let h1 = token as u64;
    let h2 = mix(h1 ^ 0x9e37_79b9_7f4a_7c15) | 1;
    (0..k as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % num_bits)
}

/// Version 2: the block of `token` among `blocks` (> 0). The token with its sign bit
/// flipped is its place in ring order as an unsigned number, scaled to the block count, so
/// tokens in ascending order visit the blocks in ascending order.
fn block_of(token: i64, blocks: usize) -> usize {
    let ordered = (token as u64) ^ (1 << 63);
    ((u128::from(ordered) * blocks as u128) >> 64) as usize
}

/// The size factor of a blocked filter for false-positive chance `fp` (0 < fp < 1).
fn blocked_extra_bits(fp: f64) -> f64 {
    BLOCKED_EXTRA_BITS + 0.15 * (0.01 / fp).log10().max(0.0)
}

/// Version 2: the mask of `token`'s `k` bits within its block. Each position is the next 9
/// bits of a stream of mixes of the whole token (7 positions per 64-bit mix), independent of
/// the top bits that chose the block. (Double hashing `a + i·b mod 512` was tried first: its
/// positions are too correlated in so small a range, 0.27% false positives at p = 0.1%.)
fn block_mask(token: i64, k: u32) -> [u64; BLOCK_WORDS] {
    let mut h = mix((token as u64) ^ 0x9e37_79b9_7f4a_7c15);
    let mut left = 7;
    let mut mask = [0u64; BLOCK_WORDS];
    for _ in 0..k {
        if left == 0 {
            h = mix(h);
            left = 7;
        }
        let bit = h % BLOCK_BITS;
        h >>= 9;
        left -= 1;
        mask[(bit / 64) as usize] |= 1 << (bit % 64);
    }
    mask
}

/// The bits of a blocked filter for `n` (> 0) keys at false-positive chance `fp`, and its
/// `k` (which depends only on `fp`, since the bits grow linearly with `n`).
fn blocked_size(n: f64, fp: f64) -> (f64, u32) {
    let ln2 = std::f64::consts::LN_2;
    let bits = (-(n * fp.ln()) / (ln2 * ln2) * blocked_extra_bits(fp))
        .ceil()
        .max(BLOCK_BITS as f64);
    let k = ((bits / n) * ln2).round().clamp(1.0, f64::from(MAX_K)) as u32;
    (bits, k)
}

/// Fewer keys expected than this: the SSTable writer keeps their tokens and builds the
/// filter at the end ([`Bloom::build`], exactly sized); more, it builds the filter as
/// they come ([`BloomBuilder`]), holding ~1.4 bytes per expected key instead of 8 per key.
pub const INCREMENTAL_MIN_KEYS: u64 = 1 << 16;

/// A [`BloomBuilder`]'s block count is a multiple of this, so that it can halve this many
/// times (log2) when fewer keys came than expected.
const FOLD_UNIT: usize = 64;

/// A version 2 filter built as keys come, sized for an upper bound of their number (a
/// compaction's: the sum of its inputs' partitions; a flush's: the memtable's), then
/// halved at [`finish`](Self::finish) while it stays large enough for the keys that came:
/// a blocked filter halves by OR-ing neighbouring blocks, since `block_of` with half the
/// blocks is the full filter's block over two, and a key's bits within its block do not
/// depend on the block count. The tokens of a large SSTable (8 bytes each: 0.8 GB for
/// 100M partitions) were held until its end only to size the filter.
pub struct BloomBuilder {
    k: u32,
    fp: f64,
    blocks: Vec<Block>,
    /// Keys added.
    keys: u64,
}

impl BloomBuilder {
    /// None when the filter is disabled (`fp` >= 1) or `max_keys` is 0.
    pub fn new(max_keys: u64, fp: f64) -> Option<Self> {
        if !(fp > 0.0 && fp < 1.0) || max_keys == 0 {
            return None;
        }
        let (bits, k) = blocked_size(max_keys as f64, fp);
        let count = (bits as u64).div_ceil(BLOCK_BITS) as usize;
        Some(BloomBuilder {
            k,
            fp,
            blocks: vec![Block::default(); count.next_multiple_of(FOLD_UNIT)],
            keys: 0,
        })
    }

    pub fn add(&mut self, token: i64) {
        self.keys += 1;
        let count = self.blocks.len();
        let mask = block_mask(token, self.k);
        if let Some(block) = self.blocks.get_mut(block_of(token, count)) {
            for (w, m) in block.0.iter_mut().zip(mask) {
                *w |= m;
            }
        }
    }

    /// The filter of the tokens added, halved while half of it is still at least what
    /// that many keys need (the same token added twice counts twice).
    pub fn finish(self) -> Bloom {
        let keys = self.keys;
        if keys == 0 {
            return Bloom {
                k: 0,
                bits: Bits::None,
            };
        }
        let needed = (blocked_size(keys as f64, self.fp).0 as u64).div_ceil(BLOCK_BITS) as usize;
        let mut blocks = self.blocks;
        while blocks.len().is_multiple_of(2) && blocks.len() / 2 >= needed {
            blocks = blocks
                .chunks_exact(2)
                .map(|pair| {
                    let mut b = pair[0];
                    for (w, o) in b.0.iter_mut().zip(pair[1].0) {
                        *w |= o;
                    }
                    b
                })
                .collect();
        }
        Bloom {
            k: self.k,
            bits: Bits::Blocked { blocks },
        }
    }
}

impl Bloom {
    /// Builds a (version 2, blocked) filter for `tokens` with false-positive chance `fp`
    /// (>= 1.0 disables it). Tokens in ascending order, as an SSTable's partitions come,
    /// fill it front to back; any order gives the same filter. On a flush or compaction
    /// thread it waits at the shard's gate every [`BUILD_STEP`] tokens.
    pub fn build(tokens: &[i64], fp: f64) -> Self {
        if !(fp > 0.0 && fp < 1.0) || tokens.is_empty() {
            return Bloom {
                k: 0,
                bits: Bits::None,
            };
        }
        let (bits, k) = blocked_size(tokens.len() as f64, fp);
        let count = (bits as u64).div_ceil(BLOCK_BITS) as usize;
        let mut blocks = vec![Block::default(); count];
        for (i, &t) in tokens.iter().enumerate() {
            if i % BUILD_STEP == 0 {
                crate::grant::pass();
            }
            let mask = block_mask(t, k);
            if let Some(block) = blocks.get_mut(block_of(t, count)) {
                for (w, m) in block.0.iter_mut().zip(mask) {
                    *w |= m;
                }
            }
        }
        Bloom {
            k,
            bits: Bits::Blocked { blocks },
        }
    }

    pub fn may_contain(&self, token: i64) -> bool {
        match &self.bits {
            Bits::None => true,
            Bits::Standard { num_bits, words } => {
                standard_positions(token, self.k, *num_bits).all(|bit| {
                    words
                        .get((bit / 64) as usize)
                        .is_some_and(|w| w & (1 << (bit % 64)) != 0)
                })
            }
            Bits::Blocked { blocks } => {
                let Some(block) = blocks.get(block_of(token, blocks.len())) else {
                    return true;
                };
                let mask = block_mask(token, self.k);
                block.0.iter().zip(mask).all(|(w, m)| w & m == m)
            }
        }
    }

    /// The filter's words, in file order.
    fn words(&self) -> impl Iterator<Item = u64> + '_ {
        let (standard, blocked): (&[u64], &[Block]) = match &self.bits {
            Bits::None => (&[], &[]),
            Bits::Standard { words, .. } => (words, &[]),
            Bits::Blocked { blocks } => (&[], blocks),
        };
        standard
            .iter()
            .copied()
            .chain(blocked.iter().flat_map(|b| b.0))
    }

    fn word_count(&self) -> usize {
        match &self.bits {
            Bits::None => 0,
            Bits::Standard { words, .. } => words.len(),
            Bits::Blocked { blocks } => blocks.len() * BLOCK_WORDS,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let version: u32 = match self.bits {
            Bits::Standard { .. } => 1,
            Bits::None | Bits::Blocked { .. } => 2,
        };
        let count = self.word_count();
        let mut o = Vec::with_capacity(28 + count * 8);
        o.extend_from_slice(MAGIC);
        o.extend_from_slice(&version.to_le_bytes());
        o.extend_from_slice(&(count as u64 * 64).to_le_bytes());
        o.extend_from_slice(&self.k.to_le_bytes());
        for w in self.words() {
            o.extend_from_slice(&w.to_le_bytes());
        }
        let crc = crc32c::crc32c(&o);
        o.extend_from_slice(&crc.to_le_bytes());
        o
    }

    pub fn decode(path: &Path, d: &[u8]) -> Result<Self> {
        if d.len() < 28 {
            return Err(StorageError::corrupt(path, 0, "filter too short"));
        }
        let (body, c) = d.split_at(d.len() - 4);
        let stored = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        if crc32c::crc32c(body) != stored {
            return Err(StorageError::corrupt(
                path,
                body.len() as u64,
                "filter checksum mismatch",
            ));
        }
        if &body[0..8] != MAGIC {
            return Err(StorageError::corrupt(path, 0, "bad magic"));
        }
        let version = u32::from_le_bytes([body[8], body[9], body[10], body[11]]);
        let num_bits = u64::from_le_bytes([
            body[12], body[13], body[14], body[15], body[16], body[17], body[18], body[19],
        ]);
        let k = u32::from_le_bytes([body[20], body[21], body[22], body[23]]);
        let words: Vec<u64> = body[24..]
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
            .collect();
        if words.len() as u64 * 64 != num_bits || k > MAX_K {
            return Err(StorageError::corrupt(
                path,
                12,
                "filter size does not match its header",
            ));
        }
        let bits = match version {
            _ if num_bits == 0 => Bits::None,
            1 => Bits::Standard { num_bits, words },
            2 if num_bits % BLOCK_BITS == 0 => Bits::Blocked {
                blocks: words
                    .chunks_exact(BLOCK_WORDS)
                    .map(|c| {
                        let mut b = Block::default();
                        b.0.copy_from_slice(c);
                        b
                    })
                    .collect(),
            },
            2 => {
                return Err(StorageError::corrupt(
                    path,
                    12,
                    "blocked filter size is not a whole number of blocks",
                ));
            }
            v => {
                return Err(StorageError::corrupt(
                    path,
                    8,
                    format!("unsupported filter version {v}"),
                ));
            }
        };
        Ok(Bloom { k, bits })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(range: std::ops::Range<u32>) -> Vec<i64> {
        range
            .map(|i| amphora_types::token::murmur3_token(&i.to_be_bytes()))
            .collect()
    }

    /// False positives per 100k absent keys of a filter of 10k keys at `fp`.
    fn false_positives(b: &Bloom) -> usize {
        tokens(10_000..110_000)
            .into_iter()
            .filter(|t| b.may_contain(*t))
            .count()
    }

    #[test]
    fn false_positive_rate() {
        let mut toks = tokens(0..10_000);
        toks.sort_unstable();
        for (fp, max) in [(0.1, 10_000), (0.01, 1_000), (0.001, 100), (0.0001, 15)] {
            let b = Bloom::build(&toks, fp);
            assert!(toks.iter().all(|t| b.may_contain(*t)), "fp {fp}");
            let n = false_positives(&b);
            assert!(n < max, "fp {fp}: {n} false positives / 100000");
            let d = Bloom::decode(Path::new("x"), &b.encode()).expect("test");
            assert!(toks.iter().all(|t| d.may_contain(*t)), "fp {fp}");
            assert_eq!(false_positives(&d), n, "fp {fp}");
        }
        let b = Bloom::build(&toks, 0.01);
        let mut enc = b.encode();
        enc[30] ^= 1;
        assert!(Bloom::decode(Path::new("x"), &enc).is_err());
    }

    /// A filter built as keys come and halved at the end to what the keys that came need
    /// answers as one built from the keys at once: every key found, false positives
    /// within the same bounds, and about the same size (at most one halving larger).
    #[test]
    fn built_as_keys_come_matches_one_built_at_once() {
        let mut toks = tokens(0..10_000);
        toks.sort_unstable();
        for (fp, max) in [(0.1, 10_000), (0.01, 1_000), (0.001, 100)] {
            let whole = Bloom::build(&toks, fp);
            // Exactly as many keys as expected, twice, and thirty times as many.
            for expected in [10_000, 20_000, 300_000] {
                let mut b = BloomBuilder::new(expected, fp).expect("enabled");
                for &t in &toks {
                    b.add(t);
                }
                let b = b.finish();
                assert!(
                    toks.iter().all(|t| b.may_contain(*t)),
                    "fp {fp} / {expected}"
                );
                let n = false_positives(&b);
                assert!(
                    n < max,
                    "fp {fp} / {expected}: {n} false positives / 100000"
                );
                assert_eq!(b.k, whole.k);
                let (got, exact) = (b.word_count(), whole.word_count());
                assert!(
                    got >= exact && got < 2 * exact + FOLD_UNIT * BLOCK_WORDS,
                    "fp {fp} / {expected}: {got} words, {exact} built at once"
                );
                let d = Bloom::decode(Path::new("x"), &b.encode()).expect("decode");
                assert!(toks.iter().all(|t| d.may_contain(*t)));
            }
        }
        assert!(BloomBuilder::new(10, 1.0).is_none());
        let none = BloomBuilder::new(10, 0.01).expect("enabled").finish();
        assert!(none.may_contain(7));
    }

    #[test]
    fn order_of_tokens_does_not_matter() {
        let toks = tokens(0..5_000);
        let mut sorted = toks.clone();
        sorted.sort_unstable();
        assert_eq!(
            Bloom::build(&toks, 0.01).encode(),
            Bloom::build(&sorted, 0.01).encode()
        );
    }

    #[test]
    fn extreme_tokens_land_in_the_first_and_last_block() {
        assert_eq!(block_of(i64::MIN, 10), 0);
        assert_eq!(block_of(i64::MAX, 10), 9);
        assert_eq!(block_of(0, 10), 5);
        let b = Bloom::build(&[i64::MIN, -1, 0, i64::MAX], 0.01);
        for t in [i64::MIN, -1, 0, i64::MAX] {
            assert!(b.may_contain(t));
        }
    }

    /// A version 1 (standard) filter, as written before 2026-11-28, is still read.
    #[test]
    fn reads_version_1() {
        let toks = tokens(0..1_000);
        let num_bits = 9_600u64;
        let k = 7;
        let mut words = vec![0u64; (num_bits / 64) as usize];
        for &t in &toks {
            for bit in standard_positions(t, k, num_bits) {
                words[(bit / 64) as usize] |= 1 << (bit % 64);
            }
        }
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&1u32.to_le_bytes());
        file.extend_from_slice(&num_bits.to_le_bytes());
        file.extend_from_slice(&k.to_le_bytes());
        for w in &words {
            file.extend_from_slice(&w.to_le_bytes());
        }
        let crc = crc32c::crc32c(&file);
        file.extend_from_slice(&crc.to_le_bytes());
        let b = Bloom::decode(Path::new("x"), &file).expect("test");
        assert!(matches!(b.bits, Bits::Standard { .. }));
        assert!(toks.iter().all(|t| b.may_contain(*t)));
        let absent = tokens(1_000..11_000)
            .into_iter()
            .filter(|t| b.may_contain(*t))
            .count();
        assert!(absent < 300, "{absent} false positives / 10000");
        assert_eq!(b.encode(), file);
    }

    #[test]
    fn disabled_and_bad_versions() {
        let off = Bloom::build(&tokens(0..100), 1.0);
        assert!(off.may_contain(12345));
        let d = Bloom::decode(Path::new("x"), &off.encode()).expect("test");
        assert!(d.may_contain(12345));
        let mut enc = Bloom::build(&tokens(0..100), 0.01).encode();
        enc[8] = 9;
        let body = enc.len() - 4;
        let crc = crc32c::crc32c(&enc[..body]);
        enc[body..].copy_from_slice(&crc.to_le_bytes());
        let err = Bloom::decode(Path::new("x"), &enc).expect_err("version 9");
        assert!(
            err.to_string().contains("unsupported filter version 9"),
            "{err}"
        );
    }
}
