//! Hand-written lexer following Cassandra's `Lexer.g`.
//!
//! PERF-CRITICAL: runs on every unprepared statement. One pass over the bytes, no
//! allocation per token (tokens are spans; text is unescaped by the parser on demand).
//!
//! Differences from ANTLR's lexer, all invisible to the grammar:
//! - `-` is always its own token; the parser folds `-` + number into a negative literal,
//!   so `c = c -1` and `c = c - 1` both parse.
//! - Whitespace and comments are dropped instead of kept on a hidden channel.

use crate::error::ParseError;
use crate::keyword::Keyword;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tok {
    /// Unquoted identifier that is not a keyword.
    Ident,
    Keyword(Keyword),
    /// `"Name"` (escapes still in the source text).
    QuotedName,
    /// `""`
    EmptyQuotedName,
    /// `'…'` or `$$…$$`.
    Str,
    Integer,
    Float,
    Boolean,
    Duration,
    Uuid,
    Hex,
    QMark,
    Colon,
    Dot,
    Range,
    Comma,
    Semi,
    LParen,
    RParen,
    LBracket,
    RBracket,
    LBrace,
    RBrace,
    Eq,
    Neq,
    Lt,
    Lte,
    Gt,
    Gte,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    PlusEq,
    MinusEq,
    Eof,
}

impl Tok {
    /// The token name ANTLR would print after "expecting".
    pub(crate) fn name(self) -> &'static str {
        match self {
            Tok::Ident => "IDENT",
            Tok::Keyword(k) => k.token_name(),
            Tok::QuotedName => "QUOTED_NAME",
            Tok::EmptyQuotedName => "EMPTY_QUOTED_NAME",
            Tok::Str => "STRING_LITERAL",
            Tok::Integer => "INTEGER",
            Tok::Float => "FLOAT",
            Tok::Boolean => "BOOLEAN",
            Tok::Duration => "DURATION",
            Tok::Uuid => "UUID",
            Tok::Hex => "HEXNUMBER",
            Tok::QMark => "QMARK",
            Tok::Colon => "':'",
            Tok::Dot => "'.'",
            Tok::Range => "RANGE",
            Tok::Comma => "','",
            Tok::Semi => "';'",
            Tok::LParen => "'('",
            Tok::RParen => "')'",
            Tok::LBracket => "'['",
            Tok::RBracket => "']'",
            Tok::LBrace => "'{'",
            Tok::RBrace => "'}'",
            Tok::Eq => "'='",
            Tok::Neq => "'!='",
            Tok::Lt => "'<'",
            Tok::Lte => "'<='",
            Tok::Gt => "'>'",
            Tok::Gte => "'>='",
            Tok::Plus => "'+'",
            Tok::Minus => "'-'",
            Tok::Star => "'*'",
            Tok::Slash => "'/'",
            Tok::Percent => "'%'",
            Tok::PlusEq => "'+='",
            Tok::MinusEq => "'-='",
            Tok::Eof => "EOF",
        }
    }
}

/// A token: kind plus byte span in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub start: u32,
    pub end: u32,
}

/// Splits `src` into tokens, ending with one `Eof` token.
pub(crate) fn tokenize(src: &str) -> Result<Vec<Token>, Box<ParseError>> {
    let mut lx = Lexer {
        src,
        bytes: src.as_bytes(),
        pos: 0,
    };
    // Roughly one token per 3 bytes of CQL; avoids regrowth for typical statements.
    let mut out = Vec::with_capacity(src.len() / 3 + 4);
    // Tokens are pushed straight into the vector: returning them through a
    // `Result<Token, _>` cost a store-forwarding stall per token.
    while !lx.next(&mut out)? {}
    Ok(out)
}

struct Lexer<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

fn is_ident_continue(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl<'a> Lexer<'a> {
    fn at(&self, i: usize) -> u8 {
        self.bytes.get(i).copied().unwrap_or(0)
    }

    fn token(&self, tok: Tok, start: usize) -> Token {
        Token {
            tok,
            start: start as u32,
            end: self.pos as u32,
        }
    }

    /// Lexes one token into `out`; returns whether it was EOF.
    fn next(&mut self, out: &mut Vec<Token>) -> Result<bool, Box<ParseError>> {
        self.skip_trivia()?;
        let start = self.pos;
        let Some(&c) = self.bytes.get(start) else {
            out.push(self.token(Tok::Eof, start));
            return Ok(true);
        };
        let tok = match c {
            b'\'' => {
                out.push(self.string(start)?);
                return Ok(false);
            }
            b'"' => {
                out.push(self.quoted_name(start)?);
                return Ok(false);
            }
            b'$' if self.at(start + 1) == b'$' => {
                out.push(self.dollar_string(start)?);
                return Ok(false);
            }
            b'0'..=b'9' => {
                out.push(self.number(start));
                return Ok(false);
            }
            b'a'..=b'z' | b'A'..=b'Z' => {
                out.push(self.word(start));
                return Ok(false);
            }
            b'?' => Tok::QMark,
            b':' => Tok::Colon,
            b'.' if self.at(start + 1) == b'.' => {
                self.pos += 1;
                Tok::Range
            }
            b'.' => Tok::Dot,
            b',' => Tok::Comma,
            b';' => Tok::Semi,
            b'(' => Tok::LParen,
            b')' => Tok::RParen,
            b'[' => Tok::LBracket,
            b']' => Tok::RBracket,
            b'{' => Tok::LBrace,
            b'}' => Tok::RBrace,
            b'=' => Tok::Eq,
            b'!' if self.at(start + 1) == b'=' => {
                self.pos += 1;
                Tok::Neq
            }
            b'<' if self.at(start + 1) == b'=' => {
                self.pos += 1;
                Tok::Lte
            }
            b'<' => Tok::Lt,
            b'>' if self.at(start + 1) == b'=' => {
                self.pos += 1;
                Tok::Gte
            }
            b'>' => Tok::Gt,
            b'+' if self.at(start + 1) == b'=' => {
                self.pos += 1;
                Tok::PlusEq
            }
            b'+' => Tok::Plus,
            b'-' if self.at(start + 1) == b'=' => {
                self.pos += 1;
                Tok::MinusEq
            }
            b'-' => Tok::Minus,
            b'*' => Tok::Star,
            b'/' => Tok::Slash,
            b'%' => Tok::Percent,
            _ => {
                let ch = self.src[start..].chars().next().unwrap_or('\0');
                return Err(Box::new(ParseError::lexer(
                    self.src,
                    start,
                    format!("no viable alternative at character '{ch}'"),
                )));
            }
        };
        self.pos += 1;
        out.push(self.token(tok, start));
        Ok(false)
    }

    fn skip_trivia(&mut self) -> Result<(), Box<ParseError>> {
        loop {
            match self.at(self.pos) {
                b' ' | b'\t' | b'\n' | b'\r' => self.pos += 1,
                b'-' if self.at(self.pos + 1) == b'-' => self.line_comment(),
                b'/' if self.at(self.pos + 1) == b'/' => self.line_comment(),
                b'/' if self.at(self.pos + 1) == b'*' => {
                    let body = self.pos + 2;
                    match self.src[body..].find("*/") {
                        Some(i) => self.pos = body + i + 2,
                        None => {
                            return Err(Box::new(ParseError::lexer(
                                self.src,
                                self.src.len(),
                                "mismatched character '<EOF>' expecting '*'".into(),
                            )));
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn line_comment(&mut self) {
        while self.pos < self.bytes.len() && !matches!(self.bytes[self.pos], b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    /// `'…'` with `''` as an escaped quote.
    fn string(&mut self, start: usize) -> Result<Token, Box<ParseError>> {
        let mut i = start + 1;
        loop {
            match self.bytes.get(i) {
                None => {
                    return Err(Box::new(ParseError::lexer(
                        self.src,
                        self.src.len(),
                        "mismatched character '<EOF>' expecting '''".into(),
                    )));
                }
                Some(b'\'') if self.at(i + 1) == b'\'' => i += 2,
                Some(b'\'') => break,
                Some(_) => i += 1,
            }
        }
        self.pos = i + 1;
        Ok(self.token(Tok::Str, start))
    }

    /// `$$…$$` (no escapes).
    fn dollar_string(&mut self, start: usize) -> Result<Token, Box<ParseError>> {
        let body = start + 2;
        match self.src[body..].find("$$") {
            Some(i) => {
                self.pos = body + i + 2;
                Ok(self.token(Tok::Str, start))
            }
            None => Err(Box::new(ParseError::lexer(
                self.src,
                self.src.len(),
                "mismatched character '<EOF>' expecting '$'".into(),
            ))),
        }
    }

    /// `"…"` with `""` as an escaped quote; `""` alone is the empty quoted name.
    fn quoted_name(&mut self, start: usize) -> Result<Token, Box<ParseError>> {
        if self.at(start + 1) == b'"' && self.at(start + 2) != b'"' {
            self.pos = start + 2;
            return Ok(self.token(Tok::EmptyQuotedName, start));
        }
        let mut i = start + 1;
        loop {
            match self.bytes.get(i) {
                None => {
                    return Err(Box::new(ParseError::lexer(
                        self.src,
                        self.src.len(),
                        "mismatched character '<EOF>' expecting '\"'".into(),
                    )));
                }
                Some(b'"') if self.at(i + 1) == b'"' => i += 2,
                Some(b'"') => break,
                Some(_) => i += 1,
            }
        }
        self.pos = i + 1;
        Ok(self.token(Tok::QuotedName, start))
    }

    /// Whether a UUID (`8-4-4-4-12` hex digits) starts at `start`.
    fn uuid_at(&self, start: usize) -> bool {
        if self.at(start + 8) != b'-' {
            return false;
        }
        let b = match self.bytes.get(start..start + 36) {
            Some(b) => b,
            None => return false,
        };
        b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
    }

    fn digits(&mut self) -> usize {
        let s = self.pos;
        while self.at(self.pos).is_ascii_digit() {
            self.pos += 1;
        }
        self.pos - s
    }

    /// INTEGER, FLOAT, DURATION, UUID or HEXNUMBER starting with a digit.
    fn number(&mut self, start: usize) -> Token {
        if self.uuid_at(start) {
            self.pos = start + 36;
            return self.token(Tok::Uuid, start);
        }
        if self.at(start) == b'0' && matches!(self.at(start + 1), b'x' | b'X') {
            self.pos = start + 2;
            while self.at(self.pos).is_ascii_hexdigit() {
                self.pos += 1;
            }
            return self.token(Tok::Hex, start);
        }
        self.pos = start;
        self.digits();
        match self.at(self.pos) {
            // `1..3` in a slice: the integer stops before the range.
            b'.' if self.at(self.pos + 1) == b'.' => self.token(Tok::Integer, start),
            b'.' => {
                self.pos += 1;
                self.digits();
                self.exponent();
                self.token(Tok::Float, start)
            }
            b'e' | b'E' if self.exponent() => self.token(Tok::Float, start),
            _ => {
                if self.duration_units() {
                    self.token(Tok::Duration, start)
                } else {
                    self.token(Tok::Integer, start)
                }
            }
        }
    }

    /// Consumes `E [+-] DIGIT+` if present.
    fn exponent(&mut self) -> bool {
        if !matches!(self.at(self.pos), b'e' | b'E') {
            return false;
        }
        let mut i = self.pos + 1;
        if matches!(self.at(i), b'+' | b'-') {
            i += 1;
        }
        if !self.at(i).is_ascii_digit() {
            return false;
        }
        self.pos = i;
        self.digits();
        true
    }

    /// Length of a duration unit (`y mo w d h m s ms us µs ns`, any case) at `i`.
    fn unit_len(&self, i: usize) -> usize {
        let a = self.at(i).to_ascii_lowercase();
        let b = self.at(i + 1).to_ascii_lowercase();
        match (a, b) {
            (b'm', b'o') | (b'm', b's') | (b'u', b's') | (b'n', b's') => 2,
            // µ is U+00B5, two bytes in UTF-8.
            (0xC2, 0xB5) if matches!(self.at(i + 2), b's' | b'S') => 3,
            (b'y' | b'w' | b'd' | b'h' | b'm' | b's', _) => 1,
            _ => 0,
        }
    }

    /// After the leading digits: `UNIT (DIGIT+ UNIT)*`.
    fn duration_units(&mut self) -> bool {
        let n = self.unit_len(self.pos);
        if n == 0 {
            return false;
        }
        self.pos += n;
        loop {
            let save = self.pos;
            if self.digits() == 0 {
                return true;
            }
            let n = self.unit_len(self.pos);
            if n == 0 {
                self.pos = save;
                return true;
            }
            self.pos += n;
        }
    }

    /// ISO 8601 duration starting at `P` (`P1Y2M3DT4H5M6S`, `P2W`, `PT1H`,
    /// `P0001-02-03T04:05:06`); returns whether one was consumed.
    fn iso_duration(&mut self, start: usize) -> bool {
        let b = self.bytes;
        let mut i = start + 1;
        // Alternative format: Pyyyy-mm-ddThh:mm:ss
        let alt = b"0000-00-00T00:00:00";
        if let Some(s) = b.get(i..i + alt.len()) {
            let ok = s.iter().zip(alt.iter()).all(|(&c, &p)| {
                if p == b'0' {
                    c.is_ascii_digit()
                } else {
                    c == p
                }
            });
            if ok {
                self.pos = i + alt.len();
                return true;
            }
        }
        let digits_at = |mut j: usize| {
            let s = j;
            while b.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
            (j, j > s)
        };
        let mut parts = 0;
        // Date part: (DIGIT+ [YMWD])*
        loop {
            let (j, any) = digits_at(i);
            if any && matches!(b.get(j), Some(b'Y' | b'M' | b'W' | b'D')) {
                i = j + 1;
                parts += 1;
            } else {
                break;
            }
        }
        // Time part: T (DIGIT+ [HMS])+
        if b.get(i) == Some(&b'T') {
            let mut k = i + 1;
            let mut tparts = 0;
            loop {
                let (j, any) = digits_at(k);
                if any && matches!(b.get(j), Some(b'H' | b'M' | b'S')) {
                    k = j + 1;
                    tparts += 1;
                } else {
                    break;
                }
            }
            if tparts > 0 {
                i = k;
                parts += tparts;
            }
        }
        if parts == 0 || b.get(i).copied().is_some_and(is_ident_continue) {
            return false;
        }
        self.pos = i;
        true
    }

    /// Identifier, keyword, boolean, UUID starting with a letter, or ISO duration.
    fn word(&mut self, start: usize) -> Token {
        if self.bytes[start].is_ascii_hexdigit() && self.uuid_at(start) {
            self.pos = start + 36;
            return self.token(Tok::Uuid, start);
        }
        if self.bytes[start] == b'P' && self.iso_duration(start) {
            return self.token(Tok::Duration, start);
        }
        self.pos = start + 1;
        while is_ident_continue(self.at(self.pos)) {
            self.pos += 1;
        }
        // A word is ASCII (letters, digits, `_`), so its bytes are looked up directly.
        let text = self.bytes.get(start..self.pos).unwrap_or(&[]);
        let tok = if matches!(text.len(), 4 | 5)
            && (text.eq_ignore_ascii_case(b"true") || text.eq_ignore_ascii_case(b"false"))
        {
            Tok::Boolean
        } else {
            match Keyword::lookup_bytes(text) {
                Some(k) => Tok::Keyword(k),
                None => Tok::Ident,
            }
        };
        self.token(tok, start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<Tok> {
        tokenize(s)
            .expect("lexes")
            .into_iter()
            .map(|t| t.tok)
            .collect()
    }

    #[test]
    fn numbers_and_friends() {
        assert_eq!(kinds("1"), vec![Tok::Integer, Tok::Eof]);
        assert_eq!(kinds("1.5e10"), vec![Tok::Float, Tok::Eof]);
        assert_eq!(
            kinds("1e-3 2E+4 3."),
            vec![Tok::Float, Tok::Float, Tok::Float, Tok::Eof]
        );
        assert_eq!(
            kinds("1..3"),
            vec![Tok::Integer, Tok::Range, Tok::Integer, Tok::Eof]
        );
        assert_eq!(kinds("1h30m 2000ms 1mo 3us 4ns 5y 6w 7d 8s"), {
            let mut v = vec![Tok::Duration; 9];
            v.push(Tok::Eof);
            v
        });
        assert_eq!(kinds("0xCAFE 0x"), vec![Tok::Hex, Tok::Hex, Tok::Eof]);
        assert_eq!(
            kinds("123e4567-e89b-12d3-a456-426614174000 a23e4567-e89b-12d3-a456-426614174000"),
            vec![Tok::Uuid, Tok::Uuid, Tok::Eof]
        );
        assert_eq!(kinds("P1DT2H PT1H P2W P0001-02-03T04:05:06"), {
            let mut v = vec![Tok::Duration; 4];
            v.push(Tok::Eof);
            v
        });
        assert_eq!(
            kinds("P p1d PT"),
            vec![Tok::Ident, Tok::Ident, Tok::Ident, Tok::Eof]
        );
        assert_eq!(kinds("-5"), vec![Tok::Minus, Tok::Integer, Tok::Eof]);
    }

    #[test]
    fn strings_names_comments() {
        assert_eq!(kinds("'it''s' $$a'b$$"), vec![Tok::Str, Tok::Str, Tok::Eof]);
        assert_eq!(
            kinds("\"A\"\"b\" \"\""),
            vec![Tok::QuotedName, Tok::EmptyQuotedName, Tok::Eof]
        );
        assert_eq!(
            kinds("a -- c\n b // d\n /* e \n */ c"),
            vec![Tok::Ident; 3]
                .into_iter()
                .chain([Tok::Eof])
                .collect::<Vec<_>>()
        );
        assert_eq!(
            kinds("TRUE false"),
            vec![Tok::Boolean, Tok::Boolean, Tok::Eof]
        );
        assert_eq!(
            kinds("SELECT Table"),
            vec![
                Tok::Keyword(Keyword::Select),
                Tok::Keyword(Keyword::Table),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn lexer_errors() {
        let e = tokenize("SELECT @").expect_err("bad char");
        assert_eq!(
            e.to_string(),
            "line 1:7 no viable alternative at character '@'"
        );
        assert!(tokenize("'abc").is_err());
        assert!(tokenize("/* x").is_err());
        assert!(tokenize("\"abc").is_err());
        assert!(tokenize("$$abc").is_err());
    }
}
