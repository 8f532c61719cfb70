//! Fuzzes the CQL parser: it must never panic, and what it accepts must print back to
//! CQL that it accepts again.
//!
//! Run: `cd crates/cql/fuzz && cargo +nightly fuzz run parse -- -max_total_time=60`

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = amphora_cql::parse_statements(&text);
    match amphora_cql::parse(&text) {
        Ok(parsed) => {
            for (i, m) in parsed.bind_markers.iter().enumerate() {
                assert_eq!(m.index, i);
            }
            if let amphora_cql::Statement::Select(s) = &parsed.statement
                && !s.where_clause.is_empty()
            {
                let w = amphora_cql::where_clause_to_string(&s.where_clause);
                let again = format!("SELECT * FROM t WHERE {w}");
                if let Err(e) = amphora_cql::parse_statement(&again) {
                    panic!("reprinted WHERE does not parse: {again:?}: {e}");
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
