//! Handshake, negotiation, compression, framing, SUPPORTED and authentication.

use amphora_protocol::{Direction, Opcode, ProtocolVersion};
use amphora_server::transport::Authenticator;

use crate::client::*;
use crate::mock::HOST_ID;

#[test]
fn v4_plain_handshake_options_any_time() {
    let node = TestNode::start(2);
    let mut c = Client::connect(node.native(), 4);
    let before = c.options(3);
    assert_eq!(supported_value(&before, "CQL_VERSION"), vec!["3.4.7"]);
    let r = c.startup(&[("DRIVER_NAME", "raw"), ("SOMETHING_UNKNOWN", "x")]);
    assert_eq!(r.opcode, Opcode::Ready);
    assert_eq!(r.version, ProtocolVersion::V4);
    assert_eq!(r.direction, Direction::Response);
    let rows = rows_of(&c.query(1, "rows 3"));
    assert_eq!(rows.rows.len(), 3);
    // OPTIONS after STARTUP (driver heartbeats).
    c.options(9);
}

#[test]
fn v4_compressed_lz4_and_snappy() {
    let node = TestNode::start(1);
    for algo in ["lz4", "snappy"] {
        let mut c = Client::connect(node.native(), 4);
        assert_eq!(c.startup(&[("COMPRESSION", algo)]).opcode, Opcode::Ready);
        // Big enough to be worth compressing both ways.
        let r = c.query(1, "rows 500");
        let rows = rows_of(&r);
        assert_eq!(rows.rows.len(), 500, "{algo}");
        assert_eq!(int_cell(&rows.rows[499][0]), 499);
        c.options(2);
    }
}

#[test]
fn v4_compressed_answers_carry_the_flag() {
    let node = TestNode::start(1);
    let mut c = Client::connect(node.native(), 4);
    c.startup(&[("COMPRESSION", "lz4")]);
    let env = c.query(1, "rows 1000");
    assert!(c.last_compressed, "a large answer is compressed");
    assert_eq!(rows_of(&env).rows.len(), 1000);
    // A compressed request is understood too (the client compresses what shrinks).
    let env = c.query(2, &format!("other {}", "a".repeat(1000)));
    assert_eq!(env.opcode, Opcode::Result);
}

#[test]
fn v5_framed_plain_and_lz4() {
    let node = TestNode::start(2);
    for extra in [&[][..], &[("COMPRESSION", "lz4")][..]] {
        let mut c = Client::connect(node.native(), 5);
        let r = c.startup(extra);
        assert_eq!(r.opcode, Opcode::Ready, "{extra:?}");
        assert_eq!(r.version, ProtocolVersion::V5);
        let rows = rows_of(&c.query(1, "rows 2000"));
        assert_eq!(rows.rows.len(), 2000);
        // Several envelopes in one frame: pipelined requests.
        for s in 10..20 {
            c.send_query(s, "rows 1");
        }
        let mut seen: Vec<i16> = (0..10).map(|_| c.recv().stream).collect();
        seen.sort();
        assert_eq!(seen, (10..20).collect::<Vec<_>>());
        c.options(30);
    }
}

#[test]
fn v5_rejects_snappy() {
    let node = TestNode::start(1);
    let mut c = Client::connect(node.native(), 5);
    let r = c.startup(&[("COMPRESSION", "snappy")]);
    let (code, msg) = error_of(&r);
    assert_eq!(code, 0x000A);
    assert!(msg.contains("Unknown compression algorithm"), "{msg}");
}

#[test]
fn supported_advertises_every_scylla_key() {
    let node = TestNode::start(3);
    let mut c = Client::connect(node.native(), 4);
    let m = c.options(0);
    assert_eq!(supported_value(&m, "COMPRESSION"), vec!["lz4", "snappy"]);
    assert_eq!(
        supported_value(&m, "PROTOCOL_VERSIONS"),
        vec!["3/v3", "4/v4", "5/v5"]
    );
    assert_eq!(supported_value(&m, "SCYLLA_NR_SHARDS"), vec!["3"]);
    assert_eq!(
        supported_value(&m, "SCYLLA_PARTITIONER"),
        vec!["org.apache.cassandra.dht.Murmur3Partitioner"]
    );
    assert_eq!(
        supported_value(&m, "SCYLLA_SHARDING_ALGORITHM"),
        vec!["biased-token-round-robin"]
    );
    assert_eq!(
        supported_value(&m, "SCYLLA_SHARDING_IGNORE_MSB"),
        vec!["12"]
    );
    assert_eq!(
        supported_value(&m, "SCYLLA_SHARD_AWARE_PORT"),
        vec![node.shard_aware().port().to_string()]
    );
    assert_eq!(
        supported_value(&m, "SCYLLA_HOST_ID"),
        vec![uuid::Uuid::from_bytes(HOST_ID).to_string()]
    );
    assert_eq!(
        supported_value(&m, "SCYLLA_LWT_ADD_METADATA_MARK"),
        vec!["LWT_OPTIMIZATION_META_BIT_MASK=2147483648"]
    );
    let shard: u32 = supported_value(&m, "SCYLLA_SHARD")[0].parse().expect("int");
    assert!(shard < 3);
}

#[test]
fn shard_aware_port_assigns_source_port_modulo_shards() {
    let node = TestNode::start(3);
    for _ in 0..12 {
        let mut c = Client::connect(node.shard_aware(), 4);
        let m = c.options(0);
        let shard: u16 = supported_value(&m, "SCYLLA_SHARD")[0].parse().expect("int");
        assert_eq!(shard, c.local_port() % 3, "port {}", c.local_port());
        // The request runs on that shard.
        c.startup(&[]);
        let rows = rows_of(&c.query(1, "shard"));
        assert_eq!(int_cell(&rows.rows[0][0]), i32::from(shard));
    }
}

#[test]
fn native_port_spreads_connections_over_shards() {
    let node = TestNode::start(3);
    let mut seen = [false; 3];
    let mut keep = Vec::new();
    for _ in 0..6 {
        let mut c = Client::connect(node.native(), 4);
        let m = c.options(0);
        let shard: usize = supported_value(&m, "SCYLLA_SHARD")[0].parse().expect("int");
        seen[shard] = true;
        keep.push(c);
    }
    assert_eq!(seen, [true; 3]);
}

#[test]
fn unsupported_versions_get_protocol_error_in_v5_envelope_then_close() {
    let node = TestNode::start(1);
    for version in [0x42u8, 0x41, 6, 0x7F] {
        let mut c = Client::connect(node.native(), version);
        c.send(0, 0x0102, Opcode::Options as u8, &[]);
        let r = c.recv();
        assert_eq!(r.version, ProtocolVersion::V5, "version byte 0x85");
        assert_eq!(r.direction, Direction::Response);
        assert_eq!(r.stream, 0x0102);
        let (code, msg) = error_of(&r);
        assert_eq!(code, 0x000A);
        assert!(
            msg.contains("Invalid or unsupported protocol version"),
            "{msg}"
        );
        c.expect_closed();
    }
    // v1/v2 headers are 8 bytes with a one-byte stream.
    let mut c = Client::connect(node.native(), 1);
    c.send_raw(&[0x01, 0x00, 0x07, 0x05, 0, 0, 0, 0]);
    let r = c.recv();
    assert_eq!(r.version, ProtocolVersion::V5);
    assert_eq!(error_of(&r).0, 0x000A);
    c.expect_closed();
    // Then the driver reconnects lower.
    let mut c = Client::connect(node.native(), 4);
    assert_eq!(c.startup(&[]).opcode, Opcode::Ready);
}

#[test]
fn v3_still_works() {
    let node = TestNode::start(1);
    let mut c = Client::connect(node.native(), 3);
    assert_eq!(c.startup(&[]).opcode, Opcode::Ready);
    assert_eq!(rows_of(&c.query(1, "rows 2")).rows.len(), 2);
}

#[test]
fn startup_errors() {
    let node = TestNode::start(1);
    let mut c = Client::connect(node.native(), 4);
    // No CQL_VERSION.
    c.send(0, 1, Opcode::Startup as u8, &[0, 0]);
    let (code, msg) = error_of(&c.recv());
    assert_eq!(code, 0x000A);
    assert!(msg.contains("CQL_VERSION"), "{msg}");
    let r = c.startup(&[("COMPRESSION", "zstd")]);
    let (code, msg) = error_of(&r);
    assert_eq!(code, 0x000A);
    assert!(msg.contains("Unknown compression algorithm"), "{msg}");
    // Requests before STARTUP.
    let r = c.query(4, "rows 1");
    let (code, msg) = error_of(&r);
    assert_eq!(code, 0x000A);
    assert!(msg.contains("expecting STARTUP or OPTIONS"), "{msg}");
    // The connection still completes a handshake, and then refuses a second STARTUP.
    assert_eq!(c.startup(&[]).opcode, Opcode::Ready);
    assert_eq!(error_of(&c.startup(&[])).0, 0x000A);
    // The Rust driver's CQL_VERSION.
    let mut c = Client::connect(node.native(), 4);
    let mut body = bytes::BytesMut::new();
    bytes::BufMut::put_u16(&mut body, 1);
    put_string(&mut body, "CQL_VERSION");
    put_string(&mut body, "4.0.0");
    c.send(0, 0, Opcode::Startup as u8, &body);
    assert_eq!(c.recv().opcode, Opcode::Ready);
}

fn auth_token(user: &str, password: &str) -> bytes::BytesMut {
    let mut sasl = vec![0u8];
    sasl.extend_from_slice(user.as_bytes());
    sasl.push(0);
    sasl.extend_from_slice(password.as_bytes());
    let mut body = bytes::BytesMut::new();
    bytes::BufMut::put_i32(&mut body, sasl.len() as i32);
    body.extend_from_slice(&sasl);
    body
}

#[test]
fn password_authenticator_sasl_plain() {
    let node = TestNode::start_with(1, |c| c.authenticator = Authenticator::Password);
    for version in [4u8, 5] {
        let mut c = Client::connect(node.native(), version);
        let r = c.startup(&[("COMPRESSION", "lz4")]);
        assert_eq!(r.opcode, Opcode::Authenticate);
        let class = reader(&r).read_string().expect("class");
        assert_eq!(class, "org.apache.cassandra.auth.PasswordAuthenticator");
        // Queries before authentication.
        let (code, msg) = error_of(&c.query(1, "rows 1"));
        assert_eq!(code, 0x000A, "{msg}");
        c.send(
            0,
            2,
            Opcode::AuthResponse as u8,
            &auth_token("cassandra", "wrong"),
        );
        let (code, msg) = error_of(&c.recv());
        assert_eq!(code, 0x0100);
        assert_eq!(
            msg,
            "Provided username cassandra and/or password are incorrect"
        );
        c.send(
            0,
            3,
            Opcode::AuthResponse as u8,
            &auth_token("cassandra", "cassandra"),
        );
        let r = c.recv();
        assert_eq!(r.opcode, Opcode::AuthSuccess);
        assert_eq!(reader(&r).read_bytes().expect("token"), None);
        let rows = rows_of(&c.query(4, "user"));
        assert_eq!(rows.rows[0][0].as_deref(), Some(&b"cassandra"[..]));
    }
}

#[test]
fn lwt_metadata_mark_only_when_negotiated() {
    let node = TestNode::start(1);
    for (extra, want) in [
        (
            &[(
                "SCYLLA_LWT_ADD_METADATA_MARK",
                "LWT_OPTIMIZATION_META_BIT_MASK=2147483648",
            )][..],
            true,
        ),
        (&[][..], false),
    ] {
        let mut c = Client::connect(node.native(), 4);
        c.startup(extra);
        for (q, lwt) in [
            ("update t set v = 1 where k = 1 IF v = 0", true),
            ("update t set v = 1", false),
        ] {
            let r = c.prepare(1, q);
            let mut rd = reader(&r);
            assert_eq!(rd.read_i32().expect("kind"), 4);
            rd.read_short_bytes().expect("id");
            let flags = rd.read_u32().expect("flags");
            assert_eq!(flags & 0x8000_0000 != 0, want && lwt, "{q} {extra:?}");
        }
    }
}
