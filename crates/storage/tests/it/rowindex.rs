//! The row index of wide partitions (RowIndex.db): reads of some rows of a partition
//! that is not cached start at the index entry before their slice and stop after it or
//! at their limit, and return what the same writes held in a memtable return; range reads
//! (scans) hand such partitions to the single-partition read.

use amphora_storage::maintenance;
use amphora_storage::rowindex::RowIndexFile;
use amphora_storage::{PartitionRange, ReadCommand, ShardStorage, StorageConfig};
use amphora_types::data::{
    Cell, Clustering, ClusteringBound, ClusteringSlice, ColumnData, DeletionTime, LivenessInfo,
    PartitionUpdate, RangeTombstone, Row,
};
use amphora_types::schema::{ClusteringOrder, TableId};
use bytes::Bytes;

use crate::common::*;

const T: TableId = TableId(1);
const NOW: i32 = 1_000_000;
const ROWS: i32 = 3_000;

fn cfg(dir: &std::path::Path) -> StorageConfig {
    let mut c = config(dir);
    c.row_cache_bytes = Some(0);
    c.clock = amphora_storage::Clock::from_fn(|| NOW);
    c
}

fn open(c: StorageConfig, order: ClusteringOrder) -> ShardStorage {
    ShardStorage::open(c, vec![clustered_schema(1, order)])
        .expect("open")
        .0
}

fn value(k: &str, c: i32, round: i64) -> String {
    format!("{k}-{c}-{round}-{}", "x".repeat(c as usize % 7 * 20 + 30))
}

/// Round 1: every row of "wide" and "other", and a static cell of "wide". Round 2: newer
/// values for every 5th row, a row deletion, a range deletion.
async fn write(s: &ShardStorage, round: i64) {
    if round == 1 {
        for k in ["wide", "other"] {
            for c in 0..ROWS {
                s.apply(&row_write(1, k, c, &value(k, c, round), 10))
                    .expect("apply")
                    .await
                    .expect("ack");
            }
        }
        // Narrow partitions around them (read by the range read's own merge).
        for k in 0..20 {
            s.apply(&row_write(1, &format!("n{k}"), 1, &format!("n{k}"), 10))
                .expect("apply")
                .await
                .expect("ack");
        }
        let stat = Row {
            clustering: Clustering(Vec::new()),
            marker: None,
            deletion: None,
            cells: vec![(3, ColumnData::Simple(Cell::live(10, Bytes::from("st"))))],
        };
        apply_update(
            s,
            1,
            "wide",
            PartitionUpdate {
                static_row: Some(stat),
                ..Default::default()
            },
        )
        .await;
        return;
    }
    for c in (0..ROWS).step_by(5) {
        s.apply(&row_write(1, "wide", c, &value("wide", c, round), 20))
            .expect("apply")
            .await
            .expect("ack");
    }
    let deleted = Row {
        clustering: Clustering(vec![i(1_234)]),
        marker: None,
        deletion: Some(DeletionTime::new(21, NOW)),
        cells: Vec::new(),
    };
    let rt = RangeTombstone {
        start: ClusteringBound::inclusive(vec![i(2_000)]),
        end: ClusteringBound::exclusive(vec![i(2_100)]),
        deletion: DeletionTime::new(22, NOW),
    };
    apply_update(
        s,
        1,
        "wide",
        PartitionUpdate {
            rows: vec![deleted],
            range_tombstones: vec![rt],
            ..Default::default()
        },
    )
    .await;
    // Rows past round 1's, mostly deleted again by a range deletion in the same round:
    // while in the memtable, a limited read there is cut by the memtable alone (the
    // SSTables hold no row of it) and needs more than its first rows.
    for c in ROWS..ROWS + 50 {
        s.apply(&row_write(1, "wide", c, &value("wide", c, round), 20))
            .expect("apply")
            .await
            .expect("ack");
    }
    let tail = RangeTombstone {
        start: ClusteringBound::inclusive(vec![i(ROWS)]),
        end: ClusteringBound::exclusive(vec![i(ROWS + 40)]),
        deletion: DeletionTime::new(25, NOW),
    };
    apply_update(
        s,
        1,
        "wide",
        PartitionUpdate {
            range_tombstones: vec![tail],
            ..Default::default()
        },
    )
    .await;
    // A row written after the range deletion inside its range survives it.
    let mut m = row_write(1, "wide", 2_050, "after the deletion", 30);
    m.update.rows[0].marker = Some(LivenessInfo::new(30));
    s.apply(&m).expect("apply").await.expect("ack");
}

fn between(lo: Option<(i32, bool)>, hi: Option<(i32, bool)>) -> ClusteringSlice {
    let b = |x: Option<(i32, bool)>| match x {
        None => ClusteringBound::inclusive(Vec::new()),
        Some((v, true)) => ClusteringBound::inclusive(vec![i(v)]),
        Some((v, false)) => ClusteringBound::exclusive(vec![i(v)]),
    };
    ClusteringSlice {
        start: b(lo),
        end: b(hi),
    }
}

/// The reads compared: slices starting and ending anywhere, limits, reversed, several
/// slices, and paging (the pages' results concatenated).
fn commands(key: &str, order: ClusteringOrder) -> Vec<ReadCommand> {
    let base = || ReadCommand::new(T, PartitionRange::Single(pk(key)), NOW);
    // Bounds in clustering order (a descending table's start is its largest value).
    let slice = |lo: Option<(i32, bool)>, hi: Option<(i32, bool)>| match order {
        ClusteringOrder::Asc => between(lo, hi),
        ClusteringOrder::Desc => between(hi, lo),
    };
    let mut out = vec![base()];
    let ranges = [
        (Some((0, true)), Some((10, true))),
        (Some((1_500, true)), Some((1_501, true))),
        (Some((1_777, false)), Some((1_900, false))),
        (Some((1_990, true)), Some((2_110, true))),
        (Some((2_950, true)), None),
        (None, Some((40, false))),
        (Some((ROWS + 5, true)), None),
        (Some((-10, true)), Some((-1, true))),
        (Some((2_999, true)), Some((2_999, true))),
        // Within a block or two, the rows nearest one end deleted in round 2: the first
        // rows a limit takes from an SSTable are shadowed, so it needs more of them.
        (Some((1_997, true)), Some((2_003, true))),
        (Some((1_995, true)), Some((2_005, false))),
        (Some((2_000, true)), Some((2_060, true))),
        (Some((1_230, true)), Some((1_234, true))),
    ];
    for (lo, hi) in ranges {
        for (reversed, limit) in [(false, 0), (false, 1), (false, 7), (true, 0), (true, 3)] {
            let mut c = base();
            c.slices = vec![slice(lo, hi)];
            c.reversed = reversed;
            c.row_limit = limit;
            out.push(c);
        }
    }
    let mut two = base();
    two.slices = vec![
        slice(Some((100, true)), Some((120, true))),
        slice(Some((2_500, true)), Some((2_520, true))),
    ];
    if order == ClusteringOrder::Desc {
        two.slices.reverse();
    }
    out.push(two.clone());
    two.row_limit = 30;
    out.push(two);
    out
}

fn all_pages(s: &ShardStorage, cmd: &ReadCommand, key: &str) -> Vec<(String, i32, String)> {
    let mut cmd = cmd.clone();
    let mut got = Vec::new();
    for _ in 0..10_000 {
        let r = s.read(&cmd).expect("read");
        let v = values(&r);
        got.extend(v.iter().cloned());
        let Some(last) = v.last() else { break };
        if r.exhausted {
            break;
        }
        cmd.start_after = Some((pk(key), Some(Clustering(vec![i(last.1)]))));
    }
    got
}

type Rows = Vec<(String, i32, String)>;

/// Every page of a range read over the whole table (`limit` rows a page, slices `slices`),
/// each page resuming after the last row the one before returned.
fn scan_pages(
    s: &ShardStorage,
    limit: u32,
    slices: &[ClusteringSlice],
    reversed: bool,
) -> Vec<(Rows, bool)> {
    let mut cmd = ReadCommand::new(T, PartitionRange::all(), NOW);
    cmd.row_limit = limit;
    cmd.slices = slices.to_vec();
    cmd.reversed = reversed;
    let mut pages = Vec::new();
    loop {
        // No more pages than the table has rows in pages of 7 (a page that does not move
        // on would otherwise repeat forever).
        assert!(pages.len() < 1_000, "the scan does not end");
        let r = s.read(&cmd).expect("scan");
        let v = values(&r);
        let done = r.exhausted || v.is_empty();
        let last = v.last().cloned();
        pages.push((v, r.exhausted));
        let Some(last) = last else { break };
        if done {
            break;
        }
        cmd.start_after = Some((pk(&last.0), Some(Clustering(vec![i(last.1)]))));
    }
    pages
}

fn compare(a: &ShardStorage, reference: &ShardStorage, order: ClusteringOrder, stage: &str) {
    compare_paged(a, reference, order, stage, &[1, 9, 400]);
}

/// [`compare`], each read also in pages of each of `pages` rows.
fn compare_paged(
    a: &ShardStorage,
    reference: &ShardStorage,
    order: ClusteringOrder,
    stage: &str,
    pages: &[u32],
) {
    // Range reads (a full-table scan in pages) hand wide partitions to the
    // single-partition read: the same pages as the reference's.
    let middle = match order {
        ClusteringOrder::Asc => between(Some((1_990, true)), Some((2_110, false))),
        ClusteringOrder::Desc => between(Some((2_110, false)), Some((1_990, true))),
    };
    for (limit, slices, reversed) in [
        (0, Vec::new(), false),
        (1_000, Vec::new(), false),
        (777, Vec::new(), true),
        (7, vec![middle.clone()], false),
        (7, vec![middle], true),
    ] {
        let got = scan_pages(a, limit, &slices, reversed);
        assert_eq!(
            got,
            scan_pages(reference, limit, &slices, reversed),
            "{stage}: scan limit {limit} reversed {reversed}"
        );
        assert!(
            limit < 1_000 || got.len() >= 2,
            "{stage}: {} pages",
            got.len()
        );
    }

    for key in ["wide", "other"] {
        for (n, cmd) in commands(key, order).into_iter().enumerate() {
            let (x, y) = (
                a.read(&cmd).expect("read"),
                reference.read(&cmd).expect("read"),
            );
            assert_eq!(
                (values(&x), x.exhausted),
                (values(&y), y.exhausted),
                "{stage}: {key} command {n}"
            );
            assert_eq!(
                x.partitions.first().and_then(|p| p.static_row.clone()),
                y.partitions.first().and_then(|p| p.static_row.clone()),
                "{stage}: {key} command {n}: static row"
            );
            for &page in pages {
                let mut c = cmd.clone();
                c.row_limit = page;
                assert_eq!(
                    all_pages(a, &c, key),
                    all_pages(reference, &c, key),
                    "{stage}: {key} command {n} in pages of {page}"
                );
            }
        }
    }
}

/// Reads with a limit over many SSTables of one partition: runs of consecutive rows
/// (time windows), runs that rewrite rows of several windows, rows deleted one by one and
/// by a range, each flushed on its own, every read and page answer as the same writes
/// held in a memtable (a capped read takes the SSTables in their rows' order, each only
/// up to the earliest cutoff of those before).
#[test]
fn capped_reads_over_many_sstables_match_a_memtable() {
    for order in [ClusteringOrder::Asc, ClusteringOrder::Desc] {
        let (_dirs, flushed, reference) = flushed_and_reference(order);
        rt().block_on(async {
            // (first row, end, step, timestamp): five windows, a rewrite of every 7th
            // row across three of them, a sparse run over all of them.
            let runs = [
                (0, 600, 1, 10),
                (600, 1_200, 1, 11),
                (1_200, 1_800, 1, 12),
                (1_800, 2_400, 1, 13),
                (2_400, ROWS, 1, 14),
                (900, 2_100, 7, 20),
                (5, ROWS, 250, 21),
            ];
            for (n, (from, to, step, ts)) in runs.into_iter().enumerate() {
                for s in [&flushed, &reference] {
                    for c in (from..to).step_by(step) {
                        let v = value("wide", c, ts);
                        s.apply(&row_write(1, "wide", c, &v, ts))
                            .expect("apply")
                            .await
                            .expect("ack");
                    }
                }
                flushed.flush(T).await.expect("flush");
                if n == 2 {
                    compare(&flushed, &reference, order, "three windows");
                }
            }
            // Every other row of the fourth window deleted, and a range across the
            // second and third: an SSTable of tombstones only.
            let deletions = deletions((1_800..2_400).step_by(2), 1_100, 1_350);
            for s in [&flushed, &reference] {
                apply_update(s, 1, "wide", deletions.clone()).await;
            }
            flushed.flush(T).await.expect("flush");
            assert_eq!(flushed.metrics().sstable_count, runs.len() as u64 + 1);
            compare(&flushed, &reference, order, "windows, rewrites, deletions");
        });
    }
}

/// Reads with a limit over SSTables that interleave a partition's rows (each holds every
/// third row, then one rewrites every other row across all of them, then one deletes rows
/// and a range): every read and page answers as the same writes held in a memtable (the
/// first try stops the SSTables where their row indexes count the limit's rows in all;
/// rewrites and deletions make it fall short and read again).
#[test]
fn capped_reads_over_interleaved_sstables_match_a_memtable() {
    for order in [ClusteringOrder::Asc, ClusteringOrder::Desc] {
        let (_dirs, flushed, reference) = flushed_and_reference(order);
        rt().block_on(async {
            for g in 0..3 {
                for s in [&flushed, &reference] {
                    for c in (g..ROWS).step_by(3) {
                        let v = value("wide", c, 10 + i64::from(g));
                        s.apply(&row_write(1, "wide", c, &v, 10 + i64::from(g)))
                            .expect("apply")
                            .await
                            .expect("ack");
                    }
                }
                flushed.flush(T).await.expect("flush");
            }
            assert_eq!(indexed_partitions(&flushed), 3, "each SSTable's is wide");
            compare(&flushed, &reference, order, "three interleaved");
            for s in [&flushed, &reference] {
                for c in (1..ROWS).step_by(2) {
                    let v = value("wide", c, 20);
                    s.apply(&row_write(1, "wide", c, &v, 20))
                        .expect("apply")
                        .await
                        .expect("ack");
                }
            }
            flushed.flush(T).await.expect("flush");
            compare(&flushed, &reference, order, "interleaved, a rewrite across");
            let deletions = deletions((0..ROWS).step_by(4), 400, 1_600);
            for s in [&flushed, &reference] {
                apply_update(s, 1, "wide", deletions.clone()).await;
            }
            flushed.flush(T).await.expect("flush");
            assert_eq!(flushed.metrics().sstable_count, 5);
            compare(
                &flushed,
                &reference,
                order,
                "interleaved, rewritten, deleted",
            );
        });
    }
}

/// A page of a partition whose rows three SSTables interleave (each holds every third
/// row) reads about the page's rows in all, as many blocks as the same page of the
/// compacted partition and a few more: before, it read `limit + 1` rows of each SSTable
/// (three times the blocks).
#[test]
fn pages_over_interleaved_sstables_read_their_share_of_each() {
    const N: i32 = 30_000;
    const PAGE: i32 = 3_000;
    for order in [ClusteringOrder::Asc, ClusteringOrder::Desc] {
        let dir = tempfile::tempdir().expect("tmp");
        rt().block_on(async {
            let s = open(cfg(dir.path()), order);
            for g in 0..3 {
                for c in (g..N).step_by(3) {
                    s.apply(&row_write(1, "wide", c, &value("wide", c, 1), 10))
                        .expect("apply")
                        .await
                        .expect("ack");
                }
                s.flush(T).await.expect("flush");
            }
            // A page after `from` in either direction: its rows, and the blocks it read.
            let page = |s: &ShardStorage, from: i32, reversed: bool| {
                let mut cmd = ReadCommand::new(T, PartitionRange::Single(pk("wide")), NOW);
                cmd.row_limit = PAGE as u32;
                cmd.reversed = reversed;
                cmd.start_after = Some((pk("wide"), Some(Clustering(vec![i(from)]))));
                let before = s.block_cache_stats().misses;
                let got: Vec<i32> = values(&s.read(&cmd).expect("read"))
                    .iter()
                    .map(|v| v.1)
                    .collect();
                let ascending = reversed == (order == ClusteringOrder::Desc);
                let want: Vec<i32> = if ascending {
                    (from + 1..=from + PAGE).collect()
                } else {
                    (from - PAGE..from).rev().collect()
                };
                assert_eq!(got, want, "{order:?} from {from} reversed {reversed}");
                s.block_cache_stats().misses - before
            };
            let reads = [(6_000, false), (24_000, true)];
            let interleaved: Vec<u64> = reads.iter().map(|&(f, r)| page(&s, f, r)).collect();
            s.compact_major(T).await.expect("compact");
            assert_eq!(s.metrics().sstable_count, 1);
            let compacted: Vec<u64> = reads.iter().map(|&(f, r)| page(&s, f, r)).collect();
            for (x, y) in interleaved.iter().zip(&compacted) {
                assert!(
                    *x <= y * 3 / 2 + 8,
                    "{order:?}: interleaved pages read {interleaved:?} blocks, compacted {compacted:?}"
                );
            }
        });
    }
}

/// Row deletions of `rows` (timestamp 30) and a range deletion of `from..to` (31).
fn deletions(rows: impl Iterator<Item = i32>, from: i32, to: i32) -> PartitionUpdate {
    PartitionUpdate {
        rows: rows
            .map(|c| Row {
                clustering: Clustering(vec![i(c)]),
                marker: None,
                deletion: Some(DeletionTime::new(30, NOW)),
                cells: Vec::new(),
            })
            .collect(),
        range_tombstones: vec![RangeTombstone {
            start: ClusteringBound::inclusive(vec![i(from)]),
            end: ClusteringBound::exclusive(vec![i(to)]),
            deletion: DeletionTime::new(31, NOW),
        }],
        ..Default::default()
    }
}

/// The RowIndex.db of each of the table's live SSTables.
fn row_index_paths(s: &ShardStorage) -> Vec<std::path::PathBuf> {
    s.sstable_paths(T)
        .iter()
        .map(|p| {
            p.to_string_lossy()
                .replace("-Data.db", "-RowIndex.db")
                .into()
        })
        .collect()
}

/// Row index entries of the table's live SSTables.
fn indexed_partitions(s: &ShardStorage) -> usize {
    row_index_paths(s)
        .iter()
        .map(|p| {
            RowIndexFile::open(p)
                .expect("open")
                .expect("every new SSTable has one")
                .len()
        })
        .sum()
}

/// Two nodes in fresh directories (kept alive by the first value): one whose writes are
/// flushed, and the reference, whose writes stay in its memtable.
fn flushed_and_reference(
    order: ClusteringOrder,
) -> ([tempfile::TempDir; 2], ShardStorage, ShardStorage) {
    let dirs = [
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    ];
    let flushed = open(cfg(dirs[0].path()), order);
    let reference = open(cfg(dirs[1].path()), order);
    (dirs, flushed, reference)
}

#[test]
fn wide_partitions_read_through_their_row_index_as_from_a_memtable() {
    for order in [ClusteringOrder::Asc, ClusteringOrder::Desc] {
        let (_dirs, flushed, reference) = flushed_and_reference(order);
        rt().block_on(async {
            for s in [&flushed, &reference] {
                write(s, 1).await;
            }
            flushed.flush(T).await.expect("flush");
            assert_eq!(indexed_partitions(&flushed), 2, "both partitions are wide");
            compare(&flushed, &reference, order, "one SSTable");
            for s in [&flushed, &reference] {
                write(s, 2).await;
            }
            compare(&flushed, &reference, order, "round 2 in the memtable");
            flushed.flush(T).await.expect("flush");
            compare(&flushed, &reference, order, "two SSTables");
            flushed.compact_major(T).await.expect("compact");
            assert_eq!(flushed.metrics().sstable_count, 1);
            assert_eq!(indexed_partitions(&flushed), 2);
            compare(&flushed, &reference, order, "compacted");
            assert_eq!(
                reference.metrics().sstable_count,
                0,
                "the reference is all memtable"
            );
        });
    }
}

/// A node with the first round written and flushed, its SSTable's RowIndex.db path and
/// bytes.
async fn flushed_row_index(dir: &std::path::Path) -> (ShardStorage, std::path::PathBuf, Vec<u8>) {
    let s = open(cfg(dir), ClusteringOrder::Asc);
    write(&s, 1).await;
    s.flush(T).await.expect("flush");
    let ri = row_index_paths(&s).remove(0);
    let bytes = std::fs::read(&ri).expect("read");
    (s, ri, bytes)
}

/// A row cache miss on a partition whose SSTables' index entries already say it is over
/// the cache's partition limit reads only what the read asks for: before, the miss read
/// and decoded the whole partition from every SSTable holding it, only for the cache to
/// refuse it (the first page of a 3M-row partition in 11 SSTables took 28-41 s).
#[test]
fn misses_on_partitions_over_the_cache_limit_read_only_their_page() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let mut c = cfg(dir.path());
        c.row_cache_bytes = Some(64 << 20);
        c.row_cache_partition_max_bytes = 64 << 10;
        let s = open(c, ClusteringOrder::Asc);
        write(&s, 1).await;
        s.flush(T).await.expect("flush");
        let mut cmd = ReadCommand::new(T, PartitionRange::Single(pk("wide")), NOW);
        cmd.row_limit = 10;
        let before = s.block_cache_stats().misses;
        let r = s.read(&cmd).expect("read");
        let got: Vec<i32> = values(&r).iter().map(|v| v.1).collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        let chunks = s.block_cache_stats().misses - before;
        assert!(chunks <= 6, "{chunks} blocks read for a page of 10 rows");
        assert_eq!(s.row_cache_stats().partitions, 0);
        // Known too big now: the next pages are read the same way.
        cmd.start_after = Some((pk("wide"), Some(Clustering(vec![i(9)]))));
        let got: Vec<i32> = values(&s.read(&cmd).expect("read"))
            .iter()
            .map(|v| v.1)
            .collect();
        assert_eq!(got, (10..20).collect::<Vec<_>>());
        // A narrow partition of the same table is still cached.
        let mut narrow = ReadCommand::new(T, PartitionRange::Single(pk("n3")), NOW);
        narrow.row_limit = 10;
        assert_eq!(values(&s.read(&narrow).expect("read")).len(), 1);
        assert_eq!(s.row_cache_stats().partitions, 1);
    });
}

/// A scan's wide partitions are read past the row cache (a full-table scan would evict
/// what point reads use); a point read of one still fills it.
#[test]
fn scans_of_wide_partitions_leave_the_row_cache_alone() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let mut c = cfg(dir.path());
        c.row_cache_bytes = Some(64 << 20);
        let s = open(c, ClusteringOrder::Asc);
        write(&s, 1).await;
        s.flush(T).await.expect("flush");
        let pages = scan_pages(&s, 1_000, &[], false);
        let rows: usize = pages.iter().map(|p| p.0.len()).sum();
        assert_eq!(rows, 2 * ROWS as usize + 20);
        assert_eq!(
            s.row_cache_stats().partitions,
            0,
            "{:?}",
            s.row_cache_stats()
        );
        let cmd = ReadCommand::new(T, PartitionRange::Single(pk("wide")), NOW);
        assert_eq!(values(&s.read(&cmd).expect("read")).len(), ROWS as usize);
        assert_eq!(
            s.row_cache_stats().partitions,
            1,
            "{:?}",
            s.row_cache_stats()
        );
    });
}

fn var(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let x = b[*at];
        *at += 1;
        v |= u64::from(x & 0x7f) << shift;
        if x < 0x80 {
            break;
        }
    }
    v
}

/// Ways RowIndex.db gets damaged.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    /// A byte inside the first block: its checksum fails when a read needs it.
    Block,
    /// The directory's offset at the file's end: the file does not open.
    Directory,
    /// An entry of the first block names the next row, with its checksum made to hold
    /// (a broken writer, or an index of other data): found by the read that uses it.
    Entry,
}

fn damage(b: &mut [u8], how: Damage) {
    let n = b.len();
    match how {
        // After the 12-byte header.
        Damage::Block => b[40] ^= 0x5a,
        Damage::Directory => b[n - 8] ^= 0x5a,
        Damage::Entry => {
            // The directory's first block; in it, entry 1's clustering (one int: length
            // 4, then its big-endian bytes).
            let dir_at = u64::from_le_bytes(b[n - 8..].try_into().expect("8")) as usize;
            let off =
                u64::from_le_bytes(b[dir_at + 12..dir_at + 20].try_into().expect("8")) as usize;
            let len =
                u32::from_le_bytes(b[dir_at + 20..dir_at + 24].try_into().expect("4")) as usize;
            let mut at = off;
            for _ in 0..3 {
                var(b, &mut at);
            }
            let entries = var(b, &mut at) as usize;
            assert!(entries >= 2, "{entries} entries");
            let table = at;
            let entries_at = table + 4 * entries;
            let one = u32::from_le_bytes(b[table + 4..table + 8].try_into().expect("4")) as usize;
            let mut at = entries_at + one;
            var(b, &mut at); // ordinal
            var(b, &mut at); // offset
            assert_eq!((b[at], b[at + 1]), (1, 4), "one 4-byte clustering value");
            b[at + 5] += 1;
            let crc = crc32c::crc32c(&b[off..off + len - 4]);
            b[off + len - 4..off + len].copy_from_slice(&crc.to_le_bytes());
        }
    }
}

/// A damaged RowIndex.db takes no data out of service: the row index only saves
/// decoding, so an SSTable whose index does not open, or whose index a read finds damaged
/// or not matching its rows, serves its wide partitions from Data.db (every read and page
/// answers as the same writes held in a memtable). Validation reports the file (when its
/// checksums catch the damage), and scrub writes the SSTable again with a new row index.
#[test]
fn a_damaged_row_index_is_read_around_and_rewritten_by_scrub() {
    for how in [Damage::Block, Damage::Directory, Damage::Entry] {
        let (dir, refdir) = (
            tempfile::tempdir().expect("tmp"),
            tempfile::tempdir().expect("tmp"),
        );
        rt().block_on(async {
            let reference = open(cfg(refdir.path()), ClusteringOrder::Asc);
            write(&reference, 1).await;
            let (s, ri, mut bytes) = flushed_row_index(dir.path()).await;
            damage(&mut bytes, how);
            std::fs::write(&ri, &bytes).expect("write");
            // A fresh open reads the damaged file (no block cache holds any of it).
            drop(s);
            let s = open(cfg(dir.path()), ClusteringOrder::Asc);
            assert_eq!(s.metrics().sstable_count, 1, "{how:?}: the SSTable serves");
            // Pages of 400 rows only: without the index every page decodes the partition
            // from its start (pages of 1 took minutes in a debug build).
            let order = ClusteringOrder::Asc;
            compare_paged(&s, &reference, order, &format!("{how:?}"), &[400]);
            let report = amphora_storage::tools::validate_dir(dir.path());
            if how == Damage::Entry {
                assert!(report.errors.is_empty(), "{:?}", report.errors);
            } else {
                assert_eq!(report.errors.len(), 1, "{how:?}: {:?}", report.errors);
                let e = report.errors[0].to_string();
                assert!(e.contains("RowIndex.db"), "{how:?}: {e}");
            }
            let r = maintenance::scrub(&s, T, false, &mut |_| {})
                .await
                .expect("scrub");
            assert_eq!(r.partitions_skipped, 0, "{how:?}: {r:?}");
            let report = amphora_storage::tools::validate_dir(dir.path());
            assert!(report.errors.is_empty(), "{how:?}: {:?}", report.errors);
            assert_eq!(indexed_partitions(&s), 2, "{how:?}: a new row index");
            compare_paged(&s, &reference, order, &format!("{how:?} scrubbed"), &[400]);
        });
    }
}
