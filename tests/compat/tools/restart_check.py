"""Data and schema survive a clean restart: `write` before SIGTERM, `read` after the
server came back on the same data dir (run.sh's `restart` suite). Target from COMPAT_HOST
and COMPAT_PORT."""

import os
import sys

from cassandra.cluster import Cluster

KS = "compat_restart"
ROWS = 200


def session():
    c = Cluster([os.environ.get("COMPAT_HOST", "127.0.0.1")],
                port=int(os.environ.get("COMPAT_PORT", "9042")), connect_timeout=10)
    s = c.connect()
    s.default_timeout = 30
    return c, s


def write():
    c, s = session()
    try:
        s.execute(f"DROP KEYSPACE IF EXISTS {KS}")
        s.execute(f"CREATE KEYSPACE {KS} WITH replication = "
                  "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        s.execute(f"CREATE TYPE {KS}.pt (x int, y int)")
        s.execute(f"CREATE TABLE {KS}.t (p int, c int, v text, pt frozen<pt>, "
                  "PRIMARY KEY (p, c)) WITH CLUSTERING ORDER BY (c DESC)")
        ins = s.prepare(f"INSERT INTO {KS}.t (p, c, v, pt) VALUES (?, ?, ?, {{x: ?, y: ?}})")
        for i in range(ROWS):
            s.execute(ins, [i % 10, i, f"value-{i}", i, -i])
        s.execute(f"DELETE FROM {KS}.t WHERE p = 0 AND c = 0")
        print(f"restart_check: wrote {ROWS} rows and deleted 1")
    finally:
        c.shutdown()


def read():
    c, s = session()
    try:
        ks = c.metadata.keyspaces.get(KS)
        assert ks is not None, f"keyspace {KS} lost across the restart"
        assert "pt" in ks.user_types, "type pt lost across the restart"
        t = ks.tables.get("t")
        assert t is not None, "table t lost across the restart"
        assert t.columns["c"].is_reversed, "clustering order lost across the restart"
        rows = {(r.p, r.c): (r.v, tuple(r.pt)) for r in s.execute(f"SELECT * FROM {KS}.t")}
        want = {(i % 10, i): (f"value-{i}", (i, -i)) for i in range(1, ROWS)}
        missing = sorted(set(want) - set(rows))
        extra = sorted(set(rows) - set(want))
        assert not missing and not extra, f"missing {missing[:5]}, unexpected {extra[:5]}"
        assert rows == want, "values changed across the restart"
        s.execute(f"DROP KEYSPACE {KS}")
        print(f"restart_check: all {ROWS - 1} rows, the delete and the schema survived")
    finally:
        c.shutdown()


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("write", "read"):
        sys.exit("usage: restart_check.py write|read")
    try:
        write() if mode == "write" else read()
    except AssertionError as e:
        print(f"restart_check: FAIL: {e}")
        sys.exit(1)
