#!/usr/bin/env bash
# Which load generator holds a fixed read rate, A/B on one server: SERVER RATE SECS ROUNDS CLIENT...
# A one-shard server (SERVER, CPU 0) gets 1M standard1 keys (flushed) and 30 s of uniform
# reads at saturation (the row cache fills); then, ROUNDS times, each CLIENT binary's
# `amphora stress` (CPU 1, 128 in flight) runs SECS of uniform reads at a fixed RATE/s.
# PREFIX (e.g. `chrt -f 1`, as make bench's isolated step runs the client) goes before each
# client command. Prints per run: the rate held, p99 / p99.9 from intended start, the
# client's CPU per read (perf stat task-clock) and context switches per 1k reads, and the
# server's CPU ticks.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 rate=$2 secs=$3 rounds=$4; shift 4
start_server "$bin" fixedcap
st write n=1000000 -rate threads=128 -pop seq=1..1000000 > /dev/null
nt flush > /dev/null
st read duration=30s no-warmup -rate threads=128 -pop "dist=UNIFORM(1..1000000)" > /dev/null
srv() { awk '{print $14+$15}' "/proc/$P/stat"; }
for r in $(seq "$rounds"); do
  for c in "$@"; do
    o="$OUT/fixedcap-$r-$(basename "$c")"
    a=$(srv)
    # shellcheck disable=SC2086
    ${PREFIX:-} taskset -c 1 perf stat -x, -e task-clock,context-switches -o "$o.perf" \
      "$c" stress read duration="${secs}s" no-warmup -rate threads=128 fixed="${rate}/s" \
      -pop "dist=UNIFORM(1..1000000)" -node 127.0.0.1 -port native=19600 > "$o.out" 2>&1
    b=$(srv)
    ops=$(awk -F: '/^Op rate/ {gsub(/[ ,]/, "", $2); print $2+0}' "$o.out")
    p99=$(awk -F: '/^Latency 99th/ {split($2, x, " "); print x[1] x[2]}' "$o.out")
    p999=$(awk -F: '/^Latency 99.9th/ {split($2, x, " "); print x[1] x[2]}' "$o.out")
    tc=$(awk -F, '/task-clock/ {print $1}' "$o.perf")
    cs=$(awk -F, '/context-switches/ {print $1}' "$o.perf")
    awk -v n="$(basename "$c")" -v r="$r" -v ops="$ops" -v p99="$p99" -v p999="$p999" \
      -v tc="$tc" -v cs="$cs" -v secs="$secs" -v srv=$((b - a)) 'BEGIN {
      total = ops * secs
      printf "%d %-16s held %7d/s  p99 %10s  p99.9 %10s  client %5.2f us/read %5.2f cs/1k  server %3.0f%%\n",
        r, n, ops, p99, p999, tc * 1000 / total, cs * 1000 / total, srv / secs }'
  done
done
kill "$P"; wait "$P" 2>/dev/null
