//! The codec benchmark's decode + encode loop without criterion, for instruction counts:
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect='codec_loop::step'
//! target/release/examples/codec_loop 10000` (instructions per request = total / N).
//! With a second argument `read-loop`, each frame is appended to one long-lived read buffer
//! before its step (as the server's read loop does; the append is outside `step`) instead
//! of each request having a fresh buffer of its own.

use std::hint::black_box;

use amphora_protocol::{
    ColumnSpec, ColumnType, DEFAULT_MAX_FRAME_SIZE, DecodeOptions, EncodedColumns, ProtocolVersion,
    RequestMessage, ResponsePrefix, RowsMetadata, RowsWriter, decode_envelope,
    decode_request_owned,
};
use bytes::{BufMut, BytesMut};

fn execute_frame() -> BytesMut {
    let mut body = BytesMut::new();
    body.put_u16(16);
    body.put_slice(&[0xAB; 16]);
    body.put_u16(0x000A);
    body.put_u8(0x01 | 0x02 | 0x04 | 0x20);
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

#[inline(never)]
fn step(
    input: &mut BytesMut,
    opts: &DecodeOptions,
    out: &mut BytesMut,
    enc: &EncodedColumns,
) -> usize {
    let n = match decode_envelope(input, DEFAULT_MAX_FRAME_SIZE)
        .ok()
        .flatten()
    {
        Some(env) => match decode_request_owned(env, opts) {
            Ok(r) => match r.message {
                RequestMessage::Execute(e) => e.parameters.values.len(),
                _ => 0,
            },
            Err(_) => 0,
        },
        None => 0,
    };
    out.clear();
    let meta = RowsMetadata::with_encoded(enc);
    if let Ok(mut w) = RowsWriter::begin(out, ProtocolVersion::V4, 1, &ResponsePrefix::NONE, &meta)
    {
        let _ = w.push_value(Some(b"key0000001"));
        for _ in 0..5 {
            let _ = w.push_value(Some(&[0x5A; 34]));
        }
        let _ = w.finish();
    }
    n + out.len()
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let frame = execute_frame();
    let opts = DecodeOptions::default();
    let cols: Vec<ColumnSpec> = ["key", "C0", "C1", "C2", "C3", "C4"]
        .iter()
        .map(|name| ColumnSpec {
            keyspace: "keyspace1".into(),
            table: "standard1".into(),
            name: (*name).into(),
            ty: ColumnType::Blob,
        })
        .collect();
    let Ok(enc) = EncodedColumns::new(ProtocolVersion::V4, &cols) else {
        return;
    };
    let mut out = BytesMut::with_capacity(4096);
    let mut total = 0;
    if std::env::args().nth(2).as_deref() == Some("read-loop") {
        let mut rbuf = BytesMut::with_capacity(64 * 1024);
        for _ in 0..n {
            rbuf.extend_from_slice(&frame);
            total += step(&mut rbuf, &opts, &mut out, &enc);
        }
    } else {
        let mut inputs: Vec<BytesMut> = (0..n).map(|_| frame.clone()).collect();
        for input in &mut inputs {
            total += step(input, &opts, &mut out, &enc);
        }
    }
    black_box(total);
}
