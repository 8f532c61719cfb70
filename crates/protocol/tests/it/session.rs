//! A client's bytes in, the server's bytes out: handshake, v4 compression, v5 framing.

use amphora_protocol::wire::Reader;
use amphora_protocol::{
    ColumnSpec, ColumnType, Compression, DEFAULT_MAX_FRAME_SIZE, DecodeOptions, Envelope,
    FrameError, Opcode, ProtocolVersion, RequestMessage, Response, ResponsePrefix, RowsMetadata,
    RowsWriter, SegmentCompression, SegmentDecoder, SegmentEncoder, compress_envelopes,
    decode_envelope, decode_request, encode_frame_error, encode_response,
};
use bytes::{BufMut, BytesMut};

fn request(version: u8, flags: u8, stream: i16, opcode: Opcode, body: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_u8(version);
    b.put_u8(flags);
    b.put_i16(stream);
    b.put_u8(opcode as u8);
    b.put_i32(body.len() as i32);
    b.put_slice(body);
    b
}

fn startup_body(compression: Option<&str>) -> BytesMut {
    let mut b = BytesMut::new();
    let mut opts = vec![("CQL_VERSION", "3.0.0")];
    if let Some(c) = compression {
        opts.push(("COMPRESSION", c));
    }
    b.put_u16(opts.len() as u16);
    for (k, v) in opts {
        b.put_u16(k.len() as u16);
        b.put_slice(k.as_bytes());
        b.put_u16(v.len() as u16);
        b.put_slice(v.as_bytes());
    }
    b
}

fn query_body(q: &str) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_i32(q.len() as i32);
    b.put_slice(q.as_bytes());
    b.put_u16(0x0001);
    b.put_u32(0); // v5 flags
    b
}

fn one_envelope(buf: &mut BytesMut) -> Envelope {
    decode_envelope(buf, DEFAULT_MAX_FRAME_SIZE)
        .expect("valid envelope")
        .expect("whole envelope")
}

#[test]
fn dse_version_is_answered_with_our_max_version() {
    let mut input = request(0x42, 0, 0, Opcode::Options, b"");
    let err = decode_envelope(&mut input, DEFAULT_MAX_FRAME_SIZE).expect_err("unsupported");
    assert_eq!(
        err,
        FrameError::UnsupportedVersion {
            version: 0x42,
            stream: 0
        }
    );
    let mut out = BytesMut::new();
    encode_frame_error(&mut out, &err);
    let env = one_envelope(&mut out);
    assert_eq!(env.version, ProtocolVersion::V5);
    assert_eq!(env.opcode, Opcode::Error);
    let mut r = Reader::new(env.body);
    assert_eq!(r.read_i32().ok(), Some(0x000A));
    let msg = r.read_string().expect("message");
    assert!(
        msg.contains("Invalid or unsupported protocol version (66)"),
        "{msg}"
    );
}

#[test]
fn v4_session_with_lz4_compression() {
    let mut input = request(0x04, 0, 1, Opcode::Startup, &startup_body(Some("lz4")));
    let env = one_envelope(&mut input);
    let req = decode_request(&env, &DecodeOptions::default()).expect("startup");
    let RequestMessage::Startup(s) = req.message else {
        panic!("not STARTUP")
    };
    let compression = s.get("COMPRESSION").and_then(Compression::from_name);
    assert_eq!(compression, Some(Compression::Lz4));
    let opts = DecodeOptions {
        compression,
        ..DecodeOptions::default()
    };

    // A compressed QUERY from the client.
    let mut body = BytesMut::new();
    let q = "SELECT release_version FROM system.local WHERE key = 'local'";
    body.put_i32(q.len() as i32);
    body.put_slice(q.as_bytes());
    body.put_u16(1);
    body.put_u8(0);
    let mut z = BytesMut::new();
    amphora_protocol::compression::compress_body(Compression::Lz4, &body, &mut z).expect("lz4");
    let mut input = request(0x04, 0x01, 2, Opcode::Query, &z);
    let env = one_envelope(&mut input);
    let req = decode_request(&env, &opts).expect("query");
    assert!(matches!(req.message, RequestMessage::Query(ref x) if x.query == q));

    // Two responses written into one buffer, compressed envelope by envelope.
    let cols = vec![ColumnSpec {
        keyspace: "system".into(),
        table: "local".into(),
        name: "release_version".into(),
        ty: ColumnType::Varchar,
    }];
    let mut out = BytesMut::new();
    encode_response(
        &mut out,
        ProtocolVersion::V4,
        1,
        &ResponsePrefix::NONE,
        &Response::Ready,
    )
    .expect("ready");
    let meta = RowsMetadata::new(&cols);
    let mut w = RowsWriter::begin(
        &mut out,
        ProtocolVersion::V4,
        2,
        &ResponsePrefix::NONE,
        &meta,
    )
    .expect("rows");
    w.push_value(Some("5.0.0-amphora ".repeat(20).as_bytes()))
        .expect("cell");
    w.finish().expect("finish");
    let mut wire = BytesMut::new();
    compress_envelopes(&out, Compression::Lz4, &mut wire).expect("compress");
    let ready = one_envelope(&mut wire);
    assert_eq!(
        (ready.opcode, ready.stream, ready.flags.0),
        (Opcode::Ready, 1, 0)
    );
    let rows = one_envelope(&mut wire);
    assert_eq!(
        (rows.opcode, rows.stream, rows.flags.0),
        (Opcode::Result, 2, 0x01)
    );
    let body = amphora_protocol::decompress_body(Compression::Lz4, &rows.body, 1 << 20)
        .expect("decompress");
    let mut r = Reader::new(body);
    assert_eq!(r.read_i32().ok(), Some(2));
}

#[test]
fn v5_session_switches_to_framing_after_ready() {
    // Plain STARTUP, plain READY.
    let mut input = request(0x05, 0, 1, Opcode::Startup, &startup_body(Some("lz4")));
    let env = one_envelope(&mut input);
    assert!(matches!(
        decode_request(&env, &DecodeOptions::default()).map(|r| r.message),
        Ok(RequestMessage::Startup(_))
    ));
    let mut out = BytesMut::new();
    encode_response(
        &mut out,
        ProtocolVersion::V5,
        1,
        &ResponsePrefix::NONE,
        &Response::Ready,
    )
    .expect("ready");
    assert_eq!(out[0], 0x85);

    // From now on both directions are LZ4 segments. The client sends a small QUERY and a
    // 200 KB one (split over frames) in one write, delivered in odd-sized pieces.
    let client = SegmentEncoder::new(SegmentCompression::Lz4);
    let big = format!(
        "INSERT INTO ks.t (k, v) VALUES (1, '{}')",
        "x".repeat(200_000)
    );
    let mut envelopes = request(
        0x05,
        0,
        2,
        Opcode::Query,
        &query_body("SELECT now() FROM system.local"),
    );
    envelopes.extend_from_slice(&request(0x05, 0, 3, Opcode::Query, &query_body(&big)));
    let mut wire = BytesMut::new();
    client.encode(&envelopes, &mut wire).expect("frames");

    let mut decoder = SegmentDecoder::new(SegmentCompression::Lz4, DEFAULT_MAX_FRAME_SIZE);
    let mut src = BytesMut::new();
    let mut plain = BytesMut::new();
    let mut queries = Vec::new();
    for piece in wire.chunks(9_999) {
        src.extend_from_slice(piece);
        decoder.decode(&mut src, &mut plain).expect("segments");
        while let Some(env) = decode_envelope(&mut plain, DEFAULT_MAX_FRAME_SIZE).expect("env") {
            match decode_request(&env, &DecodeOptions::default()).map(|r| r.message) {
                Ok(RequestMessage::Query(q)) => queries.push((env.stream, q.query.len())),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert_eq!(queries, vec![(2, 30), (3, big.len())]);

    // The server's answers go back framed; the client side decodes them.
    let mut out = BytesMut::new();
    for stream in [2, 3] {
        encode_response(
            &mut out,
            ProtocolVersion::V5,
            stream,
            &ResponsePrefix::NONE,
            &Response::Result(amphora_protocol::ResultMessage::Void),
        )
        .expect("void");
    }
    let mut wire = BytesMut::new();
    SegmentEncoder::new(SegmentCompression::Lz4)
        .encode(&out, &mut wire)
        .expect("frames");
    let mut back = BytesMut::new();
    let frames = SegmentDecoder::new(SegmentCompression::Lz4, DEFAULT_MAX_FRAME_SIZE)
        .decode(&mut wire, &mut back)
        .expect("segments");
    assert_eq!(
        frames, 1,
        "two small responses share one self-contained frame"
    );
    assert_eq!(back, out);
}
