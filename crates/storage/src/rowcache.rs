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
//!   their entries ([`RowCache::merge_flushed`]; a wide entry no reader holds takes the
//!   flushed rows in place, [`CachedPartition::merge_in_place`]); one that grows past the
//!   partition limit is dropped;
//! - compaction installed: the outputs hold the inputs' logical content unless something was
//!   purged (tombstones or expired data older than gc_before), so entries stay, except when
//!   an input may hold purgeable data: then the table's entries are dropped. The cache
//!   itself never purges anything, so a tombstone purge cannot make shadowed data reappear
//!   through it;
//! - truncate, drop, alter, SSTables taken out of service or loaded from outside: the
//!   table's entries are dropped ([`RowCache::invalidate_table`]).
//!
//! A partition of at most `ENCODED_ROWS_MAX` rows is held encoded and decoded on each hit
//! (a third of the memory), a wider one decoded (a read shares the rows it asks for).
//!
//! Byte-bounded (estimated sizes), CLOCK eviction like the block cache; a partition larger
//! than `partition_max_bytes` is not cached (read from SSTables each time). Once full, a
//! miss is cached only if its key was asked for more often lately than the entry it would
//! evict (TinyLFU admission, [`RowCache::admits`]); a miss kept out is read from the
//! SSTables for its slices only. One per shard, shard thread only, plain counters.
//!
//! PERF-CRITICAL: `get` is on every single-partition read.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use amphora_types::codec::{self, DecodeError, SimpleRowSummary};
use amphora_types::data::{
    ColumnData, InPlaceMerge, LocalTime, PartitionKey, PartitionUpdate, Row, UpdateView,
    merge_into_in_place, merge_partition_updates, merge_partition_updates_owned,
    merge_partition_updates_owned_view,
};
use amphora_types::schema::{ColumnKind, TableId, TableSchema};
use bytes::{Bytes, BytesMut};

use crate::alloc::{alloc_size, vec_bytes};
use crate::frequency::Frequencies;
use crate::memtable::{
    GeneralPartition, MemPartition, Memtable, row_heap_bytes, single_standalone, single_summary,
};

/// Counters and size of a [`RowCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub insertions: u64,
    pub evictions: u64,
    /// Entries dropped because their content changed (flush growth, table invalidation).
    pub invalidations: u64,
    /// Entries a flush replaced whole, without a merge ([`CachedPartition::replaced_by`]).
    pub flush_replacements: u64,
    /// Entries copied out of sparsely used allocator slabs ([`RowCache::defrag_slice`]).
    pub defrag_moves: u64,
    /// Misses not cached because the key was asked for less often than the entry it would
    /// have evicted ([`RowCache::admits`]).
    pub rejections: u64,
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

/// Longest partition key held inside a [`CachedPartition`] (standard1's keys are 10 bytes).
const INLINE_KEY_MAX: usize = 30;

/// A partition key's bytes as an entry holds them: inline when short, so a hit compares
/// keys without following a pointer; otherwise a copy of their own (never a slice of the
/// buffer they were read from).
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyBytes {
    Inline(u8, [u8; INLINE_KEY_MAX]),
    Heap(Bytes),
}

impl KeyBytes {
    fn of(b: &[u8]) -> Self {
        let mut a = [0u8; INLINE_KEY_MAX];
        match a.get_mut(..b.len()) {
            Some(dst) => {
                dst.copy_from_slice(b);
                KeyBytes::Inline(b.len() as u8, a)
            }
            None => KeyBytes::Heap(Bytes::copy_from_slice(b)),
        }
    }

    #[inline]
    fn as_slice(&self) -> &[u8] {
        match self {
            KeyBytes::Inline(n, a) => a.get(..*n as usize).unwrap_or_default(),
            KeyBytes::Heap(b) => b,
        }
    }
}

/// A cached partition: its key, its accounted cost and its content, shared (`Arc`) and
/// never modified while shared (a flush changes in place only an entry no reader holds,
/// else installs a new one), so a read result may hold its rows. A hit follows one
/// pointer from the key map to this.
#[derive(Debug, PartialEq)]
pub struct CachedPartition {
    table: TableId,
    token: i64,
    key: KeyBytes,
    cost: usize,
    /// The partition's clustering rows are exactly their live view (what a read returns
    /// with no column filter) at every `now` (seconds) below this: no tombstone cells, row
    /// deletions, complex deletions or empty rows, and this is the earliest expiry of a TTL
    /// cell or marker. `LocalTime::MIN` when there is no such time.
    pub rows_live_until: LocalTime,
    /// Bytes the entry holds beyond its content since its values were last copied into
    /// one buffer: values overwritten by in-place flush merges and the unused ends and
    /// headers of their buffers ([`CachedPartition::merge_in_place`]).
    slack: u32,
    /// For an entry of at most one row with no deletion of any kind (partition, range,
    /// row) and no static row: its newest timestamp; `i64::MAX` otherwise. A flushed row
    /// newer than this in every column replaces the entry whole ([`Self::replaced_by`]).
    shadow_below: i64,
    /// Whether the entry's row has a liveness marker (an INSERT's); false when the entry
    /// is not simple.
    has_marker: bool,
    content: Content,
}

/// Partitions a flush merge looks up between two [`RowCache::warm_for_merge`] passes
/// (measured per flushed partition, uniform writes over 3M keys with a 445 MB cache:
/// 530 ns at 32, 441 ns at 64).
const MERGE_BATCH: usize = 64;

/// A flushed memtable partition as a flush merge reads it: copied into an update, or
/// borrowed where the memtable holds it.
#[derive(Clone, Copy)]
enum Flushed<'a> {
    Update(&'a PartitionUpdate),
    Mem(&'a GeneralPartition),
}

/// A memtable partition's parts as the second input of a merge.
fn mem_view(g: &GeneralPartition) -> UpdateView<'_, impl Iterator<Item = &Row>> {
    UpdateView {
        partition_deletion: g.deletion,
        static_row: g.static_row.as_ref(),
        range_tombstones: &g.range_tombstones,
        rows: g.rows.iter(),
    }
}

impl Flushed<'_> {
    /// Merges this into `data` in place ([`merge_into_in_place`]); false when its shape
    /// does not fit, with nothing done.
    fn merge_into(
        self,
        schema: &TableSchema,
        data: &mut PartitionUpdate,
        obs: &mut Placed,
    ) -> bool {
        match self {
            Flushed::Update(u) => merge_into_in_place(schema, data, UpdateView::of(u), obs),
            Flushed::Mem(g) => merge_into_in_place(schema, data, mem_view(g), obs),
        }
    }

    /// Its rows, the static row included.
    fn rows(self) -> usize {
        match self {
            Flushed::Update(u) => u.rows.len() + usize::from(u.static_row.is_some()),
            Flushed::Mem(g) => g.rows.len() + usize::from(g.static_row.is_some()),
        }
    }

    /// `data` (an entry's rows, moved) merged with this.
    fn merged_into(self, schema: &TableSchema, data: PartitionUpdate) -> PartitionUpdate {
        match self {
            Flushed::Update(u) => merge_partition_updates_owned(schema, data, u),
            Flushed::Mem(g) => merge_partition_updates_owned_view(schema, data, mem_view(g)),
        }
    }
}

/// How many slots a [`RowCache::defrag_slice`] walks between looks at the clock.
pub const SLICE_CLOCK_STRIDE: usize = 32;

/// Partitions of at most this many rows are cached encoded.
const ENCODED_ROWS_MAX: usize = 4;

/// What a [`CachedPartition`] holds of its data.
#[derive(Debug, PartialEq)]
enum Content {
    /// Decoded, for wide partitions: a read shares the run of rows it asks for, without
    /// decoding the rest of the partition.
    Decoded(Box<PartitionUpdate>),
    /// Encoded (`codec::encode_update_standalone`), for small partitions (point-read
    /// tables): a third of the decoded form's memory (a `standard1` partition's five
    /// cells cost 72 bytes of structure each when decoded, on top of their values), so the
    /// cache holds three times the partitions; each hit decodes it (one copy of the bytes,
    /// two vectors).
    Encoded(Box<[u8]>),
}

/// What an entry knows of its data besides the data.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Meta {
    live_until: LocalTime,
    shadow_below: i64,
    has_marker: bool,
}

impl Meta {
    fn of(data: &PartitionUpdate) -> Self {
        let simple = data.partition_deletion.is_none()
            && data.static_row.is_none()
            && data.range_tombstones.is_empty()
            && data.rows.len() <= 1
            && data.rows.iter().all(|r| r.deletion.is_none());
        Meta {
            live_until: live_until(data),
            shadow_below: if simple {
                data.max_timestamp()
            } else {
                i64::MAX
            },
            // Only read for simple entries (at most one row).
            has_marker: simple && data.rows.iter().any(|r| r.marker.is_some()),
        }
    }
}

impl Meta {
    /// What [`Meta::of`] gives for a partition of one row (no deletion, simple cells)
    /// summarized by `s`.
    fn of_simple_row(s: &SimpleRowSummary) -> Self {
        Meta {
            live_until: if s.has_tombstone_cell || (s.marker.is_none() && s.cells == 0) {
                LocalTime::MIN
            } else {
                s.earliest_expiry
            },
            shadow_below: s.max_timestamp,
            has_marker: s.marker.is_some(),
        }
    }
}

impl Content {
    fn encoded(data: &PartitionUpdate) -> Self {
        let mut buf = Vec::new();
        codec::encode_update_standalone(data, &mut buf);
        Content::Encoded(buf.into_boxed_slice())
    }
}

impl CachedPartition {
    /// Wraps a canonical partition (own deletions applied), outside any cache.
    pub fn new(data: PartitionUpdate) -> Self {
        Self::uncached(TableId(0), &PartitionKey::new(Bytes::new()), data)
    }

    /// Wraps a canonical partition held encoded, outside any cache.
    #[cfg(test)]
    pub(crate) fn new_encoded(data: PartitionUpdate) -> Self {
        let key = PartitionKey::new(Bytes::new());
        Self::with(TableId(0), &key, Meta::of(&data), Content::encoded(&data))
    }

    /// A decoded entry that no cache holds (its cost is not worked out).
    fn uncached(table: TableId, key: &PartitionKey, data: PartitionUpdate) -> Self {
        Self::bare(
            table,
            key,
            Meta::of(&data),
            Content::Decoded(Box::new(data)),
        )
    }

    /// An entry as a cache holds it: with its cost.
    fn with(table: TableId, key: &PartitionKey, meta: Meta, content: Content) -> Self {
        let mut e = Self::bare(table, key, meta, content);
        e.cost = e.accounted_bytes();
        e
    }

    fn bare(table: TableId, key: &PartitionKey, meta: Meta, content: Content) -> Self {
        CachedPartition {
            table,
            token: key.token,
            key: KeyBytes::of(&key.key),
            cost: 0,
            slack: 0,
            rows_live_until: meta.live_until,
            shadow_below: meta.shadow_below,
            has_marker: meta.has_marker,
            content,
        }
    }

    /// An entry for `data` in the form its size calls for (decoded data gets its values
    /// copied into one buffer of its own: [`compact`]), and the data itself when the entry
    /// holds it encoded (the caller's read still wants it decoded).
    fn build(
        table: TableId,
        key: &PartitionKey,
        data: PartitionUpdate,
    ) -> (Self, Option<PartitionUpdate>) {
        let meta = Meta::of(&data);
        if data.rows.len() <= ENCODED_ROWS_MAX {
            let content = Content::encoded(&data);
            (Self::with(table, key, meta, content), Some(data))
        } else {
            let content = Content::Decoded(Box::new(compact(data)));
            (Self::with(table, key, meta, content), None)
        }
    }

    /// A copy of an encoded entry in allocations of its own (`None` for a decoded one:
    /// its values are copied into new buffers by flush merges anyway, and its vectors are
    /// mostly too large for the allocator's slabs).
    fn relocated(&self) -> Option<Self> {
        let Content::Encoded(b) = &self.content else {
            return None;
        };
        let key = match &self.key {
            KeyBytes::Heap(k) => KeyBytes::Heap(Bytes::copy_from_slice(k)),
            inline @ KeyBytes::Inline(..) => inline.clone(),
        };
        Some(CachedPartition {
            table: self.table,
            token: self.token,
            key,
            cost: self.cost,
            rows_live_until: self.rows_live_until,
            shadow_below: self.shadow_below,
            has_marker: self.has_marker,
            slack: 0,
            content: Content::Encoded(b.clone()),
        })
    }

    /// What the entry knows of its data besides the data.
    fn meta(&self) -> Meta {
        Meta {
            live_until: self.rows_live_until,
            shadow_below: self.shadow_below,
            has_marker: self.has_marker,
        }
    }

    /// Makes this entry hold `enc` (a standalone update encoding) with `meta`, in its
    /// current allocation when the sizes match.
    fn replace_encoded(&mut self, meta: Meta, enc: &[u8]) {
        self.rows_live_until = meta.live_until;
        self.shadow_below = meta.shadow_below;
        self.has_marker = meta.has_marker;
        match &mut self.content {
            Content::Encoded(b) if b.len() == enc.len() => b.copy_from_slice(enc),
            c => *c = Content::Encoded(Box::from(enc)),
        }
        self.cost = self.accounted_bytes();
    }

    /// Whether merging `u`, a flushed memtable's partition, into this entry gives `u`
    /// itself: the entry is simple (see `shadow_below`) and `u` is one row with no
    /// deletion, a simple non-counter cell in each of the table's `regular_columns` (at
    /// least one) and a marker (or none when the entry has none either: UPDATEs), all
    /// newer than anything in the entry. Counter cells merge by their shards and lose to
    /// any tombstone whatever its timestamp, so a newer one does not replace. The caller checks that the table has no clustering, static or dropped
    /// columns (so both rows are the partition's one row, and `u`'s cells cover every cell
    /// the entry may hold).
    fn replaced_by(&self, u: &PartitionUpdate, regular_columns: usize) -> bool {
        let newer = |ts: i64| self.shadow_below != i64::MAX && ts > self.shadow_below;
        let [row] = u.rows.as_slice() else {
            return false;
        };
        u.partition_deletion.is_none()
            && u.static_row.is_none()
            && u.range_tombstones.is_empty()
            && row.deletion.is_none()
            && row.marker.map_or(!self.has_marker, |m| newer(m.timestamp))
            && regular_columns > 0
            && row.cells.len() == regular_columns
            && row.cells.iter().all(
                |(_, d)| matches!(d, ColumnData::Simple(c) if !c.is_counter && newer(c.timestamp)),
            )
    }

    /// [`Self::replaced_by`] for a flushed partition of the one row `s` summarizes.
    fn replaced_by_row(&self, s: &SimpleRowSummary, regular_columns: usize) -> bool {
        let newer = |ts: i64| self.shadow_below != i64::MAX && ts > self.shadow_below;
        s.clustering_empty
            && s.marker.map_or(!self.has_marker, |m| newer(m.timestamp))
            && regular_columns > 0
            && s.cells == regular_columns
            && newer(s.min_cell_timestamp)
    }

    /// Merges a flushed partition into this decoded entry where it is
    /// ([`merge_into_in_place`]): the rows vector and the untouched rows stay, the values
    /// of the rows merged or inserted are copied into a buffer of their own, and the cost
    /// and live time are updated by what changed. Once what that leaves held beyond the
    /// content (`slack`) passes [`SLACK_SHARE_MAX`] of the entry's cost, all values go into one
    /// buffer again and cost and live time are worked out from scratch. False, with
    /// nothing done, for an encoded entry or a shape the in-place merge declines.
    fn merge_in_place(&mut self, schema: &TableSchema, flushed: Flushed<'_>) -> bool {
        let Content::Decoded(d) = &mut self.content else {
            return false;
        };
        let vec_before = vec_bytes(&d.rows);
        let mut obs = Placed::new(flushed.rows(), self.rows_live_until);
        if !flushed.merge_into(schema, d, &mut obs) {
            return false;
        }
        let grown = vec_bytes(&d.rows) + obs.heap_added + obs.buffers;
        let cost = (self.cost + grown).saturating_sub(vec_before + obs.heap_removed);
        let slack = self.slack as usize + obs.dead + obs.buffers.saturating_sub(obs.copied);
        if slack * SLACK_SHARE_MAX <= cost {
            self.rows_live_until = obs.live_until;
            self.cost = cost;
            self.slack = u32::try_from(slack).unwrap_or(u32::MAX);
            return true;
        }
        **d = compact(std::mem::take(&mut **d));
        self.rows_live_until = live_until(d);
        self.slack = 0;
        self.cost = self.accounted_bytes();
        true
    }

    /// Prefetches the entry itself (its key, metadata and content pointer).
    fn prefetch_entry(self: &Arc<Self>) {
        crate::prefetch::lines(
            Arc::as_ptr(self).cast::<u8>(),
            std::mem::size_of::<CachedPartition>(),
            usize::MAX,
        );
    }

    /// Prefetches the content's bytes (an encoded entry's first few lines; a decoded one's
    /// structure is a chain of pointers and is left alone).
    fn prefetch_content(&self) {
        if let Content::Encoded(b) = &self.content {
            crate::prefetch::lines(b.as_ptr(), b.len(), PREFETCH_CONTENT_BYTES);
        }
    }

    /// The bytes this entry is accounted in the cache: its allocations, each rounded up
    /// to the allocator's size class, and its two key map buckets.
    fn accounted_bytes(&self) -> usize {
        let key = match &self.key {
            KeyBytes::Inline(..) => 0,
            KeyBytes::Heap(b) => alloc_size(b.len()),
        };
        let fixed = ENTRY_OVERHEAD + key;
        match &self.content {
            Content::Decoded(d) => fixed + decoded_bytes(d),
            Content::Encoded(b) => fixed + alloc_size(b.len()),
        }
    }

    /// The partition's data: borrowed when held decoded, decoded otherwise.
    pub fn data(&self) -> std::result::Result<Cow<'_, PartitionUpdate>, DecodeError> {
        match &self.content {
            Content::Decoded(d) => Ok(Cow::Borrowed(d)),
            Content::Encoded(b) => {
                let mut r = codec::Reader::new(Bytes::copy_from_slice(b));
                codec::read_update_standalone(&mut r).map(Cow::Owned)
            }
        }
    }

    /// Takes the data of a decoded entry, leaving it empty: only for an entry about to be
    /// replaced or removed.
    fn take_decoded(&mut self) -> Option<PartitionUpdate> {
        match &mut self.content {
            Content::Decoded(d) => Some(std::mem::take(&mut **d)),
            Content::Encoded(_) => None,
        }
    }

    /// The partition's data when held decoded.
    pub fn decoded(&self) -> Option<&PartitionUpdate> {
        match &self.content {
            Content::Decoded(d) => Some(d),
            Content::Encoded(_) => None,
        }
    }

    /// Whether the rows are their own live view at `now_seconds`.
    #[inline]
    pub fn rows_live_at(&self, now_seconds: i32) -> bool {
        LocalTime::from(now_seconds) < self.rows_live_until
    }

    #[inline]
    fn is(&self, table: TableId, key: &PartitionKey) -> bool {
        self.token == key.token && self.table == table && self.key.as_slice() == &key.key[..]
    }
}

/// Until when a partition's rows are their own live view (see
/// [`CachedPartition::rows_live_until`]).
fn live_until(data: &PartitionUpdate) -> LocalTime {
    data.rows
        .iter()
        .map(row_live_until)
        .min()
        .unwrap_or(LocalTime::MAX)
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

/// Bytes of an entry besides its data and a long key: the `Arc` allocation of its
/// [`CachedPartition`] and the two key map buckets it takes (the map is at most half full).
const ENTRY_OVERHEAD: usize = std::mem::size_of::<CachedPartition>()
    + 16
    + ALLOC_OVERHEAD
    + 2 * std::mem::size_of::<Bucket>();

/// The allocator's bytes around one allocation (an estimate: jemalloc rounds each up to
/// its size class, glibc adds a header and rounds to 16).
const ALLOC_OVERHEAD: usize = 16;

/// The bytes a decoded entry's data takes from the allocator: its box, every vector at
/// its capacity, and the one buffer [`compact`] put its byte strings in (with the shared
/// header `Bytes` gives it). Measured against jemalloc's heap profile of make bench's IoT
/// phase: the old estimate (`PartitionUpdate::size_bytes`) counted about half of it.
fn decoded_bytes(d: &PartitionUpdate) -> usize {
    let mut values = 0;
    let mut row = |r: &Row| {
        values += row_values(r);
        row_heap_bytes(r)
    };
    let mut n = alloc_size(std::mem::size_of::<PartitionUpdate>()) + vec_bytes(&d.rows);
    n += d.static_row.as_ref().map_or(0, &mut row);
    n += d.rows.iter().map(&mut row).sum::<usize>();
    n += vec_bytes(&d.range_tombstones);
    for rt in &d.range_tombstones {
        n += vec_bytes(&rt.start.prefix.0) + vec_bytes(&rt.end.prefix.0);
        values += rt.start.prefix.0.iter().map(Bytes::len).sum::<usize>();
        values += rt.end.prefix.0.iter().map(Bytes::len).sum::<usize>();
    }
    n + if values > 0 {
        alloc_size(values) + SHARED_HEADER
    } else {
        0
    }
}

/// The bytes of a row's byte strings (clustering values, cell values, collection paths).
fn row_values(r: &Row) -> usize {
    let mut n = r.clustering.0.iter().map(Bytes::len).sum::<usize>();
    for (_, c) in &r.cells {
        n += match c {
            ColumnData::Simple(c) => c.value.len(),
            ColumnData::Complex { cells, .. } => cells
                .iter()
                .map(|(p, c)| p.len() + c.value.len())
                .sum::<usize>(),
        };
    }
    n
}

/// What an entry for `data` costs in the cache (what [`CachedPartition::build`] makes).
#[cfg(test)]
fn entry_cost(key: &PartitionKey, data: &PartitionUpdate) -> usize {
    CachedPartition::build(TableId(0), key, data.clone()).0.cost
}

/// What an entry for `data` costs, estimated before building it (for the size limits;
/// a decoded entry's accounted cost, [`decoded_bytes`], can be larger).
fn cost_bound(key: &PartitionKey, data: &PartitionUpdate) -> usize {
    ENTRY_OVERHEAD + key.key.len() + ALLOC_OVERHEAD + data.size_bytes()
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

/// Copies every value of an entry into one buffer of its own. What reads return are
/// slices of SSTable chunks, memtable arena chunks or request frames; an entry holding
/// those would keep them alive, far beyond the bytes the cache accounts.
fn compact(mut data: PartitionUpdate) -> PartitionUpdate {
    let mut len = 0;
    partition_bytes(&mut data, &mut |b| len += b.len());
    let mut buf = BytesMut::with_capacity(len);
    partition_bytes(&mut data, &mut |b: &mut Bytes| {
        if !b.is_empty() {
            buf.extend_from_slice(b);
            *b = buf.split_to(b.len()).freeze();
        }
    });
    data
}

/// An entry's values are copied into one buffer again once its slack (what in-place
/// merges left held beyond its content) passes this share of its cost (1/16). A time
/// series that only gains rows leaves little; one whose rows are overwritten (the IoT
/// mixes rewrite a fifth of a partition's rows between flushes) is copied about every
/// merge, as before the in-place merge: a quarter let the IoT cache grow from 1.05 GB to
/// its 1.34 GB capacity, and the read mixes then ran at a sixth of their rate.
const SLACK_SHARE_MAX: usize = 16;

/// The largest buffer an in-place merge allocates for its values ([`Placed`]) unless one
/// row needs more.
const PLACED_CHUNK_MAX: usize = 64 << 10;

/// The header `Bytes` puts on a buffer its slices share.
const SHARED_HEADER: usize = 48;

/// What an in-place flush merge placed: the values of the rows it merged or inserted,
/// copied into buffers of its own (a memtable's arena chunk must not stay alive through
/// the cache), and the accounting of what changed.
struct Placed {
    buf: BytesMut,
    /// Rows the merge will place at most (the flushed partition's), and placed so far:
    /// a buffer is sized for the rows left at the size of the row that needs it (sizing
    /// it from all the values up front took a pass over the memtable's rows that cost as
    /// much as the merge's copies).
    expected: usize,
    rows: usize,
    /// The buffers' accounted bytes, and the value bytes copied into them.
    buffers: usize,
    copied: usize,
    /// Value bytes of the rows replaced: left in the entry's older buffers.
    dead: usize,
    heap_added: usize,
    heap_removed: usize,
    live_until: LocalTime,
}

impl Placed {
    /// For placing up to `expected` rows into an entry live until `live_until`.
    fn new(expected: usize, live_until: LocalTime) -> Self {
        Placed {
            buf: BytesMut::new(),
            expected,
            rows: 0,
            buffers: 0,
            copied: 0,
            dead: 0,
            heap_added: 0,
            heap_removed: 0,
            live_until,
        }
    }
}

impl InPlaceMerge for Placed {
    fn replacing(&mut self, old: &Row) {
        self.heap_removed += row_heap_bytes(old);
        self.dead += row_values(old);
    }

    fn placed(&mut self, row: &mut Row) {
        self.heap_added += row_heap_bytes(row);
        self.live_until = self.live_until.min(row_live_until(row));
        let need = row_values(row);
        if self.buf.capacity() - self.buf.len() < need {
            let rows_left = self.expected.saturating_sub(self.rows).max(1);
            let cap = need
                .saturating_mul(rows_left)
                .min(PLACED_CHUNK_MAX)
                .max(need);
            self.buf = BytesMut::with_capacity(cap);
            self.buffers += alloc_size(cap) + SHARED_HEADER;
        }
        self.rows += 1;
        self.copied += need;
        row_bytes(row, &mut |b: &mut Bytes| {
            if !b.is_empty() {
                self.buf.extend_from_slice(b);
                *b = self.buf.split_to(b.len()).freeze();
            }
        });
    }
}

/// What one [`RowCache::defrag_slice`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefragSlice {
    /// Encoded entries looked at.
    pub examined: usize,
    pub moved: usize,
    /// The slice reached the key map's end (the next one starts a new pass).
    pub wrapped: bool,
    /// The slice stopped at its deadline, before its budget.
    pub cut: bool,
}

/// Set in a bucket's `hash` while its entry is referenced (CLOCK).
const REFERENCED: u64 = 1 << 63;

/// One slot of the key map: the key's hash (with the CLOCK reference bit) and the entry.
/// 16 bytes, four to a cache line, so a probe usually reads one line before the entry.
#[derive(Default)]
struct Bucket {
    hash: u64,
    entry: Option<Arc<CachedPartition>>,
}

/// The key map's hash of (table, token): the token is already a Murmur3 hash of the key;
/// this mixes in the table and spreads the bits over the low ones the map indexes by.
#[inline]
fn hash_of(table: TableId, token: i64) -> u64 {
    let t = (table.0 as u64) ^ ((table.0 >> 64) as u64).rotate_left(29);
    let mut h = (token as u64) ^ t.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h & !REFERENCED
}

/// How much of an encoded entry's content [`RowCache::prefetch`] asks for (a `standard1`
/// partition's five 34-byte cells fit).
const PREFETCH_CONTENT_BYTES: usize = 320;

/// Buckets a new key map starts with.
const MIN_BUCKETS: usize = 16;

/// The cache has room for any miss (no admission check) while a 1/`ADMISSION_ROOM` of its
/// capacity is free.
const ADMISSION_ROOM: usize = 64;

/// The fewest keys the admission's frequencies are sized for.
const ADMISSION_MIN_KEYS: usize = 1024;

/// Partitions over the size limits remembered ([`RowCache::known_too_big`]).
const TOO_BIG_KEYS: usize = 4096;

/// A byte-bounded CLOCK cache of partitions' SSTable-side content. A capacity of 0
/// disables it.
///
/// The key map is open addressing with linear probing and backward-shift deletion (no
/// tombstones), at most half full; the CLOCK hand sweeps its buckets, so there is no
/// separate eviction order to keep in step with it.
pub struct RowCache {
    /// A power of two long (or empty).
    buckets: Vec<Bucket>,
    len: usize,
    /// Entries per table (tables with none are absent), so table-wide work on a table
    /// without entries is skipped instead of sweeping the buckets.
    per_table: HashMap<TableId, usize, Hash>,
    hand: usize,
    bytes: usize,
    capacity: usize,
    partition_max: usize,
    hits: u64,
    misses: u64,
    insertions: u64,
    evictions: u64,
    invalidations: u64,
    flush_replacements: u64,
    /// Where [`defrag_slice`](Self::defrag_slice) goes on.
    defrag_cursor: usize,
    defrag_moves: u64,
    /// How often keys were asked for lately (hits and misses alike), kept once the cache
    /// first had no room for a miss ([`admits`](Self::admits)).
    freq: Option<Frequencies>,
    /// Misses [`admits`](Self::admits) kept out.
    rejections: u64,
    /// [`hash_of`] of partitions found over the size limits lately (at most
    /// [`TOO_BIG_KEYS`]; emptied when full), so their reads go straight to the sliced
    /// read ([`known_too_big`](Self::known_too_big)) instead of reading them whole again.
    too_big: std::collections::HashSet<u64, Hash>,
}

impl RowCache {
    /// A cache of `capacity_bytes` that does not hold partitions estimated above
    /// `partition_max_bytes`.
    pub fn new(capacity_bytes: u64, partition_max_bytes: u64) -> Self {
        RowCache {
            buckets: Vec::new(),
            len: 0,
            per_table: HashMap::default(),
            hand: 0,
            bytes: 0,
            capacity: usize::try_from(capacity_bytes).unwrap_or(usize::MAX),
            partition_max: usize::try_from(partition_max_bytes).unwrap_or(usize::MAX),
            hits: 0,
            misses: 0,
            insertions: 0,
            evictions: 0,
            invalidations: 0,
            flush_replacements: 0,
            defrag_cursor: 0,
            defrag_moves: 0,
            freq: None,
            rejections: 0,
            too_big: Default::default(),
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
            flush_replacements: self.flush_replacements,
            defrag_moves: self.defrag_moves,
            rejections: self.rejections,
            partitions: self.len as u64,
            bytes: self.bytes as u64,
            capacity: self.capacity as u64,
        }
    }

    /// The largest entry the cache holds, in bytes (the partition limit or the whole
    /// capacity, whichever is smaller).
    pub fn partition_max(&self) -> u64 {
        self.partition_max.min(self.capacity) as u64
    }

    /// Whether an entry of `cost` bytes is too big to cache: over the partition limit or
    /// the whole capacity.
    fn over_limits(&self, cost: usize) -> bool {
        cost > self.partition_max || cost > self.capacity
    }

    /// Makes the next [`defrag_slice`](Self::defrag_slice) start a pass at the key map's
    /// first slot.
    pub fn restart_defrag(&mut self) {
        self.defrag_cursor = 0;
    }

    /// Entries cached.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn mask(&self) -> usize {
        self.buckets.len().wrapping_sub(1)
    }

    /// The bucket holding a key's entry.
    #[inline]
    fn find(&self, table: TableId, key: &PartitionKey) -> Option<usize> {
        self.find_hashed(table, key, hash_of(table, key.token))
    }

    /// [`find`](Self::find) given the key's [`hash_of`].
    #[inline]
    fn find_hashed(&self, table: TableId, key: &PartitionKey, h: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.mask();
        let mut i = h as usize & mask;
        // Ends: the map is at most half full, so an empty bucket follows.
        loop {
            let b = self.buckets.get(i)?;
            let e = b.entry.as_ref()?;
            if b.hash & !REFERENCED == h && e.is(table, key) {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The cached SSTable-side content of a partition, marking it recently used; counts a
    /// hit or a miss.
    #[inline]
    pub fn get(&mut self, table: TableId, key: &PartitionKey) -> Option<&Arc<CachedPartition>> {
        let h = hash_of(table, key.token);
        if let Some(f) = &mut self.freq {
            f.increment(h);
        }
        match self.find_hashed(table, key, h) {
            Some(i) => {
                self.hits += 1;
                let b = self.buckets.get_mut(i)?;
                b.hash |= REFERENCED;
                b.entry.as_ref()
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Whether a read of this partition found it over the size limits lately (it is
    /// then read from the SSTables for the read's slices, never whole to be cached). A
    /// partition that shrank back under the limits is cached again once the remembered
    /// keys are emptied.
    pub fn known_too_big(&self, table: TableId, key: &PartitionKey) -> bool {
        !self.too_big.is_empty() && self.too_big.contains(&hash_of(table, key.token))
    }

    /// Remembers a partition found over the size limits.
    pub(crate) fn note_too_big(&mut self, table: TableId, key: &PartitionKey) {
        if self.too_big.len() >= TOO_BIG_KEYS {
            self.too_big.clear();
        }
        self.too_big.insert(hash_of(table, key.token));
    }

    /// Whether a partition is cached (no counting, no reference bit).
    pub fn contains(&self, table: TableId, key: &PartitionKey) -> bool {
        self.find(table, key).is_some()
    }

    /// Puts an entry into the first free bucket of its probe sequence (the key is absent
    /// and a bucket is free: see [`reserve_one`](Self::reserve_one)).
    fn place(&mut self, hash: u64, entry: Arc<CachedPartition>) {
        let mask = self.mask();
        let mut i = (hash & !REFERENCED) as usize & mask;
        while let Some(b) = self.buckets.get_mut(i) {
            if b.entry.is_none() {
                *b = Bucket {
                    hash,
                    entry: Some(entry),
                };
                return;
            }
            i = (i + 1) & mask;
        }
        debug_assert!(false, "row cache key map has no bucket");
    }

    /// Grows the key map so one more entry keeps it at most half full.
    fn reserve_one(&mut self) {
        if (self.len + 1) * 2 <= self.buckets.len() {
            return;
        }
        let n = (self.buckets.len() * 2).max(MIN_BUCKETS);
        self.rebuild(n, |_| true);
    }

    /// Rebuilds the key map with `n` buckets, keeping the entries `keep` accepts (their
    /// reference bits too); returns how many were dropped.
    fn rebuild(&mut self, n: usize, keep: impl Fn(&CachedPartition) -> bool) -> u64 {
        let old = std::mem::replace(
            &mut self.buckets,
            std::iter::repeat_with(Bucket::default).take(n).collect(),
        );
        let mut dropped = 0;
        for b in old {
            if let Some(e) = b.entry {
                if keep(&e) {
                    self.place(b.hash, e);
                } else {
                    self.len -= 1;
                    self.bytes -= e.cost;
                    self.uncount(e.table);
                    dropped += 1;
                }
            }
        }
        self.hand = 0;
        dropped
    }

    /// Empties bucket `i`, moving later entries of its cluster back so every entry stays
    /// reachable from its home bucket.
    fn remove_at(&mut self, mut i: usize) -> Option<Arc<CachedPartition>> {
        let mask = self.mask();
        let gone = self.buckets.get_mut(i)?.entry.take()?;
        self.len -= 1;
        self.bytes -= gone.cost;
        self.uncount(gone.table);
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let Some(b) = self.buckets.get_mut(j) else {
                break;
            };
            if b.entry.is_none() {
                break;
            }
            let home = (b.hash & !REFERENCED) as usize & mask;
            // It stays when its home lies cyclically in (i, j].
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                let moved = std::mem::take(b);
                if let Some(dst) = self.buckets.get_mut(i) {
                    *dst = moved;
                }
                i = j;
            }
        }
        Some(gone)
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
    ) -> (Arc<CachedPartition>, bool) {
        self.remove(table, key);
        let bound = cost_bound(key, &data);
        if self.over_limits(bound) {
            self.note_too_big(table, key);
            return (Arc::new(CachedPartition::uncached(table, key, data)), false);
        }
        let (entry, decoded) = CachedPartition::build(table, key, data);
        let cost = entry.cost;
        // The cost is known only once built (`cost_bound` undercounts decoded data and
        // size-class rounding); the flush's merge drops entries over the limits, so they
        // are not cached here either.
        if self.over_limits(cost) {
            self.note_too_big(table, key);
            let view = match decoded {
                Some(data) => CachedPartition::uncached(table, key, data),
                None => entry,
            };
            return (Arc::new(view), false);
        }
        while self.bytes + cost > self.capacity && self.evict_one() {}
        let entry = Arc::new(entry);
        self.reserve_one();
        self.place(hash_of(table, key.token), entry.clone());
        self.len += 1;
        *self.per_table.entry(table).or_default() += 1;
        self.bytes += cost;
        self.insertions += 1;
        // An encoded entry: the read that inserted it gets the data as it was read.
        let view = match decoded {
            Some(data) => {
                let content = Content::Decoded(Box::new(data));
                Arc::new(CachedPartition::bare(table, key, entry.meta(), content))
            }
            None => entry,
        };
        (view, true)
    }

    /// Goes on round the key map until it has looked at `budget` encoded entries, walked
    /// eight times `budget` slots, reached the map's end or passed `deadline` (checked every
    /// [`SLICE_CLOCK_STRIDE`] slots and after every move), copying each entry for which `should_move` holds of
    /// its allocation or its data's into new allocations (a read holding the old copy
    /// keeps it). The old copies are freed only after every new one is allocated, so a new
    /// copy never takes the place an old one just left. `should_move` is only given
    /// addresses inside live allocations (an entry's, and its non-empty data's). An empty
    /// map counts as a whole pass. See [`crate::alloc`].
    pub fn defrag_slice(
        &mut self,
        budget: usize,
        deadline: Option<std::time::Instant>,
        mut should_move: impl FnMut(*const u8) -> bool,
    ) -> DefragSlice {
        let n = self.buckets.len();
        let mut out = DefragSlice::default();
        let mut old = Vec::new();
        let mut walk = budget.saturating_mul(8);
        let mut walked = 0usize;
        out.wrapped = n == 0;
        while out.examined < budget && walk > 0 && !out.wrapped {
            walk -= 1;
            walked += 1;
            if walked.is_multiple_of(SLICE_CLOCK_STRIDE)
                && deadline.is_some_and(|d| std::time::Instant::now() >= d)
            {
                out.cut = true;
                break;
            }
            let i = self.defrag_cursor & (n - 1);
            self.defrag_cursor = (i + 1) & (n - 1);
            out.wrapped = self.defrag_cursor == 0;
            let Some(b) = self.buckets.get_mut(i) else {
                continue;
            };
            let Some(e) = &b.entry else { continue };
            let Content::Encoded(data) = &e.content else {
                continue;
            };
            out.examined += 1;
            if !should_move(Arc::as_ptr(e).cast())
                && (data.is_empty() || !should_move(data.as_ptr()))
            {
                continue;
            }
            if let Some(copy) = e.relocated() {
                old.push(b.entry.replace(Arc::new(copy)));
                out.moved += 1;
                // A move can take 100 µs where the host backs the new copy's memory
                // lazily: the clock is read after each.
                if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    out.cut = out.examined < budget;
                    break;
                }
            }
        }
        drop(old);
        self.defrag_moves += out.moved as u64;
        out
    }

    /// Drops one entry.
    pub fn remove(&mut self, table: TableId, key: &PartitionKey) {
        if let Some(i) = self.find(table, key) {
            self.remove_at(i);
        }
    }

    fn uncount(&mut self, table: TableId) {
        if let Some(n) = self.per_table.get_mut(&table) {
            *n -= 1;
            if *n == 0 {
                self.per_table.remove(&table);
            }
        }
    }

    /// Entries of a table.
    fn table_len(&self, table: TableId) -> usize {
        self.per_table.get(&table).copied().unwrap_or(0)
    }

    /// Drops every entry of a table.
    pub fn invalidate_table(&mut self, table: TableId) {
        if self.table_len(table) == 0 {
            return;
        }
        let n = self.buckets.len();
        self.invalidations += self.rebuild(n, |e| e.table != table);
    }

    /// One level of a batch prefetch ([`crate::shard::ShardStorage::prefetch`]) for the
    /// partitions `keys` that reads want: level 0 the key map buckets, 1 the entries their
    /// buckets name, 2 the entries' content. Each level reads what the one before fetched
    /// (only the home bucket is looked at: a key that probed further is simply not
    /// prefetched). Hints only: nothing changes, not even the CLOCK bits.
    pub(crate) fn prefetch(&self, keys: &[crate::PrefetchKey], level: u8) {
        if self.len == 0 {
            return;
        }
        for k in keys.iter().filter(|k| k.read) {
            match level {
                0 => {
                    if let Some(b) = self.home_bucket(k.table, k.token) {
                        crate::prefetch::line(b);
                    }
                }
                1 => {
                    if let Some(e) = self.home_entry(k.table, k.token) {
                        e.prefetch_entry();
                    }
                }
                _ => {
                    if let Some(e) = self.home_entry(k.table, k.token) {
                        e.prefetch_content();
                    }
                }
            }
        }
    }

    /// The bucket a key's hash points at (where its entry is unless it probed further).
    #[inline]
    fn home_bucket(&self, table: TableId, token: i64) -> Option<&Bucket> {
        self.buckets
            .get(hash_of(table, token) as usize & self.mask())
    }

    /// The entry in a key's home bucket when the stored hash matches (the entry of that
    /// key or of one with the same hash); for prefetching, so the key is not compared.
    #[inline]
    fn home_entry(&self, table: TableId, token: i64) -> Option<&Arc<CachedPartition>> {
        let h = hash_of(table, token);
        let b = self.buckets.get(h as usize & self.mask())?;
        b.entry.as_ref().filter(|_| b.hash & !REFERENCED == h)
    }

    /// Merges a flushed memtable into the entries of the partitions it holds, all at once
    /// (the shard does it in slices: [`merge_flushed_slice`](Self::merge_flushed_slice)).
    pub fn merge_flushed(&mut self, table: TableId, schema: &TableSchema, mem: &Memtable) {
        self.merge_flushed_slice(table, schema, mem, &mut None, usize::MAX);
    }

    /// Merges the partitions of a flushed memtable `mem`
    /// after `done_up_to` (advanced) into their entries, at most `budget` partitions looked
    /// at (all of them at once when the cache holds nothing of `table`). Returns whether
    /// `mem` is done and how many partitions were looked at.
    pub fn merge_flushed_slice(
        &mut self,
        table: TableId,
        schema: &TableSchema,
        mem: &Memtable,
        done_up_to: &mut Option<PartitionKey>,
        budget: usize,
    ) -> (bool, usize) {
        if self.table_len(table) == 0 {
            return (true, 0);
        }
        let from = match done_up_to.take() {
            Some(k) => std::ops::Bound::Excluded(k),
            None => std::ops::Bound::Unbounded,
        };
        let mut used = 0;
        let mut too_big = Vec::new();
        let mut scratch = Vec::new();
        // Rows of tables without clustering, static or dropped columns may replace their
        // entry whole (`CachedPartition::replaced_by`): no decode, merge or drop of it.
        let regular_columns = (schema.clustering_key.is_empty()
            && !schema.has_statics()
            && schema.dropped_columns.is_empty())
        .then(|| {
            schema
                .columns
                .iter()
                .filter(|c| c.kind == ColumnKind::Regular)
                .count()
        });
        let mut parts = mem
            .partitions
            .range(from.as_ref(), std::ops::Bound::Unbounded)
            .peekable();
        let mut batch: Vec<(&PartitionKey, &MemPartition)> = Vec::with_capacity(MERGE_BATCH);
        let mut last: Option<&PartitionKey> = None;
        loop {
            if used == budget && parts.peek().is_some() {
                // Where the next slice starts (the same place again if nothing was looked
                // at: `from` excluded `done_up_to`, so it is put back as it was).
                *done_up_to = last.cloned().or_else(|| match from {
                    std::ops::Bound::Excluded(ref k) => Some(k.clone()),
                    _ => None,
                });
                self.finish_merge(table, too_big);
                return (false, used);
            }
            batch.clear();
            batch.extend(parts.by_ref().take(MERGE_BATCH.min(budget - used)));
            let Some(&(end, _)) = batch.last() else {
                break;
            };
            last = Some(end);
            self.warm_for_merge(table, &batch);
            for &(key, p) in &batch {
                self.merge_flushed_partition(
                    table,
                    schema,
                    mem,
                    (key, p),
                    regular_columns,
                    &mut scratch,
                    &mut too_big,
                );
            }
            used += batch.len();
        }
        self.finish_merge(table, too_big);
        (true, used)
    }

    /// Prefetches what merging `batch` will read, one level of indirection at a time
    /// across the whole batch (the key map buckets; then, for the keys whose bucket holds
    /// an entry of their hash, the entry and the memtable's key and row; then the entry's
    /// content), so the cache misses of different partitions overlap instead of coming one
    /// after the other: a flush merge looks up partitions scattered over the whole cache.
    /// Only partitions that are cached get their rows prefetched: most flushed partitions
    /// are not, and prefetching their rows too (the former order) competed with the useful
    /// lines (688 → 506 ns per flushed partition, measured in one process). Prefetch
    /// instructions, not loads, where the address is known: loads kept for their value (the
    /// former way) stalled the merge once the CPU's reorder window filled.
    fn warm_for_merge(&self, table: TableId, batch: &[(&PartitionKey, &MemPartition)]) {
        use crate::prefetch::{line, lines};
        for (k, _) in batch {
            if let Some(b) = self.home_bucket(table, k.token) {
                line(b);
            }
        }
        for (k, p) in batch {
            if let Some(e) = self.home_entry(table, k.token) {
                e.prefetch_entry();
                line(k.key.as_ptr());
                if let MemPartition::Single(enc) = p {
                    lines(enc.as_ptr(), enc.len(), PREFETCH_CONTENT_BYTES);
                }
            }
        }
        for (k, _) in batch {
            if let Some(e) = self.home_entry(table, k.token) {
                e.prefetch_content();
            }
        }
    }

    /// Merges one flushed partition into its entry, if cached (see
    /// [`merge_flushed_slice`](Self::merge_flushed_slice)); keys of entries that grew
    /// past the limits go to `too_big`.
    #[allow(clippy::too_many_arguments)]
    fn merge_flushed_partition(
        &mut self,
        table: TableId,
        schema: &TableSchema,
        mem: &Memtable,
        (key, p): (&PartitionKey, &MemPartition),
        regular_columns: Option<usize>,
        scratch: &mut Vec<u8>,
        too_big: &mut Vec<PartitionKey>,
    ) {
        let Some(i) = self.find(table, key) else {
            return;
        };
        let Some(b) = self.buckets.get_mut(i) else {
            return;
        };
        let Some(old) = &mut b.entry else {
            return;
        };
        let old_cost = old.cost;
        // A single-row partition of simple cells is checked, and copied, from its bytes.
        let single = match (regular_columns, p) {
            (Some(n), MemPartition::Single(enc)) => single_summary(enc)
                .filter(|s| old.replaced_by_row(s, n))
                .map(|s| (Meta::of_simple_row(&s), enc)),
            _ => None,
        };
        let flushed;
        let meta = match single {
            Some((meta, enc)) => {
                scratch.clear();
                if !single_standalone(enc, scratch) {
                    return too_big.push(key.clone());
                }
                meta
            }
            None => {
                // A partition of a table with clustering columns merges straight from the
                // memtable's rows: copying them all into an update first (then dropping
                // it) cost as much as the merge itself for wide partitions that take new
                // rows all the time (time series: every flush touches every cached one).
                if let (None, MemPartition::General(g)) = (regular_columns, p) {
                    return self.merge_decoded(table, schema, i, key, Flushed::Mem(g), too_big);
                }
                flushed = mem.to_update(p, &[]);
                if !regular_columns.is_some_and(|n| old.replaced_by(&flushed, n)) {
                    return self.merge_decoded(
                        table,
                        schema,
                        i,
                        key,
                        Flushed::Update(&flushed),
                        too_big,
                    );
                }
                scratch.clear();
                let copied =
                    matches!(p, MemPartition::Single(enc) if single_standalone(enc, scratch));
                if !copied {
                    codec::encode_update_standalone(&flushed, scratch);
                }
                Meta::of(&flushed)
            }
        };
        // The entry becomes the flushed row's encoding, copied from the memtable (a
        // one-row partition there is held in the same row encoding), in the entry's own
        // allocations when no reader holds it.
        self.flush_replacements += 1;
        let cost = match Arc::get_mut(old) {
            Some(e) => {
                e.replace_encoded(meta, scratch);
                e.cost
            }
            None => {
                let content = Content::Encoded(Box::from(scratch.as_slice()));
                let e = CachedPartition::with(table, key, meta, content);
                let cost = e.cost;
                *old = Arc::new(e);
                cost
            }
        };
        self.bytes = self.bytes - old_cost + cost;
        if self.over_limits(cost) {
            too_big.push(key.clone());
        }
    }

    /// Merges a flushed partition into the entry in bucket `i` by decoding, merging and
    /// encoding it again.
    fn merge_decoded(
        &mut self,
        table: TableId,
        schema: &TableSchema,
        i: usize,
        key: &PartitionKey,
        flushed: Flushed<'_>,
        too_big: &mut Vec<PartitionKey>,
    ) {
        let Some(Some(old)) = self.buckets.get_mut(i).map(|b| &mut b.entry) else {
            return;
        };
        let old_cost = old.cost;
        // An entry no reader holds takes the flushed rows where it is.
        if let Some(e) = Arc::get_mut(old)
            && e.merge_in_place(schema, flushed)
        {
            let cost = e.cost;
            self.bytes = self.bytes - old_cost + cost;
            if cost > self.partition_max || cost > self.capacity {
                too_big.push(key.clone());
            }
            return;
        }
        // Otherwise the rows of an entry no reader holds move into the merge instead of
        // being copied (the entry, left empty, is replaced below or dropped as too big).
        let merged = match Arc::get_mut(old).and_then(CachedPartition::take_decoded) {
            Some(data) => flushed.merged_into(schema, data),
            None => {
                // An entry that does not decode (never expected) is dropped with the big
                // ones.
                let Ok(old_data) = old.data() else {
                    return too_big.push(key.clone());
                };
                match flushed {
                    Flushed::Update(u) => merge_partition_updates(schema, &old_data, u),
                    // A reader holds the entry (rare): its rows are copied.
                    Flushed::Mem(_) => flushed.merged_into(schema, old_data.into_owned()),
                }
            }
        };
        let (entry, _) = CachedPartition::build(table, key, merged);
        if entry.cost > self.partition_max || entry.cost > self.capacity {
            return too_big.push(key.clone());
        }
        self.bytes = self.bytes - old_cost + entry.cost;
        if let Some(b) = self.buckets.get_mut(i) {
            b.entry = Some(Arc::new(entry));
        }
    }

    fn finish_merge(&mut self, table: TableId, too_big: Vec<PartitionKey>) {
        self.invalidations += too_big.len() as u64;
        for key in too_big {
            self.remove(table, &key);
            self.note_too_big(table, &key);
        }
        while self.bytes > self.capacity && self.evict_one() {}
    }

    /// Advances the CLOCK hand until it evicts one entry; false if the cache is empty.
    fn evict_one(&mut self) -> bool {
        let Some(i) = self.victim() else {
            return false;
        };
        // A later entry may move into this bucket: the hand looks at it next.
        self.remove_at(i);
        self.evictions += 1;
        true
    }

    /// Advances the CLOCK hand (clearing reference bits) to the entry it would evict next
    /// and returns its bucket; None if the cache is empty.
    fn victim(&mut self) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.mask();
        // Two sweeps clear every reference bit, so this ends.
        for _ in 0..=2 * self.buckets.len() {
            self.hand &= mask;
            let b = self.buckets.get_mut(self.hand)?;
            if b.entry.is_none() {
                self.hand += 1;
            } else if b.hash & REFERENCED != 0 {
                b.hash &= !REFERENCED;
                self.hand += 1;
            } else {
                return Some(self.hand);
            }
        }
        None
    }

    /// Whether a read that missed `key` should cache the partition (TinyLFU admission):
    /// always while the cache has room; once it is full, only if the key was asked for
    /// more often lately than the entry the CLOCK would evict for it. Without this a loop
    /// over more partitions than the cache holds (a poller visiting every device in turn)
    /// evicted each partition just before it was asked for again: every read missed, and
    /// each paid for a whole partition's copy into the cache and another one's eviction.
    /// With it the cache keeps a stable part of the loop and serves that part. The
    /// frequencies are kept from the first time the cache is full on (hits and misses
    /// counted in [`get`](Self::get)), sized for the entries it then holds, and grown
    /// (keeping the counts) when it holds twice as many.
    pub fn admits(&mut self, table: TableId, key: &PartitionKey) -> bool {
        if !self.enabled() || self.bytes + self.capacity / ADMISSION_ROOM < self.capacity {
            return true;
        }
        let keys = self.len.max(ADMISSION_MIN_KEYS);
        let h = hash_of(table, key.token);
        let freq = match &mut self.freq {
            Some(f) => {
                if keys > 2 * f.keys() {
                    f.grow_to(keys);
                }
                f
            }
            slot => {
                let mut f = Frequencies::for_keys(keys);
                // The miss being decided counts, as later ones will.
                f.increment(h);
                slot.insert(f)
            }
        };
        let mine = freq.estimate(h);
        let Some(v) = self.victim() else {
            return true;
        };
        let theirs = self.buckets.get(v).map_or(0, |b| {
            self.freq
                .as_ref()
                .map_or(0, |f| f.estimate(b.hash & !REFERENCED))
        });
        if mine > theirs {
            return true;
        }
        self.rejections += 1;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amphora_types::data::{Cell, Clustering, ColumnData, Row};
    use bytes::Bytes;

    fn data_of(e: &Arc<CachedPartition>) -> PartitionUpdate {
        e.data().expect("decodes").into_owned()
    }

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
        assert_eq!(c.get(t, &key(5, "a")).map(data_of), Some(part(10)));
        assert_eq!(c.get(t, &key(5, "b")).map(data_of), Some(part(20)));
        assert_eq!(c.get(t, &key(5, "c")), None);
        assert_eq!(c.get(TableId(2), &key(5, "a")), None);
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.insertions, s.partitions), (2, 2, 2, 2));
        assert_eq!(
            s.bytes as usize,
            entry_cost(&key(5, "a"), &part(10)) + entry_cost(&key(5, "b"), &part(20))
        );
    }

    /// Defragmentation copies the encoded entries the allocator names into new
    /// allocations, leaves the rest (and decoded entries) where they are, and a read
    /// holding an old copy keeps it.
    /// A partition of more rows than are cached encoded (so its entry is held decoded).
    fn wide_part() -> PartitionUpdate {
        let mut wide = part(30);
        wide.rows = (0..ENCODED_ROWS_MAX as u8 + 2)
            .map(|i| {
                let mut r = part(30).rows.remove(0);
                r.clustering = Clustering(vec![Bytes::from(vec![i])]);
                r
            })
            .collect();
        wide
    }

    #[test]
    fn prefetch_changes_nothing() {
        let mut c = RowCache::new(1 << 20, 1 << 20);
        let t = TableId(1);
        // Empty: every level returns at once.
        for level in 0..3 {
            c.prefetch(
                &[crate::PrefetchKey {
                    table: t,
                    token: 5,
                    read: true,
                }],
                level,
            );
        }
        c.insert(t, &key(5, "a"), part(10));
        let wide = wide_part();
        c.insert(t, &key(6, "w"), wide.clone());
        let before = c.stats();
        // Cached (encoded and decoded), absent, another table's, colliding tokens.
        let keys =
            [(t, 5), (t, 6), (t, 7), (TableId(2), 5), (t, i64::MIN)].map(|(table, token)| {
                crate::PrefetchKey {
                    table,
                    token,
                    read: true,
                }
            });
        for level in 0..3 {
            c.prefetch(&keys, level);
        }
        let after = c.stats();
        assert_eq!(
            (after.hits, after.misses, after.bytes),
            (before.hits, before.misses, before.bytes)
        );
        assert_eq!(c.get(t, &key(5, "a")).map(data_of), Some(part(10)));
        assert_eq!(c.get(t, &key(6, "w")).map(data_of), Some(wide));
    }

    #[test]
    fn a_defrag_slice_past_its_deadline_stops_after_one_move() {
        let mut c = RowCache::new(1 << 24, 1 << 20);
        let t = TableId(1);
        for i in 0..1000 {
            c.insert(t, &key(i, &format!("k{i}")), part(20));
        }
        let past = Some(std::time::Instant::now());
        let mut seen = 0;
        let mut slices = 0;
        loop {
            let s = c.defrag_slice(usize::MAX, past, |_| true);
            // The clock is read after every move: one at most.
            assert!(s.examined <= 1, "{s:?}");
            assert_eq!(s.moved, s.examined);
            // Stopped by the deadline, not by the budget (the last one may end the pass).
            assert!(s.cut || s.wrapped, "{s:?}");
            seen += s.examined;
            slices += 1;
            if s.wrapped {
                break;
            }
        }
        // Still one whole pass, over many slices; every entry still there.
        assert_eq!(seen, 1000);
        assert!(slices >= 1000, "{slices}");
        // Without a deadline the budget ends a slice, which is then not cut.
        let s = c.defrag_slice(10, None, |_| true);
        assert_eq!((s.examined, s.cut), (10, false));
        for i in 0..1000 {
            assert!(c.get(t, &key(i, &format!("k{i}"))).is_some(), "{i}");
        }
    }

    #[test]
    fn defrag_moves_the_entries_named_and_keeps_their_content() {
        let mut c = RowCache::new(1 << 24, 1 << 20);
        let t = TableId(1);
        for i in 0..100 {
            c.insert(t, &key(i, &format!("k{i}")), part(20 + i as usize));
        }
        let wide = wide_part();
        c.insert(t, &key(500, "wide"), wide.clone());
        let before: Vec<_> = (0..100)
            .map(|i| c.get(t, &key(i, &format!("k{i}"))).expect("cached").clone())
            .collect();
        let wide_before = c.get(t, &key(500, "wide")).expect("cached").clone();
        let bytes = c.stats().bytes;
        // Nothing named: nothing moves; a pass looks at every encoded entry once.
        let pass = c.defrag_slice(usize::MAX, None, |_| false);
        assert_eq!((pass.examined, pass.moved, pass.wrapped), (100, 0, true));
        let mut seen = 0;
        loop {
            let s = c.defrag_slice(7, None, |_| false);
            assert!(s.examined <= 7);
            seen += s.examined;
            if s.wrapped {
                break;
            }
        }
        assert_eq!(seen, 100);
        // Entries whose own allocation is named (the even ones) move.
        let even: std::collections::HashSet<usize> = before
            .iter()
            .step_by(2)
            .map(|e| Arc::as_ptr(e) as usize)
            .collect();
        let moved = c.defrag_slice(usize::MAX, None, |p| even.contains(&(p as usize)));
        assert_eq!(moved.moved, 50);
        for (i, old) in before.iter().enumerate() {
            let now = c.get(t, &key(i as i64, &format!("k{i}"))).expect("cached");
            assert_eq!(Arc::ptr_eq(now, old), i % 2 == 1, "{i}");
            assert_eq!(data_of(now), data_of(old), "{i}");
            assert_eq!(data_of(old), part(20 + i));
        }
        // Everything named: every encoded entry moves, the decoded one stays.
        let moved = c.defrag_slice(usize::MAX, None, |_| true);
        assert_eq!(moved.moved, 100);
        assert!(Arc::ptr_eq(
            c.get(t, &key(500, "wide")).expect("cached"),
            &wide_before
        ));
        assert_eq!(c.stats().bytes, bytes);
        assert_eq!(c.stats().defrag_moves, 150);
        assert_eq!(c.stats().partitions, 101);
    }

    #[test]
    fn allocation_sizes_follow_the_allocator_classes() {
        let classes = [
            (0, 0),
            (1, 8),
            (8, 8),
            (9, 16),
            (100, 112),
            (128, 128),
            (129, 160),
            (256, 256),
            (257, 320),
            (1000, 1024),
            (1025, 1280),
            (5000, 5120),
        ];
        for (n, class) in classes {
            assert_eq!(alloc_size(n), class, "{n}");
        }
    }

    /// A decoded entry is accounted every allocation its rows take: per row at least the
    /// `Row` itself, a clustering vector and a cell vector (the old estimate counted about
    /// half of what jemalloc's heap profile showed), plus the one buffer of its values.
    #[test]
    fn decoded_entries_are_accounted_their_vectors_and_values() {
        let rows = 200;
        let mut u = part(34);
        u.rows = (0..rows)
            .map(|i| {
                let mut r = part(34).rows.remove(0);
                r.clustering = Clustering(vec![Bytes::from(vec![i as u8; 8])]);
                r
            })
            .collect();
        let (e, _) = CachedPartition::build(TableId(1), &key(1, "w"), u.clone());
        let d = e.decoded().expect("wide partitions are held decoded");
        let per_row = std::mem::size_of::<Row>()
            + alloc_size(std::mem::size_of::<Bytes>())
            + alloc_size(std::mem::size_of::<(
                amphora_types::schema::ColumnId,
                ColumnData,
            )>());
        let values = rows * (34 + 8);
        assert!(
            decoded_bytes(d) >= rows * per_row + values,
            "{}",
            decoded_bytes(d)
        );
        assert!(decoded_bytes(d) > u.size_bytes() * 5 / 4);
        assert!(e.cost >= decoded_bytes(d));
        // A cache whose partition limit lies between the estimate and the real cost does
        // not keep it (the flush's merge would drop it again).
        let bound = cost_bound(&key(1, "w"), &u);
        assert!(bound < e.cost);
        let mut c = RowCache::new(1 << 24, ((bound + e.cost) / 2) as u64);
        let (view, cached) = c.insert(TableId(1), &key(1, "w"), u.clone());
        assert!(!cached);
        assert_eq!(view.decoded(), Some(&u));
        assert_eq!(c.stats().partitions, 0);
        assert_eq!(c.stats().bytes, 0);
        // The values were copied into one buffer: every value of the entry lies in it.
        let first = d.rows[0].cells[0].1.clone();
        let ColumnData::Simple(c) = first else {
            panic!("simple cell expected")
        };
        let base = c.value.as_ptr() as usize;
        let last = &d.rows[rows - 1].cells[0].1;
        let ColumnData::Simple(l) = last else {
            panic!("simple cell expected")
        };
        let span = l.value.as_ptr() as usize + l.value.len() - base;
        assert!(
            span <= values,
            "values span {span} bytes, not one buffer of {values}"
        );
    }

    /// A partition of a few rows is held encoded (what the inserting read gets back is
    /// decoded), a wide one decoded; both read back equal, and the encoded one costs less
    /// than its decoded form.
    #[test]
    fn small_partitions_are_held_encoded_and_wide_ones_decoded() {
        let mut c = RowCache::new(1 << 20, 1 << 20);
        let t = TableId(1);
        let wide = |n: usize| {
            let mut u = part(34);
            u.rows = (0..n)
                .map(|i| {
                    let mut r = part(34).rows.remove(0);
                    r.clustering = Clustering(vec![Bytes::from(vec![i as u8])]);
                    r
                })
                .collect();
            u
        };
        for (k, data, encoded) in [
            ("one", part(34), true),
            ("four", wide(ENCODED_ROWS_MAX), true),
            ("five", wide(ENCODED_ROWS_MAX + 1), false),
        ] {
            let (view, cached) = c.insert(t, &key(1, k), data.clone());
            assert!(cached);
            assert_eq!(view.decoded(), Some(&data), "{k}");
            let e = c.get(t, &key(1, k)).expect("cached").clone();
            assert_eq!(e.decoded().is_none(), encoded, "{k}");
            assert_eq!(data_of(&e), data, "{k}");
            if encoded {
                assert!(e.cost < cost_bound(&key(1, k), &data), "{k}: {}", e.cost);
            }
        }
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
            assert_eq!(c.get(t, &key(9, k)).map(data_of), Some(part(i)), "{k}");
        }
        assert!(c.get(t, &key(9, &"a".repeat(32))).is_none());
        assert!(c.get(t, &key(8, &"a".repeat(30))).is_none());
        c.remove(t, &key(9, &"b".repeat(31)));
        assert!(!c.contains(t, &key(9, &"b".repeat(31))));
        assert!(c.contains(t, &key(9, &"a".repeat(31))));
        assert_eq!(c.stats().partitions as usize, keys.len() - 1);
    }

    /// What a single-partition read does with the cache: a hit, or a miss that is cached
    /// when admitted. True on a hit.
    fn read_through(c: &mut RowCache, t: TableId, k: &PartitionKey) -> bool {
        if c.get(t, k).is_some() {
            return true;
        }
        if c.admits(t, k) {
            c.insert(t, k, part(100));
        }
        false
    }

    #[test]
    fn a_loop_over_more_partitions_than_fit_keeps_a_stable_part_cached() {
        let cost = entry_cost(&key(0, "k0"), &part(100));
        let mut c = RowCache::new((cost * 100) as u64, 1 << 20);
        let t = TableId(1);
        let keys: Vec<_> = (0..150).map(|i| key(i, &format!("k{i}"))).collect();
        for _ in 0..10 {
            for k in &keys {
                read_through(&mut c, t, k);
            }
        }
        let hits: usize = (0..5)
            .map(|_| keys.iter().filter(|k| read_through(&mut c, t, k)).count())
            .sum();
        // 100 of the 150 fit, so at best 2/3 of the reads hit. Without admission (every
        // miss cached) the CLOCK evicted each partition before the loop came back to it.
        assert!(hits >= 5 * 95, "{hits} hits of 750");
        let s = c.stats();
        assert!(s.rejections >= 5 * 45, "{s:?}");
        assert!(s.bytes as usize <= cost * 100);
    }

    #[test]
    fn a_full_cache_admits_what_is_asked_for_more_often() {
        let cost = entry_cost(&key(0, "k0"), &part(100));
        let mut c = RowCache::new((cost * 10) as u64, 1 << 20);
        let t = TableId(1);
        // Ten partitions fill it; the first miss after that starts the frequencies (and is
        // admitted: nothing was counted before).
        for i in 0..11 {
            let k = key(i, &format!("k{i}"));
            assert!(!read_through(&mut c, t, &k));
        }
        let resident: Vec<_> = (0..11)
            .map(|i| key(i, &format!("k{i}")))
            .filter(|k| c.contains(t, k))
            .collect();
        assert_eq!(resident.len(), 10);
        for _ in 0..2 {
            for k in &resident {
                assert!(read_through(&mut c, t, k));
            }
        }
        // A new partition read once or twice (no more often than any entry) is kept out;
        // the third time it gets in.
        let hot = key(100, "k100");
        assert!(!read_through(&mut c, t, &hot));
        assert!(!read_through(&mut c, t, &hot));
        assert!(!c.contains(t, &hot));
        assert_eq!(c.stats().rejections, 2);
        assert!(!read_through(&mut c, t, &hot));
        assert!(c.contains(t, &hot));
        assert!(read_through(&mut c, t, &hot));
        assert_eq!(c.stats().partitions, 10);
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
        assert_eq!(
            (1..4)
                .filter(|i| c.contains(t, &key(*i, &format!("k{i}"))))
                .count(),
            2
        );
        for i in 5..300 {
            assert!(c.insert(t, &key(i, &format!("k{i}")), part(100)).1);
            assert!(c.stats().bytes as usize <= cost * 4);
        }
        // Every survivor still maps to its own entry.
        let mut found = 0;
        for i in 0..300 {
            let k = key(i, &format!("k{i}"));
            if let Some(i) = c.find(t, &k) {
                found += 1;
                assert!(c.buckets[i].entry.as_ref().is_some_and(|e| e.is(t, &k)));
            }
        }
        // Short keys are held inline: every entry costs the same, four fit.
        assert_eq!((found, c.stats().partitions), (4, 4));
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
        let got = c.get(TableId(1), &k).expect("cached").clone();
        let e = data_of(&got);
        assert_eq!(e, u);
        let Some(ColumnData::Simple(cell)) = e.rows[0].cell(1) else {
            panic!("{e:?}")
        };
        for b in [
            &cell.value[..],
            &e.rows[0].clustering.0[0],
            got.key.as_slice(),
        ] {
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
            let got = c.get(TableId(i % 3), &key(i as i64, "k")).map(data_of);
            if i % 3 == 1 {
                assert_eq!(got, None);
            } else {
                assert_eq!(got, Some(part(i as usize)), "{i}");
            }
        }
    }

    /// The key map against a model: random inserts, replacements, removals, table
    /// invalidations and evictions over keys whose tokens collide often; every cached key
    /// holds its latest data, nothing removed comes back, and the accounting adds up.
    #[test]
    fn key_map_matches_a_model_under_random_operations() {
        use std::collections::HashMap;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(7, |d| d.as_nanos() as u64)
            | 1;
        let mut x = seed;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let cost = entry_cost(&key(0, "k00"), &part(10));
        let mut c = RowCache::new((cost * 40) as u64, 1 << 20);
        let mut model: HashMap<(u128, i64, String), usize> = HashMap::new();
        let (mut evicted_seen, mut hits) = (0, 0);
        for step in 0..20_000 {
            let t = TableId(next(3) as u128);
            let token = next(8) as i64;
            let name = format!("k{:02}", next(10));
            let k = key(token, &name);
            let id = (t.0, token, name);
            match next(10) {
                0..=5 => {
                    let v = next(20) as usize + 1;
                    assert!(c.insert(t, &k, part(v)).1);
                    model.insert(id, v);
                }
                6 | 7 => {
                    c.remove(t, &k);
                    model.remove(&id);
                }
                8 => {
                    if let Some(&v) = model.get(&id)
                        && let Some(e) = c.get(t, &k)
                    {
                        assert_eq!(data_of(e), part(v), "seed {seed} step {step}");
                        hits += 1;
                    }
                }
                _ => {
                    if next(20) == 0 {
                        c.invalidate_table(t);
                        model.retain(|(tt, _, _), _| *tt != t.0);
                    }
                }
            }
            // Evicted keys leave the model too (a cache only forgets).
            let mut bytes = 0;
            let before = model.len();
            model.retain(|(tt, tok, n), v| {
                let k = key(*tok, n);
                match c.find(TableId(*tt), &k) {
                    Some(i) => {
                        let e = c.buckets[i].entry.as_ref().expect("occupied");
                        assert_eq!(data_of(e), part(*v), "seed {seed} step {step}");
                        bytes += e.cost;
                        true
                    }
                    None => false,
                }
            });
            evicted_seen += before - model.len();
            let s = c.stats();
            assert_eq!(
                s.partitions as usize,
                model.len(),
                "seed {seed} step {step}"
            );
            assert_eq!(s.bytes as usize, bytes, "seed {seed} step {step}");
            assert!(bytes <= cost * 40 + 40, "seed {seed} step {step}");
            assert!(c.len * 2 <= c.buckets.len(), "seed {seed} step {step}");
            for tt in 0..3u128 {
                let n = model.keys().filter(|(t, _, _)| *t == tt).count();
                assert_eq!(c.table_len(TableId(tt)), n, "seed {seed} step {step}");
            }
        }
        assert!(evicted_seen > 100 && hits > 100, "{evicted_seen} {hits}");
    }

    fn table_schema() -> Arc<TableSchema> {
        use amphora_types::schema::{ColumnKind, TableOptions};
        let cd = crate::test_support::blob_column;
        Arc::new(TableSchema::new(
            TableId(1),
            "ks",
            "t",
            vec![
                cd("k", ColumnKind::PartitionKey),
                cd("v", ColumnKind::Regular),
            ],
            TableOptions::default(),
        ))
    }

    /// A flushed row that shadows all of an entry replaces it without a merge; every
    /// other combination is merged. Either way the entry equals the merge of the two.
    #[test]
    fn a_flushed_row_newer_than_all_of_an_entry_replaces_it_and_equals_the_merge() {
        use amphora_types::data::{DeletionTime, LivenessInfo};
        let schema = table_schema();
        let t = TableId(1);
        let row = |marker: Option<i64>, cell: Cell, deletion: Option<i64>| Row {
            clustering: Clustering::empty(),
            marker: marker.map(LivenessInfo::new),
            deletion: deletion.map(|ts| DeletionTime {
                marked_for_delete_at: ts,
                local_deletion_time: 5.into(),
            }),
            cells: vec![(1, ColumnData::Simple(cell))],
        };
        let one = |r: Row| PartitionUpdate {
            rows: vec![r],
            ..Default::default()
        };
        let v = |ts: i64| Cell::live(ts, Bytes::from(vec![ts as u8; 8]));
        let olds = [
            one(row(Some(1), v(1), None)),
            one(row(None, v(3), None)),
            one(row(Some(1), v(1), Some(1))),
            PartitionUpdate {
                partition_deletion: Some(DeletionTime {
                    marked_for_delete_at: 1,
                    local_deletion_time: 5.into(),
                }),
                ..one(row(Some(1), v(1), None))
            },
            PartitionUpdate::default(),
        ];
        let news = [
            one(row(Some(2), v(2), None)),
            one(row(Some(2), Cell::tombstone(2, 5), None)),
            one(row(Some(1), v(2), None)),
            one(row(None, v(2), None)),
            one(row(Some(2), v(1), None)),
            one(row(None, v(4), None)),
            one(row(
                Some(4),
                Cell::expiring(4, 10, 50, Bytes::from_static(b"x")),
                None,
            )),
            one(Row {
                marker: Some(LivenessInfo::expiring(4, 20, 40)),
                ..row(None, v(4), None)
            }),
        ];
        let mut replaced = 0;
        for (i, old) in olds.iter().enumerate() {
            for (j, new) in news.iter().enumerate() {
                let mut c = RowCache::new(1 << 20, 1 << 20);
                let k = key(7, "k");
                assert!(c.insert(t, &k, old.clone()).1);
                let mut mem = Memtable::new(schema.clone());
                mem.apply(&k, new, None);
                let flushed = mem.get(&k, &[]).expect("in the memtable");
                let e = c.get(t, &k).expect("cached").clone();
                let replaces = e.replaced_by(&flushed, 1);
                replaced += usize::from(replaces);
                // The memtable holds the row encoded: its summary tells the same.
                let Some((_, MemPartition::Single(enc))) = mem.partitions.iter().next() else {
                    panic!("a one-row partition is held encoded");
                };
                let summary = single_summary(enc).expect("simple cells");
                assert_eq!(e.replaced_by_row(&summary, 1), replaces, "old {i} new {j}");
                assert_eq!(Meta::of_simple_row(&summary), Meta::of(&flushed));
                c.merge_flushed(t, &schema, &mem);
                assert_eq!(c.stats().flush_replacements, u64::from(replaces));
                let want = merge_partition_updates(&schema, old, &flushed);
                assert_eq!(c.get(t, &k).map(data_of), Some(want), "old {i} new {j}");
            }
        }
        // Old 0 (a marker) with new 0, 1, 6 and 7 (newer marker and cell); old 1 (no
        // marker, newest at 3) with new 5, 6 and 7 (newer cell, and marker if any); the
        // empty entry with all eight. Old 2 and 3 hold deletions.
        assert_eq!(replaced, 15);
        // Counter cells never replace (they merge by shards; a tombstone beats them), nor
        // does a row without cells.
        let e = CachedPartition::new_encoded(olds[1].clone());
        assert!(e.replaced_by(&one(row(None, v(9), None)), 1));
        let mut counter = v(9);
        counter.is_counter = true;
        assert!(!e.replaced_by(&one(row(None, counter, None)), 1));
        assert!(
            !CachedPartition::new_encoded(PartitionUpdate::default()).replaced_by(
                &one(Row {
                    cells: Vec::new(),
                    ..row(None, v(9), None)
                }),
                0
            )
        );
    }

    /// `part(v)` written at timestamp 2 (newer than `part`'s).
    fn newer(value_len: usize) -> PartitionUpdate {
        let mut u = part(value_len);
        if let ColumnData::Simple(c) = &mut u.rows[0].cells[0].1 {
            c.timestamp = 2;
        }
        u
    }

    /// A flush merges into the cached entries of the partitions it holds, both when the
    /// memtable is the smaller side (looked up key by key) and when the key map is (its
    /// buckets swept); other entries and other tables are untouched.
    #[test]
    fn merge_flushed_updates_exactly_the_flushed_cached_partitions() {
        let schema = table_schema();
        let t = TableId(1);
        for flushed in [3u64, 300] {
            let mut c = RowCache::new(1 << 24, 1 << 20);
            for i in 0..40i64 {
                assert!(c.insert(t, &key(i, &format!("k{i}")), part(1)).1);
                assert!(c.insert(TableId(2), &key(i, &format!("o{i}")), part(1)).1);
            }
            let mut mem = Memtable::new(schema.clone());
            // Even keys, some cached (below 40), most not.
            for i in (0..flushed as i64).map(|i| i * 2) {
                mem.apply(&key(i, &format!("k{i}")), &newer(5), None);
            }
            assert_eq!(
                c.buckets.len() <= flushed as usize,
                flushed == 300,
                "both branches"
            );
            c.merge_flushed(t, &schema, &mem);
            for i in 0..40i64 {
                let k = key(i, &format!("k{i}"));
                let want = if i % 2 == 0 && i < 2 * flushed as i64 {
                    newer(5)
                } else {
                    part(1)
                };
                assert_eq!(c.get(t, &k).map(data_of), Some(want), "{flushed} {i}");
                let other = key(i, &format!("o{i}"));
                assert_eq!(c.get(TableId(2), &other).map(data_of), Some(part(1)));
            }
            assert_eq!(c.stats().partitions, 80);
            let cost: usize = (0..40i64)
                .map(|i| {
                    let k = key(i, &format!("k{i}"));
                    let d = c.get(t, &k).map(data_of).expect("cached");
                    entry_cost(&k, &d) + entry_cost(&key(i, &format!("o{i}")), &part(1))
                })
                .sum();
            assert_eq!(c.stats().bytes as usize, cost);
        }
    }

    /// A table of blob columns `k` (partition key), `c` (clustering), `s` (static), `v`.
    fn wide_schema() -> Arc<TableSchema> {
        use amphora_types::schema::{ColumnKind, TableOptions};
        let cd = crate::test_support::blob_column;
        Arc::new(TableSchema::new(
            TableId(1),
            "ks",
            "wide",
            vec![
                cd("k", ColumnKind::PartitionKey),
                cd("c", ColumnKind::Clustering),
                cd("s", ColumnKind::Static),
                cd("v", ColumnKind::Regular),
            ],
            TableOptions::default(),
        ))
    }

    /// A row of [`wide_schema`] at the one-byte clustering `c`, holding `cell` in `v`.
    fn wide_row(v_id: u32, c: u8, cell: Cell) -> Row {
        Row {
            clustering: Clustering(vec![Bytes::from(vec![c])]),
            marker: None,
            deletion: None,
            cells: vec![(v_id, ColumnData::Simple(cell))],
        }
    }

    /// A flushed partition of a table with clustering columns merges into a wide
    /// (decoded) entry straight from the memtable's rows, also when a reader holds the
    /// entry: the entry then equals the merge of the cached data with the flushed update
    /// (new, overwritten and range-deleted rows, a static row).
    #[test]
    fn a_wide_entry_merged_from_the_memtable_equals_the_merge_of_the_updates() {
        use amphora_types::data::{ClusteringBound, DeletionTime, RangeTombstone};
        let schema = wide_schema();
        let (s_id, v_id) = (
            schema.column("s").expect("s").0,
            schema.column("v").expect("v").0,
        );
        let row =
            |c: u8, ts: i64, v: u8| wide_row(v_id, c, Cell::live(ts, Bytes::from(vec![v; 8])));
        let cached = PartitionUpdate {
            rows: (0..8).map(|c| row(c, 1, c)).collect(),
            ..Default::default()
        };
        let flushed = PartitionUpdate {
            static_row: Some(Row {
                clustering: Clustering::empty(),
                marker: None,
                deletion: None,
                cells: vec![(
                    s_id,
                    ColumnData::Simple(Cell::live(2, Bytes::from_static(b"s"))),
                )],
            }),
            rows: vec![row(3, 2, 33), row(10, 2, 100)],
            range_tombstones: vec![RangeTombstone {
                start: ClusteringBound::inclusive(vec![Bytes::from(vec![5u8])]),
                end: ClusteringBound::inclusive(vec![Bytes::from(vec![6u8])]),
                deletion: DeletionTime {
                    marked_for_delete_at: 3,
                    local_deletion_time: 100,
                },
            }],
            ..Default::default()
        };
        let want = merge_partition_updates(&schema, &cached, &flushed);
        assert_eq!(want.rows.len(), 7, "0-4, 7 and 10");
        for held in [false, true] {
            let (t, k) = (TableId(1), key(9, "w"));
            let mut c = RowCache::new(1 << 24, 1 << 20);
            assert!(c.insert(t, &k, cached.clone()).1);
            let reader = held.then(|| c.get(t, &k).cloned().expect("cached"));
            assert!(
                matches!(c.get(t, &k).map(|e| &e.content), Some(Content::Decoded(_))),
                "a wide entry is held decoded"
            );
            let mut mem = Memtable::new(schema.clone());
            mem.apply(&k, &flushed, None);
            assert!(matches!(
                mem.partitions.get(&k),
                Some(MemPartition::General(_))
            ));
            c.merge_flushed(t, &schema, &mem);
            assert_eq!(c.get(t, &k).map(data_of), Some(want.clone()), "held {held}");
            // Accounted as the merge of a copied update (the former way) accounts it.
            let mut twin = RowCache::new(1 << 24, 1 << 20);
            assert!(twin.insert(t, &k, cached.clone()).1);
            let i = twin.find(t, &k).expect("cached");
            let copied = mem.to_update(mem.partitions.get(&k).expect("flushed"), &[]);
            twin.merge_decoded(t, &schema, i, &k, Flushed::Update(&copied), &mut Vec::new());
            assert_eq!(twin.get(t, &k).map(data_of), Some(want.clone()));
            assert_eq!(c.stats().bytes, twin.stats().bytes);
            if let Some(r) = reader {
                assert_eq!(data_of(&r), cached, "the reader's copy is unchanged");
            }
        }
    }

    /// Flush after flush, a wide entry no reader holds takes the flushed rows in place
    /// (rows before, between and after its own, and overwrites of its own): its data stays
    /// the merge of everything flushed, its values are copies (never slices of the
    /// memtable's arena), its cost stays near what its content takes and is exactly that
    /// after every periodic compaction of its values.
    #[test]
    fn wide_entries_take_flushed_rows_in_place() {
        let schema = wide_schema();
        let v_id = schema.column("v").expect("v").0;
        let row =
            |c: u8, ts: i64| wide_row(v_id, c, Cell::live(ts, Bytes::from(vec![c ^ ts as u8; 64])));
        let (t, k) = (TableId(1), key(5, "series"));
        let mut want = PartitionUpdate {
            rows: (1..=64).map(|c| row(c * 3, 1)).collect(),
            ..Default::default()
        };
        let mut c = RowCache::new(1 << 24, 1 << 20);
        assert!(c.insert(t, &k, want.clone()).1);
        let mut compactions = 0;
        for round in 0..30u8 {
            let flushed = PartitionUpdate {
                rows: vec![
                    row(round, 2 + i64::from(round)),
                    row(3 * (round % 60 + 1) + 1, 2),
                    row(3 * (round % 60 + 2), 2 + i64::from(round)),
                    row(250 - round, 2),
                ],
                ..Default::default()
            };
            let flushed = amphora_types::data::canonicalize(&schema, &flushed);
            let mut mem = Memtable::new(schema.clone());
            mem.apply(&k, &flushed, None);
            c.merge_flushed(t, &schema, &mem);
            want = merge_partition_updates(&schema, &want, &flushed);
            let e = c.get(t, &k).cloned().expect("cached");
            assert_eq!(data_of(&e), want, "round {round}");
            let Some(MemPartition::General(g)) = mem.partitions.get(&k) else {
                panic!("a memtable partition of several rows");
            };
            let cached_values: Vec<*const u8> = e
                .decoded()
                .expect("decoded")
                .rows
                .iter()
                .flat_map(|r| r.cells.iter())
                .filter_map(|(_, d)| match d {
                    ColumnData::Simple(c) => Some(c.value.as_ptr()),
                    ColumnData::Complex { .. } => None,
                })
                .collect();
            for r in g.rows.iter() {
                for (_, d) in &r.cells {
                    if let ColumnData::Simple(m) = d {
                        assert!(!cached_values.contains(&m.value.as_ptr()), "a copy");
                    }
                }
            }
            let exact = e.accounted_bytes();
            let slack = e.slack as usize;
            if slack == 0 {
                compactions += 1;
                assert_eq!(e.cost, exact, "round {round}");
            }
            // Between compactions the entry also holds what overwrites left in its older
            // buffers, and the headers and unused ends of the merges' buffers: its cost is
            // over what its content takes by about that (and the allocator's rounding of
            // the one buffer `accounted_bytes` assumes), never under, and the slack stays
            // within its share of the cost.
            assert!(
                slack * SLACK_SHARE_MAX <= e.cost,
                "round {round}: slack {slack}"
            );
            assert!(
                e.cost + 64 >= exact && e.cost <= exact + slack + exact / 8,
                "round {round}: {} vs {exact} (slack {slack})",
                e.cost
            );
            assert_eq!(c.stats().bytes, e.cost as u64);
        }
        assert!(
            (2..20).contains(&compactions),
            "{compactions} compactions in 30 merges"
        );
    }

    /// A merge done in slices of any budget (below, equal to and above the warm-up batch,
    /// and empty slices in between) looks at every flushed partition exactly once and
    /// leaves the cache as one merge of the whole memtable does.
    #[test]
    fn merge_flushed_in_slices_equals_one_merge() {
        let schema = table_schema();
        let t = TableId(1);
        let filled = || {
            let mut c = RowCache::new(1 << 24, 1 << 20);
            for i in 0..100i64 {
                assert!(c.insert(t, &key(i * 7919, &format!("k{i}")), part(1)).1);
            }
            c
        };
        let mut mem = Memtable::new(schema.clone());
        for i in 0..150i64 {
            mem.apply(
                &key(i * 7919, &format!("k{i}")),
                &newer(i as usize % 5),
                None,
            );
        }
        let mut whole = filled();
        whole.merge_flushed(t, &schema, &mem);
        for budget in [1, 3, MERGE_BATCH, MERGE_BATCH + 1, 40, 149, 150, 151] {
            let mut c = filled();
            let (mut done, mut seen, mut slices) = (false, 0, 0);
            let mut at = None;
            while !done {
                assert_eq!(
                    c.merge_flushed_slice(t, &schema, &mem, &mut at, 0),
                    (false, 0)
                );
                let (d, used) = c.merge_flushed_slice(t, &schema, &mem, &mut at, budget);
                assert!(used <= budget && (d || used == budget), "{budget}");
                (done, seen, slices) = (d, seen + used, slices + 1);
            }
            assert_eq!(seen, 150, "budget {budget}");
            assert_eq!(slices, 150usize.div_ceil(budget), "budget {budget}");
            for i in 0..100i64 {
                let k = key(i * 7919, &format!("k{i}"));
                let want = whole.get(t, &k).map(data_of);
                assert_eq!(c.get(t, &k).map(data_of), want, "budget {budget} key {i}");
            }
            assert_eq!(c.stats().bytes, whole.stats().bytes);
        }
    }
}
