//! Virtual system tables drivers and cqlsh read (`system.local`, `system.peers*`,
//! `system_schema.*`, `system_virtual_schema.*` …), computed from the schema snapshot and
//! node facts, and the generic filter / projection / paging over them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use amphora_cql as ast;
use amphora_types::CqlType;
use amphora_types::schema::{
    ClusteringOrder, ColumnDef, ColumnKind, TableId, TableOptions, TableSchema,
};
use bytes::Bytes;

use crate::api::*;
use crate::coordinator::NodeInfo;
use crate::schema::{SYSTEM_KEYSPACES, Schema};
use crate::select::SelItem;
use crate::values::{EvalCtx, Value, eval, serialize_collection, serialize_map};

pub type Rows = Vec<Vec<Option<Bytes>>>;

pub struct VirtualTable {
    pub schema: Arc<TableSchema>,
    pub rows: fn(&Schema, &NodeInfo) -> Rows,
    /// Rows computed from every shard's storage instead (`size_estimates`); `rows` is
    /// then unused.
    pub from_storage: bool,
}

/// The rows of virtual table `v` now.
pub(crate) async fn virtual_rows(
    inner: &crate::exec::Inner,
    v: &VirtualTable,
    schema: &Schema,
) -> Result<Rows, QueryError> {
    if v.from_storage {
        size_estimate_rows(inner, schema).await
    } else {
        Ok((v.rows)(schema, &inner.shared.info))
    }
}

pub const RELEASE_VERSION: &str = "5.0.6";
pub const CQL_VERSION: &str = "3.4.7";
pub const PARTITIONER: &str = "org.apache.cassandra.dht.Murmur3Partitioner";

fn def(ks: &str, name: &str, cols: &[(&str, &str, char)]) -> Arc<TableSchema> {
    let mut pk = 0u16;
    let mut ck = 0u16;
    let columns = cols
        .iter()
        .map(|(n, t, k)| {
            let ty = CqlType::parse(t, &|_| None).unwrap_or(CqlType::Blob);
            let (kind, position) = match k {
                'p' => {
                    pk += 1;
                    (ColumnKind::PartitionKey, pk - 1)
                }
                'c' => {
                    ck += 1;
                    (ColumnKind::Clustering, ck - 1)
                }
                _ => (ColumnKind::Regular, 0),
            };
            ColumnDef {
                name: n.to_string(),
                ty,
                kind,
                position,
                order: ClusteringOrder::Asc,
            }
        })
        .collect();
    let id = TableId(u128::from_be_bytes(
        *uuid::Uuid::new_v5(
            &uuid::Uuid::NAMESPACE_OID,
            format!("{ks}.{name}").as_bytes(),
        )
        .as_bytes(),
    ));
    Arc::new(TableSchema::new(
        id,
        ks,
        name,
        columns,
        TableOptions::default(),
    ))
}

const TABLE_OPTION_COLS: &[(&str, &str, char)] = &[
    ("additional_write_policy", "text", 'r'),
    ("allow_auto_snapshot", "boolean", 'r'),
    ("bloom_filter_fp_chance", "double", 'r'),
    ("caching", "frozen<map<text, text>>", 'r'),
    ("cdc", "boolean", 'r'),
    ("comment", "text", 'r'),
    ("compaction", "frozen<map<text, text>>", 'r'),
    ("compression", "frozen<map<text, text>>", 'r'),
    ("crc_check_chance", "double", 'r'),
    ("dclocal_read_repair_chance", "double", 'r'),
    ("default_time_to_live", "int", 'r'),
    ("extensions", "frozen<map<text, blob>>", 'r'),
    ("flags", "frozen<set<text>>", 'r'),
    ("gc_grace_seconds", "int", 'r'),
    ("id", "uuid", 'r'),
    ("incremental_backups", "boolean", 'r'),
    ("max_index_interval", "int", 'r'),
    ("memtable", "text", 'r'),
    ("memtable_flush_period_in_ms", "int", 'r'),
    ("min_index_interval", "int", 'r'),
    ("read_repair", "text", 'r'),
    ("read_repair_chance", "double", 'r'),
    ("speculative_retry", "text", 'r'),
];

fn tables() -> &'static HashMap<(String, String), VirtualTable> {
    static T: OnceLock<HashMap<(String, String), VirtualTable>> = OnceLock::new();
    T.get_or_init(|| {
        let mut m = HashMap::new();
        let mut add = |ks: &str,
                       name: &str,
                       cols: &[(&str, &str, char)],
                       rows: fn(&Schema, &NodeInfo) -> Rows| {
            m.insert(
                (ks.to_string(), name.to_string()),
                VirtualTable {
                    schema: def(ks, name, cols),
                    rows,
                    from_storage: (ks, name) == ("system", "size_estimates"),
                },
            );
        };
        add(
            "system",
            "local",
            &[
                ("key", "text", 'p'),
                ("bootstrapped", "text", 'r'),
                ("broadcast_address", "inet", 'r'),
                ("broadcast_port", "int", 'r'),
                ("cluster_name", "text", 'r'),
                ("cql_version", "text", 'r'),
                ("data_center", "text", 'r'),
                ("gossip_generation", "int", 'r'),
                ("host_id", "uuid", 'r'),
                ("listen_address", "inet", 'r'),
                ("listen_port", "int", 'r'),
                ("native_protocol_version", "text", 'r'),
                ("partitioner", "text", 'r'),
                ("rack", "text", 'r'),
                ("release_version", "text", 'r'),
                ("rpc_address", "inet", 'r'),
                ("rpc_port", "int", 'r'),
                ("schema_version", "uuid", 'r'),
                ("tokens", "set<text>", 'r'),
                ("truncated_at", "map<uuid, blob>", 'r'),
            ],
            local_rows,
        );
        add(
            "system",
            "peers",
            &[
                ("peer", "inet", 'p'),
                ("data_center", "text", 'r'),
                ("host_id", "uuid", 'r'),
                ("preferred_ip", "inet", 'r'),
                ("rack", "text", 'r'),
                ("release_version", "text", 'r'),
                ("rpc_address", "inet", 'r'),
                ("schema_version", "uuid", 'r'),
                ("tokens", "set<text>", 'r'),
            ],
            no_rows,
        );
        add(
            "system",
            "peers_v2",
            &[
                ("peer", "inet", 'p'),
                ("peer_port", "int", 'c'),
                ("data_center", "text", 'r'),
                ("host_id", "uuid", 'r'),
                ("native_address", "inet", 'r'),
                ("native_port", "int", 'r'),
                ("preferred_ip", "inet", 'r'),
                ("preferred_port", "int", 'r'),
                ("rack", "text", 'r'),
                ("release_version", "text", 'r'),
                ("schema_version", "uuid", 'r'),
                ("tokens", "set<text>", 'r'),
            ],
            no_rows,
        );
        add(
            "system",
            "size_estimates",
            &[
                ("keyspace_name", "text", 'p'),
                ("table_name", "text", 'c'),
                ("range_start", "text", 'c'),
                ("range_end", "text", 'c'),
                ("mean_partition_size", "bigint", 'r'),
                ("partitions_count", "bigint", 'r'),
            ],
            no_rows,
        );
        add(
            "system_schema",
            "keyspaces",
            &[
                ("keyspace_name", "text", 'p'),
                ("durable_writes", "boolean", 'r'),
                ("replication", "frozen<map<text, text>>", 'r'),
            ],
            keyspace_rows,
        );
        let mut tcols = vec![("keyspace_name", "text", 'p'), ("table_name", "text", 'c')];
        tcols.extend_from_slice(TABLE_OPTION_COLS);
        add("system_schema", "tables", &tcols, table_rows);
        add(
            "system_schema",
            "columns",
            &[
                ("keyspace_name", "text", 'p'),
                ("table_name", "text", 'c'),
                ("column_name", "text", 'c'),
                ("clustering_order", "text", 'r'),
                ("column_name_bytes", "blob", 'r'),
                ("kind", "text", 'r'),
                ("position", "int", 'r'),
                ("type", "text", 'r'),
            ],
            column_rows,
        );
        add(
            "system_schema",
            "dropped_columns",
            &[
                ("keyspace_name", "text", 'p'),
                ("table_name", "text", 'c'),
                ("column_name", "text", 'c'),
                ("dropped_time", "timestamp", 'r'),
                ("kind", "text", 'r'),
                ("type", "text", 'r'),
            ],
            dropped_column_rows,
        );
        add(
            "system_schema",
            "triggers",
            &[
                ("keyspace_name", "text", 'p'),
                ("table_name", "text", 'c'),
                ("trigger_name", "text", 'c'),
                ("options", "frozen<map<text, text>>", 'r'),
            ],
            no_rows,
        );
        let mut vcols = vec![
            ("keyspace_name", "text", 'p'),
            ("view_name", "text", 'c'),
            ("base_table_id", "uuid", 'r'),
            ("base_table_name", "text", 'r'),
            ("include_all_columns", "boolean", 'r'),
            ("where_clause", "text", 'r'),
        ];
        vcols.extend_from_slice(TABLE_OPTION_COLS);
        add("system_schema", "views", &vcols, view_rows);
        add(
            "system_schema",
            "indexes",
            &[
                ("keyspace_name", "text", 'p'),
                ("table_name", "text", 'c'),
                ("index_name", "text", 'c'),
                ("kind", "text", 'r'),
                ("options", "frozen<map<text, text>>", 'r'),
            ],
            index_rows,
        );
        add(
            "system_schema",
            "types",
            &[
                ("keyspace_name", "text", 'p'),
                ("type_name", "text", 'c'),
                ("field_names", "frozen<list<text>>", 'r'),
                ("field_types", "frozen<list<text>>", 'r'),
            ],
            type_rows,
        );
        add(
            "system_schema",
            "functions",
            &[
                ("keyspace_name", "text", 'p'),
                ("function_name", "text", 'c'),
                ("argument_types", "frozen<list<text>>", 'c'),
                ("argument_names", "frozen<list<text>>", 'r'),
                ("body", "text", 'r'),
                ("called_on_null_input", "boolean", 'r'),
                ("language", "text", 'r'),
                ("return_type", "text", 'r'),
            ],
            no_rows,
        );
        add(
            "system_schema",
            "aggregates",
            &[
                ("keyspace_name", "text", 'p'),
                ("aggregate_name", "text", 'c'),
                ("argument_types", "frozen<list<text>>", 'c'),
                ("final_func", "text", 'r'),
                ("initcond", "text", 'r'),
                ("return_type", "text", 'r'),
                ("state_func", "text", 'r'),
                ("state_type", "text", 'r'),
            ],
            no_rows,
        );
        add(
            "system_schema",
            "scylla_tables",
            &[
                ("keyspace_name", "text", 'p'),
                ("table_name", "text", 'c'),
                ("cdc", "frozen<map<text, text>>", 'r'),
                ("in_memory", "boolean", 'r'),
                ("partitioner", "text", 'r'),
                ("version", "uuid", 'r'),
            ],
            scylla_table_rows,
        );
        add(
            "system_virtual_schema",
            "keyspaces",
            &[("keyspace_name", "text", 'p')],
            |_, _| vec![vec![Some(text("system_virtual_schema"))]],
        );
        add(
            "system_virtual_schema",
            "tables",
            &[
                ("keyspace_name", "text", 'p'),
                ("table_name", "text", 'c'),
                ("comment", "text", 'r'),
            ],
            virtual_table_rows,
        );
        add(
            "system_virtual_schema",
            "columns",
            &[
                ("keyspace_name", "text", 'p'),
                ("table_name", "text", 'c'),
                ("column_name", "text", 'c'),
                ("clustering_order", "text", 'r'),
                ("column_name_bytes", "blob", 'r'),
                ("kind", "text", 'r'),
                ("position", "int", 'r'),
                ("type", "text", 'r'),
            ],
            virtual_column_rows,
        );
        add(
            "system_traces",
            "sessions",
            &[
                ("session_id", "uuid", 'p'),
                ("client", "inet", 'r'),
                ("command", "text", 'r'),
                ("coordinator", "inet", 'r'),
                ("coordinator_port", "int", 'r'),
                ("duration", "int", 'r'),
                ("parameters", "map<text, text>", 'r'),
                ("request", "text", 'r'),
                ("started_at", "timestamp", 'r'),
            ],
            trace_session_rows,
        );
        add(
            "system_traces",
            "events",
            &[
                ("session_id", "uuid", 'p'),
                ("event_id", "timeuuid", 'c'),
                ("activity", "text", 'r'),
                ("source", "inet", 'r'),
                ("source_elapsed", "int", 'r'),
                ("source_port", "int", 'r'),
                ("thread", "text", 'r'),
            ],
            trace_event_rows,
        );
        add(
            "system_auth",
            "roles",
            &[
                ("role", "text", 'p'),
                ("can_login", "boolean", 'r'),
                ("is_superuser", "boolean", 'r'),
                ("member_of", "set<text>", 'r'),
                ("salted_hash", "text", 'r'),
            ],
            |_, _| {
                vec![vec![
                    Some(text("cassandra")),
                    Some(boolean(true)),
                    Some(boolean(true)),
                    None,
                    None,
                ]]
            },
        );
        m
    })
}

pub fn virtual_table(ks: &str, name: &str) -> Option<&'static VirtualTable> {
    if !ks.starts_with("system") {
        return None;
    }
    tables().get(&(ks.to_string(), name.to_string()))
}

pub fn virtual_tables() -> impl Iterator<Item = &'static VirtualTable> {
    tables().values()
}

pub fn text(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}
fn boolean(b: bool) -> Bytes {
    Bytes::copy_from_slice(&[u8::from(b)])
}
fn int(v: i32) -> Bytes {
    Bytes::copy_from_slice(&v.to_be_bytes())
}
fn double(v: f64) -> Bytes {
    Bytes::copy_from_slice(&v.to_be_bytes())
}
fn inet(a: IpAddr) -> Bytes {
    match a {
        IpAddr::V4(a) => Bytes::copy_from_slice(&a.octets()),
        IpAddr::V6(a) => Bytes::copy_from_slice(&a.octets()),
    }
}
fn uuid16(u: [u8; 16]) -> Bytes {
    Bytes::copy_from_slice(&u)
}
fn text_set<'a>(items: impl Iterator<Item = &'a str>) -> Bytes {
    let mut v: Vec<&str> = items.collect();
    v.sort();
    serialize_collection(v.into_iter().map(|s| Some(s.as_bytes())))
}
fn text_list<'a>(items: impl Iterator<Item = &'a str>) -> Bytes {
    serialize_collection(items.map(|s| Some(s.as_bytes())))
}
fn text_map<'a>(items: impl Iterator<Item = (&'a str, &'a str)>) -> Bytes {
    let mut v: Vec<(&str, &str)> = items.collect();
    v.sort();
    serialize_map(v.into_iter().map(|(k, v)| (k.as_bytes(), v.as_bytes())))
}

/// The node's tokens (num_tokens = 16, evenly spread, offset by the host id).
pub fn node_tokens(info: &NodeInfo) -> Vec<i64> {
    let offset = i64::from_be_bytes([
        info.host_id[0],
        info.host_id[1],
        info.host_id[2],
        info.host_id[3],
        info.host_id[4],
        info.host_id[5],
        info.host_id[6],
        info.host_id[7],
    ]);
    let step = (u64::MAX / 16) as i64;
    (0..16i64)
        .map(|i| offset.wrapping_add(step.wrapping_mul(i)))
        .collect()
}

fn no_rows(_: &Schema, _: &NodeInfo) -> Rows {
    Vec::new()
}

/// `system_traces.sessions`: the node's finished trace sessions (amphora_trace's store).
fn trace_session_rows(_: &Schema, _: &NodeInfo) -> Rows {
    amphora_trace::store()
        .sessions()
        .iter()
        .map(|s| {
            let i = &s.info;
            vec![
                Some(uuid16(i.session_id)),
                Some(inet(i.client)),
                Some(text(&i.command)),
                Some(inet(i.coordinator)),
                Some(int(i.coordinator_port)),
                Some(int(s.duration_us)),
                Some(text_map(
                    i.parameters.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                )),
                Some(text(&i.request)),
                Some(Bytes::copy_from_slice(&i.started_at_ms.to_be_bytes())),
            ]
        })
        .collect()
}

/// `system_traces.events`: every event of the finished sessions, in recording order.
fn trace_event_rows(_: &Schema, _: &NodeInfo) -> Rows {
    let mut rows = Vec::new();
    for s in amphora_trace::store().sessions() {
        for e in &s.events {
            rows.push(vec![
                Some(uuid16(s.info.session_id)),
                Some(uuid16(e.event_id)),
                Some(text(&e.activity)),
                Some(inet(s.info.coordinator)),
                Some(int(e.source_elapsed_us)),
                Some(int(s.info.coordinator_port)),
                Some(text(&e.thread)),
            ]);
        }
    }
    rows
}

fn local_rows(s: &Schema, n: &NodeInfo) -> Rows {
    let tokens: Vec<String> = node_tokens(n).iter().map(|t| t.to_string()).collect();
    vec![vec![
        Some(text("local")),
        Some(text("COMPLETED")),
        Some(inet(n.listen_address)),
        Some(int(7000)),
        Some(text(&n.cluster_name)),
        Some(text(CQL_VERSION)),
        Some(text("datacenter1")),
        Some(int(1)),
        Some(uuid16(n.host_id)),
        Some(inet(n.listen_address)),
        Some(int(7000)),
        Some(text("5")),
        Some(text(PARTITIONER)),
        Some(text("rack1")),
        Some(text(RELEASE_VERSION)),
        Some(inet(n.listen_address)),
        Some(int(n.native_port as i32)),
        Some(uuid16(s.version)),
        Some(text_set(tokens.iter().map(|t| t.as_str()))),
        None,
    ]]
}

pub(crate) fn system_keyspace_replication(name: &str) -> Vec<(&'static str, &'static str)> {
    match name {
        "system_auth" | "system_distributed" | "system_traces" => vec![
            ("class", "org.apache.cassandra.locator.SimpleStrategy"),
            (
                "replication_factor",
                // Cassandra 5.0's defaults on a new node.
                match name {
                    "system_distributed" => "3",
                    "system_traces" => "2",
                    _ => "1",
                },
            ),
        ],
        _ => vec![("class", "org.apache.cassandra.locator.LocalStrategy")],
    }
}

fn keyspace_rows(s: &Schema, _: &NodeInfo) -> Rows {
    let mut rows: Rows = SYSTEM_KEYSPACES
        .iter()
        .filter(|k| **k != "system_virtual_schema")
        .map(|k| {
            vec![
                Some(text(k)),
                Some(boolean(true)),
                Some(text_map(system_keyspace_replication(k).into_iter())),
            ]
        })
        .collect();
    for ks in s.keyspaces.values() {
        rows.push(vec![
            Some(text(&ks.name)),
            Some(boolean(ks.durable_writes)),
            Some(text_map(
                ks.replication.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )),
        ]);
    }
    rows
}

/// Every table: user tables and our virtual system tables (system_virtual_schema excluded).
fn all_tables(s: &Schema) -> Vec<Arc<TableSchema>> {
    let mut out: Vec<Arc<TableSchema>> = virtual_tables()
        .filter(|v| v.schema.keyspace != "system_virtual_schema")
        .map(|v| v.schema.clone())
        .collect();
    out.extend(s.user_tables().cloned());
    out.sort_by(|a, b| {
        (a.keyspace.as_str(), a.name.as_str()).cmp(&(b.keyspace.as_str(), b.name.as_str()))
    });
    out
}

fn index_rows(s: &Schema, _: &NodeInfo) -> Rows {
    let mut rows: Vec<(String, String, String, Vec<Option<Bytes>>)> = Vec::new();
    for ks in s.keyspaces.values() {
        for idx in ks.indexes.values() {
            let Some(base) = ks.tables.values().find(|t| t.id == idx.base) else {
                continue;
            };
            let (kind, options) = crate::index::kind_and_options(idx, base);
            rows.push((
                ks.name.clone(),
                base.name.clone(),
                idx.name.clone(),
                vec![
                    Some(text(&ks.name)),
                    Some(text(&base.name)),
                    Some(text(&idx.name)),
                    Some(text(kind)),
                    Some(text_map(
                        options.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                    )),
                ],
            ));
        }
    }
    rows.sort_by(|a, b| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)));
    rows.into_iter().map(|r| r.3).collect()
}

fn dropped_column_rows(s: &Schema, _: &NodeInfo) -> Rows {
    let mut rows = Vec::new();
    for t in s.user_tables() {
        let mut cols: Vec<(&str, i64, &amphora_types::schema::ColumnDef)> = t
            .dropped_columns
            .iter()
            .filter_map(|(id, at)| t.column_by_id(*id).map(|c| (c.name.as_str(), *at, c)))
            .collect();
        cols.sort_by(|a, b| a.0.cmp(b.0));
        // A name dropped twice shows its latest drop.
        cols.dedup_by(|a, b| {
            if a.0 == b.0 {
                b.1 = b.1.max(a.1);
                true
            } else {
                false
            }
        });
        for (name, at, c) in cols {
            rows.push(vec![
                Some(text(&t.keyspace)),
                Some(text(&t.name)),
                Some(text(name)),
                Some(Bytes::copy_from_slice(&(at / 1000).to_be_bytes())),
                Some(text(if c.kind == ColumnKind::Static {
                    "static"
                } else {
                    "regular"
                })),
                Some(text(&c.ty.to_string())),
            ]);
        }
    }
    rows.sort_by(|a, b| (&a[0], &a[1]).cmp(&(&b[0], &b[1])));
    rows
}

fn view_rows(s: &Schema, _: &NodeInfo) -> Rows {
    let mut rows = Vec::new();
    for ks in s.keyspaces.values() {
        for (name, v) in &ks.views {
            let base = ks
                .tables
                .values()
                .find(|t| t.id == v.base)
                .map(|t| t.name.clone())
                .unwrap_or_default();
            let mut row = vec![
                Some(text(&ks.name)),
                Some(text(name)),
                Some(uuid16(v.base.to_bytes())),
                Some(text(&base)),
                Some(boolean(v.include_all)),
                Some(text(&v.where_text)),
            ];
            row.extend(table_row(&v.table).into_iter().skip(2));
            rows.push(row);
        }
    }
    rows
}

fn table_rows(s: &Schema, _: &NodeInfo) -> Rows {
    all_tables(s).iter().map(|t| table_row(t)).collect()
}

fn table_row(t: &TableSchema) -> Vec<Option<Bytes>> {
    {
        {
            let o = &t.options;
            let flags: Vec<&str> = if t.is_counter {
                vec!["compound", "counter"]
            } else {
                vec!["compound"]
            };
            vec![
                Some(text(&t.keyspace)),
                Some(text(&t.name)),
                Some(text(&o.additional_write_policy)),
                Some(boolean(o.allow_auto_snapshot)),
                Some(double(o.bloom_filter_fp_chance)),
                Some(text_map(
                    o.caching.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                )),
                // Cassandra 5.0 writes the cdc cell only when it is true.
                o.cdc.then(|| boolean(true)),
                Some(text(&o.comment)),
                Some(text_map(
                    o.compaction.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                )),
                Some(text_map(
                    o.compression.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                )),
                Some(double(o.crc_check_chance)),
                Some(double(0.0)),
                Some(int(o.default_time_to_live)),
                Some(serialize_map(
                    o.extensions.iter().map(|(k, v)| (k.as_bytes(), &v[..])),
                )),
                Some(text_set(flags.into_iter())),
                Some(int(o.gc_grace_seconds)),
                Some(uuid16(t.id.to_bytes())),
                Some(boolean(o.incremental_backups)),
                Some(int(o.max_index_interval)),
                Some(text(&o.memtable)),
                Some(int(o.memtable_flush_period_in_ms)),
                Some(int(o.min_index_interval)),
                Some(text(&o.read_repair)),
                Some(double(0.0)),
                Some(text(&o.speculative_retry)),
            ]
        }
    }
}

fn column_rows(s: &Schema, _: &NodeInfo) -> Rows {
    let mut rows = Vec::new();
    let mut tables = all_tables(s);
    tables.extend(
        s.keyspaces
            .values()
            .flat_map(|k| k.views.values().map(|v| v.table.clone())),
    );
    tables.sort_by(|a, b| {
        (a.keyspace.as_str(), a.name.as_str()).cmp(&(b.keyspace.as_str(), b.name.as_str()))
    });
    for t in tables {
        column_rows_of(&t, &mut rows);
    }
    rows
}

/// The keyspaces whose tables are virtual (listed by `system_virtual_schema`, not
/// `system_schema`), as Cassandra's `system_virtual_schema.keyspaces` lists them.
pub(crate) const VIRTUAL_KEYSPACES: &[&str] = &["system_virtual_schema"];

/// The virtual tables of [`VIRTUAL_KEYSPACES`], by keyspace and name.
fn virtual_keyspace_tables() -> Vec<&'static TableSchema> {
    let mut v: Vec<&TableSchema> = virtual_tables()
        .map(|t| &*t.schema)
        .filter(|t| VIRTUAL_KEYSPACES.contains(&t.keyspace.as_str()))
        .collect();
    v.sort_by(|a, b| (&a.keyspace, &a.name).cmp(&(&b.keyspace, &b.name)));
    v
}

fn virtual_table_rows(_: &Schema, _: &NodeInfo) -> Rows {
    virtual_keyspace_tables()
        .into_iter()
        .map(|t| {
            let comment = match t.name.as_str() {
                "keyspaces" => "virtual keyspace definitions",
                "tables" => "virtual table definitions",
                "columns" => "virtual column definitions",
                _ => "",
            };
            vec![
                Some(text(&t.keyspace)),
                Some(text(&t.name)),
                Some(text(comment)),
            ]
        })
        .collect()
}

fn virtual_column_rows(_: &Schema, _: &NodeInfo) -> Rows {
    let mut rows = Vec::new();
    for t in virtual_keyspace_tables() {
        column_rows_of(t, &mut rows);
    }
    rows
}

/// One `system_schema.columns` / `system_virtual_schema.columns` row per live column of `t`.
fn column_rows_of(t: &TableSchema, rows: &mut Rows) {
    for (_, c) in t.live_columns() {
        let (kind, position, order) = match c.kind {
            ColumnKind::PartitionKey => ("partition_key", c.position as i32, "none"),
            ColumnKind::Clustering => (
                "clustering",
                c.position as i32,
                if c.order == ClusteringOrder::Desc {
                    "desc"
                } else {
                    "asc"
                },
            ),
            ColumnKind::Static => ("static", -1, "none"),
            ColumnKind::Regular => ("regular", -1, "none"),
        };
        rows.push(vec![
            Some(text(&t.keyspace)),
            Some(text(&t.name)),
            Some(text(&c.name)),
            Some(text(order)),
            Some(text(&c.name)),
            Some(text(kind)),
            Some(int(position)),
            Some(text(&c.ty.to_string())),
        ]);
    }
}

fn type_rows(s: &Schema, _: &NodeInfo) -> Rows {
    let mut rows = Vec::new();
    for ks in s.keyspaces.values() {
        for u in ks.types.values() {
            let types: Vec<String> = u.field_types.iter().map(|t| t.to_string()).collect();
            rows.push(vec![
                Some(text(&ks.name)),
                Some(text(&u.name)),
                Some(text_list(u.field_names.iter().map(|s| s.as_str()))),
                Some(text_list(types.iter().map(|s| s.as_str()))),
            ]);
        }
    }
    rows
}

fn scylla_table_rows(s: &Schema, _: &NodeInfo) -> Rows {
    all_tables(s)
        .iter()
        .map(|t| {
            vec![
                Some(text(&t.keyspace)),
                Some(text(&t.name)),
                None,
                Some(boolean(false)),
                None,
                Some(uuid16(s.version)),
            ]
        })
        .collect()
}

/// SELECT over a virtual table: WHERE as row filters, projection, LIMIT, offset paging.
pub fn select_virtual(
    t: &TableSchema,
    mut rows: Rows,
    s: &ast::SelectStatement,
    items: &[SelItem],
    columns: Arc<Vec<ResultColumn>>,
    ctx: &EvalCtx<'_>,
    opts: &QueryOptions,
) -> Result<QueryResult, QueryError> {
    use std::cmp::Ordering::Equal;
    // Sort by primary key so paging and output order are stable.
    let key_cols: Vec<usize> = t
        .partition_key
        .iter()
        .chain(&t.clustering_key)
        .map(|i| *i as usize)
        .collect();
    rows.sort_by(|a, b| {
        for &i in &key_cols {
            let o = match (&a[i], &b[i]) {
                (Some(x), Some(y)) => t.columns[i].ty.compare(x, y),
                (x, y) => x.is_some().cmp(&y.is_some()),
            };
            if o != Equal {
                return o;
            }
        }
        Equal
    });
    for rel in &s.where_clause {
        let ast::RelationTarget::Column(c) = &rel.target else {
            return Err(QueryError::invalid(
                "Only column restrictions are supported on system tables",
            ));
        };
        let (id, d) = t
            .column(&c.name)
            .ok_or_else(|| QueryError::invalid(format!("Undefined column name {}", c.name)))?;
        let id = id as usize;
        let wanted: Vec<Bytes> = match (&rel.value, rel.op) {
            (ast::RelationValue::List(items), _) => items
                .iter()
                .map(|e| eval(e, &d.ty, ctx, &d.name))
                .filter_map(|v| match v {
                    Ok(Value::Set(b)) => Some(Ok(b)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                })
                .collect::<Result<_, _>>()?,
            (ast::RelationValue::Single(e), ast::Operator::In) => {
                let lt = CqlType::List {
                    elem: Box::new(d.ty.clone()),
                    frozen: true,
                };
                match eval(e, &lt, ctx, &d.name)? {
                    Value::Set(b) => amphora_types::cql_type::split_collection(&b, 1)
                        .map_err(QueryError::Invalid)?
                        .into_iter()
                        .flatten()
                        .map(Bytes::copy_from_slice)
                        .collect(),
                    _ => Vec::new(),
                }
            }
            (ast::RelationValue::Single(e), _) => match eval(e, &d.ty, ctx, &d.name)? {
                Value::Set(b) => vec![b],
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        let op = rel.op;
        let ty = d.ty.clone();
        rows.retain(|r| {
            let Some(v) = &r[id] else { return false };
            match op {
                ast::Operator::Eq | ast::Operator::In => {
                    wanted.iter().any(|w| ty.compare(v, w) == Equal)
                }
                ast::Operator::Gt => wanted.first().is_some_and(|w| ty.compare(v, w).is_gt()),
                ast::Operator::Gte => wanted.first().is_some_and(|w| ty.compare(v, w).is_ge()),
                ast::Operator::Lt => wanted.first().is_some_and(|w| ty.compare(v, w).is_lt()),
                ast::Operator::Lte => wanted.first().is_some_and(|w| ty.compare(v, w).is_le()),
                ast::Operator::Contains => true,
                _ => true,
            }
        });
    }
    let count_only = items.iter().any(|i| {
        matches!(
            i.sel,
            crate::selector::Sel::Agg {
                f: crate::selector::AggFn::CountRows,
                ..
            }
        )
    });
    if count_only {
        let n = rows.len() as i64;
        return Ok(QueryResult::Rows(ResultRows {
            columns,
            cells: vec![Some(Bytes::copy_from_slice(&n.to_be_bytes()))],
            row_count: 1,
            paging_state: None,
            no_metadata: opts.skip_metadata,
        }));
    }
    let offset = match &opts.paging_state {
        Some(b) if b.len() == 5 && b[0] == 2 => {
            u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize
        }
        Some(b) if !b.is_empty() => {
            return Err(QueryError::invalid("Invalid value for the paging state"));
        }
        _ => 0,
    };
    let limit = match &s.limit {
        Some(e) => match eval(e, &CqlType::Int, ctx, "[limit]")? {
            Value::Set(b) if b.len() == 4 => {
                i32::from_be_bytes([b[0], b[1], b[2], b[3]]).max(0) as usize
            }
            _ => usize::MAX,
        },
        None => usize::MAX,
    };
    let total = rows.len().min(limit);
    let page = opts
        .page_size
        .filter(|p| *p > 0)
        .map(|p| p as usize)
        .unwrap_or(usize::MAX);
    let end = total.min(offset.saturating_add(page));
    let mut cells = Vec::new();
    for r in rows.iter().take(end).skip(offset) {
        for it in items {
            match it.sel {
                crate::selector::Sel::Column(id) => {
                    cells.push(r.get(id as usize).cloned().flatten())
                }
                _ => cells.push(None),
            }
        }
    }
    let paging_state = if end < total {
        let mut b = vec![2u8];
        b.extend_from_slice(&(end as u32).to_be_bytes());
        Some(Bytes::from(b))
    } else {
        None
    };
    Ok(QueryResult::Rows(ResultRows {
        columns,
        cells,
        row_count: end.saturating_sub(offset),
        paging_state,
        no_metadata: opts.skip_metadata,
    }))
}

/// LIST ROLES / USERS with the built-in superuser.
pub fn list_roles(st: &ast::Statement) -> Result<QueryResult, QueryError> {
    let col = |name: &str, ty: CqlType| ResultColumn {
        keyspace: "system_auth".into(),
        table: "roles".into(),
        name: name.into(),
        ty,
    };
    let (columns, cells) = match st {
        ast::Statement::ListUsers | ast::Statement::ListSuperUsers => (
            vec![
                col("name", CqlType::Text),
                col("super", CqlType::Boolean),
                col("datacenters", CqlType::Text),
            ],
            vec![
                Some(text("cassandra")),
                Some(boolean(true)),
                Some(text("ALL")),
            ],
        ),
        _ => (
            vec![
                col("role", CqlType::Text),
                col("super", CqlType::Boolean),
                col("login", CqlType::Boolean),
                col(
                    "options",
                    CqlType::Map {
                        key: Box::new(CqlType::Text),
                        value: Box::new(CqlType::Text),
                        frozen: false,
                    },
                ),
                col("datacenters", CqlType::Text),
            ],
            vec![
                Some(text("cassandra")),
                Some(boolean(true)),
                Some(boolean(true)),
                Some(text_map(std::iter::empty())),
                Some(text("ALL")),
            ],
        ),
    };
    Ok(QueryResult::Rows(ResultRows::single_row(
        Arc::new(columns),
        cells,
    )))
}

/// The node's primary token ranges `(start, end]` as Cassandra writes them in
/// `system.size_estimates`: unwrapped, so the range through the ring's end is split at the
/// minimum token.
pub fn local_token_ranges(info: &NodeInfo) -> Vec<(i64, i64)> {
    let mut tokens = node_tokens(info);
    tokens.sort_unstable();
    tokens.dedup();
    let mut out = Vec::with_capacity(tokens.len() + 1);
    for w in tokens.windows(2) {
        out.push((w[0], w[1]));
    }
    if let (Some(&first), Some(&last)) = (tokens.first(), tokens.last()) {
        out.push((last, i64::MIN));
        if first != i64::MIN {
            out.push((i64::MIN, first));
        }
    }
    out
}

/// `system.size_estimates`, computed when read (Cassandra refreshes it every 5 minutes):
/// for every user table and every primary range of this node, the partitions estimated in
/// the range (the table's partitions on every shard, memtables included, spread over the
/// ring in proportion to the range's width) and the mean partition size (uncompressed
/// bytes in SSTables per SSTable partition; memtable bytes while nothing is flushed).
async fn size_estimate_rows(
    inner: &crate::exec::Inner,
    schema: &Schema,
) -> Result<Rows, QueryError> {
    let tables: Vec<Arc<TableSchema>> = schema.user_tables().cloned().collect();
    let ids: Vec<TableId> = tables.iter().map(|t| t.id).collect();
    let per_shard = inner
        .shared
        .shards
        .submit_to_all(move |_shard| {
            let ids = ids.clone();
            async move {
                let db = amphora_replica::local().map_err(|e| e.to_string())?;
                Ok::<_, String>(
                    ids.iter()
                        .map(|id| db.storage().table_stats(*id).unwrap_or_default())
                        .collect::<Vec<_>>(),
                )
            }
        })
        .await
        .map_err(|e| QueryError::Server(e.to_string()))?;
    let mut totals = vec![amphora_storage::TableStats::default(); tables.len()];
    for shard in per_shard {
        let shard = shard.map_err(QueryError::Server)?;
        for (total, st) in totals.iter_mut().zip(shard) {
            total.memtable_bytes += st.memtable_bytes;
            total.memtable_partitions += st.memtable_partitions;
            total.sstable_uncompressed_bytes += st.sstable_uncompressed_bytes;
            total.estimated_partitions += st.estimated_partitions;
        }
    }
    let ranges = local_token_ranges(&inner.shared.info);
    let ring = 2f64.powi(64);
    let bigint = |v: i64| Bytes::copy_from_slice(&v.to_be_bytes());
    let mut rows = Rows::new();
    for (t, st) in tables.iter().zip(&totals) {
        let flushed = st
            .estimated_partitions
            .saturating_sub(st.memtable_partitions);
        let mean = st
            .sstable_uncompressed_bytes
            .checked_div(flushed)
            .or_else(|| st.memtable_bytes.checked_div(st.memtable_partitions))
            .unwrap_or(0);
        for &(start, end) in &ranges {
            let width = if end == i64::MIN {
                (i64::MAX as i128 - start as i128 + 1) as f64
            } else {
                (end as i128 - start as i128) as f64
            };
            let count = (st.estimated_partitions as f64 * width / ring).round() as i64;
            rows.push(vec![
                Some(text(&t.keyspace)),
                Some(text(&t.name)),
                Some(text(&start.to_string())),
                Some(text(&end.to_string())),
                Some(bigint(mean as i64)),
                Some(bigint(count)),
            ]);
        }
    }
    Ok(rows)
}
