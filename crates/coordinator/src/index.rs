//! Local secondary indexes.
//!
//! An index is a hidden table per node (`IndexDef::backing`): its partition key is the
//! indexed value, its clustering is the base row's token, serialized partition key and
//! clustering, so entries of one value come in ring order, the same order a full scan
//! returns rows in (and the paging state of an index query is the base table's).
//! Entries are written through the normal mutation path, next to the base write, on the
//! shard owning the indexed value. Nothing deletes them: a query re-reads each base row
//! and re-checks every restriction, so entries left by updates, deletions and TTL
//! expiry are filtered out at read time (as Cassandra does).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use amphora_cql as ast;
use amphora_storage::{PartitionData, PartitionRange, ReadCommand};
use amphora_types::CqlType;
use amphora_types::data::{
    Cell, Clustering, ClusteringBound, ClusteringSlice, ColumnData, LivenessInfo, Mutation,
    PartitionKey, PartitionUpdate, Row,
};
use amphora_types::schema::{
    ClusteringOrder, ColumnDef, ColumnKind, TableId, TableOptions, TableSchema,
};
use amphora_types::token::shard_of;
use bytes::Bytes;

use crate::api::*;
use crate::exec::Inner;
use crate::restrict::{Filter, Restrictions};
use crate::schema::{DdlOutcome, IndexDef, IndexTarget, KeyspaceDef, Schema};

/// Entries read from an index partition per round trip of an index query.
pub const INDEX_READ_CHUNK_ROWS: u32 = 512;
/// Base rows read per round trip while building an index or a view.
pub const BUILD_READ_CHUNK_ROWS: u32 = 1000;
/// Longest indexed value: index entries are partition keys.
pub const INDEX_VALUE_SIZE_MAX: usize = 65535;

const SAI_CLASS: &str = "org.apache.cassandra.index.sai.StorageAttachedIndex";

/// Whether a `USING` class names Storage-Attached Indexing.
pub fn is_sai(class: &str) -> bool {
    class.eq_ignore_ascii_case("sai")
        || class.eq_ignore_ascii_case("StorageAttachedIndex")
        || class == SAI_CLASS
}

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::Invalid(m.into())
}

fn keyspace_of(name: &ast::QualifiedName, current: Option<&str>) -> Result<String, QueryError> {
    crate::plan::keyspace_of(name, current)
}

/// The target as system_schema.indexes shows it (`v`, `keys(m)`, `full(f)` …).
pub fn target_string(idx: &IndexDef, base: &TableSchema) -> String {
    let col = base
        .column_by_id(idx.column)
        .map(|c| ast::maybe_quote(&c.name))
        .unwrap_or_default();
    match idx.target {
        IndexTarget::Simple => col,
        IndexTarget::Keys => format!("keys({col})"),
        IndexTarget::Values => format!("values({col})"),
        IndexTarget::Entries => format!("entries({col})"),
        IndexTarget::Full => format!("full({col})"),
    }
}

/// system_schema.indexes `kind` and `options`.
pub fn kind_and_options(
    idx: &IndexDef,
    base: &TableSchema,
) -> (&'static str, BTreeMap<String, String>) {
    let mut o = idx.options.clone();
    o.insert("target".into(), target_string(idx, base));
    match &idx.class {
        Some(c) => {
            o.insert("class_name".into(), c.clone());
            ("CUSTOM", o)
        }
        None => ("COMPOSITES", o),
    }
}

/// Indexes of a table, in name order.
pub fn indexes_of(ks: &KeyspaceDef, table: TableId) -> impl Iterator<Item = &IndexDef> {
    ks.indexes.values().filter(move |i| i.base == table)
}

/// The type of the values an index is keyed by.
fn indexed_type(def: &ColumnDef, target: IndexTarget) -> Option<CqlType> {
    Some(match (target, &def.ty) {
        (IndexTarget::Simple | IndexTarget::Full, t) => t.clone(),
        (IndexTarget::Keys, CqlType::Map { key, .. }) => (**key).clone(),
        (IndexTarget::Values, CqlType::Map { value, .. }) => (**value).clone(),
        (IndexTarget::Values, CqlType::List { elem, .. } | CqlType::Set { elem, .. }) => {
            (**elem).clone()
        }
        (IndexTarget::Entries, CqlType::Map { key, value, .. }) => {
            CqlType::Tuple(vec![(**key).clone(), (**value).clone()])
        }
        _ => return None,
    })
}

fn is_collection(t: &CqlType) -> bool {
    matches!(
        t,
        CqlType::List { .. } | CqlType::Set { .. } | CqlType::Map { .. }
    )
}

/// Whether the index has one entry per partition (static and partition key columns).
fn partition_level(base: &TableSchema, idx: &IndexDef) -> bool {
    base.column_by_id(idx.column)
        .is_some_and(|c| matches!(c.kind, ColumnKind::PartitionKey | ColumnKind::Static))
}

/// The hidden table holding an index's entries.
fn backing_table(
    base: &TableSchema,
    ks: &str,
    name: &str,
    col: &ColumnDef,
    vt: CqlType,
    partition_level: bool,
) -> TableSchema {
    let mut columns = vec![
        ColumnDef {
            name: "indexed_value".into(),
            ty: vt,
            kind: ColumnKind::PartitionKey,
            position: 0,
            order: ClusteringOrder::Asc,
        },
        ColumnDef {
            name: "base_token".into(),
            ty: CqlType::Bigint,
            kind: ColumnKind::Clustering,
            position: 0,
            order: ClusteringOrder::Asc,
        },
        ColumnDef {
            name: "base_key".into(),
            ty: CqlType::Blob,
            kind: ColumnKind::Clustering,
            position: 1,
            order: ClusteringOrder::Asc,
        },
    ];
    if !partition_level {
        for (i, id) in base.clustering_key.iter().enumerate() {
            if let Some(c) = base.column_by_id(*id) {
                columns.push(ColumnDef {
                    name: format!("base_{}", c.name),
                    ty: c.ty.clone(),
                    kind: ColumnKind::Clustering,
                    position: 2 + i as u16,
                    order: c.order,
                });
            }
        }
    }
    let _ = col;
    let id = TableId(u128::from_be_bytes(*uuid::Uuid::new_v4().as_bytes()));
    let options = TableOptions {
        compaction: base.options.compaction.clone(),
        compression: base.options.compression.clone(),
        gc_grace_seconds: base.options.gc_grace_seconds,
        ..TableOptions::default()
    };
    TableSchema::new(id, ks, &format!("{}.{}", base.name, name), columns, options)
}

fn default_index_name(ks: &KeyspaceDef, table: &str, column: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let base = format!("{}_{}_idx", clean(table), clean(column));
    let mut name = base.clone();
    let mut i = 0;
    while ks.indexes.contains_key(&name) {
        i += 1;
        name = format!("{base}_{i}");
    }
    name
}

/// `CREATE [CUSTOM] INDEX`: validates like Cassandra and adds the index (without data;
/// [`build`] fills it once the schema is published).
pub fn create_index(
    s: &Schema,
    st: &ast::CreateIndex,
    current_ks: Option<&str>,
) -> Result<DdlOutcome, QueryError> {
    let ks_name = keyspace_of(&st.table, current_ks)?;
    if crate::schema::is_system_keyspace(&ks_name) {
        return Err(QueryError::Unauthorized(format!(
            "{ks_name} keyspace is not user-modifiable"
        )));
    }
    let ks = s
        .keyspace(&ks_name)
        .ok_or_else(|| invalid(format!("Keyspace '{ks_name}' doesn't exist")))?;
    let tname = &st.table.name.name;
    if ks.views.contains_key(tname) {
        return Err(invalid(
            "Secondary indexes are not supported on materialized views",
        ));
    }
    let base = ks
        .tables
        .get(tname)
        .ok_or_else(|| invalid(format!("Table '{tname}' doesn't exist")))?
        .clone();
    if base.is_counter {
        return Err(invalid(
            "Secondary indexes are not supported on counter tables",
        ));
    }
    let class = match &st.using {
        None if st.custom => {
            return Err(invalid("Must specify index implementation via USING"));
        }
        None => None,
        // The class as written is what system_schema.indexes shows.
        Some(c) => match c.as_str() {
            "legacy_local_table" => None,
            c if is_sai(c) => Some(c.to_string()),
            "org.apache.cassandra.index.sasi.SASIIndex" | "SASIIndex" => {
                return Err(invalid(
                    "SASI indexes are disabled. Enable in cassandra.yaml to use.",
                ));
            }
            other => {
                return Err(QueryError::Config(format!(
                    "Unable to find custom indexer class '{other}'"
                )));
            }
        },
    };
    if st.targets.is_empty() {
        return Err(invalid(
            "Only CUSTOM indexes can be created without specifying a target column",
        ));
    }
    if st.targets.len() > 1 {
        if class.is_none() {
            return Err(invalid("Only CUSTOM indexes support multiple columns"));
        }
        return Err(invalid("Amphora indexes have exactly one target column"));
    }
    let target = &st.targets[0];
    let cname = &target.column.name;
    let (column, def) = base
        .column(cname)
        .ok_or_else(|| invalid(format!("Column '{cname}' doesn't exist")))?;
    if matches!(def.ty, CqlType::Duration) {
        return Err(invalid(
            "Secondary indexes are not supported on duration columns",
        ));
    }
    if def.kind == ColumnKind::PartitionKey && base.partition_key.len() == 1 {
        return Err(invalid(format!(
            "Cannot create secondary index on the only partition key column {cname}"
        )));
    }
    let frozen_collection = is_collection(&def.ty) && !def.ty.is_multi_cell();
    let multi_cell_collection = is_collection(&def.ty) && def.ty.is_multi_cell();
    let kind_name = |k: ast::IndexTargetKind| match k {
        ast::IndexTargetKind::Simple | ast::IndexTargetKind::Values => "values",
        ast::IndexTargetKind::Keys => "keys",
        ast::IndexTargetKind::Entries => "entries",
        ast::IndexTargetKind::Full => "full",
    };
    let kind = match target.kind {
        ast::IndexTargetKind::Full => {
            if !frozen_collection {
                return Err(invalid(
                    "full() indexes can only be created on frozen collections",
                ));
            }
            IndexTarget::Full
        }
        k if frozen_collection => {
            return Err(invalid(format!(
                "Cannot create {}() index on frozen column {cname}. Frozen collections are immutable and must be fully indexed by using the 'full({cname})' modifier",
                kind_name(k)
            )));
        }
        ast::IndexTargetKind::Simple if multi_cell_collection => IndexTarget::Values,
        ast::IndexTargetKind::Simple => {
            if def.ty.is_multi_cell() {
                return Err(invalid(format!(
                    "Cannot create index on non-frozen UDT column {cname}"
                )));
            }
            IndexTarget::Simple
        }
        k if !is_collection(&def.ty) => {
            return Err(invalid(format!(
                "Cannot create {}() index on {cname}. Non-collection columns only support simple indexes",
                kind_name(k)
            )));
        }
        ast::IndexTargetKind::Keys | ast::IndexTargetKind::Entries
            if !matches!(def.ty, CqlType::Map { .. }) =>
        {
            return Err(invalid(format!(
                "Cannot create index on {} of column {cname} with non-map type",
                kind_name(target.kind)
            )));
        }
        ast::IndexTargetKind::Keys => IndexTarget::Keys,
        ast::IndexTargetKind::Entries => IndexTarget::Entries,
        _ => IndexTarget::Values,
    };
    let name = match &st.name {
        Some(n) => n.name.clone(),
        None => default_index_name(ks, tname, cname),
    };
    if name.is_empty()
        || name.len() > 48
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(invalid(format!(
            "Index name must not be empty, or contain non-alphanumeric-underscore characters (got \"{name}\")"
        )));
    }
    if ks.indexes.contains_key(&name) {
        if st.if_not_exists {
            return Ok(DdlOutcome {
                schema: s.clone(),
                change: None,
            });
        }
        return Err(QueryError::Invalid(format!(
            "Index '{name}' already exists"
        )));
    }
    let mut options: BTreeMap<String, String> = BTreeMap::new();
    for p in &st.properties {
        if p.name.eq_ignore_ascii_case("options") {
            if let Some(m) = p.value.as_map() {
                options.extend(m);
            }
        } else {
            return Err(QueryError::Syntax(format!("Unknown property '{}'", p.name)));
        }
    }
    if let Some(dup) =
        indexes_of(ks, base.id).find(|i| i.column == column && i.target == kind && i.class == class)
    {
        if st.if_not_exists {
            return Ok(DdlOutcome {
                schema: s.clone(),
                change: None,
            });
        }
        return Err(invalid(format!(
            "Index {name} is a duplicate of existing index {}",
            dup.name
        )));
    }
    let vt = indexed_type(def, kind)
        .ok_or_else(|| invalid(format!("Cannot create index on column {cname}")))?;
    let level = matches!(def.kind, ColumnKind::PartitionKey | ColumnKind::Static);
    let backing = backing_table(&base, &ks_name, &name, def, vt, level);
    let idx = IndexDef {
        name: name.clone(),
        base: base.id,
        column,
        target: kind,
        class,
        options,
        backing: Arc::new(backing),
    };
    let mut next = s.clone();
    if let Some(k) = next.keyspaces.get_mut(&ks_name) {
        k.indexes.insert(name, idx);
    }
    next.version = crate::schema::uuid_v4();
    Ok(DdlOutcome {
        schema: next,
        change: Some(SchemaChange {
            kind: SchemaChangeKind::Updated,
            target: SchemaChangeTarget::Table {
                keyspace: ks_name,
                table: tname.clone(),
            },
        }),
    })
}

/// `DROP INDEX [IF EXISTS] [ks.]name`.
pub fn drop_index(
    s: &Schema,
    st: &ast::Drop,
    current_ks: Option<&str>,
) -> Result<DdlOutcome, QueryError> {
    let ks_name = keyspace_of(&st.name, current_ks)?;
    let name = &st.name.name.name;
    let found = s
        .keyspace(&ks_name)
        .and_then(|k| k.indexes.get(name).map(|i| (k, i)));
    let Some((ks, idx)) = found else {
        if st.if_exists {
            return Ok(DdlOutcome {
                schema: s.clone(),
                change: None,
            });
        }
        return Err(invalid(format!("Index '{ks_name}.{name}' doesn't exist")));
    };
    let table = ks
        .tables
        .values()
        .find(|t| t.id == idx.base)
        .map(|t| t.name.clone())
        .unwrap_or_default();
    let mut next = s.clone();
    if let Some(k) = next.keyspaces.get_mut(&ks_name) {
        k.indexes.remove(name);
    }
    next.version = crate::schema::uuid_v4();
    Ok(DdlOutcome {
        schema: next,
        change: Some(SchemaChange {
            kind: SchemaChangeKind::Updated,
            target: SchemaChangeTarget::Table {
                keyspace: ks_name,
                table,
            },
        }),
    })
}

// ---------------------------------------------------------------------------------------
// Write path
// ---------------------------------------------------------------------------------------

fn liveness_of(c: &Cell) -> LivenessInfo {
    LivenessInfo {
        timestamp: c.timestamp,
        ttl: c.ttl,
        local_expiry: c.local_expiry,
    }
}

/// The newest timestamp of anything live the row writes (None: the row only deletes).
fn row_write_timestamp(r: &Row) -> Option<i64> {
    let mut ts = r.marker.map(|m| m.timestamp);
    for (_, d) in &r.cells {
        match d {
            ColumnData::Simple(c) if !c.is_tombstone => ts = ts.max(Some(c.timestamp)),
            ColumnData::Complex { cells, .. } => {
                for (_, c) in cells {
                    if !c.is_tombstone {
                        ts = ts.max(Some(c.timestamp));
                    }
                }
            }
            _ => {}
        }
    }
    ts
}

/// Indexed values a column's data contributes, with the liveness of each.
fn values_of(
    def: &ColumnDef,
    target: IndexTarget,
    d: &ColumnData,
    out: &mut Vec<(Bytes, LivenessInfo)>,
) {
    match d {
        ColumnData::Simple(c) => {
            if !c.is_tombstone && matches!(target, IndexTarget::Simple | IndexTarget::Full) {
                out.push((c.value.clone(), liveness_of(c)));
            }
        }
        ColumnData::Complex { cells, .. } => {
            for (path, c) in cells {
                if c.is_tombstone {
                    continue;
                }
                let v = match (target, &def.ty) {
                    (IndexTarget::Values, CqlType::Set { .. }) | (IndexTarget::Keys, _) => {
                        path.clone()
                    }
                    (IndexTarget::Values, _) => c.value.clone(),
                    (IndexTarget::Entries, _) => crate::values::serialize_tuple(
                        [Some(&path[..]), Some(&c.value[..])].into_iter(),
                    ),
                    _ => continue,
                };
                out.push((v, liveness_of(c)));
            }
        }
    }
}

fn entry_clustering(key: &PartitionKey, ck: Option<&Clustering>) -> Clustering {
    let mut c = vec![
        Bytes::copy_from_slice(&key.token.to_be_bytes()),
        key.key.clone(),
    ];
    if let Some(ck) = ck {
        c.extend(ck.0.iter().cloned());
    }
    Clustering(c)
}

/// Index entries for one base partition update.
pub fn entries_for(
    idx: &IndexDef,
    base: &TableSchema,
    key: &PartitionKey,
    u: &PartitionUpdate,
) -> Vec<Mutation> {
    let Some(def) = base.column_by_id(idx.column) else {
        return Vec::new();
    };
    // (indexed value, entry clustering, liveness)
    let mut found: Vec<(Bytes, Clustering, LivenessInfo)> = Vec::new();
    let mut vals = Vec::new();
    match def.kind {
        ColumnKind::Regular => {
            for r in &u.rows {
                if let Some(d) = r.cell(idx.column) {
                    vals.clear();
                    values_of(def, idx.target, d, &mut vals);
                    let c = entry_clustering(key, Some(&r.clustering));
                    for (v, l) in vals.drain(..) {
                        found.push((v, c.clone(), l));
                    }
                }
            }
        }
        ColumnKind::Static => {
            if let Some(d) = u.static_row.as_ref().and_then(|r| r.cell(idx.column)) {
                values_of(def, idx.target, d, &mut vals);
                let c = entry_clustering(key, None);
                for (v, l) in vals.drain(..) {
                    found.push((v, c.clone(), l));
                }
            }
        }
        ColumnKind::PartitionKey => {
            let ts = u
                .rows
                .iter()
                .chain(u.static_row.iter())
                .filter_map(row_write_timestamp)
                .max();
            let v = if base.partition_key.len() == 1 {
                Some(key.key.clone())
            } else {
                crate::selector::split_composite(&key.key)
                    .get(def.position as usize)
                    .cloned()
            };
            if let (Some(ts), Some(v)) = (ts, v) {
                found.push((v, entry_clustering(key, None), LivenessInfo::new(ts)));
            }
        }
        ColumnKind::Clustering => {
            for r in &u.rows {
                if let (Some(ts), Some(v)) = (
                    row_write_timestamp(r),
                    r.clustering.0.get(def.position as usize),
                ) {
                    found.push((
                        v.clone(),
                        entry_clustering(key, Some(&r.clustering)),
                        LivenessInfo::new(ts),
                    ));
                }
            }
        }
    }
    let cmp = idx.backing.clustering_comparator();
    let mut by_value: BTreeMap<Bytes, Vec<Row>> = BTreeMap::new();
    let folding = folds_case(idx);
    for (v, c, l) in found {
        if v.len() > INDEX_VALUE_SIZE_MAX {
            continue;
        }
        let v = if folding { fold(&v) } else { v };
        let mut row = Row::new(c);
        row.marker = Some(l);
        by_value.entry(v).or_default().push(row);
    }
    by_value
        .into_iter()
        .map(|(v, mut rows)| {
            rows.sort_by(|a, b| cmp.compare(&a.clustering.0, &b.clustering.0));
            rows.dedup_by(|a, b| {
                if cmp.compare(&a.clustering.0, &b.clustering.0).is_eq() {
                    if let (Some(x), Some(y)) = (a.marker, b.marker) {
                        b.marker = Some(LivenessInfo::reconcile(x, y));
                    }
                    true
                } else {
                    false
                }
            });
            Mutation {
                table: idx.backing.id,
                key: PartitionKey::new(v),
                update: PartitionUpdate {
                    rows,
                    ..PartitionUpdate::default()
                },
            }
        })
        .collect()
}

/// Index entries for base mutations of tables that have indexes.
pub fn derived_mutations(schema: &Schema, base: &[&Mutation]) -> Vec<Mutation> {
    let mut out = Vec::new();
    for m in base {
        let Some(t) = schema.table_by_id(m.table) else {
            continue;
        };
        let Some(ks) = schema.keyspace(&t.keyspace) else {
            continue;
        };
        if ks.indexes.is_empty() {
            continue;
        }
        for idx in indexes_of(ks, m.table) {
            out.extend(entries_for(idx, t, &m.key, &m.update));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Read path
// ---------------------------------------------------------------------------------------

/// An index chosen to serve a query: the index and the value to look up.
pub struct IndexQuery {
    pub index: IndexDef,
    pub value: Bytes,
    /// Position in `Restrictions::filters` of the restriction the index serves.
    pub filter: usize,
    pub partition_level: bool,
}

fn serves(idx: &IndexDef, def: &ColumnDef, f: &Filter) -> Option<Bytes> {
    if idx.column != f.column {
        return None;
    }
    let single = || (f.values.len() == 1).then(|| f.values[0].clone());
    match (f.op, idx.target, &f.element_key) {
        (ast::Operator::Eq, IndexTarget::Simple | IndexTarget::Full, None) => single(),
        (ast::Operator::In, IndexTarget::Simple, None)
            if matches!(def.kind, ColumnKind::PartitionKey | ColumnKind::Clustering) =>
        {
            single()
        }
        (ast::Operator::Contains, IndexTarget::Values, None) => single(),
        (ast::Operator::ContainsKey, IndexTarget::Keys, None) => single(),
        (ast::Operator::Eq, IndexTarget::Entries, Some(k)) => {
            let v = single()?;
            Some(crate::values::serialize_tuple(
                [Some(&k[..]), Some(&v[..])].into_iter(),
            ))
        }
        _ => None,
    }
}

/// Whether an index has SAI's `case_sensitive: false` (text compared ignoring case).
fn folds_case(idx: &IndexDef) -> bool {
    idx.class.as_deref().is_some_and(is_sai)
        && idx
            .options
            .get("case_sensitive")
            .is_some_and(|v| v.eq_ignore_ascii_case("false"))
}

fn fold(v: &[u8]) -> Bytes {
    Bytes::from(String::from_utf8_lossy(v).to_lowercase())
}

/// Whether an SAI index answers a range restriction on its (non-collection) column; such
/// queries scan with the restriction as a filter, without ALLOW FILTERING.
fn sai_range(idx: &IndexDef, f: &Filter) -> bool {
    idx.column == f.column
        && idx.target == IndexTarget::Simple
        && idx.class.as_deref().is_some_and(is_sai)
        && f.element_key.is_none()
        && matches!(
            f.op,
            ast::Operator::Lt | ast::Operator::Lte | ast::Operator::Gt | ast::Operator::Gte
        )
}

/// Whether an index on a restricted clustering column serves a query that restricts
/// clustering columns without the partition key (the scan then needs no ALLOW FILTERING).
pub fn clustering_indexed(schema: &Schema, t: &TableSchema, r: &Restrictions) -> bool {
    let Some(ks) = schema.keyspace(&t.keyspace) else {
        return false;
    };
    let restricted = r.ck_prefix.len() + usize::from(r.ck_lower.is_some() || r.ck_upper.is_some());
    t.clustering_key
        .iter()
        .take(restricted)
        .any(|id| indexes_of(ks, t.id).any(|i| i.column == *id))
}

/// Which restrictions indexes serve: the index that drives the query (looked up by
/// value), and whether the other restrictions still need ALLOW FILTERING. SAI indexes
/// serve any number of restrictions (they intersect); a legacy index serves one.
pub fn plan(schema: &Schema, t: &TableSchema, r: &mut Restrictions) -> (Option<IndexQuery>, bool) {
    let Some(ks) = schema.keyspace(&t.keyspace) else {
        return (None, r.needs_filtering);
    };
    if ks.indexes.is_empty() || r.filters.is_empty() {
        return (None, r.needs_filtering);
    }
    let mut driver: Option<IndexQuery> = None;
    let mut legacy_used = false;
    let mut unserved = 0;
    for i in 0..r.filters.len() {
        let f = r.filters[i].clone();
        let Some(def) = t.column_by_id(f.column) else {
            unserved += 1;
            continue;
        };
        let mut served = false;
        for idx in indexes_of(ks, t.id) {
            let sai = idx.class.as_deref().is_some_and(is_sai);
            if !sai && legacy_used {
                continue;
            }
            let value = serves(idx, def, &f);
            if value.is_none() && !sai_range(idx, &f) {
                continue;
            }
            served = true;
            if !sai {
                legacy_used = true;
            }
            let folded = folds_case(idx) && f.op == ast::Operator::Eq;
            if folded {
                r.filters[i].fold_case = true;
            }
            if let (None, Some(v)) = (&driver, value) {
                driver = Some(IndexQuery {
                    index: idx.clone(),
                    value: if folded { fold(&v) } else { v },
                    filter: i,
                    partition_level: partition_level(t, idx),
                });
            }
            break;
        }
        if !served {
            unserved += 1;
        }
    }
    (driver, unserved > 0)
}

fn parse_entry(c: &Clustering) -> Option<(PartitionKey, Clustering)> {
    let token = i64::from_be_bytes(c.0.first()?[..].try_into().ok()?);
    let key = c.0.get(1)?.clone();
    Some((PartitionKey { token, key }, Clustering(c.0[2..].to_vec())))
}

pub(crate) fn token_ok(r: &Restrictions, token: i64) -> bool {
    use std::ops::Bound::*;
    let lo = match r.token_start {
        Some(Included(t)) => token >= t,
        Some(Excluded(t)) => token > t,
        _ => true,
    };
    let hi = match r.token_end {
        Some(Included(t)) => token <= t,
        Some(Excluded(t)) => token < t,
        _ => true,
    };
    lo && hi
}

fn in_slices(t: &TableSchema, slices: &[ClusteringSlice], c: &Clustering) -> bool {
    if slices.is_empty() {
        return true;
    }
    let cmp = t.clustering_comparator();
    slices
        .iter()
        .any(|s| cmp.after_start(c, &s.start) && cmp.before_end(c, &s.end))
}

async fn read_on(
    inner: &Rc<Inner>,
    cmd: ReadCommand,
) -> Result<amphora_storage::ReadResult, QueryError> {
    let info = &inner.shared.info;
    let token = match &cmd.partitions {
        PartitionRange::Single(k) => k.token,
        _ => 0,
    };
    let shard = shard_of(token, info.nr_shards, info.ignore_msb);
    read_on_shard(inner, shard, cmd).await
}

async fn read_on_shard(
    inner: &Rc<Inner>,
    shard: u32,
    cmd: ReadCommand,
) -> Result<amphora_storage::ReadResult, QueryError> {
    crate::exec::on_shard(inner, shard, move || async move {
        let db = amphora_replica::local().map_err(|e| e.to_string())?;
        db.read(&cmd).map_err(|e| e.to_string())
    })
    .await?
    .map_err(|e| {
        tracing::warn!(error = %e, "index read failed");
        QueryError::ReadTimeout {
            consistency: 1,
            received: 0,
            block_for: 1,
            data_present: false,
        }
    })
}

/// Reads the base rows an index query names, in ring order, after `after` (the paging
/// position), until `want` rows pass every filter or the index partition is exhausted.
/// Returns the partitions (only the rows named by entries) and whether nothing is left.
pub async fn read_via_index(
    inner: &Rc<Inner>,
    t: &TableSchema,
    q: &IndexQuery,
    r: &Restrictions,
    after: Option<(PartitionKey, Option<Clustering>)>,
    want: u32,
    now_s: i32,
) -> Result<(Vec<PartitionData>, bool), QueryError> {
    let slices = r.slices(t);
    let index_key = PartitionKey::new(q.value.clone());
    let mut out: Vec<PartitionData> = Vec::new();
    let mut matched: u64 = 0;
    let want = u64::from(want);
    let mut entry_after: Option<Clustering> = None;
    // A page that ended inside a partition found through a partition-level entry: finish
    // that partition first, then continue after its entry.
    if let Some((key, pos)) = &after {
        entry_after = Some(entry_clustering(
            key,
            pos.as_ref().filter(|_| !q.partition_level),
        ));
        if q.partition_level && pos.is_some() {
            let mut cmd = ReadCommand::new(t.id, PartitionRange::Single(key.clone()), now_s);
            cmd.slices = slices.clone();
            cmd.start_after = after.clone();
            let res = read_on(inner, cmd).await?;
            for p in res.partitions {
                matched += count_matching(t, r, &p, now_s);
                out.push(p);
            }
        }
    }
    loop {
        if matched >= want {
            return Ok((out, false));
        }
        let mut cmd = ReadCommand::new(
            q.index.backing.id,
            PartitionRange::Single(index_key.clone()),
            now_s,
        );
        cmd.row_limit = INDEX_READ_CHUNK_ROWS;
        cmd.start_after = entry_after.clone().map(|c| (index_key.clone(), Some(c)));
        let res = read_on(inner, cmd).await?;
        let entries: Vec<Row> = res.partitions.into_iter().flat_map(|p| p.rows).collect();
        let Some(last) = entries.last() else {
            return Ok((out, true));
        };
        entry_after = Some(last.clustering.clone());
        let short = (entries.len() as u32) < INDEX_READ_CHUNK_ROWS;
        // Group entries by base partition, keeping ring order: (key, [(ck, entry)]).
        type Group<'a> = (PartitionKey, Vec<(Clustering, &'a Row)>);
        let mut groups: Vec<Group<'_>> = Vec::new();
        for e in &entries {
            let Some((key, ck)) = parse_entry(&e.clustering) else {
                continue;
            };
            if !token_ok(r, key.token) {
                continue;
            }
            if !q.partition_level && !in_slices(t, &slices, &ck) {
                continue;
            }
            match groups.last_mut() {
                Some((k, cks)) if *k == key => cks.push((ck, e)),
                _ => groups.push((key, vec![(ck, e)])),
            }
        }
        let mut stale: Vec<Row> = Vec::new();
        for (key, cks) in groups {
            let mut cmd = ReadCommand::new(t.id, PartitionRange::Single(key.clone()), now_s);
            cmd.slices = if q.partition_level || t.clustering_key.is_empty() {
                slices.clone()
            } else {
                cks.iter()
                    .map(|(c, _)| ClusteringSlice {
                        start: ClusteringBound::inclusive(c.0.clone()),
                        end: ClusteringBound::inclusive(c.0.clone()),
                    })
                    .collect()
            };
            let res = read_on(inner, cmd).await?;
            let part = res.partitions.into_iter().next();
            // Entries whose base row no longer has the indexed value are deleted (at the
            // entry's own timestamp, so a newer write of the same value survives).
            // A partition-level entry read through clustering restrictions proves nothing.
            let judged = !q.partition_level
                || (r.ck_prefix.is_empty() && r.ck_lower.is_none() && r.ck_upper.is_none());
            for (ck, e) in cks.iter().filter(|_| judged) {
                if !entry_is_live(t, q, r, part.as_ref(), ck, now_s)
                    && let Some(m) = e.marker
                {
                    let mut row = Row::new(e.clustering.clone());
                    row.deletion = Some(amphora_types::data::DeletionTime::new(m.timestamp, now_s));
                    stale.push(row);
                }
            }
            if let Some(p) = part {
                matched += count_matching(t, r, &p, now_s);
                out.push(p);
            }
        }
        if !stale.is_empty() {
            let m = Mutation {
                table: q.index.backing.id,
                key: index_key.clone(),
                update: PartitionUpdate {
                    rows: stale,
                    ..PartitionUpdate::default()
                },
            };
            crate::write::apply_planned(inner, vec![crate::write::Planned::Mutation(m)]).await?;
        }
        if short {
            return Ok((out, matched < want));
        }
    }
}

/// Whether the base row an entry names still has the indexed value.
fn entry_is_live(
    t: &TableSchema,
    q: &IndexQuery,
    r: &Restrictions,
    part: Option<&PartitionData>,
    ck: &Clustering,
    now_s: i32,
) -> bool {
    let (Some(p), Some(f)) = (part, r.filters.get(q.filter)) else {
        return false;
    };
    if q.partition_level {
        let probe = p
            .rows
            .first()
            .cloned()
            .unwrap_or_else(|| Row::new(Clustering::empty()));
        return crate::select::filter_row(t, f, p, &probe, now_s);
    }
    p.rows
        .iter()
        .find(|row| row.clustering == *ck)
        .is_some_and(|row| crate::select::filter_row(t, f, p, row, now_s))
}

fn count_matching(t: &TableSchema, r: &Restrictions, p: &PartitionData, now_s: i32) -> u64 {
    if p.rows.is_empty() {
        let empty = Row::new(Clustering::empty());
        return u64::from(
            p.static_row.is_some()
                && r.filters
                    .iter()
                    .all(|f| crate::select::filter_row(t, f, p, &empty, now_s)),
        );
    }
    p.rows
        .iter()
        .filter(|row| {
            r.filters
                .iter()
                .all(|f| crate::select::filter_row(t, f, p, row, now_s))
        })
        .count() as u64
}

// ---------------------------------------------------------------------------------------
// Build
// ---------------------------------------------------------------------------------------

/// Reads every row of `table` on every shard, in chunks, handing each chunk to `f`.
pub async fn scan_table<F>(inner: &Rc<Inner>, table: TableId, mut f: F) -> Result<(), QueryError>
where
    F: AsyncChunk,
{
    let nr = inner.shared.info.nr_shards;
    let now_s = (crate::exec::now_micros() / 1_000_000) as i32;
    for shard in 0..nr {
        let mut after: Option<(PartitionKey, Option<Clustering>)> = None;
        loop {
            let mut cmd = ReadCommand::new(table, PartitionRange::all(), now_s);
            cmd.row_limit = BUILD_READ_CHUNK_ROWS;
            cmd.start_after = after.clone();
            let res = read_on_shard(inner, shard, cmd).await?;
            if let Some(p) = res.partitions.last() {
                after = Some((p.key.clone(), p.rows.last().map(|r| r.clustering.clone())));
            }
            let done = res.exhausted || res.partitions.is_empty();
            f.chunk(inner, res.partitions).await?;
            if done {
                break;
            }
        }
    }
    Ok(())
}

/// A consumer of scanned partitions (index and view builds).
#[allow(async_fn_in_trait)]
pub trait AsyncChunk {
    async fn chunk(
        &mut self,
        inner: &Rc<Inner>,
        parts: Vec<PartitionData>,
    ) -> Result<(), QueryError>;
}

struct IndexBuild {
    idx: IndexDef,
    base: Arc<TableSchema>,
}

impl AsyncChunk for IndexBuild {
    async fn chunk(
        &mut self,
        inner: &Rc<Inner>,
        parts: Vec<PartitionData>,
    ) -> Result<(), QueryError> {
        let mut planned = Vec::new();
        for p in parts {
            let u = PartitionUpdate {
                static_row: p.static_row,
                rows: p.rows.into(),
                ..PartitionUpdate::default()
            };
            for m in entries_for(&self.idx, &self.base, &p.key, &u) {
                planned.push(crate::write::Planned::Mutation(m));
            }
        }
        crate::write::apply_planned(inner, planned).await
    }
}

/// Fills a new index from the data already in its base table.
pub async fn build(
    inner: &Rc<Inner>,
    schema: &Schema,
    ks: &str,
    name: &str,
) -> Result<(), QueryError> {
    let Some(idx) = schema
        .keyspace(ks)
        .and_then(|k| k.indexes.get(name))
        .cloned()
    else {
        return Ok(());
    };
    let Some(base) = schema.table_by_id(idx.base).cloned() else {
        return Ok(());
    };
    let id = base.id;
    scan_table(inner, id, IndexBuild { idx, base }).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use amphora_types::data::Cell;
    use amphora_types::schema::ColumnId;

    fn col(name: &str, ty: CqlType, kind: ColumnKind, position: u16) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            ty,
            kind,
            position,
            order: ClusteringOrder::Asc,
        }
    }

    fn base() -> TableSchema {
        TableSchema::new(
            TableId(1),
            "ks",
            "t",
            vec![
                col("p", CqlType::Int, ColumnKind::PartitionKey, 0),
                col("c", CqlType::Int, ColumnKind::Clustering, 0),
                col("v", CqlType::Text, ColumnKind::Regular, 0),
                col(
                    "m",
                    CqlType::Map {
                        key: Box::new(CqlType::Text),
                        value: Box::new(CqlType::Int),
                        frozen: false,
                    },
                    ColumnKind::Regular,
                    0,
                ),
                col("s", CqlType::Int, ColumnKind::Static, 0),
            ],
            TableOptions::default(),
        )
    }

    fn index(t: &TableSchema, column: ColumnId, target: IndexTarget) -> IndexDef {
        let def = t.column_by_id(column).cloned().expect("column");
        let vt = indexed_type(&def, target).expect("indexable");
        let level = partition_level_kind(def.kind);
        IndexDef {
            name: "i".into(),
            base: t.id,
            column,
            target,
            class: None,
            options: BTreeMap::new(),
            backing: Arc::new(backing_table(t, "ks", "i", &def, vt, level)),
        }
    }

    fn partition_level_kind(k: ColumnKind) -> bool {
        matches!(k, ColumnKind::PartitionKey | ColumnKind::Static)
    }

    fn int(v: i32) -> Bytes {
        Bytes::copy_from_slice(&v.to_be_bytes())
    }

    fn update() -> (PartitionKey, PartitionUpdate) {
        let key = PartitionKey::new(int(7));
        let mut row = Row::new(Clustering(vec![int(1)]));
        row.cells = vec![
            (
                2,
                ColumnData::Simple(Cell::expiring(10, 60, 1000, Bytes::from("x"))),
            ),
            (
                3,
                ColumnData::Complex {
                    deletion: None,
                    cells: vec![
                        (Bytes::from("a"), Cell::live(10, int(1))),
                        (Bytes::from("b"), Cell::tombstone(10, 1000)),
                    ],
                },
            ),
        ];
        let mut st = Row::new(Clustering::empty());
        st.cells = vec![(4, ColumnData::Simple(Cell::live(11, int(5))))];
        let u = PartitionUpdate {
            rows: vec![row],
            static_row: Some(st),
            ..PartitionUpdate::default()
        };
        (key, u)
    }

    #[test]
    fn regular_entry_keeps_ttl_and_names_the_row() {
        let t = base();
        let idx = index(&t, 2, IndexTarget::Simple);
        let (key, u) = update();
        let ms = entries_for(&idx, &t, &key, &u);
        assert_eq!(ms.len(), 1);
        assert_eq!(ms[0].key, PartitionKey::new(Bytes::from("x")));
        let row = &ms[0].update.rows[0];
        assert_eq!(
            row.clustering,
            Clustering(vec![
                Bytes::copy_from_slice(&key.token.to_be_bytes()),
                key.key.clone(),
                int(1)
            ])
        );
        let m = row.marker.expect("marker");
        assert_eq!((m.timestamp, m.ttl, m.local_expiry), (10, 60, 1060));
        assert_eq!(
            parse_entry(&row.clustering),
            Some((key, Clustering(vec![int(1)])))
        );
    }

    #[test]
    fn map_targets_index_live_elements_only() {
        let t = base();
        let (key, u) = update();
        let keys = entries_for(&index(&t, 3, IndexTarget::Keys), &t, &key, &u);
        assert_eq!(
            keys.iter().map(|m| m.key.key.clone()).collect::<Vec<_>>(),
            vec![Bytes::from("a")],
            "the tombstoned element b has no entry"
        );
        let values = entries_for(&index(&t, 3, IndexTarget::Values), &t, &key, &u);
        assert_eq!(values[0].key.key, int(1));
        let entries = entries_for(&index(&t, 3, IndexTarget::Entries), &t, &key, &u);
        assert_eq!(
            entries[0].key.key,
            crate::values::serialize_tuple([Some(&b"a"[..]), Some(&int(1)[..])].into_iter())
        );
    }

    #[test]
    fn static_entries_are_per_partition() {
        let t = base();
        let (key, u) = update();
        let ms = entries_for(&index(&t, 4, IndexTarget::Simple), &t, &key, &u);
        assert_eq!(ms.len(), 1);
        assert_eq!(ms[0].key.key, int(5));
        assert_eq!(ms[0].update.rows[0].clustering.0.len(), 2);
    }

    #[test]
    fn deletions_write_no_entries() {
        let t = base();
        let key = PartitionKey::new(int(7));
        let mut row = Row::new(Clustering(vec![int(1)]));
        row.cells = vec![(2, ColumnData::Simple(Cell::tombstone(10, 1000)))];
        let u = PartitionUpdate {
            rows: vec![row],
            ..PartitionUpdate::default()
        };
        assert!(entries_for(&index(&t, 2, IndexTarget::Simple), &t, &key, &u).is_empty());
        // A clustering-column index needs a live write in the row.
        assert!(entries_for(&index(&t, 1, IndexTarget::Simple), &t, &key, &u).is_empty());
    }
}
