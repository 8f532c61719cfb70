//! Fuzzes the CQL parser: it must never panic, and what it accepts must print back to
//! CQL that parses to the same tree.
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
            // Display must print CQL that parses back to the same tree.
            let text = parsed.statement.to_string();
            match amphora_cql::parse(&text) {
                Ok(again) => assert_eq!(again, parsed, "{text:?}"),
                Err(e) => panic!("reprint does not parse: {text:?}: {e}"),
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
