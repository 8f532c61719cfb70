//! Transport load: prepared single-row reads over ONE connection with 128 requests in flight,
//! against a fake coordinator that answers a cached `standard1` row (key + five 34-byte blob
//! columns `C0`..`C4`), so only the transport (socket, decode, dispatch, encode, writer) is
//! measured. The target: ≥ 200,000 requests/s with the server on one core.
//!
//!     cargo bench -p amphora-server --bench transport_load            # 10 s run
//!     cargo bench -p amphora-server --bench transport_load -- 30      # 30 s run
//!
//! Without `--bench` (e.g. `cargo test --benches`) it runs for a fraction of a second as a
//! smoke test. The shard is pinned to core 0; the client runs on another thread.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use amphora_coordinator::{
    ClientState, NodeEvent, PreparedInfo, QueryError, QueryOptions, QueryResult, ResultColumn,
    ResultRows,
};
use amphora_protocol::{DEFAULT_MAX_FRAME_SIZE, Opcode, decode_envelope};
use amphora_rt::RtConfig;
use amphora_server::transport::{
    Backend, BatchEntry, BatchKind, NodeFacts, TransportConfig, start_listeners_with,
};
use amphora_types::CqlType;
use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast;

const IN_FLIGHT: usize = 128;
const PREPARED_ID: &[u8] = b"0123456789abcdef";

thread_local! {
    static ROW: (Arc<Vec<ResultColumn>>, Vec<Option<Bytes>>) = standard1_row();
}

fn standard1_row() -> (Arc<Vec<ResultColumn>>, Vec<Option<Bytes>>) {
    let col = |name: &str| ResultColumn {
        keyspace: "keyspace1".into(),
        table: "standard1".into(),
        name: name.into(),
        ty: CqlType::Blob,
    };
    let cols = Arc::new(vec![
        col("key"),
        col("C0"),
        col("C1"),
        col("C2"),
        col("C3"),
        col("C4"),
    ]);
    let mut cells = vec![Some(Bytes::from_static(b"0x4b343050"))];
    for i in 0..5u8 {
        cells.push(Some(Bytes::from(vec![b'a' + i; 34])));
    }
    (cols, cells)
}

struct CachedRow;

impl Backend for CachedRow {
    fn node_facts(&self) -> NodeFacts {
        NodeFacts {
            host_id: [7; 16],
            nr_shards: 1,
            ignore_msb: 12,
        }
    }

    fn events(&self) -> broadcast::Receiver<NodeEvent> {
        broadcast::channel(1).1
    }

    async fn query(
        &self,
        _: &ClientState,
        _: &str,
        _: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        Ok(QueryResult::Void)
    }

    async fn prepare(
        &self,
        _: &ClientState,
        _: &str,
        _: Option<&str>,
    ) -> Result<PreparedInfo, QueryError> {
        let (cols, _) = ROW.with(|r| r.clone());
        Ok(PreparedInfo {
            id: Bytes::from_static(PREPARED_ID),
            result_metadata_id: Bytes::from_static(b"rm"),
            bind_columns: Arc::new(vec![cols[0].clone()]),
            pk_indexes: vec![0],
            result_columns: cols,
            is_lwt: false,
        })
    }

    async fn execute(
        &self,
        _: &ClientState,
        _: &[u8],
        opts: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        let (columns, cells) = ROW.with(|r| r.clone());
        Ok(QueryResult::Rows(ResultRows {
            columns,
            cells,
            row_count: 1,
            paging_state: None,
            no_metadata: opts.skip_metadata,
        }))
    }

    async fn batch(
        &self,
        _: &ClientState,
        _: BatchKind,
        _: Vec<BatchEntry>,
        _: QueryOptions,
    ) -> Result<QueryResult, QueryError> {
        Ok(QueryResult::Void)
    }
}

fn backend() -> Rc<CachedRow> {
    Rc::new(CachedRow)
}

fn envelope(out: &mut BytesMut, stream: i16, opcode: Opcode, body: &[u8]) {
    out.put_u8(4);
    out.put_u8(0);
    out.put_i16(stream);
    out.put_u8(opcode as u8);
    out.put_i32(body.len() as i32);
    out.put_slice(body);
}

fn execute_body() -> BytesMut {
    let mut b = BytesMut::new();
    b.put_u16(PREPARED_ID.len() as u16);
    b.put_slice(PREPARED_ID);
    b.put_u16(0x000A); // LOCAL_ONE
    b.put_u8(0x01 | 0x02); // values, skip metadata
    b.put_u16(1);
    b.put_i32(10);
    b.put_slice(b"0x4b343050");
    b
}

struct Report {
    requests: u64,
    elapsed: Duration,
    latencies_us: Vec<u32>,
}

async fn client(addr: std::net::SocketAddr, warmup: Duration, run: Duration) -> Report {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let mut out = BytesMut::new();
    let mut startup = BytesMut::new();
    startup.put_u16(1);
    for v in ["CQL_VERSION", "3.0.0"] {
        startup.put_u16(v.len() as u16);
        startup.put_slice(v.as_bytes());
    }
    envelope(&mut out, 0, Opcode::Startup, &startup);
    let mut prepare = BytesMut::new();
    let q = "SELECT * FROM keyspace1.standard1 WHERE key = ?";
    prepare.put_i32(q.len() as i32);
    prepare.put_slice(q.as_bytes());
    envelope(&mut out, 1, Opcode::Prepare, &prepare);
    s.write_all(&out).await.expect("write");
    let mut rbuf = BytesMut::with_capacity(1 << 20);
    let mut handshake = 0;
    while handshake < 2 {
        s.read_buf(&mut rbuf).await.expect("read");
        while let Some(env) = decode_envelope(&mut rbuf, DEFAULT_MAX_FRAME_SIZE).expect("frame") {
            assert!(
                matches!(env.opcode, Opcode::Ready | Opcode::Result),
                "{env:?}"
            );
            handshake += 1;
        }
    }
    let body = execute_body();
    let mut sent_at = vec![Instant::now(); IN_FLIGHT];
    out.clear();
    for (stream, at) in sent_at.iter_mut().enumerate() {
        envelope(&mut out, stream as i16, Opcode::Execute, &body);
        *at = Instant::now();
    }
    s.write_all(&out).await.expect("write");
    let start = Instant::now();
    let mut measuring_since = None;
    let mut requests = 0u64;
    let mut latencies_us = Vec::with_capacity(4 << 20);
    loop {
        let now = Instant::now();
        if measuring_since.is_none() && now - start >= warmup {
            measuring_since = Some(now);
        }
        if let Some(t) = measuring_since
            && now - t >= run
        {
            return Report {
                requests,
                elapsed: now - t,
                latencies_us,
            };
        }
        if s.read_buf(&mut rbuf).await.expect("read") == 0 {
            panic!("server closed the connection");
        }
        out.clear();
        let now = Instant::now();
        while let Some(env) = decode_envelope(&mut rbuf, DEFAULT_MAX_FRAME_SIZE).expect("frame") {
            assert_eq!(env.opcode, Opcode::Result, "{env:?}");
            let slot = env.stream as usize;
            if measuring_since.is_some() {
                requests += 1;
                let us = (now - sent_at[slot]).as_micros().min(u128::from(u32::MAX)) as u32;
                latencies_us.push(us);
            }
            envelope(&mut out, env.stream, Opcode::Execute, &body);
            sent_at[slot] = now;
        }
        if rbuf.capacity() - rbuf.len() < 64 * 1024 {
            rbuf.reserve(1 << 20);
        }
        s.write_all(&out).await.expect("write");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let seconds: u64 = args
        .iter()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10);
    let (warmup, run) = if bench {
        (Duration::from_secs(2), Duration::from_secs(seconds))
    } else {
        (Duration::from_millis(100), Duration::from_millis(300))
    };
    let rt = amphora_rt::start(
        RtConfig {
            nr_shards: 1,
            pin: true,
        },
        |_| async {},
    )
    .expect("shards");
    let shards = rt.shards().clone();
    let listeners = start_listeners_with(
        TransportConfig {
            native_port: 0,
            shard_aware_port: 0,
            ..TransportConfig::default()
        },
        shards.clone(),
        backend,
    )
    .expect("listen");
    let addr = listeners.native_addr();
    let report = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("client runtime")
            .block_on(client(addr, warmup, run))
    })
    .join()
    .expect("client");
    let mut lat = report.latencies_us;
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let rate = report.requests as f64 / report.elapsed.as_secs_f64();
    println!(
        "transport_load: prepared single-row reads, 1 connection, {IN_FLIGHT} in flight, 1 shard: \
         {rate:.0} requests/s over {:.1} s; latency p50 {} us, p99 {} us, p99.9 {} us",
        report.elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        pct(0.999)
    );
    drop(listeners);
    shards.close();
    rt.join();
}
