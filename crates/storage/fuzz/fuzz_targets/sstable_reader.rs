//! Replaces one component of a small valid SSTable with fuzz input (first byte picks the
//! component), then opens, scans and point-reads it: must never panic.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use amphora_storage::sstable::{COMPONENTS, SSTableReader, SSTableWriter, component_path};
use amphora_types::CqlType;
use amphora_types::data::{Cell, Clustering, ColumnData, LivenessInfo, PartitionKey, PartitionUpdate, Row};
use amphora_types::schema::{ClusteringOrder, ColumnDef, ColumnKind, TableId, TableOptions, TableSchema};
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fn template() -> &'static (PathBuf, Vec<Vec<u8>>) {
    static T: OnceLock<(PathBuf, Vec<Vec<u8>>)> = OnceLock::new();
    T.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("amphora-fuzz-sst-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cd = |n: &str, ty, kind| ColumnDef { name: n.into(), ty, kind, position: 0, order: ClusteringOrder::Asc };
        let mut opts = TableOptions::default();
        opts.compression.insert("chunk_length_in_kb".into(), "1".into());
        let schema = TableSchema::new(
            TableId(1),
            "ks",
            "t",
            vec![
                cd("k", CqlType::Blob, ColumnKind::PartitionKey),
                cd("c", CqlType::Int, ColumnKind::Clustering),
                cd("v", CqlType::Blob, ColumnKind::Regular),
            ],
            opts,
        );
        let mut keys: Vec<PartitionKey> =
            (0..50u32).map(|i| PartitionKey::new(Bytes::from(format!("key{i}")))).collect();
        keys.sort();
        let mut w = SSTableWriter::new(&dir, 1, &schema).expect("writer");
        for k in &keys {
            let rows = (0..10i32)
                .map(|c| Row {
                    clustering: Clustering(vec![Bytes::copy_from_slice(&c.to_be_bytes())]),
                    marker: Some(LivenessInfo::new(1)),
                    deletion: None,
                    cells: vec![(2, ColumnData::Simple(Cell::live(1, Bytes::from_static(b"some value bytes"))))],
                })
                .collect();
            w.append(k, &PartitionUpdate { rows, ..Default::default() }).expect("append");
        }
        w.finish(0, 0).expect("finish");
        let comps = COMPONENTS.iter().map(|c| std::fs::read(component_path(&dir, 1, c)).expect("read")).collect();
        (dir, comps)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let (dir, comps) = template();
    let which = pick as usize % COMPONENTS.len();
    for (i, c) in COMPONENTS.iter().enumerate() {
        let bytes = if i == which { rest } else { &comps[i][..] };
        if std::fs::write(component_path(dir, 1, c), bytes).is_err() {
            return;
        }
    }
    let Ok(r) = SSTableReader::open(dir, 1) else { return };
    if let Ok(mut s) = r.scan_from(i64::MIN, None, false) {
        while let Ok(Some(p)) = s.next_partition() {
            std::hint::black_box(p);
        }
    }
    let _ = r.get(&PartitionKey::new(Bytes::from_static(b"key7")));
    let _ = r.verify();
});
