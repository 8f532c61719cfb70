//! The Rust `scylla` driver (shard-aware, protocol v4) against a real `amphora` node.

use std::collections::HashSet;

use amphora_testkit::TestNode;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::response::{PagingState, PagingStateResponse};
use scylla::statement::batch::Batch;
use scylla::value::{CqlDuration, CqlValue, Row};

async fn session(node: &TestNode) -> Session {
    SessionBuilder::new()
        .known_node(node.native.to_string())
        .build()
        .await
        .expect("connect")
}

/// A fresh data directory for a test's node (`amphora-testkit-TAG-PID` under the temp dir).
fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("amphora-testkit-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn scylla_driver_end_to_end() {
    let node = TestNode::start(2).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;

        // Discovery: one node with the sharding info and a token ring.
        let state = s.get_cluster_state();
        let nodes = state.get_nodes_info();
        assert_eq!(nodes.len(), 1);
        let sharder = nodes[0].sharder().expect("shard-aware node");
        assert_eq!(sharder.nr_shards.get(), 2);

        s.query_unpaged("CREATE KEYSPACE rs WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}", &[])
            .await
            .expect("create keyspace");
        s.query_unpaged("CREATE TYPE rs.addr (street text, no int)", &[]).await.expect("create type");
        s.query_unpaged(
            "CREATE TABLE rs.all_types (k int PRIMARY KEY, a ascii, b bigint, bl blob, bo boolean, d date, de decimal, \
             do double, du duration, f float, i inet, sm smallint, t text, ti time, ts timestamp, tu timeuuid, \
             tiny tinyint, u uuid, vi varint, li list<int>, se set<text>, ma map<text, int>, fl frozen<list<int>>, \
             tup tuple<int, text>, ad frozen<addr>)",
            &[],
        )
        .await
        .expect("create table");
        s.await_schema_agreement().await.expect("schema agreement");
        s.refresh_metadata().await.expect("metadata");
        let state = s.get_cluster_state();
        let ks = state.get_keyspace("rs").expect("keyspace metadata");
        assert!(ks.tables.contains_key("all_types"), "table metadata after DDL");

        // Every type round-trips through a prepared INSERT and SELECT.
        let ins = s
            .prepare("INSERT INTO rs.all_types (k, a, b, bl, bo, d, de, do, du, f, i, sm, t, ti, ts, tu, tiny, u, vi, li, se, ma, fl, tup, ad) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
            .await
            .expect("prepare insert");
        let values: Vec<CqlValue> = vec![
            CqlValue::Int(1),
            CqlValue::Ascii("ascii".into()),
            CqlValue::BigInt(-5_000_000_000),
            CqlValue::Blob(vec![0, 1, 2, 255]),
            CqlValue::Boolean(true),
            CqlValue::Date(scylla::value::CqlDate((1u32 << 31) + 19_000)),
            CqlValue::Decimal(scylla::value::CqlDecimal::from_signed_be_bytes_and_exponent(vec![0x30, 0x39], 2)),
            CqlValue::Double(3.25),
            CqlValue::Duration(CqlDuration { months: 1, days: 2, nanoseconds: 3 }),
            CqlValue::Float(1.5),
            CqlValue::Inet("10.1.2.3".parse().expect("ip")),
            CqlValue::SmallInt(-7),
            CqlValue::Text("text ✓".into()),
            CqlValue::Time(scylla::value::CqlTime(3_600_000_000_000)),
            CqlValue::Timestamp(scylla::value::CqlTimestamp(1_700_000_000_123)),
            CqlValue::Timeuuid(scylla::value::CqlTimeuuid::from_bytes([0x13, 0x81, 0x40, 0x00, 0x1d, 0xd2, 0x11, 0xb2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80])),
            CqlValue::TinyInt(-1),
            CqlValue::Uuid(uuid_from(0x1234)),
            CqlValue::Varint(scylla::value::CqlVarint::from_signed_bytes_be(vec![0x00, 0x80])),
            CqlValue::List(vec![CqlValue::Int(3), CqlValue::Int(1), CqlValue::Int(3)]),
            CqlValue::Set(vec![CqlValue::Text("a".into()), CqlValue::Text("b".into())]),
            CqlValue::Map(vec![(CqlValue::Text("x".into()), CqlValue::Int(1))]),
            CqlValue::List(vec![CqlValue::Int(9)]),
            CqlValue::Tuple(vec![Some(CqlValue::Int(4)), Some(CqlValue::Text("four".into()))]),
            CqlValue::UserDefinedType {
                keyspace: "rs".into(),
                name: "addr".into(),
                fields: vec![
                    ("street".into(), Some(CqlValue::Text("Main St".into()))),
                    ("no".into(), Some(CqlValue::Int(12))),
                ],
            },
        ];
        s.execute_unpaged(&ins, &values).await.expect("insert all types");
        let sel = s
            .prepare("SELECT k, a, b, bl, bo, d, de, do, du, f, i, sm, t, ti, ts, tu, tiny, u, vi, li, se, ma, fl, tup, ad FROM rs.all_types WHERE k = ?")
            .await
            .expect("prepare select");
        let rows = s.execute_unpaged(&sel, (1i32,)).await.expect("select").into_rows_result().expect("rows");
        let row: Row = rows.single_row::<Row>().expect("one row");
        assert_eq!(row.columns.len(), values.len());
        for (i, (got, want)) in row.columns.iter().zip(values.iter()).enumerate() {
            assert_eq!(got.as_ref(), Some(want), "column {i}");
        }

        // Paging over at least 3 pages.
        s.query_unpaged("CREATE TABLE rs.pages (p int, c int, v text, PRIMARY KEY (p, c))", &[]).await.expect("create");
        let ins = s.prepare("INSERT INTO rs.pages (p, c, v) VALUES (?, ?, ?)").await.expect("prepare");
        for c in 0..25i32 {
            s.execute_unpaged(&ins, (7i32, c, format!("v{c}"))).await.expect("insert");
        }
        let mut sel = s.prepare("SELECT c FROM rs.pages WHERE p = ?").await.expect("prepare");
        sel.set_page_size(10);
        let mut state = PagingState::start();
        let mut pages = 0;
        let mut seen = Vec::new();
        loop {
            let (res, next) = s.execute_single_page(&sel, (7i32,), state).await.expect("page");
            pages += 1;
            for r in res.into_rows_result().expect("rows").rows::<(i32,)>().expect("typed") {
                seen.push(r.expect("row").0);
            }
            match next {
                PagingStateResponse::HasMorePages { state: s2 } => state = s2,
                PagingStateResponse::NoMorePages => break,
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(seen, (0..25).collect::<Vec<_>>());

        // A logged batch of prepared statements.
        let mut batch = Batch::default();
        batch.append_statement(ins.clone());
        batch.append_statement(ins.clone());
        s.batch(&batch, ((8i32, 1i32, "a"), (8i32, 2i32, "b"))).await.expect("batch");
        let n: Vec<(i32,)> = s
            .query_unpaged("SELECT c FROM rs.pages WHERE p = 8", &[])
            .await
            .expect("select")
            .into_rows_result()
            .expect("rows")
            .rows::<(i32,)>()
            .expect("typed")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(n, vec![(1,), (2,)]);

        // Errors carry the right kind.
        let err = s.query_unpaged("SELEC * FROM rs.pages", &[]).await.expect_err("syntax error");
        assert!(format!("{err:?}").contains("SyntaxError"), "{err:?}");
        let err = s.query_unpaged("SELECT * FROM rs.nope", &[]).await.expect_err("unknown table");
        assert!(format!("{err:?}").contains("Invalid"), "{err:?}");

        // Token-aware + shard-aware routing: the driver's token for a key matches the
        // server's token() for it.
        let tok: Vec<(i64,)> = s
            .query_unpaged("SELECT token(p) FROM rs.pages WHERE p = 7 LIMIT 1", &[])
            .await
            .expect("token")
            .into_rows_result()
            .expect("rows")
            .rows::<(i64,)>()
            .expect("typed")
            .collect::<Result<_, _>>()
            .expect("rows");
        let prepared = s.prepare("SELECT c FROM rs.pages WHERE p = ?").await.expect("prepare");
        let driver_token = prepared.calculate_token(&(7i32,)).expect("token").expect("some token");
        assert_eq!(driver_token.value(), tok[0].0);
        let shards: HashSet<u32> = (0..100i32)
            .filter_map(|k| prepared.calculate_token(&(k,)).ok().flatten())
            .map(|t| sharder.shard_of(t))
            .collect();
        assert_eq!(shards.len(), 2, "keys spread over both shards");
    });
}

fn uuid_from(n: u128) -> uuid::Uuid {
    uuid::Uuid::from_u128(n)
}

/// `amphora sstable validate` passes on a clean data dir, exits 1 naming the file when a
/// Data chunk is corrupt; `amphora sstable dump` prints the rows as JSON.
#[test]
fn sstable_validate_and_dump_offline() {
    let mut node = TestNode::start(1).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        s.query_unpaged("CREATE KEYSPACE off WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}", &[])
            .await
            .expect("keyspace");
        s.query_unpaged("CREATE TABLE off.t (k int PRIMARY KEY, v text)", &[]).await.expect("table");
        for k in 0..50i32 {
            s.query_unpaged("INSERT INTO off.t (k, v) VALUES (?, ?)", (k, format!("value-{k}"))).await.expect("insert");
        }
    });
    let (code, out, err) = node.nodetool(&["flush"]).expect("nodetool");
    assert_eq!(code, 0, "{out}{err}");
    node.stop().expect("stop");
    let bin = amphora_testkit::amphora_bin().expect("bin");
    let data = node.data_dir.join("data");
    let run = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new(&bin)
            .args(args)
            .output()
            .expect("run")
    };
    let ok = run(&["sstable".as_ref(), "validate".as_ref(), data.as_os_str()]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("0 errors"));
    let data_file = std::fs::read_dir(data.join("shard-0/off"))
        .expect("table dirs")
        .flatten()
        .flat_map(|t| std::fs::read_dir(t.path()).expect("files").flatten())
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("Data.db"))
        .expect("a Data.db");
    let dump = run(&["sstable".as_ref(), "dump".as_ref(), data_file.as_os_str()]);
    assert!(dump.status.success());
    assert!(String::from_utf8_lossy(&dump.stdout).contains("\"partition\""));
    let mut bytes = std::fs::read(&data_file).expect("read");
    bytes[10] ^= 0xFF;
    std::fs::write(&data_file, bytes).expect("corrupt");
    let bad = run(&["sstable".as_ref(), "validate".as_ref(), data.as_os_str()]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains(&*data_file.to_string_lossy()));
}

/// DDL from many connections at once (the driver spreads them over both shards): every
/// statement succeeds and every change survives, none is lost to a concurrent one.
#[test]
fn concurrent_ddl_from_many_connections_loses_nothing() {
    let mut node = TestNode::start(2).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        s.query_unpaged(
            "CREATE KEYSPACE cddl WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            &[],
        )
        .await
        .expect("create keyspace");
        let mut sessions = Vec::new();
        for _ in 0..4 {
            sessions.push(std::sync::Arc::new(session(&node).await));
        }
        let mut tasks = Vec::new();
        for i in 0..24 {
            let s = sessions[i % sessions.len()].clone();
            tasks.push(tokio::spawn(async move {
                s.query_unpaged(
                    format!("CREATE TABLE cddl.t{i} (k int PRIMARY KEY, v text)"),
                    &[],
                )
                .await
                .map_err(|e| format!("CREATE TABLE cddl.t{i}: {e}"))
            }));
        }
        for t in tasks {
            t.await.expect("join").expect("concurrent CREATE TABLE");
        }
        let rows = s
            .query_unpaged(
                "SELECT table_name FROM system_schema.tables WHERE keyspace_name = 'cddl'",
                &[],
            )
            .await
            .expect("select tables")
            .into_rows_result()
            .expect("rows");
        let names: HashSet<String> = rows
            .rows::<(String,)>()
            .expect("typed")
            .map(|r| r.expect("row").0)
            .collect();
        assert_eq!(names.len(), 24, "{names:?}");
    });
    // And the schema file on disk has all of them: a restart shows the same tables.
    node.stop().expect("stop");
    let again = TestNode::start_in(&node.data_dir, 2, &[]).expect("restart");
    rt().block_on(async {
        let s = session(&again).await;
        let rows = s
            .query_unpaged(
                "SELECT table_name FROM system_schema.tables WHERE keyspace_name = 'cddl'",
                &[],
            )
            .await
            .expect("select tables")
            .into_rows_result()
            .expect("rows");
        assert_eq!(rows.rows_num(), 24);
    });
}

mod derived;
mod durability;
mod schema_store;
mod statements;

/// `amphora_cql_errors_total` summed over shards for one CQL error code.
fn errors_sent(node: &TestNode, code: &str) -> u64 {
    let text = node.metrics_text().expect("metrics");
    let key = format!("code=\"{code}\"}}");
    text.lines()
        .filter(|l| l.starts_with("amphora_cql_errors_total{") && l.contains(&key))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn scylla_driver_sees_schema_events_and_reprepares() {
    let node = TestNode::start(2).expect("start node");
    rt().block_on(async {
        let s = session(&node).await;
        // A second session that learns schema only from SCHEMA_CHANGE events: in its
        // default mode (AffectedKeyspaces) the periodic refresh re-reads only the keyspaces
        // named by events received since the last one, so a table created through the
        // other session appears in its metadata only if the server pushed the event.
        let watcher = SessionBuilder::new()
            .known_node(node.native.to_string())
            .cluster_metadata_refresh_interval(std::time::Duration::from_millis(200))
            .build()
            .await
            .expect("connect watcher");
        s.query_unpaged("CREATE KEYSPACE ev WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}", &[])
            .await
            .expect("create keyspace");
        s.query_unpaged("CREATE TABLE ev.t (k int PRIMARY KEY, v text)", &[]).await.expect("create table");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let state = watcher.get_cluster_state();
            if state.get_keyspace("ev").is_some_and(|ks| ks.tables.contains_key("t")) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the watcher never saw ev.t: no schema event?");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        s.query_unpaged("DROP TABLE ev.t", &[]).await.expect("drop table");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while watcher.get_cluster_state().get_keyspace("ev").is_some_and(|ks| ks.tables.contains_key("t")) {
            assert!(std::time::Instant::now() < deadline, "the watcher still has ev.t after DROP");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }

        // Unprepared: the server forgets the table's statements when it is dropped; the
        // driver gets UNPREPARED (0x2500) on EXECUTE, re-prepares and retries.
        s.query_unpaged("CREATE TABLE ev.r (k int PRIMARY KEY, v text)", &[]).await.expect("create");
        let ins = s.prepare("INSERT INTO ev.r (k, v) VALUES (?, ?)").await.expect("prepare");
        s.execute_unpaged(&ins, (1i32, "before")).await.expect("insert");
        let before = errors_sent(&node, "0x2500");
        s.query_unpaged("DROP TABLE ev.r", &[]).await.expect("drop");
        s.query_unpaged("CREATE TABLE ev.r (k int PRIMARY KEY, v text)", &[]).await.expect("recreate");
        s.execute_unpaged(&ins, (2i32, "after")).await.expect("insert after re-prepare");
        assert!(errors_sent(&node, "0x2500") > before, "the server never answered UNPREPARED");
        let rows: Vec<(i32, String)> = s
            .query_unpaged("SELECT k, v FROM ev.r", &[])
            .await
            .expect("select")
            .into_rows_result()
            .expect("rows")
            .rows::<(i32, String)>()
            .expect("typed")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(rows, vec![(2, "after".to_string())]);
    });
}
