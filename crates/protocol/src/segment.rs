//! v5 segment framing (spec v5 §2): after the server sends READY or AUTHENTICATE to a v5
//! STARTUP, both directions wrap envelopes in checksummed frames. All integers little-endian.
//!
//! ```text
//! uncompressed: [3B header: payload_len:17 | self_contained:1][3B CRC24(header)]
//!               [payload ≤ 131071 B][4B CRC32(payload)]
//! lz4:          [5B header: compressed_len:17 | uncompressed_len:17 | self_contained:1]
//!               [3B CRC24(header)][compressed payload][4B CRC32(compressed payload)]
//! ```
//! `uncompressed_len == 0` in an LZ4 frame means the payload is stored uncompressed.
//! CRC24: init 0x875060, poly 0x1974F0B, header bytes fed in wire order. CRC32: IEEE, seeded
//! by first hashing `FA 2D 55 CA` (Cassandra `net/Crc.java`; not in the spec).
//!
//! A self-contained frame holds one or more whole envelopes; an envelope larger than one
//! payload is split over consecutive non-self-contained frames.

use bytes::{Buf, BufMut, BytesMut};

use crate::compression::lz4_append;
use crate::envelope::HEADER_LEN;
use crate::error::{EncodeError, SegmentError};

/// Largest payload of one frame (17 bits).
pub const MAX_PAYLOAD: usize = (1 << 17) - 1;
const CRC24_INIT: u32 = 0x87_5060;
const CRC24_POLY: u32 = 0x197_4F0B;
/// `crc32(FA 2D 55 CA)`: the state CRC32 starts from.
pub const CRC32_INITIAL: u32 = 0x4477_7ED3;
const CRC24_LEN: usize = 3;
const CRC32_LEN: usize = 4;

/// CRC24 of a frame header (3 or 5 bytes), as Cassandra computes it.
pub fn crc24(bytes: &[u8]) -> u32 {
    let mut crc = CRC24_INIT;
    for &b in bytes {
        crc ^= u32::from(b) << 16;
        for _ in 0..8 {
            crc <<= 1;
            if crc & 0x100_0000 != 0 {
                crc ^= CRC24_POLY;
            }
        }
    }
    crc
}

/// CRC32 of a frame payload (IEEE, seeded with [`CRC32_INITIAL`]).
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(CRC32_INITIAL);
    h.update(bytes);
    h.finalize()
}

/// Segment compression: only LZ4 exists in v5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentCompression {
    None,
    Lz4,
}

impl SegmentCompression {
    fn header_len(self) -> usize {
        match self {
            Self::None => 3,
            Self::Lz4 => 5,
        }
    }
}

fn le(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

/// Turns received frames back into envelope bytes. Feed it the socket buffer; it appends
/// whole envelopes only to `out`, ready for [`crate::decode_envelope`].
#[derive(Debug)]
pub struct SegmentDecoder {
    compression: SegmentCompression,
    max_envelope_size: usize,
    /// A large envelope being reassembled from non-self-contained frames.
    partial: BytesMut,
}

impl SegmentDecoder {
    /// `max_envelope_size` bounds a reassembled envelope (use the max frame size).
    pub fn new(compression: SegmentCompression, max_envelope_size: usize) -> Self {
        Self {
            compression,
            max_envelope_size,
            partial: BytesMut::new(),
        }
    }

    /// True while a large envelope is half reassembled.
    pub fn in_progress(&self) -> bool {
        !self.partial.is_empty()
    }

    /// Consumes every whole frame at the front of `src`, appending the whole envelopes they
    /// complete to `out`. Returns the number of frames consumed. Errors are fatal: close the
    /// connection.
    pub fn decode(
        &mut self,
        src: &mut BytesMut,
        out: &mut BytesMut,
    ) -> Result<usize, SegmentError> {
        let mut frames = 0;
        loop {
            let hlen = self.compression.header_len();
            let Some(header) = src.get(..hlen) else { break };
            let word = le(header);
            let crc_rx = src.get(hlen..hlen + CRC24_LEN).map(|b| le(b) as u32);
            let Some(crc_rx) = crc_rx else { break };
            let computed = crc24(header);
            if computed != crc_rx {
                return Err(SegmentError::HeaderCrcMismatch {
                    computed,
                    received: crc_rx,
                });
            }
            let (payload_len, uncompressed_len, self_contained) = match self.compression {
                SegmentCompression::None => {
                    ((word & 0x1FFFF) as usize, 0usize, word & (1 << 17) != 0)
                }
                SegmentCompression::Lz4 => (
                    (word & 0x1FFFF) as usize,
                    ((word >> 17) & 0x1FFFF) as usize,
                    word & (1 << 34) != 0,
                ),
            };
            let total = hlen + CRC24_LEN + payload_len + CRC32_LEN;
            if src.len() < total {
                src.reserve(total - src.len());
                break;
            }
            let mut frame = src.split_to(total);
            frame.advance(hlen + CRC24_LEN);
            let payload = frame.split_to(payload_len);
            let crc_rx = le(&frame) as u32;
            let computed = crc32(&payload);
            if computed != crc_rx {
                return Err(SegmentError::PayloadCrcMismatch {
                    computed,
                    received: crc_rx,
                });
            }
            frames += 1;
            let decompressed;
            let payload: &[u8] = if uncompressed_len == 0 {
                &payload
            } else {
                decompressed = lz4_flex::block::decompress(&payload, uncompressed_len)
                    .map_err(|e| SegmentError::Lz4(e.to_string()))?;
                if decompressed.len() != uncompressed_len {
                    return Err(SegmentError::LengthMismatch {
                        expected: uncompressed_len,
                        actual: decompressed.len(),
                    });
                }
                &decompressed
            };
            if self_contained {
                self.self_contained(payload, out)?;
            } else {
                self.continuation(payload, out)?;
            }
        }
        Ok(frames)
    }

    fn self_contained(&mut self, payload: &[u8], out: &mut BytesMut) -> Result<(), SegmentError> {
        if !self.partial.is_empty() {
            return Err(SegmentError::InterruptedEnvelope {
                have: self.partial.len(),
                need: self.partial_need().unwrap_or(0),
            });
        }
        // Checks that the payload is whole envelopes, so `out` never holds a torn one.
        let mut rest = payload;
        while !rest.is_empty() {
            let len = envelope_len(rest, self.max_envelope_size)?;
            match rest.get(len..) {
                Some(r) => rest = r,
                None => {
                    return Err(SegmentError::PartialEnvelope {
                        remaining: rest.len(),
                    });
                }
            }
        }
        out.extend_from_slice(payload);
        Ok(())
    }

    fn partial_need(&self) -> Option<usize> {
        envelope_len(&self.partial, usize::MAX).ok()
    }

    fn continuation(&mut self, payload: &[u8], out: &mut BytesMut) -> Result<(), SegmentError> {
        self.partial.extend_from_slice(payload);
        if self.partial.len() < HEADER_LEN {
            return Ok(());
        }
        let need = envelope_len(&self.partial, self.max_envelope_size)?;
        if self.partial.len() < need {
            return Ok(());
        }
        if self.partial.len() > need {
            return Err(SegmentError::PartialEnvelope {
                remaining: self.partial.len() - need,
            });
        }
        out.extend_from_slice(&self.partial);
        self.partial = BytesMut::new();
        Ok(())
    }
}

/// Total length (header + body) of the envelope at the front of `buf`, which must hold at
/// least its header.
fn envelope_len(buf: &[u8], max: usize) -> Result<usize, SegmentError> {
    let Some(len) = buf.get(5..HEADER_LEN) else {
        return Err(SegmentError::PartialEnvelope {
            remaining: buf.len(),
        });
    };
    let length = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
    let body = usize::try_from(length).map_err(|_| SegmentError::NegativeLength { length })?;
    let total = body + HEADER_LEN;
    if total > max {
        return Err(SegmentError::EnvelopeTooLarge { length: total, max });
    }
    Ok(total)
}

/// Packs encoded envelopes into frames: consecutive small envelopes share self-contained
/// frames; a larger one is split over non-self-contained frames.
#[derive(Debug, Clone)]
pub struct SegmentEncoder {
    compression: SegmentCompression,
}

impl SegmentEncoder {
    pub fn new(compression: SegmentCompression) -> Self {
        Self { compression }
    }

    /// Appends to `out` the frames carrying `envelopes`, one or more whole envelopes back to
    /// back (as the response encoders write them).
    pub fn encode(&self, envelopes: &[u8], out: &mut BytesMut) -> Result<(), EncodeError> {
        let mut group_start = 0;
        let mut pos = 0;
        while pos < envelopes.len() {
            let rest = envelopes.get(pos..).unwrap_or_default();
            let len = envelope_len(rest, usize::MAX)
                .ok()
                .filter(|l| *l <= rest.len())
                .ok_or(EncodeError::NotAnEnvelope { offset: pos })?;
            if len > MAX_PAYLOAD {
                self.flush(envelopes.get(group_start..pos).unwrap_or_default(), out);
                for chunk in rest.get(..len).unwrap_or_default().chunks(MAX_PAYLOAD) {
                    self.write_frame(chunk, false, out);
                }
                pos += len;
                group_start = pos;
                continue;
            }
            if pos + len - group_start > MAX_PAYLOAD {
                self.flush(envelopes.get(group_start..pos).unwrap_or_default(), out);
                group_start = pos;
            }
            pos += len;
        }
        self.flush(envelopes.get(group_start..pos).unwrap_or_default(), out);
        Ok(())
    }

    fn flush(&self, group: &[u8], out: &mut BytesMut) {
        if !group.is_empty() {
            self.write_frame(group, true, out);
        }
    }

    /// Writes one frame; `payload.len()` ≤ [`MAX_PAYLOAD`] (callers chunk by it).
    fn write_frame(&self, payload: &[u8], self_contained: bool, out: &mut BytesMut) {
        debug_assert!(payload.len() <= MAX_PAYLOAD);
        let sc = u64::from(self_contained);
        match self.compression {
            SegmentCompression::None => {
                let word = payload.len() as u64 | sc << 17;
                let header = &word.to_le_bytes()[..3];
                out.reserve(3 + CRC24_LEN + payload.len() + CRC32_LEN);
                out.put_slice(header);
                out.put_slice(&crc24(header).to_le_bytes()[..3]);
                out.put_slice(payload);
                out.put_u32_le(crc32(payload));
            }
            SegmentCompression::Lz4 => {
                let start = out.len();
                out.put_bytes(0, 5 + CRC24_LEN);
                let body_at = out.len();
                lz4_append(payload, out);
                let mut compressed_len = out.len() - body_at;
                let mut uncompressed_len = payload.len();
                if compressed_len >= payload.len() || compressed_len > MAX_PAYLOAD {
                    // Not worth it: stored uncompressed, signalled by uncompressed_len = 0.
                    out.truncate(body_at);
                    out.put_slice(payload);
                    compressed_len = payload.len();
                    uncompressed_len = 0;
                }
                let word = compressed_len as u64 | (uncompressed_len as u64) << 17 | sc << 34;
                let header = word.to_le_bytes();
                let header = &header[..5];
                let crc = crc24(header).to_le_bytes();
                if let Some(h) = out.get_mut(start..body_at) {
                    h[..5].copy_from_slice(header);
                    h[5..].copy_from_slice(&crc[..3]);
                }
                let crc = crc32(out.get(body_at..).unwrap_or_default());
                out.put_u32_le(crc);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn crc24_spec_vector() {
        // Header of a 50-byte self-contained uncompressed frame.
        let crc = crc24(&[0x32, 0x00, 0x02]);
        assert_eq!(&crc.to_le_bytes()[..3], &[0xA5, 0xFF, 0xEE]);
    }

    #[test]
    fn crc32_seed_is_crc_of_magic() {
        assert_eq!(crc32fast::hash(&[0xFA, 0x2D, 0x55, 0xCA]), CRC32_INITIAL);
        let payload = b"hello frames";
        let mut whole = vec![0xFA, 0x2D, 0x55, 0xCA];
        whole.extend_from_slice(payload);
        assert_eq!(crc32(payload), crc32fast::hash(&whole));
    }

    fn envelope(stream: i16, body_len: usize) -> Vec<u8> {
        let mut e = vec![0x05, 0x00];
        e.extend_from_slice(&stream.to_be_bytes());
        e.push(0x07);
        e.extend_from_slice(&(body_len as i32).to_be_bytes());
        e.extend((0..body_len).map(|i| (i * 31 % 251) as u8));
        e
    }

    #[test]
    fn uncompressed_frame_layout() {
        let env = envelope(1, 41); // 50 bytes
        let mut out = BytesMut::new();
        SegmentEncoder::new(SegmentCompression::None)
            .encode(&env, &mut out)
            .expect("encode");
        assert_eq!(&out[..6], &[0x32, 0x00, 0x02, 0xA5, 0xFF, 0xEE]);
        assert_eq!(out.len(), 6 + 50 + 4);
    }

    fn round_trip(c: SegmentCompression, envs: &[Vec<u8>], chunk: usize) -> (Vec<u8>, usize) {
        let all: Vec<u8> = envs.concat();
        let mut wire = BytesMut::new();
        SegmentEncoder::new(c)
            .encode(&all, &mut wire)
            .expect("encode");
        let mut dec = SegmentDecoder::new(c, 16 << 20);
        let mut src = BytesMut::new();
        let mut out = BytesMut::new();
        let mut frames = 0;
        for piece in wire.chunks(chunk.max(1)) {
            src.extend_from_slice(piece);
            frames += dec.decode(&mut src, &mut out).expect("decode");
        }
        assert!(src.is_empty());
        assert!(!dec.in_progress());
        (out.to_vec(), frames)
    }

    #[test]
    fn several_envelopes_share_one_frame() {
        let envs = vec![envelope(1, 10), envelope(2, 0), envelope(3, 1000)];
        for c in [SegmentCompression::None, SegmentCompression::Lz4] {
            let (out, frames) = round_trip(c, &envs, 7);
            assert_eq!(out, envs.concat());
            assert_eq!(frames, 1);
        }
    }

    #[test]
    fn large_envelope_spans_frames() {
        // 300 KB body: three non-self-contained frames, between two small envelopes.
        let envs = vec![envelope(1, 5), envelope(2, 300_000), envelope(3, 5)];
        for c in [SegmentCompression::None, SegmentCompression::Lz4] {
            let (out, frames) = round_trip(c, &envs, 65_536);
            assert_eq!(out, envs.concat());
            assert_eq!(frames, 1 + 3 + 1);
        }
    }

    #[test]
    fn exact_payload_limit() {
        // One envelope of exactly MAX_PAYLOAD bytes fits one self-contained frame; one more
        // byte needs two non-self-contained frames.
        let (_, frames) = round_trip(
            SegmentCompression::None,
            &[envelope(1, MAX_PAYLOAD - 9)],
            4096,
        );
        assert_eq!(frames, 1);
        let (_, frames) = round_trip(
            SegmentCompression::None,
            &[envelope(1, MAX_PAYLOAD - 8)],
            4096,
        );
        assert_eq!(frames, 2);
    }

    #[test]
    fn incompressible_lz4_is_stored() {
        let mut x: u32 = 12345;
        let mut env = envelope(1, 0);
        let body: Vec<u8> = (0..5000)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (x >> 16) as u8
            })
            .collect();
        env[5..9].copy_from_slice(&(body.len() as i32).to_be_bytes());
        env.extend_from_slice(&body);
        let mut wire = BytesMut::new();
        SegmentEncoder::new(SegmentCompression::Lz4)
            .encode(&env, &mut wire)
            .expect("encode");
        let word = le(&wire[..5]);
        assert_eq!((word >> 17) & 0x1FFFF, 0, "uncompressed_len 0 = stored");
        let (out, _) = round_trip(SegmentCompression::Lz4, &[env.clone()], 100);
        assert_eq!(out, env);
    }

    #[test]
    fn corrupt_checksums_are_typed_errors() {
        let env = envelope(1, 20);
        for c in [SegmentCompression::None, SegmentCompression::Lz4] {
            let mut wire = BytesMut::new();
            SegmentEncoder::new(c)
                .encode(&env, &mut wire)
                .expect("encode");
            let hlen = c.header_len();
            let mut bad = wire.clone();
            bad[hlen] ^= 1;
            let r = SegmentDecoder::new(c, 1 << 20).decode(&mut bad, &mut BytesMut::new());
            assert!(matches!(r, Err(SegmentError::HeaderCrcMismatch { .. })));
            let mut bad = wire.clone();
            let last = bad.len() - 5;
            bad[last] ^= 1;
            let r = SegmentDecoder::new(c, 1 << 20).decode(&mut bad, &mut BytesMut::new());
            assert!(matches!(r, Err(SegmentError::PayloadCrcMismatch { .. })));
        }
    }

    #[test]
    fn torn_envelope_in_self_contained_frame_is_an_error() {
        let env = envelope(1, 20);
        let mut wire = BytesMut::new();
        SegmentEncoder::new(SegmentCompression::None).write_frame(&env[..15], true, &mut wire);
        let r = SegmentDecoder::new(SegmentCompression::None, 1 << 20)
            .decode(&mut wire, &mut BytesMut::new());
        assert!(matches!(r, Err(SegmentError::PartialEnvelope { .. })));
    }

    #[test]
    fn reassembly_respects_the_size_limit() {
        let env = envelope(1, 200_000);
        let mut wire = BytesMut::new();
        SegmentEncoder::new(SegmentCompression::None)
            .encode(&env, &mut wire)
            .expect("encode");
        let r = SegmentDecoder::new(SegmentCompression::None, 100_000)
            .decode(&mut wire, &mut BytesMut::new());
        assert!(matches!(
            r,
            Err(SegmentError::EnvelopeTooLarge {
                length: 200_009,
                max: 100_000
            })
        ));
    }

    proptest! {
        #[test]
        fn round_trips(sizes in proptest::collection::vec(0usize..150_000, 1..5), lz4 in any::<bool>(), chunk in 1usize..70_000) {
            let c = if lz4 { SegmentCompression::Lz4 } else { SegmentCompression::None };
            let envs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, s)| envelope(i as i16, *s)).collect();
            let (out, _) = round_trip(c, &envs, chunk);
            prop_assert_eq!(out, envs.concat());
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300), lz4 in any::<bool>()) {
            let c = if lz4 { SegmentCompression::Lz4 } else { SegmentCompression::None };
            let mut src = BytesMut::from(&data[..]);
            let _ = SegmentDecoder::new(c, 1 << 20).decode(&mut src, &mut BytesMut::new());
        }
    }
}
