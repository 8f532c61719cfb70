//! The schema: keyspaces, tables and user types, as immutable versioned snapshots.
//!
//! DDL builds a new [`Schema`] from the old one (pure functions here); the
//! [`crate::exec`] layer persists it and publishes it to every shard. Each snapshot carries
//! a `version` uuid that drivers compare for schema agreement.

use std::collections::BTreeMap;
use std::sync::Arc;

use amphora_cql as ast;
use amphora_types::schema::{
    ClusteringOrder, ColumnDef, ColumnId, ColumnKind, TableId, TableOptions, TableSchema,
};
use amphora_types::{CqlType, UdtDef};
use serde::{Deserialize, Serialize};

use crate::api::{QueryError, SchemaChange, SchemaChangeKind, SchemaChangeTarget};

/// Keyspaces that exist on every node and cannot be changed by users.
pub const SYSTEM_KEYSPACES: &[&str] = &[
    "system",
    "system_auth",
    "system_distributed",
    "system_schema",
    "system_traces",
    "system_virtual_schema",
];

pub fn is_system_keyspace(name: &str) -> bool {
    SYSTEM_KEYSPACES.contains(&name)
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct KeyspaceDef {
    pub name: String,
    /// `class` (full Java name) plus options, as stored in system_schema.keyspaces.
    pub replication: BTreeMap<String, String>,
    pub durable_writes: bool,
    pub tables: BTreeMap<String, Arc<TableSchema>>,
    pub types: BTreeMap<String, Arc<UdtDef>>,
    /// Secondary indexes by name (index names are unique within a keyspace).
    #[serde(default)]
    pub indexes: BTreeMap<String, IndexDef>,
    /// Materialized views by name (they share the table namespace).
    #[serde(default)]
    pub views: BTreeMap<String, ViewDef>,
}

impl KeyspaceDef {
    /// A keyspace with no tables, types, indexes or views.
    pub fn empty(
        name: String,
        replication: BTreeMap<String, String>,
        durable_writes: bool,
    ) -> Self {
        KeyspaceDef {
            name,
            replication,
            durable_writes,
            tables: BTreeMap::new(),
            types: BTreeMap::new(),
            indexes: BTreeMap::new(),
            views: BTreeMap::new(),
        }
    }
}

/// What `CREATE INDEX` indexes in its column.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum IndexTarget {
    /// The value of a non-collection column (or of a partition/clustering key column).
    Simple,
    /// `keys(m)`
    Keys,
    /// `values(c)` (also what a bare non-frozen collection column means)
    Values,
    /// `entries(m)`
    Entries,
    /// `full(frozen_c)`
    Full,
}

/// A local secondary index: its entries live in a hidden table (`backing`) whose
/// partition key is the indexed value and whose clustering is the base row's token,
/// partition key and clustering (see `index.rs`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct IndexDef {
    pub name: String,
    /// The base table (by id: survives renames of its key columns).
    pub base: TableId,
    pub column: ColumnId,
    pub target: IndexTarget,
    /// `CREATE CUSTOM INDEX … USING 'class'` (the class as given, SAI names expanded).
    pub class: Option<String>,
    /// `WITH OPTIONS = {…}`, kept verbatim.
    pub options: BTreeMap<String, String>,
    pub backing: Arc<TableSchema>,
}

/// A materialized view: a table (`table`) maintained from writes to its base table.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ViewDef {
    pub base: TableId,
    /// Base columns selected (`SELECT *` = every base column).
    pub include_all: bool,
    /// The WHERE clause as written, for system_schema.views and DESCRIBE.
    pub where_text: String,
    /// The view's own table (keyspace, name, columns, options).
    pub table: Arc<TableSchema>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Schema {
    pub version: [u8; 16],
    pub keyspaces: BTreeMap<String, KeyspaceDef>,
}

impl Default for Schema {
    fn default() -> Self {
        Schema {
            version: uuid_v4(),
            keyspaces: BTreeMap::new(),
        }
    }
}

pub fn uuid_v4() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

impl Schema {
    pub fn keyspace(&self, name: &str) -> Option<&KeyspaceDef> {
        self.keyspaces.get(name)
    }

    /// A table or materialized view by name (both can be read with SELECT).
    pub fn table(&self, keyspace: &str, name: &str) -> Option<&Arc<TableSchema>> {
        let ks = self.keyspaces.get(keyspace)?;
        ks.tables
            .get(name)
            .or_else(|| ks.views.get(name).map(|v| &v.table))
    }

    /// Every table storage holds: user tables, materialized views and the hidden tables
    /// of secondary indexes (the node registers all of them with storage at start).
    pub fn tables(&self) -> impl Iterator<Item = &Arc<TableSchema>> {
        self.keyspaces.values().flat_map(|k| {
            k.tables
                .values()
                .chain(k.views.values().map(|v| &v.table))
                .chain(k.indexes.values().map(|i| &i.backing))
        })
    }

    /// User tables only (what system_schema.tables lists).
    pub fn user_tables(&self) -> impl Iterator<Item = &Arc<TableSchema>> {
        self.keyspaces.values().flat_map(|k| k.tables.values())
    }

    /// Whether some table has secondary indexes or materialized views (writes then imply
    /// more writes).
    pub fn has_derived(&self) -> bool {
        self.keyspaces
            .values()
            .any(|k| !k.indexes.is_empty() || !k.views.is_empty())
    }

    /// Whether `name` in `keyspace` is a materialized view.
    pub fn view(&self, keyspace: &str, name: &str) -> Option<&ViewDef> {
        self.keyspaces.get(keyspace)?.views.get(name)
    }

    pub fn table_by_id(&self, id: TableId) -> Option<&Arc<TableSchema>> {
        self.tables().find(|t| t.id == id)
    }
}

fn invalid(msg: impl Into<String>) -> QueryError {
    QueryError::Invalid(msg.into())
}

fn resolve_keyspace(
    name: &ast::QualifiedName,
    current: Option<&str>,
) -> Result<String, QueryError> {
    match (&name.keyspace, current) {
        (Some(k), _) => Ok(k.name.clone()),
        (None, Some(k)) => Ok(k.to_string()),
        (None, None) => Err(invalid(
            "No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename",
        )),
    }
}

/// Replication map with the strategy class spelled out as Cassandra stores it.
fn replication_from(
    props: &[ast::Property],
) -> Result<Option<BTreeMap<String, String>>, QueryError> {
    let Some(p) = props
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case("replication"))
    else {
        return Ok(None);
    };
    let map = p
        .value
        .as_map()
        .ok_or_else(|| QueryError::Syntax("replication must be a map".into()))?;
    let mut out = BTreeMap::new();
    for (k, v) in map {
        out.insert(k, v);
    }
    let class = out
        .get("class")
        .cloned()
        .ok_or_else(|| QueryError::Config("Missing replication strategy class".into()))?;
    let full = match class.as_str() {
        "SimpleStrategy" | "org.apache.cassandra.locator.SimpleStrategy" => {
            "org.apache.cassandra.locator.SimpleStrategy"
        }
        "NetworkTopologyStrategy" | "org.apache.cassandra.locator.NetworkTopologyStrategy" => {
            "org.apache.cassandra.locator.NetworkTopologyStrategy"
        }
        "LocalStrategy" | "org.apache.cassandra.locator.LocalStrategy" => {
            return Err(QueryError::Config(
                "Unable to use given strategy class: LocalStrategy is reserved for internal use."
                    .into(),
            ));
        }
        "EverywhereStrategy" | "org.apache.cassandra.locator.EverywhereStrategy" => {
            "org.apache.cassandra.locator.EverywhereStrategy"
        }
        other => {
            return Err(QueryError::Config(format!(
                "Unable to find replication strategy class '{other}'"
            )));
        }
    };
    if full.ends_with("SimpleStrategy") {
        match out.get("replication_factor") {
            // Cassandra 5.0 takes default_keyspace_rf (1) when none is given.
            None => {
                out.insert("replication_factor".into(), "1".into());
            }
            Some(rf) if rf.parse::<u32>().is_err() => {
                return Err(QueryError::Config(format!(
                    "Replication factor must be non-negative; found {rf}"
                )));
            }
            _ => {}
        }
        for k in out.keys() {
            if k != "class" && k != "replication_factor" {
                return Err(QueryError::Config(format!(
                    "Unrecognized strategy option {{{k}}} passed to SimpleStrategy for keyspace"
                )));
            }
        }
    }
    out.insert("class".into(), full.into());
    Ok(Some(out))
}

fn bool_prop(p: &ast::Property) -> Result<bool, QueryError> {
    match p.value.as_text().map(|s| s.to_ascii_lowercase()) {
        Some(s) if s == "true" => Ok(true),
        Some(s) if s == "false" => Ok(false),
        _ => Err(QueryError::Syntax(format!(
            "Invalid boolean value for {}",
            p.name
        ))),
    }
}

pub struct DdlOutcome {
    pub schema: Schema,
    /// None when nothing changed (IF [NOT] EXISTS hit): answer Void, emit no event.
    pub change: Option<SchemaChange>,
}

fn unchanged(s: &Schema) -> DdlOutcome {
    DdlOutcome {
        schema: s.clone(),
        change: None,
    }
}

fn changed(mut schema: Schema, kind: SchemaChangeKind, target: SchemaChangeTarget) -> DdlOutcome {
    schema.version = uuid_v4();
    DdlOutcome {
        schema,
        change: Some(SchemaChange { kind, target }),
    }
}

pub fn create_keyspace(s: &Schema, st: &ast::CreateKeyspace) -> Result<DdlOutcome, QueryError> {
    let name = st.name.name.clone();
    if is_system_keyspace(&name) && !st.if_not_exists {
        return Err(invalid(format!(
            "System keyspace '{name}' is not user-modifiable"
        )));
    }
    if s.keyspaces.contains_key(&name) || is_system_keyspace(&name) {
        if st.if_not_exists {
            return Ok(unchanged(s));
        }
        return Err(QueryError::AlreadyExists {
            keyspace: name.clone(),
            table: String::new(),
            message: format!("Keyspace '{name}' already exists"),
        });
    }
    validate_name(&name, "Keyspace")?;
    let replication = replication_from(&st.properties)?
        .ok_or_else(|| invalid("Missing mandatory option 'replication'"))?;
    let mut durable_writes = true;
    for p in &st.properties {
        match p.name.to_ascii_lowercase().as_str() {
            "replication" => {}
            "durable_writes" => durable_writes = bool_prop(p)?,
            other => return Err(QueryError::Syntax(format!("Unknown property '{other}'"))),
        }
    }
    let mut next = s.clone();
    next.keyspaces.insert(
        name.clone(),
        KeyspaceDef::empty(name.clone(), replication, durable_writes),
    );
    Ok(changed(
        next,
        SchemaChangeKind::Created,
        SchemaChangeTarget::Keyspace(name),
    ))
}

pub fn alter_keyspace(s: &Schema, st: &ast::AlterKeyspace) -> Result<DdlOutcome, QueryError> {
    let name = st.name.name.clone();
    if is_system_keyspace(&name) {
        return Err(QueryError::Unauthorized(format!(
            "{name} keyspace is not user-modifiable"
        )));
    }
    let Some(ks) = s.keyspaces.get(&name) else {
        if st.if_exists {
            return Ok(unchanged(s));
        }
        return Err(invalid(format!("Keyspace '{name}' doesn't exist")));
    };
    let mut ks = ks.clone();
    if let Some(r) = replication_from(&st.properties)? {
        ks.replication = r;
    }
    for p in &st.properties {
        if p.name.eq_ignore_ascii_case("durable_writes") {
            ks.durable_writes = bool_prop(p)?;
        }
    }
    let mut next = s.clone();
    next.keyspaces.insert(name.clone(), ks);
    Ok(changed(
        next,
        SchemaChangeKind::Updated,
        SchemaChangeTarget::Keyspace(name),
    ))
}

pub fn drop_keyspace(s: &Schema, st: &ast::Drop) -> Result<DdlOutcome, QueryError> {
    let name = st.name.name.name.clone();
    if is_system_keyspace(&name) {
        return Err(QueryError::Unauthorized(format!(
            "{name} keyspace is not user-modifiable"
        )));
    }
    if !s.keyspaces.contains_key(&name) {
        if st.if_exists {
            return Ok(unchanged(s));
        }
        return Err(invalid(format!("Keyspace '{name}' doesn't exist")));
    }
    let mut next = s.clone();
    next.keyspaces.remove(&name);
    Ok(changed(
        next,
        SchemaChangeKind::Dropped,
        SchemaChangeTarget::Keyspace(name),
    ))
}

fn validate_name(name: &str, what: &str) -> Result<(), QueryError> {
    // Cassandra 5.0: keyspace names up to 48 characters, table names up to 222.
    let max = if what == "Keyspace" { 48 } else { 222 };
    if name.is_empty()
        || name.len() > max
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(invalid(format!(
            "{what} name must not be empty, more than 48 characters long, or contain non-alphanumeric-underscore characters (got \"{name}\")"
        )));
    }
    Ok(())
}

fn user_keyspace<'a>(s: &'a Schema, ks: &str) -> Result<&'a KeyspaceDef, QueryError> {
    if is_system_keyspace(ks) {
        return Err(QueryError::Unauthorized(format!(
            "{ks} keyspace is not user-modifiable"
        )));
    }
    s.keyspaces
        .get(ks)
        .ok_or_else(|| invalid(format!("Keyspace '{ks}' doesn't exist")))
}

/// Resolves a parsed type against the keyspace's user types.
pub fn resolve_type(
    ty: &ast::TypeExpr,
    ks: &KeyspaceDef,
    frozen: bool,
) -> Result<CqlType, QueryError> {
    use ast::NativeType as N;
    Ok(match ty {
        ast::TypeExpr::Native(n) => match n {
            N::Ascii => CqlType::Ascii,
            N::Bigint => CqlType::Bigint,
            N::Blob => CqlType::Blob,
            N::Boolean => CqlType::Boolean,
            N::Counter => CqlType::Counter,
            N::Date => CqlType::Date,
            N::Decimal => CqlType::Decimal,
            N::Double => CqlType::Double,
            N::Duration => CqlType::Duration,
            N::Float => CqlType::Float,
            N::Inet => CqlType::Inet,
            N::Int => CqlType::Int,
            N::Smallint => CqlType::Smallint,
            N::Text | N::Varchar => CqlType::Text,
            N::Time => CqlType::Time,
            N::Timestamp => CqlType::Timestamp,
            N::Timeuuid => CqlType::Timeuuid,
            N::Tinyint => CqlType::Tinyint,
            N::Uuid => CqlType::Uuid,
            N::Varint => CqlType::Varint,
        },
        ast::TypeExpr::List(e) => CqlType::List {
            elem: Box::new(collection_element(ty, e, ks, frozen)?),
            frozen,
        },
        ast::TypeExpr::Set(e) => CqlType::Set {
            elem: Box::new(collection_element(ty, e, ks, frozen)?),
            frozen,
        },
        ast::TypeExpr::Map(k, v) => CqlType::Map {
            key: Box::new(collection_element(ty, k, ks, frozen)?),
            value: Box::new(collection_element(ty, v, ks, frozen)?),
            frozen,
        },
        ast::TypeExpr::Tuple(ts) => {
            if ts
                .iter()
                .any(|t| matches!(t, ast::TypeExpr::Native(ast::NativeType::Counter)))
            {
                return Err(invalid("Counters are not allowed inside tuples"));
            }
            CqlType::Tuple(
                ts.iter()
                    .map(|t| resolve_type(t, ks, true))
                    .collect::<Result<_, _>>()?,
            )
        }
        ast::TypeExpr::Vector(_, 0) => {
            return Err(invalid(
                "vectors may only have positive dimensions; given 0",
            ));
        }
        ast::TypeExpr::Vector(e, n) => CqlType::Vector {
            elem: Box::new(resolve_type(e, ks, true)?),
            dim: *n,
        },
        ast::TypeExpr::Frozen(inner) => {
            if matches!(**inner, ast::TypeExpr::Native(_) | ast::TypeExpr::Custom(_)) {
                return Err(QueryError::Syntax(format!(
                    "frozen<> is only allowed on collections, tuples, and user-defined types (got {inner})"
                )));
            }
            resolve_type(inner, ks, true)?
        }
        ast::TypeExpr::User(q) => {
            if let Some(k) = &q.keyspace
                && k.name != ks.name
            {
                return Err(invalid(format!(
                    "Statement on keyspace {} cannot refer to a user type in keyspace {}; user types can only be used in the keyspace they are defined in",
                    ks.name, k.name
                )));
            }
            let def = ks
                .types
                .get(&q.name.name)
                .ok_or_else(|| invalid(format!("Unknown type {}.{}", ks.name, q.name.name)))?;
            let mut d = (**def).clone();
            d.frozen = frozen;
            // A use of the type holds its fields as frozen values, whatever their declared
            // frozenness (kept in the keyspace's definition for system_schema.types).
            for f in &mut d.field_types {
                *f = f.freeze();
            }
            CqlType::Udt(Arc::new(d))
        }
        ast::TypeExpr::Custom(c) => CqlType::Custom(c.clone()),
    })
}

/// The type of a user type's field as declared: a collection may stay non-frozen (Cassandra
/// shows `set<text>` in system_schema.types), anything else is frozen.
fn resolve_field_type(ty: &ast::TypeExpr, ks: &KeyspaceDef) -> Result<CqlType, QueryError> {
    let collection = matches!(
        ty,
        ast::TypeExpr::List(_) | ast::TypeExpr::Set(_) | ast::TypeExpr::Map(..)
    );
    resolve_type(ty, ks, !collection)
}

/// An element type of a collection: frozen, and not a bare (non-frozen) user type.
fn collection_element(
    outer: &ast::TypeExpr,
    e: &ast::TypeExpr,
    ks: &KeyspaceDef,
    frozen: bool,
) -> Result<CqlType, QueryError> {
    let shown = if frozen {
        format!("frozen<{outer}>")
    } else {
        outer.to_string()
    };
    if matches!(e, ast::TypeExpr::Native(ast::NativeType::Counter)) {
        return Err(invalid(format!(
            "Counters are not allowed inside collections: {shown}"
        )));
    }
    if !frozen {
        if matches!(e, ast::TypeExpr::User(_)) {
            return Err(invalid(format!(
                "Non-frozen UDTs are not allowed inside collections: {outer}"
            )));
        }
        if matches!(
            e,
            ast::TypeExpr::List(_) | ast::TypeExpr::Set(_) | ast::TypeExpr::Map(..)
        ) {
            return Err(invalid(format!(
                "Non-frozen collections are not allowed inside collections: {outer}"
            )));
        }
    }
    resolve_type(e, ks, true)
}

pub fn create_table(
    s: &Schema,
    st: &ast::CreateTable,
    current_ks: Option<&str>,
) -> Result<DdlOutcome, QueryError> {
    let ks_name = resolve_keyspace(&st.name, current_ks)?;
    let ks = user_keyspace(s, &ks_name)?;
    let name = st.name.name.name.clone();
    if ks.tables.contains_key(&name) {
        if st.if_not_exists {
            return Ok(unchanged(s));
        }
        return Err(QueryError::AlreadyExists {
            keyspace: ks_name.clone(),
            table: name.clone(),
            message: format!(
                "Cannot add already existing table \"{name}\" to keyspace \"{ks_name}\""
            ),
        });
    }
    if name.is_empty()
        || name.len() > 222
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(QueryError::Config(format!(
            "{ks_name}.{name}: Table name must not be empty or not contain non-alphanumeric-underscore characters (got \"{name}\")"
        )));
    }
    let pk_names: Vec<String> = st
        .primary_key
        .partition_key
        .iter()
        .map(|i| i.name.clone())
        .collect();
    let ck_names: Vec<String> = st
        .primary_key
        .clustering_columns
        .iter()
        .map(|i| i.name.clone())
        .collect();
    let inline_pk: Vec<&ast::ColumnDef> = st.columns.iter().filter(|c| c.primary_key).collect();
    let (pk_names, ck_names) = if !inline_pk.is_empty() {
        let same =
            pk_names.len() == 1 && pk_names[0] == inline_pk[0].name.name && ck_names.is_empty();
        if inline_pk.len() > 1 || (!pk_names.is_empty() && !same) {
            return Err(invalid(
                "Multiple PRIMARY KEYs specified (exactly one required)",
            ));
        }
        (vec![inline_pk[0].name.name.clone()], Vec::new())
    } else {
        (pk_names, ck_names)
    };
    if pk_names.is_empty() {
        return Err(invalid(
            "No PRIMARY KEY specifed for table (exactly one required)",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for c in &st.columns {
        if !seen.insert(c.name.name.clone()) {
            return Err(invalid(format!(
                "Duplicate column '{}' declaration for table {ks_name}.{name}",
                c.name.name
            )));
        }
    }
    let mut columns = Vec::with_capacity(st.columns.len());
    for c in &st.columns {
        let cname = c.name.name.clone();
        let (kind, position) = if let Some(p) = pk_names.iter().position(|n| *n == cname) {
            (ColumnKind::PartitionKey, p as u16)
        } else if let Some(p) = ck_names.iter().position(|n| *n == cname) {
            (ColumnKind::Clustering, p as u16)
        } else if c.is_static {
            (ColumnKind::Static, 0)
        } else {
            (ColumnKind::Regular, 0)
        };
        let is_key = matches!(kind, ColumnKind::PartitionKey | ColumnKind::Clustering);
        if is_key && c.is_static {
            return Err(invalid(format!(
                "Static column '{cname}' cannot be part of the PRIMARY KEY"
            )));
        }
        if is_key {
            let declared = resolve_type(&c.ty, ks, false)?;
            match &declared {
                CqlType::List { .. } | CqlType::Set { .. } | CqlType::Map { .. }
                    if declared.is_multi_cell() =>
                {
                    return Err(invalid(format!(
                        "Invalid non-frozen collection type {declared} for PRIMARY KEY column '{cname}'"
                    )));
                }
                CqlType::Udt(u) if !u.frozen => {
                    return Err(invalid(format!(
                        "Invalid non-frozen user-defined type \"{}.{}\" for PRIMARY KEY column '{cname}'",
                        u.keyspace, u.name
                    )));
                }
                _ => {}
            }
        }
        let ty = resolve_type(&c.ty, ks, is_key)?;
        if is_key && ty.is_counter() {
            return Err(invalid(format!(
                "counter type is not supported for PRIMARY KEY column '{cname}'"
            )));
        }
        if is_key && matches!(ty, CqlType::Duration) {
            return Err(invalid(format!(
                "duration type is not supported for PRIMARY KEY column '{cname}'"
            )));
        }
        if c.is_static && ck_names.is_empty() {
            return Err(invalid(
                "Static columns are only useful (and thus allowed) if the table has at least one clustering column",
            ));
        }
        columns.push(ColumnDef {
            name: cname,
            ty,
            kind,
            position,
            order: ClusteringOrder::Asc,
        });
    }
    for n in pk_names.iter().chain(ck_names.iter()) {
        if !columns.iter().any(|c| c.name == *n) {
            return Err(invalid(format!(
                "Unknown definition {n} referenced in PRIMARY KEY"
            )));
        }
    }
    // CLUSTERING ORDER BY must list clustering columns in key order.
    for (i, (col, order)) in st.options.clustering_order.iter().enumerate() {
        if ck_names.get(i) != Some(&col.name) {
            if !ck_names.contains(&col.name) {
                return Err(invalid(format!(
                    "Only clustering key columns can be defined in CLUSTERING ORDER directive: {} is not a clustering column",
                    col.name
                )));
            }
            return Err(invalid(
                "The order of columns in the CLUSTERING ORDER directive must match that of the clustering columns",
            ));
        }
        if let Some(c) = columns.iter_mut().find(|c| c.name == col.name) {
            c.order = match order {
                ast::Order::Asc => ClusteringOrder::Asc,
                ast::Order::Desc => ClusteringOrder::Desc,
            };
        }
    }
    let counters = columns.iter().filter(|c| c.ty.is_counter()).count();
    let regular = columns
        .iter()
        .filter(|c| matches!(c.kind, ColumnKind::Regular | ColumnKind::Static))
        .count();
    if counters > 0 && counters != regular {
        return Err(invalid(
            "Cannot mix counter and non counter columns in the same table",
        ));
    }
    if st.options.compact_storage {
        if regular == 0 {
            return Err(invalid(
                "No definition found that is not part of the PRIMARY KEY",
            ));
        }
        return Err(invalid(
            "Compact tables are not allowed in Cassandra starting with 4.0 version",
        ));
    }
    let mut options = TableOptions::default();
    let mut given_id = None;
    let props: Vec<ast::Property> = st
        .options
        .properties
        .iter()
        .filter(|p| {
            if p.name.eq_ignore_ascii_case("id") {
                given_id = p.value.as_text();
                false
            } else {
                true
            }
        })
        .cloned()
        .collect();
    apply_table_properties(&mut options, &props)?;
    if counters > 0 && options.default_time_to_live > 0 {
        return Err(invalid(
            "Cannot set default_time_to_live on a table with counters",
        ));
    }
    let id = match given_id {
        Some(t) => {
            TableId::parse(&t).ok_or_else(|| QueryError::Config(format!("Invalid table id {t}")))?
        }
        None => TableId(u128::from_be_bytes(*uuid::Uuid::new_v4().as_bytes())),
    };
    if s.table_by_id(id).is_some() {
        return Err(QueryError::Config(format!("Table id {id} is already used")));
    }
    let table = TableSchema::new(id, &ks_name, &name, columns, options);
    let mut next = s.clone();
    if let Some(k) = next.keyspaces.get_mut(&ks_name) {
        k.tables.insert(name.clone(), Arc::new(table));
    }
    Ok(changed(
        next,
        SchemaChangeKind::Created,
        SchemaChangeTarget::Table {
            keyspace: ks_name,
            table: name,
        },
    ))
}

fn map_prop(p: &ast::Property) -> Result<BTreeMap<String, String>, QueryError> {
    p.value
        .as_map()
        .map(|m| m.into_iter().collect())
        .ok_or_else(|| {
            QueryError::Syntax(format!(
                "Invalid value for property '{}': expected a map",
                p.name
            ))
        })
}

fn num_prop<T: std::str::FromStr>(p: &ast::Property) -> Result<T, QueryError> {
    p.value
        .as_text()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| QueryError::Syntax(format!("Invalid value for property '{}'", p.name)))
}

fn text_prop(p: &ast::Property) -> Result<String, QueryError> {
    p.value
        .as_text()
        .ok_or_else(|| QueryError::Syntax(format!("Invalid value for property '{}'", p.name)))
}

/// Applies `WITH` properties to table options (Cassandra's option names and checks).
pub fn apply_table_properties(
    o: &mut TableOptions,
    props: &[ast::Property],
) -> Result<(), QueryError> {
    for p in props {
        let name = p.name.to_ascii_lowercase();
        match name.as_str() {
            "compaction" => {
                let mut m = map_prop(p)?;
                let class = m.get("class").cloned().ok_or_else(|| {
                    QueryError::Config(
                        "Missing sub-option 'class' for the 'compaction' option.".into(),
                    )
                })?;
                let full = if class.contains('.') {
                    class
                } else {
                    format!("org.apache.cassandra.db.compaction.{class}")
                };
                const KNOWN: &[&str] = &[
                    "SizeTieredCompactionStrategy",
                    "LeveledCompactionStrategy",
                    "TimeWindowCompactionStrategy",
                    "UnifiedCompactionStrategy",
                    "IncrementalCompactionStrategy",
                ];
                let short = full.rsplit('.').next().unwrap_or_default();
                if !full.starts_with("org.apache.cassandra.db.compaction.")
                    || !KNOWN.contains(&short)
                {
                    return Err(QueryError::Config(format!(
                        "Unable to find compaction strategy class '{full}'"
                    )));
                }
                if short == "SizeTieredCompactionStrategy" {
                    const STCS: &[&str] = &[
                        "class",
                        "enabled",
                        "min_threshold",
                        "max_threshold",
                        "bucket_high",
                        "bucket_low",
                        "min_sstable_size",
                        "tombstone_threshold",
                        "tombstone_compaction_interval",
                        "unchecked_tombstone_compaction",
                        "only_purge_repaired_tombstones",
                        "log_all",
                        "provide_overlapping_tombstones",
                    ];
                    let unknown: Vec<&str> = m
                        .keys()
                        .map(String::as_str)
                        .filter(|k| !STCS.contains(k))
                        .collect();
                    if !unknown.is_empty() {
                        return Err(QueryError::Config(format!(
                            "Properties specified [{}] are not understood by SizeTieredCompactionStrategy",
                            unknown.join(", ")
                        )));
                    }
                }
                m.insert("class".into(), full);
                m.entry("max_threshold".into())
                    .or_insert_with(|| "32".into());
                m.entry("min_threshold".into())
                    .or_insert_with(|| "4".into());
                o.compaction = m;
            }
            "compression" => {
                let mut m = map_prop(p)?;
                if let Some(c) = m.remove("sstable_compression") {
                    m.insert("class".into(), c);
                }
                if let Some(c) = m.get("class").cloned() {
                    if !c.contains('.') {
                        m.insert(
                            "class".into(),
                            format!("org.apache.cassandra.io.compress.{c}"),
                        );
                    }
                    m.entry("chunk_length_in_kb".into())
                        .or_insert_with(|| "16".into());
                    let full = m.get("class").cloned().unwrap_or_default();
                    const KNOWN: &[&str] = &[
                        "LZ4Compressor",
                        "SnappyCompressor",
                        "DeflateCompressor",
                        "ZstdCompressor",
                        "NoopCompressor",
                    ];
                    let short = full.rsplit('.').next().unwrap_or_default();
                    if !full.starts_with("org.apache.cassandra.io.compress.")
                        || !KNOWN.contains(&short)
                    {
                        return Err(QueryError::Config(format!(
                            "Could not create Compression for type {full}"
                        )));
                    }
                }
                if let Some(kb) = m.get("chunk_length_in_kb") {
                    let ok = kb.parse::<u32>().is_ok_and(|v| v.is_power_of_two());
                    if !ok {
                        return Err(QueryError::Config(
                            "chunk_length_in_kb must be a power of 2".into(),
                        ));
                    }
                }
                if m.get("enabled").map(|v| v == "false").unwrap_or(false) {
                    m = BTreeMap::from([("enabled".to_string(), "false".to_string())]);
                }
                o.compression = m;
            }
            "caching" => {
                let m = map_prop(p)?;
                if let Some(k) = m.get("keys")
                    && k != "ALL"
                    && k != "NONE"
                {
                    return Err(QueryError::Config(format!(
                        "Invalid value '{k}' for caching sub-option 'keys': only 'ALL' and 'NONE' are allowed"
                    )));
                }
                o.caching = m;
            }
            "comment" => o.comment = text_prop(p)?,
            "gc_grace_seconds" => {
                let v: i32 = num_prop(p)?;
                if v < 0 {
                    return Err(QueryError::Config(format!(
                        "gc_grace_seconds must be greater than or equal to 0 (got {v})"
                    )));
                }
                o.gc_grace_seconds = v;
            }
            "default_time_to_live" => {
                let v: i32 = num_prop(p)?;
                if v < 0 {
                    return Err(QueryError::Config(
                        "default_time_to_live must be greater than or equal to 0 (got ".to_string()
                            + &v.to_string()
                            + ")",
                    ));
                }
                if v > 630_720_000 {
                    return Err(QueryError::Config(format!(
                        "default_time_to_live must be less than or equal to 630720000 (got {v})"
                    )));
                }
                o.default_time_to_live = v;
            }
            "bloom_filter_fp_chance" => {
                let v: f64 = num_prop(p)?;
                if v <= 6.71e-5 || v > 1.0 {
                    return Err(QueryError::Config(format!(
                        "bloom_filter_fp_chance must be larger than 6.71E-5 and less than or equal to 1.0 (got {v})"
                    )));
                }
                o.bloom_filter_fp_chance = v;
            }
            "crc_check_chance" => {
                let v: f64 = num_prop(p)?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(QueryError::Config(format!(
                        "crc_check_chance must be larger than or equal to 0 and smaller than or equal to 1.0 (got {v})"
                    )));
                }
                o.crc_check_chance = v;
            }
            "speculative_retry" => o.speculative_retry = retry_policy(p)?,
            "additional_write_policy" => o.additional_write_policy = retry_policy(p)?,
            "min_index_interval" => o.min_index_interval = num_prop(p)?,
            "max_index_interval" => o.max_index_interval = num_prop(p)?,
            "memtable_flush_period_in_ms" => o.memtable_flush_period_in_ms = num_prop(p)?,
            "read_repair" => o.read_repair = text_prop(p)?,
            "cdc" => o.cdc = bool_prop(p)?,
            "allow_auto_snapshot" => o.allow_auto_snapshot = bool_prop(p)?,
            "incremental_backups" => o.incremental_backups = bool_prop(p)?,
            "memtable" => {
                let m = text_prop(p)?;
                if !["default", "skiplist", "trie", "skiplist_sharded"].contains(&m.as_str()) {
                    return Err(QueryError::Config(format!(
                        "Memtable configuration \"{m}\" not found."
                    )));
                }
                o.memtable = m;
            }
            // Accepted for compatibility (legacy or ScyllaDB options), kept verbatim.
            "populate_io_cache_on_flush"
            | "index_interval"
            | "replicate_on_write"
            | "tombstone_gc"
            | "per_partition_rate_limit"
            | "paxos_grace_seconds"
            | "synchronous_updates"
            | "extensions" => {
                let v = match &p.value {
                    ast::PropertyValue::Map(_) => format!(
                        "{{{}}}",
                        map_prop(p)?
                            .iter()
                            .map(|(k, v)| format!("'{k}': '{v}'"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    _ => text_prop(p)?,
                };
                o.other.insert(name, v);
            }
            other => {
                return Err(QueryError::Syntax(format!("Unknown property '{other}'")));
            }
        }
    }
    if o.max_index_interval < o.min_index_interval {
        return Err(QueryError::Config(format!(
            "max_index_interval must be greater than or equal to min_index_interval ({}) (got {})",
            o.min_index_interval, o.max_index_interval
        )));
    }
    Ok(())
}

/// `speculative_retry` / `additional_write_policy`: NEVER, ALWAYS, `99p`,
/// `99PERCENTILE`, `50ms`, MIN(a,b), MAX(a,b) (Cassandra's forms).
fn retry_policy(p: &ast::Property) -> Result<String, QueryError> {
    let v = text_prop(p)?;
    fn valid(s: &str) -> bool {
        let u = s.trim().to_ascii_uppercase();
        if u == "NEVER" || u == "ALWAYS" || u == "NONE" {
            return true;
        }
        for f in ["MIN(", "MAX("] {
            if let Some(inner) = u.strip_prefix(f).and_then(|x| x.strip_suffix(')')) {
                return inner.split(',').count() == 2 && inner.split(',').all(valid);
            }
        }
        let num = |x: &str| x.parse::<f64>().is_ok_and(|n| n >= 0.0);
        ["PERCENTILE", "P", "MS"]
            .iter()
            .any(|suffix| u.strip_suffix(suffix).is_some_and(num))
    }
    if !valid(&v) {
        return Err(QueryError::Config(format!(
            "Invalid value {v} for option 'speculative_retry'"
        )));
    }
    Ok(v)
}

pub fn alter_table(
    s: &Schema,
    st: &ast::AlterTable,
    current_ks: Option<&str>,
) -> Result<DdlOutcome, QueryError> {
    let ks_name = resolve_keyspace(&st.name, current_ks)?;
    let ks = user_keyspace(s, &ks_name)?;
    let name = st.name.name.name.clone();
    let Some(table) = ks.tables.get(&name) else {
        if st.if_exists {
            return Ok(unchanged(s));
        }
        return Err(invalid(format!("Table '{ks_name}.{name}' doesn't exist")));
    };
    let mut t = (**table).clone();
    match &st.action {
        ast::AlterTableAction::Add {
            if_not_exists,
            columns,
        } => {
            for c in columns {
                if t.column(&c.name.name).is_some() {
                    if *if_not_exists {
                        continue;
                    }
                    return Err(invalid(format!(
                        "Column with name '{}' already exists",
                        c.name.name
                    )));
                }
                let ty = resolve_type(&c.ty, ks, false)?;
                if let Some(old) = t
                    .dropped_columns
                    .keys()
                    .rev()
                    .find_map(|id| t.column_by_id(*id).filter(|d| d.name == c.name.name))
                    && old.ty != ty
                {
                    return Err(invalid(format!(
                        "Cannot add a column '{}' of type {ty}, incompatible with previously dropped column '{}' of type {}",
                        c.name.name, c.name.name, old.ty
                    )));
                }
                if c.is_static && t.clustering_key.is_empty() {
                    return Err(invalid(
                        "Static columns are only useful (and thus allowed) if the table has at least one clustering column",
                    ));
                }
                if t.is_counter && !ty.is_counter() {
                    return Err(QueryError::Config(format!(
                        "{ks_name}.{name}: Cannot have a non counter column (\"{}\") in a counter table",
                        c.name.name
                    )));
                }
                if ty.is_counter() != t.is_counter {
                    return Err(invalid(
                        "Cannot mix counter and non counter columns in the same table",
                    ));
                }
                t.columns.push(ColumnDef {
                    name: c.name.name.clone(),
                    ty,
                    kind: if c.is_static {
                        ColumnKind::Static
                    } else {
                        ColumnKind::Regular
                    },
                    position: 0,
                    order: ClusteringOrder::Asc,
                });
            }
        }
        ast::AlterTableAction::With(props) => {
            if props.iter().any(|p| p.name.eq_ignore_ascii_case("id")) {
                return Err(QueryError::Config("Cannot alter table id.".into()));
            }
            apply_table_properties(&mut t.options, props)?;
            if t.is_counter && t.options.default_time_to_live > 0 {
                return Err(invalid(
                    "Cannot set default_time_to_live on a table with counters",
                ));
            }
        }
        ast::AlterTableAction::Rename { renames, .. } => {
            if ks.views.values().any(|v| v.base == t.id) {
                return Err(invalid(format!(
                    "Cannot rename columns of table {ks_name}.{name}: materialized views depend on it"
                )));
            }
            for (from, to) in renames {
                let Some((_, def)) = t.column(&from.name) else {
                    return Err(invalid(format!(
                        "Column with name '{}' was not found in table {ks_name}.{name}",
                        from.name
                    )));
                };
                if !matches!(def.kind, ColumnKind::PartitionKey | ColumnKind::Clustering) {
                    return Err(invalid(format!(
                        "Cannot rename non PRIMARY KEY column {}",
                        from.name
                    )));
                }
                if t.column(&to.name).is_some() {
                    return Err(invalid(format!(
                        "Cannot rename column {} to {} in table '{name}'; another column with that name already exists",
                        from.name, to.name
                    )));
                }
                if let Some(c) = t.columns.iter_mut().find(|c| c.name == from.name) {
                    c.name = to.name.clone();
                }
            }
        }
        ast::AlterTableAction::Drop {
            if_exists,
            columns,
            timestamp,
        } => {
            let at = match timestamp {
                Some(ts) => ts
                    .parse::<i64>()
                    .map_err(|_| invalid(format!("Invalid timestamp {ts}")))?,
                None => crate::exec::now_micros(),
            };
            for c in columns {
                let Some((id, def)) = t.column(&c.name) else {
                    if *if_exists {
                        continue;
                    }
                    return Err(invalid(format!(
                        "Column {} was not found in table {ks_name}.{name}",
                        c.name
                    )));
                };
                if matches!(def.kind, ColumnKind::PartitionKey | ColumnKind::Clustering) {
                    return Err(invalid(format!(
                        "Cannot drop PRIMARY KEY column {}",
                        c.name
                    )));
                }
                let deps: Vec<&str> = ks
                    .indexes
                    .values()
                    .filter(|i| i.base == t.id && i.column == id)
                    .map(|i| i.name.as_str())
                    .collect();
                if !deps.is_empty() {
                    return Err(invalid(format!(
                        "Cannot drop column {} because it has dependent secondary indexes ({})",
                        c.name,
                        deps.join(", ")
                    )));
                }
                if ks.views.values().any(|v| v.base == t.id) {
                    return Err(invalid(format!(
                        "Cannot drop column {} on base table {name} with materialized views",
                        c.name
                    )));
                }
                t.dropped_columns.insert(id, at);
            }
        }
        ast::AlterTableAction::AlterColumnType { .. } => {
            return Err(invalid("Altering column types is no longer supported"));
        }
        ast::AlterTableAction::DropCompactStorage => {
            return Err(invalid(
                "Cannot DROP COMPACT STORAGE on a table that is not COMPACT STORAGE",
            ));
        }
        ast::AlterTableAction::AlterColumnMask { .. } => {
            return Err(invalid(
                "Dynamic data masking is not supported by Amphora yet",
            ));
        }
    }
    let mut next = s.clone();
    if let Some(k) = next.keyspaces.get_mut(&ks_name) {
        // Views selecting every column (`SELECT *`) get the added columns too.
        if let ast::AlterTableAction::Add { .. } = &st.action {
            for v in k
                .views
                .values_mut()
                .filter(|v| v.base == t.id && v.include_all)
            {
                let mut vt = (*v.table).clone();
                for (id, c) in t.live_columns() {
                    if c.kind == ColumnKind::Regular
                        && vt.column(&c.name).is_none()
                        && table.column_by_id(id).is_none_or(|o| o.name != c.name)
                    {
                        vt.columns.push(c.clone());
                    }
                }
                v.table = Arc::new(vt);
            }
        }
        k.tables.insert(name.clone(), Arc::new(t));
    }
    Ok(changed(
        next,
        SchemaChangeKind::Updated,
        SchemaChangeTarget::Table {
            keyspace: ks_name,
            table: name,
        },
    ))
}

pub fn drop_table(
    s: &Schema,
    st: &ast::Drop,
    current_ks: Option<&str>,
) -> Result<DdlOutcome, QueryError> {
    let ks_name = resolve_keyspace(&st.name, current_ks)?;
    if is_system_keyspace(&ks_name) {
        return Err(QueryError::Unauthorized(format!(
            "{ks_name} keyspace is not user-modifiable"
        )));
    }
    let name = st.name.name.name.clone();
    let exists = s.table(&ks_name, &name).is_some();
    if !exists {
        if st.if_exists {
            return Ok(unchanged(s));
        }
        return Err(invalid(format!("Table '{ks_name}.{name}' doesn't exist")));
    }
    if let Some(ks) = s.keyspace(&ks_name)
        && let Some(t) = ks.tables.get(&name)
    {
        let views: Vec<String> = ks
            .views
            .iter()
            .filter(|(_, v)| v.base == t.id)
            .map(|(n, _)| format!("{ks_name}.{n}"))
            .collect();
        if !views.is_empty() {
            return Err(invalid(format!(
                "Cannot drop table when materialized views still depend on it ({})",
                views.join(",")
            )));
        }
    }
    if s.view(&ks_name, &name).is_some() {
        return Err(invalid(
            "Cannot use DROP TABLE on a materialized view. Please use DROP MATERIALIZED VIEW instead.",
        ));
    }
    let mut next = s.clone();
    if let Some(k) = next.keyspaces.get_mut(&ks_name)
        && let Some(t) = k.tables.remove(&name)
    {
        k.indexes.retain(|_, i| i.base != t.id);
    }
    Ok(changed(
        next,
        SchemaChangeKind::Dropped,
        SchemaChangeTarget::Table {
            keyspace: ks_name,
            table: name,
        },
    ))
}

pub fn create_type(
    s: &Schema,
    st: &ast::CreateType,
    current_ks: Option<&str>,
) -> Result<DdlOutcome, QueryError> {
    let ks_name = resolve_keyspace(&st.name, current_ks)?;
    let ks = user_keyspace(s, &ks_name)?;
    let name = st.name.name.name.clone();
    if ks.types.contains_key(&name) {
        if st.if_not_exists {
            return Ok(unchanged(s));
        }
        return Err(invalid(format!(
            "A user type with name '{name}' already exists"
        )));
    }
    let mut field_names = Vec::new();
    let mut field_types = Vec::new();
    for (f, t) in &st.fields {
        if field_names.contains(&f.name) {
            return Err(invalid(format!(
                "Duplicate field name '{}' in type '{name}'",
                f.name
            )));
        }
        field_names.push(f.name.clone());
        let fty = resolve_field_type(t, ks)?;
        if fty.is_counter() {
            return Err(invalid("A user type cannot contain counters"));
        }
        field_types.push(fty);
    }
    let def = UdtDef {
        keyspace: ks_name.clone(),
        name: name.clone(),
        field_names,
        field_types,
        frozen: true,
    };
    let mut next = s.clone();
    if let Some(k) = next.keyspaces.get_mut(&ks_name) {
        k.types.insert(name.clone(), Arc::new(def));
    }
    Ok(changed(
        next,
        SchemaChangeKind::Created,
        SchemaChangeTarget::Type {
            keyspace: ks_name,
            name,
        },
    ))
}

pub fn drop_type(
    s: &Schema,
    st: &ast::Drop,
    current_ks: Option<&str>,
) -> Result<DdlOutcome, QueryError> {
    let ks_name = resolve_keyspace(&st.name, current_ks)?;
    let ks = user_keyspace(s, &ks_name)?;
    let name = st.name.name.name.clone();
    if !ks.types.contains_key(&name) {
        if st.if_exists {
            return Ok(unchanged(s));
        }
        return Err(invalid(format!(
            "No user type named {ks_name}.{name} exists."
        )));
    }
    let used = ks
        .tables
        .values()
        .any(|t| t.columns.iter().any(|c| type_uses(&c.ty, &name)))
        || ks
            .types
            .values()
            .any(|u| u.name != name && u.field_types.iter().any(|t| type_uses(t, &name)));
    if used {
        return Err(invalid(format!(
            "Cannot drop user type {ks_name}.{name} as it is still used"
        )));
    }
    let mut next = s.clone();
    if let Some(k) = next.keyspaces.get_mut(&ks_name) {
        k.types.remove(&name);
    }
    Ok(changed(
        next,
        SchemaChangeKind::Dropped,
        SchemaChangeTarget::Type {
            keyspace: ks_name,
            name,
        },
    ))
}

/// `ALTER TYPE … ADD / RENAME` (Cassandra's checks and messages); every column, field and
/// view or index table using the type gets the new definition.
pub fn alter_type(
    s: &Schema,
    st: &ast::AlterType,
    current_ks: Option<&str>,
) -> Result<DdlOutcome, QueryError> {
    let ks_name = resolve_keyspace(&st.name, current_ks)?;
    if is_system_keyspace(&ks_name) {
        return Err(QueryError::Unauthorized(format!(
            "{ks_name} keyspace is not user-modifiable"
        )));
    }
    let name = st.name.name.name.clone();
    let Some((ks, old)) = s
        .keyspace(&ks_name)
        .and_then(|k| k.types.get(&name).map(|u| (k, u)))
    else {
        if st.if_exists {
            return Ok(unchanged(s));
        }
        return Err(invalid(format!("Type {ks_name}.{name} doesn't exist")));
    };
    let full_name = format!("{ks_name}.{name}");
    let mut def = (**old).clone();
    match &st.action {
        ast::AlterTypeAction::AlterField { .. } => {
            return Err(invalid("Altering field types is no longer supported"));
        }
        ast::AlterTypeAction::Add {
            if_not_exists,
            field,
            ty,
        } => {
            if matches!(ty, ast::TypeExpr::Native(ast::NativeType::Counter)) {
                return Err(invalid("A user type cannot contain counters"));
            }
            if matches!(ty, ast::TypeExpr::User(_)) {
                return Err(invalid("A user type cannot contain non-frozen UDTs"));
            }
            if def.field_names.contains(&field.name) {
                if *if_not_exists {
                    return Ok(unchanged(s));
                }
                return Err(invalid(format!(
                    "Cannot add field {} to type {full_name}: a field with name {} already exists",
                    field.name, field.name
                )));
            }
            let fty = resolve_field_type(ty, ks)?;
            if type_uses(&fty, &name) {
                return Err(invalid(format!(
                    "Cannot add new field {} of type {fty} to user type {full_name} as it would create a circular reference",
                    field.name
                )));
            }
            let in_pk: Vec<String> = ks
                .tables
                .values()
                .chain(ks.views.values().map(|v| &v.table))
                .filter(|t| {
                    t.partition_key
                        .iter()
                        .any(|id| type_uses(&t.columns[*id as usize].ty, &name))
                })
                .map(|t| format!("{}.{}", t.keyspace, t.name))
                .collect();
            if !in_pk.is_empty() {
                return Err(invalid(format!(
                    "Cannot add new field {} of type {fty} to user type {full_name} as the type is being used in partition key by the following tables: {}",
                    field.name,
                    in_pk.join(", ")
                )));
            }
            def.field_names.push(field.name.clone());
            def.field_types.push(fty);
        }
        ast::AlterTypeAction::Rename { if_exists, renames } => {
            for (from, to) in renames {
                match def.field_names.iter().position(|f| *f == from.name) {
                    Some(i) => def.field_names[i] = to.name.clone(),
                    None if *if_exists => {}
                    None => {
                        return Err(invalid(format!(
                            "Unkown field {} in user type {full_name}",
                            from.name
                        )));
                    }
                }
            }
            for n in &def.field_names {
                if def.field_names.iter().filter(|x| *x == n).count() > 1 {
                    return Err(invalid(format!(
                        "Duplicate field name {n} in type {ks_name}"
                    )));
                }
            }
        }
    }
    let def = Arc::new(def);
    let mut next = s.clone();
    if let Some(k) = next.keyspaces.get_mut(&ks_name) {
        let fix = |t: &Arc<TableSchema>| -> Arc<TableSchema> {
            if !t.columns.iter().any(|c| type_uses(&c.ty, &name)) {
                return t.clone();
            }
            let mut n = (**t).clone();
            for c in &mut n.columns {
                c.ty = replace_udt(&c.ty, &def);
            }
            Arc::new(n)
        };
        for t in k.tables.values_mut() {
            *t = fix(t);
        }
        for v in k.views.values_mut() {
            v.table = fix(&v.table);
        }
        for i in k.indexes.values_mut() {
            i.backing = fix(&i.backing);
        }
        for u in k.types.values_mut() {
            if u.name == name {
                *u = def.clone();
            } else if u.field_types.iter().any(|f| type_uses(f, &name)) {
                let mut n = (**u).clone();
                for f in &mut n.field_types {
                    *f = replace_udt(f, &def);
                }
                *u = Arc::new(n);
            }
        }
    }
    Ok(changed(
        next,
        SchemaChangeKind::Updated,
        SchemaChangeTarget::Type {
            keyspace: ks_name,
            name,
        },
    ))
}

/// `t` with every use of user type `new` (same keyspace and name) replaced by `new`,
/// keeping each use's frozenness.
fn replace_udt(t: &CqlType, new: &Arc<UdtDef>) -> CqlType {
    let elem = |e: &CqlType| Box::new(replace_udt(e, new));
    match t {
        CqlType::Udt(d) if d.name == new.name && d.keyspace == new.keyspace => {
            let mut n = (**new).clone();
            n.frozen = d.frozen;
            for f in &mut n.field_types {
                *f = f.freeze();
            }
            CqlType::Udt(Arc::new(n))
        }
        CqlType::Udt(d) => {
            let mut n = (**d).clone();
            for f in &mut n.field_types {
                *f = replace_udt(f, new);
            }
            CqlType::Udt(Arc::new(n))
        }
        CqlType::List { elem: e, frozen } => CqlType::List {
            elem: elem(e),
            frozen: *frozen,
        },
        CqlType::Set { elem: e, frozen } => CqlType::Set {
            elem: elem(e),
            frozen: *frozen,
        },
        CqlType::Map { key, value, frozen } => CqlType::Map {
            key: elem(key),
            value: elem(value),
            frozen: *frozen,
        },
        CqlType::Vector { elem: e, dim } => CqlType::Vector {
            elem: elem(e),
            dim: *dim,
        },
        CqlType::Tuple(ts) => CqlType::Tuple(ts.iter().map(|x| replace_udt(x, new)).collect()),
        other => other.clone(),
    }
}

fn type_uses(t: &CqlType, udt: &str) -> bool {
    match t {
        CqlType::Udt(d) => d.name == udt || d.field_types.iter().any(|f| type_uses(f, udt)),
        CqlType::List { elem, .. } | CqlType::Set { elem, .. } | CqlType::Vector { elem, .. } => {
            type_uses(elem, udt)
        }
        CqlType::Map { key, value, .. } => type_uses(key, udt) || type_uses(value, udt),
        CqlType::Tuple(ts) => ts.iter().any(|x| type_uses(x, udt)),
        _ => false,
    }
}
