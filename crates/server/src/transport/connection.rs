//! One client connection: the handshake state machine, request dispatch, the writer.
//!
//! ```text
//!   socket ──read──▶ [v5: SegmentDecoder] ──▶ decode_envelope ──▶ dispatch
//!                                                                  │ handshake, OPTIONS,
//!                                                                  │ REGISTER: inline
//!                                                                  ▼ QUERY/PREPARE/EXECUTE/BATCH:
//!                                           run inline; a spawn_local task once one waits
//!   socket ◀──write── writer task ◀── outbox (v4: compressed per envelope;
//!                                     v5: envelopes framed in batches) ◀── responses
//! ```
//!
//! Responses leave in completion order. Small responses are gathered: once
//! [`EAGER_FLUSH_BYTES`] or [`EAGER_FLUSH_RESPONSES`] (doubling within a burst) are queued
//! the request that queued them writes them at once (one non-blocking write), and the
//! writer task sends whatever is left when the shard's queue of ready tasks drains (or
//! waits for the socket when it is full). Without the eager writes a burst of N requests
//! read in one go is answered in one write after all N ran: client and server then take
//! turns instead of working at the same time.
//! Backpressure: the reader stops reading the socket while the connection or the shard is
//! at its in-flight limit, or too many response bytes wait.
//!
//! PERF-CRITICAL: responses are encoded straight into the outbox; no per-request locks.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;

use amphora_coordinator::{ClientState, NodeEvent, PreparedInfo, QueryError, QueryResult};
use amphora_protocol::{
    self as proto, Compression, DecodeOptions, EncodeError, Envelope, ErrorKind, ErrorResponse,
    Flags, FrameError, Prepared, PreparedMetadata, ProtocolVersion, RequestMessage, Response,
    ResponsePrefix, ResultMessage, RowsMetadata, RowsWriter, SegmentCompression, SegmentDecoder,
    SegmentEncoder, SegmentError, compress_envelope, decode_envelope, decode_request_owned,
    encode_frame_error, encode_response,
};
use bytes::{Buf, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use super::backend::Backend;
use super::convert::{
    batch_parts, cached_columns, placeholder_specs, query_options, schema_change,
};
use super::{
    Authenticator, DRAIN_TIMEOUT, MAX_QUEUED_RESPONSE_BYTES, PASSWORD_AUTHENTICATOR,
    READ_CHUNK_BYTES, TransportConfig,
};
use crate::{error_map, metrics};

/// `CQL_VERSION` advertised in SUPPORTED (Cassandra 5.0).
pub const CQL_VERSION: &str = "3.4.7";
/// Scylla's LWT bit in Prepared metadata flags, when the client echoed the key.
pub const LWT_METADATA_MARK: u32 = 0x8000_0000;
/// The SUPPORTED / STARTUP key of the LWT mark.
const LWT_KEY: &str = "SCYLLA_LWT_ADD_METADATA_MARK";
/// An output buffer that grew past this is given back once it has been written.
const KEEP_WRITE_BUFFER_BYTES: usize = 1024 * 1024;
/// Queued response bytes that the request adding them writes to the socket itself, without
/// waiting for the writer task (which runs only after every task queued before it): about
/// 16 single-row results. Smaller gathers fewer responses per write (more syscalls); larger
/// delays the first answers of a burst and so the client's next requests.
pub const EAGER_FLUSH_BYTES: usize = 4 * 1024;
/// The byte threshold doubles with each eager write of a burst, as the response count does
/// ([`EAGER_FLUSH_RESPONSES`]), up to this. With a fixed 4 KiB a burst of 100 single-row
/// reads (~215 bytes each) left in six writes; each `send` on loopback also runs the
/// client socket's receive path and its wake-up on the shard's core, ~20% of a shard's
/// samples at 400k reads/s (docs/benchmarks.md, "Eager writes doubling by bytes").
pub const EAGER_FLUSH_BYTES_MAX: usize = 64 * 1024;
/// Responses queued since the last write that make the request queueing the last of them
/// write them at once, for small responses that [`EAGER_FLUSH_BYTES`] would gather by the
/// hundred (an INSERT's Void result is 13 bytes: a whole burst of 128 would otherwise
/// leave in one write after all of it ran). The count doubles with each such write in a
/// burst and starts again from this once the writer task has sent the rest: the first
/// answers of a burst leave early, so the client works on them while the shard runs the
/// rest, and a burst of N costs about log2(N / 16) extra writes. Measured (IoT 90/10, 128
/// in flight, docs/benchmarks.md): 110k → 130k ops/s; standard1 writes 178k → 188k/s.
pub const EAGER_FLUSH_RESPONSES: usize = 16;
/// Envelopes the reader takes from its buffer at once, for the backend's prefetch hint
/// ([`Backend::prefetch`]): enough for the cache misses of that many requests to overlap.
pub const PREFETCH_BATCH: usize = 32;
/// After closing, unread client bytes are drained for this long so the kernel does not reset
/// the connection before the client read our last answer.
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

// Event registration bits.
const EV_TOPOLOGY: u8 = 1;
const EV_STATUS: u8 = 2;
const EV_SCHEMA: u8 = 4;

thread_local! {
    /// Requests in flight on this shard, over all connections.
    static SHARD_INFLIGHT: Cell<usize> = const { Cell::new(0) };
    /// Woken when the shard drops below its in-flight limit.
    static SHARD_FREED: Rc<Notify> = Rc::new(Notify::new());
    /// Close requests of this shard's open connections.
    static OPEN: RefCell<HashMap<u64, Rc<CloseSignal>>> = RefCell::new(HashMap::new());
    static NEXT_ID: Cell<u64> = const { Cell::new(0) };
}

/// SUPPORTED's `[string multimap]`.
type Multimap = Vec<(String, Vec<String>)>;

/// Asks a connection to stop reading, finish its in-flight requests and close.
#[derive(Default)]
struct CloseSignal {
    requested: Cell<bool>,
    notify: Notify,
}

impl CloseSignal {
    fn request(&self) {
        self.requested.set(true);
        self.notify.notify_one();
    }
}

/// Asks every connection of the calling shard to close (after finishing what is in flight).
/// Returns how many were asked.
pub fn close_local_connections() -> usize {
    OPEN.with(|o| {
        let o = o.borrow();
        for c in o.values() {
            c.request();
        }
        o.len()
    })
}

/// Open connections on the calling shard.
pub fn local_connection_count() -> usize {
    OPEN.with(|o| o.borrow().len())
}

fn shard_inflight() -> usize {
    SHARD_INFLIGHT.with(|c| c.get())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for STARTUP (OPTIONS allowed).
    Startup,
    /// AUTHENTICATE sent, waiting for AUTH_RESPONSE.
    Authenticating,
    Ready,
}

/// What the reader does after one envelope.
enum Step {
    Continue,
    /// v5 handshake done: the following input bytes are frames.
    StartFraming(SegmentCompression),
}

/// Bytes waiting for the socket.
struct Outbox {
    out: BytesMut,
    /// v5 after the handshake: whole envelopes waiting to be framed by the writer.
    envelopes: BytesMut,
    framing: Option<SegmentEncoder>,
    /// Responses queued since the last write to the socket.
    responses: usize,
    /// Queued responses that call for an eager write ([`EAGER_FLUSH_RESPONSES`], doubled
    /// by each eager write of a burst).
    eager_at: usize,
    /// Queued bytes that call for an eager write ([`EAGER_FLUSH_BYTES`], doubled by each
    /// eager write of a burst up to [`EAGER_FLUSH_BYTES_MAX`]).
    eager_bytes: usize,
}

impl Outbox {
    fn new() -> Self {
        Outbox {
            out: BytesMut::with_capacity(READ_CHUNK_BYTES),
            envelopes: BytesMut::new(),
            framing: None,
            responses: 0,
            eager_at: EAGER_FLUSH_RESPONSES,
            eager_bytes: EAGER_FLUSH_BYTES,
        }
    }

    fn response_queued(&mut self) {
        self.responses += 1;
    }

    /// Whether the request that queued the last response should write the queue itself.
    fn eager_write_due(&self) -> bool {
        self.queued_bytes() >= self.eager_bytes || self.responses >= self.eager_at
    }

    /// Everything queued was written: by an eager write (the next one in this burst waits
    /// for twice the responses or bytes) or by the writer task (the burst is over).
    fn written(&mut self, eagerly: bool) {
        self.responses = 0;
        (self.eager_at, self.eager_bytes) = if eagerly {
            (
                self.eager_at.saturating_mul(2),
                (self.eager_bytes * 2).min(EAGER_FLUSH_BYTES_MAX),
            )
        } else {
            (EAGER_FLUSH_RESPONSES, EAGER_FLUSH_BYTES)
        };
    }

    fn queued_bytes(&self) -> usize {
        self.out.len() + self.envelopes.len()
    }

    /// Moves pending envelopes into frames in `out`.
    fn frame_pending(&mut self) {
        if self.envelopes.is_empty() {
            return;
        }
        if let Some(enc) = &self.framing
            && let Err(e) = enc.encode(&self.envelopes, &mut self.out)
        {
            // Only whole envelopes are queued, so this is a bug: drop them, keep the shard.
            tracing::error!(error = %e, "transport: framing queued envelopes failed");
        }
        self.envelopes.clear();
    }
}

/// A 65536-bit set of the stream ids in flight.
struct StreamSet(Box<[u64; 1024]>);

impl StreamSet {
    fn new() -> Self {
        Self(Box::new([0; 1024]))
    }

    fn slot(stream: i16) -> (usize, u64) {
        let i = usize::from(stream as u16);
        (i / 64, 1u64 << (i % 64))
    }

    /// False if `stream` is already in flight.
    fn insert(&mut self, stream: i16) -> bool {
        let (w, bit) = Self::slot(stream);
        match self.0.get_mut(w) {
            Some(word) if *word & bit == 0 => {
                *word |= bit;
                true
            }
            _ => false,
        }
    }

    fn remove(&mut self, stream: i16) {
        let (w, bit) = Self::slot(stream);
        if let Some(word) = self.0.get_mut(w) {
            *word &= !bit;
        }
    }
}

struct Conn<B: Backend> {
    shard: u32,
    cfg: Rc<TransportConfig>,
    backend: Rc<B>,
    /// Set by the first envelope; every later one must carry the same version.
    version: Cell<Option<ProtocolVersion>>,
    /// v3/v4 envelope compression, once negotiated.
    compression: Cell<Option<Compression>>,
    lwt_mark: Cell<bool>,
    throw_on_overload: Cell<bool>,
    events: Cell<u8>,
    /// Replaced (not mutated) by USE, so a request holds its snapshot across awaits.
    state: RefCell<Rc<ClientState>>,
    /// Written from the front; a partial write leaves the rest at the front, so the
    /// eager writes of requests and the writer task keep the byte order.
    outbox: RefCell<Outbox>,
    /// The socket's write half; taken by the writer task when it ends (dropping the last
    /// reference shuts the write side down).
    wr: RefCell<Option<Rc<OwnedWriteHalf>>>,
    /// The socket did not take everything: the writer task waits for it, requests do not
    /// try to write.
    blocked: Cell<bool>,
    /// The end of the furthest commitlog entry whose write this connection acknowledged
    /// without writing it out (0: none since the last send): written out before any
    /// response leaves (`write_queued`).
    deferred_write_out: Cell<u64>,
    writer_wake: Notify,
    /// Woken when an in-flight request ends or the writer drained the outbox.
    reader_wake: Notify,
    close: Rc<CloseSignal>,
    /// The client's and our end of the socket (for `system_traces.sessions`).
    peer: Option<std::net::SocketAddr>,
    local: Option<std::net::SocketAddr>,
    inflight: Cell<usize>,
    streams: RefCell<StreamSet>,
    /// The writer exits once the outbox is empty.
    closing: Cell<bool>,
    /// A write failed: output is dropped.
    dead: Cell<bool>,
    supported: RefCell<Option<Rc<Multimap>>>,
    event_task: RefCell<Option<JoinHandle<()>>>,
}

/// Serves one accepted connection on the calling shard (inside its `LocalSet`) with `backend`
/// until the client leaves, a fatal protocol error, or [`close_local_connections`].
pub async fn serve_connection_with<B: Backend>(
    stream: TcpStream,
    shard: u32,
    cfg: Rc<TransportConfig>,
    backend: Rc<B>,
) {
    let peer = stream.peer_addr().ok();
    let local = stream.local_addr().ok();
    let (mut rd, wr) = stream.into_split();
    let close = Rc::new(CloseSignal::default());
    let id = NEXT_ID.with(|n| {
        let id = n.get();
        n.set(id + 1);
        id
    });
    OPEN.with(|o| o.borrow_mut().insert(id, close.clone()));
    metrics::connection_opened();
    let conn = Rc::new(Conn {
        shard,
        cfg,
        backend,
        version: Cell::new(None),
        compression: Cell::new(None),
        lwt_mark: Cell::new(false),
        throw_on_overload: Cell::new(false),
        events: Cell::new(0),
        state: RefCell::new(Rc::new(ClientState::default())),
        outbox: RefCell::new(Outbox::new()),
        wr: RefCell::new(Some(Rc::new(wr))),
        blocked: Cell::new(false),
        deferred_write_out: Cell::new(0),
        writer_wake: Notify::new(),
        reader_wake: Notify::new(),
        close,
        peer,
        local,
        inflight: Cell::new(0),
        streams: RefCell::new(StreamSet::new()),
        closing: Cell::new(false),
        dead: Cell::new(false),
        supported: RefCell::new(None),
        event_task: RefCell::new(None),
    });
    tracing::debug!(?peer, shard, "transport: connection opened");
    let mut writer = tokio::task::spawn_local(write_loop(conn.clone()));

    let why = conn.read_loop(&mut rd).await;
    // Before anything below waits (read_loop may have returned mid-burst).
    conn.write_out_deferred();
    tracing::debug!(?peer, shard, why, "transport: connection closing");

    // Let in-flight requests answer, flush, then close our side.
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, conn.wait_idle()).await;
    conn.closing.set(true);
    conn.writer_wake.notify_one();
    if tokio::time::timeout(DRAIN_TIMEOUT, &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
    if let Some(t) = conn.event_task.borrow_mut().take() {
        t.abort();
    }
    // Read what the client still sends for a moment: closing with unread bytes would reset
    // the connection and could destroy our last answer in flight.
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = [0u8; 4096];
        while let Ok(n) = rd.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
    OPEN.with(|o| o.borrow_mut().remove(&id));
    metrics::connection_closed();
}

async fn write_loop<B: Backend>(conn: Rc<Conn<B>>) {
    loop {
        match conn.write_queued() {
            Ok(true) => {
                conn.outbox.borrow_mut().written(false);
                conn.reader_wake.notify_one();
                if conn.closing.get() {
                    break;
                }
                conn.writer_wake.notified().await;
            }
            Ok(false) => {
                let Some(wr) = conn.wr.borrow().clone() else {
                    break;
                };
                if let Err(e) = wr.writable().await {
                    conn.write_failed(&e);
                    return;
                }
            }
            Err(e) => {
                conn.write_failed(&e);
                return;
            }
        }
    }
    // Dropping the write half shuts down our side of the connection (FIN).
    drop(conn.wr.borrow_mut().take());
}

/// Input side: plain envelopes until a v5 handshake completes, frames after.
enum Input {
    Plain,
    Framed {
        decoder: SegmentDecoder,
        envelopes: BytesMut,
    },
}

enum InputError {
    Frame(FrameError),
    Segment(SegmentError),
}

impl Input {
    fn next(&mut self, rbuf: &mut BytesMut, max: usize) -> Result<Option<Envelope>, InputError> {
        match self {
            Input::Plain => decode_envelope(rbuf, max).map_err(InputError::Frame),
            Input::Framed { decoder, envelopes } => {
                if let Some(env) = decode_envelope(envelopes, max).map_err(InputError::Frame)? {
                    return Ok(Some(env));
                }
                decoder
                    .decode(rbuf, envelopes)
                    .map_err(InputError::Segment)?;
                decode_envelope(envelopes, max).map_err(InputError::Frame)
            }
        }
    }
}

impl<B: Backend> Conn<B> {
    fn version(&self) -> ProtocolVersion {
        self.version.get().unwrap_or(ProtocolVersion::V4)
    }

    /// Reads and dispatches until the connection must close; says why.
    async fn read_loop(self: &Rc<Self>, rd: &mut OwnedReadHalf) -> &'static str {
        let mut rbuf = BytesMut::with_capacity(READ_CHUNK_BYTES);
        let mut input = Input::Plain;
        let mut phase = Phase::Startup;
        let max = self.cfg.max_frame_size;
        let mut batch = VecDeque::new();
        let mut failed = None;
        loop {
            loop {
                let next = match batch.pop_front() {
                    Some(env) => Ok(Some(env)),
                    // Once the handshake is over (framing and compression are fixed), the
                    // envelopes read together are taken together: the backend prefetches
                    // what they will touch before the first one runs.
                    None if phase == Phase::Ready => match failed.take() {
                        Some(e) => Err(e),
                        None => self.next_batch(&mut input, &mut rbuf, &mut batch, &mut failed),
                    },
                    None => input.next(&mut rbuf, max),
                };
                let env = match next {
                    Ok(Some(env)) => env,
                    Ok(None) => break,
                    Err(InputError::Frame(e)) => {
                        // No resynchronisation after a bad header: answer and close.
                        metrics::record_error(proto::ErrorCode::ProtocolError.as_i32());
                        self.emit_frame_error(&e);
                        return "bad envelope header";
                    }
                    Err(InputError::Segment(e)) => {
                        let err = ErrorResponse::protocol_error(e.to_string());
                        self.send_error(self.version(), 0, None, &err);
                        return "bad v5 frame";
                    }
                };
                if let Step::StartFraming(c) = self.dispatch(env, &mut phase).await {
                    input = Input::Framed {
                        decoder: SegmentDecoder::new(c, max),
                        envelopes: BytesMut::new(),
                    };
                }
                if self.close.requested.get() {
                    return "close requested";
                }
            }
            if !self.wait_for_capacity(true).await {
                return "close requested";
            }
            if rbuf.capacity() - rbuf.len() < READ_CHUNK_BYTES / 4 {
                rbuf.reserve(READ_CHUNK_BYTES);
            }
            tokio::select! {
                biased;
                _ = self.close.notify.notified() => return "close requested",
                r = rd.read_buf(&mut rbuf) => match r {
                    Ok(0) => return "end of stream",
                    Ok(n) => amphora_rt::note_io(n),
                    Err(e) => {
                        tracing::debug!(error = %e, "transport: read failed");
                        return "read error";
                    }
                },
            }
        }
    }

    /// Takes up to [`PREFETCH_BATCH`] envelopes from `rbuf` into `batch`, hints them to
    /// the backend when there are several, and returns the first. An input error after
    /// some envelopes is kept in `failed` for when they have run.
    fn next_batch(
        &self,
        input: &mut Input,
        rbuf: &mut BytesMut,
        batch: &mut VecDeque<Envelope>,
        failed: &mut Option<InputError>,
    ) -> Result<Option<Envelope>, InputError> {
        let max = self.cfg.max_frame_size;
        while batch.len() < PREFETCH_BATCH {
            match input.next(rbuf, max) {
                Ok(Some(env)) => batch.push_back(env),
                Ok(None) => break,
                Err(e) if batch.is_empty() => return Err(e),
                Err(e) => {
                    *failed = Some(e);
                    break;
                }
            }
        }
        if batch.len() > 1 {
            self.backend.prefetch(batch.make_contiguous());
        }
        Ok(batch.pop_front())
    }

    /// Response bytes not yet accepted by the socket.
    fn unsent_bytes(&self) -> usize {
        self.outbox.borrow().queued_bytes()
    }

    /// Writes queued output until it is all sent (true) or the socket is full (false, and
    /// `blocked` is set until the writer task sees the socket writable again). Never waits.
    fn write_queued(&self) -> std::io::Result<bool> {
        let Some(wr) = self.wr.borrow().clone() else {
            // The writer ended: nothing can be sent any more.
            return Ok(true);
        };
        // No response leaves before the commitlog entries of the writes this connection
        // acknowledged are handed to the OS (those of the request running now included):
        // one write-out for every write answered since the last send.
        self.write_out_through(amphora_storage::commitlog::deferred_in_scope())?;
        let mut ob = self.outbox.borrow_mut();
        ob.frame_pending();
        while !ob.out.is_empty() {
            match wr.try_write(&ob.out) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => ob.out.advance(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.blocked.set(true);
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        self.blocked.set(false);
        if ob.out.capacity() > KEEP_WRITE_BUFFER_BYTES {
            ob.out = BytesMut::with_capacity(READ_CHUNK_BYTES);
        }
        Ok(true)
    }

    fn write_failed(&self, e: &std::io::Error) {
        tracing::debug!(error = %e, "transport: write failed, dropping the connection's output");
        self.dead.set(true);
        let mut ob = self.outbox.borrow_mut();
        ob.out.clear();
        ob.envelopes.clear();
        drop(ob);
        self.reader_wake.notify_one();
        self.close.request();
    }

    /// Records that answers queued in a first poll (or the fast path) acknowledged writes
    /// whose commitlog entries end at `deferred`, still to be written out before they leave.
    fn note_deferred(&self, deferred: u64) {
        if deferred > self.deferred_write_out.get() {
            self.deferred_write_out.set(deferred);
        }
    }

    /// Hands to the OS the commitlog entries of the writes this connection answered
    /// without writing them out (`start_request`), before the connection task waits: no
    /// other task on the shard (another client's read) may see a write a crash could
    /// still lose. False, with the connection's output dropped and the connection closing,
    /// when the write-out fails.
    fn write_out_deferred(&self) -> bool {
        match self.write_out_through(0) {
            Ok(()) => true,
            Err(e) => {
                self.write_failed(&e);
                false
            }
        }
    }

    /// Writes out the commitlog through this connection's deferred entries and `also`
    /// (0: nothing more); the error names the commitlog's failure.
    fn write_out_through(&self, also: u64) -> std::io::Result<()> {
        let deferred = self.deferred_write_out.get().max(also);
        if deferred == 0 {
            return Ok(());
        }
        if let Err(e) = amphora_storage::commitlog::write_out_deferred(deferred) {
            tracing::error!(error = %e, "transport: acknowledged writes could not be written to the commitlog; dropping the connection's output");
            return Err(std::io::Error::other(e.to_string()));
        }
        self.deferred_write_out.set(0);
        Ok(())
    }

    /// After queueing output: write it now if enough is queued (and the socket is not
    /// known to be full), else leave it to the writer task.
    fn output_queued(&self) {
        if !self.blocked.get() && self.outbox.borrow().eager_write_due() {
            let over_limit = self.unsent_bytes() >= MAX_QUEUED_RESPONSE_BYTES;
            match self.write_queued() {
                Ok(true) => {
                    self.outbox.borrow_mut().written(true);
                    if over_limit {
                        self.reader_wake.notify_one();
                    }
                    return;
                }
                Ok(false) => {}
                Err(e) => {
                    self.write_failed(&e);
                    return;
                }
            }
        }
        self.writer_wake.notify_one();
    }

    fn has_capacity(&self) -> bool {
        self.inflight.get() < self.cfg.max_inflight_per_connection
            && shard_inflight() < self.cfg.max_inflight_per_shard
            && self.unsent_bytes() < MAX_QUEUED_RESPONSE_BYTES
    }

    /// May the reader take more bytes from the socket? A `THROW_ON_OVERLOAD` client gets
    /// Overloaded answers instead of backpressure, so only its unread answers hold it back.
    fn may_read(&self) -> bool {
        if self.throw_on_overload.get() {
            self.unsent_bytes() < MAX_QUEUED_RESPONSE_BYTES
        } else {
            self.has_capacity()
        }
    }

    /// Waits until another request may start (`for_reading`: until the socket may be read);
    /// false if the connection is asked to close.
    async fn wait_for_capacity(&self, for_reading: bool) -> bool {
        // The connection task may wait below (and read_loop waits for the socket right
        // after): nothing this burst of requests wrote may be visible to other tasks
        // before it is handed to the OS.
        if !self.write_out_deferred() {
            return false;
        }
        loop {
            if self.close.requested.get() || self.dead.get() {
                return false;
            }
            let ok = if for_reading {
                self.may_read()
            } else {
                self.has_capacity()
            };
            if ok {
                return true;
            }
            let shard_freed = SHARD_FREED.with(|n| n.clone());
            tokio::select! {
                _ = self.reader_wake.notified() => {}
                _ = shard_freed.notified() => {}
                _ = self.close.notify.notified() => return false,
            }
        }
    }

    async fn wait_idle(&self) {
        while self.inflight.get() > 0 {
            self.reader_wake.notified().await;
        }
    }

    // ---- output -------------------------------------------------------------------------

    /// Appends one response envelope written by `encode` (which writes it whole or not at
    /// all) to the outbox, compressed or framed as negotiated.
    fn emit(
        &self,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        if self.dead.get() {
            return Ok(());
        }
        let mut ob = self.outbox.borrow_mut();
        let r = if ob.framing.is_some() {
            encode(&mut ob.envelopes)
        } else if let Some(c) = self.compression.get() {
            let mut plain = BytesMut::new();
            encode(&mut plain)?;
            compress_envelope(&plain, c, &mut ob.out)
        } else {
            encode(&mut ob.out)
        };
        ob.response_queued();
        drop(ob);
        self.output_queued();
        r
    }

    fn send(&self, version: ProtocolVersion, stream: i16, msg: &Response<'_>) {
        if let Err(e) =
            self.emit(|b| encode_response(b, version, stream, &ResponsePrefix::NONE, msg))
        {
            tracing::error!(error = %e, stream, "transport: cannot encode a response");
        }
    }

    fn send_error(
        &self,
        version: ProtocolVersion,
        stream: i16,
        tracing_id: Option<[u8; 16]>,
        err: &ErrorResponse,
    ) {
        let prefix = ResponsePrefix {
            tracing_id,
            ..ResponsePrefix::NONE
        };
        self.send_error_with(version, stream, &prefix, err);
    }

    /// An ERROR with a prefix (tracing id, the request's warnings).
    fn send_error_with(
        &self,
        version: ProtocolVersion,
        stream: i16,
        prefix: &ResponsePrefix<'_>,
        err: &ErrorResponse,
    ) {
        metrics::record_error(err.code().as_i32());
        let msg = Response::Error(err);
        if let Err(e) = self.emit(|b| encode_response(b, version, stream, prefix, &msg)) {
            tracing::error!(error = %e, stream, "transport: cannot encode an error response");
        }
    }

    fn protocol_error(&self, stream: i16, message: impl Into<String>) {
        self.send_error(
            self.version(),
            stream,
            None,
            &ErrorResponse::protocol_error(message),
        );
    }

    /// Envelope-level errors are answered uncompressed (framed once framing started).
    fn emit_frame_error(&self, e: &FrameError) {
        let mut ob = self.outbox.borrow_mut();
        if ob.framing.is_some() {
            encode_frame_error(&mut ob.envelopes, e);
        } else {
            encode_frame_error(&mut ob.out, e);
        }
        drop(ob);
        self.output_queued();
    }

    // ---- dispatch -----------------------------------------------------------------------

    async fn dispatch(self: &Rc<Self>, env: Envelope, phase: &mut Phase) -> Step {
        metrics::record_request();
        let stream = env.stream;
        match self.version.get() {
            None => self.version.set(Some(env.version)),
            Some(v) if v != env.version => {
                self.protocol_error(
                    stream,
                    format!(
                        "Invalid message version. Got {}/v{} but previous messages on this connection had version {}/v{}",
                        env.version.as_u8(),
                        env.version.as_u8(),
                        v.as_u8(),
                        v.as_u8()
                    ),
                );
                return Step::Continue;
            }
            Some(_) => {}
        }
        let opts = DecodeOptions {
            compression: self.compression.get(),
            use_metadata_id: false,
            max_frame_size: self.cfg.max_frame_size,
        };
        let tracing_requested = env.flags.contains(Flags::TRACING);
        let req = match decode_request_owned(env, &opts) {
            Ok(r) => r,
            Err(e) => {
                self.send_error(self.version(), stream, None, &error_map::decode_error(&e));
                return Step::Continue;
            }
        };
        match (req.message, *phase) {
            (RequestMessage::Options, _) => {
                let supported = self.supported();
                self.send(self.version(), stream, &Response::Supported(&supported));
                Step::Continue
            }
            (RequestMessage::Startup(s), Phase::Startup) => self.startup(stream, &s, phase),
            (RequestMessage::Startup(_), _) => {
                self.protocol_error(
                    stream,
                    "Unexpected message STARTUP, the connection is already initialized",
                );
                Step::Continue
            }
            (RequestMessage::AuthResponse(a), Phase::Authenticating) => {
                self.auth_response(stream, a.token.as_deref(), phase);
                Step::Continue
            }
            (msg, Phase::Startup) => {
                self.protocol_error(
                    stream,
                    format!(
                        "Unexpected message {}, expecting STARTUP or OPTIONS",
                        message_name(&msg)
                    ),
                );
                Step::Continue
            }
            (msg, Phase::Authenticating) => {
                self.protocol_error(
                    stream,
                    format!(
                        "Unexpected message {}, expecting SASL response",
                        message_name(&msg)
                    ),
                );
                Step::Continue
            }
            (RequestMessage::AuthResponse(_), Phase::Ready) => {
                self.protocol_error(
                    stream,
                    "Unexpected message AUTH_RESPONSE, the connection is already authenticated",
                );
                Step::Continue
            }
            (RequestMessage::Register(r), Phase::Ready) => {
                self.register(stream, &r.events);
                Step::Continue
            }
            (msg, Phase::Ready) => {
                self.start_request(stream, tracing_requested, msg).await;
                Step::Continue
            }
        }
    }

    fn supported(&self) -> Rc<Multimap> {
        if let Some(s) = self.supported.borrow().as_ref() {
            return s.clone();
        }
        let facts = self.backend.node_facts();
        let one = |k: &str, v: String| (k.to_string(), vec![v]);
        let map = Rc::new(vec![
            one("CQL_VERSION", CQL_VERSION.to_string()),
            (
                "COMPRESSION".to_string(),
                vec!["lz4".to_string(), "snappy".to_string()],
            ),
            (
                "PROTOCOL_VERSIONS".to_string(),
                ProtocolVersion::SUPPORTED_DESCRIPTIONS
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            ),
            one("SCYLLA_SHARD", self.shard.to_string()),
            one("SCYLLA_NR_SHARDS", facts.nr_shards.to_string()),
            one(
                "SCYLLA_PARTITIONER",
                "org.apache.cassandra.dht.Murmur3Partitioner".to_string(),
            ),
            one(
                "SCYLLA_SHARDING_ALGORITHM",
                "biased-token-round-robin".to_string(),
            ),
            one("SCYLLA_SHARDING_IGNORE_MSB", facts.ignore_msb.to_string()),
            one(
                "SCYLLA_SHARD_AWARE_PORT",
                self.cfg.shard_aware_port.to_string(),
            ),
            one(
                "SCYLLA_HOST_ID",
                uuid::Uuid::from_bytes(facts.host_id)
                    .hyphenated()
                    .to_string(),
            ),
            one(
                LWT_KEY,
                format!("LWT_OPTIMIZATION_META_BIT_MASK={LWT_METADATA_MARK}"),
            ),
        ]);
        *self.supported.borrow_mut() = Some(map.clone());
        map
    }

    fn startup(&self, stream: i16, s: &proto::Startup, phase: &mut Phase) -> Step {
        let version = self.version();
        let Some(cql) = s.get("CQL_VERSION") else {
            self.protocol_error(stream, "Missing value CQL_VERSION in STARTUP message");
            return Step::Continue;
        };
        let major = cql
            .split('.')
            .next()
            .and_then(|m| m.trim().parse::<u32>().ok());
        if major.is_none_or(|m| m < 3) {
            self.protocol_error(
                stream,
                format!("Invalid or unsupported CQL_VERSION {cql:?}; supported is {CQL_VERSION}"),
            );
            return Step::Continue;
        }
        let compression = match s.get("COMPRESSION") {
            None | Some("") => None,
            Some(name) => match Compression::from_name(name) {
                Some(Compression::Snappy) if version >= ProtocolVersion::V5 => {
                    self.protocol_error(
                        stream,
                        format!(
                            "Unknown compression algorithm: {name} (protocol v5 supports lz4 only)"
                        ),
                    );
                    return Step::Continue;
                }
                Some(c) => Some(c),
                None => {
                    self.protocol_error(stream, format!("Unknown compression algorithm: {name}"));
                    return Step::Continue;
                }
            },
        };
        self.lwt_mark.set(s.get(LWT_KEY).is_some());
        self.throw_on_overload
            .set(s.get("THROW_ON_OVERLOAD").is_some_and(|v| v.trim() == "1"));
        *self.state.borrow_mut() = Rc::new(ClientState {
            protocol_version: version.as_u8(),
            ..ClientState::default()
        });
        // The answer itself goes out plain and uncompressed.
        match self.cfg.authenticator {
            Authenticator::AllowAll => {
                self.send(version, stream, &Response::Ready);
                *phase = Phase::Ready;
            }
            Authenticator::Password => {
                self.send(
                    version,
                    stream,
                    &Response::Authenticate(PASSWORD_AUTHENTICATOR),
                );
                *phase = Phase::Authenticating;
            }
        }
        if version >= ProtocolVersion::V5 {
            let c = match compression {
                Some(Compression::Lz4) => SegmentCompression::Lz4,
                _ => SegmentCompression::None,
            };
            self.outbox.borrow_mut().framing = Some(SegmentEncoder::new(c));
            Step::StartFraming(c)
        } else {
            self.compression.set(compression);
            Step::Continue
        }
    }

    fn auth_response(&self, stream: i16, token: Option<&[u8]>, phase: &mut Phase) {
        let version = self.version();
        let fail = |msg: String| {
            self.send_error(
                version,
                stream,
                None,
                &ErrorResponse::new(ErrorKind::AuthenticationError, msg),
            );
        };
        // SASL PLAIN: [authzid] NUL authcid NUL passwd.
        let Some((user, password)) = token.and_then(sasl_plain) else {
            fail("Authentication failed: malformed SASL PLAIN token".to_string());
            return;
        };
        if user == self.cfg.superuser_name && password == self.cfg.superuser_password {
            let old = self.state.borrow().clone();
            *self.state.borrow_mut() = Rc::new(ClientState {
                user: Some(user),
                ..(*old).clone()
            });
            self.send(version, stream, &Response::AuthSuccess(None));
            *phase = Phase::Ready;
        } else {
            fail(format!(
                "Provided username {user} and/or password are incorrect"
            ));
        }
    }

    fn register(self: &Rc<Self>, stream: i16, events: &[String]) {
        let mut bits = 0;
        for e in events {
            bits |= match e.as_str() {
                "TOPOLOGY_CHANGE" => EV_TOPOLOGY,
                "STATUS_CHANGE" => EV_STATUS,
                "SCHEMA_CHANGE" => EV_SCHEMA,
                other => {
                    self.protocol_error(stream, format!("Invalid value '{other}' for Type"));
                    return;
                }
            };
        }
        self.events.set(self.events.get() | bits);
        if self.event_task.borrow().is_none() {
            let mut rx = self.backend.events();
            let conn = self.clone();
            let task = tokio::task::spawn_local(async move {
                loop {
                    match rx.recv().await {
                        Ok(ev) => conn.forward_event(&ev),
                        Err(RecvError::Lagged(n)) => {
                            tracing::warn!(missed = n, "transport: event subscriber lagged");
                        }
                        Err(RecvError::Closed) => break,
                    }
                }
            });
            *self.event_task.borrow_mut() = Some(task);
        }
        self.send(self.version(), stream, &Response::Ready);
    }

    fn forward_event(&self, ev: &NodeEvent) {
        #[allow(unreachable_patterns)]
        let (bit, event) = match ev {
            NodeEvent::SchemaChange(sc) => {
                (EV_SCHEMA, proto::Event::SchemaChange(schema_change(sc)))
            }
            _ => return,
        };
        if self.events.get() & bit != 0 {
            self.send(self.version(), -1, &Response::Event(&event));
        }
    }

    // ---- requests -----------------------------------------------------------------------

    async fn start_request(
        self: &Rc<Self>,
        stream: i16,
        tracing_requested: bool,
        msg: RequestMessage,
    ) {
        let version = self.version();
        if !self.has_capacity() {
            if self.throw_on_overload.get() {
                self.send_error(
                    version,
                    stream,
                    None,
                    &ErrorResponse::new(
                        ErrorKind::Overloaded,
                        "Too many requests in flight on this connection or shard",
                    ),
                );
                return;
            }
            if !self.wait_for_capacity(false).await {
                return;
            }
        }
        if !self.streams.borrow_mut().insert(stream) {
            self.protocol_error(
                stream,
                format!("Stream id {stream} is already in use by a request in flight"),
            );
            return;
        }
        self.inflight.set(self.inflight.get() + 1);
        SHARD_INFLIGHT.with(|c| c.set(c.get() + 1));
        metrics::inflight_add(1);
        // Traced when the client asks (the response carries the session id) or, at
        // `nodetool settraceprobability`, by sampling (the client is not told).
        let trace = (tracing_requested || amphora_trace::sample())
            .then(|| self.new_trace(&msg))
            .flatten();
        let tracing_id = trace
            .as_ref()
            .filter(|_| tracing_requested)
            .map(|t| t.session_id());
        let guard = InflightGuard {
            conn: self.clone(),
            stream,
            version,
            answered: false,
        };
        // Most requests (local reads, writes acknowledged before a sync) finish without
        // ever waiting: run them here, in the connection's task, and give only the ones
        // that wait a task of their own. Saves a task allocation and two scheduler trips
        // per request. The request's wakers may still point at this task after it moved
        // to its own: that only costs this task a spurious poll. A panic is caught as a
        // spawned task's would be: dropping the request then answers ServerError.
        let (guard, work) = match msg {
            // A prepared point read or simple write that needs no wait is answered here,
            // with no future (`Backend::execute_now`): the coordinator's nested state
            // machines are a few KB, and starting one copies it at every level.
            RequestMessage::Execute(e) if trace.is_none() => {
                let ask = rows_ask(&e, version);
                let opts = query_options(e.parameters);
                let started = amphora_trace::slow_timer();
                // As the first poll below: a write's commitlog write-out is left to
                // `write_queued`, and a panic is caught (the guard, dropped, answers
                // ServerError).
                let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    amphora_storage::commitlog::with_deferred_write_out(|| {
                        let (now, warnings) =
                            amphora_trace::warnings_of(|| self.backend.execute_now(&e.id, &opts));
                        match now {
                            Some(r) => {
                                check_slow_execute(started, &e.id);
                                let outcome = r.map(|r| Outcome::Result(r, ask));
                                answer(guard, None, outcome, warnings);
                                None
                            }
                            None => Some((guard, ask)),
                        }
                    })
                }));
                let (rest, deferred) = match attempt {
                    Ok(a) => a,
                    Err(_) => {
                        request_panicked();
                        return;
                    }
                };
                self.note_deferred(deferred);
                let Some((guard, ask)) = rest else {
                    return;
                };
                let work = start_execute(
                    self.backend.clone(),
                    self.state.borrow().clone(),
                    e.id,
                    opts,
                    ask,
                );
                (guard, work)
            }
            msg => {
                let work = start_work(
                    self.backend.clone(),
                    self.state.borrow().clone(),
                    version,
                    msg,
                );
                (guard, work)
            }
        };
        let mut request = Box::pin(run_request(guard, tracing_id, trace, work));
        // Periodic-mode writes answered in this first poll leave their commitlog write-out
        // to `write_queued`, which does it once for all the responses it sends.
        let first = std::future::poll_fn(|cx| {
            Poll::Ready(std::panic::catch_unwind(std::panic::AssertUnwindSafe(
                || {
                    let (ready, deferred) =
                        amphora_storage::commitlog::with_deferred_write_out(|| {
                            request.as_mut().poll(cx).is_ready()
                        });
                    self.note_deferred(deferred);
                    ready
                },
            )))
        })
        .await;
        match first {
            Ok(true) => {}
            Ok(false) => {
                tokio::task::spawn_local(request);
            }
            Err(_) => {
                drop(request);
                request_panicked();
            }
        }
    }

    /// A trace session for a request (`None` for messages that are not traced).
    fn new_trace(&self, msg: &RequestMessage) -> Option<Arc<amphora_trace::Session>> {
        let (command, request) = match msg {
            RequestMessage::Query(_) => ("QUERY", "Execute CQL3 query"),
            RequestMessage::Execute(_) => ("EXECUTE", "Execute CQL3 prepared query"),
            RequestMessage::Batch(_) => ("BATCH", "Execute batch of CQL3 queries"),
            RequestMessage::Prepare(_) => ("PREPARE", "Preparing CQL3 query"),
            _ => return None,
        };
        let h = self.backend.node_facts().host_id;
        let unspecified = std::net::IpAddr::from([0, 0, 0, 0]);
        let session = amphora_trace::Session::new(amphora_trace::SessionInfo {
            session_id: amphora_trace::new_session_id([h[10], h[11], h[12], h[13], h[14], h[15]]),
            client: self.peer.map(|a| a.ip()).unwrap_or(unspecified),
            coordinator: self.local.map(|a| a.ip()).unwrap_or(unspecified),
            coordinator_port: self.local.map(|a| i32::from(a.port())).unwrap_or(0),
            command: command.to_string(),
            request: request.to_string(),
            parameters: Vec::new(),
            started_at_ms: amphora_trace::now_ms(),
        });
        let client = self
            .peer
            .map(|a| a.to_string())
            .unwrap_or_else(|| "?".into());
        session.record(
            format!("{command} message received from {client}"),
            format!("shard {}", self.shard),
        );
        Some(session)
    }

    fn encode_outcome(
        &self,
        buf: &mut BytesMut,
        version: ProtocolVersion,
        stream: i16,
        prefix: &ResponsePrefix<'_>,
        outcome: &Outcome,
    ) -> Result<(), EncodeError> {
        let result = |buf: &mut BytesMut, r: ResultMessage<'_>| {
            encode_response(buf, version, stream, prefix, &Response::Result(r))
        };
        match outcome {
            Outcome::Result(QueryResult::Void, _) => result(buf, ResultMessage::Void),
            Outcome::Result(QueryResult::SetKeyspace(ks), _) => {
                result(buf, ResultMessage::SetKeyspace(ks))
            }
            Outcome::Result(QueryResult::SchemaChange(sc), _) => {
                result(buf, ResultMessage::SchemaChange(&schema_change(sc)))
            }
            Outcome::Result(QueryResult::Rows(rows), ask) => {
                let ncols = rows.columns.len();
                let placeholders;
                let cached = cached_columns(&rows.columns);
                let mut meta = match rows_metadata_choice(rows, ask, || cached.metadata_id()) {
                    MetadataChoice::Skip => {
                        placeholders = placeholder_specs(ncols);
                        RowsMetadata::skipped(&placeholders)
                    }
                    choice => {
                        let mut m = match cached.encoded(version) {
                            Some(enc) => RowsMetadata::with_encoded(enc),
                            None => RowsMetadata::new(&cached.specs),
                        };
                        if let MetadataChoice::Changed(id) = choice {
                            m.new_metadata_id = Some(id);
                        }
                        m
                    }
                };
                meta.paging_state = rows.paging_state.as_deref();
                let mut w = RowsWriter::begin(buf, version, stream, prefix, &meta)?;
                for cell in rows.cells.iter().take(rows.row_count.saturating_mul(ncols)) {
                    w.push_value(cell.as_deref())?;
                }
                w.finish()
            }
            Outcome::Prepared(info) => {
                let bind = cached_columns(&info.bind_columns);
                let result_cols = cached_columns(&info.result_columns);
                let mut bind_meta = PreparedMetadata::new(&bind.specs, &info.pk_indexes);
                if info.is_lwt && self.lwt_mark.get() {
                    bind_meta.extra_flags |= LWT_METADATA_MARK;
                }
                let result_meta = if result_cols.specs.is_empty() {
                    RowsMetadata::empty()
                } else {
                    RowsMetadata::new(&result_cols.specs)
                };
                let p = Prepared {
                    id: &info.id,
                    // Computed here, as for the Rows answers it is compared with.
                    result_metadata_id: (version >= ProtocolVersion::V5)
                        .then(|| &result_cols.metadata_id()[..]),
                    bind: bind_meta,
                    result: result_meta,
                };
                result(buf, ResultMessage::Prepared(&p))
            }
        }
    }
}

/// A successful request's answer.
enum Outcome {
    Result(QueryResult, RowsAsk),
    Prepared(PreparedInfo),
}

/// What the request said about the Rows metadata it wants.
#[derive(Default)]
struct RowsAsk {
    /// The Skip_metadata flag.
    skip_metadata: bool,
    /// The `result_metadata_id` a v5 EXECUTE sent back.
    metadata_id: Option<bytes::Bytes>,
}

/// The metadata a Rows answer carries.
#[derive(Debug, PartialEq, Eq)]
enum MetadataChoice<'a> {
    Full,
    Skip,
    /// Full metadata with Metadata_changed and this new id.
    Changed(&'a [u8]),
}

/// The name of the first column of a conditional statement's result.
const APPLIED: &str = "[applied]";

/// Chooses the Rows metadata as Cassandra's ExecuteMessage does: a v5 EXECUTE whose
/// `result_metadata_id` differs from the current one of the result gets full metadata with
/// Metadata_changed and the new id (the driver replaces its cached metadata); otherwise
/// metadata is skipped when asked. A conditional (LWT) result always carries its metadata
/// and never Metadata_changed: its columns vary between executions (CASSANDRA-13992).
fn rows_metadata_choice<'a>(
    rows: &amphora_coordinator::ResultRows,
    ask: &RowsAsk,
    current_id: impl FnOnce() -> &'a bytes::Bytes,
) -> MetadataChoice<'a> {
    if rows.columns.first().is_some_and(|c| c.name == APPLIED) {
        return MetadataChoice::Full;
    }
    if let Some(sent) = &ask.metadata_id {
        let current = current_id();
        if current != sent {
            return MetadataChoice::Changed(current);
        }
    }
    if rows.no_metadata || ask.skip_metadata {
        MetadataChoice::Skip
    } else {
        MetadataChoice::Full
    }
}

/// Accounts one in-flight request; on drop frees its slot and stream id, and answers
/// ServerError if the request ended without an answer (a panic in the coordinator).
struct InflightGuard<B: Backend> {
    conn: Rc<Conn<B>>,
    stream: i16,
    version: ProtocolVersion,
    answered: bool,
}

impl<B: Backend> Drop for InflightGuard<B> {
    fn drop(&mut self) {
        let c = &self.conn;
        if !self.answered && c.outbox.try_borrow_mut().is_ok() {
            tracing::error!(
                stream = self.stream,
                "transport: request ended without an answer"
            );
            c.send_error(
                self.version,
                self.stream,
                None,
                &ErrorResponse::server_error("Internal error: the request was abandoned"),
            );
        }
        c.streams.borrow_mut().remove(self.stream);
        c.inflight.set(c.inflight.get().saturating_sub(1));
        let before = SHARD_INFLIGHT.with(|n| {
            let v = n.get();
            n.set(v.saturating_sub(1));
            v
        });
        metrics::inflight_add(-1);
        c.reader_wake.notify_one();
        if before >= c.cfg.max_inflight_per_shard {
            SHARD_FREED.with(|n| n.notify_waiters());
        }
    }
}

async fn run_request<B: Backend>(
    guard: InflightGuard<B>,
    tracing_id: Option<[u8; 16]>,
    trace: Option<Arc<amphora_trace::Session>>,
    work: Work,
) {
    match trace {
        // Boxed: the traced path is rare and must not grow every request's future.
        Some(t) => {
            let thread = format!("shard {}", guard.conn.shard);
            let done = t.clone();
            let thread2 = thread.clone();
            Box::pin(amphora_trace::scope(
                Some(t),
                thread,
                serve_request(guard, tracing_id, work, move || {
                    done.record("Request complete".into(), thread2);
                    done.finish();
                }),
            ))
            .await
        }
        None => serve_request(guard, tracing_id, work, || {}).await,
    }
}

/// A request's work: the backend's future, boxed with the message it borrows.
type Work = std::pin::Pin<Box<dyn Future<Output = Result<Outcome, QueryError>>>>;

/// After a request panicked (its guard answered ServerError): what it deferred before
/// panicking was not recorded for its connection, so every deferred entry is written out.
fn request_panicked() {
    tracing::error!("transport: a request panicked");
    let _ =
        amphora_storage::commitlog::write_out_deferred(amphora_storage::commitlog::deferred_max());
}

/// What an EXECUTE asks of its Rows metadata.
fn rows_ask(e: &proto::Execute, version: ProtocolVersion) -> RowsAsk {
    RowsAsk {
        skip_metadata: e.parameters.skip_metadata,
        // Only v5 compares ids; a v4 EXECUTE carries none.
        metadata_id: e
            .result_metadata_id
            .clone()
            .filter(|_| version >= ProtocolVersion::V5),
    }
}

/// Logs an EXECUTE of `id` started at `started` if it was slow.
fn check_slow_execute(started: Option<std::time::Duration>, id: &[u8]) {
    amphora_trace::check_slow_since(started, || {
        format!(
            "EXECUTE of prepared statement 0x{}",
            amphora_coordinator::values::hex(id)
        )
    });
}

/// The backend's future for an EXECUTE (see [`start_work`]).
fn start_execute<B: Backend>(
    backend: Rc<B>,
    state: Rc<ClientState>,
    id: proto::PreparedId,
    opts: amphora_coordinator::QueryOptions,
    ask: RowsAsk,
) -> Work {
    Box::pin(async move {
        let started = amphora_trace::slow_timer();
        let r = backend.execute(&state, &id, opts).await;
        check_slow_execute(started, &id);
        r.map(|r| Outcome::Result(r, ask))
    })
}

/// The backend's future for a request message, boxed (with the message it borrows), so
/// that the request's own future, which holds it, stays small.
fn start_work<B: Backend>(
    backend: Rc<B>,
    state: Rc<ClientState>,
    version: ProtocolVersion,
    msg: RequestMessage,
) -> Work {
    // Slow queries are timed here, where the message (to name them) is still at hand.
    use amphora_trace::{check_slow_since, slow_timer};
    match msg {
        RequestMessage::Query(q) => {
            let ask = RowsAsk {
                skip_metadata: q.parameters.skip_metadata,
                metadata_id: None,
            };
            Box::pin(async move {
                let started = slow_timer();
                let r = backend
                    .query(&state, &q.query, query_options(q.parameters))
                    .await;
                check_slow_since(started, || format!("QUERY {}", q.query));
                r.map(|r| Outcome::Result(r, ask))
            })
        }
        RequestMessage::Prepare(p) => Box::pin(async move {
            let started = slow_timer();
            let r = backend
                .prepare(&state, &p.query, p.keyspace.as_deref())
                .await;
            check_slow_since(started, || format!("PREPARE {}", p.query));
            r.map(Outcome::Prepared)
        }),
        RequestMessage::Execute(e) => {
            let ask = rows_ask(&e, version);
            start_execute(backend, state, e.id, query_options(e.parameters), ask)
        }
        RequestMessage::Batch(b) => {
            let (kind, entries, opts) = batch_parts(b);
            let n = entries.len();
            Box::pin(async move {
                let started = slow_timer();
                let r = backend.batch(&state, kind, entries, opts).await;
                check_slow_since(started, || format!("BATCH of {n} statements"));
                r.map(|r| Outcome::Result(r, RowsAsk::default()))
            })
        }
        other => {
            tracing::error!(
                message = message_name(&other),
                "transport: not a request message"
            );
            Box::pin(std::future::ready(Err(QueryError::Server(format!(
                "Unexpected message {}",
                message_name(&other)
            )))))
        }
    }
}

/// Runs the request and answers it; `before_answer` runs just before the response is queued
/// (a trace session is finished there, so a driver that reads it at once finds it).
async fn serve_request<B: Backend>(
    guard: InflightGuard<B>,
    tracing_id: Option<[u8; 16]>,
    work: Work,
    before_answer: impl FnOnce(),
) {
    // The backend's work is boxed (`start_work`): inline it would make this task's
    // future (and so every move of it while spawning and completing the task) as large as
    // the deepest coordinator state machine.
    let (outcome, warnings) = amphora_trace::with_warnings(work).await;
    before_answer();
    answer(guard, tracing_id, outcome, warnings);
}

/// Queues the answer to a request whose work ended with `outcome`.
fn answer<B: Backend>(
    mut guard: InflightGuard<B>,
    tracing_id: Option<[u8; 16]>,
    outcome: Result<Outcome, QueryError>,
    warnings: Vec<String>,
) {
    let conn = guard.conn.clone();
    let (version, stream) = (guard.version, guard.stream);
    let prefix = ResponsePrefix {
        tracing_id,
        warnings: &warnings,
        ..ResponsePrefix::NONE
    };
    match outcome {
        Ok(outcome) => {
            if let Outcome::Result(QueryResult::SetKeyspace(ks), _) = &outcome {
                let old = conn.state.borrow().clone();
                *conn.state.borrow_mut() = Rc::new(ClientState {
                    keyspace: Some(ks.clone()),
                    ..(*old).clone()
                });
            }
            let r = conn.emit(|buf| conn.encode_outcome(buf, version, stream, &prefix, &outcome));
            if let Err(e) = r {
                tracing::error!(error = %e, stream, "transport: cannot encode a result");
                conn.send_error(
                    version,
                    stream,
                    tracing_id,
                    &ErrorResponse::server_error(format!("Cannot encode the result: {e}")),
                );
            }
        }
        Err(e) => conn.send_error_with(
            version,
            stream,
            &prefix,
            &error_map::query_error(&e, conn.local.map(|a| a.ip())),
        ),
    }
    guard.answered = true;
}

fn message_name(m: &RequestMessage) -> &'static str {
    match m {
        RequestMessage::Startup(_) => "STARTUP",
        RequestMessage::Options => "OPTIONS",
        RequestMessage::Query(_) => "QUERY",
        RequestMessage::Prepare(_) => "PREPARE",
        RequestMessage::Execute(_) => "EXECUTE",
        RequestMessage::Batch(_) => "BATCH",
        RequestMessage::Register(_) => "REGISTER",
        RequestMessage::AuthResponse(_) => "AUTH_RESPONSE",
    }
}

/// Splits a SASL PLAIN token into (user, password).
fn sasl_plain(token: &[u8]) -> Option<(String, String)> {
    let mut parts = token.rsplitn(3, |b| *b == 0);
    let password = parts.next()?;
    let user = parts.next()?;
    Some((
        String::from_utf8_lossy(user).into_owned(),
        String::from_utf8_lossy(password).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sasl_plain_tokens() {
        assert_eq!(
            sasl_plain(b"\0cassandra\0secret"),
            Some(("cassandra".to_string(), "secret".to_string()))
        );
        assert_eq!(
            sasl_plain(b"authz\0bob\0pw"),
            Some(("bob".to_string(), "pw".to_string()))
        );
        assert_eq!(sasl_plain(b"nonul"), None);
    }

    /// Queues responses of `size` bytes (counted as responses when `counted`) until an eager
    /// write is due: how many were queued and their bytes, which are then taken out as if
    /// written.
    fn queue_until_due(ob: &mut Outbox, size: usize, counted: bool) -> Option<(usize, usize)> {
        (1..=100_000)
            .find(|_| {
                ob.out.extend_from_slice(&vec![0; size]);
                if counted {
                    ob.response_queued();
                }
                ob.eager_write_due()
            })
            .map(|n| (n, ob.out.split().len()))
    }

    /// The first answers of a burst leave after 16 responses, the next eager write of the
    /// same burst waits for twice as many, and the count starts again once the writer task
    /// has sent the rest; enough queued bytes call for a write whatever the count.
    #[test]
    fn eager_writes_come_sooner_at_the_start_of_a_burst() {
        let mut ob = Outbox::new();
        let due_after = |ob: &mut Outbox| queue_until_due(ob, 13, true).map(|(n, _)| n);
        assert_eq!(due_after(&mut ob), Some(EAGER_FLUSH_RESPONSES));
        ob.written(true);
        assert_eq!(due_after(&mut ob), Some(2 * EAGER_FLUSH_RESPONSES));
        ob.written(true);
        assert_eq!(due_after(&mut ob), Some(4 * EAGER_FLUSH_RESPONSES));
        ob.written(false);
        assert_eq!(due_after(&mut ob), Some(EAGER_FLUSH_RESPONSES));
        ob.written(false);
        ob.out.extend_from_slice(&[0; EAGER_FLUSH_BYTES]);
        ob.response_queued();
        assert!(ob.eager_write_due(), "one large response");
    }

    /// Bytes double within a burst as well (single-row reads of ~250 bytes), up to the cap,
    /// and start from 4 KiB again once the writer task has sent the rest.
    #[test]
    fn eager_writes_by_bytes_double_within_a_burst() {
        let mut ob = Outbox::new();
        let bytes_due = |ob: &mut Outbox| queue_until_due(ob, 250, false).map(|(_, b)| b);
        assert_eq!(bytes_due(&mut ob), Some(4_250));
        ob.written(true);
        assert_eq!(bytes_due(&mut ob), Some(8_250));
        ob.written(true);
        assert_eq!(bytes_due(&mut ob), Some(16_500));
        for _ in 0..8 {
            ob.written(true);
        }
        assert_eq!(
            bytes_due(&mut ob),
            Some(EAGER_FLUSH_BYTES_MAX.div_ceil(250) * 250)
        );
        ob.written(false);
        assert_eq!(bytes_due(&mut ob), Some(4_250));
    }

    #[test]
    fn stream_set_detects_duplicates() {
        let mut s = StreamSet::new();
        for id in [0i16, 1, 63, 64, -1, i16::MIN, i16::MAX] {
            assert!(s.insert(id), "{id}");
            assert!(!s.insert(id), "{id} twice");
        }
        s.remove(64);
        assert!(s.insert(64));
    }
}
