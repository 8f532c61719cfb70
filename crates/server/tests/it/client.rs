//! A raw CQL client over a blocking socket, speaking envelopes byte by byte, and a test node
//! (shards + listeners + fake coordinator).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use amphora_protocol::wire::Reader;
use amphora_protocol::{
    Compression, DEFAULT_MAX_FRAME_SIZE, Envelope, Flags, Opcode, SegmentCompression,
    SegmentDecoder, SegmentEncoder, compress_envelope, decode_envelope, decompress_body,
};
use amphora_rt::{RtConfig, Runtime, Shards};
use amphora_server::transport::{ListenersHandle, TransportConfig, start_listeners_with};
use bytes::{BufMut, Bytes, BytesMut};

use crate::mock;

pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Shards running the transport over the fake coordinator.
pub struct TestNode {
    pub listeners: ListenersHandle,
    pub shards: Shards,
    rt: Option<Runtime>,
}

impl TestNode {
    pub fn start(nr_shards: u32) -> Self {
        Self::start_with(nr_shards, |_| {})
    }

    pub fn start_with(nr_shards: u32, tweak: impl FnOnce(&mut TransportConfig)) -> Self {
        let rt = amphora_rt::start(
            RtConfig {
                nr_shards,
                pin: false,
            },
            |_| async {},
        )
        .expect("start shards");
        let mut cfg = TransportConfig {
            native_port: 0,
            shard_aware_port: 0,
            ..TransportConfig::default()
        };
        tweak(&mut cfg);
        let shards = rt.shards().clone();
        let listeners = start_listeners_with(cfg, shards.clone(), mock::local).expect("listen");
        Self {
            listeners,
            shards,
            rt: Some(rt),
        }
    }

    pub fn native(&self) -> SocketAddr {
        self.listeners.native_addr()
    }

    pub fn shard_aware(&self) -> SocketAddr {
        self.listeners.shard_aware_addr()
    }

    /// A fresh connection that completed a v4 handshake.
    pub fn ready_client(&self) -> Client {
        let mut c = Client::connect(self.native(), 4);
        let r = c.startup(&[]);
        assert_eq!(r.opcode, Opcode::Ready);
        c
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        drop(self.listeners.stop(true));
        self.shards.close();
        if let Some(rt) = self.rt.take() {
            rt.join();
        }
    }
}

pub struct Client {
    pub sock: TcpStream,
    rbuf: BytesMut,
    pub version: u8,
    compression: Option<Compression>,
    framing: Option<(SegmentEncoder, SegmentDecoder, BytesMut)>,
    /// Whether the last answer had the v4 compression flag.
    pub last_compressed: bool,
}

impl Client {
    pub fn connect(addr: SocketAddr, version: u8) -> Self {
        let sock = TcpStream::connect(addr).expect("connect");
        sock.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        sock.set_nodelay(true).expect("nodelay");
        Self {
            sock,
            rbuf: BytesMut::new(),
            version,
            compression: None,
            framing: None,
            last_compressed: false,
        }
    }

    pub fn local_port(&self) -> u16 {
        self.sock.local_addr().expect("local addr").port()
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).expect("write");
    }

    /// Sends one request envelope, compressed or framed as negotiated.
    pub fn send(&mut self, flags: u8, stream: i16, opcode: u8, body: &[u8]) {
        let env = envelope(self.version, flags, stream, opcode, body);
        let mut out = BytesMut::new();
        match (&self.framing, self.compression) {
            (Some((enc, _, _)), _) => enc.encode(&env, &mut out).expect("frame"),
            (None, Some(c)) if opcode != Opcode::Startup as u8 => {
                compress_envelope(&env, c, &mut out).expect("compress")
            }
            _ => out.extend_from_slice(&env),
        }
        self.send_raw(&out);
    }

    /// The next envelope, or the error that ended the read (EOF is `UnexpectedEof`).
    pub fn try_recv(&mut self) -> io::Result<Envelope> {
        loop {
            let got = match &mut self.framing {
                Some((_, dec, envs)) => {
                    if let Some(e) = decode_envelope(envs, DEFAULT_MAX_FRAME_SIZE)
                        .map_err(|e| io::Error::other(e.to_string()))?
                    {
                        Some(e)
                    } else {
                        dec.decode(&mut self.rbuf, envs)
                            .map_err(|e| io::Error::other(e.to_string()))?;
                        decode_envelope(envs, DEFAULT_MAX_FRAME_SIZE)
                            .map_err(|e| io::Error::other(e.to_string()))?
                    }
                }
                None => decode_envelope(&mut self.rbuf, DEFAULT_MAX_FRAME_SIZE)
                    .map_err(|e| io::Error::other(e.to_string()))?,
            };
            if let Some(mut env) = got {
                self.last_compressed = env.flags.contains(Flags::COMPRESSION);
                if env.flags.contains(Flags::COMPRESSION) && self.version < 5 {
                    let c = self
                        .compression
                        .expect("compressed answer without compression");
                    env.body = decompress_body(c, &env.body, DEFAULT_MAX_FRAME_SIZE)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                    env.flags.set(Flags::COMPRESSION, false);
                }
                return Ok(env);
            }
            let mut chunk = [0u8; 65536];
            let n = self.sock.read(&mut chunk)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.rbuf.extend_from_slice(&chunk[..n]);
        }
    }

    pub fn recv(&mut self) -> Envelope {
        self.try_recv().expect("an answer")
    }

    /// Asserts the server closes the connection (after any answers already sent).
    pub fn expect_closed(&mut self) {
        loop {
            match self.try_recv() {
                Ok(_) => continue,
                Err(e)
                    if e.kind() == io::ErrorKind::UnexpectedEof
                        || e.kind() == io::ErrorKind::ConnectionReset =>
                {
                    return;
                }
                Err(e) => panic!("expected the server to close the connection, got {e}"),
            }
        }
    }

    /// STARTUP with CQL_VERSION and `extra`; sets up compression / framing from the answer.
    pub fn startup(&mut self, extra: &[(&str, &str)]) -> Envelope {
        let mut opts = vec![("CQL_VERSION", "3.0.0")];
        opts.extend_from_slice(extra);
        let mut body = BytesMut::new();
        body.put_u16(opts.len() as u16);
        for (k, v) in &opts {
            put_string(&mut body, k);
            put_string(&mut body, v);
        }
        self.send(0, 0, Opcode::Startup as u8, &body);
        let r = self.recv();
        let comp = opts
            .iter()
            .find(|(k, _)| *k == "COMPRESSION")
            .and_then(|(_, v)| Compression::from_name(v));
        if matches!(r.opcode, Opcode::Ready | Opcode::Authenticate) {
            if self.version >= 5 {
                let sc = if comp == Some(Compression::Lz4) {
                    SegmentCompression::Lz4
                } else {
                    SegmentCompression::None
                };
                self.framing = Some((
                    SegmentEncoder::new(sc),
                    SegmentDecoder::new(sc, DEFAULT_MAX_FRAME_SIZE),
                    BytesMut::new(),
                ));
            } else {
                self.compression = comp;
            }
        }
        r
    }

    pub fn options(&mut self, stream: i16) -> Vec<(String, Vec<String>)> {
        self.send(0, stream, Opcode::Options as u8, &[]);
        let r = self.recv();
        assert_eq!(r.opcode, Opcode::Supported, "{r:?}");
        assert_eq!(r.stream, stream);
        supported_of(&r)
    }

    /// Sends a QUERY (consistency ONE) with `values`, page size and paging state.
    pub fn send_query_with(
        &mut self,
        stream: i16,
        flags: u8,
        q: &str,
        page_size: Option<i32>,
        paging_state: Option<&[u8]>,
    ) {
        let mut body = BytesMut::new();
        put_long_string(&mut body, q);
        body.extend_from_slice(&params(self.version, 0, &[], page_size, paging_state));
        self.send(flags, stream, Opcode::Query as u8, &body);
    }

    pub fn send_query(&mut self, stream: i16, q: &str) {
        self.send_query_with(stream, 0, q, None, None);
    }

    pub fn query(&mut self, stream: i16, q: &str) -> Envelope {
        self.send_query(stream, q);
        let r = self.recv();
        assert_eq!(r.stream, stream, "{r:?}");
        r
    }

    pub fn prepare(&mut self, stream: i16, q: &str) -> Envelope {
        let mut body = BytesMut::new();
        put_long_string(&mut body, q);
        if self.version >= 5 {
            body.put_u32(0);
        }
        self.send(0, stream, Opcode::Prepare as u8, &body);
        self.recv()
    }

    /// EXECUTE with two values; `rmid` is sent only in v5.
    pub fn execute(
        &mut self,
        stream: i16,
        id: &[u8],
        rmid: &[u8],
        skip_metadata: bool,
    ) -> Envelope {
        let mut body = BytesMut::new();
        put_short_bytes(&mut body, id);
        if self.version >= 5 {
            put_short_bytes(&mut body, rmid);
        }
        let flags = if skip_metadata { 0x02 } else { 0 };
        body.extend_from_slice(&params(
            self.version,
            flags,
            &[Some(&1i32.to_be_bytes()), Some(b"x")],
            None,
            None,
        ));
        self.send(0, stream, Opcode::Execute as u8, &body);
        self.recv()
    }
}

pub fn envelope(version: u8, flags: u8, stream: i16, opcode: u8, body: &[u8]) -> BytesMut {
    let mut b = BytesMut::with_capacity(9 + body.len());
    b.put_u8(version);
    b.put_u8(flags);
    b.put_i16(stream);
    b.put_u8(opcode);
    b.put_i32(body.len() as i32);
    b.put_slice(body);
    b
}

/// Query parameters with consistency ONE.
pub fn params(
    version: u8,
    extra_flags: u32,
    values: &[Option<&[u8]>],
    page_size: Option<i32>,
    paging_state: Option<&[u8]>,
) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_u16(1);
    let mut flags = extra_flags;
    if !values.is_empty() {
        flags |= 0x01;
    }
    if page_size.is_some() {
        flags |= 0x04;
    }
    if paging_state.is_some() {
        flags |= 0x08;
    }
    if version >= 5 {
        b.put_u32(flags);
    } else {
        b.put_u8(flags as u8);
    }
    if !values.is_empty() {
        b.put_u16(values.len() as u16);
        for v in values {
            match v {
                Some(v) => {
                    b.put_i32(v.len() as i32);
                    b.put_slice(v);
                }
                None => b.put_i32(-1),
            }
        }
    }
    if let Some(p) = page_size {
        b.put_i32(p);
    }
    if let Some(p) = paging_state {
        b.put_i32(p.len() as i32);
        b.put_slice(p);
    }
    b
}

pub fn put_string(b: &mut BytesMut, s: &str) {
    b.put_u16(s.len() as u16);
    b.put_slice(s.as_bytes());
}

pub fn put_long_string(b: &mut BytesMut, s: &str) {
    b.put_i32(s.len() as i32);
    b.put_slice(s.as_bytes());
}

pub fn put_short_bytes(b: &mut BytesMut, s: &[u8]) {
    b.put_u16(s.len() as u16);
    b.put_slice(s);
}

// ---- answers -------------------------------------------------------------------------------

/// A reader at the message of an answer (after its tracing id and warnings).
pub fn reader(env: &Envelope) -> Reader {
    let mut r = Reader::new(env.body.clone());
    if env.flags.contains(Flags::TRACING) {
        r.read_slice(16).expect("tracing id");
    }
    if env.flags.contains(Flags::WARNING) {
        r.read_string_list().expect("warnings");
    }
    r
}

/// The warnings of an answer (empty without the WARNING flag).
pub fn warnings_of(env: &Envelope) -> Vec<String> {
    if !env.flags.contains(Flags::WARNING) {
        return Vec::new();
    }
    let mut r = Reader::new(env.body.clone());
    if env.flags.contains(Flags::TRACING) {
        r.read_slice(16).expect("tracing id");
    }
    r.read_string_list().expect("warnings")
}

/// (code, message) of an ERROR.
pub fn error_of(env: &Envelope) -> (i32, String) {
    assert_eq!(env.opcode, Opcode::Error, "expected an ERROR, got {env:?}");
    let mut r = reader(env);
    (
        r.read_i32().expect("code"),
        r.read_string().expect("message"),
    )
}

pub fn supported_of(env: &Envelope) -> Vec<(String, Vec<String>)> {
    let mut r = reader(env);
    let n = r.read_u16().expect("n");
    (0..n)
        .map(|_| {
            (
                r.read_string().expect("key"),
                r.read_string_list().expect("values"),
            )
        })
        .collect()
}

pub fn supported_value(map: &[(String, Vec<String>)], key: &str) -> Vec<String> {
    map.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("SUPPORTED lacks {key}: {map:?}"))
}

/// A decoded RESULT Rows with single-id column types.
#[derive(Debug)]
pub struct Rows {
    pub flags: i32,
    pub columns: Vec<(String, u16)>,
    pub column_count: i32,
    pub paging_state: Option<Bytes>,
    /// With Metadata_changed (v5).
    pub new_metadata_id: Option<Bytes>,
    pub rows: Vec<Vec<Option<Bytes>>>,
}

pub fn rows_of(env: &Envelope) -> Rows {
    assert_eq!(env.opcode, Opcode::Result, "expected a RESULT, got {env:?}");
    let mut r = reader(env);
    assert_eq!(r.read_i32().expect("kind"), 2, "not Rows");
    let flags = r.read_i32().expect("flags");
    let column_count = r.read_i32().expect("count");
    let paging_state = if flags & 0x02 != 0 {
        r.read_bytes().expect("paging state")
    } else {
        None
    };
    let new_metadata_id = (flags & 0x08 != 0).then(|| r.read_short_bytes().expect("new id"));
    let mut columns = Vec::new();
    if flags & 0x04 == 0 {
        if flags & 0x01 != 0 {
            r.read_string().expect("ks");
            r.read_string().expect("table");
        }
        for _ in 0..column_count {
            if flags & 0x01 == 0 {
                r.read_string().expect("ks");
                r.read_string().expect("table");
            }
            let name = r.read_string().expect("name");
            let ty = r.read_u16().expect("type");
            columns.push((name, ty));
        }
    }
    let n = r.read_i32().expect("rows");
    let rows = (0..n)
        .map(|_| {
            (0..column_count)
                .map(|_| r.read_bytes().expect("cell"))
                .collect()
        })
        .collect();
    Rows {
        flags,
        columns,
        column_count,
        paging_state,
        new_metadata_id,
        rows,
    }
}

pub fn int_cell(c: &Option<Bytes>) -> i32 {
    let b = c.as_ref().expect("non-null");
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
