//! The shard's block cache: verified, decompressed SSTable data chunks and index blocks,
//! so a point read of hot data costs no `pread`, no checksum and no decompression.
//!
//! One per shard (owned by `ShardStorage`, used on the shard thread only, no locks). Keys
//! are (SSTable reader id, block number); a reader id is unique for the process, so the
//! entries of a deleted SSTable are never hit again and age out. Eviction is CLOCK
//! (second chance): a hit sets the entry's reference bit, the hand clears bits and evicts
//! the first entry found without one. Only what passed its checksum is ever inserted.
//!
//! PERF-CRITICAL: `get` is on every SSTable point read.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use bytes::Bytes;

/// What a cached block is (part of the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockKind {
    /// A decompressed chunk of Data.db.
    DataChunk,
    /// An index block of Index.db (without its CRC).
    IndexBlock,
    /// A wide partition's block of RowIndex.db (without its CRC), by its number in the
    /// file's directory.
    RowIndex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    reader: u64,
    kind: BlockKind,
    index: u64,
}

struct Slot {
    key: Key,
    data: Bytes,
    referenced: bool,
}

/// Hit/miss/size counters of a [`BlockCache`]. A miss is a lookup of a block that was
/// then read and cached; row cache fills only peek for data chunks (they read the chunks
/// they do not find without caching them), which counts their hits alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub entries: u64,
    pub bytes: u64,
    pub capacity: u64,
}

/// Hashes the few integers of a [`Key`] (no need for SipHash's flooding resistance: keys
/// are not chosen by clients).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        // Final avalanche so the low bits the table uses depend on every input bit.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_isize(&mut self, i: isize) {
        self.write_u64(i as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(23) ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A byte-bounded CLOCK cache of SSTable blocks. A capacity of 0 disables it.
pub struct BlockCache {
    map: HashMap<Key, usize, BuildHasherDefault<KeyHasher>>,
    slots: Vec<Slot>,
    hand: usize,
    bytes: usize,
    capacity: usize,
    hits: u64,
    misses: u64,
}

/// Bytes accounted per entry on top of its data (slot, map entry, `Bytes` header).
const ENTRY_OVERHEAD: usize = 96;

impl BlockCache {
    pub fn new(capacity_bytes: u64) -> Self {
        BlockCache {
            map: HashMap::default(),
            slots: Vec::new(),
            hand: 0,
            bytes: 0,
            capacity: usize::try_from(capacity_bytes).unwrap_or(usize::MAX),
            hits: 0,
            misses: 0,
        }
    }

    /// False for a cache of capacity 0: readers then skip it (no misses to count, no
    /// whole chunks decoded only to be dropped).
    pub fn is_enabled(&self) -> bool {
        self.capacity > 0
    }

    pub fn stats(&self) -> BlockCacheStats {
        BlockCacheStats {
            hits: self.hits,
            misses: self.misses,
            entries: self.slots.len() as u64,
            bytes: self.bytes as u64,
            capacity: self.capacity as u64,
        }
    }

    /// The cached block, marking it recently used.
    pub fn get(&mut self, reader: u64, kind: BlockKind, index: u64) -> Option<Bytes> {
        if self.capacity == 0 {
            return None;
        }
        let found = self.peek(reader, kind, index).cloned();
        if found.is_none() {
            self.misses += 1;
        }
        found
    }

    /// The cached block if there is one, marked recently used and counted as a hit. A block
    /// that is not cached is not counted as a miss: the caller reads it without caching it
    /// (a row cache fill), so the misses count the reads that fill this cache.
    pub fn peek(&mut self, reader: u64, kind: BlockKind, index: u64) -> Option<&Bytes> {
        if self.capacity == 0 {
            return None;
        }
        let key = Key {
            reader,
            kind,
            index,
        };
        let slot = self.map.get(&key).and_then(|&i| self.slots.get_mut(i))?;
        slot.referenced = true;
        self.hits += 1;
        Some(&slot.data)
    }

    /// Caches a block (replacing an entry with the same key), evicting as needed. A block
    /// larger than the whole capacity is not cached.
    pub fn insert(&mut self, reader: u64, kind: BlockKind, index: u64, data: Bytes) {
        let cost = data.len() + ENTRY_OVERHEAD;
        if cost > self.capacity {
            return;
        }
        let key = Key {
            reader,
            kind,
            index,
        };
        if let Some(&i) = self.map.get(&key) {
            self.remove_slot(i);
        }
        while self.bytes + cost > self.capacity && !self.slots.is_empty() {
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let Some(slot) = self.slots.get_mut(self.hand) else {
                break;
            };
            if slot.referenced {
                slot.referenced = false;
                self.hand += 1;
            } else {
                self.remove_slot(self.hand);
            }
        }
        self.map.insert(key, self.slots.len());
        self.slots.push(Slot {
            key,
            data,
            referenced: false,
        });
        self.bytes += cost;
    }

    /// Drops every block of one reader (an SSTable that was deleted).
    pub fn remove_reader(&mut self, reader: u64) {
        let mut i = 0;
        while i < self.slots.len() {
            if self.slots.get(i).is_some_and(|s| s.key.reader == reader) {
                self.remove_slot(i);
            } else {
                i += 1;
            }
        }
    }

    /// Removes slot `i`; the last slot moves into its place.
    fn remove_slot(&mut self, i: usize) {
        if i >= self.slots.len() {
            return;
        }
        let gone = self.slots.swap_remove(i);
        self.map.remove(&gone.key);
        self.bytes -= gone.data.len() + ENTRY_OVERHEAD;
        if let Some(moved) = self.slots.get(i) {
            self.map.insert(moved.key, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(n: usize, fill: u8) -> Bytes {
        Bytes::from(vec![fill; n])
    }

    #[test]
    fn hit_after_insert_and_miss_for_other_keys() {
        let mut c = BlockCache::new(1 << 20);
        c.insert(1, BlockKind::DataChunk, 7, block(100, 1));
        assert_eq!(c.get(1, BlockKind::DataChunk, 7), Some(block(100, 1)));
        assert_eq!(c.get(1, BlockKind::IndexBlock, 7), None);
        assert_eq!(c.get(2, BlockKind::DataChunk, 7), None);
        assert_eq!(c.get(1, BlockKind::DataChunk, 8), None);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries), (1, 3, 1));
        assert_eq!(s.bytes, (100 + ENTRY_OVERHEAD) as u64);
        // A peek counts its hits, not its misses.
        assert_eq!(c.peek(1, BlockKind::DataChunk, 7), Some(&block(100, 1)));
        assert_eq!(c.peek(1, BlockKind::DataChunk, 9), None);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries), (2, 3, 1));
    }

    #[test]
    fn stays_within_capacity_and_keeps_referenced_entries() {
        let cost = 1000 + ENTRY_OVERHEAD;
        let mut c = BlockCache::new((cost * 4) as u64);
        for i in 0..4 {
            c.insert(1, BlockKind::DataChunk, i, block(1000, i as u8));
        }
        assert_eq!(c.stats().entries, 4);
        // Block 0 is used again: the next insert evicts block 1 instead (second chance).
        assert!(c.get(1, BlockKind::DataChunk, 0).is_some());
        c.insert(1, BlockKind::DataChunk, 4, block(1000, 4));
        assert_eq!(c.stats().entries, 4);
        assert!(c.stats().bytes <= (cost * 4) as u64);
        assert_eq!(c.get(1, BlockKind::DataChunk, 0), Some(block(1000, 0)));
        assert_eq!(c.get(1, BlockKind::DataChunk, 1), None);
        for i in [2, 3, 4] {
            assert_eq!(
                c.get(1, BlockKind::DataChunk, i),
                Some(block(1000, i as u8)),
                "{i}"
            );
        }
        // Many more inserts: never over capacity, every survivor still maps to its own data.
        for i in 5..200u64 {
            c.insert(
                2,
                BlockKind::IndexBlock,
                i,
                block(500 + i as usize, i as u8),
            );
            assert!(c.stats().bytes <= (cost * 4) as u64);
        }
        for i in 5..200u64 {
            if let Some(b) = c.get(2, BlockKind::IndexBlock, i) {
                assert_eq!(b, block(500 + i as usize, i as u8));
            }
        }
        assert!(c.get(2, BlockKind::IndexBlock, 199).is_some());
    }

    #[test]
    fn replacing_and_removing_a_reader() {
        let mut c = BlockCache::new(1 << 20);
        c.insert(1, BlockKind::DataChunk, 0, block(10, 1));
        c.insert(1, BlockKind::DataChunk, 0, block(20, 2));
        assert_eq!(c.stats().entries, 1);
        assert_eq!(c.stats().bytes, (20 + ENTRY_OVERHEAD) as u64);
        assert_eq!(c.get(1, BlockKind::DataChunk, 0), Some(block(20, 2)));
        for i in 0..10 {
            c.insert(3, BlockKind::IndexBlock, i, block(10, 3));
        }
        c.remove_reader(3);
        assert_eq!(c.stats().entries, 1);
        assert_eq!(c.get(1, BlockKind::DataChunk, 0), Some(block(20, 2)));
        assert_eq!(c.get(3, BlockKind::IndexBlock, 5), None);
    }

    #[test]
    fn zero_capacity_and_oversized_blocks_are_not_cached() {
        let mut c = BlockCache::new(0);
        c.insert(1, BlockKind::DataChunk, 0, block(10, 1));
        assert_eq!(c.get(1, BlockKind::DataChunk, 0), None);
        let mut c = BlockCache::new(100);
        c.insert(1, BlockKind::DataChunk, 0, block(1000, 1));
        assert_eq!(c.get(1, BlockKind::DataChunk, 0), None);
        assert_eq!(c.stats().entries, 0);
    }
}
