//! SELECT: restrictions → storage reads on the owning shards → result rows, with paging.

use std::ops::Bound;
use std::rc::Rc;
use std::sync::Arc;

use amphora_cql as ast;
use amphora_storage::{PartitionData, PartitionRange, ReadCommand};
use amphora_types::CqlType;
use amphora_types::data::{Cell, Clustering, ColumnData, PartitionKey, Row, counter_value};
use amphora_types::schema::{ColumnId, ColumnKind, TableSchema};
use amphora_types::token::shard_of;
use bytes::{BufMut, Bytes, BytesMut};

use crate::api::*;
use crate::exec::Inner;
use crate::restrict::{self, Filter};
use crate::values::{EvalCtx, Value, eval, serialize_collection, serialize_map, serialize_tuple};

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::Invalid(m.into())
}

#[derive(Clone, Debug)]
pub enum Sel {
    Column(ColumnId),
    WriteTime(ColumnId),
    Ttl(ColumnId),
    Token,
    CountRows,
    Count(ColumnId),
    Min(ColumnId),
    Max(ColumnId),
}

#[derive(Clone, Debug)]
pub struct SelItem {
    pub sel: Sel,
    pub name: String,
    pub ty: CqlType,
}

/// `SELECT *` column order: partition key, clustering, then statics and regular columns by name.
pub fn wildcard_columns(t: &TableSchema) -> Vec<ColumnId> {
    let mut out: Vec<ColumnId> = t.partition_key.clone();
    out.extend(&t.clustering_key);
    let mut statics: Vec<ColumnId> = (0..t.columns.len() as ColumnId)
        .filter(|i| t.columns[*i as usize].kind == ColumnKind::Static)
        .collect();
    let mut regular: Vec<ColumnId> = (0..t.columns.len() as ColumnId)
        .filter(|i| t.columns[*i as usize].kind == ColumnKind::Regular)
        .collect();
    statics.sort_by(|a, b| {
        t.columns[*a as usize]
            .name
            .cmp(&t.columns[*b as usize].name)
    });
    regular.sort_by(|a, b| {
        t.columns[*a as usize]
            .name
            .cmp(&t.columns[*b as usize].name)
    });
    out.extend(statics);
    out.extend(regular);
    out
}

fn column_arg(t: &TableSchema, e: &ast::Expr) -> Result<ColumnId, QueryError> {
    match e {
        ast::Expr::Column(c) => t
            .column(&c.name)
            .map(|(i, _)| i)
            .ok_or_else(|| invalid(format!("Undefined column name {}", c.name))),
        _ => Err(invalid("Only column names are supported as arguments here")),
    }
}

pub fn selection(t: &TableSchema, s: &ast::SelectStatement) -> Result<Vec<SelItem>, QueryError> {
    let items = match &s.selection {
        ast::Selection::Wildcard => wildcard_columns(t)
            .into_iter()
            .map(|i| SelItem {
                sel: Sel::Column(i),
                name: t.columns[i as usize].name.clone(),
                ty: t.columns[i as usize].ty.clone(),
            })
            .collect(),
        ast::Selection::List(sels) => {
            let mut out = Vec::with_capacity(sels.len());
            for sel in sels {
                let (item, default_name) = match &sel.expr {
                    ast::Expr::Column(c) => {
                        let (i, d) = t
                            .column(&c.name)
                            .ok_or_else(|| invalid(format!("Undefined column name {}", c.name)))?;
                        (
                            SelItem {
                                sel: Sel::Column(i),
                                name: String::new(),
                                ty: d.ty.clone(),
                            },
                            d.name.clone(),
                        )
                    }
                    ast::Expr::CellMetadata { kind, column } => {
                        let i = column_arg(t, column)?;
                        let d = &t.columns[i as usize];
                        if matches!(d.kind, ColumnKind::PartitionKey | ColumnKind::Clustering) {
                            return Err(invalid(format!(
                                "Cannot use selection function {} on PRIMARY KEY part {}",
                                if *kind == ast::CellMetadata::Ttl {
                                    "ttl"
                                } else {
                                    "writeTime"
                                },
                                d.name
                            )));
                        }
                        match kind {
                            ast::CellMetadata::Ttl => (
                                SelItem {
                                    sel: Sel::Ttl(i),
                                    name: String::new(),
                                    ty: CqlType::Int,
                                },
                                format!("ttl({})", d.name),
                            ),
                            _ => (
                                SelItem {
                                    sel: Sel::WriteTime(i),
                                    name: String::new(),
                                    ty: CqlType::Bigint,
                                },
                                format!("writetime({})", d.name),
                            ),
                        }
                    }
                    ast::Expr::CountRows => (
                        SelItem {
                            sel: Sel::CountRows,
                            name: String::new(),
                            ty: CqlType::Bigint,
                        },
                        "count".into(),
                    ),
                    ast::Expr::Function { name, args } => {
                        let fname = name.name.name.to_ascii_lowercase();
                        match (fname.as_str(), args.as_slice()) {
                            ("token", _) => (
                                SelItem {
                                    sel: Sel::Token,
                                    name: String::new(),
                                    ty: CqlType::Bigint,
                                },
                                format!(
                                    "system.token({})",
                                    args.iter()
                                        .map(|a| match a {
                                            ast::Expr::Column(c) => c.name.clone(),
                                            _ => "?".into(),
                                        })
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                ),
                            ),
                            ("count", [ast::Expr::Literal(_)]) => (
                                SelItem {
                                    sel: Sel::CountRows,
                                    name: String::new(),
                                    ty: CqlType::Bigint,
                                },
                                "count".into(),
                            ),
                            ("count", [a]) => {
                                let i = column_arg(t, a)?;
                                (
                                    SelItem {
                                        sel: Sel::Count(i),
                                        name: String::new(),
                                        ty: CqlType::Bigint,
                                    },
                                    format!("system.count({})", t.columns[i as usize].name),
                                )
                            }
                            ("min" | "max", [a]) => {
                                let i = column_arg(t, a)?;
                                let sel = if fname == "min" {
                                    Sel::Min(i)
                                } else {
                                    Sel::Max(i)
                                };
                                (
                                    SelItem {
                                        sel,
                                        name: String::new(),
                                        ty: t.columns[i as usize].ty.clone(),
                                    },
                                    format!("system.{fname}({})", t.columns[i as usize].name),
                                )
                            }
                            _ => {
                                return Err(invalid(format!(
                                    "Unknown function {fname} or unsupported selector in Amphora"
                                )));
                            }
                        }
                    }
                    _ => return Err(invalid("This selector is not supported by Amphora yet")),
                };
                let name = sel
                    .alias
                    .as_ref()
                    .map(|a| a.name.clone())
                    .unwrap_or(default_name);
                out.push(SelItem { name, ..item });
            }
            out
        }
    };
    Ok(items)
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

fn is_aggregate(items: &[SelItem]) -> bool {
    items.iter().any(|i| {
        matches!(
            i.sel,
            Sel::CountRows | Sel::Count(_) | Sel::Min(_) | Sel::Max(_)
        )
    })
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
    pub items: Vec<SelItem>,
    pub columns: Arc<Vec<ResultColumn>>,
    pub is_virtual: bool,
}

pub fn plan_select(
    schema: &crate::schema::Schema,
    keyspace: Option<&str>,
    s: &ast::SelectStatement,
) -> Result<SelectPlan, QueryError> {
    let table = crate::plan::resolve_table(schema, keyspace, &s.table)?;
    let items = selection(&table, s)?;
    let columns = Arc::new(
        items
            .iter()
            .map(|i| ResultColumn {
                keyspace: table.keyspace.clone(),
                table: table.name.clone(),
                name: i.name.clone(),
                ty: i.ty.clone(),
            })
            .collect::<Vec<_>>(),
    );
    let is_virtual = crate::system::virtual_table(&table.keyspace, &table.name).is_some();
    Ok(SelectPlan {
        table,
        items,
        columns,
        is_virtual,
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
    let schema = inner.schema();
    let ctx = EvalCtx {
        binds,
        now_micros: crate::exec::now_micros(),
    };
    let plan = match cache.and_then(|c| c.get()) {
        Some(p) => p.clone(),
        None => {
            let p = Arc::new(plan_select(&schema, keyspace, s)?);
            if let Some(c) = cache {
                let _ = c.set(p.clone());
            }
            p
        }
    };
    let table = &plan.table;
    let items = &plan.items;
    let columns = plan.columns.clone();
    if plan.is_virtual {
        if let Some(v) = crate::system::virtual_table(&table.keyspace, &table.name) {
            let rows = (v.rows)(&schema, &inner.shared.info);
            return crate::system::select_virtual(table, rows, s, items, columns, &ctx, opts);
        }
    }
    let r = restrict::analyze(table, &s.where_clause, &ctx)?;
    if r.needs_filtering && !s.allow_filtering {
        return Err(invalid(
            "Cannot execute this query as it might involve data filtering and thus may have unpredictable performance. If you want to execute this query despite the performance unpredictability, use ALLOW FILTERING",
        ));
    }
    let limit = int_of(&s.limit, &ctx, "[limit]")?;
    let ppl = int_of(&s.per_partition_limit, &ctx, "[per_partition_limit]")?;
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
            want_desc != column_desc
        }
    };
    let aggregate = is_aggregate(&items);
    let page_size = opts
        .page_size
        .filter(|p| *p > 0)
        .map(|p| p as u32)
        .filter(|_| !aggregate);
    let paging = match &opts.paging_state {
        Some(b) if !b.is_empty() => Some(decode_paging(b)?),
        _ => None,
    };
    let mut remaining = paging
        .as_ref()
        .map(|p| p.remaining)
        .or(limit)
        .unwrap_or(u32::MAX);
    if aggregate {
        remaining = u32::MAX;
    }
    let page = page_size.map(|p| p.min(remaining)).unwrap_or(remaining);
    let filtering = !r.filters.is_empty();
    let base = ReadCommand {
        table: table.id,
        partitions: PartitionRange::all(),
        slices: r.slices(&table),
        columns: None,
        reversed,
        // With row filters the limit is applied after filtering.
        row_limit: if filtering { 0 } else { page },
        per_partition_limit: ppl.unwrap_or(0),
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
        for key in keys {
            if let Some(p) = &paging {
                if key < p.key {
                    continue;
                }
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
        let results = inner
            .shared
            .shards
            .submit_to_all(move |_| {
                let cmd = cmd.clone();
                async move {
                    let db = amphora_replica::local().map_err(|e| e.to_string())?;
                    db.read(&cmd).map_err(|e| e.to_string())
                }
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
    // Build result rows.
    let now_s = (ctx.now_micros / 1_000_000) as i32;
    let mut out = ResultBuilder {
        cells: Vec::new(),
        rows: 0,
    };
    let mut last: Option<(PartitionKey, Option<Clustering>)> = None;
    let mut agg = Aggregates::new(&items);
    let has_ck_restriction =
        !r.ck_prefix.is_empty() || r.ck_lower.is_some() || r.ck_upper.is_some();
    'outer: for p in &partitions {
        let mut in_partition = 0u32;
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
            if out.rows as u32 >= page && !aggregate {
                exhausted = false;
                break 'outer;
            }
            if let Some(l) = ppl {
                if in_partition >= l {
                    break;
                }
            }
            if !r
                .filters
                .iter()
                .all(|f| filter_row(&table, f, p, row, now_s))
            {
                continue;
            }
            in_partition += 1;
            if aggregate {
                agg.add(&items, &table, p, row);
            } else {
                for it in items.iter() {
                    out.cells
                        .push(value_of(&table, &it.sel, p, row, now_s, static_only));
                }
                out.rows += 1;
            }
            last = Some((
                p.key.clone(),
                if static_only {
                    None
                } else {
                    Some(row.clustering.clone())
                },
            ));
        }
    }
    if aggregate {
        out.cells = agg.finish(&items);
        out.rows = 1;
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
    Ok(QueryResult::Rows(ResultRows {
        columns,
        cells: out.cells,
        row_count: out.rows,
        paging_state,
        no_metadata: opts.skip_metadata,
    }))
}

async fn read_on(
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
        tracing::warn!(error = %e, "read failed");
        QueryError::ReadTimeout {
            consistency: 1,
            received: 0,
            block_for: 1,
            data_present: false,
        }
    })
}

struct ResultBuilder {
    cells: Vec<Option<Bytes>>,
    rows: usize,
}

/// The serialized CQL value of a column in a (live) row.
pub fn column_value(
    t: &TableSchema,
    id: ColumnId,
    p: &PartitionData,
    row: &Row,
    static_only: bool,
) -> Option<Bytes> {
    let def = t.columns.get(id as usize)?;
    match def.kind {
        ColumnKind::PartitionKey => {
            if t.partition_key.len() == 1 {
                Some(p.key.key.clone())
            } else {
                split_composite(&p.key.key)
                    .get(def.position as usize)
                    .cloned()
            }
        }
        ColumnKind::Clustering => {
            if static_only {
                None
            } else {
                row.clustering.0.get(def.position as usize).cloned()
            }
        }
        ColumnKind::Static => p
            .static_row
            .as_ref()
            .and_then(|r| r.cell(id))
            .and_then(|d| data_value(&def.ty, d)),
        ColumnKind::Regular => row.cell(id).and_then(|d| data_value(&def.ty, d)),
    }
}

fn cell_of<'a>(
    t: &TableSchema,
    id: ColumnId,
    p: &'a PartitionData,
    row: &'a Row,
) -> Option<&'a Cell> {
    let def = t.columns.get(id as usize)?;
    let d = if def.kind == ColumnKind::Static {
        p.static_row.as_ref()?.cell(id)?
    } else {
        row.cell(id)?
    };
    match d {
        ColumnData::Simple(c) => Some(c),
        ColumnData::Complex { .. } => None,
    }
}

fn value_of(
    t: &TableSchema,
    sel: &Sel,
    p: &PartitionData,
    row: &Row,
    now_s: i32,
    static_only: bool,
) -> Option<Bytes> {
    match sel {
        Sel::Column(id) => column_value(t, *id, p, row, static_only),
        Sel::WriteTime(id) => {
            cell_of(t, *id, p, row).map(|c| Bytes::copy_from_slice(&c.timestamp.to_be_bytes()))
        }
        Sel::Ttl(id) => cell_of(t, *id, p, row)
            .filter(|c| c.ttl > 0)
            .map(|c| Bytes::copy_from_slice(&(c.local_expiry - now_s).max(0).to_be_bytes())),
        Sel::Token => Some(Bytes::copy_from_slice(&p.key.token.to_be_bytes())),
        _ => None,
    }
}

pub fn split_composite(key: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 2 <= key.len() {
        let len = u16::from_be_bytes([key[i], key[i + 1]]) as usize;
        i += 2;
        let Some(v) = key.get(i..i + len) else { break };
        out.push(Bytes::copy_from_slice(v));
        i += len + 1;
    }
    out
}

/// Serializes stored column data as the CQL value of `ty`.
pub fn data_value(ty: &CqlType, d: &ColumnData) -> Option<Bytes> {
    match d {
        ColumnData::Simple(c) => {
            if c.is_tombstone {
                None
            } else if c.is_counter {
                Some(Bytes::copy_from_slice(
                    &counter_value(&c.value).to_be_bytes(),
                ))
            } else {
                Some(c.value.clone())
            }
        }
        ColumnData::Complex { cells, .. } => {
            let live: Vec<&(Bytes, Cell)> = cells.iter().filter(|(_, c)| !c.is_tombstone).collect();
            if live.is_empty() {
                return None;
            }
            Some(match ty {
                CqlType::List { .. } => {
                    serialize_collection(live.iter().map(|(_, c)| Some(&c.value[..])))
                }
                CqlType::Set { .. } => serialize_collection(live.iter().map(|(k, _)| Some(&k[..]))),
                CqlType::Map { .. } => {
                    serialize_map(live.iter().map(|(k, c)| (&k[..], &c.value[..])))
                }
                CqlType::Udt(def) => {
                    let mut fields: Vec<Option<&[u8]>> = vec![None; def.field_names.len()];
                    for (k, c) in &live {
                        if k.len() == 2 {
                            let i = u16::from_be_bytes([k[0], k[1]]) as usize;
                            if let Some(f) = fields.get_mut(i) {
                                *f = Some(&c.value[..]);
                            }
                        }
                    }
                    serialize_tuple(fields.into_iter())
                }
                _ => return None,
            })
        }
    }
}

fn filter_row(t: &TableSchema, f: &Filter, p: &PartitionData, row: &Row, _now_s: i32) -> bool {
    use std::cmp::Ordering::*;
    let Some(def) = t.columns.get(f.column as usize) else {
        return false;
    };
    let v = column_value(t, f.column, p, row, false);
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
        op => {
            let Some(v) = v else { return false };
            let o = def.ty.compare(&v, &f.values[0]);
            match op {
                ast::Operator::Eq => o == Equal,
                ast::Operator::Neq => o != Equal,
                ast::Operator::Lt => o == Less,
                ast::Operator::Lte => o != Greater,
                ast::Operator::Gt => o == Greater,
                ast::Operator::Gte => o != Less,
                _ => false,
            }
        }
    }
}

struct Aggregates {
    count_rows: i64,
    per_item: Vec<(i64, Option<Bytes>)>,
}

impl Aggregates {
    fn new(items: &[SelItem]) -> Self {
        Aggregates {
            count_rows: 0,
            per_item: vec![(0, None); items.len()],
        }
    }

    fn add(&mut self, items: &[SelItem], t: &TableSchema, p: &PartitionData, row: &Row) {
        self.count_rows += 1;
        for (slot, it) in self.per_item.iter_mut().zip(items) {
            match it.sel {
                Sel::Count(id) => {
                    if column_value(t, id, p, row, false).is_some() {
                        slot.0 += 1;
                    }
                }
                Sel::Min(id) | Sel::Max(id) => {
                    if let Some(v) = column_value(t, id, p, row, false) {
                        let better = match &slot.1 {
                            None => true,
                            Some(cur) => {
                                let o = it.ty.compare(&v, cur);
                                if matches!(it.sel, Sel::Min(_)) {
                                    o.is_lt()
                                } else {
                                    o.is_gt()
                                }
                            }
                        };
                        if better {
                            slot.1 = Some(v);
                        }
                    }
                }
                // A plain column next to an aggregate shows the first row's value.
                Sel::Column(id) if self.count_rows == 1 => {
                    slot.1 = column_value(t, id, p, row, false)
                }
                _ => {}
            }
        }
    }

    fn finish(self, items: &[SelItem]) -> Vec<Option<Bytes>> {
        items
            .iter()
            .zip(self.per_item)
            .map(|(it, (n, v))| match it.sel {
                Sel::CountRows => Some(Bytes::copy_from_slice(&self.count_rows.to_be_bytes())),
                Sel::Count(_) => Some(Bytes::copy_from_slice(&n.to_be_bytes())),
                _ => v,
            })
            .collect()
    }
}
