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

/// Errors are boxed inside the parser: a `Result` of a small value (a token, an
/// identifier, `()`) then fits in registers instead of being copied through memory on
/// every rule's return. The public functions unbox it.
pub(crate) type PResult<T> = Result<T, Box<ParseError>>;

/// Nesting limit for expressions and types: deeper input is rejected, not a stack overflow.
pub(crate) const MAX_DEPTH: u32 = 128;

/// Largest capacity [`Parser::items_before`] suggests: longer lists grow as usual, so a
/// huge statement cannot make the parser reserve memory ahead of parsing it.
const MAX_CAPACITY_HINT: usize = 64;

pub(crate) struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token>,
    pos: usize,
    binds: Vec<BindMarker>,
    depth: u32,
    /// Token index just after the last WHERE clause parsed (for error wording).
    where_end: usize,
    /// Token index just after the last name, literal or marker (for error wording).
    operand_end: usize,
    /// Token index just after a name whose role ANTLR decides by looking one token
    /// further (a table name that might have been a keyspace, `IF EXISTS`).
    ll2_end: usize,
}

/// Parses exactly one statement, with optional trailing semicolons.
pub(crate) fn parse_one(src: &str) -> PResult<ParsedStatement> {
    let mut p = Parser::new(src)?;
    let statement = p.statement()?;
    while p.eat(Tok::Semi) {}
    if !p.at(Tok::Eof) {
        return Err(p.trailing_input());
    }
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
        if !p.at(Tok::Eof) && !p.at(Tok::Semi) {
            return Err(p.trailing_input());
        }
    }
}

/// Appends the hidden tokens ANTLR would emit for `src[from..to]`: each whitespace run
/// and each comment is one token.
fn hidden_tokens(src: &str, from: usize, to: usize, out: &mut Vec<(usize, usize)>) {
    let b = src.as_bytes();
    let mut i = from;
    while i < to {
        let start = i;
        if b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
            while i < to && b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
                i += 1;
            }
        } else if src.get(i..).is_some_and(|r| r.starts_with("/*")) {
            i = src
                .get(i + 2..to)
                .and_then(|r| r.find("*/"))
                .map_or(to, |k| i + 2 + k + 2);
        } else {
            // `--` / `//` comment: ANTLR's rule includes the newline that ends it.
            while i < to && b.get(i).is_some_and(|&c| c != b'\n' && c != b'\r') {
                i += 1;
            }
            if i < to {
                i += 1;
            }
        }
        out.push((start, i.min(to)));
    }
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> PResult<Self> {
        let toks = tokenize(src)?;
        // Every marker is a `?` or follows a `:` (an upper bound: map literals use `:`
        // too), so the marker list is allocated once.
        let markers = toks
            .iter()
            .filter(|t| matches!(t.tok, Tok::QMark | Tok::Colon))
            .count();
        Ok(Parser {
            src,
            toks,
            pos: 0,
            binds: Vec::with_capacity(markers),
            depth: 0,
            where_end: usize::MAX,
            operand_end: usize::MAX,
            ll2_end: usize::MAX,
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

    /// The token's text as ANTLR has it: strings and quoted names unescaped, without
    /// their quotes.
    fn display_token(&self, t: Token) -> String {
        // A `-` glued to a number is one token (`-1`) for Cassandra's lexer.
        if t.tok == Tok::Minus
            && let Some(next) = self
                .toks
                .iter()
                .find(|n| n.start == t.end && n.start > t.start)
            && matches!(
                next.tok,
                Tok::Integer
                    | Tok::Float
                    | Tok::Duration
                    | Tok::Keyword(Keyword::Nan | Keyword::Infinity)
            )
        {
            return self
                .src
                .get(t.start as usize..next.end as usize)
                .unwrap_or("-")
                .to_string();
        }
        match t.tok {
            Tok::Eof => "<EOF>".to_string(),
            Tok::Str => self.string_value(t),
            Tok::QuotedName | Tok::EmptyQuotedName => self.ident_from(t).name,
            _ => self.text(t).to_string(),
        }
    }

    /// A syntax error at the current token; `highlight` is the token index ANTLR's stream
    /// was at (the start of the failed decision), which Cassandra brackets in the snippet.
    fn error_at(&self, highlight: usize, message: String) -> Box<ParseError> {
        let t = self.cur();
        let (line, column) = line_col(self.src, t.start as usize);
        Box::new(ParseError {
            kind: ParseErrorKind::Syntax,
            line,
            column,
            token: self.display_token(t),
            message,
            snippet: self.snippet(highlight),
        })
    }

    /// ANTLR's MismatchedTokenException text — except right after a name, literal or
    /// marker, where ANTLR's lookahead decision fails first and reports no viable
    /// alternative (from the name or marker itself).
    fn mismatch(&self, expected: &str) -> Box<ParseError> {
        let t = self.cur();
        if t.tok != Tok::Eof && self.pos == self.operand_end && self.pos > 0 {
            let prev = self.toks.get(self.pos - 1).map(|t| t.tok);
            let named = prev.is_some_and(|p| Self::is_ident_tok(p) || p == Tok::QMark);
            return self.no_viable_from(if named { self.pos - 1 } else { self.pos });
        }
        self.mismatch_exact(expected)
    }

    /// ANTLR's MismatchedTokenException text, always.
    fn mismatch_exact(&self, expected: &str) -> Box<ParseError> {
        let t = self.cur();
        self.error_at(
            self.pos,
            format!(
                "mismatched input '{}' expecting {expected}",
                self.display_token(t)
            ),
        )
    }

    /// ANTLR's NoViableAltException text.
    fn no_viable(&self) -> Box<ParseError> {
        self.no_viable_from(self.pos)
    }

    /// NoViableAlt for a decision that started at token `start` (ANTLR looked ahead from
    /// there and failed at the current token).
    fn no_viable_from(&self, start: usize) -> Box<ParseError> {
        let t = self.cur();
        self.error_at(
            start.min(self.pos),
            format!("no viable alternative at input '{}'", self.display_token(t)),
        )
    }

    /// Input left after a complete statement. ANTLR reports it where its last lookahead
    /// decision failed: after a name or a marker that decision started on that token,
    /// after a WHERE clause on the extra token; otherwise EOF was simply expected.
    fn trailing_input(&self) -> Box<ParseError> {
        let prev = self
            .pos
            .checked_sub(1)
            .and_then(|i| self.toks.get(i))
            .map(|t| t.tok);
        if self.ll2_end == self.pos {
            return self.no_viable_from(self.pos - 1);
        }
        if self.where_end == self.pos {
            return if prev == Some(Tok::QMark) {
                self.no_viable_from(self.pos - 1)
            } else {
                self.no_viable()
            };
        }
        self.mismatch_exact("EOF")
    }

    /// An error with a bare message (Cassandra's `addRecognitionError`), positioned at
    /// the current token for callers that want it.
    fn recognition(&self, kind: ParseErrorKind, message: impl Into<String>) -> Box<ParseError> {
        let mut e = Box::new(ParseError::recognition(kind, message));
        let t = self.cur();
        let (line, column) = line_col(self.src, t.start as usize);
        e.line = line;
        e.column = column;
        e.token = self.display_token(t);
        e
    }

    /// Cassandra's query snippet (`ErrorCollector.appendSnippet`). ANTLR's token stream
    /// holds the hidden whitespace and comment tokens too: the snippet runs from 10 stream
    /// tokens before the highlighted one to 2 after it, but not past the furthest token
    /// read (the current one); lines are joined without newlines and the highlighted token
    /// is bracketed. None when that range ends at EOF (ANTLR's EOF has no position).
    fn snippet(&self, highlight: usize) -> Option<String> {
        let cur = self.cur();
        // Stream elements as byte spans: hidden tokens of each gap, then the token.
        let mut stream: Vec<(usize, usize)> = Vec::with_capacity(self.pos * 2 + 2);
        let mut h_index = 0;
        let mut prev_end = 0usize;
        for (i, t) in self.toks.iter().enumerate().take(self.pos + 1) {
            let start = t.start as usize;
            hidden_tokens(self.src, prev_end, start, &mut stream);
            if i == highlight {
                h_index = stream.len();
            }
            stream.push((start, t.end as usize));
            prev_end = t.end as usize;
        }
        let last = stream.len().checked_sub(1)?;
        if cur.tok == Tok::Eof && h_index + 2 >= last {
            return None;
        }
        let (from, _) = *stream.get(h_index.saturating_sub(10))?;
        let (_, to) = *stream.get((h_index + 2).min(last))?;
        let (hs, mut he) = *stream.get(h_index)?;
        if let Some(ht) = self.toks.get(highlight) {
            let n = self.display_token(*ht).chars().count();
            he = self.src.get(hs..).map_or(he, |r| {
                hs + r.char_indices().nth(n).map_or(r.len(), |(i, _)| i)
            });
        }
        let piece = |a: usize, b: usize| self.src.get(a..b.max(a)).unwrap_or("").replace('\n', "");
        let mut s = String::new();
        if from != 0 {
            s.push_str("...");
        }
        if hs >= to {
            s.push_str(&piece(from, to));
        } else {
            s.push_str(&piece(from, hs));
            s.push('[');
            s.push_str(&piece(hs, he));
            s.push(']');
            s.push_str(&piece(he, to));
        }
        if to < self.src.trim_end_matches('\n').len() {
            s.push_str("...");
        }
        Some(s)
    }

    /// The number of comma-separated items from the current token up to the first
    /// `stop` token or unmatched closing bracket (or the end), at most
    /// [`MAX_CAPACITY_HINT`]: a capacity hint for list rules, so a typical list is
    /// allocated once instead of grown.
    fn items_before(&self, stop: Tok) -> usize {
        let mut depth = 0u32;
        let mut items = 1;
        for t in self.toks.get(self.pos..).unwrap_or(&[]) {
            match t.tok {
                t if t == stop && depth == 0 => break,
                Tok::Eof => break,
                Tok::LParen | Tok::LBracket | Tok::LBrace => depth += 1,
                Tok::RParen | Tok::RBracket | Tok::RBrace if depth == 0 => break,
                Tok::RParen | Tok::RBracket | Tok::RBrace => depth -= 1,
                Tok::Comma if depth == 0 => {
                    items += 1;
                    if items == MAX_CAPACITY_HINT {
                        break;
                    }
                }
                _ => {}
            }
        }
        items
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
            // ANTLR decides whether this was a keyspace by looking at the next token.
            self.ll2_end = self.pos;
            self.operand_end = self.pos;
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
