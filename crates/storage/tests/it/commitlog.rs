//! Commitlog behaviour seen from the shard: group commit in `batch` mode, the `group`
//! window, segments deleted once flushed, and flushes forced by the commitlog size limit.

use std::time::{Duration, Instant};

use amphora_storage::{ShardStorage, StorageConfig, SyncMode};
use amphora_types::data::Mutation;
use bytes::Bytes;

use crate::common::*;

const TABLE: u128 = 7;

/// A standard1 row: key `k{n}`, five 34-byte values.
fn write(n: u32) -> Mutation {
    standard1_write(
        TABLE,
        &format!("k{n}"),
        Bytes::copy_from_slice(&[n as u8; 34]),
    )
}

fn files_on_disk(dir: &std::path::Path, prefix: &str) -> usize {
    names_on_disk(dir, prefix).len()
}

/// The commitlog directory's `.log` files whose names start with `prefix`.
fn names_on_disk(dir: &std::path::Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir.join("commitlog"))
        .expect("commitlog dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix) && n.ends_with(".log"))
        .collect()
}

fn segments_on_disk(dir: &std::path::Path) -> usize {
    files_on_disk(dir, "CommitLog-")
}

fn spares_on_disk(dir: &std::path::Path) -> usize {
    files_on_disk(dir, "Spare-")
}

fn open(cfg: StorageConfig) -> ShardStorage {
    ShardStorage::open(cfg, vec![standard1(TABLE)])
        .expect("open")
        .0
}

#[test]
fn batch_mode_acks_after_a_sync_and_groups_concurrent_writers() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    cfg.commitlog_sync = SyncMode::Batch { window_ms: 0 };
    rt().block_on(async {
        let s = open(cfg);
        // One write alone: its ack resolves only after a sync covered it.
        let before = s.metrics().commitlog_syncs;
        s.apply(&write(0)).expect("apply").await.expect("ack");
        assert!(s.metrics().commitlog_syncs > before, "{:?}", s.metrics());
        // 500 writers in flight at once share a few syncs, not one each.
        let before = s.metrics().commitlog_syncs;
        let acks: Vec<_> = (1..=500)
            .map(|n| s.apply(&write(n)).expect("apply"))
            .collect();
        for a in acks {
            a.await.expect("ack");
        }
        let syncs = s.metrics().commitlog_syncs - before;
        assert!(
            (1..=20).contains(&syncs),
            "500 concurrent writes took {syncs} syncs"
        );
        assert_eq!(read_all(&s, TABLE, 0).partitions.len(), 501);
    });
}

/// Periodic mode: an acknowledged write's entry is in the segment file (handed to the OS,
/// counted by `commitlog_writes`) by the time its ack resolves, written with `pwrite` or
/// copied into the mapped segment: a replay of a copy of the files taken right after the
/// ack finds it.
#[test]
fn periodic_ack_means_the_entry_is_in_the_file() {
    for mapped in [true, false] {
        let dir = tempfile::tempdir().expect("tmp");
        let mut cfg = config(dir.path());
        cfg.commitlog_mmap = mapped;
        rt().block_on(async {
            let s = open(cfg);
            for n in 0..10 {
                let writes = s.metrics().commitlog_writes;
                s.apply(&write(n)).expect("apply").await.expect("ack");
                assert_eq!(s.metrics().commitlog_writes, writes + 1);
                let keys = replayed_keys(&dir.path().join("commitlog"));
                assert_eq!(keys.len(), n as usize + 1, "mapped {mapped}, write {n}");
                assert!(
                    keys.contains(&Bytes::from(format!("k{n}"))),
                    "mapped {mapped}, write {n}: entry not in the file"
                );
            }
        });
    }
}

/// The partition keys a replay of a copy of `log_dir` finds (the live files are left
/// alone: a replay may truncate a torn tail).
fn replayed_keys(log_dir: &std::path::Path) -> Vec<Bytes> {
    let copy = tempfile::tempdir().expect("tmp");
    for e in std::fs::read_dir(log_dir).expect("commitlog dir") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), copy.path().join(e.file_name())).expect("copy");
    }
    let mut keys = Vec::new();
    let mut report = amphora_storage::commitlog::ReplayReport::default();
    amphora_storage::commitlog::replay(
        copy.path(),
        amphora_storage::CommitFailurePolicy::Stop,
        &mut report,
        |_, m| keys.push(m.key.key.clone()),
    )
    .expect("replay");
    assert!(
        report.corrupt.is_empty() && report.torn_tail.is_none(),
        "{report:?}"
    );
    keys
}

/// `WriteAck::now` (writes answered with no future): in periodic mode the ack resolves at
/// once with the entry handed to the OS (outside a deferral scope); in batch mode the shard
/// says it does not ack at once and `now` hands the ack back, to be awaited.
#[test]
fn acks_resolve_at_once_only_in_periodic_mode() {
    let dir = tempfile::tempdir().expect("tmp");
    rt().block_on(async {
        let s = open(config(dir.path()));
        assert!(s.acks_at_once());
        let writes = s.metrics().commitlog_writes;
        let ack = s.apply(&write(0)).expect("apply");
        assert!(matches!(ack.now(), Ok(Ok(()))), "periodic ack waited");
        assert_eq!(
            s.metrics().commitlog_writes,
            writes + 1,
            "entry not written out"
        );
    });
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    cfg.commitlog_sync = SyncMode::Batch { window_ms: 0 };
    rt().block_on(async {
        let s = open(cfg);
        assert!(!s.acks_at_once());
        let before = s.metrics().commitlog_syncs;
        let ack = s.apply(&write(1)).expect("apply");
        let Err(waiting) = ack.now() else {
            panic!("a batch-mode ack resolved before its sync");
        };
        waiting.await.expect("ack");
        assert!(s.metrics().commitlog_syncs > before, "{:?}", s.metrics());
    });
}

#[test]
fn group_mode_waits_for_its_window_and_syncs_once_per_window() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    let window = Duration::from_millis(30);
    cfg.commitlog_sync = SyncMode::Group { window_ms: 30 };
    rt().block_on(async {
        let s = open(cfg);
        let before = s.metrics().commitlog_syncs;
        let t = Instant::now();
        let acks: Vec<_> = (0..200)
            .map(|n| s.apply(&write(n)).expect("apply"))
            .collect();
        for a in acks {
            a.await.expect("ack");
        }
        let took = t.elapsed();
        assert!(
            took >= window,
            "group acks came after {took:?}, before the window"
        );
        let syncs = s.metrics().commitlog_syncs - before;
        assert!(
            (1..=3).contains(&syncs),
            "200 writes in one window took {syncs} syncs"
        );
    });
}

/// Flushed segments are deleted, or kept as spares for reuse (up to the total space),
/// mapped or not; nothing is lost with a crash that leaves the spares on disk.
#[test]
fn flushed_segments_are_deleted() {
    for mapped in [false, true] {
        flushed_segments_are_deleted_with(mapped);
    }
}

fn flushed_segments_are_deleted_with(mapped: bool) {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    cfg.commitlog_segment_size_bytes = 64 << 10;
    // At most 4 segments, live and spare: the rest of the discarded ones are deleted.
    cfg.commitlog_total_space_bytes = 4 * (64 << 10);
    cfg.commitlog_reuse_segments = true;
    cfg.commitlog_mmap = mapped;
    cfg.memtable_budget_bytes = 1 << 30;
    let spares = 3;
    rt().block_on(async {
        let s = open(cfg);
        // ~230 bytes per entry: 1,000 writes fill about three and a half 64 KiB segments
        // (just under the total space, which would force a flush).
        for n in 0..1000 {
            s.apply(&write(n)).expect("apply").await.expect("ack");
        }
        let m = s.metrics();
        assert!(m.commitlog_segments >= 3, "{m:?}");
        assert_eq!(segments_on_disk(dir.path()), m.commitlog_segments as usize);
        s.flush_all().await.expect("flush");
        let m = s.metrics();
        assert_eq!(m.commitlog_segments, 1, "{m:?}");
        assert_eq!(segments_on_disk(dir.path()), 1);
        assert_eq!(m.commitlog_spare_segments, spares as u64, "{m:?}");
        assert_eq!(spares_on_disk(dir.path()), spares);
        assert_eq!(read_all(&s, TABLE, 0).partitions.len(), 1000);
        // A crash, leaving the spares on disk.
        std::mem::forget(s);
    });
    // Nothing is lost with them: a restart reads everything from the SSTable, and deletes
    // the spares of the run before (their pages may have left the page cache).
    let before = spare_names(dir.path());
    assert_eq!(before.len(), spares);
    let s = open(config(dir.path()));
    assert_eq!(read_all(&s, TABLE, 0).partitions.len(), 1000);
    let after = spare_names(dir.path());
    assert!(
        before.iter().all(|n| !after.contains(n)),
        "{before:?} {after:?}"
    );
}

fn spare_names(dir: &std::path::Path) -> Vec<String> {
    names_on_disk(dir, "Spare-")
}

/// New segments reuse the files of discarded ones; the previous content left in them past
/// the new entries (the tail of a longer use) is never replayed, after a clean shutdown
/// or a crash, and what the reused segments hold is.
#[test]
fn reused_segment_files_replay_only_their_own_entries() {
    for mapped in [false, true] {
        reused_segment_files_replay_only_their_own_entries_with(mapped);
    }
}

/// Mapped: the spare files' pages are also dropped from the page cache before their
/// reuse, so that the writes into them fall back to `pwritev` (no read on the shard).
fn reused_segment_files_replay_only_their_own_entries_with(mapped: bool) {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    cfg.commitlog_reuse_segments = true;
    cfg.commitlog_mmap = mapped;
    cfg.commitlog_segment_size_bytes = 64 << 10;
    cfg.memtable_budget_bytes = 1 << 30;
    rt().block_on(async {
        let s = open(cfg.clone());
        // Old content: 1,500 writes of partitions 0..1500, flushed (their segments become
        // spares), then overwritten in SSTables by nothing: a replay of a stale entry
        // would show up as a partition >= 10_000 below.
        for n in 0..1500 {
            s.apply(&write(10_000 + n))
                .expect("apply")
                .await
                .expect("ack");
        }
        s.flush_all().await.expect("flush");
        let spares = s.metrics().commitlog_spare_segments;
        assert!(spares >= 4, "{:?}", s.metrics());
        s.truncate(amphora_types::schema::TableId(TABLE))
            .expect("truncate");
        if mapped {
            for name in spare_names(dir.path()) {
                let f = std::fs::File::open(dir.path().join("commitlog").join(name))
                    .expect("open spare");
                amphora_storage::diskwait::drop_from_page_cache(&f).expect("evict");
            }
        }
        // New content, shorter than the old: 700 writes, into reused files.
        for n in 0..700 {
            s.apply(&write(n)).expect("apply").await.expect("ack");
        }
        let m = s.metrics();
        assert!(m.commitlog_reused_segments >= 2, "{m:?}");
        assert_eq!(m.commitlog_map_fallbacks > 0, mapped, "{m:?}");
        // A crash: nothing more is written (no end marker on the active segment).
        std::mem::forget(s);
    });
    let (s, report) = ShardStorage::open(cfg.clone(), vec![standard1(TABLE)]).expect("reopen");
    let keys = read_all(&s, TABLE, 0).partitions.len();
    assert_eq!(keys, 700, "{report:?}");
    assert!(report.corrupt.is_empty(), "{report:?}");
    drop(s);
    // A clean restart after that: the same, with no torn tail.
    let (s, report) = ShardStorage::open(cfg, vec![standard1(TABLE)]).expect("reopen");
    assert_eq!(read_all(&s, TABLE, 0).partitions.len(), 700);
    assert!(
        report.corrupt.is_empty() && report.torn_tail.is_none(),
        "{report:?}"
    );
}

#[test]
fn commitlog_over_its_size_limit_forces_a_flush() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    cfg.commitlog_segment_size_bytes = 64 << 10;
    cfg.commitlog_total_space_bytes = 256 << 10;
    // Memory never forces a flush here: only the commitlog limit can.
    cfg.memtable_budget_bytes = 1 << 30;
    rt().block_on(async {
        let s = open(cfg);
        let mut peak = 0;
        // ~4.6 MB of log, eighteen times the limit.
        for n in 0..20_000 {
            s.apply(&write(n)).expect("apply").await.expect("ack");
            peak = peak.max(s.metrics().commitlog_bytes);
            if n % 1000 == 999 {
                // Let the flushes the limit started finish and be installed (their
                // segments deleted), however slow the host: the bound below is about
                // what the log holds, not about how fast a flush runs.
                let started = std::time::Instant::now();
                loop {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    s.poll_background();
                    if s.metrics().pending_flushes == 0 || started.elapsed().as_secs() >= 30 {
                        break;
                    }
                }
            }
        }
        s.poll_background();
        let m = s.metrics();
        assert!(m.flushes + m.pending_flushes >= 2, "{m:?}");
        // Bounded by the limit plus the segments written while a flush runs, not by the
        // data written.
        assert!(peak <= 2 << 20, "commitlog grew to {peak} bytes");
        assert_eq!(read_all(&s, TABLE, 0).partitions.len(), 20_000);
    });
}
