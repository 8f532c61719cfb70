//! The row cache: point reads served from it return what was written, across writes,
//! flushes, compactions, deletions, TTL expiry, purges, truncate/drop and eviction.

use std::future::Future;
use std::sync::Arc;

use amphora_storage::rowcache::RowCacheStats;
use amphora_storage::{PartitionRange, ReadCommand, ShardStorage, StorageConfig};
use amphora_types::data::{
    Cell, Clustering, ClusteringBound, ClusteringSlice, ColumnData, DeletionTime, PartitionUpdate,
    RangeTombstone, Row,
};
use amphora_types::schema::{ClusteringOrder, TableId, TableSchema};
use bytes::Bytes;

use crate::common::*;

const T: TableId = TableId(1);
const NOW: i32 = 1_000_000;

fn cfg(dir: &std::path::Path, row_cache_bytes: u64) -> StorageConfig {
    let mut c = config(dir);
    c.row_cache_bytes = Some(row_cache_bytes);
    // The engine's clock agrees with the reads' `now` (gc_grace decisions).
    c.clock = amphora_storage::Clock::from_fn(|| NOW);
    c
}

fn read_at(s: &ShardStorage, k: &str, now: i32) -> Vec<(String, i32, String)> {
    let cmd = ReadCommand::new(T, PartitionRange::Single(pk(k)), now);
    values(&s.read(&cmd).expect("read"))
}

fn read(s: &ShardStorage, k: &str) -> Vec<(String, i32, String)> {
    read_at(s, k, NOW)
}

fn rows(k: &str, rs: &[(i32, &str)]) -> Vec<(String, i32, String)> {
    rs.iter()
        .map(|(c, v)| (k.to_string(), *c, v.to_string()))
        .collect()
}

async fn put(s: &ShardStorage, k: &str, c: i32, v: &str, ts: i64) {
    s.apply(&row_write(1, k, c, v, ts))
        .expect("apply")
        .await
        .expect("ack");
}

fn stats(s: &ShardStorage) -> RowCacheStats {
    s.row_cache_stats()
}

fn open(dir: &std::path::Path, c: StorageConfig) -> ShardStorage {
    let _ = dir;
    ShardStorage::open(c, vec![clustered_schema(1, ClusteringOrder::Asc)])
        .expect("open")
        .0
}

/// k1 with rows 1..=3 in an SSTable, read once (a miss that fills the cache).
async fn cached_partition(s: &ShardStorage) {
    for c in 1..=3 {
        put(s, "k1", c, &format!("v{c}"), 10).await;
    }
    s.flush(T).await.expect("flush");
    assert_eq!(
        read(s, "k1"),
        rows("k1", &[(1, "v1"), (2, "v2"), (3, "v3")])
    );
    let st = stats(s);
    assert_eq!(
        (st.misses, st.insertions, st.partitions),
        (1, 1, 1),
        "{st:?}"
    );
}

#[test]
fn repeated_reads_hit_and_read_no_sstable() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let s = open(dir.path(), cfg(dir.path(), 1 << 20));
        cached_partition(&s).await;
        let cmd = ReadCommand::new(T, PartitionRange::Single(pk("k1")), NOW);
        let r = s.read(&cmd).expect("read");
        assert_eq!(r.sstables_read, 0);
        assert_eq!(values(&r).len(), 3);
        assert_eq!(stats(&s).hits, 1);
        let m = s.metrics();
        assert_eq!((m.row_cache_hits, m.row_cache_misses), (1, 1));
        assert_eq!(m.row_cache_partitions, 1);
        assert!(m.row_cache_bytes > 0);
        // An absent partition is cached too (as empty), and stays absent.
        assert_eq!(read(&s, "nope"), vec![]);
        assert_eq!(read(&s, "nope"), vec![]);
        assert_eq!(stats(&s).hits, 2);
    });
}

#[test]
fn slices_reversed_and_limited_reads_of_a_cached_partition() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let s = open(dir.path(), cfg(dir.path(), 1 << 20));
        for c in 0..10 {
            put(&s, "k", c, &format!("v{c}"), 10).await;
        }
        s.flush(T).await.expect("flush");
        let slice = |a: i32, b: i32| ClusteringSlice {
            start: ClusteringBound::inclusive(vec![i(a)]),
            end: ClusteringBound::inclusive(vec![i(b)]),
        };
        for pass in 0..2 {
            let mut cmd = ReadCommand::new(T, PartitionRange::Single(pk("k")), NOW);
            cmd.slices = vec![slice(2, 4), slice(3, 6), slice(8, 8)];
            let got: Vec<i32> = values(&s.read(&cmd).expect("read"))
                .into_iter()
                .map(|r| r.1)
                .collect();
            assert_eq!(got, vec![2, 3, 4, 5, 6, 8], "pass {pass}");
            cmd.reversed = true;
            cmd.row_limit = 2;
            let got: Vec<i32> = values(&s.read(&cmd).expect("read"))
                .into_iter()
                .map(|r| r.1)
                .collect();
            assert_eq!(got, vec![8, 6], "pass {pass}");
        }
        let st = stats(&s);
        assert_eq!((st.misses, st.hits), (1, 3), "{st:?}");
    });
}

#[test]
fn write_after_cached_read_is_visible() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let s = open(dir.path(), cfg(dir.path(), 1 << 20));
        cached_partition(&s).await;
        put(&s, "k1", 2, "new", 20).await;
        put(&s, "k1", 4, "v4", 20).await;
        // An older write loses to the cached cell.
        put(&s, "k1", 3, "old", 5).await;
        let want = rows("k1", &[(1, "v1"), (2, "new"), (3, "v3"), (4, "v4")]);
        assert_eq!(read(&s, "k1"), want);
        assert_eq!(stats(&s).hits, 1);
        // The flush merges the memtable into the cached entry: still a hit, same answer.
        s.flush(T).await.expect("flush");
        let r = s
            .read(&ReadCommand::new(T, PartitionRange::Single(pk("k1")), NOW))
            .expect("read");
        assert_eq!(values(&r), want);
        assert_eq!(r.sstables_read, 0, "served from the cache");
        let st = stats(&s);
        assert_eq!((st.hits, st.misses, st.partitions), (2, 1, 1), "{st:?}");
    });
}

#[test]
fn flush_of_uncached_partitions_leaves_the_cache_alone() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let s = open(dir.path(), cfg(dir.path(), 1 << 20));
        cached_partition(&s).await;
        put(&s, "k2", 1, "x", 20).await;
        s.flush(T).await.expect("flush");
        assert_eq!(read(&s, "k1").len(), 3);
        assert_eq!(read(&s, "k2"), rows("k2", &[(1, "x")]));
        let st = stats(&s);
        assert_eq!((st.hits, st.misses, st.partitions), (1, 2, 2), "{st:?}");
    });
}

#[test]
fn compaction_keeps_entries_and_answers() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let s = open(dir.path(), cfg(dir.path(), 1 << 20));
        cached_partition(&s).await;
        for round in 0..3 {
            put(&s, "k1", 10 + round, "w", 20 + i64::from(round)).await;
            put(&s, "other", round, "o", 20).await;
            s.flush(T).await.expect("flush");
        }
        let before = read(&s, "k1");
        assert_eq!(before.len(), 6);
        s.compact_major(T).await.expect("compact");
        assert_eq!(s.metrics().sstable_count, 1);
        let st = stats(&s);
        assert_eq!(st.invalidations, 0, "nothing purgeable: entries stay");
        assert_eq!(read(&s, "k1"), before);
        assert_eq!(stats(&s).hits, st.hits + 1);
        assert_eq!(read(&s, "other").len(), 3);
    });
}

fn tombstone_updates() -> Vec<(&'static str, PartitionUpdate)> {
    let row = |c: i32, deletion, cells| Row {
        clustering: Clustering(vec![i(c)]),
        marker: None,
        deletion,
        cells,
    };
    vec![
        (
            "cell tombstone",
            PartitionUpdate {
                rows: vec![row(
                    2,
                    None,
                    vec![(2, ColumnData::Simple(Cell::tombstone(20, NOW)))],
                )],
                ..Default::default()
            },
        ),
        (
            "row deletion",
            PartitionUpdate {
                rows: vec![row(2, Some(DeletionTime::new(20, NOW)), vec![])],
                ..Default::default()
            },
        ),
        (
            "range tombstone",
            PartitionUpdate {
                range_tombstones: vec![RangeTombstone {
                    start: ClusteringBound::inclusive(vec![i(2)]),
                    end: ClusteringBound::inclusive(vec![i(3)]),
                    deletion: DeletionTime::new(20, NOW),
                }],
                ..Default::default()
            },
        ),
        (
            "partition tombstone",
            PartitionUpdate {
                partition_deletion: Some(DeletionTime::new(20, NOW)),
                ..Default::default()
            },
        ),
    ]
}

#[test]
fn deletions_of_a_cached_partition() {
    let wants = [
        // The cell tombstone leaves row 2 alive through its marker, with no value.
        rows("k1", &[(1, "v1"), (2, ""), (3, "v3")]),
        rows("k1", &[(1, "v1"), (3, "v3")]),
        rows("k1", &[(1, "v1")]),
        vec![],
    ];
    for ((what, update), want) in tombstone_updates().into_iter().zip(wants) {
        let dir = tempfile::tempdir().expect("tmp");
        rt().block_on(async {
            let s = open(dir.path(), cfg(dir.path(), 1 << 20));
            cached_partition(&s).await;
            apply_update(&s, 1, "k1", update).await;
            assert_eq!(read(&s, "k1"), want, "{what}, in the memtable");
            s.flush(T).await.expect("flush");
            assert_eq!(read(&s, "k1"), want, "{what}, flushed into the entry");
            s.compact_major(T).await.expect("compact");
            assert_eq!(read(&s, "k1"), want, "{what}, compacted");
            // A write newer than the deletion is visible again.
            put(&s, "k1", 2, "back", 30).await;
            let got = read(&s, "k1");
            assert!(
                got.contains(&("k1".into(), 2, "back".into())),
                "{what}: {got:?}"
            );
            let st = stats(&s);
            assert_eq!((st.hits, st.invalidations), (4, 0), "{what}: {st:?}");
        });
    }
}

#[test]
fn ttl_expiry_of_a_cached_cell_is_applied_at_read_time() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let s = open(dir.path(), cfg(dir.path(), 1 << 20));
        let update = PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering(vec![i(1)]),
                marker: None,
                deletion: None,
                cells: vec![(
                    2,
                    ColumnData::Simple(Cell::expiring(10, 100, NOW, Bytes::from_static(b"t"))),
                )],
            }],
            ..Default::default()
        };
        apply_update(&s, 1, "k", update).await;
        s.flush(T).await.expect("flush");
        assert_eq!(read_at(&s, "k", NOW + 99), rows("k", &[(1, "t")]));
        assert_eq!(read_at(&s, "k", NOW + 99), rows("k", &[(1, "t")]));
        assert_eq!(read_at(&s, "k", NOW + 100), vec![]);
        assert_eq!(read_at(&s, "k", NOW + 5000), vec![]);
        let st = stats(&s);
        assert_eq!((st.misses, st.hits), (1, 3), "{st:?}");
    });
}

/// gc_grace_seconds = 0: a compaction may purge tombstones, so it drops the table's
/// entries, and what was deleted stays deleted.
#[test]
fn purging_compaction_drops_entries_and_resurrects_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let mut schema = (*clustered_schema(1, ClusteringOrder::Asc)).clone();
        schema.options.gc_grace_seconds = 0;
        let schema: Arc<TableSchema> = Arc::new(schema);
        let clock_now = NOW + 10;
        let mut c = cfg(dir.path(), 1 << 20);
        c.clock = amphora_storage::Clock::from_fn(move || clock_now);
        let (s, _) = ShardStorage::open(c, vec![schema]).expect("open");
        cached_partition(&s).await;
        // The tombstones and the data they shadow are in different SSTables.
        for (_, update) in tombstone_updates().into_iter().take(3) {
            apply_update(&s, 1, "k1", update).await;
        }
        s.flush(T).await.expect("flush");
        assert_eq!(read(&s, "k1"), rows("k1", &[(1, "v1")]));
        let hits = stats(&s).hits;
        s.compact_major(T).await.expect("compact");
        let st = stats(&s);
        assert_eq!((st.partitions, st.invalidations), (0, 1), "{st:?}");
        assert_eq!(read(&s, "k1"), rows("k1", &[(1, "v1")]));
        assert_eq!(read(&s, "k1"), rows("k1", &[(1, "v1")]));
        assert_eq!(stats(&s).hits, hits + 1);
    });
}

#[test]
fn truncate_and_drop_clear_the_tables_entries() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let s = open(dir.path(), cfg(dir.path(), 1 << 20));
        let other = clustered_schema(2, ClusteringOrder::Asc);
        s.add_table(other.clone()).expect("add");
        cached_partition(&s).await;
        s.apply(&row_write(2, "k1", 1, "x", 10))
            .expect("apply")
            .await
            .expect("ack");
        s.flush(TableId(2)).await.expect("flush");
        let other_read = || {
            values(
                &s.read(&ReadCommand::new(
                    TableId(2),
                    PartitionRange::Single(pk("k1")),
                    NOW,
                ))
                .expect("read"),
            )
        };
        assert_eq!(other_read().len(), 1);
        assert_eq!(stats(&s).partitions, 2);
        s.truncate(T).expect("truncate");
        assert_eq!(stats(&s).partitions, 1);
        assert_eq!(read(&s, "k1"), vec![]);
        assert_eq!(other_read().len(), 1);
        // New data after the truncate is read from its new SSTable.
        put(&s, "k1", 7, "after", 40).await;
        s.flush(T).await.expect("flush");
        assert_eq!(read(&s, "k1"), rows("k1", &[(7, "after")]));
        assert_eq!(read(&s, "k1"), rows("k1", &[(7, "after")]));
        s.drop_table(TableId(2)).expect("drop");
        let st = stats(&s);
        assert_eq!(st.partitions, 1, "{st:?}");
        assert!(st.bytes > 0);
    });
}

#[test]
fn tiny_budget_evicts_stays_bounded_and_correct() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let budget = 8 << 10;
        let s = open(dir.path(), cfg(dir.path(), budget));
        let keys: Vec<String> = (0..200).map(|n| format!("key{n}")).collect();
        for (n, k) in keys.iter().enumerate() {
            put(&s, k, 1, &format!("{k}-{}", "x".repeat(n % 50)), 10).await;
        }
        s.flush(T).await.expect("flush");
        for pass in 0..3 {
            for (n, k) in keys.iter().enumerate() {
                let want = rows(k, &[(1, &format!("{k}-{}", "x".repeat(n % 50)))]);
                assert_eq!(read(&s, k), want, "pass {pass}");
                // A hot key is read again at once: a hit.
                if n % 10 == 0 {
                    assert_eq!(read(&s, k), want, "pass {pass}");
                }
                let st = stats(&s);
                assert!(st.bytes <= budget, "{st:?}");
            }
        }
        // Once full, a miss takes an entry's place only when its key was asked for more
        // often lately (admission); the rest are read without being cached.
        let st = stats(&s);
        assert!(st.evictions > 10 && st.rejections > 100, "{st:?}");
        assert!(
            st.evictions + st.rejections + st.partitions >= st.misses,
            "{st:?}"
        );
        assert!(st.hits >= 60, "{st:?}");
        assert!(st.partitions > 0 && st.partitions < 200, "{st:?}");
    });
}

#[test]
fn partitions_over_the_limit_are_not_cached_but_read_whole() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let mut c = cfg(dir.path(), 1 << 20);
        c.row_cache_partition_max_bytes = 4 << 10;
        let s = open(dir.path(), c);
        for c in 0..100 {
            put(&s, "big", c, &"b".repeat(100), 10).await;
        }
        put(&s, "small", 1, "s", 10).await;
        s.flush(T).await.expect("flush");
        for _ in 0..2 {
            assert_eq!(read(&s, "big").len(), 100);
            let mut cmd = ReadCommand::new(T, PartitionRange::Single(pk("big")), NOW);
            cmd.slices = vec![ClusteringSlice {
                start: ClusteringBound::inclusive(vec![i(40)]),
                end: ClusteringBound::inclusive(vec![i(41)]),
            }];
            let r = s.read(&cmd).expect("read");
            assert_eq!(r.sstables_read, 1);
            assert_eq!(values(&r).iter().map(|v| v.1).collect::<Vec<_>>(), [40, 41]);
            assert_eq!(read(&s, "small").len(), 1);
        }
        let st = stats(&s);
        assert_eq!((st.partitions, st.hits), (1, 1), "{st:?}");
        // A cached partition that grows past the limit in a flush is dropped.
        for c in 0..100 {
            put(&s, "small", c + 2, &"s".repeat(100), 20).await;
        }
        s.flush(T).await.expect("flush");
        let st = stats(&s);
        assert_eq!((st.partitions, st.invalidations), (0, 1), "{st:?}");
        assert_eq!(read(&s, "small").len(), 101);
    });
}

#[test]
fn disabled_cache_counts_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let s = open(dir.path(), cfg(dir.path(), 0));
        cached_partition_disabled(&s).await;
        assert_eq!(stats(&s), RowCacheStats::default());
    });
}

async fn cached_partition_disabled(s: &ShardStorage) {
    put(s, "k1", 1, "v1", 10).await;
    s.flush(T).await.expect("flush");
    assert_eq!(read(s, "k1"), rows("k1", &[(1, "v1")]));
    assert_eq!(read(s, "k1"), rows("k1", &[(1, "v1")]));
}

/// A flush of more partitions than one row cache update slice: while the cache takes the
/// flushed memtable slice by slice (with reads and writes between slices), every read
/// returns the latest value; the flush's waiters are answered, and its memtable leaves,
/// only when the cache has taken all of it.
#[test]
fn a_flush_reaches_the_row_cache_in_slices_and_reads_stay_right_meanwhile() {
    let d = tempfile::tempdir().expect("tmp");
    let s = open(d.path(), cfg(d.path(), 64 << 20));
    let n = 5_000;
    let key = |k: usize| format!("k{k}");
    rt().block_on(async {
        for k in 0..n {
            put(&s, &key(k), 1, "old", 10).await;
        }
        s.flush(T).await.expect("flush");
        for k in 0..n {
            assert_eq!(read(&s, &key(k)), rows(&key(k), &[(1, "old")]));
        }
        assert_eq!(stats(&s).partitions, n as u64, "every partition cached");
        for k in 0..n {
            put(&s, &key(k), 1, "new", 20).await;
        }
        // Start the flush (its future runs up to its first wait), then watch it.
        let mut flush = Box::pin(s.flush(T));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(flush.as_mut().poll(&mut cx).is_pending());
        let (mut pending_seen, mut wrote, mut answered) = (0, false, false);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            s.poll_background();
            let st = s.table_stats(T).expect("stats");
            if st.flushing_memtables == 0 {
                break;
            }
            if st.sstable_count == 2 {
                // Installed, the cache update still running: reads see the new values.
                pending_seen += 1;
                for k in [0, 1, n / 2, n - 1] {
                    let want = if wrote && k == 0 { "newest" } else { "new" };
                    assert_eq!(read(&s, &key(k)), rows(&key(k), &[(1, want)]), "k{k}");
                }
                if !wrote {
                    put(&s, &key(0), 1, "newest", 30).await;
                    wrote = true;
                }
                // Polling the flush advances the update itself (its waiter helps), so
                // it may finish it here: then it must be finished when answered.
                if let std::task::Poll::Ready(r) = flush.as_mut().poll(&mut cx) {
                    r.expect("flush");
                    let st = s.table_stats(T).expect("stats");
                    assert_eq!(st.flushing_memtables, 0, "answered too early");
                    answered = true;
                    break;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the cache update never ended"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(pending_seen > 0, "the update was never seen between slices");
        if !answered {
            flush.await.expect("flush answered");
        }
        for k in 0..n {
            let want = if k == 0 { "newest" } else { "new" };
            assert_eq!(read(&s, &key(k)), rows(&key(k), &[(1, want)]), "k{k}");
        }
        let st = s.table_stats(T).expect("stats");
        assert_eq!(st.flushing_memtables, 0);
        assert_eq!(
            st.memtable_partitions, 1,
            "only the write made during the update"
        );
    });
}

/// Writers over the memtable budget get their memory back even when nothing else runs the
/// shard's background work: a flush's memory comes back only once the row cache has taken
/// the flushed partitions, and the waiting writers advance that update themselves.
#[test]
fn writers_over_budget_with_a_full_row_cache_do_not_wait_forever() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let d = tempfile::tempdir().expect("tmp");
        let mut c = cfg(d.path(), 64 << 20);
        c.memtable_budget_bytes = 256 << 10;
        let s = open(d.path(), c);
        rt().block_on(async {
            for round in 0..3 {
                for k in 0..3_000 {
                    s.admit().await.expect("admit");
                    put(&s, &format!("k{k}"), 1, &format!("v{round}"), 10 + round).await;
                }
                // Fill the cache with what is there so far.
                for k in (0..3_000).step_by(3) {
                    read(&s, &format!("k{k}"));
                }
            }
            for k in [0, 1_500, 2_999] {
                assert_eq!(
                    read(&s, &format!("k{k}")),
                    rows(&format!("k{k}"), &[(1, "v2")])
                );
            }
        });
        let _ = tx.send(s.metrics().flushes);
    });
    let flushes = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("writers waited forever for memory (or the writer failed)");
    assert!(
        flushes >= 3,
        "the budget was not exceeded: {flushes} flushes"
    );
}

/// A row cache too small for the partitions read keeps most of them out once full
/// (admission); those reads (slices, reversed, limited, resumed after a row, with
/// memtable rows and a range tombstone on top) return what the same reads return from a
/// node with the cache off.
#[test]
fn reads_kept_out_of_a_full_cache_answer_as_without_it() {
    let (da, db) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    rt().block_on(async {
        let small = open(da.path(), cfg(da.path(), 64 << 10));
        let off = open(db.path(), cfg(db.path(), 0));
        let key = |k: usize| format!("w{k}");
        let between = |lo: i32, hi: i32| ClusteringSlice {
            start: ClusteringBound::inclusive(vec![Bytes::copy_from_slice(&lo.to_be_bytes())]),
            end: ClusteringBound::inclusive(vec![Bytes::copy_from_slice(&hi.to_be_bytes())]),
        };
        for s in [&small, &off] {
            for k in 0..100 {
                for c in 0..12 {
                    put(s, &key(k), c, &format!("v{k}-{c}"), 10).await;
                }
            }
            s.flush(T).await.expect("flush");
            // On top, in the memtable: every third partition gets a newer row 3 and a
            // range tombstone over rows 5..=8.
            for k in (0..100).step_by(3) {
                put(s, &key(k), 3, "newer", 20).await;
                let over = between(5, 8);
                let rt = RangeTombstone {
                    start: over.start,
                    end: over.end,
                    deletion: DeletionTime::new(15, NOW),
                };
                let update = PartitionUpdate {
                    range_tombstones: vec![rt],
                    ..Default::default()
                };
                apply_update(s, 1, &key(k), update).await;
            }
        }
        let commands = |k: usize| {
            let base = || ReadCommand::new(T, PartitionRange::Single(pk(&key(k))), NOW);
            let mut v = vec![base()];
            let mut c = base();
            c.slices = vec![between(2, 9)];
            v.push(c.clone());
            c.reversed = true;
            v.push(c.clone());
            c.row_limit = 3;
            v.push(c.clone());
            c.reversed = false;
            v.push(c.clone());
            c.start_after = Some((pk(&key(k)), Some(Clustering(vec![i(4)]))));
            v.push(c.clone());
            let mut two = base();
            two.slices = vec![between(0, 1), between(7, 10)];
            v.push(two);
            v
        };
        for pass in 0..3 {
            for k in (0..100).rev() {
                for (n, cmd) in commands(k).into_iter().enumerate() {
                    let (a, b) = (
                        small.read(&cmd).expect("read"),
                        off.read(&cmd).expect("read"),
                    );
                    assert_eq!(
                        (values(&a), a.exhausted),
                        (values(&b), b.exhausted),
                        "pass {pass} key {k} command {n}"
                    );
                }
            }
        }
        let st = stats(&small);
        assert!(
            st.rejections > 100 && st.hits > 100 && st.partitions > 5,
            "{st:?}"
        );
    });
}

/// Partitions over the row cache's size limit are read from their SSTables for the
/// read's slices (narrowed to after the last row returned when a page resumes): paging
/// through them forwards and backwards, with memtable rows and a range tombstone on top,
/// returns what a node with the cache off returns.
#[test]
fn pages_of_partitions_over_the_cache_limit_read_as_without_it() {
    let (da, db) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    rt().block_on(async {
        // 64 KiB: partitions over 8 KiB are not cached.
        let small = open(da.path(), cfg(da.path(), 64 << 10));
        let off = open(db.path(), cfg(db.path(), 0));
        let key = |k: usize| format!("wide{k}");
        for s in [&small, &off] {
            for k in 0..3 {
                for c in 0..300 {
                    put(s, &key(k), c, &format!("v{k}-{c}-{}", "x".repeat(40)), 10).await;
                }
            }
            s.flush(T).await.expect("flush");
            put(s, &key(1), 150, "newer", 20).await;
            let rt = RangeTombstone {
                start: ClusteringBound::inclusive(vec![i(100)]),
                end: ClusteringBound::inclusive(vec![i(120)]),
                deletion: DeletionTime::new(15, NOW),
            };
            let update = PartitionUpdate {
                range_tombstones: vec![rt],
                ..Default::default()
            };
            apply_update(s, 1, &key(2), update).await;
        }
        for k in 0..3 {
            for reversed in [false, true] {
                for sliced in [false, true] {
                    let mut cmd = ReadCommand::new(T, PartitionRange::Single(pk(&key(k))), NOW);
                    cmd.reversed = reversed;
                    cmd.row_limit = 37;
                    if sliced {
                        cmd.slices = vec![ClusteringSlice {
                            start: ClusteringBound::inclusive(vec![i(90)]),
                            end: ClusteringBound::exclusive(vec![i(260)]),
                        }];
                    }
                    // What the pages together must hold, from the writes themselves.
                    let mut want: Vec<(String, i32, String)> = (0..300)
                        .filter(|c| !sliced || (90..260).contains(c))
                        .filter(|c| k != 2 || !(100..=120).contains(c))
                        .map(|c| {
                            let v = if k == 1 && c == 150 {
                                "newer".to_string()
                            } else {
                                format!("v{k}-{c}-{}", "x".repeat(40))
                            };
                            (key(k), c, v)
                        })
                        .collect();
                    if reversed {
                        want.reverse();
                    }
                    let mut got = Vec::new();
                    let mut pages = 0;
                    loop {
                        let (a, b) = (
                            small.read(&cmd).expect("read"),
                            off.read(&cmd).expect("read"),
                        );
                        let (va, vb) = (values(&a), values(&b));
                        assert_eq!(
                            (&va, a.exhausted),
                            (&vb, b.exhausted),
                            "key {k} reversed {reversed} sliced {sliced} page {pages}"
                        );
                        pages += 1;
                        got.extend(va.iter().cloned());
                        let Some(last) = va.last() else { break };
                        if a.exhausted {
                            break;
                        }
                        cmd.start_after = Some((pk(&key(k)), Some(Clustering(vec![i(last.1)]))));
                    }
                    assert!(pages >= 4, "key {k}: {pages} pages");
                    assert_eq!(got, want, "key {k} reversed {reversed} sliced {sliced}");
                }
            }
        }
        let st = stats(&small);
        assert_eq!((st.insertions, st.partitions), (0, 0), "{st:?}");
    });
}
