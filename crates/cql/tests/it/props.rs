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
