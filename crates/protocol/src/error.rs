//! Typed errors of the codec. Every variant carries the numbers that explain it; the server
//! maps them onto CQL error codes in one place.

use crate::envelope::{Opcode, ProtocolVersion};

/// Errors found while splitting the byte stream into envelopes (the 9-byte header).
///
/// Each carries the client's stream id so the server can answer a protocol error on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The version byte names a protocol version we do not speak (v1, v2, v6+, DSE 0x41/0x42).
    /// Answer with [`crate::encode_unsupported_version`] and close the connection.
    #[error(
        "Invalid or unsupported protocol version ({version}); supported versions are (3/v3, 4/v4, 5/v5)"
    )]
    UnsupportedVersion { version: u8, stream: i16 },
    #[error("unknown opcode 0x{opcode:02X}")]
    UnknownOpcode {
        opcode: u8,
        version: ProtocolVersion,
        stream: i16,
    },
    #[error("invalid frame body length {length}")]
    NegativeLength {
        length: i32,
        version: ProtocolVersion,
        stream: i16,
    },
    #[error("Request is too big: length {length} exceeds maximum allowed length {max}")]
    FrameTooLarge {
        length: usize,
        max: usize,
        version: ProtocolVersion,
        stream: i16,
    },
}

impl FrameError {
    /// The stream id of the offending envelope, to answer on.
    pub fn stream(&self) -> i16 {
        match *self {
            FrameError::UnsupportedVersion { stream, .. }
            | FrameError::UnknownOpcode { stream, .. }
            | FrameError::NegativeLength { stream, .. }
            | FrameError::FrameTooLarge { stream, .. } => stream,
        }
    }

    /// The version the answer must carry: the client's if we support it, else our highest.
    pub fn response_version(&self) -> ProtocolVersion {
        match *self {
            FrameError::UnsupportedVersion { .. } => ProtocolVersion::MAX,
            FrameError::UnknownOpcode { version, .. }
            | FrameError::NegativeLength { version, .. }
            | FrameError::FrameTooLarge { version, .. } => version,
        }
    }
}

/// Errors found while decoding a request body. All of them mean "protocol error on this stream".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("not enough bytes: expected {expected}, received {received}")]
    TooFewBytes { expected: usize, received: usize },
    #[error("negative length {length} where a length is required")]
    NegativeLength { length: i32 },
    #[error("invalid value length {length}")]
    InvalidValueLength { length: i32 },
    #[error("invalid UTF-8 in string (valid up to byte {valid_up_to})")]
    InvalidUtf8 { valid_up_to: usize },
    #[error("unknown consistency level 0x{0:04X}")]
    UnknownConsistency(u16),
    #[error("unknown batch type {0}")]
    UnknownBatchType(u8),
    #[error("unknown batch query kind {0}")]
    UnknownBatchQueryKind(u8),
    #[error("{0:?} is not a request opcode")]
    NotARequest(Opcode),
    #[error("request carries the response direction bit")]
    ResponseDirection,
    #[error("compressed envelope but no compression was negotiated")]
    CompressionNotNegotiated,
    #[error("unknown type option id 0x{0:04X}")]
    UnknownTypeOption(u16),
    #[error("type nested deeper than {max}")]
    TooDeep { max: usize },
    #[error("decompression failed: {0}")]
    Decompression(#[from] CompressionError),
}

/// Errors of v4 per-envelope compression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompressionError {
    #[error("compressed body too short: expected {expected} bytes, received {received}")]
    TooFewBytes { expected: usize, received: usize },
    #[error("uncompressed length {length} exceeds the limit {max}")]
    TooLarge { length: usize, max: usize },
    #[error("lz4: {0}")]
    Lz4(String),
    #[error("snappy: {0}")]
    Snappy(String),
    #[error("decompressed {actual} bytes, header announced {expected}")]
    LengthMismatch { expected: usize, actual: usize },
}

/// Errors of v5 segment framing. All of them are fatal for the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    #[error("frame header CRC24 mismatch: computed 0x{computed:06X}, received 0x{received:06X}")]
    HeaderCrcMismatch { computed: u32, received: u32 },
    #[error("frame payload CRC32 mismatch: computed 0x{computed:08X}, received 0x{received:08X}")]
    PayloadCrcMismatch { computed: u32, received: u32 },
    #[error("lz4 frame payload: {0}")]
    Lz4(String),
    #[error("lz4 frame decompressed to {actual} bytes, header announced {expected}")]
    LengthMismatch { expected: usize, actual: usize },
    #[error("self-contained frame ends inside an envelope ({remaining} bytes left over)")]
    PartialEnvelope { remaining: usize },
    #[error("envelope of {length} bytes exceeds the limit {max}")]
    EnvelopeTooLarge { length: usize, max: usize },
    #[error("envelope header in a frame has a negative length {length}")]
    NegativeLength { length: i32 },
    #[error(
        "self-contained frame arrived while a large envelope was being reassembled ({have} of {need} bytes)"
    )]
    InterruptedEnvelope { have: usize, need: usize },
}

/// Errors while encoding a response (values the wire cannot represent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("string of {length} bytes exceeds the limit {max}")]
    StringTooLong { length: usize, max: usize },
    #[error("collection of {length} items exceeds the limit {max}")]
    TooManyItems { length: usize, max: usize },
    #[error("value of {length} bytes exceeds the limit {max}")]
    ValueTooLong { length: usize, max: usize },
    #[error("row has {cells} cells, expected a multiple of {columns} columns")]
    PartialRow { cells: u64, columns: usize },
    #[error("compression: {0}")]
    Compression(String),
    #[error("column specs encoded for v{encoded} used in a v{requested} response")]
    VersionMismatch { encoded: u8, requested: u8 },
    #[error("buffer does not hold a whole envelope at offset {offset}")]
    NotAnEnvelope { offset: usize },
}
