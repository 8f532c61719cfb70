//! Bad input and faults: the offending stream gets a protocol error or its connection is
//! closed; the node keeps serving every other connection.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use amphora_protocol::{DEFAULT_MAX_FRAME_SIZE, Opcode, SegmentCompression, SegmentEncoder};
use bytes::{BufMut, BytesMut};

use crate::client::*;

/// A fresh connection still answers promptly.
fn assert_node_serves(node: &TestNode) {
    let started = Instant::now();
    let mut c = node.ready_client();
    assert_eq!(rows_of(&c.query(1, "rows 2")).rows.len(), 2);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn truncated_body_is_a_protocol_error_on_that_stream() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    // QUERY whose long string claims 100 bytes but carries 3.
    let mut body = BytesMut::new();
    body.put_i32(100);
    body.put_slice(b"abc");
    c.send(0, 9, Opcode::Query as u8, &body);
    let r = c.recv();
    assert_eq!(r.stream, 9);
    assert_eq!(error_of(&r).0, 0x000A);
    // The same connection goes on.
    assert_eq!(rows_of(&c.query(10, "rows 1")).rows.len(), 1);
}

#[test]
fn invalid_utf8_is_a_protocol_error() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    let mut body = BytesMut::new();
    body.put_i32(4);
    body.put_slice(&[0x61, 0xFF, 0xFE, 0x62]);
    body.put_u16(1);
    body.put_u8(0);
    c.send(0, 3, Opcode::Query as u8, &body);
    let (code, msg) = error_of(&c.recv());
    assert_eq!(code, 0x000A);
    assert!(msg.contains("UTF-8"), "{msg}");
    assert_eq!(rows_of(&c.query(4, "rows 1")).rows.len(), 1);
}

#[test]
fn negative_length_closes_the_connection() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    let mut env = envelope(4, 0, 5, Opcode::Query as u8, &[]);
    env[5..9].copy_from_slice(&(-7i32).to_be_bytes());
    c.send_raw(&env);
    let r = c.recv();
    assert_eq!((r.stream, error_of(&r).0), (5, 0x000A));
    c.expect_closed();
    assert_node_serves(&node);
}

#[test]
fn requests_read_together_with_a_bad_envelope_are_answered_before_it() {
    // The reader takes the envelopes it has buffered in batches: a bad one after good ones
    // in the same read is reported only once those are answered.
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    let mut wire = BytesMut::new();
    for stream in 1..=5 {
        let mut body = BytesMut::new();
        put_long_string(&mut body, "rows 1");
        body.put_u16(1);
        body.put_u8(0);
        wire.extend_from_slice(&envelope(4, 0, stream, Opcode::Query as u8, &body));
    }
    let mut bad = envelope(4, 0, 9, Opcode::Query as u8, &[]);
    bad[5..9].copy_from_slice(&(-7i32).to_be_bytes());
    wire.extend_from_slice(&bad);
    c.send_raw(&wire);
    let mut answered: Vec<i16> = (0..5)
        .map(|_| {
            let r = c.recv();
            assert_eq!(rows_of(&r).rows.len(), 1);
            r.stream
        })
        .collect();
    answered.sort_unstable();
    assert_eq!(answered, [1, 2, 3, 4, 5]);
    let r = c.recv();
    assert_eq!((r.stream, error_of(&r).0), (9, 0x000A));
    c.expect_closed();
    assert_node_serves(&node);
}

#[test]
fn unknown_opcodes_close_the_connection() {
    let node = TestNode::start(1);
    for opcode in [0x04u8, 0x11, 0xFF] {
        let mut c = node.ready_client();
        c.send(0, 2, opcode, b"xyz");
        let r = c.recv();
        let (code, msg) = error_of(&r);
        assert_eq!((r.stream, code), (2, 0x000A), "{msg}");
        c.expect_closed();
    }
    assert_node_serves(&node);
}

#[test]
fn response_opcodes_from_a_client_are_protocol_errors() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    // RESULT and READY are not requests; a response direction bit neither.
    c.send(0, 1, Opcode::Result as u8, &[0, 0, 0, 1]);
    assert_eq!(error_of(&c.recv()).0, 0x000A);
    let env = envelope(0x84, 0, 2, Opcode::Options as u8, &[]);
    c.send_raw(&env);
    assert_eq!(error_of(&c.recv()).0, 0x000A);
    assert_eq!(rows_of(&c.query(3, "rows 1")).rows.len(), 1);
}

#[test]
fn compressed_flag_without_negotiation_is_a_protocol_error() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    c.send(0x01, 4, Opcode::Options as u8, &[0, 0, 0, 0]);
    assert_eq!(error_of(&c.recv()).0, 0x000A);
    c.options(5);
}

#[test]
fn garbage_compressed_bodies_are_protocol_errors() {
    let node = TestNode::start(1);
    for algo in ["lz4", "snappy"] {
        let mut c = Client::connect(node.native(), 4);
        c.startup(&[("COMPRESSION", algo)]);
        // A raw envelope with the flag and a body that is not valid compressed data.
        let env = envelope(
            4,
            0x01,
            6,
            Opcode::Query as u8,
            &[0x7F, 0xFF, 0xFF, 0xFF, 1, 2],
        );
        c.send_raw(&env);
        let r = c.recv();
        assert_eq!((r.stream, error_of(&r).0), (6, 0x000A), "{algo}");
        c.options(7);
    }
}

#[test]
fn frames_over_the_limit_are_refused_at_the_limit_accepted() {
    let node = TestNode::start(1);
    // Exactly max_frame_size: accepted.
    let mut c = node.ready_client();
    let query_len = DEFAULT_MAX_FRAME_SIZE - 9 - 4 - 3;
    let mut body = BytesMut::with_capacity(DEFAULT_MAX_FRAME_SIZE);
    put_long_string(&mut body, &"x".repeat(query_len));
    body.put_u16(1);
    body.put_u8(0);
    assert_eq!(body.len() + 9, DEFAULT_MAX_FRAME_SIZE);
    c.send(0, 1, Opcode::Query as u8, &body);
    assert_eq!(c.recv().opcode, Opcode::Result);
    // One byte more: refused from the header alone, then the connection closes.
    let mut c = node.ready_client();
    let mut env = envelope(4, 0, 2, Opcode::Query as u8, &[]);
    env[5..9].copy_from_slice(&((DEFAULT_MAX_FRAME_SIZE - 8) as i32).to_be_bytes());
    c.send_raw(&env);
    c.send_raw(&[0u8; 4096]);
    let r = c.recv();
    let (code, msg) = error_of(&r);
    assert_eq!((r.stream, code), (2, 0x000A));
    assert!(msg.contains("too big"), "{msg}");
    c.expect_closed();
    assert_node_serves(&node);
}

#[test]
fn duplicate_stream_ids_in_flight() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    c.send_query(5, "sleep 300");
    c.send_query(5, "rows 1");
    let first = c.recv();
    assert_eq!(first.stream, 5);
    let (code, msg) = error_of(&first);
    assert_eq!(code, 0x000A);
    assert!(msg.contains("already in use"), "{msg}");
    let second = c.recv();
    assert_eq!((second.stream, second.opcode), (5, Opcode::Result));
    // Reusing the id once answered is fine.
    assert_eq!(rows_of(&c.query(5, "rows 1")).rows.len(), 1);
}

#[test]
fn version_change_mid_connection_is_refused() {
    let node = TestNode::start(1);
    let mut c = node.ready_client();
    c.send_raw(&envelope(3, 0, 8, Opcode::Options as u8, &[]));
    let (code, msg) = error_of(&c.recv());
    assert_eq!(code, 0x000A);
    assert!(msg.contains("Invalid message version"), "{msg}");
    c.options(9);
}

#[test]
fn disconnect_mid_frame_and_mid_request() {
    let node = TestNode::start(2);
    for cut in [3usize, 9, 12] {
        let mut s = TcpStream::connect(node.native()).expect("connect");
        let mut body = BytesMut::new();
        put_long_string(&mut body, "rows 1");
        body.put_u16(1);
        body.put_u8(0);
        let env = envelope(4, 0, 1, Opcode::Query as u8, &body);
        s.write_all(&env[..cut]).expect("write");
        drop(s);
    }
    // Leaves with requests in flight.
    let mut c = node.ready_client();
    for s in 0..10 {
        c.send_query(s, "sleep 100");
    }
    drop(c);
    assert_node_serves(&node);
    // Every closed connection is gone from its shard after the drain.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let open: usize = open_connections(&node);
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} connections still open");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn open_connections(node: &TestNode) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("rt");
    rt.block_on(
        node.shards
            .submit_to_all(|_| async { amphora_server::transport::local_connection_count() }),
    )
    .expect("shards")
    .into_iter()
    .sum()
}

#[test]
fn a_client_sending_one_byte_at_a_time_does_not_hold_anyone_up() {
    let node = TestNode::start(1);
    let mut slow = Client::connect(node.native(), 4);
    let env = envelope(4, 0, 3, Opcode::Options as u8, &[]);
    let handle = std::thread::spawn(move || {
        for b in env.iter() {
            slow.send_raw(&[*b]);
            std::thread::sleep(Duration::from_millis(500));
        }
        slow.recv()
    });
    std::thread::sleep(Duration::from_millis(600));
    // Meanwhile (the slow envelope takes 4.5 s), on the same shard.
    assert_node_serves(&node);
    let r = handle.join().expect("slow client");
    assert_eq!((r.opcode, r.stream), (Opcode::Supported, 3));
}

#[test]
fn corrupt_v5_frames_close_only_that_connection() {
    let node = TestNode::start(1);
    let mut c = Client::connect(node.native(), 5);
    c.startup(&[]);
    let env = envelope(5, 0, 1, Opcode::Options as u8, &[]);
    let mut frame = BytesMut::new();
    SegmentEncoder::new(SegmentCompression::None)
        .encode(&env, &mut frame)
        .expect("frame");
    let last = frame.len() - 1;
    frame[last] ^= 0xFF; // payload CRC32
    c.send_raw(&frame);
    c.expect_closed();
    // A frame whose header CRC is wrong.
    let mut c = Client::connect(node.native(), 5);
    c.startup(&[]);
    c.send_raw(&[0x09, 0x00, 0x02, 0x00, 0x00, 0x00, 1, 2, 3]);
    c.expect_closed();
    assert_node_serves(&node);
}

#[test]
fn random_garbage_never_takes_the_node_down() {
    let node = TestNode::start(2);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..40 {
        let mut s = TcpStream::connect(node.native()).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let len = (next() % 64) as usize + 1;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        // Half the rounds look like a v4 header, to get past the version check.
        if round % 2 == 0 {
            bytes[0] = 4;
        }
        let _ = s.write_all(&bytes);
        let mut sink = [0u8; 1024];
        let _ = std::io::Read::read(&mut s, &mut sink);
    }
    assert_node_serves(&node);
}

#[test]
fn v5_envelopes_over_the_limit_close_only_that_connection() {
    const MAX: usize = 64 * 1024;
    let node = TestNode::start_with(1, |cfg| cfg.max_frame_size = MAX);
    // One self-contained frame carrying an envelope over the limit, then an envelope so
    // large it spans several frames: both are refused from the envelope header.
    for body_len in [100 * 1024, 300 * 1024] {
        let mut c = Client::connect(node.native(), 5);
        c.startup(&[]);
        let mut body = BytesMut::new();
        put_long_string(&mut body, &"x".repeat(body_len));
        body.put_u16(1);
        body.put_u32(0);
        c.send(0, 3, Opcode::Query as u8, &body);
        let (code, msg) = error_of(&c.recv());
        assert_eq!(code, 0x000A, "{msg}");
        c.expect_closed();
    }
    // Just under the limit is served, on v5 framing too.
    let mut c = Client::connect(node.native(), 5);
    c.startup(&[]);
    let mut body = BytesMut::new();
    put_long_string(&mut body, &"x".repeat(MAX - 9 - 4 - 6));
    body.put_u16(1);
    body.put_u32(0);
    assert_eq!(body.len() + 9, MAX);
    c.send(0, 4, Opcode::Query as u8, &body);
    assert_eq!(c.recv().opcode, Opcode::Result);
    assert_node_serves(&node);
}
