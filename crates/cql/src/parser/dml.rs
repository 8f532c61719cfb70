//! SELECT, INSERT, UPDATE, DELETE, BATCH and the WHERE / IF / USING clauses.

use super::{PResult, Parser};
use crate::ast::*;
use crate::error::ParseErrorKind;
use crate::keyword::Keyword;
use crate::lexer::Tok;

impl<'a> Parser<'a> {
    /// `selectStatement`, plus ScyllaDB's trailing `BYPASS CACHE` / `USING TIMEOUT d`.
    pub(crate) fn select_statement(&mut self) -> PResult<SelectStatement> {
        self.expect_kw(Keyword::Select)?;
        // JSON and DISTINCT are also valid column names: they are keywords only when a
        // selector follows (Cassandra's syntactic predicates).
        let json = self.at_kw(Keyword::Json) && self.keyword_then_selection();
        if json {
            self.bump();
        }
        let distinct = self.at_kw(Keyword::Distinct) && self.keyword_then_selection();
        if distinct {
            self.bump();
        }
        let selection = self.selection()?;
        self.expect_kw(Keyword::From)?;
        let table = self.table_name()?;
        let mut s = SelectStatement {
            json,
            distinct,
            selection,
            table,
            where_clause: Vec::new(),
            group_by: Vec::new(),
            order_by: Vec::new(),
            per_partition_limit: None,
            limit: None,
            allow_filtering: false,
            bypass_cache: false,
            timeout: None,
        };
        if self.eat_kw(Keyword::Where) {
            s.where_clause = self.where_clause()?;
        }
        if self.eat_kw(Keyword::Group) {
            self.expect_kw(Keyword::By)?;
            loop {
                s.group_by.push(self.selector_expr()?);
                if !self.eat(Tok::Comma) {
                    break;
                }
            }
        }
        if self.eat_kw(Keyword::Order) {
            self.expect_kw(Keyword::By)?;
            loop {
                s.order_by.push(self.ordering()?);
                if !self.eat(Tok::Comma) {
                    break;
                }
            }
        }
        if self.at_kw(Keyword::Per) && self.peek_n(1) == Tok::Keyword(Keyword::Partition) {
            self.bump();
            self.bump();
            self.expect_kw(Keyword::Limit)?;
            s.per_partition_limit = Some(self.int_value()?);
        }
        if self.eat_kw(Keyword::Limit) {
            s.limit = Some(self.int_value()?);
        }
        if self.eat_kw(Keyword::Allow) {
            self.expect_kw(Keyword::Filtering)?;
            s.allow_filtering = true;
        }
        loop {
            if self.at_word("bypass") {
                self.bump();
                if !self.at_word("cache") {
                    return Err(self.mismatch("K_CACHE"));
                }
                self.bump();
                s.bypass_cache = true;
            } else if self.at_kw(Keyword::Using) && self.peek_n(1) == Tok::Ident {
                self.bump();
                let using = self.using_items(false, true)?;
                s.timeout = using.timeout;
            } else {
                return Ok(s);
            }
        }
    }

    /// Cassandra's `(K_JSON selectClause)=>` predicate: the word is a keyword only if a
    /// selector list follows it and is itself followed by FROM (`SELECT json AS j FROM t`
    /// selects column `json`; `SELECT JSON AS FROM t` selects column `as` as JSON).
    fn keyword_then_selection(&mut self) -> bool {
        if !self.can_start_selection_at(1) {
            return false;
        }
        let saved = (
            self.pos,
            self.binds.len(),
            self.depth,
            self.operand_end,
            self.ll2_end,
            self.where_end,
        );
        self.bump();
        if self.at_kw(Keyword::Distinct) && self.keyword_then_selection() {
            self.bump();
        }
        let ok = self.selection().is_ok() && self.at_kw(Keyword::From);
        let (pos, binds, depth, operand_end, ll2_end, where_end) = saved;
        self.pos = pos;
        self.binds.truncate(binds);
        self.depth = depth;
        (self.operand_end, self.ll2_end, self.where_end) = (operand_end, ll2_end, where_end);
        ok
    }

    /// Whether the token `n` ahead can start `selectClause`.
    fn can_start_selection_at(&self, n: usize) -> bool {
        match self.peek_n(n) {
            Tok::Star
            | Tok::Minus
            | Tok::LParen
            | Tok::LBracket
            | Tok::LBrace
            | Tok::QMark
            | Tok::Colon
            | Tok::Str
            | Tok::Integer
            | Tok::Float
            | Tok::Boolean
            | Tok::Duration
            | Tok::Uuid
            | Tok::Hex => true,
            Tok::Keyword(
                Keyword::Null
                | Keyword::Nan
                | Keyword::Infinity
                | Keyword::Cast
                | Keyword::Token
                | Keyword::Count
                | Keyword::Writetime
                | Keyword::Maxwritetime
                | Keyword::Ttl,
            ) => true,
            t => Self::is_ident_tok(t),
        }
    }

    /// `selectors`.
    pub(crate) fn selection(&mut self) -> PResult<Selection> {
        if self.eat(Tok::Star) {
            return Ok(Selection::Wildcard);
        }
        let mut list = Vec::with_capacity(self.items_before(Tok::Keyword(Keyword::From)));
        loop {
            let expr = self.selector_expr()?;
            let alias = if self.eat_kw(Keyword::As) {
                Some(self.ident()?)
            } else {
                None
            };
            list.push(Selector { expr, alias });
            if !self.eat(Tok::Comma) {
                return Ok(Selection::List(list));
            }
        }
    }

    /// `orderByClause`.
    fn ordering(&mut self) -> PResult<Ordering> {
        let column = self.cident()?;
        let ann_of = if self.at_kw(Keyword::Ann) && self.peek_n(1) == Tok::Keyword(Keyword::Of) {
            self.bump();
            self.bump();
            Some(self.term()?)
        } else {
            None
        };
        let order = if self.eat_kw(Keyword::Desc) {
            Order::Desc
        } else {
            self.eat_kw(Keyword::Asc);
            Order::Asc
        };
        Ok(Ordering {
            column,
            ann_of,
            order,
        })
    }

    /// `whereClause`.
    pub(crate) fn where_clause(&mut self) -> PResult<Vec<Relation>> {
        let mut out = vec![self.relation()?];
        while self.eat_kw(Keyword::And) {
            out.push(self.relation()?);
        }
        self.where_end = self.pos;
        Ok(out)
    }

    /// `relationType`, if at one.
    fn relation_op(&mut self) -> Option<Operator> {
        let op = match self.peek() {
            Tok::Eq => Operator::Eq,
            Tok::Lt => Operator::Lt,
            Tok::Lte => Operator::Lte,
            Tok::Gt => Operator::Gt,
            Tok::Gte => Operator::Gte,
            Tok::Neq => Operator::Neq,
            _ => return None,
        };
        self.bump();
        Some(op)
    }

    /// `tupleOfIdentifiers`.
    fn tuple_of_identifiers(&mut self) -> PResult<Vec<Ident>> {
        self.expect(Tok::LParen)?;
        let mut ids = vec![self.cident()?];
        while self.eat(Tok::Comma) {
            ids.push(self.cident()?);
        }
        self.expect(Tok::RParen)?;
        Ok(ids)
    }

    /// `singleColumnInValues` / `multiColumnInValues`: `(…)` or a marker for the list.
    fn in_values(&mut self) -> PResult<RelationValue> {
        if let Some(m) = self.marker()? {
            return Ok(RelationValue::Single(Expr::Bind(m)));
        }
        if !self.eat(Tok::LParen) {
            return Err(self.no_viable());
        }
        let mut items = Vec::new();
        if !self.eat(Tok::RParen) {
            loop {
                items.push(self.term()?);
                if !self.eat(Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RParen)?;
        }
        Ok(RelationValue::List(items))
    }

    fn between_values(&mut self) -> PResult<RelationValue> {
        let a = self.term()?;
        self.expect_kw(Keyword::And)?;
        let b = self.term()?;
        Ok(RelationValue::Between(Box::new(a), Box::new(b)))
    }

    /// `relation`.
    fn relation(&mut self) -> PResult<Relation> {
        self.enter()?;
        let r = self.relation_inner();
        self.leave();
        r
    }

    fn relation_inner(&mut self) -> PResult<Relation> {
        if self.at_kw(Keyword::Token) && self.peek_n(1) == Tok::LParen {
            self.bump();
            let cols = self.tuple_of_identifiers()?;
            let target = RelationTarget::Token(cols);
            if self.eat_kw(Keyword::Between) {
                let value = self.between_values()?;
                return Ok(Relation {
                    target,
                    op: Operator::Between,
                    value,
                });
            }
            let op = self.relation_op().ok_or_else(|| self.no_viable())?;
            let value = RelationValue::Single(self.term()?);
            return Ok(Relation { target, op, value });
        }
        // Cassandra's lexer has an `expr(` token: no blank before the parenthesis.
        if self.at_word("expr")
            && self.peek_n(1) == Tok::LParen
            && self.tok_at(self.pos + 1).start == self.cur().end
        {
            // `customIndexExpression`: expr(index_name, term)
            self.bump();
            self.bump();
            let index = self.qualified_name("index")?;
            self.expect(Tok::Comma)?;
            let value = RelationValue::Single(self.term()?);
            self.expect(Tok::RParen)?;
            return Ok(Relation {
                target: RelationTarget::CustomIndex(index),
                op: Operator::CustomIndex,
                value,
            });
        }
        if self.at(Tok::LParen) {
            let is_tuple = (Self::is_ident_tok(self.peek_n(1))
                || self.peek_n(1) == Tok::EmptyQuotedName)
                && matches!(self.peek_n(2), Tok::Comma | Tok::RParen);
            if !is_tuple {
                self.bump();
                let r = self.relation()?;
                self.expect(Tok::RParen)?;
                return Ok(r);
            }
            let cols = self.tuple_of_identifiers()?;
            let target = RelationTarget::Tuple(cols);
            if let Some(op) = self.in_operator()? {
                let value = self.in_values()?;
                return Ok(Relation { target, op, value });
            }
            if self.eat_kw(Keyword::Between) {
                let value = self.between_values()?;
                return Ok(Relation {
                    target,
                    op: Operator::Between,
                    value,
                });
            }
            let op = self.relation_op().ok_or_else(|| self.no_viable())?;
            // `multiColumnValue`: a tuple literal or a marker, nothing else.
            if !matches!(self.peek(), Tok::LParen | Tok::QMark | Tok::Colon) {
                return Err(self.no_viable_from(self.pos - 1));
            }
            let value = RelationValue::Single(self.term()?);
            return Ok(Relation { target, op, value });
        }
        let column = self.cident()?;
        if self.eat(Tok::LBracket) {
            let key = self.term()?;
            self.expect(Tok::RBracket)?;
            let op = self.relation_op().ok_or_else(|| self.no_viable())?;
            let value = RelationValue::Single(self.term()?);
            return Ok(Relation {
                target: RelationTarget::Element {
                    column,
                    key: Box::new(key),
                },
                op,
                value,
            });
        }
        let target = RelationTarget::Column(column);
        if let Some(op) = self.relation_op() {
            return Ok(Relation {
                target,
                op,
                value: RelationValue::Single(self.term()?),
            });
        }
        if let Some(op) = self.in_operator()? {
            let value = self.in_values()?;
            return Ok(Relation { target, op, value });
        }
        if let Some(op) = self.contains_operator()? {
            return Ok(Relation {
                target,
                op,
                value: RelationValue::Single(self.term()?),
            });
        }
        match self.peek() {
            Tok::Keyword(Keyword::Between) => {
                self.bump();
                let value = self.between_values()?;
                Ok(Relation {
                    target,
                    op: Operator::Between,
                    value,
                })
            }
            Tok::Keyword(Keyword::Like) => {
                self.bump();
                Ok(Relation {
                    target,
                    op: Operator::Like,
                    value: RelationValue::Single(self.term()?),
                })
            }
            Tok::Keyword(Keyword::Is) => {
                self.bump();
                self.expect_kw(Keyword::Not)?;
                self.expect_kw(Keyword::Null)?;
                Ok(Relation {
                    target,
                    op: Operator::IsNotNull,
                    value: RelationValue::Null,
                })
            }
            _ => Err(self.no_viable()),
        }
    }

    /// `inOperator`: IN / NOT IN, if at one.
    fn in_operator(&mut self) -> PResult<Option<Operator>> {
        if self.eat_kw(Keyword::In) {
            return Ok(Some(Operator::In));
        }
        if self.at_kw(Keyword::Not) && self.peek_n(1) == Tok::Keyword(Keyword::In) {
            self.bump();
            self.bump();
            return Ok(Some(Operator::NotIn));
        }
        Ok(None)
    }

    /// `containsOperator`: [NOT] CONTAINS [KEY], if at one.
    fn contains_operator(&mut self) -> PResult<Option<Operator>> {
        let negated = self.at_kw(Keyword::Not) && self.peek_n(1) == Tok::Keyword(Keyword::Contains);
        if negated {
            self.bump();
        }
        if !self.eat_kw(Keyword::Contains) {
            return Ok(None);
        }
        // `CONTAINS KEY` unless KEY is itself the value (a column can't be a term).
        let key = self.at_kw(Keyword::Key);
        if key {
            self.bump();
        }
        Ok(Some(match (negated, key) {
            (false, false) => Operator::Contains,
            (false, true) => Operator::ContainsKey,
            (true, false) => Operator::NotContains,
            (true, true) => Operator::NotContainsKey,
        }))
    }

    /// `IF EXISTS | IF cond AND …`, if present.
    fn conditions(&mut self) -> PResult<Option<Conditions>> {
        if !self.eat_kw(Keyword::If) {
            return Ok(None);
        }
        // EXISTS is also a valid column name.
        if self.at_kw(Keyword::Exists)
            && !matches!(
                self.peek_n(1),
                Tok::Eq
                    | Tok::Lt
                    | Tok::Lte
                    | Tok::Gt
                    | Tok::Gte
                    | Tok::Neq
                    | Tok::LBracket
                    | Tok::Dot
                    | Tok::Keyword(Keyword::In | Keyword::Contains)
            )
        {
            self.bump();
            self.ll2_end = self.pos;
            return Ok(Some(Conditions::Exists));
        }
        let mut out = vec![self.column_condition()?];
        while self.eat_kw(Keyword::And) {
            out.push(self.column_condition()?);
        }
        Ok(Some(Conditions::Columns(out)))
    }

    /// `columnCondition`.
    fn column_condition(&mut self) -> PResult<Condition> {
        let column = self.cident()?;
        let target = if self.eat(Tok::LBracket) {
            let key = self.term()?;
            self.expect(Tok::RBracket)?;
            ConditionTarget::Element { column, key }
        } else if self.eat(Tok::Dot) {
            let field = self.ident()?;
            ConditionTarget::Field { column, field }
        } else {
            ConditionTarget::Column(column)
        };
        if let Some(op) = self.relation_op() {
            return Ok(Condition {
                target,
                op,
                value: RelationValue::Single(self.term()?),
            });
        }
        if let Some(op) = self.in_operator()? {
            let value = self.in_values()?;
            return Ok(Condition { target, op, value });
        }
        if matches!(target, ConditionTarget::Column(_))
            && let Some(op) = self.contains_operator()?
        {
            return Ok(Condition {
                target,
                op,
                value: RelationValue::Single(self.term()?),
            });
        }
        Err(self.no_viable())
    }

    /// `usingClause` (and ScyllaDB's TIMEOUT), if present.
    fn using_clause(&mut self, allow_ttl: bool) -> PResult<Using> {
        if !self.eat_kw(Keyword::Using) {
            return Ok(Using::default());
        }
        self.using_items(allow_ttl, false)
    }

    /// `usingClauseObjective (AND usingClauseObjective)*` after USING.
    fn using_items(&mut self, allow_ttl: bool, timeout_only: bool) -> PResult<Using> {
        let mut u = Using::default();
        loop {
            if !timeout_only && self.eat_kw(Keyword::Timestamp) {
                u.timestamp = Some(self.int_value()?);
            } else if !timeout_only && allow_ttl && self.eat_kw(Keyword::Ttl) {
                u.ttl = Some(self.int_value()?);
            } else if self.at_word("timeout") {
                self.bump();
                u.timeout = Some(self.timeout_value()?);
            } else if timeout_only {
                return Err(self.mismatch("K_TIMEOUT"));
            } else if !allow_ttl {
                return Err(self.mismatch("K_TIMESTAMP"));
            } else {
                return Err(self.no_viable());
            }
            if !self.eat_kw(Keyword::And) {
                return Ok(u);
            }
        }
    }

    /// A duration literal or a bind marker.
    fn timeout_value(&mut self) -> PResult<Expr> {
        if let Some(m) = self.marker()? {
            return Ok(Expr::Bind(m));
        }
        if self.at(Tok::Duration) {
            let t = self.bump();
            return Ok(Expr::Literal(Literal::Duration(self.text(t).to_string())));
        }
        Err(self.mismatch("DURATION"))
    }

    /// `insertStatement`.
    pub(crate) fn insert_statement(&mut self) -> PResult<InsertStatement> {
        self.expect_kw(Keyword::Insert)?;
        self.expect_kw(Keyword::Into)?;
        let table = self.table_name()?;
        let values = if self.eat_kw(Keyword::Json) {
            let value = if let Some(m) = self.marker()? {
                Expr::Bind(m)
            } else if self.at(Tok::Str) {
                Expr::Literal(Literal::String(self.string_literal()?))
            } else {
                return Err(self.no_viable());
            };
            let mut default_unset = false;
            if self.eat_kw(Keyword::Default) {
                if self.eat_kw(Keyword::Unset) {
                    default_unset = true;
                } else if !self.eat_kw(Keyword::Null) {
                    return Err(self.no_viable());
                }
            }
            InsertValues::Json {
                value,
                default_unset,
            }
        } else {
            if !self.eat(Tok::LParen) {
                return Err(self.no_viable());
            }
            let mut columns = Vec::with_capacity(self.items_before(Tok::RParen));
            columns.push(self.cident()?);
            while self.eat(Tok::Comma) {
                columns.push(self.cident()?);
            }
            self.expect(Tok::RParen)?;
            self.expect_kw(Keyword::Values)?;
            self.expect(Tok::LParen)?;
            // As many values as columns, unless the statement is wrong anyway.
            let mut values = Vec::with_capacity(columns.len());
            values.push(self.term()?);
            while self.eat(Tok::Comma) {
                values.push(self.term()?);
            }
            self.expect(Tok::RParen)?;
            InsertValues::Values { columns, values }
        };
        let if_not_exists = self.if_not_exists()?;
        let using = self.using_clause(true)?;
        Ok(InsertStatement {
            table,
            values,
            if_not_exists,
            using,
        })
    }

    /// `updateStatement`.
    pub(crate) fn update_statement(&mut self) -> PResult<UpdateStatement> {
        self.expect_kw(Keyword::Update)?;
        let table = self.table_name()?;
        let using = self.using_clause(true)?;
        self.expect_kw(Keyword::Set)?;
        let mut assignments = Vec::with_capacity(self.items_before(Tok::Keyword(Keyword::Where)));
        assignments.push(self.assignment()?);
        while self.eat(Tok::Comma) {
            let next = self.assignment()?;
            if assignments.iter().any(|a| {
                a.column.name == next.column.name && !assignments_compatible(&a.op, &next.op)
            }) {
                return Err(self.recognition(
                    ParseErrorKind::Recognition,
                    format!(
                        "Multiple incompatible setting of column {}",
                        next.column.name
                    ),
                ));
            }
            assignments.push(next);
        }
        self.expect_kw(Keyword::Where)?;
        let where_clause = self.where_clause()?;
        let conditions = self.conditions()?;
        Ok(UpdateStatement {
            table,
            using,
            assignments,
            where_clause,
            conditions,
        })
    }

    /// `columnOperation`.
    fn assignment(&mut self) -> PResult<Assignment> {
        let column = self.cident()?;
        let op = match self.peek() {
            Tok::Eq => {
                self.bump();
                self.normal_column_operation(&column)?
            }
            Tok::PlusEq => {
                self.bump();
                AssignmentOp::Add(self.term()?)
            }
            Tok::MinusEq => {
                self.bump();
                AssignmentOp::Subtract(self.term()?)
            }
            Tok::LBracket => {
                self.bump();
                let key = self.term()?;
                self.expect(Tok::RBracket)?;
                self.expect(Tok::Eq)?;
                AssignmentOp::SetElement {
                    key: Box::new(key),
                    value: self.term()?,
                }
            }
            Tok::Dot => {
                self.bump();
                let field = self.ident()?;
                self.expect(Tok::Eq)?;
                AssignmentOp::SetField {
                    field: Box::new(field),
                    value: self.term()?,
                }
            }
            _ => return Err(self.no_viable()),
        };
        Ok(Assignment { column, op })
    }

    /// `normalColumnOperation`: `t`, `t + c`, `c + t`, `c - t`.
    fn normal_column_operation(&mut self, column: &Ident) -> PResult<AssignmentOp> {
        if self.is_column_ref_at(0)
            && self.peek_n(1) == Tok::Minus
            && self.adjacent_negative_number(1)
        {
            // `c = c -1` lexes in Cassandra as `c INTEGER(-1)`: an addition of -1.
            let other = self.cident()?;
            if other.name != column.name {
                return Err(self.recognition(
                    ParseErrorKind::Recognition,
                    "Only expressions of the form X = X -<value> are supported.",
                ));
            }
            let t = self.term()?;
            return Ok(AssignmentOp::Add(t));
        }
        if self.is_column_ref_at(0) && matches!(self.peek_n(1), Tok::Plus | Tok::Minus) {
            let other = self.cident()?;
            let plus = self.bump().tok == Tok::Plus;
            if other.name != column.name {
                return Err(self.recognition(
                    ParseErrorKind::Recognition,
                    format!(
                        "Only expressions of the form X = X {}<value> are supported.",
                        if plus { "+" } else { "-" }
                    ),
                ));
            }
            let t = self.term()?;
            return Ok(if plus {
                AssignmentOp::Add(t)
            } else {
                AssignmentOp::Subtract(t)
            });
        }
        let t = self.term()?;
        if self.eat(Tok::Plus) {
            let other = self.cident()?;
            if other.name != column.name {
                return Err(self.recognition(
                    ParseErrorKind::Recognition,
                    "Only expressions of the form X = <value> + X are supported.",
                ));
            }
            return Ok(AssignmentOp::Prepend(t));
        }
        Ok(AssignmentOp::Set(t))
    }

    /// `deleteStatement`.
    pub(crate) fn delete_statement(&mut self) -> PResult<DeleteStatement> {
        self.expect_kw(Keyword::Delete)?;
        let mut columns = Vec::new();
        if !self.at_kw(Keyword::From) {
            loop {
                columns.push(self.deletion()?);
                if !self.eat(Tok::Comma) {
                    break;
                }
            }
        }
        self.expect_kw(Keyword::From)?;
        let table = self.table_name()?;
        let using = self.using_clause(false)?;
        self.expect_kw(Keyword::Where)?;
        let where_clause = self.where_clause()?;
        let conditions = self.conditions()?;
        Ok(DeleteStatement {
            columns,
            table,
            using,
            where_clause,
            conditions,
        })
    }

    /// `deleteOp`.
    fn deletion(&mut self) -> PResult<Deletion> {
        let column = self.cident()?;
        if self.eat(Tok::LBracket) {
            let key = self.term()?;
            self.expect(Tok::RBracket)?;
            return Ok(Deletion::Element { column, key });
        }
        if self.eat(Tok::Dot) {
            let field = self.ident()?;
            return Ok(Deletion::Field { column, field });
        }
        Ok(Deletion::Column(column))
    }

    /// `batchStatement`.
    pub(crate) fn batch_statement(&mut self) -> PResult<BatchStatement> {
        self.expect_kw(Keyword::Begin)?;
        let kind = if self.eat_kw(Keyword::Unlogged) {
            BatchKind::Unlogged
        } else if self.eat_kw(Keyword::Counter) {
            BatchKind::Counter
        } else {
            BatchKind::Logged
        };
        self.expect_kw(Keyword::Batch)?;
        let using = self.using_clause(true)?;
        let mut statements = Vec::new();
        loop {
            let child = match self.peek() {
                Tok::Keyword(Keyword::Insert) => BatchChild::Insert(self.insert_statement()?),
                Tok::Keyword(Keyword::Update) => BatchChild::Update(self.update_statement()?),
                Tok::Keyword(Keyword::Delete) => BatchChild::Delete(self.delete_statement()?),
                _ => break,
            };
            statements.push(child);
            self.eat(Tok::Semi);
        }
        self.expect_kw(Keyword::Apply)?;
        self.expect_kw(Keyword::Batch)?;
        Ok(BatchStatement {
            kind,
            using,
            statements,
        })
    }
}

/// Whether two operations on the same column may appear in one UPDATE (Cassandra's
/// `Operation.RawUpdate.isCompatibleWith`): a plain `c = term` conflicts with anything,
/// and a UDT field may be set only once.
fn assignments_compatible(a: &AssignmentOp, b: &AssignmentOp) -> bool {
    match (a, b) {
        (AssignmentOp::Set(_), _) | (_, AssignmentOp::Set(_)) => false,
        (AssignmentOp::SetField { field: f1, .. }, AssignmentOp::SetField { field: f2, .. }) => {
            f1.name != f2.name
        }
        _ => true,
    }
}
