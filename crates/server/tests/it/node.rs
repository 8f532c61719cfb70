//! The transport in a whole node (`Node::start`): real coordinator, schema and storage.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use amphora_protocol::{Direction, Opcode, ProtocolVersion};
use amphora_server::config::NodeConfig;
use amphora_server::node::Node;
use bytes::{BufMut, BytesMut};

use crate::client::*;

struct TestDir(PathBuf);

impl TestDir {
    fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "amphora-server-it-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        Self(p)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start_node(dir: &TestDir, smp: u32) -> Node {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(Node::start(NodeConfig {
        data_dir: dir.0.clone(),
        native_port: 0,
        shard_aware_port: 0,
        prometheus_port: Some(0),
        smp,
        memory_bytes: 256 << 20,
        pin_shards: false,
        ..NodeConfig::default()
    }))
    .expect("node starts")
}

fn stop_node(node: Node) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(node.shutdown()).expect("clean shutdown");
}

fn execute(
    c: &mut Client,
    stream: i16,
    id: &[u8],
    rmid: &[u8],
    values: &[&[u8]],
) -> amphora_protocol::Envelope {
    let mut body = BytesMut::new();
    put_short_bytes(&mut body, id);
    if c.version >= 5 {
        put_short_bytes(&mut body, rmid);
    }
    let vals: Vec<Option<&[u8]>> = values.iter().map(|v| Some(*v)).collect();
    body.extend_from_slice(&params(c.version, 0, &vals, None, None));
    c.send(0, stream, Opcode::Execute as u8, &body);
    c.recv()
}

/// (id, result_metadata_id, pk_indexes) of a Prepared answer.
fn prepared(env: &amphora_protocol::Envelope, v5: bool) -> (Vec<u8>, Vec<u8>, Vec<u16>) {
    let mut r = reader(env);
    assert_eq!(r.read_i32().expect("kind"), 4, "{env:?}");
    let id = r.read_short_bytes().expect("id").to_vec();
    let rmid = if v5 {
        r.read_short_bytes().expect("rmid").to_vec()
    } else {
        Vec::new()
    };
    r.read_u32().expect("flags");
    r.read_i32().expect("count");
    let pk = r.read_i32().expect("pk count");
    let pks = (0..pk).map(|_| r.read_u16().expect("pk")).collect();
    (id, rmid, pks)
}

#[test]
fn node_serves_schema_prepared_statements_and_errors() {
    let dir = TestDir::new("e2e");
    let node = start_node(&dir, 2);
    for version in [4u8, 5] {
        let mut c = Client::connect(node.native_addr, version);
        let comp = if version == 5 { "lz4" } else { "snappy" };
        assert_eq!(c.startup(&[("COMPRESSION", comp)]).opcode, Opcode::Ready);
        let rows = rows_of(&c.query(1, "SELECT release_version FROM system.local"));
        let v = rows.rows[0][0].clone().expect("release_version");
        assert!(v.starts_with(b"5.0"), "{v:?}");
        let ks = format!("ks{version}");
        let r = c.query(
            2,
            &format!(
                "CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
            ),
        );
        assert_eq!(reader(&r).read_i32().expect("kind"), 5, "{r:?}");
        let r = c.query(
            3,
            &format!("CREATE TABLE {ks}.t (k int PRIMARY KEY, v text)"),
        );
        assert_eq!(reader(&r).read_i32().expect("kind"), 5, "{r:?}");
        let p = c.prepare(4, &format!("INSERT INTO {ks}.t (k, v) VALUES (?, ?)"));
        let (id, rmid, pks) = prepared(&p, version >= 5);
        assert_eq!(pks, vec![0]);
        for k in 0..20i32 {
            let r = execute(
                &mut c,
                5,
                &id,
                &rmid,
                &[&k.to_be_bytes(), format!("v{k}").as_bytes()],
            );
            assert_eq!(reader(&r).read_i32().expect("kind"), 1, "{r:?}");
        }
        let r = c.query(6, &format!("USE {ks}"));
        assert_eq!(reader(&r).read_i32().expect("kind"), 3);
        let p = c.prepare(7, "SELECT v FROM t WHERE k = ?");
        let (id, rmid, _) = prepared(&p, version >= 5);
        let rows = rows_of(&execute(&mut c, 8, &id, &rmid, &[&7i32.to_be_bytes()]));
        assert_eq!(rows.rows.len(), 1);
        assert_eq!(rows.rows[0][0].as_deref(), Some(&b"v7"[..]));
        // Paging over the 20 rows.
        let mut state: Option<bytes::Bytes> = None;
        let mut total = 0;
        let mut pages = 0;
        loop {
            c.send_query_with(9, 0, "SELECT k FROM t", Some(7), state.as_deref());
            let rows = rows_of(&c.recv());
            total += rows.rows.len();
            pages += 1;
            match rows.paging_state {
                Some(p) => state = Some(p),
                None => break,
            }
            assert!(pages < 10, "paging does not end");
        }
        assert_eq!(total, 20);
        assert!(pages >= 3);
        assert_eq!(error_of(&c.query(10, "SELEKT * FROM t")).0, 0x2000);
        assert_eq!(
            error_of(&c.query(11, "SELECT * FROM no_such_table")).0,
            0x2200
        );
        let r = execute(&mut c, 12, b"0123456789abcdef", b"", &[]);
        assert_eq!(error_of(&r).0, 0x2500);
    }
    stop_node(node);
}

#[test]
fn node_negotiation_and_bad_input() {
    let dir = TestDir::new("neg");
    let node = start_node(&dir, 2);
    let mut c = Client::connect(node.native_addr, 0x42);
    c.send(0, 0, Opcode::Options as u8, &[]);
    let r = c.recv();
    assert_eq!(
        (r.version, r.direction),
        (ProtocolVersion::V5, Direction::Response)
    );
    assert_eq!(error_of(&r).0, 0x000A);
    c.expect_closed();
    // Schema events reach a registered connection.
    let mut events = Client::connect(node.native_addr, 5);
    events.startup(&[]);
    let mut body = BytesMut::new();
    body.put_u16(1);
    put_string(&mut body, "SCHEMA_CHANGE");
    events.send(0, 1, Opcode::Register as u8, &body);
    assert_eq!(events.recv().opcode, Opcode::Ready);
    let mut c = Client::connect(node.shard_aware_addr, 4);
    let m = c.options(0);
    let shard: u32 = supported_value(&m, "SCYLLA_SHARD")[0].parse().expect("int");
    assert_eq!(shard, u32::from(c.local_port() % 2));
    assert_eq!(supported_value(&m, "SCYLLA_NR_SHARDS"), vec!["2"]);
    c.startup(&[]);
    c.query(
        1,
        "CREATE KEYSPACE evks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
    );
    let ev = events.recv();
    assert_eq!((ev.opcode, ev.stream), (Opcode::Event, -1));
    // A frame over the limit closes only its connection.
    let mut env = envelope(4, 0, 2, Opcode::Query as u8, &[]);
    env[5..9].copy_from_slice(&(17i32 << 20).to_be_bytes());
    c.send_raw(&env);
    assert_eq!(error_of(&c.recv()).0, 0x000A);
    c.expect_closed();
    let mut ok = Client::connect(node.native_addr, 4);
    ok.startup(&[]);
    assert_eq!(
        rows_of(&ok.query(1, "SELECT key FROM system.local"))
            .rows
            .len(),
        1
    );
    stop_node(node);
}

/// A BATCH of `n` text-query INSERTs into `table`, with keys from `first`, each value
/// `value_len` bytes.
fn batch_of_inserts(
    c: &mut Client,
    stream: i16,
    kind: u8,
    table: &str,
    first: i32,
    n: i32,
    value_len: usize,
) -> amphora_protocol::Envelope {
    let mut body = BytesMut::new();
    body.put_u8(kind);
    body.put_u16(n as u16);
    let v = "x".repeat(value_len);
    for k in first..first + n {
        body.put_u8(0);
        put_long_string(
            &mut body,
            &format!("INSERT INTO {table} (k, v) VALUES ({k}, '{v}')"),
        );
        body.put_u16(0);
    }
    body.put_u16(1);
    if c.version >= 5 {
        body.put_u32(0);
    } else {
        body.put_u8(0);
    }
    c.send(0, stream, Opcode::Batch as u8, &body);
    c.recv()
}

#[test]
fn node_warns_on_large_batches_and_unrestricted_aggregates() {
    let dir = TestDir::new("warn");
    let node = start_node(&dir, 1);
    let mut c = Client::connect(node.native_addr, 4);
    c.startup(&[]);
    c.query(
        1,
        "CREATE KEYSPACE w WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
    );
    c.query(2, "CREATE TABLE w.t (k int PRIMARY KEY, v text)");
    // Two partitions of 3000-byte values: 6000 + 2 × 16 bytes of cells, over 5 KiB.
    let r = batch_of_inserts(&mut c, 3, 0, "w.t", 0, 2, 3000);
    assert_eq!(reader(&r).read_i32().expect("kind"), 1, "{r:?}");
    assert_eq!(
        warnings_of(&r),
        vec![
            "Batch for [w.t] is of size 6032, exceeding specified threshold of 5120 by 912."
                .to_string()
        ]
    );
    // One partition, however large: no warning (CASSANDRA-10876).
    let r = batch_of_inserts(&mut c, 4, 0, "w.t", 7, 1, 20_000);
    assert!(warnings_of(&r).is_empty(), "{r:?}");
    // Small, logged, many partitions: nothing to say.
    let r = batch_of_inserts(&mut c, 5, 0, "w.t", 100, 12, 10);
    assert!(warnings_of(&r).is_empty(), "{r:?}");
    // Unlogged over more than 10 partitions.
    let r = batch_of_inserts(&mut c, 6, 1, "w.t", 100, 11, 10);
    assert_eq!(
        warnings_of(&r),
        vec!["Unlogged batch covering 11 partitions detected against table [w.t]. You should use a logged batch for atomicity, or asynchronous writes for performance.".to_string()]
    );
    // Past batch_size_fail_threshold (50 KiB): refused, nothing written.
    let r = batch_of_inserts(&mut c, 7, 0, "w.t", 200, 2, 30_000);
    assert_eq!(error_of(&r), (0x2200, "Batch too large".to_string()));
    assert_eq!(
        warnings_of(&r).len(),
        1,
        "the warning still comes with the error"
    );
    let rows = rows_of(&c.query(8, "SELECT k FROM w.t WHERE k = 200"));
    assert!(rows.rows.is_empty());
    // Aggregates.
    let r = c.query(9, "SELECT count(*) FROM w.t");
    assert_eq!(
        warnings_of(&r),
        vec!["Aggregation query used without partition key".to_string()]
    );
    let r = c.query(10, "SELECT count(*) FROM w.t WHERE k = 1");
    assert!(warnings_of(&r).is_empty(), "{r:?}");
    let r = c.query(11, "SELECT count(*) FROM w.t WHERE k IN (1, 2)");
    assert_eq!(
        warnings_of(&r),
        vec!["Aggregation query used on multiple partition keys (IN restriction)".to_string()]
    );
    let r = c.query(12, "SELECT k FROM w.t");
    assert!(warnings_of(&r).is_empty(), "{r:?}");
    stop_node(node);
}

#[test]
fn node_v5_execute_after_alter_gets_metadata_changed() {
    let dir = TestDir::new("mdid");
    let node = start_node(&dir, 1);
    let mut a = Client::connect(node.native_addr, 5);
    a.startup(&[]);
    a.query(
        1,
        "CREATE KEYSPACE m WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
    );
    a.query(2, "CREATE TABLE m.t (k int PRIMARY KEY, v int)");
    a.query(3, "INSERT INTO m.t (k, v) VALUES (1, 10)");
    let q = "SELECT * FROM m.t WHERE k = ?";
    let (id, rmid1, _) = prepared(&a.prepare(4, q), true);
    // Skip_metadata with the current id: no metadata.
    let mut body = BytesMut::new();
    put_short_bytes(&mut body, &id);
    put_short_bytes(&mut body, &rmid1);
    body.extend_from_slice(&params(5, 0x02, &[Some(&1i32.to_be_bytes())], None, None));
    a.send(0, 5, Opcode::Execute as u8, &body);
    let rows = rows_of(&a.recv());
    assert_ne!(rows.flags & 0x04, 0, "no metadata");
    assert_eq!(rows.column_count, 2);
    // Another client changes the table and prepares the statement again.
    let mut b = Client::connect(node.native_addr, 5);
    b.startup(&[]);
    b.query(1, "ALTER TABLE m.t ADD w text");
    let (id2, rmid2, _) = prepared(&b.prepare(2, q), true);
    assert_eq!(id2, id, "the id is the query's");
    assert_ne!(rmid2, rmid1, "the result metadata changed");
    // The first client still holds the old metadata id: it gets the new id and metadata.
    a.send(0, 6, Opcode::Execute as u8, &body);
    let rows = rows_of(&a.recv());
    assert_eq!(rows.flags & 0x04, 0, "metadata sent");
    assert_ne!(rows.flags & 0x08, 0, "Metadata_changed");
    assert_eq!(rows.new_metadata_id.as_deref(), Some(&rmid2[..]));
    assert_eq!(rows.column_count, 3);
    let names: Vec<&str> = rows.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec!["k", "v", "w"]);
    assert_eq!(
        rows.rows,
        vec![vec![
            Some(bytes::Bytes::copy_from_slice(&1i32.to_be_bytes())),
            Some(bytes::Bytes::copy_from_slice(&10i32.to_be_bytes())),
            None
        ]]
    );
    // With the new id it is skipped again.
    let mut body = BytesMut::new();
    put_short_bytes(&mut body, &id);
    put_short_bytes(&mut body, &rmid2);
    body.extend_from_slice(&params(5, 0x02, &[Some(&1i32.to_be_bytes())], None, None));
    a.send(0, 7, Opcode::Execute as u8, &body);
    let rows = rows_of(&a.recv());
    assert_ne!(rows.flags & 0x04, 0, "no metadata");
    assert_eq!(rows.column_count, 3);
    stop_node(node);
}
