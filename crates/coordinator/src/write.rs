//! INSERT / UPDATE / DELETE / BATCH → mutations applied on the owning shards.

use std::rc::Rc;
use std::sync::{Arc, OnceLock};

use amphora_cql as ast;
use amphora_replica::CounterUpdate;
use amphora_types::CqlType;
use amphora_types::data::{
    Cell, Clustering, ColumnData, DeletionTime, LivenessInfo, Mutation, PartitionKey,
    PartitionUpdate, RangeTombstone, Row,
};
use amphora_types::schema::{ColumnId, ColumnKind, TableSchema};
use amphora_types::token::shard_of;
use bytes::Bytes;

use crate::api::*;
use crate::coordinator::BatchType;
use crate::exec::Inner;
use crate::plan::{SimpleWrite, WritePlan};
use crate::restrict;
use crate::values::{EvalCtx, Value, eval, eval_set, timeuuid};

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::Invalid(m.into())
}

/// A write to apply on one shard.
pub enum Planned {
    Mutation(Mutation),
    Counter(CounterUpdate),
}

impl Planned {
    fn token(&self) -> i64 {
        match self {
            Planned::Mutation(m) => m.key.token,
            Planned::Counter(c) => c.key.token,
        }
    }
}

pub async fn run_write(
    inner: &Rc<Inner>,
    keyspace: Option<&str>,
    st: &ast::Statement,
    binds: &[BoundValue],
    opts: &QueryOptions,
    cache: Option<&OnceLock<Arc<WritePlan>>>,
) -> Result<QueryResult, QueryError> {
    let (now, timestamp) = write_time(inner, opts);
    let ctx = EvalCtx {
        binds,
        now_micros: now,
    };
    let plan = match cache.and_then(|c| c.get()) {
        Some(p) => p.clone(),
        None => {
            let p = Arc::new(WritePlan::of(&inner.schema(), keyspace, st)?);
            if let Some(c) = cache {
                let _ = c.set(p.clone());
            }
            p
        }
    };
    if let Some(simple) = &plan.simple {
        // The schema is looked up only for a refused level's error.
        if !crate::consistency::is_accepted(plan.consistency_ok, opts.consistency) {
            let schema = inner.schema();
            let ks = schema.keyspace(&plan.table.keyspace);
            crate::consistency::check(ks, opts.consistency, true)?;
        }
        if let Some(planned) = plan_simple(&plan.table, st, simple, &ctx, timestamp) {
            apply_all(inner, planned).await?;
            return Ok(QueryResult::Void);
        }
    }
    // Boxed: reads before the write and conditional updates stay out of the future of
    // every simple write.
    Box::pin(write_general(inner, st, &ctx, timestamp, opts, plan)).await
}

/// A write's "now" (µs) and its timestamp: the client's, else a new one of this shard.
fn write_time(inner: &Inner, opts: &QueryOptions) -> (i64, i64) {
    let now = crate::exec::now_micros();
    let timestamp = opts
        .timestamp
        .unwrap_or_else(|| inner.new_timestamp_at(now));
    (now, timestamp)
}

/// [`run_write`] with no future, for a prepared [`SimpleWrite`] of one partition this
/// shard owns, with no index or view to maintain, when the replica applies and
/// acknowledges it without waiting ([`amphora_replica::ShardDb::writes_at_once`]). None,
/// with nothing done, for every other write, which then takes [`run_write`].
pub fn run_write_now(
    inner: &Rc<Inner>,
    st: &ast::Statement,
    binds: &[BoundValue],
    opts: &QueryOptions,
    cache: &OnceLock<Arc<WritePlan>>,
) -> Option<Result<QueryResult, QueryError>> {
    let plan = cache.get()?;
    let simple = plan.simple.as_ref()?;
    if !crate::consistency::is_accepted(plan.consistency_ok, opts.consistency)
        || inner.schema().has_derived()
    {
        return None;
    }
    let db = amphora_replica::local().ok()?;
    if !db.writes_at_once() {
        return None;
    }
    let (now, timestamp) = write_time(inner, opts);
    let ctx = EvalCtx {
        binds,
        now_micros: now,
    };
    let mut planned = plan_simple(&plan.table, st, simple, &ctx, timestamp)?;
    let info = &inner.shared.info;
    let here = match planned.as_slice() {
        [p @ Planned::Mutation(_)] => {
            amphora_rt::current_shard()
                == Some(shard_of(p.token(), info.nr_shards, info.ignore_msb))
        }
        _ => false,
    };
    let Some(Planned::Mutation(m)) = planned.pop().filter(|_| here) else {
        return None;
    };
    Some(
        db.apply_at_once(m)
            .map(|()| QueryResult::Void)
            .map_err(|e| write_failure(e.to_string())),
    )
}

/// Every write but a [`SimpleWrite`] (or one whose values left the simple path).
async fn write_general(
    inner: &Rc<Inner>,
    st: &ast::Statement,
    ctx: &EvalCtx<'_>,
    timestamp: i64,
    opts: &QueryOptions,
    plan: Arc<WritePlan>,
) -> Result<QueryResult, QueryError> {
    let schema = inner.schema();
    let table = &plan.table;
    let ks = schema.keyspace(&table.keyspace);
    let conditional = match st {
        ast::Statement::Insert(s) => s.if_not_exists,
        ast::Statement::Update(s) => s.conditions.is_some(),
        ast::Statement::Delete(s) => s.conditions.is_some(),
        _ => return Err(QueryError::Server("not a write".into())),
    };
    check_writable(table)?;
    check_not_view(&schema, table)?;
    if conditional {
        check_conditional(table, st, ctx)?;
    }
    crate::consistency::check_accepted(plan.consistency_ok, ks, opts.consistency, true)?;
    if conditional {
        let serial = opts
            .serial_consistency
            .unwrap_or(crate::consistency::SERIAL);
        crate::consistency::check(ks, serial, false)?;
    }
    let lists = if needs_list_read(table, st) {
        read_lists(inner, table, st, ctx).await?
    } else {
        ListState::new()
    };
    let planned = plan_write_with(table, st, ctx, timestamp, &lists)?;
    if conditional {
        return crate::lwt::run_conditional(inner, table, st, ctx, planned).await;
    }
    apply_all(inner, planned).await?;
    Ok(QueryResult::Void)
}

/// Builds the mutation of a [`SimpleWrite`]: the one `plan_insert` / `plan_update` build
/// for that shape. None when a term does not give a plain value (a null or unset key part,
/// an invalid value, an empty or oversized key, an UPDATE left with no regular cell): the
/// general path then decides, with its own error where there is one.
pub fn plan_simple(
    t: &TableSchema,
    st: &ast::Statement,
    w: &SimpleWrite,
    ctx: &EvalCtx<'_>,
    default_ts: i64,
) -> Option<Vec<Planned>> {
    let (using, values, update) = match st {
        ast::Statement::Insert(s) => match &s.values {
            ast::InsertValues::Values { values, .. } => (&s.using, Some(values), None),
            ast::InsertValues::Json { .. } => return None,
        },
        ast::Statement::Update(s) => (&s.using, None, Some(s)),
        _ => return None,
    };
    let key_term = |i: usize| match (values, update) {
        (Some(v), _) => v.get(i),
        (_, Some(u)) => match &u.where_clause.get(i)?.value {
            ast::RelationValue::Single(e) => Some(e),
            _ => None,
        },
        _ => None,
    };
    let cell_term = |i: usize| match (values, update) {
        (Some(v), _) => v.get(i),
        (_, Some(u)) => match &u.assignments.get(i)?.op {
            ast::AssignmentOp::Set(e) => Some(e),
            _ => None,
        },
        _ => None,
    };
    let key_part = |id: &ColumnId, term: &usize| -> Option<Bytes> {
        let def = t.columns.get(*id as usize)?;
        let term = key_term(*term)?;
        let v = match bound_single(term, &def.ty, ctx) {
            Some(BoundValue::Set(b)) => b.clone(),
            Some(_) => return None,
            None => eval_set(term, &def.ty, ctx, &def.name).ok()?,
        };
        (v.len() <= 65535).then_some(v)
    };
    let ts = timestamp_of(using, default_ts, ctx).ok()?;
    let ttl = ttl_of(using, t, ctx).ok()?;
    let now_s = now_seconds(ctx);
    let key = match (t.partition_key.as_slice(), w.pk.as_slice()) {
        ([id], [term]) => key_part(id, term)?,
        _ => {
            let pk = t
                .partition_key
                .iter()
                .zip(&w.pk)
                .map(|(id, term)| key_part(id, term))
                .collect::<Option<Vec<Bytes>>>()?;
            let refs: Vec<&[u8]> = pk.iter().map(|p| &p[..]).collect();
            Bytes::from(amphora_types::token::serialize_composite_key(&refs))
        }
    };
    if key.is_empty() {
        return None;
    }
    let clustering = t
        .clustering_key
        .iter()
        .zip(&w.ck)
        .map(|(id, term)| key_part(id, term))
        .collect::<Option<Vec<Bytes>>>()?;
    let mut statics = Vec::new();
    let mut regular = Vec::with_capacity(w.cells.len());
    for (id, term) in &w.cells {
        let def = t.columns.get(*id as usize)?;
        let term = cell_term(*term)?;
        let d = match bound_single(term, &def.ty, ctx) {
            // What `set_cells` makes of these for a single-cell column.
            Some(BoundValue::Unset) => continue,
            Some(BoundValue::Null) => ColumnData::Simple(Cell::tombstone(ts, now_s)),
            Some(BoundValue::Set(b)) if ttl > 0 => {
                ColumnData::Simple(Cell::expiring(ts, ttl, now_s, b.clone()))
            }
            Some(BoundValue::Set(b)) => ColumnData::Simple(Cell::live(ts, b.clone())),
            None => {
                let v = eval(term, &def.ty, ctx, &def.name).ok()?;
                let Some(mut d) = set_cells(&def.ty, v, ts, ttl, now_s).ok()? else {
                    continue;
                };
                if let ColumnData::Complex { cells, .. } = &mut d {
                    sort_cells(&def.ty, cells);
                }
                d
            }
        };
        if def.kind == ColumnKind::Static {
            statics.push((*id, d));
        } else {
            regular.push((*id, d));
        }
    }
    let mut partition = PartitionUpdate::default();
    if !statics.is_empty() {
        let mut r = Row::new(Clustering::empty());
        r.cells = statics;
        partition.static_row = Some(r);
    }
    let mut row = Row::new(Clustering(clustering));
    if update.is_some() {
        if regular.is_empty() {
            return None;
        }
    } else {
        row.marker = Some(if ttl > 0 {
            LivenessInfo::expiring(ts, ttl, now_s)
        } else {
            LivenessInfo::new(ts)
        });
    }
    row.cells = regular;
    partition.rows.push(row);
    Some(vec![Planned::Mutation(Mutation {
        table: t.id,
        key: PartitionKey::new(key),
        update: partition,
    })])
}

/// The bound value of a bind marker for a single-cell column whose values are stored as
/// sent, when it is valid for the type: what `eval` would return, without building a
/// `Result<Value, QueryError>` per term (moving those was a third of `plan_simple`'s own
/// time at saturation). None leaves the term to `eval`: another kind of term, a
/// collection or UDT, or an invalid value (whose error the general path reports).
#[inline]
fn bound_single<'a>(expr: &ast::Expr, ty: &CqlType, ctx: &EvalCtx<'a>) -> Option<&'a BoundValue> {
    let ast::Expr::Bind(m) = expr else {
        return None;
    };
    if ty.is_multi_cell() || ty.has_unordered_collection() {
        return None;
    }
    let v = ctx.binds.get(m.index)?;
    if let BoundValue::Set(b) = v
        && ty.validate(b).is_err()
    {
        return None;
    }
    Some(v)
}

pub fn check_writable(t: &TableSchema) -> Result<(), QueryError> {
    if crate::schema::is_system_keyspace(&t.keyspace) {
        return Err(QueryError::Unauthorized(format!(
            "{} keyspace is not user-modifiable.",
            t.keyspace
        )));
    }
    Ok(())
}

/// Cassandra's restrictions on conditional statements.
fn check_conditional(
    t: &TableSchema,
    st: &ast::Statement,
    ctx: &EvalCtx<'_>,
) -> Result<(), QueryError> {
    let using = match st {
        ast::Statement::Insert(s) => &s.using,
        ast::Statement::Update(s) => &s.using,
        ast::Statement::Delete(s) => &s.using,
        _ => return Ok(()),
    };
    if using.timestamp.is_some() {
        return Err(invalid(
            "Cannot provide custom timestamp for conditional updates",
        ));
    }
    if let ast::Statement::Delete(s) = st
        && !t.clustering_key.is_empty()
    {
        let r = restrict::analyze(t, &s.where_clause, ctx)?;
        if !r.full_clustering(t) {
            let is_static = |name: &str| {
                t.column(name)
                    .is_some_and(|(_, d)| d.kind == ColumnKind::Static)
            };
            let regular_deleted = s.columns.is_empty()
                || s.columns.iter().any(|d| match d {
                    ast::Deletion::Column(c)
                    | ast::Deletion::Element { column: c, .. }
                    | ast::Deletion::Field { column: c, .. } => !is_static(&c.name),
                });
            if regular_deleted {
                return Err(invalid(
                    "DELETE statements must restrict all PRIMARY KEY columns with equality relations in order to delete non static columns",
                ));
            }
            if let Some(ast::Conditions::Columns(cs)) = &s.conditions
                && cs.iter().any(|c| match &c.target {
                    ast::ConditionTarget::Column(col)
                    | ast::ConditionTarget::Element { column: col, .. }
                    | ast::ConditionTarget::Field { column: col, .. } => !is_static(&col.name),
                })
            {
                return Err(invalid(
                    "DELETE statements must restrict all PRIMARY KEY columns with equality relations in order to use IF condition on non static columns",
                ));
            }
        }
    }
    Ok(())
}

fn check_not_view(schema: &crate::schema::Schema, t: &TableSchema) -> Result<(), QueryError> {
    if schema.view(&t.keyspace, &t.name).is_some() {
        return Err(invalid(format!(
            "Cannot directly modify a materialized view {}.{}",
            t.keyspace, t.name
        )));
    }
    Ok(())
}

/// Applies writes, each on the shard owning its token, concurrently.
fn write_failure(e: String) -> QueryError {
    QueryError::WriteFailure {
        consistency: 1,
        received: 0,
        block_for: 1,
        write_kind: WriteKind::Simple,
        message: format!("Operation failed - received 0 responses and 1 failures: {e}"),
    }
}

/// Applies one planned write on the calling shard. A mutation is applied at the call and
/// the returned future only waits for its acknowledgement ([`ShardDb::apply`]), so the
/// future stays small: every `async fn` above it in a write's call chain holds it, and
/// copies it when it starts it. Counter updates (a read, then the write) are boxed.
///
/// [`ShardDb::apply`]: amphora_replica::ShardDb::apply
fn apply_one(p: Planned) -> ApplyOne {
    let db = match amphora_replica::local() {
        Ok(db) => db,
        Err(e) => return ApplyOne::Failed(Some(e.to_string())),
    };
    match p {
        Planned::Mutation(m) => {
            amphora_trace::event(|| "Appending to commitlog, adding to memtable".into());
            ApplyOne::Mutation(db.apply(m))
        }
        Planned::Counter(c) => ApplyOne::Counter(Box::pin(async move {
            amphora_trace::event(|| "Applying a counter update (read, add, write)".into());
            let r = db.apply_counter(c).await.map_err(|e| e.to_string());
            if r.is_ok() {
                amphora_trace::event(|| "Write applied (acknowledged by the commitlog)".into());
            }
            r
        })),
    }
}

/// The future of [`apply_one`].
enum ApplyOne {
    Mutation(amphora_replica::Applying),
    Counter(std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>>>>),
    Failed(Option<String>),
}

impl std::future::Future for ApplyOne {
    type Output = Result<(), String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        match &mut *self {
            ApplyOne::Mutation(a) => match std::pin::Pin::new(a).poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(r) => {
                    if r.is_ok() {
                        amphora_trace::event(|| {
                            "Write applied (acknowledged by the commitlog)".into()
                        });
                    }
                    Poll::Ready(r.map_err(|e| e.to_string()))
                }
            },
            ApplyOne::Counter(f) => f.as_mut().poll(cx),
            ApplyOne::Failed(e) => Poll::Ready(Err(e.take().unwrap_or_default())),
        }
    }
}

/// Applies writes and what they imply (secondary index entries, materialized view
/// updates), each on the shard owning its token, concurrently.
pub async fn apply_all(inner: &Rc<Inner>, planned: Vec<Planned>) -> Result<(), QueryError> {
    apply_all_with(inner, planned, false).await
}

/// [`apply_all`]; `logged` (a LOGGED batch) makes several partitions all-or-nothing across
/// a crash. Groups with index entries or view updates, and logged multi-partition batches,
/// go through the batchlog (`batchlog.rs`); a plain single-partition write never does.
pub async fn apply_all_with(
    inner: &Rc<Inner>,
    planned: Vec<Planned>,
    logged: bool,
) -> Result<(), QueryError> {
    let schema = inner.schema();
    if schema.has_derived() || (logged && planned.len() > 1) {
        // Boxed: the batchlog and view state would otherwise size the future of every
        // write (and, through exec::run, of every read): ~15 KB copied per request.
        return Box::pin(crate::batchlog::apply_group(
            inner, &schema, planned, logged,
        ))
        .await;
    }
    apply_planned(inner, planned).await
}

/// Applies writes, each on the shard owning its token, concurrently.
pub async fn apply_planned(inner: &Rc<Inner>, planned: Vec<Planned>) -> Result<(), QueryError> {
    match start_planned(inner, planned) {
        Started::Here(f) => f.await.map_err(write_failure),
        Started::Elsewhere(f) => f.await,
    }
}

/// Writes under way: [`start_planned`].
enum Started {
    Here(ApplyOne),
    Elsewhere(std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), QueryError>>>>),
}

/// Starts the writes. The common case, one partition owned by this very shard
/// (shard-aware drivers), is applied at once and leaves a small future; writes for other
/// shards, or for several partitions, go as messages from a boxed future.
fn start_planned(inner: &Rc<Inner>, mut planned: Vec<Planned>) -> Started {
    let info = &inner.shared.info;
    if let [p] = planned.as_slice()
        && amphora_rt::current_shard() == Some(shard_of(p.token(), info.nr_shards, info.ignore_msb))
        && let Some(p) = planned.pop()
    {
        return Started::Here(apply_one(p));
    }
    let inner = inner.clone();
    Started::Elsewhere(Box::pin(
        async move { apply_elsewhere(&inner, planned).await },
    ))
}

/// Sends each write to the shard owning its token, and waits for them all.
async fn apply_elsewhere(inner: &Inner, planned: Vec<Planned>) -> Result<(), QueryError> {
    let info = &inner.shared.info;
    if planned.len() == 1 {
        if let Some(p) = planned.into_iter().next() {
            let shard = shard_of(p.token(), info.nr_shards, info.ignore_msb);
            crate::exec::on_shard(inner, shard, move || apply_one(p))
                .await?
                .map_err(write_failure)?;
        }
        return Ok(());
    }
    let shards = &inner.shared.shards;
    let mut pending = Vec::with_capacity(planned.len());
    for p in planned {
        let shard = shard_of(p.token(), info.nr_shards, info.ignore_msb);
        pending.push(shards.submit_to(shard, move || apply_one(p)));
    }
    for p in pending {
        p.await
            .map_err(|e| QueryError::Server(e.to_string()))?
            .map_err(write_failure)?;
    }
    Ok(())
}

fn ttl_of(u: &ast::Using, table: &TableSchema, ctx: &EvalCtx<'_>) -> Result<i32, QueryError> {
    match &u.ttl {
        None => Ok(table.options.default_time_to_live),
        Some(e) => match eval(e, &CqlType::Int, ctx, "[ttl]")? {
            Value::Set(b) => {
                let arr: [u8; 4] = b[..].try_into().map_err(|_| invalid("Invalid TTL value"))?;
                let v = i32::from_be_bytes(arr);
                if v < 0 {
                    return Err(invalid(format!(
                        "A TTL must be greater or equal to 0, but was {v}"
                    )));
                }
                if v > 630_720_000 {
                    return Err(invalid(format!(
                        "ttl is too large. requested ({v}) maximum (630720000)"
                    )));
                }
                Ok(v)
            }
            Value::Null => Err(invalid("Invalid null value of TTL")),
            Value::Unset => Ok(table.options.default_time_to_live),
        },
    }
}

fn timestamp_of(u: &ast::Using, default: i64, ctx: &EvalCtx<'_>) -> Result<i64, QueryError> {
    match &u.timestamp {
        None => Ok(default),
        Some(e) => match eval(e, &CqlType::Bigint, ctx, "[timestamp]")? {
            Value::Set(b) => {
                let arr: [u8; 8] = b[..]
                    .try_into()
                    .map_err(|_| invalid("Invalid timestamp value"))?;
                Ok(i64::from_be_bytes(arr))
            }
            Value::Unset => Ok(default),
            Value::Null => Err(invalid("Invalid null value of timestamp")),
        },
    }
}

fn now_seconds(ctx: &EvalCtx<'_>) -> i32 {
    (ctx.now_micros / 1_000_000) as i32
}

/// Cells for setting column `def` to `value` (whole-value assignment).
fn set_cells(
    def_ty: &CqlType,
    value: Value,
    ts: i64,
    ttl: i32,
    now_s: i32,
) -> Result<Option<ColumnData>, QueryError> {
    let live = |v: Bytes| {
        if ttl > 0 {
            Cell::expiring(ts, ttl, now_s, v)
        } else {
            Cell::live(ts, v)
        }
    };
    match value {
        Value::Unset => Ok(None),
        Value::Null => {
            if def_ty.is_multi_cell() {
                Ok(Some(ColumnData::Complex {
                    deletion: Some(DeletionTime::new(ts - 1, now_s)),
                    cells: Vec::new(),
                }))
            } else {
                Ok(Some(ColumnData::Simple(Cell::tombstone(ts, now_s))))
            }
        }
        Value::Set(b) => {
            if !def_ty.is_multi_cell() {
                return Ok(Some(ColumnData::Simple(live(b))));
            }
            let cells = element_cells(def_ty, &b, ts, ttl, now_s)?;
            Ok(Some(ColumnData::Complex {
                deletion: Some(DeletionTime::new(ts - 1, now_s)),
                cells,
            }))
        }
    }
}

/// Splits a serialized collection/UDT value into element cells (path, cell).
fn element_cells(
    ty: &CqlType,
    v: &[u8],
    ts: i64,
    ttl: i32,
    now_s: i32,
) -> Result<Vec<(Bytes, Cell)>, QueryError> {
    let live = |v: Bytes| {
        if ttl > 0 {
            Cell::expiring(ts, ttl, now_s, v)
        } else {
            Cell::live(ts, v)
        }
    };
    let bad = |e: String| invalid(format!("Invalid collection value: {e}"));
    let mut out = Vec::new();
    match ty {
        CqlType::List { .. } => {
            let items = amphora_types::cql_type::split_collection(v, 1).map_err(bad)?;
            for (i, it) in items.into_iter().enumerate() {
                let it = it.ok_or_else(|| invalid("null is not supported inside collections"))?;
                out.push((
                    Bytes::copy_from_slice(&timeuuid(ts + i as i64)),
                    live(Bytes::copy_from_slice(it)),
                ));
            }
        }
        CqlType::Set { .. } => {
            for it in amphora_types::cql_type::split_collection(v, 1).map_err(bad)? {
                let it = it.ok_or_else(|| invalid("null is not supported inside collections"))?;
                out.push((Bytes::copy_from_slice(it), live(Bytes::new())));
            }
        }
        CqlType::Map { .. } => {
            let items = amphora_types::cql_type::split_collection(v, 2).map_err(bad)?;
            for kv in items.chunks(2) {
                let (Some(Some(k)), Some(Some(val))) = (kv.first(), kv.get(1)) else {
                    return Err(invalid("null is not supported inside collections"));
                };
                out.push((Bytes::copy_from_slice(k), live(Bytes::copy_from_slice(val))));
            }
        }
        CqlType::Udt(_) => {
            for (i, f) in amphora_types::cql_type::split_tuple(v)
                .map_err(bad)?
                .into_iter()
                .enumerate()
            {
                let path = Bytes::copy_from_slice(&(i as u16).to_be_bytes());
                match f {
                    Some(val) => out.push((path, live(Bytes::copy_from_slice(val)))),
                    None => out.push((path, Cell::tombstone(ts, now_s))),
                }
            }
        }
        _ => return Err(invalid(format!("{ty} is not a multi-cell type"))),
    }
    sort_cells(ty, &mut out);
    Ok(out)
}

/// Complex cells are kept sorted by cell path in the type's element order (the storage
/// merge relies on it), last write of a duplicate path wins.
fn sort_cells(ty: &CqlType, cells: &mut Vec<(Bytes, Cell)>) {
    cells.reverse();
    cells.sort_by(|a, b| ty.compare_cell_path(&a.0, &b.0));
    cells.dedup_by(|a, b| ty.compare_cell_path(&a.0, &b.0).is_eq());
}

/// The index of `field` in the UDT of column `column`.
fn udt_field(u: &amphora_types::UdtDef, column: &str, field: &str) -> Result<usize, QueryError> {
    u.field_names
        .iter()
        .position(|f| f == field)
        .ok_or_else(|| {
            invalid(format!(
                "UDT column {column} does not have a field named {field}"
            ))
        })
}

struct RowBuild {
    statics: Vec<(ColumnId, ColumnData)>,
    regular: Vec<(ColumnId, ColumnData)>,
    counters: Vec<(ColumnId, i64, bool)>,
}

fn key_of(t: &TableSchema, values: &[(ColumnId, Bytes)]) -> Result<PartitionKey, QueryError> {
    let mut parts = Vec::with_capacity(t.partition_key.len());
    for id in &t.partition_key {
        let c = &t.columns[*id as usize];
        let v = values
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, v)| v)
            .ok_or_else(|| invalid(format!("Some partition key parts are missing: {}", c.name)))?;
        if v.len() > 65535 {
            return Err(invalid(format!(
                "Key length of {} is longer than maximum of 65535",
                v.len()
            )));
        }
        parts.push(&v[..]);
    }
    let key = amphora_types::token::serialize_composite_key(&parts);
    if key.is_empty() {
        return Err(invalid("Key may not be empty"));
    }
    Ok(PartitionKey::new(Bytes::from(key)))
}

pub fn plan_write(
    t: &TableSchema,
    st: &ast::Statement,
    ctx: &EvalCtx<'_>,
    default_ts: i64,
) -> Result<Vec<Planned>, QueryError> {
    plan_write_with(t, st, ctx, default_ts, &ListState::new())
}

/// Current rows (by partition key bytes and clustering) a statement with list index
/// operations (`l[i] = v`, `DELETE l[i]`) reads before it writes.
pub type ListState = std::collections::HashMap<(Bytes, Vec<Bytes>), Row>;

/// Whether the statement sets or deletes list elements by index (a read before write).
pub fn needs_list_read(t: &TableSchema, st: &ast::Statement) -> bool {
    let is_list = |name: &str| {
        t.column(name)
            .is_some_and(|(_, d)| matches!(d.ty, CqlType::List { frozen: false, .. }))
    };
    match st {
        ast::Statement::Update(s) => s.assignments.iter().any(|a| {
            matches!(
                a.op,
                ast::AssignmentOp::SetElement { .. } | ast::AssignmentOp::Subtract(_)
            ) && is_list(&a.column.name)
        }),
        ast::Statement::Delete(s) => s.columns.iter().any(|d| match d {
            ast::Deletion::Element { column, .. } => is_list(&column.name),
            _ => false,
        }),
        _ => false,
    }
}

/// Reads the rows a list-index statement addresses.
pub async fn read_lists(
    inner: &Rc<Inner>,
    t: &TableSchema,
    st: &ast::Statement,
    ctx: &EvalCtx<'_>,
) -> Result<ListState, QueryError> {
    let rels = match st {
        ast::Statement::Update(s) => &s.where_clause,
        ast::Statement::Delete(s) => &s.where_clause,
        _ => return Ok(ListState::new()),
    };
    let (keys, r) = where_keys(t, rels, ctx)?;
    let info = &inner.shared.info;
    let now_s = now_seconds(ctx);
    let mut out = ListState::new();
    for key in keys {
        let mut cmd = amphora_storage::ReadCommand::new(
            t.id,
            amphora_storage::PartitionRange::Single(key.clone()),
            now_s,
        );
        cmd.slices = r.slices(t);
        let shard = shard_of(key.token, info.nr_shards, info.ignore_msb);
        let res = crate::exec::on_shard(inner, shard, move || async move {
            let db = amphora_replica::local().map_err(|e| e.to_string())?;
            db.read(&cmd).map_err(|e| e.to_string())
        })
        .await?
        .map_err(QueryError::Server)?;
        for p in res.partitions {
            for row in p.rows {
                out.insert((p.key.key.clone(), row.clustering.0.clone()), row);
            }
        }
    }
    Ok(out)
}

pub fn plan_write_with(
    t: &TableSchema,
    st: &ast::Statement,
    ctx: &EvalCtx<'_>,
    default_ts: i64,
    lists: &ListState,
) -> Result<Vec<Planned>, QueryError> {
    match st {
        ast::Statement::Insert(s) => plan_insert(t, s, ctx, default_ts),
        ast::Statement::Update(s) => plan_update(t, s, ctx, default_ts, lists),
        ast::Statement::Delete(s) => plan_delete(t, s, ctx, default_ts, lists),
        _ => Err(QueryError::Server("not a write".into())),
    }
}

/// The live elements (path, value) of list column `id` in each row a statement addresses.
fn list_cells(
    t: &TableSchema,
    id: ColumnId,
    keys: &[PartitionKey],
    r: &restrict::Restrictions,
    lists: &ListState,
) -> Vec<(Bytes, Bytes)> {
    let clusterings = if t.clustering_key.is_empty() {
        vec![Clustering::empty()]
    } else {
        r.clusterings()
    };
    let mut out = Vec::new();
    for key in keys {
        for ck in &clusterings {
            if let Some(ColumnData::Complex { cells, .. }) = lists
                .get(&(key.key.clone(), ck.0.clone()))
                .and_then(|row| row.cell(id))
            {
                out.extend(
                    cells
                        .iter()
                        .filter(|(_, c)| !c.is_tombstone)
                        .map(|(p, c)| (p.clone(), c.value.clone())),
                );
            }
        }
    }
    out
}

/// The live element paths of list column `id` in the one row a statement addresses, and
/// the element the index names (Cassandra's errors for a null list or a bad index).
#[allow(clippy::too_many_arguments)]
fn list_element(
    t: &TableSchema,
    id: ColumnId,
    keys: &[PartitionKey],
    r: &restrict::Restrictions,
    lists: &ListState,
    index: &ast::Expr,
    ctx: &EvalCtx<'_>,
    setting: bool,
) -> Result<Bytes, QueryError> {
    let idx = match eval(index, &CqlType::Int, ctx, "[list index]")? {
        Value::Set(b) => {
            let arr: [u8; 4] = b[..]
                .try_into()
                .map_err(|_| invalid("Invalid list index"))?;
            i32::from_be_bytes(arr)
        }
        _ => return Err(invalid("Invalid null value for list index")),
    };
    let clusterings = if t.clustering_key.is_empty() {
        vec![Clustering::empty()]
    } else {
        r.clusterings()
    };
    let (Some(key), Some(ck)) = (keys.first(), clusterings.first()) else {
        return Err(invalid("Some partition key parts are missing"));
    };
    if keys.len() > 1 || clusterings.len() > 1 {
        return Err(invalid(
            "List index operations are only supported on a single row",
        ));
    }
    let paths: Vec<Bytes> = match lists
        .get(&(key.key.clone(), ck.0.clone()))
        .and_then(|row| row.cell(id))
    {
        Some(ColumnData::Complex { cells, .. }) => cells
            .iter()
            .filter(|(_, c)| !c.is_tombstone)
            .map(|(p, _)| p.clone())
            .collect(),
        _ => Vec::new(),
    };
    if paths.is_empty() {
        return Err(invalid(if setting {
            "Attempted to set an element on a list which is null"
        } else {
            "Attempted to delete an element from a list which is null"
        }));
    }
    usize::try_from(idx)
        .ok()
        .and_then(|i| paths.get(i).cloned())
        .ok_or_else(|| {
            invalid(format!(
                "List index {idx} out of bound, list has size {}",
                paths.len()
            ))
        })
}

fn plan_insert(
    t: &TableSchema,
    s: &ast::InsertStatement,
    ctx: &EvalCtx<'_>,
    default_ts: i64,
) -> Result<Vec<Planned>, QueryError> {
    let ts = timestamp_of(&s.using, default_ts, ctx)?;
    let ttl = ttl_of(&s.using, t, ctx)?;
    let now_s = now_seconds(ctx);
    let (columns, values) = match &s.values {
        ast::InsertValues::Values { columns, values } => (columns, values),
        ast::InsertValues::Json {
            value,
            default_unset,
        } => return plan_insert_json(t, s, value, *default_unset, ctx, default_ts),
    };
    if columns.len() != values.len() {
        return Err(invalid("Unmatched column names/values"));
    }
    if t.is_counter {
        return Err(invalid(
            "INSERT statements are not allowed on counter tables, use UPDATE instead",
        ));
    }
    let mut keys: Vec<(ColumnId, Bytes)> = Vec::new();
    let mut ck = vec![Bytes::new(); t.clustering_key.len()];
    let mut b = RowBuild {
        statics: Vec::new(),
        regular: Vec::new(),
        counters: Vec::new(),
    };
    let mut seen = std::collections::HashSet::new();
    for (c, v) in columns.iter().zip(values) {
        let (id, def) = t
            .column(&c.name)
            .ok_or_else(|| invalid(format!("Undefined column name {}", c.name)))?;
        if !seen.insert(id) {
            return Err(invalid("The column names contains duplicates".to_string()));
        }
        match def.kind {
            ColumnKind::PartitionKey => keys.push((id, eval_set(v, &def.ty, ctx, &def.name)?)),
            ColumnKind::Clustering => {
                let v = eval_set(v, &def.ty, ctx, &def.name)?;
                if v.len() > 65535 {
                    return Err(invalid(format!(
                        "Key length of {} is longer than maximum of 65535",
                        v.len()
                    )));
                }
                ck[def.position as usize] = v
            }
            ColumnKind::Static => {
                if let Some(d) =
                    set_cells(&def.ty, eval(v, &def.ty, ctx, &def.name)?, ts, ttl, now_s)?
                {
                    b.statics.push((id, d));
                }
            }
            ColumnKind::Regular => {
                if let Some(d) =
                    set_cells(&def.ty, eval(v, &def.ty, ctx, &def.name)?, ts, ttl, now_s)?
                {
                    b.regular.push((id, d));
                }
            }
        }
    }
    // Without clustering values an INSERT may only set static columns.
    let missing_ck = t.clustering_key.iter().find(|id| !seen.contains(id));
    let only_statics = missing_ck.is_some() && b.regular.is_empty() && !b.statics.is_empty();
    if let (Some(id), false) = (missing_ck, only_statics) {
        return Err(invalid(format!(
            "Some clustering keys are missing: {}",
            t.columns[*id as usize].name
        )));
    }
    let key = key_of(t, &keys)?;
    let mut update = PartitionUpdate::default();
    if !b.statics.is_empty() {
        let mut r = Row::new(Clustering::empty());
        b.statics.sort_by_key(|c| c.0);
        r.cells = b.statics;
        update.static_row = Some(r);
    }
    if !only_statics {
        let mut r = Row::new(Clustering(ck));
        r.marker = Some(if ttl > 0 {
            LivenessInfo::expiring(ts, ttl, now_s)
        } else {
            LivenessInfo::new(ts)
        });
        b.regular.sort_by_key(|c| c.0);
        r.cells = b.regular;
        update.rows.push(r);
    }
    Ok(vec![Planned::Mutation(Mutation {
        table: t.id,
        key,
        update,
    })])
}

/// `INSERT INTO t JSON '{...}'`: each JSON field becomes a bound value of its column;
/// columns not named are set to null unless `DEFAULT UNSET`.
fn plan_insert_json(
    t: &TableSchema,
    s: &ast::InsertStatement,
    value: &ast::Expr,
    default_unset: bool,
    ctx: &EvalCtx<'_>,
    default_ts: i64,
) -> Result<Vec<Planned>, QueryError> {
    let text = eval_set(value, &CqlType::Text, ctx, "[json]")?;
    let parsed: serde_json::Value = crate::json::parse_json(&text).map_err(|e| {
        invalid(format!(
            "Could not decode JSON string '{}': {e}",
            String::from_utf8_lossy(&text)
        ))
    })?;
    let serde_json::Value::Object(fields) = parsed else {
        return Err(invalid("JSON values map must be an object"));
    };
    let mut binds: Vec<BoundValue> = Vec::new();
    let mut columns = Vec::new();
    let mut values = Vec::new();
    let mut named = std::collections::HashSet::new();
    for (k, v) in &fields {
        // Unquoted JSON keys are case-insensitive, "\"Quoted\"" keys keep their case.
        let name = match k.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
            Some(q) => q.to_string(),
            None => k.to_ascii_lowercase(),
        };
        let (id, def) = t.column(&name).ok_or_else(|| {
            invalid(format!(
                "JSON values map contains unrecognized column: {name}"
            ))
        })?;
        let b = crate::json::from_json(&def.ty, v)?;
        let bound = match b {
            Some(b) => BoundValue::Set(b),
            None => BoundValue::Null,
        };
        if !named.insert(id) {
            // "k" and "K" name the same column: the later one wins, as in Cassandra.
            if let Some(pos) = columns.iter().position(|c: &ast::Ident| c.name == name) {
                binds[pos] = bound;
            }
            continue;
        }
        columns.push(ast::Ident::quoted(name));
        values.push(ast::Expr::Bind(ast::BindMarker {
            index: binds.len(),
            name: None,
        }));
        binds.push(bound);
    }
    for (i, def) in t.live_columns() {
        if !named.contains(&i) && matches!(def.kind, ColumnKind::Regular | ColumnKind::Static) {
            columns.push(ast::Ident::quoted(def.name.clone()));
            values.push(ast::Expr::Bind(ast::BindMarker {
                index: binds.len(),
                name: None,
            }));
            binds.push(if default_unset {
                BoundValue::Unset
            } else {
                BoundValue::Null
            });
        }
    }
    let mut st = s.clone();
    st.values = ast::InsertValues::Values { columns, values };
    let json_ctx = EvalCtx {
        binds: &binds,
        now_micros: ctx.now_micros,
    };
    // USING TTL/TIMESTAMP markers refer to the original binds: resolve them first.
    st.using.ttl = match &s.using.ttl {
        Some(e) => Some(ast::Expr::Literal(ast::Literal::Integer(
            ttl_of(&s.using, t, ctx)?.to_string(),
        )))
        .filter(|_| !matches!(e, ast::Expr::Null)),
        None => None,
    };
    st.using.timestamp = match &s.using.timestamp {
        Some(_) => Some(ast::Expr::Literal(ast::Literal::Integer(
            timestamp_of(&s.using, default_ts, ctx)?.to_string(),
        ))),
        None => None,
    };
    plan_insert(t, &st, &json_ctx, default_ts)
}

fn where_keys(
    t: &TableSchema,
    rels: &[ast::Relation],
    ctx: &EvalCtx<'_>,
) -> Result<(Vec<PartitionKey>, restrict::Restrictions), QueryError> {
    let r = restrict::analyze(t, rels, ctx)?;
    if r.needs_filtering
        || r.token_start.is_some()
        || r.token_end.is_some()
        || r.tuple_filter.is_some()
    {
        return Err(invalid(
            "Non PRIMARY KEY columns found in where clause or invalid restriction for a modification statement",
        ));
    }
    let keys = r
        .partition_keys()
        .ok_or_else(|| invalid("Some partition key parts are missing"))?;
    if keys.iter().any(|k| k.key.is_empty()) {
        return Err(invalid("Key may not be empty"));
    }
    Ok((keys, r))
}

fn plan_update(
    t: &TableSchema,
    s: &ast::UpdateStatement,
    ctx: &EvalCtx<'_>,
    default_ts: i64,
    lists: &ListState,
) -> Result<Vec<Planned>, QueryError> {
    if t.is_counter && s.using.ttl.is_some() {
        return Err(invalid("Cannot provide custom TTL for counter updates"));
    }
    if t.is_counter && s.using.timestamp.is_some() {
        return Err(invalid(
            "Cannot provide custom timestamp for counter updates",
        ));
    }
    let ts = timestamp_of(&s.using, default_ts, ctx)?;
    let ttl = ttl_of(&s.using, t, ctx)?;
    let now_s = now_seconds(ctx);
    let (keys, r) = where_keys(t, &s.where_clause, ctx)?;
    let mut b = RowBuild {
        statics: Vec::new(),
        regular: Vec::new(),
        counters: Vec::new(),
    };
    for a in &s.assignments {
        let (id, def) = t
            .column(&a.column.name)
            .ok_or_else(|| invalid(format!("Undefined column name {}", a.column.name)))?;
        if matches!(def.kind, ColumnKind::PartitionKey | ColumnKind::Clustering) {
            return Err(invalid(format!(
                "PRIMARY KEY part {} found in SET part",
                def.name
            )));
        }
        let is_static = def.kind == ColumnKind::Static;
        let live = |v: Bytes| {
            if ttl > 0 {
                Cell::expiring(ts, ttl, now_s, v)
            } else {
                Cell::live(ts, v)
            }
        };
        let data: Option<ColumnData> = match (&a.op, &def.ty) {
            (ast::AssignmentOp::Add(e) | ast::AssignmentOp::Subtract(e), CqlType::Counter) => {
                let v = eval_set(e, &CqlType::Bigint, ctx, &def.name)?;
                let arr: [u8; 8] = v[..]
                    .try_into()
                    .map_err(|_| invalid("Invalid counter value"))?;
                let mut d = i64::from_be_bytes(arr);
                if matches!(a.op, ast::AssignmentOp::Subtract(_)) {
                    d = d.wrapping_neg();
                }
                b.counters.push((id, d, is_static));
                None
            }
            (ast::AssignmentOp::Set(_), CqlType::Counter) => {
                return Err(invalid(format!(
                    "Cannot set the value of counter column {} (counters can only be incremented/decremented, not set)",
                    def.name
                )));
            }
            (ast::AssignmentOp::Set(e), ty) => {
                set_cells(ty, eval(e, ty, ctx, &def.name)?, ts, ttl, now_s)?
            }
            (ast::AssignmentOp::Add(ast::Expr::List(_)), ty @ CqlType::Set { .. }) => {
                return Err(invalid(format!(
                    "Unexpected receiver type '{ty}'; only list and vector are expected"
                )));
            }
            (
                ast::AssignmentOp::Add(e),
                ty @ (CqlType::List { frozen: false, .. }
                | CqlType::Set { frozen: false, .. }
                | CqlType::Map { frozen: false, .. }),
            ) => match eval(e, ty, ctx, &def.name)? {
                Value::Set(v) => Some(ColumnData::Complex {
                    deletion: None,
                    cells: element_cells(ty, &v, ts, ttl, now_s)?,
                }),
                _ => None,
            },
            (ast::AssignmentOp::Prepend(e), ty @ CqlType::List { frozen: false, .. }) => {
                match eval(e, ty, ctx, &def.name)? {
                    Value::Set(v) => {
                        // Prepended elements sort before every existing element: paths from a
                        // time far in the past, in order.
                        let items =
                            amphora_types::cql_type::split_collection(&v, 1).map_err(invalid)?;
                        let base = -(ts.rem_euclid(1 << 40)) - (1 << 41);
                        let cells = items
                            .into_iter()
                            .enumerate()
                            .filter_map(|(i, it)| {
                                it.map(|x| {
                                    (
                                        Bytes::copy_from_slice(&timeuuid(base + i as i64)),
                                        live(Bytes::copy_from_slice(x)),
                                    )
                                })
                            })
                            .collect();
                        Some(ColumnData::Complex {
                            deletion: None,
                            cells,
                        })
                    }
                    _ => None,
                }
            }
            (
                ast::AssignmentOp::Subtract(e),
                CqlType::Set {
                    frozen: false,
                    elem,
                },
            )
            | (
                ast::AssignmentOp::Subtract(e),
                CqlType::Map {
                    frozen: false,
                    key: elem,
                    ..
                },
            ) => {
                let set_ty = CqlType::Set {
                    elem: elem.clone(),
                    frozen: false,
                };
                match eval(e, &set_ty, ctx, &def.name)? {
                    Value::Set(v) => {
                        let cells = amphora_types::cql_type::split_collection(&v, 1)
                            .map_err(invalid)?
                            .into_iter()
                            .flatten()
                            .map(|k| (Bytes::copy_from_slice(k), Cell::tombstone(ts, now_s)))
                            .collect();
                        Some(ColumnData::Complex {
                            deletion: None,
                            cells,
                        })
                    }
                    _ => None,
                }
            }
            (
                ast::AssignmentOp::SetElement { key, value },
                CqlType::Map {
                    frozen: false,
                    key: kt,
                    value: vt,
                },
            ) => {
                let k = eval_set(key, kt, ctx, &def.name)?;
                let cell = match eval(value, vt, ctx, &def.name)? {
                    Value::Set(v) => live(v),
                    Value::Null => Cell::tombstone(ts, now_s),
                    Value::Unset => continue,
                };
                Some(ColumnData::Complex {
                    deletion: None,
                    cells: vec![(k, cell)],
                })
            }
            (
                ast::AssignmentOp::Subtract(e),
                ty @ CqlType::List {
                    frozen: false,
                    elem,
                },
            ) => {
                // Removes every element equal to one of the given values (a read before
                // write, as in Cassandra).
                let gone: Vec<Bytes> = match eval(e, ty, ctx, &def.name)? {
                    Value::Set(v) => amphora_types::cql_type::split_collection(&v, 1)
                        .map_err(invalid)?
                        .into_iter()
                        .flatten()
                        .map(Bytes::copy_from_slice)
                        .collect(),
                    _ => Vec::new(),
                };
                let cells: Vec<(Bytes, Cell)> = list_cells(t, id, &keys, &r, lists)
                    .into_iter()
                    .filter(|(_, v)| gone.iter().any(|g| elem.compare(g, v).is_eq()))
                    .map(|(p, _)| (p, Cell::tombstone(ts, now_s)))
                    .collect();
                if cells.is_empty() {
                    None
                } else {
                    Some(ColumnData::Complex {
                        deletion: None,
                        cells,
                    })
                }
            }
            (
                ast::AssignmentOp::SetElement { key, value },
                CqlType::List {
                    frozen: false,
                    elem,
                },
            ) => {
                let path = list_element(t, id, &keys, &r, lists, key, ctx, true)?;
                let cell = match eval(value, elem, ctx, &def.name)? {
                    Value::Set(v) => live(v),
                    Value::Null => Cell::tombstone(ts, now_s),
                    Value::Unset => continue,
                };
                Some(ColumnData::Complex {
                    deletion: None,
                    cells: vec![(path, cell)],
                })
            }
            (ast::AssignmentOp::SetField { field, value }, CqlType::Udt(d)) if !d.frozen => {
                let i = udt_field(d, &def.name, &field.name)?;
                let cell = match eval(value, &d.field_types[i], ctx, &def.name)? {
                    Value::Set(v) => live(v),
                    Value::Null => Cell::tombstone(ts, now_s),
                    Value::Unset => continue,
                };
                Some(ColumnData::Complex {
                    deletion: None,
                    cells: vec![(Bytes::copy_from_slice(&(i as u16).to_be_bytes()), cell)],
                })
            }
            (op, ty) => {
                return Err(invalid(format!(
                    "Invalid operation ({op:?}) for column {} of type {ty}",
                    def.name
                )));
            }
        };
        if let Some(mut d) = data {
            if let ColumnData::Complex { cells, .. } = &mut d {
                sort_cells(&def.ty, cells);
            }
            if is_static {
                b.statics.push((id, d));
            } else {
                b.regular.push((id, d));
            }
        }
    }
    let needs_rows = !b.regular.is_empty() || b.counters.iter().any(|c| !c.2);
    let has_ck = !r.ck_prefix.is_empty() || r.ck_lower.is_some() || r.ck_upper.is_some();
    if !needs_rows && has_ck && (!b.statics.is_empty() || b.counters.iter().any(|c| c.2)) {
        return Err(invalid(
            "Invalid restrictions on clustering columns since the UPDATE statement modifies only static columns",
        ));
    }
    if needs_rows && !r.full_clustering(t) {
        return Err(invalid(format!(
            "Some clustering keys are missing: {}",
            t.clustering_key
                .get(r.ck_prefix.len())
                .map(|i| t.columns[*i as usize].name.clone())
                .unwrap_or_default()
        )));
    }
    let clusterings = if t.clustering_key.is_empty() {
        vec![Clustering::empty()]
    } else {
        r.clusterings()
    };
    b.statics.sort_by_key(|c| c.0);
    b.regular.sort_by_key(|c| c.0);
    let mut out = Vec::new();
    for key in keys {
        if !b.counters.is_empty() {
            let statics: Vec<(ColumnId, i64)> = b
                .counters
                .iter()
                .filter(|c| c.2)
                .map(|c| (c.0, c.1))
                .collect();
            let regular: Vec<(ColumnId, i64)> = b
                .counters
                .iter()
                .filter(|c| !c.2)
                .map(|c| (c.0, c.1))
                .collect();
            if !statics.is_empty() {
                out.push(Planned::Counter(CounterUpdate {
                    table: t.id,
                    key: key.clone(),
                    clustering: Clustering::empty(),
                    is_static: true,
                    deltas: statics,
                    timestamp: ts,
                }));
            }
            if !regular.is_empty() {
                for c in &clusterings {
                    out.push(Planned::Counter(CounterUpdate {
                        table: t.id,
                        key: key.clone(),
                        clustering: c.clone(),
                        is_static: false,
                        deltas: regular.clone(),
                        timestamp: ts,
                    }));
                }
            }
            continue;
        }
        let mut update = PartitionUpdate::default();
        if !b.statics.is_empty() {
            let mut row = Row::new(Clustering::empty());
            row.cells = b.statics.clone();
            update.static_row = Some(row);
        }
        if !b.regular.is_empty() {
            for c in &clusterings {
                let mut row = Row::new(c.clone());
                row.cells = b.regular.clone();
                update.rows.push(row);
            }
        }
        if !update.is_empty() {
            out.push(Planned::Mutation(Mutation {
                table: t.id,
                key,
                update,
            }));
        }
    }
    Ok(out)
}

fn plan_delete(
    t: &TableSchema,
    s: &ast::DeleteStatement,
    ctx: &EvalCtx<'_>,
    default_ts: i64,
    lists: &ListState,
) -> Result<Vec<Planned>, QueryError> {
    let ts = timestamp_of(&s.using, default_ts, ctx)?;
    if s.using.ttl.is_some() {
        return Err(invalid("Cannot provide custom TTL for DELETE statements"));
    }
    let now_s = now_seconds(ctx);
    let (keys, r) = where_keys(t, &s.where_clause, ctx)?;
    let del = DeletionTime::new(ts, now_s);
    let mut out = Vec::new();
    for key in keys.clone() {
        let mut update = PartitionUpdate::default();
        if s.columns.is_empty() {
            if r.ck_prefix.is_empty() && r.ck_lower.is_none() && r.ck_upper.is_none() {
                update.partition_deletion = Some(del);
            } else if r.full_clustering(t) {
                for c in r.clusterings() {
                    let mut row = Row::new(c);
                    row.deletion = Some(del);
                    update.rows.push(row);
                }
            } else {
                for sl in r.slices(t) {
                    update.range_tombstones.push(RangeTombstone {
                        start: sl.start,
                        end: sl.end,
                        deletion: del,
                    });
                }
            }
        } else {
            let mut statics = Vec::new();
            let mut regular = Vec::new();
            for d in &s.columns {
                let (name, data) = match d {
                    ast::Deletion::Column(c) => {
                        let (_, def) = t
                            .column(&c.name)
                            .ok_or_else(|| invalid(format!("Undefined column name {}", c.name)))?;
                        let data = if def.ty.is_multi_cell() {
                            ColumnData::Complex {
                                deletion: Some(del),
                                cells: Vec::new(),
                            }
                        } else {
                            ColumnData::Simple(Cell::tombstone(ts, now_s))
                        };
                        (c.name.clone(), data)
                    }
                    ast::Deletion::Element { column, key } => {
                        let (cid, def) = t.column(&column.name).ok_or_else(|| {
                            invalid(format!("Undefined column name {}", column.name))
                        })?;
                        if matches!(def.ty, CqlType::List { frozen: false, .. }) {
                            let path = list_element(t, cid, &keys, &r, lists, key, ctx, false)?;
                            (
                                column.name.clone(),
                                ColumnData::Complex {
                                    deletion: None,
                                    cells: vec![(path, Cell::tombstone(ts, now_s))],
                                },
                            )
                        } else {
                            let kt = match &def.ty {
                                CqlType::Map {
                                    key, frozen: false, ..
                                } => (**key).clone(),
                                CqlType::Set {
                                    elem,
                                    frozen: false,
                                } => (**elem).clone(),
                                _ => {
                                    return Err(invalid(format!(
                                        "Invalid operation for column {}: element deletion on a list or frozen collection is not supported yet",
                                        def.name
                                    )));
                                }
                            };
                            let k = eval_set(key, &kt, ctx, &def.name)?;
                            (
                                column.name.clone(),
                                ColumnData::Complex {
                                    deletion: None,
                                    cells: vec![(k, Cell::tombstone(ts, now_s))],
                                },
                            )
                        }
                    }
                    ast::Deletion::Field { column, field } => {
                        let (_, def) = t.column(&column.name).ok_or_else(|| {
                            invalid(format!("Undefined column name {}", column.name))
                        })?;
                        let CqlType::Udt(u) = &def.ty else {
                            return Err(invalid(format!(
                                "Invalid field deletion on non-UDT column {}",
                                def.name
                            )));
                        };
                        let i = udt_field(u, &def.name, &field.name)?;
                        (
                            column.name.clone(),
                            ColumnData::Complex {
                                deletion: None,
                                cells: vec![(
                                    Bytes::copy_from_slice(&(i as u16).to_be_bytes()),
                                    Cell::tombstone(ts, now_s),
                                )],
                            },
                        )
                    }
                };
                let (id, def) = t
                    .column(&name)
                    .ok_or_else(|| invalid(format!("Undefined column name {name}")))?;
                match def.kind {
                    ColumnKind::Static => statics.push((id, data)),
                    ColumnKind::Regular => regular.push((id, data)),
                    _ => {
                        return Err(invalid(format!(
                            "Invalid identifier {name} for deletion (should not be a PRIMARY KEY part)"
                        )));
                    }
                }
            }
            statics.sort_by_key(|c| c.0);
            regular.sort_by_key(|c| c.0);
            let has_ck = !r.ck_prefix.is_empty() || r.ck_lower.is_some() || r.ck_upper.is_some();
            if regular.is_empty() && !statics.is_empty() && has_ck {
                return Err(invalid(
                    "Invalid restrictions on clustering columns since the DELETE statement modifies only static columns",
                ));
            }
            if !statics.is_empty() {
                let mut row = Row::new(Clustering::empty());
                row.cells = statics;
                update.static_row = Some(row);
            }
            if !regular.is_empty() {
                if !r.full_clustering(t) {
                    return Err(invalid("Some clustering keys are missing"));
                }
                let clusterings = if t.clustering_key.is_empty() {
                    vec![Clustering::empty()]
                } else {
                    r.clusterings()
                };
                for c in clusterings {
                    let mut row = Row::new(c);
                    row.cells = regular.clone();
                    update.rows.push(row);
                }
            }
        }
        out.push(Planned::Mutation(Mutation {
            table: t.id,
            key,
            update,
        }));
    }
    Ok(out)
}

pub async fn run_batch(
    inner: &Rc<Inner>,
    kind: BatchType,
    children: Vec<(Option<String>, ast::BatchChild, Vec<BoundValue>)>,
    opts: &QueryOptions,
) -> Result<QueryResult, QueryError> {
    let schema = inner.schema();
    let default_ts = opts.timestamp.unwrap_or_else(|| inner.new_timestamp());
    let now = crate::exec::now_micros();
    let mut planned = Vec::new();
    let any_conditional = children.iter().any(|(_, c, _)| match c {
        ast::BatchChild::Insert(s) => s.if_not_exists,
        ast::BatchChild::Update(s) => s.conditions.is_some(),
        ast::BatchChild::Delete(s) => s.conditions.is_some(),
    });
    let mut conditional_items = Vec::new();
    for (ks, child, values) in &children {
        let ctx = EvalCtx {
            binds: values,
            now_micros: now,
        };
        let (st, table_name, conditional) = match child {
            ast::BatchChild::Insert(s) => (
                ast::Statement::Insert(Box::new(s.clone())),
                &s.table,
                s.if_not_exists,
            ),
            ast::BatchChild::Update(s) => (
                ast::Statement::Update(Box::new(s.clone())),
                &s.table,
                s.conditions.is_some(),
            ),
            ast::BatchChild::Delete(s) => (
                ast::Statement::Delete(Box::new(s.clone())),
                &s.table,
                s.conditions.is_some(),
            ),
        };
        let table = crate::plan::resolve_table(&schema, ks.as_deref(), table_name)?;
        check_writable(&table)?;
        check_not_view(&schema, &table)?;
        if conditional {
            check_conditional(&table, &st, &ctx)?;
        }
        crate::consistency::check(schema.keyspace(&table.keyspace), opts.consistency, true)?;
        match (kind, table.is_counter) {
            (BatchType::Counter, false) => {
                return Err(invalid(
                    "Cannot include non-counter statement in a counter batch",
                ));
            }
            (BatchType::Logged, true) => {
                return Err(invalid(
                    "Cannot include a counter statement in a logged batch",
                ));
            }
            _ => {}
        }
        let lists = if needs_list_read(&table, &st) {
            read_lists(inner, &table, &st, &ctx).await?
        } else {
            ListState::new()
        };
        let p = plan_write_with(&table, &st, &ctx, default_ts, &lists)?;
        if any_conditional {
            if kind == BatchType::Counter {
                return Err(invalid(
                    "Cannot include a counter statement in a conditional batch",
                ));
            }
            let serial = opts
                .serial_consistency
                .unwrap_or(crate::consistency::SERIAL);
            crate::consistency::check(schema.keyspace(&table.keyspace), serial, false)?;
            conditional_items.push((table.clone(), st.clone(), conditional, p, values.clone()));
            continue;
        }
        planned.extend(p);
    }
    if any_conditional {
        return crate::lwt::run_conditional_batch(inner, conditional_items, now).await;
    }
    crate::guardrails::check_batch(&schema, kind, &planned)?;
    apply_all_with(inner, planned, kind == BatchType::Logged).await?;
    Ok(QueryResult::Void)
}
