//! Materialized views on a single node.
//!
//! A view is a table of its own (`ViewDef::table`) whose rows are derived from base rows.
//! A base write reads the base rows it touches before and after it is applied; each
//! touched row then rewrites its view row: the row at the old view key is deleted when
//! the key changed (or the row stopped qualifying), and the row at the new key is
//! replaced whole (a row deletion just below a fresh timestamp, then the base row's
//! cells at that timestamp). View writes take a new coordinator timestamp so the last
//! maintenance of a row wins. Cassandra 5.0 disables views by default
//! (`materialized_views_enabled`); Amphora enables them.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use amphora_cql as ast;
use amphora_storage::{PartitionData, PartitionRange, ReadCommand};
use amphora_types::data::{
    Cell, Clustering, ClusteringBound, ClusteringSlice, ColumnData, DeletionTime, LivenessInfo,
    Mutation, PartitionKey, PartitionUpdate, Row,
};
use amphora_types::schema::{
    ClusteringOrder, ColumnDef, ColumnId, ColumnKind, TableId, TableOptions, TableSchema,
};
use amphora_types::token::{serialize_composite_key, shard_of};
use bytes::Bytes;

use crate::api::*;
use crate::exec::Inner;
use crate::schema::{DdlOutcome, Schema, ViewDef};
use crate::values::{EvalCtx, Value, eval};

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::Invalid(m.into())
}

fn changed(mut next: Schema, kind: SchemaChangeKind, ks: String, name: String) -> DdlOutcome {
    next.version = crate::schema::uuid_v4();
    DdlOutcome {
        schema: next,
        change: Some(SchemaChange {
            kind,
            target: SchemaChangeTarget::Table {
                keyspace: ks,
                table: name,
            },
        }),
    }
}

fn unchanged(s: &Schema) -> DdlOutcome {
    DdlOutcome {
        schema: s.clone(),
        change: None,
    }
}

/// `CREATE MATERIALIZED VIEW`: validates like Cassandra and adds the (empty) view;
/// [`build`] fills it once the schema is published.
pub fn create_view(
    s: &Schema,
    st: &ast::CreateMaterializedView,
    current_ks: Option<&str>,
) -> Result<DdlOutcome, QueryError> {
    let ks_name = crate::plan::keyspace_of(&st.name, current_ks)?;
    if crate::schema::is_system_keyspace(&ks_name) {
        return Err(QueryError::Unauthorized(format!(
            "{ks_name} keyspace is not user-modifiable"
        )));
    }
    if let Some(k) = &st.base_table.keyspace
        && k.name != ks_name
    {
        return Err(invalid(
            "Cannot create a materialized view on a table in a different keyspace",
        ));
    }
    let ks = s
        .keyspace(&ks_name)
        .ok_or_else(|| invalid(format!("Keyspace '{ks_name}' doesn't exist")))?;
    let name = st.name.name.name.clone();
    if ks.tables.contains_key(&name) || ks.views.contains_key(&name) {
        if st.if_not_exists {
            return Ok(unchanged(s));
        }
        return Err(QueryError::AlreadyExists {
            keyspace: ks_name.clone(),
            table: name.clone(),
            message: format!(
                "Cannot add already existing table \"{name}\" to keyspace \"{ks_name}\""
            ),
        });
    }
    let bname = &st.base_table.name.name;
    if ks.views.contains_key(bname) {
        return Err(invalid(
            "Materialized views cannot be created against other materialized views",
        ));
    }
    let base = ks
        .tables
        .get(bname)
        .ok_or_else(|| invalid(format!("Base table '{bname}' doesn't exist")))?
        .clone();
    if base.is_counter {
        return Err(invalid(
            "Materialized views are not supported on counter tables",
        ));
    }
    if name.is_empty()
        || name.len() > 48
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(invalid(format!(
            "Materialized view name must not be empty, more than 48 characters long, or contain non-alphanumeric-underscore characters (got \"{name}\")"
        )));
    }
    // Selected columns (base ids), in selection order.
    let (include_all, mut selected): (bool, Vec<ColumnId>) = match &st.selection {
        ast::Selection::Wildcard => {
            if let Some((_, s)) = base
                .live_columns()
                .find(|(_, c)| c.kind == ColumnKind::Static)
            {
                return Err(invalid(format!(
                    "Cannot include static column '{}' in materialized view '{name}'",
                    s.name
                )));
            }
            (
                true,
                (0..base.columns.len() as ColumnId)
                    .filter(|i| {
                        base.columns[*i as usize].kind != ColumnKind::Static && !base.is_dropped(*i)
                    })
                    .collect(),
            )
        }
        ast::Selection::List(items) => {
            let mut v = Vec::new();
            for it in items {
                let ast::Expr::Column(c) = &it.expr else {
                    return Err(invalid(format!(
                        "Can only select columns by name when defining a materialized view (got {})",
                        it.expr
                    )));
                };
                if it.alias.is_some() {
                    return Err(invalid(
                        "Cannot use alias when defining a materialized view",
                    ));
                }
                let (id, def) = base
                    .column(&c.name)
                    .ok_or_else(|| invalid(format!("Undefined column name {}", c.name)))?;
                if def.kind == ColumnKind::Static {
                    return Err(invalid(format!(
                        "Cannot include static column '{}' in materialized view '{name}'",
                        c.name
                    )));
                }
                if !v.contains(&id) {
                    v.push(id);
                }
            }
            (false, v)
        }
    };
    let pk_names: Vec<&str> = st
        .primary_key
        .partition_key
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    let ck_names: Vec<&str> = st
        .primary_key
        .clustering_columns
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    let mut key_ids = Vec::new();
    for n in pk_names.iter().chain(&ck_names) {
        let (id, def) = base.column(n).ok_or_else(|| {
            invalid(format!(
                "Unknown column name detected in CREATE MATERIALIZED VIEW statement: {n}"
            ))
        })?;
        if def.kind == ColumnKind::Static {
            return Err(invalid(format!(
                "Cannot use static column {n} in materialized view"
            )));
        }
        if key_ids.contains(&id) {
            return Err(invalid(format!(
                "Duplicate column {n} in materialized view primary key"
            )));
        }
        key_ids.push(id);
    }
    let missing: Vec<&str> = base
        .partition_key
        .iter()
        .chain(&base.clustering_key)
        .filter(|id| !key_ids.contains(id))
        .map(|id| base.columns[*id as usize].name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(invalid(format!(
            "Cannot create materialized view {name} without primary key columns {} from base {bname}",
            missing.join(", ")
        )));
    }
    let non_pk: Vec<&str> = key_ids
        .iter()
        .map(|id| &base.columns[*id as usize])
        .filter(|c| matches!(c.kind, ColumnKind::Regular))
        .map(|c| c.name.as_str())
        .collect();
    if non_pk.len() > 1 {
        return Err(invalid(format!(
            "Cannot include more than one non-primary key column in materialized view primary key (got {})",
            non_pk.join(", ")
        )));
    }
    // Every view key column must be restricted (IS NOT NULL or otherwise).
    let restricted: Vec<String> = st
        .where_clause
        .iter()
        .filter_map(|r| match &r.target {
            ast::RelationTarget::Column(c) => Some(c.name.clone()),
            _ => None,
        })
        .collect();
    for r in &st.where_clause {
        match (&r.target, r.op) {
            (ast::RelationTarget::Column(c), op) => {
                let Some((_, d)) = base.column(&c.name) else {
                    return Err(invalid(format!("Undefined column name {}", c.name)));
                };
                if op != ast::Operator::IsNotNull
                    && !matches!(d.kind, ColumnKind::PartitionKey | ColumnKind::Clustering)
                {
                    return Err(invalid(format!(
                        "Non-primary key columns can only be restricted with 'IS NOT NULL' (got: {} restricted illegally)",
                        c.name
                    )));
                }
            }
            _ => {
                return Err(invalid(
                    "Only simple column restrictions are supported in materialized view WHERE clauses",
                ));
            }
        }
        if let ast::RelationValue::Single(e) = &r.value
            && contains_bind(e)
        {
            return Err(invalid(
                "Cannot use query parameters in CREATE MATERIALIZED VIEW statements",
            ));
        }
    }
    let unrestricted: Vec<&str> = pk_names
        .iter()
        .chain(&ck_names)
        .filter(|n| !restricted.iter().any(|r| r == *n))
        .copied()
        .collect();
    if !unrestricted.is_empty() {
        return Err(invalid(format!(
            "Primary key columns {} must be restricted with 'IS NOT NULL' or otherwise",
            unrestricted.join(", ")
        )));
    }
    for id in &key_ids {
        if !selected.contains(id) {
            selected.push(*id);
        }
    }
    // The view table: its key as declared, then the other selected columns.
    let mut columns = Vec::new();
    for (i, n) in pk_names.iter().enumerate() {
        if let Some((_, d)) = base.column(n) {
            columns.push(ColumnDef {
                name: d.name.clone(),
                ty: d.ty.clone(),
                kind: ColumnKind::PartitionKey,
                position: i as u16,
                order: ClusteringOrder::Asc,
            });
        }
    }
    for (i, n) in ck_names.iter().enumerate() {
        if let Some((_, d)) = base.column(n) {
            columns.push(ColumnDef {
                name: d.name.clone(),
                ty: d.ty.clone(),
                kind: ColumnKind::Clustering,
                position: i as u16,
                order: ClusteringOrder::Asc,
            });
        }
    }
    for id in &selected {
        if !key_ids.contains(id) {
            let d = &base.columns[*id as usize];
            columns.push(ColumnDef {
                name: d.name.clone(),
                ty: d.ty.clone(),
                kind: ColumnKind::Regular,
                position: 0,
                order: ClusteringOrder::Asc,
            });
        }
    }
    if !st.options.clustering_order.is_empty()
        && (st.options.clustering_order.len() != ck_names.len()
            || st
                .options
                .clustering_order
                .iter()
                .zip(&ck_names)
                .any(|((c, _), n)| c.name != *n))
    {
        return Err(invalid(
            "Clustering key columns must exactly match columns in CLUSTERING ORDER BY directive",
        ));
    }
    for (col, order) in &st.options.clustering_order {
        if let Some(c) = columns
            .iter_mut()
            .find(|c| c.name == col.name && c.kind == ColumnKind::Clustering)
        {
            c.order = match order {
                ast::Order::Asc => ClusteringOrder::Asc,
                ast::Order::Desc => ClusteringOrder::Desc,
            };
        }
    }
    let mut options = TableOptions::default();
    crate::schema::apply_table_properties(&mut options, &st.options.properties)?;
    if options.default_time_to_live > 0 {
        return Err(invalid(
            "Cannot set default_time_to_live for a materialized view. Data in a materialized view always expire at the same time than the corresponding data in the parent table.",
        ));
    }
    let id = TableId(u128::from_be_bytes(*uuid::Uuid::new_v4().as_bytes()));
    let table = TableSchema::new(id, &ks_name, &name, columns, options);
    let def = ViewDef {
        base: base.id,
        include_all,
        where_text: st.where_clause_text.clone(),
        table: Arc::new(table),
    };
    let mut next = s.clone();
    if let Some(k) = next.keyspaces.get_mut(&ks_name) {
        k.views.insert(name.clone(), def);
    }
    Ok(changed(next, SchemaChangeKind::Created, ks_name, name))
}

fn contains_bind(e: &ast::Expr) -> bool {
    matches!(e, ast::Expr::Bind(_))
}

/// `DROP MATERIALIZED VIEW [IF EXISTS] [ks.]name`.
pub fn drop_view(
    s: &Schema,
    st: &ast::Drop,
    current_ks: Option<&str>,
) -> Result<DdlOutcome, QueryError> {
    let ks_name = crate::plan::keyspace_of(&st.name, current_ks)?;
    let name = st.name.name.name.clone();
    if s.view(&ks_name, &name).is_none() {
        if st.if_exists {
            return Ok(unchanged(s));
        }
        if s.keyspace(&ks_name)
            .is_some_and(|k| k.tables.contains_key(&name))
        {
            return Err(invalid("Cannot use DROP MATERIALIZED VIEW on Table"));
        }
        return Err(invalid(format!(
            "Materialized view '{ks_name}.{name}' doesn't exist"
        )));
    }
    let mut next = s.clone();
    if let Some(k) = next.keyspaces.get_mut(&ks_name) {
        k.views.remove(&name);
    }
    Ok(changed(next, SchemaChangeKind::Dropped, ks_name, name))
}

/// `ALTER MATERIALIZED VIEW … WITH …`.
pub fn alter_view(
    s: &Schema,
    name: &ast::QualifiedName,
    if_exists: bool,
    props: &[ast::Property],
    current_ks: Option<&str>,
) -> Result<DdlOutcome, QueryError> {
    let ks_name = crate::plan::keyspace_of(name, current_ks)?;
    let vname = name.name.name.clone();
    let Some(v) = s.view(&ks_name, &vname) else {
        if if_exists {
            return Ok(unchanged(s));
        }
        return Err(invalid(format!(
            "Materialized view '{ks_name}.{vname}' doesn't exist"
        )));
    };
    let mut t = (*v.table).clone();
    crate::schema::apply_table_properties(&mut t.options, props)?;
    if t.options.default_time_to_live > 0 {
        return Err(invalid(
            "Cannot set or alter default_time_to_live for a materialized view. Data in a materialized view always expire at the same time than the corresponding data in the parent table.",
        ));
    }
    let mut v = v.clone();
    v.table = Arc::new(t);
    let mut next = s.clone();
    if let Some(k) = next.keyspaces.get_mut(&ks_name) {
        k.views.insert(vname.clone(), v);
    }
    Ok(changed(next, SchemaChangeKind::Updated, ks_name, vname))
}

/// DESCRIBE's CREATE MATERIALIZED VIEW statement.
pub fn view_cql(v: &ViewDef, base: &TableSchema) -> String {
    let t = &v.table;
    let q = amphora_types::cql_type::quote_ident;
    let cols = if v.include_all {
        "*".to_string()
    } else {
        crate::select::wildcard_columns(t)
            .iter()
            .map(|id| q(&t.columns[*id as usize].name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pk: Vec<String> = t
        .partition_key
        .iter()
        .map(|i| q(&t.columns[*i as usize].name))
        .collect();
    let mut key = vec![if pk.len() == 1 {
        pk[0].clone()
    } else {
        format!("({})", pk.join(", "))
    }];
    key.extend(
        t.clustering_key
            .iter()
            .map(|i| q(&t.columns[*i as usize].name)),
    );
    // The table's WITH clause, as DESCRIBE TABLE writes it.
    let table = crate::describe::table_cql(t);
    let with = table.split_once(") WITH ").map(|x| x.1).unwrap_or(";");
    format!(
        "CREATE MATERIALIZED VIEW {}.{} AS\n    SELECT {cols}\n    FROM {}.{}\n    WHERE {}\n    PRIMARY KEY ({})\n WITH {with}",
        q(&t.keyspace),
        q(&t.name),
        q(&base.keyspace),
        q(&base.name),
        v.where_text,
        key.join(", ")
    )
}

// ---------------------------------------------------------------------------------------
// Maintenance
// ---------------------------------------------------------------------------------------

/// One base partition a write touches, with the rows it had before the write.
pub struct Touched {
    base: Arc<TableSchema>,
    views: Vec<ViewDef>,
    key: PartitionKey,
    /// Empty: the whole partition.
    slices: Vec<ClusteringSlice>,
    old: Vec<Row>,
}

/// Base rows a write touches, read before it is applied.
#[derive(Default)]
pub struct Pending {
    touched: Vec<Touched>,
}

fn views_of(schema: &Schema, t: &TableSchema) -> Vec<ViewDef> {
    schema
        .keyspace(&t.keyspace)
        .map(|k| {
            k.views
                .values()
                .filter(|v| v.base == t.id)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

async fn read_rows(
    inner: &Rc<Inner>,
    table: TableId,
    key: &PartitionKey,
    slices: &[ClusteringSlice],
) -> Result<Vec<Row>, QueryError> {
    let now_s = (crate::exec::now_micros() / 1_000_000) as i32;
    let mut cmd = ReadCommand::new(table, PartitionRange::Single(key.clone()), now_s);
    cmd.slices = slices.to_vec();
    let info = &inner.shared.info;
    let shard = shard_of(key.token, info.nr_shards, info.ignore_msb);
    let res = crate::exec::on_shard(inner, shard, move || async move {
        let db = amphora_replica::local().map_err(|e| e.to_string())?;
        db.read(&cmd).map_err(|e| e.to_string())
    })
    .await?
    .map_err(|e| QueryError::Server(format!("materialized view read failed: {e}")))?;
    Ok(res.partitions.into_iter().flat_map(|p| p.rows).collect())
}

/// The base table, views and touched slices of a mutation on a table with views (None:
/// no views, or the mutation touches no row).
fn touch_of(
    schema: &Schema,
    m: &Mutation,
) -> Option<(Arc<TableSchema>, Vec<ViewDef>, Vec<ClusteringSlice>)> {
    let t = schema.table_by_id(m.table)?;
    let views = views_of(schema, t);
    if views.is_empty() {
        return None;
    }
    let u = &m.update;
    let whole = u.partition_deletion.is_some() || !u.range_tombstones.is_empty();
    if !whole && u.rows.is_empty() {
        return None;
    }
    let slices: Vec<ClusteringSlice> = if whole || t.clustering_key.is_empty() {
        Vec::new()
    } else {
        u.rows
            .iter()
            .map(|r| ClusteringSlice {
                start: ClusteringBound::inclusive(r.clustering.0.clone()),
                end: ClusteringBound::inclusive(r.clustering.0.clone()),
            })
            .collect()
    };
    Some((t.clone(), views, slices))
}

/// Whether a base mutation implies view maintenance.
pub fn has_views(schema: &Schema, m: &Mutation) -> bool {
    touch_of(schema, m).is_some()
}

/// Reads the base rows `base` mutations touch (on tables with views).
pub async fn prepare(
    inner: &Rc<Inner>,
    schema: &Schema,
    base: &[&Mutation],
) -> Result<Pending, QueryError> {
    let mut out = Pending::default();
    for m in base {
        let Some((base, views, slices)) = touch_of(schema, m) else {
            continue;
        };
        let old = read_rows(inner, base.id, &m.key, &slices).await?;
        out.touched.push(Touched {
            base,
            views,
            key: m.key.clone(),
            slices,
            old,
        });
    }
    Ok(out)
}

impl Pending {
    /// The rows read before the write, one base-table mutation per touched partition (what
    /// the batchlog keeps to redo the view maintenance after a crash).
    pub fn before(&self) -> Vec<Mutation> {
        self.touched
            .iter()
            .map(|t| Mutation {
                table: t.base.id,
                key: t.key.clone(),
                update: PartitionUpdate {
                    rows: t.old.clone(),
                    ..PartitionUpdate::default()
                },
            })
            .collect()
    }
}

/// Rebuilds a [`Pending`] from logged base mutations and the rows logged before them.
pub fn pending_from(schema: &Schema, base: &[Mutation], before: Vec<Mutation>) -> Pending {
    let mut out = Pending::default();
    for m in base {
        let Some((t, views, slices)) = touch_of(schema, m) else {
            continue;
        };
        let old = before
            .iter()
            .find(|b| b.table == m.table && b.key == m.key)
            .map(|b| b.update.rows.clone())
            .unwrap_or_default();
        out.touched.push(Touched {
            base: t,
            views,
            key: m.key.clone(),
            slices,
            old,
        });
    }
    out
}

/// Reads the touched base rows again and rewrites their view rows.
pub async fn finish(inner: &Rc<Inner>, schema: &Schema, p: Pending) -> Result<(), QueryError> {
    let _ = schema;
    let mut planned = Vec::new();
    for t in p.touched {
        let new = read_rows(inner, t.base.id, &t.key, &t.slices).await?;
        let ts = inner.new_timestamp();
        let now_s = (crate::exec::now_micros() / 1_000_000) as i32;
        for v in &t.views {
            let filter = parse_where(v)?;
            let mut by_ck: BTreeMap<Vec<Bytes>, (Option<&Row>, Option<&Row>)> = BTreeMap::new();
            for r in &t.old {
                by_ck.entry(r.clustering.0.clone()).or_default().0 = Some(r);
            }
            for r in &new {
                by_ck.entry(r.clustering.0.clone()).or_default().1 = Some(r);
            }
            for (old, new) in by_ck.values() {
                planned.extend(
                    view_update(&t.base, v, &filter, &t.key, *old, *new, ts, now_s)
                        .into_iter()
                        .map(crate::write::Planned::Mutation),
                );
            }
        }
    }
    crate::write::apply_planned(inner, planned).await
}

fn parse_where(v: &ViewDef) -> Result<Vec<ast::Relation>, QueryError> {
    if v.where_text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let q = format!("SELECT * FROM x WHERE {}", v.where_text);
    match ast::parse(&q) {
        Ok(p) => match p.statement {
            ast::Statement::Select(s) => Ok(s
                .where_clause
                .into_iter()
                .filter(|r| r.op != ast::Operator::IsNotNull)
                .collect()),
            _ => Ok(Vec::new()),
        },
        Err(e) => Err(QueryError::Server(format!(
            "materialized view WHERE clause does not parse: {e}"
        ))),
    }
}

fn partition_of(key: &PartitionKey) -> PartitionData {
    PartitionData {
        key: key.clone(),
        partition_deletion: None,
        static_row: None,
        rows: Default::default(),
    }
}

/// Whether a base row passes the view's non-IS-NOT-NULL restrictions.
fn qualifies(base: &TableSchema, rels: &[ast::Relation], p: &PartitionData, row: &Row) -> bool {
    let ctx = EvalCtx {
        binds: &[],
        now_micros: 0,
    };
    rels.iter().all(|r| {
        let ast::RelationTarget::Column(c) = &r.target else {
            return true;
        };
        let Some((id, def)) = base.column(&c.name) else {
            return false;
        };
        let Some(have) = crate::selector::column_value(base, id, p, row, false) else {
            return false;
        };
        let one = |e: &ast::Expr| match eval(e, &def.ty, &ctx, &def.name) {
            Ok(Value::Set(b)) => Some(b),
            _ => None,
        };
        match (&r.value, r.op) {
            (ast::RelationValue::Single(e), op) => one(e)
                .is_some_and(|w| crate::restrict::comparison_holds(op, def.ty.compare(&have, &w))),
            (ast::RelationValue::List(items), ast::Operator::In) => items
                .iter()
                .filter_map(one)
                .any(|w| def.ty.compare(&have, &w).is_eq()),
            _ => false,
        }
    })
}

/// The view key (partition key bytes, clustering) of a base row, if it has a view row.
fn view_key(
    base: &TableSchema,
    v: &ViewDef,
    rels: &[ast::Relation],
    p: &PartitionData,
    row: &Row,
) -> Option<(PartitionKey, Clustering)> {
    if !qualifies(base, rels, p, row) {
        return None;
    }
    let t = &v.table;
    let value = |vid: ColumnId| -> Option<Bytes> {
        let name = &t.columns[vid as usize].name;
        let (bid, _) = base.column(name)?;
        crate::selector::column_value(base, bid, p, row, false)
    };
    let mut pk = Vec::with_capacity(t.partition_key.len());
    for id in &t.partition_key {
        pk.push(value(*id)?);
    }
    let mut ck = Vec::with_capacity(t.clustering_key.len());
    for id in &t.clustering_key {
        ck.push(value(*id)?);
    }
    let refs: Vec<&[u8]> = pk.iter().map(|b| &b[..]).collect();
    Some((
        PartitionKey::new(Bytes::from(serialize_composite_key(&refs))),
        Clustering(ck),
    ))
}

fn restamp(c: &Cell, ts: i64) -> Cell {
    Cell {
        timestamp: ts,
        ..c.clone()
    }
}

/// The marker of a view row: the base row's liveness (its TTL included), or that of the
/// base cells when the row has no marker, or of the base column in the view key.
fn view_marker(base: &TableSchema, v: &ViewDef, row: &Row, ts: i64) -> LivenessInfo {
    let key_cell = v
        .table
        .partition_key
        .iter()
        .chain(&v.table.clustering_key)
        .find_map(|vid| {
            let (bid, d) = base.column(&v.table.columns[*vid as usize].name)?;
            if d.kind != ColumnKind::Regular {
                return None;
            }
            match row.cell(bid)? {
                ColumnData::Simple(c) if c.ttl > 0 => Some(c.clone()),
                _ => None,
            }
        });
    if let Some(c) = key_cell {
        return LivenessInfo {
            timestamp: ts,
            ttl: c.ttl,
            local_expiry: c.local_expiry,
        };
    }
    if let Some(m) = row.marker {
        return LivenessInfo { timestamp: ts, ..m };
    }
    let mut latest: Option<(amphora_types::data::LocalTime, i32)> = None;
    for (_, d) in &row.cells {
        let cells: Vec<&Cell> = match d {
            ColumnData::Simple(c) => vec![c],
            ColumnData::Complex { cells, .. } => cells.iter().map(|x| &x.1).collect(),
        };
        for c in cells {
            if c.is_tombstone {
                continue;
            }
            if c.ttl <= 0 {
                return LivenessInfo::new(ts);
            }
            if latest.is_none_or(|(e, _)| c.local_expiry > e) {
                latest = Some((c.local_expiry, c.ttl));
            }
        }
    }
    match latest {
        Some((e, ttl)) => LivenessInfo {
            timestamp: ts,
            ttl,
            local_expiry: e,
        },
        None => LivenessInfo::new(ts),
    }
}

#[allow(clippy::too_many_arguments)]
fn view_update(
    base: &TableSchema,
    v: &ViewDef,
    rels: &[ast::Relation],
    key: &PartitionKey,
    old: Option<&Row>,
    new: Option<&Row>,
    ts: i64,
    now_s: i32,
) -> Vec<Mutation> {
    let p = partition_of(key);
    let old_key = old.and_then(|r| view_key(base, v, rels, &p, r));
    let new_key = new.and_then(|r| view_key(base, v, rels, &p, r).map(|k| (k, r)));
    let mut out = Vec::new();
    if let Some((pk, ck)) = &old_key
        && new_key
            .as_ref()
            .is_none_or(|(k, _)| k != &(pk.clone(), ck.clone()))
    {
        let mut row = Row::new(ck.clone());
        row.deletion = Some(DeletionTime::new(ts, now_s));
        out.push(Mutation {
            table: v.table.id,
            key: pk.clone(),
            update: PartitionUpdate {
                rows: vec![row],
                ..PartitionUpdate::default()
            },
        });
    }
    if let Some(((pk, ck), r)) = new_key {
        let t = &v.table;
        let mut row = Row::new(ck);
        // Replaces whatever the view row held: older cells, removed elements, nulls.
        row.deletion = Some(DeletionTime::new(ts - 1, now_s));
        row.marker = Some(view_marker(base, v, r, ts));
        for (vid, c) in t.columns.iter().enumerate() {
            if c.kind != ColumnKind::Regular {
                continue;
            }
            let Some((bid, _)) = base.column(&c.name) else {
                continue;
            };
            let data = match r.cell(bid) {
                Some(ColumnData::Simple(cell)) if !cell.is_tombstone => {
                    ColumnData::Simple(restamp(cell, ts))
                }
                Some(ColumnData::Complex { cells, .. }) => ColumnData::Complex {
                    deletion: None,
                    cells: cells
                        .iter()
                        .filter(|(_, c)| !c.is_tombstone)
                        .map(|(k, c)| (k.clone(), restamp(c, ts)))
                        .collect(),
                },
                _ => continue,
            };
            row.cells.push((vid as ColumnId, data));
        }
        out.push(Mutation {
            table: t.id,
            key: pk,
            update: PartitionUpdate {
                rows: vec![row],
                ..PartitionUpdate::default()
            },
        });
    }
    out
}

struct ViewBuild {
    base: Arc<TableSchema>,
    view: ViewDef,
    rels: Vec<ast::Relation>,
}

impl crate::index::AsyncChunk for ViewBuild {
    async fn chunk(
        &mut self,
        inner: &Rc<Inner>,
        parts: Vec<PartitionData>,
    ) -> Result<(), QueryError> {
        let ts = inner.new_timestamp();
        let now_s = (crate::exec::now_micros() / 1_000_000) as i32;
        let mut planned = Vec::new();
        for p in &parts {
            for r in &p.rows {
                planned.extend(
                    view_update(
                        &self.base,
                        &self.view,
                        &self.rels,
                        &p.key,
                        None,
                        Some(r),
                        ts,
                        now_s,
                    )
                    .into_iter()
                    .map(crate::write::Planned::Mutation),
                );
            }
        }
        crate::write::apply_planned(inner, planned).await
    }
}

/// Fills a new view from the rows already in its base table.
pub async fn build(
    inner: &Rc<Inner>,
    schema: &Schema,
    ks: &str,
    name: &str,
) -> Result<(), QueryError> {
    let Some(view) = schema.view(ks, name).cloned() else {
        return Ok(());
    };
    let Some(base) = schema.table_by_id(view.base).cloned() else {
        return Ok(());
    };
    let rels = parse_where(&view)?;
    let id = base.id;
    crate::index::scan_table(inner, id, ViewBuild { base, view, rels }).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: CqlType, kind: ColumnKind, position: u16) -> ColumnDef {
        ColumnDef {
            name: name.into(),
            ty,
            kind,
            position,
            order: ClusteringOrder::Asc,
        }
    }

    use amphora_types::CqlType;

    fn int(v: i32) -> Bytes {
        Bytes::copy_from_slice(&v.to_be_bytes())
    }

    /// Base (k PRIMARY KEY, v, w); view PRIMARY KEY (v, k) selecting w.
    fn setup() -> (TableSchema, ViewDef) {
        let base = TableSchema::new(
            TableId(1),
            "ks",
            "t",
            vec![
                col("k", CqlType::Int, ColumnKind::PartitionKey, 0),
                col("v", CqlType::Int, ColumnKind::Regular, 0),
                col("w", CqlType::Int, ColumnKind::Regular, 0),
            ],
            TableOptions::default(),
        );
        let view = TableSchema::new(
            TableId(2),
            "ks",
            "mv",
            vec![
                col("v", CqlType::Int, ColumnKind::PartitionKey, 0),
                col("k", CqlType::Int, ColumnKind::Clustering, 0),
                col("w", CqlType::Int, ColumnKind::Regular, 0),
            ],
            TableOptions::default(),
        );
        (
            base,
            ViewDef {
                base: TableId(1),
                include_all: true,
                where_text: "v IS NOT NULL AND k IS NOT NULL".into(),
                table: Arc::new(view),
            },
        )
    }

    fn base_row(v: Option<i32>, w: i32) -> Row {
        let mut r = Row::new(Clustering::empty());
        r.marker = Some(LivenessInfo::new(5));
        if let Some(v) = v {
            r.cells.push((1, ColumnData::Simple(Cell::live(5, int(v)))));
        }
        r.cells.push((2, ColumnData::Simple(Cell::live(5, int(w)))));
        r
    }

    #[test]
    fn key_change_deletes_the_old_view_row() {
        let (base, v) = setup();
        let key = PartitionKey::new(int(1));
        let old = base_row(Some(10), 100);
        let new = base_row(Some(20), 100);
        let ms = view_update(&base, &v, &[], &key, Some(&old), Some(&new), 50, 1000);
        assert_eq!(ms.len(), 2);
        assert_eq!(ms[0].key, PartitionKey::new(int(10)));
        let del = &ms[0].update.rows[0];
        assert_eq!(del.clustering, Clustering(vec![int(1)]));
        assert_eq!(del.deletion.map(|d| d.marked_for_delete_at), Some(50));
        assert!(del.marker.is_none());
        assert_eq!(ms[1].key, PartitionKey::new(int(20)));
        let up = &ms[1].update.rows[0];
        assert_eq!(up.deletion.map(|d| d.marked_for_delete_at), Some(49));
        assert_eq!(up.marker.map(|m| m.timestamp), Some(50));
        assert!(
            matches!(up.cell(2), Some(ColumnData::Simple(c)) if c.value == int(100) && c.timestamp == 50)
        );
    }

    #[test]
    fn same_key_rewrites_in_place_and_null_key_removes() {
        let (base, v) = setup();
        let key = PartitionKey::new(int(1));
        let old = base_row(Some(10), 100);
        let same = base_row(Some(10), 200);
        let ms = view_update(&base, &v, &[], &key, Some(&old), Some(&same), 50, 1000);
        assert_eq!(ms.len(), 1, "no deletion when the view key is unchanged");
        let gone = base_row(None, 200);
        let ms = view_update(&base, &v, &[], &key, Some(&old), Some(&gone), 60, 1000);
        assert_eq!(ms.len(), 1);
        assert!(ms[0].update.rows[0].marker.is_none());
        assert!(view_update(&base, &v, &[], &key, None, Some(&gone), 70, 1000).is_empty());
    }
}
