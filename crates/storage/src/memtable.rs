//! Memtable: one table's recent writes on one shard, ordered by token then clustering.
//
// PERF-CRITICAL: `apply` runs once per write. Values are copied into arena chunks so a
// memtable never pins request buffers, and each cell costs one `Bytes` handle.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

use amphora_types::codec;
use amphora_types::data::{
    Cell, Clustering, ClusteringBound, ClusteringSlice, ColumnData, DeletionTime, PartitionKey,
    PartitionUpdate, RangeTombstone, Row, max_deletion, merge_column_data, merge_rows_into,
    reconcile_cells,
};
use amphora_types::schema::{ClusteringComparator, ColumnId, TableSchema};
use bytes::{Bytes, BytesMut};

use crate::alloc::{alloc_size, vec_bytes};
use crate::commitlog::LogPosition;
use crate::partmap::PartitionMap;

/// A clustering ordered by its table's comparator.
#[derive(Clone, Debug)]
pub struct ClusteringKey {
    pub clustering: Clustering,
    cmp: Arc<ClusteringComparator>,
}

impl ClusteringKey {
    pub fn new(clustering: Clustering, cmp: Arc<ClusteringComparator>) -> Self {
        ClusteringKey { clustering, cmp }
    }
}

impl PartialEq for ClusteringKey {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for ClusteringKey {}
impl PartialOrd for ClusteringKey {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for ClusteringKey {
    fn cmp(&self, o: &Self) -> Ordering {
        self.cmp.compare(&self.clustering.0, &o.clustering.0)
    }
}

/// A partition's rows: a sorted vector while small (most partitions have one row), a
/// B-tree once it grows.
#[derive(Debug, Clone)]
pub enum MemRows {
    Small(Vec<Row>),
    Large(BTreeMap<ClusteringKey, Row>),
}

const SMALL_ROWS_MAX: usize = 16;

/// Accounted bytes of a [`MemPartition::Single`] entry besides its key and encoding: its
/// slot in the partition map (token, key handle, entry: 80 bytes) at the leaves' typical
/// fill, and its share of leaf headers and directory.
const SINGLE_ENTRY_BYTES: usize = 104;

/// Accounted bytes of a [`MemPartition::General`] entry besides its key, rows and range
/// tombstones: its partition map slot and its box.
const GENERAL_ENTRY_BYTES: usize =
    SINGLE_ENTRY_BYTES + alloc_size(std::mem::size_of::<GeneralPartition>());

/// What one row of a [`MemRows::Large`] takes in its B-tree besides the row's own
/// allocations: its share of a leaf (11 slots of key and row) and of the internal nodes
/// above (a sixth more). std's B-tree splits a full node in the middle, so the in-order
/// inserts of a time series (each row before or after all the others) leave every leaf
/// with 6 of its 11 slots used; random inserts fill them more (this over-accounts them a
/// little). jemalloc's heap profile of make bench's IoT mix showed the memtables at 1.5x
/// their accounted bytes while this was counted as 48 bytes (2026-12-03).
const LARGE_ROW_BYTES: usize =
    alloc_size(16 + 11 * std::mem::size_of::<(ClusteringKey, Row)>()) / 6 * 7 / 6;

/// What a row's own allocations take: its clustering and cell vectors at their
/// capacities, not its values (in a memtable they are in the arena, counted there; the
/// row cache counts them in its entry's value buffer) nor the row itself (in its
/// container: a vector or a B-tree leaf).
pub(crate) fn row_heap_bytes(r: &Row) -> usize {
    let mut n = vec_bytes(&r.clustering.0) + vec_bytes(&r.cells);
    for (_, d) in &r.cells {
        if let ColumnData::Complex { cells, .. } = d {
            n += vec_bytes(cells);
        }
    }
    n
}

/// What a row added to a [`MemRows::Large`] takes: its B-tree slot, its key's copy of the
/// clustering vector (the values are shared) and its own allocations.
fn large_row_bytes(r: &Row) -> usize {
    LARGE_ROW_BYTES + vec_bytes(&r.clustering.0) + row_heap_bytes(r)
}

/// Merges `r` into the row in `slot` (same clustering), reusing the row's clustering and
/// cell vector when both hold the same columns (a row overwritten whole: a time series
/// written again); returns the growth of the row's allocations.
fn merge_in_place(schema: &TableSchema, slot: &mut Row, r: &Row) -> usize {
    let before = row_heap_bytes(slot);
    *slot = merge_rows_into(schema, std::mem::take(slot), r);
    row_heap_bytes(slot).saturating_sub(before)
}

impl Default for MemRows {
    fn default() -> Self {
        MemRows::Small(Vec::new())
    }
}

impl MemRows {
    pub fn len(&self) -> usize {
        match self {
            MemRows::Small(v) => v.len(),
            MemRows::Large(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Inserts or merges a row; returns the growth in bytes (of the rows' structure: the
    /// values are in the arena). A merge replaced row's allocations are not taken back
    /// (accounting only grows, as the arena does).
    fn upsert(&mut self, schema: &TableSchema, cmp: &Arc<ClusteringComparator>, r: Row) -> usize {
        match self {
            MemRows::Small(v) => {
                let found = v.binary_search_by(|x| cmp.compare(&x.clustering.0, &r.clustering.0));
                match found {
                    Ok(i) => merge_in_place(schema, &mut v[i], &r),
                    Err(i) => {
                        let before = vec_bytes(v);
                        let mut grow = row_heap_bytes(&r);
                        v.insert(i, r);
                        if v.len() > SMALL_ROWS_MAX {
                            let m: BTreeMap<_, _> = std::mem::take(v)
                                .into_iter()
                                .map(|row| {
                                    (ClusteringKey::new(row.clustering.clone(), cmp.clone()), row)
                                })
                                .collect();
                            // The vector's buffer is freed: the B-tree's slots and the keys'
                            // clustering vectors take its place.
                            grow += m
                                .keys()
                                .map(|k| LARGE_ROW_BYTES + vec_bytes(&k.clustering.0))
                                .sum::<usize>();
                            *self = MemRows::Large(m);
                            grow.saturating_sub(before)
                        } else {
                            grow + vec_bytes(v).saturating_sub(before)
                        }
                    }
                }
            }
            MemRows::Large(m) => {
                // One search: a new row (a time series' next reading) is inserted where the
                // search ended.
                let k = ClusteringKey::new(r.clustering.clone(), cmp.clone());
                match m.entry(k) {
                    std::collections::btree_map::Entry::Occupied(mut e) => {
                        merge_in_place(schema, e.get_mut(), &r)
                    }
                    std::collections::btree_map::Entry::Vacant(e) => {
                        let grow = large_row_bytes(&r);
                        e.insert(r);
                        grow
                    }
                }
            }
        }
    }

    pub fn iter(&self) -> Box<dyn Iterator<Item = &Row> + '_> {
        match self {
            MemRows::Small(v) => Box::new(v.iter()),
            MemRows::Large(m) => Box::new(m.values()),
        }
    }

    /// Rows at or before the slice end `end`, the last one first.
    pub fn iter_rev_to<'a>(
        &'a self,
        cmp: &Arc<ClusteringComparator>,
        end: &ClusteringBound,
    ) -> Box<dyn Iterator<Item = &'a Row> + 'a> {
        match self {
            MemRows::Small(v) => {
                let i = v.partition_point(|x| cmp.before_end(&x.clustering, end));
                Box::new(v[..i].iter().rev())
            }
            MemRows::Large(m) if end.prefix.0.is_empty() => Box::new(m.values().rev()),
            MemRows::Large(m) => {
                // Rows that extend the end's prefix sort after it, so the tree's own bounds
                // cannot name the end: find the first row past it (at most the rows that
                // share a partial prefix are walked), and go back from there.
                let k = ClusteringKey::new(end.prefix.clone(), cmp.clone());
                let past = m
                    .range((Bound::Included(&k), Bound::Unbounded))
                    .find(|(_, r)| !cmp.before_end(&r.clustering, end))
                    .map(|(k, _)| k);
                match past {
                    Some(p) => Box::new(
                        m.range((Bound::Unbounded, Bound::Excluded(p)))
                            .rev()
                            .map(|(_, r)| r),
                    ),
                    None => Box::new(m.values().rev()),
                }
            }
        }
    }

    /// Rows at or after the clustering prefix `start`.
    pub fn iter_from<'a>(
        &'a self,
        cmp: &Arc<ClusteringComparator>,
        start: &Clustering,
    ) -> Box<dyn Iterator<Item = &'a Row> + 'a> {
        match self {
            MemRows::Small(v) => {
                let i = v.partition_point(|x| cmp.compare(&x.clustering.0, &start.0).is_lt());
                Box::new(v[i..].iter())
            }
            MemRows::Large(m) => {
                let k = ClusteringKey::new(start.clone(), cmp.clone());
                Box::new(
                    m.range((Bound::Included(k), Bound::Unbounded))
                        .map(|(_, r)| r),
                )
            }
        }
    }
}

/// A partition in a memtable.
#[derive(Debug, Clone)]
pub enum MemPartition {
    /// The common shape (one row; no partition deletion, static row or range tombstones):
    /// the row encoded in one run of the memtable's arena ([`encode_single`] layout), so
    /// it costs one handle and no per-cell structure. Decoded on read and flush.
    Single(Bytes),
    /// Anything else.
    General(Box<GeneralPartition>),
}

#[derive(Debug, Default, Clone)]
pub struct GeneralPartition {
    pub deletion: Option<DeletionTime>,
    pub static_row: Option<Row>,
    pub rows: MemRows,
    pub range_tombstones: Vec<RangeTombstone>,
}

impl MemPartition {
    /// The single row of a [`MemPartition::Single`], decoded (values are slices of the
    /// arena).
    pub fn single_row(enc: &Bytes) -> Row {
        decode_single(enc)
    }

    /// The partition's deletion, if any.
    pub fn deletion(&self) -> Option<DeletionTime> {
        match self {
            MemPartition::Single(_) => None,
            MemPartition::General(g) => g.deletion,
        }
    }

    /// The partition in the general shape (a single row is decoded).
    pub fn to_general(&self) -> GeneralPartition {
        match self {
            MemPartition::Single(enc) => GeneralPartition {
                rows: MemRows::Small(vec![decode_single(enc)]),
                ..Default::default()
            },
            MemPartition::General(g) => (**g).clone(),
        }
    }
}

/// Encodes a single row as the memtable keeps it: the row's first timestamp (8 bytes,
/// little endian) then the row in the mutation codec's row layout with timestamps as
/// deltas from it (`amphora_types::codec::put_row`), so most timestamps take one byte.
fn encode_single(out: &mut Vec<u8>, r: &Row) {
    let base = row_base_timestamp(r);
    out.extend_from_slice(&base.to_le_bytes());
    codec::put_row(out, r, base);
}

fn row_base_timestamp(r: &Row) -> i64 {
    if let Some(m) = r.marker {
        return m.timestamp;
    }
    for (_, d) in &r.cells {
        match d {
            ColumnData::Simple(c) => return c.timestamp,
            ColumnData::Complex { deletion, cells } => {
                if let Some((_, c)) = cells.first() {
                    return c.timestamp;
                }
                if let Some(d) = deletion {
                    return d.marked_for_delete_at;
                }
            }
        }
    }
    r.deletion.map_or(0, |d| d.marked_for_delete_at)
}

/// Encodes a canonical row into the arena (through `scratch`).
fn encode_into(scratch: &mut Vec<u8>, arena: &mut Arena, r: &Row) -> Bytes {
    encode_single_into(scratch, r);
    arena.copy(scratch)
}

/// [`encode_single`] into `scratch`, emptied first.
fn encode_single_into(scratch: &mut Vec<u8>, r: &Row) {
    scratch.clear();
    encode_single(scratch, r);
}

/// Whether a write of row `r` could replace a single-row partition whole
/// ([`replaces_whole`]): a cheap look at `r` before encoding it for the full check.
fn may_replace_whole(r: &Row) -> bool {
    r.deletion.is_none()
        && (r.marker.is_some() || !r.cells.is_empty())
        && r.cells
            .iter()
            .all(|(_, d)| matches!(d, ColumnData::Simple(c) if !c.is_counter))
}

/// Whether the single row encoded as `new` ([`encode_single`]) is what merging it into the
/// one encoded as `old` gives: the same clustering (byte for byte), a cell for every
/// column of `old`, and every timestamp newer than all of `old`'s, with nothing that
/// expires or deletes ([`codec::SimpleRowSummary::shadows_whole`]).
fn replaces_whole(old: &[u8], new: &[u8]) -> bool {
    let (Some((_, old_row, old_sum)), Some((_, new_row, new_sum))) =
        (single_parts(old), single_parts(new))
    else {
        return false;
    };
    new_sum.shadows_whole(&old_sum)
        && codec::row_clustering_prefix(new_row)
            .is_some_and(|c| codec::row_clustering_prefix(old_row) == Some(c))
}

/// The standalone update encoding (`codec::encode_update_standalone`) of a
/// [`MemPartition::Single`]'s partition, copied from its bytes; false (nothing written) if
/// they are too short to hold a row (never expected).
pub fn single_standalone(enc: &[u8], out: &mut Vec<u8>) -> bool {
    match enc.split_first_chunk::<8>() {
        Some((base, row)) if !row.is_empty() => {
            codec::encode_row_standalone(i64::from_le_bytes(*base), row, out);
            true
        }
        _ => false,
    }
}

/// The summary of a single-row partition's row as the memtable holds it (see
/// [`codec::summarize_simple_row`]): `None` unless its cells are all simple.
pub fn single_summary(enc: &[u8]) -> Option<codec::SimpleRowSummary> {
    single_parts(enc).map(|(_, _, s)| s)
}

/// A single-row partition's base timestamp, row bytes (`codec::put_row`) and summary,
/// when its cells are all simple (see [`single_summary`]).
pub fn single_parts(enc: &[u8]) -> Option<(i64, &[u8], codec::SimpleRowSummary)> {
    let (base, row) = enc.split_first_chunk::<8>()?;
    let base = i64::from_le_bytes(*base);
    codec::summarize_simple_row(row, base).map(|s| (base, row, s))
}

/// Decodes what [`encode_single`] wrote. The bytes were encoded by this memtable from a
/// valid row, so a failure is a bug: it is reported loudly (debug builds panic) and the
/// row reads as empty rather than taking the node down.
fn decode_single(enc: &Bytes) -> Row {
    let mut r = codec::Reader::new(enc.clone());
    let decoded = r
        .fixed::<8>()
        .and_then(|b| codec::read_row(&mut r, i64::from_le_bytes(b)));
    match decoded {
        Ok(row) => row,
        Err(e) => {
            debug_assert!(false, "memtable row encoding: {e}");
            tracing::error!(error = %e, "memtable row encoding unreadable (bug)");
            Row::new(Clustering::empty())
        }
    }
}

/// Copies values into large shared chunks.
struct Arena {
    chunk: BytesMut,
    /// Bytes taken from the allocator: what was copied in, the unused ends of the chunks
    /// left behind, and values too large for a chunk at their size class (the chunk being
    /// filled is counted as far as it is used).
    used: usize,
    /// Where chunks come from and go back to when the memtable is dropped; `None`: the
    /// allocator, both ways.
    pool: Option<Arc<ChunkPool>>,
    /// The chunks filled before `chunk` (each a handle on its unused end, which keeps the
    /// chunk's buffer), given back to `pool` with `chunk` on drop.
    filled: Vec<BytesMut>,
}

/// Bytes of one memtable arena chunk.
pub const ARENA_CHUNK_BYTES: usize = 256 << 10;

impl Arena {
    fn new(pool: Option<Arc<ChunkPool>>) -> Self {
        Arena {
            chunk: BytesMut::new(),
            used: 0,
            pool,
            filled: Vec::new(),
        }
    }

    fn copy(&mut self, v: &[u8]) -> Bytes {
        if v.is_empty() {
            return Bytes::new();
        }
        if v.len() > ARENA_CHUNK_BYTES / 8 {
            self.used += alloc_size(v.len());
            return Bytes::copy_from_slice(v);
        }
        let left = self.chunk.capacity() - self.chunk.len();
        if left < v.len() {
            self.used += left;
            let next = match &self.pool {
                Some(p) => p.take(),
                None => BytesMut::with_capacity(ARENA_CHUNK_BYTES),
            };
            let full = std::mem::replace(&mut self.chunk, next);
            if self.pool.is_some() {
                self.used += std::mem::size_of::<BytesMut>();
                self.filled.push(full);
            }
        }
        self.used += v.len();
        self.chunk.extend_from_slice(v);
        self.chunk.split_to(v.len()).freeze()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // The memtable's other fields (its partitions, which hold the values) are declared
        // before `arena`, so they are dropped by now: the chunks no read still holds are
        // unique again.
        if let Some(pool) = self.pool.take() {
            let last = std::mem::take(&mut self.chunk);
            pool.give_back(self.filled.drain(..).chain(std::iter::once(last)));
        }
    }
}

/// A shard's memtable arena chunks, kept when their memtable is dropped for the shard's
/// next memtables instead of being freed. A chunk the allocator hands out fresh is memory
/// never touched, and touching it costs the shard thread a page fault: on this project's
/// VMs 6-7 ms per 2 MiB huge page (the host backs guest memory on first touch), and the
/// first memtables after a read phase fault in most of their chunks, because the row
/// cache took the pages the flushed memtables had freed (docs/benchmarks.md, "The 90%-own
/// writes: the first heavy write phase after reads is the spike"). Kept here, the pages
/// stay the memtables': once its memtables have filled their budget the shard's writes
/// fault in no more arena chunks. At most `max_chunks` are kept (the shard's memtable budget), so what
/// the pool holds is at most what the memtables held at their peak, and they are freed
/// while the allocator's resident memory is over the node's limit ([`ChunkPool::release`],
/// from the shard's check of its kept pages). A chunk some value is still shared from
/// when its memtable goes (a read's result in flight) is freed by its last holder instead.
#[derive(Debug)]
pub struct ChunkPool {
    free: Mutex<Vec<BytesMut>>,
    max_chunks: usize,
    taken_fresh: AtomicU64,
    taken_kept: AtomicU64,
    prefaulted: AtomicU64,
}

/// What a [`ChunkPool`] holds and has handed out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkPoolStats {
    /// Bytes of the chunks kept for the next memtables.
    pub kept_bytes: u64,
    /// Chunks handed out newly allocated, and from those kept.
    pub taken_fresh: u64,
    pub taken_kept: u64,
    /// Chunks [`ChunkPool::top_up`] faulted in off the shard.
    pub prefaulted: u64,
}

impl ChunkPool {
    /// A pool keeping at most `max_bytes` of chunks.
    pub fn new(max_bytes: u64) -> Arc<Self> {
        Arc::new(ChunkPool {
            free: Mutex::new(Vec::new()),
            max_chunks: usize::try_from(max_bytes / ARENA_CHUNK_BYTES as u64).unwrap_or(usize::MAX),
            taken_fresh: AtomicU64::new(0),
            taken_kept: AtomicU64::new(0),
            prefaulted: AtomicU64::new(0),
        })
    }

    /// Chunks kept now.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.lock().len()
    }

    /// Allocates chunks on the calling thread, writes a byte of every 4 KiB page of each
    /// (faulting them in), and keeps them, until the pool holds `target` (at most its
    /// bound); returns the chunks added. Run off the shard (its prefault thread), so that a
    /// memtable growing into memory it has not held before finds chunks whose pages are
    /// in: faulting them on the shard cost it 5-7 ms per 2 MiB huge page on this project's
    /// VMs, a stall for every request waiting on it (docs/benchmarks.md, "Memtable chunks
    /// faulted in off the shard").
    pub fn top_up(&self, target: usize) -> usize {
        let want = target
            .min(self.max_chunks)
            .saturating_sub(self.lock().len());
        let mut fresh = Vec::with_capacity(want);
        for _ in 0..want {
            let mut c = BytesMut::with_capacity(ARENA_CHUNK_BYTES);
            for page in c.spare_capacity_mut().chunks_mut(4096) {
                page[0].write(0);
            }
            // The writes are the point: kept as if something read them.
            std::hint::black_box(c.spare_capacity_mut().as_ptr());
            fresh.push(c);
        }
        let kept = self.keep(fresh);
        self.prefaulted
            .fetch_add(kept as u64, AtomicOrdering::Relaxed);
        kept
    }

    /// Keeps `chunks` up to the pool's bound and frees the rest (outside the lock);
    /// returns how many were kept.
    fn keep(&self, mut chunks: Vec<BytesMut>) -> usize {
        let kept = {
            let mut free = self.lock();
            let keep = chunks.len().min(self.max_chunks.saturating_sub(free.len()));
            free.extend(chunks.drain(..keep));
            keep
        };
        drop(chunks);
        kept
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<BytesMut>> {
        // A panic while holding the lock leaves the vector whole.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An empty chunk of [`ARENA_CHUNK_BYTES`]: a kept one, else a new one.
    fn take(&self) -> BytesMut {
        match self.lock().pop() {
            Some(c) => {
                self.taken_kept.fetch_add(1, AtomicOrdering::Relaxed);
                c
            }
            None => {
                self.taken_fresh.fetch_add(1, AtomicOrdering::Relaxed);
                BytesMut::with_capacity(ARENA_CHUNK_BYTES)
            }
        }
    }

    /// Keeps those of `chunks` nothing else holds any more (up to the pool's bound); the
    /// others are dropped (freed by their last holder).
    fn give_back(&self, chunks: impl Iterator<Item = BytesMut>) {
        let back: Vec<BytesMut> = chunks
            .filter_map(|mut c| {
                c.clear();
                // Succeeds only for a chunk nothing else shares; it is then whole again.
                c.try_reclaim(ARENA_CHUNK_BYTES).then_some(c)
            })
            .collect();
        self.keep(back);
    }

    /// Frees kept chunks of at least `bytes` (all of them if they hold less); returns the
    /// bytes freed.
    pub fn release(&self, bytes: u64) -> u64 {
        let n = usize::try_from(bytes.div_ceil(ARENA_CHUNK_BYTES as u64)).unwrap_or(usize::MAX);
        let freed: Vec<BytesMut> = {
            let mut free = self.lock();
            let keep = free.len().saturating_sub(n);
            free.split_off(keep)
        };
        (freed.len() * ARENA_CHUNK_BYTES) as u64
    }

    pub fn stats(&self) -> ChunkPoolStats {
        let kept = self.lock().len();
        ChunkPoolStats {
            kept_bytes: (kept * ARENA_CHUNK_BYTES) as u64,
            taken_fresh: self.taken_fresh.load(AtomicOrdering::Relaxed),
            taken_kept: self.taken_kept.load(AtomicOrdering::Relaxed),
            prefaulted: self.prefaulted.load(AtomicOrdering::Relaxed),
        }
    }
}

pub struct Memtable {
    pub schema: Arc<TableSchema>,
    pub cmp: Arc<ClusteringComparator>,
    pub partitions: PartitionMap,
    pub size_bytes: u64,
    pub min_timestamp: i64,
    pub max_timestamp: i64,
    /// First commitlog position whose data is in this memtable.
    pub min_log_pos: Option<LogPosition>,
    pub mutations: u64,
    /// Declared after `partitions`, so dropped after them (see `Arena`'s `Drop`).
    arena: Arena,
    /// Keep one-row partitions encoded ([`MemPartition::Single`]); off only in tests that
    /// compare the two shapes.
    single_rows: bool,
    /// Reused encoding buffer for single rows (copied into the arena once complete).
    scratch: Vec<u8>,
}

impl Memtable {
    pub fn new(schema: Arc<TableSchema>) -> Self {
        Self::with_pool(schema, None)
    }

    /// A memtable whose arena chunks come from and go back to `pool` (the shard's).
    pub fn with_pool(schema: Arc<TableSchema>, pool: Option<Arc<ChunkPool>>) -> Self {
        let cmp = Arc::new(schema.clustering_comparator());
        Memtable {
            schema,
            cmp,
            partitions: PartitionMap::new(),
            size_bytes: 0,
            min_timestamp: i64::MAX,
            max_timestamp: i64::MIN,
            min_log_pos: None,
            mutations: 0,
            arena: Arena::new(pool),
            single_rows: true,
            scratch: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// Copies a row into the arena, putting cells in canonical order (sorted by column id,
    /// complex cells by cell path) if the writer did not.
    fn own_row(&mut self, r: &Row) -> Row {
        let a = &mut self.arena;
        let mut cells: Vec<(ColumnId, ColumnData)> = r
            .cells
            .iter()
            .map(|(id, d)| {
                let d = match d {
                    ColumnData::Simple(c) => ColumnData::Simple(own_cell(a, c)),
                    ColumnData::Complex { deletion, cells } => {
                        let mut cs: Vec<(Bytes, Cell)> = cells
                            .iter()
                            .map(|(p, c)| (a.copy(p), own_cell(a, c)))
                            .collect();
                        let ty = self.schema.column_by_id(*id).map(|c| &c.ty);
                        let ordered = |x: &Bytes, y: &Bytes| {
                            ty.map_or_else(|| x.cmp(y), |t| t.compare_cell_path(x, y))
                        };
                        if !cs.windows(2).all(|w| ordered(&w[0].0, &w[1].0).is_lt()) {
                            cs.sort_by(|x, y| ordered(&x.0, &y.0));
                            let mut out: Vec<(Bytes, Cell)> = Vec::with_capacity(cs.len());
                            for (p, c) in cs {
                                match out.last_mut() {
                                    Some(last) if ordered(&last.0, &p).is_eq() => {
                                        last.1 = reconcile_cells(&last.1, &c)
                                    }
                                    _ => out.push((p, c)),
                                }
                            }
                            cs = out;
                        }
                        ColumnData::Complex {
                            deletion: *deletion,
                            cells: cs,
                        }
                    }
                };
                (*id, d)
            })
            .collect();
        if !cells.windows(2).all(|w| w[0].0 < w[1].0) {
            cells.sort_by_key(|(id, _)| *id);
            let mut out: Vec<(ColumnId, ColumnData)> = Vec::with_capacity(cells.len());
            for (id, d) in cells {
                match out.last_mut() {
                    Some(last) if last.0 == id => {
                        last.1 = merge_column_data(&self.schema, id, &last.1, &d)
                    }
                    _ => out.push((id, d)),
                }
            }
            cells = out;
        }
        Row {
            clustering: Clustering(r.clustering.0.iter().map(|b| a.copy(b)).collect()),
            marker: r.marker,
            deletion: r.deletion,
            cells,
        }
    }

    /// Applies an update (values are copied).
    pub fn apply(&mut self, key: &PartitionKey, u: &PartitionUpdate, pos: Option<LogPosition>) {
        if let Some(p) = pos {
            self.min_log_pos = Some(self.min_log_pos.map_or(p, |m| m.min(p)));
        }
        self.mutations += 1;
        let (lo, hi) = timestamp_bounds(u);
        self.max_timestamp = self.max_timestamp.max(hi);
        self.min_timestamp = self.min_timestamp.min(lo);
        let single = u.partition_deletion.is_none()
            && u.static_row.is_none()
            && u.range_tombstones.is_empty()
            && u.rows.len() == 1
            && self.single_rows;
        let arena_before = self.arena.used;
        let added = if single {
            self.apply_single(key, u)
        } else {
            self.apply_general(key, u)
        };
        self.size_bytes += (added + (self.arena.used - arena_before)) as u64;
    }

    /// A one-row update (`u.rows[0]`, nothing else): kept encoded while the partition
    /// stays a single row. Returns the growth in bytes besides the arena's.
    fn apply_single(&mut self, key: &PartitionKey, u: &PartitionUpdate) -> usize {
        let owned;
        let r = if self.is_canonical(&u.rows[0]) {
            &u.rows[0]
        } else {
            owned = self.own_row(&u.rows[0]);
            &owned
        };
        // One search: the key is copied into the arena up front (an overwrite wastes
        // those few bytes, as it wastes the old row's encoding).
        let k = PartitionKey {
            token: key.token,
            key: self.arena.copy(&key.key),
        };
        let (scratch, arena) = (&mut self.scratch, &mut self.arena);
        let mut grow = 0;
        let (slot, inserted) = self.partitions.find_or_insert(k, || {
            grow = SINGLE_ENTRY_BYTES;
            MemPartition::Single(encode_into(scratch, arena, r))
        });
        if inserted {
            return grow;
        }
        if let MemPartition::Single(enc) = slot {
            // A newer write of every column the row holds (standard1's overwrites) is the
            // merge's whole result: its encoding replaces the old one with no decode,
            // merge or second encoding.
            if may_replace_whole(r) {
                encode_single_into(&mut self.scratch, r);
                if replaces_whole(enc, &self.scratch) {
                    *slot = MemPartition::Single(self.arena.copy(&self.scratch));
                    return 0;
                }
            }
            let old = decode_single(enc);
            if self.cmp.compare(&old.clustering.0, &r.clustering.0) == Ordering::Equal {
                let merged = merge_rows_into(&self.schema, old, r);
                // The old encoding stays in its arena chunk until the memtable is
                // dropped: the arena counts the whole new one (and the key copy).
                *slot =
                    MemPartition::Single(encode_into(&mut self.scratch, &mut self.arena, &merged));
                return 0;
            }
        }
        self.apply_general(key, u)
    }

    /// Whether a row's cells are already in canonical order (sorted by column id, one
    /// entry per column, complex cells strictly ordered by the type's path comparator).
    fn is_canonical(&self, r: &Row) -> bool {
        let mut prev: Option<ColumnId> = None;
        for (id, d) in &r.cells {
            if prev.is_some_and(|p| p >= *id) {
                return false;
            }
            prev = Some(*id);
            if let ColumnData::Complex { cells, .. } = d
                && cells.len() > 1
            {
                let Some(col) = self.schema.column_by_id(*id) else {
                    return false;
                };
                if !cells
                    .windows(2)
                    .all(|w| col.ty.compare_cell_path(&w[0].0, &w[1].0).is_lt())
                {
                    return false;
                }
            }
        }
        true
    }

    /// Any update, applied to the partition in its general shape. Returns the growth in
    /// bytes besides the arena's.
    fn apply_general(&mut self, key: &PartitionKey, u: &PartitionUpdate) -> usize {
        let mut added = 0usize;
        let static_row = u.static_row.as_ref().map(|r| self.own_row(r));
        let rows: Vec<Row> = u.rows.iter().map(|r| self.own_row(r)).collect();
        let rts: Vec<RangeTombstone> = u
            .range_tombstones
            .iter()
            .map(|rt| RangeTombstone {
                start: own_bound(&mut self.arena, &rt.start),
                end: own_bound(&mut self.arena, &rt.end),
                deletion: rt.deletion,
            })
            .collect();
        let entry = match self.partitions.get_mut(key) {
            Some(p) => p,
            None => {
                added += GENERAL_ENTRY_BYTES;
                let k = PartitionKey {
                    token: key.token,
                    key: self.arena.copy(&key.key),
                };
                self.partitions
                    .find_or_insert(k, || MemPartition::General(Box::default()))
                    .0
            }
        };
        if let MemPartition::Single(enc) = entry {
            // Its values stay in the arena, where the encoding was.
            let rows = vec![decode_single(enc)];
            added += GENERAL_ENTRY_BYTES - SINGLE_ENTRY_BYTES
                + vec_bytes(&rows)
                + rows.iter().map(row_heap_bytes).sum::<usize>();
            *entry = MemPartition::General(Box::new(GeneralPartition {
                rows: MemRows::Small(rows),
                ..Default::default()
            }));
        }
        let MemPartition::General(part) = entry else {
            return added;
        };
        part.deletion = max_deletion(part.deletion, u.partition_deletion);
        if let Some(sr) = static_row {
            let merged = match part.static_row.take() {
                Some(old) => {
                    let before = row_heap_bytes(&old);
                    let m = merge_rows_into(&self.schema, old, &sr);
                    added += row_heap_bytes(&m).saturating_sub(before);
                    m
                }
                None => {
                    added += row_heap_bytes(&sr);
                    sr
                }
            };
            part.static_row = Some(merged);
        }
        for r in rows {
            added += part.rows.upsert(&self.schema, &self.cmp, r);
        }
        let before = vec_bytes(&part.range_tombstones);
        for rt in rts {
            if !part.range_tombstones.contains(&rt) {
                added += vec_bytes(&rt.start.prefix.0) + vec_bytes(&rt.end.prefix.0);
                part.range_tombstones.push(rt);
            }
        }
        added + vec_bytes(&part.range_tombstones).saturating_sub(before)
    }

    /// The partition's data restricted to `slices` (empty = all), or None if absent.
    pub fn get(&self, key: &PartitionKey, slices: &[ClusteringSlice]) -> Option<PartitionUpdate> {
        self.partitions.get(key).map(|p| self.to_update(p, slices))
    }

    pub fn to_update(&self, p: &MemPartition, slices: &[ClusteringSlice]) -> PartitionUpdate {
        self.to_update_capped(p, slices, usize::MAX, false).0
    }

    /// [`Self::to_update`] with at most `cap` rows within `slices` (the first ones, or the
    /// last ones when `from_end`), and all of the partition's tombstones and its static
    /// row. The second value is the clustering of the last row taken (the first one in
    /// clustering order when `from_end`) when rows within `slices` were left out (None
    /// when every one of them is in the update): the update is the partition's exact
    /// content up to and including that clustering (from it on when `from_end`). `cap` is
    /// at least 1; `slices` are sorted and disjoint.
    pub fn to_update_capped(
        &self,
        p: &MemPartition,
        slices: &[ClusteringSlice],
        cap: usize,
        from_end: bool,
    ) -> (PartitionUpdate, Option<Clustering>) {
        let p = match p {
            MemPartition::Single(enc) => {
                // One row: within any cap.
                let row = decode_single(enc);
                let keep = slices.is_empty()
                    || slices
                        .iter()
                        .any(|s| s.contains(&self.cmp, &row.clustering));
                let update = PartitionUpdate {
                    rows: if keep { vec![row] } else { Vec::new() },
                    ..Default::default()
                };
                return (update, None);
            }
            MemPartition::General(g) => g,
        };
        // A cap is small (a limit): room for it up front, not a growth per row.
        let mut rows = if cap == usize::MAX {
            Vec::new()
        } else {
            Vec::with_capacity(cap.min(p.rows.len()))
        };
        let mut cut = None;
        if from_end {
            let all = [ClusteringSlice::all()];
            let slices = if slices.is_empty() { &all[..] } else { slices };
            'rev: for s in slices.iter().rev() {
                for r in p.rows.iter_rev_to(&self.cmp, &s.end) {
                    if !self.cmp.after_start(&r.clustering, &s.start) {
                        break;
                    }
                    if rows.len() == cap {
                        cut = rows.last().map(|r: &Row| r.clustering.clone());
                        break 'rev;
                    }
                    rows.push(r.clone());
                }
            }
            rows.reverse();
        } else if slices.is_empty() {
            let mut it = p.rows.iter();
            rows.extend(it.by_ref().take(cap).cloned());
            if it.next().is_some() {
                cut = rows.last().map(|r: &Row| r.clustering.clone());
            }
        } else {
            'slices: for s in slices {
                for r in p.rows.iter_from(&self.cmp, &s.start.prefix) {
                    if !self.cmp.before_end(&r.clustering, &s.end) {
                        break;
                    }
                    if self.cmp.after_start(&r.clustering, &s.start) {
                        if rows.len() == cap {
                            cut = rows.last().map(|r: &Row| r.clustering.clone());
                            break 'slices;
                        }
                        rows.push(r.clone());
                    }
                }
            }
        }
        let update = PartitionUpdate {
            partition_deletion: p.deletion,
            static_row: p.static_row.clone(),
            rows,
            range_tombstones: p.range_tombstones.clone(),
        };
        (update, cut)
    }

    /// Partitions in ring order within the given bounds.
    pub fn range<'a>(
        &'a self,
        start: Bound<&PartitionKey>,
        end: Bound<&PartitionKey>,
    ) -> impl Iterator<Item = (&'a PartitionKey, &'a MemPartition)> + 'a {
        self.partitions.range(start, end)
    }
}

fn own_cell(a: &mut Arena, c: &Cell) -> Cell {
    Cell {
        value: a.copy(&c.value),
        ..c.clone()
    }
}

fn own_bound(
    a: &mut Arena,
    b: &amphora_types::data::ClusteringBound,
) -> amphora_types::data::ClusteringBound {
    amphora_types::data::ClusteringBound {
        prefix: Clustering(b.prefix.0.iter().map(|x| a.copy(x)).collect()),
        inclusive: b.inclusive,
    }
}

/// Lowest and highest timestamp in an update (`(i64::MAX, i64::MIN)` if it has none), in
/// one pass.
fn timestamp_bounds(u: &PartitionUpdate) -> (i64, i64) {
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    let mut see = |t: i64| {
        lo = lo.min(t);
        hi = hi.max(t);
    };
    for r in u.static_row.iter().chain(u.rows.iter()) {
        if let Some(x) = r.marker {
            see(x.timestamp);
        }
        if let Some(d) = r.deletion {
            see(d.marked_for_delete_at);
        }
        for (_, d) in &r.cells {
            match d {
                ColumnData::Simple(c) => see(c.timestamp),
                ColumnData::Complex { deletion, cells } => {
                    if let Some(d) = deletion {
                        see(d.marked_for_delete_at);
                    }
                    for (_, c) in cells {
                        see(c.timestamp);
                    }
                }
            }
        }
    }
    if let Some(d) = u.partition_deletion {
        see(d.marked_for_delete_at);
    }
    for rt in &u.range_tombstones {
        see(rt.deletion.marked_for_delete_at);
    }
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use amphora_types::CqlType;
    use amphora_types::data::LivenessInfo;
    use amphora_types::schema::{ClusteringOrder, ColumnDef, ColumnKind, TableId, TableOptions};
    use proptest::prelude::*;

    /// pk blob, ck int DESC, s blob static, v blob, tags set<int>: ids 0..=4.
    fn schema() -> Arc<TableSchema> {
        let cd = |n: &str, ty, kind| ColumnDef {
            name: n.into(),
            ty,
            kind,
            position: 0,
            order: ClusteringOrder::Desc,
        };
        let set = CqlType::Set {
            elem: Box::new(CqlType::Int),
            frozen: false,
        };
        Arc::new(TableSchema::new(
            TableId(7),
            "ks",
            "t",
            vec![
                cd("pk", CqlType::Blob, ColumnKind::PartitionKey),
                cd("ck", CqlType::Int, ColumnKind::Clustering),
                cd("s", CqlType::Blob, ColumnKind::Static),
                cd("v", CqlType::Blob, ColumnKind::Regular),
                cd("tags", set, ColumnKind::Regular),
            ],
            TableOptions::default(),
        ))
    }

    fn int(v: i32) -> Bytes {
        Bytes::copy_from_slice(&v.to_be_bytes())
    }

    fn cell() -> impl Strategy<Value = Cell> {
        (0i64..6, 0u8..4, prop::collection::vec(any::<u8>(), 0..5)).prop_map(|(ts, kind, v)| {
            match kind {
                0 => Cell::tombstone(ts, 1_000),
                1 => Cell::expiring(ts, 60, 1_000, Bytes::from(v)),
                _ => Cell::live(ts, Bytes::from(v)),
            }
        })
    }

    fn row() -> impl Strategy<Value = Row> {
        (
            0i32..3,
            prop::option::of(0i64..6),
            prop::option::of(0i64..6),
            prop::option::of(cell()),
            prop::option::of((
                prop::option::of(0i64..6),
                prop::collection::vec((0i32..4, cell()), 0..4),
            )),
            any::<bool>(),
        )
            .prop_map(|(ck, marker, del, v, tags, reversed)| {
                let mut cells = Vec::new();
                if let Some(c) = v {
                    cells.push((3, ColumnData::Simple(c)));
                }
                if let Some((d, elems)) = tags {
                    cells.push((
                        4,
                        ColumnData::Complex {
                            deletion: d.map(|t| DeletionTime::new(t, 1_000)),
                            cells: elems.into_iter().map(|(e, c)| (int(e), c)).collect(),
                        },
                    ));
                }
                if reversed {
                    // Writers need not send cells in canonical order.
                    cells.reverse();
                }
                Row {
                    clustering: Clustering(vec![int(ck)]),
                    marker: marker.map(LivenessInfo::new),
                    deletion: del.map(|t| DeletionTime::new(t, 1_000)),
                    cells,
                }
            })
    }

    fn update() -> impl Strategy<Value = (u8, PartitionUpdate)> {
        let one_row = row().prop_map(|r| PartitionUpdate {
            rows: vec![r],
            ..Default::default()
        });
        let other = (
            prop::option::of(0i64..6),
            prop::option::of(cell()),
            prop::collection::vec(row(), 0..3),
        )
            .prop_map(|(pd, s, rows)| PartitionUpdate {
                partition_deletion: pd.map(|t| DeletionTime::new(t, 1_000)),
                static_row: s.map(|c| Row {
                    clustering: Clustering::empty(),
                    marker: None,
                    deletion: None,
                    cells: vec![(2, ColumnData::Simple(c))],
                }),
                rows,
                range_tombstones: Vec::new(),
            });
        (0u8..3, prop_oneof![4 => one_row, 1 => other])
    }

    /// What `apply` makes for `n` updates from `update(i)`: the memtable's accounted bytes
    /// against what the calling thread's allocations grew by (see `crate::counting_alloc`).
    fn accounted_and_held(
        schema: Arc<TableSchema>,
        n: usize,
        update: impl Fn(usize) -> (PartitionKey, PartitionUpdate),
    ) -> (f64, f64) {
        let updates: Vec<_> = (0..n).map(update).collect();
        let before = crate::counting_alloc::held();
        let mut m = Memtable::new(schema);
        for (k, u) in &updates {
            m.apply(k, u, None);
        }
        let held = crate::counting_alloc::held() - before;
        let accounted = m.size_bytes as f64;
        drop(m);
        (accounted, held as f64)
    }

    /// The memtable budget is what the allocator gives the memtables: accounted bytes
    /// within 20% of what the rows took, for one-row partitions (`standard1`) and for
    /// wide partitions written in clustering order (the IoT profile: time series rows in
    /// B-trees, which the accounting once counted at two thirds of their size).
    #[test]
    fn accounted_bytes_are_what_the_allocator_gave() {
        let schema = schema();
        let cell = |i: usize, len: usize| Cell::live(i as i64, Bytes::from(vec![i as u8; len]));
        let row = |ck: i32, i: usize| Row {
            clustering: Clustering(vec![int(ck)]),
            marker: Some(LivenessInfo::new(i as i64)),
            deletion: None,
            cells: vec![(3, ColumnData::Simple(cell(i, 34)))],
        };
        let key = |p: usize| PartitionKey::new(Bytes::from(format!("key{p:07}").into_bytes()));
        let single = accounted_and_held(schema.clone(), 20_000, |i| {
            let u = PartitionUpdate {
                rows: vec![row(0, i)],
                ..Default::default()
            };
            (key(i), u)
        });
        // 50 partitions of 200 rows, each row written alone with a clustering after the
        // last (ck DESC: every insert lands in front of the others).
        let wide = accounted_and_held(schema, 10_000, |i| {
            let u = PartitionUpdate {
                rows: vec![row((i / 50) as i32, i)],
                ..Default::default()
            };
            (key(i % 50), u)
        });
        for (name, (accounted, held)) in [("single", single), ("wide", wide)] {
            let ratio = accounted / held;
            assert!(
                (0.8..=1.2).contains(&ratio),
                "{name}: accounted {accounted} held {held} ratio {ratio:.2}"
            );
        }
    }

    /// Chunks faulted in off the shard fill the pool up to its bound and are what the
    /// next memtable takes, none allocated fresh.
    #[test]
    fn chunks_topped_up_off_the_shard_serve_the_next_memtable() {
        let pool = ChunkPool::new(6 * ARENA_CHUNK_BYTES as u64);
        assert_eq!(pool.top_up(4), 4);
        assert_eq!(pool.top_up(4), 0, "already holds the target");
        // Never past the pool's bound.
        assert_eq!(pool.top_up(100), 2);
        assert_eq!(pool.kept(), 6);
        let mut m = Memtable::with_pool(schema(), Some(pool.clone()));
        let key = PartitionKey::new(Bytes::from_static(b"k"));
        for i in 0..600 {
            let u = PartitionUpdate {
                rows: vec![Row {
                    clustering: Clustering(vec![int(i)]),
                    marker: Some(LivenessInfo::new(1)),
                    deletion: None,
                    cells: vec![(3, ColumnData::Simple(Cell::live(1, vec![7u8; 1000].into())))],
                }],
                ..Default::default()
            };
            m.apply(&key, &u, None);
        }
        let st = pool.stats();
        assert_eq!((st.prefaulted, st.taken_fresh), (6, 0), "{st:?}");
        assert!(st.taken_kept >= 2, "{st:?}");
        assert_eq!(pool.kept() as u64, 6 - st.taken_kept);
        let got = m.get(&key, &[ClusteringSlice::all()]).expect("partition");
        assert_eq!(got.rows.len(), 600);
    }

    /// A dropped memtable's arena chunks serve the next memtables of its pool, all but
    /// those a value read from it still holds, and no more than the pool's bound.
    #[test]
    fn dropped_memtables_give_their_chunks_to_the_next() {
        let chunk = ARENA_CHUNK_BYTES as u64;
        let pool = ChunkPool::new(8 * chunk);
        let schema = schema();
        let key = |p: usize| PartitionKey::new(Bytes::from(format!("key{p:07}").into_bytes()));
        let update = |i: usize| PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering(vec![int(i as i32)]),
                marker: Some(LivenessInfo::new(i as i64)),
                deletion: None,
                cells: vec![(
                    3,
                    ColumnData::Simple(Cell::live(i as i64, vec![9u8; 900].into())),
                )],
            }],
            ..Default::default()
        };
        let fill = |m: &mut Memtable, n: usize| {
            for i in 0..n {
                m.apply(&key(i), &update(i), None);
            }
        };
        // ~1 KB a row: 1,000 rows fill four chunks.
        let mut m = Memtable::with_pool(schema.clone(), Some(pool.clone()));
        fill(&mut m, 1_000);
        let fresh = pool.stats().taken_fresh;
        assert!((4..=5).contains(&fresh), "{fresh} chunks for 1,000 rows");
        // A read's result holds values of the first chunk.
        let held = m.get(&key(0), &[ClusteringSlice::all()]).expect("row 0");
        drop(m);
        assert_eq!(pool.stats().kept_bytes, (fresh - 1) * chunk);
        let mut m = Memtable::with_pool(schema.clone(), Some(pool.clone()));
        fill(&mut m, 1_000);
        let st = pool.stats();
        assert_eq!(st.taken_kept, fresh - 1);
        assert_eq!(st.taken_fresh, fresh + 1);
        assert_eq!(st.kept_bytes, 0);
        // The values written into kept chunks read back as written.
        for i in [0, 500, 999] {
            let got = m.get(&key(i), &[ClusteringSlice::all()]).expect("row");
            assert_eq!(got, update(i), "row {i}");
        }
        assert_eq!(held, update(0));
        drop(held);
        drop(m);
        assert_eq!(pool.stats().kept_bytes, fresh * chunk);
        // Three memtables' chunks at once: the pool keeps its bound's worth.
        let ms: Vec<Memtable> = (0..3)
            .map(|_| {
                let mut m = Memtable::with_pool(schema.clone(), Some(pool.clone()));
                fill(&mut m, 1_000);
                m
            })
            .collect();
        drop(ms);
        assert_eq!(pool.stats().kept_bytes, 8 * chunk);
        // Released over the resident limit: whole chunks, at least the bytes asked.
        assert_eq!(pool.release(chunk + 1), 2 * chunk);
        assert_eq!(pool.stats().kept_bytes, 6 * chunk);
        assert_eq!(pool.release(u64::MAX), 6 * chunk);
        assert_eq!(pool.stats().kept_bytes, 0);
        drop(Memtable::with_pool(schema.clone(), Some(pool.clone())));
        // Without a pool nothing is kept.
        let mut m = Memtable::new(schema.clone());
        fill(&mut m, 1_000);
        drop(m);
        assert_eq!(pool.stats().kept_bytes, 0);
    }

    /// pk blob, a int, b int DESC, v blob: a two-column clustering, for partial prefixes.
    fn two_column_schema() -> Arc<TableSchema> {
        let cd = |n: &str, ty, kind, order| ColumnDef {
            name: n.into(),
            ty,
            kind,
            position: 0,
            order,
        };
        Arc::new(TableSchema::new(
            TableId(8),
            "ks",
            "t2",
            vec![
                cd(
                    "pk",
                    CqlType::Blob,
                    ColumnKind::PartitionKey,
                    ClusteringOrder::Asc,
                ),
                cd(
                    "a",
                    CqlType::Int,
                    ColumnKind::Clustering,
                    ClusteringOrder::Asc,
                ),
                cd(
                    "b",
                    CqlType::Int,
                    ColumnKind::Clustering,
                    ClusteringOrder::Desc,
                ),
                cd(
                    "v",
                    CqlType::Blob,
                    ColumnKind::Regular,
                    ClusteringOrder::Asc,
                ),
            ],
            TableOptions::default(),
        ))
    }

    fn bound() -> impl Strategy<Value = ClusteringBound> {
        (0usize..3, 0i32..6, 0i32..6, any::<bool>()).prop_map(|(len, a, b, inclusive)| {
            ClusteringBound {
                prefix: Clustering([int(a), int(b)][..len].to_vec()),
                inclusive: inclusive || len == 0,
            }
        })
    }

    /// A newer write of every column replaces a single-row partition's encoding whole
    /// (`replaces_whole`); older, partial and expiring writes still merge. Either way the
    /// partition reads back as merging the writes in turn gives.
    #[test]
    fn overwrites_of_single_rows_replace_or_merge() {
        let schema = schema();
        let key = PartitionKey::new(Bytes::from_static(b"k"));
        let row = |ck: i32, ts: i64, v: Option<Cell>| Row {
            clustering: Clustering(vec![int(ck)]),
            marker: Some(LivenessInfo::new(ts)),
            deletion: None,
            cells: v
                .map(|c| vec![(3, ColumnData::Simple(c))])
                .unwrap_or_default(),
        };
        let steps = [
            (row(1, 1, Some(Cell::live(1, int(10)))), false),
            (row(1, 2, Some(Cell::live(2, int(20)))), true),
            // Older: the newer cell stays.
            (row(1, 1, Some(Cell::live(1, int(30)))), false),
            // No cell for a column the row holds: that cell stays.
            (row(1, 3, None), false),
            (
                row(1, 4, Some(Cell::expiring(4, 60, 1_000, int(40)))),
                false,
            ),
            (row(1, 5, Some(Cell::live(5, int(50)))), true),
            // Another clustering: the partition takes its general shape.
            (row(2, 6, Some(Cell::live(6, int(60)))), false),
        ];
        let mut m = Memtable::new(schema.clone());
        let mut want: Option<Row> = None;
        for (r, whole) in &steps {
            let before = match m.partitions.get(&key) {
                Some(MemPartition::Single(enc)) => Some(enc.clone()),
                _ => None,
            };
            let mut new = Vec::new();
            encode_single(&mut new, r);
            assert_eq!(
                before.as_ref().is_some_and(|old| replaces_whole(old, &new)),
                *whole,
                "replaces whole: {r:?}"
            );
            let u = PartitionUpdate {
                rows: vec![r.clone()],
                ..Default::default()
            };
            m.apply(&key, &u, None);
            match m.partitions.get(&key) {
                Some(MemPartition::Single(enc)) => {
                    want = Some(match want {
                        Some(w) => amphora_types::data::merge_rows(&schema, &w, r),
                        None => r.clone(),
                    });
                    assert_eq!(Some(decode_single(enc)), want);
                }
                other => {
                    assert_eq!(r.clustering.0, vec![int(2)], "{other:?}");
                    let Some(MemPartition::General(g)) = other else {
                        panic!("no partition after {r:?}");
                    };
                    assert_eq!(g.rows.len(), 2);
                }
            }
        }
    }

    proptest! {
        /// The last rows of a partition within a slice, taken from its end (a reversed
        /// read's cap), are the slice's rows in reverse, for vector and B-tree partitions
        /// and for ends with a full, partial or empty prefix.
        #[test]
        fn rows_from_the_end_are_the_slice_reversed(
            cks in prop::collection::btree_set((0i32..6, 0i32..6), 0..36),
            start in bound(),
            end in bound(),
            cap in 1usize..8,
        ) {
            let schema = two_column_schema();
            let cmp = Arc::new(schema.clustering_comparator());
            let mut m = Memtable::new(schema);
            m.single_rows = false;
            let key = PartitionKey::new(Bytes::from_static(b"k"));
            let u = PartitionUpdate {
                rows: cks
                    .iter()
                    .map(|&(a, b)| Row {
                        clustering: Clustering(vec![int(a), int(b)]),
                        marker: Some(LivenessInfo::new(1)),
                        deletion: None,
                        cells: vec![(3, ColumnData::Simple(Cell::live(1, int(a * 10 + b))))],
                    })
                    .collect(),
                ..Default::default()
            };
            m.apply(&key, &u, None);
            let Some(MemPartition::General(p)) = m.partitions.get(&key) else {
                return Ok(());
            };
            prop_assert_eq!(p.rows.len() > SMALL_ROWS_MAX, cks.len() > SMALL_ROWS_MAX);
            let slice = ClusteringSlice { start: start.clone(), end: end.clone() };
            let want: Vec<&Row> = p
                .rows
                .iter()
                .filter(|r| cmp.before_end(&r.clustering, &end))
                .collect();
            let got: Vec<&Row> = p.rows.iter_rev_to(&cmp, &end).collect();
            prop_assert_eq!(got, want.iter().rev().copied().collect::<Vec<_>>());
            let within: Vec<Row> = p
                .rows
                .iter()
                .filter(|r| slice.contains(&cmp, &r.clustering))
                .cloned()
                .collect();
            let (capped, cut) = m.to_update_capped(
                m.partitions.get(&key).expect("held"),
                std::slice::from_ref(&slice),
                cap,
                true,
            );
            let first = within.len().saturating_sub(cap);
            prop_assert_eq!(&capped.rows[..], &within[first..]);
            prop_assert_eq!(cut, (first > 0).then(|| within[first].clustering.clone()));
        }

        /// Single-row partitions kept encoded read back exactly as the general shape
        /// does, through overwrites, clustering changes and every other kind of update.
        #[test]
        fn single_rows_match_general_shape(ups in prop::collection::vec(update(), 1..40)) {
            let schema = schema();
            let mut fast = Memtable::new(schema.clone());
            let mut general = Memtable::new(schema);
            general.single_rows = false;
            for (k, u) in &ups {
                let key = PartitionKey::new(Bytes::from(vec![*k]));
                fast.apply(&key, u, None);
                general.apply(&key, u, None);
            }
            prop_assert_eq!(fast.partitions.len(), general.partitions.len());
            let slices = [ClusteringSlice {
                start: amphora_types::data::ClusteringBound::inclusive(vec![int(1)]),
                end: amphora_types::data::ClusteringBound::unbounded(),
            }];
            for (key, _) in general.range(Bound::Unbounded, Bound::Unbounded) {
                prop_assert_eq!(fast.get(key, &[]), general.get(key, &[]));
                prop_assert_eq!(fast.get(key, &slices), general.get(key, &slices));
            }
        }
    }
}
