//! Request bodies (spec §4.1), decoded into owned structs whose values are zero-copy `Bytes`
//! slices of the envelope body.
//!
//! PERF-CRITICAL: no allocation per value; one `Vec` per request for the values.

use bytes::Bytes;

use crate::compression::{Compression, decompress_body};
use crate::consistency::Consistency;
use crate::envelope::{
    DEFAULT_MAX_FRAME_SIZE, Direction, Envelope, Flags, Opcode, ProtocolVersion,
};
use crate::error::DecodeError;
use crate::wire::{Reader, Value};

/// Per-connection decoding settings, fixed after STARTUP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// v3/v4 body compression negotiated in STARTUP; `None` = a compressed envelope is an error.
    pub compression: Option<Compression>,
    /// ScyllaDB's `SCYLLA_USE_METADATA_ID` extension: a v4 EXECUTE carries a
    /// `result_metadata_id` as in v5.
    pub use_metadata_id: bool,
    /// Bound on a decompressed body.
    pub max_frame_size: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            compression: None,
            use_metadata_id: false,
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
        }
    }
}

/// A `[bytes map]` (custom payload), in wire order.
pub type BytesMap = Vec<(String, Option<Bytes>)>;

/// A decoded request: the optional custom payload prefix and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Present when the envelope had [`Flags::CUSTOM_PAYLOAD`].
    pub custom_payload: Option<BytesMap>,
    pub message: RequestMessage,
}

/// The request messages a server receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestMessage {
    Startup(Startup),
    Options,
    Query(Query),
    Prepare(Prepare),
    Execute(Execute),
    Batch(Batch),
    Register(Register),
    AuthResponse(AuthResponse),
}

/// STARTUP: the options map, in wire order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Startup {
    pub options: Vec<(String, String)>,
}

impl Startup {
    /// The value of `key` (exact match, as Cassandra).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// `<query_parameters>` of QUERY and EXECUTE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryParameters {
    pub consistency: Consistency,
    /// The raw flags (a byte before v5, an int in v5).
    pub flags: u32,
    pub values: Vec<Value>,
    /// Value names, when flag 0x40 is set (same length as `values`).
    pub names: Option<Vec<String>>,
    pub skip_metadata: bool,
    pub page_size: Option<i32>,
    pub paging_state: Option<Bytes>,
    pub serial_consistency: Option<Consistency>,
    pub default_timestamp: Option<i64>,
    /// v5 only.
    pub keyspace: Option<String>,
    /// v5 only.
    pub now_in_seconds: Option<i32>,
}

/// Query-parameter flag masks.
pub mod query_flags {
    pub const VALUES: u32 = 0x0001;
    pub const SKIP_METADATA: u32 = 0x0002;
    pub const PAGE_SIZE: u32 = 0x0004;
    pub const PAGING_STATE: u32 = 0x0008;
    pub const SERIAL_CONSISTENCY: u32 = 0x0010;
    pub const DEFAULT_TIMESTAMP: u32 = 0x0020;
    pub const NAMES_FOR_VALUES: u32 = 0x0040;
    pub const KEYSPACE: u32 = 0x0080;
    pub const NOW_IN_SECONDS: u32 = 0x0100;
}

/// QUERY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub query: String,
    pub parameters: QueryParameters,
}

/// PREPARE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepare {
    pub query: String,
    /// v5: keyspace to prepare in (flag 0x01).
    pub keyspace: Option<String>,
}

/// EXECUTE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execute {
    pub id: Bytes,
    /// v5, or v4 with `SCYLLA_USE_METADATA_ID`.
    pub result_metadata_id: Option<Bytes>,
    pub parameters: QueryParameters,
}

/// Batch type byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchType {
    Logged = 0,
    Unlogged = 1,
    Counter = 2,
}

/// One statement of a BATCH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchStatementKind {
    Query(String),
    Prepared(Bytes),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchStatement {
    pub statement: BatchStatementKind,
    pub values: Vec<Value>,
}

/// BATCH. Flag 0x40 (names for values) is not functional in Cassandra (CASSANDRA-10246):
/// the flags come after the statements, so values are always read without names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub batch_type: BatchType,
    pub statements: Vec<BatchStatement>,
    pub consistency: Consistency,
    pub flags: u32,
    pub serial_consistency: Option<Consistency>,
    pub default_timestamp: Option<i64>,
    pub keyspace: Option<String>,
    pub now_in_seconds: Option<i32>,
}

/// REGISTER: event types (TOPOLOGY_CHANGE, STATUS_CHANGE, SCHEMA_CHANGE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Register {
    pub events: Vec<String>,
}

/// AUTH_RESPONSE: the SASL token (may be null).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthResponse {
    pub token: Option<Bytes>,
}

/// Decodes the body of a request envelope: decompresses it (v3/v4 with the COMPRESSION
/// flag), reads the custom payload prefix, then the message. Trailing bytes are ignored.
pub fn decode_request(env: &Envelope, opts: &DecodeOptions) -> Result<Request, DecodeError> {
    if env.direction != Direction::Request {
        return Err(DecodeError::ResponseDirection);
    }
    let body = if env.flags.contains(Flags::COMPRESSION) && env.version < ProtocolVersion::V5 {
        let c = opts
            .compression
            .ok_or(DecodeError::CompressionNotNegotiated)?;
        decompress_body(c, &env.body, opts.max_frame_size)?
    } else {
        env.body.clone()
    };
    let mut r = Reader::new(body);
    let custom_payload = if env.flags.contains(Flags::CUSTOM_PAYLOAD) {
        Some(r.read_bytes_map()?)
    } else {
        None
    };
    let message = decode_message(env.opcode, env.version, &mut r, opts)?;
    Ok(Request {
        custom_payload,
        message,
    })
}

/// Decodes one request message body (no prefix, already decompressed).
pub fn decode_message(
    opcode: Opcode,
    version: ProtocolVersion,
    r: &mut Reader,
    opts: &DecodeOptions,
) -> Result<RequestMessage, DecodeError> {
    Ok(match opcode {
        Opcode::Startup => RequestMessage::Startup(Startup {
            options: r.read_string_map()?,
        }),
        Opcode::Options => RequestMessage::Options,
        Opcode::Query => {
            let query = r.read_long_string()?;
            let parameters = decode_query_parameters(r, version)?;
            RequestMessage::Query(Query { query, parameters })
        }
        Opcode::Prepare => {
            let query = r.read_long_string()?;
            let mut keyspace = None;
            if version >= ProtocolVersion::V5 {
                let flags = r.read_u32()?;
                if flags & 0x01 != 0 {
                    keyspace = Some(r.read_string()?);
                }
            }
            RequestMessage::Prepare(Prepare { query, keyspace })
        }
        Opcode::Execute => {
            let id = r.read_short_bytes()?;
            let result_metadata_id = if version >= ProtocolVersion::V5 || opts.use_metadata_id {
                Some(r.read_short_bytes()?)
            } else {
                None
            };
            let parameters = decode_query_parameters(r, version)?;
            RequestMessage::Execute(Execute {
                id,
                result_metadata_id,
                parameters,
            })
        }
        Opcode::Batch => RequestMessage::Batch(decode_batch(r, version)?),
        Opcode::Register => RequestMessage::Register(Register {
            events: r.read_string_list()?,
        }),
        Opcode::AuthResponse => RequestMessage::AuthResponse(AuthResponse {
            token: r.read_bytes()?,
        }),
        other => return Err(DecodeError::NotARequest(other)),
    })
}

fn read_consistency(r: &mut Reader) -> Result<Consistency, DecodeError> {
    let v = r.read_u16()?;
    Consistency::from_u16(v).ok_or(DecodeError::UnknownConsistency(v))
}

fn read_flags(r: &mut Reader, version: ProtocolVersion) -> Result<u32, DecodeError> {
    if version >= ProtocolVersion::V5 {
        r.read_u32()
    } else {
        r.read_u8().map(u32::from)
    }
}

/// Decodes `<query_parameters>`.
pub fn decode_query_parameters(
    r: &mut Reader,
    version: ProtocolVersion,
) -> Result<QueryParameters, DecodeError> {
    use query_flags::*;
    let consistency = read_consistency(r)?;
    let flags = read_flags(r, version)?;
    let allow_unset = version >= ProtocolVersion::V4;
    let mut values = Vec::new();
    let mut names = None;
    if flags & VALUES != 0 {
        let n = r.read_u16()? as usize;
        // Each value takes at least 4 bytes: bounds the allocation by the body size.
        values.reserve_exact(n.min(r.remaining() / 4));
        if flags & NAMES_FOR_VALUES != 0 {
            let mut ns = Vec::with_capacity(n.min(r.remaining() / 6));
            for _ in 0..n {
                ns.push(r.read_string()?);
                values.push(r.read_value(allow_unset)?);
            }
            names = Some(ns);
        } else {
            for _ in 0..n {
                values.push(r.read_value(allow_unset)?);
            }
        }
    }
    let page_size = if flags & PAGE_SIZE != 0 {
        Some(r.read_i32()?)
    } else {
        None
    };
    let paging_state = if flags & PAGING_STATE != 0 {
        r.read_bytes()?
    } else {
        None
    };
    let serial_consistency = if flags & SERIAL_CONSISTENCY != 0 {
        Some(read_consistency(r)?)
    } else {
        None
    };
    let default_timestamp = if flags & DEFAULT_TIMESTAMP != 0 {
        Some(r.read_i64()?)
    } else {
        None
    };
    let v5 = version >= ProtocolVersion::V5;
    let keyspace = if v5 && flags & KEYSPACE != 0 {
        Some(r.read_string()?)
    } else {
        None
    };
    let now_in_seconds = if v5 && flags & NOW_IN_SECONDS != 0 {
        Some(r.read_i32()?)
    } else {
        None
    };
    Ok(QueryParameters {
        consistency,
        flags,
        values,
        names,
        skip_metadata: flags & SKIP_METADATA != 0,
        page_size,
        paging_state,
        serial_consistency,
        default_timestamp,
        keyspace,
        now_in_seconds,
    })
}

fn decode_batch(r: &mut Reader, version: ProtocolVersion) -> Result<Batch, DecodeError> {
    use query_flags::*;
    let t = r.read_u8()?;
    let batch_type = match t {
        0 => BatchType::Logged,
        1 => BatchType::Unlogged,
        2 => BatchType::Counter,
        other => return Err(DecodeError::UnknownBatchType(other)),
    };
    let n = r.read_u16()? as usize;
    let allow_unset = version >= ProtocolVersion::V4;
    // Each statement takes at least 5 bytes.
    let mut statements = Vec::with_capacity(n.min(r.remaining() / 5));
    for _ in 0..n {
        let statement = match r.read_u8()? {
            0 => BatchStatementKind::Query(r.read_long_string()?),
            1 => BatchStatementKind::Prepared(r.read_short_bytes()?),
            other => return Err(DecodeError::UnknownBatchQueryKind(other)),
        };
        let nv = r.read_u16()? as usize;
        let mut values = Vec::with_capacity(nv.min(r.remaining() / 4));
        for _ in 0..nv {
            values.push(r.read_value(allow_unset)?);
        }
        statements.push(BatchStatement { statement, values });
    }
    let consistency = read_consistency(r)?;
    let flags = read_flags(r, version)?;
    let serial_consistency = if flags & SERIAL_CONSISTENCY != 0 {
        Some(read_consistency(r)?)
    } else {
        None
    };
    let default_timestamp = if flags & DEFAULT_TIMESTAMP != 0 {
        Some(r.read_i64()?)
    } else {
        None
    };
    let v5 = version >= ProtocolVersion::V5;
    let keyspace = if v5 && flags & KEYSPACE != 0 {
        Some(r.read_string()?)
    } else {
        None
    };
    let now_in_seconds = if v5 && flags & NOW_IN_SECONDS != 0 {
        Some(r.read_i32()?)
    } else {
        None
    };
    Ok(Batch {
        batch_type,
        statements,
        consistency,
        flags,
        serial_consistency,
        default_timestamp,
        keyspace,
        now_in_seconds,
    })
}
