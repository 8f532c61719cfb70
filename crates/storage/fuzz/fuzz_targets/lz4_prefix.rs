//! `amphora_storage::lz4::decode_prefix` on arbitrary bytes: never panics, and agrees with
//! `lz4_flex` on every block `lz4_flex` decodes (the same bytes for the prefix it returns,
//! at least `need` of them); the input compressed by `lz4_flex` decodes back to itself.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let cap = usize::from(u16::from_le_bytes([data[0], data[1]]));
    let need = usize::from(u16::from_le_bytes([data[2], data[3]]));
    let src = &data[4..];
    let mut out = vec![0u8; cap];
    let got = amphora_storage::lz4::decode_prefix(src, &mut out, need);
    let mut full = vec![0u8; cap];
    if let Ok(n) = lz4_flex::block::decompress_into(src, &mut full) {
        let m = got.expect("a block lz4_flex decodes is refused");
        assert!(m <= n && m >= need.min(n), "m {m} n {n} need {need}");
        assert_eq!(out[..m], full[..m]);
    }
    let block = lz4_flex::block::compress(src);
    let mut back = vec![0u8; src.len()];
    let m = amphora_storage::lz4::decode_prefix(&block, &mut back, need).expect("own block");
    assert!(m >= need.min(src.len()));
    assert_eq!(back[..m], src[..m]);
});
