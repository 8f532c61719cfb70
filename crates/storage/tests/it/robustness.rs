//! Storage robustness: TWCS dropping fully expired SSTables, write backpressure,
//! compaction backlog.

use std::cell::Cell as StdCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use amphora_storage::config::FlushHook;
use amphora_storage::{Clock, PartitionRange, ReadCommand, ShardStorage};
use amphora_types::data::{
    Cell, Clustering, ColumnData, LivenessInfo, Mutation, PartitionUpdate, Row,
};
use amphora_types::schema::{ClusteringOrder, TableId, TableSchema};
use bytes::Bytes;

use crate::common::*;

/// A TWCS table (1-minute windows, gc_grace_seconds = 0).
fn twcs_schema(id: u128) -> Arc<TableSchema> {
    let mut s = (*clustered_schema(id, ClusteringOrder::Asc)).clone();
    s.options.gc_grace_seconds = 0;
    s.options.compaction = [
        ("class", "TimeWindowCompactionStrategy"),
        ("compaction_window_unit", "MINUTES"),
        ("compaction_window_size", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Arc::new(s)
}

/// A row whose marker and cell expire `ttl` seconds after `now`; `ts` in seconds.
fn ttl_write(table: u128, k: &str, c: i32, ts_s: i64, ttl: i32, now: i32) -> Mutation {
    let ts = ts_s * 1_000_000;
    Mutation {
        table: TableId(table),
        key: pk(k),
        update: PartitionUpdate {
            rows: vec![Row {
                clustering: Clustering(vec![i(c)]),
                marker: Some(LivenessInfo::expiring(ts, ttl, now)),
                deletion: None,
                cells: vec![(
                    2,
                    ColumnData::Simple(Cell::expiring(ts, ttl, now, Bytes::from_static(b"t"))),
                )],
            }],
            ..Default::default()
        },
    }
}

fn simulated_clock(start: i32) -> (Arc<AtomicI32>, Clock) {
    let now = Arc::new(AtomicI32::new(start));
    let n = now.clone();
    (now, Clock::from_fn(move || n.load(Ordering::Relaxed)))
}

#[test]
fn twcs_drops_a_fully_expired_sstable_without_rewriting_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let (now, clock) = simulated_clock(1_000);
    let mut cfg = config(dir.path());
    cfg.clock = clock;
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg, vec![twcs_schema(20)]).expect("open");
        for c in 0..10 {
            s.apply(&ttl_write(20, "x", c, 1_000, 60, 1_000))
                .expect("apply")
                .await
                .expect("ack");
        }
        s.flush(TableId(20)).await.expect("flush");
        // Live data written later, in a later window.
        s.apply(&row_write(20, "x", 100, "live", 2_000 * 1_000_000))
            .expect("apply")
            .await
            .expect("ack");
        s.flush(TableId(20)).await.expect("flush");
        let before = s.sstable_paths(TableId(20));
        assert_eq!(before.len(), 2, "two SSTables: {before:?}");

        // Zero the expired SSTable's data: a drop never reads it, a rewrite would fail on
        // the checksums.
        let expired = before
            .iter()
            .find(|p| p.to_string_lossy().ends_with("am1-1-Data.db"))
            .expect("generation 1");
        let len = std::fs::metadata(expired).expect("stat").len() as usize;
        std::fs::write(expired, vec![0u8; len]).expect("overwrite");
        // Not expired yet: one SSTable per window, nothing to do.
        assert!(!s.compact_once(TableId(20)).await.expect("compact"));
        now.store(1_061, Ordering::Relaxed);
        assert!(s.compact_once(TableId(20)).await.expect("compact"));
        let after = s.sstable_paths(TableId(20));
        assert_eq!(after.len(), 1, "{after:?}");
        assert!(
            after.iter().all(|p| before.contains(p)),
            "the live SSTable is the same file: {after:?}"
        );
        let m = s.metrics();
        assert_eq!(m.compactions, 1, "{m:?}");
        assert_eq!(m.compacted_bytes_out, 0, "nothing rewritten: {m:?}");
        assert!(m.compacted_bytes_in > 0, "{m:?}");
        assert_eq!(
            values(&read_all(&s, 20, 1_061)),
            vec![("x".to_string(), 100, "live".to_string())]
        );
        // No transaction log left behind: the janitor removes it after the waiters.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let txns = walk(dir.path())
                .into_iter()
                .filter(|p| p.to_string_lossy().ends_with(".txn"))
                .count();
            if txns == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{txns} transaction log(s) left"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    });
}

#[test]
fn twcs_keeps_an_expired_sstable_that_overlaps_older_live_data() {
    let dir = tempfile::tempdir().expect("tmp");
    let (now, clock) = simulated_clock(1_000);
    let mut cfg = config(dir.path());
    cfg.clock = clock;
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg, vec![twcs_schema(21)]).expect("open");
        // Older live data for the same partition (timestamp 500 s).
        s.apply(&row_write(21, "x", 1, "old", 500 * 1_000_000))
            .expect("apply")
            .await
            .expect("ack");
        s.flush(TableId(21)).await.expect("flush");
        s.apply(&ttl_write(21, "x", 2, 1_000, 60, 1_000))
            .expect("apply")
            .await
            .expect("ack");
        s.flush(TableId(21)).await.expect("flush");
        now.store(1_061, Ordering::Relaxed);
        assert!(!s.compact_once(TableId(21)).await.expect("compact"));
        assert_eq!(s.sstable_paths(TableId(21)).len(), 2);
        // Older data still in a memtable blocks the drop the same way.
        let dir2 = tempfile::tempdir().expect("tmp");
        let (now2, clock) = simulated_clock(1_000);
        let mut cfg = config(dir2.path());
        cfg.clock = clock;
        let (s2, _) = ShardStorage::open(cfg, vec![twcs_schema(22)]).expect("open");
        s2.apply(&ttl_write(22, "x", 2, 1_000, 60, 1_000))
            .expect("apply")
            .await
            .expect("ack");
        s2.flush(TableId(22)).await.expect("flush");
        s2.apply(&row_write(22, "x", 1, "old", 500 * 1_000_000))
            .expect("apply")
            .await
            .expect("ack");
        now2.store(1_061, Ordering::Relaxed);
        assert!(!s2.compact_once(TableId(22)).await.expect("compact"));
        assert_eq!(s2.sstable_paths(TableId(22)).len(), 1);
        assert_eq!(
            values(&read_all(&s2, 22, 1_061)),
            vec![("x".to_string(), 1, "old".to_string())]
        );
    });
}

/// A standard1 row of five `size`-byte cells.
fn wide_write(table: u128, k: &str, size: usize) -> Mutation {
    standard1_write(table, k, Bytes::from(vec![b'v'; size]))
}

#[test]
fn writes_wait_for_slow_flushes_and_memory_stays_bounded() {
    const BUDGET: u64 = 256 << 10;
    const WRITERS: usize = 8;
    const PER_WRITER: usize = 500;
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    cfg.memtable_budget_bytes = BUDGET;
    // A flush takes 100 ms: far slower than the writers.
    cfg.before_flush = Some(FlushHook(Arc::new(|| {
        std::thread::sleep(std::time::Duration::from_millis(100))
    })));
    rt().block_on(async {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (s, _) = ShardStorage::open(cfg, vec![standard1(30)]).expect("open");
                tokio::task::spawn_local(s.run_background());
                let peak = Rc::new(StdCell::new(0u64));
                let done = Rc::new(StdCell::new(0usize));
                let mut writers = Vec::new();
                for w in 0..WRITERS {
                    let (s, peak, done) = (s.clone(), peak.clone(), done.clone());
                    writers.push(tokio::task::spawn_local(async move {
                        let mut acked = Vec::new();
                        for n in 0..PER_WRITER {
                            let k = format!("w{w}-{n}");
                            s.admit().await.expect("admit");
                            s.apply(&wide_write(30, &k, 200))
                                .expect("apply")
                                .await
                                .expect("ack");
                            peak.set(peak.get().max(s.metrics().memtable_bytes));
                            acked.push(k);
                        }
                        done.set(done.get() + 1);
                        acked
                    }));
                }
                // Reads keep being answered while the writers wait.
                let mut reads_while_over = 0u64;
                while done.get() < WRITERS {
                    let r = s
                        .read(&ReadCommand::new(
                            TableId(30),
                            PartitionRange::Single(pk("w0-0")),
                            0,
                        ))
                        .expect("read");
                    if s.metrics().memtable_bytes > BUDGET / 2 && r.partitions.len() == 1 {
                        reads_while_over += 1;
                    }
                    tokio::task::yield_now().await;
                }
                let mut acked = Vec::new();
                for w in writers {
                    acked.extend(w.await.expect("writer"));
                }
                let total_bytes = (WRITERS * PER_WRITER * 1000) as u64;
                assert!(
                    total_bytes > 10 * BUDGET,
                    "the test writes far past the budget"
                );
                let m = s.metrics();
                assert!(m.write_memory_waits > 0, "{m:?}");
                assert!(
                    peak.get() <= BUDGET + BUDGET / 4,
                    "memtables peaked at {} bytes, budget {BUDGET}",
                    peak.get()
                );
                assert!(reads_while_over > 0);
                let all = read_all(&s, 30, 0);
                let mut keys: Vec<String> = all
                    .partitions
                    .iter()
                    .map(|p| String::from_utf8_lossy(&p.key.key).to_string())
                    .collect();
                keys.sort();
                acked.sort();
                assert_eq!(keys, acked, "every acknowledged write reads back");
            })
            .await;
    });
}

#[test]
fn compaction_backlog_is_exported_and_throttled_compaction_completes() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    // Room for one batch of writes per flush, so the test decides the SSTables.
    cfg.memtable_budget_bytes = 1 << 20;
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg, vec![standard1(40)]).expect("open");
        assert_eq!(s.metrics().compaction_backlog_bytes, 0);
        for f in 0..8 {
            for n in 0..200 {
                s.apply(&wide_write(40, &format!("k{f}-{n}"), 50))
                    .expect("apply")
                    .await
                    .expect("ack");
            }
            s.flush(TableId(40)).await.expect("flush");
        }
        let before = s.metrics();
        assert_eq!(before.sstable_count, 8, "{before:?}");
        // Eight equal SSTables, min_threshold 4: each byte is rewritten log4(8) = 1.5 times.
        let expected = before.sstable_bytes as f64 * 1.5;
        let got = before.compaction_backlog_bytes as f64;
        assert!(
            (got - expected).abs() / expected < 0.05,
            "{got} vs {expected}"
        );
        assert!(before.compaction_share_permille > 100, "{before:?}");
        // Strategy-chosen (throttled) compactions run until there is nothing left to do.
        let mut rounds = 0;
        while s.compact_once(TableId(40)).await.expect("compact") {
            rounds += 1;
            assert!(rounds < 10);
        }
        let after = s.metrics();
        assert!(after.compactions >= 1, "{after:?}");
        assert!(after.sstable_count < 8, "{after:?}");
        assert!(
            after.compaction_backlog_bytes < before.compaction_backlog_bytes,
            "{after:?}"
        );
        assert!(after.compaction_share_permille < before.compaction_share_permille);
        assert_eq!(read_all(&s, 40, 0).partitions.len(), 1600);
    });
}

/// A standard1 row of five cells of incompressible bytes.
fn noise_write(table: u128, k: &str, seed: u64) -> Mutation {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    standard1_write_with(table, k, || {
        let v: Vec<u8> = (0..200)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Bytes::from(v)
    })
}

#[test]
fn admit_fails_instead_of_waiting_when_flushes_fail_and_recovers() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = config(dir.path());
    cfg.memtable_budget_bytes = 256 << 10;
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg, vec![standard1(70)]).expect("open");
        // Flushes fail: a file stands where the table directory was.
        let table_dir = std::fs::read_dir(dir.path().join("keyspace1"))
            .expect("keyspace dir")
            .flatten()
            .next()
            .expect("table dir")
            .path();
        std::fs::remove_dir_all(&table_dir).expect("remove table dir");
        std::fs::write(&table_dir, b"not a directory").expect("file");
        let mut acked = Vec::new();
        let mut refused = None;
        for n in 0..2_000 {
            // Bounded: a wedged admit fails the test instead of hanging it.
            let admitted = tokio::time::timeout(std::time::Duration::from_secs(30), s.admit())
                .await
                .expect("admit answers (does not wait forever)");
            if let Err(e) = admitted {
                refused = Some(e);
                break;
            }
            let k = format!("k{n}");
            s.apply(&wide_write(70, &k, 200))
                .expect("apply")
                .await
                .expect("ack");
            acked.push(k);
        }
        let e = refused.expect("writes are refused once memory is full and flushes fail");
        assert!(
            matches!(e, amphora_storage::StorageError::MemtableFull { .. }),
            "{e}"
        );
        assert!(
            e.to_string().contains(&table_dir.display().to_string()),
            "{e}"
        );
        assert!(s.metrics().memtable_bytes > 256 << 10);
        // The directory is back: the retried flushes free memory and writes go on.
        std::fs::remove_file(&table_dir).expect("remove file");
        std::fs::create_dir_all(&table_dir).expect("mkdir");
        s.admit().await.expect("admitted after the flush succeeded");
        s.apply(&wide_write(70, "after", 200))
            .expect("apply")
            .await
            .expect("ack");
        acked.push("after".to_string());
        let mut keys: Vec<String> = read_all(&s, 70, 0)
            .partitions
            .iter()
            .map(|p| String::from_utf8_lossy(&p.key.key).to_string())
            .collect();
        keys.sort();
        acked.sort();
        assert_eq!(keys, acked);
    });
}

/// Runs [`full_disk_child`] in a private mount namespace on an 8 MiB tmpfs.
#[test]
fn full_disk_fails_writes_cleanly_and_recovers() {
    let mnt = tempfile::tempdir().expect("tmp");
    let exe = std::env::current_exe().expect("test binary");
    let script = r#"mount -t tmpfs -o size=8m tmpfs "$0" && exec "$1" --exact robustness::full_disk_child --ignored --nocapture --test-threads=1"#;
    let run = |unshare_flags: &str| {
        std::process::Command::new("unshare")
            .arg(unshare_flags)
            .args(["sh", "-c", script])
            .arg(mnt.path())
            .arg(&exe)
            .env("AMPHORA_FULL_DISK_DIR", mnt.path())
            .output()
    };
    // Root can mount in a new mount namespace; others need a user namespace too.
    let mut out = run("-m").expect("run unshare");
    if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("unshare") {
        out = run("-Urm").expect("run unshare");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "full-disk child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// Fills `path`'s file system with ballast files; returns them, largest first.
fn fill_disk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    use std::io::Write;
    let mut files = Vec::new();
    for (size, chunk) in [(128usize << 10, 64usize << 10), (4 << 10, 4 << 10)] {
        for n in 0.. {
            let p = dir.join(format!("ballast-{size}-{n}"));
            let mut f = std::fs::File::create(&p).expect("ballast file");
            files.push(p);
            let mut written = 0;
            let full = loop {
                if written >= size {
                    break false;
                }
                match f.write(&vec![0xAB; chunk]) {
                    Ok(0) | Err(_) => break true,
                    Ok(k) => written += k,
                }
            };
            if full || f.sync_all().is_err() {
                break;
            }
        }
    }
    files
}

#[test]
#[ignore = "run by full_disk_fails_writes_cleanly_and_recovers on its own tmpfs"]
fn full_disk_child() {
    let mnt = std::path::PathBuf::from(
        std::env::var("AMPHORA_FULL_DISK_DIR").expect("AMPHORA_FULL_DISK_DIR"),
    );
    let data = mnt.join("data");
    let mut cfg = config(&data);
    cfg.commitlog_segment_size_bytes = 64 << 10;
    cfg.memtable_budget_bytes = 16 << 20;
    let table = 50u128;
    let schema = standard1(table);
    let mut acked: Vec<String> = Vec::new();
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg.clone(), vec![schema.clone()]).expect("open");
        // Some data on disk, some only in the memtable.
        for n in 0..300 {
            let k = format!("a{n}");
            s.apply(&noise_write(table, &k, n))
                .expect("apply")
                .await
                .expect("ack");
            acked.push(k);
        }
        s.flush(TableId(table)).await.expect("flush");
        for n in 0..400 {
            let k = format!("b{n}");
            s.apply(&noise_write(table, &k, 1000 + n))
                .expect("apply")
                .await
                .expect("ack");
            acked.push(k);
        }

        let ballast = fill_disk(&mnt);
        // Writes now fail with an error naming the commitlog file; none panics. The space
        // of the active segment and of the next one (prepared ahead of the rotation) was
        // allocated when they were created (a mapped segment is allocated whole): writes
        // that fit in them still succeed, and the first that needs a segment after them
        // fails, as does every one after it.
        let mut errors = Vec::new();
        for n in 0..300 {
            let k = format!("c{n}");
            let r = match s.apply(&noise_write(table, &k, 2000 + n)) {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            match r {
                Ok(()) => {
                    assert!(errors.is_empty(), "c{n} succeeded after {errors:?}");
                    acked.push(k);
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        assert!(
            errors.len() >= 50,
            "writes kept succeeding on a full disk: {errors:?}"
        );
        for e in &errors {
            assert!(
                e.contains("CommitLog-") && e.contains("No space left"),
                "error names the file and the cause: {e}"
            );
        }
        // Nothing is lost meanwhile: every acknowledged write reads back.
        let keys = |s: &ShardStorage| -> Vec<String> {
            let mut v: Vec<String> = read_all(s, table, 0)
                .partitions
                .iter()
                .map(|p| String::from_utf8_lossy(&p.key.key).to_string())
                .collect();
            v.sort();
            v
        };
        let read = keys(&s);
        assert!(acked.iter().all(|k| read.binary_search(k).is_ok()));

        // A little space back: the commitlog drains, and writes are accepted again.
        std::fs::remove_file(&ballast[0]).expect("free 128 KiB");
        for n in 0..5 {
            let k = format!("d{n}");
            s.apply(&noise_write(table, &k, 3000 + n))
                .expect("apply")
                .await
                .expect("ack");
            acked.push(k);
        }
        // Not enough for the memtable's SSTable: the flush fails naming the file, keeps
        // the memtable, and leaves no partial files behind.
        let e = s
            .flush(TableId(table))
            .await
            .expect_err("flush on a full disk");
        assert!(e.to_string().contains("No space left"), "{e}");
        assert!(
            e.to_string().contains("am1-"),
            "the error names the SSTable file: {e}"
        );
        let leftovers: Vec<_> = walk(&data)
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("tmp-"))
            })
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        assert!(s.metrics().memtable_bytes > 0);
        let read = keys(&s);
        assert!(acked.iter().all(|k| read.binary_search(k).is_ok()));

        // Space returns: the flush is retried and succeeds, and writes go on.
        for b in &ballast[1..] {
            std::fs::remove_file(b).expect("free");
        }
        s.flush(TableId(table))
            .await
            .expect("flush after space returned");
        for n in 0..50 {
            let k = format!("e{n}");
            s.apply(&noise_write(table, &k, 4000 + n))
                .expect("apply")
                .await
                .expect("ack");
            acked.push(k);
        }
        s.shutdown().await.expect("shutdown");
    });
    // No file is corrupt, and a restart sees every acknowledged write.
    let report = amphora_storage::tools::validate_dir(&data);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(report.sstables_ok >= 2);
    rt().block_on(async {
        let (s, rep) = ShardStorage::open(cfg, vec![schema]).expect("reopen");
        assert!(rep.torn_tail.is_none() && rep.corrupt.is_empty(), "{rep:?}");
        let mut read: Vec<String> = read_all(&s, table, 0)
            .partitions
            .iter()
            .map(|p| String::from_utf8_lossy(&p.key.key).to_string())
            .collect();
        read.sort();
        acked.sort();
        // Writes that failed may or may not have been applied (as in Cassandra); every
        // acknowledged one is there.
        assert!(acked.iter().all(|k| read.binary_search(k).is_ok()));
        assert!(
            read.len() <= acked.len() + 1,
            "at most the first failed write is extra"
        );
    });
}

#[test]
fn expiry_past_2038_survives_replay_flush_and_compaction() {
    let dir = tempfile::tempdir().expect("tmp");
    // 2026-11-22; with the maximum TTL (20 years) the expiry is in 2046.
    let now = 1_795_000_000;
    let ttl = 630_720_000;
    let (_, clock) = simulated_clock(now);
    let mut cfg = config(dir.path());
    cfg.clock = clock;
    let schema = clustered_schema(60, ClusteringOrder::Asc);
    let expiry_of = |s: &ShardStorage| -> Vec<i64> {
        read_all(s, 60, now)
            .partitions
            .iter()
            .flat_map(|p| p.rows.iter())
            .filter_map(|r| match r.cell(2) {
                Some(ColumnData::Simple(c)) => Some(c.local_expiry),
                _ => None,
            })
            .collect()
    };
    let expected = i64::from(now) + i64::from(ttl);
    assert!(expected > i64::from(i32::MAX));
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg.clone(), vec![schema.clone()]).expect("open");
        for c in 0..2 {
            s.apply(&ttl_write(60, "x", c, 1_000, ttl, now))
                .expect("apply")
                .await
                .expect("ack");
        }
        assert_eq!(expiry_of(&s), vec![expected; 2]);
        drop(s);
        // Replayed from the commitlog.
        let (s, rep) = ShardStorage::open(cfg.clone(), vec![schema.clone()]).expect("reopen");
        assert_eq!(rep.mutations_replayed, 2);
        assert_eq!(expiry_of(&s), vec![expected; 2]);
        // Through an SSTable, and a compaction that merges and purges.
        s.flush(TableId(60)).await.expect("flush");
        s.apply(&ttl_write(60, "x", 2, 1_000, ttl, now))
            .expect("apply")
            .await
            .expect("ack");
        s.flush(TableId(60)).await.expect("flush");
        s.compact_major(TableId(60)).await.expect("compact");
        assert_eq!(s.metrics().sstable_count, 1);
        assert_eq!(expiry_of(&s), vec![expected; 3]);
        // Still live at the last second an i32 clock can express (2038-01-19).
        let live_at = |t: i32| read_all(&s, 60, t).partitions.len();
        assert_eq!(live_at(i32::MAX), 1);
        s.shutdown().await.expect("shutdown");
    });
}

/// Golden files with expiry times past 2038 (an SSTable and a commitlog segment, under
/// tests/fixtures/v1-expiry64): a 20-year TTL written at 2026-11-22. Regenerate with
/// `REGEN_FIXTURES=1 cargo test -p amphora-storage --test it robustness::regenerate_expiry64`.
fn expiry64_fixture_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-expiry64")
}

const EXPIRY64_NOW: i32 = 1_795_000_000;
const EXPIRY64_TTL: i32 = 630_720_000;

#[test]
fn regenerate_expiry64() {
    if std::env::var("REGEN_FIXTURES").is_err() {
        return;
    }
    let dir = expiry64_fixture_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = config(&dir);
    cfg.commitlog_segment_size_bytes = 4096;
    rt().block_on(async {
        let (s, _) = ShardStorage::open(cfg, vec![clustered_schema(61, ClusteringOrder::Asc)])
            .expect("open");
        s.apply(&ttl_write(61, "sst", 1, 1_000, EXPIRY64_TTL, EXPIRY64_NOW))
            .expect("apply")
            .await
            .expect("ack");
        s.flush(TableId(61)).await.expect("flush");
        s.apply(&ttl_write(61, "log", 2, 1_000, EXPIRY64_TTL, EXPIRY64_NOW))
            .expect("apply")
            .await
            .expect("ack");
        // No shutdown: the commitlog keeps the unflushed write.
    });
}

#[test]
fn expiry64_fixture_reads_back() {
    let t = tempfile::tempdir().expect("tmp");
    let copy = |from: &std::path::Path| {
        for p in walk(from) {
            let rel = p.strip_prefix(from).expect("under");
            let to = t.path().join(rel);
            std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
            std::fs::copy(&p, &to).expect("copy");
        }
    };
    copy(&expiry64_fixture_dir());
    let mut cfg = config(t.path());
    cfg.commitlog_segment_size_bytes = 4096;
    let (s, rep) = ShardStorage::open(cfg, vec![clustered_schema(61, ClusteringOrder::Asc)])
        .expect("open fixture");
    assert_eq!(rep.mutations_replayed, 1, "{rep:?}");
    assert_eq!(s.metrics().sstable_count, 1);
    let expected = i64::from(EXPIRY64_NOW) + i64::from(EXPIRY64_TTL);
    let r = read_all(&s, 61, EXPIRY64_NOW);
    let mut got: Vec<(String, i64, i64)> = r
        .partitions
        .iter()
        .flat_map(|p| {
            p.rows.iter().map(move |row| {
                let e = match row.cell(2) {
                    Some(ColumnData::Simple(c)) => c.local_expiry,
                    _ => 0,
                };
                let m = row.marker.map_or(0, |m| m.local_expiry);
                (String::from_utf8_lossy(&p.key.key).to_string(), e, m)
            })
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("log".to_string(), expected, expected),
            ("sst".to_string(), expected, expected)
        ]
    );
    let report = amphora_storage::tools::validate_dir(t.path());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
}

/// Every file under `dir`.
pub fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}
