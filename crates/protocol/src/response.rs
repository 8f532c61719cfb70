//! Response encoding (spec §4.2) straight into one `BytesMut`: the header is written first
//! with a zero length and patched at the end, so a response costs no allocation beyond the
//! buffer's growth.
//!
//! PERF-CRITICAL: [`RowsWriter`] writes cells with no allocation per cell.

use std::net::{IpAddr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};

use crate::column_type::ColumnType;
use crate::consistency::Consistency;
use crate::envelope::{
    Flags, HEADER_LEN, Opcode, ProtocolVersion, begin_envelope, finish_envelope,
};
use crate::error::{EncodeError, FrameError};
use crate::request::BytesMap;
use crate::wire::{
    INT_MAX, write_bytes, write_bytes_map, write_inet, write_inetaddr, write_short_bytes,
    write_string, write_string_list, write_string_lossy, write_string_multimap,
};

// ---- prefix & framing -----------------------------------------------------------------------

/// Optional response-body prefix; each present part sets its header flag.
/// Warnings and custom payload exist from v4 on and are dropped for v3.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResponsePrefix<'a> {
    /// Tracing session id (flag TRACING); only on RESULT/ERROR of a traced request.
    pub tracing_id: Option<[u8; 16]>,
    /// Warnings (flag WARNING).
    pub warnings: &'a [String],
    /// Custom payload (flag CUSTOM_PAYLOAD), e.g. Scylla's `tablets-routing-v1`.
    pub custom_payload: Option<&'a BytesMap>,
}

impl ResponsePrefix<'_> {
    /// No prefix.
    pub const NONE: ResponsePrefix<'static> = ResponsePrefix {
        tracing_id: None,
        warnings: &[],
        custom_payload: None,
    };
}

/// Writes the envelope header and the body prefix; returns the envelope's start offset for
/// [`finish_envelope`]. Use it to write a message body by hand.
pub fn begin_response(
    buf: &mut BytesMut,
    version: ProtocolVersion,
    stream: i16,
    opcode: Opcode,
    prefix: &ResponsePrefix<'_>,
) -> Result<usize, EncodeError> {
    let v4 = version >= ProtocolVersion::V4;
    let mut flags = Flags::default();
    flags.set(Flags::TRACING, prefix.tracing_id.is_some());
    flags.set(Flags::WARNING, v4 && !prefix.warnings.is_empty());
    flags.set(Flags::CUSTOM_PAYLOAD, v4 && prefix.custom_payload.is_some());
    let start = begin_envelope(buf, version, flags, stream, opcode);
    if let Some(id) = &prefix.tracing_id {
        buf.put_slice(id);
    }
    if flags.contains(Flags::WARNING) {
        write_string_list(buf, prefix.warnings)?;
    }
    if let (true, Some(payload)) = (v4, prefix.custom_payload) {
        write_bytes_map(buf, payload)?;
    }
    Ok(start)
}

// ---- messages ---------------------------------------------------------------------------------

/// A response message other than Rows (see [`RowsWriter`]).
#[derive(Debug, Clone, Copy)]
pub enum Response<'a> {
    Error(&'a ErrorResponse),
    Ready,
    /// Authenticator class, e.g. `org.apache.cassandra.auth.PasswordAuthenticator`.
    Authenticate(&'a str),
    AuthChallenge(Option<&'a [u8]>),
    /// Cassandra sends a null token.
    AuthSuccess(Option<&'a [u8]>),
    /// `[string multimap]`; must contain `CQL_VERSION` and `COMPRESSION` (python driver).
    Supported(&'a [(String, Vec<String>)]),
    Result(ResultMessage<'a>),
    /// Sent on stream −1 by convention; the caller passes the stream.
    Event(&'a Event),
}

/// RESULT kinds other than Rows.
#[derive(Debug, Clone, Copy)]
pub enum ResultMessage<'a> {
    Void,
    SetKeyspace(&'a str),
    Prepared(&'a Prepared<'a>),
    SchemaChange(&'a SchemaChange),
}

/// RESULT kind ids.
pub mod result_kind {
    pub const VOID: i32 = 0x0001;
    pub const ROWS: i32 = 0x0002;
    pub const SET_KEYSPACE: i32 = 0x0003;
    pub const PREPARED: i32 = 0x0004;
    pub const SCHEMA_CHANGE: i32 = 0x0005;
}

/// Appends one whole response envelope to `buf`. On error `buf` is left as it was.
pub fn encode_response(
    buf: &mut BytesMut,
    version: ProtocolVersion,
    stream: i16,
    prefix: &ResponsePrefix<'_>,
    msg: &Response<'_>,
) -> Result<(), EncodeError> {
    let before = buf.len();
    let r = encode_response_inner(buf, version, stream, prefix, msg);
    if r.is_err() {
        buf.truncate(before);
    }
    r
}

fn encode_response_inner(
    buf: &mut BytesMut,
    version: ProtocolVersion,
    stream: i16,
    prefix: &ResponsePrefix<'_>,
    msg: &Response<'_>,
) -> Result<(), EncodeError> {
    let opcode = match msg {
        Response::Error(_) => Opcode::Error,
        Response::Ready => Opcode::Ready,
        Response::Authenticate(_) => Opcode::Authenticate,
        Response::AuthChallenge(_) => Opcode::AuthChallenge,
        Response::AuthSuccess(_) => Opcode::AuthSuccess,
        Response::Supported(_) => Opcode::Supported,
        Response::Result(_) => Opcode::Result,
        Response::Event(_) => Opcode::Event,
    };
    let start = begin_response(buf, version, stream, opcode, prefix)?;
    match msg {
        Response::Error(e) => e.encode_body(version, buf)?,
        Response::Ready => {}
        Response::Authenticate(class) => write_string(buf, class)?,
        Response::AuthChallenge(token) | Response::AuthSuccess(token) => write_bytes(buf, *token)?,
        Response::Supported(map) => write_string_multimap(buf, map)?,
        Response::Result(r) => match r {
            ResultMessage::Void => buf.put_i32(result_kind::VOID),
            ResultMessage::SetKeyspace(ks) => {
                buf.put_i32(result_kind::SET_KEYSPACE);
                write_string(buf, ks)?;
            }
            ResultMessage::Prepared(p) => {
                buf.put_i32(result_kind::PREPARED);
                p.encode(version, buf)?;
            }
            ResultMessage::SchemaChange(sc) => {
                buf.put_i32(result_kind::SCHEMA_CHANGE);
                sc.encode(version, buf)?;
            }
        },
        Response::Event(ev) => ev.encode(version, buf)?,
    }
    finish_envelope(buf, start)
}

// ---- errors -----------------------------------------------------------------------------------

/// Error codes of spec §9 plus ScyllaDB's rate-limit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    ServerError = 0x0000,
    ProtocolError = 0x000A,
    AuthenticationError = 0x0100,
    Unavailable = 0x1000,
    Overloaded = 0x1001,
    IsBootstrapping = 0x1002,
    TruncateError = 0x1003,
    WriteTimeout = 0x1100,
    ReadTimeout = 0x1200,
    ReadFailure = 0x1300,
    FunctionFailure = 0x1400,
    WriteFailure = 0x1500,
    CdcWriteFailure = 0x1600,
    CasWriteUnknown = 0x1700,
    SyntaxError = 0x2000,
    Unauthorized = 0x2100,
    Invalid = 0x2200,
    ConfigError = 0x2300,
    AlreadyExists = 0x2400,
    Unprepared = 0x2500,
    /// ScyllaDB `SCYLLA_RATE_LIMIT_ERROR` (advertised as `ERROR_CODE=61440`).
    RateLimitReached = 0xF000,
}

impl ErrorCode {
    pub fn as_i32(self) -> i32 {
        self as i32
    }
}

/// `writeType` of Write_timeout / Write_failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteType {
    Simple,
    Batch,
    UnloggedBatch,
    Counter,
    BatchLog,
    Cas,
    View,
    Cdc,
}

impl WriteType {
    pub fn name(self) -> &'static str {
        match self {
            Self::Simple => "SIMPLE",
            Self::Batch => "BATCH",
            Self::UnloggedBatch => "UNLOGGED_BATCH",
            Self::Counter => "COUNTER",
            Self::BatchLog => "BATCH_LOG",
            Self::Cas => "CAS",
            Self::View => "VIEW",
            Self::Cdc => "CDC",
        }
    }
}

/// Operation rejected by Scylla's per-partition rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RateLimitOp {
    Read = 0,
    Write = 1,
}

/// One replica's failure in a v5 `<reasonmap>`: its address and a failure code
/// (Cassandra `RequestFailureReason`: 0 unknown, 1 read too many tombstones, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureReason {
    pub endpoint: IpAddr,
    pub code: u16,
}

/// The error-specific part of an ERROR body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    ServerError,
    ProtocolError,
    AuthenticationError,
    Unavailable {
        consistency: Consistency,
        required: i32,
        alive: i32,
    },
    Overloaded,
    IsBootstrapping,
    TruncateError,
    /// `contentions` is written only in v5 and only for `WriteType::Cas`.
    WriteTimeout {
        consistency: Consistency,
        received: i32,
        block_for: i32,
        write_type: WriteType,
        contentions: u16,
    },
    ReadTimeout {
        consistency: Consistency,
        received: i32,
        block_for: i32,
        data_present: bool,
    },
    /// v4 sends `failures.len()` as `numfailures`; v5 sends the reason map.
    ReadFailure {
        consistency: Consistency,
        received: i32,
        block_for: i32,
        failures: Vec<FailureReason>,
        data_present: bool,
    },
    FunctionFailure {
        keyspace: String,
        function: String,
        arg_types: Vec<String>,
    },
    WriteFailure {
        consistency: Consistency,
        received: i32,
        block_for: i32,
        failures: Vec<FailureReason>,
        write_type: WriteType,
    },
    CdcWriteFailure,
    CasWriteUnknown {
        consistency: Consistency,
        received: i32,
        block_for: i32,
    },
    SyntaxError,
    Unauthorized,
    Invalid,
    ConfigError,
    /// `table` is empty for a keyspace.
    AlreadyExists {
        keyspace: String,
        table: String,
    },
    Unprepared {
        id: Bytes,
    },
    /// Only when the client negotiated `SCYLLA_RATE_LIMIT_ERROR`; else send ConfigError.
    RateLimitReached {
        op: RateLimitOp,
        rejected_by_coordinator: bool,
    },
}

impl ErrorKind {
    /// The kind older clients understand, as Cassandra downgrades: before v5 CAS_write_unknown
    /// is a CAS Write_timeout; before v4 Read_failure / Write_failure are timeouts and
    /// Function_failure is Invalid. `None` when the kind exists in `version`.
    pub fn for_version(&self, version: ProtocolVersion) -> Option<ErrorKind> {
        match self {
            Self::CasWriteUnknown {
                consistency,
                received,
                block_for,
            } if version < ProtocolVersion::V5 => Some(Self::WriteTimeout {
                consistency: *consistency,
                received: *received,
                block_for: *block_for,
                write_type: WriteType::Cas,
                contentions: 0,
            }),
            Self::ReadFailure {
                consistency,
                received,
                block_for,
                data_present,
                ..
            } if version < ProtocolVersion::V4 => Some(Self::ReadTimeout {
                consistency: *consistency,
                received: *received,
                block_for: *block_for,
                data_present: *data_present,
            }),
            Self::WriteFailure {
                consistency,
                received,
                block_for,
                write_type,
                ..
            } if version < ProtocolVersion::V4 => Some(Self::WriteTimeout {
                consistency: *consistency,
                received: *received,
                block_for: *block_for,
                write_type: *write_type,
                contentions: 0,
            }),
            Self::FunctionFailure { .. } if version < ProtocolVersion::V4 => Some(Self::Invalid),
            _ => None,
        }
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            Self::ServerError => ErrorCode::ServerError,
            Self::ProtocolError => ErrorCode::ProtocolError,
            Self::AuthenticationError => ErrorCode::AuthenticationError,
            Self::Unavailable { .. } => ErrorCode::Unavailable,
            Self::Overloaded => ErrorCode::Overloaded,
            Self::IsBootstrapping => ErrorCode::IsBootstrapping,
            Self::TruncateError => ErrorCode::TruncateError,
            Self::WriteTimeout { .. } => ErrorCode::WriteTimeout,
            Self::ReadTimeout { .. } => ErrorCode::ReadTimeout,
            Self::ReadFailure { .. } => ErrorCode::ReadFailure,
            Self::FunctionFailure { .. } => ErrorCode::FunctionFailure,
            Self::WriteFailure { .. } => ErrorCode::WriteFailure,
            Self::CdcWriteFailure => ErrorCode::CdcWriteFailure,
            Self::CasWriteUnknown { .. } => ErrorCode::CasWriteUnknown,
            Self::SyntaxError => ErrorCode::SyntaxError,
            Self::Unauthorized => ErrorCode::Unauthorized,
            Self::Invalid => ErrorCode::Invalid,
            Self::ConfigError => ErrorCode::ConfigError,
            Self::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            Self::Unprepared { .. } => ErrorCode::Unprepared,
            Self::RateLimitReached { .. } => ErrorCode::RateLimitReached,
        }
    }
}

/// An ERROR message: `[int code][string message]` + the kind's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorResponse {
    pub kind: ErrorKind,
    /// Cut to 65535 bytes at a character boundary when encoded.
    pub message: String,
}

impl ErrorResponse {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn protocol_error(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::ProtocolError, message)
    }

    pub fn server_error(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::ServerError, message)
    }

    pub fn code(&self) -> ErrorCode {
        self.kind.code()
    }

    /// Appends the ERROR body (no envelope).
    pub fn encode_body(
        &self,
        version: ProtocolVersion,
        buf: &mut BytesMut,
    ) -> Result<(), EncodeError> {
        let v5 = version >= ProtocolVersion::V5;
        let downgraded = self.kind.for_version(version);
        let kind = downgraded.as_ref().unwrap_or(&self.kind);
        buf.put_i32(kind.code().as_i32());
        write_string_lossy(buf, &self.message);
        match kind {
            ErrorKind::Unavailable {
                consistency,
                required,
                alive,
            } => {
                buf.put_u16(consistency.as_u16());
                buf.put_i32(*required);
                buf.put_i32(*alive);
            }
            ErrorKind::WriteTimeout {
                consistency,
                received,
                block_for,
                write_type,
                contentions,
            } => {
                buf.put_u16(consistency.as_u16());
                buf.put_i32(*received);
                buf.put_i32(*block_for);
                write_string(buf, write_type.name())?;
                if v5 && *write_type == WriteType::Cas {
                    buf.put_u16(*contentions);
                }
            }
            ErrorKind::ReadTimeout {
                consistency,
                received,
                block_for,
                data_present,
            } => {
                buf.put_u16(consistency.as_u16());
                buf.put_i32(*received);
                buf.put_i32(*block_for);
                buf.put_u8(u8::from(*data_present));
            }
            ErrorKind::ReadFailure {
                consistency,
                received,
                block_for,
                failures,
                data_present,
            } => {
                buf.put_u16(consistency.as_u16());
                buf.put_i32(*received);
                buf.put_i32(*block_for);
                write_failures(buf, v5, failures)?;
                buf.put_u8(u8::from(*data_present));
            }
            ErrorKind::FunctionFailure {
                keyspace,
                function,
                arg_types,
            } => {
                write_string(buf, keyspace)?;
                write_string(buf, function)?;
                write_string_list(buf, arg_types)?;
            }
            ErrorKind::WriteFailure {
                consistency,
                received,
                block_for,
                failures,
                write_type,
            } => {
                buf.put_u16(consistency.as_u16());
                buf.put_i32(*received);
                buf.put_i32(*block_for);
                write_failures(buf, v5, failures)?;
                write_string(buf, write_type.name())?;
            }
            ErrorKind::CasWriteUnknown {
                consistency,
                received,
                block_for,
            } => {
                buf.put_u16(consistency.as_u16());
                buf.put_i32(*received);
                buf.put_i32(*block_for);
            }
            ErrorKind::AlreadyExists { keyspace, table } => {
                write_string(buf, keyspace)?;
                write_string(buf, table)?;
            }
            ErrorKind::Unprepared { id } => write_short_bytes(buf, id)?,
            ErrorKind::RateLimitReached {
                op,
                rejected_by_coordinator,
            } => {
                buf.put_u8(*op as u8);
                buf.put_u8(u8::from(*rejected_by_coordinator));
            }
            ErrorKind::ServerError
            | ErrorKind::ProtocolError
            | ErrorKind::AuthenticationError
            | ErrorKind::Overloaded
            | ErrorKind::IsBootstrapping
            | ErrorKind::TruncateError
            | ErrorKind::CdcWriteFailure
            | ErrorKind::SyntaxError
            | ErrorKind::Unauthorized
            | ErrorKind::Invalid
            | ErrorKind::ConfigError => {}
        }
        Ok(())
    }
}

impl From<&crate::error::DecodeError> for ErrorResponse {
    /// A malformed request body is a protocol error on its stream.
    fn from(e: &crate::error::DecodeError) -> Self {
        Self::protocol_error(e.to_string())
    }
}

impl From<&FrameError> for ErrorResponse {
    fn from(e: &FrameError) -> Self {
        Self::protocol_error(e.to_string())
    }
}

/// v4: `[int numfailures]`; v5: `<reasonmap>` = `[int n]` n × (`[inetaddr]`, `[short]`).
fn write_failures(
    buf: &mut BytesMut,
    v5: bool,
    failures: &[FailureReason],
) -> Result<(), EncodeError> {
    let n = i32::try_from(failures.len()).map_err(|_| EncodeError::TooManyItems {
        length: failures.len(),
        max: INT_MAX,
    })?;
    buf.put_i32(n);
    if v5 {
        for f in failures {
            write_inetaddr(buf, &f.endpoint);
            buf.put_u16(f.code);
        }
    }
    Ok(())
}

/// The message of the version-negotiation error (Cassandra's wording; drivers match on
/// "Invalid or unsupported protocol version").
pub fn unsupported_version_message(version: u8) -> String {
    format!(
        "Invalid or unsupported protocol version ({version}); supported versions are (3/v3, 4/v4, 5/v5)"
    )
}

/// Appends the whole answer to an envelope with an unsupported version byte: ERROR 0x000A in
/// an envelope carrying our highest version (0x85) and the client's stream id, unframed and
/// uncompressed. Close the connection after sending it; the client reconnects lower.
pub fn encode_unsupported_version(buf: &mut BytesMut, version: u8, stream: i16) {
    let start = begin_envelope(
        buf,
        ProtocolVersion::MAX,
        Flags::default(),
        stream,
        Opcode::Error,
    );
    buf.put_i32(ErrorCode::ProtocolError.as_i32());
    write_string_lossy(buf, &unsupported_version_message(version));
    // A short, bounded body: finishing cannot fail.
    let _ = finish_envelope(buf, start);
}

/// Appends the protocol-error answer to a [`FrameError`], on the offending stream, in the
/// version the client can read.
pub fn encode_frame_error(buf: &mut BytesMut, err: &FrameError) {
    match *err {
        FrameError::UnsupportedVersion { version, stream } => {
            encode_unsupported_version(buf, version, stream);
        }
        _ => {
            let start = begin_envelope(
                buf,
                err.response_version(),
                Flags::default(),
                err.stream(),
                Opcode::Error,
            );
            buf.put_i32(ErrorCode::ProtocolError.as_i32());
            write_string_lossy(buf, &err.to_string());
            let _ = finish_envelope(buf, start);
        }
    }
}

// ---- schema change & events -------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaChangeType {
    Created,
    Updated,
    Dropped,
}

impl SchemaChangeType {
    pub fn name(self) -> &'static str {
        match self {
            Self::Created => "CREATED",
            Self::Updated => "UPDATED",
            Self::Dropped => "DROPPED",
        }
    }
}

/// What changed. Index create/drop is an UPDATED Table; a materialized view is a Table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaChangeTarget {
    Keyspace {
        keyspace: String,
    },
    Table {
        keyspace: String,
        table: String,
    },
    Type {
        keyspace: String,
        name: String,
    },
    /// `arg_types` are CQL type strings.
    Function {
        keyspace: String,
        name: String,
        arg_types: Vec<String>,
    },
    Aggregate {
        keyspace: String,
        name: String,
        arg_types: Vec<String>,
    },
}

/// Body of RESULT Schema_change and of the SCHEMA_CHANGE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaChange {
    pub change: SchemaChangeType,
    pub target: SchemaChangeTarget,
}

impl SchemaChange {
    /// v3 has no FUNCTION/AGGREGATE targets: Cassandra reports them as an UPDATED keyspace.
    pub fn encode(&self, version: ProtocolVersion, buf: &mut BytesMut) -> Result<(), EncodeError> {
        if let SchemaChangeTarget::Function { keyspace, .. }
        | SchemaChangeTarget::Aggregate { keyspace, .. } = &self.target
            && version < ProtocolVersion::V4
        {
            write_string(buf, SchemaChangeType::Updated.name())?;
            write_string(buf, "KEYSPACE")?;
            return write_string(buf, keyspace);
        }
        write_string(buf, self.change.name())?;
        match &self.target {
            SchemaChangeTarget::Keyspace { keyspace } => {
                write_string(buf, "KEYSPACE")?;
                write_string(buf, keyspace)?;
            }
            SchemaChangeTarget::Table { keyspace, table } => {
                write_string(buf, "TABLE")?;
                write_string(buf, keyspace)?;
                write_string(buf, table)?;
            }
            SchemaChangeTarget::Type { keyspace, name } => {
                write_string(buf, "TYPE")?;
                write_string(buf, keyspace)?;
                write_string(buf, name)?;
            }
            SchemaChangeTarget::Function {
                keyspace,
                name,
                arg_types,
            } => {
                write_string(buf, "FUNCTION")?;
                write_string(buf, keyspace)?;
                write_string(buf, name)?;
                write_string_list(buf, arg_types)?;
            }
            SchemaChangeTarget::Aggregate {
                keyspace,
                name,
                arg_types,
            } => {
                write_string(buf, "AGGREGATE")?;
                write_string(buf, keyspace)?;
                write_string(buf, name)?;
                write_string_list(buf, arg_types)?;
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopologyChangeType {
    NewNode,
    RemovedNode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusChangeType {
    Up,
    Down,
}

/// A pushed EVENT (to connections that REGISTERed for its type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `address` is the node's native-transport address and port.
    TopologyChange {
        change: TopologyChangeType,
        address: SocketAddr,
    },
    StatusChange {
        change: StatusChangeType,
        address: SocketAddr,
    },
    SchemaChange(SchemaChange),
}

impl Event {
    /// The REGISTER name of this event's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::TopologyChange { .. } => "TOPOLOGY_CHANGE",
            Self::StatusChange { .. } => "STATUS_CHANGE",
            Self::SchemaChange(_) => "SCHEMA_CHANGE",
        }
    }

    pub fn encode(&self, version: ProtocolVersion, buf: &mut BytesMut) -> Result<(), EncodeError> {
        write_string(buf, self.type_name())?;
        match self {
            Self::TopologyChange { change, address } => {
                write_string(
                    buf,
                    match change {
                        TopologyChangeType::NewNode => "NEW_NODE",
                        TopologyChangeType::RemovedNode => "REMOVED_NODE",
                    },
                )?;
                write_inet(buf, address);
            }
            Self::StatusChange { change, address } => {
                write_string(
                    buf,
                    match change {
                        StatusChangeType::Up => "UP",
                        StatusChangeType::Down => "DOWN",
                    },
                )?;
                write_inet(buf, address);
            }
            Self::SchemaChange(sc) => sc.encode(version, buf)?,
        }
        Ok(())
    }
}

// ---- metadata ---------------------------------------------------------------------------------

/// One column (or bind marker) of result / prepared metadata.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ColumnSpec {
    pub keyspace: String,
    pub table: String,
    pub name: String,
    pub ty: ColumnType,
}

/// Rows metadata flag masks.
pub mod rows_flags {
    pub const GLOBAL_TABLES_SPEC: i32 = 0x0001;
    pub const HAS_MORE_PAGES: i32 = 0x0002;
    pub const NO_METADATA: i32 = 0x0004;
    pub const METADATA_CHANGED: i32 = 0x0008;
}

/// Result metadata of a Rows result (and `<result_metadata>` of Prepared).
#[derive(Debug, Clone, Copy, Default)]
pub struct RowsMetadata<'a> {
    /// The columns; their count is `columns_count` even with `no_metadata`.
    pub columns: &'a [ColumnSpec],
    /// When set, one (keyspace, table) for all columns and none per column.
    pub global_table_spec: Option<(&'a str, &'a str)>,
    /// Only flags, count and paging state (the client sent Skip_metadata).
    pub no_metadata: bool,
    /// Has_more_pages + the paging state.
    pub paging_state: Option<&'a [u8]>,
    /// Metadata_changed + new id (v5, or v4 with `SCYLLA_USE_METADATA_ID`).
    pub new_metadata_id: Option<&'a [u8]>,
    /// Column specs encoded once (per prepared statement and version); when set it replaces
    /// `columns` and `global_table_spec`.
    pub encoded_columns: Option<&'a EncodedColumns>,
    /// With `no_metadata`: the column count to write when no specs are at hand.
    pub column_count: Option<usize>,
}

/// Column specs (`[global_table_spec]` + `<col_spec>`s) encoded once for one protocol
/// version, then copied into every Rows response: saves re-encoding names and types per
/// response of a prepared statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedColumns {
    version: ProtocolVersion,
    count: usize,
    global: bool,
    bytes: Bytes,
}

impl EncodedColumns {
    /// Encodes `columns` for `version`, with a global table spec when they share one.
    pub fn new(version: ProtocolVersion, columns: &[ColumnSpec]) -> Result<Self, EncodeError> {
        let global = common_table(columns);
        let mut b = BytesMut::new();
        write_col_specs(&mut b, version, global, columns)?;
        Ok(Self {
            version,
            count: columns.len(),
            global: global.is_some(),
            bytes: b.freeze(),
        })
    }

    pub fn version(&self) -> ProtocolVersion {
        self.version
    }

    pub fn column_count(&self) -> usize {
        self.count
    }
}

impl<'a> RowsMetadata<'a> {
    /// Full metadata for `columns`, using a global table spec when they all share one.
    pub fn new(columns: &'a [ColumnSpec]) -> Self {
        Self {
            columns,
            global_table_spec: common_table(columns),
            ..Default::default()
        }
    }

    /// Only flags, column count and paging state, for a client that sent Skip_metadata
    /// (drivers do for prepared statements). Skips the global-table-spec detection of `new`.
    pub fn skipped(columns: &'a [ColumnSpec]) -> Self {
        Self {
            columns,
            no_metadata: true,
            ..Default::default()
        }
    }

    /// The `<result_metadata>` of a non-SELECT prepared statement: No_metadata, 0 columns.
    pub fn empty() -> Self {
        Self {
            no_metadata: true,
            ..Default::default()
        }
    }

    /// Metadata over pre-encoded column specs.
    pub fn with_encoded(encoded: &'a EncodedColumns) -> Self {
        Self {
            encoded_columns: Some(encoded),
            ..Default::default()
        }
    }

    /// No_metadata answer from a column count alone (no specs needed).
    pub fn skipped_count(column_count: usize) -> Self {
        Self {
            no_metadata: true,
            column_count: Some(column_count),
            ..Default::default()
        }
    }

    fn column_count(&self) -> usize {
        match (self.column_count, self.encoded_columns) {
            (Some(n), _) if self.no_metadata => n,
            (_, Some(e)) => e.count,
            _ => self.columns.len(),
        }
    }

    pub fn encode(&self, version: ProtocolVersion, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let mut flags = 0;
        let global = self.global_table_spec.filter(|_| !self.no_metadata);
        let global_flag = match self.encoded_columns {
            Some(e) => {
                if e.version != version {
                    return Err(EncodeError::VersionMismatch {
                        encoded: e.version.as_u8(),
                        requested: version.as_u8(),
                    });
                }
                e.global && !self.no_metadata
            }
            None => global.is_some(),
        };
        if global_flag {
            flags |= rows_flags::GLOBAL_TABLES_SPEC;
        }
        if self.paging_state.is_some() {
            flags |= rows_flags::HAS_MORE_PAGES;
        }
        if self.no_metadata {
            flags |= rows_flags::NO_METADATA;
        }
        if self.new_metadata_id.is_some() {
            flags |= rows_flags::METADATA_CHANGED;
        }
        let count = column_count(self.column_count())?;
        buf.put_u64(two_ints(flags, count));
        if let Some(ps) = self.paging_state {
            write_bytes(buf, Some(ps))?;
        }
        if let Some(id) = self.new_metadata_id {
            write_short_bytes(buf, id)?;
        }
        if !self.no_metadata {
            match self.encoded_columns {
                Some(e) => buf.put_slice(&e.bytes),
                None => write_col_specs(buf, version, global, self.columns)?,
            }
        }
        Ok(())
    }
}

/// Two `[int]`s as one big-endian u64, to append them with one capacity check.
#[inline]
fn two_ints(a: i32, b: i32) -> u64 {
    (u64::from(a as u32) << 32) | u64::from(b as u32)
}

fn column_count(n: usize) -> Result<i32, EncodeError> {
    i32::try_from(n).map_err(|_| EncodeError::TooManyItems {
        length: n,
        max: INT_MAX,
    })
}

/// The (keyspace, table) shared by all `columns`, if any.
pub fn common_table(columns: &[ColumnSpec]) -> Option<(&str, &str)> {
    let first = columns.first()?;
    columns
        .iter()
        .all(|c| c.keyspace == first.keyspace && c.table == first.table)
        .then_some((first.keyspace.as_str(), first.table.as_str()))
}

fn write_col_specs(
    buf: &mut BytesMut,
    version: ProtocolVersion,
    global: Option<(&str, &str)>,
    columns: &[ColumnSpec],
) -> Result<(), EncodeError> {
    if let Some((ks, table)) = global {
        write_string(buf, ks)?;
        write_string(buf, table)?;
    }
    for c in columns {
        if global.is_none() {
            write_string(buf, &c.keyspace)?;
            write_string(buf, &c.table)?;
        }
        write_string(buf, &c.name)?;
        c.ty.encode(version, buf)?;
    }
    Ok(())
}

/// Bind-marker metadata of a Prepared result.
#[derive(Debug, Clone, Copy, Default)]
pub struct PreparedMetadata<'a> {
    pub columns: &'a [ColumnSpec],
    pub global_table_spec: Option<(&'a str, &'a str)>,
    /// Bind-marker index of each partition-key column, in key order (v4+); empty disables
    /// token-aware routing.
    pub pk_indexes: &'a [u16],
    /// Extra flag bits ORed in, e.g. Scylla's LWT mark 0x8000_0000 when negotiated.
    pub extra_flags: u32,
}

impl<'a> PreparedMetadata<'a> {
    pub fn new(columns: &'a [ColumnSpec], pk_indexes: &'a [u16]) -> Self {
        Self {
            columns,
            global_table_spec: common_table(columns),
            pk_indexes,
            extra_flags: 0,
        }
    }

    pub fn encode(&self, version: ProtocolVersion, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let mut flags = self.extra_flags;
        if self.global_table_spec.is_some() {
            flags |= rows_flags::GLOBAL_TABLES_SPEC as u32;
        }
        buf.put_u32(flags);
        buf.put_i32(column_count(self.columns.len())?);
        if version >= ProtocolVersion::V4 {
            buf.put_i32(column_count(self.pk_indexes.len())?);
            for i in self.pk_indexes {
                buf.put_u16(*i);
            }
        }
        write_col_specs(buf, version, self.global_table_spec, self.columns)
    }
}

/// RESULT Prepared.
#[derive(Debug, Clone, Copy, Default)]
pub struct Prepared<'a> {
    pub id: &'a [u8],
    /// Written in v5 (empty if `None`), and in v4 when `Some` (Scylla `SCYLLA_USE_METADATA_ID`).
    pub result_metadata_id: Option<&'a [u8]>,
    pub bind: PreparedMetadata<'a>,
    pub result: RowsMetadata<'a>,
}

impl Prepared<'_> {
    pub fn encode(&self, version: ProtocolVersion, buf: &mut BytesMut) -> Result<(), EncodeError> {
        write_short_bytes(buf, self.id)?;
        match self.result_metadata_id {
            Some(id) => write_short_bytes(buf, id)?,
            None if version >= ProtocolVersion::V5 => write_short_bytes(buf, &[])?,
            None => {}
        }
        self.bind.encode(version, buf)?;
        self.result.encode(version, buf)
    }
}

// ---- rows -------------------------------------------------------------------------------------

/// Streams a RESULT Rows envelope into a buffer: header, prefix and metadata first, then
/// cells one by one; [`RowsWriter::finish`] patches the row count and the envelope length.
/// Dropped without `finish`, it removes what it wrote.
///
/// PERF-CRITICAL: one `[bytes]` per cell appended in place, no allocation per cell.
#[derive(Debug)]
pub struct RowsWriter<'b> {
    buf: &'b mut BytesMut,
    start: usize,
    count_at: usize,
    columns: u64,
    cells: u64,
    finished: bool,
}

impl<'b> RowsWriter<'b> {
    pub fn begin(
        buf: &'b mut BytesMut,
        version: ProtocolVersion,
        stream: i16,
        prefix: &ResponsePrefix<'_>,
        metadata: &RowsMetadata<'_>,
    ) -> Result<Self, EncodeError> {
        let before = buf.len();
        let r = (|| {
            let start = begin_response(buf, version, stream, Opcode::Result, prefix)?;
            buf.put_i32(result_kind::ROWS);
            metadata.encode(version, buf)?;
            Ok(start)
        })();
        let start = match r {
            Ok(s) => s,
            Err(e) => {
                buf.truncate(before);
                return Err(e);
            }
        };
        let count_at = buf.len();
        buf.put_i32(0);
        Ok(Self {
            buf,
            start,
            count_at,
            columns: metadata.column_count() as u64,
            cells: 0,
            finished: false,
        })
    }

    /// Appends one cell: `None` = null.
    #[inline]
    pub fn push_value(&mut self, value: Option<&[u8]>) -> Result<(), EncodeError> {
        write_bytes(self.buf, value)?;
        self.cells += 1;
        Ok(())
    }

    /// Appends one non-null cell whose bytes `write` appends to the buffer directly (e.g. a
    /// serialized collection); its length is patched afterwards.
    pub fn push_with(&mut self, write: impl FnOnce(&mut BytesMut)) -> Result<(), EncodeError> {
        let at = self.buf.len();
        self.buf.put_i32(0);
        write(self.buf);
        let n = self.buf.len() - at - 4;
        let len = i32::try_from(n).map_err(|_| EncodeError::ValueTooLong {
            length: n,
            max: INT_MAX,
        })?;
        if let Some(dst) = self.buf.get_mut(at..at + 4) {
            dst.copy_from_slice(&len.to_be_bytes());
        }
        self.cells += 1;
        Ok(())
    }

    /// Whole rows written so far.
    pub fn rows(&self) -> u64 {
        self.cells.checked_div(self.columns).unwrap_or(0)
    }

    /// Envelope bytes written so far (for page-size-in-bytes limits).
    pub fn written_bytes(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Patches the row count and the envelope length. Fails (and removes the envelope) if a
    /// row is incomplete.
    pub fn finish(mut self) -> Result<(), EncodeError> {
        self.finished = true;
        // With zero columns only zero cells form whole rows.
        if !self.cells.is_multiple_of(self.columns) {
            self.buf.truncate(self.start);
            return Err(EncodeError::PartialRow {
                cells: self.cells,
                columns: self.columns as usize,
            });
        }
        let rows = self.rows();
        let Ok(rows) = i32::try_from(rows) else {
            self.buf.truncate(self.start);
            return Err(EncodeError::TooManyItems {
                length: rows as usize,
                max: INT_MAX,
            });
        };
        if let Some(dst) = self.buf.get_mut(self.count_at..self.count_at + 4) {
            dst.copy_from_slice(&rows.to_be_bytes());
        }
        let r = finish_envelope(self.buf, self.start);
        if r.is_err() {
            self.buf.truncate(self.start);
        }
        r
    }
}

impl Drop for RowsWriter<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.buf.truncate(self.start);
        }
    }
}

/// Offset of the body in an envelope written at `start` (for tests and tools).
pub fn body_offset(start: usize) -> usize {
    start + HEADER_LEN
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::envelope::{DEFAULT_MAX_FRAME_SIZE, decode_envelope};
    use crate::wire::Reader;

    const V4: ProtocolVersion = ProtocolVersion::V4;
    const V5: ProtocolVersion = ProtocolVersion::V5;

    fn encode(version: ProtocolVersion, msg: &Response<'_>) -> BytesMut {
        let mut b = BytesMut::new();
        encode_response(&mut b, version, 3, &ResponsePrefix::NONE, msg).expect("encode");
        b
    }

    /// The body of the single envelope in `buf`, checking the header.
    fn body_of(buf: &BytesMut, version: ProtocolVersion, opcode: Opcode) -> Reader {
        let mut b = buf.clone();
        let env = decode_envelope(&mut b, DEFAULT_MAX_FRAME_SIZE)
            .expect("valid")
            .expect("whole");
        assert!(b.is_empty(), "trailing bytes after the envelope");
        assert_eq!(env.version, version);
        assert_eq!(env.direction, crate::Direction::Response);
        assert_eq!(env.opcode, opcode);
        Reader::new(env.body)
    }

    fn column(name: &str, ty: ColumnType) -> ColumnSpec {
        ColumnSpec {
            keyspace: "ks".into(),
            table: "t".into(),
            name: name.into(),
            ty,
        }
    }

    #[test]
    fn ready_bytes() {
        assert_eq!(
            &encode(V5, &Response::Ready)[..],
            &[0x85, 0, 0, 3, 0x02, 0, 0, 0, 0]
        );
        assert_eq!(
            &encode(V4, &Response::Ready)[..],
            &[0x84, 0, 0, 3, 0x02, 0, 0, 0, 0]
        );
    }

    #[test]
    fn unsupported_version_frame() {
        let mut b = BytesMut::new();
        encode_unsupported_version(&mut b, 0x42, 0x0100);
        let msg = "Invalid or unsupported protocol version (66); supported versions are (3/v3, 4/v4, 5/v5)";
        let mut want = vec![0x85, 0x00, 0x01, 0x00, 0x00];
        want.extend_from_slice(&((4 + 2 + msg.len()) as i32).to_be_bytes());
        want.extend_from_slice(&[0, 0, 0, 0x0A]);
        want.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        want.extend_from_slice(msg.as_bytes());
        assert_eq!(&b[..], &want[..]);
        // Through FrameError, the same bytes.
        let mut c = BytesMut::new();
        encode_frame_error(
            &mut c,
            &FrameError::UnsupportedVersion {
                version: 0x42,
                stream: 0x0100,
            },
        );
        assert_eq!(b, c);
        // Other frame errors answer in the client's version on its stream.
        let mut c = BytesMut::new();
        encode_frame_error(
            &mut c,
            &FrameError::UnknownOpcode {
                opcode: 0x33,
                version: V4,
                stream: 9,
            },
        );
        let mut r = body_of(&c, V4, Opcode::Error);
        assert_eq!(r.read_i32().ok(), Some(0x000A));
        assert_eq!(c[2..4], [0, 9]);
    }

    #[test]
    fn supported_multimap() {
        let map = vec![
            ("CQL_VERSION".to_string(), vec!["3.4.7".to_string()]),
            (
                "COMPRESSION".to_string(),
                vec!["lz4".to_string(), "snappy".to_string()],
            ),
        ];
        let b = encode(V4, &Response::Supported(&map));
        let mut r = body_of(&b, V4, Opcode::Supported);
        assert_eq!(r.read_u16().ok(), Some(2));
        assert_eq!(r.read_string().ok().as_deref(), Some("CQL_VERSION"));
        assert_eq!(r.read_string_list().ok(), Some(vec!["3.4.7".to_string()]));
        assert_eq!(r.read_string().ok().as_deref(), Some("COMPRESSION"));
        assert_eq!(
            r.read_string_list().ok(),
            Some(vec!["lz4".to_string(), "snappy".to_string()])
        );
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn auth_messages() {
        let b = encode(
            V4,
            &Response::Authenticate("org.apache.cassandra.auth.PasswordAuthenticator"),
        );
        let mut r = body_of(&b, V4, Opcode::Authenticate);
        assert_eq!(
            r.read_string().ok().as_deref(),
            Some("org.apache.cassandra.auth.PasswordAuthenticator")
        );
        let b = encode(V4, &Response::AuthSuccess(None));
        let mut r = body_of(&b, V4, Opcode::AuthSuccess);
        assert_eq!(r.read_i32().ok(), Some(-1));
        let b = encode(V4, &Response::AuthChallenge(Some(b"nonce")));
        let mut r = body_of(&b, V4, Opcode::AuthChallenge);
        assert_eq!(
            r.read_bytes().ok().flatten().as_deref(),
            Some(&b"nonce"[..])
        );
    }

    fn error_body(version: ProtocolVersion, kind: ErrorKind) -> Vec<u8> {
        let b = encode(version, &Response::Error(&ErrorResponse::new(kind, "m")));
        let r = body_of(&b, version, Opcode::Error);
        r.rest().to_vec()
    }

    #[test]
    fn error_bodies_per_version() {
        let head = |code: u32| {
            let mut v = code.to_be_bytes().to_vec();
            v.extend_from_slice(&[0, 1, b'm']);
            v
        };
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        // Write_timeout: contentions only for CAS in v5.
        let wt = |wt| ErrorKind::WriteTimeout {
            consistency: Consistency::Quorum,
            received: 1,
            block_for: 2,
            write_type: wt,
            contentions: 7,
        };
        let mut want = head(0x1100);
        want.extend_from_slice(&[0, 4, 0, 0, 0, 1, 0, 0, 0, 2, 0, 3, b'C', b'A', b'S']);
        assert_eq!(error_body(V4, wt(WriteType::Cas)), want);
        want.extend_from_slice(&[0, 7]);
        assert_eq!(error_body(V5, wt(WriteType::Cas)), want);
        let simple = error_body(V5, wt(WriteType::Simple));
        assert!(simple.ends_with(b"SIMPLE"));
        // Read_failure: numfailures in v4, reason map in v5.
        let rf = ErrorKind::ReadFailure {
            consistency: Consistency::One,
            received: 0,
            block_for: 1,
            failures: vec![FailureReason {
                endpoint: ip,
                code: 1,
            }],
            data_present: true,
        };
        let mut want = head(0x1300);
        want.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1]);
        assert_eq!(error_body(V4, rf.clone()), want);
        let mut want = head(0x1300);
        want.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
        want.extend_from_slice(&[4, 10, 0, 0, 1, 0, 1, 1]);
        assert_eq!(error_body(V5, rf), want);
        // Write_failure: writeType after the failures.
        let wf = ErrorKind::WriteFailure {
            consistency: Consistency::One,
            received: 0,
            block_for: 1,
            failures: vec![FailureReason {
                endpoint: ip,
                code: 0,
            }],
            write_type: WriteType::Batch,
        };
        let mut want = head(0x1500);
        want.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
        want.extend_from_slice(&[0, 5, b'B', b'A', b'T', b'C', b'H']);
        assert_eq!(error_body(V4, wf.clone()), want);
        let mut want = head(0x1500);
        want.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
        want.extend_from_slice(&[4, 10, 0, 0, 1, 0, 0]);
        want.extend_from_slice(&[0, 5, b'B', b'A', b'T', b'C', b'H']);
        assert_eq!(error_body(V5, wf), want);
        // The others.
        let mut want = head(0x1000);
        want.extend_from_slice(&[0, 6, 0, 0, 0, 2, 0, 0, 0, 1]);
        assert_eq!(
            error_body(
                V4,
                ErrorKind::Unavailable {
                    consistency: Consistency::LocalQuorum,
                    required: 2,
                    alive: 1
                }
            ),
            want
        );
        let mut want = head(0x1200);
        want.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
        assert_eq!(
            error_body(
                V4,
                ErrorKind::ReadTimeout {
                    consistency: Consistency::One,
                    received: 0,
                    block_for: 1,
                    data_present: false
                }
            ),
            want
        );
        let mut want = head(0x2400);
        want.extend_from_slice(&[0, 2, b'k', b's', 0, 0]);
        assert_eq!(
            error_body(
                V4,
                ErrorKind::AlreadyExists {
                    keyspace: "ks".into(),
                    table: String::new()
                }
            ),
            want
        );
        let mut want = head(0x2500);
        want.extend_from_slice(&[0, 2, 0xAB, 0xCD]);
        assert_eq!(
            error_body(
                V4,
                ErrorKind::Unprepared {
                    id: Bytes::from_static(&[0xAB, 0xCD])
                }
            ),
            want
        );
        let mut want = head(0x1400);
        want.extend_from_slice(&[0, 1, b'k', 0, 1, b'f', 0, 1, 0, 3, b'i', b'n', b't']);
        assert_eq!(
            error_body(
                V4,
                ErrorKind::FunctionFailure {
                    keyspace: "k".into(),
                    function: "f".into(),
                    arg_types: vec!["int".into()]
                }
            ),
            want
        );
        let mut want = head(0x1700);
        want.extend_from_slice(&[0, 8, 0, 0, 0, 0, 0, 0, 0, 2]);
        assert_eq!(
            error_body(
                V5,
                ErrorKind::CasWriteUnknown {
                    consistency: Consistency::Serial,
                    received: 0,
                    block_for: 2
                }
            ),
            want
        );
        let mut want = head(0xF000);
        want.extend_from_slice(&[1, 1]);
        assert_eq!(
            error_body(
                V4,
                ErrorKind::RateLimitReached {
                    op: RateLimitOp::Write,
                    rejected_by_coordinator: true
                }
            ),
            want
        );
        for (kind, code) in [
            (ErrorKind::ServerError, 0x0000),
            (ErrorKind::ProtocolError, 0x000A),
            (ErrorKind::AuthenticationError, 0x0100),
            (ErrorKind::Overloaded, 0x1001),
            (ErrorKind::IsBootstrapping, 0x1002),
            (ErrorKind::TruncateError, 0x1003),
            (ErrorKind::CdcWriteFailure, 0x1600),
            (ErrorKind::SyntaxError, 0x2000),
            (ErrorKind::Unauthorized, 0x2100),
            (ErrorKind::Invalid, 0x2200),
            (ErrorKind::ConfigError, 0x2300),
        ] {
            assert_eq!(error_body(V5, kind), head(code));
        }
    }

    #[test]
    fn errors_downgrade_for_older_versions() {
        let head = |code: u32| {
            let mut v = code.to_be_bytes().to_vec();
            v.extend_from_slice(&[0, 1, b'm']);
            v
        };
        let cas = ErrorKind::CasWriteUnknown {
            consistency: Consistency::Serial,
            received: 0,
            block_for: 2,
        };
        let mut want = head(0x1100);
        want.extend_from_slice(&[0, 8, 0, 0, 0, 0, 0, 0, 0, 2, 0, 3, b'C', b'A', b'S']);
        assert_eq!(error_body(V4, cas.clone()), want);
        assert_eq!(error_body(V5, cas)[..4], [0, 0, 0x17, 0]);
        let rf = ErrorKind::ReadFailure {
            consistency: Consistency::One,
            received: 0,
            block_for: 1,
            failures: vec![],
            data_present: true,
        };
        let mut want = head(0x1200);
        want.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(error_body(ProtocolVersion::V3, rf.clone()), want);
        assert_eq!(error_body(V4, rf)[..4], [0, 0, 0x13, 0]);
        let ff = ErrorKind::FunctionFailure {
            keyspace: "k".into(),
            function: "f".into(),
            arg_types: vec![],
        };
        assert_eq!(error_body(ProtocolVersion::V3, ff), head(0x2200));
    }

    #[test]
    fn v3_function_schema_change_is_a_keyspace_update() {
        let sc = SchemaChange {
            change: SchemaChangeType::Created,
            target: SchemaChangeTarget::Aggregate {
                keyspace: "ks".into(),
                name: "agg".into(),
                arg_types: vec!["int".into()],
            },
        };
        let v3 = ProtocolVersion::V3;
        let b = encode(v3, &Response::Result(ResultMessage::SchemaChange(&sc)));
        let mut r = body_of(&b, v3, Opcode::Result);
        assert_eq!(r.read_i32().ok(), Some(5));
        for want in ["UPDATED", "KEYSPACE", "ks"] {
            assert_eq!(r.read_string().ok().as_deref(), Some(want));
        }
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn long_error_message_is_cut_not_failed() {
        let msg = "é".repeat(40_000); // 80,000 bytes
        let b = encode(V4, &Response::Error(&ErrorResponse::server_error(msg)));
        let mut r = body_of(&b, V4, Opcode::Error);
        assert_eq!(r.read_i32().ok(), Some(0));
        let s = r.read_string().expect("valid UTF-8 after cutting");
        assert_eq!(s.len(), 65_534);
    }

    #[test]
    fn response_prefix() {
        let warnings = vec!["w1".to_string()];
        let payload: BytesMap = vec![("tablets-routing-v1".into(), Some(Bytes::from_static(b"x")))];
        let prefix = ResponsePrefix {
            tracing_id: Some([7; 16]),
            warnings: &warnings,
            custom_payload: Some(&payload),
        };
        let mut b = BytesMut::new();
        encode_response(
            &mut b,
            V4,
            1,
            &prefix,
            &Response::Result(ResultMessage::Void),
        )
        .expect("encode");
        assert_eq!(
            b[1],
            Flags::TRACING | Flags::WARNING | Flags::CUSTOM_PAYLOAD
        );
        let mut r = body_of(&b, V4, Opcode::Result);
        assert_eq!(r.read_slice(16).ok().as_deref(), Some(&[7u8; 16][..]));
        assert_eq!(r.read_string_list().ok(), Some(warnings.clone()));
        assert_eq!(r.read_bytes_map().ok(), Some(payload.clone()));
        assert_eq!(r.read_i32().ok(), Some(result_kind::VOID));
        assert_eq!(r.remaining(), 0);
        // v3 has no warnings or custom payload.
        let mut b = BytesMut::new();
        encode_response(&mut b, ProtocolVersion::V3, 1, &prefix, &Response::Ready).expect("encode");
        assert_eq!(b[1], Flags::TRACING);
        assert_eq!(b.len(), 9 + 16);
    }

    #[test]
    fn set_keyspace_and_schema_change() {
        let b = encode(V4, &Response::Result(ResultMessage::SetKeyspace("ks")));
        let mut r = body_of(&b, V4, Opcode::Result);
        assert_eq!(r.read_i32().ok(), Some(3));
        assert_eq!(r.read_string().ok().as_deref(), Some("ks"));
        let sc = SchemaChange {
            change: SchemaChangeType::Created,
            target: SchemaChangeTarget::Function {
                keyspace: "ks".into(),
                name: "f".into(),
                arg_types: vec!["int".into(), "text".into()],
            },
        };
        let b = encode(V4, &Response::Result(ResultMessage::SchemaChange(&sc)));
        let mut r = body_of(&b, V4, Opcode::Result);
        assert_eq!(r.read_i32().ok(), Some(5));
        for want in ["CREATED", "FUNCTION", "ks", "f"] {
            assert_eq!(r.read_string().ok().as_deref(), Some(want));
        }
        assert_eq!(
            r.read_string_list().ok(),
            Some(vec!["int".to_string(), "text".to_string()])
        );
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn events() {
        let addr: SocketAddr = "127.0.0.2:9042".parse().expect("addr");
        let ev = Event::StatusChange {
            change: StatusChangeType::Up,
            address: addr,
        };
        let mut b = BytesMut::new();
        encode_response(&mut b, V4, -1, &ResponsePrefix::NONE, &Response::Event(&ev)).expect("enc");
        assert_eq!(b[2..4], [0xFF, 0xFF]);
        let mut r = body_of(&b, V4, Opcode::Event);
        assert_eq!(r.read_string().ok().as_deref(), Some("STATUS_CHANGE"));
        assert_eq!(r.read_string().ok().as_deref(), Some("UP"));
        assert_eq!(r.rest()[..], [4, 127, 0, 0, 2, 0, 0, 0x23, 0x52]);
        let ev = Event::TopologyChange {
            change: TopologyChangeType::RemovedNode,
            address: addr,
        };
        let mut b = BytesMut::new();
        encode_response(&mut b, V4, -1, &ResponsePrefix::NONE, &Response::Event(&ev)).expect("enc");
        let mut r = body_of(&b, V4, Opcode::Event);
        assert_eq!(r.read_string().ok().as_deref(), Some("TOPOLOGY_CHANGE"));
        assert_eq!(r.read_string().ok().as_deref(), Some("REMOVED_NODE"));
        let ev = Event::SchemaChange(SchemaChange {
            change: SchemaChangeType::Dropped,
            target: SchemaChangeTarget::Table {
                keyspace: "ks".into(),
                table: "t".into(),
            },
        });
        let mut b = BytesMut::new();
        encode_response(&mut b, V4, -1, &ResponsePrefix::NONE, &Response::Event(&ev)).expect("enc");
        let mut r = body_of(&b, V4, Opcode::Event);
        for want in ["SCHEMA_CHANGE", "DROPPED", "TABLE", "ks", "t"] {
            assert_eq!(r.read_string().ok().as_deref(), Some(want));
        }
        assert_eq!(r.remaining(), 0);
    }

    fn read_col_specs(r: &mut Reader, n: usize, global: bool) -> Vec<ColumnSpec> {
        let (mut ks, mut table) = (String::new(), String::new());
        if global {
            ks = r.read_string().expect("ks");
            table = r.read_string().expect("table");
        }
        (0..n)
            .map(|_| {
                let (k, t) = if global {
                    (ks.clone(), table.clone())
                } else {
                    (r.read_string().expect("ks"), r.read_string().expect("t"))
                };
                let name = r.read_string().expect("name");
                let ty = ColumnType::decode(r).expect("type");
                ColumnSpec {
                    keyspace: k,
                    table: t,
                    name,
                    ty,
                }
            })
            .collect()
    }

    #[test]
    fn prepared_v4_and_v5_layouts() {
        let bind = vec![
            column("k", ColumnType::Int),
            column("v", ColumnType::Varchar),
        ];
        let result = vec![column("v", ColumnType::Varchar)];
        for (version, meta_id) in [(V4, None), (V4, Some(&b"mm"[..])), (V5, Some(&b"mm"[..]))] {
            let p = Prepared {
                id: b"id",
                result_metadata_id: meta_id,
                bind: PreparedMetadata {
                    extra_flags: 0x8000_0000,
                    ..PreparedMetadata::new(&bind, &[0])
                },
                result: RowsMetadata::new(&result),
            };
            let b = encode(version, &Response::Result(ResultMessage::Prepared(&p)));
            let mut r = body_of(&b, version, Opcode::Result);
            assert_eq!(r.read_i32().ok(), Some(4));
            assert_eq!(r.read_short_bytes().ok().as_deref(), Some(&b"id"[..]));
            if meta_id.is_some() {
                assert_eq!(r.read_short_bytes().ok().as_deref(), Some(&b"mm"[..]));
            }
            assert_eq!(r.read_u32().ok(), Some(0x8000_0001));
            assert_eq!(r.read_i32().ok(), Some(2));
            assert_eq!(r.read_i32().ok(), Some(1));
            assert_eq!(r.read_u16().ok(), Some(0));
            assert_eq!(read_col_specs(&mut r, 2, true), bind);
            assert_eq!(r.read_i32().ok(), Some(rows_flags::GLOBAL_TABLES_SPEC));
            assert_eq!(r.read_i32().ok(), Some(1));
            assert_eq!(read_col_specs(&mut r, 1, true), result);
            assert_eq!(r.remaining(), 0);
        }
        // v5 without an id still writes an (empty) one; v3 has no pk indexes.
        let p = Prepared {
            id: b"i",
            result: RowsMetadata::empty(),
            ..Prepared::default()
        };
        let b = encode(V5, &Response::Result(ResultMessage::Prepared(&p)));
        let r = body_of(&b, V5, Opcode::Result);
        // kind, id, empty metadata id, bind flags/count/pk_count, result flags/count.
        let mut want = vec![0, 0, 0, 4, 0, 1, b'i', 0, 0];
        want.extend_from_slice(&[0; 12]);
        want.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0]);
        assert_eq!(r.rest()[..], want[..]);
        let b = encode(
            ProtocolVersion::V3,
            &Response::Result(ResultMessage::Prepared(&p)),
        );
        let r = body_of(&b, ProtocolVersion::V3, Opcode::Result);
        let mut want = vec![0, 0, 0, 4, 0, 1, b'i'];
        want.extend_from_slice(&[0; 8]);
        want.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0]);
        assert_eq!(r.rest()[..], want[..]);
    }

    #[test]
    fn rows_writer_round_trip() {
        let cols = vec![
            column("k", ColumnType::Int),
            column(
                "m",
                ColumnType::Map(Box::new(ColumnType::Varchar), Box::new(ColumnType::Blob)),
            ),
            ColumnSpec {
                table: "other".into(),
                ..column("d", ColumnType::Duration)
            },
        ];
        let meta = RowsMetadata {
            paging_state: Some(b"page"),
            new_metadata_id: Some(b"nm"),
            ..RowsMetadata::new(&cols)
        };
        assert!(
            meta.global_table_spec.is_none(),
            "two tables: no global spec"
        );
        let mut b = BytesMut::from(&b"earlier"[..]);
        let mut w = RowsWriter::begin(&mut b, V5, 4, &ResponsePrefix::NONE, &meta).expect("begin");
        for i in 0..3u8 {
            w.push_value(Some(&[0, 0, 0, i])).expect("cell");
            w.push_value(None).expect("cell");
            w.push_with(|buf| buf.put_slice(b"dur")).expect("cell");
        }
        assert_eq!(w.rows(), 3);
        w.finish().expect("finish");
        assert_eq!(&b[..7], b"earlier");
        let b = BytesMut::from(&b[7..]);
        let mut r = body_of(&b, V5, Opcode::Result);
        assert_eq!(r.read_i32().ok(), Some(2));
        assert_eq!(
            r.read_i32().ok(),
            Some(rows_flags::HAS_MORE_PAGES | rows_flags::METADATA_CHANGED)
        );
        assert_eq!(r.read_i32().ok(), Some(3));
        assert_eq!(r.read_bytes().ok().flatten().as_deref(), Some(&b"page"[..]));
        assert_eq!(r.read_short_bytes().ok().as_deref(), Some(&b"nm"[..]));
        assert_eq!(read_col_specs(&mut r, 3, false), cols);
        assert_eq!(r.read_i32().ok(), Some(3));
        for i in 0..3u8 {
            assert_eq!(
                r.read_bytes().ok().flatten().as_deref(),
                Some(&[0, 0, 0, i][..])
            );
            assert_eq!(r.read_bytes().ok(), Some(None));
            assert_eq!(r.read_bytes().ok().flatten().as_deref(), Some(&b"dur"[..]));
        }
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn rows_writer_no_metadata_and_partial_rows() {
        let cols = vec![column("a", ColumnType::Int), column("b", ColumnType::Int)];
        let meta = RowsMetadata {
            no_metadata: true,
            ..RowsMetadata::new(&cols)
        };
        let mut b = BytesMut::new();
        let w = RowsWriter::begin(&mut b, V4, 4, &ResponsePrefix::NONE, &meta).expect("begin");
        w.finish().expect("finish");
        let r = body_of(&b, V4, Opcode::Result);
        assert_eq!(
            r.rest()[..],
            [0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 0]
        );
        // An incomplete row fails and leaves nothing behind; so does a dropped writer.
        let mut b = BytesMut::new();
        let mut w = RowsWriter::begin(&mut b, V4, 4, &ResponsePrefix::NONE, &meta).expect("begin");
        w.push_value(Some(b"x")).expect("cell");
        assert_eq!(
            w.finish(),
            Err(EncodeError::PartialRow {
                cells: 1,
                columns: 2
            })
        );
        assert!(b.is_empty());
        {
            let mut w =
                RowsWriter::begin(&mut b, V4, 4, &ResponsePrefix::NONE, &meta).expect("begin");
            w.push_value(Some(b"x")).expect("cell");
        }
        assert!(b.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn rows_round_trip(
            ncols in 1usize..5,
            cells in proptest::collection::vec(
                proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20)),
                0..20,
            ),
            v5 in proptest::prelude::any::<bool>(),
        ) {
            let version = if v5 { V5 } else { V4 };
            let cols: Vec<ColumnSpec> =
                (0..ncols).map(|i| column(&format!("c{i}"), ColumnType::Blob)).collect();
            let whole = cells.len() / ncols * ncols;
            let mut b = BytesMut::new();
            let mut w = RowsWriter::begin(&mut b, version, 1, &ResponsePrefix::NONE, &RowsMetadata::new(&cols))
                .expect("begin");
            for c in &cells[..whole] {
                w.push_value(c.as_deref()).expect("cell");
            }
            w.finish().expect("finish");
            let mut r = body_of(&b, version, Opcode::Result);
            proptest::prop_assert_eq!(r.read_i32().ok(), Some(2));
            proptest::prop_assert_eq!(r.read_i32().ok(), Some(rows_flags::GLOBAL_TABLES_SPEC));
            proptest::prop_assert_eq!(r.read_i32().ok(), Some(ncols as i32));
            proptest::prop_assert_eq!(read_col_specs(&mut r, ncols, true), cols);
            proptest::prop_assert_eq!(r.read_i32().ok(), Some((whole / ncols) as i32));
            for c in &cells[..whole] {
                proptest::prop_assert_eq!(r.read_bytes().ok().flatten().map(|b| b.to_vec()), c.clone());
            }
            proptest::prop_assert_eq!(r.remaining(), 0);
        }
    }

    fn one_row(version: ProtocolVersion, meta: &RowsMetadata<'_>) -> BytesMut {
        let mut b = BytesMut::new();
        let mut w =
            RowsWriter::begin(&mut b, version, 1, &ResponsePrefix::NONE, meta).expect("begin");
        w.push_value(Some(b"x")).expect("cell");
        w.push_value(None).expect("cell");
        w.finish().expect("finish");
        b
    }

    #[test]
    fn encoded_columns_match_direct_encoding() {
        let cols = vec![
            column("a", ColumnType::Duration),
            column("b", ColumnType::Int),
        ];
        for version in [ProtocolVersion::V3, V4, V5] {
            let enc = EncodedColumns::new(version, &cols).expect("encode");
            let direct = RowsMetadata {
                paging_state: Some(b"p"),
                ..RowsMetadata::new(&cols)
            };
            let cached = RowsMetadata {
                paging_state: Some(b"p"),
                ..RowsMetadata::with_encoded(&enc)
            };
            assert_eq!(one_row(version, &direct), one_row(version, &cached));
            let direct = RowsMetadata {
                no_metadata: true,
                ..direct
            };
            let cached = RowsMetadata {
                no_metadata: true,
                ..cached
            };
            assert_eq!(one_row(version, &direct), one_row(version, &cached));
            let skipped = RowsMetadata {
                paging_state: Some(b"p"),
                ..RowsMetadata::skipped(&cols)
            };
            assert_eq!(one_row(version, &direct), one_row(version, &skipped));
            let counted = RowsMetadata {
                paging_state: Some(b"p"),
                ..RowsMetadata::skipped_count(2)
            };
            assert_eq!(one_row(version, &direct), one_row(version, &counted));
        }
        let enc = EncodedColumns::new(V4, &cols).expect("encode");
        let mut b = BytesMut::new();
        let r = RowsWriter::begin(
            &mut b,
            V5,
            1,
            &ResponsePrefix::NONE,
            &RowsMetadata::with_encoded(&enc),
        );
        assert!(matches!(
            r,
            Err(EncodeError::VersionMismatch {
                encoded: 4,
                requested: 5
            })
        ));
        drop(r);
        assert!(b.is_empty());
    }

    #[test]
    fn encode_errors_leave_buffer_unchanged() {
        let long = "x".repeat(70_000);
        let mut b = BytesMut::from(&b"keep"[..]);
        let r = encode_response(
            &mut b,
            V4,
            1,
            &ResponsePrefix::NONE,
            &Response::Result(ResultMessage::SetKeyspace(&long)),
        );
        assert_eq!(
            r,
            Err(EncodeError::StringTooLong {
                length: 70_000,
                max: 65_535
            })
        );
        assert_eq!(&b[..], b"keep");
    }
}
