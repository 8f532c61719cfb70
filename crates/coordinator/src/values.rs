//! Terms → serialized values: literals, bind markers, collection/tuple/UDT literals and
//! the value functions (`now()`, `uuid()`, `toTimestamp()` …), checked against the
//! receiving column's type.

use amphora_cql as ast;
use amphora_types::CqlType;
use bytes::{BufMut, Bytes, BytesMut};

use crate::api::{BoundValue, QueryError};

/// A term's value once evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Null,
    Unset,
    Set(Bytes),
}

impl Value {
    pub fn bytes(&self) -> Option<&Bytes> {
        match self {
            Value::Set(b) => Some(b),
            _ => None,
        }
    }
}

/// What a statement's terms are evaluated with.
pub struct EvalCtx<'a> {
    pub binds: &'a [BoundValue],
    pub now_micros: i64,
}

fn invalid(msg: impl Into<String>) -> QueryError {
    QueryError::Invalid(msg.into())
}

pub fn eval(
    expr: &ast::Expr,
    ty: &CqlType,
    ctx: &EvalCtx<'_>,
    receiver: &str,
) -> Result<Value, QueryError> {
    match expr {
        ast::Expr::Bind(m) => {
            let v = ctx.binds.get(m.index).ok_or_else(|| {
                invalid(format!(
                    "There were {} markers(?) in CQL but {} bound variables",
                    m.index + 1,
                    ctx.binds.len()
                ))
            })?;
            Ok(match v {
                BoundValue::Null => Value::Null,
                BoundValue::Unset => Value::Unset,
                BoundValue::Set(b) => {
                    ty.validate(b)
                        .map_err(|e| invalid(format!("Invalid value for {receiver}: {e}")))?;
                    if ty.has_unordered_collection() {
                        // Sets and maps as Cassandra stores them (a frozen one is compared,
                        // and can be a key, by its bytes).
                        Value::Set(Bytes::from(ty.normalize(b)))
                    } else {
                        Value::Set(b.clone())
                    }
                }
            })
        }
        ast::Expr::Null => Ok(Value::Null),
        ast::Expr::Function { name, args } => {
            Ok(match eval_function(name, args, ty, ctx, receiver)? {
                Some(b) => Value::Set(b),
                None => Value::Null,
            })
        }
        _ => Ok(Value::Set(encode(expr, ty, ctx, receiver)?)),
    }
}

/// Evaluates a term that must be a non-null value.
pub fn eval_set(
    expr: &ast::Expr,
    ty: &CqlType,
    ctx: &EvalCtx<'_>,
    receiver: &str,
) -> Result<Bytes, QueryError> {
    match eval(expr, ty, ctx, receiver)? {
        Value::Set(b) => Ok(b),
        Value::Null => Err(invalid(format!("Invalid null value for {receiver}"))),
        Value::Unset => Err(invalid(format!("Invalid unset value for {receiver}"))),
    }
}

fn type_mismatch(expr: &ast::Expr, ty: &CqlType, receiver: &str) -> QueryError {
    let what = match expr {
        ast::Expr::Literal(l) => match l {
            ast::Literal::String(_) => "STRING constant",
            ast::Literal::Integer(_) => "INTEGER constant",
            ast::Literal::Float(_)
            | ast::Literal::NaN
            | ast::Literal::Infinity
            | ast::Literal::NegInfinity => "FLOAT constant",
            ast::Literal::Boolean(_) => "BOOLEAN constant",
            ast::Literal::Duration(_) => "DURATION constant",
            ast::Literal::Uuid(_) => "UUID constant",
            ast::Literal::Hex(_) => "HEX constant",
        },
        _ => "literal",
    };
    let shown = match expr {
        ast::Expr::Literal(l) => l.to_string(),
        _ => String::from("value"),
    };
    invalid(format!(
        "Invalid {what} ({shown}) for \"{receiver}\" of type {ty}"
    ))
}

/// Serializes a non-bind term for `ty`.
pub fn encode(
    expr: &ast::Expr,
    ty: &CqlType,
    ctx: &EvalCtx<'_>,
    receiver: &str,
) -> Result<Bytes, QueryError> {
    use ast::Expr as E;
    use ast::Literal as L;
    let mismatch = || type_mismatch(expr, ty, receiver);
    match expr {
        E::Bind(_) | E::Null => match eval(expr, ty, ctx, receiver)? {
            Value::Set(b) => Ok(b),
            _ => Err(invalid(format!("Invalid null value for {receiver}"))),
        },
        E::TypeHint { expr, .. } => encode(expr, ty, ctx, receiver),
        E::Negate(inner) => match &**inner {
            E::Literal(L::Integer(s)) => {
                encode(&E::Literal(L::Integer(format!("-{s}"))), ty, ctx, receiver)
            }
            E::Literal(L::Float(s)) => {
                encode(&E::Literal(L::Float(format!("-{s}"))), ty, ctx, receiver)
            }
            E::Literal(L::Infinity) => encode(&E::Literal(L::NegInfinity), ty, ctx, receiver),
            _ => Err(mismatch()),
        },
        E::Function { name, args } => eval_function(name, args, ty, ctx, receiver)?
            .ok_or_else(|| invalid(format!("Invalid null value for {receiver}"))),
        // A bare value for a tuple is its first component (Cassandra 5.0 reads `(x)` as `x`
        // and still accepts it as a one-element prefix of the tuple).
        E::Literal(lit) => match ty {
            CqlType::Tuple(types) if !types.is_empty() => {
                let first = encode_literal(lit, &types[0]).ok_or_else(mismatch)?;
                Ok(serialize_tuple(std::iter::once(Some(&first[..]))))
            }
            _ => encode_literal(lit, ty).ok_or_else(mismatch),
        },
        E::List(items) => match ty {
            CqlType::List { elem, .. } => {
                let vals = items
                    .iter()
                    .map(|e| eval_set(e, elem, ctx, receiver))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(serialize_collection(vals.iter().map(|v| Some(&v[..]))))
            }
            CqlType::Vector { elem, dim } => {
                if items.len() != *dim as usize {
                    return Err(invalid(format!(
                        "Invalid vector literal for {receiver} of type {ty}; expected {dim} elements, but given {}",
                        items.len()
                    )));
                }
                let mut out = BytesMut::new();
                for e in items {
                    let v = eval_set(e, elem, ctx, receiver)?;
                    if elem.fixed_len().is_none() {
                        put_unsigned_vint(&mut out, v.len() as u64);
                    }
                    out.put_slice(&v);
                }
                Ok(out.freeze())
            }
            CqlType::Set { elem, .. } => {
                let mut vals = items
                    .iter()
                    .map(|e| eval_set(e, elem, ctx, receiver))
                    .collect::<Result<Vec<_>, _>>()?;
                vals.sort_by(|a, b| elem.compare(a, b));
                vals.dedup();
                Ok(serialize_collection(vals.iter().map(|v| Some(&v[..]))))
            }
            _ => Err(invalid(format!(
                "Invalid list literal for {receiver} of type {ty}"
            ))),
        },
        E::Set(items) => match ty {
            CqlType::Set { elem, .. } => {
                let mut vals = items
                    .iter()
                    .map(|e| eval_set(e, elem, ctx, receiver))
                    .collect::<Result<Vec<_>, _>>()?;
                vals.sort_by(|a, b| elem.compare(a, b));
                vals.dedup();
                Ok(serialize_collection(vals.iter().map(|v| Some(&v[..]))))
            }
            CqlType::Map { .. } if items.is_empty() => Ok(serialize_collection(std::iter::empty())),
            _ => Err(invalid(format!(
                "Invalid set literal for {receiver} of type {ty}"
            ))),
        },
        E::Map(entries) => match ty {
            CqlType::Map { key, value, .. } => {
                let mut kvs = Vec::with_capacity(entries.len());
                for (k, v) in entries {
                    kvs.push((
                        eval_set(k, key, ctx, receiver)?,
                        eval_set(v, value, ctx, receiver)?,
                    ));
                }
                kvs.sort_by(|a, b| key.compare(&a.0, &b.0));
                kvs.dedup_by(|a, b| key.compare(&a.0, &b.0).is_eq());
                Ok(serialize_map(kvs.iter().map(|(k, v)| (&k[..], &v[..]))))
            }
            CqlType::Set { .. } if entries.is_empty() => {
                Ok(serialize_collection(std::iter::empty()))
            }
            CqlType::Udt(_) => Err(invalid(format!(
                "Invalid map literal for {receiver} of type {ty}"
            ))),
            _ => Err(invalid(format!(
                "Invalid map literal for {receiver} of type {ty}"
            ))),
        },
        E::Udt(fields) => match ty {
            CqlType::Udt(def) => {
                let mut vals: Vec<Option<Bytes>> = vec![None; def.field_names.len()];
                for (f, e) in fields {
                    let i = def
                        .field_names
                        .iter()
                        .position(|n| *n == f.name)
                        .ok_or_else(|| {
                            invalid(format!(
                                "Unknown field '{}' in value of user defined type {}",
                                f.name, def.name
                            ))
                        })?;
                    vals[i] = eval(e, &def.field_types[i], ctx, receiver)?
                        .bytes()
                        .cloned();
                }
                Ok(serialize_tuple(vals.iter().map(|v| v.as_deref())))
            }
            _ => Err(invalid(format!(
                "Invalid user type literal for {receiver} of type {ty}"
            ))),
        },
        E::Tuple(items) => match ty {
            CqlType::Tuple(types) => {
                if items.len() > types.len() {
                    return Err(invalid(format!(
                        "Invalid tuple literal for {receiver}: too many elements. Type {ty} expects {} but got {}",
                        types.len(),
                        items.len()
                    )));
                }
                let vals = items
                    .iter()
                    .zip(types.iter())
                    .map(|(e, t)| eval(e, t, ctx, receiver).map(|v| v.bytes().cloned()))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(serialize_tuple(vals.iter().map(|v| v.as_deref())))
            }
            // `(term)` for a receiver that is not a tuple: parentheses only group.
            CqlType::Udt(_) => Err(invalid(format!(
                "Invalid tuple literal for {receiver} of type {ty}"
            ))),
            _ if items.len() == 1 => eval_set(&items[0], ty, ctx, receiver),
            _ => Err(invalid(format!(
                "Invalid tuple literal for {receiver} of type {ty}"
            ))),
        },
        E::Binary { op, left, right } => eval_operation(*op, left, right, ty, ctx, receiver),
        E::Cast { .. }
        | E::Column(_)
        | E::CountRows
        | E::CellMetadata { .. }
        | E::Field { .. }
        | E::Element { .. }
        | E::Slice { .. } => Err(invalid(format!(
            "Invalid term for {receiver}: only literals, bind markers and functions are supported here"
        ))),
    }
}

/// `a + b` (and `-`, `*`, `/`, `%`) between terms, for a receiver of type `ty`: each side
/// takes the receiver's type when it can, else its own (a duration added to a timestamp).
fn eval_operation(
    op: ast::BinaryOp,
    left: &ast::Expr,
    right: &ast::Expr,
    ty: &CqlType,
    ctx: &EvalCtx<'_>,
    receiver: &str,
) -> Result<Bytes, QueryError> {
    let side = |e: &ast::Expr| -> Result<(CqlType, Bytes), QueryError> {
        if let Ok(b) = eval_set(e, ty, ctx, receiver) {
            return Ok((ty.clone(), b));
        }
        let t = crate::functions::term_type(e).ok_or_else(|| {
            invalid(format!(
                "Invalid operation ({left} {} {right}) for {receiver}",
                op.as_str()
            ))
        })?;
        Ok((t.clone(), eval_set(e, &t, ctx, receiver)?))
    };
    let (lt, lv) = side(left)?;
    let (rt, rv) = side(right)?;
    let unsupported = || {
        invalid(format!(
            "the '{}' operation is not supported between {left} and {right}",
            op.as_str()
        ))
    };
    let ret = crate::functions::operation_type(op, &lt, &rt).ok_or_else(unsupported)?;
    let sig = crate::functions::Sig {
        f: crate::functions::Native::Operation(op),
        params: vec![lt, rt],
        ret: ret.clone(),
    };
    let v = crate::functions::call(
        &format!("_{}", op.as_str()),
        &sig,
        &[Some(lv), Some(rv)],
        None,
    )?
    .ok_or_else(|| invalid(format!("Invalid null value for {receiver}")))?;
    if ret == *ty {
        Ok(v)
    } else {
        crate::functions::cast(&ret, ty, &v).ok_or_else(|| {
            invalid(format!(
                "Type error: cannot assign the result of ({left} {} {right}) (type {ret}) to {receiver} (type {ty})",
                op.as_str()
            ))
        })
    }
}

/// Evaluates a function call term for a receiver of type `ty` (None = null result).
fn eval_function(
    name: &ast::QualifiedName,
    args: &[ast::Expr],
    ty: &CqlType,
    ctx: &EvalCtx<'_>,
    receiver: &str,
) -> Result<Option<Bytes>, QueryError> {
    let (v, produced, fname) = call_function(name, args, Some(ty), ctx, receiver)?;
    let compatible = produced == *ty
        || matches!(
            (&produced, ty),
            (CqlType::Timeuuid, CqlType::Uuid) | (CqlType::Ascii, CqlType::Text)
        );
    if !compatible {
        return Err(invalid(format!(
            "Type error: cannot assign result of function system.{fname} (type {produced}) to {receiver} (type {ty})"
        )));
    }
    Ok(v)
}

/// Calls a function: the value, the type it produced and the function's name.
/// `fromJson` produces the receiver's type.
fn call_function(
    name: &ast::QualifiedName,
    args: &[ast::Expr],
    receiver_ty: Option<&CqlType>,
    ctx: &EvalCtx<'_>,
    receiver: &str,
) -> Result<(Option<Bytes>, CqlType, String), QueryError> {
    use crate::functions::{self, Arg};
    let lname = name.name.name.to_ascii_lowercase();
    let now_ms = ctx.now_micros.div_euclid(1000);
    let system = name.keyspace.as_ref().is_none_or(|k| k.name == "system");
    if args.is_empty() && system {
        let made = match lname.as_str() {
            "now" | "currenttimeuuid" => Some((
                Bytes::copy_from_slice(&timeuuid(ctx.now_micros)),
                CqlType::Timeuuid,
            )),
            "uuid" => Some((
                Bytes::copy_from_slice(uuid::Uuid::new_v4().as_bytes()),
                CqlType::Uuid,
            )),
            "currenttimestamp" => Some((
                Bytes::copy_from_slice(&now_ms.to_be_bytes()),
                CqlType::Timestamp,
            )),
            "currentdate" => Some((
                Bytes::copy_from_slice(&days_to_date(now_ms.div_euclid(86_400_000)).to_be_bytes()),
                CqlType::Date,
            )),
            "currenttime" => Some((
                Bytes::copy_from_slice(&(now_ms.rem_euclid(86_400_000) * 1_000_000).to_be_bytes()),
                CqlType::Time,
            )),
            _ => None,
        };
        if let Some((v, t)) = made {
            return Ok((Some(v), t, lname));
        }
    }
    let mut pre: Vec<Option<Option<Bytes>>> = Vec::with_capacity(args.len());
    let mut kinds = Vec::with_capacity(args.len());
    let mut shown = Vec::with_capacity(args.len());
    for a in args {
        shown.push(a.to_string());
        match a {
            ast::Expr::Function { name, args } => {
                let (v, t, _) = call_function(name, args, None, ctx, receiver)?;
                kinds.push(Arg::Typed(t));
                pre.push(Some(v));
            }
            ast::Expr::Bind(_) => {
                kinds.push(Arg::Bind);
                pre.push(None);
            }
            _ => {
                kinds.push(Arg::Term(a));
                pre.push(None);
            }
        }
    }
    let (fname, sig) = functions::resolve(name, &kinds, &shown, ctx)?;
    let mut vals = Vec::with_capacity(args.len());
    for ((p, a), param) in pre.into_iter().zip(args).zip(&sig.params) {
        vals.push(match p {
            Some(v) => v,
            None => match eval(a, param, ctx, receiver)? {
                Value::Set(b) => Some(b),
                _ => None,
            },
        });
    }
    let v = functions::call(&fname, &sig, &vals, receiver_ty)?;
    let produced = if sig.f == functions::Native::FromJson {
        receiver_ty.cloned().unwrap_or(CqlType::Text)
    } else {
        sig.ret
    };
    Ok((v, produced, fname))
}

const UUID_EPOCH_OFFSET_100NS: i64 = 0x01B2_1DD2_1381_4000;

/// A version-1 uuid for `micros` since the Unix epoch, with a random clock sequence/node.
pub fn timeuuid(micros: i64) -> [u8; 16] {
    let ts = (micros * 10 + UUID_EPOCH_OFFSET_100NS) as u64;
    let mut u = *uuid::Uuid::new_v4().as_bytes();
    let time_low = (ts & 0xFFFF_FFFF) as u32;
    let time_mid = ((ts >> 32) & 0xFFFF) as u16;
    let time_hi = (((ts >> 48) & 0x0FFF) as u16) | 0x1000;
    u[0..4].copy_from_slice(&time_low.to_be_bytes());
    u[4..6].copy_from_slice(&time_mid.to_be_bytes());
    u[6..8].copy_from_slice(&time_hi.to_be_bytes());
    u[8] = (u[8] & 0x3F) | 0x80;
    u
}

pub fn timeuuid_millis(u: &[u8]) -> i64 {
    if u.len() < 8 {
        return 0;
    }
    let time_low = u32::from_be_bytes([u[0], u[1], u[2], u[3]]) as u64;
    let time_mid = u16::from_be_bytes([u[4], u[5]]) as u64;
    let time_hi = (u16::from_be_bytes([u[6], u[7]]) & 0x0FFF) as u64;
    let ts = (time_hi << 48) | (time_mid << 32) | time_low;
    (ts as i64 - UUID_EPOCH_OFFSET_100NS) / 10_000
}

fn days_to_date(days: i64) -> u32 {
    (days + (1i64 << 31)) as u32
}

pub fn serialize_collection<'a>(items: impl Iterator<Item = Option<&'a [u8]>>) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i32(0);
    let mut n = 0i32;
    for it in items {
        n += 1;
        match it {
            Some(v) => {
                out.put_i32(v.len() as i32);
                out.put_slice(v);
            }
            None => out.put_i32(-1),
        }
    }
    out[0..4].copy_from_slice(&n.to_be_bytes());
    out.freeze()
}

pub fn serialize_map<'a>(items: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i32(0);
    let mut n = 0i32;
    for (k, v) in items {
        n += 1;
        out.put_i32(k.len() as i32);
        out.put_slice(k);
        out.put_i32(v.len() as i32);
        out.put_slice(v);
    }
    out[0..4].copy_from_slice(&n.to_be_bytes());
    out.freeze()
}

pub fn serialize_tuple<'a>(items: impl Iterator<Item = Option<&'a [u8]>>) -> Bytes {
    let mut out = BytesMut::new();
    for it in items {
        match it {
            Some(v) => {
                out.put_i32(v.len() as i32);
                out.put_slice(v);
            }
            None => out.put_i32(-1),
        }
    }
    out.freeze()
}

fn put_unsigned_vint(out: &mut BytesMut, v: u64) {
    let bits = 64 - v.leading_zeros() as usize;
    // A vint with `extra` extra bytes carries 7 * (extra + 1) bits (extra < 8).
    let mut extra = 0usize;
    while extra < 8 && bits > 7 * (extra + 1) {
        extra += 1;
    }
    if extra >= 8 {
        out.put_u8(0xFF);
        out.put_u64(v);
        return;
    }
    let first_mask: u8 = !(0xFFu8 >> extra);
    let first = ((v >> (8 * extra)) as u8) | first_mask;
    out.put_u8(first);
    for i in (0..extra).rev() {
        out.put_u8((v >> (8 * i)) as u8);
    }
}

fn put_signed_vint(out: &mut BytesMut, v: i64) {
    put_unsigned_vint(out, ((v << 1) ^ (v >> 63)) as u64);
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn parse_i128(s: &str) -> Option<i128> {
    s.parse::<i128>().ok()
}

/// Encodes a literal for `ty`, or None when the literal cannot be assigned to it.
pub fn encode_literal(lit: &ast::Literal, ty: &CqlType) -> Option<Bytes> {
    use ast::Literal as L;
    let b = |v: &[u8]| Some(Bytes::copy_from_slice(v));
    match (ty, lit) {
        (CqlType::Text, L::String(s)) => b(s.as_bytes()),
        (CqlType::Ascii, L::String(s)) if s.is_ascii() => b(s.as_bytes()),
        (CqlType::Int, L::Integer(s)) => s
            .parse::<i32>()
            .ok()
            .map(|v| Bytes::copy_from_slice(&v.to_be_bytes())),
        (CqlType::Bigint | CqlType::Counter, L::Integer(s)) => s
            .parse::<i64>()
            .ok()
            .map(|v| Bytes::copy_from_slice(&v.to_be_bytes())),
        (CqlType::Smallint, L::Integer(s)) => s
            .parse::<i16>()
            .ok()
            .map(|v| Bytes::copy_from_slice(&v.to_be_bytes())),
        (CqlType::Tinyint, L::Integer(s)) => s
            .parse::<i8>()
            .ok()
            .map(|v| Bytes::copy_from_slice(&v.to_be_bytes())),
        (CqlType::Varint, L::Integer(s)) => varint_from_str(s),
        (CqlType::Decimal, L::Integer(s) | L::Float(s)) => decimal_from_str(s),
        (CqlType::Double, L::Integer(s) | L::Float(s)) => s
            .parse::<f64>()
            .ok()
            .map(|v| Bytes::copy_from_slice(&v.to_be_bytes())),
        (CqlType::Float, L::Integer(s) | L::Float(s)) => s
            .parse::<f32>()
            .ok()
            .map(|v| Bytes::copy_from_slice(&v.to_be_bytes())),
        (CqlType::Double, L::NaN) => b(&f64::NAN.to_be_bytes()),
        (CqlType::Double, L::Infinity) => b(&f64::INFINITY.to_be_bytes()),
        (CqlType::Double, L::NegInfinity) => b(&f64::NEG_INFINITY.to_be_bytes()),
        (CqlType::Float, L::NaN) => b(&f32::NAN.to_be_bytes()),
        (CqlType::Float, L::Infinity) => b(&f32::INFINITY.to_be_bytes()),
        (CqlType::Float, L::NegInfinity) => b(&f32::NEG_INFINITY.to_be_bytes()),
        (CqlType::Boolean, L::Boolean(v)) => b(&[u8::from(*v)]),
        (CqlType::Blob, L::Hex(h)) => hex_decode(h).map(Bytes::from),
        (CqlType::Uuid, L::Uuid(s)) => parse_uuid(s),
        (CqlType::Timeuuid, L::Uuid(s)) => {
            parse_uuid(s).filter(|u| u.len() == 16 && u[6] >> 4 == 1)
        }
        (CqlType::Timestamp, L::Integer(s)) => s
            .parse::<i64>()
            .ok()
            .map(|v| Bytes::copy_from_slice(&v.to_be_bytes())),
        (CqlType::Timestamp, L::String(s)) => {
            parse_timestamp(s).map(|v| Bytes::copy_from_slice(&v.to_be_bytes()))
        }
        (CqlType::Date, L::Integer(s)) => s
            .parse::<u32>()
            .ok()
            .map(|v| Bytes::copy_from_slice(&v.to_be_bytes())),
        (CqlType::Date, L::String(s)) => {
            parse_date(s).map(|d| Bytes::copy_from_slice(&days_to_date(d).to_be_bytes()))
        }
        (CqlType::Time, L::Integer(s)) => s
            .parse::<i64>()
            .ok()
            .filter(|v| (0..86_400_000_000_000).contains(v))
            .map(|v| Bytes::copy_from_slice(&v.to_be_bytes())),
        (CqlType::Time, L::String(s)) => {
            parse_time(s).map(|v| Bytes::copy_from_slice(&v.to_be_bytes()))
        }
        (CqlType::Inet, L::String(s)) => match s.parse::<std::net::IpAddr>().ok()? {
            std::net::IpAddr::V4(a) => b(&a.octets()),
            std::net::IpAddr::V6(a) => b(&a.octets()),
        },
        (CqlType::Duration, L::Duration(s)) => {
            let (months, days, nanos) = parse_duration(s)?;
            let mut out = BytesMut::new();
            put_signed_vint(&mut out, months);
            put_signed_vint(&mut out, days);
            put_signed_vint(&mut out, nanos);
            Some(out.freeze())
        }
        (CqlType::Blob, _) => None,
        _ => None,
    }
}

fn hex_decode(h: &str) -> Option<Vec<u8>> {
    let h = h
        .strip_prefix("0x")
        .or_else(|| h.strip_prefix("0X"))
        .unwrap_or(h);
    if !h.len().is_multiple_of(2) {
        return None;
    }
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
        .collect()
}

fn parse_uuid(s: &str) -> Option<Bytes> {
    uuid::Uuid::parse_str(s)
        .ok()
        .map(|u| Bytes::copy_from_slice(u.as_bytes()))
}

fn varint_from_str(s: &str) -> Option<Bytes> {
    let v = parse_i128(s)?;
    Some(Bytes::from(minimal_twos_complement(v)))
}

fn minimal_twos_complement(v: i128) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let mut start = 0;
    while start < 15 {
        let b = bytes[start];
        let next = bytes[start + 1];
        if (b == 0x00 && next & 0x80 == 0) || (b == 0xFF && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    bytes[start..].to_vec()
}

fn decimal_from_str(s: &str) -> Option<Bytes> {
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (int_part, frac) = match mantissa.find('.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, ""),
    };
    let digits = format!("{int_part}{frac}");
    let unscaled = parse_i128(&digits)?;
    let scale = frac.len() as i32 - exp;
    let mut out = BytesMut::new();
    out.put_i32(scale);
    out.put_slice(&minimal_twos_complement(unscaled));
    Some(out.freeze())
}

/// Days since 1970-01-01 for a civil date (proleptic Gregorian).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn parse_date(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let mut it = body.splitn(3, '-');
    let y: i64 = it.next()?.parse().ok()?;
    let m: u32 = it.next()?.parse().ok()?;
    let d: u32 = it.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(if neg { -y } else { y }, m) {
        return None;
    }
    Some(days_from_civil(if neg { -y } else { y }, m, d))
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    let (hms, frac) = match s.find('.') {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, ""),
    };
    let mut it = hms.split(':');
    let h: i64 = it.next()?.parse().ok()?;
    let m: i64 = it.next()?.parse().ok()?;
    let sec: i64 = it.next()?.parse().ok()?;
    if it.next().is_some() || h > 23 || m > 59 || sec > 59 || frac.len() > 9 {
        return None;
    }
    let nanos: i64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    Some(((h * 60 + m) * 60 + sec) * 1_000_000_000 + nanos)
}

/// Parses Cassandra's timestamp string forms: `yyyy-mm-dd[( |T)hh:mm[:ss[.fff]]][Z|(+|-)hh[:]mm]`.
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(v) = s.parse::<i64>() {
        return Some(v);
    }
    let date_end = s.find([' ', 'T']).unwrap_or(s.len());
    let (date_part, rest) = s.split_at(date_end);
    // Zone directly after a date ("2024-01-01+0000").
    let (date_part, mut zone) = split_zone(date_part, 10);
    let days = parse_date(date_part)?;
    let mut ms_of_day: i64 = 0;
    let rest = rest.trim_start_matches([' ', 'T']);
    if !rest.is_empty() {
        let (time_part, z) = split_zone(rest, 0);
        if z.is_some() {
            zone = z;
        }
        let time_part = time_part.trim();
        let colons = time_part.matches(':').count();
        let full = if colons == 1 {
            format!("{time_part}:00")
        } else {
            time_part.to_string()
        };
        ms_of_day = parse_time(&full)? / 1_000_000;
    }
    let offset_ms = match zone {
        None => 0,
        Some(z) => zone_offset_ms(z)?,
    };
    Some(days * 86_400_000 + ms_of_day - offset_ms)
}

fn split_zone(s: &str, min: usize) -> (&str, Option<&str>) {
    if let Some(stripped) = s.strip_suffix('Z') {
        return (stripped, Some("Z"));
    }
    if let Some(i) = s[min.min(s.len())..]
        .rfind(['+', '-'])
        .map(|i| i + min.min(s.len()))
        && i > 0
        && s.len() - i >= 3
        && s[i + 1..].chars().all(|c| c.is_ascii_digit() || c == ':')
    {
        return (&s[..i], Some(&s[i..]));
    }
    (s, None)
}

fn zone_offset_ms(z: &str) -> Option<i64> {
    if z == "Z" || z.eq_ignore_ascii_case("utc") || z.eq_ignore_ascii_case("gmt") {
        return Some(0);
    }
    let sign = if z.starts_with('-') { -1 } else { 1 };
    let digits: String = z[1..].chars().filter(|c| c.is_ascii_digit()).collect();
    let (h, m) = match digits.len() {
        2 => (digits.parse::<i64>().ok()?, 0),
        4 => (
            digits[..2].parse::<i64>().ok()?,
            digits[2..].parse::<i64>().ok()?,
        ),
        _ => return None,
    };
    Some(sign * (h * 3600 + m * 60) * 1000)
}

/// Parses a duration literal (`1h30m`, `P1DT2H`, `P2W`, `-3d`, `1mo2w`, `12µs`).
pub fn parse_duration(s: &str) -> Option<(i64, i64, i64)> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let (mut months, mut days, mut nanos) = (0i64, 0i64, 0i64);
    if let Some(iso) = body.strip_prefix('P').or_else(|| body.strip_prefix('p')) {
        if let Some((y, mo, d, h, mi, sec)) = iso_alternative(iso) {
            // Alternative form PYYYY-MM-DDThh:mm:ss.
            months += y * 12 + mo;
            days += d;
            nanos += ((h * 60 + mi) * 60 + sec) * 1_000_000_000;
        } else if let Some((date, time)) = iso.split_once(['T', 't']) {
            iso_part(date, false, &mut months, &mut days, &mut nanos)?;
            iso_part(time, true, &mut months, &mut days, &mut nanos)?;
        } else {
            iso_part(iso, false, &mut months, &mut days, &mut nanos)?;
        }
    } else {
        let lower = body.to_ascii_lowercase();
        let bytes = lower.as_bytes();
        let mut i = 0;
        let mut last_rank: Option<usize> = None;
        if bytes.is_empty() {
            return None;
        }
        while i < bytes.len() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let n: i64 = lower.get(start..i)?.parse().ok()?;
            let ustart = i;
            while i < bytes.len() && !bytes[i].is_ascii_digit() {
                i += 1;
            }
            let unit = lower.get(ustart..i)?;
            // Units must come in decreasing size, each at most once (Cassandra's Duration).
            let rank = DURATION_UNITS.iter().position(|u| *u == unit)?;
            if last_rank.is_some_and(|r| rank <= r) {
                return None;
            }
            last_rank = Some(rank);
            match unit {
                "y" => months += n * 12,
                "mo" => months += n,
                "w" => days += n * 7,
                "d" => days += n,
                "h" => nanos += n * 3_600_000_000_000,
                "m" => nanos += n * 60_000_000_000,
                "s" => nanos += n * 1_000_000_000,
                "ms" => nanos += n * 1_000_000,
                "us" | "µs" => nanos += n * 1_000,
                "ns" => nanos += n,
                _ => return None,
            }
        }
    }
    if neg {
        Some((-months, -days, -nanos))
    } else {
        Some((months, days, nanos))
    }
}

const DURATION_UNITS: [&str; 11] = ["y", "mo", "w", "d", "h", "m", "s", "ms", "us", "µs", "ns"];

/// `YYYY-MM-DDThh:mm:ss` (the part after `P`), with exactly those digit counts.
fn iso_alternative(s: &str) -> Option<(i64, i64, i64, i64, i64, i64)> {
    let b = s.as_bytes();
    let shape = "dddd-dd-ddTdd:dd:dd";
    if b.len() != shape.len() {
        return None;
    }
    for (c, want) in b.iter().zip(shape.bytes()) {
        let ok = if want == b'd' {
            c.is_ascii_digit()
        } else {
            c.eq_ignore_ascii_case(&want)
        };
        if !ok {
            return None;
        }
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    Some((
        n(0..4)?,
        n(5..7)?,
        n(8..10)?,
        n(11..13)?,
        n(14..16)?,
        n(17..19)?,
    ))
}

fn iso_part(s: &str, time: bool, months: &mut i64, days: &mut i64, nanos: &mut i64) -> Option<()> {
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: i64 = num.parse().ok()?;
        num.clear();
        match (time, c.to_ascii_uppercase()) {
            (false, 'Y') => *months += n * 12,
            (false, 'M') => *months += n,
            (false, 'W') => *days += n * 7,
            (false, 'D') => *days += n,
            (true, 'H') => *nanos += n * 3_600_000_000_000,
            (true, 'M') => *nanos += n * 60_000_000_000,
            (true, 'S') => *nanos += n * 1_000_000_000,
            _ => return None,
        }
    }
    if num.is_empty() { Some(()) } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_like_cassandra() {
        assert_eq!(parse_timestamp("1970-01-01"), Some(0));
        assert_eq!(
            parse_timestamp("2024-02-29 12:00:00+0000"),
            Some(1_709_208_000_000)
        );
        assert_eq!(
            parse_timestamp("2024-02-29T12:00:00.5Z"),
            Some(1_709_208_000_500)
        );
        assert_eq!(
            parse_timestamp("2024-02-29 13:00+0100"),
            Some(1_709_208_000_000)
        );
        assert_eq!(parse_timestamp("nonsense"), None);
    }

    #[test]
    fn civil_round_trip() {
        for d in [-800_000i64, -1, 0, 1, 19_782, 2_932_896] {
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
    }

    #[test]
    fn varints_are_minimal() {
        assert_eq!(&varint_from_str("128").unwrap()[..], &[0x00, 0x80]);
        assert_eq!(&varint_from_str("-129").unwrap()[..], &[0xFF, 0x7F]);
        assert_eq!(&varint_from_str("0").unwrap()[..], &[0x00]);
    }

    #[test]
    fn vints_match_the_spec_vector() {
        let mut b = BytesMut::new();
        put_unsigned_vint(&mut b, 256_000);
        assert_eq!(&b[..], &[0xC3, 0xE8, 0x00]);
        let mut b = BytesMut::new();
        put_unsigned_vint(&mut b, 5);
        assert_eq!(&b[..], &[0x05]);
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("1h30m"), Some((0, 0, 5_400_000_000_000)));
        assert_eq!(parse_duration("P1DT2H"), Some((0, 1, 7_200_000_000_000)));
        assert_eq!(parse_duration("-2d"), Some((0, -2, 0)));
        assert_eq!(parse_duration("1y2mo"), Some((14, 0, 0)));
        assert_eq!(parse_duration("3x"), None);
        assert_eq!(parse_duration("1h1y"), None);
        assert_eq!(parse_duration("1d1d"), None);
        assert_eq!(
            parse_duration("P0001-02-03T04:05:06"),
            Some((14, 3, 14_706_000_000_000))
        );
    }

    #[test]
    fn invalid_dates_are_refused() {
        assert_eq!(parse_date("2021-02-29"), None);
        assert_eq!(parse_date("2020-02-29"), Some(18_321));
        assert_eq!(parse_date("2021-04-31"), None);
    }

    #[test]
    fn timeuuid_round_trips_millis() {
        let u = timeuuid(1_700_000_000_123_000);
        assert_eq!(u[6] >> 4, 1);
        assert_eq!(timeuuid_millis(&u), 1_700_000_000_123);
    }
}
