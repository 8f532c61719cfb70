//! amphora-protocol: the CQL native protocol v3/v4/v5 as a server speaks it, sans-IO.
//!
//! Owns: envelope headers and the incremental envelope decoder, v4 body compression
//! (lz4/snappy), v5 segment framing (CRC24/CRC32, LZ4 segments), request body decoding
//! (STARTUP … BATCH) into zero-copy structs, response encoding (ERROR with every code,
//! READY, AUTHENTICATE, AUTH_*, SUPPORTED, RESULT kinds, EVENT) into one `BytesMut`, the wire
//! `ColumnType` enum, and the wire primitives (`[string]`, `[value]`, vints, …).
//!
//! Must never depend on: sockets, tokio or any I/O; `amphora-types`, `amphora-storage` or
//! any crate above it (the server maps its types onto the wire types here). No panics are
//! reachable from network input.
//!
//! Key types: [`Envelope`] + [`decode_envelope`], [`Request`] + [`decode_request`],
//! [`Response`] + [`encode_response`], [`RowsWriter`], [`ErrorResponse`],
//! [`SegmentDecoder`] / [`SegmentEncoder`], [`Compression`]. Written up in
//! `docs/dev/native-protocol.md`.
#![deny(clippy::unwrap_used)]

pub mod column_type;
pub mod compression;
pub mod consistency;
pub mod envelope;
pub mod error;
pub mod request;
pub mod response;
pub mod segment;
pub mod wire;

pub use column_type::ColumnType;
pub use compression::{Compression, compress_envelope, compress_envelopes, decompress_body};
pub use consistency::Consistency;
pub use envelope::{
    DEFAULT_MAX_FRAME_SIZE, Direction, Envelope, Flags, HEADER_LEN, Opcode, ProtocolVersion,
    decode_envelope,
};
pub use error::{CompressionError, DecodeError, EncodeError, FrameError, SegmentError};
pub use request::{
    AuthResponse, Batch, BatchStatement, BatchStatementKind, BatchType, BytesMap, DecodeOptions,
    Execute, ExecutePeek, ExtraParameters, Prepare, Query, QueryParameters, Register, Request,
    RequestMessage, Startup, decode_request, decode_request_owned, peek_execute,
};
pub use response::{
    ColumnSpec, EncodedColumns, ErrorCode, ErrorKind, ErrorResponse, Event, FailureReason,
    Prepared, PreparedMetadata, RateLimitOp, Response, ResponsePrefix, ResultMessage, RowsMetadata,
    RowsWriter, SchemaChange, SchemaChangeTarget, SchemaChangeType, StatusChangeType,
    TopologyChangeType, WriteType, encode_frame_error, encode_response, encode_unsupported_version,
};
pub use segment::{SegmentCompression, SegmentDecoder, SegmentEncoder};
pub use wire::{PreparedId, Value, ValueRef, Values};
