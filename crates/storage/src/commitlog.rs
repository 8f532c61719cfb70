//! Per-shard commitlog: segment files of CRC32C-checksummed, length-prefixed mutations,
//! a sync thread implementing the periodic / batch / group modes, and replay.
//! Format: docs/dev/commitlog-format.md.
//
// PERF-CRITICAL: `append` runs once per write; it encodes the mutation straight into the
// reused, pre-zeroed segment buffer (no allocation, no syscall, one CRC pass) and the
// periodic ack is a plain state, not a boxed future. The buffer is handed to the OS once
// per group of writes (`write_out`).

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use amphora_types::codec::{MUTATION_FORMAT_VERSION, decode_mutation, encode_mutation};
use amphora_types::data::{
    Cell, Clustering, ClusteringBound, ColumnData, DeletionTime, Mutation, PartitionUpdate, Row,
};
use bytes::Bytes;
use tokio::sync::watch;

use crate::config::{CommitFailurePolicy, SyncMode};
use crate::error::{Result, StorageError};

pub const SEGMENT_MAGIC: &[u8; 8] = b"AMPHCLOG";
/// Version 2 seeds each entry's checksum with the segment id and ends a closed segment
/// with an end marker, so that a segment file can be reused (see `Commitlog::discard_before`):
/// the previous use's entries past the end never validate. Version 1 segments are replayed
/// as before.
pub const SEGMENT_VERSION: u32 = 2;
pub const SEGMENT_HEADER_BYTES: u64 = 24;
pub const ENTRY_HEADER_BYTES: usize = 8;
/// Size the entry buffer starts at and is shrunk back to after a larger group of writes.
const BUF_KEEP_BYTES: usize = 1 << 20;
/// Periodic mode: every this many bytes handed to the OS, the sync thread starts their
/// write-back (`sync_file_range`, no wait, no device flush), so the next `fdatasync`
/// finds little left to write. One `fdatasync` of a whole period's data (20–30 MB at
/// 9–13k writes/s) froze this project's VMs — both vCPUs, 10–25 ms — as the host took the
/// burst; see docs/benchmarks.md, "Write p99.9 at a fixed rate: the commitlog's bursts".
const WRITE_BACK_BYTES: u64 = 1 << 20;

/// A position in the commitlog: `segment_id << 32 | offset`.
pub type LogPosition = u64;

pub fn log_position(segment_id: u64, offset: u64) -> LogPosition {
    (segment_id << 32) | offset
}

pub fn segment_of(pos: LogPosition) -> u64 {
    pos >> 32
}

pub fn segment_file_name(id: u64) -> String {
    format!("CommitLog-{SEGMENT_VERSION}-{id}.log")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    name.strip_prefix("CommitLog-")?
        .strip_suffix(".log")?
        .split_once('-')?
        .1
        .parse()
        .ok()
}

pub fn segment_header(id: u64) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    segment_header_of(id, SEGMENT_VERSION)
}

fn segment_header_of(id: u64, version: u32) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    let mut h = [0u8; SEGMENT_HEADER_BYTES as usize];
    h[0..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h[12..20].copy_from_slice(&id.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The checksum seed of a segment's entries: version 2 checksums `id ‖ len ‖ payload`,
/// version 1 `len ‖ payload` (seed 0).
pub fn entry_seed(id: u64, version: u32) -> u32 {
    if version >= 2 {
        crc32c::crc32c(&id.to_le_bytes())
    } else {
        0
    }
}

/// The checksum field of a version 2 segment's end marker (an entry header of length 0):
/// what follows it in the file is left from the file's previous use.
fn end_marker_crc(seed: u32) -> u32 {
    // Never 0: a zero header is unwritten space.
    crc32c::crc32c_append(seed, b"\0\0\0\0END").max(1)
}

/// Prefix of a reusable segment file's name (not a segment: replay ignores it).
const SPARE_PREFIX: &str = "Spare-";

/// Prefix of the name of the next segment's file while it is prepared ahead of its
/// rotation ([`SyncMsg::Prepare`]); not a segment either, so replay never sees a
/// segment after the one being written at a crash.
const NEXT_PREFIX: &str = "Next-";

/// How much of a prepared segment's mapping is faulted in before it becomes active.
const PREPARE_POPULATE_BYTES: usize = 2 * POPULATE_BYTES;

/// A segment creation at least this long (on the shard thread, every request waiting) is
/// logged.
const SLOW_ROTATION: Duration = Duration::from_millis(5);

// ---- entry payload encoding ----
//
// The payload is `amphora_types::codec::encode_mutation`'s layout (the codec stays its
// definition and decodes it on replay; `tests::payload_matches_codec` checks the two agree
// byte for byte). It is written here straight into the segment buffer through a cursor,
// after one pass computing an upper bound of its size, so the per-byte work is a store
// and a bounds check instead of a `Vec` push.

/// Most bytes a LEB128 varint of a `u64` takes.
const VAR_MAX: usize = 10;

fn clustering_bound(c: &Clustering) -> usize {
    VAR_MAX + c.0.iter().map(|b| VAR_MAX + b.len()).sum::<usize>()
}

fn cell_bound(c: &Cell) -> usize {
    // flags, timestamp delta, ttl, expiry, value length + value.
    1 + VAR_MAX + 5 + VAR_MAX + VAR_MAX + c.value.len()
}

fn row_bound(r: &Row) -> usize {
    // clustering, flags, marker (delta, ttl, expiry), deletion, column count.
    let mut n = clustering_bound(&r.clustering) + 1 + 3 * VAR_MAX + 2 * VAR_MAX + VAR_MAX;
    for (_, d) in &r.cells {
        // column id (a u32) and kind.
        n += 5 + 1;
        n += match d {
            ColumnData::Simple(c) => cell_bound(c),
            ColumnData::Complex { cells, .. } => {
                1 + 2 * VAR_MAX
                    + VAR_MAX
                    + cells
                        .iter()
                        .map(|(p, c)| VAR_MAX + p.len() + cell_bound(c))
                        .sum::<usize>()
            }
        };
    }
    n
}

/// An upper bound of the encoded payload size of `m`.
fn payload_bound(m: &Mutation) -> usize {
    let u = &m.update;
    // version, table id, token, key, base timestamp, flags, partition deletion.
    let mut n = 1 + 16 + 8 + VAR_MAX + m.key.key.len() + VAR_MAX + 1 + 2 * VAR_MAX;
    if let Some(r) = &u.static_row {
        n += row_bound(r);
    }
    n += VAR_MAX;
    for r in &u.rows {
        n += row_bound(r);
    }
    n += VAR_MAX;
    for rt in &u.range_tombstones {
        n += 2 + clustering_bound(&rt.start.prefix) + clustering_bound(&rt.end.prefix);
        n += 2 * VAR_MAX;
    }
    n
}

/// The codec's base timestamp: the first timestamp in the update.
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

#[inline(always)]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Writes into a slice sized by `payload_bound`; an index past it is a bug in the bound.
struct Cursor<'a> {
    out: &'a mut [u8],
    pos: usize,
}

impl Cursor<'_> {
    #[inline(always)]
    fn u8(&mut self, b: u8) {
        self.out[self.pos] = b;
        self.pos += 1;
    }

    #[inline(always)]
    fn var(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.u8(v as u8);
    }

    #[inline(always)]
    fn z(&mut self, v: i64) {
        self.var(zigzag(v));
    }

    #[inline(always)]
    fn raw(&mut self, b: &[u8]) {
        self.out[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }

    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        self.var(b.len() as u64);
        self.raw(b);
    }

    fn deletion(&mut self, d: DeletionTime, base: i64) {
        self.z(d.marked_for_delete_at.wrapping_sub(base));
        self.z(d.local_deletion_time);
    }

    fn clustering(&mut self, c: &Clustering) {
        self.var(c.0.len() as u64);
        for b in &c.0 {
            self.bytes(b);
        }
    }

    fn bound(&mut self, b: &ClusteringBound) {
        self.u8(b.inclusive as u8);
        self.clustering(&b.prefix);
    }

    /// A column id, the simple-cell kind and the cell. The common case (small id, live
    /// cell without TTL, one-byte timestamp delta and length) is written with one bounds
    /// check.
    #[inline(always)]
    fn simple_column(&mut self, id: u32, c: &Cell, base: i64) {
        let delta = zigzag(c.timestamp.wrapping_sub(base));
        let n = c.value.len();
        if id < 0x80
            && !c.is_tombstone
            && c.ttl <= 0
            && delta < 0x80
            && n < 0x80
            && let Some(dst) = self.out.get_mut(self.pos..self.pos + 5 + n)
        {
            dst[0] = id as u8;
            dst[1] = 0;
            dst[2] = (c.is_counter as u8) << 2;
            dst[3] = delta as u8;
            dst[4] = n as u8;
            dst[5..].copy_from_slice(&c.value);
            self.pos += 5 + n;
            return;
        }
        self.var(u64::from(id));
        self.u8(0);
        self.cell(c, base);
    }

    #[inline(always)]
    fn cell(&mut self, c: &Cell, base: i64) {
        // The common cell (live, no TTL, one-byte timestamp delta and length) is written
        // with one bounds check.
        let delta = zigzag(c.timestamp.wrapping_sub(base));
        let n = c.value.len();
        if !c.is_tombstone
            && c.ttl <= 0
            && delta < 0x80
            && n < 0x80
            && let Some(dst) = self.out.get_mut(self.pos..self.pos + 3 + n)
        {
            dst[0] = (c.is_counter as u8) << 2;
            dst[1] = delta as u8;
            dst[2] = n as u8;
            dst[3..].copy_from_slice(&c.value);
            self.pos += 3 + n;
            return;
        }
        let expiring = !c.is_tombstone && c.ttl > 0;
        self.u8(c.is_tombstone as u8 | ((expiring as u8) << 1) | ((c.is_counter as u8) << 2));
        self.z(c.timestamp.wrapping_sub(base));
        if expiring {
            self.var(c.ttl as u32 as u64);
        }
        if expiring || c.is_tombstone {
            self.z(c.local_expiry);
        }
        if !c.is_tombstone {
            self.bytes(&c.value);
        }
    }

    #[inline]
    fn row(&mut self, r: &Row, base: i64) {
        self.clustering(&r.clustering);
        self.u8(r.marker.is_some() as u8 | ((r.deletion.is_some() as u8) << 1));
        if let Some(m) = r.marker {
            self.z(m.timestamp.wrapping_sub(base));
            self.var(m.ttl as u32 as u64);
            self.z(m.local_expiry);
        }
        if let Some(d) = r.deletion {
            self.deletion(d, base);
        }
        self.var(r.cells.len() as u64);
        for (id, d) in &r.cells {
            match d {
                ColumnData::Simple(c) => self.simple_column(*id, c, base),
                ColumnData::Complex { deletion, cells } => {
                    self.var(u64::from(*id));
                    self.u8(1);
                    self.u8(deletion.is_some() as u8);
                    if let Some(d) = deletion {
                        self.deletion(*d, base);
                    }
                    self.var(cells.len() as u64);
                    for (p, c) in cells {
                        self.bytes(p);
                        self.cell(c, base);
                    }
                }
            }
        }
    }
}

/// Appends `r` in the codec's row layout with timestamps as deltas from `base`: the same
/// bytes as `amphora_types::codec::put_row` (`tests::put_row_matches_codec`), written by
/// this module's cursor encoder (about 60% of the instructions for a standard1 row).
// Not called yet outside the tests: offered to `memtable::encode_single`, which encodes
// every one-row partition with the codec's `put_row`.
#[allow(dead_code)]
pub(crate) fn put_row(out: &mut Vec<u8>, r: &Row, base: i64) {
    let start = out.len();
    out.resize(start + row_bound(r), 0);
    let mut c = Cursor {
        out: &mut out[start..],
        pos: 0,
    };
    c.row(r, base);
    let n = c.pos;
    out.truncate(start + n);
}

/// Encodes `m` (codec layout) into `out`, which holds at least `payload_bound(m)` bytes;
/// returns the bytes written.
fn encode_payload(m: &Mutation, out: &mut [u8]) -> usize {
    let mut c = Cursor { out, pos: 0 };
    c.u8(MUTATION_FORMAT_VERSION);
    c.raw(&m.table.to_bytes());
    c.raw(&m.key.token.to_be_bytes());
    c.bytes(&m.key.key);
    let u = &m.update;
    let base = first_timestamp(u);
    c.z(base);
    c.u8(u.partition_deletion.is_some() as u8 | ((u.static_row.is_some() as u8) << 1));
    if let Some(d) = u.partition_deletion {
        c.deletion(d, base);
    }
    if let Some(r) = &u.static_row {
        c.row(r, base);
    }
    c.var(u.rows.len() as u64);
    for r in &u.rows {
        c.row(r, base);
    }
    c.var(u.range_tombstones.len() as u64);
    for rt in &u.range_tombstones {
        c.bound(&rt.start);
        c.bound(&rt.end);
        c.deletion(rt.deletion, base);
    }
    c.pos
}

/// Durable position published by the sync thread.
#[derive(Debug, Clone, Default)]
pub struct Durable {
    pub pos: LogPosition,
    pub error: Option<String>,
}

enum SyncMsg {
    /// Make the file durable; then everything up to `up_to` is durable.
    Sync {
        file: Arc<File>,
        up_to: LogPosition,
    },
    /// The active segment changed (for periodic syncs); its directory entry is not
    /// synced yet.
    Active {
        file: Arc<File>,
    },
    /// Start writing `from..to` of the file back to the device, without waiting for it
    /// (periodic mode, every [`WRITE_BACK_BYTES`]); durability still comes from `Sync`
    /// and the period's `fdatasync`.
    WriteBack {
        file: Arc<File>,
        from: u64,
        to: u64,
    },
    /// Fault `from..to` of a segment's mapping in, writable, ahead of the shard's copies
    /// ([`SegmentMap`]); then raise `done` to `to`.
    Populate {
        addr: usize,
        from: usize,
        to: usize,
        done: Arc<std::sync::atomic::AtomicUsize>,
    },
    /// A closed segment's mapping, unmapped here rather than on the shard thread (after any
    /// `Populate` of it: messages are handled in order).
    Unmap(SegmentMap),
    /// Create segment `id` under a [`NEXT_PREFIX`] name (from `spare` if given), allocate,
    /// map and populate its start, and leave it in `slot` for the shard's rotation.
    Prepare {
        id: u64,
        spare: Option<PathBuf>,
        map_len: Option<u64>,
        slot: PreparedSlot,
    },
    Stop,
}

/// The segment the sync thread prepared for the next rotation.
type PreparedSlot = Arc<std::sync::Mutex<Option<Segment>>>;

struct Segment {
    id: u64,
    /// [`entry_seed`] of this segment.
    seed: u32,
    file: Arc<File>,
    path: PathBuf,
    /// Bytes handed to the OS.
    written: u64,
    /// A reused file: every write into it ends at a block boundary ([`pad_to_block`]).
    reused: bool,
    /// The file mapped into memory ([`SegmentMap`]): entries are copied into it instead of
    /// written with `pwrite`. `None`: an unmapped (possibly reused) file.
    map: Option<SegmentMap>,
}

impl Segment {
    /// Hands `data` to the OS at `offset`: a copy into the mapping when the file is mapped
    /// (and the range inside it), else a `pwrite` ([`write_at`]).
    fn write(&mut self, data: &[u8], offset: u64) -> std::io::Result<()> {
        if let Some(map) = &mut self.map
            && map.copy_in(data, offset)
        {
            return Ok(());
        }
        write_at(&self.file, data, offset, self.reused)
    }
}

/// A segment's file, allocated whole (`fallocate`) and mapped shared and writable.
///
/// Why: at a fixed write rate the shard's rounds carry a few writes each, and each round's
/// `pwritev` of its entries cost ~1 µs (~6% of the shard at 324k writes/s); a copy into
/// the mapping costs ~0.2 µs a round including the page fault every 4 KiB, when the pages
/// are in the cache (a reused file's; docs/benchmarks.md, "A memory-mapped commitlog").
/// Durability is unchanged: a copied entry is in the page cache, as a written one is (a
/// process crash loses nothing handed over), write-back (`sync_file_range`) and
/// `fdatasync` cover pages dirtied through a mapping, and the allocation up front means
/// no copy can fail for space (`fallocate` reports it at rotation instead). A new file's
/// unwritten space reads as zeros: replay's end of the entries.
///
/// The first copy into each page faults (a new file's page is allocated, a cached one
/// made writable): ~4 µs each in the shard's context, half of what the mapping saved. So
/// the sync thread faults the pages in ahead of the copies (`MADV_POPULATE_WRITE`, a
/// megabyte at a time, [`POPULATE_BYTES`]), at a fraction of that per page.
///
/// A reused file's pages may have left the cache, and a copy into such a page would read
/// it from the disk on the shard thread (a 40–68 ms stall during a compaction, the reason
/// writes into reused files are padded, [`pad_to_block`]). Pages the sync thread
/// populated are in the cache (it read them if it had to); before copying into other
/// pages of a reused file, `mincore` checks the next [`RESIDENT_CHECK_BYTES`], and from
/// the first page not in the cache on the write falls back to the padded `pwritev`, which
/// covers that page whole (no read) and brings it back.
struct SegmentMap {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    /// Copies up to here need no check: a new file's space needs no read, and a reused
    /// file's pages up to here were in the cache when last checked.
    resident_until: usize,
    /// How far the sync thread has populated the mapping.
    populated: Arc<std::sync::atomic::AtomicUsize>,
    /// How far population has been asked for.
    requested: usize,
    /// Writes that fell back to `pwritev` for a page not in the cache.
    fallbacks: u64,
}

/// How much of a mapped segment the sync thread faults in at a time; it is asked for the
/// next such stretch while less than twice this is populated ahead of the copies.
const POPULATE_BYTES: usize = 1 << 20;

/// How far ahead a reused file's pages are checked at a time (one `mincore`).
const RESIDENT_CHECK_BYTES: usize = 256 << 10;

// SAFETY: the mapping is owned by this value alone (nothing else holds its address), so
// moving it to another thread (the sync thread unmaps closed segments) is sound.
#[allow(unsafe_code)]
unsafe impl Send for SegmentMap {}

impl SegmentMap {
    /// Allocates `len` bytes for `file` (`fallocate`, extending it) and maps them. `Ok(None)`
    /// when the file system cannot do either (the segment is then written with `pwrite`);
    /// an allocation failure for space is an error. `reused`: the file held an earlier
    /// segment, whose pages are checked before copies go into them.
    fn new(file: &File, len: u64, reused: bool) -> std::io::Result<Option<SegmentMap>> {
        use std::os::fd::AsRawFd;
        let (Ok(len_i), Ok(len_u)) = (i64::try_from(len), usize::try_from(len)) else {
            return Ok(None);
        };
        // SAFETY: the descriptor is open for the whole call; no pointers are passed.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len_i) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: a new shared mapping of an open descriptor at an address the kernel
        // picks; the file is at least `len` bytes long (allocated above), so every page of
        // the mapping is backed by the file.
        #[allow(unsafe_code)]
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_u,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            tracing::warn!(
                "commitlog: cannot map a segment ({}); writing it with pwrite",
                std::io::Error::last_os_error()
            );
            return Ok(None);
        }
        Ok(
            std::ptr::NonNull::new(ptr.cast::<u8>()).map(|ptr| SegmentMap {
                ptr,
                len: len_u,
                resident_until: if reused { 0 } else { len_u },
                populated: Arc::default(),
                requested: 0,
                fallbacks: 0,
            }),
        )
    }

    /// Copies `data` to `offset` of the file; `false` (nothing copied) when the range is
    /// not inside the mapping, or reaches a reused file's page that is not in the cache.
    fn copy_in(&mut self, data: &[u8], offset: u64) -> bool {
        let Ok(at) = usize::try_from(offset) else {
            return false;
        };
        let Some(end) = at.checked_add(data.len()).filter(|&e| e <= self.len) else {
            return false;
        };
        if end > self.resident_until {
            // Populated pages are in the cache (they stay there dirty until written back).
            let populated = self.populated.load(Ordering::Acquire);
            self.resident_until = self.resident_until.max(populated);
        }
        if end > self.resident_until {
            self.check_resident(at);
            if end > self.resident_until {
                self.fallbacks += 1;
                return false;
            }
        }
        // SAFETY: `at..end` is inside the mapping (checked above), which stays mapped while
        // `self` lives and which no Rust reference aliases; `data` cannot overlap it
        // (nothing hands out references into the mapping).
        #[allow(unsafe_code)]
        unsafe {
            copy_in_order(self.ptr.as_ptr().add(at), data);
        }
        true
    }

    /// The next population to ask the sync thread for, when the copies at `written` are
    /// within twice [`POPULATE_BYTES`] of what was asked for so far (one per call: the
    /// next write-out asks for the next).
    fn populate_ahead(&mut self, written: u64) -> Option<SyncMsg> {
        let written = usize::try_from(written).unwrap_or(usize::MAX);
        if self.requested >= self.len
            || written.saturating_add(2 * POPULATE_BYTES) <= self.requested
        {
            return None;
        }
        let from = self.requested;
        self.requested = (from + POPULATE_BYTES).min(self.len);
        Some(SyncMsg::Populate {
            addr: self.ptr.as_ptr() as usize,
            from,
            to: self.requested,
            done: self.populated.clone(),
        })
    }

    /// Sets `resident_until` to the first page from `at`'s on (up to
    /// [`RESIDENT_CHECK_BYTES`] ahead) that is not in the page cache, or to the end of the
    /// range checked.
    fn check_resident(&mut self, at: usize) {
        const PAGE: usize = BLOCK_BYTES as usize;
        let from = at - at % PAGE;
        let to = (from + RESIDENT_CHECK_BYTES).min(self.len);
        let mut pages = [0u8; RESIDENT_CHECK_BYTES / PAGE];
        let n = (to - from).div_ceil(PAGE);
        // SAFETY: `from..to` is inside the mapping and page-aligned at its start; `pages`
        // holds one byte for each of its `n` pages.
        #[allow(unsafe_code)]
        let rc = unsafe {
            libc::mincore(
                self.ptr.as_ptr().add(from).cast(),
                to - from,
                pages.as_mut_ptr().cast(),
            )
        };
        self.resident_until = match rc {
            0 => pages[..n]
                .iter()
                .position(|&p| p & 1 == 0)
                .map_or(to, |i| from + i * PAGE),
            // (Cannot tell: treat the page as missing; the padded write is always safe.)
            _ => from,
        };
    }
}

/// Copies `src` to `dst` with stores made in order, first byte to last, so that a process
/// killed during the copy leaves a prefix of it in the file.
///
/// Why: replay takes a bad entry followed by valid ones for corruption (entries after it
/// may have been acknowledged), and a torn write must leave only a torn tail. A `pwrite`
/// cut short by a kill leaves a prefix (the kernel copies forward). `memcpy` does not:
/// glibc's stores the first 32–64 bytes of a copy after the rest, and `rep movsb` may
/// store into a later page before it faults on an earlier one (written back, so
/// write-protected): a kill during that fault left an earlier page's part of the copy
/// unwritten and the later pages written (the crash test's failures; a C reproduction,
/// `bench/stall/torncopy.c`, tore 46 and 48 of 60 kills with `memcpy`, none with this
/// copy: docs/benchmarks.md, "The mapped commitlog's crash-test failure"). Volatile
/// stores are neither reordered nor merged by the compiler, and the CPU faults precisely
/// (a killed thread's stores are those before the faulting one); 8-byte aligned stores
/// each land whole.
///
/// # Safety
/// `dst..dst + src.len()` must be valid for writes and must not overlap `src`.
#[allow(unsafe_code)]
unsafe fn copy_in_order(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let mut i = 0;
    // SAFETY (all three loops): `i < n` (or `i + 8 <= n`) keeps every access inside `src`
    // and, by the caller's contract, inside `dst..dst + n`; the 8-byte stores are aligned
    // (the first loop aligns `dst + i`).
    while i < n && !(dst as usize + i).is_multiple_of(8) {
        unsafe { dst.add(i).write_volatile(src[i]) };
        i += 1;
    }
    while i + 8 <= n {
        let mut word = [0u8; 8];
        word.copy_from_slice(&src[i..i + 8]);
        unsafe {
            dst.add(i)
                .cast::<u64>()
                .write_volatile(u64::from_ne_bytes(word))
        };
        i += 8;
    }
    while i < n {
        unsafe { dst.add(i).write_volatile(src[i]) };
        i += 1;
    }
}

/// Faults `from..to` of the mapping at `addr` in, writable (the sync thread's side of
/// [`SegmentMap::populate_ahead`]). Advisory: on failure the shard's copies fault the pages
/// in themselves.
fn populate(addr: usize, from: usize, to: usize, done: &std::sync::atomic::AtomicUsize) {
    if to <= from {
        return;
    }
    // SAFETY: `addr + from .. addr + to` lies inside a mapping that is unmapped only by a
    // later message of this thread's queue (`SyncMsg::Unmap`), so it is still mapped; the
    // call changes no byte of it (it only faults pages in) and takes no other pointer.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::madvise(
            (addr + from) as *mut libc::c_void,
            to - from,
            libc::MADV_POPULATE_WRITE,
        )
    };
    if rc == 0 {
        done.fetch_max(to, Ordering::Release);
    }
}

impl Drop for SegmentMap {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr + len` is the mapping `new` made, unmapped only here.
        #[allow(unsafe_code)]
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The writer side, owned by the shard thread.
pub struct Commitlog {
    dir: PathBuf,
    mode: SyncMode,
    segment_size: u64,
    active: Segment,
    /// Encoded entries not yet handed to the OS are `buf[..used]`; the rest is scratch
    /// space entries are encoded into (its length only grows, so no per-entry zeroing).
    buf: Vec<u8>,
    used: usize,
    /// Closed segments still needed (not all their mutations flushed): id → size.
    closed: Vec<(u64, PathBuf, u64)>,
    /// Sum of the sizes in `closed`.
    closed_bytes: u64,
    sync_tx: mpsc::Sender<SyncMsg>,
    durable_rx: watch::Receiver<Durable>,
    sync_thread: Option<std::thread::JoinHandle<()>>,
    /// `fdatasync`s of segment files the sync thread has completed (see [`Commitlog::syncs`]).
    syncs: Arc<AtomicU64>,
    /// Write-backs the sync thread has started (see [`Commitlog::write_backs`]).
    write_backs: Arc<AtomicU64>,
    /// Periodic mode: offset in the active segment up to which write-back was requested.
    written_back: u64,
    /// Highest position for which a sync was requested.
    sync_requested: LogPosition,
    pub bytes_written: u64,
    /// Writes (`pwrite`s) that handed entries to the OS.
    pub writes: u64,
    /// The last `write_out` failed (e.g. ENOSPC): `append` retries it first and refuses new
    /// entries while it keeps failing, so a full disk cannot grow the buffer (or the
    /// memtables) without limit.
    write_failed: bool,
    /// Files of discarded segments kept for reuse (renamed `Spare-<n>.log` by the janitor,
    /// [`Retired::finish`]), newest last. Locked once per rotation and once per retired
    /// batch, never on a write.
    spares: Arc<std::sync::Mutex<Vec<PathBuf>>>,
    /// Most segments, live and spare together, kept for reuse (0: none are).
    reuse_limit: usize,
    /// Segments are allocated whole and mapped ([`SegmentMap`]): the length of their
    /// mappings. `None`: written with `pwrite`.
    map_len: Option<u64>,
    /// Writes of closed segments that fell back from the mapping to `pwritev` (a reused
    /// file's page not in the cache).
    map_fallbacks: u64,
    /// Rotations that reused a spare file.
    pub reused_segments: u64,
    /// The next segment, prepared by the sync thread ([`SyncMsg::Prepare`]).
    prepared: PreparedSlot,
    /// Rotations that found the next segment prepared.
    pub prepared_rotations: u64,
}

impl Commitlog {
    /// Opens a new active segment after `after_id` (existing segments are replayed first).
    ///
    /// `mapped`: segments are allocated whole and written through a memory mapping
    /// ([`SegmentMap`]).
    pub fn open(
        dir: &Path,
        mode: SyncMode,
        segment_size: u64,
        after_id: u64,
        shard: u32,
        mapped: bool,
    ) -> Result<Self> {
        fs::create_dir_all(dir).map_err(|e| StorageError::io(dir, e))?;
        // Spare files of an earlier run are not reused: their pages may have left the cache.
        delete_spare_files(dir);
        let segment_size = segment_size.max(SEGMENT_HEADER_BYTES + 1024);
        // Room for the end marker after a full segment, in whole pages.
        let map_len = mapped
            .then(|| (segment_size + ENTRY_HEADER_BYTES as u64).next_multiple_of(BLOCK_BYTES));
        let active = create_segment(dir, after_id + 1, true, None, map_len)?;
        let (sync_tx, sync_rx) = mpsc::channel();
        let (durable_tx, durable_rx) = watch::channel(Durable {
            pos: log_position(active.id, SEGMENT_HEADER_BYTES),
            error: None,
        });
        let first = active.file.clone();
        let sync_dir = dir.to_path_buf();
        let syncs = Arc::new(AtomicU64::new(0));
        let write_backs = Arc::new(AtomicU64::new(0));
        let counters = SyncCounters {
            syncs: syncs.clone(),
            write_backs: write_backs.clone(),
        };
        let sync_thread = std::thread::Builder::new()
            .name(format!("commitlog-sync-{shard}"))
            .spawn(move || sync_loop(mode, &sync_dir, sync_rx, durable_tx, first, &counters))
            .map_err(|e| StorageError::io(dir, e))?;
        let mut log = Commitlog {
            dir: dir.to_path_buf(),
            mode,
            segment_size,
            active,
            buf: vec![0; BUF_KEEP_BYTES],
            used: 0,
            closed: Vec::new(),
            closed_bytes: 0,
            sync_tx,
            durable_rx,
            sync_thread: Some(sync_thread),
            syncs,
            write_backs,
            written_back: SEGMENT_HEADER_BYTES,
            sync_requested: 0,
            bytes_written: 0,
            writes: 0,
            write_failed: false,
            spares: Arc::default(),
            reuse_limit: 0,
            map_len,
            map_fallbacks: 0,
            reused_segments: 0,
            prepared: Arc::default(),
            prepared_rotations: 0,
        };
        log.populate_ahead();
        log.prepare_next();
        Ok(log)
    }

    /// Lets discarded segment files be reused for new segments while the live and spare
    /// segments together number at most `limit` (the shard passes its
    /// `commitlog_total_space_bytes` in segments). Appending to a reused file overwrites
    /// blocks already allocated, in pages usually still cached: the kernel's buffered
    /// write skips allocating and zeroing page-cache pages and reserving delayed-allocation
    /// blocks, and write-back allocates nothing (an appending `pwrite` cost ~3x one into a
    /// written file here), and no segment is unlinked. Mapped segments ([`SegmentMap`])
    /// reuse files the same way, copying into their cached pages.
    pub fn set_reuse_limit(&mut self, limit: usize) {
        self.reuse_limit = limit;
    }

    pub fn mode(&self) -> SyncMode {
        self.mode
    }

    /// Registers replayed segments as still needed until their data is flushed.
    pub fn adopt_replayed(&mut self, segs: Vec<(u64, PathBuf, u64)>) {
        self.closed_bytes += segs.iter().map(|s| s.2).sum::<u64>();
        self.closed.extend(segs);
        self.closed.sort_by_key(|s| s.0);
    }

    /// Position the next entry will get.
    pub fn current_position(&self) -> LogPosition {
        log_position(self.active.id, self.active.written + self.used as u64)
    }

    pub fn active_segment_id(&self) -> u64 {
        self.active.id
    }

    /// Bytes of all live segments.
    #[inline]
    pub fn total_bytes(&self) -> u64 {
        self.closed_bytes + self.active.written + self.used as u64
    }

    pub fn oldest_segment_id(&self) -> u64 {
        self.closed.first().map_or(self.active.id, |s| s.0)
    }

    pub fn segment_count(&self) -> usize {
        self.closed.len() + 1
    }

    /// Discarded segment files kept for reuse.
    pub fn spare_count(&self) -> usize {
        self.spares.lock().map_or(0, |s| s.len())
    }

    fn take_spare(&self) -> Option<PathBuf> {
        self.spares.lock().ok()?.pop()
    }

    fn delete_spares(&self) {
        if let Ok(mut s) = self.spares.lock() {
            delete_segments(&std::mem::take(&mut *s));
        }
    }

    /// `fdatasync`s of segment files completed so far: in `batch` and `group` modes, one
    /// per sync round whatever the number of writes waiting on it (group commit).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Writes that fell back from a segment's mapping to `pwritev`, for a reused file's page
    /// that had left the page cache ([`SegmentMap`]).
    pub fn map_fallbacks(&self) -> u64 {
        self.map_fallbacks + self.active.map.as_ref().map_or(0, |m| m.fallbacks)
    }

    /// Periodic mode: write-backs ([`WRITE_BACK_BYTES`] each) the sync thread has started.
    pub fn write_backs(&self) -> u64 {
        self.write_backs.load(Ordering::Relaxed)
    }

    /// Appends a mutation; returns the positions of its start and end.
    pub fn append(&mut self, m: &Mutation) -> Result<(LogPosition, LogPosition)> {
        if self.write_failed {
            self.write_out()?;
        }
        let max = (self.segment_size / 2) as usize;
        let bound = payload_bound(m);
        let mut start = self.used;
        let len = if bound <= max {
            let end = start + ENTRY_HEADER_BYTES + bound;
            if end > self.buf.len() {
                self.buf.resize(end.max(2 * self.buf.len()), 0);
            }
            encode_payload(m, &mut self.buf[start + ENTRY_HEADER_BYTES..end])
        } else {
            // Rare: the bound is too loose to decide, so the exact size is computed first
            // (and nothing is buffered for a mutation that is refused).
            let mut exact = Vec::new();
            encode_mutation(m, &mut exact);
            if exact.len() > max {
                return Err(StorageError::MutationTooLarge {
                    size_bytes: exact.len(),
                    max_bytes: max,
                });
            }
            let end = start + ENTRY_HEADER_BYTES + exact.len();
            if end > self.buf.len() {
                self.buf.resize(end, 0);
            }
            self.buf[start + ENTRY_HEADER_BYTES..end].copy_from_slice(&exact);
            exact.len()
        };
        let entry_bytes = ENTRY_HEADER_BYTES + len;
        if self.active.written + (start + entry_bytes) as u64 > self.segment_size {
            // Move this entry to a fresh segment: the buffered entries before it are
            // written out to the old one first.
            self.used = start;
            self.rotate()?;
            self.buf.copy_within(start..start + entry_bytes, 0);
            start = 0;
        }
        let entry = &mut self.buf[start..start + entry_bytes];
        let len_le = (len as u32).to_le_bytes();
        // crc32c(id ‖ len ‖ payload) in one pass: the length is first put right before the
        // payload, where the checksum then goes.
        entry[4..8].copy_from_slice(&len_le);
        let crc = crc32c::crc32c_append(self.active.seed, &entry[4..]);
        entry[0..4].copy_from_slice(&len_le);
        entry[4..8].copy_from_slice(&crc.to_le_bytes());
        self.used = start + entry_bytes;
        let base = self.active.written;
        Ok((
            log_position(self.active.id, base + start as u64),
            log_position(self.active.id, base + self.used as u64),
        ))
    }

    fn rotate(&mut self) -> Result<()> {
        self.write_buffered()?;
        self.write_end_marker()?;
        let id = self.active.id + 1;
        let next = match self.take_prepared(id) {
            Some(next) => {
                self.prepared_rotations += 1;
                next
            }
            None => {
                let began = Instant::now();
                let next = create_segment(&self.dir, id, false, self.take_spare(), self.map_len)?;
                let took = began.elapsed();
                if took >= SLOW_ROTATION {
                    tracing::info!(
                        "commitlog segment {id} took {} ms to create (not prepared)",
                        took.as_millis()
                    );
                }
                next
            }
        };
        self.reused_segments += u64::from(next.reused);
        let mut old = std::mem::replace(&mut self.active, next);
        if let Some(map) = old.map.take() {
            self.map_fallbacks += map.fallbacks;
            let _ = self.sync_tx.send(SyncMsg::Unmap(map));
        }
        self.written_back = SEGMENT_HEADER_BYTES;
        let end = log_position(old.id, old.written);
        let _ = self.sync_tx.send(SyncMsg::Sync {
            file: old.file.clone(),
            up_to: end,
        });
        let _ = self.sync_tx.send(SyncMsg::Active {
            file: self.active.file.clone(),
        });
        self.populate_ahead();
        self.prepare_next();
        self.closed_bytes += old.written;
        self.closed.push((old.id, old.path, old.written));
        Ok(())
    }

    /// Asks the sync thread to prepare the segment after the active one, so the next
    /// rotation only renames it.
    ///
    /// Why: creating a segment on the shard thread (`fallocate`, `mmap`) and then faulting
    /// its first pages in with the copies held every request 10.5 ms at 9,145 writes/s
    /// (`perf record` of `bench/stall/fresh95.sh`: `filemap_fault` zeroing the new
    /// file's pages under `Segment::write`); the `Populate` sent at rotation comes behind
    /// the old segment's `fdatasync`, too late for the first copies.
    fn prepare_next(&mut self) {
        let _ = self.sync_tx.send(SyncMsg::Prepare {
            id: self.active.id + 1,
            spare: self.take_spare(),
            map_len: self.map_len,
            slot: self.prepared.clone(),
        });
    }

    /// The prepared segment `id` under its segment name, if the sync thread has it ready;
    /// a prepared segment of another id (one the shard had to create itself) is dropped.
    fn take_prepared(&self, id: u64) -> Option<Segment> {
        let seg = self.prepared.lock().ok()?.take()?;
        if seg.id != id {
            self.discard_prepared(seg);
            return None;
        }
        let path = self.dir.join(segment_file_name(id));
        if let Err(e) = fs::rename(&seg.path, &path) {
            tracing::warn!("cannot rename {}: {e}", seg.path.display());
            self.discard_prepared(seg);
            return None;
        }
        Some(Segment { path, ..seg })
    }

    /// Unmaps (on the sync thread) and deletes a prepared segment nobody will use.
    fn discard_prepared(&self, mut seg: Segment) {
        if let Some(map) = seg.map.take() {
            let _ = self.sync_tx.send(SyncMsg::Unmap(map));
        }
        crate::deleter::remove(&seg.path, None);
    }

    /// Asks the sync thread to populate the active segment's mapping ahead of the copies
    /// ([`SegmentMap::populate_ahead`]).
    fn populate_ahead(&mut self) {
        let written = self.active.written;
        if let Some(msg) = self
            .active
            .map
            .as_mut()
            .and_then(|m| m.populate_ahead(written))
        {
            let _ = self.sync_tx.send(msg);
        }
    }

    /// Hands buffered entries to the OS (one pwrite). On error the buffer is kept and
    /// retried by the next call.
    pub fn write_out(&mut self) -> Result<()> {
        self.write_buffered()?;
        if self.buf.len() > BUF_KEEP_BYTES {
            // A burst (or one large mutation) grew the buffer: give the memory back.
            self.buf.truncate(BUF_KEEP_BYTES);
            self.buf.shrink_to_fit();
        }
        Ok(())
    }

    /// `write_out` keeping the scratch space past the buffered entries (where `append`
    /// holds the entry it is moving to a new segment).
    fn write_buffered(&mut self) -> Result<()> {
        if self.used == 0 {
            return Ok(());
        }
        let at = self.active.written;
        if let Err(e) = self.active.write(&self.buf[..self.used], at) {
            self.write_failed = true;
            return Err(StorageError::io(&self.active.path, e));
        }
        self.write_failed = false;
        self.writes += 1;
        self.active.written += self.used as u64;
        self.bytes_written += self.used as u64;
        self.used = 0;
        self.populate_ahead();
        if matches!(self.mode, SyncMode::Periodic { .. })
            && self.active.written - self.written_back >= WRITE_BACK_BYTES
        {
            let _ = self.sync_tx.send(SyncMsg::WriteBack {
                file: self.active.file.clone(),
                from: self.written_back,
                to: self.active.written,
            });
            self.written_back = self.active.written;
        }
        Ok(())
    }

    /// Ends the active segment (version 2): replay stops there, before anything a reused
    /// file holds from its previous use.
    fn write_end_marker(&mut self) -> Result<()> {
        let mut h = [0u8; ENTRY_HEADER_BYTES];
        h[4..8].copy_from_slice(&end_marker_crc(self.active.seed).to_le_bytes());
        let at = self.active.written;
        if let Err(e) = self.active.write(&h, at) {
            self.write_failed = true;
            return Err(StorageError::io(&self.active.path, e));
        }
        self.active.written += ENTRY_HEADER_BYTES as u64;
        self.bytes_written += ENTRY_HEADER_BYTES as u64;
        Ok(())
    }

    /// Position handed to the OS so far.
    pub fn written_position(&self) -> LogPosition {
        log_position(self.active.id, self.active.written)
    }

    /// Requests a sync covering `pos` (batch/group modes).
    pub fn request_sync(&mut self, pos: LogPosition) {
        if pos <= self.sync_requested {
            return;
        }
        self.sync_requested = self.written_position();
        let _ = self.sync_tx.send(SyncMsg::Sync {
            file: self.active.file.clone(),
            up_to: self.sync_requested,
        });
    }

    pub fn durable_receiver(&self) -> watch::Receiver<Durable> {
        self.durable_rx.clone()
    }

    /// Forgets closed segments older than `keep_from` (all their data is flushed) and
    /// returns their files, for the caller to delete or keep ([`Retired::finish`]) where
    /// slow file work blocks nobody.
    ///
    /// Up to the reuse limit ([`set_reuse_limit`](Self::set_reuse_limit)), a segment of
    /// this log's format is kept: renamed out of the segments' names (replay never reads
    /// it) for a later rotation to reuse. The rename is `finish`'s too: like an unlink it
    /// takes a journal handle, which can wait for a journal commit that is writing out a
    /// flush's or compaction's data.
    pub fn discard_before(&mut self, keep_from: u64) -> Retired {
        let mut kept = Vec::with_capacity(self.closed.len());
        let mut gone = Vec::new();
        for (id, path, size) in self.closed.drain(..) {
            if id < keep_from {
                self.closed_bytes -= size;
                gone.push((id, path));
            } else {
                kept.push((id, path, size));
            }
        }
        self.closed = kept;
        let mut room = self
            .reuse_limit
            .saturating_sub(self.closed.len() + 1 + self.spare_count());
        let mut r = Retired {
            delete: Vec::new(),
            keep: Vec::new(),
            spares: self.spares.clone(),
        };
        for (id, path) in gone {
            let reusable = room > 0
                && path
                    .file_name()
                    .is_some_and(|n| *n == *segment_file_name(id));
            if reusable {
                room -= 1;
                let spare = self.dir.join(format!("{SPARE_PREFIX}{id}.log"));
                r.keep.push((path, spare));
            } else {
                r.delete.push(path);
            }
        }
        r
    }

    /// Writes out, syncs, and stops the sync thread. The active segment gets its end
    /// marker (a reused file's old entries follow it); spare files are deleted.
    pub fn shutdown(&mut self) -> Result<()> {
        self.write_out()?;
        self.write_end_marker()?;
        self.delete_spares();
        self.active
            .file
            .sync_data()
            .map_err(|e| StorageError::io(&self.active.path, e))?;
        let _ = self.sync_tx.send(SyncMsg::Stop);
        if let Some(t) = self.sync_thread.take() {
            let _ = t.join();
        }
        self.delete_prepared();
        Ok(())
    }

    /// Deletes the prepared segment (once the sync thread is stopped).
    fn delete_prepared(&self) {
        let seg = self.prepared.lock().ok().and_then(|mut s| s.take());
        if let Some(seg) = seg {
            let _ = fs::remove_file(&seg.path);
        }
    }
}

impl Drop for Commitlog {
    fn drop(&mut self) {
        if self.sync_thread.is_some() && self.write_out().is_ok() {
            let _ = self.write_end_marker();
        }
        self.delete_spares();
        let _ = self.sync_tx.send(SyncMsg::Stop);
        if let Some(t) = self.sync_thread.take() {
            let _ = t.join();
        }
        self.delete_prepared();
    }
}

/// Creates segment `id`. `sync_dir`: sync the directory entry now (at open); at rotation
/// the sync thread does it (told by `SyncMsg::Active`) before it reports any entry of the
/// new segment durable, so the shard thread never waits for a directory fsync.
///
/// `spare`: a discarded segment's file to reuse (renamed to the new segment's name; its
/// old content stays past what is written, behind an end marker or failing the new id's
/// checksums; every write into it is padded to whole blocks, [`pad_to_block`]). If the
/// rename fails a new file is made.
///
/// `map_len`: the file is allocated to this length and mapped ([`SegmentMap`]) when the
/// file system allows.
fn create_segment(
    dir: &Path,
    id: u64,
    sync_dir: bool,
    spare: Option<PathBuf>,
    map_len: Option<u64>,
) -> Result<Segment> {
    create_segment_at(
        dir.join(segment_file_name(id)),
        dir,
        id,
        sync_dir,
        spare,
        map_len,
    )
}

/// [`create_segment`] under the file name `path`.
fn create_segment_at(
    path: PathBuf,
    dir: &Path,
    id: u64,
    sync_dir: bool,
    spare: Option<PathBuf>,
    map_len: Option<u64>,
) -> Result<Segment> {
    let reused = spare.and_then(|s| match fs::rename(&s, &path) {
        Ok(()) => OpenOptions::new().read(true).write(true).open(&path).ok(),
        Err(e) => {
            tracing::warn!("cannot reuse commitlog file {}: {e}", s.display());
            let _ = fs::remove_file(&s);
            None
        }
    });
    let is_reused = reused.is_some();
    let file = match reused {
        Some(f) => f,
        None => OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| StorageError::io(&path, e))?,
    };
    let map = match map_len {
        Some(len) => match SegmentMap::new(&file, len, is_reused) {
            Ok(map) => map,
            Err(e) => {
                // (No space for it: nothing of this segment is left behind.)
                let _ = fs::remove_file(&path);
                return Err(StorageError::io(&path, e));
            }
        },
        _ => None,
    };
    let mut segment = Segment {
        id,
        seed: entry_seed(id, SEGMENT_VERSION),
        file: Arc::new(file),
        path,
        written: SEGMENT_HEADER_BYTES,
        reused: is_reused,
        map,
    };
    segment
        .write(&segment_header(id), 0)
        .map_err(|e| StorageError::io(&segment.path, e))?;
    // The new file's directory entry must survive a crash for replay to find it.
    if sync_dir && let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(segment)
}

/// The sync thread's side of [`Commitlog::prepare_next`]: creates segment `id` under a
/// [`NEXT_PREFIX`] name, faults the start of its mapping in, and leaves it in `slot`
/// (replacing, and deleting, any older one). A failure is logged; the rotation then
/// creates the segment itself.
fn prepare_segment(
    dir: &Path,
    id: u64,
    spare: Option<PathBuf>,
    map_len: Option<u64>,
    slot: &PreparedSlot,
) {
    let path = dir.join(format!("{NEXT_PREFIX}{id}.log"));
    let mut seg = match create_segment_at(path, dir, id, false, spare, map_len) {
        Ok(seg) => seg,
        Err(e) => {
            tracing::warn!("cannot prepare commitlog segment {id}: {e}");
            return;
        }
    };
    if let Some(map) = &mut seg.map {
        let to = PREPARE_POPULATE_BYTES.min(map.len);
        populate(map.ptr.as_ptr() as usize, 0, to, &map.populated);
        map.requested = to;
    }
    let old = match slot.lock() {
        Ok(mut s) => s.replace(seg),
        Err(_) => Some(seg),
    };
    if let Some(old) = old {
        let _ = fs::remove_file(&old.path);
    }
}

/// The block size writes into a reused segment file are padded to.
const BLOCK_BYTES: u64 = 4096;

/// Zero bytes that take a write ending at `end` to the end of its block.
///
/// Why: a write that covers only part of a block whose page is not in the cache makes
/// the kernel read the block first, and the writing (shard) thread waits for that read.
/// A new file never needs it (nothing past its end is read), but a reused file's pages
/// may have left the cache since its previous use: with the page cache full, a 694 MB
/// compaction made such reads 40–68 ms each (`bench/stall/compactstall.sh`). Padded,
/// every write into a reused file covers its last block whole, and the next one starts
/// inside a block just written, still cached. The zeros read as the end of the entries
/// (`entry_at`'s zero-filled header), like space never written.
fn pad_to_block(end: u64) -> usize {
    ((BLOCK_BYTES - end % BLOCK_BYTES) % BLOCK_BYTES) as usize
}

/// Writes `data` at `offset`; into a `reused` file, followed by the zeros that fill its
/// last block ([`pad_to_block`]), in one `pwritev` when it writes them all.
fn write_at(file: &File, data: &[u8], offset: u64, reused: bool) -> std::io::Result<()> {
    static ZEROS: [u8; BLOCK_BYTES as usize] = [0; BLOCK_BYTES as usize];
    let pad = match reused {
        true => pad_to_block(offset + data.len() as u64),
        false => 0,
    };
    let zeros = &ZEROS[..pad.min(ZEROS.len())];
    if zeros.is_empty() {
        return file.write_all_at(data, offset);
    }
    let bufs = [std::io::IoSlice::new(data), std::io::IoSlice::new(zeros)];
    let n = match rustix::io::pwritev(file, &bufs, offset) {
        Ok(n) => n,
        Err(rustix::io::Errno::INTR) => 0,
        Err(e) => return Err(e.into()),
    };
    // A short write (rare): the rest one buffer at a time.
    if n < data.len() {
        file.write_all_at(&data[n..], offset + n as u64)?;
    }
    let done = n.saturating_sub(data.len());
    if done < zeros.len() {
        file.write_all_at(&zeros[done..], offset + (data.len() + done) as u64)?;
    }
    Ok(())
}

/// Syncs the commitlog directory (a segment was created since the last time).
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The sync thread's counters, read by the shard ([`Commitlog::syncs`],
/// [`Commitlog::write_backs`]).
struct SyncCounters {
    syncs: Arc<AtomicU64>,
    write_backs: Arc<AtomicU64>,
}

fn sync_loop(
    mode: SyncMode,
    dir: &Path,
    rx: mpsc::Receiver<SyncMsg>,
    durable: watch::Sender<Durable>,
    first: Arc<File>,
    counters: &SyncCounters,
) {
    let syncs = &counters.syncs;
    let mut active = first;
    let mut best: LogPosition = 0;
    let mut dir_dirty = false;
    // Periodic mode: the period, and when the next sync of the active segment is due. A
    // deadline, not a timeout per receive: write-back requests arrive more often than the
    // period.
    let period = match mode {
        SyncMode::Periodic { period_ms } => Some(Duration::from_millis(period_ms.max(1))),
        _ => None,
    };
    let mut due = Instant::now() + period.unwrap_or_default();
    loop {
        let msg = match period {
            Some(period) => {
                let now = Instant::now();
                if now >= due {
                    due = now + period;
                    if dir_dirty {
                        dir_dirty = sync_dir(dir).is_err();
                    }
                    if active.sync_data().is_ok() {
                        syncs.fetch_add(1, Ordering::Relaxed);
                    }
                    continue;
                }
                match rx.recv_timeout(due - now) {
                    Ok(m) => Some(m),
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
            _ => match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => return,
            },
        };
        let mut files: Vec<Arc<File>> = Vec::new();
        let mut stop = false;
        // Population and unmapping, in their order, once this round's syncs are done (a
        // write waiting for its sync does not wait for them).
        let mut later: Vec<SyncMsg> = Vec::new();
        let mut handle = |m: SyncMsg,
                          files: &mut Vec<Arc<File>>,
                          active: &mut Arc<File>,
                          best: &mut LogPosition| match m {
            SyncMsg::Sync { file, up_to } => {
                if !files.iter().any(|f| Arc::ptr_eq(f, &file)) {
                    files.push(file);
                }
                *best = (*best).max(up_to);
            }
            SyncMsg::Active { file } => {
                *active = file;
                dir_dirty = true;
            }
            SyncMsg::WriteBack { file, from, to } => {
                if crate::writeback::start(&file, from, to) {
                    counters.write_backs.fetch_add(1, Ordering::Relaxed);
                }
            }
            m @ (SyncMsg::Populate { .. } | SyncMsg::Unmap(_) | SyncMsg::Prepare { .. }) => {
                later.push(m)
            }
            SyncMsg::Stop => stop = true,
        };
        if let Some(m) = msg {
            handle(m, &mut files, &mut active, &mut best);
        }
        while let Ok(m) = rx.try_recv() {
            handle(m, &mut files, &mut active, &mut best);
        }
        // (A sync request may come behind other messages, e.g. a `Populate`: the window
        // starts once there is one.)
        if let SyncMode::Batch { window_ms } | SyncMode::Group { window_ms } = mode
            && window_ms > 0
            && !files.is_empty()
        {
            std::thread::sleep(Duration::from_millis(window_ms));
            while let Ok(m) = rx.try_recv() {
                handle(m, &mut files, &mut active, &mut best);
            }
        }
        let mut error = None;
        if dir_dirty {
            match sync_dir(dir) {
                Ok(()) => dir_dirty = false,
                Err(e) => error = Some(format!("fsync of {} failed: {e}", dir.display())),
            }
        }
        for f in &files {
            match f.sync_data() {
                Ok(()) => {
                    syncs.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => error = Some(format!("fdatasync failed: {e}")),
            }
        }
        if !files.is_empty() {
            durable.send_modify(|d| {
                if let Some(e) = error {
                    d.error = Some(e);
                } else {
                    d.pos = d.pos.max(best);
                }
            });
        }
        for m in later {
            match m {
                SyncMsg::Populate {
                    addr,
                    from,
                    to,
                    done,
                } => populate(addr, from, to, &done),
                // After any population of the same mapping.
                SyncMsg::Unmap(map) => drop(map),
                SyncMsg::Prepare {
                    id,
                    spare,
                    map_len,
                    slot,
                } => prepare_segment(dir, id, spare, map_len, &slot),
                _ => {}
            }
        }
        if stop {
            return;
        }
    }
}

/// The acknowledgement of one write: resolves when the write is durable per the sync
/// mode. Holds no borrow of the storage.
pub struct WriteAck {
    inner: AckInner,
}

enum AckInner {
    Ready(Option<Result<()>>),
    /// Periodic mode: resolves once the entry is handed to the OS (no allocation).
    Written(Option<(Rc<RefCell<Commitlog>>, LogPosition)>),
    /// Batch and group modes: waits for the sync thread.
    Pending(std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>>>>),
}

thread_local! {
    /// Whether periodic-mode acks polled now may leave their write-out to the caller
    /// ([`with_deferred_write_out`]), and the end of the furthest entry they left.
    static DEFER_SCOPE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static DEFERRED_IN_SCOPE: std::cell::Cell<LogPosition> = const { std::cell::Cell::new(0) };
    /// The end of the furthest entry any ack on this thread deferred (never reset).
    static DEFERRED_MAX: std::cell::Cell<LogPosition> = const { std::cell::Cell::new(0) };
    /// The commitlog whose entries acks deferred on this thread (one per shard thread;
    /// weak: a storage shut down is not kept alive, its drop wrote its buffer out).
    static DEFERRED: RefCell<Option<std::rc::Weak<RefCell<Commitlog>>>> =
        const { RefCell::new(None) };
}

/// Runs `f` (the first poll of requests a connection runs inline) with periodic-mode
/// acks resolving as soon as their entry is in the commitlog's buffer: the one `pwrite`
/// per write becomes one per batch of requests. Returns `f`'s result and the end of the
/// furthest entry an ack deferred (0 for none). The caller must pass that position to
/// [`write_out_deferred`] before anything that acknowledges those writes leaves the
/// shard (a response on the socket) and before it yields to other tasks (which could
/// read the writes); until then a crash of the process may lose them.
pub fn with_deferred_write_out<R>(f: impl FnOnce() -> R) -> (R, LogPosition) {
    /// Restores the enclosing scope's state, also when `f` panics.
    struct Restore {
        outer: bool,
        outer_deferred: LogPosition,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            DEFER_SCOPE.with(|d| d.set(self.outer));
            // An enclosing scope answers for what this one deferred too.
            let inner = DEFERRED_IN_SCOPE.with(|d| d.get());
            let back = if self.outer {
                self.outer_deferred.max(inner)
            } else {
                0
            };
            DEFERRED_IN_SCOPE.with(|d| d.set(back));
        }
    }
    let restore = Restore {
        outer: DEFER_SCOPE.with(|d| d.replace(true)),
        outer_deferred: DEFERRED_IN_SCOPE.with(|d| d.replace(0)),
    };
    let r = f();
    let deferred = DEFERRED_IN_SCOPE.with(|d| d.get());
    drop(restore);
    (r, deferred)
}

/// The end of the furthest entry an ack deferred inside the innermost
/// [`with_deferred_write_out`] scope running now (0 outside one, or if none deferred).
pub fn deferred_in_scope() -> LogPosition {
    DEFERRED_IN_SCOPE.with(|d| d.get())
}

/// The end of the furthest entry an ack on this thread ever deferred (0 for none): what
/// [`write_out_deferred`] must cover before anything that may depend on any deferred
/// write leaves the shard (a message to another shard).
pub fn deferred_max() -> LogPosition {
    DEFERRED_MAX.with(|d| d.get())
}

/// Hands the commitlog's buffer to the OS if an entry an ack deferred through `up_to` is
/// still in it; fails (naming the segment) if it cannot, and then every later call with
/// such an entry still unwritten fails too. A no-op when nothing deferred is unwritten.
pub fn write_out_deferred(up_to: LogPosition) -> Result<()> {
    if up_to == 0 {
        return Ok(());
    }
    let log = DEFERRED.with(|d| d.borrow().as_ref().and_then(|l| l.upgrade()));
    match log {
        Some(l) => write_out_through(&mut l.borrow_mut(), up_to),
        None => Ok(()),
    }
}

/// Whether an ack for the entry ending at `end` in `log` may resolve without writing
/// it out (inside a deferral scope, on a healthy log, the thread's one commitlog); if so
/// records the deferral.
fn defer(log: &Rc<RefCell<Commitlog>>, end: LogPosition) -> bool {
    if !DEFER_SCOPE.with(|d| d.get()) || log.borrow().write_failed {
        return false;
    }
    let same = DEFERRED.with(|d| {
        let mut d = d.borrow_mut();
        match d.as_mut() {
            Some(l) if std::ptr::eq(l.as_ptr(), Rc::as_ptr(log)) => true,
            // Another storage's log, still open: this one writes out at once.
            Some(l) if l.strong_count() > 0 => false,
            _ => {
                *d = Some(Rc::downgrade(log));
                true
            }
        }
    });
    if same {
        DEFERRED_IN_SCOPE.with(|d| d.set(d.get().max(end)));
        DEFERRED_MAX.with(|d| d.set(d.get().max(end)));
    }
    same
}

/// Hands the buffer to the OS if the entry ending at `end` is still in it.
fn write_out_through(l: &mut Commitlog, end: LogPosition) -> Result<()> {
    if l.written_position() < end && segment_of(end) >= l.active.id {
        l.write_out()?;
    }
    Ok(())
}

impl WriteAck {
    pub fn ready(r: Result<()>) -> Self {
        WriteAck {
            inner: AckInner::Ready(Some(r)),
        }
    }

    pub(crate) fn new(log: Rc<RefCell<Commitlog>>, end: LogPosition) -> Self {
        let periodic = matches!(log.borrow().mode, SyncMode::Periodic { .. });
        if periodic {
            return WriteAck {
                inner: AckInner::Written(Some((log, end))),
            };
        }
        let fut = async move {
            let mut rx = {
                let mut l = log.borrow_mut();
                write_out_through(&mut l, end)?;
                l.request_sync(end);
                l.durable_receiver()
            };
            let res = rx.wait_for(|d| d.pos >= end || d.error.is_some()).await;
            match res {
                Ok(d) => match &d.error {
                    Some(e) if d.pos < end => Err(StorageError::CommitlogSync(e.clone())),
                    _ => Ok(()),
                },
                Err(_) => Err(StorageError::ShutDown),
            }
        };
        WriteAck {
            inner: AckInner::Pending(Box::pin(fut)),
        }
    }
}

impl WriteAck {
    /// The ack's result when it needs no wait (a ready ack, or periodic mode, where it
    /// resolves as [`Future::poll`] would: deferred inside a [`with_deferred_write_out`]
    /// scope, written out otherwise); the ack itself when it waits for a sync.
    pub fn now(self) -> std::result::Result<Result<()>, WriteAck> {
        match self.inner {
            AckInner::Ready(r) => Ok(r.unwrap_or(Ok(()))),
            AckInner::Written(Some((log, end))) if defer(&log, end) => Ok(Ok(())),
            AckInner::Written(Some((log, end))) => {
                Ok(write_out_through(&mut log.borrow_mut(), end))
            }
            AckInner::Written(None) => Ok(Ok(())),
            inner @ AckInner::Pending(_) => Err(WriteAck { inner }),
        }
    }
}

impl std::future::Future for WriteAck {
    type Output = Result<()>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>> {
        match &mut self.inner {
            AckInner::Ready(r) => std::task::Poll::Ready(r.take().unwrap_or(Ok(()))),
            AckInner::Written(w) => std::task::Poll::Ready(match w.take() {
                Some((log, end)) if defer(&log, end) => Ok(()),
                Some((log, end)) => write_out_through(&mut log.borrow_mut(), end),
                None => Ok(()),
            }),
            AckInner::Pending(f) => f.as_mut().poll(cx),
        }
    }
}

// ---- replay ----

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TornTail {
    pub path: PathBuf,
    pub offset: u64,
    pub bytes_truncated: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptEntry {
    pub path: PathBuf,
    pub offset: u64,
    pub reason: String,
    /// Bytes of the segment skipped after the corrupt entry.
    pub bytes_skipped: u64,
}

/// What replay found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayReport {
    pub segments: u32,
    pub mutations_replayed: u64,
    /// Mutations skipped because their table is unknown, dropped, truncated or already flushed.
    pub mutations_skipped: u64,
    pub torn_tail: Option<TornTail>,
    pub corrupt: Vec<CorruptEntry>,
}

/// Lists `(id, path)` of the segments in `dir`, oldest first.
/// Deletes discarded segment files (see [`Commitlog::discard_before`]); a failure is
/// logged (a leftover segment is replayed and skipped at the next start).
pub fn delete_segments(paths: &[PathBuf]) {
    for p in paths {
        crate::deleter::remove(p, None);
    }
}

/// Segment files no table needs any more ([`Commitlog::discard_before`]): some to keep
/// for reuse, the rest to delete.
#[must_use = "the files are only renamed or deleted by `finish`"]
pub struct Retired {
    delete: Vec<PathBuf>,
    /// (segment file, its spare name).
    keep: Vec<(PathBuf, PathBuf)>,
    spares: Arc<std::sync::Mutex<Vec<PathBuf>>>,
}

impl Retired {
    pub fn is_empty(&self) -> bool {
        self.delete.is_empty() && self.keep.is_empty()
    }

    /// Renames the kept files to their spare names and hands them to the log; deletes the
    /// others (a failed rename deletes too). Blocking file work: the janitor's.
    pub fn finish(self) {
        let mut delete = self.delete;
        for (path, spare) in self.keep {
            match fs::rename(&path, &spare) {
                Ok(()) => match self.spares.lock() {
                    Ok(mut s) => s.push(spare),
                    Err(_) => delete.push(spare),
                },
                Err(_) => delete.push(path),
            }
        }
        delete_segments(&delete);
    }
}

/// Deletes the spare segment files in `dir` (those of an earlier run).
fn delete_spare_files(dir: &Path) {
    let Ok(rd) = fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if e.file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(SPARE_PREFIX) || n.starts_with(NEXT_PREFIX))
        {
            let _ = fs::remove_file(e.path());
        }
    }
}

pub fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let rd = match fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(StorageError::io(dir, e)),
    };
    for e in rd {
        let e = e.map_err(|e| StorageError::io(dir, e))?;
        if let Some(id) = e.file_name().to_str().and_then(parse_segment_name) {
            out.push((id, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Reads every segment in `dir`, calling `apply(position, mutation)` for each entry.
/// Returns the report and the segments read `(id, path, size)`.
pub fn replay(
    dir: &Path,
    policy: CommitFailurePolicy,
    report: &mut ReplayReport,
    apply: impl FnMut(LogPosition, Mutation),
) -> Result<Vec<(u64, PathBuf, u64)>> {
    replay_impl(dir, policy, report, apply, true)
}

/// Checks every segment like replay does, without applying or truncating anything.
pub fn verify_segments(
    dir: &Path,
    policy: CommitFailurePolicy,
    report: &mut ReplayReport,
) -> Result<()> {
    replay_impl(dir, policy, report, |_, _| {}, false).map(|_| ())
}

/// Why the bytes at a position of a segment are not an entry. `zero`: the entry header is
/// all zeros (space nothing was written to).
struct BadEntry {
    reason: String,
    zero: bool,
}

/// The entry at `pos`, if its checksum matches and its payload decodes: the mutation and
/// where the next entry starts.
fn entry_at(
    data: &Bytes,
    pos: usize,
    seed: u32,
) -> std::result::Result<(usize, Mutation), BadEntry> {
    let bad = |reason: String| BadEntry {
        reason,
        zero: false,
    };
    let Some(h) = data.get(pos..pos + ENTRY_HEADER_BYTES) else {
        return Err(bad("truncated entry header".into()));
    };
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    if len == 0 && crc == 0 {
        return Err(BadEntry {
            reason: "zero-filled entry".into(),
            zero: true,
        });
    }
    let end = pos + ENTRY_HEADER_BYTES + len as usize;
    let Some(payload) = data.get(pos + ENTRY_HEADER_BYTES..end) else {
        return Err(bad(format!(
            "entry of {len} bytes runs past the end of the file"
        )));
    };
    let actual = crc32c::crc32c_append(crc32c::crc32c_append(seed, &len.to_le_bytes()), payload);
    if actual != crc {
        return Err(bad(format!(
            "checksum mismatch (stored {crc:#x}, computed {actual:#x})"
        )));
    }
    match decode_mutation(data.slice(pos + ENTRY_HEADER_BYTES..end)) {
        Ok(mutation) => Ok((end, mutation)),
        Err(e) => Err(bad(format!("undecodable mutation: {e}"))),
    }
}

/// The offset of the first valid entry after a bad one at `bad`, if any: every later
/// position is tried (an entry's length cannot be trusted once it is bad), cheapest checks
/// first (a length that fits the file, the payload's format version byte), then the
/// checksum and the decode.
fn next_valid_entry(data: &Bytes, bad: usize, seed: u32, end: Option<u32>) -> Option<usize> {
    (bad + 1..=data.len().saturating_sub(ENTRY_HEADER_BYTES)).find(|&pos| {
        if is_end_marker(data, pos, end) {
            return true;
        }
        let h = &data[pos..pos + ENTRY_HEADER_BYTES];
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        len > 0
            && len <= data.len() - pos - ENTRY_HEADER_BYTES
            && data[pos + ENTRY_HEADER_BYTES] == MUTATION_FORMAT_VERSION
            && entry_at(data, pos, seed).is_ok()
    })
}

/// Whether the segment's end marker is at `pos`; `end`: the checksum field of the
/// segment's end marker ([`end_marker_crc`]), None for a version 1 segment (none).
fn is_end_marker(data: &[u8], pos: usize, end: Option<u32>) -> bool {
    end.is_some_and(|end| {
        data.get(pos..pos + ENTRY_HEADER_BYTES).is_some_and(|h| {
            h[..4] == [0; 4] && u32::from_le_bytes([h[4], h[5], h[6], h[7]]) == end
        })
    })
}

fn replay_impl(
    dir: &Path,
    policy: CommitFailurePolicy,
    report: &mut ReplayReport,
    mut apply: impl FnMut(LogPosition, Mutation),
    truncate_torn: bool,
) -> Result<Vec<(u64, PathBuf, u64)>> {
    let segs = list_segments(dir)?;
    let n = segs.len();
    let mut out = Vec::new();
    for (i, (id, path)) in segs.into_iter().enumerate() {
        let last = i + 1 == n;
        let data = fs::read(&path).map_err(|e| StorageError::io(&path, e))?;
        report.segments += 1;
        let data = Bytes::from(data);
        // A bad stretch `offset..resume` (resume = the end of the file when no valid entry
        // follows) that is not a torn tail: the policy decides.
        let corrupt = |offset: usize,
                       resume: usize,
                       reason: String,
                       report: &mut ReplayReport|
         -> Result<()> {
            match policy {
                CommitFailurePolicy::Stop => Err(StorageError::CommitlogCorrupt {
                    path: path.clone(),
                    offset: offset as u64,
                    reason,
                }),
                CommitFailurePolicy::Ignore => {
                    tracing::error!(
                        "commitlog {} is corrupt at offset {offset}: {reason}; skipping {} bytes",
                        path.display(),
                        resume - offset
                    );
                    report.corrupt.push(CorruptEntry {
                        path: path.clone(),
                        offset: offset as u64,
                        reason,
                        bytes_skipped: (resume - offset) as u64,
                    });
                    Ok(())
                }
            }
        };
        const VERSIONS: [u32; 2] = [SEGMENT_VERSION, 1];
        if data.len() < SEGMENT_HEADER_BYTES as usize
            && VERSIONS
                .iter()
                .any(|&v| data[..] == segment_header_of(id, v)[..data.len()])
        {
            // Creation was interrupted before the header was complete: no entries.
            if truncate_torn {
                tracing::warn!(
                    "commitlog {}: removing a segment whose creation was interrupted",
                    path.display()
                );
                let _ = fs::remove_file(&path);
            }
            continue;
        }
        let version = VERSIONS.into_iter().find(|&v| {
            data.len() >= SEGMENT_HEADER_BYTES as usize
                && data[..SEGMENT_HEADER_BYTES as usize] == segment_header_of(id, v)
        });
        let Some(version) = version else {
            // (A reused file renamed to this segment's name before its new header was
            // written, at a crash, holds another id's header.)
            if last {
                torn_tail(&path, &data, 0, "bad segment header", truncate_torn, report);
            } else {
                corrupt(0, data.len(), "bad segment header".into(), report)?;
            }
            out.push((id, path.clone(), data.len() as u64));
            continue;
        };
        let seed = entry_seed(id, version);
        // Computed once: the resync scan below may test every offset of the file.
        let end = (version >= 2).then(|| end_marker_crc(seed));
        let mut pos = SEGMENT_HEADER_BYTES as usize;
        while pos < data.len() {
            if is_end_marker(&data, pos, end) {
                // What follows is a reused file's previous content.
                break;
            }
            let BadEntry { reason, zero } = match entry_at(&data, pos, seed) {
                Ok((end, mutation)) => {
                    apply(log_position(id, pos as u64), mutation);
                    pos = end;
                    continue;
                }
                Err(bad) => bad,
            };
            if zero && data[pos..].iter().all(|&b| b == 0) {
                // Space allocated and never written (a mapped segment's file is allocated
                // whole, `SegmentMap`): the entries end here, in whichever segment.
                break;
            }
            // A bad entry with nothing valid after it, in the segment being written when
            // the node stopped, is a torn tail (a write the crash cut short, or space never
            // written: a zero-filled header). A bad entry with valid entries after it is
            // corruption in the middle of the log, whichever segment it is in: entries
            // after it may have been acknowledged, so it is never silently truncated.
            let next = if last && zero {
                None
            } else {
                next_valid_entry(&data, pos, seed, end)
            };
            match next {
                None if last => {
                    torn_tail(&path, &data, pos, &reason, truncate_torn, report);
                    break;
                }
                None => {
                    corrupt(pos, data.len(), reason, report)?;
                    break;
                }
                Some(resume) => {
                    corrupt(pos, resume, reason, report)?;
                    pos = resume;
                }
            }
        }
        out.push((id, path, data.len() as u64));
    }
    Ok(out)
}

/// Records (and, when `truncate`, cuts off) the torn tail of the last segment at `offset`.
fn torn_tail(
    path: &Path,
    data: &[u8],
    offset: usize,
    reason: &str,
    truncate: bool,
    report: &mut ReplayReport,
) {
    let offset = offset as u64;
    if !truncate {
        report.torn_tail = Some(TornTail {
            path: path.to_path_buf(),
            offset,
            bytes_truncated: 0,
        });
        return;
    }
    let truncated = data.len() as u64 - offset;
    tracing::warn!(
        "commitlog {}: torn tail at offset {offset} ({reason}); truncating {truncated} bytes",
        path.display()
    );
    if let Ok(f) = OpenOptions::new().write(true).open(path) {
        let _ = f.set_len(offset);
        let _ = f.sync_all();
    }
    report.torn_tail = Some(TornTail {
        path: path.to_path_buf(),
        offset,
        bytes_truncated: truncated,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use amphora_types::data::{LivenessInfo, PartitionKey, RangeTombstone};
    use amphora_types::schema::TableId;
    use proptest::prelude::*;

    fn blob(max: usize) -> impl Strategy<Value = Bytes> {
        prop::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
    }

    /// Timestamps near each other (small deltas) and anywhere (10-byte varints).
    fn timestamp() -> impl Strategy<Value = i64> {
        prop_oneof![
            1_700_000_000_000_000i64..1_700_000_000_000_040,
            1_700_000_000_000_000i64..1_700_000_000_001_000,
            any::<i64>()
        ]
    }

    fn deletion() -> impl Strategy<Value = DeletionTime> {
        (timestamp(), any::<i64>()).prop_map(|(t, l)| DeletionTime {
            marked_for_delete_at: t,
            local_deletion_time: l,
        })
    }

    fn cell() -> impl Strategy<Value = Cell> {
        (
            timestamp(),
            prop_oneof![Just(0i32), any::<i32>()],
            any::<i64>(),
            prop_oneof![blob(130), blob(300)],
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(timestamp, ttl, local_expiry, value, is_tombstone, is_counter)| Cell {
                    timestamp,
                    ttl,
                    local_expiry,
                    value,
                    is_tombstone,
                    is_counter,
                },
            )
    }

    fn column() -> impl Strategy<Value = (u32, ColumnData)> {
        let data = prop_oneof![
            cell().prop_map(ColumnData::Simple),
            (
                prop::option::of(deletion()),
                prop::collection::vec((blob(20), cell()), 0..4)
            )
                .prop_map(|(deletion, cells)| ColumnData::Complex { deletion, cells }),
        ];
        (prop_oneof![0u32..200, any::<u32>()], data)
    }

    fn clustering() -> impl Strategy<Value = Clustering> {
        prop::collection::vec(blob(20), 0..3).prop_map(Clustering)
    }

    fn row() -> impl Strategy<Value = Row> {
        (
            clustering(),
            prop::option::of((timestamp(), any::<i32>(), any::<i64>()).prop_map(
                |(timestamp, ttl, local_expiry)| LivenessInfo {
                    timestamp,
                    ttl,
                    local_expiry,
                },
            )),
            prop::option::of(deletion()),
            prop::collection::vec(column(), 0..6),
        )
            .prop_map(|(clustering, marker, deletion, cells)| Row {
                clustering,
                marker,
                deletion,
                cells,
            })
    }

    fn bound() -> impl Strategy<Value = ClusteringBound> {
        (clustering(), any::<bool>())
            .prop_map(|(prefix, inclusive)| ClusteringBound { prefix, inclusive })
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        (
            any::<u128>(),
            blob(40),
            prop::option::of(deletion()),
            prop::option::of(row()),
            prop::collection::vec(row(), 0..4),
            prop::collection::vec(
                (bound(), bound(), deletion()).prop_map(|(start, end, deletion)| RangeTombstone {
                    start,
                    end,
                    deletion,
                }),
                0..3,
            ),
        )
            .prop_map(
                |(table, key, partition_deletion, static_row, rows, rts)| Mutation {
                    table: TableId(table),
                    key: PartitionKey::new(key),
                    update: PartitionUpdate {
                        partition_deletion,
                        static_row,
                        rows,
                        range_tombstones: rts,
                    },
                },
            )
    }

    fn encoded(m: &Mutation) -> Vec<u8> {
        let mut out = vec![0xAA; payload_bound(m)];
        let n = encode_payload(m, &mut out);
        out.truncate(n);
        out
    }

    proptest! {
        /// The segment encoder writes exactly the codec's layout, within its size bound.
        #[test]
        fn payload_matches_codec(m in mutation()) {
            let mut want = Vec::new();
            encode_mutation(&m, &mut want);
            prop_assert!(want.len() <= payload_bound(&m));
            prop_assert_eq!(encoded(&m), want);
        }
    }

    proptest! {
        /// `put_row` appends exactly what the codec's `put_row` appends.
        #[test]
        fn put_row_matches_codec(r in row(), base in timestamp(), prefix in blob(5)) {
            let mut want = prefix.to_vec();
            amphora_types::codec::put_row(&mut want, &r, base);
            let mut got = prefix.to_vec();
            put_row(&mut got, &r, base);
            prop_assert_eq!(got, want);
        }
    }

    /// Every entry of the checked-in v1 segments re-encodes to the same bytes.
    #[test]
    fn fixture_entries_reencode_identically() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1/commitlog");
        let mut entries = 0;
        for (id, path) in list_segments(&dir).expect("list") {
            let data = fs::read(&path).expect("read");
            let mut pos = SEGMENT_HEADER_BYTES as usize;
            while pos + ENTRY_HEADER_BYTES <= data.len() {
                let len = u32::from_le_bytes(data[pos..pos + 4].try_into().expect("4")) as usize;
                let payload = &data[pos + ENTRY_HEADER_BYTES..pos + ENTRY_HEADER_BYTES + len];
                let m = decode_mutation(Bytes::copy_from_slice(payload)).expect("decode");
                assert_eq!(encoded(&m), payload, "segment {id} offset {pos}");
                pos += ENTRY_HEADER_BYTES + len;
                entries += 1;
            }
        }
        assert!(entries > 100, "only {entries} fixture entries");
    }

    fn big_mutation(n: u8, value_bytes: usize) -> Mutation {
        Mutation {
            table: TableId(7),
            key: PartitionKey::new(Bytes::from(vec![n; 3])),
            update: PartitionUpdate {
                rows: vec![Row {
                    clustering: Clustering::empty(),
                    marker: Some(LivenessInfo::new(i64::from(n))),
                    deletion: None,
                    cells: vec![(
                        1,
                        ColumnData::Simple(Cell::live(
                            i64::from(n),
                            Bytes::from(vec![n; value_bytes]),
                        )),
                    )],
                }],
                ..Default::default()
            },
        }
    }

    /// Inside a deferral scope a periodic ack resolves with its entry still buffered and
    /// the scope reports the entry's end, which `write_out_deferred` then hands to the OS;
    /// outside a scope an ack writes its entry out before it resolves.
    #[test]
    fn acks_in_a_deferral_scope_leave_the_write_out_to_the_caller() {
        use std::task::{Context, Poll, Waker};
        let dir = tempfile::tempdir().expect("tmp");
        let log = Rc::new(RefCell::new(
            Commitlog::open(
                dir.path(),
                SyncMode::Periodic { period_ms: 10_000 },
                8 << 20,
                0,
                0,
                true,
            )
            .expect("open"),
        ));
        let mut cx = Context::from_waker(Waker::noop());
        let mut poll = |ack: WriteAck| std::pin::pin!(ack).poll(&mut cx);
        let (start, end) = log
            .borrow_mut()
            .append(&big_mutation(1, 100))
            .expect("append");
        let before = log.borrow().written_position();
        assert!(before < end);
        let (r, deferred) = with_deferred_write_out(|| poll(WriteAck::new(log.clone(), end)));
        assert!(matches!(r, Poll::Ready(Ok(()))));
        assert_eq!(deferred, end);
        assert_eq!(deferred_max(), end);
        assert_eq!(
            log.borrow().written_position(),
            before,
            "nothing written yet"
        );
        assert_eq!(deferred_in_scope(), 0, "no scope runs now");
        write_out_deferred(deferred).expect("write out");
        assert!(log.borrow().written_position() >= end);
        // The entry is in the (mapped) file.
        let data = Bytes::from(std::fs::read(&log.borrow().active.path).expect("read"));
        let at = (start - log_position(segment_of(start), 0)) as usize;
        let (next, m) = entry_at(&data, at, log.borrow().active.seed).unwrap_or_else(|b| {
            panic!("no entry at {at}: {}", b.reason);
        });
        assert_eq!(next as u64, log.borrow().active.written);
        assert_eq!(m, big_mutation(1, 100));

        // Outside a scope the ack writes its entry out itself.
        let (_, end) = log
            .borrow_mut()
            .append(&big_mutation(2, 100))
            .expect("append");
        assert!(matches!(
            poll(WriteAck::new(log.clone(), end)),
            Poll::Ready(Ok(()))
        ));
        assert!(log.borrow().written_position() >= end);

        // A panic inside a scope ends it: later acks write out again.
        let (_, end) = log
            .borrow_mut()
            .append(&big_mutation(3, 100))
            .expect("append");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_deferred_write_out(|| -> () { panic!("request panicked") })
        }));
        assert!(caught.is_err());
        assert_eq!(deferred_in_scope(), 0);
        assert!(matches!(
            poll(WriteAck::new(log.clone(), end)),
            Poll::Ready(Ok(()))
        ));
        assert!(log.borrow().written_position() >= end);
    }

    /// Periodic mode: every [`WRITE_BACK_BYTES`] written starts a write-back on the sync
    /// thread, and the period's sync still comes on time while those requests arrive more
    /// often than the period (a receive timeout restarted by each message never fired).
    #[test]
    fn periodic_mode_writes_back_each_mib_and_keeps_its_period() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut log = Commitlog::open(
            dir.path(),
            SyncMode::Periodic { period_ms: 150 },
            32 << 20,
            0,
            0,
            true,
        )
        .expect("open");
        let start = Instant::now();
        let mut i = 0u8;
        // 64 KiB every 5 ms: a write-back request about every 80 ms, for 0.9 s.
        while start.elapsed() < Duration::from_millis(900) {
            log.append(&big_mutation(i, 64 << 10)).expect("append");
            log.write_out().expect("write out");
            i = i.wrapping_add(1);
            std::thread::sleep(Duration::from_millis(5));
        }
        let written = log.written_position() & 0xffff_ffff;
        // One request per MiB or a little more (entries do not end on MiB boundaries).
        let most = written / WRITE_BACK_BYTES;
        let least = written / (WRITE_BACK_BYTES + (128 << 10));
        let deadline = Instant::now() + Duration::from_secs(5);
        while log.write_backs() < least && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(least >= 5, "{written} bytes written");
        assert!(
            (least..=most).contains(&log.write_backs()),
            "{} write-backs for {written} bytes",
            log.write_backs()
        );
        assert!(
            log.syncs() >= 3,
            "{} syncs in 0.9 s with a 150 ms period",
            log.syncs()
        );
        log.shutdown().expect("shutdown");
    }

    /// Entries of all sizes (past the buffer's resting size, across segment rotations)
    /// replay as written, and a refused mutation leaves no trace.
    #[test]
    fn append_rotate_replay() {
        for mapped in [false, true] {
            append_rotate_replay_with(mapped);
        }
    }

    fn append_rotate_replay_with(mapped: bool) {
        let dir = tempfile::tempdir().expect("tmp");
        let seg = 8 << 20;
        let mut log = Commitlog::open(
            dir.path(),
            SyncMode::Periodic { period_ms: 10_000 },
            seg,
            0,
            0,
            mapped,
        )
        .expect("open");
        assert_eq!(log.active.map.is_some(), mapped);
        let mut written = Vec::new();
        let mut last_end = 0;
        for i in 0..40u8 {
            let size = match i % 4 {
                0 => 3 << 20, // larger than the resting buffer
                1 => 10,
                2 => 100_000,
                _ => 1,
            };
            let m = big_mutation(i, size);
            let (start, end) = log.append(&m).expect("append");
            assert!(start >= last_end || segment_of(start) > segment_of(last_end));
            assert!(end > start);
            last_end = end;
            written.push(m);
            if i % 3 == 0 {
                log.write_out().expect("write out");
            }
        }
        let before = log.current_position();
        assert!(matches!(
            log.append(&big_mutation(99, seg as usize)),
            Err(StorageError::MutationTooLarge { .. })
        ));
        assert_eq!(log.current_position(), before);
        log.shutdown().expect("shutdown");
        assert!(
            log.segment_count() > 3,
            "rotated {} times",
            log.segment_count()
        );
        drop(log);
        let (replayed, report) = replay_after(dir.path(), 0);
        assert_eq!(report.torn_tail, None, "mapped: {mapped}");
        assert!(report.corrupt.is_empty(), "mapped: {mapped}, {report:?}");
        assert_eq!(replayed, written, "mapped: {mapped}");
    }

    /// Replays `dir` (policy Stop): the mutations of the segments after `segment`.
    fn replay_after(dir: &Path, segment: u64) -> (Vec<Mutation>, ReplayReport) {
        let mut replayed = Vec::new();
        let mut report = ReplayReport::default();
        replay(dir, CommitFailurePolicy::Stop, &mut report, |pos, m| {
            if segment_of(pos) > segment {
                replayed.push(m)
            }
        })
        .expect("replay");
        (replayed, report)
    }

    #[test]
    fn pad_reaches_the_next_block_boundary() {
        assert_eq!(pad_to_block(0), 0);
        assert_eq!(pad_to_block(1), 4095);
        assert_eq!(
            pad_to_block(SEGMENT_HEADER_BYTES),
            4096 - SEGMENT_HEADER_BYTES as usize
        );
        assert_eq!(pad_to_block(4096), 0);
        assert_eq!(pad_to_block(3 * 4096 + 5), 4091);
    }

    /// Every write into a reused file ends at a block boundary, zero-filled past the
    /// entries (so no write partly overwrites a block that may have left the cache), and
    /// a crash leaves a log whose replay reads those zeros as its torn tail, not the old
    /// content behind them.
    #[test]
    fn writes_into_reused_files_fill_their_last_block() {
        let dir = tempfile::tempdir().expect("tmp");
        let (mut log, mut n) = log_with_old_spares(dir.path(), false);
        let block = |log: &Commitlog| {
            let data = fs::read(&log.active.path).expect("read");
            let end = log.active.written as usize;
            let pad = pad_to_block(end as u64);
            (data[end..end + pad].to_vec(), pad, data.len())
        };
        let first = log.active.id;
        let mut written = Vec::new();
        let mut checked = 0;
        while log.reused_segments < 2 {
            let m = big_mutation(n, 50 + usize::from(n) * 7);
            log.append(&m).expect("append");
            written.push(m);
            n = n.wrapping_add(1);
            if n.is_multiple_of(3) {
                log.write_out().expect("write out");
                if log.active.reused {
                    let (tail, pad, len) = block(&log);
                    assert!(tail.iter().all(|&b| b == 0), "{tail:?}");
                    assert!(len >= log.active.written as usize + pad);
                    checked += 1;
                }
            }
        }
        assert!(checked > 10, "{checked}");
        log.write_out().expect("write out");
        let last = log.active.written;
        assert!(log.active.reused && !last.is_multiple_of(4096));
        // A crash (no end marker): replay stops at the zeros.
        std::mem::forget(log);
        assert_replay_stops_at(dir.path(), first, last, &written);
    }

    /// Segments of 64 KiB, appended to until there are four, the first three discarded:
    /// a log with three spare files, each filled with old content that is not zero
    /// anywhere (and in the page cache). Returns it and the next mutation number.
    fn log_with_old_spares(dir: &Path, mapped: bool) -> (Commitlog, u8) {
        let seg = 64 << 10;
        let mut log = Commitlog::open(
            dir,
            SyncMode::Periodic { period_ms: 10_000 },
            seg,
            0,
            0,
            mapped,
        )
        .expect("open");
        log.set_reuse_limit(8);
        let mut n = 0u8;
        while log.segment_count() < 4 {
            log.append(&big_mutation(n, 1000)).expect("append");
            n = n.wrapping_add(1);
        }
        log.discard_before(log.active.id).finish();
        let spares = log.spares.lock().expect("spares").clone();
        assert_eq!(spares.len(), 3);
        for p in &spares {
            fs::write(p, vec![0xA5u8; seg as usize]).expect("old content");
        }
        (log, n)
    }

    /// After a crash, replay of the segments after `first` reports a torn tail at `last`
    /// (where the new entries end), no corruption, and the tail of `written`: the
    /// mutations appended since `first`, apart from the ones that went to it.
    fn assert_replay_stops_at(dir: &Path, first: u64, last: u64, written: &[Mutation]) {
        let (replayed, report) = replay_after(dir, first);
        let tail = report.torn_tail.clone().expect("torn tail");
        assert_eq!(tail.offset, last);
        assert!(report.corrupt.is_empty(), "{report:?}");
        assert_eq!(replayed[..], written[written.len() - replayed.len()..]);
        assert!(replayed.len() > 10);
    }

    /// A mapped log reuses spare files through the mapping: copies into their cached
    /// pages (no fallback to `pwritev`), and a crash leaves a log whose replay stops where
    /// the new entries end, before the old content behind them.
    #[test]
    fn reused_files_are_written_through_the_mapping() {
        let dir = tempfile::tempdir().expect("tmp");
        let (mut log, mut n) = log_with_old_spares(dir.path(), true);
        let first = log.active.id;
        let mut written = Vec::new();
        while log.reused_segments < 2 {
            let m = big_mutation(n, 50 + usize::from(n) * 7);
            log.append(&m).expect("append");
            written.push(m);
            n = n.wrapping_add(1);
            if n.is_multiple_of(3) {
                log.write_out().expect("write out");
            }
        }
        log.write_out().expect("write out");
        assert!(log.active.reused && log.active.map.is_some());
        assert_eq!(log.map_fallbacks(), 0);
        let last = log.active.written;
        // A crash (no end marker): replay stops at the old content.
        std::mem::forget(log);
        assert_replay_stops_at(dir.path(), first, last, &written);
    }

    /// The ordered copy copies every byte, at any alignment and length, and nothing else.
    #[test]
    fn ordered_copy_copies_exactly_the_source() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        for at in 0..16 {
            for len in (0..100).chain([4093, 5000 - 16]) {
                let mut dst = vec![0xAAu8; 5000 + 32];
                // SAFETY: `at + len <= dst.len()`; `dst` and `src` are distinct vectors.
                #[allow(unsafe_code)]
                unsafe {
                    copy_in_order(dst.as_mut_ptr().add(at), &src[..len])
                };
                assert!(dst[..at].iter().all(|&b| b == 0xAA), "at {at} len {len}");
                assert_eq!(&dst[at..at + len], &src[..len], "at {at} len {len}");
                assert!(
                    dst[at + len..].iter().all(|&b| b == 0xAA),
                    "at {at} len {len}"
                );
            }
        }
    }

    /// The sync thread faults a mapped segment's pages in ahead of the copies: the first
    /// megabyte of a new segment, then two to three megabytes past what is written.
    #[test]
    fn mapped_segments_are_populated_ahead_of_the_copies() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut log = Commitlog::open(
            dir.path(),
            SyncMode::Periodic { period_ms: 10_000 },
            8 << 20,
            0,
            0,
            true,
        )
        .expect("open");
        let populated = |log: &Commitlog| {
            let map = log.active.map.as_ref().expect("mapped");
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let p = map.populated.load(Ordering::Acquire);
                if p >= map.requested || Instant::now() > deadline {
                    return (p, map.requested);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        assert_eq!(populated(&log), (POPULATE_BYTES, POPULATE_BYTES));
        let mut n = 0u8;
        while log.active.written < 3 << 20 {
            log.append(&big_mutation(n, 10_000)).expect("append");
            log.write_out().expect("write out");
            n = n.wrapping_add(1);
        }
        let (p, requested) = populated(&log);
        assert_eq!(p, requested);
        let written = log.active.written as usize;
        assert!(
            p >= written + 2 * POPULATE_BYTES && p < written + 3 * POPULATE_BYTES,
            "{p} {written}"
        );
        log.shutdown().expect("shutdown");
    }

    #[test]
    fn the_next_segment_is_prepared_ahead_of_its_rotation() {
        let dir = tempfile::tempdir().expect("tmp");
        let names = |dir: &Path| -> Vec<String> {
            let mut v: Vec<String> = fs::read_dir(dir)
                .expect("dir")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let wait_for = |what: &str, f: &dyn Fn() -> bool| {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !f() {
                assert!(Instant::now() < deadline, "timed out: {what}");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        // Mapped 1 MiB segments after segment `after`.
        let open = |after: u64| {
            Commitlog::open(
                dir.path(),
                SyncMode::Periodic { period_ms: 10_000 },
                1 << 20,
                after,
                0,
                true,
            )
            .expect("open")
        };
        // The prepared segment in the slot (its file is named before it is ready).
        let prepared = |log: &Commitlog| {
            log.prepared
                .lock()
                .ok()
                .and_then(|p| p.as_ref().map(|s| s.id))
        };
        let mut log = open(0);
        let d = dir.path();
        wait_for("segment 2 prepared", &|| prepared(&log) == Some(2));
        assert!(names(d).contains(&"Next-2.log".to_string()));
        let mut written = Vec::new();
        let mut n = 0u8;
        while log.active.id < 3 {
            let m = big_mutation(n, 10_000);
            log.append(&m).expect("append");
            log.write_out().expect("write out");
            written.push(m);
            n = n.wrapping_add(1);
            if log.active.id == 2 && prepared(&log) != Some(3) {
                // The second rotation finds segment 3 prepared too.
                wait_for("segment 3 prepared", &|| prepared(&log) == Some(3));
            }
        }
        assert_eq!(log.prepared_rotations, 2);
        // Its start was faulted in before it became active.
        let map = log.active.map.as_ref().expect("mapped");
        assert_eq!(
            map.populated.load(Ordering::Acquire),
            PREPARE_POPULATE_BYTES.min(map.len)
        );
        wait_for("Next-4.log", &|| {
            names(d).contains(&"Next-4.log".to_string())
        });
        assert_eq!(
            names(d),
            [
                "CommitLog-2-1.log",
                "CommitLog-2-2.log",
                "CommitLog-2-3.log",
                "Next-4.log"
            ]
        );
        log.shutdown().expect("shutdown");
        drop(log);
        assert!(!names(d).iter().any(|n| n.starts_with(NEXT_PREFIX)));
        // A prepared file a crash left behind is no segment: replay skips it, and the
        // next open deletes it.
        fs::write(d.join("Next-4.log"), [0xAB; 4096]).expect("leftover");
        let (replayed, report) = replay_after(d, 0);
        assert!(
            report.corrupt.is_empty() && report.torn_tail.is_none(),
            "{report:?}"
        );
        assert_eq!(replayed, written);
        let log = open(3);
        assert!(!d.join("Next-4.log").exists());
        drop(log);
    }
}
