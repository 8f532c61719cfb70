"""The python driver's view of the server: discovery, schema, every CQL type, prepared
statements, paging, batches, schema events and errors. Runs with cassandra-driver and with
scylla-driver (see conftest.py)."""

import datetime
import ipaddress
import re
import uuid
from decimal import Decimal

import pytest

from cassandra import (AlreadyExists, ConsistencyLevel, InvalidRequest, ProtocolVersion,
                       ReadFailure)
from cassandra.protocol import SyntaxException
from cassandra.metadata import Murmur3Token
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.query import BatchStatement, BatchType, SimpleStatement
from cassandra.util import Date, Duration, Time

from conftest import HOST, IS_SCYLLA_DRIVER, PEER, new_cluster, wait_until


# ---------------------------------------------------------------------------------------
# Connection and discovery


def test_protocol_version_negotiated(cluster):
    if IS_SCYLLA_DRIVER:
        assert cluster.protocol_version in (4, 5)
    else:
        # cassandra-driver opens with DSE_V2 and must walk down to v5, not further.
        assert cluster.protocol_version == ProtocolVersion.V5 == 5


def test_host_metadata(cluster):
    hosts = cluster.metadata.all_hosts()
    assert len(hosts) == 1, hosts
    h = hosts[0]
    assert h.address == HOST
    assert h.is_up
    assert h.release_version and h.release_version.startswith("5.0"), h.release_version
    assert h.datacenter and h.rack
    assert h.host_id is not None
    assert cluster.metadata.partitioner == "org.apache.cassandra.dht.Murmur3Partitioner"
    assert cluster.metadata.cluster_name


def test_token_map_covers_ring(cluster, keyspace):
    tm = cluster.metadata.token_map
    assert tm is not None, "token map not built (partitioner or tokens wrong)"
    host = cluster.metadata.all_hosts()[0]
    assert len(tm.ring) >= 1
    assert all(isinstance(t, Murmur3Token) for t in tm.ring)
    assert all(tm.token_to_host_owner[t] == host for t in tm.ring)
    for key in (b"test", b"xd", b"\xfe" * 8):
        assert tm.get_replicas(keyspace, tm.token_class.from_key(key)) == [host]


def test_server_token_function_matches_driver_murmur3(session, keyspace):
    session.execute(f"CREATE TABLE {keyspace}.tok (k blob PRIMARY KEY, t text)")
    keys = [b"test", b"primary_key", "kremówki".encode(), b"\xfe" * 8, b"123",
            b"\x00\xff\x10\xfa\x99" * 10]
    expected = {b"test": -6017608668500074083, b"primary_key": -1632642444691073360,
                "kremówki".encode(): 4354931215268080151, b"\xfe" * 8: -8927430733708461935,
                b"123": -7468325962851647638, b"\x00\xff\x10\xfa\x99" * 10: 5837342703291459765}
    ins = session.prepare(f"INSERT INTO {keyspace}.tok (k, t) VALUES (?, 'x')")
    for k in keys:
        session.execute(ins, [k])
    sel = session.prepare(f"SELECT token(k) FROM {keyspace}.tok WHERE k = ?")
    for k in keys:
        rows = list(session.execute(sel, [k]))
        assert len(rows) == 1
        assert rows[0][0] == expected[k], k
        assert Murmur3Token.from_key(k).value == expected[k]


# ---------------------------------------------------------------------------------------
# Every CQL type, through prepared statements and literals

UDT_VALUE = ("Main St", 12345)

# (column name, CQL type, value written, value expected back or None for "same")
TYPE_CASES = [
    ("c_ascii", "ascii", "hello ascii", None),
    ("c_bigint", "bigint", -(2 ** 63), None),
    ("c_blob", "blob", b"\x00\x01\xfe\xff", None),
    ("c_boolean", "boolean", True, None),
    ("c_date", "date", datetime.date(2024, 2, 29), None),
    ("c_date_old", "date", datetime.date(1900, 1, 1), None),
    ("c_decimal", "decimal", Decimal("-123456789.0123456789"), None),
    ("c_double", "double", 1.5e300, None),
    ("c_duration", "duration", Duration(months=14, days=3, nanoseconds=4_000_000_005), None),
    ("c_float", "float", 3.25, None),
    ("c_inet4", "inet", "192.168.10.1", None),
    ("c_inet6", "inet", "2001:db8::ff00:42:8329", None),
    ("c_int", "int", -(2 ** 31), None),
    ("c_smallint", "smallint", -32768, None),
    ("c_text", "text", "zażółć gęślą jaźń 🚀", None),
    ("c_time", "time", datetime.time(13, 14, 15, 123456), None),
    ("c_timestamp", "timestamp", datetime.datetime(2024, 1, 2, 3, 4, 5, 678000), None),
    ("c_timeuuid", "timeuuid", uuid.UUID("fe2b4360-28c6-11ee-8080-808080808080"), None),
    ("c_tinyint", "tinyint", -128, None),
    ("c_uuid", "uuid", uuid.UUID("123e4567-e89b-42d3-a456-426614174000"), None),
    ("c_varint", "varint", 2 ** 100 + 1, None),
    ("c_varint_neg", "varint", -129, None),
    ("c_list", "list<int>", [3, 1, 2, 1], None),
    ("c_set", "set<text>", {"b", "a", "c"}, None),
    ("c_map", "map<text, int>", {"one": 1, "two": 2}, None),
    ("c_flist", "frozen<list<bigint>>", [10, 20], None),
    ("c_fset", "frozen<set<uuid>>", {uuid.UUID(int=1), uuid.UUID(int=2)}, None),
    ("c_fmap", "frozen<map<int, text>>", {1: "a", 2: "b"}, None),
    # inside a frozen value an empty list stays an empty list (not null)
    ("c_nested", "list<frozen<map<text, list<int>>>>", [{"x": [1, 2]}, {"y": []}], None),
    ("c_tuple", "tuple<int, text, boolean>", (7, "seven", False), None),
    ("c_udt", "frozen<address>", UDT_VALUE, None),
    ("c_udt_nf", "address", UDT_VALUE, None),
]


def _normalize(v):
    """Drivers return their own container/temporal classes; compare plain values."""
    if v is None:
        return None
    if isinstance(v, Date):
        return v.date()
    if isinstance(v, Time):
        return v.time()
    if isinstance(v, (str, bytes)):
        return v
    if isinstance(v, dict) or hasattr(v, "items") and not hasattr(v, "_fields"):
        return {_normalize(k): _normalize(x) for k, x in v.items()}
    if hasattr(v, "_fields"):  # UDT namedtuple
        return tuple(_normalize(x) for x in v)
    if isinstance(v, tuple):
        return tuple(_normalize(x) for x in v)
    if isinstance(v, (set, frozenset)) or type(v).__name__ == "SortedSet":
        return frozenset(_normalize(x) for x in v)
    if isinstance(v, list):
        return [_normalize(x) for x in v]
    return v


@pytest.fixture(scope="module")
def types_table(session, keyspace):
    session.execute(f"CREATE TYPE IF NOT EXISTS {keyspace}.address (street text, zip int)")
    cols = ", ".join(f"{name} {cql}" for name, cql, _, _ in TYPE_CASES)
    session.execute(f"CREATE TABLE {keyspace}.types (pk int PRIMARY KEY, {cols})")
    return f"{keyspace}.types"


@pytest.mark.parametrize("case", TYPE_CASES, ids=[c[0] for c in TYPE_CASES])
def test_type_roundtrip_prepared(session, types_table, case):
    name, _, value, expected = case
    pk = TYPE_CASES.index(case)
    session.execute(session.prepare(f"INSERT INTO {types_table} (pk, {name}) VALUES (?, ?)"),
                    [pk, value])
    rows = list(session.execute(
        session.prepare(f"SELECT {name} FROM {types_table} WHERE pk = ?"), [pk]))
    assert len(rows) == 1
    got = rows[0][0]
    want = value if expected is None else expected
    assert _normalize(got) == _normalize(want)
    if isinstance(want, Decimal):
        assert str(got) == str(want)  # scale survives


def test_type_roundtrip_literals(session, types_table):
    pk = 1000
    session.execute(
        f"INSERT INTO {types_table} (pk, c_ascii, c_bigint, c_blob, c_boolean, c_date, "
        "c_decimal, c_double, c_duration, c_float, c_inet4, c_int, c_smallint, c_text, c_time, "
        "c_timestamp, c_timeuuid, c_tinyint, c_uuid, c_varint, c_list, c_set, c_map, c_tuple, "
        f"c_udt) VALUES ({pk}, 'a', 9223372036854775807, 0xcafe, false, '2000-01-01', "
        "1.50, -0.5, 1y2mo3w4d5h6m7s, 0.25, '10.0.0.1', 42, 7, 'txt', '01:02:03.000000004', "
        "'2020-05-06T07:08:09.010Z', 50554d6e-29bb-11e5-b345-feff819cdc9f, 5, "
        "123e4567-e89b-42d3-a456-426614174000, -12345678901234567890, [1, 2], {'x'}, "
        "{'k': 1}, (1, 'one', true), {street: 'Elm', zip: 1})")
    r = session.execute(f"SELECT * FROM {types_table} WHERE pk = {pk}").one()
    assert r.c_ascii == "a"
    assert r.c_bigint == 2 ** 63 - 1
    assert r.c_blob == b"\xca\xfe"
    assert r.c_boolean is False
    assert _normalize(r.c_date) == datetime.date(2000, 1, 1)
    assert str(r.c_decimal) == "1.50"
    assert r.c_double == -0.5
    # 1y2mo = 14 months; 3w4d = 25 days; 5h6m7s in ns
    assert r.c_duration == Duration(14, 25, (5 * 3600 + 6 * 60 + 7) * 10 ** 9)
    assert r.c_float == 0.25
    assert r.c_inet4 == "10.0.0.1"
    assert (r.c_int, r.c_smallint, r.c_tinyint) == (42, 7, 5)
    assert r.c_text == "txt"
    assert r.c_time == Time(3723 * 10 ** 9 + 4)
    assert r.c_timestamp == datetime.datetime(2020, 5, 6, 7, 8, 9, 10000)
    assert r.c_timeuuid == uuid.UUID("50554d6e-29bb-11e5-b345-feff819cdc9f")
    assert r.c_uuid == uuid.UUID("123e4567-e89b-42d3-a456-426614174000")
    assert r.c_varint == -12345678901234567890
    assert (r.c_list, set(r.c_set), dict(r.c_map)) == ([1, 2], {"x"}, {"k": 1})
    assert r.c_tuple == (1, "one", True)
    assert _normalize(r.c_udt) == ("Elm", 1)


def test_unset_columns_read_as_null(session, types_table):
    session.execute(f"INSERT INTO {types_table} (pk) VALUES (2000)")
    r = session.execute(f"SELECT * FROM {types_table} WHERE pk = 2000").one()
    assert r.pk == 2000
    assert all(getattr(r, name) is None for name, _, _, _ in TYPE_CASES)


def test_vector_float3(cluster, session, keyspace):
    if cluster.protocol_version < 5 and not IS_SCYLLA_DRIVER:
        pytest.fail("cassandra-driver should have negotiated v5")
    session.execute(f"CREATE TABLE {keyspace}.vec (pk int PRIMARY KEY, v vector<float, 3>)")
    v = [1.0, -2.5, 0.125]
    session.execute(session.prepare(f"INSERT INTO {keyspace}.vec (pk, v) VALUES (?, ?)"), [1, v])
    session.execute(f"INSERT INTO {keyspace}.vec (pk, v) VALUES (2, [0.5, 0.25, 4.0])")
    got = {r.pk: list(r.v) for r in session.execute(f"SELECT pk, v FROM {keyspace}.vec")}
    assert got == {1: v, 2: [0.5, 0.25, 4.0]}
    col = cluster.metadata.keyspaces[keyspace].tables["vec"].columns["v"]
    assert col.cql_type.replace(" ", "") == "vector<float,3>"


# ---------------------------------------------------------------------------------------
# Prepared statements


def test_prepared_routing_metadata(session, keyspace):
    session.execute(f"CREATE TABLE {keyspace}.comp (a int, b text, c int, v text, "
                    "PRIMARY KEY ((a, b), c))")
    # bind markers in an order unrelated to the key: pk_index must map a→2, b→1
    p = session.prepare(f"INSERT INTO {keyspace}.comp (c, b, a, v) VALUES (?, ?, ?, ?)")
    assert p.routing_key_indexes == [2, 1]
    session.execute(p, [3, "bee", 1, "val"])
    sel = session.prepare(f"SELECT a, b, c, v FROM {keyspace}.comp WHERE a = :a AND b = :b")
    assert sel.routing_key_indexes == [0, 1]
    assert [c.name for c in sel.column_metadata] == ["a", "b"]
    rows = list(session.execute(sel, {"a": 1, "b": "bee"}))
    assert [tuple(r) for r in rows] == [(1, "bee", 3, "val")]
    # routing key computed by the driver equals the server's token
    bound = sel.bind({"a": 1, "b": "bee"})
    server_token = session.execute(
        f"SELECT token(a, b) FROM {keyspace}.comp WHERE a = 1 AND b = 'bee'").one()[0]
    assert Murmur3Token.from_key(bound.routing_key).value == server_token


def test_prepared_limit_and_ttl_markers(session, keyspace):
    session.execute(f"CREATE TABLE {keyspace}.lim (k int, c int, v int, PRIMARY KEY (k, c))")
    ins = session.prepare(f"INSERT INTO {keyspace}.lim (k, c, v) VALUES (?, ?, ?) USING TTL ?")
    for c in range(5):
        session.execute(ins, [1, c, c * 10, 3600])
    sel = session.prepare(f"SELECT c, v, ttl(v) FROM {keyspace}.lim WHERE k = ? LIMIT ?")
    rows = list(session.execute(sel, [1, 3]))
    assert [(r.c, r.v) for r in rows] == [(0, 0), (1, 10), (2, 20)]
    assert all(0 < r[2] <= 3600 for r in rows)


def test_prepared_survives_drop_and_recreate(session, keyspace):
    """Cassandra evicts prepared statements of a dropped table: the next EXECUTE gets
    Unprepared and the driver re-prepares transparently."""
    t = f"{keyspace}.reprep"
    session.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, v text)")
    ins = session.prepare(f"INSERT INTO {t} (k, v) VALUES (?, ?)")
    session.execute(ins, [1, "before"])
    session.execute(f"DROP TABLE {t}")
    session.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, v text)")
    session.execute(ins, [2, "after"])
    rows = sorted(tuple(r) for r in session.execute(f"SELECT k, v FROM {t}"))
    assert rows == [(2, "after")]


def test_prepared_select_star_sees_added_column(cluster, session, keyspace):
    t = f"{keyspace}.alter_me"
    session.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, a int)")
    session.execute(f"INSERT INTO {t} (k, a) VALUES (1, 10)")
    sel = session.prepare(f"SELECT * FROM {t} WHERE k = ?")
    assert list(session.execute(sel, [1]).one()._fields) == ["k", "a"]
    session.execute(f"ALTER TABLE {t} ADD b text")
    session.execute(f"UPDATE {t} SET b = 'new' WHERE k = 1")
    row = session.execute(sel, [1]).one()
    if cluster.protocol_version >= 5:
        # v5: result_metadata_id changed → Metadata_changed carries the new columns.
        assert list(row._fields) == ["k", "a", "b"] and row.b == "new"
    else:
        assert row.k == 1 and row.a == 10


def test_prepared_time_slices_of_a_partition(session, keyspace):
    """Time-series reads: `pk = ? AND time >|>=|<|<= ?` prepared (the server's fast path
    for one clustering slice) return what Cassandra returns, on a DESC clustering column,
    with LIMIT, paging, ORDER BY in either direction, a static column and a
    partition holding only static data."""
    t = f"{keyspace}.ts_slices"
    session.execute(f"CREATE TABLE {t} (m int, time bigint, s text static, v int, "
                    f"PRIMARY KEY (m, time)) WITH CLUSTERING ORDER BY (time DESC)")
    ins = session.prepare(f"INSERT INTO {t} (m, time, v) VALUES (?, ?, ?)")
    for time in range(20):
        session.execute(ins, [1, time, time * 10])
    session.execute(f"UPDATE {t} SET s = 'st' WHERE m = 1")
    session.execute(f"UPDATE {t} SET s = 'only' WHERE m = 2")
    cases = [
        ("time >= ?", [15], lambda x: x >= 15),
        ("time > ?", [15], lambda x: x > 15),
        ("time < ?", [3], lambda x: x < 3),
        ("time <= ?", [3], lambda x: x <= 3),
        ("time > ? AND time <= ?", [4, 9], lambda x: 4 < x <= 9),
        ("time >= ? AND time < ?", [9, 4], lambda x: False),
    ]
    for where, args, keep in cases:
        want = [x for x in range(19, -1, -1) if keep(x)]
        sel = session.prepare(f"SELECT time, v, s FROM {t} WHERE m = ? AND {where}")
        rows = list(session.execute(sel, [1, *args]))
        assert [r.time for r in rows] == want, where
        assert all(r.v == r.time * 10 and r.s == "st" for r in rows), where
        # The same query with literals (not prepared) agrees.
        lit = where
        for a in args:
            lit = lit.replace("?", str(a), 1)
        plain = [r.time for r in session.execute(f"SELECT time FROM {t} WHERE m = 1 AND {lit}")]
        assert plain == want, where
        # Only static data: no row once the clustering is restricted.
        assert list(session.execute(sel, [2, *args])) == [], where
    # LIMIT, as the IoT profile's query_by_machine_id.
    lim = session.prepare(f"SELECT time FROM {t} WHERE m = ? AND time >= ? LIMIT ?")
    assert [r.time for r in session.execute(lim, [1, 5, 3])] == [19, 18, 17]
    # The IoT query itself: literal bound and LIMIT in the prepared statement (the plan
    # evaluates them once), executed twice; literal errors still reach the client.
    iot = session.prepare(f"SELECT time FROM {t} WHERE m = ? AND time >= 15 LIMIT 3")
    for _ in range(2):
        assert [r.time for r in session.execute(iot, [1])] == [19, 18, 17]
    below = session.prepare(f"SELECT time FROM {t} WHERE m = ? AND time < 3")
    assert [r.time for r in session.execute(below, [1])] == [2, 1, 0]
    unlimited = session.prepare(f"SELECT time FROM {t} WHERE m = ? AND time > 16 AND time <= 18")
    assert [r.time for r in session.execute(unlimited, [1])] == [18, 17]
    for bad in ("LIMIT 0", "LIMIT -2"):
        with pytest.raises(InvalidRequest, match="LIMIT must be strictly positive"):
            session.execute(f"SELECT time FROM {t} WHERE m = 1 AND time >= 15 {bad}")
    with pytest.raises(InvalidRequest):
        session.execute(f"SELECT time FROM {t} WHERE m = 1 AND time >= 'x' LIMIT 3")
    # Pages of 4 over 12 rows resume inside the slice.
    paged = session.prepare(f"SELECT time FROM {t} WHERE m = ? AND time >= ?")
    paged.fetch_size = 4
    rs = session.execute(paged, [1, 8])
    assert [r.time for r in rs.current_rows] == [19, 18, 17, 16] and rs.has_more_pages
    assert [r.time for r in session.execute(paged, [1, 8])] == list(range(19, 7, -1))
    # Without a clustering restriction the static-only partition is one row.
    whole = session.prepare(f"SELECT s FROM {t} WHERE m = ?")
    assert [r.s for r in session.execute(whole, [2])] == ["only"]
    # Selecting only static columns with a clustering restriction is refused.
    with pytest.raises(InvalidRequest):
        session.execute(session.prepare(f"SELECT s FROM {t} WHERE m = ? AND time > ?"), [1, 3])
    # ORDER BY against the stored order: the oldest rows first.
    oldest = session.prepare(f"SELECT time, v FROM {t} WHERE m = ? ORDER BY time ASC LIMIT ?")
    assert [(r.time, r.v) for r in session.execute(oldest, [1, 3])] == [(0, 0), (1, 10), (2, 20)]
    asc = session.prepare(f"SELECT time FROM {t} WHERE m = ? AND time >= ? AND time < ? "
                          f"ORDER BY time ASC")
    assert [r.time for r in session.execute(asc, [1, 5, 9])] == [5, 6, 7, 8]
    plain = session.execute(f"SELECT time FROM {t} WHERE m = 1 AND time >= 5 AND time < 9 "
                            f"ORDER BY time ASC")
    assert [r.time for r in plain] == [5, 6, 7, 8]
    # ORDER BY in the stored order changes nothing.
    desc = session.prepare(f"SELECT time FROM {t} WHERE m = ? AND time > ? ORDER BY time DESC")
    assert [r.time for r in session.execute(desc, [1, 15])] == [19, 18, 17, 16]
    # Reversed pages of 4 over 12 rows resume inside the slice, in ascending order.
    paged_asc = session.prepare(f"SELECT time FROM {t} WHERE m = ? AND time >= ? ORDER BY time ASC")
    paged_asc.fetch_size = 4
    rs = session.execute(paged_asc, [1, 8])
    assert [r.time for r in rs.current_rows] == [8, 9, 10, 11] and rs.has_more_pages
    assert [r.time for r in session.execute(paged_asc, [1, 8])] == list(range(8, 20))
    # A reversed read of the static-only partition is its static row.
    rev_static = session.prepare(f"SELECT s FROM {t} WHERE m = ? ORDER BY time ASC")
    assert [r.s for r in session.execute(rev_static, [2])] == ["only"]
    # ORDER BY on a column that is not clustering is still refused.
    with pytest.raises(InvalidRequest):
        session.execute(session.prepare(f"SELECT time FROM {t} WHERE m = ? ORDER BY v ASC"), [1])


# ---------------------------------------------------------------------------------------
# Paging


@pytest.fixture(scope="module")
def paging_table(session, keyspace):
    t = f"{keyspace}.pages"
    session.execute(f"CREATE TABLE {t} (p int, c int, v text, PRIMARY KEY (p, c))")
    ins = session.prepare(f"INSERT INTO {t} (p, c, v) VALUES (?, ?, ?)")
    for p in range(5):
        for c in range(23):
            session.execute(ins, [p, c, f"{p}-{c}"])
    return t


def test_paging_within_partition(session, paging_table):
    st = SimpleStatement(f"SELECT c, v FROM {paging_table} WHERE p = 3", fetch_size=5)
    rs = session.execute(st)
    assert rs.has_more_pages
    pages = 0
    seen = []
    while True:
        pages += 1
        seen.extend(r.c for r in rs.current_rows)
        assert len(rs.current_rows) <= 5
        if not rs.has_more_pages:
            break
        rs.fetch_next_page()
    assert pages == 5  # 23 rows / 5
    assert seen == list(range(23))


def test_paging_full_scan_across_partitions(session, paging_table):
    st = SimpleStatement(f"SELECT p, c FROM {paging_table}", fetch_size=7)
    rows = [(r.p, r.c) for r in session.execute(st)]
    assert len(rows) == 5 * 23
    assert set(rows) == {(p, c) for p in range(5) for c in range(23)}
    # rows of a partition are contiguous and in clustering order
    for p in range(5):
        cs = [c for (pp, c) in rows if pp == p]
        assert cs == list(range(23))


def test_paging_state_resumes_on_a_new_connection(session, paging_table):
    prepared = session.prepare(f"SELECT c FROM {paging_table} WHERE p = ?")
    prepared.fetch_size = 6
    rs = session.execute(prepared, [1])
    first = [r.c for r in rs.current_rows]
    assert first == list(range(6)) and rs.paging_state
    # Another cluster object = different connections: the paging state must carry the
    # position, not a server-side cursor.
    other = new_cluster()
    try:
        s2 = other.connect()
        p2 = s2.prepare(f"SELECT c FROM {paging_table} WHERE p = ?")
        p2.fetch_size = 6
        rs2 = s2.execute(p2, [1], paging_state=rs.paging_state)
        second = [r.c for r in rs2.current_rows]
        assert second == list(range(6, 12))
    finally:
        other.shutdown()


def test_paging_prepared_at_least_three_pages(session, paging_table):
    prepared = session.prepare(f"SELECT c FROM {paging_table} WHERE p IN (0, 4)")
    prepared.fetch_size = 10
    rs = session.execute(prepared)
    pages = 1
    while rs.has_more_pages:
        rs.fetch_next_page()
        pages += 1
    assert pages >= 3
    assert len(list(session.execute(prepared))) == 46


# ---------------------------------------------------------------------------------------
# Batches


def _batch_table(session, keyspace, name):
    t = f"{keyspace}.{name}"
    session.execute(f"CREATE TABLE {t} (k int, c int, v text, PRIMARY KEY (k, c))")
    return t


def test_logged_batch(session, keyspace):
    t = _batch_table(session, keyspace, "blogged")
    ins = session.prepare(f"INSERT INTO {t} (k, c, v) VALUES (?, ?, ?)")
    b = BatchStatement(batch_type=BatchType.LOGGED)
    for k in range(3):
        for c in range(2):
            b.add(ins, [k, c, f"{k}{c}"])
    b.add(f"UPDATE {t} SET v = 'simple' WHERE k = 9 AND c = 9")
    session.execute(b)
    rows = {(r.k, r.c): r.v for r in session.execute(f"SELECT k, c, v FROM {t}")}
    assert rows == {**{(k, c): f"{k}{c}" for k in range(3) for c in range(2)},
                    (9, 9): "simple"}


def test_unlogged_batch_with_timestamp(session, keyspace):
    t = _batch_table(session, keyspace, "bunlogged")
    ins = session.prepare(f"INSERT INTO {t} (k, c, v) VALUES (?, ?, ?)")
    b = BatchStatement(batch_type=BatchType.UNLOGGED)
    b.add(ins, [1, 1, "a"])
    b.add(ins, [1, 2, "b"])
    b.add(f"DELETE FROM {t} WHERE k = 1 AND c = 2")  # same timestamp: delete wins
    session.execute(b)
    rows = [(r.k, r.c, r.v) for r in session.execute(f"SELECT k, c, v FROM {t} WHERE k = 1")]
    assert rows == [(1, 1, "a")]
    session.execute(f"BEGIN UNLOGGED BATCH USING TIMESTAMP 1234567 "
                    f"INSERT INTO {t} (k, c, v) VALUES (2, 1, 'x'); "
                    f"INSERT INTO {t} (k, c, v) VALUES (2, 2, 'y'); APPLY BATCH")
    wt = [r[0] for r in session.execute(f"SELECT writetime(v) FROM {t} WHERE k = 2")]
    assert wt == [1234567, 1234567]


def test_server_warning_for_a_large_batch(session, keyspace):
    """A multi-partition batch over batch_size_warn_threshold (5 KiB) is applied and the
    driver exposes Cassandra's warning; one over batch_size_fail_threshold (50 KiB) is
    refused."""
    t = _batch_table(session, keyspace, "bigbatch")
    ins = session.prepare(f"INSERT INTO {t} (k, c, v) VALUES (?, ?, ?)")
    b = BatchStatement(batch_type=BatchType.UNLOGGED)
    for k in range(2):
        b.add(ins, [k, 0, "x" * 3000])
    rs = session.execute(b)
    warnings = rs.response_future.warnings or []
    assert len(warnings) == 1, warnings
    m = re.fullmatch(
        rf"Batch for \[{re.escape(t)}\] is of size (\d+), exceeding specified threshold of "
        r"5120 by (\d+)\.", warnings[0])
    assert m, warnings[0]
    size, over = int(m.group(1)), int(m.group(2))
    assert size > 6000 and over == size - 5120
    assert session.execute(f"SELECT count(*) FROM {t} WHERE k = 1").one()[0] == 1
    # Small or single-partition batches say nothing.
    small = BatchStatement(batch_type=BatchType.UNLOGGED)
    small.add(ins, [5, 0, "a"])
    small.add(ins, [6, 0, "b"])
    assert not session.execute(small).response_future.warnings
    huge = BatchStatement(batch_type=BatchType.UNLOGGED)
    for k in range(2):
        huge.add(ins, [10 + k, 0, "y" * 30_000])
    with pytest.raises(InvalidRequest, match="Batch too large"):
        session.execute(huge)


def test_server_warning_for_an_aggregate_without_partition_key(session, keyspace):
    t = _batch_table(session, keyspace, "aggwarn")
    session.execute(f"INSERT INTO {t} (k, c, v) VALUES (1, 1, 'a')")
    rs = session.execute(f"SELECT count(*) FROM {t}")
    assert rs.one()[0] == 1
    assert rs.response_future.warnings == ["Aggregation query used without partition key"]
    rs = session.execute(f"SELECT count(*) FROM {t} WHERE k = 1")
    assert not rs.response_future.warnings
    # Prepared statements carry them too.
    ps = session.prepare(f"SELECT max(c) FROM {t}")
    rs = session.execute(ps)
    assert rs.response_future.warnings == ["Aggregation query used without partition key"]


def test_counter_batch(session, keyspace):
    t = f"{keyspace}.counters"
    session.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, n counter)")
    upd = session.prepare(f"UPDATE {t} SET n = n + ? WHERE k = ?")
    b = BatchStatement(batch_type=BatchType.COUNTER)
    b.add(upd, [5, 1])
    b.add(upd, [7, 1])
    b.add(upd, [-2, 2])
    session.execute(b)
    assert {r.k: r.n for r in session.execute(f"SELECT k, n FROM {t}")} == {1: 12, 2: -2}


# ---------------------------------------------------------------------------------------
# Schema metadata and events


def test_metadata_after_ddl(cluster, session, keyspace):
    session.execute(f"CREATE TABLE {keyspace}.meta (a int, b text, c timestamp, d set<int>, "
                    "PRIMARY KEY ((a), b, c)) WITH CLUSTERING ORDER BY (b DESC, c ASC)")
    tm = cluster.metadata.keyspaces[keyspace].tables["meta"]
    assert [c.name for c in tm.partition_key] == ["a"]
    assert [c.name for c in tm.clustering_key] == ["b", "c"]
    assert tm.columns["b"].is_reversed and not tm.columns["c"].is_reversed
    assert tm.columns["d"].cql_type == "set<int>"
    assert "CLUSTERING ORDER BY (b DESC, c ASC)" in tm.export_as_string()
    ks = cluster.metadata.keyspaces[keyspace]
    assert ks.replication_strategy.replication_factor == 1


def test_schema_change_event_reaches_other_client(session, keyspace):
    """A second client that did not run the DDL learns of it from the pushed
    SCHEMA_CHANGE event (its control connection REGISTERed for them)."""
    observer = new_cluster(schema_event_refresh_window=0.1)
    try:
        observer.connect()
        assert "evt" not in observer.metadata.keyspaces[keyspace].tables
        session.execute(f"CREATE TABLE {keyspace}.evt (k int PRIMARY KEY, v int)")
        wait_until(lambda: "evt" in observer.metadata.keyspaces[keyspace].tables,
                   what="observer to see CREATE TABLE")
        session.execute(f"ALTER TABLE {keyspace}.evt ADD w text")
        wait_until(lambda: "w" in observer.metadata.keyspaces[keyspace].tables["evt"].columns,
                   what="observer to see ALTER TABLE")
        session.execute(f"CREATE TYPE {keyspace}.evt_type (x int)")
        wait_until(lambda: "evt_type" in observer.metadata.keyspaces[keyspace].user_types,
                   what="observer to see CREATE TYPE")
        session.execute(f"DROP TABLE {keyspace}.evt")
        wait_until(lambda: "evt" not in observer.metadata.keyspaces[keyspace].tables,
                   what="observer to see DROP TABLE")
    finally:
        observer.shutdown()


def test_use_keyspace(cluster, keyspace):
    s = cluster.connect(keyspace)
    try:
        s.execute("CREATE TABLE IF NOT EXISTS used (k int PRIMARY KEY)")
        s.execute("INSERT INTO used (k) VALUES (1)")
        assert s.execute("SELECT k FROM used").one().k == 1
        assert s.keyspace == keyspace
    finally:
        s.shutdown()


# ---------------------------------------------------------------------------------------
# Errors


def test_syntax_error(session):
    with pytest.raises(SyntaxException):
        session.execute("SELEKT * FROM system.local")


def test_unknown_table_is_invalid_request(session, keyspace):
    with pytest.raises(InvalidRequest):
        session.execute(f"SELECT * FROM {keyspace}.does_not_exist")
    with pytest.raises(InvalidRequest):
        session.prepare(f"INSERT INTO {keyspace}.does_not_exist (k) VALUES (?)")


def test_unknown_keyspace_is_invalid_request(session):
    with pytest.raises(InvalidRequest):
        session.execute("SELECT * FROM no_such_keyspace_xyz.t")


def test_invalid_queries(session, keyspace):
    t = f"{keyspace}.inv"
    session.execute(f"CREATE TABLE {t} (k int, c int, v int, PRIMARY KEY (k, c))")
    with pytest.raises(InvalidRequest):  # wrong literal type
        session.execute(f"INSERT INTO {t} (k, c, v) VALUES ('x', 1, 1)")
    with pytest.raises(InvalidRequest):  # missing clustering key
        session.execute(f"INSERT INTO {t} (k, v) VALUES (1, 1)")
    with pytest.raises(InvalidRequest):  # unknown column
        session.execute(f"SELECT nope FROM {t} WHERE k = 1")
    with pytest.raises(InvalidRequest):  # filtering on a regular column without ALLOW
        session.execute(f"SELECT * FROM {t} WHERE v = 1")


def test_already_exists(session, keyspace):
    session.execute(f"CREATE TABLE {keyspace}.dup (k int PRIMARY KEY)")
    with pytest.raises(AlreadyExists) as e:
        session.execute(f"CREATE TABLE {keyspace}.dup (k int PRIMARY KEY)")
    assert e.value.keyspace == keyspace and e.value.table == "dup"
    with pytest.raises(AlreadyExists) as e:
        session.execute(f"CREATE KEYSPACE {keyspace} WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    assert e.value.keyspace == keyspace
    # IF NOT EXISTS is silent
    session.execute(f"CREATE TABLE IF NOT EXISTS {keyspace}.dup (k int PRIMARY KEY)")


def test_consistency_levels_single_node(session, keyspace):
    t = f"{keyspace}.cls"
    session.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, v int)")
    for cl in (ConsistencyLevel.ONE, ConsistencyLevel.LOCAL_ONE, ConsistencyLevel.QUORUM,
               ConsistencyLevel.ALL, ConsistencyLevel.LOCAL_QUORUM):
        session.execute(SimpleStatement(f"INSERT INTO {t} (k, v) VALUES ({cl}, 1)",
                                        consistency_level=cl))
        r = session.execute(SimpleStatement(f"SELECT v FROM {t} WHERE k = {cl}",
                                            consistency_level=cl)).one()
        assert r.v == 1


# ---------------------------------------------------------------------------------------
# Lightweight transactions


def test_lwt_applied_column(session, keyspace):
    t = f"{keyspace}.lwt"
    session.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, v text)")
    ins = session.prepare(f"INSERT INTO {t} (k, v) VALUES (?, ?) IF NOT EXISTS")
    first = session.execute(ins, [1, "first"])
    assert first.was_applied
    second = session.execute(ins, [1, "second"]).one()
    assert second[0] is False  # [applied]
    assert second.v == "first"  # the current values come back when not applied
    upd = session.execute(f"UPDATE {t} SET v = 'third' WHERE k = 1 IF v = 'first'")
    assert upd.was_applied
    assert session.execute(f"SELECT v FROM {t} WHERE k = 1").one().v == "third"


def test_query_trace_lists_events_with_elapsed_time(session, keyspace):
    t = f"{keyspace}.traced"
    session.execute(f"CREATE TABLE IF NOT EXISTS {t} (k int PRIMARY KEY, v text)")
    session.execute(f"INSERT INTO {t} (k, v) VALUES (7, 'x')")
    rs = session.execute(f"SELECT v FROM {t} WHERE k = 7", trace=True)
    assert rs.one().v == "x"
    trace = rs.get_query_trace(max_wait_sec=10)
    assert trace.request_type == "Execute CQL3 query"
    assert trace.parameters["query"] == f"SELECT v FROM {t} WHERE k = 7"
    assert trace.duration.total_seconds() > 0
    activities = [e.description for e in trace.events]
    assert any(a.startswith("Parsing SELECT v FROM") for a in activities), activities
    assert activities[-1] == "Request complete", activities
    assert any(a.startswith("Merging memtable contents") for a in activities), activities
    elapsed = [e.source_elapsed.total_seconds() for e in trace.events]
    assert elapsed == sorted(elapsed), elapsed
    # A prepared statement is traced too, without being parsed again.
    ps = session.prepare(f"SELECT v FROM {t} WHERE k = ?")
    rs = session.execute(ps, [7], trace=True)
    trace = rs.get_query_trace(max_wait_sec=10)
    assert trace.request_type == "Execute CQL3 prepared query"
    assert not any(e.description.startswith("Parsing") for e in trace.events)


def test_v5_execute_after_the_result_metadata_changed(cluster, session, keyspace):
    """A client that prepared `SELECT *` before ALTER TABLE ADD still gets every column:
    the server answers its EXECUTE (which carries the old result metadata id, v5) with
    METADATA_CHANGED and the new metadata instead of rows it would decode wrongly."""
    if cluster.protocol_version < ProtocolVersion.V5:
        pytest.skip("result metadata ids are protocol v5")
    t = f"{keyspace}.meta_changes"
    session.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, a int)")
    session.execute(f"INSERT INTO {t} (k, a) VALUES (1, 10)")
    old = session.prepare(f"SELECT * FROM {t} WHERE k = ?")
    assert [c[2] for c in old.result_metadata] == ["k", "a"]
    session.execute(f"ALTER TABLE {t} ADD b text")
    session.execute(f"INSERT INTO {t} (k, a, b) VALUES (1, 10, 'new')")
    # Another client prepares the same text: the node now holds the new metadata under the
    # same statement id, so the first client's EXECUTE is not answered UNPREPARED.
    other = new_cluster()
    try:
        other.connect().prepare(f"SELECT * FROM {t} WHERE k = ?")
    finally:
        other.shutdown()
    row = session.execute(old, [1]).one()
    assert row._fields == ("k", "a", "b")
    assert (row.k, row.a, row.b) == (1, 10, "new")


def test_virtual_schema_describes_its_own_tables(session):
    """system_virtual_schema lists its tables and their columns, as Cassandra's does (drivers
    build the virtual keyspaces' metadata from it)."""
    names = {(r.keyspace_name, r.table_name) for r in
             session.execute("SELECT keyspace_name, table_name FROM system_virtual_schema.tables")}
    assert {("system_virtual_schema", t) for t in ("keyspaces", "tables", "columns")} <= names
    cols = session.execute(
        "SELECT column_name, kind, position, type FROM system_virtual_schema.columns "
        "WHERE keyspace_name = 'system_virtual_schema' AND table_name = 'tables'")
    assert sorted((r.column_name, r.kind, r.position, r.type) for r in cols) == [
        ("comment", "regular", -1, "text"),
        ("keyspace_name", "partition_key", 0, "text"),
        ("table_name", "clustering", 0, "text"),
    ]


def test_scylla_tables_lists_every_table(session, keyspace):
    """system_schema.scylla_tables (read by ScyllaDB's drivers) has a row per table."""
    if PEER == "cassandra":
        pytest.skip("a ScyllaDB table; Apache Cassandra has none")
    session.execute(f"CREATE TABLE IF NOT EXISTS {keyspace}.scylla_listed (k int PRIMARY KEY)")
    rows = list(session.execute(
        "SELECT table_name, partitioner FROM system_schema.scylla_tables "
        "WHERE keyspace_name = %s", [keyspace]))
    assert "scylla_listed" in {r.table_name for r in rows}


def test_size_estimates_cover_the_ring(session, keyspace):
    """system.size_estimates (read by Spark and other bulk readers to split scans) has a row
    per table and primary range, the ranges unwrapped at the minimum token, and the
    estimates add up to the table's partitions."""
    if PEER == "cassandra":
        pytest.skip("Cassandra refreshes size_estimates every 5 minutes, from SSTables only")
    session.execute(f"CREATE TABLE IF NOT EXISTS {keyspace}.sized (k int PRIMARY KEY, v text)")
    ins = session.prepare(f"INSERT INTO {keyspace}.sized (k, v) VALUES (?, ?)")
    execute_concurrent_with_args(session, ins, [(k, "x" * 100) for k in range(2000)])
    rows = list(session.execute(
        "SELECT range_start, range_end, mean_partition_size, partitions_count "
        "FROM system.size_estimates WHERE keyspace_name = %s AND table_name = 'sized'",
        [keyspace]))
    tokens = sorted(int(t) for t in session.execute("SELECT tokens FROM system.local").one().tokens)
    minimum = -(2**63)
    expected = list(zip(tokens, tokens[1:])) + [(tokens[-1], minimum), (minimum, tokens[0])]
    assert sorted((int(r.range_start), int(r.range_end)) for r in rows) == sorted(expected)
    total = sum(r.partitions_count for r in rows)
    assert abs(total - 2000) <= len(rows), total  # each range's estimate is rounded
    assert all(r.mean_partition_size >= 100 for r in rows)


def test_read_failure_names_the_failing_replica(session, keyspace):
    """A replica failing a read (GROUP BY floor() of a time before its start) is ReadFailure
    whose failure map (v5) names the replica, as Cassandra's does: here the node itself."""
    session.execute(f"CREATE TABLE IF NOT EXISTS {keyspace}.floored "
                    "(k int, ts timestamp, v int, PRIMARY KEY (k, ts))")
    session.execute(f"INSERT INTO {keyspace}.floored (k, ts, v) VALUES (1, '1969-12-31 23:30:00', 4)")
    with pytest.raises(ReadFailure) as e:
        session.execute(f"SELECT k, floor(ts, 1y), count(*) FROM {keyspace}.floored "
                        "WHERE k = 1 GROUP BY k, floor(ts, 1y)")
    assert e.value.failures == 1
    if session.cluster.protocol_version >= ProtocolVersion.V5:
        assert e.value.error_code_map is not None
        assert list(e.value.error_code_map) == [HOST], e.value.error_code_map
