//! SSTable format v1: writer, reader, scanner. Format: docs/dev/sstable-format.md.
//
// PERF-CRITICAL: the writer and the scanner run at flush/compaction speed; the reader's
// `get` is the point-read path.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

use amphora_types::codec::{
    Reader, RowPick, SimpleRowSummary, encode_row_standalone, encode_update_head,
    encode_update_parts, encode_update_tail, put_clustering, put_row, read_range_tombstones,
    read_rows_picking, read_update_head, read_update_picking, read_var,
};
use amphora_types::data::{
    Clustering, ClusteringSlice, ColumnData, DeletionTime, PartitionKey, PartitionUpdate,
    RangeTombstone, Row,
};
use amphora_types::schema::{ClusteringComparator, TableId, TableSchema};
use bytes::Bytes;

use crate::bloom::Bloom;
use crate::cache::{BlockCache, BlockKind};
use crate::commitlog::LogPosition;
use crate::error::{Result, StorageError};
use crate::rowindex::{
    BlockBuilder, RowIndexBlock, RowIndexFile, RowIndexWriter, RowMarks, first_entry,
};

pub const FORMAT_VERSION: u32 = 1;
pub const FORMAT_PREFIX: &str = "am1";
pub const INDEX_BLOCK_ENTRIES: usize = 128;

const MAGIC_COMPRESSION: &[u8; 8] = b"AMPHCINF";
const MAGIC_SUMMARY: &[u8; 8] = b"AMPHSUMM";
const MAGIC_STATS: &[u8; 8] = b"AMPHSTAT";

pub const COMPONENTS: [&str; 7] = [
    "Data.db",
    "CompressionInfo.db",
    "Index.db",
    "Summary.db",
    "Filter.db",
    "Statistics.db",
    crate::rowindex::COMPONENT,
];

pub fn component_path(dir: &Path, generation: u64, component: &str) -> PathBuf {
    dir.join(format!("{FORMAT_PREFIX}-{generation}-{component}"))
}

fn tmp_path(dir: &Path, generation: u64, component: &str) -> PathBuf {
    dir.join(format!("tmp-{FORMAT_PREFIX}-{generation}-{component}"))
}

/// Deletes an SSTable's files by generation (TOC first) that nothing reads any more:
/// their blocks are freed a step at a time ([`crate::deleter`]).
pub fn delete_generation(dir: &Path, generation: u64) {
    delete_generation_held(dir, generation, None);
}

/// Deletes an SSTable's files by generation (TOC first); their blocks are freed once
/// `holder` (the reader that may still read them) is gone.
pub fn delete_generation_held(dir: &Path, generation: u64, holder: Option<crate::deleter::Holder>) {
    let _ = fs::remove_file(component_path(dir, generation, "TOC.txt"));
    for c in COMPONENTS {
        crate::deleter::remove(&component_path(dir, generation, c), holder.clone());
    }
}

/// Parses `am1-<gen>-TOC.txt`.
pub fn parse_toc_name(name: &str) -> Option<u64> {
    name.strip_prefix(FORMAT_PREFIX)?
        .strip_prefix('-')?
        .strip_suffix("-TOC.txt")?
        .parse()
        .ok()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compressor {
    None = 0,
    Lz4 = 1,
}

/// Compression settings derived from the table's `compression` option.
#[derive(Debug, Clone, Copy)]
pub struct CompressionParams {
    pub compressor: Compressor,
    pub chunk_bytes: u32,
}

impl CompressionParams {
    pub fn from_schema(s: &TableSchema) -> Self {
        let o = &s.options.compression;
        let disabled = o.is_empty()
            || o.get("enabled")
                .is_some_and(|v| v.eq_ignore_ascii_case("false"))
            || o.get("class").is_some_and(|c| c.is_empty());
        let kb: u32 = o
            .get("chunk_length_in_kb")
            .and_then(|v| v.parse().ok())
            .unwrap_or(16)
            .clamp(1, 1024);
        CompressionParams {
            compressor: if disabled {
                Compressor::None
            } else {
                Compressor::Lz4
            },
            chunk_bytes: kb * 1024,
        }
    }
}

/// SSTable statistics (Statistics.db).
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub table: TableId,
    pub partitions: u64,
    pub rows: u64,
    pub tombstones: u64,
    pub min_timestamp: i64,
    pub max_timestamp: i64,
    pub min_local_deletion_time: i32,
    /// Latest local deletion / expiry time of any tombstone or TTL (TWCS full-expiry check).
    pub max_local_deletion_time: i32,
    pub min_token: i64,
    pub max_token: i64,
    pub min_clustering: Vec<Bytes>,
    pub max_clustering: Vec<Bytes>,
    /// Everything written before this commitlog position is in this SSTable (or older).
    pub commitlog_upper_bound: LogPosition,
    pub uncompressed_bytes: u64,
    pub level: u32,
    /// Partition size histogram: bucket i counts partitions of < 2^(i+1) bytes.
    pub partition_size_histogram: [u64; 40],
    /// Cells per partition: bucket i counts partitions of [2^i, 2^(i+1)) cells (0 cells in
    /// bucket 0). An optional trailer of v1 Statistics.db: all zero when read from files
    /// written before it existed.
    pub cell_count_histogram: [u64; 40],
    /// Some live cell or row marker has no TTL, so the SSTable never fully expires (TWCS
    /// drops fully expired SSTables whole). An optional v1 trailer byte: true when read
    /// from files written before it existed.
    pub has_non_expiring_data: bool,
    /// Some row has a row marker (primary key liveness: an INSERT's). A point read may
    /// leave an SSTable unread whose data is all older than what it found only if the
    /// SSTable has no marker or the read found a newer one (`read::Coverage`). An optional
    /// v1 trailer byte: true when read from files written before it existed.
    pub has_row_markers: bool,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            table: TableId::default(),
            partitions: 0,
            rows: 0,
            tombstones: 0,
            min_timestamp: 0,
            max_timestamp: 0,
            min_local_deletion_time: 0,
            max_local_deletion_time: 0,
            min_token: 0,
            max_token: 0,
            min_clustering: Vec::new(),
            max_clustering: Vec::new(),
            commitlog_upper_bound: 0,
            uncompressed_bytes: 0,
            level: 0,
            partition_size_histogram: [0; 40],
            cell_count_histogram: [0; 40],
            has_non_expiring_data: false,
            has_row_markers: false,
        }
    }
}

fn put_u64(o: &mut Vec<u8>, v: u64) {
    o.extend_from_slice(&v.to_le_bytes());
}
fn put_var(o: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        o.push((v as u8) | 0x80);
        v >>= 7;
    }
    o.push(v as u8);
}
fn put_bytes(o: &mut Vec<u8>, b: &[u8]) {
    put_var(o, b.len() as u64);
    o.extend_from_slice(b);
}

impl Stats {
    fn encode(&self) -> Vec<u8> {
        let mut o = MAGIC_STATS.to_vec();
        o.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        o.extend_from_slice(&self.table.to_bytes());
        for v in [self.partitions, self.rows, self.tombstones] {
            put_u64(&mut o, v);
        }
        for v in [self.min_timestamp, self.max_timestamp] {
            put_u64(&mut o, v as u64);
        }
        o.extend_from_slice(&self.min_local_deletion_time.to_le_bytes());
        o.extend_from_slice(&self.max_local_deletion_time.to_le_bytes());
        put_u64(&mut o, self.min_token as u64);
        put_u64(&mut o, self.max_token as u64);
        for c in [&self.min_clustering, &self.max_clustering] {
            put_var(&mut o, c.len() as u64);
            for b in c {
                put_bytes(&mut o, b);
            }
        }
        put_u64(&mut o, self.commitlog_upper_bound);
        put_u64(&mut o, self.uncompressed_bytes);
        o.extend_from_slice(&self.level.to_le_bytes());
        for h in self.partition_size_histogram {
            put_var(&mut o, h);
        }
        for h in self.cell_count_histogram {
            put_var(&mut o, h);
        }
        o.push(u8::from(self.has_non_expiring_data));
        o.push(u8::from(self.has_row_markers));
        let crc = crc32c::crc32c(&o);
        o.extend_from_slice(&crc.to_le_bytes());
        o
    }

    fn decode(path: &Path, data: &[u8]) -> Result<Stats> {
        let body = check_crc(path, data)?;
        let mut r = Reader::new(Bytes::copy_from_slice(body));
        let e = |err: amphora_types::codec::DecodeError| {
            StorageError::corrupt(path, err.offset as u64, err.reason)
        };
        if r.fixed::<8>().map_err(e)? != *MAGIC_STATS {
            return Err(StorageError::corrupt(path, 0, "bad magic"));
        }
        let version = u32::from_le_bytes(r.fixed::<4>().map_err(e)?);
        if version != FORMAT_VERSION {
            return Err(StorageError::corrupt(
                path,
                8,
                format!("unsupported format version {version}"),
            ));
        }
        let u64_ = |r: &mut Reader| r.fixed::<8>().map(u64::from_le_bytes).map_err(e);
        let i32_ = |r: &mut Reader| r.fixed::<4>().map(i32::from_le_bytes).map_err(e);
        let table = TableId::from_bytes(r.fixed::<16>().map_err(e)?);
        let partitions = u64_(&mut r)?;
        let rows = u64_(&mut r)?;
        let tombstones = u64_(&mut r)?;
        let min_timestamp = u64_(&mut r)? as i64;
        let max_timestamp = u64_(&mut r)? as i64;
        let min_local_deletion_time = i32_(&mut r)?;
        let max_local_deletion_time = i32_(&mut r)?;
        let min_token = u64_(&mut r)? as i64;
        let max_token = u64_(&mut r)? as i64;
        let clus = |r: &mut Reader| -> Result<Vec<Bytes>> {
            let n = r.count().map_err(e)?;
            (0..n).map(|_| r.bytes().map_err(e)).collect()
        };
        let min_clustering = clus(&mut r)?;
        let max_clustering = clus(&mut r)?;
        let commitlog_upper_bound = u64_(&mut r)?;
        let uncompressed_bytes = u64_(&mut r)?;
        let level = i32_(&mut r)? as u32;
        let mut partition_size_histogram = [0u64; 40];
        for h in partition_size_histogram.iter_mut() {
            *h = r.var().map_err(e)?;
        }
        // Optional trailer (older v1 files end before it; older readers ignore it).
        let mut cell_count_histogram = [0u64; 40];
        if r.remaining() > 0 {
            for h in cell_count_histogram.iter_mut() {
                *h = r.var().map_err(e)?;
            }
        }
        // Optional trailer bytes (older files end before them): unknown counts as "has".
        let has_flag = |r: &mut Reader| -> Result<bool> {
            Ok(r.remaining() == 0 || r.fixed::<1>().map_err(e)?[0] != 0)
        };
        let has_non_expiring_data = has_flag(&mut r)?;
        let has_row_markers = has_flag(&mut r)?;
        Ok(Stats {
            table,
            partitions,
            rows,
            tombstones,
            min_timestamp,
            max_timestamp,
            min_local_deletion_time,
            max_local_deletion_time,
            min_token,
            max_token,
            min_clustering,
            max_clustering,
            commitlog_upper_bound,
            uncompressed_bytes,
            level,
            partition_size_histogram,
            cell_count_histogram,
            has_non_expiring_data,
            has_row_markers,
        })
    }
}

/// Bucket of `v` in a Statistics.db histogram: `[2^i, 2^(i+1))`, 0 in bucket 0.
fn histogram_bucket(v: u64) -> usize {
    (64 - v.leading_zeros()).saturating_sub(1).min(39) as usize
}

/// One partition's contribution to [`Stats`], gathered in one pass over its parts.
struct PartStats {
    min_ts: i64,
    max_ts: i64,
    min_ldt: i32,
    max_ldt: i32,
    tombstones: u64,
    cells: u64,
    non_expiring: bool,
    markers: bool,
}

impl PartStats {
    fn new() -> Self {
        PartStats {
            min_ts: i64::MAX,
            max_ts: i64::MIN,
            min_ldt: i32::MAX,
            max_ldt: i32::MIN,
            tombstones: 0,
            cells: 0,
            non_expiring: false,
            markers: false,
        }
    }

    /// The statistics of a partition's deletion, range tombstones and static row (its
    /// clustering rows are added with [`Self::row`]).
    fn head(
        deletion: Option<DeletionTime>,
        static_row: Option<&Row>,
        rts: &[RangeTombstone],
    ) -> Self {
        let mut n = PartStats::new();
        if let Some(d) = deletion {
            n.deletion(d);
        }
        for rt in rts {
            n.deletion(rt.deletion);
        }
        if let Some(r) = static_row {
            n.row(r);
        }
        n
    }

    fn ts(&mut self, t: i64) {
        self.min_ts = self.min_ts.min(t);
        self.max_ts = self.max_ts.max(t);
    }

    /// Statistics.db keeps 32-bit times: a time past 2038 is recorded as i32::MAX, which
    /// every user of these bounds treats conservatively (never purgeable or expired
    /// before 2038).
    fn ldt(&mut self, t: amphora_types::data::LocalTime) {
        let t = t.clamp(i32::MIN.into(), i32::MAX.into()) as i32;
        self.min_ldt = self.min_ldt.min(t);
        self.max_ldt = self.max_ldt.max(t);
    }

    fn deletion(&mut self, d: DeletionTime) {
        self.ts(d.marked_for_delete_at);
        self.tombstones += 1;
        self.ldt(d.local_deletion_time);
    }

    fn cell(&mut self, c: &amphora_types::data::Cell) {
        self.ts(c.timestamp);
        self.cells += 1;
        if c.is_tombstone {
            self.tombstones += 1;
            self.ldt(c.local_expiry);
        } else if c.ttl > 0 {
            self.ldt(c.local_expiry);
        } else {
            self.non_expiring = true;
        }
    }

    /// What [`Self::row`] notes for the row `s` summarizes.
    fn row_summary(&mut self, s: &SimpleRowSummary) {
        if s.min_timestamp != i64::MAX {
            self.ts(s.min_timestamp);
            self.ts(s.max_timestamp);
        }
        if let Some((lo, hi)) = s.local_times {
            self.ldt(lo);
            self.ldt(hi);
        }
        self.tombstones += s.tombstone_cells as u64;
        self.cells += s.cells as u64;
        self.non_expiring |= s.non_expiring;
        self.markers |= s.marker.is_some();
    }

    fn row(&mut self, r: &Row) {
        if let Some(m) = r.marker {
            self.markers = true;
            self.ts(m.timestamp);
            if m.ttl > 0 {
                self.ldt(m.local_expiry);
            } else {
                self.non_expiring = true;
            }
        }
        if let Some(d) = r.deletion {
            self.deletion(d);
        }
        for (_, d) in &r.cells {
            match d {
                ColumnData::Simple(c) => self.cell(c),
                ColumnData::Complex { deletion, cells } => {
                    if let Some(d) = deletion {
                        self.deletion(*d);
                    }
                    for (_, c) in cells {
                        self.cell(c);
                    }
                }
            }
        }
    }
}

/// Splits off and verifies a trailing CRC32C (little-endian) over the rest.
fn check_crc<'a>(path: &Path, data: &'a [u8]) -> Result<&'a [u8]> {
    if data.len() < 4 {
        return Err(StorageError::corrupt(path, 0, "file too short"));
    }
    let (body, c) = data.split_at(data.len() - 4);
    let stored = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    let actual = crc32c::crc32c(body);
    if stored != actual {
        return Err(StorageError::corrupt(
            path,
            body.len() as u64,
            format!("checksum mismatch (stored {stored:#x}, computed {actual:#x})"),
        ));
    }
    Ok(body)
}

fn create(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)
        .map_err(|e| StorageError::io(path, e))
}

/// A source SSTable of [`SSTableWriter::append_raw`]: what each partition copied from it
/// adds to the output's statistics, derived once per compaction (not per partition).
pub struct RawSource<'a> {
    stats: &'a Stats,
    rows_per_partition: u64,
    /// The cell count of a copied partition is not decoded: it is counted in the source's
    /// median bucket (None when the source has no cell histogram).
    cell_bucket: Option<usize>,
}

impl<'a> RawSource<'a> {
    pub fn of(stats: &'a Stats) -> Self {
        let half = stats.cell_count_histogram.iter().sum::<u64>().div_ceil(2);
        let mut seen = 0;
        let cell_bucket = stats.cell_count_histogram.iter().position(|n| {
            seen += n;
            half > 0 && seen >= half
        });
        RawSource {
            stats,
            rows_per_partition: stats.rows.checked_div(stats.partitions).unwrap_or(0),
            cell_bucket,
        }
    }
}

/// Alignment of O_DIRECT writes' memory, file offsets and lengths (the page size, a
/// multiple of every block size in use).
const DIRECT_ALIGN: usize = 4096;

/// Bytes a [`DataOut`] gathers before it writes them.
const DATA_BUF: usize = 1 << 20;

/// Blocks a direct [`DataOut`] has handed to its writer thread and not got back yet.
const DATA_IN_FLIGHT: usize = 4;

/// A direct [`DataOut`]'s writer thread syncs the file after every this many bytes. On a
/// device with a write-back cache (a virtual disk backed by the host's page cache) direct
/// writes only reach that cache, and the final sync then waited for all of the output
/// (1 s of a 2.4 s major compaction here); synced as it goes, that wait overlaps the
/// merge, on the writer's thread.
const TRICKLE_SYNC_BYTES: usize = 32 << 20;

/// A `DATA_BUF`-byte buffer aligned to `DIRECT_ALIGN`, and what it holds.
struct Block {
    buf: Vec<u8>,
    /// Where the aligned buffer starts in `buf`.
    start: usize,
    len: usize,
}

impl Block {
    fn new(path: &Path) -> Result<Self> {
        let buf = vec![0u8; DATA_BUF + DIRECT_ALIGN];
        let start = buf.as_ptr().align_offset(DIRECT_ALIGN);
        if start >= DIRECT_ALIGN {
            return Err(StorageError::io(
                path,
                std::io::Error::other("cannot align the write buffer"),
            ));
        }
        Ok(Block { buf, start, len: 0 })
    }

    /// A placeholder holding no buffer.
    fn none() -> Self {
        Block {
            buf: Vec::new(),
            start: 0,
            len: 0,
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
}

/// Writes `b` at `offset`; a file system that took O_DIRECT at open but refuses the
/// write gets it (and every later one) buffered.
fn write_block(file: &File, b: &[u8], offset: u64) -> std::io::Result<()> {
    match file.write_all_at(b, offset) {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
            set_direct_io(file, false)?;
            file.write_all_at(b, offset)
        }
        r => r,
    }
}

/// The writer thread of a direct [`DataOut`]: blocks go out in order and come back to
/// be filled again; it stops at the first error (sent back) or when the sender is gone.
struct DirectWriter {
    to_thread: Option<std::sync::mpsc::SyncSender<(Block, u64)>>,
    back: std::sync::mpsc::Receiver<std::io::Result<Block>>,
    thread: Option<std::thread::JoinHandle<()>>,
    in_flight: usize,
}

impl DirectWriter {
    fn start(file: File) -> std::io::Result<Self> {
        let (to_thread, from_writer) =
            std::sync::mpsc::sync_channel::<(Block, u64)>(DATA_IN_FLIGHT);
        let (to_writer, back) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sstable-write".into())
            .spawn(move || {
                let mut unsynced = 0usize;
                for (block, offset) in from_writer {
                    let len = block.len;
                    let r = write_block(&file, block.bytes(), offset)
                        .and_then(|()| {
                            unsynced += len;
                            if unsynced >= TRICKLE_SYNC_BYTES {
                                unsynced = 0;
                                file.sync_data()?;
                            }
                            Ok(())
                        })
                        .map(|()| block);
                    let failed = r.is_err();
                    if to_writer.send(r).is_err() || failed {
                        return;
                    }
                }
            })?;
        Ok(DirectWriter {
            to_thread: Some(to_thread),
            back,
            thread: Some(thread),
            in_flight: 0,
        })
    }

    /// Hands `block` to the thread to write at `offset`; returns an empty block to fill.
    fn submit(&mut self, block: Block, offset: u64, path: &Path) -> Result<Block> {
        let gone =
            || StorageError::io(path, std::io::Error::other("SSTable writer thread stopped"));
        self.to_thread
            .as_ref()
            .ok_or_else(gone)?
            .send((block, offset))
            .map_err(|_| gone())?;
        self.in_flight += 1;
        if self.in_flight < DATA_IN_FLIGHT {
            return Block::new(path);
        }
        self.reclaim(path)
    }

    /// Waits for one block to come back written.
    fn reclaim(&mut self, path: &Path) -> Result<Block> {
        let mut b = match self.back.recv() {
            Ok(r) => r.map_err(|e| StorageError::io(path, e))?,
            Err(_) => {
                return Err(StorageError::io(
                    path,
                    std::io::Error::other("SSTable writer thread stopped"),
                ));
            }
        };
        self.in_flight -= 1;
        b.len = 0;
        Ok(b)
    }

    /// Waits for every block in flight and stops the thread.
    fn drain(mut self, path: &Path) -> Result<()> {
        let mut r = Ok(());
        while self.in_flight > 0 && r.is_ok() {
            r = self.reclaim(path).map(drop);
        }
        self.to_thread = None;
        if let Some(t) = self.thread.take()
            && t.join().is_err()
            && r.is_ok()
        {
            r = Err(StorageError::io(
                path,
                std::io::Error::other("SSTable writer thread panicked"),
            ));
        }
        r
    }
}

/// A writer's Data.db stream, written [`DATA_BUF`] bytes at a time. Direct outputs
/// (compactions', and flushes' with [`crate::StorageConfig::flush_direct`]) are opened
/// with O_DIRECT: whole aligned blocks go from memory to the disk without a copy into the
/// page cache (that copy and the dirty page writeback cost
/// as much CPU as the rest of a major compaction), written by a thread of their own
/// while the next block fills; at the end the tail's whole 4 KiB blocks go direct too and
/// only its last partial block is written buffered. A file system without O_DIRECT
/// (tmpfs) gets buffered writes throughout.
struct DataOut {
    file: File,
    path: PathBuf,
    cur: Block,
    /// Bytes handed out to be written.
    written: u64,
    direct: Option<DirectWriter>,
    /// The length of the spare file written over (0: a new file); the file is cut to
    /// what was written at the end.
    spare_len: u64,
}

impl DataOut {
    /// A new Data.db at `path`, written over a spare file from `spares` if one is free
    /// (buffered writes only: a direct write gains nothing from cached pages); with
    /// `direct_without_spare`, written with O_DIRECT when none is.
    fn new(
        path: PathBuf,
        direct: bool,
        spares: Option<&crate::spare::SparePool>,
        direct_without_spare: bool,
    ) -> Result<Self> {
        let spare = spares
            .filter(|_| !direct)
            .and_then(|p| p.take(&path))
            .and_then(|len| {
                let f = OpenOptions::new().write(true).open(&path).ok()?;
                Some((f, len))
            });
        let direct = direct || (direct_without_spare && spare.is_none());
        let (file, spare_len) = match spare {
            Some(s) => s,
            None => (create(&path)?, 0),
        };
        let cur = Block::new(&path).inspect_err(|_| {
            let _ = fs::remove_file(&path);
        })?;
        // Without a second handle or a thread for it, writes are buffered.
        let direct = if direct && set_direct_io(&file, true).is_ok() {
            let started = file.try_clone().and_then(DirectWriter::start);
            if started.is_err() {
                set_direct_io(&file, false)
                    .map_err(|e| StorageError::io(&path, e))
                    .inspect_err(|_| {
                        let _ = fs::remove_file(&path);
                    })?;
            }
            started.ok()
        } else {
            None
        };
        Ok(DataOut {
            cur,
            file,
            path,
            written: 0,
            direct,
            spare_len,
        })
    }

    fn write_all(&mut self, mut bytes: &[u8]) -> Result<()> {
        self.usable()?;
        while !bytes.is_empty() {
            let c = &mut self.cur;
            let n = (DATA_BUF - c.len).min(bytes.len());
            let at = c.start + c.len;
            c.buf[at..at + n].copy_from_slice(&bytes[..n]);
            c.len += n;
            bytes = &bytes[n..];
            if c.len == DATA_BUF {
                self.write_out()?;
            }
        }
        Ok(())
    }

    /// Writes the full current block (through the writer thread when direct).
    fn write_out(&mut self) -> Result<()> {
        let offset = self.written;
        let len = self.cur.len as u64;
        // Empty until the block is written (direct: handed out, and the next one got
        // back): after a failure it stays empty and the writer unusable.
        let mut full = std::mem::replace(&mut self.cur, Block::none());
        match &mut self.direct {
            Some(d) => self.cur = d.submit(full, offset, &self.path)?,
            None => {
                write_block(&self.file, full.bytes(), offset)
                    .map_err(|e| StorageError::io(&self.path, e))?;
                // Sent to the device a block at a time rather than all at the final
                // sync (see `crate::writeback`).
                crate::writeback::start(&self.file, offset, offset + len);
                full.len = 0;
                self.cur = full;
            }
        }
        self.written += len;
        Ok(())
    }

    /// An error if an earlier write failed and left no block to fill.
    fn usable(&self) -> Result<()> {
        if self.cur.buf.is_empty() {
            return Err(StorageError::io(
                &self.path,
                std::io::Error::other("an earlier write of this file failed"),
            ));
        }
        Ok(())
    }

    /// Writes what is buffered and returns the file (not synced).
    fn finish(mut self) -> Result<File> {
        self.usable()?;
        if let Some(d) = self.direct.take() {
            d.drain(&self.path)?;
            // The aligned part of the tail still goes direct; the rest buffered.
            let aligned = self.cur.len / DIRECT_ALIGN * DIRECT_ALIGN;
            let b = &self.cur.buf[self.cur.start..self.cur.start + self.cur.len];
            write_block(&self.file, &b[..aligned], self.written)
                .and_then(|()| set_direct_io(&self.file, false))
                .and_then(|()| {
                    self.file
                        .write_all_at(&b[aligned..], self.written + aligned as u64)
                })
                .map_err(|e| StorageError::io(&self.path, e))?;
        } else if self.cur.len > 0 {
            write_block(&self.file, self.cur.bytes(), self.written)
                .map_err(|e| StorageError::io(&self.path, e))?;
        }
        let end = self.written + self.cur.len as u64;
        if self.spare_len > end {
            // The spare's old bytes past the end go (readers check the file's length).
            self.file
                .set_len(end)
                .map_err(|e| StorageError::io(&self.path, e))?;
        }
        Ok(self.file)
    }
}

/// Sets or clears O_DIRECT on an open file.
fn set_direct_io(f: &File, on: bool) -> std::io::Result<()> {
    use rustix::fs::OFlags;
    let flags = rustix::fs::fcntl_getfl(f)?;
    let flags = if on {
        flags | OFlags::DIRECT
    } else {
        flags - OFlags::DIRECT
    };
    rustix::fs::fcntl_setfl(f, flags)?;
    Ok(())
}

/// Writes one SSTable; partitions must be appended in ring order.
pub struct SSTableWriter {
    dir: PathBuf,
    generation: u64,
    params: CompressionParams,
    data: DataOut,
    data_offset: u64,
    chunk_offsets: Vec<u64>,
    /// Uncompressed bytes not yet written as a chunk.
    pending: Vec<u8>,
    uncompressed_len: u64,
    /// Index.db, written a block at a time as blocks fill (never held whole in memory).
    index: std::io::BufWriter<crate::writeback::WriteBackFile>,
    /// CRC32C of the index bytes written so far (the file ends with it).
    index_crc: u32,
    /// The block being finished (reused).
    index_out: Vec<u8>,
    index_block: Vec<u8>,
    index_block_entries: usize,
    index_offset: u64,
    summary: Vec<u8>,
    summary_entries: u32,
    /// The partitions' tokens, for a filter built at the end, unless `bloom` builds it as
    /// they come ([`expect_partitions`](Self::expect_partitions)).
    bloom_keys: Vec<i64>,
    bloom: Option<crate::bloom::BloomBuilder>,
    fp_chance: f64,
    stats: Stats,
    /// The last partition appended (ring order is checked without cloning keys).
    last_key: Option<(i64, Vec<u8>)>,
    cmp: amphora_types::schema::ClusteringComparator,
    compressed: Vec<u8>,
    /// RowIndex.db: where some rows of each wide partition start.
    row_index: RowIndexWriter,
    /// Its temporary file once blocks have been written out ([`SPILL_BYTES`]).
    ///
    /// [`SPILL_BYTES`]: crate::rowindex::SPILL_BYTES
    row_index_out: Option<File>,
    /// The partition being written a row at a time, if any.
    streamed: Option<Streamed>,
}

/// A partition being written a row at a time ([`SSTableWriter::begin_streamed`]).
struct Streamed {
    /// Where it starts in the uncompressed stream.
    start: u64,
    base: i64,
    /// Where its first clustering row starts, relative to `start`.
    rows_at: usize,
    written: usize,
    block: BlockBuilder,
}

/// What writing a partition a row at a time ([`SSTableWriter::begin_streamed`]) needs known
/// before its first row: its statistics, its row count and its highest timestamp (the
/// base its timestamps are encoded against), gathered by a first pass over the rows it
/// will be given (a compaction's merge of a partition too wide to hold decoded).
pub struct StreamedStats {
    part: PartStats,
    rows: usize,
    first: Option<Clustering>,
    last: Option<Clustering>,
}

impl StreamedStats {
    /// The statistics of a partition's deletion, static row and range tombstones.
    pub fn new(
        deletion: Option<DeletionTime>,
        static_row: Option<&Row>,
        rts: &[RangeTombstone],
    ) -> Self {
        StreamedStats {
            part: PartStats::head(deletion, static_row, rts),
            rows: 0,
            first: None,
            last: None,
        }
    }

    /// Adds the next clustering rows (in order).
    pub fn rows(&mut self, rows: &[Row]) {
        for r in rows {
            self.part.row(r);
        }
        self.rows += rows.len();
        if let Some(f) = rows.first()
            && self.first.is_none()
        {
            self.first = Some(f.clustering.clone());
        }
        if let Some(l) = rows.last() {
            self.last = Some(l.clustering.clone());
        }
    }

    /// How many clustering rows were added.
    pub fn row_count(&self) -> usize {
        self.rows
    }

    /// The partition's highest timestamp (0 when it has none): what [`SSTableWriter::append`]
    /// encodes its timestamps against.
    fn base(&self) -> i64 {
        if self.part.min_ts == i64::MAX {
            0
        } else {
            self.part.max_ts
        }
    }
}

impl SSTableWriter {
    pub fn new(dir: &Path, generation: u64, schema: &TableSchema) -> Result<Self> {
        Self::open(dir, generation, schema, false, None)
    }

    /// A writer whose Data.db is written over a spare file of `spares` when one is free
    /// (see [`crate::spare`]): a flush's.
    pub fn new_over_spare(
        dir: &Path,
        generation: u64,
        schema: &TableSchema,
        spares: Option<&crate::spare::SparePool>,
    ) -> Result<Self> {
        Self::open(dir, generation, schema, false, spares)
    }

    /// A writer whose Data.db bypasses the page cache (see [`DataOut`]): for compaction
    /// outputs, where copying hundreds of megabytes into the page cache was half of a
    /// major compaction's CPU time.
    pub fn new_direct(dir: &Path, generation: u64, schema: &TableSchema) -> Result<Self> {
        Self::open(dir, generation, schema, true, None)
    }

    /// A writer over a spare file from `spares` if one is free, and otherwise one whose
    /// Data.db bypasses the page cache ([`Self::data_direct`] tells which): its Data.db
    /// never goes into fresh page-cache pages (its Index.db still does).
    pub fn new_over_spare_or_direct(
        dir: &Path,
        generation: u64,
        schema: &TableSchema,
        spares: &crate::spare::SparePool,
    ) -> Result<Self> {
        Self::open_with(dir, generation, schema, false, Some(spares), true)
    }

    /// Whether the Data.db is written with O_DIRECT (not in the page cache).
    pub fn data_direct(&self) -> bool {
        self.data.direct.is_some()
    }

    fn open(
        dir: &Path,
        generation: u64,
        schema: &TableSchema,
        direct: bool,
        spares: Option<&crate::spare::SparePool>,
    ) -> Result<Self> {
        Self::open_with(dir, generation, schema, direct, spares, false)
    }

    /// `direct_without_spare`: direct when `spares` has no free spare.
    fn open_with(
        dir: &Path,
        generation: u64,
        schema: &TableSchema,
        direct: bool,
        spares: Option<&crate::spare::SparePool>,
        direct_without_spare: bool,
    ) -> Result<Self> {
        fs::create_dir_all(dir).map_err(|e| StorageError::io(dir, e))?;
        let path = tmp_path(dir, generation, "Data.db");
        let f = DataOut::new(path.clone(), direct, spares, direct_without_spare)?;
        let index_path = tmp_path(dir, generation, "Index.db");
        let index = create(&index_path).inspect_err(|_| {
            let _ = fs::remove_file(&path);
        })?;
        Ok(SSTableWriter {
            dir: dir.to_path_buf(),
            generation,
            params: CompressionParams::from_schema(schema),
            data: f,
            data_offset: 0,
            chunk_offsets: Vec::new(),
            pending: Vec::with_capacity(64 << 10),
            uncompressed_len: 0,
            index: std::io::BufWriter::with_capacity(
                1 << 20,
                crate::writeback::WriteBackFile::new(index),
            ),
            index_crc: 0,
            index_out: Vec::new(),
            index_block: Vec::new(),
            index_block_entries: 0,
            index_offset: 0,
            summary: Vec::new(),
            summary_entries: 0,
            bloom_keys: Vec::new(),
            bloom: None,
            fp_chance: schema.options.bloom_filter_fp_chance,
            stats: Stats {
                table: schema.id,
                min_timestamp: i64::MAX,
                max_timestamp: i64::MIN,
                min_local_deletion_time: i32::MAX,
                max_local_deletion_time: i32::MIN,
                min_token: i64::MAX,
                max_token: i64::MIN,
                ..Default::default()
            },
            last_key: None,
            cmp: schema.clustering_comparator(),
            compressed: Vec::new(),
            row_index: RowIndexWriter::new(),
            row_index_out: None,
            streamed: None,
        })
    }

    pub fn partitions(&self) -> u64 {
        self.stats.partitions
    }

    pub fn uncompressed_bytes(&self) -> u64 {
        self.uncompressed_len + self.pending.len() as u64
    }

    /// Appends a partition (skips empty updates).
    pub fn append(&mut self, key: &PartitionKey, u: &PartitionUpdate) -> Result<()> {
        let rows: Vec<&Row> = u.rows.iter().collect();
        self.append_parts(
            key,
            u.partition_deletion,
            u.static_row.as_ref(),
            &rows,
            &u.range_tombstones,
        )
    }

    /// Appends a partition from borrowed parts (rows in clustering order).
    pub fn append_parts(
        &mut self,
        key: &PartitionKey,
        deletion: Option<DeletionTime>,
        static_row: Option<&Row>,
        rows: &[&Row],
        rts: &[RangeTombstone],
    ) -> Result<()> {
        if deletion.is_none() && static_row.is_none() && rows.is_empty() && rts.is_empty() {
            return Ok(());
        }
        let (_, max_ts) = self.note_parts(deletion, static_row, rows, rts);
        self.put_partition(key, |out| {
            let base = max_ts;
            let zz = ((base << 1) ^ (base >> 63)) as u64;
            put_var(out, zz);
            encode_update_parts(deletion, static_row, rows, rts, base, out);
        })
    }

    /// Appends a partition of one row of simple cells given as its `codec::put_row`
    /// bytes with their `base` and summary (a memtable's single-row partition): the row
    /// is copied, not decoded and encoded again.
    pub fn append_single_row(
        &mut self,
        key: &PartitionKey,
        base: i64,
        row: &[u8],
        summary: &SimpleRowSummary,
    ) -> Result<()> {
        if !summary.clustering_empty {
            return Err(StorageError::Invalid(
                "a single-row partition copied into an SSTable has a clustering".into(),
            ));
        }
        let mut n = PartStats::new();
        n.row_summary(summary);
        self.note_stats(&n, 1);
        self.note_clustering(&[], &[]);
        self.put_partition(key, |out| encode_row_standalone(base, row, out))
    }

    /// Appends a partition: its key and token, then what `body` encodes, straight into
    /// the pending chunk bytes (no copy through a scratch buffer).
    fn put_partition(&mut self, key: &PartitionKey, body: impl FnOnce(&mut Vec<u8>)) -> Result<()> {
        self.check_ring_order(key);
        let start = self.uncompressed_bytes();
        let at = self.pending.len();
        put_bytes(&mut self.pending, &key.key);
        self.pending.extend_from_slice(&key.token.to_be_bytes());
        body(&mut self.pending);
        let len = (self.pending.len() - at) as u64;
        self.row_index.add(start, &self.pending[at..]);
        self.index_partition(key, start, len)?;
        self.write_full_chunks()?;
        let s = &mut self.stats;
        s.partitions += 1;
        s.min_token = s.min_token.min(key.token);
        s.max_token = s.max_token.max(key.token);
        s.partition_size_histogram[histogram_bucket(len)] += 1;
        Ok(())
    }

    /// Appends a partition's serialized bytes copied from another SSTable, merging that
    /// SSTable's statistics conservatively (used by compaction for partitions that need
    /// no merge and no purge).
    pub fn append_raw(
        &mut self,
        key: &PartitionKey,
        bytes: &[u8],
        src: &RawSource<'_>,
    ) -> Result<()> {
        self.push_partition(key, bytes)?;
        let (rows, cell_bucket, src) = (src.rows_per_partition, src.cell_bucket, src.stats);
        let s = &mut self.stats;
        s.partitions += 1;
        s.min_token = s.min_token.min(key.token);
        s.max_token = s.max_token.max(key.token);
        s.min_timestamp = s.min_timestamp.min(src.min_timestamp);
        s.max_timestamp = s.max_timestamp.max(src.max_timestamp);
        let len = bytes.len() as u64;
        s.partition_size_histogram[histogram_bucket(len)] += 1;
        s.rows += rows;
        s.has_non_expiring_data |= src.has_non_expiring_data;
        s.has_row_markers |= src.has_row_markers;
        if let Some(b) = cell_bucket {
            s.cell_count_histogram[b] += 1;
        }
        if !src.min_clustering.is_empty()
            && (s.min_clustering.is_empty()
                || self
                    .cmp
                    .compare(&src.min_clustering, &s.min_clustering)
                    .is_lt())
        {
            s.min_clustering = src.min_clustering.clone();
        }
        if !src.max_clustering.is_empty()
            && (s.max_clustering.is_empty()
                || self
                    .cmp
                    .compare(&src.max_clustering, &s.max_clustering)
                    .is_gt())
        {
            s.max_clustering = src.max_clustering.clone();
        }
        Ok(())
    }

    /// Starts a partition written a row at a time: its key, deletion and static row now,
    /// then its clustering rows in order ([`streamed_rows`](Self::streamed_rows)), then its
    /// range tombstones ([`finish_streamed`](Self::finish_streamed)). `stats` must be what
    /// those rows and these parts add up to (the row count and base timestamp come first
    /// in the bytes); the bytes are then the same [`append`](Self::append) writes for the
    /// whole partition, and at most a chunk of them is held at a time. `len_hint`, about
    /// the partition's serialized size, spaces its row index entries.
    pub fn begin_streamed(
        &mut self,
        key: &PartitionKey,
        stats: &StreamedStats,
        deletion: Option<DeletionTime>,
        static_row: Option<&Row>,
        len_hint: usize,
    ) -> Result<()> {
        if self.streamed.is_some() {
            return Err(StorageError::Invalid(
                "a streamed partition was started before the last one was finished".into(),
            ));
        }
        self.check_ring_order(key);
        let start = self.uncompressed_bytes();
        let base = stats.base();
        put_bytes(&mut self.pending, &key.key);
        self.pending.extend_from_slice(&key.token.to_be_bytes());
        put_var(&mut self.pending, ((base << 1) ^ (base >> 63)) as u64);
        encode_update_head(deletion, static_row, stats.rows, base, &mut self.pending);
        let rows_at = (self.uncompressed_bytes() - start) as usize;
        let block = self.row_index.begin(len_hint);
        self.streamed = Some(Streamed {
            start,
            base,
            rows_at,
            written: 0,
            block,
        });
        self.write_full_chunks()
    }

    /// Writes the next clustering rows of the partition [`begin_streamed`](Self::begin_streamed)
    /// started.
    pub fn streamed_rows(&mut self, rows: &[Row]) -> Result<()> {
        let Some(st) = self.streamed.as_mut() else {
            return Err(StorageError::Invalid(
                "rows streamed with no partition started".into(),
            ));
        };
        for r in rows {
            let at = (self.uncompressed_len + self.pending.len() as u64 - st.start) as usize;
            st.block
                .row(&mut self.row_index, st.written as u64, at, |e| {
                    put_clustering(e, &r.clustering);
                });
            put_row(&mut self.pending, r, st.base);
            st.written += 1;
        }
        self.write_full_chunks()
    }

    /// Ends the partition [`begin_streamed`](Self::begin_streamed) started with its range
    /// tombstones, and indexes it; `stats` is what was given to `begin_streamed`, and the
    /// rows written must be the ones it counted.
    pub fn finish_streamed(
        &mut self,
        key: &PartitionKey,
        rts: &[RangeTombstone],
        stats: &StreamedStats,
    ) -> Result<()> {
        let Some(st) = self.streamed.take() else {
            return Err(StorageError::Invalid(
                "a streamed partition was finished but never started".into(),
            ));
        };
        if st.written != stats.rows {
            return Err(StorageError::Invalid(format!(
                "a streamed partition was announced with {} rows and given {}",
                stats.rows, st.written
            )));
        }
        let rts_at = (self.uncompressed_bytes() - st.start) as usize;
        encode_update_tail(rts, st.base, &mut self.pending);
        let len = self.uncompressed_bytes() - st.start;
        // Indexed as `append` would index it (not below the row index's minimum size).
        if len >= crate::rowindex::MIN_PARTITION_BYTES as u64 {
            st.block.commit(
                &mut self.row_index,
                st.start,
                st.rows_at,
                rts_at,
                st.written,
            );
        }
        self.index_partition(key, st.start, len)?;
        self.write_full_chunks()?;
        self.note_stats(&stats.part, stats.rows);
        if let (Some(first), Some(last)) = (&stats.first, &stats.last) {
            self.note_clustering(&first.0, &last.0);
        }
        let s = &mut self.stats;
        s.partitions += 1;
        s.min_token = s.min_token.min(key.token);
        s.max_token = s.max_token.max(key.token);
        s.partition_size_histogram[histogram_bucket(len)] += 1;
        Ok(())
    }

    fn push_partition(&mut self, key: &PartitionKey, bytes: &[u8]) -> Result<()> {
        self.check_ring_order(key);
        let start = self.uncompressed_bytes();
        self.pending.extend_from_slice(bytes);
        self.row_index.add(start, bytes);
        self.index_partition(key, start, bytes.len() as u64)?;
        self.write_full_chunks()
    }

    /// Asserts that `key` comes after the last partition appended, and records it.
    fn check_ring_order(&mut self, key: &PartitionKey) {
        match self.last_key.as_mut() {
            Some((token, k)) => {
                assert!(
                    (*token, &k[..]) < (key.token, &key.key[..]),
                    "SSTable partitions must be appended in ring order"
                );
                *token = key.token;
                k.clear();
                k.extend_from_slice(&key.key);
            }
            None => self.last_key = Some((key.token, key.key.to_vec())),
        }
    }

    /// Adds the index, summary and bloom filter entries of a partition at `start` of the
    /// uncompressed stream.
    fn index_partition(&mut self, key: &PartitionKey, start: u64, len: u64) -> Result<()> {
        if let Some(bytes) = self.row_index.take_spill() {
            self.write_row_index(&bytes)?;
        }
        if self.index_block_entries == 0 {
            self.summary.extend_from_slice(&key.token.to_le_bytes());
            put_bytes(&mut self.summary, &key.key);
            put_u64(&mut self.summary, self.index_offset);
            self.summary_entries += 1;
        }
        self.index_block.extend_from_slice(&key.token.to_le_bytes());
        put_bytes(&mut self.index_block, &key.key);
        put_var(&mut self.index_block, start);
        put_var(&mut self.index_block, len);
        self.index_block_entries += 1;
        match &mut self.bloom {
            Some(b) => b.add(key.token),
            None => self.bloom_keys.push(key.token),
        }
        if self.index_block_entries == INDEX_BLOCK_ENTRIES {
            self.finish_index_block()?;
        }
        Ok(())
    }

    /// Compresses and writes every full chunk of the pending bytes.
    fn write_full_chunks(&mut self) -> Result<()> {
        while self.pending.len() >= self.params.chunk_bytes as usize {
            self.write_chunk(self.params.chunk_bytes as usize)?;
        }
        Ok(())
    }

    fn finish_index_block(&mut self) -> Result<()> {
        if self.index_block_entries == 0 {
            return Ok(());
        }
        let block = &mut self.index_out;
        block.clear();
        block.extend_from_slice(&(self.index_block_entries as u32).to_le_bytes());
        block.extend_from_slice(&self.index_block);
        let crc = crc32c::crc32c(block);
        block.extend_from_slice(&crc.to_le_bytes());
        // Block length goes into the summary right after the offset.
        self.summary
            .extend_from_slice(&(block.len() as u32).to_le_bytes());
        self.index_offset += block.len() as u64;
        self.index_crc = crc32c::crc32c_append(self.index_crc, block);
        self.index
            .write_all(block)
            .map_err(|e| StorageError::io(tmp_path(&self.dir, self.generation, "Index.db"), e))?;
        self.index_block.clear();
        self.index_block_entries = 0;
        Ok(())
    }

    fn write_chunk(&mut self, n: usize) -> Result<()> {
        // A chunk's compression is tens of µs: on a flush or compaction thread, wait here
        // while the shard runs requests.
        crate::grant::pass();
        self.chunk_offsets.push(self.data_offset);
        let raw = &self.pending[..n];
        let body: &[u8] = match self.params.compressor {
            Compressor::Lz4 => {
                let bound = lz4_flex::block::get_maximum_output_size(n);
                self.compressed.resize(bound, 0);
                let clen =
                    lz4_flex::block::compress_into(raw, &mut self.compressed).map_err(|e| {
                        StorageError::io(&self.data.path, std::io::Error::other(e.to_string()))
                    })?;
                &self.compressed[..clen]
            }
            Compressor::None => raw,
        };
        let crc = crc32c::crc32c(body);
        self.data.write_all(body)?;
        self.data.write_all(&crc.to_le_bytes())?;
        self.data_offset += body.len() as u64 + 4;
        self.uncompressed_len += n as u64;
        self.pending.drain(..n);
        Ok(())
    }

    /// Adds a partition of `rows` rows whose content `n` gathered to the statistics (all
    /// but its clustering bounds, size and token); returns its lowest and highest
    /// timestamp ((0, 0) if it has none).
    fn note_stats(&mut self, n: &PartStats, rows: usize) -> (i64, i64) {
        let s = &mut self.stats;
        s.rows += rows as u64;
        s.tombstones += n.tombstones;
        s.min_local_deletion_time = s.min_local_deletion_time.min(n.min_ldt);
        s.max_local_deletion_time = s.max_local_deletion_time.max(n.max_ldt);
        s.has_non_expiring_data |= n.non_expiring;
        s.has_row_markers |= n.markers;
        s.cell_count_histogram[histogram_bucket(n.cells)] += 1;
        let (lo, hi) = if n.min_ts == i64::MAX {
            (0, 0)
        } else {
            (n.min_ts, n.max_ts)
        };
        s.min_timestamp = s.min_timestamp.min(lo);
        s.max_timestamp = s.max_timestamp.max(hi);
        (lo, hi)
    }

    /// Adds a partition's content to the statistics (all but its size and token, known
    /// once it is encoded) in one pass over its rows; returns its lowest and highest
    /// timestamp ((0, 0) if it has none).
    fn note_parts(
        &mut self,
        deletion: Option<DeletionTime>,
        static_row: Option<&Row>,
        rows: &[&Row],
        rts: &[RangeTombstone],
    ) -> (i64, i64) {
        let mut n = PartStats::head(deletion, static_row, rts);
        for r in rows {
            n.row(r);
        }
        let (lo, hi) = self.note_stats(&n, rows.len());
        if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
            self.note_clustering(&first.clustering.0, &last.clustering.0);
        }
        (lo, hi)
    }

    /// Widens the statistics' clustering bounds to a partition's first and last row.
    fn note_clustering(&mut self, first: &[Bytes], last: &[Bytes]) {
        let s = &mut self.stats;
        if s.min_clustering.is_empty() || self.cmp.compare(first, &s.min_clustering).is_lt() {
            s.min_clustering = first.to_vec();
        }
        if s.max_clustering.is_empty() || self.cmp.compare(last, &s.max_clustering).is_gt() {
            s.max_clustering = last.to_vec();
        }
    }

    /// Writes the remaining components, syncs, and publishes the SSTable by renaming its
    /// files (TOC last). Returns None if no partition was written.
    pub fn finish(
        self,
        commitlog_upper_bound: LogPosition,
        level: u32,
    ) -> Result<Option<SSTableReader>> {
        self.finish_with(commitlog_upper_bound, level, None)
    }

    /// [`finish`](Self::finish), running `before_publish` (for instance the fsync of a
    /// compaction log naming this output) concurrently with the components' syncs; the
    /// SSTable is published only if every sync and `before_publish` succeeded.
    pub fn finish_with(
        self,
        commitlog_upper_bound: LogPosition,
        level: u32,
        before_publish: Option<&mut (dyn FnMut() -> Result<()> + Send)>,
    ) -> Result<Option<SSTableReader>> {
        let (dir, g) = (self.dir.clone(), self.generation);
        let r = self.finish_inner(commitlog_upper_bound, level, before_publish);
        if r.is_err() {
            // Leaves nothing of this generation (a full disk must not stay full of it).
            for c in COMPONENTS.iter().chain(std::iter::once(&"TOC.txt")) {
                let _ = fs::remove_file(tmp_path(&dir, g, c));
            }
            delete_generation(&dir, g);
        }
        r
    }

    fn finish_inner(
        mut self,
        commitlog_upper_bound: LogPosition,
        level: u32,
        before_publish: Option<&mut (dyn FnMut() -> Result<()> + Send)>,
    ) -> Result<Option<SSTableReader>> {
        if self.streamed.is_some() {
            return Err(StorageError::Invalid(
                "an SSTable was finished inside a streamed partition".into(),
            ));
        }
        if self.stats.partitions == 0 {
            for c in ["Data.db", "Index.db"] {
                let _ = fs::remove_file(tmp_path(&self.dir, self.generation, c));
            }
            return Ok(None);
        }
        let started = std::time::Instant::now();
        let n = self.pending.len();
        if n > 0 {
            self.write_chunk(n)?;
        }
        self.finish_index_block()?;
        let dir = self.dir.clone();
        let g = self.generation;
        let data_path = tmp_path(&dir, g, "Data.db");
        let data = self.data.finish()?;
        let written_out = std::time::Instant::now();

        let mut ci = MAGIC_COMPRESSION.to_vec();
        ci.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        ci.push(self.params.compressor as u8);
        ci.extend_from_slice(&self.params.chunk_bytes.to_le_bytes());
        put_u64(&mut ci, self.uncompressed_len);
        ci.extend_from_slice(&(self.chunk_offsets.len() as u32).to_le_bytes());
        for o in &self.chunk_offsets {
            put_u64(&mut ci, *o);
        }
        put_u64(&mut ci, self.data_offset);
        let crc = crc32c::crc32c(&ci);
        ci.extend_from_slice(&crc.to_le_bytes());

        let mut summary = MAGIC_SUMMARY.to_vec();
        summary.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        summary.extend_from_slice(&self.summary_entries.to_le_bytes());
        summary.extend_from_slice(&self.summary);
        let crc = crc32c::crc32c(&summary);
        summary.extend_from_slice(&crc.to_le_bytes());

        let bloom = match self.bloom.take() {
            Some(b) => b.finish(),
            None => Bloom::build(&self.bloom_keys, self.fp_chance),
        };
        self.stats.uncompressed_bytes = self.uncompressed_len;
        self.stats.commitlog_upper_bound = commitlog_upper_bound;
        self.stats.level = level;
        if self.stats.min_local_deletion_time == i32::MAX {
            self.stats.max_local_deletion_time = i32::MIN;
        }

        let index_path = tmp_path(&dir, g, "Index.db");
        let mut index = self.index;
        index
            .write_all(&self.index_crc.to_le_bytes())
            .map_err(|e| StorageError::io(&index_path, e))?;
        let index = index
            .into_inner()
            .map_err(|e| StorageError::io(&index_path, e.into_error()))?
            .into_inner();
        let toc: String = COMPONENTS
            .iter()
            .map(|c| format!("{c}\n"))
            .collect::<String>()
            + "TOC.txt\n";
        let row_index = std::mem::take(&mut self.row_index).finish();
        let mut parts: Vec<(&str, Vec<u8>)> = vec![
            ("CompressionInfo.db", ci),
            ("Summary.db", summary),
            ("Filter.db", bloom.encode()),
            ("Statistics.db", self.stats.encode()),
            ("TOC.txt", toc.into_bytes()),
        ];
        // RowIndex.db: its tail appended to the blocks written out so far, if any.
        let row_index_path = tmp_path(&dir, g, crate::rowindex::COMPONENT);
        let row_index_out = match self.row_index_out.take() {
            Some(mut f) => {
                f.write_all(&row_index)
                    .map_err(|e| StorageError::io(&row_index_path, e))?;
                Some(f)
            }
            None => {
                parts.push((crate::rowindex::COMPONENT, row_index));
                None
            }
        };
        // Every component (the TOC too: it is only the commit point once renamed) is
        // written and fdatasynced on its own thread: the file system commits concurrent
        // syncs together, where one after the other each waits for its own commit.
        let write_synced = |name: &str, bytes: &[u8]| -> Result<()> {
            let p = tmp_path(&dir, g, name);
            let mut f = create(&p)?;
            f.write_all(bytes).map_err(|e| StorageError::io(&p, e))?;
            f.sync_data().map_err(|e| StorageError::io(&p, e))
        };
        let joined = |h: std::thread::Result<Result<()>>| {
            h.unwrap_or_else(|_| {
                Err(StorageError::io(
                    &dir,
                    std::io::Error::other("SSTable sync thread panicked"),
                ))
            })
        };
        let results: Vec<Result<()>> = std::thread::scope(|sc| {
            let mut handles = Vec::with_capacity(parts.len() + 2);
            let data_path = &data_path;
            handles.push(
                sc.spawn(move || data.sync_data().map_err(|e| StorageError::io(data_path, e))),
            );
            let index_path = &index_path;
            handles.push(sc.spawn(move || {
                index
                    .sync_data()
                    .map_err(|e| StorageError::io(index_path, e))
            }));
            if let Some(f) = row_index_out {
                let p = &row_index_path;
                handles.push(sc.spawn(move || f.sync_data().map_err(|e| StorageError::io(p, e))));
            }
            for (name, bytes) in &parts {
                handles.push(sc.spawn(move || write_synced(name, bytes)));
            }
            if let Some(f) = before_publish {
                handles.push(sc.spawn(f));
            }
            handles.into_iter().map(|h| joined(h.join())).collect()
        });
        for r in results {
            r?;
        }
        for c in COMPONENTS.iter().chain(std::iter::once(&"TOC.txt")) {
            let from = tmp_path(&dir, g, c);
            let to = component_path(&dir, g, c);
            fs::rename(&from, &to).map_err(|e| StorageError::io(&from, e))?;
        }
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| StorageError::io(&dir, e))?;
        let synced = std::time::Instant::now();
        let r = SSTableReader::open(&dir, g)?;
        FINISH_TIMES.with(|t| {
            let mut v = t.get();
            v.write_out += written_out - started;
            v.sync += synced - written_out;
            v.open += synced.elapsed();
            t.set(v);
        });
        Ok(Some(r))
    }

    /// Announces at most `n` partitions, before the first is appended: from
    /// [`INCREMENTAL_MIN_KEYS`] of them on, the filter is built as they come instead of
    /// from their tokens kept until the end (then sized for the partitions written).
    ///
    /// [`INCREMENTAL_MIN_KEYS`]: crate::bloom::INCREMENTAL_MIN_KEYS
    pub fn expect_partitions(&mut self, n: u64) {
        if self.stats.partitions == 0 && n >= crate::bloom::INCREMENTAL_MIN_KEYS {
            self.bloom = crate::bloom::BloomBuilder::new(n, self.fp_chance);
        }
    }

    /// Appends `bytes` to the temporary RowIndex.db (created by the first call).
    fn write_row_index(&mut self, bytes: &[u8]) -> Result<()> {
        let p = tmp_path(&self.dir, self.generation, crate::rowindex::COMPONENT);
        let f = match &mut self.row_index_out {
            Some(f) => f,
            None => self.row_index_out.insert(create(&p)?),
        };
        f.write_all(bytes).map_err(|e| StorageError::io(&p, e))
    }

    /// Sets how many bytes of RowIndex.db blocks are held before they are written out
    /// (tests).
    pub fn set_row_index_spill(&mut self, bytes: usize) {
        self.row_index.set_spill_at(bytes);
    }

    /// Removes the temporary files of an abandoned write.
    pub fn abort(self) {
        for c in COMPONENTS.iter().chain(std::iter::once(&"TOC.txt")) {
            let _ = fs::remove_file(tmp_path(&self.dir, self.generation, c));
        }
    }
}

struct SummaryEntry {
    token: i64,
    key: Bytes,
    offset: u64,
    len: u32,
}

/// Source of [`SSTableReader::id`].
static NEXT_READER_ID: AtomicU64 = AtomicU64::new(1);

/// An open SSTable. Shared between the shard and background jobs (Send + Sync).
pub struct SSTableReader {
    /// Unique in the process (the block cache key): two opens of the same files differ.
    pub id: u64,
    pub dir: PathBuf,
    pub generation: u64,
    pub stats: Stats,
    data: File,
    data_path: PathBuf,
    index: File,
    index_path: PathBuf,
    index_len: u64,
    compressor: Compressor,
    chunk_bytes: u64,
    uncompressed_len: u64,
    chunk_offsets: Vec<u64>,
    summary: Vec<SummaryEntry>,
    /// The summary entries' tokens, in their order: [`Self::block_for`] binary-searches
    /// these 8-byte values (a few hundred KB even for millions of partitions, so the
    /// search stays in the CPU's cache) instead of the entries themselves.
    summary_tokens: Vec<i64>,
    /// Shared with the [`OverlapFilter`]s compactions hold.
    bloom: Arc<Bloom>,
    /// Set when a checksum failed: the SSTable is out of service.
    pub quarantined: AtomicBool,
    /// Reads without a block cache decompress into this buffer (reused: no allocation or
    /// page faults per read) and copy their bytes out; it remembers which chunk it holds,
    /// so sequential readers decompress each chunk once.
    last_chunk: Mutex<UncachedChunk>,
    /// Deletes the files when the last reference is dropped (after compaction).
    pub delete_on_drop: AtomicBool,
    /// Data.db was written through the page cache by this process (a buffered flush's
    /// output, [`crate::StorageConfig::flush_direct`] off): once replaced, its file is
    /// worth keeping as a spare ([`crate::spare`]).
    pub data_cached: bool,
    /// RowIndex.db (None for SSTables written before it existed, and when it did not
    /// open: then `row_index_fault` says why).
    row_index: Option<RowIndexFile>,
    /// Why RowIndex.db is not used: it did not open (damaged or unreadable), or a read
    /// found it damaged or not matching Data.db. Reads then decode wide partitions from
    /// their start, as without one; [`verify`](Self::verify) reports it.
    row_index_fault: std::sync::OnceLock<StorageError>,
}

/// Index entry: where a partition's bytes are in the uncompressed data stream.
#[derive(Debug, Clone, Copy)]
pub struct IndexEntry {
    pub position: u64,
    pub len: u64,
}

impl SSTableReader {
    pub fn open(dir: &Path, generation: u64) -> Result<Self> {
        let read = |c: &str| -> Result<(PathBuf, Vec<u8>)> {
            let p = component_path(dir, generation, c);
            let d = fs::read(&p).map_err(|e| StorageError::io(&p, e))?;
            Ok((p, d))
        };
        let (stats_path, stats_data) = read("Statistics.db")?;
        let stats = Stats::decode(&stats_path, &stats_data)?;
        let (ci_path, ci) = read("CompressionInfo.db")?;
        let body = check_crc(&ci_path, &ci)?;
        let bad =
            |off: usize, why: &str| StorageError::corrupt(&ci_path, off as u64, why.to_string());
        if body.len() < 29 || &body[0..8] != MAGIC_COMPRESSION {
            return Err(bad(0, "bad magic"));
        }
        let compressor = match body[12] {
            0 => Compressor::None,
            1 => Compressor::Lz4,
            _ => return Err(bad(12, "unknown compressor")),
        };
        let chunk_bytes = u32::from_le_bytes([body[13], body[14], body[15], body[16]]) as u64;
        let uncompressed_len =
            u64::from_le_bytes(body[17..25].try_into().map_err(|_| bad(17, "short"))?);
        let n = u32::from_le_bytes([body[25], body[26], body[27], body[28]]) as usize;
        if body.len() != 29 + (n + 1) * 8 || chunk_bytes == 0 || chunk_bytes > 64 << 20 {
            return Err(bad(25, "chunk count does not match the file size"));
        }
        let chunk_offsets: Vec<u64> = body[29..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect();
        if chunk_offsets.windows(2).any(|w| w[0] >= w[1])
            || n as u64 != uncompressed_len.div_ceil(chunk_bytes)
        {
            return Err(bad(29, "chunk offsets are not increasing"));
        }
        let (sum_path, sum) = read("Summary.db")?;
        let body = check_crc(&sum_path, &sum)?;
        let mut r = Reader::new(Bytes::copy_from_slice(body));
        let e = |err: amphora_types::codec::DecodeError| {
            StorageError::corrupt(&sum_path, err.offset as u64, err.reason)
        };
        if r.fixed::<8>().map_err(e)? != *MAGIC_SUMMARY {
            return Err(StorageError::corrupt(&sum_path, 0, "bad magic"));
        }
        let _version = r.fixed::<4>().map_err(e)?;
        let count = u32::from_le_bytes(r.fixed::<4>().map_err(e)?);
        let mut summary = Vec::with_capacity(count.min(1 << 20) as usize);
        for _ in 0..count {
            let token = i64::from_le_bytes(r.fixed::<8>().map_err(e)?);
            let key = r.bytes().map_err(e)?;
            let offset = u64::from_le_bytes(r.fixed::<8>().map_err(e)?);
            let len = u32::from_le_bytes(r.fixed::<4>().map_err(e)?);
            summary.push(SummaryEntry {
                token,
                key,
                offset,
                len,
            });
        }
        let (filter_path, filter) = read("Filter.db")?;
        let bloom = Bloom::decode(&filter_path, &filter)?;
        let data_path = component_path(dir, generation, "Data.db");
        let data = File::open(&data_path).map_err(|e| StorageError::io(&data_path, e))?;
        let data_len = data
            .metadata()
            .map_err(|e| StorageError::io(&data_path, e))?
            .len();
        if chunk_offsets.last().copied() != Some(data_len) {
            return Err(StorageError::corrupt(
                &data_path,
                data_len,
                format!(
                    "file is {data_len} bytes, CompressionInfo says {:?}",
                    chunk_offsets.last()
                ),
            ));
        }
        let index_path = component_path(dir, generation, "Index.db");
        let index = File::open(&index_path).map_err(|e| StorageError::io(&index_path, e))?;
        let index_len = index
            .metadata()
            .map_err(|e| StorageError::io(&index_path, e))?
            .len();
        // The row index only saves decoding: an SSTable whose RowIndex.db does not open
        // serves every row from Data.db (whose chunks have their own checksums), so that
        // a damaged index takes no data out of service and scrub can rewrite it.
        let (row_index, row_index_fault) = match RowIndexFile::open(&component_path(
            dir,
            generation,
            crate::rowindex::COMPONENT,
        )) {
            Ok(ri) => (ri, std::sync::OnceLock::new()),
            Err(e) => {
                tracing::error!(
                    "SSTable {generation} in {}: its row index is unusable, so its wide partitions are read without it until `nodetool scrub` rewrites it: {e}",
                    dir.display()
                );
                (None, std::sync::OnceLock::from(e))
            }
        };
        Ok(SSTableReader {
            id: NEXT_READER_ID.fetch_add(1, AtomicOrdering::Relaxed),
            dir: dir.to_path_buf(),
            generation,
            stats,
            data,
            data_path,
            index,
            index_path,
            index_len,
            compressor,
            chunk_bytes,
            uncompressed_len,
            chunk_offsets,
            summary_tokens: summary.iter().map(|s| s.token).collect(),
            summary,
            bloom: Arc::new(bloom),
            quarantined: AtomicBool::new(false),
            last_chunk: Mutex::new(UncachedChunk::default()),
            delete_on_drop: AtomicBool::new(false),
            data_cached: false,
            row_index,
            row_index_fault,
        })
    }

    pub fn data_path(&self) -> &Path {
        &self.data_path
    }

    /// Data.db and Index.db, each with a descriptor of its own (for [`crate::warm`], which
    /// reads them into the page cache after the reader has gone to the shard).
    pub fn files_to_warm(&self) -> Vec<(PathBuf, File)> {
        [
            (&self.data, &self.data_path),
            (&self.index, &self.index_path),
        ]
        .into_iter()
        .filter_map(|(f, p)| Some((p.clone(), f.try_clone().ok()?)))
        .collect()
    }

    pub fn is_quarantined(&self) -> bool {
        self.quarantined.load(AtomicOrdering::Relaxed)
    }

    /// RowIndex.db, unless it did not open or a read found it damaged.
    fn usable_row_index(&self) -> Option<&RowIndexFile> {
        self.row_index
            .as_ref()
            .filter(|_| self.row_index_fault.get().is_none())
    }

    /// Stops reads from using RowIndex.db after `err` (logged once).
    fn row_index_failed(&self, err: StorageError) {
        let path = component_path(&self.dir, self.generation, crate::rowindex::COMPONENT);
        let err = match err {
            StorageError::Corrupt { path: ref p, .. } if *p == path => err,
            // Found reading Data.db where the index pointed.
            other => StorageError::corrupt(path, 0, format!("does not match Data.db: {other}")),
        };
        debug_assert!(matches!(err, StorageError::Corrupt { .. }));
        if self.row_index_fault.set(err).is_ok()
            && let Some(err) = self.row_index_fault.get()
        {
            tracing::error!(
                "SSTable {} in {}: its row index failed a read, so its wide partitions are read without it until `nodetool scrub` rewrites it: {err}",
                self.generation,
                self.dir.display()
            );
        }
    }

    /// On-disk size of the Data component.
    pub fn data_size(&self) -> u64 {
        self.chunk_offsets.last().copied().unwrap_or(0)
    }

    pub fn may_contain(&self, key: &PartitionKey) -> bool {
        may_hold(key, self.stats.min_token, self.stats.max_token, &self.bloom)
    }

    /// What a compaction needs of this SSTable when it is not one of its inputs: which
    /// keys it may hold and its oldest timestamp ([`OverlapFilter`]).
    pub fn overlap_filter(&self) -> OverlapFilter {
        OverlapFilter {
            min_timestamp: self.stats.min_timestamp,
            min_token: self.stats.min_token,
            max_token: self.stats.max_token,
            bloom: self.bloom.clone(),
        }
    }

    /// Reads and verifies chunk `i` through the block cache.
    fn chunk(&self, i: usize, cache: &mut BlockCache) -> Result<Bytes> {
        if let Some(b) = cache.get(self.id, BlockKind::DataChunk, i as u64) {
            return Ok(b);
        }
        let b = self.read_chunk(i)?;
        cache.insert(self.id, BlockKind::DataChunk, i as u64, b.clone());
        Ok(b)
    }

    fn read_chunk(&self, i: usize) -> Result<Bytes> {
        let mut out = Vec::new();
        RAW_CHUNK.with(|raw| self.read_chunk_into(i, &mut raw.borrow_mut(), &mut out))?;
        // Uncompressed, `out` is the reused read buffer, as long as the longest chunk read
        // before: the block cache accounts the length.
        out.shrink_to_fit();
        Ok(Bytes::from(out))
    }

    /// Appends bytes `s..e` of chunk `i` to `out`, without the block cache: through the
    /// reader's one-chunk buffer.
    fn copy_uncached(&self, i: usize, s: usize, e: usize, out: &mut Vec<u8>) -> Result<()> {
        let mut g = self
            .last_chunk
            .lock()
            .map_err(|_| StorageError::corrupt(&self.data_path, 0, "chunk buffer poisoned"))?;
        if g.chunk != Some(i) || g.valid < e {
            // A point read decodes the chunk only up to its partition; a second read of the
            // same chunk (a scan) decodes it whole, so no chunk is decoded more than twice.
            let need = if g.chunk == Some(i) { usize::MAX } else { e };
            g.chunk = None;
            let g = &mut *g;
            g.valid = RAW_CHUNK
                .with(|raw| self.read_chunk_prefix(i, &mut raw.borrow_mut(), &mut g.bytes, need))?;
            g.chunk = Some(i);
        }
        let part = g.bytes.get(s..e).filter(|_| e <= g.valid).ok_or_else(|| {
            StorageError::corrupt(
                &self.data_path,
                i as u64 * self.chunk_bytes + s as u64,
                "short chunk",
            )
        })?;
        out.extend_from_slice(part);
        Ok(())
    }

    /// Reads chunk `i`'s stored bytes into `raw` and verifies their checksum; `raw` is left
    /// holding the body (without the checksum). Returns the chunk's file offset and its
    /// uncompressed length.
    fn read_chunk_raw(&self, i: usize, raw: &mut Vec<u8>) -> Result<(u64, usize)> {
        let (Some(&start), Some(&end)) = (self.chunk_offsets.get(i), self.chunk_offsets.get(i + 1))
        else {
            return Err(StorageError::corrupt(
                &self.data_path,
                0,
                format!("chunk {i} out of range"),
            ));
        };
        raw.resize((end - start) as usize, 0);
        crate::diskwait::read_exact_at(&self.data, &self.data_path, raw, start)?;
        if raw.len() < 4 {
            return Err(StorageError::corrupt(
                &self.data_path,
                start,
                "chunk too short",
            ));
        }
        let (body, c) = raw.split_at(raw.len() - 4);
        let stored = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let actual = crc32c::crc32c(body);
        if stored != actual {
            self.quarantined.store(true, AtomicOrdering::Relaxed);
            return Err(StorageError::corrupt(
                &self.data_path,
                start,
                format!("chunk {i} checksum mismatch (stored {stored:#x}, computed {actual:#x})"),
            ));
        }
        raw.truncate(raw.len() - 4);
        let ulen =
            (self.uncompressed_len - i as u64 * self.chunk_bytes).min(self.chunk_bytes) as usize;
        Ok((start, ulen))
    }

    /// Reads and verifies chunk `i` into `out` (its uncompressed bytes), with `raw` as the
    /// buffer for the stored bytes: sequential readers reuse both (no allocation or
    /// zeroing per chunk).
    fn read_chunk_into(&self, i: usize, raw: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<()> {
        let n = self.read_chunk_prefix(i, raw, out, usize::MAX)?;
        if n != out.len() {
            return Err(StorageError::corrupt(
                &self.data_path,
                self.chunk_offsets.get(i).copied().unwrap_or(0),
                format!("chunk {i} has {n} bytes, expected {}", out.len()),
            ));
        }
        Ok(())
    }

    /// Reads and verifies chunk `i` and decompresses at least its first `need` bytes into
    /// `out` (sized to the whole chunk); returns how many bytes are decompressed. A whole
    /// chunk (`need` = `usize::MAX`) goes through `lz4_flex`, a prefix through
    /// [`crate::lz4::decode_prefix`], which stops early.
    fn read_chunk_prefix(
        &self,
        i: usize,
        raw: &mut Vec<u8>,
        out: &mut Vec<u8>,
        need: usize,
    ) -> Result<usize> {
        let (start, ulen) = self.read_chunk_raw(i, raw)?;
        match self.compressor {
            Compressor::None => {
                std::mem::swap(raw, out);
                Ok(out.len())
            }
            Compressor::Lz4 => {
                out.resize(ulen, 0);
                let bad = |e: &dyn std::fmt::Display| {
                    StorageError::corrupt(
                        &self.data_path,
                        start,
                        format!("chunk {i} does not decompress: {e}"),
                    )
                };
                if need >= ulen {
                    lz4_flex::block::decompress_into(raw, out).map_err(|e| bad(&e))
                } else {
                    crate::lz4::decode_prefix(raw, out, need).map_err(|e| bad(&e))
                }
            }
        }
    }

    /// The first and last chunk holding bytes `pos..pos + len` of the uncompressed stream,
    /// or an error when they extend past its end.
    fn chunk_span(&self, pos: u64, len: u64) -> Result<(usize, usize)> {
        if pos
            .checked_add(len)
            .is_none_or(|end| end > self.uncompressed_len)
        {
            return Err(StorageError::corrupt(
                &self.data_path,
                pos,
                "partition extends past the end of the data",
            ));
        }
        let first = (pos / self.chunk_bytes) as usize;
        let last = ((pos + len).saturating_sub(1) / self.chunk_bytes) as usize;
        Ok((first, last))
    }

    /// Reads `len` bytes of the uncompressed stream at `pos`.
    fn read_range(&self, pos: u64, len: u64, cache: Option<&mut BlockCache>) -> Result<Bytes> {
        let Some(cache) = cache else {
            return self.read_range_detached(pos, len, None);
        };
        let (first, last) = self.chunk_span(pos, len)?;
        if first == last {
            let c = self.chunk(first, cache)?;
            let off = (pos - first as u64 * self.chunk_bytes) as usize;
            return c
                .get(off..off + len as usize)
                .map(|_| c.slice(off..off + len as usize))
                .ok_or_else(|| StorageError::corrupt(&self.data_path, pos, "short chunk"));
        }
        let mut out = Vec::with_capacity(len as usize);
        for i in first..=last {
            let c = self.chunk(i, cache)?;
            let cstart = i as u64 * self.chunk_bytes;
            let s = pos.max(cstart) - cstart;
            let e = (pos + len).min(cstart + c.len() as u64) - cstart;
            out.extend_from_slice(
                c.get(s as usize..e as usize)
                    .ok_or_else(|| StorageError::corrupt(&self.data_path, pos, "short chunk"))?,
            );
        }
        Ok(Bytes::from(out))
    }

    /// Reads `len` bytes of the uncompressed stream at `pos` into a buffer of their own:
    /// chunks found in `cache` are copied from there, the others out of the reader's chunk
    /// buffer (decoded up to the bytes needed) without adding them to the cache, so each
    /// read decodes and copies the bytes of its partition, not a whole chunk.
    fn read_range_detached(
        &self,
        pos: u64,
        len: u64,
        mut cache: Option<&mut BlockCache>,
    ) -> Result<Bytes> {
        let (first, last) = self.chunk_span(pos, len)?;
        let mut out = Vec::with_capacity(len as usize);
        for i in first..=last {
            let cstart = i as u64 * self.chunk_bytes;
            let s = (pos.max(cstart) - cstart) as usize;
            let e = ((pos + len).min(cstart + self.chunk_bytes) - cstart) as usize;
            let cached = cache
                .as_deref_mut()
                .and_then(|c| c.peek(self.id, BlockKind::DataChunk, i as u64));
            match cached {
                Some(c) => {
                    out.extend_from_slice(c.get(s..e).ok_or_else(|| {
                        StorageError::corrupt(&self.data_path, pos, "short chunk")
                    })?)
                }
                None => self.copy_uncached(i, s, e, &mut out)?,
            }
        }
        Ok(Bytes::from(out))
    }

    /// Reads and verifies index block `b` of the summary; returns its body (without the
    /// CRC).
    fn index_block_bytes(&self, b: usize) -> Result<Option<(Bytes, u64)>> {
        match self.summary.get(b) {
            Some(s) => self.read_index_block(s),
            None => Ok(None),
        }
    }

    fn read_index_block(&self, s: &SummaryEntry) -> Result<Option<(Bytes, u64)>> {
        let mut buf = Vec::new();
        self.read_index_block_into(s, &mut buf)?;
        Ok(Some((Bytes::from(buf), s.offset)))
    }

    /// Reads index block `b` of the summary.
    fn index_block(&self, b: usize) -> Result<Vec<(PartitionKey, IndexEntry)>> {
        let Some((body, offset)) = self.index_block_bytes(b)? else {
            return Ok(Vec::new());
        };
        let mut r = Reader::with_offset(body, offset as usize);
        let e = |err: amphora_types::codec::DecodeError| {
            StorageError::corrupt(&self.index_path, err.offset as u64, err.reason)
        };
        let n = u32::from_le_bytes(r.fixed::<4>().map_err(e)?) as usize;
        let mut out = Vec::with_capacity(n.min(INDEX_BLOCK_ENTRIES));
        for _ in 0..n {
            let token = i64::from_le_bytes(r.fixed::<8>().map_err(e)?);
            let key = r.bytes().map_err(e)?;
            let position = r.var().map_err(e)?;
            let len = r.var().map_err(e)?;
            out.push((PartitionKey { token, key }, IndexEntry { position, len }));
        }
        Ok(out)
    }

    /// Looks `key` up in index block `b`: by binary search in the block's searchable form
    /// from `cache` (made and cached on a miss), else by a scan of the raw block.
    fn find_in_block(
        &self,
        b: usize,
        key: &PartitionKey,
        cache: Option<&mut BlockCache>,
    ) -> Result<Option<IndexEntry>> {
        let Some(cache) = cache else {
            return self.scan_index_block(b, key);
        };
        let table = match cache.get(self.id, BlockKind::IndexBlock, b as u64) {
            Some(t) => t,
            None => {
                let Some((body, offset)) = self.index_block_bytes(b)? else {
                    return Ok(None);
                };
                let t = self.searchable_index_block(&body, offset)?;
                cache.insert(self.id, BlockKind::IndexBlock, b as u64, t.clone());
                t
            }
        };
        Ok(search_index_table(&table, key))
    }

    /// An index block made searchable: its body (`n: u32 LE`, then the n entries as
    /// stored: token i64 LE, key length varint, key, position varint, length varint),
    /// then n u32 LE offsets of the entries in it, for a binary search
    /// ([`search_index_table`]). The offsets add 4 bytes an entry to the ~26 of a
    /// `standard1` entry, so a block cache holds about twice the index blocks it held as
    /// fixed 32-byte records plus the body (a row cache miss on data larger than the
    /// memory then mostly finds its index block cached).
    fn searchable_index_block(&self, body: &[u8], offset: u64) -> Result<Bytes> {
        let bad = |at: usize| {
            StorageError::corrupt(
                &self.index_path,
                offset + at as u64,
                "malformed index entry",
            )
        };
        let n = u32::from_le_bytes(
            body.get(0..4)
                .and_then(|x| x.try_into().ok())
                .ok_or_else(|| bad(0))?,
        ) as usize;
        if n > body.len() {
            return Err(bad(0));
        }
        // The body, then the offsets: the buffer has its final size from the start (the
        // block cache accounts the length).
        let mut out = Vec::with_capacity(body.len() + 4 * n);
        out.extend_from_slice(body);
        let mut pos = 4usize;
        let mut prev: Option<(i64, &[u8])> = None;
        for _ in 0..n {
            let at = u32::try_from(pos).map_err(|_| bad(pos))?;
            let token = i64::from_le_bytes(
                body.get(pos..pos + 8)
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| bad(pos))?,
            );
            pos += 8;
            let klen = read_var(body, &mut pos).ok_or_else(|| bad(pos))? as usize;
            let k = body
                .get(pos..pos.saturating_add(klen))
                .ok_or_else(|| bad(pos))?;
            pos += klen;
            read_var(body, &mut pos).ok_or_else(|| bad(pos))?;
            read_var(body, &mut pos).ok_or_else(|| bad(pos))?;
            if prev.is_some_and(|p| p >= (token, k)) {
                return Err(bad(pos));
            }
            prev = Some((token, k));
            out.extend_from_slice(&at.to_le_bytes());
        }
        Ok(Bytes::from(out))
    }

    /// Looks `key` up in index block `b` by scanning it, without materializing the entries.
    fn scan_index_block(&self, b: usize, key: &PartitionKey) -> Result<Option<IndexEntry>> {
        let Some(summary) = self.summary.get(b) else {
            return Ok(None);
        };
        RAW_INDEX_BLOCK.with(|buf| {
            let mut buf = buf.borrow_mut();
            self.read_index_block_into(summary, &mut buf)?;
            self.scan_index_body(&buf, summary.offset, key)
        })
    }

    /// Reads and verifies the index block of `s` into `buf` (its body, without the CRC).
    fn read_index_block_into(&self, s: &SummaryEntry, buf: &mut Vec<u8>) -> Result<()> {
        if s.offset
            .checked_add(s.len as u64)
            .is_none_or(|end| end > self.index_len)
            || s.len < 8
        {
            self.quarantined.store(true, AtomicOrdering::Relaxed);
            return Err(StorageError::corrupt(
                &self.index_path,
                s.offset,
                "index block past the end of the file",
            ));
        }
        buf.resize(s.len as usize, 0);
        crate::diskwait::read_exact_at(&self.index, &self.index_path, buf, s.offset)?;
        if check_crc(&self.index_path, buf).is_err() {
            self.quarantined.store(true, AtomicOrdering::Relaxed);
            return Err(StorageError::corrupt(
                &self.index_path,
                s.offset,
                "index block checksum mismatch",
            ));
        }
        buf.truncate(buf.len() - 4);
        Ok(())
    }

    /// Looks `key` up in an index block body by a scan.
    fn scan_index_body(
        &self,
        body: &[u8],
        offset: u64,
        key: &PartitionKey,
    ) -> Result<Option<IndexEntry>> {
        let bad = |at: usize| {
            StorageError::corrupt(
                &self.index_path,
                offset + at as u64,
                "malformed index entry",
            )
        };
        let var = |pos: &mut usize| -> Result<u64> {
            let mut v: u64 = 0;
            for shift in (0..64).step_by(7) {
                let byte = *body.get(*pos).ok_or_else(|| bad(*pos))?;
                *pos += 1;
                v |= ((byte & 0x7f) as u64) << shift;
                if byte & 0x80 == 0 {
                    return Ok(v);
                }
            }
            Err(bad(*pos))
        };
        let n = u32::from_le_bytes(
            body.get(0..4)
                .and_then(|x| x.try_into().ok())
                .ok_or_else(|| bad(0))?,
        );
        let mut pos = 4usize;
        for _ in 0..n {
            let token = i64::from_le_bytes(
                body.get(pos..pos + 8)
                    .and_then(|x| x.try_into().ok())
                    .ok_or_else(|| bad(pos))?,
            );
            pos += 8;
            let klen = var(&mut pos)? as usize;
            let k = body
                .get(pos..pos.saturating_add(klen))
                .ok_or_else(|| bad(pos))?;
            pos += klen;
            let position = var(&mut pos)?;
            let len = var(&mut pos)?;
            match (token, k).cmp(&(key.token, &key.key[..])) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal => return Ok(Some(IndexEntry { position, len })),
                std::cmp::Ordering::Greater => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Index of the summary block that may contain `key` (last block whose first key <= key).
    fn block_for(&self, token: i64, key: Option<&Bytes>) -> Option<usize> {
        let tokens = &self.summary_tokens;
        let lo = first_not_below(tokens, token);
        let idx = match key {
            None => lo,
            // Past the entries of smaller tokens, those of `token` itself (rarely more
            // than one) are ordered by their keys.
            Some(k) => {
                let same = tokens.get(lo..).unwrap_or_default();
                let hi = lo + same.iter().take_while(|&&t| t == token).count();
                let entries = self.summary.get(lo..hi).unwrap_or_default();
                lo + entries.partition_point(|s| s.key <= *k)
            }
        };
        idx.checked_sub(1)
    }

    pub fn find(&self, key: &PartitionKey) -> Result<Option<IndexEntry>> {
        self.find_with(key, None)
    }

    /// The serialized bytes of `key`'s partition here, from its index entry (None when
    /// this SSTable does not hold it).
    pub(crate) fn partition_len(
        &self,
        key: &PartitionKey,
        cache: Option<&mut BlockCache>,
    ) -> Result<Option<u64>> {
        if !self.may_contain(key) {
            return Ok(None);
        }
        let cache = cache.filter(|c| c.is_enabled());
        Ok(self.find_with(key, cache)?.map(|e| e.len))
    }

    /// An upper bound of this SSTable's largest partition's serialized bytes (its size
    /// histogram's highest bucket).
    pub(crate) fn max_partition_bytes(&self) -> u64 {
        self.stats
            .partition_size_histogram
            .iter()
            .rposition(|&n| n > 0)
            .map_or(0, |b| 2u64.saturating_pow(b as u32 + 1))
    }

    fn find_with(
        &self,
        key: &PartitionKey,
        cache: Option<&mut BlockCache>,
    ) -> Result<Option<IndexEntry>> {
        let Some(b) = self.block_for(key.token, Some(&key.key)) else {
            return Ok(None);
        };
        self.find_in_block(b, key, cache)
    }

    /// Reads a whole partition, or None if the SSTable does not have it.
    pub fn get(&self, key: &PartitionKey) -> Result<Option<PartitionUpdate>> {
        self.get_with(key, None)
    }

    /// [`get`](Self::get) with the index blocks and data chunks taken from (and added to)
    /// the shard's block cache when one is given.
    pub fn get_with(
        &self,
        key: &PartitionKey,
        cache: Option<&mut BlockCache>,
    ) -> Result<Option<PartitionUpdate>> {
        self.get_from(key, cache, None)
    }

    /// [`get_with`](Self::get_with) (or [`get_detached_with`](Self::get_detached_with) with
    /// `detach`'s fill limit) of only the rows in `rows`' slices, at most `rows.cap` of
    /// them (the first ones): the other rows are stepped over, not built. Decoding stops
    /// after the slices (or the cap) when this SSTable holds no tombstone (so no range
    /// tombstone follows the rows), or at once when the partition has a row index: then
    /// only the rows from the index entry before the slices' start are read, and the
    /// range tombstones where they start. With the update, the clustering of its last row
    /// when the cap left rows of the slices out (None when it has every one).
    pub fn get_sliced(
        &self,
        key: &PartitionKey,
        cache: Option<&mut BlockCache>,
        detach: Option<u64>,
        rows: RowSlices<'_>,
    ) -> Result<Option<(PartitionUpdate, Option<Clustering>)>> {
        if !self.may_contain(key) {
            return Ok(None);
        }
        let mut cache = cache.filter(|c| c.is_enabled());
        let Some(e) = self.find_with(key, cache.as_deref_mut())? else {
            return Ok(None);
        };
        self.get_sliced_at(key, e, cache, detach, rows).map(Some)
    }

    /// [`get_sliced`](Self::get_sliced) of the partition at index entry `e` (`key`'s,
    /// already looked up).
    pub(crate) fn get_sliced_at(
        &self,
        key: &PartitionKey,
        e: IndexEntry,
        cache: Option<&mut BlockCache>,
        detach: Option<u64>,
        rows: RowSlices<'_>,
    ) -> Result<(PartitionUpdate, Option<Clustering>)> {
        let mut cache = cache.filter(|c| c.is_enabled());
        if let Some((ri, b)) = self
            .usable_row_index()
            .and_then(|ri| Some((ri, ri.find(e.position)?)))
        {
            let indexed = self
                .row_index_block(ri, b, cache.as_deref_mut())
                .and_then(|block| {
                    self.get_indexed(key, e, &block, cache.as_deref_mut(), detach, rows)
                });
            match indexed {
                Ok(found) => return Ok(found),
                // Corruption with Data.db's chunks intact (a damaged block, or entries
                // that do not match the rows) is the row index's: the partition is decoded
                // from its start. A Data.db chunk that failed its checksum put the SSTable
                // out of service; I/O errors and reads that would wait for the disk are
                // the read's.
                Err(err @ StorageError::Corrupt { .. }) if !self.is_quarantined() => {
                    self.row_index_failed(err)
                }
                Err(err) => return Err(err),
            }
        }
        let bytes = self.partition_bytes(e, 0, e.len, cache, detach, true)?;
        let may_end = self.stats.tombstones == 0;
        let mut picker = CappedPick::new(rows, may_end);
        let (k, mut u) =
            decode_partition_picking(&self.data_path, bytes, e.position, |c| picker.pick(c))?;
        if &k != key {
            return Err(StorageError::corrupt(
                &self.data_path,
                e.position,
                "index points at another partition",
            ));
        }
        let cut = if rows.from_end {
            keep_last(&mut u.rows, rows.cap, false)
        } else {
            picker.cut(&u.rows)
        };
        Ok((u, cut))
    }

    /// Row index block `b` of `ri` (this SSTable's), through the block cache when given.
    fn row_index_block(
        &self,
        ri: &RowIndexFile,
        b: usize,
        cache: Option<&mut BlockCache>,
    ) -> Result<RowIndexBlock> {
        match cache {
            Some(c) => match c.get(self.id, BlockKind::RowIndex, b as u64) {
                Some(body) => Ok(body),
                None => ri.read_block(b).inspect(|body| {
                    c.insert(self.id, BlockKind::RowIndex, b as u64, body.clone());
                }),
            },
            None => ri.read_block(b),
        }
        .and_then(|body| RowIndexBlock::parse(body, ri.path()))
    }

    /// `key`'s partition index entry (None: not in this SSTable) and its row index block,
    /// for counting its rows by clustering ([`RowMarks`]; None when the partition has no
    /// block: under [`crate::rowindex::MIN_PARTITION_BYTES`], or written without a row
    /// index). The entry then serves the read ([`get_sliced_at`](Self::get_sliced_at)).
    /// A block found corrupt turns the row index off as a read through it does (then no
    /// marks); I/O errors and reads that would wait are returned.
    pub(crate) fn row_marks(
        &self,
        key: &PartitionKey,
        cache: Option<&mut BlockCache>,
    ) -> Result<Option<(IndexEntry, Option<RowMarks<'_>>)>> {
        if !self.may_contain(key) {
            return Ok(None);
        }
        let mut cache = cache.filter(|c| c.is_enabled());
        let Some(e) = self.find_with(key, cache.as_deref_mut())? else {
            return Ok(None);
        };
        let Some((ri, b)) = self
            .usable_row_index()
            .and_then(|ri| Some((ri, ri.find(e.position)?)))
        else {
            return Ok(Some((e, None)));
        };
        match self.row_index_block(ri, b, cache) {
            Ok(block) => Ok(Some((
                e,
                Some(RowMarks {
                    block,
                    path: ri.path(),
                }),
            ))),
            Err(err @ StorageError::Corrupt { .. }) if !self.is_quarantined() => {
                self.row_index_failed(err);
                Ok(Some((e, None)))
            }
            Err(err) => Err(err),
        }
    }

    /// [`get_sliced`](Self::get_sliced) of a partition with a row index `block`.
    fn get_indexed(
        &self,
        key: &PartitionKey,
        e: IndexEntry,
        block: &RowIndexBlock,
        mut cache: Option<&mut BlockCache>,
        detach: Option<u64>,
        rows: RowSlices<'_>,
    ) -> Result<(PartitionUpdate, Option<Clustering>)> {
        let path = &self.data_path;
        let corrupt =
            |at: u64, why: &'static str| StorageError::corrupt(path, e.position + at, why);
        let de = |err: amphora_types::codec::DecodeError| {
            StorageError::corrupt(path, err.offset as u64, err.reason)
        };
        if block.rts_at > e.len {
            return Err(corrupt(0, "row index past the partition's end"));
        }
        let mut r = self.partition_range(e, 0, block.rows_at, detach, cache.as_deref_mut())?;
        let k = r.bytes().map_err(de)?;
        let token = i64::from_be_bytes(r.fixed::<8>().map_err(de)?);
        if k != key.key || token != key.token {
            return Err(corrupt(0, "index points at another partition"));
        }
        let base = r.z().map_err(de)?;
        let head = read_update_head(&mut r, base).map_err(de)?;
        if r.remaining() != 0 || head.rows as u64 != block.nrows {
            return Err(corrupt(0, "row index does not match the partition"));
        }
        // The rows of block `i` (from its entry to the next) that `pick` keeps; whether
        // it ended them.
        let block_rows = |i: usize,
                          pick: &mut CappedPick<'_>,
                          out: &mut Vec<Row>,
                          cache: Option<&mut BlockCache>|
         -> Result<bool> {
            let (at, next) = (block.entry(i, path)?, block.entry(i + 1, path)?);
            if next.ordinal <= at.ordinal || next.offset <= at.offset {
                return Err(corrupt(at.offset, "row index entries out of order"));
            }
            let mut r =
                self.partition_range(e, at.offset, next.offset - at.offset, detach, cache)?;
            let count = (next.ordinal - at.ordinal) as usize;
            // The block's first row must be its entry's (an index that does not match its
            // data, with valid checksums, would otherwise misplace rows).
            let mut first = Some(&at.clustering);
            let mut matches = true;
            let ended = read_rows_picking(
                &mut r,
                base,
                count,
                |c| {
                    if let Some(want) = first.take() {
                        matches = c == want;
                    }
                    pick.pick(c)
                },
                out,
            )
            .map_err(de)?;
            if !matches {
                return Err(corrupt(
                    at.offset,
                    "row index entry does not match the row it points at",
                ));
            }
            if !ended && r.remaining() != 0 {
                return Err(corrupt(
                    at.offset,
                    "rows do not end where the row index says",
                ));
            }
            Ok(ended)
        };
        // Blocks `from..to` hold the slices' rows: `from` is the last whose first row is
        // not after every slice's start (rows before a slice's start are in it or in
        // earlier blocks), `to` the first after it whose first row is past every slice.
        let n = block.len();
        let mut from = n;
        for s in rows.slices {
            let lo = first_entry(block, path, 0, |c| rows.cmp.after_start(c, &s.start))?;
            from = from.min(lo.saturating_sub(1));
        }
        let to = first_entry(block, path, from + 1, |c| !rows.may_want(c))?;
        let (kept, cut) = if rows.from_end {
            // The last rows: blocks from the end until they hold `cap` rows.
            let every = RowSlices {
                cap: usize::MAX,
                ..rows
            };
            let mut parts = Vec::new();
            let (mut i, mut taken) = (to, 0);
            while i > from && taken < rows.cap {
                i -= 1;
                let mut got = Vec::new();
                block_rows(
                    i,
                    &mut CappedPick::new(every, true),
                    &mut got,
                    cache.as_deref_mut(),
                )?;
                taken += got.len();
                parts.push(got);
            }
            let mut kept: Vec<Row> = parts.into_iter().rev().flatten().collect();
            let cut = keep_last(&mut kept, rows.cap, i > from);
            (kept, cut)
        } else {
            let mut picker = CappedPick::new(rows, true);
            let mut kept = Vec::new();
            for i in from..to {
                if block_rows(i, &mut picker, &mut kept, cache.as_deref_mut())? {
                    break;
                }
            }
            let cut = picker.cut(&kept);
            (kept, cut)
        };
        let range_tombstones = if self.stats.tombstones > 0 {
            let mut r =
                self.partition_range(e, block.rts_at, e.len - block.rts_at, detach, cache)?;
            let rts = read_range_tombstones(&mut r, base).map_err(de)?;
            if r.remaining() != 0 {
                return Err(corrupt(block.rts_at, "trailing bytes after partition"));
            }
            rts
        } else {
            Vec::new()
        };
        let u = PartitionUpdate {
            partition_deletion: head.partition_deletion,
            static_row: head.static_row,
            rows: kept,
            range_tombstones,
        };
        Ok((u, cut))
    }

    /// A reader of bytes `at..at + len` of the partition at `e`, read for a sliced read.
    fn partition_range(
        &self,
        e: IndexEntry,
        at: u64,
        len: u64,
        detach: Option<u64>,
        cache: Option<&mut BlockCache>,
    ) -> Result<Reader> {
        let bytes = self.partition_bytes(e, at, len, cache, detach, true)?;
        Ok(Reader::with_offset(bytes, (e.position + at) as usize))
    }

    /// Bytes `at..at + len` of the partition at `e`, read for [`get_from`](Self::get_from)
    /// or (when `sliced`) [`get_sliced`](Self::get_sliced).
    fn partition_bytes(
        &self,
        e: IndexEntry,
        at: u64,
        len: u64,
        cache: Option<&mut BlockCache>,
        detach: Option<u64>,
        sliced: bool,
    ) -> Result<Bytes> {
        let pos = e.position + at;
        Ok(match detach {
            // A detached read fills the row cache, which then holds the partition, or is a
            // miss the row cache kept out (its slices only; [`RowCache::admits`]): its
            // chunks are not added to the block cache (with data larger than the memory,
            // the chunks of random reads evicted the index blocks every miss needs, and
            // filling the cache cost each miss a whole chunk's allocation and LZ4
            // decoding). It decodes a chunk only up to the partition, into the reader's
            // buffer, and copies the partition out, which is the detached copy.
            //
            // [`RowCache::admits`]: crate::rowcache::RowCache::admits
            Some(limit) if e.len <= limit => self.read_range_detached(pos, len, cache)?,
            // Too large for the row cache, so read again next time: its chunks are cached.
            // A sliced read keeps only a few rows for its answer, which may hold the chunk
            // for that long; a whole one is copied so what it returns holds no chunk.
            Some(_) if cache.is_some() && !sliced => {
                Bytes::copy_from_slice(&self.read_range(pos, len, cache)?)
            }
            // Without the block cache the bytes are already a copy of their own.
            _ => self.read_range(pos, len, cache)?,
        })
    }

    /// [`get_with`](Self::get_with), decoded from a copy of the partition's bytes: its
    /// values hold no data chunk, so the row cache can keep them as they are. A partition
    /// of at most `fill_limit` bytes (what the row cache will hold) takes its chunks from
    /// `cache` when they are there but does not add them: the row cache will serve it.
    pub fn get_detached_with(
        &self,
        key: &PartitionKey,
        cache: Option<&mut BlockCache>,
        fill_limit: u64,
    ) -> Result<Option<PartitionUpdate>> {
        self.get_from(key, cache, Some(fill_limit))
    }

    fn get_from(
        &self,
        key: &PartitionKey,
        cache: Option<&mut BlockCache>,
        detach: Option<u64>,
    ) -> Result<Option<PartitionUpdate>> {
        if !self.may_contain(key) {
            return Ok(None);
        }
        let mut cache = cache.filter(|c| c.is_enabled());
        let Some(e) = self.find_with(key, cache.as_deref_mut())? else {
            return Ok(None);
        };
        let bytes = self.partition_bytes(e, 0, e.len, cache, detach, false)?;
        let (k, u) = decode_partition(&self.data_path, bytes, e.position)?;
        if &k != key {
            return Err(StorageError::corrupt(
                &self.data_path,
                e.position,
                "index points at another partition",
            ));
        }
        Ok(Some(u))
    }

    pub(crate) fn read_partition_at(
        &self,
        e: IndexEntry,
    ) -> Result<(PartitionKey, PartitionUpdate)> {
        let bytes = self.read_range(e.position, e.len, None)?;
        decode_partition(&self.data_path, bytes, e.position)
    }

    /// Iterates partitions in ring order from the first one >= (token, key) (or > when
    /// `exclusive`); `None` key means "from the first key with this token".
    pub fn scan_from(
        &self,
        token: i64,
        key: Option<&Bytes>,
        exclusive: bool,
    ) -> Result<Scanner<'_>> {
        let start_block = self.block_for(token, key).unwrap_or(0);
        let mut s = Scanner::new(self, start_block);
        s.load_block()?;
        // Skip entries before the start.
        while let Some(k) = s.peek_key()? {
            let before = match key {
                Some(kk) => {
                    let c = (k.token, &k.key).cmp(&(token, kk));
                    c.is_lt() || (exclusive && c.is_eq())
                }
                None => k.token < token || (exclusive && k.token == token),
            };
            if !before {
                break;
            }
            s.skip();
        }
        Ok(s)
    }

    /// Checks every checksum of every component.
    pub fn verify(&self) -> Result<()> {
        for i in 0..self.chunk_offsets.len().saturating_sub(1) {
            self.read_chunk(i)?;
        }
        let data = fs::read(&self.index_path).map_err(|e| StorageError::io(&self.index_path, e))?;
        check_crc(&self.index_path, &data)?;
        for b in 0..self.summary.len() {
            self.index_block(b)?;
        }
        match self.row_index_fault.get() {
            Some(StorageError::Corrupt {
                path,
                offset,
                reason,
            }) => return Err(StorageError::corrupt(path, *offset, reason.clone())),
            Some(other) => {
                return Err(StorageError::corrupt(
                    component_path(&self.dir, self.generation, crate::rowindex::COMPONENT),
                    0,
                    other.to_string(),
                ));
            }
            None => {}
        }
        if let Some(ri) = &self.row_index {
            for b in 0..ri.len() {
                RowIndexBlock::parse(ri.read_block(b)?, ri.path())?;
            }
        }
        Ok(())
    }

    /// Removes all component files (TOC first so a crash never leaves half an SSTable
    /// live). Only for a reader nothing else reads through: the files' blocks are freed
    /// while it may still be open (see [`SSTableReader::delete_files_after_reads`]).
    pub fn delete_files(&self) {
        delete_generation(&self.dir, self.generation);
    }

    /// Removes all component files now (TOC first); their blocks are freed once the last
    /// `Arc` of `this` is gone, so reads in flight keep working.
    pub fn delete_files_after_reads(this: &std::sync::Arc<SSTableReader>) {
        let weak: std::sync::Weak<SSTableReader> = std::sync::Arc::downgrade(this);
        delete_generation_held(&this.dir, this.generation, Some(weak));
    }
}

/// An SSTable as a compaction that does not read it sees it: its key filter and its oldest
/// timestamp, for what the compaction may purge ([`crate::compaction::PurgeContext`]).
/// Holds no reference to the SSTable's reader, so a compaction queued behind another does
/// not keep the readers the other replaces: their Data.db files would otherwise stay
/// unusable as spares until it ran ([`crate::spare`]; under a write load the queue is never
/// empty, and no flush wrote over a spare for minutes: docs/benchmarks.md, "Spares held by
/// queued compactions").
#[derive(Clone, Debug)]
pub struct OverlapFilter {
    pub min_timestamp: i64,
    min_token: i64,
    max_token: i64,
    bloom: Arc<Bloom>,
}

impl OverlapFilter {
    /// Whether the SSTable may hold `key`'s partition (as [`SSTableReader::may_contain`]).
    pub fn may_contain(&self, key: &PartitionKey) -> bool {
        may_hold(key, self.min_token, self.max_token, &self.bloom)
    }
}

/// Whether an SSTable of tokens `min..=max` and filter `bloom` may hold `key`'s partition.
#[inline]
fn may_hold(key: &PartitionKey, min: i64, max: i64, bloom: &Bloom) -> bool {
    key.token >= min && key.token <= max && bloom.may_contain(key.token)
}

impl Drop for SSTableReader {
    fn drop(&mut self) {
        if self.delete_on_drop.load(AtomicOrdering::Relaxed) {
            self.delete_files();
        }
    }
}

/// Where the time of this thread's [`SSTableWriter::finish`]es went, summed since the
/// last [`take_finish_times`] (compaction reports them in its log line).
#[derive(Debug, Default, Clone, Copy)]
pub struct FinishTimes {
    /// Writing out what the data stream still held (waiting for the writer thread).
    pub write_out: std::time::Duration,
    /// Writing the other components and syncing everything (the device's cache flush).
    pub sync: std::time::Duration,
    /// Opening the finished SSTable (reading its summary and filter back).
    pub open: std::time::Duration,
}

/// This thread's [`FinishTimes`] since the last call, which resets them.
pub fn take_finish_times() -> FinishTimes {
    FINISH_TIMES.with(|t| t.take())
}

thread_local! {
    static FINISH_TIMES: std::cell::Cell<FinishTimes> = const {
        std::cell::Cell::new(FinishTimes {
            write_out: std::time::Duration::ZERO,
            sync: std::time::Duration::ZERO,
            open: std::time::Duration::ZERO,
        })
    };
    /// The stored bytes of a chunk being read (per thread, reused).
    static RAW_CHUNK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// An index block being scanned without the block cache (per thread, reused).
    static RAW_INDEX_BLOCK: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A reader's buffer for reads without the block cache: chunk `chunk`, decompressed.
#[derive(Default)]
struct UncachedChunk {
    chunk: Option<usize>,
    bytes: Vec<u8>,
    /// `bytes[..valid]` are decoded.
    valid: usize,
}

/// The body of a partition's serialized bytes (as `put_partition` writes them): what
/// follows its key and token; None if the bytes are too short.
pub fn partition_body(raw: &[u8]) -> Option<&[u8]> {
    let mut pos = 0;
    let klen = usize::try_from(read_var(raw, &mut pos)?).ok()?;
    raw.get(pos.checked_add(klen)?.checked_add(8)?..)
}

/// The clustering slices a single-partition read wants of an SSTable's partition
/// ([`SSTableReader::get_sliced`]); not empty.
#[derive(Clone, Copy)]
pub struct RowSlices<'a> {
    pub cmp: &'a ClusteringComparator,
    pub slices: &'a [ClusteringSlice],
    /// At most this many rows (the first ones in the slices, the last ones when
    /// `from_end`), at least 1; `usize::MAX`: every one.
    pub cap: usize,
    /// The cap keeps the last rows (a reversed read).
    pub from_end: bool,
}

impl RowSlices<'_> {
    /// What decoding does with a row of clustering `c` (rows come in clustering order):
    /// keep it when a slice contains it; once it is past every slice's end, end the
    /// decoding where that is allowed (`may_end`: no range tombstone can follow), else
    /// step over it.
    fn pick(&self, c: &Clustering, may_end: bool) -> RowPick {
        if self.slices.iter().any(|s| s.contains(self.cmp, c)) {
            RowPick::Keep
        } else if may_end && !self.may_want(c) {
            RowPick::End
        } else {
            RowPick::Skip
        }
    }

    /// Whether a row of clustering `c` or a later one may be in a slice (`c` is before
    /// some slice's end).
    fn may_want(&self, c: &Clustering) -> bool {
        self.slices.iter().any(|s| self.cmp.before_end(c, &s.end))
    }
}

/// [`RowSlices::pick`] that keeps at most `cap` rows: the rows of the slices after those
/// are stepped over (or end the decoding, where that is allowed).
struct CappedPick<'a> {
    rows: RowSlices<'a>,
    may_end: bool,
    kept: usize,
    full: bool,
}

impl<'a> CappedPick<'a> {
    /// With `rows.from_end` the cap is applied after decoding ([`keep_last`]).
    fn new(rows: RowSlices<'a>, may_end: bool) -> Self {
        let rows = if rows.from_end {
            RowSlices {
                cap: usize::MAX,
                ..rows
            }
        } else {
            rows
        };
        CappedPick {
            rows,
            may_end,
            kept: 0,
            full: false,
        }
    }

    fn pick(&mut self, c: &Clustering) -> RowPick {
        match self.rows.pick(c, self.may_end) {
            RowPick::Keep if self.kept >= self.rows.cap => {
                self.full = true;
                if self.may_end {
                    RowPick::End
                } else {
                    RowPick::Skip
                }
            }
            RowPick::Keep => {
                self.kept += 1;
                RowPick::Keep
            }
            p => p,
        }
    }

    /// The clustering of the last of `kept` when the cap left rows out.
    fn cut(&self, kept: &[Row]) -> Option<Clustering> {
        if self.full {
            kept.last().map(|r| r.clustering.clone())
        } else {
            None
        }
    }
}

/// Keeps the last `cap` of `rows` (in clustering order); returns the clustering of the
/// first one kept when rows were dropped or `more_before` says others may precede them.
fn keep_last(rows: &mut Vec<Row>, cap: usize, more_before: bool) -> Option<Clustering> {
    let cut = rows.len() > cap || more_before;
    if rows.len() > cap {
        rows.drain(..rows.len() - cap);
    }
    if cut {
        rows.first().map(|r| r.clustering.clone())
    } else {
        None
    }
}

/// [`decode_partition`] building only the rows `pick` keeps
/// ([`amphora_types::codec::read_update_picking`]).
fn decode_partition_picking(
    path: &Path,
    bytes: Bytes,
    offset: u64,
    pick: impl FnMut(&Clustering) -> RowPick,
) -> Result<(PartitionKey, PartitionUpdate)> {
    let mut r = Reader::with_offset(bytes, offset as usize);
    let e = |err: amphora_types::codec::DecodeError| {
        StorageError::corrupt(path, err.offset as u64, err.reason)
    };
    let key = r.bytes().map_err(e)?;
    let token = i64::from_be_bytes(r.fixed::<8>().map_err(e)?);
    let base = r.z().map_err(e)?;
    let (u, ended) = read_update_picking(&mut r, base, pick).map_err(e)?;
    if !ended && r.remaining() != 0 {
        return Err(StorageError::corrupt(
            path,
            offset,
            "trailing bytes after partition",
        ));
    }
    Ok((PartitionKey { token, key }, u))
}

fn decode_partition(
    path: &Path,
    bytes: Bytes,
    offset: u64,
) -> Result<(PartitionKey, PartitionUpdate)> {
    decode_partition_picking(path, bytes, offset, |_| RowPick::Keep)
}

/// The index of the first of the sorted `tokens` that is not below `token`
/// (`partition_point(|t| t < token)`). Tokens are hashes, spread evenly over their range:
/// the search starts where `token` falls in proportion between the first and the last one
/// and gallops from there, so it touches a few neighbouring cache lines instead of one
/// line per halving of the whole array (a summary of 3M partitions has 23k tokens, and
/// the plain binary search was 6% of a row cache miss's CPU).
fn first_not_below(tokens: &[i64], token: i64) -> usize {
    let n = tokens.len();
    let (Some(&first), Some(&last)) = (tokens.first(), tokens.last()) else {
        return 0;
    };
    if n < 64 || token <= first || token > last || first >= last {
        return tokens.partition_point(|&t| t < token);
    }
    // first < token <= last: the answer is in 1..n.
    let span = (last as i128 - first as i128) as u128;
    let guess = ((token as i128 - first as i128) as u128 * (n as u128 - 1) / span) as usize;
    let guess = guess.clamp(1, n - 1);
    // Bracket the answer in (lo, hi]: tokens[lo] < token <= tokens[hi].
    let (mut lo, mut hi);
    let mut step = 8usize;
    if tokens.get(guess).is_some_and(|&t| t < token) {
        lo = guess;
        hi = (guess + step).min(n - 1);
        while tokens.get(hi).is_some_and(|&t| t < token) {
            lo = hi;
            step *= 2;
            hi = (hi + step).min(n - 1);
        }
    } else {
        hi = guess;
        lo = guess.saturating_sub(step);
        while tokens.get(lo).is_some_and(|&t| t >= token) {
            hi = lo;
            step *= 2;
            lo = lo.saturating_sub(step);
        }
    }
    let window = tokens.get(lo + 1..hi).unwrap_or_default();
    lo + 1 + window.partition_point(|&t| t < token)
}

/// Binary search of a searchable index block (built by
/// `SSTableReader::searchable_index_block`, so well formed: a malformed one finds nothing).
fn search_index_table(t: &[u8], key: &PartitionKey) -> Option<IndexEntry> {
    let n = u32::from_le_bytes(t.get(0..4)?.try_into().ok()?) as usize;
    let offsets = t.len().checked_sub(n.checked_mul(4)?)?;
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let at = offsets + mid * 4;
        let mut pos = u32::from_le_bytes(t.get(at..at + 4)?.try_into().ok()?) as usize;
        let token = i64::from_le_bytes(t.get(pos..pos + 8)?.try_into().ok()?);
        pos += 8;
        let klen = usize::try_from(read_var(t, &mut pos)?).ok()?;
        let k = t.get(pos..pos.checked_add(klen)?)?;
        match (token, k).cmp(&(key.token, &key.key[..])) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => {
                pos += klen;
                let position = read_var(t, &mut pos)?;
                let len = read_var(t, &mut pos)?;
                return Some(IndexEntry { position, len });
            }
        }
    }
    None
}

/// Sequential reader over partitions in ring order.
///
/// Index entries are parsed one at a time from the current (verified) index block, so a
/// scan allocates nothing per partition (PERF-CRITICAL: compaction reads every entry).
pub struct Scanner<'a> {
    sst: &'a SSTableReader,
    block: usize,
    /// The current index block's body (verified, without its CRC), its offset in Index.db,
    /// where its next unparsed entry starts and how many entries are left in it.
    block_body: Bytes,
    block_offset: u64,
    next_at: usize,
    left: u32,
    /// The entry [`peek_key`](Self::peek_key) loaded and nothing has consumed yet.
    current: Option<(PartitionKey, IndexEntry)>,
    /// The chunk [`next_raw_with`](Self::next_raw_with) reads from (its index and its
    /// uncompressed bytes), and the buffer its stored bytes are read into.
    chunk: Option<usize>,
    chunk_data: Vec<u8>,
    chunk_raw: Vec<u8>,
    /// A partition that spans chunks, assembled.
    scratch: Vec<u8>,
    /// Where [`load_current_raw`](Self::load_current_raw) left the current partition's
    /// bytes: a range of `chunk_data`, or (None) all of `scratch`.
    raw_at: Option<(usize, usize)>,
}

impl<'a> Scanner<'a> {
    fn new(sst: &'a SSTableReader, block: usize) -> Self {
        Scanner {
            sst,
            block,
            block_body: Bytes::new(),
            block_offset: 0,
            next_at: 0,
            left: 0,
            current: None,
            chunk: None,
            chunk_data: Vec::new(),
            chunk_raw: Vec::new(),
            scratch: Vec::new(),
            raw_at: Some((0, 0)),
        }
    }

    fn load_block(&mut self) -> Result<()> {
        self.current = None;
        self.left = 0;
        let Some((body, offset)) = self.sst.index_block_bytes(self.block)? else {
            return Ok(());
        };
        let n = body
            .get(0..4)
            .and_then(|x| x.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| {
                StorageError::corrupt(&self.sst.index_path, offset, "malformed index entry")
            })?;
        self.block_body = body;
        self.block_offset = offset;
        self.next_at = 4;
        self.left = n;
        Ok(())
    }

    /// Parses the next entry of the current block (one is left).
    fn parse_entry(&mut self) -> Result<(PartitionKey, IndexEntry)> {
        let body = &self.block_body;
        let mut pos = self.next_at;
        let bad = |at: usize| {
            StorageError::corrupt(
                &self.sst.index_path,
                self.block_offset + at as u64,
                "malformed index entry",
            )
        };
        let token = i64::from_le_bytes(
            body.get(pos..pos + 8)
                .and_then(|x| x.try_into().ok())
                .ok_or_else(|| bad(pos))?,
        );
        pos += 8;
        let klen = read_var(body, &mut pos).ok_or_else(|| bad(pos))? as usize;
        let kend = pos.checked_add(klen).filter(|&e| e <= body.len());
        let Some(kend) = kend else {
            return Err(bad(pos));
        };
        let key = body.slice(pos..kend);
        pos = kend;
        let position = read_var(body, &mut pos).ok_or_else(|| bad(pos))?;
        let len = read_var(body, &mut pos).ok_or_else(|| bad(pos))?;
        self.next_at = pos;
        self.left -= 1;
        Ok((PartitionKey { token, key }, IndexEntry { position, len }))
    }

    /// The key of the next partition without reading it.
    pub fn peek_key(&mut self) -> Result<Option<&PartitionKey>> {
        while self.current.is_none() {
            if self.left > 0 {
                match self.parse_entry() {
                    Ok(e) => self.current = Some(e),
                    Err(e) => {
                        // The rest of the block is unreadable: the next call moves on to
                        // the next block (scrub skips the bad one).
                        self.left = 0;
                        return Err(e);
                    }
                }
            } else if self.block + 1 >= self.sst.summary.len() {
                return Ok(None);
            } else {
                self.block += 1;
                self.load_block()?;
            }
        }
        Ok(self.current.as_ref().map(|e| &e.0))
    }

    /// Consumes the next index entry.
    fn take_entry(&mut self) -> Result<Option<(PartitionKey, IndexEntry)>> {
        self.peek_key()?;
        Ok(self.current.take())
    }

    pub fn next_partition(&mut self) -> Result<Option<(PartitionKey, PartitionUpdate)>> {
        let Some((k, e)) = self.take_entry()? else {
            return Ok(None);
        };
        let (k2, u) = self.sst.read_partition_at(e)?;
        if k2 != k {
            return Err(StorageError::corrupt(
                &self.sst.data_path,
                e.position,
                "index and data disagree on the key",
            ));
        }
        Ok(Some((k, u)))
    }

    /// The next partition's serialized bytes, undecoded.
    pub fn next_raw(&mut self) -> Result<Option<(PartitionKey, Bytes)>> {
        let Some((k, e)) = self.take_entry()? else {
            return Ok(None);
        };
        Ok(Some((k, self.sst.read_range(e.position, e.len, None)?)))
    }

    /// The key [`peek_key`](Self::peek_key) last returned, without loading anything.
    pub fn current_key(&self) -> Option<&PartitionKey> {
        self.current.as_ref().map(|e| &e.0)
    }

    /// Passes the next partition's key and serialized bytes, undecoded and borrowed from
    /// the scanner's current chunk (checked when read), to `f`; false at the end.
    pub fn next_raw_with(
        &mut self,
        f: impl FnOnce(&PartitionKey, &[u8]) -> Result<()>,
    ) -> Result<bool> {
        match self.load_current_raw() {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => {
                // The partition is consumed even when its bytes cannot be read (scrub
                // moves on to the next one).
                self.current = None;
                return Err(e);
            }
        }
        let Some((k, _)) = self.current.take() else {
            return Ok(false);
        };
        f(&k, self.current_raw()).map(|()| true)
    }

    /// Reads the serialized bytes of the partition [`peek_key`](Self::peek_key) loads,
    /// without consuming it, for [`current_raw`](Self::current_raw); false at the end.
    pub fn load_current_raw(&mut self) -> Result<bool> {
        self.peek_key()?;
        let Some((_, e)) = &self.current else {
            return Ok(false);
        };
        let sst = self.sst;
        let (pos, len) = (e.position, e.len);
        if pos
            .checked_add(len)
            .is_none_or(|end| end > sst.uncompressed_len)
        {
            return Err(StorageError::corrupt(
                &sst.data_path,
                pos,
                "partition extends past the end of the data",
            ));
        }
        let cb = sst.chunk_bytes;
        let first = (pos / cb) as usize;
        let last = ((pos + len).saturating_sub(1) / cb) as usize;
        self.scratch.clear();
        self.raw_at = Some((0, 0));
        for i in first..=last {
            if self.chunk != Some(i) {
                self.chunk = None;
                sst.read_chunk_into(i, &mut self.chunk_raw, &mut self.chunk_data)?;
                self.chunk = Some(i);
            }
            let c = &self.chunk_data;
            let cstart = i as u64 * cb;
            let s = (pos.max(cstart) - cstart) as usize;
            let e = ((pos + len).min(cstart + cb) - cstart) as usize;
            let part = c
                .get(s..e)
                .ok_or_else(|| StorageError::corrupt(&sst.data_path, pos, "short chunk"))?;
            if first == last {
                self.raw_at = Some((s, e));
                return Ok(true);
            }
            self.scratch.extend_from_slice(part);
        }
        self.raw_at = None;
        Ok(true)
    }

    /// The bytes [`load_current_raw`](Self::load_current_raw) last read (empty before).
    pub fn current_raw(&self) -> &[u8] {
        match self.raw_at {
            Some((s, e)) => self.chunk_data.get(s..e).unwrap_or(&[]),
            None => &self.scratch,
        }
    }

    /// The SSTable being scanned.
    pub fn sstable(&self) -> &'a SSTableReader {
        self.sst
    }

    /// Drops the entry [`peek_key`](Self::peek_key) loaded (nothing if none is loaded).
    pub fn skip(&mut self) {
        self.current = None;
    }

    /// Whether the partition [`peek_key`](Self::peek_key) returns has at least `min_len`
    /// serialized bytes and a row index (false at the end).
    pub fn peek_row_indexed(&mut self, min_len: u64) -> Result<bool> {
        self.peek_key()?;
        Ok(self.current.as_ref().is_some_and(|(_, e)| {
            e.len >= min_len
                && self
                    .sst
                    .usable_row_index()
                    .is_some_and(|ri| ri.find(e.position).is_some())
        }))
    }
}

impl Scanner<'_> {
    /// The index entry of the partition [`peek_key`](Self::peek_key) loaded.
    pub fn current_entry(&self) -> Option<&IndexEntry> {
        self.current.as_ref().map(|e| &e.1)
    }

    /// Consumes the next partition's index entry without reading its bytes (for
    /// [`SSTableReader::stream_partition`]).
    pub fn take_current(&mut self) -> Result<Option<(PartitionKey, IndexEntry)>> {
        self.take_entry()
    }
}

/// Bytes kept loaded ahead of a [`PartitionStream`]'s next read, so that most rows decode
/// at the first try.
const STREAM_AHEAD_BYTES: usize = 16 << 10;

/// One partition of an SSTable read a row at a time, a chunk at a time: what a
/// compaction merges when the partition is too wide to hold decoded
/// ([`SSTableReader::stream_partition`]). The rows it returns share its buffers.
pub struct PartitionStream<'a> {
    sst: &'a SSTableReader,
    /// The partition's start and end in the uncompressed stream, and where the next byte
    /// not yet loaded is.
    start: u64,
    end: u64,
    next: u64,
    /// Loaded bytes not yet consumed; `buf_at` is where they start in the stream.
    buf: Bytes,
    buf_at: u64,
    base: i64,
    rows_left: usize,
    chunk_raw: Vec<u8>,
    chunk_data: Vec<u8>,
}

impl SSTableReader {
    /// Opens the partition of index entry `e` (with key `key`) for reading a row at a
    /// time: its head is read; its rows follow ([`PartitionStream::next_row`]).
    pub fn stream_partition(
        &self,
        key: &PartitionKey,
        e: IndexEntry,
    ) -> Result<(PartitionStream<'_>, amphora_types::codec::UpdateHead)> {
        let end = e
            .position
            .checked_add(e.len)
            .filter(|&x| x <= self.uncompressed_len);
        let Some(end) = end else {
            return Err(StorageError::corrupt(
                &self.data_path,
                e.position,
                "partition extends past the end of the data",
            ));
        };
        let mut s = PartitionStream {
            sst: self,
            start: e.position,
            end,
            next: e.position,
            buf: Bytes::new(),
            buf_at: e.position,
            base: 0,
            rows_left: 0,
            chunk_raw: Vec::new(),
            chunk_data: Vec::new(),
        };
        let (k, token, base) = s.decode(|r| {
            let k = r.bytes()?;
            let token = i64::from_be_bytes(r.fixed::<8>()?);
            Ok((k, token, r.z()?))
        })?;
        if k != key.key || token != key.token {
            return Err(StorageError::corrupt(
                &self.data_path,
                e.position,
                "index and data disagree on the key",
            ));
        }
        s.base = base;
        let head = s.decode(|r| read_update_head(r, base))?;
        s.rows_left = head.rows;
        Ok((s, head))
    }
}

impl PartitionStream<'_> {
    /// Loads the next chunk's share of the partition after what is loaded; false when
    /// everything is.
    fn fill(&mut self) -> Result<bool> {
        if self.next >= self.end {
            return Ok(false);
        }
        let sst = self.sst;
        let cb = sst.chunk_bytes;
        let i = (self.next / cb) as usize;
        sst.read_chunk_into(i, &mut self.chunk_raw, &mut self.chunk_data)?;
        let cstart = i as u64 * cb;
        let from = (self.next - cstart) as usize;
        let to = (self.end.min(cstart + cb) - cstart) as usize;
        let part = self
            .chunk_data
            .get(from..to)
            .ok_or_else(|| StorageError::corrupt(&sst.data_path, self.next, "short chunk"))?;
        let mut b = Vec::with_capacity(self.buf.len() + part.len());
        b.extend_from_slice(&self.buf);
        b.extend_from_slice(part);
        self.buf = Bytes::from(b);
        self.next = cstart + to as u64;
        Ok(true)
    }

    /// Runs `f` over the loaded bytes, loading more while it fails for want of them;
    /// consumes what it read. A failure with the whole partition loaded is corruption.
    fn decode<T>(
        &mut self,
        f: impl Fn(&mut Reader) -> std::result::Result<T, amphora_types::codec::DecodeError>,
    ) -> Result<T> {
        while self.buf.len() < STREAM_AHEAD_BYTES && self.fill()? {}
        loop {
            let mut r = Reader::new(self.buf.clone());
            match f(&mut r) {
                Ok(v) => {
                    let used = r.position();
                    self.buf = self.buf.slice(used..);
                    self.buf_at += used as u64;
                    return Ok(v);
                }
                Err(e) => {
                    if !self.fill()? {
                        return Err(StorageError::corrupt(
                            &self.sst.data_path,
                            self.buf_at + e.offset as u64,
                            format!("partition at {}: {}", self.start, e.reason),
                        ));
                    }
                }
            }
        }
    }

    /// How many clustering rows are left.
    pub fn rows_left(&self) -> usize {
        self.rows_left
    }

    /// The next clustering row (None after the last).
    pub fn next_row(&mut self) -> Result<Option<Row>> {
        if self.rows_left == 0 {
            return Ok(None);
        }
        let base = self.base;
        let row = self.decode(|r| amphora_types::codec::read_row(r, base))?;
        self.rows_left -= 1;
        Ok(Some(row))
    }

    /// Steps over the rest of the rows and reads the range tombstones after them.
    pub fn range_tombstones(&mut self) -> Result<Vec<RangeTombstone>> {
        while self.rows_left > 0 {
            self.decode(|r| amphora_types::codec::scan_rows(r, 1, |_, _| {}))?;
            self.rows_left -= 1;
        }
        let base = self.base;
        self.decode(|r| read_range_tombstones(r, base))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amphora_types::data::{Cell, Clustering, ClusteringBound, LivenessInfo};
    use amphora_types::schema::{ColumnKind, TableOptions};
    use std::sync::Arc;

    /// The row marker byte round-trips, and a Statistics.db written before it existed
    /// (one byte shorter) reads as "has markers", which never lets a read skip the SSTable.
    #[test]
    fn stats_row_marker_trailer_round_trips_and_defaults_to_has() {
        let path = Path::new("x-Statistics.db");
        for has in [false, true] {
            let st = Stats {
                has_row_markers: has,
                has_non_expiring_data: !has,
                ..Stats::default()
            };
            assert_eq!(Stats::decode(path, &st.encode()).expect("decode"), st);
        }
        let st = Stats::default();
        let bytes = st.encode();
        let mut older = bytes[..bytes.len() - 5].to_vec();
        let crc = crc32c::crc32c(&older);
        older.extend_from_slice(&crc.to_le_bytes());
        let decoded = Stats::decode(path, &older).expect("decode");
        assert!(decoded.has_row_markers);
        assert!(
            !decoded.has_non_expiring_data,
            "the byte before it is still read"
        );
    }

    proptest::proptest! {
        /// The interpolating search finds what a plain binary search finds, for tokens
        /// spread evenly or bunched, with repeats, and for tokens outside their range.
        #[test]
        fn first_not_below_is_partition_point(
            mut tokens in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::any::<i64>(),
                    -300i64..300,
                    proptest::prelude::Just(i64::MAX),
                    proptest::prelude::Just(i64::MIN),
                ],
                0..400,
            ),
            probes in proptest::collection::vec(proptest::prelude::any::<i64>(), 1..50),
        ) {
            tokens.sort_unstable();
            let mut all = probes;
            all.extend(tokens.iter().copied());
            all.extend(tokens.iter().map(|t| t.wrapping_add(1)));
            all.extend(tokens.iter().map(|t| t.wrapping_sub(1)));
            for t in all {
                proptest::prop_assert_eq!(
                    first_not_below(&tokens, t),
                    tokens.partition_point(|&x| x < t),
                    "token {}", t
                );
            }
        }
    }

    /// Row `n` of the wide partitions of `wide_table_1k_chunks` (~130 bytes).
    fn wide_row(n: u32) -> Row {
        Row {
            clustering: Clustering(vec![Bytes::copy_from_slice(&n.to_be_bytes())]),
            marker: Some(LivenessInfo::new(1)),
            deletion: None,
            cells: vec![(
                3,
                ColumnData::Simple(Cell::live(2, Bytes::from(vec![b'x'; 120]))),
            )],
        }
    }

    /// RowIndex.db written out in pieces as it grows (here after every block, where
    /// `SPILL_BYTES` waits for 1 MiB) is the file held whole until finish, and serves
    /// reads the same.
    #[test]
    fn row_index_written_out_in_pieces_equals_the_whole_file() {
        let schema = crate::test_support::wide_table_1k_chunks();
        let dir = tempfile::tempdir().expect("tmp");
        let row = wide_row;
        // Every third of 30 partitions wide (800 rows of ~130 bytes), the rest narrow.
        let mut parts: Vec<(PartitionKey, PartitionUpdate)> = (0..30)
            .map(|p| {
                let rows = if p % 3 == 0 { 800 } else { 2 };
                let u = PartitionUpdate {
                    rows: (0..rows).map(row).collect(),
                    ..Default::default()
                };
                (PartitionKey::new(Bytes::from(format!("p{p}"))), u)
            })
            .collect();
        parts.sort_by(|a, b| a.0.cmp(&b.0));
        for (g, spill) in [(1, None), (2, Some(0))] {
            let mut w = SSTableWriter::new(dir.path(), g, &schema).expect("writer");
            if let Some(b) = spill {
                w.set_row_index_spill(b);
            }
            for (k, u) in &parts {
                w.append(k, u).expect("append");
            }
            let r = w.finish(0, 0).expect("finish").expect("an SSTable");
            r.verify().expect("checksums and row index");
            for (k, u) in &parts {
                assert!(r.get(k).expect("get").as_ref() == Some(u), "{k:?}");
            }
        }
        let path = |g| component_path(dir.path(), g, crate::rowindex::COMPONENT);
        let ri = crate::rowindex::RowIndexFile::open(&path(2))
            .expect("open")
            .expect("a row index");
        assert_eq!(ri.len(), 10, "one block per wide partition");
        let (whole, pieces) = (
            std::fs::read(path(1)).expect("read"),
            std::fs::read(path(2)).expect("read"),
        );
        assert!(whole == pieces, "RowIndex.db differs");
    }

    /// A read through the row index that would wait for the disk (the no-wait point
    /// read declines with `WouldBlock`, then waits off the shard and runs again) returns
    /// that, and leaves the index in use: it is the read's condition, not the index's
    /// fault (the first version of the fallback turned the index off).
    #[test]
    fn reads_that_would_wait_leave_the_row_index_in_use() {
        let schema = crate::test_support::wide_table_1k_chunks();
        let dir = tempfile::tempdir().expect("tmp");
        let row = wide_row;
        let key = PartitionKey::new(Bytes::from_static(b"wide"));
        let u = PartitionUpdate {
            rows: (0..2_000).map(row).collect(),
            ..Default::default()
        };
        let mut w = SSTableWriter::new(dir.path(), 1, &schema).expect("writer");
        w.append(&key, &u).expect("append");
        drop(w.finish(0, 0).expect("finish").expect("an SSTable"));
        let cmp = schema.clustering_comparator();
        let slice = ClusteringSlice {
            start: ClusteringBound::inclusive(vec![Bytes::copy_from_slice(
                &1_500u32.to_be_bytes(),
            )]),
            end: ClusteringBound::inclusive(Vec::new()),
        };
        let rows = RowSlices {
            cmp: &cmp,
            slices: std::slice::from_ref(&slice),
            cap: 10,
            from_end: false,
        };
        let data = File::open(component_path(dir.path(), 1, "Data.db")).expect("open");
        let mut waited = None;
        // Rounds, as in diskwait's tests: an evicted page may be read back by the
        // readahead before the read looks at it again (more rounds than there: this read
        // is a few KiB, whose readahead is over sooner than theirs of 4 MiB).
        for _ in 0..200 {
            // A fresh reader: one holds the last chunk it decompressed.
            let r = SSTableReader::open(dir.path(), 1).expect("open");
            assert!(r.usable_row_index().is_some());
            assert_eq!(
                crate::diskwait::drop_from_page_cache(&data).expect("evict"),
                0,
                "pages left resident"
            );
            match crate::diskwait::without_waiting(|| r.get_sliced(&key, None, None, rows)) {
                Ok(_) => continue,
                Err(StorageError::WouldBlock(_)) => {
                    waited = Some(r);
                    break;
                }
                Err(e) => panic!("expected WouldBlock, got {e}"),
            }
        }
        let r = waited.expect("no read of the evicted Data.db waited in any round");
        assert!(
            r.row_index_fault.get().is_none(),
            "{:?}",
            r.row_index_fault.get()
        );
        assert!(r.usable_row_index().is_some());
        let (got, cut) = r
            .get_sliced(&key, None, None, rows)
            .expect("read")
            .expect("found");
        let first: Vec<u32> = got
            .rows
            .iter()
            .map(|r| u32::from_be_bytes(r.clustering.0[0][..].try_into().expect("4 bytes")))
            .collect();
        assert_eq!(first, (1_500..1_510).collect::<Vec<_>>());
        assert!(cut.is_some());
    }

    /// A writer told to expect 4 times the partitions it gets (a compaction of
    /// overwritten keys) builds its filter as they come: every key is found, and the
    /// filter, halved at the end, is at most about twice the one built from the tokens.
    #[test]
    fn filters_built_as_partitions_come_find_every_key() {
        let schema = schema();
        let dir = tempfile::tempdir().expect("tmp");
        let n = crate::bloom::INCREMENTAL_MIN_KEYS as usize + 4_000;
        let mut keys: Vec<PartitionKey> = (0..n)
            .map(|i| PartitionKey::new(Bytes::from(format!("key{i:07}"))))
            .collect();
        keys.sort();
        for (g, expect) in [(1, None), (2, Some(4 * n as u64))] {
            let mut w = SSTableWriter::new(dir.path(), g, &schema).expect("writer");
            if let Some(e) = expect {
                w.expect_partitions(e);
            }
            for (i, k) in keys.iter().enumerate() {
                w.append(k, &one_row(i, Bytes::from_static(b"v")))
                    .expect("append");
            }
            let r = w.finish(0, 0).expect("finish").expect("an SSTable");
            assert!(keys.iter().all(|k| r.may_contain(k)), "generation {g}");
            let absent = (0..20_000)
                .filter(|i| r.may_contain(&PartitionKey::new(Bytes::from(format!("no{i}")))))
                .count();
            assert!(
                absent < 400,
                "generation {g}: {absent} false positives / 20000"
            );
            assert!(r.get(&keys[n / 2]).expect("get").is_some());
        }
        let size = |g| {
            std::fs::metadata(component_path(dir.path(), g, "Filter.db"))
                .expect("filter")
                .len()
        };
        let (exact, built) = (size(1), size(2));
        assert!(
            built >= exact && built <= 2 * exact + 4_096,
            "{built} bytes, {exact} from the tokens"
        );
    }

    fn schema() -> TableSchema {
        let cd = crate::test_support::blob_column;
        TableSchema::new(
            TableId(9),
            "ks",
            "t",
            vec![
                cd("k", ColumnKind::PartitionKey),
                cd("v", ColumnKind::Regular),
            ],
            TableOptions::default(),
        )
    }

    /// A partition of one row (marker timestamp `i`) with `v` in column 1.
    fn one_row(i: usize, v: Bytes) -> PartitionUpdate {
        PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering::empty(),
                marker: Some(LivenessInfo::new(i as i64)),
                deletion: None,
                cells: vec![(1, ColumnData::Simple(Cell::live(1, v)))],
            }],
            ..Default::default()
        }
    }

    /// `n` one-row partitions in ring order (three index blocks for n = 300).
    fn write(dir: &Path, n: usize) -> (SSTableReader, Vec<PartitionKey>) {
        let schema = schema();
        let mut keys: Vec<PartitionKey> = (0..n)
            .map(|i| PartitionKey::new(Bytes::from(format!("key{i:06}"))))
            .collect();
        keys.sort();
        let mut w = SSTableWriter::new(dir, 1, &schema).expect("writer");
        for (i, k) in keys.iter().enumerate() {
            w.append(k, &one_row(i, Bytes::from(vec![7u8; 20])))
                .expect("append");
        }
        let r = w.finish(0, 0).expect("finish").expect("sstable");
        (r, keys)
    }

    /// A direct (O_DIRECT) writer, falling back to buffered writes where the file system
    /// refuses, writes the same Data.db bytes as a buffered one: megabyte blocks, then
    /// the unaligned tail; every partition reads back.
    #[test]
    fn direct_writes_equal_buffered_ones() {
        let dir = tempfile::tempdir().expect("tmp");
        let schema = schema();
        let keys: Vec<PartitionKey> = {
            let mut k: Vec<_> = (0..1500)
                .map(|i| PartitionKey::new(Bytes::from(format!("key{i:06}"))))
                .collect();
            k.sort();
            k
        };
        // Bytes LZ4 cannot shrink (the table compresses its chunks).
        let noise = |seed: usize, n: usize| {
            let mut x = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let v: Vec<u8> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            Bytes::from(v)
        };
        let update = |i: usize| one_row(i, noise(i, 1999 + i % 7));
        let mut readers = Vec::new();
        for (g, direct) in [(1, false), (2, true)] {
            let mut w = if direct {
                SSTableWriter::new_direct(dir.path(), g, &schema)
            } else {
                SSTableWriter::new(dir.path(), g, &schema)
            }
            .expect("writer");
            for (i, k) in keys.iter().enumerate() {
                w.append(k, &update(i)).expect("append");
            }
            readers.push(w.finish(0, 0).expect("finish").expect("sstable"));
        }
        let data = |g| fs::read(component_path(dir.path(), g, "Data.db")).expect("read");
        let (a, b) = (data(1), data(2));
        assert!(
            a.len() > 2 * DATA_BUF && a.len() % DIRECT_ALIGN != 0,
            "{}",
            a.len()
        );
        assert!(a == b, "Data.db differs");
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(readers[1].get(k).expect("read"), Some(update(i)));
        }
    }

    /// The index is streamed to its file block by block: a table of many blocks ends
    /// with the CRC32C of the rest and finds every key; a writer that got no partition
    /// (finished or aborted) leaves no file behind.
    #[test]
    fn streamed_index_holds_every_block_and_empty_writers_leave_nothing() {
        let dir = tempfile::tempdir().expect("tmp");
        let n = INDEX_BLOCK_ENTRIES * 5 + 7;
        let (r, keys) = write(dir.path(), n);
        let index = fs::read(component_path(dir.path(), r.generation, "Index.db")).expect("read");
        assert!(check_crc(Path::new("Index.db"), &index).is_ok());
        for k in &keys {
            assert!(r.find(k).expect("find").is_some(), "{k:?}");
        }
        let files = || fs::read_dir(dir.path()).expect("dir").count();
        let before = files();
        let w = SSTableWriter::new(dir.path(), 90, &schema()).expect("writer");
        assert_eq!(w.finish(0, 0).expect("finish").map(|r| r.generation), None);
        SSTableWriter::new(dir.path(), 91, &schema())
            .expect("writer")
            .abort();
        assert_eq!(files(), before);
    }

    /// Every start bound, inclusive and exclusive, across index block boundaries: the
    /// scanner yields exactly the keys from there on, in order, each with its own data.
    #[test]
    fn detached_reads_equal_plain_ones_and_hold_no_chunk() {
        let dir = tempfile::tempdir().expect("tmp");
        let (r, keys) = write(dir.path(), 300);
        let mut cache = BlockCache::new(1 << 20);
        let value = |u: &PartitionUpdate| match u.rows.first().and_then(|r| r.cell(1)) {
            Some(ColumnData::Simple(c)) => c.value.clone(),
            other => panic!("{other:?}"),
        };
        for k in [&keys[0], &keys[150]] {
            let plain = r
                .get_with(k, Some(&mut cache))
                .expect("read")
                .expect("found");
            let detached = r
                .get_detached_with(k, Some(&mut cache), u64::MAX)
                .expect("read")
                .expect("found");
            assert_eq!(plain, detached);
            let e = r.find(k).expect("find").expect("indexed");
            let i = (e.position / r.chunk_bytes) as usize;
            let chunk = r.chunk(i, &mut cache).expect("chunk");
            let range = chunk.as_ptr() as usize..chunk.as_ptr() as usize + chunk.len();
            assert!(range.contains(&(value(&plain).as_ptr() as usize)));
            assert!(!range.contains(&(value(&detached).as_ptr() as usize)));
        }
    }

    /// Reads without the block cache (which decode a chunk only up to the partition they
    /// need) return what reads through the cache return, for every partition in a random
    /// order, partitions spanning chunks included, and so do detached reads (row cache
    /// fills), which add index blocks to the cache but no chunk; a scan after them (the
    /// reader's chunk buffer holding a decoded prefix) yields every partition whole.
    #[test]
    fn uncached_reads_of_chunk_prefixes_equal_cached_reads() {
        let dir = tempfile::tempdir().expect("tmp");
        let schema = schema();
        let mut keys: Vec<PartitionKey> = (0..400)
            .map(|i| PartitionKey::new(Bytes::from(format!("key{i:06}"))))
            .collect();
        keys.sort();
        let mut w = SSTableWriter::new(dir.path(), 1, &schema).expect("writer");
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (i, k) in keys.iter().enumerate() {
            // Sizes from a few bytes to 40 KB (past a 16 KiB chunk), some repetition.
            let len = [3usize, 40, 300, 2_000, 40_000][i % 5];
            let v: Vec<u8> = (0..len)
                .map(|j| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if j % 64 < 32 { (j % 7) as u8 } else { x as u8 }
                })
                .collect();
            w.append(k, &one_row(i, Bytes::from(v))).expect("append");
        }
        let r = w.finish(0, 0).expect("finish").expect("sstable");
        let mut cache = BlockCache::new(64 << 20);
        let mut off = BlockCache::new(0);
        let mut index_only = BlockCache::new(64 << 20);
        let mut chunks_too = BlockCache::new(64 << 20);
        let mut order: Vec<usize> = (0..keys.len()).collect();
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let mut expected = std::collections::HashMap::new();
        for &i in &order {
            let cached = r
                .get_with(&keys[i], Some(&mut cache))
                .expect("read")
                .expect("found");
            let uncached = r.get_with(&keys[i], None).expect("read").expect("found");
            let disabled = r
                .get_with(&keys[i], Some(&mut off))
                .expect("read")
                .expect("found");
            // Detached reads (row cache fills): through a cache that has the partition's
            // chunks (just filled above) and through one that never gets any.
            let detached_hit = r
                .get_detached_with(&keys[i], Some(&mut cache), u64::MAX)
                .expect("read")
                .expect("found");
            let detached = r
                .get_detached_with(&keys[i], Some(&mut index_only), u64::MAX)
                .expect("read")
                .expect("found");
            // Over the row cache's limit: read through the block cache, chunks and all.
            let over_limit = r
                .get_detached_with(&keys[i], Some(&mut chunks_too), 0)
                .expect("read")
                .expect("found");
            assert_eq!(cached, uncached, "partition {i}");
            assert_eq!(cached, disabled, "partition {i}");
            assert_eq!(cached, detached_hit, "partition {i}");
            assert_eq!(cached, detached, "partition {i}");
            assert_eq!(cached, over_limit, "partition {i}");
            expected.insert(keys[i].clone(), cached);
        }
        // Detached reads cached the index blocks they searched, and no data chunk, unless
        // their partitions were over the limit.
        assert_eq!(index_only.stats().entries, r.summary.len() as u64);
        for c in 0..r.chunk_offsets.len().saturating_sub(1) {
            let c = c as u64;
            assert!(
                index_only.get(r.id, BlockKind::DataChunk, c).is_none(),
                "{c}"
            );
            assert!(
                chunks_too.get(r.id, BlockKind::DataChunk, c).is_some(),
                "{c}"
            );
        }
        // The buffer now holds a prefix of some chunk; the scan reads every chunk again.
        let _ = r.get_with(&keys[1], None).expect("read");
        let mut sc = r.scan_from(i64::MIN, None, false).expect("scan");
        let mut n = 0;
        while let Some((k, u)) = sc.next_partition().expect("scan") {
            assert_eq!(Some(&u), expected.get(&k), "{k:?}");
            n += 1;
        }
        assert_eq!(n, keys.len());
    }

    #[test]
    fn scan_from_every_bound_yields_the_model_suffix() {
        let dir = tempfile::tempdir().expect("tmp");
        let (r, keys) = write(dir.path(), 300);
        for start in [0, 1, 127, 128, 129, 255, 256, 299] {
            for exclusive in [false, true] {
                let k = &keys[start];
                let mut sc = r.scan_from(k.token, Some(&k.key), exclusive).expect("scan");
                let from = start + usize::from(exclusive);
                let mut got = Vec::new();
                while let Some((pk, _)) = sc.next_partition().expect("next") {
                    got.push(pk);
                }
                assert_eq!(got, keys[from..], "start {start} exclusive {exclusive}");
            }
        }
        // Raw reads see the same keys, and each partition's bytes decode to its key.
        let mut sc = r.scan_from(i64::MIN, None, false).expect("scan");
        let mut n = 0;
        while sc
            .next_raw_with(|k, bytes| {
                let (dk, _) = decode_partition(r.data_path(), Bytes::copy_from_slice(bytes), 0)?;
                assert_eq!(&dk, k);
                assert_eq!(k, &keys[n]);
                n += 1;
                Ok(())
            })
            .expect("raw")
        {}
        assert_eq!(n, keys.len());
    }

    /// A malformed entry inside a block whose checksum is valid: the scanner reports it
    /// once, then goes on with the next block (scrub relies on this; it must not loop).
    #[test]
    fn malformed_index_entry_skips_the_rest_of_its_block() {
        let dir = tempfile::tempdir().expect("tmp");
        let (r, keys) = write(dir.path(), 300);
        let b = &r.summary[1];
        let (off, len) = (b.offset as usize, b.len as usize);
        drop(r);
        let path = component_path(dir.path(), 1, "Index.db");
        let mut idx = std::fs::read(&path).expect("read");
        // Block 1's first entry: n:u32, token:i64, then the key length varint (made
        // 16383, past the end of the block).
        idx[off + 4 + 8] = 0xff;
        idx[off + 4 + 9] = 0x7f;
        assert!(len < 16383);
        let crc = crc32c::crc32c(&idx[off..off + len - 4]);
        idx[off + len - 4..off + len].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &idx).expect("write");
        let r = SSTableReader::open(dir.path(), 1).expect("open");
        let mut sc = r.scan_from(i64::MIN, None, false).expect("scan");
        let (mut got, mut errors) = (Vec::new(), 0);
        for _ in 0..1000 {
            match sc.peek_key() {
                Ok(None) => break,
                Ok(Some(k)) => {
                    got.push(k.clone());
                    sc.skip();
                }
                Err(e) => {
                    assert!(matches!(e, StorageError::Corrupt { .. }), "{e}");
                    errors += 1;
                }
            }
        }
        assert_eq!(errors, 1);
        let n = INDEX_BLOCK_ENTRIES;
        let expected: Vec<PartitionKey> = keys[..n].iter().chain(&keys[2 * n..]).cloned().collect();
        assert_eq!(got, expected);
    }

    /// `n` one-row partitions (values of `seed`) written as generation `g` of `dir`,
    /// over a spare of `pool` if one is free.
    fn write_over(
        dir: &Path,
        g: u64,
        n: usize,
        seed: u8,
        pool: &crate::spare::SparePool,
    ) -> (Arc<SSTableReader>, Vec<PartitionKey>) {
        let mut keys: Vec<PartitionKey> = (0..n)
            .map(|i| PartitionKey::new(Bytes::from(format!("key{i:06}"))))
            .collect();
        keys.sort();
        let mut w = SSTableWriter::new_over_spare(dir, g, &schema(), Some(pool)).expect("writer");
        for (i, k) in keys.iter().enumerate() {
            // Bytes LZ4 cannot shrink much, so the file is as large as n makes it.
            let v: Vec<u8> = (0..200u32)
                .map(|j| {
                    (j.wrapping_mul(2_654_435_761).wrapping_add(i as u32 * 7919) >> 13) as u8 ^ seed
                })
                .collect();
            w.append(k, &one_row(i, Bytes::from(v))).expect("append");
        }
        let mut r = w.finish(0, 0).expect("finish").expect("sstable");
        r.data_cached = true;
        (Arc::new(r), keys)
    }

    /// A temporary root, a table directory in it, and a spare pool of 1 GiB there.
    fn spare_setup() -> (tempfile::TempDir, PathBuf, crate::spare::SparePool) {
        let root = tempfile::tempdir().expect("tmp");
        let dir = root.path().join("ks").join("t-1");
        let pool = crate::spare::SparePool::open(root.path(), 1 << 30);
        (root, dir, pool)
    }

    /// A replaced flush output's Data.db becomes a spare only once no reader holds its
    /// SSTable, and a flush written over a longer spare reads back whole (the file cut to
    /// its own length); non-flush outputs and files over the cap are deleted, not kept.
    #[test]
    fn flushes_write_over_spares_no_reader_holds() {
        let (root, dir, pool) = spare_setup();
        let (big, _) = write_over(&dir, 1, 5000, 1, &pool);
        let big_len = big.data_size();
        assert!(big_len > 300_000, "{big_len}");
        let held = big.clone();
        pool.retire(&big);
        drop(big);
        for c in COMPONENTS.iter().chain(std::iter::once(&"TOC.txt")) {
            assert!(!component_path(&dir, 1, c).exists(), "{c} left");
        }
        assert_eq!(pool.usage(), (big_len, 0));

        // A reader still holds generation 1: the next flush gets a new file.
        let (second, _) = write_over(&dir, 2, 10, 2, &pool);
        assert_eq!(pool.usage(), (big_len, 0));
        assert_eq!(
            held.get(&PartitionKey::new(Bytes::from("key000003")))
                .expect("read")
                .map(|u| u.rows.len()),
            Some(1)
        );
        drop(held);

        let (third, keys) = write_over(&dir, 3, 300, 3, &pool);
        assert_eq!(pool.usage(), (0, 1));
        let len = fs::metadata(third.data_path()).expect("stat").len();
        assert_eq!(len, third.data_size());
        assert!(len < big_len);
        for (i, k) in keys.iter().enumerate() {
            let u = third.get(k).expect("read").expect("partition");
            assert_eq!(u.rows[0].marker.map(|m| m.timestamp), Some(i as i64), "{i}");
        }
        assert_eq!(third.verify().ok(), Some(()));
        assert!(
            fs::read_dir(root.path().join(crate::spare::SPARE_DIR))
                .expect("dir")
                .next()
                .is_none()
        );

        // Not written through the page cache by this process: deleted.
        let reopened = Arc::new(SSTableReader::open(&dir, 2).expect("open"));
        drop(second);
        pool.retire(&reopened);
        assert!(!component_path(&dir, 2, "Data.db").exists());
        assert_eq!(pool.usage(), (0, 1));

        // Over the cap: deleted.
        let small = crate::spare::SparePool::open(&root.path().join("other"), 1000);
        small.retire(&third);
        assert!(!component_path(&dir, 3, "Data.db").exists());
        assert_eq!(small.usage(), (0, 0));
    }

    /// A flush with compaction behind writes over a free spare, and with none free
    /// bypasses the page cache (on a file system with O_DIRECT): either way its output
    /// reads back whole.
    #[test]
    fn a_flush_behind_takes_a_spare_or_else_writes_direct() {
        let (_root, dir, pool) = spare_setup();
        fs::create_dir_all(&dir).expect("dir");
        let probe = File::create(dir.join("probe")).expect("probe");
        let o_direct = set_direct_io(&probe, true).is_ok();
        let write = |g: u64, n: usize| {
            let mut keys: Vec<PartitionKey> = (0..n)
                .map(|i| PartitionKey::new(Bytes::from(format!("key{i:06}"))))
                .collect();
            keys.sort();
            let mut w =
                SSTableWriter::new_over_spare_or_direct(&dir, g, &schema(), &pool).expect("writer");
            let direct = w.data_direct();
            for (i, k) in keys.iter().enumerate() {
                w.append(k, &one_row(i, Bytes::from(vec![g as u8; 300])))
                    .expect("append");
            }
            let r = w.finish(0, 0).expect("finish").expect("sstable");
            for (i, k) in keys.iter().enumerate() {
                let u = r.get(k).expect("read").expect("partition");
                assert_eq!(u.rows[0].marker.map(|m| m.timestamp), Some(i as i64));
            }
            assert_eq!(r.verify().ok(), Some(()));
            (r, direct)
        };
        // No spare: direct where the file system allows it.
        let (first, direct) = write(1, 3000);
        assert_eq!(direct, o_direct);
        assert_eq!(pool.usage(), (0, 0));
        // A free spare: taken, through the page cache.
        let (cached, _) = write_over(&dir, 2, 3000, 2, &pool);
        pool.retire(&cached);
        drop(cached);
        let (_third, direct) = write(3, 100);
        assert!(!direct, "a free spare was there");
        assert_eq!(pool.usage().1, 1, "the spare was taken");
        drop(first);
    }

    /// What a queued compaction keeps of an SSTable it does not read (its
    /// `OverlapFilter`) answers for its keys without holding its reader: the SSTable's
    /// Data.db, replaced meanwhile, is a spare the next flush writes over.
    #[test]
    fn an_overlap_filter_holds_no_reader() {
        let (_root, dir, pool) = spare_setup();
        let (first, keys) = write_over(&dir, 1, 2000, 1, &pool);
        let filter = first.overlap_filter();
        assert_eq!(filter.min_timestamp, first.stats.min_timestamp);
        pool.retire(&first);
        drop(first);
        let (_second, _) = write_over(&dir, 2, 10, 2, &pool);
        assert_eq!(
            pool.usage().1,
            1,
            "the filter kept the spare from the flush"
        );
        assert!(
            keys.iter().all(|k| filter.may_contain(k)),
            "a key of the SSTable missed"
        );
        let absent = (0..2000)
            .map(|i| PartitionKey::new(Bytes::from(format!("other{i:06}"))))
            .filter(|k| filter.may_contain(k))
            .count();
        assert!(absent < 200, "{absent} of 2000 absent keys pass the filter");
    }
}
