//! Server-side DESCRIBE (Cassandra 4+): CQL that recreates the schema.

use std::fmt::Write as _;
use std::sync::Arc;

use amphora_cql as ast;
use amphora_types::CqlType;
use amphora_types::UdtDef;
use amphora_types::cql_type::quote_ident;
use amphora_types::schema::{ClusteringOrder, ColumnKind, TableSchema};

use crate::api::*;
use crate::exec::Inner;
use crate::schema::{KeyspaceDef, Schema, is_system_keyspace};
use crate::system::text;

fn col(name: &str) -> ResultColumn {
    ResultColumn {
        keyspace: "system".into(),
        table: "describe".into(),
        name: name.into(),
        ty: CqlType::Text,
    }
}

fn rows(with_stmt: bool, items: Vec<(String, &str, String, String)>) -> QueryResult {
    let mut columns = vec![col("keyspace_name"), col("type"), col("name")];
    if with_stmt {
        columns.push(col("create_statement"));
    }
    let mut cells = Vec::new();
    let n = items.len();
    for (ks, ty, name, stmt) in items {
        cells.push(Some(text(&ks)));
        cells.push(Some(text(ty)));
        cells.push(Some(text(&name)));
        if with_stmt {
            cells.push(Some(text(&stmt)));
        }
    }
    QueryResult::Rows(ResultRows {
        columns: Arc::new(columns),
        cells,
        row_count: n,
        paging_state: None,
        no_metadata: false,
    })
}

fn q(s: &str) -> String {
    quote_ident(s)
}

fn cql_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn map_literal(m: &std::collections::BTreeMap<String, String>) -> String {
    let parts: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{}: {}", cql_literal(k), cql_literal(v)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// A double as Java's `Double.toString` prints it for the values table options take:
/// integral values keep a `.0` (`1.0`, not `1`).
fn java_double(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e7 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

pub fn keyspace_cql(ks: &KeyspaceDef) -> String {
    // Cassandra prints the strategies of its own `locator` package by their short name.
    let mut replication = ks.replication.clone();
    if let Some(class) = replication.get_mut("class")
        && let Some(short) = class.strip_prefix("org.apache.cassandra.locator.")
    {
        *class = short.to_string();
    }
    format!(
        "CREATE KEYSPACE {} WITH replication = {}  AND durable_writes = {};",
        q(&ks.name),
        map_literal(&replication),
        ks.durable_writes
    )
}

pub fn type_cql(u: &UdtDef) -> String {
    let mut s = format!("CREATE TYPE {}.{} (\n", q(&u.keyspace), q(&u.name));
    let fields: Vec<String> = u
        .field_names
        .iter()
        .zip(&u.field_types)
        .map(|(n, t)| format!("    {} {}", q(n), t))
        .collect();
    s.push_str(&fields.join(",\n"));
    s.push_str("\n);");
    s
}

pub fn table_cql(t: &TableSchema) -> String {
    let mut s = format!("CREATE TABLE {}.{} (\n", q(&t.keyspace), q(&t.name));
    let single_pk = t.partition_key.len() == 1 && t.clustering_key.is_empty();
    for id in crate::select::wildcard_columns(t) {
        let c = &t.columns[id as usize];
        let _ = write!(s, "    {} {}", q(&c.name), c.ty);
        if c.kind == ColumnKind::Static {
            s.push_str(" static");
        }
        if single_pk && c.kind == ColumnKind::PartitionKey {
            s.push_str(" PRIMARY KEY");
        }
        s.push_str(",\n");
    }
    if single_pk {
        s.truncate(s.len() - 2);
        s.push('\n');
    } else {
        let pk: Vec<String> = t
            .partition_key
            .iter()
            .map(|i| q(&t.columns[*i as usize].name))
            .collect();
        let pk = if pk.len() == 1 {
            pk[0].clone()
        } else {
            format!("({})", pk.join(", "))
        };
        let mut parts = vec![pk];
        parts.extend(
            t.clustering_key
                .iter()
                .map(|i| q(&t.columns[*i as usize].name)),
        );
        let _ = writeln!(s, "    PRIMARY KEY ({})", parts.join(", "));
    }
    s.push_str(") WITH ");
    let mut opts = Vec::new();
    if !t.clustering_key.is_empty() {
        let order: Vec<String> = t
            .clustering_key
            .iter()
            .map(|i| {
                let c = &t.columns[*i as usize];
                format!(
                    "{} {}",
                    q(&c.name),
                    if c.order == ClusteringOrder::Desc {
                        "DESC"
                    } else {
                        "ASC"
                    }
                )
            })
            .collect();
        opts.push(format!("CLUSTERING ORDER BY ({})", order.join(", ")));
    }
    let o = &t.options;
    opts.push(format!(
        "additional_write_policy = {}",
        cql_literal(&o.additional_write_policy)
    ));
    opts.push(format!("allow_auto_snapshot = {}", o.allow_auto_snapshot));
    opts.push(format!(
        "bloom_filter_fp_chance = {}",
        o.bloom_filter_fp_chance
    ));
    opts.push(format!("caching = {}", map_literal(&o.caching)));
    opts.push(format!("cdc = {}", o.cdc));
    opts.push(format!("comment = {}", cql_literal(&o.comment)));
    opts.push(format!("compaction = {}", map_literal(&o.compaction)));
    opts.push(format!("compression = {}", map_literal(&o.compression)));
    opts.push(format!("memtable = {}", cql_literal(&o.memtable)));
    opts.push(format!(
        "crc_check_chance = {}",
        java_double(o.crc_check_chance)
    ));
    opts.push(format!("default_time_to_live = {}", o.default_time_to_live));
    opts.push("extensions = {}".to_string());
    opts.push(format!("gc_grace_seconds = {}", o.gc_grace_seconds));
    opts.push(format!("incremental_backups = {}", o.incremental_backups));
    opts.push(format!("max_index_interval = {}", o.max_index_interval));
    opts.push(format!(
        "memtable_flush_period_in_ms = {}",
        o.memtable_flush_period_in_ms
    ));
    opts.push(format!("min_index_interval = {}", o.min_index_interval));
    opts.push(format!("read_repair = {}", cql_literal(&o.read_repair)));
    opts.push(format!(
        "speculative_retry = {}",
        cql_literal(&o.speculative_retry)
    ));
    s.push_str(&opts.join("\n    AND "));
    s.push(';');
    s
}

fn keyspace_items(ks: &KeyspaceDef, only: bool) -> Vec<(String, &'static str, String, String)> {
    let mut out = vec![(
        ks.name.clone(),
        "keyspace",
        ks.name.clone(),
        keyspace_cql(ks),
    )];
    if only {
        return out;
    }
    for u in ks.types.values() {
        out.push((ks.name.clone(), "type", u.name.clone(), type_cql(u)));
    }
    for t in ks.tables.values() {
        out.extend(table_items(ks, t));
    }
    out
}

/// A table followed by its indexes and views, as DESCRIBE TABLE lists them.
fn table_items(ks: &KeyspaceDef, t: &TableSchema) -> Vec<(String, &'static str, String, String)> {
    let mut out = vec![(ks.name.clone(), "table", t.name.clone(), table_cql(t))];
    for idx in crate::index::indexes_of(ks, t.id) {
        out.push((
            ks.name.clone(),
            "index",
            idx.name.clone(),
            index_cql(ks, idx, t),
        ));
    }
    for (name, v) in ks.views.iter().filter(|(_, v)| v.base == t.id) {
        out.push((
            ks.name.clone(),
            "materialized_view",
            name.clone(),
            crate::view::view_cql(v, t),
        ));
    }
    out
}

pub fn index_cql(ks: &KeyspaceDef, idx: &crate::schema::IndexDef, base: &TableSchema) -> String {
    let target = crate::index::target_string(idx, base);
    let on = format!("{}.{} ({target})", q(&ks.name), q(&base.name));
    match &idx.class {
        None => format!("CREATE INDEX {} ON {on};", q(&idx.name)),
        Some(c) => {
            let mut s = format!(
                "CREATE CUSTOM INDEX {} ON {on} USING {}",
                q(&idx.name),
                cql_literal(c)
            );
            if !idx.options.is_empty() {
                s.push_str(" WITH OPTIONS = ");
                s.push_str(&map_literal(&idx.options));
            }
            s.push(';');
            s
        }
    }
}

/// DESCRIBE FULL SCHEMA's items for a system keyspace (its tables are served virtually
/// here): a real one in Cassandra (`system`, `system_schema` ...) as CREATE KEYSPACE and
/// CREATE TABLE statements, a virtual one as Cassandra prints those: commented, for
/// reference.
fn system_keyspace_items(name: &str) -> Vec<(String, &'static str, String, String)> {
    let mut tables: Vec<&TableSchema> = crate::system::virtual_tables()
        .map(|t| &*t.schema)
        .filter(|t| t.keyspace == name)
        .collect();
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    if crate::system::VIRTUAL_KEYSPACES.contains(&name) {
        let mut out = vec![(
            name.to_string(),
            "keyspace",
            name.to_string(),
            format!(
                "/*\nWarning: Keyspace {0} is a virtual keyspace and cannot be recreated with CQL.\n\
                 Structure, for reference:\nVIRTUAL KEYSPACE {0};\n*/",
                q(name)
            ),
        )];
        for t in tables {
            out.push((
                name.to_string(),
                "table",
                t.name.clone(),
                format!(
                    "/*\nWarning: Table {}.{} is a virtual table and cannot be recreated with CQL.\n\
                     Structure, for reference:\n{}\n*/",
                    q(name),
                    q(&t.name),
                    virtual_table_cql(t)
                ),
            ));
        }
        return out;
    }
    let ks = KeyspaceDef::empty(
        name.to_string(),
        crate::system::system_keyspace_replication(name)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        true,
    );
    let mut out = vec![(
        name.to_string(),
        "keyspace",
        name.to_string(),
        keyspace_cql(&ks),
    )];
    for t in tables {
        out.push((name.to_string(), "table", t.name.clone(), table_cql(t)));
    }
    out
}

/// A virtual table's structure as Cassandra shows it: `VIRTUAL TABLE`, its columns and
/// key, and only its clustering order of the table options.
fn virtual_table_cql(t: &TableSchema) -> String {
    let full = table_cql(t);
    let body = full.strip_prefix("CREATE TABLE").unwrap_or(&full);
    let end = body.find(") WITH ").map_or(body.len(), |i| i + 1);
    let mut out = format!("VIRTUAL TABLE{}", &body[..end]);
    let rest = &body[end..];
    if let Some(order) = rest.strip_prefix(" WITH CLUSTERING ORDER BY ") {
        let order = order.split("\n").next().unwrap_or("");
        out.push_str(" WITH CLUSTERING ORDER BY ");
        out.push_str(order.trim_end_matches(';'));
    }
    out.push(';');
    out
}

fn user_keyspaces(s: &Schema) -> impl Iterator<Item = &KeyspaceDef> {
    s.keyspaces
        .values()
        .filter(|k| !is_system_keyspace(&k.name))
}

pub fn run(
    inner: &Inner,
    current: Option<&str>,
    d: &ast::Describe,
    _opts: &QueryOptions,
) -> Result<QueryResult, QueryError> {
    let schema = inner.schema();
    let ks_of = |n: &ast::QualifiedName| -> Result<String, QueryError> {
        n.keyspace
            .as_ref()
            .map(|k| k.name.clone())
            .or_else(|| current.map(str::to_string))
            .ok_or_else(|| QueryError::invalid("No keyspace specified and no current keyspace"))
    };
    let find_ks = |name: &str| -> Result<&KeyspaceDef, QueryError> {
        schema
            .keyspace(name)
            .ok_or_else(|| QueryError::invalid(format!("'{name}' not found in keyspaces")))
    };
    match &d.target {
        ast::DescribeTarget::Keyspaces => {
            let mut items: Vec<(String, &str, String, String)> = crate::schema::SYSTEM_KEYSPACES
                .iter()
                .map(|k| (k.to_string(), "keyspace", k.to_string(), String::new()))
                .collect();
            items.extend(
                schema
                    .keyspaces
                    .keys()
                    .map(|k| (k.clone(), "keyspace", k.clone(), String::new())),
            );
            items.sort_by_key(|a| a.0.to_lowercase());
            Ok(rows(false, items))
        }
        ast::DescribeTarget::Keyspace { only, name } => {
            let name = match name {
                Some(n) => n.name.clone(),
                None => current.map(str::to_string).ok_or_else(|| {
                    QueryError::invalid("No keyspace specified and no current keyspace")
                })?,
            };
            Ok(rows(true, keyspace_items(find_ks(&name)?, *only)))
        }
        ast::DescribeTarget::Tables => {
            let mut items = Vec::new();
            for ks in user_keyspaces(&schema).filter(|k| current.is_none_or(|c| c == k.name)) {
                for t in ks.tables.values() {
                    items.push((ks.name.clone(), "table", t.name.clone(), String::new()));
                }
            }
            Ok(rows(false, items))
        }
        ast::DescribeTarget::Types => {
            let mut items = Vec::new();
            for ks in user_keyspaces(&schema).filter(|k| current.is_none_or(|c| c == k.name)) {
                for t in ks.types.values() {
                    items.push((ks.name.clone(), "type", t.name.clone(), String::new()));
                }
            }
            Ok(rows(false, items))
        }
        ast::DescribeTarget::Functions | ast::DescribeTarget::Aggregates => {
            Ok(rows(false, Vec::new()))
        }
        ast::DescribeTarget::Table(n) => {
            let ks = ks_of(n)?;
            let t = schema.table(&ks, &n.name.name).cloned().or_else(|| {
                crate::system::virtual_table(&ks, &n.name.name).map(|v| v.schema.clone())
            });
            let t = t.ok_or_else(|| {
                QueryError::invalid(format!("Table '{ks}.{}' not found", n.name.name))
            })?;
            match schema.keyspace(&ks) {
                Some(k) if k.tables.contains_key(&t.name) => Ok(rows(true, table_items(k, &t))),
                _ => Ok(rows(
                    true,
                    vec![(ks, "table", t.name.clone(), table_cql(&t))],
                )),
            }
        }
        ast::DescribeTarget::Index(n) => {
            let ks = ks_of(n)?;
            let k = find_ks(&ks)?;
            let idx = k.indexes.get(&n.name.name).ok_or_else(|| {
                QueryError::invalid(format!("Index '{}' not found in '{ks}'", n.name.name))
            })?;
            let base = k
                .tables
                .values()
                .find(|t| t.id == idx.base)
                .ok_or_else(|| {
                    QueryError::Server(format!("index {} has no base table", idx.name))
                })?;
            Ok(rows(
                true,
                vec![(
                    ks.clone(),
                    "index",
                    idx.name.clone(),
                    index_cql(k, idx, base),
                )],
            ))
        }
        ast::DescribeTarget::MaterializedView(n) => {
            let ks = ks_of(n)?;
            let k = find_ks(&ks)?;
            let v = k.views.get(&n.name.name).ok_or_else(|| {
                QueryError::invalid(format!(
                    "Materialized view '{}' not found in '{ks}'",
                    n.name.name
                ))
            })?;
            let base = k.tables.values().find(|t| t.id == v.base).ok_or_else(|| {
                QueryError::Server(format!("view {} has no base table", n.name.name))
            })?;
            Ok(rows(
                true,
                vec![(
                    ks.clone(),
                    "materialized_view",
                    n.name.name.clone(),
                    crate::view::view_cql(v, base),
                )],
            ))
        }
        ast::DescribeTarget::Type(n) => {
            let ks = ks_of(n)?;
            let u = find_ks(&ks)?.types.get(&n.name.name).ok_or_else(|| {
                QueryError::invalid(format!(
                    "User defined type '{}' not found in '{ks}'",
                    n.name.name
                ))
            })?;
            Ok(rows(true, vec![(ks, "type", u.name.clone(), type_cql(u))]))
        }
        ast::DescribeTarget::Schema { full } => {
            // Cassandra lists every keyspace in name order; FULL adds the system ones.
            let mut names: Vec<&str> = user_keyspaces(&schema).map(|k| k.name.as_str()).collect();
            if *full {
                names.extend(crate::schema::SYSTEM_KEYSPACES);
            }
            names.sort_unstable();
            let mut items = Vec::new();
            for name in names {
                match schema.keyspace(name) {
                    Some(ks) if !is_system_keyspace(name) => {
                        items.extend(keyspace_items(ks, false))
                    }
                    _ => items.extend(system_keyspace_items(name)),
                }
            }
            Ok(rows(true, items))
        }
        ast::DescribeTarget::Cluster => {
            let columns = vec![col("cluster"), col("partitioner"), col("snitch")];
            let cells = vec![
                Some(text(&inner.shared.info.cluster_name)),
                Some(text("Murmur3Partitioner")),
                Some(text("SimpleSnitch")),
            ];
            Ok(QueryResult::Rows(ResultRows::single_row(
                Arc::new(columns),
                cells,
            )))
        }
        ast::DescribeTarget::Generic(n) => {
            if n.keyspace.is_none()
                && let Some(ks) = schema.keyspace(&n.name.name)
            {
                return Ok(rows(true, keyspace_items(ks, false)));
            }
            let ks = ks_of(n)?;
            if let Some(k) = schema.keyspace(&ks) {
                if let Some(t) = k.tables.get(&n.name.name) {
                    return Ok(rows(true, table_items(k, t)));
                }
                if let Some(idx) = k.indexes.get(&n.name.name)
                    && let Some(base) = k.tables.values().find(|t| t.id == idx.base)
                {
                    return Ok(rows(
                        true,
                        vec![(
                            ks.clone(),
                            "index",
                            idx.name.clone(),
                            index_cql(k, idx, base),
                        )],
                    ));
                }
                if let Some(v) = k.views.get(&n.name.name)
                    && let Some(base) = k.tables.values().find(|t| t.id == v.base)
                {
                    return Ok(rows(
                        true,
                        vec![(
                            ks.clone(),
                            "materialized_view",
                            n.name.name.clone(),
                            crate::view::view_cql(v, base),
                        )],
                    ));
                }
            }
            if let Some(u) = schema.keyspace(&ks).and_then(|k| k.types.get(&n.name.name)) {
                return Ok(rows(true, vec![(ks, "type", u.name.clone(), type_cql(u))]));
            }
            Err(QueryError::invalid(format!(
                "'{}' not found in keyspace '{ks}'",
                n.name.name
            )))
        }
        // Index/view/function/aggregate forms: syntax error so scylla-cqlsh falls back client-side.
        _ => Err(QueryError::Syntax(
            "This DESCRIBE form is not supported by Amphora yet".into(),
        )),
    }
}
