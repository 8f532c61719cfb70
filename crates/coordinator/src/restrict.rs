//! WHERE-clause analysis: which partitions, which clustering slices, what is left to
//! filter row by row.

use std::ops::Bound;

use amphora_cql as ast;
use amphora_types::CqlType;
use amphora_types::data::{Clustering, ClusteringBound, ClusteringSlice, PartitionKey};
use amphora_types::schema::{ClusteringOrder, ColumnId, ColumnKind, TableSchema};
use amphora_types::token::serialize_composite_key;
use bytes::Bytes;

use crate::api::QueryError;
use crate::values::{EvalCtx, Value, eval, eval_set};

/// A restriction evaluated on each row after the read.
#[derive(Clone, Debug)]
pub struct Filter {
    pub column: ColumnId,
    pub op: ast::Operator,
    pub values: Vec<Bytes>,
    /// For `m[k] = v`: the map key.
    pub element_key: Option<Bytes>,
    /// Text equality ignoring case (an SAI index with `case_sensitive: false` serves it).
    pub fold_case: bool,
}

/// Whether `ordering` (a value compared with the restriction's operand) satisfies `op`
/// for the comparison operators; other operators are not comparisons and give false.
pub fn comparison_holds(op: ast::Operator, ordering: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::*;
    match op {
        ast::Operator::Eq => ordering == Equal,
        ast::Operator::Neq => ordering != Equal,
        ast::Operator::Lt => ordering == Less,
        ast::Operator::Lte => ordering != Greater,
        ast::Operator::Gt => ordering == Greater,
        ast::Operator::Gte => ordering != Less,
        _ => false,
    }
}

#[derive(Debug, Default)]
pub struct Restrictions {
    /// Every partition key column restricted by = or IN: the candidate values per column.
    pub pk_values: Option<Vec<Vec<Bytes>>>,
    pub token_start: Option<Bound<i64>>,
    pub token_end: Option<Bound<i64>>,
    /// Values per leading clustering column restricted by = / IN.
    pub ck_prefix: Vec<Vec<Bytes>>,
    /// Lower/upper bound on the clustering prefix that follows `ck_prefix` (in value order:
    /// `(values, inclusive)`), and the order of the first column they bound.
    pub ck_lower: Option<(Vec<Bytes>, bool)>,
    pub ck_upper: Option<(Vec<Bytes>, bool)>,
    pub ck_slice_order: ClusteringOrder,
    pub filters: Vec<Filter>,
    /// Restrictions that need ALLOW FILTERING.
    pub needs_filtering: bool,
    /// `(c1, c2) IN ((…), (…))`: the first column, the width and the value tuples; the
    /// columns it covers hold empty value lists in `ck_prefix`.
    pub ck_tuples: Option<(usize, usize, Vec<Vec<Bytes>>)>,
    /// A multi-column slice over clustering columns of mixed ASC/DESC order: read by its
    /// first column, then each row is compared with the tuple bounds by value.
    pub tuple_filter: Option<TupleFilter>,
}

/// Tuple bounds checked row by row: `(first column, types, lower, upper)`.
#[derive(Clone, Debug)]
pub struct TupleFilter {
    pub first: usize,
    pub types: Vec<CqlType>,
    pub lower: Option<(Vec<Bytes>, bool)>,
    pub upper: Option<(Vec<Bytes>, bool)>,
}

impl TupleFilter {
    /// Whether a clustering lies within the bounds (value order, each column's type).
    pub fn holds(&self, c: &Clustering) -> bool {
        let cmp = |b: &[Bytes]| -> std::cmp::Ordering {
            for (i, (ty, v)) in self.types.iter().zip(b).enumerate() {
                let Some(x) = c.0.get(self.first + i) else {
                    return std::cmp::Ordering::Less;
                };
                let o = ty.compare(x, v);
                if o != std::cmp::Ordering::Equal {
                    return o;
                }
            }
            std::cmp::Ordering::Equal
        };
        let lo = self.lower.as_ref().is_none_or(|(b, inc)| {
            let o = cmp(b);
            o.is_gt() || (*inc && o.is_eq())
        });
        let hi = self.upper.as_ref().is_none_or(|(b, inc)| {
            let o = cmp(b);
            o.is_lt() || (*inc && o.is_eq())
        });
        lo && hi
    }
}

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::Invalid(m.into())
}

fn column<'a>(
    t: &'a TableSchema,
    name: &str,
) -> Result<(ColumnId, &'a amphora_types::schema::ColumnDef), QueryError> {
    t.column(name)
        .ok_or_else(|| invalid(format!("Undefined column name {name}")))
}

fn list_values(
    v: &ast::RelationValue,
    ty: &CqlType,
    ctx: &EvalCtx<'_>,
    name: &str,
) -> Result<Vec<Bytes>, QueryError> {
    match v {
        ast::RelationValue::List(items) => {
            let mut out = Vec::new();
            for i in items {
                match eval(i, ty, ctx, name)? {
                    Value::Set(b) => out.push(b),
                    Value::Null => {
                        return Err(invalid(format!(
                            "Invalid null value in condition for column {name}"
                        )));
                    }
                    Value::Unset => {}
                }
            }
            Ok(out)
        }
        ast::RelationValue::Single(e) => {
            let list_ty = CqlType::List {
                elem: Box::new(ty.clone()),
                frozen: true,
            };
            match eval(e, &list_ty, ctx, name)? {
                Value::Set(b) => Ok(amphora_types::cql_type::split_collection(&b, 1)
                    .map_err(|e| invalid(format!("Invalid IN list for {name}: {e}")))?
                    .into_iter()
                    .flatten()
                    .map(Bytes::copy_from_slice)
                    .collect()),
                _ => Err(invalid(format!(
                    "Invalid null value for IN restriction on {name}"
                ))),
            }
        }
        _ => Err(invalid(format!("Invalid IN restriction on {name}"))),
    }
}

fn token_value(e: &ast::Expr, t: &TableSchema, ctx: &EvalCtx<'_>) -> Result<i64, QueryError> {
    match e {
        ast::Expr::Function { name, args } if name.name.name.eq_ignore_ascii_case("token") => {
            if args.len() != t.partition_key.len() {
                return Err(invalid("Invalid number of arguments in token() function"));
            }
            let mut parts = Vec::with_capacity(args.len());
            for (a, id) in args.iter().zip(&t.partition_key) {
                let c = &t.columns[*id as usize];
                parts.push(eval_set(a, &c.ty, ctx, &c.name)?);
            }
            let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
            Ok(amphora_types::token::murmur3_token(
                &serialize_composite_key(&refs),
            ))
        }
        other => {
            let b = eval_set(other, &CqlType::Bigint, ctx, "partition key token")?;
            let arr: [u8; 8] = b[..]
                .try_into()
                .map_err(|_| invalid("Invalid token value"))?;
            Ok(i64::from_be_bytes(arr))
        }
    }
}

/// A bound on one clustering column: (value, inclusive).
type ColumnBound = Option<(Bytes, bool)>;
/// A bound on a clustering prefix (multi-column relation): (values, inclusive).
type PrefixBound = Option<(Vec<Bytes>, bool)>;

pub fn analyze(
    t: &TableSchema,
    rels: &[ast::Relation],
    ctx: &EvalCtx<'_>,
) -> Result<Restrictions, QueryError> {
    let mut r = Restrictions::default();
    let mut pk: Vec<Option<Vec<Bytes>>> = vec![None; t.partition_key.len()];
    let mut ck_eq: Vec<Option<Vec<Bytes>>> = vec![None; t.clustering_key.len()];
    // Single-column clustering slices: position → (lower, upper).
    let mut ck_slices: Vec<(usize, ColumnBound, ColumnBound)> = Vec::new();
    let mut multi: Option<(usize, PrefixBound, PrefixBound)> = None;
    for rel in rels {
        match &rel.target {
            ast::RelationTarget::Column(c) => {
                let (id, def) = column(t, &c.name)?;
                let name = def.name.clone();
                // A key column restricted twice: Cassandra's error depends on the first
                // restriction (= or IN refuse any other; a slice refuses = and IN).
                if matches!(def.kind, ColumnKind::PartitionKey | ColumnKind::Clustering) {
                    let first = rels.iter().find(
                        |x| matches!(&x.target, ast::RelationTarget::Column(o) if o.name == c.name),
                    );
                    if let Some(first) = first.filter(|f| !std::ptr::eq(*f, rel)) {
                        let slice = |op: ast::Operator| {
                            matches!(
                                op,
                                ast::Operator::Lt
                                    | ast::Operator::Lte
                                    | ast::Operator::Gt
                                    | ast::Operator::Gte
                            )
                        };
                        match first.op {
                            ast::Operator::Eq => {
                                return Err(invalid(format!(
                                    "{name} cannot be restricted by more than one relation if it includes an Equal"
                                )));
                            }
                            ast::Operator::In => {
                                return Err(invalid(format!(
                                    "{name} cannot be restricted by more than one relation if it includes a IN"
                                )));
                            }
                            op if slice(op) && !slice(rel.op) => {
                                return Err(invalid(format!(
                                    "Column \"{name}\" cannot be restricted by both an equality and an inequality relation"
                                )));
                            }
                            _ => {}
                        }
                    }
                }
                match (def.kind, rel.op) {
                    (ColumnKind::PartitionKey, ast::Operator::Eq) => {
                        if let ast::RelationValue::Single(e) = &rel.value {
                            pk[def.position as usize] =
                                Some(vec![eval_set(e, &def.ty, ctx, &name)?]);
                        }
                    }
                    (ColumnKind::PartitionKey, ast::Operator::In) => {
                        pk[def.position as usize] =
                            Some(list_values(&rel.value, &def.ty, ctx, &name)?);
                    }
                    (ColumnKind::Clustering, ast::Operator::Eq) => {
                        if let ast::RelationValue::Single(e) = &rel.value {
                            ck_eq[def.position as usize] =
                                Some(vec![eval_set(e, &def.ty, ctx, &name)?]);
                        }
                    }
                    (ColumnKind::Clustering, ast::Operator::In) => {
                        let mut vals = list_values(&rel.value, &def.ty, ctx, &name)?;
                        vals.sort_by(|a, b| def.ty.compare(a, b));
                        vals.dedup();
                        ck_eq[def.position as usize] = Some(vals);
                    }
                    (
                        ColumnKind::Clustering,
                        op @ (ast::Operator::Lt
                        | ast::Operator::Lte
                        | ast::Operator::Gt
                        | ast::Operator::Gte),
                    ) => {
                        let ast::RelationValue::Single(e) = &rel.value else {
                            continue;
                        };
                        let v = eval_set(e, &def.ty, ctx, &name)?;
                        let pos = def.position as usize;
                        let entry = match ck_slices.iter_mut().find(|s| s.0 == pos) {
                            Some(s) => s,
                            None => {
                                ck_slices.push((pos, None, None));
                                let last = ck_slices.len() - 1;
                                &mut ck_slices[last]
                            }
                        };
                        let lower = matches!(op, ast::Operator::Gt | ast::Operator::Gte);
                        if (lower && entry.1.is_some()) || (!lower && entry.2.is_some()) {
                            return Err(invalid(format!(
                                "More than one restriction was found for the {} bound on {name}",
                                if lower { "start" } else { "end" }
                            )));
                        }
                        match op {
                            ast::Operator::Gt => entry.1 = Some((v, false)),
                            ast::Operator::Gte => entry.1 = Some((v, true)),
                            ast::Operator::Lt => entry.2 = Some((v, false)),
                            _ => entry.2 = Some((v, true)),
                        }
                    }
                    (_, ast::Operator::IsNotNull) => {}
                    (_, ast::Operator::Neq) => {
                        let shown = match &rel.value {
                            ast::RelationValue::Single(e) => e.to_string(),
                            _ => String::new(),
                        };
                        return Err(invalid(format!(
                            "Unsupported \"!=\" relation: {name} != {shown}"
                        )));
                    }
                    (
                        _,
                        ast::Operator::Eq
                        | ast::Operator::Lt
                        | ast::Operator::Lte
                        | ast::Operator::Gt
                        | ast::Operator::Gte
                        | ast::Operator::In,
                    ) if def.ty.is_multi_cell()
                        && matches!(
                            def.ty,
                            CqlType::List { .. } | CqlType::Set { .. } | CqlType::Map { .. }
                        ) =>
                    {
                        return Err(invalid(format!(
                            "Collection column '{name}' ({}) cannot be restricted by a '{}' relation",
                            def.ty,
                            rel.op.as_str()
                        )));
                    }
                    (_, op) => {
                        let (values, elem_ty) = match op {
                            ast::Operator::In | ast::Operator::NotIn => {
                                (list_values(&rel.value, &def.ty, ctx, &name)?, None)
                            }
                            _ => {
                                let ty = match (op, &def.ty) {
                                    (
                                        ast::Operator::Contains,
                                        CqlType::List { elem, .. } | CqlType::Set { elem, .. },
                                    ) => (**elem).clone(),
                                    (ast::Operator::Contains, CqlType::Map { value, .. }) => {
                                        (**value).clone()
                                    }
                                    (ast::Operator::ContainsKey, CqlType::Map { key, .. }) => {
                                        (**key).clone()
                                    }
                                    (ast::Operator::Contains | ast::Operator::ContainsKey, _) => {
                                        return Err(invalid(format!(
                                            "Cannot use {} on non-collection column {name}",
                                            op.as_str()
                                        )));
                                    }
                                    _ => def.ty.clone(),
                                };
                                let ast::RelationValue::Single(e) = &rel.value else {
                                    return Err(invalid(format!(
                                        "Unsupported restriction on {name}"
                                    )));
                                };
                                (vec![eval_set(e, &ty, ctx, &name)?], Some(ty))
                            }
                        };
                        let _ = elem_ty;
                        r.filters.push(Filter {
                            column: id,
                            op,
                            values,
                            element_key: None,
                            fold_case: false,
                        });
                        r.needs_filtering = true;
                    }
                }
            }
            ast::RelationTarget::Token(cols) => {
                for c in cols {
                    let (_, d) = column(t, &c.name)?;
                    if d.kind != ColumnKind::PartitionKey {
                        return Err(invalid(
                            "The token() function must contains only partition key components",
                        ));
                    }
                }
                if cols.len() != t.partition_key.len() {
                    return Err(invalid(
                        "The token() function must be applied to all partition key components or none of them",
                    ));
                }
                let in_order = cols
                    .iter()
                    .zip(&t.partition_key)
                    .all(|(c, id)| t.columns[*id as usize].name == c.name);
                if !in_order {
                    return Err(invalid(format!(
                        "The token function arguments must be in the partition key order: {}",
                        t.partition_key
                            .iter()
                            .map(|id| t.columns[*id as usize].name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                let ast::RelationValue::Single(e) = &rel.value else {
                    return Err(invalid("Invalid token restriction"));
                };
                let v = token_value(e, t, ctx)?;
                match rel.op {
                    ast::Operator::Gt => r.token_start = Some(Bound::Excluded(v)),
                    ast::Operator::Gte => r.token_start = Some(Bound::Included(v)),
                    ast::Operator::Lt => r.token_end = Some(Bound::Excluded(v)),
                    ast::Operator::Lte => r.token_end = Some(Bound::Included(v)),
                    ast::Operator::Eq => {
                        r.token_start = Some(Bound::Included(v));
                        r.token_end = Some(Bound::Included(v));
                    }
                    op => {
                        return Err(invalid(format!(
                            "{} is not supported on token()",
                            op.as_str()
                        )));
                    }
                }
            }
            ast::RelationTarget::Tuple(cols) => {
                let defs = cols
                    .iter()
                    .map(|c| column(t, &c.name))
                    .collect::<Result<Vec<_>, _>>()?;
                let first = defs.first().map(|d| d.1.position as usize).unwrap_or(0);
                for (i, (_, d)) in defs.iter().enumerate() {
                    if d.kind != ColumnKind::Clustering || d.position as usize != first + i {
                        return Err(invalid(
                            "Multi-column relations can only be applied to clustering columns, in clustering order",
                        ));
                    }
                }
                let types: Vec<CqlType> = defs.iter().map(|d| d.1.ty.clone()).collect();
                let tuple_ty = CqlType::Tuple(types.clone());
                let n = types.len();
                let to_vals = |e: &ast::Expr| -> Result<Vec<Bytes>, QueryError> {
                    match e {
                        ast::Expr::Tuple(items) if items.len() != n => Err(invalid(format!(
                            "Expected {n} elements in value tuple, but got {}: {e}",
                            items.len()
                        ))),
                        ast::Expr::Tuple(items) => items
                            .iter()
                            .zip(&types)
                            .map(|(i, ty)| eval_set(i, ty, ctx, "tuple"))
                            .collect(),
                        ast::Expr::Literal(_) if n != 1 => Err(invalid(format!(
                            "Expected {n} elements in value tuple, but got 1: ({e})"
                        ))),
                        other => {
                            let b = eval_set(other, &tuple_ty, ctx, "tuple")?;
                            Ok(amphora_types::cql_type::split_tuple(&b)
                                .map_err(|e| invalid(format!("Invalid tuple: {e}")))?
                                .into_iter()
                                .map(|x| Bytes::copy_from_slice(x.unwrap_or_default()))
                                .collect())
                        }
                    }
                };
                match (rel.op, &rel.value) {
                    (ast::Operator::Eq, ast::RelationValue::Single(e)) => {
                        for (i, v) in to_vals(e)?.into_iter().enumerate() {
                            ck_eq[first + i] = Some(vec![v]);
                        }
                    }
                    (
                        op @ (ast::Operator::Gt
                        | ast::Operator::Gte
                        | ast::Operator::Lt
                        | ast::Operator::Lte),
                        ast::RelationValue::Single(e),
                    ) => {
                        let v = to_vals(e)?;
                        let orders: Vec<ClusteringOrder> = defs.iter().map(|d| d.1.order).collect();
                        if orders.iter().any(|o| *o != orders[0]) {
                            // Mixed ASC/DESC: no single clustering slice; read by the first
                            // column's bound and compare whole tuples per row.
                            let tf = r.tuple_filter.get_or_insert(TupleFilter {
                                first,
                                types: types.clone(),
                                lower: None,
                                upper: None,
                            });
                            let first_only = (vec![v[0].clone()], true);
                            let m = multi.get_or_insert((first, None, None));
                            match op {
                                ast::Operator::Gt | ast::Operator::Gte => {
                                    tf.lower = Some((v, op == ast::Operator::Gte));
                                    m.1 = Some(first_only);
                                }
                                _ => {
                                    tf.upper = Some((v, op == ast::Operator::Lte));
                                    m.2 = Some(first_only);
                                }
                            }
                            continue;
                        }
                        let m = multi.get_or_insert((first, None, None));
                        match op {
                            ast::Operator::Gt => m.1 = Some((v, false)),
                            ast::Operator::Gte => m.1 = Some((v, true)),
                            ast::Operator::Lt => m.2 = Some((v, false)),
                            _ => m.2 = Some((v, true)),
                        }
                    }
                    (ast::Operator::In, value) => {
                        let mut tuples: Vec<Vec<Bytes>> = match value {
                            ast::RelationValue::List(items) => {
                                items.iter().map(&to_vals).collect::<Result<_, _>>()?
                            }
                            ast::RelationValue::Single(e) => {
                                let list_ty = CqlType::List {
                                    elem: Box::new(tuple_ty.clone()),
                                    frozen: true,
                                };
                                let b = eval_set(e, &list_ty, ctx, "tuple")?;
                                let mut out = Vec::new();
                                for item in amphora_types::cql_type::split_collection(&b, 1)
                                    .map_err(|e| invalid(format!("Invalid IN list: {e}")))?
                                    .into_iter()
                                    .flatten()
                                {
                                    out.push(
                                        amphora_types::cql_type::split_tuple(item)
                                            .map_err(|e| invalid(format!("Invalid tuple: {e}")))?
                                            .into_iter()
                                            .map(|x| Bytes::copy_from_slice(x.unwrap_or_default()))
                                            .collect(),
                                    );
                                }
                                out
                            }
                            _ => return Err(invalid("Unsupported multi-column restriction")),
                        };
                        tuples.sort();
                        tuples.dedup();
                        for slot in ck_eq.iter_mut().skip(first).take(n) {
                            *slot = Some(Vec::new());
                        }
                        r.ck_tuples = Some((first, n, tuples));
                    }
                    _ => return Err(invalid("Unsupported multi-column restriction")),
                }
            }
            ast::RelationTarget::Element { column: c, key } => {
                let (id, def) = column(t, &c.name)?;
                let CqlType::Map {
                    key: kt, value: vt, ..
                } = &def.ty
                else {
                    return Err(invalid(format!(
                        "Invalid element access on non-map column {}",
                        def.name
                    )));
                };
                if rel.op != ast::Operator::Eq {
                    return Err(invalid(format!(
                        "Map-entry predicates on {} only support the = operator",
                        def.name
                    )));
                }
                let ast::RelationValue::Single(e) = &rel.value else {
                    return Err(invalid(format!("Unsupported restriction on {}", def.name)));
                };
                let k = eval_set(key, kt, ctx, &def.name)?;
                let v = eval_set(e, vt, ctx, &def.name)?;
                r.filters.push(Filter {
                    column: id,
                    op: rel.op,
                    values: vec![v],
                    element_key: Some(k),
                    fold_case: false,
                });
                r.needs_filtering = true;
            }
            _ => return Err(invalid("Unsupported restriction")),
        }
    }
    if pk.iter().all(Option::is_some) {
        r.pk_values = Some(pk.into_iter().flatten().collect());
    } else if pk.iter().any(Option::is_some) {
        // A partial partition key can only be filtered.
        r.needs_filtering = true;
        for (i, v) in pk.into_iter().enumerate() {
            if let Some(v) = v {
                r.filters.push(Filter {
                    column: t.partition_key[i],
                    op: ast::Operator::In,
                    values: v,
                    element_key: None,
                    fold_case: false,
                });
            }
        }
    }
    // Clustering: a prefix of = / IN, then at most one slice.
    let mut prefix_len = 0;
    while prefix_len < ck_eq.len() && ck_eq[prefix_len].is_some() {
        prefix_len += 1;
    }
    r.ck_prefix = ck_eq.iter().take(prefix_len).flatten().cloned().collect();
    for (i, v) in ck_eq.iter().enumerate().skip(prefix_len) {
        if let Some(v) = v {
            r.needs_filtering = true;
            r.filters.push(Filter {
                column: t.clustering_key[i],
                op: ast::Operator::In,
                values: v.clone(),
                element_key: None,
                fold_case: false,
            });
        }
    }
    if let Some((pos, lo, hi)) = multi {
        if pos != prefix_len {
            return Err(invalid(
                "Clustering column restrictions must follow the preceding clustering columns",
            ));
        }
        r.ck_lower = lo;
        r.ck_upper = hi;
        r.ck_slice_order = t.columns[t.clustering_key[pos] as usize].order;
    }
    for (pos, lo, hi) in ck_slices {
        // A single-column bound next to a multi-column one on the same column: each fills
        // the side the other leaves open.
        let fits = pos == prefix_len
            && r.tuple_filter.is_none()
            && (r.ck_lower.is_none() || lo.is_none())
            && (r.ck_upper.is_none() || hi.is_none());
        if fits && (r.ck_lower.is_some() || r.ck_upper.is_some()) {
            if let Some((v, inc)) = lo {
                r.ck_lower = Some((vec![v], inc));
            }
            if let Some((v, inc)) = hi {
                r.ck_upper = Some((vec![v], inc));
            }
            continue;
        }
        if pos == prefix_len && r.ck_lower.is_none() && r.ck_upper.is_none() {
            r.ck_lower = lo.map(|(v, inc)| (vec![v], inc));
            r.ck_upper = hi.map(|(v, inc)| (vec![v], inc));
            r.ck_slice_order = t.columns[t.clustering_key[pos] as usize].order;
        } else {
            r.needs_filtering = true;
            let col = t.clustering_key[pos];
            if let Some((v, inc)) = lo {
                r.filters.push(Filter {
                    column: col,
                    op: if inc {
                        ast::Operator::Gte
                    } else {
                        ast::Operator::Gt
                    },
                    values: vec![v],
                    element_key: None,
                    fold_case: false,
                });
            }
            if let Some((v, inc)) = hi {
                r.filters.push(Filter {
                    column: col,
                    op: if inc {
                        ast::Operator::Lte
                    } else {
                        ast::Operator::Lt
                    },
                    values: vec![v],
                    element_key: None,
                    fold_case: false,
                });
            }
        }
    }
    Ok(r)
}

impl Restrictions {
    /// The partition keys named by = / IN on every partition key column.
    pub fn partition_keys(&self) -> Option<Vec<PartitionKey>> {
        let cols = self.pk_values.as_ref()?;
        let mut combos: Vec<Vec<&Bytes>> = vec![Vec::new()];
        for vals in cols {
            let mut next = Vec::with_capacity(combos.len() * vals.len());
            for c in &combos {
                for v in vals {
                    let mut n = c.clone();
                    n.push(v);
                    next.push(n);
                }
            }
            combos = next;
        }
        let mut keys: Vec<PartitionKey> = combos
            .into_iter()
            .map(|parts| {
                let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
                PartitionKey::new(Bytes::from(serialize_composite_key(&refs)))
            })
            .collect();
        keys.sort();
        keys.dedup();
        Some(keys)
    }

    /// Whether the clustering restrictions select whole rows (every clustering column =).
    pub fn full_clustering(&self, t: &TableSchema) -> bool {
        self.ck_prefix.len() == t.clustering_key.len()
            && self.ck_lower.is_none()
            && self.ck_upper.is_none()
    }

    /// Every clustering prefix named by = / IN (cartesian product, clustering order).
    pub fn clustering_prefixes(&self) -> Vec<Vec<Bytes>> {
        let mut combos: Vec<Vec<Bytes>> = vec![Vec::new()];
        for (i, vals) in self.ck_prefix.iter().enumerate() {
            if let Some((first, n, tuples)) = &self.ck_tuples
                && i >= *first
                && i < first + n
            {
                if i == *first {
                    combos = combos
                        .iter()
                        .flat_map(|c| {
                            tuples.iter().map(move |t| {
                                let mut x = c.clone();
                                x.extend(t.iter().cloned());
                                x
                            })
                        })
                        .collect();
                }
                continue;
            }
            let mut next = Vec::with_capacity(combos.len() * vals.len());
            for c in &combos {
                for v in vals {
                    let mut n = c.clone();
                    n.push(v.clone());
                    next.push(n);
                }
            }
            combos = next;
        }
        combos
    }

    /// The clustering slices to read, in clustering order.
    pub fn slices(&self, t: &TableSchema) -> Vec<ClusteringSlice> {
        let cmp = t.clustering_comparator();
        let mut out = Vec::new();
        let (lower, upper) = if self.ck_slice_order == ClusteringOrder::Desc {
            (&self.ck_upper, &self.ck_lower)
        } else {
            (&self.ck_lower, &self.ck_upper)
        };
        // A bound of the slice: prefix + bound values, or the whole prefix when unbounded.
        let bound = |p: &[Bytes], b: &Option<(Vec<Bytes>, bool)>| match b {
            Some((v, inc)) => {
                let mut c = p.to_vec();
                c.extend(v.iter().cloned());
                if *inc {
                    ClusteringBound::inclusive(c)
                } else {
                    ClusteringBound::exclusive(c)
                }
            }
            None if p.is_empty() => ClusteringBound::unbounded(),
            None => ClusteringBound::inclusive(p.to_vec()),
        };
        for p in self.clustering_prefixes() {
            let start = bound(&p, lower);
            let end = bound(&p, upper);
            out.push(ClusteringSlice { start, end });
        }
        out.sort_by(|a, b| cmp.compare(&a.start.prefix.0, &b.start.prefix.0));
        out
    }

    /// Full clusterings for statements that address rows (every clustering column =/IN).
    pub fn clusterings(&self) -> Vec<Clustering> {
        self.clustering_prefixes()
            .into_iter()
            .map(Clustering)
            .collect()
    }
}
