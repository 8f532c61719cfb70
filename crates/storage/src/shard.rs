//! `ShardStorage`: one shard's LSM (commitlog + memtables + SSTables + compaction).
//!
//! Owned by one shard thread (it is `!Send`); cheap to clone (an `Rc`). Writes append to
//! the commitlog buffer and the memtable synchronously and return a [`WriteAck`] that
//! resolves when the write is durable per the sync mode. Flushes and compactions run on
//! two background threads per shard over immutable inputs; their results are installed on
//! the shard thread (by the futures returned from `flush`/`compact_major`, by the next
//! `apply`/`read`, or by [`ShardStorage::run_background`]).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::future::Future;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering as AtomicOrdering};
use std::sync::mpsc;
use std::time::Duration;

use amphora_types::data::{
    Cell, Clustering, ClusteringBound, ClusteringSlice, ColumnData, CounterShard, Mutation,
    PartitionKey, PartitionUpdate, Row, apply_own_deletions, decode_counter_shards,
    merge_partition_updates_owned, normalize_range_tombstones,
};
use amphora_types::schema::{ColumnId, ColumnKind, TableId, TableSchema};
use bytes::Bytes;
use tokio::sync::{Notify, oneshot};

use crate::cache::{BlockCache, BlockCacheStats};
use crate::commitlog::{self, Commitlog, LogPosition, ReplayReport, WriteAck, segment_of};
use crate::compaction::{
    BacklogController, ChoiceContext, CompactionJob, CompactionShare, JobControl, PurgeContext,
    SSTableInfo, Strategy, run_compaction,
};
use crate::config::StorageConfig;
use crate::error::{Result, StorageError};
use crate::memtable::{ChunkPool, MemPartition, Memtable, single_parts};
use crate::read::{
    PartitionData, PartitionRange, ReadCommand, ReadResult, in_range, limit, live_partition,
};
use crate::rowcache::{DefragSlice, RowCache, RowCacheStats};
use crate::sstable::{SSTableReader, SSTableWriter, parse_toc_name};

/// What a range read that stopped for the disk waits for ([`ShardStorage::try_read`]).
pub const SCAN_WAIT_BYTES: usize = 1 << 20;

/// Counters for nodetool/metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StorageMetrics {
    pub writes: u64,
    pub reads: u64,
    pub memtable_bytes: u64,
    pub memtable_partitions: u64,
    pub sstable_count: u64,
    pub sstable_bytes: u64,
    pub flushes: u64,
    pub flushed_bytes: u64,
    pub compactions: u64,
    /// Strategy compactions a major compaction stopped before they finished.
    pub compactions_stopped: u64,
    /// Compactions submitted to the shard's second compaction thread
    /// ([`StorageConfig::large_compaction_bytes`]).
    pub large_compactions: u64,
    pub compacted_bytes_in: u64,
    pub compacted_bytes_out: u64,
    pub pending_flushes: u64,
    pub pending_compactions: u64,
    pub commitlog_bytes: u64,
    pub commitlog_segments: u64,
    /// Discarded segment files kept for reuse ([`Commitlog::set_reuse_limit`]).
    pub commitlog_spare_segments: u64,
    /// New segments that reused a discarded segment's file.
    pub commitlog_reused_segments: u64,
    /// Commitlog writes that fell back from the segment's mapping to `pwritev`, for a
    /// reused file's page no longer in the page cache ([`Commitlog::map_fallbacks`]).
    pub commitlog_map_fallbacks: u64,
    /// Bytes of replaced flush outputs' Data.db files kept for flushes ([`crate::spare`]).
    pub spare_data_bytes: u64,
    /// Flushes that wrote their Data.db over such a spare file.
    pub spare_data_reused: u64,
    /// Bytes of memtable arena chunks kept for the next memtables ([`ChunkPool`]).
    pub memtable_pool_bytes: u64,
    /// Memtable arena chunks newly allocated, and taken from those kept.
    pub memtable_chunks_fresh: u64,
    pub memtable_chunks_reused: u64,
    /// Memtable arena chunks faulted in off the shard ([`ChunkPool::top_up`]).
    pub memtable_chunks_prefaulted: u64,
    /// `fdatasync`s of commitlog segments (one per group-commit round in batch/group mode).
    pub commitlog_syncs: u64,
    /// Writes (`pwrite`s) handing buffered commitlog entries to the OS.
    pub commitlog_writes: u64,
    pub corrupt_sstables: u64,
    /// Reads that found bytes they needed outside the page cache and went back to the
    /// event loop while a helper thread read them ([`ShardStorage::try_read`]).
    pub disk_waits: u64,
    /// Times a running compaction became owed the shard's time (its reads' amplification,
    /// [`StorageConfig::compaction_grant_amplification`], or the jobs queued behind it,
    /// [`StorageConfig::compaction_grant_pending`]), and slices of time the shard
    /// granted its background threads (`crate::grant`).
    pub compaction_owed_windows: u64,
    pub granted_slices: u64,
    pub background_errors: u64,
    /// Writes that waited in `admit` for a flush to free memtable memory.
    pub write_memory_waits: u64,
    /// Bytes compaction still has to write ([`crate::compaction::backlog_bytes`], summed
    /// over tables) and the share of its thread the backlog controller gives it (per-mille).
    pub compaction_backlog_bytes: u64,
    pub compaction_share_permille: u64,
    pub row_cache_hits: u64,
    pub row_cache_misses: u64,
    pub row_cache_insertions: u64,
    pub row_cache_evictions: u64,
    pub row_cache_flush_replacements: u64,
    pub row_cache_defrag_moves: u64,
    pub row_cache_rejections: u64,
    pub row_cache_bytes: u64,
    pub row_cache_partitions: u64,
    /// `sstables_per_read[i]` = reads that touched i SSTables (last bucket: 15 or more).
    pub sstables_per_read: [u64; 16],
}

/// Per-table numbers (nodetool tablestats).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableStats {
    pub memtable_bytes: u64,
    pub memtable_partitions: u64,
    pub flushing_memtables: u64,
    pub sstable_count: u64,
    pub sstable_bytes: u64,
    pub sstable_uncompressed_bytes: u64,
    pub estimated_partitions: u64,
    pub sstable_levels: Vec<u32>,
}

struct FlushingMemtable {
    job: u64,
    mem: Arc<Memtable>,
    /// The memtable got every write of the table in `[lower, upper)`.
    lower: LogPosition,
    upper: LogPosition,
    failed: bool,
    /// Its SSTable is in the set; the row cache is still being brought up to date with it
    /// (see [`CacheUpdate`]). Reads keep merging it meanwhile (its data is then read
    /// twice, which reconciliation makes harmless).
    installed: bool,
}

/// A flushed memtable whose partitions the row cache has yet to take: done in slices
/// between other work, never in one long step (a flush of 600k partitions against a full
/// cache held the shard for ~0.9 s). The flush job counts as finished (its memory freed,
/// its waiters answered) when this is.
struct CacheUpdate {
    table: TableId,
    job: u64,
    /// The last partition done.
    done_up_to: Option<PartitionKey>,
}

/// Partitions of a flushed memtable merged into the row cache per slice (~1 ms: a merge
/// into a cached entry costs a few µs), unless [`SHARD_SLICE_TIME`] runs out first.
const CACHE_UPDATE_SLICE: usize = 256;
/// Partitions merged between looks at the clock within a cache update slice.
const CACHE_UPDATE_STEP: usize = 16;
/// The longest a slice of background work on the shard (a cache update's, a
/// defragmentation's) runs before requests get their turn. Both were sized by count to take
/// about a millisecond; a count cannot know what the memory costs (a flush's install, with
/// its first cache update slice, held the shard 24-37 ms in make bench on the Intel VM).
const SHARD_SLICE_TIME: Duration = Duration::from_micros(500);

/// The most memtable chunks kept faulted in ahead of the shard's writes
/// ([`pool_reserve_chunks`]), in bytes.
const POOL_RESERVE_MAX_BYTES: u64 = 64 << 20;

/// How many chunks the shard's [`ChunkPool`] is topped up to off the shard
/// ([`ChunkPool::top_up`]) after its memtables took `taken` chunks since the last check
/// (one [`DEFRAG_CHECK`]): twice that, so the writes until the next check find their
/// chunks faulted in, and at least [`crate::alloc::PREFAULT_RESERVE`]'s worth; at most
/// [`POOL_RESERVE_MAX_BYTES`].
fn pool_reserve_chunks(taken: u64) -> usize {
    let chunk = crate::memtable::ARENA_CHUNK_BYTES as u64;
    let min = crate::alloc::PREFAULT_RESERVE / chunk;
    let max = POOL_RESERVE_MAX_BYTES / chunk;
    usize::try_from(taken.saturating_mul(2).clamp(min, max)).unwrap_or(usize::MAX)
}

/// Row cache entries one defragmentation slice looks at ([`ShardStorage::run_defrag`]):
/// about a millisecond of the shard when most of them move. At one slice per
/// [`DEFRAG_TICK`], a pass over 2.4M entries takes 6 s: make bench's switch from
/// `standard1` to the IoT mixes fragments about 1 GB in 20 s.
const DEFRAG_SLICE: usize = 4096;
/// How often the allocator's fragmentation is checked while there is none.
const DEFRAG_CHECK: Duration = Duration::from_millis(250);
/// Pause between defragmentation slices while the allocator reports fragmentation.
const DEFRAG_TICK: Duration = Duration::from_millis(10);
/// The shortest pause after a slice that [`SHARD_SLICE_TIME`] cut short: such a slice is
/// followed sooner, in proportion to the share of [`DEFRAG_SLICE`] it got through, so
/// that the pass keeps its pace of a slice per tick while no slice holds the shard long.
/// With moves at ~1.3 µs (make bench's switch to the IoT mixes on the AMD VM: half of the
/// entries move) a cut slice gets through ~400 entries, and pausing a whole tick after
/// each made a pass over 1.4M entries take 36 s instead of ~6, while the slab slack grew
/// to 700 MB (`bench/stall/rss.sh`). At most a fifth of the shard goes to the slices.
const DEFRAG_TICK_MIN: Duration = Duration::from_millis(2);
/// Pause after a defragmentation pass that moved almost nothing, or after passes that
/// did not lower the allocator's slack.
const DEFRAG_BACKOFF: Duration = Duration::from_secs(30);

/// One episode of row cache defragmentation ([`ShardStorage::run_defrag`]): decides the
/// pause after each slice. Slices follow one another every [`DEFRAG_TICK`]; at the end of
/// a pass over the key map, the episode pauses for [`DEFRAG_BACKOFF`] when the pass moved
/// fewer than one entry in 100 it looked at (the slabs are about evenly used: moving
/// helps little), or when three passes in a row ended with no less slack than they started
/// with (the slack is not the cache's, or churn outpaces the moves; a pass over make
/// bench's 2.4M entries takes ~6 s, and the switch to the IoT mixes grows the slack for
/// ~12 s while the moves keep up with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DefragEpisode {
    moved: usize,
    examined: usize,
    /// The allocator's slack when the current pass started.
    pass_slack: u64,
    /// Passes in a row that did not lower the slack.
    stalled: u32,
}

impl DefragEpisode {
    fn new(slack: u64) -> Self {
        DefragEpisode {
            moved: 0,
            examined: 0,
            pass_slack: slack,
            stalled: 0,
        }
    }

    /// The pause before the slice after `slice` within a pass: a tick, or less after a
    /// slice cut short by its deadline ([`DEFRAG_TICK_MIN`]).
    fn tick(slice: DefragSlice) -> Duration {
        if !slice.cut {
            return DEFRAG_TICK;
        }
        let share = slice.examined.min(DEFRAG_SLICE) as u32;
        (DEFRAG_TICK * share / DEFRAG_SLICE as u32).max(DEFRAG_TICK_MIN)
    }

    /// The pause after `slice`, the allocator's slack being `slack` before it.
    fn after(&mut self, slice: DefragSlice, slack: u64) -> Duration {
        self.moved += slice.moved;
        self.examined += slice.examined;
        if !slice.wrapped {
            return Self::tick(slice);
        }
        let few = self.moved * 100 < self.examined.max(1);
        self.stalled = if slack >= self.pass_slack {
            self.stalled + 1
        } else {
            0
        };
        let stalled = self.stalled >= 3;
        tracing::debug!(
            moved = self.moved,
            examined = self.examined,
            slack_at_start = self.pass_slack,
            slack = slack,
            backoff = few || stalled,
            "row cache defragmentation pass done"
        );
        *self = DefragEpisode {
            stalled: if stalled { 0 } else { self.stalled },
            ..DefragEpisode::new(slack)
        };
        if few || stalled {
            DEFRAG_BACKOFF
        } else {
            Self::tick(slice)
        }
    }
}

/// A major compaction asked for ([`TableState::majors_waiting`]) until this drops, when
/// the strategy may start compactions again.
struct MajorWaiting {
    storage: ShardStorage,
    table: TableId,
}

impl Drop for MajorWaiting {
    fn drop(&mut self) {
        let auto = {
            let Ok(mut inner) = self.storage.inner.try_borrow_mut() else {
                tracing::error!(
                    "a major compaction of table {} ended while the shard's state was borrowed: \
                     the table's strategy compactions stay paused until the next major one",
                    self.table
                );
                return;
            };
            let Some(t) = inner.tables.get_mut(&self.table) else {
                return;
            };
            t.majors_waiting = t.majors_waiting.saturating_sub(1);
            t.majors_waiting == 0 && inner.cfg.auto_compaction
        };
        if auto {
            let _ = self.storage.start_compaction(self.table, false);
        }
    }
}

struct TableState {
    schema: Arc<TableSchema>,
    dir: PathBuf,
    memtable: Memtable,
    flushing: Vec<FlushingMemtable>,
    sstables: Vec<Arc<SSTableReader>>,
    compacting: HashSet<u64>,
    running_compactions: Vec<u64>,
    /// The controls and inputs of the strategy compactions among `running_compactions`
    /// (queued or running): a major compaction stops them or lets one that holds every
    /// SSTable go on at full speed ([`ShardStorage::compact_major`]).
    strategy_jobs: HashMap<u64, (JobControl, Vec<u64>)>,
    /// Major compactions asked for and not yet done: no strategy compaction starts while
    /// one waits or runs.
    majors_waiting: u32,
    next_generation: Arc<AtomicU64>,
    /// Commitlog entries of this table before this position are flushed or truncated.
    replay_from: LogPosition,
    /// The position `replay_from` asks to be recorded on disk (written by the janitor
    /// thread, or at once by TRUNCATE; see [`record_replay_position`]).
    replay_wanted: Arc<AtomicU64>,
    /// Position from which the active memtable receives the table's writes.
    active_since: LogPosition,
}

impl TableState {
    fn oldest_log_pos(&self) -> Option<LogPosition> {
        self.flushing
            .iter()
            .filter(|f| !f.installed)
            .filter_map(|f| f.mem.min_log_pos)
            .chain(self.memtable.min_log_pos)
            .min()
    }
}

enum BgResult {
    Flushed {
        table: TableId,
        job: u64,
        result: Result<Option<Box<SSTableReader>>>,
    },
    Compacted {
        table: TableId,
        job: u64,
        inputs: Vec<u64>,
        result: Result<(Vec<SSTableReader>, crate::compaction::CompactionTxn)>,
    },
}

type Job = Box<dyn FnOnce() + Send>;

/// What a maintenance rewrite ([`ShardStorage::rewrite`], `crate::maintenance`) runs over
/// on the compaction thread.
pub struct RewriteInput {
    pub schema: Arc<TableSchema>,
    pub dir: PathBuf,
    pub next_generation: Arc<AtomicU64>,
    /// The live SSTables the outputs replace (marked compacting while the job runs).
    pub inputs: Vec<Arc<SSTableReader>>,
    /// Generations in the table directory that are not in service (unreadable at open, or
    /// taken out after a checksum failure), when asked for; the job may replace them too.
    pub out_of_service: Vec<u64>,
    /// gc_grace and overlap facts of the rest of the table, as for a compaction.
    pub purge: PurgeContext,
}

/// A maintenance rewrite: its published outputs and committed transaction log.
pub type RewriteWork = Box<
    dyn FnOnce(RewriteInput) -> Result<(Vec<SSTableReader>, crate::compaction::CompactionTxn)>
        + Send,
>;

struct Worker {
    tx: Option<mpsc::Sender<Job>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// A background thread at `nice` (see [`StorageConfig::background_nice`]), waiting
    /// at `gate` while the shard runs requests (`crate::grant::pass`) when given one.
    /// A `lower` thread also waits while another wants the shard's time.
    fn start(
        name: String,
        nice: i32,
        gate: Option<Arc<crate::grant::Gate>>,
        lower: bool,
    ) -> Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                crate::grant::set_thread_gate(gate, lower);
                if nice >= crate::config::SCHED_IDLE_NICE {
                    set_sched_idle();
                } else if nice != 0 {
                    // Linux nice values are per thread. Lowering one's own priority needs no
                    // privilege; a failure only leaves the thread at the shard's priority.
                    if let Err(e) =
                        rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice)
                    {
                        tracing::warn!("cannot set a background thread's nice to {nice}: {e}");
                    }
                }
                while let Ok(j) = rx.recv() {
                    j();
                }
            })
            .map_err(|e| {
                StorageError::Background(format!("cannot start a background thread: {e}"))
            })?;
        Ok(Worker {
            tx: Some(tx),
            handle: Some(handle),
        })
    }
    fn submit(&self, j: Job) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(j);
        }
    }
}

/// Puts the calling thread in `SCHED_IDLE` (no privilege needed to lower one's own
/// policy); a failure only leaves it in the fair class.
fn set_sched_idle() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc != 0 {
        tracing::warn!(
            "cannot put a background thread in SCHED_IDLE: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for Inner {
    /// Ends the pacing of running flushes: the flush worker is joined when its field drops,
    /// and a paced flush with no more writes to keep pace with would hold that up for
    /// `flush_pace_max`.
    fn drop(&mut self) {
        self.flush_pacer.hurry();
        self.granter.gate.open_for_good();
        self.warm_stop.store(true, AtomicOrdering::Relaxed);
    }
}

/// Sends a background result to the shard and counts it, so that reads and writes skip
/// polling the channel while nothing is pending.
#[derive(Clone)]
struct ResultSender {
    tx: mpsc::Sender<BgResult>,
    /// Results sent minus results received (briefly negative between a send and its
    /// count).
    pending: Arc<AtomicI64>,
}

impl ResultSender {
    /// False if the shard is gone.
    fn send(&self, r: BgResult) -> bool {
        let sent = self.tx.send(r).is_ok();
        self.pending.fetch_add(1, AtomicOrdering::Release);
        sent
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

struct Inner {
    cfg: StorageConfig,
    /// The memtables' arena chunks kept for the next memtables (see [`ChunkPool`]).
    chunk_pool: Arc<ChunkPool>,
    tables: HashMap<TableId, TableState, crate::rowcache::Hash>,
    metrics: StorageMetrics,
    memtable_total: u64,
    /// Part of `memtable_total` in memtables being flushed.
    flushing_total: u64,
    next_job: u64,
    results_tx: ResultSender,
    results_rx: mpsc::Receiver<BgResult>,
    /// Shared with `results_tx`.
    results_pending: Arc<AtomicI64>,
    /// Signalled by background threads when a result is ready.
    notify: Arc<Notify>,
    /// Wakes writers waiting in `admit` after a flush finished (or failed).
    flush_done: Arc<Notify>,
    /// CPU share of strategy-chosen compactions, set from the backlog.
    compaction_share: CompactionShare,
    /// What paced flushes keep pace with.
    flush_pacer: FlushPacer,
    /// Core time for background threads that want it (`crate::grant`).
    granter: crate::grant::Granter,
    /// Whether the requests' SSTable reads say a running compaction is owed core time
    /// ([`Inner::count_request`]).
    read_amp: crate::grant::ReadAmplification,
    /// Share of the core the compaction backlog is owed while a compaction is pending
    /// ([`StorageConfig::compaction_grant_backlog`]).
    backlog_grant_share: f64,
    /// Failed flushes so far, and the last one's error (for writers waiting in `admit`).
    flush_failures: u64,
    last_flush_error: Option<String>,
    /// Waiters per job id.
    waiters: HashMap<u64, Vec<oneshot::Sender<Result<()>>>>,
    flusher: Worker,
    compactor: Worker,
    /// Strategy compactions of at least [`StorageConfig::large_compaction_threshold`] (and
    /// major ones) run here, so that a long merge of a higher tier does not hold the
    /// small merges that retire flush outputs behind it (`None`: all run on `compactor`).
    compactor_large: Option<Worker>,
    /// File work that may block for long on a busy disk (an fsync waits for the journal,
    /// unlinking a large SSTable frees its extents): never on the shard thread.
    janitor: Worker,
    /// Faults memory in for the shard's arena ahead of its use (`run_defrag`).
    prefaulter: Worker,
    /// Reads compaction outputs into the page cache (`crate::warm`), off the compaction
    /// thread so that the next compaction does not wait for it; only with
    /// `warm_compaction_outputs`.
    warmer: Option<Worker>,
    /// Set when the storage closes: a warming in progress stops.
    warm_stop: Arc<AtomicBool>,
    /// Serializes writes of replay-position files (janitor and TRUNCATE).
    replay_lock: Arc<std::sync::Mutex<()>>,
    /// Data.db files of replaced flush outputs, for flushes to write over.
    spares: crate::spare::SparePool,
    /// Flushed memtables the row cache has yet to take, oldest first.
    cache_updates: std::collections::VecDeque<CacheUpdate>,
    closed: bool,
    /// Verified, decompressed SSTable blocks for point reads.
    block_cache: BlockCache,
    /// SSTable-side content of hot partitions (see `rowcache.rs` for what keeps it valid).
    row_cache: RowCache,
    /// Running maintenance rewrites: unlike compactions, they may change the content.
    rewrite_jobs: HashSet<u64>,
}

impl Inner {
    /// Owes compaction its backlog's share of the core while a compaction is pending.
    fn update_backlog_grant(&mut self) {
        let share = if self.metrics.pending_compactions > 0 {
            self.backlog_grant_share
        } else {
            0.0
        };
        self.granter.set_backlog_share(share);
    }

    /// Counts a request that read `sstables` SSTables; at the end of each window of
    /// requests decides whether a running compaction is owed the shard's time: its reads
    /// read many SSTables each ([`StorageConfig::compaction_grant_amplification`]), or
    /// compactions wait behind the running one ([`StorageConfig::compaction_grant_pending`]).
    #[inline]
    fn count_request(&mut self, sstables: u32) {
        if let Some(high) = self.read_amp.read(sstables) {
            let owed = crate::grant::compaction_owed(
                high,
                self.metrics.pending_compactions,
                self.cfg.compaction_grant_pending,
            );
            if owed && !self.granter.owed() {
                self.metrics.compaction_owed_windows += 1;
            }
            self.granter.set_owed(owed);
        }
    }
}

/// Whether the active memtables are over their share of the budget, and whether the
/// commitlog is over its total space (either starts a flush).
#[inline]
fn flush_thresholds(inner: &Inner, log: &Commitlog) -> (bool, bool) {
    // Active memtables may use a share of the budget (`flush_active_share`); the rest
    // absorbs writes while they are flushed and the row cache takes the flushed rows.
    (
        inner.memtable_total.saturating_sub(inner.flushing_total)
            > inner.cfg.flush_threshold_bytes(),
        log.total_bytes() > inner.cfg.commitlog_total_space_bytes,
    )
}

/// One shard's storage engine.
#[derive(Clone)]
pub struct ShardStorage {
    inner: Rc<RefCell<Inner>>,
    log: Rc<RefCell<Commitlog>>,
}

fn table_dir(data_dir: &Path, s: &TableSchema) -> PathBuf {
    data_dir
        .join(&s.keyspace)
        .join(format!("{}-{}", s.name, s.id.to_simple_string()))
}

/// Lets the other tasks of the shard run, and the runtime poll its sockets: tokio's
/// `yield_now` defers the wake-up until the I/O driver has been polled (a task that woke
/// itself at once would keep the ready queue busy and sockets would be polled only every
/// 61 task polls: a long cache update then stalled requests ~100 ms).
async fn yield_once() {
    tokio::task::yield_now().await
}

/// An install of a background result taking this long on the shard thread is logged.
const SLOW_INSTALL: Duration = Duration::from_millis(20);

/// Per-table file holding the commitlog position replay starts from (u64 LE + crc32c):
/// everything before it was flushed to SSTables or truncated.
const REPLAY_FILE: &str = "replay_position";

fn read_replay_position(dir: &Path) -> LogPosition {
    let Ok(b) = fs::read(dir.join(REPLAY_FILE)) else {
        return 0;
    };
    if b.len() != 12 || crc32c::crc32c(&b[0..8]).to_le_bytes() != b[8..12] {
        tracing::warn!(
            "{} is unreadable; replaying the whole commitlog",
            dir.join(REPLAY_FILE).display()
        );
        return 0;
    }
    b.get(0..8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn write_replay_position(dir: &Path, pos: LogPosition) -> Result<()> {
    let tmp = dir.join(format!("{REPLAY_FILE}.tmp"));
    let fin = dir.join(REPLAY_FILE);
    let mut b = pos.to_le_bytes().to_vec();
    b.extend_from_slice(&crc32c::crc32c(&pos.to_le_bytes()).to_le_bytes());
    fs::write(&tmp, &b).map_err(|e| StorageError::io(&tmp, e))?;
    fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| StorageError::io(&tmp, e))?;
    fs::rename(&tmp, &fin).map_err(|e| StorageError::io(&fin, e))?;
    Ok(())
}

/// Records the highest position asked for in `wanted` in `dir`'s replay-position file,
/// under `lock` (so a slower earlier write never lands after a later one: positions only
/// grow). A position recorded late only makes a restart replay entries that are already
/// flushed, which is harmless (reconciliation is idempotent).
fn record_replay_position(
    dir: &Path,
    wanted: &AtomicU64,
    lock: &std::sync::Mutex<()>,
) -> Result<()> {
    let _g = lock.lock().unwrap_or_else(|p| p.into_inner());
    write_replay_position(dir, wanted.load(AtomicOrdering::Acquire))
}

/// Opens a table directory: removes leftovers of unfinished writes, opens SSTables.
fn open_table_dir(dir: &Path, corrupt: &mut u64) -> Result<(Vec<Arc<SSTableReader>>, u64)> {
    fs::create_dir_all(dir).map_err(|e| StorageError::io(dir, e))?;
    crate::compaction::recover_compactions(dir);
    let mut gens = Vec::new();
    let mut max_gen = 0;
    let rd = fs::read_dir(dir).map_err(|e| StorageError::io(dir, e))?;
    let mut all = Vec::new();
    for e in rd {
        let e = e.map_err(|e| StorageError::io(dir, e))?;
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with("tmp-") {
            let _ = fs::remove_file(e.path());
            continue;
        }
        if let Some(g) = parse_toc_name(&name) {
            gens.push(g);
        }
        all.push(name);
    }
    for name in &all {
        if let Some(g) = name
            .strip_prefix(crate::sstable::FORMAT_PREFIX)
            .and_then(|r| r.strip_prefix('-'))
            .and_then(|r| r.split('-').next())
            .and_then(|g| g.parse::<u64>().ok())
        {
            max_gen = max_gen.max(g);
            if !gens.contains(&g) {
                // No TOC: an SSTable whose write never completed.
                let _ = fs::remove_file(dir.join(name));
            }
        }
    }
    gens.sort();
    let mut out = Vec::new();
    for g in gens {
        match SSTableReader::open(dir, g) {
            Ok(r) => out.push(Arc::new(r)),
            Err(e) => {
                tracing::error!(
                    "SSTable {g} in {} is unreadable and out of service: {e}",
                    dir.display()
                );
                *corrupt += 1;
            }
        }
    }
    Ok((out, max_gen + 1))
}

impl ShardStorage {
    /// Opens the shard: loads SSTables and replays the commitlog.
    pub fn open(cfg: StorageConfig, tables: Vec<Arc<TableSchema>>) -> Result<(Self, ReplayReport)> {
        fs::create_dir_all(&cfg.data_dir).map_err(|e| StorageError::io(&cfg.data_dir, e))?;
        let mut states = HashMap::default();
        let mut corrupt = 0;
        let chunk_pool = ChunkPool::new(cfg.memtable_budget_bytes);
        for s in tables {
            let dir = table_dir(&cfg.data_dir, &s);
            let (sstables, next) = open_table_dir(&dir, &mut corrupt)?;
            states.insert(
                s.id,
                TableState {
                    memtable: Memtable::with_pool(s.clone(), Some(chunk_pool.clone())),
                    schema: s,
                    replay_wanted: Arc::new(AtomicU64::new(0)),
                    replay_from: read_replay_position(&dir),
                    active_since: 0,
                    dir,
                    flushing: Vec::new(),
                    sstables,
                    compacting: HashSet::new(),
                    running_compactions: Vec::new(),
                    strategy_jobs: HashMap::new(),
                    majors_waiting: 0,
                    next_generation: Arc::new(AtomicU64::new(next)),
                },
            );
        }
        let log_dir = cfg.data_dir.join("commitlog");
        let mut report = ReplayReport::default();
        let (mut replayed, mut skipped) = (0u64, 0u64);
        let segs = commitlog::replay(
            &log_dir,
            cfg.commit_failure_policy,
            &mut report,
            |pos, m| match states.get_mut(&m.table) {
                Some(t) if pos >= t.replay_from => {
                    t.memtable.apply(&m.key, &m.update, Some(pos));
                    replayed += 1;
                }
                _ => skipped += 1,
            },
        )?;
        report.mutations_replayed = replayed;
        report.mutations_skipped = skipped;
        let last_id = segs.last().map_or(0, |s| s.0);
        let mut log = Commitlog::open(
            &log_dir,
            cfg.commitlog_sync,
            cfg.commitlog_segment_size_bytes,
            last_id,
            cfg.shard,
            cfg.commitlog_mmap,
        )?;
        log.adopt_replayed(segs);
        if cfg.commitlog_reuse_segments {
            log.set_reuse_limit(
                (cfg.commitlog_total_space_bytes / cfg.commitlog_segment_size_bytes.max(1))
                    as usize,
            );
        }
        let (results_tx, results_rx) = mpsc::channel();
        let results_pending = Arc::new(AtomicI64::new(0));
        let results_tx = ResultSender {
            tx: results_tx,
            pending: results_pending.clone(),
        };
        let memtable_total = states.values().map(|t| t.memtable.size_bytes).sum();
        let shard = cfg.shard;
        let nice = cfg.background_nice;
        let flush_nice = cfg.flush_nice;
        let warm = cfg.warm_compaction_outputs;
        let granter =
            crate::grant::Granter::new(cfg.grant_slice, cfg.grant_every, cfg.background_gate);
        let read_amp = crate::grant::ReadAmplification::new(cfg.compaction_grant_amplification);
        let gate = cfg.background_gate.then(|| granter.gate.clone());
        let metrics = StorageMetrics {
            corrupt_sstables: corrupt,
            ..Default::default()
        };
        let block_cache = BlockCache::new(cfg.block_cache_capacity());
        let row_cache = RowCache::new(cfg.row_cache_capacity(), cfg.row_cache_partition_max());
        let spares = crate::spare::SparePool::open(
            &cfg.data_dir,
            cfg.spare_data_bytes
                .unwrap_or(cfg.memtable_budget_bytes.saturating_mul(2)),
        );
        let large_compactions = cfg.large_compaction_threshold();
        let inner = Inner {
            chunk_pool,
            spares,
            block_cache,
            row_cache,
            rewrite_jobs: HashSet::new(),
            cfg,
            tables: states,
            metrics,
            memtable_total,
            flushing_total: 0,
            next_job: 1,
            results_tx,
            results_rx,
            results_pending,
            notify: Arc::new(Notify::new()),
            flush_done: Arc::new(Notify::new()),
            compaction_share: CompactionShare::default(),
            flush_pacer: FlushPacer::default(),
            granter,
            read_amp,
            backlog_grant_share: 0.0,
            flush_failures: 0,
            last_flush_error: None,
            waiters: HashMap::new(),
            flusher: Worker::start(format!("flush-{shard}"), flush_nice, gate.clone(), false)?,
            compactor_large: (large_compactions > 0)
                .then(|| Worker::start(format!("compact-lg-{shard}"), nice, gate.clone(), true))
                .transpose()?,
            compactor: Worker::start(format!("compaction-{shard}"), nice, gate, true)?,
            janitor: Worker::start(format!("janitor-{shard}"), 0, None, false)?,
            prefaulter: Worker::start(format!("prefault-{shard}"), nice, None, false)?,
            warmer: warm
                .then(|| Worker::start(format!("warm-{shard}"), nice, None, false))
                .transpose()?,
            warm_stop: Arc::new(AtomicBool::new(false)),
            replay_lock: Arc::new(std::sync::Mutex::new(())),
            cache_updates: std::collections::VecDeque::new(),
            closed: false,
        };
        let st = ShardStorage {
            inner: Rc::new(RefCell::new(inner)),
            log: Rc::new(RefCell::new(log)),
        };
        st.discard_segments();
        Ok((st, report))
    }

    pub fn config(&self) -> StorageConfig {
        self.inner.borrow().cfg.clone()
    }

    /// What the shard's event loop tells when it parks (`false`) and unparks (`true`):
    /// the shard's idle time, which decides its grants (`crate::grant::Granter`), and with
    /// [`StorageConfig::background_gate`] the flush and compaction threads run while it
    /// is parked (`crate::grant::Gate`). Register it with the runtime
    /// (`amphora_rt::set_park_hook`).
    pub fn park_hook(&self) -> impl Fn(bool) + 'static {
        let gate = self.inner.borrow().granter.gate.clone();
        move |running| gate.shard_running(running)
    }

    /// Adds a table (creates its directory; opens SSTables already there).
    pub fn add_table(&self, schema: Arc<TableSchema>) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        if inner.tables.contains_key(&schema.id) {
            return Err(StorageError::TableExists(schema.id));
        }
        let dir = table_dir(&inner.cfg.data_dir, &schema);
        let mut corrupt = 0;
        let (sstables, next) = open_table_dir(&dir, &mut corrupt)?;
        inner.metrics.corrupt_sstables += corrupt;
        let pool = inner.chunk_pool.clone();
        inner.tables.insert(
            schema.id,
            TableState {
                memtable: Memtable::with_pool(schema.clone(), Some(pool)),
                schema,
                replay_wanted: Arc::new(AtomicU64::new(0)),
                replay_from: read_replay_position(&dir),
                active_since: 0,
                dir,
                flushing: Vec::new(),
                sstables,
                compacting: HashSet::new(),
                running_compactions: Vec::new(),
                strategy_jobs: HashMap::new(),
                majors_waiting: 0,
                next_generation: Arc::new(AtomicU64::new(next)),
            },
        );
        Ok(())
    }

    /// Replaces a table's schema (same id). Data stays; new writes use the new schema.
    pub fn alter_table(&self, schema: Arc<TableSchema>) -> Result<()> {
        let mut inner = self.inner.borrow_mut();
        let t = inner
            .tables
            .get_mut(&schema.id)
            .ok_or(StorageError::UnknownTable(schema.id))?;
        t.schema = schema.clone();
        // Memtables keep their comparator: clustering types cannot change.
        t.memtable.schema = schema.clone();
        inner.row_cache.invalidate_table(schema.id);
        Ok(())
    }

    /// Drops a table and deletes its files.
    pub fn drop_table(&self, id: TableId) -> Result<()> {
        let t = {
            let mut inner = self.inner.borrow_mut();
            let t = inner
                .tables
                .remove(&id)
                .ok_or(StorageError::UnknownTable(id))?;
            let flushing: u64 = t.flushing.iter().map(|f| f.mem.size_bytes).sum();
            inner.memtable_total = inner
                .memtable_total
                .saturating_sub(t.memtable.size_bytes + flushing);
            inner.flushing_total = inner.flushing_total.saturating_sub(flushing);
            inner.row_cache.invalidate_table(id);
            t
        };
        for s in &t.sstables {
            s.delete_on_drop.store(true, AtomicOrdering::Relaxed);
        }
        let dir = t.dir.clone();
        drop(t);
        if let Err(e) = fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return Err(StorageError::io(&dir, e));
        }
        self.discard_segments();
        Ok(())
    }

    /// Removes all data of a table (memtables, SSTables); commitlog entries before now are
    /// ignored on replay.
    pub fn truncate(&self, id: TableId) -> Result<()> {
        let pos = {
            let mut l = self.log.borrow_mut();
            l.write_out()?;
            l.current_position()
        };
        let mut inner = self.inner.borrow_mut();
        let lock = inner.replay_lock.clone();
        let pool = inner.chunk_pool.clone();
        let t = inner
            .tables
            .get_mut(&id)
            .ok_or(StorageError::UnknownTable(id))?;
        t.replay_wanted.fetch_max(pos, AtomicOrdering::AcqRel);
        record_replay_position(&t.dir, &t.replay_wanted, &lock)?;
        t.replay_from = pos;
        t.active_since = pos;
        let flushing: u64 = t.flushing.iter().map(|f| f.mem.size_bytes).sum();
        let freed = t.memtable.size_bytes + flushing;
        t.memtable = Memtable::with_pool(t.schema.clone(), Some(pool));
        t.flushing.clear();
        for s in t.sstables.drain(..) {
            SSTableReader::delete_files_after_reads(&s);
        }
        inner.memtable_total = inner.memtable_total.saturating_sub(freed);
        inner.flushing_total = inner.flushing_total.saturating_sub(flushing);
        inner.row_cache.invalidate_table(id);
        drop(inner);
        self.discard_segments();
        Ok(())
    }

    pub fn table_ids(&self) -> Vec<TableId> {
        self.inner.borrow().tables.keys().copied().collect()
    }

    pub fn schema(&self, id: TableId) -> Option<Arc<TableSchema>> {
        self.inner
            .borrow()
            .tables
            .get(&id)
            .map(|t| t.schema.clone())
    }

    /// Appends to the commitlog and memtable. The returned ack resolves when the write is
    /// durable per the sync mode; it borrows nothing.
    pub fn apply(&self, m: &Mutation) -> Result<WriteAck> {
        // PERF-CRITICAL: one table lookup, no allocation; the flush checks are two
        // comparisons unless a threshold is crossed.
        let results_pending = self
            .inner
            .borrow()
            .results_pending
            .load(AtomicOrdering::Acquire);
        if results_pending > 0 {
            self.poll_background();
        }
        let (end, flush_needed) = {
            let mut inner = self.inner.borrow_mut();
            let inner = &mut *inner;
            if inner.closed {
                return Err(StorageError::ShutDown);
            }
            let Some(t) = inner.tables.get_mut(&m.table) else {
                return Err(StorageError::UnknownTable(m.table));
            };
            let mut log = self.log.borrow_mut();
            let (start, end) = log.append(m)?;
            let before = t.memtable.size_bytes;
            t.memtable.apply(&m.key, &m.update, Some(start));
            inner.memtable_total += t.memtable.size_bytes - before;
            inner.flush_pacer.wrote(t.memtable.size_bytes - before);
            inner.metrics.writes += 1;
            inner.compaction_share.note_foreground();
            inner.granter.on_request();
            inner.count_request(0);
            let (over_mem, over_log) = flush_thresholds(inner, &log);
            (end, over_mem || over_log)
        };
        if flush_needed {
            self.maybe_flush_for_memory();
        }
        Ok(WriteAck::new(self.log.clone(), end))
    }

    /// Whether a write's [`WriteAck`] resolves without waiting for a sync (the commitlog
    /// is in periodic mode): [`WriteAck::now`] then always has its result.
    pub fn acks_at_once(&self) -> bool {
        matches!(
            self.log.borrow().mode(),
            crate::config::SyncMode::Periodic { .. }
        )
    }

    /// Whether [`ShardStorage::admit`] would let a write go ahead at once: the shard is
    /// open and its memtables fit in `memtable_budget_bytes`. Lets a caller apply a
    /// write without building (and moving) a future when nothing has to wait.
    #[inline]
    pub fn admits_now(&self) -> bool {
        self.poll_background();
        let inner = self.inner.borrow();
        !inner.closed && inner.memtable_total <= inner.cfg.memtable_budget_bytes
    }

    /// Waits until the shard's memtables fit in `memtable_budget_bytes` (write
    /// backpressure: call it before `apply`). Returns at once under the budget; over it,
    /// waits for the running flushes (reads keep being served meanwhile), and fails with
    /// `MemtableFull` if a flush fails while it waits, rather than waiting for a disk that
    /// may not come back.
    pub fn admit(&self) -> impl Future<Output = Result<()>> + 'static {
        let me = self.clone();
        async move {
            // Under the budget nothing waits, so there is no wakeup to lose: no waiters
            // to create (two allocations per write otherwise).
            if me.admits_now() {
                return Ok(());
            }
            let mut waited = false;
            loop {
                let (notify, flush_done) = {
                    let inner = me.inner.borrow();
                    (inner.notify.clone(), inner.flush_done.clone())
                };
                // Created before the check so a wakeup between the two is not lost.
                let mut freed = Box::pin(flush_done.notified());
                let mut ready = Box::pin(notify.notified());
                me.poll_background();
                let failures_before = {
                    let mut inner = me.inner.borrow_mut();
                    if inner.closed {
                        return Err(StorageError::ShutDown);
                    }
                    if inner.memtable_total <= inner.cfg.memtable_budget_bytes {
                        return Ok(());
                    }
                    if !waited {
                        waited = true;
                        inner.metrics.write_memory_waits += 1;
                    }
                    inner.flush_failures
                };
                // Memory a flush frees comes back when the row cache has taken it: help
                // (this writer waits anyway), in case nothing else advances the update.
                if me.advance_cache_updates(CACHE_UPDATE_SLICE) {
                    yield_once().await;
                    continue;
                }
                // Makes sure a flush is running (or resubmits a failed one).
                me.maybe_flush_for_memory();
                if me.inner.borrow().metrics.pending_flushes == 0 {
                    let started = me.start_largest_flush();
                    let inner = me.inner.borrow();
                    if inner.metrics.pending_flushes == 0 {
                        // Nothing will free memory (e.g. the commitlog cannot be written
                        // out before the switch): fail instead of waiting forever.
                        return Err(StorageError::MemtableFull {
                            memtable_bytes: inner.memtable_total,
                            budget_bytes: inner.cfg.memtable_budget_bytes,
                            cause: match started {
                                Err(e) => e.to_string(),
                                Ok(_) => "no flush could be started".into(),
                            },
                        });
                    }
                }
                std::future::poll_fn(|cx| {
                    if freed.as_mut().poll(cx).is_ready() || ready.as_mut().poll(cx).is_ready() {
                        std::task::Poll::Ready(())
                    } else {
                        std::task::Poll::Pending
                    }
                })
                .await;
                me.poll_background();
                let inner = me.inner.borrow();
                if inner.flush_failures > failures_before
                    && inner.memtable_total > inner.cfg.memtable_budget_bytes
                {
                    return Err(StorageError::MemtableFull {
                        memtable_bytes: inner.memtable_total,
                        budget_bytes: inner.cfg.memtable_budget_bytes,
                        cause: inner
                            .last_flush_error
                            .clone()
                            .unwrap_or_else(|| "unknown".into()),
                    });
                }
            }
        }
    }

    /// Flushes the table with the largest memtable, active or failed to flush.
    fn start_largest_flush(&self) -> Result<Option<u64>> {
        let largest = {
            let inner = self.inner.borrow();
            inner
                .tables
                .iter()
                .max_by_key(|(_, t)| {
                    t.memtable.size_bytes
                        + t.flushing
                            .iter()
                            .filter(|f| f.failed)
                            .map(|f| f.mem.size_bytes)
                            .sum::<u64>()
                })
                .map(|(id, _)| *id)
        };
        match largest {
            Some(id) => self.start_flush(id, false),
            None => Ok(None),
        }
    }

    /// Increments a counter cell: reads this counter id's shard, writes `clock + 1`.
    #[allow(clippy::too_many_arguments)]
    pub fn apply_counter_update(
        &self,
        table: TableId,
        key: PartitionKey,
        clustering: Clustering,
        column: ColumnId,
        delta: i64,
        timestamp: i64,
        counter_id: u128,
        now_seconds: i32,
    ) -> Result<WriteAck> {
        let schema = self
            .schema(table)
            .ok_or(StorageError::UnknownTable(table))?;
        let is_static = schema
            .column_by_id(column)
            .is_some_and(|c| c.kind == ColumnKind::Static);
        let mut cmd = ReadCommand::new(table, PartitionRange::Single(key.clone()), now_seconds);
        if !is_static {
            cmd.slices = vec![ClusteringSlice {
                start: ClusteringBound::inclusive(clustering.0.clone()),
                end: ClusteringBound::inclusive(clustering.0.clone()),
            }];
        }
        cmd.columns = Some(vec![column]);
        let r = self.read(&cmd)?;
        let current = r.partitions.first().and_then(|p| {
            let row = if is_static {
                p.static_row.as_ref()
            } else {
                p.rows.first()
            };
            match row.and_then(|r| r.cell(column)) {
                Some(ColumnData::Simple(c)) if c.is_counter => decode_counter_shards(&c.value)
                    .into_iter()
                    .find(|s| s.counter_id == counter_id),
                _ => None,
            }
        });
        let (clock, value) = current.map_or((0, 0), |s| (s.clock, s.value));
        let cell = Cell::counter(
            timestamp,
            &[CounterShard {
                counter_id,
                clock: clock + 1,
                value: value.wrapping_add(delta),
            }],
        );
        let row = Row {
            clustering: if is_static {
                Clustering::empty()
            } else {
                clustering
            },
            marker: None,
            deletion: None,
            cells: vec![(column, ColumnData::Simple(cell))],
        };
        let update = if is_static {
            PartitionUpdate {
                static_row: Some(row),
                ..Default::default()
            }
        } else {
            PartitionUpdate {
                rows: vec![row],
                ..Default::default()
            }
        };
        self.apply(&Mutation { table, key, update })
    }

    fn maybe_flush_for_memory(&self) {
        let (over_mem, over_log) = flush_thresholds(&self.inner.borrow(), &self.log.borrow());
        if over_mem {
            // Flush the largest memtable.
            let largest = {
                let inner = self.inner.borrow();
                inner
                    .tables
                    .iter()
                    .max_by_key(|(_, t)| t.memtable.size_bytes)
                    .map(|(id, _)| *id)
            };
            if let Some(id) = largest {
                let _ = self.start_flush(id, true);
            }
        }
        if over_log {
            // Flush every table holding data in the oldest segment.
            let oldest = self.log.borrow().oldest_segment_id();
            let ids: Vec<TableId> = {
                let inner = self.inner.borrow();
                inner
                    .tables
                    .iter()
                    .filter(|(_, t)| {
                        t.memtable
                            .min_log_pos
                            .is_some_and(|p| segment_of(p) <= oldest)
                    })
                    .map(|(id, _)| *id)
                    .collect()
            };
            for id in ids {
                let _ = self.start_flush(id, false);
            }
        }
    }

    /// Switches the table's memtable and submits its flush. Returns the job id, or None if
    /// there was nothing to flush. A `paced` flush (one started because the active
    /// memtables filled their share of the budget) keeps pace with the writes after it
    /// ([`StorageConfig::flush_pace_max`]); any other ends the pacing of those before it,
    /// since something waits for it and the flush thread runs them in order.
    fn start_flush(&self, id: TableId, paced: bool) -> Result<Option<u64>> {
        if !paced {
            self.inner.borrow().flush_pacer.hurry();
        }
        let upper = {
            let mut l = self.log.borrow_mut();
            l.write_out()?;
            l.current_position()
        };
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        let job = inner.next_job;
        let t = inner
            .tables
            .get_mut(&id)
            .ok_or(StorageError::UnknownTable(id))?;
        // Resubmit flushes that failed earlier.
        let mut submit: Vec<(u64, Arc<Memtable>)> = Vec::new();
        for f in t.flushing.iter_mut().filter(|f| f.failed) {
            f.failed = false;
            submit.push((f.job, f.mem.clone()));
        }
        let mut new_job = None;
        if !t.memtable.is_empty() {
            let next = Memtable::with_pool(t.schema.clone(), Some(inner.chunk_pool.clone()));
            let mem = std::mem::replace(&mut t.memtable, next);
            let mem = Arc::new(mem);
            inner.flushing_total += mem.size_bytes;
            inner.next_job += 1;
            let lower = std::mem::replace(&mut t.active_since, upper);
            t.flushing.push(FlushingMemtable {
                job,
                mem: mem.clone(),
                lower,
                upper,
                failed: false,
                installed: false,
            });
            submit.push((job, mem));
            new_job = Some(job);
        }
        for (job, mem) in submit {
            let dir = t.dir.clone();
            let gen_ = t.next_generation.fetch_add(1, AtomicOrdering::Relaxed);
            let tx = inner.results_tx.clone();
            let notify = inner.notify.clone();
            let upper = t
                .flushing
                .iter()
                .find(|f| f.job == job)
                .map_or(upper, |f| f.upper);
            inner.metrics.pending_flushes += 1;
            let hook = inner.cfg.before_flush.clone();
            let spares = inner.spares.clone();
            let direct = inner.cfg.flush_direct;
            // Compaction behind: spares (its retired inputs) will not come back soon.
            let behind = inner.cfg.flush_direct_behind;
            let direct_without_spare = behind > 0 && inner.metrics.pending_compactions >= behind;
            let wants = inner.granter.wants.clone();
            let pace = (paced && !inner.cfg.flush_pace_max.is_zero()).then(|| {
                inner.flush_pacer.pace(
                    inner.cfg.flush_threshold_bytes() as f64 * inner.cfg.flush_pace_share,
                    inner.cfg.flush_pace_max,
                    mem.partitions.len(),
                    wants.clone(),
                )
            });
            inner.flusher.submit(Box::new(move || {
                // Behind its pace or waited for: wants the shard's time while it works
                // (a paced flush stops wanting it while it naps ahead of its pace).
                let _want = wants.on();
                if let Some(h) = hook {
                    (h.0)();
                }
                let out = if direct {
                    FlushOut::Direct
                } else if direct_without_spare {
                    FlushOut::SpareOrDirect(&spares)
                } else {
                    FlushOut::Buffered(Some(&spares))
                };
                let result = flush_memtable(&dir, gen_, &mem, upper, pace.as_ref(), out)
                    .map(|o| o.map(Box::new));
                let _ = tx.send(BgResult::Flushed {
                    table: id,
                    job,
                    result,
                });
                notify.notify_one();
            }));
        }
        Ok(new_job)
    }

    /// Installs finished background work. Called by `apply`/`read` and the futures.
    pub fn poll_background(&self) {
        loop {
            let r = {
                let inner = self.inner.borrow();
                if inner.results_pending.load(AtomicOrdering::Acquire) <= 0 {
                    break;
                }
                let r = inner.results_rx.try_recv();
                if r.is_ok() {
                    inner.results_pending.fetch_sub(1, AtomicOrdering::Relaxed);
                }
                r
            };
            let Ok(r) = r else { break };
            self.install(r);
        }
    }

    /// Runs forever on the shard (spawn it with `spawn_local`), installing background
    /// results as soon as they are ready. Returns after `shutdown`.
    pub fn run_background(&self) -> impl Future<Output = ()> + 'static {
        let me = self.clone();
        async move {
            let mut foreground_seen = me.inner.borrow().compaction_share.foreground();
            loop {
                if me.advance_cache_updates(CACHE_UPDATE_SLICE) {
                    // One slice per turn: requests run between slices (never inside
                    // one: `poll_background`, which requests call, does not advance it).
                    // While requests keep arriving and memory is not short, the next
                    // slice waits a pause, so the update takes a small share of a busy
                    // shard instead of every other turn (a flush's update was a 0.5 s
                    // halving of the write rate; docs/benchmarks.md).
                    let pause = {
                        let inner = me.inner.borrow();
                        let busy = inner.compaction_share.busy_since(&mut foreground_seen);
                        // Once the room left in the budget is under half of what the
                        // update would free, the update is what the next writes wait on:
                        // paused, it freed the memtable only as the budget ran out, and at
                        // 90% of the write maximum the first flush after a read phase left
                        // every write waiting for memory (docs/benchmarks.md, "Memtable
                        // chunks faulted in off the shard; the row cache update's pause").
                        let budget = inner.cfg.memtable_budget_bytes;
                        let room = budget.saturating_sub(inner.memtable_total);
                        let roomy = inner.memtable_total <= budget / 8 * 7
                            && room.saturating_mul(2) >= inner.flushing_total;
                        (busy && roomy).then_some(inner.cfg.cache_update_pause)
                    };
                    if let Some(wait) = pause.filter(|w| !w.is_zero()) {
                        tokio::time::sleep(wait).await;
                    } else {
                        yield_once().await;
                    }
                } else {
                    let notify = me.inner.borrow().notify.clone();
                    notify.notified().await;
                }
                me.poll_background();
                if me.inner.borrow().closed {
                    return;
                }
            }
        }
    }

    fn install(&self, r: BgResult) {
        let started = std::time::Instant::now();
        let what = match &r {
            BgResult::Flushed { .. } => "flush",
            BgResult::Compacted { .. } => "compaction",
        };
        let phases = self.install_result(r);
        let took = started.elapsed();
        if took >= SLOW_INSTALL {
            // Everything else on this shard waited as long.
            let [set, segments, compaction, cache] = phases.map(|d| d.as_secs_f64() * 1e3);
            tracing::warn!(
                shard = self.inner.borrow().cfg.shard,
                "installing a {what} result held the shard for {} ms (SSTable set \
                 {set:.1} ms, commitlog segments {segments:.1} ms, next compaction \
                 {compaction:.1} ms, row cache slice {cache:.1} ms)",
                took.as_millis()
            );
        }
    }

    /// Installs `r`; returns how long its phases took (the SSTable set's update, the
    /// commitlog segments' release, the next compaction's choice, the first row cache
    /// slice), for the slow install warning.
    fn install_result(&self, r: BgResult) -> [Duration; 4] {
        let mut clock = std::time::Instant::now();
        let mut phases = [Duration::ZERO; 4];
        let mut lap = |i: usize| {
            let now = std::time::Instant::now();
            phases[i] = now - clock;
            clock = now;
        };
        let mut trigger_compaction = None;
        // A compaction's input deletions, for the janitor after the job's waiters.
        let mut deferred: Option<Box<dyn FnOnce() + Send>> = None;
        // A flush whose waiters are answered when the row cache has taken it.
        let mut cache_update = false;
        let (job, res) = {
            let mut inner = self.inner.borrow_mut();
            let inner = &mut *inner;
            match r {
                BgResult::Flushed { table, job, result } => {
                    inner.metrics.pending_flushes = inner.metrics.pending_flushes.saturating_sub(1);
                    inner.flush_done.notify_waiters();
                    let res = match (inner.tables.get_mut(&table), result) {
                        (Some(t), Ok(sst)) => {
                            let found = t.flushing.iter().position(|f| f.job == job);
                            if found.is_none() {
                                // The table was truncated while this flush ran.
                                if let Some(s) = &sst {
                                    s.delete_files();
                                }
                            }
                            if let Some(f) = found.and_then(|i| t.flushing.get_mut(i)) {
                                // Its SSTable joins the set; cached entries take its data
                                // in slices (`advance_cache_updates`), then it goes.
                                f.installed = true;
                                inner.cache_updates.push_back(CacheUpdate {
                                    table,
                                    job,
                                    done_up_to: None,
                                });
                                cache_update = true;
                            }
                            if let Some(s) = sst.filter(|_| found.is_some()) {
                                t.sstables.push(Arc::new(*s));
                            }
                            let flushed_to = t
                                .flushing
                                .iter()
                                .filter(|f| !f.installed)
                                .map(|f| f.lower)
                                .min()
                                .unwrap_or(t.active_since);
                            if flushed_to > t.replay_from {
                                t.replay_from = flushed_to;
                                t.replay_wanted
                                    .fetch_max(flushed_to, AtomicOrdering::AcqRel);
                                let (dir, wanted, lock) = (
                                    t.dir.clone(),
                                    t.replay_wanted.clone(),
                                    inner.replay_lock.clone(),
                                );
                                inner.janitor.submit(Box::new(move || {
                                    if let Err(e) = record_replay_position(&dir, &wanted, &lock) {
                                        tracing::warn!("cannot record the replay position: {e}");
                                    }
                                }));
                            }
                            inner.metrics.flushes += 1;
                            trigger_compaction = Some(table);
                            Ok(())
                        }
                        (Some(t), Err(e)) => {
                            tracing::error!("flush of table {table} failed: {e}");
                            inner.metrics.background_errors += 1;
                            inner.flush_failures += 1;
                            inner.last_flush_error = Some(e.to_string());
                            if let Some(f) = t.flushing.iter_mut().find(|f| f.job == job) {
                                f.failed = true;
                            }
                            Err(e)
                        }
                        (None, Ok(Some(s))) => {
                            s.delete_files();
                            Ok(())
                        }
                        (None, _) => Ok(()),
                    };
                    (job, res)
                }
                BgResult::Compacted {
                    table,
                    job,
                    inputs,
                    result,
                } => {
                    inner.metrics.pending_compactions =
                        inner.metrics.pending_compactions.saturating_sub(1);
                    if inner.metrics.pending_compactions == 0 {
                        inner.granter.set_owed(false);
                        inner.update_backlog_grant();
                    }
                    let rewrite = inner.rewrite_jobs.remove(&job);
                    let now = inner.cfg.clock.now_seconds();
                    if let Some(t) = inner.tables.get_mut(&table) {
                        t.running_compactions.retain(|j| *j != job);
                        t.strategy_jobs.remove(&job);
                    }
                    let res = match (inner.tables.get_mut(&table), result) {
                        (Some(t), Ok((outs, txn)))
                            if !inputs
                                .iter()
                                .all(|g| t.sstables.iter().any(|s| s.generation == *g)) =>
                        {
                            // The inputs are gone (TRUNCATE): so are the outputs.
                            for o in outs {
                                o.delete_files();
                            }
                            let _ = fs::remove_file(&txn.path);
                            for g in &inputs {
                                t.compacting.remove(g);
                            }
                            Ok(())
                        }
                        (Some(t), Ok((outs, txn))) => {
                            // A compaction keeps the logical content unless it purges:
                            // row cache entries stay valid unless it may have.
                            let gc_before = now.saturating_sub(t.schema.options.gc_grace_seconds);
                            if rewrite
                                || t.sstables.iter().any(|s| {
                                    inputs.contains(&s.generation) && has_purgeable(s, gc_before)
                                })
                            {
                                inner.row_cache.invalidate_table(table);
                            }
                            let mut bytes_in = 0;
                            // Outputs replace inputs: the janitor deletes the inputs (open
                            // readers keep working on the unlinked files), then the log
                            // (until then a restart finishes the deletion from the log).
                            let mut done = Vec::with_capacity(inputs.len());
                            t.sstables.retain(|s| {
                                if inputs.contains(&s.generation) {
                                    bytes_in += s.data_size();
                                    done.push(s.clone());
                                    false
                                } else {
                                    true
                                }
                            });
                            let log = txn.path.clone();
                            let spares = inner.spares.clone();
                            deferred = Some(Box::new(move || {
                                for s in &done {
                                    spares.retire(s);
                                }
                                let _ = fs::remove_file(&log);
                            }));
                            for g in &inputs {
                                t.compacting.remove(g);
                            }
                            for o in outs {
                                inner.metrics.compacted_bytes_out += o.data_size();
                                t.sstables.push(Arc::new(o));
                            }
                            inner.metrics.compacted_bytes_in += bytes_in;
                            inner.metrics.compactions += 1;
                            trigger_compaction = Some(table);
                            Ok(())
                        }
                        (Some(t), Err(e @ StorageError::CompactionStopped)) => {
                            tracing::info!("compaction of table {table} stopped for a major one");
                            inner.metrics.compactions_stopped += 1;
                            for g in &inputs {
                                t.compacting.remove(g);
                            }
                            Err(e)
                        }
                        (Some(t), Err(e)) => {
                            tracing::error!("compaction of table {table} failed: {e}");
                            inner.metrics.background_errors += 1;
                            for g in &inputs {
                                t.compacting.remove(g);
                            }
                            Err(e)
                        }
                        (None, Ok((outs, txn))) => {
                            for o in outs {
                                o.delete_files();
                            }
                            let _ = fs::remove_file(&txn.path);
                            Ok(())
                        }
                        (None, Err(_)) => Ok(()),
                    };
                    (job, res)
                }
            }
        };
        lap(0);
        let waiters = if cache_update && res.is_ok() {
            Vec::new()
        } else {
            self.take_waiters(job)
        };
        let answer = move || {
            for w in waiters {
                let _ = w.send(match &res {
                    Ok(()) => Ok(()),
                    Err(e) => Err(StorageError::Background(e.to_string())),
                });
            }
        };
        // Unlinking segments took ~100 ms per flush under a compaction's writes: the
        // janitor does it, then answers the job's waiters (a flush's find the segments it
        // freed gone). A compaction's waiters (`nodetool compact`) are answered once its
        // outputs serve reads, as Cassandra answers once a compaction has committed: the
        // janitor deletes the inputs and then the transaction log after that (the four
        // inputs of make bench's major compaction, 684 MB, took 0.185 s to unlink).
        let segments = self.discardable_segments();
        if deferred.is_none() && segments.is_empty() {
            answer();
        } else {
            self.inner.borrow().janitor.submit(Box::new(move || {
                segments.finish();
                answer();
                if let Some(files) = deferred {
                    files();
                }
            }));
        }
        lap(1);
        self.refresh_compaction_share();
        if let Some(t) = trigger_compaction
            && self.inner.borrow().cfg.auto_compaction
        {
            let _ = self.start_compaction(t, false);
        }
        lap(2);
        if cache_update {
            // Done at once when the cache holds nothing of the table; else one slice here
            // and the rest between requests (`run_background`, or the flush's waiter).
            self.advance_cache_updates(CACHE_UPDATE_SLICE);
            self.inner.borrow().notify.notify_one();
        }
        lap(3);
        phases
    }

    /// Whether flushed memtables are still being merged into the row cache.
    fn cache_update_pending(&self) -> bool {
        !self.inner.borrow().cache_updates.is_empty()
    }

    /// Merges up to `budget` partitions of pending flushed memtables into the row cache
    /// (all of one at once when the cache holds nothing of its table); a memtable fully
    /// taken leaves `flushing`, frees its memory and answers its flush's waiters.
    /// Returns whether work is left.
    fn advance_cache_updates(&self, mut budget: usize) -> bool {
        // Bounded by time as well as by count (see SHARD_SLICE_TIME).
        let deadline = std::time::Instant::now() + SHARD_SLICE_TIME;
        loop {
            let finished = {
                let mut inner = self.inner.borrow_mut();
                let inner = &mut *inner;
                let Some(u) = inner.cache_updates.front_mut() else {
                    return false;
                };
                let mem = inner.tables.get(&u.table).and_then(|t| {
                    t.flushing
                        .iter()
                        .find(|f| f.job == u.job && f.installed)
                        .map(|f| (f.mem.clone(), t.schema.clone()))
                });
                match mem {
                    // Truncated or dropped meanwhile: nothing left to do.
                    None => inner.cache_updates.pop_front().map(|u| (u, false)),
                    Some((mem, schema)) => {
                        let (done, used) = inner.row_cache.merge_flushed_slice(
                            u.table,
                            &schema,
                            &mem,
                            &mut u.done_up_to,
                            budget.min(CACHE_UPDATE_STEP),
                        );
                        budget = budget.saturating_sub(used);
                        if done {
                            inner.cache_updates.pop_front().map(|u| (u, true))
                        } else if budget == 0 || std::time::Instant::now() >= deadline {
                            None
                        } else {
                            continue;
                        }
                    }
                }
            };
            match finished {
                Some((u, true)) => self.finish_flush(u.table, u.job),
                Some((u, false)) => self.answer(u.job, Ok(())),
                None => return true,
            }
            if budget == 0 || std::time::Instant::now() >= deadline {
                return self.cache_update_pending();
            }
        }
    }

    /// A flushed memtable the row cache has taken: it leaves the table, its memory is
    /// freed (off the shard) and its flush's waiters are answered.
    fn finish_flush(&self, table: TableId, job: u64) {
        {
            let mut inner = self.inner.borrow_mut();
            let inner = &mut *inner;
            if let Some(t) = inner.tables.get_mut(&table)
                && let Some(i) = t.flushing.iter().position(|f| f.job == job)
            {
                let f = t.flushing.remove(i);
                let size = f.mem.size_bytes;
                inner.memtable_total = inner.memtable_total.saturating_sub(size);
                inner.flushing_total = inner.flushing_total.saturating_sub(size);
                inner.metrics.flushed_bytes += size;
                // Freeing millions of small allocations is slow: do it off the shard.
                let mem = f.mem;
                inner.flusher.submit(Box::new(move || drop(mem)));
            }
            inner.flush_done.notify_waiters();
        }
        // Through the janitor, so the waiters see its earlier deletions (segments) done.
        let waiters = self.take_waiters(job);
        if !waiters.is_empty() {
            self.inner.borrow().janitor.submit(Box::new(move || {
                for w in waiters {
                    let _ = w.send(Ok(()));
                }
            }));
        }
    }

    fn take_waiters(&self, job: u64) -> Vec<oneshot::Sender<Result<()>>> {
        self.inner
            .borrow_mut()
            .waiters
            .remove(&job)
            .unwrap_or_default()
    }

    fn answer(&self, job: u64, res: Result<()>) {
        for w in self.take_waiters(job) {
            let _ = w.send(match &res {
                Ok(()) => Ok(()),
                Err(e) => Err(StorageError::Background(e.to_string())),
            });
        }
    }

    /// Forgets the commitlog segments no table needs any more; returns their files.
    fn discardable_segments(&self) -> commitlog::Retired {
        let oldest = {
            let inner = self.inner.borrow();
            inner
                .tables
                .values()
                .filter_map(|t| t.oldest_log_pos())
                .min()
        };
        let mut log = self.log.borrow_mut();
        let keep_from = oldest.map_or(log.active_segment_id(), segment_of);
        log.discard_before(keep_from)
    }

    /// Deletes the commitlog segments no table needs any more, here and now.
    fn discard_segments(&self) {
        self.discardable_segments().finish();
    }

    /// Submits the strategy's next compaction (or a major one). Returns the job id.
    fn start_compaction(&self, id: TableId, major: bool) -> Result<Option<u64>> {
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        let t = inner
            .tables
            .get_mut(&id)
            .ok_or(StorageError::UnknownTable(id))?;
        if !major && t.majors_waiting > 0 {
            return Ok(None);
        }
        let now = inner.cfg.clock.now_seconds();
        let gc_before = now.saturating_sub(t.schema.options.gc_grace_seconds);
        let candidates: Vec<&Arc<SSTableReader>> = t
            .sstables
            .iter()
            .filter(|s| !t.compacting.contains(&s.generation) && !s.is_quarantined())
            .collect();
        let job_spec = if major {
            if candidates.is_empty()
                || (candidates.len() == 1
                    && t.compacting.is_empty()
                    && !has_purgeable(candidates[0], gc_before))
            {
                None
            } else {
                let strategy = Strategy::from_options(&t.schema.options.compaction);
                let max_output_bytes = match strategy {
                    Strategy::Leveled(o) => Some(o.sstable_size_bytes),
                    _ => None,
                };
                Some(CompactionJob {
                    inputs: candidates.iter().map(|s| s.generation).collect(),
                    output_level: if max_output_bytes.is_some() { 1 } else { 0 },
                    max_output_bytes,
                    drop_only: false,
                })
            }
        } else {
            let infos: Vec<SSTableInfo> = candidates.iter().map(|s| SSTableInfo::of(s)).collect();
            let ctx = ChoiceContext {
                gc_before,
                min_timestamp_elsewhere: table_min_timestamp_outside(t, &infos),
            };
            Strategy::from_options(&t.schema.options.compaction).next_job(&infos, &ctx)
        };
        let Some(spec) = job_spec else {
            return Ok(None);
        };
        let inputs: Vec<Arc<SSTableReader>> = t
            .sstables
            .iter()
            .filter(|s| spec.inputs.contains(&s.generation))
            .cloned()
            .collect();
        let input_bytes: u64 = inputs.iter().map(|s| s.data_size()).sum();
        // Filters, not readers: a job queued here must not keep the readers that the
        // jobs before it replace (see `OverlapFilter`).
        let overlaps: Vec<crate::sstable::OverlapFilter> = t
            .sstables
            .iter()
            .filter(|s| !spec.inputs.contains(&s.generation))
            .map(|s| s.overlap_filter())
            .collect();
        let memtable_min_timestamp = t
            .flushing
            .iter()
            .map(|f| f.mem.min_timestamp)
            .chain(std::iter::once(t.memtable.min_timestamp))
            .min()
            .unwrap_or(i64::MAX);
        for g in &spec.inputs {
            t.compacting.insert(*g);
        }
        let job = inner.next_job;
        inner.next_job += 1;
        t.running_compactions.push(job);
        inner.metrics.pending_compactions += 1;
        let schema = t.schema.clone();
        let dir = t.dir.clone();
        let next_gen = t.next_generation.clone();
        let tx = inner.results_tx.clone();
        let notify = inner.notify.clone();
        let warmer = inner.warmer.as_ref().and_then(|w| w.tx.clone());
        let warm_stop = inner.warm_stop.clone();
        let ctx = PurgeContext {
            gc_before,
            now_seconds: now,
            overlaps,
            others: Vec::new(),
            memtable_min_timestamp,
        };
        // Major compactions are asked for by an operator: full speed. Others run at the
        // share the backlog controller gives them, and stop when a major one is asked for.
        let share = (!major).then(|| {
            let control = JobControl::default();
            t.strategy_jobs
                .insert(job, (control.clone(), spec.inputs.clone()));
            (inner.compaction_share.clone(), control)
        });
        inner.update_backlog_grant();
        let large = inner.cfg.large_compaction_threshold();
        let worker = match &inner.compactor_large {
            Some(w) if major || input_bytes >= large => {
                inner.metrics.large_compactions += 1;
                w
            }
            _ => &inner.compactor,
        };
        worker.submit(Box::new(move || {
            let started = std::time::Instant::now();
            let _ = crate::sstable::take_finish_times();
            let compact = || run_compaction(&schema, &dir, &inputs, &next_gen, &spec, &ctx);
            let result = match share {
                Some((share, control)) => control.run(|| share.run(compact)),
                None => compact(),
            };
            if let Ok((outs, _)) = &result {
                log_compaction(&schema, major, &inputs, outs, started.elapsed());
            }
            if result.is_err() {
                // Leave no partial outputs behind.
                cleanup_tmp(&dir);
            }
            drop(inputs);
            let warm: Vec<_> = match &result {
                Ok((outs, _)) if warmer.is_some() => {
                    outs.iter().flat_map(|o| o.files_to_warm()).collect()
                }
                _ => Vec::new(),
            };
            let _ = tx.send(BgResult::Compacted {
                table: id,
                job,
                inputs: spec.inputs,
                result,
            });
            notify.notify_one();
            // Once the outputs serve reads (see `crate::warm`).
            if let Some(w) = warmer
                && !warm.is_empty()
            {
                let _ = w.send(Box::new(move || {
                    crate::warm::warm(&warm, &warm_stop);
                }));
            }
        }));
        Ok(Some(job))
    }

    fn wait_job(&self, job: u64) -> oneshot::Receiver<Result<()>> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .borrow_mut()
            .waiters
            .entry(job)
            .or_default()
            .push(tx);
        rx
    }

    async fn await_jobs(&self, jobs: Vec<u64>) -> Result<()> {
        let rxs: Vec<_> = jobs.into_iter().map(|j| self.wait_job(j)).collect();
        let mut first_err = None;
        for mut rx in rxs {
            loop {
                // Results may already be queued.
                self.poll_background();
                if self.advance_cache_updates(CACHE_UPDATE_SLICE) {
                    // Nobody else may be advancing the cache update this waits for.
                    match rx.try_recv() {
                        Ok(Ok(())) => break,
                        Ok(Err(e)) => {
                            first_err.get_or_insert(e);
                            break;
                        }
                        Err(oneshot::error::TryRecvError::Closed) => {
                            first_err.get_or_insert(StorageError::ShutDown);
                            break;
                        }
                        Err(oneshot::error::TryRecvError::Empty) => {
                            yield_once().await;
                            continue;
                        }
                    }
                }
                let notify = self.inner.borrow().notify.clone();
                let mut notified = Box::pin(notify.notified());
                let r = std::future::poll_fn(|cx| {
                    if let std::task::Poll::Ready(r) = std::pin::Pin::new(&mut rx).poll(cx) {
                        return std::task::Poll::Ready(Some(r));
                    }
                    if notified.as_mut().poll(cx).is_ready() {
                        return std::task::Poll::Ready(None);
                    }
                    std::task::Poll::Pending
                })
                .await;
                match r {
                    Some(Ok(Ok(()))) => break,
                    Some(Ok(Err(e))) => {
                        first_err.get_or_insert(e);
                        break;
                    }
                    Some(Err(_)) => {
                        first_err.get_or_insert(StorageError::ShutDown);
                        break;
                    }
                    None => continue,
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Flushes one table's memtable to an SSTable.
    pub fn flush(&self, id: TableId) -> impl Future<Output = Result<()>> + 'static {
        let me = self.clone();
        async move {
            let mut jobs: Vec<u64> = me.start_flush(id, false)?.into_iter().collect();
            // Also wait for flushes already running.
            if let Some(t) = me.inner.borrow().tables.get(&id) {
                jobs.extend(t.flushing.iter().map(|f| f.job));
            }
            jobs.sort();
            jobs.dedup();
            me.await_jobs(jobs).await
        }
    }

    pub fn flush_all(&self) -> impl Future<Output = Result<()>> + 'static {
        let me = self.clone();
        async move {
            let ids = me.table_ids();
            let mut jobs = Vec::new();
            for id in ids {
                if let Some(j) = me.start_flush(id, false)? {
                    jobs.push(j);
                }
                if let Some(t) = me.inner.borrow().tables.get(&id) {
                    jobs.extend(t.flushing.iter().map(|f| f.job));
                }
            }
            jobs.sort();
            jobs.dedup();
            me.await_jobs(jobs).await
        }
    }

    /// Compacts all of a table's SSTables into one (split by size under LCS). As
    /// Cassandra's does, it first stops the table's strategy compactions (queued or
    /// running: their work would be merged again), except one that already merges every
    /// SSTable of the table, which goes on at full speed and does the work; it starts no
    /// strategy compaction until it is done, and waits for the rest (maintenance rewrites)
    /// so that it sees every SSTable.
    pub fn compact_major(&self, id: TableId) -> impl Future<Output = Result<()>> + 'static {
        let me = self.clone();
        async move {
            let running = {
                let mut inner = me.inner.borrow_mut();
                let t = inner
                    .tables
                    .get_mut(&id)
                    .ok_or(StorageError::UnknownTable(id))?;
                t.majors_waiting += 1;
                let live: Vec<u64> = t
                    .sstables
                    .iter()
                    .filter(|s| !s.is_quarantined())
                    .map(|s| s.generation)
                    .collect();
                for (control, inputs) in t.strategy_jobs.values() {
                    if live.iter().all(|g| inputs.contains(g)) {
                        control.full_speed();
                    } else {
                        control.stop();
                    }
                }
                t.running_compactions.clone()
            };
            let _major = MajorWaiting {
                storage: me.clone(),
                table: id,
            };
            let _ = me.await_jobs(running).await;
            match me.start_compaction(id, true)? {
                Some(job) => me.await_jobs(vec![job]).await,
                None => Ok(()),
            }
        }
    }

    /// Runs the strategy's next compaction if there is one (for tests and nodetool).
    pub fn compact_once(&self, id: TableId) -> impl Future<Output = Result<bool>> + 'static {
        let me = self.clone();
        async move {
            match me.start_compaction(id, false)? {
                Some(job) => me.await_jobs(vec![job]).await.map(|_| true),
                None => Ok(false),
            }
        }
    }

    /// The table's live SSTables (for maintenance operations and tools).
    pub fn sstables(&self, id: TableId) -> Vec<Arc<SSTableReader>> {
        self.inner
            .borrow()
            .tables
            .get(&id)
            .map_or_else(Vec::new, |t| t.sstables.clone())
    }

    /// Runs a maintenance rewrite on the compaction thread: `work` gets the live SSTables
    /// of `inputs` (those still live once compactions holding them end) and its outputs
    /// replace them exactly as a compaction's do. With `out_of_service`, the job also gets
    /// the generations on disk that are not in service (only when no flush or compaction
    /// of the table is in flight, so none of those is a fresh output). Returns false when
    /// nothing was run (no input left and no out-of-service SSTable asked for or found).
    pub fn rewrite(
        &self,
        id: TableId,
        inputs: Vec<u64>,
        out_of_service: bool,
        work: RewriteWork,
    ) -> impl Future<Output = Result<bool>> + 'static {
        let me = self.clone();
        async move {
            let mut work = Some(work);
            loop {
                let busy: Vec<u64> = {
                    let inner = me.inner.borrow();
                    let t = inner
                        .tables
                        .get(&id)
                        .ok_or(StorageError::UnknownTable(id))?;
                    let holds = inputs.iter().any(|g| t.compacting.contains(g));
                    // A failed flush waits for its retry: waiting on it could be forever.
                    let flushing = t.flushing.iter().filter(|f| !f.failed).map(|f| f.job);
                    let settling = out_of_service
                        && (!t.running_compactions.is_empty() || flushing.clone().next().is_some());
                    if holds || settling {
                        t.running_compactions
                            .iter()
                            .copied()
                            .chain(flushing)
                            .collect()
                    } else {
                        Vec::new()
                    }
                };
                if busy.is_empty() {
                    break;
                }
                let _ = me.await_jobs(busy).await;
            }
            let Some(work) = work.take() else {
                return Ok(false);
            };
            match me.start_rewrite(id, &inputs, out_of_service, work)? {
                Some(job) => {
                    me.await_jobs(vec![job]).await?;
                    me.sstables_changed(id);
                    Ok(true)
                }
                None => Ok(false),
            }
        }
    }

    /// The one point where a table's SSTable set changed other than by its own flushes
    /// and compactions (cleanup, scrub, garbagecollect, refresh): caches of the table's
    /// data that reads fill must be dropped here.
    fn sstables_changed(&self, id: TableId) {
        self.inner.borrow_mut().row_cache.invalidate_table(id);
    }

    fn start_rewrite(
        &self,
        id: TableId,
        gens: &[u64],
        out_of_service: bool,
        work: RewriteWork,
    ) -> Result<Option<u64>> {
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        let t = inner
            .tables
            .get_mut(&id)
            .ok_or(StorageError::UnknownTable(id))?;
        let inputs: Vec<Arc<SSTableReader>> = t
            .sstables
            .iter()
            .filter(|s| gens.contains(&s.generation) && !t.compacting.contains(&s.generation))
            .cloned()
            .collect();
        let mut offline = Vec::new();
        if out_of_service && let Ok(rd) = fs::read_dir(&t.dir) {
            // Inputs of a committed compaction may not be deleted yet: they are not out of
            // service, they are on their way out.
            let retiring = crate::compaction::retiring_generations(&t.dir);
            for e in rd.flatten() {
                if let Some(g) = parse_toc_name(&e.file_name().to_string_lossy())
                    && !t.sstables.iter().any(|s| s.generation == g)
                    && !retiring.contains(&g)
                {
                    offline.push(g);
                }
            }
            offline.sort();
        }
        // An empty input list is a refresh (outputs only), unless it asked for the
        // out-of-service SSTables and there are none.
        if inputs.is_empty() && offline.is_empty() && (!gens.is_empty() || out_of_service) {
            return Ok(None);
        }
        let input_gens: Vec<u64> = inputs.iter().map(|s| s.generation).collect();
        let others: Vec<Arc<SSTableReader>> = t
            .sstables
            .iter()
            .filter(|s| !input_gens.contains(&s.generation))
            .cloned()
            .collect();
        let memtable_min_timestamp = t
            .flushing
            .iter()
            .map(|f| f.mem.min_timestamp)
            .chain(std::iter::once(t.memtable.min_timestamp))
            .min()
            .unwrap_or(i64::MAX);
        let now = inner.cfg.clock.now_seconds();
        let purge = PurgeContext {
            gc_before: now.saturating_sub(t.schema.options.gc_grace_seconds),
            now_seconds: now,
            overlaps: others.iter().map(|s| s.overlap_filter()).collect(),
            others,
            memtable_min_timestamp,
        };
        for g in &input_gens {
            t.compacting.insert(*g);
        }
        let job = inner.next_job;
        inner.next_job += 1;
        t.running_compactions.push(job);
        inner.rewrite_jobs.insert(job);
        inner.metrics.pending_compactions += 1;
        let input = RewriteInput {
            schema: t.schema.clone(),
            dir: t.dir.clone(),
            next_generation: t.next_generation.clone(),
            inputs,
            out_of_service: offline,
            purge,
        };
        let dir = t.dir.clone();
        let tx = inner.results_tx.clone();
        let notify = inner.notify.clone();
        inner.compactor.submit(Box::new(move || {
            let result = work(input);
            if result.is_err() {
                cleanup_tmp(&dir);
            }
            let _ = tx.send(BgResult::Compacted {
                table: id,
                job,
                inputs: input_gens,
                result,
            });
            notify.notify_one();
        }));
        Ok(Some(job))
    }

    /// Flushes everything, waits for background work, and closes the commitlog cleanly.
    pub fn shutdown(&self) -> impl Future<Output = Result<()>> + 'static {
        let me = self.clone();
        async move {
            me.flush_all().await?;
            let running: Vec<u64> = me
                .inner
                .borrow()
                .tables
                .values()
                .flat_map(|t| t.running_compactions.iter().copied())
                .collect();
            let _ = me.await_jobs(running).await;
            me.inner.borrow_mut().closed = true;
            me.inner.borrow().notify.notify_one();
            me.log.borrow_mut().shutdown()?;
            Ok(())
        }
    }

    /// Bytes compaction still has to write on this shard (summed over tables), and the
    /// share of the compaction thread the backlog controller derives from it.
    pub fn compaction_backlog(&self) -> (f64, f64) {
        let inner = self.inner.borrow();
        let backlog: f64 = inner
            .tables
            .values()
            .map(|t| {
                let infos: Vec<SSTableInfo> =
                    t.sstables.iter().map(|s| SSTableInfo::of(s)).collect();
                crate::compaction::backlog_bytes(
                    &Strategy::from_options(&t.schema.options.compaction),
                    &infos,
                )
            })
            .sum();
        let share = BacklogController::default().share(backlog, inner.cfg.memtable_budget_bytes);
        (backlog, share)
    }

    /// Sets the running and next compactions' share from the current backlog, and the
    /// share of the core it is owed ([`StorageConfig::compaction_grant_backlog`]).
    fn refresh_compaction_share(&self) {
        let (backlog, share) = self.compaction_backlog();
        let mut inner = self.inner.borrow_mut();
        inner.compaction_share.set(share);
        let full = inner.cfg.compaction_grant_backlog;
        inner.backlog_grant_share = if full > 0.0 {
            let norm = backlog / inner.cfg.memtable_budget_bytes.max(1) as f64;
            inner.cfg.compaction_grant_backlog_share * (norm / full).clamp(0.0, 1.0)
        } else {
            0.0
        };
        inner.update_backlog_grant();
    }

    pub fn metrics(&self) -> StorageMetrics {
        let (backlog, share) = self.compaction_backlog();
        let inner = self.inner.borrow();
        let log = self.log.borrow();
        let mut m = inner.metrics.clone();
        m.compaction_backlog_bytes = backlog as u64;
        m.compaction_share_permille = (share * 1000.0).round() as u64;
        m.granted_slices = inner.granter.granted;
        m.memtable_bytes = inner.memtable_total;
        m.memtable_partitions = inner
            .tables
            .values()
            .map(|t| {
                t.memtable.partitions.len() as u64
                    + t.flushing
                        .iter()
                        .map(|f| f.mem.partitions.len() as u64)
                        .sum::<u64>()
            })
            .sum();
        m.sstable_count = inner.tables.values().map(|t| t.sstables.len() as u64).sum();
        m.sstable_bytes = inner
            .tables
            .values()
            .flat_map(|t| t.sstables.iter())
            .map(|s| s.data_size())
            .sum();
        m.commitlog_bytes = log.total_bytes();
        m.commitlog_segments = log.segment_count() as u64;
        m.commitlog_spare_segments = log.spare_count() as u64;
        m.commitlog_reused_segments = log.reused_segments;
        m.commitlog_map_fallbacks = log.map_fallbacks();
        (m.spare_data_bytes, m.spare_data_reused) = inner.spares.usage();
        let pool = inner.chunk_pool.stats();
        m.memtable_pool_bytes = pool.kept_bytes;
        m.memtable_chunks_fresh = pool.taken_fresh;
        m.memtable_chunks_reused = pool.taken_kept;
        m.memtable_chunks_prefaulted = pool.prefaulted;
        m.commitlog_syncs = log.syncs();
        m.commitlog_writes = log.writes;
        let rc = inner.row_cache.stats();
        m.row_cache_hits = rc.hits;
        m.row_cache_misses = rc.misses;
        m.row_cache_insertions = rc.insertions;
        m.row_cache_evictions = rc.evictions;
        m.row_cache_flush_replacements = rc.flush_replacements;
        m.row_cache_defrag_moves = rc.defrag_moves;
        m.row_cache_rejections = rc.rejections;
        m.row_cache_bytes = rc.bytes;
        m.row_cache_partitions = rc.partitions;
        m
    }

    pub fn table_stats(&self, id: TableId) -> Option<TableStats> {
        let inner = self.inner.borrow();
        let t = inner.tables.get(&id)?;
        Some(TableStats {
            memtable_bytes: t.memtable.size_bytes,
            memtable_partitions: t.memtable.partitions.len() as u64,
            flushing_memtables: t.flushing.len() as u64,
            sstable_count: t.sstables.len() as u64,
            sstable_bytes: t.sstables.iter().map(|s| s.data_size()).sum(),
            sstable_uncompressed_bytes: t.sstables.iter().map(|s| s.stats.uncompressed_bytes).sum(),
            estimated_partitions: t.sstables.iter().map(|s| s.stats.partitions).sum::<u64>()
                + t.memtable.partitions.len() as u64,
            sstable_levels: t.sstables.iter().map(|s| s.stats.level).collect(),
        })
    }

    /// Data files of a table's live SSTables (for tools and tests).
    pub fn sstable_paths(&self, id: TableId) -> Vec<PathBuf> {
        let inner = self.inner.borrow();
        inner.tables.get(&id).map_or_else(Vec::new, |t| {
            t.sstables
                .iter()
                .map(|s| s.data_path().to_path_buf())
                .collect()
        })
    }

    /// Hits, misses and size of the shard's block cache.
    pub fn block_cache_stats(&self) -> BlockCacheStats {
        self.inner.borrow().block_cache.stats()
    }

    /// One slice of the row cache's defragmentation ([`crate::alloc`]): looks at up to
    /// `budget` encoded entries and moves those that sit in sparsely used slabs.
    fn defrag_row_cache(&self, hooks: &crate::alloc::AllocatorHooks, budget: usize) -> DefragSlice {
        (hooks.flush_thread_cache)();
        let should_move = |p: *const u8| {
            // SAFETY: `defrag_slice` passes only addresses inside live allocations (an
            // entry it holds, and that entry's non-empty data), as the hook requires.
            #[allow(unsafe_code)]
            unsafe {
                (hooks.should_move)(p)
            }
        };
        let started = std::time::Instant::now();
        let slice = self.inner.borrow_mut().row_cache.defrag_slice(
            budget,
            Some(started + SHARD_SLICE_TIME),
            should_move,
        );
        tracing::trace!(
            examined = slice.examined,
            moved = slice.moved,
            us = started.elapsed().as_micros() as u64,
            "row cache defragmentation slice"
        );
        slice
    }

    /// Runs on the shard (spawn it with `spawn_local`) while the allocator's hooks are
    /// registered: checks the allocator's fragmentation every [`DEFRAG_CHECK`]; once it is
    /// [`crate::alloc::fragmented`] and the row cache holds entries, a pass over the key
    /// map starts, one slice of [`DEFRAG_SLICE`] entries every [`DEFRAG_TICK`], and goes on
    /// while [`crate::alloc::still_fragmented`] ([`DefragEpisode`] decides when to pause).
    /// At each check it also bounds the freed pages the shard's arena keeps
    /// ([`StorageConfig::kept_pages_cap_bytes`], [`StorageConfig::resident_limit_bytes`]).
    /// Returns after `shutdown`.
    pub fn run_defrag(&self) -> impl Future<Output = ()> + 'static {
        let me = self.clone();
        async move {
            let Some(hooks) = crate::alloc::hooks() else {
                return;
            };
            let mut episode: Option<DefragEpisode> = None;
            let mut wait = DEFRAG_CHECK;
            // Kept pages are bounded once per DEFRAG_CHECK, also while slices run every
            // DEFRAG_TICK: over the resident limit a purge at every tick would hand pages
            // back that the next slice faults in again.
            let mut last_trim: Option<tokio::time::Instant> = None;
            // This thread's arena, topped up with pages faulted in off the shard while it
            // keeps its pages (`crate::alloc::PREFAULT_RESERVE`).
            let shard_arena = (hooks.this_threads_arena)();
            let arena = shard_arena.filter(|_| me.inner.borrow().cfg.prefault);
            let prefaulting = Arc::new(AtomicBool::new(false));
            // Memtable chunks faulted in off the shard (`ChunkPool::top_up`): one job at a
            // time, sized by the chunks the memtables took since the last check.
            let topping_up = Arc::new(AtomicBool::new(false));
            let mut chunks_taken = 0u64;
            // The allocator's figures, refreshed at most every DEFRAG_CHECK, once for the
            // trim, the prefault and the usage together: a refresh merges every arena's
            // statistics (jemalloc's `epoch`, ~1M instructions under callgrind), and at
            // every slice of an episode (each 2-10 ms) that was 2.7% of the shard in the
            // switch from `standard1` to the IoT mixes; one per reader (three a check)
            // was 7.5% of a read-only IoT load's instructions under callgrind.
            let mut usage: Option<(tokio::time::Instant, crate::alloc::AllocatorUsage)> = None;
            loop {
                tokio::time::sleep(wait).await;
                if me.inner.borrow().closed {
                    return;
                }
                wait = DEFRAG_CHECK;
                let (cap, limit) = {
                    let cfg = &me.inner.borrow().cfg;
                    (cfg.kept_pages_cap_bytes, cfg.resident_limit_bytes)
                };
                let now = tokio::time::Instant::now();
                let trim_due = cap.is_some()
                    && last_trim.is_none_or(|t| now.duration_since(t) >= DEFRAG_CHECK);
                let usage_due =
                    !matches!(usage, Some((at, _)) if now.duration_since(at) < DEFRAG_CHECK);
                if (trim_due || usage_due) && !(hooks.refresh)() {
                    continue;
                }
                if let Some(cap) = cap
                    && trim_due
                {
                    last_trim = Some(now);
                    let trimmed = (hooks.trim_kept_pages)(cap, limit).unwrap_or(0);
                    // Over the resident limit with too few kept pages to return, the
                    // memtables' kept chunks go as well (freed into the shard's arena,
                    // whose pages the next check returns): memory is kept for the next
                    // memtables only while the node is within its memory.
                    let pool = me.inner.borrow().chunk_pool.clone();
                    let mut over_limit = false;
                    if let Some(limit) = limit
                        && let Some(k) = shard_arena.and_then(|a| (hooks.kept_pages)(a))
                    {
                        over_limit = k.resident.saturating_add(POOL_RESERVE_MAX_BYTES) > limit;
                        let short = k.resident.saturating_sub(limit).saturating_sub(trimmed);
                        if short > 0 {
                            let released = pool.release(short);
                            if released > 0 {
                                tracing::debug!(
                                    released,
                                    resident = k.resident,
                                    limit,
                                    "released kept memtable chunks over the resident limit"
                                );
                            }
                        }
                    }
                    if trimmed > 0 {
                        tracing::debug!(
                            purged = trimmed,
                            cap,
                            ?limit,
                            "returned the shard arena's kept pages beyond its bounds"
                        );
                    }
                    // The memtables' next chunks, faulted in off the shard while the
                    // allocator has room for them below the resident limit.
                    let st = pool.stats();
                    let taken = st.taken_fresh + st.taken_kept;
                    let target = pool_reserve_chunks(taken.saturating_sub(chunks_taken));
                    chunks_taken = taken;
                    if me.inner.borrow().cfg.prefault
                        && !over_limit
                        && !topping_up.load(AtomicOrdering::Acquire)
                        && st.kept_bytes < (target * crate::memtable::ARENA_CHUNK_BYTES) as u64
                    {
                        topping_up.store(true, AtomicOrdering::Release);
                        let done = topping_up.clone();
                        me.inner.borrow().prefaulter.submit(Box::new(move || {
                            pool.top_up(target);
                            done.store(false, AtomicOrdering::Release);
                        }));
                    }
                    // Nothing is prefaulted right after a trim: the arena was over a
                    // bound, and still keeps what was within it.
                    if let Some(arena) = arena
                        && trimmed == 0
                        && !prefaulting.load(AtomicOrdering::Acquire)
                        && let Some(kept) = (hooks.kept_pages)(arena)
                    {
                        let want = crate::alloc::prefault_wanted(kept, limit);
                        if want > 0 {
                            prefaulting.store(true, AtomicOrdering::Release);
                            let (done, prefault) = (prefaulting.clone(), hooks.prefault);
                            me.inner.borrow().prefaulter.submit(Box::new(move || {
                                let faulted = prefault(arena, want);
                                tracing::trace!(
                                    arena,
                                    kept = kept.kept,
                                    resident = kept.resident,
                                    faulted,
                                    "faulted pages in for the shard"
                                );
                                done.store(false, AtomicOrdering::Release);
                            }));
                        }
                    }
                }
                let u = match usage {
                    Some((_, u)) if !usage_due => u,
                    _ => {
                        let Some(u) = (hooks.usage)() else { continue };
                        usage = Some((now, u));
                        u
                    }
                };
                let ep = match &mut episode {
                    Some(ep) if crate::alloc::still_fragmented(u) => ep,
                    _ if crate::alloc::fragmented(u) && !me.inner.borrow().row_cache.is_empty() => {
                        me.inner.borrow_mut().row_cache.restart_defrag();
                        tracing::debug!(
                            slack = crate::alloc::slack(u),
                            allocated = u.allocated,
                            "row cache defragmentation starts"
                        );
                        episode.insert(DefragEpisode::new(crate::alloc::slack(u)))
                    }
                    _ => {
                        episode = None;
                        continue;
                    }
                };
                let slice = me.defrag_row_cache(hooks, DEFRAG_SLICE);
                wait = ep.after(slice, crate::alloc::slack(u));
            }
        }
    }

    /// Counters and size of the shard's row cache.
    pub fn row_cache_stats(&self) -> RowCacheStats {
        self.inner.borrow().row_cache.stats()
    }

    /// Starts loading what reads and writes of the partitions `keys` will touch first:
    /// their memtable map slots and leaves, and for reads their row cache buckets, entries
    /// and content. One level at a time across the whole batch, so the cache misses
    /// of all the keys overlap; the requests that follow then find those lines loaded.
    /// Hints only: nothing changes, and a key this shard does not hold costs a few loads.
    pub fn prefetch(&self, keys: &[crate::PrefetchKey]) {
        let Ok(inner) = self.inner.try_borrow() else {
            return;
        };
        let mut last: Option<(TableId, &TableState)> = None;
        for level in 0..2 {
            inner.row_cache.prefetch(keys, level);
            for &crate::PrefetchKey { table, token, .. } in keys {
                let t = match last {
                    Some((id, t)) if id == table => t,
                    _ => match inner.tables.get(&table) {
                        Some(t) => {
                            last = Some((table, t));
                            t
                        }
                        None => continue,
                    },
                };
                t.memtable.partitions.prefetch(token, level);
            }
        }
        inner.row_cache.prefetch(keys, 2);
    }

    /// [`Self::read`] without waiting for the disk: when the read needs bytes that are not
    /// in the page cache it stops, changing nothing, and returns
    /// [`StorageError::WouldBlock`]; the caller runs the wait off the shard
    /// ([`crate::diskwait::DiskWait::fault_in`]) and calls again (see [`crate::diskwait`]).
    pub fn try_read(&self, cmd: &ReadCommand) -> Result<ReadResult> {
        let mut r = crate::diskwait::without_waiting(|| self.read(cmd));
        if let Err(StorageError::WouldBlock(w)) = &mut r {
            if let PartitionRange::TokenRange { .. } = cmd.partitions {
                // A scan goes on reading where it stopped: wait for a window, not a chunk,
                // or each of its chunks would cost a wait and a restart of the page.
                w.widen(SCAN_WAIT_BYTES);
            }
            let mut inner = self.inner.borrow_mut();
            // Counted once, when it is run again.
            inner.metrics.reads -= 1;
            inner.metrics.disk_waits += 1;
        }
        r
    }

    /// Executes a read: merges memtables and the SSTables that may hold the data, and
    /// returns live data only.
    pub fn read(&self, cmd: &ReadCommand) -> Result<ReadResult> {
        self.poll_background();
        let mut inner = self.inner.borrow_mut();
        let inner = &mut *inner;
        inner.metrics.reads += 1;
        inner.compaction_share.note_foreground();
        inner.granter.on_request();
        let t = inner
            .tables
            .get(&cmd.table)
            .ok_or(StorageError::UnknownTable(cmd.table))?;
        let res = match &cmd.partitions {
            PartitionRange::Single(key) => crate::read::read_single(
                crate::read::TableSources {
                    table: cmd.table,
                    schema: &t.schema,
                    cmp: &t.memtable.cmp,
                    memtables: std::iter::once(&t.memtable)
                        .chain(t.flushing.iter().rev().map(|f| f.mem.as_ref())),
                    sstables: &t.sstables,
                },
                key,
                cmd,
                &mut inner.block_cache,
                &mut inner.row_cache,
                true,
            ),
            PartitionRange::TokenRange { start, end } => read_range(
                t,
                start,
                end,
                cmd,
                &mut inner.block_cache,
                &mut inner.row_cache,
            ),
        };
        match res {
            Ok(r) => {
                inner.metrics.sstables_per_read[(r.sstables_read as usize).min(15)] += 1;
                inner.count_request(r.sstables_read);
                Ok(r)
            }
            Err(e) => {
                if let StorageError::Corrupt { .. } = &e {
                    inner.metrics.corrupt_sstables += 1;
                    tracing::error!(
                        "read of table {} hit corruption; SSTable taken out of service: {e}",
                        cmd.table
                    );
                    if let Some(t) = inner.tables.get_mut(&cmd.table) {
                        t.sstables.retain(|s| !s.is_quarantined());
                    }
                    inner.row_cache.invalidate_table(cmd.table);
                }
                Err(e)
            }
        }
    }
}

/// Lowest timestamp of the table's data outside `offered`: memtables (active and
/// flushing) and SSTables not offered to the chooser (being compacted, out of service).
fn table_min_timestamp_outside(t: &TableState, offered: &[SSTableInfo]) -> i64 {
    let mems = t
        .flushing
        .iter()
        .map(|f| f.mem.min_timestamp)
        .chain(std::iter::once(t.memtable.min_timestamp));
    let others = t
        .sstables
        .iter()
        .filter(|s| !offered.iter().any(|o| o.generation == s.generation))
        .map(|s| s.stats.min_timestamp);
    mems.chain(others).min().unwrap_or(i64::MAX)
}

/// Logs a finished compaction the way Cassandra's "Compacted (...)" line does, with where
/// its time went: the merge, writing out the data stream's tail, the components' syncs
/// (on a device with a write-back cache, the flush of everything written) and opening the
/// outputs. Runs on the compaction thread (the finish times are that thread's).
fn log_compaction(
    schema: &TableSchema,
    major: bool,
    inputs: &[Arc<SSTableReader>],
    outputs: &[SSTableReader],
    took: std::time::Duration,
) {
    let f = crate::sstable::take_finish_times();
    let bytes_in: u64 = inputs.iter().map(|s| s.data_size()).sum();
    let bytes_out: u64 = outputs.iter().map(|s| s.data_size()).sum();
    let secs = took.as_secs_f64();
    let merge = took.saturating_sub(f.write_out + f.sync + f.open);
    tracing::info!(
        "compacted {} SSTable(s) of {}.{} into {} ({}): {} bytes to {} bytes in {} ms \
         ({:.0} MB/s read; merge {} ms, data write-out {} ms, syncs {} ms, open {} ms)",
        inputs.len(),
        schema.keyspace,
        schema.name,
        outputs.len(),
        if major { "major" } else { "strategy" },
        bytes_in,
        bytes_out,
        took.as_millis(),
        if secs > 0.0 {
            bytes_in as f64 / 1e6 / secs
        } else {
            0.0
        },
        merge.as_millis(),
        f.write_out.as_millis(),
        f.sync.as_millis(),
        f.open.as_millis(),
    );
}

fn has_purgeable(s: &SSTableReader, gc_before: i32) -> bool {
    s.stats.max_local_deletion_time != i32::MIN && s.stats.min_local_deletion_time < gc_before
}

fn cleanup_tmp(dir: &Path) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with("tmp-") {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// Where a flush writes its Data.db: with O_DIRECT, or through the page cache over a
/// spare file of the pool when one is free ([`StorageConfig::flush_direct`]), or over a
/// spare and otherwise with O_DIRECT ([`StorageConfig::flush_direct_behind`]).
#[derive(Clone, Copy)]
enum FlushOut<'a> {
    Direct,
    Buffered(Option<&'a crate::spare::SparePool>),
    SpareOrDirect(&'a crate::spare::SparePool),
}

fn flush_memtable(
    dir: &Path,
    generation: u64,
    mem: &Memtable,
    upper: LogPosition,
    pace: Option<&FlushPace>,
    out: FlushOut<'_>,
) -> Result<Option<SSTableReader>> {
    let mut w = match out {
        FlushOut::Direct => SSTableWriter::new_direct(dir, generation, &mem.schema)?,
        FlushOut::Buffered(spares) => {
            SSTableWriter::new_over_spare(dir, generation, &mem.schema, spares)?
        }
        FlushOut::SpareOrDirect(spares) => {
            SSTableWriter::new_over_spare_or_direct(dir, generation, &mem.schema, spares)?
        }
    };
    // Only a Data.db written through the page cache is cached (a spare worth keeping).
    let cached = !w.data_direct();
    w.expect_partitions(mem.partitions.len() as u64);
    let cmp = mem.cmp.clone();
    let mut rows: Vec<&Row> = Vec::new();
    let mut parts = mem.partitions.iter();
    // Four batches in a pipeline (see `FLUSH_BATCH`): the map entries of `far` are being
    // fetched, `ahead` waits for its entries, the keys and rows of `next` are being
    // fetched, and `batch` is encoded.
    let mut far: Vec<(&PartitionKey, &MemPartition)> = Vec::with_capacity(FLUSH_BATCH);
    let mut ahead: Vec<(&PartitionKey, &MemPartition)> = Vec::with_capacity(FLUSH_BATCH);
    let mut next: Vec<(&PartitionKey, &MemPartition)> = Vec::with_capacity(FLUSH_BATCH);
    let mut batch: Vec<(&PartitionKey, &MemPartition)> = Vec::with_capacity(FLUSH_BATCH);
    let mut done = 0;
    loop {
        if let Some(p) = pace {
            // `batch` holds the partitions encoded last turn.
            done += batch.len();
            p.keep_pace(done);
        }
        std::mem::swap(&mut batch, &mut next);
        std::mem::swap(&mut next, &mut ahead);
        std::mem::swap(&mut ahead, &mut far);
        far.clear();
        far.extend(parts.by_ref().take(FLUSH_BATCH));
        if batch.is_empty() && next.is_empty() && ahead.is_empty() && far.is_empty() {
            break;
        }
        crate::grant::pass();
        prefetch_entries(&far);
        prefetch_contents(&next);
        warm_partitions(&batch);
        for &(k, p) in &batch {
            let appended = match p {
                MemPartition::Single(enc) => match single_parts(enc) {
                    // Rows of simple cells are copied; others decoded and encoded again.
                    Some((base, row, s)) if s.clustering_empty => {
                        w.append_single_row(k, base, row, &s)
                    }
                    _ => {
                        let row = MemPartition::single_row(enc);
                        w.append_parts(k, None, None, &[&row], &[])
                    }
                },
                MemPartition::General(p) => {
                    rows.clear();
                    rows.extend(p.rows.iter());
                    let normalized;
                    let rts: &[amphora_types::data::RangeTombstone] =
                        if p.range_tombstones.len() > 1 {
                            normalized =
                                normalize_range_tombstones(&cmp, &p.range_tombstones, p.deletion);
                            &normalized
                        } else {
                            &p.range_tombstones
                        };
                    w.append_parts(k, p.deletion, p.static_row.as_ref(), &rows, rts)
                }
            };
            if let Err(e) = appended {
                w.abort();
                return Err(e);
            }
        }
    }
    // A failed finish removes its own files (not other writers' tmp files: a compaction
    // may be writing in the same directory).
    let mut r = w.finish(upper, 0)?;
    if let Some(r) = &mut r {
        r.data_cached = cached;
    }
    Ok(r)
}

/// What paced flushes ([`StorageConfig::flush_pace_max`]) keep pace with; the shard
/// updates it, flush threads read it.
#[derive(Clone, Default)]
struct FlushPacer {
    /// Bytes the shard's writes added to its memtables since it opened.
    written: Arc<AtomicU64>,
    /// Bumped by every flush that is not paced: paced flushes submitted before it go on
    /// at full speed.
    epoch: Arc<AtomicU64>,
}

impl FlushPacer {
    /// Counts `bytes` added to a memtable (the shard thread is the only writer, so a load
    /// and a store do).
    #[inline]
    fn wrote(&self, bytes: u64) {
        let w = self.written.load(AtomicOrdering::Relaxed);
        self.written
            .store(w.wrapping_add(bytes), AtomicOrdering::Relaxed);
    }

    fn hurry(&self) {
        self.epoch.fetch_add(1, AtomicOrdering::Relaxed);
    }

    /// The pace of a flush of `partitions` partitions submitted now, to be done once the
    /// writes after it have filled `span` bytes.
    fn pace(
        &self,
        span: f64,
        max: Duration,
        partitions: usize,
        wants: crate::grant::Wants,
    ) -> FlushPace {
        FlushPace {
            pacer: self.clone(),
            wants,
            epoch: self.epoch.load(AtomicOrdering::Relaxed),
            written_at_start: self.written.load(AtomicOrdering::Relaxed),
            span: span.max(1.0),
            started: std::time::Instant::now(),
            max: max.as_secs_f64().max(1e-3),
            partitions: partitions.max(1) as f64,
        }
    }
}

/// One paced flush: it may have flushed the share of its partitions that the writes since
/// its submission are of `span` bytes, or that the time since then is of `max` seconds,
/// whichever is more. A flush of a memtable that its writes filled in one burst (the
/// standard1 load: ~1 s of CPU for a 256 MB memtable) otherwise took half of the shard's
/// core for over a second, and a fixed-rate load near the shard's capacity built a backlog
/// it never worked off (docs/benchmarks.md, "Flushes at the writes' pace").
struct FlushPace {
    pacer: FlushPacer,
    /// The flush job's want of the shard's time, given up while it naps.
    wants: crate::grant::Wants,
    epoch: u64,
    written_at_start: u64,
    span: f64,
    started: std::time::Instant,
    max: f64,
    partitions: f64,
}

/// How long a paced flush that is ahead sleeps before it looks again.
const FLUSH_PACE_NAP: Duration = Duration::from_millis(10);

impl FlushPace {
    /// Returns once having flushed `done` partitions is not ahead of the pace (at once if
    /// a later flush ended the pacing).
    fn keep_pace(&self, done: usize) {
        let want = done as f64 / self.partitions;
        loop {
            if self.pacer.epoch.load(AtomicOrdering::Relaxed) != self.epoch {
                return;
            }
            let written = self
                .pacer
                .written
                .load(AtomicOrdering::Relaxed)
                .wrapping_sub(self.written_at_start);
            let by_writes = written as f64 / self.span;
            let by_time = self.started.elapsed().as_secs_f64() / self.max;
            if want <= by_writes.max(by_time) {
                return;
            }
            let _nap = self.wants.off();
            std::thread::sleep(FLUSH_PACE_NAP);
        }
    }
}

/// Partitions a flush encodes per step of its pipeline: while one batch is encoded, the
/// keys and rows of the next are being fetched ([`prefetch_contents`]) and the map
/// entries of the one after the following ([`prefetch_entries`]: two steps ahead, as one
/// step left `prefetch_contents` waiting for them), so the cache misses of a flush
/// (memtable partitions are scattered in insertion order, a flush reads them in ring
/// order) overlap the encoding instead of stalling it.
const FLUSH_BATCH: usize = 16;

/// How much of a single-row partition's encoded row [`prefetch_contents`] fetches (a
/// `standard1` row is about 230 bytes).
const FLUSH_PREFETCH_ROW_BYTES: usize = 512;

/// Starts fetching the map entries (key and partition handles) of `batch`: their
/// addresses are known without reading them.
fn prefetch_entries(batch: &[(&PartitionKey, &MemPartition)]) {
    for &(k, p) in batch {
        crate::prefetch::line(k);
        crate::prefetch::line(p);
    }
}

/// Starts fetching what encoding `batch` reads first: each key's bytes, and a single-row
/// partition's whole encoded row (a general partition's header only). Reads the entries,
/// which [`prefetch_entries`] fetched two steps earlier.
fn prefetch_contents(batch: &[(&PartitionKey, &MemPartition)]) {
    for &(k, p) in batch {
        crate::prefetch::line(k.key.as_ptr());
        match p {
            MemPartition::Single(enc) => {
                crate::prefetch::lines(enc.as_ptr(), enc.len(), FLUSH_PREFETCH_ROW_BYTES)
            }
            MemPartition::General(g) => crate::prefetch::line(&**g),
        }
    }
}

/// Touches the memory the encoding of a general partition in `batch` reads beyond what
/// the pipeline prefetched (its header: [`prefetch_contents`]), one level of indirection
/// at a time across the whole batch (first row, its cells, their values), so the cache
/// misses of different partitions overlap instead of coming one after the other.
/// Single-row partitions need nothing more. Reads only; the results are discarded.
fn warm_partitions(batch: &[(&PartitionKey, &MemPartition)]) {
    use crate::memtable::MemRows;
    use std::hint::black_box;
    fn first_row(p: &MemPartition) -> Option<&Row> {
        match p {
            MemPartition::General(g) => match &g.rows {
                MemRows::Small(v) => v.first(),
                MemRows::Large(_) => None,
            },
            MemPartition::Single(_) => None,
        }
    }
    for (_, p) in batch {
        black_box(first_row(p).map(|r| r.cells.len()));
    }
    for (_, p) in batch {
        black_box(
            first_row(p)
                .and_then(|r| r.cells.first())
                .map(|(id, _)| *id),
        );
    }
    for (_, p) in batch {
        for (_, d) in first_row(p).map_or(&[][..], |r| &r.cells[..]) {
            if let ColumnData::Simple(c) = d {
                black_box(c.value.first().copied());
            }
        }
    }
}

fn restrict(u: &mut PartitionUpdate, schema: &TableSchema, slices: &[ClusteringSlice]) {
    if slices.is_empty() {
        return;
    }
    let cmp = schema.clustering_comparator();
    u.rows
        .retain(|r| slices.iter().any(|s| s.contains(&cmp, &r.clustering)));
}

fn merge_into(schema: &TableSchema, acc: &mut Option<PartitionUpdate>, u: PartitionUpdate) {
    *acc = Some(match acc.take() {
        None => u,
        Some(a) => merge_partition_updates_owned(schema, a, &u),
    });
}

/// A source of partitions in ring order.
type MemRange<'a> = Box<dyn Iterator<Item = (&'a PartitionKey, &'a MemPartition)> + 'a>;

/// A range read's source of partitions in ring order.
enum Source<'a> {
    Mem(&'a Memtable, std::iter::Peekable<MemRange<'a>>),
    Sst(crate::sstable::Scanner<'a>),
}

/// A range read hands a partition to the single-partition read (which starts a resumed
/// page where it stopped, reads only the rows it returns, and uses the row index) when
/// some source holds at least this many rows of it in a memtable...
const RANGE_WIDE_MEM_ROWS: usize = 512;
/// ...or at least this many serialized bytes of it in an SSTable with a row index of it
/// (a partition of one huge row, or from an SSTable written before row indexes, is
/// merged here as before: the single-partition read would not read less of it).
const RANGE_WIDE_SST_BYTES: u64 = crate::rowindex::MIN_PARTITION_BYTES as u64;

impl Source<'_> {
    fn peek_key(&mut self) -> Result<Option<PartitionKey>> {
        match self {
            Source::Mem(_, it) => Ok(it.peek().map(|(k, _)| (*k).clone())),
            Source::Sst(s) => Ok(s.peek_key()?.cloned()),
        }
    }
    /// The next partition, its rows within `slices`.
    fn next(
        &mut self,
        slices: &[ClusteringSlice],
    ) -> Result<Option<(PartitionKey, PartitionUpdate)>> {
        match self {
            Source::Mem(m, it) => Ok(it.next().map(|(k, p)| (k.clone(), m.to_update(p, slices)))),
            Source::Sst(s) => s.next_partition(),
        }
    }
    /// Steps over the next partition.
    fn skip(&mut self) {
        match self {
            Source::Mem(_, it) => {
                it.next();
            }
            Source::Sst(s) => s.skip(),
        }
    }
    /// Whether the next partition is wide here ([`RANGE_WIDE_MEM_ROWS`],
    /// [`RANGE_WIDE_SST_BYTES`]).
    fn next_is_wide(&mut self) -> Result<bool> {
        Ok(match self {
            Source::Mem(_, it) => matches!(
                it.peek(),
                Some((_, MemPartition::General(g))) if g.rows.len() >= RANGE_WIDE_MEM_ROWS
            ),
            Source::Sst(s) => s.peek_row_indexed(RANGE_WIDE_SST_BYTES)?,
        })
    }
}

fn start_key_bound(b: &Bound<(i64, Option<Bytes>)>) -> Bound<PartitionKey> {
    match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included((t, None)) => Bound::Included(PartitionKey {
            token: *t,
            key: Bytes::new(),
        }),
        Bound::Excluded((t, None)) => match t.checked_add(1) {
            Some(n) => Bound::Included(PartitionKey {
                token: n,
                key: Bytes::new(),
            }),
            None => Bound::Excluded(PartitionKey {
                token: i64::MAX,
                key: Bytes::from_static(&[0xff; 64]),
            }),
        },
        Bound::Included((t, Some(k))) => Bound::Included(PartitionKey {
            token: *t,
            key: k.clone(),
        }),
        Bound::Excluded((t, Some(k))) => Bound::Excluded(PartitionKey {
            token: *t,
            key: k.clone(),
        }),
    }
}

fn read_range(
    t: &TableState,
    start: &Bound<(i64, Option<Bytes>)>,
    end: &Bound<(i64, Option<Bytes>)>,
    cmd: &ReadCommand,
    block_cache: &mut BlockCache,
    row_cache: &mut crate::rowcache::RowCache,
) -> Result<ReadResult> {
    let schema = &t.schema;
    // Effective start: the range start, or just after the paging position.
    let start_bound: Bound<(i64, Option<Bytes>)> = match &cmd.start_after {
        Some((k, Some(_))) => Bound::Included((k.token, Some(k.key.clone()))),
        Some((k, None)) => Bound::Excluded((k.token, Some(k.key.clone()))),
        None => start.clone(),
    };
    let sk = start_key_bound(&start_bound);
    let mut sources: Vec<Source<'_>> = Vec::new();
    let slices = cmd.slices.clone();
    let mems: Vec<&Memtable> = std::iter::once(&t.memtable)
        .chain(t.flushing.iter().rev().map(|f| f.mem.as_ref()))
        .collect();
    for m in mems {
        let it: MemRange<'_> = Box::new(m.range(sk.as_ref(), Bound::Unbounded));
        sources.push(Source::Mem(m, it.peekable()));
    }
    let mut sstables_read = 0;
    for s in t.sstables.iter().filter(|s| !s.is_quarantined()) {
        let scanner = match &sk {
            Bound::Unbounded => s.scan_from(i64::MIN, None, false)?,
            Bound::Included(k) => s.scan_from(k.token, Some(&k.key), false)?,
            Bound::Excluded(k) => s.scan_from(k.token, Some(&k.key), true)?,
        };
        sstables_read += 1;
        sources.push(Source::Sst(scanner));
    }
    let mut result = ReadResult {
        sstables_read,
        exhausted: true,
        ..Default::default()
    };
    let mut remaining = limit(cmd.row_limit);
    let start_remaining = remaining;
    let partition_limit = limit(cmd.partition_limit);
    loop {
        let mut min: Option<PartitionKey> = None;
        for s in sources.iter_mut() {
            if let Some(k) = s.peek_key()?
                && min.as_ref().is_none_or(|m| &k < m)
            {
                min = Some(k);
            }
        }
        let Some(key) = min else { break };
        if !in_range(&key, &Bound::Unbounded, end) {
            break;
        }
        let mut wide = false;
        for s in sources.iter_mut() {
            if s.peek_key()?.as_ref() == Some(&key) && s.next_is_wide()? {
                wide = true;
                break;
            }
        }
        if wide {
            // Read as a single-partition read of the rows this page still takes: a scan
            // paging through a partition of a million rows would otherwise merge the
            // whole partition for every page.
            for s in sources.iter_mut() {
                if s.peek_key()?.as_ref() == Some(&key) {
                    s.skip();
                }
            }
            if !in_range(&key, &start_bound, end) {
                continue;
            }
            if remaining == 0 {
                result.exhausted = false;
                break;
            }
            let mut one = cmd.clone();
            one.partitions = PartitionRange::Single(key.clone());
            one.row_limit = u32::try_from(remaining).unwrap_or(0);
            one.partition_limit = 0;
            one.start_after = match &cmd.start_after {
                Some((k, Some(c))) if *k == key => Some((key.clone(), Some(c.clone()))),
                _ => None,
            };
            let r = crate::read::read_single(
                crate::read::TableSources {
                    table: cmd.table,
                    schema,
                    cmp: &t.memtable.cmp,
                    memtables: std::iter::once(&t.memtable)
                        .chain(t.flushing.iter().rev().map(|f| f.mem.as_ref())),
                    sstables: &t.sstables,
                },
                &key,
                &one,
                block_cache,
                row_cache,
                false,
            )?;
            result.sstables_read += r.sstables_read;
            remaining = remaining.saturating_sub(r.rows_counted);
            result.partitions.extend(r.partitions);
            if !r.exhausted {
                result.exhausted = false;
                break;
            }
            if result.partitions.len() as u64 >= partition_limit {
                result.exhausted = false;
                break;
            }
            continue;
        }
        let mut acc: Option<PartitionUpdate> = None;
        for s in sources.iter_mut() {
            if s.peek_key()?.as_ref() == Some(&key)
                && let Some((_, mut u)) = s.next(&slices)?
            {
                if let Source::Sst(..) = s {
                    restrict(&mut u, schema, &cmd.slices);
                }
                merge_into(schema, &mut acc, u);
            }
        }
        if !in_range(&key, &start_bound, end) {
            continue;
        }
        let Some(mut merged) = acc else { continue };
        apply_own_deletions(schema, &mut merged);
        let after = match &cmd.start_after {
            Some((k, Some(c))) if *k == key => Some(c),
            _ => None,
        };
        if remaining == 0 {
            result.exhausted = false;
            break;
        }
        let (data, cut) = live_partition(schema, key, merged, cmd, after, &mut remaining);
        if let Some(d) = data {
            result.partitions.push(d);
        }
        if cut {
            result.exhausted = false;
            break;
        }
        if result.partitions.len() as u64 >= partition_limit {
            result.exhausted = false;
            break;
        }
    }
    result.rows_counted = start_remaining - remaining;
    let _: Option<&PartitionData> = None;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `keep_pace(done)` on a thread; the receiver gets a message when it returns.
    fn pacing(pace: FlushPace, done: usize) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            pace.keep_pace(done);
            let _ = tx.send(());
        });
        rx
    }

    /// A paced flush goes as far as the writes since its start allow (half of its
    /// partitions once the writes have filled half of its 700-byte span), and no further
    /// while no more arrive.
    #[test]
    fn a_paced_flush_keeps_pace_with_the_writes() {
        let pacer = FlushPacer::default();
        pacer.wrote(5_000); // before the flush: not counted
        let pace = pacer.pace(700.0, Duration::from_secs(600), 100, Default::default());
        pace.keep_pace(0);
        let rx = pacing(
            pacer.pace(700.0, Duration::from_secs(600), 100, Default::default()),
            50,
        );
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        pacer.wrote(300); // 300 / 700 of the span: 42% of the partitions
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        pacer.wrote(60); // 51%
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the writes let the flush go on");
        pace.keep_pace(51);
    }

    /// A flush that is not paced (nodetool flush, shutdown, a full budget) ends the pacing
    /// of those submitted before it, not of those submitted after.
    #[test]
    fn an_unpaced_flush_ends_the_pacing_of_earlier_ones() {
        let pacer = FlushPacer::default();
        let rx = pacing(
            pacer.pace(700.0, Duration::from_secs(600), 100, Default::default()),
            100,
        );
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        pacer.hurry();
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the hurry ends the pacing");
        let rx = pacing(
            pacer.pace(700.0, Duration::from_secs(600), 100, Default::default()),
            100,
        );
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    }

    /// Without writes a paced flush still ends by its longest span.
    #[test]
    fn a_paced_flush_ends_by_its_longest_span() {
        let pacer = FlushPacer::default();
        let started = std::time::Instant::now();
        let rx = pacing(
            pacer.pace(700.0, Duration::from_millis(300), 100, Default::default()),
            100,
        );
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the time floor ends the pacing");
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    fn slice(examined: usize, moved: usize, wrapped: bool) -> DefragSlice {
        DefragSlice {
            examined,
            moved,
            wrapped,
            cut: false,
        }
    }

    /// A flush copies a single-row partition of simple cells from the memtable's bytes;
    /// the SSTable reads back the same partitions with the same statistics (but for the
    /// sizes: the copied rows keep their own base timestamp) as one whose rows were all
    /// decoded and encoded again.
    #[test]
    fn a_flush_copies_simple_rows_with_the_statistics_of_encoding_them() {
        use amphora_types::data::{Cell, Clustering, DeletionTime, LivenessInfo};
        use amphora_types::schema::{ColumnKind, TableOptions};
        let cd = crate::test_support::blob_column;
        let schema = Arc::new(TableSchema::new(
            TableId(1),
            "ks",
            "t",
            vec![
                cd("k", ColumnKind::PartitionKey),
                cd("v", ColumnKind::Regular),
                cd("w", ColumnKind::Regular),
            ],
            TableOptions::default(),
        ));
        let v = |ts: i64| Cell::live(ts, Bytes::from(vec![ts as u8; 5]));
        let row = |marker: Option<LivenessInfo>, cells: Vec<Cell>| Row {
            clustering: Clustering::empty(),
            marker,
            deletion: None,
            cells: cells
                .into_iter()
                .enumerate()
                .map(|(i, c)| (i as u32 + 1, ColumnData::Simple(c)))
                .collect(),
        };
        let rows = [
            row(Some(LivenessInfo::new(10)), vec![v(10), v(12)]),
            row(None, vec![v(-4)]),
            row(Some(LivenessInfo::expiring(20, 60, 1_000)), vec![v(20)]),
            row(
                None,
                vec![Cell::expiring(7, 30, 900, Bytes::from_static(b"e"))],
            ),
            row(
                Some(LivenessInfo::new(3)),
                vec![Cell::tombstone(3, 800), v(2)],
            ),
            row(
                Some(LivenessInfo::expiring(20, 60, 1_000)),
                vec![
                    Cell::tombstone(21, 500),
                    Cell::expiring(22, 10, 2_000, Bytes::from_static(b"f")),
                ],
            ),
            row(
                None,
                vec![Cell {
                    local_expiry: 5_000_000_000,
                    ..Cell::tombstone(1 << 40, 0)
                }],
            ),
            Row {
                deletion: Some(DeletionTime::new(9, 700)),
                ..row(None, vec![v(9)])
            },
        ];
        // Each row alone (the statistics of one partition), then all of them.
        let dir = tempfile::tempdir().expect("tmp");
        let mut generation = 0;
        let mut copied = 0;
        let sets = rows.iter().map(std::slice::from_ref).chain([&rows[..]]);
        for set in sets {
            let mut mem = Memtable::new(schema.clone());
            let mut keys = Vec::new();
            for (i, r) in set.iter().enumerate() {
                let k = PartitionKey::new(Bytes::from(format!("key{i}")));
                let u = PartitionUpdate {
                    rows: vec![r.clone()],
                    ..Default::default()
                };
                mem.apply(&k, &u, None);
                keys.push(k);
            }
            copied += mem
                .partitions
                .iter()
                .filter(|(_, p)| matches!(p, MemPartition::Single(e) if single_parts(e).is_some()))
                .count();
            generation += 2;
            let fast = flush_memtable(
                dir.path(),
                generation,
                &mem,
                77,
                None,
                FlushOut::Buffered(None),
            )
            .expect("flush")
            .expect("not empty");
            let mut w = SSTableWriter::new(dir.path(), generation + 1, &schema).expect("writer");
            for (k, p) in mem.partitions.iter() {
                let u = mem.to_update(p, &[]);
                let rows: Vec<&Row> = u.rows.iter().collect();
                w.append_parts(k, u.partition_deletion, u.static_row.as_ref(), &rows, &[])
                    .expect("append");
            }
            let slow = w.finish(77, 0).expect("finish").expect("not empty");
            let mut want = slow.stats.clone();
            want.uncompressed_bytes = fast.stats.uncompressed_bytes;
            want.partition_size_histogram = fast.stats.partition_size_histogram;
            assert_eq!(fast.stats, want, "{set:?}");
            for k in &keys {
                let got = fast.get(k).expect("read");
                assert!(got.is_some());
                assert_eq!(got, slow.get(k).expect("read"));
            }
        }
        // All but the row deletion are copied, alone and together.
        assert_eq!(copied, 2 * (rows.len() - 1));
    }

    #[test]
    fn defrag_episodes_pause_after_useless_or_stalled_passes() {
        // Slices follow one another until a pass ends; a pass that moved 10% and lowered
        // the slack goes on; one that moved under 1% pauses.
        let mut e = DefragEpisode::new(1000);
        assert_eq!(e.after(slice(100, 10, false), 1000), DEFRAG_TICK);
        assert_eq!(e.after(slice(100, 10, true), 900), DEFRAG_TICK);
        assert_eq!(e.after(slice(1000, 9, true), 800), DEFRAG_BACKOFF);
        // A pass over an empty map (or one of only decoded entries) pauses.
        let mut e = DefragEpisode::new(1000);
        assert_eq!(e.after(slice(0, 0, true), 1000), DEFRAG_BACKOFF);
        // Moves that do not lower the slack: the third such pass in a row pauses...
        let mut e = DefragEpisode::new(1000);
        assert_eq!(e.after(slice(100, 50, true), 1000), DEFRAG_TICK);
        assert_eq!(e.after(slice(100, 50, true), 1100), DEFRAG_TICK);
        assert_eq!(e.after(slice(100, 50, true), 1200), DEFRAG_BACKOFF);
        // ...and a pass that lowers it starts the count again.
        let mut e = DefragEpisode::new(1000);
        assert_eq!(e.after(slice(100, 50, true), 1000), DEFRAG_TICK);
        assert_eq!(e.after(slice(100, 50, true), 1000), DEFRAG_TICK);
        assert_eq!(e.after(slice(100, 50, true), 900), DEFRAG_TICK);
        assert_eq!(e.after(slice(100, 50, true), 950), DEFRAG_TICK);
        assert_eq!(e.after(slice(100, 50, true), 950), DEFRAG_TICK);
        assert_eq!(e.after(slice(100, 50, true), 950), DEFRAG_BACKOFF);
    }

    #[test]
    fn defrag_slices_cut_short_by_time_are_followed_sooner() {
        let cut = |examined| DefragSlice {
            cut: true,
            ..slice(examined, examined / 2, false)
        };
        let mut e = DefragEpisode::new(1000);
        // A slice through its whole budget waits a tick; one cut at half of it, half a
        // tick; one cut early, the shortest pause.
        assert_eq!(e.after(slice(DEFRAG_SLICE, 10, false), 1000), DEFRAG_TICK);
        assert_eq!(e.after(cut(DEFRAG_SLICE / 2), 1000), DEFRAG_TICK / 2);
        assert_eq!(e.after(cut(100), 1000), DEFRAG_TICK_MIN);
        // The end of a useful pass keeps the pace of its last slice.
        let last = DefragSlice {
            wrapped: true,
            ..cut(400)
        };
        assert_eq!(e.after(last, 900), DEFRAG_TICK_MIN);
    }
}
