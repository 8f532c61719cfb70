#!/usr/bin/env bash
# Issue 3's transport target, end to end: prepared single-row reads of cached `standard1`
# rows over ONE client connection with 128 in flight, the server pinned to one core and the
# client on the other. `make bench-connection` runs it; numbers go to docs/benchmarks.md.
#
# What runs: release `amphora server --smp 1` pinned to CPU 0 (the real coordinator,
# replica, storage and row cache; nothing faked), `amphora stress` pinned to CPU 1. A
# one-shard node gives the scylla driver inside `amphora stress` a pool of exactly one
# connection (plus its control connection, which carries no requests); the script checks
# that on the server's own gauge. Steps: populate N rows and flush them to an SSTable,
# warm-up reads that fill the row cache, then the measured read run at saturation (128 in
# flight). Printed: the
# client's op rate and latency, the server's CPU share during the run, row-cache hits and
# misses during the run, and the connections the server saw.
#
# Environment: BENCH_SKIP_BUILD=1 (use target/release/amphora or AMPHORA_BIN),
# CONN_ROWS (100000), CONN_WARMUP_S (20), CONN_S (30), CONN_THREADS (128),
# CONN_PORT (39042; the node also takes CONN_PORT+1 shard-aware, +2 Prometheus, +3 REST).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
rows="${CONN_ROWS:-100000}"
warmup="${CONN_WARMUP_S:-20}"
secs="${CONN_S:-30}"
threads="${CONN_THREADS:-128}"
port="${CONN_PORT:-39042}"
prom=$((port + 2))

[[ "$(nproc)" -ge 2 ]] || { echo "needs 2 CPUs (server and client on separate cores)" >&2; exit 1; }
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  cargo build --release -p amphora
fi
bin="${AMPHORA_BIN:-$root/target/release/amphora}"
[[ -x "$bin" ]] || { echo "no amphora binary at $bin" >&2; exit 1; }

work="$(mktemp -d /tmp/amphora-bench-conn.XXXXXX)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

metric() { # sum of a Prometheus metric's samples
  curl -sf "http://127.0.0.1:$prom/metrics" |
    awk -v m="$1" '$1 == m || index($1, m "{") == 1 {s += $2} END {printf "%d", s}'
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "[conn] $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(uptime)"
taskset -c 0 "$bin" server --data-dir "$work/data" --smp 1 --memory 2G \
  --native-transport-port "$port" --native-shard-aware-transport-port $((port + 1)) \
  --prometheus-port "$prom" --api-port $((port + 3)) >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$prom/metrics" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.1
done

stress() { taskset -c 1 "$bin" stress "$@" -node 127.0.0.1 -port native="$port"; }
echo "[conn] populate $rows rows"
stress write n="$rows" no-warmup -pop seq=1.."$rows" -rate threads="$threads" >"$work/populate.txt"
# Into an SSTable, so that the reads below are served by the row cache (a table whose
# rows are all in its memtable is read from the memtable alone).
taskset -c 1 "$bin" nodetool -p $((port + 3)) flush keyspace1 standard1 >"$work/flush.txt"
echo "[conn] warm-up reads ${warmup}s (fills the row cache)"
stress read duration="${warmup}s" no-warmup -pop "dist=uniform(1..$rows)" -rate threads="$threads" >"$work/warmup.txt"

hits0=$(metric amphora_cache_row_hits_total)
miss0=$(metric amphora_cache_row_misses_total)
cpu0=$(cpu_ticks "$server_pid")
t0=$(date +%s.%N)
stress read duration="${secs}s" no-warmup -pop "dist=uniform(1..$rows)" -rate threads="$threads" >"$work/read.txt" &
client=$!
sleep $((secs / 2))
conns=$(metric amphora_cql_connections)
wait "$client"
t1=$(date +%s.%N)
cpu1=$(cpu_ticks "$server_pid")
hits1=$(metric amphora_cache_row_hits_total)
miss1=$(metric amphora_cache_row_misses_total)

grep -E "^(Op rate|Latency (mean|median|99th|99.9th)|Total errors)" "$work/read.txt"
awk -v c0="$cpu0" -v c1="$cpu1" -v t0="$t0" -v t1="$t1" -v hz="$(getconf CLK_TCK)" \
  'BEGIN {printf "Server CPU                : %.0f%% of its core\n", 100 * (c1 - c0) / hz / (t1 - t0)}'
echo "Row cache during the run  : $((hits1 - hits0)) hits, $((miss1 - miss0)) misses"
echo "Server connections        : $conns (one request connection + the driver's control connection)"
if [[ "$conns" -gt 2 ]]; then
  echo "more than one request connection: the figure above is not a one-connection figure" >&2
  exit 1
fi
