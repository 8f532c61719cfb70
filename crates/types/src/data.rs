//! The Cassandra data model (mutations, rows, cells, tombstones) and its reconciliation.
//!
//! Reconciliation follows Cassandra (`Cells.reconcile`, `DeletionTime.supersedes`):
//! the higher timestamp wins; on a timestamp tie a tombstone or expiring cell beats a
//! regular cell, a tombstone beats an expiring cell, the later local deletion/expiry time
//! wins, then the greater value. The remaining ties are broken deterministically (ttl) so
//! every merge here is associative, commutative and idempotent.
//!
//! Counters: a counter cell's value is a *counter context*, a list of shards
//! `(counter_id: 16 bytes, clock: i64, value: i64)` sorted by id. Merging keeps, per id,
//! the shard with the highest clock (then the higher value), which keeps merges idempotent.
//! The counter's value is the sum of its shards. A counter tombstone always beats a live
//! counter cell, whatever the timestamps (as in Cassandra). Increments are done by the
//! owner of a counter id: read the current local shard, write `(id, clock + 1, value + delta)`
//! (see `amphora_storage::ShardStorage::apply_counter_update`).

use std::cmp::Ordering;

use bytes::Bytes;

use crate::schema::{BoundSide, ClusteringComparator, ColumnId, TableId, TableSchema};

/// Write timestamp in microseconds since the epoch.
pub type Timestamp = i64;

/// Seconds since the epoch of a local deletion or TTL expiry. 64-bit: an expiry 20 years
/// ahead (the maximum TTL) is past 2038, which Cassandra 5.0 accepts (CASSANDRA-14227).
pub type LocalTime = i64;

/// "No local deletion time" (Cassandra's `Cell.NO_DELETION_TIME`).
pub const NO_DELETION_TIME: LocalTime = LocalTime::MAX;

/// A deletion: everything with a timestamp `<= marked_for_delete_at` is shadowed.
/// Ordered by `(marked_for_delete_at, local_deletion_time)`, i.e. `a > b` iff `a`
/// supersedes `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeletionTime {
    pub marked_for_delete_at: Timestamp,
    /// Seconds since the epoch when the deletion happened (for gc_grace_seconds).
    pub local_deletion_time: LocalTime,
}

impl DeletionTime {
    pub fn new(marked_for_delete_at: Timestamp, local_deletion_time: i32) -> Self {
        DeletionTime {
            marked_for_delete_at,
            local_deletion_time: local_deletion_time.into(),
        }
    }
    #[inline]
    pub fn deletes(&self, timestamp: Timestamp) -> bool {
        timestamp <= self.marked_for_delete_at
    }
    pub fn supersedes(&self, other: &DeletionTime) -> bool {
        self > other
    }
}

/// Max of two optional deletions.
pub fn max_deletion(a: Option<DeletionTime>, b: Option<DeletionTime>) -> Option<DeletionTime> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Row liveness (the row marker written by INSERT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LivenessInfo {
    pub timestamp: Timestamp,
    /// Seconds; 0 = no TTL.
    pub ttl: i32,
    /// Expiry time in seconds since the epoch when `ttl > 0`, else 0.
    pub local_expiry: LocalTime,
}

impl LivenessInfo {
    pub fn new(timestamp: Timestamp) -> Self {
        LivenessInfo {
            timestamp,
            ttl: 0,
            local_expiry: 0,
        }
    }
    pub fn expiring(timestamp: Timestamp, ttl: i32, now_seconds: i32) -> Self {
        LivenessInfo {
            timestamp,
            ttl,
            local_expiry: LocalTime::from(now_seconds) + LocalTime::from(ttl),
        }
    }
    pub fn is_expiring(&self) -> bool {
        self.ttl > 0
    }
    pub fn is_live(&self, now_seconds: i32) -> bool {
        self.ttl <= 0 || LocalTime::from(now_seconds) < self.local_expiry
    }
    fn key(&self) -> (Timestamp, bool, LocalTime, i32) {
        (
            self.timestamp,
            self.is_expiring(),
            self.local_expiry,
            self.ttl,
        )
    }
    /// The winner of two markers.
    pub fn reconcile(a: LivenessInfo, b: LivenessInfo) -> LivenessInfo {
        if b.key() > a.key() { b } else { a }
    }
}

/// A cell: a live value, an expiring value, a tombstone, or a counter context.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cell {
    pub timestamp: Timestamp,
    /// Seconds; 0 = no TTL.
    pub ttl: i32,
    /// For an expiring cell: expiry time (s). For a tombstone: local deletion time (s).
    /// Otherwise 0.
    pub local_expiry: LocalTime,
    pub value: Bytes,
    pub is_tombstone: bool,
    /// The value is a counter context (see module docs).
    pub is_counter: bool,
}

impl Cell {
    pub fn live(timestamp: Timestamp, value: Bytes) -> Self {
        Cell {
            timestamp,
            ttl: 0,
            local_expiry: 0,
            value,
            is_tombstone: false,
            is_counter: false,
        }
    }
    /// A cell with a TTL; `ttl <= 0` gives a regular cell.
    pub fn expiring(timestamp: Timestamp, ttl: i32, now_seconds: i32, value: Bytes) -> Self {
        if ttl <= 0 {
            return Cell::live(timestamp, value);
        }
        Cell {
            timestamp,
            ttl,
            local_expiry: LocalTime::from(now_seconds) + LocalTime::from(ttl),
            value,
            is_tombstone: false,
            is_counter: false,
        }
    }
    pub fn tombstone(timestamp: Timestamp, now_seconds: i32) -> Self {
        Cell {
            timestamp,
            ttl: 0,
            local_expiry: now_seconds.into(),
            value: Bytes::new(),
            is_tombstone: true,
            is_counter: false,
        }
    }
    pub fn counter(timestamp: Timestamp, shards: &[CounterShard]) -> Self {
        Cell {
            timestamp,
            ttl: 0,
            local_expiry: 0,
            value: encode_counter_shards(shards),
            is_tombstone: false,
            is_counter: true,
        }
    }
    pub fn is_expiring(&self) -> bool {
        !self.is_tombstone && self.ttl > 0
    }
    /// Live (not a tombstone and not expired) at `now_seconds`.
    pub fn is_live(&self, now_seconds: i32) -> bool {
        !self.is_tombstone && (self.ttl <= 0 || LocalTime::from(now_seconds) < self.local_expiry)
    }
    /// Local deletion time if this is (or has become) a tombstone.
    pub fn local_deletion_time(&self) -> LocalTime {
        if self.is_tombstone {
            self.local_expiry
        } else if self.ttl > 0 {
            // An expired cell counts as deleted since its write (Cassandra: expiry - ttl).
            self.local_expiry - LocalTime::from(self.ttl)
        } else {
            NO_DELETION_TIME
        }
    }
    /// Converts an expired cell into the tombstone it has become.
    pub fn expire(&self, now_seconds: i32) -> Option<Cell> {
        if self.is_expiring() && LocalTime::from(now_seconds) >= self.local_expiry {
            Some(Cell {
                timestamp: self.timestamp,
                ttl: 0,
                local_expiry: self.local_deletion_time(),
                value: Bytes::new(),
                is_tombstone: true,
                is_counter: false,
            })
        } else {
            None
        }
    }
    /// Approximate heap + inline size, for memory accounting.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Cell>() + self.value.len()
    }
}

/// One counter shard of a counter context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterShard {
    pub counter_id: u128,
    pub clock: i64,
    pub value: i64,
}

pub const COUNTER_SHARD_BYTES: usize = 32;

pub fn encode_counter_shards(shards: &[CounterShard]) -> Bytes {
    let mut s: Vec<CounterShard> = shards.to_vec();
    s.sort_by_key(|x| x.counter_id);
    s.dedup_by(|b, a| {
        // Keep the later-clocked shard of each id (dedup_by drops `b`).
        if a.counter_id == b.counter_id {
            if (b.clock, b.value) > (a.clock, a.value) {
                *a = *b;
            }
            true
        } else {
            false
        }
    });
    let mut out = Vec::with_capacity(s.len() * COUNTER_SHARD_BYTES);
    for x in &s {
        out.extend_from_slice(&x.counter_id.to_be_bytes());
        out.extend_from_slice(&x.clock.to_be_bytes());
        out.extend_from_slice(&x.value.to_be_bytes());
    }
    Bytes::from(out)
}

/// Decodes a counter context; trailing partial shards are ignored.
pub fn decode_counter_shards(v: &[u8]) -> Vec<CounterShard> {
    v.chunks_exact(COUNTER_SHARD_BYTES)
        .map(|c| {
            let mut id = [0u8; 16];
            id.copy_from_slice(&c[0..16]);
            let mut cl = [0u8; 8];
            cl.copy_from_slice(&c[16..24]);
            let mut va = [0u8; 8];
            va.copy_from_slice(&c[24..32]);
            CounterShard {
                counter_id: u128::from_be_bytes(id),
                clock: i64::from_be_bytes(cl),
                value: i64::from_be_bytes(va),
            }
        })
        .collect()
}

/// The total of a counter context.
pub fn counter_value(v: &[u8]) -> i64 {
    decode_counter_shards(v)
        .iter()
        .fold(0i64, |acc, s| acc.wrapping_add(s.value))
}

fn merge_counter_contexts(a: &[u8], b: &[u8]) -> Bytes {
    let mut all = decode_counter_shards(a);
    all.extend(decode_counter_shards(b));
    encode_counter_shards(&all)
}

fn cell_class(c: &Cell) -> u8 {
    if c.is_tombstone {
        2
    } else if c.ttl > 0 {
        1
    } else {
        0
    }
}

/// Cassandra's cell reconciliation (see module docs). Returns the winner (or, for two
/// live counter cells, their merged context).
pub fn reconcile_cells(a: &Cell, b: &Cell) -> Cell {
    if a.is_counter || b.is_counter {
        match (a.is_tombstone, b.is_tombstone) {
            (true, false) => return a.clone(),
            (false, true) => return b.clone(),
            (false, false) if a.is_counter && b.is_counter => {
                if a.value == b.value {
                    return if a.timestamp >= b.timestamp {
                        a.clone()
                    } else {
                        b.clone()
                    };
                }
                return Cell {
                    timestamp: a.timestamp.max(b.timestamp),
                    ttl: 0,
                    local_expiry: 0,
                    value: merge_counter_contexts(&a.value, &b.value),
                    is_tombstone: false,
                    is_counter: true,
                };
            }
            _ => {}
        }
    }
    if compare_cells(a, b) == Ordering::Less {
        b.clone()
    } else {
        a.clone()
    }
}

/// The total order behind [`reconcile_cells`] for non-counter cells: greater wins.
pub fn compare_cells(a: &Cell, b: &Cell) -> Ordering {
    a.timestamp
        .cmp(&b.timestamp)
        .then_with(|| cell_class(a).cmp(&cell_class(b)))
        .then_with(|| {
            if a.is_tombstone || a.ttl > 0 {
                a.local_expiry.cmp(&b.local_expiry)
            } else {
                Ordering::Equal
            }
        })
        .then_with(|| a.value.cmp(&b.value))
        .then_with(|| a.ttl.cmp(&b.ttl))
        .then_with(|| a.is_counter.cmp(&b.is_counter))
}

/// Clustering key values (one per clustering column; a prefix for bounds).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Clustering(pub Vec<Bytes>);

impl Clustering {
    /// The clustering of the static row (and of tables without clustering columns).
    pub fn empty() -> Self {
        Clustering(Vec::new())
    }
    pub fn size_bytes(&self) -> usize {
        self.0.iter().map(|b| b.len() + 16).sum()
    }
}

/// A slice bound: a clustering prefix, inclusive or exclusive. The empty prefix is
/// unbounded (the bottom as a start, the top as an end), whatever `inclusive` says.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClusteringBound {
    pub prefix: Clustering,
    pub inclusive: bool,
}

impl ClusteringBound {
    pub fn unbounded() -> Self {
        ClusteringBound {
            prefix: Clustering::empty(),
            inclusive: true,
        }
    }
    pub fn inclusive(prefix: Vec<Bytes>) -> Self {
        ClusteringBound {
            prefix: Clustering(prefix),
            inclusive: true,
        }
    }
    pub fn exclusive(prefix: Vec<Bytes>) -> Self {
        ClusteringBound {
            prefix: Clustering(prefix),
            inclusive: false,
        }
    }
    /// Position of this bound used as a slice start.
    pub fn start_position(&self) -> (&[Bytes], BoundSide) {
        if self.prefix.0.is_empty() {
            return (&[], BoundSide::Before);
        }
        (
            &self.prefix.0,
            if self.inclusive {
                BoundSide::Before
            } else {
                BoundSide::After
            },
        )
    }
    /// Position of this bound used as a slice end.
    pub fn end_position(&self) -> (&[Bytes], BoundSide) {
        if self.prefix.0.is_empty() {
            return (&[], BoundSide::After);
        }
        (
            &self.prefix.0,
            if self.inclusive {
                BoundSide::After
            } else {
                BoundSide::Before
            },
        )
    }
    fn from_start_position(p: &[Bytes], side: BoundSide) -> Self {
        ClusteringBound {
            prefix: Clustering(p.to_vec()),
            inclusive: side == BoundSide::Before,
        }
    }
    fn from_end_position(p: &[Bytes], side: BoundSide) -> Self {
        ClusteringBound {
            prefix: Clustering(p.to_vec()),
            inclusive: side == BoundSide::After || p.is_empty(),
        }
    }
}

/// A clustering range `[start, end]` (bounds say inclusive/exclusive) of a read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClusteringSlice {
    pub start: ClusteringBound,
    pub end: ClusteringBound,
}

impl ClusteringSlice {
    pub fn all() -> Self {
        ClusteringSlice {
            start: ClusteringBound::unbounded(),
            end: ClusteringBound::unbounded(),
        }
    }
    pub fn contains(&self, cmp: &ClusteringComparator, c: &Clustering) -> bool {
        cmp.after_start(c, &self.start) && cmp.before_end(c, &self.end)
    }
}

/// A deleted range of clustering keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RangeTombstone {
    pub start: ClusteringBound,
    pub end: ClusteringBound,
    pub deletion: DeletionTime,
}

impl RangeTombstone {
    pub fn covers(&self, cmp: &ClusteringComparator, c: &Clustering) -> bool {
        cmp.after_start(c, &self.start) && cmp.before_end(c, &self.end)
    }
    /// True if the range is empty (start at or after end).
    pub fn is_empty(&self, cmp: &ClusteringComparator) -> bool {
        cmp.compare_positions(self.start.start_position(), self.end.end_position())
            != Ordering::Less
    }
}

/// A collection / non-frozen UDT column's cells.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ColumnData {
    Simple(Cell),
    /// Cells keyed by cell path (list: timeuuid; set: element; map: key; UDT: field index
    /// as u16 big-endian), sorted by the column type's path comparator.
    Complex {
        deletion: Option<DeletionTime>,
        cells: Vec<(Bytes, Cell)>,
    },
}

impl ColumnData {
    pub fn size_bytes(&self) -> usize {
        match self {
            ColumnData::Simple(c) => c.size_bytes(),
            ColumnData::Complex { cells, .. } => {
                32 + cells
                    .iter()
                    .map(|(p, c)| p.len() + 16 + c.size_bytes())
                    .sum::<usize>()
            }
        }
    }
    /// Highest timestamp of any cell or deletion in this column.
    pub fn max_timestamp(&self) -> Timestamp {
        match self {
            ColumnData::Simple(c) => c.timestamp,
            ColumnData::Complex { deletion, cells } => cells
                .iter()
                .map(|(_, c)| c.timestamp)
                .chain(deletion.map(|d| d.marked_for_delete_at))
                .max()
                .unwrap_or(Timestamp::MIN),
        }
    }
}

/// A row (or the static row, with an empty clustering).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Row {
    pub clustering: Clustering,
    pub marker: Option<LivenessInfo>,
    pub deletion: Option<DeletionTime>,
    /// Sorted by column id, one entry per column.
    pub cells: Vec<(ColumnId, ColumnData)>,
}

impl Row {
    pub fn new(clustering: Clustering) -> Self {
        Row {
            clustering,
            marker: None,
            deletion: None,
            cells: Vec::new(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.marker.is_none() && self.deletion.is_none() && self.cells.is_empty()
    }
    pub fn cell(&self, col: ColumnId) -> Option<&ColumnData> {
        self.cells
            .binary_search_by_key(&col, |(c, _)| *c)
            .ok()
            .map(|i| &self.cells[i].1)
    }
    pub fn size_bytes(&self) -> usize {
        64 + self.clustering.size_bytes()
            + self
                .cells
                .iter()
                .map(|(_, d)| 8 + d.size_bytes())
                .sum::<usize>()
    }
    /// Highest timestamp in the row (marker, deletion, cells).
    pub fn max_timestamp(&self) -> Timestamp {
        self.cells
            .iter()
            .map(|(_, d)| d.max_timestamp())
            .chain(self.marker.map(|m| m.timestamp))
            .chain(self.deletion.map(|d| d.marked_for_delete_at))
            .max()
            .unwrap_or(Timestamp::MIN)
    }
    /// Removes everything shadowed by `del` (and the row deletion itself if `del`
    /// supersedes it or equals it).
    pub fn shadow(&mut self, del: DeletionTime) {
        if self.deletion.is_some_and(|d| d <= del) {
            self.deletion = None;
        }
        if self.marker.is_some_and(|m| del.deletes(m.timestamp)) {
            self.marker = None;
        }
        self.cells.retain_mut(|(_, d)| shadow_column(d, del));
    }
}

/// Applies a deletion to column data; returns false if nothing is left.
fn shadow_column(d: &mut ColumnData, del: DeletionTime) -> bool {
    match d {
        ColumnData::Simple(c) => !del.deletes(c.timestamp),
        ColumnData::Complex { deletion, cells } => {
            if deletion.is_some_and(|x| x <= del) {
                *deletion = None;
            }
            cells.retain(|(_, c)| !del.deletes(c.timestamp));
            deletion.is_some() || !cells.is_empty()
        }
    }
}

/// A partition key: its token and the serialized key bytes hashed for the token.
/// Ordered by `(token, key)` (the ring order).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    pub token: i64,
    pub key: Bytes,
}

impl PartitionKey {
    /// Computes the token of `key`.
    pub fn new(key: Bytes) -> Self {
        PartitionKey {
            token: crate::token::murmur3_token(&key),
            key,
        }
    }
}

/// Changes to (or the content of) one partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PartitionUpdate {
    pub partition_deletion: Option<DeletionTime>,
    pub static_row: Option<Row>,
    /// Sorted by clustering order, one per clustering.
    pub rows: Vec<Row>,
    pub range_tombstones: Vec<RangeTombstone>,
}

impl PartitionUpdate {
    pub fn is_empty(&self) -> bool {
        self.partition_deletion.is_none()
            && self.static_row.is_none()
            && self.rows.is_empty()
            && self.range_tombstones.is_empty()
    }
    pub fn size_bytes(&self) -> usize {
        64 + self.static_row.as_ref().map_or(0, Row::size_bytes)
            + self.rows.iter().map(Row::size_bytes).sum::<usize>()
            + self.range_tombstones.len() * 96
    }
    /// Highest timestamp anywhere in the update.
    pub fn max_timestamp(&self) -> Timestamp {
        self.rows
            .iter()
            .chain(self.static_row.iter())
            .map(Row::max_timestamp)
            .chain(self.partition_deletion.map(|d| d.marked_for_delete_at))
            .chain(
                self.range_tombstones
                    .iter()
                    .map(|r| r.deletion.marked_for_delete_at),
            )
            .max()
            .unwrap_or(Timestamp::MIN)
    }
}

/// One partition's mutation for one table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mutation {
    pub table: TableId,
    pub key: PartitionKey,
    pub update: PartitionUpdate,
}

// ---- merging ----

/// Merges two versions of one column (same column id).
pub fn merge_column_data(
    schema: &TableSchema,
    col: ColumnId,
    a: &ColumnData,
    b: &ColumnData,
) -> ColumnData {
    match (a, b) {
        (ColumnData::Simple(x), ColumnData::Simple(y)) => ColumnData::Simple(reconcile_cells(x, y)),
        (
            ColumnData::Complex {
                deletion: da,
                cells: ca,
            },
            ColumnData::Complex {
                deletion: db,
                cells: cb,
            },
        ) => {
            let ty = schema.column_by_id(col).map(|c| &c.ty);
            let deletion = max_deletion(*da, *db);
            let mut cells: Vec<(Bytes, Cell)> = Vec::with_capacity(ca.len() + cb.len());
            let (mut i, mut j) = (0, 0);
            while i < ca.len() || j < cb.len() {
                let ord = match (ca.get(i), cb.get(j)) {
                    (Some(x), Some(y)) => {
                        ty.map_or_else(|| x.0.cmp(&y.0), |t| t.compare_cell_path(&x.0, &y.0))
                    }
                    (Some(_), None) => Ordering::Less,
                    _ => Ordering::Greater,
                };
                match ord {
                    Ordering::Less => {
                        cells.push(ca[i].clone());
                        i += 1;
                    }
                    Ordering::Greater => {
                        cells.push(cb[j].clone());
                        j += 1;
                    }
                    Ordering::Equal => {
                        cells.push((ca[i].0.clone(), reconcile_cells(&ca[i].1, &cb[j].1)));
                        i += 1;
                        j += 1;
                    }
                }
            }
            if let Some(d) = deletion {
                cells.retain(|(_, c)| !d.deletes(c.timestamp));
            }
            ColumnData::Complex { deletion, cells }
        }
        // A schema change between simple and complex: the newer data wins.
        _ => {
            if b.max_timestamp() > a.max_timestamp() {
                b.clone()
            } else {
                a.clone()
            }
        }
    }
}

/// Merges two versions of the same row (same clustering), applying the merged row deletion.
pub fn merge_rows(schema: &TableSchema, a: &Row, b: &Row) -> Row {
    let deletion = max_deletion(a.deletion, b.deletion);
    let marker = match (a.marker, b.marker) {
        (Some(x), Some(y)) => Some(LivenessInfo::reconcile(x, y)),
        (x, None) => x,
        (None, y) => y,
    };
    let mut cells = Vec::with_capacity(a.cells.len().max(b.cells.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.cells.len() || j < b.cells.len() {
        match (a.cells.get(i), b.cells.get(j)) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                cells.push((x.0, merge_column_data(schema, x.0, &x.1, &y.1)));
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x.0 < y.0 => {
                cells.push(x.clone());
                i += 1;
            }
            (Some(x), None) => {
                cells.push(x.clone());
                i += 1;
            }
            (_, Some(y)) => {
                cells.push(y.clone());
                j += 1;
            }
            (None, None) => break,
        }
    }
    let mut row = Row {
        clustering: a.clustering.clone(),
        marker,
        deletion: None,
        cells,
    };
    if let Some(d) = deletion {
        row.shadow(d);
        row.deletion = Some(d);
    }
    row
}

/// [`merge_rows`] taking `a` by value: when both rows hold the same columns (a row
/// overwritten whole, the common case), the merged cells replace `a`'s in place, so its
/// clustering and cell vector are reused instead of copied and dropped.
pub fn merge_rows_into(schema: &TableSchema, mut a: Row, b: &Row) -> Row {
    let same_columns =
        a.cells.len() == b.cells.len() && a.cells.iter().zip(&b.cells).all(|(x, y)| x.0 == y.0);
    if !same_columns {
        return merge_rows(schema, &a, b);
    }
    let deletion = max_deletion(a.deletion, b.deletion);
    a.marker = match (a.marker, b.marker) {
        (Some(x), Some(y)) => Some(LivenessInfo::reconcile(x, y)),
        (x, None) => x,
        (None, y) => y,
    };
    for (x, y) in a.cells.iter_mut().zip(&b.cells) {
        x.1 = merge_column_data(schema, x.0, &x.1, &y.1);
    }
    a.deletion = None;
    if let Some(d) = deletion {
        a.shadow(d);
        a.deletion = Some(d);
    }
    a
}

/// Normalizes range tombstones into sorted, non-overlapping ranges (each point covered by
/// the greatest deletion among the inputs), dropping ranges shadowed by `floor`.
pub fn normalize_range_tombstones(
    cmp: &ClusteringComparator,
    rts: &[RangeTombstone],
    floor: Option<DeletionTime>,
) -> Vec<RangeTombstone> {
    let live: Vec<&RangeTombstone> = rts
        .iter()
        .filter(|r| !r.is_empty(cmp) && floor.is_none_or(|f| r.deletion > f))
        .collect();
    if live.is_empty() {
        return Vec::new();
    }
    if live.len() == 1 {
        let r = live[0];
        let (s, e) = (r.start.start_position(), r.end.end_position());
        return vec![RangeTombstone {
            start: ClusteringBound::from_start_position(s.0, s.1),
            end: ClusteringBound::from_end_position(e.0, e.1),
            deletion: r.deletion,
        }];
    }
    let mut points: Vec<(&[Bytes], BoundSide)> = Vec::with_capacity(live.len() * 2);
    for r in &live {
        points.push(r.start.start_position());
        points.push(r.end.end_position());
    }
    points.sort_by(|a, b| cmp.compare_positions(*a, *b));
    points.dedup_by(|a, b| cmp.compare_positions(*a, *b) == Ordering::Equal);
    let mut out: Vec<RangeTombstone> = Vec::new();
    let mut prev_end_open = false;
    for w in points.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        let best = live
            .iter()
            .filter(|r| {
                cmp.compare_positions(r.start.start_position(), lo) != Ordering::Greater
                    && cmp.compare_positions(r.end.end_position(), hi) != Ordering::Less
            })
            .map(|r| r.deletion)
            .max();
        match best {
            Some(d) => {
                if prev_end_open
                    && let Some(last) = out.last_mut()
                    && last.deletion == d
                {
                    last.end = ClusteringBound::from_end_position(hi.0, hi.1);
                } else {
                    out.push(RangeTombstone {
                        start: ClusteringBound::from_start_position(lo.0, lo.1),
                        end: ClusteringBound::from_end_position(hi.0, hi.1),
                        deletion: d,
                    });
                }
                prev_end_open = true;
            }
            None => prev_end_open = false,
        }
    }
    out
}

/// The greatest range tombstone deletion covering `c`.
pub fn range_deletion_at(
    cmp: &ClusteringComparator,
    rts: &[RangeTombstone],
    c: &Clustering,
) -> Option<DeletionTime> {
    rts.iter()
        .filter(|r| r.covers(cmp, c))
        .map(|r| r.deletion)
        .max()
}

/// Merges two partition updates into the canonical form: rows sorted and merged,
/// range tombstones normalized, and everything shadowed by a deletion removed.
pub fn merge_partition_updates(
    schema: &TableSchema,
    a: &PartitionUpdate,
    b: &PartitionUpdate,
) -> PartitionUpdate {
    merge_updates(
        schema,
        a.partition_deletion,
        a.static_row.as_ref(),
        &a.range_tombstones,
        a.rows.iter(),
        UpdateView::of(b),
    )
}

/// [`merge_partition_updates`] taking `a` by value: its rows move into the result instead
/// of being copied (a row cache entry merged with a flush, a memtable's rows merged with
/// an SSTable's).
pub fn merge_partition_updates_owned(
    schema: &TableSchema,
    a: PartitionUpdate,
    b: &PartitionUpdate,
) -> PartitionUpdate {
    merge_partition_updates_owned_view(schema, a, UpdateView::of(b))
}

/// Merges several updates of one partition, taking them by value: the result of merging
/// them two at a time in any order ([`merge_partition_updates_owned`]), without copying
/// each next input's rows and merging the growing result again with every one (a read of
/// a partition over ten SSTables that interleave its rows spent a fifth of its time doing
/// that). Each input's rows must be sorted by clustering without duplicates. No input:
/// an empty update; one: that input as it is (its own deletions not applied).
pub fn merge_partition_updates_many(
    schema: &TableSchema,
    mut updates: Vec<PartitionUpdate>,
) -> PartitionUpdate {
    if updates.len() <= 1 {
        return updates.pop().unwrap_or_default();
    }
    let cmp = schema.clustering_comparator();
    let mut partition_deletion = None;
    let mut static_row: Option<Row> = None;
    let mut all_rts = Vec::new();
    let mut total = 0;
    let mut sources = Vec::with_capacity(updates.len());
    for u in updates {
        partition_deletion = max_deletion(partition_deletion, u.partition_deletion);
        static_row = match (static_row, u.static_row) {
            (Some(x), Some(y)) => Some(merge_rows_into(schema, x, &y)),
            (x, y) => x.or(y),
        };
        all_rts.extend(u.range_tombstones);
        total += u.rows.len();
        sources.push(u.rows.into_iter());
    }
    let range_tombstones = normalize_range_tombstones(&cmp, &all_rts, partition_deletion);
    let mut rows: Vec<Row> = Vec::with_capacity(total);
    loop {
        // The first source whose next row sorts first: the sources before it have
        // later rows, those after it may have the same clustering.
        let mut first: Option<(usize, &Row)> = None;
        for (i, src) in sources.iter().enumerate() {
            if let Some(r) = src.as_slice().first()
                && first.is_none_or(|(_, f)| cmp.compare(&r.clustering.0, &f.clustering.0).is_lt())
            {
                first = Some((i, r));
            }
        }
        let Some((i, _)) = first else { break };
        let Some(mut row) = sources.get_mut(i).and_then(Iterator::next) else {
            break;
        };
        for src in sources.iter_mut().skip(i + 1) {
            if src
                .as_slice()
                .first()
                .is_some_and(|r| cmp.compare(&r.clustering.0, &row.clustering.0).is_eq())
                && let Some(r) = src.next()
            {
                row = merge_rows_into(schema, row, &r);
            }
        }
        rows.push(row);
    }
    shadowed(&cmp, partition_deletion, static_row, rows, range_tombstones)
}

/// A partition update's parts, borrowed from wherever they are held (a memtable's
/// partition), as the second input of [`merge_partition_updates_owned_view`]: the merge
/// copies only the rows it keeps, instead of the caller first copying them all into a
/// [`PartitionUpdate`].
pub struct UpdateView<'a, I> {
    pub partition_deletion: Option<DeletionTime>,
    pub static_row: Option<&'a Row>,
    pub range_tombstones: &'a [RangeTombstone],
    /// Sorted by clustering, without duplicates.
    pub rows: I,
}

impl<'a> UpdateView<'a, std::slice::Iter<'a, Row>> {
    pub fn of(u: &'a PartitionUpdate) -> Self {
        UpdateView {
            partition_deletion: u.partition_deletion,
            static_row: u.static_row.as_ref(),
            range_tombstones: &u.range_tombstones,
            rows: u.rows.iter(),
        }
    }
}

/// [`merge_partition_updates_owned`] with the second input borrowed in parts: what a
/// flush merges into a row cache entry, straight from the memtable's rows.
pub fn merge_partition_updates_owned_view<'b>(
    schema: &TableSchema,
    a: PartitionUpdate,
    b: UpdateView<'b, impl Iterator<Item = &'b Row>>,
) -> PartitionUpdate {
    merge_updates(
        schema,
        a.partition_deletion,
        a.static_row,
        &a.range_tombstones,
        a.rows.into_iter(),
        b,
    )
}

/// What [`merge_into_in_place`] tells its caller about the rows it changes.
pub trait InPlaceMerge {
    /// `old`, a row of the first input, is about to be merged with a row of the second.
    fn replacing(&mut self, old: &Row);
    /// `row` (new, or merged) is about to take its place in the result.
    fn placed(&mut self, row: &mut Row);
}

/// [`merge_partition_updates_owned_view`] done inside `a`, for the shape a flush merging
/// new rows into a wide cached partition (a time series) usually has: neither side has a
/// partition deletion or range tombstones. `a`'s rows must be canonical (a cache entry's
/// are). Rows of `b` that `a` lacks are inserted where they sort: each run of `a`'s rows
/// after an insertion point moves once, within `a`'s own vector (grown by doubling);
/// rows both hold are merged where they are; every other row of `a` stays untouched. The
/// general merge builds a new vector of all rows each time: one per cached partition per
/// flush, whose allocation churn showed as page zeroing, 4.5% of the shard in the IoT
/// 90/10 mix (docs/benchmarks.md, "Flush merges into wide cache entries in place").
/// Returns false, with nothing done, when the shape does not fit.
pub fn merge_into_in_place<'b>(
    schema: &TableSchema,
    a: &mut PartitionUpdate,
    b: UpdateView<'b, impl Iterator<Item = &'b Row>>,
    obs: &mut impl InPlaceMerge,
) -> bool {
    if a.partition_deletion.is_some()
        || !a.range_tombstones.is_empty()
        || b.partition_deletion.is_some()
        || !b.range_tombstones.is_empty()
    {
        return false;
    }
    // A row's own deletion applied to it, as `apply_deletions` does.
    let own_deletion = |r: &mut Row| {
        if let Some(own) = r.deletion {
            r.shadow(own);
            r.deletion = Some(own);
        }
    };
    if let Some(y) = b.static_row {
        let mut merged = match a.static_row.take() {
            Some(x) => {
                obs.replacing(&x);
                merge_rows_into(schema, x, y)
            }
            None => {
                let mut r = y.clone();
                own_deletion(&mut r);
                r
            }
        };
        a.static_row = (!merged.is_empty()).then(|| {
            obs.placed(&mut merged);
            merged
        });
    }
    let cmp = schema.clustering_comparator();
    let n = a.rows.len();
    let mut inserts: Vec<(usize, Row)> = Vec::new();
    let mut emptied = false;
    let mut lo = 0;
    for y in b.rows {
        let pos = gallop(&a.rows, lo, |x| {
            cmp.compare(&x.clustering.0, &y.clustering.0).is_lt()
        });
        match a.rows.get_mut(pos) {
            Some(x) if cmp.compare(&x.clustering.0, &y.clustering.0).is_eq() => {
                obs.replacing(x);
                let mut merged = merge_rows_into(schema, std::mem::take(x), y);
                obs.placed(&mut merged);
                emptied |= merged.is_empty();
                *x = merged;
                lo = pos + 1;
            }
            _ => {
                let mut r = y.clone();
                own_deletion(&mut r);
                if !r.is_empty() {
                    obs.placed(&mut r);
                    inserts.push((pos, r));
                }
                lo = pos;
            }
        }
    }
    let k = inserts.len();
    if k > 0 {
        a.rows.reserve(k);
        a.rows.resize_with(n + k, Row::default);
        // Backwards: the run of rows from each insertion point to the previous one moves
        // right by the number of insertions at or before it, over the empty rows left
        // at the run's end.
        let mut end = n;
        for (i, (pos, r)) in inserts.into_iter().enumerate().rev() {
            a.rows[pos..end + i + 1].rotate_right(i + 1);
            a.rows[pos + i] = r;
            end = pos;
        }
    }
    if emptied {
        a.rows.retain(|r| !r.is_empty());
    }
    true
}

/// The first index at or after `lo` whose row is not `before` the one looked for (rows
/// sorted, `before` true on a prefix): probes `lo`, then steps doubling from it, then a
/// binary search within the last step. A flush's new rows mostly land next to each other
/// (a time series' newest rows all go first, or all last), so each costs a probe or two
/// where a binary search over the whole partition costs a dozen, each a chain of cache
/// misses in a cold entry.
fn gallop(rows: &[Row], lo: usize, before: impl Fn(&Row) -> bool) -> usize {
    let mut known = match rows.get(lo) {
        Some(r) if before(r) => lo,
        _ => return lo,
    };
    let mut step = 1;
    loop {
        let probe = known + step;
        match rows.get(probe) {
            Some(r) if before(r) => {
                known = probe;
                step *= 2;
            }
            _ => {
                let end = probe.min(rows.len());
                let tail = rows.get(known + 1..end).unwrap_or_default();
                return known + 1 + tail.partition_point(&before);
            }
        }
    }
}

/// A row of the first input of [`merge_updates`]: borrowed (copied when it goes to the
/// result unmerged) or owned (moved).
trait RowIn {
    fn row(&self) -> &Row;
    fn into_row(self) -> Row;
    /// This row merged with `b` ([`merge_rows`]).
    fn merged_with(self, schema: &TableSchema, b: &Row) -> Row;
}

impl RowIn for &Row {
    fn row(&self) -> &Row {
        self
    }
    fn into_row(self) -> Row {
        self.clone()
    }
    fn merged_with(self, schema: &TableSchema, b: &Row) -> Row {
        merge_rows(schema, self, b)
    }
}

impl RowIn for Row {
    fn row(&self) -> &Row {
        self
    }
    fn into_row(self) -> Row {
        self
    }
    fn merged_with(self, schema: &TableSchema, b: &Row) -> Row {
        merge_rows_into(schema, self, b)
    }
}

fn merge_updates<'b, A: RowIn>(
    schema: &TableSchema,
    a_deletion: Option<DeletionTime>,
    a_static: Option<A>,
    a_range_tombstones: &[RangeTombstone],
    a_rows: impl ExactSizeIterator<Item = A>,
    b: UpdateView<'b, impl Iterator<Item = &'b Row>>,
) -> PartitionUpdate {
    let cmp = schema.clustering_comparator();
    let partition_deletion = max_deletion(a_deletion, b.partition_deletion);
    let static_row = match (a_static, b.static_row) {
        (Some(x), Some(y)) => Some(x.merged_with(schema, y)),
        (Some(x), None) => Some(x.into_row()),
        (None, Some(y)) => Some(y.clone()),
        (None, None) => None,
    };
    let mut all_rts = a_range_tombstones.to_vec();
    all_rts.extend(b.range_tombstones.iter().cloned());
    let range_tombstones = normalize_range_tombstones(&cmp, &all_rts, partition_deletion);
    let mut b_rows = b.rows.peekable();
    let mut rows: Vec<Row> = Vec::with_capacity(a_rows.len() + b_rows.size_hint().0);
    let mut a_rows = a_rows.peekable();
    loop {
        let ord = match (a_rows.peek(), b_rows.peek()) {
            (Some(x), Some(y)) => cmp.compare(&x.row().clustering.0, &y.clustering.0),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => break,
        };
        let row = match ord {
            Ordering::Less => a_rows.next().map(RowIn::into_row),
            Ordering::Greater => b_rows.next().cloned(),
            Ordering::Equal => match (a_rows.next(), b_rows.next()) {
                (Some(x), Some(y)) => Some(x.merged_with(schema, y)),
                _ => None,
            },
        };
        rows.extend(row);
    }
    shadowed(&cmp, partition_deletion, static_row, rows, range_tombstones)
}

/// What `merge_partition_updates(schema, &u, &PartitionUpdate::default())` returns, done
/// in place without copying rows: `u`'s own deletions (partition, range tombstones, row
/// deletions) applied to its rows and static row, range tombstones normalized. `u`'s rows
/// must be sorted by clustering without duplicates (as memtables and SSTables hold them).
///
/// PERF-CRITICAL: the read path's single-source case.
pub fn apply_own_deletions(schema: &TableSchema, u: &mut PartitionUpdate) {
    let cmp = schema.clustering_comparator();
    u.range_tombstones =
        normalize_range_tombstones(&cmp, &u.range_tombstones, u.partition_deletion);
    apply_deletions(
        &cmp,
        u.partition_deletion,
        &u.range_tombstones,
        &mut u.rows,
        &mut u.static_row,
    );
}

/// A merge's result: its rows and static row shadowed by its deletions
/// ([`apply_deletions`]; `range_tombstones` normalized).
fn shadowed(
    cmp: &ClusteringComparator,
    partition_deletion: Option<DeletionTime>,
    mut static_row: Option<Row>,
    mut rows: Vec<Row>,
    range_tombstones: Vec<RangeTombstone>,
) -> PartitionUpdate {
    apply_deletions(
        cmp,
        partition_deletion,
        &range_tombstones,
        &mut rows,
        &mut static_row,
    );
    PartitionUpdate {
        partition_deletion,
        static_row,
        rows,
        range_tombstones,
    }
}

/// Shadows rows and the static row by their own deletions and the partition's; drops what
/// is left empty.
fn apply_deletions(
    cmp: &ClusteringComparator,
    partition_deletion: Option<DeletionTime>,
    range_tombstones: &[RangeTombstone],
    rows: &mut Vec<Row>,
    static_row: &mut Option<Row>,
) {
    for row in rows.iter_mut() {
        if let Some(own) = row.deletion {
            row.shadow(own);
            row.deletion = Some(own);
        }
        let covering = max_deletion(
            partition_deletion,
            range_deletion_at(cmp, range_tombstones, &row.clustering),
        );
        if let Some(d) = covering {
            row.shadow(d);
        }
    }
    rows.retain(|r| !r.is_empty());
    if let Some(sr) = static_row.as_mut() {
        if let Some(own) = sr.deletion {
            sr.shadow(own);
            sr.deletion = Some(own);
        }
        if let Some(d) = partition_deletion {
            sr.shadow(d);
        }
    }
    if static_row.as_ref().is_some_and(Row::is_empty) {
        *static_row = None;
    }
}

/// Puts an update into canonical form (sorted, merged, normalized): the identity merge.
pub fn canonicalize(schema: &TableSchema, u: &PartitionUpdate) -> PartitionUpdate {
    let cmp = schema.clustering_comparator();
    let mut rows = u.rows.clone();
    rows.sort_by(|x, y| cmp.compare(&x.clustering.0, &y.clustering.0));
    // Merge duplicates and sort cells / complex paths.
    let mut dedup: Vec<Row> = Vec::with_capacity(rows.len());
    for mut r in rows {
        r.cells.sort_by_key(|(c, _)| *c);
        let mut merged: Vec<(ColumnId, ColumnData)> = Vec::with_capacity(r.cells.len());
        for (c, d) in r.cells.drain(..) {
            let d = sort_complex(schema, c, d);
            match merged.last_mut() {
                Some(last) if last.0 == c => last.1 = merge_column_data(schema, c, &last.1, &d),
                _ => merged.push((c, d)),
            }
        }
        r.cells = merged;
        match dedup.last_mut() {
            Some(last) if cmp.compare(&last.clustering.0, &r.clustering.0) == Ordering::Equal => {
                *last = merge_rows(schema, last, &r);
            }
            _ => dedup.push(r),
        }
    }
    let staged = PartitionUpdate {
        partition_deletion: u.partition_deletion,
        static_row: u.static_row.clone().map(|mut r| {
            r.cells.sort_by_key(|(c, _)| *c);
            r.cells = r
                .cells
                .into_iter()
                .map(|(c, d)| (c, sort_complex(schema, c, d)))
                .collect();
            r
        }),
        rows: dedup,
        range_tombstones: u.range_tombstones.clone(),
    };
    merge_partition_updates(schema, &staged, &PartitionUpdate::default())
}

fn sort_complex(schema: &TableSchema, col: ColumnId, d: ColumnData) -> ColumnData {
    match d {
        ColumnData::Complex {
            deletion,
            mut cells,
        } => {
            let ty = schema.column_by_id(col).map(|c| c.ty.clone());
            cells.sort_by(|x, y| {
                ty.as_ref()
                    .map_or_else(|| x.0.cmp(&y.0), |t| t.compare_cell_path(&x.0, &y.0))
            });
            let mut out: Vec<(Bytes, Cell)> = Vec::with_capacity(cells.len());
            for (p, c) in cells {
                match out.last_mut() {
                    Some(last) if last.0 == p => last.1 = reconcile_cells(&last.1, &c),
                    _ => out.push((p, c)),
                }
            }
            if let Some(del) = deletion {
                out.retain(|(_, c)| !del.deletes(c.timestamp));
            }
            ColumnData::Complex {
                deletion,
                cells: out,
            }
        }
        s => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cql_type::CqlType;
    use crate::schema::{ClusteringOrder, ColumnDef, ColumnKind, TableOptions};

    pub(crate) fn test_schema() -> TableSchema {
        let cd = |n: &str, ty: CqlType, kind: ColumnKind, order| ColumnDef {
            name: n.into(),
            ty,
            kind,
            position: 0,
            order,
        };
        TableSchema::new(
            TableId(7),
            "ks",
            "t",
            vec![
                cd(
                    "k",
                    CqlType::Blob,
                    ColumnKind::PartitionKey,
                    ClusteringOrder::Asc,
                ),
                cd(
                    "c",
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
                cd(
                    "s",
                    CqlType::Set {
                        elem: Box::new(CqlType::Int),
                        frozen: false,
                    },
                    ColumnKind::Regular,
                    ClusteringOrder::Asc,
                ),
                cd(
                    "st",
                    CqlType::Blob,
                    ColumnKind::Static,
                    ClusteringOrder::Asc,
                ),
            ],
            TableOptions::default(),
        )
    }

    #[test]
    fn cell_rules() {
        let v = |s: &'static [u8]| Bytes::from_static(s);
        let a = Cell::live(10, v(b"a"));
        let b = Cell::live(11, v(b"a"));
        assert_eq!(reconcile_cells(&a, &b), b);
        let t = Cell::tombstone(10, 100);
        assert_eq!(reconcile_cells(&a, &t), t, "tie: tombstone wins");
        let e = Cell::expiring(10, 5, 100, v(b"a"));
        assert_eq!(reconcile_cells(&a, &e), e, "tie: expiring beats regular");
        assert_eq!(reconcile_cells(&e, &t), t, "tie: tombstone beats expiring");
        let bigger = Cell::live(10, v(b"b"));
        assert_eq!(reconcile_cells(&a, &bigger), bigger, "tie: greater value");
        let e2 = Cell::expiring(10, 5, 200, v(b"a"));
        assert_eq!(reconcile_cells(&e2, &e), e2, "later expiry");
        assert_eq!(e.expire(104), None);
        let ex = e.expire(105).unwrap();
        assert!(ex.is_tombstone);
        assert_eq!(ex.local_expiry, 100);
    }

    #[test]
    fn counters() {
        let c1 = Cell::counter(
            5,
            &[CounterShard {
                counter_id: 1,
                clock: 1,
                value: 3,
            }],
        );
        let c2 = Cell::counter(
            6,
            &[CounterShard {
                counter_id: 1,
                clock: 2,
                value: 5,
            }],
        );
        let c3 = Cell::counter(
            4,
            &[CounterShard {
                counter_id: 2,
                clock: 1,
                value: 10,
            }],
        );
        let m = reconcile_cells(&reconcile_cells(&c1, &c2), &c3);
        assert_eq!(counter_value(&m.value), 15);
        assert_eq!(reconcile_cells(&m, &m), m);
        let t = Cell::tombstone(1, 0);
        assert_eq!(reconcile_cells(&m, &t), t, "counter tombstone always wins");
    }

    #[test]
    fn range_tombstones_normalize() {
        let s = test_schema();
        let cmp = s.clustering_comparator();
        let i = |x: i32| Bytes::copy_from_slice(&x.to_be_bytes());
        // DESC: clustering order is 9, 8, ..., 0.
        let rt = |a: i32, b: i32, ts: i64| RangeTombstone {
            start: ClusteringBound::inclusive(vec![i(a)]),
            end: ClusteringBound::inclusive(vec![i(b)]),
            deletion: DeletionTime::new(ts, 0),
        };
        let out = normalize_range_tombstones(&cmp, &[rt(8, 3, 5), rt(5, 1, 7)], None);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].deletion.marked_for_delete_at, 5);
        assert_eq!(out[0].end, ClusteringBound::exclusive(vec![i(5)]));
        assert_eq!(out[1].start, ClusteringBound::inclusive(vec![i(5)]));
        assert_eq!(out[1].end, ClusteringBound::inclusive(vec![i(1)]));
        assert!(
            rt(3, 8, 1).is_empty(&cmp),
            "ascending range in a DESC table is empty"
        );
        assert_eq!(
            range_deletion_at(&cmp, &out, &Clustering(vec![i(6)])).map(|d| d.marked_for_delete_at),
            Some(5)
        );
        assert_eq!(
            range_deletion_at(&cmp, &out, &Clustering(vec![i(2)])).map(|d| d.marked_for_delete_at),
            Some(7)
        );
        assert_eq!(range_deletion_at(&cmp, &out, &Clustering(vec![i(0)])), None);
    }
}

#[cfg(test)]
pub(crate) mod proptests {
    use super::tests::test_schema;
    use super::*;
    use proptest::prelude::*;

    fn i(x: i32) -> Bytes {
        Bytes::copy_from_slice(&x.to_be_bytes())
    }

    fn cell() -> impl Strategy<Value = Cell> {
        (
            0i64..4,
            0u8..4,
            0i32..3,
            prop::sample::select(vec![&b"a"[..], b"b", b""]),
        )
            .prop_map(|(ts, kind, t, v)| match kind {
                0 | 1 => Cell::live(ts, Bytes::from_static(v)),
                2 => Cell::expiring(ts, 1 + t, 100, Bytes::from_static(v)),
                _ => Cell::tombstone(ts, 100 + t),
            })
    }

    fn deletion() -> impl Strategy<Value = DeletionTime> {
        (0i64..4, 0i32..2).prop_map(|(t, l)| DeletionTime::new(t, l))
    }

    pub(crate) fn row(static_row: bool) -> impl Strategy<Value = Row> {
        (
            0i32..5,
            prop::option::of((0i64..4).prop_map(LivenessInfo::new)),
            prop::option::weighted(0.2, deletion()),
            prop::option::of(cell()),
            prop::option::of((
                prop::option::weighted(0.3, deletion()),
                prop::collection::vec((0i32..4, cell()), 0..3),
            )),
        )
            .prop_map(move |(c, marker, deletion, v, set)| {
                let mut cells = Vec::new();
                if let Some(v) = v {
                    cells.push((if static_row { 4 } else { 2 }, ColumnData::Simple(v)));
                }
                if let Some((d, els)) = set.filter(|_| !static_row) {
                    cells.push((
                        3,
                        ColumnData::Complex {
                            deletion: d,
                            cells: els.into_iter().map(|(e, c)| (i(e), c)).collect(),
                        },
                    ));
                }
                Row {
                    clustering: if static_row {
                        Clustering::empty()
                    } else {
                        Clustering(vec![i(c)])
                    },
                    marker: if static_row { None } else { marker },
                    deletion: if static_row { None } else { deletion },
                    cells,
                }
            })
    }

    /// Range tombstones from generated (a, b, start inclusive, end inclusive, deletion): the
    /// bounds are the larger value first when `larger_first`, else the smaller.
    fn tombstones(
        rts: Vec<(i32, i32, bool, bool, DeletionTime)>,
        larger_first: bool,
    ) -> Vec<RangeTombstone> {
        rts.into_iter()
            .map(|(a, b, ia, ib, d)| {
                let (s, e) = if larger_first {
                    (a.max(b), a.min(b))
                } else {
                    (a.min(b), a.max(b))
                };
                RangeTombstone {
                    start: ClusteringBound {
                        prefix: Clustering(vec![i(s)]),
                        inclusive: ia,
                    },
                    end: ClusteringBound {
                        prefix: Clustering(vec![i(e)]),
                        inclusive: ib,
                    },
                    deletion: d,
                }
            })
            .collect()
    }

    pub(crate) fn update() -> impl Strategy<Value = PartitionUpdate> {
        (
            prop::option::weighted(0.2, deletion()),
            prop::option::weighted(0.3, row(true)),
            prop::collection::vec(row(false), 0..4),
            prop::collection::vec(
                (0i32..5, 0i32..5, any::<bool>(), any::<bool>(), deletion()),
                0..3,
            ),
        )
            .prop_map(|(pd, sr, rows, rts)| {
                let s = test_schema();
                let u = PartitionUpdate {
                    partition_deletion: pd,
                    static_row: sr,
                    rows,
                    range_tombstones: tombstones(rts, true),
                };
                canonicalize(&s, &u)
            })
    }

    /// A canonical update of up to 12 rows over 24 clusterings (so merges insert runs
    /// between, before and after the other side's rows), a partition deletion or range
    /// tombstones one time in five.
    fn wide_update() -> impl Strategy<Value = PartitionUpdate> {
        (
            prop::option::weighted(0.1, deletion()),
            prop::option::weighted(0.3, row(true)),
            prop::collection::vec((0i32..24, row(false)), 0..12),
            prop::collection::vec(
                (0i32..24, 0i32..24, any::<bool>(), any::<bool>(), deletion()),
                0..2,
            ),
            0u8..10,
        )
            .prop_map(|(pd, sr, rows, rts, rt_chance)| {
                let rows = rows
                    .into_iter()
                    .map(|(c, r)| Row {
                        clustering: Clustering(vec![i(c)]),
                        ..r
                    })
                    .collect();
                let u = PartitionUpdate {
                    partition_deletion: pd,
                    static_row: sr,
                    rows,
                    range_tombstones: if rt_chance == 0 {
                        tombstones(rts, true)
                    } else {
                        Vec::new()
                    },
                };
                canonicalize(&test_schema(), &u)
            })
    }

    /// A row of simple cells of columns 2, 5 and 9 (each there or not), with or without
    /// a marker, every timestamp moved forward by `shift`.
    fn simple_row() -> impl Strategy<Value = Row> {
        (
            prop::option::of((0i64..4, any::<bool>())),
            prop::collection::vec(prop::option::of(cell()), 3),
            0i64..5,
        )
            .prop_map(|(marker, cells, shift)| Row {
                clustering: Clustering::empty(),
                marker: marker.map(|(t, ttl)| {
                    if ttl {
                        LivenessInfo::expiring(t + shift, 10, 100)
                    } else {
                        LivenessInfo::new(t + shift)
                    }
                }),
                deletion: None,
                cells: [2, 5, 9]
                    .into_iter()
                    .zip(cells)
                    .filter_map(|(id, c)| {
                        c.map(|mut c| {
                            c.timestamp += shift;
                            (id, ColumnData::Simple(c))
                        })
                    })
                    .collect(),
            })
    }

    proptest! {
        /// Where a row's summary says it shadows an older one whole, merging the two one-row
        /// partitions (either way round) gives the newer one unchanged: what lets
        /// compaction keep it without decoding either.
        #[test]
        fn a_row_that_shadows_whole_is_the_merge(old in simple_row(), new in simple_row()) {
            let summary = |r: &Row| {
                let mut b = Vec::new();
                crate::codec::put_row(&mut b, r, 0);
                crate::codec::summarize_simple_row(&b, 0)
            };
            let (Some(o), Some(n)) = (summary(&old), summary(&new)) else {
                return Err(TestCaseError::fail("simple rows must summarize"));
            };
            if n.shadows_whole(&o) {
                let s = test_schema();
                let one = |r: &Row| PartitionUpdate { rows: vec![r.clone()], ..Default::default() };
                let (old, new) = (one(&old), one(&new));
                prop_assert_eq!(&merge_partition_updates(&s, &old, &new), &new);
                prop_assert_eq!(&merge_partition_updates(&s, &new, &old), &new);
            }
        }

        #[test]
        fn cells_form_a_semilattice(a in cell(), b in cell(), c in cell()) {
            prop_assert_eq!(reconcile_cells(&a, &b), reconcile_cells(&b, &a));
            prop_assert_eq!(reconcile_cells(&a, &a), a.clone());
            prop_assert_eq!(
                reconcile_cells(&reconcile_cells(&a, &b), &c),
                reconcile_cells(&a, &reconcile_cells(&b, &c))
            );
        }

        #[test]
        fn own_deletions_in_place_equal_the_merge_with_nothing(
            pd in prop::option::weighted(0.3, deletion()),
            sr in prop::option::weighted(0.3, row(true)),
            rows in prop::collection::vec(row(false), 0..5),
            rts in prop::collection::vec(
                (0i32..5, 0i32..5, any::<bool>(), any::<bool>(), deletion()),
                0..3,
            ),
        ) {
            let s = test_schema();
            let cmp = s.clustering_comparator();
            // Raw (not canonical) data, sorted and unique by clustering as stored.
            let mut rows = rows;
            rows.sort_by(|x, y| cmp.compare(&x.clustering.0, &y.clustering.0));
            rows.dedup_by(|x, y| cmp.compare(&x.clustering.0, &y.clustering.0).is_eq());
            let u = PartitionUpdate {
                partition_deletion: pd,
                static_row: sr,
                rows,
                range_tombstones: tombstones(rts, false),
            };
            let expected = merge_partition_updates(&s, &u, &PartitionUpdate::default());
            let mut got = u.clone();
            apply_own_deletions(&s, &mut got);
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn partition_merge_is_a_semilattice(a in update(), b in update(), c in update()) {
            let s = test_schema();
            let m = |x: &PartitionUpdate, y: &PartitionUpdate| merge_partition_updates(&s, x, y);
            prop_assert_eq!(m(&a, &a), a.clone());
            prop_assert_eq!(m(&a, &b), m(&b, &a));
            prop_assert_eq!(m(&m(&a, &b), &c), m(&a, &m(&b, &c)));
        }

        /// The in-place merge gives what the general one does (or declines, changing
        /// nothing, exactly when a side has a partition deletion or range tombstones), and
        /// shows its observer every row it merges or inserts.
        #[test]
        fn in_place_merge_equals_the_merge(a in wide_update(), b in wide_update()) {
            struct Seen { replaced: usize, placed: usize }
            impl InPlaceMerge for Seen {
                fn replacing(&mut self, _: &Row) { self.replaced += 1; }
                fn placed(&mut self, _: &mut Row) { self.placed += 1; }
            }
            let s = test_schema();
            let want = merge_partition_updates(&s, &a, &b);
            let mut got = a.clone();
            let mut seen = Seen { replaced: 0, placed: 0 };
            let fits = a.partition_deletion.is_none() && a.range_tombstones.is_empty()
                && b.partition_deletion.is_none() && b.range_tombstones.is_empty();
            prop_assert_eq!(merge_into_in_place(&s, &mut got, UpdateView::of(&b), &mut seen), fits);
            if fits {
                prop_assert_eq!(&got, &want);
                prop_assert!(seen.replaced <= seen.placed);
                prop_assert!(seen.placed <= b.rows.len() + usize::from(b.static_row.is_some()));
            } else {
                prop_assert_eq!(&got, &a);
                prop_assert_eq!(seen.placed, 0);
            }
        }

        #[test]
        fn owned_merge_equals_borrowed_merge(a in update(), b in update()) {
            let s = test_schema();
            let want = merge_partition_updates(&s, &a, &b);
            prop_assert_eq!(merge_partition_updates_owned(&s, a.clone(), &b), want.clone());
            prop_assert_eq!(merge_partition_updates_owned_view(&s, a, UpdateView::of(&b)), want);
        }

        /// Merging in place (same columns: the cells replaced in `a`'s vector) or not
        /// gives what the borrowed merge gives.
        #[test]
        fn rows_merged_in_place_equal_the_borrowed_merge(
            a in prop_oneof![simple_row(), row(false)],
            b in prop_oneof![simple_row(), row(false)],
        ) {
            let s = test_schema();
            let want = merge_rows(&s, &a, &b);
            prop_assert_eq!(merge_rows_into(&s, a, &b), want);
        }
    }
}
