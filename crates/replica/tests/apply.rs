//! `ShardDb::apply`: a write is applied at the call when the shard's memtables fit their
//! budget, and waits for a flush (in its own future) when they do not. Either way every
//! acknowledged write reads back, and the table's counters count each one.

mod common;

use std::sync::Arc;

use amphora_storage::config::FlushHook;
use amphora_storage::{PartitionRange, ReadCommand, StorageConfig};
use amphora_types::data::{
    Cell, Clustering, ColumnData, Mutation, PartitionKey, PartitionUpdate, Row,
};
use amphora_types::schema::{TableId, TableSchema};
use bytes::Bytes;

const TABLE: u128 = 7;

fn table() -> Arc<TableSchema> {
    common::key_value_table(TABLE)
}

fn write(k: &str, size: usize) -> Mutation {
    Mutation {
        table: TableId(TABLE),
        key: PartitionKey::new(Bytes::copy_from_slice(k.as_bytes())),
        update: PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering::empty(),
                marker: None,
                deletion: None,
                cells: vec![(
                    1,
                    ColumnData::Simple(Cell::live(1, Bytes::from(vec![b'v'; size]))),
                )],
            }],
            ..Default::default()
        },
    }
}

#[test]
fn writes_over_the_memtable_budget_wait_and_every_acked_write_reads_back() {
    const BUDGET: u64 = 128 << 10;
    const WRITERS: usize = 4;
    const PER_WRITER: usize = 300;
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = StorageConfig::new(dir.path(), 0);
    cfg.auto_compaction = false;
    cfg.memtable_budget_bytes = BUDGET;
    // Flushes far slower than the writers: most writes find the memtables full.
    cfg.before_flush = Some(FlushHook(Arc::new(|| {
        std::thread::sleep(std::time::Duration::from_millis(50))
    })));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let db = amphora_replica::init_shard(cfg, vec![table()], 1).expect("open");
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let db = db.clone();
            writers.push(tokio::task::spawn_local(async move {
                let mut acked = Vec::new();
                for n in 0..PER_WRITER {
                    let k = format!("w{w}-{n}");
                    db.apply(write(&k, 1000)).await.expect("applied");
                    acked.push(k);
                }
                acked
            }));
        }
        let mut acked = Vec::new();
        for w in writers {
            acked.extend(w.await.expect("writer"));
        }
        let m = db.storage().metrics();
        assert!(
            m.write_memory_waits > 0,
            "no write waited for memory: {m:?}"
        );
        let all = db
            .read(&ReadCommand::new(TableId(TABLE), PartitionRange::all(), 0))
            .expect("read");
        let mut keys: Vec<String> = all
            .partitions
            .iter()
            .map(|p| String::from_utf8_lossy(&p.key.key).to_string())
            .collect();
        keys.sort();
        acked.sort();
        assert_eq!(keys, acked, "every acknowledged write reads back");
        let counters = db.table_counters();
        let t = counters.get(&TableId(TABLE)).expect("the table's counters");
        assert_eq!(t.writes, (WRITERS * PER_WRITER) as u64);
        assert_eq!(t.write_errors, 0);
        // A write to a table the shard does not have fails at once and is counted.
        let mut bad = write("x", 10);
        bad.table = TableId(TABLE + 1);
        assert!(db.apply(bad).await.is_err());
        let counters = db.table_counters();
        assert_eq!(
            counters.get(&TableId(TABLE + 1)).map(|t| t.write_errors),
            Some(1)
        );
        amphora_replica::uninstall();
    });
}
