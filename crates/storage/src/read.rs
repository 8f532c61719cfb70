//! Read commands and results, the single-partition read (memtables + row cache or
//! SSTables), and turning merged partition data into live query results.
//!
//! PERF-CRITICAL: `read_single` on a row cache hit is the hot point-read path.

use std::borrow::Cow;
use std::ops::Bound;
use std::sync::Arc;

use amphora_types::data::{
    Cell, Clustering, ClusteringBound, ClusteringSlice, ColumnData, DeletionTime, PartitionKey,
    PartitionUpdate, Row, apply_own_deletions, max_deletion, merge_partition_updates_many,
    merge_partition_updates_owned,
};
use amphora_types::schema::{ClusteringComparator, ColumnId, TableId, TableSchema};
use bytes::Bytes;

use crate::cache::BlockCache;
use crate::error::{Result, StorageError};
use crate::memtable::{MemPartition, Memtable};
#[path = "read_rows.rs"]
mod read_rows;
use crate::rowcache::{CachedPartition, RowCache};
use crate::sstable::{IndexEntry, RowSlices, SSTableReader};
pub use read_rows::Rows;

/// Which partitions a read covers.
#[derive(Debug, Clone, PartialEq)]
pub enum PartitionRange {
    Single(PartitionKey),
    /// Ring order range. A bound `(token, None)` means "every key with this token"
    /// (included) or "keys after this token" (excluded).
    TokenRange {
        start: Bound<(i64, Option<Bytes>)>,
        end: Bound<(i64, Option<Bytes>)>,
    },
}

impl PartitionRange {
    pub fn all() -> Self {
        PartitionRange::TokenRange {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReadCommand {
    pub table: TableId,
    pub partitions: PartitionRange,
    /// Clustering slices in clustering order (also for reversed reads); empty = all rows.
    pub slices: Vec<ClusteringSlice>,
    /// Columns to return (None = all). Row liveness still considers every column.
    pub columns: Option<Vec<ColumnId>>,
    /// Return rows in reverse clustering order.
    pub reversed: bool,
    /// 0 or `u32::MAX` = no limit (same for the other limits).
    pub row_limit: u32,
    pub per_partition_limit: u32,
    pub partition_limit: u32,
    /// Paging: continue strictly after this partition (None) or this row of it.
    pub start_after: Option<(PartitionKey, Option<Clustering>)>,
    /// "Now" for TTL expiry, in seconds since the epoch.
    pub now_seconds: i32,
}

impl ReadCommand {
    /// A read of everything in a partition range.
    pub fn new(table: TableId, partitions: PartitionRange, now_seconds: i32) -> Self {
        ReadCommand {
            table,
            partitions,
            slices: Vec::new(),
            columns: None,
            reversed: false,
            row_limit: 0,
            per_partition_limit: 0,
            partition_limit: 0,
            start_after: None,
            now_seconds,
        }
    }
}

pub(crate) fn limit(v: u32) -> u64 {
    if v == 0 || v == u32::MAX {
        u64::MAX
    } else {
        v as u64
    }
}

/// One partition of a result: live data only, each cell with its timestamp and TTL.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionData {
    pub key: PartitionKey,
    pub partition_deletion: Option<DeletionTime>,
    pub static_row: Option<Row>,
    /// Owned, or shared with the row cache (see [`Rows`]).
    pub rows: Rows,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReadResult {
    pub partitions: Vec<PartitionData>,
    /// False if a limit cut the result (there may be more).
    pub exhausted: bool,
    /// Rows counted against the limits.
    pub rows_counted: u64,
    /// SSTables consulted (for tablehistograms).
    pub sstables_read: u32,
}

/// Keeps only live cells of a column (expired TTL cells are dropped).
fn live_column(d: &ColumnData, now: i32) -> Option<ColumnData> {
    match d {
        ColumnData::Simple(c) => c.is_live(now).then(|| ColumnData::Simple(c.clone())),
        ColumnData::Complex { cells, .. } => {
            let live: Vec<(Bytes, Cell)> = cells
                .iter()
                .filter(|(_, c)| c.is_live(now))
                .cloned()
                .collect();
            (!live.is_empty()).then_some(ColumnData::Complex {
                deletion: None,
                cells: live,
            })
        }
    }
}

/// The live view of a (canonical, merged) row, or None if the row is not live.
pub fn live_row(r: &Row, columns: Option<&[ColumnId]>, now: i32, is_static: bool) -> Option<Row> {
    let marker = r.marker.filter(|m| m.is_live(now));
    let mut any_live = marker.is_some();
    let mut cells = Vec::with_capacity(r.cells.len());
    for (id, d) in &r.cells {
        if let Some(l) = live_column(d, now) {
            any_live = true;
            if columns.is_none_or(|cs| cs.contains(id)) {
                cells.push((*id, l));
            }
        }
    }
    if !any_live || (is_static && cells.is_empty() && columns.is_some()) {
        return None;
    }
    Some(Row {
        clustering: r.clustering.clone(),
        marker,
        deletion: None,
        cells,
    })
}

/// Keeps only the live cells of a column in place; false if none is left.
fn retain_live_column(d: &mut ColumnData, now: i32) -> bool {
    match d {
        ColumnData::Simple(c) => c.is_live(now),
        ColumnData::Complex { deletion, cells } => {
            cells.retain(|(_, c)| c.is_live(now));
            *deletion = None;
            !cells.is_empty()
        }
    }
}

/// [`live_row`] on an owned row: the same result, without copying cells.
fn into_live_row(
    mut r: Row,
    columns: Option<&[ColumnId]>,
    now: i32,
    is_static: bool,
) -> Option<Row> {
    let marker = r.marker.filter(|m| m.is_live(now));
    let mut any_live = marker.is_some();
    r.cells.retain_mut(|(id, d)| {
        if !retain_live_column(d, now) {
            return false;
        }
        any_live = true;
        columns.is_none_or(|cs| cs.contains(id))
    });
    if !any_live || (is_static && r.cells.is_empty() && columns.is_some()) {
        return None;
    }
    r.marker = marker;
    r.deletion = None;
    Some(r)
}

/// Builds the live result for one merged partition, honouring limits.
/// `remaining_rows` is decremented by the rows counted. Returns (data, cut_by_limit).
pub(crate) fn live_partition(
    schema: &TableSchema,
    key: PartitionKey,
    merged: PartitionUpdate,
    cmd: &ReadCommand,
    after: Option<&Clustering>,
    remaining_rows: &mut u64,
) -> (Option<PartitionData>, bool) {
    let cmp = schema.clustering_comparator();
    let now = cmd.now_seconds;
    let cols = cmd.columns.as_deref();
    let partition_deletion = merged.partition_deletion;
    let static_row = merged
        .static_row
        .and_then(|r| into_live_row(r, cols, now, true));
    let per_part = limit(cmd.per_partition_limit);
    let mut rows = Vec::new();
    let mut cut = false;
    let mut source = merged.rows;
    if cmd.reversed {
        source.reverse();
    }
    for r in source {
        if !cmd.slices.is_empty() && !cmd.slices.iter().any(|s| s.contains(&cmp, &r.clustering)) {
            continue;
        }
        if let Some(a) = after {
            let o = cmp.compare(&r.clustering.0, &a.0);
            if (!cmd.reversed && o.is_le()) || (cmd.reversed && o.is_ge()) {
                continue;
            }
        }
        if let Some(l) = into_live_row(r, cols, now, false) {
            // The per-partition limit ends this partition only; the row limit ends the read.
            if rows.len() as u64 >= per_part {
                break;
            }
            if *remaining_rows == 0 {
                cut = true;
                break;
            }
            rows.push(l);
            *remaining_rows -= 1;
        }
    }
    if rows.is_empty() {
        // A partition with only static data counts as one row (not when resuming inside it).
        match static_row {
            Some(s) if after.is_none() && !has_clustering_restriction(cmd) => {
                if *remaining_rows == 0 {
                    return (None, true);
                }
                *remaining_rows -= 1;
                return (
                    Some(PartitionData {
                        key,
                        partition_deletion,
                        static_row: Some(s),
                        rows: rows.into(),
                    }),
                    cut,
                );
            }
            _ => return (None, cut),
        }
    }
    (
        Some(PartitionData {
            key,
            partition_deletion,
            static_row,
            rows: rows.into(),
        }),
        cut,
    )
}

/// Where one table's single-partition read finds its data.
pub(crate) struct TableSources<'a, M> {
    pub table: TableId,
    pub schema: &'a TableSchema,
    pub cmp: &'a ClusteringComparator,
    /// The active memtable, then the ones being flushed (newest first).
    pub memtables: M,
    /// The table's SSTables (quarantined ones are skipped).
    pub sstables: &'a [Arc<SSTableReader>],
}

/// What a whole-partition read of a table whose partitions are one row (no clustering
/// columns) has found so far in SSTables, newest first: for each column the newest
/// timestamp of a cell, and of a row marker. An SSTable whose data is all older than every
/// column's (its `max_timestamp`), with no tombstone and no marker a found one does not
/// beat, cannot change the merge (Cassandra's reads of named columns in timestamp order):
/// each of its cells loses to a newer one found, and it deletes nothing. Left unread, the
/// merge is exactly the full one (the row cache keeps it as the SSTables' content). A key
/// overwritten again and again (time series state, user profiles, standard1) is then read
/// from its newest SSTable alone, not from each flush that holds it: right after a burst of
/// writes that was ~6.5 SSTables per read, and the reads took the whole shard
/// (docs/benchmarks.md, "Reads right after a write burst").
pub(crate) struct Coverage {
    /// Per column id: `Some(newest cell timestamp)` for the columns a row may hold (the
    /// regular ones not dropped), `None` for the others. Inline up to 16 columns: made for
    /// each row cache miss over several SSTables.
    newest: smallvec::SmallVec<[Option<i64>; 16]>,
    /// Regular columns not yet found.
    missing: usize,
    marker: Option<i64>,
}

impl Coverage {
    /// For a whole-partition read of `schema`; None where the shortcut does not hold:
    /// clustering columns (many rows), counters (cells add up), non-frozen collections
    /// and UDTs (their cells add up over SSTables).
    pub(crate) fn of(schema: &TableSchema) -> Option<Coverage> {
        use amphora_types::schema::ColumnKind;
        if !schema.clustering_key.is_empty() || schema.is_counter {
            return None;
        }
        let mut newest = smallvec::smallvec![None; schema.columns.len()];
        let mut missing = 0;
        for (id, c) in schema.columns.iter().enumerate() {
            if c.kind != ColumnKind::Regular
                || schema.dropped_columns.contains_key(&(id as ColumnId))
            {
                continue;
            }
            if c.ty.is_multi_cell() {
                return None;
            }
            newest[id] = Some(i64::MIN);
            missing += 1;
        }
        (missing > 0).then_some(Coverage {
            newest,
            missing,
            marker: None,
        })
    }

    /// Adds what an SSTable held for the partition.
    pub(crate) fn add(&mut self, u: &PartitionUpdate) {
        for row in &u.rows {
            if let Some(m) = row.marker {
                self.marker = Some(self.marker.map_or(m.timestamp, |t| t.max(m.timestamp)));
            }
            for (id, d) in &row.cells {
                let (Some(Some(t)), ColumnData::Simple(c)) = (self.newest.get_mut(*id as usize), d)
                else {
                    continue;
                };
                if *t == i64::MIN {
                    self.missing -= 1;
                }
                *t = (*t).max(c.timestamp);
            }
        }
    }

    /// Whether `s` can be left unread (see [`Coverage`]).
    pub(crate) fn covers(&self, s: &SSTableReader) -> bool {
        let st = &s.stats;
        self.missing == 0
            && st.tombstones == 0
            && (!st.has_row_markers || self.marker.is_some_and(|m| m > st.max_timestamp))
            && self.newest.iter().flatten().all(|t| *t > st.max_timestamp)
    }
}

/// [`slice_of`] with at most `cap` rows (the first ones, or the last ones when
/// `from_end`; `cap` at least 1; one slice at most, or every row), and the clustering of
/// the last row taken (the first one in clustering order when `from_end`) when rows within
/// the slice were left out: the update is `u`'s exact content up to and including that
/// clustering (from it on when `from_end`).
pub(crate) fn slice_of_capped(
    u: &PartitionUpdate,
    slices: &[ClusteringSlice],
    cmp: &ClusteringComparator,
    cap: usize,
    from_end: bool,
) -> (PartitionUpdate, Option<Clustering>) {
    let (from, to) = match slices {
        _ if cap == usize::MAX => return (slice_of(u, slices, cmp), None),
        [] => (0, u.rows.len()),
        [s] => slice_run(&u.rows, s, cmp),
        _ => return (slice_of(u, slices, cmp), None),
    };
    let (from, to, cut_at) = if from_end {
        let first = from.max(to.saturating_sub(cap));
        (first, to, (first > from).then_some(first))
    } else {
        let end = to.min(from.saturating_add(cap));
        (from, end, (end < to).then(|| end.wrapping_sub(1)))
    };
    let rows = u.rows.get(from..to).unwrap_or_default().to_vec();
    let cut = cut_at
        .and_then(|i| u.rows.get(i))
        .map(|r| r.clustering.clone());
    (with_rows(u, rows), cut)
}

/// The rows of `u` within `slices` (empty = all), with all of its tombstones and static row.
pub(crate) fn slice_of(
    u: &PartitionUpdate,
    slices: &[ClusteringSlice],
    cmp: &ClusteringComparator,
) -> PartitionUpdate {
    let rows = if slices.is_empty() {
        u.rows.clone()
    } else {
        // Rows are sorted: each slice is a contiguous run found by binary search.
        let mut runs: Vec<(usize, usize)> =
            slices.iter().map(|s| slice_run(&u.rows, s, cmp)).collect();
        runs.sort_unstable();
        let mut rows = Vec::new();
        let mut next = 0;
        for (from, to) in runs {
            if let Some(run) = u.rows.get(from.max(next)..to) {
                rows.extend_from_slice(run);
            }
            next = next.max(to);
        }
        rows
    };
    with_rows(u, rows)
}

/// `rows` with all of `u`'s tombstones and its static row.
fn with_rows(u: &PartitionUpdate, rows: Vec<Row>) -> PartitionUpdate {
    PartitionUpdate {
        partition_deletion: u.partition_deletion,
        static_row: u.static_row.clone(),
        rows,
        range_tombstones: u.range_tombstones.clone(),
    }
}

fn merge_into(schema: &TableSchema, acc: &mut Option<PartitionUpdate>, u: PartitionUpdate) {
    *acc = Some(match acc.take() {
        None => u,
        Some(a) => merge_partition_updates_owned(schema, a, &u),
    });
}

/// Merges the partition's data from the table's SSTables, newest first: an SSTable whose
/// newest data is older than a partition tombstone already found (`floor` starts with the
/// memtables' one, or None) cannot contribute and is not read. `slices`: keep only the
/// rows within them (None = the whole partition). `detach`: decode each partition from a
/// copy of its bytes (values that keep no data chunk alive, for the row cache), with the
/// row cache's partition limit: partitions up to it do not add their chunks to the block
/// cache ([`SSTableReader::get_detached_with`]). `cap`: with `slices`, at most this many
/// rows of each SSTable (the first ones, the last ones when `from_end`); the result then
/// comes with the earliest of the SSTables' cutoffs in that order (the clustering of the
/// last row taken from one that had more). `count`: whether a capped read of one slice
/// may stop every SSTable where their row indexes count `cap` rows in all
/// ([`counted_cutoff`]); left true only when it did.
#[allow(clippy::too_many_arguments)]
fn read_sstables(
    t: &TableSources<'_, impl Iterator>,
    key: &PartitionKey,
    slices: Option<&[ClusteringSlice]>,
    mut floor: Option<DeletionTime>,
    cache: &mut BlockCache,
    sstables_read: &mut u32,
    detach: Option<u64>,
    cap: usize,
    from_end: bool,
    count: &mut bool,
) -> Result<(Option<PartitionUpdate>, Option<Clustering>)> {
    // A capped read of one slice takes the SSTables in the order of their first row in
    // the read's order, and each after the first only up to the earliest cutoff so far:
    // the merge drops every row past it anyway. SSTables of disjoint clustering ranges
    // (the time windows of a time series partition) are then read up to the page's end,
    // or skipped by their bounds, instead of `cap` rows of each.
    let narrowing = match slices {
        Some([one]) if cap != usize::MAX => Some(one),
        _ => None,
    };
    // One SSTable (the common case after compaction) needs no sorted copy of the set.
    let (single, mut sorted);
    let ssts: &[&Arc<SSTableReader>] = match t.sstables {
        [s] => {
            single = [s];
            &single
        }
        _ => {
            sorted = t.sstables.iter().collect::<Vec<_>>();
            match narrowing {
                Some(_) => sorted.sort_by(|a, b| first_in_read_order(t.cmp, a, b, from_end)),
                None => sorted.sort_by_key(|s| std::cmp::Reverse(s.stats.max_timestamp)),
            }
            &sorted
        }
    };
    // Merged all at once at the end (`merge_partition_updates_many`).
    let mut found_in = Vec::new();
    let mut cutoff: Option<Clustering> = None;
    // The index entries `counted_cutoff` looked up (by generation; None: not there).
    let mut looked_up = Vec::new();
    if std::mem::take(count)
        && let Some(one) = narrowing
    {
        cutoff = counted_cutoff(t, key, one, ssts, cap, from_end, cache, &mut looked_up)?;
        *count = cutoff.is_some();
    }
    let mut narrowed;
    // A partition of one row (its slices, if any, hold it whole), from SSTables newest
    // first: the older ones may be left unread ([`Coverage`]).
    let mut coverage = if narrowing.is_none() && ssts.len() > 1 {
        Coverage::of(t.schema)
    } else {
        None
    };
    // The misses of SSTables that would wait for the disk (a no-wait read): the read goes
    // on through the others, so that one wait covers all of them (see `DiskWait`).
    let mut waits: Option<Box<crate::diskwait::DiskWait>> = None;
    for &s in ssts {
        if s.is_quarantined() {
            continue;
        }
        if floor.is_some_and(|d| d.marked_for_delete_at >= s.stats.max_timestamp) {
            // Newest first, the rest are shadowed too; in row order, only this one is.
            if narrowing.is_none() {
                break;
            }
            continue;
        }
        if coverage.as_ref().is_some_and(|c| c.covers(s)) {
            amphora_trace::event(|| {
                format!(
                    "Skipping sstable {}: the newer ones read hold newer data for every column",
                    s.generation
                )
            });
            continue;
        }
        let slices = match (narrowing, &cutoff) {
            (Some(one), Some(c)) => {
                narrowed = [up_to(t.cmp, one, c, from_end)];
                Some(&narrowed[..])
            }
            _ => slices,
        };
        if let Some(slices) = slices.filter(|s| !s.is_empty())
            && !may_hold_rows_in(t, s, slices)
        {
            amphora_trace::event(|| {
                format!(
                    "Skipping sstable {}: its clustering range is outside the query's",
                    s.generation
                )
            });
            continue;
        }
        if !s.may_contain(key) {
            amphora_trace::event(|| {
                format!("Bloom filter allows skipping sstable {}", s.generation)
            });
            continue;
        }
        *sstables_read += 1;
        // Only the rows in the slices are built (the rest stepped over).
        let found = match (|| -> Result<Option<PartitionUpdate>> {
            Ok(match (slices.filter(|s| !s.is_empty()), detach) {
                (Some(slices), detach) => {
                    let rows = RowSlices {
                        cmp: t.cmp,
                        slices,
                        cap,
                        from_end,
                    };
                    let entry = looked_up.iter().find(|(g, _)| *g == s.generation);
                    match entry {
                        Some((_, None)) => None,
                        Some((_, Some(e))) => {
                            Some(s.get_sliced_at(key, *e, Some(&mut *cache), detach, rows)?)
                        }
                        None => s.get_sliced(key, Some(&mut *cache), detach, rows)?,
                    }
                    .map(|(u, cut)| {
                        // The earliest in the read's order.
                        if let Some(c) = cut
                            && cutoff.as_ref().is_none_or(|o| {
                                let ord = t.cmp.compare(&c.0, &o.0);
                                if from_end { ord.is_gt() } else { ord.is_lt() }
                            })
                        {
                            cutoff = Some(c);
                        }
                        u
                    })
                }
                (None, Some(limit)) => s.get_detached_with(key, Some(&mut *cache), limit)?,
                (None, None) => s.get_with(key, Some(&mut *cache))?,
            })
        })() {
            Ok(found) => found,
            Err(StorageError::WouldBlock(w)) => {
                match &mut waits {
                    Some(all) => all.join(*w),
                    None => waits = Some(w),
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        amphora_trace::event(|| {
            format!(
                "Partition index lookup in sstable {}: {}",
                s.generation,
                if found.is_some() { "found" } else { "absent" }
            )
        });
        if let Some(u) = found {
            floor = max_deletion(floor, u.partition_deletion);
            if let Some(c) = &mut coverage {
                c.add(&u);
            }
            found_in.push(u);
        }
    }
    if let Some(w) = waits {
        return Err(StorageError::WouldBlock(w));
    }
    let acc = (!found_in.is_empty()).then(|| merge_partition_updates_many(t.schema, found_in));
    Ok((acc, cutoff))
}

/// Whether `key`'s partition holds more serialized bytes in the SSTables than `limit` (the
/// row cache's partition limit), by their index entries: a row cache miss otherwise reads
/// and decodes it whole, from every SSTable, only for the cache to refuse it (the first page
/// of a 3M-row partition in 11 SSTables took 28-41 s). Looked up only when some SSTable's
/// largest partition could reach `limit` over all of them (their size histograms), so
/// tables of narrow partitions pay nothing. An index that fails to read says no: the read
/// itself then meets and reports it.
fn past_cache_limit(
    t: &TableSources<'_, impl Iterator>,
    key: &PartitionKey,
    limit: u64,
    cache: &mut BlockCache,
) -> bool {
    let share = limit / (t.sstables.len() as u64).max(1);
    if !t.sstables.iter().any(|s| s.max_partition_bytes() > share) {
        return false;
    }
    let mut total = 0u64;
    for s in t.sstables.iter().filter(|s| !s.is_quarantined()) {
        if let Ok(Some(len)) = s.partition_len(key, Some(&mut *cache)) {
            total = total.saturating_add(len);
            if total > limit {
                amphora_trace::event(|| {
                    format!(
                        "Partition of more than {limit} bytes: not read whole for the row cache"
                    )
                });
                return true;
            }
        }
    }
    false
}

/// Where a capped read of `slice` over SSTables that interleave their rows (`ssts`, in
/// the read's order of their first rows) may stop them all: the clustering of the first
/// row index entry, in the read's order, up to which their row indexes count at least
/// `cap` rows of the slice in all. Each SSTable read up to it then gives about its share
/// of `cap` rows instead of `cap` rows of each: narrowing by the earliest cutoff as they
/// are read does that only for SSTables of disjoint ranges. (A page of 5,000 rows over 10
/// SSTables each holding every 10th row of a partition read 50,010 rows.) The rows counted
/// are a lower bound (from the first entry inside the slice on), so an SSTable's rows up to
/// the clustering are at least its count; rows of several SSTables may be versions of the
/// same rows, or shadowed, and then the merge comes short and the read is made again
/// without this. None unless the first two SSTables' clustering ranges overlap (by their
/// statistics) and rows of at least two SSTables' row indexes make up the count; an
/// SSTable's block is read only once the walk reaches its first row. The partition index
/// entries it looked up go to `looked_up` (by generation), for the read to use.
#[allow(clippy::too_many_arguments)]
fn counted_cutoff(
    t: &TableSources<'_, impl Iterator>,
    key: &PartitionKey,
    slice: &ClusteringSlice,
    ssts: &[&Arc<SSTableReader>],
    cap: usize,
    from_end: bool,
    cache: &mut BlockCache,
    looked_up: &mut Vec<(u64, Option<IndexEntry>)>,
) -> Result<Option<Clustering>> {
    let cmp = t.cmp;
    let min_bytes = crate::rowindex::MIN_PARTITION_BYTES as u64;
    let mut candidates = ssts.iter().filter(|s| {
        !s.is_quarantined()
            && s.max_partition_bytes() >= min_bytes
            && may_hold_rows_in(t, s, std::slice::from_ref(slice))
    });
    // Whether `a` comes at or before `b` in the read's order.
    let not_after = |a: &[Bytes], b: &[Bytes]| {
        let ord = cmp.compare(a, b);
        if from_end { ord.is_ge() } else { ord.is_le() }
    };
    // Where an SSTable's rows start and end in the read's order (empty: unknown).
    fn edges(s: &SSTableReader, from_end: bool) -> (&[Bytes], &[Bytes]) {
        let (min, max) = (&s.stats.min_clustering, &s.stats.max_clustering);
        if from_end { (max, min) } else { (min, max) }
    }
    let mut pending = candidates.clone().peekable();
    match (candidates.next(), candidates.next()) {
        (Some(a), Some(b)) => {
            let (end, start) = (edges(a, from_end).1, edges(b, from_end).0);
            if !(end.is_empty() || start.is_empty() || not_after(start, end)) {
                return Ok(None);
            }
        }
        _ => return Ok(None),
    }
    let mut walks: Vec<crate::rowindex::MarkWalk<'_>> = Vec::new();
    let cap = cap as u64;
    loop {
        // The walk whose next entry comes first in the read's order.
        let mut next: Option<(usize, &Clustering)> = None;
        for (j, w) in walks.iter().enumerate() {
            if let Some(c) = w.peek()
                && next.is_none_or(|(_, n)| !not_after(&n.0, &c.0))
            {
                next = Some((j, c));
            }
        }
        // An SSTable whose rows start at or before it is walked too.
        if let Some(s) = pending.peek()
            && next.is_none_or(|(_, c)| {
                let f = edges(s, from_end).0;
                f.is_empty() || not_after(f, &c.0)
            })
        {
            let found = s.row_marks(key, Some(&mut *cache))?;
            looked_up.push((s.generation, found.as_ref().map(|(e, _)| *e)));
            if let Some((_, Some(marks))) = found
                && let Some(w) = marks.walk(cmp, slice, from_end)?
            {
                walks.push(w);
            }
            pending.next();
            continue;
        }
        let Some((j, c)) = next else {
            return Ok(None);
        };
        let c = c.clone();
        let Some(w) = walks.get_mut(j) else {
            return Ok(None);
        };
        w.advance(cmp, slice)?;
        if walks.iter().map(|w| w.counted()).sum::<u64>() >= cap {
            let counting = walks.iter().filter(|w| w.counted() > 0).count();
            amphora_trace::event(|| {
                format!("Row indexes of {counting} sstables count {cap} rows up to a clustering")
            });
            return Ok((counting >= 2).then_some(c));
        }
    }
}

/// Orders SSTables by where their rows start in a read's order (their smallest
/// clustering, or their largest when reading from the end); those with unknown bounds
/// first.
fn first_in_read_order(
    cmp: &ClusteringComparator,
    a: &SSTableReader,
    b: &SSTableReader,
    from_end: bool,
) -> std::cmp::Ordering {
    let (x, y) = if from_end {
        (&a.stats.max_clustering, &b.stats.max_clustering)
    } else {
        (&a.stats.min_clustering, &b.stats.min_clustering)
    };
    match (x.is_empty(), y.is_empty()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        (false, false) if from_end => cmp.compare(y, x),
        (false, false) => cmp.compare(x, y),
    }
}

/// `slice` ending at clustering `c` inclusive in a read's order (starting there when
/// reading from the end), when `c` is inside it.
fn up_to(
    cmp: &ClusteringComparator,
    slice: &ClusteringSlice,
    c: &Clustering,
    from_end: bool,
) -> ClusteringSlice {
    let mut s = slice.clone();
    if from_end {
        if cmp.after_start(c, &s.start) {
            s.start = ClusteringBound::inclusive(c.0.clone());
        }
    } else if cmp.before_end(c, &s.end) {
        s.end = ClusteringBound::inclusive(c.0.clone());
    }
    s
}

/// The clustering slices an SSTable read must cover for `cmd` when what it reads is not
/// cached: the read's own, or for a read resuming inside partition `key` (the next page)
/// with at most one slice, only the rows after the last one returned (before it when
/// reversed), as the capped merge narrows them; the rows before are dropped by the merge
/// anyway. A wide partition read from an SSTable page by page then builds each page's
/// rows, not every row up to it. A read of every row asks for the whole clustering range
/// (so that a limit caps it and a row index serves it).
fn sstable_slices<'c>(
    cmp: &ClusteringComparator,
    key: &PartitionKey,
    cmd: &'c ReadCommand,
) -> Cow<'c, [ClusteringSlice]> {
    match &cmd.start_after {
        Some((k, Some(after))) if k == key && cmd.slices.len() <= 1 => {
            Cow::Owned(vec![resumed_slice(cmp, cmd, after)])
        }
        _ if cmd.slices.is_empty() => Cow::Owned(vec![ClusteringSlice::all()]),
        _ => Cow::Borrowed(&cmd.slices),
    }
}

/// `cmd`'s first slice (or all) narrowed to the rows after `after`, the last row a page
/// returned (before it when reversed): where the next page starts.
fn resumed_slice(
    cmp: &ClusteringComparator,
    cmd: &ReadCommand,
    after: &Clustering,
) -> ClusteringSlice {
    let mut s = cmd
        .slices
        .first()
        .cloned()
        .unwrap_or_else(ClusteringSlice::all);
    if cmd.reversed {
        if cmp.before_end(after, &s.end) {
            s.end = ClusteringBound::exclusive(after.0.clone());
        }
    } else if cmp.after_start(after, &s.start) {
        s.start = ClusteringBound::exclusive(after.0.clone());
    }
    s
}

/// Whether an SSTable can contribute to a read of `slices` of some partition, judged by
/// its clustering bounds (Statistics.db min/max clustering over all its rows): always when
/// it holds any tombstone (a partition, range or row deletion applies beyond its own rows'
/// bounds), when the table has static columns (the static row is outside the clustering
/// order) or when its bounds are unknown; otherwise only when some slice overlaps
/// [min, max].
fn may_hold_rows_in(
    t: &TableSources<'_, impl Iterator>,
    s: &SSTableReader,
    slices: &[ClusteringSlice],
) -> bool {
    let st = &s.stats;
    if st.tombstones > 0
        || t.schema.has_statics()
        || st.min_clustering.is_empty()
        || st.max_clustering.is_empty()
    {
        return true;
    }
    slices.iter().any(|sl| {
        t.cmp
            .compare_to_position(&st.max_clustering, sl.start.start_position())
            .is_gt()
            && t.cmp
                .compare_to_position(&st.min_clustering, sl.end.end_position())
                .is_lt()
    })
}

/// A single-partition read: the memtables merged with the partition's SSTable-side
/// content, taken from the row cache, or read from the SSTables (and then cached).
/// A table without SSTables does not use the cache.
/// `fill`: a miss may add the partition to the row cache (false for a scan's wide
/// partitions, which would evict what point reads use).
pub(crate) fn read_single<'a>(
    mut t: TableSources<'a, impl Iterator<Item = &'a Memtable>>,
    key: &PartitionKey,
    cmd: &ReadCommand,
    block_cache: &mut BlockCache,
    row_cache: &mut RowCache,
    fill: bool,
) -> Result<ReadResult> {
    // The memtables holding the partition, newest first (rarely more than two: the active
    // one and one being flushed).
    let mut held: smallvec::SmallVec<[(&Memtable, &MemPartition); 2]> = smallvec::SmallVec::new();
    let mut memtables = 0;
    for m in t.memtables.by_ref() {
        memtables += 1;
        if let Some(p) = m.partitions.get(key) {
            held.push((m, p));
        }
    }
    amphora_trace::event(|| {
        format!(
            "Merging memtable contents ({} of {memtables} memtables hold the partition)",
            held.len()
        )
    });
    let mut sstables_read = 0;
    // The SSTable side: the partition's row cache entry, or (without the cache) what the
    // SSTables hold within the slices.
    let mut cached = None;
    let mem_deletion = || {
        held.iter()
            .fold(None, |d, (_, p)| max_deletion(d, p.deletion()))
    };
    let wanted = sstable_slices(t.cmp, key, cmd);
    // Reads of the SSTables' slices (not through the row cache) with a limit take only the
    // first rows of each SSTable in the read's order (with a row index, they read only
    // those): enough when the merge's limit ends before the earliest SSTable's cutoff.
    let sst_cap = row_cap(cmd);
    // The SSTables' rows within `wanted`, read as without the row cache (`detach`: the
    // cache's partition limit when it is on).
    let read_uncached = |block_cache: &mut BlockCache,
                         sstables_read: &mut u32,
                         detach: Option<u64>,
                         cap: usize,
                         from_end: bool,
                         count: &mut bool| {
        read_sstables(
            &t,
            key,
            Some(&wanted),
            mem_deletion(),
            block_cache,
            sstables_read,
            detach,
            cap,
            from_end,
            count,
        )
    };
    // Set when the SSTables are read without the row cache: with which detach limit.
    let mut uncached: Option<Option<u64>> = None;
    if !row_cache.enabled() || t.sstables.is_empty() {
        uncached = Some(None);
    } else {
        let hit = match row_cache.get(t.table, key) {
            Some(entry) => {
                amphora_trace::event(|| "Row cache hit".to_string());
                // Decided on the borrowed entry: its reference count (a locked add, which
                // waits for every load before it) is touched only once all of the fields
                // the read needs are on their way.
                if held.is_empty()
                    && let Some(r) = read_cached(t.cmp, entry, key, cmd, sstables_read)
                {
                    return Ok(r);
                }
                Some(entry.clone())
            }
            None => None,
        };
        match hit {
            Some(entry) => cached = Some(entry),
            None if !fill
                || row_cache.known_too_big(t.table, key)
                || !row_cache.admits(t.table, key)
                || {
                    // Remembered, so later reads do not look at the index entries again.
                    let big = past_cache_limit(&t, key, row_cache.partition_max(), block_cache);
                    if big {
                        row_cache.note_too_big(t.table, key);
                    }
                    big
                } =>
            {
                amphora_trace::event(|| {
                    "Row cache miss, not cached: over the size limit, or asked for less often than the entry it would evict"
                        .to_string()
                });
                // Read as without the cache (only the slices), from copies of the bytes
                // (detached) so its chunks do not fill the block cache either, unless the
                // partition is over the cache's size limit: then it is read again next
                // time, and its chunks are cached.
                uncached = Some(Some(row_cache.partition_max()));
            }
            None => {
                amphora_trace::event(|| "Row cache miss".to_string());
                // Detached: every value is a slice of a copy of its partition's bytes, so
                // what this read returns pins no block cache chunk (the cache entry copies
                // again: into its encoding, or into one buffer of its own when decoded).
                let limit = Some(row_cache.partition_max());
                let mut full = read_sstables(
                    &t,
                    key,
                    None,
                    None,
                    block_cache,
                    &mut sstables_read,
                    limit,
                    usize::MAX,
                    false,
                    &mut false,
                )?
                .0
                .unwrap_or_default();
                // One SSTable with nothing shadowed is canonical already.
                if sstables_read > 1 || has_deletions(&full) {
                    apply_own_deletions(t.schema, &mut full);
                }
                let entry = row_cache.insert(t.table, key, full).0;
                if held.is_empty()
                    && let Some(r) = read_cached(t.cmp, &entry, key, cmd, sstables_read)
                {
                    return Ok(r);
                }
                cached = Some(entry);
            }
        }
    }
    let sources = Sources {
        schema: t.schema,
        cmp: t.cmp,
        held: &held,
        cached: cached.as_deref(),
    };
    if let Some(detach) = uncached {
        // The SSTables' first rows: exact when the limit ends the merge before their
        // cutoff; otherwise they are read again with a cap `CAP_GROWTH` times larger (the
        // rows read held more shadowed or dead rows than the limit's margin of one:
        // deletions, expired TTLs), until the SSTables hold no more than the cap. SSTable
        // rows that were not cut (no cutoff) serve the uncapped merge as they are: then
        // only a memtable's cutoff can have made the capped one fail, which takes a
        // memtable partition with at least `cap` rows (only then are they kept aside).
        // The first try may stop the SSTables where their row indexes count `cap` rows in
        // all (`counted_cutoff`); if that falls short, the same cap is read again without.
        let mut cap = sst_cap;
        let mut count = true;
        loop {
            let (from_sstables, sst_cut) = read_uncached(
                block_cache,
                &mut sstables_read,
                detach,
                cap,
                cmd.reversed,
                &mut count,
            )?;
            if cap == usize::MAX {
                let r = sources.merge(key, cmd, cap, from_sstables, None, sstables_read)?;
                return Ok(r.unwrap_or_default());
            }
            let mem_may_cut = held
                .iter()
                .any(|(_, p)| matches!(p, MemPartition::General(g) if g.rows.len() >= cap));
            let whole = (sst_cut.is_none() && mem_may_cut).then(|| from_sstables.clone());
            if let Some(r) = sources.merge(key, cmd, cap, from_sstables, sst_cut, sstables_read)? {
                return Ok(r);
            }
            if let Some(w) = whole {
                let r = sources.merge(key, cmd, usize::MAX, w, None, sstables_read)?;
                return Ok(r.unwrap_or_default());
            }
            if !std::mem::take(&mut count) {
                cap = cap.saturating_mul(CAP_GROWTH);
            }
            sstables_read = 0;
        }
    }
    // The cached entry and memtables: their first rows, more of them while that falls
    // short, as above.
    let mut cap = row_cap(cmd);
    while cap != usize::MAX {
        if let Some(r) = sources.merge(key, cmd, cap, None, None, sstables_read)? {
            return Ok(r);
        }
        cap = cap.saturating_mul(CAP_GROWTH);
    }
    let r = sources.merge(key, cmd, usize::MAX, None, None, sstables_read)?;
    Ok(r.unwrap_or_default())
}

/// How many times more rows per source a capped single-partition read merges when its
/// merge came short of its limit (see [`row_cap`]). Reading the rest of the partition
/// instead (the former way) made each page of a wide partition with many deletions or
/// expired rows read the partition from the page to its end: paging through 3M rows of
/// which half were deleted took 2.2 s a page. Doubling reads at most four times the rows
/// the page needs in all its tries (8 took up to nine times: 1.8x slower, measured).
const CAP_GROWTH: usize = 2;

/// How many rows a single-partition read merges from each of its sources: one more than
/// it can return (enough to know whether more follow), for a read with a row or
/// per-partition limit and at most one slice; otherwise all (`usize::MAX`). A reversed
/// read takes each source's last rows.
fn row_cap(cmd: &ReadCommand) -> usize {
    if cmd.slices.len() > 1 {
        return usize::MAX;
    }
    let l = limit(cmd.row_limit).min(limit(cmd.per_partition_limit));
    usize::try_from(l.saturating_add(1)).unwrap_or(usize::MAX)
}

/// A single-partition read's sources once found: the memtables holding the partition
/// (newest first) and its row cache entry.
struct Sources<'a> {
    schema: &'a TableSchema,
    cmp: &'a ClusteringComparator,
    held: &'a [(&'a Memtable, &'a MemPartition)],
    cached: Option<&'a CachedPartition>,
}

impl Sources<'_> {
    /// Merges at most `cap` rows of each source (within the read's slice, the first ones
    /// in the read's order: the last in clustering order for a reversed read; every
    /// tombstone and static row whole) with `from_sstables`, and builds the read's result.
    /// A source with more rows than `cap` makes the merge exact only up to its last row
    /// taken in the read's order (the cutoff): rows past the earliest cutoff are dropped,
    /// and the result stands only if a limit ended it before those rows ran out (the full
    /// merge would have stopped at the same row). Otherwise None: read with no cap.
    /// `from_sstables` was read with the same cap when `sst_cut` is its cutoff.
    fn merge(
        &self,
        key: &PartitionKey,
        cmd: &ReadCommand,
        cap: usize,
        from_sstables: Option<PartitionUpdate>,
        sst_cut: Option<Clustering>,
        sstables_read: u32,
    ) -> Result<Option<ReadResult>> {
        let (schema, cmp) = (self.schema, self.cmp);
        // A capped read resuming inside the partition (the next page of it) copies from
        // the row after the last one returned: its slice starts there.
        // (In reverse order it ends before that row.)
        let resumed;
        let slices: &[ClusteringSlice] = match &cmd.start_after {
            Some((k, Some(after))) if k == key && cap != usize::MAX => {
                resumed = [resumed_slice(cmp, cmd, after)];
                &resumed
            }
            _ => &cmd.slices,
        };
        let from_end = cmd.reversed;
        let mut acc = None;
        // The earliest cutoff in the read's order: the lowest clustering, or the highest
        // when reading from the end.
        let mut cutoff: Option<Clustering> = None;
        let mut lower = |cut: Option<Clustering>| {
            if let Some(c) = cut
                && cutoff.as_ref().is_none_or(|o| {
                    let ord = cmp.compare(&c.0, &o.0);
                    if from_end { ord.is_gt() } else { ord.is_lt() }
                })
            {
                cutoff = Some(c);
            }
        };
        for (m, p) in self.held {
            let (u, cut) = m.to_update_capped(p, slices, cap, from_end);
            lower(cut);
            merge_into(schema, &mut acc, u);
        }
        // False while `acc` may still hold data its own tombstones shadow.
        let mut canonical = false;
        if let Some(entry) = self.cached {
            let data = entry
                .data()
                .map_err(|e| StorageError::corrupt("row cache", e.offset as u64, e.reason))?;
            let (part, cut) = slice_of_capped(&data, slices, cmp, cap, from_end);
            lower(cut);
            if !part.is_empty() {
                // Entries are canonical, and so is what merging produces.
                canonical = true;
                merge_into(schema, &mut acc, part);
            }
        }
        lower(sst_cut);
        if let Some(u) = from_sstables {
            merge_into(schema, &mut acc, u);
        }
        let Some(c) = cutoff else {
            return Ok(Some(result_of(
                schema,
                key,
                acc,
                canonical,
                cmd,
                sstables_read,
            )));
        };
        let mut merged = acc.unwrap_or_default();
        if from_end {
            let skip = merged
                .rows
                .partition_point(|r| cmp.compare(&r.clustering.0, &c.0).is_lt());
            merged.rows.drain(..skip);
        } else {
            let keep = merged
                .rows
                .partition_point(|r| cmp.compare(&r.clustering.0, &c.0).is_le());
            merged.rows.truncate(keep);
        }
        let r = result_of(schema, key, Some(merged), canonical, cmd, sstables_read);
        let rows = r.partitions.first().map_or(0, |p| p.rows.len());
        let limited = !r.exhausted || rows as u64 >= limit(cmd.per_partition_limit);
        Ok(limited.then_some(r))
    }
}

/// Whether a partition holds deletions that may shadow some of its own data (a partition
/// deletion, range tombstones, row or collection deletions), or empty rows: what
/// `apply_own_deletions` may change.
fn has_deletions(u: &PartitionUpdate) -> bool {
    let row = |r: &Row| {
        r.deletion.is_some()
            || r.is_empty()
            || r.cells.iter().any(|(_, d)| {
                matches!(
                    d,
                    ColumnData::Complex {
                        deletion: Some(_),
                        ..
                    }
                )
            })
    };
    u.partition_deletion.is_some()
        || !u.range_tombstones.is_empty()
        || u.static_row.as_ref().is_some_and(row)
        || u.rows.iter().any(row)
}

/// The live result of a single-partition read from the partition's merged data
/// (`canonical`: its own deletions are already applied).
fn result_of(
    schema: &TableSchema,
    key: &PartitionKey,
    acc: Option<PartitionUpdate>,
    canonical: bool,
    cmd: &ReadCommand,
    sstables_read: u32,
) -> ReadResult {
    let mut result = ReadResult {
        sstables_read,
        exhausted: true,
        ..Default::default()
    };
    let Some(mut merged) = acc else {
        return result;
    };
    if !canonical {
        // A single source was never merged: apply its internal shadowing too.
        apply_own_deletions(schema, &mut merged);
    }
    let after = match &cmd.start_after {
        Some((k, c)) if k == key => match c {
            Some(c) => Some(c),
            None => return result,
        },
        _ => None,
    };
    let mut remaining = limit(cmd.row_limit);
    let start_remaining = remaining;
    let (data, cut) = live_partition(schema, key.clone(), merged, cmd, after, &mut remaining);
    result.rows_counted = start_remaining - remaining;
    if let Some(d) = data {
        result.partitions.push(d);
    }
    result.exhausted = !cut;
    result
}

/// A read answered by a row cache entry alone (no memtable holds the partition) whose rows
/// are already their live view: one run of them, shared with the cache (no copy of rows,
/// cells or values), or in reverse order a copy of just the rows returned. None if the read
/// needs more (a column filter, rows not in their live form at `now`, disjoint slices): it
/// is read the general way.
fn read_cached(
    cmp: &ClusteringComparator,
    entry: &Arc<CachedPartition>,
    key: &PartitionKey,
    cmd: &ReadCommand,
    sstables_read: u32,
) -> Option<ReadResult> {
    if cmd.columns.is_some() || !entry.rows_live_at(cmd.now_seconds) {
        return None;
    }
    let mut result = ReadResult {
        sstables_read,
        exhausted: true,
        ..Default::default()
    };
    // An entry that does not decode is reported by the general path.
    let data = entry.data().ok()?;
    let u = &*data;
    let after = match &cmd.start_after {
        Some((k, c)) if k == key => match c {
            Some(c) => Some(c),
            None => return Some(result),
        },
        _ => None,
    };
    let mut remaining = limit(cmd.row_limit);
    let per_part = limit(cmd.per_partition_limit);
    // Resuming moves the run's start (its end when reversed): its end is then searched in
    // full, as is a reversed read's.
    let cap = match after {
        None if !cmd.reversed => remaining.min(per_part),
        _ => u64::MAX,
    };
    let (mut from, mut to) = one_run(&u.rows, &cmd.slices, cmp, cap)?;
    if let Some(a) = after {
        if cmd.reversed {
            to = to.min(
                u.rows
                    .partition_point(|r| cmp.compare(&r.clustering.0, &a.0).is_lt()),
            );
        } else {
            from = from.max(
                u.rows
                    .partition_point(|r| cmp.compare(&r.clustering.0, &a.0).is_le()),
            );
        }
    }
    let n = to.saturating_sub(from);
    let take = (n as u64).min(per_part).min(remaining);
    // As `live_partition`: the row limit cuts the read, the per-partition limit does not.
    let cut = take < n as u64 && take < per_part;
    let static_row = u
        .static_row
        .as_ref()
        .and_then(|r| live_row(r, None, cmd.now_seconds, true));
    if take == 0 {
        // A partition with only static data counts as one row (not when resuming inside it).
        match static_row {
            Some(s) if after.is_none() && !has_clustering_restriction(cmd) => {
                if remaining == 0 {
                    result.exhausted = false;
                    return Some(result);
                }
                remaining -= 1;
                result.partitions.push(PartitionData {
                    key: key.clone(),
                    partition_deletion: u.partition_deletion,
                    static_row: Some(s),
                    rows: Rows::new(),
                });
            }
            _ => {}
        }
        result.rows_counted = limit(cmd.row_limit) - remaining;
        result.exhausted = !cut;
        return Some(result);
    }
    let partition_deletion = u.partition_deletion;
    let rows = if cmd.reversed {
        // The run's last rows, last first: a copy (a shared run is in clustering order).
        let range = to - take as usize..to;
        let mut rows: Vec<Row> = match data {
            Cow::Borrowed(u) => u.rows.get(range)?.to_vec(),
            Cow::Owned(mut u) => u.rows.drain(range).collect(),
        };
        rows.reverse();
        Rows::from(rows)
    } else {
        let range = from..from + take as usize;
        match data {
            Cow::Borrowed(_) => Rows::shared(entry, range)?,
            Cow::Owned(mut u) => {
                u.rows.truncate(range.end);
                u.rows.drain(..range.start);
                Rows::from(u.rows)
            }
        }
    };
    result.rows_counted = take;
    result.exhausted = !cut;
    // Allocated at its size (a push would grow an empty vector).
    result.partitions = vec![PartitionData {
        key: key.clone(),
        partition_deletion,
        static_row,
        rows,
    }];
    Some(result)
}

/// Up to this many rows the end of a single slice's run is found by stepping through
/// them rather than by binary search: a read with a small limit touches only rows it
/// returns (each comparison follows pointers to a row's clustering values: cache misses
/// in a large cached partition).
const SCAN_ROWS_MAX: u64 = 32;

/// The rows of `rows` within `slices` (empty = all) as one run `from..to`; None if they
/// form several disjoint runs. A run of a single slice may be cut after `cap + 1` rows
/// (enough for a read taking at most `cap` to know that more follow).
fn one_run(
    rows: &[Row],
    slices: &[ClusteringSlice],
    cmp: &ClusteringComparator,
    cap: u64,
) -> Option<(usize, usize)> {
    if let [s] = slices
        && cap < SCAN_ROWS_MAX
    {
        let from = slice_start(rows, s, cmp);
        let len = rows
            .get(from..)
            .unwrap_or_default()
            .iter()
            .take(cap as usize + 1)
            .take_while(|r| cmp.before_end(&r.clustering, &s.end))
            .count();
        return Some((from, from + len));
    }
    let mut run: Option<(usize, usize)> = None;
    if slices.is_empty() {
        return Some((0, rows.len()));
    }
    for s in slices {
        let (from, to) = slice_run(rows, s, cmp);
        if to == from {
            continue;
        }
        run = match run {
            None => Some((from, to)),
            // Overlapping or touching runs join; a gap ends the fast path.
            Some((a, b)) if from <= b && a <= to => Some((a.min(from), b.max(to))),
            Some(_) => return None,
        };
    }
    Some(run.unwrap_or((0, 0)))
}

/// Where a slice's rows start in sorted `rows` (no search when it starts at the bottom).
fn slice_start(rows: &[Row], s: &ClusteringSlice, cmp: &ClusteringComparator) -> usize {
    if s.start.prefix.0.is_empty() {
        return 0;
    }
    rows.partition_point(|r| !cmp.after_start(&r.clustering, &s.start))
}

/// The run `from..to` of sorted `rows` within a slice (binary searches; none for an end
/// at the bottom or the top).
fn slice_run(rows: &[Row], s: &ClusteringSlice, cmp: &ClusteringComparator) -> (usize, usize) {
    let from = slice_start(rows, s, cmp);
    let rest = rows.get(from..).unwrap_or_default();
    let len = if s.end.prefix.0.is_empty() {
        rest.len()
    } else {
        rest.partition_point(|r| cmp.before_end(&r.clustering, &s.end))
    };
    (from, from + len)
}

fn has_clustering_restriction(cmd: &ReadCommand) -> bool {
    !cmd.slices.is_empty() && !cmd.slices.iter().all(|s| *s == ClusteringSlice::all())
}

/// Whether `k` is within a token-range bound pair.
pub(crate) fn in_range(
    k: &PartitionKey,
    start: &Bound<(i64, Option<Bytes>)>,
    end: &Bound<(i64, Option<Bytes>)>,
) -> bool {
    let after_start = match start {
        Bound::Unbounded => true,
        Bound::Included((t, None)) => k.token >= *t,
        Bound::Excluded((t, None)) => k.token > *t,
        Bound::Included((t, Some(key))) => (k.token, &k.key) >= (*t, key),
        Bound::Excluded((t, Some(key))) => (k.token, &k.key) > (*t, key),
    };
    let before_end = match end {
        Bound::Unbounded => true,
        Bound::Included((t, None)) => k.token <= *t,
        Bound::Excluded((t, None)) => k.token < *t,
        Bound::Included((t, Some(key))) => (k.token, &k.key) <= (*t, key),
        Bound::Excluded((t, Some(key))) => (k.token, &k.key) < (*t, key),
    };
    after_start && before_end
}

#[cfg(test)]
mod tests {
    use super::*;
    use amphora_types::data::{Cell, LivenessInfo, LocalTime, RangeTombstone};

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    /// Rows mixing live, expired and deleted cells, complex columns, markers.
    fn rows() -> Vec<Row> {
        let now = 1000;
        let live = |ts| ColumnData::Simple(Cell::live(ts, b("v")));
        let expired = ColumnData::Simple(Cell::expiring(5, 10, now - 100, b("x")));
        let dead = ColumnData::Simple(Cell::tombstone(6, now - 1));
        let complex = |cells: Vec<Cell>| ColumnData::Complex {
            deletion: Some(DeletionTime {
                marked_for_delete_at: 1,
                local_deletion_time: (now - 5).into(),
            }),
            cells: cells
                .into_iter()
                .enumerate()
                .map(|(i, c)| (Bytes::from(vec![i as u8]), c))
                .collect(),
        };
        let row = |marker: Option<LivenessInfo>, cells: Vec<(ColumnId, ColumnData)>| Row {
            clustering: Clustering(vec![b("c")]),
            marker,
            deletion: None,
            cells,
        };
        vec![
            row(
                Some(LivenessInfo::new(1)),
                vec![(1, live(2)), (2, expired.clone())],
            ),
            row(None, vec![(1, expired.clone()), (2, dead.clone())]),
            row(
                Some(LivenessInfo::expiring(1, 10, now - 100)),
                vec![(3, live(3))],
            ),
            row(None, vec![(2, dead), (3, expired.clone())]),
            row(
                None,
                vec![
                    (1, live(4)),
                    (
                        4,
                        complex(vec![
                            Cell::live(7, b("a")),
                            Cell::expiring(5, 10, now - 100, b("b")),
                        ]),
                    ),
                ],
            ),
            row(None, vec![(4, complex(vec![Cell::tombstone(8, now - 1)]))]),
            row(Some(LivenessInfo::new(1)), vec![]),
        ]
    }

    #[test]
    fn owned_live_row_matches_live_row() {
        let now = 1000;
        let filters: [Option<&[ColumnId]>; 4] = [None, Some(&[1]), Some(&[3, 4]), Some(&[])];
        let mut live = 0;
        for r in rows() {
            for cols in filters {
                for is_static in [false, true] {
                    let want = live_row(&r, cols, now, is_static);
                    live += usize::from(want.is_some());
                    assert_eq!(
                        into_live_row(r.clone(), cols, now, is_static),
                        want,
                        "{r:?} {cols:?} {is_static}"
                    );
                }
            }
        }
        // Both outcomes are exercised.
        assert!(live > 0 && live < rows().len() * 8, "{live}");
    }

    /// A small xorshift generator: the seed is printed on failure.
    struct Rng(u64);
    impl Rng {
        /// Seeded from the clock; the seed is returned for failure messages.
        fn from_clock() -> (Rng, u64) {
            let seed = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1;
            (Rng(seed), seed)
        }
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    fn clustered() -> TableSchema {
        use amphora_types::CqlType;
        use amphora_types::schema::{ClusteringOrder, ColumnDef, ColumnKind, TableOptions};
        let cd = |n: &str, ty, kind| ColumnDef {
            name: n.into(),
            ty,
            kind,
            position: 0,
            order: ClusteringOrder::Asc,
        };
        TableSchema::new(
            TableId(7),
            "ks",
            "t",
            vec![
                cd("k", CqlType::Blob, ColumnKind::PartitionKey),
                cd("c", CqlType::Int, ColumnKind::Clustering),
                cd("s", CqlType::Blob, ColumnKind::Static),
                cd("v", CqlType::Blob, ColumnKind::Regular),
                cd("w", CqlType::Blob, ColumnKind::Regular),
            ],
            TableOptions::default(),
        )
    }

    fn ck(x: u64) -> Clustering {
        Clustering(vec![Bytes::copy_from_slice(&(x as i32).to_be_bytes())])
    }

    /// A canonical row: cells live, expiring around `now`, or tombstones, sometimes a
    /// collection, sometimes a row deletion.
    fn random_row(rng: &mut Rng, clustering: Clustering, now: i32) -> Row {
        let cell = |rng: &mut Rng| match rng.below(10) {
            0 => Cell::tombstone(5, now - 3),
            1 | 2 => Cell::expiring(5, 10, now - 12 + rng.below(5) as i32, b("e")),
            _ => Cell::live(5, b("v")),
        };
        let mut cells = Vec::new();
        for id in [2, 3, 4] {
            match rng.below(6) {
                0 => {}
                1 => cells.push((
                    id,
                    ColumnData::Complex {
                        deletion: rng.chance(20).then_some(DeletionTime {
                            marked_for_delete_at: 1,
                            local_deletion_time: (now - 9).into(),
                        }),
                        cells: (0..rng.below(3))
                            .map(|i| (Bytes::from(vec![i as u8]), cell(rng)))
                            .collect(),
                    },
                )),
                _ => cells.push((id, ColumnData::Simple(cell(rng)))),
            }
        }
        Row {
            clustering,
            marker: match rng.below(4) {
                0 => None,
                1 => Some(LivenessInfo::expiring(
                    5,
                    10,
                    now - 2 + rng.below(5) as i32 - 10,
                )),
                _ => Some(LivenessInfo::new(5)),
            },
            deletion: rng.chance(5).then_some(DeletionTime {
                marked_for_delete_at: 2,
                local_deletion_time: (now - 9).into(),
            }),
            cells,
        }
    }

    fn random_bound(rng: &mut Rng, width: u64) -> ClusteringBound {
        match rng.below(3) {
            0 => ClusteringBound::unbounded(),
            1 => ClusteringBound::inclusive(ck(rng.below(width)).0),
            _ => ClusteringBound::exclusive(ck(rng.below(width)).0),
        }
    }

    /// A random read of clusterings among 0..`width`.
    fn random_command(rng: &mut Rng, key: &PartitionKey, now: i32, width: u64) -> ReadCommand {
        let mut cmd = ReadCommand::new(TableId(7), PartitionRange::Single(key.clone()), now);
        let mut starts: Vec<u64> = (0..rng.below(3)).map(|_| rng.below(width)).collect();
        starts.sort_unstable();
        starts.dedup();
        for (i, from) in starts.iter().enumerate() {
            let to = match starts.get(i + 1) {
                Some(next) => from + rng.below(next - from + 1),
                None => from + rng.below(4),
            };
            let mut s = ClusteringSlice {
                start: ClusteringBound::inclusive(ck(*from).0),
                end: ClusteringBound::inclusive(ck(to).0),
            };
            if rng.chance(30) {
                s.start = random_bound(rng, width);
            }
            if rng.chance(30) {
                s.end.inclusive = false;
            }
            // Open at the bottom or the top (as `time >= x` on a DESC column is).
            if rng.chance(15) {
                s.start.prefix = Clustering::empty();
            }
            if rng.chance(15) {
                s.end.prefix = Clustering::empty();
            }
            cmd.slices.push(s);
        }
        if rng.chance(10) {
            cmd.slices = vec![ClusteringSlice::all()];
        }
        cmd.columns = rng.chance(10).then(|| vec![3]);
        cmd.reversed = rng.chance(10);
        cmd.row_limit = [0, 0, 1, 2, 3, u32::MAX][rng.below(6) as usize];
        cmd.per_partition_limit = [0, 0, 1, 2][rng.below(4) as usize];
        cmd.start_after = match rng.below(6) {
            0 => Some((key.clone(), None)),
            1 | 2 => Some((key.clone(), Some(ck(rng.below(width))))),
            3 => Some((PartitionKey::new(b("other")), Some(ck(3)))),
            _ => None,
        };
        cmd
    }

    /// Reads served from a row cache entry's shared rows give exactly what the general
    /// path (copy, slice, live view, limits) gives for the same entry, and the shared path
    /// is taken whenever it may be.
    #[test]
    fn shared_cache_reads_match_the_general_path() {
        let schema = clustered();
        let cmp = schema.clustering_comparator();
        let key = PartitionKey::new(b("k"));
        let (mut rng, seed) = Rng::from_clock();
        let (mut shared, mut fallback) = (0, 0);
        for case in 0..20_000 {
            let now = 1000;
            let plain = rng.chance(60);
            let mut u = PartitionUpdate::default();
            for c in 0..12 {
                if rng.chance(50) {
                    let mut r = random_row(&mut rng, ck(c), now);
                    if plain {
                        // Only what shared reads may serve: live or expiring cells.
                        r.deletion = None;
                        r.cells.retain(|(_, d)| match d {
                            ColumnData::Simple(c) => !c.is_tombstone,
                            ColumnData::Complex { .. } => false,
                        });
                        if r.cells.is_empty() && r.marker.is_none() {
                            r.marker = Some(LivenessInfo::new(1));
                        }
                    }
                    u.rows.push(r);
                }
            }
            if rng.chance(20) {
                u.static_row = Some(random_row(&mut rng, Clustering::empty(), now));
            }
            if rng.chance(10) {
                u.partition_deletion = Some(DeletionTime {
                    marked_for_delete_at: 1,
                    local_deletion_time: (now - 50).into(),
                });
            }
            // Held decoded (shared rows) or encoded (decoded per read), as the cache may.
            let entry = Arc::new(if rng.chance(50) {
                CachedPartition::new(u.clone())
            } else {
                CachedPartition::new_encoded(u.clone())
            });
            let read_now = now - 3 + rng.below(6) as i32;
            let cmd = random_command(&mut rng, &key, read_now, 12);
            let want = result_of(
                &schema,
                &key,
                Some(slice_of(&u, &cmd.slices, &cmp)),
                true,
                &cmd,
                1,
            );
            match read_cached(&cmp, &entry, &key, &cmd, 1) {
                Some(got) => {
                    shared += 1;
                    assert_eq!(got, want, "seed {seed} case {case}: {cmd:?}\n{u:?}");
                }
                None => fallback += 1,
            }
            // Every read the shared path may serve, it serves.
            let may = cmd.columns.is_none()
                && entry.rows_live_at(cmd.now_seconds)
                && (one_run(&u.rows, &cmd.slices, &cmp, u64::MAX).is_some()
                    || cmd.start_after == Some((key.clone(), None)));
            assert_eq!(
                may,
                read_cached(&cmp, &entry, &key, &cmd, 1).is_some(),
                "seed {seed} case {case}"
            );
        }
        assert!(shared > 2_000 && fallback > 2_000, "{shared} {fallback}");
    }

    /// A random partition update of rows among clusterings 0..`width` (sometimes a static row,
    /// a partition deletion, range tombstones), timestamps from `ts`.
    fn random_update(rng: &mut Rng, now: i32, ts: i64, width: u64) -> PartitionUpdate {
        let mut u = PartitionUpdate::default();
        let dense = rng.below(100);
        for c in 0..width {
            if rng.chance(dense) {
                let mut r = random_row(rng, ck(c), now);
                if let Some(m) = &mut r.marker {
                    m.timestamp += ts;
                }
                u.rows.push(r);
            }
        }
        if rng.chance(15) {
            u.static_row = Some(random_row(rng, Clustering::empty(), now));
        }
        if rng.chance(5) {
            u.partition_deletion = Some(DeletionTime {
                marked_for_delete_at: 3 + ts,
                local_deletion_time: (now - 50).into(),
            });
        }
        for _ in 0..rng.below(3).saturating_sub(1) {
            let (a, z) = (rng.below(width), rng.below(width));
            u.range_tombstones.push(RangeTombstone {
                start: ClusteringBound::inclusive(ck(a.min(z)).0),
                end: ClusteringBound::inclusive(ck(a.max(z)).0),
                deletion: DeletionTime {
                    marked_for_delete_at: 4 + ts,
                    local_deletion_time: (now - 20).into(),
                },
            });
        }
        u
    }

    /// Several SSTables' updates of a partition merged all at once give what merging them
    /// two at a time gave, once the partition's own deletions are applied (as every read
    /// result has them).
    #[test]
    fn merging_many_at_once_equals_merging_two_at_a_time() {
        let schema = Arc::new(clustered());
        let (mut rng, seed) = Rng::from_clock();
        for case in 0..5_000 {
            let width = if rng.chance(30) { 40 } else { 12 };
            let n = 1 + rng.below(6) as usize;
            let updates: Vec<PartitionUpdate> = (0..n)
                .map(|i| random_update(&mut rng, 1000, 10 * i as i64, width))
                .collect();
            let mut pairwise = updates
                .iter()
                .cloned()
                .reduce(|a, u| merge_partition_updates_owned(&schema, a, &u))
                .unwrap_or_default();
            let mut many = merge_partition_updates_many(&schema, updates);
            apply_own_deletions(&schema, &mut pairwise);
            apply_own_deletions(&schema, &mut many);
            assert_eq!(many, pairwise, "seed {seed} case {case}: {n} updates");
        }
    }

    /// A single-partition read that merges only each source's first rows (a row or
    /// per-partition limit) gives exactly what the uncapped merge gives, whenever it gives
    /// an answer; and it does answer in most reads whose sources it cut.
    #[test]
    fn capped_merges_match_the_full_merge() {
        let schema = Arc::new(clustered());
        let cmp = schema.clustering_comparator();
        let key = PartitionKey::new(b("k"));
        let (mut rng, seed) = Rng::from_clock();
        let (mut answered, mut declined, mut uncapped, mut resumed) = (0, 0, 0, 0);
        let (mut reversed, mut wide) = (0, 0);
        for case in 0..20_000 {
            let now = 1000;
            // Some partitions wide enough for a memtable to hold them in a B-tree.
            let width = if rng.chance(30) { 40 } else { 12 };
            // Up to two memtables holding the partition (the newer one writes later).
            let mut mems = Vec::new();
            for ts in [20, 10] {
                let mut m = Memtable::new(schema.clone());
                if rng.chance(70) {
                    m.apply(&key, &random_update(&mut rng, now, ts, width), None);
                }
                mems.push(m);
            }
            let held: Vec<(&Memtable, &MemPartition)> = mems
                .iter()
                .filter_map(|m| m.partitions.get(&key).map(|p| (m, p)))
                .collect();
            let entry = rng.chance(70).then(|| {
                let mut u = random_update(&mut rng, now, 0, width);
                apply_own_deletions(&schema, &mut u);
                if rng.chance(50) {
                    CachedPartition::new(u)
                } else {
                    CachedPartition::new_encoded(u)
                }
            });
            let sources = Sources {
                schema: &schema,
                cmp: &cmp,
                held: &held,
                cached: entry.as_ref(),
            };
            let read_now = now - 3 + rng.below(6) as i32;
            let cmd = random_command(&mut rng, &key, read_now, width);
            let cap = row_cap(&cmd);
            let want = sources
                .merge(&key, &cmd, usize::MAX, None, None, 1)
                .expect("merge");
            let want = want.expect("an uncapped merge always answers");
            if cap == usize::MAX {
                uncapped += 1;
                continue;
            }
            match sources
                .merge(&key, &cmd, cap, None, None, 1)
                .expect("merge")
            {
                Some(got) => {
                    answered += 1;
                    resumed +=
                        usize::from(matches!(&cmd.start_after, Some((k, Some(_))) if *k == key));
                    reversed += usize::from(cmd.reversed);
                    wide += usize::from(
                        held.iter().any(|(_, p)| {
                            matches!(p, MemPartition::General(g) if matches!(g.rows, crate::memtable::MemRows::Large(_)))
                        }),
                    );
                    let mem: Vec<_> = held.iter().map(|(m, p)| m.to_update(p, &[])).collect();
                    assert_eq!(
                        got, want,
                        "seed {seed} case {case}: {cmd:?}\n{mem:?}\n{entry:?}"
                    );
                }
                None => {
                    declined += 1;
                    // Larger caps answer the same once they answer, and one beyond every
                    // source's row count always answers.
                    let mut c = cap;
                    let got = loop {
                        c = c.saturating_mul(CAP_GROWTH);
                        if let Some(got) =
                            sources.merge(&key, &cmd, c, None, None, 1).expect("merge")
                        {
                            break got;
                        }
                        assert!(
                            c <= 4 * width as usize,
                            "seed {seed} case {case}: cap {c} declined"
                        );
                    };
                    assert_eq!(got, want, "seed {seed} case {case}: cap {c}: {cmd:?}");
                }
            }
        }
        assert!(
            answered > 5_000
                && declined > 20
                && uncapped > 1_000
                && resumed > 1_000
                && reversed > 500
                && wide > 500,
            "seed {seed}: {answered} {declined} {uncapped} {resumed} {reversed} {wide}"
        );
    }

    #[test]
    fn rows_are_live_until_the_first_expiry_and_never_with_tombstones() {
        let now = 1000;
        let row = |cells: Vec<(ColumnId, ColumnData)>, marker| Row {
            clustering: Clustering::empty(),
            marker,
            deletion: None,
            cells,
        };
        let part = |rows| PartitionUpdate {
            rows,
            ..Default::default()
        };
        let live = |ts| ColumnData::Simple(Cell::live(ts, b("v")));
        let e = CachedPartition::new(part(vec![
            row(vec![(1, live(1))], None),
            row(vec![], Some(LivenessInfo::expiring(1, 10, now - 5))),
            row(
                vec![(
                    1,
                    ColumnData::Simple(Cell::expiring(1, 10, now - 7, b("x"))),
                )],
                Some(LivenessInfo::new(1)),
            ),
        ]));
        assert_eq!(e.rows_live_until, LocalTime::from(now + 3));
        assert!(e.rows_live_at(now + 2) && !e.rows_live_at(now + 3));
        assert!(CachedPartition::new(part(vec![])).rows_live_at(i32::MAX));
        for bad in [
            row(vec![(1, ColumnData::Simple(Cell::tombstone(1, now)))], None),
            row(vec![], None),
            Row {
                deletion: Some(DeletionTime {
                    marked_for_delete_at: 0,
                    local_deletion_time: now.into(),
                }),
                ..row(vec![(1, live(1))], None)
            },
        ] {
            let e = CachedPartition::new(part(vec![row(vec![(1, live(1))], None), bad]));
            assert!(!e.rows_live_at(i32::MIN), "{e:?}");
        }
    }
}
