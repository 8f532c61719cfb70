//! `amphora nodetool` against a real node (the `amphora` binary, started by the testkit),
//! with data written through the Rust `scylla` driver. Needs `cargo build -p amphora`.

mod dashboard;
mod maintenance;
mod rest;

use std::path::{Path, PathBuf};

use amphora_testkit::TestNode;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn session(node: &TestNode) -> Session {
    SessionBuilder::new()
        .known_node(node.native.to_string())
        .build()
        .await
        .expect("connect")
}

/// Creates `ks.t` and writes rows `from..to`.
fn write_rows(node: &TestNode, from: i32, to: i32) {
    rt().block_on(async {
        let s = session(node).await;
        s.query_unpaged(
            "CREATE KEYSPACE IF NOT EXISTS ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            &[],
        )
        .await
        .expect("create keyspace");
        s.query_unpaged(
            "CREATE TABLE IF NOT EXISTS ks.t (k int PRIMARY KEY, v text)",
            &[],
        )
        .await
        .expect("create table");
        let ins = s
            .prepare("INSERT INTO ks.t (k, v) VALUES (?, ?)")
            .await
            .expect("prepare");
        for k in from..to {
            s.execute_unpaged(&ins, (k, format!("value-{k}")))
                .await
                .expect("insert");
        }
        let sel = s
            .prepare("SELECT v FROM ks.t WHERE k = ?")
            .await
            .expect("prepare");
        for k in from..to.min(from + 10) {
            s.execute_unpaged(&sel, (k,)).await.expect("select");
        }
    });
}

/// `nodetool <args>` that must succeed; returns stdout.
fn ok(node: &TestNode, args: &[&str]) -> String {
    let (code, out, err) = node.nodetool(args).expect("run nodetool");
    assert_eq!(code, 0, "nodetool {args:?} failed: {err}\n{out}");
    out
}

/// Data files of `ks.t` per shard directory.
fn data_files(node: &TestNode) -> Vec<(String, Vec<PathBuf>)> {
    let root = node.data_dir.join("data");
    let mut out = Vec::new();
    for shard in 0..node.smp {
        let ks = root.join(format!("shard-{shard}")).join("ks");
        let mut files = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&ks) {
            for table in rd.flatten() {
                if !table.file_name().to_string_lossy().starts_with("t-") {
                    continue;
                }
                files.extend(list(&table.path(), "-Data.db"));
            }
        }
        out.push((format!("shard-{shard}"), files));
    }
    out
}

fn list(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(suffix))
                .collect()
        })
        .unwrap_or_default()
}

/// The number after `label: ` on the first line that has it.
fn field(out: &str, label: &str) -> String {
    out.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(label)
                .map(|v| v.trim_start().trim_start_matches(':').trim())
        })
        .unwrap_or_else(|| panic!("no '{label}' in:\n{out}"))
        .to_string()
}

#[test]
fn status_info_ring_and_version() {
    let node = TestNode::start(2).expect("start node");
    let identity =
        std::fs::read_to_string(node.data_dir.join("data/node.json")).expect("node.json");
    let info = ok(&node, &["info"]);
    let host_id = field(&info, "ID");
    assert!(
        identity.contains(&host_id),
        "info ID {host_id} not in node.json: {identity}"
    );
    assert_eq!(field(&info, "Native Transport active"), "true");
    assert_eq!(field(&info, "Shards"), "2");
    assert_eq!(field(&info, "Mode"), "NORMAL");

    let status = ok(&node, &["status"]);
    let line = status
        .lines()
        .find(|l| l.starts_with("UN"))
        .unwrap_or_else(|| panic!("no UN line:\n{status}"));
    assert!(
        line.contains("127.0.0.1") && line.contains(&host_id),
        "{line}"
    );
    assert!(status.starts_with("Datacenter: datacenter1\n=======================\n"));

    let ring = ok(&node, &["ring"]);
    assert_eq!(
        ring.lines().filter(|l| l.starts_with("127.0.0.1")).count(),
        16
    );

    assert_eq!(ok(&node, &["version"]), "ReleaseVersion: 5.0.6\n");
    let dc = ok(&node, &["describecluster"]);
    assert!(
        dc.contains("Murmur3Partitioner") && dc.contains("#Nodes: 1"),
        "{dc}"
    );
}

#[test]
fn flush_tablestats_compact_and_history() {
    let node = TestNode::start(2).expect("start node");
    write_rows(&node, 0, 200);

    let stats = ok(&node, &["tablestats", "ks.t"]);
    assert!(stats.contains("\t\tTable: t\n"), "{stats}");
    assert_eq!(field(&stats, "Local write count"), "200");
    assert_eq!(field(&stats, "Local read count"), "10");
    assert_eq!(field(&stats, "SSTable count"), "0");
    assert!(data_files(&node).iter().all(|(_, f)| f.is_empty()));

    ok(&node, &["flush", "ks", "t"]);
    let first: usize = data_files(&node).iter().map(|(_, f)| f.len()).sum();
    assert_eq!(
        first,
        2,
        "one SSTable per shard after flush: {:?}",
        data_files(&node)
    );
    let stats = ok(&node, &["tablestats", "ks"]);
    assert_eq!(field(&stats, "SSTable count"), "2");
    assert_ne!(field(&stats, "Space used (live)"), "0");

    write_rows(&node, 200, 400);
    ok(&node, &["flush"]);
    let stats = ok(&node, &["tablestats", "ks.t"]);
    let before: u64 = field(&stats, "SSTable count").parse().expect("count");
    assert!(before > 2, "more SSTables after the second flush: {stats}");

    let hist = ok(&node, &["tablehistograms", "ks", "t"]);
    let max = hist
        .lines()
        .find(|l| l.starts_with("Max"))
        .expect("Max row");
    let write_max: f64 = max
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .expect("number");
    assert!(write_max > 0.0, "{hist}");

    ok(&node, &["compact", "ks", "t"]);
    // The answer comes once the output serves reads; the inputs are deleted after it (as
    // Cassandra deletes obsolete SSTables after a compaction commits).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let shards = data_files(&node);
        if shards.iter().all(|(_, files)| files.len() == 1) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "one Data.db per shard after compact: {shards:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The server logs each compaction, with where its time went.
    let log = std::fs::read_to_string(node.data_dir.join("server.log")).expect("server log");
    assert!(
        log.lines()
            .any(|l| l.contains("SSTable(s) of ks.t into 1 (major)")
                && l.contains(" ms (")
                && l.contains("syncs ")),
        "no major compaction line in the log:\n{log}"
    );
    let stats = ok(&node, &["tablestats", "ks.t"]);
    assert_eq!(field(&stats, "SSTable count"), "2");
    assert_eq!(field(&stats, "Local write count"), "400");
    let history = ok(&node, &["compactionhistory"]);
    assert!(
        history
            .lines()
            .filter(|l| l.contains(" ks ") && l.contains(" t "))
            .count()
            >= 2,
        "{history}"
    );
    let cs = ok(&node, &["compactionstats", "-H"]);
    assert!(cs.starts_with("pending tasks: "), "{cs}");

    // Every row survived flushes and compaction.
    rt().block_on(async {
        let s = session(&node).await;
        let r = s
            .query_unpaged("SELECT count(*) FROM ks.t", &[])
            .await
            .expect("count")
            .into_rows_result()
            .expect("rows");
        let (n,): (i64,) = r.single_row().expect("one row");
        assert_eq!(n, 400);
    });
}

#[test]
fn snapshots_are_hard_links_and_can_be_cleared() {
    let node = TestNode::start(2).expect("start node");
    write_rows(&node, 0, 100);
    let out = ok(&node, &["snapshot", "-t", "before", "ks"]);
    assert!(out.contains("snapshot name [before]"), "{out}");
    let mut linked = 0;
    for (_, files) in data_files(&node) {
        for f in files {
            let name = f.file_name().expect("name").to_owned();
            let snap = f.parent().expect("dir").join("snapshots/before").join(name);
            assert!(snap.exists(), "{} not in the snapshot", f.display());
            use std::os::unix::fs::MetadataExt;
            assert_eq!(
                std::fs::metadata(&snap).expect("meta").ino(),
                std::fs::metadata(&f).expect("meta").ino()
            );
            linked += 1;
        }
    }
    assert_eq!(
        linked, 2,
        "the snapshot flushed each shard's memtable first"
    );
    let (code, _, err) = node
        .nodetool(&["snapshot", "-t", "before", "ks"])
        .expect("run");
    assert_eq!(code, 1);
    assert!(err.contains("already exists"), "{err}");

    let stats = ok(&node, &["tablestats", "ks.t"]);
    assert_ne!(
        field(&stats, "Space used by snapshots (total)"),
        "0",
        "{stats}"
    );
    let l = ok(&node, &["listsnapshots"]);
    assert!(
        l.lines()
            .any(|x| x.starts_with("before") && x.contains(" ks ") && x.contains(" t ")),
        "{l}"
    );
    ok(&node, &["clearsnapshot", "-t", "before"]);
    assert!(ok(&node, &["listsnapshots"]).contains("There are no snapshots"));
}

#[test]
fn bad_input_binary_and_drain() {
    let node = TestNode::start(1).expect("start node");
    write_rows(&node, 0, 10);
    for (args, code, needle) in [
        (&["tablestats", "nope"][..], 1, "Unknown keyspace"),
        (&["flush", "nope"][..], 1, "unknown keyspace nope"),
        (&["frobnicate"][..], 1, "Found unexpected parameters"),
        (&["gettimeout", "read"][..], 2, "not supported yet"),
        (&["compact", "--split-output"][..], 2, "not supported yet"),
        (&["repair"][..], 2, "not supported yet"),
        (
            &["getendpoints", "ks", "t", "notanint"][..],
            1,
            "not a valid",
        ),
    ] {
        let (c, out, err) = node.nodetool(args).expect("run");
        assert_eq!(c, code, "nodetool {args:?}: {out}{err}");
        assert!(err.contains(needle), "nodetool {args:?}: {err}");
    }
    assert_eq!(ok(&node, &["getendpoints", "ks", "t", "5"]), "127.0.0.1\n");

    ok(&node, &["disablebinary"]);
    assert_eq!(ok(&node, &["statusbinary"]), "not running\n");
    assert!(std::net::TcpStream::connect(node.native).is_err());
    ok(&node, &["enablebinary"]);
    assert_eq!(ok(&node, &["statusbinary"]), "running\n");
    write_rows(&node, 10, 20);

    ok(&node, &["drain"]);
    let info = ok(&node, &["info"]);
    assert_eq!(field(&info, "Mode"), "DRAINED");
    assert_eq!(field(&info, "Native Transport active"), "false");
    assert!(
        data_files(&node).iter().all(|(_, f)| f.len() == 1),
        "drain flushed"
    );
}

#[test]
fn stopdaemon_stops_the_process_cleanly() {
    let mut node = TestNode::start(1).expect("start node");
    write_rows(&node, 0, 10);
    ok(&node, &["stopdaemon"]);
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(node.api).is_ok() {
        assert!(
            start.elapsed().as_secs() < 20,
            "API still up after stopdaemon"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    node.stop().expect("process exited");
    // It stopped cleanly: a restart on the same data directory serves every row.
    let again = TestNode::start_in(&node.data_dir, 1, &[]).expect("restart");
    rt().block_on(async {
        let s = session(&again).await;
        let r = s
            .query_unpaged("SELECT count(*) FROM ks.t", &[])
            .await
            .expect("count")
            .into_rows_result()
            .expect("rows");
        let (n,): (i64,) = r.single_row().expect("one row");
        assert_eq!(n, 10);
    });
}

/// The restore procedure of docs/dev/rest-api.md: snapshot, lose the data (TRUNCATE), stop,
/// copy the snapshot's files back into the table directories, start.
#[test]
fn restore_from_a_snapshot() {
    let mut node = TestNode::start(2).expect("start node");
    write_rows(&node, 0, 100);
    ok(&node, &["snapshot", "-t", "backup", "ks"]);
    rt().block_on(async {
        let s = session(&node).await;
        s.query_unpaged("TRUNCATE ks.t", &[])
            .await
            .expect("truncate");
    });
    node.stop().expect("stop");
    let mut copied = 0;
    for shard in 0..node.smp {
        let ks = node.data_dir.join(format!("data/shard-{shard}/ks"));
        for table in std::fs::read_dir(&ks).expect("ks dir").flatten() {
            let snap = table.path().join("snapshots/backup");
            for f in std::fs::read_dir(&snap).expect("snapshot dir").flatten() {
                let name = f.file_name();
                if name.to_string_lossy().starts_with("am1-") {
                    std::fs::copy(f.path(), table.path().join(&name)).expect("copy back");
                    copied += 1;
                }
            }
        }
    }
    assert!(copied > 0);
    let again = TestNode::start_in(&node.data_dir, 2, &[]).expect("restart");
    rt().block_on(async {
        let s = session(&again).await;
        let r = s
            .query_unpaged("SELECT count(*) FROM ks.t", &[])
            .await
            .expect("count")
            .into_rows_result()
            .expect("rows");
        let (n,): (i64,) = r.single_row().expect("one row");
        assert_eq!(n, 100, "every row is back");
    });
}

/// Runtime log levels work once the binary starts logging through
/// `amphora_server::logging::init`; until then both commands say "not supported yet".
#[test]
fn logging_levels() {
    let node = TestNode::start(1).expect("start node");
    let (code, out, err) = node.nodetool(&["getlogginglevels"]).expect("run");
    if code == 2 {
        assert!(err.contains("not supported yet"), "{err}");
        let (code, _, err) = node
            .nodetool(&["setlogginglevel", "amphora_storage", "debug"])
            .expect("run");
        assert_eq!(code, 2, "{err}");
        return;
    }
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Logger Name") && out.contains("ROOT"), "{out}");
    ok(&node, &["setlogginglevel", "amphora_storage", "DEBUG"]);
    let out = ok(&node, &["getlogginglevels"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("amphora_storage") && l.ends_with("DEBUG")),
        "{out}"
    );
    let (code, _, err) = node
        .nodetool(&["setlogginglevel", "amphora_storage", "loud"])
        .expect("run");
    assert_eq!(code, 1, "{err}");
    ok(&node, &["setlogginglevel"]);
    assert!(!ok(&node, &["getlogginglevels"]).contains("amphora_storage"));
}

#[test]
fn trace_probability_and_slow_query_log() {
    let node = TestNode::start(1).expect("start node");
    let out = ok(&node, &["gettraceprobability"]);
    assert_eq!(out.trim(), "Current trace probability: 0");
    ok(&node, &["settraceprobability", "0.25"]);
    let out = ok(&node, &["gettraceprobability"]);
    assert_eq!(out.trim(), "Current trace probability: 0.25");
    for bad in ["1.5", "-1", "often"] {
        let (code, _, err) = node.nodetool(&["settraceprobability", bad]).expect("run");
        assert_ne!(code, 0, "settraceprobability {bad} was accepted: {err}");
    }
    let out = ok(&node, &["gettraceprobability"]);
    assert_eq!(out.trim(), "Current trace probability: 0.25");

    // Probability 1 traces every request into system_traces; 0 stops it.
    write_rows(&node, 0, 1);
    rt().block_on(async {
        let s = session(&node).await;
        ok(&node, &["settraceprobability", "1"]);
        let before = trace_sessions(&s).await;
        for k in 0..10 {
            s.query_unpaged(format!("SELECT v FROM ks.t WHERE k = {k}"), &[])
                .await
                .expect("select");
        }
        let traced = trace_sessions(&s).await;
        assert!(traced >= before + 10, "{before} -> {traced} sessions");
        let events = s
            .query_unpaged("SELECT activity FROM system_traces.events", &[])
            .await
            .expect("select events")
            .into_rows_result()
            .expect("rows");
        let activities: Vec<String> = events
            .rows::<(String,)>()
            .expect("typed")
            .map(|r| r.expect("row").0)
            .collect();
        assert!(
            activities
                .iter()
                .any(|a| a.starts_with("Parsing SELECT v FROM ks.t")),
            "{activities:?}"
        );
        assert!(activities.iter().any(|a| a == "Request complete"));
        ok(&node, &["settraceprobability", "0"]);
        let quiet = trace_sessions(&s).await;
        for k in 0..10 {
            s.query_unpaged(format!("SELECT v FROM ks.t WHERE k = {k}"), &[])
                .await
                .expect("select");
        }
        // Only the counting query itself (traced before the change took effect) may add one.
        assert!(trace_sessions(&s).await <= quiet + 1);
    });

    let c = amphora_nodetool::Client::new("127.0.0.1", node.api.port());
    let v = c
        .get("/storage_service/slow_query")
        .expect("get slow_query");
    assert_eq!(v["threshold"].as_u64(), Some(500_000), "{v}");
    let v = c
        .post("/storage_service/slow_query?threshold=1000")
        .expect("set slow_query");
    assert_eq!(v["threshold"].as_u64(), Some(1000), "{v}");
    let v = c
        .post("/storage_service/slow_query?enable=false")
        .expect("disable slow_query");
    assert_eq!(v["enable"].as_bool(), Some(false), "{v}");
    assert!(
        c.post("/storage_service/trace_probability?probability=2")
            .is_err()
    );
}

/// Rows of `system_traces.sessions`.
async fn trace_sessions(s: &Session) -> usize {
    s.query_unpaged(
        "SELECT session_id, duration FROM system_traces.sessions",
        &[],
    )
    .await
    .expect("select sessions")
    .into_rows_result()
    .expect("rows")
    .rows_num()
}
