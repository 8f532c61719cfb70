//! Error messages, formatted as Cassandra's ErrorCollector does.

use crate::err;
use amphora_cql::{ParseErrorKind, parse_statement};

/// Expected texts are Cassandra 5.0.9's own (see `tests/oracle/`).
#[test]
fn typo_messages() {
    let cases: &[(&str, &str)] = &[
        (
            "SELECT * FORM t",
            "line 1:9 mismatched input 'FORM' expecting K_FROM (SELECT * [FORM]...)",
        ),
        (
            "SELEC * FROM t",
            "line 1:0 no viable alternative at input 'SELEC' ([SELEC]...)",
        ),
        (
            "SELECT * FROM t WHERE",
            "line 0:-1 no viable alternative at input '<EOF>'",
        ),
        (
            "SELECT * FROM t LIMT 5",
            "line 1:16 no viable alternative at input 'LIMT' (SELECT * FROM [t] LIMT...)",
        ),
        (
            "INSERT INTO t (a) VALUE (1)",
            "line 1:18 mismatched input 'VALUE' expecting K_VALUES (INSERT INTO t (a) [VALUE]...)",
        ),
        (
            "CREATE TABEL t (a int PRIMARY KEY)",
            "line 1:7 no viable alternative at input 'TABEL' ([CREATE] TABEL...)",
        ),
        (
            "SELECT * FROM t WHERE a = 1 AND",
            "line 0:-1 no viable alternative at input '<EOF>'",
        ),
        (
            "UPDATE t SET a = 1",
            "line 0:-1 mismatched input '<EOF>' expecting K_WHERE",
        ),
        (
            "SELECT * FROM t WHERE a == 1",
            "line 1:25 no viable alternative at input '=' (... FROM t WHERE a =[=]...)",
        ),
        (
            "SELECT * FROM t\nWHERE a = 'x",
            "line 2:12 mismatched character '<EOF>' expecting '''",
        ),
        (
            "SELECT * FROM t;garbage",
            "line 1:16 mismatched input 'garbage' expecting EOF (SELECT * FROM t;[garbage])",
        ),
        (
            "SELECT * FROM select",
            "line 1:14 no viable alternative at input 'select' (SELECT * FROM [select])",
        ),
        (
            "CREATE TABLE t (a int, b int",
            "line 0:-1 mismatched input '<EOF>' expecting ')'",
        ),
        (
            "SELECT a,\n  b FORM t",
            "line 2:4 no viable alternative at input 'FORM' (SELECT a,  [b] FORM...)",
        ),
    ];
    for (q, want) in cases {
        assert_eq!(&err(q), want, "{q}");
    }
}

#[test]
fn error_fields() {
    let e = parse_statement("SELECT a,\n  b FORM t").expect_err("typo");
    assert_eq!((e.line, e.column), (2, 4));
    assert_eq!(e.token, "FORM");
    assert_eq!(e.message, "no viable alternative at input 'FORM'");
    assert_eq!(e.kind, ParseErrorKind::Syntax);
    // At the end of input the fields keep the real position; Display says 0:-1.
    let e = parse_statement("UPDATE t SET a = 1").expect_err("no where");
    assert_eq!((e.line, e.column, e.token.as_str()), (1, 18, "<EOF>"));
    // Strings and quoted names are shown unescaped, as ANTLR's token text.
    assert_eq!(
        err("USE \"ks\" \"ks\""),
        "line 1:9 mismatched input 'ks' expecting EOF (USE \"ks\" [\"k]s\")"
    );
}

#[test]
fn recognition_errors() {
    assert_eq!(
        err("UPDATE t SET a = b + 1 WHERE k = 1"),
        "Only expressions of the form X = X +<value> are supported."
    );
    assert_eq!(
        err("UPDATE t SET a = 1 + b WHERE k = 1"),
        "Only expressions of the form X = <value> + X are supported."
    );
    assert_eq!(
        err("CREATE KEYSPACE ks WITH a = 1 AND a = 2"),
        "Multiple definitions for property 'a'"
    );
    assert_eq!(
        err("SELECT * FROM ? WHERE a = 1"),
        "Bind variables cannot be used for table names"
    );
    let e = parse_statement("CREATE TABLE t (a int PRIMARY KEY, b int, PRIMARY KEY (b))")
        .expect_err("two pks");
    assert_eq!(e.kind, ParseErrorKind::Invalid);
    assert_eq!(
        e.to_string(),
        "Multiple PRIMARY KEY specified for table 't' (exactly one required)"
    );
    let e = parse_statement("CREATE TABLE t (a int)").expect_err("no pk");
    assert_eq!(e.kind, ParseErrorKind::Invalid);
    assert_eq!(
        e.to_string(),
        "No PRIMARY KEY specifed for table 't' (exactly one required)"
    );
    assert_eq!(
        err("CREATE KEYSPACE ks WITH replication = {'class': ?}"),
        "Invalid property value: ? for property: 'class' (bind variables are not supported in DDL queries)"
    );
    assert_eq!(
        err("GRANT SELECT ON ROLE bob TO alice"),
        "Resource type RoleResource does not support any of the requested permissions"
    );
}

#[test]
fn rejected_shapes() {
    for q in [
        "",
        ";",
        "SELECT FROM t",
        "SELECT * FROM t WHERE token(a) > ",
        "INSERT INTO t (a) VALUES ()",
        "INSERT INTO t VALUES (1)",
        "DELETE FROM t",
        "DELETE FROM t USING TTL 5 WHERE a = 1",
        "SELECT * FROM t WHERE a = b",
        "SELECT * FROM t LIMIT 1.5",
        "UPDATE t SET WHERE a = 1",
        "BEGIN BATCH SELECT * FROM t APPLY BATCH",
        "CREATE TABLE t (a int PRIMARY KEY) WITH",
        "CREATE TABLE t (, a int PRIMARY KEY)",
        "SELECT * FROM t WHERE a IN (1,",
        "CREATE TYPE date (a int)",
        "CREATE TABLE t (a set PRIMARY KEY)",
        "SELECT * FROM t USING TTL 5",
        "DESCRIBE",
        "SELECT * FROM ks.",
        "SELECT * FROM t WHERE a = ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1",
    ] {
        assert!(parse_statement(q).is_err(), "{q:?} should not parse");
    }
}
