//! CREATE / ALTER / DROP of keyspaces, tables, types, indexes, views, functions,
//! aggregates and triggers; properties; DESCRIBE.

use super::{PResult, Parser};
use crate::ast::*;
use crate::error::ParseErrorKind;
use crate::keyword::Keyword;
use crate::lexer::Tok;

impl<'a> Parser<'a> {
    pub(crate) fn create_statement(&mut self) -> PResult<Statement> {
        self.expect_kw(Keyword::Create)?;
        let Tok::Keyword(k) = self.peek() else {
            return Err(self.no_viable_from(self.pos - 1));
        };
        match k {
            Keyword::Keyspace | Keyword::Schema => {
                self.create_keyspace().map(Statement::CreateKeyspace)
            }
            Keyword::Table => self
                .create_table()
                .map(|t| Statement::CreateTable(Box::new(t))),
            Keyword::Type => self.create_type().map(Statement::CreateType),
            Keyword::Custom | Keyword::Index => self
                .create_index()
                .map(|i| Statement::CreateIndex(Box::new(i))),
            Keyword::Materialized => self
                .create_view()
                .map(|v| Statement::CreateMaterializedView(Box::new(v))),
            Keyword::Or | Keyword::Function | Keyword::Aggregate => {
                let or_replace = self.eat_kw(Keyword::Or);
                if or_replace {
                    self.expect_kw(Keyword::Replace)?;
                }
                if self.at_kw(Keyword::Function) {
                    self.create_function(or_replace)
                        .map(|f| Statement::CreateFunction(Box::new(f)))
                } else if self.at_kw(Keyword::Aggregate) {
                    self.create_aggregate(or_replace)
                        .map(|a| Statement::CreateAggregate(Box::new(a)))
                } else {
                    Err(self.no_viable())
                }
            }
            Keyword::Trigger => self.create_trigger().map(Statement::CreateTrigger),
            Keyword::Role => self.create_role().map(Statement::CreateRole),
            Keyword::User => self.create_user().map(Statement::CreateUser),
            _ => Err(self.no_viable_from(self.pos - 1)),
        }
    }

    pub(crate) fn alter_statement(&mut self) -> PResult<Statement> {
        self.expect_kw(Keyword::Alter)?;
        let Tok::Keyword(k) = self.peek() else {
            return Err(self.no_viable_from(self.pos - 1));
        };
        match k {
            Keyword::Keyspace | Keyword::Schema => {
                self.bump();
                let if_exists = self.if_exists()?;
                let name = self.keyspace_name()?;
                self.expect_kw(Keyword::With)?;
                let properties = self.properties()?;
                Ok(Statement::AlterKeyspace(AlterKeyspace {
                    name,
                    if_exists,
                    properties,
                }))
            }
            Keyword::Table => self
                .alter_table()
                .map(|t| Statement::AlterTable(Box::new(t))),
            Keyword::Type => self.alter_type().map(Statement::AlterType),
            Keyword::Materialized => {
                self.bump();
                self.expect_kw(Keyword::View)?;
                let if_exists = self.if_exists()?;
                let name = self.table_name()?;
                self.expect_kw(Keyword::With)?;
                let properties = self.properties()?;
                Ok(Statement::AlterMaterializedView {
                    name,
                    if_exists,
                    properties,
                })
            }
            Keyword::Role => self.alter_role().map(Statement::AlterRole),
            Keyword::User => self.alter_user().map(Statement::AlterUser),
            _ => Err(self.no_viable_from(self.pos - 1)),
        }
    }

    pub(crate) fn drop_statement(&mut self) -> PResult<Statement> {
        self.expect_kw(Keyword::Drop)?;
        let Tok::Keyword(k) = self.peek() else {
            return Err(self.no_viable_from(self.pos - 1));
        };
        self.bump();
        match k {
            Keyword::Keyspace | Keyword::Schema => {
                let if_exists = self.if_exists()?;
                let name = QualifiedName::new(None, self.keyspace_name()?);
                Ok(Statement::DropKeyspace(Drop { name, if_exists }))
            }
            Keyword::Table => {
                let if_exists = self.if_exists()?;
                Ok(Statement::DropTable(Drop {
                    name: self.table_name()?,
                    if_exists,
                }))
            }
            Keyword::Type => {
                let if_exists = self.if_exists()?;
                Ok(Statement::DropType(Drop {
                    name: self.user_type_name()?,
                    if_exists,
                }))
            }
            Keyword::Index => {
                let if_exists = self.if_exists()?;
                Ok(Statement::DropIndex(Drop {
                    name: self.qualified_name("index")?,
                    if_exists,
                }))
            }
            Keyword::Materialized => {
                self.expect_kw(Keyword::View)?;
                let if_exists = self.if_exists()?;
                Ok(Statement::DropMaterializedView(Drop {
                    name: self.table_name()?,
                    if_exists,
                }))
            }
            Keyword::Function | Keyword::Aggregate => {
                let if_exists = self.if_exists()?;
                let name = self.function_name()?;
                let arg_types = if self.eat(Tok::LParen) {
                    Some(self.type_list(Tok::RParen)?)
                } else {
                    None
                };
                let d = DropFunction {
                    name,
                    if_exists,
                    arg_types,
                };
                Ok(if k == Keyword::Function {
                    Statement::DropFunction(d)
                } else {
                    Statement::DropAggregate(d)
                })
            }
            Keyword::Trigger => {
                let if_exists = self.if_exists()?;
                let name = self.ident()?;
                self.expect_kw(Keyword::On)?;
                let table = self.table_name()?;
                Ok(Statement::DropTrigger {
                    name,
                    if_exists,
                    table,
                })
            }
            Keyword::Role => {
                let if_exists = self.if_exists()?;
                Ok(Statement::DropRole {
                    name: self.role_name()?,
                    if_exists,
                })
            }
            Keyword::User => {
                let if_exists = self.if_exists()?;
                Ok(Statement::DropUser {
                    name: self.username()?,
                    if_exists,
                })
            }
            Keyword::Identity => {
                let if_exists = self.if_exists()?;
                Ok(Statement::DropIdentity {
                    identity: self.identity()?,
                    if_exists,
                })
            }
            _ => {
                self.pos -= 1;
                Err(self.no_viable_from(self.pos - 1))
            }
        }
    }

    /// `(type (, type)*)? close`, the opening token already consumed.
    fn type_list(&mut self, close: Tok) -> PResult<Vec<TypeExpr>> {
        let mut out = Vec::new();
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(self.type_expr()?);
            if !self.eat(Tok::Comma) {
                break;
            }
        }
        self.expect(close)?;
        Ok(out)
    }

    // ---- properties ---------------------------------------------------------------

    /// `properties`: `property (AND property)*`.
    pub(crate) fn properties(&mut self) -> PResult<Vec<Property>> {
        let mut out = Vec::new();
        loop {
            self.property(&mut out)?;
            if !self.eat_kw(Keyword::And) {
                return Ok(out);
            }
        }
    }

    /// `property`: `name = constant | unreserved_keyword | {map}`.
    fn property(&mut self, out: &mut Vec<Property>) -> PResult<()> {
        let name = self.ident()?.name;
        if !self.at(Tok::Eq) {
            // Both `property` alternatives start `name =`: ANTLR's decision fails on the name.
            return Err(self.no_viable_from(self.pos - 1));
        }
        self.bump();
        let value = if self.at(Tok::LBrace) {
            PropertyValue::Map(self.property_map()?)
        } else if let Some(l) = self.signed_constant() {
            PropertyValue::Constant(l)
        } else if let Tok::Keyword(k) = self.peek() {
            if !k.is_unreserved() {
                return Err(self.no_viable());
            }
            let t = self.bump();
            PropertyValue::Keyword(self.text(t).to_string())
        } else {
            return Err(self.no_viable());
        };
        if out.iter().any(|p| p.name == name) {
            return Err(self.recognition(
                ParseErrorKind::Recognition,
                format!("Multiple definitions for property '{name}'"),
            ));
        }
        out.push(Property { name, value });
        Ok(())
    }

    /// `fullMapLiteral` whose entries must be constants (`convertPropertyMap`).
    pub(crate) fn property_map(&mut self) -> PResult<Vec<(Literal, Literal)>> {
        self.expect(Tok::LBrace)?;
        let mut out = Vec::new();
        if self.eat(Tok::RBrace) {
            return Ok(out);
        }
        loop {
            let k = self.term()?;
            self.expect(Tok::Colon)?;
            let v = self.term()?;
            let key = match k {
                Expr::Literal(l) => l,
                Expr::Bind(_) => {
                    return Err(self.recognition(
                        ParseErrorKind::Recognition,
                        "Invalid property name: ? (bind variables are not supported in DDL queries)",
                    ));
                }
                _ => {
                    return Err(
                        self.recognition(ParseErrorKind::Recognition, "Invalid property name")
                    );
                }
            };
            let value = match v {
                Expr::Literal(l) => l,
                Expr::Bind(_) => {
                    return Err(self.recognition(
                        ParseErrorKind::Recognition,
                        format!(
                            "Invalid property value: ? for property: {key} (bind variables are not supported in DDL queries)"
                        ),
                    ));
                }
                _ => {
                    return Err(self.recognition(
                        ParseErrorKind::Recognition,
                        format!("Invalid property value for property: {key}"),
                    ));
                }
            };
            out.push((key, value));
            if !self.eat(Tok::Comma) {
                break;
            }
        }
        self.expect(Tok::RBrace)?;
        Ok(out)
    }

    // ---- keyspaces, tables, types -------------------------------------------------

    /// `createKeyspaceStatement` (after CREATE).
    fn create_keyspace(&mut self) -> PResult<CreateKeyspace> {
        self.bump();
        let if_not_exists = self.if_not_exists()?;
        let name = self.keyspace_name()?;
        self.expect_kw(Keyword::With)?;
        let properties = self.properties()?;
        Ok(CreateKeyspace {
            name,
            if_not_exists,
            properties,
        })
    }

    /// `columnMask`, if present.
    fn column_mask(&mut self) -> PResult<Option<ColumnMask>> {
        if !self.eat_kw(Keyword::Masked) {
            return Ok(None);
        }
        self.expect_kw(Keyword::With)?;
        if self.eat_kw(Keyword::Default) {
            return Ok(Some(ColumnMask {
                function: None,
                args: Vec::new(),
            }));
        }
        let function = self.function_name()?;
        self.expect(Tok::LParen)?;
        let mut args = Vec::new();
        if !self.eat(Tok::RParen) {
            loop {
                args.push(self.term()?);
                if !self.eat(Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RParen)?;
        }
        Ok(Some(ColumnMask {
            function: Some(function),
            args,
        }))
    }

    /// `ident comparatorType [STATIC] [columnMask]`.
    fn column_def(&mut self) -> PResult<ColumnDef> {
        let name = self.ident()?;
        let ty = self.type_expr()?;
        let is_static = self.eat_kw(Keyword::Static);
        let mask = self.column_mask()?;
        Ok(ColumnDef {
            name,
            ty,
            is_static,
            primary_key: false,
            mask,
        })
    }

    /// `PRIMARY KEY '(' partitionKey (, ident)* ')'` after PRIMARY KEY.
    fn primary_key_clause(&mut self) -> PResult<PrimaryKey> {
        self.expect(Tok::LParen)?;
        let partition_key = if self.eat(Tok::LParen) {
            let mut v = vec![self.ident()?];
            while self.eat(Tok::Comma) {
                v.push(self.ident()?);
            }
            self.expect(Tok::RParen)?;
            v
        } else {
            vec![self.ident()?]
        };
        let mut clustering_columns = Vec::new();
        while self.eat(Tok::Comma) {
            clustering_columns.push(self.ident()?);
        }
        self.expect(Tok::RParen)?;
        Ok(PrimaryKey {
            partition_key,
            clustering_columns,
        })
    }

    fn set_primary_key(
        &self,
        table: &QualifiedName,
        slot: &mut Option<PrimaryKey>,
        pk: PrimaryKey,
    ) -> PResult<()> {
        if slot.is_some() {
            return Err(self.recognition(
                ParseErrorKind::Invalid,
                format!(
                    "Multiple PRIMARY KEY specified for table '{}' (exactly one required)",
                    table.name.name
                ),
            ));
        }
        *slot = Some(pk);
        Ok(())
    }

    /// `createTableStatement` (after CREATE).
    fn create_table(&mut self) -> PResult<CreateTable> {
        self.bump();
        let if_not_exists = self.if_not_exists()?;
        let name = self.table_name()?;
        self.expect(Tok::LParen)?;
        let mut columns = Vec::new();
        let mut primary_key = None;
        // `'(' tableColumns (',' tableColumns?)* ')'`: empty items are legal.
        loop {
            if self.at_kw(Keyword::Primary) {
                self.bump();
                self.expect_kw(Keyword::Key)?;
                let pk = self.primary_key_clause()?;
                self.set_primary_key(&name, &mut primary_key, pk)?;
            } else {
                let mut col = self.column_def()?;
                if self.eat_kw(Keyword::Primary) {
                    self.expect_kw(Keyword::Key)?;
                    col.primary_key = true;
                    let pk = PrimaryKey {
                        partition_key: vec![col.name.clone()],
                        clustering_columns: Vec::new(),
                    };
                    self.set_primary_key(&name, &mut primary_key, pk)?;
                }
                columns.push(col);
            }
            if self.eat(Tok::RParen) {
                break;
            }
            if !self.eat(Tok::Comma) {
                return Err(self.mismatch("')'"));
            }
            while self.eat(Tok::Comma) {}
            if self.eat(Tok::RParen) {
                break;
            }
        }
        let options = if self.eat_kw(Keyword::With) {
            self.table_options(true)?
        } else {
            TableOptions::default()
        };
        let Some(primary_key) = primary_key else {
            return Err(self.recognition(
                ParseErrorKind::Invalid,
                format!(
                    "No PRIMARY KEY specifed for table '{}' (exactly one required)",
                    name.name.name
                ),
            ));
        };
        Ok(CreateTable {
            name,
            if_not_exists,
            columns,
            primary_key,
            options,
        })
    }

    /// `tableProperty (AND tableProperty)*` / `viewProperty …`.
    fn table_options(&mut self, allow_compact: bool) -> PResult<TableOptions> {
        let mut o = TableOptions::default();
        loop {
            if self.at_kw(Keyword::Compact) && self.peek_n(1) == Tok::Keyword(Keyword::Storage) {
                if !allow_compact {
                    return Err(self.recognition(
                        ParseErrorKind::Recognition,
                        "COMPACT STORAGE tables are not allowed starting with version 4.0",
                    ));
                }
                self.bump();
                self.bump();
                o.compact_storage = true;
            } else if self.at_kw(Keyword::Clustering)
                && self.peek_n(1) == Tok::Keyword(Keyword::Order)
            {
                self.bump();
                self.bump();
                self.expect_kw(Keyword::By)?;
                self.expect(Tok::LParen)?;
                loop {
                    let c = self.ident()?;
                    let order = if self.eat_kw(Keyword::Asc) {
                        Order::Asc
                    } else if self.eat_kw(Keyword::Desc) {
                        Order::Desc
                    } else {
                        return Err(self.no_viable());
                    };
                    o.clustering_order.push((c, order));
                    if !self.eat(Tok::Comma) {
                        break;
                    }
                }
                self.expect(Tok::RParen)?;
            } else {
                self.property(&mut o.properties)?;
            }
            if !self.eat_kw(Keyword::And) {
                return Ok(o);
            }
        }
    }

    /// `alterTableStatement` (after ALTER).
    fn alter_table(&mut self) -> PResult<AlterTable> {
        self.bump();
        let if_exists = self.if_exists()?;
        let name = self.table_name()?;
        let Tok::Keyword(k) = self.peek() else {
            return Err(self.no_viable());
        };
        self.bump();
        let action = match k {
            Keyword::Alter => {
                let col_if_exists = self.if_exists()?;
                let column = self.cident()?;
                if !col_if_exists && self.eat_kw(Keyword::Type) {
                    AlterTableAction::AlterColumnType {
                        column,
                        ty: self.type_expr()?,
                    }
                } else if self.at_kw(Keyword::Masked) {
                    let mask = self.column_mask()?;
                    AlterTableAction::AlterColumnMask {
                        if_exists: col_if_exists,
                        column,
                        mask,
                    }
                } else if self.eat_kw(Keyword::Drop) {
                    self.expect_kw(Keyword::Masked)?;
                    AlterTableAction::AlterColumnMask {
                        if_exists: col_if_exists,
                        column,
                        mask: None,
                    }
                } else {
                    return Err(self.no_viable());
                }
            }
            Keyword::Add => {
                let if_not_exists = self.if_not_exists()?;
                let mut columns = Vec::new();
                if self.eat(Tok::LParen) {
                    loop {
                        columns.push(self.column_def()?);
                        if !self.eat(Tok::Comma) {
                            break;
                        }
                    }
                    self.expect(Tok::RParen)?;
                } else {
                    columns.push(self.column_def()?);
                }
                AlterTableAction::Add {
                    if_not_exists,
                    columns,
                }
            }
            Keyword::Drop
                if self.at_kw(Keyword::Compact)
                    && self.peek_n(1) == Tok::Keyword(Keyword::Storage) =>
            {
                self.bump();
                self.bump();
                AlterTableAction::DropCompactStorage
            }
            Keyword::Drop => {
                let if_exists = self.if_exists()?;
                let mut columns = Vec::new();
                if self.eat(Tok::LParen) {
                    loop {
                        columns.push(self.ident()?);
                        if !self.eat(Tok::Comma) {
                            break;
                        }
                    }
                    self.expect(Tok::RParen)?;
                } else {
                    columns.push(self.ident()?);
                }
                let timestamp = if self.eat_kw(Keyword::Using) {
                    self.expect_kw(Keyword::Timestamp)?;
                    let t = self.expect(Tok::Integer)?;
                    Some(self.text(t).to_string())
                } else {
                    None
                };
                AlterTableAction::Drop {
                    if_exists,
                    columns,
                    timestamp,
                }
            }
            Keyword::Rename => {
                let if_exists = self.if_exists()?;
                AlterTableAction::Rename {
                    if_exists,
                    renames: self.renames()?,
                }
            }
            Keyword::With => AlterTableAction::With(self.properties()?),
            _ => {
                self.pos -= 1;
                return Err(self.no_viable());
            }
        };
        Ok(AlterTable {
            name,
            if_exists,
            action,
        })
    }

    /// `a TO b (AND c TO d)*`.
    fn renames(&mut self) -> PResult<Vec<(Ident, Ident)>> {
        let mut out = Vec::new();
        loop {
            let from = self.ident()?;
            self.expect_kw(Keyword::To)?;
            let to = self.ident()?;
            out.push((from, to));
            if !self.eat_kw(Keyword::And) {
                return Ok(out);
            }
        }
    }

    /// `createTypeStatement` (after CREATE).
    fn create_type(&mut self) -> PResult<CreateType> {
        self.bump();
        let if_not_exists = self.if_not_exists()?;
        let name = self.user_type_name()?;
        self.expect(Tok::LParen)?;
        let mut fields = Vec::new();
        loop {
            let f = self.ident()?;
            let ty = self.type_expr()?;
            fields.push((f, ty));
            if !self.eat(Tok::Comma) {
                break;
            }
            // Trailing / doubled commas are legal, as for table columns.
            while self.eat(Tok::Comma) {}
            if self.at(Tok::RParen) {
                break;
            }
        }
        self.expect(Tok::RParen)?;
        Ok(CreateType {
            name,
            if_not_exists,
            fields,
        })
    }

    /// `alterTypeStatement` (after ALTER).
    fn alter_type(&mut self) -> PResult<AlterType> {
        self.bump();
        let if_exists = self.if_exists()?;
        let name = self.user_type_name()?;
        let action = if self.eat_kw(Keyword::Alter) {
            let field = self.ident()?;
            self.expect_kw(Keyword::Type)?;
            AlterTypeAction::AlterField {
                field,
                ty: self.type_expr()?,
            }
        } else if self.eat_kw(Keyword::Add) {
            let if_not_exists = self.if_not_exists()?;
            let field = self.ident()?;
            AlterTypeAction::Add {
                if_not_exists,
                field,
                ty: self.type_expr()?,
            }
        } else if self.eat_kw(Keyword::Rename) {
            let if_exists = self.if_exists()?;
            AlterTypeAction::Rename {
                if_exists,
                renames: self.renames()?,
            }
        } else {
            return Err(self.no_viable());
        };
        Ok(AlterType {
            name,
            if_exists,
            action,
        })
    }

    // ---- indexes, views, triggers -------------------------------------------------

    /// `createIndexStatement` (after CREATE).
    fn create_index(&mut self) -> PResult<CreateIndex> {
        let custom = self.eat_kw(Keyword::Custom);
        self.expect_kw(Keyword::Index)?;
        let if_not_exists = self.if_not_exists()?;
        let name = if self.at_kw(Keyword::On) {
            None
        } else {
            Some(self.schema_ident("index")?)
        };
        self.expect_kw(Keyword::On)?;
        let table = self.table_name()?;
        self.expect(Tok::LParen)?;
        let mut targets = Vec::new();
        if !self.eat(Tok::RParen) {
            loop {
                targets.push(self.index_target()?);
                if !self.eat(Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RParen)?;
        }
        let using = if self.eat_kw(Keyword::Using) {
            Some(self.string_literal()?)
        } else {
            None
        };
        let properties = if self.eat_kw(Keyword::With) {
            self.properties()?
        } else {
            Vec::new()
        };
        Ok(CreateIndex {
            custom,
            if_not_exists,
            name,
            table,
            targets,
            using,
            properties,
        })
    }

    /// `indexIdent`.
    fn index_target(&mut self) -> PResult<IndexTarget> {
        let kind = match self.peek() {
            Tok::Keyword(Keyword::Keys) => Some(IndexTargetKind::Keys),
            Tok::Keyword(Keyword::Values) => Some(IndexTargetKind::Values),
            Tok::Keyword(Keyword::Entries) => Some(IndexTargetKind::Entries),
            Tok::Keyword(Keyword::Full) => Some(IndexTargetKind::Full),
            _ => None,
        };
        match kind {
            Some(kind) if self.peek_n(1) == Tok::LParen => {
                self.bump();
                self.bump();
                let column = self.cident()?;
                self.expect(Tok::RParen)?;
                Ok(IndexTarget { column, kind })
            }
            _ => Ok(IndexTarget {
                column: self.cident()?,
                kind: IndexTargetKind::Simple,
            }),
        }
    }

    /// `createMaterializedViewStatement` (after CREATE).
    fn create_view(&mut self) -> PResult<CreateMaterializedView> {
        self.bump();
        self.expect_kw(Keyword::View)?;
        let if_not_exists = self.if_not_exists()?;
        let name = self.table_name()?;
        self.expect_kw(Keyword::As)?;
        self.expect_kw(Keyword::Select)?;
        let selection = self.selection()?;
        self.expect_kw(Keyword::From)?;
        let base_table = self.table_name()?;
        let (where_clause, where_clause_text) = if self.eat_kw(Keyword::Where) {
            let start = self.cur().start as usize;
            let w = self.where_clause()?;
            let end = self
                .toks
                .get(self.pos.wrapping_sub(1))
                .map_or(start, |t| t.end as usize);
            (w, self.src.get(start..end).unwrap_or("").to_string())
        } else {
            (Vec::new(), String::new())
        };
        self.expect_kw(Keyword::Primary)?;
        self.expect_kw(Keyword::Key)?;
        let primary_key = self.primary_key_clause()?;
        let options = if self.eat_kw(Keyword::With) {
            self.table_options(false)?
        } else {
            TableOptions::default()
        };
        Ok(CreateMaterializedView {
            name,
            if_not_exists,
            selection,
            base_table,
            where_clause,
            where_clause_text,
            primary_key,
            options,
        })
    }

    /// `createTriggerStatement` (after CREATE).
    fn create_trigger(&mut self) -> PResult<CreateTrigger> {
        self.bump();
        let if_not_exists = self.if_not_exists()?;
        let name = self.ident()?;
        self.expect_kw(Keyword::On)?;
        let table = self.table_name()?;
        self.expect_kw(Keyword::Using)?;
        let class = self.string_literal()?;
        Ok(CreateTrigger {
            name,
            if_not_exists,
            table,
            class,
        })
    }

    // ---- functions and aggregates -------------------------------------------------

    /// `createFunctionStatement` (at FUNCTION).
    fn create_function(&mut self, or_replace: bool) -> PResult<CreateFunction> {
        self.expect_kw(Keyword::Function)?;
        let if_not_exists = self.if_not_exists()?;
        let name = self.function_name()?;
        self.expect(Tok::LParen)?;
        let mut args = Vec::new();
        if !self.eat(Tok::RParen) {
            loop {
                let arg = self.ident()?;
                let ty = self.type_expr()?;
                args.push((arg, ty));
                if !self.eat(Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RParen)?;
        }
        let called_on_null_input = if self.eat_kw(Keyword::Called) {
            true
        } else if self.eat_kw(Keyword::Returns) {
            self.expect_kw(Keyword::Null)?;
            false
        } else {
            return Err(self.no_viable());
        };
        self.expect_kw(Keyword::On)?;
        self.expect_kw(Keyword::Null)?;
        self.expect_kw(Keyword::Input)?;
        self.expect_kw(Keyword::Returns)?;
        let return_type = self.type_expr()?;
        self.expect_kw(Keyword::Language)?;
        let lang = self.expect(Tok::Ident)?;
        let language = self.text(lang).to_ascii_lowercase();
        self.expect_kw(Keyword::As)?;
        let body = self.string_literal()?;
        Ok(CreateFunction {
            name,
            or_replace,
            if_not_exists,
            args,
            called_on_null_input,
            return_type,
            language,
            body,
        })
    }

    /// `createAggregateStatement` (at AGGREGATE).
    fn create_aggregate(&mut self, or_replace: bool) -> PResult<CreateAggregate> {
        self.expect_kw(Keyword::Aggregate)?;
        let if_not_exists = self.if_not_exists()?;
        let name = self.function_name()?;
        self.expect(Tok::LParen)?;
        let arg_types = self.type_list(Tok::RParen)?;
        self.expect_kw(Keyword::Sfunc)?;
        let state_function = self.allowed_function_name()?;
        self.expect_kw(Keyword::Stype)?;
        let state_type = self.type_expr()?;
        let final_function = if self.eat_kw(Keyword::Finalfunc) {
            Some(self.allowed_function_name()?)
        } else {
            None
        };
        let initial_condition = if self.eat_kw(Keyword::Initcond) {
            Some(self.term()?)
        } else {
            None
        };
        Ok(CreateAggregate {
            name,
            or_replace,
            if_not_exists,
            arg_types,
            state_function,
            state_type,
            final_function,
            initial_condition,
        })
    }

    // ---- DESCRIBE -----------------------------------------------------------------

    /// `describeStatement`.
    pub(crate) fn describe_statement(&mut self) -> PResult<Statement> {
        self.bump();
        let next_is_name = Self::is_ident_tok(self.peek_n(1));
        let target = match self.peek() {
            Tok::Keyword(Keyword::Cluster) => {
                self.bump();
                DescribeTarget::Cluster
            }
            Tok::Keyword(Keyword::Full) => {
                self.bump();
                self.expect_kw(Keyword::Schema)?;
                DescribeTarget::Schema { full: true }
            }
            Tok::Keyword(Keyword::Schema) => {
                self.bump();
                DescribeTarget::Schema { full: false }
            }
            Tok::Keyword(Keyword::Keyspaces) => {
                self.bump();
                DescribeTarget::Keyspaces
            }
            Tok::Keyword(Keyword::Only) if self.peek_n(1) != Tok::Keyword(Keyword::Keyspace) => {
                DescribeTarget::Generic(self.qualified_name("table")?)
            }
            Tok::Keyword(Keyword::Only) | Tok::Keyword(Keyword::Keyspace) => {
                let only = self.eat_kw(Keyword::Only);
                self.expect_kw(Keyword::Keyspace)?;
                let name = if Self::is_ident_tok(self.peek()) {
                    Some(self.keyspace_name()?)
                } else {
                    None
                };
                DescribeTarget::Keyspace { only, name }
            }
            Tok::Keyword(Keyword::Tables) => {
                self.bump();
                DescribeTarget::Tables
            }
            Tok::Keyword(Keyword::Table) => {
                self.bump();
                DescribeTarget::Table(self.table_name()?)
            }
            Tok::Keyword(Keyword::Index) => {
                self.bump();
                DescribeTarget::Index(self.qualified_name("index")?)
            }
            Tok::Keyword(Keyword::Materialized) => {
                self.bump();
                self.expect_kw(Keyword::View)?;
                DescribeTarget::MaterializedView(self.table_name()?)
            }
            Tok::Keyword(Keyword::Types) => {
                self.bump();
                DescribeTarget::Types
            }
            Tok::Keyword(Keyword::Functions) => {
                self.bump();
                DescribeTarget::Functions
            }
            Tok::Keyword(Keyword::Aggregates) => {
                self.bump();
                DescribeTarget::Aggregates
            }
            Tok::Keyword(Keyword::Type) if next_is_name => {
                self.bump();
                DescribeTarget::Type(self.user_type_name()?)
            }
            Tok::Keyword(Keyword::Function) if next_is_name => {
                self.bump();
                DescribeTarget::Function(self.function_name()?)
            }
            Tok::Keyword(Keyword::Aggregate) if next_is_name => {
                self.bump();
                DescribeTarget::Aggregate(self.function_name()?)
            }
            t if Self::is_ident_tok(t) => DescribeTarget::Generic(self.qualified_name("table")?),
            _ => return Err(self.no_viable()),
        };
        let with_internals = if self.eat_kw(Keyword::With) {
            self.expect_kw(Keyword::Internals)?;
            true
        } else {
            false
        };
        Ok(Statement::Describe(Describe {
            target,
            with_internals,
        }))
    }
}
