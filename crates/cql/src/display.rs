//! CQL text for expressions and WHERE relations.
//!
//! The output parses back to the same tree (property-tested), so it can serve for result
//! column names, error messages and re-serialising view WHERE clauses.

use std::fmt::{self, Display, Formatter, Write};

use crate::ast::*;

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
                write!(f, "{name}(")?;
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
