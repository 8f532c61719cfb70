//! The syntax tree produced by the parser.
//!
//! Names are resolved only lexically: unquoted identifiers are folded to lower case,
//! quoted ones keep their case. Nothing here knows about a schema; checking that a
//! column exists or that a term fits its receiver is the planner's job.

use std::fmt;

/// A CQL identifier (keyspace, table, column, field, role …).
///
/// `name` is the effective name: unquoted identifiers and unreserved keywords are folded
/// to lower case, `"Quoted"` names keep their case with `""` unescaped to `"`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ident {
    pub name: String,
    /// Whether the identifier was written in double quotes.
    pub quoted: bool,
}

impl Ident {
    /// An unquoted identifier; `name` must already be lower case.
    pub fn new(name: impl Into<String>) -> Self {
        Ident {
            name: name.into(),
            quoted: false,
        }
    }

    pub fn quoted(name: impl Into<String>) -> Self {
        Ident {
            name: name.into(),
            quoted: true,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for Ident {
    /// Writes the name as CQL: quoted if it was written quoted or would not survive
    /// unquoted (so the output parses back to the same `Ident`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.quoted || crate::display::needs_quoting(&self.name) {
            write!(f, "\"{}\"", self.name.replace('"', "\"\""))
        } else {
            f.write_str(&self.name)
        }
    }
}

/// `[keyspace.]name` — tables, types, functions, indexes, views.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QualifiedName {
    pub keyspace: Option<Ident>,
    pub name: Ident,
}

impl QualifiedName {
    pub fn new(keyspace: Option<Ident>, name: Ident) -> Self {
        QualifiedName { keyspace, name }
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(ks) = &self.keyspace {
            write!(f, "{ks}.")?;
        }
        write!(f, "{}", self.name)
    }
}

/// A bind marker: `?` (anonymous) or `:name`. `index` is its position among all the
/// markers of the statement, in source order, starting at 0.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BindMarker {
    pub index: usize,
    pub name: Option<Ident>,
}

/// A constant as written. Numbers keep their text so the planner can convert them to
/// the receiver's type (int, bigint, varint, decimal …) without loss.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// `'text'` or `$$text$$`, unescaped.
    String(String),
    /// `123`, `-5`; any length (a varint may not fit an i64).
    Integer(String),
    /// `1.5`, `1e10`, `-2.5E-3`.
    Float(String),
    Boolean(bool),
    /// `1h30m`, `-2d`, `P1DT2H`, `P0001-02-03T04:05:06`.
    Duration(String),
    /// Unquoted UUID `123e4567-e89b-12d3-a456-426614174000`.
    Uuid(String),
    /// `0xCAFE` (text including the `0x` prefix).
    Hex(String),
    NaN,
    Infinity,
    NegInfinity,
}

impl Literal {
    /// The literal's text as Cassandra's `getRawText` gives it (property values).
    pub fn raw_text(&self) -> String {
        match self {
            Literal::String(s)
            | Literal::Integer(s)
            | Literal::Float(s)
            | Literal::Duration(s)
            | Literal::Uuid(s)
            | Literal::Hex(s) => s.clone(),
            Literal::Boolean(b) => b.to_string(),
            Literal::NaN => "NaN".into(),
            Literal::Infinity => "Infinity".into(),
            Literal::NegInfinity => "-Infinity".into(),
        }
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::String(s) => write!(f, "'{}'", s.replace('\'', "''")),
            other => f.write_str(&other.raw_text()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl BinaryOp {
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
        }
    }
}

/// `writetime(c)`, `maxwritetime(c)`, `ttl(c)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CellMetadata {
    WriteTime,
    MaxWriteTime,
    Ttl,
}

/// A value expression: Cassandra's `term` (values, in every statement) and `selector`
/// (SELECT clause, GROUP BY) share this type.
///
/// The variants marked *selector only* are produced only where the grammar allows
/// columns: in the SELECT clause and GROUP BY.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Literal(Literal),
    Null,
    Bind(BindMarker),
    /// `[a, b]` (a list or a vector, decided by the receiver).
    List(Vec<Expr>),
    /// `{a, b}`; also `{}`, which may turn out to be an empty map (as in Cassandra).
    Set(Vec<Expr>),
    /// `{k: v, …}` with non-identifier keys.
    Map(Vec<(Expr, Expr)>),
    /// `{field: v, …}` — a user-type literal.
    Udt(Vec<(Ident, Expr)>),
    /// `(a, b)`: a tuple literal; in the SELECT clause `(a)` is just `a` parenthesised.
    Tuple(Vec<Expr>),
    /// `f(args)`, `ks.f(args)`, `token(a, b)`, `count(1)`, `now()`.
    Function {
        name: QualifiedName,
        args: Vec<Expr>,
    },
    /// `(type) term` — a type hint on a bind marker or literal.
    TypeHint {
        ty: TypeExpr,
        expr: Box<Expr>,
    },
    /// `CAST(x AS type)`.
    Cast {
        expr: Box<Expr>,
        ty: TypeExpr,
    },
    Binary {
        op: BinaryOp,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    /// Unary minus on anything but a numeric literal (those fold into the literal).
    Negate(Box<Expr>),
    /// *Selector only*: a column.
    Column(Ident),
    /// *Selector only*: `count(*)`.
    CountRows,
    /// *Selector only*: `writetime(c)`, `maxwritetime(c)`, `ttl(c)`; `column` is a column
    /// optionally followed by field / element access.
    CellMetadata {
        kind: CellMetadata,
        column: Box<Expr>,
    },
    /// *Selector only*: `udt_col.field`.
    Field {
        expr: Box<Expr>,
        field: Ident,
    },
    /// *Selector only*: `m['k']`, `l[1]`.
    Element {
        expr: Box<Expr>,
        key: Box<Expr>,
    },
    /// *Selector only*: `l[1..3]`, `s[..'x']`, `m['a'..]`.
    Slice {
        expr: Box<Expr>,
        from: Option<Box<Expr>>,
        to: Option<Box<Expr>>,
    },
}

/// A CQL type as written (`TypeExpr` is not checked: `map<counter, frozen<x>>` parses).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TypeExpr {
    Native(NativeType),
    List(Box<TypeExpr>),
    Set(Box<TypeExpr>),
    Map(Box<TypeExpr>, Box<TypeExpr>),
    Tuple(Vec<TypeExpr>),
    /// `vector<float, 3>`.
    Vector(Box<TypeExpr>, u32),
    Frozen(Box<TypeExpr>),
    /// A user-defined type, `[ks.]name`.
    User(QualifiedName),
    /// `'org.apache.cassandra.db.marshal.XType'`.
    Custom(String),
}

impl fmt::Display for TypeExpr {
    /// CQL syntax, with `", "` between parameters as `system_schema` writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypeExpr::Native(n) => f.write_str(n.as_str()),
            TypeExpr::List(t) => write!(f, "list<{t}>"),
            TypeExpr::Set(t) => write!(f, "set<{t}>"),
            TypeExpr::Map(k, v) => write!(f, "map<{k}, {v}>"),
            TypeExpr::Tuple(ts) => {
                f.write_str("tuple<")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str(">")
            }
            TypeExpr::Vector(t, n) => write!(f, "vector<{t}, {n}>"),
            TypeExpr::Frozen(t) => write!(f, "frozen<{t}>"),
            TypeExpr::User(q) => write!(f, "{q}"),
            TypeExpr::Custom(c) => write!(f, "'{}'", c.replace('\'', "''")),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NativeType {
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
    /// Kept distinct from `Text` so a statement can be echoed as written.
    Varchar,
    Varint,
}

impl NativeType {
    pub fn as_str(self) -> &'static str {
        match self {
            NativeType::Ascii => "ascii",
            NativeType::Bigint => "bigint",
            NativeType::Blob => "blob",
            NativeType::Boolean => "boolean",
            NativeType::Counter => "counter",
            NativeType::Date => "date",
            NativeType::Decimal => "decimal",
            NativeType::Double => "double",
            NativeType::Duration => "duration",
            NativeType::Float => "float",
            NativeType::Inet => "inet",
            NativeType::Int => "int",
            NativeType::Smallint => "smallint",
            NativeType::Text => "text",
            NativeType::Time => "time",
            NativeType::Timestamp => "timestamp",
            NativeType::Timeuuid => "timeuuid",
            NativeType::Tinyint => "tinyint",
            NativeType::Uuid => "uuid",
            NativeType::Varchar => "varchar",
            NativeType::Varint => "varint",
        }
    }
}

// ---------------------------------------------------------------------------------------
// WHERE clauses and conditions

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    Eq,
    Lt,
    Lte,
    Gt,
    Gte,
    Neq,
    In,
    NotIn,
    Contains,
    NotContains,
    ContainsKey,
    NotContainsKey,
    Like,
    IsNotNull,
    Between,
    /// `ORDER BY`-free custom index query `expr(index, term)`.
    CustomIndex,
}

impl Operator {
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Eq => "=",
            Operator::Lt => "<",
            Operator::Lte => "<=",
            Operator::Gt => ">",
            Operator::Gte => ">=",
            Operator::Neq => "!=",
            Operator::In => "IN",
            Operator::NotIn => "NOT IN",
            Operator::Contains => "CONTAINS",
            Operator::NotContains => "NOT CONTAINS",
            Operator::ContainsKey => "CONTAINS KEY",
            Operator::NotContainsKey => "NOT CONTAINS KEY",
            Operator::Like => "LIKE",
            Operator::IsNotNull => "IS NOT",
            Operator::Between => "BETWEEN",
            Operator::CustomIndex => "expr",
        }
    }
}

/// Left-hand side of a WHERE relation.
#[derive(Clone, Debug, PartialEq)]
pub enum RelationTarget {
    /// `col op …`
    Column(Ident),
    /// `m[key] op …`
    Element { column: Ident, key: Box<Expr> },
    /// `token(a, b) op …`
    Token(Vec<Ident>),
    /// `(a, b) op …` — a multi-column (clustering tuple) relation.
    Tuple(Vec<Ident>),
    /// `expr(index_name, …)` — a custom index expression (op is `CustomIndex`).
    CustomIndex(QualifiedName),
}

/// Right-hand side of a WHERE relation or an IF condition.
#[derive(Clone, Debug, PartialEq)]
pub enum RelationValue {
    /// A single term; for `IN ?` / `IN :x` this is the bind marker of the whole list.
    Single(Expr),
    /// `IN (a, b, …)` — for a tuple target each element is an `Expr::Tuple` or a marker.
    List(Vec<Expr>),
    /// `BETWEEN a AND b`.
    Between(Box<Expr>, Box<Expr>),
    /// `IS NOT NULL`.
    Null,
}

/// One `AND`-separated item of a WHERE clause.
#[derive(Clone, Debug, PartialEq)]
pub struct Relation {
    pub target: RelationTarget,
    pub op: Operator,
    pub value: RelationValue,
}

/// Left-hand side of an IF condition.
#[derive(Clone, Debug, PartialEq)]
pub enum ConditionTarget {
    Column(Ident),
    Element { column: Ident, key: Expr },
    Field { column: Ident, field: Ident },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub target: ConditionTarget,
    pub op: Operator,
    pub value: RelationValue,
}

/// The IF part of an UPDATE or DELETE.
#[derive(Clone, Debug, PartialEq)]
pub enum Conditions {
    /// `IF EXISTS`
    Exists,
    /// `IF c = v AND …`
    Columns(Vec<Condition>),
}

// ---------------------------------------------------------------------------------------
// DML

/// `USING TTL n AND TIMESTAMP n AND TIMEOUT d`; each value is an integer / duration
/// literal or a bind marker.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Using {
    pub ttl: Option<Expr>,
    pub timestamp: Option<Expr>,
    /// ScyllaDB's `USING TIMEOUT 2000ms`.
    pub timeout: Option<Expr>,
}

impl Using {
    pub fn is_empty(&self) -> bool {
        self.ttl.is_none() && self.timestamp.is_none() && self.timeout.is_none()
    }
}

/// One item of the SELECT clause.
#[derive(Clone, Debug, PartialEq)]
pub struct Selector {
    pub expr: Expr,
    pub alias: Option<Ident>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Selection {
    /// `*`
    Wildcard,
    List(Vec<Selector>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    Asc,
    Desc,
}

/// `ORDER BY column [ANN OF term] [ASC|DESC]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Ordering {
    pub column: Ident,
    /// `ANN OF [..]` — vector search.
    pub ann_of: Option<Expr>,
    pub order: Order,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SelectStatement {
    pub json: bool,
    pub distinct: bool,
    pub selection: Selection,
    pub table: QualifiedName,
    pub where_clause: Vec<Relation>,
    pub group_by: Vec<Expr>,
    pub order_by: Vec<Ordering>,
    /// Integer literal or bind marker.
    pub per_partition_limit: Option<Expr>,
    /// Integer literal or bind marker.
    pub limit: Option<Expr>,
    pub allow_filtering: bool,
    /// ScyllaDB's `BYPASS CACHE`.
    pub bypass_cache: bool,
    /// ScyllaDB's `USING TIMEOUT d` (duration literal or bind marker).
    pub timeout: Option<Expr>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum InsertValues {
    /// `(cols) VALUES (terms)`
    Values {
        columns: Vec<Ident>,
        values: Vec<Expr>,
    },
    /// `JSON '…' [DEFAULT UNSET|NULL]`; `value` is a string literal or a bind marker.
    Json { value: Expr, default_unset: bool },
}

#[derive(Clone, Debug, PartialEq)]
pub struct InsertStatement {
    pub table: QualifiedName,
    pub values: InsertValues,
    pub if_not_exists: bool,
    pub using: Using,
}

/// What an UPDATE assignment does to its column.
#[derive(Clone, Debug, PartialEq)]
pub enum AssignmentOp {
    /// `c = term`
    Set(Expr),
    /// `c = c + term`, `c += term` (counter increment, collection append / union).
    Add(Expr),
    /// `c = c - term`, `c -= term`.
    Subtract(Expr),
    /// `c = term + c` (list prepend).
    Prepend(Expr),
    /// `c[key] = term` (the key boxed, and the field name below: they keep an
    /// assignment at 128 bytes, so a typical SET list stays within the allocator's
    /// small-size caches).
    SetElement { key: Box<Expr>, value: Expr },
    /// `c.field = term`
    SetField { field: Box<Ident>, value: Expr },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub column: Ident,
    pub op: AssignmentOp,
}

#[derive(Clone, Debug, PartialEq)]
pub struct UpdateStatement {
    pub table: QualifiedName,
    pub using: Using,
    pub assignments: Vec<Assignment>,
    pub where_clause: Vec<Relation>,
    pub conditions: Option<Conditions>,
}

/// One item of `DELETE a, m[k], u.f FROM …`.
#[derive(Clone, Debug, PartialEq)]
pub enum Deletion {
    Column(Ident),
    Element { column: Ident, key: Expr },
    Field { column: Ident, field: Ident },
}

#[derive(Clone, Debug, PartialEq)]
pub struct DeleteStatement {
    /// Empty for a whole-row / range delete.
    pub columns: Vec<Deletion>,
    pub table: QualifiedName,
    pub using: Using,
    pub where_clause: Vec<Relation>,
    pub conditions: Option<Conditions>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BatchKind {
    Logged,
    Unlogged,
    Counter,
}

#[derive(Clone, Debug, PartialEq)]
pub enum BatchChild {
    Insert(InsertStatement),
    Update(UpdateStatement),
    Delete(DeleteStatement),
}

#[derive(Clone, Debug, PartialEq)]
pub struct BatchStatement {
    pub kind: BatchKind,
    pub using: Using,
    pub statements: Vec<BatchChild>,
}

// ---------------------------------------------------------------------------------------
// DDL

/// A property value in `WITH name = value AND …`.
#[derive(Clone, Debug, PartialEq)]
pub enum PropertyValue {
    Constant(Literal),
    /// An unreserved keyword used as a value (`caching = ALL` style).
    Keyword(String),
    /// `{k: v, …}`; keys and values are constants (Cassandra's `convertPropertyMap`).
    Map(Vec<(Literal, Literal)>),
}

impl PropertyValue {
    /// The value as text (`getRawText`); `None` for a map.
    pub fn as_text(&self) -> Option<String> {
        match self {
            PropertyValue::Constant(l) => Some(l.raw_text()),
            PropertyValue::Keyword(k) => Some(k.clone()),
            PropertyValue::Map(_) => None,
        }
    }

    /// The map as (key, value) texts; `None` unless this is a map.
    pub fn as_map(&self) -> Option<Vec<(String, String)>> {
        match self {
            PropertyValue::Map(m) => Some(
                m.iter()
                    .map(|(k, v)| (k.raw_text(), v.raw_text()))
                    .collect(),
            ),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Property {
    /// Lower-cased unless quoted.
    pub name: String,
    pub value: PropertyValue,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CreateKeyspace {
    pub name: Ident,
    pub if_not_exists: bool,
    pub properties: Vec<Property>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AlterKeyspace {
    pub name: Ident,
    pub if_exists: bool,
    pub properties: Vec<Property>,
}

/// `MASKED WITH fn(args)` / `MASKED WITH DEFAULT` (dynamic data masking).
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnMask {
    /// `None` for `MASKED WITH DEFAULT`.
    pub function: Option<QualifiedName>,
    pub args: Vec<Expr>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ColumnDef {
    pub name: Ident,
    pub ty: TypeExpr,
    pub is_static: bool,
    /// Inline `PRIMARY KEY` on this column.
    pub primary_key: bool,
    pub mask: Option<ColumnMask>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PrimaryKey {
    pub partition_key: Vec<Ident>,
    pub clustering_columns: Vec<Ident>,
}

/// `WITH …` of CREATE TABLE / CREATE MATERIALIZED VIEW.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableOptions {
    pub properties: Vec<Property>,
    /// `CLUSTERING ORDER BY (c DESC, d ASC)`.
    pub clustering_order: Vec<(Ident, Order)>,
    pub compact_storage: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CreateTable {
    pub name: QualifiedName,
    pub if_not_exists: bool,
    pub columns: Vec<ColumnDef>,
    /// The `PRIMARY KEY (…)` clause. An inline `col type PRIMARY KEY` is reported here
    /// too, as a one-column partition key; several definitions are rejected.
    pub primary_key: PrimaryKey,
    pub options: TableOptions,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AlterTableAction {
    /// `ALTER c TYPE t`
    AlterColumnType { column: Ident, ty: TypeExpr },
    /// `ALTER [IF EXISTS] c MASKED WITH … | DROP MASKED`
    AlterColumnMask {
        if_exists: bool,
        column: Ident,
        mask: Option<ColumnMask>,
    },
    /// `ADD [IF NOT EXISTS] c type [STATIC] | (c type, …)`
    Add {
        if_not_exists: bool,
        columns: Vec<ColumnDef>,
    },
    /// `DROP [IF EXISTS] c | (c, …) [USING TIMESTAMP n]`
    Drop {
        if_exists: bool,
        columns: Vec<Ident>,
        timestamp: Option<String>,
    },
    /// `RENAME [IF EXISTS] a TO b AND c TO d`
    Rename {
        if_exists: bool,
        renames: Vec<(Ident, Ident)>,
    },
    /// `DROP COMPACT STORAGE`
    DropCompactStorage,
    /// `WITH prop = v AND …`
    With(Vec<Property>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct AlterTable {
    pub name: QualifiedName,
    pub if_exists: bool,
    pub action: AlterTableAction,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CreateType {
    pub name: QualifiedName,
    pub if_not_exists: bool,
    pub fields: Vec<(Ident, TypeExpr)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AlterTypeAction {
    AlterField {
        field: Ident,
        ty: TypeExpr,
    },
    Add {
        if_not_exists: bool,
        field: Ident,
        ty: TypeExpr,
    },
    Rename {
        if_exists: bool,
        renames: Vec<(Ident, Ident)>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct AlterType {
    pub name: QualifiedName,
    pub if_exists: bool,
    pub action: AlterTypeAction,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexTargetKind {
    /// `(c)`
    Simple,
    /// `keys(m)`
    Keys,
    /// `values(c)`
    Values,
    /// `entries(m)`
    Entries,
    /// `full(frozen_c)`
    Full,
}

#[derive(Clone, Debug, PartialEq)]
pub struct IndexTarget {
    pub column: Ident,
    pub kind: IndexTargetKind,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CreateIndex {
    pub custom: bool,
    pub if_not_exists: bool,
    pub name: Option<Ident>,
    pub table: QualifiedName,
    pub targets: Vec<IndexTarget>,
    /// `USING 'class'`
    pub using: Option<String>,
    /// `WITH OPTIONS = {…}` and friends.
    pub properties: Vec<Property>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CreateMaterializedView {
    pub name: QualifiedName,
    pub if_not_exists: bool,
    pub selection: Selection,
    pub base_table: QualifiedName,
    pub where_clause: Vec<Relation>,
    /// The WHERE clause as written (without `WHERE`), for `system_schema.views`.
    pub where_clause_text: String,
    pub primary_key: PrimaryKey,
    pub options: TableOptions,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CreateFunction {
    pub name: QualifiedName,
    pub or_replace: bool,
    pub if_not_exists: bool,
    pub args: Vec<(Ident, TypeExpr)>,
    pub called_on_null_input: bool,
    pub return_type: TypeExpr,
    /// Lower-cased.
    pub language: String,
    /// The body, unescaped (`'…'` or `$$…$$`).
    pub body: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CreateAggregate {
    pub name: QualifiedName,
    pub or_replace: bool,
    pub if_not_exists: bool,
    pub arg_types: Vec<TypeExpr>,
    pub state_function: Ident,
    pub state_type: TypeExpr,
    pub final_function: Option<Ident>,
    pub initial_condition: Option<Expr>,
}

/// `DROP FUNCTION|AGGREGATE [IF EXISTS] f [(types)]`.
#[derive(Clone, Debug, PartialEq)]
pub struct DropFunction {
    pub name: QualifiedName,
    pub if_exists: bool,
    /// `None` when no argument list was given.
    pub arg_types: Option<Vec<TypeExpr>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CreateTrigger {
    pub name: Ident,
    pub if_not_exists: bool,
    pub table: QualifiedName,
    pub class: String,
}

/// `DROP KEYSPACE|TABLE|TYPE|INDEX|MATERIALIZED VIEW [IF EXISTS] name`.
#[derive(Clone, Debug, PartialEq)]
pub struct Drop {
    pub name: QualifiedName,
    pub if_exists: bool,
}

// ---------------------------------------------------------------------------------------
// Roles and permissions

#[derive(Clone, Debug, PartialEq)]
pub enum RoleOption {
    Password(String),
    HashedPassword(String),
    GeneratedPassword,
    Superuser(bool),
    Login(bool),
    Options(Vec<(Literal, Literal)>),
    /// `ACCESS TO ALL DATACENTERS` (`None`) or `ACCESS TO DATACENTERS {'dc1', …}`.
    AccessToDatacenters(Option<Vec<String>>),
    /// `ACCESS FROM ALL CIDRS` (`None`) or `ACCESS FROM CIDRS {'…', …}`.
    AccessFromCidrs(Option<Vec<String>>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct CreateRole {
    pub name: Ident,
    pub if_not_exists: bool,
    pub options: Vec<RoleOption>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AlterRole {
    pub name: Ident,
    pub if_exists: bool,
    pub options: Vec<RoleOption>,
}

/// Legacy `CREATE|ALTER USER name [WITH PASSWORD 'p'] [SUPERUSER|NOSUPERUSER]`.
#[derive(Clone, Debug, PartialEq)]
pub struct UserStatement {
    pub name: Ident,
    /// `IF NOT EXISTS` for CREATE, `IF EXISTS` for ALTER.
    pub if_clause: bool,
    pub options: Vec<RoleOption>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Permission {
    Create,
    Alter,
    Drop,
    Select,
    Modify,
    Authorize,
    Describe,
    Execute,
    Unmask,
    SelectMasked,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Resource {
    AllKeyspaces,
    Keyspace(Ident),
    Table(QualifiedName),
    AllTablesInKeyspace(Ident),
    AllRoles,
    Role(Ident),
    AllFunctions,
    AllFunctionsInKeyspace(Ident),
    Function {
        name: QualifiedName,
        arg_types: Vec<TypeExpr>,
    },
    AllMbeans,
    Mbean(String),
    Mbeans(String),
}

/// `GRANT|REVOKE perms ON resource TO|FROM role`; `permissions` is `None` for `ALL`.
#[derive(Clone, Debug, PartialEq)]
pub struct PermissionsStatement {
    pub permissions: Option<Vec<Permission>>,
    pub resource: Resource,
    pub role: Ident,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ListPermissions {
    pub permissions: Option<Vec<Permission>>,
    pub resource: Option<Resource>,
    pub of: Option<Ident>,
    pub recursive: bool,
}

// ---------------------------------------------------------------------------------------
// DESCRIBE

#[derive(Clone, Debug, PartialEq)]
pub enum DescribeTarget {
    Cluster,
    Schema {
        full: bool,
    },
    Keyspaces,
    Keyspace {
        only: bool,
        name: Option<Ident>,
    },
    Tables,
    Table(QualifiedName),
    Index(QualifiedName),
    MaterializedView(QualifiedName),
    Types,
    Type(QualifiedName),
    Functions,
    Function(QualifiedName),
    Aggregates,
    Aggregate(QualifiedName),
    /// `DESCRIBE name` / `DESCRIBE ks.name`: keyspace, then table, index, view.
    Generic(QualifiedName),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Describe {
    pub target: DescribeTarget,
    pub with_internals: bool,
}

// ---------------------------------------------------------------------------------------

/// One CQL statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Statement {
    Select(Box<SelectStatement>),
    Insert(Box<InsertStatement>),
    Update(Box<UpdateStatement>),
    Delete(Box<DeleteStatement>),
    Batch(Box<BatchStatement>),
    Use(Ident),
    Truncate(QualifiedName),

    CreateKeyspace(CreateKeyspace),
    AlterKeyspace(AlterKeyspace),
    DropKeyspace(Drop),
    CreateTable(Box<CreateTable>),
    AlterTable(Box<AlterTable>),
    DropTable(Drop),
    CreateType(CreateType),
    AlterType(AlterType),
    DropType(Drop),
    CreateIndex(Box<CreateIndex>),
    DropIndex(Drop),
    CreateMaterializedView(Box<CreateMaterializedView>),
    AlterMaterializedView {
        name: QualifiedName,
        if_exists: bool,
        properties: Vec<Property>,
    },
    DropMaterializedView(Drop),
    CreateFunction(Box<CreateFunction>),
    DropFunction(DropFunction),
    CreateAggregate(Box<CreateAggregate>),
    DropAggregate(DropFunction),
    CreateTrigger(CreateTrigger),
    DropTrigger {
        name: Ident,
        if_exists: bool,
        table: QualifiedName,
    },

    CreateRole(CreateRole),
    AlterRole(AlterRole),
    DropRole {
        name: Ident,
        if_exists: bool,
    },
    CreateUser(UserStatement),
    AlterUser(UserStatement),
    DropUser {
        name: Ident,
        if_exists: bool,
    },
    GrantPermissions(PermissionsStatement),
    RevokePermissions(PermissionsStatement),
    GrantRole {
        role: Ident,
        grantee: Ident,
    },
    RevokeRole {
        role: Ident,
        revokee: Ident,
    },
    ListPermissions(ListPermissions),
    ListRoles {
        of: Option<Ident>,
        recursive: bool,
    },
    ListUsers,
    ListSuperUsers,
    AddIdentity {
        identity: String,
        role: String,
        if_not_exists: bool,
    },
    DropIdentity {
        identity: String,
        if_exists: bool,
    },

    Describe(Describe),
}

impl Statement {
    /// Short statement kind for logs and metrics ("SELECT", "CREATE TABLE" …).
    pub fn kind(&self) -> &'static str {
        match self {
            Statement::Select(_) => "SELECT",
            Statement::Insert(_) => "INSERT",
            Statement::Update(_) => "UPDATE",
            Statement::Delete(_) => "DELETE",
            Statement::Batch(_) => "BATCH",
            Statement::Use(_) => "USE",
            Statement::Truncate(_) => "TRUNCATE",
            Statement::CreateKeyspace(_) => "CREATE KEYSPACE",
            Statement::AlterKeyspace(_) => "ALTER KEYSPACE",
            Statement::DropKeyspace(_) => "DROP KEYSPACE",
            Statement::CreateTable(_) => "CREATE TABLE",
            Statement::AlterTable(_) => "ALTER TABLE",
            Statement::DropTable(_) => "DROP TABLE",
            Statement::CreateType(_) => "CREATE TYPE",
            Statement::AlterType(_) => "ALTER TYPE",
            Statement::DropType(_) => "DROP TYPE",
            Statement::CreateIndex(_) => "CREATE INDEX",
            Statement::DropIndex(_) => "DROP INDEX",
            Statement::CreateMaterializedView(_) => "CREATE MATERIALIZED VIEW",
            Statement::AlterMaterializedView { .. } => "ALTER MATERIALIZED VIEW",
            Statement::DropMaterializedView(_) => "DROP MATERIALIZED VIEW",
            Statement::CreateFunction(_) => "CREATE FUNCTION",
            Statement::DropFunction(_) => "DROP FUNCTION",
            Statement::CreateAggregate(_) => "CREATE AGGREGATE",
            Statement::DropAggregate(_) => "DROP AGGREGATE",
            Statement::CreateTrigger(_) => "CREATE TRIGGER",
            Statement::DropTrigger { .. } => "DROP TRIGGER",
            Statement::CreateRole(_) => "CREATE ROLE",
            Statement::AlterRole(_) => "ALTER ROLE",
            Statement::DropRole { .. } => "DROP ROLE",
            Statement::CreateUser(_) => "CREATE USER",
            Statement::AlterUser(_) => "ALTER USER",
            Statement::DropUser { .. } => "DROP USER",
            Statement::GrantPermissions(_) => "GRANT",
            Statement::RevokePermissions(_) => "REVOKE",
            Statement::GrantRole { .. } => "GRANT ROLE",
            Statement::RevokeRole { .. } => "REVOKE ROLE",
            Statement::ListPermissions(_) => "LIST PERMISSIONS",
            Statement::ListRoles { .. } => "LIST ROLES",
            Statement::ListUsers => "LIST USERS",
            Statement::ListSuperUsers => "LIST SUPERUSERS",
            Statement::AddIdentity { .. } => "ADD IDENTITY",
            Statement::DropIdentity { .. } => "DROP IDENTITY",
            Statement::Describe(_) => "DESCRIBE",
        }
    }
}

/// A statement together with its bind markers, in source order (`markers[i].index == i`).
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedStatement {
    pub statement: Statement,
    pub bind_markers: Vec<BindMarker>,
}
