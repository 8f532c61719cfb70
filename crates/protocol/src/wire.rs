//! Wire primitives of the native protocol (spec §3): a bounds-checked reader over a request
//! body and writers for responses. All integers are big-endian.
//!
//! PERF-CRITICAL: the reader hands out `Bytes` slices of the body (no copy per value); the
//! writers append to one `BytesMut`.

use std::net::{IpAddr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};

/// Largest `[string]` / `[short bytes]` / `[short]`-counted collection.
pub const SHORT_MAX: usize = u16::MAX as usize;
/// Largest `[long string]` / `[bytes]` / `[int]`-counted collection.
pub const INT_MAX: usize = i32::MAX as usize;

/// A `[value]` of a bound variable (spec §3: `[value]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Length −1.
    Null,
    /// Length −2 (v4+): leave the column unchanged.
    Unset,
    /// Length ≥ 0; a slice of the request body.
    Set(Bytes),
}

/// A borrowed `[value]`: what [`Values`] hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueRef<'a> {
    Null,
    Unset,
    Set(&'a [u8]),
}

impl ValueRef<'_> {
    /// The owned form (a `Set` value copies its bytes).
    pub fn to_value(self) -> Value {
        match self {
            ValueRef::Null => Value::Null,
            ValueRef::Unset => Value::Unset,
            ValueRef::Set(b) => Value::Set(Bytes::copy_from_slice(b)),
        }
    }
}

/// Where one value lies in the body: `len` −1 = null, −2 = unset, else `start..start+len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Span {
    start: u32,
    len: i32,
}

/// Values stored without an allocation (a six-column write fits).
const INLINE_VALUES: usize = 8;

#[derive(Clone)]
enum Spans {
    Inline {
        len: u8,
        items: [Span; INLINE_VALUES],
    },
    Heap(Vec<Span>),
}

impl Spans {
    fn with_capacity(n: usize) -> Self {
        if n <= INLINE_VALUES {
            Spans::Inline {
                len: 0,
                items: [Span::default(); INLINE_VALUES],
            }
        } else {
            Spans::Heap(Vec::with_capacity(n))
        }
    }

    fn as_slice(&self) -> &[Span] {
        match self {
            Spans::Inline { len, items } => items.get(..usize::from(*len)).unwrap_or_default(),
            Spans::Heap(v) => v,
        }
    }

    fn push(&mut self, s: Span) {
        match self {
            Spans::Inline { len, items } => match items.get_mut(usize::from(*len)) {
                Some(slot) => {
                    *slot = s;
                    *len += 1;
                }
                None => {
                    let mut v = Vec::with_capacity(INLINE_VALUES * 2);
                    v.extend_from_slice(items);
                    v.push(s);
                    *self = Spans::Heap(v);
                }
            },
            Spans::Heap(v) => v.push(s),
        }
    }
}

/// The bound values of a request (spec `[value]`s): one shared reference to the body they
/// were read from and each value's position in it. Decoding them costs no reference count
/// and, up to eight values, no allocation; [`Values::get`] borrows, [`Values::owned`] slices.
///
/// PERF-CRITICAL: atomic reference counts of per-value `Bytes` were half of the EXECUTE
/// decode time.
#[derive(Clone)]
pub struct Values {
    body: Bytes,
    spans: Spans,
}

impl Default for Values {
    fn default() -> Self {
        Values {
            body: Bytes::new(),
            spans: Spans::Inline {
                len: 0,
                items: [Span::default(); INLINE_VALUES],
            },
        }
    }
}

impl Values {
    /// Values built from owned ones (copied into one buffer), e.g. by a client or a test.
    pub fn from_values(values: &[Value]) -> Self {
        let mut body = BytesMut::new();
        let mut spans = Spans::with_capacity(values.len());
        for v in values {
            let span = match v {
                Value::Null => Span { start: 0, len: -1 },
                Value::Unset => Span { start: 0, len: -2 },
                Value::Set(b) => {
                    let start = body.len();
                    body.put_slice(b);
                    Span {
                        start: u32::try_from(start).unwrap_or(u32::MAX),
                        len: i32::try_from(b.len()).unwrap_or(i32::MAX),
                    }
                }
            };
            spans.push(span);
        }
        Values {
            body: body.freeze(),
            spans,
        }
    }

    pub fn len(&self) -> usize {
        self.spans.as_slice().len()
    }

    /// Sets the body the positions refer to (the whole request body they were read from).
    #[inline]
    pub(crate) fn attach(&mut self, body: Bytes) {
        self.body = body;
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn resolve(&self, s: Span) -> ValueRef<'_> {
        match s.len {
            -1 => ValueRef::Null,
            -2 => ValueRef::Unset,
            n => {
                let start = s.start as usize;
                let end = start.saturating_add(usize::try_from(n).unwrap_or(0));
                ValueRef::Set(self.body.get(start..end).unwrap_or_default())
            }
        }
    }

    /// The `i`-th value, borrowed.
    pub fn get(&self, i: usize) -> Option<ValueRef<'_>> {
        self.spans.as_slice().get(i).map(|s| self.resolve(*s))
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = ValueRef<'_>> + '_ {
        self.spans.as_slice().iter().map(|s| self.resolve(*s))
    }

    /// The values as owned `Value`s: zero-copy slices of the body (one reference count
    /// each).
    pub fn owned(&self) -> impl ExactSizeIterator<Item = Value> + '_ {
        self.spans.as_slice().iter().map(|s| match s.len {
            -1 => Value::Null,
            -2 => Value::Unset,
            n => {
                let start = s.start as usize;
                let end = start.saturating_add(usize::try_from(n).unwrap_or(0));
                if end <= self.body.len() {
                    Value::Set(self.body.slice(start..end))
                } else {
                    Value::Set(Bytes::new())
                }
            }
        })
    }
}

impl PartialEq for Values {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Values {}

impl std::fmt::Debug for Values {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Reads one `[value]` at the reader's position as a [`Span`].
#[inline(always)]
fn read_span(r: &mut Reader, allow_unset: bool) -> Result<Span, DecodeError> {
    let len = r.read_i32()?;
    match len {
        -1 => Ok(Span { start: 0, len: -1 }),
        -2 if allow_unset => Ok(Span { start: 0, len: -2 }),
        l if l < 0 => Err(DecodeError::InvalidValueLength { length: l }),
        l => {
            let start = r.pos;
            r.skip(l as usize)?;
            Ok(Span {
                start: u32::try_from(start)
                    .map_err(|_| DecodeError::InvalidValueLength { length: l })?,
                len: l,
            })
        }
    }
}

/// Reads `n` `[value]`s as positions in `r`'s body. The returned [`Values`] has no body yet:
/// the caller attaches it ([`Values::attach`]) once the whole request is read, so the body's
/// one reference moves there instead of being counted again.
#[inline]
pub(crate) fn read_values(
    r: &mut Reader,
    n: usize,
    allow_unset: bool,
    mut before_each: impl FnMut(&mut Reader) -> Result<(), DecodeError>,
) -> Result<Values, DecodeError> {
    let spans = if n <= INLINE_VALUES {
        let mut items = [Span::default(); INLINE_VALUES];
        for slot in items.iter_mut().take(n) {
            before_each(r)?;
            *slot = read_span(r, allow_unset)?;
        }
        Spans::Inline {
            len: n as u8,
            items,
        }
    } else {
        // Each value takes at least 4 bytes: bounds the allocation by the body size.
        let mut v = Vec::with_capacity(n.min(r.remaining() / 4));
        for _ in 0..n {
            before_each(r)?;
            v.push(read_span(r, allow_unset)?);
        }
        Spans::Heap(v)
    };
    Ok(Values {
        body: Bytes::new(),
        spans,
    })
}

/// Longest prepared id kept inline (Cassandra's and Scylla's are 16-byte MD5 digests).
const INLINE_ID: usize = 16;

/// A prepared statement id (`[short bytes]`): up to 16 bytes stored inline (copying them is
/// cheaper than an atomic reference count on the body), longer ones as a slice of the body.
/// Derefs to the bytes.
#[derive(Clone)]
pub struct PreparedId(IdRepr);

#[derive(Clone)]
enum IdRepr {
    Inline { len: u8, bytes: [u8; INLINE_ID] },
    Shared(Bytes),
}

impl PreparedId {
    /// An id holding a copy of `id`.
    pub fn from_slice(id: &[u8]) -> Self {
        Self::inline(id).unwrap_or_else(|| PreparedId(IdRepr::Shared(Bytes::copy_from_slice(id))))
    }

    fn inline(id: &[u8]) -> Option<Self> {
        let mut bytes = [0u8; INLINE_ID];
        bytes.get_mut(..id.len())?.copy_from_slice(id);
        Some(PreparedId(IdRepr::Inline {
            len: id.len() as u8,
            bytes,
        }))
    }

    /// The id as `Bytes` (a copy when inline).
    pub fn to_bytes(&self) -> Bytes {
        match &self.0 {
            IdRepr::Inline { .. } => Bytes::copy_from_slice(self),
            IdRepr::Shared(b) => b.clone(),
        }
    }
}

impl std::ops::Deref for PreparedId {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            IdRepr::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            IdRepr::Shared(b) => b,
        }
    }
}

impl AsRef<[u8]> for PreparedId {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<&[u8]> for PreparedId {
    fn from(id: &[u8]) -> Self {
        Self::from_slice(id)
    }
}

impl PartialEq for PreparedId {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

impl Eq for PreparedId {}

impl std::hash::Hash for PreparedId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self[..].hash(state)
    }
}

impl std::fmt::Debug for PreparedId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PreparedId").field(&&self[..]).finish()
    }
}

/// A bounds-checked cursor over a request body. Every read returns an error instead of
/// panicking when the body is short. Reads borrow the body; only [`Reader::read_slice`]
/// (and what calls it) takes a reference count.
#[derive(Debug, Clone)]
pub struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    pub fn new(buf: Bytes) -> Self {
        Self { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// The bytes not yet read.
    pub fn rest(&self) -> &[u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// The whole body (read and unread), giving up the reader.
    pub fn into_body(self) -> Bytes {
        self.buf
    }

    /// The whole body (read and unread).
    pub fn body(&self) -> &Bytes {
        &self.buf
    }

    #[inline(always)]
    fn too_few(&self, n: usize) -> DecodeError {
        DecodeError::TooFewBytes {
            expected: n,
            received: self.remaining(),
        }
    }

    /// The next `n` bytes, borrowed; advances past them.
    #[inline(always)]
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or_else(|| self.too_few(n))?;
        match self.buf.get(self.pos..end) {
            Some(s) => {
                self.pos = end;
                Ok(s)
            }
            None => Err(self.too_few(n)),
        }
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    #[inline]
    pub fn read_u8(&mut self) -> Result<u8, DecodeError> {
        self.array::<1>().map(|[b]| b)
    }

    #[inline]
    pub fn read_u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_be_bytes)
    }

    #[inline]
    pub fn read_i32(&mut self) -> Result<i32, DecodeError> {
        self.array().map(i32::from_be_bytes)
    }

    #[inline]
    pub fn read_u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_be_bytes)
    }

    #[inline]
    pub fn read_i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_be_bytes)
    }

    /// Skips `n` bytes.
    #[inline]
    pub fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.take(n).map(|_| ())
    }

    /// Takes `n` bytes as a zero-copy slice (one reference count).
    pub fn read_slice(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        let start = self.pos;
        self.skip(n)?;
        Ok(self.buf.slice(start..start + n))
    }

    fn read_utf8(&mut self, n: usize) -> Result<String, DecodeError> {
        let raw = self.take(n)?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|e| DecodeError::InvalidUtf8 {
                valid_up_to: e.valid_up_to(),
            })
    }

    /// `[short bytes]` as a [`PreparedId`]: no reference count for ids up to 16 bytes.
    #[inline]
    pub fn read_prepared_id(&mut self) -> Result<PreparedId, DecodeError> {
        let n = self.read_u16()? as usize;
        let start = self.pos;
        let id = self.take(n)?;
        Ok(match PreparedId::inline(id) {
            Some(id) => id,
            None => PreparedId(IdRepr::Shared(self.buf.slice(start..start + n))),
        })
    }

    /// `[string]`: u16 length + UTF-8.
    pub fn read_string(&mut self) -> Result<String, DecodeError> {
        let n = self.read_u16()? as usize;
        self.read_utf8(n)
    }

    /// `[long string]`: i32 length + UTF-8.
    pub fn read_long_string(&mut self) -> Result<String, DecodeError> {
        let n = self.read_i32()?;
        let n = usize::try_from(n).map_err(|_| DecodeError::NegativeLength { length: n })?;
        self.read_utf8(n)
    }

    /// `[bytes]`: i32 length, negative = null.
    pub fn read_bytes(&mut self) -> Result<Option<Bytes>, DecodeError> {
        let n = self.read_i32()?;
        match usize::try_from(n) {
            Ok(n) => self.read_slice(n).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// `[short bytes]`: u16 length.
    pub fn read_short_bytes(&mut self) -> Result<Bytes, DecodeError> {
        let n = self.read_u16()? as usize;
        self.read_slice(n)
    }

    /// `[value]`: i32 length, −1 null, −2 unset (only when `allow_unset`), < −2 invalid.
    pub fn read_value(&mut self, allow_unset: bool) -> Result<Value, DecodeError> {
        let n = self.read_i32()?;
        match n {
            -1 => Ok(Value::Null),
            -2 if allow_unset => Ok(Value::Unset),
            n if n < 0 => Err(DecodeError::InvalidValueLength { length: n }),
            n => self.read_slice(n as usize).map(Value::Set),
        }
    }

    /// `[string list]`.
    pub fn read_string_list(&mut self) -> Result<Vec<String>, DecodeError> {
        let n = self.read_u16()? as usize;
        // Each string takes at least 2 bytes: bounds the allocation by the body size.
        let mut out = Vec::with_capacity(n.min(self.remaining() / 2));
        for _ in 0..n {
            out.push(self.read_string()?);
        }
        Ok(out)
    }

    /// `[string map]`, in wire order.
    pub fn read_string_map(&mut self) -> Result<Vec<(String, String)>, DecodeError> {
        let n = self.read_u16()? as usize;
        let mut out = Vec::with_capacity(n.min(self.remaining() / 4));
        for _ in 0..n {
            let k = self.read_string()?;
            let v = self.read_string()?;
            out.push((k, v));
        }
        Ok(out)
    }

    /// `[bytes map]`, in wire order; values are slices of the body.
    pub fn read_bytes_map(&mut self) -> Result<Vec<(String, Option<Bytes>)>, DecodeError> {
        let n = self.read_u16()? as usize;
        let mut out = Vec::with_capacity(n.min(self.remaining() / 6));
        for _ in 0..n {
            let k = self.read_string()?;
            let v = self.read_bytes()?;
            out.push((k, v));
        }
        Ok(out)
    }
}

// ---- writers -------------------------------------------------------------------------------

#[inline]
fn short_len(len: usize) -> Result<u16, EncodeError> {
    u16::try_from(len).map_err(|_| EncodeError::StringTooLong {
        length: len,
        max: SHORT_MAX,
    })
}

#[inline]
fn int_len(len: usize) -> Result<i32, EncodeError> {
    i32::try_from(len).map_err(|_| EncodeError::ValueTooLong {
        length: len,
        max: INT_MAX,
    })
}

/// `[string]`.
pub fn write_string(buf: &mut BytesMut, s: &str) -> Result<(), EncodeError> {
    buf.put_u16(short_len(s.len())?);
    buf.put_slice(s.as_bytes());
    Ok(())
}

/// `[string]`, cut at a character boundary to fit 65535 bytes (for error messages, which
/// should reach the client even when long).
pub fn write_string_lossy(buf: &mut BytesMut, s: &str) {
    let mut end = s.len().min(SHORT_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let cut = s.get(..end).unwrap_or_default();
    buf.put_u16(cut.len() as u16);
    buf.put_slice(cut.as_bytes());
}

/// `[long string]`.
pub fn write_long_string(buf: &mut BytesMut, s: &str) -> Result<(), EncodeError> {
    buf.put_i32(int_len(s.len())?);
    buf.put_slice(s.as_bytes());
    Ok(())
}

/// `[bytes]`; `None` is null (length −1).
#[inline]
pub fn write_bytes(buf: &mut BytesMut, b: Option<&[u8]>) -> Result<(), EncodeError> {
    match b {
        None => buf.put_i32(-1),
        Some(b) => {
            buf.put_i32(int_len(b.len())?);
            buf.put_slice(b);
        }
    }
    Ok(())
}

/// `[value]`: like `[bytes]` plus −2 for unset.
pub fn write_value(buf: &mut BytesMut, v: &Value) -> Result<(), EncodeError> {
    match v {
        Value::Null => buf.put_i32(-1),
        Value::Unset => buf.put_i32(-2),
        Value::Set(b) => write_bytes(buf, Some(b))?,
    }
    Ok(())
}

/// `[short bytes]`.
pub fn write_short_bytes(buf: &mut BytesMut, b: &[u8]) -> Result<(), EncodeError> {
    buf.put_u16(short_len(b.len())?);
    buf.put_slice(b);
    Ok(())
}

/// `[string list]`.
pub fn write_string_list<S: AsRef<str>>(buf: &mut BytesMut, list: &[S]) -> Result<(), EncodeError> {
    let n = u16::try_from(list.len()).map_err(|_| EncodeError::TooManyItems {
        length: list.len(),
        max: SHORT_MAX,
    })?;
    buf.put_u16(n);
    for s in list {
        write_string(buf, s.as_ref())?;
    }
    Ok(())
}

/// `[string multimap]`.
pub fn write_string_multimap<K: AsRef<str>, V: AsRef<str>>(
    buf: &mut BytesMut,
    map: &[(K, Vec<V>)],
) -> Result<(), EncodeError> {
    let n = u16::try_from(map.len()).map_err(|_| EncodeError::TooManyItems {
        length: map.len(),
        max: SHORT_MAX,
    })?;
    buf.put_u16(n);
    for (k, v) in map {
        write_string(buf, k.as_ref())?;
        write_string_list(buf, v)?;
    }
    Ok(())
}

/// `[bytes map]`.
pub fn write_bytes_map<K: AsRef<str>, V: AsRef<[u8]>>(
    buf: &mut BytesMut,
    map: &[(K, Option<V>)],
) -> Result<(), EncodeError> {
    let n = u16::try_from(map.len()).map_err(|_| EncodeError::TooManyItems {
        length: map.len(),
        max: SHORT_MAX,
    })?;
    buf.put_u16(n);
    for (k, v) in map {
        write_string(buf, k.as_ref())?;
        write_bytes(buf, v.as_ref().map(|v| v.as_ref()))?;
    }
    Ok(())
}

/// `[inetaddr]`: one length byte (4 or 16) and the address.
pub fn write_inetaddr(buf: &mut BytesMut, ip: &IpAddr) {
    match ip {
        IpAddr::V4(a) => {
            buf.put_u8(4);
            buf.put_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            buf.put_u8(16);
            buf.put_slice(&a.octets());
        }
    }
}

/// `[inet]`: `[inetaddr]` + i32 port.
pub fn write_inet(buf: &mut BytesMut, addr: &SocketAddr) {
    write_inetaddr(buf, &addr.ip());
    buf.put_i32(i32::from(addr.port()));
}

// ---- vints -----------------------------------------------------------------------------------

/// Appends a CQL `[unsigned vint]`: the number of leading 1-bits of the first byte is the
/// number of extra bytes; the value is big-endian over the remaining bits (not LEB128).
pub fn write_unsigned_vint(buf: &mut BytesMut, v: u64) {
    let mut tmp = [0u8; 9];
    let n = encode_unsigned_vint(v, &mut tmp);
    buf.put_slice(tmp.get(..n).unwrap_or_default());
}

/// Encodes into `out`, returns the length (1..=9).
pub fn encode_unsigned_vint(v: u64, out: &mut [u8; 9]) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize; // significant bits, ≥ 1
    // Each extra byte adds 8 value bits and costs one prefix bit from the first byte.
    let extra = if bits <= 7 {
        0
    } else {
        ((bits - 1) / 7).min(8)
    };
    if extra == 8 {
        out[0] = 0xFF;
        out[1..].copy_from_slice(&v.to_be_bytes());
        return 9;
    }
    let be = v.to_be_bytes();
    let total = extra + 1;
    // Copy the low `total` bytes of v, then OR the prefix into the first one.
    out[..total].copy_from_slice(&be[8 - total..]);
    let prefix: u8 = !(0xFFu8 >> extra);
    out[0] |= prefix;
    total
}

/// Appends a CQL `[vint]` (zig-zag then unsigned vint).
pub fn write_vint(buf: &mut BytesMut, v: i64) {
    write_unsigned_vint(buf, ((v << 1) ^ (v >> 63)) as u64);
}

/// Decodes an `[unsigned vint]` from the front of `input`; returns the value and bytes used.
pub fn decode_unsigned_vint(input: &[u8]) -> Result<(u64, usize), DecodeError> {
    let first = *input.first().ok_or(DecodeError::TooFewBytes {
        expected: 1,
        received: 0,
    })?;
    let extra = first.leading_ones() as usize;
    let total = extra + 1;
    let rest = input.get(1..total).ok_or(DecodeError::TooFewBytes {
        expected: total,
        received: input.len(),
    })?;
    let mut v: u64 = if extra >= 8 {
        0
    } else {
        u64::from(first & (0xFFu8 >> extra))
    };
    for b in rest {
        v = (v << 8) | u64::from(*b);
    }
    Ok((v, total))
}

/// Decodes a `[vint]` (zig-zag).
pub fn decode_vint(input: &[u8]) -> Result<(i64, usize), DecodeError> {
    let (u, n) = decode_unsigned_vint(input)?;
    Ok((((u >> 1) as i64) ^ -((u & 1) as i64), n))
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_borrow_from_one_body_inline_or_on_the_heap() {
        for n in [0usize, 1, 8, 9, 40] {
            let owned: Vec<Value> = (0..n)
                .map(|i| match i % 3 {
                    0 => Value::Set(Bytes::from(vec![i as u8; i])),
                    1 => Value::Null,
                    _ => Value::Unset,
                })
                .collect();
            let mut body = BytesMut::new();
            for v in &owned {
                match v {
                    Value::Null => body.put_i32(-1),
                    Value::Unset => body.put_i32(-2),
                    Value::Set(b) => {
                        body.put_i32(b.len() as i32);
                        body.put_slice(b);
                    }
                }
            }
            body.put_slice(b"tail");
            let body = body.freeze();
            let mut r = Reader::new(body.clone());
            let mut vs = read_values(&mut r, n, true, |_| Ok(())).expect("decodes");
            vs.attach(body.clone());
            assert_eq!(r.rest(), b"tail");
            assert_eq!(vs.len(), n);
            assert_eq!(vs, Values::from_values(&owned));
            assert_eq!(vs.owned().collect::<Vec<_>>(), owned);
            for (i, v) in vs.iter().enumerate() {
                assert_eq!(v.to_value(), owned[i]);
                if let ValueRef::Set(b) = v {
                    assert!(body.as_ptr_range().contains(&b.as_ptr()) || b.is_empty());
                }
            }
            assert_eq!(vs.get(n), None);
            // Every strict prefix of the values fails to decode.
            for cut in 0..body.len() - 4 {
                let mut r = Reader::new(body.slice(..cut));
                assert!(
                    read_values(&mut r, n, true, |_| Ok(())).is_err() || n == 0,
                    "{n} {cut}"
                );
            }
        }
        // Unset is refused where not allowed, lengths below -2 always.
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xfe]));
        assert!(read_values(&mut r, 1, false, |_| Ok(())).is_err());
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xfd]));
        assert!(read_values(&mut r, 1, true, |_| Ok(())).is_err());
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn prepared_ids_inline_up_to_16_bytes_else_a_slice_of_the_body() {
        for n in [0usize, 1, 16, 17, 40] {
            let id: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(7)).collect();
            let mut body = BytesMut::new();
            body.put_u16(n as u16);
            body.put_slice(&id);
            body.put_slice(b"rest");
            let body = body.freeze();
            let mut r = Reader::new(body.clone());
            let got = r.read_prepared_id().expect("decodes");
            assert_eq!(&got[..], &id[..]);
            assert_eq!(got, PreparedId::from_slice(&id));
            assert_eq!(got.to_bytes(), Bytes::from(id.clone()));
            assert_eq!(r.rest(), b"rest");
            let in_body = body.as_ptr_range().contains(&got.as_ptr());
            assert_eq!(in_body, n > 16, "{n}: inline iff at most 16 bytes");
            // Every strict prefix fails.
            for cut in 0..n + 2 {
                assert!(Reader::new(body.slice(..cut)).read_prepared_id().is_err());
            }
        }
        assert_ne!(
            PreparedId::from_slice(b"ab"),
            PreparedId::from_slice(b"ab\0")
        );
    }

    #[test]
    fn vint_spec_vector() {
        let mut b = BytesMut::new();
        write_unsigned_vint(&mut b, 256_000);
        assert_eq!(&b[..], &[0xC3, 0xE8, 0x00]);
        assert_eq!(decode_unsigned_vint(&b).ok(), Some((256_000, 3)));
    }

    #[test]
    fn vint_small_and_edges() {
        for (v, want) in [
            (0u64, vec![0x00]),
            (1, vec![0x01]),
            (127, vec![0x7F]),
            (128, vec![0x80, 0x80]),
            (16383, vec![0xBF, 0xFF]),
            (16384, vec![0xC0, 0x40, 0x00]),
        ] {
            let mut b = BytesMut::new();
            write_unsigned_vint(&mut b, v);
            assert_eq!(&b[..], &want[..], "value {v}");
        }
        let mut b = BytesMut::new();
        write_unsigned_vint(&mut b, u64::MAX);
        assert_eq!(b.len(), 9);
        assert_eq!(b[0], 0xFF);
        let mut b = BytesMut::new();
        write_vint(&mut b, -1);
        assert_eq!(&b[..], &[0x01]);
    }

    #[test]
    fn vint_truncated_is_error() {
        assert!(decode_unsigned_vint(&[]).is_err());
        assert!(decode_unsigned_vint(&[0xC3, 0xE8]).is_err());
        assert!(decode_unsigned_vint(&[0xFF, 0, 0]).is_err());
    }

    proptest! {
        #[test]
        fn vint_round_trip(v in any::<u64>()) {
            let mut b = BytesMut::new();
            write_unsigned_vint(&mut b, v);
            prop_assert_eq!(decode_unsigned_vint(&b).ok(), Some((v, b.len())));
        }

        #[test]
        fn signed_vint_round_trip(v in any::<i64>()) {
            let mut b = BytesMut::new();
            write_vint(&mut b, v);
            prop_assert_eq!(decode_vint(&b).ok(), Some((v, b.len())));
        }

        #[test]
        fn reader_never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(Bytes::from(data));
            let _ = r.read_string_map();
            let _ = r.read_bytes_map();
            let _ = r.read_value(true);
            let _ = r.read_long_string();
            let _ = r.read_short_bytes();
        }
    }
}
