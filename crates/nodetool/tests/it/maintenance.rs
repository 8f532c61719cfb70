//! garbagecollect, cleanup, scrub, refresh, toppartitions and the tablehistograms size
//! columns against a real node with data.

use std::path::{Path, PathBuf};

use amphora_testkit::TestNode;
use scylla::client::session::Session;

use crate::{field, list, ok, rt, session};

/// A value of `len` hex characters that LZ4 cannot shrink much (so deleted bytes show).
fn noise(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut s = String::with_capacity(len);
    while s.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{x:016x}"));
    }
    s.truncate(len);
    s
}

async fn ddl(s: &Session, cql: &str) {
    s.query_unpaged(cql, &[]).await.expect(cql);
}

async fn create(s: &Session, table_cql: &str) {
    ddl(
        s,
        "CREATE KEYSPACE IF NOT EXISTS ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
    )
    .await;
    ddl(s, table_cql).await;
}

/// Writes `k = from..to` with `v = noise(k, len)` into `ks.<table> (k int PRIMARY KEY, v text)`.
async fn fill(s: &Session, table: &str, from: i32, to: i32, len: usize) {
    let ins = s
        .prepare(format!("INSERT INTO ks.{table} (k, v) VALUES (?, ?)"))
        .await
        .expect("prepare");
    for k in from..to {
        s.execute_unpaged(&ins, (k, noise(k as u64, len)))
            .await
            .expect("insert");
    }
}

/// Every `(k, v)` of `ks.<table>`, sorted.
async fn rows(s: &Session, table: &str) -> Vec<(i32, String)> {
    let r = s
        .query_unpaged(format!("SELECT k, v FROM ks.{table}"), &[])
        .await
        .expect("select")
        .into_rows_result()
        .expect("rows");
    let mut v: Vec<(i32, String)> = r
        .rows::<(i32, String)>()
        .expect("typed")
        .map(|x| x.expect("row"))
        .collect();
    v.sort();
    v
}

fn live_bytes(node: &TestNode, table: &str) -> u64 {
    let stats = ok(node, &["tablestats", &format!("ks.{table}")]);
    field(&stats, "Space used (live)").parse().expect("bytes")
}

/// The table directories of `ks.<table>`, one per shard.
fn table_dirs(node: &TestNode, table: &str) -> Vec<PathBuf> {
    (0..node.smp)
        .filter_map(|shard| {
            let ks = node.data_dir.join(format!("data/shard-{shard}/ks"));
            std::fs::read_dir(ks).ok()?.flatten().find_map(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{table}-"))
                    .then(|| e.path())
            })
        })
        .collect()
}

/// Copies the SSTable files of `from` into `to`, renumbering generation g as g + `shift`.
fn copy_sstables(from: &Path, to: &Path, shift: u64) -> usize {
    std::fs::create_dir_all(to).expect("mkdir");
    let mut n = 0;
    for e in std::fs::read_dir(from).expect("read").flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let mut parts = name.splitn(3, '-');
        let (Some("am1"), Some(g), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let g: u64 = g.parse().expect("generation");
        std::fs::copy(e.path(), to.join(format!("am1-{}-{rest}", g + shift))).expect("copy");
        n += 1;
    }
    n
}

#[test]
fn garbagecollect_drops_deleted_bytes_and_keeps_the_rest() {
    let node = TestNode::start(2).expect("start node");
    let expected = rt().block_on(async {
        let s = session(&node).await;
        create(&s, "CREATE TABLE ks.gc (k int PRIMARY KEY, v text)").await;
        fill(&s, "gc", 0, 200, 2000).await;
        let all = rows(&s, "gc").await;
        all.into_iter()
            .filter(|(k, _)| k % 2 == 0)
            .collect::<Vec<_>>()
    });
    ok(&node, &["flush", "ks", "gc"]);
    rt().block_on(async {
        let s = session(&node).await;
        let del = s
            .prepare("DELETE FROM ks.gc WHERE k = ?")
            .await
            .expect("prepare");
        for k in (1..200).step_by(2) {
            s.execute_unpaged(&del, (k,)).await.expect("delete");
        }
    });
    ok(&node, &["flush", "ks", "gc"]);
    let before = live_bytes(&node, "gc");

    assert_eq!(ok(&node, &["garbagecollect", "ks", "gc"]), "");
    let after = live_bytes(&node, "gc");
    // Half the rows were deleted: about half the bytes go (tombstones stay: gc_grace).
    assert!(
        after < before * 3 / 5,
        "live bytes {before} -> {after} after garbagecollect"
    );
    rt().block_on(async {
        let s = session(&node).await;
        assert_eq!(rows(&s, "gc").await, expected);
    });
    let tasks = ok(&node, &["compactionstats"]);
    assert!(tasks.starts_with("pending tasks: "), "{tasks}");
    // CELL granularity and all keyspaces are accepted too.
    ok(&node, &["garbagecollect", "-g", "CELL"]);
    rt().block_on(async {
        let s = session(&node).await;
        assert_eq!(rows(&s, "gc").await, expected);
    });
}

#[test]
fn cleanup_drops_partitions_placed_in_the_wrong_shard() {
    let mut node = TestNode::start(2).expect("start node");
    let expected = rt().block_on(async {
        let s = session(&node).await;
        create(&s, "CREATE TABLE ks.cl (k int PRIMARY KEY, v text)").await;
        fill(&s, "cl", 0, 300, 100).await;
        rows(&s, "cl").await
    });
    ok(&node, &["flush", "ks", "cl"]);
    // Nothing to drop: every row stays.
    ok(&node, &["cleanup", "ks", "cl"]);
    let stats = ok(&node, &["tablestats", "ks.cl"]);
    assert_eq!(field(&stats, "Number of partitions (estimate)"), "300");

    // Shard 0's SSTable copied into shard 1: shard 1 now holds partitions it does not own.
    node.stop().expect("stop");
    let dirs = table_dirs(&node, "cl");
    assert_eq!(dirs.len(), 2);
    assert!(copy_sstables(&dirs[0], &dirs[1], 1000) > 0);
    let node = TestNode::start_in(&node.data_dir, 2, &[]).expect("restart");
    let stats = ok(&node, &["tablestats", "ks.cl"]);
    let doubled: u64 = field(&stats, "Number of partitions (estimate)")
        .parse()
        .expect("n");
    assert!(doubled > 300, "{stats}");

    ok(&node, &["cleanup", "ks"]);
    let stats = ok(&node, &["tablestats", "ks.cl"]);
    assert_eq!(field(&stats, "Number of partitions (estimate)"), "300");
    rt().block_on(async {
        let s = session(&node).await;
        assert_eq!(rows(&s, "cl").await, expected);
    });
}

#[test]
fn scrub_salvages_the_readable_partitions_of_a_corrupted_sstable() {
    let mut node = TestNode::start(1).expect("start node");
    let written = rt().block_on(async {
        let s = session(&node).await;
        create(
            &s,
            "CREATE TABLE ks.sc (k int PRIMARY KEY, v text) WITH compression = {'class': 'LZ4Compressor', 'chunk_length_in_kb': 1}",
        )
        .await;
        fill(&s, "sc", 0, 200, 300).await;
        rows(&s, "sc").await
    });
    ok(&node, &["flush", "ks", "sc"]);
    node.stop().expect("stop");
    let dir = table_dirs(&node, "sc").remove(0);
    let data = list(&dir, "-Data.db").remove(0);
    let mut b = std::fs::read(&data).expect("read");
    let mid = b.len() / 2;
    for x in &mut b[mid..mid + 16] {
        *x ^= 0x5a;
    }
    std::fs::write(&data, b).expect("write");
    let node = TestNode::start_in(&node.data_dir, 1, &[]).expect("restart");

    // Reading every key meets the bad chunk: the SSTable is taken out of service.
    rt().block_on(async {
        let s = session(&node).await;
        let sel = s
            .prepare("SELECT v FROM ks.sc WHERE k = ?")
            .await
            .expect("prepare");
        let mut failed = 0;
        for k in 0..200 {
            failed += usize::from(s.execute_unpaged(&sel, (k,)).await.is_err());
        }
        assert!(failed >= 1, "the corruption was not detected");
        assert!(rows(&s, "sc").await.len() < 200);
    });

    let out = ok(&node, &["scrub", "ks", "sc"]);
    let line = out
        .lines()
        .find(|l| l.starts_with("Scrubbed "))
        .unwrap_or_else(|| panic!("{out}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|x| x.parse().ok())
        .collect();
    let (kept, skipped) = (nums[1], nums[2]);
    assert!(skipped >= 1, "{out}");
    assert_eq!(kept + skipped, 200, "{out}");
    assert!(
        out.contains("1 out-of-service SSTables were rewritten"),
        "{out}"
    );
    // The node serves every salvaged partition, with the values written.
    rt().block_on(async {
        let s = session(&node).await;
        let got = rows(&s, "sc").await;
        assert_eq!(got.len() as u64, kept);
        assert!(got.iter().all(|r| written.contains(r)));
    });
    // The pre-scrub snapshot was taken.
    let snaps = ok(&node, &["listsnapshots"]);
    assert!(snaps.contains("pre-scrub-"), "{snaps}");
}

#[test]
fn refresh_loads_sstables_copied_from_another_node() {
    let table = "CREATE TABLE ks.rf (k int PRIMARY KEY, v text)";
    let mut other = TestNode::start(1).expect("start the other node");
    let written = rt().block_on(async {
        let s = session(&other).await;
        create(&s, table).await;
        fill(&s, "rf", 0, 150, 200).await;
        rows(&s, "rf").await
    });
    ok(&other, &["flush", "ks", "rf"]);
    other.stop().expect("stop");
    let from = table_dirs(&other, "rf").remove(0);

    let node = TestNode::start(2).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        create(&s, table).await;
        assert!(rows(&s, "rf").await.is_empty());
    });
    let upload = table_dirs(&node, "rf").remove(1).join("upload");
    assert!(copy_sstables(&from, &upload, 0) > 0);
    assert_eq!(ok(&node, &["refresh", "ks", "rf"]), "");
    rt().block_on(async {
        let s = session(&node).await;
        assert_eq!(rows(&s, "rf").await, written);
    });
    // Each partition went to the shard owning it, once.
    let stats = ok(&node, &["tablestats", "ks.rf"]);
    assert_eq!(field(&stats, "Number of partitions (estimate)"), "150");
    assert!(list(&upload, "-TOC.txt").is_empty(), "upload/ emptied");
    // Nothing left to load: a second refresh is a no-op.
    ok(&node, &["refresh", "ks", "rf"]);
    let stats = ok(&node, &["tablestats", "ks.rf"]);
    assert_eq!(field(&stats, "Number of partitions (estimate)"), "150");
}

#[test]
fn toppartitions_lists_the_hot_key() {
    let node = TestNode::start(2).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        create(&s, "CREATE TABLE ks.tp (k int PRIMARY KEY, v text)").await;
    });
    let api = node.api;
    let sampler = std::thread::spawn(move || {
        let node_args = ["toppartitions", "ks", "tp", "3000", "-k", "5"];
        let out = std::process::Command::new(amphora_testkit::amphora_bin().expect("bin"))
            .args(["nodetool", "-p", &api.port().to_string()])
            .args(node_args)
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    });
    std::thread::sleep(std::time::Duration::from_millis(700));
    // One sampling at a time: a second one is refused while the first runs.
    match amphora_nodetool::Client::new("127.0.0.1", node.api.port())
        .get("/column_family/toppartitions/ks:tp?duration=10")
    {
        Err(amphora_nodetool::NodetoolError::Server { status, message }) => {
            assert_eq!(status, 409, "{message}");
            assert!(message.contains("already running"), "{message}");
        }
        other => panic!("a second sampling: {other:?}"),
    }
    rt().block_on(async {
        let s = session(&node).await;
        let ins = s
            .prepare("INSERT INTO ks.tp (k, v) VALUES (?, 'x')")
            .await
            .expect("prepare");
        let sel = s
            .prepare("SELECT v FROM ks.tp WHERE k = ?")
            .await
            .expect("prepare");
        for _ in 0..20 {
            s.execute_unpaged(&ins, (42,)).await.expect("insert");
        }
        for k in 0..5 {
            s.execute_unpaged(&ins, (k,)).await.expect("insert");
        }
        for _ in 0..3 {
            s.execute_unpaged(&sel, (42,)).await.expect("select");
        }
    });
    let (code, out, err) = sampler.join().expect("join");
    assert_eq!(code, Some(0), "{out}{err}");
    // Cassandra 5.0's layout: reads, then writes.
    let (reads, writes) = out
        .split_once("\nFrequency of writes by partition:\n")
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        reads.starts_with(
            "Frequency of reads by partition:\n   Table Partition Count +/-\n   ks.tp 42        3     0\n"
        ),
        "{out}"
    );
    assert!(
        writes.starts_with("   Table Partition Count +/-\n   ks.tp 42        20    0\n"),
        "{out}"
    );
    let others: Vec<Vec<&str>> = writes
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(others.len(), 4, "-k 5: {out}");
    assert!(
        others
            .iter()
            .all(|r| r.len() == 4 && r[0] == "ks.tp" && r[2] == "1" && r[3] == "0"),
        "{out}"
    );
}

#[test]
fn tablehistograms_partition_size_and_cell_count() {
    let node = TestNode::start(2).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        create(
            &s,
            "CREATE TABLE ks.hi (k int, c int, v text, PRIMARY KEY (k, c))",
        )
        .await;
    });
    let (code, hist, err) = node
        .nodetool(&["tablehistograms", "ks", "hi"])
        .expect("run");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(
            "No SSTables exists, unable to calculate 'Partition Size' and 'Cell Count' percentiles"
        ),
        "{err}"
    );
    let p50 = hist.lines().find(|l| l.starts_with("50%")).expect("50%");
    assert!(
        p50.ends_with(&format!("{:>18}{:>18}", "NaN", "NaN")),
        "{hist}"
    );
    rt().block_on(async {
        let s = session(&node).await;
        let ins = s
            .prepare("INSERT INTO ks.hi (k, c, v) VALUES (?, ?, ?)")
            .await
            .expect("prepare");
        for k in 0..40 {
            for c in 0..20 {
                s.execute_unpaged(&ins, (k, c, noise((k * 100 + c) as u64, 100)))
                    .await
                    .expect("insert");
            }
        }
    });
    ok(&node, &["flush", "ks", "hi"]);
    let hist = ok(&node, &["cfhistograms", "ks", "hi"]);
    let col = |label: &str, i: usize| -> u64 {
        hist.lines()
            .find(|l| l.starts_with(label))
            .and_then(|l| l.split_whitespace().nth(i))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{label}: {hist}"))
    };
    // 20 rows of 100-byte values: 2000..4096 bytes serialized, in the [2048, 4096) bucket;
    // 20 cells in the [16, 32) bucket.
    for label in ["50%", "99%", "Max"] {
        assert_eq!(col(label, 4), 4095, "{label}: {hist}");
        assert_eq!(col(label, 5), 31, "{label}: {hist}");
    }
    assert_eq!(col("Min", 4), 2048, "{hist}");
    assert_eq!(col("Min", 5), 16, "{hist}");
}

#[test]
fn bad_maintenance_input_is_refused_clearly() {
    let node = TestNode::start(1).expect("start node");
    crate::write_rows(&node, 0, 5);
    for (args, code, needle) in [
        (&["garbagecollect", "nope"][..], 1, "unknown keyspace nope"),
        (
            &["cleanup", "ks", "nosuch"][..],
            1,
            "unknown table ks.nosuch",
        ),
        (&["scrub", "-ns", "nope"][..], 1, "unknown keyspace nope"),
        (&["refresh", "ks"][..], 1, "refresh requires ks and cf args"),
        (
            &["refresh", "ks", "nosuch"][..],
            1,
            "unknown table ks.nosuch",
        ),
        (&["refresh", "nope", "t"][..], 1, "unknown keyspace nope"),
        (
            &["toppartitions", "ks", "nosuch", "100"][..],
            1,
            "unknown table ks.nosuch",
        ),
        (
            &["toppartitions", "ks", "t", "soon"][..],
            1,
            "duration must be a number",
        ),
        (
            &["toppartitions", "ks", "t", "0"][..],
            1,
            "duration must be 1..=",
        ),
        (
            &["toppartitions", "ks", "t", "100", "-a", "SCANS"][..],
            1,
            "unknown sampler SCANS",
        ),
        (
            &["toppartitions", "ks", "t", "100", "-a", "WRITE_SIZE"][..],
            2,
            "not supported yet",
        ),
        (
            &["toppartitions", "ks", "t", "100", "-k", "300"][..],
            1,
            "must be smaller then the summary capacity",
        ),
        (
            &["garbagecollect", "-g", "PARTITION"][..],
            1,
            "granularity must be ROW or CELL",
        ),
        (&["cleanup", "--fast"][..], 1, "unknown option --fast"),
        (&["scrub", "-r"][..], 2, "not supported yet"),
    ] {
        let (c, out, err) = node.nodetool(args).expect("run");
        assert_eq!(c, code, "nodetool {args:?}: {out}{err}");
        assert!(err.contains(needle), "nodetool {args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `nodetool <args>` in this process (no process start: fast enough to poll).
fn nodetool_here(node: &TestNode, args: &[&str]) -> (i32, String) {
    let mut all = vec!["-p".to_string(), node.api.port().to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = amphora_nodetool::run(&all, &mut out, &mut err);
    (
        code,
        String::from_utf8_lossy(&out).to_string() + &String::from_utf8_lossy(&err),
    )
}

#[test]
fn a_running_scrub_shows_in_compactionstats_and_can_be_waited_on() {
    let node = TestNode::start(1).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        create(&s, "CREATE TABLE ks.big (k int PRIMARY KEY, v text)").await;
        fill(&s, "big", 0, 400, 40_000).await;
    });
    ok(&node, &["flush", "ks", "big"]);
    let started = ok(&node, &["scrub", "-ns", "--background", "ks", "big"]);
    let id = started
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("Started scrub task "))
        .unwrap_or_else(|| panic!("{started}"))
        .to_string();
    let mut seen = None;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let (code, cs) = nodetool_here(&node, &["compactionstats"]);
        assert_eq!(code, 0, "{cs}");
        if let Some(line) = cs.lines().find(|l| l.starts_with(&id)) {
            seen = Some(line.to_string());
            break;
        }
        let task = amphora_nodetool::Client::new("127.0.0.1", node.api.port())
            .get(&format!("/task_manager/task_status/{id}"))
            .expect("task status");
        if task["state"] != "running" {
            break;
        }
    }
    let line = seen.expect("the scrub ended before compactionstats listed it");
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&cols[1..4], ["Scrub", "ks", "big"], "{line}");
    assert_eq!(cols.last().map(|p| p.ends_with('%')), Some(true), "{line}");
    // Waiting on the task gives its outcome.
    let done = amphora_nodetool::Client::new("127.0.0.1", node.api.port())
        .get(&format!("/task_manager/wait_task/{id}?timeout=60"))
        .expect("wait");
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["kind"], "scrub", "{done}");
    assert_eq!(done["result"]["partitions_kept"], 400, "{done}");
    assert_eq!(done["progress_completed"], done["progress_total"], "{done}");
}
