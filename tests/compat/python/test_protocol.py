"""Wire-level behaviours every driver depends on, checked with hand-built v4 frames."""

import hashlib
import os
import socket

import pytest

from conftest import HOST, PORT, server_supported, server_is_sharded
import rawproto


def test_supported_has_keys_python_driver_reads():
    # python-driver does options['COMPRESSION'] and options.pop('CQL_VERSION').
    sup = server_supported()
    assert "CQL_VERSION" in sup and sup["CQL_VERSION"], sup
    assert "COMPRESSION" in sup, sup
    major = [int(v.split(".")[0]) for v in sup["CQL_VERSION"]]
    assert all(m >= 3 for m in major), sup["CQL_VERSION"]


def test_sharding_keys_all_or_none():
    sup = server_supported()
    keys = {"SCYLLA_SHARD", "SCYLLA_NR_SHARDS", "SCYLLA_PARTITIONER",
            "SCYLLA_SHARDING_ALGORITHM", "SCYLLA_SHARDING_IGNORE_MSB"}
    present = keys & set(sup)
    assert present in (set(), keys), f"partial sharding keys: {sorted(present)}"
    if server_is_sharded():
        assert sup["SCYLLA_PARTITIONER"] == ["org.apache.cassandra.dht.Murmur3Partitioner"]
        assert sup["SCYLLA_SHARDING_ALGORITHM"] == ["biased-token-round-robin"]
        assert int(sup["SCYLLA_SHARDING_IGNORE_MSB"][0]) == 12
        nr = int(sup["SCYLLA_NR_SHARDS"][0])
        assert 0 <= int(sup["SCYLLA_SHARD"][0]) < nr
        assert int(sup["SCYLLA_SHARD_AWARE_PORT"][0]) > 0


def test_dse_version_is_refused_with_a_downgrade_hint():
    # python and Java drivers open with 0x42 (DSE_V2) and downgrade only on this answer.
    v, opcode, code, msg = rawproto.startup_with_version(HOST, PORT, 0x42)
    assert opcode == rawproto.OP_ERROR
    assert code == rawproto.ERR_PROTOCOL, hex(code)
    assert "invalid or unsupported protocol version" in msg.lower(), msg
    # The envelope carries a real response version (gocql reads it as the server's max).
    assert v & 0x80 and (v & 0x7F) in (3, 4, 5), hex(v)


def test_execute_of_unknown_id_is_unprepared_and_echoes_id():
    bogus = hashlib.md5(os.urandom(16)).digest()
    opcode, code, msg, echoed = rawproto.execute_unknown_id(HOST, PORT, bogus)
    assert opcode == rawproto.OP_ERROR
    assert code == rawproto.ERR_UNPREPARED, (hex(code), msg)
    assert echoed == bogus


def test_unknown_table_is_invalid_0x2200():
    # Drivers fall back from peers_v2 etc. only on 0x2200.
    with rawproto.connect(HOST, PORT) as s:
        rawproto.startup(s)
        opcode, body = rawproto.query(s, "SELECT * FROM system.no_such_table_here")
        assert opcode == rawproto.OP_ERROR
        code, msg, _ = rawproto.parse_error(body)
        assert code == 0x2200, (hex(code), msg)


def test_syntax_error_is_0x2000():
    with rawproto.connect(HOST, PORT) as s:
        rawproto.startup(s)
        opcode, body = rawproto.query(s, "SELEC * FROM system.local")
        assert opcode == rawproto.OP_ERROR
        code, msg, _ = rawproto.parse_error(body)
        assert code == 0x2000, (hex(code), msg)


# ---------------------------------------------------------------------------------------
# v5 framing, by hand: the drivers only say "connection defunct" when a CRC is wrong.


def test_crc24_matches_reference_vector():
    # header 32 00 02 (length 50, self-contained) → CRC24 bytes a5 ff ee (python-driver)
    assert rawproto.crc24(bytes.fromhex("320002")).to_bytes(3, "little") == bytes.fromhex("a5ffee")


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_v5_framed_queries(compression):
    lz4_block = None
    if compression:
        lz4_block = pytest.importorskip("lz4.block")
    with rawproto.connect(HOST, PORT) as s:
        rawproto.v5_startup(s, compression)
        # two envelopes in one self-contained frame, answered in frames of their own or
        # together; both answers must come back on their stream ids
        payload = (rawproto.v5_query_envelope(
                       "SELECT release_version FROM system.local WHERE key = 'local'", 11)
                   + rawproto.v5_query_envelope(
                       "SELECT cluster_name FROM system.local WHERE key = 'local'"
                       f" /* {'y' * 5000} */", 12))  # compressible: a real LZ4 frame
        s.sendall(rawproto.v5_frame(payload, lz4_block=lz4_block))
        answers = {}
        while len(answers) < 2:
            body, self_contained = rawproto.read_v5_frame(s, lz4_block)
            assert self_contained
            for version, stream, opcode, ebody in rawproto.parse_envelopes(body):
                assert version == 0x85, hex(version)
                assert opcode == rawproto.OP_RESULT, (opcode, ebody[:200])
                answers[stream] = rawproto.single_text_cell(ebody)
        assert answers[11].startswith("5.0"), answers
        assert answers[12], answers


def test_v5_large_envelope_spans_frames():
    """A query text larger than one frame (128 KiB) goes in non-self-contained frames."""
    filler = "x" * 300_000
    cql = f"SELECT release_version FROM system.local WHERE key = 'local' /* {filler} */"
    env = rawproto.v5_query_envelope(cql, 21)
    with rawproto.connect(HOST, PORT) as s:
        rawproto.v5_startup(s)
        chunks = [env[i:i + rawproto.MAX_PAYLOAD]
                  for i in range(0, len(env), rawproto.MAX_PAYLOAD)]
        assert len(chunks) == 3
        s.sendall(b"".join(rawproto.v5_frame(c, self_contained=False) for c in chunks))
        body, _ = rawproto.read_v5_frame(s)
        [(version, stream, opcode, ebody)] = rawproto.parse_envelopes(body)
        assert (stream, opcode) == (21, rawproto.OP_RESULT), (stream, opcode, ebody[:200])
        assert rawproto.single_text_cell(ebody).startswith("5.0")


def test_v5_corrupt_header_is_not_executed():
    """Cassandra answers a frame whose header CRC24 is wrong with a framed protocol error
    ("unrecoverable CRC mismatch detected in frame header") and closes the connection.
    Accepted: that error, or the connection closed; not: executing it, or silence."""
    with rawproto.connect(HOST, PORT, timeout_s=10) as s:
        rawproto.v5_startup(s)
        env = rawproto.v5_query_envelope("SELECT release_version FROM system.local", 31)
        s.sendall(rawproto.v5_frame(env, corrupt_header=True))
        try:
            body, _ = rawproto.read_v5_frame(s)
        except socket.timeout:
            pytest.fail("no answer and no close after a corrupt frame header")
        except (ConnectionError, OSError):
            body = None  # closed: fine
        if body is not None:
            for _, _, opcode, ebody in rawproto.parse_envelopes(body):
                assert opcode == rawproto.OP_ERROR, f"corrupt frame answered with {opcode:#x}"
                code, msg, _ = rawproto.parse_error(ebody)
                assert code == rawproto.ERR_PROTOCOL, (hex(code), msg)
    # the server survives and serves new connections
    with rawproto.connect(HOST, PORT) as s:
        rawproto.v5_startup(s)
        s.sendall(rawproto.v5_frame(rawproto.v5_query_envelope(
            "SELECT release_version FROM system.local WHERE key = 'local'", 32)))
        body, _ = rawproto.read_v5_frame(s)
        assert rawproto.parse_envelopes(body)[0][2] == rawproto.OP_RESULT
