#!/usr/bin/env bash
# Compaction of one wide partition: BIN LABEL [ROWS]
# A one-shard server (CPU 0, --memory 2G) gets ROWS (1000000) rows of one partition from
# the Python driver (tests/compat/.venv-datastax, made by `make test`), a flush, the same
# rows again with newer values, a flush, then a major compaction (`nodetool compact`).
# Prints the compaction's seconds and the server's peak RSS (VmHWM) before the
# compaction and after it, then checks that every row reads back with its newer value.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 rows=${3:-1000000}
start_server "$bin" "$label"
export NODETOOL="$S nodetool -h 127.0.0.1 -p 19602" SERVER_PID=$P
"$REPO/tests/compat/.venv-datastax/bin/python" - "$label" "$rows" <<'PY'
import os, subprocess, sys, time
from cassandra.cluster import Cluster
from cassandra.concurrent import execute_concurrent_with_args
label, rows = sys.argv[1], int(sys.argv[2])
nt = os.environ['NODETOOL'].split()
def hwm():
    for l in open(f"/proc/{os.environ['SERVER_PID']}/status"):
        if l.startswith("VmHWM"):
            return int(l.split()[1]) // 1024
s = Cluster(['127.0.0.1'], port=19600).connect()
s.execute("CREATE KEYSPACE pg WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")
s.execute("CREATE TABLE pg.t (k int, c int, v text, PRIMARY KEY (k, c))")
for val in ("first-xxxxxxxxxxxxxxxxx", "second-xxxxxxxxxxxxxxxx"):
    ins = s.prepare(f"INSERT INTO pg.t (k, c, v) VALUES (0, ?, '{val}')")
    for b in range(0, rows, 100000):
        execute_concurrent_with_args(s, ins, [(i,) for i in range(b, min(rows, b + 100000))], concurrency=128)
    subprocess.run(nt + ['flush'], check=True, stdout=subprocess.DEVNULL)
before = hwm()
t = time.time()
subprocess.run(nt + ['compact'], check=True, stdout=subprocess.DEVNULL)
el = time.time() - t
print(f"{label}: compaction of {rows} rows x 2 SSTables in {el:.2f} s; peak RSS {before} MB before, {hwm()} MB after")
sel = s.prepare("SELECT c, v FROM pg.t WHERE k = 0")
sel.fetch_size = 5000
n = 0
for r in s.execute(sel):
    assert r.v.startswith("second"), r
    n += 1
assert n == rows, n
print(f"{label}: {n} rows read back, all newer")
PY
