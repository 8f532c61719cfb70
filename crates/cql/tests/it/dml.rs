//! SELECT / INSERT / UPDATE / DELETE / BATCH and terms.

use crate::{p, pm};
use amphora_cql::*;

fn select(q: &str) -> SelectStatement {
    match p(q) {
        Statement::Select(s) => *s,
        other => panic!("{other:?}"),
    }
}

fn col(n: &str) -> Expr {
    Expr::Column(Ident::new(n))
}

fn int(n: &str) -> Expr {
    Expr::Literal(Literal::Integer(n.into()))
}

fn s(v: &str) -> Expr {
    Expr::Literal(Literal::String(v.into()))
}

fn bind(i: usize) -> Expr {
    Expr::Bind(BindMarker {
        index: i,
        name: None,
    })
}

fn sel(q: &str) -> Vec<Selector> {
    match select(q).selection {
        Selection::List(l) => l,
        Selection::Wildcard => panic!("wildcard"),
    }
}

fn first_sel(q: &str) -> Expr {
    sel(q).remove(0).expr
}

fn fname(n: &str) -> QualifiedName {
    QualifiedName::new(None, Ident::new(n))
}

#[test]
fn select_clause_forms() {
    let s0 = select("SELECT JSON DISTINCT a, \"B\" AS bee FROM ks.t");
    assert!(s0.json && s0.distinct);
    assert_eq!(s0.table.keyspace, Some(Ident::new("ks")));
    let Selection::List(l) = s0.selection else {
        panic!()
    };
    assert_eq!(l[1].expr, Expr::Column(Ident::quoted("B")));
    assert_eq!(l[1].alias, Some(Ident::new("bee")));

    // json / distinct as column names
    assert_eq!(first_sel("SELECT json FROM t"), col("json"));
    assert_eq!(first_sel("SELECT distinct FROM t"), col("distinct"));
    assert!(!select("SELECT json, a FROM t").json);
    assert_eq!(select("SELECT * FROM t").selection, Selection::Wildcard);
    assert!(select("SELECT JSON * FROM t").json);

    assert_eq!(first_sel("SELECT count(*) FROM t"), Expr::CountRows);
    assert_eq!(
        first_sel("SELECT COUNT(1) FROM t"),
        Expr::Function {
            name: fname("count"),
            args: vec![int("1")]
        }
    );
    assert_eq!(first_sel("SELECT count FROM t"), col("count"));
    assert_eq!(first_sel("SELECT ttl FROM t"), col("ttl"));
    assert_eq!(
        first_sel("SELECT token(a, b) FROM t"),
        Expr::Function {
            name: fname("token"),
            args: vec![col("a"), col("b")]
        }
    );
    assert_eq!(
        first_sel("SELECT writetime(c) FROM t"),
        Expr::CellMetadata {
            kind: CellMetadata::WriteTime,
            column: Box::new(col("c"))
        }
    );
    assert_eq!(
        first_sel("SELECT TTL(u.f) FROM t"),
        Expr::CellMetadata {
            kind: CellMetadata::Ttl,
            column: Box::new(Expr::Field {
                expr: Box::new(col("u")),
                field: Ident::new("f")
            })
        }
    );
    assert_eq!(
        first_sel("SELECT maxwritetime(c) FROM t"),
        Expr::CellMetadata {
            kind: CellMetadata::MaxWriteTime,
            column: Box::new(col("c"))
        }
    );
    assert_eq!(
        first_sel("SELECT CAST(a AS text) FROM t"),
        Expr::Cast {
            expr: Box::new(col("a")),
            ty: TypeExpr::Native(NativeType::Text)
        }
    );
    assert_eq!(
        first_sel("SELECT m['k'] FROM t"),
        Expr::Element {
            expr: Box::new(col("m")),
            key: Box::new(s("k"))
        }
    );
    assert_eq!(
        first_sel("SELECT l[1..3] FROM t"),
        Expr::Slice {
            expr: Box::new(col("l")),
            from: Some(Box::new(int("1"))),
            to: Some(Box::new(int("3")))
        }
    );
    assert_eq!(
        first_sel("SELECT l[..3], l[1..] FROM t"),
        Expr::Slice {
            expr: Box::new(col("l")),
            from: None,
            to: Some(Box::new(int("3")))
        }
    );
    assert_eq!(
        first_sel("SELECT a.b.c FROM t"),
        Expr::Field {
            expr: Box::new(Expr::Field {
                expr: Box::new(col("a")),
                field: Ident::new("b")
            }),
            field: Ident::new("c")
        }
    );
    assert_eq!(
        first_sel("SELECT ks.fn(a) FROM t"),
        Expr::Function {
            name: QualifiedName::new(Some(Ident::new("ks")), Ident::new("fn")),
            args: vec![col("a")]
        }
    );
    assert_eq!(
        first_sel("SELECT a + b * 2 FROM t"),
        Expr::Binary {
            op: BinaryOp::Add,
            left: Box::new(col("a")),
            right: Box::new(Expr::Binary {
                op: BinaryOp::Mul,
                left: Box::new(col("b")),
                right: Box::new(int("2"))
            })
        }
    );
    assert_eq!(
        first_sel("SELECT (a - b) - c FROM t"),
        Expr::Binary {
            op: BinaryOp::Sub,
            left: Box::new(Expr::Binary {
                op: BinaryOp::Sub,
                left: Box::new(col("a")),
                right: Box::new(col("b"))
            }),
            right: Box::new(col("c"))
        }
    );
    assert_eq!(
        first_sel("SELECT (int) a FROM t"),
        Expr::TypeHint {
            ty: TypeExpr::Native(NativeType::Int),
            expr: Box::new(col("a"))
        }
    );
    assert_eq!(
        first_sel("SELECT -a FROM t"),
        Expr::Negate(Box::new(col("a")))
    );
    assert_eq!(
        first_sel("SELECT key, keys, type, values, filtering, time, date, text FROM t"),
        col("key")
    );
    assert_eq!(
        sel("SELECT key, keys, type, values, filtering, time, date, text FROM t").len(),
        8
    );
    assert_eq!(
        first_sel("SELECT [a, 1] FROM t"),
        Expr::List(vec![col("a"), int("1")])
    );
    assert_eq!(
        first_sel("SELECT (a, 1) FROM t"),
        Expr::Tuple(vec![col("a"), int("1")])
    );
    assert_eq!(
        first_sel("SELECT toJson(a), now(), \"MyFn\"(a) FROM t"),
        Expr::Function {
            name: fname("tojson"),
            args: vec![col("a")]
        }
    );
    assert_eq!(
        sel("SELECT toJson(a), now(), \"MyFn\"(a) FROM t")[2].expr,
        Expr::Function {
            name: QualifiedName::new(None, Ident::quoted("MyFn")),
            args: vec![col("a")]
        }
    );
}

#[test]
fn where_relations() {
    let w = select(
        "SELECT * FROM t WHERE a = 1 AND b < 2 AND c <= 3 AND d > 4 AND e >= 5 AND f != 6 AND g IN (1, 2) \
         AND h CONTAINS 'x' AND i CONTAINS KEY 'y' AND j LIKE 'ab%' AND k IS NOT NULL AND m['k'] = 'v' \
         AND l NOT IN (3) AND n NOT CONTAINS 1 AND o NOT CONTAINS KEY 2 AND p BETWEEN 1 AND 9",
    )
    .where_clause;
    let ops: Vec<_> = w.iter().map(|r| r.op).collect();
    use Operator::*;
    assert_eq!(
        ops,
        [
            Eq,
            Lt,
            Lte,
            Gt,
            Gte,
            Neq,
            In,
            Contains,
            ContainsKey,
            Like,
            IsNotNull,
            Eq,
            NotIn,
            NotContains,
            NotContainsKey,
            Between
        ]
    );
    assert_eq!(w[6].value, RelationValue::List(vec![int("1"), int("2")]));
    assert_eq!(w[10].value, RelationValue::Null);
    assert_eq!(
        w[11].target,
        RelationTarget::Element {
            column: Ident::new("m"),
            key: Box::new(s("k"))
        }
    );
    assert_eq!(
        w[15].value,
        RelationValue::Between(Box::new(int("1")), Box::new(int("9")))
    );

    let w = select("SELECT * FROM t WHERE (a, b) > (?, ?) AND (a, b) IN ((1, 2), (3, 4)) AND (c) = ? AND (a,b) IN ?").where_clause;
    assert_eq!(
        w[0].target,
        RelationTarget::Tuple(vec![Ident::new("a"), Ident::new("b")])
    );
    assert_eq!(
        w[0].value,
        RelationValue::Single(Expr::Tuple(vec![bind(0), bind(1)]))
    );
    assert_eq!(
        w[1].value,
        RelationValue::List(vec![
            Expr::Tuple(vec![int("1"), int("2")]),
            Expr::Tuple(vec![int("3"), int("4")])
        ])
    );
    assert_eq!(w[2].target, RelationTarget::Tuple(vec![Ident::new("c")]));
    assert_eq!(w[3].value, RelationValue::Single(bind(3)));

    let w = select(
        "SELECT * FROM t WHERE token(a, b) > token(?, ?) AND token(a,b) <= -123 AND (x = 1)",
    )
    .where_clause;
    assert_eq!(
        w[0].target,
        RelationTarget::Token(vec![Ident::new("a"), Ident::new("b")])
    );
    assert_eq!(
        w[0].value,
        RelationValue::Single(Expr::Function {
            name: fname("token"),
            args: vec![bind(0), bind(1)]
        })
    );
    assert_eq!(w[1].value, RelationValue::Single(int("-123")));
    assert_eq!(w[2].target, RelationTarget::Column(Ident::new("x")));

    let w = select("SELECT * FROM t WHERE key IN :keys AND \"Col\" = :v").where_clause;
    assert_eq!(
        w[0].value,
        RelationValue::Single(Expr::Bind(BindMarker {
            index: 0,
            name: Some(Ident::new("keys"))
        }))
    );
    assert_eq!(w[1].target, RelationTarget::Column(Ident::quoted("Col")));

    let w = select("SELECT * FROM t WHERE expr(my_idx, 'query') AND a IN ()").where_clause;
    assert_eq!(
        w[0].target,
        RelationTarget::CustomIndex(QualifiedName::new(None, Ident::new("my_idx")))
    );
    assert_eq!(w[1].value, RelationValue::List(vec![]));
}

#[test]
fn select_tail_clauses() {
    let st = select(
        "SELECT a, count(*) FROM t WHERE pk = ? GROUP BY pk, ck ORDER BY ck DESC, c2 ASC PER PARTITION LIMIT 2 LIMIT ? ALLOW FILTERING BYPASS CACHE USING TIMEOUT 5s",
    );
    assert_eq!(st.group_by, vec![col("pk"), col("ck")]);
    assert_eq!(st.order_by.len(), 2);
    assert_eq!(st.order_by[0].order, Order::Desc);
    assert_eq!(st.order_by[1].order, Order::Asc);
    assert_eq!(st.per_partition_limit, Some(int("2")));
    assert_eq!(st.limit, Some(bind(1)));
    assert!(st.allow_filtering && st.bypass_cache);
    assert_eq!(
        st.timeout,
        Some(Expr::Literal(Literal::Duration("5s".into())))
    );

    let st = select("SELECT * FROM t ORDER BY v ANN OF [1.5, 2.5] LIMIT 10");
    assert_eq!(
        st.order_by[0].ann_of,
        Some(Expr::List(vec![
            Expr::Literal(Literal::Float("1.5".into())),
            Expr::Literal(Literal::Float("2.5".into()))
        ]))
    );
    assert_eq!(st.order_by[0].order, Order::Asc);
    let st = select("SELECT * FROM t PER PARTITION LIMIT ?");
    assert_eq!(st.per_partition_limit, Some(bind(0)));
}

#[test]
fn insert_forms() {
    let Statement::Insert(i) = p(
        "INSERT INTO ks.t (a, \"B\", c) VALUES (1, 'x', ?) IF NOT EXISTS USING TTL 86400 AND TIMESTAMP 123 AND TIMEOUT 1s",
    ) else {
        panic!()
    };
    assert!(i.if_not_exists);
    assert_eq!(i.using.ttl, Some(int("86400")));
    assert_eq!(i.using.timestamp, Some(int("123")));
    assert_eq!(
        i.using.timeout,
        Some(Expr::Literal(Literal::Duration("1s".into())))
    );
    let InsertValues::Values { columns, values } = i.values else {
        panic!()
    };
    assert_eq!(columns[1], Ident::quoted("B"));
    assert_eq!(values, vec![int("1"), s("x"), bind(0)]);

    let Statement::Insert(i) = p("INSERT INTO t (a) VALUES (1) USING TTL ? AND TIMESTAMP :ts")
    else {
        panic!()
    };
    assert_eq!(i.using.ttl, Some(bind(0)));
    assert_eq!(
        i.using.timestamp,
        Some(Expr::Bind(BindMarker {
            index: 1,
            name: Some(Ident::new("ts"))
        }))
    );

    let Statement::Insert(i) = p("INSERT INTO t JSON '{\"a\": 1}' DEFAULT UNSET") else {
        panic!()
    };
    assert_eq!(
        i.values,
        InsertValues::Json {
            value: s("{\"a\": 1}"),
            default_unset: true
        }
    );
    let Statement::Insert(i) = p("INSERT INTO t JSON ? DEFAULT NULL IF NOT EXISTS") else {
        panic!()
    };
    assert_eq!(
        i.values,
        InsertValues::Json {
            value: bind(0),
            default_unset: false
        }
    );
    assert!(i.if_not_exists);
    // Cassandra's order only: IF NOT EXISTS before USING.
    assert!(parse_statement("INSERT INTO t (a) VALUES (1) USING TTL 5 IF NOT EXISTS").is_err());
}

#[test]
fn terms_and_literals() {
    let values = |q: &str| match p(q) {
        Statement::Insert(i) => match i.values {
            InsertValues::Values { values, .. } => values,
            _ => panic!(),
        },
        _ => panic!(),
    };
    let v = values(
        "INSERT INTO t (a) VALUES ('it''s', $$a'b$$, -5, 1.5e10, NaN, Infinity, -Infinity, -NaN, true, FALSE, null, \
         0xCAFE, 123e4567-e89b-12d3-a456-426614174000, 1h30m, P1DT2H, -2d, P2W)",
    );
    let expected = [
        s("it's"),
        s("a'b"),
        int("-5"),
        Expr::Literal(Literal::Float("1.5e10".into())),
        Expr::Literal(Literal::NaN),
        Expr::Literal(Literal::Infinity),
        Expr::Literal(Literal::NegInfinity),
        Expr::Literal(Literal::NaN),
        Expr::Literal(Literal::Boolean(true)),
        Expr::Literal(Literal::Boolean(false)),
        Expr::Null,
        Expr::Literal(Literal::Hex("0xCAFE".into())),
        Expr::Literal(Literal::Uuid("123e4567-e89b-12d3-a456-426614174000".into())),
        Expr::Literal(Literal::Duration("1h30m".into())),
        Expr::Literal(Literal::Duration("P1DT2H".into())),
        Expr::Literal(Literal::Duration("-2d".into())),
        Expr::Literal(Literal::Duration("P2W".into())),
    ];
    assert_eq!(v, expected);

    let v = values(
        "INSERT INTO t (a) VALUES ([1, 2], {1, 2}, {'k': 'v'}, {}, {f: 1, \"G\": 'x'}, (1, 'a'), now(), uuid(), \
         toTimestamp(now()), fromJson('[1]'), (int) ?, (frozen<list<int>>) ?, 1 + 2 * 3, -(1), CAST(1 AS text), [], (bigint) -1)",
    );
    assert_eq!(v[0], Expr::List(vec![int("1"), int("2")]));
    assert_eq!(v[1], Expr::Set(vec![int("1"), int("2")]));
    assert_eq!(v[2], Expr::Map(vec![(s("k"), s("v"))]));
    assert_eq!(v[3], Expr::Set(vec![]));
    assert_eq!(
        v[4],
        Expr::Udt(vec![
            (Ident::new("f"), int("1")),
            (Ident::quoted("G"), s("x"))
        ])
    );
    assert_eq!(v[5], Expr::Tuple(vec![int("1"), s("a")]));
    assert_eq!(
        v[6],
        Expr::Function {
            name: fname("now"),
            args: vec![]
        }
    );
    assert_eq!(
        v[7],
        Expr::Function {
            name: fname("uuid"),
            args: vec![]
        }
    );
    assert_eq!(
        v[8],
        Expr::Function {
            name: fname("totimestamp"),
            args: vec![Expr::Function {
                name: fname("now"),
                args: vec![]
            }]
        }
    );
    assert_eq!(
        v[9],
        Expr::Function {
            name: fname("fromjson"),
            args: vec![s("[1]")]
        }
    );
    assert_eq!(
        v[10],
        Expr::TypeHint {
            ty: TypeExpr::Native(NativeType::Int),
            expr: Box::new(bind(0))
        }
    );
    assert_eq!(
        v[11],
        Expr::TypeHint {
            ty: TypeExpr::Frozen(Box::new(TypeExpr::List(Box::new(TypeExpr::Native(
                NativeType::Int
            ))))),
            expr: Box::new(bind(1))
        }
    );
    assert_eq!(
        v[12],
        Expr::Binary {
            op: BinaryOp::Add,
            left: Box::new(int("1")),
            right: Box::new(Expr::Binary {
                op: BinaryOp::Mul,
                left: Box::new(int("2")),
                right: Box::new(int("3"))
            })
        }
    );
    assert_eq!(v[13], Expr::Negate(Box::new(Expr::Tuple(vec![int("1")]))));
    assert_eq!(
        v[14],
        Expr::Cast {
            expr: Box::new(int("1")),
            ty: TypeExpr::Native(NativeType::Text)
        }
    );
    assert_eq!(v[15], Expr::List(vec![]));
    assert_eq!(
        v[16],
        Expr::TypeHint {
            ty: TypeExpr::Native(NativeType::Bigint),
            expr: Box::new(int("-1"))
        }
    );
}

#[test]
fn update_assignments() {
    let Statement::Update(u) = p(
        "UPDATE ks.t USING TTL 10 AND TIMESTAMP ? SET a = 1, c = c + ?, l = [1] + l, s = s - {2}, m['k'] = 'v', \
         l[2] = 5, u.f = 'x', n = n - 3, o = o -3, q += 1, r -= {1}, \"K\" = \"K\" + 1 WHERE k = 1 IF a = 1 AND m['k'] = 'v' AND u.f = 'x' AND b IN (1, 2) AND c != 3",
    ) else {
        panic!()
    };
    assert_eq!(u.using.ttl, Some(int("10")));
    assert_eq!(u.using.timestamp, Some(bind(0)));
    let ops: Vec<_> = u.assignments.iter().map(|a| a.op.clone()).collect();
    assert_eq!(ops[0], AssignmentOp::Set(int("1")));
    assert_eq!(ops[1], AssignmentOp::Add(bind(1)));
    assert_eq!(ops[2], AssignmentOp::Prepend(Expr::List(vec![int("1")])));
    assert_eq!(ops[3], AssignmentOp::Subtract(Expr::Set(vec![int("2")])));
    assert_eq!(
        ops[4],
        AssignmentOp::SetElement {
            key: Box::new(s("k")),
            value: s("v")
        }
    );
    assert_eq!(
        ops[5],
        AssignmentOp::SetElement {
            key: Box::new(int("2")),
            value: int("5")
        }
    );
    assert_eq!(
        ops[6],
        AssignmentOp::SetField {
            field: Box::new(Ident::new("f")),
            value: s("x")
        }
    );
    assert_eq!(ops[7], AssignmentOp::Subtract(int("3")));
    // `o -3` lexes as `o INTEGER(-3)` in Cassandra: an addition of -3.
    assert_eq!(ops[8], AssignmentOp::Add(int("-3")));
    assert_eq!(ops[9], AssignmentOp::Add(int("1")));
    assert_eq!(ops[10], AssignmentOp::Subtract(Expr::Set(vec![int("1")])));
    assert_eq!(ops[11], AssignmentOp::Add(int("1")));
    let Some(Conditions::Columns(c)) = u.conditions else {
        panic!()
    };
    assert_eq!(c.len(), 5);
    assert_eq!(
        c[1].target,
        ConditionTarget::Element {
            column: Ident::new("m"),
            key: s("k")
        }
    );
    assert_eq!(
        c[2].target,
        ConditionTarget::Field {
            column: Ident::new("u"),
            field: Ident::new("f")
        }
    );
    assert_eq!(c[3].op, Operator::In);
    assert_eq!(c[4].op, Operator::Neq);

    let Statement::Update(u) = p("UPDATE t SET a = 1 WHERE k = 1 IF EXISTS") else {
        panic!()
    };
    assert_eq!(u.conditions, Some(Conditions::Exists));
    let Statement::Update(u) = p("UPDATE t SET a = 1 WHERE k = 1 IF exists = 1") else {
        panic!()
    };
    assert!(matches!(u.conditions, Some(Conditions::Columns(_))));
}

#[test]
fn delete_forms() {
    let Statement::Delete(d) = p("DELETE FROM t WHERE k = 1") else {
        panic!()
    };
    assert!(d.columns.is_empty());
    let Statement::Delete(d) = p(
        "DELETE a, m['k'], u.f, l[0] FROM ks.t USING TIMESTAMP 5 WHERE k = ? AND c > 2 IF EXISTS",
    ) else {
        panic!()
    };
    assert_eq!(
        d.columns,
        vec![
            Deletion::Column(Ident::new("a")),
            Deletion::Element {
                column: Ident::new("m"),
                key: s("k")
            },
            Deletion::Field {
                column: Ident::new("u"),
                field: Ident::new("f")
            },
            Deletion::Element {
                column: Ident::new("l"),
                key: int("0")
            },
        ]
    );
    assert_eq!(d.using.timestamp, Some(int("5")));
    assert_eq!(d.conditions, Some(Conditions::Exists));
    let Statement::Delete(d) = p("DELETE FROM t WHERE k = 1 IF a = 2 AND b CONTAINS 3") else {
        panic!()
    };
    assert!(
        matches!(d.conditions, Some(Conditions::Columns(ref c)) if c[1].op == Operator::Contains)
    );
}

#[test]
fn batches() {
    let pmd = pm(
        "BEGIN UNLOGGED BATCH USING TIMESTAMP 10\n INSERT INTO t (a, b) VALUES (?, ?);\n UPDATE t SET b = ? WHERE a = ?;\n \
         DELETE FROM t WHERE a = :x\n APPLY BATCH;",
    );
    let Statement::Batch(b) = pmd.statement else {
        panic!()
    };
    assert_eq!(b.kind, BatchKind::Unlogged);
    assert_eq!(b.using.timestamp, Some(int("10")));
    assert_eq!(b.statements.len(), 3);
    assert!(matches!(b.statements[2], BatchChild::Delete(_)));
    assert_eq!(pmd.bind_markers.len(), 5);
    assert_eq!(pmd.bind_markers[4].name, Some(Ident::new("x")));
    let Statement::Batch(b) =
        p("BEGIN COUNTER BATCH UPDATE c SET n = n + 1 WHERE k = 1 APPLY BATCH")
    else {
        panic!()
    };
    assert_eq!(b.kind, BatchKind::Counter);
    let Statement::Batch(b) = p("BEGIN BATCH APPLY BATCH") else {
        panic!()
    };
    assert_eq!(b.kind, BatchKind::Logged);
    assert!(b.statements.is_empty());
}

#[test]
fn identifiers_fold_and_comments() {
    let st = select(
        "SeLeCt \"MixedCase\", MixedCase /* c */ FROM -- c\n KS.\"Tbl\" // c\n WHERE \"a\"\"b\" = 1",
    );
    let Selection::List(l) = st.selection else {
        panic!()
    };
    assert_eq!(l[0].expr, Expr::Column(Ident::quoted("MixedCase")));
    assert_eq!(l[1].expr, col("mixedcase"));
    assert_eq!(
        st.table,
        QualifiedName::new(Some(Ident::new("ks")), Ident::quoted("Tbl"))
    );
    assert_eq!(
        st.where_clause[0].target,
        RelationTarget::Column(Ident::quoted("a\"b"))
    );
}

#[test]
fn statements_script() {
    let v = parse_statements("USE ks; SELECT * FROM t;; INSERT INTO t (a) VALUES (1)\n")
        .expect("script");
    assert_eq!(v.len(), 3);
    let v = parse_script("SELECT * FROM t WHERE a = ?; SELECT * FROM t WHERE a = ? AND b = ?")
        .expect("script");
    assert_eq!(v[1].bind_markers.len(), 2);
    assert_eq!(v[1].bind_markers[0].index, 0);
    assert!(parse_statements("").expect("empty").is_empty());
    assert!(parse_statements("USE a USE b").is_err());
}

/// Found by the round-trip proptest: a tuple key of a map is not a type hint.
#[test]
fn regression_tuple_key_is_not_a_type_hint() {
    let Statement::Insert(i) = p("INSERT INTO t (a) VALUES ({('x'): 'y', (1, 2): now()})") else {
        panic!()
    };
    let InsertValues::Values { values, .. } = i.values else {
        panic!()
    };
    assert!(matches!(&values[0], Expr::Map(m) if m.len() == 2 && matches!(m[0].0, Expr::Tuple(_))));
    let Statement::Insert(i) = p("INSERT INTO t (a) VALUES ((text) :v)") else {
        panic!()
    };
    let InsertValues::Values { values, .. } = i.values else {
        panic!()
    };
    assert!(matches!(&values[0], Expr::TypeHint { expr, .. } if matches!(**expr, Expr::Bind(_))));
}
