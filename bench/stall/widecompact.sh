#!/usr/bin/env bash
# Compaction of one wide partition: [OP=gc] BIN LABEL [ROWS]
# A one-shard server (CPU 0, --memory 2G) gets ROWS (1000000, a multiple of 100) rows of one
# partition in unlogged batches of 100 from the Python driver (tests/compat/.venv-datastax, made by `make test`), a flush, the same
# rows again with newer values, a flush, then a major compaction (`nodetool compact`).
# Prints the compaction's seconds and the server's peak RSS (VmHWM) before the
# compaction and after it, then checks that every row reads back with its newer value.
# OP=gc: the second pass deletes the even rows (row tombstones) and writes the odd ones
# again, and `nodetool garbagecollect pg t` runs instead (each SSTable rewritten alone,
# shadowed by the other's deletions); the odd rows must read back, newer. OP=scrub:
# `nodetool scrub pg t` instead of the compaction. The read-back (pages of 5,000 rows) is
# timed too.
# BIN `cassandra`: Apache Cassandra 5.0 from bench/cassandra (installed by make bench) on
# CPU 0 with a 2G heap instead (its RSS is the JVM's: not printed).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 rows=${3:-1000000}
if [[ $bin == cassandra ]]; then
  cdata="$OUT/data-$label"; rm -rf "$cdata"
  port_free || exit 1
  CASSANDRA_CPUS=0 CASSANDRA_NATIVE_PORT=19600 "$REPO/bench/cassandra/start.sh" "$cdata" 2G > /dev/null
  trap '"$REPO/bench/cassandra/stop.sh" "$cdata" > /dev/null 2>&1; rm -rf "$cdata"' EXIT
  export NODETOOL="$REPO/bench/cassandra/nodetool.sh" SERVER_PID=
else
  start_server "$bin" "$label"
  export NODETOOL="$S nodetool -h 127.0.0.1 -p 19602" SERVER_PID=$P
fi
"$REPO/tests/compat/.venv-datastax/bin/python" - "$label" "$rows" <<'PY'
import os, subprocess, sys, time
from cassandra.cluster import Cluster
from cassandra.concurrent import execute_concurrent_with_args
label, rows = sys.argv[1], int(sys.argv[2])
op = os.environ.get('OP', 'compact')
gc = op == 'gc'
nt = os.environ['NODETOOL'].split()
def hwm():
    if not os.environ['SERVER_PID']:
        return "-"
    for l in open(f"/proc/{os.environ['SERVER_PID']}/status"):
        if l.startswith("VmHWM"):
            return int(l.split()[1]) // 1024
s = Cluster(['127.0.0.1'], port=19600).connect()
s.execute("CREATE KEYSPACE pg WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")
# OP=gc: the SSTables of both passes as garbagecollect finds them (not compacted meanwhile).
s.execute("CREATE TABLE pg.t (k int, c int, v text, PRIMARY KEY (k, c))" + (
    " WITH compaction = {'class': 'SizeTieredCompactionStrategy', 'min_threshold': 32}" if gc else ""))
# Unlogged batches of 100 rows (one statement a row took the Python client ~25 min for
# 3M rows twice).
for val in ("first-xxxxxxxxxxxxxxxxx", "second-xxxxxxxxxxxxxxxx"):
    one = lambda j: (f"DELETE FROM pg.t WHERE k = 0 AND c = ?;" if gc and val.startswith("second") and j % 2 == 0
                     else f"INSERT INTO pg.t (k, c, v) VALUES (0, ?, '{val}');")
    ins = s.prepare("BEGIN UNLOGGED BATCH " + " ".join(one(j) for j in range(100)) + " APPLY BATCH")
    assert rows % 100 == 0, rows
    for b in range(0, rows, 100000):
        execute_concurrent_with_args(
            s, ins, [tuple(range(i, i + 100)) for i in range(b, min(rows, b + 100000), 100)], concurrency=32)
    subprocess.run(nt + ['flush'], check=True, stdout=subprocess.DEVNULL)
before = hwm()
if gc:
    sst = [l for l in subprocess.run(nt + ['tablestats', 'pg.t'], check=True, capture_output=True, text=True).stdout.splitlines() if 'SSTable count' in l]
    print(f"{label}: before garbagecollect: {sst[0].strip() if sst else '?'}", flush=True)
t = time.time()
cmd = {'compact': ['compact'], 'gc': ['garbagecollect', 'pg', 't'], 'scrub': ['scrub', 'pg', 't']}[op]
subprocess.run(nt + cmd, check=True, stdout=subprocess.DEVNULL)
el = time.time() - t
print(f"{label}: {cmd[0]} of {rows} rows x 2 SSTables in {el:.2f} s; peak RSS {before} MB before, {hwm()} MB after", flush=True)
t = time.time()
sel = s.prepare("SELECT c, v FROM pg.t WHERE k = 0")
sel.fetch_size = 5000
n = 0
for r in s.execute(sel):
    assert r.v.startswith("second"), r
    n += 1
assert n == (rows // 2 if gc else rows), n
print(f"{label}: {n} rows read back, all newer, in {time.time() - t:.2f} s")
PY
