//! Recursive-descent parser over the token vector; expressions use precedence climbing.
//!
//! Rules follow `Parser.g` rule by rule (`selectStatement`, `relation`, `term` …); the
//! rule name is given in each function's comment. Where ANTLR used syntactic predicates
//! or backtracking we look ahead a fixed number of tokens instead.

mod auth;
mod ddl;
mod dml;
mod expr;

use crate::ast::{BindMarker, Ident, ParsedStatement, QualifiedName, Statement};
use crate::error::{ParseError, ParseErrorKind, line_col};
use crate::keyword::Keyword;
use crate::lexer::{Tok, Token, tokenize};

pub(crate) type PResult<T> = Result<T, ParseError>;

/// Nesting limit for expressions and types: deeper input is rejected, not a stack overflow.
const MAX_DEPTH: u32 = 128;

pub(crate) struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token>,
    pos: usize,
    binds: Vec<BindMarker>,
    depth: u32,
}

/// Parses exactly one statement, with optional trailing semicolons.
pub(crate) fn parse_one(src: &str) -> PResult<ParsedStatement> {
    let mut p = Parser::new(src)?;
    let statement = p.statement()?;
    while p.eat(Tok::Semi) {}
    p.expect(Tok::Eof)?;
    Ok(ParsedStatement {
        statement,
        bind_markers: p.binds,
    })
}

/// Parses a script: statements separated by `;`.
pub(crate) fn parse_script(src: &str) -> PResult<Vec<ParsedStatement>> {
    let mut p = Parser::new(src)?;
    let mut out = Vec::new();
    loop {
        while p.eat(Tok::Semi) {}
        if p.at(Tok::Eof) {
            return Ok(out);
        }
        let statement = p.statement()?;
        out.push(ParsedStatement {
            statement,
            bind_markers: std::mem::take(&mut p.binds),
        });
        if !p.at(Tok::Eof) {
            p.expect(Tok::Semi)?;
        }
    }
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> PResult<Self> {
        Ok(Parser {
            src,
            toks: tokenize(src)?,
            pos: 0,
            binds: Vec::new(),
            depth: 0,
        })
    }

    // ---- token access -------------------------------------------------------------

    fn tok_at(&self, i: usize) -> Token {
        // The vector always ends with Eof; clamp lookahead to it.
        let last = self.toks.len().saturating_sub(1);
        self.toks.get(i.min(last)).copied().unwrap_or(Token {
            tok: Tok::Eof,
            start: 0,
            end: 0,
        })
    }

    fn cur(&self) -> Token {
        self.tok_at(self.pos)
    }

    fn peek(&self) -> Tok {
        self.cur().tok
    }

    fn peek_n(&self, n: usize) -> Tok {
        self.tok_at(self.pos + n).tok
    }

    fn bump(&mut self) -> Token {
        let t = self.cur();
        if t.tok != Tok::Eof {
            self.pos += 1;
        }
        t
    }

    fn at(&self, t: Tok) -> bool {
        self.peek() == t
    }

    fn at_kw(&self, k: Keyword) -> bool {
        self.peek() == Tok::Keyword(k)
    }

    fn eat(&mut self, t: Tok) -> bool {
        if self.at(t) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn eat_kw(&mut self, k: Keyword) -> bool {
        self.eat(Tok::Keyword(k))
    }

    fn expect(&mut self, t: Tok) -> PResult<Token> {
        if self.at(t) {
            Ok(self.bump())
        } else {
            Err(self.mismatch(t.name()))
        }
    }

    fn expect_kw(&mut self, k: Keyword) -> PResult<()> {
        self.expect(Tok::Keyword(k)).map(|_| ())
    }

    /// Whether the current token is an unquoted identifier spelled `word` (lower case):
    /// ScyllaDB's extension words (TIMEOUT, BYPASS, CACHE) are not Cassandra keywords.
    fn at_word(&self, word: &str) -> bool {
        self.peek() == Tok::Ident && self.text(self.cur()).eq_ignore_ascii_case(word)
    }

    fn text(&self, t: Token) -> &'a str {
        self.src.get(t.start as usize..t.end as usize).unwrap_or("")
    }

    // ---- errors -------------------------------------------------------------------

    fn display_token(&self, t: Token) -> String {
        if t.tok == Tok::Eof {
            "<EOF>".to_string()
        } else {
            self.text(t).to_string()
        }
    }

    fn error_at(&self, t: Token, message: String) -> ParseError {
        let (line, column) = line_col(self.src, t.start as usize);
        ParseError {
            kind: ParseErrorKind::Syntax,
            line,
            column,
            token: self.display_token(t),
            message,
            snippet: self.snippet(),
        }
    }

    /// ANTLR's MismatchedTokenException text.
    fn mismatch(&self, expected: &str) -> ParseError {
        let t = self.cur();
        self.error_at(
            t,
            format!(
                "mismatched input '{}' expecting {expected}",
                self.display_token(t)
            ),
        )
    }

    /// ANTLR's NoViableAltException text.
    fn no_viable(&self) -> ParseError {
        let t = self.cur();
        self.error_at(
            t,
            format!("no viable alternative at input '{}'", self.display_token(t)),
        )
    }

    /// An error with a bare message (Cassandra's `addRecognitionError`), positioned at
    /// the current token for callers that want it.
    fn recognition(&self, kind: ParseErrorKind, message: impl Into<String>) -> ParseError {
        let mut e = ParseError::recognition(kind, message);
        let t = self.cur();
        let (line, column) = line_col(self.src, t.start as usize);
        e.line = line;
        e.column = column;
        e.token = self.display_token(t);
        e
    }

    /// Cassandra's query snippet: from about five tokens before the offending one to the
    /// token after it, newlines dropped, offending token in brackets. None at EOF.
    fn snippet(&self) -> Option<String> {
        let off = self.cur();
        if off.tok == Tok::Eof {
            return None;
        }
        // ANTLR counts hidden whitespace tokens: 10 back ≈ 5 real tokens, 2 ahead ≈ 1.
        let from = self.tok_at(self.pos.saturating_sub(5));
        let mut to = self.tok_at(self.pos + 1);
        if to.tok == Tok::Eof {
            to = off;
        }
        let (from_s, to_e) = (from.start as usize, to.end as usize);
        let (os, oe) = (off.start as usize, off.end as usize);
        let piece = |a: usize, b: usize| self.src.get(a..b).unwrap_or("").replace(['\n', '\r'], "");
        let mut s = String::new();
        if from_s != 0 {
            s.push_str("...");
        }
        s.push_str(&piece(from_s, os));
        s.push('[');
        s.push_str(&piece(os, oe));
        s.push(']');
        s.push_str(&piece(oe, to_e));
        let rest = self.src.get(to_e..).unwrap_or("");
        let at_end = !rest.contains('\n') && rest.trim_end_matches('\r').is_empty();
        if !at_end {
            s.push_str("...");
        }
        Some(s)
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.recognition(ParseErrorKind::Syntax, "Expression nesting too deep"));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    // ---- identifiers --------------------------------------------------------------

    /// Whether `t` can be an identifier (`ident`): IDENT, QUOTED_NAME, unreserved keyword.
    fn is_ident_tok(t: Tok) -> bool {
        match t {
            Tok::Ident | Tok::QuotedName => true,
            Tok::Keyword(k) => k.is_unreserved(),
            _ => false,
        }
    }

    fn ident_from(&self, t: Token) -> Ident {
        let raw = self.text(t);
        match t.tok {
            Tok::QuotedName => {
                let inner = raw.get(1..raw.len().saturating_sub(1)).unwrap_or("");
                if inner.contains('"') {
                    Ident::quoted(inner.replace("\"\"", "\""))
                } else {
                    Ident::quoted(inner)
                }
            }
            Tok::EmptyQuotedName => Ident::quoted(""),
            _ => Ident::new(raw.to_ascii_lowercase()),
        }
    }

    /// `ident` / `noncol_ident` / `fident`.
    fn ident(&mut self) -> PResult<Ident> {
        if Self::is_ident_tok(self.peek()) {
            let t = self.bump();
            Ok(self.ident_from(t))
        } else {
            Err(self.no_viable())
        }
    }

    /// `cident`: `ident` or the empty quoted name.
    fn cident(&mut self) -> PResult<Ident> {
        if self.at(Tok::EmptyQuotedName) {
            let t = self.bump();
            return Ok(self.ident_from(t));
        }
        self.ident()
    }

    /// `ksName` / `cfName`: like `ident`, with Cassandra's message for a bind marker.
    fn schema_ident(&mut self, what: &str) -> PResult<Ident> {
        if self.at(Tok::QMark) {
            return Err(self.recognition(
                ParseErrorKind::Recognition,
                format!("Bind variables cannot be used for {what} names"),
            ));
        }
        self.ident()
    }

    /// `keyspaceName`.
    fn keyspace_name(&mut self) -> PResult<Ident> {
        self.schema_ident("keyspace")
    }

    /// `columnFamilyName` / `indexName`: `[ks.]name`.
    fn qualified_name(&mut self, what: &str) -> PResult<QualifiedName> {
        let first = self.schema_ident(if self.peek_n(1) == Tok::Dot {
            "keyspace"
        } else {
            what
        })?;
        if self.eat(Tok::Dot) {
            let name = self.schema_ident(what)?;
            Ok(QualifiedName::new(Some(first), name))
        } else {
            Ok(QualifiedName::new(None, first))
        }
    }

    fn table_name(&mut self) -> PResult<QualifiedName> {
        self.qualified_name("table")
    }

    /// `IF NOT EXISTS`, if present.
    fn if_not_exists(&mut self) -> PResult<bool> {
        if self.eat_kw(Keyword::If) {
            self.expect_kw(Keyword::Not)?;
            self.expect_kw(Keyword::Exists)?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// `IF EXISTS`, if present.
    fn if_exists(&mut self) -> PResult<bool> {
        if self.eat_kw(Keyword::If) {
            self.expect_kw(Keyword::Exists)?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Unescapes the current STRING_LITERAL token.
    fn string_literal(&mut self) -> PResult<String> {
        let t = self.expect(Tok::Str)?;
        Ok(self.string_value(t))
    }

    fn string_value(&self, t: Token) -> String {
        let raw = self.text(t);
        if let Some(body) = raw.strip_prefix("$$") {
            body.strip_suffix("$$").unwrap_or(body).to_string()
        } else {
            let inner = raw.get(1..raw.len().saturating_sub(1)).unwrap_or("");
            if inner.contains('\'') {
                inner.replace("''", "'")
            } else {
                inner.to_string()
            }
        }
    }

    // ---- statements ---------------------------------------------------------------

    /// `cqlStatement`.
    fn statement(&mut self) -> PResult<Statement> {
        let Tok::Keyword(k) = self.peek() else {
            return Err(self.no_viable());
        };
        match k {
            Keyword::Select => self
                .select_statement()
                .map(|s| Statement::Select(Box::new(s))),
            Keyword::Insert => self
                .insert_statement()
                .map(|s| Statement::Insert(Box::new(s))),
            Keyword::Update => self
                .update_statement()
                .map(|s| Statement::Update(Box::new(s))),
            Keyword::Delete => self
                .delete_statement()
                .map(|s| Statement::Delete(Box::new(s))),
            Keyword::Begin => self
                .batch_statement()
                .map(|s| Statement::Batch(Box::new(s))),
            Keyword::Use => {
                self.bump();
                Ok(Statement::Use(self.keyspace_name()?))
            }
            Keyword::Truncate => {
                self.bump();
                self.eat_kw(Keyword::Table);
                Ok(Statement::Truncate(self.table_name()?))
            }
            Keyword::Create => self.create_statement(),
            Keyword::Alter => self.alter_statement(),
            Keyword::Drop => self.drop_statement(),
            Keyword::Grant | Keyword::Revoke => self.grant_revoke_statement(),
            Keyword::List => self.list_statement(),
            Keyword::Describe | Keyword::Desc => self.describe_statement(),
            Keyword::Add => self.add_identity_statement(),
            _ => Err(self.no_viable()),
        }
    }
}
