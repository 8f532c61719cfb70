"""Wire-level behaviours every driver depends on, checked with hand-built v4 frames."""

import hashlib
import os

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
