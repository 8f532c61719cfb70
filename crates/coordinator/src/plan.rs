//! Statement analysis shared by PREPARE and execution: table resolution, bind-marker
//! receivers (bind metadata and `pk_indexes` for token-aware drivers).

use std::sync::Arc;

use amphora_cql as ast;
use amphora_types::CqlType;
use amphora_types::schema::{ColumnKind, TableSchema};

use crate::api::{QueryError, ResultColumn};
use crate::schema::Schema;

pub fn keyspace_of(name: &ast::QualifiedName, current: Option<&str>) -> Result<String, QueryError> {
    match (&name.keyspace, current) {
        (Some(k), _) => Ok(k.name.clone()),
        (None, Some(k)) => Ok(k.to_string()),
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
    let ks = keyspace_of(name, current)?;
    if let Some(t) = schema.table(&ks, &name.name.name) {
        return Ok(t.clone());
    }
    if let Some(v) = crate::system::virtual_table(&ks, &name.name.name) {
        return Ok(v.schema.clone());
    }
    if schema.keyspace(&ks).is_none() && !crate::schema::is_system_keyspace(&ks) {
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
