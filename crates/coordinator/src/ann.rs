//! Vector search: `SELECT … ORDER BY v ANN OF [..] LIMIT k` (Cassandra 5.0 SAI).
//!
//! Amphora answers it exactly: every candidate row (the restricted partitions, or the whole
//! table) is scored with the similarity function of the SAI index on `v`, and a bounded
//! heap keeps the k best. On small data sets this equals Cassandra's approximate (graph)
//! answer. The answer is one page: like Cassandra, a Top-K query needs a LIMIT that the
//! page size does not cut.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::ops::Bound;
use std::rc::Rc;

use amphora_cql as ast;
use amphora_storage::{PartitionData, PartitionRange, ReadCommand};
use amphora_types::CqlType;
use amphora_types::schema::TableSchema;
use amphora_types::token::shard_of;
use bytes::Bytes;

use crate::api::*;
use crate::exec::Inner;
use crate::restrict;
use crate::schema::{IndexTarget, Schema};
use crate::select::SelectPlan;
use crate::values::{EvalCtx, Value, eval};

/// Cassandra's `SelectStatement` bound on the LIMIT of an ANN query.
pub const ANN_LIMIT_MAX: u32 = 1000;

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::Invalid(m.into())
}

/// The similarity function of a vector index (`similarity_function` option).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Similarity {
    Cosine,
    Euclidean,
    DotProduct,
}

impl Similarity {
    /// From the index option; COSINE when absent.
    pub fn of_option(o: Option<&str>) -> Similarity {
        match o.map(|s| s.to_ascii_uppercase()).as_deref() {
            Some("EUCLIDEAN") => Similarity::Euclidean,
            Some("DOT_PRODUCT") => Similarity::DotProduct,
            _ => Similarity::Cosine,
        }
    }

    /// The score Cassandra's `similarity_*` functions return (higher = more similar).
    pub fn score(self, a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        match self {
            Similarity::Cosine => {
                // Lucene's cosine: the norms' product and its root in double precision.
                let na: f32 = a.iter().map(|x| x * x).sum();
                let nb: f32 = b.iter().map(|x| x * x).sum();
                let cos = (f64::from(dot) / (f64::from(na) * f64::from(nb)).sqrt()) as f32;
                (1.0 + cos) / 2.0
            }
            Similarity::Euclidean => {
                let d2: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
                1.0 / (1.0 + d2)
            }
            Similarity::DotProduct => (1.0 + dot) / 2.0,
        }
    }
}

/// A serialized `vector<float, n>` as floats (None when its length is not `dim` floats).
fn floats(b: &[u8], dim: usize) -> Option<Vec<f32>> {
    if b.len() != dim * 4 {
        return None;
    }
    Some(
        b.chunks_exact(4)
            .map(|c| f32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// A checked ANN ordering: the vector column, the query vector, the index's similarity
/// function and k.
#[derive(Debug)]
pub struct AnnQuery {
    pub column: amphora_types::schema::ColumnId,
    pub query: Vec<f32>,
    pub similarity: Similarity,
    pub k: u32,
}

/// Checks an ANN SELECT the way Cassandra 5.0 does, in its order: the term against the
/// column's type, no other ordering, an SAI index on the column, every other restricted
/// column indexed, no aggregation, a LIMIT within the page size and at most 1000.
pub fn check(
    schema: &Schema,
    table: &TableSchema,
    s: &ast::SelectStatement,
    r: &restrict::Restrictions,
    aggregate: bool,
    page_size: Option<i32>,
    ctx: &EvalCtx<'_>,
) -> Result<AnnQuery, QueryError> {
    let limit = crate::select::limit_of(s, ctx)?;
    let Some(o) = s.order_by.iter().find(|o| o.ann_of.is_some()) else {
        return Err(invalid("ANN ordering expected"));
    };
    let Some(term) = &o.ann_of else {
        return Err(invalid("ANN ordering expected"));
    };
    let (id, def) = table
        .column(&o.column.name)
        .ok_or_else(|| invalid(format!("Undefined column name {}", o.column.name)))?;
    let CqlType::Vector { elem, dim } = &def.ty else {
        return Err(invalid(format!(
            "Unexpected receiver type '{}'; only list and vector are expected",
            def.ty
        )));
    };
    let bytes = match eval(term, &def.ty, ctx, &def.name)? {
        Value::Set(b) => b,
        Value::Null | Value::Unset => {
            return Err(invalid(format!(
                "Unsupported null value for ANN ordering of column {}",
                def.name
            )));
        }
    };
    if s.order_by.len() > 1 {
        return Err(invalid("ANN ordering does not support any other ordering"));
    }
    let ks = schema.keyspace(&table.keyspace);
    let index = ks.and_then(|ks| {
        crate::index::indexes_of(ks, table.id).find(|i| {
            i.column == id
                && i.target == IndexTarget::Simple
                && i.class.as_deref().is_some_and(crate::index::is_sai)
        })
    });
    let Some(index) = index else {
        return Err(invalid(
            "ANN ordering by vector requires the column to be indexed",
        ));
    };
    if **elem != CqlType::Float {
        return Err(invalid(
            "ANN ordering is only supported on float vector indexes",
        ));
    }
    let indexed =
        |col| ks.is_some_and(|ks| crate::index::indexes_of(ks, table.id).any(|i| i.column == col));
    if r.filters.iter().any(|f| !indexed(f.column)) {
        return Err(invalid(
            "ANN ordering by vector requires all restricted column(s) to be indexed",
        ));
    }
    if aggregate || !s.group_by.is_empty() {
        return Err(invalid("Top-K queries can not be run with aggregation"));
    }
    let page = page_size.filter(|p| *p > 0).map(|p| p as u32);
    let k = match limit {
        Some(l) if page.is_none_or(|p| l <= p) => l,
        _ => {
            return Err(invalid(
                "Top-K queries must have a limit specified and the limit must be less than the query page size",
            ));
        }
    };
    if k > ANN_LIMIT_MAX {
        return Err(invalid(format!(
            "Use of ANN OF in an ORDER BY clause requires a LIMIT that is not greater than {ANN_LIMIT_MAX}. LIMIT was {k}"
        )));
    }
    let query = floats(&bytes, *dim as usize)
        .ok_or_else(|| invalid(format!("Invalid vector literal for {}", def.name)))?;
    Ok(AnnQuery {
        column: id,
        query,
        similarity: Similarity::of_option(
            index.options.get("similarity_function").map(String::as_str),
        ),
        k,
    })
}

/// One candidate in the bounded heap: ordered so that the heap's top is the worst kept.
struct Scored {
    score: f32,
    /// Scan position (partition, row): ties keep the earlier row.
    at: (usize, usize),
}

impl PartialEq for Scored {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Scored {}
impl PartialOrd for Scored {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scored {
    /// Greater = worse: lower score, then later position.
    fn cmp(&self, o: &Self) -> Ordering {
        o.score
            .total_cmp(&self.score)
            .then_with(|| self.at.cmp(&o.at))
    }
}

/// The k best rows of `partitions` (passing `keep`) by similarity to the query, best
/// first, as (partition index, row index). Rows without a vector are not candidates.
pub fn top_k(
    table: &TableSchema,
    q: &AnnQuery,
    partitions: &[PartitionData],
    mut keep: impl FnMut(&PartitionData, &amphora_types::data::Row) -> bool,
) -> Vec<(usize, usize)> {
    let dim = q.query.len();
    let mut heap: BinaryHeap<Scored> = BinaryHeap::with_capacity(q.k as usize + 1);
    if q.k == 0 {
        return Vec::new();
    }
    for (pi, p) in partitions.iter().enumerate() {
        for (ri, row) in p.rows.iter().enumerate() {
            let Some(v) = crate::selector::column_value(table, q.column, p, row, false) else {
                continue;
            };
            let Some(v) = floats(&v, dim) else { continue };
            if !keep(p, row) {
                continue;
            }
            let s = Scored {
                score: q.similarity.score(&v, &q.query),
                at: (pi, ri),
            };
            if heap.len() < q.k as usize {
                heap.push(s);
            } else if heap.peek().is_some_and(|worst| s < *worst) {
                heap.pop();
                heap.push(s);
            }
        }
    }
    heap.into_sorted_vec().into_iter().map(|s| s.at).collect()
}

/// Runs an ANN SELECT (the `select.rs` hook for an `ORDER BY … ANN OF`).
pub async fn select(
    inner: &Rc<Inner>,
    s: &ast::SelectStatement,
    ctx: &EvalCtx<'_>,
    plan: &SelectPlan,
    opts: &QueryOptions,
) -> Result<QueryResult, QueryError> {
    let schema = inner.schema();
    let table = &plan.table;
    let items = &plan.items;
    let r = restrict::analyze(table, &s.where_clause, ctx)?;
    let q = check(
        &schema,
        table,
        s,
        &r,
        crate::selector::is_aggregate(items),
        opts.page_size,
        ctx,
    )?;
    let now_s = (ctx.now_micros / 1_000_000) as i32;
    let base = ReadCommand {
        table: table.id,
        partitions: PartitionRange::all(),
        slices: r.slices(table),
        columns: None,
        reversed: false,
        row_limit: 0,
        per_partition_limit: 0,
        partition_limit: 0,
        start_after: None,
        now_seconds: now_s,
    };
    let info = inner.shared.info.clone();
    let mut partitions: Vec<PartitionData> = Vec::new();
    if let Some(keys) = r.partition_keys() {
        if keys.iter().any(|k| k.key.is_empty()) {
            return Err(invalid("Key may not be empty"));
        }
        for key in keys {
            if !crate::index::token_ok(&r, key.token) {
                continue;
            }
            let mut cmd = base.clone();
            cmd.partitions = PartitionRange::Single(key.clone());
            let shard = shard_of(key.token, info.nr_shards, info.ignore_msb);
            partitions.extend(crate::select::read_on(inner, shard, cmd).await?.partitions);
        }
    } else {
        let mut cmd = base;
        let bound = |b: Option<Bound<i64>>| match b {
            Some(Bound::Included(t)) => Bound::Included((t, None)),
            Some(Bound::Excluded(t)) => Bound::Excluded((t, None)),
            _ => Bound::Unbounded,
        };
        cmd.partitions = PartitionRange::TokenRange {
            start: bound(r.token_start),
            end: bound(r.token_end),
        };
        amphora_trace::event(|| "ANN: scanning every shard".into());
        let results = inner
            .shared
            .shards
            .submit_to_all(move |_shard| {
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
                tracing::warn!(error = %e, "ANN range read failed");
                QueryError::ReadTimeout {
                    consistency: 1,
                    received: 0,
                    block_for: 1,
                    data_present: false,
                }
            })?;
            partitions.extend(res.partitions);
        }
        partitions.sort_by(|a, b| a.key.cmp(&b.key));
    }
    let best = top_k(table, &q, &partitions, |p, row| {
        r.filters
            .iter()
            .all(|f| crate::select::filter_row(table, f, p, row, now_s))
            && r.tuple_filter
                .as_ref()
                .is_none_or(|tf| tf.holds(&row.clustering))
    });
    let mut cells: Vec<Option<Bytes>> = Vec::with_capacity(best.len() * items.len());
    for (pi, ri) in &best {
        let p = &partitions[*pi];
        let row = &p.rows[*ri];
        for it in items.iter() {
            cells.push(crate::selector::eval_row_checked(
                table, it, p, row, now_s, false,
            )?);
        }
    }
    let (columns, cells) = if s.json {
        crate::select::json_rows(table, items, cells, best.len())
    } else {
        (plan.columns.clone(), cells)
    };
    Ok(QueryResult::Rows(ResultRows {
        columns,
        cells,
        row_count: best.len(),
        paging_state: None,
        no_metadata: opts.skip_metadata,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_match_cassandra_similarity_functions() {
        let a = [1.0f32, 0.0, 0.0];
        let b = [0.0f32, 1.0, 0.0];
        assert_eq!(Similarity::Cosine.score(&a, &a), 1.0);
        assert_eq!(Similarity::Cosine.score(&a, &b), 0.5);
        assert_eq!(Similarity::Euclidean.score(&a, &b), 1.0 / 3.0);
        assert_eq!(Similarity::DotProduct.score(&a, &b), 0.5);
        assert_eq!(Similarity::of_option(None), Similarity::Cosine);
        assert_eq!(
            Similarity::of_option(Some("dot_product")),
            Similarity::DotProduct
        );
    }

    #[test]
    fn heap_keeps_the_k_best_best_first() {
        let mut h = BinaryHeap::new();
        for (i, sc) in [0.2f32, 0.9, 0.5, 0.7, 0.1].iter().enumerate() {
            let s = Scored {
                score: *sc,
                at: (i, 0),
            };
            if h.len() < 3 {
                h.push(s);
            } else if h.peek().is_some_and(|w| s < *w) {
                h.pop();
                h.push(s);
            }
        }
        let order: Vec<usize> = h.into_sorted_vec().into_iter().map(|s| s.at.0).collect();
        assert_eq!(order, vec![1, 3, 2]);
    }
}
