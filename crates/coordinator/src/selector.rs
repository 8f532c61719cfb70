//! Selectors: what a SELECT computes per row — columns, `writetime`/`ttl`, `token()`, scalar
//! functions (`toTimestamp`, `blobAs*`, `CAST`, `toJson` …), UDT fields, map elements — and
//! aggregates (`count`, `min`, `max`, `sum`, `avg`) over whole results or `GROUP BY` groups.

use amphora_cql as ast;
use amphora_storage::PartitionData;
use amphora_types::CqlType;
use amphora_types::data::{Cell, ColumnData, Row};
use amphora_types::schema::{ColumnId, ColumnKind, TableSchema};
use bytes::Bytes;

use crate::api::QueryError;
use crate::functions::{as_f64, as_i128, from_f64, from_i128};
use crate::values::EvalCtx;

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::Invalid(m.into())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggFn {
    CountRows,
    Count,
    Min,
    Max,
    Sum,
    Avg,
}

#[derive(Clone, Debug)]
pub enum Sel {
    Column(ColumnId),
    WriteTime(ColumnId),
    Ttl(ColumnId),
    Token,
    Const(Option<Bytes>),
    /// `s['b'..'c']`, `m[..'x']`: the elements / entries of a set or map within bounds.
    Slice {
        base: Box<SelItem>,
        from: Option<Bytes>,
        to: Option<Bytes>,
    },
    /// `writetime`/`ttl` (`ttl` = true) of the cells of a non-frozen collection or UDT:
    /// all of them as a list (`path` None) or the one at a map key / set element / UDT field.
    CellsMeta {
        id: ColumnId,
        ttl: bool,
        path: Option<Bytes>,
    },
    /// A native scalar function or CAST (`functions.rs`) over its argument selectors.
    Native {
        fname: String,
        sig: crate::functions::Sig,
        args: Vec<SelItem>,
    },
    Field {
        base: Box<SelItem>,
        index: usize,
    },
    Element {
        base: Box<SelItem>,
        key: Bytes,
    },
    Agg {
        f: AggFn,
        arg: Option<Box<SelItem>>,
    },
}

#[derive(Clone, Debug)]
pub struct SelItem {
    pub sel: Sel,
    pub name: String,
    pub ty: CqlType,
}

/// `SELECT *` column order: partition key, clustering, then statics and regular columns by name.
pub fn wildcard_columns(t: &TableSchema) -> Vec<ColumnId> {
    let mut out: Vec<ColumnId> = Vec::with_capacity(t.columns.len());
    out.extend(&t.partition_key);
    out.extend(&t.clustering_key);
    for kind in [ColumnKind::Static, ColumnKind::Regular] {
        let from = out.len();
        out.extend(
            (0..t.columns.len() as ColumnId)
                .filter(|i| t.columns[*i as usize].kind == kind && !t.is_dropped(*i)),
        );
        out[from..].sort_unstable_by(|a, b| {
            t.columns[*a as usize]
                .name
                .cmp(&t.columns[*b as usize].name)
        });
    }
    out
}

fn column_item(t: &TableSchema, id: ColumnId) -> SelItem {
    let d = &t.columns[id as usize];
    SelItem {
        sel: Sel::Column(id),
        name: d.name.clone(),
        ty: d.ty.clone(),
    }
}

fn expr_name(e: &ast::Expr) -> String {
    match e {
        ast::Expr::Column(c) => c.name.clone(),
        other => other.to_string(),
    }
}

fn numeric(ty: &CqlType) -> bool {
    matches!(
        ty,
        CqlType::Int
            | CqlType::Bigint
            | CqlType::Smallint
            | CqlType::Tinyint
            | CqlType::Float
            | CqlType::Double
            | CqlType::Counter
            | CqlType::Varint
            | CqlType::Decimal
    )
}

/// Resolves one selector expression.
pub fn resolve(
    t: &TableSchema,
    e: &ast::Expr,
    ctx_for_consts: &EvalCtx<'_>,
) -> Result<SelItem, QueryError> {
    match e {
        ast::Expr::Column(c) => {
            let (id, _) = t
                .column(&c.name)
                .ok_or_else(|| invalid(format!("Undefined column name {}", c.name)))?;
            Ok(column_item(t, id))
        }
        ast::Expr::CellMetadata { kind, column } => {
            if let Some(item) = cell_metadata_of_cells(t, *kind, column, ctx_for_consts)? {
                return Ok(item);
            }
            let ast::Expr::Column(c) = &**column else {
                return Err(invalid("writetime() and ttl() take a column"));
            };
            let (id, d) = t
                .column(&c.name)
                .ok_or_else(|| invalid(format!("Undefined column name {}", c.name)))?;
            if matches!(d.kind, ColumnKind::PartitionKey | ColumnKind::Clustering) {
                let f = if *kind == ast::CellMetadata::Ttl {
                    "ttl"
                } else {
                    "writetime"
                };
                return Err(invalid(format!(
                    "Cannot use selection function {f} on PRIMARY KEY part {}",
                    d.name
                )));
            }
            if d.ty.is_multi_cell() {
                return Err(invalid(format!(
                    "Cannot use selection function {} on non-frozen collection {}",
                    if *kind == ast::CellMetadata::Ttl {
                        "ttl"
                    } else {
                        "writeTime"
                    },
                    d.name
                )));
            }
            Ok(match kind {
                ast::CellMetadata::Ttl => SelItem {
                    sel: Sel::Ttl(id),
                    name: format!("ttl({})", d.name),
                    ty: CqlType::Int,
                },
                ast::CellMetadata::MaxWriteTime => SelItem {
                    sel: Sel::WriteTime(id),
                    name: format!("maxwritetime({})", d.name),
                    ty: CqlType::Bigint,
                },
                _ => SelItem {
                    sel: Sel::WriteTime(id),
                    name: format!("writetime({})", d.name),
                    ty: CqlType::Bigint,
                },
            })
        }
        ast::Expr::CountRows => Ok(SelItem {
            sel: Sel::Agg {
                f: AggFn::CountRows,
                arg: None,
            },
            name: "count".into(),
            ty: CqlType::Bigint,
        }),
        ast::Expr::Field { expr, field } => {
            let base = resolve(t, expr, ctx_for_consts)?;
            let CqlType::Udt(d) = &base.ty else {
                return Err(invalid(format!(
                    "Invalid field selection: {} of type {} is not a user type",
                    base.name, base.ty
                )));
            };
            let index = d
                .field_names
                .iter()
                .position(|f| *f == field.name)
                .ok_or_else(|| {
                    invalid(format!(
                        "{} of type {} has no field {}",
                        base.name, base.ty, field.name
                    ))
                })?;
            let ty = d.field_types[index].clone();
            let name = format!("{}.{}", base.name, field.name);
            Ok(SelItem {
                sel: Sel::Field {
                    base: Box::new(base),
                    index,
                },
                name,
                ty,
            })
        }
        ast::Expr::Element { expr, key } => {
            let base = resolve(t, expr, ctx_for_consts)?;
            let (kty, vty) = match &base.ty {
                CqlType::Map { key, value, .. } => ((**key).clone(), (**value).clone()),
                CqlType::Set { elem, .. } => ((**elem).clone(), (**elem).clone()),
                other => {
                    return Err(invalid(format!(
                        "Element selection is only allowed on sets and maps, but {} is a {other}",
                        base.name
                    )));
                }
            };
            let k = crate::values::eval_set(key, &kty, ctx_for_consts, &base.name)?;
            // Named as written: m['x'], l[1].
            let name = format!("{}[{key}]", base.name);
            Ok(SelItem {
                sel: Sel::Element {
                    base: Box::new(base),
                    key: k,
                },
                name,
                ty: vty,
            })
        }
        ast::Expr::Cast { expr, ty } => {
            let base = resolve(t, expr, ctx_for_consts)?;
            let ks =
                crate::schema::KeyspaceDef::empty(t.keyspace.clone(), Default::default(), true);
            let to = crate::schema::resolve_type(ty, &ks, true)?;
            if base.ty == to {
                // Cassandra's same-type cast is the selector itself (same name too).
                return Ok(base);
            }
            let input = crate::functions::cast_input(&base.ty, &to, &base.name)?;
            let name = format!("cast({} as {to})", base.name);
            Ok(SelItem {
                sel: Sel::Native {
                    fname: format!("cast_as_{to}"),
                    sig: crate::functions::Sig {
                        f: crate::functions::Native::Cast,
                        params: vec![input],
                        ret: to.clone(),
                    },
                    args: vec![base],
                },
                name,
                ty: to,
            })
        }
        ast::Expr::Function { name, args } => {
            let fname = name.name.name.to_ascii_lowercase();
            let display = format!(
                "system.{fname}({})",
                args.iter().map(expr_name).collect::<Vec<_>>().join(", ")
            );
            match (fname.as_str(), args.as_slice()) {
                ("token", _) => token_item(t, args, display, ctx_for_consts),
                ("count", [ast::Expr::Literal(_)]) => Ok(SelItem {
                    sel: Sel::Agg {
                        f: AggFn::CountRows,
                        arg: None,
                    },
                    name: "count".into(),
                    ty: CqlType::Bigint,
                }),
                ("count" | "min" | "max" | "sum" | "avg", [a]) => {
                    let arg = resolve(t, a, ctx_for_consts)?;
                    let f = match fname.as_str() {
                        "count" => AggFn::Count,
                        "min" => AggFn::Min,
                        "max" => AggFn::Max,
                        "sum" => AggFn::Sum,
                        _ => AggFn::Avg,
                    };
                    if matches!(f, AggFn::Sum | AggFn::Avg) && !numeric(&arg.ty) {
                        return Err(invalid(format!(
                            "Invalid call to function {fname}, none of its type signatures match (known type signatures: system.{fname} : (int) -> int, ...)"
                        )));
                    }
                    let ty = match f {
                        AggFn::Count => CqlType::Bigint,
                        // sum()/avg() keep the argument's type, counter included
                        // (Cassandra 5.0: `system.sum(c) counter`).
                        _ => arg.ty.clone(),
                    };
                    // The argument as resolved: system.sum(cast(v as bigint)).
                    let name = format!("system.{fname}({})", arg.name);
                    Ok(SelItem {
                        sel: Sel::Agg {
                            f,
                            arg: Some(Box::new(arg)),
                        },
                        name,
                        ty,
                    })
                }
                (
                    "now" | "currenttimeuuid" | "uuid" | "currenttimestamp" | "currentdate"
                    | "currenttime",
                    [],
                ) => {
                    let ty = match fname.as_str() {
                        "now" | "currenttimeuuid" => CqlType::Timeuuid,
                        "uuid" => CqlType::Uuid,
                        "currenttimestamp" => CqlType::Timestamp,
                        "currentdate" => CqlType::Date,
                        _ => CqlType::Time,
                    };
                    let v = crate::values::encode(e, &ty, ctx_for_consts, &display)?;
                    Ok(SelItem {
                        sel: Sel::Const(Some(v)),
                        name: display,
                        ty,
                    })
                }
                _ => native_item(t, name, args, ctx_for_consts),
            }
        }
        ast::Expr::Literal(_) | ast::Expr::TypeHint { .. } => {
            // A constant selector needs a type: `(int) 3` or the literal's natural type.
            let (ty, inner) = match e {
                ast::Expr::TypeHint { ty, expr } => {
                    let ks = crate::schema::KeyspaceDef::empty(
                        t.keyspace.clone(),
                        Default::default(),
                        true,
                    );
                    (crate::schema::resolve_type(ty, &ks, true)?, &**expr)
                }
                ast::Expr::Literal(ast::Literal::Integer(_)) => (CqlType::Int, e),
                ast::Expr::Literal(ast::Literal::Float(_)) => (CqlType::Double, e),
                ast::Expr::Literal(ast::Literal::Boolean(_)) => (CqlType::Boolean, e),
                ast::Expr::Literal(ast::Literal::Uuid(_)) => (CqlType::Uuid, e),
                ast::Expr::Literal(ast::Literal::Hex(_)) => (CqlType::Blob, e),
                _ => (CqlType::Text, e),
            };
            let v = crate::values::encode(inner, &ty, ctx_for_consts, "constant")?;
            let name = match e {
                ast::Expr::TypeHint { ty, expr } => format!("({ty}){expr}"),
                _ => e.to_string(),
            };
            Ok(SelItem {
                sel: Sel::Const(Some(v)),
                name,
                ty,
            })
        }
        ast::Expr::Binary { op, left, right } => {
            operation_item(t, *op, left, right, ctx_for_consts)
        }
        ast::Expr::Slice { expr, from, to } => {
            let base = resolve(t, expr, ctx_for_consts)?;
            let kt = match &base.ty {
                CqlType::Set { elem, .. } => (**elem).clone(),
                CqlType::Map { key, .. } => (**key).clone(),
                other => {
                    return Err(invalid(format!(
                        "Slice selection is only allowed on sets and maps, but {} is a {other}",
                        base.name
                    )));
                }
            };
            let bound = |b: &Option<Box<ast::Expr>>| -> Result<Option<Bytes>, QueryError> {
                b.as_ref()
                    .map(|e| crate::values::eval_set(e, &kt, ctx_for_consts, &base.name))
                    .transpose()
            };
            let (lo, hi) = (bound(from)?, bound(to)?);
            let show =
                |b: &Option<Box<ast::Expr>>| b.as_ref().map(|e| e.to_string()).unwrap_or_default();
            let name = format!("{}[{}..{}]", base.name, show(from), show(to));
            let ty = base.ty.clone();
            Ok(SelItem {
                sel: Sel::Slice {
                    base: Box::new(base),
                    from: lo,
                    to: hi,
                },
                name,
                ty,
            })
        }
        // Cassandra's selector grammar has no unary minus on a column or call.
        // Cassandra's lexer reads `-i…` as the start of `-Infinity`: a syntax error.
        ast::Expr::Negate(inner)
            if matches!(&**inner, ast::Expr::Column(c)
                if !c.quoted && c.name.starts_with(['i', 'I'])) =>
        {
            Err(QueryError::Syntax(format!(
                "mismatched character after '-{}' (expecting -Infinity)",
                match &**inner {
                    ast::Expr::Column(c) => c.name.as_str(),
                    _ => "",
                }
            )))
        }
        ast::Expr::Negate(inner) if !is_term(inner) => {
            // -x is 0 - x in x's type.
            let base = resolve(t, inner, ctx_for_consts)?;
            let ty = base.ty.clone();
            if !matches!(
                ty,
                CqlType::Tinyint
                    | CqlType::Smallint
                    | CqlType::Int
                    | CqlType::Bigint
                    | CqlType::Counter
                    | CqlType::Float
                    | CqlType::Double
                    | CqlType::Decimal
                    | CqlType::Varint
            ) {
                return Err(invalid(format!(
                    "the '-' operation is not supported on {}",
                    base.name
                )));
            }
            let name = format!("-{}", base.name);
            let zero = crate::functions::from_i128(&ty, 0);
            Ok(SelItem {
                sel: Sel::Native {
                    fname: "_negate".into(),
                    sig: crate::functions::Sig {
                        f: crate::functions::Native::Operation(ast::BinaryOp::Sub),
                        params: vec![ty.clone(), ty.clone()],
                        ret: ty.clone(),
                    },
                    args: vec![
                        SelItem {
                            sel: Sel::Const(zero),
                            name: "0".into(),
                            ty: ty.clone(),
                        },
                        base,
                    ],
                },
                name,
                ty,
            })
        }
        _ => Err(invalid(format!("Unsupported selector: {e}"))),
    }
}

/// `a + b` and the other arithmetic operators: a native operation typed as Cassandra
/// types it (the wider number type; timestamp/date ± duration).
fn operation_item(
    t: &TableSchema,
    op: ast::BinaryOp,
    left: &ast::Expr,
    right: &ast::Expr,
    ctx: &EvalCtx<'_>,
) -> Result<SelItem, QueryError> {
    let side = |e: &ast::Expr| -> Result<(Option<SelItem>, Option<CqlType>, String), QueryError> {
        if is_term(e) {
            Ok((None, crate::functions::term_type(e), e.to_string()))
        } else {
            let it = resolve(t, e, ctx)?;
            let ty = it.ty.clone();
            let name = it.name.clone();
            Ok((Some(it), Some(ty), name))
        }
    };
    let (l, lt, ln) = side(left)?;
    let (r, rt, rn) = side(right)?;
    let unsupported = || {
        invalid(format!(
            "the '{}' operation is not supported between {ln} and {rn}",
            op.as_str()
        ))
    };
    let (Some(lt), Some(rt)) = (lt, rt) else {
        return Err(unsupported());
    };
    let ret = crate::functions::operation_type(op, &lt, &rt).ok_or_else(unsupported)?;
    let mut items = Vec::with_capacity(2);
    for ((it, e), ty) in [(l, left), (r, right)].into_iter().zip([&lt, &rt]) {
        items.push(match it {
            Some(it) => it,
            None => SelItem {
                sel: Sel::Const(crate::values::eval(e, ty, ctx, "operand")?.bytes().cloned()),
                name: e.to_string(),
                ty: ty.clone(),
            },
        });
    }
    let sig = crate::functions::Sig {
        f: crate::functions::Native::Operation(op),
        params: vec![lt, rt],
        ret: ret.clone(),
    };
    let fname = format!("_{}", op.as_str());
    let prec = |o: ast::BinaryOp| match o {
        ast::BinaryOp::Add | ast::BinaryOp::Sub => 1,
        _ => 2,
    };
    // Parenthesised as written when a side binds looser than the operator.
    let paren = |e: &ast::Expr, n: String, min: u8| match e {
        ast::Expr::Binary { op, .. } if prec(*op) < min => format!("({n})"),
        _ => n,
    };
    let name = format!(
        "{} {} {}",
        paren(left, ln, prec(op)),
        op.as_str(),
        paren(right, rn, prec(op) + 1)
    );
    if items.iter().all(|i| matches!(i.sel, Sel::Const(_))) {
        let vals: Vec<Option<Bytes>> = items
            .iter()
            .map(|i| match &i.sel {
                Sel::Const(v) => v.clone(),
                _ => None,
            })
            .collect();
        let v = crate::functions::call(&fname, &sig, &vals, None)?;
        return Ok(SelItem {
            sel: Sel::Const(v),
            name,
            ty: ret,
        });
    }
    Ok(SelItem {
        sel: Sel::Native {
            fname,
            sig,
            args: items,
        },
        name,
        ty: ret,
    })
}

/// `writetime`/`ttl` of a non-frozen collection (a list, one per cell), of a map or set
/// element (`m['a']`), or of a non-frozen UDT field (`o.n`); None for anything else.
fn cell_metadata_of_cells(
    t: &TableSchema,
    kind: ast::CellMetadata,
    column: &ast::Expr,
    ctx: &EvalCtx<'_>,
) -> Result<Option<SelItem>, QueryError> {
    let ttl = kind == ast::CellMetadata::Ttl;
    let fname = match kind {
        ast::CellMetadata::Ttl => "ttl",
        ast::CellMetadata::MaxWriteTime => "maxwritetime",
        ast::CellMetadata::WriteTime => "writetime",
    };
    let one_ty = if ttl { CqlType::Int } else { CqlType::Bigint };
    let col = |e: &ast::Expr| -> Option<(ColumnId, CqlType, String)> {
        let ast::Expr::Column(c) = e else { return None };
        let (id, d) = t.column(&c.name)?;
        d.ty.is_multi_cell()
            .then(|| (id, d.ty.clone(), d.name.clone()))
    };
    let item = |id, path, name: String, ty| SelItem {
        sel: Sel::CellsMeta { id, ttl, path },
        name: format!("{fname}({name})"),
        ty,
    };
    Ok(match column {
        ast::Expr::Column(_) if kind != ast::CellMetadata::MaxWriteTime => match col(column) {
            Some((id, CqlType::List { .. } | CqlType::Set { .. } | CqlType::Map { .. }, name)) => {
                Some(item(
                    id,
                    None,
                    name,
                    CqlType::List {
                        elem: Box::new(one_ty),
                        frozen: false,
                    },
                ))
            }
            _ => None,
        },
        ast::Expr::Element { expr, key } => match col(expr) {
            Some((id, CqlType::Map { key: kt, .. } | CqlType::Set { elem: kt, .. }, name)) => {
                let k = crate::values::eval_set(key, &kt, ctx, &name)?;
                Some(item(id, Some(k), format!("{name}[{key}]"), one_ty))
            }
            _ => None,
        },
        ast::Expr::Field { expr, field } => match col(expr) {
            Some((id, CqlType::Udt(d), name)) => {
                let Some(i) = d.field_names.iter().position(|f| *f == field.name) else {
                    return Ok(None);
                };
                let path = Bytes::copy_from_slice(&(i as u16).to_be_bytes());
                Some(item(
                    id,
                    Some(path),
                    format!("{name}.{}", field.name),
                    one_ty,
                ))
            }
            _ => None,
        },
        _ => None,
    })
}

/// Whether an argument is a constant term (typed by the signature that receives it).
fn is_term(e: &ast::Expr) -> bool {
    match e {
        ast::Expr::Literal(_) | ast::Expr::Null => true,
        ast::Expr::Negate(inner) => is_term(inner),
        ast::Expr::List(items) | ast::Expr::Set(items) | ast::Expr::Tuple(items) => {
            items.iter().all(is_term)
        }
        ast::Expr::Map(entries) => entries.iter().all(|(k, v)| is_term(k) && is_term(v)),
        ast::Expr::Udt(fields) => fields.iter().all(|(_, v)| is_term(v)),
        _ => false,
    }
}

/// `token(...)`: the row's token for the partition key columns, a constant for constants.
fn token_item(
    t: &TableSchema,
    args: &[ast::Expr],
    display: String,
    ctx: &EvalCtx<'_>,
) -> Result<SelItem, QueryError> {
    let pk = &t.partition_key;
    for (i, (a, id)) in args.iter().zip(pk).enumerate() {
        if let ast::Expr::Column(c) = a
            && t.column(&c.name).map(|(cid, _)| cid) != Some(*id)
        {
            return Err(invalid(format!(
                "Type error: {} cannot be passed as argument {i} of function system.token of type {}",
                c.name, t.columns[*id as usize].ty
            )));
        }
    }
    if args.len() == pk.len() && !args.is_empty() && args.iter().all(is_term) {
        let mut parts = Vec::with_capacity(args.len());
        for (a, id) in args.iter().zip(pk) {
            let def = &t.columns[*id as usize];
            parts.push(crate::values::eval_set(a, &def.ty, ctx, &def.name)?);
        }
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        let key = amphora_types::token::serialize_composite_key(&refs);
        let token = amphora_types::token::murmur3_token(&key);
        return Ok(SelItem {
            sel: Sel::Const(Some(Bytes::copy_from_slice(&token.to_be_bytes()))),
            name: display,
            ty: CqlType::Bigint,
        });
    }
    Ok(SelItem {
        sel: Sel::Token,
        name: display,
        ty: CqlType::Bigint,
    })
}

/// A native scalar function call (`functions.rs`): arguments are selectors or constants.
fn native_item(
    t: &TableSchema,
    name: &ast::QualifiedName,
    args: &[ast::Expr],
    ctx: &EvalCtx<'_>,
) -> Result<SelItem, QueryError> {
    use crate::functions::{self, Arg};
    if name.keyspace.as_ref().is_none_or(|k| k.name == "system")
        && matches!(name.name.name.as_str(), "fromjson" | "from_json")
    {
        return Err(invalid(format!(
            "{}() cannot be used in the selection clause of a SELECT statement",
            name.name.name
        )));
    }
    let mut resolved = Vec::with_capacity(args.len());
    let mut kinds = Vec::with_capacity(args.len());
    let mut shown = Vec::with_capacity(args.len());
    for a in args {
        if is_term(a) {
            resolved.push(None);
            kinds.push(Arg::Term(a));
            shown.push(a.to_string());
        } else {
            let it = resolve(t, a, ctx)?;
            shown.push(it.name.clone());
            kinds.push(Arg::Typed(it.ty.clone()));
            resolved.push(Some(it));
        }
    }
    let (fname, sig) = functions::resolve(name, &kinds, &shown, ctx)?;
    let mut items = Vec::with_capacity(args.len());
    for ((r, a), p) in resolved.into_iter().zip(args).zip(&sig.params) {
        items.push(match r {
            Some(it) => it,
            None => SelItem {
                sel: Sel::Const(crate::values::eval(a, p, ctx, "argument")?.bytes().cloned()),
                name: a.to_string(),
                ty: p.clone(),
            },
        });
    }
    let display = format!("system.{fname}({})", shown.join(", "));
    let ty = sig.ret.clone();
    // Constant arguments: evaluated once, and a failure is an InvalidRequest as in Cassandra.
    if items.iter().all(|i| matches!(i.sel, Sel::Const(_))) {
        let vals: Vec<Option<Bytes>> = items
            .iter()
            .map(|i| match &i.sel {
                Sel::Const(v) => v.clone(),
                _ => None,
            })
            .collect();
        let v = functions::call(&fname, &sig, &vals, None)?;
        return Ok(SelItem {
            sel: Sel::Const(v),
            name: display,
            ty,
        });
    }
    Ok(SelItem {
        sel: Sel::Native {
            fname,
            sig,
            args: items,
        },
        name: display,
        ty,
    })
}

pub fn selection(t: &TableSchema, s: &ast::SelectStatement) -> Result<Vec<SelItem>, QueryError> {
    let items = match &s.selection {
        ast::Selection::Wildcard => wildcard_columns(t)
            .into_iter()
            .map(|i| column_item(t, i))
            .collect(),
        ast::Selection::List(sels) => {
            let ctx = EvalCtx {
                binds: &[],
                now_micros: crate::exec::now_micros(),
            };
            let mut out = Vec::with_capacity(sels.len());
            for sel in sels {
                let mut item = resolve(t, &sel.expr, &ctx)?;
                if let Some(a) = &sel.alias {
                    item.name = a.name.clone();
                }
                out.push(item);
            }
            out
        }
    };
    if s.distinct {
        for it in &items {
            match it.sel {
                Sel::Token => {}
                Sel::Column(id)
                    if matches!(
                        t.columns[id as usize].kind,
                        ColumnKind::PartitionKey | ColumnKind::Static
                    ) => {}
                _ => {
                    return Err(invalid(format!(
                        "SELECT DISTINCT queries must only request partition key columns and/or static columns (not {})",
                        it.name
                    )));
                }
            }
        }
    }
    Ok(items)
}

pub fn is_aggregate(items: &[SelItem]) -> bool {
    items.iter().any(contains_agg)
}

/// Whether a selector is or contains an aggregate (`CAST(sum(v) AS bigint)`, `max(i) + 1`).
fn contains_agg(it: &SelItem) -> bool {
    match &it.sel {
        Sel::Agg { .. } => true,
        Sel::Native { args, .. } => args.iter().any(contains_agg),
        _ => false,
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

/// A SELECT's GROUP BY: how many primary-key columns it groups on and, when the last one
/// is bucketed by a function (`floor(t, 1h)`), that function as a selector.
#[derive(Debug, Default)]
pub struct GroupBy {
    pub len: usize,
    pub bucket: Option<SelItem>,
}

impl GroupBy {
    /// Checks GROUP BY as Cassandra does: the named columns follow the key's declared
    /// order; key columns between them may be skipped when WHERE restricts them with `=`
    /// (they are constant, so grouping on them changes nothing); only the last element may
    /// be a function, a monotonic one (`floor`) of the next clustering column.
    pub fn of(
        t: &TableSchema,
        s: &ast::SelectStatement,
        ctx: &EvalCtx<'_>,
    ) -> Result<GroupBy, QueryError> {
        let key: Vec<ColumnId> = t
            .partition_key
            .iter()
            .chain(&t.clustering_key)
            .copied()
            .collect();
        let restricted_by_eq = |id: ColumnId| {
            s.where_clause.iter().any(|r| {
                r.op == ast::Operator::Eq
                    && match &r.target {
                        ast::RelationTarget::Column(c) => {
                            t.column(&c.name).map(|(i, _)| i) == Some(id)
                        }
                        ast::RelationTarget::Tuple(cs) => cs
                            .iter()
                            .any(|c| t.column(&c.name).map(|(i, _)| i) == Some(id)),
                        _ => false,
                    }
            })
        };
        let order_error = || {
            invalid(
                "Group by currently only support groups of columns following their declared order in the PRIMARY KEY",
            )
        };
        let mut out = GroupBy::default();
        for (i, e) in s.group_by.iter().enumerate() {
            let column = match e {
                ast::Expr::Column(c) => c,
                ast::Expr::Function { name, args } => {
                    let fname = name.name.name.to_ascii_lowercase();
                    if fname != "floor" {
                        return Err(invalid(format!(
                            "Only monotonic functions are supported in the GROUP BY clause. Got: {e}"
                        )));
                    }
                    if i + 1 != s.group_by.len() {
                        return Err(invalid(
                            "Functions are only supported on the last element of the GROUP BY clause",
                        ));
                    }
                    let Some(ast::Expr::Column(c)) = args.first() else {
                        return Err(invalid(format!(
                            "Only monotonic functions are supported in the GROUP BY clause. Got: {e}"
                        )));
                    };
                    out.bucket = Some(resolve(t, e, ctx)?);
                    c
                }
                _ => return Err(invalid("Only column names are supported in GROUP BY")),
            };
            let id = t
                .column(&column.name)
                .map(|(id, _)| id)
                .ok_or_else(|| invalid(format!("Undefined column name {}", column.name)))?;
            loop {
                let Some(&k) = key.get(out.len) else {
                    return Err(order_error());
                };
                out.len += 1;
                if k == id {
                    break;
                }
                if !restricted_by_eq(k) {
                    return Err(order_error());
                }
            }
        }
        if !s.group_by.is_empty() && out.len < t.partition_key.len() {
            return Err(invalid(
                "Group by is not supported on only a part of the partition key",
            ));
        }
        Ok(out)
    }

    /// The group a row belongs to: its first `len` key values, the last one bucketed.
    pub fn key(
        &self,
        t: &TableSchema,
        p: &PartitionData,
        row: &Row,
        now_s: i32,
        static_only: bool,
    ) -> Result<Vec<Option<Bytes>>, QueryError> {
        let plain = self.len - usize::from(self.bucket.is_some());
        let mut key: Vec<Option<Bytes>> = t
            .partition_key
            .iter()
            .chain(&t.clustering_key)
            .take(plain)
            .map(|id| column_value(t, *id, p, row, static_only))
            .collect();
        if let Some(b) = &self.bucket {
            // A bucket function failing on a row (floor() of a time before its start)
            // fails the read on the replica in Cassandra: ReadFailure, not a null group.
            let v = eval_row_checked(t, b, p, row, now_s, static_only).map_err(|e| {
                tracing::debug!(error = %e, "GROUP BY bucket failed");
                QueryError::ReadFailure {
                    consistency: 1,
                    received: 0,
                    block_for: 1,
                    failures: 1,
                    data_present: false,
                }
            })?;
            key.push(v);
        }
        Ok(key)
    }
}

/// The serialized CQL value of a column in a (live) row.
#[inline]
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

/// Serializes stored column data as the CQL value of `ty`.
pub fn data_value(ty: &CqlType, d: &ColumnData) -> Option<Bytes> {
    use crate::values::{serialize_collection, serialize_map, serialize_tuple};
    match d {
        ColumnData::Simple(c) => {
            if c.is_tombstone {
                None
            } else if c.is_counter {
                Some(Bytes::copy_from_slice(
                    &amphora_types::data::counter_value(&c.value).to_be_bytes(),
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

/// Like [`eval_row`], but a function failing on this row's values is an error (Cassandra's
/// FunctionFailure, e.g. an integer division by zero) instead of a null.
///
/// Inlined, with a plain column answered at once: that is nearly every selector, and going
/// through [`eval_row`] and returning the wide `Result` cost about half of each returned
/// cell's instructions (a read of 10 rows of 3 columns: ~64 of 131 per cell).
#[inline]
pub fn eval_row_checked(
    t: &TableSchema,
    it: &SelItem,
    p: &PartitionData,
    row: &Row,
    now_s: i32,
    static_only: bool,
) -> Result<Option<Bytes>, QueryError> {
    match &it.sel {
        Sel::Column(id) => Ok(column_value(t, *id, p, row, static_only)),
        Sel::Native { fname, sig, args } => {
            eval_native_checked(fname, sig, args, t, p, row, now_s, static_only)
        }
        _ => Ok(eval_row(t, it, p, row, now_s, static_only)),
    }
}

/// [`eval_row_checked`] of a native function call: its arguments, then the function.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn eval_native_checked(
    fname: &str,
    sig: &crate::functions::Sig,
    args: &[SelItem],
    t: &TableSchema,
    p: &PartitionData,
    row: &Row,
    now_s: i32,
    static_only: bool,
) -> Result<Option<Bytes>, QueryError> {
    let mut vals = Vec::with_capacity(args.len());
    for a in args {
        vals.push(eval_row_checked(t, a, p, row, now_s, static_only)?);
    }
    crate::functions::call(fname, sig, &vals, None)
}

/// Evaluates a non-aggregate selector on one row.
pub fn eval_row(
    t: &TableSchema,
    it: &SelItem,
    p: &PartitionData,
    row: &Row,
    now_s: i32,
    static_only: bool,
) -> Option<Bytes> {
    match &it.sel {
        Sel::Column(id) => column_value(t, *id, p, row, static_only),
        Sel::WriteTime(id) => {
            cell_of(t, *id, p, row).map(|c| Bytes::copy_from_slice(&c.timestamp.to_be_bytes()))
        }
        Sel::Ttl(id) => cell_of(t, *id, p, row)
            .filter(|c| c.ttl > 0)
            .map(|c| Bytes::copy_from_slice(&remaining_ttl(c, now_s).to_be_bytes())),
        Sel::Slice { base, from, to } => {
            let v = eval_row(t, base, p, row, now_s, static_only)?;
            let (kt, per) = match &base.ty {
                CqlType::Set { elem, .. } => (&**elem, 1),
                CqlType::Map { key, .. } => (&**key, 2),
                _ => return None,
            };
            let items = amphora_types::cql_type::split_collection(&v, per).ok()?;
            let inside = |k: &[u8]| {
                from.as_ref().is_none_or(|f| kt.compare(k, f).is_ge())
                    && to.as_ref().is_none_or(|x| kt.compare(k, x).is_le())
            };
            let kept: Vec<&[Option<&[u8]>]> = items
                .chunks(per)
                .filter(|c| c.first().copied().flatten().is_some_and(inside))
                .collect();
            if kept.is_empty() {
                return None;
            }
            if per == 1 {
                Some(crate::values::serialize_collection(
                    kept.iter().map(|c| c.first().copied().flatten()),
                ))
            } else {
                Some(crate::values::serialize_map(kept.iter().filter_map(|c| {
                    Some((c.first().copied().flatten()?, c.get(1).copied().flatten()?))
                })))
            }
        }
        Sel::CellsMeta { id, ttl, path } => {
            let def = t.columns.get(*id as usize)?;
            let data = if def.kind == ColumnKind::Static {
                p.static_row.as_ref()?.cell(*id)?
            } else {
                row.cell(*id)?
            };
            let ColumnData::Complex { cells, .. } = data else {
                return None;
            };
            let meta = |c: &Cell| -> Option<Bytes> {
                if *ttl {
                    (c.ttl > 0)
                        .then(|| Bytes::copy_from_slice(&remaining_ttl(c, now_s).to_be_bytes()))
                } else {
                    Some(Bytes::copy_from_slice(&c.timestamp.to_be_bytes()))
                }
            };
            let live = cells.iter().filter(|(_, c)| !c.is_tombstone);
            match path {
                Some(key) => live
                    .into_iter()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, c)| meta(c)),
                None => {
                    let metas: Vec<Option<Bytes>> = live.map(|(_, c)| meta(c)).collect();
                    if metas.is_empty() {
                        return None;
                    }
                    Some(crate::values::serialize_collection(
                        metas.iter().map(|m| m.as_deref()),
                    ))
                }
            }
        }
        Sel::Token => Some(Bytes::copy_from_slice(&p.key.token.to_be_bytes())),
        Sel::Const(v) => v.clone(),
        Sel::Field { base, index } => {
            let v = eval_row(t, base, p, row, now_s, static_only)?;
            amphora_types::cql_type::split_tuple(&v)
                .ok()?
                .get(*index)
                .copied()
                .flatten()
                .map(Bytes::copy_from_slice)
        }
        Sel::Element { base, key } => {
            let v = eval_row(t, base, p, row, now_s, static_only)?;
            match &base.ty {
                CqlType::Map { key: kt, .. } => {
                    let items = amphora_types::cql_type::split_collection(&v, 2).ok()?;
                    items.chunks(2).find_map(|kv| {
                        match (kv.first().copied().flatten(), kv.get(1).copied().flatten()) {
                            (Some(k), Some(val)) if kt.compare(k, key).is_eq() => {
                                Some(Bytes::copy_from_slice(val))
                            }
                            _ => None,
                        }
                    })
                }
                CqlType::Set { elem, .. } => {
                    let items = amphora_types::cql_type::split_collection(&v, 1).ok()?;
                    items
                        .into_iter()
                        .flatten()
                        .find(|x| elem.compare(x, key).is_eq())
                        .map(Bytes::copy_from_slice)
                }
                _ => None,
            }
        }
        Sel::Native { fname, sig, args } => {
            let vals: Vec<Option<Bytes>> = args
                .iter()
                .map(|a| eval_row(t, a, p, row, now_s, static_only))
                .collect();
            crate::functions::call(fname, sig, &vals, None)
                .ok()
                .flatten()
        }
        Sel::Agg { .. } => None,
    }
}

/// Running state of one selector over a group of rows.
#[derive(Clone, Debug)]
pub enum AggState {
    Count(i64),
    Best(Option<Bytes>),
    SumInt(i128, i64),
    /// Kahan summation as Cassandra does it: sum, compensation, plain sum, count.
    SumFloat(f64, f64, f64, i64),
    /// Exact varint sum and count.
    SumVarint(crate::bignum::BigInt, i64),
    /// Exact decimal sum.
    SumDecimal(crate::bignum::BigDecimal),
    /// Cassandra's running decimal average: avg += (x - avg) / n, HALF_EVEN.
    AvgDecimal(crate::bignum::BigDecimal, u32),
    First(Option<Option<Bytes>>),
    /// A function over aggregates: the states of its arguments.
    Native(Vec<AggState>),
}

pub fn new_states(items: &[SelItem]) -> Vec<AggState> {
    items.iter().map(state_of).collect()
}

fn state_of(it: &SelItem) -> AggState {
    if let Sel::Native { args, .. } = &it.sel
        && contains_agg(it)
    {
        return AggState::Native(args.iter().map(state_of).collect());
    }
    match &it.sel {
        Sel::Agg {
            f: AggFn::CountRows | AggFn::Count,
            ..
        } => AggState::Count(0),
        Sel::Agg {
            f: AggFn::Min | AggFn::Max,
            ..
        } => AggState::Best(None),
        Sel::Agg {
            f: AggFn::Sum | AggFn::Avg,
            arg: Some(a),
        } if matches!(a.ty, CqlType::Float | CqlType::Double) => {
            AggState::SumFloat(0.0, 0.0, 0.0, 0)
        }
        Sel::Agg {
            f: AggFn::Sum | AggFn::Avg,
            arg: Some(a),
        } if a.ty == CqlType::Varint => AggState::SumVarint(crate::bignum::BigInt::zero(), 0),
        Sel::Agg {
            f: AggFn::Sum,
            arg: Some(a),
        } if a.ty == CqlType::Decimal => AggState::SumDecimal(Default::default()),
        Sel::Agg {
            f: AggFn::Avg,
            arg: Some(a),
        } if a.ty == CqlType::Decimal => AggState::AvgDecimal(Default::default(), 0),
        Sel::Agg {
            f: AggFn::Sum | AggFn::Avg,
            ..
        } => AggState::SumInt(0, 0),
        _ => AggState::First(None),
    }
}

pub fn accumulate(
    states: &mut [AggState],
    items: &[SelItem],
    t: &TableSchema,
    p: &PartitionData,
    row: &Row,
    now_s: i32,
    static_only: bool,
) {
    for (st, it) in states.iter_mut().zip(items) {
        if let (AggState::Native(children), Sel::Native { args, .. }) = (&mut *st, &it.sel) {
            accumulate(children, args, t, p, row, now_s, static_only);
            continue;
        }
        let arg_val = |a: &Option<Box<SelItem>>| {
            a.as_ref()
                .and_then(|a| eval_row(t, a, p, row, now_s, static_only))
        };
        match (st, &it.sel) {
            (
                AggState::Count(n),
                Sel::Agg {
                    f: AggFn::CountRows,
                    ..
                },
            ) => *n += 1,
            (AggState::Count(n), Sel::Agg { arg, .. }) if arg_val(arg).is_some() => {
                *n += 1;
            }
            (AggState::Best(best), Sel::Agg { f, arg }) => {
                if let Some(v) = arg_val(arg) {
                    let better = match best {
                        None => true,
                        Some(cur) => {
                            let o = it.ty.compare(&v, cur);
                            if *f == AggFn::Min {
                                o.is_lt()
                            } else {
                                o.is_gt()
                            }
                        }
                    };
                    if better {
                        *best = Some(v);
                    }
                }
            }
            (AggState::SumInt(s, n), Sel::Agg { arg: Some(a), .. }) => {
                if let Some(x) =
                    eval_row(t, a, p, row, now_s, static_only).and_then(|v| as_i128(&a.ty, &v))
                {
                    *s += x;
                    *n += 1;
                }
            }
            (AggState::SumFloat(s, comp, simple, n), Sel::Agg { arg: Some(a), .. }) => {
                if let Some(x) =
                    eval_row(t, a, p, row, now_s, static_only).and_then(|v| as_f64(&a.ty, &v))
                {
                    *simple += x;
                    let y = x - *comp;
                    let rounded = *s + y;
                    *comp = (rounded - *s) - y;
                    *s = rounded;
                    *n += 1;
                }
            }
            (AggState::SumVarint(s, n), Sel::Agg { arg: Some(a), .. }) => {
                if let Some(v) = eval_row(t, a, p, row, now_s, static_only) {
                    *s = s.add(&crate::bignum::BigInt::from_be_bytes(&v));
                    *n += 1;
                }
            }
            (AggState::SumDecimal(s), Sel::Agg { arg: Some(a), .. }) => {
                if let Some(x) = eval_row(t, a, p, row, now_s, static_only)
                    .and_then(|v| crate::bignum::BigDecimal::from_cql(&v))
                {
                    *s = s.add(&x);
                }
            }
            (AggState::AvgDecimal(avg, n), Sel::Agg { arg: Some(a), .. }) => {
                if let Some(x) = eval_row(t, a, p, row, now_s, static_only)
                    .and_then(|v| crate::bignum::BigDecimal::from_cql(&v))
                {
                    *n = n.saturating_add(1);
                    *avg = avg.add(&x.sub(avg).div_half_even(*n));
                }
            }
            (AggState::First(slot @ None), _) => {
                *slot = Some(eval_row(t, it, p, row, now_s, static_only))
            }
            _ => {}
        }
    }
}

/// The output cells of a finished group (Cassandra's overflow: results wrap to the type).
pub fn finish(states: Vec<AggState>, items: &[SelItem]) -> Vec<Option<Bytes>> {
    states
        .into_iter()
        .zip(items)
        .map(|(st, it)| match (st, &it.sel) {
            (AggState::Native(children), Sel::Native { fname, sig, args }) => {
                let vals = finish(children, args);
                crate::functions::call(fname, sig, &vals, None)
                    .ok()
                    .flatten()
            }
            (AggState::Count(n), _) => Some(Bytes::copy_from_slice(&n.to_be_bytes())),
            (AggState::Best(b), _) => b,
            (AggState::SumInt(s, n), Sel::Agg { f: AggFn::Avg, .. }) => {
                from_i128(&it.ty, if n == 0 { 0 } else { s / n as i128 })
            }
            (AggState::SumInt(s, _), _) => from_i128(&it.ty, s),
            (AggState::SumFloat(s, comp, simple, n), sel) => {
                let f = match sel {
                    Sel::Agg { f, .. } => f,
                    _ => &AggFn::Sum,
                };
                // Same-signed infinities make the compensated sum NaN: use the plain sum.
                let mut total = s + comp;
                if total.is_nan() && simple.is_infinite() {
                    total = simple;
                }
                if *f == AggFn::Avg {
                    from_f64(&it.ty, if n == 0 { 0.0 } else { total / n as f64 })
                } else {
                    from_f64(&it.ty, total)
                }
            }
            (AggState::SumVarint(s, n), sel) => {
                let f = match sel {
                    Sel::Agg { f, .. } => f,
                    _ => &AggFn::Sum,
                };
                let v = if *f == AggFn::Avg && n > 0 {
                    match u32::try_from(n) {
                        Ok(d) => s.div_small(d).0,
                        Err(_) => s,
                    }
                } else if *f == AggFn::Avg {
                    crate::bignum::BigInt::zero()
                } else {
                    s
                };
                Some(Bytes::from(v.to_be_bytes()))
            }
            (AggState::SumDecimal(s), _) => Some(s.to_cql()),
            (AggState::AvgDecimal(avg, _), _) => Some(avg.to_cql()),
            (AggState::First(v), _) => v.flatten(),
            (AggState::Native(_), _) => None,
        })
        .collect()
}

/// Seconds left before an expiring cell expires (the `ttl()` selector: an int).
fn remaining_ttl(c: &Cell, now_s: i32) -> i32 {
    (c.local_expiry - i64::from(now_s)).clamp(0, i64::from(i32::MAX)) as i32
}
