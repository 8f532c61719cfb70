//! The block cache: point reads through it return what was written, before and after the
//! SSTables they cached are replaced by flushes and compactions.

use std::collections::BTreeMap;

use amphora_storage::{PartitionRange, ReadCommand, ShardStorage};
use amphora_types::schema::{ClusteringOrder, TableId};

use crate::common::*;

fn read_key(s: &ShardStorage, k: &str) -> Vec<(String, i32, String)> {
    let cmd = ReadCommand::new(TableId(1), PartitionRange::Single(pk(k)), 0);
    values(&s.read(&cmd).expect("read"))
}

fn expected(model: &BTreeMap<(String, i32), String>, k: &str) -> Vec<(String, i32, String)> {
    model
        .iter()
        .filter(|((key, _), _)| key == k)
        .map(|((key, c), v)| (key.clone(), *c, v.clone()))
        .collect()
}

fn check_all(s: &ShardStorage, model: &BTreeMap<(String, i32), String>, keys: &[String]) {
    for k in keys {
        assert_eq!(read_key(s, k), expected(model, k), "key {k}");
    }
    // Keys that were never written (their tokens fall between the written ones).
    for n in 0..50 {
        let k = format!("absent{n}");
        assert_eq!(read_key(s, &k), vec![], "key {k}");
    }
}

async fn write(
    s: &ShardStorage,
    model: &mut BTreeMap<(String, i32), String>,
    k: &str,
    c: i32,
    v: String,
    ts: i64,
) {
    s.apply(&row_write(1, k, c, &v, ts))
        .expect("apply")
        .await
        .expect("ack");
    model.insert((k.to_string(), c), v);
}

/// Runs the scenario with the given cache size; returns (hits, misses).
fn scenario(cache_bytes: u64) -> (u64, u64) {
    let dir = tempfile::tempdir().expect("tmp");
    let schema = clustered_schema(1, ClusteringOrder::Asc);
    let mut cfg = config(dir.path());
    cfg.block_cache_bytes = Some(cache_bytes);
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg, vec![schema]).expect("open");
        let mut model = BTreeMap::new();
        let keys: Vec<String> = (0..400).map(|n| format!("key{n}")).collect();
        for (n, k) in keys.iter().enumerate() {
            for c in 0..3 {
                // ~200-byte values: the 400 partitions span many 16 KiB chunks.
                let v = format!("{k}-{c}-{}", "x".repeat(200 + n % 7));
                write(&s, &mut model, k, c, v, 10).await;
            }
        }
        s.flush_all().await.expect("flush");
        check_all(&s, &model, &keys);
        check_all(&s, &model, &keys);
        // Overwrite some rows, flush again: reads merge two SSTables.
        for k in keys.iter().step_by(3) {
            write(&s, &mut model, k, 1, format!("{k}-second"), 20).await;
        }
        s.flush_all().await.expect("flush");
        check_all(&s, &model, &keys);
        // Compaction replaces both SSTables; new data in the compacted one must be seen.
        for k in keys.iter().step_by(5) {
            write(&s, &mut model, k, 2, format!("{k}-third"), 30).await;
        }
        s.flush_all().await.expect("flush");
        s.compact_major(TableId(1)).await.expect("compact");
        assert_eq!(s.metrics().sstable_count, 1);
        check_all(&s, &model, &keys);
        check_all(&s, &model, &keys);
        let st = s.block_cache_stats();
        assert!(st.bytes <= st.capacity, "{st:?}");
        (st.hits, st.misses)
    })
}

#[test]
fn cached_point_reads_match_the_data() {
    let (hits, misses) = scenario(64 << 20);
    // Repeated reads of the same SSTables hit: at least every second pass over a table.
    assert!(hits > misses, "hits {hits} misses {misses}");
}

#[test]
fn tiny_cache_evicts_and_stays_correct() {
    let (hits, misses) = scenario(40 << 10);
    assert!(misses > 0);
    let _ = hits;
}

#[test]
fn disabled_cache_reads_the_same() {
    assert_eq!(scenario(0), (0, 0));
}
