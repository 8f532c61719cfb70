//! The 9-byte envelope header (a "frame" in v3/v4) and the incremental envelope decoder.
//!
//! ```text
//! 0         8        16                32        40                                72
//! +---------+---------+---------+-------+---------+---------+---------+---------+-----
//! | version |  flags  |     stream      | opcode  |              length              |
//! +---------+---------+---------+-------+---------+---------+---------+---------+-----
//! ```
//! Bit 7 of `version` is the direction (1 = response). `length` is the body length.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::FrameError;

/// Length of the envelope header in v3+.
pub const HEADER_LEN: usize = 9;
/// Cassandra's `native_transport_max_frame_size` default (16 MiB), header included.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 16 * 1024 * 1024;

/// Most the decoder reserves ahead for a body that has not arrived yet.
const RESERVE_AHEAD_MAX: usize = 256 * 1024;

/// A protocol version we speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    V3 = 3,
    V4 = 4,
    V5 = 5,
}

impl ProtocolVersion {
    /// Our highest version; the one the "unsupported version" answer carries.
    pub const MAX: ProtocolVersion = ProtocolVersion::V5;

    /// From the low 7 bits of the version byte.
    pub fn from_byte(v: u8) -> Option<Self> {
        match v & 0x7F {
            3 => Some(Self::V3),
            4 => Some(Self::V4),
            5 => Some(Self::V5),
            _ => None,
        }
    }

    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The value for SUPPORTED's `PROTOCOL_VERSIONS`.
    pub const SUPPORTED_DESCRIPTIONS: [&'static str; 3] = ["3/v3", "4/v4", "5/v5"];
}

/// Direction bit of the version byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Request,
    Response,
}

/// Envelope header flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Flags(pub u8);

impl Flags {
    /// Body compressed (v3/v4 only; ignored in v5, where segments carry compression).
    pub const COMPRESSION: u8 = 0x01;
    pub const TRACING: u8 = 0x02;
    pub const CUSTOM_PAYLOAD: u8 = 0x04;
    pub const WARNING: u8 = 0x08;
    pub const USE_BETA: u8 = 0x10;

    pub fn contains(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    pub fn set(&mut self, bit: u8, on: bool) {
        if on {
            self.0 |= bit;
        } else {
            self.0 &= !bit;
        }
    }
}

/// Message opcodes (spec §2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    Error = 0x00,
    Startup = 0x01,
    Ready = 0x02,
    Authenticate = 0x03,
    Options = 0x05,
    Supported = 0x06,
    Query = 0x07,
    Result = 0x08,
    Prepare = 0x09,
    Execute = 0x0A,
    Register = 0x0B,
    Event = 0x0C,
    Batch = 0x0D,
    AuthChallenge = 0x0E,
    AuthResponse = 0x0F,
    AuthSuccess = 0x10,
}

impl Opcode {
    pub fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0x00 => Self::Error,
            0x01 => Self::Startup,
            0x02 => Self::Ready,
            0x03 => Self::Authenticate,
            0x05 => Self::Options,
            0x06 => Self::Supported,
            0x07 => Self::Query,
            0x08 => Self::Result,
            0x09 => Self::Prepare,
            0x0A => Self::Execute,
            0x0B => Self::Register,
            0x0C => Self::Event,
            0x0D => Self::Batch,
            0x0E => Self::AuthChallenge,
            0x0F => Self::AuthResponse,
            0x10 => Self::AuthSuccess,
            _ => return None,
        })
    }

    /// True for messages a client sends.
    pub fn is_request(self) -> bool {
        matches!(
            self,
            Self::Startup
                | Self::Options
                | Self::Query
                | Self::Prepare
                | Self::Execute
                | Self::Register
                | Self::Batch
                | Self::AuthResponse
        )
    }
}

/// One decoded envelope. `body` is a zero-copy slice of the receive buffer, still compressed
/// when `flags` has [`Flags::COMPRESSION`] (see [`crate::decode_request`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub version: ProtocolVersion,
    pub direction: Direction,
    pub flags: Flags,
    pub stream: i16,
    pub opcode: Opcode,
    pub body: Bytes,
}

/// Parsed header, before the body is buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: ProtocolVersion,
    pub direction: Direction,
    pub flags: Flags,
    pub stream: i16,
    pub opcode: Opcode,
    pub body_len: usize,
}

/// Parses the header at the front of `buf` without consuming it: `Ok(None)` until enough
/// bytes are buffered to decide.
pub fn peek_header(buf: &[u8], max_frame_size: usize) -> Result<Option<Header>, FrameError> {
    let Some(&vbyte) = buf.first() else {
        return Ok(None);
    };
    let Some(version) = ProtocolVersion::from_byte(vbyte) else {
        // v1/v2 had a one-byte stream at offset 2; v3+ (and DSE, v6) a two-byte one.
        let low = vbyte & 0x7F;
        let stream = if low == 1 || low == 2 {
            match buf.get(2) {
                Some(&s) => i16::from(s as i8),
                None => return Ok(None),
            }
        } else {
            match (buf.get(2), buf.get(3)) {
                (Some(&a), Some(&b)) => i16::from_be_bytes([a, b]),
                _ => return Ok(None),
            }
        };
        return Err(FrameError::UnsupportedVersion {
            version: low,
            stream,
        });
    };
    let Some(h) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let mut hdr = [0u8; HEADER_LEN];
    hdr.copy_from_slice(h);
    let direction = if vbyte & 0x80 != 0 {
        Direction::Response
    } else {
        Direction::Request
    };
    let flags = Flags(hdr[1]);
    let stream = i16::from_be_bytes([hdr[2], hdr[3]]);
    let opcode = Opcode::from_u8(hdr[4]).ok_or(FrameError::UnknownOpcode {
        opcode: hdr[4],
        version,
        stream,
    })?;
    let length = i32::from_be_bytes([hdr[5], hdr[6], hdr[7], hdr[8]]);
    let body_len = usize::try_from(length).map_err(|_| FrameError::NegativeLength {
        length,
        version,
        stream,
    })?;
    if body_len.saturating_add(HEADER_LEN) > max_frame_size {
        return Err(FrameError::FrameTooLarge {
            length: body_len + HEADER_LEN,
            max: max_frame_size,
            version,
            stream,
        });
    }
    Ok(Some(Header {
        version,
        direction,
        flags,
        stream,
        opcode,
        body_len,
    }))
}

/// Splits one whole envelope off the front of `buf`; `Ok(None)` until it is all buffered
/// (then `buf` has capacity reserved for up to 256 KiB of the rest). `max_frame_size`
/// bounds header + body.
///
/// After an error the stream is not resynchronised: answer the error, then close.
pub fn decode_envelope(
    buf: &mut BytesMut,
    max_frame_size: usize,
) -> Result<Option<Envelope>, FrameError> {
    let Some(h) = peek_header(buf, max_frame_size)? else {
        return Ok(None);
    };
    let total = HEADER_LEN + h.body_len;
    if buf.len() < total {
        // Capped: a header alone must not make an unauthenticated client cost 16 MiB.
        buf.reserve((total - buf.len()).min(RESERVE_AHEAD_MAX));
        return Ok(None);
    }
    // Advancing past the header first leaves one split (one refcount) for the body.
    buf.advance(HEADER_LEN);
    let body = buf.split_to(h.body_len).freeze();
    Ok(Some(Envelope {
        version: h.version,
        direction: h.direction,
        flags: h.flags,
        stream: h.stream,
        opcode: h.opcode,
        body,
    }))
}

/// Writes a response header with a zero length; returns the offset to pass to
/// [`finish_envelope`]. Used by all response encoders.
pub fn begin_envelope(
    buf: &mut BytesMut,
    version: ProtocolVersion,
    flags: Flags,
    stream: i16,
    opcode: Opcode,
) -> usize {
    let start = buf.len();
    buf.reserve(HEADER_LEN + 64);
    let [s0, s1] = stream.to_be_bytes();
    // One append instead of five (each checks the capacity).
    buf.put_slice(&[
        version.as_u8() | 0x80,
        flags.0,
        s0,
        s1,
        opcode as u8,
        0,
        0,
        0,
        0,
    ]);
    start
}

/// Patches the body length of the envelope that starts at `start`.
pub fn finish_envelope(buf: &mut BytesMut, start: usize) -> Result<(), crate::EncodeError> {
    let body_len = buf.len().saturating_sub(start + HEADER_LEN);
    let len = i32::try_from(body_len).map_err(|_| crate::EncodeError::ValueTooLong {
        length: body_len,
        max: i32::MAX as usize,
    })?;
    if let Some(dst) = buf.get_mut(start + 5..start + HEADER_LEN) {
        dst.copy_from_slice(&len.to_be_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(version: u8, stream: i16, opcode: u8, body: &[u8]) -> BytesMut {
        let mut b = BytesMut::new();
        b.put_u8(version);
        b.put_u8(0);
        b.put_i16(stream);
        b.put_u8(opcode);
        b.put_i32(body.len() as i32);
        b.put_slice(body);
        b
    }

    #[test]
    fn decodes_incrementally() {
        let full = frame(0x04, 7, 0x05, b"abc");
        let mut buf = BytesMut::new();
        for (i, byte) in full.iter().enumerate() {
            assert!(
                matches!(decode_envelope(&mut buf, DEFAULT_MAX_FRAME_SIZE), Ok(None)),
                "at {i}"
            );
            buf.put_u8(*byte);
        }
        let env = decode_envelope(&mut buf, DEFAULT_MAX_FRAME_SIZE)
            .ok()
            .flatten();
        let env = env.expect("whole envelope");
        assert_eq!(env.version, ProtocolVersion::V4);
        assert_eq!(env.stream, 7);
        assert_eq!(env.opcode, Opcode::Options);
        assert_eq!(&env.body[..], b"abc");
        assert!(buf.is_empty());
    }

    #[test]
    fn two_envelopes_back_to_back() {
        let mut buf = frame(0x05, 1, 0x05, b"");
        buf.extend_from_slice(&frame(0x05, 2, 0x07, b"xy"));
        let a = decode_envelope(&mut buf, 1024);
        let b = decode_envelope(&mut buf, 1024);
        assert!(matches!(a, Ok(Some(Envelope { stream: 1, .. }))));
        assert!(matches!(
            b,
            Ok(Some(Envelope {
                stream: 2,
                opcode: Opcode::Query,
                ..
            }))
        ));
        assert!(matches!(decode_envelope(&mut buf, 1024), Ok(None)));
    }

    #[test]
    fn unsupported_versions() {
        for v in [0x42u8, 0x41, 6, 0x06, 0x7F, 0] {
            let mut buf = frame(v, 0x0102, 0x05, b"");
            assert_eq!(
                decode_envelope(&mut buf, 1024),
                Err(FrameError::UnsupportedVersion {
                    version: v & 0x7F,
                    stream: 0x0102
                })
            );
        }
        // v2 header: one-byte stream at offset 2; decided after three bytes.
        let mut buf = BytesMut::from(&[0x02u8, 0x00, 0x05][..]);
        assert_eq!(
            decode_envelope(&mut buf, 1024),
            Err(FrameError::UnsupportedVersion {
                version: 2,
                stream: 5
            })
        );
        // Not decided with too few bytes.
        let mut buf = BytesMut::from(&[0x42u8, 0x00, 0x05][..]);
        assert_eq!(decode_envelope(&mut buf, 1024), Ok(None));
    }

    #[test]
    fn unknown_opcode_and_lengths() {
        let mut buf = frame(0x04, 3, 0x04, b"");
        assert!(matches!(
            decode_envelope(&mut buf, 1024),
            Err(FrameError::UnknownOpcode {
                opcode: 4,
                stream: 3,
                ..
            })
        ));
        let mut buf = frame(0x04, 3, 0x11, b"");
        assert!(matches!(
            decode_envelope(&mut buf, 1024),
            Err(FrameError::UnknownOpcode { opcode: 0x11, .. })
        ));
        let mut buf = frame(0x04, 3, 0x07, b"");
        buf[5..9].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(matches!(
            decode_envelope(&mut buf, 1024),
            Err(FrameError::NegativeLength {
                length: -5,
                stream: 3,
                ..
            })
        ));
        // At the limit and one past it.
        let mut buf = frame(0x04, 3, 0x07, &[0u8; 100]);
        assert!(matches!(decode_envelope(&mut buf, 109), Ok(Some(_))));
        let mut buf = frame(0x04, 3, 0x07, &[0u8; 100]);
        assert_eq!(
            decode_envelope(&mut buf, 108),
            Err(FrameError::FrameTooLarge {
                length: 109,
                max: 108,
                version: ProtocolVersion::V4,
                stream: 3
            })
        );
        // Too large is reported from the header alone, before the body arrives.
        let mut buf = frame(0x04, 3, 0x07, b"");
        buf[5..9].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            decode_envelope(&mut buf, DEFAULT_MAX_FRAME_SIZE),
            Err(FrameError::FrameTooLarge { .. })
        ));
    }
}
