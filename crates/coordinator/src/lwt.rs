//! Conditional writes (LWT) on a single node: the owning shard reads the row and applies
//! the write with no await in between, which makes the check-and-set linearizable there.
//! Paxos across replicas comes with the cluster.

use std::rc::Rc;
use std::sync::Arc;

use amphora_cql as ast;
use amphora_storage::{PartitionRange, ReadCommand};
use amphora_types::CqlType;
use amphora_types::data::{ClusteringBound, ClusteringSlice, ColumnData};
use amphora_types::schema::{ColumnId, TableSchema};
use amphora_types::token::shard_of;
use bytes::Bytes;

use crate::api::*;
use crate::exec::Inner;
use crate::values::{EvalCtx, Value, eval};
use crate::write::Planned;

#[derive(Clone, Debug)]
enum Check {
    NotExists,
    Exists,
    Columns(Vec<(ColumnId, ast::Operator, Option<Bytes>, CqlType)>),
}

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::Invalid(m.into())
}

pub async fn run_conditional(
    inner: &Rc<Inner>,
    table: &Arc<TableSchema>,
    st: &ast::Statement,
    ctx: &EvalCtx<'_>,
    planned: Vec<Planned>,
) -> Result<QueryResult, QueryError> {
    let conds = match st {
        ast::Statement::Insert(_) => Some(&ast::Conditions::Exists),
        ast::Statement::Update(s) => s.conditions.as_ref(),
        ast::Statement::Delete(s) => s.conditions.as_ref(),
        _ => None,
    };
    let check = match (st, conds) {
        (ast::Statement::Insert(_), _) => Check::NotExists,
        (_, Some(ast::Conditions::Exists)) => Check::Exists,
        (_, Some(ast::Conditions::Columns(cs))) => {
            let mut out = Vec::new();
            for c in cs {
                let ast::ConditionTarget::Column(col) = &c.target else {
                    return Err(invalid(
                        "Conditions on collection elements and UDT fields are not supported by Amphora yet",
                    ));
                };
                let (id, def) = table
                    .column(&col.name)
                    .ok_or_else(|| invalid(format!("Undefined column name {}", col.name)))?;
                let ast::RelationValue::Single(e) = &c.value else {
                    return Err(invalid("IN conditions are not supported by Amphora yet"));
                };
                let v = match eval(e, &def.ty, ctx, &def.name)? {
                    Value::Set(b) => Some(b),
                    _ => None,
                };
                out.push((id, c.op, v, def.ty.clone()));
            }
            Check::Columns(out)
        }
        _ => {
            return Err(QueryError::Server(
                "conditional write without conditions".into(),
            ));
        }
    };
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
    let clustering = m.update.rows.first().map(|r| r.clustering.clone());
    let info = &inner.shared.info;
    let shard = shard_of(m.key.token, info.nr_shards, info.ignore_msb);
    let table_id = table.id;
    let has_clustering = !table.clustering_key.is_empty();
    // Columns shown with [applied] = false: the whole row for IF NOT EXISTS / IF EXISTS,
    // the condition columns otherwise (Cassandra's layout).
    let shown: Vec<ColumnId> = match &check {
        Check::Columns(cs) => {
            let mut v: Vec<ColumnId> = Vec::new();
            for (id, ..) in cs {
                if !v.contains(id) {
                    v.push(*id);
                }
            }
            v
        }
        _ => crate::select::wildcard_columns(table),
    };
    // Index entries and view updates of the write, applied once it is known to apply.
    let schema = inner.schema();
    let derived = if schema.has_derived() {
        let pending = crate::view::prepare(inner, &schema, &[&m]).await?;
        Some((crate::index::derived_mutations(&schema, &[&m]), pending))
    } else {
        None
    };
    let shown_for_shard = shown.clone();
    let table_for_shard = table.clone();
    let (applied, current) = inner
        .shared
        .shards
        .submit_to(shard, move || async move {
            let db = amphora_replica::local().map_err(|e| e.to_string())?;
            let mut cmd = ReadCommand::new(
                table_id,
                PartitionRange::Single(m.key.clone()),
                (crate::exec::now_micros() / 1_000_000) as i32,
            );
            if let (true, Some(c)) = (has_clustering, &clustering) {
                cmd.slices = vec![ClusteringSlice {
                    start: ClusteringBound::inclusive(c.0.clone()),
                    end: ClusteringBound::inclusive(c.0.clone()),
                }];
            }
            let cur = db.read(&cmd).map_err(|e| e.to_string())?;
            let part = cur.partitions.first();
            let row = part.and_then(|p| p.rows.first());
            let exists = row.is_some()
                || (clustering.is_none() && part.is_some_and(|p| p.static_row.is_some()));
            let ok = match &check {
                Check::NotExists => !exists,
                Check::Exists => exists,
                Check::Columns(cs) => cs.iter().all(|(id, op, want, ty)| {
                    let have = row
                        .and_then(|r| r.cell(*id))
                        .or_else(|| {
                            part.and_then(|p| p.static_row.as_ref())
                                .and_then(|r| r.cell(*id))
                        })
                        .and_then(|d| match d {
                            ColumnData::Simple(c) => Some(c.value.clone()),
                            _ => None,
                        });
                    compare(*op, have.as_ref(), want.as_ref(), ty)
                }),
            };
            let current: Option<Vec<Option<Bytes>>> = match (ok, part, row) {
                (false, Some(p), Some(r)) => Some(
                    shown_for_shard
                        .iter()
                        .map(|id| crate::select::column_value(&table_for_shard, *id, p, r, false))
                        .collect(),
                ),
                _ => None,
            };
            if ok {
                let ack = db.storage().apply(&m).map_err(|e| e.to_string())?;
                ack.await.map_err(|e| e.to_string())?;
            }
            Ok::<(bool, Option<Vec<Option<Bytes>>>), String>((ok, current))
        })
        .await
        .map_err(|e| QueryError::Server(e.to_string()))?
        .map_err(QueryError::Server)?;
    if applied && let Some((entries, pending)) = derived {
        crate::write::apply_planned(inner, entries.into_iter().map(Planned::Mutation).collect())
            .await?;
        crate::view::finish(inner, &schema, pending).await?;
    }
    let mut columns = vec![ResultColumn {
        keyspace: table.keyspace.clone(),
        table: table.name.clone(),
        name: "[applied]".into(),
        ty: CqlType::Boolean,
    }];
    let mut cells = vec![Some(Bytes::from_static(if applied { &[1] } else { &[0] }))];
    if let Some(values) = current {
        for (id, v) in shown.iter().zip(values) {
            let def = &table.columns[*id as usize];
            columns.push(ResultColumn {
                keyspace: table.keyspace.clone(),
                table: table.name.clone(),
                name: def.name.clone(),
                ty: def.ty.clone(),
            });
            cells.push(v);
        }
    }
    Ok(QueryResult::Rows(ResultRows::single_row(
        Arc::new(columns),
        cells,
    )))
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
