use amphora_storage::{PartitionRange, ReadCommand, ShardStorage};
use amphora_types::data::{
    Cell, Clustering, ClusteringBound, ClusteringSlice, ColumnData, DeletionTime, Mutation,
    PartitionUpdate, RangeTombstone, Row,
};
use amphora_types::schema::{ClusteringOrder, TableId};
use bytes::Bytes;

use crate::common::*;

#[test]
fn write_flush_read_replay() {
    let dir = tempfile::tempdir().expect("tmp");
    let schema = clustered_schema(1, ClusteringOrder::Asc);
    rt().block_on(async {
        let (s, rep) = ShardStorage::open(config(dir.path()), vec![schema.clone()]).expect("open");
        assert_eq!(rep.mutations_replayed, 0);
        for c in 0..10 {
            s.apply(&row_write(1, "a", c, &format!("v{c}"), 10))
                .expect("apply")
                .await
                .expect("ack");
        }
        s.apply(&row_write(1, "b", 1, "b1", 10))
            .expect("apply")
            .await
            .expect("ack");
        let r = read_all(&s, 1, 0);
        assert_eq!(r.partitions.len(), 2);
        assert_eq!(values(&r).len(), 11);
        s.flush_all().await.expect("flush");
        assert_eq!(s.metrics().sstable_count, 1);
        // Overwrite after flush; newer wins.
        s.apply(&row_write(1, "a", 3, "new", 11))
            .expect("apply")
            .await
            .expect("ack");
        s.apply(&row_write(1, "a", 4, "old", 9))
            .expect("apply")
            .await
            .expect("ack");
        let mut cmd = ReadCommand::new(TableId(1), PartitionRange::Single(pk("a")), 0);
        let r = s.read(&cmd).expect("read");
        let v = values(&r);
        assert_eq!(v.len(), 10);
        assert_eq!(v[3].2, "new");
        assert_eq!(v[4].2, "v4");
        // Slice + reversed + limit.
        cmd.slices = vec![ClusteringSlice {
            start: ClusteringBound::inclusive(vec![i(2)]),
            end: ClusteringBound::exclusive(vec![i(6)]),
        }];
        cmd.reversed = true;
        cmd.row_limit = 3;
        let r = s.read(&cmd).expect("read");
        assert_eq!(
            values(&r).iter().map(|x| x.1).collect::<Vec<_>>(),
            vec![5, 4, 3]
        );
        assert!(!r.exhausted);
        // Range tombstone c in [2, 5] and a partition deletion of b.
        let m = Mutation {
            table: TableId(1),
            key: pk("a"),
            update: PartitionUpdate {
                range_tombstones: vec![RangeTombstone {
                    start: ClusteringBound::inclusive(vec![i(2)]),
                    end: ClusteringBound::inclusive(vec![i(5)]),
                    deletion: DeletionTime::new(12, 100),
                }],
                ..Default::default()
            },
        };
        s.apply(&m).expect("apply").await.expect("ack");
        let m = Mutation {
            table: TableId(1),
            key: pk("b"),
            update: PartitionUpdate {
                partition_deletion: Some(DeletionTime::new(12, 100)),
                ..Default::default()
            },
        };
        s.apply(&m).expect("apply").await.expect("ack");
        let cs: Vec<i32> = values(&read_all(&s, 1, 0)).iter().map(|x| x.1).collect();
        assert_eq!(cs, vec![0, 1, 6, 7, 8, 9]);
        // Drop without shutdown: replay must restore everything.
        drop(s);
        let (s, rep) =
            ShardStorage::open(config(dir.path()), vec![schema.clone()]).expect("reopen");
        assert_eq!(rep.mutations_replayed, 4, "{rep:?}");
        let cs: Vec<i32> = values(&read_all(&s, 1, 0)).iter().map(|x| x.1).collect();
        assert_eq!(cs, vec![0, 1, 6, 7, 8, 9]);
        s.flush_all().await.expect("flush");
        s.compact_major(TableId(1)).await.expect("compact");
        assert_eq!(s.metrics().sstable_count, 1);
        let cs: Vec<i32> = values(&read_all(&s, 1, 0)).iter().map(|x| x.1).collect();
        assert_eq!(cs, vec![0, 1, 6, 7, 8, 9]);
        s.shutdown().await.expect("shutdown");
        drop(s);
        let (s, rep) =
            ShardStorage::open(config(dir.path()), vec![schema.clone()]).expect("reopen");
        assert_eq!(
            rep.mutations_replayed, 0,
            "clean shutdown leaves nothing to replay: {rep:?}"
        );
        assert_eq!(values(&read_all(&s, 1, 0)).len(), 6);
    });
}

#[test]
fn ttl_statics_and_paging() {
    let dir = tempfile::tempdir().expect("tmp");
    let schema = clustered_schema(2, ClusteringOrder::Desc);
    rt().block_on(async {
        let (s, _) = ShardStorage::open(config(dir.path()), vec![schema]).expect("open");
        for k in ["x", "y", "z"] {
            for c in 0..5 {
                s.apply(&row_write(2, k, c, "v", 1))
                    .expect("apply")
                    .await
                    .expect("ack");
            }
        }
        // Expiring cell on x/0 (ttl 10 from now=100) and a static cell on y.
        let m = Mutation {
            table: TableId(2),
            key: pk("x"),
            update: PartitionUpdate {
                rows: vec![Row {
                    clustering: Clustering(vec![i(0)]),
                    marker: None,
                    deletion: None,
                    cells: vec![(
                        2,
                        ColumnData::Simple(Cell::expiring(5, 10, 100, Bytes::from_static(b"ttl"))),
                    )],
                }],
                ..Default::default()
            },
        };
        s.apply(&m).expect("apply").await.expect("ack");
        let m = Mutation {
            table: TableId(2),
            key: pk("y"),
            update: PartitionUpdate {
                static_row: Some(Row {
                    clustering: Clustering::empty(),
                    marker: None,
                    deletion: None,
                    cells: vec![(
                        3,
                        ColumnData::Simple(Cell::live(5, Bytes::from_static(b"stat"))),
                    )],
                }),
                ..Default::default()
            },
        };
        s.apply(&m).expect("apply").await.expect("ack");
        s.flush(TableId(2)).await.expect("flush");
        let r = s
            .read(&ReadCommand::new(
                TableId(2),
                PartitionRange::Single(pk("x")),
                105,
            ))
            .expect("read");
        let v = values(&r);
        assert_eq!(
            v.iter().map(|x| x.1).collect::<Vec<_>>(),
            vec![4, 3, 2, 1, 0],
            "DESC order"
        );
        assert_eq!(v[4].2, "ttl");
        let r = s
            .read(&ReadCommand::new(
                TableId(2),
                PartitionRange::Single(pk("x")),
                110,
            ))
            .expect("read");
        let v = values(&r);
        assert_eq!(
            v[4].2, "",
            "expired cell gone, row kept alive by its marker"
        );
        let r = s
            .read(&ReadCommand::new(
                TableId(2),
                PartitionRange::Single(pk("y")),
                0,
            ))
            .expect("read");
        assert!(r.partitions[0].static_row.is_some());
        // Paging through everything, 4 rows at a time.
        let mut all = Vec::new();
        let mut cmd = ReadCommand::new(TableId(2), PartitionRange::all(), 0);
        cmd.row_limit = 4;
        loop {
            let r = s.read(&cmd).expect("read");
            let v = values(&r);
            all.extend(v.clone());
            if r.exhausted {
                break;
            }
            let last = r.partitions.last().expect("page");
            cmd.start_after = Some((
                last.key.clone(),
                last.rows.last().map(|r| r.clustering.clone()),
            ));
            assert!(all.len() <= 15);
        }
        assert_eq!(all.len(), 15);
        let mut sorted = all.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), 15);
    });
}

#[test]
fn flushes_under_memory_pressure() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    cfg.memtable_budget_bytes = 256 << 10;
    cfg.auto_compaction = true;
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg, vec![standard1(5)]).expect("open");
        for n in 0..5000u32 {
            let m = standard1_write(5, &format!("k{n}"), Bytes::copy_from_slice(&[n as u8; 34]));
            s.apply(&m).expect("apply").await.expect("ack");
        }
        // Flushes kept happening while writing (not just the first one).
        let before = s.metrics();
        assert!(before.flushes + before.pending_flushes >= 4, "{before:?}");
        s.flush_all().await.expect("flush");
        let m = s.metrics();
        assert!(m.flushes >= 4, "{m:?}");
        assert!(m.memtable_bytes == 0, "{m:?}");
        assert_eq!(read_all(&s, 5, 0).partitions.len(), 5000);
    });
}

/// A flush started by the memtables' size keeps pace with the writes after it: with no more
/// writes it waits (up to `flush_pace_max`), but an explicit flush ends that at once, and so
/// does closing the storage (its flush thread is joined).
#[test]
fn a_paced_flush_waits_for_writes_but_not_for_an_explicit_flush_or_a_close() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    cfg.memtable_budget_bytes = 256 << 10;
    cfg.flush_pace_max = std::time::Duration::from_secs(600);
    // Writes until a flush for memory has been submitted, then stops.
    async fn fill(s: &ShardStorage, from: u32) -> u32 {
        let mut n = from;
        while s.metrics().pending_flushes == 0 {
            let m = standard1_write(5, &format!("k{n}"), Bytes::copy_from_slice(&[n as u8; 34]));
            s.apply(&m).expect("apply").await.expect("ack");
            n += 1;
            assert!(n < from + 100_000, "no flush for memory");
        }
        n
    }
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg, vec![standard1(5)]).expect("open");
        let n = fill(&s, 0).await;
        std::thread::sleep(std::time::Duration::from_millis(300));
        s.poll_background();
        let m = s.metrics();
        assert_eq!(
            (m.flushes, m.pending_flushes),
            (0, 1),
            "the flush waits: {m:?}"
        );
        let started = std::time::Instant::now();
        s.flush_all().await.expect("flush");
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        let m = s.metrics();
        assert!(
            m.flushes >= 1 && m.pending_flushes == 0 && m.memtable_bytes == 0,
            "{m:?}"
        );
        assert_eq!(read_all(&s, 5, 0).partitions.len(), n as usize);
        fill(&s, n).await;
        let started = std::time::Instant::now();
        drop(s);
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    });
}

/// With the background gate on, a flush waits while the shard says it runs requests, goes
/// on once it parks, and a close does not wait for a gate left shut.
#[test]
fn the_background_gate_holds_a_flush_while_the_shard_runs() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    cfg.background_gate = true;
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg, vec![standard1(5)]).expect("open");
        for n in 0..100u32 {
            let m = standard1_write(5, &format!("k{n}"), Bytes::copy_from_slice(&[n as u8; 34]));
            s.apply(&m).expect("apply").await.expect("ack");
        }
        let shard_running = s.park_hook();
        shard_running(true);
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(300), s.flush_all()).await;
        assert!(waited.is_err(), "the flush finished while the shard ran");
        s.poll_background();
        let m = s.metrics();
        assert_eq!((m.flushes, m.pending_flushes), (0, 1), "{m:?}");
        shard_running(false);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while s.metrics().flushes == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the flush never went on"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            s.poll_background();
        }
        assert_eq!(read_all(&s, 5, 0).partitions.len(), 100);
        // A flush held at a shut gate does not hold up the close.
        let m = standard1_write(5, "late", Bytes::from_static(b"v"));
        s.apply(&m).expect("apply").await.expect("ack");
        shard_running(true);
        let held = tokio::time::timeout(std::time::Duration::from_millis(50), s.flush_all()).await;
        assert!(held.is_err(), "the flush finished while the shard ran");
        let started = std::time::Instant::now();
        drop(s);
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    });
}

/// A slice read skips SSTables whose clustering range lies outside the slice (issue 2: only
/// the SSTables that can hold the data), unless they hold tombstones, which can reach
/// beyond their rows' bounds.
#[test]
fn slice_reads_skip_sstables_outside_their_clustering_range() {
    let dir = tempfile::tempdir().expect("tmp");
    // `k blob, c int, v blob, PRIMARY KEY (k, c)`: no static column.
    let schema = clustered_table(9, ClusteringOrder::Asc, false);
    let mut cfg = config(dir.path());
    cfg.row_cache_bytes = Some(0);
    let slice = |lo: i32, hi: i32| ClusteringSlice {
        start: ClusteringBound::inclusive(vec![i(lo)]),
        end: ClusteringBound::inclusive(vec![i(hi)]),
    };
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg, vec![schema]).expect("open");
        // Three SSTables holding rows 0-9, 10-19 and 20-29 of partition "a".
        for part in 0..3 {
            for c in part * 10..part * 10 + 10 {
                s.apply(&row_write(9, "a", c, &format!("v{c}"), 10))
                    .expect("apply")
                    .await
                    .expect("ack");
            }
            s.flush_all().await.expect("flush");
        }
        assert_eq!(s.metrics().sstable_count, 3);
        let read = |lo: i32, hi: i32| {
            let mut cmd = ReadCommand::new(TableId(9), PartitionRange::Single(pk("a")), 0);
            cmd.slices = vec![slice(lo, hi)];
            s.read(&cmd).expect("read")
        };
        let r = read(12, 14);
        assert_eq!(
            values(&r).iter().map(|x| x.1).collect::<Vec<_>>(),
            vec![12, 13, 14]
        );
        assert_eq!(r.sstables_read, 1, "only the SSTable of rows 10-19");
        let r = read(8, 21);
        assert_eq!(values(&r).len(), 14);
        assert_eq!(r.sstables_read, 3);
        // A slice between two SSTables' ranges reads none of them.
        let r = read(30, 40);
        assert!(values(&r).is_empty());
        assert_eq!(r.sstables_read, 0);
        // A partition deletion lands in a fourth SSTable whose only row is 100: its
        // clustering range is outside [12, 14], but its tombstone is not.
        let m = Mutation {
            table: TableId(9),
            key: pk("a"),
            update: PartitionUpdate {
                partition_deletion: Some(DeletionTime::new(11, 100)),
                ..Default::default()
            },
        };
        s.apply(&m).expect("apply").await.expect("ack");
        s.apply(&row_write(9, "a", 100, "v100", 12))
            .expect("apply")
            .await
            .expect("ack");
        s.flush_all().await.expect("flush");
        let r = read(12, 14);
        assert!(values(&r).is_empty(), "{:?}", values(&r));
        let r = read(100, 100);
        assert_eq!(values(&r).len(), 1);
    });
}

/// A slice read of a wide partition from SSTables (no row cache) builds only the rows in
/// its slices and stops after them when the SSTable holds no tombstone; in an SSTable
/// with a range tombstone (stored after the rows) it steps over the rest and still applies
/// it. Both clustering orders.
#[test]
fn slice_reads_of_wide_partitions_build_only_their_rows() {
    for order in [ClusteringOrder::Asc, ClusteringOrder::Desc] {
        let dir = tempfile::tempdir().expect("tmp");
        let schema = clustered_table(9, order, false);
        let mut cfg = config(dir.path());
        cfg.row_cache_bytes = Some(0);
        let slice = |lo: i32, hi: i32| {
            let (a, b) = match order {
                ClusteringOrder::Asc => (lo, hi),
                ClusteringOrder::Desc => (hi, lo),
            };
            ClusteringSlice {
                start: ClusteringBound::inclusive(vec![i(a)]),
                end: ClusteringBound::inclusive(vec![i(b)]),
            }
        };
        rt().block_on(async {
            let (s, _) = ShardStorage::open(cfg, vec![schema]).expect("open");
            for c in 0..100 {
                s.apply(&row_write(9, "a", c, &format!("v{c}"), 10))
                    .expect("apply")
                    .await
                    .expect("ack");
            }
            s.flush_all().await.expect("flush");
            let read = |slices: Vec<ClusteringSlice>| {
                let mut cmd = ReadCommand::new(TableId(9), PartitionRange::Single(pk("a")), 0);
                cmd.slices = slices;
                let mut got: Vec<i32> = values(&s.read(&cmd).expect("read"))
                    .iter()
                    .map(|x| x.1)
                    .collect();
                got.sort();
                got
            };
            assert_eq!(read(vec![slice(10, 14)]), vec![10, 11, 12, 13, 14]);
            assert_eq!(read(vec![slice(97, 120)]), vec![97, 98, 99]);
            assert_eq!(read(vec![slice(-5, 1)]), vec![0, 1]);
            let mut two = vec![slice(3, 4), slice(50, 51)];
            if order == ClusteringOrder::Desc {
                two.reverse();
            }
            assert_eq!(read(two), vec![3, 4, 50, 51]);
            // A range tombstone over 12..=13 (bounds in clustering order, as a slice's),
            // then compacted into one SSTable with the rows.
            let over = slice(12, 13);
            let m = Mutation {
                table: TableId(9),
                key: pk("a"),
                update: PartitionUpdate {
                    range_tombstones: vec![RangeTombstone {
                        start: over.start,
                        end: over.end,
                        deletion: DeletionTime::new(11, 100),
                    }],
                    ..Default::default()
                },
            };
            s.apply(&m).expect("apply").await.expect("ack");
            s.flush_all().await.expect("flush");
            assert_eq!(read(vec![slice(10, 14)]), vec![10, 11, 14]);
            s.compact_major(TableId(9)).await.expect("compact");
            assert_eq!(s.metrics().sstable_count, 1);
            assert_eq!(read(vec![slice(10, 14)]), vec![10, 11, 14]);
            assert_eq!(read(vec![slice(13, 13)]), Vec::<i32>::new());
            assert_eq!(read(vec![slice(98, 99)]), vec![98, 99]);
        });
    }
}

type Rows = std::collections::BTreeMap<(String, i32), String>;

/// 50 partitions of 4 rows written at timestamp `round`, then flushed.
async fn write_round(s: &ShardStorage, round: i64, expected: &mut Rows) {
    for k in 0..50 {
        for c in 0..4 {
            let v = format!("r{round}-{k}-{c}-{}", "x".repeat(64));
            s.apply(&row_write(7, &format!("k{k:03}"), c, &v, round))
                .expect("apply")
                .await
                .expect("ack");
            expected.insert((format!("k{k:03}"), c), v);
        }
    }
    s.flush_all().await.expect("flush");
}

/// Every row of table 7, as [`write_round`] records them.
fn stored_rows(s: &ShardStorage) -> Rows {
    values(&read_all(s, 7, 0))
        .into_iter()
        .map(|(k, c, v)| ((k, c), v))
        .collect()
}

/// A compaction's flush-output inputs become spare data files that later flushes write
/// over (`amphora_storage::spare`); every row reads back, before and after a restart, and
/// a restart leaves no spare behind.
#[test]
fn flushes_write_over_the_data_files_a_compaction_replaced() {
    let dir = tempfile::tempdir().expect("tmp");
    let schema = clustered_schema(7, ClusteringOrder::Asc);
    let mut expected = Rows::new();
    rt().block_on(async {
        // Spares serve buffered flushes only (a direct flush's output is not cached).
        let cfg = config(dir.path());
        assert!(!cfg.flush_direct, "buffered flushes are the default");
        let (s, _) = ShardStorage::open(cfg.clone(), vec![schema.clone()]).expect("open");
        for round in 1..=4 {
            write_round(&s, round, &mut expected).await;
        }
        s.compact_major(TableId(7)).await.expect("compact");
        assert_eq!(s.metrics().sstable_count, 1);
        // The janitor retires the inputs after the compaction's answer: a later flush
        // takes a spare once the inputs' readers are gone.
        let mut round = 5;
        while s.metrics().spare_data_reused == 0 && round < 50 {
            write_round(&s, round, &mut expected).await;
            round += 1;
        }
        assert_eq!(s.metrics().spare_data_reused, 1, "after {round} rounds");
        assert_eq!(stored_rows(&s), expected);
        s.shutdown().await.expect("shutdown");
        drop(s);
        let spare_dir = dir.path().join(amphora_storage::spare::SPARE_DIR);
        assert!(
            std::fs::read_dir(&spare_dir)
                .expect("spare dir")
                .next()
                .is_some()
        );
        let (s, _) = ShardStorage::open(cfg, vec![schema.clone()]).expect("reopen");
        assert_eq!(stored_rows(&s), expected);
        assert!(std::fs::read_dir(&spare_dir).map_or(true, |mut d| d.next().is_none()));
    });
}

/// Strategy compactions of at least `large_compaction_bytes` of inputs (by default twice
/// the memtable budget, far more than these) and major compactions run on the shard's
/// second compaction thread, the others on the first (zero: there is no second one);
/// every row reads back either way.
#[test]
fn large_compactions_run_on_the_second_thread() {
    // (threshold, compactions on the second thread: the strategy's, then the major one)
    for (large, expect) in [(Some(0), 0), (Some(u64::MAX), 1), (Some(1), 2), (None, 1)] {
        let dir = tempfile::tempdir().expect("tmp");
        let schema = clustered_schema(7, ClusteringOrder::Asc);
        let mut expected = Rows::new();
        let mut cfg = config(dir.path());
        cfg.large_compaction_bytes = large;
        rt().block_on(async {
            let (s, _) = ShardStorage::open(cfg, vec![schema.clone()]).expect("open");
            for round in 1..=4 {
                write_round(&s, round, &mut expected).await;
            }
            assert!(
                s.compact_once(TableId(7))
                    .await
                    .expect("strategy compaction")
            );
            for round in 5..=6 {
                write_round(&s, round, &mut expected).await;
            }
            s.compact_major(TableId(7)).await.expect("major compaction");
            let m = s.metrics();
            assert_eq!(
                (m.compactions, m.large_compactions, m.sstable_count),
                (2, expect, 1),
                "threshold {large:?}: {m:?}"
            );
            assert_eq!(stored_rows(&s), expected);
        });
    }
}

/// A major compaction stops the table's running strategy compaction instead of waiting
/// for it (its work would be merged again), as Cassandra's does: the stopped one leaves
/// no output and no transaction log, its inputs go into the major one, and every row reads
/// back, before and after a restart. A strategy compaction of every SSTable of the table
/// is not stopped: it does the major one's work.
#[test]
fn a_major_compaction_stops_a_running_strategy_compaction() {
    // Four similar SSTables and a big one: STCS merges the four.
    let m = major_over_a_running_strategy_compaction(true);
    assert_eq!(
        (
            m.compactions,
            m.compactions_stopped,
            m.sstable_count,
            m.background_errors
        ),
        (1, 1, 1, 0),
        "{m:?}"
    );
    // Four similar SSTables: STCS merges them all, and the major compaction finds one.
    let m = major_over_a_running_strategy_compaction(false);
    assert_eq!(
        (
            m.compactions,
            m.compactions_stopped,
            m.sstable_count,
            m.background_errors
        ),
        (1, 0, 1, 0),
        "{m:?}"
    );
}

/// Writes four rounds (and a round ten times bigger first, with `big`), starts the
/// strategy's compaction and holds it at the background gate, asks for a major compaction,
/// opens the gate; checks the rows and the files left; returns the metrics then.
fn major_over_a_running_strategy_compaction(big: bool) -> amphora_storage::StorageMetrics {
    let dir = tempfile::tempdir().expect("tmp");
    let mut schema = (*clustered_schema(7, ClusteringOrder::Asc)).clone();
    // Buckets by size at this scale too (STCS puts every SSTable under 50 MB in one).
    schema
        .options
        .compaction
        .insert("min_sstable_size".into(), "0".into());
    let schema = std::sync::Arc::new(schema);
    let mut expected = Rows::new();
    let mut cfg = config(dir.path());
    cfg.background_gate = true;
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg.clone(), vec![schema.clone()]).expect("open");
        if big {
            for k in 0..50 {
                for c in 0..40 {
                    let v = format!("big-{k}-{c}-{}", "y".repeat(64));
                    s.apply(&row_write(7, &format!("k{k:03}"), c, &v, 0))
                        .expect("apply")
                        .await
                        .expect("ack");
                    expected.insert((format!("k{k:03}"), c), v);
                }
            }
            s.flush_all().await.expect("flush");
        }
        for round in 1..=4 {
            write_round(&s, round, &mut expected).await;
        }
        assert_eq!(s.metrics().sstable_count, if big { 5 } else { 4 });
        // The strategy's compaction starts, then waits at its first partition while the
        // shard runs (the background gate).
        let shard_running = s.park_hook();
        shard_running(true);
        let strategy = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            s.compact_once(TableId(7)),
        )
        .await;
        assert!(
            strategy.is_err(),
            "the strategy compaction ran at a shut gate"
        );
        assert_eq!(s.metrics().pending_compactions, 1);
        let major = s.compact_major(TableId(7));
        tokio::pin!(major);
        let held = tokio::time::timeout(std::time::Duration::from_millis(50), &mut major).await;
        assert!(held.is_err(), "the major compaction ran at a shut gate");
        shard_running(false);
        major.await.expect("compact");
        let metrics = s.metrics();
        assert_eq!(stored_rows(&s), expected);
        s.shutdown().await.expect("shutdown");
        drop(s);
        let table_dir = std::fs::read_dir(dir.path().join("ks"))
            .expect("keyspace dir")
            .flatten()
            .next()
            .expect("table dir")
            .path();
        let names: Vec<String> = std::fs::read_dir(&table_dir)
            .expect("table dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let data = names.iter().filter(|n| n.ends_with("Data.db")).count();
        assert_eq!(data, 1, "{names:?}");
        assert!(
            !names
                .iter()
                .any(|n| n.ends_with(".txn") || n.starts_with("tmp-")),
            "{names:?}"
        );
        let (s, _) = ShardStorage::open(cfg, vec![schema.clone()]).expect("reopen");
        assert_eq!(stored_rows(&s), expected);
        metrics
    })
}

/// Flushes that write their Data.db with O_DIRECT (`StorageConfig::flush_direct`): every
/// row reads back from the flushed SSTables, compacted and after a restart, and since a
/// direct output is not in the page cache, a compaction retires none of them as spare
/// data files.
#[test]
fn direct_flushes_read_back_and_leave_no_spares() {
    let dir = tempfile::tempdir().expect("tmp");
    let schema = clustered_schema(7, ClusteringOrder::Asc);
    let mut expected = Rows::new();
    let mut cfg = config(dir.path());
    cfg.flush_direct = true;
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg.clone(), vec![schema.clone()]).expect("open");
        for round in 1..=4 {
            write_round(&s, round, &mut expected).await;
        }
        assert_eq!(s.metrics().sstable_count, 4);
        assert_eq!(stored_rows(&s), expected);
        s.compact_major(TableId(7)).await.expect("compact");
        for round in 5..=8 {
            write_round(&s, round, &mut expected).await;
        }
        assert_eq!(stored_rows(&s), expected);
        assert_eq!(s.metrics().spare_data_reused, 0);
        let spare_dir = dir.path().join(amphora_storage::spare::SPARE_DIR);
        assert!(std::fs::read_dir(&spare_dir).map_or(true, |mut d| d.next().is_none()));
        s.shutdown().await.expect("shutdown");
        drop(s);
        let (s, _) = ShardStorage::open(cfg, vec![schema.clone()]).expect("reopen");
        assert_eq!(stored_rows(&s), expected);
    });
}
