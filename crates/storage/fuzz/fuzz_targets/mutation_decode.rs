//! Decodes arbitrary bytes as a mutation: must never panic; what decodes re-encodes.
#![no_main]

use amphora_types::codec::{decode_mutation, encode_mutation};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = decode_mutation(bytes::Bytes::copy_from_slice(data)) {
        let mut out = Vec::new();
        encode_mutation(&m, &mut out);
        let again = decode_mutation(bytes::Bytes::from(out)).expect("re-encoded mutation decodes");
        assert_eq!(again, m);
    }
});
