//! SELECT: restrictions → storage reads on the owning shards → result rows, with paging.

use std::ops::Bound;
use std::rc::Rc;
use std::sync::Arc;

use amphora_cql as ast;
use amphora_storage::{PartitionData, PartitionRange, ReadCommand};
use amphora_types::CqlType;
use amphora_types::data::{Clustering, PartitionKey, Row};
use amphora_types::schema::{ColumnKind, TableSchema};
use amphora_types::token::shard_of;
use bytes::{BufMut, Bytes, BytesMut};

use crate::api::*;
use crate::exec::Inner;
use crate::restrict::{self, Filter};
use crate::selector;
use crate::values::{EvalCtx, Value, eval};

pub use crate::selector::{
    SelItem, column_value, data_value, is_aggregate, selection, split_composite, wildcard_columns,
};

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::Invalid(m.into())
}

pub fn result_columns(
    t: &TableSchema,
    s: &ast::SelectStatement,
) -> Result<Vec<ResultColumn>, QueryError> {
    Ok(selection(t, s)?
        .into_iter()
        .map(|i| ResultColumn {
            keyspace: t.keyspace.clone(),
            table: t.name.clone(),
            name: i.name,
            ty: i.ty,
        })
        .collect())
}

fn int_of(e: &Option<ast::Expr>, ctx: &EvalCtx<'_>, name: &str) -> Result<Option<u32>, QueryError> {
    let Some(e) = e else { return Ok(None) };
    match eval(e, &CqlType::Int, ctx, name)? {
        Value::Set(b) => {
            let arr: [u8; 4] = b[..]
                .try_into()
                .map_err(|_| invalid(format!("Invalid {name}")))?;
            let v = i32::from_be_bytes(arr);
            if v <= 0 {
                return Err(invalid(format!(
                    "{} must be strictly positive",
                    if name == "[limit]" {
                        "LIMIT"
                    } else {
                        "PER PARTITION LIMIT"
                    }
                )));
            }
            Ok(Some(v as u32))
        }
        Value::Unset => Ok(None),
        Value::Null => Err(invalid(format!("Invalid null value of {name}"))),
    }
}

/// The statement's LIMIT, if any.
pub(crate) fn limit_of(
    s: &ast::SelectStatement,
    ctx: &EvalCtx<'_>,
) -> Result<Option<u32>, QueryError> {
    int_of(&s.limit, ctx, "[limit]")
}

/// Position after which the next page starts, plus rows still allowed by LIMIT.
struct PagingState {
    key: PartitionKey,
    clustering: Option<Clustering>,
    remaining: u32,
}

fn encode_paging(p: &PagingState) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u8(1);
    b.put_i64(p.key.token);
    b.put_u32(p.key.key.len() as u32);
    b.put_slice(&p.key.key);
    match &p.clustering {
        None => b.put_i32(-1),
        Some(c) => {
            b.put_i32(c.0.len() as i32);
            for comp in &c.0 {
                b.put_u32(comp.len() as u32);
                b.put_slice(comp);
            }
        }
    }
    b.put_u32(p.remaining);
    b.freeze()
}

fn decode_paging(b: &[u8]) -> Result<PagingState, QueryError> {
    let bad = || QueryError::Invalid("Invalid value for the paging state".into());
    let mut r = b;
    let mut take = |n: usize| -> Result<&[u8], QueryError> {
        if r.len() < n {
            return Err(bad());
        }
        let (h, t) = r.split_at(n);
        r = t;
        Ok(h)
    };
    if take(1)? != [1] {
        return Err(bad());
    }
    let token = i64::from_be_bytes(take(8)?.try_into().map_err(|_| bad())?);
    let klen = u32::from_be_bytes(take(4)?.try_into().map_err(|_| bad())?) as usize;
    let key = Bytes::copy_from_slice(take(klen)?);
    let n = i32::from_be_bytes(take(4)?.try_into().map_err(|_| bad())?);
    let clustering = if n < 0 {
        None
    } else {
        let mut comps = Vec::new();
        for _ in 0..n {
            let l = u32::from_be_bytes(take(4)?.try_into().map_err(|_| bad())?) as usize;
            comps.push(Bytes::copy_from_slice(take(l)?));
        }
        Some(Clustering(comps))
    };
    let remaining = u32::from_be_bytes(take(4)?.try_into().map_err(|_| bad())?);
    Ok(PagingState {
        key: PartitionKey { token, key },
        clustering,
        remaining,
    })
}

/// What a SELECT resolves to against one schema version (cached per prepared statement;
/// prepared statements on a changed table are invalidated, so the cache never goes stale).
#[derive(Debug)]
pub struct SelectPlan {
    pub table: Arc<TableSchema>,
    /// Shared with other plans over the same table version for `SELECT *`.
    pub items: Arc<Vec<SelItem>>,
    pub columns: Arc<Vec<ResultColumn>>,
    pub is_virtual: bool,
    /// Consistency levels a read of this keyspace accepts ([`crate::consistency::accepted`]).
    pub consistency_ok: u32,
    /// Set when the statement is a plain point read (see [`PointRead`]).
    pub point: Option<PointRead>,
}

/// `SELECT <plain selectors> FROM t WHERE pk1 = ? AND pk2 = ? [AND ck1 > ? [AND ck1 <= ?]]
/// [ORDER BY ck1 [, ck2 ...]] [LIMIT n]`: one `=` per partition-key column, at most one
/// lower and one upper bound (`>`, `>=`, `<`, `<=`) on the first clustering column (a
/// time series' "since" and "until"), an ORDER BY naming the first clustering columns in
/// key order (all in their stored order or all reversed: "the latest n" of an ascending
/// series), and nothing else (no other clustering or regular restriction, DISTINCT,
/// GROUP BY, aggregate, PER PARTITION LIMIT or JSON). For that shape every check the
/// general path makes passes, the read is one clustering slice of one partition, and no
/// row needs filtering, so EXECUTE only evaluates the key and bound terms, reads and
/// projects.
#[derive(Debug)]
pub struct PointRead {
    /// For each partition-key column in key order: the index of its relation in the WHERE
    /// clause.
    pub pk_relations: Vec<usize>,
    /// The first clustering column's lower and upper bound: (relation index, inclusive).
    pub ck_lower: Option<(usize, bool)>,
    pub ck_upper: Option<(usize, bool)>,
    /// Rows in reverse clustering order (the ORDER BY reverses the stored order).
    pub reversed: bool,
    /// The bounds' values where the statement gives them as literals (`time >= 90`),
    /// evaluated once with the plan rather than at every execution.
    ck_lower_value: Option<Bytes>,
    ck_upper_value: Option<Bytes>,
    /// The LIMIT when it is absent (`Some(None)`) or a valid literal; `None`: evaluated at
    /// each execution (a bind marker, or a literal whose error the general path reports).
    limit_value: Option<Option<u32>>,
}

/// The value of WHERE relation `rel`, a bound on the first clustering column; None when it
/// does not evaluate to a valid non-empty value.
fn bound_value(
    t: &TableSchema,
    s: &ast::SelectStatement,
    rel: usize,
    ctx: &EvalCtx<'_>,
) -> Option<Bytes> {
    let ast::RelationValue::Single(e) = &s.where_clause.get(rel)?.value else {
        return None;
    };
    let def = &t.columns[*t.clustering_key.first()? as usize];
    crate::values::eval_set(e, &def.ty, ctx, &def.name)
        .ok()
        .filter(|v| !v.is_empty())
}

/// Whether an ORDER BY that names the first clustering columns in key order, all in
/// their stored order or all reversed, reverses the stored order (false without ORDER
/// BY). None for any other ORDER BY: the general path checks it, and answers with its
/// error where there is one.
fn simple_order(t: &TableSchema, s: &ast::SelectStatement) -> Option<bool> {
    let mut reversed = None;
    for (i, o) in s.order_by.iter().enumerate() {
        if o.ann_of.is_some() {
            return None;
        }
        let (id, d) = t.column(&o.column.name)?;
        if d.kind != ColumnKind::Clustering || t.clustering_key.get(i) != Some(&id) {
            return None;
        }
        let desc = d.order == amphora_types::schema::ClusteringOrder::Desc;
        let r = (o.order == ast::Order::Desc) != desc;
        if *reversed.get_or_insert(r) != r {
            return None;
        }
    }
    Some(reversed.unwrap_or(false))
}

impl PointRead {
    fn of(t: &TableSchema, s: &ast::SelectStatement, items: &[SelItem]) -> Option<PointRead> {
        let reversed = simple_order(t, s)?;
        if s.json
            || s.distinct
            || !s.group_by.is_empty()
            || s.per_partition_limit.is_some()
            || is_aggregate(items)
        {
            return None;
        }
        let mut pk_relations = vec![usize::MAX; t.partition_key.len()];
        let (mut ck_lower, mut ck_upper) = (None, None);
        for (i, rel) in s.where_clause.iter().enumerate() {
            let (ast::RelationTarget::Column(c), ast::RelationValue::Single(_)) =
                (&rel.target, &rel.value)
            else {
                return None;
            };
            let (_, def) = t.column(&c.name)?;
            match (def.kind, rel.op) {
                (ColumnKind::PartitionKey, ast::Operator::Eq) => {
                    let slot = pk_relations.get_mut(def.position as usize)?;
                    if *slot != usize::MAX {
                        return None;
                    }
                    *slot = i;
                }
                (ColumnKind::Clustering, op) if def.position == 0 => {
                    let (slot, inclusive) = match op {
                        ast::Operator::Gt => (&mut ck_lower, false),
                        ast::Operator::Gte => (&mut ck_lower, true),
                        ast::Operator::Lt => (&mut ck_upper, false),
                        ast::Operator::Lte => (&mut ck_upper, true),
                        _ => return None,
                    };
                    // Two bounds on one side: the general path answers with its error.
                    if slot.replace((i, inclusive)).is_some() {
                        return None;
                    }
                }
                _ => return None,
            }
        }
        if pk_relations.contains(&usize::MAX) {
            return None;
        }
        if (ck_lower.is_some() || ck_upper.is_some()) && selects_only_static(t, s) {
            // Cassandra refuses clustering restrictions then (`check_selection_rules`).
            return None;
        }
        // Literal bounds and LIMIT do not depend on the bound values or the clock.
        let consts = EvalCtx {
            binds: &[],
            now_micros: 0,
        };
        let literal_bound = |b: Option<(usize, bool)>| -> Option<Bytes> {
            let rel = b?.0;
            let ast::RelationValue::Single(ast::Expr::Literal(_)) = &s.where_clause.get(rel)?.value
            else {
                return None;
            };
            bound_value(t, s, rel, &consts)
        };
        let limit_value = match &s.limit {
            None => Some(None),
            Some(ast::Expr::Literal(_)) => int_of(&s.limit, &consts, "[limit]").ok(),
            Some(_) => None,
        };
        Some(PointRead {
            pk_relations,
            ck_lower,
            ck_upper,
            reversed,
            ck_lower_value: literal_bound(ck_lower),
            ck_upper_value: literal_bound(ck_upper),
            limit_value,
        })
    }

    /// The LIMIT (None: no limit); the error of an invalid one.
    pub fn limit(
        &self,
        s: &ast::SelectStatement,
        ctx: &EvalCtx<'_>,
    ) -> Result<Option<u32>, QueryError> {
        match self.limit_value {
            Some(l) => Ok(l),
            None => int_of(&s.limit, ctx, "[limit]"),
        }
    }

    /// Whether the read is restricted to a clustering slice.
    pub fn has_slice(&self) -> bool {
        self.ck_lower.is_some() || self.ck_upper.is_some()
    }

    /// The read's clustering slices from the bound terms (empty: the whole partition);
    /// None when a bound does not evaluate to a valid non-empty value (the general path
    /// then answers, with its error where there is one).
    pub fn slices(
        &self,
        t: &TableSchema,
        s: &ast::SelectStatement,
        ctx: &EvalCtx<'_>,
    ) -> Option<Vec<amphora_types::data::ClusteringSlice>> {
        use amphora_types::data::{ClusteringBound, ClusteringSlice};
        if !self.has_slice() {
            return Some(Vec::new());
        }
        let def = &t.columns[*t.clustering_key.first()? as usize];
        let bound =
            |b: Option<(usize, bool)>, literal: &Option<Bytes>| -> Option<ClusteringBound> {
                let Some((rel, inclusive)) = b else {
                    return Some(ClusteringBound::unbounded());
                };
                let v = match literal {
                    Some(v) => v.clone(),
                    None => bound_value(t, s, rel, ctx)?,
                };
                Some(if inclusive {
                    ClusteringBound::inclusive(vec![v])
                } else {
                    ClusteringBound::exclusive(vec![v])
                })
            };
        let (lower, upper) = (
            bound(self.ck_lower, &self.ck_lower_value)?,
            bound(self.ck_upper, &self.ck_upper_value)?,
        );
        // A slice runs in the column's stored order: a DESC column starts at its upper
        // bound (as `Restrictions::slices`).
        let (start, end) = if def.order == amphora_types::schema::ClusteringOrder::Desc {
            (upper, lower)
        } else {
            (lower, upper)
        };
        Some(vec![ClusteringSlice { start, end }])
    }

    /// The partition key from the bound terms; None when a term does not evaluate to a
    /// valid non-empty key (the general path then answers with its error).
    pub fn key(
        &self,
        t: &TableSchema,
        s: &ast::SelectStatement,
        ctx: &EvalCtx<'_>,
    ) -> Option<PartitionKey> {
        let term = |pos: usize, rel: usize| -> Option<Bytes> {
            let def = &t.columns[*t.partition_key.get(pos)? as usize];
            match &s.where_clause.get(rel)?.value {
                ast::RelationValue::Single(e) => {
                    crate::values::eval_set(e, &def.ty, ctx, &def.name).ok()
                }
                _ => None,
            }
        };
        let key = match self.pk_relations.as_slice() {
            [rel] => term(0, *rel)?,
            rels => {
                let parts = rels
                    .iter()
                    .enumerate()
                    .map(|(pos, rel)| term(pos, *rel))
                    .collect::<Option<Vec<_>>>()?;
                let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
                Bytes::from(amphora_types::token::serialize_composite_key(&refs))
            }
        };
        (!key.is_empty()).then(|| PartitionKey::new(key))
    }
}

/// `SELECT *`'s selector items and result columns of one table version.
struct Wildcard {
    /// Keeps the table's allocation, so its address (the key) is not reused while the
    /// entry exists; an entry whose table is gone is stale.
    table: std::sync::Weak<TableSchema>,
    items: Arc<Vec<SelItem>>,
    columns: Arc<Vec<ResultColumn>>,
}

/// Bound on the per-shard wildcard cache; it is cleared when full.
const WILDCARD_CACHE_ENTRIES: usize = 256;

thread_local! {
    /// Wildcard selections by the address of the table's `Arc`: every `SELECT *` planned
    /// on this shard against one table version shares one list (and one encoded result
    /// metadata in the transport's cache, which is keyed by the columns' `Arc`).
    static WILDCARDS: std::cell::RefCell<std::collections::HashMap<usize, Wildcard>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

fn result_columns_of(table: &TableSchema, items: &[SelItem]) -> Vec<ResultColumn> {
    items
        .iter()
        .map(|i| ResultColumn {
            keyspace: table.keyspace.clone(),
            table: table.name.clone(),
            name: i.name.clone(),
            ty: i.ty.clone(),
        })
        .collect()
}

/// A plan's selector items and its result columns.
type PlannedSelection = (Arc<Vec<SelItem>>, Arc<Vec<ResultColumn>>);

/// The items and result columns of `s`'s selection; a plain `SELECT *` takes them from
/// the shard's wildcard cache.
fn plan_selection(
    table: &Arc<TableSchema>,
    s: &ast::SelectStatement,
) -> Result<PlannedSelection, QueryError> {
    if !matches!(s.selection, ast::Selection::Wildcard) || s.distinct {
        let items = selection(table, s)?;
        let columns = Arc::new(result_columns_of(table, &items));
        return Ok((Arc::new(items), columns));
    }
    let key = Arc::as_ptr(table) as usize;
    WILDCARDS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some(w) = cache.get(&key)
            && w.table.upgrade().is_some_and(|t| Arc::ptr_eq(&t, table))
        {
            return Ok((w.items.clone(), w.columns.clone()));
        }
        let items = selection(table, s)?;
        let columns = Arc::new(result_columns_of(table, &items));
        let items = Arc::new(items);
        if cache.len() >= WILDCARD_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(
            key,
            Wildcard {
                table: Arc::downgrade(table),
                items: items.clone(),
                columns: columns.clone(),
            },
        );
        Ok((items, columns))
    })
}

pub fn plan_select(
    schema: &crate::schema::Schema,
    keyspace: Option<&str>,
    s: &ast::SelectStatement,
) -> Result<SelectPlan, QueryError> {
    let table = crate::plan::resolve_table(schema, keyspace, &s.table)?;
    let (items, columns) = plan_selection(&table, s)?;
    let is_virtual = crate::system::virtual_table(&table.keyspace, &table.name).is_some();
    let consistency_ok = crate::consistency::accepted(schema.keyspace(&table.keyspace), false);
    let point = if is_virtual {
        None
    } else {
        PointRead::of(&table, s, &items)
    };
    Ok(SelectPlan {
        table,
        items,
        columns,
        is_virtual,
        consistency_ok,
        point,
    })
}

pub async fn run_select(
    inner: &Rc<Inner>,
    keyspace: Option<&str>,
    s: &ast::SelectStatement,
    binds: &[BoundValue],
    opts: &QueryOptions,
    cache: Option<&std::sync::OnceLock<Arc<SelectPlan>>>,
) -> Result<QueryResult, QueryError> {
    let plan = match cache.and_then(|c| c.get()) {
        Some(p) => p.clone(),
        None => {
            let p = Arc::new(plan_select(&inner.schema(), keyspace, s)?);
            if let Some(c) = cache {
                let _ = c.set(p.clone());
            }
            p
        }
    };
    let now_micros = crate::exec::now_micros();
    if let Some(point) = point_start(inner, &plan, s, binds, opts, now_micros)? {
        let res = read_on(inner, point.shard, point.cmd).await?;
        return point_result(&plan, &point.page, res, opts);
    }
    // Boxed: the general path's state (restrictions, index and range reads) stays out of
    // the future of every point read.
    Box::pin(select_general(inner, s, binds, now_micros, opts, plan)).await
}

/// [`run_select`] with no future, for a prepared statement already planned as a
/// [`PointRead`] of a partition this shard owns, when the replica answers without waiting
/// for the disk: None (nothing done) for every other SELECT, which then takes
/// [`run_select`]. Saves a point read the moves of the coordinator's nested futures (a few
/// KB each) and their polls.
pub fn run_select_now(
    inner: &Rc<Inner>,
    s: &ast::SelectStatement,
    binds: &[BoundValue],
    opts: &QueryOptions,
    cache: &std::sync::OnceLock<Arc<SelectPlan>>,
) -> Option<Result<QueryResult, QueryError>> {
    let plan = cache.get()?;
    let now_micros = crate::exec::now_micros();
    let point = match point_start(inner, plan, s, binds, opts, now_micros) {
        Ok(Some(p)) if amphora_rt::current_shard() == Some(p.shard) => p,
        Ok(_) => return None,
        Err(e) => return Some(Err(e)),
    };
    let db = amphora_replica::local().ok()?;
    let res = db.read_now(&point.cmd)?;
    Some(
        res.map_err(|e| read_failed(&e.to_string()))
            .and_then(|res| point_result(plan, &point.page, res, opts)),
    )
}

/// A [`PointRead`]'s partition read: the shard that owns it, the command, and what
/// [`point_result`] needs to page its rows.
struct PointStart {
    shard: u32,
    cmd: ReadCommand,
    page: PointPage,
}

/// How a point read's rows are cut into the page returned.
struct PointPage {
    /// A partition holding only static data yields its static row alone unless the read
    /// restricts the clustering (as the general path).
    clustering_restricted: bool,
    /// The statement's LIMIT (`u32::MAX`: none).
    remaining: u32,
    page_size: Option<u32>,
    /// Rows in this page at most.
    page: u32,
    now_seconds: i32,
}

/// The point read a SELECT planned as `plan` makes with these values, or None when it
/// takes the general path (a virtual table, a paging state, a key or bound that is not a
/// plain value). Checks the consistency level first.
fn point_start(
    inner: &Rc<Inner>,
    plan: &SelectPlan,
    s: &ast::SelectStatement,
    binds: &[BoundValue],
    opts: &QueryOptions,
    now_micros: i64,
) -> Result<Option<PointStart>, QueryError> {
    if plan.is_virtual {
        return Ok(None);
    }
    // The schema is looked up only for a refused level's error.
    if !crate::consistency::is_accepted(plan.consistency_ok, opts.consistency) {
        let schema = inner.schema();
        crate::consistency::check(
            schema.keyspace(&plan.table.keyspace),
            opts.consistency,
            false,
        )?;
    }
    let ctx = EvalCtx { binds, now_micros };
    let Some(point) = &plan.point else {
        return Ok(None);
    };
    if !opts.paging_state.as_ref().is_none_or(|b| b.is_empty()) {
        return Ok(None);
    }
    let Some(key) = point.key(&plan.table, s, &ctx) else {
        return Ok(None);
    };
    let Some(slices) = point.slices(&plan.table, s, &ctx) else {
        return Ok(None);
    };
    let Ok(limit) = point.limit(s, &ctx) else {
        return Ok(None);
    };
    let remaining = limit.unwrap_or(u32::MAX);
    let page_size = opts.page_size.filter(|p| *p > 0).map(|p| p as u32);
    let page = page_size.map(|p| p.min(remaining)).unwrap_or(remaining);
    let now_seconds = (now_micros / 1_000_000) as i32;
    let info = &inner.shared.info;
    let shard = shard_of(key.token, info.nr_shards, info.ignore_msb);
    let clustering_restricted = !slices.is_empty();
    let mut cmd = ReadCommand::new(plan.table.id, PartitionRange::Single(key), now_seconds);
    cmd.row_limit = page;
    cmd.slices = slices;
    cmd.reversed = point.reversed;
    Ok(Some(PointStart {
        shard,
        cmd,
        page: PointPage {
            clustering_restricted,
            remaining,
            page_size,
            page,
            now_seconds,
        },
    }))
}

/// Every SELECT but a [`PointRead`]: virtual tables, restrictions, indexes, range scans,
/// paging, aggregates. The consistency level was checked (virtual tables have none).
async fn select_general(
    inner: &Rc<Inner>,
    s: &ast::SelectStatement,
    binds: &[BoundValue],
    now_micros: i64,
    opts: &QueryOptions,
    plan: Arc<SelectPlan>,
) -> Result<QueryResult, QueryError> {
    let schema = inner.schema();
    let ctx = EvalCtx { binds, now_micros };
    let table = &plan.table;
    let items = &plan.items;
    let columns = plan.columns.clone();
    if plan.is_virtual
        && let Some(v) = crate::system::virtual_table(&table.keyspace, &table.name)
    {
        let rows = crate::system::virtual_rows(inner, v, &schema).await?;
        return crate::system::select_virtual(table, rows, s, items, columns, &ctx, opts);
    }
    if s.order_by.iter().any(|o| o.ann_of.is_some()) {
        return crate::ann::select(inner, s, &ctx, &plan, opts).await;
    }
    let mut r = restrict::analyze(table, &s.where_clause, &ctx)?;
    // Secondary indexes serve some restrictions; the others still need filtering.
    let (index_query, mut needs_filtering) = crate::index::plan(&schema, table, &mut r);
    // Clustering restrictions without the partition key scan every partition.
    let has_ck = !r.ck_prefix.is_empty() || r.ck_lower.is_some() || r.ck_upper.is_some();
    if s.distinct
        && (has_ck
            || r.filters.iter().any(|f| {
                table
                    .column_by_id(f.column)
                    .is_some_and(|d| matches!(d.kind, ColumnKind::Regular | ColumnKind::Clustering))
            }))
    {
        return Err(invalid(
            "SELECT DISTINCT with WHERE clause only supports restriction by partition key and/or static columns.",
        ));
    }
    if index_query.is_some()
        && r.pk_values
            .as_ref()
            .is_some_and(|v| v.iter().any(|c| c.len() > 1))
    {
        return Err(invalid(
            "Select on indexed columns and with IN clause for the PRIMARY KEY are not supported",
        ));
    }
    if has_ck
        && r.pk_values.is_none()
        && index_query.is_none()
        && !crate::index::clustering_indexed(&schema, table, &r)
    {
        needs_filtering = true;
    }
    if needs_filtering && !s.allow_filtering {
        return Err(invalid(
            "Cannot execute this query as it might involve data filtering and thus may have unpredictable performance. If you want to execute this query despite the performance unpredictability, use ALLOW FILTERING",
        ));
    }
    let limit = int_of(&s.limit, &ctx, "[limit]")?;
    let ppl = int_of(&s.per_partition_limit, &ctx, "[per_partition_limit]")?;
    check_selection_rules(table, s, &r, ppl.is_some(), is_aggregate(items))?;
    let reversed = match s.order_by.first() {
        None => false,
        Some(o) => {
            let first_ck = table
                .clustering_key
                .first()
                .map(|i| &table.columns[*i as usize]);
            let Some(ck) = first_ck else {
                return Err(invalid(
                    "ORDER BY is only supported when the partition key is restricted by an EQ or an IN.",
                ));
            };
            let (_, d) = table
                .column(&o.column.name)
                .ok_or_else(|| invalid(format!("Undefined column name {}", o.column.name)))?;
            if d.kind != ColumnKind::Clustering {
                return Err(invalid(format!(
                    "Order by is currently only supported on the clustered columns of the PRIMARY KEY, got {}",
                    d.name
                )));
            }
            if r.pk_values.is_none() {
                return Err(invalid(
                    "ORDER BY is only supported when the partition key is restricted by an EQ or an IN.",
                ));
            }
            let want_desc = o.order == ast::Order::Desc;
            let column_desc = d.order == amphora_types::schema::ClusteringOrder::Desc;
            // Reversed when the requested order of the first ordering column differs from its stored order.
            let _ = ck;
            let reversed = want_desc != column_desc;
            // Every ordering column in key order (columns restricted by = may be left
            // out), all in stored order or all reversed.
            let mut next_ck = 0;
            for o in &s.order_by {
                let (id, d) = table
                    .column(&o.column.name)
                    .ok_or_else(|| invalid(format!("Undefined column name {}", o.column.name)))?;
                if d.kind != ColumnKind::Clustering {
                    return Err(invalid(format!(
                        "Order by is currently only supported on the clustered columns of the PRIMARY KEY, got {}",
                        d.name
                    )));
                }
                while table.clustering_key.get(next_ck) != Some(&id)
                    && r.ck_prefix.get(next_ck).is_some_and(|v| v.len() == 1)
                {
                    next_ck += 1;
                }
                let in_order = table.clustering_key.get(next_ck) == Some(&id);
                next_ck += 1;
                if !in_order {
                    return Err(invalid(
                        "Order by currently only supports the ordering of columns following their declared order in the PRIMARY KEY",
                    ));
                }
                let desc = d.order == amphora_types::schema::ClusteringOrder::Desc;
                if ((o.order == ast::Order::Desc) != desc) != reversed {
                    return Err(invalid("Unsupported order by relation"));
                }
            }
            reversed
        }
    };
    if !s.order_by.is_empty()
        && opts.page_size.is_some_and(|p| p > 0)
        && r.pk_values
            .as_ref()
            .is_some_and(|v| v.iter().any(|c| c.len() > 1))
    {
        return Err(invalid(
            "Cannot page queries with both ORDER BY and a IN restriction on the partition key; you must either remove the ORDER BY or the IN and sort client side, or disable paging for this query",
        ));
    }
    let aggregate = is_aggregate(items);
    let group_by = crate::selector::GroupBy::of(table, s, &ctx)?;
    let grouping = group_by.len;
    // Aggregates and GROUP BY read the whole selection and answer in one page.
    let whole = aggregate || grouping > 0;
    // Cassandra's client warnings for aggregates over several partitions.
    match &r.pk_values {
        _ if !whole => {}
        None if r.token_start.is_none() && r.token_end.is_none() => {
            amphora_trace::warn("Aggregation query used without partition key")
        }
        Some(v) if v.iter().any(|c| c.len() > 1) => amphora_trace::warn(
            "Aggregation query used on multiple partition keys (IN restriction)",
        ),
        _ => {}
    }
    let page_size = opts
        .page_size
        .filter(|p| *p > 0)
        .map(|p| p as u32)
        .filter(|_| !whole);
    let paging = match &opts.paging_state {
        Some(b) if !b.is_empty() => Some(decode_paging(b)?),
        _ => None,
    };
    let mut remaining = paging
        .as_ref()
        .map(|p| p.remaining)
        .or(limit)
        .unwrap_or(u32::MAX);
    if whole {
        remaining = u32::MAX;
    }
    let page = page_size.map(|p| p.min(remaining)).unwrap_or(remaining);
    let filtering = !r.filters.is_empty() || r.tuple_filter.is_some();
    let base = ReadCommand {
        table: table.id,
        partitions: PartitionRange::all(),
        slices: r.slices(table),
        columns: None,
        reversed,
        // With row filters the limit is applied after filtering.
        row_limit: if filtering { 0 } else { page },
        // With row filters PER PARTITION LIMIT counts rows after filtering.
        per_partition_limit: if s.distinct {
            1
        } else if filtering || grouping > 0 {
            0
        } else {
            ppl.unwrap_or(0)
        },
        partition_limit: 0,
        start_after: paging
            .as_ref()
            .map(|p| (p.key.clone(), p.clustering.clone())),
        now_seconds: (ctx.now_micros / 1_000_000) as i32,
    };
    let info = inner.shared.info.clone();
    let mut partitions: Vec<PartitionData> = Vec::new();
    let mut exhausted = true;
    if let Some(keys) = r.partition_keys() {
        if keys.iter().any(|k| k.key.is_empty()) {
            return Err(invalid("Key may not be empty"));
        }
        // IN on the partition key answers in partition key order (Cassandra sorts the
        // key values by their types), not in token order.
        let mut keys = keys;
        if keys.len() > 1 {
            let types: Vec<CqlType> = table
                .partition_key
                .iter()
                .map(|id| table.columns[*id as usize].ty.clone())
                .collect();
            let parts = |k: &PartitionKey| -> Vec<Bytes> {
                if types.len() == 1 {
                    vec![k.key.clone()]
                } else {
                    split_composite(&k.key)
                }
            };
            keys.sort_by(|a, b| {
                let (x, y) = (parts(a), parts(b));
                for ((ty, u), v) in types.iter().zip(&x).zip(&y) {
                    let o = ty.compare(u, v);
                    if o != std::cmp::Ordering::Equal {
                        return o;
                    }
                }
                std::cmp::Ordering::Equal
            });
        }
        // A later page resumes at the partition it stopped in.
        let resume = paging
            .as_ref()
            .and_then(|p| keys.iter().position(|k| *k == p.key))
            .unwrap_or(0);
        for key in keys.into_iter().skip(resume) {
            // `k = ? AND token(k) > ?`: the token restriction still applies.
            if !crate::index::token_ok(&r, key.token) {
                continue;
            }
            let mut cmd = base.clone();
            if cmd.start_after.as_ref().is_some_and(|(k, _)| *k != key) {
                cmd.start_after = None;
            }
            cmd.partitions = PartitionRange::Single(key.clone());
            let shard = shard_of(key.token, info.nr_shards, info.ignore_msb);
            let res = read_on(inner, shard, cmd).await?;
            exhausted &= res.exhausted;
            partitions.extend(res.partitions);
        }
    } else if let Some(q) = &index_query {
        let after = paging
            .as_ref()
            .map(|p| (p.key.clone(), p.clustering.clone()));
        let (parts, done) = crate::index::read_via_index(
            inner,
            table,
            q,
            &r,
            after,
            page,
            (ctx.now_micros / 1_000_000) as i32,
        )
        .await?;
        exhausted = done;
        partitions = parts;
    } else {
        let mut cmd = base.clone();
        cmd.partitions = PartitionRange::TokenRange {
            start: match r.token_start {
                Some(Bound::Included(t)) => Bound::Included((t, None)),
                Some(Bound::Excluded(t)) => Bound::Excluded((t, None)),
                _ => Bound::Unbounded,
            },
            end: match r.token_end {
                Some(Bound::Included(t)) => Bound::Included((t, None)),
                Some(Bound::Excluded(t)) => Bound::Excluded((t, None)),
                _ => Bound::Unbounded,
            },
        };
        amphora_trace::event(|| "Executing a range scan on every shard".into());
        let trace = amphora_trace::current();
        let results = inner
            .shared
            .shards
            .submit_to_all(move |shard| {
                let cmd = cmd.clone();
                let trace = trace.clone();
                amphora_trace::scope(trace, format!("shard {shard}"), async move {
                    let db = amphora_replica::local().map_err(|e| e.to_string())?;
                    let r = db.read_async(&cmd).await.map_err(|e| e.to_string());
                    if let Ok(r) = &r {
                        amphora_trace::event(|| {
                            format!(
                                "Scanned {} rows in {} partitions on shard {shard}",
                                r.rows_counted,
                                r.partitions.len()
                            )
                        });
                    }
                    r
                })
            })
            .await
            .map_err(|e| QueryError::Server(e.to_string()))?;
        for res in results {
            let res = res.map_err(|e| {
                tracing::warn!(error = %e, "range read failed");
                QueryError::ReadTimeout {
                    consistency: 1,
                    received: 0,
                    block_for: 1,
                    data_present: false,
                }
            })?;
            exhausted &= res.exhausted;
            partitions.extend(res.partitions);
        }
        partitions.sort_by(|a, b| a.key.cmp(&b.key));
    }
    // ORDER BY over several partitions (IN on the partition key): rows are merged across
    // partitions in the requested clustering order, each as its own one-row partition.
    if !s.order_by.is_empty() && partitions.len() > 1 {
        let cmp = table.clustering_comparator();
        let mut rows: Vec<PartitionData> = Vec::new();
        for p in partitions.drain(..) {
            for row in &p.rows {
                rows.push(PartitionData {
                    key: p.key.clone(),
                    partition_deletion: p.partition_deletion,
                    static_row: p.static_row.clone(),
                    rows: vec![row.clone()].into(),
                });
            }
        }
        rows.sort_by(|a, b| {
            let (Some(x), Some(y)) = (a.rows.first(), b.rows.first()) else {
                return std::cmp::Ordering::Equal;
            };
            let o = cmp.compare(&x.clustering.0, &y.clustering.0);
            if reversed { o.reverse() } else { o }
        });
        partitions = rows;
    }
    // Build result rows.
    let now_s = (ctx.now_micros / 1_000_000) as i32;
    let mut out = ResultBuilder {
        cells: Vec::new(),
        rows: 0,
    };
    let mut last: Option<(PartitionKey, Option<Clustering>)> = None;
    let mut states = whole.then(|| selector::new_states(items));
    let mut group: Option<Vec<Option<Bytes>>> = None;
    let has_ck_restriction =
        !r.ck_prefix.is_empty() || r.ck_lower.is_some() || r.ck_upper.is_some();
    'outer: for p in &partitions {
        let mut in_partition = 0u32;
        // With GROUP BY, PER PARTITION LIMIT counts groups, not rows.
        let mut groups_in_partition = 0u32;
        let static_only = p.rows.is_empty()
            && p.static_row.is_some()
            && !has_ck_restriction
            && !table.clustering_key.is_empty();
        let empty_clustering_row;
        let rows: Box<dyn Iterator<Item = &Row>> = if static_only {
            empty_clustering_row = Row::new(Clustering::empty());
            Box::new(std::iter::once(&empty_clustering_row))
        } else {
            Box::new(p.rows.iter())
        };
        for row in rows {
            if out.rows as u32 >= page && !whole {
                exhausted = false;
                break 'outer;
            }
            if let Some(l) = ppl
                && grouping == 0
                && in_partition >= l
            {
                break;
            }
            if !r
                .filters
                .iter()
                .all(|f| filter_row(table, f, p, row, now_s))
            {
                continue;
            }
            if let Some(tf) = &r.tuple_filter
                && (static_only || !tf.holds(&row.clustering))
            {
                continue;
            }
            in_partition += 1;
            match states.as_mut() {
                Some(st) => {
                    if grouping > 0 {
                        let key = group_by.key(table, p, row, now_s, static_only)?;
                        if group.as_ref() != Some(&key) {
                            if ppl.is_some_and(|l| groups_in_partition >= l) {
                                break;
                            }
                            groups_in_partition += 1;
                            if group.is_some() {
                                let done = std::mem::replace(st, selector::new_states(items));
                                out.cells.extend(selector::finish(done, items));
                                out.rows += 1;
                            }
                            group = Some(key);
                        }
                    }
                    selector::accumulate(st, items, table, p, row, now_s, static_only);
                }
                None => {
                    for it in items.iter() {
                        out.cells.push(selector::eval_row_checked(
                            table,
                            it,
                            p,
                            row,
                            now_s,
                            static_only,
                        )?);
                    }
                    out.rows += 1;
                }
            }
            // The next page starts after this row, or after the whole partition when
            // DISTINCT or PER PARTITION LIMIT is done with it.
            let partition_done = s.distinct || ppl.is_some_and(|l| in_partition >= l);
            last = Some((
                p.key.clone(),
                if static_only || partition_done {
                    None
                } else {
                    Some(row.clustering.clone())
                },
            ));
            if s.distinct {
                break;
            }
        }
    }
    if let Some(st) = states {
        if grouping == 0 || group.is_some() {
            out.cells.extend(selector::finish(st, items));
            out.rows += 1;
        }
        if let Some(l) = limit {
            out.rows = out.rows.min(l as usize);
            out.cells.truncate(out.rows * items.len());
        }
        exhausted = true;
    }
    let produced = out.rows as u32;
    let paging_state = match (page_size, last) {
        (Some(_), Some((key, clustering)))
            if !exhausted && produced >= page && remaining.saturating_sub(produced) > 0 =>
        {
            Some(encode_paging(&PagingState {
                key,
                clustering,
                remaining: remaining.saturating_sub(produced),
            }))
        }
        _ => None,
    };
    let (columns, cells) = if s.json {
        json_rows(table, items, out.cells, out.rows)
    } else {
        (columns, out.cells)
    };
    Ok(QueryResult::Rows(ResultRows {
        columns,
        cells,
        row_count: out.rows,
        paging_state,
        no_metadata: opts.skip_metadata,
    }))
}

/// A [`PointRead`]'s rows, projected row by row from its partition read `res`. Produces
/// what the general path produces for that shape (same rows, limit, page size and paging
/// state).
fn point_result(
    plan: &SelectPlan,
    pg: &PointPage,
    res: amphora_storage::ReadResult,
    opts: &QueryOptions,
) -> Result<QueryResult, QueryError> {
    let table = &plan.table;
    let (clustering_restricted, remaining, page_size, page, now_seconds) = (
        pg.clustering_restricted,
        pg.remaining,
        pg.page_size,
        pg.page,
        pg.now_seconds,
    );
    let mut exhausted = res.exhausted;
    let width = plan.items.len();
    let mut cells = Vec::with_capacity(
        width
            * res
                .partitions
                .iter()
                .map(|p| p.rows.len().max(1))
                .sum::<usize>(),
    );
    let mut rows = 0usize;
    // (partition, row) of the last row produced; None row = the static-only row.
    let mut last: Option<(&PartitionData, Option<&Row>)> = None;
    let empty_clustering_row = Row::new(Clustering::empty());
    'outer: for p in &res.partitions {
        let static_only = p.rows.is_empty()
            && p.static_row.is_some()
            && !clustering_restricted
            && !table.clustering_key.is_empty();
        let partition_rows: &[Row] = if static_only {
            std::slice::from_ref(&empty_clustering_row)
        } else {
            &p.rows
        };
        for row in partition_rows {
            if rows as u32 >= page {
                exhausted = false;
                break 'outer;
            }
            for it in plan.items.iter() {
                cells.push(selector::eval_row_checked(
                    table,
                    it,
                    p,
                    row,
                    now_seconds,
                    static_only,
                )?);
            }
            rows += 1;
            last = Some((p, (!static_only).then_some(row)));
        }
    }
    let produced = rows as u32;
    let paging_state = match (page_size, last) {
        (Some(_), Some((p, row)))
            if !exhausted && produced >= page && remaining.saturating_sub(produced) > 0 =>
        {
            Some(encode_paging(&PagingState {
                key: p.key.clone(),
                clustering: row.map(|r| r.clustering.clone()),
                remaining: remaining.saturating_sub(produced),
            }))
        }
        _ => None,
    };
    Ok(QueryResult::Rows(ResultRows {
        columns: plan.columns.clone(),
        cells,
        row_count: rows,
        paging_state,
        no_metadata: opts.skip_metadata,
    }))
}

/// Whether the selection names only columns, with a static one among them and otherwise
/// only partition-key ones (Cassandra then refuses clustering restrictions).
fn selects_only_static(t: &TableSchema, s: &ast::SelectStatement) -> bool {
    let ast::Selection::List(sel) = &s.selection else {
        return false;
    };
    let mut kinds = Vec::with_capacity(sel.len());
    for it in sel {
        let ast::Expr::Column(c) = &it.expr else {
            return false;
        };
        if let Some((_, d)) = t.column(&c.name) {
            kinds.push(d.kind);
        }
    }
    kinds.contains(&ColumnKind::Static)
        && kinds
            .iter()
            .all(|k| matches!(k, ColumnKind::Static | ColumnKind::PartitionKey))
}

/// Cassandra's rules tying the selection to DISTINCT, PER PARTITION LIMIT and clustering
/// restrictions.
fn check_selection_rules(
    t: &TableSchema,
    s: &ast::SelectStatement,
    r: &restrict::Restrictions,
    has_ppl: bool,
    aggregate: bool,
) -> Result<(), QueryError> {
    if s.distinct && has_ppl {
        return Err(invalid(
            "PER PARTITION LIMIT is not allowed with SELECT DISTINCT queries",
        ));
    }
    if aggregate && has_ppl && s.group_by.is_empty() {
        return Err(invalid(
            "PER PARTITION LIMIT is not allowed with aggregate queries.",
        ));
    }
    let ast::Selection::List(sel) = &s.selection else {
        return Ok(());
    };
    let named: Vec<&str> = sel
        .iter()
        .filter_map(|it| match &it.expr {
            ast::Expr::Column(c) => Some(c.name.as_str()),
            _ => None,
        })
        .collect();
    if s.distinct {
        let missing: Vec<&str> = t
            .partition_key
            .iter()
            .map(|id| t.columns[*id as usize].name.as_str())
            .filter(|n| !named.contains(n))
            .collect();
        if !missing.is_empty() && named.len() == sel.len() {
            return Err(invalid(format!(
                "SELECT DISTINCT queries must request all the partition key columns (missing {})",
                missing.join(", ")
            )));
        }
    }
    let has_ck = !r.ck_prefix.is_empty() || r.ck_lower.is_some() || r.ck_upper.is_some();
    if has_ck && named.len() == sel.len() {
        let kinds: Vec<ColumnKind> = named
            .iter()
            .filter_map(|n| t.column(n).map(|(_, d)| d.kind))
            .collect();
        if kinds.contains(&ColumnKind::Static)
            && kinds
                .iter()
                .all(|k| matches!(k, ColumnKind::Static | ColumnKind::PartitionKey))
        {
            return Err(invalid(
                "Cannot restrict clustering columns when selecting only static columns",
            ));
        }
    }
    Ok(())
}

/// SELECT JSON: one text column `[json]` holding each row as a JSON object.
pub(crate) fn json_rows(
    t: &TableSchema,
    items: &[SelItem],
    cells: Vec<Option<Bytes>>,
    rows: usize,
) -> (Arc<Vec<ResultColumn>>, Vec<Option<Bytes>>) {
    let width = items.len().max(1);
    let mut out = Vec::with_capacity(rows);
    for row in cells.chunks(width).take(rows) {
        let fields: Vec<String> = items
            .iter()
            .zip(row)
            .map(|(it, v)| {
                format!(
                    "{}: {}",
                    serde_json::Value::String(crate::json::json_name(&it.name)),
                    crate::json::to_json(&it.ty, v.as_deref())
                )
            })
            .collect();
        out.push(Some(Bytes::from(format!("{{{}}}", fields.join(", ")))));
    }
    let columns = Arc::new(vec![ResultColumn {
        keyspace: t.keyspace.clone(),
        table: t.name.clone(),
        name: "[json]".into(),
        ty: CqlType::Text,
    }]);
    (columns, out)
}

pub(crate) async fn read_on(
    inner: &Rc<Inner>,
    shard: u32,
    cmd: ReadCommand,
) -> Result<amphora_storage::ReadResult, QueryError> {
    // On this shard the read runs at once, with no `on_shard` future (which would hold
    // the command) inside this one: every future above it copies it when it starts.
    let r = if amphora_rt::current_shard() == Some(shard) {
        read_here(&cmd).await
    } else {
        Box::pin(crate::exec::on_shard(inner, shard, move || async move {
            read_here(&cmd).await
        }))
        .await?
    };
    r.map_err(|e| read_failed(&e))
}

/// A replica read that failed, as the client sees it.
fn read_failed(e: &str) -> QueryError {
    tracing::warn!(error = %e, "read failed");
    QueryError::ReadTimeout {
        consistency: 1,
        received: 0,
        block_for: 1,
        data_present: false,
    }
}

/// A single-partition read on the calling shard's replica; the shard goes on serving
/// other requests while the read waits for the disk.
async fn read_here(cmd: &ReadCommand) -> Result<amphora_storage::ReadResult, String> {
    let db = amphora_replica::local().map_err(|e| e.to_string())?;
    amphora_trace::event(|| "Executing single-partition query".into());
    let r = db.read_async(cmd).await.map_err(|e| e.to_string());
    if let Ok(r) = &r {
        amphora_trace::event(|| {
            format!(
                "Read {} rows from {} partitions, {} SSTables consulted",
                r.rows_counted,
                r.partitions.len(),
                r.sstables_read
            )
        });
    }
    r
}

struct ResultBuilder {
    cells: Vec<Option<Bytes>>,
    rows: usize,
}

pub(crate) fn filter_row(
    t: &TableSchema,
    f: &Filter,
    p: &PartitionData,
    row: &Row,
    _now_s: i32,
) -> bool {
    use std::cmp::Ordering::*;
    let Some(def) = t.columns.get(f.column as usize) else {
        return false;
    };
    let v = column_value(t, f.column, p, row, false);
    if let (Some(k), CqlType::Map { key, value, .. }) = (&f.element_key, &def.ty) {
        // `m[k] = v`: the value of key k.
        let Some(v) = v else { return false };
        return amphora_types::cql_type::split_collection(&v, 2)
            .map(|items| {
                items.chunks(2).any(|kv| match (kv.first(), kv.get(1)) {
                    (Some(Some(x)), Some(Some(y))) => {
                        key.compare(x, k) == Equal && value.compare(y, &f.values[0]) == Equal
                    }
                    _ => false,
                })
            })
            .unwrap_or(false);
    }
    match f.op {
        ast::Operator::Contains | ast::Operator::ContainsKey => {
            let Some(v) = v else { return false };
            let want = &f.values[0];
            match (&def.ty, f.op) {
                (
                    CqlType::List { elem, .. } | CqlType::Set { elem, .. },
                    ast::Operator::Contains,
                ) => amphora_types::cql_type::split_collection(&v, 1)
                    .map(|items| {
                        items
                            .into_iter()
                            .flatten()
                            .any(|x| elem.compare(x, want) == Equal)
                    })
                    .unwrap_or(false),
                (CqlType::Map { key, value, .. }, op) => {
                    amphora_types::cql_type::split_collection(&v, 2)
                        .map(|items| {
                            items.chunks(2).any(|kv| match (kv.first(), kv.get(1)) {
                                (Some(Some(k)), Some(Some(x))) => {
                                    if op == ast::Operator::ContainsKey {
                                        key.compare(k, want) == Equal
                                    } else {
                                        value.compare(x, want) == Equal
                                    }
                                }
                                _ => false,
                            })
                        })
                        .unwrap_or(false)
                }
                _ => false,
            }
        }
        ast::Operator::In => {
            v.is_some_and(|v| f.values.iter().any(|w| def.ty.compare(&v, w) == Equal))
        }
        ast::Operator::NotIn => {
            v.is_none_or(|v| !f.values.iter().any(|w| def.ty.compare(&v, w) == Equal))
        }
        ast::Operator::Eq if f.fold_case => v.is_some_and(|v| {
            String::from_utf8_lossy(&v).to_lowercase()
                == String::from_utf8_lossy(&f.values[0]).to_lowercase()
        }),
        op => {
            let Some(v) = v else { return false };
            let o = def.ty.compare(&v, &f.values[0]);
            crate::restrict::comparison_holds(op, o)
        }
    }
}
