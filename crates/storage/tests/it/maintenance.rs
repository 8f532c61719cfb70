//! Maintenance rewrites (`amphora_storage::maintenance`): garbagecollect, cleanup, scrub,
//! refresh, and the SSTable histograms of tablehistograms.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use amphora_storage::maintenance::{self, Granularity};
use amphora_storage::sstable;
use amphora_storage::{ShardStorage, StorageConfig};
use amphora_types::data::{DeletionTime, Mutation, PartitionUpdate};
use amphora_types::schema::{ClusteringOrder, TableId, TableSchema};

use crate::common::*;

const TABLE: u128 = 0x3a;

/// 1 KiB chunks so a small SSTable has many chunks.
fn schema() -> Arc<TableSchema> {
    let mut s = (*clustered_schema(TABLE, ClusteringOrder::Asc)).clone();
    s.options
        .compression
        .insert("chunk_length_in_kb".into(), "1".into());
    Arc::new(s)
}

fn open(dir: &Path) -> ShardStorage {
    let cfg: StorageConfig = config(dir);
    ShardStorage::open(cfg, vec![schema()]).expect("open").0
}

/// Partitions p0..p{n} with 10 rows each; flushed.
fn fill(s: &ShardStorage, n: usize, ts: i64) -> Vec<(String, i32, String)> {
    let mut rows = Vec::new();
    for p in 0..n {
        for c in 0..10 {
            let k = format!("p{p}");
            let v = format!("value-{p}-{c}-{}", "x".repeat(40));
            s.apply(&row_write(TABLE, &k, c, &v, ts)).expect("apply");
            rows.push((k, c, v));
        }
    }
    rt().block_on(s.flush(TableId(TABLE))).expect("flush");
    rows.sort();
    rows
}

fn sorted(mut v: Vec<(String, i32, String)>) -> Vec<(String, i32, String)> {
    v.sort();
    v
}

fn table_dir(root: &Path) -> PathBuf {
    let ks = root.join("ks");
    std::fs::read_dir(&ks)
        .expect("ks dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("table dir")
}

fn delete_partition(k: &str, ts: i64) -> Mutation {
    Mutation {
        table: TableId(TABLE),
        key: pk(k),
        update: PartitionUpdate {
            partition_deletion: Some(DeletionTime::new(ts, 1_000)),
            ..Default::default()
        },
    }
}

#[test]
fn garbagecollect_drops_data_shadowed_by_another_sstable() {
    let d = tempfile::tempdir().expect("tmp");
    let s = open(d.path());
    let rows = fill(&s, 20, 10);
    for p in 0..5 {
        s.apply(&delete_partition(&format!("p{p}"), 20))
            .expect("delete");
    }
    rt().block_on(s.flush(TableId(TABLE))).expect("flush");
    let before_bytes = s.table_stats(TableId(TABLE)).expect("stats").sstable_bytes;
    let expected: Vec<_> = rows
        .iter()
        .filter(|(k, _, _)| !["p0", "p1", "p2", "p3", "p4"].contains(&k.as_str()))
        .cloned()
        .collect();
    assert_eq!(sorted(values(&read_all(&s, TABLE, 0))), expected);

    let r = rt()
        .block_on(maintenance::garbage_collect(
            &s,
            TableId(TABLE),
            Granularity::Row,
            &mut |_| {},
        ))
        .expect("garbagecollect");
    assert_eq!(r.sstables_in, 2);
    // The five deleted partitions' rows left the data SSTable; their tombstones (inside
    // gc_grace) stay in the other one.
    assert_eq!(r.partitions_dropped, 5, "{r:?}");
    assert_eq!(r.partitions_kept, 15 + 5, "{r:?}");
    let after_bytes = s.table_stats(TableId(TABLE)).expect("stats").sstable_bytes;
    assert!(
        after_bytes < before_bytes,
        "{after_bytes} >= {before_bytes}"
    );
    assert_eq!(sorted(values(&read_all(&s, TABLE, 0))), expected);
    // Reopened from disk: the same.
    drop(s);
    let s = open(d.path());
    assert_eq!(sorted(values(&read_all(&s, TABLE, 0))), expected);
}

#[test]
fn cleanup_drops_only_partitions_of_other_shards() {
    let d = tempfile::tempdir().expect("tmp");
    let s = open(d.path());
    let rows = fill(&s, 40, 10);
    let owns: maintenance::Owns = Arc::new(|token: i64| token % 2 == 0);
    let owned: Vec<_> = rows
        .iter()
        .filter(|(k, _, _)| pk(k).token % 2 == 0)
        .cloned()
        .collect();
    assert!(!owned.is_empty() && owned.len() < rows.len());
    let r = rt()
        .block_on(maintenance::cleanup(
            &s,
            TableId(TABLE),
            owns.clone(),
            &mut |_| {},
        ))
        .expect("cleanup");
    assert_eq!(r.partitions_kept as usize, owned.len() / 10, "{r:?}");
    assert_eq!(
        r.partitions_dropped as usize,
        (rows.len() - owned.len()) / 10
    );
    assert_eq!(sorted(values(&read_all(&s, TABLE, 0))), owned);
    // A second cleanup finds nothing to rewrite.
    let again = rt()
        .block_on(maintenance::cleanup(&s, TableId(TABLE), owns, &mut |_| {}))
        .expect("cleanup");
    assert_eq!(again.sstables_in, 0);
}

#[test]
fn scrub_salvages_an_sstable_taken_out_of_service() {
    let d = tempfile::tempdir().expect("tmp");
    let s = open(d.path());
    let rows = fill(&s, 50, 10);
    let data = s.sstable_paths(TableId(TABLE)).remove(0);
    let len = std::fs::metadata(&data).expect("meta").len() as usize;
    let mut b = std::fs::read(&data).expect("read");
    b[len / 2] ^= 0x5a;
    std::fs::write(&data, b).expect("write");
    // Reads hit the bad chunk and take the SSTable out of service.
    drop(s);
    let s = open(d.path());
    let mut failed = false;
    for p in 0..50 {
        let cmd = amphora_storage::ReadCommand::new(
            TableId(TABLE),
            amphora_storage::PartitionRange::Single(pk(&format!("p{p}"))),
            0,
        );
        failed |= s.read(&cmd).is_err();
    }
    assert!(failed, "the flipped byte was not detected");
    assert_eq!(s.metrics().sstable_count, 0);

    let r = rt()
        .block_on(maintenance::scrub(&s, TableId(TABLE), false, &mut |_| {}))
        .expect("scrub");
    assert_eq!(r.sstables_salvaged, 1, "{r:?}");
    assert!(r.partitions_skipped >= 1, "{r:?}");
    assert_eq!(r.partitions_kept + r.partitions_skipped, 50, "{r:?}");
    assert_eq!(s.metrics().sstable_count, 1);
    let got = sorted(values(&read_all(&s, TABLE, 0)));
    assert_eq!(got.len() as u64, r.partitions_kept * 10);
    assert!(got.iter().all(|row| rows.contains(row)));
    // After a restart the salvaged SSTable is the only one, and whole.
    drop(s);
    let s = open(d.path());
    assert_eq!(sorted(values(&read_all(&s, TABLE, 0))), got);
    assert_eq!(s.metrics().corrupt_sstables, 0);
}

#[test]
fn refresh_loads_sstables_from_upload() {
    let src = tempfile::tempdir().expect("tmp");
    let a = open(src.path());
    let rows = fill(&a, 30, 10);
    let from = table_dir(src.path());
    drop(a);

    let d = tempfile::tempdir().expect("tmp");
    let s = open(d.path());
    let upload = table_dir(d.path()).join(maintenance::UPLOAD_DIR);
    std::fs::create_dir_all(&upload).expect("mkdir");
    for e in std::fs::read_dir(&from).expect("read").flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with("am1-") {
            std::fs::copy(e.path(), upload.join(&name)).expect("copy");
        }
    }
    let gens = maintenance::upload_generations(&upload).expect("list");
    assert_eq!(gens.len(), 1);
    let uploads = vec![(upload.clone(), gens)];
    let owns: maintenance::Owns = Arc::new(|_| true);
    let r = rt()
        .block_on(maintenance::refresh(
            &s,
            TableId(TABLE),
            uploads.clone(),
            owns,
        ))
        .expect("refresh");
    assert_eq!(r.partitions_kept, 30, "{r:?}");
    maintenance::remove_uploaded(&uploads);
    assert!(
        maintenance::upload_generations(&upload)
            .expect("list")
            .is_empty()
    );
    assert_eq!(sorted(values(&read_all(&s, TABLE, 0))), rows);
    drop(s);
    let s = open(d.path());
    assert_eq!(sorted(values(&read_all(&s, TABLE, 0))), rows);
}

#[test]
fn refresh_refuses_a_corrupt_upload() {
    let src = tempfile::tempdir().expect("tmp");
    let a = open(src.path());
    fill(&a, 30, 10);
    let data = a.sstable_paths(TableId(TABLE)).remove(0);
    drop(a);
    let mut b = std::fs::read(&data).expect("read");
    let n = b.len() / 2;
    b[n] ^= 0x11;
    std::fs::write(&data, b).expect("write");
    let dir = data.parent().expect("dir").to_path_buf();
    let gens = maintenance::upload_generations(&dir).expect("list");
    let d = tempfile::tempdir().expect("tmp");
    let s = open(d.path());
    let err = rt()
        .block_on(maintenance::refresh(
            &s,
            TableId(TABLE),
            vec![(dir, gens)],
            Arc::new(|_| true),
        ))
        .expect_err("a corrupt upload must be refused");
    assert!(err.to_string().contains("Data.db"), "{err}");
    assert!(read_all(&s, TABLE, 0).partitions.is_empty());
}

#[test]
fn histograms_count_partition_sizes_and_cells() {
    let d = tempfile::tempdir().expect("tmp");
    let s = open(d.path());
    fill(&s, 12, 10);
    let h = maintenance::sstable_histograms(&s, TableId(TABLE));
    // 10 cells per partition: bucket [8, 16).
    assert_eq!(h.cell_count[3], 12, "{:?}", h.cell_count);
    assert_eq!(h.cell_count.iter().sum::<u64>(), 12);
    // Each partition holds 10 values of ~50 bytes: between 512 and 1024 bytes.
    assert_eq!(h.partition_size[9], 12, "{:?}", h.partition_size);
}

fn open_with(dir: &Path, schema: Arc<TableSchema>) -> ShardStorage {
    ShardStorage::open(config(dir), vec![schema])
        .expect("open")
        .0
}

/// A cell tombstone of column v, newer than the row written by `fill`.
fn delete_cell(k: &str, c: i32, ts: i64) -> Mutation {
    use amphora_types::data::{Cell, Clustering, ColumnData, Row};
    Mutation {
        table: TableId(TABLE),
        key: pk(k),
        update: PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering(vec![i(c)]),
                marker: None,
                deletion: None,
                cells: vec![(2, ColumnData::Simple(Cell::tombstone(ts, 1_000)))],
            }],
            ..Default::default()
        },
    }
}

/// Whether the oldest SSTable (by its minimum timestamp) still holds p0's cell v at
/// clustering `c`.
fn oldest_holds_cell(s: &ShardStorage, c: i32) -> bool {
    let oldest = s
        .sstables(TableId(TABLE))
        .into_iter()
        .min_by_key(|x| x.stats.min_timestamp)
        .expect("an SSTable");
    let p = oldest.get(&pk("p0")).expect("read").expect("p0");
    p.rows
        .iter()
        .find(|r| r.clustering.0 == vec![i(c)])
        .is_some_and(|r| {
            matches!(
                r.cell(2),
                Some(amphora_types::data::ColumnData::Simple(x)) if !x.is_tombstone
            )
        })
}

#[test]
fn garbagecollect_cell_granularity_also_applies_cell_tombstones() {
    let d = tempfile::tempdir().expect("tmp");
    let s = open(d.path());
    fill(&s, 3, 10);
    s.apply(&delete_cell("p0", 4, 20)).expect("delete cell");
    rt().block_on(s.flush(TableId(TABLE))).expect("flush");
    let before = sorted(values(&read_all(&s, TABLE, 0)));
    assert!(oldest_holds_cell(&s, 4));

    rt().block_on(maintenance::garbage_collect(
        &s,
        TableId(TABLE),
        Granularity::Row,
        &mut |_| {},
    ))
    .expect("gc");
    assert!(
        oldest_holds_cell(&s, 4),
        "ROW granularity keeps shadowed cells"
    );
    rt().block_on(maintenance::garbage_collect(
        &s,
        TableId(TABLE),
        Granularity::Cell,
        &mut |_| {},
    ))
    .expect("gc");
    assert!(!oldest_holds_cell(&s, 4), "CELL granularity drops them");
    assert!(oldest_holds_cell(&s, 5), "and only them");
    assert_eq!(sorted(values(&read_all(&s, TABLE, 0))), before);
}

#[test]
fn garbagecollect_purges_tombstones_past_gc_grace() {
    let d = tempfile::tempdir().expect("tmp");
    let mut sc = (*schema()).clone();
    sc.options.gc_grace_seconds = 0;
    let s = open_with(d.path(), Arc::new(sc));
    fill(&s, 20, 10);
    for p in 0..5 {
        s.apply(&delete_partition(&format!("p{p}"), 20))
            .expect("delete");
    }
    rt().block_on(s.flush(TableId(TABLE))).expect("flush");
    let partitions = |s: &ShardStorage| -> u64 {
        s.sstables(TableId(TABLE))
            .iter()
            .map(|x| x.stats.partitions)
            .sum()
    };
    assert_eq!(partitions(&s), 25);
    let r = rt()
        .block_on(maintenance::garbage_collect(
            &s,
            TableId(TABLE),
            Granularity::Row,
            &mut |_| {},
        ))
        .expect("gc");
    assert_eq!(r.sstables_in, 2, "{r:?}");
    // The deleted data went with the first SSTable's rewrite; then nothing older can hold
    // those keys, so their tombstones (local deletion time 1000 s, gc_grace 0) went too.
    assert_eq!(partitions(&s), 15, "{r:?}");
    assert_eq!(values(&read_all(&s, TABLE, 0)).len(), 150);
}

/// `CREATE TABLE ks.c (k blob PRIMARY KEY, n counter)`.
fn counter_schema() -> Arc<TableSchema> {
    use amphora_types::CqlType;
    use amphora_types::schema::{ColumnKind, TableOptions};
    let mut o = TableOptions::default();
    o.compression
        .insert("chunk_length_in_kb".into(), "1".into());
    Arc::new(TableSchema::new(
        TableId(TABLE),
        "ks",
        "c",
        vec![
            cd(
                "k",
                CqlType::Blob,
                ColumnKind::PartitionKey,
                0,
                ClusteringOrder::Asc,
            ),
            cd(
                "n",
                CqlType::Counter,
                ColumnKind::Regular,
                0,
                ClusteringOrder::Asc,
            ),
        ],
        o,
    ))
}

#[test]
fn scrub_of_a_counter_table_stops_unless_skip_corrupted() {
    let d = tempfile::tempdir().expect("tmp");
    let s = open_with(d.path(), counter_schema());
    for p in 0..300 {
        let k = pk(&format!("counter-partition-{p}"));
        s.apply_counter_update(
            TableId(TABLE),
            k,
            amphora_types::data::Clustering::empty(),
            1,
            p + 1,
            10,
            7,
            0,
        )
        .expect("counter");
    }
    rt().block_on(s.flush(TableId(TABLE))).expect("flush");
    let data = s.sstable_paths(TableId(TABLE)).remove(0);
    drop(s);
    let mut b = std::fs::read(&data).expect("read");
    let n = b.len() / 2;
    b[n] ^= 0x5a;
    std::fs::write(&data, b).expect("write");
    let s = open_with(d.path(), counter_schema());
    let err = rt()
        .block_on(maintenance::scrub(&s, TableId(TABLE), false, &mut |_| {}))
        .expect_err("a counter table's corrupt partition stops scrub");
    assert!(err.to_string().contains("--skip-corrupted"), "{err}");
    // Nothing changed: the SSTable is still the one there was.
    assert_eq!(s.sstable_paths(TableId(TABLE)), vec![data]);
    let r = rt()
        .block_on(maintenance::scrub(&s, TableId(TABLE), true, &mut |_| {}))
        .expect("scrub --skip-corrupted");
    assert!(r.partitions_skipped >= 1, "{r:?}");
    assert_eq!(r.partitions_kept + r.partitions_skipped, 300, "{r:?}");
    assert_eq!(
        read_all(&s, TABLE, 0).partitions.len() as u64,
        r.partitions_kept
    );
}

#[test]
fn scrub_leaves_an_sstable_it_cannot_open_in_place() {
    let d = tempfile::tempdir().expect("tmp");
    let s = open(d.path());
    fill(&s, 10, 10);
    let bad = s.sstable_paths(TableId(TABLE)).remove(0);
    for p in 10..20 {
        s.apply(&row_write(TABLE, &format!("p{p}"), 0, "later", 20))
            .expect("apply");
    }
    rt().block_on(s.flush(TableId(TABLE))).expect("flush");
    drop(s);
    // Damage the first SSTable's statistics: it no longer opens at start.
    let stats = PathBuf::from(bad.to_string_lossy().replace("-Data.db", "-Statistics.db"));
    let mut b = std::fs::read(&stats).expect("read");
    b[20] ^= 0xff;
    std::fs::write(&stats, b).expect("write");
    let s = open(d.path());
    assert_eq!(s.metrics().sstable_count, 1);
    let r = rt()
        .block_on(maintenance::scrub(&s, TableId(TABLE), false, &mut |_| {}))
        .expect("scrub");
    assert_eq!(r.sstables_unreadable, 1, "{r:?}");
    assert_eq!(r.sstables_salvaged, 0, "{r:?}");
    assert_eq!(r.partitions_kept, 10, "{r:?}");
    // Its files are still there for a human to look at; the other SSTable is served.
    assert!(bad.exists() && stats.exists());
    assert_eq!(values(&read_all(&s, TABLE, 0)).len(), 10);
}

#[test]
fn scrub_leaves_the_inputs_of_a_committed_compaction_alone() {
    // A compaction's waiters are answered once its outputs serve reads; the janitor
    // deletes the inputs after that. Scrub's scan for SSTables out of service must not
    // take such an input for one (it counted it unreadable under load, or could have
    // copied its old content back in). Simulated: a copy of the live SSTable under a new
    // generation, named as the input of a committed transaction log.
    let d = tempfile::tempdir().expect("tmp");
    let s = open(d.path());
    fill(&s, 10, 10);
    let data = s.sstable_paths(TableId(TABLE)).remove(0);
    let dir = data.parent().expect("table dir").to_path_buf();
    let toc = data.to_string_lossy().replace("-Data.db", "-TOC.txt");
    let live = Path::new(&toc)
        .file_name()
        .and_then(|n| sstable::parse_toc_name(&n.to_string_lossy()))
        .expect("generation");
    let gone = live + 1000;
    for c in sstable::COMPONENTS.iter().chain(&["TOC.txt"]) {
        let from = sstable::component_path(&dir, live, c);
        if from.exists() {
            std::fs::copy(from, sstable::component_path(&dir, gone, c)).expect("copy");
        }
    }
    std::fs::write(
        dir.join(format!("compaction-{gone}.txn")),
        format!("inputs {gone}\noutput {live}\ncommit\n"),
    )
    .expect("txn log");
    let r = rt()
        .block_on(maintenance::scrub(&s, TableId(TABLE), false, &mut |_| {}))
        .expect("scrub");
    assert_eq!(r.sstables_unreadable, 0, "{r:?}");
    assert_eq!(r.sstables_salvaged, 0, "{r:?}");
    assert_eq!(r.sstables_in, 1, "{r:?}");
    assert_eq!(values(&read_all(&s, TABLE, 0)).len(), 100);
}

#[test]
fn scrub_skips_an_unreadable_index_block_and_keeps_an_sstable_it_cannot_index() {
    for (at_start, label) in [(false, "middle"), (true, "first")] {
        let d = tempfile::tempdir().expect("tmp");
        let s = open(d.path());
        // 300 partitions: index blocks of INDEX_BLOCK_ENTRIES entries, the last one shorter.
        fill(&s, 300, 10);
        let data = s.sstable_paths(TableId(TABLE)).remove(0);
        drop(s);
        let index = PathBuf::from(data.to_string_lossy().replace("-Data.db", "-Index.db"));
        let mut b = std::fs::read(&index).expect("read");
        let at = if at_start { 10 } else { b.len() / 2 };
        b[at] ^= 0xff;
        std::fs::write(&index, b).expect("write");
        let s = open(d.path());
        let r = rt()
            .block_on(maintenance::scrub(&s, TableId(TABLE), false, &mut |_| {}))
            .expect("scrub");
        if at_start {
            // No partition can be located: the SSTable is left as it is.
            assert_eq!(r.sstables_unreadable, 1, "{label}: {r:?}");
            assert_eq!(r.sstables_in, 0, "{label}: {r:?}");
            assert!(index.exists() && data.exists(), "{label}");
        } else {
            assert_eq!(r.index_blocks_skipped, 1, "{label}: {r:?}");
            let lost = amphora_storage::sstable::INDEX_BLOCK_ENTRIES as u64;
            assert_eq!(r.partitions_kept, 300 - lost, "{label}: {r:?}");
            assert_eq!(
                values(&read_all(&s, TABLE, 0)).len() as u64,
                (300 - lost) * 10,
                "{label}"
            );
        }
    }
}
