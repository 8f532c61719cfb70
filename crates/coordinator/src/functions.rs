//! Cassandra 5.0's native scalar functions: their signatures, how a call picks one
//! (exact match first, then the one weakly assignable signature), the column name a call
//! gets, and their evaluation on serialized values. Used by selectors (`selector.rs`) and
//! by terms in INSERT/UPDATE (`values.rs`).
//!
//! Covered: `<type>AsBlob`/`blobAs<type>` (and `<type>_as_blob`/`blob_as_<type>`),
//! `toDate`/`toTimestamp`/`toUnixTimestamp` (and snake_case), `minTimeuuid`/`maxTimeuuid`,
//! `abs`/`exp`/`log`/`log10`/`round`, `toJson`/`fromJson`, the `mask_*` functions, the
//! `collection_*` functions and CAST.

use amphora_cql as ast;
use amphora_types::CqlType;
use amphora_types::cql_type::{split_collection, split_tuple};
use bytes::{BufMut, Bytes, BytesMut};

use crate::api::QueryError;
use crate::values::{EvalCtx, serialize_collection};

fn invalid(m: impl Into<String>) -> QueryError {
    QueryError::Invalid(m.into())
}

/// A native function, with its argument types fixed by resolution.
#[derive(Clone, Debug, PartialEq)]
pub enum Native {
    ToBlob,
    FromBlob,
    ToDate,
    ToTimestamp,
    ToUnixTimestamp,
    MinTimeuuid,
    MaxTimeuuid,
    /// `floor(time, duration[, start])`: rounds a timestamp, timeuuid, date or time down to
    /// a multiple of the duration (Cassandra 5.0's TimeFcts).
    Floor,
    Abs,
    Exp,
    Log,
    Log10,
    Round,
    Cast,
    ToJson,
    FromJson,
    MaskNull,
    MaskDefault,
    MaskReplace,
    MaskInner,
    MaskOuter,
    MaskHash,
    CollectionCount,
    CollectionMin,
    CollectionMax,
    CollectionSum,
    CollectionAvg,
    CollectionKeys,
    CollectionValues,
    /// `similarity_cosine/euclidean/dot_product` of two float vectors (Lucene's scores).
    Similarity(u8),
    /// `a + b`, `a - b`, `a * b`, `a / b`, `a % b` (numbers; timestamp/date ± duration).
    Operation(ast::BinaryOp),
}

/// One signature of a function.
#[derive(Clone, Debug)]
pub struct Sig {
    pub f: Native,
    pub params: Vec<CqlType>,
    pub ret: CqlType,
}

/// What is known of an argument before a signature is chosen.
#[derive(Clone, Debug)]
pub enum Arg<'a> {
    /// A selector or nested call with a known type.
    Typed(CqlType),
    /// A constant term (literal, collection literal, NULL) typed by its receiver.
    Term(&'a ast::Expr),
    /// A bind marker: takes the type of its receiver.
    Bind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fit {
    No,
    Weak,
    Exact,
}

const NUMERIC: [CqlType; 9] = [
    CqlType::Tinyint,
    CqlType::Smallint,
    CqlType::Int,
    CqlType::Bigint,
    CqlType::Float,
    CqlType::Double,
    CqlType::Decimal,
    CqlType::Varint,
    CqlType::Counter,
];

fn is_numeric(t: &CqlType) -> bool {
    NUMERIC.contains(t)
}

/// The natural type of a constant term, as Cassandra prefers it when overloads compete.
pub fn term_type(e: &ast::Expr) -> Option<CqlType> {
    use ast::Literal as L;
    Some(match e {
        ast::Expr::Literal(l) => match l {
            L::String(_) => CqlType::Text,
            L::Integer(s) => {
                if s.parse::<i32>().is_ok() {
                    CqlType::Int
                } else if s.parse::<i64>().is_ok() {
                    CqlType::Bigint
                } else {
                    CqlType::Varint
                }
            }
            L::Float(_) | L::NaN | L::Infinity | L::NegInfinity => CqlType::Double,
            L::Boolean(_) => CqlType::Boolean,
            L::Duration(_) => CqlType::Duration,
            L::Uuid(_) => CqlType::Uuid,
            L::Hex(_) => CqlType::Blob,
        },
        ast::Expr::Negate(inner) => term_type(inner)?,
        ast::Expr::List(items) => CqlType::List {
            elem: Box::new(items.first().and_then(term_type)?),
            frozen: false,
        },
        ast::Expr::Set(items) => CqlType::Set {
            elem: Box::new(items.first().and_then(term_type)?),
            frozen: false,
        },
        ast::Expr::Map(entries) => {
            let (k, v) = entries.first()?;
            CqlType::Map {
                key: Box::new(term_type(k)?),
                value: Box::new(term_type(v)?),
                frozen: false,
            }
        }
        _ => return None,
    })
}

/// Cassandra's `isValueCompatibleWith`: values of `arg` are valid values of `param`.
fn weakly_compatible(param: &CqlType, arg: &CqlType) -> bool {
    use CqlType as T;
    matches!(
        (param, arg),
        (T::Text, T::Ascii)
            | (T::Uuid, T::Timeuuid)
            | (T::Date, T::Int)
            | (T::Time, T::Bigint)
            | (T::Bigint, T::Timestamp)
            | (T::Timestamp, T::Bigint)
            | (T::Varint, T::Int | T::Bigint | T::Timestamp)
    )
}

fn fit(param: &CqlType, arg: &Arg<'_>, ctx: &EvalCtx<'_>) -> Fit {
    match arg {
        Arg::Typed(t) => {
            if t == param {
                Fit::Exact
            } else if weakly_compatible(param, t)
                || (param.is_multi_cell() || t.is_multi_cell()) && same_ignoring_frozen(param, t)
            {
                Fit::Weak
            } else {
                Fit::No
            }
        }
        Arg::Bind => Fit::Weak,
        Arg::Term(ast::Expr::Null) => Fit::Weak,
        Arg::Term(e) => {
            let preferred = term_type(e);
            if preferred.as_ref() == Some(param) {
                Fit::Exact
            } else if crate::values::encode(e, param, ctx, "argument").is_ok() {
                Fit::Weak
            } else {
                Fit::No
            }
        }
    }
}

fn same_ignoring_frozen(a: &CqlType, b: &CqlType) -> bool {
    use CqlType as T;
    match (a, b) {
        (T::List { elem: x, .. }, T::List { elem: y, .. })
        | (T::Set { elem: x, .. }, T::Set { elem: y, .. }) => x == y,
        (
            T::Map {
                key: k1, value: v1, ..
            },
            T::Map {
                key: k2, value: v2, ..
            },
        ) => k1 == k2 && v1 == v2,
        _ => false,
    }
}

/// The native types that have blob conversion functions, by their CQL name.
fn blob_type(name: &str) -> Option<CqlType> {
    use CqlType as T;
    Some(match name {
        "ascii" => T::Ascii,
        "bigint" => T::Bigint,
        "boolean" => T::Boolean,
        "counter" => T::Counter,
        "date" => T::Date,
        "decimal" => T::Decimal,
        "double" => T::Double,
        "duration" => T::Duration,
        "float" => T::Float,
        "inet" => T::Inet,
        "int" => T::Int,
        "smallint" => T::Smallint,
        "text" | "varchar" => T::Text,
        "time" => T::Time,
        "timestamp" => T::Timestamp,
        "timeuuid" => T::Timeuuid,
        "tinyint" => T::Tinyint,
        "uuid" => T::Uuid,
        "varint" => T::Varint,
        _ => return None,
    })
}

fn sig(f: Native, params: Vec<CqlType>, ret: CqlType) -> Sig {
    Sig { f, params, ret }
}

/// The signatures of a function name (lower case), or None when no such function exists.
/// Generic functions get signatures built from the type of their first argument.
fn signatures(name: &str, args: &[Arg<'_>]) -> Option<Vec<Sig>> {
    use CqlType as T;
    let first = match args.first() {
        Some(Arg::Typed(t)) => Some(t.clone()),
        Some(Arg::Term(e)) => term_type(e),
        _ => None,
    };
    let first_or_text = first.clone().unwrap_or(T::Text);
    let numeric = |f: Native| -> Vec<Sig> {
        NUMERIC
            .iter()
            .map(|t| sig(f.clone(), vec![t.clone()], t.clone()))
            .collect()
    };
    Some(match name {
        "todate" | "to_date" => vec![
            sig(Native::ToDate, vec![T::Timeuuid], T::Date),
            sig(Native::ToDate, vec![T::Timestamp], T::Date),
        ],
        "totimestamp" | "to_timestamp" => vec![
            sig(Native::ToTimestamp, vec![T::Timeuuid], T::Timestamp),
            sig(Native::ToTimestamp, vec![T::Date], T::Timestamp),
        ],
        "tounixtimestamp" | "to_unix_timestamp" => vec![
            sig(Native::ToUnixTimestamp, vec![T::Timeuuid], T::Bigint),
            sig(Native::ToUnixTimestamp, vec![T::Timestamp], T::Bigint),
            sig(Native::ToUnixTimestamp, vec![T::Date], T::Bigint),
        ],
        "mintimeuuid" | "min_timeuuid" => {
            vec![sig(Native::MinTimeuuid, vec![T::Timestamp], T::Timeuuid)]
        }
        "maxtimeuuid" | "max_timeuuid" => {
            vec![sig(Native::MaxTimeuuid, vec![T::Timestamp], T::Timeuuid)]
        }
        "abs" => numeric(Native::Abs),
        "exp" => numeric(Native::Exp),
        "log" => numeric(Native::Log),
        "log10" => numeric(Native::Log10),
        "round" => numeric(Native::Round),
        "floor" => vec![
            sig(Native::Floor, vec![T::Timestamp, T::Duration], T::Timestamp),
            sig(
                Native::Floor,
                vec![T::Timestamp, T::Duration, T::Timestamp],
                T::Timestamp,
            ),
            sig(Native::Floor, vec![T::Timeuuid, T::Duration], T::Timestamp),
            sig(
                Native::Floor,
                vec![T::Timeuuid, T::Duration, T::Timestamp],
                T::Timestamp,
            ),
            sig(Native::Floor, vec![T::Date, T::Duration], T::Date),
            sig(Native::Floor, vec![T::Date, T::Duration, T::Date], T::Date),
            sig(Native::Floor, vec![T::Time, T::Duration], T::Time),
        ],
        "tojson" | "to_json" => vec![sig(Native::ToJson, vec![first?], T::Text)],
        "fromjson" | "from_json" => vec![sig(Native::FromJson, vec![T::Text], T::Text)],
        "similarity_cosine" | "similarity_euclidean" | "similarity_dot_product" => {
            let v = match first? {
                v @ T::Vector { .. } => v,
                _ => return Some(Vec::new()),
            };
            let kind = match name {
                "similarity_cosine" => 0,
                "similarity_euclidean" => 1,
                _ => 2,
            };
            vec![sig(Native::Similarity(kind), vec![v.clone(), v], T::Float)]
        }
        "mask_null" => vec![sig(
            Native::MaskNull,
            vec![first_or_text.clone()],
            first_or_text,
        )],
        "mask_default" => vec![sig(
            Native::MaskDefault,
            vec![first_or_text.clone()],
            first_or_text,
        )],
        "mask_replace" => vec![sig(
            Native::MaskReplace,
            vec![first_or_text.clone(), first_or_text.clone()],
            first_or_text,
        )],
        "mask_inner" | "mask_outer" => {
            let f = if name == "mask_inner" {
                Native::MaskInner
            } else {
                Native::MaskOuter
            };
            let mut out = Vec::new();
            for t in [T::Text, T::Ascii] {
                out.push(sig(f.clone(), vec![t.clone(), T::Int, T::Int], t.clone()));
                out.push(sig(f.clone(), vec![t.clone(), T::Int, T::Int, T::Text], t));
            }
            out
        }
        "mask_hash" => vec![
            sig(Native::MaskHash, vec![first_or_text.clone()], T::Blob),
            sig(Native::MaskHash, vec![first_or_text, T::Text], T::Blob),
        ],
        "collection_count" | "collection_min" | "collection_max" | "collection_sum"
        | "collection_avg" | "collection_keys" | "collection_values" => {
            let coll = first?;
            let (elem, key, value) = match &coll {
                T::List { elem, .. } | T::Set { elem, .. } => ((**elem).clone(), None, None),
                T::Map { key, value, .. } => (
                    (**value).clone(),
                    Some((**key).clone()),
                    Some((**value).clone()),
                ),
                _ => return Some(Vec::new()),
            };
            let (f, ret) = match name {
                "collection_count" => (Native::CollectionCount, T::Int),
                "collection_min" if key.is_none() => (Native::CollectionMin, elem),
                "collection_max" if key.is_none() => (Native::CollectionMax, elem),
                "collection_sum" if key.is_none() && is_numeric(&elem) => {
                    (Native::CollectionSum, elem)
                }
                "collection_avg" if key.is_none() && is_numeric(&elem) => {
                    (Native::CollectionAvg, elem)
                }
                "collection_keys" if key.is_some() => (
                    Native::CollectionKeys,
                    T::Set {
                        elem: Box::new(key.unwrap_or(T::Text)),
                        frozen: true,
                    },
                ),
                "collection_values" if value.is_some() => (
                    Native::CollectionValues,
                    T::List {
                        elem: Box::new(value.unwrap_or(T::Text)),
                        frozen: true,
                    },
                ),
                _ => return Some(Vec::new()),
            };
            vec![sig(f, vec![coll], ret)]
        }
        n => {
            let (f, ty) = if let Some(t) = n.strip_prefix("blobas") {
                (Native::FromBlob, blob_type(t)?)
            } else if let Some(t) = n.strip_prefix("blob_as_") {
                (Native::FromBlob, blob_type(t)?)
            } else if let Some(t) = n.strip_suffix("asblob") {
                (Native::ToBlob, blob_type(t)?)
            } else if let Some(t) = n.strip_suffix("_as_blob") {
                (Native::ToBlob, blob_type(t)?)
            } else {
                return None;
            };
            if f == Native::FromBlob {
                vec![sig(f, vec![T::Blob], ty)]
            } else {
                vec![sig(f, vec![ty], T::Blob)]
            }
        }
    })
}

fn type_list(sigs: &[Sig], name: &str) -> String {
    sigs.iter()
        .map(|s| {
            format!(
                "system.{name} : ({}) -> {}",
                s.params
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                s.ret
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Picks the signature of `name(args)` as Cassandra's FunctionResolver does.
/// `shown` names the arguments for error messages.
pub fn resolve(
    name: &ast::QualifiedName,
    args: &[Arg<'_>],
    shown: &[String],
    ctx: &EvalCtx<'_>,
) -> Result<(String, Sig), QueryError> {
    let unknown = || {
        let full = match &name.keyspace {
            Some(ks) => format!("{}.{}", ks.name, name.name.name),
            None => name.name.name.clone(),
        };
        invalid(format!("Unknown function '{full}'"))
    };
    if let Some(ks) = &name.keyspace
        && ks.name != "system"
    {
        return Err(unknown());
    }
    let fname = name.name.name.as_str();
    let all = signatures(fname, args).ok_or_else(unknown)?;
    let sigs: Vec<Sig> = all
        .iter()
        .filter(|s| s.params.len() == args.len())
        .cloned()
        .collect();
    if sigs.is_empty() {
        let required = all.first().map(|s| s.params.len()).unwrap_or(0);
        if fname == "tojson" || fname == "to_json" {
            return Err(invalid(format!(
                "Invalid number of arguments for function system.{fname}(any)"
            )));
        }
        return Err(invalid(format!(
            "Invalid number of arguments in call to function system.{fname}: {required} required but {} provided",
            args.len()
        )));
    }
    if matches!(fname, "tojson" | "to_json")
        && let Some(Arg::Term(ast::Expr::Null)) = args.first()
    {
        return Err(invalid(format!(
            "Cannot infer type of argument NULL in call to function system.{fname}(any): use type casts to disambiguate"
        )));
    }
    let fits: Vec<Vec<Fit>> = sigs
        .iter()
        .map(|s| {
            s.params
                .iter()
                .zip(args)
                .map(|(p, a)| fit(p, a, ctx))
                .collect()
        })
        .collect();
    if sigs.len() == 1 {
        if let Some(i) = fits[0].iter().position(|f| *f == Fit::No) {
            return Err(invalid(format!(
                "Type error: {} cannot be passed as argument {i} of function system.{fname} of type {}",
                shown.get(i).map(String::as_str).unwrap_or("?"),
                sigs[0].params[i]
            )));
        }
        return Ok((fname.to_string(), sigs[0].clone()));
    }
    let exact: Vec<usize> = (0..sigs.len())
        .filter(|i| fits[*i].iter().all(|f| *f == Fit::Exact))
        .collect();
    let pick = if exact.len() == 1 {
        exact[0]
    } else {
        let ok: Vec<usize> = (0..sigs.len())
            .filter(|i| fits[*i].iter().all(|f| *f != Fit::No))
            .collect();
        match ok.len() {
            1 => ok[0],
            0 => {
                return Err(invalid(format!(
                    "Invalid call to function {fname}, none of its type signatures match (known type signatures: {})",
                    type_list(&sigs, fname)
                )));
            }
            _ => {
                return Err(invalid(format!(
                    "Ambiguous call to function {fname} (can be matched by following signatures: {}): use type casts to disambiguate",
                    type_list(&sigs, fname)
                )));
            }
        }
    };
    Ok((fname.to_string(), sigs[pick].clone()))
}

/// The casts Cassandra 5.0 defines (CastFcts), same-type casts excluded.
fn cast_exists(from: &CqlType, to: &CqlType) -> bool {
    use CqlType as T;
    if from == to {
        return false;
    }
    let textual = matches!(to, T::Text | T::Ascii);
    if is_numeric(from) {
        return (is_numeric(to) && *to != T::Counter) || textual;
    }
    match from {
        T::Ascii => *to == T::Text,
        T::Inet | T::Boolean | T::Time | T::Uuid => textual,
        T::Timeuuid => textual || matches!(to, T::Date | T::Timestamp),
        T::Timestamp => textual || *to == T::Date,
        T::Date => textual || *to == T::Timestamp,
        _ => false,
    }
}

/// The input type of the cast to `to` that a value of `from` goes through (an exact cast,
/// else the one weakly compatible one), as Cassandra resolves `cast_as_<to>`.
pub fn cast_input(from: &CqlType, to: &CqlType, shown: &str) -> Result<CqlType, QueryError> {
    use CqlType as T;
    let inputs: Vec<CqlType> = [
        T::Tinyint,
        T::Smallint,
        T::Int,
        T::Bigint,
        T::Float,
        T::Double,
        T::Decimal,
        T::Varint,
        T::Counter,
        T::Ascii,
        T::Text,
        T::Inet,
        T::Boolean,
        T::Time,
        T::Uuid,
        T::Timeuuid,
        T::Timestamp,
        T::Date,
    ]
    .into_iter()
    .filter(|i| cast_exists(i, to))
    .collect();
    let fname = format!("cast_as_{to}");
    if inputs.is_empty() {
        return Err(invalid(format!("{shown} cannot be cast to {to}")));
    }
    if inputs.contains(from) {
        return Ok(from.clone());
    }
    let weak: Vec<&CqlType> = inputs
        .iter()
        .filter(|i| weakly_compatible(i, from))
        .collect();
    match weak.as_slice() {
        [one] => Ok((*one).clone()),
        _ => {
            let sigs: Vec<Sig> = inputs
                .iter()
                .map(|i| sig(Native::Cast, vec![i.clone()], to.clone()))
                .collect();
            Err(invalid(format!(
                "Invalid call to function system.{fname}, none of its type signatures match (known type signatures: {})",
                type_list(&sigs, &fname)
            )))
        }
    }
}

/// Why a call failed at execution.
#[derive(Debug, thiserror::Error)]
pub enum FnError {
    /// Cassandra answers InvalidRequest (e.g. a blob that is no valid value of the type).
    #[error("{0}")]
    Invalid(String),
    /// Cassandra answers FunctionFailure.
    #[error("{0}")]
    Failure(String),
}

impl FnError {
    /// The CQL error of a failed call to `system.<fname>` with signature `s`.
    fn into_query_error(self, fname: &str, s: &Sig) -> QueryError {
        match self {
            FnError::Invalid(m) => QueryError::Invalid(m),
            FnError::Failure(message) => QueryError::FunctionFailure {
                keyspace: "system".into(),
                function: fname.to_string(),
                arg_types: s.params.iter().map(|p| p.to_string()).collect(),
                message,
            },
        }
    }
}

fn b(v: &[u8]) -> Option<Bytes> {
    Some(Bytes::copy_from_slice(v))
}

/// Evaluates `f` with the chosen signature on serialized arguments.
pub fn call(
    fname: &str,
    s: &Sig,
    args: &[Option<Bytes>],
    receiver: Option<&CqlType>,
) -> Result<Option<Bytes>, QueryError> {
    let arg0 = args.first().cloned().flatten();
    let p0 = s.params.first().cloned().unwrap_or(CqlType::Blob);
    match s.f {
        Native::ToJson => Ok(Some(Bytes::from(crate::json::to_json(
            &p0,
            arg0.as_deref(),
        )))),
        Native::MaskNull => Ok(None),
        Native::MaskDefault => Ok(Some(masked_default(&p0))),
        Native::MaskReplace => Ok(args.get(1).cloned().flatten()),
        Native::MaskHash => Ok(arg0.map(|v| Bytes::copy_from_slice(&sha256(&v)))),
        _ => {
            let Some(v) = arg0 else { return Ok(None) };
            eval_non_null(fname, s, &p0, v, args, receiver)
                .map_err(|e| e.into_query_error(fname, s))
        }
    }
}

fn eval_non_null(
    fname: &str,
    s: &Sig,
    p0: &CqlType,
    v: Bytes,
    args: &[Option<Bytes>],
    receiver: Option<&CqlType>,
) -> Result<Option<Bytes>, FnError> {
    match s.f {
        Native::ToBlob => Ok(Some(v)),
        Native::FromBlob => {
            if !v.is_empty() && s.ret.validate(&v).is_err() {
                return Err(FnError::Invalid(format!(
                    "In call to function system.{fname}, value 0x{} is not a valid binary representation for type {}",
                    crate::values::hex(&v),
                    s.ret
                )));
            }
            Ok(Some(v))
        }
        Native::ToDate | Native::ToTimestamp | Native::ToUnixTimestamp => {
            let Some(ms) = millis_of(p0, &v) else {
                return Ok(None);
            };
            Ok(match s.f {
                Native::ToDate => b(&date_of_millis(ms).to_be_bytes()),
                _ => b(&ms.to_be_bytes()),
            })
        }
        Native::MinTimeuuid | Native::MaxTimeuuid => {
            let Some(ms) = millis_of(p0, &v) else {
                return Ok(None);
            };
            Ok(b(&bound_timeuuid(ms, s.f == Native::MaxTimeuuid)))
        }
        Native::Abs | Native::Exp | Native::Log | Native::Log10 | Native::Round => {
            Ok(math(&s.f, p0, &v))
        }
        Native::Floor => floor(s, p0, &v, args),
        Native::Cast => Ok(cast(p0, &s.ret, &v)),
        Native::FromJson => {
            let text = String::from_utf8_lossy(&v).into_owned();
            let target = receiver.cloned().unwrap_or(CqlType::Text);
            let j: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                FnError::Failure(format!(
                    "execution of 'system.fromjson[text]' failed: Could not decode JSON string '{text}': {e}"
                ))
            })?;
            crate::json::from_json(&target, &j).map_err(|e| FnError::Failure(e.to_string()))
        }
        Native::MaskInner | Native::MaskOuter => {
            let int_arg = |i: usize| {
                args.get(i)
                    .cloned()
                    .flatten()
                    .and_then(|x| <[u8; 4]>::try_from(&x[..]).ok())
                    .map(|x| i32::from_be_bytes(x).max(0) as usize)
                    .unwrap_or(0)
            };
            let (begin, end) = (int_arg(1), int_arg(2));
            let pad = args
                .get(3)
                .cloned()
                .flatten()
                .and_then(|p| String::from_utf8_lossy(&p).chars().next())
                .unwrap_or('*');
            let text = String::from_utf8_lossy(&v);
            let chars: Vec<char> = text.chars().collect();
            let n = chars.len();
            let out: String = chars
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let edge = i < begin || i + end >= n;
                    let masked = if s.f == Native::MaskInner {
                        !edge
                    } else {
                        edge
                    };
                    if masked { pad } else { *c }
                })
                .collect();
            Ok(Some(Bytes::from(out)))
        }
        Native::CollectionCount => {
            let per = if matches!(p0, CqlType::Map { .. }) {
                2
            } else {
                1
            };
            let n = split_collection(&v, per)
                .map(|x| x.len() / per)
                .unwrap_or(0);
            Ok(b(&(n as i32).to_be_bytes()))
        }
        Native::CollectionMin | Native::CollectionMax => {
            let elem = s.ret.clone();
            let items = split_collection(&v, 1).unwrap_or_default();
            let best = items.into_iter().flatten().reduce(|a, x| {
                let o = elem.compare(x, a);
                if (s.f == Native::CollectionMin) == o.is_lt() {
                    x
                } else {
                    a
                }
            });
            Ok(best.map(Bytes::copy_from_slice))
        }
        Native::CollectionSum | Native::CollectionAvg => {
            let elem = s.ret.clone();
            let items: Vec<&[u8]> = split_collection(&v, 1)
                .unwrap_or_default()
                .into_iter()
                .flatten()
                .collect();
            let n = items.len();
            if matches!(elem, CqlType::Float | CqlType::Double) {
                let sum: f64 = items.iter().filter_map(|x| as_f64(&elem, x)).sum();
                let r = if s.f == Native::CollectionAvg {
                    if n == 0 { 0.0 } else { sum / n as f64 }
                } else {
                    sum
                };
                Ok(from_f64(&elem, r))
            } else {
                let sum: i128 = items.iter().filter_map(|x| as_i128(&elem, x)).sum();
                let r = if s.f == Native::CollectionAvg {
                    if n == 0 { 0 } else { sum / n as i128 }
                } else {
                    sum
                };
                Ok(from_i128(&elem, r))
            }
        }
        Native::CollectionKeys | Native::CollectionValues => {
            let items = split_collection(&v, 2).unwrap_or_default();
            let pick = usize::from(s.f == Native::CollectionValues);
            Ok(Some(serialize_collection(
                items.chunks(2).map(|kv| kv.get(pick).copied().flatten()),
            )))
        }
        Native::Similarity(kind) => {
            let Some(r) = args.get(1).cloned().flatten() else {
                return Ok(None);
            };
            let floats = |x: &[u8]| -> Vec<f32> {
                x.chunks_exact(4)
                    .map(|c| f32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            };
            let (a, w) = (floats(&v), floats(&r));
            let f = match kind {
                0 => crate::ann::Similarity::Cosine,
                1 => crate::ann::Similarity::Euclidean,
                _ => crate::ann::Similarity::DotProduct,
            };
            let score = f.score(&a, &w);
            Ok(b(&score.to_be_bytes()))
        }
        Native::Operation(op) => {
            let Some(r) = args.get(1).cloned().flatten() else {
                return Ok(None);
            };
            let rt = s.params.get(1).cloned().unwrap_or(CqlType::Int);
            operation(op, p0, &rt, &s.ret, &v, &r)
        }
        Native::ToJson
        | Native::MaskNull
        | Native::MaskDefault
        | Native::MaskReplace
        | Native::MaskHash => Ok(None),
    }
}

/// The byte size Cassandra ranks numeric types by when it types an operation.
fn numeric_size(t: &CqlType) -> Option<usize> {
    Some(match t {
        CqlType::Tinyint => 1,
        CqlType::Smallint => 2,
        CqlType::Int | CqlType::Float => 4,
        CqlType::Bigint | CqlType::Counter | CqlType::Double => 8,
        CqlType::Varint | CqlType::Decimal => usize::MAX,
        _ => return None,
    })
}

/// The result type of `l op r`, or None when Cassandra has no such operation.
pub fn operation_type(op: ast::BinaryOp, l: &CqlType, r: &CqlType) -> Option<CqlType> {
    use CqlType as T;
    if let (Some(a), Some(b)) = (numeric_size(l), numeric_size(r)) {
        let floating = matches!(l, T::Float | T::Double | T::Decimal)
            || matches!(r, T::Float | T::Double | T::Decimal);
        let size = a.max(b);
        return Some(match (floating, size) {
            (true, 4) => T::Float,
            (true, 8) => T::Double,
            (true, _) => T::Decimal,
            (false, 1) => T::Tinyint,
            (false, 2) => T::Smallint,
            (false, 4) => T::Int,
            (false, 8) => T::Bigint,
            (false, _) => T::Varint,
        });
    }
    match (l, r, op) {
        (T::Timestamp | T::Date, T::Duration, ast::BinaryOp::Add | ast::BinaryOp::Sub) => {
            Some(l.clone())
        }
        (T::Ascii, T::Ascii, ast::BinaryOp::Add) => Some(T::Ascii),
        (T::Text | T::Ascii, T::Text | T::Ascii, ast::BinaryOp::Add) => Some(T::Text),
        _ => None,
    }
}

/// A decimal as (unscaled, scale), when the unscaled value fits an i128.
fn decimal_parts(ty: &CqlType, v: &[u8]) -> Option<(i128, i32)> {
    let text = match ty {
        CqlType::Float => java_float(f32::from_be_bytes(v.try_into().ok()?)),
        CqlType::Double => java_double(f64::from_be_bytes(v.try_into().ok()?)),
        _ => crate::json::value_text(ty, v)?,
    };
    let (mant, exp) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i32>().ok()?),
        None => (text.as_str(), 0),
    };
    let (int_part, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let unscaled: i128 = format!("{int_part}{frac}").parse().ok()?;
    Some((unscaled, frac.len() as i32 - exp))
}

fn decimal_bytes(unscaled: i128, scale: i32) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i32(scale);
    let be = unscaled.to_be_bytes();
    let mut start = 0;
    while start < 15 {
        let (x, next) = (be[start], be[start + 1]);
        if (x == 0 && next & 0x80 == 0) || (x == 0xff && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    out.put_slice(&be[start..]);
    out.freeze()
}

fn rescale(u: i128, from: i32, to: i32) -> Option<i128> {
    u.checked_mul(10i128.checked_pow(u32::try_from(to - from).ok()?)?)
}

fn operation(
    op: ast::BinaryOp,
    lt: &CqlType,
    rt: &CqlType,
    ret: &CqlType,
    l: &[u8],
    r: &[u8],
) -> Result<Option<Bytes>, FnError> {
    use CqlType as T;
    use ast::BinaryOp as O;
    let failed = |m: &str| {
        FnError::Failure(format!(
            "the operation '{lt} {} {rt}' failed: {m}",
            op.as_str()
        ))
    };
    match ret {
        T::Text | T::Ascii => {
            let mut out = BytesMut::with_capacity(l.len() + r.len());
            out.put_slice(l);
            out.put_slice(r);
            Ok(Some(out.freeze()))
        }
        T::Timestamp | T::Date => {
            let Some((months, days, nanos)) = duration_parts(r) else {
                return Ok(None);
            };
            if *ret == T::Date && nanos != 0 {
                return Err(failed(&format!(
                    "The duration must have a day precision. Was: {}",
                    crate::json::value_text(&T::Duration, r).unwrap_or_default()
                )));
            }
            let sign = if op == O::Sub { -1 } else { 1 };
            let (day, ms_of_day) = match ret {
                T::Timestamp => {
                    let ms = i64::from_be_bytes(l.try_into().map_err(|_| failed("bad value"))?);
                    (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000))
                }
                _ => {
                    let d = u32::from_be_bytes(l.try_into().map_err(|_| failed("bad value"))?);
                    (d as i64 - (1i64 << 31), 0)
                }
            };
            let (y, m, d) = crate::values::civil_from_days(day);
            let total = y * 12 + (m as i64 - 1) + sign * months;
            let (ny, nm) = (total.div_euclid(12), total.rem_euclid(12) as u32 + 1);
            let dim = days_in_month(ny, nm);
            let day = crate::values::days_from_civil(ny, nm, d.min(dim)) + sign * days;
            Ok(match ret {
                T::Timestamp => {
                    let ms = day * 86_400_000 + ms_of_day + sign * nanos / 1_000_000;
                    b(&ms.to_be_bytes())
                }
                _ => b(&((day + (1i64 << 31)) as u32).to_be_bytes()),
            })
        }
        T::Float => {
            let (x, y) = (
                as_f64(lt, l).unwrap_or(0.0) as f32,
                as_f64(rt, r).unwrap_or(0.0) as f32,
            );
            let z = match op {
                O::Add => x + y,
                O::Sub => x - y,
                O::Mul => x * y,
                O::Div => x / y,
                O::Rem => x % y,
            };
            Ok(b(&z.to_be_bytes()))
        }
        T::Double => {
            let (x, y) = (as_f64(lt, l).unwrap_or(0.0), as_f64(rt, r).unwrap_or(0.0));
            let z = match op {
                O::Add => x + y,
                O::Sub => x - y,
                O::Mul => x * y,
                O::Div => x / y,
                O::Rem => x % y,
            };
            Ok(b(&z.to_be_bytes()))
        }
        T::Decimal => {
            let (Some((a, sa)), Some((c, sc))) = (decimal_parts(lt, l), decimal_parts(rt, r))
            else {
                return Ok(None);
            };
            let s = sa.max(sc);
            let (a2, c2) = (rescale(a, sa, s), rescale(c, sc, s));
            let out = match op {
                O::Add => a2
                    .zip(c2)
                    .and_then(|(x, y)| x.checked_add(y))
                    .map(|u| (u, s)),
                O::Sub => a2
                    .zip(c2)
                    .and_then(|(x, y)| x.checked_sub(y))
                    .map(|u| (u, s)),
                O::Mul => a.checked_mul(c).map(|u| (u, sa + sc)),
                O::Rem => {
                    if c == 0 {
                        return Err(failed("Division by zero"));
                    }
                    a2.zip(c2)
                        .and_then(|(x, y)| x.checked_rem(y))
                        .map(|u| (u, s))
                }
                O::Div => {
                    if c == 0 {
                        return Err(failed("Division by zero"));
                    }
                    let text = decimal_divide(a, sa, c, sc);
                    return Ok(crate::values::encode_literal(
                        &ast::Literal::Float(text),
                        &T::Decimal,
                    ));
                }
            };
            Ok(out.map(|(u, sc)| decimal_bytes(u, sc)))
        }
        _ => {
            let (Some(x), Some(y)) = (as_i128(lt, l), as_i128(rt, r)) else {
                return Ok(None);
            };
            let z = match op {
                O::Add => x.checked_add(y),
                O::Sub => x.checked_sub(y),
                O::Mul => x.checked_mul(y),
                O::Div | O::Rem if y == 0 => return Err(failed("/ by zero")),
                O::Div => x.checked_div(y),
                O::Rem => x.checked_rem(y),
            };
            Ok(z.and_then(|z| from_i128(ret, z)))
        }
    }
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

/// `floor(time, duration[, start])` on non-null arguments (a null duration or start gives
/// null, as in Cassandra).
fn floor(
    s: &Sig,
    p0: &CqlType,
    v: &[u8],
    args: &[Option<Bytes>],
) -> Result<Option<Bytes>, FnError> {
    let Some(d) = args.get(1).cloned().flatten() else {
        return Ok(None);
    };
    let start = args.get(2).cloned().flatten();
    if args.len() > 2 && start.is_none() {
        return Ok(None);
    }
    let Some(dur) = duration_parts(&d) else {
        return Ok(None);
    };
    let shown = || crate::json::value_text(&CqlType::Duration, &d).unwrap_or_default();
    if *p0 == CqlType::Time {
        let Ok(t) = <[u8; 8]>::try_from(v).map(i64::from_be_bytes) else {
            return Ok(None);
        };
        return floor_time(t, dur).map(|t| b(&t.to_be_bytes()));
    }
    if *p0 == CqlType::Date {
        if dur.2 != 0 {
            return Err(FnError::Invalid(format!(
                "The floor on date values cannot be computed for the {} duration as precision is below 1 day",
                shown()
            )));
        }
    } else if dur.2 % 1_000_000 != 0 {
        return Err(FnError::Invalid(format!(
            "The floor cannot be computed for the {} duration as precision is below 1 millisecond",
            shown()
        )));
    }
    let Some(time_ms) = millis_of(p0, v) else {
        return Ok(None);
    };
    let start_ty = s.params.get(2).unwrap_or(&CqlType::Timestamp);
    let start_ms = match &start {
        Some(x) => match millis_of(start_ty, x) {
            Some(ms) => ms,
            None => return Ok(None),
        },
        None => 0,
    };
    let ms = floor_timestamp(time_ms, dur, start_ms)?;
    Ok(match s.ret {
        CqlType::Date => b(&date_of_millis(ms).to_be_bytes()),
        _ => b(&ms.to_be_bytes()),
    })
}

/// A time in milliseconds moved by whole months, the day clamped to the target month's
/// length (java.util.Calendar's `add(MONTH, n)`, which Cassandra's floor relies on).
fn add_months(ms: i64, months: i64) -> i64 {
    let (day, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (y, m, d) = crate::values::civil_from_days(day);
    let total = y * 12 + (m as i64 - 1) + months;
    let (ny, nm) = (total.div_euclid(12), total.rem_euclid(12) as u32 + 1);
    crate::values::days_from_civil(ny, nm, d.min(days_in_month(ny, nm))) * 86_400_000 + ms_of_day
}

/// Months since year 0 of a time in milliseconds (UTC).
fn month_index(ms: i64) -> i64 {
    let (y, m, _) = crate::values::civil_from_days(ms.div_euclid(86_400_000));
    y * 12 + m as i64 - 1
}

/// Rounds `time_ms` down to `start_ms` plus the largest whole number of durations that
/// does not pass it (Cassandra's `Duration.floorTimestamp`, UTC only).
pub fn floor_timestamp(
    time_ms: i64,
    (months, days, nanos): (i64, i64, i64),
    start_ms: i64,
) -> Result<i64, FnError> {
    if start_ms > time_ms {
        return Err(FnError::Invalid(
            "The floor function starting time is greater than the provided time".into(),
        ));
    }
    if months < 0 || days < 0 || nanos < 0 {
        return Err(FnError::Invalid(
            "Negative durations are not supported by the floor function".into(),
        ));
    }
    let step_ms = days
        .saturating_mul(86_400_000)
        .saturating_add(nanos / 1_000_000);
    if months == 0 {
        if step_ms == 0 {
            return Ok(time_ms);
        }
        return Ok(time_ms - (time_ms - start_ms) % step_ms);
    }
    // Estimates the multiplier from the months alone, then steps back while the day and
    // time parts overshoot.
    let mut multiplier = (month_index(time_ms) - month_index(start_ms)) / months;
    let mut base = add_months(start_ms, multiplier * months);
    if days == 0 && nanos == 0 {
        return Ok(base);
    }
    let mut floor = base + multiplier * step_ms;
    while floor > time_ms && multiplier > 0 {
        multiplier -= 1;
        base = add_months(base, -months);
        floor = base + multiplier * step_ms;
    }
    Ok(floor.max(start_ms))
}

/// Rounds a time of day (nanoseconds) down to a multiple of a duration shorter than a day.
pub fn floor_time(time_ns: i64, (months, days, nanos): (i64, i64, i64)) -> Result<i64, FnError> {
    if months < 0 || days < 0 || nanos < 0 {
        return Err(FnError::Invalid(
            "Negative durations are not supported by the floor function".into(),
        ));
    }
    if months != 0 || days != 0 || nanos > 86_400_000_000_000 {
        return Err(FnError::Invalid(
            "For time values, the floor can only be computed for durations smaller that a day"
                .into(),
        ));
    }
    if nanos == 0 {
        return Ok(time_ns);
    }
    Ok(time_ns - time_ns % nanos)
}

/// A duration value's (months, days, nanoseconds).
fn duration_parts(v: &[u8]) -> Option<(i64, i64, i64)> {
    let mut rest = v;
    let mut out = [0i64; 3];
    for x in &mut out {
        let (u, n) = amphora_types::cql_type::read_unsigned_vint(rest)?;
        *x = ((u >> 1) as i64) ^ -((u & 1) as i64);
        rest = rest.get(n..)?;
    }
    Some((out[0], out[1], out[2]))
}

/// Milliseconds since the epoch of a timeuuid, timestamp or date value.
pub fn millis_of(ty: &CqlType, v: &[u8]) -> Option<i64> {
    match ty {
        CqlType::Timeuuid => (v.len() == 16).then(|| crate::values::timeuuid_millis(v)),
        CqlType::Timestamp | CqlType::Bigint => Some(i64::from_be_bytes(v.try_into().ok()?)),
        CqlType::Date | CqlType::Int => {
            Some((u32::from_be_bytes(v.try_into().ok()?) as i64 - (1i64 << 31)) * 86_400_000)
        }
        _ => None,
    }
}

fn date_of_millis(ms: i64) -> u32 {
    (ms.div_euclid(86_400_000) + (1i64 << 31)) as u32
}

const UUID_EPOCH_OFFSET_100NS: i64 = 0x01B2_1DD2_1381_4000;

/// The smallest / largest timeuuid of a millisecond, as Cassandra's UUIDGen builds them.
pub fn bound_timeuuid(ms: i64, max: bool) -> [u8; 16] {
    let ts = (ms
        .wrapping_mul(10_000)
        .wrapping_add(UUID_EPOCH_OFFSET_100NS)
        .wrapping_add(if max { 9_999 } else { 0 })) as u64;
    let mut u = [0u8; 16];
    u[0..4].copy_from_slice(&((ts & 0xFFFF_FFFF) as u32).to_be_bytes());
    u[4..6].copy_from_slice(&(((ts >> 32) & 0xFFFF) as u16).to_be_bytes());
    u[6..8].copy_from_slice(&((((ts >> 48) & 0x0FFF) as u16) | 0x1000).to_be_bytes());
    u[8..16].fill(if max { 0x7f } else { 0x80 });
    u
}

/// A numeric value as f64.
pub fn as_f64(ty: &CqlType, v: &[u8]) -> Option<f64> {
    Some(match ty {
        CqlType::Float => f32::from_be_bytes(v.try_into().ok()?) as f64,
        CqlType::Double => f64::from_be_bytes(v.try_into().ok()?),
        CqlType::Decimal => crate::json::value_text(ty, v)?.parse().ok()?,
        _ => as_i128(ty, v)? as f64,
    })
}

/// A numeric value as an integer (decimals and floats truncated toward zero).
pub fn as_i128(ty: &CqlType, v: &[u8]) -> Option<i128> {
    Some(match ty {
        CqlType::Int => i32::from_be_bytes(v.try_into().ok()?) as i128,
        CqlType::Bigint | CqlType::Counter | CqlType::Timestamp => {
            i64::from_be_bytes(v.try_into().ok()?) as i128
        }
        CqlType::Smallint => i16::from_be_bytes(v.try_into().ok()?) as i128,
        CqlType::Tinyint => i8::from_be_bytes(v.try_into().ok()?) as i128,
        CqlType::Varint => crate::json::value_text(ty, v)?.parse().ok()?,
        CqlType::Decimal => {
            let t = crate::json::value_text(ty, v)?;
            let int_part = t.split('.').next().unwrap_or("0");
            match int_part {
                "" | "-" => 0,
                s => s.parse().ok()?,
            }
        }
        CqlType::Float | CqlType::Double => as_f64(ty, v)? as i128,
        _ => return None,
    })
}

/// An integer as a value of `ty` (fixed-size types wrap, as Java's narrowing does).
pub fn from_i128(ty: &CqlType, n: i128) -> Option<Bytes> {
    Some(match ty {
        CqlType::Int => Bytes::copy_from_slice(&(n as i32).to_be_bytes()),
        CqlType::Bigint | CqlType::Counter => Bytes::copy_from_slice(&(n as i64).to_be_bytes()),
        CqlType::Smallint => Bytes::copy_from_slice(&(n as i16).to_be_bytes()),
        CqlType::Tinyint => Bytes::copy_from_slice(&(n as i8).to_be_bytes()),
        CqlType::Float => Bytes::copy_from_slice(&(n as f32).to_be_bytes()),
        CqlType::Double => Bytes::copy_from_slice(&(n as f64).to_be_bytes()),
        CqlType::Varint | CqlType::Decimal => {
            crate::values::encode_literal(&ast::Literal::Integer(n.to_string()), ty)?
        }
        _ => return None,
    })
}

/// A float as a value of `ty` (integers saturate, as Java's `(int) d` does).
pub fn from_f64(ty: &CqlType, x: f64) -> Option<Bytes> {
    match ty {
        CqlType::Float => Some(Bytes::copy_from_slice(&(x as f32).to_be_bytes())),
        CqlType::Double => Some(Bytes::copy_from_slice(&x.to_be_bytes())),
        CqlType::Decimal => {
            if !x.is_finite() {
                return None;
            }
            crate::values::encode_literal(&ast::Literal::Float(java_double(x)), ty)
        }
        CqlType::Int => from_i128(ty, x as i32 as i128),
        CqlType::Smallint => from_i128(ty, x as i32 as i128),
        CqlType::Tinyint => from_i128(ty, x as i32 as i128),
        _ => from_i128(ty, x as i64 as i128),
    }
}

fn math(f: &Native, ty: &CqlType, v: &[u8]) -> Option<Bytes> {
    use CqlType as T;
    let unary = |x: f64| -> f64 {
        match f {
            Native::Exp => x.exp(),
            Native::Log => x.ln(),
            Native::Log10 => x.log10(),
            _ => x,
        }
    };
    match ty {
        T::Float | T::Double => {
            let x = as_f64(ty, v)?;
            let r = match f {
                Native::Abs => x.abs(),
                Native::Round => java_round(x, *ty == T::Float),
                _ => unary(x),
            };
            from_f64(ty, r)
        }
        T::Decimal => {
            let text = crate::json::value_text(ty, v)?;
            match f {
                Native::Abs => crate::values::encode_literal(
                    &ast::Literal::Float(text.trim_start_matches('-').to_string()),
                    ty,
                ),
                Native::Round => {
                    crate::values::encode_literal(&ast::Literal::Integer(round_half_up(&text)?), ty)
                }
                Native::Log | Native::Log10 => {
                    let digits = text.trim_start_matches('-').replace('.', "");
                    let precision = digits.trim_start_matches('0').len().clamp(28, 34);
                    let out = decimal_log(&text, *f == Native::Log10, precision)?;
                    crate::values::encode_literal(&ast::Literal::Float(out), ty)
                }
                _ => from_f64(ty, unary(text.parse().ok()?)),
            }
        }
        T::Varint => {
            let n = as_i128(ty, v)?;
            match f {
                Native::Abs => from_i128(ty, n.checked_abs()?),
                Native::Round => from_i128(ty, n),
                Native::Log | Native::Log10 => {
                    // Cassandra computes the decimal logarithm and truncates it.
                    let r = decimal_log(&n.to_string(), *f == Native::Log10, 28)?;
                    let int_part = r.split('.').next().unwrap_or("0");
                    from_i128(ty, int_part.parse().ok()?)
                }
                _ => {
                    let r = unary(n as f64);
                    if r.is_finite() {
                        from_i128(ty, r.trunc() as i128)
                    } else {
                        None
                    }
                }
            }
        }
        _ => {
            let n = as_i128(ty, v)?;
            match f {
                // Java's Math.abs overflows on the minimum value.
                Native::Abs => from_i128(ty, n.abs()),
                Native::Round => from_i128(ty, n),
                _ => {
                    let r = unary(n as f64);
                    match ty {
                        T::Bigint | T::Counter => from_i128(ty, r as i64 as i128),
                        _ => from_i128(ty, r as i32 as i128),
                    }
                }
            }
        }
    }
}

/// A non-negative integer in base 1e9 limbs, little-endian: just enough arithmetic for
/// decimal logarithms to 34 significant digits.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Big(Vec<u64>);

const LIMB: u64 = 1_000_000_000;

impl Big {
    fn parse(digits: &str) -> Option<Big> {
        let digits = digits.trim_start_matches('0');
        let mut limbs = Vec::new();
        let mut end = digits.len();
        while end > 0 {
            let start = end.saturating_sub(9);
            limbs.push(digits.get(start..end)?.parse().ok()?);
            end = start;
        }
        Some(Big(limbs).trimmed())
    }

    fn pow10(n: usize) -> Big {
        Big::parse(&format!("1{}", "0".repeat(n))).unwrap_or(Big(Vec::new()))
    }

    fn trimmed(mut self) -> Big {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
        self
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn text(&self) -> String {
        let mut out = match self.0.last() {
            Some(top) => top.to_string(),
            None => return "0".into(),
        };
        for limb in self.0.iter().rev().skip(1) {
            out += &format!("{limb:09}");
        }
        out
    }

    fn cmp(&self, o: &Big) -> std::cmp::Ordering {
        self.0
            .len()
            .cmp(&o.0.len())
            .then_with(|| self.0.iter().rev().cmp(o.0.iter().rev()))
    }

    fn add(&self, o: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len().max(o.0.len()) + 1);
        let mut carry = 0;
        for i in 0..self.0.len().max(o.0.len()) {
            let x = self.0.get(i).unwrap_or(&0) + o.0.get(i).unwrap_or(&0) + carry;
            out.push(x % LIMB);
            carry = x / LIMB;
        }
        if carry > 0 {
            out.push(carry);
        }
        Big(out).trimmed()
    }

    /// `self - o`, for `self >= o`.
    fn sub(&self, o: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = 0i64;
        for (i, x) in self.0.iter().enumerate() {
            let mut d = *x as i64 - *o.0.get(i).unwrap_or(&0) as i64 - borrow;
            borrow = i64::from(d < 0);
            if d < 0 {
                d += LIMB as i64;
            }
            out.push(d as u64);
        }
        Big(out).trimmed()
    }

    fn mul(&self, o: &Big) -> Big {
        let mut out = vec![0u64; self.0.len() + o.0.len() + 1];
        for (i, x) in self.0.iter().enumerate() {
            let mut carry = 0;
            for (j, y) in o.0.iter().enumerate() {
                let t = out[i + j] + x * y + carry;
                out[i + j] = t % LIMB;
                carry = t / LIMB;
            }
            let mut k = i + o.0.len();
            while carry > 0 {
                let t = out[k] + carry;
                out[k] = t % LIMB;
                carry = t / LIMB;
                k += 1;
            }
        }
        Big(out).trimmed()
    }

    fn div_small(&self, d: u64) -> Big {
        let mut out = vec![0u64; self.0.len()];
        let mut rem = 0u64;
        for i in (0..self.0.len()).rev() {
            let cur = rem * LIMB + self.0[i];
            out[i] = cur / d;
            rem = cur % d;
        }
        Big(out).trimmed()
    }

    /// `floor(self / 10^p)`.
    fn shift_down(&self, p: usize) -> Big {
        let limbs = p / 9;
        let rest = Big(self.0.get(limbs..).unwrap_or(&[]).to_vec());
        rest.div_small(10u64.pow((p % 9) as u32))
    }

    /// `floor(self * 10^p / d)`, by decimal long division.
    fn div_scaled(&self, d: &Big, p: usize) -> Big {
        let ten = Big(vec![10]);
        let mut rem = Big(Vec::new());
        let mut q = String::new();
        for c in self.text().chars().chain(std::iter::repeat_n('0', p)) {
            rem = rem
                .mul(&ten)
                .add(&Big(vec![u64::from(c.to_digit(10).unwrap_or(0))]));
            let mut k = 0;
            while rem.cmp(d) != std::cmp::Ordering::Less {
                rem = rem.sub(d);
                k += 1;
            }
            q.push(char::from(b'0' + k));
        }
        Big::parse(&q).unwrap_or(Big(Vec::new()))
    }
}

/// Fractional digits the logarithms are computed with before rounding.
const LOG_SCALE: usize = 60;

/// `ln(m)` for `m` given scaled by 10^LOG_SCALE, `m >= 1`: 2·atanh((m-1)/(m+1)).
fn ln_scaled(m: &Big) -> Big {
    let one = Big::pow10(LOG_SCALE);
    let z = m.sub(&one).div_scaled(&m.add(&one), LOG_SCALE);
    let z2 = z.mul(&z).shift_down(LOG_SCALE);
    let mut term = z;
    let mut sum = Big(Vec::new());
    let mut k = 1u64;
    while !term.is_zero() {
        sum = sum.add(&term.div_small(k));
        term = term.mul(&z2).shift_down(LOG_SCALE);
        k += 2;
    }
    sum.add(&sum)
}

/// `ln(x)` or `log10(x)` of a positive decimal's text, rounded HALF_EVEN to `precision`
/// significant digits as BigDecimal's MathContext does; None for x <= 0.
fn decimal_log(text: &str, base10: bool, precision: usize) -> Option<String> {
    if text.starts_with('-') {
        return None;
    }
    let (int_part, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = format!("{int_part}{frac}");
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return None;
    }
    // x = 0.d1d2d3… · 10^e10 with d1 != 0, so x = m · 10^(e10 - 1) with m in [1, 10).
    let leading_zeros = digits.len() - significant.len();
    let exp10 = int_part.len() as i64 - leading_zeros as i64 - 1;
    let m = Big::parse(&format!(
        "{significant}{}",
        "0".repeat(LOG_SCALE.saturating_sub(significant.len() - 1))
    ))?;
    let ln_m = ln_scaled(&m);
    let ln10 = ln_scaled(&Big::pow10(LOG_SCALE + 1));
    let whole = Big::parse(&exp10.unsigned_abs().to_string()).unwrap_or(Big(Vec::new()));
    let unit = if base10 {
        Big::pow10(LOG_SCALE)
    } else {
        ln10.clone()
    };
    let frac_part = if base10 {
        ln_m.div_scaled(&ln10, LOG_SCALE)
    } else {
        ln_m
    };
    let shift = whole.mul(&unit);
    let (neg, value) = if exp10 >= 0 {
        (false, frac_part.add(&shift))
    } else if shift.cmp(&frac_part) == std::cmp::Ordering::Greater {
        (true, shift.sub(&frac_part))
    } else {
        (false, frac_part.sub(&shift))
    };
    if value.is_zero() {
        return Some("0".into());
    }
    Some(round_significant(&value.text(), LOG_SCALE, precision, neg))
}

/// `(a·10^-sa) / (c·10^-sc)` to 28 significant digits (HALF_EVEN); an exact quotient keeps
/// only the digits it needs, down to the preferred scale `sa - sc`, as BigDecimal does.
fn decimal_divide(a: i128, sa: i32, c: i128, sc: i32) -> String {
    const EXTRA: usize = 60;
    let neg = (a < 0) != (c < 0);
    let num = Big::parse(&a.unsigned_abs().to_string()).unwrap_or(Big(Vec::new()));
    let den = Big::parse(&c.unsigned_abs().to_string()).unwrap_or(Big(Vec::new()));
    let q = num.div_scaled(&den, EXTRA);
    let exact = q.mul(&den).cmp(&num.mul(&Big::pow10(EXTRA))) == std::cmp::Ordering::Equal;
    let scale = EXTRA as i64 + sa as i64 - sc as i64;
    if q.is_zero() || scale < 0 {
        return "0".into();
    }
    let mut out = round_significant(&q.text(), scale as usize, 28, neg && !q.is_zero());
    if exact && out.contains('.') {
        let preferred = (sa - sc).max(0) as usize;
        let frac_len = out.len() - out.find('.').map(|i| i + 1).unwrap_or(out.len());
        let mut trim = 0;
        while frac_len - trim > preferred && out.as_bytes()[out.len() - 1 - trim] == b'0' {
            trim += 1;
        }
        out.truncate(out.len() - trim);
        if out.ends_with('.') {
            out.pop();
        }
    }
    out
}

/// Writes `digits · 10^-scale` rounded HALF_EVEN to `precision` significant digits.
fn round_significant(digits: &str, scale: usize, precision: usize, neg: bool) -> String {
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let lead = padded.len() - padded.trim_start_matches('0').len();
    let keep_end = (lead + precision).min(padded.len());
    let bytes = padded.as_bytes();
    let mut kept: Vec<u8> = bytes[..keep_end].to_vec();
    let rest = &bytes[keep_end..];
    let up = match rest.first() {
        Some(d) if *d > b'5' => true,
        Some(b'5') => {
            rest[1..].iter().any(|d| *d != b'0') || kept.last().is_some_and(|d| (d - b'0') % 2 == 1)
        }
        _ => false,
    };
    if up {
        let mut i = kept.len();
        loop {
            if i == 0 {
                kept.insert(0, b'1');
                break;
            }
            i -= 1;
            if kept[i] == b'9' {
                kept[i] = b'0';
            } else {
                kept[i] += 1;
                break;
            }
        }
    }
    let int_len = padded.len() - scale + (kept.len() - keep_end);
    let kept = String::from_utf8_lossy(&kept).into_owned();
    let (i, f) = kept.split_at(int_len.min(kept.len()));
    let i = i.trim_start_matches('0');
    let i = if i.is_empty() { "0" } else { i };
    let sign = if neg { "-" } else { "" };
    if f.is_empty() {
        format!("{sign}{i}")
    } else {
        format!("{sign}{i}.{f}")
    }
}

/// Java's `Math.round` (half up, toward positive infinity), as a float of the same kind.
fn java_round(x: f64, single: bool) -> f64 {
    if x.is_nan() {
        return 0.0;
    }
    let r = (x + 0.5).floor();
    // 0.49999999999999994 + 0.5 rounds up to 1.0 in floating point.
    let r = if r - x > 0.5 { r - 1.0 } else { r };
    if single {
        r.clamp(i32::MIN as f64, i32::MAX as f64)
    } else {
        r.clamp(i64::MIN as f64, i64::MAX as f64)
    }
}

/// A decimal's text rounded to an integer, half away from zero (RoundingMode.HALF_UP).
fn round_half_up(text: &str) -> Option<String> {
    let (neg, body) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (int_part, frac) = body.split_once('.').unwrap_or((body, ""));
    let mut n: i128 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().ok()?
    };
    if frac.as_bytes().first().is_some_and(|d| *d >= b'5') {
        n += 1;
    }
    Some(if neg && n != 0 {
        format!("-{n}")
    } else {
        n.to_string()
    })
}

/// Java's `Double.toString`: shortest digits, plain between 1e-3 and 1e7, else `d.dddEn`.
pub fn java_double(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    java_layout(&format!("{x:e}"), x.abs())
}

/// Java's `Float.toString`.
pub fn java_float(x: f32) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    java_layout(&format!("{x:e}"), x.abs() as f64)
}

fn java_layout(sci: &str, abs: f64) -> String {
    let (mant, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if neg { "-" } else { "" };
    if abs == 0.0 {
        return format!("{sign}0.0");
    }
    if (1e-3..1e7).contains(&abs) {
        if exp >= 0 {
            let e = exp as usize;
            let int_part: String = if digits.len() > e + 1 {
                digits[..e + 1].to_string()
            } else {
                format!("{digits:0<width$}", width = e + 1)
            };
            let frac = if digits.len() > e + 1 {
                &digits[e + 1..]
            } else {
                "0"
            };
            format!("{sign}{int_part}.{frac}")
        } else {
            let zeros = "0".repeat((-exp - 1) as usize);
            format!("{sign}0.{zeros}{digits}")
        }
    } else {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        let rest = if rest.is_empty() { "0" } else { rest };
        format!("{sign}{first}.{rest}E{exp}")
    }
}

/// `CAST(v AS to)`, for a cast that exists (see [`cast_input`]).
pub fn cast(from: &CqlType, to: &CqlType, v: &[u8]) -> Option<Bytes> {
    use CqlType as T;
    if from == to {
        return b(v);
    }
    if matches!(to, T::Text | T::Ascii) {
        return cql_literal_text(from, v).map(Bytes::from);
    }
    if let Some(ms) = millis_of(from, v)
        && matches!(from, T::Timeuuid | T::Timestamp | T::Date)
        && matches!(to, T::Timestamp | T::Date)
    {
        return match to {
            T::Timestamp => b(&ms.to_be_bytes()),
            _ => b(&date_of_millis(ms).to_be_bytes()),
        };
    }
    match (from, to) {
        (T::Float, T::Decimal) => {
            let f = f32::from_be_bytes(v.try_into().ok()?);
            crate::values::encode_literal(&ast::Literal::Float(java_float(f)), to)
        }
        (T::Varint, T::Decimal) => {
            let mut out = BytesMut::new();
            out.put_i32(0);
            out.put_slice(v);
            Some(out.freeze())
        }
        (T::Float | T::Double, _) => {
            let x = as_f64(from, v)?;
            if *to == T::Varint {
                return from_i128(to, x as i64 as i128);
            }
            from_f64(to, x)
        }
        (T::Decimal, T::Float | T::Double) => {
            let x: f64 = crate::json::value_text(from, v)?.parse().ok()?;
            if *to == T::Float {
                let f: f32 = crate::json::value_text(from, v)?.parse().ok()?;
                return b(&f.to_be_bytes());
            }
            from_f64(to, x)
        }
        (T::Varint, T::Float | T::Double) => {
            let text = crate::json::value_text(from, v)?;
            if *to == T::Float {
                return b(&text.parse::<f32>().ok()?.to_be_bytes());
            }
            b(&text.parse::<f64>().ok()?.to_be_bytes())
        }
        (_, T::Varint) => from_i128(to, as_i128(from, v)? as i64 as i128),
        _ => from_i128(to, as_i128(from, v)?),
    }
}

/// A value as Cassandra's `toCQLLiteralNoQuote` writes it (CAST(x AS text)).
pub fn cql_literal_text(ty: &CqlType, v: &[u8]) -> Option<String> {
    Some(match ty {
        CqlType::Double => java_double(f64::from_be_bytes(v.try_into().ok()?)),
        CqlType::Float => java_float(f32::from_be_bytes(v.try_into().ok()?)),
        CqlType::Timestamp => {
            let t = crate::json::timestamp_text(i64::from_be_bytes(v.try_into().ok()?));
            t.replacen(' ', "T", 1)
        }
        CqlType::Inet => java_inet(v)?,
        _ => crate::json::value_text(ty, v)?,
    })
}

/// Java's `InetAddress.getHostAddress()`: IPv6 as eight uncompressed hex groups.
pub fn java_inet(v: &[u8]) -> Option<String> {
    match v.len() {
        4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(v).ok()?).to_string()),
        16 => Some(
            v.chunks(2)
                .map(|g| format!("{:x}", u16::from_be_bytes([g[0], g[1]])))
                .collect::<Vec<_>>()
                .join(":"),
        ),
        _ => None,
    }
}

/// The value `mask_default` returns for a type.
fn masked_default(ty: &CqlType) -> Bytes {
    use CqlType as T;
    match ty {
        T::Text | T::Ascii => Bytes::from_static(b"****"),
        T::Boolean => Bytes::from_static(&[0]),
        T::Tinyint => Bytes::from_static(&[0]),
        T::Smallint => Bytes::from_static(&[0; 2]),
        T::Int | T::Float => Bytes::from_static(&[0; 4]),
        T::Bigint | T::Counter | T::Double | T::Timestamp | T::Time => Bytes::from_static(&[0; 8]),
        T::Date => Bytes::copy_from_slice(&(1u32 << 31).to_be_bytes()),
        T::Varint => Bytes::from_static(&[0]),
        T::Decimal => Bytes::from_static(&[0, 0, 0, 0, 0]),
        T::Uuid => Bytes::from_static(&[0; 16]),
        T::Timeuuid => Bytes::copy_from_slice(&bound_timeuuid(0, false)),
        T::Inet => Bytes::from_static(&[0; 4]),
        T::Duration => Bytes::from_static(&[0, 0, 0]),
        _ => Bytes::new(),
    }
}

/// SHA-256 (FIPS 180-4), for `mask_hash`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, c) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut bb, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & bb) ^ (a & c) ^ (bb & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = bb;
            bb = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, bb, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// Whether a tuple value has all of its components (used by JSON checks).
pub fn tuple_len(v: &[u8]) -> usize {
    split_tuple(v).map(|x| x.len()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_number_text() {
        assert_eq!(java_double(2.5e10), "2.5E10");
        assert_eq!(java_double(-1e300), "-1.0E300");
        assert_eq!(java_double(123456.0), "123456.0");
        assert_eq!(java_double(0.001), "0.001");
        assert_eq!(java_double(1.25e-4), "1.25E-4");
        assert_eq!(java_double(1e7), "1.0E7");
        assert_eq!(java_float(1.25), "1.25");
        assert_eq!(java_double(0.0), "0.0");
    }

    #[test]
    fn sha256_known_vector() {
        assert_eq!(
            crate::values::hex(&sha256(b"hello")),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(
            crate::values::hex(&sha256(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn timeuuid_bounds_match_cassandra() {
        // 2013-02-02 10:00+0000
        let ms = 1_359_799_200_000;
        assert_eq!(
            uuid::Uuid::from_bytes(bound_timeuuid(ms, false)).to_string(),
            "4e52d000-6d1f-11e2-8080-808080808080"
        );
        assert_eq!(
            uuid::Uuid::from_bytes(bound_timeuuid(ms, true)).to_string(),
            "4e52f70f-6d1f-11e2-7f7f-7f7f7f7f7f7f"
        );
    }

    #[test]
    fn casts_saturate_and_truncate_like_java() {
        let d = |x: f64| x.to_be_bytes().to_vec();
        assert_eq!(
            cast(&CqlType::Double, &CqlType::Int, &d(2.5e10)).as_deref(),
            Some(&i32::MAX.to_be_bytes()[..])
        );
        assert_eq!(
            cast(&CqlType::Double, &CqlType::Bigint, &d(-1e300)).as_deref(),
            Some(&i64::MIN.to_be_bytes()[..])
        );
        assert_eq!(
            cast(&CqlType::Double, &CqlType::Text, &d(-1e300)).as_deref(),
            Some(&b"-1.0E300"[..])
        );
        // 2.5E+10 = unscaled 25, scale -9.
        assert_eq!(
            cast(&CqlType::Double, &CqlType::Decimal, &d(2.5e10)).as_deref(),
            Some(&[0xff, 0xff, 0xff, 0xf7, 25][..])
        );
    }

    #[test]
    fn java_round_is_half_up() {
        assert_eq!(java_round(2.5, false), 3.0);
        assert_eq!(java_round(-2.5, false), -2.0);
        assert_eq!(java_round(-3.75, false), -4.0);
        assert_eq!(round_half_up("12.345").as_deref(), Some("12"));
        assert_eq!(round_half_up("-0.5").as_deref(), Some("-1"));
    }

    fn ctx() -> EvalCtx<'static> {
        EvalCtx {
            binds: &[],
            now_micros: 0,
        }
    }

    fn name(n: &str) -> ast::QualifiedName {
        ast::QualifiedName::new(None, ast::Ident::new(n))
    }

    fn int(s: &str) -> ast::Expr {
        ast::Expr::Literal(ast::Literal::Integer(s.into()))
    }

    #[test]
    fn overloads_prefer_the_literals_natural_type() {
        let one = int("0");
        let (_, s) = resolve(&name("exp"), &[Arg::Term(&one)], &["0".into()], &ctx())
            .expect("exp(0) resolves");
        assert_eq!(s.ret, CqlType::Int);
        let half = ast::Expr::Literal(ast::Literal::Float("2.5".into()));
        let (_, s) = resolve(&name("round"), &[Arg::Term(&half)], &["2.5".into()], &ctx())
            .expect("round(2.5) resolves");
        assert_eq!(s.ret, CqlType::Double);
        let (_, s) = resolve(
            &name("totimestamp"),
            &[Arg::Typed(CqlType::Date)],
            &["d".into()],
            &ctx(),
        )
        .expect("toTimestamp(date) resolves");
        assert_eq!(s.params, vec![CqlType::Date]);
    }

    #[test]
    fn resolution_errors_match_cassandras_kinds() {
        let err = |n: &str, args: &[Arg<'_>]| {
            resolve(&name(n), args, &["a".into(), "b".into()], &ctx())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err("dateof", &[Arg::Typed(CqlType::Timeuuid)]).starts_with("Unknown function"));
        assert!(err("blobasblob", &[Arg::Typed(CqlType::Blob)]).starts_with("Unknown function"));
        assert!(
            err("intasblob", &[Arg::Typed(CqlType::Bigint)]).starts_with("Type error: a cannot")
        );
        assert!(err("abs", &[Arg::Typed(CqlType::Text)]).contains("none of its type signatures"));
        assert!(
            err(
                "intasblob",
                &[Arg::Typed(CqlType::Int), Arg::Typed(CqlType::Int)]
            )
            .contains("1 required but 2 provided")
        );
        let ks = ast::QualifiedName::new(Some(ast::Ident::new("ks")), ast::Ident::new("abs"));
        let e = resolve(&ks, &[Arg::Typed(CqlType::Int)], &["a".into()], &ctx())
            .err()
            .map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("Unknown function 'ks.abs'"));
    }

    #[test]
    fn blob_conversions_validate_and_have_snake_case_names() {
        let (f, s) = resolve(
            &name("blob_as_int"),
            &[Arg::Typed(CqlType::Blob)],
            &["b".into()],
            &ctx(),
        )
        .expect("blob_as_int resolves");
        assert_eq!(s.ret, CqlType::Int);
        assert!(call(&f, &s, &[Some(Bytes::from_static(&[1]))], None).is_err());
        assert_eq!(
            call(&f, &s, &[Some(Bytes::from_static(&[0, 0, 0, 42]))], None)
                .expect("valid int")
                .as_deref(),
            Some(&[0u8, 0, 0, 42][..])
        );
    }

    #[test]
    fn casts_resolve_like_cassandra() {
        assert_eq!(
            cast_input(&CqlType::Timestamp, &CqlType::Bigint, "ts").ok(),
            Some(CqlType::Varint)
        );
        assert_eq!(
            cast_input(&CqlType::Int, &CqlType::Timestamp, "i").ok(),
            Some(CqlType::Date)
        );
        assert!(cast_input(&CqlType::Text, &CqlType::Ascii, "t").is_err());
        assert!(cast_input(&CqlType::Boolean, &CqlType::Int, "bo").is_err());
        assert!(cast_input(&CqlType::Int, &CqlType::Blob, "i").is_err());
    }

    #[test]
    fn operations_are_typed_and_computed_like_cassandra() {
        use ast::BinaryOp as O;
        assert_eq!(
            operation_type(O::Add, &CqlType::Bigint, &CqlType::Int),
            Some(CqlType::Bigint)
        );
        assert_eq!(
            operation_type(O::Sub, &CqlType::Float, &CqlType::Double),
            Some(CqlType::Double)
        );
        assert_eq!(
            operation_type(O::Add, &CqlType::Decimal, &CqlType::Int),
            Some(CqlType::Decimal)
        );
        assert_eq!(operation_type(O::Add, &CqlType::Text, &CqlType::Int), None);
        let i = |x: i32| x.to_be_bytes().to_vec();
        let r = operation(
            O::Div,
            &CqlType::Int,
            &CqlType::Int,
            &CqlType::Int,
            &i(1),
            &i(0),
        );
        assert!(matches!(r, Err(FnError::Failure(_))));
        let r = operation(
            O::Rem,
            &CqlType::Int,
            &CqlType::Int,
            &CqlType::Int,
            &i(-7),
            &i(3),
        )
        .expect("remainder");
        assert_eq!(r.as_deref(), Some(&(-1i32).to_be_bytes()[..]));
        // 2020-05-06 - 1mo = 2020-04-06
        let day = crate::values::days_from_civil(2020, 5, 6);
        let date = ((day + (1i64 << 31)) as u32).to_be_bytes();
        let month = [2u8, 0, 0]; // zig-zag vints: months 1, days 0, nanos 0
        let r = operation(
            O::Sub,
            &CqlType::Date,
            &CqlType::Duration,
            &CqlType::Date,
            &date,
            &month,
        )
        .expect("date - duration")
        .expect("not null");
        let want =
            ((crate::values::days_from_civil(2020, 4, 6) + (1i64 << 31)) as u32).to_be_bytes();
        assert_eq!(&r[..], &want[..]);
    }

    #[test]
    fn masks_hide_text() {
        let s = sig(
            Native::MaskInner,
            vec![CqlType::Text, CqlType::Int, CqlType::Int],
            CqlType::Text,
        );
        let one = Some(Bytes::copy_from_slice(&1i32.to_be_bytes()));
        let args = [Some(Bytes::from_static(b"hello")), one.clone(), one];
        let v = call("mask_inner", &s, &args, None).expect("mask_inner");
        assert_eq!(v.as_deref(), Some(&b"h***o"[..]));
        let s = Sig {
            f: Native::MaskOuter,
            ..s
        };
        let v = call("mask_outer", &s, &args, None).expect("mask_outer");
        assert_eq!(v.as_deref(), Some(&b"*ell*"[..]));
    }

    #[test]
    fn decimal_logs_have_28_significant_digits() {
        assert_eq!(
            decimal_log("12.345", true, 28).as_deref(),
            Some("1.091491094267951081848996765")
        );
        assert_eq!(decimal_log("1", false, 28).as_deref(), Some("0"));
        assert_eq!(
            decimal_log("10", false, 28).as_deref(),
            Some("2.302585092994045684017991455")
        );
        assert_eq!(
            decimal_log("0.5", false, 28).as_deref(),
            Some("-0.6931471805599453094172321215")
        );
        assert_eq!(decimal_log("-1", true, 28), None);
    }

    #[test]
    fn decimal_division_has_28_significant_digits() {
        assert_eq!(
            decimal_divide(1025, 2, 3, 0),
            "3.416666666666666666666666667"
        );
        assert_eq!(decimal_divide(10, 0, 4, 0), "2.5");
        assert_eq!(decimal_divide(-1, 0, 8, 0), "-0.125");
    }

    #[test]
    fn ipv6_text_is_javas() {
        let mut v = [0u8; 16];
        v[15] = 1;
        assert_eq!(java_inet(&v).as_deref(), Some("0:0:0:0:0:0:0:1"));
    }

    fn ms(y: i64, m: u32, d: u32, h: i64, min: i64) -> i64 {
        crate::values::days_from_civil(y, m, d) * 86_400_000 + h * 3_600_000 + min * 60_000
    }

    #[test]
    fn floor_of_timestamps() {
        const H: i64 = 3_600_000_000_000;
        let t = ms(2020, 1, 1, 1, 10);
        assert_eq!(
            floor_timestamp(t, (0, 0, H), 0).ok(),
            Some(ms(2020, 1, 1, 1, 0))
        );
        assert_eq!(
            floor_timestamp(t, (0, 1, 0), 0).ok(),
            Some(ms(2020, 1, 1, 0, 0))
        );
        // A start shifts the buckets: 2h buckets from 00:30.
        let start = ms(2020, 1, 1, 0, 30);
        assert_eq!(
            floor_timestamp(ms(2020, 1, 1, 3, 0), (0, 0, 2 * H), start).ok(),
            Some(ms(2020, 1, 1, 2, 30))
        );
        // Months: 2-month buckets from January.
        assert_eq!(
            floor_timestamp(ms(2020, 5, 17, 10, 0), (2, 0, 0), ms(2020, 1, 1, 0, 0)).ok(),
            Some(ms(2020, 5, 1, 0, 0))
        );
        // Months and days: 1mo1d steps from 2020-01-01 are 02-02, 03-03, 04-04.
        assert_eq!(
            floor_timestamp(ms(2020, 4, 3, 0, 0), (1, 1, 0), ms(2020, 1, 1, 0, 0)).ok(),
            Some(ms(2020, 3, 3, 0, 0))
        );
        assert!(matches!(
            floor_timestamp(0, (0, 0, H), 1),
            Err(FnError::Invalid(_))
        ));
        assert!(matches!(
            floor_timestamp(10, (0, -1, 0), 0),
            Err(FnError::Invalid(_))
        ));
    }

    #[test]
    fn floor_of_times() {
        const MIN: i64 = 60_000_000_000;
        assert_eq!(
            floor_time(95 * MIN + 7, (0, 0, 30 * MIN)).ok(),
            Some(90 * MIN)
        );
        assert!(matches!(floor_time(5, (0, 1, 0)), Err(FnError::Invalid(_))));
    }
}
