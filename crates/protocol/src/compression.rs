//! v3/v4 per-envelope body compression (spec v4 §5), negotiated by STARTUP's `COMPRESSION`.
//!
//! - `lz4`: 4-byte big-endian uncompressed length, then a raw LZ4 block.
//! - `snappy`: a raw Snappy block.
//!
//! Never applies in v5, where segments carry the compression ([`crate::segment`]).

use bytes::{BufMut, Bytes, BytesMut};

use crate::envelope::{Flags, HEADER_LEN};
use crate::error::{CompressionError, EncodeError};

/// An envelope compression algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    Lz4,
    Snappy,
}

impl Compression {
    /// From STARTUP's `COMPRESSION` value (case-insensitive, as Cassandra).
    pub fn from_name(name: &str) -> Option<Self> {
        if name.eq_ignore_ascii_case("lz4") {
            Some(Self::Lz4)
        } else if name.eq_ignore_ascii_case("snappy") {
            Some(Self::Snappy)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Lz4 => "lz4",
            Self::Snappy => "snappy",
        }
    }
}

/// Decompresses a request body. `max_len` bounds the announced uncompressed size (use the
/// max frame size) so a small body cannot make us allocate gigabytes.
pub fn decompress_body(
    compression: Compression,
    body: &[u8],
    max_len: usize,
) -> Result<Bytes, CompressionError> {
    match compression {
        Compression::Lz4 => {
            let (len, block) = match (body.get(..4), body.get(4..)) {
                (Some(l), Some(b)) => {
                    let mut n = [0u8; 4];
                    n.copy_from_slice(l);
                    (u32::from_be_bytes(n) as usize, b)
                }
                _ => {
                    return Err(CompressionError::TooFewBytes {
                        expected: 4,
                        received: body.len(),
                    });
                }
            };
            if len > max_len {
                return Err(CompressionError::TooLarge {
                    length: len,
                    max: max_len,
                });
            }
            let out = lz4_flex::block::decompress(block, len)
                .map_err(|e| CompressionError::Lz4(e.to_string()))?;
            if out.len() != len {
                return Err(CompressionError::LengthMismatch {
                    expected: len,
                    actual: out.len(),
                });
            }
            Ok(Bytes::from(out))
        }
        Compression::Snappy => {
            let len = snap::raw::decompress_len(body)
                .map_err(|e| CompressionError::Snappy(e.to_string()))?;
            if len > max_len {
                return Err(CompressionError::TooLarge {
                    length: len,
                    max: max_len,
                });
            }
            let out = snap::raw::Decoder::new()
                .decompress_vec(body)
                .map_err(|e| CompressionError::Snappy(e.to_string()))?;
            Ok(Bytes::from(out))
        }
    }
}

/// Appends the compressed form of `body` to `out`.
pub fn compress_body(
    compression: Compression,
    body: &[u8],
    out: &mut BytesMut,
) -> Result<(), CompressionError> {
    match compression {
        Compression::Lz4 => {
            let len = u32::try_from(body.len()).map_err(|_| CompressionError::TooLarge {
                length: body.len(),
                max: u32::MAX as usize,
            })?;
            out.put_u32(len);
            lz4_append(body, out);
            Ok(())
        }
        Compression::Snappy => {
            let start = out.len();
            out.resize(start + snap::raw::max_compress_len(body.len()), 0);
            let dst = out.get_mut(start..).unwrap_or_default();
            let n = snap::raw::Encoder::new()
                .compress(body, dst)
                .map_err(|e| CompressionError::Snappy(e.to_string()))?;
            out.truncate(start + n);
            Ok(())
        }
    }
}

/// Appends a raw LZ4 block of `input` to `out`.
pub(crate) fn lz4_append(input: &[u8], out: &mut BytesMut) {
    let start = out.len();
    out.resize(
        start + lz4_flex::block::get_maximum_output_size(input.len()),
        0,
    );
    let dst = out.get_mut(start..).unwrap_or_default();
    // The destination is sized by get_maximum_output_size, so compression cannot run out of room.
    let n = lz4_flex::block::compress_into(input, dst).unwrap_or(0);
    out.truncate(start + n);
}

/// Appends the whole envelope at the front of `envelope` to `out`, its body compressed and
/// the COMPRESSION flag set when that makes it smaller; otherwise unchanged (the spec lets a
/// sender leave any envelope uncompressed).
pub fn compress_envelope(
    envelope: &[u8],
    compression: Compression,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    let (Some(header), Some(body)) = (envelope.get(..HEADER_LEN), envelope.get(HEADER_LEN..))
    else {
        return Err(EncodeError::NotAnEnvelope { offset: 0 });
    };
    let start = out.len();
    out.put_slice(header);
    compress_body(compression, body, out).map_err(|e| EncodeError::Compression(e.to_string()))?;
    let compressed_len = out.len() - start - HEADER_LEN;
    if compressed_len >= body.len() {
        out.truncate(start);
        out.put_slice(envelope);
        return Ok(());
    }
    if let Some(flags) = out.get_mut(start + 1) {
        *flags |= Flags::COMPRESSION;
    }
    if let Some(len) = out.get_mut(start + 5..start + HEADER_LEN) {
        len.copy_from_slice(&(compressed_len as i32).to_be_bytes());
    }
    Ok(())
}

/// [`compress_envelope`] for each envelope of a buffer holding whole envelopes back to back.
pub fn compress_envelopes(
    envelopes: &[u8],
    compression: Compression,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    let mut pos = 0;
    while pos < envelopes.len() {
        let rest = envelopes.get(pos..).unwrap_or_default();
        let len = rest
            .get(5..HEADER_LEN)
            .map(|l| i32::from_be_bytes([l[0], l[1], l[2], l[3]]))
            .and_then(|l| usize::try_from(l).ok())
            .map(|l| l + HEADER_LEN)
            .filter(|l| *l <= rest.len())
            .ok_or(EncodeError::NotAnEnvelope { offset: pos })?;
        compress_envelope(rest.get(..len).unwrap_or_default(), compression, out)?;
        pos += len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lz4_layout_has_big_endian_length() {
        let body = vec![b'a'; 1000];
        let mut out = BytesMut::new();
        compress_body(Compression::Lz4, &body, &mut out).expect("compress");
        assert_eq!(&out[..4], &1000u32.to_be_bytes());
        assert!(out.len() < 100);
        let back = decompress_body(Compression::Lz4, &out, 1 << 20).expect("decompress");
        assert_eq!(&back[..], &body[..]);
    }

    #[test]
    fn bombs_and_garbage_are_errors() {
        // Announces 1 GiB.
        let mut bomb = BytesMut::new();
        bomb.put_u32(1 << 30);
        bomb.put_slice(&[0x10, 0x61]);
        assert!(matches!(
            decompress_body(Compression::Lz4, &bomb, 1 << 20),
            Err(CompressionError::TooLarge { .. })
        ));
        assert!(matches!(
            decompress_body(Compression::Lz4, &[0, 0], 1 << 20),
            Err(CompressionError::TooFewBytes {
                expected: 4,
                received: 2
            })
        ));
        assert!(decompress_body(Compression::Lz4, &[0, 0, 0, 10, 0xFF, 0xFF], 1 << 20).is_err());
        assert!(decompress_body(Compression::Snappy, &[0xFF, 0xFF, 0xFF], 1 << 20).is_err());
    }

    #[test]
    fn envelope_left_uncompressed_when_not_smaller() {
        let env = [0x84u8, 0, 0, 1, 0x02, 0, 0, 0, 0];
        let mut out = BytesMut::new();
        compress_envelope(&env, Compression::Lz4, &mut out).expect("compress");
        assert_eq!(&out[..], &env[..]);
    }

    #[test]
    fn several_envelopes_compressed_one_by_one() {
        let body = vec![b'z'; 500];
        let mut envs = BytesMut::new();
        for stream in 0..3i16 {
            envs.put_slice(&[0x84, 0]);
            envs.put_i16(stream);
            envs.put_u8(0x08);
            envs.put_i32(body.len() as i32);
            envs.put_slice(&body);
        }
        let mut out = BytesMut::new();
        compress_envelopes(&envs, Compression::Snappy, &mut out).expect("compress");
        let mut n = 0;
        while let Ok(Some(env)) = crate::decode_envelope(&mut out, 1 << 20) {
            assert!(env.flags.contains(Flags::COMPRESSION));
            assert_eq!(env.stream, n);
            let back = decompress_body(Compression::Snappy, &env.body, 1 << 20).expect("body");
            assert_eq!(&back[..], &body[..]);
            n += 1;
        }
        assert_eq!(n, 3);
        assert!(compress_envelopes(&envs[..20], Compression::Lz4, &mut out).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(body in proptest::collection::vec(any::<u8>(), 0..2000), lz4 in any::<bool>()) {
            let c = if lz4 { Compression::Lz4 } else { Compression::Snappy };
            let mut out = BytesMut::new();
            compress_body(c, &body, &mut out).expect("compress");
            let back = decompress_body(c, &out, 1 << 20).expect("decompress");
            prop_assert_eq!(&back[..], &body[..]);
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decompress_body(Compression::Lz4, &data, 1 << 16);
            let _ = decompress_body(Compression::Snappy, &data, 1 << 16);
        }
    }
}
