//! A lean CQL connection for the hot path of the predefined commands (`write`, `read`,
//! `mixed` of them) against one node: EXECUTE requests of statements the driver prepared,
//! pipelined on one TCP connection of the stress tool's own (protocol v4, no compression).
//!
//! Why: the driver costs ~4 µs of client CPU per read (its load-balancing plan, tracing
//! spans, moves of large futures: `memmove` alone was 21% of the client's profile), more than
//! the server spends. On one core the load generator then saturates first, and make bench
//! measures the client (docs/benchmarks.md, "The load generator: a spinning pacer and a
//! pipelined connection"). cassandra-stress has the same kind
//! of shortcut (`-mode simplenative`). `-mode driver` turns this path off.
//!
//! How: every request appends its frame to a shared output buffer; a writer task sends
//! whatever accumulated in one `write` per turn of the event loop (with `-mode coalesce=T`
//! at most once per T: see [`Pipeline::connect`]); a reader task splits the responses off
//! its receive buffer and hands each to the request waiting on its stream id.
//! Statements are prepared by the driver session (the node's prepared cache is shared by
//! its connections), requests ask for no result metadata (`SKIP_METADATA`), and timestamps are
//! the server's, as with the driver's defaults. There is no reconnection: once the connection
//! breaks every request fails with the reason.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use amphora_protocol::wire::{Reader, write_string_lossy};
use amphora_protocol::{ColumnType, DEFAULT_MAX_FRAME_SIZE, Flags, Opcode, decode_envelope};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// Stream ids in use at most at once (the stress tool keeps `threads` requests in flight,
/// plus the ones a timeout abandoned until their answers arrive).
const STREAMS: usize = 8192;
/// A batch this large is sent at once, whatever the send interval.
const COALESCE_BYTES: usize = 16 * 1024;
/// Protocol v4, request direction.
const VERSION: u8 = 0x04;
/// EXECUTE flags: values follow; no result metadata in the answer.
const FLAG_VALUES: u8 = 0x01;
const FLAG_SKIP_METADATA: u8 = 0x02;
/// RESULT kinds and rows-metadata flags (spec §4.2.5).
const RESULT_ROWS: i32 = 0x0002;
const META_GLOBAL_TABLES_SPEC: i32 = 0x0001;
const META_HAS_MORE_PAGES: i32 = 0x0002;
const META_NO_METADATA: i32 = 0x0004;

/// One pipelined connection. Cheap to share: requests lock its state for a few appends.
pub struct Pipeline {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// See [`Pipeline::connect`]; zero sends every turn of the event loop.
    send_interval: Duration,
}

#[derive(Default)]
struct Slot {
    waker: Option<Waker>,
    response: Option<(Opcode, Bytes)>,
    /// The request was dropped (timed out) before its answer came: free the id on arrival.
    abandoned: bool,
}

struct State {
    /// Frames not sent yet.
    out: Vec<u8>,
    writer: Option<Waker>,
    slots: Vec<Slot>,
    free: Vec<i16>,
    /// Why the connection is unusable, once it is.
    broken: Option<String>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the connection broken and wakes everything waiting on it.
    fn fail(&self, reason: String) {
        let mut wake = Vec::new();
        {
            let mut st = self.lock();
            if st.broken.is_none() {
                st.broken = Some(reason);
            }
            wake.extend(st.writer.take());
            wake.extend(st.slots.iter_mut().filter_map(|s| s.waker.take()));
        }
        wake.into_iter().for_each(Waker::wake);
    }
}

/// A RESULT answer's body (after any tracing id, warnings and custom payload); errors come
/// back from [`Pipeline::execute`] as text instead.
pub struct Answer {
    body: Bytes,
}

impl Pipeline {
    /// Connects to `addr` (`host:port`) and does the STARTUP handshake. With a non-zero
    /// `send_interval` the writer sends at most once per that long unless a batch reaches
    /// [`COALESCE_BYTES`] (the first request after a quiet spell leaves at once), as drivers
    /// coalesce their writes. Off by default: at 90% of the pair's maximum it lowered the
    /// shard's CPU per read ~8% but not the p99, which a session before had also found
    /// (docs/benchmarks.md, "Fewer, larger sends from the load generator, again").
    pub async fn connect(addr: &str, send_interval: Duration) -> Result<Self, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("TCP_NODELAY on {addr}: {e}"))?;
        let (r, w) = stream.into_split();
        let mut slots = Vec::with_capacity(STREAMS);
        slots.resize_with(STREAMS, Slot::default);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                out: Vec::with_capacity(64 * 1024),
                writer: None,
                slots,
                // Popped from the back: low ids first.
                free: (0..STREAMS as i16).rev().collect(),
                broken: None,
            }),
            send_interval,
        });
        tokio::spawn(writer(shared.clone(), w));
        tokio::spawn(reader(shared.clone(), r));
        let p = Pipeline { shared };
        // STARTUP {CQL_VERSION: 3.0.0}: a [string map] of one entry.
        let mut body = BytesMut::with_capacity(32);
        body.extend_from_slice(&1u16.to_be_bytes());
        write_string_lossy(&mut body, "CQL_VERSION");
        write_string_lossy(&mut body, "3.0.0");
        let (op, answer) = p.request(Opcode::Startup, &body).await?;
        match op {
            Opcode::Ready => Ok(p),
            Opcode::Authenticate => Err(format!(
                "{addr} asks for authentication, which the pipelined connection does not do \
                 (use -mode driver)"
            )),
            Opcode::Error => Err(error_text(answer)),
            other => Err(format!("{addr} answered STARTUP with {other:?}")),
        }
    }

    /// Executes the prepared statement `id` with `values` at `consistency` (the protocol's
    /// code); the RESULT on success, the server's error as text otherwise.
    pub async fn execute(
        &self,
        id: &[u8],
        consistency: u16,
        values: &[&[u8]],
    ) -> Result<Answer, String> {
        let len = 2 + id.len() + 2 + 1 + 2 + values.iter().map(|v| 4 + v.len()).sum::<usize>();
        let pending = self.send(Opcode::Execute, len, |out| {
            out.extend_from_slice(&(id.len() as u16).to_be_bytes());
            out.extend_from_slice(id);
            out.extend_from_slice(&consistency.to_be_bytes());
            out.push(FLAG_VALUES | FLAG_SKIP_METADATA);
            out.extend_from_slice(&(values.len() as u16).to_be_bytes());
            for v in values {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
        })?;
        match pending.await? {
            (Opcode::Result, body) => Ok(Answer { body }),
            (Opcode::Error, body) => Err(error_text(body)),
            (other, _) => Err(format!("EXECUTE answered with {other:?}")),
        }
    }

    async fn request(&self, op: Opcode, body: &[u8]) -> Result<(Opcode, Bytes), String> {
        self.send(op, body.len(), |out| out.extend_from_slice(body))?
            .await
    }

    /// Queues one frame of `body_len` bytes, written by `body`, on a free stream id.
    fn send(
        &self,
        op: Opcode,
        body_len: usize,
        body: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Pending<'_>, String> {
        let len = i32::try_from(body_len).map_err(|_| "request too large".to_string())?;
        let (stream, writer) = {
            let mut st = self.shared.lock();
            if let Some(e) = &st.broken {
                return Err(e.clone());
            }
            let stream = st
                .free
                .pop()
                .ok_or_else(|| format!("all {STREAMS} stream ids in use"))?;
            let [s0, s1] = stream.to_be_bytes();
            let [l0, l1, l2, l3] = len.to_be_bytes();
            let out = &mut st.out;
            out.extend_from_slice(&[VERSION, 0, s0, s1, op as u8, l0, l1, l2, l3]);
            body(out);
            (stream, st.writer.take())
        };
        if let Some(w) = writer {
            w.wake();
        }
        Ok(Pending {
            shared: &self.shared,
            stream,
            done: false,
        })
    }
}

/// A request on the wire, waiting for the answer on its stream id.
struct Pending<'a> {
    shared: &'a Shared,
    stream: i16,
    done: bool,
}

impl Future for Pending<'_> {
    type Output = Result<(Opcode, Bytes), String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let stream = self.stream;
        let outcome = {
            let mut guard = self.shared.lock();
            let st = &mut *guard;
            let slot = &mut st.slots[stream as usize];
            if let Some(r) = slot.response.take() {
                st.free.push(stream);
                Some(Ok(r))
            } else if let Some(e) = &st.broken {
                Some(Err(e.clone()))
            } else {
                match &slot.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => slot.waker = Some(cx.waker().clone()),
                }
                None
            }
        };
        match outcome {
            Some(r) => {
                self.done = true;
                Poll::Ready(r)
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut guard = self.shared.lock();
        let st = &mut *guard;
        let slot = &mut st.slots[self.stream as usize];
        slot.waker = None;
        if slot.response.take().is_some() {
            st.free.push(self.stream);
        } else {
            slot.abandoned = true;
        }
    }
}

async fn writer(shared: Arc<Shared>, mut w: OwnedWriteHalf) {
    let mut spare = Vec::with_capacity(64 * 1024);
    let mut last_send: Option<Instant> = None;
    loop {
        let batch = std::future::poll_fn(|cx| {
            let mut st = shared.lock();
            if st.broken.is_some() {
                return Poll::Ready(None);
            }
            if st.out.is_empty() {
                st.writer = Some(cx.waker().clone());
                return Poll::Pending;
            }
            // Too soon after the last send: let more requests join this batch. The task
            // yields rather than arming a timer (tokio's wheel ticks in milliseconds); at
            // the rates where this holds a batch the pacer spins the event loop anyway.
            if st.out.len() < COALESCE_BYTES
                && last_send.is_some_and(|t| t.elapsed() < shared.send_interval)
            {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(Some(std::mem::replace(
                &mut st.out,
                std::mem::take(&mut spare),
            )))
        })
        .await;
        let Some(mut batch) = batch else { return };
        if !shared.send_interval.is_zero() {
            last_send = Some(Instant::now());
        }
        if let Err(e) = w.write_all(&batch).await {
            shared.fail(format!("writing to the server: {e}"));
            return;
        }
        batch.clear();
        spare = batch;
    }
}

async fn reader(shared: Arc<Shared>, mut r: OwnedReadHalf) {
    let mut buf = BytesMut::with_capacity(256 * 1024);
    let mut wake = Vec::with_capacity(256);
    loop {
        if buf.capacity() - buf.len() < 32 * 1024 {
            buf.reserve(256 * 1024);
        }
        match r.read_buf(&mut buf).await {
            Ok(0) => return shared.fail("the server closed the connection".into()),
            Ok(_) => {}
            Err(e) => return shared.fail(format!("reading from the server: {e}")),
        }
        let bad_frame = {
            let mut guard = shared.lock();
            let st = &mut *guard;
            loop {
                let env = match decode_envelope(&mut buf, DEFAULT_MAX_FRAME_SIZE) {
                    Ok(Some(env)) => env,
                    Ok(None) => break None,
                    Err(e) => break Some(e),
                };
                // Negative ids are server events; the connection registers for none.
                let Some(slot) = usize::try_from(env.stream)
                    .ok()
                    .and_then(|i| st.slots.get_mut(i))
                else {
                    continue;
                };
                if slot.abandoned {
                    slot.abandoned = false;
                    st.free.push(env.stream);
                    continue;
                }
                let body = match strip_prefix(env.flags, env.body) {
                    Ok(b) => (env.opcode, b),
                    Err(e) => (Opcode::Error, error_body(&e)),
                };
                slot.response = Some(body);
                wake.extend(slot.waker.take());
            }
        };
        if let Some(e) = bad_frame {
            wake.drain(..).for_each(Waker::wake);
            return shared.fail(format!("bad frame from the server: {e}"));
        }
        wake.drain(..).for_each(Waker::wake);
    }
}

/// The body after the optional tracing id, warnings and custom payload (spec §2.2, in that
/// order).
fn strip_prefix(flags: Flags, body: Bytes) -> Result<Bytes, String> {
    if flags.0 & (Flags::TRACING | Flags::WARNING | Flags::CUSTOM_PAYLOAD) == 0 {
        return Ok(body);
    }
    let mut r = Reader::new(body);
    let bad = |e| format!("bad response prefix: {e}");
    if flags.contains(Flags::TRACING) {
        r.skip(16).map_err(bad)?;
    }
    if flags.contains(Flags::WARNING) {
        r.read_string_list().map_err(bad)?;
    }
    if flags.contains(Flags::CUSTOM_PAYLOAD) {
        let n = r.read_u16().map_err(bad)?;
        for _ in 0..n {
            r.read_string().map_err(bad)?;
            r.read_bytes().map_err(bad)?;
        }
    }
    let at = r.body().len() - r.remaining();
    Ok(r.into_body().slice(at..))
}

/// An ERROR body carrying `text` (code 0: server error), for answers that could not be read.
fn error_body(text: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(6 + text.len());
    b.extend_from_slice(&0i32.to_be_bytes());
    write_string_lossy(&mut b, text);
    b.freeze()
}

/// "server error 0xCODE: message" from an ERROR body.
fn error_text(body: Bytes) -> String {
    let mut r = Reader::new(body);
    match (r.read_i32(), r.read_string()) {
        (Ok(code), Ok(msg)) => format!("server error 0x{code:04x}: {msg}"),
        _ => "server error (unreadable)".to_string(),
    }
}

impl Answer {
    /// The rows of a RESULT Rows answer, each a list of cells in the statement's result column
    /// order (`None`: null).
    pub fn rows(self) -> Result<Rows, String> {
        let bad = |e| format!("bad RESULT: {e}");
        let mut r = Reader::new(self.body);
        let kind = r.read_i32().map_err(bad)?;
        if kind != RESULT_ROWS {
            return Err(format!("expected a Rows result, got kind {kind}"));
        }
        let flags = r.read_i32().map_err(bad)?;
        let columns = usize::try_from(r.read_i32().map_err(bad)?)
            .map_err(|_| "negative column count".to_string())?;
        if flags & META_HAS_MORE_PAGES != 0 {
            r.read_bytes().map_err(bad)?;
        }
        if flags & META_NO_METADATA == 0 {
            let global = flags & META_GLOBAL_TABLES_SPEC != 0;
            if global {
                r.read_string().map_err(bad)?;
                r.read_string().map_err(bad)?;
            }
            for _ in 0..columns {
                if !global {
                    r.read_string().map_err(bad)?;
                    r.read_string().map_err(bad)?;
                }
                r.read_string().map_err(bad)?;
                ColumnType::decode(&mut r).map_err(bad)?;
            }
        }
        let count = usize::try_from(r.read_i32().map_err(bad)?)
            .map_err(|_| "negative row count".to_string())?;
        Ok(Rows {
            reader: r,
            columns,
            count,
        })
    }
}

/// The rows of a RESULT, read cell by cell.
pub struct Rows {
    reader: Reader,
    columns: usize,
    count: usize,
}

impl Rows {
    pub fn count(&self) -> usize {
        self.count
    }

    /// The cells of the first row (empty when there is none).
    pub fn first_row(mut self) -> Result<Vec<Option<Bytes>>, String> {
        if self.count == 0 {
            return Ok(Vec::new());
        }
        (0..self.columns)
            .map(|_| {
                self.reader
                    .read_bytes()
                    .map_err(|e| format!("bad row: {e}"))
            })
            .collect()
    }
}
