//! Conditional writes (LWT) on a single node: the owning shard reads the partition and
//! applies the write with no await in between, which makes the check-and-set
//! linearizable there. Conditional batches work the same way (one partition).
//! Paxos across replicas comes with the cluster.

use std::rc::Rc;
use std::sync::Arc;

use amphora_cql as ast;
use amphora_storage::{PartitionData, PartitionRange, ReadCommand};
use amphora_types::CqlType;
use amphora_types::data::{Clustering, ClusteringBound, ClusteringSlice, Mutation, Row};
use amphora_types::schema::{ColumnId, ColumnKind, TableSchema};
use amphora_types::token::shard_of;
use bytes::Bytes;

use crate::api::*;
use crate::exec::Inner;
use crate::values::{EvalCtx, Value, eval};
use crate::write::Planned;

/// Which part of a column a condition compares.
#[derive(Clone, Debug)]
enum Part {
    Whole,
    /// A map key or a list index (`IF m['k'] = …`, `IF l[0] = …`).
    MapKey(Bytes),
    ListIndex(i32),
    /// A UDT field by position (`IF u.f = …`).
    Field(usize),
}

#[derive(Clone, Debug)]
struct ColumnCheck {
    column: ColumnId,
    part: Part,
    op: ast::Operator,
    /// The operand (several for IN); None is null.
    want: Vec<Option<Bytes>>,
    /// The type of the compared value.
    ty: CqlType,
}

#[derive(Clone, Debug)]
enum Check {
    NotExists,
    Exists,
    Columns(Vec<ColumnCheck>),
}

/// One conditional statement: its check on one row (None: the static row / partition).
#[derive(Clone, Debug)]
struct RowCheck {
    clustering: Option<Clustering>,
    check: Check,
}

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::Invalid(m.into())
}

fn operand(
    e: &ast::Expr,
    ty: &CqlType,
    ctx: &EvalCtx<'_>,
    name: &str,
) -> Result<Option<Bytes>, QueryError> {
    Ok(match eval(e, ty, ctx, name)? {
        Value::Set(b) => Some(b),
        _ => None,
    })
}

fn build_check(
    table: &TableSchema,
    st: &ast::Statement,
    ctx: &EvalCtx<'_>,
) -> Result<Check, QueryError> {
    let conds = match st {
        ast::Statement::Insert(_) => return Ok(Check::NotExists),
        ast::Statement::Update(s) => s.conditions.as_ref(),
        ast::Statement::Delete(s) => s.conditions.as_ref(),
        _ => None,
    };
    let cs = match conds {
        Some(ast::Conditions::Exists) => return Ok(Check::Exists),
        Some(ast::Conditions::Columns(cs)) => cs,
        None => {
            return Err(QueryError::Server(
                "conditional write without conditions".into(),
            ));
        }
    };
    let mut out = Vec::new();
    for c in cs {
        let col = match &c.target {
            ast::ConditionTarget::Column(col)
            | ast::ConditionTarget::Element { column: col, .. }
            | ast::ConditionTarget::Field { column: col, .. } => col,
        };
        let (id, def) = table
            .column(&col.name)
            .ok_or_else(|| invalid(format!("Undefined column name {}", col.name)))?;
        if matches!(def.kind, ColumnKind::PartitionKey | ColumnKind::Clustering) {
            return Err(invalid(format!(
                "PRIMARY KEY column '{}' cannot have IF conditions",
                def.name
            )));
        }
        let (part, ty) = match (&c.target, &def.ty) {
            (ast::ConditionTarget::Column(_), t) => (Part::Whole, t.clone()),
            (ast::ConditionTarget::Element { key, .. }, CqlType::Map { key: kt, value, .. }) => {
                let k = operand(key, kt, ctx, &def.name)?.ok_or_else(|| {
                    invalid(format!(
                        "Invalid null value for map element access on {}",
                        def.name
                    ))
                })?;
                (Part::MapKey(k), (**value).clone())
            }
            (ast::ConditionTarget::Element { key, .. }, CqlType::List { elem, .. }) => {
                let i = operand(key, &CqlType::Int, ctx, &def.name)?.ok_or_else(|| {
                    invalid(format!("Invalid null value for list index on {}", def.name))
                })?;
                let arr: [u8; 4] = i[..]
                    .try_into()
                    .map_err(|_| invalid("Invalid list index"))?;
                (Part::ListIndex(i32::from_be_bytes(arr)), (**elem).clone())
            }
            (ast::ConditionTarget::Element { .. }, _) => {
                return Err(invalid(format!(
                    "Invalid element access syntax for non-collection column {}",
                    def.name
                )));
            }
            (ast::ConditionTarget::Field { field, .. }, CqlType::Udt(u)) => {
                let i = u
                    .field_names
                    .iter()
                    .position(|f| *f == field.name)
                    .ok_or_else(|| {
                        invalid(format!(
                            "Unknown field {} for column {}",
                            field.name, def.name
                        ))
                    })?;
                (Part::Field(i), u.field_types[i].clone())
            }
            (ast::ConditionTarget::Field { .. }, _) => {
                return Err(invalid(format!(
                    "Invalid field selection: {} of type {} is not a user type",
                    def.name, def.ty
                )));
            }
        };
        // `IF l CONTAINS x` / `IF m CONTAINS KEY k`: the operand is an element.
        let ty = match (c.op, &part, &ty) {
            (
                ast::Operator::Contains,
                Part::Whole,
                CqlType::List { elem, .. } | CqlType::Set { elem, .. },
            ) => (**elem).clone(),
            (ast::Operator::Contains, Part::Whole, CqlType::Map { value, .. }) => (**value).clone(),
            (ast::Operator::ContainsKey, Part::Whole, CqlType::Map { key, .. }) => (**key).clone(),
            (ast::Operator::Contains | ast::Operator::ContainsKey, _, t) => {
                return Err(invalid(format!(
                    "Cannot use {} on non-collection column {} of type {t}",
                    c.op.as_str(),
                    def.name
                )));
            }
            _ => ty,
        };
        let want = match (&c.value, c.op) {
            (ast::RelationValue::Single(e), ast::Operator::In) => {
                let list_ty = CqlType::List {
                    elem: Box::new(ty.clone()),
                    frozen: true,
                };
                match operand(e, &list_ty, ctx, &def.name)? {
                    Some(b) => amphora_types::cql_type::split_collection(&b, 1)
                        .map_err(|e| invalid(format!("Invalid IN list: {e}")))?
                        .into_iter()
                        .map(|x| x.map(Bytes::copy_from_slice))
                        .collect(),
                    None => return Err(invalid("Invalid null list in IN condition")),
                }
            }
            (ast::RelationValue::List(items), ast::Operator::In) => items
                .iter()
                .map(|e| operand(e, &ty, ctx, &def.name))
                .collect::<Result<_, _>>()?,
            (ast::RelationValue::Single(e), op) => {
                let v = operand(e, &ty, ctx, &def.name)?;
                if v.is_none()
                    && matches!(
                        op,
                        ast::Operator::Lt
                            | ast::Operator::Lte
                            | ast::Operator::Gt
                            | ast::Operator::Gte
                            | ast::Operator::Contains
                            | ast::Operator::ContainsKey
                    )
                {
                    return Err(invalid(format!(
                        "Invalid comparison with null for operator \"{}\"",
                        op.as_str()
                    )));
                }
                // An empty collection is the same as null.
                let empty = matches!(part, Part::Whole)
                    && matches!(
                        ty,
                        CqlType::List { .. } | CqlType::Set { .. } | CqlType::Map { .. }
                    )
                    && v.as_ref().is_some_and(|b| b[..] == [0, 0, 0, 0]);
                vec![if empty { None } else { v }]
            }
            _ => return Err(invalid(format!("Invalid condition on {}", def.name))),
        };
        out.push(ColumnCheck {
            column: id,
            part,
            op: c.op,
            want,
            ty,
        });
    }
    Ok(Check::Columns(out))
}

/// The current value a condition compares.
fn current_value(
    t: &TableSchema,
    c: &ColumnCheck,
    p: &PartitionData,
    row: Option<&Row>,
) -> Option<Bytes> {
    let def = t.column_by_id(c.column)?;
    let data = if def.kind == ColumnKind::Static {
        p.static_row.as_ref()?.cell(c.column)?
    } else {
        row?.cell(c.column)?
    };
    let whole = crate::selector::data_value(&def.ty, data)?;
    match (&c.part, &def.ty) {
        (Part::Whole, _) => Some(whole),
        (Part::MapKey(k), CqlType::Map { key, .. }) => {
            let items = amphora_types::cql_type::split_collection(&whole, 2).ok()?;
            items
                .chunks(2)
                .find_map(|kv| match (kv.first(), kv.get(1)) {
                    (Some(Some(x)), Some(Some(v))) if key.compare(x, k).is_eq() => {
                        Some(Bytes::copy_from_slice(v))
                    }
                    _ => None,
                })
        }
        (Part::ListIndex(i), _) => {
            let items = amphora_types::cql_type::split_collection(&whole, 1).ok()?;
            let i = usize::try_from(*i).ok()?;
            items.get(i).copied().flatten().map(Bytes::copy_from_slice)
        }
        (Part::Field(i), _) => {
            let fields = amphora_types::cql_type::split_tuple(&whole).ok()?;
            fields
                .get(*i)
                .copied()
                .flatten()
                .map(Bytes::copy_from_slice)
        }
        _ => None,
    }
}

fn row_of<'a>(p: Option<&'a PartitionData>, clustering: &Option<Clustering>) -> Option<&'a Row> {
    let p = p?;
    match clustering {
        Some(c) => p.rows.iter().find(|r| r.clustering == *c),
        None => None,
    }
}

fn holds(t: &TableSchema, rc: &RowCheck, p: Option<&PartitionData>) -> bool {
    let row = row_of(p, &rc.clustering);
    let exists = row.is_some()
        || (rc.clustering.is_none()
            && p.is_some_and(|p| p.static_row.is_some() || !p.rows.is_empty()));
    match &rc.check {
        Check::NotExists => !exists,
        Check::Exists => exists,
        Check::Columns(cs) => cs.iter().all(|c| {
            let have = p.and_then(|p| current_value(t, c, p, row));
            if matches!(c.op, ast::Operator::Contains | ast::Operator::ContainsKey) {
                let Some(want) = c.want.first().cloned().flatten() else {
                    return false;
                };
                return have.is_some_and(|h| contains(t, c, &h, &want));
            }
            if c.op == ast::Operator::In {
                return c
                    .want
                    .iter()
                    .any(|w| compare(ast::Operator::Eq, have.as_ref(), w.as_ref(), &c.ty));
            }
            let want = c.want.first().cloned().flatten();
            compare(c.op, have.as_ref(), want.as_ref(), &c.ty)
        }),
    }
}

/// Checks, then applies, on the shard owning `key`, with no await in between.
/// Returns whether the write applied and the partition as it was read.
async fn check_and_apply(
    inner: &Rc<Inner>,
    table: &Arc<TableSchema>,
    key: amphora_types::data::PartitionKey,
    slices: Vec<ClusteringSlice>,
    checks: Vec<RowCheck>,
    mutations: Vec<Mutation>,
) -> Result<(bool, Option<PartitionData>), QueryError> {
    let info = &inner.shared.info;
    let shard = shard_of(key.token, info.nr_shards, info.ignore_msb);
    let table_for_shard = table.clone();
    inner
        .shared
        .shards
        .submit_to(shard, move || async move {
            let db = amphora_replica::local().map_err(|e| e.to_string())?;
            // A table with views: the partition lock every write to it holds (batchlog.rs),
            // across the check, the write and the view maintenance.
            let coordinator = crate::exec::local();
            let schema = coordinator.as_ref().map(|c| c.inner.schema());
            let viewed = schema
                .as_ref()
                .is_some_and(|s| mutations.iter().any(|m| crate::view::has_views(s, m)));
            let _guard = if viewed {
                Some(
                    crate::batchlog::PartitionLocks::local()
                        .lock(table_for_shard.id, &key.key)
                        .await,
                )
            } else {
                None
            };
            let mut cmd = ReadCommand::new(
                table_for_shard.id,
                PartitionRange::Single(key),
                (crate::exec::now_micros() / 1_000_000) as i32,
            );
            cmd.slices = slices;
            let cur = db.read(&cmd).map_err(|e| e.to_string())?;
            let part = cur.partitions.into_iter().next();
            let ok = checks
                .iter()
                .all(|c| holds(&table_for_shard, c, part.as_ref()));
            if ok {
                let views = match (&coordinator, &schema) {
                    (Some(c), Some(schema)) if viewed => {
                        let refs: Vec<&Mutation> = mutations.iter().collect();
                        let pending = crate::view::prepare(&c.inner, schema, &refs)
                            .await
                            .map_err(|e| e.to_string())?;
                        // Logged with the rows read, so a crash before the view rows are
                        // written is redone at the next start.
                        let entry = crate::batchlog::log_view(
                            &c.inner,
                            mutations.clone(),
                            pending.before(),
                        )
                        .await
                        .map_err(|e| e.to_string())?;
                        Some((c.inner.clone(), schema.clone(), pending, entry))
                    }
                    _ => None,
                };
                let mut acks = Vec::with_capacity(mutations.len());
                for m in &mutations {
                    acks.push(db.storage().apply(m).map_err(|e| e.to_string())?);
                }
                for a in acks {
                    a.await.map_err(|e| e.to_string())?;
                }
                if let Some((inner, schema, pending, entry)) = views {
                    crate::view::finish(&inner, &schema, pending)
                        .await
                        .map_err(|e| e.to_string())?;
                    crate::batchlog::forget(&inner, entry)
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            Ok::<(bool, Option<PartitionData>), String>((ok, part))
        })
        .await
        .map_err(|e| QueryError::Server(e.to_string()))?
        .map_err(QueryError::Server)
}

/// Index entries of an applied conditional write (view updates are written on the owning
/// shard, under the partition lock, in `check_and_apply`).
async fn apply_derived(inner: &Rc<Inner>, entries: Vec<Mutation>) -> Result<(), QueryError> {
    if entries.is_empty() {
        return Ok(());
    }
    crate::write::apply_planned(inner, entries.into_iter().map(Planned::Mutation).collect()).await
}

fn prepare_derived(inner: &Rc<Inner>, mutations: &[Mutation]) -> Vec<Mutation> {
    let schema = inner.schema();
    if !schema.has_derived() {
        return Vec::new();
    }
    let refs: Vec<&Mutation> = mutations.iter().collect();
    crate::index::derived_mutations(&schema, &refs)
}

fn applied_column(table: &TableSchema) -> ResultColumn {
    ResultColumn {
        keyspace: table.keyspace.clone(),
        table: table.name.clone(),
        name: "[applied]".into(),
        ty: CqlType::Boolean,
    }
}

fn result_column(table: &TableSchema, id: ColumnId) -> ResultColumn {
    let def = &table.columns[id as usize];
    ResultColumn {
        keyspace: table.keyspace.clone(),
        table: table.name.clone(),
        name: def.name.clone(),
        ty: def.ty.clone(),
    }
}

fn applied_cell(applied: bool) -> Option<Bytes> {
    Some(Bytes::from_static(if applied { &[1] } else { &[0] }))
}

pub async fn run_conditional(
    inner: &Rc<Inner>,
    table: &Arc<TableSchema>,
    st: &ast::Statement,
    ctx: &EvalCtx<'_>,
    planned: Vec<Planned>,
) -> Result<QueryResult, QueryError> {
    let check = build_check(table, st, ctx)?;
    if planned.len() != 1 {
        return Err(invalid(
            "IN on the partition key is not supported with conditional updates",
        ));
    }
    let Some(Planned::Mutation(m)) = planned.into_iter().next() else {
        return Err(invalid(
            "Conditional updates are not supported on counter tables",
        ));
    };
    if m.update.rows.len() > 1 {
        return Err(invalid(
            "IN on the clustering key columns is not supported with conditional updates",
        ));
    }
    let clustering = if table.clustering_key.is_empty() {
        Some(Clustering::empty())
    } else {
        m.update.rows.first().map(|r| r.clustering.clone())
    };
    let slices = match (&clustering, table.clustering_key.is_empty()) {
        (Some(c), false) => vec![ClusteringSlice {
            start: ClusteringBound::inclusive(c.0.clone()),
            end: ClusteringBound::inclusive(c.0.clone()),
        }],
        _ => Vec::new(),
    };
    // Columns shown with [applied] = false: the whole row for IF NOT EXISTS / IF EXISTS,
    // the condition columns otherwise (Cassandra's layout).
    let shown: Vec<ColumnId> = match &check {
        Check::Columns(cs) => {
            let mut v: Vec<ColumnId> = Vec::new();
            for c in cs {
                if !v.contains(&c.column) {
                    v.push(c.column);
                }
            }
            v
        }
        _ => crate::select::wildcard_columns(table),
    };
    let row_check = RowCheck {
        clustering: clustering.clone(),
        check,
    };
    let key = m.key.clone();
    let mutations = vec![m];
    let derived = prepare_derived(inner, &mutations);
    let (applied, part) = check_and_apply(
        inner,
        table,
        key,
        slices,
        vec![row_check.clone()],
        mutations.clone(),
    )
    .await?;
    if applied {
        apply_derived(inner, derived).await?;
    }
    let mut columns = vec![applied_column(table)];
    let mut cells = vec![applied_cell(applied)];
    let empty = Row::new(Clustering::empty());
    let (row, static_only) = match row_of(part.as_ref(), &row_check.clustering) {
        Some(r) => (Some(r), false),
        // The row is absent but the partition has statics: show those.
        None => (
            part.as_ref()
                .and_then(|p| p.static_row.as_ref())
                .map(|_| &empty),
            true,
        ),
    };
    let statics_only_check = match &row_check.check {
        Check::Columns(cs) => cs.iter().all(|c| {
            table
                .column_by_id(c.column)
                .is_some_and(|d| d.kind == ColumnKind::Static)
        }),
        _ => row_check.clustering.is_none(),
    };
    if !applied
        && let (Some(p), Some(r)) = (&part, row)
        && (!static_only || statics_only_check)
    {
        for id in &shown {
            columns.push(result_column(table, *id));
            cells.push(crate::select::column_value(table, *id, p, r, static_only));
        }
    }
    Ok(QueryResult::Rows(ResultRows::single_row(
        Arc::new(columns),
        cells,
    )))
}

/// One statement of a conditional batch: its table, the statement, whether it has a
/// condition, its planned writes and its bound values.
pub type BatchItem = (
    Arc<TableSchema>,
    ast::Statement,
    bool,
    Vec<Planned>,
    Vec<BoundValue>,
);

/// A conditional BATCH: every statement on one partition of one table; all conditions
/// are checked and all statements applied together, or none.
pub async fn run_conditional_batch(
    inner: &Rc<Inner>,
    items: Vec<BatchItem>,
    now_micros: i64,
) -> Result<QueryResult, QueryError> {
    let Some(table) = items.first().map(|i| i.0.clone()) else {
        return Ok(QueryResult::Void);
    };
    let mut key = None;
    let mut mutations: Vec<Mutation> = Vec::new();
    let mut checks: Vec<RowCheck> = Vec::new();
    for (t, st, conditional, planned, binds) in &items {
        if t.id != table.id {
            return Err(invalid("Batch with conditions cannot span multiple tables"));
        }
        let ctx = EvalCtx { binds, now_micros };
        for p in planned {
            let Planned::Mutation(m) = p else {
                return Err(invalid(
                    "Conditional updates are not supported on counter tables",
                ));
            };
            match &key {
                None => key = Some(m.key.clone()),
                Some(k) if *k != m.key => {
                    return Err(invalid(
                        "Batch with conditions cannot span multiple partitions",
                    ));
                }
                _ => {}
            }
            mutations.push(m.clone());
        }
        if *conditional {
            let m = planned.iter().find_map(|p| match p {
                Planned::Mutation(m) => Some(m),
                _ => None,
            });
            if m.is_some_and(|m| m.update.rows.len() > 1) {
                return Err(invalid(
                    "IN on the clustering key columns is not supported with conditional updates",
                ));
            }
            let clustering = if table.clustering_key.is_empty() {
                Some(Clustering::empty())
            } else {
                m.and_then(|m| m.update.rows.first())
                    .map(|r| r.clustering.clone())
            };
            let check = build_check(t, st, &ctx)?;
            let mixes = checks.iter().any(|c: &RowCheck| {
                c.clustering == clustering
                    && (matches!(c.check, Check::NotExists) != matches!(check, Check::NotExists))
            });
            if mixes {
                return Err(invalid(
                    "Cannot mix IF conditions and IF NOT EXISTS for the same row",
                ));
            }
            checks.push(RowCheck { clustering, check });
        }
    }
    let Some(key) = key else {
        return Ok(QueryResult::Void);
    };
    let derived = prepare_derived(inner, &mutations);
    let (applied, part) = check_and_apply(
        inner,
        &table,
        key,
        Vec::new(),
        checks.clone(),
        mutations.clone(),
    )
    .await?;
    if applied {
        apply_derived(inner, derived).await?;
    }
    let mut columns = vec![applied_column(&table)];
    if applied {
        return Ok(QueryResult::Rows(ResultRows::single_row(
            Arc::new(columns),
            vec![applied_cell(true)],
        )));
    }
    // Not applied: one row per checked row that exists, with the key columns and the
    // columns of the conditions (every column for IF [NOT] EXISTS).
    let whole = checks
        .iter()
        .any(|c| matches!(c.check, Check::Exists | Check::NotExists));
    let mut shown: Vec<ColumnId> = table.partition_key.clone();
    shown.extend(&table.clustering_key);
    for id in crate::select::wildcard_columns(&table) {
        let used = whole
            || checks.iter().any(|c| match &c.check {
                Check::Columns(cs) => cs.iter().any(|x| x.column == id),
                _ => false,
            });
        if used && !shown.contains(&id) {
            shown.push(id);
        }
    }
    columns.extend(shown.iter().map(|id| result_column(&table, *id)));
    // As Cassandra's CQL3CasRequest, static columns are read (and so shown) only when the
    // batch writes the static row or a condition names them; regular columns likewise.
    let updates_static = mutations.iter().any(|m| m.update.static_row.is_some());
    let updates_rows = mutations
        .iter()
        .any(|m| !m.update.rows.is_empty() || m.update.partition_deletion.is_some());
    let read = |id: ColumnId| -> bool {
        let kind = table.column_by_id(id).map(|c| c.kind);
        let named = || {
            checks.iter().any(|c| match &c.check {
                Check::Columns(cs) => cs.iter().any(|x| x.column == id),
                _ => false,
            })
        };
        match kind {
            Some(ColumnKind::Static) => updates_static || named(),
            Some(ColumnKind::Regular) => updates_rows || named(),
            _ => true,
        }
    };
    let mut cells = Vec::new();
    let mut rows = 0;
    let mut seen: Vec<Option<Clustering>> = Vec::new();
    if let Some(p) = &part {
        let empty = Row::new(Clustering::empty());
        for c in &checks {
            if seen.contains(&c.clustering) {
                continue;
            }
            seen.push(c.clustering.clone());
            let row = match &c.clustering {
                Some(_) => row_of(Some(p), &c.clustering),
                None => p
                    .rows
                    .first()
                    .filter(|_| table.clustering_key.is_empty())
                    .or(p.static_row.as_ref().map(|_| &empty)),
            };
            let Some(r) = row else { continue };
            let static_only = std::ptr::eq(r, &empty);
            cells.push(applied_cell(false));
            for id in &shown {
                cells.push(if read(*id) {
                    crate::select::column_value(&table, *id, p, r, static_only)
                } else {
                    None
                });
            }
            rows += 1;
        }
    }
    if rows == 0 {
        columns.truncate(1);
        cells = vec![applied_cell(false)];
        rows = 1;
    }
    Ok(QueryResult::Rows(ResultRows {
        columns: Arc::new(columns),
        cells,
        row_count: rows,
        paging_state: None,
        no_metadata: false,
    }))
}

/// Whether a collection value contains an element (CONTAINS) or a map key (CONTAINS KEY).
fn contains(t: &TableSchema, c: &ColumnCheck, have: &[u8], want: &[u8]) -> bool {
    let Some(def) = t.column_by_id(c.column) else {
        return false;
    };
    let per = if matches!(def.ty, CqlType::Map { .. }) {
        2
    } else {
        1
    };
    let Ok(items) = amphora_types::cql_type::split_collection(have, per) else {
        return false;
    };
    let pick = match (c.op, per) {
        (ast::Operator::ContainsKey, _) | (_, 1) => 0,
        _ => 1,
    };
    items
        .chunks(per)
        .filter_map(|kv| kv.get(pick).copied().flatten())
        .any(|x| c.ty.compare(x, want).is_eq())
}

fn compare(op: ast::Operator, have: Option<&Bytes>, want: Option<&Bytes>, ty: &CqlType) -> bool {
    match (have, want) {
        (None, None) => matches!(op, ast::Operator::Eq),
        (None, Some(_)) | (Some(_), None) => matches!(op, ast::Operator::Neq),
        (Some(h), Some(w)) => {
            let o = ty.compare(h, w);
            crate::restrict::comparison_holds(op, o)
        }
    }
}
