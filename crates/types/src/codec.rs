//! Compact binary encoding of mutations (commitlog entries, later inter-node RPC).
//!
//! Layout (all varints are LEB128; `z` = zig-zag signed varint):
//! ```text
//! mutation  := version:u8(=1) table:16B token:i64be key:bytes base_ts:z update
//! update    := flags:u8 [deletion] [row(static)] nrows:var row* nrts:var rt*
//!              flags: 1 = partition deletion, 2 = static row
//! deletion  := ts_delta:z ldt:z
//! row       := clustering flags:u8 [ts_delta:z ttl:var expiry:z] [deletion] ncols:var column*
//!              flags: 1 = marker, 2 = row deletion
//! clustering:= n:var bytes*
//! column    := id:var kind:u8 (0 = simple cell | 1 = complex: hasdel:u8 [deletion] n:var (path:bytes cell)*)
//! cell      := flags:u8 ts_delta:z [ttl:var] [expiry_or_ldt:z] [value:bytes]
//!
//! Local deletion and expiry times (`ldt`, `expiry`) are seconds as 64-bit zig-zag varints:
//! values past 2038 are valid (encoders before that could not produce them, and their
//! decoders rejected them as out of i32 range).
//!              flags: 1 = tombstone, 2 = expiring, 4 = counter
//! rt        := bound bound deletion      bound := inclusive:u8 clustering
//! bytes     := len:var raw
//! ```
//! Timestamps are stored as deltas from `base_ts` (the first timestamp in the mutation),
//! so a typical mutation spends one byte per timestamp.

use bytes::Bytes;

use crate::data::*;
use crate::schema::TableId;

pub const MUTATION_FORMAT_VERSION: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed mutation at byte {offset}: {reason}")]
pub struct DecodeError {
    pub offset: usize,
    pub reason: &'static str,
}

fn put_var(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_z(out: &mut Vec<u8>, v: i64) {
    put_var(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_var(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn first_timestamp(u: &PartitionUpdate) -> i64 {
    if let Some(d) = u.partition_deletion {
        return d.marked_for_delete_at;
    }
    for r in u.static_row.iter().chain(u.rows.iter()) {
        if let Some(m) = r.marker {
            return m.timestamp;
        }
        for (_, d) in &r.cells {
            match d {
                ColumnData::Simple(c) => return c.timestamp,
                ColumnData::Complex { cells, deletion } => {
                    if let Some(c) = cells.first() {
                        return c.1.timestamp;
                    }
                    if let Some(d) = deletion {
                        return d.marked_for_delete_at;
                    }
                }
            }
        }
        if let Some(d) = r.deletion {
            return d.marked_for_delete_at;
        }
    }
    u.range_tombstones
        .first()
        .map_or(0, |r| r.deletion.marked_for_delete_at)
}

/// Appends the encoding of `m` to `out`.
pub fn encode_mutation(m: &Mutation, out: &mut Vec<u8>) {
    out.push(MUTATION_FORMAT_VERSION);
    out.extend_from_slice(&m.table.to_bytes());
    out.extend_from_slice(&m.key.token.to_be_bytes());
    put_bytes(out, &m.key.key);
    let base = first_timestamp(&m.update);
    put_z(out, base);
    encode_update(&m.update, base, out);
}

/// Appends a partition update on its own: its base timestamp, then [`encode_update`]
/// relative to it (read back by [`read_update_standalone`]).
pub fn encode_update_standalone(u: &PartitionUpdate, out: &mut Vec<u8>) {
    let base = first_timestamp(u);
    put_z(out, base);
    encode_update(u, base, out);
}

/// What [`encode_update_standalone`] writes for a partition of one row and nothing else,
/// from that row already encoded by [`put_row`] relative to `base` (a copy, no decode).
pub fn encode_row_standalone(base: i64, row: &[u8], out: &mut Vec<u8>) {
    put_z(out, base);
    out.push(0);
    put_var(out, 1);
    out.extend_from_slice(row);
    put_var(out, 0);
}

/// Encodes a partition update with timestamps relative to `base`.
pub fn encode_update(u: &PartitionUpdate, base: i64, out: &mut Vec<u8>) {
    let rows: Vec<&Row> = u.rows.iter().collect();
    encode_update_parts(
        u.partition_deletion,
        u.static_row.as_ref(),
        &rows,
        &u.range_tombstones,
        base,
        out,
    );
}

/// [`encode_update`] from borrowed parts (lets a memtable be written without cloning).
pub fn encode_update_parts(
    partition_deletion: Option<DeletionTime>,
    static_row: Option<&Row>,
    rows: &[&Row],
    range_tombstones: &[RangeTombstone],
    base: i64,
    out: &mut Vec<u8>,
) {
    encode_update_head(partition_deletion, static_row, rows.len(), base, out);
    for r in rows {
        put_row(out, r, base);
    }
    encode_update_tail(range_tombstones, base, out);
}

/// The part of [`encode_update_parts`] before the clustering rows: flags, partition
/// deletion, static row and the count of the rows that follow. With the rows (each by
/// [`put_row`]) and [`encode_update_tail`] after it, the same bytes: a partition too large
/// to hold decoded is written this way a row at a time.
pub fn encode_update_head(
    partition_deletion: Option<DeletionTime>,
    static_row: Option<&Row>,
    rows: usize,
    base: i64,
    out: &mut Vec<u8>,
) {
    let flags = partition_deletion.is_some() as u8 | ((static_row.is_some() as u8) << 1);
    out.push(flags);
    if let Some(d) = partition_deletion {
        put_deletion(out, d, base);
    }
    if let Some(r) = static_row {
        put_row(out, r, base);
    }
    put_var(out, rows as u64);
}

/// The part of [`encode_update_parts`] after the clustering rows: the range tombstones.
pub fn encode_update_tail(range_tombstones: &[RangeTombstone], base: i64, out: &mut Vec<u8>) {
    put_var(out, range_tombstones.len() as u64);
    for rt in range_tombstones {
        put_bound(out, &rt.start);
        put_bound(out, &rt.end);
        put_deletion(out, rt.deletion, base);
    }
}

fn put_deletion(out: &mut Vec<u8>, d: DeletionTime, base: i64) {
    put_z(out, d.marked_for_delete_at.wrapping_sub(base));
    put_z(out, d.local_deletion_time);
}

/// A clustering as rows begin with it ([`read_clustering`] reads it back).
pub fn put_clustering(out: &mut Vec<u8>, c: &Clustering) {
    put_var(out, c.0.len() as u64);
    for b in &c.0 {
        put_bytes(out, b);
    }
}

fn put_bound(out: &mut Vec<u8>, b: &ClusteringBound) {
    out.push(b.inclusive as u8);
    put_clustering(out, &b.prefix);
}

/// Encodes one row (used by SSTables too).
pub fn put_row(out: &mut Vec<u8>, r: &Row, base: i64) {
    put_clustering(out, &r.clustering);
    out.push(r.marker.is_some() as u8 | ((r.deletion.is_some() as u8) << 1));
    if let Some(m) = r.marker {
        put_z(out, m.timestamp.wrapping_sub(base));
        put_var(out, m.ttl as u32 as u64);
        put_z(out, m.local_expiry);
    }
    if let Some(d) = r.deletion {
        put_deletion(out, d, base);
    }
    put_var(out, r.cells.len() as u64);
    for (id, d) in &r.cells {
        put_var(out, *id as u64);
        match d {
            ColumnData::Simple(c) => {
                out.push(0);
                put_cell(out, c, base);
            }
            ColumnData::Complex { deletion, cells } => {
                out.push(1);
                out.push(deletion.is_some() as u8);
                if let Some(d) = deletion {
                    put_deletion(out, *d, base);
                }
                put_var(out, cells.len() as u64);
                for (p, c) in cells {
                    put_bytes(out, p);
                    put_cell(out, c, base);
                }
            }
        }
    }
}

fn put_cell(out: &mut Vec<u8>, c: &Cell, base: i64) {
    let expiring = !c.is_tombstone && c.ttl > 0;
    out.push(c.is_tombstone as u8 | ((expiring as u8) << 1) | ((c.is_counter as u8) << 2));
    put_z(out, c.timestamp.wrapping_sub(base));
    if expiring {
        put_var(out, c.ttl as u32 as u64);
    }
    if expiring || c.is_tombstone {
        put_z(out, c.local_expiry);
    }
    if !c.is_tombstone {
        put_bytes(out, &c.value);
    }
}

/// A reader over an encoded buffer; values are sliced out of the shared `Bytes`.
/// The most bytes a varint takes (7 bits each).
const VAR_MAX_BYTES: usize = 10;

/// Reads the varint at `*pos` of `buf`, advancing `*pos` past the bytes read; `None` when
/// `buf` ends first or the varint runs past [`VAR_MAX_BYTES`].
pub fn read_var(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The signed number a zigzag-encoded varint holds.
fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

pub struct Reader {
    buf: Bytes,
    pos: usize,
    /// Offset of `buf` in the enclosing file/buffer, for error messages.
    base_offset: usize,
}

impl Reader {
    pub fn new(buf: Bytes) -> Self {
        Reader {
            buf,
            pos: 0,
            base_offset: 0,
        }
    }
    pub fn with_offset(buf: Bytes, base_offset: usize) -> Self {
        Reader {
            buf,
            pos: 0,
            base_offset,
        }
    }
    pub fn position(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub fn err(&self, reason: &'static str) -> DecodeError {
        DecodeError {
            offset: self.base_offset + self.pos,
            reason,
        }
    }
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.err("unexpected end"))?;
        self.pos += 1;
        Ok(b)
    }
    pub fn fixed<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self
            .buf
            .get(self.pos..self.pos + N)
            .ok_or_else(|| self.err("unexpected end"))?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        self.pos += N;
        Ok(a)
    }
    pub fn var(&mut self) -> Result<u64, DecodeError> {
        let start = self.pos;
        let v = read_var(&self.buf, &mut self.pos);
        v.ok_or_else(|| {
            self.err(if self.pos - start == VAR_MAX_BYTES {
                "varint too long"
            } else {
                "unexpected end"
            })
        })
    }
    pub fn z(&mut self) -> Result<i64, DecodeError> {
        self.var().map(unzigzag)
    }
    /// A count, bounded by the bytes left (each element takes at least one byte).
    pub fn count(&mut self) -> Result<usize, DecodeError> {
        let n = self.var()?;
        if n > self.remaining() as u64 {
            return Err(self.err("count larger than the remaining bytes"));
        }
        Ok(n as usize)
    }
    /// Steps over what [`bytes`](Self::bytes) would read.
    pub fn skip_bytes(&mut self) -> Result<(), DecodeError> {
        let n = self.var()?;
        if n > self.remaining() as u64 {
            return Err(self.err("length past the end"));
        }
        self.pos += n as usize;
        Ok(())
    }
    pub fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let n = self.var()?;
        if n > self.remaining() as u64 {
            return Err(self.err("length past the end"));
        }
        let b = self.buf.slice(self.pos..self.pos + n as usize);
        self.pos += n as usize;
        Ok(b)
    }
}

pub fn decode_mutation(buf: Bytes) -> Result<Mutation, DecodeError> {
    let mut r = Reader::new(buf);
    let m = read_mutation(&mut r)?;
    if r.remaining() != 0 {
        return Err(r.err("trailing bytes"));
    }
    Ok(m)
}

pub fn read_mutation(r: &mut Reader) -> Result<Mutation, DecodeError> {
    if r.u8()? != MUTATION_FORMAT_VERSION {
        return Err(r.err("unknown mutation format version"));
    }
    let table = TableId::from_bytes(r.fixed::<16>()?);
    let token = i64::from_be_bytes(r.fixed::<8>()?);
    let key = r.bytes()?;
    let base = r.z()?;
    let update = read_update(r, base)?;
    Ok(Mutation {
        table,
        key: PartitionKey { token, key },
        update,
    })
}

/// Reads what [`encode_update_standalone`] wrote.
pub fn read_update_standalone(r: &mut Reader) -> Result<PartitionUpdate, DecodeError> {
    let base = r.z()?;
    read_update(r, base)
}

pub fn read_update(r: &mut Reader, base: i64) -> Result<PartitionUpdate, DecodeError> {
    read_update_picking(r, base, |_| RowPick::Keep).map(|(u, _)| u)
}

fn read_deletion(r: &mut Reader, base: i64) -> Result<DeletionTime, DecodeError> {
    let ts = r.z()?.wrapping_add(base);
    Ok(DeletionTime {
        marked_for_delete_at: ts,
        local_deletion_time: r.z()?,
    })
}

/// Reads a clustering as [`put_row`] writes it (`n:var bytes*`).
pub fn read_clustering(r: &mut Reader) -> Result<Clustering, DecodeError> {
    let n = r.count()?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(r.bytes()?);
    }
    Ok(Clustering(v))
}

fn read_bound(r: &mut Reader) -> Result<ClusteringBound, DecodeError> {
    let inclusive = match r.u8()? {
        0 => false,
        1 => true,
        _ => return Err(r.err("bad bound flag")),
    };
    Ok(ClusteringBound {
        inclusive,
        prefix: read_clustering(r)?,
    })
}

/// What [`read_update_picking`] does with a clustering row, told by its clustering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowPick {
    /// Decode it.
    Keep,
    /// Step over it: parsed and checked as [`read_row`] would, nothing built.
    Skip,
    /// Neither it nor any later row is wanted, and the caller knows the update holds no
    /// range tombstones: decoding ends here.
    End,
}

/// [`read_update`] that builds only the clustering rows `pick` keeps (the partition
/// deletion and the static row are always read). Returns the update and whether `pick`
/// ended it early ([`RowPick::End`]): then the reader stops inside the update, and the
/// update has no range tombstones.
pub fn read_update_picking(
    r: &mut Reader,
    base: i64,
    pick: impl FnMut(&Clustering) -> RowPick,
) -> Result<(PartitionUpdate, bool), DecodeError> {
    let head = read_update_head(r, base)?;
    if head.rows > r.remaining() {
        return Err(r.err("count larger than the remaining bytes"));
    }
    let mut rows = Vec::with_capacity(head.rows);
    let ended = read_rows_picking(r, base, head.rows, pick, &mut rows)?;
    let range_tombstones = if ended {
        Vec::new()
    } else {
        read_range_tombstones(r, base)?
    };
    let u = PartitionUpdate {
        partition_deletion: head.partition_deletion,
        static_row: head.static_row,
        rows,
        range_tombstones,
    };
    Ok((u, ended))
}

/// What an update's encoding holds before its clustering rows.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateHead {
    pub partition_deletion: Option<DeletionTime>,
    pub static_row: Option<Row>,
    /// How many clustering rows follow.
    pub rows: usize,
}

/// Reads an update's flags, partition deletion, static row and row count: the reader is
/// left at its first clustering row. The count is not checked against the bytes left.
pub fn read_update_head(r: &mut Reader, base: i64) -> Result<UpdateHead, DecodeError> {
    let flags = r.u8()?;
    if flags & !3 != 0 {
        return Err(r.err("bad update flags"));
    }
    let partition_deletion = if flags & 1 != 0 {
        Some(read_deletion(r, base)?)
    } else {
        None
    };
    let static_row = if flags & 2 != 0 {
        Some(read_row(r, base)?)
    } else {
        None
    };
    // Not bounded by the bytes left: a reader of the head alone has none.
    let rows = usize::try_from(r.var()?).map_err(|_| r.err("row count out of range"))?;
    Ok(UpdateHead {
        partition_deletion,
        static_row,
        rows,
    })
}

/// Reads up to `n` clustering rows of an update, pushing onto `rows` those `pick` keeps;
/// returns whether `pick` ended the rows early ([`RowPick::End`]).
pub fn read_rows_picking(
    r: &mut Reader,
    base: i64,
    n: usize,
    mut pick: impl FnMut(&Clustering) -> RowPick,
    rows: &mut Vec<Row>,
) -> Result<bool, DecodeError> {
    for _ in 0..n {
        let clustering = read_clustering(r)?;
        match pick(&clustering) {
            RowPick::Keep => rows.push(read_row_body(r, base, clustering)?),
            RowPick::Skip => skip_row_body(r)?,
            RowPick::End => return Ok(true),
        }
    }
    Ok(false)
}

/// Reads an update's range tombstones: what follows its clustering rows.
pub fn read_range_tombstones(
    r: &mut Reader,
    base: i64,
) -> Result<Vec<RangeTombstone>, DecodeError> {
    let n = r.count()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = read_bound(r)?;
        let end = read_bound(r)?;
        let deletion = read_deletion(r, base)?;
        out.push(RangeTombstone {
            start,
            end,
            deletion,
        });
    }
    Ok(out)
}

/// Steps over `n` clustering rows (checked as [`read_rows_picking`] would), calling
/// `each(start, clustering_end)` with each row's first position and the position just
/// after its clustering (so `start..clustering_end` is its clustering's encoding, which
/// [`read_clustering`] reads back).
pub fn scan_rows(
    r: &mut Reader,
    n: usize,
    mut each: impl FnMut(usize, usize),
) -> Result<(), DecodeError> {
    for _ in 0..n {
        let start = r.position();
        let k = r.count()?;
        for _ in 0..k {
            r.skip_bytes()?;
        }
        each(start, r.position());
        skip_row_body(r)?;
    }
    Ok(())
}

pub fn read_row(r: &mut Reader, base: i64) -> Result<Row, DecodeError> {
    let clustering = read_clustering(r)?;
    read_row_body(r, base, clustering)
}

/// The rest of a row [`put_row`] wrote, after its clustering.
fn read_row_body(r: &mut Reader, base: i64, clustering: Clustering) -> Result<Row, DecodeError> {
    let flags = r.u8()?;
    if flags & !3 != 0 {
        return Err(r.err("bad row flags"));
    }
    let marker = if flags & 1 != 0 {
        let timestamp = r.z()?.wrapping_add(base);
        let ttl = r.var()? as u32 as i32;
        let local_expiry = r.z()?;
        Some(LivenessInfo {
            timestamp,
            ttl,
            local_expiry,
        })
    } else {
        None
    };
    let deletion = if flags & 2 != 0 {
        Some(read_deletion(r, base)?)
    } else {
        None
    };
    let n = r.count()?;
    let mut cells = Vec::with_capacity(n);
    for _ in 0..n {
        let id = u32::try_from(r.var()?).map_err(|_| r.err("column id out of range"))?;
        let d = match r.u8()? {
            0 => ColumnData::Simple(read_cell(r, base)?),
            1 => {
                let deletion = match r.u8()? {
                    0 => None,
                    1 => Some(read_deletion(r, base)?),
                    _ => return Err(r.err("bad complex deletion flag")),
                };
                let n = r.count()?;
                let mut cs = Vec::with_capacity(n);
                for _ in 0..n {
                    let p = r.bytes()?;
                    cs.push((p, read_cell(r, base)?));
                }
                ColumnData::Complex {
                    deletion,
                    cells: cs,
                }
            }
            _ => return Err(r.err("bad column kind")),
        };
        cells.push((id, d));
    }
    Ok(Row {
        clustering,
        marker,
        deletion,
        cells,
    })
}

/// What a row of simple cells holds, read from its [`put_row`] bytes without building it
/// (no allocation, no reference counting): enough to tell whether the row shadows an
/// older version whole and until when it is its own live view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleRowSummary {
    pub clustering_empty: bool,
    pub marker: Option<LivenessInfo>,
    /// Cells (one per column, all simple and not counters).
    pub cells: usize,
    /// The oldest cell timestamp (`Timestamp::MAX` without cells).
    pub min_cell_timestamp: Timestamp,
    /// The newest timestamp of the marker and the cells (`Timestamp::MIN` without either).
    pub max_timestamp: Timestamp,
    pub has_tombstone_cell: bool,
    /// The earliest expiry of an expiring cell or marker (`LocalTime::MAX` without one).
    pub earliest_expiry: LocalTime,
    /// The oldest timestamp of the marker and the cells (`Timestamp::MAX` without either).
    pub min_timestamp: Timestamp,
    pub tombstone_cells: usize,
    /// The earliest and latest local time of a tombstone cell's deletion or an expiring
    /// cell's or marker's expiry.
    pub local_times: Option<(LocalTime, LocalTime)>,
    /// Whether the marker or a live cell has no TTL.
    pub non_expiring: bool,
    /// The column ids of the cells below 64, as bits (bit `i` for column id `i`).
    pub column_mask: u64,
    /// Whether a cell has a column id of 64 or more (not in `column_mask`).
    pub columns_past_mask: bool,
}

impl SimpleRowSummary {
    /// Whether this row alone is what merging it with `older` gives: it holds a marker or
    /// a cell, every column of `older` is here, each of this row's timestamps is newer than all of `older`'s,
    /// this row has no tombstone and nothing that expires, and it has a marker if
    /// `older` has one. Both rows must be of the same clustering (the caller's to check).
    pub fn shadows_whole(&self, older: &SimpleRowSummary) -> bool {
        // A row of nothing is no row: merging drops it.
        (self.marker.is_some() || self.cells > 0)
            && self.local_times.is_none()
            && !self.columns_past_mask
            && !older.columns_past_mask
            && older.column_mask & !self.column_mask == 0
            && self.min_timestamp > older.max_timestamp
            && (older.marker.is_none() || self.marker.is_some())
    }
}

/// Summarizes a row [`put_row`] wrote with `base`, when it has no row deletion and only
/// simple, non-counter cells; `None` for any other row and for bytes that do not decode
/// (the caller falls back to [`read_row`]).
pub fn summarize_simple_row(buf: &[u8], base: i64) -> Option<SimpleRowSummary> {
    let mut c = SliceCursor { buf, pos: 0 };
    let s = summarize_row_at(&mut c, base)?;
    (c.pos == buf.len()).then_some(s)
}

/// The bytes of the clustering a [`put_row`] encoding starts with; `None` for bytes that do
/// not decode. Rows whose prefixes are byte-equal have equal clusterings.
pub fn row_clustering_prefix(buf: &[u8]) -> Option<&[u8]> {
    let mut c = SliceCursor { buf, pos: 0 };
    for _ in 0..c.var()? {
        c.skip_bytes()?;
    }
    buf.get(..c.pos)
}

/// Summarizes a partition's [`encode_update_standalone`] bytes when the partition is one
/// row of simple cells and nothing else (what [`encode_row_standalone`] writes): its base
/// and the row's summary; `None` for any other partition and for bytes that do not decode.
pub fn summarize_single_row_partition(buf: &[u8]) -> Option<(i64, SimpleRowSummary)> {
    let mut c = SliceCursor { buf, pos: 0 };
    let base = c.z()?;
    // No partition deletion, no static row; one row.
    if c.u8()? != 0 || c.var()? != 1 {
        return None;
    }
    let s = summarize_row_at(&mut c, base)?;
    // No range tombstones, and nothing after them.
    (c.var()? == 0 && c.pos == buf.len()).then_some((base, s))
}

/// [`summarize_simple_row`] of the row at the cursor, leaving the cursor after it.
fn summarize_row_at(c: &mut SliceCursor<'_>, base: i64) -> Option<SimpleRowSummary> {
    let clustering = c.var()?;
    for _ in 0..clustering {
        c.skip_bytes()?;
    }
    let flags = c.u8()?;
    if flags != 0 && flags != 1 {
        // A row deletion, or bad flags.
        return None;
    }
    let mut s = SimpleRowSummary {
        clustering_empty: clustering == 0,
        marker: None,
        cells: 0,
        min_cell_timestamp: Timestamp::MAX,
        max_timestamp: Timestamp::MIN,
        has_tombstone_cell: false,
        earliest_expiry: LocalTime::MAX,
        min_timestamp: Timestamp::MAX,
        tombstone_cells: 0,
        local_times: None,
        non_expiring: false,
        column_mask: 0,
        columns_past_mask: false,
    };
    let note_time = |s: &mut SimpleRowSummary, t: LocalTime| {
        s.local_times = Some(
            s.local_times
                .map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))),
        );
    };
    if flags == 1 {
        let m = LivenessInfo {
            timestamp: c.z()?.wrapping_add(base),
            ttl: c.var()? as u32 as i32,
            local_expiry: c.z()?,
        };
        s.max_timestamp = m.timestamp;
        s.min_timestamp = m.timestamp;
        if m.ttl > 0 {
            s.earliest_expiry = m.local_expiry;
            note_time(&mut s, m.local_expiry);
        } else {
            s.non_expiring = true;
        }
        s.marker = Some(m);
    }
    let n = c.var()?;
    for _ in 0..n {
        // A column id; `read_row` refuses one past u32.
        let id = u32::try_from(c.var()?).ok()?;
        match 1u64.checked_shl(id) {
            Some(bit) => s.column_mask |= bit,
            None => s.columns_past_mask = true,
        }
        if c.u8()? != 0 {
            return None;
        }
        let flags = c.u8()?;
        let (tombstone, expiring) = (flags & 1 != 0, flags & 2 != 0);
        if flags & !3 != 0 || (tombstone && expiring) {
            // A counter, or bad flags.
            return None;
        }
        let ts = c.z()?.wrapping_add(base);
        s.min_cell_timestamp = s.min_cell_timestamp.min(ts);
        s.min_timestamp = s.min_timestamp.min(ts);
        s.max_timestamp = s.max_timestamp.max(ts);
        if expiring {
            if c.var()? as u32 as i32 <= 0 {
                return None;
            }
            let t = c.z()?;
            s.earliest_expiry = s.earliest_expiry.min(t);
            note_time(&mut s, t);
            c.skip_bytes()?;
        } else if tombstone {
            let t = c.z()?;
            note_time(&mut s, t);
            s.has_tombstone_cell = true;
            s.tombstone_cells += 1;
        } else {
            s.non_expiring = true;
            c.skip_bytes()?;
        }
    }
    s.cells = n as usize;
    Some(s)
}

/// A read position in borrowed bytes, for scans that build nothing.
struct SliceCursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl SliceCursor<'_> {
    fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
    fn var(&mut self) -> Option<u64> {
        read_var(self.buf, &mut self.pos)
    }
    fn z(&mut self) -> Option<i64> {
        self.var().map(unzigzag)
    }
    fn skip_bytes(&mut self) -> Option<()> {
        let n = usize::try_from(self.var()?).ok()?;
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len())?;
        self.pos = end;
        Some(())
    }
}

/// Steps over the rest of a row after its clustering, with [`read_row_body`]'s checks.
fn skip_row_body(r: &mut Reader) -> Result<(), DecodeError> {
    let flags = r.u8()?;
    if flags & !3 != 0 {
        return Err(r.err("bad row flags"));
    }
    if flags & 1 != 0 {
        r.var()?;
        r.var()?;
        r.var()?;
    }
    if flags & 2 != 0 {
        r.var()?;
        r.var()?;
    }
    let n = r.count()?;
    for _ in 0..n {
        u32::try_from(r.var()?).map_err(|_| r.err("column id out of range"))?;
        match r.u8()? {
            0 => skip_cell(r)?,
            1 => {
                match r.u8()? {
                    0 => {}
                    1 => {
                        r.var()?;
                        r.var()?;
                    }
                    _ => return Err(r.err("bad complex deletion flag")),
                }
                let n = r.count()?;
                for _ in 0..n {
                    r.skip_bytes()?;
                    skip_cell(r)?;
                }
            }
            _ => return Err(r.err("bad column kind")),
        }
    }
    Ok(())
}

/// Steps over a cell, with [`read_cell`]'s checks.
fn skip_cell(r: &mut Reader) -> Result<(), DecodeError> {
    let flags = r.u8()?;
    if flags & !7 != 0 {
        return Err(r.err("bad cell flags"));
    }
    let is_tombstone = flags & 1 != 0;
    let expiring = flags & 2 != 0;
    if is_tombstone && expiring {
        return Err(r.err("bad cell flags: an expiring tombstone"));
    }
    r.var()?;
    if expiring && r.var()? as u32 as i32 <= 0 {
        return Err(r.err("bad cell: an expiring cell without a positive TTL"));
    }
    if expiring || is_tombstone {
        r.var()?;
    }
    if !is_tombstone {
        r.skip_bytes()?;
    }
    Ok(())
}

fn read_cell(r: &mut Reader, base: i64) -> Result<Cell, DecodeError> {
    let flags = r.u8()?;
    if flags & !7 != 0 {
        return Err(r.err("bad cell flags"));
    }
    let is_tombstone = flags & 1 != 0;
    let expiring = flags & 2 != 0;
    if is_tombstone && expiring {
        // The encoder never writes both: a tombstone has no TTL.
        return Err(r.err("bad cell flags: an expiring tombstone"));
    }
    let timestamp = r.z()?.wrapping_add(base);
    let ttl = if expiring { r.var()? as u32 as i32 } else { 0 };
    if expiring && ttl <= 0 {
        // The encoder writes the expiring flag only with a positive TTL.
        return Err(r.err("bad cell: an expiring cell without a positive TTL"));
    }
    let local_expiry = if expiring || is_tombstone { r.z()? } else { 0 };
    let value = if is_tombstone {
        Bytes::new()
    } else {
        r.bytes()?
    };
    Ok(Cell {
        timestamp,
        ttl,
        local_expiry,
        value,
        is_tombstone,
        is_counter: flags & 4 != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shadows_whole_needs_every_column_newer_and_nothing_that_expires() {
        let x = || Bytes::from_static(b"x");
        let row = |marker: Option<i64>, cells: Vec<(crate::schema::ColumnId, Cell)>| Row {
            clustering: Clustering::empty(),
            marker: marker.map(LivenessInfo::new),
            deletion: None,
            cells: cells
                .into_iter()
                .map(|(i, c)| (i, ColumnData::Simple(c)))
                .collect(),
        };
        let sum = |r: Row| {
            let mut b = Vec::new();
            put_row(&mut b, &r, 0);
            summarize_simple_row(&b, 0).expect("a simple row")
        };
        let old = sum(row(
            Some(5),
            vec![(2, Cell::live(5, x())), (3, Cell::tombstone(6, 1))],
        ));
        let newer = |marker, c2, c3| sum(row(marker, vec![(2, c2), (3, c3)]));
        assert!(newer(Some(7), Cell::live(7, x()), Cell::live(8, x())).shadows_whole(&old));
        // A column of the older row is missing.
        assert!(!sum(row(Some(7), vec![(2, Cell::live(7, x()))])).shadows_whole(&old));
        // A timestamp (the marker's) not newer than the older row's newest.
        assert!(!newer(Some(6), Cell::live(7, x()), Cell::live(8, x())).shadows_whole(&old));
        // No marker where the older row has one.
        assert!(!newer(None, Cell::live(7, x()), Cell::live(8, x())).shadows_whole(&old));
        // A tombstone or an expiring cell in the newer row.
        assert!(!newer(Some(7), Cell::live(7, x()), Cell::tombstone(8, 1)).shadows_whole(&old));
        assert!(
            !newer(Some(7), Cell::expiring(7, 10, 1, x()), Cell::live(8, x())).shadows_whole(&old)
        );
        // A row of nothing shadows nothing (the merge drops it).
        let empty = sum(row(None, vec![]));
        assert!(!empty.shadows_whole(&sum(row(None, vec![]))));
        // Column ids past the mask are not compared.
        let wide = sum(row(None, vec![(70, Cell::live(1, x()))]));
        assert!(!sum(row(Some(7), vec![(70, Cell::live(9, x()))])).shadows_whole(&wide));
    }

    /// What [`summarize_simple_row`] must give for `r`, from the decoded row.
    fn expected_summary(r: &Row) -> Option<SimpleRowSummary> {
        let cells: Vec<&Cell> = r
            .cells
            .iter()
            .map(|(_, d)| match d {
                ColumnData::Simple(c) if !c.is_counter => Some(c),
                _ => None,
            })
            .collect::<Option<_>>()?;
        if r.deletion.is_some() {
            return None;
        }
        let expiries = r
            .marker
            .filter(|m| m.ttl > 0)
            .map(|m| m.local_expiry)
            .into_iter()
            .chain(
                cells
                    .iter()
                    .filter(|c| !c.is_tombstone && c.ttl > 0)
                    .map(|c| c.local_expiry),
            );
        let times = r
            .marker
            .filter(|m| m.ttl > 0)
            .map(|m| m.local_expiry)
            .into_iter()
            .chain(
                cells
                    .iter()
                    .filter(|c| c.is_tombstone || c.ttl > 0)
                    .map(|c| c.local_expiry),
            );
        let stamps = r
            .marker
            .map(|m| m.timestamp)
            .into_iter()
            .chain(cells.iter().map(|c| c.timestamp));
        Some(SimpleRowSummary {
            min_timestamp: stamps.min().unwrap_or(Timestamp::MAX),
            tombstone_cells: cells.iter().filter(|c| c.is_tombstone).count(),
            local_times: times.clone().min().zip(times.max()),
            non_expiring: r.marker.is_some_and(|m| m.ttl <= 0)
                || cells.iter().any(|c| !c.is_tombstone && c.ttl <= 0),
            clustering_empty: r.clustering.0.is_empty(),
            marker: r.marker,
            cells: cells.len(),
            min_cell_timestamp: cells
                .iter()
                .map(|c| c.timestamp)
                .min()
                .unwrap_or(Timestamp::MAX),
            max_timestamp: r.max_timestamp(),
            has_tombstone_cell: cells.iter().any(|c| c.is_tombstone),
            earliest_expiry: expiries.min().unwrap_or(LocalTime::MAX),
            column_mask: r
                .cells
                .iter()
                .filter_map(|(id, _)| 1u64.checked_shl(*id))
                .fold(0, |m, b| m | b),
            columns_past_mask: r.cells.iter().any(|(id, _)| *id >= 64),
        })
    }

    proptest! {
        /// The summary of a row's bytes is what the decoded row says (`None` for rows
        /// with a deletion or a complex cell), at any base; a counter cell gives `None`,
        /// and so do the bytes cut short or with a byte more.
        #[test]
        fn simple_row_summary_matches_the_decoded_row(
            r in crate::data::proptests::row(false),
            s in crate::data::proptests::row(true),
            base in -3i64..5,
        ) {
            for r in [r, s] {
                let mut buf = Vec::new();
                put_row(&mut buf, &r, base);
                let got = summarize_simple_row(&buf, base);
                prop_assert_eq!(got, expected_summary(&r));
                for cut in 0..buf.len() {
                    prop_assert_eq!(summarize_simple_row(&buf[..cut], base), None);
                }
                buf.push(0);
                prop_assert_eq!(summarize_simple_row(&buf, base), None);
                let mut counter = r.clone();
                if let Some((_, ColumnData::Simple(c))) = counter.cells.first_mut() {
                    c.is_counter = true;
                    let mut buf = Vec::new();
                    put_row(&mut buf, &counter, base);
                    prop_assert_eq!(summarize_simple_row(&buf, base), None);
                }
            }
        }

        /// A partition's standalone bytes summarize as its row's when it is one row and
        /// nothing else (with the encoding's base), and as nothing otherwise or cut short.
        #[test]
        fn single_row_partition_summary(u in crate::data::proptests::update()) {
            let mut buf = Vec::new();
            encode_update_standalone(&u, &mut buf);
            let want = match &u.rows[..] {
                [row] if u.partition_deletion.is_none()
                    && u.static_row.is_none()
                    && u.range_tombstones.is_empty() =>
                {
                    expected_summary(row).map(|s| (first_timestamp(&u), s))
                }
                _ => None,
            };
            prop_assert_eq!(summarize_single_row_partition(&buf), want);
            for cut in 0..buf.len() {
                prop_assert_eq!(summarize_single_row_partition(&buf[..cut]), None);
            }
            buf.push(0);
            prop_assert_eq!(summarize_single_row_partition(&buf), None);
        }

        /// A one-row update's standalone encoding, built from its row's bytes and any
        /// base, reads back as the update (with the update's own base, byte for byte).
        #[test]
        fn row_standalone_reads_back(u in crate::data::proptests::update(), other in any::<i32>()) {
            let Some(row) = u.rows.first() else { return Ok(()) };
            let one = PartitionUpdate { rows: vec![row.clone()], ..Default::default() };
            for base in [first_timestamp(&one), i64::from(other)] {
                let mut row_bytes = Vec::new();
                put_row(&mut row_bytes, row, base);
                let mut out = Vec::new();
                encode_row_standalone(base, &row_bytes, &mut out);
                let back = read_update_standalone(&mut Reader::new(Bytes::from(out.clone())));
                prop_assert_eq!(back.ok(), Some(one.clone()));
                if base == first_timestamp(&one) {
                    let mut want = Vec::new();
                    encode_update_standalone(&one, &mut want);
                    prop_assert_eq!(&out, &want);
                }
            }
        }
    }

    proptest! {
        /// Picking rows gives the update with exactly the rows kept (the rest stepped over,
        /// the reader at the end as after `read_update`); ending at a row gives the rows
        /// kept before it and no range tombstones; cut short, it fails.
        #[test]
        fn picking_rows_keeps_exactly_those(
            u in crate::data::proptests::update(),
            keep in any::<u64>(),
            end_at in 0usize..12,
        ) {
            let mut buf = Vec::new();
            encode_update_standalone(&u, &mut buf);
            let buf = Bytes::from(buf);
            let pick_by = |end: Option<usize>| {
                let mut i = 0usize;
                move |_: &Clustering| {
                    let n = i;
                    i += 1;
                    if end == Some(n) {
                        RowPick::End
                    } else if keep >> (n % 64) & 1 == 1 {
                        RowPick::Keep
                    } else {
                        RowPick::Skip
                    }
                }
            };
            let kept = |upto: usize| -> Vec<Row> {
                u.rows.iter().enumerate()
                    .filter(|(n, _)| *n < upto && keep >> (n % 64) & 1 == 1)
                    .map(|(_, r)| r.clone())
                    .collect()
            };
            let mut r = Reader::new(buf.clone());
            let base = r.z().unwrap();
            let (got, ended) = read_update_picking(&mut r, base, pick_by(None)).unwrap();
            prop_assert!(!ended);
            prop_assert_eq!(r.remaining(), 0);
            prop_assert_eq!(&got.rows, &kept(usize::MAX));
            prop_assert_eq!(&got.range_tombstones, &u.range_tombstones);
            prop_assert_eq!(got.static_row, u.static_row.clone());
            prop_assert_eq!(got.partition_deletion, u.partition_deletion);

            let mut r = Reader::new(buf.clone());
            let base = r.z().unwrap();
            let (got, ended) = read_update_picking(&mut r, base, pick_by(Some(end_at))).unwrap();
            prop_assert_eq!(ended, end_at < u.rows.len());
            if ended {
                prop_assert_eq!(&got.rows, &kept(end_at));
                prop_assert!(got.range_tombstones.is_empty());
            }

            for cut in 0..buf.len() {
                let mut r = Reader::new(buf.slice(..cut));
                let res = r.z().and_then(|base| read_update_picking(&mut r, base, pick_by(None)));
                prop_assert!(res.is_err());
            }
        }
    }

    proptest! {
        #[test]
        fn roundtrip(u in crate::data::proptests::update(), key in prop::collection::vec(any::<u8>(), 0..20)) {
            let m = Mutation { table: TableId(99), key: PartitionKey::new(Bytes::from(key)), update: u };
            let mut out = Vec::new();
            encode_mutation(&m, &mut out);
            let back = decode_mutation(Bytes::from(out.clone())).unwrap();
            prop_assert_eq!(back, m);
            // Every truncation is an error, never a panic.
            for cut in 0..out.len() {
                prop_assert!(decode_mutation(Bytes::copy_from_slice(&out[..cut])).is_err());
            }
        }

        #[test]
        fn garbage_never_panics(data in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_mutation(Bytes::from(data));
        }
    }

    /// Found by the `mutation_decode` fuzz target: a cell flagged both tombstone and
    /// expiring decoded (with a TTL the encoder then dropped), so what decoded did not
    /// re-encode to itself. Such bytes are refused now; what decodes round-trips.
    #[test]
    fn an_expiring_tombstone_is_refused() {
        let data: &[u8] = &[
            1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 46, 255, 255, 255, 255, 255, 255, 255, 13, 1, 121,
            243, 0, 0, 0, 128, 3, 3, 3, 3, 3, 3, 1, 0, 3, 3, 5, 36, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1,
            3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 46, 1, 1, 1, 1, 1, 1, 1, 1, 255, 255, 255, 255, 255, 255,
            255, 13, 1, 243, 0, 0, 0, 0, 3, 3, 3, 3, 3, 3, 1, 0, 3, 3, 5, 36, 1, 0, 0, 1, 1, 1, 1,
            1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 0, 0, 0, 1, 1, 1, 1,
            1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0,
        ];
        match decode_mutation(Bytes::copy_from_slice(data)) {
            Err(e) => assert!(e.to_string().contains("expiring tombstone"), "{e}"),
            Ok(m) => {
                let mut out = Vec::new();
                encode_mutation(&m, &mut out);
                assert_eq!(decode_mutation(Bytes::from(out)).expect("re-decodes"), m);
            }
        }
    }

    #[test]
    fn expiry_past_2038_round_trips() {
        use crate::data::{Cell, Clustering, ColumnData, DeletionTime, LivenessInfo, Row};
        // 2026-11-22 plus the maximum TTL (20 years) is past i32::MAX seconds (2038-01-19).
        let now = 1_795_000_000;
        let ttl = 630_720_000;
        let cell = Cell::expiring(7, ttl, now, Bytes::from_static(b"v"));
        assert_eq!(cell.local_expiry, 2_425_720_000);
        assert!(cell.local_expiry > i64::from(i32::MAX));
        assert!(cell.is_live(now) && cell.is_live(i32::MAX));
        let u = PartitionUpdate {
            partition_deletion: Some(DeletionTime::new(1, now)),
            rows: vec![Row {
                clustering: Clustering::empty(),
                marker: Some(LivenessInfo::expiring(7, ttl, now)),
                deletion: None,
                cells: vec![(1, ColumnData::Simple(cell))],
            }],
            ..Default::default()
        };
        let m = Mutation {
            table: TableId(1),
            key: PartitionKey::new(Bytes::from_static(b"k")),
            update: u,
        };
        let mut out = Vec::new();
        encode_mutation(&m, &mut out);
        assert_eq!(decode_mutation(Bytes::from(out)).expect("decodes"), m);
    }
}
