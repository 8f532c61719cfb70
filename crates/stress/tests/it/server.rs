//! Runs cassandra-stress command lines through `amphora_stress::run` against a fresh node.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::value::{CqlValue, Row};

struct Node {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn amphora_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("AMPHORA_BIN") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/amphora")
}

fn start_node() -> Node {
    start_node_in("main")
}

fn start_node_in(name: &str) -> Node {
    let bin = amphora_bin();
    assert!(
        bin.exists(),
        "{} not found: run `cargo build -p amphora` first or set AMPHORA_BIN",
        bin.display()
    );
    let dir = std::env::temp_dir().join(format!("amphora-stress-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let port = free_port();
    let mut child = Command::new(&bin)
        .args(["server", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen-address", "127.0.0.1"])
        .args(["--native-transport-port", &port.to_string()])
        .args([
            "--native-shard-aware-transport-port",
            &free_port().to_string(),
        ])
        .args(["--api-port", &free_port().to_string()])
        .args(["--prometheus-port", &free_port().to_string()])
        .args(["--smp", "2", "--memory", "1G", "--no-pin"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("server.err")).expect("server.err"))
        .spawn()
        .expect("spawn amphora server");
    let stdout = child.stdout.take().expect("stdout");
    // Drain stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            eprintln!("[server] {line}");
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not open port {port}");
        if let Ok(Some(status)) = child.try_wait() {
            let err = std::fs::read_to_string(dir.join("server.err")).unwrap_or_default();
            panic!("server exited: {status}\n{err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Node { child, port, dir }
}

/// Runs a stress command line (shell-split) with our node, JSON output, and returns the JSON.
fn stress(node: &Node, line: &str) -> serde_json::Value {
    let json = node.dir.join(format!(
        "run-{}.json",
        line.len() ^ line.as_bytes()[0] as usize
    ));
    let mut args = amphora_stress::settings::shell_words(line);
    args.extend(
        [
            "-node",
            "127.0.0.1",
            "-port",
            &format!("native={}", node.port),
        ]
        .map(String::from),
    );
    // One -log group: merge json= into it if the line already has -log.
    if let Some(i) = args.iter().position(|a| a == "-log") {
        args.insert(i + 1, format!("json={}", json.display()));
    } else {
        args.extend(["-log".to_string(), format!("json={}", json.display())]);
    }
    eprintln!("stress {}", args.join(" "));
    if let Err(e) = amphora_stress::run(args) {
        panic!("stress {line}: {e:#}");
    }
    let text = std::fs::read_to_string(&json).expect("JSON result");
    serde_json::from_str(&text).expect("valid JSON")
}

/// Runs a stress command line that must fail an operation; the failure's reason.
fn failure(node: &Node, line: &str) -> String {
    let mut args = amphora_stress::settings::shell_words(line);
    args.extend(["-node".into(), "127.0.0.1".into()]);
    args.extend(["-port".into(), format!("native={}", node.port)]);
    match amphora_stress::run(args) {
        Ok(()) => panic!("{line}: no operation failed"),
        Err(e) => match e.downcast_ref::<amphora_stress::StressError>() {
            Some(amphora_stress::StressError::OperationFailed { reason, .. }) => reason.clone(),
            _ => panic!("{line}: {e:#}"),
        },
    }
}

fn ops(v: &serde_json::Value) -> u64 {
    v["total"]["ops"].as_u64().unwrap_or(0)
}

fn errors(v: &serde_json::Value) -> u64 {
    v["total"]["errors"].as_u64().unwrap_or(u64::MAX)
}

fn rows(v: &serde_json::Value) -> u64 {
    v["total"]["rows"].as_u64().unwrap_or(0)
}

async fn session(port: u16) -> Session {
    SessionBuilder::new()
        .known_node(format!("127.0.0.1:{port}"))
        .build()
        .await
        .expect("driver session")
}

fn query_rows(port: u16, cql: &str, values: Vec<CqlValue>) -> Vec<Row> {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let s = session(port).await;
        // One node: read at ONE (the IoT keyspace has RF=3, so the driver's default
        // LOCAL_QUORUM is Unavailable, as it would be on a one-node Cassandra).
        let mut stmt = scylla::statement::unprepared::Statement::new(cql);
        stmt.set_consistency(scylla::statement::Consistency::One);
        let res = s.query_unpaged(stmt, values).await.expect(cql);
        res.into_rows_result()
            .expect("rows")
            .rows::<Row>()
            .expect("typed rows")
            .collect::<Result<Vec<_>, _>>()
            .expect("rows decode")
    })
}

/// The whole cassandra-stress flow on one node: the tests share it to save start-up time.
#[test]
fn cassandra_stress_workloads_against_amphora() {
    let node = start_node();
    let out = node.dir.clone();

    // write n=2000, with every result file.
    let w = stress(
        &node,
        &format!(
            "write n=2000 no-warmup -rate threads=20 -log file={0}/w.log hdrfile={0}/w.hdr -graph file={0}/w.html title=write",
            out.display()
        ),
    );
    assert_eq!(ops(&w), 2000, "{w}");
    assert_eq!(errors(&w), 0, "{w}");
    let log = std::fs::read_to_string(out.join("w.log")).expect("log file");
    assert!(log.contains("Op rate"), "{log}");
    // One node: the requests went over the pipelined connection, not the driver.
    assert!(log.contains("Requests: one pipelined connection"), "{log}");
    assert!(log.contains("total,"), "{log}");
    assert!(
        std::fs::metadata(out.join("w.hdr"))
            .map(|m| m.len() > 0)
            .unwrap_or(false)
    );
    let html = std::fs::read_to_string(out.join("w.html")).expect("graph");
    assert!(html.contains("<svg"));

    // The data landed: key of seed 1 as cassandra-stress formats it, five 34-byte cells.
    let key = amphora_stress::generate::hex_key(1, 10);
    let r = query_rows(
        node.port,
        "SELECT * FROM keyspace1.standard1 WHERE key = ?",
        vec![CqlValue::Blob(key)],
    );
    assert_eq!(r.len(), 1);
    let blobs = r[0]
        .columns
        .iter()
        .filter(|c| matches!(c, Some(CqlValue::Blob(b)) if b.len() == 34))
        .count();
    assert_eq!(blobs, 5, "{:?}", r[0]);

    // read n=2000 over what was written (with warm-up): every read finds and validates its row.
    let r = stress(&node, "read n=2000 -pop seq=1..2000 -rate threads=20");
    assert_eq!(ops(&r), 2000, "{r}");
    assert_eq!(errors(&r), 0, "{r}");
    assert_eq!(rows(&r), 2000, "{r}");

    // The same through the driver session (-mode driver) instead of the pipelined connection.
    let r = stress(
        &node,
        "read n=500 no-warmup -pop seq=1..500 -rate threads=20 -mode driver",
    );
    assert_eq!((ops(&r), errors(&r), rows(&r)), (500, 0, 500), "{r}");
    let w = stress(
        &node,
        "write n=500 no-warmup -pop seq=2001..2500 -rate threads=20 -mode driver",
    );
    assert_eq!((ops(&w), errors(&w)), (500, 0), "{w}");

    // Reads validate what they get on both paths: cells of another size do not pass.
    for mode in ["", "-mode driver"] {
        let line = format!(
            "read n=20 no-warmup -pop seq=1..20 -col size=FIXED(20) -rate threads=2 -errors retries=0 {mode}"
        );
        let reason = failure(&node, &line);
        assert!(reason.contains("not validated"), "{line}: {reason}");
    }
    // A server error reaches the run as the error, on the pipelined path too: the keyspace
    // has one replica, so TWO is unavailable.
    let reason = failure(
        &node,
        "write n=20 no-warmup cl=TWO -rate threads=2 -errors retries=0",
    );
    assert!(reason.contains("0x1000"), "{reason}");

    // mixed, gaussian over the written range.
    let m = stress(
        &node,
        "mixed ratio(write=1,read=1) duration=2s no-warmup cl=ONE -pop dist=GAUSSIAN(1..2000,1000,300) -rate threads=16",
    );
    assert!(ops(&m) > 100, "{m}");
    assert_eq!(errors(&m), 0, "{m}");
    let names: Vec<&str> = m["ops"]
        .as_array()
        .map(|a| a.iter().filter_map(|o| o["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, vec!["WRITE", "READ"]);

    // Fixed rate: the schedule holds (200/s for 2 s).
    let f = stress(
        &node,
        "write duration=2s no-warmup -pop dist=UNIFORM(1..2000) -rate threads=50 fixed=200/s",
    );
    // 400 scheduled; a slow shared machine may leave the last few unstarted at the deadline.
    assert!((360..=401).contains(&ops(&f)), "{f}");
    assert_eq!(errors(&f), 0, "{f}");
    // Coalesced sends: a request due within 5 ms of the last send waits for that interval
    // to pass and then leaves with the others due meanwhile; none is left behind.
    let f = stress(
        &node,
        &format!(
            "read duration=2s no-warmup -pop dist=UNIFORM(1..2000) -rate threads=50 fixed=1000/s -mode coalesce=5ms -log file={}/c.log",
            out.display()
        ),
    );
    assert!((1800..=2001).contains(&ops(&f)), "{f}");
    assert_eq!((errors(&f), rows(&f)), (0, ops(&f)), "{f}");
    // Requests come every 1 ms, so they wait 4, 3, 2, 1 and 0 ms for the send: the median
    // latency (from the intended start) is at least 2 ms; sent at once it was 0.4 ms here.
    let p50 = f["total"]["latency_ms"]["p50"].as_f64().unwrap_or(0.0);
    assert!(p50 >= 1.5, "median {p50} ms: sends were not held: {f}");
    let log = std::fs::read_to_string(out.join("c.log")).expect("log file");
    assert!(log.contains("sends at most every 5000 µs"), "{log}");

    // counter_write, then counter_read of the same seeds.
    let c = stress(&node, "counter_write n=1000 no-warmup -rate threads=10");
    assert_eq!(ops(&c), 1000, "{c}");
    assert_eq!(errors(&c), 0, "{c}");
    let key = amphora_stress::generate::hex_key(7, 10);
    let r = query_rows(
        node.port,
        "SELECT * FROM keyspace1.counter1 WHERE key = ?",
        vec![CqlValue::Blob(key)],
    );
    assert_eq!(r.len(), 1);
    assert!(
        r[0].columns
            .iter()
            .any(|c| matches!(c, Some(CqlValue::Counter(v)) if v.0 >= 1)),
        "{:?}",
        r[0]
    );
    let cr = stress(
        &node,
        "counter_read n=500 no-warmup -pop dist=uniform(1..1000) -rate threads=10",
    );
    assert_eq!(errors(&cr), 0, "{cr}");
    assert_eq!(rows(&cr), 500, "{cr}");

    // The IoT user profile from the DSE 6 benchmark, as printed, with the seed's options.
    let profile = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/iot-stress.yaml");
    let u = stress(
        &node,
        &format!(
            r"user profile={} ops\(\insert=1\) duration=3s cl=ONE no-warmup -mode native cql3 protocolVersion=3 -errors ignore -rate threads=16 -pop seq=1..1000 contents=SORTED -insert visits=fixed\(\100\)",
            profile.display()
        ),
    );
    assert!(ops(&u) > 100, "{u}");
    assert_eq!(errors(&u), 0, "{u}");
    let r = query_rows(
        node.port,
        "SELECT machine_id, sensor_value, time FROM iot_space.iot_table LIMIT 1",
        vec![],
    );
    assert_eq!(r.len(), 1, "no IoT row landed");
    // 90% writes / 10% reads, the seed's mix, with the LIMIT 10 query.
    let u = stress(
        &node,
        &format!(
            r"user profile={} ops\(insert=9,query_by_machine_id=1\) duration=2s cl=ONE no-warmup -mode native cql3 protocolVersion=3 -errors ignore -rate threads=16 -pop seq=1..1000 contents=SORTED -insert visits=fixed\(100\)",
            profile.display()
        ),
    );
    assert!(ops(&u) > 50, "{u}");
    assert_eq!(errors(&u), 0, "{u}");
    let q = u["ops"]
        .as_array()
        .and_then(|a| a.iter().find(|o| o["name"] == "query_by_machine_id"))
        .cloned()
        .unwrap_or_default();
    assert!(q["ops"].as_u64().unwrap_or(0) > 0, "{u}");
}

/// Bad command lines fail with a usage error, before connecting anywhere.
#[test]
fn usage_errors() {
    for line in [
        "frobnicate n=1",
        "write n=1 -rate threads=0",
        "write n=abc",
        "write n=1 -bogus",
    ] {
        let args = amphora_stress::settings::shell_words(line);
        let e = amphora_stress::run(args).expect_err(line);
        assert!(
            matches!(
                e.downcast_ref::<amphora_stress::StressError>(),
                Some(amphora_stress::StressError::Usage(_))
            ),
            "{line}: {e}"
        );
    }
}

/// A server that is not there: the run fails with a clear connection error.
#[test]
fn no_server() {
    let port = free_port();
    let args = amphora_stress::settings::shell_words(&format!(
        "write n=10 no-warmup -node 127.0.0.1 -port native={port}"
    ));
    let e = amphora_stress::run(args).expect_err("no server");
    assert!(
        matches!(
            e.downcast_ref::<amphora_stress::StressError>(),
            Some(amphora_stress::StressError::Connect { .. })
        ),
        "{e}"
    );
}

/// The server goes away mid-run: with `-errors ignore` failures are counted and the run
/// finishes; without it the run stops with a clear error.
#[test]
fn server_going_away() {
    let run_against = |node: &Node, extra: &str| {
        let json = node.dir.join("gone.json");
        let args = amphora_stress::settings::shell_words(&format!(
            "write duration=4s no-warmup -rate threads=8 -node 127.0.0.1 -port native={} {extra} -log json={}",
            node.port,
            json.display()
        ));
        let handle = std::thread::spawn(move || amphora_stress::run(args));
        (handle, json)
    };

    let mut node = start_node_in("gone-ignore");
    let (handle, json) = run_against(&node, "-errors ignore");
    std::thread::sleep(Duration::from_millis(1500));
    let _ = node.child.kill();
    let _ = node.child.wait();
    let res = handle.join().expect("stress thread");
    assert!(res.is_ok(), "{res:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("valid");
    assert!(ops(&v) > 0, "{v}");
    assert!(errors(&v) > 0, "{v}");
    assert!(v["aborted"].is_null(), "{v}");

    let mut node = start_node_in("gone-stop");
    let (handle, json) = run_against(&node, "");
    std::thread::sleep(Duration::from_millis(1500));
    let _ = node.child.kill();
    let _ = node.child.wait();
    let res = handle.join().expect("stress thread");
    let e = res.expect_err("the run stops");
    assert!(
        matches!(
            e.downcast_ref::<amphora_stress::StressError>(),
            Some(amphora_stress::StressError::OperationFailed { .. })
        ),
        "{e}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("valid");
    assert!(v["aborted"].is_string(), "{v}");
}
