//! CQL types: comparators, validation, and schema type strings.
//!
//! Values are handled in their serialized form (native protocol encoding, which is also
//! Cassandra's internal encoding); frozen collections, tuples and UDTs use the v4+
//! serialization (`[int n]` + `[bytes]` elements).

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Errors from parsing type strings or validating values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TypeError {
    #[error("invalid value for {ty}: expected {expected} bytes, got {received}")]
    BadLength {
        ty: String,
        expected: String,
        received: usize,
    },
    #[error("invalid {ty} value: {reason}")]
    Invalid { ty: String, reason: String },
    #[error("cannot parse type {input:?} at byte {offset}: {reason}")]
    Parse {
        input: String,
        offset: usize,
        reason: String,
    },
    #[error("unknown user type {0:?}")]
    UnknownUdt(String),
}

/// A user-defined type, as declared with CREATE TYPE.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UdtDef {
    pub keyspace: String,
    pub name: String,
    pub field_names: Vec<String>,
    pub field_types: Vec<CqlType>,
    /// Whether this use of the type is frozen (a non-frozen UDT is multi-cell).
    pub frozen: bool,
}

/// A CQL type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CqlType {
    Ascii,
    Bigint,
    Blob,
    Boolean,
    Counter,
    Date,
    Decimal,
    Double,
    Duration,
    Float,
    Inet,
    Int,
    Smallint,
    Text,
    Time,
    Timestamp,
    Timeuuid,
    Tinyint,
    Uuid,
    Varint,
    List {
        elem: Box<CqlType>,
        frozen: bool,
    },
    Set {
        elem: Box<CqlType>,
        frozen: bool,
    },
    Map {
        key: Box<CqlType>,
        value: Box<CqlType>,
        frozen: bool,
    },
    /// Always frozen.
    Tuple(Vec<CqlType>),
    Udt(Arc<UdtDef>),
    Vector {
        elem: Box<CqlType>,
        dim: u32,
    },
    /// A custom type given by its Java class name.
    Custom(String),
}

impl CqlType {
    /// True for non-frozen collections and UDTs: stored as one cell per element/field.
    pub fn is_multi_cell(&self) -> bool {
        match self {
            CqlType::List { frozen, .. }
            | CqlType::Set { frozen, .. }
            | CqlType::Map { frozen, .. } => !frozen,
            CqlType::Udt(d) => !d.frozen,
            _ => false,
        }
    }

    pub fn is_counter(&self) -> bool {
        matches!(self, CqlType::Counter)
    }

    pub fn is_collection(&self) -> bool {
        matches!(
            self,
            CqlType::List { .. } | CqlType::Set { .. } | CqlType::Map { .. }
        )
    }

    /// Whether the value is frozen (non-collections count as frozen).
    pub fn is_frozen(&self) -> bool {
        !self.is_multi_cell()
    }

    /// Returns this type frozen, with every nested type frozen too.
    pub fn freeze(&self) -> CqlType {
        match self {
            CqlType::List { elem, .. } => CqlType::List {
                elem: Box::new(elem.freeze()),
                frozen: true,
            },
            CqlType::Set { elem, .. } => CqlType::Set {
                elem: Box::new(elem.freeze()),
                frozen: true,
            },
            CqlType::Map { key, value, .. } => CqlType::Map {
                key: Box::new(key.freeze()),
                value: Box::new(value.freeze()),
                frozen: true,
            },
            CqlType::Tuple(ts) => CqlType::Tuple(ts.iter().map(CqlType::freeze).collect()),
            CqlType::Udt(d) => {
                if d.frozen {
                    self.clone()
                } else {
                    let mut d2 = (**d).clone();
                    d2.frozen = true;
                    CqlType::Udt(Arc::new(d2))
                }
            }
            CqlType::Vector { elem, dim } => CqlType::Vector {
                elem: Box::new(elem.freeze()),
                dim: *dim,
            },
            other => other.clone(),
        }
    }

    /// For multi-cell types: the comparator of the cell path (list: timeuuid, set: element,
    /// map: key, UDT: field index as u16 big-endian, compared bytewise).
    pub fn compare_cell_path(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self {
            CqlType::List { .. } => CqlType::Timeuuid.compare(a, b),
            CqlType::Set { elem, .. } => elem.compare(a, b),
            CqlType::Map { key, .. } => key.compare(a, b),
            _ => a.cmp(b),
        }
    }

    /// Size of a value of this type if fixed (used by vector encoding).
    pub fn fixed_len(&self) -> Option<usize> {
        match self {
            CqlType::Boolean => Some(1),
            CqlType::Int | CqlType::Float | CqlType::Date => Some(4),
            CqlType::Bigint
            | CqlType::Double
            | CqlType::Timestamp
            | CqlType::Time
            | CqlType::Counter => Some(8),
            CqlType::Uuid | CqlType::Timeuuid => Some(16),
            _ => None,
        }
    }

    /// Compares two serialized values as Cassandra orders them. Empty values sort first.
    pub fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        match (a.is_empty(), b.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        match self {
            CqlType::Ascii
            | CqlType::Text
            | CqlType::Blob
            | CqlType::Inet
            | CqlType::Boolean
            | CqlType::Date
            | CqlType::Duration
            | CqlType::Custom(_) => a.cmp(b),
            CqlType::Bigint
            | CqlType::Int
            | CqlType::Smallint
            | CqlType::Tinyint
            | CqlType::Counter
            | CqlType::Timestamp
            | CqlType::Time => compare_signed(a, b),
            CqlType::Float => match (a.try_into(), b.try_into()) {
                (Ok(x), Ok(y)) => {
                    java_float_cmp(f32::from_be_bytes(x) as f64, f32::from_be_bytes(y) as f64)
                }
                _ => a.cmp(b),
            },
            CqlType::Double => match (a.try_into(), b.try_into()) {
                (Ok(x), Ok(y)) => java_float_cmp(f64::from_be_bytes(x), f64::from_be_bytes(y)),
                _ => a.cmp(b),
            },
            CqlType::Varint => compare_varint(a, b),
            CqlType::Decimal => compare_decimal(a, b),
            CqlType::Timeuuid => compare_timeuuid(a, b),
            CqlType::Uuid => compare_uuid(a, b),
            CqlType::List { elem, .. } | CqlType::Set { elem, .. } => {
                compare_collection(a, b, &[elem.as_ref()])
            }
            CqlType::Map { key, value, .. } => {
                compare_collection(a, b, &[key.as_ref(), value.as_ref()])
            }
            CqlType::Tuple(ts) => compare_tuple(a, b, ts),
            CqlType::Udt(d) => compare_tuple(a, b, &d.field_types),
            CqlType::Vector { elem, dim } => compare_vector(a, b, elem, *dim),
        }
    }

    /// Whether a value of this type can hold a set or map, whose bytes as a client sends
    /// them need not be in Cassandra's canonical order (see [`CqlType::normalize`]).
    pub fn has_unordered_collection(&self) -> bool {
        match self {
            CqlType::Set { .. } | CqlType::Map { .. } => true,
            CqlType::List { elem, .. } => elem.has_unordered_collection(),
            _ => false,
        }
    }

    /// The canonical form Cassandra stores for a valid value: sets sorted by their element
    /// type's order without duplicates, maps sorted by key with one entry per key (the
    /// last one sent), recursively through the elements of collections. Tuple and UDT
    /// fields are kept as sent, as Cassandra keeps them. A value that does not split is
    /// returned as it is (validation reports it).
    pub fn normalize(&self, v: &[u8]) -> Vec<u8> {
        let norm = |t: &CqlType, e: Option<&[u8]>| -> Option<Vec<u8>> {
            e.map(|e| {
                if t.has_unordered_collection() {
                    t.normalize(e)
                } else {
                    e.to_vec()
                }
            })
        };
        match self {
            CqlType::List { elem, .. } | CqlType::Set { elem, .. } => {
                let Ok(els) = split_collection(v, 1) else {
                    return v.to_vec();
                };
                let mut els: Vec<Option<Vec<u8>>> =
                    els.into_iter().map(|e| norm(elem, e)).collect();
                if matches!(self, CqlType::Set { .. }) {
                    let cmp = |a: &Option<Vec<u8>>, b: &Option<Vec<u8>>| match (a, b) {
                        (Some(a), Some(b)) => elem.compare(a, b),
                        (a, b) => a.is_some().cmp(&b.is_some()),
                    };
                    els.sort_by(cmp);
                    els.dedup_by(|a, b| cmp(a, b) == Ordering::Equal);
                }
                join_collection(els.len(), els.iter().map(|e| e.as_deref()))
            }
            CqlType::Map { key, value, .. } => {
                let Ok(els) = split_collection(v, 2) else {
                    return v.to_vec();
                };
                let mut pairs: Vec<MapEntry> = els
                    .chunks(2)
                    .map(|kv| (norm(key, kv[0]), norm(value, kv.get(1).copied().flatten())))
                    .collect();
                let cmp = |a: &Option<Vec<u8>>, b: &Option<Vec<u8>>| match (a, b) {
                    (Some(a), Some(b)) => key.compare(a, b),
                    (a, b) => a.is_some().cmp(&b.is_some()),
                };
                // Stable: among equal keys the last one sent wins.
                pairs.sort_by(|a, b| cmp(&a.0, &b.0));
                let mut out: Vec<MapEntry> = Vec::with_capacity(pairs.len());
                for p in pairs {
                    match out.last_mut() {
                        Some(last) if cmp(&last.0, &p.0) == Ordering::Equal => *last = p,
                        _ => out.push(p),
                    }
                }
                join_collection(
                    out.len(),
                    out.iter().flat_map(|(k, v)| [k.as_deref(), v.as_deref()]),
                )
            }
            _ => v.to_vec(),
        }
    }

    /// Checks that `v` is a valid serialized value of this type. Empty values are valid
    /// for every type (they differ from null) but collections: no valid list, set or map
    /// is zero bytes long (Cassandra: "Not enough bytes to read a list").
    pub fn validate(&self, v: &[u8]) -> Result<(), TypeError> {
        if v.is_empty() {
            return match self {
                CqlType::List { .. } => Err(self.invalid("Not enough bytes to read a list".into())),
                CqlType::Set { .. } => Err(self.invalid("Not enough bytes to read a set".into())),
                CqlType::Map { .. } => Err(self.invalid("Not enough bytes to read a map".into())),
                _ => Ok(()),
            };
        }
        let fixed = |n: usize| -> Result<(), TypeError> {
            if v.len() == n {
                Ok(())
            } else {
                Err(TypeError::BadLength {
                    ty: self.to_string(),
                    expected: n.to_string(),
                    received: v.len(),
                })
            }
        };
        match self {
            CqlType::Ascii => {
                if let Some(p) = v.iter().position(|b| *b > 127) {
                    return Err(self.invalid(format!("non-ascii byte at offset {p}")));
                }
                Ok(())
            }
            CqlType::Text => std::str::from_utf8(v)
                .map(|_| ())
                .map_err(|e| self.invalid(format!("invalid UTF-8 at offset {}", e.valid_up_to()))),
            CqlType::Blob | CqlType::Custom(_) | CqlType::Varint => Ok(()),
            CqlType::Boolean | CqlType::Tinyint => fixed(1),
            CqlType::Smallint => fixed(2),
            CqlType::Int | CqlType::Float | CqlType::Date => fixed(4),
            CqlType::Bigint | CqlType::Counter | CqlType::Double | CqlType::Timestamp => fixed(8),
            CqlType::Time => {
                fixed(8)?;
                let n = read_i64(v, 0).unwrap_or(-1);
                if !(0..=86_399_999_999_999).contains(&n) {
                    return Err(self.invalid(format!("time {n} out of range")));
                }
                Ok(())
            }
            CqlType::Uuid => fixed(16),
            CqlType::Timeuuid => {
                fixed(16)?;
                if v[6] >> 4 != 1 {
                    return Err(self.invalid("not a version 1 UUID".into()));
                }
                Ok(())
            }
            CqlType::Inet => {
                if v.len() == 4 || v.len() == 16 {
                    Ok(())
                } else {
                    Err(TypeError::BadLength {
                        ty: "inet".into(),
                        expected: "4 or 16".into(),
                        received: v.len(),
                    })
                }
            }
            CqlType::Decimal => {
                if v.len() < 4 {
                    return Err(TypeError::BadLength {
                        ty: "decimal".into(),
                        expected: ">= 4".into(),
                        received: v.len(),
                    });
                }
                Ok(())
            }
            CqlType::Duration => {
                let mut pos = 0;
                let mut vals = [0i64; 3];
                for slot in &mut vals {
                    let (x, n) = read_signed_vint(&v[pos..])
                        .ok_or_else(|| self.invalid("truncated vint".into()))?;
                    *slot = x;
                    pos += n;
                }
                if pos != v.len() {
                    return Err(self.invalid("trailing bytes".into()));
                }
                let neg = vals.iter().any(|x| *x < 0);
                let pos_ = vals.iter().any(|x| *x > 0);
                if neg && pos_ {
                    return Err(
                        self.invalid("months, days and nanoseconds must have the same sign".into())
                    );
                }
                Ok(())
            }
            CqlType::List { elem, .. } | CqlType::Set { elem, .. } => {
                let els = split_collection(v, 1).map_err(|r| self.invalid(r))?;
                for e in els.into_iter().flatten() {
                    elem.validate(e)?;
                }
                Ok(())
            }
            CqlType::Map { key, value, .. } => {
                let els = split_collection(v, 2).map_err(|r| self.invalid(r))?;
                for (i, e) in els.into_iter().enumerate() {
                    if let Some(e) = e {
                        if i % 2 == 0 {
                            key.validate(e)?
                        } else {
                            value.validate(e)?
                        }
                    }
                }
                Ok(())
            }
            CqlType::Tuple(ts) => validate_tuple(self, v, ts),
            CqlType::Udt(d) => validate_tuple(self, v, &d.field_types),
            CqlType::Vector { elem, dim } => {
                let els = split_vector(v, elem, *dim)
                    .ok_or_else(|| self.invalid("bad vector encoding".into()))?;
                for e in els {
                    elem.validate(e)?;
                }
                Ok(())
            }
        }
    }

    fn invalid(&self, reason: String) -> TypeError {
        TypeError::Invalid {
            ty: self.to_string(),
            reason,
        }
    }

    /// Parses a schema type string as Display prints it (also accepts `varchar`,
    /// quoted custom class names, extra whitespace, any case for native types).
    pub fn parse(
        s: &str,
        resolve_udt: &dyn Fn(&str) -> Option<Arc<UdtDef>>,
    ) -> Result<CqlType, TypeError> {
        let mut p = TypeParser {
            s,
            pos: 0,
            resolve_udt,
        };
        let t = p.parse_type()?;
        p.skip_ws();
        if p.pos != s.len() {
            return Err(p.err("trailing characters"));
        }
        Ok(t)
    }

    /// Cassandra's native type name for simple types (None for compound types).
    pub fn native_name(&self) -> Option<&'static str> {
        Some(match self {
            CqlType::Ascii => "ascii",
            CqlType::Bigint => "bigint",
            CqlType::Blob => "blob",
            CqlType::Boolean => "boolean",
            CqlType::Counter => "counter",
            CqlType::Date => "date",
            CqlType::Decimal => "decimal",
            CqlType::Double => "double",
            CqlType::Duration => "duration",
            CqlType::Float => "float",
            CqlType::Inet => "inet",
            CqlType::Int => "int",
            CqlType::Smallint => "smallint",
            CqlType::Text => "text",
            CqlType::Time => "time",
            CqlType::Timestamp => "timestamp",
            CqlType::Timeuuid => "timeuuid",
            CqlType::Tinyint => "tinyint",
            CqlType::Uuid => "uuid",
            CqlType::Varint => "varint",
            _ => return None,
        })
    }
}

impl fmt::Display for CqlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = self.native_name() {
            return f.write_str(n);
        }
        match self {
            CqlType::List { elem, frozen } => {
                wrap_frozen(f, *frozen, |f| write!(f, "list<{elem}>"))
            }
            CqlType::Set { elem, frozen } => wrap_frozen(f, *frozen, |f| write!(f, "set<{elem}>")),
            CqlType::Map { key, value, frozen } => {
                wrap_frozen(f, *frozen, |f| write!(f, "map<{key}, {value}>"))
            }
            CqlType::Tuple(ts) => wrap_frozen(f, true, |f| {
                f.write_str("tuple<")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str(">")
            }),
            CqlType::Udt(d) => wrap_frozen(f, d.frozen, |f| f.write_str(&quote_ident(&d.name))),
            CqlType::Vector { elem, dim } => write!(f, "vector<{elem}, {dim}>"),
            CqlType::Custom(c) => write!(f, "'{}'", c.replace('\'', "''")),
            _ => Ok(()),
        }
    }
}

fn wrap_frozen(
    f: &mut fmt::Formatter<'_>,
    frozen: bool,
    inner: impl FnOnce(&mut fmt::Formatter<'_>) -> fmt::Result,
) -> fmt::Result {
    if frozen {
        f.write_str("frozen<")?;
        inner(f)?;
        f.write_str(">")
    } else {
        inner(f)
    }
}

/// Quotes an identifier if it is not a plain lower-case identifier.
pub fn quote_ident(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        s.to_string()
    } else {
        format!("\"{}\"", s.replace('"', "\"\""))
    }
}

struct TypeParser<'a> {
    s: &'a str,
    pos: usize,
    resolve_udt: &'a dyn Fn(&str) -> Option<Arc<UdtDef>>,
}

impl TypeParser<'_> {
    fn err(&self, reason: &str) -> TypeError {
        TypeError::Parse {
            input: self.s.to_string(),
            offset: self.pos,
            reason: reason.to_string(),
        }
    }
    fn skip_ws(&mut self) {
        while self
            .s
            .as_bytes()
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.pos += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.as_bytes().get(self.pos).copied()
    }
    fn expect(&mut self, c: u8) -> Result<(), TypeError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", c as char)))
        }
    }
    /// An identifier; quoted identifiers keep case, unquoted fold to lower case.
    fn ident(&mut self) -> Result<(String, bool), TypeError> {
        match self.peek() {
            Some(b'"') => {
                self.pos += 1;
                let mut out = String::new();
                loop {
                    let rest = &self.s[self.pos..];
                    let Some(i) = rest.find('"') else {
                        return Err(self.err("unterminated quoted name"));
                    };
                    out.push_str(&rest[..i]);
                    self.pos += i + 1;
                    if self.s.as_bytes().get(self.pos) == Some(&b'"') {
                        out.push('"');
                        self.pos += 1;
                    } else {
                        return Ok((out, true));
                    }
                }
            }
            Some(b'\'') => Err(self.err("unexpected quote")),
            _ => {
                let start = self.pos;
                while self
                    .s
                    .as_bytes()
                    .get(self.pos)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.')
                {
                    self.pos += 1;
                }
                if start == self.pos {
                    return Err(self.err("expected a type name"));
                }
                Ok((self.s[start..self.pos].to_ascii_lowercase(), false))
            }
        }
    }
    fn parse_type(&mut self) -> Result<CqlType, TypeError> {
        if self.peek() == Some(b'\'') {
            self.pos += 1;
            let mut out = String::new();
            loop {
                let rest = &self.s[self.pos..];
                let Some(i) = rest.find('\'') else {
                    return Err(self.err("unterminated custom type"));
                };
                out.push_str(&rest[..i]);
                self.pos += i + 1;
                if self.s.as_bytes().get(self.pos) == Some(&b'\'') {
                    out.push('\'');
                    self.pos += 1;
                } else {
                    return Ok(CqlType::Custom(out));
                }
            }
        }
        let (name, quoted) = self.ident()?;
        if !quoted {
            let native = match name.as_str() {
                "ascii" => Some(CqlType::Ascii),
                "bigint" => Some(CqlType::Bigint),
                "blob" => Some(CqlType::Blob),
                "boolean" => Some(CqlType::Boolean),
                "counter" => Some(CqlType::Counter),
                "date" => Some(CqlType::Date),
                "decimal" => Some(CqlType::Decimal),
                "double" => Some(CqlType::Double),
                "duration" => Some(CqlType::Duration),
                "float" => Some(CqlType::Float),
                "inet" => Some(CqlType::Inet),
                "int" => Some(CqlType::Int),
                "smallint" => Some(CqlType::Smallint),
                "text" | "varchar" => Some(CqlType::Text),
                "time" => Some(CqlType::Time),
                "timestamp" => Some(CqlType::Timestamp),
                "timeuuid" => Some(CqlType::Timeuuid),
                "tinyint" => Some(CqlType::Tinyint),
                "uuid" => Some(CqlType::Uuid),
                "varint" => Some(CqlType::Varint),
                _ => None,
            };
            if let Some(t) = native {
                return Ok(t);
            }
            match name.as_str() {
                "frozen" => {
                    self.expect(b'<')?;
                    let t = self.parse_type()?;
                    self.expect(b'>')?;
                    return Ok(t.freeze());
                }
                "list" | "set" => {
                    self.expect(b'<')?;
                    let e = self.parse_type()?.freeze();
                    self.expect(b'>')?;
                    return Ok(if name == "list" {
                        CqlType::List {
                            elem: Box::new(e),
                            frozen: false,
                        }
                    } else {
                        CqlType::Set {
                            elem: Box::new(e),
                            frozen: false,
                        }
                    });
                }
                "map" => {
                    self.expect(b'<')?;
                    let k = self.parse_type()?.freeze();
                    self.expect(b',')?;
                    let v = self.parse_type()?.freeze();
                    self.expect(b'>')?;
                    return Ok(CqlType::Map {
                        key: Box::new(k),
                        value: Box::new(v),
                        frozen: false,
                    });
                }
                "tuple" => {
                    self.expect(b'<')?;
                    let mut ts = vec![self.parse_type()?.freeze()];
                    while self.peek() == Some(b',') {
                        self.pos += 1;
                        ts.push(self.parse_type()?.freeze());
                    }
                    self.expect(b'>')?;
                    return Ok(CqlType::Tuple(ts));
                }
                "vector" => {
                    self.expect(b'<')?;
                    let e = self.parse_type()?.freeze();
                    self.expect(b',')?;
                    self.skip_ws();
                    let start = self.pos;
                    while self
                        .s
                        .as_bytes()
                        .get(self.pos)
                        .is_some_and(|b| b.is_ascii_digit())
                    {
                        self.pos += 1;
                    }
                    let dim: u32 = self.s[start..self.pos]
                        .parse()
                        .map_err(|_| self.err("bad vector dimension"))?;
                    if dim == 0 {
                        return Err(self.err("vector dimension must be positive"));
                    }
                    self.expect(b'>')?;
                    return Ok(CqlType::Vector {
                        elem: Box::new(e),
                        dim,
                    });
                }
                _ => {}
            }
        }
        // A user type, possibly keyspace-qualified (ks.name): resolve by the bare name.
        let bare = name.rsplit('.').next().unwrap_or(&name).to_string();
        match (self.resolve_udt)(&bare) {
            Some(d) => {
                if d.frozen {
                    let mut d2 = (*d).clone();
                    d2.frozen = false;
                    Ok(CqlType::Udt(Arc::new(d2)))
                } else {
                    Ok(CqlType::Udt(d))
                }
            }
            None => Err(TypeError::UnknownUdt(bare)),
        }
    }
}

// ---- comparators ----

fn read_i64(v: &[u8], off: usize) -> Option<i64> {
    v.get(off..off + 8)
        .and_then(|s| s.try_into().ok())
        .map(i64::from_be_bytes)
}

fn read_u64(v: &[u8], off: usize) -> Option<u64> {
    v.get(off..off + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_be_bytes)
}

/// Big-endian two's complement of equal or different lengths, compared numerically.
fn compare_signed(a: &[u8], b: &[u8]) -> Ordering {
    // bigint / timestamp / counter and int: one integer comparison, not a byte loop.
    if let (Ok(x), Ok(y)) = (<[u8; 8]>::try_from(a), <[u8; 8]>::try_from(b)) {
        return i64::from_be_bytes(x).cmp(&i64::from_be_bytes(y));
    }
    if let (Ok(x), Ok(y)) = (<[u8; 4]>::try_from(a), <[u8; 4]>::try_from(b)) {
        return i32::from_be_bytes(x).cmp(&i32::from_be_bytes(y));
    }
    if a.len() == b.len() {
        let (a0, b0) = (a[0] as i8, b[0] as i8);
        return a0.cmp(&b0).then_with(|| a[1..].cmp(&b[1..]));
    }
    compare_varint(a, b)
}

/// Java's Double.compare: -0.0 < 0.0, NaN above everything, all NaNs equal.
fn java_float_cmp(x: f64, y: f64) -> Ordering {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => x.total_cmp(&y),
    }
}

/// Strips redundant sign-extension bytes from a two's complement big-endian integer.
fn trim_varint(v: &[u8]) -> &[u8] {
    let mut i = 0;
    while i + 1 < v.len() {
        let (b, n) = (v[i], v[i + 1]);
        if (b == 0 && n & 0x80 == 0) || (b == 0xff && n & 0x80 != 0) {
            i += 1;
        } else {
            break;
        }
    }
    &v[i..]
}

fn compare_varint(a: &[u8], b: &[u8]) -> Ordering {
    let (a, b) = (trim_varint(a), trim_varint(b));
    let neg_a = a.first().is_some_and(|x| x & 0x80 != 0);
    let neg_b = b.first().is_some_and(|x| x & 0x80 != 0);
    match (neg_a, neg_b) {
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => a.len().cmp(&b.len()).then_with(|| a.cmp(b)),
        // Both negative: longer is smaller; same length compares bytewise.
        (true, true) => b.len().cmp(&a.len()).then_with(|| a.cmp(b)),
    }
}

/// Sign and magnitude (decimal digits, no leading zeros) of a varint.
fn varint_to_decimal(v: &[u8]) -> (bool, Vec<u8>) {
    let neg = v.first().is_some_and(|x| x & 0x80 != 0);
    let mut mag: Vec<u8> = if neg {
        // Two's complement negate.
        let mut m: Vec<u8> = v.iter().map(|b| !b).collect();
        for b in m.iter_mut().rev() {
            let (r, o) = b.overflowing_add(1);
            *b = r;
            if !o {
                break;
            }
        }
        m
    } else {
        v.to_vec()
    };
    let mut digits = Vec::new();
    while mag.iter().any(|b| *b != 0) {
        let mut rem: u32 = 0;
        for b in mag.iter_mut() {
            let cur = (rem << 8) | *b as u32;
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(rem as u8);
    }
    digits.reverse();
    (neg && !digits.is_empty(), digits)
}

fn compare_decimal(a: &[u8], b: &[u8]) -> Ordering {
    if a.len() < 4 || b.len() < 4 {
        return a.len().cmp(&b.len());
    }
    let sa = i32::from_be_bytes([a[0], a[1], a[2], a[3]]) as i64;
    let sb = i32::from_be_bytes([b[0], b[1], b[2], b[3]]) as i64;
    let (na, mut da) = varint_to_decimal(&a[4..]);
    let (nb, mut db) = varint_to_decimal(&b[4..]);
    let za = da.is_empty();
    let zb = db.is_empty();
    let sign = |neg: bool, zero: bool| {
        if zero {
            0
        } else if neg {
            -1
        } else {
            1
        }
    };
    let (sga, sgb) = (sign(na, za), sign(nb, zb));
    if sga != sgb || sga == 0 {
        return sga.cmp(&sgb);
    }
    // Magnitude = 0.d1d2... x 10^(len - scale).
    let ea = da.len() as i64 - sa;
    let eb = db.len() as i64 - sb;
    while da.last() == Some(&0) {
        da.pop();
    }
    while db.last() == Some(&0) {
        db.pop();
    }
    let mag = ea.cmp(&eb).then_with(|| da.cmp(&db));
    if sga < 0 { mag.reverse() } else { mag }
}

fn timeuuid_ts(v: &[u8]) -> i64 {
    let msb = read_i64(v, 0).unwrap_or(0);
    ((msb << 48) | ((msb << 16) & 0xFFFF_0000_0000)) | ((msb as u64) >> 32) as i64
}

fn compare_timeuuid(a: &[u8], b: &[u8]) -> Ordering {
    if a.len() != 16 || b.len() != 16 {
        return a.len().cmp(&b.len()).then_with(|| a.cmp(b));
    }
    timeuuid_ts(a).cmp(&timeuuid_ts(b)).then_with(|| {
        // Signed per-byte comparison of the low 8 bytes.
        let sa = a[8..].iter().map(|x| *x as i8);
        let sb = b[8..].iter().map(|x| *x as i8);
        sa.cmp(sb)
    })
}

fn compare_uuid(a: &[u8], b: &[u8]) -> Ordering {
    if a.len() != 16 || b.len() != 16 {
        return a.len().cmp(&b.len()).then_with(|| a.cmp(b));
    }
    let (va, vb) = (a[6] >> 4, b[6] >> 4);
    va.cmp(&vb)
        .then_with(|| {
            if va == 1 {
                timeuuid_ts(a).cmp(&timeuuid_ts(b))
            } else {
                read_u64(a, 0).cmp(&read_u64(b, 0))
            }
        })
        .then_with(|| read_u64(a, 8).cmp(&read_u64(b, 8)))
}

/// A map entry being normalized: key and value, `None` = null.
type MapEntry = (Option<Vec<u8>>, Option<Vec<u8>>);

/// `[int n]` then each item as `[bytes]` (`None` = null).
fn join_collection<'a>(n: usize, items: impl Iterator<Item = Option<&'a [u8]>>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(n as i32).to_be_bytes());
    for e in items {
        match e {
            Some(e) => {
                out.extend_from_slice(&(e.len() as i32).to_be_bytes());
                out.extend_from_slice(e);
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    out
}

/// Reads `[int n]` then `n * per` `[bytes]` values (`None` = null). Errors name the offset.
pub fn split_collection(v: &[u8], per: usize) -> Result<Vec<Option<&[u8]>>, String> {
    let n = v.get(0..4).ok_or("truncated element count")?;
    let n = i32::from_be_bytes([n[0], n[1], n[2], n[3]]);
    if n < 0 {
        return Err(format!("negative element count {n}"));
    }
    let mut pos = 4;
    let mut out = Vec::with_capacity((n as usize).min(1024) * per);
    for _ in 0..(n as usize) * per {
        let (e, next) = read_bytes(v, pos)?;
        out.push(e);
        pos = next;
    }
    if pos != v.len() {
        return Err(format!("{} trailing bytes at offset {pos}", v.len() - pos));
    }
    Ok(out)
}

fn read_bytes(v: &[u8], pos: usize) -> Result<(Option<&[u8]>, usize), String> {
    let l = v
        .get(pos..pos + 4)
        .ok_or_else(|| format!("truncated length at offset {pos}"))?;
    let l = i32::from_be_bytes([l[0], l[1], l[2], l[3]]);
    if l < 0 {
        return Ok((None, pos + 4));
    }
    let end = pos + 4 + l as usize;
    let e = v
        .get(pos + 4..end)
        .ok_or_else(|| format!("element at offset {pos} runs past the end"))?;
    Ok((Some(e), end))
}

fn compare_collection(a: &[u8], b: &[u8], types: &[&CqlType]) -> Ordering {
    let (Ok(ea), Ok(eb)) = (
        split_collection(a, types.len()),
        split_collection(b, types.len()),
    ) else {
        return a.cmp(b);
    };
    for (i, (x, y)) in ea.iter().zip(eb.iter()).enumerate() {
        let t = types[i % types.len()];
        let c = match (x, y) {
            (Some(x), Some(y)) => t.compare(x, y),
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
        };
        if c != Ordering::Equal {
            return c;
        }
    }
    ea.len().cmp(&eb.len())
}

/// Splits a tuple/UDT value into its (possibly fewer than declared) components.
pub fn split_tuple(v: &[u8]) -> Result<Vec<Option<&[u8]>>, String> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < v.len() {
        let (e, next) = read_bytes(v, pos)?;
        out.push(e);
        pos = next;
    }
    Ok(out)
}

fn compare_tuple(a: &[u8], b: &[u8], types: &[CqlType]) -> Ordering {
    let (Ok(ea), Ok(eb)) = (split_tuple(a), split_tuple(b)) else {
        return a.cmp(b);
    };
    for (i, (x, y)) in ea.iter().zip(eb.iter()).enumerate() {
        let c = match (x, y) {
            (Some(x), Some(y)) => types.get(i).map_or_else(|| x.cmp(y), |t| t.compare(x, y)),
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
        };
        if c != Ordering::Equal {
            return c;
        }
    }
    ea.len().cmp(&eb.len())
}

fn validate_tuple(t: &CqlType, v: &[u8], types: &[CqlType]) -> Result<(), TypeError> {
    let els = split_tuple(v).map_err(|r| t.invalid(r))?;
    if els.len() > types.len() {
        return Err(t.invalid(format!(
            "{} components, at most {} expected",
            els.len(),
            types.len()
        )));
    }
    for (e, ty) in els.iter().zip(types) {
        if let Some(e) = e {
            ty.validate(e)?;
        }
    }
    Ok(())
}

/// Unsigned vint as Cassandra encodes it (leading one-bits give the extra byte count).
pub fn read_unsigned_vint(v: &[u8]) -> Option<(u64, usize)> {
    let first = *v.first()?;
    let extra = first.leading_ones() as usize;
    if extra == 0 {
        return Some((first as u64, 1));
    }
    let bytes = v.get(1..1 + extra)?;
    let mut x: u64 = if extra >= 8 {
        0
    } else {
        (first & (0xff >> extra)) as u64
    };
    for b in bytes {
        x = (x << 8) | *b as u64;
    }
    Some((x, 1 + extra))
}

fn read_signed_vint(v: &[u8]) -> Option<(i64, usize)> {
    let (u, n) = read_unsigned_vint(v)?;
    Some((((u >> 1) as i64) ^ -((u & 1) as i64), n))
}

fn split_vector<'a>(v: &'a [u8], elem: &CqlType, dim: u32) -> Option<Vec<&'a [u8]>> {
    let mut out = Vec::with_capacity(dim as usize);
    let mut pos = 0;
    for _ in 0..dim {
        let len = match elem.fixed_len() {
            Some(l) => l,
            None => {
                let (l, n) = read_unsigned_vint(v.get(pos..)?)?;
                pos += n;
                usize::try_from(l).ok()?
            }
        };
        out.push(v.get(pos..pos.checked_add(len)?)?);
        pos += len;
    }
    (pos == v.len()).then_some(out)
}

fn compare_vector(a: &[u8], b: &[u8], elem: &CqlType, dim: u32) -> Ordering {
    match (split_vector(a, elem, dim), split_vector(b, elem, dim)) {
        (Some(x), Some(y)) => {
            for (p, q) in x.iter().zip(y.iter()) {
                let c = elem.compare(p, q);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Integer types order as their values, whatever the width (the fixed-width fast
    /// paths and the general sign-then-bytes comparison agree).
    #[test]
    fn signed_integers_order_by_value() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let edges = [i64::MIN, i64::MIN + 1, -256, -1, 0, 1, 255, 256, i64::MAX];
        for i in 0..20_000 {
            let (a, b) = if i < edges.len() * edges.len() {
                (edges[i / edges.len()], edges[i % edges.len()])
            } else {
                // Small magnitudes too, so that equal high bytes are common.
                let shift = (next() % 64) as u32;
                ((next() as i64) >> shift, (next() as i64) >> shift)
            };
            let big = CqlType::Bigint.compare(&a.to_be_bytes(), &b.to_be_bytes());
            assert_eq!(big, a.cmp(&b), "bigint {a} {b}");
            let (a4, b4) = (a as i32, b as i32);
            let int = CqlType::Int.compare(&a4.to_be_bytes(), &b4.to_be_bytes());
            assert_eq!(int, a4.cmp(&b4), "int {a4} {b4}");
            let (a2, b2) = (a as i16, b as i16);
            let small = CqlType::Smallint.compare(&a2.to_be_bytes(), &b2.to_be_bytes());
            assert_eq!(small, a2.cmp(&b2), "smallint {a2} {b2}");
        }
    }

    fn ints(v: &[i32]) -> Vec<u8> {
        let items: Vec<[u8; 4]> = v.iter().map(|x| x.to_be_bytes()).collect();
        join_collection(v.len(), items.iter().map(|b| Some(&b[..])))
    }

    #[test]
    fn sets_and_maps_normalize_as_cassandra_stores_them() {
        let t = |s: &str| CqlType::parse(s, &no_udt).expect("type");
        // A set: sorted by the element type (signed), duplicates dropped.
        assert_eq!(
            t("frozen<set<int>>").normalize(&ints(&[9, -9, 0, 9])),
            ints(&[-9, 0, 9])
        );
        // A list keeps its order; its frozen set elements are normalized.
        let inner = [ints(&[3, 1, 3]), ints(&[2])];
        let list = join_collection(2, inner.iter().map(|b| Some(&b[..])));
        let want = [ints(&[1, 3]), ints(&[2])];
        assert_eq!(
            t("list<frozen<set<int>>>").normalize(&list),
            join_collection(2, want.iter().map(|b| Some(&b[..])))
        );
        // A map: sorted by key, the last value sent for a repeated key wins.
        let kv = |k: i32, v: i32| [k.to_be_bytes(), v.to_be_bytes()];
        let sent: Vec<[u8; 4]> = [kv(2, 20), kv(1, 10), kv(2, 21)].concat();
        let want: Vec<[u8; 4]> = [kv(1, 10), kv(2, 21)].concat();
        assert_eq!(
            t("frozen<map<int, int>>")
                .normalize(&join_collection(3, sent.iter().map(|b| Some(&b[..])))),
            join_collection(2, want.iter().map(|b| Some(&b[..])))
        );
        // Tuples keep their fields as sent.
        assert!(!t("frozen<tuple<int, frozen<set<int>>>>").has_unordered_collection());
        assert!(!t("list<int>").has_unordered_collection());
    }

    #[test]
    fn an_empty_collection_value_is_invalid_but_an_empty_scalar_is_not() {
        let t = |s: &str| CqlType::parse(s, &no_udt).expect("type");
        for ty in ["frozen<list<int>>", "set<text>", "map<int, int>"] {
            let e = t(ty).validate(&[]).expect_err(ty);
            assert!(e.to_string().contains("Not enough bytes to read a"), "{e}");
        }
        let nested = join_collection(1, [Some(&b""[..])].into_iter());
        assert!(t("list<frozen<list<int>>>").validate(&nested).is_err());
        assert!(t("int").validate(&[]).is_ok());
        assert!(t("list<int>").validate(&ints(&[])).is_ok());
    }

    fn no_udt(_: &str) -> Option<Arc<UdtDef>> {
        None
    }

    fn roundtrip(s: &str) {
        let t = CqlType::parse(s, &no_udt).unwrap();
        assert_eq!(t.to_string(), s, "{t:?}");
    }

    #[test]
    fn display_parse() {
        for s in [
            "text",
            "int",
            "map<text, int>",
            "frozen<list<int>>",
            "frozen<tuple<int, text>>",
            "vector<float, 3>",
            "list<frozen<map<int, frozen<set<text>>>>>",
            "set<frozen<tuple<int, frozen<list<text>>>>>",
            "'org.apache.cassandra.db.marshal.DurationType'",
        ] {
            roundtrip(s);
        }
        assert_eq!(CqlType::parse("VarChar", &no_udt).unwrap(), CqlType::Text);
        assert_eq!(
            CqlType::parse("tuple<int,text>", &no_udt)
                .unwrap()
                .to_string(),
            "frozen<tuple<int, text>>"
        );
        assert!(CqlType::parse("list<int", &no_udt).is_err());
        assert!(matches!(
            CqlType::parse("addr", &no_udt),
            Err(TypeError::UnknownUdt(_))
        ));
        let udt = Arc::new(UdtDef {
            keyspace: "ks".into(),
            name: "addr".into(),
            field_names: vec!["street".into()],
            field_types: vec![CqlType::Text],
            frozen: false,
        });
        let r = |n: &str| (n == "addr").then(|| udt.clone());
        let t = CqlType::parse("addr", &r).unwrap();
        assert!(t.is_multi_cell());
        assert_eq!(t.to_string(), "addr");
        let t = CqlType::parse("frozen<addr>", &r).unwrap();
        assert!(!t.is_multi_cell());
        assert_eq!(t.to_string(), "frozen<addr>");
        assert_eq!(
            CqlType::parse("map<text, addr>", &r).unwrap().to_string(),
            "map<text, frozen<addr>>"
        );
    }

    #[test]
    fn ints_and_floats() {
        let i = |x: i32| x.to_be_bytes().to_vec();
        assert_eq!(CqlType::Int.compare(&i(-1), &i(1)), Ordering::Less);
        assert_eq!(
            CqlType::Int.compare(&i(i32::MIN), &i(i32::MAX)),
            Ordering::Less
        );
        assert_eq!(CqlType::Int.compare(&[], &i(i32::MIN)), Ordering::Less);
        let d = |x: f64| x.to_be_bytes().to_vec();
        assert_eq!(CqlType::Double.compare(&d(-0.0), &d(0.0)), Ordering::Less);
        assert_eq!(
            CqlType::Double.compare(&d(f64::NAN), &d(f64::INFINITY)),
            Ordering::Greater
        );
        assert_eq!(CqlType::Double.compare(&d(-2.0), &d(-1.0)), Ordering::Less);
        let f = |x: f32| x.to_be_bytes().to_vec();
        assert_eq!(CqlType::Float.compare(&f(-3.5), &f(2.0)), Ordering::Less);
        // Date is unsigned with 2^31 = epoch.
        assert_eq!(
            CqlType::Date.compare(&[0x80, 0, 0, 0], &[0x7f, 0xff, 0xff, 0xff]),
            Ordering::Greater
        );
    }

    #[test]
    fn varint_and_decimal() {
        let v = |x: i64| {
            let b = x.to_be_bytes();
            trim_varint(&b).to_vec()
        };
        let vals = [-70000i64, -129, -128, -1, 0, 1, 127, 128, 255, 256, 70000];
        for a in vals {
            for b in vals {
                assert_eq!(CqlType::Varint.compare(&v(a), &v(b)), a.cmp(&b), "{a} {b}");
                // Non-minimal encodings compare the same.
                assert_eq!(CqlType::Varint.compare(&a.to_be_bytes(), &v(b)), a.cmp(&b));
            }
        }
        assert_eq!(v(128), vec![0, 0x80]);
        assert_eq!(v(-129), vec![0xff, 0x7f]);
        let dec = |unscaled: i64, scale: i32| {
            let mut o = scale.to_be_bytes().to_vec();
            o.extend(v(unscaled));
            o
        };
        // 1.5 vs 1.50 vs 2 vs -3 vs 0.001
        assert_eq!(
            CqlType::Decimal.compare(&dec(15, 1), &dec(150, 2)),
            Ordering::Equal
        );
        assert_eq!(
            CqlType::Decimal.compare(&dec(15, 1), &dec(2, 0)),
            Ordering::Less
        );
        assert_eq!(
            CqlType::Decimal.compare(&dec(-3, 0), &dec(1, 3)),
            Ordering::Less
        );
        assert_eq!(
            CqlType::Decimal.compare(&dec(-3, 0), &dec(-25, 1)),
            Ordering::Less
        );
        assert_eq!(
            CqlType::Decimal.compare(&dec(1, -3), &dec(999, 0)),
            Ordering::Greater
        );
        assert_eq!(
            CqlType::Decimal.compare(&dec(0, 5), &dec(0, -2)),
            Ordering::Equal
        );
    }

    #[test]
    fn uuids() {
        // time-based: timestamp 0x1e0_0000_0000_0001 vs later time_low.
        let mk = |time_low: u32, time_mid: u16, time_hi: u16, lsb: u64| {
            let mut o = time_low.to_be_bytes().to_vec();
            o.extend(time_mid.to_be_bytes());
            o.extend((time_hi | 0x1000).to_be_bytes());
            o.extend(lsb.to_be_bytes());
            o
        };
        let a = mk(0xffff_ffff, 0, 0, 0);
        let b = mk(0, 1, 0, 0);
        assert_eq!(CqlType::Timeuuid.compare(&a, &b), Ordering::Less);
        assert_eq!(CqlType::Uuid.compare(&a, &b), Ordering::Less);
        let c = mk(0, 1, 0, 0x80 << 56);
        assert_eq!(
            CqlType::Timeuuid.compare(&c, &b),
            Ordering::Less,
            "signed lsb bytes"
        );
        assert_eq!(
            CqlType::Uuid.compare(&c, &b),
            Ordering::Greater,
            "unsigned lsb"
        );
        let mut v4 = vec![0u8; 16];
        v4[6] = 0x40;
        assert_eq!(
            CqlType::Uuid.compare(&v4, &a),
            Ordering::Greater,
            "version first"
        );
    }

    #[test]
    fn collections_and_validation() {
        let list = |xs: &[i32]| {
            let mut o = (xs.len() as i32).to_be_bytes().to_vec();
            for x in xs {
                o.extend(4i32.to_be_bytes());
                o.extend(x.to_be_bytes());
            }
            o
        };
        let t = CqlType::List {
            elem: Box::new(CqlType::Int),
            frozen: true,
        };
        assert_eq!(t.compare(&list(&[1, 2]), &list(&[1, 2, 0])), Ordering::Less);
        assert_eq!(t.compare(&list(&[-1, 5]), &list(&[1])), Ordering::Less);
        assert!(t.validate(&list(&[1, 2])).is_ok());
        assert!(t.validate(&list(&[1, 2])[..10]).is_err());
        assert!(CqlType::Int.validate(&[1, 2, 3]).is_err());
        assert!(CqlType::Int.validate(&[]).is_ok());
        assert!(CqlType::Text.validate(&[0xff]).is_err());
        assert!(CqlType::Ascii.validate(b"abc\x80").is_err());
        assert!(CqlType::Inet.validate(&[1, 2, 3, 4]).is_ok());
        let tup = CqlType::Tuple(vec![CqlType::Int, CqlType::Text]);
        let mut tv = 4i32.to_be_bytes().to_vec();
        tv.extend(7i32.to_be_bytes());
        tv.extend((-1i32).to_be_bytes());
        assert!(tup.validate(&tv).is_ok());
        let vt = CqlType::Vector {
            elem: Box::new(CqlType::Float),
            dim: 2,
        };
        assert!(vt.validate(&[0; 8]).is_ok());
        assert!(vt.validate(&[0; 7]).is_err());
        assert!(CqlType::Duration.validate(&[2, 2, 2]).is_ok());
        assert!(CqlType::Duration.validate(&[2, 1, 2]).is_err());
    }
}
