//! Parse errors, formatted the way Cassandra's `ErrorCollector` formats ANTLR errors.

use std::fmt;

/// What kind of CQL error the server should answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParseErrorKind {
    /// A lexer or grammar error: CQL `Syntax_error` (0x2000).
    Syntax,
    /// A statement that is well-formed but that Cassandra's parser rejects with a plain
    /// message (e.g. "Multiple PRIMARY KEYs specified"): still reported as a syntax error
    /// by Cassandra, but displayed without a position.
    Recognition,
    /// Rejected during parsing, reported by Cassandra as `Invalid` (0x2200).
    Invalid,
}

/// A statement that could not be parsed.
///
/// `Display` gives Cassandra's text, e.g.
/// `line 1:9 mismatched input 'FORM' expecting K_FROM (SELECT * [FORM] t)`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    pub kind: ParseErrorKind,
    /// 1-based line of the offending token.
    pub line: u32,
    /// 0-based character position of the offending token within its line.
    pub column: u32,
    /// Text of the offending token (`<EOF>` at the end of input).
    pub token: String,
    /// The message without position or snippet ("mismatched input 'x' expecting K_FROM").
    pub message: String,
    /// The query excerpt Cassandra appends, with the offending token in brackets.
    pub snippet: Option<String>,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ParseErrorKind::Syntax => {
                // ANTLR's EOF token has no position: Cassandra prints `line 0:-1`.
                if self.token == "<EOF>" && self.message.contains(" input '<EOF>'") {
                    write!(f, "line 0:-1 {}", self.message)?;
                } else {
                    write!(f, "line {}:{} {}", self.line, self.column, self.message)?;
                }
                if let Some(s) = &self.snippet {
                    write!(f, " ({s})")?;
                }
                Ok(())
            }
            ParseErrorKind::Recognition | ParseErrorKind::Invalid => f.write_str(&self.message),
        }
    }
}

/// 1-based line and 0-based char column of byte offset `pos`.
pub(crate) fn line_col(src: &str, pos: usize) -> (u32, u32) {
    let pos = pos.min(src.len());
    let before = src.get(..pos).unwrap_or(src);
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before.get(line_start..).map_or(0, |s| s.chars().count());
    (line as u32, col as u32)
}

impl ParseError {
    /// A lexer error at byte `pos` (no snippet, as in Cassandra).
    pub(crate) fn lexer(src: &str, pos: usize, message: String) -> Self {
        let (line, column) = line_col(src, pos);
        let token = src
            .get(pos..)
            .and_then(|s| s.chars().next())
            .map_or("<EOF>".to_string(), String::from);
        ParseError {
            kind: ParseErrorKind::Syntax,
            line,
            column,
            token,
            message,
            snippet: None,
        }
    }

    /// An error without position, shown as the bare message.
    pub(crate) fn recognition(kind: ParseErrorKind, message: impl Into<String>) -> Self {
        ParseError {
            kind,
            line: 0,
            column: 0,
            token: String::new(),
            message: message.into(),
            snippet: None,
        }
    }
}
