//! The row index of wide partitions: `RowIndex.db`, one SSTable component
//! (docs/dev/sstable-format.md).
//!
//! A partition of at least [`MIN_PARTITION_BYTES`] serialized bytes gets a block listing
//! one of its clustering rows every [`SPACING_BYTES`] or so (the first row always): the
//! row's ordinal, where it starts relative to the partition, and its clustering. A read
//! of some clustering slices of such a partition decodes its head (partition deletion,
//! static row), then only the rows from the last entry at or before the first slice's
//! start, block by block, stopping past the slices' end or once it has as many rows as it
//! asked for; its range tombstones are read where they start. Without it, a read of the
//! last page of a partition of a million rows decompressed and stepped over every row
//! before it.
//!
//! ```text
//! file      := "AMPHRIDX" version:u32(=1) block* directory dir_offset:u64
//! block     := body crc32c(body):u32
//! body      := rows_at:var rts_at:var nrows:var n:var entry_offset:u32*n entry*n
//! entry     := ordinal:var offset:var clustering          (clustering as the row encodes it)
//! directory := count:u32 (position:u64 block_offset:u64 block_len:u32)*count crc32c:u32
//! ```
//! `position` is the partition's offset in Data.db's uncompressed stream (as in Index.db),
//! ascending; `rows_at` and `rts_at` are where its first clustering row and its range
//! tombstone count start, and entry offsets where each entry's row starts, all relative
//! to the partition's first byte; `entry_offset`s are relative to the first entry.
//! Rows from one entry to the next are whole (`ordinal` counts them). Files written before
//! this component existed have none: their partitions are read whole.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use amphora_types::codec::{Reader, read_clustering, read_update_head, scan_rows};
use amphora_types::data::{Clustering, ClusteringSlice};
use amphora_types::schema::ClusteringComparator;
use bytes::Bytes;

use crate::error::{Result, StorageError};

/// The component's name (`am1-<generation>-RowIndex.db`).
pub const COMPONENT: &str = "RowIndex.db";
const MAGIC: &[u8; 8] = b"AMPHRIDX";
const VERSION: u32 = 1;
/// Partitions of fewer serialized bytes are read whole (a few chunks at most).
pub const MIN_PARTITION_BYTES: usize = 64 << 10;
/// Rows between two entries take at least this many bytes...
pub const SPACING_BYTES: usize = 4 << 10;
/// ...and more for partitions so wide that this spacing would give more entries than
/// this (a read loads a partition's whole block).
pub const MAX_ENTRIES: usize = 2048;
const DIR_ENTRY_BYTES: usize = 20;

fn put_var(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes of blocks a [`RowIndexWriter`] holds before the SSTable writer writes them out
/// ([`RowIndexWriter::take_spill`]): a large SSTable of wide partitions has about 0.5% of
/// its data in its row index (1 TB of them: 5 GB), which was held in memory until finish.
pub const SPILL_BYTES: usize = 1 << 20;

/// Builds a RowIndex.db as partitions are appended.
pub struct RowIndexWriter {
    /// The file's bytes after the `spilled` ones already taken out.
    file: Vec<u8>,
    spilled: u64,
    /// Buffered bytes from which [`take_spill`](Self::take_spill) hands them out.
    spill_at: usize,
    directory: Vec<u8>,
    count: u32,
    offsets: Vec<u32>,
    entries: Vec<u8>,
}

impl Default for RowIndexWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl RowIndexWriter {
    pub fn new() -> Self {
        let mut file = MAGIC.to_vec();
        file.extend_from_slice(&VERSION.to_le_bytes());
        RowIndexWriter {
            file,
            spilled: 0,
            spill_at: SPILL_BYTES,
            directory: Vec::new(),
            count: 0,
            offsets: Vec::new(),
            entries: Vec::new(),
        }
    }

    /// Indexes the partition at `position` of the uncompressed stream, whose serialized
    /// bytes (key, token, base timestamp, update) are `part`, if it is wide enough and has
    /// more than one entry's worth of rows. Bytes that do not parse are left unindexed:
    /// reads then decode the partition whole, and report what is wrong with it.
    pub fn add(&mut self, position: u64, part: &[u8]) {
        if part.len() < MIN_PARTITION_BYTES {
            return;
        }
        let mut b = self.begin(part.len());
        let mut r = Reader::new(Bytes::copy_from_slice(part));
        let layout = (|| {
            r.skip_bytes()?;
            r.fixed::<8>()?;
            let base = r.z()?;
            let head = read_update_head(&mut r, base)?;
            let rows_at = r.position();
            let mut ordinal = 0u64;
            scan_rows(&mut r, head.rows, |start, clustering_end| {
                b.row(self, ordinal, start, |e| {
                    e.extend_from_slice(&part[start..clustering_end]);
                });
                ordinal += 1;
            })?;
            Ok::<_, amphora_types::codec::DecodeError>((rows_at, r.position(), head.rows))
        })();
        if let Ok((rows_at, rts_at, nrows)) = layout {
            b.commit(self, position, rows_at, rts_at, nrows);
        }
    }

    /// Starts the block of a partition of about `len` serialized bytes (which sets the
    /// entries' spacing), whose rows are then given in order to [`BlockBuilder::row`]: a
    /// partition written a row at a time is indexed as it is written.
    pub fn begin(&mut self, len: usize) -> BlockBuilder {
        self.offsets.clear();
        self.entries.clear();
        BlockBuilder {
            spacing: SPACING_BYTES.max(len / MAX_ENTRIES),
            last: None,
        }
    }

    /// Sets the buffered bytes from which [`take_spill`](Self::take_spill) hands them
    /// out (tests: 0 spills after every block).
    pub fn set_spill_at(&mut self, bytes: usize) {
        self.spill_at = bytes;
    }

    /// The bytes buffered so far, to be written out at the file's end, once they reach
    /// [`SPILL_BYTES`] (between partitions: a block is never split).
    pub fn take_spill(&mut self) -> Option<Vec<u8>> {
        if self.file.len() < self.spill_at.max(1) {
            return None;
        }
        self.spilled += self.file.len() as u64;
        Some(std::mem::take(&mut self.file))
    }

    /// The file's bytes after those [`take_spill`](Self::take_spill) handed out.
    pub fn finish(mut self) -> Vec<u8> {
        let dir_offset = self.spilled + self.file.len() as u64;
        let at = self.file.len();
        self.file.extend_from_slice(&self.count.to_le_bytes());
        self.file.extend_from_slice(&self.directory);
        let crc = crc32c::crc32c(&self.file[at..]);
        self.file.extend_from_slice(&crc.to_le_bytes());
        self.file.extend_from_slice(&dir_offset.to_le_bytes());
        self.file
    }
}

/// The block of one partition being built in a [`RowIndexWriter`] ([`RowIndexWriter::begin`]);
/// nothing is added to the file unless it is committed with at least two entries.
pub struct BlockBuilder {
    spacing: usize,
    last: Option<usize>,
}

impl BlockBuilder {
    /// Whether the row starting `start` bytes into the partition gets an entry (the first
    /// row does, then one every `spacing` bytes or more).
    pub fn wants(&self, start: usize) -> bool {
        self.last.is_none_or(|l| start - l >= self.spacing)
    }

    /// The row of `ordinal` starting `start` bytes into the partition: an entry if
    /// [`wants`](Self::wants) says so, its clustering (as rows encode it) written by
    /// `clustering`.
    pub fn row(
        &mut self,
        w: &mut RowIndexWriter,
        ordinal: u64,
        start: usize,
        clustering: impl FnOnce(&mut Vec<u8>),
    ) {
        if !self.wants(start) {
            return;
        }
        w.offsets.push(w.entries.len() as u32);
        put_var(&mut w.entries, ordinal);
        put_var(&mut w.entries, start as u64);
        clustering(&mut w.entries);
        self.last = Some(start);
    }

    /// Adds the block of the partition at `position` (its first clustering row at
    /// `rows_at`, its range tombstone count at `rts_at`, both relative to the partition,
    /// `nrows` rows), if it has more than one entry.
    pub fn commit(
        self,
        w: &mut RowIndexWriter,
        position: u64,
        rows_at: usize,
        rts_at: usize,
        nrows: usize,
    ) {
        if w.offsets.len() < 2 {
            return;
        }
        let at = w.file.len();
        put_var(&mut w.file, rows_at as u64);
        put_var(&mut w.file, rts_at as u64);
        put_var(&mut w.file, nrows as u64);
        put_var(&mut w.file, w.offsets.len() as u64);
        for o in w.offsets.iter() {
            w.file.extend_from_slice(&o.to_le_bytes());
        }
        w.file.extend_from_slice(&w.entries);
        let crc = crc32c::crc32c(&w.file[at..]);
        w.file.extend_from_slice(&crc.to_le_bytes());
        w.directory.extend_from_slice(&position.to_le_bytes());
        w.directory
            .extend_from_slice(&(w.spilled + at as u64).to_le_bytes());
        w.directory
            .extend_from_slice(&((w.file.len() - at) as u32).to_le_bytes());
        w.count += 1;
    }
}

#[derive(Debug, Clone, Copy)]
struct DirEntry {
    position: u64,
    offset: u64,
    len: u32,
}

/// An open RowIndex.db: its directory in memory, its blocks read on demand.
pub struct RowIndexFile {
    file: File,
    path: PathBuf,
    directory: Vec<DirEntry>,
}

impl RowIndexFile {
    /// Opens the component at `path`; None when the SSTable has none (written before it
    /// existed).
    pub fn open(path: &Path) -> Result<Option<Self>> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StorageError::io(path, e)),
        };
        let len = file
            .metadata()
            .map_err(|e| StorageError::io(path, e))?
            .len();
        let bad = |off: u64, why: &str| StorageError::corrupt(path, off, why.to_string());
        if len < 12 + 4 + 4 + 8 {
            return Err(bad(0, "too short"));
        }
        let mut head = [0u8; 12];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| StorageError::io(path, e))?;
        if &head[..8] != MAGIC {
            return Err(bad(0, "bad magic"));
        }
        if u32::from_le_bytes([head[8], head[9], head[10], head[11]]) != VERSION {
            return Err(bad(8, "unknown version"));
        }
        let mut tail = [0u8; 8];
        file.read_exact_at(&mut tail, len - 8)
            .map_err(|e| StorageError::io(path, e))?;
        let dir_offset = u64::from_le_bytes(tail);
        if dir_offset < 12 || dir_offset > len - 16 {
            return Err(bad(len - 8, "directory offset out of range"));
        }
        let mut dir = vec![0u8; (len - 8 - dir_offset) as usize];
        file.read_exact_at(&mut dir, dir_offset)
            .map_err(|e| StorageError::io(path, e))?;
        let (body, crc) = dir.split_at(dir.len() - 4);
        if crc32c::crc32c(body).to_le_bytes() != crc {
            return Err(bad(dir_offset, "directory checksum mismatch"));
        }
        let count = u32::from_le_bytes([body[0], body[1], body[2], body[3]]) as usize;
        if body.len() != 4 + count * DIR_ENTRY_BYTES {
            return Err(bad(dir_offset, "directory size does not match its count"));
        }
        let mut directory = Vec::with_capacity(count);
        for e in body[4..].chunks_exact(DIR_ENTRY_BYTES) {
            let u = |r: std::ops::Range<usize>| {
                let mut a = [0u8; 8];
                a[..r.len()].copy_from_slice(&e[r]);
                u64::from_le_bytes(a)
            };
            let d = DirEntry {
                position: u(0..8),
                offset: u(8..16),
                len: u(16..20) as u32,
            };
            if d.offset < 12
                || d.len < 5
                || d.offset
                    .checked_add(d.len as u64)
                    .is_none_or(|end| end > dir_offset)
            {
                return Err(bad(dir_offset, "block out of range"));
            }
            if directory
                .last()
                .is_some_and(|p: &DirEntry| p.position >= d.position)
            {
                return Err(bad(dir_offset, "positions not ascending"));
            }
            directory.push(d);
        }
        Ok(Some(RowIndexFile {
            file,
            path: path.to_path_buf(),
            directory,
        }))
    }

    /// The number in the directory of the block of the partition at `position`, if it
    /// has one.
    pub fn find(&self, position: u64) -> Option<usize> {
        self.directory
            .binary_search_by_key(&position, |d| d.position)
            .ok()
    }

    /// How many partitions have a block.
    pub fn len(&self) -> usize {
        self.directory.len()
    }

    pub fn is_empty(&self) -> bool {
        self.directory.is_empty()
    }

    /// Reads and checks block `i`; returns its body (without the CRC).
    pub fn read_block(&self, i: usize) -> Result<Bytes> {
        let d = self
            .directory
            .get(i)
            .ok_or_else(|| StorageError::corrupt(&self.path, 0, "no such row index block"))?;
        let mut buf = vec![0u8; d.len as usize];
        self.file
            .read_exact_at(&mut buf, d.offset)
            .map_err(|e| StorageError::io(&self.path, e))?;
        let (body, crc) = buf.split_at(buf.len() - 4);
        if crc32c::crc32c(body).to_le_bytes() != crc {
            return Err(StorageError::corrupt(
                &self.path,
                d.offset,
                "row index block checksum mismatch",
            ));
        }
        buf.truncate(buf.len() - 4);
        Ok(Bytes::from(buf))
    }

    /// The path, for errors.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One partition's block, parsed enough to find entries.
pub struct RowIndexBlock {
    body: Bytes,
    /// Where the rows start, relative to the partition.
    pub rows_at: u64,
    /// Where the range tombstones start, relative to the partition.
    pub rts_at: u64,
    /// How many clustering rows the partition has.
    pub nrows: u64,
    n: usize,
    table_at: usize,
    entries_at: usize,
}

/// An entry of a [`RowIndexBlock`].
#[derive(Debug, Clone, PartialEq)]
pub struct RowIndexEntry {
    /// The row's number among the partition's rows.
    pub ordinal: u64,
    /// Where the row starts, relative to the partition.
    pub offset: u64,
    pub clustering: Clustering,
}

impl RowIndexBlock {
    /// Parses a block's body (`path` for errors).
    pub fn parse(body: Bytes, path: &Path) -> Result<Self> {
        let mut r = Reader::new(body.clone());
        let e = |err: amphora_types::codec::DecodeError| {
            StorageError::corrupt(path, err.offset as u64, err.reason)
        };
        let rows_at = r.var().map_err(e)?;
        let rts_at = r.var().map_err(e)?;
        let nrows = r.var().map_err(e)?;
        let n = r.var().map_err(e)? as usize;
        let table_at = r.position();
        let entries_at = n
            .checked_mul(4)
            .and_then(|b| b.checked_add(table_at))
            .filter(|&end| end <= body.len() && n >= 1 && rows_at <= rts_at)
            .ok_or_else(|| StorageError::corrupt(path, 0, "bad row index block"))?;
        Ok(RowIndexBlock {
            body,
            rows_at,
            rts_at,
            nrows,
            n,
            table_at,
            entries_at,
        })
    }

    /// How many entries it has (at least one).
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Entry `i` (`path` for errors); past the last one, where the rows end:
    /// `(nrows, rts_at)` with an empty clustering.
    pub fn entry(&self, i: usize, path: &Path) -> Result<RowIndexEntry> {
        if i >= self.n {
            return Ok(RowIndexEntry {
                ordinal: self.nrows,
                offset: self.rts_at,
                clustering: Clustering(Vec::new()),
            });
        }
        let t = self.table_at + 4 * i;
        let off = u32::from_le_bytes([
            self.body[t],
            self.body[t + 1],
            self.body[t + 2],
            self.body[t + 3],
        ]) as usize;
        let at = self.entries_at + off;
        let bad = || StorageError::corrupt(path, at as u64, "bad row index entry");
        if at >= self.body.len() {
            return Err(bad());
        }
        let mut r = Reader::with_offset(self.body.slice(at..), at);
        let e = |err: amphora_types::codec::DecodeError| {
            StorageError::corrupt(path, err.offset as u64, err.reason)
        };
        let ordinal = r.var().map_err(e)?;
        let offset = r.var().map_err(e)?;
        let clustering = read_clustering(&mut r).map_err(e)?;
        if ordinal >= self.nrows || offset < self.rows_at || offset >= self.rts_at {
            return Err(bad());
        }
        Ok(RowIndexEntry {
            ordinal,
            offset,
            clustering,
        })
    }
}

/// The first entry of `block` from `start` on whose clustering satisfies `past` (which
/// holds for every entry after one it holds for), or the number of entries.
pub(crate) fn first_entry(
    block: &RowIndexBlock,
    path: &Path,
    start: usize,
    past: impl Fn(&Clustering) -> bool,
) -> Result<usize> {
    let (mut lo, mut hi) = (start, block.len().max(start));
    while lo < hi {
        let mid = (lo + hi) / 2;
        if past(&block.entry(mid, path)?.clustering) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(lo)
}

/// One partition's row index block, for counting its rows by clustering: a capped read
/// over several SSTables that interleave their rows chooses where to stop with it
/// (`read::counted_cutoff`).
pub(crate) struct RowMarks<'a> {
    pub(crate) block: RowIndexBlock,
    pub(crate) path: &'a Path,
}

impl<'a> RowMarks<'a> {
    /// The block's entries within `slice`, in a read's order (descending when
    /// `from_end`); None when no entry is within it.
    pub(crate) fn walk(
        self,
        cmp: &ClusteringComparator,
        slice: &ClusteringSlice,
        from_end: bool,
    ) -> Result<Option<MarkWalk<'a>>> {
        let (b, path) = (&self.block, self.path);
        let i = if from_end {
            // The last entry at or before the slice's end.
            match first_entry(b, path, 0, |c| !cmp.before_end(c, &slice.end))? {
                0 => return Ok(None),
                past => past - 1,
            }
        } else {
            first_entry(b, path, 0, |c| cmp.after_start(c, &slice.start))?
        };
        if i >= b.len() {
            return Ok(None);
        }
        let first = b.entry(i, path)?;
        let mut walk = MarkWalk {
            base: first.ordinal,
            next: None,
            i,
            counted: 0,
            from_end,
            marks: self,
        };
        walk.next = walk.within(cmp, slice, first);
        Ok(walk.next.is_some().then_some(walk))
    }
}

/// A walk over a [`RowMarks`] block's entries within one slice, in a read's order.
pub(crate) struct MarkWalk<'a> {
    marks: RowMarks<'a>,
    /// The entry to visit next (index `i`); None once past the slice or the entries.
    next: Option<RowIndexEntry>,
    i: usize,
    /// The ordinal of the first entry visited.
    base: u64,
    /// At least how many of the slice's rows come up to the last entry visited, inclusive.
    counted: u64,
    from_end: bool,
}

impl MarkWalk<'_> {
    /// The clustering of the entry to visit next, if any.
    pub(crate) fn peek(&self) -> Option<&Clustering> {
        self.next.as_ref().map(|e| &e.clustering)
    }

    /// At least how many rows within the slice come, in the read's order, up to and
    /// including the last entry visited: the rows from the first entry visited (the first
    /// one after the slice's start, or the last one before its end when reading from the
    /// end) to it. Rows between the slice's edge and that first entry are not counted.
    pub(crate) fn counted(&self) -> u64 {
        self.counted
    }

    /// Visits the next entry.
    pub(crate) fn advance(
        &mut self,
        cmp: &ClusteringComparator,
        slice: &ClusteringSlice,
    ) -> Result<()> {
        let Some(e) = self.next.take() else {
            return Ok(());
        };
        self.counted = e.ordinal.abs_diff(self.base) + 1;
        let following = if self.from_end {
            match self.i.checked_sub(1) {
                Some(i) => i,
                None => return Ok(()),
            }
        } else {
            self.i + 1
        };
        if following >= self.marks.block.len() {
            return Ok(());
        }
        self.i = following;
        let e = self.marks.block.entry(following, self.marks.path)?;
        self.next = self.within(cmp, slice, e);
        Ok(())
    }

    /// `e` if it is within `slice` on the side the walk moves towards.
    fn within(
        &self,
        cmp: &ClusteringComparator,
        slice: &ClusteringSlice,
        e: RowIndexEntry,
    ) -> Option<RowIndexEntry> {
        let inside = if self.from_end {
            cmp.after_start(&e.clustering, &slice.start)
        } else {
            cmp.before_end(&e.clustering, &slice.end)
        };
        inside.then_some(e)
    }
}
