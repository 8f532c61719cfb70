//! Terms (`term`), selectors (`unaliasedSelector`) and types (`comparatorType`).
//!
//! One precedence-climbing parser serves both terms and selectors; `Mode` says whether
//! columns (and the selector-only forms) are allowed.

use super::{PResult, Parser};
use crate::ast::{
    BinaryOp, BindMarker, CellMetadata, Expr, Ident, Literal, QualifiedName, TypeExpr,
};
use crate::error::ParseErrorKind;
use crate::keyword::Keyword;
use crate::lexer::Tok;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Cassandra's `term`: values only.
    Term,
    /// Cassandra's `unaliasedSelector`: columns, `count(*)`, `writetime(c)` …
    Selector,
}

/// Names Cassandra refuses for user types (`Parser.g` `reservedTypeNames`).
const RESERVED_TYPE_NAMES: &[&str] = &[
    "byte",
    "complex",
    "enum",
    "date",
    "interval",
    "macaddr",
    "bitstring",
];

impl<'a> Parser<'a> {
    /// `term`.
    pub(crate) fn term(&mut self) -> PResult<Expr> {
        // A lone `?` (no operator after it) is most terms of a prepared statement: the
        // same marker the general path below produces, without its rule calls.
        if self.at(Tok::QMark)
            && self.depth < super::MAX_DEPTH
            && !matches!(
                self.peek_n(1),
                Tok::Plus | Tok::Minus | Tok::Star | Tok::Slash | Tok::Percent
            )
        {
            self.bump();
            self.operand_end = self.pos;
            return Ok(Expr::Bind(self.new_bind(None)));
        }
        self.expr(Mode::Term)
    }

    /// `unaliasedSelector`.
    pub(crate) fn selector_expr(&mut self) -> PResult<Expr> {
        self.expr(Mode::Selector)
    }

    pub(crate) fn expr(&mut self, mode: Mode) -> PResult<Expr> {
        self.enter()?;
        let r = self.binary(0, mode);
        self.leave();
        r
    }

    /// `termAddition` / `termMultiplication` by precedence climbing.
    fn binary(&mut self, min_bp: u8, mode: Mode) -> PResult<Expr> {
        let mut lhs = self.unary(mode)?;
        loop {
            let (op, bp) = match self.peek() {
                Tok::Plus => (BinaryOp::Add, 1),
                Tok::Minus => (BinaryOp::Sub, 1),
                Tok::Star => (BinaryOp::Mul, 2),
                Tok::Slash => (BinaryOp::Div, 2),
                Tok::Percent => (BinaryOp::Rem, 2),
                _ => break,
            };
            if bp < min_bp {
                break;
            }
            // `1 -1`: Cassandra lexes `-1` as one number token, which cannot follow a term.
            if op == BinaryOp::Sub && self.adjacent_negative_number(0) {
                break;
            }
            // `term + column` ends the term: UPDATE's prepend form `c = [x] + c`.
            if mode == Mode::Term && op == BinaryOp::Add && self.is_column_ref_at(1) {
                break;
            }
            self.bump();
            let rhs = self.binary(bp + 1, mode)?;
            lhs = Expr::Binary {
                op,
                left: Box::new(lhs),
                right: Box::new(rhs),
            };
        }
        Ok(lhs)
    }

    /// Whether the token `n` ahead starts a bare column reference (not a function call).
    pub(crate) fn is_column_ref_at(&self, n: usize) -> bool {
        Self::is_ident_tok(self.peek_n(n))
            && self.peek_n(n + 1) != Tok::LParen
            && !(self.peek_n(n + 1) == Tok::Dot && self.peek_n(n + 3) == Tok::LParen)
    }

    /// `termGroup`: optional unary minus, folded into numeric literals.
    fn unary(&mut self, mode: Mode) -> PResult<Expr> {
        if self.at(Tok::Minus) {
            if let Some(lit) = self.negative_literal() {
                return Ok(Expr::Literal(lit));
            }
            self.bump();
            self.enter()?;
            let inner = self.unary(mode);
            self.leave();
            return Ok(Expr::Negate(Box::new(inner?)));
        }
        let e = self.primary(mode)?;
        if mode == Mode::Selector {
            self.postfix(e)
        } else {
            Ok(e)
        }
    }

    /// Whether the token `n` ahead is a `-` glued to a number, duration, NaN or
    /// Infinity (one token in Cassandra's lexer).
    pub(crate) fn adjacent_negative_number(&self, n: usize) -> bool {
        let minus = self.tok_at(self.pos + n);
        let next = self.tok_at(self.pos + n + 1);
        minus.tok == Tok::Minus
            && next.start == minus.end
            && matches!(
                next.tok,
                Tok::Integer
                    | Tok::Float
                    | Tok::Duration
                    | Tok::Keyword(Keyword::Nan | Keyword::Infinity)
            )
    }

    /// `-` followed by a number, duration, NaN or Infinity: one negative literal.
    pub(crate) fn negative_literal(&mut self) -> Option<Literal> {
        if !self.at(Tok::Minus) {
            return None;
        }
        let next = self.tok_at(self.pos + 1);
        let lit = match next.tok {
            Tok::Integer => Literal::Integer(format!("-{}", self.text(next))),
            Tok::Float => Literal::Float(format!("-{}", self.text(next))),
            Tok::Duration => Literal::Duration(format!("-{}", self.text(next))),
            Tok::Keyword(Keyword::Nan) => Literal::NaN,
            Tok::Keyword(Keyword::Infinity) => Literal::NegInfinity,
            _ => return None,
        };
        self.pos += 2;
        self.operand_end = self.pos;
        Some(lit)
    }

    /// `constant` at the current token, if it is one (without a sign).
    pub(crate) fn constant(&mut self) -> Option<Literal> {
        let t = self.cur();
        let text = || self.text(t).to_string();
        let lit = match t.tok {
            Tok::Str => Literal::String(self.string_value(t)),
            Tok::Integer => Literal::Integer(text()),
            Tok::Float => Literal::Float(text()),
            Tok::Boolean => Literal::Boolean(self.text(t).eq_ignore_ascii_case("true")),
            Tok::Duration => Literal::Duration(text()),
            Tok::Uuid => Literal::Uuid(text()),
            Tok::Hex => Literal::Hex(text()),
            Tok::Keyword(Keyword::Nan) => Literal::NaN,
            Tok::Keyword(Keyword::Infinity) => Literal::Infinity,
            _ => return None,
        };
        self.bump();
        self.operand_end = self.pos;
        Some(lit)
    }

    /// A constant with an optional leading minus.
    pub(crate) fn signed_constant(&mut self) -> Option<Literal> {
        self.negative_literal().or_else(|| self.constant())
    }

    pub(crate) fn new_bind(&mut self, name: Option<Ident>) -> BindMarker {
        let m = BindMarker {
            index: self.binds.len(),
            name,
        };
        self.binds.push(m.clone());
        m
    }

    /// `marker`: `?` or `:name`, if at one.
    pub(crate) fn marker(&mut self) -> PResult<Option<BindMarker>> {
        if self.eat(Tok::QMark) {
            self.operand_end = self.pos;
            return Ok(Some(self.new_bind(None)));
        }
        if self.eat(Tok::Colon) {
            let name = self.ident()?;
            return Ok(Some(self.new_bind(Some(name))));
        }
        Ok(None)
    }

    /// `intValue`: INTEGER or a marker.
    pub(crate) fn int_value(&mut self) -> PResult<Expr> {
        if let Some(m) = self.marker()? {
            return Ok(Expr::Bind(m));
        }
        if self.at(Tok::Integer) {
            let t = self.bump();
            return Ok(Expr::Literal(Literal::Integer(self.text(t).to_string())));
        }
        if self.at(Tok::Minus)
            && self.peek_n(1) == Tok::Integer
            && let Some(l) = self.negative_literal()
        {
            return Ok(Expr::Literal(l));
        }
        Err(self.no_viable())
    }

    /// `simpleTerm` / `selectionGroupWithoutField`.
    fn primary(&mut self, mode: Mode) -> PResult<Expr> {
        if let Some(lit) = self.constant() {
            return Ok(Expr::Literal(lit));
        }
        if let Some(m) = self.marker()? {
            return Ok(Expr::Bind(m));
        }
        match self.peek() {
            Tok::Keyword(Keyword::Null) => {
                self.bump();
                Ok(Expr::Null)
            }
            Tok::LBracket => {
                self.bump();
                let items = self.expr_list(Tok::RBracket, mode)?;
                Ok(Expr::List(items))
            }
            Tok::LBrace => self.brace(mode),
            Tok::LParen => self.paren(mode),
            Tok::Keyword(Keyword::Cast) if self.peek_n(1) == Tok::LParen => {
                self.bump();
                self.bump();
                let e = self.expr(mode)?;
                self.expect_kw(Keyword::As)?;
                let ty = self.native_type()?;
                self.expect(Tok::RParen)?;
                Ok(Expr::Cast {
                    expr: Box::new(e),
                    ty,
                })
            }
            Tok::Keyword(Keyword::Count)
                if mode == Mode::Selector
                    && self.peek_n(1) == Tok::LParen
                    && self.peek_n(2) == Tok::Star =>
            {
                self.bump();
                self.bump();
                self.bump();
                self.expect(Tok::RParen)?;
                Ok(Expr::CountRows)
            }
            Tok::Keyword(k @ (Keyword::Writetime | Keyword::Maxwritetime | Keyword::Ttl))
                if mode == Mode::Selector && self.peek_n(1) == Tok::LParen =>
            {
                self.bump();
                self.bump();
                let col = self.ident()?;
                let column = self.postfix(Expr::Column(col))?;
                self.expect(Tok::RParen)?;
                let kind = match k {
                    Keyword::Writetime => CellMetadata::WriteTime,
                    Keyword::Maxwritetime => CellMetadata::MaxWriteTime,
                    _ => CellMetadata::Ttl,
                };
                Ok(Expr::CellMetadata {
                    kind,
                    column: Box::new(column),
                })
            }
            _ if self.is_function_start() => self.function_call(mode),
            t if mode == Mode::Selector && Self::is_ident_tok(t) => {
                let id = self.ident()?;
                // A column or a function name: ANTLR decides from the next token.
                self.operand_end = self.pos;
                Ok(Expr::Column(id))
            }
            _ => Err(self.no_viable()),
        }
    }

    fn is_function_name_tok(t: Tok) -> bool {
        match t {
            Tok::Ident | Tok::QuotedName => true,
            Tok::Keyword(k) => k.is_function_name(),
            _ => false,
        }
    }

    /// `functionName '('` ahead?
    fn is_function_start(&self) -> bool {
        (Self::is_function_name_tok(self.peek()) && self.peek_n(1) == Tok::LParen)
            || (Self::is_ident_tok(self.peek())
                && self.peek_n(1) == Tok::Dot
                && Self::is_function_name_tok(self.peek_n(2))
                && self.peek_n(3) == Tok::LParen)
    }

    /// `functionName`: `[ks.]allowedFunctionName`.
    pub(crate) fn function_name(&mut self) -> PResult<QualifiedName> {
        let keyspace = if self.peek_n(1) == Tok::Dot {
            let ks = self.keyspace_name()?;
            self.bump();
            Some(ks)
        } else {
            None
        };
        let name = self.allowed_function_name()?;
        Ok(QualifiedName::new(keyspace, name))
    }

    /// `allowedFunctionName`.
    pub(crate) fn allowed_function_name(&mut self) -> PResult<Ident> {
        if Self::is_function_name_tok(self.peek()) {
            let t = self.bump();
            Ok(self.ident_from(t))
        } else {
            Err(self.no_viable())
        }
    }

    /// `function` / `selectionFunction`.
    fn function_call(&mut self, mode: Mode) -> PResult<Expr> {
        let name = self.function_name()?;
        self.expect(Tok::LParen)?;
        let args = self.expr_list(Tok::RParen, mode)?;
        Ok(Expr::Function { name, args })
    }

    /// Whether the current token can start a term (or a selector in selector mode).
    pub(crate) fn can_start_expr(&self, mode: Mode) -> bool {
        match self.peek() {
            Tok::Str
            | Tok::Integer
            | Tok::Float
            | Tok::Boolean
            | Tok::Duration
            | Tok::Uuid
            | Tok::Hex
            | Tok::QMark
            | Tok::Colon
            | Tok::LBracket
            | Tok::LBrace
            | Tok::LParen
            | Tok::Minus
            | Tok::Keyword(Keyword::Null | Keyword::Nan | Keyword::Infinity | Keyword::Cast) => {
                true
            }
            t => {
                (Self::is_function_name_tok(t) && self.peek_n(1) == Tok::LParen)
                    || self.is_function_start()
                    || (mode == Mode::Selector && Self::is_ident_tok(t))
            }
        }
    }

    /// `(e (, e)*)? close` — the opening token is already consumed.
    fn expr_list(&mut self, close: Tok, mode: Mode) -> PResult<Vec<Expr>> {
        let mut items = Vec::new();
        if self.eat(close) {
            return Ok(items);
        }
        // The optional list is skipped by ANTLR when no term can start here.
        if !self.can_start_expr(mode) {
            return Err(self.mismatch(close.name()));
        }
        loop {
            items.push(self.expr(mode)?);
            if !self.eat(Tok::Comma) {
                break;
            }
        }
        self.expect(close)?;
        Ok(items)
    }

    /// `{}` set/map/user-type literals (`collectionLiteral`, `usertypeLiteral`,
    /// `selectionMapOrSet`).
    fn brace(&mut self, mode: Mode) -> PResult<Expr> {
        self.bump();
        if self.eat(Tok::RBrace) {
            return Ok(Expr::Set(Vec::new()));
        }
        if Self::is_ident_tok(self.peek()) && self.peek_n(1) == Tok::Colon {
            let mut fields = Vec::new();
            loop {
                let f = self.ident()?;
                self.expect(Tok::Colon)?;
                fields.push((f, self.expr(mode)?));
                if !self.eat(Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RBrace)?;
            return Ok(Expr::Udt(fields));
        }
        let first = self.expr(mode)?;
        if self.eat(Tok::Colon) {
            let mut entries = vec![(first, self.expr(mode)?)];
            while self.eat(Tok::Comma) {
                let k = self.expr(mode)?;
                self.expect(Tok::Colon)?;
                entries.push((k, self.expr(mode)?));
            }
            self.expect(Tok::RBrace)?;
            return Ok(Expr::Map(entries));
        }
        let mut items = vec![first];
        while self.eat(Tok::Comma) {
            items.push(self.expr(mode)?);
        }
        self.expect(Tok::RBrace)?;
        Ok(Expr::Set(items))
    }

    /// `(type) x` type hint, or a tuple (a parenthesised selector in selector mode).
    fn paren(&mut self, mode: Mode) -> PResult<Expr> {
        if let Some(ty) = self.try_type_hint(mode) {
            self.enter()?;
            let e = self.unary(mode);
            self.leave();
            return Ok(Expr::TypeHint {
                ty,
                expr: Box::new(e?),
            });
        }
        self.bump();
        let mut items = self.expr_list(Tok::RParen, mode)?;
        if items.is_empty() {
            // `()`: report the ')' as Cassandra does.
            self.pos -= 1;
            return Err(self.no_viable());
        }
        if mode == Mode::Selector && items.len() == 1 {
            return Ok(items.remove(0));
        }
        Ok(Expr::Tuple(items))
    }

    /// `'(' comparatorType ')'` followed by something a hint can apply to.
    fn try_type_hint(&mut self, mode: Mode) -> Option<TypeExpr> {
        if !Self::is_type_start(self.peek_n(1)) {
            return None;
        }
        let save = self.pos;
        self.bump();
        if let Ok(ty) = self.type_expr()
            && self.at(Tok::RParen)
            && self.can_follow_hint(mode)
        {
            self.bump();
            return Some(ty);
        }
        self.pos = save;
        None
    }

    fn can_follow_hint(&self, mode: Mode) -> bool {
        let next = self.tok_at(self.pos + 1);
        match next.tok {
            Tok::Str
            | Tok::Integer
            | Tok::Float
            | Tok::Boolean
            | Tok::Duration
            | Tok::Uuid
            | Tok::Hex
            | Tok::QMark
            | Tok::LBracket
            | Tok::LBrace
            | Tok::LParen
            | Tok::Keyword(Keyword::Null | Keyword::Nan | Keyword::Infinity | Keyword::Cast) => {
                true
            }
            // `(int) :name`, but not the `:` of a map entry (`{('a'): now()}`).
            Tok::Colon => Self::is_ident_tok(self.peek_n(2)) && self.peek_n(3) != Tok::LParen,
            // `(int) -1` hints a negative literal; `(a) - 1` is a subtraction.
            Tok::Minus => {
                let after = self.tok_at(self.pos + 2);
                after.start == next.end
                    && matches!(
                        after.tok,
                        Tok::Integer
                            | Tok::Float
                            | Tok::Duration
                            | Tok::Keyword(Keyword::Nan | Keyword::Infinity)
                    )
            }
            t => {
                (Self::is_function_name_tok(t) && self.peek_n(2) == Tok::LParen)
                    || (mode == Mode::Selector && Self::is_ident_tok(t))
            }
        }
    }

    /// `selectorModifier`: `.field` and `[elem]` / `[from..to]` suffixes.
    fn postfix(&mut self, mut e: Expr) -> PResult<Expr> {
        loop {
            if self.at(Tok::Dot) && Self::is_ident_tok(self.peek_n(1)) {
                self.bump();
                let field = self.ident()?;
                e = Expr::Field {
                    expr: Box::new(e),
                    field,
                };
            } else if self.eat(Tok::LBracket) {
                if self.eat(Tok::Range) {
                    let to = self.term()?;
                    e = Expr::Slice {
                        expr: Box::new(e),
                        from: None,
                        to: Some(Box::new(to)),
                    };
                } else {
                    let k = self.term()?;
                    if self.eat(Tok::Range) {
                        let to = if self.at(Tok::RBracket) {
                            None
                        } else {
                            Some(Box::new(self.term()?))
                        };
                        e = Expr::Slice {
                            expr: Box::new(e),
                            from: Some(Box::new(k)),
                            to,
                        };
                    } else {
                        e = Expr::Element {
                            expr: Box::new(e),
                            key: Box::new(k),
                        };
                    }
                }
                self.expect(Tok::RBracket)?;
            } else {
                return Ok(e);
            }
        }
    }

    // ---- types --------------------------------------------------------------------

    fn is_type_start(t: Tok) -> bool {
        match t {
            Tok::Ident | Tok::QuotedName | Tok::Str => true,
            Tok::Keyword(k) => {
                k.native_type().is_some()
                    || k.is_basic_unreserved()
                    || matches!(k, Keyword::Set | Keyword::Key)
            }
            _ => false,
        }
    }

    /// `comparatorType`.
    pub(crate) fn type_expr(&mut self) -> PResult<TypeExpr> {
        self.enter()?;
        let r = self.type_inner();
        self.leave();
        r
    }

    fn type_args_open(&mut self) -> PResult<()> {
        self.bump();
        self.expect(Tok::Lt).map(|_| ())
    }

    fn type_inner(&mut self) -> PResult<TypeExpr> {
        let t = self.peek();
        if let Tok::Keyword(k) = t {
            if let Some(n) = k.native_type() {
                self.bump();
                self.operand_end = self.pos;
                return Ok(TypeExpr::Native(n));
            }
            let parameterised = self.peek_n(1) == Tok::Lt;
            match k {
                Keyword::Map if parameterised => {
                    self.type_args_open()?;
                    let key = self.type_expr()?;
                    self.expect(Tok::Comma)?;
                    let value = self.type_expr()?;
                    self.expect(Tok::Gt)?;
                    return Ok(TypeExpr::Map(Box::new(key), Box::new(value)));
                }
                Keyword::List | Keyword::Set | Keyword::Frozen if parameterised => {
                    self.type_args_open()?;
                    let inner = Box::new(self.type_expr()?);
                    self.expect(Tok::Gt)?;
                    return Ok(match k {
                        Keyword::List => TypeExpr::List(inner),
                        Keyword::Set => TypeExpr::Set(inner),
                        _ => TypeExpr::Frozen(inner),
                    });
                }
                Keyword::Set => {
                    self.bump();
                    return Err(self.mismatch("'<'"));
                }
                Keyword::Tuple if parameterised => {
                    self.type_args_open()?;
                    let mut items = vec![self.type_expr()?];
                    while self.eat(Tok::Comma) {
                        items.push(self.type_expr()?);
                    }
                    self.expect(Tok::Gt)?;
                    return Ok(TypeExpr::Tuple(items));
                }
                Keyword::Vector if parameterised => {
                    self.type_args_open()?;
                    let inner = self.type_expr()?;
                    self.expect(Tok::Comma)?;
                    let n = self.expect(Tok::Integer)?;
                    let dim = self.text(n).parse::<u32>().map_err(|_| {
                        // Cassandra's Integer.parseInt failure, verbatim.
                        self.recognition(
                            ParseErrorKind::Recognition,
                            format!(
                                "Failed parsing statement: [{}] reason: NumberFormatException For input string: \"{}\"",
                                self.src,
                                self.text(n)
                            ),
                        )
                    })?;
                    self.expect(Tok::Gt)?;
                    return Ok(TypeExpr::Vector(Box::new(inner), dim));
                }
                _ => {}
            }
        }
        if t == Tok::Str {
            let s = self.string_literal()?;
            return Ok(TypeExpr::Custom(s));
        }
        Ok(TypeExpr::User(self.user_type_name()?))
    }

    /// `native_type`.
    pub(crate) fn native_type(&mut self) -> PResult<TypeExpr> {
        match self.peek() {
            Tok::Keyword(k) => match k.native_type() {
                Some(n) => {
                    self.bump();
                    Ok(TypeExpr::Native(n))
                }
                None => Err(self.no_viable()),
            },
            _ => Err(self.no_viable()),
        }
    }

    /// `userTypeName`: `[ks.]non_type_ident`.
    pub(crate) fn user_type_name(&mut self) -> PResult<QualifiedName> {
        let keyspace = if self.peek_n(1) == Tok::Dot && Self::is_ident_tok(self.peek()) {
            let ks = self.ident()?;
            self.bump();
            Some(ks)
        } else {
            None
        };
        let ok = match self.peek() {
            Tok::Ident | Tok::QuotedName => true,
            Tok::Keyword(k) => k.is_basic_unreserved() || k == Keyword::Key,
            _ => false,
        };
        if !ok {
            // `date`, `ttl` … can only be the keyspace part: Cassandra then wants the '.'.
            if keyspace.is_none() && Self::is_ident_tok(self.peek()) {
                self.bump();
                return Err(self.mismatch_exact("'.'"));
            }
            return Err(self.no_viable());
        }
        let t = self.bump();
        if keyspace.is_none() {
            self.ll2_end = self.pos;
        }
        let name = self.ident_from(t);
        if t.tok == Tok::Ident && RESERVED_TYPE_NAMES.contains(&name.as_str()) {
            return Err(self.recognition(
                ParseErrorKind::Recognition,
                format!("Invalid (reserved) user type name {}", self.text(t)),
            ));
        }
        Ok(QualifiedName::new(keyspace, name))
    }
}
