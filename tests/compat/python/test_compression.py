"""Frame compression and v5 framing under each protocol version the driver speaks: values
larger than one v5 frame (128 KiB) force multi-frame envelopes; random bytes do not
compress (LZ4 "stored" frames), repeated bytes do. Many requests in flight check stream
ids and out-of-order responses."""

import os

import pytest

from cassandra import ProtocolVersion
from cassandra.concurrent import execute_concurrent_with_args

from conftest import new_cluster

MODES = [(5, "lz4"), (5, False), (4, "lz4"), (4, "snappy"), (4, False)]

BIG_RANDOM = os.urandom(300_000)
BIG_REPEATED = b"amphora " * 40_000  # 320 KB, compresses well


@pytest.fixture(scope="module")
def blob_table(session, keyspace):
    t = f"{keyspace}.blobs"
    session.execute(f"CREATE TABLE {t} (k text, c int, v blob, PRIMARY KEY (k, c))")
    return t


@pytest.mark.parametrize("version,compression", MODES,
                         ids=[f"v{v}-{c or 'none'}" for v, c in MODES])
def test_large_values_roundtrip(blob_table, version, compression):
    if version not in ProtocolVersion.SUPPORTED_VERSIONS:
        pytest.skip(f"driver lacks v{version}")
    c = new_cluster(protocol_version=version, compression=compression)
    try:
        s = c.connect()
        assert c.protocol_version == version
        conn = c.control_connection._connection
        assert conn._compression_type == (compression or None), "compression not negotiated"
        key = f"v{version}-{compression}"
        ins = s.prepare(f"INSERT INTO {blob_table} (k, c, v) VALUES (?, ?, ?)")
        s.execute(ins, [key, 0, BIG_RANDOM])
        s.execute(ins, [key, 1, BIG_REPEATED])
        for i in range(2, 202):
            s.execute(ins, [key, i, b"x" * 100])
        sel = s.prepare(f"SELECT c, v FROM {blob_table} WHERE k = ?")
        sel.fetch_size = None  # one result of ~650 KB
        rows = {r.c: r.v for r in s.execute(sel, [key])}
        assert len(rows) == 202
        assert rows[0] == BIG_RANDOM
        assert rows[1] == BIG_REPEATED
        assert all(rows[i] == b"x" * 100 for i in range(2, 202))
    finally:
        c.shutdown()


def test_many_requests_in_flight(session, keyspace):
    t = f"{keyspace}.inflight"
    session.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, v text)")
    ins = session.prepare(f"INSERT INTO {t} (k, v) VALUES (?, ?)")
    n = 1000
    results = execute_concurrent_with_args(session, ins, [(i, f"v{i}") for i in range(n)],
                                           concurrency=200, raise_on_first_error=False)
    failures = [r.result_or_exc for r in results if not r.success]
    assert not failures, failures[:3]
    sel = session.prepare(f"SELECT v FROM {t} WHERE k = ?")
    results = execute_concurrent_with_args(session, sel, [(i,) for i in range(n)],
                                           concurrency=200)
    # each response matches its own request even if answered out of order
    assert [r.result_or_exc.one().v for r in results] == [f"v{i}" for i in range(n)]
