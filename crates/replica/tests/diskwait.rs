//! `ShardDb::read_async`: a read whose SSTable bytes are not in the page cache waits for
//! them off the shard and runs again, and returns what a blocking read returns.

mod common;

use std::sync::Arc;

use amphora_storage::{PartitionRange, ReadCommand, StorageConfig};
use amphora_types::CqlType;
use amphora_types::data::{
    Cell, Clustering, ColumnData, Mutation, PartitionKey, PartitionUpdate, Row,
};
use amphora_types::schema::{ColumnKind, TableId, TableOptions, TableSchema};
use bytes::Bytes;

const TABLE: u128 = 9;
const KEYS: usize = 3000;

fn table() -> Arc<TableSchema> {
    common::key_value_table(TABLE)
}

const COUNTERS: u128 = 10;

fn counter_table() -> Arc<TableSchema> {
    let mut c = common::column("c", ColumnKind::Regular);
    c.ty = CqlType::Counter;
    Arc::new(TableSchema::new(
        TableId(COUNTERS),
        "ks",
        "counters",
        vec![common::column("key", ColumnKind::PartitionKey), c],
        TableOptions::default(),
    ))
}

fn increment(n: usize, by: i64) -> amphora_replica::CounterUpdate {
    amphora_replica::CounterUpdate {
        table: TableId(COUNTERS),
        key: key(n),
        clustering: Clustering::empty(),
        is_static: false,
        deltas: vec![(1, by)],
        timestamp: 1,
    }
}

/// A counter row's total, read without waiting off the shard.
async fn counter(db: &amphora_replica::ShardDb, n: usize) -> i64 {
    let r = db
        .read_async(&ReadCommand::new(
            TableId(COUNTERS),
            PartitionRange::Single(key(n)),
            0,
        ))
        .await
        .expect("read");
    match r
        .partitions
        .first()
        .and_then(|p| p.rows.first())
        .map(|r| &r.cells[0].1)
    {
        Some(ColumnData::Simple(c)) => amphora_types::data::counter_value(&c.value),
        other => panic!("no counter for key {n}: {other:?}"),
    }
}

fn key(n: usize) -> PartitionKey {
    PartitionKey::new(Bytes::from(format!("key-{n}")))
}

fn value(n: usize) -> Bytes {
    Bytes::from(format!("{n}-").repeat(200))
}

fn write(n: usize) -> Mutation {
    Mutation {
        table: TableId(TABLE),
        key: key(n),
        update: PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering::empty(),
                marker: None,
                deletion: None,
                cells: vec![(1, ColumnData::Simple(Cell::live(1, value(n))))],
            }],
            ..Default::default()
        },
    }
}

fn read(n: usize) -> ReadCommand {
    ReadCommand::new(TableId(TABLE), PartitionRange::Single(key(n)), 0)
}

/// The value a read returned for its one partition's one row.
fn value_of(r: &amphora_storage::ReadResult) -> Option<Bytes> {
    let p = r.partitions.first()?;
    let row = p.rows.first()?;
    match &row.cells.first()?.1 {
        ColumnData::Simple(c) => Some(c.value.clone()),
        _ => None,
    }
}

/// Drops every file under `dir` but the commitlog's from the page cache (the active
/// segment is mapped, and the pages of a mapping stay resident; reads never touch it).
fn evict(dir: &std::path::Path) {
    evict_where(dir, &|p| {
        !p.components().any(|c| c.as_os_str() == "commitlog")
    });
}

/// Drops the files under `dir` whose paths `pick` accepts from the page cache; returns
/// how many it dropped.
fn evict_where(dir: &std::path::Path, pick: &dyn Fn(&std::path::Path) -> bool) -> usize {
    let mut evicted = 0;
    for e in std::fs::read_dir(dir).expect("dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            evicted += evict_where(&p, pick);
        } else if pick(&p)
            && let Ok(f) = std::fs::File::open(&p)
        {
            let left = amphora_storage::diskwait::drop_from_page_cache(&f).expect("evict");
            assert_eq!(left, 0, "pages of {} left resident", p.display());
            evicted += 1;
        }
    }
    evicted
}

/// Runs `test` on a shard of `tables` in a fresh directory (no auto-compaction, no block
/// cache: every read of an SSTable goes to its files), given the shard and the directory.
fn on_shard<F, Fut>(tables: Vec<Arc<TableSchema>>, test: F)
where
    F: FnOnce(std::rc::Rc<amphora_replica::ShardDb>, std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = StorageConfig::new(dir.path(), 0);
    cfg.auto_compaction = false;
    cfg.block_cache_bytes = Some(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let db = amphora_replica::init_shard(cfg, tables, 1).expect("open");
        test(db, dir.path().to_path_buf()).await;
        amphora_replica::uninstall();
    });
}

/// Rounds of evicting the files and reading, until a read waited for the disk. One round
/// proves nothing: a `RWF_NOWAIT` read of an evicted page starts the readahead, and when
/// the disk answers before the kernel looks at the page again (190 of 5,000 such reads on
/// this VM, more on a busy host) the read is served, and the readahead (megabytes) has
/// brought in the whole small SSTable, so no read of that round waits. Each round reads
/// other keys (the row cache holds those read before) and the test's shard has no block
/// cache, so every round reads the files again.
const ROUNDS: usize = 7;

#[test]
fn reads_of_evicted_sstables_wait_off_the_shard_and_return_the_data() {
    on_shard(vec![table(), counter_table()], |db, dir| async move {
        for n in 0..KEYS {
            db.apply(write(n)).await.expect("applied");
        }
        db.flush_all().await.expect("flush");
        // One key stays in the memtable only.
        db.apply(write(KEYS)).await.expect("applied");
        // Just written, the files are in the page cache: no read waits.
        for n in (1..KEYS).step_by(61) {
            let r = db.read_async(&read(n)).await.expect("read");
            assert_eq!(value_of(&r), Some(value(n)));
        }
        assert_eq!(db.storage().metrics().disk_waits, 0);
        evict(&dir);

        // Many reads at once, as a shard serves them: every one completes with its data.
        let mut reads = (1..KEYS).step_by(61).count();
        for round in 0..ROUNDS {
            evict(&dir);
            let mut tasks = Vec::new();
            for n in (round..=KEYS).step_by(ROUNDS) {
                reads += 1;
                let db = db.clone();
                tasks.push(tokio::task::spawn_local(async move {
                    let r = db.read_async(&read(n)).await.expect("read");
                    (n, value_of(&r))
                }));
            }
            for t in tasks {
                let (n, v) = t.await.expect("task");
                assert_eq!(v, Some(value(n)), "key {n}");
            }
            if db.storage().metrics().disk_waits > 0 {
                break;
            }
        }
        let m = db.storage().metrics();
        assert!(m.disk_waits > 0, "no read waited for the disk: {m:?}");
        let counters = db.table_counters();
        let t = counters.get(&TableId(TABLE)).expect("the table's counters");
        // A read that waited is counted once, as one read.
        assert_eq!(t.reads, reads as u64);
        assert_eq!(t.read_errors, 0);

        // Each read returns what the blocking read returns, evicted or not, and a key that
        // is absent reads as absent.
        evict(&dir);
        for n in [1, 2, 500, 2999, KEYS, KEYS + 1] {
            let waited = db.read_async(&read(n)).await.expect("read");
            let blocking = db.read(&read(n)).expect("read");
            // (The second read finds the row cache filled by the first: compare the data.)
            assert_eq!(waited.partitions, blocking.partitions, "key {n}");
        }
        assert_eq!(
            value_of(&db.read_async(&read(KEYS + 1)).await.expect("read")),
            None
        );

        // A scan of evicted files waits for windows of them, and returns every partition.
        let all = ReadCommand::new(TableId(TABLE), PartitionRange::all(), 0);
        for round in 0..ROUNDS {
            evict(&dir);
            let before = db.storage().metrics().disk_waits;
            let scanned = db.read_async(&all).await.expect("scan");
            let waits = db.storage().metrics().disk_waits - before;
            // A window per wait, not a chunk (~2 MB of data: over 100 chunks of 16 KiB).
            assert!(waits <= 8, "the scan waited {waits} times");
            assert_eq!(scanned.partitions.len(), KEYS + 1);
            assert_eq!(scanned.partitions, db.read(&all).expect("scan").partitions);
            for p in &scanned.partitions {
                let n: usize = std::str::from_utf8(&p.key.key["key-".len()..])
                    .expect("utf8")
                    .parse()
                    .expect("number");
                let v = match &p.rows.first().expect("row").cells.first().expect("cell").1 {
                    ColumnData::Simple(c) => c.value.clone(),
                    _ => panic!("not a simple cell"),
                };
                assert_eq!(v, value(n), "key {n}");
            }
            if waits > 0 {
                break;
            }
            assert!(round + 1 < ROUNDS, "the scan never waited");
        }

        // Counter updates read before they write: one whose read waits for the disk reads
        // again after the wait, so concurrent increments of evicted rows all count. Each
        // round increments other rows, three times each.
        const ROWS: usize = 420;
        for n in 0..ROWS {
            db.apply_counter(increment(n, 1)).await.expect("increment");
        }
        db.flush_all().await.expect("flush");
        let before = db.storage().metrics().disk_waits;
        let mut rounds = 0;
        while rounds < ROUNDS && db.storage().metrics().disk_waits == before {
            evict(&dir);
            let mut tasks = Vec::new();
            for by in 10..13 {
                for n in (rounds..ROWS).step_by(ROUNDS) {
                    let db = db.clone();
                    tasks.push(tokio::task::spawn_local(async move {
                        db.apply_counter(increment(n, by)).await
                    }));
                }
            }
            for t in tasks {
                t.await.expect("task").expect("increment");
            }
            rounds += 1;
        }
        assert!(
            db.storage().metrics().disk_waits > before,
            "no counter update waited for the disk: {:?}",
            db.storage().metrics()
        );
        for n in 0..ROWS {
            let want = if n % ROUNDS < rounds {
                1 + 10 + 11 + 12
            } else {
                1
            };
            assert_eq!(counter(&db, n).await, want, "counter {n}");
        }
    });
}

/// A point read `read_now` declines because its data chunk is not in the page cache goes
/// on in the `read_async` that follows with that chunk's wait: no second try finds the
/// same chunk missing (each try that would wait counts a disk wait). Only the Data.db
/// files are evicted, so a point read misses one chunk at most.
#[test]
fn a_declined_read_starts_with_its_wait() {
    on_shard(vec![table()], |db, dir| async move {
        for n in 0..KEYS {
            db.apply(write(n)).await.expect("applied");
        }
        db.flush_all().await.expect("flush");
        let evict_data = || {
            let evicted = evict_where(&dir, &|p| p.to_string_lossy().ends_with("Data.db"));
            assert!(evicted > 0, "no Data.db under {}", dir.display());
        };
        let mut declined = 0;
        for round in 0..ROUNDS {
            evict_data();
            for n in (round..KEYS).step_by(97) {
                if let Some(r) = db.read_now(&read(n)) {
                    // Served: its chunk came in with an earlier read's readahead.
                    assert_eq!(value_of(&r.expect("read")), Some(value(n)), "key {n}");
                    continue;
                }
                declined += 1;
                let before = db.storage().metrics().disk_waits;
                let r = db.read_async(&read(n)).await.expect("read");
                assert_eq!(value_of(&r), Some(value(n)), "key {n}");
                assert_eq!(
                    db.storage().metrics().disk_waits,
                    before,
                    "key {n}: the read tried again before it waited"
                );
            }
            if declined > 0 {
                break;
            }
        }
        assert!(declined > 0, "read_now declined no read");
    });
}

/// A point read of a partition held by several SSTables, none of whose chunks are in the
/// page cache, waits once for all of them: the no-wait read goes on through the SSTables
/// after the first miss and gathers every miss into one wait, after which it is served (or
/// after a second, when the partition runs on into another chunk of some SSTable). Waiting
/// for each miss in turn, the read run again after each, took one wait per SSTable, their
/// latencies adding up. Only the Data.db files are evicted.
#[test]
fn a_read_waits_for_all_its_sstables_at_once() {
    const SSTABLES: usize = 4;
    on_shard(vec![table()], |db, dir| async move {
        let value_at = |n: usize, t: usize| Bytes::from(format!("{n}-{t}-").repeat(200));
        for t in 0..SSTABLES {
            for n in 0..KEYS {
                let mut m = write(n);
                m.update.rows[0].cells[0].1 =
                    ColumnData::Simple(Cell::live(1 + t as i64, value_at(n, t)));
                db.apply(m).await.expect("applied");
            }
            db.flush_all().await.expect("flush");
        }
        let mut gathered = 0;
        for round in 0..ROUNDS {
            let evicted = evict_where(&dir, &|p| p.to_string_lossy().ends_with("Data.db"));
            assert_eq!(evicted, SSTABLES);
            // Other keys each round: the row cache holds those read before.
            for n in (round..KEYS).step_by(131) {
                let w = match db.storage().try_read(&read(n)) {
                    // Served in part from an earlier read's readahead.
                    Ok(r) => {
                        assert_eq!(value_of(&r), Some(value_at(n, SSTABLES - 1)), "key {n}");
                        continue;
                    }
                    Err(amphora_storage::StorageError::WouldBlock(w)) => w,
                    Err(e) => panic!("key {n}: {e}"),
                };
                if w.parts() < SSTABLES {
                    // Some chunks came in with an earlier read's readahead: finish it.
                    let r = db.read_async(&read(n)).await.expect("read");
                    assert_eq!(value_of(&r), Some(value_at(n, SSTABLES - 1)), "key {n}");
                    continue;
                }
                assert_eq!(w.parts(), SSTABLES, "key {n}");
                gathered += 1;
                w.wait().expect("wait");
                // One wait brought in every SSTable's first missing chunk. A partition that
                // runs on into the next chunk of some SSTable needs a second (no read got
                // that far): served after two waits at most, not one per SSTable.
                let r = match db.storage().try_read(&read(n)) {
                    Ok(r) => r,
                    Err(amphora_storage::StorageError::WouldBlock(w)) => {
                        w.wait().expect("wait");
                        db.storage()
                            .try_read(&read(n))
                            .expect("served after two waits")
                    }
                    Err(e) => panic!("key {n}: {e}"),
                };
                assert_eq!(value_of(&r), Some(value_at(n, SSTABLES - 1)), "key {n}");
            }
            if gathered > 0 {
                break;
            }
        }
        assert!(gathered > 0, "no read missed all {SSTABLES} SSTables");
    });
}
