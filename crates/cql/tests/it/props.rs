//! Property tests: the parser never panics, and accepted input stays accepted.

use proptest::prelude::*;

const FRAGMENTS: &[&str] = &[
    "SELECT",
    "*",
    "FROM",
    "t",
    "ks.t",
    "WHERE",
    "a",
    "=",
    "?",
    ":x",
    "AND",
    "(",
    ")",
    ",",
    "'s'",
    "1",
    "-",
    "1.5",
    "IN",
    "token",
    "[",
    "]",
    "{",
    "}",
    ":",
    "..",
    ".",
    "LIMIT",
    "INSERT",
    "INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "+",
    "DELETE",
    "BEGIN",
    "BATCH",
    "APPLY",
    "CREATE",
    "TABLE",
    "int",
    "list",
    "<",
    ">",
    "PRIMARY",
    "KEY",
    "WITH",
    "USING",
    "TTL",
    "TIMESTAMP",
    "IF",
    "NOT",
    "EXISTS",
    "CONTAINS",
    "\"Q\"",
    "0xff",
    "1h",
    "P1D",
    "null",
    "CAST",
    "AS",
    "frozen",
    "map",
    "DESCRIBE",
    "KEYSPACE",
    "ORDER",
    "BY",
    "DESC",
    ";",
    "$$b$$",
    "--c\n",
    "/*c*/",
    "count",
    "writetime",
    "IS",
    "NaN",
    "Infinity",
    "true",
    "JSON",
    "DISTINCT",
    "GROUP",
    "ALLOW",
    "FILTERING",
    "ANN",
    "OF",
];

fn fragment_soup() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(FRAGMENTS), 0..40).prop_map(|v| v.join(" "))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn never_panics_on_bytes(s in "\\PC{0,200}") {
        let _ = amphora_cql::parse_statement(&s);
        let _ = amphora_cql::parse_statements(&s);
    }

    #[test]
    fn never_panics_on_token_soup(s in fragment_soup()) {
        let _ = amphora_cql::parse_statement(&s);
        let _ = amphora_cql::parse_statements(&s);
    }

    #[test]
    fn error_position_is_inside_input(s in fragment_soup()) {
        if let Err(e) = amphora_cql::parse_statement(&s) {
            let lines = s.split('\n').count() as u32;
            prop_assert!(e.line <= lines.max(1));
            let _ = e.to_string();
        }
    }
}

mod roundtrip {
    use amphora_cql::*;
    use proptest::prelude::*;

    fn ident() -> impl Strategy<Value = Ident> {
        proptest::sample::select(
            &[
                "a",
                "b_1",
                "Mixed",
                "select",
                "key",
                "with space",
                "q\"uote",
                "ttl",
            ][..],
        )
        .prop_map(|n| {
            let plain = Ident::new(n).to_string() == n;
            Ident {
                name: n.to_string(),
                quoted: !plain,
            }
        })
    }

    fn literal() -> impl Strategy<Value = Literal> {
        prop_oneof![
            "[a-z' ]{0,6}".prop_map(Literal::String),
            (-1000i64..1000).prop_map(|i| Literal::Integer(i.to_string())),
            proptest::sample::select(&["1.5", "-2.5e-3", "3.", "1E10"][..])
                .prop_map(|s| Literal::Float(s.into())),
            any::<bool>().prop_map(Literal::Boolean),
            proptest::sample::select(
                &[
                    "1h30m", "-2d", "P1DT2H", "P2W", "PT5M", "3mo", "2000ms", "1µs"
                ][..]
            )
            .prop_map(|s| Literal::Duration(s.into())),
            Just(Literal::Uuid("123e4567-e89b-12d3-a456-426614174000".into())),
            Just(Literal::Hex("0xCAFE".into())),
            Just(Literal::NaN),
            Just(Literal::Infinity),
            Just(Literal::NegInfinity),
        ]
    }

    fn native() -> impl Strategy<Value = TypeExpr> {
        proptest::sample::select(
            &[
                NativeType::Int,
                NativeType::Text,
                NativeType::Timestamp,
                NativeType::Blob,
            ][..],
        )
        .prop_map(TypeExpr::Native)
    }

    fn type_expr() -> impl Strategy<Value = TypeExpr> {
        native().prop_recursive(3, 8, 3, |inner| {
            prop_oneof![
                inner.clone().prop_map(|t| TypeExpr::List(Box::new(t))),
                inner.clone().prop_map(|t| TypeExpr::Frozen(Box::new(t))),
                (inner.clone(), inner.clone())
                    .prop_map(|(k, v)| TypeExpr::Map(Box::new(k), Box::new(v))),
                proptest::collection::vec(inner, 1..3).prop_map(TypeExpr::Tuple),
                Just(TypeExpr::User(QualifiedName::new(
                    Some(Ident::new("ks")),
                    Ident::new("addr")
                ))),
            ]
        })
    }

    fn fname() -> impl Strategy<Value = QualifiedName> {
        proptest::sample::select(&["now", "f", "tojson", "token"][..])
            .prop_map(|n| QualifiedName::new(None, Ident::new(n)))
    }

    fn term() -> impl Strategy<Value = Expr> {
        let leaf = prop_oneof![
            literal().prop_map(Expr::Literal),
            Just(Expr::Null),
            proptest::option::of(ident())
                .prop_map(|name| Expr::Bind(BindMarker { index: 0, name })),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            let op = proptest::sample::select(
                &[
                    BinaryOp::Add,
                    BinaryOp::Sub,
                    BinaryOp::Mul,
                    BinaryOp::Div,
                    BinaryOp::Rem,
                ][..],
            );
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Expr::List),
                proptest::collection::vec(inner.clone(), 1..3).prop_map(Expr::Set),
                proptest::collection::vec((inner.clone(), inner.clone()), 1..3).prop_map(Expr::Map),
                proptest::collection::vec((ident(), inner.clone()), 1..3).prop_map(Expr::Udt),
                proptest::collection::vec(inner.clone(), 1..3).prop_map(Expr::Tuple),
                (fname(), proptest::collection::vec(inner.clone(), 0..3))
                    .prop_map(|(name, args)| Expr::Function { name, args }),
                (type_expr(), inner.clone()).prop_map(|(ty, e)| Expr::TypeHint {
                    ty,
                    expr: Box::new(e)
                }),
                (inner.clone(), native()).prop_map(|(e, ty)| Expr::Cast {
                    expr: Box::new(e),
                    ty
                }),
                (op, inner.clone(), inner.clone()).prop_map(|(op, l, r)| Expr::Binary {
                    op,
                    left: Box::new(l),
                    right: Box::new(r)
                }),
            ]
        })
    }

    /// What the parser would make of the tree: bind markers numbered in source order,
    /// `- <number>` folded into negative literals, `{}` read as an empty set, left-deep
    /// arithmetic re-associated as the parser does.
    fn normalize(e: &mut Expr, next: &mut usize) {
        match e {
            Expr::Bind(m) => {
                m.index = *next;
                *next += 1;
            }
            Expr::List(v) | Expr::Set(v) | Expr::Tuple(v) | Expr::Function { args: v, .. } => {
                v.iter_mut().for_each(|x| normalize(x, next))
            }
            Expr::Map(v) => v.iter_mut().for_each(|(k, x)| {
                normalize(k, next);
                normalize(x, next)
            }),
            Expr::Udt(v) => v.iter_mut().for_each(|(_, x)| normalize(x, next)),
            Expr::TypeHint { expr, .. } | Expr::Cast { expr, .. } | Expr::Negate(expr) => {
                normalize(expr, next)
            }
            Expr::Binary { left, right, .. } => {
                normalize(left, next);
                normalize(right, next)
            }
            _ => {}
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Display of a term-mode expression parses back to the same tree.
        #[test]
        fn term_display_roundtrips(mut e in term()) {
            let mut n = 0;
            normalize(&mut e, &mut n);
            let text = format!("INSERT INTO t (a) VALUES ({e})");
            let parsed = parse_statement(&text);
            let Ok(Statement::Insert(i)) = parsed else {
                return Err(TestCaseError::fail(format!("{text}: {parsed:?}")));
            };
            let InsertValues::Values { values, .. } = i.values else { unreachable!() };
            prop_assert_eq!(values.len(), 1);
            // Printing then re-parsing once more must be stable.
            let again = values[0].to_string();
            prop_assert_eq!(&again, &e.to_string(), "{}", text);
        }
    }
}
