//! Conversions between the protocol crate's wire types and the coordinator's types.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use amphora_coordinator::{
    BoundValue, QueryOptions, ResultColumn, SchemaChange, SchemaChangeKind, SchemaChangeTarget,
};
use amphora_protocol::response::EncodedColumns;
use amphora_protocol::{
    self as proto, ColumnSpec, ColumnType, ProtocolVersion, QueryParameters, Value,
};
use amphora_types::CqlType;
use bytes::Bytes;

use super::backend::{BatchEntry, BatchKind, BatchQueryText};

/// Package of Cassandra's marshal classes.
const MARSHAL: &str = "org.apache.cassandra.db.marshal.";

/// The wire type of a CQL type. Frozen-ness is not on the wire; a vector travels as a custom
/// `VectorType(elem,dim)`.
pub fn column_type(ty: &CqlType) -> ColumnType {
    match ty {
        CqlType::Ascii => ColumnType::Ascii,
        CqlType::Bigint => ColumnType::Bigint,
        CqlType::Blob => ColumnType::Blob,
        CqlType::Boolean => ColumnType::Boolean,
        CqlType::Counter => ColumnType::Counter,
        CqlType::Date => ColumnType::Date,
        CqlType::Decimal => ColumnType::Decimal,
        CqlType::Double => ColumnType::Double,
        CqlType::Duration => ColumnType::Duration,
        CqlType::Float => ColumnType::Float,
        CqlType::Inet => ColumnType::Inet,
        CqlType::Int => ColumnType::Int,
        CqlType::Smallint => ColumnType::Smallint,
        CqlType::Text => ColumnType::Varchar,
        CqlType::Time => ColumnType::Time,
        CqlType::Timestamp => ColumnType::Timestamp,
        CqlType::Timeuuid => ColumnType::Timeuuid,
        CqlType::Tinyint => ColumnType::Tinyint,
        CqlType::Uuid => ColumnType::Uuid,
        CqlType::Varint => ColumnType::Varint,
        CqlType::List { elem, .. } => ColumnType::List(Box::new(column_type(elem))),
        CqlType::Set { elem, .. } => ColumnType::Set(Box::new(column_type(elem))),
        CqlType::Map { key, value, .. } => {
            ColumnType::Map(Box::new(column_type(key)), Box::new(column_type(value)))
        }
        CqlType::Tuple(elems) => ColumnType::Tuple(elems.iter().map(column_type).collect()),
        CqlType::Udt(def) => ColumnType::Udt {
            keyspace: def.keyspace.clone(),
            name: def.name.clone(),
            fields: def
                .field_names
                .iter()
                .zip(def.field_types.iter())
                .map(|(n, t)| (n.clone(), column_type(t)))
                .collect(),
        },
        CqlType::Vector { .. } | CqlType::Custom(_) => ColumnType::Custom(marshal_class(ty)),
    }
}

/// Cassandra's marshal class name of a type (`AbstractType.toString()`), fully qualified,
/// e.g. `org.apache.cassandra.db.marshal.VectorType(org.apache.cassandra.db.marshal.FloatType,3)`.
pub fn marshal_class(ty: &CqlType) -> String {
    let mut s = String::new();
    write_marshal(ty, &mut s);
    s
}

fn write_marshal(ty: &CqlType, s: &mut String) {
    let simple = |name: &str, s: &mut String| {
        s.push_str(MARSHAL);
        s.push_str(name);
    };
    let frozen_open = |frozen: bool, s: &mut String| {
        if frozen {
            s.push_str(MARSHAL);
            s.push_str("FrozenType(");
        }
    };
    let frozen_close = |frozen: bool, s: &mut String| {
        if frozen {
            s.push(')');
        }
    };
    match ty {
        CqlType::Ascii => simple("AsciiType", s),
        CqlType::Bigint => simple("LongType", s),
        CqlType::Blob => simple("BytesType", s),
        CqlType::Boolean => simple("BooleanType", s),
        CqlType::Counter => simple("CounterColumnType", s),
        CqlType::Date => simple("SimpleDateType", s),
        CqlType::Decimal => simple("DecimalType", s),
        CqlType::Double => simple("DoubleType", s),
        CqlType::Duration => simple("DurationType", s),
        CqlType::Float => simple("FloatType", s),
        CqlType::Inet => simple("InetAddressType", s),
        CqlType::Int => simple("Int32Type", s),
        CqlType::Smallint => simple("ShortType", s),
        CqlType::Text => simple("UTF8Type", s),
        CqlType::Time => simple("TimeType", s),
        CqlType::Timestamp => simple("TimestampType", s),
        CqlType::Timeuuid => simple("TimeUUIDType", s),
        CqlType::Tinyint => simple("ByteType", s),
        CqlType::Uuid => simple("UUIDType", s),
        CqlType::Varint => simple("IntegerType", s),
        CqlType::List { elem, frozen } | CqlType::Set { elem, frozen } => {
            frozen_open(*frozen, s);
            let name = if matches!(ty, CqlType::List { .. }) {
                "ListType("
            } else {
                "SetType("
            };
            simple(name, s);
            write_marshal(elem, s);
            s.push(')');
            frozen_close(*frozen, s);
        }
        CqlType::Map { key, value, frozen } => {
            frozen_open(*frozen, s);
            simple("MapType(", s);
            write_marshal(key, s);
            s.push(',');
            write_marshal(value, s);
            s.push(')');
            frozen_close(*frozen, s);
        }
        CqlType::Tuple(elems) => {
            simple("TupleType(", s);
            for (i, e) in elems.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                write_marshal(e, s);
            }
            s.push(')');
        }
        CqlType::Udt(def) => {
            frozen_open(def.frozen, s);
            simple("UserType(", s);
            s.push_str(&def.keyspace);
            s.push(',');
            push_hex(def.name.as_bytes(), s);
            for (n, t) in def.field_names.iter().zip(def.field_types.iter()) {
                s.push(',');
                push_hex(n.as_bytes(), s);
                s.push(':');
                write_marshal(t, s);
            }
            s.push(')');
            frozen_close(def.frozen, s);
        }
        CqlType::Vector { elem, dim } => {
            simple("VectorType(", s);
            write_marshal(elem, s);
            s.push(',');
            s.push_str(&dim.to_string());
            s.push(')');
        }
        CqlType::Custom(class) => {
            if !class.contains('.') {
                s.push_str(MARSHAL);
            }
            s.push_str(class);
        }
    }
}

fn push_hex(bytes: &[u8], s: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0x0F)]));
    }
}

/// Column specs of a coordinator column list.
pub fn column_specs(columns: &[ResultColumn]) -> Vec<ColumnSpec> {
    columns
        .iter()
        .map(|c| ColumnSpec {
            keyspace: c.keyspace.clone(),
            table: c.table.clone(),
            name: c.name.clone(),
            ty: column_type(&c.ty),
        })
        .collect()
}

/// Bound on the shard-local metadata cache; it is cleared when full.
const SPEC_CACHE_ENTRIES: usize = 1024;

/// A column list converted to wire specs, with its encoded form per protocol version.
pub struct CachedColumns {
    pub specs: Rc<[ColumnSpec]>,
    columns: Arc<Vec<ResultColumn>>,
    /// v3, v4, v5.
    encoded: [OnceCell<Option<EncodedColumns>>; 3],
    metadata_id: OnceCell<Bytes>,
}

impl CachedColumns {
    fn new(columns: Arc<Vec<ResultColumn>>) -> Self {
        Self {
            specs: column_specs(&columns).into(),
            columns,
            encoded: Default::default(),
            metadata_id: OnceCell::new(),
        }
    }

    /// The v5 result metadata id of these columns (the one PREPARED announces for them),
    /// computed once.
    pub fn metadata_id(&self) -> &Bytes {
        self.metadata_id
            .get_or_init(|| amphora_coordinator::exec::result_metadata_id(&self.columns))
    }

    /// The specs encoded once for `version` (`None` if they cannot be encoded, e.g. a name
    /// over 64 KiB: the caller falls back to encoding per response, which reports it).
    pub fn encoded(&self, version: ProtocolVersion) -> Option<&EncodedColumns> {
        let slot = self
            .encoded
            .get(usize::from(version.as_u8()).saturating_sub(3))?;
        slot.get_or_init(|| EncodedColumns::new(version, &self.specs).ok())
            .as_ref()
    }
}

type SpecCache = HashMap<usize, Rc<CachedColumns>>;

thread_local! {
    /// Converted metadata by the address of the coordinator's `Arc` (kept alive by the entry, so the
    /// address cannot be reused while cached): a prepared statement's columns are converted
    /// and encoded once per shard.
    static SPEC_CACHE: RefCell<SpecCache> = RefCell::new(HashMap::new());
    /// Column-less specs by count, for Rows answered with No_metadata.
    static PLACEHOLDERS: RefCell<Vec<Rc<[ColumnSpec]>>> = const { RefCell::new(Vec::new()) };
}

/// Column specs of `columns`, converted once per shard per column list.
pub fn cached_columns(columns: &Arc<Vec<ResultColumn>>) -> Rc<CachedColumns> {
    let key = Arc::as_ptr(columns) as usize;
    SPEC_CACHE.with(|c| {
        let mut cache = c.borrow_mut();
        if let Some(cached) = cache.get(&key) {
            return cached.clone();
        }
        if cache.len() >= SPEC_CACHE_ENTRIES {
            cache.clear();
        }
        let cached = Rc::new(CachedColumns::new(columns.clone()));
        cache.insert(key, cached.clone());
        cached
    })
}

/// `n` placeholder specs: No_metadata Rows only need the column count.
pub fn placeholder_specs(n: usize) -> Rc<[ColumnSpec]> {
    const MAX_CACHED: usize = 256;
    let make = |n| -> Rc<[ColumnSpec]> {
        (0..n)
            .map(|_| ColumnSpec {
                keyspace: String::new(),
                table: String::new(),
                name: String::new(),
                ty: ColumnType::Blob,
            })
            .collect()
    };
    if n > MAX_CACHED {
        return make(n);
    }
    PLACEHOLDERS.with(|p| {
        let mut p = p.borrow_mut();
        while p.len() <= n {
            let len = p.len();
            p.push(make(len));
        }
        p.get(n).cloned().unwrap_or_else(|| make(n))
    })
}

pub fn bound_value(v: Value) -> BoundValue {
    match v {
        Value::Null => BoundValue::Null,
        Value::Unset => BoundValue::Unset,
        Value::Set(b) => BoundValue::Set(b),
    }
}

/// QUERY / EXECUTE parameters as the coordinator takes them.
pub fn query_options(mut p: QueryParameters) -> QueryOptions {
    let extra = p.take_extra();
    QueryOptions {
        consistency: p.consistency.as_u16(),
        values: p.values.owned().map(bound_value).collect(),
        names: extra.names,
        skip_metadata: p.skip_metadata,
        page_size: p.page_size,
        paging_state: extra.paging_state,
        serial_consistency: p.serial_consistency.map(|c| c.as_u16()),
        timestamp: p.default_timestamp,
        keyspace: extra.keyspace,
        now_in_seconds: p.now_in_seconds,
    }
}

/// A BATCH as the coordinator takes it: its type, entries and options.
pub fn batch_parts(b: proto::Batch) -> (BatchKind, Vec<BatchEntry>, QueryOptions) {
    let kind = match b.batch_type {
        proto::BatchType::Logged => BatchKind::Logged,
        proto::BatchType::Unlogged => BatchKind::Unlogged,
        proto::BatchType::Counter => BatchKind::Counter,
    };
    let entries = b
        .statements
        .into_iter()
        .map(|s| BatchEntry {
            query: match s.statement {
                proto::BatchStatementKind::Query(q) => BatchQueryText::Text(q),
                proto::BatchStatementKind::Prepared(id) => BatchQueryText::Prepared(id),
            },
            values: s.values.owned().map(bound_value).collect(),
        })
        .collect();
    let opts = QueryOptions {
        consistency: b.consistency.as_u16(),
        serial_consistency: b.serial_consistency.map(|c| c.as_u16()),
        timestamp: b.default_timestamp,
        keyspace: b.keyspace,
        now_in_seconds: b.now_in_seconds,
        ..QueryOptions::default()
    };
    (kind, entries, opts)
}

/// The wire form of a schema change (RESULT Schema_change and the SCHEMA_CHANGE event).
pub fn schema_change(sc: &SchemaChange) -> proto::SchemaChange {
    let change = match sc.kind {
        SchemaChangeKind::Created => proto::SchemaChangeType::Created,
        SchemaChangeKind::Updated => proto::SchemaChangeType::Updated,
        SchemaChangeKind::Dropped => proto::SchemaChangeType::Dropped,
    };
    let target = match &sc.target {
        SchemaChangeTarget::Keyspace(ks) => proto::SchemaChangeTarget::Keyspace {
            keyspace: ks.clone(),
        },
        SchemaChangeTarget::Table { keyspace, table } => proto::SchemaChangeTarget::Table {
            keyspace: keyspace.clone(),
            table: table.clone(),
        },
        SchemaChangeTarget::Type { keyspace, name } => proto::SchemaChangeTarget::Type {
            keyspace: keyspace.clone(),
            name: name.clone(),
        },
        SchemaChangeTarget::Function {
            keyspace,
            name,
            args,
        } => proto::SchemaChangeTarget::Function {
            keyspace: keyspace.clone(),
            name: name.clone(),
            arg_types: args.clone(),
        },
        SchemaChangeTarget::Aggregate {
            keyspace,
            name,
            args,
        } => proto::SchemaChangeTarget::Aggregate {
            keyspace: keyspace.clone(),
            name: name.clone(),
            arg_types: args.clone(),
        },
    };
    proto::SchemaChange { change, target }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amphora_types::cql_type::UdtDef;

    #[test]
    fn vector_is_a_custom_type_with_the_element_class() {
        let v = CqlType::Vector {
            elem: Box::new(CqlType::Float),
            dim: 3,
        };
        assert_eq!(
            column_type(&v),
            ColumnType::Custom(
                "org.apache.cassandra.db.marshal.VectorType(org.apache.cassandra.db.marshal.FloatType,3)"
                    .to_string()
            )
        );
    }

    #[test]
    fn collections_udt_tuple_drop_frozen() {
        let list = CqlType::List {
            elem: Box::new(CqlType::Text),
            frozen: true,
        };
        assert_eq!(
            column_type(&list),
            ColumnType::List(Box::new(ColumnType::Varchar))
        );
        let udt = CqlType::Udt(Arc::new(UdtDef {
            keyspace: "ks".into(),
            name: "addr".into(),
            field_names: vec!["street".into(), "zip".into()],
            field_types: vec![CqlType::Text, CqlType::Int],
            frozen: true,
        }));
        assert_eq!(
            column_type(&udt),
            ColumnType::Udt {
                keyspace: "ks".into(),
                name: "addr".into(),
                fields: vec![
                    ("street".into(), ColumnType::Varchar),
                    ("zip".into(), ColumnType::Int)
                ],
            }
        );
        assert_eq!(
            marshal_class(&udt),
            "org.apache.cassandra.db.marshal.FrozenType(org.apache.cassandra.db.marshal.UserType(ks,61646472,737472656574:org.apache.cassandra.db.marshal.UTF8Type,7a6970:org.apache.cassandra.db.marshal.Int32Type))"
        );
        let tuple = CqlType::Tuple(vec![CqlType::Int, CqlType::Duration]);
        assert_eq!(
            column_type(&tuple),
            ColumnType::Tuple(vec![ColumnType::Int, ColumnType::Duration])
        );
        let map = CqlType::Map {
            key: Box::new(CqlType::Text),
            value: Box::new(CqlType::Bigint),
            frozen: false,
        };
        assert_eq!(
            marshal_class(&map),
            "org.apache.cassandra.db.marshal.MapType(org.apache.cassandra.db.marshal.UTF8Type,org.apache.cassandra.db.marshal.LongType)"
        );
    }

    #[test]
    fn spec_cache_converts_once() {
        let cols = Arc::new(vec![ResultColumn {
            keyspace: "ks".into(),
            table: "t".into(),
            name: "c".into(),
            ty: CqlType::Int,
        }]);
        let a = cached_columns(&cols);
        let b = cached_columns(&cols);
        assert!(Rc::ptr_eq(&a, &b));
        assert_eq!(a.specs[0].ty, ColumnType::Int);
        let v4 = a.encoded(ProtocolVersion::V4).expect("encodes");
        assert!(std::ptr::eq(
            v4,
            b.encoded(ProtocolVersion::V4).expect("encodes")
        ));
        // The v5 result metadata id is the coordinator's, computed once.
        assert_eq!(
            a.metadata_id(),
            &amphora_coordinator::exec::result_metadata_id(&cols)
        );
        assert!(std::ptr::eq(a.metadata_id(), b.metadata_id()));
        assert_eq!(placeholder_specs(3).len(), 3);
        assert!(Rc::ptr_eq(&placeholder_specs(3), &placeholder_specs(3)));
    }
}
