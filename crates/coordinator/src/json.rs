//! CQL values ↔ JSON (`SELECT JSON`, `INSERT … JSON`, `toJson()`, `fromJson()`), and the
//! text form of values used by `CAST(x AS text)`, as Cassandra writes them.

use amphora_types::CqlType;
use amphora_types::cql_type::{read_unsigned_vint, split_collection, split_tuple};
use bytes::{BufMut, Bytes, BytesMut};

use crate::api::QueryError;
use crate::values::{civil_from_days, serialize_collection, serialize_map, serialize_tuple};

fn be<const N: usize>(v: &[u8]) -> Option<[u8; N]> {
    v.try_into().ok()
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

fn signed_be(v: &[u8]) -> Option<i128> {
    if v.is_empty() || v.len() > 16 {
        return None;
    }
    let mut buf = if v[0] & 0x80 != 0 {
        [0xFFu8; 16]
    } else {
        [0u8; 16]
    };
    buf[16 - v.len()..].copy_from_slice(v);
    Some(i128::from_be_bytes(buf))
}

fn decimal_text(v: &[u8]) -> Option<String> {
    let scale = i32::from_be_bytes(be::<4>(v.get(..4)?)?);
    let unscaled = signed_be(v.get(4..)?)?;
    let neg = unscaled < 0;
    let digits = unscaled.unsigned_abs().to_string();
    let s = if scale <= 0 {
        format!("{digits}{}", "0".repeat((-scale) as usize))
    } else {
        let scale = scale as usize;
        if digits.len() > scale {
            format!(
                "{}.{}",
                &digits[..digits.len() - scale],
                &digits[digits.len() - scale..]
            )
        } else {
            format!("0.{}{}", "0".repeat(scale - digits.len()), digits)
        }
    };
    Some(if neg { format!("-{s}") } else { s })
}

pub fn timestamp_text(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

fn time_text(ns: i64) -> String {
    format!(
        "{:02}:{:02}:{:02}.{:09}",
        ns / 3_600_000_000_000,
        ns / 60_000_000_000 % 60,
        ns / 1_000_000_000 % 60,
        ns % 1_000_000_000
    )
}

fn read_signed_vint(v: &[u8]) -> Option<(i64, usize)> {
    let (u, n) = read_unsigned_vint(v)?;
    Some((((u >> 1) as i64) ^ -((u & 1) as i64), n))
}

fn duration_text(v: &[u8]) -> Option<String> {
    let (months, a) = read_signed_vint(v)?;
    let (days, b) = read_signed_vint(v.get(a..)?)?;
    let (nanos, _) = read_signed_vint(v.get(a + b..)?)?;
    let neg = months < 0 || days < 0 || nanos < 0;
    let (months, days, mut nanos) = (
        months.unsigned_abs(),
        days.unsigned_abs(),
        nanos.unsigned_abs(),
    );
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    if months >= 12 {
        s += &format!("{}y", months / 12);
    }
    if months % 12 > 0 {
        s += &format!("{}mo", months % 12);
    }
    if days > 0 {
        s += &format!("{days}d");
    }
    for (unit, size) in [
        ("h", 3_600_000_000_000u64),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1000),
        ("ns", 1),
    ] {
        if nanos >= size {
            s += &format!("{}{unit}", nanos / size);
            nanos %= size;
        }
    }
    if s.is_empty() || s == "-" {
        s = "0s".into();
    }
    Some(s)
}

fn uuid_text(v: &[u8]) -> Option<String> {
    Some(uuid::Uuid::from_bytes(be::<16>(v)?).to_string())
}

/// Cassandra's text form of a value (CAST(x AS text), and JSON for scalars as strings).
pub fn value_text(ty: &CqlType, v: &[u8]) -> Option<String> {
    Some(match ty {
        CqlType::Ascii | CqlType::Text => String::from_utf8_lossy(v).into_owned(),
        CqlType::Bigint | CqlType::Counter => i64::from_be_bytes(be::<8>(v)?).to_string(),
        CqlType::Int => i32::from_be_bytes(be::<4>(v)?).to_string(),
        CqlType::Smallint => i16::from_be_bytes(be::<2>(v)?).to_string(),
        CqlType::Tinyint => i8::from_be_bytes(be::<1>(v)?).to_string(),
        CqlType::Varint => match signed_be(v) {
            Some(n) => n.to_string(),
            None => return None,
        },
        CqlType::Decimal => decimal_text(v)?,
        CqlType::Double => {
            let f = f64::from_be_bytes(be::<8>(v)?);
            if f.is_nan() {
                "NaN".into()
            } else if f.is_infinite() {
                if f > 0.0 {
                    "Infinity".into()
                } else {
                    "-Infinity".into()
                }
            } else {
                format!("{f:?}")
            }
        }
        CqlType::Float => {
            let f = f32::from_be_bytes(be::<4>(v)?);
            if f.is_nan() {
                "NaN".into()
            } else if f.is_infinite() {
                if f > 0.0 {
                    "Infinity".into()
                } else {
                    "-Infinity".into()
                }
            } else {
                format!("{f:?}")
            }
        }
        CqlType::Boolean => (v.first()? != &0).to_string(),
        CqlType::Blob | CqlType::Custom(_) => format!("0x{}", crate::values::hex(v)),
        CqlType::Uuid | CqlType::Timeuuid => uuid_text(v)?,
        CqlType::Timestamp => timestamp_text(i64::from_be_bytes(be::<8>(v)?)),
        CqlType::Date => {
            let d = u32::from_be_bytes(be::<4>(v)?) as i64 - (1i64 << 31);
            let (y, m, dd) = civil_from_days(d);
            format!("{y:04}-{m:02}-{dd:02}")
        }
        CqlType::Time => time_text(i64::from_be_bytes(be::<8>(v)?)),
        CqlType::Inet => match v.len() {
            4 => std::net::Ipv4Addr::from(be::<4>(v)?).to_string(),
            16 => std::net::Ipv6Addr::from(be::<16>(v)?).to_string(),
            _ => return None,
        },
        CqlType::Duration => duration_text(v)?,
        _ => to_json(ty, Some(v)),
    })
}

/// JSON text of a value (null → `null`).
pub fn to_json(ty: &CqlType, v: Option<&[u8]>) -> String {
    let Some(v) = v else { return "null".into() };
    // Cassandra writes an empty (zero-length) value of these types as "".
    if v.is_empty()
        && matches!(
            ty,
            CqlType::Double
                | CqlType::Float
                | CqlType::Uuid
                | CqlType::Timeuuid
                | CqlType::Timestamp
                | CqlType::Varint
                | CqlType::Decimal
        )
    {
        return "\"\"".into();
    }
    match ty {
        // Java's Double.toString / Float.toString; NaN and infinities are not JSON: null.
        CqlType::Double => match be::<8>(v).map(f64::from_be_bytes) {
            Some(x) if x.is_finite() => crate::functions::java_double(x),
            _ => "null".into(),
        },
        CqlType::Float => match be::<4>(v).map(f32::from_be_bytes) {
            Some(x) if x.is_finite() => crate::functions::java_float(x),
            _ => "null".into(),
        },
        CqlType::Bigint
        | CqlType::Counter
        | CqlType::Int
        | CqlType::Smallint
        | CqlType::Tinyint
        | CqlType::Varint
        | CqlType::Decimal
        | CqlType::Boolean => value_text(ty, v).unwrap_or_else(|| "null".into()),
        CqlType::List { elem, .. } | CqlType::Set { elem, .. } => match split_collection(v, 1) {
            Ok(items) => format!(
                "[{}]",
                items
                    .iter()
                    .map(|i| to_json(elem, *i))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(_) => "null".into(),
        },
        CqlType::Vector { elem, dim } => {
            let items = split_vector(elem, *dim, v);
            format!(
                "[{}]",
                items
                    .iter()
                    .map(|i| to_json(elem, Some(i)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        CqlType::Map { key, value, .. } => match split_collection(v, 2) {
            Ok(items) => {
                let parts: Vec<String> = items
                    .chunks(2)
                    .map(|kv| {
                        let k = kv.first().copied().flatten();
                        let val = kv.get(1).copied().flatten();
                        let kj = to_json(key, k);
                        let kj = if kj.starts_with('"') {
                            kj
                        } else {
                            json_string(&kj)
                        };
                        format!("{kj}: {}", to_json(value, val))
                    })
                    .collect();
                format!("{{{}}}", parts.join(", "))
            }
            Err(_) => "null".into(),
        },
        CqlType::Tuple(types) => match split_tuple(v) {
            Ok(items) => format!(
                "[{}]",
                types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| to_json(t, items.get(i).copied().flatten()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(_) => "null".into(),
        },
        CqlType::Udt(d) => match split_tuple(v) {
            Ok(items) => {
                let parts: Vec<String> = d
                    .field_names
                    .iter()
                    .zip(&d.field_types)
                    .enumerate()
                    .map(|(i, (n, t))| {
                        format!(
                            "{}: {}",
                            json_string(&json_name(n)),
                            to_json(t, items.get(i).copied().flatten())
                        )
                    })
                    .collect();
                format!("{{{}}}", parts.join(", "))
            }
            Err(_) => "null".into(),
        },
        CqlType::Inet => match crate::functions::java_inet(v) {
            Some(s) => json_string(&s),
            None => "null".into(),
        },
        _ => match value_text(ty, v) {
            Some(s) => json_string(&s),
            None => "null".into(),
        },
    }
}

fn split_vector<'a>(elem: &CqlType, dim: u32, v: &'a [u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(dim as usize);
    let mut i = 0;
    for _ in 0..dim {
        let len = match elem.fixed_len() {
            Some(l) => l,
            None => match read_unsigned_vint(&v[i.min(v.len())..]) {
                Some((l, n)) => {
                    i += n;
                    l as usize
                }
                None => break,
            },
        };
        let Some(s) = v.get(i..i + len) else { break };
        out.push(s);
        i += len;
    }
    out
}

/// Column names in JSON: case-sensitive names are double-quoted, as Cassandra does.
/// Selectors that are function calls (`system.tojson(l)`, `writetime(v)`) keep their name.
pub fn json_name(name: &str) -> String {
    if name.contains('(')
        || name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        name.to_string()
    } else {
        format!("\"{name}\"")
    }
}

/// Parses JSON text as Cassandra's Jackson reads it: a number beyond the double range is
/// infinite rather than an error (serde_json refuses it, so such numbers are read as the
/// strings `"Infinity"` / `"-Infinity"`, which a float column accepts).
pub fn parse_json(text: &[u8]) -> Result<serde_json::Value, serde_json::Error> {
    match serde_json::from_slice(text) {
        Ok(v) => Ok(v),
        Err(e) => {
            let s = String::from_utf8_lossy(text);
            let rewritten = infinite_numbers_as_strings(&s);
            if rewritten == s {
                return Err(e);
            }
            serde_json::from_str(&rewritten).map_err(|_| e)
        }
    }
}

fn infinite_numbers_as_strings(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < b.len() && matches!(b[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let token = s.get(start..i).unwrap_or("");
                if let Ok(x) = token.parse::<f64>()
                    && x.is_infinite()
                {
                    out.push_str(s.get(last..start).unwrap_or(""));
                    out.push_str(if x > 0.0 {
                        "\"Infinity\""
                    } else {
                        "\"-Infinity\""
                    });
                    last = i;
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(s.get(last.min(s.len())..).unwrap_or(""));
    out
}

fn bad(ty: &CqlType, what: &str) -> QueryError {
    QueryError::Invalid(format!("Unable to make {ty} from {what}"))
}

/// Serializes a JSON value for `ty` (`fromJson`, `INSERT … JSON`). `None` = null.
pub fn from_json(ty: &CqlType, j: &serde_json::Value) -> Result<Option<Bytes>, QueryError> {
    use serde_json::Value as J;
    if j.is_null() {
        return Ok(None);
    }
    let lit = |l: amphora_cql::Literal| {
        crate::values::encode_literal(&l, ty).ok_or_else(|| bad(ty, &j.to_string()))
    };
    let out = match (ty, j) {
        (CqlType::Ascii | CqlType::Text, J::String(s)) => Bytes::copy_from_slice(s.as_bytes()),
        (CqlType::Boolean, J::Bool(b)) => Bytes::copy_from_slice(&[u8::from(*b)]),
        (CqlType::Boolean, J::String(s)) => {
            Bytes::copy_from_slice(&[u8::from(s.eq_ignore_ascii_case("true"))])
        }
        (
            CqlType::Bigint
            | CqlType::Counter
            | CqlType::Int
            | CqlType::Smallint
            | CqlType::Tinyint
            | CqlType::Varint
            | CqlType::Timestamp,
            J::Number(n),
        ) => lit(amphora_cql::Literal::Integer(n.to_string()))?,
        (CqlType::Float | CqlType::Double | CqlType::Decimal, J::Number(n)) => {
            lit(amphora_cql::Literal::Float(n.to_string()))?
        }
        (CqlType::Blob, J::String(s)) => {
            if !s.starts_with("0x") {
                return Err(QueryError::Invalid(format!(
                    "Value '{s}' is not a valid blob representation: String representation of blob is missing 0x prefix: {s}"
                )));
            }
            lit(amphora_cql::Literal::Hex(s.clone()))?
        }
        (CqlType::Uuid | CqlType::Timeuuid, J::String(s)) => {
            lit(amphora_cql::Literal::Uuid(s.clone()))?
        }
        (CqlType::Duration, J::String(s)) => lit(amphora_cql::Literal::Duration(s.clone()))?,
        (
            CqlType::Bigint | CqlType::Int | CqlType::Smallint | CqlType::Tinyint | CqlType::Varint,
            J::String(s),
        ) => lit(amphora_cql::Literal::Integer(s.clone()))?,
        (CqlType::Float | CqlType::Double | CqlType::Decimal, J::String(s)) => {
            lit(amphora_cql::Literal::Float(s.clone()))?
        }
        (_, J::String(s)) => lit(amphora_cql::Literal::String(s.clone()))?,
        (CqlType::List { elem, .. } | CqlType::Set { elem, .. }, J::Array(items)) => {
            let mut vals = Vec::with_capacity(items.len());
            for i in items {
                vals.push(from_json(elem, i)?.ok_or_else(|| {
                    QueryError::Invalid("null is not supported inside collections".into())
                })?);
            }
            if matches!(ty, CqlType::Set { .. }) {
                vals.sort_by(|a, b| elem.compare(a, b));
                vals.dedup();
            }
            serialize_collection(vals.iter().map(|v| Some(&v[..])))
        }
        (CqlType::Vector { elem, .. }, J::Array(items)) => {
            let mut out = BytesMut::new();
            for i in items {
                let v = from_json(elem, i)?.ok_or_else(|| bad(ty, "null element"))?;
                out.put_slice(&v);
            }
            out.freeze()
        }
        (CqlType::Map { key, value, .. }, J::Object(m)) => {
            let mut kvs = Vec::with_capacity(m.len());
            for (k, v) in m {
                let kj = serde_json::from_str::<J>(k)
                    .ok()
                    .filter(|x| !x.is_string() || matches!(**key, CqlType::Text | CqlType::Ascii))
                    .unwrap_or(J::String(k.clone()));
                let kb = from_json(key, &kj)?.ok_or_else(|| bad(ty, "null key"))?;
                let vb = from_json(value, v)?.ok_or_else(|| {
                    QueryError::Invalid("null is not supported inside collections".into())
                })?;
                kvs.push((kb, vb));
            }
            kvs.sort_by(|a, b| key.compare(&a.0, &b.0));
            serialize_map(kvs.iter().map(|(k, v)| (&k[..], &v[..])))
        }
        (CqlType::Tuple(types), J::Array(items)) => {
            if items.len() != types.len() {
                let what = if items.len() < types.len() {
                    "is missing items"
                } else {
                    "contains extra items"
                };
                return Err(QueryError::Invalid(format!(
                    "Tuple {what} (expected {}): {j}",
                    types.len()
                )));
            }
            let vals = types
                .iter()
                .zip(items)
                .map(|(t, i)| from_json(t, i))
                .collect::<Result<Vec<_>, _>>()?;
            serialize_tuple(vals.iter().map(|v| v.as_deref()))
        }
        (CqlType::Udt(d), J::Object(m)) => {
            let mut vals: Vec<Option<Bytes>> = vec![None; d.field_names.len()];
            for (k, v) in m {
                // Unquoted field names are case-insensitive, "\"Quoted\"" ones keep their case.
                let name = match k.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
                    Some(q) => q.to_string(),
                    None => k.to_lowercase(),
                };
                let name = name.as_str();
                let i = d
                    .field_names
                    .iter()
                    .position(|f| f == name)
                    .ok_or_else(|| {
                        QueryError::Invalid(format!(
                            "Unknown field '{name}' in value of user defined type {}",
                            d.name
                        ))
                    })?;
                vals[i] = from_json(&d.field_types[i], v)?;
            }
            serialize_tuple(vals.iter().map(|v| v.as_deref()))
        }
        (CqlType::Date | CqlType::Time, J::Number(n)) => {
            let what = if *ty == CqlType::Date { "date" } else { "time" };
            return Err(QueryError::Invalid(format!(
                "Expected a string representation of a {what} value, but got a number: {n}"
            )));
        }
        _ => return Err(bad(ty, &j.to_string())),
    };
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_format_like_cassandra() {
        assert_eq!(to_json(&CqlType::Int, Some(&7i32.to_be_bytes())), "7");
        assert_eq!(to_json(&CqlType::Text, Some(b"a\"b")), "\"a\\\"b\"");
        assert_eq!(
            to_json(&CqlType::Timestamp, Some(&0i64.to_be_bytes())),
            "\"1970-01-01 00:00:00.000Z\""
        );
        assert_eq!(to_json(&CqlType::Blob, Some(&[0xca, 0xfe])), "\"0xcafe\"");
        assert_eq!(
            value_text(&CqlType::Decimal, &[0, 0, 0, 2, 0x30, 0x39]).as_deref(),
            Some("123.45")
        );
        assert_eq!(to_json(&CqlType::Int, None), "null");
    }

    #[test]
    fn numbers_beyond_double_range_are_infinite() {
        let v = parse_json(br#"{"d": 1e400, "e": -1e400, "s": "1e400", "f": 1.5}"#).expect("json");
        assert_eq!(v["d"], serde_json::json!("Infinity"));
        assert_eq!(v["e"], serde_json::json!("-Infinity"));
        assert_eq!(v["s"], serde_json::json!("1e400"));
        assert_eq!(v["f"], serde_json::json!(1.5));
        let b = from_json(&CqlType::Double, &v["d"])
            .expect("double")
            .expect("set");
        assert_eq!(&b[..], &f64::INFINITY.to_be_bytes()[..]);
        assert!(parse_json(b"not json").is_err());
    }

    #[test]
    fn collections_round_trip_through_json() {
        let ty = CqlType::Map {
            key: Box::new(CqlType::Text),
            value: Box::new(CqlType::List {
                elem: Box::new(CqlType::Int),
                frozen: true,
            }),
            frozen: false,
        };
        let j: serde_json::Value = serde_json::from_str(r#"{"a": [1, 2], "b": []}"#).expect("json");
        let b = from_json(&ty, &j).expect("encode").expect("not null");
        assert_eq!(to_json(&ty, Some(&b)), r#"{"a": [1, 2], "b": []}"#);
    }
}
