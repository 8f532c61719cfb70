//! Statement analysis shared by PREPARE and execution: table resolution, bind-marker
//! receivers (bind metadata and `pk_indexes` for token-aware drivers).

use std::sync::Arc;

use amphora_cql as ast;
use amphora_types::CqlType;
use amphora_types::schema::{ColumnDef, ColumnId, ColumnKind, TableSchema};

use crate::api::{QueryError, ResultColumn};
use crate::schema::Schema;

pub fn keyspace_of(name: &ast::QualifiedName, current: Option<&str>) -> Result<String, QueryError> {
    keyspace_ref(name, current).map(str::to_string)
}

/// [`keyspace_of`] without copying the name.
pub fn keyspace_ref<'a>(
    name: &'a ast::QualifiedName,
    current: Option<&'a str>,
) -> Result<&'a str, QueryError> {
    match (&name.keyspace, current) {
        (Some(k), _) => Ok(&k.name),
        (None, Some(k)) => Ok(k),
        (None, None) => Err(QueryError::invalid(
            "No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename",
        )),
    }
}

/// A user table or a virtual system table.
pub fn resolve_table(
    schema: &Schema,
    current: Option<&str>,
    name: &ast::QualifiedName,
) -> Result<Arc<TableSchema>, QueryError> {
    let ks = keyspace_ref(name, current)?;
    if let Some(t) = schema.table(ks, &name.name.name) {
        return Ok(t.clone());
    }
    if let Some(v) = crate::system::virtual_table(ks, &name.name.name) {
        return Ok(v.schema.clone());
    }
    if schema.keyspace(ks).is_none() && !crate::schema::is_system_keyspace(ks) {
        return Err(QueryError::invalid(format!("Keyspace {ks} does not exist")));
    }
    Err(QueryError::invalid(format!(
        "unconfigured table {}",
        name.name.name
    )))
}

pub struct BindMeta {
    pub bind_columns: Vec<ResultColumn>,
    pub pk_indexes: Vec<u16>,
    pub result_columns: Vec<ResultColumn>,
    pub is_lwt: bool,
}

struct Receivers<'a> {
    table: &'a TableSchema,
    cols: Vec<Option<ResultColumn>>,
    pk_binds: Vec<Option<u16>>,
}

impl<'a> Receivers<'a> {
    fn spec(&self, name: &str, ty: CqlType) -> ResultColumn {
        ResultColumn {
            keyspace: self.table.keyspace.clone(),
            table: self.table.name.clone(),
            name: name.to_string(),
            ty,
        }
    }

    fn set(&mut self, idx: usize, col: ResultColumn) {
        if self.cols.len() <= idx {
            self.cols.resize(idx + 1, None);
        }
        self.cols[idx] = Some(col);
    }

    fn column_type(&self, name: &str) -> Result<(CqlType, ColumnKind, u16), QueryError> {
        let (_, c) = self
            .table
            .column(name)
            .ok_or_else(|| QueryError::invalid(format!("Undefined column name {name}")))?;
        Ok((c.ty.clone(), c.kind, c.position))
    }

    /// Records receivers for the binds inside `e` assigned to a value of type `ty`.
    fn expr(&mut self, e: &ast::Expr, name: &str, ty: &CqlType) {
        match e {
            ast::Expr::Bind(m) => {
                let spec = self.spec(name, ty.clone());
                self.set(m.index, spec);
            }
            ast::Expr::List(items) | ast::Expr::Set(items) => {
                let elem = match ty {
                    CqlType::List { elem, .. }
                    | CqlType::Set { elem, .. }
                    | CqlType::Vector { elem, .. } => (**elem).clone(),
                    _ => CqlType::Blob,
                };
                for i in items {
                    self.expr(i, name, &elem);
                }
            }
            ast::Expr::Map(kvs) => {
                if let CqlType::Map { key, value, .. } = ty {
                    for (k, v) in kvs {
                        self.expr(k, name, key);
                        self.expr(v, name, value);
                    }
                }
            }
            ast::Expr::Tuple(items) => {
                if let CqlType::Tuple(ts) = ty {
                    for (i, t) in items.iter().zip(ts) {
                        self.expr(i, name, t);
                    }
                }
            }
            ast::Expr::Udt(fields) => {
                if let CqlType::Udt(d) = ty {
                    for (f, v) in fields {
                        if let Some(i) = d.field_names.iter().position(|n| *n == f.name) {
                            self.expr(v, name, &d.field_types[i]);
                        }
                    }
                }
            }
            ast::Expr::TypeHint { expr, .. } => self.expr(expr, name, ty),
            ast::Expr::Function { name: f, args } => self.function_args(f, args),
            // Operands of `a + b` take the receiver's type.
            ast::Expr::Binary { left, right, .. } => {
                self.expr(left, name, ty);
                self.expr(right, name, ty);
            }
            _ => {}
        }
    }

    /// Bind markers among a function's arguments get the parameter types of the signature
    /// the call resolves to, named `arg<i>(system.<function>)` as in Cassandra.
    fn function_args(&mut self, f: &ast::QualifiedName, args: &[ast::Expr]) {
        use crate::functions::Arg;
        if !args.iter().any(|a| matches!(a, ast::Expr::Bind(_))) {
            return;
        }
        let kinds: Vec<Arg<'_>> = args
            .iter()
            .map(|a| match a {
                ast::Expr::Bind(_) => Arg::Bind,
                other => Arg::Term(other),
            })
            .collect();
        let shown: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let ctx = crate::values::EvalCtx {
            binds: &[],
            now_micros: 0,
        };
        let Ok((fname, sig)) = crate::functions::resolve(f, &kinds, &shown, &ctx) else {
            return;
        };
        for (i, (a, p)) in args.iter().zip(&sig.params).enumerate() {
            let arg_name = format!("arg{i}(system.{fname})");
            self.expr(a, &arg_name, p);
        }
    }

    fn relation(&mut self, r: &ast::Relation) -> Result<(), QueryError> {
        match &r.target {
            ast::RelationTarget::Column(c) => {
                let (ty, kind, pos) = self.column_type(&c.name)?;
                let elem_ty = match (r.op, &ty) {
                    (
                        ast::Operator::Contains,
                        CqlType::List { elem, .. } | CqlType::Set { elem, .. },
                    ) => (**elem).clone(),
                    (ast::Operator::Contains, CqlType::Map { value, .. }) => (**value).clone(),
                    (ast::Operator::ContainsKey, CqlType::Map { key, .. }) => (**key).clone(),
                    _ => ty.clone(),
                };
                match (&r.value, r.op) {
                    (ast::RelationValue::Single(ast::Expr::Bind(m)), ast::Operator::In) => {
                        let spec = self.spec(
                            &format!("in({})", c.name),
                            CqlType::List {
                                elem: Box::new(ty),
                                frozen: true,
                            },
                        );
                        self.set(m.index, spec);
                    }
                    (ast::RelationValue::Single(e), op) => {
                        if let (ast::Expr::Bind(m), ast::Operator::Eq, ColumnKind::PartitionKey) =
                            (e, op, kind)
                            && let Some(slot) = self.pk_binds.get_mut(pos as usize)
                        {
                            *slot = Some(m.index as u16);
                        }
                        self.expr(e, &c.name, &elem_ty);
                    }
                    (ast::RelationValue::List(items), _) => {
                        for i in items {
                            self.expr(i, &c.name, &elem_ty);
                        }
                    }
                    (ast::RelationValue::Between(a, b), _) => {
                        self.expr(a, &c.name, &elem_ty);
                        self.expr(b, &c.name, &elem_ty);
                    }
                    (ast::RelationValue::Null, _) => {}
                }
            }
            ast::RelationTarget::Token(cols) => {
                if let ast::RelationValue::Single(e) = &r.value {
                    match e {
                        ast::Expr::Function { args, .. } => {
                            for (a, c) in args.iter().zip(cols) {
                                let (ty, _, _) = self.column_type(&c.name)?;
                                self.expr(a, &c.name, &ty);
                            }
                        }
                        other => self.expr(other, "partition key token", &CqlType::Bigint),
                    }
                }
            }
            ast::RelationTarget::Tuple(cols) => {
                let types = cols
                    .iter()
                    .map(|c| self.column_type(&c.name).map(|t| t.0))
                    .collect::<Result<Vec<_>, _>>()?;
                let tuple = CqlType::Tuple(types.clone());
                let names = format!(
                    "({})",
                    cols.iter()
                        .map(|c| c.name.clone())
                        .collect::<Vec<_>>()
                        .join(",")
                );
                let one = |s: &mut Self, e: &ast::Expr| match e {
                    ast::Expr::Tuple(items) => {
                        for ((i, c), t) in items.iter().zip(cols).zip(&types) {
                            s.expr(i, &c.name, t);
                        }
                    }
                    other => s.expr(other, &names, &tuple),
                };
                match &r.value {
                    ast::RelationValue::Single(ast::Expr::Bind(m)) if r.op == ast::Operator::In => {
                        let spec = self.spec(
                            &format!("in({names})"),
                            CqlType::List {
                                elem: Box::new(tuple.clone()),
                                frozen: true,
                            },
                        );
                        self.set(m.index, spec);
                    }
                    ast::RelationValue::Single(e) => one(self, e),
                    ast::RelationValue::List(items) => {
                        for i in items {
                            one(self, i);
                        }
                    }
                    _ => {}
                }
            }
            ast::RelationTarget::Element { column, key } => {
                let (ty, _, _) = self.column_type(&column.name)?;
                if let CqlType::Map {
                    key: kt, value: vt, ..
                } = &ty
                {
                    self.expr(key, &column.name, kt);
                    if let ast::RelationValue::Single(e) = &r.value {
                        self.expr(e, &column.name, vt);
                    }
                }
            }
            ast::RelationTarget::CustomIndex(_) => {}
        }
        Ok(())
    }

    fn using(&mut self, u: &ast::Using) {
        if let Some(e) = &u.ttl {
            let spec = self.spec("[ttl]", CqlType::Int);
            if let ast::Expr::Bind(m) = e {
                self.set(m.index, spec);
            }
        }
        if let Some(e) = &u.timestamp {
            let spec = self.spec("[timestamp]", CqlType::Bigint);
            if let ast::Expr::Bind(m) = e {
                self.set(m.index, spec);
            }
        }
    }

    fn conditions(&mut self, c: &Option<ast::Conditions>) -> Result<(), QueryError> {
        if let Some(ast::Conditions::Columns(conds)) = c {
            for cond in conds {
                match &cond.target {
                    ast::ConditionTarget::Column(col) => {
                        let (ty, _, _) = self.column_type(&col.name)?;
                        match &cond.value {
                            ast::RelationValue::Single(e) => self.expr(e, &col.name, &ty),
                            ast::RelationValue::List(items) => {
                                for i in items {
                                    self.expr(i, &col.name, &ty);
                                }
                            }
                            _ => {}
                        }
                    }
                    ast::ConditionTarget::Element { column, key } => {
                        let (ty, _, _) = self.column_type(&column.name)?;
                        if let CqlType::Map {
                            key: kt, value: vt, ..
                        } = &ty
                        {
                            self.expr(key, &column.name, kt);
                            if let ast::RelationValue::Single(e) = &cond.value {
                                self.expr(e, &column.name, vt);
                            }
                        }
                    }
                    ast::ConditionTarget::Field { .. } => {}
                }
            }
        }
        Ok(())
    }
}

pub fn bind_metadata(
    schema: &Schema,
    keyspace: Option<&str>,
    parsed: &ast::ParsedStatement,
) -> Result<BindMeta, QueryError> {
    let n = parsed.bind_markers.len();
    // A BATCH binds each child statement's markers with that statement's types.
    if let ast::Statement::Batch(b) = &parsed.statement {
        let mut merged: Vec<Option<ResultColumn>> = vec![None; n];
        let mut pk_indexes = None;
        let mut is_lwt = false;
        for child in &b.statements {
            let statement = match child {
                ast::BatchChild::Insert(s) => ast::Statement::Insert(Box::new(s.clone())),
                ast::BatchChild::Update(s) => ast::Statement::Update(Box::new(s.clone())),
                ast::BatchChild::Delete(s) => ast::Statement::Delete(Box::new(s.clone())),
            };
            let sub = ast::ParsedStatement {
                statement,
                bind_markers: parsed.bind_markers.clone(),
            };
            let meta = bind_metadata(schema, keyspace, &sub)?;
            is_lwt |= meta.is_lwt;
            if pk_indexes.is_none() {
                pk_indexes = Some(meta.pk_indexes);
            }
            for (i, c) in meta.bind_columns.into_iter().enumerate() {
                if c.name != format!("[{i}]")
                    && let Some(slot) = merged.get_mut(i)
                    && slot.is_none()
                {
                    *slot = Some(c);
                }
            }
        }
        let bind_columns = merged
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                c.unwrap_or(ResultColumn {
                    keyspace: String::new(),
                    table: String::new(),
                    name: format!("[{i}]"),
                    ty: CqlType::Blob,
                })
            })
            .collect();
        return Ok(BindMeta {
            bind_columns,
            pk_indexes: pk_indexes.unwrap_or_default(),
            result_columns: Vec::new(),
            is_lwt,
        });
    }
    let table_name = match &parsed.statement {
        ast::Statement::Select(s) => Some(&s.table),
        ast::Statement::Insert(s) => Some(&s.table),
        ast::Statement::Update(s) => Some(&s.table),
        ast::Statement::Delete(s) => Some(&s.table),
        _ => None,
    };
    let Some(table_name) = table_name else {
        // Statements without a table (USE, DDL, BATCH text) bind as blobs.
        let cols = (0..n)
            .map(|i| ResultColumn {
                keyspace: String::new(),
                table: String::new(),
                name: format!("[{i}]"),
                ty: CqlType::Blob,
            })
            .collect();
        return Ok(BindMeta {
            bind_columns: cols,
            pk_indexes: Vec::new(),
            result_columns: Vec::new(),
            is_lwt: false,
        });
    };
    let table = resolve_table(schema, keyspace, table_name)?;
    let mut r = Receivers {
        table: &table,
        cols: vec![None; n],
        pk_binds: vec![None; table.partition_key.len()],
    };
    let mut result_columns = Vec::new();
    let mut is_lwt = false;
    match &parsed.statement {
        ast::Statement::Select(s) => {
            for rel in &s.where_clause {
                r.relation(rel)?;
            }
            for (e, name) in [
                (&s.limit, "[limit]"),
                (&s.per_partition_limit, "[per_partition_limit]"),
            ] {
                if let Some(ast::Expr::Bind(m)) = e {
                    let spec = r.spec(name, CqlType::Int);
                    r.set(m.index, spec);
                }
            }
            result_columns = crate::select::result_columns(&table, s)?;
        }
        ast::Statement::Insert(s) => {
            r.using(&s.using);
            is_lwt = s.if_not_exists;
            match &s.values {
                ast::InsertValues::Values { columns, values } => {
                    for (c, v) in columns.iter().zip(values) {
                        let (ty, kind, pos) = r.column_type(&c.name)?;
                        if let (ast::Expr::Bind(m), ColumnKind::PartitionKey) = (v, kind)
                            && let Some(slot) = r.pk_binds.get_mut(pos as usize)
                        {
                            *slot = Some(m.index as u16);
                        }
                        r.expr(v, &c.name, &ty);
                    }
                }
                ast::InsertValues::Json { value, .. } => {
                    if let ast::Expr::Bind(m) = value {
                        let spec = r.spec("[json]", CqlType::Text);
                        r.set(m.index, spec);
                    }
                }
            }
        }
        ast::Statement::Update(s) => {
            r.using(&s.using);
            is_lwt = s.conditions.is_some();
            for a in &s.assignments {
                let (ty, _, _) = r.column_type(&a.column.name)?;
                let name = a.column.name.clone();
                match &a.op {
                    ast::AssignmentOp::Set(e) | ast::AssignmentOp::Prepend(e) => {
                        r.expr(e, &name, &ty)
                    }
                    ast::AssignmentOp::Add(e) | ast::AssignmentOp::Subtract(e) => {
                        let t = match (&ty, &a.op) {
                            (CqlType::Counter, _) => CqlType::Counter,
                            (CqlType::Map { key, .. }, ast::AssignmentOp::Subtract(_)) => {
                                CqlType::Set {
                                    elem: key.clone(),
                                    frozen: false,
                                }
                            }
                            _ => ty.clone(),
                        };
                        r.expr(e, &name, &t);
                    }
                    ast::AssignmentOp::SetElement { key, value } => match &ty {
                        CqlType::Map {
                            key: kt, value: vt, ..
                        } => {
                            r.expr(key, &name, kt);
                            r.expr(value, &name, vt);
                        }
                        CqlType::List { elem, .. } => {
                            r.expr(key, &format!("idx({name})"), &CqlType::Int);
                            r.expr(value, &name, elem);
                        }
                        _ => {}
                    },
                    ast::AssignmentOp::SetField { field, value } => {
                        if let CqlType::Udt(d) = &ty
                            && let Some(i) = d.field_names.iter().position(|f| *f == field.name)
                        {
                            r.expr(value, &field.name, &d.field_types[i]);
                        }
                    }
                }
            }
            for rel in &s.where_clause {
                r.relation(rel)?;
            }
            r.conditions(&s.conditions)?;
        }
        ast::Statement::Delete(s) => {
            r.using(&s.using);
            is_lwt = s.conditions.is_some();
            for d in &s.columns {
                if let ast::Deletion::Element { column, key } = d {
                    let (ty, _, _) = r.column_type(&column.name)?;
                    let kt = match &ty {
                        CqlType::Map { key, .. } => (**key).clone(),
                        _ => CqlType::Int,
                    };
                    r.expr(key, &column.name, &kt);
                }
            }
            for rel in &s.where_clause {
                r.relation(rel)?;
            }
            r.conditions(&s.conditions)?;
        }
        _ => {}
    }
    let pk_indexes = if r.pk_binds.iter().all(Option::is_some) {
        r.pk_binds.iter().flatten().copied().collect()
    } else {
        Vec::new()
    };
    let bind_columns = r
        .cols
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            c.unwrap_or(ResultColumn {
                keyspace: table.keyspace.clone(),
                table: table.name.clone(),
                name: format!("[{i}]"),
                ty: CqlType::Blob,
            })
        })
        .collect();
    Ok(BindMeta {
        bind_columns,
        pk_indexes,
        result_columns,
        is_lwt,
    })
}

/// What an INSERT / UPDATE / DELETE resolves to against one schema version: cached per
/// prepared statement (a change to its table or keyspace drops the statement, so this never
/// goes stale) and built afresh for an unprepared QUERY.
#[derive(Debug)]
pub struct WritePlan {
    pub table: Arc<TableSchema>,
    /// Consistency levels a write to this keyspace accepts ([`crate::consistency::accepted`]).
    pub consistency_ok: u32,
    /// Set when the statement writes one row of plain values (see [`SimpleWrite`]).
    pub simple: Option<SimpleWrite>,
}

/// An INSERT `(cols) VALUES (terms)` naming the whole primary key, or an UPDATE of
/// `col = term` assignments `WHERE` one `=` per primary-key column: one row of one
/// partition, no read before the write, no condition, no counter. For that shape the
/// checks the general path makes on the statement pass, so EXECUTE only evaluates the
/// terms and builds the mutation. Term indexes are into the INSERT's values, or the
/// UPDATE's WHERE relations (key) and assignments (cells).
#[derive(Debug)]
pub struct SimpleWrite {
    /// The term of each partition-key column, in key order.
    pub pk: Vec<usize>,
    /// The term of each clustering column, in clustering order.
    pub ck: Vec<usize>,
    /// Static and regular columns written, by column id (the order of a row's cells).
    pub cells: Vec<(ColumnId, usize)>,
    pub is_update: bool,
}

impl WritePlan {
    pub fn of(
        schema: &Schema,
        keyspace: Option<&str>,
        st: &ast::Statement,
    ) -> Result<WritePlan, QueryError> {
        let table_name = match st {
            ast::Statement::Insert(s) => &s.table,
            ast::Statement::Update(s) => &s.table,
            ast::Statement::Delete(s) => &s.table,
            _ => return Err(QueryError::Server("not a write".into())),
        };
        let table = resolve_table(schema, keyspace, table_name)?;
        let consistency_ok = crate::consistency::accepted(schema.keyspace(&table.keyspace), true);
        let writable = !crate::schema::is_system_keyspace(&table.keyspace)
            && schema.view(&table.keyspace, &table.name).is_none()
            && !table.is_counter;
        let simple = if writable {
            SimpleWrite::of(&table, st)
        } else {
            None
        };
        Ok(WritePlan {
            table,
            consistency_ok,
            simple,
        })
    }
}

/// Column lookup by name for a statement that names columns mostly in table order (an
/// INSERT's column list, an UPDATE's `WHERE` then `SET`): each search starts after the
/// previous hit and wraps around, so names in table order cost one compare each.
struct ColumnCursor<'a> {
    t: &'a TableSchema,
    next: usize,
}

impl<'a> ColumnCursor<'a> {
    /// The same answer as [`TableSchema::column`]: live column names are unique, so the
    /// first live match from any starting point is the one.
    fn find(&mut self, name: &str) -> Option<(ColumnId, &'a ColumnDef)> {
        let n = self.t.columns.len();
        let start = self.next.min(n);
        let found = (start..n).chain(0..start).find_map(|i| {
            let c = self.t.columns.get(i)?;
            let id = i as ColumnId;
            (c.name == name && !self.t.is_dropped(id)).then_some((id, c))
        });
        debug_assert_eq!(
            found.map(|(id, _)| id),
            self.t.column(name).map(|(id, _)| id)
        );
        if let Some((id, _)) = found {
            self.next = id as usize + 1;
        }
        found
    }
}

impl SimpleWrite {
    fn of(t: &TableSchema, st: &ast::Statement) -> Option<SimpleWrite> {
        let mut w = SimpleWrite {
            pk: vec![usize::MAX; t.partition_key.len()],
            ck: vec![usize::MAX; t.clustering_key.len()],
            cells: Vec::with_capacity(t.columns.len()),
            is_update: false,
        };
        // Records column `name` as supplied by term `i`; false if it cannot be.
        let mut columns = ColumnCursor { t, next: 0 };
        let mut key_term = |w: &mut SimpleWrite, name: &str, i: usize, key_only: bool| {
            let Some((id, def)) = columns.find(name) else {
                return false;
            };
            let slot = match def.kind {
                ColumnKind::PartitionKey => w.pk.get_mut(def.position as usize),
                ColumnKind::Clustering => w.ck.get_mut(def.position as usize),
                ColumnKind::Static | ColumnKind::Regular if !key_only => {
                    if w.cells.iter().any(|c| c.0 == id) || def.ty == CqlType::Counter {
                        return false;
                    }
                    w.cells.push((id, i));
                    return true;
                }
                _ => return false,
            };
            match slot {
                Some(s) if *s == usize::MAX => {
                    *s = i;
                    true
                }
                _ => false,
            }
        };
        match st {
            ast::Statement::Insert(s) => {
                let ast::InsertValues::Values { columns, values } = &s.values else {
                    return None;
                };
                if s.if_not_exists || columns.len() != values.len() {
                    return None;
                }
                for (i, c) in columns.iter().enumerate() {
                    if !key_term(&mut w, &c.name, i, false) {
                        return None;
                    }
                }
            }
            ast::Statement::Update(s) => {
                if s.conditions.is_some() || s.assignments.is_empty() {
                    return None;
                }
                w.is_update = true;
                for (i, rel) in s.where_clause.iter().enumerate() {
                    let (
                        ast::RelationTarget::Column(c),
                        ast::Operator::Eq,
                        ast::RelationValue::Single(_),
                    ) = (&rel.target, rel.op, &rel.value)
                    else {
                        return None;
                    };
                    if !key_term(&mut w, &c.name, i, true) {
                        return None;
                    }
                }
                for (i, a) in s.assignments.iter().enumerate() {
                    if !matches!(a.op, ast::AssignmentOp::Set(_))
                        || !key_term(&mut w, &a.column.name, i, false)
                    {
                        return None;
                    }
                }
                // Rows are written only by regular columns; a statics-only UPDATE keeps the
                // general path (its clustering rules).
                let regular = |id: &ColumnId| {
                    t.columns
                        .get(*id as usize)
                        .is_some_and(|d| d.kind == ColumnKind::Regular)
                };
                if !w.cells.iter().any(|(id, _)| regular(id)) {
                    return None;
                }
            }
            _ => return None,
        }
        if w.pk.contains(&usize::MAX) || w.ck.contains(&usize::MAX) {
            return None;
        }
        w.cells.sort_by_key(|c| c.0);
        Some(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::BoundValue;
    use crate::values::EvalCtx;
    use crate::write::{Planned, plan_simple, plan_write};
    use bytes::Bytes;

    fn schema(ddl: &[&str]) -> Schema {
        let mut s = Schema::default();
        for q in ddl {
            let st = ast::parse(q).expect("ddl parses").statement;
            s = match &st {
                ast::Statement::CreateKeyspace(k) => crate::schema::create_keyspace(&s, k),
                ast::Statement::CreateTable(t) => crate::schema::create_table(&s, t, Some("ks")),
                other => panic!("not ddl here: {}", other.kind()),
            }
            .expect("ddl applies")
            .schema;
        }
        s
    }

    fn tables() -> Schema {
        schema(&[
            "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            "CREATE TABLE ks.standard1 (key blob PRIMARY KEY, \"C0\" blob, \"C1\" blob)",
            "CREATE TABLE ks.t (p int, q text, c int, s int static, v text, l set<int>, PRIMARY KEY ((p, q), c))",
            "CREATE TABLE ks.cnt (k int PRIMARY KEY, n counter)",
        ])
    }

    fn plan(s: &Schema, q: &str) -> WritePlan {
        let st = ast::parse(q).expect("parses").statement;
        WritePlan::of(s, Some("ks"), &st).expect("plans")
    }

    #[test]
    fn simple_write_shapes() {
        let s = tables();
        let w = plan(
            &s,
            "UPDATE standard1 SET \"C1\" = ?, \"C0\" = ? WHERE key = ?",
        );
        let simple = w.simple.expect("stress UPDATE is simple");
        assert_eq!(simple.pk, vec![0]);
        assert!(simple.ck.is_empty());
        // Cells in column id order, each with its assignment.
        assert_eq!(simple.cells, vec![(1, 1), (2, 0)]);
        assert!(simple.is_update);
        let w = plan(&s, "INSERT INTO t (v, c, q, p, s) VALUES (?, ?, ?, ?, ?)");
        let simple = w.simple.expect("full-key INSERT is simple");
        assert_eq!((simple.pk, simple.ck), (vec![3, 2], vec![1]));
        for q in [
            "INSERT INTO t (p, q, v) VALUES (1, 'a', 'x')",
            "INSERT INTO t (p, q, c, v) VALUES (1, 'a', 1, 'x') IF NOT EXISTS",
            "INSERT INTO t JSON '{\"p\": 1}'",
            "UPDATE t SET v = 'x' WHERE p = 1 AND q = 'a'",
            "UPDATE t SET v = 'x' WHERE p = 1 AND q = 'a' AND c IN (1, 2)",
            "UPDATE t SET l = l + {1} WHERE p = 1 AND q = 'a' AND c = 1",
            "UPDATE t SET s = 1 WHERE p = 1 AND q = 'a' AND c = 1",
            "UPDATE t SET v = 'x' WHERE p = 1 AND q = 'a' AND c = 1 IF v = 'y'",
            "UPDATE cnt SET n = n + 1 WHERE k = 1",
            "DELETE FROM t WHERE p = 1 AND q = 'a' AND c = 1",
        ] {
            assert!(plan(&s, q).simple.is_none(), "{q}");
        }
    }

    /// The simple path builds exactly the mutation the general path builds.
    #[test]
    fn simple_write_matches_general_path() {
        let s = tables();
        let int = |v: i32| BoundValue::Set(Bytes::copy_from_slice(&v.to_be_bytes()));
        let text = |v: &str| BoundValue::Set(Bytes::copy_from_slice(v.as_bytes()));
        let cases: Vec<(&str, Vec<BoundValue>)> = vec![
            (
                "UPDATE standard1 SET \"C1\" = ?, \"C0\" = ? WHERE key = ?",
                vec![text("b"), BoundValue::Null, text("k1")],
            ),
            (
                "UPDATE standard1 USING TTL 10 SET \"C0\" = ?, \"C1\" = ? WHERE key = ?",
                vec![text("a"), BoundValue::Unset, text("k1")],
            ),
            (
                "INSERT INTO t (v, c, q, p, s, l) VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP 42",
                vec![
                    text("x"),
                    int(3),
                    text("q"),
                    int(7),
                    int(9),
                    BoundValue::Set(crate::values::serialize_collection(
                        [Some(&[0u8, 0, 0, 2][..]), Some(&[0, 0, 0, 1][..])].into_iter(),
                    )),
                ],
            ),
            ("INSERT INTO t (p, q, c) VALUES (1, 'a', 2)", vec![]),
            (
                "UPDATE t SET v = ?, s = ? WHERE c = ? AND q = ? AND p = ?",
                vec![text("v"), int(1), int(2), text("q"), int(3)],
            ),
        ];
        for (q, binds) in cases {
            let st = ast::parse(q).expect("parses").statement;
            let w = WritePlan::of(&s, Some("ks"), &st).expect("plans");
            let simple = w.simple.as_ref().expect("simple shape");
            let ctx = EvalCtx {
                binds: &binds,
                now_micros: 1_700_000_000_000_000,
            };
            let fast = plan_simple(&w.table, &st, simple, &ctx, 5).expect("fast path applies");
            let general = plan_write(&w.table, &st, &ctx, 5).expect("general path");
            let muts = |p: Vec<Planned>| -> Vec<amphora_types::data::Mutation> {
                p.into_iter()
                    .map(|p| match p {
                        Planned::Mutation(m) => m,
                        Planned::Counter(_) => panic!("no counters here"),
                    })
                    .collect()
            };
            assert_eq!(muts(fast), muts(general), "{q}");
        }
    }

    /// Values the general path refuses (or treats specially) leave the simple path.
    #[test]
    fn simple_write_falls_back() {
        let s = tables();
        let st = ast::parse("UPDATE standard1 SET \"C0\" = ? WHERE key = ?")
            .expect("parses")
            .statement;
        let w = WritePlan::of(&s, Some("ks"), &st).expect("plans");
        let simple = w.simple.as_ref().expect("simple");
        for binds in [
            vec![BoundValue::Set(Bytes::from_static(b"v")), BoundValue::Null],
            vec![BoundValue::Set(Bytes::from_static(b"v")), BoundValue::Unset],
            vec![
                BoundValue::Set(Bytes::from_static(b"v")),
                BoundValue::Set(Bytes::new()),
            ],
            vec![BoundValue::Unset, BoundValue::Set(Bytes::from_static(b"k"))],
            vec![BoundValue::Set(Bytes::from_static(b"v"))],
        ] {
            let ctx = EvalCtx {
                binds: &binds,
                now_micros: 0,
            };
            assert!(
                plan_simple(&w.table, &st, simple, &ctx, 1).is_none(),
                "{binds:?}"
            );
        }
    }

    #[test]
    fn accepted_consistency_levels_agree_with_check() {
        let s = schema(&[
            "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}",
            "CREATE KEYSPACE one WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
            "CREATE KEYSPACE nts WITH replication = {'class': 'NetworkTopologyStrategy', 'datacenter1': 1, 'dc2': 3}",
            "CREATE KEYSPACE other WITH replication = {'class': 'NetworkTopologyStrategy', 'dc2': 1}",
        ]);
        for ks in [
            s.keyspace("ks"),
            s.keyspace("one"),
            s.keyspace("nts"),
            s.keyspace("other"),
            None,
        ] {
            for is_write in [false, true] {
                let mask = crate::consistency::accepted(ks, is_write);
                for cl in 0..=12u16 {
                    let direct = crate::consistency::check(ks, cl, is_write);
                    let cached = crate::consistency::check_accepted(mask, ks, cl, is_write);
                    assert_eq!(direct.is_ok(), cached.is_ok(), "cl {cl} write {is_write}");
                    assert_eq!(format!("{direct:?}"), format!("{cached:?}"));
                }
            }
        }
        let nts = crate::consistency::accepted(s.keyspace("nts"), false);
        assert_ne!(nts & 1 << crate::consistency::LOCAL_QUORUM, 0);
        assert_eq!(nts & 1 << crate::consistency::EACH_QUORUM, 0, "dc2 is down");
        let rf3 = crate::consistency::accepted(s.keyspace("ks"), false);
        assert_ne!(rf3 & 1 << crate::consistency::ONE, 0);
        assert_eq!(
            rf3 & 1 << crate::consistency::QUORUM,
            0,
            "QUORUM of RF 3 needs 2 nodes"
        );
    }

    #[test]
    fn select_star_shares_its_columns_per_table_version() {
        let s = tables();
        let plan = |s: &Schema, q: &str| {
            let st = ast::parse(q).expect("parses").statement;
            let ast::Statement::Select(sel) = &st else {
                panic!("a SELECT")
            };
            crate::select::plan_select(s, Some("ks"), sel).expect("plans")
        };
        let a = plan(&s, "SELECT * FROM standard1 WHERE key = ?");
        let b = plan(&s, "SELECT * FROM ks.standard1 LIMIT 3");
        assert!(Arc::ptr_eq(&a.columns, &b.columns));
        assert!(Arc::ptr_eq(&a.items, &b.items));
        let names: Vec<&str> = a.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["key", "C0", "C1"]);
        // Another table, a selector list: their own columns.
        let t = plan(&s, "SELECT * FROM t");
        assert!(!Arc::ptr_eq(&a.columns, &t.columns));
        let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["p", "q", "c", "s", "l", "v"]);
        let listed = plan(&s, "SELECT key, \"C0\", \"C1\" FROM standard1");
        assert!(!Arc::ptr_eq(&a.columns, &listed.columns));
        assert_eq!(*a.columns, *listed.columns);
        // A new table version (ALTER) gets a new list with the added column.
        let ast::Statement::AlterTable(alter) = ast::parse("ALTER TABLE standard1 ADD \"C2\" blob")
            .expect("parses")
            .statement
        else {
            panic!("an ALTER TABLE")
        };
        let s2 = crate::schema::alter_table(&s, &alter, Some("ks"))
            .expect("alters")
            .schema;
        let c = plan(&s2, "SELECT * FROM standard1");
        let names: Vec<&str> = c.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["key", "C0", "C1", "C2"]);
        let again = plan(&s, "SELECT * FROM standard1");
        assert!(
            Arc::ptr_eq(&a.columns, &again.columns),
            "the old version is still cached"
        );
    }
}
