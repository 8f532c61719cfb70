//! Compaction: strategies as pure choosers (SSTable set in, next job out) and one
//! executor that merges SSTables into new ones, purging what gc_grace_seconds allows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering as AtomicOrdering};

use amphora_types::codec::{self, SimpleRowSummary};
use amphora_types::data::{
    ColumnData, LocalTime, PartitionKey, PartitionUpdate, Row, apply_own_deletions,
    merge_partition_updates_owned,
};
use amphora_types::schema::TableSchema;

use crate::error::{Result, StorageError};
use crate::sstable::{
    IndexEntry, OverlapFilter, PartitionStream, RawSource, SSTableReader, SSTableWriter, Scanner,
    StreamedStats, partition_body,
};

/// What a chooser sees of one SSTable.
#[derive(Debug, Clone, PartialEq)]
pub struct SSTableInfo {
    pub generation: u64,
    pub size_bytes: u64,
    pub min_timestamp: i64,
    pub max_timestamp: i64,
    pub max_local_deletion_time: i32,
    pub min_token: i64,
    pub max_token: i64,
    pub level: u32,
    /// Holds a live cell or row marker without TTL: such an SSTable never fully expires
    /// (Cassandra counts those as max local deletion time "never").
    pub has_non_expiring_data: bool,
}

impl SSTableInfo {
    pub fn of(s: &SSTableReader) -> Self {
        SSTableInfo {
            generation: s.generation,
            size_bytes: s.data_size(),
            min_timestamp: s.stats.min_timestamp,
            max_timestamp: s.stats.max_timestamp,
            max_local_deletion_time: s.stats.max_local_deletion_time,
            min_token: s.stats.min_token,
            max_token: s.stats.max_token,
            level: s.stats.level,
            has_non_expiring_data: s.stats.has_non_expiring_data,
        }
    }

    /// Every cell, marker and tombstone in it expired or was deleted before `gc_before`.
    fn expired_before(&self, gc_before: i32) -> bool {
        !self.has_non_expiring_data && self.max_local_deletion_time < gc_before
    }
}

/// What a chooser needs to know beyond the SSTables it may pick from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChoiceContext {
    /// `now - gc_grace_seconds`: tombstones and expiries before it may be purged.
    pub gc_before: i32,
    /// Lowest timestamp of the table's data outside the offered SSTables (memtables,
    /// SSTables being compacted); i64::MAX if none.
    pub min_timestamp_elsewhere: i64,
}

impl ChoiceContext {
    pub fn new(gc_before: i32) -> Self {
        ChoiceContext {
            gc_before,
            min_timestamp_elsewhere: i64::MAX,
        }
    }
}

/// SSTables that can be deleted without rewriting them (Cassandra's
/// `getFullyExpiredSSTables`): everything in them expired or was deleted before
/// `gc_before`, and their newest timestamp is older than every timestamp of the live
/// data they overlap, so none of their tombstones still shadows anything.
pub fn fully_expired(sstables: &[SSTableInfo], ctx: &ChoiceContext) -> Vec<u64> {
    let (expired, live): (Vec<&SSTableInfo>, Vec<&SSTableInfo>) = sstables
        .iter()
        .partition(|s| s.expired_before(ctx.gc_before));
    expired
        .into_iter()
        .filter(|e| {
            let min_live = live
                .iter()
                .filter(|l| overlaps(e, l))
                .map(|l| l.min_timestamp)
                .fold(ctx.min_timestamp_elsewhere, i64::min);
            e.max_timestamp < min_live
        })
        .map(|e| e.generation)
        .collect()
}

/// The next compaction to run.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionJob {
    pub inputs: Vec<u64>,
    /// Level of the outputs (LCS; 0 otherwise).
    pub output_level: u32,
    /// Split outputs at this size (LCS / incremental); None = one output.
    pub max_output_bytes: Option<u64>,
    /// SSTables that can be deleted without rewriting (TWCS fully expired).
    pub drop_only: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StcsOptions {
    pub min_threshold: usize,
    pub max_threshold: usize,
    pub bucket_low: f64,
    pub bucket_high: f64,
    pub min_sstable_size_bytes: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TwcsOptions {
    pub window_seconds: i64,
    pub stcs: StcsOptions,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LcsOptions {
    pub sstable_size_bytes: u64,
    pub fanout: u64,
}

/// A table's compaction strategy, from its `compaction` option.
#[derive(Debug, Clone, PartialEq)]
pub enum Strategy {
    SizeTiered(StcsOptions),
    TimeWindow(TwcsOptions),
    Leveled(LcsOptions),
}

fn opt<T: std::str::FromStr>(m: &BTreeMap<String, String>, k: &str, d: T) -> T {
    m.get(k).and_then(|v| v.trim().parse().ok()).unwrap_or(d)
}

impl Strategy {
    pub fn from_options(m: &BTreeMap<String, String>) -> Strategy {
        let class = m
            .get("class")
            .map(|s| s.as_str())
            .unwrap_or("SizeTieredCompactionStrategy");
        let stcs = StcsOptions {
            min_threshold: opt(m, "min_threshold", 4usize).max(2),
            max_threshold: opt(m, "max_threshold", 32usize).max(2),
            bucket_low: opt(m, "bucket_low", 0.5),
            bucket_high: opt(m, "bucket_high", 1.5),
            min_sstable_size_bytes: opt(m, "min_sstable_size", 50u64 << 20),
        };
        if class.ends_with("TimeWindowCompactionStrategy") {
            let unit = m
                .get("compaction_window_unit")
                .map(|s| s.to_ascii_uppercase())
                .unwrap_or("DAYS".into());
            let size: i64 = opt(m, "compaction_window_size", 1i64).max(1);
            let unit_s = match unit.as_str() {
                "MINUTES" => 60,
                "HOURS" => 3600,
                _ => 86400,
            };
            Strategy::TimeWindow(TwcsOptions {
                window_seconds: unit_s * size,
                stcs,
            })
        } else if class.ends_with("LeveledCompactionStrategy") {
            Strategy::Leveled(LcsOptions {
                sstable_size_bytes: opt(m, "sstable_size_in_mb", 160u64) << 20,
                fanout: opt(m, "fanout_size", 10u64).max(2),
            })
        } else {
            Strategy::SizeTiered(stcs)
        }
    }

    /// The next job for these (non-compacting) SSTables, if any.
    pub fn next_job(&self, sstables: &[SSTableInfo], ctx: &ChoiceContext) -> Option<CompactionJob> {
        match self {
            Strategy::SizeTiered(o) => stcs_job(o, sstables),
            Strategy::TimeWindow(o) => twcs_job(o, sstables, ctx),
            Strategy::Leveled(o) => lcs_job(o, sstables),
        }
    }
}

/// Groups SSTables of similar size (Cassandra's STCS buckets).
pub fn stcs_buckets(o: &StcsOptions, sstables: &[SSTableInfo]) -> Vec<Vec<SSTableInfo>> {
    let mut sorted: Vec<SSTableInfo> = sstables.to_vec();
    sorted.sort_by_key(|s| s.size_bytes);
    let mut buckets: Vec<(f64, Vec<SSTableInfo>)> = Vec::new();
    for s in sorted {
        let size = s.size_bytes as f64;
        let fit = buckets.iter_mut().find(|(avg, _)| {
            (size > avg * o.bucket_low && size < avg * o.bucket_high)
                || (s.size_bytes < o.min_sstable_size_bytes
                    && *avg < o.min_sstable_size_bytes as f64)
        });
        match fit {
            Some((avg, b)) => {
                let n = b.len() as f64;
                *avg = (*avg * n + size) / (n + 1.0);
                b.push(s);
            }
            None => buckets.push((size, vec![s])),
        }
    }
    buckets.into_iter().map(|(_, b)| b).collect()
}

fn stcs_job(o: &StcsOptions, sstables: &[SSTableInfo]) -> Option<CompactionJob> {
    let mut best: Option<Vec<SSTableInfo>> = None;
    for mut b in stcs_buckets(o, sstables) {
        if b.len() < o.min_threshold {
            continue;
        }
        b.truncate(o.max_threshold);
        // Prefer the bucket of smallest SSTables: cheapest to compact, most files removed.
        let avg =
            |x: &Vec<SSTableInfo>| x.iter().map(|s| s.size_bytes).sum::<u64>() / x.len() as u64;
        if best.as_ref().is_none_or(|cur| avg(&b) < avg(cur)) {
            best = Some(b);
        }
    }
    best.map(|b| CompactionJob {
        inputs: b.iter().map(|s| s.generation).collect(),
        output_level: 0,
        max_output_bytes: None,
        drop_only: false,
    })
}

fn twcs_job(
    o: &TwcsOptions,
    sstables: &[SSTableInfo],
    ctx: &ChoiceContext,
) -> Option<CompactionJob> {
    // Fully expired SSTables go first, and whole: nothing in them needs rewriting.
    let expired = fully_expired(sstables, ctx);
    if !expired.is_empty() {
        return Some(CompactionJob {
            inputs: expired,
            output_level: 0,
            max_output_bytes: None,
            drop_only: true,
        });
    }
    let mut windows: BTreeMap<i64, Vec<SSTableInfo>> = BTreeMap::new();
    for s in sstables {
        let secs = s.max_timestamp.div_euclid(1_000_000);
        windows
            .entry(secs - secs.rem_euclid(o.window_seconds))
            .or_default()
            .push(s.clone());
    }
    let newest = windows.keys().next_back().copied();
    for (w, ss) in windows.iter().rev() {
        if Some(*w) == newest {
            if let Some(j) = stcs_job(&o.stcs, ss) {
                return Some(j);
            }
        } else if ss.len() >= 2 {
            let mut ss = ss.clone();
            ss.truncate(o.stcs.max_threshold);
            return Some(CompactionJob {
                inputs: ss.iter().map(|s| s.generation).collect(),
                output_level: 0,
                max_output_bytes: None,
                drop_only: false,
            });
        }
    }
    None
}

fn overlaps(a: &SSTableInfo, b: &SSTableInfo) -> bool {
    a.min_token <= b.max_token && b.min_token <= a.max_token
}

fn lcs_job(o: &LcsOptions, sstables: &[SSTableInfo]) -> Option<CompactionJob> {
    let mut levels: BTreeMap<u32, Vec<&SSTableInfo>> = BTreeMap::new();
    for s in sstables {
        levels.entry(s.level).or_default().push(s);
    }
    let l0 = levels.get(&0).cloned().unwrap_or_default();
    if l0.len() >= 4 {
        let mut inputs: Vec<u64> = l0.iter().take(32).map(|s| s.generation).collect();
        if let Some(l1) = levels.get(&1) {
            inputs.extend(
                l1.iter()
                    .filter(|s| l0.iter().any(|z| overlaps(z, s)))
                    .map(|s| s.generation),
            );
        }
        return Some(CompactionJob {
            inputs,
            output_level: 1,
            max_output_bytes: Some(o.sstable_size_bytes),
            drop_only: false,
        });
    }
    for (lvl, ss) in &levels {
        if *lvl == 0 {
            continue;
        }
        let limit = o
            .sstable_size_bytes
            .saturating_mul(o.fanout.saturating_pow(*lvl));
        let total: u64 = ss.iter().map(|s| s.size_bytes).sum();
        if total > limit {
            let Some(pick) = ss.iter().min_by_key(|s| (s.min_token, s.generation)) else {
                continue;
            };
            let mut inputs = vec![pick.generation];
            if let Some(next) = levels.get(&(lvl + 1)) {
                inputs.extend(
                    next.iter()
                        .filter(|s| overlaps(pick, s))
                        .map(|s| s.generation),
                );
            }
            return Some(CompactionJob {
                inputs,
                output_level: lvl + 1,
                max_output_bytes: Some(o.sstable_size_bytes),
                drop_only: false,
            });
        }
    }
    None
}

/// Compaction backlog of one table (ScyllaDB's measure): the bytes compaction would still
/// have to write to bring the table to its steady shape. Under STCS each SSTable of size
/// `s` in a table of `total` bytes is rewritten about `log_T(total / s)` more times (`T` =
/// `min_threshold`), so the backlog is `sum s * log_T(total / s)`; TWCS counts each window
/// as its own STCS table, and LCS counts the bytes over each level's target once per level
/// still below them. Pure: SSTable statistics in, bytes out.
pub fn backlog_bytes(strategy: &Strategy, sstables: &[SSTableInfo]) -> f64 {
    match strategy {
        Strategy::SizeTiered(o) => stcs_backlog(o.min_threshold, sstables.iter()),
        Strategy::TimeWindow(o) => {
            let mut windows: BTreeMap<i64, Vec<&SSTableInfo>> = BTreeMap::new();
            for s in sstables {
                let secs = s.max_timestamp.div_euclid(1_000_000);
                windows
                    .entry(secs - secs.rem_euclid(o.window_seconds))
                    .or_default()
                    .push(s);
            }
            windows
                .values()
                .map(|w| stcs_backlog(o.stcs.min_threshold, w.iter().copied()))
                .sum()
        }
        Strategy::Leveled(o) => {
            let mut levels: BTreeMap<u32, u64> = BTreeMap::new();
            for s in sstables {
                *levels.entry(s.level).or_default() += s.size_bytes;
            }
            let deepest = levels.keys().next_back().copied().unwrap_or(0).max(1);
            levels
                .iter()
                .map(|(lvl, bytes)| {
                    let target = if *lvl == 0 {
                        // L0 holds flushes; everything there moves down.
                        0
                    } else {
                        o.sstable_size_bytes
                            .saturating_mul(o.fanout.saturating_pow(*lvl))
                    };
                    let over = bytes.saturating_sub(target) as f64;
                    over * f64::from(deepest.saturating_sub(*lvl).max(1))
                })
                .sum()
        }
    }
}

fn stcs_backlog<'a>(fanout: usize, sstables: impl Iterator<Item = &'a SSTableInfo> + Clone) -> f64 {
    let total: u64 = sstables.clone().map(|s| s.size_bytes).sum();
    if total == 0 {
        return 0.0;
    }
    let ln_t = (fanout.max(2) as f64).ln();
    sstables
        .filter(|s| s.size_bytes > 0)
        .map(|s| {
            let size = s.size_bytes as f64;
            size * ((total as f64 / size).ln() / ln_t)
        })
        .sum()
}

/// Maps a shard's compaction backlog to the CPU share of its compaction thread (ScyllaDB's
/// backlog controller: compaction has no throughput knob; it speeds up as work piles up
/// and idles when there is none, so foreground requests keep most of the core).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BacklogController {
    /// Share with (almost) no backlog: compaction never stops completely.
    pub min_share: f64,
    /// Share at and above `full_backlog`.
    pub max_share: f64,
    /// Normalized backlog (backlog bytes / memtable budget) at which the share is maximal.
    pub full_backlog: f64,
}

impl Default for BacklogController {
    fn default() -> Self {
        BacklogController {
            min_share: 0.1,
            max_share: 1.0,
            full_backlog: 4.0,
        }
    }
}

impl BacklogController {
    /// The share (0..=1) for `backlog_bytes`, normalized by the shard's memtable budget:
    /// a backlog of one memtable budget is what a flush adds at most.
    pub fn share(&self, backlog_bytes: f64, memtable_budget_bytes: u64) -> f64 {
        let norm = backlog_bytes / memtable_budget_bytes.max(1) as f64;
        if !norm.is_finite() || norm <= 0.0 {
            return self.min_share;
        }
        let t = (norm / self.full_backlog).min(1.0);
        self.min_share + (self.max_share - self.min_share) * t
    }
}

/// How much of its thread a compaction may use, in per-mille; shared between the shard
/// (which sets it from the backlog and counts foreground requests) and the compaction
/// thread (which reads both). Like a CPU share, it only limits compaction while there is
/// foreground work to yield to: a slice with no foreground request in it is not paused.
#[derive(Debug, Clone)]
pub struct CompactionShare {
    permille: Arc<std::sync::atomic::AtomicU32>,
    foreground: Arc<AtomicU64>,
}

impl Default for CompactionShare {
    fn default() -> Self {
        CompactionShare {
            permille: Arc::new(std::sync::atomic::AtomicU32::new(1000)),
            foreground: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl CompactionShare {
    pub fn set(&self, share: f64) {
        let pm = (share.clamp(0.001, 1.0) * 1000.0).round() as u32;
        self.permille.store(pm, AtomicOrdering::Relaxed);
    }
    pub fn get(&self) -> f64 {
        f64::from(self.permille.load(AtomicOrdering::Relaxed)) / 1000.0
    }
    /// Counts a foreground request (a read or a write on the shard).
    #[inline]
    pub fn note_foreground(&self) {
        self.foreground.fetch_add(1, AtomicOrdering::Relaxed);
    }
    pub(crate) fn foreground(&self) -> u64 {
        self.foreground.load(AtomicOrdering::Relaxed)
    }
    /// Whether foreground requests arrived since `seen` was last set; sets it.
    pub(crate) fn busy_since(&self, seen: &mut u64) -> bool {
        let fg = self.foreground();
        let busy = fg != *seen;
        *seen = fg;
        busy
    }

    /// Runs `f` with this share throttling the compactions it runs on this thread.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        THROTTLE.with(|t| {
            *t.borrow_mut() = Some(Throttle {
                share: self.clone(),
                since: thread_cpu(),
                since_wall: std::time::Instant::now(),
                foreground_seen: self.foreground(),
                calls: 0,
            })
        });
        let out = f();
        THROTTLE.with(|t| *t.borrow_mut() = None);
        out
    }
}

/// The pause after `worked` that keeps a thread at `share` of its time.
pub fn throttle_pause(worked: std::time::Duration, share: f64) -> std::time::Duration {
    if share >= 1.0 || share <= 0.0 {
        return std::time::Duration::ZERO;
    }
    // Bounded so that a raised share takes effect quickly.
    worked
        .mul_f64((1.0 - share) / share)
        .min(std::time::Duration::from_millis(100))
}

struct Throttle {
    share: CompactionShare,
    /// The thread's CPU time when its current slice of work started.
    since: std::time::Duration,
    /// The wall time then: CPU time never runs ahead of it, so while less than a slice of
    /// wall time has passed the (non-vDSO) CPU clock need not be read.
    since_wall: std::time::Instant,
    foreground_seen: u64,
    /// Work since the wall clock was last read, in [`throttle_point`]'s weights: it is
    /// read once the weights reach [`THROTTLE_CHECK_EVERY`], so after every merged
    /// partition but only every 64 raw copies (a fraction of a microsecond each; reading
    /// the clock for each was 4.5% of a profile of compactions copying raw).
    calls: u32,
}

/// See [`Throttle::calls`].
const THROTTLE_CHECK_EVERY: u32 = 64;

/// CPU time of the calling thread. The throttle counts work in CPU time, not wall time:
/// the compaction thread runs at a lower priority on the shard's core
/// ([`crate::StorageConfig::background_nice`]), so a slice of wall time while the shard is
/// busy holds only a fraction of a slice of work.
///
/// Read through glibc, not rustix, whose own vDSO parse kills the process under valgrind
/// (see `amphora_trace::coarse_now`).
fn thread_cpu() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the duration of the call. On failure
    // (never, for this clock) `t` stays zero and the throttle sees no work done.
    #[allow(unsafe_code)]
    let _ = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    std::time::Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

thread_local! {
    // The compaction thread's throttle (time on background threads is real time: the
    // throttle only shapes CPU use, it decides nothing).
    static THROTTLE: std::cell::RefCell<Option<Throttle>> = const { std::cell::RefCell::new(None) };
    // The control of the strategy compaction this thread runs ([`JobControl::run`]).
    static CONTROL: std::cell::RefCell<Option<JobControl>> = const { std::cell::RefCell::new(None) };
    // Partitions this thread's compactions kept whole from their newest source
    // ([`shadowing_holder`]) instead of merging: tests read it to see the path taken.
    static SHADOW_COPIES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    // Partitions this thread's compactions merged a window of rows at a time
    // ([`merge_streamed`]): tests read it to see the path taken.
    static STREAMED_MERGES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    // [`STREAMED_MERGE_MIN_BYTES`] and [`STREAM_WINDOW_ROWS`] on this thread, changed by
    // tests to take the streamed merge for small partitions and small windows.
    static STREAMING: std::cell::Cell<(u64, usize)> =
        const { std::cell::Cell::new((STREAMED_MERGE_MIN_BYTES, STREAM_WINDOW_ROWS)) };
}

/// Partitions whose sources hold at least this many serialized bytes together are merged
/// a window of rows at a time ([`merge_streamed`]) instead of decoded whole: decoded, a
/// partition takes about ten times its serialized size, so a partition of tens of millions
/// of rows needed gigabytes (the node's whole memory) to be compacted.
const STREAMED_MERGE_MIN_BYTES: u64 = 8 << 20;
/// Rows each source contributes to a window of [`merge_streamed`] at most.
const STREAM_WINDOW_ROWS: usize = 4096;

/// Sets this thread's streaming threshold and window (None: the defaults), for tests of
/// other modules.
#[cfg(test)]
pub(crate) fn set_streaming(v: Option<(u64, usize)>) {
    STREAMING.with(|c| c.set(v.unwrap_or((STREAMED_MERGE_MIN_BYTES, STREAM_WINDOW_ROWS))));
}

/// Partitions this thread merged or copied a window of rows at a time so far (tests).
#[cfg(test)]
pub(crate) fn streamed_count() -> u64 {
    STREAMED_MERGES.with(|c| c.get())
}

/// How a major compaction takes over a table's strategy compactions (queued or running),
/// shared between the shard and the compaction thread: one whose inputs are all of the
/// table's SSTables already does the major compaction's work and goes on at full speed
/// ([`JobControl::full_speed`]); the others stop ([`JobControl::stop`]) rather than have
/// their work merged again, as Cassandra's major compaction stops them.
#[derive(Debug, Clone, Default)]
pub struct JobControl(Arc<AtomicU8>);

const CONTROL_RUN: u8 = 0;
const CONTROL_STOP: u8 = 1;
const CONTROL_FULL_SPEED: u8 = 2;

impl JobControl {
    /// Makes the compaction end at its next [`throttle_point`] with
    /// [`StorageError::CompactionStopped`], leaving no output (the rollback of
    /// [`run_rewrite`]).
    pub fn stop(&self) {
        self.0.store(CONTROL_STOP, AtomicOrdering::Relaxed);
    }
    /// Lifts the throttle's pauses: the compaction stands for a major one.
    pub fn full_speed(&self) {
        self.0.store(CONTROL_FULL_SPEED, AtomicOrdering::Relaxed);
    }
    fn get(&self) -> u8 {
        self.0.load(AtomicOrdering::Relaxed)
    }
    /// Runs `f` (a compaction) under this control.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        CONTROL.with(|c| *c.borrow_mut() = Some(self.clone()));
        let out = f();
        CONTROL.with(|c| *c.borrow_mut() = None);
        out
    }
}

/// The state of this thread's [`JobControl`] (run without one: [`CONTROL_RUN`]).
fn control() -> u8 {
    CONTROL.with(|c| c.borrow().as_ref().map_or(CONTROL_RUN, JobControl::get))
}

/// Called by the executor between partitions, with the weight of the work since the
/// last call ([`THROTTLE_CHECK_EVERY`] for a merged partition, 1 for a raw copy): sleeps
/// to keep the thread at its share. Waits first while the shard runs requests
/// (`crate::grant::pass`). Fails when the compaction was asked to stop, and does not
/// pause when it was asked to go at full speed ([`JobControl`]).
fn throttle_point(weight: u32) -> Result<()> {
    let control = control();
    if control == CONTROL_STOP {
        return Err(StorageError::CompactionStopped);
    }
    crate::grant::pass();
    if control == CONTROL_FULL_SPEED {
        return Ok(());
    }
    THROTTLE.with(|t| {
        let mut t = t.borrow_mut();
        let Some(t) = t.as_mut() else { return };
        t.calls = t.calls.saturating_add(weight);
        if t.calls < THROTTLE_CHECK_EVERY {
            return;
        }
        t.calls = 0;
        let slice = std::time::Duration::from_millis(10);
        if t.since_wall.elapsed() < slice {
            return;
        }
        let worked = thread_cpu().saturating_sub(t.since);
        if worked < slice {
            return;
        }
        let busy = t.share.busy_since(&mut t.foreground_seen);
        let pause = throttle_pause(worked, t.share.get());
        if busy && !pause.is_zero() {
            std::thread::sleep(pause);
        }
        t.since = thread_cpu();
        t.since_wall = std::time::Instant::now();
    });
    Ok(())
}

/// Decides what may be purged: tombstones older than `gc_before` whose timestamp is below
/// every timestamp that data outside the compaction could hold for the key.
pub struct PurgeContext {
    pub gc_before: i32,
    pub now_seconds: i32,
    /// The SSTables not in the compaction, as far as purging goes: which keys each may
    /// hold, and its oldest timestamp.
    pub overlaps: Vec<OverlapFilter>,
    /// The SSTables not in the compaction themselves, for a garbagecollect that reads the
    /// deletions they hold ([`PartitionHook::Shadow`]); empty for other compactions (a
    /// reader held here keeps its files, and a replaced flush output's use as a spare,
    /// until the compaction is done).
    pub others: Vec<Arc<SSTableReader>>,
    /// Lowest timestamp in any memtable of the table.
    pub memtable_min_timestamp: i64,
}

impl PurgeContext {
    fn max_purgeable(&self, key: &PartitionKey) -> i64 {
        let mut m = self.memtable_min_timestamp;
        for s in &self.overlaps {
            if s.min_timestamp < m && s.may_contain(key) {
                m = s.min_timestamp;
            }
        }
        m
    }
}

/// Converts expired cells to tombstones and drops purgeable tombstones.
pub fn purge(u: &mut PartitionUpdate, key: &PartitionKey, ctx: &PurgeContext) {
    let maxp = ctx.max_purgeable(key);
    let gc_before = LocalTime::from(ctx.gc_before);
    let purgeable = |ts: i64, ldt: LocalTime| ldt < gc_before && ts < maxp;
    let now = ctx.now_seconds;
    if u.partition_deletion
        .is_some_and(|d| purgeable(d.marked_for_delete_at, d.local_deletion_time))
    {
        u.partition_deletion = None;
    }
    u.range_tombstones.retain(|rt| {
        !purgeable(
            rt.deletion.marked_for_delete_at,
            rt.deletion.local_deletion_time,
        )
    });
    let purge_row = |r: &mut Row| {
        if r.deletion
            .is_some_and(|d| purgeable(d.marked_for_delete_at, d.local_deletion_time))
        {
            r.deletion = None;
        }
        if r.marker.is_some_and(|m| {
            m.ttl > 0
                && LocalTime::from(now) >= m.local_expiry
                && purgeable(m.timestamp, m.local_expiry - LocalTime::from(m.ttl))
        }) {
            r.marker = None;
        }
        r.cells.retain_mut(|(_, d)| match d {
            ColumnData::Simple(c) => {
                if let Some(t) = c.expire(now) {
                    *c = t;
                }
                !(c.is_tombstone && purgeable(c.timestamp, c.local_expiry))
            }
            ColumnData::Complex { deletion, cells } => {
                if deletion
                    .is_some_and(|d| purgeable(d.marked_for_delete_at, d.local_deletion_time))
                {
                    *deletion = None;
                }
                cells.retain_mut(|(_, c)| {
                    if let Some(t) = c.expire(now) {
                        *c = t;
                    }
                    !(c.is_tombstone && purgeable(c.timestamp, c.local_expiry))
                });
                deletion.is_some() || !cells.is_empty()
            }
        });
    };
    if let Some(sr) = u.static_row.as_mut() {
        purge_row(sr);
        if sr.is_empty() {
            u.static_row = None;
        }
    }
    for r in u.rows.iter_mut() {
        purge_row(r);
    }
    u.rows.retain(|r| !r.is_empty());
}

/// A compaction transaction log, `compaction-<first input generation>.txn` in the table
/// directory, makes "outputs replace inputs" atomic across crashes (purged tombstones
/// must never meet a surviving subset of the inputs):
/// `inputs g1 g2 ...` / `output g` per output (before it is published) / `commit`
/// (after every output is published). Each line is fsynced. On open, a committed log
/// deletes its inputs; an uncommitted one deletes its outputs. The shard deletes the
/// inputs and then the log after installing the outputs.
pub struct CompactionTxn {
    pub path: PathBuf,
    file: std::fs::File,
    /// The log's lines so far are durable, and so is its directory entry.
    synced: bool,
    dir_synced: bool,
}

impl CompactionTxn {
    /// Starts the log. Its lines are made durable by [`sync`](Self::sync) before the
    /// first output is published (the writer runs it alongside its own syncs), or by
    /// [`commit`](Self::commit): until an output is published, a lost log loses nothing.
    pub fn begin(dir: &Path, inputs: &[u64]) -> Result<Self> {
        let first = inputs.iter().min().copied().unwrap_or(0);
        let path = dir.join(format!("compaction-{first}.txn"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .map_err(|e| StorageError::io(&path, e))?;
        let mut t = CompactionTxn {
            path,
            file,
            synced: false,
            dir_synced: false,
        };
        let line: Vec<String> = inputs.iter().map(|g| g.to_string()).collect();
        t.append(&format!("inputs {}\n", line.join(" ")))?;
        Ok(t)
    }

    fn append(&mut self, line: &str) -> Result<()> {
        use std::io::Write;
        self.synced = false;
        self.file
            .write_all(line.as_bytes())
            .map_err(|e| StorageError::io(&self.path, e))
    }

    /// Makes the lines written so far and the log's directory entry durable.
    pub fn sync(&mut self) -> Result<()> {
        if !self.synced {
            self.file
                .sync_data()
                .map_err(|e| StorageError::io(&self.path, e))?;
            self.synced = true;
        }
        if !self.dir_synced {
            let dir = self.path.parent().unwrap_or(Path::new("."));
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| StorageError::io(dir, e))?;
            self.dir_synced = true;
        }
        Ok(())
    }

    /// Names output `generation` (made durable before that output is published).
    pub fn add_output(&mut self, generation: u64) -> Result<()> {
        self.append(&format!("output {generation}\n"))
    }

    pub fn commit(&mut self) -> Result<()> {
        self.append("commit\n")?;
        self.sync()
    }
}

/// A transaction log's inputs, outputs and whether it committed.
struct TxnLog {
    inputs: Vec<u64>,
    outputs: Vec<u64>,
    committed: bool,
}

/// The transaction logs in a table directory, with their paths.
fn txn_logs(dir: &Path) -> Vec<(PathBuf, TxnLog)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut logs = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !(name.starts_with("compaction-") && name.ends_with(".txn")) {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let mut log = TxnLog {
            inputs: Vec::new(),
            outputs: Vec::new(),
            committed: false,
        };
        for l in text.lines() {
            let mut parts = l.split_whitespace();
            match parts.next() {
                Some("inputs") => log
                    .inputs
                    .extend(parts.filter_map(|g| g.parse::<u64>().ok())),
                Some("output") => log
                    .outputs
                    .extend(parts.filter_map(|g| g.parse::<u64>().ok())),
                Some("commit") => log.committed = true,
                _ => {}
            }
        }
        logs.push((e.path(), log));
    }
    logs
}

/// Generations a committed compaction or rewrite replaced whose files may still be in the
/// table directory: the shard deletes them after it installed the outputs (and answered
/// the job's waiters), then the log. A scan of the directory for SSTables that are not in
/// service skips them.
pub fn retiring_generations(dir: &Path) -> Vec<u64> {
    txn_logs(dir)
        .into_iter()
        .filter(|(_, l)| l.committed)
        .flat_map(|(_, l)| l.inputs)
        .collect()
}

/// Finishes or rolls back interrupted compactions in a table directory (see
/// [`CompactionTxn`]). Runs before the SSTables are opened.
pub fn recover_compactions(dir: &Path) {
    for (path, log) in txn_logs(dir) {
        let victims = if log.committed {
            &log.inputs
        } else {
            &log.outputs
        };
        tracing::warn!(
            "{}: {} interrupted compaction; deleting SSTables {victims:?}",
            path.display(),
            if log.committed {
                "finishing"
            } else {
                "rolling back"
            }
        );
        for g in victims {
            crate::sstable::delete_generation(dir, *g);
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// Merges `inputs` into new SSTables in `dir`. Outputs are durable and published
/// (renamed) when this returns; the caller installs them and deletes the inputs.
pub fn run_compaction(
    schema: &TableSchema,
    dir: &Path,
    inputs: &[Arc<SSTableReader>],
    next_generation: &AtomicU64,
    job: &CompactionJob,
    purge_ctx: &PurgeContext,
) -> Result<(Vec<SSTableReader>, CompactionTxn)> {
    let input_gens: Vec<u64> = inputs.iter().map(|s| s.generation).collect();
    run_rewrite(
        schema,
        dir,
        inputs,
        &input_gens,
        next_generation,
        job,
        purge_ctx,
        None,
    )
}

/// What a rewrite (a maintenance operation: `crate::maintenance`) does to each partition
/// besides what a compaction does.
pub enum PartitionHook<'a> {
    /// Garbagecollect: each merged partition first loses what the deletions of the same
    /// partition in the table's other SSTables ([`PurgeContext::others`]) shadow, then is
    /// purged and written as a compaction's. `shadow(part, other)` removes from `part` (the
    /// partition, or a window of its rows with its deletions) what the same part of one
    /// other source shadows; `count` is told of each partition whether anything of it was
    /// left by the shadowing (a partition no other SSTable holds is kept as a compaction
    /// keeps it; a wide one is shadowed a window of rows at a time).
    Shadow {
        shadow: &'a dyn Fn(&mut PartitionUpdate, &PartitionUpdate),
        count: &'a mut dyn FnMut(bool),
    },
    /// Keeps the partitions whose key it accepts, merged as a compaction merges them (raw
    /// copies, streamed merges of wide partitions), and drops the others unread (cleanup,
    /// refresh).
    Keys(&'a mut dyn FnMut(&PartitionKey) -> bool),
}

/// [`run_compaction`] with a per-partition hook, and the generations the transaction log
/// names as inputs given apart (`txn_inputs`: the table-directory SSTables the outputs
/// replace; inputs read from elsewhere, such as `upload/`, are not named).
#[allow(clippy::too_many_arguments)]
pub fn run_rewrite(
    schema: &TableSchema,
    dir: &Path,
    inputs: &[Arc<SSTableReader>],
    txn_inputs: &[u64],
    next_generation: &AtomicU64,
    job: &CompactionJob,
    purge_ctx: &PurgeContext,
    hook: Option<PartitionHook<'_>>,
) -> Result<(Vec<SSTableReader>, CompactionTxn)> {
    if control() == CONTROL_STOP {
        // Stopped while queued: nothing to roll back.
        return Err(StorageError::CompactionStopped);
    }
    let mut txn = CompactionTxn::begin(dir, txn_inputs)?;
    if job.drop_only {
        // No outputs: the commit makes deleting the inputs the rest of the transaction.
        txn.commit()?;
        return Ok((Vec::new(), txn));
    }
    let mut created = Vec::new();
    match compact_into(
        schema,
        dir,
        inputs,
        next_generation,
        job,
        purge_ctx,
        &mut txn,
        &mut created,
        hook,
    ) {
        Ok(outputs) => Ok((outputs, txn)),
        Err(e) => {
            // Roll back: no output of a failed compaction stays.
            for g in created {
                crate::sstable::delete_generation(dir, g);
            }
            let _ = std::fs::remove_file(&txn.path);
            Err(e)
        }
    }
}

/// Finishes `writer`, publishing its SSTable once `txn` (which names it) is durable too.
fn finish_output(
    writer: SSTableWriter,
    outputs: &mut Vec<SSTableReader>,
    job: &CompactionJob,
    upper: u64,
    txn: &mut CompactionTxn,
) -> Result<()> {
    let mut sync_txn = || txn.sync();
    if let Some(r) = writer.finish_with(upper, job.output_level, Some(&mut sync_txn))? {
        outputs.push(r);
    }
    Ok(())
}

/// At most how many partitions one output of a compaction of `inputs` holds, what its
/// filter is sized for (then halved to what came): the inputs' partitions, or for outputs
/// split at `max_output_bytes` (LCS) that many bytes over the inputs' smallest partition
/// size by their size histograms, plus the partition that crosses it. Sized for all of the
/// inputs' partitions, every LCS output of a large compaction allocated the filter of the
/// whole table's level (1.4 bytes a partition) before halving it. An output partition
/// smaller than all of its inputs' (tombstones purged) can make the bound short by a few.
fn partitions_per_output(inputs: &[Arc<SSTableReader>], max_output_bytes: Option<u64>) -> u64 {
    let total: u64 = inputs.iter().map(|s| s.stats.partitions).sum();
    let smallest = inputs
        .iter()
        .filter_map(|s| s.stats.partition_size_histogram.iter().position(|&n| n > 0))
        .min();
    match (max_output_bytes, smallest) {
        (Some(max), Some(b)) => total.min((max >> b).saturating_add(1)),
        _ => total,
    }
}

fn split_if_full(
    writer: &mut Option<SSTableWriter>,
    outputs: &mut Vec<SSTableReader>,
    job: &CompactionJob,
    upper: u64,
    txn: &mut CompactionTxn,
) -> Result<()> {
    if job
        .max_output_bytes
        .is_some_and(|m| writer.as_ref().is_some_and(|w| w.uncompressed_bytes() >= m))
        && let Some(w) = writer.take()
    {
        finish_output(w, outputs, job, upper, txn)?;
    }
    Ok(())
}

/// Index of the scanner whose next partition comes first in ring order (None when all
/// are done); every scanner's next key must be loaded (`peek_key`).
fn first_scanner(scanners: &[Scanner<'_>]) -> Option<usize> {
    let mut min: Option<(usize, &PartitionKey)> = None;
    for (i, s) in scanners.iter().enumerate() {
        if let Some(k) = s.current_key()
            && min.is_none_or(|(_, m)| k < m)
        {
            min = Some((i, k));
        }
    }
    min.map(|(i, _)| i)
}

/// Of the scanners `holders` (all at one key), the one whose partition alone is what
/// merging all of theirs gives, without decoding any: every holder's partition is one row
/// of simple cells of no clustering, and the newest row shadows each other one whole
/// ([`SimpleRowSummary::shadows_whole`]: all their columns, newer timestamps, nothing that
/// expires or deletes). None when any partition is of another shape.
fn shadowing_holder(
    scanners: &mut [Scanner<'_>],
    holders: &[usize],
    sums: &mut Vec<SimpleRowSummary>,
) -> Result<Option<usize>> {
    sums.clear();
    for &i in holders {
        let sc = &mut scanners[i];
        if !sc.load_current_raw()? {
            return Ok(None);
        }
        let s = partition_body(sc.current_raw())
            .and_then(codec::summarize_single_row_partition)
            .map(|(_, s)| s)
            .filter(|s| s.clustering_empty);
        let Some(s) = s else { return Ok(None) };
        sums.push(s);
    }
    // The candidate: the holder of the newest oldest timestamp.
    let Some(n) = (0..sums.len()).max_by_key(|&x| sums[x].min_timestamp) else {
        return Ok(None);
    };
    let newest = &sums[n];
    let all = sums
        .iter()
        .enumerate()
        .all(|(x, o)| x == n || newest.shadows_whole(o));
    Ok(all.then_some(holders[n]))
}

/// [`compact_into_writer`], abandoning (removing the temporary files of) the output it was
/// writing when it fails.
#[allow(clippy::too_many_arguments)]
fn compact_into(
    schema: &TableSchema,
    dir: &Path,
    inputs: &[Arc<SSTableReader>],
    next_generation: &AtomicU64,
    job: &CompactionJob,
    purge_ctx: &PurgeContext,
    txn: &mut CompactionTxn,
    created: &mut Vec<u64>,
    hook: Option<PartitionHook<'_>>,
) -> Result<Vec<SSTableReader>> {
    let mut writer = None;
    let r = compact_into_writer(
        schema,
        dir,
        inputs,
        next_generation,
        job,
        purge_ctx,
        txn,
        created,
        hook,
        &mut writer,
    );
    if r.is_err()
        && let Some(w) = writer.take()
    {
        w.abort();
    }
    r
}

#[allow(clippy::too_many_arguments)]
fn compact_into_writer(
    schema: &TableSchema,
    dir: &Path,
    inputs: &[Arc<SSTableReader>],
    next_generation: &AtomicU64,
    job: &CompactionJob,
    purge_ctx: &PurgeContext,
    txn: &mut CompactionTxn,
    created: &mut Vec<u64>,
    mut hook: Option<PartitionHook<'_>>,
    writer: &mut Option<SSTableWriter>,
) -> Result<Vec<SSTableReader>> {
    let expected_partitions = partitions_per_output(inputs, job.max_output_bytes);
    let mut scanners: Vec<Scanner<'_>> = Vec::with_capacity(inputs.len());
    for s in inputs {
        scanners.push(s.scan_from(i64::MIN, None, false)?);
    }
    let raw_sources: Vec<RawSource<'_>> = inputs.iter().map(|s| RawSource::of(&s.stats)).collect();
    let upper = inputs
        .iter()
        .map(|s| s.stats.commitlog_upper_bound)
        .max()
        .unwrap_or(0);
    let mut outputs = Vec::new();
    let mut holders: Vec<usize> = Vec::with_capacity(scanners.len());
    let mut sums: Vec<SimpleRowSummary> = Vec::with_capacity(scanners.len());
    let mut weight = THROTTLE_CHECK_EVERY;
    loop {
        throttle_point(weight)?;
        weight = THROTTLE_CHECK_EVERY;
        for s in scanners.iter_mut() {
            s.peek_key()?;
        }
        let Some(first) = first_scanner(&scanners) else {
            break;
        };
        holders.clear();
        let key = scanners[first].current_key();
        for (i, s) in scanners.iter().enumerate() {
            if s.current_key() == key {
                holders.push(i);
            }
        }
        if let (Some(PartitionHook::Keys(keep)), Some(k)) = (hook.as_mut(), key)
            && !keep(k)
        {
            for &i in &holders {
                scanners[i].skip();
            }
            weight = 1;
            continue;
        }
        // Garbagecollect: the partition's sources among the table's other SSTables, whose
        // deletions shadow it (none: it is kept as a compaction keeps it).
        let mut shadowers: Vec<(&SSTableReader, IndexEntry)> = Vec::new();
        if let (Some(PartitionHook::Shadow { count, .. }), Some(k)) = (hook.as_mut(), key) {
            shadowers = shadowers_of(&purge_ctx.others, k);
            if shadowers.is_empty() {
                count(true);
            }
        }
        let shadowing = !shadowers.is_empty();
        let w = match writer.as_mut() {
            Some(w) => w,
            None => {
                let g = next_generation.fetch_add(1, AtomicOrdering::Relaxed);
                txn.add_output(g)?;
                created.push(g);
                let w = writer.insert(SSTableWriter::new_direct(dir, g, schema)?);
                w.expect_partitions(expected_partitions);
                w
            }
        };
        // Fast path: one source, and nothing in that SSTable can expire or be purged:
        // copy the serialized partition as is, straight from the source's chunk.
        if let ([only], false) = (&holders[..], shadowing) {
            let st = &scanners[*only].sstable().stats;
            if st.tombstones == 0 && st.max_local_deletion_time == i32::MIN {
                let src = &raw_sources[*only];
                scanners[*only].next_raw_with(|k, bytes| w.append_raw(k, bytes, src))?;
                split_if_full(writer, &mut outputs, job, upper, txn)?;
                weight = 1;
                continue;
            }
        }
        let Some(key) = key.cloned() else { break };
        // Several sources of one simple row, the newest of them newer in every column
        // than the others hold: that row is the merge (the key written again and again).
        if holders.len() > 1
            && !shadowing
            && schema.clustering_key.is_empty()
            && let Some(newest) = shadowing_holder(&mut scanners, &holders, &mut sums)?
        {
            let src = &raw_sources[newest];
            scanners[newest].next_raw_with(|k, bytes| w.append_raw(k, bytes, src))?;
            for &i in &holders {
                scanners[i].skip();
            }
            SHADOW_COPIES.with(|c| c.set(c.get() + 1));
            split_if_full(writer, &mut outputs, job, upper, txn)?;
            weight = holders.len() as u32;
            continue;
        }
        // Too wide to decode whole: merged a window of rows at a time.
        let (stream_min, window) = STREAMING.with(|c| c.get());
        let mut bytes = 0u64;
        for &i in &holders {
            bytes += scanners[i].current_entry().map_or(0, |e| e.len);
        }
        let others_bytes: u64 = shadowers.iter().map(|(_, e)| e.len).sum();
        if bytes + others_bytes >= stream_min {
            let mut sources = Vec::with_capacity(holders.len() + shadowers.len());
            for &i in &holders {
                if let Some((_, e)) = scanners[i].take_current()? {
                    sources.push((scanners[i].sstable(), e));
                }
            }
            let own = sources.len();
            sources.extend(shadowers.iter().copied());
            let kept = match (writer.as_mut(), hook.as_mut()) {
                (Some(w), Some(PartitionHook::Shadow { shadow, .. })) if shadowing => {
                    let by = Shadowers {
                        own,
                        shadow: *shadow,
                    };
                    merge_streamed(
                        schema,
                        &sources,
                        Some(by),
                        &key,
                        purge_ctx,
                        window,
                        bytes,
                        w,
                    )?
                }
                (Some(w), _) => {
                    merge_streamed(schema, &sources, None, &key, purge_ctx, window, bytes, w)?
                }
                (None, _) => false,
            };
            if let (true, Some(PartitionHook::Shadow { count, .. })) = (shadowing, hook.as_mut()) {
                count(kept);
            }
            STREAMED_MERGES.with(|c| c.set(c.get() + 1));
            split_if_full(writer, &mut outputs, job, upper, txn)?;
            continue;
        }
        let mut merged: Option<PartitionUpdate> = None;
        for &i in &holders {
            if let Some((_, u)) = scanners[i].next_partition()? {
                merged = Some(match merged {
                    None => u,
                    Some(m) => merge_partition_updates_owned(schema, m, &u),
                });
            }
        }
        let Some(mut merged) = merged else { continue };
        if let (true, Some(PartitionHook::Shadow { shadow, count })) = (shadowing, hook.as_mut()) {
            for (o, e) in &shadowers {
                // A read error here only means less is dropped.
                if let Ok((k, d)) = o.read_partition_at(*e)
                    && k == key
                {
                    shadow(&mut merged, &d);
                }
            }
            let kept = !merged.is_empty();
            count(kept);
            if !kept {
                continue;
            }
        }
        // Apply shadowing inside the partition before purging tombstones (a single
        // source was never merged).
        apply_own_deletions(schema, &mut merged);
        purge(&mut merged, &key, purge_ctx);
        if merged.is_empty() {
            continue;
        }
        if let Some(w) = writer.as_mut() {
            w.append(&key, &merged)?;
        }
        split_if_full(writer, &mut outputs, job, upper, txn)?;
    }
    if let Some(w) = writer.take() {
        finish_output(w, &mut outputs, job, upper, txn)?;
    }
    txn.commit()?;
    Ok(outputs)
}

/// The window of rows a partition of `len` serialized bytes is copied in by a rewrite that
/// copies partitions itself (scrub), or None when it is narrow enough to decode whole
/// (the same threshold as [`merge_streamed`]'s).
pub(crate) fn streamed_window(len: u64) -> Option<usize> {
    let (min, window) = STREAMING.with(|c| c.get());
    (len >= min).then_some(window.max(1))
}

/// A wide partition of one SSTable read once through, a window of rows at a time: its
/// deletion, static row and range tombstones, and its rows' statistics. Reading it proved
/// that every row decodes; [`copy_streamed`] then writes it.
pub(crate) struct StreamedPartition {
    key: PartitionKey,
    entry: IndexEntry,
    head: codec::UpdateHead,
    range_tombstones: Vec<amphora_types::data::RangeTombstone>,
    stats: StreamedStats,
}

/// Reads partition `key` (index entry `e`) of `sst` through, at most `window` rows decoded
/// at a time ([`StreamedPartition`]); a partition that does not decode is an error here,
/// before anything is written.
pub(crate) fn read_streamed(
    sst: &SSTableReader,
    key: &PartitionKey,
    e: IndexEntry,
    window: usize,
) -> Result<StreamedPartition> {
    let (mut st, head) = sst.stream_partition(key, e)?;
    let range_tombstones = st.range_tombstones()?;
    let mut stats = StreamedStats::new(
        head.partition_deletion,
        head.static_row.as_ref(),
        &range_tombstones,
    );
    for_each_row_window(sst, key, e, window, |rows| {
        stats.rows(rows);
        Ok(())
    })?;
    STREAMED_MERGES.with(|c| c.set(c.get() + 1));
    Ok(StreamedPartition {
        key: key.clone(),
        entry: e,
        head,
        range_tombstones,
        stats,
    })
}

/// Writes the partition `p` read (of `sst`) into `w` as it is, a window of rows at a
/// time: the bytes [`SSTableWriter::append`] of it decoded whole writes.
pub(crate) fn copy_streamed(
    sst: &SSTableReader,
    p: &StreamedPartition,
    window: usize,
    w: &mut SSTableWriter,
) -> Result<()> {
    let len_hint = usize::try_from(p.entry.len).unwrap_or(usize::MAX);
    w.begin_streamed(
        &p.key,
        &p.stats,
        p.head.partition_deletion,
        p.head.static_row.as_ref(),
        len_hint,
    )?;
    for_each_row_window(sst, &p.key, p.entry, window, |rows| w.streamed_rows(rows))?;
    w.finish_streamed(&p.key, &p.range_tombstones, &p.stats)
}

/// The clustering rows of partition `key` (index entry `e`) of `sst`, in order, up to
/// `window` at a time to `each`.
fn for_each_row_window(
    sst: &SSTableReader,
    key: &PartitionKey,
    e: IndexEntry,
    window: usize,
    mut each: impl FnMut(&[Row]) -> Result<()>,
) -> Result<()> {
    let (mut st, _) = sst.stream_partition(key, e)?;
    let mut rows = Vec::with_capacity(window.clamp(1, STREAM_WINDOW_ROWS));
    loop {
        throttle_point(THROTTLE_CHECK_EVERY)?;
        rows.clear();
        while rows.len() < window.max(1) {
            match st.next_row()? {
                Some(r) => rows.push(r),
                None => break,
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        each(&rows)?;
    }
}

/// Of `others` (SSTables), those that hold partition `key` and a deletion of any kind
/// (their statistics count tombstones: without one they shadow nothing), with the
/// partition's index entry there. A read error here only means that SSTable is left out
/// (garbagecollect then drops less).
fn shadowers_of<'a>(
    others: &'a [Arc<SSTableReader>],
    key: &PartitionKey,
) -> Vec<(&'a SSTableReader, IndexEntry)> {
    others
        .iter()
        .filter(|o| o.stats.tombstones > 0 && o.may_contain(key))
        .filter_map(|o| match o.find(key) {
            Ok(Some(e)) => Some((&**o, e)),
            _ => None,
        })
        .collect()
}

/// The sources of a streamed merge past the first `own` that only shadow the merge (see
/// [`PartitionHook::Shadow`]): their rows are read alongside, never written.
#[derive(Clone, Copy)]
struct Shadowers<'a> {
    own: usize,
    shadow: &'a dyn Fn(&mut PartitionUpdate, &PartitionUpdate),
}

/// Merges the partition `key` of `sources` (each an SSTable and the partition's index
/// entry there, oldest input first as the scanners are) into `w` without holding it
/// decoded: the same bytes as decoding each source whole, merging, applying deletions and
/// purging ([`compact_into_writer`]'s general case), with at most `window` rows of each
/// source decoded at a time. Those steps are row by row once the partition's deletions are
/// known (its partition deletion, static row and range tombstones, read first from each
/// source), so each window goes through them with those parts; a first pass over the
/// windows counts the rows and gathers the statistics the head of the partition needs
/// (row count, base timestamp), a second writes them. `len_hint` (the sources' bytes)
/// spaces the output's row index. With `shadowers`, the sources past its `own` are not
/// merged but shadow the merge (garbagecollect), its head and then each window with the
/// same part of theirs, before the deletions are applied, as the whole partition would
/// be. Returns whether anything was left after that shadowing (so whether garbagecollect
/// keeps the partition; true without shadowers).
#[allow(clippy::too_many_arguments)]
fn merge_streamed(
    schema: &TableSchema,
    sources: &[(&SSTableReader, IndexEntry)],
    shadowers: Option<Shadowers<'_>>,
    key: &PartitionKey,
    ctx: &PurgeContext,
    window: usize,
    len_hint: u64,
    w: &mut SSTableWriter,
) -> Result<bool> {
    let own = shadowers.map_or(sources.len(), |s| s.own.min(sources.len()));
    // Each source's deletions and static row (its rows stepped over).
    let mut frames = Vec::with_capacity(sources.len());
    for &(sst, e) in sources {
        let (mut st, head) = sst.stream_partition(key, e)?;
        let range_tombstones = st.range_tombstones()?;
        frames.push(PartitionUpdate {
            partition_deletion: head.partition_deletion,
            static_row: head.static_row,
            rows: Vec::new(),
            range_tombstones,
        });
    }
    // The output's deletion, static row and range tombstones.
    let mut head: Option<PartitionUpdate> = None;
    for f in &frames[..own] {
        head = Some(match head {
            None => f.clone(),
            Some(m) => merge_partition_updates_owned(schema, m, f),
        });
    }
    let Some(mut head) = head else {
        return Ok(false);
    };
    if let Some(by) = shadowers {
        for f in &frames[own..] {
            (by.shadow)(&mut head, f);
        }
    }
    let head_left = !head.is_empty();
    apply_own_deletions(schema, &mut head);
    purge(&mut head, key, ctx);
    let mut stats = StreamedStats::new(
        head.partition_deletion,
        head.static_row.as_ref(),
        &head.range_tombstones,
    );
    // The two passes over the same windows: counting, then writing.
    let windows = |each: &mut dyn FnMut(&[Row]) -> Result<()>| {
        for_each_window(schema, sources, shadowers, &frames, key, ctx, window, each)
    };
    let rows_left = windows(&mut |rows| {
        stats.rows(rows);
        Ok(())
    })?;
    if stats.row_count() == 0 && head.is_empty() {
        return Ok(head_left || rows_left);
    }
    let len_hint = usize::try_from(len_hint).unwrap_or(usize::MAX);
    w.begin_streamed(
        key,
        &stats,
        head.partition_deletion,
        head.static_row.as_ref(),
        len_hint,
    )?;
    windows(&mut |rows| w.streamed_rows(rows))?;
    w.finish_streamed(key, &head.range_tombstones, &stats)?;
    Ok(head_left || rows_left)
}

/// The merged, shadowed and purged clustering rows of partition `key` of `sources`, in
/// order, a window at a time to `each`. A window takes every source's rows up to a bound
/// no source with rows left past its lookahead goes beyond, so each clustering is merged
/// whole in one window; `frames` are the sources' deletions, merged with each window as
/// the whole partition's merge would. With `shadowers`, the sources past its `own` only
/// shadow each window's merge (see [`merge_streamed`]). Returns whether any window had
/// rows left after that shadowing.
#[allow(clippy::too_many_arguments)]
fn for_each_window(
    schema: &TableSchema,
    sources: &[(&SSTableReader, IndexEntry)],
    shadowers: Option<Shadowers<'_>>,
    frames: &[PartitionUpdate],
    key: &PartitionKey,
    ctx: &PurgeContext,
    window: usize,
    mut each: impl FnMut(&[Row]) -> Result<()>,
) -> Result<bool> {
    let cmp = schema.clustering_comparator();
    let window = window.max(1);
    let own = shadowers.map_or(sources.len(), |s| s.own.min(sources.len()));
    let mut streams: Vec<PartitionStream<'_>> = Vec::with_capacity(sources.len());
    for &(sst, e) in sources {
        streams.push(sst.stream_partition(key, e)?.0);
    }
    let mut ahead: Vec<std::collections::VecDeque<Row>> =
        (0..sources.len()).map(|_| Default::default()).collect();
    let mut left = false;
    loop {
        throttle_point(THROTTLE_CHECK_EVERY)?;
        for (st, a) in streams.iter_mut().zip(ahead.iter_mut()) {
            while a.len() < window {
                match st.next_row()? {
                    Some(r) => a.push_back(r),
                    None => break,
                }
            }
        }
        // Done once the merged sources are (the shadowing ones' other rows shadow nothing).
        if ahead[..own].iter().all(|a| a.is_empty()) {
            return Ok(left);
        }
        // The lowest last clustering looked ahead among sources that have more rows.
        let mut bound: Option<&Row> = None;
        for (st, a) in streams.iter().zip(ahead.iter()) {
            if st.rows_left() > 0
                && let Some(last) = a.back()
                && bound.is_none_or(|b| cmp.compare(&last.clustering.0, &b.clustering.0).is_lt())
            {
                bound = Some(last);
            }
        }
        let bound = bound.map(|b| b.clustering.clone());
        let mut merged: Option<PartitionUpdate> = None;
        let mut parts = ahead.iter_mut().zip(frames).map(|(a, f)| {
            let n = match &bound {
                None => a.len(),
                Some(b) => a.partition_point(|r| cmp.compare(&r.clustering.0, &b.0).is_le()),
            };
            PartitionUpdate {
                partition_deletion: f.partition_deletion,
                static_row: None,
                rows: a.drain(..n).collect(),
                range_tombstones: f.range_tombstones.clone(),
            }
        });
        for part in parts.by_ref().take(own) {
            merged = Some(match merged {
                None => part,
                Some(m) => merge_partition_updates_owned(schema, m, &part),
            });
        }
        let Some(mut merged) = merged else {
            return Ok(left);
        };
        if let Some(by) = shadowers {
            for part in parts {
                (by.shadow)(&mut merged, &part);
            }
        }
        left |= !merged.rows.is_empty();
        apply_own_deletions(schema, &mut merged);
        purge(&mut merged, key, ctx);
        if !merged.rows.is_empty() {
            each(&merged.rows)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ks.t` (id 7): blob key `k` and blob regular `columns`, stored in 1 KiB chunks so
    /// that partitions span chunks.
    fn blob_table_1k_chunks(columns: &[&str]) -> TableSchema {
        use amphora_types::schema::{ColumnKind, TableId, TableOptions};
        let cd = crate::test_support::blob_column;
        let mut options = TableOptions::default();
        options
            .compression
            .insert("chunk_length_in_kb".into(), "1".into());
        let mut cols = vec![cd("k", ColumnKind::PartitionKey)];
        cols.extend(columns.iter().map(|c| cd(c, ColumnKind::Regular)));
        TableSchema::new(TableId(7), "ks", "t", cols, options)
    }

    /// Compacts all of `inputs` (generations 1..=n) into generation n + 1 and on, purging
    /// nothing.
    fn compact_all(
        schema: &TableSchema,
        dir: &Path,
        inputs: &[Arc<SSTableReader>],
    ) -> Vec<SSTableReader> {
        let (job, ctx) = major_job(inputs, 0, 0);
        let next = AtomicU64::new(inputs.len() as u64 + 1);
        run_compaction(schema, dir, inputs, &next, &job, &ctx)
            .expect("compaction")
            .0
    }

    /// A major compaction of `inputs` into one output, purging under `gc_before` at
    /// `now_seconds` with nothing outside the inputs.
    fn major_job(
        inputs: &[Arc<SSTableReader>],
        gc_before: i32,
        now_seconds: i32,
    ) -> (CompactionJob, PurgeContext) {
        let job = CompactionJob {
            inputs: inputs.iter().map(|s| s.generation).collect(),
            output_level: 0,
            max_output_bytes: None,
            drop_only: false,
        };
        let ctx = PurgeContext {
            gc_before,
            now_seconds,
            overlaps: Vec::new(),
            others: Vec::new(),
            memtable_min_timestamp: i64::MAX,
        };
        (job, ctx)
    }

    /// One output, checksums intact, holding exactly `expected` (by scan and by lookup).
    fn assert_reads_back(
        outputs: &[SSTableReader],
        expected: &BTreeMap<PartitionKey, PartitionUpdate>,
    ) {
        assert_eq!(outputs.len(), 1);
        let out = &outputs[0];
        out.verify().expect("checksums");
        assert_eq!(out.stats.partitions, expected.len() as u64);
        let mut scan = out.scan_from(i64::MIN, None, false).expect("scan");
        let mut seen = 0;
        while let Some((k, u)) = scan.next_partition().expect("read") {
            assert_eq!(expected.get(&k), Some(&u), "{k:?}");
            seen += 1;
        }
        assert_eq!(seen, expected.len());
        for (k, u) in expected {
            assert_eq!(out.get(k).expect("get").as_ref(), Some(u));
        }
    }

    fn info(g: u64, size: u64) -> SSTableInfo {
        SSTableInfo {
            generation: g,
            size_bytes: size,
            min_timestamp: 0,
            max_timestamp: 0,
            max_local_deletion_time: i32::MIN,
            min_token: i64::MIN,
            max_token: i64::MAX,
            level: 0,
            has_non_expiring_data: true,
        }
    }

    /// Partitions of 1-KiB-chunk SSTables, many spanning chunks, with disjoint keys: the
    /// merge copies each one raw (one source, nothing to purge) and every partition reads
    /// back as written, with every checksum of the output intact.
    #[test]
    fn raw_copies_partitions_that_span_chunks() {
        use amphora_types::data::{Cell, Clustering, LivenessInfo};
        use bytes::Bytes;
        let schema = blob_table_1k_chunks(&["v"]);
        let dir = tempfile::tempdir().expect("tmp");
        let update = |n: usize| PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering::empty(),
                marker: Some(LivenessInfo::new(n as i64)),
                deletion: None,
                cells: vec![(
                    1,
                    ColumnData::Simple(Cell::live(
                        n as i64,
                        Bytes::from(
                            (0..n * 97 % 3000)
                                .map(|i| (i * n) as u8)
                                .collect::<Vec<u8>>(),
                        ),
                    )),
                )],
            }],
            ..Default::default()
        };
        let mut expected = BTreeMap::new();
        let mut inputs = Vec::new();
        for (g, prefix) in [(1u64, "a"), (2, "b")] {
            let mut parts: Vec<(PartitionKey, PartitionUpdate)> = (0..30)
                .map(|n| {
                    let k = PartitionKey::new(Bytes::from(format!("{prefix}{n}")));
                    (k, update(n + g as usize * 30))
                })
                .collect();
            parts.sort_by(|a, b| a.0.cmp(&b.0));
            let mut w = SSTableWriter::new(dir.path(), g, &schema).expect("writer");
            for (k, u) in &parts {
                w.append(k, u).expect("append");
                expected.insert(k.clone(), u.clone());
            }
            let r = w.finish(0, 0).expect("finish").expect("an SSTable");
            assert_eq!(r.stats.tombstones, 0);
            inputs.push(Arc::new(r));
        }
        let outputs = compact_all(&schema, dir.path(), &inputs);
        assert_reads_back(&outputs, &expected);
    }

    /// Outputs split at a size (LCS) are each told to expect at most as many partitions as
    /// that size holds of the inputs' smallest ones, not all of the inputs' partitions (each
    /// output's filter was allocated for the whole compaction's), and that bound holds.
    #[test]
    fn split_outputs_expect_the_partitions_their_size_holds() {
        use amphora_types::data::{Cell, Clustering, LivenessInfo};
        use bytes::Bytes;
        let schema = blob_table_1k_chunks(&["v"]);
        let dir = tempfile::tempdir().expect("tmp");
        // Values of 100 to ~1,100 bytes.
        let update = |n: usize| PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering::empty(),
                marker: Some(LivenessInfo::new(1)),
                deletion: None,
                cells: vec![(
                    1,
                    ColumnData::Simple(Cell::live(1, Bytes::from(vec![n as u8; 100 + n % 1000]))),
                )],
            }],
            ..Default::default()
        };
        let mut inputs = Vec::new();
        for g in 1..=2u64 {
            let mut parts: Vec<(PartitionKey, PartitionUpdate)> = (0..2_000)
                .map(|n| {
                    (
                        PartitionKey::new(Bytes::from(format!("{g}-{n}"))),
                        update(n),
                    )
                })
                .collect();
            parts.sort_by(|a, b| a.0.cmp(&b.0));
            let mut w = SSTableWriter::new(dir.path(), g, &schema).expect("writer");
            for (k, u) in &parts {
                w.append(k, u).expect("append");
            }
            inputs.push(Arc::new(
                w.finish(0, 0).expect("finish").expect("an SSTable"),
            ));
        }
        let max = 64 << 10;
        let bound = partitions_per_output(&inputs, Some(max));
        assert_eq!(partitions_per_output(&inputs, None), 4_000);
        assert!(bound < 2_000, "{bound}");
        let (mut job, ctx) = major_job(&inputs, 0, 0);
        job.max_output_bytes = Some(max);
        let next = AtomicU64::new(3);
        let outputs = run_compaction(&schema, dir.path(), &inputs, &next, &job, &ctx)
            .expect("compaction")
            .0;
        assert!(outputs.len() > 10, "{} outputs", outputs.len());
        let most = outputs
            .iter()
            .map(|o| o.stats.partitions)
            .max()
            .unwrap_or(0);
        assert!(
            most <= bound,
            "an output of {most} partitions, bound {bound}"
        );
        assert_eq!(
            outputs.iter().map(|o| o.stats.partitions).sum::<u64>(),
            4_000
        );
    }

    /// Keys written again in several SSTables: where the newest version is one row that
    /// shadows every older one whole it is copied as it is, otherwise the versions are
    /// merged; either way each partition reads back as the merge of all its versions.
    #[test]
    fn overwritten_rows_keep_the_newest_whole_or_merge() {
        use amphora_types::data::{Cell, Clustering, LivenessInfo};
        use bytes::Bytes;
        let schema = blob_table_1k_chunks(&["v1", "v2"]);
        let val = |n: usize, g: u64| {
            Bytes::from(
                (0..(n * 131 + g as usize * 7) % 1500)
                    .map(|i| (i + n) as u8)
                    .collect::<Vec<u8>>(),
            )
        };
        // Version `g` (1 oldest .. 3 newest) of key `n`; None where that SSTable lacks it.
        let version = |n: usize, g: u64| -> Option<PartitionUpdate> {
            let ts = g as i64 * 10;
            let live = |v| ColumnData::Simple(Cell::live(ts, v));
            let newest = g == 3;
            let (marker, cells) = match n % 7 {
                // Full rows each time: the newest is kept whole.
                0 => (true, vec![(1, live(val(n, g))), (2, live(val(n + 1, g)))]),
                // The newest writes v1 only: v2 comes from the older ones.
                1 if newest => (true, vec![(1, live(val(n, g)))]),
                // The newest has no marker, the older ones do.
                2 if newest => (false, vec![(1, live(val(n, g))), (2, live(val(n, g)))]),
                // The newest's v2 expires.
                3 if newest => (
                    true,
                    vec![
                        (1, live(val(n, g))),
                        (
                            2,
                            ColumnData::Simple(Cell::expiring(ts, 1000, 100, val(n, g))),
                        ),
                    ],
                ),
                // An older version deleted v1: the newest still shadows it whole.
                4 if g == 1 => (
                    true,
                    vec![
                        (1, ColumnData::Simple(Cell::tombstone(ts, 100))),
                        (2, live(val(n, g))),
                    ],
                ),
                // Only in the middle SSTable: a raw copy of its one source.
                5 if g != 2 => return None,
                // Same timestamp everywhere: merged (the greater value wins the tie).
                6 => (
                    true,
                    vec![
                        (1, ColumnData::Simple(Cell::live(5, val(n, g)))),
                        (2, live(val(n, g))),
                    ],
                ),
                _ => (true, vec![(1, live(val(n, g))), (2, live(val(n, g)))]),
            };
            Some(PartitionUpdate {
                rows: vec![Row {
                    clustering: Clustering::empty(),
                    marker: marker.then(|| LivenessInfo::new(ts)),
                    deletion: None,
                    cells,
                }],
                ..Default::default()
            })
        };
        let dir = tempfile::tempdir().expect("tmp");
        let keys: Vec<(usize, PartitionKey)> = {
            let mut k: Vec<_> = (0..70)
                .map(|n| (n, PartitionKey::new(Bytes::from(format!("k{n}")))))
                .collect();
            k.sort_by(|a, b| a.1.cmp(&b.1));
            k
        };
        let mut expected: BTreeMap<PartitionKey, PartitionUpdate> = BTreeMap::new();
        let mut inputs = Vec::new();
        for g in 1..=3u64 {
            let mut w = SSTableWriter::new(dir.path(), g, &schema).expect("writer");
            for (n, k) in &keys {
                if let Some(u) = version(*n, g) {
                    w.append(k, &u).expect("append");
                    let m = match expected.remove(k) {
                        Some(old) => merge_partition_updates_owned(&schema, old, &u),
                        None => u,
                    };
                    expected.insert(k.clone(), m);
                }
            }
            inputs.push(Arc::new(
                w.finish(0, 0).expect("finish").expect("an SSTable"),
            ));
        }
        let before = SHADOW_COPIES.with(|c| c.get());
        let outputs = compact_all(&schema, dir.path(), &inputs);
        // Keys n % 7 == 0 and 4 (20 of the 70) take the shadowing path; no other does.
        assert_eq!(SHADOW_COPIES.with(|c| c.get()) - before, 20);
        assert_reads_back(&outputs, &expected);
    }

    /// A partition merged a window of rows at a time comes out byte for byte as the same
    /// partition merged whole: three sources of overlapping rows with newer and older
    /// cells, row deletions, a range tombstone, a partition deletion, static rows, expired
    /// TTLs and purgeable tombstones, in windows of 1, 7 and 4,096 rows; a partition held by
    /// one source (with tombstones, so not copied raw) too. Index.db and RowIndex.db are the
    /// same too, each output's checksums and row index verify, and every partition reads
    /// back as the whole merge's; a rewrite that filters by key streams what it keeps.
    #[test]
    fn streamed_merges_write_what_whole_merges_write() {
        use amphora_types::data::{
            Cell, Clustering, ClusteringBound, DeletionTime, LivenessInfo, RangeTombstone,
        };
        use bytes::Bytes;
        let schema = crate::test_support::wide_table_1k_chunks();
        let dir = tempfile::tempdir().expect("tmp");
        let c = |n: u32| Clustering(vec![Bytes::copy_from_slice(&n.to_be_bytes())]);
        // Deterministic variety: which source holds a row, and the shapes of its cells.
        let mix = |g: u32, n: u32| (n.wrapping_mul(2_654_435_761) ^ g.wrapping_mul(40_503)) % 97;
        let row = |g: u32, n: u32| {
            let m = mix(g, n);
            let ts = i64::from(g) * 1_000 + i64::from(m);
            let value = |tag: u8| Bytes::from(vec![tag; (m as usize * 3) % 40]);
            let v1 = match m % 5 {
                // A tombstone old enough to purge (deleted at second 10, gc_before 1,000).
                0 => Cell::tombstone(ts, 10),
                // Expired by now (second 2,000): becomes a tombstone, then purged.
                1 => Cell::expiring(ts, 100, 50, value(1)),
                // Expires later: kept.
                2 => Cell::expiring(ts, 100_000, 50, value(2)),
                _ => Cell::live(ts, value(3)),
            };
            let mut cells = vec![(3, ColumnData::Simple(v1))];
            if m % 3 != 0 {
                cells.push((4, ColumnData::Simple(Cell::live(ts + 1, value(4)))));
            }
            Row {
                clustering: c(n),
                marker: (m % 4 != 0).then(|| LivenessInfo::new(ts)),
                // A recent row deletion (kept) shadowing what is older in the row.
                deletion: (m == 7).then(|| DeletionTime::new(ts - 50, 1_500)),
                cells,
            }
        };
        let static_row = |g: u32| Row {
            clustering: Clustering::empty(),
            marker: None,
            deletion: None,
            cells: vec![(
                2,
                ColumnData::Simple(Cell::live(
                    i64::from(g) * 1_000,
                    Bytes::from(vec![g as u8; 9]),
                )),
            )],
        };
        let wide = PartitionKey::new(Bytes::from_static(b"wide"));
        let single = PartitionKey::new(Bytes::from_static(b"single"));
        let narrow = PartitionKey::new(Bytes::from_static(b"narrow"));
        let mut inputs = Vec::new();
        for g in 1..=3u32 {
            let mut parts = vec![
                (
                    wide.clone(),
                    PartitionUpdate {
                        // Source 3's partition deletion shadows source 1's older cells.
                        partition_deletion: (g == 3).then(|| DeletionTime::new(1_050, 1_600)),
                        static_row: (g != 2).then(|| static_row(g)),
                        rows: (0..2500)
                            .filter(|n| mix(g, *n) % 4 != 1)
                            .map(|n| row(g, n))
                            .collect(),
                        range_tombstones: if g == 2 {
                            vec![RangeTombstone {
                                start: ClusteringBound {
                                    prefix: c(100),
                                    inclusive: true,
                                },
                                end: ClusteringBound {
                                    prefix: c(160),
                                    inclusive: false,
                                },
                                deletion: DeletionTime::new(2_500, 1_700),
                            }]
                        } else {
                            Vec::new()
                        },
                    },
                ),
                (
                    narrow.clone(),
                    PartitionUpdate {
                        rows: vec![row(g, 5)],
                        ..Default::default()
                    },
                ),
            ];
            if g == 1 {
                parts.push((
                    single.clone(),
                    PartitionUpdate {
                        rows: (0..400).map(|n| row(g, n)).collect(),
                        ..Default::default()
                    },
                ));
            }
            parts.sort_by(|a, b| a.0.cmp(&b.0));
            let mut w = SSTableWriter::new(dir.path(), u64::from(g), &schema).expect("writer");
            for (k, u) in &parts {
                w.append(k, u).expect("append");
            }
            inputs.push(Arc::new(
                w.finish(0, 0).expect("finish").expect("an SSTable"),
            ));
        }
        let (job, ctx) = major_job(&inputs, 1_000, 2_000);
        let compact = |first: u64, streaming: (u64, usize)| {
            STREAMING.with(|c| c.set(streaming));
            let before = STREAMED_MERGES.with(|c| c.get());
            let next = AtomicU64::new(first);
            let (mut outputs, txn) =
                run_compaction(&schema, dir.path(), &inputs, &next, &job, &ctx)
                    .expect("compaction");
            STREAMING.with(|c| c.set((STREAMED_MERGE_MIN_BYTES, STREAM_WINDOW_ROWS)));
            std::fs::remove_file(&txn.path).expect("txn log");
            assert_eq!(outputs.len(), 1);
            (
                outputs.remove(0),
                STREAMED_MERGES.with(|c| c.get()) - before,
            )
        };
        let (whole, n) = compact(10, (u64::MAX, STREAM_WINDOW_ROWS));
        assert_eq!(n, 0);
        let whole_data = std::fs::read(whole.data_path()).expect("data");
        let component = |r: &SSTableReader, c: &str| {
            std::fs::read(crate::sstable::component_path(dir.path(), r.generation, c))
                .expect("component")
        };
        for (first, window) in [(20, 1), (30, 7), (40, STREAM_WINDOW_ROWS)] {
            let (out, n) = compact(first, (0, window));
            // Every partition but the narrow one, whose three sources are one row each: it
            // is under any threshold but 0, so it is streamed too.
            assert_eq!(n, 3, "window {window}");
            out.verify().expect("checksums and row index");
            assert!(
                std::fs::read(out.data_path()).expect("data") == whole_data,
                "window {window}: Data.db differs"
            );
            assert_eq!(component(&out, "Index.db"), component(&whole, "Index.db"));
            // The wide partitions are indexed as they are written, with entries where the
            // whole partition's are (their spacing is the same below 8 MiB).
            let ri = component(&out, "RowIndex.db");
            assert!(ri.len() > 200, "{}", ri.len());
            assert_eq!(ri, component(&whole, "RowIndex.db"));
            assert_eq!(out.stats, whole.stats, "window {window}");
            for k in [&wide, &single, &narrow] {
                assert_eq!(
                    out.get(k).expect("get"),
                    whole.get(k).expect("get"),
                    "{k:?}"
                );
            }
        }
        // A rewrite that filters by key (cleanup, refresh) drops the rejected partition
        // unread and streams the others as a compaction does.
        STREAMING.with(|c| c.set((0, 7)));
        let before = STREAMED_MERGES.with(|c| c.get());
        let next = AtomicU64::new(50);
        let mut keep = |k: &PartitionKey| k != &narrow;
        let (mut outputs, txn) = run_rewrite(
            &schema,
            dir.path(),
            &inputs,
            &job.inputs,
            &next,
            &job,
            &ctx,
            Some(PartitionHook::Keys(&mut keep)),
        )
        .expect("rewrite");
        STREAMING.with(|c| c.set((STREAMED_MERGE_MIN_BYTES, STREAM_WINDOW_ROWS)));
        std::fs::remove_file(&txn.path).expect("txn log");
        assert_eq!(STREAMED_MERGES.with(|c| c.get()) - before, 2);
        let kept = outputs.remove(0);
        assert_eq!(kept.get(&narrow).expect("get"), None);
        for k in [&wide, &single] {
            assert_eq!(
                kept.get(k).expect("get"),
                whole.get(k).expect("get"),
                "{k:?}"
            );
        }
        // The merge did what it is meant to: the wide partition lost purged cells, kept
        // its range tombstone, and source 3's deletion.
        let u = whole.get(&wide).expect("get").expect("wide");
        assert_eq!(u.partition_deletion, Some(DeletionTime::new(1_050, 1_600)));
        assert_eq!(u.range_tombstones.len(), 1);
        assert!(u.static_row.is_some());
        assert!(u.rows.len() > 500, "{}", u.rows.len());

        // Garbagecollect (one SSTable rewritten, shadowed by the deletions of the others)
        // writes the same bytes streamed as whole, and keeps and drops the same partitions.
        let cmp = schema.clustering_comparator();
        let shadow = |u: &mut PartitionUpdate, o: &PartitionUpdate| {
            crate::maintenance::shadow_by(&cmp, u, o, crate::maintenance::Granularity::Cell);
        };
        let gc = |alone: usize, first: u64, streaming: (u64, usize)| {
            let one = [inputs[alone].clone()];
            let (job, mut ctx) = major_job(&one, 1_000, 2_000);
            ctx.others = inputs
                .iter()
                .filter(|s| s.generation != one[0].generation)
                .cloned()
                .collect();
            ctx.overlaps = ctx.others.iter().map(|s| s.overlap_filter()).collect();
            let mut counts = (0, 0);
            let mut count = |kept: bool| {
                if kept {
                    counts.0 += 1;
                } else {
                    counts.1 += 1;
                }
            };
            STREAMING.with(|c| c.set(streaming));
            let before = STREAMED_MERGES.with(|c| c.get());
            let next = AtomicU64::new(first);
            let hook = PartitionHook::Shadow {
                shadow: &shadow,
                count: &mut count,
            };
            let (outputs, txn) = run_rewrite(
                &schema,
                dir.path(),
                &one,
                &job.inputs,
                &next,
                &job,
                &ctx,
                Some(hook),
            )
            .expect("garbagecollect");
            STREAMING.with(|c| c.set((STREAMED_MERGE_MIN_BYTES, STREAM_WINDOW_ROWS)));
            std::fs::remove_file(&txn.path).expect("txn log");
            let streamed = STREAMED_MERGES.with(|c| c.get()) - before;
            (outputs, counts, streamed)
        };
        let mut first = 60;
        for alone in [0, 1] {
            let (whole, whole_counts, n) = gc(alone, first, (u64::MAX, STREAM_WINDOW_ROWS));
            first += 10;
            assert_eq!(n, 0);
            let source = inputs[alone].get(&wide).expect("get").expect("wide");
            // Source 3's partition deletion (source 1), and its row deletions and cell
            // tombstones (sources 1 and 2), shadow part of the wide partition.
            let gced = whole.first().and_then(|o| o.get(&wide).expect("get"));
            let kept_rows = gced.map_or(0, |u| u.rows.len());
            assert!(
                kept_rows > 100 && kept_rows < source.rows.len(),
                "alone {alone}: {kept_rows} of {} rows kept",
                source.rows.len()
            );
            for window in [1, 7, STREAM_WINDOW_ROWS] {
                let (out, counts, n) = gc(alone, first, (0, window));
                first += 10;
                assert!(n >= 2, "alone {alone} window {window}: {n} streamed");
                assert_eq!(counts, whole_counts, "alone {alone} window {window}");
                assert_eq!(out.len(), whole.len());
                for (o, w) in out.iter().zip(&whole) {
                    o.verify().expect("checksums and row index");
                    assert!(
                        std::fs::read(o.data_path()).expect("data")
                            == std::fs::read(w.data_path()).expect("data"),
                        "alone {alone} window {window}: Data.db differs"
                    );
                    assert_eq!(component(o, "RowIndex.db"), component(w, "RowIndex.db"));
                    assert_eq!(o.stats, w.stats);
                }
            }
        }
    }

    #[test]
    fn stcs_picks_similar_sizes() {
        let s = Strategy::from_options(&BTreeMap::new());
        let mb = 1 << 20;
        let ts = [
            info(1, 100 * mb),
            info(2, 110 * mb),
            info(3, 90 * mb),
            info(4, 500 * mb),
        ];
        assert_eq!(
            s.next_job(&ts, &ChoiceContext::new(0)),
            None,
            "3 similar < min_threshold"
        );
        let ts = [
            info(1, 100 * mb),
            info(2, 110 * mb),
            info(3, 90 * mb),
            info(4, 500 * mb),
            info(5, 105 * mb),
        ];
        let mut j = s
            .next_job(&ts, &ChoiceContext::new(0))
            .expect("test")
            .inputs;
        j.sort();
        assert_eq!(j, vec![1, 2, 3, 5]);
        // Small SSTables all share one bucket.
        let ts: Vec<_> = (0..5).map(|i| info(i, 1000 + i * 5000)).collect();
        assert_eq!(
            s.next_job(&ts, &ChoiceContext::new(0))
                .expect("test")
                .inputs
                .len(),
            5
        );
    }

    #[test]
    fn lcs_promotes_l0() {
        let mut m = BTreeMap::new();
        m.insert("class".to_string(), "LeveledCompactionStrategy".to_string());
        let s = Strategy::from_options(&m);
        let ts: Vec<_> = (0..4).map(|i| info(i, 1000)).collect();
        let j = s.next_job(&ts, &ChoiceContext::new(0)).expect("test");
        assert_eq!(j.output_level, 1);
        assert_eq!(j.max_output_bytes, Some(160 << 20));
    }

    fn ttl_only(g: u64, min_ts: i64, max_ts: i64, expires: i32) -> SSTableInfo {
        SSTableInfo {
            min_timestamp: min_ts,
            max_timestamp: max_ts,
            max_local_deletion_time: expires,
            has_non_expiring_data: false,
            ..info(g, 1000)
        }
    }

    fn twcs() -> Strategy {
        let mut m = BTreeMap::new();
        m.insert(
            "class".to_string(),
            "TimeWindowCompactionStrategy".to_string(),
        );
        m.insert("compaction_window_unit".to_string(), "MINUTES".to_string());
        Strategy::from_options(&m)
    }

    #[test]
    fn twcs_drops_fully_expired_without_rewriting() {
        let s = twcs();
        let live = SSTableInfo {
            min_timestamp: 500,
            max_timestamp: 900,
            ..info(3, 1000)
        };
        let ts = [
            ttl_only(1, 10, 100, 1_000),
            ttl_only(2, 200, 300, 5_000),
            live,
        ];
        // Only generation 1 expired before gc_before = 2000.
        let j = s.next_job(&ts, &ChoiceContext::new(2_000)).expect("a job");
        assert_eq!(j.inputs, vec![1]);
        assert!(j.drop_only);
        // Both expired: both dropped in one job.
        let j = s.next_job(&ts, &ChoiceContext::new(6_000)).expect("a job");
        assert_eq!(j.inputs, vec![1, 2]);
        assert!(j.drop_only);
        // Not yet expired (gc_before not past the expiry): nothing to drop.
        assert_eq!(s.next_job(&ts, &ChoiceContext::new(1_000)), None);
    }

    #[test]
    fn twcs_keeps_expired_sstables_that_may_shadow_older_data() {
        let s = twcs();
        // A live SSTable overlapping it holds data older than the expired one's newest
        // timestamp: its tombstones may still shadow that data.
        let older_live = SSTableInfo {
            min_timestamp: 50,
            max_timestamp: 60,
            ..info(3, 1000)
        };
        let ts = [ttl_only(1, 10, 100, 1_000), older_live.clone()];
        assert_eq!(s.next_job(&ts, &ChoiceContext::new(2_000)), None);
        // The same live SSTable in another token range does not matter.
        let elsewhere = SSTableInfo {
            min_token: 1_000,
            max_token: 2_000,
            ..older_live
        };
        let mut expired = ttl_only(1, 10, 100, 1_000);
        expired.max_token = 999;
        let j = s.next_job(&[expired.clone(), elsewhere], &ChoiceContext::new(2_000));
        assert_eq!(j.map(|j| (j.inputs, j.drop_only)), Some((vec![1], true)));
        // Older data in a memtable (or a compacting SSTable) blocks the drop too.
        let ctx = ChoiceContext {
            gc_before: 2_000,
            min_timestamp_elsewhere: 99,
        };
        assert_eq!(fully_expired(&[expired.clone()], &ctx), Vec::<u64>::new());
        // An SSTable with data that never expires is never dropped.
        let mut never = expired;
        never.has_non_expiring_data = true;
        assert_eq!(
            fully_expired(&[never], &ChoiceContext::new(2_000)),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn stcs_backlog_counts_the_rewrites_left() {
        let s = Strategy::from_options(&BTreeMap::new());
        let mb = 1u64 << 20;
        // One SSTable: nothing left to do.
        assert_eq!(backlog_bytes(&s, &[info(1, 100 * mb)]), 0.0);
        // Four equal SSTables: each byte is rewritten once more (log4(4) = 1).
        let four: Vec<_> = (0..4).map(|g| info(g, 10 * mb)).collect();
        let b = backlog_bytes(&s, &four);
        assert!((b - 40.0 * mb as f64).abs() < 1.0, "{b}");
        // Sixteen equal ones: twice (log4(16) = 2); the backlog grows faster than the data.
        let sixteen: Vec<_> = (0..16).map(|g| info(g, 10 * mb)).collect();
        let b16 = backlog_bytes(&s, &sixteen);
        assert!((b16 - 320.0 * mb as f64).abs() < 1.0, "{b16}");
        // A big SSTable next to a small one: the small one carries most of the backlog.
        let b = backlog_bytes(&s, &[info(1, 1000 * mb), info(2, mb)]);
        assert!(b > 4.0 * mb as f64 && b < 6.0 * mb as f64, "{b}");
    }

    #[test]
    fn lcs_and_twcs_backlogs() {
        let mut m = BTreeMap::new();
        m.insert("class".to_string(), "LeveledCompactionStrategy".to_string());
        let lcs = Strategy::from_options(&m);
        let l1 = |g: u64, size: u64| SSTableInfo {
            level: 1,
            ..info(g, size)
        };
        // L1 within its target (10 x 160 MiB) and nothing in L0: no backlog.
        assert_eq!(backlog_bytes(&lcs, &[l1(1, 100 << 20)]), 0.0);
        // L0 always moves down.
        assert!(backlog_bytes(&lcs, &[l1(1, 100 << 20), info(2, 5 << 20)]) >= (5 << 20) as f64);
        // TWCS: windows are independent (one SSTable per window: nothing to do).
        let s = twcs();
        let w = |g: u64, minute: i64| SSTableInfo {
            max_timestamp: minute * 60_000_000,
            ..info(g, 1 << 20)
        };
        assert_eq!(backlog_bytes(&s, &[w(1, 1), w(2, 2), w(3, 3)]), 0.0);
        assert!(backlog_bytes(&s, &[w(1, 1), w(2, 1), w(3, 3)]) > 0.0);
    }

    #[test]
    fn controller_raises_the_share_with_the_backlog() {
        let c = BacklogController::default();
        let budget = 100u64 << 20;
        assert_eq!(c.share(0.0, budget), c.min_share);
        assert_eq!(c.share(f64::NAN, budget), c.min_share);
        let mut last = c.min_share;
        for n in 1..=8 {
            let share = c.share(n as f64 * budget as f64 / 2.0, budget);
            assert!(share >= last, "monotonic: {share} < {last} at {n}");
            assert!(share > c.min_share && share <= c.max_share);
            last = share;
        }
        // Saturates at full_backlog.
        assert_eq!(c.share(4.0 * budget as f64, budget), c.max_share);
        assert_eq!(c.share(100.0 * budget as f64, budget), c.max_share);
        // Half-way.
        let mid = c.share(2.0 * budget as f64, budget);
        assert!((mid - 0.55).abs() < 1e-9, "{mid}");
    }

    #[test]
    fn throttle_pause_keeps_the_share() {
        use std::time::Duration;
        let ms = Duration::from_millis;
        assert_eq!(throttle_pause(ms(10), 1.0), Duration::ZERO);
        // 25%: 10 ms of work, 30 ms of pause.
        assert_eq!(throttle_pause(ms(10), 0.25), ms(30));
        assert_eq!(throttle_pause(ms(20), 0.5), ms(20));
        // Bounded.
        assert_eq!(throttle_pause(ms(1000), 0.1), ms(100));
    }

    #[test]
    fn throttle_pauses_only_while_foreground_requests_arrive() {
        use std::time::{Duration, Instant};
        let share = CompactionShare::default();
        share.set(0.1);
        // `ms` of this thread's CPU time (what the throttle counts).
        let work = |ms: u64| {
            let until = thread_cpu() + Duration::from_millis(ms);
            while thread_cpu() < until {
                std::hint::spin_loop();
            }
        };
        // No foreground request during the slice: no pause.
        let idle = share.run(|| {
            let t = Instant::now();
            work(20);
            // A merged partition's weight: the clock is read.
            throttle_point(THROTTLE_CHECK_EVERY).expect("not stopped");
            t.elapsed()
        });
        assert!(idle < Duration::from_millis(100), "{idle:?}");
        // A request arrived: the slice is followed by its pause (20 ms * 9, capped at 100).
        let busy = share.run(|| {
            let t = Instant::now();
            work(20);
            share.note_foreground();
            throttle_point(THROTTLE_CHECK_EVERY).expect("not stopped");
            t.elapsed()
        });
        assert!(busy >= Duration::from_millis(120), "{busy:?}");
        // Raw copies (weight 1) read the clock only every so many: 63 of them do not
        // pause, the 64th does.
        let (before, after) = share.run(|| {
            work(20);
            share.note_foreground();
            let t = Instant::now();
            (1..THROTTLE_CHECK_EVERY).for_each(|_| throttle_point(1).expect("not stopped"));
            let before = t.elapsed();
            throttle_point(1).expect("not stopped");
            (before, t.elapsed() - before)
        });
        assert!(before < Duration::from_millis(20), "{before:?}");
        assert!(after >= Duration::from_millis(100), "{after:?}");
    }
}
