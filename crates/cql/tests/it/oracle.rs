//! Differential test against Cassandra 5.0.9's own parser, recorded in
//! `tests/oracle/cassandra-5.0.9.out` for the statements of `tests/oracle/corpus.cql`
//! (see `tests/oracle/README.md` to regenerate).

use amphora_cql::{ParseErrorKind, parse};

const CORPUS: &str = include_str!("../oracle/corpus.cql");
const EXPECTED: &str = include_str!("../oracle/cassandra-5.0.9.out");

/// Statements Cassandra 5.0 rejects that we accept on purpose: ScyllaDB extensions and
/// the trunk grammar (BETWEEN, NOT IN, NOT CONTAINS), and the leniencies of
/// `docs/dev/cql-parser.md`. Matched by substring.
const ACCEPTED_EXTENSIONS: &[&str] = &[
    "TIMEOUT",
    "BYPASS CACHE",
    "BETWEEN",
    "NOT IN",
    "NOT CONTAINS",
    "GENERATED PASSWORD",
    "SUPERUSERS",
];

/// Error texts identical to Cassandra's, at the time of writing: a ratchet.
const MIN_SAME_MESSAGES: usize = 2000;

struct Report {
    agree_ok: usize,
    same_message: usize,
    different_message: Vec<(String, String, String)>,
    we_reject: Vec<(String, String)>,
    we_accept: Vec<(String, String)>,
}

fn run() -> Report {
    let mut r = Report {
        agree_ok: 0,
        same_message: 0,
        different_message: vec![],
        we_reject: vec![],
        we_accept: vec![],
    };
    let expected: Vec<&str> = EXPECTED.lines().collect();
    let corpus: Vec<&str> = CORPUS.lines().collect();
    assert_eq!(
        corpus.len(),
        expected.len(),
        "corpus and oracle output are out of step"
    );
    for (line, want) in corpus.iter().zip(expected) {
        let q = line.replace("\\n", "\n");
        let ours = parse(&q);
        match (want, ours) {
            ("OK", Ok(_)) => r.agree_ok += 1,
            // Invalid: rejected while parsing but with Cassandra's later InvalidRequest.
            ("OK", Err(e)) if e.kind == ParseErrorKind::Invalid => r.agree_ok += 1,
            ("OK", Err(e)) => r.we_reject.push((q, e.to_string())),
            (w, Ok(_)) if w.starts_with("SYNTAX") => r.we_accept.push((q, w.to_string())),
            (_, Ok(_)) => r.agree_ok += 1, // OTHER: schema-dependent, not a parse error
            (w, Err(e)) => {
                let ours = match e.kind {
                    ParseErrorKind::Invalid => format!("OTHER {e}"),
                    _ => format!("SYNTAX {e}"),
                };
                if ours == w {
                    r.same_message += 1;
                } else {
                    r.different_message.push((q, w.to_string(), ours));
                }
            }
        }
    }
    r
}

#[test]
fn agrees_with_cassandra() {
    let r = run();
    let surprising: Vec<_> = r
        .we_accept
        .iter()
        .filter(|(q, _)| !ACCEPTED_EXTENSIONS.iter().any(|x| q.contains(x)))
        .collect();
    if std::env::var_os("ORACLE_REPORT").is_some() {
        for (q, w, o) in &r.different_message {
            println!("MSG {q:?}\n  cassandra: {w}\n  ours:      {o}");
        }
        for (q, w) in &surprising {
            println!("LENIENT {q:?}\n  cassandra: {w}");
        }
    }
    println!(
        "oracle: {} both accept, {} same error text, {} different text, {} we reject, {} we accept ({} outside extensions)",
        r.agree_ok,
        r.same_message,
        r.different_message.len(),
        r.we_reject.len(),
        r.we_accept.len(),
        surprising.len()
    );
    assert!(
        r.we_reject.is_empty(),
        "Cassandra accepts, we reject: {:#?}",
        r.we_reject
    );
    assert!(
        r.same_message >= MIN_SAME_MESSAGES,
        "error texts regressed: {} identical",
        r.same_message
    );
}
