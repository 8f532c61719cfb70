//! A memtable's partitions in ring order `(token, key)`, laid out for point access.
//!
//! Tokens are Murmur3 hashes, uniform over 64 bits, so the map is an ordered extendible
//! hash: a directory of `2^depth` slots indexed by the token's top `depth` bits, each
//! slot naming a leaf that lists every partition of a run of slots (the leaf's own depth
//! says how many bits its partitions share), sorted, as tokens and positions in an
//! append-only entry store. A lookup reads one directory slot, one leaf's tokens
//! (contiguous `u64`s) and position, then the entry: ~4 cache lines where a
//! `BTreeMap<PartitionKey, _>` of a million partitions walked ~7 levels of 40-byte keys
//! (the write path's largest cost: 18% of the shard thread at saturation, in cache
//! misses). A full leaf splits in two by its next token bit, doubling the directory when
//! the leaf already uses all of its bits, so a million partitions cost a few growth steps
//! of copying 4-byte slots, and a split moves only one leaf's (token, position) pairs:
//! entries never move. Iteration walks
//! the slots in order and each leaf once.
//!
//! Memtables only grow (a flush replaces the whole memtable), so there is no removal.
//! Partitions whose tokens share more than [`MAX_DEPTH`] leading bits (equal tokens, or
//! keys chosen to collide) stay in one leaf that grows past [`LEAF_MAX`]: still correct,
//! with inserts costing a move of that leaf's tail.

use std::cmp::Ordering;
use std::ops::Bound;

use amphora_types::data::PartitionKey;
use smallvec::SmallVec;

use crate::memtable::MemPartition;

/// Entries a leaf holds before it splits.
const LEAF_MAX: usize = 32;

/// The directory's largest depth (`2^MAX_DEPTH` slots of 4 bytes: 4 MiB, room for ~16M
/// uniform partitions).
const MAX_DEPTH: u32 = 20;

/// The token as an unsigned number with the same order.
#[inline]
fn biased(token: i64) -> u64 {
    (token as u64) ^ (1 << 63)
}

/// The directory slot of `u` at directory depth `depth`.
#[inline]
fn slot_of(u: u64, depth: u32) -> usize {
    if depth == 0 {
        0
    } else {
        (u >> (64 - depth)) as usize
    }
}

/// A leaf's tokens and positions are stored inline (up to [`LEAF_MAX`], beyond which a
/// leaf that cannot split spills to the heap): a lookup's reads after the directory slot
/// are then one run of adjacent cache lines, where separate vectors cost two more
/// dependent cache misses (the leaf's header, then its tokens), which were most of a
/// write's time in the map.
#[derive(Debug, Default)]
struct Leaf {
    /// How many leading token bits every partition here shares (≤ the directory's depth).
    depth: u32,
    /// `biased(token)` of each partition, sorted (ties by key).
    tokens: SmallVec<[u64; LEAF_MAX]>,
    /// Where each partition is in [`PartitionMap::entries`], in `tokens` order.
    at: SmallVec<[u32; LEAF_MAX]>,
}

/// Entries per chunk of [`PartitionMap::entries`] (the first chunk grows up to it).
const CHUNK: usize = 4096;

/// Leaves per chunk of [`PartitionMap::leaves`] (~100 KiB).
const LEAF_CHUNK: usize = 256;

/// The leaves, in chunks that never move once full. Why: as one `Vec<Leaf>` (~416 bytes a
/// leaf), the map's growth past 16k leaves (~370k partitions) reallocated 6.8 MB into 13.6
/// MB of fresh memory on the shard thread, whose page faults (zeroing huge pages, with the
/// host's faults behind them on a VM) held every request for 16 ms, and 30 ms at 32k
/// leaves (docs/benchmarks.md, "The partition map's growth held the shard"). A chunk costs
/// one more load per lookup, of a pointer that stays in the cache.
#[derive(Debug)]
struct Leaves {
    /// The first [`LEAF_CHUNK`] leaves, in a vector that grows (a small memtable's map
    /// takes no more than it uses).
    first: Vec<Leaf>,
    /// The rest in full-size chunks, every leaf constructed up front (an index within a
    /// chunk needs no bounds check).
    rest: Vec<Box<[Leaf; LEAF_CHUNK]>>,
    len: usize,
}

impl Default for Leaves {
    fn default() -> Self {
        Leaves {
            first: vec![Leaf::default()],
            rest: Vec::new(),
            len: 1,
        }
    }
}

impl Leaves {
    /// Appends `leaf` and returns its index.
    fn push(&mut self, leaf: Leaf) -> usize {
        let i = self.len;
        if i < LEAF_CHUNK {
            self.first.push(leaf);
        } else {
            if (i - LEAF_CHUNK) / LEAF_CHUNK == self.rest.len() {
                let chunk: Box<[Leaf]> = (0..LEAF_CHUNK).map(|_| Leaf::default()).collect();
                match chunk.try_into() {
                    Ok(c) => self.rest.push(c),
                    Err(_) => unreachable!("a chunk of LEAF_CHUNK leaves"),
                }
            }
            self[i] = leaf;
        }
        self.len += 1;
        i
    }

    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = &Leaf> {
        self.first
            .iter()
            .chain(self.rest.iter().flat_map(|c| c.iter()))
            .take(self.len)
    }
}

impl std::ops::Index<usize> for Leaves {
    type Output = Leaf;

    #[inline]
    fn index(&self, i: usize) -> &Leaf {
        if i < LEAF_CHUNK {
            &self.first[i]
        } else {
            let j = i - LEAF_CHUNK;
            &self.rest[j / LEAF_CHUNK][j % LEAF_CHUNK]
        }
    }
}

impl std::ops::IndexMut<usize> for Leaves {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut Leaf {
        if i < LEAF_CHUNK {
            &mut self.first[i]
        } else {
            let j = i - LEAF_CHUNK;
            &mut self.rest[j / LEAF_CHUNK][j % LEAF_CHUNK]
        }
    }
}

/// Partitions in insertion order, in chunks that never move once full (so growth never
/// copies a million entries at once); leaves index into them.
#[derive(Debug, Default)]
struct Entries {
    chunks: Vec<Vec<(PartitionKey, MemPartition)>>,
}

impl Entries {
    #[inline]
    fn get(&self, i: u32) -> &(PartitionKey, MemPartition) {
        let i = i as usize;
        &self.chunks[i / CHUNK][i % CHUNK]
    }

    #[inline]
    fn get_mut(&mut self, i: u32) -> &mut (PartitionKey, MemPartition) {
        let i = i as usize;
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }

    fn push(&mut self, e: (PartitionKey, MemPartition)) -> u32 {
        let n = self.chunks.len();
        match self.chunks.last_mut() {
            Some(c) if c.len() < CHUNK => {
                c.push(e);
                ((n - 1) * CHUNK + c.len() - 1) as u32
            }
            _ => {
                let mut c = Vec::with_capacity(if n == 0 { 16 } else { CHUNK });
                c.push(e);
                self.chunks.push(c);
                (n * CHUNK) as u32
            }
        }
    }
}

impl Leaf {
    /// The first position whose key is not below `key`, and whether it is `key`. The
    /// position is a count of the smaller tokens: independent loads the CPU overlaps,
    /// where each probe of a binary search waits for the one before.
    #[inline]
    fn search(&self, entries: &Entries, u: u64, key: &PartitionKey) -> (usize, bool) {
        let mut i = self
            .tokens
            .iter()
            .map(|&t| usize::from(t < u))
            .sum::<usize>();
        while i < self.tokens.len() && self.tokens[i] == u {
            match entries.get(self.at[i]).0.key.cmp(&key.key) {
                Ordering::Less => i += 1,
                Ordering::Equal => return (i, true),
                Ordering::Greater => break,
            }
        }
        (i, false)
    }
}

#[derive(Debug)]
pub struct PartitionMap {
    depth: u32,
    /// Leaf index per slot; a leaf of depth `d` fills `2^(depth - d)` consecutive slots.
    dir: Vec<u32>,
    leaves: Leaves,
    entries: Entries,
    len: usize,
}

impl Default for PartitionMap {
    fn default() -> Self {
        PartitionMap {
            depth: 0,
            dir: vec![0],
            leaves: Leaves::default(),
            entries: Entries::default(),
            len: 0,
        }
    }
}

impl PartitionMap {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn leaf_of(&self, u: u64) -> usize {
        self.dir[slot_of(u, self.depth)] as usize
    }

    /// One level of a batch prefetch ([`crate::shard::ShardStorage::prefetch`]) for a
    /// token: level 0 its directory slot, 1 its leaf (the tokens a lookup or insert scans).
    pub(crate) fn prefetch(&self, token: i64, level: u8) {
        let u = biased(token);
        if level == 0 {
            crate::prefetch::line(&self.dir[slot_of(u, self.depth)]);
        } else {
            let leaf: *const Leaf = &self.leaves[self.leaf_of(u)];
            crate::prefetch::lines(leaf.cast::<u8>(), std::mem::size_of::<Leaf>(), usize::MAX);
        }
    }

    pub fn get(&self, key: &PartitionKey) -> Option<&MemPartition> {
        let u = biased(key.token);
        let leaf = &self.leaves[self.leaf_of(u)];
        match leaf.search(&self.entries, u, key) {
            (i, true) => Some(&self.entries.get(leaf.at[i]).1),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: &PartitionKey) -> Option<&mut MemPartition> {
        let u = biased(key.token);
        let leaf = &self.leaves[self.leaf_of(u)];
        match leaf.search(&self.entries, u, key) {
            (i, true) => Some(&mut self.entries.get_mut(leaf.at[i]).1),
            _ => None,
        }
    }

    /// The partition of `key`, inserted with `make()` if absent (then `true`).
    pub fn find_or_insert(
        &mut self,
        key: PartitionKey,
        make: impl FnOnce() -> MemPartition,
    ) -> (&mut MemPartition, bool) {
        let u = biased(key.token);
        let mut li = self.leaf_of(u);
        let (mut i, found) = self.leaves[li].search(&self.entries, u, &key);
        if found {
            let e = self.leaves[li].at[i];
            return (&mut self.entries.get_mut(e).1, false);
        }
        if self.leaves[li].tokens.len() >= LEAF_MAX && self.split(li) {
            li = self.leaf_of(u);
            i = self.leaves[li].search(&self.entries, u, &key).0;
        }
        let e = self.entries.push((key, make()));
        let leaf = &mut self.leaves[li];
        leaf.tokens.insert(i, u);
        leaf.at.insert(i, e);
        self.len += 1;
        (&mut self.entries.get_mut(e).1, true)
    }

    /// Splits a full leaf by its next token bit (repeatedly while one half is still
    /// full); false when it cannot (its partitions share [`MAX_DEPTH`] bits).
    fn split(&mut self, mut li: usize) -> bool {
        let mut split_any = false;
        loop {
            let leaf = &self.leaves[li];
            let (Some(lo), Some(hi)) = (leaf.tokens.first(), leaf.tokens.last()) else {
                return split_any;
            };
            // Bits every token here shares: splitting cannot separate them past those.
            if leaf.tokens.len() < LEAF_MAX || (lo ^ hi).leading_zeros() >= MAX_DEPTH {
                return split_any;
            }
            let d = self.leaves[li].depth;
            if d == self.depth {
                // Double the directory: each slot becomes two with the same leaf.
                self.dir = self.dir.iter().flat_map(|&l| [l, l]).collect();
                self.depth += 1;
            }
            let leaf = &mut self.leaves[li];
            // Every token here shares its top `d` bits; bit `d` (from the top) splits.
            let bit = 1u64 << (63 - d);
            let at = leaf.tokens.partition_point(|&t| t & bit == 0);
            let upper = Leaf {
                depth: d + 1,
                tokens: SmallVec::from_slice(&leaf.tokens[at..]),
                at: SmallVec::from_slice(&leaf.at[at..]),
            };
            leaf.tokens.truncate(at);
            leaf.at.truncate(at);
            leaf.depth = d + 1;
            let upper_len = upper.tokens.len();
            let lower_len = leaf.tokens.len();
            let ui = self.leaves.push(upper);
            // The leaf's slots: the run of 2^(depth - d) starting at its first token's
            // prefix; the upper half of the run moves to the new leaf.
            let run = 1usize << (self.depth - d);
            let any = if lower_len > 0 {
                self.leaves[li].tokens[0]
            } else {
                self.leaves[ui].tokens[0]
            };
            let first = slot_of(any, self.depth) & !(run - 1);
            for s in &mut self.dir[first + run / 2..first + run] {
                *s = ui as u32;
            }
            split_any = true;
            // Keep splitting whichever half is still full.
            if upper_len >= LEAF_MAX {
                li = ui;
            } else if lower_len < LEAF_MAX {
                return true;
            }
        }
    }

    /// Partitions in ring order within the bounds.
    pub fn range<'a>(
        &'a self,
        start: Bound<&PartitionKey>,
        end: Bound<&PartitionKey>,
    ) -> Range<'a> {
        let (slot, index) = match start {
            Bound::Unbounded => (0, 0),
            Bound::Included(k) | Bound::Excluded(k) => {
                let u = biased(k.token);
                let slot = slot_of(u, self.depth);
                let (i, found) = self.leaves[self.dir[slot] as usize].search(&self.entries, u, k);
                let skip = found && matches!(start, Bound::Excluded(_));
                (slot, i + usize::from(skip))
            }
        };
        Range {
            map: self,
            slot,
            index,
            end: match end {
                Bound::Included(k) => Bound::Included(k.clone()),
                Bound::Excluded(k) => Bound::Excluded(k.clone()),
                Bound::Unbounded => Bound::Unbounded,
            },
        }
    }

    /// Every partition in ring order.
    pub fn iter(&self) -> Range<'_> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }
}

/// An iterator over a [`PartitionMap`] in ring order.
pub struct Range<'a> {
    map: &'a PartitionMap,
    /// A directory slot of the current leaf (any slot of its run: the next leaf's is
    /// computed from the run).
    slot: usize,
    index: usize,
    end: Bound<PartitionKey>,
}

impl<'a> Iterator for Range<'a> {
    type Item = (&'a PartitionKey, &'a MemPartition);

    fn next(&mut self) -> Option<Self::Item> {
        let map = self.map;
        loop {
            if self.slot >= map.dir.len() {
                return None;
            }
            let leaf = &map.leaves[map.dir[self.slot] as usize];
            if let Some(&e) = leaf.at.get(self.index) {
                let (k, p) = map.entries.get(e);
                let past = match &self.end {
                    Bound::Unbounded => false,
                    Bound::Included(e) => k > e,
                    Bound::Excluded(e) => k >= e,
                };
                if past {
                    self.slot = map.dir.len();
                    return None;
                }
                self.index += 1;
                return Some((k, p));
            }
            // The next leaf: the first slot after this leaf's run.
            let run = 1usize << (map.depth - leaf.depth);
            self.slot = (self.slot & !(run - 1)) + run;
            self.index = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn key(token: i64, k: u8) -> PartitionKey {
        PartitionKey {
            token,
            key: Bytes::copy_from_slice(&[k]),
        }
    }

    fn value(n: u8) -> MemPartition {
        MemPartition::Single(Bytes::copy_from_slice(&[n]))
    }

    fn tag(p: &MemPartition) -> u8 {
        match p {
            MemPartition::Single(b) => b[0],
            MemPartition::General(_) => u8::MAX,
        }
    }

    /// Tokens from a few shapes: uniform, sharing long prefixes, equal, the extremes.
    fn token() -> impl Strategy<Value = i64> {
        prop_oneof![
            any::<i64>(),
            (0i64..64).prop_map(|x| x << 20),
            (0i64..4).prop_map(|x| x - 2),
            Just(i64::MIN),
            Just(i64::MAX),
            (0i64..8).prop_map(|x| i64::MIN + x),
        ]
    }

    fn bound(k: Option<(i64, u8)>, inclusive: bool) -> Bound<PartitionKey> {
        match k {
            None => Bound::Unbounded,
            Some((t, b)) if inclusive => Bound::Included(key(t, b)),
            Some((t, b)) => Bound::Excluded(key(t, b)),
        }
    }

    fn as_ref(b: &Bound<PartitionKey>) -> Bound<&PartitionKey> {
        match b {
            Bound::Included(k) => Bound::Included(k),
            Bound::Excluded(k) => Bound::Excluded(k),
            Bound::Unbounded => Bound::Unbounded,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Inserts, lookups, updates and range scans agree with a `BTreeMap`.
        #[test]
        fn agrees_with_a_btreemap(
            ops in prop::collection::vec((token(), 0u8..4, any::<u8>()), 0..3000),
            ranges in prop::collection::vec(
                (prop::option::of((token(), 0u8..4)), any::<bool>(),
                 prop::option::of((token(), 0u8..4)), any::<bool>()),
                1..20),
        ) {
            let mut m = PartitionMap::new();
            let mut model: BTreeMap<PartitionKey, u8> = BTreeMap::new();
            for (t, k, v) in ops {
                let pk = key(t, k);
                let (slot, inserted) = m.find_or_insert(pk.clone(), || value(v));
                prop_assert_eq!(inserted, !model.contains_key(&pk));
                if !inserted {
                    *slot = value(v);
                }
                model.insert(pk.clone(), v);
                prop_assert_eq!(m.get(&pk).map(tag), Some(v));
            }
            prop_assert_eq!(m.len(), model.len());
            let all: Vec<(PartitionKey, u8)> = m.iter().map(|(k, p)| (k.clone(), tag(p))).collect();
            let want: Vec<(PartitionKey, u8)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
            prop_assert_eq!(all, want);
            for (s, si, e, ei) in ranges {
                let (s, e) = (bound(s, si), bound(e, ei));
                let valid = match (&s, &e) {
                    (Bound::Included(a), Bound::Included(b)) => a <= b,
                    (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => a < b,
                    _ => true,
                };
                if !valid {
                    continue;
                }
                let got: Vec<PartitionKey> = m.range(as_ref(&s), as_ref(&e)).map(|(k, _)| k.clone()).collect();
                let want: Vec<PartitionKey> = model.range((s, e)).map(|(k, _)| k.clone()).collect();
                prop_assert_eq!(got, want);
            }
            for (t, k) in [(0, 9), (i64::MIN, 9), (i64::MAX, 9)] {
                prop_assert!(m.get(&key(t, k)).is_none());
            }
        }
    }

    #[test]
    fn uniform_tokens_stay_shallow_and_ordered() {
        let mut m = PartitionMap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = PartitionKey {
                token: x as i64,
                key: Bytes::copy_from_slice(&i.to_be_bytes()),
            };
            m.find_or_insert(k, || value(0));
        }
        assert_eq!(m.len(), 200_000);
        assert!(m.depth <= 16, "directory depth {}", m.depth);
        let mut prev: Option<&PartitionKey> = None;
        let mut n = 0;
        for (k, _) in m.iter() {
            assert!(prev.is_none_or(|p| p < k));
            prev = Some(k);
            n += 1;
        }
        assert_eq!(n, 200_000);
        let max_leaf = m.leaves.iter().map(|l| l.tokens.len()).max().unwrap_or(0);
        assert!(max_leaf <= LEAF_MAX, "largest leaf {max_leaf}");
        // The leaves are in many chunks, none of which ever grew past its fixed size (a
        // growth of the whole would move every leaf at once).
        assert!(m.leaves.rest.len() > 10, "{} chunks", m.leaves.rest.len());
        assert_eq!(m.leaves.iter().count(), m.leaves.len);
        assert_eq!(m.leaves.first.len(), LEAF_CHUNK);
        assert!(m.leaves.first.capacity() <= LEAF_CHUNK);
        assert_eq!(
            m.leaves.rest.len(),
            (m.leaves.len - LEAF_CHUNK).div_ceil(LEAF_CHUNK)
        );
    }

    #[test]
    fn equal_tokens_share_one_leaf_past_its_size() {
        let mut m = PartitionMap::new();
        for k in 0..100u8 {
            m.find_or_insert(key(42, k), || value(k));
        }
        for k in 0..100u8 {
            m.find_or_insert(key(7, k), || value(k));
        }
        assert_eq!(m.len(), 200);
        // 42 and 7 differ in the last bits: no directory is built to separate them.
        assert_eq!(m.depth, 0);
        let keys: Vec<(i64, u8)> = m.iter().map(|(k, _)| (k.token, k.key[0])).collect();
        let mut want: Vec<(i64, u8)> = (0..100).map(|k| (7, k)).collect();
        want.extend((0..100).map(|k| (42, k)));
        assert_eq!(keys, want);
        assert_eq!(m.get(&key(42, 99)).map(tag), Some(99));
    }
}
