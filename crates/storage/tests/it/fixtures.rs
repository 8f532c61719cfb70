//! Golden on-disk fixtures of format v1 (an SSTable and commitlog segments, checked in
//! under tests/fixtures/v1) read back, plus corrupted copies: corruption must give an
//! error naming the file and offset, never a panic, and never silently lose data.
//!
//! Regenerate (only when the format version changes): `REGEN_FIXTURES=1 cargo test -p
//! amphora-storage --test it fixtures::regenerate`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use amphora_storage::{
    CommitFailurePolicy, PartitionRange, ReadCommand, ShardStorage, StorageConfig, StorageError,
};
use amphora_types::schema::{ClusteringOrder, TableId, TableSchema};

use crate::common::*;

const TABLE: u128 = 0xf1;

fn schema() -> Arc<TableSchema> {
    let mut s = (*clustered_schema(TABLE, ClusteringOrder::Asc)).clone();
    s.options
        .compression
        .insert("chunk_length_in_kb".into(), "1".into());
    Arc::new(s)
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1")
}

fn cfg(dir: &Path) -> StorageConfig {
    let mut c = config(dir);
    c.commitlog_segment_size_bytes = 4096;
    c
}

/// Rows written into the SSTable: partitions p0..p9, clusterings 0..20.
fn sstable_rows() -> Vec<(String, i32, String)> {
    let mut v = Vec::new();
    for p in 0..10 {
        for c in 0..20 {
            v.push((format!("p{p}"), c, format!("sstable-{p}-{c}")));
        }
    }
    v
}

/// Rows only in the commitlog: partitions q0..q4, clusterings 0..30.
fn commitlog_rows() -> Vec<(String, i32, String)> {
    let mut v = Vec::new();
    for p in 0..5 {
        for c in 0..30 {
            v.push((format!("q{p}"), c, format!("commitlog-{p}-{c}")));
        }
    }
    v
}

#[test]
fn regenerate() {
    if std::env::var("REGEN_FIXTURES").is_err() {
        return;
    }
    let dir = fixture_dir();
    let _ = std::fs::remove_dir_all(&dir);
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg(&dir), vec![schema()]).expect("open");
        for (k, c, v) in sstable_rows() {
            s.apply(&row_write(TABLE, &k, c, &v, 1000))
                .expect("apply")
                .await
                .expect("ack");
        }
        s.flush(TableId(TABLE)).await.expect("flush");
        for (k, c, v) in commitlog_rows() {
            s.apply(&row_write(TABLE, &k, c, &v, 2000))
                .expect("apply")
                .await
                .expect("ack");
        }
        // No shutdown: the commitlog keeps the unflushed writes.
    });
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dest = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).expect("copy");
        }
    }
}

fn fresh_copy() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tmp");
    copy_dir(&fixture_dir(), t.path());
    t
}

fn find(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(find(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn flip(path: &Path, offset: usize) {
    let mut b = std::fs::read(path).expect("read");
    b[offset] ^= 0x5a;
    std::fs::write(path, b).expect("write");
}

fn sorted(mut v: Vec<(String, i32, String)>) -> Vec<(String, i32, String)> {
    v.sort();
    v
}

#[test]
fn golden_fixture_reads_back() {
    let d = fresh_copy();
    let (s, report) = ShardStorage::open(cfg(d.path()), vec![schema()]).expect("open fixture");
    assert!(
        report.torn_tail.is_none() && report.corrupt.is_empty(),
        "{report:?}"
    );
    assert_eq!(
        report.mutations_replayed,
        commitlog_rows().len() as u64,
        "{report:?}"
    );
    assert_eq!(s.metrics().sstable_count, 1);
    let mut want = sstable_rows();
    want.extend(commitlog_rows());
    assert_eq!(sorted(values(&read_all(&s, TABLE, 0))), sorted(want));
    // Every component is where the format doc says.
    for c in [
        "Data.db",
        "CompressionInfo.db",
        "Index.db",
        "Summary.db",
        "Filter.db",
        "Statistics.db",
        "TOC.txt",
    ] {
        assert_eq!(find(d.path(), &format!("am1-1-{c}")).len(), 1, "{c}");
    }
}

#[test]
fn corrupt_data_chunk_names_file_and_offset() {
    let d = fresh_copy();
    let data = find(d.path(), "-Data.db").remove(0);
    let len = std::fs::metadata(&data).expect("meta").len() as usize;
    flip(&data, len / 2);
    let (s, _) = ShardStorage::open(cfg(d.path()), vec![schema()]).expect("open");
    // Some partition lives in the damaged chunk; find it by reading each.
    let mut errors = Vec::new();
    for p in 0..10 {
        let cmd = ReadCommand::new(
            TableId(TABLE),
            PartitionRange::Single(pk(&format!("p{p}"))),
            0,
        );
        if let Err(e) = s.read(&cmd) {
            errors.push(e);
        }
    }
    assert!(!errors.is_empty(), "the flipped byte was not detected");
    let msg = errors[0].to_string();
    assert!(matches!(errors[0], StorageError::Corrupt { .. }), "{msg}");
    assert!(msg.contains("Data.db") && msg.contains("offset"), "{msg}");
    // The SSTable is out of service; the rest (commitlog data) is still served.
    assert_eq!(s.metrics().sstable_count, 0);
    assert!(s.metrics().corrupt_sstables >= 1);
    let r = read_all(&s, TABLE, 0);
    assert_eq!(values(&r).len(), commitlog_rows().len());
}

#[test]
fn corrupt_metadata_components_are_reported() {
    for comp in [
        "Statistics.db",
        "Summary.db",
        "CompressionInfo.db",
        "Filter.db",
    ] {
        let d = fresh_copy();
        let f = find(d.path(), comp).remove(0);
        flip(&f, 9);
        let (s, _) = ShardStorage::open(cfg(d.path()), vec![schema()]).expect("open survives");
        assert_eq!(
            s.metrics().sstable_count,
            0,
            "{comp}: corrupt SSTable must be out of service"
        );
        assert_eq!(s.metrics().corrupt_sstables, 1, "{comp}");
    }
    // A corrupt index block is found on read.
    let d = fresh_copy();
    let f = find(d.path(), "Index.db").remove(0);
    flip(&f, 20);
    let (s, _) = ShardStorage::open(cfg(d.path()), vec![schema()]).expect("open");
    let e = s
        .read(&ReadCommand::new(TableId(TABLE), PartitionRange::all(), 0))
        .expect_err("index corruption must be detected");
    assert!(e.to_string().contains("Index.db"), "{e}");
}

#[test]
fn torn_commitlog_tail_is_truncated_and_reported() {
    let d = fresh_copy();
    let segs = find(d.path(), ".log");
    let last = segs.last().expect("segment").clone();
    let len = std::fs::metadata(&last).expect("meta").len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .expect("open");
    f.set_len(len - 7).expect("truncate");
    drop(f);
    let (s, report) = ShardStorage::open(cfg(d.path()), vec![schema()]).expect("open");
    let torn = report.torn_tail.clone().expect("torn tail reported");
    assert_eq!(torn.path, last);
    assert!(torn.offset < len && torn.bytes_truncated > 0, "{torn:?}");
    // Everything but the torn entry is back.
    assert_eq!(
        values(&read_all(&s, TABLE, 0)).len(),
        sstable_rows().len() + commitlog_rows().len() - 1
    );
}

#[test]
fn corrupt_commitlog_middle_follows_policy() {
    let d = fresh_copy();
    let segs = find(d.path(), ".log");
    assert!(segs.len() >= 2, "fixture needs several segments: {segs:?}");
    flip(&segs[0], 100);
    match ShardStorage::open(cfg(d.path()), vec![schema()]) {
        Err(StorageError::CommitlogCorrupt { path, offset, .. }) => {
            assert_eq!(path, segs[0]);
            assert!((24..=100).contains(&offset), "offset {offset}");
        }
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("corruption in the middle of the commitlog must stop the start"),
    }
    let mut c = cfg(d.path());
    c.commit_failure_policy = CommitFailurePolicy::Ignore;
    let (_s, report) = ShardStorage::open(c, vec![schema()]).expect("open with ignore");
    assert_eq!(report.corrupt.len(), 1, "{report:?}");
    assert_eq!(report.corrupt[0].path, segs[0]);
    // Only the corrupt entry's bytes are skipped: replay resumes at the next valid entry.
    assert!(
        report.corrupt[0].bytes_skipped < 200,
        "{:?}",
        report.corrupt[0]
    );
}

#[test]
fn corrupt_entry_inside_the_last_segment_is_not_a_torn_tail() {
    // The last segment has valid entries after a corrupt one: they may have been
    // acknowledged, so replay must not truncate them away as a torn tail.
    let d = fresh_copy();
    let mut segs = find(d.path(), ".log");
    // Make the 57-entry segment the last one (its one-entry successor goes, and with it
    // one commitlog row).
    std::fs::remove_file(segs.pop().expect("segment")).expect("remove");
    let last = segs.last().expect("segment").clone();
    let all = sstable_rows().len() + commitlog_rows().len() - 1;
    // A byte inside the first entry's payload (after the 24-byte header and the entry's
    // 8-byte length + checksum).
    flip(&last, 24 + 8 + 5);
    let len = std::fs::metadata(&last).expect("meta").len();
    match ShardStorage::open(cfg(d.path()), vec![schema()]) {
        Err(StorageError::CommitlogCorrupt { path, offset, .. }) => {
            assert_eq!(path, last);
            assert_eq!(offset, 24);
        }
        Err(e) => panic!("wrong error {e}"),
        Ok((_, report)) => {
            panic!("a corrupt entry with valid entries after it must stop the start: {report:?}")
        }
    }
    assert_eq!(
        std::fs::metadata(&last).expect("meta").len(),
        len,
        "the refused start must not have truncated the segment"
    );
    let mut c = cfg(d.path());
    c.commit_failure_policy = CommitFailurePolicy::Ignore;
    let (s, report) = ShardStorage::open(c, vec![schema()]).expect("open with ignore");
    assert_eq!(report.torn_tail, None, "{report:?}");
    assert_eq!(report.corrupt.len(), 1, "{report:?}");
    assert_eq!(report.corrupt[0].path, last);
    assert_eq!(report.corrupt[0].offset, 24);
    // Only the corrupt entry is skipped: replay resumes at the next valid entry.
    assert_eq!(values(&read_all(&s, TABLE, 0)).len(), all - 1);
}

#[test]
fn garbage_files_never_panic() {
    // Random bytes in place of each component: open or read fails cleanly.
    let d = fresh_copy();
    for f in find(d.path(), ".db")
        .into_iter()
        .chain(find(d.path(), ".log"))
    {
        let len = std::fs::metadata(&f).expect("meta").len() as usize;
        let junk: Vec<u8> = (0..len).map(|i| (i * 131 + 7) as u8).collect();
        std::fs::write(&f, junk).expect("write");
    }
    let mut c = cfg(d.path());
    c.commit_failure_policy = CommitFailurePolicy::Ignore;
    if let Ok((s, _)) = ShardStorage::open(c, vec![schema()]) {
        let _ = s.read(&ReadCommand::new(TableId(TABLE), PartitionRange::all(), 0));
    }
}

#[test]
fn offline_dump_and_validate() {
    let d = fresh_copy();
    let data = find(d.path(), "-Data.db").remove(0);
    let json = amphora_storage::tools::dump_sstable(&data).expect("dump");
    assert!(
        json.starts_with("[\n")
            && json.contains("\"partition\"")
            && json.contains("\"tstamp\": 1000"),
        "{json}"
    );
    assert_eq!(
        json.matches("\"type\": \"row\"").count(),
        sstable_rows().len()
    );
    let ok = amphora_storage::tools::validate_dir(d.path());
    assert!(ok.errors.is_empty(), "{:?}", ok.errors);
    assert_eq!(ok.sstables_ok, 1);
    assert!(ok.segments >= 2);
    let len = std::fs::metadata(&data).expect("meta").len() as usize;
    flip(&data, len / 3);
    let seg = find(d.path(), ".log").remove(0);
    flip(&seg, 60);
    let bad = amphora_storage::tools::validate_dir(d.path());
    assert_eq!(bad.sstables_ok, 0);
    assert_eq!(bad.errors.len(), 2, "{:?}", bad.errors);
    assert!(bad.errors.iter().any(|e| e.to_string().contains("Data.db")));
    assert!(
        bad.errors
            .iter()
            .any(|e| e.to_string().contains("CommitLog-1-"))
    );
}
