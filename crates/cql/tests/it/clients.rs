//! The exact statements real drivers, cqlsh, cassandra-stress and NoSQLBench send.

use crate::p;
use amphora_cql::*;

/// Statements clients send, with the expected `Statement::kind()`.
pub const CLIENT_STATEMENTS: &[(&str, &str)] = &[
    // python / java / gocql / rust driver control connection
    ("SELECT * FROM system.peers_v2", "SELECT"),
    ("SELECT * FROM system.peers", "SELECT"),
    ("SELECT * FROM system.local WHERE key='local'", "SELECT"),
    ("select * from system.local where key = 'local'", "SELECT"),
    ("SELECT cluster_name FROM system.local", "SELECT"),
    (
        "SELECT peer, host_id, rpc_address, schema_version FROM system.peers",
        "SELECT",
    ),
    (
        "SELECT host_id, peer, peer_port, native_address, native_port, schema_version FROM system.peers_v2",
        "SELECT",
    ),
    (
        "SELECT schema_version FROM system.local WHERE key='local'",
        "SELECT",
    ),
    (
        "SELECT broadcast_address, cluster_name, data_center, host_id, listen_address, partitioner, rack, release_version, rpc_address, schema_version, tokens FROM system.local WHERE key='local'",
        "SELECT",
    ),
    (
        "SELECT peer, data_center, host_id, rack, release_version, rpc_address, schema_version, tokens FROM system.peers",
        "SELECT",
    ),
    ("SELECT * FROM system_schema.keyspaces", "SELECT"),
    (
        "SELECT * FROM system_schema.tables WHERE keyspace_name = 'ks' AND table_name = 't'",
        "SELECT",
    ),
    (
        "SELECT * FROM system_schema.columns WHERE keyspace_name = 'ks' AND table_name = 't'",
        "SELECT",
    ),
    (
        "SELECT * FROM system_schema.views WHERE keyspace_name = 'ks' AND view_name = 'v'",
        "SELECT",
    ),
    (
        "SELECT * FROM system_schema.types WHERE keyspace_name = 'ks' AND type_name = 'u'",
        "SELECT",
    ),
    (
        "SELECT * FROM system_schema.functions WHERE keyspace_name = 'ks' AND function_name = 'f' AND argument_types = ['int']",
        "SELECT",
    ),
    (
        "SELECT * FROM system_schema.keyspaces WHERE keyspace_name IN ('a','b')",
        "SELECT",
    ),
    (
        "SELECT keyspace_name, table_name FROM system_schema.tables where keyspace_name in ?",
        "SELECT",
    ),
    (
        "SELECT durable_writes, replication FROM system_schema.keyspaces WHERE keyspace_name = ?",
        "SELECT",
    ),
    (
        "SELECT * FROM system_schema.views WHERE keyspace_name = ? AND base_table_name = ? ALLOW FILTERING",
        "SELECT",
    ),
    (
        "SELECT * FROM system.local WHERE key='local' USING TIMEOUT 2000ms",
        "SELECT",
    ),
    (
        "SELECT keyspace_name, table_name, column_name, kind, position, type FROM system_schema.columns USING TIMEOUT 30000ms",
        "SELECT",
    ),
    (
        "SELECT * FROM system_schema.scylla_tables WHERE keyspace_name = ? USING TIMEOUT 2000ms",
        "SELECT",
    ),
    (
        "SELECT * FROM system_schema.views WHERE keyspace_name = ? AND base_table_name = ? ALLOW FILTERING USING TIMEOUT 2000ms",
        "SELECT",
    ),
    ("SELECT * from system_virtual_schema.keyspaces", "SELECT"),
    (
        "SELECT prepared_id FROM system.prepared_statements",
        "SELECT",
    ),
    ("USE \"ks\"", "USE"),
    ("USE ks", "USE"),
    // cassandra-stress
    (
        "CREATE KEYSPACE IF NOT EXISTS \"keyspace1\" WITH replication = {'class': 'org.apache.cassandra.locator.SimpleStrategy', 'replication_factor': '1'} AND durable_writes = true",
        "CREATE KEYSPACE",
    ),
    ("USE \"keyspace1\"", "USE"),
    (
        "CREATE TABLE IF NOT EXISTS standard1 (key blob PRIMARY KEY, \"C0\" blob, \"C1\" blob, \"C2\" blob, \"C3\" blob, \"C4\" blob) WITH compression = {}",
        "CREATE TABLE",
    ),
    (
        "CREATE TABLE IF NOT EXISTS counter1 (key blob PRIMARY KEY,\n, \"C0\" counter, \"C1\" counter, \"C2\" counter, \"C3\" counter, \"C4\" counter) WITH compression = {}",
        "CREATE TABLE",
    ),
    (
        "UPDATE \"standard1\" SET \"C0\" = ?,\"C1\" = ?,\"C2\" = ?,\"C3\" = ?,\"C4\" = ? WHERE KEY=?",
        "UPDATE",
    ),
    ("SELECT * FROM \"standard1\" WHERE KEY=?", "SELECT"),
    (
        "SELECT \"C0\",\"C1\",\"C2\",\"C3\",\"C4\" FROM \"standard1\" WHERE KEY=?",
        "SELECT",
    ),
    (
        "UPDATE \"counter1\" SET \"C0\"=\"C0\"+?,\"C1\"=\"C1\"+? WHERE KEY=?",
        "UPDATE",
    ),
    // NoSQLBench cql-iot
    (
        "create table if not exists baselines.iot (\n  machine_id UUID,     // source machine\n  sensor_name text,    // sensor name\n  time timestamp,      // timestamp of collection\n  sensor_value double, //\n  station_id UUID,     // source location\n  data text,\n  PRIMARY KEY ((machine_id, sensor_name), time)\n) WITH CLUSTERING ORDER BY (time DESC)\n  AND compression = { 'sstable_compression' : 'LZ4Compressor' }\n  AND compaction = {\n    'class': 'TimeWindowCompactionStrategy',\n    'compaction_window_size': 60,\n    'compaction_window_unit': 'MINUTES'\n  }",
        "CREATE TABLE",
    ),
    (
        "insert into baselines.iot (machine_id, sensor_name, time, sensor_value, station_id, data) values (?, ?, ?, ?, ?, ?) using timestamp 1234",
        "INSERT",
    ),
    (
        "select * from baselines.iot where machine_id=? and sensor_name=? limit 10",
        "SELECT",
    ),
    // YCSB / COPY / Spark token scans
    (
        "SELECT * FROM usertable WHERE token(y_id) >= token(?) LIMIT ?",
        "SELECT",
    ),
    (
        "SELECT * FROM ks.t WHERE token(a, b) > -123 AND token(a, b) <= 456",
        "SELECT",
    ),
    // cqlsh DESCRIBE forms
    ("DESCRIBE CLUSTER", "DESCRIBE"),
    ("DESCRIBE KEYSPACES", "DESCRIBE"),
    ("DESC KEYSPACE ks", "DESCRIBE"),
    ("DESCRIBE ONLY KEYSPACE ks", "DESCRIBE"),
    ("DESCRIBE KEYSPACE", "DESCRIBE"),
    ("DESCRIBE TABLES", "DESCRIBE"),
    ("DESCRIBE TABLE ks.t", "DESCRIBE"),
    ("DESCRIBE COLUMNFAMILY t", "DESCRIBE"),
    ("DESCRIBE TYPES", "DESCRIBE"),
    ("DESCRIBE TYPE ks.address", "DESCRIBE"),
    ("DESCRIBE FUNCTIONS", "DESCRIBE"),
    ("DESCRIBE FUNCTION ks.f", "DESCRIBE"),
    ("DESCRIBE AGGREGATES", "DESCRIBE"),
    ("DESCRIBE AGGREGATE ks.a", "DESCRIBE"),
    ("DESCRIBE INDEX ks.i", "DESCRIBE"),
    ("DESCRIBE MATERIALIZED VIEW ks.v", "DESCRIBE"),
    ("DESCRIBE SCHEMA", "DESCRIBE"),
    ("DESCRIBE FULL SCHEMA", "DESCRIBE"),
    ("DESCRIBE ks", "DESCRIBE"),
    ("describe ks.t WITH INTERNALS", "DESCRIBE"),
    ("DESCRIBE KEYSPACE ks WITH INTERNALS;", "DESCRIBE"),
];

/// Every statement here must parse; kinds are checked against the expected one.
#[test]
fn golden_client_statements() {
    for (q, kind) in CLIENT_STATEMENTS {
        assert_eq!(p(q).kind(), *kind, "{q}");
    }
}

#[test]
fn stress_update_shape() {
    let pm = crate::pm(
        "UPDATE \"standard1\" SET \"C0\" = ?,\"C1\" = ?,\"C2\" = ?,\"C3\" = ?,\"C4\" = ? WHERE KEY=?",
    );
    assert_eq!(pm.bind_markers.len(), 6);
    assert!(
        pm.bind_markers
            .iter()
            .enumerate()
            .all(|(i, m)| m.index == i && m.name.is_none())
    );
    let Statement::Update(u) = pm.statement else {
        panic!("not an update")
    };
    assert_eq!(
        u.table,
        QualifiedName::new(None, Ident::quoted("standard1"))
    );
    let cols: Vec<_> = u
        .assignments
        .iter()
        .map(|a| a.column.name.as_str())
        .collect();
    assert_eq!(cols, ["C0", "C1", "C2", "C3", "C4"]);
    assert!(u.assignments.iter().all(|a| a.column.quoted));
    assert!(matches!(
        &u.assignments[4].op,
        AssignmentOp::Set(Expr::Bind(BindMarker {
            index: 4,
            name: None
        }))
    ));
    assert_eq!(u.where_clause.len(), 1);
    let r = &u.where_clause[0];
    assert_eq!(r.target, RelationTarget::Column(Ident::new("key")));
    assert_eq!(r.op, Operator::Eq);
    assert_eq!(
        r.value,
        RelationValue::Single(Expr::Bind(BindMarker {
            index: 5,
            name: None
        }))
    );
}

#[test]
fn stress_counter_update() {
    let Statement::Update(u) =
        p("UPDATE \"counter1\" SET \"C0\"=\"C0\"+?,\"C1\"=\"C1\"+? WHERE KEY=?")
    else {
        panic!()
    };
    assert!(matches!(
        &u.assignments[0].op,
        AssignmentOp::Add(Expr::Bind(_))
    ));
    assert!(matches!(
        &u.assignments[1].op,
        AssignmentOp::Add(Expr::Bind(_))
    ));
}

#[test]
fn stress_keyspace() {
    let Statement::CreateKeyspace(k) = p(
        "CREATE KEYSPACE IF NOT EXISTS \"keyspace1\" WITH replication = {'class': 'org.apache.cassandra.locator.SimpleStrategy', 'replication_factor': '1'} AND durable_writes = true",
    ) else {
        panic!()
    };
    assert!(k.if_not_exists);
    assert_eq!(k.name, Ident::quoted("keyspace1"));
    assert_eq!(k.properties.len(), 2);
    assert_eq!(k.properties[0].name, "replication");
    assert_eq!(
        k.properties[0].value.as_map(),
        Some(vec![
            (
                "class".to_string(),
                "org.apache.cassandra.locator.SimpleStrategy".to_string()
            ),
            ("replication_factor".to_string(), "1".to_string())
        ])
    );
    assert_eq!(k.properties[1].name, "durable_writes");
    assert_eq!(
        k.properties[1].value,
        PropertyValue::Constant(Literal::Boolean(true))
    );
}

#[test]
fn stress_tables() {
    let Statement::CreateTable(t) = p(
        "CREATE TABLE IF NOT EXISTS standard1 (key blob PRIMARY KEY, \"C0\" blob, \"C1\" blob, \"C2\" blob, \"C3\" blob, \"C4\" blob) WITH compression = {}",
    ) else {
        panic!()
    };
    assert_eq!(t.columns.len(), 6);
    assert_eq!(t.columns[0].name, Ident::new("key"));
    assert!(t.columns[0].primary_key);
    assert_eq!(t.primary_key.partition_key, vec![Ident::new("key")]);
    assert!(t.primary_key.clustering_columns.is_empty());
    assert_eq!(t.columns[1].name, Ident::quoted("C0"));
    assert_eq!(t.columns[1].ty, TypeExpr::Native(NativeType::Blob));
    assert_eq!(t.options.properties[0].value, PropertyValue::Map(vec![]));

    let Statement::CreateTable(t) = p(
        "CREATE TABLE IF NOT EXISTS counter1 (key blob PRIMARY KEY,\n, \"C0\" counter,, \"C1\" counter,) WITH compression = {}",
    ) else {
        panic!()
    };
    assert_eq!(t.columns.len(), 3);
    assert_eq!(t.columns[2].ty, TypeExpr::Native(NativeType::Counter));
}

#[test]
fn iot_table() {
    let Statement::CreateTable(t) = p(
        "CREATE TABLE baselines.iot (machine_id uuid, sensor_name text, time timestamp, sensor_value double, station_id uuid, data text, PRIMARY KEY ((machine_id, sensor_name), time)) WITH CLUSTERING ORDER BY (time DESC) AND compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_size': 60, 'compaction_window_unit': 'MINUTES'} AND default_time_to_live = 0 AND gc_grace_seconds = 864000 AND bloom_filter_fp_chance = 0.01 AND speculative_retry = '99PERCENTILE' AND caching = {'keys': 'ALL', 'rows_per_partition': 'NONE'} AND comment = 'it''s'",
    ) else {
        panic!()
    };
    assert_eq!(t.name.to_string(), "baselines.iot");
    assert_eq!(t.columns[2].name, Ident::new("time"));
    assert_eq!(t.columns[2].ty, TypeExpr::Native(NativeType::Timestamp));
    assert_eq!(
        t.primary_key.partition_key,
        vec![Ident::new("machine_id"), Ident::new("sensor_name")]
    );
    assert_eq!(t.primary_key.clustering_columns, vec![Ident::new("time")]);
    assert_eq!(
        t.options.clustering_order,
        vec![(Ident::new("time"), Order::Desc)]
    );
    let compaction = t
        .options
        .properties
        .iter()
        .find(|p| p.name == "compaction")
        .expect("compaction");
    assert_eq!(
        compaction.value.as_map().expect("map")[1],
        ("compaction_window_size".to_string(), "60".to_string())
    );
    let comment = t
        .options
        .properties
        .iter()
        .find(|p| p.name == "comment")
        .expect("comment");
    assert_eq!(comment.value.as_text().as_deref(), Some("it's"));
    let fp = t
        .options
        .properties
        .iter()
        .find(|p| p.name == "bloom_filter_fp_chance")
        .expect("fp");
    assert_eq!(
        fp.value,
        PropertyValue::Constant(Literal::Float("0.01".into()))
    );
}

#[test]
fn driver_in_marker_and_timeout() {
    let pm = crate::pm(
        "SELECT keyspace_name, table_name FROM system_schema.tables where keyspace_name in ? USING TIMEOUT 2000ms",
    );
    let Statement::Select(s) = pm.statement else {
        panic!()
    };
    assert_eq!(s.where_clause[0].op, Operator::In);
    assert!(matches!(
        s.where_clause[0].value,
        RelationValue::Single(Expr::Bind(_))
    ));
    assert_eq!(
        s.timeout,
        Some(Expr::Literal(Literal::Duration("2000ms".into())))
    );
    assert_eq!(pm.bind_markers.len(), 1);

    let Statement::Select(s) =
        p("SELECT * FROM system_schema.keyspaces WHERE keyspace_name IN ('a','b')")
    else {
        panic!()
    };
    assert_eq!(
        s.where_clause[0].value,
        RelationValue::List(vec![
            Expr::Literal(Literal::String("a".into())),
            Expr::Literal(Literal::String("b".into()))
        ])
    );
    let Statement::Select(s) = p(
        "SELECT * FROM system_schema.functions WHERE keyspace_name = 'ks' AND function_name = 'f' AND argument_types = ['int']",
    ) else {
        panic!()
    };
    assert_eq!(
        s.where_clause[2].value,
        RelationValue::Single(Expr::List(vec![Expr::Literal(Literal::String(
            "int".into()
        ))]))
    );
}

#[test]
fn describe_targets() {
    let d = |q: &str| match p(q) {
        Statement::Describe(d) => d,
        other => panic!("{other:?}"),
    };
    assert_eq!(d("DESC CLUSTER").target, DescribeTarget::Cluster);
    assert_eq!(
        d("DESCRIBE FULL SCHEMA").target,
        DescribeTarget::Schema { full: true }
    );
    assert_eq!(
        d("DESCRIBE ONLY KEYSPACE \"Ks\"").target,
        DescribeTarget::Keyspace {
            only: true,
            name: Some(Ident::quoted("Ks"))
        }
    );
    assert_eq!(
        d("DESCRIBE KEYSPACE").target,
        DescribeTarget::Keyspace {
            only: false,
            name: None
        }
    );
    assert_eq!(
        d("DESCRIBE TABLE t").target,
        DescribeTarget::Table(QualifiedName::new(None, Ident::new("t")))
    );
    assert_eq!(
        d("DESCRIBE ks.T").target,
        DescribeTarget::Generic(QualifiedName::new(Some(Ident::new("ks")), Ident::new("t")))
    );
    assert_eq!(
        d("DESCRIBE type").target,
        DescribeTarget::Generic(QualifiedName::new(None, Ident::new("type")))
    );
    assert_eq!(
        d("DESCRIBE TYPE address").target,
        DescribeTarget::Type(QualifiedName::new(None, Ident::new("address")))
    );
    assert!(d("DESCRIBE TABLE t WITH INTERNALS").with_internals);
    assert!(!d("DESCRIBE TABLES").with_internals);
}
