//! Whole-partition reads of one-row partitions leave unread the SSTables whose data is
//! all older than what the newer ones held for every column (`read::Coverage`), and read
//! them where they could still change the result: a column not found yet, a tombstone, a
//! row marker not beaten.

use amphora_storage::{PartitionRange, ReadCommand, ShardStorage};
use amphora_types::data::{Cell, Clustering, ColumnData, LivenessInfo, PartitionUpdate, Row};
use amphora_types::schema::TableId;
use bytes::Bytes;

use crate::common::*;

const T: u128 = 21;

/// Columns 1-5 of standard1 as `(column, cell)`.
fn row(marker: Option<i64>, cells: Vec<(u32, Cell)>) -> PartitionUpdate {
    PartitionUpdate {
        rows: vec![Row {
            clustering: Clustering::empty(),
            marker: marker.map(LivenessInfo::new),
            deletion: None,
            cells: cells
                .into_iter()
                .map(|(c, cell)| (c, ColumnData::Simple(cell)))
                .collect(),
        }],
        ..Default::default()
    }
}

fn all_columns(ts: i64, v: &str) -> Vec<(u32, Cell)> {
    (1..6)
        .map(|c| (c, Cell::live(ts, Bytes::copy_from_slice(v.as_bytes()))))
        .collect()
}

/// The row's columns 1-5 (`-` for none) and the SSTables the read consulted; `None`
/// when the row does not exist.
fn read(s: &ShardStorage, key: &str) -> (Option<Vec<String>>, u32) {
    let r = s
        .read(&ReadCommand::new(
            TableId(T),
            PartitionRange::Single(pk(key)),
            0,
        ))
        .expect("read");
    let row = r
        .partitions
        .first()
        .and_then(|p| p.rows.iter().next().cloned());
    let cols = row.map(|row| {
        (1..6)
            .map(|c| match row.cell(c) {
                Some(ColumnData::Simple(c)) => String::from_utf8_lossy(&c.value).to_string(),
                _ => "-".into(),
            })
            .collect()
    });
    (cols, r.sstables_read)
}

async fn write_and_flush(s: &ShardStorage, key: &str, u: PartitionUpdate) {
    apply_update(s, T, key, u).await;
    s.flush_all().await.expect("flush");
}

fn cols(v: &[&str]) -> Option<Vec<String>> {
    Some(v.iter().map(|s| s.to_string()).collect())
}

#[test]
fn an_overwritten_row_is_read_from_its_newest_sstable_alone() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut c = config(dir.path());
    c.row_cache_bytes = Some(0);
    rt().block_on(async {
        let (s, _) = ShardStorage::open(c, vec![standard1(T)]).expect("open");
        for (ts, v) in [(1, "a"), (2, "b"), (3, "c")] {
            write_and_flush(&s, "k", row(None, all_columns(ts, v))).await;
        }
        assert_eq!(s.metrics().sstable_count, 3);
        assert_eq!(read(&s, "k"), (cols(&["c"; 5]), 1));
        // A newer SSTable with one column: the one below it is read for the others, and the
        // oldest is left.
        write_and_flush(
            &s,
            "k",
            row(None, vec![(1, Cell::live(4, Bytes::from("d")))]),
        )
        .await;
        assert_eq!(read(&s, "k"), (cols(&["d", "c", "c", "c", "c"]), 2));
        // A tombstone in the oldest SSTable (another key's): it is read, though older.
        apply_update(&s, T, "other", row(None, vec![(1, Cell::tombstone(0, 1))])).await;
        apply_update(&s, T, "k", row(None, all_columns(0, "z"))).await;
        s.flush_all().await.expect("flush");
        let (v, n) = read(&s, "k");
        assert_eq!(v, cols(&["d", "c", "c", "c", "c"]));
        assert_eq!(n, 3, "the SSTable with a tombstone is read");
    });
}

#[test]
fn an_older_row_marker_is_read_unless_a_newer_one_was_found() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut c = config(dir.path());
    c.row_cache_bytes = Some(64 << 20);
    rt().block_on(async {
        let (s, _) = ShardStorage::open(c, vec![standard1(T)]).expect("open");
        // An INSERT (marker) at 1, an UPDATE (no marker) at 2, twice.
        write_and_flush(&s, "k", row(Some(1), all_columns(1, "a"))).await;
        write_and_flush(&s, "k", row(None, all_columns(2, "b"))).await;
        write_and_flush(&s, "k", row(None, all_columns(3, "c"))).await;
        // The marker's SSTable is read; the middle one (no marker, no tombstone, all
        // older than the newest) is not.
        assert_eq!(read(&s, "k"), (cols(&["c"; 5]), 2));
        // Every column deleted: the INSERT's marker keeps the row (the row cache kept
        // the marker when it took the partition from that read).
        let deleted = (1..6).map(|c| (c, Cell::tombstone(4, 1))).collect();
        apply_update(&s, T, "k", row(None, deleted)).await;
        assert_eq!(read(&s, "k").0, cols(&["-"; 5]), "the marker keeps the row");
        s.flush_all().await.expect("flush");
        assert_eq!(read(&s, "k").0, cols(&["-"; 5]), "after the flush too");
        // A newer INSERT's marker beats the old one: the SSTables below are left unread.
        let dir2 = tempfile::tempdir().expect("tmp");
        let mut c = config(dir2.path());
        c.row_cache_bytes = Some(0);
        let (s, _) = ShardStorage::open(c, vec![standard1(T)]).expect("open");
        write_and_flush(&s, "k", row(Some(1), all_columns(1, "a"))).await;
        write_and_flush(&s, "k", row(Some(2), all_columns(2, "b"))).await;
        assert_eq!(read(&s, "k"), (cols(&["b"; 5]), 1));
    });
}
