//! The shard's row cache: the merged SSTable-side content of recently read partitions
//! (ScyllaDB's design), so a hot point read touches no bloom filter, index or data block.
//!
//! An entry holds, for one (table, partition key), the merge of that partition's data in
//! every SSTable of the table in service: the whole partition, cells raw (timestamps, TTLs,
//! tombstones, expired cells included), its own deletions applied (canonical form). An
//! entry may be empty: no SSTable holds the partition. Memtables, active or being flushed,
//! are never cached; reads merge them on top of the entry, and slice, apply limits and
//! TTL expiry (at the read's `now`) as for any other source.
//!
//! The invariant "an entry equals the merge of the table's current SSTables for its key" is
//! kept by the owner of the SSTable set (`ShardStorage`, on the shard thread, in the same
//! step that changes the set):
//! - flush installed: the flushed memtable's partitions that are cached are merged into
//!   their entries ([`RowCache::merge_flushed`]); one that grows past the partition limit
//!   is dropped;
//! - compaction installed: the outputs hold the inputs' logical content unless something was
//!   purged (tombstones or expired data older than gc_before), so entries stay, except when
//!   an input may hold purgeable data: then the table's entries are dropped. The cache
//!   itself never purges anything, so a tombstone purge cannot make shadowed data reappear
//!   through it;
//! - truncate, drop, alter, SSTables taken out of service or loaded from outside: the
//!   table's entries are dropped ([`RowCache::invalidate_table`]).
//!
//! Byte-bounded (estimated sizes), CLOCK eviction like the block cache; a partition larger
//! than `partition_max_bytes` is not cached (read from SSTables each time). One per shard,
//! shard thread only, plain counters.
//!
//! PERF-CRITICAL: `get` is on every single-partition read.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use amphora_types::data::{
    ColumnData, LocalTime, PartitionKey, PartitionUpdate, Row, merge_partition_updates,
};
use amphora_types::schema::{TableId, TableSchema};
use bytes::{Bytes, BytesMut};

use crate::memtable::Memtable;

/// Counters and size of a [`RowCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub insertions: u64,
    pub evictions: u64,
    /// Entries dropped because their content changed (flush growth, table invalidation).
    pub invalidations: u64,
    pub partitions: u64,
    pub bytes: u64,
    pub capacity: u64,
}

/// Hashes only the integers of a key: the table id and the partition's token, which is
/// already a Murmur3 hash of the key bytes. Byte strings (and their lengths) are skipped;
/// equal tokens are told apart by the map's equality check.
#[derive(Default)]
pub(crate) struct TokenHasher(u64);

impl Hasher for TokenHasher {
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }
    fn write(&mut self, _bytes: &[u8]) {}
    fn write_usize(&mut self, _len: usize) {}
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(23) ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_i64(&mut self, i: i64) {
        self.write_u64(i as u64);
    }
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }
}

/// A hasher for maps keyed by table ids and partition keys (integers already random).
pub(crate) type Hash = BuildHasherDefault<TokenHasher>;

/// An entry's place in the CLOCK order.
struct Slot {
    table: TableId,
    key: PartitionKey,
    cost: usize,
}

/// Longest partition key held inside a [`CacheKey`].
const INLINE_KEY_MAX: usize = 30;

/// A map key: the partition's token and key bytes, the bytes inline when short, so a hit
/// compares keys without following a pointer. Canonical (inline exactly when short), so
/// equal keys are equal variants; hashed by the token alone.
#[derive(Clone, PartialEq, Eq)]
struct CacheKey {
    token: i64,
    bytes: KeyBytes,
}

#[derive(Clone, PartialEq, Eq)]
enum KeyBytes {
    Inline(u8, [u8; INLINE_KEY_MAX]),
    Heap(Bytes),
}

impl CacheKey {
    fn of(k: &PartitionKey) -> Self {
        let b: &[u8] = &k.key;
        let mut a = [0u8; INLINE_KEY_MAX];
        let bytes = match a.get_mut(..b.len()) {
            Some(dst) => {
                dst.copy_from_slice(b);
                KeyBytes::Inline(b.len() as u8, a)
            }
            None => KeyBytes::Heap(k.key.clone()),
        };
        CacheKey {
            token: k.token,
            bytes,
        }
    }
}

impl std::hash::Hash for CacheKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_i64(self.token);
    }
}

/// What the map holds per key: a hit reads only this (and the entry's reference bit).
struct Mapped {
    slot: usize,
    entry: CachedPartition,
}

/// A cached partition: shared, never modified (a change installs a new one), so a read
/// result may hold its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedPartition {
    pub data: Arc<PartitionUpdate>,
    /// The partition's clustering rows are exactly their live view (what a read returns
    /// with no column filter) at every `now` (seconds) below this: no tombstone cells, row
    /// deletions, complex deletions or empty rows, and this is the earliest expiry of a TTL
    /// cell or marker. `LocalTime::MIN` when there is no such time.
    pub rows_live_until: LocalTime,
}

impl CachedPartition {
    /// Wraps a canonical partition (own deletions applied).
    pub fn new(data: PartitionUpdate) -> Self {
        let rows_live_until = data
            .rows
            .iter()
            .map(row_live_until)
            .min()
            .unwrap_or(LocalTime::MAX);
        CachedPartition {
            data: Arc::new(data),
            rows_live_until,
        }
    }

    /// Whether the rows are their own live view at `now_seconds`.
    #[inline]
    pub fn rows_live_at(&self, now_seconds: i32) -> bool {
        LocalTime::from(now_seconds) < self.rows_live_until
    }
}

/// Until when a row is its own live view (see [`CachedPartition::rows_live_until`]).
fn row_live_until(r: &Row) -> LocalTime {
    if r.deletion.is_some() || (r.marker.is_none() && r.cells.is_empty()) {
        return LocalTime::MIN;
    }
    let mut until = LocalTime::MAX;
    if let Some(m) = r.marker
        && m.ttl > 0
    {
        until = until.min(m.local_expiry);
    }
    let mut cell = |c: &amphora_types::data::Cell| {
        until = if c.is_tombstone {
            LocalTime::MIN
        } else if c.ttl > 0 {
            until.min(c.local_expiry)
        } else {
            until
        }
    };
    for (_, d) in &r.cells {
        match d {
            ColumnData::Simple(c) => cell(c),
            ColumnData::Complex { deletion, cells } => {
                if deletion.is_some() || cells.is_empty() {
                    return LocalTime::MIN;
                }
                cells.iter().for_each(|(_, c)| cell(c));
            }
        }
    }
    until
}

/// Bytes accounted per entry on top of its data (slot, map entries, key header).
const ENTRY_OVERHEAD: usize = 160;

fn entry_cost(key: &PartitionKey, data: &PartitionUpdate) -> usize {
    ENTRY_OVERHEAD + key.key.len() + data.size_bytes()
}

/// Calls `f` on every byte string of a row.
fn row_bytes(r: &mut Row, f: &mut impl FnMut(&mut Bytes)) {
    r.clustering.0.iter_mut().for_each(&mut *f);
    for (_, d) in &mut r.cells {
        match d {
            ColumnData::Simple(c) => f(&mut c.value),
            ColumnData::Complex { cells, .. } => {
                for (path, c) in cells {
                    f(path);
                    f(&mut c.value);
                }
            }
        }
    }
}

/// Calls `f` on every byte string of a partition.
fn partition_bytes(u: &mut PartitionUpdate, f: &mut impl FnMut(&mut Bytes)) {
    if let Some(r) = &mut u.static_row {
        row_bytes(r, f);
    }
    for r in &mut u.rows {
        row_bytes(r, f);
    }
    for rt in &mut u.range_tombstones {
        rt.start.prefix.0.iter_mut().for_each(&mut *f);
        rt.end.prefix.0.iter_mut().for_each(&mut *f);
    }
}

/// Copies the key and every value of an entry into one buffer of its own. What reads
/// return are slices of SSTable chunks, memtable arena chunks or request frames; an entry
/// holding those would keep them alive, far beyond the bytes the cache accounts.
fn compact(key: &PartitionKey, mut data: PartitionUpdate) -> (PartitionKey, PartitionUpdate) {
    let mut len = key.key.len();
    partition_bytes(&mut data, &mut |b| len += b.len());
    let mut buf = BytesMut::with_capacity(len);
    let mut copy = |b: &mut Bytes| {
        if !b.is_empty() {
            buf.extend_from_slice(b);
            *b = buf.split_to(b.len()).freeze();
        }
    };
    let mut k = key.key.clone();
    copy(&mut k);
    partition_bytes(&mut data, &mut copy);
    (
        PartitionKey {
            token: key.token,
            key: k,
        },
        data,
    )
}

/// A byte-bounded CLOCK cache of partitions' SSTable-side content. A capacity of 0
/// disables it.
pub struct RowCache {
    tables: HashMap<TableId, HashMap<CacheKey, Mapped, Hash>, Hash>,
    slots: Vec<Slot>,
    /// CLOCK reference bits, one per slot (apart from the slots so a hit touches neither).
    referenced: Vec<bool>,
    hand: usize,
    bytes: usize,
    capacity: usize,
    partition_max: usize,
    hits: u64,
    misses: u64,
    insertions: u64,
    evictions: u64,
    invalidations: u64,
}

impl RowCache {
    /// A cache of `capacity_bytes` that does not hold partitions estimated above
    /// `partition_max_bytes`.
    pub fn new(capacity_bytes: u64, partition_max_bytes: u64) -> Self {
        RowCache {
            tables: HashMap::default(),
            slots: Vec::new(),
            referenced: Vec::new(),
            hand: 0,
            bytes: 0,
            capacity: usize::try_from(capacity_bytes).unwrap_or(usize::MAX),
            partition_max: usize::try_from(partition_max_bytes).unwrap_or(usize::MAX),
            hits: 0,
            misses: 0,
            insertions: 0,
            evictions: 0,
            invalidations: 0,
        }
    }

    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    pub fn stats(&self) -> RowCacheStats {
        RowCacheStats {
            hits: self.hits,
            misses: self.misses,
            insertions: self.insertions,
            evictions: self.evictions,
            invalidations: self.invalidations,
            partitions: self.slots.len() as u64,
            bytes: self.bytes as u64,
            capacity: self.capacity as u64,
        }
    }

    fn index(&self, table: TableId, key: &PartitionKey) -> Option<usize> {
        self.tables
            .get(&table)
            .and_then(|m| m.get(&CacheKey::of(key)))
            .map(|m| m.slot)
    }

    /// The cached SSTable-side content of a partition, marking it recently used; counts a
    /// hit or a miss.
    pub fn get(&mut self, table: TableId, key: &PartitionKey) -> Option<&CachedPartition> {
        match self
            .tables
            .get(&table)
            .and_then(|m| m.get(&CacheKey::of(key)))
        {
            Some(m) => {
                if let Some(r) = self.referenced.get_mut(m.slot) {
                    *r = true;
                }
                self.hits += 1;
                Some(&m.entry)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Whether a partition is cached (no counting, no reference bit).
    pub fn contains(&self, table: TableId, key: &PartitionKey) -> bool {
        self.index(table, key).is_some()
    }

    /// Caches a partition's SSTable-side content (canonical: own deletions applied),
    /// replacing any entry for the key and evicting as needed. Returns the entry and
    /// whether it was cached: not if the partition is over the size limit or the cache is
    /// disabled.
    pub fn insert(
        &mut self,
        table: TableId,
        key: &PartitionKey,
        data: PartitionUpdate,
    ) -> (CachedPartition, bool) {
        let cost = entry_cost(key, &data);
        if cost > self.partition_max || cost > self.capacity {
            self.remove(table, key);
            return (CachedPartition::new(data), false);
        }
        self.remove(table, key);
        while self.bytes + cost > self.capacity && self.evict_one() {}
        let (key, data) = compact(key, data);
        let entry = CachedPartition::new(data);
        self.tables.entry(table).or_default().insert(
            CacheKey::of(&key),
            Mapped {
                slot: self.slots.len(),
                entry: entry.clone(),
            },
        );
        self.slots.push(Slot { table, key, cost });
        self.referenced.push(false);
        self.bytes += cost;
        self.insertions += 1;
        (entry, true)
    }

    /// Drops one entry.
    pub fn remove(&mut self, table: TableId, key: &PartitionKey) {
        if let Some(i) = self.index(table, key) {
            self.remove_slot(i);
        }
    }

    /// Drops every entry of a table.
    pub fn invalidate_table(&mut self, table: TableId) {
        let Some(gone) = self.tables.remove(&table) else {
            return;
        };
        if gone.is_empty() {
            return;
        }
        self.invalidations += gone.len() as u64;
        let mut i = 0;
        let referenced = &mut self.referenced;
        let mut kept = Vec::with_capacity(referenced.len());
        self.slots.retain(|s| {
            let keep = s.table != table;
            if keep {
                kept.push(referenced.get(i).copied().unwrap_or(false));
            }
            i += 1;
            keep
        });
        *referenced = kept;
        self.bytes = self.slots.iter().map(|s| s.cost).sum();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(m) = self.tables.get_mut(&s.table)
                && let Some(mapped) = m.get_mut(&CacheKey::of(&s.key))
            {
                mapped.slot = i;
            }
        }
        if self.hand >= self.slots.len() {
            self.hand = 0;
        }
    }

    /// Merges a flushed memtable into the entries of the partitions it holds: called when
    /// its SSTable joins the table's SSTable set, so entries keep matching that set.
    pub fn merge_flushed(&mut self, table: TableId, schema: &TableSchema, mem: &Memtable) {
        let Some(m) = self.tables.get(&table) else {
            return;
        };
        // Walk the smaller side.
        let hit: Vec<PartitionKey> = if m.len() <= mem.partitions.len() {
            self.slots
                .iter()
                .filter(|s| s.table == table && mem.partitions.contains_key(&s.key))
                .map(|s| s.key.clone())
                .collect()
        } else {
            mem.partitions
                .keys()
                .filter(|k| m.contains_key(&CacheKey::of(k)))
                .cloned()
                .collect()
        };
        let mut too_big = Vec::new();
        for key in hit {
            let Some(mapped) = self
                .tables
                .get_mut(&table)
                .and_then(|m| m.get_mut(&CacheKey::of(&key)))
            else {
                continue;
            };
            let (Some(p), Some(slot)) = (mem.partitions.get(&key), self.slots.get_mut(mapped.slot))
            else {
                continue;
            };
            let merged =
                merge_partition_updates(schema, &mapped.entry.data, &mem.to_update(p, &[]));
            let cost = entry_cost(&key, &merged);
            if cost > self.partition_max || cost > self.capacity {
                too_big.push(key);
                continue;
            }
            self.bytes = self.bytes - slot.cost + cost;
            slot.cost = cost;
            mapped.entry = CachedPartition::new(compact(&key, merged).1);
        }
        self.invalidations += too_big.len() as u64;
        for key in too_big {
            self.remove(table, &key);
        }
        while self.bytes > self.capacity && self.evict_one() {}
    }

    /// Advances the CLOCK hand until it evicts one entry; false if the cache is empty.
    fn evict_one(&mut self) -> bool {
        // Two sweeps clear every reference bit, so this ends.
        for _ in 0..=2 * self.slots.len() {
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let Some(referenced) = self.referenced.get_mut(self.hand) else {
                return false;
            };
            if *referenced {
                *referenced = false;
                self.hand += 1;
            } else {
                self.remove_slot(self.hand);
                self.evictions += 1;
                return true;
            }
        }
        false
    }

    /// Removes slot `i`; the last slot moves into its place.
    fn remove_slot(&mut self, i: usize) {
        if i >= self.slots.len() {
            return;
        }
        debug_assert_eq!(self.slots.len(), self.referenced.len());
        let gone = self.slots.swap_remove(i);
        if i < self.referenced.len() {
            self.referenced.swap_remove(i);
        }
        if let Some(m) = self.tables.get_mut(&gone.table) {
            m.remove(&CacheKey::of(&gone.key));
        }
        self.bytes -= gone.cost;
        if let Some(moved) = self.slots.get(i)
            && let Some(slot) = self
                .tables
                .get_mut(&moved.table)
                .and_then(|m| m.get_mut(&CacheKey::of(&moved.key)))
        {
            slot.slot = i;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amphora_types::data::{Cell, Clustering, ColumnData, Row};
    use bytes::Bytes;

    fn key(token: i64, k: &str) -> PartitionKey {
        PartitionKey {
            token,
            key: Bytes::copy_from_slice(k.as_bytes()),
        }
    }

    fn part(value_len: usize) -> PartitionUpdate {
        PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering::empty(),
                marker: None,
                deletion: None,
                cells: vec![(
                    1,
                    ColumnData::Simple(Cell::live(1, Bytes::from(vec![7u8; value_len]))),
                )],
            }],
            ..Default::default()
        }
    }

    #[test]
    fn hit_after_insert_and_keys_with_equal_tokens_stay_apart() {
        let mut c = RowCache::new(1 << 20, 1 << 20);
        let t = TableId(1);
        assert!(c.insert(t, &key(5, "a"), part(10)).1);
        assert!(c.insert(t, &key(5, "b"), part(20)).1);
        assert_eq!(c.get(t, &key(5, "a")).map(|e| &*e.data), Some(&part(10)));
        assert_eq!(c.get(t, &key(5, "b")).map(|e| &*e.data), Some(&part(20)));
        assert_eq!(c.get(t, &key(5, "c")), None);
        assert_eq!(c.get(TableId(2), &key(5, "a")), None);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.insertions, s.partitions), (2, 2, 2, 2));
        assert_eq!(
            s.bytes as usize,
            entry_cost(&key(5, "a"), &part(10)) + entry_cost(&key(5, "b"), &part(20))
        );
    }

    #[test]
    fn short_and_long_keys_with_equal_tokens_stay_apart() {
        let mut c = RowCache::new(1 << 20, 1 << 20);
        let t = TableId(1);
        let keys: Vec<String> = [1, 29, 30, 31, 64]
            .iter()
            .flat_map(|&n| ["a".repeat(n), "b".repeat(n)])
            .collect();
        for (i, k) in keys.iter().enumerate() {
            assert!(c.insert(t, &key(9, k), part(i)).1, "{k}");
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(
                c.get(t, &key(9, k)).map(|e| &*e.data),
                Some(&part(i)),
                "{k}"
            );
        }
        assert!(c.get(t, &key(9, &"a".repeat(32))).is_none());
        assert!(c.get(t, &key(8, &"a".repeat(30))).is_none());
        c.remove(t, &key(9, &"b".repeat(31)));
        assert!(!c.contains(t, &key(9, &"b".repeat(31))));
        assert!(c.contains(t, &key(9, &"a".repeat(31))));
        assert_eq!(c.stats().partitions as usize, keys.len() - 1);
    }

    #[test]
    fn stays_within_capacity_and_gives_referenced_entries_a_second_chance() {
        let cost = entry_cost(&key(0, "k0"), &part(100));
        let mut c = RowCache::new((cost * 4) as u64, 1 << 20);
        let t = TableId(1);
        for i in 0..4 {
            assert!(c.insert(t, &key(i, &format!("k{i}")), part(100)).1);
        }
        assert!(c.get(t, &key(0, "k0")).is_some());
        assert!(c.insert(t, &key(4, "k4"), part(100)).1);
        let s = c.stats();
        assert_eq!((s.partitions, s.evictions), (4, 1));
        assert!(s.bytes as usize <= cost * 4);
        assert!(c.contains(t, &key(0, "k0")));
        assert!(!c.contains(t, &key(1, "k1")));
        for i in 5..300 {
            assert!(c.insert(t, &key(i, &format!("k{i}")), part(100)).1);
            assert!(c.stats().bytes as usize <= cost * 4);
        }
        // Every survivor still maps to its own entry.
        for i in 0..300 {
            let k = key(i, &format!("k{i}"));
            if let Some(i) = c.index(t, &k) {
                assert_eq!(c.slots[i].key, k);
            }
        }
        assert!(c.contains(t, &key(299, "k299")));
    }

    #[test]
    fn oversized_partitions_and_disabled_cache_are_bypassed() {
        let t = TableId(1);
        let mut c = RowCache::new(1 << 20, 1000);
        assert!(c.insert(t, &key(1, "small"), part(100)).1);
        assert!(!c.insert(t, &key(2, "big"), part(5000)).1);
        assert!(!c.contains(t, &key(2, "big")));
        // Replacing an entry with an oversized version drops the old one.
        assert!(!c.insert(t, &key(1, "small"), part(5000)).1);
        assert!(!c.contains(t, &key(1, "small")));
        let mut off = RowCache::new(0, 1 << 20);
        assert!(!off.enabled());
        assert!(!off.insert(t, &key(1, "a"), part(1)).1);
        assert_eq!(off.stats().partitions, 0);
    }

    #[test]
    fn entries_do_not_keep_the_buffers_they_were_read_from() {
        let chunk = Bytes::from(vec![9u8; 64 << 10]);
        let range = chunk.as_ptr() as usize..chunk.as_ptr() as usize + chunk.len();
        let mut u = part(0);
        u.rows[0].clustering = Clustering(vec![chunk.slice(0..4)]);
        u.rows[0].cells[0].1 = ColumnData::Simple(Cell::live(1, chunk.slice(100..140)));
        let k = PartitionKey {
            token: 3,
            key: chunk.slice(10..20),
        };
        let mut c = RowCache::new(1 << 20, 1 << 20);
        assert!(c.insert(TableId(1), &k, u.clone()).1);
        let e = (*c.get(TableId(1), &k).expect("cached").data).clone();
        assert_eq!(e, u);
        let Some(ColumnData::Simple(cell)) = e.rows[0].cell(1) else {
            panic!("{e:?}")
        };
        for b in [&cell.value, &e.rows[0].clustering.0[0], &c.slots[0].key.key] {
            assert!(!range.contains(&(b.as_ptr() as usize)), "{b:?}");
        }
    }

    #[test]
    fn invalidating_a_table_keeps_the_others_reachable() {
        let mut c = RowCache::new(1 << 20, 1 << 20);
        for i in 0..50 {
            assert!(
                c.insert(TableId(i % 3), &key(i as i64, "k"), part(i as usize))
                    .1
            );
        }
        c.invalidate_table(TableId(1));
        let s = c.stats();
        assert_eq!(s.partitions, 50 - 17);
        assert_eq!(s.invalidations, 17);
        let expect: usize = (0..50u128)
            .filter(|i| i % 3 != 1)
            .map(|i| entry_cost(&key(i as i64, "k"), &part(i as usize)))
            .sum();
        assert_eq!(s.bytes as usize, expect);
        for i in 0..50u128 {
            let got = c
                .get(TableId(i % 3), &key(i as i64, "k"))
                .map(|e| (*e.data).clone());
            if i % 3 == 1 {
                assert_eq!(got, None);
            } else {
                assert_eq!(got, Some(part(i as usize)), "{i}");
            }
        }
    }
}
