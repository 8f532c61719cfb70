//! Crash test: a writer child process in `batch` mode is SIGKILLed at random moments
//! (during writes, flushes and compactions); after each kill the parent reopens the
//! storage and checks that every acknowledged write reads back with its latest value and
//! that nothing deleted comes back.
//!
//! `CRASH_KILLS=<n>` sets the number of kills (default 20). The children alternate between
//! commitlog segments written through a mapping (even rounds) and with `pwritev` (odd
//! rounds; each reopen replays what the other mode wrote); `CRASH_MMAP=1` or `=0` keeps
//! every child in one mode.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use amphora_storage::{PartitionRange, ReadCommand, ShardStorage, StorageConfig, SyncMode};
use amphora_types::data::{
    Cell, ColumnData, DeletionTime, LivenessInfo, Mutation, PartitionUpdate, Row,
};
use amphora_types::schema::TableId;
use bytes::Bytes;

use crate::common::*;

const KEYS: u64 = 300;

fn child_config(dir: &std::path::Path) -> StorageConfig {
    let mut c = StorageConfig::new(dir, 0);
    c.commitlog_sync = SyncMode::Batch { window_ms: 0 };
    c.memtable_budget_bytes = 256 << 10;
    c.commitlog_segment_size_bytes = 256 << 10;
    c.commitlog_reuse_segments = true;
    // The child writes through mapped segments (`StorageConfig::commitlog_mmap`, the
    // default) or with `pwritev`, as the parent says for its round.
    if let Ok(v) = std::env::var("CRASH_CHILD_MMAP") {
        c.commitlog_mmap = v == "1";
    }
    c.auto_compaction = true;
    c
}

fn key_of(k: u64) -> String {
    format!("k{k}")
}

/// The child: writes and deletes until killed. Prints `S seq key kind` before applying
/// and `K seq` after the ack.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var("CRASH_CHILD_DIR") else {
        return;
    };
    let mut seq: u64 = std::env::var("CRASH_CHILD_SEQ")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let schema = standard1(5);
    // libtest has printed "test crash::crash_child ... " without a newline.
    println!();
    rt().block_on(async {
        let (s, _) = ShardStorage::open(child_config(std::path::Path::new(&dir)), vec![schema])
            .expect("open");
        let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        loop {
            let mut acks = Vec::new();
            for _ in 0..16 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = x % KEYS;
                let delete = (x >> 20).is_multiple_of(10);
                println!("S {seq} {k} {}", if delete { "D" } else { "W" });
                let key = pk(&key_of(k));
                let update = if delete {
                    PartitionUpdate {
                        partition_deletion: Some(DeletionTime::new(seq as i64, 0)),
                        ..Default::default()
                    }
                } else {
                    let v = Bytes::copy_from_slice(format!("{seq:034}").as_bytes());
                    PartitionUpdate {
                        rows: vec![Row {
                            clustering: Default::default(),
                            marker: Some(LivenessInfo::new(seq as i64)),
                            deletion: None,
                            cells: (1..6)
                                .map(|c| (c, ColumnData::Simple(Cell::live(seq as i64, v.clone()))))
                                .collect(),
                        }],
                        ..Default::default()
                    }
                };
                let ack = s
                    .apply(&Mutation {
                        table: TableId(5),
                        key,
                        update,
                    })
                    .expect("apply");
                acks.push((seq, ack));
                seq += 1;
            }
            for (q, a) in acks {
                a.await.expect("ack");
                println!("K {q}");
            }
        }
    });
}

#[test]
fn crash_kill9_batch_mode() {
    let kills: usize = std::env::var("CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().expect("tmp");
    let exe = std::env::current_exe().expect("exe");
    // key → ops (seq, is_delete) submitted; and acked seqs.
    let mut submitted: BTreeMap<u64, (u64, bool)> = BTreeMap::new();
    let mut acked: Vec<u64> = Vec::new();
    let mut next_seq = 1u64;
    let mut rnd = 0x1234_5678u64 ^ std::process::id() as u64;
    let started = Instant::now();
    for round in 0..kills {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash::crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CRASH_CHILD_DIR", dir.path())
            .env("CRASH_CHILD_SEQ", next_seq.to_string())
            .env(
                "CRASH_CHILD_MMAP",
                std::env::var("CRASH_MMAP")
                    .unwrap_or_else(|_| if round % 2 == 0 { "1" } else { "0" }.into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for l in BufReader::new(stdout).lines() {
                match l {
                    Ok(l) => lines.push(l),
                    Err(_) => break,
                }
            }
            lines
        });
        rnd ^= rnd << 13;
        rnd ^= rnd >> 7;
        rnd ^= rnd << 17;
        std::thread::sleep(Duration::from_millis(150 + rnd % 400));
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        let lines = reader.join().expect("reader");
        let mut max_seq = next_seq;
        for l in &lines {
            let parts: Vec<&str> = l.split_whitespace().collect();
            match parts.as_slice() {
                ["S", seq, key, kind] => {
                    let (Ok(seq), Ok(key)) = (seq.parse::<u64>(), key.parse::<u64>()) else {
                        continue;
                    };
                    submitted.insert(seq, (key, *kind == "D"));
                    max_seq = max_seq.max(seq + 1);
                }
                ["K", seq] => {
                    if let Ok(seq) = seq.parse() {
                        acked.push(seq);
                    }
                }
                _ => {}
            }
        }
        next_seq = max_seq;
        // Verify.
        let (s, report) =
            ShardStorage::open(config(dir.path()), vec![standard1(5)]).expect("reopen after kill");
        assert!(report.corrupt.is_empty(), "round {round}: {report:?}");
        let mut last_acked: BTreeMap<u64, u64> = BTreeMap::new();
        for q in &acked {
            if let Some((k, _)) = submitted.get(q) {
                let e = last_acked.entry(*k).or_insert(0);
                *e = (*e).max(*q);
            }
        }
        let r = s
            .read(&ReadCommand::new(TableId(5), PartitionRange::all(), 0))
            .expect("read after kill");
        let mut stored: BTreeMap<u64, u64> = BTreeMap::new();
        for p in &r.partitions {
            let k: u64 = String::from_utf8_lossy(&p.key.key)
                .trim_start_matches('k')
                .parse()
                .expect("key");
            let row = p.rows.first().expect("row");
            let Some(ColumnData::Simple(c)) = row.cell(1) else {
                panic!("round {round}: key {k} has no C0")
            };
            let v: u64 = String::from_utf8_lossy(&c.value).parse().expect("value");
            for col in 1..6 {
                match row.cell(col) {
                    Some(ColumnData::Simple(cc)) => {
                        assert_eq!(cc.value, c.value, "round {round}: torn row k{k}")
                    }
                    _ => panic!("round {round}: key {k} misses column {col}"),
                }
            }
            stored.insert(k, v);
        }
        for k in 0..KEYS {
            let a = last_acked.get(&k).copied().unwrap_or(0);
            match stored.get(&k) {
                Some(v) => {
                    if *v < a {
                        let ops: Vec<_> =
                            submitted.iter().filter(|(_, (kk, _))| *kk == k).collect();
                        eprintln!("ops on key {k}: {ops:?}");
                        eprintln!("replay: {report:?}");
                        let hexkey: String =
                            key_of(k).bytes().map(|b| format!("{b:02x}")).collect();
                        for p in s.sstable_paths(TableId(5)) {
                            let dump = amphora_storage::tools::dump_sstable(&p).unwrap_or_default();
                            let hits: Vec<&str> = dump
                                .lines()
                                .filter(|l| l.contains(&format!("\"0x{hexkey}\"")))
                                .collect();
                            eprintln!(
                                "{}: {} lines for the key: {:?}",
                                p.display(),
                                hits.len(),
                                hits.iter()
                                    .map(|h| &h[..h.len().min(300)])
                                    .collect::<Vec<_>>()
                            );
                        }
                        let _ = std::process::Command::new("ls")
                            .arg("-la")
                            .arg(dir.path().join("commitlog"))
                            .status();
                        let _ = std::process::Command::new("sh")
                            .arg("-c")
                            .arg(format!("ls -la {}/keyspace1/*", dir.path().display()))
                            .status();
                    }
                    assert!(
                        *v >= a,
                        "round {round}: key {k} reads seq {v}, but seq {a} was acknowledged"
                    );
                    assert_eq!(
                        submitted.get(v),
                        Some(&(k, false)),
                        "round {round}: key {k} has unknown value {v}"
                    );
                }
                None => {
                    // Absent: the latest surviving op is a delete at or after the last ack.
                    let ok = a == 0 || submitted.range(a..).any(|(_, (kk, d))| *kk == k && *d);
                    assert!(
                        ok,
                        "round {round}: key {k} is missing though seq {a} was acknowledged"
                    );
                }
            }
        }
        eprintln!(
            "crash round {round}: {} ops acked so far, {} lines, replayed {}, torn tail {:?}, {} sstables",
            acked.len(),
            lines.len(),
            report.mutations_replayed,
            report.torn_tail.as_ref().map(|t| t.bytes_truncated),
            s.metrics().sstable_count
        );
        drop(s);
    }
    assert!(
        acked.len() > kills * 10,
        "the child made too little progress: {} acks",
        acked.len()
    );
    eprintln!("{kills} kills in {:?}", started.elapsed());
}
