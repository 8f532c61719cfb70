//! amphora-replica: the node-local database, one [`ShardDb`] per shard.
//!
//! Owns: each shard's storage engine instance (in a thread-local, so the hot path takes
//! no locks), applying mutations (including counter updates, which are a read-modify-write
//! of this replica's counter shard and therefore happen on the owning shard without an
//! await between the read and the write), reads, and per-table DDL hooks (add, drop,
//! truncate) that the coordinator broadcasts to every shard.
//!
//! Must never depend on: `coordinator`, `server`, the CQL or protocol crates.
//!
//! Key types: [`ShardDb`], [`local`], [`ReplicaError`], [`stats::TableCounters`] (per-table
//! read/write counts and latencies), [`snapshot`] (hard-link snapshots of a table),
//! [`maintenance`] (garbagecollect, cleanup, scrub, refresh, histograms),
//! [`toppartitions`] (the partition key sampler).

pub mod maintenance;
pub mod snapshot;
pub mod stats;
pub mod toppartitions;

use std::cell::{Cell as StdCell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use amphora_storage::{ReadCommand, ReadResult, ShardStorage, StorageConfig, StorageError};
use amphora_types::data::{
    Cell, ColumnData, CounterShard, Mutation, PartitionKey, decode_counter_shards,
};
use amphora_types::schema::{ColumnId, TableId, TableSchema};

/// Disk waits a single-partition read takes ([`ShardDb::read_async`]) before it reads
/// blocking: each wait brings in what one attempt missed (an index block or a chunk per
/// SSTable), so a partition in several SSTables may need several; more means the page
/// cache drops the bytes between the wait and the next attempt.
pub const MAX_DISK_WAITS: usize = 16;

/// Disk waits a range read (a page of a scan) takes before it reads blocking: each brings
/// in a window of [`amphora_storage::shard::SCAN_WAIT_BYTES`] of one file.
pub const MAX_SCAN_DISK_WAITS: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error("shard {0} has no database (not initialised or shut down)")]
    NoDatabase(u32),
    #[error("unknown table {0}")]
    UnknownTable(TableId),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Busy(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

thread_local! {
    static DB: RefCell<Option<Rc<ShardDb>>> = const { RefCell::new(None) };
}

/// This shard's database.
pub fn local() -> Result<Rc<ShardDb>, ReplicaError> {
    DB.with(|d| d.borrow().clone())
        .ok_or_else(|| ReplicaError::NoDatabase(amphora_rt::current_shard().unwrap_or(u32::MAX)))
}

/// A counter update: per counter column, the delta to add.
#[derive(Debug, Clone)]
pub struct CounterUpdate {
    pub table: TableId,
    pub key: PartitionKey,
    pub clustering: amphora_types::data::Clustering,
    pub is_static: bool,
    pub deltas: Vec<(ColumnId, i64)>,
    pub timestamp: i64,
}

/// The future of [`ShardDb::apply`].
pub enum Applying {
    /// Applied; waiting for the commitlog (periodic mode: ready at the first poll).
    Acking {
        db: Rc<ShardDb>,
        table: TableId,
        started: std::time::Instant,
        ack: amphora_storage::WriteAck,
    },
    /// Finished at the call (an error), or already polled to completion.
    Done(Option<Result<(), ReplicaError>>),
    /// Waiting for memtable space before applying.
    Waiting(std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ReplicaError>>>>),
}

impl std::future::Future for Applying {
    type Output = Result<(), ReplicaError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let r = match &mut *self {
            Applying::Acking {
                db,
                table,
                started,
                ack,
            } => match std::pin::Pin::new(ack).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => {
                    db.record_write(*table, *started, r.is_ok());
                    r.map_err(ReplicaError::from)
                }
            },
            Applying::Done(r) => r.take().unwrap_or(Ok(())),
            Applying::Waiting(f) => match f.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r,
            },
        };
        *self = Applying::Done(None);
        Poll::Ready(r)
    }
}

pub struct ShardDb {
    shard: u32,
    /// Identifies this replica's counter shard (host id mixed with the shard number).
    counter_id: u128,
    storage: ShardStorage,
    /// Local reads/writes per table (shard-owned integers; nodetool and /metrics).
    table_counters: RefCell<stats::TableCounterMap>,
    /// True while `sampler` runs: the one branch reads and writes pay when it is off.
    sampling: StdCell<bool>,
    sampler: RefCell<Option<toppartitions::Sampler>>,
    /// The disk wait of the last read [`ShardDb::read_now`] declined, for the
    /// [`ShardDb::read_async`] of the same command that follows it: that read starts with
    /// the wait instead of trying the read again.
    declined: RefCell<Option<(ReadCommand, amphora_storage::diskwait::DiskWait)>>,
}

/// Opens (and replays) this shard's storage and installs it as the shard's database.
pub fn init_shard(
    cfg: StorageConfig,
    tables: Vec<Arc<TableSchema>>,
    host_id: u128,
) -> Result<Rc<ShardDb>, ReplicaError> {
    let shard = cfg.shard;
    let (storage, report) = ShardStorage::open(cfg, tables)?;
    tracing::info!(shard, ?report, "storage opened");
    // Installs finished flushes and compactions (and starts the next ones) while the shard
    // is otherwise idle; without it they would wait for the next request.
    tokio::task::spawn_local(storage.run_background());
    // The shard's idle time (for its grants of core time to background work) and, with
    // the background gate on, the flush and compaction threads run while the shard's event
    // loop is parked.
    amphora_rt::set_park_hook(Some(std::rc::Rc::new(storage.park_hook())));
    // Gives the allocator's fragmented slabs back (only with jemalloc's hooks registered).
    tokio::task::spawn_local(storage.run_defrag());
    // Writes acknowledged with their commitlog write-out deferred (the transport's inline
    // requests) reach the OS before anything goes from this shard to another.
    amphora_rt::set_send_barrier(|| {
        amphora_storage::commitlog::write_out_deferred(amphora_storage::commitlog::deferred_max())
            .map_err(|e| format!("the commitlog could not be written: {e}"))
    });
    let db = Rc::new(ShardDb {
        shard,
        counter_id: host_id ^ u128::from(shard),
        storage,
        table_counters: RefCell::new(stats::TableCounterMap::default()),
        sampling: StdCell::new(false),
        sampler: RefCell::new(None),
        declined: RefCell::new(None),
    });
    DB.with(|d| *d.borrow_mut() = Some(db.clone()));
    Ok(db)
}

/// Removes this shard's database (after shutdown).
pub fn uninstall() -> Option<Rc<ShardDb>> {
    DB.with(|d| d.borrow_mut().take())
}

impl ShardDb {
    pub fn shard(&self) -> u32 {
        self.shard
    }

    pub fn storage(&self) -> &ShardStorage {
        &self.storage
    }

    /// Applies a mutation; resolves once it is durable per the commitlog sync mode.
    ///
    /// When the shard's memtables are within their budget (nearly always), the mutation
    /// is appended and applied at the call, and the returned future only waits for the
    /// commitlog's acknowledgement: it holds no mutation and no nested state, so the
    /// futures of the coordinator's call chain above it stay small (each level of an
    /// `async` chain copies its callee's whole future when it starts it). Over the
    /// budget, the write waits for a flush in a boxed future, as before.
    pub fn apply(self: &Rc<Self>, m: Mutation) -> Applying {
        let started = std::time::Instant::now();
        let table = m.table;
        self.sample_write(table, &m.key.key);
        if !self.storage.admits_now() {
            let db = self.clone();
            return Applying::Waiting(Box::pin(async move {
                let r = db.apply_inner(m).await;
                db.record_write(table, started, r.is_ok());
                r
            }));
        }
        match self.storage.apply(&m) {
            Ok(ack) => Applying::Acking {
                db: self.clone(),
                table,
                started,
                ack,
            },
            Err(e) => {
                self.record_write(table, started, false);
                Applying::Done(Some(Err(e.into())))
            }
        }
    }

    /// Whether [`Self::apply_at_once`] may be called: a write would be admitted now and
    /// acknowledged without waiting for a sync.
    pub fn writes_at_once(&self) -> bool {
        self.storage.acks_at_once() && self.storage.admits_now()
    }

    /// [`Self::apply`] with no future, after [`Self::writes_at_once`] said yes (inside a
    /// `with_deferred_write_out` scope the commitlog write-out is left to the caller, as
    /// for `apply`'s first poll). Should the ack still have to wait, the write is applied
    /// but reported failed: it is never acknowledged before it is durable.
    pub fn apply_at_once(&self, m: Mutation) -> Result<(), ReplicaError> {
        let started = std::time::Instant::now();
        let table = m.table;
        self.sample_write(table, &m.key.key);
        let r = match self.storage.apply(&m) {
            Ok(ack) => match ack.now() {
                Ok(r) => r.map_err(ReplicaError::from),
                Err(_waiting) => Err(ReplicaError::Busy(
                    "the commitlog could not acknowledge the write at once".into(),
                )),
            },
            Err(e) => Err(e.into()),
        };
        self.record_write(table, started, r.is_ok());
        r
    }

    async fn apply_inner(&self, m: Mutation) -> Result<(), ReplicaError> {
        // Backpressure: waits while the shard's memtables are over their budget.
        self.storage.admit().await?;
        let ack = self.storage.apply(&m)?;
        ack.await?;
        Ok(())
    }

    fn record_write(&self, table: TableId, started: std::time::Instant, ok: bool) {
        let us = started.elapsed().as_micros() as u64;
        let mut c = self.table_counters.borrow_mut();
        let t = c.entry(table).or_default();
        if ok {
            t.writes += 1;
            t.write_latency.record(us);
        } else {
            t.write_errors += 1;
        }
    }

    /// This shard's per-table counters (tables never read or written are absent).
    pub fn table_counters(&self) -> stats::TableCounterMap {
        self.table_counters.borrow().clone()
    }

    /// Adds `deltas` to the counters of one row: reads this replica's counter shard and
    /// writes it back with the clock advanced, with no await in between.
    pub async fn apply_counter(&self, u: CounterUpdate) -> Result<(), ReplicaError> {
        let started = std::time::Instant::now();
        let table = u.table;
        self.sample_write(table, &u.key.key);
        let r = self.apply_counter_inner(u).await;
        self.record_write(table, started, r.is_ok());
        r
    }

    async fn apply_counter_inner(&self, u: CounterUpdate) -> Result<(), ReplicaError> {
        let mut cmd = ReadCommand::new(
            u.table,
            amphora_storage::PartitionRange::Single(u.key.clone()),
            0,
        );
        cmd.slices = vec![amphora_types::data::ClusteringSlice {
            start: amphora_types::data::ClusteringBound::inclusive(u.clustering.0.clone()),
            end: amphora_types::data::ClusteringBound::inclusive(u.clustering.0.clone()),
        }];
        cmd.now_seconds = i32::MAX - 1;
        // Nothing may await between the read that succeeds and the write. A read that would
        // wait for the disk has read nothing: wait for its bytes off the shard, then admit
        // and read again (admitting first each time, as that may await too).
        let mut waits = 0;
        let current = loop {
            self.storage.admit().await?;
            match self.storage.try_read(&cmd) {
                Err(StorageError::WouldBlock(w)) if waits < MAX_DISK_WAITS => {
                    waits += 1;
                    w.fault_in().await?;
                }
                Err(StorageError::WouldBlock(_)) => break self.storage.read(&cmd)?,
                r => break r?,
            }
        };
        let row = current.partitions.first().and_then(|p| {
            if u.is_static {
                p.static_row.clone()
            } else {
                p.rows.first().cloned()
            }
        });
        let mut cells = Vec::with_capacity(u.deltas.len());
        for (col, delta) in &u.deltas {
            let mut shards: Vec<CounterShard> = row
                .as_ref()
                .and_then(|r| r.cell(*col))
                .and_then(|d| match d {
                    ColumnData::Simple(c) if c.is_counter => Some(decode_counter_shards(&c.value)),
                    _ => None,
                })
                .unwrap_or_default();
            match shards.iter_mut().find(|s| s.counter_id == self.counter_id) {
                Some(s) => {
                    s.clock += 1;
                    s.value = s.value.wrapping_add(*delta);
                }
                None => shards.push(CounterShard {
                    counter_id: self.counter_id,
                    clock: 1,
                    value: *delta,
                }),
            }
            cells.push((
                *col,
                ColumnData::Simple(Cell::counter(u.timestamp, &shards)),
            ));
        }
        let mut r = amphora_types::data::Row::new(u.clustering.clone());
        r.cells = cells;
        let mut update = amphora_types::data::PartitionUpdate::default();
        if u.is_static {
            update.static_row = Some(r);
        } else {
            update.rows.push(r);
        }
        let ack = self.storage.apply(&Mutation {
            table: u.table,
            key: u.key,
            update,
        })?;
        ack.await?;
        Ok(())
    }

    /// Starts loading what requests for these partitions will touch first
    /// ([`ShardStorage::prefetch`]): a hint, before a batch of requests runs.
    pub fn prefetch(&self, keys: &[amphora_storage::PrefetchKey]) {
        self.storage.prefetch(keys);
    }

    /// Reads, blocking the shard while the disk delivers whatever the page cache does not
    /// hold. Requests use [`Self::read_async`]; this is for internal reads (schema, batch
    /// log, index and view maintenance) that cannot wait.
    pub fn read(&self, cmd: &ReadCommand) -> Result<ReadResult, ReplicaError> {
        self.sample_read(cmd);
        let started = std::time::Instant::now();
        let r = self.storage.read(cmd);
        self.count_read(cmd, started, r)
    }

    /// [`Self::read`] without blocking the shard on the disk: a read that needs SSTable
    /// bytes outside the page cache hands them to a helper thread and waits for it while
    /// the shard runs other requests, then runs again (amphora_storage::diskwait). A read
    /// served from memory and the page cache (nearly all of them) completes in the first
    /// poll, with no allocation. After [`MAX_DISK_WAITS`] waits ([`MAX_SCAN_DISK_WAITS`]
    /// for a range; the page cache losing the bytes again each time) it reads blocking.
    pub async fn read_async(&self, cmd: &ReadCommand) -> Result<ReadResult, ReplicaError> {
        self.sample_read(cmd);
        let started = std::time::Instant::now();
        // The read `read_now` just declined starts with its wait (a try would only find
        // the same bytes missing).
        let declined = self.declined.borrow_mut().take();
        if let Some((c, w)) = declined
            && c == *cmd
        {
            return Box::pin(self.read_after_waits(cmd, w, started)).await;
        }
        match self.storage.try_read(cmd) {
            Err(StorageError::WouldBlock(w)) => {
                Box::pin(self.read_after_waits(cmd, *w, started)).await
            }
            r => self.count_read(cmd, started, r),
        }
    }

    /// [`Self::read_async`] when the read needs no wait for the disk: None (nothing read,
    /// nothing counted) when it would wait, for the caller to take `read_async`, which
    /// then starts with this read's wait.
    pub fn read_now(&self, cmd: &ReadCommand) -> Option<Result<ReadResult, ReplicaError>> {
        let started = std::time::Instant::now();
        match self.storage.try_read(cmd) {
            Err(StorageError::WouldBlock(w)) => {
                *self.declined.borrow_mut() = Some((cmd.clone(), *w));
                None
            }
            r => {
                self.sample_read(cmd);
                Some(self.count_read(cmd, started, r))
            }
        }
    }

    async fn read_after_waits(
        &self,
        cmd: &ReadCommand,
        mut wait: amphora_storage::diskwait::DiskWait,
        started: std::time::Instant,
    ) -> Result<ReadResult, ReplicaError> {
        let waits = match cmd.partitions {
            amphora_storage::PartitionRange::Single(_) => MAX_DISK_WAITS,
            amphora_storage::PartitionRange::TokenRange { .. } => MAX_SCAN_DISK_WAITS,
        };
        for _ in 0..waits {
            amphora_trace::event(|| match wait.parts() {
                1 => format!("Waiting for the disk: {}", wait.path().display()),
                n => format!(
                    "Waiting for the disk: {} and {} more",
                    wait.path().display(),
                    n - 1
                ),
            });
            if let Err(e) = wait.fault_in().await {
                return self.count_read(cmd, started, Err(e));
            }
            match self.storage.try_read(cmd) {
                Err(StorageError::WouldBlock(w)) => wait = *w,
                r => return self.count_read(cmd, started, r),
            }
        }
        let r = self.storage.read(cmd);
        self.count_read(cmd, started, r)
    }

    fn sample_write(&self, table: TableId, key: &bytes::Bytes) {
        if self.sampling.get()
            && let Some(s) = self.sampler.borrow_mut().as_mut()
        {
            s.record_write(table, key);
        }
    }

    fn sample_read(&self, cmd: &ReadCommand) {
        if self.sampling.get()
            && let amphora_storage::PartitionRange::Single(k) = &cmd.partitions
            && let Some(s) = self.sampler.borrow_mut().as_mut()
        {
            s.record_read(cmd.table, &k.key);
        }
    }

    fn count_read(
        &self,
        cmd: &ReadCommand,
        started: std::time::Instant,
        r: Result<ReadResult, StorageError>,
    ) -> Result<ReadResult, ReplicaError> {
        let us = started.elapsed().as_micros() as u64;
        let mut c = self.table_counters.borrow_mut();
        let t = c.entry(cmd.table).or_default();
        if r.is_ok() {
            t.reads += 1;
            t.read_latency.record(us);
        } else {
            t.read_errors += 1;
        }
        Ok(r?)
    }

    pub fn add_table(&self, t: Arc<TableSchema>) -> Result<(), ReplicaError> {
        Ok(self.storage.add_table(t)?)
    }

    pub fn alter_table(&self, t: Arc<TableSchema>) -> Result<(), ReplicaError> {
        Ok(self.storage.alter_table(t)?)
    }

    pub fn drop_table(&self, id: TableId) -> Result<(), ReplicaError> {
        self.table_counters.borrow_mut().remove(&id);
        Ok(self.storage.drop_table(id)?)
    }

    pub async fn truncate(&self, id: TableId) -> Result<(), ReplicaError> {
        self.storage.truncate(id)?;
        Ok(())
    }

    pub async fn flush_all(&self) -> Result<(), ReplicaError> {
        self.storage.flush_all().await?;
        Ok(())
    }

    pub async fn shutdown(&self) -> Result<(), ReplicaError> {
        self.storage.shutdown().await?;
        Ok(())
    }
}
