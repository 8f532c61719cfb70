"""Shared fixtures for the python compatibility suite.

The same files run in two venvs: `.venv-datastax` (cassandra-driver + Apache cqlsh) and
`.venv-scylla` (scylla-driver + scylla-cqlsh). Both drivers import as `cassandra`.

Environment (set by ../run.sh):
  COMPAT_HOST, COMPAT_PORT   the CQL endpoint (default 127.0.0.1:9042)
  COMPAT_PEER                `amphora` (default) or `cassandra`; `cassandra` skips every
                             check of a ScyllaDB extension (shards, metrics)
  COMPAT_METRICS_URL         Prometheus endpoint of the server under test (amphora only)
  COMPAT_CQLSH               path of the cqlsh executable of this venv's flavour
"""

import importlib.util
import os
import time
import uuid

import pytest

from cassandra.cluster import Cluster

import rawproto

HOST = os.environ.get("COMPAT_HOST", "127.0.0.1")
PORT = int(os.environ.get("COMPAT_PORT", "9042"))
PEER = os.environ.get("COMPAT_PEER", "amphora")
METRICS_URL = os.environ.get("COMPAT_METRICS_URL", "http://127.0.0.1:9180/metrics")

# scylla-driver ships cassandra/shard_info.py; the DataStax driver does not.
IS_SCYLLA_DRIVER = importlib.util.find_spec("cassandra.shard_info") is not None
FLAVOUR = "scylla" if IS_SCYLLA_DRIVER else "datastax"


def _server_supported():
    try:
        return rawproto.options(HOST, PORT)
    except OSError as e:
        pytest.exit(f"cannot reach CQL server at {HOST}:{PORT}: {e}", returncode=3)


SUPPORTED = None


def server_supported():
    global SUPPORTED
    if SUPPORTED is None:
        SUPPORTED = _server_supported()
    return SUPPORTED


def server_is_sharded():
    """True when the server advertises ScyllaDB's sharding extension and is not a peer
    known to lack it."""
    return PEER != "cassandra" and "SCYLLA_NR_SHARDS" in server_supported()


def new_cluster(**kw):
    kw.setdefault("contact_points", [HOST])
    kw.setdefault("port", PORT)
    kw.setdefault("connect_timeout", 10)
    kw.setdefault("control_connection_timeout", 10)
    return Cluster(**kw)


@pytest.fixture(scope="session")
def cluster():
    c = new_cluster()
    c.connect()
    yield c
    c.shutdown()


@pytest.fixture(scope="session")
def session(cluster):
    s = cluster.connect()
    s.default_timeout = 30
    return s


@pytest.fixture(scope="session")
def keyspace(session):
    """A keyspace private to this run and driver flavour, dropped at the end."""
    name = f"compat_{FLAVOUR}_{uuid.uuid4().hex[:8]}"
    session.execute(
        f"CREATE KEYSPACE {name} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    yield name
    try:
        session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=60)
    except Exception as e:  # cleanup must not hide the real result
        print(f"warning: could not drop {name}: {e}")


def wait_until(pred, timeout_s=15.0, interval_s=0.2, what="condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
