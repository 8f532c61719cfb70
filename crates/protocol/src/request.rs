//! Request bodies (spec §4.1), decoded into owned structs whose values are positions in the
//! envelope body ([`Values`]).
//!
//! PERF-CRITICAL: no allocation and no reference count per value.

use bytes::Bytes;

use crate::compression::{Compression, decompress_body};
use crate::consistency::Consistency;
use crate::envelope::{
    DEFAULT_MAX_FRAME_SIZE, Direction, Envelope, Flags, Opcode, ProtocolVersion,
};
use crate::error::DecodeError;
use crate::wire::{PreparedId, Reader, Values, read_values};

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
///
/// PERF-CRITICAL: kept small (it is moved with every request); the parameters that need
/// an allocation and are rarely sent live in [`ExtraParameters`], boxed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryParameters {
    pub consistency: Consistency,
    pub serial_consistency: Option<Consistency>,
    pub skip_metadata: bool,
    /// The raw flags (a byte before v5, an int in v5).
    pub flags: u32,
    pub page_size: Option<i32>,
    /// v5 only.
    pub now_in_seconds: Option<i32>,
    pub default_timestamp: Option<i64>,
    pub values: Values,
    /// Value names, paging state and keyspace: `None` unless one of them was sent.
    pub extra: Option<Box<ExtraParameters>>,
}

/// The rarely sent `<query_parameters>` that own heap data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExtraParameters {
    /// Value names, when flag 0x40 is set (same length as `values`).
    pub names: Option<Vec<String>>,
    pub paging_state: Option<Bytes>,
    /// v5 only.
    pub keyspace: Option<String>,
}

impl ExtraParameters {
    /// Boxed, or `None` when nothing is set (the form the decoder produces).
    pub fn boxed(
        names: Option<Vec<String>>,
        paging_state: Option<Bytes>,
        keyspace: Option<String>,
    ) -> Option<Box<Self>> {
        if names.is_none() && paging_state.is_none() && keyspace.is_none() {
            return None;
        }
        Some(Box::new(Self {
            names,
            paging_state,
            keyspace,
        }))
    }
}

impl QueryParameters {
    /// Value names (flag 0x40).
    pub fn names(&self) -> Option<&[String]> {
        self.extra.as_ref()?.names.as_deref()
    }

    pub fn paging_state(&self) -> Option<&Bytes> {
        self.extra.as_ref()?.paging_state.as_ref()
    }

    /// The v5 keyspace parameter.
    pub fn keyspace(&self) -> Option<&str> {
        self.extra.as_ref()?.keyspace.as_deref()
    }

    /// Takes the rarely sent parameters out (all `None` when none was sent).
    pub fn take_extra(&mut self) -> ExtraParameters {
        self.extra.take().map(|e| *e).unwrap_or_default()
    }
}

impl Default for QueryParameters {
    /// Consistency ONE, nothing else set (what a QUERY with flags 0 decodes to).
    fn default() -> Self {
        Self {
            consistency: Consistency::One,
            serial_consistency: None,
            skip_metadata: false,
            flags: 0,
            page_size: None,
            now_in_seconds: None,
            default_timestamp: None,
            values: Values::default(),
            extra: None,
        }
    }
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
    /// Inline up to 16 bytes (no reference count on the body).
    pub id: PreparedId,
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
    pub values: Values,
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
    decode_request_owned(env.clone(), opts)
}

/// [`decode_request`] consuming the envelope: saves one reference-count round trip on the
/// body, which matters on the EXECUTE hot path.
pub fn decode_request_owned(env: Envelope, opts: &DecodeOptions) -> Result<Request, DecodeError> {
    if env.direction != Direction::Request {
        return Err(DecodeError::ResponseDirection);
    }
    let body = if env.flags.contains(Flags::COMPRESSION) && env.version < ProtocolVersion::V5 {
        let c = opts
            .compression
            .ok_or(DecodeError::CompressionNotNegotiated)?;
        decompress_body(c, &env.body, opts.max_frame_size)?
    } else {
        env.body
    };
    let mut r = Reader::new(body);
    let custom_payload = if env.flags.contains(Flags::CUSTOM_PAYLOAD) {
        Some(r.read_bytes_map()?)
    } else {
        None
    };
    // Built in place and patched: moving the message into a `Request` afterwards would copy it.
    let mut request = Request {
        custom_payload,
        message: read_message(env.opcode, env.version, &mut r, opts)?,
    };
    // The body's one reference moves into the bound values.
    attach_body(&mut request.message, r.into_body());
    Ok(request)
}

/// Gives the bound values of `message` the body their positions refer to.
#[inline]
fn attach_body(message: &mut RequestMessage, body: Bytes) {
    match message {
        RequestMessage::Query(Query { parameters, .. })
        | RequestMessage::Execute(Execute { parameters, .. }) => parameters.values.attach(body),
        RequestMessage::Batch(b) => {
            for s in b.statements.iter_mut().filter(|s| !s.values.is_empty()) {
                s.values.attach(body.clone());
            }
        }
        _ => {}
    }
}

/// An EXECUTE read in place ([`peek_execute`]): the statement id and the positional bound
/// values, nothing decoded or copied.
#[derive(Debug, Clone, Copy)]
pub struct ExecutePeek<'a> {
    pub id: &'a [u8],
    /// The `[value]`s, from the first one's length on.
    values: &'a [u8],
    count: usize,
}

impl<'a> ExecutePeek<'a> {
    /// The `i`-th bound value; `None` past the values sent, for a null or unset value, or
    /// when the values are cut short.
    pub fn value(&self, i: usize) -> Option<&'a [u8]> {
        if i >= self.count {
            return None;
        }
        let mut rest = self.values;
        for n in 0.. {
            let (len, tail) = rest.split_first_chunk::<4>()?;
            let len = i32::from_be_bytes(*len);
            // Null (-1) and unset (-2) carry no bytes.
            let size = usize::try_from(len).unwrap_or(0);
            let bytes = tail.get(..size)?;
            if n == i {
                return (len >= 0).then_some(bytes);
            }
            rest = &tail[size..];
        }
        None
    }
}

/// Reads an EXECUTE envelope's statement id and bound values in place, without decoding
/// it: for hints taken before requests run (which partitions a batch of them will touch).
/// `None` for anything but a plain EXECUTE with positional values: another opcode, a
/// compressed body (v3/v4), a custom payload, named values, or bytes cut short (the
/// request's own decoding then reports what is wrong). `use_metadata_id` as in
/// [`DecodeOptions`] (v5 always sends the result metadata id).
///
/// It parses the slice itself rather than with [`Reader`] and `read_values`: those take
/// the body by reference count and build a [`Values`], which measured 1.2% of a cached
/// read's CPU against 0.2% for this (2026-11-27), on every EXECUTE.
pub fn peek_execute(env: &Envelope, use_metadata_id: bool) -> Option<ExecutePeek<'_>> {
    use query_flags::*;
    if env.opcode != Opcode::Execute
        || env.flags.contains(Flags::CUSTOM_PAYLOAD)
        || (env.version < ProtocolVersion::V5 && env.flags.contains(Flags::COMPRESSION))
    {
        return None;
    }
    let short_bytes = |b: &[u8]| -> Option<(usize, usize)> {
        let (len, _) = b.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_be_bytes(*len));
        (b.len() >= 2 + len).then_some((2, len))
    };
    let body = &env.body[..];
    let (at, len) = short_bytes(body)?;
    let id = &body[at..at + len];
    let mut rest = &body[at + len..];
    if env.version >= ProtocolVersion::V5 || use_metadata_id {
        let (at, len) = short_bytes(rest)?;
        rest = &rest[at + len..];
    }
    // <consistency><flags>: flags are an [int] from v5, a [byte] before.
    let (flags, rest) = if env.version >= ProtocolVersion::V5 {
        let (f, r) = rest.get(2..)?.split_first_chunk::<4>()?;
        (u32::from_be_bytes(*f), r)
    } else {
        let (f, r) = rest.get(2..)?.split_first()?;
        (u32::from(*f), r)
    };
    if flags & VALUES == 0 || flags & NAMES_FOR_VALUES != 0 {
        return None;
    }
    let (n, values) = rest.split_first_chunk::<2>()?;
    Some(ExecutePeek {
        id,
        values,
        count: usize::from(u16::from_be_bytes(*n)),
    })
}

/// Decodes one request message body (no prefix, already decompressed).
pub fn decode_message(
    opcode: Opcode,
    version: ProtocolVersion,
    r: &mut Reader,
    opts: &DecodeOptions,
) -> Result<RequestMessage, DecodeError> {
    let mut message = read_message(opcode, version, r, opts)?;
    attach_body(&mut message, r.body().clone());
    Ok(message)
}

/// [`decode_message`] leaving the bound values without their body.
#[inline(always)]
fn read_message(
    opcode: Opcode,
    version: ProtocolVersion,
    r: &mut Reader,
    opts: &DecodeOptions,
) -> Result<RequestMessage, DecodeError> {
    Ok(match opcode {
        Opcode::Execute => {
            let id = r.read_prepared_id()?;
            let result_metadata_id = if version >= ProtocolVersion::V5 || opts.use_metadata_id {
                Some(r.read_short_bytes()?)
            } else {
                None
            };
            let parameters = read_query_parameters(r, version)?;
            RequestMessage::Execute(Execute {
                id,
                result_metadata_id,
                parameters,
            })
        }
        Opcode::Startup => RequestMessage::Startup(Startup {
            options: r.read_string_map()?,
        }),
        Opcode::Options => RequestMessage::Options,
        Opcode::Query => {
            let query = r.read_long_string()?;
            let parameters = read_query_parameters(r, version)?;
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
    let mut p = read_query_parameters(r, version)?;
    p.values.attach(r.body().clone());
    Ok(p)
}

/// [`decode_query_parameters`] leaving the values without their body.
#[inline(always)]
fn read_query_parameters(
    r: &mut Reader,
    version: ProtocolVersion,
) -> Result<QueryParameters, DecodeError> {
    use query_flags::*;
    let consistency = read_consistency(r)?;
    let flags = read_flags(r, version)?;
    let allow_unset = version >= ProtocolVersion::V4;
    let mut names = None;
    // Assigned once: overwriting a default `Values` would drop it (a vtable call).
    let values = if flags & VALUES != 0 {
        let n = r.read_u16()? as usize;
        if flags & NAMES_FOR_VALUES != 0 {
            let mut ns = Vec::with_capacity(n.min(r.remaining() / 6));
            let values = read_values(r, n, allow_unset, |r| {
                ns.push(r.read_string()?);
                Ok(())
            })?;
            names = Some(ns);
            values
        } else {
            read_values(r, n, allow_unset, |_| Ok(()))?
        }
    } else {
        Values::default()
    };
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
        serial_consistency,
        skip_metadata: flags & SKIP_METADATA != 0,
        flags,
        page_size,
        now_in_seconds,
        default_timestamp,
        values,
        extra: ExtraParameters::boxed(names, paging_state, keyspace),
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
        let values = read_values(r, nv, allow_unset, |_| Ok(()))?;
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

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use proptest::prelude::*;

    use super::*;
    use crate::compression::compress_body;
    use crate::wire::{Value, ValueRef};

    // ---- client-side encoders, written as a driver would -------------------------------

    fn put_string(b: &mut BytesMut, s: &str) {
        b.put_u16(s.len() as u16);
        b.put_slice(s.as_bytes());
    }

    fn put_long_string(b: &mut BytesMut, s: &str) {
        b.put_i32(s.len() as i32);
        b.put_slice(s.as_bytes());
    }

    fn put_value(b: &mut BytesMut, v: ValueRef<'_>) {
        match v {
            ValueRef::Null => b.put_i32(-1),
            ValueRef::Unset => b.put_i32(-2),
            ValueRef::Set(x) => {
                b.put_i32(x.len() as i32);
                b.put_slice(x);
            }
        }
    }

    fn put_flags(b: &mut BytesMut, v: ProtocolVersion, flags: u32) {
        if v >= ProtocolVersion::V5 {
            b.put_u32(flags);
        } else {
            b.put_u8(flags as u8);
        }
    }

    fn params_flags(p: &QueryParameters) -> u32 {
        use query_flags::*;
        let mut f = 0;
        if !p.values.is_empty() || p.names().is_some() {
            f |= VALUES;
        }
        if p.names().is_some() {
            f |= NAMES_FOR_VALUES;
        }
        if p.skip_metadata {
            f |= SKIP_METADATA;
        }
        if p.page_size.is_some() {
            f |= PAGE_SIZE;
        }
        if p.paging_state().is_some() {
            f |= PAGING_STATE;
        }
        if p.serial_consistency.is_some() {
            f |= SERIAL_CONSISTENCY;
        }
        if p.default_timestamp.is_some() {
            f |= DEFAULT_TIMESTAMP;
        }
        if p.keyspace().is_some() {
            f |= KEYSPACE;
        }
        if p.now_in_seconds.is_some() {
            f |= NOW_IN_SECONDS;
        }
        f
    }

    fn put_params(b: &mut BytesMut, v: ProtocolVersion, p: &QueryParameters) {
        b.put_u16(p.consistency.as_u16());
        put_flags(b, v, p.flags);
        if p.flags & query_flags::VALUES != 0 {
            b.put_u16(p.values.len() as u16);
            for (i, val) in p.values.iter().enumerate() {
                if let Some(names) = p.names() {
                    put_string(b, &names[i]);
                }
                put_value(b, val);
            }
        }
        if let Some(n) = p.page_size {
            b.put_i32(n);
        }
        if let Some(ps) = p.paging_state() {
            b.put_i32(ps.len() as i32);
            b.put_slice(ps);
        }
        if let Some(c) = p.serial_consistency {
            b.put_u16(c.as_u16());
        }
        if let Some(t) = p.default_timestamp {
            b.put_i64(t);
        }
        if let Some(ks) = p.keyspace() {
            put_string(b, ks);
        }
        if let Some(n) = p.now_in_seconds {
            b.put_i32(n);
        }
    }

    fn put_batch(b: &mut BytesMut, v: ProtocolVersion, batch: &Batch) {
        b.put_u8(batch.batch_type as u8);
        b.put_u16(batch.statements.len() as u16);
        for s in &batch.statements {
            match &s.statement {
                BatchStatementKind::Query(q) => {
                    b.put_u8(0);
                    put_long_string(b, q);
                }
                BatchStatementKind::Prepared(id) => {
                    b.put_u8(1);
                    b.put_u16(id.len() as u16);
                    b.put_slice(id);
                }
            }
            b.put_u16(s.values.len() as u16);
            for val in s.values.iter() {
                put_value(b, val);
            }
        }
        b.put_u16(batch.consistency.as_u16());
        put_flags(b, v, batch.flags);
        if let Some(c) = batch.serial_consistency {
            b.put_u16(c.as_u16());
        }
        if let Some(t) = batch.default_timestamp {
            b.put_i64(t);
        }
        if let Some(ks) = &batch.keyspace {
            put_string(b, ks);
        }
        if let Some(n) = batch.now_in_seconds {
            b.put_i32(n);
        }
    }

    fn env(v: ProtocolVersion, flags: u8, opcode: Opcode, body: BytesMut) -> Envelope {
        Envelope {
            version: v,
            direction: Direction::Request,
            flags: Flags(flags),
            stream: 1,
            opcode,
            body: body.freeze(),
        }
    }

    fn decode(v: ProtocolVersion, opcode: Opcode, body: BytesMut) -> Result<Request, DecodeError> {
        decode_request(&env(v, 0, opcode, body), &DecodeOptions::default())
    }

    // ---- strategies ------------------------------------------------------------------------

    fn arb_version() -> impl Strategy<Value = ProtocolVersion> {
        prop_oneof![
            Just(ProtocolVersion::V3),
            Just(ProtocolVersion::V4),
            Just(ProtocolVersion::V5)
        ]
    }

    fn arb_consistency() -> impl Strategy<Value = Consistency> {
        (0u16..=0x0A).prop_map(|c| Consistency::from_u16(c).unwrap_or(Consistency::One))
    }

    fn arb_value(v: ProtocolVersion) -> BoxedStrategy<Value> {
        let set =
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|b| Value::Set(Bytes::from(b)));
        if v >= ProtocolVersion::V4 {
            prop_oneof![Just(Value::Null), Just(Value::Unset), set].boxed()
        } else {
            prop_oneof![Just(Value::Null), set].boxed()
        }
    }

    fn arb_params(v: ProtocolVersion) -> impl Strategy<Value = QueryParameters> {
        let v5 = v >= ProtocolVersion::V5;
        (
            arb_consistency(),
            proptest::collection::vec(arb_value(v), 0..12),
            any::<bool>(),
            any::<bool>(),
            proptest::option::of(any::<i32>()),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..30)),
            proptest::option::of(arb_consistency()),
            proptest::option::of(any::<i64>()),
            proptest::option::of("[a-z_]{0,12}"),
            proptest::option::of(any::<i32>()),
        )
            .prop_map(
                move |(cl, values, named, skip, ps, state, serial, ts, ks, now)| {
                    let names =
                        named.then(|| (0..values.len()).map(|i| format!("v{i}é")).collect());
                    let mut p = QueryParameters {
                        consistency: cl,
                        serial_consistency: serial,
                        skip_metadata: skip,
                        flags: 0,
                        page_size: ps,
                        now_in_seconds: now.filter(|_| v5),
                        default_timestamp: ts,
                        values: Values::from_values(&values),
                        extra: ExtraParameters::boxed(
                            names,
                            state.map(Bytes::from),
                            ks.filter(|_| v5),
                        ),
                    };
                    p.flags = params_flags(&p);
                    p
                },
            )
    }

    fn arb_batch(v: ProtocolVersion) -> impl Strategy<Value = Batch> {
        let v5 = v >= ProtocolVersion::V5;
        let stmt = (
            prop_oneof![
                "[ -~]{0,40}".prop_map(BatchStatementKind::Query),
                proptest::collection::vec(any::<u8>(), 0..20)
                    .prop_map(|b| BatchStatementKind::Prepared(Bytes::from(b))),
            ],
            proptest::collection::vec(arb_value(v), 0..5),
        )
            .prop_map(|(statement, values)| BatchStatement {
                statement,
                values: Values::from_values(&values),
            });
        (
            0u8..3,
            proptest::collection::vec(stmt, 0..5),
            arb_consistency(),
            proptest::option::of(arb_consistency()),
            proptest::option::of(any::<i64>()),
            proptest::option::of("[a-z_]{0,12}"),
            proptest::option::of(any::<i32>()),
        )
            .prop_map(move |(t, statements, cl, serial, ts, ks, now)| {
                let keyspace = ks.filter(|_| v5);
                let now_in_seconds = now.filter(|_| v5);
                let mut flags = 0;
                if serial.is_some() {
                    flags |= query_flags::SERIAL_CONSISTENCY;
                }
                if ts.is_some() {
                    flags |= query_flags::DEFAULT_TIMESTAMP;
                }
                if keyspace.is_some() {
                    flags |= query_flags::KEYSPACE;
                }
                if now_in_seconds.is_some() {
                    flags |= query_flags::NOW_IN_SECONDS;
                }
                Batch {
                    batch_type: match t {
                        0 => BatchType::Logged,
                        1 => BatchType::Unlogged,
                        _ => BatchType::Counter,
                    },
                    statements,
                    consistency: cl,
                    flags,
                    serial_consistency: serial,
                    default_timestamp: ts,
                    keyspace,
                    now_in_seconds,
                }
            })
    }

    fn query_body(v: ProtocolVersion, q: &str, p: &QueryParameters) -> BytesMut {
        let mut b = BytesMut::new();
        put_long_string(&mut b, q);
        put_params(&mut b, v, p);
        b
    }

    /// Every strict prefix of a valid body must fail cleanly.
    fn all_prefixes_fail(v: ProtocolVersion, opcode: Opcode, body: &BytesMut) {
        for cut in 0..body.len() {
            let r = decode(v, opcode, BytesMut::from(&body[..cut]));
            assert!(
                r.is_err(),
                "{opcode:?} accepted a body cut at {cut} of {}",
                body.len()
            );
        }
    }

    proptest! {
        #[test]
        fn query_round_trip((v, p) in arb_version().prop_flat_map(|v| (Just(v), arb_params(v))), q in "\\PC{0,40}") {
            let body = query_body(v, &q, &p);
            let r = decode(v, Opcode::Query, body.clone());
            prop_assert_eq!(r, Ok(Request {
                custom_payload: None,
                message: RequestMessage::Query(Query { query: q, parameters: p }),
            }));
            all_prefixes_fail(v, Opcode::Query, &body);
        }

        #[test]
        fn execute_round_trip(
            (v, p) in arb_version().prop_flat_map(|v| (Just(v), arb_params(v))),
            id in proptest::collection::vec(any::<u8>(), 0..20),
            meta in proptest::collection::vec(any::<u8>(), 0..20),
            use_metadata_id in any::<bool>(),
        ) {
            let with_meta = v >= ProtocolVersion::V5 || use_metadata_id;
            let mut b = BytesMut::new();
            b.put_u16(id.len() as u16);
            b.put_slice(&id);
            if with_meta {
                b.put_u16(meta.len() as u16);
                b.put_slice(&meta);
            }
            put_params(&mut b, v, &p);
            let opts = DecodeOptions { use_metadata_id, ..DecodeOptions::default() };
            let e = env(v, 0, Opcode::Execute, b);
            // The in-place peek sees the same id and positional values as the decoder.
            let named = p.flags & query_flags::NAMES_FOR_VALUES != 0;
            let values_sent = p.flags & query_flags::VALUES != 0;
            match peek_execute(&e, use_metadata_id) {
                Some(peek) => {
                    prop_assert!(values_sent && !named);
                    prop_assert_eq!(peek.id, &id[..]);
                    for i in 0..=p.values.len() {
                        let want = match p.values.get(i) {
                            Some(ValueRef::Set(b)) => Some(b),
                            _ => None,
                        };
                        prop_assert_eq!(peek.value(i), want);
                    }
                }
                None => prop_assert!(!values_sent || named),
            }
            let r = decode_request(&e, &opts);
            prop_assert_eq!(r, Ok(Request {
                custom_payload: None,
                message: RequestMessage::Execute(Execute {
                    id: PreparedId::from_slice(&id),
                    result_metadata_id: with_meta.then(|| Bytes::from(meta)),
                    parameters: p,
                }),
            }));
        }

        #[test]
        fn batch_round_trip((v, batch) in arb_version().prop_flat_map(|v| (Just(v), arb_batch(v)))) {
            let mut b = BytesMut::new();
            put_batch(&mut b, v, &batch);
            prop_assert_eq!(decode(v, Opcode::Batch, b.clone()), Ok(Request {
                custom_payload: None,
                message: RequestMessage::Batch(batch),
            }));
            all_prefixes_fail(v, Opcode::Batch, &b);
        }

        #[test]
        fn startup_round_trip(opts in proptest::collection::vec(("[A-Z_]{1,12}", "\\PC{0,12}"), 0..6)) {
            let mut b = BytesMut::new();
            b.put_u16(opts.len() as u16);
            for (k, v) in &opts {
                put_string(&mut b, k);
                put_string(&mut b, v);
            }
            let r = decode(ProtocolVersion::V4, Opcode::Startup, b);
            prop_assert_eq!(r, Ok(Request {
                custom_payload: None,
                message: RequestMessage::Startup(Startup { options: opts }),
            }));
        }

        #[test]
        fn arbitrary_bodies_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..120),
            v in arb_version(),
            op in prop_oneof![Just(Opcode::Startup), Just(Opcode::Query), Just(Opcode::Prepare),
                Just(Opcode::Execute), Just(Opcode::Batch), Just(Opcode::Register),
                Just(Opcode::AuthResponse), Just(Opcode::Options)],
            flags in any::<u8>(),
        ) {
            let opts = DecodeOptions { compression: Some(Compression::Lz4), ..DecodeOptions::default() };
            let _ = decode_request(&env(v, flags, op, BytesMut::from(&body[..])), &opts);
        }
    }

    #[test]
    fn peek_execute_declines_what_it_cannot_read_in_place() {
        let mut b = BytesMut::new();
        b.put_u16(2);
        b.put_slice(b"id");
        b.put_u16(1); // consistency ONE
        b.put_u8(query_flags::VALUES as u8);
        b.put_u16(2);
        b.put_i32(3);
        b.put_slice(b"abc");
        b.put_i32(-1);
        let v4 = ProtocolVersion::V4;
        let plain = env(v4, 0, Opcode::Execute, b.clone());
        let peek = peek_execute(&plain, false).expect("a plain EXECUTE is read");
        assert_eq!(
            (peek.id, peek.value(0), peek.value(1)),
            (&b"id"[..], Some(&b"abc"[..]), None)
        );
        assert_eq!(peek.value(2), None);
        // Compressed bodies, custom payloads and other opcodes are not looked into.
        for (flags, op) in [
            (Flags::COMPRESSION, Opcode::Execute),
            (Flags::CUSTOM_PAYLOAD, Opcode::Execute),
            (0, Opcode::Query),
        ] {
            assert!(peek_execute(&env(v4, flags, op, b.clone()), false).is_none());
        }
        // A value cut short is not returned, nor are the ones after it.
        let cut = env(v4, 0, Opcode::Execute, BytesMut::from(&b[..b.len() - 6]));
        let peek = peek_execute(&cut, false).expect("header reads");
        assert_eq!((peek.value(0), peek.value(1)), (None, None));
        // Truncated before the values: nothing.
        let short = BytesMut::from(&b[..6]);
        assert!(peek_execute(&env(v4, 0, Opcode::Execute, short), false).is_none());
    }

    #[test]
    fn requests_stay_small() {
        // Every request is moved a few times between decoding and the coordinator; the rare
        // parameters are boxed so the common EXECUTE stays this small.
        let size = std::mem::size_of::<Request>();
        assert!(size <= 240, "Request is {size} bytes");
        assert!(std::mem::size_of::<QueryParameters>() <= 152);
    }

    #[test]
    fn prepare_v4_and_v5() {
        let mut b = BytesMut::new();
        put_long_string(&mut b, "SELECT * FROM t");
        let r = decode(ProtocolVersion::V4, Opcode::Prepare, b.clone());
        assert_eq!(
            r.map(|r| r.message),
            Ok(RequestMessage::Prepare(Prepare {
                query: "SELECT * FROM t".into(),
                keyspace: None
            }))
        );
        // v5 requires the flags int.
        assert!(decode(ProtocolVersion::V5, Opcode::Prepare, b.clone()).is_err());
        let mut v5 = b.clone();
        v5.put_u32(1);
        put_string(&mut v5, "ks1");
        let r = decode(ProtocolVersion::V5, Opcode::Prepare, v5);
        assert_eq!(
            r.map(|r| r.message),
            Ok(RequestMessage::Prepare(Prepare {
                query: "SELECT * FROM t".into(),
                keyspace: Some("ks1".into())
            }))
        );
        let mut v5 = b;
        v5.put_u32(0);
        let r = decode(ProtocolVersion::V5, Opcode::Prepare, v5);
        assert!(matches!(
            r,
            Ok(Request {
                message: RequestMessage::Prepare(Prepare { keyspace: None, .. }),
                ..
            })
        ));
    }

    #[test]
    fn options_register_auth() {
        assert_eq!(
            decode(ProtocolVersion::V4, Opcode::Options, BytesMut::new()).map(|r| r.message),
            Ok(RequestMessage::Options)
        );
        let mut b = BytesMut::new();
        b.put_u16(2);
        put_string(&mut b, "SCHEMA_CHANGE");
        put_string(&mut b, "STATUS_CHANGE");
        assert_eq!(
            decode(ProtocolVersion::V4, Opcode::Register, b).map(|r| r.message),
            Ok(RequestMessage::Register(Register {
                events: vec!["SCHEMA_CHANGE".into(), "STATUS_CHANGE".into()]
            }))
        );
        let mut b = BytesMut::new();
        b.put_i32(11);
        b.put_slice(b"\0user\0pass\0");
        assert_eq!(
            decode(ProtocolVersion::V4, Opcode::AuthResponse, b).map(|r| r.message),
            Ok(RequestMessage::AuthResponse(AuthResponse {
                token: Some(Bytes::from_static(b"\0user\0pass\0"))
            }))
        );
        let mut b = BytesMut::new();
        b.put_i32(-1);
        assert_eq!(
            decode(ProtocolVersion::V4, Opcode::AuthResponse, b).map(|r| r.message),
            Ok(RequestMessage::AuthResponse(AuthResponse { token: None }))
        );
    }

    #[test]
    fn values_are_zero_copy_slices_of_the_body() {
        let p = QueryParameters {
            flags: query_flags::VALUES,
            values: Values::from_values(&[Value::Set(Bytes::from_static(b"abcdef"))]),
            ..QueryParameters::default()
        };
        let body = query_body(ProtocolVersion::V4, "q", &p).freeze();
        let range = body.as_ptr_range();
        let e = Envelope {
            body,
            ..env(ProtocolVersion::V4, 0, Opcode::Query, BytesMut::new())
        };
        let r = decode_request(&e, &DecodeOptions::default());
        let Ok(Request {
            message: RequestMessage::Query(q),
            ..
        }) = r
        else {
            panic!("decode failed: {r:?}");
        };
        let Some(ValueRef::Set(v)) = q.parameters.values.get(0) else {
            panic!("no value")
        };
        assert_eq!(v, b"abcdef");
        assert!(range.contains(&v.as_ptr()), "value was copied");
        let owned: Vec<Value> = q.parameters.values.owned().collect();
        let [Value::Set(o)] = &owned[..] else {
            panic!("one set value: {owned:?}")
        };
        assert!(range.contains(&o.as_ptr()), "owned value was copied");
    }

    #[test]
    fn custom_payload_prefix_and_trailing_bytes() {
        let mut b = BytesMut::new();
        b.put_u16(1);
        put_string(&mut b, "k");
        b.put_i32(2);
        b.put_slice(b"xy");
        b.put_u16(0); // STARTUP with no options
        b.put_slice(b"trailing junk");
        let r = decode_request(
            &env(
                ProtocolVersion::V4,
                Flags::CUSTOM_PAYLOAD,
                Opcode::Startup,
                b,
            ),
            &DecodeOptions::default(),
        );
        assert_eq!(
            r,
            Ok(Request {
                custom_payload: Some(vec![("k".into(), Some(Bytes::from_static(b"xy")))]),
                message: RequestMessage::Startup(Startup::default()),
            })
        );
    }

    #[test]
    fn compressed_bodies() {
        let mut body = BytesMut::new();
        put_long_string(
            &mut body,
            &"SELECT * FROM system.local WHERE key='local'".repeat(10),
        );
        body.put_u16(1);
        body.put_u8(0);
        for c in [Compression::Lz4, Compression::Snappy] {
            let mut z = BytesMut::new();
            compress_body(c, &body, &mut z).expect("compress");
            let e = env(ProtocolVersion::V4, Flags::COMPRESSION, Opcode::Query, z);
            let opts = DecodeOptions {
                compression: Some(c),
                ..DecodeOptions::default()
            };
            assert!(matches!(
                decode_request(&e, &opts),
                Ok(Request {
                    message: RequestMessage::Query(_),
                    ..
                })
            ));
            assert_eq!(
                decode_request(&e, &DecodeOptions::default()),
                Err(DecodeError::CompressionNotNegotiated)
            );
        }
        // v5 ignores the flag: the body is read as plain.
        let e = env(
            ProtocolVersion::V5,
            Flags::COMPRESSION,
            Opcode::Options,
            BytesMut::new(),
        );
        assert!(decode_request(&e, &DecodeOptions::default()).is_ok());
    }

    #[test]
    fn malformed_inputs_are_typed_errors() {
        let v4 = ProtocolVersion::V4;
        // Invalid UTF-8 in the query string.
        let mut b = BytesMut::new();
        b.put_i32(3);
        b.put_slice(&[b'a', 0xFF, b'b']);
        b.put_u16(1);
        b.put_u8(0);
        assert_eq!(
            decode(v4, Opcode::Query, b),
            Err(DecodeError::InvalidUtf8 { valid_up_to: 1 })
        );
        // Invalid UTF-8 in a STARTUP key.
        let mut b = BytesMut::new();
        b.put_u16(1);
        b.put_u16(2);
        b.put_slice(&[0xC3, 0x28]);
        put_string(&mut b, "x");
        assert!(matches!(
            decode(v4, Opcode::Startup, b),
            Err(DecodeError::InvalidUtf8 { .. })
        ));
        // Negative long string length.
        let mut b = BytesMut::new();
        b.put_i32(-7);
        assert_eq!(
            decode(v4, Opcode::Query, b),
            Err(DecodeError::NegativeLength { length: -7 })
        );
        // Length larger than the body.
        let mut b = BytesMut::new();
        b.put_i32(100);
        b.put_slice(b"short");
        assert_eq!(
            decode(v4, Opcode::Query, b),
            Err(DecodeError::TooFewBytes {
                expected: 100,
                received: 5
            })
        );
        // Value length below -2, and unset in v3.
        let mut b = BytesMut::new();
        put_long_string(&mut b, "q");
        b.put_u16(1);
        b.put_u8(1);
        b.put_u16(1);
        b.put_i32(-3);
        assert_eq!(
            decode(v4, Opcode::Query, b),
            Err(DecodeError::InvalidValueLength { length: -3 })
        );
        let mut b = BytesMut::new();
        put_long_string(&mut b, "q");
        b.put_u16(1);
        b.put_u8(1);
        b.put_u16(1);
        b.put_i32(-2);
        assert_eq!(
            decode(ProtocolVersion::V3, Opcode::Query, b),
            Err(DecodeError::InvalidValueLength { length: -2 })
        );
        // Unknown consistency.
        let mut b = BytesMut::new();
        put_long_string(&mut b, "q");
        b.put_u16(0x0B);
        b.put_u8(0);
        assert_eq!(
            decode(v4, Opcode::Query, b),
            Err(DecodeError::UnknownConsistency(0x0B))
        );
        // Unknown batch type and statement kind.
        assert_eq!(
            decode(v4, Opcode::Batch, BytesMut::from(&[3u8, 0, 0][..])),
            Err(DecodeError::UnknownBatchType(3))
        );
        assert_eq!(
            decode(v4, Opcode::Batch, BytesMut::from(&[0u8, 0, 1, 2][..])),
            Err(DecodeError::UnknownBatchQueryKind(2))
        );
        // A response opcode or direction.
        assert_eq!(
            decode(v4, Opcode::Result, BytesMut::new()),
            Err(DecodeError::NotARequest(Opcode::Result))
        );
        let mut e = env(v4, 0, Opcode::Options, BytesMut::new());
        e.direction = Direction::Response;
        assert_eq!(
            decode_request(&e, &DecodeOptions::default()),
            Err(DecodeError::ResponseDirection)
        );
        // A huge value count with a tiny body must not allocate for the count.
        let mut b = BytesMut::new();
        put_long_string(&mut b, "q");
        b.put_u16(1);
        b.put_u8(1);
        b.put_u16(u16::MAX);
        assert!(matches!(
            decode(v4, Opcode::Query, b),
            Err(DecodeError::TooFewBytes { .. })
        ));
    }
}
