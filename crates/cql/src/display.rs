//! CQL text for expressions and WHERE relations.
//!
//! The output parses back to the same tree (property-tested), so it can serve for result
//! column names, error messages and re-serialising view WHERE clauses.

use std::fmt::{self, Display, Formatter, Write};

use crate::ast::*;

/// Whether `name` must be double-quoted to be read back as this identifier: anything but
/// `[a-z][a-z0-9_]*` that is not a reserved keyword (Cassandra's `maybeQuote`).
pub fn needs_quoting(name: &str) -> bool {
    let plain = name.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !crate::keyword::is_reserved_word(name);
    !plain
}

/// `name`, double-quoted if needed (Cassandra's `ColumnIdentifier.maybeQuote`).
pub fn maybe_quote(name: &str) -> String {
    if needs_quoting(name) {
        format!("\"{}\"", name.replace('"', "\"\""))
    } else {
        name.to_string()
    }
}

/// A function name: unquoted names were accepted unquoted (even `token`, `count`), so they
/// are printed as they are.
struct FnName<'a>(&'a QualifiedName);

impl Display for FnName<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if let Some(ks) = &self.0.keyspace {
            write!(f, "{ks}.")?;
        }
        let n = &self.0.name;
        if n.quoted {
            write!(f, "{n}")
        } else {
            f.write_str(&n.name)
        }
    }
}

fn list<T: Display>(f: &mut Formatter<'_>, items: &[T]) -> fmt::Result {
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{x}")?;
    }
    Ok(())
}

fn precedence(op: BinaryOp) -> u8 {
    match op {
        BinaryOp::Add | BinaryOp::Sub => 1,
        BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => 2,
    }
}

/// Writes `e`, parenthesised if it binds looser than `min` requires.
fn operand(f: &mut Formatter<'_>, e: &Expr, min: u8) -> fmt::Result {
    match e {
        Expr::Binary { op, .. } if precedence(*op) < min => write!(f, "({e})"),
        _ => write!(f, "{e}"),
    }
}

impl Display for BindMarker {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(n) => write!(f, ":{n}"),
            None => f.write_char('?'),
        }
    }
}

impl Display for Expr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Literal(l) => write!(f, "{l}"),
            Expr::Null => f.write_str("null"),
            Expr::Bind(m) => write!(f, "{m}"),
            Expr::List(items) => {
                f.write_char('[')?;
                list(f, items)?;
                f.write_char(']')
            }
            Expr::Set(items) => {
                f.write_char('{')?;
                list(f, items)?;
                f.write_char('}')
            }
            Expr::Map(entries) => {
                f.write_char('{')?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_char('}')
            }
            Expr::Udt(fields) => {
                f.write_char('{')?;
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_char('}')
            }
            Expr::Tuple(items) => {
                f.write_char('(')?;
                list(f, items)?;
                f.write_char(')')
            }
            Expr::Function { name, args } => {
                write!(f, "{}(", FnName(name))?;
                list(f, args)?;
                f.write_char(')')
            }
            Expr::TypeHint { ty, expr } => write!(f, "({ty}) {expr}"),
            Expr::Cast { expr, ty } => write!(f, "CAST({expr} AS {ty})"),
            Expr::Binary { op, left, right } => {
                let p = precedence(*op);
                operand(f, left, p)?;
                write!(f, " {} ", op.as_str())?;
                operand(f, right, p + 1)
            }
            // The space keeps `- -1` from lexing as a `--` comment.
            Expr::Negate(e) => match **e {
                Expr::Binary { .. } => write!(f, "-({e})"),
                _ => write!(f, "- {e}"),
            },
            Expr::Column(c) => write!(f, "{c}"),
            Expr::CountRows => f.write_str("count(*)"),
            Expr::CellMetadata { kind, column } => {
                let name = match kind {
                    CellMetadata::WriteTime => "writetime",
                    CellMetadata::MaxWriteTime => "maxwritetime",
                    CellMetadata::Ttl => "ttl",
                };
                write!(f, "{name}({column})")
            }
            Expr::Field { expr, field } => write!(f, "{expr}.{field}"),
            Expr::Element { expr, key } => write!(f, "{expr}[{key}]"),
            Expr::Slice { expr, from, to } => {
                write!(f, "{expr}[")?;
                if let Some(a) = from {
                    write!(f, "{a}")?;
                }
                f.write_str("..")?;
                if let Some(b) = to {
                    write!(f, "{b}")?;
                }
                f.write_char(']')
            }
        }
    }
}

impl Display for Selector {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.expr)?;
        if let Some(a) = &self.alias {
            write!(f, " AS {a}")?;
        }
        Ok(())
    }
}

impl Display for Operator {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn value(f: &mut Formatter<'_>, op: Operator, v: &RelationValue) -> fmt::Result {
    match v {
        RelationValue::Single(e) => write!(f, " {op} {e}"),
        RelationValue::List(items) => {
            write!(f, " {op} (")?;
            list(f, items)?;
            f.write_char(')')
        }
        RelationValue::Between(a, b) => write!(f, " BETWEEN {a} AND {b}"),
        RelationValue::Null => f.write_str(" IS NOT NULL"),
    }
}

impl Display for Relation {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.target {
            RelationTarget::Column(c) => write!(f, "{c}")?,
            RelationTarget::Element { column, key } => write!(f, "{column}[{key}]")?,
            RelationTarget::Token(cols) => {
                f.write_str("token(")?;
                list(f, cols)?;
                f.write_char(')')?;
            }
            RelationTarget::Tuple(cols) => {
                f.write_char('(')?;
                list(f, cols)?;
                f.write_char(')')?;
            }
            RelationTarget::CustomIndex(index) => {
                return match &self.value {
                    RelationValue::Single(e) => write!(f, "expr({index}, {e})"),
                    _ => write!(f, "expr({index})"),
                };
            }
        }
        value(f, self.op, &self.value)
    }
}

impl Display for Condition {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.target {
            ConditionTarget::Column(c) => write!(f, "{c}")?,
            ConditionTarget::Element { column, key } => write!(f, "{column}[{key}]")?,
            ConditionTarget::Field { column, field } => write!(f, "{column}.{field}")?,
        }
        value(f, self.op, &self.value)
    }
}

impl Display for Ordering {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.column)?;
        if let Some(t) = &self.ann_of {
            write!(f, " ANN OF {t}")?;
        }
        f.write_str(match self.order {
            Order::Asc => " ASC",
            Order::Desc => " DESC",
        })
    }
}

/// Joins relations with ` AND ` (a WHERE clause body).
pub fn where_clause_to_string(relations: &[Relation]) -> String {
    let mut s = String::new();
    for (i, r) in relations.iter().enumerate() {
        if i > 0 {
            s.push_str(" AND ");
        }
        let _ = write!(s, "{r}");
    }
    s
}

// ---- statements ---------------------------------------------------------------------

fn if_not_exists(f: &mut Formatter<'_>, yes: bool) -> fmt::Result {
    if yes {
        f.write_str("IF NOT EXISTS ")
    } else {
        Ok(())
    }
}

fn if_exists(f: &mut Formatter<'_>, yes: bool) -> fmt::Result {
    if yes {
        f.write_str("IF EXISTS ")
    } else {
        Ok(())
    }
}

fn where_clause(f: &mut Formatter<'_>, w: &[Relation]) -> fmt::Result {
    if w.is_empty() {
        return Ok(());
    }
    f.write_str(" WHERE ")?;
    for (i, r) in w.iter().enumerate() {
        if i > 0 {
            f.write_str(" AND ")?;
        }
        write!(f, "{r}")?;
    }
    Ok(())
}

fn conditions(f: &mut Formatter<'_>, c: &Option<Conditions>) -> fmt::Result {
    match c {
        None => Ok(()),
        Some(Conditions::Exists) => f.write_str(" IF EXISTS"),
        Some(Conditions::Columns(cs)) => {
            f.write_str(" IF ")?;
            for (i, c) in cs.iter().enumerate() {
                if i > 0 {
                    f.write_str(" AND ")?;
                }
                write!(f, "{c}")?;
            }
            Ok(())
        }
    }
}

impl Display for Using {
    /// ` USING TTL x AND TIMESTAMP y AND TIMEOUT z`, or nothing.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut sep = " USING ";
        for (name, v) in [
            ("TTL", &self.ttl),
            ("TIMESTAMP", &self.timestamp),
            ("TIMEOUT", &self.timeout),
        ] {
            if let Some(v) = v {
                write!(f, "{sep}{name} {v}")?;
                sep = " AND ";
            }
        }
        Ok(())
    }
}

impl Display for Selection {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Selection::Wildcard => f.write_char('*'),
            Selection::List(l) => list(f, l),
        }
    }
}

impl Display for SelectStatement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("SELECT ")?;
        if self.json {
            f.write_str("JSON ")?;
        }
        if self.distinct {
            f.write_str("DISTINCT ")?;
        }
        write!(f, "{} FROM {}", self.selection, self.table)?;
        where_clause(f, &self.where_clause)?;
        if !self.group_by.is_empty() {
            f.write_str(" GROUP BY ")?;
            list(f, &self.group_by)?;
        }
        if !self.order_by.is_empty() {
            f.write_str(" ORDER BY ")?;
            list(f, &self.order_by)?;
        }
        if let Some(n) = &self.per_partition_limit {
            write!(f, " PER PARTITION LIMIT {n}")?;
        }
        if let Some(n) = &self.limit {
            write!(f, " LIMIT {n}")?;
        }
        if self.allow_filtering {
            f.write_str(" ALLOW FILTERING")?;
        }
        if self.bypass_cache {
            f.write_str(" BYPASS CACHE")?;
        }
        if let Some(t) = &self.timeout {
            write!(f, " USING TIMEOUT {t}")?;
        }
        Ok(())
    }
}

impl Display for InsertStatement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "INSERT INTO {} ", self.table)?;
        match &self.values {
            InsertValues::Values { columns, values } => {
                f.write_char('(')?;
                list(f, columns)?;
                f.write_str(") VALUES (")?;
                list(f, values)?;
                f.write_char(')')?;
            }
            InsertValues::Json {
                value,
                default_unset,
            } => {
                write!(f, "JSON {value}")?;
                if *default_unset {
                    f.write_str(" DEFAULT UNSET")?;
                }
            }
        }
        if self.if_not_exists {
            f.write_str(" IF NOT EXISTS")?;
        }
        write!(f, "{}", self.using)
    }
}

impl Display for Assignment {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let c = &self.column;
        match &self.op {
            AssignmentOp::Set(v) => write!(f, "{c} = {v}"),
            AssignmentOp::Add(v) => write!(f, "{c} = {c} + {v}"),
            AssignmentOp::Subtract(v) => write!(f, "{c} = {c} - {v}"),
            AssignmentOp::Prepend(v) => write!(f, "{c} = {v} + {c}"),
            AssignmentOp::SetElement { key, value } => write!(f, "{c}[{key}] = {value}"),
            AssignmentOp::SetField { field, value } => write!(f, "{c}.{field} = {value}"),
        }
    }
}

impl Display for UpdateStatement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "UPDATE {}{} SET ", self.table, self.using)?;
        list(f, &self.assignments)?;
        where_clause(f, &self.where_clause)?;
        conditions(f, &self.conditions)
    }
}

impl Display for Deletion {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Deletion::Column(c) => write!(f, "{c}"),
            Deletion::Element { column, key } => write!(f, "{column}[{key}]"),
            Deletion::Field { column, field } => write!(f, "{column}.{field}"),
        }
    }
}

impl Display for DeleteStatement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("DELETE ")?;
        if !self.columns.is_empty() {
            list(f, &self.columns)?;
            f.write_char(' ')?;
        }
        write!(f, "FROM {}{}", self.table, self.using)?;
        where_clause(f, &self.where_clause)?;
        conditions(f, &self.conditions)
    }
}

impl Display for BatchStatement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            BatchKind::Logged => "BEGIN BATCH",
            BatchKind::Unlogged => "BEGIN UNLOGGED BATCH",
            BatchKind::Counter => "BEGIN COUNTER BATCH",
        })?;
        write!(f, "{}", self.using)?;
        for s in &self.statements {
            match s {
                BatchChild::Insert(s) => write!(f, " {s};")?,
                BatchChild::Update(s) => write!(f, " {s};")?,
                BatchChild::Delete(s) => write!(f, " {s};")?,
            }
        }
        f.write_str(" APPLY BATCH")
    }
}

impl Display for PropertyValue {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            PropertyValue::Constant(l) => write!(f, "{l}"),
            PropertyValue::Keyword(k) => f.write_str(k),
            PropertyValue::Map(m) => {
                f.write_char('{')?;
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_char('}')
            }
        }
    }
}

impl Display for Property {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}", maybe_quote(&self.name), self.value)
    }
}

fn properties(f: &mut Formatter<'_>, props: &[Property]) -> fmt::Result {
    for (i, p) in props.iter().enumerate() {
        if i > 0 {
            f.write_str(" AND ")?;
        }
        write!(f, "{p}")?;
    }
    Ok(())
}

impl Display for ColumnMask {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.function {
            None => f.write_str("MASKED WITH DEFAULT"),
            Some(func) => {
                write!(f, "MASKED WITH {}(", FnName(func))?;
                list(f, &self.args)?;
                f.write_char(')')
            }
        }
    }
}

impl Display for ColumnDef {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.ty)?;
        if self.is_static {
            f.write_str(" STATIC")?;
        }
        if let Some(m) = &self.mask {
            write!(f, " {m}")?;
        }
        if self.primary_key {
            f.write_str(" PRIMARY KEY")?;
        }
        Ok(())
    }
}

impl Display for PrimaryKey {
    /// `PRIMARY KEY ((a, b), c)`
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("PRIMARY KEY (")?;
        if self.partition_key.len() == 1 {
            list(f, &self.partition_key)?;
        } else {
            f.write_char('(')?;
            list(f, &self.partition_key)?;
            f.write_char(')')?;
        }
        for c in &self.clustering_columns {
            write!(f, ", {c}")?;
        }
        f.write_char(')')
    }
}

impl Display for TableOptions {
    /// The part after WITH (empty when there are no options).
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut sep = |f: &mut Formatter<'_>| {
            let s = if first { "" } else { " AND " };
            first = false;
            f.write_str(s)
        };
        if !self.clustering_order.is_empty() {
            sep(f)?;
            f.write_str("CLUSTERING ORDER BY (")?;
            for (i, (c, o)) in self.clustering_order.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{c} {}", if *o == Order::Desc { "DESC" } else { "ASC" })?;
            }
            f.write_char(')')?;
        }
        if self.compact_storage {
            sep(f)?;
            f.write_str("COMPACT STORAGE")?;
        }
        for p in &self.properties {
            sep(f)?;
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl TableOptions {
    fn is_empty(&self) -> bool {
        self.properties.is_empty() && self.clustering_order.is_empty() && !self.compact_storage
    }
}

impl Display for CreateTable {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("CREATE TABLE ")?;
        if_not_exists(f, self.if_not_exists)?;
        write!(f, "{} (", self.name)?;
        list(f, &self.columns)?;
        if !self.columns.iter().any(|c| c.primary_key) {
            write!(f, ", {}", self.primary_key)?;
        }
        f.write_char(')')?;
        if !self.options.is_empty() {
            write!(f, " WITH {}", self.options)?;
        }
        Ok(())
    }
}

fn renames(f: &mut Formatter<'_>, rs: &[(Ident, Ident)]) -> fmt::Result {
    for (i, (a, b)) in rs.iter().enumerate() {
        if i > 0 {
            f.write_str(" AND ")?;
        }
        write!(f, "{a} TO {b}")?;
    }
    Ok(())
}

impl Display for AlterTable {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("ALTER TABLE ")?;
        if_exists(f, self.if_exists)?;
        write!(f, "{} ", self.name)?;
        match &self.action {
            AlterTableAction::AlterColumnType { column, ty } => {
                write!(f, "ALTER {column} TYPE {ty}")
            }
            AlterTableAction::AlterColumnMask {
                if_exists: ie,
                column,
                mask,
            } => {
                f.write_str("ALTER ")?;
                if_exists(f, *ie)?;
                match mask {
                    Some(m) => write!(f, "{column} {m}"),
                    None => write!(f, "{column} DROP MASKED"),
                }
            }
            AlterTableAction::Add {
                if_not_exists: ine,
                columns,
            } => {
                f.write_str("ADD ")?;
                if_not_exists(f, *ine)?;
                f.write_char('(')?;
                list(f, columns)?;
                f.write_char(')')
            }
            AlterTableAction::Drop {
                if_exists: ie,
                columns,
                timestamp,
            } => {
                f.write_str("DROP ")?;
                if_exists(f, *ie)?;
                f.write_char('(')?;
                list(f, columns)?;
                f.write_char(')')?;
                if let Some(ts) = timestamp {
                    write!(f, " USING TIMESTAMP {ts}")?;
                }
                Ok(())
            }
            AlterTableAction::Rename {
                if_exists: ie,
                renames: rs,
            } => {
                f.write_str("RENAME ")?;
                if_exists(f, *ie)?;
                renames(f, rs)
            }
            AlterTableAction::DropCompactStorage => f.write_str("DROP COMPACT STORAGE"),
            AlterTableAction::With(props) => {
                f.write_str("WITH ")?;
                properties(f, props)
            }
        }
    }
}

fn fields(f: &mut Formatter<'_>, fs: &[(Ident, TypeExpr)]) -> fmt::Result {
    for (i, (n, t)) in fs.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{n} {t}")?;
    }
    Ok(())
}

impl Display for IndexTarget {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let c = &self.column;
        match self.kind {
            IndexTargetKind::Simple => write!(f, "{c}"),
            IndexTargetKind::Keys => write!(f, "keys({c})"),
            IndexTargetKind::Values => write!(f, "values({c})"),
            IndexTargetKind::Entries => write!(f, "entries({c})"),
            IndexTargetKind::Full => write!(f, "full({c})"),
        }
    }
}

impl Display for Permission {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Permission::Create => "CREATE",
            Permission::Alter => "ALTER",
            Permission::Drop => "DROP",
            Permission::Select => "SELECT",
            Permission::Modify => "MODIFY",
            Permission::Authorize => "AUTHORIZE",
            Permission::Describe => "DESCRIBE",
            Permission::Execute => "EXECUTE",
            Permission::Unmask => "UNMASK",
            Permission::SelectMasked => "SELECT_MASKED",
        })
    }
}

fn permissions(f: &mut Formatter<'_>, p: &Option<Vec<Permission>>) -> fmt::Result {
    match p {
        None => f.write_str("ALL PERMISSIONS"),
        Some(ps) => list(f, ps),
    }
}

fn string(s: &str) -> Literal {
    Literal::String(s.to_string())
}

impl Display for Resource {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Resource::AllKeyspaces => f.write_str("ALL KEYSPACES"),
            Resource::Keyspace(k) => write!(f, "KEYSPACE {k}"),
            Resource::Table(t) => write!(f, "TABLE {t}"),
            Resource::AllTablesInKeyspace(k) => write!(f, "ALL TABLES IN KEYSPACE {k}"),
            Resource::AllRoles => f.write_str("ALL ROLES"),
            Resource::Role(r) => write!(f, "ROLE {}", RoleName(r)),
            Resource::AllFunctions => f.write_str("ALL FUNCTIONS"),
            Resource::AllFunctionsInKeyspace(k) => write!(f, "ALL FUNCTIONS IN KEYSPACE {k}"),
            Resource::Function { name, arg_types } => {
                write!(f, "FUNCTION {}(", FnName(name))?;
                list(f, arg_types)?;
                f.write_char(')')
            }
            Resource::AllMbeans => f.write_str("ALL MBEANS"),
            Resource::Mbean(m) => write!(f, "MBEAN {}", string(m)),
            Resource::Mbeans(m) => write!(f, "MBEANS {}", string(m)),
        }
    }
}

impl Display for RoleOption {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let set = |f: &mut Formatter<'_>, v: &Option<Vec<String>>, what: &str, all: &str| match v {
            None => f.write_str(all),
            Some(items) => {
                write!(f, "{what} {{")?;
                for (i, s) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}", string(s))?;
                }
                f.write_char('}')
            }
        };
        match self {
            RoleOption::Password(p) => write!(f, "PASSWORD = {}", string(p)),
            RoleOption::HashedPassword(p) => write!(f, "HASHED PASSWORD = {}", string(p)),
            RoleOption::GeneratedPassword => f.write_str("GENERATED PASSWORD"),
            RoleOption::Superuser(b) => write!(f, "SUPERUSER = {b}"),
            RoleOption::Login(b) => write!(f, "LOGIN = {b}"),
            RoleOption::Options(m) => write!(f, "OPTIONS = {}", PropertyValue::Map(m.clone())),
            RoleOption::AccessToDatacenters(v) => {
                set(f, v, "ACCESS TO DATACENTERS", "ACCESS TO ALL DATACENTERS")
            }
            RoleOption::AccessFromCidrs(v) => {
                set(f, v, "ACCESS FROM CIDRS", "ACCESS FROM ALL CIDRS")
            }
        }
    }
}

fn role_options(f: &mut Formatter<'_>, opts: &[RoleOption]) -> fmt::Result {
    if opts.is_empty() {
        return Ok(());
    }
    f.write_str(" WITH ")?;
    for (i, o) in opts.iter().enumerate() {
        if i > 0 {
            f.write_str(" AND ")?;
        }
        write!(f, "{o}")?;
    }
    Ok(())
}

/// Role names: an empty one can only have been written as the string literal `''`.
struct RoleName<'a>(&'a Ident);

impl Display for RoleName<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.0.name.is_empty() {
            f.write_str("''")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// Legacy user names: IDENT or a string literal.
struct UserName<'a>(&'a Ident);

impl Display for UserName<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.0.quoted || needs_quoting(&self.0.name) {
            write!(f, "{}", string(&self.0.name))
        } else {
            f.write_str(&self.0.name)
        }
    }
}

fn user(f: &mut Formatter<'_>, verb: &str, u: &UserStatement) -> fmt::Result {
    write!(f, "{verb} USER ")?;
    if u.if_clause {
        f.write_str(if verb == "CREATE" {
            "IF NOT EXISTS "
        } else {
            "IF EXISTS "
        })?;
    }
    write!(f, "{}", UserName(&u.name))?;
    for o in &u.options {
        match o {
            RoleOption::Password(p) => write!(f, " WITH PASSWORD {}", string(p))?,
            RoleOption::HashedPassword(p) => write!(f, " WITH HASHED PASSWORD {}", string(p))?,
            RoleOption::GeneratedPassword => f.write_str(" WITH GENERATED PASSWORD")?,
            RoleOption::Superuser(true) => f.write_str(" SUPERUSER")?,
            RoleOption::Superuser(false) => f.write_str(" NOSUPERUSER")?,
            _ => {}
        }
    }
    Ok(())
}

impl Display for DescribeTarget {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            DescribeTarget::Cluster => f.write_str("CLUSTER"),
            DescribeTarget::Schema { full } => {
                f.write_str(if *full { "FULL SCHEMA" } else { "SCHEMA" })
            }
            DescribeTarget::Keyspaces => f.write_str("KEYSPACES"),
            DescribeTarget::Keyspace { only, name } => {
                if *only {
                    f.write_str("ONLY ")?;
                }
                f.write_str("KEYSPACE")?;
                if let Some(n) = name {
                    write!(f, " {n}")?;
                }
                Ok(())
            }
            DescribeTarget::Tables => f.write_str("TABLES"),
            DescribeTarget::Table(t) => write!(f, "TABLE {t}"),
            DescribeTarget::Index(i) => write!(f, "INDEX {i}"),
            DescribeTarget::MaterializedView(v) => write!(f, "MATERIALIZED VIEW {v}"),
            DescribeTarget::Types => f.write_str("TYPES"),
            DescribeTarget::Type(t) => write!(f, "TYPE {t}"),
            DescribeTarget::Functions => f.write_str("FUNCTIONS"),
            DescribeTarget::Function(n) => write!(f, "FUNCTION {}", FnName(n)),
            DescribeTarget::Aggregates => f.write_str("AGGREGATES"),
            DescribeTarget::Aggregate(n) => write!(f, "AGGREGATE {}", FnName(n)),
            DescribeTarget::Generic(n) => write!(f, "{n}"),
        }
    }
}

impl Display for Statement {
    /// The statement as CQL; parsing the output gives back an equal `Statement`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Statement::Select(s) => write!(f, "{s}"),
            Statement::Insert(s) => write!(f, "{s}"),
            Statement::Update(s) => write!(f, "{s}"),
            Statement::Delete(s) => write!(f, "{s}"),
            Statement::Batch(s) => write!(f, "{s}"),
            Statement::Use(k) => write!(f, "USE {k}"),
            Statement::Truncate(t) => write!(f, "TRUNCATE {t}"),
            Statement::CreateKeyspace(k) => {
                f.write_str("CREATE KEYSPACE ")?;
                if_not_exists(f, k.if_not_exists)?;
                write!(f, "{} WITH ", k.name)?;
                properties(f, &k.properties)
            }
            Statement::AlterKeyspace(k) => {
                f.write_str("ALTER KEYSPACE ")?;
                if_exists(f, k.if_exists)?;
                write!(f, "{} WITH ", k.name)?;
                properties(f, &k.properties)
            }
            Statement::DropKeyspace(d) => drop(f, "KEYSPACE", d),
            Statement::CreateTable(t) => write!(f, "{t}"),
            Statement::AlterTable(t) => write!(f, "{t}"),
            Statement::DropTable(d) => drop(f, "TABLE", d),
            Statement::CreateType(t) => {
                f.write_str("CREATE TYPE ")?;
                if_not_exists(f, t.if_not_exists)?;
                write!(f, "{} (", t.name)?;
                fields(f, &t.fields)?;
                f.write_char(')')
            }
            Statement::AlterType(t) => {
                f.write_str("ALTER TYPE ")?;
                if_exists(f, t.if_exists)?;
                write!(f, "{} ", t.name)?;
                match &t.action {
                    AlterTypeAction::AlterField { field, ty } => {
                        write!(f, "ALTER {field} TYPE {ty}")
                    }
                    AlterTypeAction::Add {
                        if_not_exists: ine,
                        field,
                        ty,
                    } => {
                        f.write_str("ADD ")?;
                        if_not_exists(f, *ine)?;
                        write!(f, "{field} {ty}")
                    }
                    AlterTypeAction::Rename {
                        if_exists: ie,
                        renames: rs,
                    } => {
                        f.write_str("RENAME ")?;
                        if_exists(f, *ie)?;
                        renames(f, rs)
                    }
                }
            }
            Statement::DropType(d) => drop(f, "TYPE", d),
            Statement::CreateIndex(i) => {
                f.write_str(if i.custom {
                    "CREATE CUSTOM INDEX "
                } else {
                    "CREATE INDEX "
                })?;
                if_not_exists(f, i.if_not_exists)?;
                if let Some(n) = &i.name {
                    write!(f, "{n} ")?;
                }
                write!(f, "ON {} (", i.table)?;
                list(f, &i.targets)?;
                f.write_char(')')?;
                if let Some(u) = &i.using {
                    write!(f, " USING {}", string(u))?;
                }
                if !i.properties.is_empty() {
                    f.write_str(" WITH ")?;
                    properties(f, &i.properties)?;
                }
                Ok(())
            }
            Statement::DropIndex(d) => drop(f, "INDEX", d),
            Statement::CreateMaterializedView(v) => {
                f.write_str("CREATE MATERIALIZED VIEW ")?;
                if_not_exists(f, v.if_not_exists)?;
                write!(
                    f,
                    "{} AS SELECT {} FROM {}",
                    v.name, v.selection, v.base_table
                )?;
                if !v.where_clause_text.is_empty() {
                    write!(f, " WHERE {}", v.where_clause_text)?;
                } else {
                    where_clause(f, &v.where_clause)?;
                }
                write!(f, " {}", v.primary_key)?;
                if !v.options.is_empty() {
                    write!(f, " WITH {}", v.options)?;
                }
                Ok(())
            }
            Statement::AlterMaterializedView {
                name,
                if_exists: ie,
                properties: props,
            } => {
                f.write_str("ALTER MATERIALIZED VIEW ")?;
                if_exists(f, *ie)?;
                write!(f, "{name} WITH ")?;
                properties(f, props)
            }
            Statement::DropMaterializedView(d) => drop(f, "MATERIALIZED VIEW", d),
            Statement::CreateFunction(c) => {
                f.write_str(if c.or_replace {
                    "CREATE OR REPLACE FUNCTION "
                } else {
                    "CREATE FUNCTION "
                })?;
                if_not_exists(f, c.if_not_exists)?;
                write!(f, "{}(", FnName(&c.name))?;
                fields(f, &c.args)?;
                write!(
                    f,
                    ") {} ON NULL INPUT RETURNS {} LANGUAGE {} AS {}",
                    if c.called_on_null_input {
                        "CALLED"
                    } else {
                        "RETURNS NULL"
                    },
                    c.return_type,
                    c.language,
                    string(&c.body)
                )
            }
            Statement::DropFunction(d) => drop_function(f, "FUNCTION", d),
            Statement::CreateAggregate(a) => {
                f.write_str(if a.or_replace {
                    "CREATE OR REPLACE AGGREGATE "
                } else {
                    "CREATE AGGREGATE "
                })?;
                if_not_exists(f, a.if_not_exists)?;
                write!(f, "{}(", FnName(&a.name))?;
                list(f, &a.arg_types)?;
                write!(
                    f,
                    ") SFUNC {} STYPE {}",
                    FnName(&QualifiedName::new(None, a.state_function.clone())),
                    a.state_type
                )?;
                if let Some(ff) = &a.final_function {
                    write!(
                        f,
                        " FINALFUNC {}",
                        FnName(&QualifiedName::new(None, ff.clone()))
                    )?;
                }
                if let Some(i) = &a.initial_condition {
                    write!(f, " INITCOND {i}")?;
                }
                Ok(())
            }
            Statement::DropAggregate(d) => drop_function(f, "AGGREGATE", d),
            Statement::CreateTrigger(t) => {
                f.write_str("CREATE TRIGGER ")?;
                if_not_exists(f, t.if_not_exists)?;
                write!(f, "{} ON {} USING {}", t.name, t.table, string(&t.class))
            }
            Statement::DropTrigger {
                name,
                if_exists: ie,
                table,
            } => {
                f.write_str("DROP TRIGGER ")?;
                if_exists(f, *ie)?;
                write!(f, "{name} ON {table}")
            }
            Statement::CreateRole(r) => {
                f.write_str("CREATE ROLE ")?;
                if_not_exists(f, r.if_not_exists)?;
                write!(f, "{}", RoleName(&r.name))?;
                role_options(f, &r.options)
            }
            Statement::AlterRole(r) => {
                f.write_str("ALTER ROLE ")?;
                if_exists(f, r.if_exists)?;
                write!(f, "{}", RoleName(&r.name))?;
                role_options(f, &r.options)
            }
            Statement::DropRole {
                name,
                if_exists: ie,
            } => {
                f.write_str("DROP ROLE ")?;
                if_exists(f, *ie)?;
                write!(f, "{}", RoleName(name))
            }
            Statement::CreateUser(u) => user(f, "CREATE", u),
            Statement::AlterUser(u) => user(f, "ALTER", u),
            Statement::DropUser {
                name,
                if_exists: ie,
            } => {
                f.write_str("DROP USER ")?;
                if_exists(f, *ie)?;
                write!(f, "{}", UserName(name))
            }
            Statement::GrantPermissions(p) | Statement::RevokePermissions(p) => {
                let grant = matches!(self, Statement::GrantPermissions(_));
                f.write_str(if grant { "GRANT " } else { "REVOKE " })?;
                permissions(f, &p.permissions)?;
                write!(
                    f,
                    " ON {} {} {}",
                    p.resource,
                    if grant { "TO" } else { "FROM" },
                    RoleName(&p.role)
                )
            }
            Statement::GrantRole { role, grantee } => {
                write!(f, "GRANT {} TO {}", RoleName(role), RoleName(grantee))
            }
            Statement::RevokeRole { role, revokee } => {
                write!(f, "REVOKE {} FROM {}", RoleName(role), RoleName(revokee))
            }
            Statement::ListPermissions(l) => {
                f.write_str("LIST ")?;
                permissions(f, &l.permissions)?;
                if let Some(r) = &l.resource {
                    write!(f, " ON {r}")?;
                }
                if let Some(o) = &l.of {
                    write!(f, " OF {}", RoleName(o))?;
                }
                if !l.recursive {
                    f.write_str(" NORECURSIVE")?;
                }
                Ok(())
            }
            Statement::ListRoles { of, recursive } => {
                f.write_str("LIST ROLES")?;
                if let Some(o) = of {
                    write!(f, " OF {}", RoleName(o))?;
                }
                if !recursive {
                    f.write_str(" NORECURSIVE")?;
                }
                Ok(())
            }
            Statement::ListUsers => f.write_str("LIST USERS"),
            Statement::ListSuperUsers => f.write_str("LIST SUPERUSERS"),
            Statement::AddIdentity {
                identity,
                role,
                if_not_exists: ine,
            } => {
                f.write_str("ADD IDENTITY ")?;
                if_not_exists(f, *ine)?;
                write!(f, "{} TO ROLE {}", string(identity), string(role))
            }
            Statement::DropIdentity {
                identity,
                if_exists: ie,
            } => {
                f.write_str("DROP IDENTITY ")?;
                if_exists(f, *ie)?;
                write!(f, "{}", string(identity))
            }
            Statement::Describe(d) => {
                write!(f, "DESCRIBE {}", d.target)?;
                if d.with_internals {
                    f.write_str(" WITH INTERNALS")?;
                }
                Ok(())
            }
        }
    }
}

fn drop(f: &mut Formatter<'_>, what: &str, d: &Drop) -> fmt::Result {
    write!(f, "DROP {what} ")?;
    if_exists(f, d.if_exists)?;
    write!(f, "{}", d.name)
}

fn drop_function(f: &mut Formatter<'_>, what: &str, d: &DropFunction) -> fmt::Result {
    write!(f, "DROP {what} ")?;
    if_exists(f, d.if_exists)?;
    write!(f, "{}", FnName(&d.name))?;
    if let Some(types) = &d.arg_types {
        f.write_char('(')?;
        list(f, types)?;
        f.write_char(')')?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Statement, parse_statement};

    fn reprint_where(q: &str) -> String {
        match parse_statement(q) {
            Ok(Statement::Select(s)) => super::where_clause_to_string(&s.where_clause),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn where_reprints() {
        let w = "a = 1 AND \"B\" IN (1, 2) AND c IN ? AND m['k'] = :v AND token(a, b) > -5 AND (c, d) >= (1, 'x') \
                 AND e IS NOT NULL AND f CONTAINS KEY 3 AND g LIKE 'a%' AND h BETWEEN 1 AND 2";
        assert_eq!(reprint_where(&format!("SELECT * FROM t WHERE {w}")), w);
    }

    #[test]
    fn expr_reprints() {
        let Ok(Statement::Select(s)) = parse_statement(
            "SELECT a + b * c, (a + b) * c, - (a - b), count(*), writetime(x), m['k'], l[1..], \"Q\".f, CAST(a AS text), (int) ?, ks.f(1, 'it''s') AS z FROM t",
        ) else {
            panic!()
        };
        let crate::Selection::List(l) = s.selection else {
            panic!()
        };
        let printed: Vec<String> = l.iter().map(|x| x.to_string()).collect();
        assert_eq!(
            printed,
            [
                "a + b * c",
                "(a + b) * c",
                "-(a - b)",
                "count(*)",
                "writetime(x)",
                "m['k']",
                "l[1..]",
                "\"Q\".f",
                "CAST(a AS text)",
                "(int) ?",
                "ks.f(1, 'it''s') AS z"
            ]
        );
    }
}
