//! Arbitrary bytes through everything a server feeds network input to: the v5 segment
//! decoder (both compressions), the envelope decoder, request decoding with every option
//! combination, body decompression, type options and vints. Nothing may panic; errors are
//! fine.
#![no_main]

use amphora_protocol::wire::{Reader, decode_vint};
use amphora_protocol::{
    ColumnType, Compression, DecodeOptions, SegmentCompression, SegmentDecoder, decode_envelope,
    decode_request, decompress_body,
};
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;

const MAX_FRAME: usize = 1 << 20;

fn envelopes(buf: &mut BytesMut, selector: u8) {
    let opts = DecodeOptions {
        compression: match selector % 3 {
            0 => None,
            1 => Some(Compression::Lz4),
            _ => Some(Compression::Snappy),
        },
        use_metadata_id: selector & 0x04 != 0,
        max_frame_size: MAX_FRAME,
    };
    while let Ok(Some(env)) = decode_envelope(buf, MAX_FRAME) {
        let _ = decode_request(&env, &opts);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    // Plain envelopes (v3/v4 and v5 before framing starts).
    envelopes(&mut BytesMut::from(rest), selector);
    // v5 segments, fed in two pieces to exercise partial frames.
    let seg = if selector & 0x08 != 0 {
        SegmentCompression::Lz4
    } else {
        SegmentCompression::None
    };
    let mut decoder = SegmentDecoder::new(seg, MAX_FRAME);
    let split = usize::from(selector).min(rest.len());
    let (a, b) = rest.split_at(split);
    let mut src = BytesMut::from(a);
    let mut out = BytesMut::new();
    if decoder.decode(&mut src, &mut out).is_ok() {
        src.extend_from_slice(b);
        let _ = decoder.decode(&mut src, &mut out);
    }
    envelopes(&mut out, selector);
    // The smaller decoders a request can reach.
    let _ = decompress_body(Compression::Lz4, rest, MAX_FRAME);
    let _ = decompress_body(Compression::Snappy, rest, MAX_FRAME);
    let _ = ColumnType::decode(&mut Reader::new(Bytes::copy_from_slice(rest)));
    let _ = decode_vint(rest);
});
