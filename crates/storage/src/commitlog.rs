//! Per-shard commitlog: segment files of CRC32C-checksummed, length-prefixed mutations,
//! a sync thread implementing the periodic / batch / group modes, and replay.
//! Format: docs/dev/commitlog-format.md.
//
// PERF-CRITICAL: `append` runs once per write; it encodes into a reused buffer and makes
// no syscall. The buffer is handed to the OS once per group of writes (`write_out`).

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use amphora_types::codec::{decode_mutation, encode_mutation};
use amphora_types::data::Mutation;
use bytes::Bytes;
use tokio::sync::watch;

use crate::config::{CommitFailurePolicy, SyncMode};
use crate::error::{Result, StorageError};

pub const SEGMENT_MAGIC: &[u8; 8] = b"AMPHCLOG";
pub const SEGMENT_VERSION: u32 = 1;
pub const SEGMENT_HEADER_BYTES: u64 = 24;
pub const ENTRY_HEADER_BYTES: usize = 8;

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
    let mut h = [0u8; SEGMENT_HEADER_BYTES as usize];
    h[0..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&id.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
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
    /// The active segment changed (for periodic syncs).
    Active {
        file: Arc<File>,
    },
    Stop,
}

struct Segment {
    id: u64,
    file: Arc<File>,
    path: PathBuf,
    /// Bytes handed to the OS.
    written: u64,
}

/// The writer side, owned by the shard thread.
pub struct Commitlog {
    dir: PathBuf,
    mode: SyncMode,
    segment_size: u64,
    active: Segment,
    /// Encoded entries not yet handed to the OS.
    buf: Vec<u8>,
    /// Closed segments still needed (not all their mutations flushed): id → size.
    closed: Vec<(u64, PathBuf, u64)>,
    sync_tx: mpsc::Sender<SyncMsg>,
    durable_rx: watch::Receiver<Durable>,
    sync_thread: Option<std::thread::JoinHandle<()>>,
    /// Highest position for which a sync was requested.
    sync_requested: LogPosition,
    pub bytes_written: u64,
    /// The last `write_out` failed (e.g. ENOSPC): `append` retries it first and refuses new
    /// entries while it keeps failing, so a full disk cannot grow the buffer (or the
    /// memtables) without limit.
    write_failed: bool,
}

impl Commitlog {
    /// Opens a new active segment after `after_id` (existing segments are replayed first).
    pub fn open(
        dir: &Path,
        mode: SyncMode,
        segment_size: u64,
        after_id: u64,
        shard: u32,
    ) -> Result<Self> {
        fs::create_dir_all(dir).map_err(|e| StorageError::io(dir, e))?;
        let active = create_segment(dir, after_id + 1)?;
        let (sync_tx, sync_rx) = mpsc::channel();
        let (durable_tx, durable_rx) = watch::channel(Durable {
            pos: log_position(active.id, SEGMENT_HEADER_BYTES),
            error: None,
        });
        let first = active.file.clone();
        let sync_thread = std::thread::Builder::new()
            .name(format!("commitlog-sync-{shard}"))
            .spawn(move || sync_loop(mode, sync_rx, durable_tx, first))
            .map_err(|e| StorageError::io(dir, e))?;
        Ok(Commitlog {
            dir: dir.to_path_buf(),
            mode,
            segment_size: segment_size.max(SEGMENT_HEADER_BYTES + 1024),
            active,
            buf: Vec::with_capacity(1 << 20),
            closed: Vec::new(),
            sync_tx,
            durable_rx,
            sync_thread: Some(sync_thread),
            sync_requested: 0,
            bytes_written: 0,
            write_failed: false,
        })
    }

    pub fn mode(&self) -> SyncMode {
        self.mode
    }

    /// Registers replayed segments as still needed until their data is flushed.
    pub fn adopt_replayed(&mut self, segs: Vec<(u64, PathBuf, u64)>) {
        self.closed.extend(segs);
        self.closed.sort_by_key(|s| s.0);
    }

    /// Position the next entry will get.
    pub fn current_position(&self) -> LogPosition {
        log_position(self.active.id, self.active.written + self.buf.len() as u64)
    }

    pub fn active_segment_id(&self) -> u64 {
        self.active.id
    }

    /// Bytes of all live segments.
    pub fn total_bytes(&self) -> u64 {
        self.closed.iter().map(|s| s.2).sum::<u64>() + self.active.written + self.buf.len() as u64
    }

    pub fn oldest_segment_id(&self) -> u64 {
        self.closed.first().map_or(self.active.id, |s| s.0)
    }

    pub fn segment_count(&self) -> usize {
        self.closed.len() + 1
    }

    /// Appends a mutation; returns the positions of its start and end.
    pub fn append(&mut self, m: &Mutation) -> Result<(LogPosition, LogPosition)> {
        if self.write_failed {
            self.write_out()?;
        }
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0u8; ENTRY_HEADER_BYTES]);
        encode_mutation(m, &mut self.buf);
        let len = self.buf.len() - start - ENTRY_HEADER_BYTES;
        let max = (self.segment_size / 2) as usize;
        if len > max {
            self.buf.truncate(start);
            return Err(StorageError::MutationTooLarge {
                size_bytes: len,
                max_bytes: max,
            });
        }
        if self.active.written + self.buf.len() as u64 > self.segment_size {
            // Move this entry to a fresh segment.
            let entry = self.buf[start..].to_vec();
            self.buf.truncate(start);
            self.rotate()?;
            self.buf.extend_from_slice(&entry);
            return self.finish_entry(0, len);
        }
        self.finish_entry(start, len)
    }

    fn finish_entry(&mut self, start: usize, len: usize) -> Result<(LogPosition, LogPosition)> {
        let len32 = len as u32;
        self.buf[start..start + 4].copy_from_slice(&len32.to_le_bytes());
        let mut h = crc32c::crc32c(&len32.to_le_bytes());
        h = crc32c::crc32c_append(h, &self.buf[start + ENTRY_HEADER_BYTES..]);
        self.buf[start + 4..start + 8].copy_from_slice(&h.to_le_bytes());
        let base = self.active.written;
        Ok((
            log_position(self.active.id, base + start as u64),
            log_position(self.active.id, base + self.buf.len() as u64),
        ))
    }

    fn rotate(&mut self) -> Result<()> {
        self.write_out()?;
        let next = create_segment(&self.dir, self.active.id + 1)?;
        let old = std::mem::replace(&mut self.active, next);
        let end = log_position(old.id, old.written);
        let _ = self.sync_tx.send(SyncMsg::Sync {
            file: old.file.clone(),
            up_to: end,
        });
        let _ = self.sync_tx.send(SyncMsg::Active {
            file: self.active.file.clone(),
        });
        self.closed.push((old.id, old.path, old.written));
        Ok(())
    }

    /// Hands buffered entries to the OS (one pwrite). On error the buffer is kept and
    /// retried by the next call.
    pub fn write_out(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if let Err(e) = self
            .active
            .file
            .write_all_at(&self.buf, self.active.written)
        {
            self.write_failed = true;
            return Err(StorageError::io(&self.active.path, e));
        }
        self.write_failed = false;
        self.active.written += self.buf.len() as u64;
        self.bytes_written += self.buf.len() as u64;
        self.buf.clear();
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

    /// Deletes closed segments older than `keep_from` (all their data is flushed).
    pub fn discard_before(&mut self, keep_from: u64) {
        let mut kept = Vec::with_capacity(self.closed.len());
        for (id, path, size) in self.closed.drain(..) {
            if id < keep_from {
                if let Err(e) = fs::remove_file(&path) {
                    tracing::warn!("cannot delete commitlog segment {}: {e}", path.display());
                }
            } else {
                kept.push((id, path, size));
            }
        }
        self.closed = kept;
    }

    /// Writes out, syncs, and stops the sync thread.
    pub fn shutdown(&mut self) -> Result<()> {
        self.write_out()?;
        self.active
            .file
            .sync_data()
            .map_err(|e| StorageError::io(&self.active.path, e))?;
        let _ = self.sync_tx.send(SyncMsg::Stop);
        if let Some(t) = self.sync_thread.take() {
            let _ = t.join();
        }
        Ok(())
    }
}

impl Drop for Commitlog {
    fn drop(&mut self) {
        let _ = self.write_out();
        let _ = self.sync_tx.send(SyncMsg::Stop);
        if let Some(t) = self.sync_thread.take() {
            let _ = t.join();
        }
    }
}

fn create_segment(dir: &Path, id: u64) -> Result<Segment> {
    let path = dir.join(segment_file_name(id));
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| StorageError::io(&path, e))?;
    file.write_all_at(&segment_header(id), 0)
        .map_err(|e| StorageError::io(&path, e))?;
    // The new file's directory entry must survive a crash for replay to find it.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(Segment {
        id,
        file: Arc::new(file),
        path,
        written: SEGMENT_HEADER_BYTES,
    })
}

fn sync_loop(
    mode: SyncMode,
    rx: mpsc::Receiver<SyncMsg>,
    durable: watch::Sender<Durable>,
    first: Arc<File>,
) {
    let mut active = first;
    let mut best: LogPosition = 0;
    loop {
        let msg = match mode {
            SyncMode::Periodic { period_ms } => {
                match rx.recv_timeout(Duration::from_millis(period_ms.max(1))) {
                    Ok(m) => Some(m),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        let _ = active.sync_data();
                        continue;
                    }
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
            SyncMsg::Active { file } => *active = file,
            SyncMsg::Stop => stop = true,
        };
        if let Some(m) = msg {
            handle(m, &mut files, &mut active, &mut best);
        }
        if let SyncMode::Batch { window_ms } | SyncMode::Group { window_ms } = mode
            && window_ms > 0
            && !files.is_empty()
        {
            std::thread::sleep(Duration::from_millis(window_ms));
        }
        while let Ok(m) = rx.try_recv() {
            handle(m, &mut files, &mut active, &mut best);
        }
        let mut error = None;
        for f in &files {
            if let Err(e) = f.sync_data() {
                error = Some(format!("fdatasync failed: {e}"));
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
    Pending(std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>>>>),
}

impl WriteAck {
    pub fn ready(r: Result<()>) -> Self {
        WriteAck {
            inner: AckInner::Ready(Some(r)),
        }
    }

    pub(crate) fn new(log: Rc<RefCell<Commitlog>>, end: LogPosition) -> Self {
        let fut = async move {
            let mut rx = {
                let mut l = log.borrow_mut();
                if l.written_position() < end && segment_of(end) >= l.active.id {
                    l.write_out()?;
                }
                match l.mode {
                    SyncMode::Periodic { .. } => return Ok(()),
                    _ => {
                        l.request_sync(end);
                        l.durable_receiver()
                    }
                }
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

impl std::future::Future for WriteAck {
    type Output = Result<()>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>> {
        match &mut self.inner {
            AckInner::Ready(r) => std::task::Poll::Ready(r.take().unwrap_or(Ok(()))),
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
        let bad = |offset: u64, reason: String, report: &mut ReplayReport| -> Result<()> {
            let truncated = data.len() as u64 - offset;
            if last {
                if !truncate_torn {
                    report.torn_tail = Some(TornTail {
                        path: path.clone(),
                        offset,
                        bytes_truncated: 0,
                    });
                    return Ok(());
                }
                tracing::warn!(
                    "commitlog {}: torn tail at offset {offset} ({reason}); truncating {truncated} bytes",
                    path.display()
                );
                if let Ok(f) = OpenOptions::new().write(true).open(&path) {
                    let _ = f.set_len(offset);
                    let _ = f.sync_all();
                }
                report.torn_tail = Some(TornTail {
                    path: path.clone(),
                    offset,
                    bytes_truncated: truncated,
                });
                Ok(())
            } else {
                match policy {
                    CommitFailurePolicy::Stop => Err(StorageError::CommitlogCorrupt {
                        path: path.clone(),
                        offset,
                        reason,
                    }),
                    CommitFailurePolicy::Ignore => {
                        tracing::error!(
                            "commitlog {} is corrupt at offset {offset}: {reason}; skipping {truncated} bytes",
                            path.display()
                        );
                        report.corrupt.push(CorruptEntry {
                            path: path.clone(),
                            offset,
                            reason,
                            bytes_skipped: truncated,
                        });
                        Ok(())
                    }
                }
            }
        };
        if data.len() < SEGMENT_HEADER_BYTES as usize
            && data[..] == segment_header(id)[..data.len()]
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
        if data.len() < SEGMENT_HEADER_BYTES as usize
            || data[..][..SEGMENT_HEADER_BYTES as usize] != segment_header(id)
        {
            bad(0, "bad segment header".into(), report)?;
            out.push((id, path.clone(), data.len() as u64));
            continue;
        }
        let mut pos = SEGMENT_HEADER_BYTES as usize;
        while pos < data.len() {
            let Some(h) = data.get(pos..pos + ENTRY_HEADER_BYTES) else {
                bad(pos as u64, "truncated entry header".into(), report)?;
                break;
            };
            let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
            let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
            if len == 0 && crc == 0 {
                // Zero fill: nothing was written here.
                bad(pos as u64, "zero-filled entry".into(), report)?;
                break;
            }
            let end = pos + ENTRY_HEADER_BYTES + len as usize;
            let Some(payload) = data.get(pos + ENTRY_HEADER_BYTES..end) else {
                bad(
                    pos as u64,
                    format!("entry of {len} bytes runs past the end of the file"),
                    report,
                )?;
                break;
            };
            let actual = crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), payload);
            if actual != crc {
                bad(
                    pos as u64,
                    format!("checksum mismatch (stored {crc:#x}, computed {actual:#x})"),
                    report,
                )?;
                break;
            }
            match decode_mutation(data.slice(pos + ENTRY_HEADER_BYTES..end)) {
                Ok(m) => apply(log_position(id, pos as u64), m),
                Err(e) => {
                    bad(pos as u64, format!("undecodable mutation: {e}"), report)?;
                    break;
                }
            }
            pos = end;
        }
        out.push((id, path, data.len() as u64));
    }
    Ok(out)
}
