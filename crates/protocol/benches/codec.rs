//! Hot-path codec costs: decode an EXECUTE with six values (cassandra-stress `standard1`
//! write shape) and encode a one-row, six-column Rows response (its read shape).

use std::hint::black_box;

use amphora_protocol::{
    ColumnSpec, ColumnType, DEFAULT_MAX_FRAME_SIZE, DecodeOptions, EncodedColumns, ProtocolVersion,
    RequestMessage, ResponsePrefix, RowsMetadata, RowsWriter, decode_envelope,
    decode_request_owned,
};
use bytes::{BufMut, BytesMut};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

const PIPELINED: usize = 64;

fn execute_frame() -> BytesMut {
    let mut body = BytesMut::new();
    body.put_u16(16);
    body.put_slice(&[0xAB; 16]); // prepared id
    body.put_u16(0x000A); // LOCAL_ONE
    body.put_u8(0x01 | 0x02 | 0x04 | 0x20); // values, skip metadata, page size, timestamp
    body.put_u16(6);
    body.put_i32(10);
    body.put_slice(b"key0000001");
    for _ in 0..5 {
        body.put_i32(34);
        body.put_slice(&[0x5A; 34]);
    }
    body.put_i32(5000);
    body.put_i64(1_700_000_000_000_000);
    let mut frame = BytesMut::new();
    frame.put_slice(&[0x04, 0x00, 0x00, 0x01, 0x0A]);
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    frame
}

fn columns() -> Vec<ColumnSpec> {
    ["key", "C0", "C1", "C2", "C3", "C4"]
        .iter()
        .map(|name| ColumnSpec {
            keyspace: "keyspace1".into(),
            table: "standard1".into(),
            name: (*name).into(),
            ty: ColumnType::Blob,
        })
        .collect()
}

fn decode_execute(input: &mut BytesMut, opts: &DecodeOptions) -> usize {
    let env = decode_envelope(input, DEFAULT_MAX_FRAME_SIZE)
        .ok()
        .flatten();
    let Some(env) = env else { return 0 };
    match decode_request_owned(env, opts) {
        Ok(r) => match r.message {
            RequestMessage::Execute(e) => e.parameters.values.len(),
            _ => 0,
        },
        Err(_) => 0,
    }
}

/// How the Rows metadata is produced.
#[derive(Clone, Copy)]
enum Meta<'a> {
    /// Encoded from `ColumnSpec`s per response.
    Full(&'a [ColumnSpec]),
    /// Column specs encoded once per prepared statement.
    Cached(&'a EncodedColumns),
    /// The client sent Skip_metadata (drivers do for prepared statements).
    Skipped(&'a [ColumnSpec]),
}

fn encode_rows(out: &mut BytesMut, meta: Meta<'_>) {
    out.clear();
    let meta = match meta {
        Meta::Full(cols) => RowsMetadata::new(cols),
        Meta::Cached(enc) => RowsMetadata::with_encoded(enc),
        Meta::Skipped(cols) => RowsMetadata::skipped(cols),
    };
    let Ok(mut w) = RowsWriter::begin(out, ProtocolVersion::V4, 1, &ResponsePrefix::NONE, &meta)
    else {
        return;
    };
    let _ = w.push_value(Some(b"key0000001"));
    for _ in 0..5 {
        let _ = w.push_value(Some(&[0x5A; 34]));
    }
    let _ = w.finish();
}

fn bench(c: &mut Criterion) {
    let frame = execute_frame();
    let opts = DecodeOptions::default();
    let cols = columns();
    let encoded = EncodedColumns::new(ProtocolVersion::V4, &cols).expect("encode columns");
    assert_eq!(decode_execute(&mut frame.clone(), &opts), 6);

    c.bench_function("decode_execute_6_values", |b| {
        b.iter_batched_ref(
            || frame.clone(),
            |input| black_box(decode_execute(input, &opts)),
            BatchSize::SmallInput,
        )
    });
    // A read buffer holding many pipelined requests, as under load: the buffer's refcount
    // promotion is paid once per buffer, not once per envelope.
    let mut pipelined = BytesMut::new();
    for _ in 0..PIPELINED {
        pipelined.extend_from_slice(&frame);
    }
    let mut group = c.benchmark_group("pipelined");
    group.throughput(Throughput::Elements(PIPELINED as u64));
    group.bench_function("decode_execute_6_values_x64", |b| {
        b.iter_batched_ref(
            || pipelined.clone(),
            |input| {
                let mut n = 0;
                for _ in 0..PIPELINED {
                    n += decode_execute(input, &opts);
                }
                black_box(n)
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
    let mut out = BytesMut::with_capacity(4096);
    for (name, meta) in [
        ("encode_rows_1x6_full_metadata", Meta::Full(&cols)),
        ("encode_rows_1x6_cached_metadata", Meta::Cached(&encoded)),
        ("encode_rows_1x6_no_metadata", Meta::Skipped(&cols)),
    ] {
        c.bench_function(name, |b| {
            b.iter(|| {
                encode_rows(&mut out, meta);
                black_box(out.len())
            })
        });
    }
    for (name, meta) in [
        ("execute_then_rows_cached_metadata", Meta::Cached(&encoded)),
        ("execute_then_rows_no_metadata", Meta::Skipped(&cols)),
    ] {
        c.bench_function(name, |b| {
            b.iter_batched_ref(
                || frame.clone(),
                |input| {
                    black_box(decode_execute(input, &opts));
                    encode_rows(&mut out, meta);
                    black_box(out.len())
                },
                BatchSize::SmallInput,
            )
        });
    }
}

/// The same work as the server's read loop does it per request: the socket read appends
/// the frame to the connection's long-lived read buffer (whose storage is already shared
/// after its first split, so splitting an envelope off costs a reference count and no
/// allocation), then decode, then encode the answer. Unlike the benchmarks above (a fresh
/// buffer per request, built outside the timing), this includes the copy of the read and
/// excludes the one-time promotion of a new read buffer.
fn bench_read_loop(c: &mut Criterion) {
    let frame = execute_frame();
    let opts = DecodeOptions::default();
    let cols = columns();
    let encoded = EncodedColumns::new(ProtocolVersion::V4, &cols).expect("encode columns");
    let mut group = c.benchmark_group("read_loop");
    let mut rbuf = BytesMut::with_capacity(64 * 1024);
    group.bench_function("decode_execute_6_values", |b| {
        b.iter(|| {
            rbuf.extend_from_slice(&frame);
            black_box(decode_execute(&mut rbuf, &opts))
        })
    });
    let mut out = BytesMut::with_capacity(4096);
    for (name, meta) in [
        ("execute_then_rows_cached_metadata", Meta::Cached(&encoded)),
        ("execute_then_rows_no_metadata", Meta::Skipped(&cols)),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                rbuf.extend_from_slice(&frame);
                black_box(decode_execute(&mut rbuf, &opts));
                encode_rows(&mut out, meta);
                black_box(out.len())
            })
        });
    }
    assert!(rbuf.is_empty(), "every frame was decoded");
    group.finish();
}

criterion_group!(benches, bench, bench_read_loop);
criterion_main!(benches);
