//! Storage configuration for one shard.

use std::path::PathBuf;
use std::sync::Arc;

/// The engine's clock in seconds since the epoch (gc_grace_seconds and TTL decisions in
/// compaction). Tests substitute a simulated clock.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> i32 + Send + Sync>);

impl Clock {
    pub fn system() -> Self {
        Clock(Arc::new(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i32)
                .unwrap_or(0)
        }))
    }
    pub fn from_fn(f: impl Fn() -> i32 + Send + Sync + 'static) -> Self {
        Clock(Arc::new(f))
    }
    pub fn now_seconds(&self) -> i32 {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock(now = {})", self.now_seconds())
    }
}

/// Runs on the flush thread before each memtable flush (tests slow flushes down with it).
#[derive(Clone)]
pub struct FlushHook(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for FlushHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FlushHook")
    }
}

/// When commitlog writes are made durable (cassandra.yaml `commitlog_sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// Writes are handed to the OS before they are acknowledged; fdatasync every
    /// `period_ms` (default 10 s). Survives a process crash, not a machine crash.
    Periodic { period_ms: u64 },
    /// Writes are acknowledged after fdatasync; concurrent writers share one sync.
    /// `window_ms` > 0 waits that long to gather more writers into a sync.
    Batch { window_ms: u64 },
    /// Like batch, but syncs at most once per `window_ms`.
    Group { window_ms: u64 },
}

impl Default for SyncMode {
    fn default() -> Self {
        SyncMode::Periodic { period_ms: 10_000 }
    }
}

/// What to do with a corrupt commitlog entry found in the middle of the log on replay
/// (cassandra.yaml `commit_failure_policy`). A torn tail of the last segment is always
/// truncated and reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitFailurePolicy {
    /// Refuse to start (`ShardStorage::open` fails naming the file and offset).
    #[default]
    Stop,
    /// Report it loudly, skip the bad bytes up to the next valid entry (or the rest of
    /// the segment when none follows) and continue.
    Ignore,
}

/// Default [`StorageConfig::background_nice`]: the lowest priority, so compaction runs in
/// the time the shard thread leaves (the node takes another value from
/// `AMPHORA_BACKGROUND_NICE` for experiments). Measured in docs/benchmarks.md ("Writes at
/// 90% of the own maximum"): at nice 0 a compaction took half of the core from a shard
/// writing at a fixed 160k/s and the write p99 grew to seconds.
pub const DEFAULT_BACKGROUND_NICE: i32 = 19;

/// A nice value above Linux's 19 that puts a background thread in `SCHED_IDLE` instead:
/// it runs only in time the shard thread leaves (see `crate::grant`).
pub const SCHED_IDLE_NICE: i32 = 20;

/// Default [`StorageConfig::grant_slice`].
pub const DEFAULT_GRANT_SLICE: std::time::Duration = std::time::Duration::from_micros(200);

/// Default [`StorageConfig::grant_every`].
pub const DEFAULT_GRANT_EVERY: std::time::Duration = std::time::Duration::from_micros(600);

/// Default [`StorageConfig::compaction_grant_amplification`].
pub const DEFAULT_COMPACTION_GRANT_AMPLIFICATION: f64 = 2.0;

/// Default [`StorageConfig::flush_direct_behind`]: off (measured, see there).
pub const DEFAULT_FLUSH_DIRECT_BEHIND: u64 = 0;

/// Default [`StorageConfig::compaction_grant_pending`]: off (measured, see there).
pub const DEFAULT_COMPACTION_GRANT_PENDING: u64 = 0;

/// Default [`StorageConfig::compaction_grant_backlog`]: off (an experiment).
pub const DEFAULT_COMPACTION_GRANT_BACKLOG: f64 = 0.0;

/// Default [`StorageConfig::compaction_grant_backlog_share`].
pub const DEFAULT_COMPACTION_GRANT_BACKLOG_SHARE: f64 = 0.5;

/// Default [`StorageConfig::flush_pace_max`].
pub const DEFAULT_FLUSH_PACE_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// Default [`StorageConfig::flush_pace_share`]: the rest of the active memtables' part is
/// left for the row cache's merge of the flushed rows, which frees the memtable, before
/// writes would wait for memory.
pub const FLUSH_PACE_SHARE: f64 = 0.7;

/// Default [`StorageConfig::flush_active_share`]: the other half of the budget absorbs the
/// writes while the flushed memtable is written and merged into the row cache. A third,
/// with the flush paced over the whole next fill (`flush_pace_share` 1.0), held a fixed
/// write rate near the core's capacity with no memory waits and a 3.6x lower p99, but in
/// both of its full make bench runs its flush fell inside the 50% write step, whose p99.9
/// rose to 16 ms: kept as an experiment (`AMPHORA_FLUSH_ACTIVE_SHARE=0.333
/// AMPHORA_FLUSH_PACE_SHARE=1.0`; docs/benchmarks.md, "Flushes at a third of the budget,
/// paced over the whole next fill" and "A major compaction stops the strategy's
/// compactions; the third-of-budget shape in a second full run").
pub const FLUSH_ACTIVE_SHARE: f64 = 0.5;

/// Default [`StorageConfig::cache_update_pause`].
pub const DEFAULT_CACHE_UPDATE_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// This shard's data directory. Layout inside: `commitlog/` and
    /// `<keyspace>/<table>-<table id hex>/` (see docs/dev/sstable-format.md).
    pub data_dir: PathBuf,
    pub shard: u32,
    pub commitlog_sync: SyncMode,
    /// Size of one commitlog segment (cassandra.yaml `commitlog_segment_size`, 32 MiB).
    pub commitlog_segment_size_bytes: u64,
    /// When the commitlog grows past this, the tables holding the oldest segment are flushed.
    pub commitlog_total_space_bytes: u64,
    /// Reuse the files of discarded commitlog segments (docs/dev/commitlog-format.md). On by
    /// default: ~6% less server CPU per write at saturation. Writes into a reused file are
    /// padded to whole 4 KiB blocks, so none waits for a read of a block whose page left the
    /// cache (unpadded, those were 40–68 ms stalls of the shard thread during a compaction).
    pub commitlog_reuse_segments: bool,
    /// Commitlog segments are allocated whole and written through a memory mapping
    /// (`commitlog::SegmentMap`): a copy per group of writes instead of a `pwritev`, into a
    /// reused file's cached pages (a page that left the cache gets the padded `pwritev`,
    /// checked with `mincore`). On by default; the node takes `false` from
    /// `AMPHORA_COMMITLOG_MMAP=0` (experiments). A file system that cannot allocate or map
    /// a file gets `pwrite`s either way.
    pub commitlog_mmap: bool,
    /// Flushes write their Data.db with O_DIRECT, as compactions do: no copy into fresh
    /// page-cache pages, which on this project's VMs cost the flush thread ~2.5 ms per MB
    /// (the host backs each freed guest page anew on its first touch) and was over half
    /// of the flush's CPU at 150-200k writes/s. Off by default: the outputs are then not
    /// cached, and in a full run the major compaction that reads them fell from 661 to
    /// 229 MB/s and the fixed-rate reads' p99 rose (docs/benchmarks.md, "Flushes written
    /// with O_DIRECT"). The node takes `true` from `AMPHORA_FLUSH_DIRECT=1` (experiments);
    /// a file system without O_DIRECT gets buffered writes either way.
    pub flush_direct: bool,
    /// Pending compactions (running and queued) at which a flush that finds no free spare
    /// data file ([`crate::spare`]) writes its Data.db with O_DIRECT instead of into fresh
    /// page-cache pages (0, the default: never). Spares come back only as compactions
    /// retire flush outputs, so with compaction behind a shortage lasts, and a flush into
    /// fresh pages cost ~2.5x the flush thread's CPU and left writes waiting for memory.
    /// Such an output is not in the page cache (reads of it wait for the disk until it is
    /// compacted). Off by default: at 2 one fixedown run measured a cheaper flush (0.25
    /// against 0.41 µs per write) but the 90% step still took the whole core, and its full
    /// make bench (a slow host that hour) missed more than the runs before it
    /// (docs/benchmarks.md, "Direct flushes when no spare is free"). The node takes
    /// another from `AMPHORA_FLUSH_DIRECT_BEHIND` (experiments).
    pub flush_direct_behind: u64,
    /// After a compaction's outputs are installed, the shard's `warm` thread reads them
    /// into the page cache (`readahead`, no copy; [`crate::warm`]), as their inputs were
    /// (the outputs are written with O_DIRECT, so the reads that move to them each wait for
    /// the disk). Skipped when the outputs are over a quarter of the memory the kernel
    /// reports available. Off by default: reads at 3,198/s while a write burst's
    /// compactions finished waited for the disk 12x less often, but their tail did not
    /// improve (it was worse with the warming on the compaction thread itself), so it does
    /// not pay for its disk reads (docs/benchmarks.md, "Compaction outputs read into the
    /// page cache, tried"). The node takes `true` from `AMPHORA_WARM_OUTPUTS=1`
    /// (experiments).
    pub warm_compaction_outputs: bool,
    /// Bytes of replaced flush outputs' Data.db files kept for the next flushes to write
    /// over (see [`crate::spare`]), for buffered flushes only (`flush_direct` false, the
    /// default: a direct flush's output is not in the page cache, so nothing is gained
    /// writing over it); `None`: twice `memtable_budget_bytes` (the four flush outputs a
    /// size-tiered compaction replaces at once); 0: none are kept.
    pub spare_data_bytes: Option<u64>,
    pub commit_failure_policy: CommitFailurePolicy,
    /// Memory for all memtables of the shard, active and flushing. The largest active one
    /// is flushed once active memtables pass half of it; once all of them pass it, writes
    /// wait in [`crate::ShardStorage::admit`] until a flush frees memory.
    pub memtable_budget_bytes: u64,
    /// Background compaction after flushes (tests turn it off to control compaction).
    pub auto_compaction: bool,
    /// Bytes of the shard's cache of decompressed SSTable blocks (0 disables it); `None`:
    /// a quarter of `memtable_budget_bytes` (it serves row cache misses and scans).
    pub block_cache_bytes: Option<u64>,
    /// Bytes of the shard's row cache of whole partitions (0 disables it); `None`: two and
    /// a half times `memtable_budget_bytes` (the node gives memtables a quarter of its
    /// memory, so the row cache gets five eighths, the block cache a sixteenth: like
    /// ScyllaDB, the cache takes the memory nothing else needs).
    pub row_cache_bytes: Option<u64>,
    /// Partitions estimated above this (or above an eighth of the row cache) are not
    /// row-cached: they are read from SSTables each time.
    pub row_cache_partition_max_bytes: u64,
    /// Nice value of the shard's compaction thread (0 = the shard thread's own priority).
    /// It shares the shard's core: a lower priority lets the scheduler preempt it as soon
    /// as the shard thread has a request, instead of time-slicing the core between them
    /// (a backlog of requests while a compaction runs). At 19 it gets ~1.5% of a core the
    /// shard thread keeps busy: under such a load the backlog of compactions grows (as
    /// Cassandra's pending compactions do) and is worked off when the shard has idle time.
    /// A Linux thread cannot raise its priority again without privilege, so the backlog
    /// controller's share ([`crate::compaction::BacklogController`]) only paces it below
    /// that. The flush thread keeps the shard's priority by default ([`Self::flush_nice`]):
    /// writes wait for flushes when memtables are full.
    pub background_nice: i32,
    /// Nice value of the shard's flush thread (0 = the shard thread's own priority; the
    /// node takes another from `AMPHORA_FLUSH_NICE` for experiments: at 19 the flush fell
    /// behind a busy shard and writes waited for memory).
    pub flush_nice: i32,
    /// The flush and compaction threads wait while the shard's event loop runs tasks
    /// (`crate::grant::Gate`; the server registers [`crate::shard::ShardStorage::park_hook`]
    /// with its runtime). Off by default: measured, it took the background threads' turns
    /// of 2-4 ms off the shard, but neither the fixed-rate write tails nor saturation got
    /// clearly better (docs/benchmarks.md, "The background gate").
    pub background_gate: bool,
    /// How long the shard sleeps for a background thread that wants time (`crate::grant`);
    /// zero grants none.
    pub grant_slice: std::time::Duration,
    /// The window of requests after which the shard grants a `grant_slice` to a
    /// background thread that wants time, unless it was idle that long in the window.
    pub grant_every: std::time::Duration,
    /// SSTables read per request (reads and writes; a row cache hit reads none) at which a
    /// running compaction is owed the shard's time: the shard then grants it slices as it
    /// does a flush that wants time (`crate::grant`, [`Self::grant_slice`] per
    /// [`Self::grant_every`] while it has no idle time of its own), with or without the
    /// background gate. Zero: never. Without it a shard busy with reads that each read
    /// many SSTables starved (nice 19) the compaction that would make them cheap
    /// (docs/benchmarks.md, "Reads right after a write burst").
    pub compaction_grant_amplification: f64,
    /// Compaction jobs submitted and not finished (the running one and those queued
    /// behind it, over all tables) at which compaction is owed the shard's time, as for
    /// [`Self::compaction_grant_amplification`]. Zero (the default): never. An experiment
    /// (`AMPHORA_COMPACTION_GRANT_PENDING`): at nice 19 compaction only gets what the shard
    /// leaves, so writes at the core's limit run ahead of it (14 jobs pending after make
    /// bench's 4 minutes of saturation writes) and the saturation rate is one the node
    /// cannot keep with its compactions. Granting it time lowered the saturation write
    /// rate 9-14% but the fixed rate at 90% of that still took the whole core, and its
    /// p99 got worse (222-840 ms against 131-178 ms), so it stays off
    /// (docs/benchmarks.md, "Compaction owed time for its backlog").
    pub compaction_grant_pending: u64,
    /// Normalized compaction backlog ([`crate::compaction::backlog_bytes`] over the
    /// memtable budget) at which compaction is owed
    /// [`Self::compaction_grant_backlog_share`] of the core, while a compaction is pending;
    /// below it the owed share falls in proportion (ScyllaDB's backlog controller: the
    /// shard grants slices, [`Self::grant_slice`] each, as if for a flush that wants time,
    /// whenever it had less idle time of its own). Zero (the default): off. An experiment
    /// (`AMPHORA_COMPACTION_GRANT_BACKLOG`): at nice 19 compaction gets only what the shard
    /// leaves, so a saturation run measures a rate the node cannot keep with its
    /// compactions; a share that grows with the backlog until compaction keeps pace makes
    /// it measure one it can.
    pub compaction_grant_backlog: f64,
    /// See [`Self::compaction_grant_backlog`] (`AMPHORA_COMPACTION_GRANT_BACKLOG_SHARE`).
    pub compaction_grant_backlog_share: f64,
    /// Strategy compactions whose inputs total at least this many bytes, and major
    /// compactions, run on a second compaction thread of the shard (same nice), so that
    /// the small merges that retire flush outputs (and free their data files as spares for
    /// the next flushes) do not queue behind a long merge of a higher tier, as ScyllaDB
    /// runs compactions of different weights at once (and Cassandra two compactors on a
    /// machine like this one). `None` (the default): twice `memtable_budget_bytes`, which
    /// puts the merges of four flush outputs on the first thread and those of their
    /// outputs on the second; zero: one compaction thread. Measured in docs/benchmarks.md,
    /// "A second compaction thread for large merges".
    pub large_compaction_bytes: Option<u64>,
    /// Longest a flush started by the memtables' size may be spread over: such a flush
    /// keeps pace with the writes that fill the memtable after it (it aims to be done when
    /// they reach `flush_pace_share` of the flush threshold) instead of
    /// taking the core in one burst, and by this time it has gone at least as far as its
    /// elapsed share of it. Zero: flushes are never paced (the node takes another from
    /// `AMPHORA_FLUSH_PACE_MAX_MS`, for experiments). Flushes that something waits for
    /// (nodetool, shutdown, a full budget or commitlog) are never paced and end the
    /// pacing of those before them.
    pub flush_pace_max: std::time::Duration,
    /// Share of `memtable_budget_bytes` the active memtables may fill before the largest
    /// is flushed; the rest absorbs the writes while flushes run.
    pub flush_active_share: f64,
    /// Share of the active memtables' part of the budget (`flush_active_share`) that the
    /// writes after a paced flush's start may fill before it is done
    /// ([`StorageConfig::flush_pace_max`]).
    pub flush_pace_share: f64,
    /// Pause between two slices of a flushed memtable's merge into the row cache while
    /// requests keep the shard busy, memtables use under seven eighths of their budget
    /// and the room left in the budget is at least half of what the merge frees
    /// (zero: one slice per scheduler turn, about half of a busy shard).
    pub cache_update_pause: std::time::Duration,
    /// Set when the shard thread's allocator arena keeps the pages freed in it
    /// ([`crate::alloc::AllocatorHooks::keep_pages_on_this_thread`]): once more than these
    /// bytes of freed pages sit in it, those beyond fifteen sixteenths of it go back to the
    /// OS ([`crate::alloc::AllocatorHooks::trim_kept_pages`], checked every 250 ms).
    pub kept_pages_cap_bytes: Option<u64>,
    /// With `kept_pages_cap_bytes`: kept pages also go back to the OS, as many as the
    /// allocator's resident memory (the whole process) is above this and a margin, so they
    /// are kept only while the node is within its memory (the node sets it to its memory plus an
    /// eighth; `None`: no such limit).
    pub resident_limit_bytes: Option<u64>,
    /// With `kept_pages_cap_bytes`: keep [`crate::alloc::PREFAULT_RESERVE`] of kept pages
    /// faulted in ahead of the shard's use ([`crate::alloc::AllocatorHooks::prefault`]).
    pub prefault: bool,
    pub clock: Clock,
    pub before_flush: Option<FlushHook>,
}

impl StorageConfig {
    pub fn new(data_dir: impl Into<PathBuf>, shard: u32) -> Self {
        StorageConfig {
            data_dir: data_dir.into(),
            shard,
            commitlog_sync: SyncMode::default(),
            commitlog_segment_size_bytes: 32 << 20,
            commitlog_total_space_bytes: 1 << 30,
            commitlog_reuse_segments: true,
            commitlog_mmap: true,
            flush_direct: false,
            flush_direct_behind: DEFAULT_FLUSH_DIRECT_BEHIND,
            warm_compaction_outputs: false,
            spare_data_bytes: None,
            commit_failure_policy: CommitFailurePolicy::Stop,
            memtable_budget_bytes: 256 << 20,
            auto_compaction: true,
            block_cache_bytes: None,
            row_cache_bytes: None,
            row_cache_partition_max_bytes: 1 << 20,
            background_nice: DEFAULT_BACKGROUND_NICE,
            flush_nice: 0,
            background_gate: false,
            grant_slice: DEFAULT_GRANT_SLICE,
            grant_every: DEFAULT_GRANT_EVERY,
            compaction_grant_amplification: DEFAULT_COMPACTION_GRANT_AMPLIFICATION,
            compaction_grant_pending: DEFAULT_COMPACTION_GRANT_PENDING,
            compaction_grant_backlog: DEFAULT_COMPACTION_GRANT_BACKLOG,
            compaction_grant_backlog_share: DEFAULT_COMPACTION_GRANT_BACKLOG_SHARE,
            large_compaction_bytes: None,
            flush_pace_max: DEFAULT_FLUSH_PACE_MAX,
            flush_active_share: FLUSH_ACTIVE_SHARE,
            flush_pace_share: FLUSH_PACE_SHARE,
            cache_update_pause: DEFAULT_CACHE_UPDATE_PAUSE,
            kept_pages_cap_bytes: None,
            resident_limit_bytes: None,
            prefault: true,
            clock: Clock::system(),
            before_flush: None,
        }
    }

    /// Input bytes from which a strategy compaction runs on the second compaction thread
    /// (0: there is none); see [`Self::large_compaction_bytes`].
    pub fn large_compaction_threshold(&self) -> u64 {
        self.large_compaction_bytes
            .unwrap_or(self.memtable_budget_bytes.saturating_mul(2))
    }

    /// The active memtables' bytes over which the largest is flushed.
    pub fn flush_threshold_bytes(&self) -> u64 {
        (self.memtable_budget_bytes as f64 * self.flush_active_share.clamp(0.05, 0.95)) as u64
    }

    /// The block cache's size in bytes.
    pub fn block_cache_capacity(&self) -> u64 {
        self.block_cache_bytes
            .unwrap_or(self.memtable_budget_bytes / 4)
    }

    /// The row cache's size in bytes.
    pub fn row_cache_capacity(&self) -> u64 {
        self.row_cache_bytes
            .unwrap_or(self.memtable_budget_bytes / 2 * 5)
    }

    /// The largest partition the row cache holds, in estimated bytes.
    pub fn row_cache_partition_max(&self) -> u64 {
        self.row_cache_partition_max_bytes
            .min(self.row_cache_capacity() / 8)
    }
}

/// A field of /proc/meminfo (`"MemTotal"`, `"MemAvailable"`, ...) in bytes; None where the
/// file or the field is missing.
pub fn meminfo_bytes(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let rest = s
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    /// Fields read in bytes; a prefix of a field's name or a missing field reads as None.
    #[test]
    fn meminfo_fields_read_in_bytes() {
        let total = super::meminfo_bytes("MemTotal").expect("MemTotal");
        let avail = super::meminfo_bytes("MemAvailable").expect("MemAvailable");
        assert!(total >= 64 << 20 && total.is_multiple_of(1024), "{total}");
        assert!(avail <= total, "{avail} > {total}");
        assert_eq!(super::meminfo_bytes("Mem"), None);
        assert_eq!(super::meminfo_bytes("NoSuchField"), None);
    }
}
