"""ScyllaDB's sharding extension as scylla-driver uses it: one connection per shard, the
shard-aware port, and requests landing on the shard that owns the token.

Skipped with cassandra-driver, and against servers without SCYLLA_NR_SHARDS in SUPPORTED
or with COMPAT_PEER=cassandra. The routing check reads the server's per-shard request
counter `amphora_cql_requests_total{shard="N"}` from COMPAT_METRICS_URL."""

import re
import struct
import time
import urllib.request

import pytest

from cassandra.metadata import Murmur3Token

from conftest import IS_SCYLLA_DRIVER, METRICS_URL, server_is_sharded, server_supported, \
    wait_until


@pytest.fixture(scope="module", autouse=True)
def _only_sharded():
    if not IS_SCYLLA_DRIVER:
        pytest.skip("needs scylla-driver (shard-aware)")
    if not server_is_sharded():
        pytest.skip("server does not advertise SCYLLA_NR_SHARDS (or COMPAT_PEER=cassandra)")


def nr_shards():
    return int(server_supported()["SCYLLA_NR_SHARDS"][0])


def _host(cluster):
    return cluster.metadata.all_hosts()[0]


def _full_pool(session, host):
    pool = session._pools[host]
    wait_until(lambda: len(pool._connections) == nr_shards(), timeout_s=20,
               what=f"one pooled connection per shard ({nr_shards()})")
    return pool


METRIC_LINE = re.compile(r'^amphora_cql_requests_total\{([^}]*)\}\s+(\S+)', re.M)


def read_shard_counters():
    with urllib.request.urlopen(METRICS_URL, timeout=10) as r:
        text = r.read().decode()
    counts = {}
    for labels, value in METRIC_LINE.findall(text):
        m = re.search(r'shard="(\d+)"', labels)
        if m:
            shard = int(m.group(1))
            counts[shard] = counts.get(shard, 0.0) + float(value)
    return counts


def test_sharding_info_from_supported(cluster):
    info = _host(cluster).sharding_info
    assert info is not None, "driver did not pick up sharding info"
    sup = server_supported()
    assert info.shards_count == nr_shards()
    assert info.sharding_ignore_msb == int(sup["SCYLLA_SHARDING_IGNORE_MSB"][0])
    assert info.shard_aware_port == int(sup["SCYLLA_SHARD_AWARE_PORT"][0])


def test_one_connection_per_shard(cluster, session):
    host = _host(cluster)
    pool = _full_pool(session, host)
    n = nr_shards()
    assert sorted(pool._connections) == list(range(n))
    aware_port = host.sharding_info.shard_aware_port
    via_aware = 0
    for shard, conn in pool._connections.items():
        assert conn.features.shard_id == shard
        assert conn.features.sharding_info.shards_count == n
        if conn.endpoint.port == aware_port:
            via_aware += 1
            local_port = conn._socket.getsockname()[1]
            assert local_port % n == shard, \
                f"shard-aware port gave shard {shard} to source port {local_port}"
    if n > 1:
        assert via_aware >= 1, "driver never used the shard-aware port"


def test_requests_land_on_owning_shard(cluster, session, keyspace):
    host = _host(cluster)
    _full_pool(session, host)
    info = host.sharding_info
    n = nr_shards()
    t = f"{keyspace}.shardroute"
    session.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, v int)")
    ins = session.prepare(f"INSERT INTO {t} (k, v) VALUES (?, ?)")
    sel = session.prepare(f"SELECT v FROM {t} WHERE k = ?")
    # Let the driver's debounced schema refresh (triggered by the CREATE's pushed event,
    # window 2 s by default) run before counting, so its queries do not blur the deltas.
    time.sleep(2.5)

    key_for_shard = {}
    k = 0
    while len(key_for_shard) < n:
        token = Murmur3Token.from_key(struct.pack(">i", k)).value
        key_for_shard.setdefault(info.shard_id_from_token(token), k)
        k += 1

    before_all = read_shard_counters()
    assert sorted(before_all) == list(range(n)), \
        f"expected amphora_cql_requests_total for shards 0..{n - 1}, got {sorted(before_all)}"

    requests = 40
    for shard, key in sorted(key_for_shard.items()):
        before = read_shard_counters()
        for i in range(requests // 2):
            session.execute(ins, [key, i])
            session.execute(sel, [key])
        after = read_shard_counters()
        delta = {s: after.get(s, 0) - before.get(s, 0) for s in range(n)}
        assert delta[shard] >= requests, f"owner shard {shard}: {delta}"
        others = max((d for s, d in delta.items() if s != shard), default=0)
        assert others < requests // 2, f"requests for shard {shard} landed elsewhere: {delta}"
