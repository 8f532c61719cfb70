#!/usr/bin/env bash
# Paging through one wide partition held in the memtable: BIN LABEL [ROWS]
# (BIN `cassandra`: Apache Cassandra from bench/cassandra instead.)
# A one-shard server (CPU 0) gets ROWS (200000) rows of one partition from the Python
# driver (tests/compat/.venv-datastax, made by `make test`), then the whole partition is
# read twice with a prepared SELECT at 5,000 rows a page; prints each round's seconds.
# ORDER=DESC reads it in reverse clustering order (ORDER BY c DESC). FLUSH=1 flushes it
# to an SSTable before reading (a partition over the row cache's size limit is then read
# from the SSTable for every page). RANGES=N then runs N queries of 100 consecutive rows
# at random places in the partition (`c >= x AND c < x + 100`, one at a time) and prints
# their rate and mean latency. Each round also prints the server's CPU seconds (Amphora).
# SCAN=1 pages through the table with no partition key in the
# query (a range read, as a full-table scan does). SPLIT=N writes the rows in N runs of
# consecutive clustering values with a flush after each (N SSTables of disjoint clustering
# ranges, as time windows leave a time series partition; STCS min_threshold 32 keeps them
# apart). INTERLEAVE=N writes row c in the (c mod N)-th of N passes with a flush after each
# (N SSTables each holding every N-th row: rows updated at random over time).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 rows=${3:-200000}
export ORDER=${ORDER:-} FLUSH=${FLUSH:-} SPLIT=${SPLIT:-} INTERLEAVE=${INTERLEAVE:-} RANGES=${RANGES:-0} NODETOOL="$S nodetool -h 127.0.0.1 -p 19602"
if [[ $bin == cassandra ]]; then
  # Apache Cassandra (bench/cassandra, installed by make bench) on CPU 0 with a 2G heap.
  cdata="$OUT/data-$label"; rm -rf "$cdata"
  port_free || exit 1
  CASSANDRA_CPUS=0 CASSANDRA_NATIVE_PORT=19600 "$REPO/bench/cassandra/start.sh" "$cdata" 2G > /dev/null
  trap '"$REPO/bench/cassandra/stop.sh" "$cdata" > /dev/null 2>&1; rm -rf "$cdata"' EXIT
  NODETOOL="$REPO/bench/cassandra/nodetool.sh"
else
  start_server "$bin" "$label"
  export SERVER_PID=$P
fi
"$REPO/tests/compat/.venv-datastax/bin/python" - "$label" "$rows" <<'PY'
import os, sys, time
from cassandra.cluster import Cluster
from cassandra.concurrent import execute_concurrent_with_args
label, rows = sys.argv[1], int(sys.argv[2])
s = Cluster(['127.0.0.1'], port=19600).connect()
s.execute("CREATE KEYSPACE pg WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")
split = int(os.environ['SPLIT'] or 0)
inter = int(os.environ['INTERLEAVE'] or 0)
compaction = " WITH compaction = {'class': 'SizeTieredCompactionStrategy', 'min_threshold': 32}" if split or inter else ""
s.execute("CREATE TABLE pg.t (k int, c int, v text, PRIMARY KEY (k, c))" + compaction)
ins = s.prepare("INSERT INTO pg.t (k, c, v) VALUES (0, ?, 'value-xxxxxxxxxxxxxxxx')")
def flush():
    import subprocess
    subprocess.run(os.environ['NODETOOL'].split() + ['flush'], check=True, stdout=subprocess.DEVNULL)
# In batches: one call over a million rows had requests time out (not looked into).
step = -(-rows // split) if split else 100000
for g in range(inter):
    pas = list(range(g, rows, inter))
    for c in range(0, len(pas), 100000):
        execute_concurrent_with_args(s, ins, [(i,) for i in pas[c:c + 100000]], concurrency=128)
    flush()
for b in range(0, rows if not inter else 0, step):
    for c in range(b, min(rows, b + step), 100000):
        execute_concurrent_with_args(s, ins, [(i,) for i in range(c, min(rows, b + step, c + 100000))], concurrency=128)
    if split:
        flush()
if os.environ['FLUSH']:
    flush()
order = f" ORDER BY c {os.environ['ORDER']}" if os.environ['ORDER'] else ""
# SCAN=1: the same rows through a range read (no partition key: a full-table scan).
where = "" if os.environ.get("SCAN") else " WHERE k = 0"
sel = s.prepare("SELECT c, v FROM pg.t" + where + order)
sel.fetch_size = 5000
def cpu():
    # The server's CPU seconds (user + system), when it is Amphora.
    pid = os.environ.get('SERVER_PID')
    if not pid:
        return 0.0
    f = open(f"/proc/{pid}/stat").read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')
for rnd in range(int(os.environ.get("ROUNDS", "2"))):
    t, c = time.time(), cpu()
    n = sum(1 for _ in s.execute(sel))
    used = f"; server CPU {cpu() - c:.2f} s" if os.environ.get('SERVER_PID') else ""
    print(f"{label} round {rnd}: {n} rows in {time.time() - t:.2f} s{used}")
nq = int(os.environ['RANGES'])
if nq:
    import random
    rng = random.Random(7)
    q = s.prepare("SELECT c, v FROM pg.t WHERE k = 0 AND c >= ? AND c < ?")
    t = time.time()
    got = 0
    for _ in range(nq):
        x = rng.randrange(rows - 100)
        got += sum(1 for _ in s.execute(q, (x, x + 100)))
    el = time.time() - t
    assert got == nq * 100, got
    print(f"{label} ranges: {nq} queries of 100 rows in {el:.2f} s: {nq / el:.0f}/s, {el / nq * 1000:.2f} ms each")
PY
